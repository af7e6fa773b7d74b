// The storm-tag stage's lean path (bursts of WRITE and SEND packets, per-message mode, nothing
// queued) against its general path: two stages, one with Options::lean and one without, take the
// same random traffic — in-order messages of random sizes on many QPs, IPv4 and IPv6, with
// duplicates, PSN jumps, lost first packets, a few READ requests and ACKs (bursts the lean path
// leaves to the general one), egress backlog on and off, a table small enough to fill, `set storm
// levels` mid-stream — and, in a second profile, mostly one-packet messages (WRITE/SEND only, with
// immediate, zero-length, bogus or short RETH lengths, cut-short messages) — and must agree on
// every packet's level and rewritten bytes, every table entry byte for byte, every counter and
// the request-size histogram.
#include <rte_mbuf.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "dataplane/pipeline/storm_control.h"
#include "dataplane/pipeline/storm_stage.h"
#include "dataplane/pipeline/testing/eal_pool_env.h"
#include "dataplane/pipeline/testing/mbuf_frame.h"
#include "dataplane/pkt/builder.h"
#include "gtest/gtest.h"

namespace heddle::pipeline {
namespace {

class Env : public test_util::EalPoolEnv {
 public:
  Env() : EalPoolEnv("storm_lean_test", 4095) {}
};
::testing::Environment* const env = ::testing::AddGlobalTestEnvironment(new Env);

struct Side {
  Side(const storm::LevelConfig& levels, bool lean, size_t capacity, const uint32_t* now_ms)
      : control(levels, 1) {
    std::bitset<kMaxPorts> hosts;
    hosts.set(0);
    stage = std::make_unique<StormTagStage>(
        StormTagStage::Options{.table = {.capacity = capacity, .idle_ms = 50},
                               .mtu = 1024,
                               .host_ports = hosts,
                               .backlog_source = storm::BacklogSource::kEgressQueue,
                               .control = &control,
                               .worker = 0,
                               .clock = [now_ms] { return *now_ms; },
                               .housekeep_every = 1,
                               .lean = lean});
  }
  ~Side() {
    for (auto& [m, held] : held_) rte_pktmbuf_free(m);
  }
  StormControl control;
  std::unique_ptr<StormTagStage> stage;
  LcoreStats stats;
  WorkerContext ctx{&stats};
  Burst b;
  std::vector<std::pair<rte_mbuf*, uint32_t*>> held_;
};

struct Qp {
  bool ipv6 = false;
  uint8_t host = 2;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  // The message in progress: opcode family, packets left.
  bool write = true;
  uint32_t left = 0;
  uint32_t size = 0;
};

std::vector<uint8_t> Frame(const Qp& q, uint8_t opcode, uint32_t psn, uint32_t dma_length,
                           uint16_t payload) {
  pkt::FrameSpec f;
  f.ipv6 = q.ipv6;
  f.dst_ip4 = {10, 0, 1, q.host};
  f.dst_ip6[15] = q.host;
  f.ip_id = static_cast<uint16_t>(psn);
  pkt::RoceSpec r;
  r.opcode = opcode;
  r.dest_qp = q.qpn;
  r.psn = psn & 0xffffff;
  r.dma_length = dma_length;
  r.payload_len = payload;
  r.syndrome = 0;
  return pkt::BuildRoce(f, r);
}

// Traffic of mostly one-packet messages (the `small` benchmark mix): WRITE and SEND only, with
// and without immediate, zero-length ones, WRITE only packets whose RETH length is bogus or
// shorter than their payload, and the same duplicates and jumps, also inside multi-packet ones.
struct Profile {
  uint32_t one_packet_per_mille = 0;  // of new messages: one packet of < MTU bytes
  // One-packet sizes from a few values only (the `small` mix repeats one): a burst's packets
  // mostly share a size, so the lean path's per-burst memo of the size's level is hit and missed.
  bool few_sizes = false;
};

uint8_t OnlyOpcode(bool write, std::mt19937& rng) {
  if (rng() % 4 != 0) return write ? pkt::op::kWriteOnly : pkt::op::kSendOnly;
  return write ? pkt::op::kWriteOnlyImm : pkt::op::kSendOnlyImm;
}

// The next packet of `q`: continues its message or starts one (sizes from one packet to many).
std::vector<uint8_t> NextPacket(Qp& q, std::mt19937& rng, const Profile& profile = {}) {
  constexpr uint32_t kMtu = 1024;
  const uint32_t pick = rng() % 1000;
  if (pick < 5) return Frame(q, pkt::op::kReadRequest, q.psn++, 65536, 0);
  if (pick < 10) return Frame(q, pkt::op::kAcknowledge, q.psn, 0, 0);
  uint32_t psn = q.psn;
  if (pick < 25) psn -= 1 + rng() % 3;      // a duplicate / retransmission
  if (pick >= 990) q.psn += 1 + rng() % 4;  // lost packets: a jump
  // Now and then a message is cut short (its last packets lost) and a one-packet one follows.
  if (profile.one_packet_per_mille > 0 && q.left != 0 && rng() % 100 == 0) q.left = 0;
  if (q.left == 0 && rng() % 1000 < profile.one_packet_per_mille) {
    q.write = rng() % 2;
    constexpr uint32_t kFew[] = {0, 0, 0, 0, 60, 900};
    const uint32_t size = profile.few_sizes ? kFew[rng() % 6] : rng() % 3 == 0 ? 0 : rng() % kMtu;
    uint32_t dma = size;
    if (q.write && rng() % 40 == 0) dma = rng() % 2 ? 0x80000000u + rng() % 1000 : size / 2;
    if (psn == q.psn) ++q.psn;
    return Frame(q, OnlyOpcode(q.write, rng), psn, q.write ? dma : 0, static_cast<uint16_t>(size));
  }
  if (q.left == 0) {
    q.write = rng() % 2;
    const uint32_t kind = rng() % 4;
    q.size = kind == 0   ? rng() % kMtu
             : kind == 1 ? rng() % (8 * kMtu)
             : kind == 2 ? rng() % (200 * kMtu)
                         : 0;
    q.left = std::max<uint32_t>(1, (q.size + kMtu - 1) / kMtu);
    if (rng() % 50 == 0 && q.left > 2)
      --q.left;  // its first packet lost: an orphan
    else {
      const bool only = q.left == 1;
      --q.left;
      const uint16_t len = static_cast<uint16_t>(only ? q.size : kMtu);
      if (psn == q.psn) ++q.psn;
      if (q.write) {
        return Frame(q, only ? OnlyOpcode(true, rng) : pkt::op::kWriteFirst, psn, q.size, len);
      }
      return Frame(q, only ? OnlyOpcode(false, rng) : pkt::op::kSendFirst, psn, 0, len);
    }
  }
  const bool last = q.left == 1;
  --q.left;
  if (psn == q.psn) ++q.psn;
  const uint16_t len =
      static_cast<uint16_t>(last ? (q.size % kMtu == 0 ? kMtu : q.size % kMtu) : kMtu);
  if (q.write) {
    return Frame(q, last ? pkt::op::kWriteLast : pkt::op::kWriteMiddle, psn, 0, len);
  }
  return Frame(q, last ? pkt::op::kSendLast : pkt::op::kSendMiddle, psn, 0, len);
}

void RunBurst(Side& s, const std::vector<std::vector<uint8_t>>& frames, uint32_t egress_backlog) {
  Burst& b = s.b;
  b.n = 0;
  b.ingress = 0;
  b.egress_backlog = egress_backlog;
  for (const auto& f : frames) {
    rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
    ASSERT_NE(m, nullptr);
    test_util::AppendFrame(m, f.data(), f.size());
    ASSERT_EQ(pkt::Parse(f.data(), f.size(), &b.desc[b.n]), pkt::ParseError::kOk);
    b.pkts[b.n] = m;
    b.egress[b.n] = 1;
    b.level[b.n] = 0;
    b.held[b.n] = nullptr;
    ++b.n;
  }
  ASSERT_EQ(s.stage->Process(s.ctx, b), frames.size());
}

// Packets leave heddled: the oldest `n` held ones.
void ReleaseOldest(Side& s, size_t n) {
  n = std::min(n, s.held_.size());
  for (size_t k = 0; k < n; ++k) {
    auto [m, held] = s.held_[k];
    ReleaseHeld(held);
    rte_pktmbuf_free(m);
  }
  s.held_.erase(s.held_.begin(), s.held_.begin() + static_cast<ptrdiff_t>(n));
}

void ExpectSameCounters(Side& a, Side& b) {
  const storm::TrackerCounters& x = a.stage->tracker().counters();
  const storm::TrackerCounters& y = b.stage->tracker().counters();
  EXPECT_EQ(x.requests_started, y.requests_started);
  EXPECT_EQ(x.requests_completed, y.requests_completed);
  EXPECT_EQ(x.orphans, y.orphans);
  EXPECT_EQ(x.abandoned, y.abandoned);
  EXPECT_EQ(x.duplicates, y.duplicates);
  EXPECT_EQ(x.psn_jumps, y.psn_jumps);
  EXPECT_EQ(x.bogus_length, y.bogus_length);
  EXPECT_EQ(x.overrun, y.overrun);
  const storm::QpTableCounters& p = a.stage->table().counters();
  const storm::QpTableCounters& q = b.stage->table().counters();
  EXPECT_EQ(p.inserted, q.inserted);
  EXPECT_EQ(p.table_full, q.table_full);
  EXPECT_EQ(p.evicted_idle, q.evicted_idle);
  EXPECT_EQ(p.evicted_on_insert, q.evicted_on_insert);
  for (int l = 0; l < storm::kMaxLevels; ++l) {
    EXPECT_EQ(a.stats.storm_level_packets[l].Get(), b.stats.storm_level_packets[l].Get()) << l;
    EXPECT_EQ(a.stats.storm_level_bytes[l].Get(), b.stats.storm_level_bytes[l].Get()) << l;
  }
  // The request sizes fed to the auto cutoffs.
  for (int k = 0; k < storm::SizeHistogram::kBuckets; ++k) {
    EXPECT_EQ(a.control.histogram(0)->bytes(k), b.control.histogram(0)->bytes(k)) << k;
  }
}

class StormLeanTest : public ::testing::TestWithParam<int> {};

// Seeds 1-8: messages of every size; 9-16: mostly one-packet messages (the `small` mix); 17-20:
// one-packet messages of a few sizes only, interleaved over the QPs of each burst.
TEST_P(StormLeanTest, LeanPathEqualsGeneralPath) {
  const int seed = GetParam();
  const Profile profile{.one_packet_per_mille = seed > 16  ? 1000u
                                                : seed > 8 ? 800u
                                                           : 0u,
                        .few_sizes = seed > 16};
  std::mt19937 rng(static_cast<uint32_t>(seed));
  storm::LevelConfig levels;
  levels.levels = 2 + seed % 7;  // 2..8
  // With a few one-packet sizes (0, 60, 900 B), cutoffs below the MTU put them on different
  // levels, so the per-burst memo of the last size's level is exercised across levels.
  const uint32_t first_cutoff = profile.few_sizes ? 32u : 1024u;
  for (int l = 0; l + 1 < levels.levels; ++l) levels.cutoffs[l] = first_cutoff << (3 * l);
  levels.control_level = static_cast<uint8_t>(levels.levels - 1);
  // Unknown-size SENDs: the lowest level, or a size somewhere among the cutoffs.
  levels.unknown_size = seed % 3 == 0 ? storm::kUnknownSizeLowest : 512u << (seed % 12);
  uint32_t now_ms = 1000;
  // A small table: it fills (table-full, evictions of idle entries) as QPs come and go.
  const size_t capacity = seed % 2 ? 64 : 4096;
  Side lean(levels, true, capacity, &now_ms);
  Side general(levels, false, capacity, &now_ms);
  std::vector<Qp> qps(seed % 3 == 0 ? 8 : 300);
  for (size_t k = 0; k < qps.size(); ++k) {
    qps[k].ipv6 = k % 5 == 0;
    qps[k].host = static_cast<uint8_t>(2 + k % 7);
    qps[k].qpn = static_cast<uint32_t>(0x100 + k);
    qps[k].psn = rng() & 0xffffff;  // some wrap around 2^24
  }
  size_t lean_bursts = 0;
  for (int burst = 0; burst < 400; ++burst) {
    std::vector<std::vector<uint8_t>> frames;
    const size_t n = 1 + rng() % kMaxBurst;
    // Runs of one QP (a NIC sends a message back to back) and interleaved QPs.
    size_t k = rng() % qps.size();
    for (size_t i = 0; i < n; ++i) {
      if (rng() % 3 != 0) k = rng() % qps.size();
      frames.push_back(NextPacket(qps[k], rng, profile));
    }
    // `set storm levels` now and then, K up or down, while packets are held: levels stored under
    // the old K must be capped to the new one.
    if (burst % 100 == 50) {
      levels.levels = 1 + static_cast<int>(rng() % 8);
      for (int l = 0; l + 1 < levels.levels; ++l) {
        levels.cutoffs[l] = (profile.few_sizes ? 64u : 2048u) << (2 * l);
      }
      levels.control_level = static_cast<uint8_t>(rng() % levels.levels);
      levels.unknown_size = rng() % 2 ? storm::kUnknownSizeLowest : 1 + rng() % (4u << 20);
      for (Side* side : {&lean, &general}) {
        side->control.Offline(0);
        ASSERT_TRUE(side->control.SetLevels(levels).ok());
        side->control.Online(0);
      }
    }
    // Usually nothing is queued (the lean path's case); sometimes the egress holds packets.
    const uint32_t backlog = rng() % 4 == 0 ? static_cast<uint32_t>(lean.held_.size()) : 0;
    bool lean_classes = true;
    for (const auto& f : frames) {
      pkt::PacketDesc d;
      ASSERT_EQ(pkt::Parse(f.data(), f.size(), &d), pkt::ParseError::kOk);
      lean_classes &=
          d.roce_class == pkt::RoceClass::kWrite || d.roce_class == pkt::RoceClass::kSend;
    }
    lean_bursts += lean_classes && backlog == 0;
    RunBurst(lean, frames, backlog);
    RunBurst(general, frames, backlog);
    ASSERT_EQ(lean.b.n, general.b.n);
    for (uint16_t i = 0; i < lean.b.n; ++i) {
      ASSERT_EQ(lean.b.level[i], general.b.level[i]) << "burst " << burst << " packet " << i;
      ASSERT_EQ(lean.b.held[i] == nullptr, general.b.held[i] == nullptr);
      const rte_mbuf* x = lean.b.pkts[i];
      const rte_mbuf* y = general.b.pkts[i];
      ASSERT_EQ(x->data_len, y->data_len);
      ASSERT_EQ(0, memcmp(rte_pktmbuf_mtod(x, const void*), rte_pktmbuf_mtod(y, const void*),
                          x->data_len))
          << "burst " << burst << " packet " << i;
      lean.held_.push_back({lean.b.pkts[i], lean.b.held[i]});
      general.held_.push_back({general.b.pkts[i], general.b.held[i]});
    }
    // The egress sends some of what it holds; time passes (entries idle out).
    const size_t leave = rng() % 2 ? lean.held_.size() : rng() % (lean.held_.size() + 1);
    ReleaseOldest(lean, leave);
    ReleaseOldest(general, leave);
    now_ms += rng() % 8 == 0 ? 60 : 1;
    if (burst % 16 == 0) {
      lean.stage->Poll(lean.ctx);  // the idle sweep, on both
      general.stage->Poll(general.ctx);
    }
    const storm::QpTable& ta = lean.stage->table();
    const storm::QpTable& tb = general.stage->table();
    for (size_t e = 0; e < ta.capacity(); ++e) {
      ASSERT_EQ(0, memcmp(&ta.entry(e), &tb.entry(e), sizeof(storm::QpEntry)))
          << "burst " << burst << " entry " << e;
    }
  }
  ExpectSameCounters(lean, general);
  // The comparison means something only if the lean path ran, and tracked something.
  EXPECT_GT(lean_bursts, 100u);
  // ... and the stage itself says it took the lean path (its one-packet form too), the general
  // side never.
  EXPECT_GT(lean.stage->lean_bursts(), 100u);
  EXPECT_GT(lean.stage->lean_one_packet_requests(), 0u);
  EXPECT_EQ(general.stage->lean_bursts(), 0u);
  EXPECT_GT(lean.stage->tracker().counters().requests_completed, 100u);
  EXPECT_GT(lean.stage->tracker().counters().duplicates, 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, StormLeanTest, ::testing::Range(1, 21));

}  // namespace
}  // namespace heddle::pipeline
