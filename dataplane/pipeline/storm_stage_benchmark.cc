// File: dataplane/pipeline/storm_stage_benchmark.cc
//
// ns per packet of the "storm-tag" stage itself — StormTagStage::Process() on bursts of 32 real
// mbufs (QP lookup with prefetch, request tracking, level, DSCP rewrite, held counts) — beside
// pkt::Parse() of the same frames, which every worker already pays per packet, and beside the floor
// of any per-QP tagging (hash, lookup, held count, DSCP rewrite alone). Quote the ratios:
//   build/dataplane/pipeline/storm_stage_benchmark
// Trace (MTU 1024), 4096 QPs interleaved at random, each QP's packets in PSN order: 50 % SEND only
// 512 B, 25 % WRITE 8 KiB (8 packets), 15 % READ request 64 KiB, 10 % WRITE 32 KiB (32 packets).
// Each pass shifts every descriptor's PSN by its QP's packet count, so a replayed pass is new
// traffic to the tracker, not duplicates. The held counts are released after each burst, as the
// egress does when the port keeps up.
#include <benchmark/benchmark.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <bitset>
#include <random>
#include <vector>

#include "dataplane/pipeline/storm_control.h"
#include "dataplane/pipeline/storm_stage.h"
#include "dataplane/pipeline/testing/eal_benchmark.h"
#include "dataplane/pkt/builder.h"
#include "dataplane/storm/rewrite.h"

namespace heddle::pipeline {
namespace {

constexpr uint32_t kMtu = 1024;
constexpr int kQps = 4096;
constexpr uint16_t kBurst = 32;

struct Trace {
  std::vector<rte_mbuf*> mbufs;
  std::vector<pkt::PacketDesc> descs;
  std::vector<uint32_t> psn_stride;
};

rte_mempool* Pool(size_t n) {
  static rte_mempool* pool = test_util::BenchmarkPool("storm_bench", n);
  return pool;
}

const Trace& GetTrace() {
  static const Trace* trace = [] {
    auto* t = new Trace;
    std::mt19937_64 rng(7);
    struct Msg {
      pkt::FrameSpec f;
      std::vector<pkt::RoceSpec> packets;
      size_t next = 0;
    };
    std::vector<Msg> msgs(kQps);
    size_t total = 0;
    for (int q = 0; q < kQps; ++q) {
      Msg& m = msgs[q];
      m.f.src_ip4 = {10, 0, static_cast<uint8_t>(q % 8), 1};
      m.f.dst_ip4 = {10, 1, static_cast<uint8_t>(q / 256), static_cast<uint8_t>(q % 256)};
      const uint32_t qpn = rng() & 0xffffff;
      uint32_t psn = rng() & 0xffffff;
      const int kind = static_cast<int>(rng() % 20);
      auto add = [&](uint8_t op, uint32_t dma, uint16_t payload) {
        pkt::RoceSpec r;
        r.opcode = op;
        r.dest_qp = qpn;
        r.psn = psn++ & 0xffffff;
        r.dma_length = dma;
        r.payload_len = payload;
        m.packets.push_back(r);
      };
      if (kind < 10) {
        add(pkt::op::kSendOnly, 0, 512);
      } else if (kind < 15 || kind >= 18) {
        const uint32_t n = kind < 15 ? 8 : 32;
        for (uint32_t i = 0; i < n; ++i) {
          const uint8_t op = i == 0 ? pkt::op::kWriteFirst
                             : i + 1 == n ? pkt::op::kWriteLast
                                          : pkt::op::kWriteMiddle;
          add(op, i == 0 ? n * kMtu : 0, kMtu);
        }
      } else {
        add(pkt::op::kReadRequest, 65536, 0);
      }
      total += m.packets.size();
    }
    std::vector<int> order;
    for (int q = 0; q < kQps; ++q) order.insert(order.end(), msgs[q].packets.size(), q);
    std::shuffle(order.begin(), order.end(), rng);
    rte_mempool* pool = Pool(total + 1024);
    for (int q : order) {
      Msg& m = msgs[q];
      const std::vector<uint8_t> f = pkt::BuildRoce(m.f, m.packets[m.next++]);
      rte_mbuf* mb = rte_pktmbuf_alloc(pool);
      if (mb == nullptr) std::abort();
      std::memcpy(rte_pktmbuf_append(mb, f.size()), f.data(), f.size());
      pkt::PacketDesc d;
      if (pkt::Parse(f.data(), f.size(), &d) != pkt::ParseError::kOk) std::abort();
      t->mbufs.push_back(mb);
      t->descs.push_back(d);
      t->psn_stride.push_back(static_cast<uint32_t>(m.packets.size()));
    }
    return t;
  }();
  return *trace;
}

// Fills `b` with packets [pos, pos + kBurst) of the trace (wrapping), PSNs shifted by `pass`.
void Fill(const Trace& t, size_t pos, uint32_t pass, Burst* b) {
  b->n = kBurst;
  b->ingress = 0;
  for (uint16_t i = 0; i < kBurst; ++i) {
    const size_t k = (pos + i) % t.mbufs.size();
    b->pkts[i] = t.mbufs[k];
    b->desc[i] = t.descs[k];
    b->desc[i].psn = (b->desc[i].psn + pass * t.psn_stride[k]) & 0xffffff;
    b->egress[i] = 1;
    b->level[i] = 0;
    b->held[i] = nullptr;
  }
}

void BM_StormTagStage(benchmark::State& state) {
  const Trace& t = GetTrace();
  StormControl control(storm::LevelConfig{}, 1);
  std::bitset<kMaxPorts> hosts;
  hosts.set(0);
  StormTagStage stage({.table = {.capacity = static_cast<size_t>(state.range(0))},
                       .mtu = kMtu,
                       .host_ports = hosts,
                       .control = &control,
                       .worker = 0});
  LcoreStats stats;
  WorkerContext ctx(&stats);
  Burst b;
  size_t pos = 0;
  uint32_t pass = 0;
  for (auto _ : state) {
    Fill(t, pos, pass, &b);
    benchmark::DoNotOptimize(stage.Process(ctx, b));
    for (uint16_t i = 0; i < b.n; ++i) ReleaseHeld(b.held[i]);
    stage.Poll(ctx);
    pos += kBurst;
    if (pos >= t.mbufs.size()) {
      pos -= t.mbufs.size();
      ++pass;
    }
  }
  state.SetItemsProcessed(state.iterations() * kBurst);
  state.counters["qps_live"] = static_cast<double>(stage.table().size());
}
BENCHMARK(BM_StormTagStage)->Arg(65536)->Arg(1 << 20);

// The floor of any per-QP tagging: the same bursts, and per packet only the QP key hash, the table
// lookup (slot remembered per hash, as storm-tag does), the held count and the DSCP rewrite — no
// request tracking, no level formula, no guard. What storm-tag costs beyond this is its logic.
void BM_LookupRewriteFloor(benchmark::State& state) {
  const Trace& t = GetTrace();
  storm::QpTable table({.capacity = static_cast<size_t>(state.range(0))});
  Burst b;
  size_t pos = 0;
  uint32_t pass = 0;
  uint32_t now_ms = 0;
  for (auto _ : state) {
    Fill(t, pos, pass, &b);
    for (uint16_t i = 0; i < b.n; ++i) {
      const pkt::PacketDesc& d = b.desc[i];
      uint8_t* frame = rte_pktmbuf_mtod(b.pkts[i], uint8_t*);
      const uint64_t h = storm::HashPacket(frame, d, storm::Direction::kRequest);
      storm::QpEntry* e =
          table.FindOrInsertHashed(h, d.dest_qp & storm::kQpnMask, now_ms, nullptr);
      if (e != nullptr) {
        ++e->egress_queued;
        b.held[i] = &e->egress_queued;
      }
      storm::SetDscp(frame, d, static_cast<uint8_t>(10 + (h & 3) * 8));
    }
    for (uint16_t i = 0; i < b.n; ++i) ReleaseHeld(b.held[i]);
    pos += kBurst;
    if (pos >= t.mbufs.size()) {
      pos -= t.mbufs.size();
      ++pass;
      ++now_ms;
    }
  }
  state.SetItemsProcessed(state.iterations() * kBurst);
}
BENCHMARK(BM_LookupRewriteFloor)->Arg(65536)->Arg(1 << 20);

// The reference: the same bursts filled the same way, and parsed (what the worker pays anyway).
void BM_ParseReference(benchmark::State& state) {
  const Trace& t = GetTrace();
  Burst b;
  size_t pos = 0;
  uint32_t pass = 0;
  for (auto _ : state) {
    Fill(t, pos, pass, &b);
    for (uint16_t i = 0; i < b.n; ++i) {
      rte_mbuf* m = b.pkts[i];
      benchmark::DoNotOptimize(
          pkt::Parse(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, m->pkt_len, &b.desc[i]));
    }
    pos += kBurst;
    if (pos >= t.mbufs.size()) pos -= t.mbufs.size();
  }
  state.SetItemsProcessed(state.iterations() * kBurst);
}
BENCHMARK(BM_ParseReference);

}  // namespace
}  // namespace heddle::pipeline

int main(int argc, char** argv) {
  return heddle::pipeline::test_util::RunBenchmarksUnderEal("storm_stage_benchmark", argc, argv);
}
