// READ responses the host sends as responder (docs/storm.md §6.6), through the storm-tag stage:
// one level per stream in per-message mode and a falling one per packet without the join; the
// READ request from the uplink joined through a fake host index to the responses' key, on the
// same worker or across two stages sharing one StormControl (the READ rings), also after the
// stream started; levels from the joined size; the in-order guard, the response window and the
// fabric guard's held level; hostile input; a full side table.
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
  Env() : EalPoolEnv("storm_read_test", 4095) {}
};
::testing::Environment* const env = ::testing::AddGlobalTestEnvironment(new Env);

constexpr uint16_t kHostPort = 0;
constexpr uint16_t kUplinkPort = 1;
// The local host 10.0.0.1 answers READs on its QP 0x33, connected to QP 7 of the peer 10.0.0.2,
// and on QP 0x34, connected to the peer's QP 8.
constexpr uint32_t kLocalQp = 0x33, kPeerQp = 7;
constexpr uint32_t kLocalQp2 = 0x34, kPeerQp2 = 8;
constexpr uint16_t kMtu = 1024;

using Ip = std::array<uint8_t, 16>;
Ip V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

// K = 4, cutoffs 4 KiB / 64 KiB / 1 MiB: level 3 for R <= 4 KiB, 2 up to 64 KiB, 1 up to 1 MiB,
// 0 above. An unknown size counts as 8 KiB until more was sent (level 2), so that the unknown-size
// rule is told apart from the default level of untracked traffic (level 2 too, but fixed); in
// per-message mode as storm.unknown_size (8 KiB unless a test says otherwise).
storm::LevelConfig Levels(storm::Mode mode, uint32_t unknown_size = 8192) {
  storm::LevelConfig c;
  c.levels = 4;
  c.cutoffs = {4096, 65536, 1u << 20, 0, 0, 0, 0};
  c.mode = mode;
  c.control_level = 3;
  c.unknown_floor = 8192;
  c.unknown_size = unknown_size;
  return c;
}

// A frame the host sends: 10.0.0.1 -> 10.0.0.2, BTH QPN = the peer's QP.
std::vector<uint8_t> FromHost(uint8_t opcode, uint32_t peer_qp, uint32_t psn, uint16_t payload,
                              uint32_t dma_length = 0) {
  pkt::FrameSpec f;
  f.src_ip4 = {10, 0, 0, 1};
  f.dst_ip4 = {10, 0, 0, 2};
  pkt::RoceSpec r;
  r.opcode = opcode;
  r.dest_qp = peer_qp;
  r.psn = psn & 0xffffff;
  r.dma_length = dma_length;
  r.payload_len = payload;
  return pkt::BuildRoce(f, r);
}
// The peer's READ request towards the host: 10.0.0.2 -> 10.0.0.1, BTH QPN = the local QP.
std::vector<uint8_t> PeerRead(uint32_t local_qp, uint32_t psn, uint32_t size) {
  pkt::FrameSpec f;
  f.src_ip4 = {10, 0, 0, 2};
  f.dst_ip4 = {10, 0, 0, 1};
  pkt::RoceSpec r;
  r.opcode = pkt::op::kReadRequest;
  r.dest_qp = local_qp;
  r.psn = psn & 0xffffff;
  r.dma_length = size;
  return pkt::BuildRoce(f, r);
}
std::vector<uint8_t> PeerAck(uint32_t local_qp, uint32_t psn) {
  pkt::FrameSpec f;
  f.src_ip4 = {10, 0, 0, 2};
  f.dst_ip4 = {10, 0, 0, 1};
  pkt::RoceSpec r;
  r.opcode = pkt::op::kAcknowledge;
  r.dest_qp = local_qp;
  r.psn = psn & 0xffffff;
  return pkt::BuildRoce(f, r);
}

// The responses to a READ of `size` bytes at `psn`: ceil(size / kMtu) packets (one for 0 bytes).
std::vector<std::vector<uint8_t>> Responses(uint32_t peer_qp, uint32_t psn, uint32_t size) {
  const uint32_t n = size == 0 ? 1 : (size + kMtu - 1) / kMtu;
  std::vector<std::vector<uint8_t>> out;
  for (uint32_t i = 0; i < n; ++i) {
    const uint16_t payload =
        static_cast<uint16_t>(i + 1 < n ? kMtu : size - (n - 1) * static_cast<uint32_t>(kMtu));
    uint8_t op = pkt::op::kReadResponseMiddle;
    if (n == 1) {
      op = pkt::op::kReadResponseOnly;
    } else if (i == 0) {
      op = pkt::op::kReadResponseFirst;
    } else if (i + 1 == n) {
      op = pkt::op::kReadResponseLast;
    }
    out.push_back(FromHost(op, peer_qp, psn + i, payload));
  }
  return out;
}

struct TestWorker {
  LcoreStats stats;
  WorkerContext ctx{&stats};
  std::unique_ptr<StormTagStage> stage;
  std::vector<std::pair<rte_mbuf*, uint32_t*>> held;
  Burst b;

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
  // Runs the frames as bursts of at most 32 (a stream longer than a burst spans several).
  std::vector<int> Run(const std::vector<std::vector<uint8_t>>& frames, uint16_t ingress) {
    std::vector<int> levels;
    for (size_t at = 0; at < frames.size(); at += 32) {
      const size_t n = std::min<size_t>(32, frames.size() - at);
      std::vector<std::vector<uint8_t>> part(frames.begin() + at, frames.begin() + at + n);
      std::vector<pkt::PacketDesc> descs(n);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(pkt::Parse(part[i].data(), part[i].size(), &descs[i]), pkt::ParseError::kOk);
      }
      for (int l : RunDescs(part, descs, ingress)) levels.push_back(l);
    }
    return levels;
  }
  void Release() {
    for (auto& [m, h] : held) {
      if (h != nullptr && *h > 0) --*h;
      rte_pktmbuf_free(m);
    }
    held.clear();
  }
};

// Every element equal to `level`.
std::vector<int> All(size_t n, int level) { return std::vector<int>(n, level); }

class StormReadTest : public ::testing::Test {
 protected:
  struct Setup {
    int workers = 1;
    storm::Mode mode = storm::Mode::kPerMessage;
    storm::BacklogSource source = storm::BacklogSource::kHostShim;
    bool publish_index = true;
    size_t read_streams = 1024;
    uint32_t window_ms = 2;
    uint32_t unknown_size = 8192;
  };

  void Make(const Setup& s) {
    for (TestWorker& w : w_) w.Release();
    w_.clear();
    control_ = std::make_unique<StormControl>(Levels(s.mode, s.unknown_size), s.workers);
    w_ = std::vector<TestWorker>(s.workers);
    std::bitset<kMaxPorts> hosts;
    hosts.set(kHostPort);
    for (int i = 0; i < s.workers; ++i) {
      w_[i].stage = std::make_unique<StormTagStage>(
          StormTagStage::Options{.table = {.capacity = 1024, .idle_ms = 1000},
                                 .mtu = kMtu,
                                 .host_ports = hosts,
                                 .backlog_source = s.source,
                                 .control = control_.get(),
                                 .worker = i,
                                 .clock = [this] { return now_ms_; },
                                 .housekeep_every = 1,
                                 .read_streams = s.read_streams,
                                 .response_window_ms = s.window_ms});
    }
    if (s.publish_index) Publish();
  }
  void TearDown() override {
    for (TestWorker& w : w_) w.Release();
  }
  void Publish() {
    std::vector<verbs::HostBacklogIndex::Entry> entries = {
        {V4(10, 0, 0, 2), kPeerQp, 0, 0, kLocalQp},
        {V4(10, 0, 0, 2), kPeerQp2, 0, 0, kLocalQp2},
    };
    std::shared_ptr<const verbs::HostBacklogIndex> index = verbs::HostBacklogIndex::Build(entries);
    std::atomic<bool> done{false};
    std::thread t([&] {
      control_->PublishHostBacklog(index);
      done = true;
    });
    while (!done) PollAll();
    t.join();
  }
  void PollAll() {
    for (TestWorker& w : w_) w.stage->Poll(w.ctx);
  }
  StormWorkerCounters Counters() {
    PollAll();
    return control_->counters();
  }
  // Moves the clock past the response window (and nothing else: QPs stay far from idle).
  void PastWindow() { now_ms_ += 10; }

  uint32_t now_ms_ = 100;
  std::unique_ptr<StormControl> control_;
  std::vector<TestWorker> w_;
};

TEST_F(StormReadTest, WithoutAJoinAStreamIsLevelledLikeASendOfUnknownSize) {
  // No shim: the egress backlog source, no index.
  Make({.source = storm::BacklogSource::kEgressQueue, .publish_index = false});
  TestWorker& w = w_[0];
  // Per-message: the level of R = unknown_size (8 KiB: level 2) for the whole 80 KiB stream.
  EXPECT_EQ(w.Run(Responses(kPeerQp, 10, 80 * 1024), kHostPort), All(80, 2));
  w.Release();
  // The default unknown_size, above every cutoff: level 0 from its First to its Last; 200 KiB:
  // level 1. Neither changes mid-stream, though the stream is 80 KiB.
  Make({.source = storm::BacklogSource::kEgressQueue,
        .publish_index = false,
        .unknown_size = storm::kUnknownSizeLowest});
  EXPECT_EQ(w_[0].Run(Responses(kPeerQp, 10, 80 * 1024), kHostPort), All(80, 0));
  w_[0].Release();
  Make({.source = storm::BacklogSource::kEgressQueue,
        .publish_index = false,
        .unknown_size = 200 * 1024});
  EXPECT_EQ(w_[0].Run(Responses(kPeerQp, 10, 80 * 1024), kHostPort), All(80, 1));
  w_[0].Release();
  // Per-packet: R = max(bytes so far, floor) demotes it once it sent more than 64 KiB; the
  // per-message unknown_size plays no part. (No backlog source: the stream's own packets held
  // from earlier bursts would boost it.)
  Make({.mode = storm::Mode::kPerPacket,
        .source = storm::BacklogSource::kNone,
        .publish_index = false,
        .unknown_size = storm::kUnknownSizeLowest});
  // Its Last knows the stream's size (as a SEND's does): R is that packet's own bytes.
  std::vector<int> expect = All(65, 2);  // sent_before <= 64 KiB
  for (int i = 65; i < 79; ++i) expect.push_back(1);
  expect.push_back(3);
  EXPECT_EQ(w_[0].Run(Responses(kPeerQp, 10, 80 * 1024), kHostPort), expect);
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.read_unknown, 1u);
  EXPECT_EQ(c.read_sized, 0u);
  EXPECT_EQ(c.read_live, 1u);
  EXPECT_EQ(c.rreq_local + c.rreq_remote + c.rreq_no_pair, 0u);
  // Its byte count is its size once it ended, as for a SEND.
  EXPECT_EQ(control_->histogram(0)->Total(), 80u * 1024);
}

TEST_F(StormReadTest, AJoinedReadSizesItsResponses) {
  Make({});
  TestWorker& w = w_[0];
  // The peer READs 2 MiB at PSN 500, then 64 bytes at PSN 500 + 2048, then 32 KiB.
  const uint32_t big = 2u << 20, small_psn = 500 + 2048, mid_psn = small_psn + 1;
  w.Run({PeerRead(kLocalQp, 500, big), PeerRead(kLocalQp, small_psn, 64),
         PeerRead(kLocalQp, mid_psn, 32 * 1024)},
        kUplinkPort);
  // The 2 MiB stream: level 0 from its first packet to its last (per-message).
  EXPECT_EQ(w.Run(Responses(kPeerQp, 500, big), kHostPort), All(2048, 0));
  w.Release();
  PastWindow();
  // The small READ: level 3; the 32 KiB one: level 2. Alone, unknown, both would be level 2.
  EXPECT_EQ(w.Run(Responses(kPeerQp, small_psn, 64), kHostPort), All(1, 3));
  w.Release();
  PastWindow();
  EXPECT_EQ(w.Run(Responses(kPeerQp, mid_psn, 32 * 1024), kHostPort), All(32, 2));
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.rreq_local, 3u);
  EXPECT_EQ(c.read_sized, 3u);
  EXPECT_EQ(c.read_unknown, 0u);
  EXPECT_EQ(c.rreq_stale, 0u);
  // Each READ's size entered the size histogram once (auto cutoffs weigh these bytes too).
  EXPECT_EQ(control_->histogram(0)->Total(), uint64_t{big} + 64 + 32 * 1024);
}

TEST_F(StormReadTest, PerPacketAJoinedStreamClimbsAsItNearsItsEnd) {
  Make({.mode = storm::Mode::kPerPacket});
  TestWorker& w = w_[0];
  w.Run({PeerRead(kLocalQp, 0xfffff0, 80 * 1024)}, kUplinkPort);  // PSNs wrap inside the stream
  std::vector<int> expect;
  for (uint32_t i = 0; i < 80; ++i) {
    const uint32_t remaining = (80 - i) * 1024;
    expect.push_back(remaining > 65536 ? 1 : remaining > 4096 ? 2 : 3);
  }
  EXPECT_EQ(w.Run(Responses(kPeerQp, 0xfffff0, 80 * 1024), kHostPort), expect);
  EXPECT_EQ(Counters().read_sized, 1u);
}

TEST_F(StormReadTest, OutstandingReadsAreMatchedToTheirStreamsInOrder) {
  Make({});
  TestWorker& w = w_[0];
  // Three READs outstanding at once; the host answers them back to back in one burst.
  w.Run({PeerRead(kLocalQp, 10, 2048), PeerRead(kLocalQp, 12, 64), PeerRead(kLocalQp, 13, 4096)},
        kUplinkPort);
  std::vector<std::vector<uint8_t>> all;
  for (const auto& r :
       {Responses(kPeerQp, 10, 2048), Responses(kPeerQp, 12, 64), Responses(kPeerQp, 13, 4096)}) {
    all.insert(all.end(), r.begin(), r.end());
  }
  // All level 3 (each READ is <= 4 KiB; unknown, they would be level 2).
  EXPECT_EQ(w.Run(all, kHostPort), All(7, 3));
  // Retransmitted responses (the peer re-issued the READ at 13): duplicates, recorded level.
  w.Release();
  w.Run({PeerRead(kLocalQp, 13, 4096)}, kUplinkPort);
  EXPECT_EQ(w.Run(Responses(kPeerQp, 13, 4096), kHostPort), All(4, 3));
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.read_sized, 3u);
  EXPECT_EQ(c.read_duplicates, 4u);
  EXPECT_EQ(c.rreq_too_late, 1u);  // the re-issued READ: its stream was sent already
  EXPECT_EQ(c.rreq_stale, 0u);
}

TEST_F(StormReadTest, ReadsReachTheWorkerThatSeesTheResponsesThroughItsRing) {
  Make({.workers = 2});
  TestWorker& uplink = w_[0];  // RSS put the peer's READ requests here...
  TestWorker& host = w_[1];    // ...and the QP's outgoing packets here
  // Worker 1 tracks the QP once it sent something on it (here a small READ response stream).
  host.Run(Responses(kPeerQp, 1, 64), kHostPort);
  host.Release();
  PastWindow();
  uplink.Run({PeerRead(kLocalQp, 2, 2u << 20)}, kUplinkPort);
  EXPECT_EQ(control_->read_ring(0, 1)->size(), 1u);
  host.stage->Poll(host.ctx);
  EXPECT_EQ(host.Run(Responses(kPeerQp, 2, 2u << 20), kHostPort), All(2048, 0));
  host.Release();
  PastWindow();
  // A QP neither worker has seen outgoing packets of: posted, and not kept by worker 1.
  uplink.Run({PeerRead(kLocalQp2, 9, 4096)}, kUplinkPort);
  host.stage->Poll(host.ctx);
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.rreq_local, 0u);
  EXPECT_EQ(c.rreq_remote, 1u);
  EXPECT_EQ(c.rreq_no_entry, 1u);
  EXPECT_EQ(c.rreq_ring_full, 0u);
  EXPECT_EQ(c.read_sized, 1u);
  EXPECT_EQ(host.stage->read_streams().size(), 1u);
  EXPECT_EQ(uplink.stage->read_streams().size(), 0u);
}

TEST_F(StormReadTest, AReadJoinedAfterItsStreamStartedSizesTheRest) {
  // The host answered before worker 1 drained its ring: the stream starts unknown.
  for (storm::Mode mode : {storm::Mode::kPerMessage, storm::Mode::kPerPacket}) {
    Make({.workers = 2, .mode = mode});
    TestWorker& uplink = w_[0];
    TestWorker& host = w_[1];
    host.Run({FromHost(pkt::op::kAcknowledge, kPeerQp, 1, 0)}, kHostPort);  // worker 1 has the QP
    host.Release();
    const std::vector<std::vector<uint8_t>> stream = Responses(kPeerQp, 2, 2u << 20);
    uplink.Run({PeerRead(kLocalQp, 2, 2u << 20)}, kUplinkPort);
    EXPECT_EQ(host.Run({stream[0]}, kHostPort), std::vector<int>{2});  // unknown: the floor
    host.stage->Poll(host.ctx);                                        // the late join
    const std::vector<std::vector<uint8_t>> rest(stream.begin() + 1, stream.begin() + 4);
    // Per-message: the stream keeps the level fixed at its first packet. Per-packet: sized now.
    EXPECT_EQ(host.Run(rest, kHostPort), All(3, mode == storm::Mode::kPerMessage ? 2 : 0));
    const StormWorkerCounters c = Counters();
    EXPECT_EQ(c.read_late, 1u);
    EXPECT_EQ(c.read_unknown, 1u);
  }
}

TEST_F(StormReadTest, AReadResponseNeverOvertakesItsQpsHeldPackets) {
  Make({});
  TestWorker& w = w_[0];
  // The QP's own 2 MiB WRITE (level 0) is still held in heddled...
  EXPECT_EQ(w.Run({FromHost(pkt::op::kWriteFirst, kPeerQp, 900, kMtu, 2u << 20)}, kHostPort),
            std::vector<int>{0});
  // ...so the response to a 64-byte READ (level 3 alone) waits at its level, and so does an ACK.
  w.Run({PeerRead(kLocalQp, 40, 64)}, kUplinkPort);
  EXPECT_EQ(w.Run(Responses(kPeerQp, 40, 64), kHostPort), std::vector<int>{0});
  EXPECT_EQ(w.Run({FromHost(pkt::op::kAcknowledge, kPeerQp, 41, 0)}, kHostPort),
            std::vector<int>{0});
  // Once they left: the next small READ takes its own level.
  w.Release();
  PastWindow();
  w.Run({PeerRead(kLocalQp, 41, 64)}, kUplinkPort);
  EXPECT_EQ(w.Run(Responses(kPeerQp, 41, 64), kHostPort), std::vector<int>{3});
}

TEST_F(StormReadTest, TheResponseWindowKeepsLaterStreamsAndAcksBehindABigStream) {
  Make({});
  TestWorker& w = w_[0];
  w.Run({PeerRead(kLocalQp, 100, 2u << 20), PeerRead(kLocalQp, 100 + 2048, 64)}, kUplinkPort);
  EXPECT_EQ(w.Run(Responses(kPeerQp, 100, 2u << 20), kHostPort), All(2048, 0));
  w.Release();  // nothing held in heddled; the stream's tail may still be in the fabric
  // Within the window: an ACK for a later WRITE of the peer, and the next READ's response, stay at
  // the big stream's level (an ACK past the READ is an implied NAK; a stream overtaking the one
  // before it, a sequence error at the requester).
  now_ms_ += 1;
  EXPECT_EQ(w.Run({FromHost(pkt::op::kAcknowledge, kPeerQp, 100 + 2048, 0)}, kHostPort),
            std::vector<int>{0});
  w.Release();
  now_ms_ += 1;
  EXPECT_EQ(w.Run(Responses(kPeerQp, 100 + 2048, 64), kHostPort), std::vector<int>{0});
  w.Release();
  // The window runs from the newest READ response: an ACK is still capped 2 ms later...
  now_ms_ += 2;
  EXPECT_EQ(w.Run({FromHost(pkt::op::kAcknowledge, kPeerQp, 100 + 2049, 0)}, kHostPort),
            std::vector<int>{0});
  w.Release();
  // ...and not after that.
  now_ms_ += 1;
  EXPECT_EQ(w.Run({FromHost(pkt::op::kAcknowledge, kPeerQp, 100 + 2050, 0)}, kHostPort),
            std::vector<int>{3});
  EXPECT_EQ(Counters().response_guarded, 3u);
  // No window: nothing capped (the same sequence).
  Make({.window_ms = 0});
  w_[0].Run({PeerRead(kLocalQp, 100, 2u << 20), PeerRead(kLocalQp, 100 + 2048, 64)}, kUplinkPort);
  w_[0].Run(Responses(kPeerQp, 100, 2u << 20), kHostPort);
  w_[0].Release();
  EXPECT_EQ(w_[0].Run({FromHost(pkt::op::kAcknowledge, kPeerQp, 100 + 2048, 0)}, kHostPort),
            std::vector<int>{3});
  w_[0].Release();
  EXPECT_EQ(w_[0].Run(Responses(kPeerQp, 100 + 2048, 64), kHostPort), std::vector<int>{3});
  // Per-packet mode (reordering-tolerant transports) is never capped either.
  Make({.mode = storm::Mode::kPerPacket});
  w_[0].Run({PeerRead(kLocalQp, 100, 2u << 20)}, kUplinkPort);
  w_[0].Run(Responses(kPeerQp, 100, 2u << 20), kHostPort);
  w_[0].Release();
  EXPECT_EQ(w_[0].Run({FromHost(pkt::op::kAcknowledge, kPeerQp, 100 + 2048, 0)}, kHostPort),
            std::vector<int>{3});
  EXPECT_EQ(Counters().response_guarded, 0u);
}

TEST_F(StormReadTest, ResponsesDoNotLiftTheFabricGuardOfTheQpsOwnRequests) {
  Make({});
  TestWorker& w = w_[0];
  // The QP's own 2 MiB WRITE at 1..3 (level 0) left heddled; the peer acknowledged only PSN 1.
  w.Run({FromHost(pkt::op::kWriteFirst, kPeerQp, 1, kMtu, 2u << 20),
         FromHost(pkt::op::kWriteMiddle, kPeerQp, 2, kMtu),
         FromHost(pkt::op::kWriteLast, kPeerQp, 3, kMtu)},
        kHostPort);
  w.Release();
  w.Run({PeerAck(kLocalQp, 1)}, kUplinkPort);
  // A small READ answered and an ACK sent meanwhile: other PSNs than the WRITE's, not capped by
  // its window...
  w.Run({PeerRead(kLocalQp, 70, 64)}, kUplinkPort);
  EXPECT_EQ(w.Run(Responses(kPeerQp, 70, 64), kHostPort), std::vector<int>{3});
  w.Release();
  PastWindow();
  EXPECT_EQ(w.Run({FromHost(pkt::op::kAcknowledge, kPeerQp, 71, 0)}, kHostPort),
            std::vector<int>{3});
  w.Release();
  // ...but the QP's next request still waits at the WRITE's level (§6.5): the responses did not
  // raise the level the fabric guard caps it at.
  EXPECT_EQ(w.Run({FromHost(pkt::op::kSendOnly, kPeerQp, 4, 64)}, kHostPort), std::vector<int>{0});
  w.Release();
  // Everything acknowledged: the next request takes its own level.
  w.Run({PeerAck(kLocalQp, 4)}, kUplinkPort);
  EXPECT_EQ(w.Run({FromHost(pkt::op::kSendOnly, kPeerQp, 5, 64)}, kHostPort), std::vector<int>{3});
}

TEST_F(StormReadTest, HostileReadsAndResponsesAreCountedAndSurvived) {
  Make({});
  TestWorker& w = w_[0];
  // A READ request whose descriptor lost its RETH; one for a QP the shim does not pair.
  std::vector<uint8_t> read = PeerRead(kLocalQp, 5, 4096);
  pkt::PacketDesc d{};
  ASSERT_EQ(pkt::Parse(read.data(), read.size(), &d), pkt::ParseError::kOk);
  d.flags &= static_cast<uint16_t>(~pkt::kFlagReth);
  w.RunDescs({read}, {d}, kUplinkPort);
  w.Run({PeerRead(0x99, 5, 4096)}, kUplinkPort);
  // A READ response First without AETH (a descriptor no frame parses to): counted, tagged at the
  // default level, no state; a truncated one is not RoCE to the stage.
  std::vector<uint8_t> first = FromHost(pkt::op::kReadResponseFirst, kPeerQp, 5, kMtu);
  ASSERT_EQ(pkt::Parse(first.data(), first.size(), &d), pkt::ParseError::kOk);
  d.flags &= static_cast<uint16_t>(~pkt::kFlagAeth);
  EXPECT_EQ(w.RunDescs({first}, {d}, kHostPort), std::vector<int>{2});
  pkt::PacketDesc cut{};
  EXPECT_NE(pkt::Parse(first.data(), 14 + 20 + 8 + 12 + 2, &cut), pkt::ParseError::kOk);
  w.RunDescs({first}, {cut}, kHostPort);
  StormWorkerCounters c = Counters();
  EXPECT_EQ(c.rreq_malformed, 1u);
  EXPECT_EQ(c.rreq_no_pair, 1u);
  EXPECT_EQ(c.read_malformed, 1u);
  EXPECT_EQ(c.read_sized + c.read_unknown + c.read_orphans, 0u);
  // Still joining and tracking afterwards.
  w.Release();
  PastWindow();
  w.Run({PeerRead(kLocalQp, 5, 64)}, kUplinkPort);
  EXPECT_EQ(w.Run(Responses(kPeerQp, 5, 64), kHostPort), std::vector<int>{3});
  c = Counters();
  EXPECT_EQ(c.read_sized, 1u);
}

TEST_F(StormReadTest, AFullSideTableFallsBackToTheDefaultLevel) {
  // One bucket of 8 entries: the ninth QP answering READs at once is refused. Per-packet mode: a
  // tracked stream of unknown size falls to level 1 beyond 64 KiB; a refused one keeps the
  // default level throughout.
  Make({.mode = storm::Mode::kPerPacket,
        .source = storm::BacklogSource::kEgressQueue,
        .publish_index = false,
        .read_streams = 8});
  TestWorker& w = w_[0];
  for (uint32_t qp = 100; qp < 108; ++qp) w.Run(Responses(qp, 1, 64), kHostPort);
  w.Release();
  EXPECT_EQ(w.Run(Responses(200, 1, 200 * 1024), kHostPort), All(200, 2));
  const StormWorkerCounters c = Counters();
  EXPECT_EQ(c.read_table_full, 200u);
  EXPECT_EQ(c.read_live, 8u);
  EXPECT_EQ(c.read_capacity, 8u);
}

}  // namespace
}  // namespace heddle::pipeline
