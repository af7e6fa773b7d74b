// File: dataplane/lb/fairness_sim_test.cc
#include "dataplane/lb/fairness_sim.h"

#include <gtest/gtest.h>

#include <vector>

namespace heddle::lb {
namespace {

TEST(Jain, Extremes) {
  const std::vector<double> equal = {5, 5, 5, 5};
  const std::vector<double> one = {8, 0, 0, 0};
  const std::vector<double> zero = {0, 0};
  EXPECT_DOUBLE_EQ(JainIndex(equal), 1.0);
  EXPECT_DOUBLE_EQ(JainIndex(one), 0.25);
  EXPECT_DOUBLE_EQ(JainIndex(zero), 1.0);
}

TEST(Cdf, ByteSharesMatchTheReferenceTable) {
  // docs/pin.md §6 (from the HPCC CDFs, sizes uniform within intervals): at 104 KB pinned flows
  // carry ~1 % of WebSearch bytes and ~25 % of AliStorage bytes.
  EXPECT_NEAR(CdfByteShareAtOrBelow(Workload::kWebSearch, 104'000), 0.0104, 0.002);
  EXPECT_NEAR(CdfByteShareAtOrBelow(Workload::kAliStorage, 104'000), 0.248, 0.01);
  EXPECT_NEAR(CdfMean(Workload::kWebSearch), 1.7e6, 0.1e6);
  EXPECT_NEAR(CdfMean(Workload::kAliStorage), 41e3, 3e3);
}

FairnessParams Short(Workload w, BalancerKind k, bool pin) {
  return {.workload = w, .balancer = k, .pin = pin, .duration_ns = 10'000'000};
}

TEST(FairnessSim, DeterministicUnderTheSeed) {
  const FairnessResult a = SimulateFairness(Short(Workload::kWebSearch, BalancerKind::kReps, true));
  const FairnessResult b = SimulateFairness(Short(Workload::kWebSearch, BalancerKind::kReps, true));
  EXPECT_EQ(a.path_bytes, b.path_bytes);
  EXPECT_EQ(a.packets, b.packets);
}

// The claim of docs/pin.md §6: with a 1-BDP threshold, spraying with PIN is about as fair as
// spraying everything, and far fairer than ECMP; the analysis predicts the windows' index.
TEST(FairnessSim, PinKeepsSprayingFair) {
  for (Workload w : {Workload::kWebSearch, Workload::kAliStorage}) {
    const FairnessResult ecmp = SimulateFairness(Short(w, BalancerKind::kEcmp, false));
    const FairnessResult rps = SimulateFairness(Short(w, BalancerKind::kRps, false));
    const FairnessResult pin = SimulateFairness(Short(w, BalancerKind::kRps, true));
    SCOPED_TRACE(WorkloadName(w));
    EXPECT_GT(rps.jain_window_mean, 0.95);
    EXPECT_GT(pin.jain_window_mean, 0.9);
    EXPECT_GT(pin.jain_window_mean, ecmp.jain_window_mean + 0.1);
    EXPECT_NEAR(pin.jain_window_mean, pin.jain_window_predicted, 0.03);
    EXPECT_NEAR(rps.jain_window_mean, rps.jain_window_predicted, 0.03);
    EXPECT_EQ(rps.pinned_byte_share, 0.0);
  }
  const FairnessResult web =
      SimulateFairness(Short(Workload::kWebSearch, BalancerKind::kRps, true));
  const FairnessResult ali =
      SimulateFairness(Short(Workload::kAliStorage, BalancerKind::kRps, true));
  EXPECT_LT(web.pinned_byte_share, 0.05);
  EXPECT_NEAR(ali.pinned_byte_share, 0.25, 0.08);
}

}  // namespace
}  // namespace heddle::lb
