#include "control/planner/solver.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::planner {
namespace {

using ::testing::HasSubstr;

SolverWorker Constant(const std::string& id, double rate, int64_t max_batch) {
  return {
      WorkerSpec{.id = id, .throughput = ThroughputModel::Constant(rate), .max_batch = max_batch},
      1.0};
}

SolverWorker Saturating(const std::string& id, double peak, double half, int64_t max_batch) {
  return {
      WorkerSpec{
          .id = id, .throughput = ThroughputModel::Saturating(peak, half), .max_batch = max_batch},
      1.0};
}

const WorkerAssignment& Find(const Plan& p, const std::string& id) {
  for (const WorkerAssignment& a : p.workers) {
    if (a.worker_id == id) return a;
  }
  static const WorkerAssignment none;
  ADD_FAILURE() << "no assignment for " << id;
  return none;
}

// Two constant-rate workers, seq_len 1: 100 and 200 tokens/s, 10 s of compute. A can carry at most
// 1000 tokens (b=10, H=100 or b=5, H=200: equal tokens, equal finish; the larger batch wins), B
// 2000 (b=10, H=200).
TEST(SolverTest, HandCheckedConstantRates) {
  SolverConfig c{.target_round_s = 10, .min_inner_steps = 1, .max_inner_steps = 1000, .seq_len = 1};
  std::vector<SolverWorker> ws = {Constant("b", 200, 10), Constant("a", 100, 10)};
  absl::StatusOr<Plan> p = Solve(c, ws);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->workers.size(), 2u);
  EXPECT_EQ(p->workers[0].worker_id, "a");  // sorted by id
  EXPECT_EQ(Find(*p, "a").batch_size, 10);
  EXPECT_EQ(Find(*p, "a").inner_steps, 100);
  EXPECT_EQ(Find(*p, "a").tokens, 1000);
  EXPECT_EQ(Find(*p, "b").batch_size, 10);
  EXPECT_EQ(Find(*p, "b").inner_steps, 200);
  EXPECT_EQ(p->total_tokens, 3000);
  EXPECT_NEAR(p->predicted_compute_end_s, 10, 1e-9);
  EXPECT_NEAR(p->predicted_idle_s, 0, 1e-9);
  EXPECT_NEAR(p->predicted_tokens_per_s, 300, 1e-6);
}

// peak 100 tokens/s, half batch 1, seq 1: t(b) = (b + 1)/100. Within 0.245 s the largest batch
// (9: t = 0.1) fits 2 steps, 18 tokens; b = 7 (t = 0.08) fits 3 steps, 21 tokens, the best:
// b=8→16, 6→18, 5→20, 4→16, 3→18, 2→16, 1→12.
TEST(SolverTest, HandCheckedIntegerRoundingPicksASmallerBatch) {
  SolverConfig c{
      .target_round_s = 0.245, .min_inner_steps = 1, .max_inner_steps = 100, .seq_len = 1};
  std::vector<SolverWorker> ws = {Saturating("w", 100, 1, 9)};
  absl::StatusOr<Plan> p = Solve(c, ws);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->workers[0].batch_size, 7);
  EXPECT_EQ(p->workers[0].inner_steps, 3);
  EXPECT_EQ(p->workers[0].tokens, 21);
  EXPECT_NEAR(p->workers[0].predicted_finish_s, 0.24, 1e-12);
  EXPECT_EQ(p->workers[0].max_batch, 9);
}

TEST(SolverTest, BatchGranularityAndMinimumBatch) {
  // Same worker, batches multiples of 4 from 4: only 4 and 8 (max 9 → 8). b=8: t=0.09, 2 steps,
  // 16 tokens; b=4: t=0.05, 4 steps (0.2 s), 16 tokens, but later... 0.2 > 0.18: b=8 finishes
  // first with the same tokens and wins.
  SolverConfig c{.target_round_s = 0.245,
                 .min_inner_steps = 1,
                 .max_inner_steps = 100,
                 .batch_granularity = 4,
                 .seq_len = 1};
  std::vector<SolverWorker> ws = {Saturating("w", 100, 1, 9)};
  absl::StatusOr<Plan> p = Solve(c, ws);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->workers[0].batch_size, 8);
  EXPECT_EQ(p->workers[0].inner_steps, 2);
  EXPECT_EQ(p->workers[0].max_batch, 8);
  // A minimum batch of 10 (rounded up to 12) does not fit a worker whose memory holds 9.
  c.min_batch = 10;
  absl::StatusOr<Plan> q = Solve(c, ws);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(q.status().message(), HasSubstr("less than the minimum batch 12"));
}

// Budget mode: 100 and 300 tokens/s, seq 1, batch 10, a 2000-token budget. At compute budget T
// they carry 100T + 300T, so the shortest round is T = 5 (500 + 1500 tokens).
TEST(SolverTest, TokenBudgetGivesTheShortestRound) {
  SolverConfig c{
      .min_inner_steps = 1, .max_inner_steps = 1000, .seq_len = 1, .tokens_per_round = 2000};
  std::vector<SolverWorker> ws = {Constant("a", 100, 10), Constant("b", 300, 10)};
  absl::StatusOr<Plan> p = Solve(c, ws);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->compute_budget_s, 5, 1e-6);
  EXPECT_EQ(p->total_tokens, 2000);
  EXPECT_EQ(Find(*p, "a").tokens, 500);
  EXPECT_EQ(Find(*p, "b").tokens, 1500);
  // With a target below 5 s the budget is out of reach.
  c.target_round_s = 4;
  absl::StatusOr<Plan> q = Solve(c, ws);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(q.status().message(), HasSubstr("tokens_per_round 2000 is out of reach"));
  // Beyond what max_inner_steps allows: 10·1000 + 10·1000 < 30000.
  c.target_round_s = 0;
  c.tokens_per_round = 30000;
  EXPECT_EQ(Solve(c, ws).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SolverTest, PerWorkerTokenFloorSetsTheRound) {
  // a must carry 800 tokens: 8 s at 100 tokens/s; b fills the 8 s too.
  SolverConfig c{.min_inner_steps = 1, .max_inner_steps = 1000, .seq_len = 1};
  std::vector<SolverWorker> ws = {Constant("a", 100, 10), Constant("b", 300, 10)};
  ws[0].spec.min_tokens_per_round = 800;
  absl::StatusOr<Plan> p = Solve(c, ws);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->compute_budget_s, 8, 1e-6);
  EXPECT_EQ(Find(*p, "a").tokens, 800);
  EXPECT_EQ(Find(*p, "b").tokens, 2400);
}

TEST(SolverTest, CommunicationTimeOverlappedOrNot) {
  SolverConfig c{.target_round_s = 100,
                 .min_inner_steps = 1,
                 .max_inner_steps = 1000,
                 .seq_len = 1,
                 .comm_s = 20};
  std::vector<SolverWorker> ws = {Constant("a", 10, 1)};
  absl::StatusOr<Plan> p = Solve(c, ws);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->compute_budget_s, 80);
  EXPECT_EQ(p->workers[0].inner_steps, 800);
  EXPECT_NEAR(p->predicted_round_s, 100, 1e-9);
  c.comm_overlaps = true;
  p = Solve(c, ws);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->compute_budget_s, 100);
  EXPECT_EQ(p->workers[0].inner_steps, 1000);
  EXPECT_NEAR(p->predicted_round_s, 100, 1e-9);
  c.comm_overlaps = false;
  c.comm_s = 100;
  EXPECT_EQ(Solve(c, ws).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SolverTest, FinishMarginLeavesHeadroom) {
  // 0.1 s steps guarded by 25 %: 800 steps (80 s expected, 100 s guarded) fit 100 s.
  SolverConfig c{
      .target_round_s = 100, .min_inner_steps = 1, .max_inner_steps = 10000, .seq_len = 1};
  std::vector<SolverWorker> ws = {Constant("a", 10, 1)};
  ws[0].finish_margin = 0.25;
  absl::StatusOr<Plan> p = Solve(c, ws);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->workers[0].inner_steps, 800);
  EXPECT_NEAR(p->workers[0].predicted_finish_s, 80, 1e-9);
  EXPECT_NEAR(p->workers[0].predicted_finish_high_s, 100, 1e-9);
  ws[0].finish_margin = -0.1;
  EXPECT_EQ(Solve(c, ws).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SolverTest, DerivedTargetLetsTheSlowestRunMinStepsAtItsLargestBatch) {
  SolverConfig c{.min_inner_steps = 10, .max_inner_steps = 1000, .seq_len = 1, .comm_s = 5};
  std::vector<SolverWorker> ws = {Constant("slow", 10, 4), Constant("fast", 40, 4)};
  absl::StatusOr<Plan> p = Solve(c, ws);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->compute_budget_s, 4.0);  // 10 steps of 0.4 s
  EXPECT_DOUBLE_EQ(p->target_round_s, 9.0);
  EXPECT_EQ(Find(*p, "slow").inner_steps, 10);
  EXPECT_EQ(Find(*p, "fast").inner_steps, 40);
}

TEST(SolverTest, RejectsBadInputWithClearErrors) {
  SolverConfig c{.target_round_s = 10, .min_inner_steps = 50, .max_inner_steps = 100, .seq_len = 1};
  // 50 steps of batch 1 at 1 token/s need 50 s.
  absl::StatusOr<Plan> p = Solve(c, std::vector<SolverWorker>{Constant("sloth", 1, 4)});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(p.status().message(), HasSubstr("worker sloth needs 50 s for min_inner_steps 50"));

  c.min_inner_steps = 1;
  EXPECT_EQ(Solve(c, {}).status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<SolverWorker> dup = {Constant("x", 10, 4), Constant("x", 20, 4)};
  EXPECT_THAT(Solve(c, dup).status().message(), HasSubstr("appears twice"));
  std::vector<SolverWorker> nan = {Constant("x", 10, 4)};
  nan[0].speed_scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(Solve(c, nan).status().code(), absl::StatusCode::kInvalidArgument);
  nan[0].speed_scale = 0;
  EXPECT_EQ(Solve(c, nan).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<SolverWorker> bad_rate = {Constant("x", -10, 4)};
  EXPECT_EQ(Solve(c, bad_rate).status().code(), absl::StatusCode::kInvalidArgument);

  std::vector<SolverWorker> one = {Constant("x", 10, 4)};
  for (auto mutate : std::vector<void (*)(SolverConfig&)>{
           [](SolverConfig& c) { c.target_round_s = std::numeric_limits<double>::quiet_NaN(); },
           [](SolverConfig& c) { c.target_round_s = -1; },
           [](SolverConfig& c) { c.min_inner_steps = 0; },
           [](SolverConfig& c) { c.max_inner_steps = 0; },
           [](SolverConfig& c) { c.batch_granularity = 0; },
           [](SolverConfig& c) { c.seq_len = 0; },
           [](SolverConfig& c) { c.tokens_per_round = -1; },
           [](SolverConfig& c) { c.comm_s = std::numeric_limits<double>::infinity(); },
       }) {
    SolverConfig bad = c;
    mutate(bad);
    EXPECT_EQ(Solve(bad, one).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// --- Properties on random worker sets. ---

struct Case {
  SolverConfig config;
  std::vector<SolverWorker> workers;
};

Case RandomCase(std::mt19937_64& g) {
  auto uni = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(g);
  };
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(g);
  };
  Case c;
  c.config.seq_len = std::array<int64_t, 3>{1, 512, 2048}[pick(0, 2)];
  c.config.batch_granularity = std::array<int64_t, 4>{1, 2, 4, 8}[pick(0, 3)];
  c.config.min_inner_steps = pick(1, 20);
  c.config.max_inner_steps = c.config.min_inner_steps + pick(0, 500);
  c.config.comm_s = pick(0, 1) ? uni(0, 30) : 0;
  c.config.comm_overlaps = pick(0, 1);
  const int n = static_cast<int>(pick(1, 12));
  for (int i = 0; i < n; ++i) {
    SolverWorker w;
    w.spec.id = absl::StrCat("w", i);
    const double peak = 2048.0 * std::exp(uni(0, std::log(64.0))) * 8;
    switch (pick(0, 2)) {
      case 0:
        w.spec.throughput = ThroughputModel::Constant(peak);
        break;
      case 1:
        w.spec.throughput = ThroughputModel::Saturating(peak, uni(0, 16));
        break;
      default: {
        // Rates rising with the batch but step times rising too.
        std::vector<ThroughputPoint> pts;
        double b = 1, r = peak / 4;
        for (int j = 0; j < 4; ++j) {
          pts.push_back({b, r});
          b *= 2;
          r *= uni(1.0, 2.0);
        }
        w.spec.throughput = ThroughputModel::Table(pts);
      }
    }
    w.spec.max_batch = c.config.batch_granularity * pick(1, 8) + pick(0, 3);
    w.speed_scale = uni(0.5, 1.5);
    w.finish_margin = pick(0, 1) ? uni(0, 0.2) : 0;
    c.workers.push_back(w);
  }
  c.config.target_round_s = uni(20, 400) + (c.config.comm_overlaps ? 0 : c.config.comm_s);
  return c;
}

// The best b·H for one worker by brute force over every batch and step count.
int64_t BruteForceUnits(const SolverConfig& c, const SolverWorker& w, double budget) {
  const int64_t k = c.batch_granularity;
  const int64_t b_min = std::max(c.min_batch, k);
  const int64_t seq = EffectiveSeqLen(w.spec, c.seq_len);
  int64_t best = -1;
  for (int64_t b = (b_min + k - 1) / k * k; b <= w.spec.max_batch; b += k) {
    const double t = static_cast<double>(b * seq) /
                     (w.speed_scale * w.spec.throughput.TokensPerSecond(static_cast<double>(b))) *
                     (1 + w.finish_margin);
    for (int64_t h = c.min_inner_steps; h <= c.max_inner_steps; ++h) {
      if (static_cast<double>(h) * t <= budget) best = std::max(best, b * h);
    }
  }
  return best;
}

bool SamePlan(const Plan& a, const Plan& b) {
  if (a.workers.size() != b.workers.size()) return false;
  for (size_t j = 0; j < a.workers.size(); ++j) {
    const WorkerAssignment& x = a.workers[j];
    const WorkerAssignment& y = b.workers[j];
    if (x.worker_id != y.worker_id || x.batch_size != y.batch_size ||
        x.inner_steps != y.inner_steps || x.tokens != y.tokens ||
        x.predicted_finish_s != y.predicted_finish_s || x.predicted_idle_s != y.predicted_idle_s) {
      return false;
    }
  }
  return a.compute_budget_s == b.compute_budget_s && a.total_tokens == b.total_tokens &&
         a.predicted_round_s == b.predicted_round_s && a.predicted_idle_s == b.predicted_idle_s;
}

TEST(SolverPropertyTest, RandomWorkerSets) {
  std::mt19937_64 g(20261203);
  int solved = 0, brute_checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Case cs = RandomCase(g);
    const SolverConfig& c = cs.config;
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    absl::StatusOr<Plan> p = Solve(c, cs.workers);
    if (!p.ok()) {
      // Only "some worker cannot run min_inner_steps in the target" is an acceptable refusal.
      EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
      EXPECT_THAT(p.status().message(), HasSubstr("min_inner_steps"));
      continue;
    }
    ++solved;
    const double budget = p->compute_budget_s;
    EXPECT_LE(budget + (c.comm_overlaps ? 0 : c.comm_s), c.target_round_s * (1 + 1e-12));
    ASSERT_EQ(p->workers.size(), cs.workers.size());
    double end = 0;
    for (const WorkerAssignment& a : p->workers) end = std::max(end, a.predicted_finish_s);
    double idle = 0;
    for (const WorkerAssignment& a : p->workers) {
      const SolverWorker& w =
          *std::find_if(cs.workers.begin(), cs.workers.end(),
                        [&](const SolverWorker& x) { return x.spec.id == a.worker_id; });
      SCOPED_TRACE(a.worker_id);
      EXPECT_LE(a.batch_size, w.spec.max_batch);         // memory
      EXPECT_EQ(a.batch_size % c.batch_granularity, 0);  // granularity
      EXPECT_GE(a.batch_size, c.batch_granularity);
      EXPECT_GE(a.inner_steps, c.min_inner_steps);  // step bounds
      EXPECT_LE(a.inner_steps, c.max_inner_steps);
      EXPECT_LE(a.predicted_finish_high_s, budget);  // finishes within the budget
      EXPECT_LE(a.predicted_finish_s, a.predicted_finish_high_s);
      // Not capped by max_inner_steps: one more guarded step would not fit, so the worker's slack
      // before the budget is under one step.
      if (a.inner_steps < c.max_inner_steps) {
        EXPECT_LT(budget - a.predicted_finish_high_s,
                  a.step_s * (1 + a.finish_margin) * (1 + 1e-9));
      }
      EXPECT_EQ(a.tokens, a.batch_size * a.inner_steps * a.seq_len);
      EXPECT_GE(a.predicted_idle_s, 0);
      EXPECT_DOUBLE_EQ(a.predicted_idle_s, end - a.predicted_finish_s);
      idle += a.predicted_idle_s;
      // Optimal per worker (within a hair of the budget, for floating-point ties).
      if (c.max_inner_steps <= 200) {
        EXPECT_EQ(a.batch_size * a.inner_steps, BruteForceUnits(c, w, budget));
        ++brute_checked;
      }
    }
    EXPECT_NEAR(p->predicted_idle_s, idle, 1e-9 * (1 + idle));

    // Determinism: any input order, bit-identical plan.
    std::vector<SolverWorker> shuffled = cs.workers;
    std::shuffle(shuffled.begin(), shuffled.end(), g);
    absl::StatusOr<Plan> q = Solve(c, shuffled);
    ASSERT_TRUE(q.ok());
    EXPECT_TRUE(SamePlan(*p, *q));

    // Monotonicity: a copy of each worker that is faster never gets fewer tokens.
    std::vector<SolverWorker> with_fast = cs.workers;
    for (const SolverWorker& w : cs.workers) {
      SolverWorker f = w;
      f.spec.id = w.spec.id + "-fast";
      f.speed_scale = w.speed_scale * std::uniform_real_distribution<double>(1.0, 3.0)(g);
      with_fast.push_back(f);
    }
    absl::StatusOr<Plan> r = Solve(c, with_fast);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const SolverWorker& w : cs.workers) {
      EXPECT_GE(Find(*r, w.spec.id + "-fast").tokens, Find(*r, w.spec.id).tokens) << w.spec.id;
    }
  }
  EXPECT_GT(solved, 150);
  EXPECT_GT(brute_checked, 100);
  std::printf("%d of 300 sets solved, %d assignments checked by brute force\n", solved,
              brute_checked);
}

TEST(SolverTest, RepredictKeepsAssignmentsAndMovesFinishTimes) {
  SolverConfig c{.target_round_s = 10, .min_inner_steps = 1, .max_inner_steps = 1000, .seq_len = 1};
  std::vector<SolverWorker> ws = {Constant("a", 100, 10), Constant("b", 200, 10)};
  absl::StatusOr<Plan> p = Solve(c, ws);
  ASSERT_TRUE(p.ok());
  ws[1].speed_scale = 0.5;  // b now runs at 100 tokens/s: its 200 steps take 20 s
  const Plan q = Repredict(*p, ws, c);
  EXPECT_EQ(Find(q, "b").inner_steps, 200);
  EXPECT_NEAR(Find(q, "b").predicted_finish_s, 20, 1e-9);
  EXPECT_NEAR(Find(q, "a").predicted_idle_s, 10, 1e-9);
  EXPECT_NEAR(q.predicted_idle_fraction, 10.0 / 40, 1e-9);
}

}  // namespace
}  // namespace heddle::planner
