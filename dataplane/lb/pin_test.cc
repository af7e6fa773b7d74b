// File: dataplane/lb/pin_test.cc
#include "dataplane/lb/pin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "dataplane/lb/lb_test_util.h"
#include "dataplane/lb/rewrite.h"

namespace heddle::lb {
namespace {

using testing::Ack;
using testing::Hosts;
using testing::Message;
using testing::Packet;

constexpr uint64_t kT = 100'000;

class PinTest : public ::testing::Test {
 protected:
  void SetUp() override { table_ = testing::DefaultTable(16); }
  void Make(LbConfig c) { sel_ = std::make_unique<PinSelector>(c, table_.get()); }
  std::vector<PathChoice> Run(std::vector<Packet> pkts, uint64_t step_ns = 100) {
    std::vector<PathChoice> out;
    for (Packet& p : pkts) out.push_back(sel_->Choose(p.desc, p.data(), p.size(), now_ += step_ns));
    return out;
  }
  static std::set<int> Paths(const std::vector<PathChoice>& cs) {
    std::set<int> s;
    for (const auto& c : cs) s.insert(c.index);
    return s;
  }
  static bool All(const std::vector<PathChoice>& cs, Verdict v) {
    for (const auto& c : cs) {
      if (c.verdict != v) return false;
    }
    return true;
  }

  std::unique_ptr<const PathTable> table_;
  std::unique_ptr<const PathTable> replaced_;
  std::unique_ptr<PinSelector> sel_;
  uint64_t now_ = 1'000'000;
};

TEST(PinConfig, DefaultThresholdIsOneBandwidthDelayProduct) {
  LbConfig c;
  EXPECT_EQ(EffectiveThreshold(c), 100'000u);  // 100 Gb/s x 8 us
  c.link_gbps = 400;
  c.rtt_ns = 4000;
  EXPECT_EQ(EffectiveThreshold(c), 200'000u);
  c.threshold_bytes = 65536;
  EXPECT_EQ(EffectiveThreshold(c), 65536u);
  EXPECT_TRUE(ValidateLbConfig(LbConfig{}).ok());
}

TEST(PinConfig, ValidationNamesTheField) {
  EXPECT_THAT(ValidateLbConfig({.reps_cache_size = 0}).message(), ::testing::HasSubstr("1..16"));
  EXPECT_THAT(ValidateLbConfig({.link_gbps = 0}).message(), ::testing::HasSubstr("link_gbps"));
  EXPECT_THAT(ValidateLbConfig({.threshold_bytes = uint64_t{1} << 32}).message(),
              ::testing::HasSubstr("2^31"));
  EXPECT_THAT(ValidateLbConfig({.balancer = BalancerKind::kFlowlet, .flowlet_gap_ns = 0}).message(),
              ::testing::HasSubstr("flowlet_gap_ns"));
  EXPECT_THAT(ValidateLbConfig({.flow_capacity = 3}).message(),
              ::testing::HasSubstr("flow_capacity"));
}

TEST_F(PinTest, ShortKnownSizePinnedLongSprayed) {
  Make({.balancer = BalancerKind::kRps, .threshold_bytes = kT});
  const auto short_w = Run(Message(Hosts(1, 2), true, 10, 0, 64 * 1024));
  EXPECT_TRUE(All(short_w, Verdict::kPinned));
  EXPECT_EQ(Paths(short_w).size(), 1u);
  const auto long_w = Run(Message(Hosts(1, 2), true, 10, 64, 1 << 20));
  EXPECT_TRUE(All(long_w, Verdict::kSprayed));
  EXPECT_GE(Paths(long_w).size(), 14u);  // 1024 packets sprayed over 16 paths
  EXPECT_EQ(sel_->counter(LbCounter::kPinnedFlows), 1u);
  EXPECT_EQ(sel_->counter(LbCounter::kSprayedFlows), 1u);
  EXPECT_EQ(sel_->counter(LbCounter::kPinnedPackets), 64u);
  EXPECT_EQ(sel_->counter(LbCounter::kSprayedPackets), 1024u);
}

TEST_F(PinTest, ThresholdIsInclusive) {
  Make({.balancer = BalancerKind::kRps, .threshold_bytes = kT});
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), true, 10, 0, kT)), Verdict::kPinned));
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), true, 10, 200, kT + 1)), Verdict::kSprayed));
}

TEST_F(PinTest, SingletonsAndReadRequestsArePinned) {
  Make({.balancer = BalancerKind::kRps});
  pkt::RoceSpec r;
  r.opcode = pkt::op::kReadRequest;
  r.dma_length = 1 << 24;  // the data comes back the other way
  r.dest_qp = 5;
  Packet p = testing::Make(Hosts(1, 2), r);
  EXPECT_EQ(sel_->Choose(p.desc, p.data(), p.size(), now_).verdict, Verdict::kPinned);
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), false, 6, 0, 200)), Verdict::kPinned));  // SEND only
}

// A pinned message never changes path: not under load, not under congestion feedback, not when
// every other path is empty, and not across a table change that keeps its path.
TEST_F(PinTest, PinnedFlowIsNeverMoved) {
  Make({.balancer = BalancerKind::kAdaptive,
        .pin_policy = PinPolicy::kLeastLoaded,
        .threshold_bytes = kT});
  std::vector<Packet> pinned = Message(Hosts(1, 2), true, 10, 0, 96 * 1024);
  std::vector<Packet> noise = Message(Hosts(1, 3), true, 11, 0, 4 << 20);
  const PathChoice first = sel_->Choose(pinned[0].desc, pinned[0].data(), pinned[0].size(), now_);
  ASSERT_EQ(first.verdict, Verdict::kPinned);
  const Path path = *first.path;
  uint8_t index = first.index;  // changes with the table, the path does not
  size_t ni = 0;
  for (size_t i = 1; i < pinned.size(); ++i) {
    // Between two of its packets: 40 sprayed packets, and heavy load and penalties on its path.
    for (int k = 0; k < 40 && ni < noise.size(); ++k, ++ni) {
      sel_->Choose(noise[ni].desc, noise[ni].data(), noise[ni].size(), now_ += 10);
    }
    sel_->loads().AddBytes(0, index, 10'000'000, now_);
    sel_->loads().AddPenalty(0, index, 10'000'000, now_);
    Packet nak = Ack(Hosts(1, 2), 0x99, pinned[i].desc.psn - 1, 0x60);
    sel_->OnReversePacket(nak.desc, nak.data(), nak.size(), 10, now_);
    if (i == pinned.size() / 2) {
      // A new table with the same paths in reverse order: the path is found by (port, entropy).
      PathTableSpec spec = table_->spec();
      std::reverse(spec.sets[0].begin(), spec.sets[0].end());
      auto t = PathTable::Build(spec);
      ASSERT_TRUE(t.ok());
      replaced_ = std::move(*t);
      sel_->SetPathTable(replaced_.get());
    }
    const PathChoice c = sel_->Choose(pinned[i].desc, pinned[i].data(), pinned[i].size(), now_);
    ASSERT_EQ(c.verdict, Verdict::kPinned) << i;
    ASSERT_EQ(*c.path, path) << "packet " << i << " moved";
    index = c.index;
  }
  EXPECT_EQ(sel_->counter(LbCounter::kRepinned), 0u);
  EXPECT_EQ(index, 15 - first.index);
  // The next short message avoids the path now loaded and penalized.
  const auto next = Run(Message(Hosts(1, 2), true, 10, 200, 8192));
  EXPECT_NE(*next[0].path, path);
}

// Request mode, size unknown (a multi-packet SEND): pinned from its first packet, still pinned
// after passing the threshold, to its last packet; the next message is a new flow.
TEST_F(PinTest, UnknownSizeCrossingThresholdStaysPinnedToItsEnd) {
  Make({.balancer = BalancerKind::kRps, .threshold_bytes = kT});
  const auto send = Run(Message(Hosts(1, 2), false, 10, 0, 300'000));
  EXPECT_TRUE(All(send, Verdict::kPinned));
  EXPECT_EQ(Paths(send).size(), 1u);
  EXPECT_EQ(sel_->counter(LbCounter::kCrossedThreshold), 1u);
  EXPECT_EQ(sel_->counter(LbCounter::kPinnedBytesOverThreshold), 300'000u - kT);
  // The next SEND on the QP is short until proven long again.
  const auto next = Run(Message(Hosts(1, 2), false, 10, 293, 50'000));
  EXPECT_TRUE(All(next, Verdict::kPinned));
  EXPECT_EQ(sel_->counter(LbCounter::kCrossedThreshold), 1u);
  EXPECT_EQ(sel_->counter(LbCounter::kPinnedFlows), 2u);
}

// A pinned one-packet message leaves the flow's size, bytes and threshold as the message before
// it left them (nothing reads them before the next message sets them): after a long SEND, a
// one-packet SEND and a threshold change, the next SEND of unknown size counts as a fresh
// message under the new threshold.
TEST_F(PinTest, OnePacketMessageLeavesNothingStaleForTheNextMessage) {
  Make({.balancer = BalancerKind::kRps, .threshold_bytes = kT});
  const auto first = Run(Message(Hosts(1, 2), false, 10, 0, 300'000));
  ASSERT_EQ(first.size(), 293u);
  const uint64_t over = sel_->counter(LbCounter::kPinnedBytesOverThreshold);
  EXPECT_EQ(over, 300'000u - kT);
  const auto one = Run(Message(Hosts(1, 2), false, 10, 293, 100));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].verdict, Verdict::kPinned);
  EXPECT_EQ(sel_->counter(LbCounter::kCrossedThreshold), 1u);
  EXPECT_EQ(sel_->counter(LbCounter::kPinnedBytesOverThreshold), over);
  sel_->SetThresholdBytes(16 * 1024);
  const auto next = Run(Message(Hosts(1, 2), false, 10, 294, 50'000));
  EXPECT_TRUE(All(next, Verdict::kPinned));
  EXPECT_EQ(sel_->counter(LbCounter::kCrossedThreshold), 2u);
  EXPECT_EQ(sel_->counter(LbCounter::kPinnedBytesOverThreshold), over + 50'000u - 16 * 1024);
}

// Opt-in for reordering-tolerant stacks: the rest of a message of unknown size is sprayed once it
// passes the threshold; a message of known size is not affected.
TEST_F(PinTest, SprayRestReleasesUnknownSizeMessagesAtTheThreshold) {
  Make({.balancer = BalancerKind::kRps,
        .crossing = CrossingRule::kSprayRest,
        .threshold_bytes = kT});
  const auto send = Run(Message(Hosts(1, 2), false, 10, 0, 300'000));
  const size_t pinned = (kT + 1023) / 1024;  // the packet that passes the threshold is the last
  for (size_t i = 0; i < send.size(); ++i) {
    EXPECT_EQ(send[i].verdict, i < pinned ? Verdict::kPinned : Verdict::kSprayed) << i;
  }
  EXPECT_EQ(Paths({send.begin(), send.begin() + pinned}).size(), 1u);
  EXPECT_GE(Paths({send.begin() + pinned, send.end()}).size(), 12u);
  EXPECT_EQ(sel_->counter(LbCounter::kSprayedRest), 1u);
  EXPECT_EQ(sel_->counter(LbCounter::kCrossedThreshold), 1u);
  // Known size at or under the threshold: pinned throughout, as always.
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), true, 10, 400, kT)), Verdict::kPinned));
  EXPECT_EQ(sel_->counter(LbCounter::kSprayedRest), 1u);
}

// A message picked up mid-way (its first packet unseen) is of unknown size: pinned.
TEST_F(PinTest, OrphanMessageIsShortUntilProvenLong) {
  Make({.balancer = BalancerKind::kRps, .threshold_bytes = kT});
  std::vector<Packet> w = Message(Hosts(1, 2), true, 10, 0, 512 * 1024);
  w.erase(w.begin(), w.begin() + 10);
  const auto c = Run(std::move(w));
  EXPECT_TRUE(All(c, Verdict::kPinned));
  EXPECT_EQ(sel_->counter(LbCounter::kCrossedThreshold), 1u);
}

TEST_F(PinTest, QpModeKeepsAShortQpOnOnePathAndSpraysItOnceLong) {
  Make({.balancer = BalancerKind::kRps,
        .flow_unit = FlowUnit::kQp,
        .threshold_bytes = kT,
        .flow_idle_ns = 1'000'000});
  std::set<int> paths;
  uint32_t psn = 0;
  for (int m = 0; m < 5; ++m) {  // 5 x 16 KB = 80 KB: short
    const auto c = Run(Message(Hosts(1, 2), true, 10, psn, 16384));
    psn += 16;
    EXPECT_TRUE(All(c, Verdict::kPinned));
    for (const auto& x : c) paths.insert(x.index);
  }
  EXPECT_EQ(paths.size(), 1u);
  // A SEND of unknown size takes the QP past the threshold: it stays pinned to its end...
  const auto crossing = Run(Message(Hosts(1, 2), false, 10, psn, 64 * 1024));
  psn += 64;
  EXPECT_TRUE(All(crossing, Verdict::kPinned));
  EXPECT_EQ(*Paths(crossing).begin(), *paths.begin());
  EXPECT_EQ(sel_->counter(LbCounter::kQpPromoted), 1u);
  // ...and its next messages are sprayed, even small ones.
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), true, 10, psn, 8192)), Verdict::kSprayed));
  psn += 8;
  // After an idle gap longer than flow_idle_ns the QP is short again.
  now_ += 2'000'000;
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), true, 10, psn, 8192)), Verdict::kPinned));
}

TEST_F(PinTest, QpModeKnownSizeThatWouldPassTheThresholdIsSprayedFromItsStart) {
  Make({.balancer = BalancerKind::kRps, .flow_unit = FlowUnit::kQp, .threshold_bytes = kT});
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), true, 10, 0, 90'000)), Verdict::kPinned));
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), true, 10, 100, 20'000)), Verdict::kSprayed));
  EXPECT_EQ(sel_->counter(LbCounter::kQpPromoted), 1u);
  EXPECT_EQ(sel_->counter(LbCounter::kCrossedThreshold), 0u);
}

TEST_F(PinTest, RequestModePlacesEachMessageOnItsOwn) {
  Make({.balancer = BalancerKind::kRps, .threshold_bytes = kT});
  std::set<int> paths;
  for (uint32_t m = 0; m < 64; ++m) {
    paths.insert(Run(Message(Hosts(1, 2), true, 10, m * 8, 8192))[0].index);
  }
  EXPECT_GE(paths.size(), 12u);  // one QP's short messages spread over the paths
}

TEST_F(PinTest, ThresholdChangesAtRunTimeForFlowsStartingAfterwards) {
  Make({.balancer = BalancerKind::kRps, .threshold_bytes = kT});
  std::vector<Packet> send = Message(Hosts(1, 2), false, 10, 0, 60'000);  // unknown size
  for (size_t i = 0; i < 20; ++i) sel_->Choose(send[i].desc, send[i].data(), send[i].size(), now_);
  std::thread([&] { sel_->SetThresholdBytes(16 * 1024); }).join();
  EXPECT_EQ(sel_->threshold_bytes(), 16u * 1024);
  // The SEND in progress keeps the threshold it started with: 60 KB < 100 KB, no crossing.
  for (size_t i = 20; i < send.size(); ++i) {
    EXPECT_EQ(sel_->Choose(send[i].desc, send[i].data(), send[i].size(), now_).verdict,
              Verdict::kPinned);
  }
  EXPECT_EQ(sel_->counter(LbCounter::kCrossedThreshold), 0u);
  // New flows see the new threshold.
  EXPECT_TRUE(All(Run(Message(Hosts(1, 3), true, 11, 0, 32 * 1024)), Verdict::kSprayed));
  EXPECT_TRUE(All(Run(Message(Hosts(1, 3), true, 11, 32, 16 * 1024)), Verdict::kPinned));
  sel_->SetThresholdBytes(0);  // back to the bandwidth-delay product
  EXPECT_EQ(sel_->threshold_bytes(), 100'000u);
}

// Reconfigure() between bursts: the message in progress keeps its verdict and path; what starts
// afterwards follows the new balancer, policy and threshold; flow state and counters survive.
TEST_F(PinTest, ReconfigureKeepsMessagesInProgressAndAppliesToNewOnes) {
  Make({.balancer = BalancerKind::kRps, .threshold_bytes = kT});
  // A pinned SEND of unknown size, half sent.
  std::vector<Packet> send = Message(Hosts(1, 2), false, 10, 0, 32 * 1024);
  std::vector<PathChoice> before;
  for (size_t i = 0; i < 16; ++i) {
    before.push_back(sel_->Choose(send[i].desc, send[i].data(), send[i].size(), now_ += 100));
  }
  ASSERT_TRUE(All(before, Verdict::kPinned));
  const uint64_t flows = sel_->flows().size();

  LbConfig next = sel_->config();
  next.balancer = BalancerKind::kRoundRobin;
  next.pin_policy = PinPolicy::kLeastLoaded;
  next.threshold_bytes = 8 * 1024;  // the SEND in progress is now "long": it must not move
  sel_->Reconfigure(next);
  EXPECT_EQ(sel_->balancer().kind(), BalancerKind::kRoundRobin);
  EXPECT_EQ(sel_->threshold_bytes(), 8u * 1024);
  EXPECT_EQ(sel_->flows().size(), flows);
  for (size_t i = 16; i < send.size(); ++i) {
    const PathChoice c = sel_->Choose(send[i].desc, send[i].data(), send[i].size(), now_ += 100);
    EXPECT_EQ(c.verdict, Verdict::kPinned);
    EXPECT_EQ(c.index, before[0].index);
  }
  EXPECT_EQ(sel_->counter(LbCounter::kCrossedThreshold), 0u);  // it started under 100 KB
  // A 16 KiB WRITE now passes the threshold: sprayed round-robin, each path in turn.
  const auto w = Run(Message(Hosts(1, 2), true, 10, 100, 16 * 1024));
  EXPECT_TRUE(All(w, Verdict::kSprayed));
  EXPECT_EQ(Paths(w).size(), 16u);
  for (size_t i = 1; i < w.size(); ++i) EXPECT_EQ(w[i].index, (w[i - 1].index + 1) % 16);
  EXPECT_EQ(sel_->counter(LbCounter::kPinnedFlows), 1u);
  EXPECT_EQ(sel_->counter(LbCounter::kSprayedFlows), 1u);

  // Pin off, then REPS: every message sprayed, REPS explores (no feedback yet).
  next.pin = false;
  next.balancer = BalancerKind::kReps;
  next.reps_cache_size = 2;
  sel_->Reconfigure(next);
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), true, 10, 200, 2048)), Verdict::kSprayed));
  EXPECT_EQ(sel_->balancer().counters().reps_explored, 2u);
  // Fixed at construction: the flow unit and the entropy field.
  next.flow_unit = FlowUnit::kQp;
  next.entropy_field = EntropyField::kIpv6FlowLabel;
  sel_->Reconfigure(next);
  EXPECT_EQ(sel_->config().flow_unit, FlowUnit::kRequest);
  EXPECT_EQ(sel_->config().entropy_field, EntropyField::kUdpSourcePort);
}

TEST_F(PinTest, PinOffSpraysEverything) {
  Make({.balancer = BalancerKind::kRps, .pin = false});
  EXPECT_TRUE(All(Run(Message(Hosts(1, 2), true, 10, 0, 8192)), Verdict::kSprayed));
  EXPECT_EQ(sel_->counter(LbCounter::kPinnedFlows), 0u);
}

TEST_F(PinTest, LeastLoadedPolicyPinsOnTheEmptiestPath) {
  Make({.balancer = BalancerKind::kRps, .pin_policy = PinPolicy::kLeastLoaded});
  for (uint32_t p = 0; p < 16; ++p) {
    if (p != 9) sel_->loads().AddBytes(0, p, 500'000, now_);
  }
  const auto c = Run(Message(Hosts(1, 2), true, 10, 0, 8192));
  EXPECT_EQ(c[0].index, 9);
  EXPECT_EQ(Paths(c).size(), 1u);
}

TEST_F(PinTest, BalancerPolicyPinsOnRepsBestCachedPath) {
  Make(
      {.balancer = BalancerKind::kReps, .pin_policy = PinPolicy::kBalancer, .threshold_bytes = kT});
  const auto big = Run(Message(Hosts(1, 2), true, 10, 0, 200'000));  // sprayed, explores
  Packet ack = Ack(Hosts(1, 2), 0x99, big.size() - 1);
  sel_->OnReversePacket(ack.desc, ack.data(), ack.size(), 10, now_);
  const auto small = Run(Message(Hosts(1, 2), true, 10, 500, 4096));
  // The oldest path the cache (8 by default) kept: the 8th last acknowledged.
  EXPECT_EQ(small[0].index, big[big.size() - 8].index);
  EXPECT_EQ(Paths(small).size(), 1u);
}

TEST_F(PinTest, NoPathHistoryWhileNoFeedbackIsExpected) {
  Make({.balancer = BalancerKind::kReps, .pin = false});
  sel_->SetFeedbackExpected(false);
  const auto before = Run(Message(Hosts(1, 2), true, 10, 0, 16 * 1024));  // sprayed
  // Nothing was recorded: an acknowledgement of those packets recycles no path.
  Packet ack = Ack(Hosts(1, 2), 0x99, before.size() - 1);
  sel_->OnReversePacket(ack.desc, ack.data(), ack.size(), 10, now_);
  EXPECT_EQ(sel_->balancer().counters().reps_recycled, 0u);
  // Expected again: the packets from now on report their paths.
  sel_->SetFeedbackExpected(true);
  const auto after = Run(Message(Hosts(1, 2), true, 10, before.size(), 4 * 1024));
  ack = Ack(Hosts(1, 2), 0x99, before.size() + after.size() - 1);
  sel_->OnReversePacket(ack.desc, ack.data(), ack.size(), 10, now_);
  EXPECT_EQ(sel_->balancer().counters().reps_recycled, after.size());
}

TEST_F(PinTest, HashPolicyIsDeterministicAndSpreads) {
  std::vector<int> a, b;
  for (std::vector<int>* out : {&a, &b}) {
    Make({.balancer = BalancerKind::kRps, .seed = out == &a ? 1u : 2u});
    for (uint32_t qp = 0; qp < 800; ++qp) {
      out->push_back(Run(Message(Hosts(1, static_cast<uint8_t>(qp)), true, qp, 0, 4096))[0].index);
    }
  }
  EXPECT_EQ(a, b);  // the hash does not depend on the seed
  std::vector<int> per_path(16);
  for (int p : a) ++per_path[p];
  for (int n : per_path) EXPECT_NEAR(n, 50, 25);
}

TEST_F(PinTest, ControlPacketsTakeTheQpsHashedPathWithoutState) {
  Make({});
  Packet ack = Ack(Hosts(1, 2), 77, 5);  // an ACK from this host to a remote requester
  const PathChoice c1 = sel_->Choose(ack.desc, ack.data(), ack.size(), now_);
  const PathChoice c2 = sel_->Choose(ack.desc, ack.data(), ack.size(), now_ + 50'000);
  EXPECT_EQ(c1.verdict, Verdict::kControl);
  EXPECT_EQ(c1.index, c2.index);
  EXPECT_EQ(sel_->flows().size(), 0u);
  EXPECT_EQ(sel_->counter(LbCounter::kControl), 2u);
}

TEST_F(PinTest, FullTableFallsBackToTheHashedPathAndCountsIt) {
  Make({.balancer = BalancerKind::kRps, .flow_capacity = 16});
  std::map<uint32_t, int> path_of_qp;
  int fallback = 0;
  for (int round = 0; round < 3; ++round) {
    for (uint32_t qp = 0; qp < 64; ++qp) {
      Packet p = Message(Hosts(1, 2), true, qp, round * 8, 8192)[0];
      const PathChoice c = sel_->Choose(p.desc, p.data(), p.size(), now_ += 10);
      if (c.verdict == Verdict::kFallback) {
        ++fallback;
        auto [it, fresh] = path_of_qp.emplace(qp, c.index);
        EXPECT_EQ(it->second, c.index) << "a QP without state keeps one hashed path";
      }
    }
  }
  EXPECT_GT(fallback, 0);
  EXPECT_EQ(sel_->counter(LbCounter::kTableFull), static_cast<uint64_t>(fallback));
  EXPECT_EQ(sel_->flows().counters().table_full, static_cast<uint64_t>(fallback));
}

TEST_F(PinTest, PathVanishingFromANewTableRepinsAndCounts) {
  Make({.balancer = BalancerKind::kRps});
  std::vector<Packet> w = Message(Hosts(1, 2), true, 10, 0, 64 * 1024);
  const PathChoice first = sel_->Choose(w[0].desc, w[0].data(), w[0].size(), now_);
  PathTableSpec spec = table_->spec();
  spec.sets[0].erase(spec.sets[0].begin() + first.index);
  auto t = PathTable::Build(spec);
  ASSERT_TRUE(t.ok());
  sel_->SetPathTable(t->get());
  std::set<uint32_t> entropies;
  for (size_t i = 1; i < w.size(); ++i) {
    const PathChoice c = sel_->Choose(w[i].desc, w[i].data(), w[i].size(), now_);
    EXPECT_EQ(c.verdict, Verdict::kPinned);
    entropies.insert(c.path->entropy);
  }
  EXPECT_EQ(entropies.size(), 1u);  // re-pinned once, then stays
  EXPECT_NE(*entropies.begin(), first.path->entropy);
  EXPECT_EQ(sel_->counter(LbCounter::kRepinned), 1u);
}

TEST_F(PinTest, DestinationsWithoutPathSetAreLeftAlone) {
  PathConfig pc;
  pc.has_default = false;
  pc.prefixes.push_back({.prefix = "10.9.0.0/16"});
  auto t = PathTable::Build(*PathTableSpecFromConfig(pc, EntropyField::kUdpSourcePort));
  ASSERT_TRUE(t.ok());
  PinSelector s(LbConfig{}, t->get());
  Packet p = Message(Hosts(1, 2), true, 10, 0, 1024)[0];
  const PathChoice c = s.Choose(p.desc, p.data(), p.size(), 0);
  EXPECT_EQ(c.path, nullptr);
  EXPECT_EQ(c.verdict, Verdict::kNoPathSet);
  EXPECT_EQ(s.counter(LbCounter::kNoPathSet), 1u);
  PinSelector no_table(LbConfig{}, nullptr);
  EXPECT_EQ(no_table.Choose(p.desc, p.data(), p.size(), 0).verdict, Verdict::kNoPathSet);
}

TEST_F(PinTest, Ipv6FlowsAndFlowLabelEntropy) {
  Make({.balancer = BalancerKind::kRps, .entropy_field = EntropyField::kIpv6FlowLabel});
  pkt::FrameSpec f;
  f.ipv6 = true;
  std::vector<Packet> w = Message(f, true, 10, 0, 1 << 20);
  std::set<uint32_t> labels;
  for (Packet& p : w) {
    const PathChoice c = sel_->Choose(p.desc, p.data(), p.size(), now_);
    ASSERT_NE(c.path, nullptr);
    ASSERT_NE(Rewrite(p.data(), p.size(), p.desc, *c.path, EntropyField::kIpv6FlowLabel),
              RewriteResult::kMalformed);
    EXPECT_TRUE(pkt::VerifyIcrc(p.data(), p.desc));
    const uint8_t* ip = p.data() + p.desc.l3_off;
    labels.insert((ip[1] & 0x0fu) << 16 | ip[2] << 8 | ip[3]);
  }
  EXPECT_GE(labels.size(), 14u);
}

// Truncated and inconsistent input: counted, never a crash, never a path.
TEST_F(PinTest, MalformedInputIsCountedAndSurvived) {
  Make({.balancer = BalancerKind::kReps});
  std::vector<Packet> frames;
  for (bool v6 : {false, true}) {
    for (int vlans : {0, 2}) {
      pkt::FrameSpec f = Hosts(1, 2);
      f.ipv6 = v6;
      for (int v = 0; v < vlans; ++v) f.vlans.push_back({});
      for (Packet& p : Message(f, true, 10, 0, 3000)) frames.push_back(p);
      frames.push_back(Ack(f, 7, 3));
    }
  }
  uint64_t expected_malformed = 0;
  for (const Packet& full : frames) {
    for (size_t len = 0; len < full.size(); ++len) {
      // The frame cut at len, in a buffer of exactly len bytes.
      std::vector<uint8_t> cut(full.bytes.begin(), full.bytes.begin() + len);
      const uint8_t* data = cut.empty() ? nullptr : cut.data();
      // 1. The full frame's desc over the cut bytes: refused whenever BTH does not fit.
      const PathChoice c = sel_->Choose(full.desc, data, len, now_);
      if (len < full.desc.bth_off + 12u) {
        EXPECT_EQ(c.verdict, Verdict::kMalformed) << len;
        EXPECT_EQ(c.path, nullptr);
        ++expected_malformed;
      }
      sel_->OnReversePacket(full.desc, data, len, 10, now_);
      // 2. What the parser makes of the cut frame, whatever it returned.
      pkt::PacketDesc d{};
      const pkt::ParseError e = pkt::Parse(data, len, &d);
      const PathChoice c2 = sel_->Choose(d, data, len, now_);
      if (e != pkt::ParseError::kOk && c2.path != nullptr) {
        // A frame cut after its BTH may still get a path: the headers it read were there.
        EXPECT_LE(d.bth_off + 12u, len);
      } else if (c2.verdict == Verdict::kMalformed) {
        ++expected_malformed;
      }
      sel_->OnReversePacket(d, data, len, 10, now_);
    }
  }
  EXPECT_EQ(sel_->counter(LbCounter::kMalformed), expected_malformed);
  EXPECT_GT(sel_->counter(LbCounter::kFeedbackMalformed), 0u);
  // Random descs over random bytes.
  std::mt19937_64 rng(1);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> bytes(rng() % 200);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    pkt::PacketDesc d{};
    d.flags = static_cast<uint16_t>(rng());
    d.l3 = static_cast<pkt::L3>(rng() % 2 ? 4 : 6);
    d.l3_off = static_cast<uint16_t>(rng() % 256);
    d.l4_off = static_cast<uint16_t>(rng() % 256);
    d.bth_off = static_cast<uint16_t>(rng() % 256);
    d.roce_class = static_cast<pkt::RoceClass>(rng() % 10);
    d.payload_len = static_cast<uint16_t>(rng());
    d.psn = static_cast<uint32_t>(rng());
    const PathChoice c =
        sel_->Choose(d, bytes.empty() ? nullptr : bytes.data(), bytes.size(), now_);
    if (c.path != nullptr) {
      EXPECT_LE(d.bth_off + 12u, bytes.size());
    }
    sel_->OnReversePacket(d, bytes.empty() ? nullptr : bytes.data(), bytes.size(), 1, now_);
  }
}

}  // namespace
}  // namespace heddle::lb
