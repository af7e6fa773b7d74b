// File: control/planner/solver.h
//
// The GeoMesh plan solver (docs/planner.md §3): given each worker's speed and memory, choose an
// integer batch size b_i (a multiple of the batch granularity, within memory) and an integer
// number of inner steps H_i (within [min, max]) so that every worker's compute finishes within the
// round's compute budget, the round carries as many tokens as it can (or reaches a token budget in
// the shortest round), and the fast workers fill the round instead of waiting.
//
//   SolverConfig cfg{.target_round_s = 300, .min_inner_steps = 10, .max_inner_steps = 500,
//                    .seq_len = 2048, .comm_s = 12};
//   std::vector<SolverWorker> ws = {{spec_a, 1.0}, {spec_b, 0.93}};   // 0.93: measured / profiled
//   absl::StatusOr<Plan> plan = Solve(cfg, ws);
//
// Solve() is a pure function: the same inputs in any order give the same plan, bit for bit
// (assignments sorted by worker id, ties broken by fixed rules). It is what Planner (planner.h)
// calls; the solver benchmark calls it directly.
//
// Contract with the relay's aggregation (dataplane/relay): a worker's contribution for a round
// carries n_i = b_i·H_i·seq_len_i tokens (WorkerAssignment::tokens) and τ_i = H_i inner steps
// (WorkerAssignment::inner_steps); the relay weights by n_i and normalizes by τ_i as docs/relay.md
// describes. The planner only promises that those two numbers are what the worker was told to run.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "control/planner/model.h"

namespace heddle::planner {

struct SolverConfig {
  // The round's wall-time target T in seconds, communication included; 0 = derive it
  // (docs/planner.md §3.2).
  double target_round_s = 0;
  int64_t min_inner_steps = 1;
  int64_t max_inner_steps = 1000;
  // Batch sizes are multiples of this (e.g. the number of micro-batches or data-parallel ranks
  // inside the worker).
  int64_t batch_granularity = 1;
  // The smallest batch worth running; 0 = batch_granularity. Rounded up to the granularity.
  int64_t min_batch = 0;
  // Default tokens per sample for workers whose spec leaves seq_len 0.
  int64_t seq_len = 2048;
  // Global token budget per round; 0 = none (fill the round). With a budget the solver finds the
  // shortest round that carries it (and at most target_round_s when that is set).
  int64_t tokens_per_round = 0;
  // The measured WAN exchange time per round (from the relay), and whether it overlaps the next
  // round's compute (streaming/overlapped outer step) or follows it.
  double comm_s = 0;
  bool comm_overlaps = false;
};

absl::Status ValidateSolverConfig(const SolverConfig& c);

// One worker as the solver sees it: its spec and the estimator's speed scale (measured rate over
// the spec's model; 1.0 = as profiled).
struct SolverWorker {
  WorkerSpec spec;
  double speed_scale = 1.0;
  // Headroom for this worker's round-to-round noise: its expected finish times (1 + finish_margin)
  // must stay within the compute budget (docs/planner.md §3.4). 0 plans to the expected finish.
  double finish_margin = 0;
};

struct WorkerAssignment {
  std::string worker_id;
  int64_t batch_size = 0;              // b_i, samples per inner step
  int64_t inner_steps = 0;             // H_i = τ_i
  int64_t seq_len = 0;                 // tokens per sample
  int64_t tokens = 0;                  // n_i = b_i · H_i · seq_len
  int64_t max_batch = 0;               // what memory and granularity allowed
  double tokens_per_s = 0;             // estimated rate at b_i
  double step_s = 0;                   // estimated time of one inner step at b_i
  double predicted_finish_s = 0;       // H_i · step_s, from the round's start
  double finish_margin = 0;            // the headroom planned for (SolverWorker::finish_margin)
  double predicted_finish_high_s = 0;  // predicted_finish_s · (1 + finish_margin) ≤ the budget
  double predicted_idle_s = 0;         // compute end of the round − predicted_finish_s
};

struct Plan {
  uint64_t version = 0;         // set by Planner; 0 from Solve()
  std::string reason;           // set by Planner: why this plan was made
  double target_round_s = 0;    // T the plan was made for (given or derived)
  double compute_budget_s = 0;  // the compute time every worker must finish within
  double comm_s = 0;
  bool comm_overlaps = false;
  double predicted_compute_end_s = 0;     // max_i predicted_finish_s: when the last worker pushes
  double predicted_round_s = 0;           // compute end + comm, or max of the two when overlapped
  int64_t total_tokens = 0;               // Σ n_i
  double predicted_tokens_per_s = 0;      // total_tokens / predicted_round_s
  double predicted_idle_s = 0;            // Σ_i predicted_idle_s (GPU-seconds per round)
  double predicted_idle_fraction = 0;     // predicted_idle_s / (N · predicted_compute_end_s)
  std::vector<WorkerAssignment> workers;  // sorted by worker_id
};

// At most this many workers per plan.
inline constexpr size_t kMaxWorkers = 4096;

absl::StatusOr<Plan> Solve(const SolverConfig& config, std::span<const SolverWorker> workers);

// Recomputes a plan's predictions (rates, step and finish times, idle, round time) for the
// assignments it holds under new speed scales (same order as plan.workers), without changing any
// b_i or H_i. The replan policy compares this against a fresh Solve().
Plan Repredict(const Plan& plan, std::span<const SolverWorker> workers_by_plan_order,
               const SolverConfig& config);

// The equal baseline GeoMesh is measured against (the planner's equal mode and heddle-sim's
// comparison): one batch for every worker, the largest multiple of the batch granularity that
// every worker's memory admits (`max_batch[i]`; at least one granule), and one inner-step count,
// the most the slowest worker fits in `budget_s` (clamped to [min, max]_inner_steps), where
// `step_seconds(i, b)` is worker i's time for one step of batch b.
struct EqualSchedule {
  int64_t batch_size = 0;
  int64_t inner_steps = 0;
};
EqualSchedule EqualBatchAndSteps(std::span<const int64_t> max_batch, double budget_s,
                                 const SolverConfig& config,
                                 absl::FunctionRef<double(size_t, int64_t)> step_seconds);

}  // namespace heddle::planner
