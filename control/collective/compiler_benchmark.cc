// Compile time of the schedule compiler, and predicted time of synthesized schedules against the
// ring and direct builtins on WANs (docs/optiflow-compiler.md §7).
//
//   build/control/collective/collective_compiler_benchmark --benchmark_filter=Compile
//   build/control/collective/collective_compiler_benchmark --benchmark_filter=Wan
//
// BM_Compile: one Compile() of a builtin all-reduce / all-gather on a full mesh of N ranks (1
// Gbit/s, 1 ms), with the compiler picking the piece count (pieces:0) or a fixed one; with the
// piece count searched, on 1 thread (the serial search) or 2 (threads:N, CompileOptions::threads).
// Time is wall-clock (real) time; CPU is the whole process's (every thread's), so with threads:2
// it shows the work the threaded search did in all, Time how long it took.
// BM_Wan: Synthesize() on R regions (10 Gbit/s, 30 ms between every pair; asym:1 makes the link
// between regions 0 and 2 four times slower), 64 MiB slots. Its counters are predicted seconds
// (synth_s, ring_s, direct_s: ring and direct in identity order compiled without relays, as a
// hard-wired library runs them) and ratio = min(ring_s, direct_s) / synth_s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "control/collective/builtins.h"
#include "control/collective/compiler.h"
#include "control/collective/dsl.h"
#include "control/collective/synthesize.h"
#include "control/collective/testing/intents.h"

namespace heddle::collective {
namespace {

constexpr double kGbit = 1e9 / 8;

const char* const kAlgorithms[] = {"ring", "direct", "halving-doubling", "tree", "hierarchical"};

Intent Builtin(const char* name, Kind kind, uint32_t n) {
  ExpandOptions e{.ranks = n};
  // Hierarchical: the group size Synthesize() tries first (the divisor of N nearest √N).
  if (std::string_view(name) == "hierarchical") e.params["G"] = n == 64 ? 8 : 16;
  absl::StatusOr<Intent> in = ParseIntent(*BuiltinIntentText(name, kind), e);
  if (!in.ok()) std::abort();
  return *in;
}

// args: algorithm index, ranks, kind (0 all-reduce, 1 all-gather), pieces (0 = searched),
// threads of the piece search.
void BM_Compile(benchmark::State& state) {
  const char* name = kAlgorithms[state.range(0)];
  const uint32_t n = static_cast<uint32_t>(state.range(1));
  const Kind kind = state.range(2) == 0 ? Kind::kAllReduce : Kind::kAllGather;
  Intent in = Builtin(name, kind, n);
  Topology t = testing::Mesh(n, kGbit, 0.001);
  CompileOptions o;
  o.pieces = static_cast<uint32_t>(state.range(3));
  o.threads = static_cast<uint32_t>(state.range(4));
  uint64_t ops = 0;
  uint32_t pieces = 0;
  for (auto _ : state) {
    absl::StatusOr<Schedule> s = Compile(in, t, o);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.status().message()).c_str());
      return;
    }
    ops = 0;
    for (const RankSchedule& r : s->per_rank) ops += r.ops.size();
    pieces = s->pieces;
    benchmark::DoNotOptimize(s->predicted_s);
  }
  state.SetLabel(absl::StrCat(name, " ", KindName(kind), " moves=", in.moves.size()));
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["pieces"] = pieces;
}

void CompileArgs(benchmark::internal::Benchmark* b) {
  for (int64_t alg = 0; alg < static_cast<int64_t>(std::size(kAlgorithms)); ++alg) {
    for (int64_t kind = 0; kind < 2; ++kind) {
      if (!BuiltinIntentText(kAlgorithms[alg], kind == 0 ? Kind::kAllReduce : Kind::kAllGather)
               .ok()) {
        continue;
      }
      b->Args({alg, 64, kind, 0, 1});
      b->Args({alg, 64, kind, 0, 2});
      b->Args({alg, 64, kind, 1, 1});
      b->Args({alg, 512, kind, 1, 1});
    }
  }
}
BENCHMARK(BM_Compile)
    ->Apply(CompileArgs)
    ->ArgNames({"alg", "ranks", "gather", "pieces", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// args: regions, asymmetric (0/1), kind (0 all-gather, 1 all-reduce).
void BM_Wan(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  Topology t = testing::Mesh(n, 10 * kGbit, 0.030);
  if (state.range(1)) testing::SetLink(t, 0, 2, 2.5 * kGbit);
  const Kind kind = state.range(2) == 0 ? Kind::kAllGather : Kind::kAllReduce;
  const Collective c{kind, n, 1};
  SynthesizeOptions o;
  o.compile.slot_bytes = 64 << 20;
  o.budget = 100;
  CompileOptions plain = o.compile;
  plain.multi_hop = false;
  absl::StatusOr<Schedule> ring_s = Compile(Builtin("ring", kind, n), t, plain);
  absl::StatusOr<Schedule> direct_s = Compile(Builtin("direct", kind, n), t, plain);
  if (!ring_s.ok() || !direct_s.ok()) {
    state.SkipWithError(std::string((!ring_s.ok() ? ring_s : direct_s).status().message()).c_str());
    return;
  }
  const double ring = ring_s->predicted_s;
  const double direct = direct_s->predicted_s;
  double synth = 0;
  std::string best;
  for (auto _ : state) {
    absl::StatusOr<Synthesized> s = Synthesize(c, t, o);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.status().message()).c_str());
      return;
    }
    synth = s->schedule.predicted_s;
    best = s->best.name;
  }
  state.SetLabel(absl::StrCat(KindName(kind), " best: ", best));
  state.counters["synth_s"] = synth;
  state.counters["ring_s"] = ring;
  state.counters["direct_s"] = direct;
  state.counters["ratio"] = std::min(ring, direct) / synth;
}
BENCHMARK(BM_Wan)
    ->ArgsProduct({{3, 4, 5}, {0, 1}, {0, 1}})
    ->ArgNames({"regions", "asym", "reduce"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace heddle::collective

BENCHMARK_MAIN();
