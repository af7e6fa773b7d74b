// The simulator's speed (docs/sim.md §6): the event queue alone at a steady depth, and whole
// runs, with events/s and delivered packets/s as counters. Ratios between them, not absolute
// times, are what carries over between machines.
#include <memory>

#include "benchmark/benchmark.h"
#include "control/nuwa/dsl.h"
#include "tools/heddle-sim/lib/event_queue.h"
#include "tools/heddle-sim/lib/report.h"
#include "tools/heddle-sim/lib/rng.h"
#include "tools/heddle-sim/lib/simulator.h"

namespace heddle::sim {
namespace {

// Pop one, push one: a queue holding `depth` events, times spread over 10 µs.
void BM_EventQueue(benchmark::State& state) {
  const auto depth = static_cast<uint32_t>(state.range(0));
  EventQueue q;
  Rng rng(1);
  for (uint32_t i = 0; i < depth; ++i) q.Push(rng.Below(10'000'000), 1, i, 0);
  for (auto _ : state) {
    const Event e = q.Pop();
    q.Push(e.time + 1 + rng.Below(10'000'000), 1, e.a, 0);
    benchmark::DoNotOptimize(e);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventQueue)->Arg(1 << 10)->Arg(1 << 14)->Arg(1 << 18);

constexpr char kFabric[] = R"(fabric:
  name: bench
  kind: clos2
  hosts_per_leaf: 8
  leaves: 16
  spines: 8
  link_gbps: 400
addressing:
  ipv4: 10.128.0.0/16
hash:
  function: crc32
  seed: 1
)";

// WebSearch at 50 % on the 128-host calibration fabric for 200 µs of arrivals; arg 0 selects
// (ECMP, go-back-N, STORM off) or (REPS + PIN, selective repeat, STORM on).
void BM_Simulate(benchmark::State& state) {
  const nuwa::Fabric f = *nuwa::ParseFabricYaml(kFabric, "bench.yaml");
  const Cdf cdf = *LoadNamedCdf("websearch");
  const bool full = state.range(0) != 0;
  uint64_t events = 0, packets = 0;
  double wall = 0;  // the runs' CPU time
  for (auto _ : state) {
    SimConfig c;
    c.duration_ns = 200'000;
    c.lb.balancer = full ? lb::BalancerKind::kReps : lb::BalancerKind::kEcmp;
    c.lb.pin = full;
    c.storm = full;
    c.transport = full ? Transport::kSelectiveRepeat : Transport::kGoBackN;
    std::unique_ptr<Simulator> s = *Simulator::Create(f, c);
    (void)s->SetPoissonWorkload(cdf, 0.5);
    const SimResult r = s->Run();
    events += r.events;
    packets += r.data_packets_delivered + r.control_packets_delivered;
    wall += r.cpu_seconds;
  }
  state.counters["events_per_s"] = static_cast<double>(events) / wall;
  state.counters["delivered_pkts_per_s"] = static_cast<double>(packets) / wall;
}
BENCHMARK(BM_Simulate)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace heddle::sim

BENCHMARK_MAIN();
