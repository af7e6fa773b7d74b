#include "control/planner/model.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::planner {
namespace {

using ::testing::HasSubstr;

TEST(ThroughputModelTest, SaturatingIsHalfPeakAtHalfBatchAndItsStepTimeIsAffine) {
  const ThroughputModel m = ThroughputModel::Saturating(1000, 4);
  EXPECT_DOUBLE_EQ(m.TokensPerSecond(4), 500);
  EXPECT_DOUBLE_EQ(m.TokensPerSecond(12), 750);
  // t(b) = b·seq / r(b) = seq·(b + b½)/peak: with seq 10, t(4) = 0.08, t(12) = 0.16.
  EXPECT_DOUBLE_EQ(4 * 10 / m.TokensPerSecond(4), 0.08);
  EXPECT_DOUBLE_EQ(12 * 10 / m.TokensPerSecond(12), 0.16);
}

TEST(ThroughputModelTest, TableInterpolatesThroughOriginAndIsFlatBeyondTheLastPoint) {
  const ThroughputModel m = ThroughputModel::Table({{8, 8000}, {16, 12000}});
  EXPECT_DOUBLE_EQ(m.TokensPerSecond(4), 4000);
  EXPECT_DOUBLE_EQ(m.TokensPerSecond(8), 8000);
  EXPECT_DOUBLE_EQ(m.TokensPerSecond(12), 10000);
  EXPECT_DOUBLE_EQ(m.TokensPerSecond(16), 12000);
  EXPECT_DOUBLE_EQ(m.TokensPerSecond(64), 12000);
  EXPECT_TRUE(ValidateThroughputModel(m).ok());
}

TEST(ThroughputModelTest, RejectsBadRates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double r : {0.0, -5.0, nan, inf}) {
    EXPECT_EQ(ValidateThroughputModel(ThroughputModel::Constant(r)).code(),
              absl::StatusCode::kInvalidArgument)
        << r;
    EXPECT_EQ(ValidateThroughputModel(ThroughputModel::Saturating(r, 1)).code(),
              absl::StatusCode::kInvalidArgument)
        << r;
  }
  EXPECT_FALSE(ValidateThroughputModel(ThroughputModel::Saturating(100, -1)).ok());
  EXPECT_FALSE(ValidateThroughputModel(ThroughputModel::Saturating(100, nan)).ok());
  EXPECT_FALSE(ValidateThroughputModel(ThroughputModel::Table({})).ok());
  EXPECT_FALSE(ValidateThroughputModel(ThroughputModel::Table({{8, 100}, {8, 200}})).ok());
  EXPECT_FALSE(ValidateThroughputModel(ThroughputModel::Table({{8, 100}, {4, 50}})).ok());
  EXPECT_FALSE(ValidateThroughputModel(ThroughputModel::Table({{8, nan}})).ok());
  // Doubling the batch while the rate triples would make a step shorter: inconsistent.
  const absl::Status s = ValidateThroughputModel(ThroughputModel::Table({{8, 100}, {16, 300}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("shorter step"));
  // Doubling the batch while the rate doubles keeps the step time: allowed.
  EXPECT_TRUE(ValidateThroughputModel(ThroughputModel::Table({{8, 100}, {16, 200}})).ok());
}

WorkerSpec Spec() {
  return WorkerSpec{.id = "w0", .throughput = ThroughputModel::Constant(1000), .max_batch = 16};
}

TEST(WorkerSpecTest, MaxBatchFromMemory) {
  WorkerSpec w = Spec();
  w.max_batch = 0;
  w.memory_bytes = 80'000;
  w.fixed_bytes = 30'000;
  w.bytes_per_sample = 3'000;
  ASSERT_TRUE(ValidateWorkerSpec(w, 2048).ok());
  EXPECT_EQ(MemoryMaxBatch(w), 16);  // floor(50000 / 3000)
}

TEST(WorkerSpecTest, RejectsMemoryTooSmallForOneSample) {
  WorkerSpec w = Spec();
  w.max_batch = 0;
  w.memory_bytes = 10'000;
  w.fixed_bytes = 9'000;
  w.bytes_per_sample = 3'000;
  const absl::Status s = ValidateWorkerSpec(w, 2048);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("memory too small"));
  EXPECT_THAT(s.message(), HasSubstr("w0"));
}

TEST(WorkerSpecTest, RejectsMissingCapacityBadIdsAndBadSpeeds) {
  WorkerSpec w = Spec();
  w.max_batch = 0;
  EXPECT_FALSE(ValidateWorkerSpec(w, 2048).ok());
  w = Spec();
  w.max_batch = -3;
  EXPECT_FALSE(ValidateWorkerSpec(w, 2048).ok());
  for (const char* id : {"", "has space", "tab\t", "\x01"}) {
    w = Spec();
    w.id = id;
    EXPECT_FALSE(ValidateWorkerSpec(w, 2048).ok()) << id;
  }
  w = Spec();
  w.throughput = ThroughputModel::Constant(-1);
  const absl::Status s = ValidateWorkerSpec(w, 2048);
  EXPECT_THAT(s.message(), HasSubstr("worker w0: throughput"));
  w = Spec();
  w.seq_len = -1;
  EXPECT_FALSE(ValidateWorkerSpec(w, 2048).ok());
  w = Spec();
  EXPECT_FALSE(ValidateWorkerSpec(w, 0).ok());  // no default and no own seq_len
  w.seq_len = 128;
  EXPECT_TRUE(ValidateWorkerSpec(w, 0).ok());
  w = Spec();
  w.max_batch = 1 << 20;
  EXPECT_FALSE(ValidateWorkerSpec(w, 4096).ok());  // 2^32 tokens a step
  w = Spec();
  w.min_tokens_per_round = -1;
  EXPECT_FALSE(ValidateWorkerSpec(w, 2048).ok());
}

}  // namespace
}  // namespace heddle::planner
