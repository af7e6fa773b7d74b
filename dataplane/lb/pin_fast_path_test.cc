// PinSelector::TryChooseFast() against Choose(): two selectors with the same configuration, seed
// and path tables see the same random traffic, one through Choose() alone, the other through the
// fast path (Choose() where it declines, its tally committed at random burst boundaries). Every
// packet must get the same path, index, verdict and set; the flow tables must stay equal byte for
// byte; the counters, the balancers' counters and the per-path loads must agree. The traffic mixes
// QPs over IPv4 (with and without options and VLAN tags) and IPv6, every opcode class, messages
// of one packet and of many (first/middle/last, abandoned, joined mid-way), control packets,
// non-RoCE and truncated frames, and feedback (ACK, NAK, RNR NAK, CNP, CE marks); between bursts
// it reconfigures (all six balancers, pin on/off, pin policies, crossing rules, thresholds),
// swaps path tables (sets that keep, lose or gain paths, prefixes without a set, no table),
// toggles expected feedback and sweeps idle entries, with time steps past the flowlet gap and the
// idle time. The flow table is small enough to fill up.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "dataplane/lb/lb_test_util.h"
#include "dataplane/lb/pin.h"
#include "dataplane/lb/rewrite.h"
#include "dataplane/pkt/builder.h"

namespace heddle::lb {
namespace {

using testing::Packet;

constexpr uint32_t kMtu = 256;

struct Qp {
  pkt::FrameSpec f;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint8_t group = pkt::op::kRc;  // transport group bits of the opcode
  // The message in progress: packets left and its kind.
  uint32_t left = 0;
  uint32_t bytes = 0;
  bool write = false;
};

std::shared_ptr<const PathTable> BuildTable(const PathTableSpec& spec) {
  auto t = PathTable::Build(spec);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::shared_ptr<const PathTable>(std::move(*t));
}

Path P(uint32_t entropy, uint16_t port, bool mac = false) {
  Path p;
  p.entropy = entropy;
  p.port = port;
  p.has_next_hop_mac = mac;
  if (mac) p.next_hop_mac = {0x02, 0xaa, 0, 0, 0, static_cast<uint8_t>(port)};
  return p;
}

// Path tables to swap between: sets that keep some paths of the others, lose some, grow, carry
// next-hop MACs; prefixes without a set; routes to "not balanced".
std::vector<std::shared_ptr<const PathTable>> Tables() {
  std::vector<std::shared_ptr<const PathTable>> out;
  auto prefix = [](const char* text) {
    auto p = ParsePrefix(text);
    EXPECT_TRUE(p.ok()) << p.status();
    return *p;
  };
  {  // 16 source ports on port 0, default for everything
    PathTableSpec s;
    s.sets.emplace_back();
    for (uint32_t i = 0; i < 16; ++i) s.sets[0].push_back(P(0xc000 + i, 0));
    s.default_set = 0;
    out.push_back(BuildTable(s));
  }
  {  // a subset (the first 5) and two ports; 10.1.0.0/24 has its own set
    PathTableSpec s;
    s.sets.emplace_back();
    for (uint32_t i = 0; i < 5; ++i) s.sets[0].push_back(P(0xc000 + i, 0));
    for (uint32_t i = 0; i < 3; ++i) s.sets[0].push_back(P(0xc000 + i, 1));
    s.sets.emplace_back();
    for (uint32_t i = 0; i < 3; ++i) s.sets[1].push_back(P(0xd000 + i, 1, true));
    s.routes.push_back({prefix("10.1.0.0/24"), 1});
    s.routes.push_back({prefix("10.1.0.7"), kRouteNoSet});
    s.default_set = 0;
    out.push_back(BuildTable(s));
  }
  {  // no default: only 10.1.0.0/25 and fd00::/16 are balanced, over 64 and 2 paths
    PathTableSpec s;
    s.sets.emplace_back();
    for (uint32_t i = 0; i < 64; ++i) s.sets[0].push_back(P(0xc000 + 3 * i, i % 2));
    s.sets.emplace_back();
    s.sets[1].push_back(P(0xc001, 0));
    s.sets[1].push_back(P(0xc007, 0));
    s.routes.push_back({prefix("10.1.0.0/25"), 0});
    s.routes.push_back({prefix("fd00::/16"), 1});
    out.push_back(BuildTable(s));
  }
  {  // one path
    PathTableSpec s;
    s.sets.push_back({P(0xc003, 0)});
    s.default_set = 0;
    out.push_back(BuildTable(s));
  }
  return out;
}

LbConfig RandomRuntime(std::mt19937_64& rng, LbConfig c) {
  c.balancer = static_cast<BalancerKind>(rng() % static_cast<int>(BalancerKind::kCount));
  c.pin = rng() % 5 != 0;
  c.pin_policy = static_cast<PinPolicy>(rng() % 3 == 0 ? rng() % 3 : 0);
  c.crossing = rng() % 3 == 0 ? CrossingRule::kSprayRest : CrossingRule::kStayPinned;
  constexpr uint64_t kThresholds[] = {0, 1, 300, 1024, 4096, 20'000, 100'000};
  c.threshold_bytes = kThresholds[rng() % std::size(kThresholds)];
  c.flowlet_gap_ns = 1000 + rng() % 100'000;
  c.reps_cache_size = 1 + static_cast<uint32_t>(rng() % kMaxRepsCache);
  return c;
}

class Differential {
 public:
  // `fixed`: these run-time parameters for the whole run (no reconfiguration between bursts).
  Differential(uint64_t seed, uint32_t num_qps, uint32_t capacity, FlowUnit unit,
               const LbConfig* fixed = nullptr)
      : rng_(seed), tables_(Tables()), reconfigure_(fixed == nullptr) {
    config_ = fixed != nullptr ? *fixed : RandomRuntime(rng_, LbConfig{});
    config_.flow_unit = unit;
    config_.seed = seed;
    config_.flow_capacity = capacity;
    config_.flow_idle_ns = 2'000'000;
    config_.max_path_sets = 1 + static_cast<uint32_t>(seed % 3);  // shared PathLoads slots too
    field_ = seed % 4 == 3 ? EntropyField::kIpv6FlowLabel : EntropyField::kUdpSourcePort;
    config_.entropy_field = field_;
    EXPECT_TRUE(ValidateLbConfig(config_).ok()) << ValidateLbConfig(config_);
    table_ = tables_[0];
    ref_ = std::make_unique<PinSelector>(config_, table_.get());
    fast_ = std::make_unique<PinSelector>(config_, table_.get());
    for (uint32_t q = 0; q < num_qps; ++q) qps_.push_back(RandomQp(q));
  }

  void Run(int packets) {
    int burst_left = 1;
    for (int n = 0; n < packets; ++n) {
      if (--burst_left == 0) {
        EndBurst();
        Between();
        params_ = fast_->Params(field_);
        burst_left = 1 + static_cast<int>(rng_() % 64);
      }
      Step();
      if (HasFailure()) return;
    }
    EndBurst();
    CompareLoads();
  }

  // What the fast path handled, to check that the test exercises it.
  uint64_t fast_packets() const { return fast_packets_; }
  uint64_t slow_packets() const { return slow_packets_; }
  // Pinned or sprayed by Choose() after the fast path declined (a new entry, a new table).
  uint64_t slow_stateful() const { return slow_stateful_; }
  // Parse()'s descs offered to TryChooseRewriteParsed(), and those it placed.
  uint64_t parsed_offered() const { return parsed_offered_; }
  uint64_t parsed_packets() const { return parsed_packets_; }
  // Offered to TryChooseRewriteWhole<true>() (no history, loads or flow-label entropy).
  uint64_t plain_offered() const { return plain_offered_; }

 private:
  static bool HasFailure() { return ::testing::Test::HasFailure(); }

  Qp RandomQp(uint32_t q) {
    Qp qp;
    qp.qpn = static_cast<uint32_t>(rng_() & 0xffffff);
    qp.psn = static_cast<uint32_t>(rng_() & 0xffffff);
    qp.f.udp_sport = static_cast<uint16_t>(0xc000 + rng_() % 64);
    const uint32_t kind = rng_() % 10;
    if (kind < 2) {
      qp.f.ipv6 = true;
      qp.f.src_ip6[15] = static_cast<uint8_t>(q);
      qp.f.dst_ip6[14] = static_cast<uint8_t>(rng_() % 3);
      if (rng_() % 2) qp.f.dst_ip6[0] = 0xfe;  // outside fd00::/16
    } else {
      qp.f.src_ip4 = {10, 0, static_cast<uint8_t>(q >> 8), static_cast<uint8_t>(q)};
      qp.f.dst_ip4 = {10, 1, static_cast<uint8_t>(rng_() % 2), static_cast<uint8_t>(rng_() % 200)};
      if (kind == 2) qp.f.ipv4_options = {1, 1, 1, 1};
    }
    if (rng_() % 8 == 0) qp.f.vlans.push_back({});
    if (rng_() % 6 == 0) qp.group = rng_() % 2 ? pkt::op::kUc : pkt::op::kUd;
    return qp;
  }

  Packet Build(const Qp& qp, pkt::RoceSpec r) {
    r.dest_qp = qp.qpn;
    if (qp.group == pkt::op::kUd) r.opcode = pkt::op::kUd | pkt::op::kSendOnly;
    return testing::Make(qp.f, r);
  }

  // The next request-direction packet of a random QP.
  Packet NextPacket() {
    Qp& qp = qps_[rng_() % qps_.size()];
    pkt::RoceSpec r;
    r.psn = qp.psn;
    qp.psn = (qp.psn + 1) & 0xffffff;
    const uint32_t what = rng_() % 100;
    if (what < 4) {  // control opcodes
      constexpr uint8_t kControl[] = {pkt::op::kAcknowledge, pkt::op::kAtomicAcknowledge,
                                      pkt::op::kCnp, pkt::op::kRd | pkt::op::kSendOnly};
      r.opcode = kControl[rng_() % std::size(kControl)];
      return Build(qp, r);
    }
    if (what < 6) {  // a packet joined mid-way (a middle or last without its first)
      r.opcode = rng_() % 2 ? pkt::op::kWriteMiddle : pkt::op::kSendLast;
      r.payload_len = kMtu;
      return Build(qp, r);
    }
    if (qp.left == 0 || what < 8) {  // a new message (what < 8: abandons the one in progress)
      const uint32_t size_kind = rng_() % 10;
      uint32_t bytes = size_kind < 5   ? static_cast<uint32_t>(rng_() % (kMtu + 1))
                       : size_kind < 8 ? static_cast<uint32_t>(rng_() % 8192)
                                       : static_cast<uint32_t>(rng_() % 65536);
      const uint32_t kind = rng_() % 10;
      if (kind == 0) {
        r.opcode = pkt::op::kReadRequest;
        r.dma_length = bytes;
        qp.left = 0;
        return Build(qp, r);
      }
      if (kind == 1) {
        r.opcode = rng_() % 2 ? pkt::op::kCompareSwap : pkt::op::kFetchAdd;
        qp.left = 0;
        return Build(qp, r);
      }
      qp.write = kind < 6;
      qp.bytes = bytes;
      const uint32_t n = bytes == 0 ? 1 : (bytes + kMtu - 1) / kMtu;
      qp.left = n;
    }
    const uint32_t n = qp.bytes == 0 ? 1 : (qp.bytes + kMtu - 1) / kMtu;
    const uint32_t i = n - qp.left;
    const bool first = i == 0, last = qp.left == 1;
    --qp.left;
    r.opcode = testing::MessageOpcode(qp.write, first, last);
    r.opcode |= qp.group;
    r.dma_length = rng_() % 16 == 0 ? static_cast<uint32_t>(rng_()) : qp.bytes;
    r.payload_len = last ? qp.bytes - i * kMtu : kMtu;
    return Build(qp, r);
  }

  void Step() {
    now_ += rng_() % 16 == 0 ? rng_() % 3'000'000 : rng_() % 2000;
    const uint32_t what = rng_() % 100;
    if (what < 4) {  // feedback, the same to both
      const Qp& qp = qps_[rng_() % qps_.size()];
      const uint32_t kind = rng_() % 4;
      const uint32_t back = static_cast<uint32_t>(rng_() % 24);
      const uint32_t psn = (qp.psn - back) & 0xffffff;
      Packet p = kind == 3 ? testing::Cnp(qp.f, 0x99)
                           : testing::Ack(qp.f, 0x99, psn,
                                          kind == 0   ? 0
                                          : kind == 1 ? static_cast<uint8_t>(0x60)
                                                      : static_cast<uint8_t>(0x20),
                                          rng_() % 4 == 0);
      const Feedback a = ref_->OnReversePacket(p.desc, p.data(), p.size(), qp.qpn, now_);
      const Feedback b = fast_->OnReversePacket(p.desc, p.data(), p.size(), qp.qpn, now_);
      EXPECT_EQ(a.kind, b.kind);
      return;
    }
    Packet p = NextPacket();
    if (rng_() % 10 == 0 && (p.desc.flags & pkt::kFlagRoce)) {  // a non-zero UDP checksum
      p.bytes[p.desc.l4_off + 6] = static_cast<uint8_t>(1 + rng_() % 255);
    }
    size_t len = p.size();
    uint8_t* frame = p.data();
    pkt::PacketDesc d = p.desc;
    if (what < 6) {
      len = d.bth_off + rng_() % pkt::kBthLen;  // headers cut short: malformed
    } else if (what < 7) {
      d.flags &= static_cast<uint16_t>(~pkt::kFlagRoce);  // not RoCE
    } else if (what < 8) {
      frame = nullptr;
    }
    // Otherwise `d` is Parse()'s of the frame, as in the pipeline (the checksum is not in it).
    Offer(d, frame, len, what >= 8);
  }

  // One packet through both: the reference chooses with Choose() and rewrites with RewriteFull()
  // (no ICRC memo); the other takes TryChooseFast(), TryChooseRewriteFast() or, for a desc
  // Parse() made of this frame (`parsed`), TryChooseRewriteParsed() or TryChooseRewriteWhole()
  // (their rewrite with a memo),
  // and Choose() and Rewrite() where they decline. Same choice, same bytes.
  void Offer(const pkt::PacketDesc& d, uint8_t* frame, size_t len, bool parsed) {
    std::vector<uint8_t> a, b;
    if (frame != nullptr) {
      a.assign(frame, frame + len);
      b.assign(frame, frame + len);
    }
    uint8_t* fa = frame != nullptr ? a.data() : nullptr;
    uint8_t* fb = frame != nullptr ? b.data() : nullptr;
    const PathChoice want = ref_->Choose(d, fa, len, now_);
    RewriteResult want_r = RewriteResult::kNotRoce;
    if (want.path != nullptr) want_r = RewriteFull(fa, len, d, *want.path, field_, nullptr);

    const uint32_t how = static_cast<uint32_t>(rng_() % 4);
    const bool with_rewrite = how != 0;
    PathChoice got;
    RewriteResult got_r = RewriteResult::kNotRoce;
    bool fast;
    if (how >= 2 && parsed) {
      ++parsed_offered_;
      // The burst's parameters, as the stage takes them (at the start of the burst). A parsed
      // frame here is whole (`len` is its length): TryChooseRewriteWhole() applies too, and its
      // plain variant when the parameters allow it (as the stage picks it for a burst).
      const bool plain = !params_.record_or_track && params_.sport_always;
      if (how == 2) {
        fast =
            fast_->TryChooseRewriteParsed(params_, d, fb, len, now_, icrc_, tally_, &got, &got_r);
      } else if (plain && rng_() % 2 == 0) {
        ++plain_offered_;
        fast =
            fast_->TryChooseRewriteWhole<true>(params_, d, fb, now_, icrc_, tally_, &got, &got_r);
      } else {
        fast = fast_->TryChooseRewriteWhole(params_, d, fb, now_, icrc_, tally_, &got, &got_r);
      }
      if (fast) ++parsed_packets_;
    } else if (with_rewrite) {
      fast = fast_->TryChooseRewriteFast(d, fb, len, now_, field_, icrc_, tally_, &got, &got_r);
    } else {
      fast = fast_->TryChooseFast(d, fb, len, now_, tally_, &got);
    }
    if (fast) {
      ++fast_packets_;
      EXPECT_NE(got.path, nullptr);
      if (!with_rewrite) got_r = Rewrite(fb, len, d, *got.path, field_, &icrc_);
    } else {
      ++slow_packets_;
      got = fast_->Choose(d, fb, len, now_);
      if (got.verdict == Verdict::kPinned || got.verdict == Verdict::kSprayed) ++slow_stateful_;
      if (got.path != nullptr) got_r = Rewrite(fb, len, d, *got.path, field_, &icrc_);
    }
    ASSERT_EQ(got.path, want.path) << "packet " << fast_packets_ + slow_packets_;
    ASSERT_EQ(got.index, want.index);
    ASSERT_EQ(got.verdict, want.verdict);
    if (want.path != nullptr) {
      ASSERT_EQ(got.set_id, want.set_id);
    }
    ASSERT_EQ(got_r, want_r);
    ASSERT_EQ(a, b) << "rewritten bytes differ";
    CompareFlows();
  }

  void CompareFlows() {
    const FlowTable& a = ref_->flows();
    const FlowTable& b = fast_->flows();
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.counters().inserted, b.counters().inserted);
    ASSERT_EQ(a.counters().table_full, b.counters().table_full);
    ASSERT_EQ(a.counters().evicted_on_insert, b.counters().evicted_on_insert);
    ASSERT_EQ(a.counters().evicted_idle, b.counters().evicted_idle);
    for (size_t i = 0; i < a.capacity(); ++i) {
      ASSERT_EQ(std::memcmp(&a.entry(i), &b.entry(i), sizeof(FlowEntry)), 0) << "entry " << i;
    }
  }

  void EndBurst() {
    fast_->Commit(tally_);
    for (int c = 0; c < kNumLbCounters; ++c) {
      EXPECT_EQ(fast_->counter(static_cast<LbCounter>(c)), ref_->counter(static_cast<LbCounter>(c)))
          << LbCounterName(static_cast<LbCounter>(c));
    }
    const BalancerCounters& a = ref_->balancer().counters();
    const BalancerCounters& b = fast_->balancer().counters();
    EXPECT_EQ(a.reps_recycled, b.reps_recycled);
    EXPECT_EQ(a.reps_not_recycled, b.reps_not_recycled);
    EXPECT_EQ(a.reps_overflow, b.reps_overflow);
    EXPECT_EQ(a.reps_reused, b.reps_reused);
    EXPECT_EQ(a.reps_explored, b.reps_explored);
    EXPECT_EQ(ref_->balancer().flowlets(), fast_->balancer().flowlets());
  }

  void CompareLoads() {
    for (uint32_t s = 0; s < 3; ++s) {
      for (uint32_t p = 0; p < kMaxPaths; ++p) {
        EXPECT_EQ(ref_->loads().Score(s, p, now_), fast_->loads().Score(s, p, now_));
      }
    }
  }

  // Between bursts: what the worker does between two bursts, the same to both.
  void Between() {
    const uint32_t what = rng_() % 100;
    if (what < 3 && reconfigure_) {
      config_ = RandomRuntime(rng_, config_);
      ref_->Reconfigure(config_);
      fast_->Reconfigure(config_);
    } else if (what < 5) {
      const uint64_t t = rng_() % 3 == 0 ? 0 : rng_() % 50'000;
      ref_->SetThresholdBytes(t);
      fast_->SetThresholdBytes(t);
    } else if (what < 6) {
      // Mostly tables with a default set; sometimes the one without, rarely none.
      const uint32_t pick = rng_() % 20;
      table_ = pick == 0  ? nullptr
               : pick < 4 ? tables_[2]
                          : tables_[(pick % 3) == 2 ? 3 : pick % 3];
      ref_->SetPathTable(table_.get());
      fast_->SetPathTable(table_.get());
    } else if (what < 10) {
      const bool expected = rng_() % 2;
      ref_->SetFeedbackExpected(expected);
      fast_->SetFeedbackExpected(expected);
    } else if (what < 20) {
      const size_t begin = rng_() % ref_->flows().capacity();
      const size_t count = 1 + rng_() % 64;
      EXPECT_EQ(ref_->SweepIdle(begin, count, now_), fast_->SweepIdle(begin, count, now_));
    }
  }

  std::mt19937_64 rng_;
  std::vector<std::shared_ptr<const PathTable>> tables_;
  bool reconfigure_;
  std::shared_ptr<const PathTable> table_;
  LbConfig config_;
  std::unique_ptr<PinSelector> ref_;
  std::unique_ptr<PinSelector> fast_;
  PinSelector::BurstTally tally_;
  PinSelector::FastParams params_{};
  EntropyField field_;
  IcrcDeltaCache icrc_;
  std::vector<Qp> qps_;
  uint64_t now_ = 1'000'000;
  uint64_t fast_packets_ = 0, slow_packets_ = 0, slow_stateful_ = 0;
  uint64_t parsed_offered_ = 0, parsed_packets_ = 0, plain_offered_ = 0;
};

struct Case {
  uint64_t seed;
  uint32_t qps;
  uint32_t capacity;
  FlowUnit unit;
};

class PinFastPathTest : public ::testing::TestWithParam<Case> {};

TEST_P(PinFastPathTest, SameAsChoose) {
  const Case& c = GetParam();
  Differential d(c.seed, c.qps, c.capacity, c.unit);
  d.Run(30'000);
  // The fast path carries the traffic it is for: most pinned and sprayed packets of flows with an
  // entry (a table that fills up sends many to Choose() to be inserted).
  const uint64_t stateful = d.fast_packets() + d.slow_stateful();
  if (c.qps * 4 <= c.capacity * 3) {
    EXPECT_GT(d.fast_packets(), stateful * 8 / 10);
    EXPECT_GT(d.parsed_packets(), d.parsed_offered() / 4);
    // The plain variant ran too, but where the entropy is the IPv6 flow label (seed % 4 == 3).
    if (c.seed % 4 != 3) {
      EXPECT_GT(d.plain_offered(), 0u);
    }
  } else {
    EXPECT_GT(d.fast_packets(), 0u);
    EXPECT_GT(d.parsed_packets(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    RandomTraffic, PinFastPathTest,
    ::testing::Values(Case{1, 8, 1024, FlowUnit::kRequest}, Case{2, 64, 1024, FlowUnit::kRequest},
                      Case{3, 300, 64, FlowUnit::kRequest}, Case{4, 8, 1024, FlowUnit::kQp},
                      Case{5, 64, 256, FlowUnit::kQp}, Case{6, 300, 64, FlowUnit::kQp},
                      Case{7, 1, 16, FlowUnit::kRequest}, Case{8, 600, 4096, FlowUnit::kRequest}));

// Every balancer and pin policy on its own for a whole run (the random runs above change them
// between bursts), in both flow units.
TEST(PinFastPathFixed, EveryBalancerAndPolicy) {
  for (int k = 0; k < static_cast<int>(BalancerKind::kCount); ++k) {
    for (int policy = 0; policy < 3; ++policy) {
      for (FlowUnit unit : {FlowUnit::kRequest, FlowUnit::kQp}) {
        LbConfig c;
        c.balancer = static_cast<BalancerKind>(k);
        c.pin_policy = static_cast<PinPolicy>(policy);
        c.threshold_bytes = 6000;
        c.flowlet_gap_ns = 20'000;
        SCOPED_TRACE(::testing::Message()
                     << BalancerKindName(c.balancer) << " " << PinPolicyName(c.pin_policy) << " "
                     << FlowUnitName(unit));
        Differential d(1000 + k * 6 + policy * 2 + static_cast<int>(unit), 40, 256, unit, &c);
        d.Run(6000);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// The recent-flow cache trusts a slot on its tag alone, so every removal of an entry must empty
// the slots that name it before the fast path runs again: removed by the selector's sweep, by an
// insert that replaces it, or behind the selector's back through mutable_flows() (the next
// Params() sees it). A stale slot would place the packet on an emptied entry (or another flow's):
// the fast path must decline instead, and Choose() insert the flow afresh.
TEST(PinFastPathCache, RemovedEntriesAreNotServedFromTheCache) {
  LbConfig c;
  c.flow_capacity = 16;
  c.flow_idle_ns = 1000;
  const auto table = testing::DefaultTable(8);
  PinSelector sel(c, table.get());
  const pkt::FrameSpec f = testing::Hosts(1, 2);
  pkt::RoceSpec r;
  r.opcode = pkt::op::kSendOnly;
  r.dest_qp = 0x123;
  IcrcDeltaCache icrc;
  PinSelector::BurstTally tally;
  uint64_t now = 10'000;
  // Places one packet of the flow by the fast path; true if it took it.
  auto fast = [&]() {
    testing::Packet p = testing::Make(f, r);
    ++r.psn;
    PathChoice out;
    RewriteResult rw;
    const PinSelector::FastParams params = sel.Params(EntropyField::kUdpSourcePort);
    const bool took =
        sel.TryChooseRewriteParsed(params, p.desc, p.data(), p.size(), now, icrc, tally, &out, &rw);
    sel.Commit(tally);
    return took;
  };
  auto choose = [&]() {
    testing::Packet p = testing::Make(f, r);
    ++r.psn;
    EXPECT_NE(sel.Choose(p.desc, p.data(), p.size(), now).path, nullptr);
  };
  for (int way = 0; way < 2; ++way) {
    SCOPED_TRACE(way == 0 ? "selector's sweep" : "sweep through mutable_flows()");
    EXPECT_FALSE(fast());  // no entry yet
    choose();              // inserts it
    EXPECT_TRUE(fast());   // found in the table, then in the cache
    EXPECT_TRUE(fast());
    now += 5000;  // idle
    if (way == 0) {
      EXPECT_EQ(sel.SweepIdle(0, 16, now), 1u);
    } else {
      EXPECT_EQ(sel.mutable_flows().SweepIdle(0, 16, now), 1u);
    }
    EXPECT_EQ(sel.flows().size(), 0u);
    EXPECT_FALSE(fast());  // the cached slot went with the entry
    EXPECT_EQ(sel.flows().size(), 0u);
  }
}

}  // namespace
}  // namespace heddle::lb
