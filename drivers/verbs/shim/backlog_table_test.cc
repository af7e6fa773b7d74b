// File: drivers/verbs/shim/backlog_table_test.cc
//
// The shared-memory backlog table: writer/reader round trip in a temp dir, concurrent writers,
// completion marks, overflow, and the reader refusing malformed files.
#include "drivers/verbs/shim/backlog_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
  // Every slot claimed with garbage keys: lookups and iteration stay within the table.
  std::string b = ValidTableBytes(8);
  for (uint32_t i = 0; i < 8; ++i) {
    Patch<uint32_t>(b, sizeof(BacklogHeader) + i * sizeof(BacklogSlot), 0xffffffffu - i);
  }
  const std::string p = dir_ + "/hostile";
  WriteFile(p, b);
  auto r = BacklogReader::Open(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->Lookup(1).has_value());
  int n = 0;
  r->ForEachQp([&](const QpBacklog&) { ++n; });
  EXPECT_EQ(n, 8);
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
