#include "control/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::planner {
namespace {

constexpr size_t kMaxPendingRounds = 8;

bool UnitFraction(double x) { return std::isfinite(x) && x >= 0 && x < 1; }

bool SameAssignments(const Plan& a, const Plan& b) {
  if (a.workers.size() != b.workers.size()) return false;
  for (size_t j = 0; j < a.workers.size(); ++j) {
    const WorkerAssignment& x = a.workers[j];
    const WorkerAssignment& y = b.workers[j];
    if (x.worker_id != y.worker_id || x.batch_size != y.batch_size ||
        x.inner_steps != y.inner_steps) {
      return false;
    }
  }
  return true;
}

// The equal baseline from a balanced plan of the same members (same order in `workers`), by
// EqualBatchAndSteps() (solver.h), as the simulation takes it: the batch every member's memory
// admits, and the steps the slowest member, at its profiled speed, fits in the balanced plan's
// compute budget.
Plan Equalize(const Plan& balanced, std::span<const SolverWorker> workers, const SolverConfig& c) {
  std::vector<int64_t> max_batch;
  max_batch.reserve(balanced.workers.size());
  for (const WorkerAssignment& a : balanced.workers) max_batch.push_back(a.max_batch);
  const EqualSchedule eq =
      EqualBatchAndSteps(max_batch, balanced.compute_budget_s, c, [&](size_t j, int64_t b) {
        const double bd = static_cast<double>(b);
        return bd * static_cast<double>(balanced.workers[j].seq_len) /
               workers[j].spec.throughput.TokensPerSecond(bd);
      });
  const int64_t b = eq.batch_size, h = eq.inner_steps;
  Plan out = balanced;
  for (WorkerAssignment& a : out.workers) {
    a.batch_size = b;
    a.inner_steps = h;
    a.tokens = b * h * a.seq_len;
  }
  return Repredict(out, workers, c);
}

}  // namespace

std::string_view PlanModeName(PlanMode m) { return m == PlanMode::kEqual ? "equal" : "balanced"; }

absl::StatusOr<PlanMode> ParsePlanMode(std::string_view name) {
  if (name == "balanced") return PlanMode::kBalanced;
  if (name == "equal") return PlanMode::kEqual;
  return absl::InvalidArgumentError(absl::StrCat(
      "mode \"", std::string(name),
      "\": expected balanced (the GeoMesh plan, default) or equal (the same batch and inner steps "
      "for every worker, the baseline GeoMesh is measured against)"));
}

absl::Status ValidatePlannerConfig(const PlannerConfig& c) {
  if (absl::Status s = ValidateSolverConfig(c.solver); !s.ok()) return s;
  if (absl::Status s = ValidateEstimatorConfig(c.estimator); !s.ok()) return s;
  const ReplanPolicy& p = c.replan;
  if (!UnitFraction(p.idle_threshold)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replan idle_threshold %g must be in [0, 1) (a fraction of GPU time)", p.idle_threshold));
  }
  if (!UnitFraction(p.min_improvement)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("replan min_improvement %g must be in [0, 1)", p.min_improvement));
  }
  if (!UnitFraction(p.overrun_tolerance)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("replan overrun_tolerance %g must be in [0, 1)", p.overrun_tolerance));
  }
  if (p.cooldown_rounds < 0 || p.cooldown_rounds > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("replan cooldown_rounds ", p.cooldown_rounds, " out of range 0..1000000"));
  }
  if (!std::isfinite(c.deadline_sigmas) || c.deadline_sigmas < 0 || c.deadline_sigmas > 10) {
    return absl::InvalidArgumentError(
        absl::StrFormat("deadline_sigmas %g must be in [0, 10] (0 = plan to the expected finish)",
                        c.deadline_sigmas));
  }
  if (!UnitFraction(c.noise_prior)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("noise_prior %g must be in [0, 1)", c.noise_prior));
  }
  if (c.min_noise_samples < 1 || c.min_noise_samples > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_noise_samples ", c.min_noise_samples, " out of range 1..1000"));
  }
  if (c.history_rounds < 0 || c.history_rounds > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("history_rounds ", c.history_rounds, " out of range 0..1000000"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Planner>> Planner::Create(const PlannerConfig& config) {
  if (absl::Status s = ValidatePlannerConfig(config); !s.ok()) return s;
  std::unique_ptr<Planner> p(new Planner(config));
  absl::MutexLock l(&p->mu_);
  p->comm_s_ = config.solver.comm_s;
  return p;
}

SolverConfig Planner::SolverConfigNow() const {
  SolverConfig c = config_.solver;
  c.comm_s = comm_s_;
  return c;
}

double Planner::FinishMargin(const Worker& w) const {
  // E|X| = σ·sqrt(2/π) for normal noise, so σ ≈ 1.25 × the mean absolute deviation.
  const double sigma = w.estimator.accepted() >= config_.min_noise_samples
                           ? 1.2533 * w.estimator.Deviation()
                           : config_.noise_prior;
  return std::min(1.0, config_.deadline_sigmas * sigma);
}

std::vector<SolverWorker> Planner::SolverWorkers() const {
  std::vector<SolverWorker> out;
  out.reserve(workers_.size());
  for (const auto& [id, w] : workers_)
    out.push_back({w.spec, w.estimator.Scale(), FinishMargin(w)});
  return out;
}

std::vector<SolverWorker> Planner::SolverWorkersInPlanOrder() const {
  std::vector<SolverWorker> out;
  out.reserve(plan_.workers.size());
  for (const WorkerAssignment& a : plan_.workers) {
    auto it = workers_.find(a.worker_id);
    // Every planned worker is a member: membership changes replan or drop the assignment.
    out.push_back({it->second.spec, it->second.estimator.Scale(), FinishMargin(it->second)});
  }
  return out;
}

Plan Planner::RepredictLocked() const {
  Plan p = Repredict(plan_, SolverWorkersInPlanOrder(), SolverConfigNow());
  return p;
}

void Planner::Adopt(Plan plan, std::string reason) {
  plan.version = next_version_++;
  plan.reason = std::move(reason);
  plan_ = std::move(plan);
  has_plan_ = true;
  rounds_since_plan_ = 0;
}

absl::Status Planner::AddWorker(const WorkerSpec& spec) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = ValidateWorkerSpec(spec, config_.solver.seq_len); !s.ok()) return s;
  if (workers_.contains(spec.id)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "worker ", spec.id, " is already a member; remove it first to change its spec"));
  }
  if (workers_.size() >= kMaxWorkers) {
    return absl::ResourceExhaustedError(
        absl::StrCat("already ", workers_.size(), " workers; at most ", kMaxWorkers));
  }
  const SolverWorker joining{spec, 1.0,
                             std::min(1.0, config_.deadline_sigmas * config_.noise_prior)};
  // Can the worker be planned at all (memory for the minimum batch, min_inner_steps within the
  // target, its own token floor)? If not, it is refused.
  SolverConfig alone = SolverConfigNow();
  alone.tokens_per_round = 0;
  if (absl::StatusOr<Plan> p = Solve(alone, std::span<const SolverWorker>(&joining, 1)); !p.ok()) {
    return absl::Status(p.status().code(),
                        absl::StrCat("worker ", spec.id, " not added: ", p.status().message()));
  }
  // It can; what is left to fail is the members' token budget, which needs more members: it
  // joins, and the job waits for a plan until enough have joined.
  workers_.emplace(spec.id, Worker{spec, ThroughputEstimator(config_.estimator)});
  absl::StatusOr<Plan> plan = SolveLocked();
  if (!plan.ok()) {
    plan_ = Plan{};
    has_plan_ = false;
    no_plan_reason_ = plan.status();
    return absl::OkStatus();
  }
  Adopt(*std::move(plan), absl::StrCat("join ", spec.id));
  return absl::OkStatus();
}

absl::Status Planner::RemoveWorker(std::string_view worker_id) {
  absl::MutexLock l(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", std::string(worker_id), " is not a member"));
  }
  const std::string id = it->first;
  workers_.erase(it);
  for (auto& [round, pending] : pending_) pending.reports.erase(id);
  if (workers_.empty()) {
    plan_ = Plan{};
    has_plan_ = false;
    pending_.clear();
    return absl::OkStatus();
  }
  absl::Status status;
  absl::StatusOr<Plan> plan = SolveLocked();
  if (plan.ok()) {
    Adopt(*std::move(plan), absl::StrCat("leave ", id));
  } else if (!has_plan_) {
    no_plan_reason_ = plan.status();
  } else {
    Plan kept = plan_;
    std::erase_if(kept.workers, [&](const WorkerAssignment& a) { return a.worker_id == id; });
    plan_ = std::move(kept);
    Adopt(Repredict(plan_, SolverWorkersInPlanOrder(), SolverConfigNow()),
          absl::StrCat("leave ", id, " (replan failed; previous assignments kept)"));
    status = absl::Status(
        plan.status().code(),
        absl::StrCat("worker ", id, " removed, but replanning failed: ", plan.status().message(),
                     "; the others keep their previous assignments"));
  }
  ReportResult ignored;
  CompleteRounds(&ignored);
  return status;
}

absl::Status Planner::SetCommTime(double comm_s) {
  if (!std::isfinite(comm_s) || comm_s < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("comm time %g s must be finite and >= 0", comm_s));
  }
  absl::MutexLock l(&mu_);
  const SolverConfig& c = config_.solver;
  if (c.target_round_s > 0 && !c.comm_overlaps && comm_s >= c.target_round_s) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "comm time %g s leaves no compute time in target_round_s %g; the WAN exchange alone "
        "exceeds the round target: raise target_round_s or enable comm_overlaps",
        comm_s, c.target_round_s));
  }
  comm_s_ = comm_s;
  return absl::OkStatus();
}

absl::StatusOr<ReportResult> Planner::Report(const WorkerReport& r) {
  absl::MutexLock l(&mu_);
  auto it = workers_.find(r.worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("report from worker ", r.worker_id, ", which is not a member; add it first"));
  }
  const std::string who =
      absl::StrCat("report from worker ", r.worker_id, " for round ", r.round, ": ");
  if (r.batch_size < 1 || r.batch_size > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "batch_size ", r.batch_size, " out of range 1..2^20"));
  }
  if (r.inner_steps < 1 || r.inner_steps > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "inner_steps ", r.inner_steps, " out of range 1..2^20"));
  }
  if (!std::isfinite(r.compute_s) || r.compute_s <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%scompute_s %g must be a positive finite number of seconds", who, r.compute_s));
  }
  if (any_completed_ && r.round <= completed_through_) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, "that round has already completed (through round ", completed_through_, ")"));
  }
  auto pit = pending_.find(r.round);
  if (pit != pending_.end() && pit->second.reports.contains(r.worker_id)) {
    return absl::AlreadyExistsError(absl::StrCat(who, "duplicate; the first report stands"));
  }

  Worker& w = it->second;
  const int64_t seq = EffectiveSeqLen(w.spec, config_.solver.seq_len);
  const int64_t tokens = r.batch_size * r.inner_steps * seq;
  const double measured = static_cast<double>(tokens) / r.compute_s;
  const double modelled = w.spec.throughput.TokensPerSecond(static_cast<double>(r.batch_size));
  const double ratio = measured / modelled;
  // Four orders of magnitude off the profile is a unit mistake (ms for s), not a speed.
  if (!(ratio >= 1e-4 && ratio <= 1e4)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%d steps of batch %d in %g s is %g tokens/s, %g times the profiled %g tokens/s; check "
        "that compute_s is in seconds, or re-profile the worker (remove and add it)",
        who, r.inner_steps, r.batch_size, r.compute_s, measured, ratio, modelled));
  }
  ReportResult result;
  result.sample = w.estimator.Add(ratio);

  if (pit == pending_.end()) {
    Pending fresh;
    for (const auto& [id, member] : workers_) fresh.expected.push_back(id);
    pit = pending_.emplace(r.round, std::move(fresh)).first;
    while (pending_.size() > kMaxPendingRounds) {
      // The oldest round never completed (a member stopped reporting without leaving): abandon it.
      completed_through_ = std::max(completed_through_, pending_.begin()->first);
      any_completed_ = true;
      pending_.erase(pending_.begin());
    }
    pit = pending_.find(r.round);
    if (pit == pending_.end()) return result;  // it was itself the oldest
  }
  pit->second.reports[r.worker_id] =
      WorkerRoundIdle{.worker_id = r.worker_id, .finish_s = r.compute_s, .tokens = tokens};
  CompleteRounds(&result);
  return result;
}

void Planner::CompleteRounds(ReportResult* result) {
  while (!pending_.empty()) {
    // The newest round every member has reported completes; older pending rounds are abandoned.
    auto done = pending_.end();
    for (auto pit = pending_.begin(); pit != pending_.end(); ++pit) {
      bool all = !pit->second.reports.empty();
      for (const std::string& id : pit->second.expected) {
        all &= !workers_.contains(id) || pit->second.reports.contains(id);
      }
      if (all) done = pit;
    }
    if (done == pending_.end()) return;
    RoundIdle round;
    round.round = done->first;
    round.plan_version = plan_.version;
    for (auto& [id, wr] : done->second.reports) {
      round.compute_end_s = std::max(round.compute_end_s, wr.finish_s);
    }
    for (auto& [id, wr] : done->second.reports) {
      wr.idle_s = round.compute_end_s - wr.finish_s;
      for (const WorkerAssignment& a : plan_.workers) {
        if (a.worker_id == id) wr.predicted_idle_s = a.predicted_idle_s;
      }
      round.idle_s += wr.idle_s;
      round.predicted_idle_s += wr.predicted_idle_s;
      round.tokens += wr.tokens;
      round.workers.push_back(wr);
    }
    round.idle_fraction =
        round.compute_end_s > 0
            ? round.idle_s / (round.compute_end_s * static_cast<double>(round.workers.size()))
            : 0;
    completed_through_ = std::max(completed_through_, done->first);
    any_completed_ = true;
    pending_.erase(pending_.begin(), std::next(done));
    history_.push_back(std::move(round));
    while (static_cast<int64_t>(history_.size()) > config_.history_rounds) history_.pop_front();
    result->round_complete = true;
    ++rounds_since_plan_;
    RunPolicy(result);
  }
}

double Planner::BudgetNow() const {
  const SolverConfig& c = config_.solver;
  if (c.target_round_s <= 0) return plan_.compute_budget_s;  // derived, or a token budget alone
  const double cap = c.comm_overlaps ? c.target_round_s : c.target_round_s - comm_s_;
  bool token_constrained = c.tokens_per_round > 0;
  for (const auto& [id, w] : workers_) token_constrained |= w.spec.min_tokens_per_round > 0;
  // A fixed target: whatever the comm time now leaves. With token targets the plan's budget is
  // the shortest that carries them, which must still fit the target.
  return token_constrained ? std::min(plan_.compute_budget_s, cap) : cap;
}

void Planner::RunPolicy(ReportResult* result) {
  // The equal baseline does not adapt to speeds: it is what a job without the planner runs.
  if (config_.mode == PlanMode::kEqual) return;
  if (!has_plan_ || rounds_since_plan_ < config_.replan.cooldown_rounds) return;
  const ReplanPolicy& pol = config_.replan;
  const Plan now = RepredictLocked();
  const SolverConfig c = SolverConfigNow();
  const double budget = BudgetNow();
  // Guarded by the margins the plan was made with: the noise estimates move by more than the
  // speed estimates do, and a plan is not worth changing for them alone (docs/planner.md §5).
  double high = 0;
  for (size_t j = 0; j < now.workers.size(); ++j) {
    high = std::max(high, now.workers[j].predicted_finish_s * (1 + plan_.workers[j].finish_margin));
  }
  const bool overrun = high > budget * (1 + pol.overrun_tolerance);
  const bool idle = now.predicted_idle_fraction > pol.idle_threshold;
  const bool underfill = high < budget * (1 - pol.overrun_tolerance);
  if (!overrun && !idle && !underfill) return;
  absl::StatusOr<Plan> fresh = Solve(c, SolverWorkers());
  if (!fresh.ok()) {
    result->replan_status = fresh.status();
    return;
  }
  if (SameAssignments(*fresh, plan_)) return;
  std::string reason;
  if (overrun) {
    reason = "overrun";
  } else if (now.predicted_idle_fraction - fresh->predicted_idle_fraction >= pol.min_improvement) {
    reason = idle ? "idle" : "underfill";
  } else if (fresh->predicted_tokens_per_s >=
             now.predicted_tokens_per_s * (1 + pol.min_improvement)) {
    reason = underfill ? "underfill" : "idle";
  } else {
    return;
  }
  Adopt(*std::move(fresh), reason);
  result->replanned = true;
  result->replan_reason = std::move(reason);
}

absl::Status Planner::NoPlan() const {
  if (workers_.empty()) return absl::FailedPreconditionError("no plan: the planner has no workers");
  return absl::FailedPreconditionError(absl::StrCat("no plan for the ", workers_.size(),
                                                    " members yet: ", no_plan_reason_.message()));
}

absl::StatusOr<Plan> Planner::SolveLocked() const {
  const SolverConfig config = SolverConfigNow();
  const std::vector<SolverWorker> workers = SolverWorkers();
  absl::StatusOr<Plan> plan = Solve(config, workers);
  if (!plan.ok() || config_.mode == PlanMode::kBalanced) return plan;
  // Solve() sorts its assignments by worker id, as workers_ is sorted: the same order.
  return Equalize(*plan, workers, config);
}

absl::StatusOr<Plan> Planner::CurrentPlan() const {
  absl::MutexLock l(&mu_);
  if (!has_plan_) return NoPlan();
  return plan_;
}

absl::StatusOr<Plan> Planner::PredictCurrent() const {
  absl::MutexLock l(&mu_);
  if (!has_plan_) return NoPlan();
  return RepredictLocked();
}

absl::StatusOr<Plan> Planner::Replan() {
  absl::MutexLock l(&mu_);
  absl::StatusOr<Plan> plan = SolveLocked();
  if (!plan.ok()) return plan.status();
  Adopt(*std::move(plan), "manual");
  return plan_;
}

std::vector<RoundIdle> Planner::RecentRounds() const {
  absl::MutexLock l(&mu_);
  return std::vector<RoundIdle>(history_.begin(), history_.end());
}

absl::StatusOr<WorkerEstimate> Planner::Estimate(std::string_view worker_id) const {
  absl::MutexLock l(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", std::string(worker_id), " is not a member"));
  }
  const ThroughputEstimator& e = it->second.estimator;
  return WorkerEstimate{.worker_id = it->first,
                        .speed_scale = e.Scale(),
                        .deviation = e.Deviation(),
                        .accepted = e.accepted(),
                        .rejected = e.rejected(),
                        .shifts = e.shifts()};
}

}  // namespace heddle::planner
