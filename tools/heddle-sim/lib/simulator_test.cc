// Validation of the simulator against closed forms and invariants (docs/sim.md §4).
#include "tools/heddle-sim/lib/simulator.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "control/nuwa/dsl.h"
#include "dataplane/fwd/hash_model.h"
#include "gtest/gtest.h"
#include "tools/heddle-sim/lib/report.h"
#include "tools/heddle-sim/lib/rng.h"

namespace heddle::sim {
namespace {

// 4 leaves of 4 hosts, 4 spines, 100 Gb/s.
constexpr char kLeafSpine[] = R"(fabric:
  name: ls16
  kind: clos2
  hosts_per_leaf: 4
  leaves: 4
  spines: 4
  link_gbps: 100
addressing:
  ipv4: 10.1.0.0/16
hash:
  function: crc32
  seed: 7
)";

nuwa::Fabric Parse(const char* yaml) {
  absl::StatusOr<nuwa::Fabric> f = nuwa::ParseFabricYaml(yaml, "test.yaml");
  EXPECT_TRUE(f.ok()) << f.status();
  return *f;
}

std::unique_ptr<Simulator> Make(const nuwa::Fabric& f, const SimConfig& c) {
  absl::StatusOr<std::unique_ptr<Simulator>> s = Simulator::Create(f, c);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/heddle_sim_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

SimResult RunLoaded(const nuwa::Fabric& f, SimConfig c, const std::string& workload, double load) {
  std::unique_ptr<Simulator> s = Make(f, c);
  EXPECT_NE(s, nullptr);
  absl::StatusOr<Cdf> cdf = LoadNamedCdf(workload);
  EXPECT_TRUE(cdf.ok()) << cdf.status();
  EXPECT_TRUE(s->SetPoissonWorkload(*cdf, load).ok());
  return s->Run();
}

// The switches' hash as the simulator evaluates it, (H(seed, 0) ^ H(0, key) ^ H(0, 0)), is the
// hash model's: every CRC of fwd::hash_model is affine in the key.
TEST(SimulatorTest, AffineSwitchHashMatchesTheHashModel) {
  Rng rng(5);
  for (auto fn :
       {fwd::HashFunction::kCrc32, fwd::HashFunction::kCrc32c, fwd::HashFunction::kCrc16}) {
    const std::array<uint8_t, fwd::kFlowKey4Bytes> zero{};
    for (int i = 0; i < 1000; ++i) {
      const auto seed = static_cast<uint32_t>(rng.Next());
      const auto src = static_cast<uint32_t>(rng.Next()), dst = static_cast<uint32_t>(rng.Next());
      const auto sport = static_cast<uint16_t>(rng.Next());
      const auto key = fwd::FlowKey4(src, dst, 17, sport, 4791);
      const auto key0 = fwd::FlowKey4(src, dst, 17, 0, 4791);
      const uint32_t h = fwd::SwitchHash(fn, seed, zero) ^ fwd::SwitchHash(fn, 0, key0) ^
                         fwd::SwitchHash(fn, 0, zero) ^ fwd::SportContribution(fn, sport);
      ASSERT_EQ(h, fwd::SwitchHash(fn, seed, key)) << static_cast<int>(fn);
    }
  }
}

// A lone flow's FCT is size/rate + RTT in the model's accounting, to the picosecond, for one
// packet and many, within a leaf and across the spines, with either transport and any balancer.
TEST(SimulatorTest, LoneFlowFctIsExactlyTheIdeal) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  // By hand, 100 000 B from leaf 0 to leaf 1 (4 links of 100 Gb/s, 1 µs each): 24 packets of
  // 4096 + 64 B (t = 332.8 ns) and one of 1696 + 64 B (t' = 140.8 ns) leave back to back; the
  // last one waits behind its predecessor at every hop (3 t more), crosses 4 latencies, and its
  // 64-byte ACK (5.12 ns per link) comes back over 4 links: 27 t + t' + 8 µs + 4 · 5.12 ns.
  constexpr TimePs kByHand = 27 * 332'800 + 140'800 + 8'000'000 + 4 * 5'120;
  for (Transport tr : {Transport::kGoBackN, Transport::kSelectiveRepeat}) {
    for (lb::BalancerKind k : {lb::BalancerKind::kEcmp, lb::BalancerKind::kRps}) {
      SimConfig c;
      c.transport = tr;
      c.lb.balancer = k;
      c.lb.pin = k == lb::BalancerKind::kRps;
      c.storm = true;
      std::unique_ptr<Simulator> s = Make(f, c);
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->IdealFct(0, 4, 100'000), kByHand);
      // One packet within a leaf: 2 links there, 2 back.
      EXPECT_EQ(s->IdealFct(0, 1, 1000), 2 * 85'120 + 2 * 1'000'000 + 2 * 5'120 + 2 * 1'000'000);
      const std::vector<std::tuple<uint32_t, uint32_t, uint64_t>> flows = {
          {0, 1, 1}, {0, 1, 1000}, {0, 4, 4096}, {0, 4, 4097}, {0, 4, 100'000}, {5, 15, 1'000'000}};
      uint64_t t = 0;
      for (const auto& [src, dst, size] : flows) {
        ASSERT_TRUE(s->AddFlow(src, dst, size, t).ok());
        t += 1'000'000;  // 1 ms apart: each flow alone
      }
      const SimResult r = s->Run();
      ASSERT_EQ(r.flows.size(), flows.size());
      for (const FlowRecord& fr : r.flows) {
        ASSERT_NE(fr.finish, 0u);
        EXPECT_EQ(fr.finish - fr.start, fr.ideal)
            << fr.size << " B " << fr.src << "->" << fr.dst << " " << TransportName(tr) << " "
            << lb::BalancerKindName(k);
      }
      EXPECT_EQ(r.drops_buffer + r.retransmissions + r.out_of_order, 0u);
    }
  }
}

// A lone READ's FCT is its request one way, then size/rate and the responses' way back: the
// request is a header like an ACK, so it is the WRITE's closed form to the picosecond. A lone
// SEND's is the WRITE's too. With and without STORM, ECMP and RPS + PIN.
TEST(SimulatorTest, LoneReadAndSendFctIsExactlyTheIdeal) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  // 100 000 B read by host 0 from host 4 across the spines: the 64-byte request over 4 links
  // (5.12 ns and 1 µs each), then 24 responses of 4096 + 64 B (t = 332.8 ns) and one of
  // 1696 + 64 B (t' = 140.8 ns) back to back over 4 links: 27 t + t' + 4 µs.
  constexpr TimePs kByHand = 4 * (5'120 + 1'000'000) + 27 * 332'800 + 140'800 + 4'000'000;
  for (bool storm : {false, true}) {
    for (lb::BalancerKind k : {lb::BalancerKind::kEcmp, lb::BalancerKind::kRps}) {
      SimConfig c;
      c.lb.balancer = k;
      c.lb.pin = k == lb::BalancerKind::kRps;
      c.storm = storm;
      std::unique_ptr<Simulator> s = Make(f, c);
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->IdealFct(0, 4, 100'000), kByHand);
      const std::vector<std::tuple<uint32_t, uint32_t, uint64_t>> sizes = {
          {0, 1, 1}, {0, 1, 1000}, {0, 4, 4096}, {0, 4, 4097}, {0, 4, 100'000}, {5, 15, 1'000'000}};
      uint64_t t = 0, reads = 0;
      for (Op op : {Op::kRead, Op::kSend}) {
        for (const auto& [src, dst, size] : sizes) {
          ASSERT_TRUE(s->AddFlow(src, dst, size, t, op).ok());
          t += 1'000'000;  // 1 ms apart: each flow alone
          reads += op == Op::kRead;
        }
      }
      const SimResult r = s->Run();
      ASSERT_EQ(r.flows.size(), 2 * sizes.size());
      for (const FlowRecord& fr : r.flows) {
        ASSERT_NE(fr.finish, 0u);
        EXPECT_EQ(fr.finish - fr.start, fr.ideal)
            << OpName(fr.op) << " " << fr.size << " B " << fr.src << "->" << fr.dst << " storm "
            << storm << " " << lb::BalancerKindName(k);
        if (fr.op == Op::kRead) EXPECT_EQ(fr.delivered, fr.finish);  // the last response
      }
      EXPECT_EQ(r.read_requests, reads);
      EXPECT_EQ(r.drops_buffer + r.retransmissions + r.out_of_order + r.read_reissues, 0u);
    }
  }
}

// READs, SENDs and WRITEs on go-back-N with losses: every packet sent is delivered or counted
// dropped, every flow finishes, and every byte arrives once — READ responses included, whose
// losses the requester repairs by re-issuing the READ.
TEST(SimulatorTest, ConservationWithReads) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  SimConfig c;
  c.duration_ns = 400'000;
  c.buffer_bytes = 8 * 4160;  // small: drops
  c.lb.balancer = lb::BalancerKind::kRps;
  c.rto_ns = 40'000;
  c.ops = {.write = 0.4, .send = 0.2, .read = 0.4};
  for (bool storm : {false, true}) {
    c.storm = storm;
    const SimResult r = RunLoaded(f, c, "websearch", 0.8);
    uint64_t bytes = 0, finished = 0, reads = 0, sends = 0;
    for (const FlowRecord& fr : r.flows) {
      bytes += fr.size;
      finished += fr.finish != 0;
      reads += fr.op == Op::kRead;
      sends += fr.op == Op::kSend;
    }
    EXPECT_GT(reads, 10u);
    EXPECT_GT(sends, 4u);
    EXPECT_GT(r.drops_buffer, 0u);
    EXPECT_EQ(finished, r.flows.size());
    EXPECT_EQ(r.data_packets_sent, r.data_packets_delivered + r.drops_data);
    EXPECT_EQ(r.control_packets_sent,
              r.control_packets_delivered + r.drops_buffer + r.drops_unreachable - r.drops_data);
    EXPECT_EQ(r.unique_bytes_delivered, bytes);
    EXPECT_GE(r.read_requests, reads);
    EXPECT_GT(r.read_reissues + r.timeouts, 0u);
  }
}

// A mix of operations is as deterministic as WRITEs alone: one seed, the same bytes.
TEST(SimulatorTest, MixedOpsSameSeedSameOutputBytes) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  SimConfig c;
  c.duration_ns = 300'000;
  c.storm = true;
  c.pfc = true;
  c.ops = {.write = 0.5, .send = 0.2, .read = 0.3};
  std::vector<std::string> texts;
  for (uint64_t seed : {9u, 9u, 10u}) {
    c.seed = seed;
    const SimResult r = RunLoaded(f, c, "websearch", 0.6);
    TempDir dir;
    ASSERT_TRUE(WriteCsv(r, dir.path()).ok());
    texts.push_back(ReadFile(dir.path() + "/fct.csv") + ReadFile(dir.path() + "/summary.csv") +
                    ReadFile(dir.path() + "/levels.csv"));
    EXPECT_NE(texts.back().find(",read\n"), std::string::npos);
    EXPECT_NE(texts.back().find("send-short"), std::string::npos);
  }
  EXPECT_EQ(texts[0], texts[1]);
  EXPECT_NE(texts[0], texts[2]);
}

// Go-back-N on a lossless fabric (PFC, ECMP: one path per QP), so every out-of-order arrival is
// reordering by priority. One QP from host 0 to host 5 carries a 2 MB WRITE, then a READ of
// 256 KB, then a 4 KiB WRITE; other hosts keep deep queues at both ends' ToR ports. Strict
// priority lets the READ request (control level) and the short WRITE (top level) overtake the
// long WRITE's tail, and host 5's ACK of the short WRITE overtake its READ responses — unless
// STORM's per-message guards hold them at the level of what is still in the fabric. With them,
// nothing is reordered or resent; without them the responder NAKs and the requester re-issues.
TEST(SimulatorTest, StormGuardsKeepGoBackNInOrder) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  auto run = [&](bool storm, bool guard) {
    SimConfig c;
    c.pfc = true;
    c.storm = storm;
    c.storm_fabric_guard = guard;
    c.lb.balancer = lb::BalancerKind::kEcmp;
    c.lb.pin = false;
    c.window_packets = 200;  // deep standing queues
    c.rto_ns = 10'000'000;   // no timeout in this run: every resend is a NAK's
    std::unique_ptr<Simulator> s = Make(f, c);
    EXPECT_NE(s, nullptr);
    EXPECT_TRUE(s->AddFlow(0, 5, 2'000'000, 0).ok());
    EXPECT_TRUE(s->AddFlow(0, 5, 256'000, 0, Op::kRead).ok());
    EXPECT_TRUE(s->AddFlow(0, 5, 4096, 0).ok());
    EXPECT_TRUE(s->AddFlow(1, 5, 10'000'000, 0).ok());  // towards host 5
    EXPECT_TRUE(s->AddFlow(6, 0, 10'000'000, 0).ok());  // towards host 0
    SimResult r = s->Run();
    for (const FlowRecord& fr : r.flows) EXPECT_NE(fr.finish, 0u);
    EXPECT_EQ(r.drops_buffer + r.timeouts, 0u);
    return r;
  };
  const SimResult fifo = run(false, false);
  const SimResult unguarded = run(true, false);
  const SimResult guarded = run(true, true);
  auto reordered = [](const SimResult& r) {
    return r.out_of_order + r.naks + r.read_reissues + r.retransmissions;
  };
  EXPECT_GT(reordered(unguarded), 0u);
  EXPECT_GT(unguarded.retransmissions, 0u);
  EXPECT_GT(guarded.fabric_guarded, 0u);
  EXPECT_GT(guarded.response_guarded, 0u);
  EXPECT_EQ(reordered(guarded), 0u);
  EXPECT_LE(reordered(guarded), reordered(fifo));
  EXPECT_EQ(guarded.unique_bytes_delivered, unguarded.unique_bytes_delivered);
}

// Single-packet messages from 15 hosts to one, Poisson, sizes exponential: the receiver's ToR
// port is an M/G/1 queue, whose mean wait is λ·E[S²] / (2 (1 − ρ)) (Pollaczek–Khinchine).
TEST(SimulatorTest, SingleLinkWaitMatchesMG1) {
  const nuwa::Fabric f = Parse(R"(fabric:
  name: star
  kind: clos2
  hosts_per_leaf: 16
  leaves: 2
  spines: 1
  link_gbps: 100
addressing:
  ipv4: 10.2.0.0/16
hash:
  function: crc32
)");
  SimConfig c;
  c.buffer_bytes = uint64_t{1} << 30;  // no drops
  c.ecn = false;
  constexpr double kRho = 0.5;
  constexpr double kMeanPayload = 1000;
  constexpr int kSenders = 15;
  constexpr uint64_t kDurationNs = 40'000'000;
  c.duration_ns = kDurationNs;
  std::unique_ptr<Simulator> s = Make(f, c);
  ASSERT_NE(s, nullptr);
  const double ps_per_byte = 80;  // 100 Gb/s
  const double mean_service_ps = (kMeanPayload + c.header_bytes) * ps_per_byte;
  const double lambda_per_ps = kRho / mean_service_ps;
  Rng rng(42);
  double s1 = 0, s2 = 0;
  uint64_t n = 0;
  for (int h = 0; h < kSenders; ++h) {
    double t = 0;
    for (;;) {
      t += rng.Exponential(kSenders / lambda_per_ps);
      if (t >= kDurationNs * 1000.0) break;
      const auto size =
          static_cast<uint64_t>(std::max(1.0, std::round(rng.Exponential(kMeanPayload))));
      const uint64_t payload = std::min<uint64_t>(size, c.mtu);
      ASSERT_TRUE(s->AddFlow(h, 15, payload, static_cast<uint64_t>(t / 1000)).ok());
      const double service = static_cast<double>(payload + c.header_bytes) * ps_per_byte;
      s1 += service;
      s2 += service * service;
      ++n;
    }
  }
  const SimResult r = s->Run();
  const double lambda = static_cast<double>(n) / (kDurationNs * 1000.0);
  const double rho = lambda * s1 / n;
  const double wq_ns = lambda * (s2 / n) / (2 * (1 - rho)) / 1000;
  // The leaf's down port 15 (to host 15) is the queue.
  double measured = -1;
  uint64_t packets = 0;
  for (const SimResult::PortWait& w : r.port_waits) {
    if (w.tier == 1 && w.index == 0 && w.port == 15) {
      measured = w.mean_wait_ns;
      packets = w.packets;
    }
  }
  EXPECT_GT(packets, 100'000u);
  EXPECT_NEAR(rho, kRho, 0.02);
  EXPECT_NEAR(measured, wq_ns, 0.08 * wq_ns) << "rho " << rho << " packets " << packets;
}

// ECMP over many QPs splits a leaf's traffic evenly over its uplinks (the artifact's entropies
// and the switches' hash), and packet spraying splits it almost exactly.
TEST(SimulatorTest, EcmpSplitsManyFlowsEvenly) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  for (lb::BalancerKind k : {lb::BalancerKind::kEcmp, lb::BalancerKind::kRps}) {
    SimConfig c;
    c.qps_per_pair = 64;
    c.lb.balancer = k;
    c.lb.pin = false;
    std::unique_ptr<Simulator> s = Make(f, c);
    ASSERT_NE(s, nullptr);
    uint64_t t = 0;
    for (int round = 0; round < 2; ++round) {
      for (uint32_t q = 0; q < 64; ++q) {
        for (uint32_t src = 0; src < 4; ++src) {
          for (uint32_t dst = 4; dst < 8; ++dst) {
            ASSERT_TRUE(s->AddFlow(src, dst, 16'384, t).ok());
            t += 200;
          }
        }
      }
    }
    const SimResult r = s->Run();
    ASSERT_FALSE(r.uplinks.empty());
    // Leaf 0's four uplinks come first.
    std::vector<uint64_t> leaf0(r.uplinks[0].bytes.begin(), r.uplinks[0].bytes.begin() + 4);
    uint64_t total = 0;
    for (uint64_t v : leaf0) total += v;
    for (uint64_t v : leaf0) {
      EXPECT_NEAR(static_cast<double>(v), total / 4.0, total / 4.0 * 0.15)
          << lb::BalancerKindName(k);
    }
    EXPECT_GT(JainIndex(leaf0), k == lb::BalancerKind::kEcmp ? 0.98 : 0.9999)
        << lb::BalancerKindName(k);
  }
}

// The same seed gives the same bytes; another seed another run.
TEST(SimulatorTest, SameSeedSameOutputBytes) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  SimConfig c;
  c.duration_ns = 300'000;
  c.lb.balancer = lb::BalancerKind::kReps;
  c.lb.pin = true;
  c.storm = true;
  c.dcqcn = true;
  c.buffer_bytes = 30 * 4160;
  std::vector<std::string> texts;
  for (uint64_t seed : {9u, 9u, 10u}) {
    c.seed = seed;
    const SimResult r = RunLoaded(f, c, "websearch", 0.6);
    TempDir dir;
    ASSERT_TRUE(WriteCsv(r, dir.path()).ok());
    texts.push_back(ReadFile(dir.path() + "/fct.csv") + ReadFile(dir.path() + "/summary.csv") +
                    ReadFile(dir.path() + "/uplinks.csv") + ReadFile(dir.path() + "/queues.csv") +
                    ReadFile(dir.path() + "/levels.csv"));
    EXPECT_GT(r.flows.size(), 20u);
  }
  EXPECT_EQ(texts[0], texts[1]);
  EXPECT_NE(texts[0], texts[2]);
}

// Every packet sent is delivered or counted dropped; every flow finishes; every byte of every
// flow is delivered exactly once — with losses, under both transports.
TEST(SimulatorTest, ConservationUnderLoss) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  for (Transport tr : {Transport::kGoBackN, Transport::kSelectiveRepeat}) {
    SimConfig c;
    c.transport = tr;
    c.duration_ns = 400'000;
    c.buffer_bytes = 8 * 4160;  // small: drops
    c.lb.balancer = lb::BalancerKind::kRps;
    c.rto_ns = 40'000;
    const SimResult r = RunLoaded(f, c, "websearch", 0.8);
    uint64_t bytes = 0, finished = 0;
    for (const FlowRecord& fr : r.flows) {
      bytes += fr.size;
      finished += fr.finish != 0;
    }
    EXPECT_GT(r.drops_buffer, 0u) << TransportName(tr);
    EXPECT_EQ(finished, r.flows.size()) << TransportName(tr);
    EXPECT_EQ(r.data_packets_sent, r.data_packets_delivered + r.drops_data);
    EXPECT_EQ(r.control_packets_sent,
              r.control_packets_delivered + r.drops_buffer + r.drops_unreachable - r.drops_data);
    EXPECT_EQ(r.unique_bytes_delivered, bytes) << TransportName(tr);
    EXPECT_GT(r.retransmissions, 0u);
  }
}

// Trimming turns the data drops of a small buffer into headers that reach the receiver and are
// NAKed at once: no data packet is lost, every byte arrives once, the loss is repaired without
// waiting for the RTO, and the drops that remain are control packets only. Both transports.
TEST(SimulatorTest, TrimmingRepairsLossesWithoutTimeouts) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  for (Transport tr : {Transport::kGoBackN, Transport::kSelectiveRepeat}) {
    SimConfig c;
    c.transport = tr;
    c.duration_ns = 400'000;
    c.buffer_bytes = 8 * 4160;
    // Spraying makes go-back-N resend whatever arrives out of order: ECMP for it.
    c.lb.balancer = tr == Transport::kGoBackN ? lb::BalancerKind::kEcmp : lb::BalancerKind::kRps;
    c.rto_ns = 1'000'000;  // long: a repair that waited for it would show in the slowdowns
    const SimResult dropped = RunLoaded(f, c, "websearch", 0.8);
    c.trim = true;
    const SimResult r = RunLoaded(f, c, "websearch", 0.8);
    uint64_t bytes = 0, finished = 0;
    for (const FlowRecord& fr : r.flows) {
      bytes += fr.size;
      finished += fr.finish != 0;
    }
    EXPECT_GT(r.trims, 0u) << TransportName(tr);
    EXPECT_EQ(r.drops_data, 0u) << TransportName(tr);
    EXPECT_EQ(r.trimmed_delivered, r.trims) << TransportName(tr);
    EXPECT_EQ(r.data_packets_sent, r.data_packets_delivered + r.trimmed_delivered);
    EXPECT_EQ(r.control_packets_sent, r.control_packets_delivered + r.drops_buffer);
    EXPECT_GE(r.naks, 1u) << TransportName(tr);
    EXPECT_EQ(finished, r.flows.size()) << TransportName(tr);
    EXPECT_EQ(r.unique_bytes_delivered, bytes) << TransportName(tr);
    EXPECT_GT(dropped.drops_data, 0u) << TransportName(tr);
    EXPECT_LT(r.timeouts * 10, dropped.timeouts + 10) << TransportName(tr);
    const auto mean = [](const SimResult& x) {
      double s = 0;
      for (const FlowRecord& fr : x.flows) {
        s += static_cast<double>(fr.finish - fr.start) / static_cast<double>(fr.ideal);
      }
      return s / static_cast<double>(x.flows.size());
    };
    // Selective repeat finds a tail drop only a window later (or at the RTO); a trimmed header
    // is NAKed at once, so the mean slowdown drops. Go-back-N finds a tail drop at the next
    // packet's gap as quickly as a trimmed header, and each NAK resends the whole window
    // behind it either way: which of the two ends with the lower mean depends on how the
    // flows collide, so only the repairs without timeouts are claimed for it.
    if (tr == Transport::kSelectiveRepeat) {
      EXPECT_LT(mean(r), mean(dropped)) << TransportName(tr);
    }
  }
}

// With PFC nothing is dropped, however loaded: the upstream is paused before the headroom
// above xoff fills.
TEST(SimulatorTest, PfcIsLossless) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  SimConfig c;
  c.pfc = true;
  c.buffer_bytes = 40 * 4160;
  c.pfc_xoff_bytes = 16 * 4160;
  c.pfc_xon_bytes = 12 * 4160;
  c.duration_ns = 300'000;
  const SimResult r = RunLoaded(f, c, "websearch", 0.9);
  EXPECT_GT(r.pfc_pauses, 0u);
  EXPECT_EQ(r.drops_buffer, 0u);
  uint64_t finished = 0;
  for (const FlowRecord& fr : r.flows) finished += fr.finish != 0;
  EXPECT_EQ(finished, r.flows.size());
  c.pfc = false;
  EXPECT_GT(RunLoaded(f, c, "websearch", 0.9).drops_buffer, 0u);
}

// Congestion control that listens to ECN drops less than a fixed window at the same load, and
// still delivers everything.
TEST(SimulatorTest, CongestionControlCutsDrops) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  SimConfig c;
  c.duration_ns = 400'000;
  c.buffer_bytes = 30 * 4160;
  c.ecn_kmin_bytes = 5 * 4160;
  c.ecn_kmax_bytes = 20 * 4160;
  c.transport = Transport::kSelectiveRepeat;
  c.rto_ns = 40'000;
  const SimResult none = RunLoaded(f, c, "websearch", 0.8);
  for (int cc = 0; cc < 2; ++cc) {
    SimConfig d = c;
    d.dcqcn = cc == 0;
    d.ecn_window = cc == 1;
    const SimResult r = RunLoaded(f, d, "websearch", 0.8);
    EXPECT_LT(r.drops_buffer * 2, none.drops_buffer) << cc;
    if (cc == 0) {
      EXPECT_GT(r.cnps, 0u);
    }
    uint64_t finished = 0;
    for (const FlowRecord& fr : r.flows) finished += fr.finish != 0;
    EXPECT_EQ(finished, r.flows.size());
  }
  EXPECT_GT(none.drops_buffer, 0u);
}

// Spraying over a path 5 µs longer than the others reorders packets: go-back-N NAKs and
// resends, selective repeat takes them as they come and resends nothing.
TEST(SimulatorTest, GoBackNResendsUnderReorderingSelectiveRepeatDoesNot) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  TimePs fct[2] = {0, 0};
  for (Transport tr : {Transport::kGoBackN, Transport::kSelectiveRepeat}) {
    SimConfig c;
    c.transport = tr;
    c.lb.balancer = lb::BalancerKind::kRps;
    c.lb.pin = false;
    c.buffer_bytes = uint64_t{1} << 30;
    c.degraded.push_back({.lower = "leaf[0]", .up_port = 0, .extra_latency_ns = 5000});
    std::unique_ptr<Simulator> s = Make(f, c);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(s->AddFlow(0, 4, 2'000'000, 0).ok());
    const SimResult r = s->Run();
    ASSERT_NE(r.flows[0].finish, 0u);
    fct[tr == Transport::kSelectiveRepeat] = r.flows[0].finish - r.flows[0].start;
    EXPECT_GT(r.out_of_order, 0u) << TransportName(tr);
    EXPECT_EQ(r.drops_buffer, 0u);
    if (tr == Transport::kGoBackN) {
      EXPECT_GT(r.naks, 0u);
      EXPECT_GT(r.retransmissions, 0u);
    } else {
      EXPECT_EQ(r.retransmissions, 0u);
      EXPECT_EQ(r.naks, 0u);
    }
  }
  EXPECT_LT(fct[1], fct[0]);
}

// STORM at the NIC and the switches: a 4 KiB message sent behind a 10 MB one to the same
// receiver takes the top level and overtakes the big one's queue; without STORM it waits behind
// it.
TEST(SimulatorTest, StormLetsAShortMessageOvertake) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  TimePs fct[2] = {0, 0};
  TimePs ideal = 0;
  for (bool storm : {false, true}) {
    SimConfig c;
    c.storm = storm;
    c.buffer_bytes = uint64_t{1} << 30;
    c.window_packets = 200;  // a deep standing queue at the receiver's ToR
    std::unique_ptr<Simulator> s = Make(f, c);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(s->AddFlow(0, 5, 10'000'000, 0).ok());
    ASSERT_TRUE(s->AddFlow(1, 5, 10'000'000, 0).ok());
    ASSERT_TRUE(s->AddFlow(2, 5, 4096, 200'000).ok());
    ideal = s->IdealFct(2, 5, 4096);
    const SimResult r = s->Run();
    ASSERT_NE(r.flows[2].finish, 0u);
    fct[storm] = r.flows[2].finish - r.flows[2].start;
    if (storm) {
      EXPECT_GT(r.level_bytes[3], 0u);  // the short message: top level
      EXPECT_GT(r.level_bytes[0], 0u);  // the big ones, once they have more than 1 MiB left
    } else {
      EXPECT_EQ(r.level_bytes[0], r.data_bytes_sent);
    }
  }
  // Without STORM the short message waits behind ~200 packets of the big flows at the ToR.
  EXPECT_GT(fct[0], 4 * fct[1]);
  // With it, it waits at most for the packet on the wire at each hop.
  EXPECT_LT(fct[1], ideal * 3 / 2);
}

// Messages between the same hosts go out one after the other on their QP: a short one posted
// behind a long one waits for it. With a QP per message it goes at once, sharing the NIC.
TEST(SimulatorTest, QpPerMessageRemovesHeadOfLineBlocking) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  TimePs fct[2] = {0, 0};
  TimePs ideal = 0, big = 0;
  for (bool own : {false, true}) {
    SimConfig c;
    c.qp_per_message = own;
    std::unique_ptr<Simulator> s = Make(f, c);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(s->AddFlow(0, 5, 10'000'000, 0).ok());
    ASSERT_TRUE(s->AddFlow(0, 5, 4096, 100'000).ok());
    ideal = s->IdealFct(0, 5, 4096);
    const SimResult r = s->Run();
    ASSERT_NE(r.flows[1].finish, 0u);
    fct[own] = r.flows[1].finish - r.flows[1].start;
    if (!own) big = r.flows[0].finish;
  }
  // Behind the 10 MB message (800 us at 100 Gb/s): it finishes after it.
  EXPECT_GT(fct[0], big - 100'000'000);
  // On its own QP: the NIC alternates the two QPs' packets, so at most one more packet each hop.
  EXPECT_LT(fct[1], ideal * 2);
}

// PIN with RPS: a message under the threshold keeps one path, so a path 5 µs longer than the
// others does not reorder it; sprayed, it is reordered.
TEST(SimulatorTest, PinKeepsShortMessagesInOrder) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  for (bool pin : {false, true}) {
    SimConfig c;
    c.lb.balancer = lb::BalancerKind::kRps;
    c.lb.pin = pin;
    c.lb.threshold_bytes = 200'000;
    c.degraded.push_back({.lower = "leaf[0]", .up_port = 0, .extra_latency_ns = 5000});
    std::unique_ptr<Simulator> s = Make(f, c);
    ASSERT_NE(s, nullptr);
    for (uint32_t i = 0; i < 20; ++i) {
      ASSERT_TRUE(s->AddFlow(i % 4, 4 + i % 4, 150'000, i * 100'000).ok());
    }
    const SimResult r = s->Run();
    if (pin) {
      EXPECT_EQ(r.out_of_order, 0u);
      EXPECT_EQ(r.retransmissions, 0u);
    } else {
      EXPECT_GT(r.out_of_order, 0u);
    }
    for (const FlowRecord& fr : r.flows) EXPECT_NE(fr.finish, 0u);
  }
}

// A fabric with failed links and switches (deploy/examples/fabrics): the artifacts route around
// them, so nothing is sent into a failure and every flow finishes.
TEST(SimulatorTest, RoutesAroundTheFabricsFailures) {
  absl::StatusOr<nuwa::Fabric> f =
      nuwa::LoadFabricFile(std::string(HEDDLE_FABRICS_DIR) + "/fat-tree-k8-failures.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_FALSE(f->failures.links.empty());
  for (lb::BalancerKind k : {lb::BalancerKind::kEcmp, lb::BalancerKind::kRps}) {
    SimConfig c;
    c.duration_ns = 200'000;
    c.transport = Transport::kSelectiveRepeat;
    c.lb.balancer = k;
    c.buffer_bytes = uint64_t{1} << 30;
    const SimResult r = RunLoaded(*f, c, "alistorage", 0.3);
    EXPECT_GT(r.flows.size(), 100u);
    EXPECT_EQ(r.drops_unreachable, 0u) << lb::BalancerKindName(k);
    uint64_t finished = 0;
    for (const FlowRecord& fr : r.flows) finished += fr.finish != 0;
    EXPECT_EQ(finished, r.flows.size());
  }
}

// A ring all-reduce over four hosts on four leaves: 6 steps, each waiting for the last; the
// rings' flows share no link, so each step takes about one chunk's one-way delivery time (the
// ACKs a host sends share its NIC with its data: a few per cent).
TEST(SimulatorTest, RingAllReduceStepsFollowEachOther) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  SimConfig c;
  std::unique_ptr<Simulator> s = Make(f, c);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(
      s->AddCollective(Simulator::Collective::kRingAllReduce, {0, 4, 8, 12}, 400'000, 0, 1, 0)
          .ok());
  // One way: the ideal FCT less the last ACK's way back (4 links of 5.12 ns + 1 µs).
  const TimePs one_way = s->IdealFct(0, 4, 100'000) - 4 * (5'120 + 1'000'000);
  const SimResult r = s->Run();
  EXPECT_EQ(r.collective_flows, 4u * 6);
  EXPECT_EQ(r.collective_finished, r.collective_flows);
  EXPECT_GE(r.collective_done, 6 * one_way);
  EXPECT_LE(r.collective_done, 6 * one_way * 105 / 100);
  // Step s + 1 of host i starts when step s reached it.
  for (size_t k = 4; k < r.flows.size(); ++k) {
    const FlowRecord& fr = r.flows[k];
    const FlowRecord& before = r.flows[k - 4 + (k % 4 == 0 ? 3 : -1)];
    EXPECT_EQ(before.dst, fr.src);
    EXPECT_EQ(fr.start, before.delivered) << k;
  }
}

// All-to-all, two iterations with a compute gap: a host's second iteration starts exactly the gap
// after the last flow to it in the first was delivered.
TEST(SimulatorTest, AllToAllIterationsWaitForTheirInputs) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  SimConfig c;
  c.transport = Transport::kSelectiveRepeat;
  c.lb.balancer = lb::BalancerKind::kRps;
  std::unique_ptr<Simulator> s = Make(f, c);
  ASSERT_NE(s, nullptr);
  std::vector<uint32_t> hosts;
  for (uint32_t h = 0; h < 16; h += 2) hosts.push_back(h);
  constexpr uint64_t kGapNs = 10'000;
  ASSERT_TRUE(
      s->AddCollective(Simulator::Collective::kAllToAll, hosts, 700'000, 0, 2, kGapNs).ok());
  const SimResult r = s->Run();
  const size_t per_iteration = hosts.size() * (hosts.size() - 1);
  ASSERT_EQ(r.flows.size(), 2 * per_iteration);
  EXPECT_EQ(r.collective_finished, r.flows.size());
  for (uint32_t h : hosts) {
    TimePs inputs = 0;
    for (size_t k = 0; k < per_iteration; ++k) {
      if (r.flows[k].dst == h) inputs = std::max(inputs, r.flows[k].delivered);
    }
    for (size_t k = per_iteration; k < r.flows.size(); ++k) {
      if (r.flows[k].src == h) {
        EXPECT_EQ(r.flows[k].start, inputs + kGapNs * 1000) << h;
      }
    }
  }
  EXPECT_FALSE(s->AddCollective(Simulator::Collective::kAllToAll, {1, 1}, 10, 0, 1, 0).ok());
  EXPECT_FALSE(s->AddCollective(Simulator::Collective::kRingAllReduce, {1}, 10, 0, 1, 0).ok());
}

TEST(SimulatorTest, BadInputIsAnError) {
  const nuwa::Fabric f = Parse(kLeafSpine);
  SimConfig c;
  std::unique_ptr<Simulator> s = Make(f, c);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->AddFlow(0, 0, 10, 0).ok());
  EXPECT_FALSE(s->AddFlow(0, 99, 10, 0).ok());
  EXPECT_FALSE(s->AddFlow(0, 1, 0, 0).ok());
  EXPECT_FALSE(s->AddIncast(0, 16, 10, 0, 0).ok());
  SimConfig bad = c;
  bad.levels.levels = 9;
  EXPECT_FALSE(Simulator::Create(f, bad).ok());
  bad = c;
  bad.degraded.push_back({.lower = "leaf[9]"});
  EXPECT_FALSE(Simulator::Create(f, bad).ok());
  bad = c;
  bad.buffer_bytes = 1000;  // not one packet
  EXPECT_FALSE(Simulator::Create(f, bad).ok());
  bad = c;
  bad.pfc = true;
  bad.pfc_xoff_bytes = bad.buffer_bytes;  // no headroom
  EXPECT_FALSE(Simulator::Create(f, bad).ok());
  bad = c;
  bad.rto_ns = 0;
  EXPECT_FALSE(Simulator::Create(f, bad).ok());
  bad = c;
  bad.qps_per_pair = 0;
  EXPECT_FALSE(Simulator::Create(f, bad).ok());
  bad = c;
  bad.ops = {.write = 0, .send = 0, .read = 0};
  EXPECT_FALSE(Simulator::Create(f, bad).ok());
  bad.ops = {.write = 1, .send = -1, .read = 0};
  EXPECT_FALSE(Simulator::Create(f, bad).ok());
  // READs are modelled on go-back-N only.
  bad = c;
  bad.transport = Transport::kSelectiveRepeat;
  bad.ops = {.write = 1, .send = 0, .read = 1};
  EXPECT_FALSE(Simulator::Create(f, bad).ok());
  bad.ops = {};
  std::unique_ptr<Simulator> sr = Make(f, bad);
  ASSERT_NE(sr, nullptr);
  EXPECT_FALSE(sr->AddFlow(0, 1, 10, 0, Op::kRead).ok());
  EXPECT_TRUE(sr->AddFlow(0, 1, 10, 0, Op::kSend).ok());
}

}  // namespace
}  // namespace heddle::sim
