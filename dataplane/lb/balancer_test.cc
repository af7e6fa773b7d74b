// File: dataplane/lb/balancer_test.cc
//
// Each balancer alone (Balancer on a synthetic flow entry) and through a PinSelector with pinning
// off, so that feedback arrives as it would from the wire.
#include "dataplane/lb/balancer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "dataplane/lb/lb_test_util.h"
#include "dataplane/lb/pin.h"

namespace heddle::lb {
namespace {

using testing::Ack;
using testing::Cnp;
using testing::Hosts;
using testing::Message;
using testing::Packet;

FlowEntry FreshEntry(uint64_t hash) {
  FlowEntry e;
  std::memset(static_cast<void*>(&e), 0, sizeof(e));
  e.key_hash = hash;
  e.current_path = kNoPath;
  e.pinned_path = kNoPath;
  return e;
}

TEST(BalancerKind, NamesRoundTrip) {
  for (int i = 0; i < static_cast<int>(BalancerKind::kCount); ++i) {
    const auto k = static_cast<BalancerKind>(i);
    auto parsed = ParseBalancerKind(BalancerKindName(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_THAT(ParseBalancerKind("drill").status().message(),
              ::testing::HasSubstr("ecmp, rps, round-robin, flowlet, reps, adaptive"));
}

TEST(Rps, UniformOverPaths) {
  auto table = testing::DefaultTable(8);
  internal::Rng rng(1);
  PathLoads loads(4);
  Balancer b({.kind = BalancerKind::kRps}, &rng, &loads);
  FlowEntry e = FreshEntry(42);
  std::vector<int> hits(8);
  constexpr int kPackets = 80000;
  for (int i = 0; i < kPackets; ++i) ++hits[b.Pick({&e, table->set(0), 42, 0, 0})];
  // Chi-square with 7 degrees of freedom: 24.3 is the 0.1 % tail.
  double chi2 = 0;
  for (int h : hits) chi2 += (h - kPackets / 8.0) * (h - kPackets / 8.0) / (kPackets / 8.0);
  EXPECT_LT(chi2, 24.3) << ::testing::PrintToString(hits);
}

TEST(Ecmp, OneFlowOnePathFlowsSpread) {
  auto table = testing::DefaultTable(8);
  internal::Rng rng(1);
  PathLoads loads(4);
  Balancer b({.kind = BalancerKind::kEcmp}, &rng, &loads);
  std::vector<int> flows_per_path(8);
  for (uint64_t f = 0; f < 8000; ++f) {
    const uint64_t h = internal::Avalanche(f + 1);
    FlowEntry e = FreshEntry(h);
    const uint8_t first = b.Pick({&e, table->set(0), h, 0, 0});
    for (int k = 0; k < 20; ++k) ASSERT_EQ(b.Pick({&e, table->set(0), h, 0, 0}), first);
    ++flows_per_path[first];
  }
  for (int n : flows_per_path) EXPECT_NEAR(n, 1000, 150);
}

TEST(RoundRobin, TakesThePathsInTurn) {
  auto table = testing::DefaultTable(5);
  internal::Rng rng(1);
  PathLoads loads(4);
  Balancer b({.kind = BalancerKind::kRoundRobin}, &rng, &loads);
  FlowEntry e = FreshEntry(7);
  e.rr_next = 3;
  std::vector<int> seq;
  for (int i = 0; i < 10; ++i) seq.push_back(b.Pick({&e, table->set(0), 7, 0, 0}));
  EXPECT_EQ(seq, (std::vector<int>{3, 4, 0, 1, 2, 3, 4, 0, 1, 2}));
}

TEST(Flowlet, KeepsThePathWithinTheGapAndMayMoveAfterIt) {
  auto table = testing::DefaultTable(8);
  internal::Rng rng(9);
  PathLoads loads(4);
  constexpr uint64_t kGap = 50'000;
  Balancer b({.kind = BalancerKind::kFlowlet, .flowlet_gap_ns = kGap}, &rng, &loads);
  FlowEntry e = FreshEntry(7);
  std::set<int> flowlet_paths;
  int moves = 0;
  uint8_t path = b.Pick({&e, table->set(0), 7, 0, ~uint64_t{0}});
  for (int flowlet = 0; flowlet < 200; ++flowlet) {
    // A burst of packets closer than the gap (even the gap itself is not "more than" the gap).
    for (int k = 0; k < 30; ++k) {
      ASSERT_EQ(b.Pick({&e, table->set(0), 7, 0, k == 29 ? kGap : 1000}), path);
    }
    const uint8_t next = b.Pick({&e, table->set(0), 7, 0, kGap + 1});  // an idle gap: new flowlet
    moves += next != path;
    path = next;
    flowlet_paths.insert(path);
  }
  EXPECT_EQ(b.flowlets(), 201u);
  EXPECT_EQ(flowlet_paths.size(), 8u);  // flowlets land on every path
  EXPECT_GT(moves, 150);                // 7 in 8 new flowlets move (random choice)
}

TEST(Adaptive, AvoidsLoadedAndPenalizedPaths) {
  auto table = testing::DefaultTable(8);
  internal::Rng rng(3);
  PathLoads loads(4);
  Balancer b({.kind = BalancerKind::kAdaptive}, &rng, &loads);
  for (uint32_t p = 0; p < 8; ++p) {
    if (p != 5) loads.AddBytes(0, p, 1'000'000, 0);
  }
  FlowEntry e = FreshEntry(7);
  int on_5 = 0;
  for (int i = 0; i < 100; ++i) on_5 += b.Pick({&e, table->set(0), 7, 0, 0}) == 5;
  EXPECT_GT(on_5, 90);  // once found, it stays (current path wins ties and lower scores)
  // Congestion feedback on path 5 drives the flow away.
  loads.AddPenalty(0, 5, 10'000'000, 0);
  int after = 0;
  for (int i = 0; i < 100; ++i) after += b.Pick({&e, table->set(0), 7, 0, 0}) == 5;
  EXPECT_LT(after, 10);
}

TEST(Adaptive, SpreadsItsOwnLoad) {
  auto table = testing::DefaultTable(8);
  internal::Rng rng(3);
  PathLoads loads(4);
  Balancer b({.kind = BalancerKind::kAdaptive}, &rng, &loads);
  FlowEntry e = FreshEntry(7);
  std::vector<uint64_t> bytes(8);
  for (int i = 0; i < 8000; ++i) {
    const uint8_t p = b.Pick({&e, table->set(0), 7, 0, 0});
    loads.AddBytes(0, p, 1000, 0);
    bytes[p] += 1000;
  }
  for (uint64_t v : bytes) EXPECT_NEAR(static_cast<double>(v), 1e6, 0.02e6);
}

TEST(PathLoads, DecaysByHalfPerEpoch) {
  PathLoads loads(2);
  loads.AddBytes(1, 3, 1 << 20, 0);
  loads.AddPenalty(1, 3, 1 << 10, 0);
  const uint64_t epoch = uint64_t{1} << PathLoads::kLoadEpochShift;
  EXPECT_EQ(loads.Load(1, 3, epoch - 1), 1u << 20);
  EXPECT_EQ(loads.Load(1, 3, epoch), 1u << 19);
  EXPECT_EQ(loads.Penalty(1, 3, 3 * epoch), 1u << 7);
  EXPECT_EQ(loads.Score(1, 3, 40 * epoch), 0u);
  EXPECT_EQ(loads.Load(0, 3, 0), 0u);  // other sets are apart
}

// Every balancer replays exactly under the same seed, and RPS differs under another.
TEST(Determinism, SameSeedSamePaths) {
  auto run = [](BalancerKind kind, uint64_t seed) {
    auto table = testing::DefaultTable(16);
    LbConfig c{.balancer = kind, .pin = false, .seed = seed, .flowlet_gap_ns = 3000};
    PinSelector s(c, table.get());
    std::vector<int> paths;
    uint64_t now = 0;
    for (uint32_t qp = 0; qp < 20; ++qp) {
      for (Packet& p : Message(Hosts(1, static_cast<uint8_t>(qp)), true, qp, qp * 100, 40'000)) {
        now += (qp % 3 == 0) ? 5000 : 100;
        paths.push_back(s.Choose(p.desc, p.data(), p.size(), now).index);
        if (p.desc.psn % 4 == 3) {
          Packet a = Ack(Hosts(1, static_cast<uint8_t>(qp)), 0x999, p.desc.psn);
          s.OnReversePacket(a.desc, a.data(), a.size(), qp, now);
        }
      }
    }
    return paths;
  };
  for (int k = 0; k < static_cast<int>(BalancerKind::kCount); ++k) {
    const auto kind = static_cast<BalancerKind>(k);
    EXPECT_EQ(run(kind, 77), run(kind, 77)) << BalancerKindName(kind);
  }
  EXPECT_NE(run(BalancerKind::kRps, 77), run(BalancerKind::kRps, 78));
  EXPECT_NE(run(BalancerKind::kReps, 77), run(BalancerKind::kReps, 78));
}

// REPS through the selector: the feedback comes from ACK/NAK/CNP frames on the reverse path.
class RepsTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kQp = 0x42;
  static constexpr uint32_t kRequesterQp = 0x17;

  void SetUp() override {
    table_ = testing::DefaultTable(64);
    LbConfig c{.balancer = BalancerKind::kReps, .pin = false, .seed = 5, .reps_cache_size = 4};
    sel_ = std::make_unique<PinSelector>(c, table_.get());
  }
  // `n` WRITE packets from psn; returns their paths.
  std::vector<int> Send(uint32_t psn, uint32_t n) {
    std::vector<int> paths;
    for (Packet& p : Message(f_, true, kQp, psn, n * 1024)) {
      paths.push_back(sel_->Choose(p.desc, p.data(), p.size(), now_ += 100).index);
    }
    return paths;
  }
  void Reverse(const Packet& p) { sel_->OnReversePacket(p.desc, p.data(), p.size(), kQp, now_); }
  const FlowEntry& Entry() {
    Packet p = Message(f_, true, kQp, 0, 1024)[0];
    const FlowEntry* e =
        sel_->mutable_flows().Find(PinSelector::HashRequest(p.data(), p.desc), kQp);
    EXPECT_NE(e, nullptr);
    return *e;
  }

  pkt::FrameSpec f_ = Hosts(1, 2);
  std::unique_ptr<const PathTable> table_;
  std::unique_ptr<PinSelector> sel_;
  uint64_t now_ = 1000;
};

TEST_F(RepsTest, UnmarkedAckRecyclesThePathsInOrder) {
  const std::vector<int> first = Send(0, 4);  // cache empty: four random paths
  EXPECT_EQ(sel_->balancer().counters().reps_explored, 4u);
  Reverse(Ack(f_, kRequesterQp, 3));
  EXPECT_EQ(Entry().reps_count, 4);
  EXPECT_EQ(Send(4, 4), first);  // reused, oldest first
  EXPECT_EQ(sel_->balancer().counters().reps_reused, 4u);
  EXPECT_EQ(sel_->counter(LbCounter::kFeedbackAck), 1u);
}

TEST_F(RepsTest, CeMarkedAckDropsThePaths) {
  Send(0, 4);
  Reverse(Ack(f_, kRequesterQp, 3, 0, /*ce=*/true));
  EXPECT_EQ(Entry().reps_count, 0);
  EXPECT_EQ(sel_->balancer().counters().reps_not_recycled, 4u);
  EXPECT_EQ(sel_->counter(LbCounter::kFeedbackCe), 1u);
  Send(4, 2);
  EXPECT_EQ(sel_->balancer().counters().reps_explored, 6u);
}

TEST_F(RepsTest, CnpTaintsWhatWasInFlight) {
  Send(0, 4);
  Reverse(Cnp(f_, kRequesterQp));
  const std::vector<int> after = Send(4, 2);  // sent after the CNP: not tainted
  Reverse(Ack(f_, kRequesterQp, 5));
  EXPECT_EQ(sel_->counter(LbCounter::kFeedbackCnp), 1u);
  EXPECT_EQ(sel_->balancer().counters().reps_not_recycled, 4u);
  EXPECT_EQ(sel_->balancer().counters().reps_recycled, 2u);
  EXPECT_EQ(Send(6, 2), after);
}

TEST_F(RepsTest, NakDropsTheLostPathOnly) {
  const std::vector<int> first = Send(0, 4);
  Reverse(Ack(f_, kRequesterQp, 2, 0x60));  // NAK, PSN sequence error at PSN 2
  EXPECT_EQ(sel_->counter(LbCounter::kFeedbackNak), 1u);
  EXPECT_EQ(sel_->balancer().counters().reps_recycled, 2u);      // PSNs 0, 1
  EXPECT_EQ(sel_->balancer().counters().reps_not_recycled, 1u);  // PSN 2
  EXPECT_GT(sel_->loads().Penalty(0, first[2], now_), 0u);
  const std::vector<int> again = Send(4, 2);
  EXPECT_EQ(again, (std::vector<int>{first[0], first[1]}));
}

TEST_F(RepsTest, CacheIsBoundedAndOldAcksChangeNothing) {
  Send(0, 16);
  Reverse(Ack(f_, kRequesterQp, 15));
  EXPECT_EQ(Entry().reps_count, 4);  // reps_cache_size
  EXPECT_EQ(sel_->balancer().counters().reps_recycled, 16u);
  EXPECT_EQ(sel_->balancer().counters().reps_overflow, 12u);
  Reverse(Ack(f_, kRequesterQp, 10));  // older than what was acknowledged
  EXPECT_EQ(sel_->counter(LbCounter::kFeedbackOld), 1u);
  EXPECT_EQ(Entry().reps_count, 4);
  // Feedback for a QP never seen is counted, not applied.
  sel_->OnReversePacket(Ack(f_, kRequesterQp, 1).desc, Ack(f_, kRequesterQp, 1).data(),
                        Ack(f_, kRequesterQp, 1).size(), 0x777, now_);
  EXPECT_EQ(sel_->counter(LbCounter::kFeedbackNoFlow), 1u);
}

TEST_F(RepsTest, AcksBeyondTheHistoryOnlyReachTheLastSixteen) {
  Send(0, 40);
  Reverse(Ack(f_, kRequesterQp, 39));
  EXPECT_EQ(sel_->balancer().counters().reps_recycled, 16u);
}

}  // namespace
}  // namespace heddle::lb
