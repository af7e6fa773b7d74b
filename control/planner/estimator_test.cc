#include "control/planner/estimator.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace heddle::planner {
namespace {

using Outcome = ThroughputEstimator::Outcome;

TEST(EstimatorTest, StartsAtTheProfileAndAveragesTheFirstSamplesWithIt) {
  ThroughputEstimator e(EstimatorConfig{});
  EXPECT_DOUBLE_EQ(e.Scale(), 1.0);
  EXPECT_EQ(e.Add(0.8), Outcome::kAccepted);
  EXPECT_NEAR(e.Scale(), std::sqrt(0.8), 1e-12);  // the profile counts as one sample
  EXPECT_EQ(e.Add(0.8), Outcome::kAccepted);
  EXPECT_NEAR(e.Scale(), std::pow(0.8, 2.0 / 3), 1e-12);
}

TEST(EstimatorTest, ConvergesUnderNoise) {
  for (double truth : {0.6, 1.0, 1.7}) {
    std::mt19937_64 g(7);
    std::normal_distribution<double> noise(0, 0.05);
    ThroughputEstimator e(EstimatorConfig{});
    double dev_sum = 0, scale_sum = 0;
    for (int j = 0; j < 1000; ++j) {
      e.Add(truth * std::exp(noise(g)));
      if (j >= 500) {
        dev_sum += e.Deviation();
        scale_sum += e.Scale();
      }
    }
    // The EWMA's own σ is 5 % · sqrt(α/(2 − α)) = 1.7 %: within 3.3 σ at any one time, and
    // unbiased on average.
    EXPECT_NEAR(e.Scale() / truth, 1.0, 0.055) << truth;
    EXPECT_NEAR(scale_sum / 500 / truth, 1.0, 0.01) << truth;
    // The deviation averages |sample − mean| ≈ E|N(0, σ·sqrt(1 + α/(2 − α)))|.
    EXPECT_NEAR(dev_sum / 500, 0.05 * std::sqrt(2 / M_PI) * std::sqrt(1 + 0.2 / 1.8), 0.006)
        << truth;
    EXPECT_LT(e.rejected(), 10) << truth;  // k = 4 deviations rejects well under 1 % of noise
  }
}

TEST(EstimatorTest, RejectsIsolatedOutliers) {
  std::mt19937_64 g(11);
  std::normal_distribution<double> noise(0, 0.02);
  ThroughputEstimator e(EstimatorConfig{});
  for (int j = 0; j < 100; ++j) e.Add(std::exp(noise(g)));
  const double before = e.Scale();
  // A preempted round (3× slower) and a bogus fast one, each alone, alternating sides.
  EXPECT_EQ(e.Add(1.0 / 3), Outcome::kRejected);
  EXPECT_EQ(e.Add(3.0), Outcome::kRejected);
  EXPECT_EQ(e.Add(1.0 / 3), Outcome::kRejected);
  EXPECT_EQ(e.Add(1.01), Outcome::kAccepted);
  EXPECT_EQ(e.Add(1.0 / 3), Outcome::kRejected);
  EXPECT_NEAR(e.Scale(), before, 0.01);
  EXPECT_EQ(e.rejected(), 4);
  EXPECT_EQ(e.shifts(), 0);
}

TEST(EstimatorTest, AcceptsAPersistentLevelShift) {
  std::mt19937_64 g(13);
  std::normal_distribution<double> noise(0, 0.02);
  ThroughputEstimator e(EstimatorConfig{.shift_after = 3});
  for (int j = 0; j < 100; ++j) e.Add(std::exp(noise(g)));
  // The worker is throttled to half speed for good.
  EXPECT_EQ(e.Add(0.5 * std::exp(noise(g))), Outcome::kRejected);
  EXPECT_EQ(e.Add(0.5 * std::exp(noise(g))), Outcome::kRejected);
  EXPECT_EQ(e.Add(0.5 * std::exp(noise(g))), Outcome::kShifted);
  EXPECT_NEAR(e.Scale(), 0.5, 0.02);
  for (int j = 0; j < 50; ++j) e.Add(0.5 * std::exp(noise(g)));
  EXPECT_NEAR(e.Scale(), 0.5, 0.01);
}

TEST(EstimatorTest, SmallDriftIsTrackedWithoutRejection) {
  // 1 % per round of drift (well inside the gate) is followed by the EWMA.
  ThroughputEstimator e(EstimatorConfig{});
  double truth = 1.0;
  for (int j = 0; j < 60; ++j) {
    truth *= 0.99;
    EXPECT_EQ(e.Add(truth), Outcome::kAccepted);
  }
  // An EWMA of a ramp lags it by (1 − α)/α steps of 1 %: about 4 %.
  EXPECT_NEAR(e.Scale() / truth, std::pow(1 / 0.99, 0.8 / 0.2), 0.01);
}

TEST(EstimatorTest, ValidatesItsConfig) {
  EXPECT_TRUE(ValidateEstimatorConfig(EstimatorConfig{}).ok());
  EXPECT_FALSE(ValidateEstimatorConfig(EstimatorConfig{.alpha = 0}).ok());
  EXPECT_FALSE(ValidateEstimatorConfig(EstimatorConfig{.alpha = NAN}).ok());
  EXPECT_FALSE(ValidateEstimatorConfig(EstimatorConfig{.dev_alpha = 1.5}).ok());
  EXPECT_FALSE(ValidateEstimatorConfig(EstimatorConfig{.min_dev = 0}).ok());
  EXPECT_FALSE(ValidateEstimatorConfig(EstimatorConfig{.reject_k = 0.5}).ok());
  EXPECT_FALSE(ValidateEstimatorConfig(EstimatorConfig{.shift_after = 0}).ok());
}

}  // namespace
}  // namespace heddle::planner
