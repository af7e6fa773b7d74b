// File: control/planner/sim.h
//
// A round-by-round simulation of a GeoMesh job on heterogeneous workers, to measure what the
// planner buys (docs/planner.md §7): straggler idle and useful tokens per second with the Planner
// (its plans, estimator and replan policy, fed the simulated reports) against every worker running
// the same batch size and inner steps — the largest batch all memories admit, and as many steps as
// the slowest worker fits in the same compute budget.
//
// Each worker's true rate is r(b) = peak·b/(b + half_batch) times a speed factor that drifts as a
// random walk from round to round and jitters per round; each inner step's time has its own
// mean-one log-normal noise and, rarely, a hiccup (a GC pause, a checkpoint write). Both
// schedules see the same speed-factor trajectories. Deterministic for a seed.
//
//   SimConfig cfg;  cfg.workers = {{"slow", 10000, 4, 32}, {"mid", 20000, 4, 32}, ...};
//   absl::StatusOr<SimComparison> r = Simulate(cfg);   // r->idle_ratio = idle_equal / idle_planner
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control/planner/planner.h"

namespace heddle::planner {

struct SimWorker {
  std::string id;
  double peak_tokens_per_s = 0;
  double half_batch = 0;
  int64_t max_batch = 0;
};

struct SimConfig {
  std::vector<SimWorker> workers;
  PlannerConfig planner;  // the solver's knobs (target, steps, seq_len, comm) and policy
  int64_t rounds = 200;
  double step_noise = 0.05;    // log-normal σ of each inner step's time
  double round_noise = 0.02;   // log-normal σ of a worker's speed over one round
  double drift = 0.01;         // σ per round of the random walk of each worker's log speed
  double profile_error = 0.0;  // σ of the (fixed) log error of each profiled peak
  double hiccup_prob = 0.0;    // chance that an inner step takes hiccup_factor times longer
  double hiccup_factor = 3.0;
  uint64_t seed = 1;
  bool replan = true;  // false: the planner's first plan runs every round
};

struct SimResult {
  int64_t batch_size_min = 0, batch_size_max = 0;  // over workers, first round
  int64_t inner_steps_min = 0, inner_steps_max = 0;
  double idle_s = 0;     // Σ over rounds and workers of (round's compute end − finish), GPU·s
  double compute_s = 0;  // Σ over rounds of the compute end
  double wall_s = 0;     // Σ over rounds of the round time (compute end + comm, or overlapped)
  int64_t tokens = 0;    // Σ useful tokens
  double idle_fraction = 0;       // idle_s / (N · compute_s)
  double tokens_per_s = 0;        // tokens / wall_s
  int64_t replans = 0;            // plans adopted after the first
  double rounds_over_target = 0;  // fraction of rounds whose wall time exceeded the target
};

struct SimComparison {
  SimResult equal;
  SimResult planner;
  double idle_ratio = 0;        // equal.idle_s / planner.idle_s
  double throughput_ratio = 0;  // planner.tokens_per_s / equal.tokens_per_s
};

absl::StatusOr<SimComparison> Simulate(const SimConfig& config);

}  // namespace heddle::planner
