// The pin-select stage driven burst by burst (no ports): short messages keep one path and long
// ones spray over the set, each packet leaving on its path's uplink with its entropy rewritten
// and its ICRC still valid; reverse packets feed back through the host index (on this worker or,
// through the rings, on the one holding the flow); parameters change hitlessly through LbControl
// (RCU); what is not RoCE or not balanced is left to port-fwd, which keeps a chosen egress.
#include "dataplane/pipeline/pin_stage.h"

#include <rte_mbuf.h>

#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "dataplane/lb/lb_test_util.h"
#include "dataplane/pipeline/lb_control.h"
#include "dataplane/pipeline/stages.h"
#include "dataplane/pipeline/testing/eal_pool_env.h"
#include "dataplane/pipeline/testing/mbuf_frame.h"
#include "dataplane/pkt/builder.h"
#include "drivers/dpdk/eal.h"
#include "drivers/verbs/host_backlog.h"
#include "gtest/gtest.h"

namespace heddle::pipeline {
namespace {

using lb::testing::Ack;
using lb::testing::Hosts;
using lb::testing::Message;
using lb::testing::Packet;

class Env : public test_util::EalPoolEnv {
 public:
  Env() : EalPoolEnv("pin_stage_test", 4095) {}
};
::testing::Environment* const env = ::testing::AddGlobalTestEnvironment(new Env);

constexpr uint16_t kHost = 0, kUplinkA = 1, kUplinkB = 2;
constexpr uint32_t kQp = 10;         // the destination QPN the requests carry
constexpr uint32_t kLocalQp = 0x99;  // the requester's own QPN, what the responses carry

std::array<uint8_t, 16> V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

// Default set: 4 source ports from 0xC000 on both uplinks (8 paths); optionally a /24 only.
std::shared_ptr<const lb::PathTable> Table(bool with_default = true) {
  lb::PathConfig c;
  c.has_default = with_default;
  c.default_paths.ports = {kUplinkA, kUplinkB};
  c.default_paths.entropies = 4;
  if (!with_default) {
    lb::PrefixPathsConfig p;
    p.prefix = "10.1.0.0/24";
    p.ports = {kUplinkA};
    p.entropies = 2;
    c.prefixes.push_back(p);
  }
  auto spec = lb::PathTableSpecFromConfig(c, lb::EntropyField::kUdpSourcePort);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto t = lb::PathTable::Build(*spec);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::shared_ptr<const lb::PathTable>(std::move(*t));
}

struct Out {
  uint16_t egress;
  uint16_t sport;
  bool icrc_ok;
};

struct TestWorker {
  LcoreStats stats;
  WorkerContext ctx{&stats};
  Burst b;
  std::unique_ptr<PinSelectStage> stage;
};

class PinStageTest : public ::testing::Test {
 protected:
  void Make(lb::LbConfig config, int workers = 1, bool with_default = true) {
    w_.clear();
    control_ = std::make_unique<LbControl>(config, Table(with_default), workers);
    std::bitset<kMaxPorts> hosts;
    hosts.set(kHost);
    for (int w = 0; w < workers; ++w) {
      auto tw = std::make_unique<TestWorker>();
      tw->stage = std::make_unique<PinSelectStage>(
          PinSelectStage::Options{.host_ports = hosts,
                                  .control = control_.get(),
                                  .worker = w,
                                  .config = config,
                                  .clock = [this] { return now_ns_; },
                                  .housekeep_every = 1});
      w_.push_back(std::move(tw));
    }
  }

  // Runs `pkts` through worker `w`'s stage as one burst from `ingress`; returns what left.
  std::vector<Out> Run(const std::vector<Packet>& pkts, uint16_t ingress = kHost, int w = 0) {
    TestWorker& t = *w_[w];
    Burst& b = t.b;
    b.n = 0;
    b.ingress = ingress;
    for (const Packet& p : pkts) {
      rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
      EXPECT_NE(m, nullptr);
      test_util::AppendFrame(m, p.data(), p.size());
      b.desc[b.n] = p.desc;
      b.pkts[b.n] = m;
      b.egress[b.n] = kNoEgress;
      b.level[b.n] = 0;
      b.held[b.n] = nullptr;
      ++b.n;
    }
    now_ns_ += 1000;
    EXPECT_EQ(t.stage->Process(t.ctx, b), pkts.size());
    std::vector<Out> out;
    for (uint16_t i = 0; i < b.n; ++i) out.push_back(Leave(b.pkts[i], b.egress[i]));
    return out;
  }
  static Out Leave(rte_mbuf* m, uint16_t egress) {
    std::vector<uint8_t> bytes(m->pkt_len);
    const auto* data =
        static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, m->pkt_len, bytes.data()));
    if (data != bytes.data()) memcpy(bytes.data(), data, m->pkt_len);
    rte_pktmbuf_free(m);
    pkt::PacketDesc d;
    EXPECT_EQ(pkt::Parse(bytes.data(), bytes.size(), &d), pkt::ParseError::kOk);
    const bool roce = d.flags & pkt::kFlagRoce;
    return {egress, d.udp_sport, roce ? pkt::VerifyIcrc(bytes.data(), d) : true};
  }
  void PollAll() {
    for (auto& t : w_) t->stage->Poll(t->ctx);
  }
  // A control-side call that waits for a grace period, made while the workers keep polling.
  template <typename F>
  void WhilePolling(F f) {
    std::atomic<bool> done{false};
    std::thread t([&] {
      f();
      done = true;
    });
    while (!done) PollAll();
    t.join();
    PollAll();
  }
  void PublishIndex() {
    std::vector<verbs::HostBacklogIndex::Entry> entries = {{V4(10, 1, 0, 2), kQp, 0, 0, kLocalQp}};
    std::shared_ptr<const verbs::HostBacklogIndex> index = verbs::HostBacklogIndex::Build(entries);
    WhilePolling([&] { control_->PublishHostBacklog(index); });
  }
  uint64_t Stage(PinStageCounter c) { return control_->totals().stage_counter(c); }
  uint64_t Sel(lb::LbCounter c) { return control_->totals().selector_counter(c); }
  size_t sel_flows() const { return w_[0]->stage->selector().flows().size(); }

  // Splits `pkts` into bursts of `burst` packets; returns everything that left, in order.
  std::vector<Out> RunBursts(const std::vector<Packet>& pkts, size_t burst = 32) {
    std::vector<Out> all;
    for (size_t i = 0; i < pkts.size(); i += burst) {
      std::vector<Packet> part(pkts.begin() + i, pkts.begin() + std::min(pkts.size(), i + burst));
      for (const Out& o : Run(part)) all.push_back(o);
      PollAll();
    }
    return all;
  }

  uint64_t now_ns_ = 1'000'000;
  std::unique_ptr<LbControl> control_;
  std::vector<std::unique_ptr<TestWorker>> w_;
};

std::set<uint16_t> Sports(const std::vector<Out>& out) {
  std::set<uint16_t> s;
  for (const Out& o : out) s.insert(o.sport);
  return s;
}
std::set<uint16_t> Egresses(const std::vector<Out>& out) {
  std::set<uint16_t> s;
  for (const Out& o : out) s.insert(o.egress);
  return s;
}

TEST_F(PinStageTest, ShortMessagesKeepOnePathLongOnesSprayEveryIcrcValid) {
  Make({.balancer = lb::BalancerKind::kRps, .threshold_bytes = 16 * 1024});
  // 8 KiB WRITE: pinned, one source port from the set, one uplink.
  const std::vector<Out> short_w = Run(Message(Hosts(1, 2), true, kQp, 0, 8 * 1024));
  ASSERT_EQ(short_w.size(), 8u);
  EXPECT_EQ(Sports(short_w).size(), 1u);
  EXPECT_EQ(Egresses(short_w).size(), 1u);
  for (const Out& o : short_w) {
    EXPECT_TRUE(o.icrc_ok);
    EXPECT_GE(o.sport, 0xc000);
    EXPECT_LT(o.sport, 0xc004);
    EXPECT_TRUE(o.egress == kUplinkA || o.egress == kUplinkB);
  }
  // 256 KiB WRITE: sprayed over the 8 paths (4 ports x 2 uplinks), in bursts of 32.
  const std::vector<Out> long_w = RunBursts(Message(Hosts(1, 2), true, kQp, 8, 256 * 1024));
  ASSERT_EQ(long_w.size(), 256u);
  EXPECT_EQ(Sports(long_w), (std::set<uint16_t>{0xc000, 0xc001, 0xc002, 0xc003}));
  EXPECT_EQ(Egresses(long_w), (std::set<uint16_t>{kUplinkA, kUplinkB}));
  for (const Out& o : long_w) EXPECT_TRUE(o.icrc_ok);

  PollAll();
  EXPECT_EQ(Sel(lb::LbCounter::kPinnedFlows), 1u);
  EXPECT_EQ(Sel(lb::LbCounter::kSprayedFlows), 1u);
  EXPECT_EQ(Sel(lb::LbCounter::kPinnedPackets), 8u);
  EXPECT_EQ(Sel(lb::LbCounter::kSprayedPackets), 256u);
  EXPECT_EQ(Stage(PinStageCounter::kRewritten) + Stage(PinStageCounter::kUnchanged), 264u);
  EXPECT_GT(Stage(PinStageCounter::kPinnedBytes), 8u * 1024);
  EXPECT_GT(Stage(PinStageCounter::kSprayedBytes), 256u * 1024);
  const LbTotals t = control_->totals();
  uint64_t packets = 0;
  for (int p = 0; p < 8; ++p) {
    EXPECT_GT(t.path_packets[0][p], 0u) << "path " << p;
    packets += t.path_packets[0][p];
  }
  EXPECT_EQ(packets, 264u);
  EXPECT_EQ(Stage(PinStageCounter::kFlowsLive), 1u);
}

TEST_F(PinStageTest, WhatIsNotBalancedIsLeftToPortForward) {
  Make({.balancer = lb::BalancerKind::kRps}, 1, /*with_default=*/false);
  std::vector<Packet> pkts;
  pkts.push_back(Message(Hosts(1, 2), true, kQp, 0, 512)[0]);  // 10.1.0.2: in the /24
  pkt::FrameSpec other = Hosts(1, 2);
  other.dst_ip4 = {10, 9, 0, 2};  // no set
  pkts.push_back(Message(other, true, kQp, 0, 512)[0]);
  lb::testing::Packet udp;
  pkt::FrameSpec plain = Hosts(1, 2);
  plain.udp_dport = 9999;  // not RoCEv2
  udp.bytes = pkt::BuildUdp(plain, std::vector<uint8_t>(64, 1));
  ASSERT_EQ(pkt::Parse(udp.data(), udp.size(), &udp.desc), pkt::ParseError::kOk);
  pkts.push_back(udp);

  TestWorker& t = *w_[0];
  Burst& b = t.b;
  b.n = 0;
  b.ingress = kHost;
  for (const Packet& p : pkts) {
    rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
    test_util::AppendFrame(m, p.data(), p.size());
    b.desc[b.n] = p.desc;
    b.pkts[b.n] = m;
    b.egress[b.n] = kNoEgress;
    b.held[b.n] = nullptr;
    ++b.n;
  }
  ASSERT_EQ(t.stage->Process(t.ctx, b), 3);
  EXPECT_EQ(b.egress[0], kUplinkA);
  EXPECT_EQ(b.egress[1], kNoEgress);
  EXPECT_EQ(b.egress[2], kNoEgress);
  EXPECT_FALSE(b.all_routed);
  // port-fwd keeps the chosen egress and sends the rest to the host port's peer.
  std::array<uint16_t, kMaxPorts> peer;
  peer.fill(kNoEgress);
  peer[kHost] = kUplinkB;
  PortForwardStage fwd(peer);
  ASSERT_EQ(fwd.Process(t.ctx, b), 3);
  EXPECT_EQ(b.egress[0], kUplinkA);
  EXPECT_EQ(b.egress[1], kUplinkB);
  EXPECT_EQ(b.egress[2], kUplinkB);
  for (uint16_t i = 0; i < b.n; ++i) rte_pktmbuf_free(b.pkts[i]);
  PollAll();
  EXPECT_EQ(Stage(PinStageCounter::kUntouchedPackets), 2u);
  EXPECT_EQ(Sel(lb::LbCounter::kNoPathSet), 1u);
  EXPECT_EQ(Sel(lb::LbCounter::kNotRoce), 0u);  // not offered: the stage skips non-RoCE itself
}

// A burst pin-select routed whole is marked so, and port-fwd leaves it as it is.
TEST_F(PinStageTest, AWhollyRoutedBurstIsLeftAloneByPortForward) {
  Make({.balancer = lb::BalancerKind::kRps}, 1, /*with_default=*/false);  // the /24 on uplink A
  TestWorker& t = *w_[0];
  std::array<uint16_t, kMaxPorts> peer;
  peer.fill(kNoEgress);
  peer[kHost] = kUplinkB;
  PortForwardStage fwd(peer);
  // Two bursts through the same Burst: RoCE only (routed whole), then one with a UDP frame.
  lb::testing::Packet udp;
  pkt::FrameSpec plain = Hosts(1, 2);
  plain.udp_dport = 9999;  // not RoCEv2
  udp.bytes = pkt::BuildUdp(plain, std::vector<uint8_t>(64, 1));
  ASSERT_EQ(pkt::Parse(udp.data(), udp.size(), &udp.desc), pkt::ParseError::kOk);
  for (const bool with_udp : {false, true}) {
    std::vector<Packet> pkts = Message(Hosts(1, 2), true, kQp, 0, 4096);
    if (with_udp) pkts.insert(pkts.begin() + 1, udp);
    Burst& b = t.b;
    b.n = 0;
    b.ingress = kHost;
    for (const Packet& p : pkts) {
      rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
      test_util::AppendFrame(m, p.data(), p.size());
      b.desc[b.n] = p.desc;
      b.pkts[b.n] = m;
      b.egress[b.n] = kNoEgress;
      b.held[b.n] = nullptr;
      ++b.n;
    }
    ASSERT_EQ(t.stage->Process(t.ctx, b), pkts.size());
    EXPECT_EQ(b.all_routed, !with_udp);
    ASSERT_EQ(fwd.Process(t.ctx, b), pkts.size());
    for (uint16_t i = 0; i < b.n; ++i) {
      EXPECT_EQ(b.egress[i], with_udp && i == 1 ? kUplinkB : kUplinkA) << i;
      rte_pktmbuf_free(b.pkts[i]);
    }
  }
}

TEST_F(PinStageTest, ReverseDirectionIsNeitherRewrittenNorRouted) {
  Make({.balancer = lb::BalancerKind::kRps});
  const std::vector<Packet> reverse = Message(lb::testing::Reverse(Hosts(1, 2)), true, 5, 0, 4096);
  const std::vector<Out> out = Run(reverse, kUplinkA);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].egress, kNoEgress);
    EXPECT_EQ(out[i].sport, reverse[i].desc.udp_sport);
    EXPECT_TRUE(out[i].icrc_ok);
  }
  PollAll();
  EXPECT_EQ(Sel(lb::LbCounter::kPackets), 0u);
  EXPECT_EQ(Stage(PinStageCounter::kReversePackets), 4u);
}

// `set lb` while traffic flows: the pinned message in progress keeps its path; the parameters
// apply at the next poll of every worker, whole; the old ones are freed after the grace period.
TEST_F(PinStageTest, ParametersChangeHitlessly) {
  Make({.balancer = lb::BalancerKind::kRps, .threshold_bytes = 64 * 1024});
  const std::vector<Packet> send = Message(Hosts(1, 2), false, kQp, 0, 32 * 1024);  // pinned
  const std::vector<Packet> head(send.begin(), send.begin() + 16);
  const std::vector<Packet> tail(send.begin() + 16, send.end());
  const std::vector<Out> first = Run(head);
  EXPECT_EQ(Sports(first).size(), 1u);

  const uint64_t gen = control_->published_generation();
  WhilePolling([&] {
    ASSERT_TRUE(control_
                    ->Update({.balancer = lb::BalancerKind::kRoundRobin,
                              .threshold_bytes = 4096,
                              .pin_policy = lb::PinPolicy::kLeastLoaded})
                    .ok());
  });
  EXPECT_EQ(control_->published_generation(), gen + 1);
  EXPECT_EQ(Stage(PinStageCounter::kGeneration), gen + 1);
  EXPECT_EQ(w_[0]->stage->selector().balancer().kind(), lb::BalancerKind::kRoundRobin);
  EXPECT_EQ(w_[0]->stage->selector().threshold_bytes(), 4096u);

  const std::vector<Out> rest = Run(tail);
  EXPECT_EQ(Sports(rest), Sports(first));
  EXPECT_EQ(Egresses(rest), Egresses(first));
  // An 8 KiB WRITE is now long: round-robin over the 8 paths, each in turn.
  const std::vector<Out> w = Run(Message(Hosts(1, 2), true, kQp, 100, 8 * 1024));
  EXPECT_EQ(Sports(w).size(), 4u);
  EXPECT_EQ(Egresses(w).size(), 2u);

  // A bad change is refused whole, naming the key.
  const absl::Status bad = control_->Update({.threshold_bytes = uint64_t{1} << 40});
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("threshold"), std::string::npos);
  EXPECT_EQ(control_->published_generation(), gen + 1);
}

// ACKs from the uplink, paired through the host index, recycle the acknowledged paths (REPS).
TEST_F(PinStageTest, FeedbackJoinedThroughTheHostIndexFeedsReps) {
  Make({.balancer = lb::BalancerKind::kReps, .threshold_bytes = 4096});
  // Without the index: no join, REPS explores.
  RunBursts(Message(Hosts(1, 2), true, kQp, 0, 32 * 1024));
  Run({Ack(Hosts(1, 2), kLocalQp, 31)}, kUplinkA);
  PollAll();
  EXPECT_EQ(Stage(PinStageCounter::kJoinNoIndex), 1u);
  EXPECT_EQ(Stage(PinStageCounter::kRepsReused), 0u);
  EXPECT_EQ(Stage(PinStageCounter::kRepsExplored), 32u);

  PublishIndex();
  RunBursts(Message(Hosts(1, 2), true, kQp, 32, 32 * 1024));
  Run({Ack(Hosts(1, 2), kLocalQp, 63), Ack(Hosts(1, 2), 0x1234, 63)}, kUplinkA);
  PollAll();
  EXPECT_EQ(Stage(PinStageCounter::kJoinedLocal), 1u);
  EXPECT_EQ(Stage(PinStageCounter::kJoinNoPair), 1u);
  EXPECT_EQ(Sel(lb::LbCounter::kFeedbackAck), 1u);
  EXPECT_GT(Stage(PinStageCounter::kRepsRecycled), 0u);
  // The next long message reuses the recycled paths first.
  RunBursts(Message(Hosts(1, 2), true, kQp, 64, 8 * 1024));
  PollAll();
  EXPECT_EQ(Stage(PinStageCounter::kRepsReused), 8u);
}

// Two workers: the requests on worker 0, the ACKs arrive on worker 1, which posts them to worker 0
// through the ring; worker 0 applies them in its poll loop.
TEST_F(PinStageTest, FeedbackForAnotherWorkersFlowGoesThroughTheRing) {
  Make({.balancer = lb::BalancerKind::kReps, .threshold_bytes = 4096}, 2);
  PublishIndex();
  RunBursts(Message(Hosts(1, 2), true, kQp, 0, 16 * 1024));
  Run({Ack(Hosts(1, 2), kLocalQp, 7), Ack(Hosts(1, 2), kLocalQp, 15)}, kUplinkA, /*w=*/1);
  PollAll();
  EXPECT_EQ(Stage(PinStageCounter::kJoinedLocal), 0u);
  EXPECT_EQ(Stage(PinStageCounter::kJoinedRemote), 1u);  // the two ACKs merged into one message
  EXPECT_EQ(Sel(lb::LbCounter::kFeedbackAck), 1u);
  EXPECT_EQ(Stage(PinStageCounter::kRepsRecycled), 16u);  // every acknowledged packet's path
}

// A chained mbuf with the ICRC in its second segment is patched where the ICRC lies; a first
// segment too short for the headers is left alone and counted.
TEST_F(PinStageTest, ChainedMbufsAndShortFirstSegments) {
  Make({.balancer = lb::BalancerKind::kRps, .pin = false});
  const Packet p = Message(Hosts(1, 2), true, kQp, 0, 1024)[0];
  for (size_t split : {p.size() - 2, p.size() / 2, size_t{40}}) {
    SCOPED_TRACE(split);
    rte_mbuf* a = rte_pktmbuf_alloc(Env::pool);
    rte_mbuf* c = rte_pktmbuf_alloc(Env::pool);
    test_util::AppendFrame(a, p.data(), split);
    test_util::AppendFrame(c, p.data() + split, p.size() - split);
    ASSERT_EQ(rte_pktmbuf_chain(a, c), 0);
    TestWorker& t = *w_[0];
    t.b.n = 1;
    t.b.ingress = kHost;
    t.b.pkts[0] = a;
    t.b.desc[0] = p.desc;
    t.b.egress[0] = kNoEgress;
    t.b.held[0] = nullptr;
    ASSERT_EQ(t.stage->Process(t.ctx, t.b), 1);
    const Out o = Leave(t.b.pkts[0], t.b.egress[0]);
    EXPECT_TRUE(o.icrc_ok);
    if (split > 60) {
      EXPECT_NE(o.egress, kNoEgress);
      EXPECT_GE(o.sport, 0xc000);
    } else {
      EXPECT_EQ(o.egress, kNoEgress);  // headers beyond the first segment: untouched
      EXPECT_EQ(o.sport, p.desc.udp_sport);
    }
  }
  PollAll();
  EXPECT_EQ(Sel(lb::LbCounter::kMalformed), 1u);
}

// The stage's fast path (lb::PinSelector::TryChooseRewriteFast(), counts summed per burst) against
// the general path: a reference selector with the stage's seed runs Choose() and RewriteFull() on
// copies of the same random traffic (IPv4 and IPv6 QPs, one-packet and long messages, control
// packets, every balancer). Every packet must leave on the same uplink with the same bytes, and
// the counters the stage publishes must equal the reference's.
TEST_F(PinStageTest, FastPathMatchesTheGeneralPath) {
  for (int kind = 0; kind < static_cast<int>(lb::BalancerKind::kCount); ++kind) {
    lb::LbConfig config{
        .balancer = static_cast<lb::BalancerKind>(kind), .threshold_bytes = 6000, .seed = 7};
    SCOPED_TRACE(lb::BalancerKindName(config.balancer));
    Make(config);
    std::shared_ptr<const lb::PathTable> table = control_->current().table;
    lb::LbConfig rc = config;
    rc.seed = config.seed * 0x9E3779B97F4A7C15ull + 1;  // as the stage mixes in worker 0
    lb::PinSelector ref(rc, table.get());
    ref.SetFeedbackExpected(false);  // no host index: as the stage
    uint64_t bytes_total = 0, packets_total = 0;

    std::mt19937_64 rng(kind + 1);
    std::vector<Packet> traffic;
    for (int m = 0; m < 400; ++m) {
      pkt::FrameSpec f = Hosts(1, static_cast<uint8_t>(2 + rng() % 5));
      if (rng() % 4 == 0) {
        f.ipv6 = true;
        f.dst_ip6[15] = static_cast<uint8_t>(rng() % 5);
      }
      f.udp_sport = static_cast<uint16_t>(0xc000 + rng() % 16);
      const uint32_t qpn = 10 + static_cast<uint32_t>(rng() % 6);
      if (rng() % 10 == 0) {
        traffic.push_back(Ack(Hosts(2, 1), qpn, static_cast<uint32_t>(rng() % 100)));
        continue;
      }
      const uint32_t bytes = rng() % 3 == 0 ? static_cast<uint32_t>(rng() % 20'000)
                                            : static_cast<uint32_t>(rng() % 1024);
      for (Packet& p :
           Message(f, rng() % 2 == 0, qpn, static_cast<uint32_t>(rng() & 0xffffff), bytes)) {
        traffic.push_back(std::move(p));
      }
    }
    for (size_t i = 0; i < traffic.size(); i += 32) {
      std::vector<Packet> part(traffic.begin() + i,
                               traffic.begin() + std::min(traffic.size(), i + 32));
      const std::vector<Out> got = Run(part);  // advances now_ns_ by 1000 first
      ASSERT_EQ(got.size(), part.size());
      for (size_t k = 0; k < part.size(); ++k) {
        Packet want = part[k];
        const lb::PathChoice c = ref.Choose(want.desc, want.data(), want.size(), now_ns_);
        uint16_t egress = kNoEgress;
        if (c.path != nullptr &&
            lb::RewriteFull(want.data(), want.size(), want.desc, *c.path,
                            lb::EntropyField::kUdpSourcePort) != lb::RewriteResult::kMalformed) {
          egress = c.path->port;
          bytes_total += want.size();
          ++packets_total;
        }
        pkt::PacketDesc d;
        ASSERT_EQ(pkt::Parse(want.data(), want.size(), &d), pkt::ParseError::kOk);
        EXPECT_EQ(got[k].egress, egress) << "packet " << i + k;
        EXPECT_EQ(got[k].sport, d.udp_sport) << "packet " << i + k;
        EXPECT_TRUE(got[k].icrc_ok);
      }
      PollAll();
    }
    for (int c = 0; c < lb::kNumLbCounters; ++c) {
      EXPECT_EQ(Sel(static_cast<lb::LbCounter>(c)), ref.counter(static_cast<lb::LbCounter>(c)))
          << lb::LbCounterName(static_cast<lb::LbCounter>(c));
    }
    const LbTotals t = control_->totals();
    uint64_t bytes = 0, packets = 0;
    for (const auto& set : t.path_bytes) {
      for (uint64_t v : set) bytes += v;
    }
    for (const auto& set : t.path_packets) {
      for (uint64_t v : set) packets += v;
    }
    EXPECT_EQ(packets, packets_total);
    EXPECT_EQ(bytes, bytes_total);
    EXPECT_EQ(Stage(PinStageCounter::kPinnedBytes) + Stage(PinStageCounter::kSprayedBytes) +
                  Stage(PinStageCounter::kStatelessBytes),
              bytes_total);
    EXPECT_EQ(Stage(PinStageCounter::kRewritten) + Stage(PinStageCounter::kUnchanged),
              packets_total);
    EXPECT_EQ(sel_flows(), ref.flows().size());
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace heddle::pipeline
