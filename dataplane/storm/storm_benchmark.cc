// File: dataplane/storm/storm_benchmark.cc
//
// STORM's per-packet cost — QP key + FindOrInsert + request tracking + level + DSCP rewrite — on a
// request-direction mix over 10 000 QPs, beside pkt::Parse() of the same frames in the same run.
// Quote the ratio, not the times:
//   build/dataplane/storm/storm_benchmark
// The mix (MTU 1024): 50% SEND only 512 B, 25% WRITE 8 KiB (8 packets), 15% READ request 64 KiB,
// 10% WRITE 32 KiB (32 packets); one message per QP per pass, QPs interleaved at random (seeded)
// with each QP's packets in PSN order. Every pass shifts each QP's PSNs by its packet count, so a
// replayed pass is new traffic to the tracker, not duplicates.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"
#include "dataplane/storm/levels.h"
#include "dataplane/storm/qp_table.h"
#include "dataplane/storm/rewrite.h"
#include "dataplane/storm/tracker.h"

namespace heddle::storm {
namespace {

constexpr uint32_t kMtu = 1024;
constexpr int kQps = 10'000;

// Frames are kept as their first kHeadroom bytes plus the full length, as a chained mbuf's first
// segment, and parsed with the segmented Parse(): the trace is then ~7 MiB of headers instead of
// ~60 MiB of payload, which would evict the QP table from every cache level on each pass — no
// NIC ring recycles that much memory per 57k packets.
constexpr size_t kHeadroom = 128;

struct Trace {
  std::vector<std::vector<uint8_t>> frames;  // first kHeadroom bytes
  std::vector<uint32_t> frame_len;
  std::vector<pkt::PacketDesc> descs;
  std::vector<uint32_t> psn_stride;  // packets of the frame's QP per pass
};

const Trace& GetTrace() {
  static const Trace* trace = [] {
    auto* t = new Trace;
    std::mt19937_64 rng(12345);
    struct Msg {
      pkt::FrameSpec f;
      std::vector<pkt::RoceSpec> packets;
      size_t next = 0;
    };
    std::vector<Msg> msgs(kQps);
    for (int q = 0; q < kQps; ++q) {
      Msg& m = msgs[q];
      m.f.src_ip4 = {10, 0, static_cast<uint8_t>(q % 8), 1};
      m.f.dst_ip4 = {10, 1, static_cast<uint8_t>(q / 256 % 256), static_cast<uint8_t>(q % 64)};
      const uint32_t qpn = rng() & 0xffffff;
      const uint32_t psn0 = rng() & 0xffffff;
      const int pick = static_cast<int>(rng() % 100);
      auto add = [&](uint8_t op, uint32_t i, uint32_t payload, uint32_t dma) {
        pkt::RoceSpec r;
        r.opcode = op;
        r.dest_qp = qpn;
        r.psn = (psn0 + i) & kPsnMask;
        r.payload_len = payload;
        r.dma_length = dma;
        m.packets.push_back(r);
      };
      auto write = [&](uint32_t packets) {
        for (uint32_t i = 0; i < packets; ++i) {
          const uint8_t op = i == 0             ? pkt::op::kWriteFirst
                             : i + 1 == packets ? pkt::op::kWriteLast
                                                : pkt::op::kWriteMiddle;
          add(op, i, kMtu, packets * kMtu);
        }
      };
      if (pick < 50) {
        add(pkt::op::kSendOnly, 0, 512, 0);
      } else if (pick < 75) {
        write(8);
      } else if (pick < 90) {
        add(pkt::op::kReadRequest, 0, 0, 65536);
      } else {
        write(32);
      }
    }
    std::vector<int> pending(kQps);
    for (int q = 0; q < kQps; ++q) pending[q] = q;
    while (!pending.empty()) {
      const size_t k = rng() % pending.size();
      Msg& m = msgs[pending[k]];
      std::vector<uint8_t> full = pkt::BuildRoce(m.f, m.packets[m.next]);
      pkt::PacketDesc d;
      pkt::Parse(full.data(), full.size(), &d);
      t->descs.push_back(d);
      t->frame_len.push_back(static_cast<uint32_t>(full.size()));
      full.resize(std::min(full.size(), kHeadroom));
      t->frames.push_back(std::move(full));
      t->psn_stride.push_back(static_cast<uint32_t>(m.packets.size()));
      if (++m.next == m.packets.size()) {
        pending[k] = pending.back();
        pending.pop_back();
      }
    }
    return t;
  }();
  return *trace;
}

// The STORM stage for one request-direction packet, as the pipeline runs it after Parse().
struct Stage {
  explicit Stage(const benchmark::State& state)
      : table({.capacity = static_cast<size_t>(state.range(1)), .idle_ms = 10'000}),
        tracker({.mtu = kMtu}) {
    config.mode = state.range(0) ? Mode::kPerPacket : Mode::kPerMessage;
  }
  void Run(uint8_t* frame, const pkt::PacketDesc& d, uint32_t now_ms) {
    const QpKey key = KeyFromPacket(frame, d, Direction::kRequest);
    RunHashed(frame, d, HashKey(key), QpTable::QpnDir(key), now_ms);
  }
  void RunHashed(uint8_t* frame, const pkt::PacketDesc& d, uint64_t hash, uint32_t qpn_dir,
                 uint32_t now_ms) {
    QpEntry* e = table.FindOrInsertHashed(hash, qpn_dir, now_ms, nullptr);
    TrackResult track;
    if (e != nullptr) track = tracker.OnRequestPacket(*e, d);
    const uint64_t backlog = e ? BacklogBytes(*e, BacklogSource::kEgressQueue, kMtu) : 0;
    const uint8_t level = TagPacket(config, e, d, track, backlog, kMtu);
    if (track.size_sample) histogram.Add(track.size_sample);
    SetDscp(frame, d, config.dscp[level]);
    if (config.pcp[level] >= 0) SetPcp(frame, d, config.pcp[level]);
  }
  void Report(benchmark::State& state, size_t frames) {
    state.SetItemsProcessed(state.iterations());
    state.counters["qps"] = static_cast<double>(table.size());
    state.counters["table_full"] = static_cast<double>(table.counters().table_full);
    state.counters["duplicates"] = static_cast<double>(tracker.counters().duplicates);
    state.counters["frames"] = static_cast<double>(frames);
  }
  QpTable table;
  RequestTracker tracker;
  LevelConfig config;
  SizeHistogram histogram;
};

#define STORM_ARGS ArgsProduct({{0, 1}, {1 << 15, 1 << 20}})->ArgNames({"per_packet", "capacity"})

// STORM alone on pre-parsed descriptors: the frame's first touch is STORM's (a cache miss that
// the pipeline, which has just parsed the frame, does not pay).
void BM_StormColdFrame(benchmark::State& state) {
  const Trace& t = GetTrace();
  std::vector<std::vector<uint8_t>> frames = t.frames;
  Stage stage(state);
  const size_t n = frames.size();
  size_t i = 0;
  uint32_t pass = 0, tick = 0;
  for (auto _ : state) {
    pkt::PacketDesc d = t.descs[i];
    d.psn = (d.psn + pass * t.psn_stride[i]) & kPsnMask;
    stage.Run(frames[i].data(), d, ++tick >> 12);  // ~4k packets per ms
    benchmark::DoNotOptimize(frames[i][d.l3_off + 1]);
    if (++i == n) {
      i = 0;
      ++pass;
    }
  }
  stage.Report(state, n);
}
BENCHMARK(BM_StormColdFrame)->STORM_ARGS;

// Parse() then STORM, as the pipeline runs them: (this - BM_ParseReference) is STORM's cost.
void BM_ParseThenStorm(benchmark::State& state) {
  const Trace& t = GetTrace();
  std::vector<std::vector<uint8_t>> frames = t.frames;
  Stage stage(state);
  const size_t n = frames.size();
  size_t i = 0;
  uint32_t pass = 0, tick = 0;
  pkt::PacketDesc d;
  for (auto _ : state) {
    auto& f = frames[i];
    pkt::Parse(f.data(), f.size(), t.frame_len[i], &d);
    d.psn = (d.psn + pass * t.psn_stride[i]) & kPsnMask;  // the replay's PSN shift (see top)
    stage.Run(f.data(), d, ++tick >> 12);
    benchmark::DoNotOptimize(f[d.l3_off + 1]);
    if (++i == n) {
      i = 0;
      ++pass;
    }
  }
  stage.Report(state, n);
}
BENCHMARK(BM_ParseThenStorm)->STORM_ARGS;

// The same in bursts of 32, as the pipeline polls: parse and hash the burst, prefetch every
// packet's bucket, then run the stage. The table misses of a burst overlap.
void BM_ParseThenStormBurst(benchmark::State& state) {
  constexpr size_t kBurst = 32;
  const Trace& t = GetTrace();
  std::vector<std::vector<uint8_t>> frames = t.frames;
  Stage stage(state);
  const size_t n = frames.size() / kBurst * kBurst;
  size_t i = 0;
  uint32_t pass = 0, tick = 0;
  pkt::PacketDesc d[kBurst];
  uint64_t hash[kBurst];
  uint32_t qpn_dir[kBurst];
  for (auto _ : state) {
    for (size_t k = 0; k < kBurst; ++k) {
      auto& f = frames[i + k];
      pkt::Parse(f.data(), f.size(), t.frame_len[i + k], &d[k]);
      d[k].psn = (d[k].psn + pass * t.psn_stride[i + k]) & kPsnMask;
      const QpKey key = KeyFromPacket(f.data(), d[k], Direction::kRequest);
      hash[k] = HashKey(key);
      qpn_dir[k] = QpTable::QpnDir(key);
      stage.table.Prefetch(hash[k]);
    }
    const uint32_t now_ms = (tick += kBurst) >> 12;
    for (size_t k = 0; k < kBurst; ++k) {
      stage.RunHashed(frames[i + k].data(), d[k], hash[k], qpn_dir[k], now_ms);
    }
    benchmark::DoNotOptimize(frames[i][d[0].l3_off + 1]);
    if ((i += kBurst) == n) {
      i = 0;
      ++pass;
    }
  }
  stage.Report(state, n);
  state.SetItemsProcessed(state.iterations() * kBurst);
}
BENCHMARK(BM_ParseThenStormBurst)->STORM_ARGS;

// Reference: pkt::Parse() of the same frames in the same order.
void BM_ParseReference(benchmark::State& state) {
  const Trace& t = GetTrace();
  const size_t n = t.frames.size();
  size_t i = 0;
  pkt::PacketDesc d;
  for (auto _ : state) {
    const auto& f = t.frames[i];
    benchmark::DoNotOptimize(pkt::Parse(f.data(), f.size(), t.frame_len[i], &d));
    benchmark::DoNotOptimize(d);
    if (++i == n) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseReference);

}  // namespace
}  // namespace heddle::storm

BENCHMARK_MAIN();
