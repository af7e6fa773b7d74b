#include "control/planner/planner.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::planner {
namespace {

using ::testing::HasSubstr;

// 1:2:4 speeds, 2048-token samples, batch up to 32, 600 s rounds with a 30 s exchange.
PlannerConfig Config() {
  PlannerConfig c;
  c.solver = SolverConfig{.target_round_s = 600,
                          .min_inner_steps = 10,
                          .max_inner_steps = 1000,
                          .seq_len = 2048,
                          .comm_s = 30};
  return c;
}

WorkerSpec Spec(const std::string& id, double peak) {
  return WorkerSpec{.id = id, .throughput = ThroughputModel::Saturating(peak, 4), .max_batch = 32};
}

std::unique_ptr<Planner> Make124(const PlannerConfig& c = Config()) {
  absl::StatusOr<std::unique_ptr<Planner>> p = Planner::Create(c);
  EXPECT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE((*p)->AddWorker(Spec("a", 10000)).ok());
  EXPECT_TRUE((*p)->AddWorker(Spec("b", 20000)).ok());
  EXPECT_TRUE((*p)->AddWorker(Spec("c", 40000)).ok());
  return *std::move(p);
}

// The compute time a worker of true peak `peak` needs for its assignment, times `noise`.
double TrueCompute(const WorkerAssignment& a, double peak, double noise = 1) {
  const double rate = peak * a.batch_size / (a.batch_size + 4.0);
  return a.inner_steps * (a.batch_size * 2048.0 / rate) * noise;
}

// One round: every worker reports its true compute time (peaks in id order a, b, c).
std::vector<ReportResult> RunRound(Planner& p, uint64_t round, const std::vector<double>& peaks,
                                   std::mt19937_64* g = nullptr, double sigma = 0) {
  absl::StatusOr<Plan> plan = p.CurrentPlan();
  EXPECT_TRUE(plan.ok());
  std::vector<ReportResult> out;
  for (size_t i = 0; i < plan->workers.size(); ++i) {
    const WorkerAssignment& a = plan->workers[i];
    const double noise =
        g != nullptr ? std::exp(std::normal_distribution<double>(0, sigma)(*g)) : 1.0;
    absl::StatusOr<ReportResult> r = p.Report({.worker_id = a.worker_id,
                                               .round = round,
                                               .batch_size = a.batch_size,
                                               .inner_steps = a.inner_steps,
                                               .compute_s = TrueCompute(a, peaks[i], noise)});
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) out.push_back(*r);
  }
  return out;
}

TEST(PlannerTest, RejectsBadConfig) {
  PlannerConfig c = Config();
  c.solver.target_round_s = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(Planner::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Config();
  c.replan.idle_threshold = 1.5;
  EXPECT_EQ(Planner::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Config();
  c.estimator.alpha = -1;
  EXPECT_EQ(Planner::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlannerTest, MembershipChangesReplanAtomically) {
  absl::StatusOr<std::unique_ptr<Planner>> pp = Planner::Create(Config());
  ASSERT_TRUE(pp.ok());
  Planner& p = **pp;
  EXPECT_EQ(p.CurrentPlan().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(p.AddWorker(Spec("a", 10000)).ok());
  absl::StatusOr<Plan> one = p.CurrentPlan();
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->version, 1u);
  EXPECT_EQ(one->reason, "join a");
  ASSERT_TRUE(p.AddWorker(Spec("c", 40000)).ok());
  absl::StatusOr<Plan> two = p.CurrentPlan();
  ASSERT_EQ(two->workers.size(), 2u);
  EXPECT_EQ(two->version, 2u);
  // c is 4× faster: about the same batch and 4× the tokens (integer steps shift it a little).
  EXPECT_GE(two->workers[0].batch_size, 28);
  EXPECT_GE(two->workers[1].batch_size, 28);
  EXPECT_NEAR(static_cast<double>(two->workers[1].tokens) / two->workers[0].tokens, 4, 0.1);

  // Invalid, duplicate and unplannable workers change nothing.
  EXPECT_EQ(p.AddWorker(Spec("bad", -1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.AddWorker(Spec("nan", std::numeric_limits<double>::quiet_NaN())).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.AddWorker(Spec("a", 10000)).code(), absl::StatusCode::kAlreadyExists);
  // 10 steps of batch 1 at 30 tokens/s take 10·2048/6 s ≫ 570 s.
  const absl::Status slow = p.AddWorker(Spec("sloth", 30));
  EXPECT_EQ(slow.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(slow.message(), HasSubstr("sloth not added"));
  EXPECT_EQ(p.Estimate("sloth").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(p.CurrentPlan()->version, 2u);

  EXPECT_EQ(p.RemoveWorker("zz").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(p.RemoveWorker("a").ok());
  absl::StatusOr<Plan> three = p.CurrentPlan();
  EXPECT_EQ(three->version, 3u);
  EXPECT_EQ(three->reason, "leave a");
  ASSERT_EQ(three->workers.size(), 1u);
  ASSERT_TRUE(p.RemoveWorker("c").ok());
  EXPECT_EQ(p.CurrentPlan().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PlannerTest, ReportValidation) {
  std::unique_ptr<Planner> p = Make124();
  const Plan plan = *p->CurrentPlan();
  WorkerReport ok{
      .worker_id = "a", .round = 5, .batch_size = 32, .inner_steps = 10, .compute_s = 100};
  auto with = [&](auto f) {
    WorkerReport r = ok;
    f(r);
    return p->Report(r).status().code();
  };
  EXPECT_EQ(with([](WorkerReport& r) { r.worker_id = "nobody"; }), absl::StatusCode::kNotFound);
  EXPECT_EQ(with([](WorkerReport& r) { r.compute_s = 0; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](WorkerReport& r) { r.compute_s = -1; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](WorkerReport& r) { r.compute_s = std::numeric_limits<double>::quiet_NaN(); }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](WorkerReport& r) { r.compute_s = std::numeric_limits<double>::infinity(); }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](WorkerReport& r) { r.batch_size = 0; }), absl::StatusCode::kInvalidArgument);
  // Milliseconds passed as seconds: 10 steps of 32 × 2048 tokens in 1e-4 s.
  EXPECT_EQ(with([](WorkerReport& r) { r.compute_s = 1e-4; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](WorkerReport& r) { r.compute_s = 1e-300; }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](WorkerReport& r) { r.inner_steps = -2; }), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(p->Report(ok).ok());
  EXPECT_EQ(p->Report(ok).status().code(), absl::StatusCode::kAlreadyExists);
  // Invalid reports never reached the estimator.
  EXPECT_EQ(p->Estimate("a")->accepted + p->Estimate("a")->rejected, 1);
  WorkerReport b = ok, c = ok;
  b.worker_id = "b";
  c.worker_id = "c";
  ASSERT_TRUE(p->Report(b).ok());
  absl::StatusOr<ReportResult> last = p->Report(c);
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->round_complete);
  EXPECT_EQ(p->Report(ok).status().code(), absl::StatusCode::kFailedPrecondition);  // round done
  ok.round = 3;
  EXPECT_EQ(p->Report(ok).status().code(), absl::StatusCode::kFailedPrecondition);  // older
}

TEST(PlannerTest, MeasuredIdlePerWorkerAndRound) {
  std::unique_ptr<Planner> p = Make124();
  const Plan plan = *p->CurrentPlan();
  const double finishes[] = {500, 450, 480};
  for (int i = 0; i < 3; ++i) {
    const WorkerAssignment& a = plan.workers[i];
    ASSERT_TRUE(p->Report({.worker_id = a.worker_id,
                           .round = 1,
                           .batch_size = a.batch_size,
                           .inner_steps = a.inner_steps,
                           .compute_s = finishes[i]})
                    .ok());
  }
  std::vector<RoundIdle> rounds = p->RecentRounds();
  ASSERT_EQ(rounds.size(), 1u);
  const RoundIdle& r = rounds[0];
  EXPECT_EQ(r.round, 1u);
  EXPECT_EQ(r.plan_version, plan.version);
  EXPECT_DOUBLE_EQ(r.compute_end_s, 500);
  ASSERT_EQ(r.workers.size(), 3u);
  EXPECT_DOUBLE_EQ(r.workers[0].idle_s, 0);
  EXPECT_DOUBLE_EQ(r.workers[1].idle_s, 50);
  EXPECT_DOUBLE_EQ(r.workers[2].idle_s, 20);
  EXPECT_DOUBLE_EQ(r.idle_s, 70);
  EXPECT_DOUBLE_EQ(r.idle_fraction, 70.0 / 1500);
  EXPECT_DOUBLE_EQ(r.workers[1].predicted_idle_s, plan.workers[1].predicted_idle_s);
  EXPECT_NEAR(r.predicted_idle_s, plan.predicted_idle_s, 1e-9);
  EXPECT_EQ(r.tokens, plan.total_tokens);
}

TEST(PlannerTest, PlanPredictsLittleIdleFor124) {
  std::unique_ptr<Planner> p = Make124();
  const Plan plan = *p->CurrentPlan();
  EXPECT_DOUBLE_EQ(plan.compute_budget_s, 570);
  for (const WorkerAssignment& a : plan.workers) {
    EXPECT_GE(a.batch_size, 28);
    // 2 σ of the 3 % noise prior: the expected finish is 6 % under the budget.
    EXPECT_DOUBLE_EQ(a.finish_margin, 0.06);
    EXPECT_LE(a.predicted_finish_high_s, 570);
    EXPECT_GE(a.predicted_finish_high_s, 560);
    EXPECT_NEAR(a.predicted_finish_s, a.predicted_finish_high_s / 1.06, 1e-9);
  }
  EXPECT_LT(plan.predicted_idle_fraction, 0.01);
}

TEST(PlannerTest, PlanModeNames) {
  EXPECT_EQ(*ParsePlanMode("balanced"), PlanMode::kBalanced);
  EXPECT_EQ(*ParsePlanMode("equal"), PlanMode::kEqual);
  absl::StatusOr<PlanMode> bad = ParsePlanMode("fair");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"fair\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("balanced"));
  EXPECT_EQ(PlanModeName(PlanMode::kEqual), "equal");
  EXPECT_EQ(PlanModeName(PlanMode::kBalanced), "balanced");
}

TEST(PlannerTest, EqualModeGivesEveryWorkerTheSameBatchAndSteps) {
  PlannerConfig c = Config();
  c.mode = PlanMode::kEqual;
  std::unique_ptr<Planner> p = Make124(c);
  const Plan plan = *p->CurrentPlan();
  // The balanced plan's budget; batch 32 fits all; the slowest (10000 tokens/s peak) takes
  // 32·2048 / (10000·32/36) = 7.3728 s a step, so floor(570 / 7.3728) = 77 steps.
  EXPECT_DOUBLE_EQ(plan.compute_budget_s, 570);
  ASSERT_EQ(plan.workers.size(), 3u);
  for (const WorkerAssignment& a : plan.workers) {
    EXPECT_EQ(a.batch_size, 32) << a.worker_id;
    EXPECT_EQ(a.inner_steps, 77) << a.worker_id;
    EXPECT_EQ(a.tokens, 32 * 77 * 2048) << a.worker_id;
  }
  // Its predictions are those of the equal assignment: the 2× and 4× workers idle 1/2 and 3/4.
  EXPECT_NEAR(plan.predicted_idle_fraction, (0.5 + 0.75) / 3, 1e-9);

  // It never adapts to speeds, and the measured idle is computed as in balanced mode.
  const uint64_t v = plan.version;
  for (uint64_t r = 1; r <= 20; ++r) {
    for (const ReportResult& rr : RunRound(*p, r, {10000, 20000, 40000})) {
      EXPECT_FALSE(rr.replanned);
    }
  }
  EXPECT_EQ(p->CurrentPlan()->version, v);
  const RoundIdle last = p->RecentRounds().back();
  const double end = TrueCompute(plan.workers[0], 10000);
  EXPECT_NEAR(last.compute_end_s, end, 1e-9);
  EXPECT_NEAR(last.idle_s, end / 2 + end * 3 / 4, 1e-6);
  EXPECT_NEAR(last.idle_fraction, (0.5 + 0.75) / 3, 1e-9);

  // Balanced mode with the same reports idles far less.
  std::unique_ptr<Planner> b = Make124();
  for (uint64_t r = 1; r <= 20; ++r) RunRound(*b, r, {10000, 20000, 40000});
  EXPECT_LT(b->RecentRounds().back().idle_s * 5, last.idle_s);
  std::set<int64_t> steps;
  const Plan balanced = *b->CurrentPlan();
  for (const WorkerAssignment& a : balanced.workers) steps.insert(a.inner_steps);
  EXPECT_GT(steps.size(), 1u);
}

TEST(PlannerTest, EqualModeMatchesTheSimulationAndFollowsMembership) {
  PlannerConfig c = Config();
  c.mode = PlanMode::kEqual;
  absl::StatusOr<std::unique_ptr<Planner>> p = Planner::Create(c);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->AddWorker(Spec("a", 40000)).ok());
  // Alone at 4× speed: 32·2048 / (40000·32/36) = 1.8432 s a step, floor(570 / 1.8432) = 309.
  EXPECT_EQ((*p)->CurrentPlan()->workers[0].inner_steps, 309);
  // A slow worker with less memory joins: everyone drops to its batch and its steps.
  WorkerSpec slow = Spec("b", 10000);
  slow.max_batch = 16;
  ASSERT_TRUE((*p)->AddWorker(slow).ok());
  const Plan plan = *(*p)->CurrentPlan();
  const double step = 16 * 2048 / (10000 * 16 / 20.0);
  for (const WorkerAssignment& a : plan.workers) {
    EXPECT_EQ(a.batch_size, 16) << a.worker_id;
    EXPECT_EQ(a.inner_steps, static_cast<int64_t>(std::floor(570 / step))) << a.worker_id;
  }
  // It leaves: back to the fast worker's own equal plan.
  ASSERT_TRUE((*p)->RemoveWorker("b").ok());
  EXPECT_EQ((*p)->CurrentPlan()->workers[0].batch_size, 32);
  EXPECT_EQ((*p)->CurrentPlan()->workers[0].inner_steps, 309);
  // A manual replan stays equal.
  absl::StatusOr<Plan> manual = (*p)->Replan();
  ASSERT_TRUE(manual.ok());
  EXPECT_EQ(manual->workers[0].inner_steps, 309);
}

TEST(PlannerTest, NoiseDoesNotChurnThePlan) {
  std::unique_ptr<Planner> p = Make124();
  const uint64_t v = p->CurrentPlan()->version;
  std::mt19937_64 g(42);
  for (uint64_t r = 1; r <= 300; ++r) {
    for (const ReportResult& rr : RunRound(*p, r, {10000, 20000, 40000}, &g, 0.03)) {
      EXPECT_FALSE(rr.replanned) << "round " << r << ": " << rr.replan_reason;
    }
  }
  EXPECT_EQ(p->CurrentPlan()->version, v);
  EXPECT_EQ(p->RecentRounds().size(), 256u);  // history_rounds
}

TEST(PlannerTest, ReplansWhenAWorkerSlowsDownOrSpeedsUp) {
  std::unique_ptr<Planner> p = Make124();
  std::mt19937_64 g(5);
  uint64_t round = 1;
  for (; round <= 20; ++round) RunRound(*p, round, {10000, 20000, 40000}, &g, 0.02);
  const Plan before = *p->CurrentPlan();
  // b is throttled to 70 %: its steps would overrun the 570 s budget by 43 %.
  int replanned_after = -1;
  for (int j = 0; j < 10 && replanned_after < 0; ++j, ++round) {
    for (const ReportResult& rr : RunRound(*p, round, {10000, 14000, 40000}, &g, 0.02)) {
      if (rr.replanned) {
        EXPECT_EQ(rr.replan_reason, "overrun");
        replanned_after = j + 1;
      }
    }
  }
  ASSERT_GT(replanned_after, 0) << "no replan after b slowed down";
  EXPECT_LE(replanned_after, 4);  // shift_after rounds for the estimator, then the policy
  const Plan after = *p->CurrentPlan();
  EXPECT_GT(after.version, before.version);
  EXPECT_LT(after.workers[1].inner_steps, before.workers[1].inner_steps);
  EXPECT_NEAR(p->Estimate("b")->speed_scale, 0.7, 0.03);
  // Keep running: the new plan holds (no churn), and b's measured finish is back within budget.
  for (int j = 0; j < 30; ++j, ++round) {
    for (const ReportResult& rr : RunRound(*p, round, {10000, 14000, 40000}, &g, 0.02)) {
      EXPECT_FALSE(rr.replanned) << rr.replan_reason;
    }
  }
  EXPECT_LT(p->RecentRounds().back().idle_fraction, 0.06);

  // c gets 30 % faster: it would idle; the planner gives it more steps.
  const Plan mid = *p->CurrentPlan();
  bool replanned = false;
  for (int j = 0; j < 10 && !replanned; ++j, ++round) {
    for (const ReportResult& rr : RunRound(*p, round, {10000, 14000, 52000}, &g, 0.02)) {
      replanned |= rr.replanned;
      if (rr.replanned) {
        EXPECT_EQ(rr.replan_reason, "idle");
      }
    }
  }
  ASSERT_TRUE(replanned);
  EXPECT_GT(p->CurrentPlan()->workers[2].inner_steps, mid.workers[2].inner_steps);
}

TEST(PlannerTest, CommTimeGrowthForcesAShorterCompute) {
  std::unique_ptr<Planner> p = Make124();
  uint64_t round = 1;
  for (; round <= 5; ++round) RunRound(*p, round, {10000, 20000, 40000});
  EXPECT_EQ(p->SetCommTime(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p->SetCommTime(700).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(p->SetCommTime(150).ok());  // the WAN got slower: 450 s of compute left
  std::vector<ReportResult> rr = RunRound(*p, round, {10000, 20000, 40000});
  ASSERT_TRUE(rr.back().replanned);
  EXPECT_EQ(rr.back().replan_reason, "overrun");
  const Plan plan = *p->CurrentPlan();
  EXPECT_DOUBLE_EQ(plan.compute_budget_s, 450);
  EXPECT_DOUBLE_EQ(plan.comm_s, 150);
  EXPECT_LE(plan.predicted_round_s, 600);
}

TEST(PlannerTest, ALeavingWorkerCompletesTheRoundItWasHolding) {
  std::unique_ptr<Planner> p = Make124();
  const Plan plan = *p->CurrentPlan();
  for (int i = 0; i < 2; ++i) {
    const WorkerAssignment& a = plan.workers[i];
    ASSERT_TRUE(p->Report({.worker_id = a.worker_id,
                           .round = 1,
                           .batch_size = a.batch_size,
                           .inner_steps = a.inner_steps,
                           .compute_s = 500.0 + i})
                    .ok());
  }
  EXPECT_TRUE(p->RecentRounds().empty());
  ASSERT_TRUE(p->RemoveWorker("c").ok());
  ASSERT_EQ(p->RecentRounds().size(), 1u);
  EXPECT_EQ(p->RecentRounds()[0].workers.size(), 2u);
  EXPECT_DOUBLE_EQ(p->RecentRounds()[0].idle_s, 1.0);
}

TEST(PlannerTest, AWorkerJoiningMidRoundDoesNotHoldItUp) {
  std::unique_ptr<Planner> p = Make124();
  const Plan plan = *p->CurrentPlan();
  const WorkerAssignment& a = plan.workers[0];
  ASSERT_TRUE(p->Report({.worker_id = "a",
                         .round = 1,
                         .batch_size = a.batch_size,
                         .inner_steps = a.inner_steps,
                         .compute_s = 500})
                  .ok());
  ASSERT_TRUE(p->AddWorker(Spec("d", 20000)).ok());
  for (const char* id : {"b", "c"}) {
    ASSERT_TRUE(
        p->Report(
             {.worker_id = id, .round = 1, .batch_size = 32, .inner_steps = 100, .compute_s = 490})
            .ok());
  }
  ASSERT_EQ(p->RecentRounds().size(), 1u);
  EXPECT_EQ(p->RecentRounds()[0].workers.size(), 3u);
  // From the next round on, d is expected too.
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(
        p->Report(
             {.worker_id = id, .round = 2, .batch_size = 32, .inner_steps = 100, .compute_s = 490})
            .ok());
  }
  EXPECT_EQ(p->RecentRounds().size(), 1u);
  ASSERT_TRUE(
      p->Report(
           {.worker_id = "d", .round = 2, .batch_size = 32, .inner_steps = 100, .compute_s = 495})
          .ok());
  ASSERT_EQ(p->RecentRounds().size(), 2u);
  EXPECT_EQ(p->RecentRounds()[1].workers.size(), 4u);
}

TEST(PlannerTest, RemovingAWorkerTheTokenBudgetNeededKeepsTheOthersAssignments) {
  PlannerConfig c = Config();
  c.solver.target_round_s = 0;
  c.solver.max_inner_steps = 100;
  c.solver.tokens_per_round = int64_t{2048} * 32 * 150;  // more than one worker's 100 steps
  absl::StatusOr<std::unique_ptr<Planner>> pp = Planner::Create(c);
  ASSERT_TRUE(pp.ok());
  Planner& p = **pp;
  ASSERT_TRUE(p.AddWorker(Spec("a", 10000)).ok());
  // a alone cannot carry the budget: it joins, and there is no plan until c does.
  const absl::Status none = p.CurrentPlan().status();
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.message(), HasSubstr("no plan for the 1 members yet: tokens_per_round"));
  ASSERT_TRUE(p.AddWorker(Spec("c", 40000)).ok());
  const Plan before = *p.CurrentPlan();
  EXPECT_GE(before.total_tokens, c.solver.tokens_per_round);
  const absl::Status s = p.RemoveWorker("c");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("worker c removed, but replanning failed"));
  EXPECT_EQ(p.Estimate("c").status().code(), absl::StatusCode::kNotFound);
  const Plan after = *p.CurrentPlan();
  ASSERT_EQ(after.workers.size(), 1u);
  EXPECT_EQ(after.workers[0].worker_id, "a");
  EXPECT_EQ(after.workers[0].inner_steps, before.workers[0].inner_steps);
  EXPECT_EQ(after.workers[0].batch_size, before.workers[0].batch_size);
  EXPECT_GT(after.version, before.version);
}

TEST(PlannerTest, TokenBudgetModeAndAnUnreachableBudget) {
  PlannerConfig c = Config();
  c.solver.target_round_s = 0;
  c.solver.tokens_per_round = int64_t{2048} * 32 * 300;  // 300 steps of batch 32 in all
  absl::StatusOr<std::unique_ptr<Planner>> pp = Planner::Create(c);
  ASSERT_TRUE(pp.ok());
  Planner& p = **pp;
  ASSERT_TRUE(p.AddWorker(Spec("a", 10000)).ok());
  ASSERT_TRUE(p.AddWorker(Spec("c", 40000)).ok());
  const Plan plan = *p.CurrentPlan();
  EXPECT_GE(plan.total_tokens, c.solver.tokens_per_round);
  // 1:4 speeds: about 60 and 240 steps.
  EXPECT_NEAR(plan.workers[0].inner_steps, 60, 2);
  EXPECT_NEAR(plan.workers[1].inner_steps, 240, 2);
  // A worker whose own token floor is out of reach (100 steps of 32 at most) is refused.
  PlannerConfig tight = c;
  tight.solver.max_inner_steps = 100;
  absl::StatusOr<std::unique_ptr<Planner>> tp = Planner::Create(tight);
  ASSERT_TRUE(tp.ok());
  WorkerSpec greedy = Spec("g", 10000);
  greedy.min_tokens_per_round = int64_t{2048} * 32 * 101;
  const absl::Status s = (*tp)->AddWorker(greedy);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("worker g not added: worker g: min_tokens_per_round"));
  EXPECT_EQ((*tp)->Estimate("g").status().code(), absl::StatusCode::kNotFound);
}

TEST(PlannerTest, ConcurrentReportsFromManyThreads) {
  std::unique_ptr<Planner> p = Make124();
  const Plan plan = *p->CurrentPlan();
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      const WorkerAssignment& a = plan.workers[i];
      for (uint64_t r = 1; r <= 200; ++r) {
        // Rounds may complete out of this thread's view; a refused late report is fine.
        (void)p->Report({.worker_id = a.worker_id,
                         .round = r,
                         .batch_size = a.batch_size,
                         .inner_steps = a.inner_steps,
                         .compute_s = a.predicted_finish_s});
        (void)p->CurrentPlan();
        (void)p->RecentRounds();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(p->RecentRounds().size(), 0u);
  for (const RoundIdle& r : p->RecentRounds()) EXPECT_EQ(r.workers.size(), 3u);
}

}  // namespace
}  // namespace heddle::planner
