// Solver time for 8, 64 and 1024 workers of mixed speed and memory (docs/planner.md §7): fixed
// target round (one pass per worker) and token-budget mode (bisection over the compute budget).
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "control/planner/solver.h"

namespace heddle::planner {
namespace {

std::vector<SolverWorker> Workers(int n) {
  std::mt19937_64 g(n);
  std::uniform_real_distribution<double> speed(1, 8);
  std::uniform_int_distribution<int> memory(2, 8);
  std::vector<SolverWorker> ws;
  for (int i = 0; i < n; ++i) {
    ws.push_back({WorkerSpec{.id = absl::StrCat("worker-", i),
                             .throughput = ThroughputModel::Saturating(10000 * speed(g), 4),
                             .max_batch = 8 * memory(g)},
                  1.0});
  }
  return ws;
}

void BM_SolveTarget(benchmark::State& state) {
  const std::vector<SolverWorker> ws = Workers(static_cast<int>(state.range(0)));
  const SolverConfig c{.target_round_s = 600,
                       .min_inner_steps = 10,
                       .max_inner_steps = 1000,
                       .seq_len = 2048,
                       .comm_s = 30};
  for (auto _ : state) {
    absl::StatusOr<Plan> p = Solve(c, ws);
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SolveTarget)->Arg(8)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);

void BM_SolveTokenBudget(benchmark::State& state) {
  const std::vector<SolverWorker> ws = Workers(static_cast<int>(state.range(0)));
  const SolverConfig c{.min_inner_steps = 10,
                       .max_inner_steps = 1000,
                       .seq_len = 2048,
                       .tokens_per_round = state.range(0) * int64_t{2048} * 32 * 100,
                       .comm_s = 30};
  for (auto _ : state) {
    absl::StatusOr<Plan> p = Solve(c, ws);
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SolveTokenBudget)->Arg(8)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);

// Granularity 1 and a large memory: the batch scan has the most candidates.
void BM_SolveFineBatches(benchmark::State& state) {
  std::vector<SolverWorker> ws = Workers(static_cast<int>(state.range(0)));
  for (SolverWorker& w : ws) w.spec.max_batch *= 16;
  const SolverConfig c{.target_round_s = 600,
                       .min_inner_steps = 1,
                       .max_inner_steps = 20,
                       .seq_len = 2048,
                       .comm_s = 30};
  for (auto _ : state) {
    absl::StatusOr<Plan> p = Solve(c, ws);
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SolveFineBatches)->Arg(8)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace heddle::planner

BENCHMARK_MAIN();
