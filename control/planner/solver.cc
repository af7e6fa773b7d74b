#include "control/planner/solver.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::planner {
namespace {

constexpr int64_t kMaxInnerSteps = int64_t{1} << 20;
constexpr int64_t kMaxGranularity = int64_t{1} << 20;
constexpr int64_t kMaxTokensPerRound = int64_t{1} << 62;

std::string Fmt(double x) { return absl::StrFormat("%.6g", x); }

bool NonNegativeFinite(double x) { return std::isfinite(x) && x >= 0; }

// A worker ready for the search: its candidate batches are b_lo, b_lo + k, ..., b_hi.
struct Prepared {
  const SolverWorker* w = nullptr;
  int64_t seq = 0;
  int64_t b_lo = 0;
  int64_t b_hi = 0;
  int64_t memory_max = 0;
  // Whether the rate never falls as the batch grows (then units(b') ≤ b'·T·r(b)/... for b' ≤ b
  // can be bounded by r(b)); otherwise max_rate bounds every batch.
  bool rate_monotone = true;
  double max_rate = 0;
  double guard = 1;  // 1 + finish_margin

  double Rate(int64_t b) const {
    return w->speed_scale * w->spec.throughput.TokensPerSecond(static_cast<double>(b));
  }
  double StepTime(int64_t b) const {
    return static_cast<double>(b) * static_cast<double>(seq) / Rate(b);
  }
  // The step time the deadline is checked with: StepTime(b) · (1 + finish_margin).
  double GuardedStepTime(int64_t b) const { return StepTime(b) * guard; }
};

struct Choice {
  int64_t b = 0;
  int64_t h = 0;
  int64_t units = 0;  // b·h (tokens / seq)
  double step_s = 0;
  double finish_s = 0;  // h · step_s: the expected finish
  double high_s = 0;    // h · guarded step: what must fit the budget
  bool found = false;
};

// The best (b, H) for one worker whose compute must end within `budget` seconds: most tokens;
// among equal tokens the earliest finish (the most efficient way to carry them, and the one that
// can only shorten the round); among equal finishes the larger batch (fewer optimizer steps).
// Batches are scanned from the largest down; the scan stops once no smaller batch can reach the
// best token count, which bounds it to a few candidates in the usual case (docs/planner.md §3.3).
Choice BestWithin(const Prepared& p, double budget, const SolverConfig& c) {
  const int64_t k = c.batch_granularity;
  const int64_t h_min = c.min_inner_steps;
  const int64_t h_max = c.max_inner_steps;
  Choice best;
  for (int64_t b = p.b_hi; b >= p.b_lo; b -= k) {
    if (best.found) {
      // Upper bound on b'·H for every b' ≤ b: H ≤ h_max, and H·t(b') ≤ budget gives
      // b'·H ≤ budget·r(b')/seq.
      const double rate_bound = p.rate_monotone ? p.Rate(b) : p.max_rate;
      const double bound = std::min(static_cast<double>(b) * static_cast<double>(h_max),
                                    budget * rate_bound / static_cast<double>(p.seq));
      if (bound < static_cast<double>(best.units)) break;
    }
    const double t = p.StepTime(b);
    const double tg = p.GuardedStepTime(b);
    if (static_cast<double>(h_min) * tg > budget) continue;  // a smaller batch may still fit
    const double q = budget / tg;
    int64_t h = q >= static_cast<double>(h_max) ? h_max : static_cast<int64_t>(std::floor(q));
    while (h > h_min && static_cast<double>(h) * tg > budget) --h;
    const double f = static_cast<double>(h) * t;
    const int64_t units = b * h;
    const bool better =
        !best.found || units > best.units ||
        (units == best.units && (f < best.finish_s || (f == best.finish_s && b > best.b)));
    if (better) best = Choice{b, h, units, t, f, static_cast<double>(h) * tg, true};
  }
  return best;
}

int64_t RoundUp(int64_t x, int64_t k) { return (x + k - 1) / k * k; }

double RoundTime(double compute_end, const SolverConfig& c) {
  return c.comm_overlaps ? std::max(compute_end, c.comm_s) : compute_end + c.comm_s;
}

// Fills the plan's per-round aggregates from its assignments.
void Summarize(Plan& plan, const SolverConfig& c) {
  double end = 0;
  int64_t total = 0;
  for (const WorkerAssignment& a : plan.workers) {
    end = std::max(end, a.predicted_finish_s);
    total += a.tokens;
  }
  double idle = 0;
  for (WorkerAssignment& a : plan.workers) {
    a.predicted_idle_s = end - a.predicted_finish_s;
    idle += a.predicted_idle_s;
  }
  plan.comm_s = c.comm_s;
  plan.comm_overlaps = c.comm_overlaps;
  plan.predicted_compute_end_s = end;
  plan.predicted_round_s = RoundTime(end, c);
  plan.total_tokens = total;
  plan.predicted_tokens_per_s =
      plan.predicted_round_s > 0 ? static_cast<double>(total) / plan.predicted_round_s : 0;
  plan.predicted_idle_s = idle;
  plan.predicted_idle_fraction = end > 0 && !plan.workers.empty()
                                     ? idle / (end * static_cast<double>(plan.workers.size()))
                                     : 0;
}

}  // namespace

EqualSchedule EqualBatchAndSteps(std::span<const int64_t> max_batch, double budget_s,
                                 const SolverConfig& c,
                                 absl::FunctionRef<double(size_t, int64_t)> step_seconds) {
  const int64_t k = c.batch_granularity;
  int64_t b = std::numeric_limits<int64_t>::max();
  for (int64_t m : max_batch) b = std::min(b, m / k * k);
  b = std::max(b, k);
  double slowest = 0;
  for (size_t i = 0; i < max_batch.size(); ++i) slowest = std::max(slowest, step_seconds(i, b));
  // Clamped as a double first: a tiny step time would put the quotient beyond int64_t.
  const int64_t h = slowest > 0
                        ? static_cast<int64_t>(std::clamp(std::floor(budget_s / slowest),
                                                          static_cast<double>(c.min_inner_steps),
                                                          static_cast<double>(c.max_inner_steps)))
                        : c.min_inner_steps;
  return {.batch_size = b, .inner_steps = h};
}

absl::Status ValidateSolverConfig(const SolverConfig& c) {
  if (!NonNegativeFinite(c.target_round_s)) {
    return absl::InvalidArgumentError(absl::StrCat("target_round_s ", Fmt(c.target_round_s),
                                                   " must be finite and >= 0 (0 = derive it)"));
  }
  if (c.min_inner_steps < 1 || c.min_inner_steps > kMaxInnerSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_inner_steps ", c.min_inner_steps, " out of range 1..", kMaxInnerSteps));
  }
  if (c.max_inner_steps < c.min_inner_steps || c.max_inner_steps > kMaxInnerSteps) {
    return absl::InvalidArgumentError(absl::StrCat("max_inner_steps ", c.max_inner_steps,
                                                   " out of range ", c.min_inner_steps, "..",
                                                   kMaxInnerSteps, " (min_inner_steps..2^20)"));
  }
  if (c.batch_granularity < 1 || c.batch_granularity > kMaxGranularity) {
    return absl::InvalidArgumentError(absl::StrCat("batch_granularity ", c.batch_granularity,
                                                   " out of range 1..", kMaxGranularity));
  }
  if (c.min_batch < 0 || c.min_batch > kMaxGranularity) {
    return absl::InvalidArgumentError(absl::StrCat("min_batch ", c.min_batch, " out of range 0..",
                                                   kMaxGranularity, " (0 = granularity)"));
  }
  if (c.seq_len < 1 || c.seq_len > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len ", c.seq_len, " out of range 1..", int64_t{1} << 20));
  }
  if (c.tokens_per_round < 0 || c.tokens_per_round > kMaxTokensPerRound) {
    return absl::InvalidArgumentError(absl::StrCat("tokens_per_round ", c.tokens_per_round,
                                                   " out of range 0..2^62 (0 = fill the round)"));
  }
  if (!NonNegativeFinite(c.comm_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "comm_s ", Fmt(c.comm_s), " must be finite and >= 0 (the measured WAN exchange time)"));
  }
  if (c.target_round_s > 0 && !c.comm_overlaps && c.comm_s >= c.target_round_s) {
    return absl::InvalidArgumentError(
        absl::StrCat("target_round_s ", Fmt(c.target_round_s), " leaves no compute time after the ",
                     Fmt(c.comm_s), " s WAN exchange (comm_s); raise target_round_s or set ",
                     "comm_overlaps if the exchange overlaps compute"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> Solve(const SolverConfig& c, std::span<const SolverWorker> workers) {
  if (absl::Status s = ValidateSolverConfig(c); !s.ok()) return s;
  if (workers.empty()) {
    return absl::FailedPreconditionError("no workers to plan for; add at least one");
  }
  if (workers.size() > kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat(workers.size(), " workers; at most ", kMaxWorkers, " per plan"));
  }
  std::vector<size_t> order(workers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return workers[a].spec.id < workers[b].spec.id; });

  const int64_t k = c.batch_granularity;
  const int64_t b_min = RoundUp(std::max(c.min_batch, k), k);
  std::vector<Prepared> ps;
  ps.reserve(workers.size());
  for (size_t j = 0; j < order.size(); ++j) {
    const SolverWorker& w = workers[order[j]];
    if (j > 0 && w.spec.id == workers[order[j - 1]].spec.id) {
      return absl::InvalidArgumentError(absl::StrCat("worker id ", w.spec.id, " appears twice"));
    }
    if (absl::Status s = ValidateWorkerSpec(w.spec, c.seq_len); !s.ok()) return s;
    if (!std::isfinite(w.speed_scale) || w.speed_scale <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("worker ", w.spec.id, ": speed scale ",
                                                     Fmt(w.speed_scale),
                                                     " must be a positive finite number"));
    }
    if (!std::isfinite(w.finish_margin) || w.finish_margin < 0 || w.finish_margin > 1) {
      return absl::InvalidArgumentError(absl::StrCat("worker ", w.spec.id, ": finish margin ",
                                                     Fmt(w.finish_margin), " must be in [0, 1]"));
    }
    Prepared p;
    p.w = &w;
    p.seq = EffectiveSeqLen(w.spec, c.seq_len);
    p.memory_max = MemoryMaxBatch(w.spec);
    p.b_lo = b_min;
    p.b_hi = p.memory_max / k * k;
    p.guard = 1 + w.finish_margin;
    if (p.b_hi < p.b_lo) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker ", w.spec.id, ": memory fits at most ", p.memory_max,
          " samples, less than the minimum batch ", b_min, " (min_batch ", c.min_batch,
          " rounded up to batch_granularity ", k, "); lower min_batch or batch_granularity, or ",
          "free memory on this worker"));
    }
    const ThroughputModel& m = w.spec.throughput;
    if (m.kind == ThroughputModel::Kind::kTable) {
      for (size_t i = 0; i < m.points.size(); ++i) {
        p.max_rate = std::max(p.max_rate, w.speed_scale * m.points[i].tokens_per_s);
        if (i > 0 && m.points[i].tokens_per_s < m.points[i - 1].tokens_per_s) {
          p.rate_monotone = false;
        }
      }
    }
    ps.push_back(p);
  }

  // The shortest compute that lets every worker run min_inner_steps at its smallest batch.
  double lower = 0;
  size_t lower_worker = 0;
  for (size_t j = 0; j < ps.size(); ++j) {
    const double t = static_cast<double>(c.min_inner_steps) * ps[j].GuardedStepTime(ps[j].b_lo);
    if (t > lower) {
      lower = t;
      lower_worker = j;
    }
  }

  const bool has_target = c.target_round_s > 0;
  const double cap = has_target ? (c.comm_overlaps ? c.target_round_s : c.target_round_s - c.comm_s)
                                : std::numeric_limits<double>::infinity();
  bool token_constraints = c.tokens_per_round > 0;
  for (const Prepared& p : ps) token_constraints |= p.w->spec.min_tokens_per_round > 0;

  auto infeasible_min_steps = [&](double budget) {
    const Prepared& p = ps[lower_worker];
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", p.w->spec.id, " needs ", Fmt(lower), " s for min_inner_steps ",
        c.min_inner_steps, " at its smallest batch ", p.b_lo, " (", Fmt(p.StepTime(p.b_lo)),
        " s a step",
        p.guard > 1 ? absl::StrCat(", with a ", Fmt(100 * (p.guard - 1)), " % noise margin")
                    : std::string(),
        "), more than the compute budget of ", Fmt(budget), " s",
        has_target
            ? absl::StrCat(" (target_round_s ", Fmt(c.target_round_s),
                           c.comm_overlaps ? "" : absl::StrCat(" - comm_s ", Fmt(c.comm_s)), ")")
            : std::string(),
        "; raise target_round_s, lower min_inner_steps or the batch granularity"));
  };

  double budget = 0;
  if (token_constraints) {
    // Shortest compute budget whose best choices carry every token floor (docs/planner.md §3.2).
    // Each worker's best token count is a non-decreasing step function of the budget, so the
    // feasible budgets form an interval [T*, ∞): bisection finds T* to 1e-12 relative.
    double hi = cap;
    if (!has_target) {
      hi = 0;
      for (const Prepared& p : ps) {
        hi = std::max(hi, static_cast<double>(c.max_inner_steps) * p.GuardedStepTime(p.b_hi));
      }
      hi = std::max(hi, lower);
    }
    if (hi < lower) return infeasible_min_steps(hi);
    auto feasible = [&](double t, std::string* why) {
      int64_t total = 0;
      for (const Prepared& p : ps) {
        const Choice ch = BestWithin(p, t, c);
        const int64_t tokens = ch.found ? ch.units * p.seq : 0;
        if (tokens < p.w->spec.min_tokens_per_round) {
          if (why != nullptr) {
            *why = absl::StrCat("worker ", p.w->spec.id, ": min_tokens_per_round ",
                                p.w->spec.min_tokens_per_round, " is out of reach: at most ",
                                tokens, " tokens fit in ", Fmt(t), " s of compute");
          }
          return false;
        }
        total += tokens;
      }
      if (total < c.tokens_per_round) {
        if (why != nullptr) {
          *why =
              absl::StrCat("tokens_per_round ", c.tokens_per_round, " is out of reach: at most ",
                           total, " tokens fit in ", Fmt(t), " s of compute with max_inner_steps ",
                           c.max_inner_steps, " and every worker's largest batch");
        }
        return false;
      }
      return true;
    };
    std::string why;
    if (!feasible(hi, &why)) {
      return absl::FailedPreconditionError(
          absl::StrCat(why, has_target ? "; raise target_round_s or lower the token targets"
                                       : "; raise max_inner_steps or lower the token targets"));
    }
    double lo = lower;
    if (feasible(lo, nullptr)) {
      hi = lo;
    } else {
      for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; ++it) {
        const double mid = lo + (hi - lo) / 2;
        if (feasible(mid, nullptr)) {
          hi = mid;
        } else {
          lo = mid;
        }
      }
    }
    budget = hi;
    // Overlapped communication makes any compute shorter than the exchange free to extend.
    if (c.comm_overlaps) budget = std::max(budget, std::min(c.comm_s, cap));
  } else if (has_target) {
    budget = cap;
  } else {
    // Derived: the slowest worker runs min_inner_steps at its largest batch; the others fill.
    for (const Prepared& p : ps) {
      budget = std::max(budget, static_cast<double>(c.min_inner_steps) * p.GuardedStepTime(p.b_hi));
    }
    if (c.comm_overlaps) budget = std::max(budget, c.comm_s);
  }
  if (budget < lower) return infeasible_min_steps(budget);

  Plan plan;
  plan.compute_budget_s = budget;
  plan.target_round_s = has_target ? c.target_round_s : RoundTime(budget, c);
  plan.workers.reserve(ps.size());
  for (const Prepared& p : ps) {
    const Choice ch = BestWithin(p, budget, c);
    if (!ch.found) return infeasible_min_steps(budget);  // unreachable: budget >= lower
    WorkerAssignment a;
    a.worker_id = p.w->spec.id;
    a.batch_size = ch.b;
    a.inner_steps = ch.h;
    a.seq_len = p.seq;
    a.tokens = ch.units * p.seq;
    a.max_batch = p.b_hi;
    a.tokens_per_s = p.Rate(ch.b);
    a.step_s = ch.step_s;
    a.predicted_finish_s = ch.finish_s;
    a.finish_margin = p.w->finish_margin;
    a.predicted_finish_high_s = ch.high_s;
    plan.workers.push_back(std::move(a));
  }
  Summarize(plan, c);
  return plan;
}

Plan Repredict(const Plan& plan, std::span<const SolverWorker> workers, const SolverConfig& c) {
  Plan out = plan;
  for (size_t j = 0; j < out.workers.size() && j < workers.size(); ++j) {
    WorkerAssignment& a = out.workers[j];
    const SolverWorker& w = workers[j];
    a.tokens_per_s =
        w.speed_scale * w.spec.throughput.TokensPerSecond(static_cast<double>(a.batch_size));
    a.step_s = static_cast<double>(a.batch_size) * static_cast<double>(a.seq_len) / a.tokens_per_s;
    a.predicted_finish_s = static_cast<double>(a.inner_steps) * a.step_s;
    a.finish_margin = w.finish_margin;
    a.predicted_finish_high_s =
        static_cast<double>(a.inner_steps) * (a.step_s * (1 + w.finish_margin));
  }
  Summarize(out, c);
  return out;
}

}  // namespace heddle::planner
