#include "dataplane/relay/wan/decision_log.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
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
  void TearDown() override { std::filesystem::remove_all(dir_); }

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
  auto log = OpenOk(4, {.instance = 99, .spec_digest = 1, .region_id = 1});
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
  for (size_t keep_bytes : {size_t{1}, size_t{10}, last / 2, last - 1}) {
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
  // A header of a newer format (its CRC recomputed would be needed to pass: a header with a
  // bumped version byte and a stale CRC is damaged; both are refused).
  std::string b = whole;
  b[4] = 2;
  Write(b);
  log = DecisionLog::Open(dir_.string(), kFresh, 4);
  ASSERT_FALSE(log.ok());
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

}  // namespace
}  // namespace heddle::relay
