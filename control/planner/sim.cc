#include "control/planner/sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"

namespace heddle::planner {
namespace {

// mt19937_64 is specified bit for bit; the normal deviates are ours (Box–Muller), so a seed gives
// the same run with any standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  double Uniform() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = Uniform();
    while (u1 <= 0) u1 = Uniform();
    const double u2 = Uniform();
    const double r = std::sqrt(-2 * std::log(u1));
    spare_ = r * std::sin(2 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2 * M_PI * u2);
  }
  // Mean-one log-normal factor with log-σ `sigma`.
  double LogNormal(double sigma) { return std::exp(sigma * Normal() - sigma * sigma / 2); }

 private:
  std::mt19937_64 g_;
  bool has_spare_ = false;
  double spare_ = 0;
};

struct Run {
  std::vector<int64_t> b, h;  // per worker
};

// Wall time of `steps` inner steps at batch b for worker w at speed factor s.
double ComputeTime(const SimWorker& w, int64_t seq, int64_t b, int64_t steps, double s,
                   const SimConfig& c, Rng& rng) {
  const double rate =
      w.peak_tokens_per_s * static_cast<double>(b) / (static_cast<double>(b) + w.half_batch) * s;
  const double step = static_cast<double>(b) * static_cast<double>(seq) / rate;
  double total = 0;
  for (int64_t j = 0; j < steps; ++j) {
    double t = step * rng.LogNormal(c.step_noise);
    if (c.hiccup_prob > 0 && rng.Uniform() < c.hiccup_prob) t *= c.hiccup_factor;
    total += t;
  }
  return total;
}

void Finish(SimResult& r, size_t n, int64_t rounds) {
  r.idle_fraction = r.compute_s > 0 ? r.idle_s / (r.compute_s * static_cast<double>(n)) : 0;
  r.tokens_per_s = r.wall_s > 0 ? static_cast<double>(r.tokens) / r.wall_s : 0;
  r.rounds_over_target /= static_cast<double>(rounds);
}

void FirstRound(SimResult& r, const std::vector<int64_t>& b, const std::vector<int64_t>& h) {
  r.batch_size_min = *std::min_element(b.begin(), b.end());
  r.batch_size_max = *std::max_element(b.begin(), b.end());
  r.inner_steps_min = *std::min_element(h.begin(), h.end());
  r.inner_steps_max = *std::max_element(h.begin(), h.end());
}

}  // namespace

absl::StatusOr<SimComparison> Simulate(const SimConfig& c) {
  if (c.workers.empty()) return absl::InvalidArgumentError("simulation: no workers");
  if (c.rounds < 1 || c.rounds > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("simulation: rounds ", c.rounds, " out of range 1..1000000"));
  }
  for (double x : {c.step_noise, c.round_noise, c.drift, c.profile_error, c.hiccup_prob}) {
    if (!std::isfinite(x) || x < 0 || x > 1) {
      return absl::InvalidArgumentError(
          "simulation: noise, drift, profile error and hiccup probability must be in [0, 1]");
    }
  }
  if (!std::isfinite(c.hiccup_factor) || c.hiccup_factor < 1) {
    return absl::InvalidArgumentError("simulation: hiccup_factor must be >= 1");
  }
  const size_t n = c.workers.size();
  const SolverConfig& sc = c.planner.solver;

  // The speed factors every round, shared by both schedules.
  Rng trajectory(c.seed);
  std::vector<double> profiled(n);
  for (size_t i = 0; i < n; ++i) profiled[i] = std::exp(c.profile_error * trajectory.Normal());
  std::vector<std::vector<double>> speed(c.rounds, std::vector<double>(n));
  std::vector<double> walk(n, 0.0);
  for (int64_t r = 0; r < c.rounds; ++r) {
    for (size_t i = 0; i < n; ++i) {
      if (r > 0) walk[i] += c.drift * trajectory.Normal();
      speed[r][i] = std::exp(walk[i]) * trajectory.LogNormal(c.round_noise);
    }
  }

  // The planner, fed the profiled specs (possibly wrong by profile_error).
  absl::StatusOr<std::unique_ptr<Planner>> planner = Planner::Create(c.planner);
  if (!planner.ok()) return planner.status();
  std::vector<WorkerSpec> specs(n);
  for (size_t i = 0; i < n; ++i) {
    const SimWorker& w = c.workers[i];
    specs[i] = WorkerSpec{
        .id = w.id,
        .throughput = ThroughputModel::Saturating(w.peak_tokens_per_s * profiled[i], w.half_batch),
        .max_batch = w.max_batch};
    if (absl::Status s = (*planner)->AddWorker(specs[i]); !s.ok()) return s;
  }
  absl::StatusOr<Plan> first = (*planner)->CurrentPlan();
  if (!first.ok()) return first.status();
  const double target = first->target_round_s;
  const double budget = first->compute_budget_s;
  const uint64_t first_version = first->version;

  // The equal schedule: one batch that fits every worker, and the steps the slowest (as
  // profiled) fits in the same compute budget.
  std::vector<int64_t> max_batch(n);
  for (size_t i = 0; i < n; ++i) max_batch[i] = c.workers[i].max_batch;
  const EqualSchedule eq = EqualBatchAndSteps(max_batch, budget, sc, [&](size_t i, int64_t b) {
    const double bd = static_cast<double>(b);
    return bd * static_cast<double>(sc.seq_len) / specs[i].throughput.TokensPerSecond(bd);
  });
  const int64_t b_eq = eq.batch_size, h_eq = eq.inner_steps;

  auto round_time = [&](double end) {
    return sc.comm_overlaps ? std::max(end, sc.comm_s) : end + sc.comm_s;
  };

  SimComparison out;
  // Equal batches and steps.
  {
    Rng rng(c.seed ^ 0x9e3779b97f4a7c15ULL);
    SimResult& res = out.equal;
    FirstRound(res, std::vector<int64_t>(n, b_eq), std::vector<int64_t>(n, h_eq));
    std::vector<double> finish(n);
    for (int64_t r = 0; r < c.rounds; ++r) {
      double end = 0;
      for (size_t i = 0; i < n; ++i) {
        finish[i] = ComputeTime(c.workers[i], sc.seq_len, b_eq, h_eq, speed[r][i], c, rng);
        end = std::max(end, finish[i]);
        res.tokens += b_eq * h_eq * sc.seq_len;
      }
      for (size_t i = 0; i < n; ++i) res.idle_s += end - finish[i];
      res.compute_s += end;
      res.wall_s += round_time(end);
      if (round_time(end) > target) res.rounds_over_target += 1;
    }
    Finish(res, n, c.rounds);
  }
  // The planner.
  {
    Rng rng(c.seed ^ 0x9e3779b97f4a7c15ULL);
    SimResult& res = out.planner;
    std::vector<double> finish(n);
    std::vector<int64_t> b(n), h(n);
    uint64_t last_version = first_version;
    for (int64_t r = 0; r < c.rounds; ++r) {
      absl::StatusOr<Plan> plan = (*planner)->CurrentPlan();
      if (!plan.ok()) return plan.status();
      if (plan->version != last_version) {
        ++res.replans;
        last_version = plan->version;
      }
      const Plan& p = c.replan || r == 0 ? *plan : *first;
      // Assignments are sorted by id; map them back to the simulation's order.
      for (size_t i = 0; i < n; ++i) {
        for (const WorkerAssignment& a : p.workers) {
          if (a.worker_id == c.workers[i].id) {
            b[i] = a.batch_size;
            h[i] = a.inner_steps;
          }
        }
      }
      if (r == 0) FirstRound(res, b, h);
      double end = 0;
      for (size_t i = 0; i < n; ++i) {
        finish[i] = ComputeTime(c.workers[i], sc.seq_len, b[i], h[i], speed[r][i], c, rng);
        end = std::max(end, finish[i]);
        res.tokens += b[i] * h[i] * sc.seq_len;
      }
      for (size_t i = 0; i < n; ++i) {
        res.idle_s += end - finish[i];
        if (c.replan) {
          absl::StatusOr<ReportResult> rep = (*planner)->Report({.worker_id = c.workers[i].id,
                                                                 .round = static_cast<uint64_t>(r),
                                                                 .batch_size = b[i],
                                                                 .inner_steps = h[i],
                                                                 .compute_s = finish[i]});
          if (!rep.ok()) return rep.status();
        }
      }
      res.compute_s += end;
      res.wall_s += round_time(end);
      if (round_time(end) > target) res.rounds_over_target += 1;
    }
    Finish(res, n, c.rounds);
  }
  out.idle_ratio = out.planner.idle_s > 0 ? out.equal.idle_s / out.planner.idle_s
                                          : std::numeric_limits<double>::infinity();
  out.throughput_ratio =
      out.equal.tokens_per_s > 0 ? out.planner.tokens_per_s / out.equal.tokens_per_s : 0;
  return out;
}

}  // namespace heddle::planner
