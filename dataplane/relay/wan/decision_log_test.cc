#include "dataplane/relay/wan/decision_log.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

using ::testing::HasSubstr;

constexpr DecisionLogHeader kFresh{
    .instance = 0x1234abcd5678ef01, .spec_digest = 77, .region_id = 3};

class DecisionLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrFormat("heddle_decision_log_%d_%s", getpid(),
                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    SetDecisionLogSyncHooksForTest({});
    std::filesystem::remove_all(dir_);
  }

  std::string path() const { return (dir_ / "decisions.log").string(); }
  std::string Bytes() const {
    std::ifstream in(path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void Write(const std::string& b) const {
    std::ofstream(path(), std::ios::binary | std::ios::trunc) << b;
  }
  std::unique_ptr<DecisionLog> OpenOk(uint32_t keep = 4, DecisionLogHeader fresh = kFresh) {
    absl::StatusOr<std::unique_ptr<DecisionLog>> log =
        DecisionLog::Open(dir_.string(), fresh, keep);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? *std::move(log) : nullptr;
  }
  static std::string Payload(uint64_t r) { return absl::StrFormat("decision of round %d", r); }

  std::filesystem::path dir_;
};

TEST_F(DecisionLogTest, RoundTripKeepsTheIdentityAndTheRecords) {
  {
    auto log = OpenOk();
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(log->header().instance, kFresh.instance);
    EXPECT_TRUE(log->replayed().empty());
    for (uint64_t r = 1; r <= 3; ++r) ASSERT_TRUE(log->Append(r, Payload(r)).ok());
    EXPECT_EQ(log->last_round(), 3u);
    // Rounds only increase.
    EXPECT_EQ(log->Append(3, "again").code(), absl::StatusCode::kInvalidArgument);
  }
  // Reopened with another fresh identity: the file's is kept.
  auto log = OpenOk(4, {.instance = 99, .spec_digest = 77, .region_id = 3});
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->header().instance, kFresh.instance);
  EXPECT_EQ(log->header().spec_digest, 77u);
  EXPECT_EQ(log->header().region_id, 3u);
  ASSERT_EQ(log->replayed().size(), 3u);
  for (uint64_t r = 1; r <= 3; ++r) {
    EXPECT_EQ(log->replayed()[r - 1].round_id, r);
    EXPECT_EQ(log->replayed()[r - 1].payload, Payload(r));
  }
  // It goes on from there; an empty payload is a payload.
  ASSERT_TRUE(log->Append(4, "").ok());
  log.reset();
  log = OpenOk();
  ASSERT_EQ(log->replayed().size(), 4u);
  EXPECT_EQ(log->replayed().back().payload, "");
  EXPECT_EQ(log->last_round(), 4u);
}

TEST_F(DecisionLogTest, TornTailIsCutAndTheLogGoesOn) {
  {
    auto log = OpenOk();
    for (uint64_t r = 1; r <= 3; ++r) ASSERT_TRUE(log->Append(r, Payload(r)).ok());
  }
  const std::string whole = Bytes();
  // Every cut inside the last record (a crash during its write) loses that record only.
  const size_t last = EncodeDecisionRecord(3, Payload(3)).size();
  for (size_t keep_bytes = 1; keep_bytes < last; ++keep_bytes) {
    Write(whole.substr(0, whole.size() - last + keep_bytes));
    auto log = OpenOk();
    ASSERT_NE(log, nullptr);
    ASSERT_EQ(log->replayed().size(), 2u) << keep_bytes;
    EXPECT_EQ(log->last_round(), 2u);
    EXPECT_EQ(Bytes(), whole.substr(0, whole.size() - last)) << "the tail is cut on disk";
    ASSERT_TRUE(log->Append(3, "decided again").ok());
    log.reset();
    log = OpenOk();
    EXPECT_EQ(log->replayed().back().payload, "decided again");
  }
}

TEST_F(DecisionLogTest, CorruptLastRecordIsCutButACorruptMiddleIsRefused) {
  {
    auto log = OpenOk();
    for (uint64_t r = 1; r <= 3; ++r) ASSERT_TRUE(log->Append(r, Payload(r)).ok());
  }
  const std::string whole = Bytes();
  const size_t rec3 = whole.size() - EncodeDecisionRecord(3, Payload(3)).size();
  // A flipped bit in the last record's payload: its CRC fails, nothing valid follows: cut.
  std::string b = whole;
  b[b.size() - 6] ^= 0x10;
  Write(b);
  {
    auto log = OpenOk();
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(log->last_round(), 2u);
    EXPECT_EQ(Bytes().size(), rec3);
  }
  // A flipped bit in the second record, with round 3's intact after it: a damaged log, refused
  // (cutting it would drop round 3, which other gateways may have published), and left as is.
  Write(whole);
  b = whole;
  const size_t rec2 = rec3 - EncodeDecisionRecord(2, Payload(2)).size();
  b[rec2 + 22] ^= 0x01;
  Write(b);
  absl::StatusOr<std::unique_ptr<DecisionLog>> log = DecisionLog::Open(dir_.string(), kFresh, 4);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(log.status().message(), HasSubstr(absl::StrFormat("byte %d is corrupt", rec2)));
  EXPECT_THAT(log.status().message(), HasSubstr("round 3"));
  EXPECT_EQ(Bytes(), b);
  // A damaged header: refused.
  b = whole;
  b[9] ^= 1;
  Write(b);
  log = DecisionLog::Open(dir_.string(), kFresh, 4);
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(log.status().message(), HasSubstr("header is damaged"));
}

TEST_F(DecisionLogTest, RoundOutOfOrderAtTheTailIsCut) {
  {
    auto log = OpenOk();
    for (uint64_t r = 1; r <= 2; ++r) ASSERT_TRUE(log->Append(r, Payload(r)).ok());
  }
  Write(Bytes() + EncodeDecisionRecord(2, "a second round 2"));
  auto log = OpenOk();
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->last_round(), 2u);
  EXPECT_EQ(log->replayed().back().payload, Payload(2));
}

TEST_F(DecisionLogTest, WrongVersionIsRefused) {
  {
    auto log = OpenOk();
    ASSERT_TRUE(log->Append(1, Payload(1)).ok());
  }
  const std::string whole = Bytes();
  // A record of a newer format (valid CRC): refused, not cut.
  Write(whole + EncodeDecisionRecord(2, Payload(2), kDecisionLogVersion + 1));
  absl::StatusOr<std::unique_ptr<DecisionLog>> log = DecisionLog::Open(dir_.string(), kFresh, 4);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(log.status().message(), HasSubstr("format version 2"));
  // A header of a newer format, its CRC recomputed: refused as a newer build's, not as damage.
  std::string b = whole;
  b[4] = 2;
  const uint32_t crc =
      Crc32c(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), 32));
  for (int i = 0; i < 4; ++i) b[32 + i] = static_cast<char>(crc >> (8 * i));
  Write(b);
  log = DecisionLog::Open(dir_.string(), kFresh, 4);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(log.status().message(), HasSubstr("written by a newer build"));
  EXPECT_EQ(Bytes(), b);
}

TEST_F(DecisionLogTest, CompactsToTheRetainedWindow) {
  auto log = OpenOk(/*keep=*/3);
  uint64_t largest = 0;
  for (uint64_t r = 1; r <= 40; ++r) {
    ASSERT_TRUE(log->Append(r, Payload(r)).ok());
    EXPECT_LT(log->records_in_file(), 6u);
    largest = std::max<uint64_t>(largest, log->file_bytes());
    EXPECT_EQ(log->file_bytes(), Bytes().size());
  }
  EXPECT_GT(log->compactions(), 5u);
  // Bounded: header + fewer than 2 × keep records.
  EXPECT_LT(largest, 36 + 6 * EncodeDecisionRecord(40, Payload(40)).size());
  log.reset();
  log = OpenOk(3);
  ASSERT_EQ(log->replayed().size(), 3u);
  EXPECT_EQ(log->replayed().front().round_id, 38u);
  EXPECT_EQ(log->replayed().back().payload, Payload(40));
  EXPECT_EQ(log->header().instance, kFresh.instance);
  EXPECT_FALSE(std::filesystem::exists(path() + ".tmp"));
}

TEST_F(DecisionLogTest, UnwritableDirectoryFailsAtOpen) {
  std::filesystem::create_directories(dir_);
  std::ofstream((dir_ / "file").string()) << "x";
  absl::StatusOr<std::unique_ptr<DecisionLog>> log =
      DecisionLog::Open((dir_ / "file" / "sub").string(), kFresh, 4);
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(log.status().message(), HasSubstr("wan.state_dir"));
}

TEST_F(DecisionLogTest, AnotherJobsLogIsRefusedBeforeAnythingIsCut) {
  {
    auto log = OpenOk();
    for (uint64_t r = 1; r <= 2; ++r) ASSERT_TRUE(log->Append(r, Payload(r)).ok());
  }
  // A torn tail, which this job's coordinator would cut: another job's or region's is refused
  // first, and the file is left as it was.
  const std::string torn = Bytes() + EncodeDecisionRecord(3, Payload(3)).substr(0, 7);
  Write(torn);
  for (DecisionLogHeader other :
       {DecisionLogHeader{.instance = 1, .spec_digest = 78, .region_id = 3},
        DecisionLogHeader{.instance = 1, .spec_digest = 77, .region_id = 4}}) {
    absl::StatusOr<std::unique_ptr<DecisionLog>> log = DecisionLog::Open(dir_.string(), other, 4);
    ASSERT_FALSE(log.ok());
    EXPECT_EQ(log.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(log.status().message(), HasSubstr("its own state_dir"));
    EXPECT_EQ(Bytes(), torn);
  }
}

TEST_F(DecisionLogTest, SecondOpenOfTheSameDirectoryIsRefused) {
  auto first = OpenOk();
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<DecisionLog>> second = DecisionLog::Open(dir_.string(), kFresh, 4);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("in use by another process"));
  // The first goes on; once it is closed the directory can be opened again.
  ASSERT_TRUE(first->Append(1, Payload(1)).ok());
  first.reset();
  auto again = OpenOk();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->last_round(), 1u);
}

int g_fail_syncs = 0;  // how many of the next hooked sync calls fail with EIO
int g_syncs = 0;       // hooked sync calls made
int FailingSync(int) {
  ++g_syncs;
  if (g_fail_syncs == 0) return 0;
  --g_fail_syncs;
  errno = EIO;
  return -1;
}

TEST_F(DecisionLogTest, OpenSyncsWhatItReplays) {
  {
    auto log = OpenOk();
    for (uint64_t r = 1; r <= 2; ++r) ASSERT_TRUE(log->Append(r, Payload(r)).ok());
  }
  // A process that wrote records and died before its fdatasync left them in the page cache
  // only: the next Open makes them durable before they are replayed (and served).
  g_fail_syncs = 1;
  SetDecisionLogSyncHooksForTest({.fdatasync = FailingSync});
  absl::StatusOr<std::unique_ptr<DecisionLog>> log = DecisionLog::Open(dir_.string(), kFresh, 4);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(log.status().message(), HasSubstr("cannot fsync"));
  auto ok = OpenOk();
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->last_round(), 2u);
}

TEST_F(DecisionLogTest, RecordWhoseSyncFailedIsNeverAccepted) {
  auto log = OpenOk();
  for (uint64_t r = 1; r <= 2; ++r) ASSERT_TRUE(log->Append(r, Payload(r)).ok());
  const std::string before = Bytes();
  g_fail_syncs = 1;
  SetDecisionLogSyncHooksForTest({.fdatasync = FailingSync});
  // The write reached the page cache, the sync failed: not accepted.
  absl::Status st = log->Append(3, "first try");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(log->last_round(), 2u);
  ASSERT_EQ(log->replayed().size(), 2u);
  // The retry replaces the file by the retained records first, then appends.
  ASSERT_TRUE(log->Append(3, "second try").ok());
  EXPECT_EQ(Bytes(), before + EncodeDecisionRecord(3, "second try"));
  EXPECT_EQ(log->file_bytes(), Bytes().size());
  log.reset();
  log = OpenOk();
  ASSERT_EQ(log->replayed().size(), 3u);
  EXPECT_EQ(log->replayed().back().payload, "second try");
}

TEST_F(DecisionLogTest, CompactionWhoseDirectorySyncFailsAppendsToTheNewFile) {
  auto log = OpenOk(/*keep=*/2);
  for (uint64_t r = 1; r <= 3; ++r) ASSERT_TRUE(log->Append(r, Payload(r)).ok());
  // Round 4 compacts: the rename happens, the directory fsync fails (twice: the retry too).
  g_fail_syncs = 2;
  SetDecisionLogSyncHooksForTest({.fsync_dir = FailingSync});
  ASSERT_TRUE(log->Append(4, Payload(4)).ok()) << "durable in the old file and the new one";
  EXPECT_EQ(g_fail_syncs, 0);
  // While the directory cannot be synced, nothing more is accepted.
  g_fail_syncs = 2;
  EXPECT_EQ(log->Append(5, Payload(5)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(log->last_round(), 4u);
  // Then it can: appended to the file the log's name holds, not to the replaced one.
  ASSERT_TRUE(log->Append(5, Payload(5)).ok());
  EXPECT_EQ(log->file_bytes(), Bytes().size());
  log.reset();
  log = OpenOk(2);
  ASSERT_EQ(log->replayed().size(), 2u);
  EXPECT_EQ(log->replayed().back().round_id, 5u);
  EXPECT_EQ(log->replayed().back().payload, Payload(5));
}

TEST_F(DecisionLogTest, ManyRecordLikeFragmentsAfterABadRecordAreRefused) {
  {
    auto log = OpenOk();
    ASSERT_TRUE(log->Append(1, Payload(1)).ok());
  }
  // A corrupt record followed by thousands of fragments with a record's magic and a length
  // that fits: each would be checksummed over the rest of the file; the scan gives up and the
  // log is refused, not cut.
  std::string fragment = EncodeDecisionRecord(9, "");
  fragment.back() ^= 1;  // a bad CRC
  std::string b = Bytes();
  for (int i = 0; i < 5000; ++i) b += fragment;
  Write(b);
  absl::StatusOr<std::unique_ptr<DecisionLog>> log = DecisionLog::Open(dir_.string(), kFresh, 4);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(log.status().message(), HasSubstr("record-like fragments"));
  EXPECT_EQ(Bytes(), b);
}

TEST_F(DecisionLogTest, FewButLongRecordLikeFragmentsAreRefusedToo) {
  {
    auto log = OpenOk();
    ASSERT_TRUE(log->Append(1, Payload(1)).ok());
  }
  // A bad record, then ten record heads each claiming the rest of a 2 MiB file as its payload:
  // few candidates, but each would be checksummed over 2 MiB; the scan's byte budget ends it.
  const std::string head = Bytes();
  constexpr size_t kHeads = 10, kHeadBytes = 20, kTotal = 2u << 20;
  std::string b = head + std::string(kTotal - head.size(), '\0');
  for (size_t i = 0; i < kHeads; ++i) {
    const size_t at = head.size() + i * kHeadBytes;
    std::string h = EncodeDecisionRecord(9, "").substr(0, kHeadBytes);
    const uint32_t len = static_cast<uint32_t>(kTotal - at - kHeadBytes - 4);
    for (int k = 0; k < 4; ++k) h[16 + k] = static_cast<char>(len >> (8 * k));
    b.replace(at, kHeadBytes, h);
  }
  Write(b);
  absl::StatusOr<std::unique_ptr<DecisionLog>> log = DecisionLog::Open(dir_.string(), kFresh, 4);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(log.status().message(), HasSubstr("record-like fragments"));
  EXPECT_EQ(Bytes(), b);
}

}  // namespace
}  // namespace heddle::relay
