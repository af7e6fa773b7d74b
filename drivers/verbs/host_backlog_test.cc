// File: drivers/verbs/host_backlog_test.cc
//
// HostBacklogIndex against a std::map oracle, and HostBacklogReader on shim tables in a temp dir:
// live writers in this and a forked process, repeated reads, dead writers, and garbage, truncated,
// wrong-version and non-regular files (reported, never a crash).
#include "drivers/verbs/host_backlog.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "drivers/verbs/shim/backlog_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::verbs {
namespace {

using shim::BacklogSlot;
using shim::BacklogWriter;
using shim::QpPeer;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Ip = std::array<uint8_t, 16>;

Ip V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}
const Ip kV6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};

// ---------------------------------------------------------------------------------------------
// Index.

TEST(HostBacklogIndexTest, EmptyIndexKnowsNothing) {
  auto index = HostBacklogIndex::Build({});
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->size(), 0u);
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 1), 5), 0u);
  EXPECT_EQ(index->Find(Ip{}, 0), nullptr);
}

TEST(HostBacklogIndexTest, HitsAndMissesOnV4MappedAndV6Keys) {
  const std::vector<HostBacklogIndex::Entry> entries = {
      {V4(10, 0, 0, 1), 0x100, 4096, 2},
      {V4(10, 0, 0, 2), 0x100, 0, 0},  // connected, nothing queued
      {kV6, 0xabcdef, 7, 1},
  };
  auto index = HostBacklogIndex::Build(entries);
  EXPECT_EQ(index->size(), 3u);
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 1), 0x100), 4096u);
  EXPECT_EQ(index->LookupBytes(kV6, 0xabcdef), 7u);
  ASSERT_NE(index->Find(V4(10, 0, 0, 1), 0x100), nullptr);
  EXPECT_EQ(index->Find(V4(10, 0, 0, 1), 0x100)->backlog_wqes, 2u);
  // Known with no backlog, versus unknown.
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 2), 0x100), 0u);
  EXPECT_NE(index->Find(V4(10, 0, 0, 2), 0x100), nullptr);
  EXPECT_EQ(index->Find(V4(10, 0, 0, 1), 0x101), nullptr);  // other QPN
  EXPECT_EQ(index->Find(V4(10, 0, 0, 3), 0x100), nullptr);  // other address
  // The same four bytes not v4-mapped (::10.0.0.1) are another address.
  const Ip compat = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1};
  EXPECT_EQ(index->Find(compat, 0x100), nullptr);
  Ip v6_other = kV6;
  v6_other[0] ^= 1;
  EXPECT_EQ(index->Find(v6_other, 0xabcdef), nullptr);
}

TEST(HostBacklogIndexTest, QpnsAreTwentyFourBits) {
  auto index = HostBacklogIndex::Build(
      std::vector<HostBacklogIndex::Entry>{{V4(10, 0, 0, 1), 0xff000005, 11, 1}});
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 1), 5), 11u);
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 1), 0x01000005), 11u);  // as a BTH field would mask
  EXPECT_EQ(index->Find(V4(10, 0, 0, 1), 5)->dest_qpn, 5u);
}

TEST(HostBacklogIndexTest, DuplicatesAreSummedSaturating) {
  const uint64_t kMax = ~uint64_t{0};
  auto index = HostBacklogIndex::Build(std::vector<HostBacklogIndex::Entry>{
      {V4(10, 0, 0, 1), 7, 100, 1},
      {V4(10, 0, 0, 9), 7, 5, 5},
      {V4(10, 0, 0, 1), 7, 23, 2},
      {kV6, 1, kMax - 1, 0},
      {kV6, 1, 10, 0},
  });
  EXPECT_EQ(index->size(), 3u);
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 1), 7), 123u);
  EXPECT_EQ(index->Find(V4(10, 0, 0, 1), 7)->backlog_wqes, 3u);
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 9), 7), 5u);
  EXPECT_EQ(index->LookupBytes(kV6, 1), kMax);
}

TEST(HostBacklogIndexTest, LargeRandomSetMatchesAStdMapOracle) {
  std::mt19937_64 rng(20240611);
  // Few addresses and a narrow QPN range, so duplicates and probe clusters are common.
  std::vector<Ip> addresses;
  for (int i = 0; i < 300; ++i) {
    Ip ip;
    if (i % 3 == 0) {
      for (uint8_t& b : ip) b = static_cast<uint8_t>(rng());
    } else {
      ip = V4(10, static_cast<uint8_t>(rng()), static_cast<uint8_t>(rng()),
              static_cast<uint8_t>(rng()));
    }
    addresses.push_back(ip);
  }
  std::map<std::pair<Ip, uint32_t>, std::pair<uint64_t, uint64_t>> oracle;
  std::vector<HostBacklogIndex::Entry> entries;
  for (int i = 0; i < 60000; ++i) {
    HostBacklogIndex::Entry e{addresses[rng() % addresses.size()],
                              static_cast<uint32_t>(rng() % 500), rng() % 100000, rng() % 64};
    entries.push_back(e);
    auto& sum = oracle[{e.peer_ip, e.dest_qpn}];
    sum.first += e.backlog_bytes;
    sum.second += e.backlog_wqes;
  }
  auto index = HostBacklogIndex::Build(entries);
  EXPECT_EQ(index->size(), oracle.size());
  for (const auto& [key, sum] : oracle) {
    const HostBacklogIndex::Entry* e = index->Find(key.first, key.second);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->backlog_bytes, sum.first);
    EXPECT_EQ(e->backlog_wqes, sum.second);
    EXPECT_EQ(e->peer_ip, key.first);
    EXPECT_EQ(e->dest_qpn, key.second);
  }
  for (int i = 0; i < 100000; ++i) {
    const Ip& ip = addresses[rng() % addresses.size()];
    const uint32_t qpn = static_cast<uint32_t>(rng() % 1000);
    auto it = oracle.find({ip, qpn});
    EXPECT_EQ(index->LookupBytes(ip, qpn), it == oracle.end() ? 0 : it->second.first);
  }
}

TEST(HostBacklogIndexTest, PairsNameTheRequestQpnOfAResponse) {
  constexpr uint32_t kNoPair = HostBacklogIndex::kNoPair;
  // Local QP 0x10 talks to 10.0.0.2's QP 0x500, local QP 0x11 to kV6's QP 0x501; local QP 0x12
  // to 10.0.0.2's QP 0x502. The last entry has no local QPN: it has a backlog, not a pair.
  const std::vector<HostBacklogIndex::Entry> entries = {
      {V4(10, 0, 0, 2), 0x500, 4096, 2, 0x10},
      {kV6, 0x501, 0, 0, 0x11},
      {V4(10, 0, 0, 2), 0x502, 0, 0, 0x12},
      {V4(10, 0, 0, 7), 0x503, 9, 1},
  };
  auto index = HostBacklogIndex::Build(entries);
  EXPECT_EQ(index->size(), 4u);
  EXPECT_EQ(index->pairs(), 3u);
  EXPECT_EQ(index->ambiguous_pairs(), 0u);
  // A response from the peer carries the local QPN.
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 2), 0x10), 0x500u);
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 2), 0x12), 0x502u);
  EXPECT_EQ(index->PairedDestQpn(kV6, 0x11), 0x501u);
  // 24-bit, as a BTH field is.
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 2), 0x7f000010), 0x500u);
  // The request key is not the response key: the peer's QPN names no pair, nor does another
  // peer, nor the local QPN of another peer's QP, nor a QP without a local QPN.
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 2), 0x500), kNoPair);
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 3), 0x10), kNoPair);
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 2), 0x11), kNoPair);
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 7), HostBacklogIndex::kNoLocalQpn), kNoPair);
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 7), 0xffffff), kNoPair);
  // The pair lookups never disturb the backlog ones.
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 2), 0x500), 4096u);
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 7), 0x503), 9u);
  // An empty index pairs nothing.
  EXPECT_EQ(HostBacklogIndex::Build({})->PairedDestQpn(V4(10, 0, 0, 2), 0x10), kNoPair);
}

TEST(HostBacklogIndexTest, AmbiguousPairsAreNotPaired) {
  // Two QPs with local QPN 0x10 (two devices) connected to one peer, to different remote QPs:
  // a response to "0x10" cannot be told apart. The same key twice with the same remote QPN (a
  // duplicate) is one pair.
  auto index = HostBacklogIndex::Build(std::vector<HostBacklogIndex::Entry>{
      {V4(10, 0, 0, 2), 0x500, 1, 1, 0x10},
      {V4(10, 0, 0, 2), 0x600, 2, 1, 0x10},
      {V4(10, 0, 0, 2), 0x700, 3, 1, 0x10},
      {V4(10, 0, 0, 3), 0x800, 4, 1, 0x20},
      {V4(10, 0, 0, 3), 0x800, 5, 1, 0x20},
  });
  EXPECT_EQ(index->pairs(), 2u);
  EXPECT_EQ(index->ambiguous_pairs(), 1u);
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 2), 0x10), HostBacklogIndex::kNoPair);
  EXPECT_EQ(index->PairedDestQpn(V4(10, 0, 0, 3), 0x20), 0x800u);
  // Their backlogs are still known, per remote QP.
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 2), 0x600), 2u);
  EXPECT_EQ(index->LookupBytes(V4(10, 0, 0, 3), 0x800), 9u);
}

TEST(HostBacklogIndexTest, PairsOfALargeRandomSetMatchAStdMapOracle) {
  std::mt19937_64 rng(20240612);
  std::vector<Ip> addresses;
  for (int i = 0; i < 200; ++i) {
    addresses.push_back(V4(10, static_cast<uint8_t>(rng()), static_cast<uint8_t>(rng()),
                           static_cast<uint8_t>(rng())));
  }
  // (peer, local) -> dest, or kNoPair once two disagree.
  std::map<std::pair<Ip, uint32_t>, uint32_t> oracle;
  std::vector<HostBacklogIndex::Entry> entries;
  for (int i = 0; i < 50000; ++i) {
    HostBacklogIndex::Entry e{addresses[rng() % addresses.size()], static_cast<uint32_t>(rng() % 4),
                              1, 1, static_cast<uint32_t>(rng() % 2000)};
    entries.push_back(e);
    auto [it, inserted] = oracle.emplace(std::make_pair(e.peer_ip, e.local_qpn), e.dest_qpn);
    if (!inserted && it->second != e.dest_qpn) it->second = HostBacklogIndex::kNoPair;
  }
  auto index = HostBacklogIndex::Build(entries);
  EXPECT_EQ(index->pairs(), oracle.size());
  size_t ambiguous = 0;
  for (const auto& [key, dest] : oracle) {
    EXPECT_EQ(index->PairedDestQpn(key.first, key.second), dest);
    ambiguous += dest == HostBacklogIndex::kNoPair;
  }
  EXPECT_GT(ambiguous, 0u);
  EXPECT_EQ(index->ambiguous_pairs(), ambiguous);
  for (int i = 0; i < 50000; ++i) {
    const Ip& ip = addresses[rng() % addresses.size()];
    const uint32_t local = static_cast<uint32_t>(rng() % 4000);
    auto it = oracle.find({ip, local});
    EXPECT_EQ(index->PairedDestQpn(ip, local),
              it == oracle.end() ? HostBacklogIndex::kNoPair : it->second);
  }
}

// ---------------------------------------------------------------------------------------------
// Reader.

class HostBacklogReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/heddle-host-backlog-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    scratch_ = dir_ + "-scratch";
    std::filesystem::create_directory(scratch_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    std::filesystem::remove_all(scratch_);
  }

  std::string Path(pid_t pid) const { return BacklogWriter::PathFor(dir_, pid); }

  static void WriteFile(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  static std::string ReadFile(const std::string& path) {
    std::string s(std::filesystem::file_size(path), '\0');
    FILE* f = std::fopen(path.c_str(), "rb");
    EXPECT_EQ(std::fread(s.data(), 1, s.size(), f), s.size());
    std::fclose(f);
    return s;
  }
  // The bytes of a table written by this process (header pid = ours, then patched to `pid`),
  // after `fill` ran on its writer.
  std::string TableBytes(pid_t pid, const std::function<void(BacklogWriter&)>& fill = {}) {
    const std::string p = scratch_ + "/t";
    auto w = BacklogWriter::Create(p, 64);
    EXPECT_TRUE(w.ok()) << w.status();
    if (fill) fill(**w);
    std::string bytes = ReadFile(p);
    const int32_t pid32 = pid;
    std::memcpy(bytes.data() + offsetof(shim::BacklogHeader, pid), &pid32, sizeof(pid32));
    return bytes;
  }

  std::string dir_;
  std::string scratch_;
};

// Posts `bytes` unsignaled on QP `qpn` after connecting it to (ip, dest_qpn).
void Connect(BacklogWriter& w, uint32_t qpn, const Ip& ip, uint32_t dest_qpn, uint64_t bytes) {
  ASSERT_TRUE(w.RecordPeer(qpn, QpPeer{.dest_qpn = dest_qpn, .dgid = ip}));
  if (bytes > 0) w.SlotFor(qpn)->OnPosted(bytes, false);
}

// A table written by a live child process: the child creates it, runs `fill`, and waits until the
// object is destroyed.
class ChildTable {
 public:
  ChildTable(const std::string& dir, const std::function<void(BacklogWriter&)>& fill) {
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(up[0]);
      close(down[1]);
      auto w = BacklogWriter::Create(BacklogWriter::PathFor(dir, getpid()), 64);
      if (w.ok()) fill(**w);
      const char ok = w.ok() ? 'y' : 'n';
      (void)!write(up[1], &ok, 1);
      char c;
      (void)!read(down[0], &c, 1);  // until the parent closes its end
      _exit(0);                     // the writer is not destroyed: the parent cleans the dir
    }
    close(up[1]);
    close(down[0]);
    to_child_ = down[1];
    char ok = 'n';
    ready_ = read(up[0], &ok, 1) == 1 && ok == 'y';
    close(up[0]);
  }
  ~ChildTable() {
    if (to_child_ >= 0) close(to_child_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  bool ready_ = false;
};

TEST_F(HostBacklogReaderTest, JoinsLiveTablesToWireKeys) {
  auto mine = BacklogWriter::Create(Path(getpid()), 64);
  ASSERT_TRUE(mine.ok()) << mine.status();
  Connect(**mine, 0x10, V4(10, 0, 0, 2), 0x500, 1000);
  (*mine)->SlotFor(0x11)->OnPosted(10, false);  // posted, never seen connected
  Connect(**mine, 0x12, kV6, 0x501, 0);
  // Another process, whose local QPN 0x10 collides with ours: the wire key tells them apart.
  ChildTable child(dir_, [](BacklogWriter& w) { Connect(w, 0x10, V4(10, 0, 0, 3), 0x500, 300); });
  ASSERT_TRUE(child.ready());

  HostBacklogReader reader(dir_);
  HostBacklogRead r = reader.Read();
  EXPECT_THAT(r.errors, IsEmpty());
  EXPECT_EQ(r.tables, 2u);
  EXPECT_EQ(r.qps, 4u);
  EXPECT_EQ(r.qps_without_peer, 1u);
  EXPECT_EQ(r.dead_writer_tables, 0u);
  EXPECT_EQ(r.overflow_events, 0u);
  ASSERT_NE(r.index, nullptr);
  EXPECT_EQ(r.index->size(), 3u);
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 2), 0x500), 1000u);
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 3), 0x500), 300u);
  EXPECT_EQ(r.index->Find(V4(10, 0, 0, 3), 0x500)->backlog_wqes, 1u);
  EXPECT_EQ(r.index->LookupBytes(kV6, 0x501), 0u);
  EXPECT_NE(r.index->Find(kV6, 0x501), nullptr);
  EXPECT_EQ(reader.mapped_tables(), 2u);
  // Responses carry the local QPN: each slot pairs it with its peer's QPN. The two local QPs
  // numbered 0x10 have different peers, so both are paired; the QP without a peer is not.
  EXPECT_EQ(r.index->pairs(), 3u);
  EXPECT_EQ(r.index->PairedDestQpn(V4(10, 0, 0, 2), 0x10), 0x500u);
  EXPECT_EQ(r.index->PairedDestQpn(V4(10, 0, 0, 3), 0x10), 0x500u);
  EXPECT_EQ(r.index->PairedDestQpn(kV6, 0x12), 0x501u);
  EXPECT_EQ(r.index->PairedDestQpn(V4(10, 0, 0, 2), 0x11), HostBacklogIndex::kNoPair);
}

TEST_F(HostBacklogReaderTest, RepeatedReadsFollowCountersQpsAndTables) {
  auto mine = BacklogWriter::Create(Path(getpid()), 64);
  ASSERT_TRUE(mine.ok());
  Connect(**mine, 0x10, V4(10, 0, 0, 2), 0x500, 1000);
  HostBacklogReader reader(dir_);
  EXPECT_EQ(reader.Read().index->LookupBytes(V4(10, 0, 0, 2), 0x500), 1000u);

  // New posts and completions, a new QP (a new claim), a destroyed QP.
  BacklogSlot* s = (*mine)->SlotFor(0x10);
  s->OnPosted(500, true);
  s->OnCompletion(true, true);
  s->OnPosted(24, false);
  Connect(**mine, 0x20, V4(10, 0, 0, 4), 0x600, 77);
  HostBacklogRead r = reader.Read();
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 2), 0x500), 24u);
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 4), 0x600), 77u);
  EXPECT_EQ(r.qps, 2u);

  (*mine)->RetireQp(0x10);
  r = reader.Read();
  EXPECT_EQ(r.qps, 1u);
  EXPECT_EQ(r.index->Find(V4(10, 0, 0, 2), 0x500), nullptr);
  // The remote QPN comes back on a new local QP reusing QPN 0x10: none of the old bytes.
  Connect(**mine, 0x10, V4(10, 0, 0, 2), 0x500, 5);
  r = reader.Read();
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 2), 0x500), 5u);
  EXPECT_EQ(reader.mapped_tables(), 1u);

  mine->reset();  // the process exits: its table is unlinked
  r = reader.Read();
  EXPECT_EQ(r.tables, 0u);
  EXPECT_EQ(r.index->size(), 0u);
  EXPECT_EQ(reader.mapped_tables(), 0u);
  EXPECT_THAT(r.errors, IsEmpty());
}

TEST_F(HostBacklogReaderTest, TwoLocalQpsOnOnePeerAreSummed) {
  auto mine = BacklogWriter::Create(Path(getpid()), 64);
  ASSERT_TRUE(mine.ok());
  Connect(**mine, 0x10, V4(10, 0, 0, 2), 0x500, 1000);
  ChildTable child(dir_, [](BacklogWriter& w) { Connect(w, 0x99, V4(10, 0, 0, 2), 0x500, 24); });
  ASSERT_TRUE(child.ready());
  HostBacklogRead r = ReadHostBacklog(dir_);
  EXPECT_EQ(r.index->size(), 1u);
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 2), 0x500), 1024u);
}

TEST_F(HostBacklogReaderTest, BadFilesAreReportedNotCrashedOn) {
  auto mine = BacklogWriter::Create(Path(getpid()), 64);
  ASSERT_TRUE(mine.ok());
  Connect(**mine, 0x10, V4(10, 0, 0, 2), 0x500, 1000);

  WriteFile(Path(101), "not a table");
  std::string wrong_version = TableBytes(102);
  const uint32_t v1 = 1;
  std::memcpy(wrong_version.data() + offsetof(shim::BacklogHeader, layout_version), &v1, 4);
  WriteFile(Path(102), wrong_version);
  const std::string valid = TableBytes(103);
  WriteFile(Path(103), valid.substr(0, valid.size() - 100));
  WriteFile(Path(104), TableBytes(999));  // the header names another process
  ASSERT_EQ(mkfifo(Path(105).c_str(), 0600), 0);
  std::filesystem::create_directory(Path(106));
  std::filesystem::create_symlink(Path(getpid()), Path(107));
  // Right header, random slots: read (no peers trusted beyond what the seqlock says), no crash.
  std::string noise = TableBytes(getppid());
  std::mt19937 rng(7);
  for (size_t i = sizeof(shim::BacklogHeader); i < noise.size(); ++i) {
    noise[i] = static_cast<char>(rng());
  }
  WriteFile(Path(getppid()), noise);
  // Not tables at all: ignored silently.
  WriteFile(Path(108) + ".tmp", "half made");
  WriteFile(dir_ + "/heddle-verbs-", "x");
  WriteFile(dir_ + "/heddle-verbs-12x", "x");
  WriteFile(dir_ + "/heddle-verbs-99999999999", "x");
  WriteFile(dir_ + "/nccl-shm", "x");

  HostBacklogReader reader(dir_);
  HostBacklogRead r = reader.Read();
  const std::string all = absl::StrJoin(r.errors, "\n");
  ASSERT_EQ(r.errors.size(), 7u) << all;
  EXPECT_THAT(r.errors[0], AllOf(HasSubstr(Path(101)), HasSubstr("truncated")));
  EXPECT_THAT(r.errors[1], AllOf(HasSubstr(Path(102)), HasSubstr("layout version 1")));
  EXPECT_THAT(r.errors[2], AllOf(HasSubstr(Path(103)), HasSubstr("truncated")));
  EXPECT_THAT(r.errors[3], AllOf(HasSubstr(Path(104)), HasSubstr("header names process 999")));
  EXPECT_THAT(r.errors[4], AllOf(HasSubstr(Path(105)), HasSubstr("not a regular file")));
  EXPECT_THAT(r.errors[5], AllOf(HasSubstr(Path(106)), HasSubstr("not a regular file")));
  EXPECT_THAT(r.errors[6], AllOf(HasSubstr(Path(107)), HasSubstr("not a regular file")));
  EXPECT_EQ(r.tables, 2u);  // ours and the noise
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 2), 0x500), 1000u);

  // Refusals are remembered (same lines, files not re-opened) until a file changes.
  HostBacklogRead again = reader.Read();
  EXPECT_EQ(again.errors, r.errors);
  WriteFile(Path(101), TableBytes(101));
  again = reader.Read();
  EXPECT_EQ(again.errors.size(), 6u);
  EXPECT_EQ(again.dead_writer_tables + again.tables, 3u);  // pid 101 may or may not exist
}

TEST_F(HostBacklogReaderTest, TableTruncatedWhileMappedIsDroppedAndReported) {
  WriteFile(Path(getpid()),
            TableBytes(getpid(), [](BacklogWriter& w) { Connect(w, 1, V4(10, 0, 0, 1), 2, 3); }));
  HostBacklogReader reader(dir_);
  HostBacklogRead r = reader.Read();
  EXPECT_EQ(r.tables, 1u);
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 1), 2), 3u);

  ASSERT_EQ(truncate(Path(getpid()).c_str(), 64), 0);  // reading the mapping now would SIGBUS
  r = reader.Read();
  EXPECT_EQ(r.tables, 0u);
  EXPECT_EQ(reader.mapped_tables(), 0u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0], AllOf(HasSubstr(Path(getpid())), HasSubstr("changed size")));
  r = reader.Read();
  EXPECT_EQ(r.errors.size(), 1u);
}

TEST_F(HostBacklogReaderTest, ReplacedFileOfAReusedPidIsRemapped) {
  WriteFile(Path(getpid()),
            TableBytes(getpid(), [](BacklogWriter& w) { Connect(w, 1, V4(10, 0, 0, 1), 2, 3); }));
  HostBacklogReader reader(dir_);
  EXPECT_EQ(reader.Read().index->LookupBytes(V4(10, 0, 0, 1), 2), 3u);
  // What BacklogWriter::Create does for a new process with the same pid: rename over the name.
  WriteFile(scratch_ + "/next",
            TableBytes(getpid(), [](BacklogWriter& w) { Connect(w, 1, V4(10, 0, 0, 9), 2, 40); }));
  ASSERT_EQ(rename((scratch_ + "/next").c_str(), Path(getpid()).c_str()), 0);
  HostBacklogRead r = reader.Read();
  EXPECT_EQ(r.index->Find(V4(10, 0, 0, 1), 2), nullptr);
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 9), 2), 40u);
  EXPECT_EQ(reader.mapped_tables(), 1u);
}

TEST_F(HostBacklogReaderTest, DeadWritersAreCountedAndIndexedOnlyOnRequest) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  WriteFile(Path(child),
            TableBytes(child, [](BacklogWriter& w) { Connect(w, 1, V4(10, 0, 0, 1), 2, 3); }));

  HostBacklogRead r = ReadHostBacklog(dir_);
  EXPECT_EQ(r.dead_writer_tables, 1u);
  EXPECT_EQ(r.tables, 0u);
  EXPECT_EQ(r.index->size(), 0u);
  EXPECT_THAT(r.errors, IsEmpty());

  HostBacklogReader keep_dead(dir_, HostBacklogOptions{.include_dead_writers = true});
  r = keep_dead.Read();
  EXPECT_EQ(r.dead_writer_tables, 1u);
  EXPECT_EQ(r.tables, 1u);
  EXPECT_EQ(r.index->LookupBytes(V4(10, 0, 0, 1), 2), 3u);
}

TEST_F(HostBacklogReaderTest, MaxQpsBoundsTheIndex) {
  auto mine = BacklogWriter::Create(Path(getpid()), 64);
  ASSERT_TRUE(mine.ok());
  for (uint32_t q = 1; q <= 3; ++q) Connect(**mine, q, V4(10, 0, 0, 1), q, q);
  HostBacklogReader reader(dir_, HostBacklogOptions{.max_qps = 2});
  HostBacklogRead r = reader.Read();
  EXPECT_EQ(r.index->size(), 2u);
  EXPECT_EQ(r.qps, 3u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0], HasSubstr("more than 2 connected QPs"));
}

TEST_F(HostBacklogReaderTest, MissingDirectoryIsAnErrorAndAnEmptyIndex) {
  HostBacklogRead r = ReadHostBacklog(dir_ + "/missing");
  ASSERT_NE(r.index, nullptr);
  EXPECT_EQ(r.index->size(), 0u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0], AllOf(HasSubstr(dir_ + "/missing"), HasSubstr("cannot list")));
}

}  // namespace
}  // namespace heddle::verbs
