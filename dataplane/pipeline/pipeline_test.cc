// The worker loop and stages on real DPDK ports made from rte_rings (net_ring's
// rte_eth_from_rings): the test enqueues mbufs on a port's RX ring and dequeues what the worker
// transmitted from the other port's TX ring.
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <thread>
#include <vector>

#include "dataplane/pipeline/stages.h"
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
    p.program = "pipeline_test";
    p.no_huge = true;
    p.memory_mb = 128;
    p.log_level = "error";
    ASSERT_TRUE(dpdk::InitEal(p).ok());
    pool = rte_pktmbuf_pool_create("pipeline_test", 4095, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
    ASSERT_NE(pool, nullptr);
  }
  void TearDown() override { dpdk::CleanupEal(); }
  static inline rte_mempool* pool = nullptr;
};
::testing::Environment* const env = ::testing::AddGlobalTestEnvironment(new Env);

struct RingPort {
  rte_ring* rx;
  rte_ring* tx;
  uint16_t port_id;
};

RingPort MakePort(const std::string& name, unsigned tx_size = 1024) {
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

rte_mbuf* ToMbuf(const std::vector<uint8_t>& f) {
  rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
  EXPECT_NE(m, nullptr);
  memcpy(rte_pktmbuf_append(m, f.size()), f.data(), f.size());
  return m;
}

// A chained mbuf holding `f` cut at the given offsets.
rte_mbuf* ToChain(const std::vector<uint8_t>& f, std::vector<size_t> cuts) {
  rte_mbuf* head = nullptr;
  cuts.push_back(f.size());
  for (size_t off = 0, c = 0; off < f.size(); off = cuts[c++]) {
    size_t n = cuts[c] - off;
    rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
    EXPECT_NE(m, nullptr);
    memcpy(rte_pktmbuf_append(m, n), f.data() + off, n);
    if (head == nullptr) {
      head = m;
    } else {
      EXPECT_EQ(rte_pktmbuf_chain(head, m), 0);
    }
  }
  return head;
}

std::vector<uint8_t> FromMbuf(rte_mbuf* m) {
  std::vector<uint8_t> out;
  for (rte_mbuf* s = m; s != nullptr; s = s->next) {
    const uint8_t* d = rte_pktmbuf_mtod(s, const uint8_t*);
    out.insert(out.end(), d, d + s->data_len);
  }
  return out;
}

std::vector<std::vector<uint8_t>> Drain(rte_ring* r) {
  std::vector<std::vector<uint8_t>> out;
  void* m;
  while (rte_ring_dequeue(r, &m) == 0) {
    out.push_back(FromMbuf(static_cast<rte_mbuf*>(m)));
    rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
  }
  return out;
}

std::vector<uint8_t> Write(uint32_t psn, uint32_t len) {
  pkt::RoceSpec r;
  r.opcode = pkt::op::kWriteOnly;
  r.dest_qp = 0x42;
  r.psn = psn;
  r.dma_length = len;
  r.payload_len = len;
  return pkt::BuildRoce(pkt::FrameSpec{}, r);
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    std::string tag = std::to_string(n++);
    host_ = MakePort("host" + tag);
    uplink_ = MakePort("up" + tag, tx_ring_size_);
    stats_ = std::make_unique<DataplaneStats>(2, std::vector<unsigned>{1});
    avail_before_ = rte_mempool_avail_count(Env::pool);
  }
  void TearDown() override {
    for (auto* p : {&host_, &uplink_}) {
      rte_eth_dev_stop(p->port_id);
      rte_eth_dev_close(p->port_id);
      rte_ring_free(p->rx);
      rte_ring_free(p->tx);
    }
  }
  std::unique_ptr<Worker> MakeWorker(bool verify_icrc, bool with_peer = true,
                                     bool uplink_multi_seg = true) {
    WorkerSetup s;
    s.lcore_id = 1;
    s.rx = {{0, host_.port_id, 0}, {1, uplink_.port_id, 0}};
    s.port_ids[0] = host_.port_id;
    s.port_ids[1] = uplink_.port_id;
    s.num_ports = 2;
    s.tx_multi_seg[1] = uplink_multi_seg;
    s.stats = stats_->lcore(0);
    s.stop = &stop_;
    std::array<uint16_t, kMaxPorts> peer;
    peer.fill(kNoEgress);
    if (with_peer) {
      peer[0] = 1;
      peer[1] = 0;
    }
    if (verify_icrc) s.stages.push_back(std::make_unique<IcrcVerifyStage>());
    s.stages.push_back(std::make_unique<PortForwardStage>(peer));
    return std::make_unique<Worker>(std::move(s));
  }
  void Inject(RingPort& p, const std::vector<std::vector<uint8_t>>& frames) {
    for (const auto& f : frames) ASSERT_EQ(rte_ring_enqueue(p.rx, ToMbuf(f)), 0);
  }
  uint64_t Drops(DropReason r) { return stats_->Snapshot().drops[static_cast<int>(r)]; }

  unsigned tx_ring_size_ = 1024;
  RingPort host_, uplink_;
  std::unique_ptr<DataplaneStats> stats_;
  std::atomic<bool> stop_{false};
  unsigned avail_before_ = 0;
};

TEST_F(PipelineTest, ForwardsBothWaysUnchangedInOrderAndCounts) {
  std::vector<std::vector<uint8_t>> req, resp;
  for (uint32_t i = 0; i < 100; ++i) req.push_back(Write(i, 64 + i));
  pkt::RoceSpec ack;
  ack.opcode = pkt::op::kAcknowledge;
  for (uint32_t i = 0; i < 40; ++i) {
    ack.psn = i;
    resp.push_back(pkt::BuildRoce(pkt::FrameSpec{}, ack));
  }
  resp.push_back(pkt::BuildArpRequest(pkt::FrameSpec{}));  // non-RoCE passes too
  Inject(host_, req);
  Inject(uplink_, resp);
  auto w = MakeWorker(false);
  uint32_t got = 0;
  for (int i = 0; i < 20; ++i) got += w->PollOnce();
  EXPECT_EQ(got, req.size() + resp.size());
  EXPECT_EQ(Drain(uplink_.tx), req);
  EXPECT_EQ(Drain(host_.tx), resp);

  StatsSnapshot s = stats_->Snapshot();
  uint64_t req_bytes = 0;
  for (auto& f : req) req_bytes += f.size();
  EXPECT_EQ(s.ports[0].rx_packets, req.size());
  EXPECT_EQ(s.ports[0].rx_bytes, req_bytes);
  EXPECT_EQ(s.ports[1].tx_packets, req.size());
  EXPECT_EQ(s.ports[1].tx_bytes, req_bytes);
  EXPECT_EQ(s.ports[0].roce_rx_packets[static_cast<int>(pkt::RoceClass::kWrite)], 100u);
  EXPECT_EQ(s.ports[1].roce_rx_packets[static_cast<int>(pkt::RoceClass::kAck)], 40u);
  EXPECT_EQ(s.ports[1].roce_rx_packets[static_cast<int>(pkt::RoceClass::kNone)], 1u);
  for (uint64_t d : s.drops) EXPECT_EQ(d, 0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(PipelineTest, MalformedFramesDroppedByReasonAndFreed) {
  std::vector<uint8_t> good = Write(1, 256);
  std::vector<std::vector<uint8_t>> frames = {good};
  frames.push_back(std::vector<uint8_t>(good.begin(), good.begin() + 10));  // eth-truncated
  frames.push_back(std::vector<uint8_t>(good.begin(), good.begin() + 30));  // ipv4-truncated
  auto bad_udp = good;
  bad_udp[14 + 20 + 4] = 0xff;  // UDP length 0xff.. beyond the IP payload
  bad_udp[14 + 20 + 5] = 0xff;
  frames.push_back(bad_udp);
  frames.push_back(good);
  Inject(host_, frames);
  auto w = MakeWorker(false);
  for (int i = 0; i < 4; ++i) w->PollOnce();
  EXPECT_EQ(Drain(uplink_.tx), (std::vector<std::vector<uint8_t>>{good, good}));
  EXPECT_EQ(Drops(DropReason::kEthTruncated), 1u);
  EXPECT_EQ(Drops(DropReason::kIpv4Truncated), 1u);
  EXPECT_EQ(Drops(DropReason::kUdpBadLength), 1u);
  EXPECT_EQ(stats_->Snapshot().ports[0].rx_packets, 5u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(PipelineTest, IcrcVerifyDropsCorruptedFramesOnlyWhenEnabled) {
  std::vector<uint8_t> good = Write(7, 512);
  std::vector<uint8_t> bad = good;
  bad[bad.size() - 20] ^= 0x01;  // payload bit flip: ICRC no longer matches
  Inject(host_, {good, bad, good});
  auto w = MakeWorker(true);
  for (int i = 0; i < 4; ++i) w->PollOnce();
  EXPECT_EQ(Drain(uplink_.tx), (std::vector<std::vector<uint8_t>>{good, good}));
  EXPECT_EQ(Drops(DropReason::kIcrcBad), 1u);

  // Without the stage the corrupted frame is forwarded as it is.
  Inject(host_, {bad});
  auto w2 = MakeWorker(false);
  for (int i = 0; i < 4; ++i) w2->PollOnce();
  EXPECT_EQ(Drain(uplink_.tx), (std::vector<std::vector<uint8_t>>{bad}));
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(PipelineTest, ChainedMbufsParseAndVerifyLikeContiguousFrames) {
  std::vector<uint8_t> jumbo = Write(9, 4096);  // a 4 KiB-MTU WRITE: > one 2 KiB mbuf
  std::vector<uint8_t> bad = jumbo;
  bad[3000] ^= 0x80;  // corrupt the payload in the third segment
  std::vector<uint8_t> icrc_split = Write(10, 4000);
  for (const auto* f : {&jumbo, &bad}) {
    ASSERT_EQ(rte_ring_enqueue(host_.rx, ToChain(*f, {1500, 3000})), 0);
  }
  // a segment boundary inside the ICRC
  ASSERT_EQ(rte_ring_enqueue(host_.rx, ToChain(icrc_split, {1500, 3000, icrc_split.size() - 2})),
            0);
  auto w = MakeWorker(true);
  for (int i = 0; i < 4; ++i) w->PollOnce();
  EXPECT_EQ(Drain(uplink_.tx), (std::vector<std::vector<uint8_t>>{jumbo, icrc_split}));
  EXPECT_EQ(Drops(DropReason::kIcrcBad), 1u);
  StatsSnapshot s = stats_->Snapshot();
  EXPECT_EQ(s.ports[0].rx_bytes, jumbo.size() + bad.size() + icrc_split.size());
  EXPECT_EQ(s.ports[0].roce_rx_packets[static_cast<int>(pkt::RoceClass::kWrite)], 3u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(PipelineTest, ChainsForASingleSegmentPortAreDroppedNotTruncated) {
  std::vector<uint8_t> small = Write(1, 256), jumbo = Write(2, 4096);
  ASSERT_EQ(rte_ring_enqueue(host_.rx, ToMbuf(small)), 0);
  ASSERT_EQ(rte_ring_enqueue(host_.rx, ToChain(jumbo, {1500, 3000})), 0);
  auto w = MakeWorker(false, true, /*uplink_multi_seg=*/false);
  for (int i = 0; i < 4; ++i) w->PollOnce();
  EXPECT_EQ(Drain(uplink_.tx), (std::vector<std::vector<uint8_t>>{small}));
  EXPECT_EQ(Drops(DropReason::kTxMultiSeg), 1u);
  EXPECT_EQ(stats_->Snapshot().ports[1].tx_bytes, small.size());
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(PipelineTest, PortWithoutPeerDropsNoEgress) {
  Inject(host_, {Write(1, 64), Write(2, 64)});
  auto w = MakeWorker(false, /*with_peer=*/false);
  for (int i = 0; i < 4; ++i) w->PollOnce();
  EXPECT_TRUE(Drain(uplink_.tx).empty());
  EXPECT_EQ(Drops(DropReason::kNoEgress), 2u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

class PipelineTxFullTest : public PipelineTest {
 protected:
  PipelineTxFullTest() { tx_ring_size_ = 16; }  // holds 15
};

TEST_F(PipelineTxFullTest, FullTxQueueDropsAreCountedAndFreed) {
  std::vector<std::vector<uint8_t>> req;
  for (uint32_t i = 0; i < 32; ++i) req.push_back(Write(i, 64));
  Inject(host_, req);
  auto w = MakeWorker(false);
  w->PollOnce();
  auto out = Drain(uplink_.tx);
  EXPECT_EQ(out.size(), 15u);
  EXPECT_EQ(Drops(DropReason::kTxFull), 17u);
  EXPECT_EQ(stats_->Snapshot().ports[1].tx_packets, 15u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(PipelineTest, RunStopsOnFlagAndDrainsWhatIsQueued) {
  auto w = MakeWorker(false);
  std::thread t([&] { w->Run(); });
  while (stats_->Snapshot().lcores[0].idle_loops == 0) std::this_thread::yield();
  std::vector<std::vector<uint8_t>> req;
  for (uint32_t i = 0; i < 64; ++i) req.push_back(Write(i, 128));
  Inject(host_, req);
  stop_.store(true, std::memory_order_release);
  t.join();
  EXPECT_EQ(Drain(uplink_.tx), req);  // nothing enqueued before the stop was lost
  EXPECT_EQ(stats_->Snapshot().ports[1].tx_packets, 64u);
}

}  // namespace
}  // namespace heddle::pipeline
