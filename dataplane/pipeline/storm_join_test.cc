// The storm-tag stage's response join (docs/storm.md §6.1) and the fabric ordering guard (§6.5):
// acknowledgements towards the host paired through a fake host index with their QP's request
// entry, on the worker that holds it or across two stages sharing one StormControl (the rings);
// NAK, duplicate, old, ahead and wrapping PSNs; READ responses; hostile input (unknown QPNs,
// malformed or truncated acknowledgements); full rings; the guard capping a request behind
// unacknowledged packets, and not once they are acknowledged or without a join.
#include <rte_mbuf.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "dataplane/pipeline/storm_control.h"
#include "dataplane/pipeline/storm_stage.h"
#include "dataplane/pipeline/testing/eal_pool_env.h"
#include "dataplane/pipeline/testing/mbuf_frame.h"
#include "dataplane/pkt/builder.h"
#include "drivers/dpdk/eal.h"
#include "drivers/verbs/host_backlog.h"
#include "gtest/gtest.h"

namespace heddle::pipeline {
namespace {

class Env : public test_util::EalPoolEnv {
 public:
  Env() : EalPoolEnv("storm_join_test", 2047) {}
};
::testing::Environment* const env = ::testing::AddGlobalTestEnvironment(new Env);

constexpr uint16_t kHostPort = 0;
constexpr uint16_t kUplinkPort = 1;
// The local host is 10.0.0.1; its QP 0x33 is connected to QP 7 of the peer 10.0.0.2, its QP 0x34
// to the peer's QP 8. QP 0x35 is the shim's too but has no pair (built without a local QPN).
constexpr uint32_t kLocalQp = 0x33, kPeerQp = 7;
constexpr uint32_t kLocalQp2 = 0x34, kPeerQp2 = 8;

using Ip = std::array<uint8_t, 16>;
Ip V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

storm::LevelConfig Levels(storm::Mode mode) {
  storm::LevelConfig c;
  c.levels = 4;
  c.cutoffs = {4096, 65536, 1u << 20, 0, 0, 0, 0};
  c.mode = mode;
  c.control_level = 3;
  return c;
}

// A request from the local host (10.0.0.1) to the peer (10.0.0.2), BTH QPN = the peer's QP.
std::vector<uint8_t> Request(uint8_t opcode, uint32_t peer_qp, uint32_t psn, uint32_t dma_length,
                             uint16_t payload) {
  pkt::FrameSpec f;
  pkt::RoceSpec r;
  r.opcode = opcode;
  r.dest_qp = peer_qp;
  r.psn = psn & 0xffffff;
  r.dma_length = dma_length;
  r.payload_len = payload;
  return pkt::BuildRoce(f, r);
}

// A response from the peer to the local host, BTH QPN = the local QP.
std::vector<uint8_t> Response(uint8_t opcode, uint32_t local_qp, uint32_t psn, uint8_t syndrome = 0,
                              uint16_t payload = 0) {
  pkt::FrameSpec f;
  f.src_ip4 = {10, 0, 0, 2};
  f.dst_ip4 = {10, 0, 0, 1};
  pkt::RoceSpec r;
  r.opcode = opcode;
  r.dest_qp = local_qp;
  r.psn = psn & 0xffffff;
  r.syndrome = syndrome;
  r.payload_len = payload;
  return pkt::BuildRoce(f, r);
}
std::vector<uint8_t> Ack(uint32_t local_qp, uint32_t psn, uint8_t syndrome = 0) {
  return Response(pkt::op::kAcknowledge, local_qp, psn, syndrome);
}

storm::QpKey RequestKey(uint32_t peer_qp) {
  storm::QpKey k;
  k.direction = storm::Direction::kRequest;
  k.src_ip = V4(10, 0, 0, 1);
  k.dst_ip = V4(10, 0, 0, 2);
  k.dest_qpn = peer_qp;
  return k;
}

// One worker: its stage, stats and the packets it holds.
struct TestWorker {
  LcoreStats stats;
  WorkerContext ctx{&stats};
  std::unique_ptr<StormTagStage> stage;
  std::vector<std::pair<rte_mbuf*, uint32_t*>> held;
  Burst b;

  // Runs parsed descriptors (`descs[i]` for frames[i]) through the stage as one burst.
  std::vector<int> RunDescs(const std::vector<std::vector<uint8_t>>& frames,
                            const std::vector<pkt::PacketDesc>& descs, uint16_t ingress) {
    b.n = 0;
    b.ingress = ingress;
    for (size_t i = 0; i < frames.size(); ++i) {
      rte_mbuf* m = rte_pktmbuf_alloc(Env::pool);
      EXPECT_NE(m, nullptr);
      test_util::AppendFrame(m, frames[i].data(), frames[i].size());
      b.desc[b.n] = descs[i];
      b.pkts[b.n] = m;
      b.egress[b.n] = 1;
      b.level[b.n] = 0;
      b.held[b.n] = nullptr;
      ++b.n;
    }
    EXPECT_EQ(stage->Process(ctx, b), frames.size());
    std::vector<int> levels;
    for (uint16_t i = 0; i < b.n; ++i) {
      levels.push_back(b.level[i]);
      held.push_back({b.pkts[i], b.held[i]});
    }
    return levels;
  }
  std::vector<int> Run(const std::vector<std::vector<uint8_t>>& frames, uint16_t ingress) {
    std::vector<pkt::PacketDesc> descs(frames.size());
    for (size_t i = 0; i < frames.size(); ++i) {
      EXPECT_EQ(pkt::Parse(frames[i].data(), frames[i].size(), &descs[i]), pkt::ParseError::kOk);
    }
    return RunDescs(frames, descs, ingress);
  }
  // The held packets leave heddled.
  void Release() {
    for (auto& [m, h] : held) {
      if (h != nullptr && *h > 0) --*h;
      rte_pktmbuf_free(m);
    }
    held.clear();
  }
  // The request entry of the peer's QP `peer_qp` in this worker's table, or nullptr.
  const storm::QpEntry* Entry(uint32_t peer_qp) const {
    return stage->table().Find(RequestKey(peer_qp));
  }
  uint32_t Acked(uint32_t peer_qp) const {
    const storm::QpEntry* e = Entry(peer_qp);
    return e != nullptr ? e->acked_psn : 0xdead;
  }
};

class StormJoinTest : public ::testing::Test {
 protected:
  struct Setup {
    int workers = 1;
    storm::Mode mode = storm::Mode::kPerMessage;
    storm::BacklogSource source = storm::BacklogSource::kHostShim;
    bool fabric_guard = true;
    size_t ring_slots = StormControl::kDefaultAckRingSlots;
    bool publish_index = true;
  };

  void Make(const Setup& s) {
    for (TestWorker& w : w_) w.Release();
    w_.clear();
    control_ = std::make_unique<StormControl>(Levels(s.mode), s.workers, false, s.ring_slots);
    w_ = std::vector<TestWorker>(s.workers);
    std::bitset<kMaxPorts> hosts;
    hosts.set(kHostPort);
    for (int i = 0; i < s.workers; ++i) {
      w_[i].stage = std::make_unique<StormTagStage>(
          StormTagStage::Options{.table = {.capacity = 1024, .idle_ms = 1000},
                                 .mtu = 1024,
                                 .host_ports = hosts,
                                 .backlog_source = s.source,
                                 .control = control_.get(),
                                 .worker = i,
                                 .clock = [this] { return now_ms_; },
                                 .housekeep_every = 1,
                                 .fabric_guard = s.fabric_guard});
    }
    if (s.publish_index) Publish();
  }
  void TearDown() override {
    for (TestWorker& w : w_) w.Release();
  }

  // The fake shim: the local QPs and their peers, published while every worker polls.
  void Publish() {
    std::vector<verbs::HostBacklogIndex::Entry> entries = {
        {V4(10, 0, 0, 2), kPeerQp, 0, 0, kLocalQp},
        {V4(10, 0, 0, 2), kPeerQp2, 0, 0, kLocalQp2},
        {V4(10, 0, 0, 2), 9, 0, 0},  // a backlog, no local QPN: no pair
    };
    std::shared_ptr<const verbs::HostBacklogIndex> index = verbs::HostBacklogIndex::Build(entries);
    std::atomic<bool> done{false};
    std::thread t([&] {
      control_->PublishHostBacklog(index);
      done = true;
    });
    while (!done) PollAll();
    t.join();
    ASSERT_EQ(control_->host_backlog(), index.get());
  }
  void PollAll() {
    for (TestWorker& w : w_) w.stage->Poll(w.ctx);
  }
  StormWorkerCounters Counters() {
    PollAll();  // publishes (housekeep_every = 1); also drains the rings
    return control_->counters();
  }

  uint32_t now_ms_ = 100;
  std::unique_ptr<StormControl> control_;
  std::vector<TestWorker> w_;
};

TEST_F(StormJoinTest, AcknowledgementsReachTheRequestEntryOnOneWorker) {
  Make({});
  TestWorker& w = w_[0];
  // SENDs at PSNs 1..4 on the local QP 0x33 (to the peer's QP 7).
  w.Run({Request(pkt::op::kSendOnly, kPeerQp, 1, 0, 64),
         Request(pkt::op::kSendOnly, kPeerQp, 2, 0, 64),
         Request(pkt::op::kSendOnly, kPeerQp, 3, 0, 64),
         Request(pkt::op::kSendOnly, kPeerQp, 4, 0, 64)},
        kHostPort);
  ASSERT_NE(w.Entry(kPeerQp), nullptr);
  EXPECT_EQ(w.Acked(kPeerQp), storm::kNoPsn);
  // The peer acknowledges up to 2: its ACK carries the local QPN 0x33 and reaches the entry of
  // QP 7. The ACK itself still goes to the host at the control level.
  EXPECT_EQ(w.Run({Ack(kLocalQp, 2)}, kUplinkPort), std::vector<int>{3});
  EXPECT_EQ(w.Acked(kPeerQp), 2u);
  // Duplicate and older ACKs do not move it back; one for a PSN never sent is ignored.
  w.Run({Ack(kLocalQp, 2), Ack(kLocalQp, 1), Ack(kLocalQp, 40)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 2u);
  // A NAK (sequence error) at 4: 3 and before are acknowledged. An RNR NAK at 4: still 3.
  w.Run({Ack(kLocalQp, 4, 0x60)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 3u);
  w.Run({Ack(kLocalQp, 4, 0x21)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 3u);
  w.Run({Ack(kLocalQp, 4)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 4u);
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.resp_joined_local, 7u);
  EXPECT_EQ(c.resp_joined_remote, 0u);
  EXPECT_EQ(c.resp_no_pair, 0u);
  EXPECT_EQ(c.resp_no_entry, 0u);
  EXPECT_EQ(c.acks_advanced, 3u);  // 2, 3, 4
  EXPECT_EQ(c.acks_old, 3u);       // 2 again, 1, the RNR NAK's 3
  EXPECT_EQ(c.acks_ahead, 1u);     // 40
  // The response-direction entry of the ACKs is a separate entry (the in-order guard towards the
  // host); the request entry is the one joined.
  EXPECT_EQ(w.stage->table().size(), 2u);
}

TEST_F(StormJoinTest, PsnsWrapAround) {
  Make({});
  TestWorker& w = w_[0];
  w.Run({Request(pkt::op::kSendOnly, kPeerQp, 0xfffffe, 0, 64),
         Request(pkt::op::kSendOnly, kPeerQp, 0xffffff, 0, 64),
         Request(pkt::op::kSendOnly, kPeerQp, 0, 0, 64),
         Request(pkt::op::kSendOnly, kPeerQp, 1, 0, 64)},
        kHostPort);
  w.Run({Ack(kLocalQp, 0xffffff)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 0xffffffu);
  w.Run({Ack(kLocalQp, 0)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 0u);
  w.Run({Ack(kLocalQp, 0xfffffe)}, kUplinkPort);  // older, across the wrap
  EXPECT_EQ(w.Acked(kPeerQp), 0u);
  // A NAK at 0 after the wrap acknowledges 0xffffff: older than 0, ignored.
  w.Run({Ack(kLocalQp, 0, 0x60)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 0u);
  w.Run({Ack(kLocalQp, 1)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 1u);
}

TEST_F(StormJoinTest, ReadResponsesCarryTheReadsProgress) {
  Make({});
  TestWorker& w = w_[0];
  // An 8 KiB READ at PSN 10: eight 1 KiB responses, PSNs 10..17 (one packet on the request side).
  w.Run({Request(pkt::op::kReadRequest, kPeerQp, 10, 8192, 0)}, kHostPort);
  std::vector<std::vector<uint8_t>> responses;
  responses.push_back(Response(pkt::op::kReadResponseFirst, kLocalQp, 10, 0, 1024));
  for (uint32_t p = 11; p <= 13; ++p) {
    responses.push_back(Response(pkt::op::kReadResponseMiddle, kLocalQp, p, 0, 1024));
  }
  w.Run(responses, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 13u);
  w.Run({Response(pkt::op::kReadResponseLast, kLocalQp, 17, 0, 1024)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 17u);
  // Every response packet is joined (the burst of four shares one pair lookup).
  EXPECT_EQ(Counters().resp_joined_local, 5u);
}

TEST_F(StormJoinTest, HostileAndUnknownResponsesAreCountedNotFatal) {
  Make({});
  TestWorker& w = w_[0];
  w.Run({Request(pkt::op::kSendOnly, kPeerQp, 1, 0, 64)}, kHostPort);
  // A local QPN the shim does not know, and the shim's QP without a pair.
  w.Run({Ack(0x99, 1), Ack(0xffffff, 1), Ack(9, 1)}, kUplinkPort);
  // A reserved AETH syndrome (010).
  w.Run({Ack(kLocalQp, 1, 0x40)}, kUplinkPort);
  // An ACK whose AETH was cut short: the parser refuses the frame (not RoCE to the stage)...
  std::vector<uint8_t> cut = Ack(kLocalQp, 1);
  pkt::PacketDesc d{};
  const size_t bth_end = 14 + 20 + 8 + 12;
  EXPECT_NE(pkt::Parse(cut.data(), bth_end + 2, &d), pkt::ParseError::kOk);
  w.RunDescs({cut}, {d}, kUplinkPort);
  // ...and a descriptor that claims an ACK without AETH is malformed, not read.
  ASSERT_EQ(pkt::Parse(cut.data(), cut.size(), &d), pkt::ParseError::kOk);
  d.flags &= static_cast<uint16_t>(~pkt::kFlagAeth);
  d.aeth = 0xffffffff;
  w.RunDescs({cut}, {d}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), storm::kNoPsn);
  // A paired QP whose requests this worker never saw (one worker: no one else to ask).
  w.Run({Ack(kLocalQp2, 5)}, kUplinkPort);
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.resp_no_pair, 3u);
  EXPECT_EQ(c.resp_malformed, 2u);
  EXPECT_EQ(c.resp_no_entry, 1u);
  EXPECT_EQ(c.resp_joined_local, 0u);
  EXPECT_EQ(c.resp_ring_full, 0u);
  // Still joining afterwards.
  w.Run({Ack(kLocalQp, 1)}, kUplinkPort);
  EXPECT_EQ(w.Acked(kPeerQp), 1u);
}

TEST_F(StormJoinTest, NoJoinWithoutAHostIndex) {
  // Egress backlog source: no index is read, nothing joined, nothing counted.
  Make({.source = storm::BacklogSource::kEgressQueue, .publish_index = false});
  w_[0].Run({Request(pkt::op::kSendOnly, kPeerQp, 1, 0, 64)}, kHostPort);
  w_[0].Run({Ack(kLocalQp, 1)}, kUplinkPort);
  EXPECT_EQ(w_[0].Acked(kPeerQp), storm::kNoPsn);
  // Host source before the first index is published: the same.
  Make({.publish_index = false});
  w_[0].Run({Request(pkt::op::kSendOnly, kPeerQp, 1, 0, 64)}, kHostPort);
  w_[0].Run({Ack(kLocalQp, 1)}, kUplinkPort);
  EXPECT_EQ(w_[0].Acked(kPeerQp), storm::kNoPsn);
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.resp_joined_local + c.resp_no_pair + c.resp_no_entry + c.resp_malformed, 0u);
}

TEST_F(StormJoinTest, ResponsesOnAnotherWorkerReachTheOwnerThroughItsRing) {
  Make({.workers = 2});
  TestWorker& requests = w_[0];   // RSS put the QP's requests here...
  TestWorker& responses = w_[1];  // ...and its responses here
  requests.Run({Request(pkt::op::kWriteOnly, kPeerQp, 100, 64, 64),
                Request(pkt::op::kWriteOnly, kPeerQp, 101, 64, 64),
                Request(pkt::op::kWriteOnly, kPeerQp, 102, 64, 64)},
               kHostPort);
  // Worker 1 does not hold the entry: it posts to worker 0, which applies when it polls. Three
  // ACKs of one QP in a burst travel as one message with the latest PSN.
  responses.Run({Ack(kLocalQp, 100), Ack(kLocalQp, 101), Ack(kLocalQp, 102)}, kUplinkPort);
  EXPECT_EQ(responses.Entry(kPeerQp), nullptr);
  EXPECT_EQ(requests.Acked(kPeerQp), storm::kNoPsn);  // not before worker 0 polls
  EXPECT_EQ(control_->ack_ring(1, 0)->size(), 1u);
  requests.stage->Poll(requests.ctx);
  EXPECT_EQ(requests.Acked(kPeerQp), 102u);
  // A NAK and an old ACK travel the same way, with the same semantics.
  responses.Run({Ack(kLocalQp, 101)}, kUplinkPort);
  requests.stage->Poll(requests.ctx);
  EXPECT_EQ(requests.Acked(kPeerQp), 102u);
  requests.Run({Request(pkt::op::kWriteOnly, kPeerQp, 103, 64, 64)}, kHostPort);
  responses.Run({Ack(kLocalQp, 103, 0x60)}, kUplinkPort);
  requests.stage->Poll(requests.ctx);
  EXPECT_EQ(requests.Acked(kPeerQp), 102u);  // NAK at 103: 102 acknowledged (already)
  responses.Run({Ack(kLocalQp, 103)}, kUplinkPort);
  requests.stage->Poll(requests.ctx);
  EXPECT_EQ(requests.Acked(kPeerQp), 103u);
  // A paired QP neither worker tracks: worker 0 counts the miss.
  responses.Run({Ack(kLocalQp2, 7)}, kUplinkPort);
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.resp_joined_local, 0u);
  EXPECT_EQ(c.resp_joined_remote, 4u);
  EXPECT_EQ(c.resp_no_entry, 1u);
  EXPECT_EQ(c.resp_ring_full, 0u);
  EXPECT_EQ(c.acks_advanced, 2u);
  EXPECT_EQ(control_->ack_ring(1, 0)->size(), 0u);
  EXPECT_EQ(control_->ack_ring(0, 0), nullptr);
  EXPECT_EQ(control_->ack_ring(0, 2), nullptr);
}

TEST_F(StormJoinTest, AFullRingDropsAndCounts) {
  Make({.workers = 2, .ring_slots = 2});
  TestWorker& requests = w_[0];
  TestWorker& responses = w_[1];
  requests.Run({Request(pkt::op::kSendOnly, kPeerQp, 1, 0, 64),
                Request(pkt::op::kSendOnly, kPeerQp2, 1, 0, 64)},
               kHostPort);
  // Four QP runs in one burst (the two QPs alternate): four messages for a 2-slot ring.
  responses.Run({Ack(kLocalQp, 1), Ack(kLocalQp2, 1), Ack(kLocalQp, 1), Ack(kLocalQp2, 1)},
                kUplinkPort);
  EXPECT_EQ(control_->ack_ring(1, 0)->size(), 2u);
  requests.stage->Poll(requests.ctx);
  EXPECT_EQ(requests.Acked(kPeerQp), 1u);
  EXPECT_EQ(requests.Acked(kPeerQp2), 1u);
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.resp_ring_full, 2u);
  EXPECT_EQ(c.resp_joined_remote, 2u);
}

TEST_F(StormJoinTest, TwoWorkersEachJoinTheirOwnQpsConcurrently) {
  // Worker 0 holds QP 7's requests, worker 1 QP 8's; each receives the other's ACKs. Both run on
  // their own threads (clean under TSan: the rings are the only state the stages share). As on a
  // wire, a PSN is acknowledged only after its request went out: each thread acknowledges the
  // other's latest request, published through an atomic.
  constexpr uint32_t kRounds = 2000;
  Make({.workers = 2, .ring_slots = 2 * kRounds});  // never full, however the threads run
  std::atomic<uint32_t> sent[2] = {0, 0};
  uint64_t acks_sent[2] = {0, 0};
  auto run = [&](int me, uint32_t own_peer_qp, uint32_t other_local_qp) {
    TestWorker& w = w_[me];
    for (uint32_t psn = 1; psn <= kRounds; ++psn) {
      w.Run({Request(pkt::op::kSendOnly, own_peer_qp, psn, 0, 64)}, kHostPort);
      sent[me].store(psn, std::memory_order_release);
      const uint32_t other = sent[1 - me].load(std::memory_order_acquire);
      if (other > 0) {
        w.Run({Ack(other_local_qp, other)}, kUplinkPort);
        ++acks_sent[me];
      }
      w.stage->Poll(w.ctx);
      w.Release();
    }
  };
  std::thread t0(run, 0, kPeerQp, kLocalQp2);
  std::thread t1(run, 1, kPeerQp2, kLocalQp);
  t0.join();
  t1.join();
  // The last ACKs, then drain what is left (at most drain_budget messages per ring per poll).
  w_[0].Run({Ack(kLocalQp2, kRounds)}, kUplinkPort);
  w_[1].Run({Ack(kLocalQp, kRounds)}, kUplinkPort);
  while (control_->ack_ring(0, 1)->size() + control_->ack_ring(1, 0)->size() > 0) PollAll();
  EXPECT_EQ(w_[0].Acked(kPeerQp), kRounds);
  EXPECT_EQ(w_[1].Acked(kPeerQp2), kRounds);
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.resp_joined_remote, acks_sent[0] + acks_sent[1] + 2);
  EXPECT_EQ(c.resp_no_entry, 0u);
  EXPECT_EQ(c.acks_ahead, 0u);
  EXPECT_EQ(c.resp_ring_full, 0u);
  EXPECT_EQ(c.resp_joined_local, 0u);
}

TEST_F(StormJoinTest, ShowQpReportsAcknowledgedPsnAndUnacknowledgedPackets) {
  Make({});
  TestWorker& w = w_[0];
  // QP 7: a 4-packet WRITE at 1..4, acknowledged up to 2. QP 8: an 8 KiB READ at 20 (eight 1 KiB
  // responses, 20..27), three of them received. QP 9: not paired, never acknowledged.
  w.Run({Request(pkt::op::kWriteFirst, kPeerQp, 1, 4096, 1024),
         Request(pkt::op::kWriteMiddle, kPeerQp, 2, 0, 1024),
         Request(pkt::op::kWriteMiddle, kPeerQp, 3, 0, 1024),
         Request(pkt::op::kWriteLast, kPeerQp, 4, 0, 1024),
         Request(pkt::op::kReadRequest, kPeerQp2, 20, 8192, 0),
         Request(pkt::op::kSendOnly, 9, 1, 0, 64)},
        kHostPort);
  w.Run({Ack(kLocalQp, 2), Response(pkt::op::kReadResponseFirst, kLocalQp2, 20, 0, 1024),
         Response(pkt::op::kReadResponseMiddle, kLocalQp2, 21, 0, 1024),
         Response(pkt::op::kReadResponseMiddle, kLocalQp2, 22, 0, 1024)},
        kUplinkPort);
  std::atomic<bool> done{false};
  absl::StatusOr<std::vector<QpRow>> rows;
  std::thread t([&] {
    rows = control_->TopQps(10, QpSort::kIdle, absl::Seconds(5));
    done = true;
  });
  while (!done) PollAll();
  t.join();
  ASSERT_TRUE(rows.ok()) << rows.status();
  int seen = 0;
  for (const QpRow& r : *rows) {
    if (r.direction != static_cast<uint8_t>(storm::Direction::kRequest)) {
      EXPECT_EQ(r.acked_psn, storm::kNoPsn);  // the ACKs' own entries
      continue;
    }
    ++seen;
    if (r.qpn == kPeerQp) {
      EXPECT_EQ(r.acked_psn, 2u);
      EXPECT_EQ(r.unacked, 2u);
    } else if (r.qpn == kPeerQp2) {
      EXPECT_EQ(r.acked_psn, 22u);
      EXPECT_EQ(r.unacked, 5u);  // 23..27 at the 1 KiB path MTU
    } else {
      EXPECT_EQ(r.qpn, 9u);
      EXPECT_EQ(r.acked_psn, storm::kNoPsn);
      EXPECT_EQ(r.unacked, storm::kNoPsn);
    }
  }
  EXPECT_EQ(seen, 3);
}

// ---------------------------------------------------------------------------------------------
// Fabric ordering guard (§6.5).

// A 2 MiB WRITE (level 0) goes out and leaves heddled; its data is then in the fabric. A 64-byte
// SEND on the same QP alone is level 3: a strict-priority switch would deliver it before the
// WRITE's last packets, and the responder would NAK it (go-back-N).
constexpr uint32_t kBigWrite = 2u << 20;
std::vector<std::vector<uint8_t>> BigWrite(uint32_t peer_qp, uint32_t first_psn) {
  return {Request(pkt::op::kWriteFirst, peer_qp, first_psn, kBigWrite, 1024),
          Request(pkt::op::kWriteMiddle, peer_qp, first_psn + 1, 0, 1024),
          Request(pkt::op::kWriteLast, peer_qp, first_psn + 2, 0, 1024)};
}

TEST_F(StormJoinTest, FabricGuardCapsARequestBehindUnacknowledgedPackets) {
  Make({});
  TestWorker& w = w_[0];
  EXPECT_EQ(w.Run(BigWrite(kPeerQp, 1), kHostPort), (std::vector<int>{0, 0, 0}));
  w.Release();  // nothing held in heddled: the in-order guard no longer applies
  // The peer acknowledged the first packet only: PSNs 2 and 3 are in the fabric at level 0.
  w.Run({Ack(kLocalQp, 1)}, kUplinkPort);
  EXPECT_EQ(w.Run({Request(pkt::op::kSendOnly, kPeerQp, 4, 0, 64)}, kHostPort),
            std::vector<int>{0});
  // So is a READ request (the control level otherwise).
  w.Release();
  EXPECT_EQ(w.Run({Request(pkt::op::kReadRequest, kPeerQp, 5, 0, 64)}, kHostPort),
            std::vector<int>{0});
  w.Release();
  // Everything acknowledged (the READ's one response at 5): the next SEND takes its own level.
  w.Run({Response(pkt::op::kReadResponseOnly, kLocalQp, 5, 0, 64)}, kUplinkPort);
  EXPECT_EQ(w.Run({Request(pkt::op::kSendOnly, kPeerQp, 6, 0, 64)}, kHostPort),
            std::vector<int>{3});
  w.Release();
  // The cap holds for every packet of a capped request (per-message: one level per message),
  // and a later request behind it is capped at its level in turn.
  w.Run(BigWrite(kPeerQp, 7), kHostPort);
  w.Release();
  w.Run({Ack(kLocalQp, 8)}, kUplinkPort);
  EXPECT_EQ(w.Run({Request(pkt::op::kSendFirst, kPeerQp, 10, 0, 1024)}, kHostPort),
            std::vector<int>{0});
  w.Release();
  w.Run({Ack(kLocalQp, 10)}, kUplinkPort);  // all but the SEND's last packet acknowledged
  EXPECT_EQ(w.Run({Request(pkt::op::kSendLast, kPeerQp, 11, 0, 64)}, kHostPort),
            std::vector<int>{0});
  // Requests started behind unacknowledged packets: the SEND at 4, the READ, the WRITE at 7
  // (behind the SEND at 6, whose level 3 did not lower it) and the SEND at 10.
  EXPECT_EQ(Counters().fabric_guarded, 4u);
}

TEST_F(StormJoinTest, FabricGuardWorksAcrossWorkers) {
  // The QP's acknowledgements reach another worker: the owner learns of them through its ring.
  Make({.workers = 2});
  TestWorker& requests = w_[0];
  TestWorker& responses = w_[1];
  requests.Run(BigWrite(kPeerQp, 1), kHostPort);
  requests.Release();
  responses.Run({Ack(kLocalQp, 2)}, kUplinkPort);
  requests.stage->Poll(requests.ctx);
  EXPECT_EQ(requests.Run({Request(pkt::op::kSendOnly, kPeerQp, 4, 0, 64)}, kHostPort),
            std::vector<int>{0});
  requests.Release();
  responses.Run({Ack(kLocalQp, 4)}, kUplinkPort);
  requests.stage->Poll(requests.ctx);
  EXPECT_EQ(requests.Run({Request(pkt::op::kSendOnly, kPeerQp, 5, 0, 64)}, kHostPort),
            std::vector<int>{3});
}

TEST_F(StormJoinTest, WithoutAJoinOrWithTheGuardOffNothingIsCapped) {
  auto scenario = [&](uint32_t peer_qp, uint32_t local_qp) {
    TestWorker& w = w_[0];
    w.Run(BigWrite(peer_qp, 1), kHostPort);
    w.Release();
    w.Run({Ack(local_qp, 1)}, kUplinkPort);
    const std::vector<int> l = w.Run({Request(pkt::op::kSendOnly, peer_qp, 4, 0, 64)}, kHostPort);
    w.Release();
    return l;
  };
  // storm.fabric_guard: false.
  Make({.fabric_guard = false});
  EXPECT_EQ(scenario(kPeerQp, kLocalQp), std::vector<int>{3});
  EXPECT_EQ(w_[0].Acked(kPeerQp), 1u);  // still joined
  // A QP the shim has no pair for (QP 9): never acknowledged, never capped.
  Make({});
  EXPECT_EQ(scenario(9, 0x77), std::vector<int>{3});
  // No shim at all (egress backlog source).
  Make({.source = storm::BacklogSource::kEgressQueue, .publish_index = false});
  EXPECT_EQ(scenario(kPeerQp, kLocalQp), std::vector<int>{3});
  // Per-packet mode (reordering-tolerant transports) is never capped.
  Make({.mode = storm::Mode::kPerPacket});
  EXPECT_EQ(scenario(kPeerQp, kLocalQp), std::vector<int>{3});
  EXPECT_EQ(Counters().fabric_guarded, 0u);
}

TEST_F(StormJoinTest, FabricGuardLetsGoOfAQpWhoseAcknowledgementsStopped) {
  // An acked_psn frozen far behind (acknowledgements lost to the join): beyond
  // kMaxGuardedUnacked packets the guard assumes it lost track and stops capping.
  Make({});
  TestWorker& w = w_[0];
  w.Run(BigWrite(kPeerQp, 1), kHostPort);
  w.Release();
  w.Run({Ack(kLocalQp, 1)}, kUplinkPort);
  const uint32_t far = 2 + StormTagStage::kMaxGuardedUnacked;
  w.Run({Request(pkt::op::kWriteLast, kPeerQp, far - 1, 0, 1024)}, kHostPort);  // a PSN jump
  w.Release();
  EXPECT_EQ(w.Run({Request(pkt::op::kSendOnly, kPeerQp, far, 0, 64)}, kHostPort),
            std::vector<int>{0});  // kMaxGuardedUnacked unacknowledged: still capped
  w.Release();
  EXPECT_EQ(w.Run({Request(pkt::op::kSendOnly, kPeerQp, far + 1, 0, 64)}, kHostPort),
            std::vector<int>{3});
}

}  // namespace
}  // namespace heddle::pipeline
