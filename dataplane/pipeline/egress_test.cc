// The strict-priority egress (PrioEgress inside a Worker) on a slow uplink: a ring-backed ethdev
// whose TX ring holds 31 packets and which the test drains at its own pace, a few packets between
// polls. A test stage gives every RoCE packet the level (dest QP & 7) and a held counter per QP;
// its PSN is the packet's identity, so each test asserts exactly which packets leave, in which
// order, and which are dropped.
#include "dataplane/pipeline/egress.h"

#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/pipeline/stages.h"
#include "dataplane/pipeline/testing/mbuf_frame.h"
#include "dataplane/pipeline/worker.h"
#include "dataplane/pkt/builder.h"
#include "drivers/dpdk/eal.h"
#include "gtest/gtest.h"

namespace heddle::pipeline {
namespace {

class Env : public ::testing::Environment {
 public:
  void SetUp() override {
    dpdk::EalParams p;
    p.program = "egress_test";
    p.no_huge = true;
    p.memory_mb = 128;
    p.log_level = "error";
    ASSERT_TRUE(dpdk::InitEal(p).ok());
    pool = rte_pktmbuf_pool_create("egress_test", 4095, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
    ASSERT_NE(pool, nullptr);
  }
  void TearDown() override { dpdk::CleanupEal(); }
  static inline rte_mempool* pool = nullptr;
};
::testing::Environment* const env = ::testing::AddGlobalTestEnvironment(new Env);

constexpr unsigned kSlowRing = 32;  // an rte_ring of 32 slots holds 31 packets
constexpr unsigned kSlowHolds = kSlowRing - 1;

struct RingPort {
  rte_ring* rx;
  rte_ring* tx;
  uint16_t port_id;
};

RingPort MakePort(const std::string& name, unsigned tx_size) {
  RingPort p;
  p.rx = rte_ring_create((name + "_rx").c_str(), 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  p.tx = rte_ring_create((name + "_tx").c_str(), tx_size, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  int id = rte_eth_from_rings(name.c_str(), &p.rx, 1, &p.tx, 1, 0);
  EXPECT_GE(id, 0);
  p.port_id = static_cast<uint16_t>(id);
  rte_eth_conf conf{};
  EXPECT_EQ(rte_eth_dev_configure(p.port_id, 1, 1, &conf), 0);
  EXPECT_EQ(rte_eth_rx_queue_setup(p.port_id, 0, 256, 0, nullptr, Env::pool), 0);
  EXPECT_EQ(rte_eth_tx_queue_setup(p.port_id, 0, 256, 0, nullptr), 0);
  EXPECT_EQ(rte_eth_dev_start(p.port_id), 0);
  return p;
}

// A packet's identity: its level and its sequence number (carried in the PSN).
using Id = std::pair<int, uint32_t>;
using Ids = std::vector<Id>;

std::vector<uint8_t> Frame(Id id) {
  pkt::RoceSpec r;
  r.opcode = pkt::op::kSendOnly;
  r.dest_qp = 0x100 + static_cast<uint32_t>(id.first);  // one QP per level
  r.psn = id.second;
  r.payload_len = 64 + id.second % 64;  // sizes differ, so byte counts are checked too
  return pkt::BuildRoce(pkt::FrameSpec{}, r);
}

Id IdOf(const rte_mbuf* m) {
  pkt::PacketDesc d;
  EXPECT_EQ(pkt::Parse(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, &d), pkt::ParseError::kOk);
  return {static_cast<int>(d.dest_qp & 7), d.psn};
}

// `n` packets of `level`, numbered from `first`.
Ids Seq(int level, uint32_t first, uint32_t n) {
  Ids out;
  for (uint32_t i = 0; i < n; ++i) out.emplace_back(level, first + i);
  return out;
}
Ids Cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// "test-level": level = dest QP & 7; held = the fixture's counter of that QP, incremented here as
// storm-tag does. Counts its Poll() calls.
class LevelFromQpStage final : public Stage {
 public:
  LevelFromQpStage(std::array<uint32_t, 8>* held, int* polls, bool count_held)
      : held_(held), polls_(polls), count_held_(count_held) {}
  const char* name() const override { return "test-level"; }
  uint16_t Process(WorkerContext& ctx, Burst& b) override {
    for (uint16_t i = 0; i < b.n; ++i) {
      if (!(b.desc[i].flags & pkt::kFlagRoce)) continue;
      const int level = static_cast<int>(b.desc[i].dest_qp & 7);
      b.level[i] = static_cast<uint8_t>(level);
      b.held[i] = &(*held_)[level];
      if (count_held_) ++(*held_)[level];
    }
    return b.n;
  }
  void Poll(WorkerContext& ctx) override { ++*polls_; }

 private:
  std::array<uint32_t, 8>* held_;
  int* polls_;
  bool count_held_;
};

class EgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    const std::string tag = std::to_string(n++);
    host_ = MakePort("eghost" + tag, host_tx_ring_);
    uplink_ = MakePort("egup" + tag, kSlowRing);
    stats_ = std::make_unique<DataplaneStats>(2, std::vector<unsigned>{1});
    avail_before_ = rte_mempool_avail_count(Env::pool);
  }
  void TearDown() override {
    worker_.reset();  // frees whatever a failed test left queued
    for (auto* p : {&host_, &uplink_}) {
      Take(*p, ~0u);
      rte_eth_dev_stop(p->port_id);
      rte_eth_dev_close(p->port_id);
      rte_ring_free(p->rx);
      rte_ring_free(p->tx);
    }
  }

  void MakeWorker(uint32_t queue_packets, bool count_held = true) {
    WorkerSetup s;
    s.lcore_id = 1;
    s.rx = {{0, host_.port_id, 0}, {1, uplink_.port_id, 0}};
    s.port_ids[0] = host_.port_id;
    s.port_ids[1] = uplink_.port_id;
    s.num_ports = 2;
    s.stats = stats_->lcore(0);
    s.stop = &stop_;
    s.egress_queue_packets = queue_packets;
    s.egress_drain_attempts = 4;
    std::array<uint16_t, kMaxPorts> peer;
    peer.fill(kNoEgress);
    peer[0] = 1;
    peer[1] = 0;
    s.stages.push_back(std::make_unique<LevelFromQpStage>(&held_, &stage_polls_, count_held));
    s.stages.push_back(std::make_unique<PortForwardStage>(peer));
    worker_ = std::make_unique<Worker>(std::move(s));
  }

  // Puts `ids` on the port's RX ring and polls until the worker has received all of them.
  void Arrive(RingPort& p, const Ids& ids) {
    for (Id id : ids) {
      const std::vector<uint8_t> f = Frame(id);
      rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
      ASSERT_NE(m, nullptr);
      test_util::AppendFrame(m, f.data(), f.size());
      ASSERT_EQ(rte_ring_enqueue(p.rx, m), 0);
      bytes_[id] = f.size();
    }
    while (rte_ring_count(p.rx) > 0) Poll();
  }
  void Poll() {
    worker_->PollOnce();
    ++polls_;
  }
  // The slow link sends: takes up to `n` packets off the port's TX ring, oldest first.
  Ids Take(RingPort& p, unsigned n) {
    Ids out;
    void* m;
    while (out.size() < n && rte_ring_dequeue(p.tx, &m) == 0) {
      out.push_back(IdOf(static_cast<rte_mbuf*>(m)));
      rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    }
    return out;
  }
  // Takes `n` from the uplink, polls once (no arrivals: the idle retry refills the ring) and
  // returns what was taken.
  Ids TakeAndPoll(unsigned n) {
    Ids out = Take(uplink_, n);
    Poll();
    return out;
  }
  // Fills the uplink's TX ring with 31 level-0 packets numbered 0..30, which leave at once.
  void Clog() {
    Arrive(host_, Seq(0, 0, kSlowHolds));
    ASSERT_EQ(rte_ring_count(uplink_.tx), kSlowHolds);
    ASSERT_EQ(worker_->egress()->queued(), 0u);
  }

  // Depth gauges, held counters and the scheduler's own queues all agree with `waiting`, the
  // packets that should still be queued for the uplink.
  void ExpectQueued(const Ids& waiting) {
    std::array<uint32_t, 8> want{};
    for (Id id : waiting) ++want[id.first];
    StatsSnapshot s = stats_->Snapshot();
    for (int l = 0; l < 8; ++l) {
      EXPECT_EQ(s.egress_level_depth[l], want[l]) << "level " << l;
      EXPECT_EQ(worker_->egress()->queued(1, l), want[l]) << "level " << l;
      EXPECT_EQ(held_[l], want[l]) << "level " << l;
    }
    EXPECT_EQ(worker_->egress()->queued(1), waiting.size());
  }

  uint64_t Drops(DropReason r) { return stats_->Snapshot().drops[static_cast<int>(r)]; }
  uint64_t BytesOf(const Ids& ids) {
    uint64_t n = 0;
    for (Id id : ids) n += bytes_.at(id);
    return n;
  }

  unsigned host_tx_ring_ = 1024;
  RingPort host_, uplink_;
  std::unique_ptr<DataplaneStats> stats_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<Worker> worker_;
  std::array<uint32_t, 8> held_{};
  std::map<Id, size_t> bytes_;
  int stage_polls_ = 0, polls_ = 0;
  unsigned avail_before_ = 0;
};

TEST_F(EgressTest, QueuedLevelsLeaveInStrictPriorityAndFifoWithinALevel) {
  MakeWorker(256);
  Clog();
  // 60 packets over four levels, interleaved; the uplink is full, so every one of them waits.
  const int pattern[] = {0, 3, 1, 3, 2, 0};
  Ids mixed;
  for (uint32_t j = 0; j < 60; ++j) mixed.emplace_back(pattern[j % 6], 100 + j);
  Arrive(host_, mixed);
  ExpectQueued(mixed);

  Ids want = Seq(0, 0, kSlowHolds);  // the clog first, then level 3, 2, 1, 0, each in arrival order
  for (int level : {3, 2, 1, 0}) {
    for (Id id : mixed) {
      if (id.first == level) want.push_back(id);
    }
  }
  // The link sends 8 at a time; after every idle poll exactly the packets behind the ring's
  // contents are still queued.
  Ids got;
  while (got.size() < want.size()) {
    Ids step = TakeAndPoll(8);
    ASSERT_FALSE(step.empty()) << "stalled after " << got.size();
    got.insert(got.end(), step.begin(), step.end());
    const size_t out = got.size() + rte_ring_count(uplink_.tx);
    ExpectQueued(Ids(want.begin() + std::min(out, want.size()), want.end()));
  }
  EXPECT_EQ(got, want);

  StatsSnapshot s = stats_->Snapshot();
  EXPECT_EQ(s.egress_level_tx[0], kSlowHolds + 20);
  EXPECT_EQ(s.egress_level_tx[1], 10u);
  EXPECT_EQ(s.egress_level_tx[2], 10u);
  EXPECT_EQ(s.egress_level_tx[3], 20u);
  EXPECT_EQ(s.ports[1].tx_packets, want.size());
  EXPECT_EQ(s.ports[1].tx_bytes, BytesOf(want));
  for (uint64_t d : s.drops) EXPECT_EQ(d, 0u);
  for (uint64_t d : s.egress_level_drops) EXPECT_EQ(d, 0u);
  EXPECT_EQ(stage_polls_, polls_);  // the stage hook ran once per poll loop, busy or idle
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(EgressTest, ABurstThePortTakesWholeLeavesInArrivalOrder) {
  MakeWorker(64);
  const Ids in = {{0, 1}, {2, 2}, {0, 3}, {7, 4}, {2, 5}, {1, 6}, {7, 7}, {0, 8}};
  Arrive(host_, in);
  EXPECT_EQ(Take(uplink_, ~0u), in);
  ExpectQueued({});
  StatsSnapshot s = stats_->Snapshot();
  EXPECT_EQ(s.egress_level_tx[7], 2u);
  EXPECT_EQ(s.egress_level_tx[2], 2u);
  EXPECT_EQ(s.egress_level_tx[1], 1u);
  EXPECT_EQ(s.egress_level_tx[0], 3u);
  EXPECT_EQ(s.ports[1].tx_bytes, BytesOf(in));
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(EgressTest, ANewHigherLevelOvertakesQueuedLowerOnes) {
  MakeWorker(64);
  Clog();
  Arrive(host_, Cat({Seq(1, 100, 10), Seq(0, 200, 5)}));
  EXPECT_EQ(TakeAndPoll(4), Seq(0, 0, 4));  // the ring now ends with level-1 100..103
  // Arrivals while the port is backlogged: queued behind their level, then the port is served.
  EXPECT_EQ(Take(uplink_, 4), Seq(0, 4, 4));
  Arrive(host_, {{5, 300}, {1, 110}, {5, 301}});
  Ids got = Take(uplink_, ~0u);
  for (int i = 0; i < 100 && (worker_->egress()->queued() > 0 || rte_ring_count(uplink_.tx) > 0);
       ++i) {
    Ids step = TakeAndPoll(5);
    got.insert(got.end(), step.begin(), step.end());
  }
  const Ids want =
      Cat({Seq(0, 8, 23), Seq(1, 100, 4), {{5, 300}, {5, 301}}, Seq(1, 104, 7), Seq(0, 200, 5)});
  EXPECT_EQ(got, want);
  ExpectQueued({});
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

// An arrival at a full port and the packet it costs: the newest of the lowest waiting level if
// that level is below the arrival's, else the arrival itself.
struct Overflow {
  Id arrival;
  Id dropped;
};

TEST_F(EgressTest, AFullPortPushesOutTheNewestPacketOfItsLowestLevel) {
  MakeWorker(8);
  Clog();
  Arrive(host_, Cat({Seq(1, 100, 4), Seq(0, 200, 4)}));  // the port's 8 slots are full
  ExpectQueued(Cat({Seq(1, 100, 4), Seq(0, 200, 4)}));
  const std::vector<Overflow> steps = {
      {{3, 300}, {0, 203}},  // level 0 < 3: 203, the newest of level 0, goes
      {{0, 204}, {0, 204}},  // nothing waits below level 0: the arrival goes
      {{1, 104}, {0, 202}},
      {{0, 205}, {0, 205}},
  };
  std::array<uint64_t, 8> drops{};
  for (const Overflow& st : steps) {
    const unsigned before = rte_mempool_avail_count(Env::pool);
    Arrive(host_, {st.arrival});
    ++drops[st.dropped.first];
    StatsSnapshot s = stats_->Snapshot();
    for (int l = 0; l < 8; ++l) {
      EXPECT_EQ(s.egress_level_drops[l], drops[l]) << "arrival " << st.arrival.second;
    }
    EXPECT_EQ(rte_mempool_avail_count(Env::pool), before) << "the dropped mbuf was freed";
  }
  EXPECT_EQ(Drops(DropReason::kStormQueueFull), 4u);
  EXPECT_EQ(Drops(DropReason::kTxFull), 0u);
  const Ids left = Cat({{{3, 300}}, Seq(1, 100, 5), Seq(0, 200, 2)});
  ExpectQueued(left);

  EXPECT_EQ(Take(uplink_, ~0u), Seq(0, 0, kSlowHolds));
  Poll();
  EXPECT_EQ(Take(uplink_, ~0u), left);  // exactly the survivors, highest level first
  ExpectQueued({});
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(EgressTest, AFullPortRefusesArrivalsNotAboveItsLowestWaitingLevel) {
  MakeWorker(8);
  Clog();
  Arrive(host_, Cat({Seq(2, 100, 4), Seq(1, 200, 4)}));  // full, nothing at level 0
  const std::vector<Overflow> steps = {
      {{1, 204}, {1, 204}},  // level 1 is the lowest waiting: refused
      {{0, 300}, {0, 300}},  // below every waiting level: refused
      {{2, 104}, {1, 203}},  // level 1 < 2: pushes out 203
      {{6, 400}, {1, 202}},
  };
  std::array<uint64_t, 8> drops{};
  for (const Overflow& st : steps) {
    Arrive(host_, {st.arrival});
    ++drops[st.dropped.first];
    StatsSnapshot s = stats_->Snapshot();
    for (int l = 0; l < 8; ++l) {
      EXPECT_EQ(s.egress_level_drops[l], drops[l]) << "arrival " << st.arrival.second;
    }
  }
  EXPECT_EQ(Drops(DropReason::kStormQueueFull), 4u);
  const Ids left = Cat({{{6, 400}}, Seq(2, 100, 5), Seq(1, 200, 2)});
  ExpectQueued(left);
  Take(uplink_, ~0u);
  Poll();
  EXPECT_EQ(Take(uplink_, ~0u), left);
  ExpectQueued({});
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(EgressTest, ARefusedBurstTailIsQueuedNotDropped) {
  MakeWorker(64);
  Arrive(host_, Seq(2, 0, 20));  // leaves 11 free slots in the uplink's ring
  // One burst of 14 into 11 slots: the first 11 in arrival order fit; the tail is queued by level.
  Arrive(host_, Cat({Seq(0, 60, 6), Seq(4, 70, 6), Seq(2, 80, 2)}));
  EXPECT_EQ(Take(uplink_, ~0u), Cat({Seq(2, 0, 20), Seq(0, 60, 6), Seq(4, 70, 5)}));
  ExpectQueued(Cat({Seq(4, 75, 1), Seq(2, 80, 2)}));
  EXPECT_EQ(Drops(DropReason::kTxFull), 0u);
  EXPECT_EQ(Drops(DropReason::kStormQueueFull), 0u);
  Poll();  // idle: the retry sends the tail, highest level first
  EXPECT_EQ(Take(uplink_, ~0u), Cat({Seq(4, 75, 1), Seq(2, 80, 2)}));
  ExpectQueued({});
  EXPECT_EQ(stats_->Snapshot().ports[1].tx_packets, 34u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(EgressTest, StopSendsWhatTheLinkTakesThenFreesTheRestAsTxFull) {
  MakeWorker(64);
  Clog();
  const Ids waiting = Cat({Seq(0, 100, 8), Seq(6, 200, 7), Seq(3, 300, 5)});
  Arrive(host_, waiting);
  EXPECT_EQ(Take(uplink_, 5), Seq(0, 0, 5));  // room for 5 more before the stop
  stop_.store(true, std::memory_order_release);
  EXPECT_EQ(worker_->Run(), 0);
  // The 5 highest went out; the other 15 were freed and counted.
  EXPECT_EQ(Take(uplink_, ~0u), Cat({Seq(0, 5, 26), Seq(6, 200, 5)}));
  EXPECT_EQ(Drops(DropReason::kTxFull), 15u);
  EXPECT_EQ(Drops(DropReason::kStormQueueFull), 0u);
  ExpectQueued({});
  EXPECT_EQ(worker_->egress()->queued(), 0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(EgressTest, HeldCountsNeverWrapBelowZero) {
  MakeWorker(8, /*count_held=*/false);  // a stage that sets held without counting
  Clog();
  Arrive(host_, Cat({Seq(1, 100, 8), Seq(2, 200, 2)}));  // 8 slots: 106, 107 refused
  Take(uplink_, ~0u);
  Poll();
  EXPECT_EQ(Take(uplink_, ~0u).size(), 8u);
  for (uint32_t h : held_) EXPECT_EQ(h, 0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

class EgressBothWaysTest : public EgressTest {
 protected:
  EgressBothWaysTest() { host_tx_ring_ = kSlowRing; }
};

TEST_F(EgressBothWaysTest, DepthGaugesSumTheWorkersPorts) {
  MakeWorker(64);
  Arrive(host_, Seq(0, 0, kSlowHolds));
  Arrive(uplink_, Seq(0, 0, kSlowHolds));
  Arrive(host_, Cat({Seq(2, 100, 3), Seq(5, 110, 2)}));
  Arrive(uplink_, Cat({Seq(2, 200, 4), Seq(1, 210, 1)}));
  EXPECT_EQ(worker_->egress()->queued(1), 5u);
  EXPECT_EQ(worker_->egress()->queued(0), 5u);
  StatsSnapshot s = stats_->Snapshot();
  EXPECT_EQ(s.egress_level_depth[1], 1u);
  EXPECT_EQ(s.egress_level_depth[2], 7u);
  EXPECT_EQ(s.egress_level_depth[5], 2u);
  EXPECT_EQ(held_[2], 7u);

  Take(host_, ~0u);
  Take(uplink_, ~0u);
  Poll();
  EXPECT_EQ(Take(uplink_, ~0u), Cat({Seq(5, 110, 2), Seq(2, 100, 3)}));
  EXPECT_EQ(Take(host_, ~0u), Cat({Seq(2, 200, 4), Seq(1, 210, 1)}));
  s = stats_->Snapshot();
  for (uint64_t d : s.egress_level_depth) EXPECT_EQ(d, 0u);
  for (uint32_t h : held_) EXPECT_EQ(h, 0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(EgressTest, WithoutTheSchedulerTheTxQueueDropsAsBeforeAndHeldIsReleased) {
  MakeWorker(0);
  ASSERT_EQ(worker_->egress(), nullptr);
  Arrive(host_, Seq(0, 0, 20));
  const Ids mixed = Cat({Seq(0, 100, 5), Seq(3, 200, 5), Seq(1, 300, 5)});
  Arrive(host_, mixed);
  // No sorting and no queue: arrival order, and the 4 that did not fit are dropped.
  EXPECT_EQ(Take(uplink_, ~0u), Cat({Seq(0, 0, 20), Seq(0, 100, 5), Seq(3, 200, 5), {{1, 300}}}));
  EXPECT_EQ(Drops(DropReason::kTxFull), 4u);
  EXPECT_EQ(Drops(DropReason::kStormQueueFull), 0u);
  for (uint32_t h : held_) EXPECT_EQ(h, 0u);
  StatsSnapshot s = stats_->Snapshot();
  for (uint64_t n : s.egress_level_tx) EXPECT_EQ(n, 0u);
  EXPECT_EQ(stage_polls_, polls_);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

// A DCB uplink: an ethdev with one TX ring per traffic class (the fake TX sink of each queue),
// and the egress told that level l leaves on queue kQueueOf[l]. The TC0 ring is small so the test
// can stall it; the others are large.
constexpr uint16_t kTcs = 4;
constexpr uint16_t kQueueOf[8] = {0, 0, 1, 1, 2, 2, 3, 3};  // two levels per TC
constexpr unsigned kTc0Ring = 8;                            // holds 7
constexpr unsigned kTc0Holds = kTc0Ring - 1;

class DcbEgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    const std::string tag = std::to_string(n++);
    host_ = MakePort("dcbhost" + tag, 1024);
    const std::string name = "dcbup" + tag;
    rx_ = rte_ring_create((name + "_rx").c_str(), 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    for (uint16_t q = 0; q < kTcs; ++q) {
      tx_[q] = rte_ring_create((name + "_tx" + std::to_string(q)).c_str(), q == 0 ? kTc0Ring : 1024,
                               0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    }
    int id = rte_eth_from_rings(name.c_str(), &rx_, 1, tx_.data(), kTcs, 0);
    ASSERT_GE(id, 0);
    uplink_id_ = static_cast<uint16_t>(id);
    rte_eth_conf conf{};
    ASSERT_EQ(rte_eth_dev_configure(uplink_id_, 1, kTcs, &conf), 0);
    ASSERT_EQ(rte_eth_rx_queue_setup(uplink_id_, 0, 256, 0, nullptr, Env::pool), 0);
    for (uint16_t q = 0; q < kTcs; ++q) {
      ASSERT_EQ(rte_eth_tx_queue_setup(uplink_id_, q, 256, 0, nullptr), 0);
    }
    ASSERT_EQ(rte_eth_dev_start(uplink_id_), 0);
    stats_ = std::make_unique<DataplaneStats>(2, std::vector<unsigned>{1});
    avail_before_ = rte_mempool_avail_count(Env::pool);
  }
  void TearDown() override {
    worker_.reset();
    for (uint16_t q = 0; q < kTcs; ++q) Take(q, ~0u);
    rte_eth_dev_stop(uplink_id_);
    rte_eth_dev_close(uplink_id_);
    rte_ring_free(rx_);
    for (rte_ring* r : tx_) rte_ring_free(r);
    Ids ignored;
    void* m;
    while (rte_ring_dequeue(host_.tx, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    rte_eth_dev_stop(host_.port_id);
    rte_eth_dev_close(host_.port_id);
    rte_ring_free(host_.rx);
    rte_ring_free(host_.tx);
  }

  void MakeWorker(uint32_t queue_packets) {
    WorkerSetup s;
    s.lcore_id = 1;
    s.rx = {{0, host_.port_id, 0}, {1, uplink_id_, 0}};
    s.port_ids[0] = host_.port_id;
    s.port_ids[1] = uplink_id_;
    s.num_ports = 2;
    s.stats = stats_->lcore(0);
    s.stop = &stop_;
    s.egress_queue_packets = queue_packets;
    s.egress_drain_attempts = 2;
    s.dcb_ports = 1u << 1;
    for (int l = 0; l < 8; ++l) s.level_queue[1][l] = kQueueOf[l];
    std::array<uint16_t, kMaxPorts> peer;
    peer.fill(kNoEgress);
    peer[0] = 1;
    peer[1] = 0;
    s.stages.push_back(std::make_unique<LevelFromQpStage>(&held_, &stage_polls_, true));
    s.stages.push_back(std::make_unique<PortForwardStage>(peer));
    worker_ = std::make_unique<Worker>(std::move(s));
  }

  // Puts `ids` on the host's RX ring (bound for the DCB uplink), or on the uplink's RX ring
  // (bound for the host, a software port), and polls until the worker has received them all.
  void Arrive(const Ids& ids, bool from_uplink = false) {
    rte_ring* rx = from_uplink ? rx_ : host_.rx;
    for (Id id : ids) {
      const std::vector<uint8_t> f = Frame(id);
      rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
      ASSERT_NE(m, nullptr);
      test_util::AppendFrame(m, f.data(), f.size());
      ASSERT_EQ(rte_ring_enqueue(rx, m), 0);
      bytes_[id] = f.size();
    }
    while (rte_ring_count(rx) > 0) worker_->PollOnce();
  }
  // What the host port has sent, oldest first.
  Ids TakeHost() {
    Ids out;
    void* m;
    while (rte_ring_dequeue(host_.tx, &m) == 0) {
      out.push_back(IdOf(static_cast<rte_mbuf*>(m)));
      rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    }
    return out;
  }
  // What TX queue `q` has sent: up to `n` packets off its ring, oldest first.
  Ids Take(uint16_t q, unsigned n) {
    Ids out;
    void* m;
    while (out.size() < n && rte_ring_dequeue(tx_[q], &m) == 0) {
      out.push_back(IdOf(static_cast<rte_mbuf*>(m)));
      rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    }
    return out;
  }
  void ExpectQueued(const Ids& waiting) {
    std::array<uint32_t, 8> want{};
    for (Id id : waiting) ++want[id.first];
    StatsSnapshot s = stats_->Snapshot();
    for (int l = 0; l < 8; ++l) {
      EXPECT_EQ(s.egress_level_depth[l], want[l]) << "level " << l;
      EXPECT_EQ(worker_->egress()->queued(1, l), want[l]) << "level " << l;
      EXPECT_EQ(held_[l], want[l]) << "level " << l;
    }
  }
  uint64_t BytesOf(const Ids& ids) {
    uint64_t n = 0;
    for (Id id : ids) n += bytes_.at(id);
    return n;
  }

  RingPort host_;
  rte_ring* rx_ = nullptr;
  std::array<rte_ring*, kTcs> tx_{};
  uint16_t uplink_id_ = 0;
  std::unique_ptr<DataplaneStats> stats_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<Worker> worker_;
  std::array<uint32_t, 8> held_{};
  std::map<Id, size_t> bytes_;
  int stage_polls_ = 0;
  unsigned avail_before_ = 0;
};

TEST_F(DcbEgressTest, EachLevelLeavesOnItsTrafficClassQueue) {
  MakeWorker(64);
  const Ids in = {{0, 1}, {5, 2}, {2, 3}, {7, 4}, {1, 5}, {3, 6}, {6, 7}, {4, 8}, {0, 9}, {7, 10}};
  Arrive(in);
  // Per queue: its two levels, in arrival order.
  EXPECT_EQ(Take(0, ~0u), (Ids{{0, 1}, {1, 5}, {0, 9}}));
  EXPECT_EQ(Take(1, ~0u), (Ids{{2, 3}, {3, 6}}));
  EXPECT_EQ(Take(2, ~0u), (Ids{{5, 2}, {4, 8}}));
  EXPECT_EQ(Take(3, ~0u), (Ids{{7, 4}, {6, 7}, {7, 10}}));
  ExpectQueued({});
  StatsSnapshot s = stats_->Snapshot();
  const uint64_t per_level[8] = {2, 1, 1, 1, 1, 1, 1, 2};
  for (int l = 0; l < 8; ++l) EXPECT_EQ(s.egress_level_tx[l], per_level[l]) << "level " << l;
  EXPECT_EQ(s.ports[1].tx_packets, in.size());
  EXPECT_EQ(s.ports[1].tx_bytes, BytesOf(in));
  for (uint64_t d : s.drops) EXPECT_EQ(d, 0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(DcbEgressTest, AStalledLowClassNeverDelaysAHighOne) {
  MakeWorker(16);
  // TC0's queue takes 7 level-0 packets and stalls (nothing drains it); 5 more wait in software.
  Arrive(Seq(0, 0, kTc0Holds + 5));
  ASSERT_EQ(rte_ring_count(tx_[0]), kTc0Holds);
  ExpectQueued(Seq(0, kTc0Holds, 5));
  // Higher levels arrive behind them, interleaved with more level 0: each high packet is on its
  // queue at once, with TC0 still stalled, and only level 0 waits.
  const Ids mixed =
      Cat({{{7, 100}}, Seq(0, 200, 2), {{3, 101}, {5, 102}}, Seq(1, 300, 2), {{6, 103}}});
  Arrive(mixed);
  EXPECT_EQ(Take(3, ~0u), (Ids{{7, 100}, {6, 103}}));
  EXPECT_EQ(Take(2, ~0u), (Ids{{5, 102}}));
  EXPECT_EQ(Take(1, ~0u), (Ids{{3, 101}}));
  ExpectQueued(Cat({Seq(0, kTc0Holds, 5), Seq(0, 200, 2), Seq(1, 300, 2)}));
  // Many more high packets than the 16-packet budget, while TC0 stays stalled: none waits.
  Arrive(Seq(6, 400, 40));
  EXPECT_EQ(Take(3, ~0u), Seq(6, 400, 40));
  EXPECT_EQ(stats_->Snapshot().egress_level_drops[6], 0u);

  // TC0 drains 7 at a time; idle polls refill it from its level FIFOs (level 1 first, as they
  // share the queue: strict order between the levels of one class is heddled's).
  Ids got;
  for (int i = 0; i < 10 && got.size() < 14; ++i) {
    Ids step = Take(0, ~0u);
    got.insert(got.end(), step.begin(), step.end());
    worker_->PollOnce();
  }
  Ids rest = Take(0, ~0u);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(got, Cat({Seq(0, 0, kTc0Holds), Seq(1, 300, 2), Seq(0, kTc0Holds, 5), Seq(0, 200, 2)}));
  ExpectQueued({});
  StatsSnapshot s = stats_->Snapshot();
  EXPECT_EQ(s.egress_level_tx[0], kTc0Holds + 7);
  EXPECT_EQ(s.egress_level_tx[1], 2u);
  EXPECT_EQ(s.egress_level_tx[6], 41u);
  for (uint64_t d : s.egress_level_drops) EXPECT_EQ(d, 0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(DcbEgressTest, AFullBudgetPushesOutTheStalledLowestLevel) {
  MakeWorker(16);
  // TC0 stalled with 7 in its queue and 16 waiting: the budget is full of level 0.
  Arrive(Seq(0, 0, kTc0Holds + 16));
  ExpectQueued(Seq(0, kTc0Holds, 16));
  // Level 1 shares the stalled queue: each arrival pushes out the newest level-0 packet.
  Arrive(Seq(1, 100, 3));
  ExpectQueued(Cat({Seq(0, kTc0Holds, 13), Seq(1, 100, 3)}));
  // More level 0 is refused; level 2's own queue is free, so it costs nothing.
  Arrive(Cat({Seq(0, 200, 2), Seq(2, 300, 4)}));
  EXPECT_EQ(Take(1, ~0u), Seq(2, 300, 4));
  ExpectQueued(Cat({Seq(0, kTc0Holds, 13), Seq(1, 100, 3)}));
  StatsSnapshot s = stats_->Snapshot();
  EXPECT_EQ(s.egress_level_drops[0], 5u);
  EXPECT_EQ(s.drops[static_cast<int>(DropReason::kStormQueueFull)], 5u);
  // At stop the stalled queue sends nothing: what waits is freed as tx-full, held released.
  stop_.store(true);
  worker_->Run();
  EXPECT_EQ(stats_->Snapshot().drops[static_cast<int>(DropReason::kTxFull)], 16u);
  ExpectQueued({});
  Take(0, ~0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(DcbEgressTest, AWaitingClassIsRetriedWhileAnotherClassKeepsGettingTraffic) {
  MakeWorker(64);
  // TC0 stalls with 7 level-0 packets in its queue and 5 waiting in software.
  Arrive(Seq(0, 0, kTc0Holds + 5));
  ASSERT_EQ(rte_ring_count(tx_[0]), kTc0Holds);
  ExpectQueued(Seq(0, kTc0Holds, 5));
  // The link empties TC0's queue while level 6 (TC3) keeps arriving, one burst per poll loop:
  // the first of those loops already hands the waiting level-0 packets to TC0's queue.
  EXPECT_EQ(Take(0, ~0u), Seq(0, 0, kTc0Holds));
  Arrive({{6, 100}});
  EXPECT_EQ(Take(0, ~0u), Seq(0, kTc0Holds, 5));
  ExpectQueued({});
  for (uint32_t i = 1; i < 4; ++i) Arrive({{6, 100 + i}});
  EXPECT_EQ(Take(3, ~0u), Seq(6, 100, 4));
  StatsSnapshot s = stats_->Snapshot();
  EXPECT_EQ(s.egress_level_tx[0], kTc0Holds + 5);
  EXPECT_EQ(s.egress_level_tx[6], 4u);
  for (uint64_t d : s.drops) EXPECT_EQ(d, 0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(DcbEgressTest, ASoftwarePortBesideADcbPortSendsBurstsAsTheyCame) {
  MakeWorker(64);
  // One burst from the uplink to the host, a software port: it leaves whole, in arrival order,
  // levels ignored while the host's queue takes everything (the one-port path), counted per level.
  const Ids in = {{0, 1}, {5, 2}, {2, 3}, {7, 4}, {1, 5}, {3, 6}, {6, 7}, {4, 8}, {0, 9}, {7, 10}};
  Arrive(in, /*from_uplink=*/true);
  EXPECT_EQ(TakeHost(), in);
  // A burst to the DCB uplink in between is still split by traffic class.
  Arrive({{7, 20}, {0, 21}});
  EXPECT_EQ(Take(3, ~0u), (Ids{{7, 20}}));
  EXPECT_EQ(Take(0, ~0u), (Ids{{0, 21}}));
  const Ids again = {{1, 30}, {6, 31}, {1, 32}};
  Arrive(again, /*from_uplink=*/true);
  EXPECT_EQ(TakeHost(), again);
  EXPECT_EQ(worker_->egress()->queued(), 0u);
  StatsSnapshot s = stats_->Snapshot();
  EXPECT_EQ(s.ports[0].tx_packets, in.size() + again.size());
  EXPECT_EQ(s.ports[0].tx_bytes, BytesOf(in) + BytesOf(again));
  EXPECT_EQ(s.ports[1].tx_packets, 2u);
  const uint64_t per_level[8] = {3, 3, 1, 1, 1, 1, 2, 3};
  for (int l = 0; l < 8; ++l) EXPECT_EQ(s.egress_level_tx[l], per_level[l]) << "level " << l;
  for (uint64_t d : s.drops) EXPECT_EQ(d, 0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

}  // namespace
}  // namespace heddle::pipeline
