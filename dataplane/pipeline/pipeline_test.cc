// The worker loop and stages on real DPDK ports made from rte_rings (net_ring's
// rte_eth_from_rings): the test enqueues mbufs on a port's RX ring and dequeues what the worker
// transmitted from the other port's TX ring.
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <algorithm>
#include <bitset>
#include <thread>
#include <vector>

#include "dataplane/pipeline/stages.h"
#include "dataplane/pipeline/storm_stage.h"
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
  test_util::AppendFrame(m, f.data(), f.size());
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
    test_util::AppendFrame(m, f.data() + off, n);
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
                                     bool uplink_multi_seg = true,
                                     std::unique_ptr<Stage> first = nullptr,
                                     uint32_t egress_queue_packets = 0) {
    WorkerSetup s;
    s.egress_queue_packets = egress_queue_packets;
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
    if (first) s.stages.push_back(std::move(first));
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

// Sends packet `index` of every burst to a port index that does not exist.
class BadEgressStage final : public Stage {
 public:
  explicit BadEgressStage(uint16_t index) : index_(index) {}
  const char* name() const override { return "bad-egress"; }
  uint16_t Process(WorkerContext&, Burst& b) override {
    if (index_ < b.n) b.egress[index_] = 7;
    return b.n;
  }

 private:
  uint16_t index_;
};

TEST_F(PipelineTest, EgressSchedulerPathDropsBadEgressAndChainsForSingleSegmentPorts) {
  // With the strict-priority egress (STORM's), bursts of more and fewer than eight packets: a
  // packet for a port that does not exist is dropped (none, inside the first block of eight, or
  // in the tail after it), and a chain too where the uplink takes single segments only, each
  // under its reason; the rest leave in order.
  constexpr uint32_t kNone = 0xFFFF;
  for (const bool multi_seg : {true, false}) {
    for (const uint32_t n : {3u, 12u}) {
      const std::vector<uint32_t> bads =
          n > 8 ? std::vector<uint32_t>{kNone, 5, 10, n - 1} : std::vector<uint32_t>{kNone, n - 1};
      for (const uint32_t bad : bads) {
        SCOPED_TRACE(testing::Message()
                     << "n " << n << " multi_seg " << multi_seg << " bad " << bad);
        std::vector<std::vector<uint8_t>> sent;
        for (uint32_t i = 0; i < n; ++i) {
          std::vector<uint8_t> f = Write(i, i == 1 ? 4096 : 64);
          if (i == 1) {
            ASSERT_EQ(rte_ring_enqueue(host_.rx, ToChain(f, {1500, 3000})), 0);
          } else {
            ASSERT_EQ(rte_ring_enqueue(host_.rx, ToMbuf(f)), 0);
          }
          if (i != bad && (i != 1 || multi_seg)) sent.push_back(f);
        }
        const uint64_t no_egress = Drops(DropReason::kNoEgress);
        const uint64_t chains = Drops(DropReason::kTxMultiSeg);
        auto w = MakeWorker(false, true, multi_seg,
                            std::make_unique<BadEgressStage>(static_cast<uint16_t>(bad)),
                            /*egress_queue_packets=*/64);
        ASSERT_NE(w->egress(), nullptr);
        for (int i = 0; i < 4; ++i) w->PollOnce();
        EXPECT_EQ(Drain(uplink_.tx), sent);
        EXPECT_EQ(Drops(DropReason::kNoEgress) - no_egress, bad == kNone ? 0u : 1u);
        EXPECT_EQ(Drops(DropReason::kTxMultiSeg) - chains, multi_seg ? 0u : 1u);
        w.reset();
        EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
      }
    }
  }
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

// --- storm-tag -----------------------------------------------------------------------------

// Four levels with cutoffs 1000 / 2000 / 1 MB: a 3072-byte WRITE starts at level 1 (R > 2000) and
// its last packet alone (R = 1024) would be level 2.
storm::LevelConfig StormLevels(storm::Mode mode) {
  storm::LevelConfig c;
  c.cutoffs = {1000, 2000, 1000000, 0, 0, 0, 0};
  c.mode = mode;
  return c;  // dscp {0, 10, 18, 26}, control level 3
}

std::vector<std::vector<uint8_t>> WriteFirstMiddleLast(const pkt::FrameSpec& f) {
  std::vector<std::vector<uint8_t>> out;
  pkt::RoceSpec r;
  r.dest_qp = 0x77;
  r.payload_len = 1024;
  for (uint8_t opcode : {pkt::op::kWriteFirst, pkt::op::kWriteMiddle, pkt::op::kWriteLast}) {
    r.opcode = opcode;
    r.dma_length = opcode == pkt::op::kWriteFirst ? 3072 : 0;
    out.push_back(pkt::BuildRoce(f, r));
    ++r.psn;
  }
  return out;
}

std::vector<uint8_t> ReadRequest(const pkt::FrameSpec& f) {
  pkt::RoceSpec r;
  r.opcode = pkt::op::kReadRequest;
  r.dest_qp = 0x78;
  r.psn = 9;
  r.dma_length = 1 << 20;
  return pkt::BuildRoce(f, r);
}

struct Tagged {
  uint8_t dscp, ecn;
  bool ip_checksum_ok, icrc_ok;
};
Tagged Inspect(const std::vector<uint8_t>& frame) {
  pkt::PacketDesc d;
  EXPECT_EQ(pkt::Parse(frame.data(), frame.size(), &d), pkt::ParseError::kOk);
  return {static_cast<uint8_t>(d.dscp), static_cast<uint8_t>(d.ecn),
          pkt::Ipv4HeaderChecksum(frame.data() + d.l3_off, 20) ==
              (frame[d.l3_off + 10] << 8 | frame[d.l3_off + 11]),
          pkt::VerifyIcrc(frame.data(), d)};
}

class StormTagTest : public PipelineTest {
 protected:
  std::unique_ptr<Worker> MakeStormWorker(storm::Mode mode) {
    std::bitset<kMaxPorts> hosts;
    hosts.set(0);
    control_ = std::make_unique<StormControl>(StormLevels(mode), 1);
    auto stage = std::make_unique<StormTagStage>(
        StormTagStage::Options{.table = {.capacity = 1024, .idle_ms = 1000},
                               .mtu = 1024,
                               .host_ports = hosts,
                               .control = control_.get(),
                               .clock = [] { return uint32_t{5}; }});
    return MakeWorker(false, true, true, std::move(stage));
  }
  std::vector<std::vector<uint8_t>> RunHost(storm::Mode mode,
                                            const std::vector<std::vector<uint8_t>>& in) {
    Inject(host_, in);
    auto w = MakeStormWorker(mode);
    for (int i = 0; i < 10; ++i) w->PollOnce();
    return Drain(uplink_.tx);
  }
  std::unique_ptr<StormControl> control_;
  pkt::FrameSpec frame_ = [] {
    pkt::FrameSpec f;
    f.dscp = 0;
    f.ecn = 2;  // ECT(0): must survive the rewrite
    return f;
  }();
};

TEST_F(StormTagTest, PerMessageGivesAWholeWriteOneDscpAndReadsTheControlLevel) {
  std::vector<std::vector<uint8_t>> in = WriteFirstMiddleLast(frame_);
  in.push_back(ReadRequest(frame_));
  in.push_back(pkt::BuildArpRequest(frame_));
  std::vector<std::vector<uint8_t>> out = RunHost(storm::Mode::kPerMessage, in);
  ASSERT_EQ(out.size(), in.size());
  for (int i = 0; i < 3; ++i) {
    Tagged t = Inspect(out[i]);
    EXPECT_EQ(t.dscp, 10) << "packet " << i;  // level 1
    EXPECT_EQ(t.ecn, 2);
    EXPECT_TRUE(t.ip_checksum_ok);
    EXPECT_TRUE(t.icrc_ok);
  }
  Tagged read = Inspect(out[3]);
  EXPECT_EQ(read.dscp, 26);  // control level 3
  EXPECT_EQ(read.ecn, 2);
  EXPECT_TRUE(read.ip_checksum_ok);
  EXPECT_TRUE(read.icrc_ok);
  EXPECT_EQ(out[4], in[4]);  // not RoCE: untouched
  // Only the TOS byte and the IPv4 checksum changed.
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(out[i].size(), in[i].size());
    for (size_t j = 0; j < in[i].size(); ++j) {
      if (j == 14 + 1 || j == 14 + 10 || j == 14 + 11) continue;
      EXPECT_EQ(out[i][j], in[i][j]) << "packet " << i << " byte " << j;
    }
  }
  StatsSnapshot s = stats_->Snapshot();
  EXPECT_EQ(s.storm_level_packets[1], 3u);
  EXPECT_EQ(s.storm_level_packets[3], 1u);
  EXPECT_EQ(s.storm_level_packets[0] + s.storm_level_packets[2], 0u);
  EXPECT_EQ(s.storm_level_bytes[1], in[0].size() + in[1].size() + in[2].size());
  EXPECT_EQ(s.storm_level_bytes[3], in[3].size());
  EXPECT_EQ(s.storm_table_full, 0u);
  for (uint64_t d : s.drops) EXPECT_EQ(d, 0u);
  EXPECT_EQ(rte_mempool_avail_count(Env::pool), avail_before_);
}

TEST_F(StormTagTest, PerPacketRecomputesTheLevel) {
  std::vector<std::vector<uint8_t>> out =
      RunHost(storm::Mode::kPerPacket, WriteFirstMiddleLast(frame_));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(Inspect(out[0]).dscp, 10);  // R = 3072
  EXPECT_EQ(Inspect(out[1]).dscp, 10);  // R = 2048
  EXPECT_EQ(Inspect(out[2]).dscp, 18);  // R = 1024: level 2
  EXPECT_TRUE(Inspect(out[2]).icrc_ok);
}

TEST_F(StormTagTest, UplinkTrafficPassesUntouched) {
  std::vector<std::vector<uint8_t>> in = WriteFirstMiddleLast(frame_);
  Inject(uplink_, in);
  auto w = MakeStormWorker(storm::Mode::kPerMessage);
  for (int i = 0; i < 10; ++i) w->PollOnce();
  EXPECT_EQ(Drain(host_.tx), in);
  StatsSnapshot s = stats_->Snapshot();
  for (uint64_t n : s.storm_level_packets) EXPECT_EQ(n, 0u);
}

TEST_F(StormTagTest, FullTableTagsWithTheDefaultLevelAndCounts) {
  // 1024 entries, 4 per bucket: 1100 QPs cannot all fit while none is idle.
  std::vector<std::vector<uint8_t>> in;
  pkt::RoceSpec r;
  r.opcode = pkt::op::kSendOnly;
  r.payload_len = 16;
  for (uint32_t q = 0; q < 1100; ++q) {
    r.dest_qp = q + 1;
    in.push_back(pkt::BuildRoce(frame_, r));
  }
  std::vector<std::vector<uint8_t>> out;
  auto w = MakeStormWorker(storm::Mode::kPerMessage);
  for (size_t off = 0; off < in.size(); off += 500) {
    Inject(host_, {in.begin() + off, in.begin() + std::min(in.size(), off + 500)});
    for (int i = 0; i < 40; ++i) w->PollOnce();
    for (auto& f : Drain(uplink_.tx)) out.push_back(std::move(f));
  }
  ASSERT_EQ(out.size(), in.size());
  StatsSnapshot s = stats_->Snapshot();
  EXPECT_GT(s.storm_table_full, 0u);
  uint64_t tagged = 0;
  for (uint64_t n : s.storm_level_packets) tagged += n;
  EXPECT_EQ(tagged, in.size());
  for (const auto& f : out) EXPECT_TRUE(Inspect(f).icrc_ok);
}

}  // namespace
}  // namespace heddle::pipeline
