// File: control/planner/planner.h
//
// The GeoMesh workload planner (docs/planner.md): the relay's control-plane object that keeps the
// training job's current plan — each worker's batch size b_i and inner steps H_i for a round — as
// workers join and leave and as their measured speeds drift.
//
//   absl::StatusOr<std::unique_ptr<Planner>> p = Planner::Create(PlannerConfig{...});
//   (*p)->AddWorker(spec_a);                  // each membership change replans at once
//   (*p)->AddWorker(spec_b);
//   absl::StatusOr<Plan> plan = (*p)->CurrentPlan();     // served to workers by the relay
//   ... every worker, after its inner steps of round r:
//   (*p)->Report({.worker_id = "b", .round = r, .batch_size = 32, .inner_steps = 120,
//                 .compute_s = 281.4});
//   (*p)->RecentRounds();                     // measured straggler idle per worker and round
//
// Report() feeds the worker's online speed estimator (estimator.h). When every member has
// reported a round, the round's measured straggler idle is recorded and the replan policy runs:
// it re-predicts the current plan under the new estimates and replaces it when that prediction
// overruns the compute budget, or when it leaves more than `idle_threshold` of the GPU time idle
// (or under-fills the round) and a fresh plan is better by at least `min_improvement`; never
// within `cooldown_rounds` of the last plan. Noise moves the estimates by less than these margins,
// so plans do not churn (docs/planner.md §5). Each worker's expected finish is planned with
// `deadline_sigmas` of its measured round-to-round noise as headroom (§3.4).
//
// Thread-safe: every method takes one absl::Mutex. Nothing here is on a hot path (a call per
// worker per round). No method throws; errors come back as absl::Status.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "control/planner/estimator.h"
#include "control/planner/model.h"
#include "control/planner/solver.h"

namespace heddle::planner {

struct ReplanPolicy {
  // Re-predicted idle fraction Σ idle_i / (N · compute end) of the current plan above which a
  // fresh plan is considered.
  double idle_threshold = 0.05;
  // A fresh plan replaces the current one only if it cuts the idle fraction by at least this much
  // (absolute), or raises the predicted useful tokens/s by at least this fraction.
  double min_improvement = 0.02;
  // The current plan's re-predicted compute end beyond budget·(1 + tol) is an overrun (replan even
  // without the improvement margin); below budget·(1 − tol) the round is under-filled.
  double overrun_tolerance = 0.05;
  // Completed rounds after a plan before the policy looks again (membership changes do not wait).
  int64_t cooldown_rounds = 3;
};

// How the planner assigns work. kBalanced is GeoMesh's plan (solver.h). kEqual is the baseline it
// is measured against (docs/planner.md §6, sim.h): every worker runs the same batch — the largest
// that fits every member's memory and the batch granularity — and the same inner steps, as many as
// the slowest member, as profiled, fits in the balanced plan's compute budget. An equal plan is
// made again on every membership change, never by the replan policy; reports, the estimator and
// the measured straggler idle are the same in both modes.
enum class PlanMode { kBalanced, kEqual };

std::string_view PlanModeName(PlanMode m);
// "balanced" or "equal"; anything else is InvalidArgument naming both.
absl::StatusOr<PlanMode> ParsePlanMode(std::string_view name);

struct PlannerConfig {
  PlanMode mode = PlanMode::kBalanced;
  SolverConfig solver;
  EstimatorConfig estimator;
  ReplanPolicy replan;
  // Headroom for noise: each worker's expected finish plus deadline_sigmas of its measured
  // round-to-round noise (σ ≈ 1.25 × the estimator's mean absolute deviation, capped at 100 %)
  // must fit the compute budget. 0 plans to the expected finish (half the rounds then run over).
  double deadline_sigmas = 2.0;
  // The noise σ assumed until a worker has min_noise_samples accepted reports.
  double noise_prior = 0.03;
  int64_t min_noise_samples = 5;
  // Completed rounds kept for RecentRounds().
  int64_t history_rounds = 256;
};

absl::Status ValidatePlannerConfig(const PlannerConfig& c);

// What a worker reports after its inner steps of a round (the relay forwards it).
struct WorkerReport {
  std::string worker_id;
  uint64_t round = 0;
  int64_t batch_size = 0;  // what it actually ran (it may not have picked up a newer plan yet)
  int64_t inner_steps = 0;
  double compute_s = 0;  // from the round's start to its push; the WAN exchange excluded
};

struct ReportResult {
  ThroughputEstimator::Outcome sample = ThroughputEstimator::Outcome::kAccepted;
  bool round_complete = false;  // this report was the round's last
  bool replanned = false;
  std::string replan_reason;   // "overrun", "idle", "underfill" when replanned
  absl::Status replan_status;  // not ok: a replan was due but no plan fits; the old one stays
};

struct WorkerRoundIdle {
  std::string worker_id;
  double finish_s = 0;          // its reported compute_s
  double idle_s = 0;            // measured: round's compute end − finish_s
  double predicted_idle_s = 0;  // what the plan in force predicted (0 if it had no assignment)
  int64_t tokens = 0;           // b · H · seq_len it ran
};

struct RoundIdle {
  uint64_t round = 0;
  uint64_t plan_version = 0;    // the plan in force when the round completed
  double compute_end_s = 0;     // the last worker's finish
  double idle_s = 0;            // Σ measured idle, GPU-seconds
  double idle_fraction = 0;     // idle_s / (N · compute_end_s)
  double predicted_idle_s = 0;  // Σ predicted idle of the plan in force
  int64_t tokens = 0;
  std::vector<WorkerRoundIdle> workers;  // sorted by worker_id
};

struct WorkerEstimate {
  std::string worker_id;
  double speed_scale = 1;  // measured ÷ profiled rate
  double deviation = 0;    // robust relative noise of its reports
  int64_t accepted = 0;
  int64_t rejected = 0;
  int64_t shifts = 0;
};

class Planner {
 public:
  static absl::StatusOr<std::unique_ptr<Planner>> Create(const PlannerConfig& config);
  // Balanced (the planner's own plan) or the equal baseline; fixed at Create().
  PlanMode mode() const { return config_.mode; }

  // Adds a worker and replans. Atomic: if the spec is invalid, the id taken, or the worker cannot
  // be planned (memory below the minimum batch, min_inner_steps beyond the target, its own token
  // floor out of reach), nothing changes. A worker that can be planned always joins; if the
  // members cannot yet carry tokens_per_round together, there is no plan until more join
  // (CurrentPlan() says why).
  absl::Status AddWorker(const WorkerSpec& spec) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a worker and replans. A pending round that waited only for it completes. Should the
  // replan fail (a token budget the rest cannot carry), the worker is still removed, the previous
  // assignments stay for the others, and the error says so.
  absl::Status RemoveWorker(std::string_view worker_id) ABSL_LOCKS_EXCLUDED(mu_);
  // One worker's measurement for one round; may complete the round and replan.
  absl::StatusOr<ReportResult> Report(const WorkerReport& report) ABSL_LOCKS_EXCLUDED(mu_);
  // The WAN exchange time the relay measured (seconds); used from the next replan on.
  absl::Status SetCommTime(double comm_s) ABSL_LOCKS_EXCLUDED(mu_);

  // The plan in force; FailedPrecondition when there are no workers or no plan yet.
  absl::StatusOr<Plan> CurrentPlan() const ABSL_LOCKS_EXCLUDED(mu_);
  // The plan in force re-predicted under the current speed estimates and comm time.
  absl::StatusOr<Plan> PredictCurrent() const ABSL_LOCKS_EXCLUDED(mu_);
  // Replans now from the current estimates, whatever the policy says (reason "manual").
  absl::StatusOr<Plan> Replan() ABSL_LOCKS_EXCLUDED(mu_);

  // Completed rounds, oldest first (at most history_rounds).
  std::vector<RoundIdle> RecentRounds() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<WorkerEstimate> Estimate(std::string_view worker_id) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Worker {
    WorkerSpec spec;
    ThroughputEstimator estimator;
  };
  struct Pending {
    // The members when the round's first report arrived: the round completes when all of them
    // that are still members have reported (a worker that joins mid-round does not hold it up).
    std::vector<std::string> expected;
    std::map<std::string, WorkerRoundIdle> reports;
  };

  explicit Planner(const PlannerConfig& config) : config_(config) {}

  SolverConfig SolverConfigNow() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<SolverWorker> SolverWorkers() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<SolverWorker> SolverWorkersInPlanOrder() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Plan RepredictLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double FinishMargin(const Worker& w) const;
  // The compute budget the plan in force must keep under the current comm time.
  double BudgetNow() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NoPlan() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Solve() for the current members, turned into the equal baseline in PlanMode::kEqual.
  absl::StatusOr<Plan> SolveLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Adopt(Plan plan, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes every pending round that all current members have reported; runs the policy after
  // each. Returns the last policy outcome.
  void CompleteRounds(ReportResult* result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunPolicy(ReportResult* result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PlannerConfig config_;
  mutable absl::Mutex mu_;
  double comm_s_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Worker, std::less<>> workers_ ABSL_GUARDED_BY(mu_);
  Plan plan_ ABSL_GUARDED_BY(mu_);
  bool has_plan_ ABSL_GUARDED_BY(mu_) = false;
  // Why there is no plan although there are members (a token budget they cannot carry yet).
  absl::Status no_plan_reason_ ABSL_GUARDED_BY(mu_);
  uint64_t next_version_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t rounds_since_plan_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Rounds at or below this have completed (or been abandoned); reports for them are refused.
  uint64_t completed_through_ ABSL_GUARDED_BY(mu_) = 0;
  bool any_completed_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<RoundIdle> history_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heddle::planner
