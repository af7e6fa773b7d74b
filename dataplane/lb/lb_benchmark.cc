// File: dataplane/lb/lb_benchmark.cc
//
// PIN's per-packet cost, and the incremental ICRC update against a full recompute. Quote ratios,
// not times (a shared VM); the ratios the run measured are printed after the table:
//   build/dataplane/lb/lb_benchmark
//   build/dataplane/lb/lb_benchmark --benchmark_filter=Icrc
//
// BM_Choose/<balancer>/<pin>: PinSelector::Choose() per packet on a request-direction mix over
// 4096 QPs at MTU 1024 — 50 % SEND only 512 B, 25 % WRITE 8 KiB, 15 % READ request, 10 % WRITE
// 256 KiB (above the 100 KB threshold: sprayed with PIN on) — QPs interleaved at random (seeded),
// each QP's packets in PSN order; beside BM_ParseReference, pkt::Parse() of the same frames.
// BM_ChooseRewrite adds the UDP source port rewrite (headers + ICRC delta). BM_ChooseFeedback
// adds an ACK on the reverse path after every 4th packet of a WRITE (REPS and adaptive use it).
// BM_IcrcFull/BM_IcrcIncremental: one ICRC over a frame with a 1 KiB / 4 KiB payload, against the
// delta for a changed source port (IcrcDelta16, applied to the stored ICRC).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dataplane/lb/icrc_update.h"
#include "dataplane/lb/pin.h"
#include "dataplane/lb/rewrite.h"
#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::lb {
namespace {

constexpr uint32_t kMtu = 1024;
constexpr int kQps = 4096;
// Frames keep their first kHeadroom bytes (a chained mbuf's first segment), one after another in
// one buffer as in a mempool: the trace stays ~15 MiB instead of 100+ MiB of payload evicting the
// flow table each pass.
constexpr size_t kHeadroom = 128;

struct Trace {
  std::vector<uint8_t> buf;  // frame i at i * kHeadroom
  size_t n = 0;
  const uint8_t* frame(size_t i) const { return &buf[i * kHeadroom]; }
  std::vector<uint32_t> frame_len;
  std::vector<pkt::PacketDesc> descs;
  // For BM_ChooseFeedback: after packet i, an ACK (reverse frame) for its PSN, or empty.
  std::vector<std::vector<uint8_t>> acks;
  std::vector<pkt::PacketDesc> ack_descs;
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
      m.f.dst_ip4 = {10, 1, static_cast<uint8_t>(q / 64 % 256), static_cast<uint8_t>(q % 64)};
      const uint32_t qpn = rng() & 0xffffff;
      const uint32_t psn0 = rng() & 0xffffff;
      const int pick = static_cast<int>(rng() % 100);
      auto add = [&](uint8_t op, uint32_t i, uint32_t payload, uint32_t dma) {
        pkt::RoceSpec r;
        r.opcode = op;
        r.dest_qp = qpn;
        r.psn = (psn0 + i) & 0xffffff;
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
        write(256);
      }
    }
    std::vector<int> pending(kQps);
    for (int q = 0; q < kQps; ++q) pending[q] = q;
    while (!pending.empty()) {
      const size_t k = rng() % pending.size();
      Msg& m = msgs[pending[k]];
      const pkt::RoceSpec& r = m.packets[m.next];
      std::vector<uint8_t> full = pkt::BuildRoce(m.f, r);
      pkt::PacketDesc d;
      pkt::Parse(full.data(), full.size(), &d);
      t->descs.push_back(d);
      t->frame_len.push_back(static_cast<uint32_t>(full.size()));
      full.resize(kHeadroom);
      t->buf.insert(t->buf.end(), full.begin(), full.end());
      ++t->n;
      std::vector<uint8_t> ack;
      pkt::PacketDesc ad{};
      if (d.roce_class == pkt::RoceClass::kWrite && m.next % 4 == 3) {
        pkt::FrameSpec rf = m.f;
        std::swap(rf.src_ip4, rf.dst_ip4);
        pkt::RoceSpec a;
        a.opcode = pkt::op::kAcknowledge;
        a.dest_qp = 0x1234;
        a.psn = r.psn;
        ack = pkt::BuildRoce(rf, a);
        pkt::Parse(ack.data(), ack.size(), &ad);
      }
      t->acks.push_back(std::move(ack));
      t->ack_descs.push_back(ad);
      if (++m.next == m.packets.size()) {
        pending[k] = pending.back();
        pending.pop_back();
      }
    }
    return t;
  }();
  return *trace;
}

std::unique_ptr<const PathTable> MakeTable() {
  PathConfig c;
  c.default_paths.entropies = 16;
  return std::move(*PathTable::Build(*PathTableSpecFromConfig(c, EntropyField::kUdpSourcePort)));
}

void BM_ParseReference(benchmark::State& state) {
  const Trace& t = GetTrace();
  size_t i = 0;
  for (auto _ : state) {
    pkt::PacketDesc d;
    benchmark::DoNotOptimize(
        pkt::Parse(t.frame(i), std::min<size_t>(kHeadroom, t.frame_len[i]), t.frame_len[i], &d));
    benchmark::DoNotOptimize(d);
    if (++i == t.n) i = 0;
  }
}
BENCHMARK(BM_ParseReference);

enum Mode { kChoose, kChooseRewrite, kChooseFeedback, kFastRewrite };

template <Mode mode>
void BM_Lb(benchmark::State& state) {
  const Trace& t = GetTrace();
  auto table = MakeTable();
  const auto kind = static_cast<BalancerKind>(state.range(0));
  PinSelector sel({.balancer = kind, .pin = state.range(1) != 0, .flow_capacity = 1 << 16},
                  table.get());
  std::vector<uint8_t> buf = t.buf;  // rewritten in place
  size_t i = 0;
  uint64_t now = 0;
  IcrcDeltaCache icrc;
  PinSelector::BurstTally tally;
  for (auto _ : state) {
    now += 100;
    uint8_t* frame = &buf[i * kHeadroom];
    const size_t len = std::min<size_t>(kHeadroom, t.frame_len[i]);
    if constexpr (mode == kFastRewrite) {
      // As pin-select: the fast path, Choose() and Rewrite() where it declines; a burst is 32.
      PathChoice c;
      RewriteResult r = RewriteResult::kNotRoce;
      if (!sel.TryChooseRewriteFast(t.descs[i], frame, len, now, EntropyField::kUdpSourcePort, icrc,
                                    tally, &c, &r)) {
        c = sel.Choose(t.descs[i], frame, len, now);
        if (c.path != nullptr)
          r = Rewrite(frame, len, t.descs[i], *c.path, EntropyField::kUdpSourcePort, &icrc);
      }
      benchmark::DoNotOptimize(c);
      benchmark::DoNotOptimize(r);
      if ((i & 31) == 31) sel.Commit(tally);
      if (++i == t.n) i = 0;
      continue;
    }
    const PathChoice c = sel.Choose(t.descs[i], frame, len, now);
    benchmark::DoNotOptimize(c);
    if constexpr (mode == kChooseRewrite) {
      uint32_t delta;
      if (c.path != nullptr) {
        RewriteHeaders(frame, len, t.descs[i], *c.path, EntropyField::kUdpSourcePort, 0, &delta);
        benchmark::DoNotOptimize(delta);
      }
    }
    if constexpr (mode == kChooseFeedback) {
      if (!t.acks[i].empty()) {
        benchmark::DoNotOptimize(sel.OnReversePacket(t.ack_descs[i], t.acks[i].data(),
                                                     t.acks[i].size(), t.descs[i].dest_qp, now));
      }
    }
    if (++i == t.n) i = 0;
  }
  state.SetLabel(std::string(BalancerKindName(kind)) + (state.range(1) ? "+pin" : ""));
}

void BalancerArgs(benchmark::internal::Benchmark* b) {
  for (int k = 0; k < static_cast<int>(BalancerKind::kCount); ++k) {
    b->Args({k, 0});
    b->Args({k, 1});
  }
}
BENCHMARK(BM_Lb<kChoose>)->Name("BM_Choose")->Apply(BalancerArgs);
BENCHMARK(BM_Lb<kChooseRewrite>)->Name("BM_ChooseRewrite")->Args({4, 1})->Args({1, 1});
BENCHMARK(BM_Lb<kChooseFeedback>)->Name("BM_ChooseFeedback")->Args({4, 1})->Args({5, 1});
BENCHMARK(BM_Lb<kFastRewrite>)->Name("BM_FastRewrite")->Args({4, 1})->Args({1, 1});

struct IcrcFrame {
  std::vector<uint8_t> bytes;
  pkt::PacketDesc desc;
};
IcrcFrame MakeIcrcFrame(uint32_t payload) {
  pkt::RoceSpec r;
  r.opcode = pkt::op::kWriteMiddle;
  r.payload_len = payload;
  IcrcFrame f;
  f.bytes = pkt::BuildRoce(pkt::FrameSpec{}, r);
  pkt::Parse(f.bytes.data(), f.bytes.size(), &f.desc);
  return f;
}

void BM_IcrcFull(benchmark::State& state) {
  IcrcFrame f = MakeIcrcFrame(static_cast<uint32_t>(state.range(0)));
  for (auto _ : state) {
    f.bytes[f.desc.l4_off + 1] ^= 1;  // a new source port each time, as in a rewrite
    benchmark::DoNotOptimize(pkt::ComputeIcrc(f.bytes.data(), f.desc));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(f.bytes.size()));
}
BENCHMARK(BM_IcrcFull)->Arg(1024)->Arg(4096);

void BM_IcrcIncremental(benchmark::State& state) {
  IcrcFrame f = MakeIcrcFrame(static_cast<uint32_t>(state.range(0)));
  const uint32_t tail = f.desc.icrc_off - f.desc.l4_off - 2u;
  uint16_t port = 0xc000;
  uint32_t icrc = pkt::StoredIcrc(f.bytes.data(), f.desc);
  for (auto _ : state) {
    const auto next = static_cast<uint16_t>(port ^ 0x5a5);
    benchmark::DoNotOptimize(tail);
    icrc ^= IcrcDelta16(port, next, tail);
    port = next;
    benchmark::DoNotOptimize(icrc);
  }
}
BENCHMARK(BM_IcrcIncremental)->Arg(1024)->Arg(4096);

// The whole Rewrite() of a contiguous frame (port, ICRC update, checks).
void BM_RewriteSport(benchmark::State& state) {
  IcrcFrame f = MakeIcrcFrame(static_cast<uint32_t>(state.range(0)));
  Path a{.entropy = 0xc001}, b{.entropy = 0xc777};
  bool flip = false;
  for (auto _ : state) {
    flip = !flip;
    benchmark::DoNotOptimize(Rewrite(f.bytes.data(), f.bytes.size(), f.desc, flip ? a : b,
                                     EntropyField::kUdpSourcePort));
  }
  if (!pkt::VerifyIcrc(f.bytes.data(), f.desc)) state.SkipWithError("ICRC wrong after rewrites");
}
BENCHMARK(BM_RewriteSport)->Arg(1024)->Arg(4096);

// Prints the console table, then the ratios the brief asks for from the same run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && r.iterations > 0) {
        // CPU time: on a shared machine it is the steadier of the two (ns, the default unit).
        ns_[r.benchmark_name()] = r.GetAdjustedCPUTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    auto get = [&](const std::string& n) { return ns_.count(n) ? ns_[n] : 0.0; };
    for (const char* len : {"1024", "4096"}) {
      const double full = get(std::string("BM_IcrcFull/") + len);
      const double inc = get(std::string("BM_IcrcIncremental/") + len);
      const double rw = get(std::string("BM_RewriteSport/") + len);
      if (full > 0 && inc > 0) {
        std::printf(
            "ICRC, %s B payload: full recompute %.1f ns, incremental %.2f ns: %.0fx faster"
            " (whole Rewrite() %.1f ns: %.0fx)\n",
            len, full, inc, full / inc, rw, rw > 0 ? full / rw : 0.0);
      }
    }
    const double parse = get("BM_ParseReference");
    if (parse > 0) {
      for (int k = 0; k < static_cast<int>(BalancerKind::kCount); ++k) {
        for (int pin = 0; pin <= 1; ++pin) {
          const double ns = get("BM_Choose/" + std::to_string(k) + "/" + std::to_string(pin));
          if (ns > 0) {
            std::printf("Choose %-12s %-4s %6.1f ns/packet = %.2f x Parse\n",
                        BalancerKindName(static_cast<BalancerKind>(k)), pin ? "+pin" : "", ns,
                        ns / parse);
          }
        }
      }
    }
  }

 private:
  std::map<std::string, double> ns_;
};

}  // namespace
}  // namespace heddle::lb

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  heddle::lb::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
