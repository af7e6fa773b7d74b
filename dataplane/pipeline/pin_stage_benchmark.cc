// File: dataplane/pipeline/pin_stage_benchmark.cc
//
// Cycles per packet of the "pin-select" stage on fwd_bench.py's `small` mix (docs/pin.md §9.2):
// 8 QPs taking turns, each frame a 60-byte zero-length SEND only (a pinned one-packet message),
// PIN + REPS with the default set of 8 source ports on one uplink, bursts of 32 real mbufs. Each
// burst is copied into its mbufs and parsed as the worker does with net_pcap's frames
// (BM_CopyParse, the reference), then placed and rewritten (BM_CopyParsePin). The difference is
// the stage's own cost, stalls included, which callgrind's instruction counts do not show.
// Quote the difference of the two p10 counters (the 10th percentile of per-burst cycles, which
// leaves out the bursts other processes interrupted; the machine is shared), medians of a few
// repetitions, and compare builds by running them alternately:
//   build/dataplane/pipeline/pin_stage_benchmark --benchmark_repetitions=5 --benchmark_min_time=0.1
// Its mbufs come from the daemon's own pool (dpdk::CreateMbufPool: packed across 4 KiB pages
// without hugepages; docs/pin.md §9.2 on what the page-bound layout did to L1).
#include <benchmark/benchmark.h>
#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <bitset>
#include <cstring>
#include <random>
#include <vector>

#include "dataplane/lb/path.h"
#include "dataplane/pipeline/lb_control.h"
#include "dataplane/pipeline/pin_stage.h"
#include "dataplane/pipeline/testing/eal_benchmark.h"
#include "dataplane/pkt/builder.h"

namespace heddle::pipeline {
namespace {

constexpr uint16_t kBurst = 32;
constexpr int kQps = 8;
constexpr int kFrames = 4096;  // fwd_bench.py's trace length

struct Trace {
  std::vector<std::vector<uint8_t>> frames;  // pristine bytes, copied into the mbufs per burst
  std::vector<rte_mbuf*> mbufs;
};

const Trace& GetTrace() {
  static const Trace* trace = [] {
    auto* t = new Trace;
    rte_mempool* pool = test_util::BenchmarkPool("pin_bench", kFrames + 1024);
    std::mt19937_64 rng(5);
    uint32_t qpn[kQps], psn[kQps];
    for (int q = 0; q < kQps; ++q) {
      qpn[q] = rng() & 0xffffff;
      psn[q] = rng() & 0xffffff;
    }
    for (int k = 0; k < kFrames; ++k) {
      const int q = k % kQps;
      pkt::FrameSpec f;
      f.src_ip4 = {10, 0, 0, 1};
      f.dst_ip4 = {10, 0, 1, static_cast<uint8_t>(q + 1)};
      f.udp_sport = static_cast<uint16_t>(0xd000 + q);
      pkt::RoceSpec r;
      r.opcode = pkt::op::kSendOnly;
      r.dest_qp = qpn[q];
      r.psn = psn[q]++ & 0xffffff;
      t->frames.push_back(pkt::BuildRoce(f, r));
      rte_mbuf* m = rte_pktmbuf_alloc(pool);
      if (m == nullptr) std::abort();
      rte_pktmbuf_append(m, static_cast<uint16_t>(t->frames.back().size()));
      t->mbufs.push_back(m);
    }
    return t;
  }();
  return *trace;
}

// Packets [pos, pos + kBurst) copied into their mbufs and parsed into `b`, as the worker's burst.
void CopyParse(const Trace& t, size_t pos, Burst* b) {
  b->n = 0;
  b->ingress = 0;
  b->all_routed = false;
  for (uint16_t i = 0; i < kBurst; ++i) {
    rte_mbuf* m = t.mbufs[pos + i];
    const std::vector<uint8_t>& f = t.frames[pos + i];
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), f.data(), f.size());
    if (pkt::Parse(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, m->pkt_len, &b->desc[b->n]) !=
        pkt::ParseError::kOk) {
      std::abort();
    }
    b->pkts[b->n] = m;
    b->egress[b->n] = kNoEgress;
    b->level[b->n] = 0;
    b->held[b->n] = nullptr;
    ++b->n;
  }
}

// Per burst: the TSC cycles of each. Reported per packet: the mean, and the 10th percentile,
// which leaves out the bursts another process interrupted (the machine is shared).
void Report(benchmark::State& state, std::vector<uint32_t>& cycles) {
  uint64_t sum = 0;
  for (uint32_t c : cycles) sum += c;
  std::sort(cycles.begin(), cycles.end());
  const double n = static_cast<double>(cycles.size());
  state.counters["cycles/pkt"] = static_cast<double>(sum) / (n * kBurst);
  state.counters["p10"] = static_cast<double>(cycles[cycles.size() / 10]) / kBurst;
  state.SetItemsProcessed(state.iterations() * kBurst);
}

void BM_CopyParse(benchmark::State& state) {
  const Trace& t = GetTrace();
  Burst b;
  size_t pos = 0;
  std::vector<uint32_t> cycles;
  cycles.reserve(1 << 22);
  for (auto _ : state) {
    const uint64_t start = rte_rdtsc();
    CopyParse(t, pos, &b);
    benchmark::DoNotOptimize(b.desc[kBurst - 1]);
    cycles.push_back(static_cast<uint32_t>(rte_rdtsc() - start));
    pos = (pos + kBurst) % kFrames;
  }
  Report(state, cycles);
}
BENCHMARK(BM_CopyParse);

void BM_CopyParsePin(benchmark::State& state) {
  const Trace& t = GetTrace();
  lb::PathConfig pc;
  pc.default_paths.ports = {1};
  auto spec = lb::PathTableSpecFromConfig(pc, lb::EntropyField::kUdpSourcePort);
  auto table = lb::PathTable::Build(*spec);
  if (!table.ok()) std::abort();
  lb::LbConfig config;  // REPS, PIN on, request mode, hash pinning: the daemon's defaults
  LbControl control(config, std::shared_ptr<const lb::PathTable>(std::move(*table)), 1);
  std::bitset<kMaxPorts> hosts;
  hosts.set(0);
  PinSelectStage stage({.host_ports = hosts, .control = &control, .worker = 0, .config = config});
  LcoreStats stats;
  WorkerContext ctx(&stats);
  Burst b;
  // One pass to create the flows (the fast path serves flows that have an entry).
  for (size_t pos = 0; pos < kFrames; pos += kBurst) {
    CopyParse(t, pos, &b);
    stage.Process(ctx, b);
    stage.Poll(ctx);
  }
  size_t pos = 0;
  std::vector<uint32_t> cycles;
  cycles.reserve(1 << 22);
  for (auto _ : state) {
    const uint64_t start = rte_rdtsc();
    CopyParse(t, pos, &b);
    benchmark::DoNotOptimize(stage.Process(ctx, b));
    cycles.push_back(static_cast<uint32_t>(rte_rdtsc() - start));
    stage.Poll(ctx);
    pos = (pos + kBurst) % kFrames;
  }
  Report(state, cycles);
  if (stage.selector().counter(lb::LbCounter::kPinnedPackets) == 0)
    state.SkipWithError("none pinned");
}
BENCHMARK(BM_CopyParsePin);

}  // namespace
}  // namespace heddle::pipeline

int main(int argc, char** argv) {
  return heddle::pipeline::test_util::RunBenchmarksUnderEal("pin_stage_benchmark", argc, argv);
}
