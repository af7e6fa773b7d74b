// File: drivers/verbs/shim/backlog_table_test.cc
//
// The shared-memory backlog table: writer/reader round trip in a temp dir, concurrent writers,
// completion marks, overflow, peers under the seqlock, QP reset/retire and QPN reuse, and the
// reader refusing malformed files.
#include "drivers/verbs/shim/backlog_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::verbs::shim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class BacklogTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/heddle-backlog-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(pid_t pid) const { return BacklogWriter::PathFor(dir_, pid); }

  // Writes `bytes` as a file at `path`.
  static void WriteFile(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
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
  // A valid table's bytes, to corrupt.
  std::string ValidTableBytes(uint32_t capacity) {
    const std::string p = dir_ + "/template";
    auto w = BacklogWriter::Create(p, capacity);
    EXPECT_TRUE(w.ok()) << w.status();
    std::string bytes = ReadFile(p);
    return bytes;  // the writer unlinks its file here
  }

  std::string dir_;
};

TEST_F(BacklogTableTest, RoundTripThroughTheFile) {
  auto w = BacklogWriter::Create(Path(getpid()), 64);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->path(), dir_ + "/heddle-verbs-" + std::to_string(getpid()));

  BacklogSlot* a = (*w)->SlotFor(0x11);
  BacklogSlot* b = (*w)->SlotFor(0xabcdef);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ((*w)->SlotFor(0x11), a);  // same QPN, same slot
  EXPECT_EQ((*w)->FindSlot(0x11), a);
  EXPECT_EQ((*w)->FindSlot(0x12), nullptr);  // never claimed

  a->OnPosted(100, false);
  a->OnPosted(200, true);  // mark 0: 2 WQEs, 300 bytes
  a->OnPosted(50, true);   // mark 1: 3 WQEs, 350 bytes
  b->OnPosted(4096, true);
  a->OnCompletion(/*success=*/true, /*send_queue=*/true);  // covers the first two
  b->OnCompletion(false, false);                           // an error: counted, not settled

  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pid(), getpid());
  EXPECT_EQ(r->capacity(), 64u);
  EXPECT_GT(r->created_unix_ns(), 0);
  EXPECT_EQ(r->overflow_events(), 0u);

  std::optional<QpBacklog> qa = r->Lookup(0x11);
  ASSERT_TRUE(qa.has_value());
  EXPECT_EQ(qa->qpn, 0x11u);
  EXPECT_EQ(qa->posted_wqes, 3u);
  EXPECT_EQ(qa->posted_bytes, 350u);
  EXPECT_EQ(qa->completed_wqes, 2u);
  EXPECT_EQ(qa->completed_bytes, 300u);
  EXPECT_EQ(qa->completions, 1u);
  EXPECT_EQ(qa->backlog_bytes(), 50u);
  EXPECT_EQ(qa->backlog_wqes(), 1u);

  std::optional<QpBacklog> qb = r->Lookup(0xabcdef);
  ASSERT_TRUE(qb.has_value());
  EXPECT_EQ(qb->posted_bytes, 4096u);
  EXPECT_EQ(qb->completed_bytes, 0u);
  EXPECT_EQ(qb->completions, 1u);
  EXPECT_EQ(qb->error_completions, 1u);
  EXPECT_FALSE(r->Lookup(0x12).has_value());

  // The reader sees later writes through the shared mapping.
  a->OnCompletion(true, true);
  EXPECT_EQ(r->Lookup(0x11)->completed_bytes, 350u);
  EXPECT_EQ(r->Lookup(0x11)->backlog_bytes(), 0u);

  std::map<uint32_t, uint64_t> seen;
  r->ForEachQp([&](const QpBacklog& q) { seen[q.qpn] = q.posted_bytes; });
  EXPECT_EQ(seen, (std::map<uint32_t, uint64_t>{{0x11, 350}, {0xabcdef, 4096}}));

  // Receive completions count but do not move completed_*.
  a->OnCompletion(true, false);
  EXPECT_EQ(r->Lookup(0x11)->completions, 3u);
  EXPECT_EQ(r->Lookup(0x11)->completed_wqes, 3u);
}

TEST_F(BacklogTableTest, ReaderMapsReadOnlyAndWriterUnlinksOnDestruction) {
  std::string path;
  {
    auto w = BacklogWriter::Create(Path(getpid()), 8);
    ASSERT_TRUE(w.ok()) << w.status();
    path = (*w)->path();
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    auto r = BacklogReader::Open(path);
    ASSERT_TRUE(r.ok());
    // The reader's mapping is read-only and shared ("r--s"), the writer's read-write.
    std::ifstream maps("/proc/self/maps");
    std::vector<std::string> perms;
    for (std::string line; std::getline(maps, line);) {
      if (line.size() >= path.size() &&
          line.compare(line.size() - path.size(), path.size(), path) == 0) {
        perms.push_back(line.substr(line.find(' ') + 1, 4));
      }
    }
    std::sort(perms.begin(), perms.end());
    EXPECT_THAT(perms, ElementsAre("r--s", "rw-s"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(BacklogTableTest, ConcurrentWritersSumExactly) {
  auto w = BacklogWriter::Create(Path(getpid()), 256);
  ASSERT_TRUE(w.ok()) << w.status();
  constexpr int kThreads = 8;
  constexpr int kQps = 16;
  constexpr int kPostsPerQp = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPostsPerQp; ++i) {
        for (int q = 0; q < kQps; ++q) {
          // Every thread races to claim every QP's slot on its first pass.
          BacklogSlot* s = (*w)->SlotFor(1000 + q);
          ASSERT_NE(s, nullptr);
          s->OnPosted(static_cast<uint64_t>(t + 1), false);
          s->OnCompletion(false, false);
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok()) << r.status();
  int qps = 0;
  r->ForEachQp([&](const QpBacklog& q) {
    ++qps;
    EXPECT_EQ(q.posted_wqes, uint64_t{kThreads} * kPostsPerQp) << q.qpn;
    EXPECT_EQ(q.posted_bytes, uint64_t{kPostsPerQp} * (kThreads * (kThreads + 1) / 2)) << q.qpn;
    EXPECT_EQ(q.completions, uint64_t{kThreads} * kPostsPerQp) << q.qpn;
  });
  EXPECT_EQ(qps, kQps);  // one slot per QPN despite the racing claims
  EXPECT_EQ(r->overflow_events(), 0u);
}

// A poster and a poller on different threads, one QP, every 4th WR signaled: once all
// completions are in, completed_* equal posted_*, whichever side won each race.
TEST_F(BacklogTableTest, CompletionsRacingPostsSettleToThePostedTotals) {
  auto w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok()) << w.status();
  BacklogSlot* s = (*w)->SlotFor(7);
  ASSERT_NE(s, nullptr);
  constexpr int kWrs = 200000;  // multiple of 4
  std::atomic<int> signaled_posted{0};
  std::thread poster([&] {
    for (int i = 0; i < kWrs; ++i) {
      const bool signaled = i % 4 == 3;
      s->OnPosted(10 + i % 7, signaled);
      if (signaled) {
        signaled_posted.fetch_add(1, std::memory_order_release);
        s->SettleAfterPost();
      }
    }
  });
  std::thread poller([&] {
    // Completes each signaled WR once it is posted, but never waits for SettleAfterPost.
    for (int done = 0; done < kWrs / 4;) {
      if (done < signaled_posted.load(std::memory_order_acquire)) {
        s->OnCompletion(true, true);
        ++done;
      }
    }
  });
  poster.join();
  poller.join();
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok());
  std::optional<QpBacklog> q = r->Lookup(7);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->posted_wqes, uint64_t{kWrs});
  EXPECT_EQ(q->completed_wqes, q->posted_wqes);
  EXPECT_EQ(q->completed_bytes, q->posted_bytes);
  EXPECT_EQ(q->completions, uint64_t{kWrs / 4});
}

TEST_F(BacklogTableTest, MarkRingWrapOnlyDelaysCompletedBytes) {
  auto w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok());
  BacklogSlot* s = (*w)->SlotFor(3);
  const int n = BacklogSlot::kMarks + 5;  // more signaled WRs outstanding than marks
  for (int i = 0; i < n; ++i) s->OnPosted(100, true);
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok());
  s->OnCompletion(true, true);  // mark 0 was overwritten by mark kMarks
  EXPECT_EQ(r->Lookup(3)->completed_bytes, 0u);
  for (int i = 1; i < n; ++i) s->OnCompletion(true, true);
  EXPECT_EQ(r->Lookup(3)->completed_bytes, uint64_t{100} * n);
  EXPECT_EQ(r->Lookup(3)->completed_wqes, uint64_t(n));
}

TEST_F(BacklogTableTest, FullTableCountsOverflowInsteadOfFailing) {
  auto w = BacklogWriter::Create(Path(getpid()), 4);
  ASSERT_TRUE(w.ok());
  for (uint32_t q = 1; q <= 4; ++q) ASSERT_NE((*w)->SlotFor(q), nullptr) << q;
  EXPECT_EQ((*w)->SlotFor(5), nullptr);
  EXPECT_EQ((*w)->SlotFor(6), nullptr);
  EXPECT_NE((*w)->SlotFor(2), nullptr);  // existing QPs still resolve
  EXPECT_EQ((*w)->overflow_events(), 2u);
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->overflow_events(), 2u);
  int n = 0;
  r->ForEachQp([&](const QpBacklog&) { ++n; });
  EXPECT_EQ(n, 4);
  EXPECT_FALSE(r->Lookup(5).has_value());
}

// pid reuse: a process that died without unlinking its table leaves it under its pid; a new
// process with that pid replaces it whole (rename), so a reader that still maps the old file
// keeps the old inode and a new Open() sees only the new table.
TEST_F(BacklogTableTest, CreateReplacesALeftoverTableOfTheSamePid) {
  WriteFile(Path(getpid()), ValidTableBytes(8));
  auto old_reader = BacklogReader::Open(Path(getpid()));
  ASSERT_TRUE(old_reader.ok());
  auto w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->SlotFor(1)->OnPosted(5, false);
  auto r = BacklogReader::Open(Path(getpid()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->capacity(), 16u);
  EXPECT_NE(r->inode(), old_reader->inode());
  EXPECT_EQ(r->Lookup(1)->posted_bytes, 5u);
  EXPECT_EQ(old_reader->capacity(), 8u);
  EXPECT_FALSE(old_reader->Lookup(1).has_value());
  EXPECT_TRUE(old_reader->CheckSize().ok());
  // Garbage left under the name is replaced too.
  w->reset();
  WriteFile(Path(getpid()), "garbage");
  w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(BacklogReader::Open(Path(getpid())).ok());
}

TEST_F(BacklogTableTest, WriterRejectsBadCapacityAndMissingDirectory) {
  auto zero = BacklogWriter::Create(Path(1), 0);
  EXPECT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), HasSubstr("capacity 0 out of range"));
  auto nodir = BacklogWriter::Create(dir_ + "/no/such/dir/heddle-verbs-1", 8);
  EXPECT_FALSE(nodir.ok());
  EXPECT_THAT(nodir.status().message(), HasSubstr("cannot create"));
}

// Patches `size` bytes at `offset` of a valid 8-slot table and returns the reader's verdict.
class CorruptTableTest : public BacklogTableTest {
 protected:
  absl::Status OpenWith(const std::string& bytes) {
    const std::string p = dir_ + "/corrupt";
    WriteFile(p, bytes);
    return BacklogReader::Open(p).status();
  }
  template <typename T>
  static void Patch(std::string& bytes, size_t offset, T value) {
    std::memcpy(bytes.data() + offset, &value, sizeof(value));
  }
};

TEST_F(CorruptTableTest, ValidBytesOpen) { EXPECT_TRUE(OpenWith(ValidTableBytes(8)).ok()); }

TEST_F(CorruptTableTest, WrongMagic) {
  std::string b = ValidTableBytes(8);
  Patch<uint64_t>(b, offsetof(BacklogHeader, magic), 0x1234);
  absl::Status s = OpenWith(b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("bad magic"));
  EXPECT_THAT(s.message(), HasSubstr("not a heddle backlog table"));
}

TEST_F(CorruptTableTest, WrongVersion) {
  std::string b = ValidTableBytes(8);
  Patch<uint32_t>(b, offsetof(BacklogHeader, layout_version), 99);
  absl::Status s = OpenWith(b);
  EXPECT_THAT(s.message(), HasSubstr("layout version 99"));
  EXPECT_THAT(s.message(), HasSubstr("same release"));
}

// Layout 2 is what this release writes; a table from a layout-1 shim (no peer fields) is refused
// by name rather than misread.
TEST_F(CorruptTableTest, LayoutOneTableFromAnOlderShim) {
  EXPECT_EQ(kBacklogLayoutVersion, 2u);
  std::string b = ValidTableBytes(8);
  uint32_t version = 0;
  std::memcpy(&version, b.data() + offsetof(BacklogHeader, layout_version), sizeof(version));
  EXPECT_EQ(version, 2u);
  uint32_t slot_size = 0;
  std::memcpy(&slot_size, b.data() + offsetof(BacklogHeader, slot_size), sizeof(slot_size));
  EXPECT_EQ(slot_size, sizeof(BacklogSlot));
  Patch<uint32_t>(b, offsetof(BacklogHeader, layout_version), 1);
  absl::Status s = OpenWith(b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("layout version 1, this heddled reads version 2"));
}

TEST_F(CorruptTableTest, WrongHeaderSize) {
  std::string b = ValidTableBytes(8);
  Patch<uint32_t>(b, offsetof(BacklogHeader, header_size), sizeof(BacklogHeader) + 64);
  EXPECT_THAT(OpenWith(b).message(), HasSubstr("header/slot size"));
}

TEST_F(CorruptTableTest, FifoIsRefusedWithoutBlocking) {
  const std::string p = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(p.c_str(), 0600), 0);
  absl::StatusOr<BacklogReader> r = BacklogReader::Open(p);  // would hang without O_NONBLOCK
  EXPECT_THAT(r.status().message(), HasSubstr("not a regular file"));
}

TEST_F(CorruptTableTest, FileTruncatedWhileMappedIsDetected) {
  const std::string p = dir_ + "/shrinks";
  WriteFile(p, ValidTableBytes(8));
  absl::StatusOr<BacklogReader> r = BacklogReader::Open(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->CheckSize().ok());
  ASSERT_EQ(truncate(p.c_str(), sizeof(BacklogHeader)), 0);
  absl::Status s = r->CheckSize();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("changed size while mapped"));
}

TEST_F(CorruptTableTest, WrongSlotSize) {
  std::string b = ValidTableBytes(8);
  Patch<uint32_t>(b, offsetof(BacklogHeader, slot_size), 8);
  EXPECT_THAT(OpenWith(b).message(), HasSubstr("header/slot size"));
}

TEST_F(CorruptTableTest, Truncated) {
  std::string b = ValidTableBytes(8);
  absl::Status s = OpenWith(b.substr(0, b.size() - 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
  EXPECT_THAT(OpenWith(b.substr(0, 10)).message(), HasSubstr("smaller than the"));
  EXPECT_THAT(OpenWith("").message(), HasSubstr("truncated"));
}

TEST_F(CorruptTableTest, CapacityLargerThanTheFile) {
  std::string b = ValidTableBytes(8);
  Patch<uint32_t>(b, offsetof(BacklogHeader, capacity), 1000);
  absl::Status s = OpenWith(b);
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
  EXPECT_THAT(s.message(), HasSubstr("1000 slots"));
}

TEST_F(CorruptTableTest, CapacityBeyondTheLimit) {
  std::string b = ValidTableBytes(8);
  Patch<uint32_t>(b, offsetof(BacklogHeader, capacity), 0xffffffffu);
  EXPECT_THAT(OpenWith(b).message(), HasSubstr("capacity 4294967295 out of range"));
  Patch<uint32_t>(b, offsetof(BacklogHeader, capacity), 0);
  EXPECT_THAT(OpenWith(b).message(), HasSubstr("capacity 0 out of range"));
}

TEST_F(CorruptTableTest, TrailingBytes) {
  std::string b = ValidTableBytes(8);
  absl::Status s = OpenWith(b + "x");
  EXPECT_THAT(s.message(), HasSubstr("oversized"));
}

TEST_F(CorruptTableTest, HostileKeysAreBoundedByCapacity) {
  // Every slot claimed with garbage keys (half of them "retired"), peers half-written: lookups and
  // iteration stay within the table, and an odd seqlock never reports a peer.
  std::string b = ValidTableBytes(8);
  for (uint32_t i = 0; i < 8; ++i) {
    const size_t slot = sizeof(BacklogHeader) + i * sizeof(BacklogSlot);
    Patch<uint32_t>(b, slot + offsetof(BacklogSlot, key),
                    (i % 2 == 0 ? 0x7fffffffu : 0xffffffffu) - i);
    Patch<uint32_t>(b, slot + offsetof(BacklogSlot, seq), 1);  // a writer that never finished
    Patch<uint32_t>(b, slot + offsetof(BacklogSlot, peer_flags), 0xffffffffu);
    Patch<uint32_t>(b, slot + offsetof(BacklogSlot, dest_qpn), 0xffffffffu);
  }
  Patch<uint64_t>(b, offsetof(BacklogHeader, claims), ~uint64_t{0});
  const std::string p = dir_ + "/hostile";
  WriteFile(p, b);
  auto r = BacklogReader::Open(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->Lookup(1).has_value());
  EXPECT_FALSE(r->ReadSlot(8).has_value());
  EXPECT_FALSE(r->ReadSlot(0xffffffffu).has_value());
  int n = 0;
  r->ForEachQp([&](const QpBacklog& q) {
    ++n;
    EXPECT_FALSE(q.has_peer);
    EXPECT_LE(q.qpn, kQpnMask);
    EXPECT_LT(q.context_index, kMaxQpIdContexts);
  });
  EXPECT_EQ(n, 4);  // the live-looking half
}

std::array<uint8_t, 16> V4Mapped(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

TEST_F(BacklogTableTest, PeerIsPublishedOnceBothPartsAreKnown) {
  auto w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok()) << w.status();
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok()) << r.status();

  // The QPN alone (no GID yet) is no peer to key on.
  ASSERT_TRUE((*w)->RecordPeer(0x21, QpPeer{.dest_qpn = 0x1abcdef}));
  std::optional<QpBacklog> q = r->Lookup(0x21);
  ASSERT_TRUE(q.has_value());  // the slot is claimed at connection time, before any post
  EXPECT_FALSE(q->has_peer);
  EXPECT_EQ(q->dest_qpn, 0u);
  EXPECT_EQ(q->posted_wqes, 0u);

  ASSERT_TRUE((*w)->RecordPeer(0x21, QpPeer{.dgid = V4Mapped(192, 0, 2, 7)}));
  q = r->Lookup(0x21);
  EXPECT_TRUE(q->has_peer);
  EXPECT_EQ(q->dest_qpn, 0xabcdefu);  // masked to 24 bits
  EXPECT_EQ(q->dgid, V4Mapped(192, 0, 2, 7));
  EXPECT_EQ(q->qpn, 0x21u);
  EXPECT_EQ(q->context_index, 0u);

  // An IPv6 peer replaces it in one update.
  const std::array<uint8_t, 16> v6 = {0x20, 0x01, 0x0d, 0xb8, 1, 2,  3,  4,
                                      5,    6,    7,    8,    9, 10, 11, 12};
  ASSERT_TRUE((*w)->RecordPeer(0x21, QpPeer{.dest_qpn = 0x42, .dgid = v6}));
  q = r->Lookup(0x21);
  EXPECT_TRUE(q->has_peer);
  EXPECT_EQ(q->dest_qpn, 0x42u);
  EXPECT_EQ(q->dgid, v6);

  // A LID-routed address vector (no GRH) leaves no address.
  ASSERT_TRUE((*w)->RecordPeer(0x21, QpPeer{.clear_dgid = true}));
  q = r->Lookup(0x21);
  EXPECT_FALSE(q->has_peer);
  EXPECT_EQ(q->dgid, (std::array<uint8_t, 16>{}));
  EXPECT_EQ((*w)->FindSlot(0x21), (*w)->SlotFor(0x21));
}

TEST_F(BacklogTableTest, ResetSettlesOutstandingWorkAndClearsThePeer) {
  auto w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok());
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*w)->RecordPeer(5, QpPeer{.dest_qpn = 9, .dgid = V4Mapped(10, 0, 0, 9)}));
  BacklogSlot* s = (*w)->SlotFor(5);
  s->OnPosted(100, false);
  s->OnPosted(200, true);  // mark 0 never completes: the QP is reset with it queued
  s->OnPosted(300, true);
  const QpBacklog before = *r->Lookup(5);
  EXPECT_EQ(before.backlog_bytes(), 600u);

  (*w)->ResetQp(5);
  const QpBacklog after = *r->Lookup(5);
  EXPECT_EQ(after.backlog_bytes(), 0u);
  EXPECT_EQ(after.backlog_wqes(), 0u);
  EXPECT_EQ(after.posted_bytes, 600u);  // counters stay monotonic
  EXPECT_EQ(after.completed_bytes, 600u);
  EXPECT_FALSE(after.has_peer);
  EXPECT_EQ(after.generation, before.generation + 1);
  EXPECT_EQ((*w)->FindSlot(5), s);  // reset keeps the QP's slot

  // Reconnected: the next signaled WR's completion finds its own mark, not the discarded ones.
  ASSERT_TRUE((*w)->RecordPeer(5, QpPeer{.dest_qpn = 10, .dgid = V4Mapped(10, 0, 0, 9)}));
  s->OnPosted(50, false);
  s->OnPosted(70, true);
  EXPECT_EQ(r->Lookup(5)->backlog_bytes(), 120u);
  s->OnCompletion(true, true);
  EXPECT_EQ(r->Lookup(5)->backlog_bytes(), 0u);
  EXPECT_EQ(r->Lookup(5)->completed_bytes, 720u);
  EXPECT_EQ(r->Lookup(5)->dest_qpn, 10u);
  EXPECT_EQ((*w)->FindSlot(6), nullptr);
  (*w)->ResetQp(6);  // unknown QP: nothing to do
  EXPECT_EQ((*w)->FindSlot(6), nullptr);
}

TEST_F(BacklogTableTest, DestroyedQpStopsReportingAndItsQpnStartsAfresh) {
  auto w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok());
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*w)->RecordPeer(0x77, QpPeer{.dest_qpn = 1, .dgid = V4Mapped(10, 0, 0, 1)}));
  BacklogSlot* old_slot = (*w)->SlotFor(0x77);
  old_slot->OnPosted(4096, true);  // never completes: flushed by the destroy
  const uint32_t old_generation = r->Lookup(0x77)->generation;

  (*w)->RetireQp(0x77);
  EXPECT_FALSE(r->Lookup(0x77).has_value());
  EXPECT_EQ((*w)->FindSlot(0x77), nullptr);  // a late completion finds nothing to count on
  int live = 0;
  r->ForEachQp([&](const QpBacklog&) { ++live; });
  EXPECT_EQ(live, 0);
  std::vector<uint32_t> claimed;
  r->ClaimedSlots(&claimed);
  EXPECT_EQ(claimed.size(), 1u);  // the retired slot stays non-empty: probe chains hold

  // The provider hands the QPN to a new QP, connected elsewhere: same slot, none of the old
  // QP's 4096 bytes.
  ASSERT_TRUE((*w)->RecordPeer(0x77, QpPeer{.dest_qpn = 2, .dgid = V4Mapped(10, 0, 0, 2)}));
  BacklogSlot* new_slot = (*w)->SlotFor(0x77);
  EXPECT_EQ(new_slot, old_slot);
  new_slot->OnPosted(10, false);
  const QpBacklog q = *r->Lookup(0x77);
  EXPECT_EQ(q.backlog_bytes(), 10u);
  EXPECT_EQ(q.dest_qpn, 2u);
  EXPECT_EQ(q.dgid, V4Mapped(10, 0, 0, 2));
  EXPECT_GT(q.generation, old_generation);
  EXPECT_EQ(r->claims(), 1u);
}

TEST_F(BacklogTableTest, RetiredSlotIsReusedByAnotherQpn) {
  // One slot: every QPN homes there. Without reuse the second QP could never be tracked.
  auto w = BacklogWriter::Create(Path(getpid()), 1);
  ASSERT_TRUE(w.ok());
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok());
  BacklogSlot* a = (*w)->SlotFor(5);
  ASSERT_NE(a, nullptr);
  a->OnPosted(1000, false);
  EXPECT_EQ((*w)->SlotFor(9), nullptr);  // full while QP 5 lives
  EXPECT_EQ((*w)->overflow_events(), 1u);
  (*w)->RetireQp(5);
  BacklogSlot* b = (*w)->SlotFor(9);
  EXPECT_EQ(b, a);
  EXPECT_FALSE(r->Lookup(5).has_value());
  ASSERT_TRUE(r->Lookup(9).has_value());
  EXPECT_EQ(r->Lookup(9)->backlog_bytes(), 0u);
  EXPECT_EQ(r->claims(), 1u);  // reuse is not a new claim
}

TEST_F(BacklogTableTest, SameQpnOnTwoDeviceContextsGetsTwoSlots) {
  auto w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok());
  BacklogSlot* a = (*w)->SlotFor(MakeQpId(0, 0x300));
  BacklogSlot* b = (*w)->SlotFor(MakeQpId(5, 0x300));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  a->OnPosted(1, false);
  b->OnPosted(2, false);
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok());
  std::map<uint32_t, uint64_t> by_context;
  r->ForEachQp([&](const QpBacklog& q) {
    EXPECT_EQ(q.qpn, 0x300u);
    by_context[q.context_index] = q.posted_bytes;
  });
  EXPECT_EQ(by_context, (std::map<uint32_t, uint64_t>{{0, 1}, {5, 2}}));
  EXPECT_EQ(r->Lookup(MakeQpId(5, 0x300))->posted_bytes, 2u);
  EXPECT_EQ(MakeQpId(0, 0x300), 0x300u);
  EXPECT_EQ(MakeQpId(63, 0xffffffu), kQpIdMask);
}

// A writer keeps re-pointing one QP at peer n (dest_qpn n, every GID byte n & 0xff), resetting it
// every 7th time; a reader on another thread must only ever see a whole peer or none. The two run
// until the reader has seen enough peers while the writer was running (bounded by time on a
// loaded machine; the check is on what was seen, not on how fast).
TEST_F(BacklogTableTest, SeqlockReaderNeverSeesATornPeer) {
  auto w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok());
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok());
  ASSERT_NE((*w)->SlotFor(3), nullptr);
  const uint32_t slot = r->Lookup(3)->slot;
  std::atomic<uint32_t> written{0};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    uint32_t n = 0;
    while (!stop.load(std::memory_order_relaxed) && n < kQpnMask) {
      ++n;
      std::array<uint8_t, 16> gid;
      gid.fill(static_cast<uint8_t>(n));
      (*w)->RecordPeer(3, QpPeer{.dest_qpn = n, .dgid = gid});
      if (n % 7 == 0) (*w)->ResetQp(3);
      written.store(n, std::memory_order_release);
    }
  });
  while (written.load(std::memory_order_acquire) == 0) std::this_thread::yield();
  uint64_t reads = 0, with_peer = 0, torn = 0;
  uint32_t last_generation = 0;
  bool generation_went_back = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (with_peer < 300000 && std::chrono::steady_clock::now() < deadline) {
    std::optional<QpBacklog> q = r->ReadSlot(slot);
    ASSERT_TRUE(q.has_value());
    ++reads;
    generation_went_back |= q->generation < last_generation;
    last_generation = q->generation;
    if (!q->has_peer) continue;
    ++with_peer;
    for (uint8_t byte : q->dgid) torn += byte != static_cast<uint8_t>(q->dest_qpn);
  }
  stop.store(true, std::memory_order_relaxed);
  writer.join();
  EXPECT_EQ(torn, 0u) << "of " << with_peer << " peers in " << reads << " reads";
  EXPECT_GT(with_peer, 0u);
  EXPECT_FALSE(generation_went_back);
  const uint32_t n = written.load(std::memory_order_acquire);
  const QpBacklog last = *r->ReadSlot(slot);
  EXPECT_EQ(last.generation, n / 7);
  EXPECT_EQ(last.has_peer, n % 7 != 0);
  if (last.has_peer) {
    EXPECT_EQ(last.dest_qpn, n);
  }
}

// The same, deterministically: a writer stopped between its two seqlock stores (here: the test
// playing one on the writable mapping) must not get its half-written peer reported.
TEST_F(BacklogTableTest, ReaderReportsNoPeerWhileTheWriterIsMidUpdate) {
  auto w = BacklogWriter::Create(Path(getpid()), 16);
  ASSERT_TRUE(w.ok());
  auto r = BacklogReader::Open((*w)->path());
  ASSERT_TRUE(r.ok());
  std::array<uint8_t, 16> gid;
  gid.fill(1);
  ASSERT_TRUE((*w)->RecordPeer(3, QpPeer{.dest_qpn = 1, .dgid = gid}));
  BacklogSlot* s = (*w)->SlotFor(3);
  s->OnPosted(77, false);
  const uint32_t seq = s->seq.load();
  ASSERT_EQ(seq % 2, 0u);

  s->seq.store(seq + 1);  // "writing": the new QPN is in, the GID not yet
  s->dest_qpn.store(2);
  std::optional<QpBacklog> q = r->Lookup(3);
  ASSERT_TRUE(q.has_value());
  EXPECT_FALSE(q->has_peer);
  EXPECT_EQ(q->dest_qpn, 0u);
  EXPECT_EQ(q->posted_bytes, 77u);  // the counters are not held back

  gid.fill(2);
  uint64_t words[2];
  std::memcpy(words, gid.data(), 16);
  s->dgid[0].store(words[0]);
  s->dgid[1].store(words[1]);
  s->seq.store(seq + 2);  // done
  q = r->Lookup(3);
  EXPECT_TRUE(q->has_peer);
  EXPECT_EQ(q->dest_qpn, 2u);
  EXPECT_EQ(q->dgid, gid);
}

// In tmpfs (where the shim's tables live) reading a never-written slot page would allocate it;
// ClaimedSlots() finds claimed slots without faulting the holes in.
TEST(BacklogTableShmTest, ClaimedSlotsSkipsHolesAndFollowsClaims) {
  char tmpl[] = "/dev/shm/heddle-backlog-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) GTEST_SKIP() << "no writable /dev/shm";
  const std::string dir = tmpl;
  {
    auto w = BacklogWriter::Create(BacklogWriter::PathFor(dir, getpid()), kDefaultCapacity);
    ASSERT_TRUE(w.ok()) << w.status();
    auto r = BacklogReader::Open((*w)->path());
    ASSERT_TRUE(r.ok()) << r.status();
    for (uint32_t qpn : {0x10u, 0x2000u, 0xfff00u}) ASSERT_NE((*w)->SlotFor(qpn), nullptr);
    struct stat before {};
    ASSERT_EQ(stat((*w)->path().c_str(), &before), 0);

    std::vector<uint32_t> claimed;
    r->ClaimedSlots(&claimed);
    EXPECT_EQ(r->claims(), 3u);
    struct stat after {};
    ASSERT_EQ(stat((*w)->path().c_str(), &after), 0);
    EXPECT_EQ(after.st_blocks, before.st_blocks) << "the scan allocated table pages";
    EXPECT_LT(after.st_blocks * 512, static_cast<blkcnt_t>(BacklogTableSize(kDefaultCapacity) / 8));
    // (Reading a slot's counters may touch the page after its key: after the block count.)
    std::vector<uint32_t> want;
    for (uint32_t qpn : {0x10u, 0x2000u, 0xfff00u}) want.push_back(r->Lookup(qpn)->slot);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(claimed, want);

    ASSERT_NE((*w)->SlotFor(0x11), nullptr);
    EXPECT_EQ(r->claims(), 4u);
    r->ClaimedSlots(&claimed);
    EXPECT_EQ(claimed.size(), 4u);
  }
  std::filesystem::remove_all(dir);
}

TEST_F(BacklogTableTest, ScanDirectoryFindsLiveTablesAndSkipsTheRest) {
  auto mine = BacklogWriter::Create(Path(getpid()), 8);
  ASSERT_TRUE(mine.ok());
  (*mine)->SlotFor(42)->OnPosted(1, false);

  // A table left by a process that has exited.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  WriteFile(Path(child), ValidTableBytes(8));
  // Garbage under a live pid (ours is taken: use our parent's), a half-made table, other files.
  WriteFile(Path(getppid()), "not a table");
  WriteFile(Path(getpid()) + ".tmp", "half made");
  WriteFile(dir_ + "/heddle-verbs-abc", "x");
  WriteFile(dir_ + "/unrelated", "x");

  auto scan = BacklogReader::ScanDirectory(dir_);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(scan->tables.size(), 1u);
  EXPECT_EQ(scan->tables[0].pid(), getpid());
  ASSERT_TRUE(scan->tables[0].Lookup(42).has_value());
  EXPECT_EQ(scan->tables[0].Lookup(42)->posted_bytes, 1u);
  ASSERT_EQ(scan->skipped.size(), 2u);
  std::string skipped = scan->skipped[0] + "\n" + scan->skipped[1];
  EXPECT_THAT(skipped, HasSubstr("process " + std::to_string(child) + " is gone"));
  EXPECT_THAT(skipped, HasSubstr("truncated"));

  auto missing = BacklogReader::ScanDirectory(dir_ + "/nope");
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot list"));
}

}  // namespace
}  // namespace heddle::verbs::shim
