// Ordering and publication edge cases of the storm-tag stage and StormControl: the level cap after
// K shrinks, refused QPs, burst-mark wrap, generation reads off the worker, and the in-order guard
// towards the host on a slow host link (a real Worker on ring-backed ports).
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "dataplane/pipeline/stages.h"
#include "dataplane/pipeline/storm_control.h"
#include "dataplane/pipeline/storm_stage.h"
#include "dataplane/pipeline/testing/eal_pool_env.h"
#include "dataplane/pipeline/testing/mbuf_frame.h"
#include "dataplane/pipeline/worker.h"
#include "dataplane/pkt/builder.h"
#include "drivers/dpdk/eal.h"
#include "gtest/gtest.h"

namespace heddle::pipeline {
namespace {

class Env : public test_util::EalPoolEnv {
 public:
  Env() : EalPoolEnv("storm_guard_test", 4095, 128) {}
};
::testing::Environment* const env = ::testing::AddGlobalTestEnvironment(new Env);

storm::LevelConfig Levels(storm::Mode mode) {
  storm::LevelConfig c;
  c.levels = 4;
  c.cutoffs = {4096, 65536, 1u << 20, 0, 0, 0, 0};
  c.mode = mode;
  c.control_level = 3;
  return c;
}

std::vector<uint8_t> Frame(uint8_t opcode, uint32_t qp, uint32_t psn, uint32_t dma_length,
                           uint16_t payload, uint8_t dst_last_octet = 2) {
  pkt::FrameSpec f;
  f.dst_ip4 = {10, 0, 0, dst_last_octet};
  pkt::RoceSpec r;
  r.opcode = opcode;
  r.dest_qp = qp;
  r.psn = psn;
  r.dma_length = dma_length;
  r.payload_len = payload;
  return pkt::BuildRoce(f, r);
}

class StormGuardTest : public ::testing::Test {
 protected:
  void Make(storm::Mode mode, storm::BacklogSource source = storm::BacklogSource::kEgressQueue,
            size_t capacity = 1024, storm::LevelConfig levels = {}, bool custom = false) {
    Release();
    stage_.reset();
    control_ = std::make_unique<StormControl>(custom ? levels : Levels(mode), 1);
    std::bitset<kMaxPorts> hosts;
    hosts.set(0);
    stage_ = std::make_unique<StormTagStage>(
        StormTagStage::Options{.table = {.capacity = capacity, .idle_ms = 1000},
                               .mtu = 1024,
                               .host_ports = hosts,
                               .backlog_source = source,
                               .control = control_.get(),
                               .worker = 0,
                               .clock = [this] { return now_ms_; },
                               .housekeep_every = 1});
  }
  void TearDown() override { Release(); }

  std::vector<int> Run(const std::vector<std::vector<uint8_t>>& frames, uint16_t ingress = 0) {
    b_.n = 0;
    b_.ingress = ingress;
    for (const auto& f : frames) {
      rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
      EXPECT_NE(m, nullptr);
      test_util::AppendFrame(m, f.data(), f.size());
      EXPECT_EQ(pkt::Parse(f.data(), f.size(), &b_.desc[b_.n]), pkt::ParseError::kOk);
      b_.pkts[b_.n] = m;
      b_.egress[b_.n] = 1;
      b_.level[b_.n] = 0;
      b_.held[b_.n] = nullptr;
      ++b_.n;
    }
    EXPECT_EQ(stage_->Process(ctx_, b_), frames.size());
    std::vector<int> levels;
    for (uint16_t i = 0; i < b_.n; ++i) {
      levels.push_back(b_.level[i]);
      held_.push_back({b_.pkts[i], b_.held[i]});
    }
    return levels;
  }
  void Release() {
    for (auto& [m, held] : held_) {
      if (held != nullptr && *held) --*held;
      rte_pktmbuf_free(m);
    }
    held_.clear();
  }
  // Publishes `next` while this thread keeps polling (the grace period needs it).
  void Publish(const storm::LevelConfig& next) {
    std::atomic<bool> done{false};
    std::thread t([&] {
      EXPECT_TRUE(control_->SetLevels(next).ok());
      done = true;
    });
    while (!done) stage_->Poll(ctx_);
    t.join();
  }

  uint32_t now_ms_ = 100;
  LcoreStats stats_;
  WorkerContext ctx_{&stats_};
  Burst b_;
  std::unique_ptr<StormControl> control_;
  std::unique_ptr<StormTagStage> stage_;
  std::vector<std::pair<rte_mbuf*, uint32_t*>> held_;
};

// Guards against: after `set storm levels` lowers K, a request in progress keeps its stored level,
// which is no longer a level (>= K): wrong DSCP, served above the new top level.
TEST_F(StormGuardTest, AShrunkKCapsRequestsInProgress) {
  Make(storm::Mode::kPerMessage);
  // A 4 KiB WRITE: R = 4096, not above c_1: level 3.
  EXPECT_EQ(Run({Frame(pkt::op::kWriteFirst, 7, 1, 4096, 1024)}), std::vector<int>{3});
  Release();
  storm::LevelConfig two = control_->current_levels();
  two.levels = 2;
  two.cutoffs = {4096, 0, 0, 0, 0, 0, 0};
  two.control_level = 1;
  Publish(two);
  ASSERT_EQ(control_->levels().levels, 2);
  const std::vector<int> l = Run({Frame(pkt::op::kWriteMiddle, 7, 2, 0, 1024)});
  EXPECT_LT(l[0], 2) << "level " << l[0] << " tagged while only 2 levels are in force";
}

// Guards against: a QP the table refused gets DefaultLevel for data and control_level for its READ
// request, uncapped: with cutoffs where DefaultLevel < control_level, its READ overtakes its
// queued WRITE under strict priority.
TEST_F(StormGuardTest, ARefusedQpsControlPacketsShareItsDataLevel) {
  storm::LevelConfig l = Levels(storm::Mode::kPerMessage);
  l.cutoffs = {1024, 65536, 1u << 20, 0, 0, 0, 0};  // DefaultLevel(4096) = 2
  Make(storm::Mode::kPerMessage, storm::BacklogSource::kEgressQueue, 4, l, true);
  // Fill the only bucket with 4 QPs that hold packets (never idle).
  for (uint32_t q = 1; q <= 4; ++q) Run({Frame(pkt::op::kSendOnly, q, 1, 0, 64)});
  ASSERT_EQ(stage_->table().size(), 4u);
  std::vector<int> got = Run({Frame(pkt::op::kWriteOnly, 9, 1, 256u << 10, 1024),
                              Frame(pkt::op::kReadRequest, 9, 2, 100, 0)});
  ASSERT_EQ(stage_->table().counters().table_full, 2u);
  EXPECT_LE(got[1], got[0]) << "READ request level " << got[1] << " above its QP's WRITE level "
                            << got[0];
}

// Guards against: burst_no_/burst_mark are 16 bits. A QP last seen exactly 65536 host bursts ago
// takes the stale queued_at_mark as its backlog.
TEST_F(StormGuardTest, BurstMarkWrapNeverReusesAStaleBacklog) {
  Make(storm::Mode::kPerPacket, storm::BacklogSource::kEgressQueue);
  std::vector<std::vector<uint8_t>> first;
  first.push_back(Frame(pkt::op::kWriteFirst, 9, 1, 2 * 65536, 1024));
  for (uint32_t i = 0; i < 40; ++i)
    first.push_back(Frame(pkt::op::kWriteMiddle, 9, 2 + i, 0, 1024));
  Run(first);
  // Burst X: 41 packets of QP 9 held from earlier: queued_at_mark = 41, level 2.
  EXPECT_EQ(Run({Frame(pkt::op::kWriteMiddle, 9, 42, 0, 1024)}), std::vector<int>{2});
  Release();  // nothing of QP 9 is held any more
  // 65535 bursts of another QP on the host port.
  std::vector<uint8_t> other = Frame(pkt::op::kSendOnly, 500, 1, 0, 64);
  rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
  test_util::AppendFrame(m, other.data(), other.size());
  for (int i = 0; i < 65535; ++i) {
    b_.n = 1;
    b_.ingress = 0;
    b_.pkts[0] = m;
    ASSERT_EQ(pkt::Parse(other.data(), other.size(), &b_.desc[0]), pkt::ParseError::kOk);
    b_.held[0] = nullptr;
    stage_->Process(ctx_, b_);
    if (b_.held[0]) --*b_.held[0];
  }
  rte_pktmbuf_free(m);
  // Burst X + 65536: QP 9 has nothing queued, so B = 0 and the level must be 1 (as right after
  // Release() in EgressBacklogRaisesAQueuedQpInPerPacketMode).
  EXPECT_EQ(Run({Frame(pkt::op::kWriteMiddle, 9, 43, 0, 1024)}), std::vector<int>{1});
}

// Guards against: StormControl::generation() dereferences the RCU-published Params from a thread
// that is not an RCU reader (gRPC thread in StormService::View, Apply's log line).
TEST_F(StormGuardTest, PublishedGenerationIsSafeOffTheWorker) {
  Make(storm::Mode::kPerMessage);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    uint64_t sum = 0;
    while (!stop.load())
      sum += control_->published_generation();  // as the fixed StormService::View does
    (void)sum;
  });
  std::thread writer([&] {
    storm::LevelConfig next = control_->current_levels();
    for (int i = 0; i < 20000; ++i) {
      next.beta = 1 + (i & 1);
      (void)control_->SetLevels(next);
    }
    stop = true;
  });
  while (!stop.load()) control_->Quiescent(0);  // the worker
  writer.join();
  reader.join();
}

// Guards against: uplink-ingress (towards the host) packets get no in-order guard: a remote READ
// request takes the control level and overtakes the same QP's WRITE packets queued for the host.
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

TEST(StormGuardWorkerTest, UplinkReadRequestWaitsBehindItsQpsWritesTowardsTheHost) {
  RingPort host = MakePort("rvhost", 32);  // slow host link: holds 31
  RingPort up = MakePort("rvup", 1024);
  DataplaneStats stats(2, std::vector<unsigned>{1});
  StormControl control(Levels(storm::Mode::kPerMessage), 1);
  std::atomic<bool> stop{false};
  WorkerSetup s;
  s.lcore_id = 1;
  s.rx = {{0, host.port_id, 0}, {1, up.port_id, 0}};
  s.port_ids[0] = host.port_id;
  s.port_ids[1] = up.port_id;
  s.num_ports = 2;
  s.stats = stats.lcore(0);
  s.stop = &stop;
  s.egress_queue_packets = 256;
  std::array<uint16_t, kMaxPorts> peer;
  peer.fill(kNoEgress);
  peer[0] = 1;
  peer[1] = 0;
  std::bitset<kMaxPorts> hosts;
  hosts.set(0);
  s.stages.push_back(std::make_unique<StormTagStage>(
      StormTagStage::Options{.table = {.capacity = 1024, .idle_ms = 1000},
                             .mtu = 1024,
                             .host_ports = hosts,
                             .control = &control,
                             .worker = 0}));
  s.stages.push_back(std::make_unique<PortForwardStage>(peer));
  auto worker = std::make_unique<Worker>(std::move(s));
  // A remote requester: a 40-packet WRITE then a READ request on QP 5, from the uplink.
  auto arrive = [&](const std::vector<uint8_t>& f) {
    rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
    test_util::AppendFrame(m, f.data(), f.size());
    ASSERT_EQ(rte_ring_enqueue(up.rx, m), 0);
  };
  uint32_t psn = 100;
  arrive(Frame(pkt::op::kWriteFirst, 5, psn++, 40 * 1024, 1024));
  for (int i = 0; i < 38; ++i) arrive(Frame(pkt::op::kWriteMiddle, 5, psn++, 0, 1024));
  arrive(Frame(pkt::op::kWriteLast, 5, psn++, 0, 1024));
  while (rte_ring_count(up.rx) > 0) worker->PollOnce();
  arrive(Frame(pkt::op::kReadRequest, 5, psn++, 4096, 0));
  while (rte_ring_count(up.rx) > 0) worker->PollOnce();
  // The host link delivers everything, in the order it got it.
  std::vector<uint32_t> order;
  for (int round = 0; round < 100 && order.size() < 41; ++round) {
    void* m;
    while (rte_ring_dequeue(host.tx, &m) == 0) {
      pkt::PacketDesc d;
      rte_mbuf* mb = static_cast<rte_mbuf*>(m);
      EXPECT_EQ(pkt::Parse(rte_pktmbuf_mtod(mb, const uint8_t*), mb->data_len, &d),
                pkt::ParseError::kOk);
      order.push_back(d.psn);
      rte_pktmbuf_free(mb);
    }
    worker->PollOnce();
  }
  ASSERT_EQ(order.size(), 41u);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()))
      << "QP 5's packets reached the host out of PSN order; READ request (psn 140) left at "
         "position "
      << (std::find(order.begin(), order.end(), 140u) - order.begin());
  worker.reset();
  for (auto* p : {&host, &up}) {
    rte_eth_dev_stop(p->port_id);
    rte_eth_dev_close(p->port_id);
    rte_ring_free(p->rx);
    rte_ring_free(p->tx);
  }
}

}  // namespace
}  // namespace heddle::pipeline
