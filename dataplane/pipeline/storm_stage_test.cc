// The storm-tag stage driven burst by burst (no ports): the in-order guard, the egress and host
// backlog sources, hitless level changes through StormControl (RCU), auto cutoffs from the
// stage's own size histogram, `show qp` answered from the worker's table, the idle sweep.
#include "dataplane/pipeline/storm_stage.h"

#include <rte_mbuf.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "dataplane/pipeline/storm_control.h"
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
  Env() : EalPoolEnv("storm_stage_test", 2047) {}
};
::testing::Environment* const env = ::testing::AddGlobalTestEnvironment(new Env);

storm::LevelConfig Levels(storm::Mode mode) {
  storm::LevelConfig c;
  c.levels = 4;
  c.cutoffs = {4096, 65536, 1u << 20, 0, 0, 0, 0};
  c.mode = mode;
  c.control_level = 3;
  return c;  // dscp {0, 10, 18, 26}
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

class StormStageTest : public ::testing::Test {
 protected:
  void Make(storm::Mode mode, storm::BacklogSource source = storm::BacklogSource::kEgressQueue,
            int workers = 1) {
    Release();  // held counts point into the old stage's table
    stage_.reset();
    control_ = std::make_unique<StormControl>(Levels(mode), workers);
    std::bitset<kMaxPorts> hosts;
    hosts.set(0);
    stage_ = std::make_unique<StormTagStage>(
        StormTagStage::Options{.table = {.capacity = 1024, .idle_ms = 1000},
                               .mtu = 1024,
                               .host_ports = hosts,
                               .backlog_source = source,
                               .control = control_.get(),
                               .worker = 0,
                               .clock = [this] { return now_ms_; },
                               .housekeep_every = 1});
  }
  void TearDown() override { Release(); }

  // Runs `frames` through the stage as one burst from port `ingress`; returns each packet's level
  // and keeps the mbufs "held" (as if queued in the egress) until Release().
  std::vector<int> Run(const std::vector<std::vector<uint8_t>>& frames, uint16_t ingress = 0) {
    b_.n = 0;
    b_.ingress = ingress;
    b_.egress_backlog = egress_backlog_;
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
      pkt::PacketDesc d;
      rte_mbuf* m = b_.pkts[i];
      EXPECT_EQ(pkt::Parse(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, &d),
                pkt::ParseError::kOk);
      if (ingress == 0) {
        EXPECT_EQ(d.dscp, control_->levels().dscp[b_.level[i]]) << "packet " << i;
      }
      held_.push_back({m, b_.held[i]});
    }
    return levels;
  }
  // The held packets leave heddled (the egress scheduler's job in the worker).
  void Release() {
    for (auto& [m, held] : held_) {
      if (held != nullptr) {
        ASSERT_GT(*held, 0u);
        --*held;
      }
      rte_pktmbuf_free(m);
    }
    held_.clear();
  }

  uint32_t now_ms_ = 100;
  uint32_t egress_backlog_ = Burst::kUnknownBacklog;  // what the worker would tell the stage
  LcoreStats stats_;
  WorkerContext ctx_{&stats_};
  Burst b_;
  std::unique_ptr<StormControl> control_;
  std::unique_ptr<StormTagStage> stage_;
  std::vector<std::pair<rte_mbuf*, uint32_t*>> held_;
};

TEST_F(StormStageTest, HeldPacketsCapTheLevelOfTheirQpsLaterRequests) {
  Make(storm::Mode::kPerMessage);
  // A 2 MiB WRITE: level 0. Its first packet stays held (the uplink pushes back).
  EXPECT_EQ(Run({Frame(pkt::op::kWriteFirst, 7, 1, 2u << 20, 1024)}), std::vector<int>{0});
  // ...the rest of it, then a 64-byte SEND on the same QP, which alone would be level 3.
  std::vector<std::vector<uint8_t>> more;
  more.push_back(Frame(pkt::op::kWriteLast, 7, 2, 0, 1024));  // PSN jump: still this request
  more.push_back(Frame(pkt::op::kSendOnly, 7, 3, 0, 64));
  more.push_back(Frame(pkt::op::kReadRequest, 7, 4, 100, 0));  // control class
  more.push_back(Frame(pkt::op::kSendOnly, 8, 1, 0, 64));      // another QP: not capped
  EXPECT_EQ(Run(more), (std::vector<int>{0, 0, 0, 3}));
  const uint64_t hash7 = stage_->table().counters().inserted;
  EXPECT_EQ(hash7, 2u);
  Release();
  // Nothing of QP 7 is held any more: its next SEND gets its own level again.
  EXPECT_EQ(Run({Frame(pkt::op::kSendOnly, 7, 5, 0, 64)}), std::vector<int>{3});
}

TEST_F(StormStageTest, RunsOfOneQpShareALookupButNeverAnotherQpsEntry) {
  Make(storm::Mode::kPerMessage, storm::BacklogSource::kNone);
  // QP 7 to 10.0.0.2: a 3-packet WRITE back to back (one lookup for the run); then a CNP whose key
  // is QP 7 to 10.0.0.3, then a SEND on that key: the SEND must get its own entry, not the entry
  // of the packet before the CNP (same QPN, another destination).
  std::vector<std::vector<uint8_t>> burst;
  burst.push_back(Frame(pkt::op::kWriteFirst, 7, 1, 3 * 1024, 1024));
  burst.push_back(Frame(pkt::op::kWriteMiddle, 7, 2, 0, 1024));
  burst.push_back(Frame(pkt::op::kWriteLast, 7, 3, 0, 1024));
  burst.push_back(Frame(pkt::op::kCnp, 7, 0, 0, 0, 3));
  burst.push_back(Frame(pkt::op::kSendOnly, 7, 40, 0, 64, 3));
  burst.push_back(Frame(pkt::op::kSendOnly, 7, 41, 0, 64, 3));
  EXPECT_EQ(Run(burst), (std::vector<int>{3, 3, 3, 3, 3, 3}));
  EXPECT_EQ(stage_->table().size(), 2u);
  EXPECT_EQ(stage_->tracker().counters().requests_completed, 3u);
  EXPECT_EQ(stage_->tracker().counters().psn_jumps, 0u);
  storm::QpKey k2 = storm::KeyFromPacket(burst[0].data(), b_.desc[0], storm::Direction::kRequest);
  storm::QpKey k3 = storm::KeyFromPacket(burst[4].data(), b_.desc[4], storm::Direction::kRequest);
  const storm::QpEntry* e2 = stage_->table().Find(k2);
  const storm::QpEntry* e3 = stage_->table().Find(k3);
  ASSERT_NE(e2, nullptr);
  ASSERT_NE(e3, nullptr);
  EXPECT_EQ(e2->completed, 1u);
  EXPECT_EQ(e2->next_psn, 4u);
  EXPECT_EQ(e2->egress_queued, 3u);  // the CNP is not the QP's
  EXPECT_EQ(e3->completed, 2u);
  EXPECT_EQ(e3->next_psn, 42u);
  EXPECT_EQ(e3->egress_queued, 2u);
}

// A worker whose egress queues are empty says so (Burst::egress_backlog == 0), and the stage then
// skips the per-burst backlog marks. The same traffic, released after every burst as a drained
// egress does, must get the same levels and leave the same QP state as without that hint.
TEST_F(StormStageTest, IdleEgressHintGivesTheSameLevelsAndState) {
  for (storm::Mode mode : {storm::Mode::kPerMessage, storm::Mode::kPerPacket}) {
    std::vector<std::vector<int>> levels[2];
    std::vector<storm::QpEntry> entries[2];
    for (int pass = 0; pass < 2; ++pass) {
      Make(mode, storm::BacklogSource::kEgressQueue);
      egress_backlog_ = pass == 0 ? Burst::kUnknownBacklog : 0;
      std::mt19937 rng(11);
      struct Qp {
        uint32_t psn = 1, left = 0;
      };
      Qp qps[6];
      std::vector<std::vector<uint8_t>> first_frames(6);
      for (int burst = 0; burst < 60; ++burst) {
        std::vector<std::vector<uint8_t>> frames;
        const int n = 1 + static_cast<int>(rng() % 24);
        for (int k = 0; k < n; ++k) {
          const uint32_t q = rng() % 6;
          Qp& s = qps[q];
          std::vector<uint8_t> f;
          if (s.left == 0 && rng() % 3 == 0) {
            f = Frame(pkt::op::kSendOnly, 20 + q, s.psn, 0, 64);
          } else if (s.left == 0) {
            s.left = 1 + rng() % 200;
            f = Frame(s.left == 1 ? pkt::op::kWriteOnly : pkt::op::kWriteFirst, 20 + q, s.psn,
                      s.left * 1024, 1024);
          } else {
            f = Frame(s.left == 1 ? pkt::op::kWriteLast : pkt::op::kWriteMiddle, 20 + q, s.psn, 0,
                      1024);
          }
          if (s.left > 0) --s.left;
          ++s.psn;
          if (first_frames[q].empty()) first_frames[q] = f;
          frames.push_back(std::move(f));
        }
        levels[pass].push_back(Run(frames));
        Release();
      }
      for (const auto& f : first_frames) {
        pkt::PacketDesc d;
        ASSERT_EQ(pkt::Parse(f.data(), f.size(), &d), pkt::ParseError::kOk);
        const storm::QpEntry* e =
            stage_->table().Find(storm::KeyFromPacket(f.data(), d, storm::Direction::kRequest));
        ASSERT_NE(e, nullptr);
        entries[pass].push_back(*e);
      }
    }
    EXPECT_EQ(levels[0], levels[1]);
    for (size_t q = 0; q < entries[0].size(); ++q) {
      const storm::QpEntry &a = entries[0][q], &c = entries[1][q];
      EXPECT_EQ(a.level, c.level) << q;
      EXPECT_EQ(a.held_level, c.held_level) << q;
      EXPECT_EQ(a.flags, c.flags) << q;
      EXPECT_EQ(a.size, c.size) << q;
      EXPECT_EQ(a.sent, c.sent) << q;
      EXPECT_EQ(a.next_psn, c.next_psn) << q;
      EXPECT_EQ(a.completed, c.completed) << q;
      EXPECT_EQ(c.egress_queued, 0u) << q;
    }
  }
}

TEST_F(StormStageTest, PerPacketModeIsNotCapped) {
  Make(storm::Mode::kPerPacket, storm::BacklogSource::kNone);
  Run({Frame(pkt::op::kWriteFirst, 7, 1, 2u << 20, 1024)});
  EXPECT_EQ(Run({Frame(pkt::op::kSendOnly, 7, 5, 0, 64)}), std::vector<int>{3});
}

TEST_F(StormStageTest, EgressBacklogRaisesAQueuedQpInPerPacketMode) {
  // A 128 KiB WRITE: its 42nd packet has R = 87 KiB, level 1 with no backlog. With B = 41
  // packets * 1 KiB queued from earlier bursts, R_eff = R / (1 + B / R) = 59 KiB: level 2.
  Make(storm::Mode::kPerPacket, storm::BacklogSource::kEgressQueue);
  std::vector<std::vector<uint8_t>> first;
  first.push_back(Frame(pkt::op::kWriteFirst, 9, 1, 2 * 65536, 1024));
  for (uint32_t i = 0; i < 40; ++i)
    first.push_back(Frame(pkt::op::kWriteMiddle, 9, 2 + i, 0, 1024));
  std::vector<int> l = Run(first);
  // In one burst with nothing queued before it, B = 0 for all of them.
  EXPECT_TRUE(std::all_of(l.begin(), l.end(), [](int v) { return v == 1; }));
  // Next burst: 41 packets of QP 9 still held.
  EXPECT_EQ(Run({Frame(pkt::op::kWriteMiddle, 9, 42, 0, 1024)}), std::vector<int>{2});
  Release();
  EXPECT_EQ(Run({Frame(pkt::op::kWriteMiddle, 9, 43, 0, 1024)}), std::vector<int>{1});
}

TEST_F(StormStageTest, HostBacklogFromTheShimRaisesTheRequestBlockingIt) {
  Make(storm::Mode::kPerMessage, storm::BacklogSource::kHostShim);
  // The application has 4 MiB + 256 KiB outstanding on the QP whose peer is 10.0.0.2, QPN 7:
  // the 256 KiB WRITE on the wire and 4 MiB behind it.
  verbs::HostBacklogIndex::Entry e{};
  e.peer_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  e.dest_qpn = 7;
  e.backlog_bytes = (4u << 20) + (256u << 10);
  e.backlog_wqes = 2;
  std::shared_ptr<const verbs::HostBacklogIndex> index = verbs::HostBacklogIndex::Build({&e, 1});
  std::atomic<bool> done{false};
  std::thread t([&] {
    control_->PublishHostBacklog(index);
    done = true;
  });
  while (!done) stage_->Poll(ctx_);
  t.join();
  ASSERT_EQ(control_->host_backlog(), index.get());
  // Alone a 256 KiB WRITE is level 1; with B = 4 MiB behind it, R_eff = 256 KiB / 17 = 15 KiB:
  // level 2. The same WRITE to another QPN, or to another peer, has no host backlog.
  EXPECT_EQ(Run({Frame(pkt::op::kWriteOnly, 7, 1, 256u << 10, 64)}), std::vector<int>{2});
  EXPECT_EQ(Run({Frame(pkt::op::kWriteOnly, 8, 1, 256u << 10, 64)}), std::vector<int>{1});
  EXPECT_EQ(Run({Frame(pkt::op::kWriteOnly, 7, 1, 256u << 10, 64, /*dst=*/3)}),
            std::vector<int>{1});
  stage_->Poll(ctx_);
  EXPECT_EQ(control_->counters().host_backlog_hits, 1u);
  // Without an index (none published yet, or source not host) B is 0.
  Make(storm::Mode::kPerMessage, storm::BacklogSource::kHostShim);
  EXPECT_EQ(Run({Frame(pkt::op::kWriteOnly, 7, 1, 256u << 10, 64)}), std::vector<int>{1});
}

TEST_F(StormStageTest, ResponseDirectionControlClassesTakeTheControlLevelUnrewritten) {
  Make(storm::Mode::kPerMessage);
  pkt::RoceSpec ack;
  ack.opcode = pkt::op::kAcknowledge;
  ack.dest_qp = 5;
  std::vector<uint8_t> a = pkt::BuildRoce(pkt::FrameSpec{}, ack);
  std::vector<uint8_t> w = Frame(pkt::op::kWriteOnly, 5, 1, 64, 64);
  EXPECT_EQ(Run({a, w}, /*ingress=*/1), (std::vector<int>{3, 0}));
  // Not rewritten: the bytes are what came in.
  for (int i = 0; i < 2; ++i) {
    rte_mbuf* m = held_[i].first;
    const std::vector<uint8_t>& in = i == 0 ? a : w;
    ASSERT_EQ(m->data_len, in.size());
    EXPECT_EQ(memcmp(rte_pktmbuf_mtod(m, const uint8_t*), in.data(), in.size()), 0);
  }
  // The in-order guard holds towards the host too: with the WRITE still held, a READ request
  // of the same QP does not overtake it.
  EXPECT_EQ(Run({Frame(pkt::op::kReadRequest, 5, 2, 4096, 0)}, /*ingress=*/1), std::vector<int>{0});
  Release();
  EXPECT_EQ(Run({Frame(pkt::op::kReadRequest, 5, 3, 4096, 0)}, /*ingress=*/1), std::vector<int>{3});
}

TEST_F(StormStageTest, NewLevelsApplyFromTheNextBurstWithoutLosingQpState) {
  Make(storm::Mode::kPerMessage);
  EXPECT_EQ(Run({Frame(pkt::op::kSendOnly, 3, 1, 0, 64)}), std::vector<int>{3});
  Release();
  storm::LevelConfig next = control_->current_levels();
  next.dscp = {1, 2, 3, 40, 0, 0, 0, 0};
  next.cutoffs = {32, 65536, 1u << 20, 0, 0, 0, 0};  // a 64-byte SEND is now level 2
  const uint64_t gen = control_->generation();
  // The grace period needs this worker to pass a quiescent state: poll from another thread.
  std::atomic<bool> done{false};
  std::thread t([&] {
    ASSERT_TRUE(control_->SetLevels(next).ok());
    done = true;
  });
  while (!done) stage_->Poll(ctx_);
  t.join();
  EXPECT_EQ(control_->generation(), gen + 1);
  EXPECT_EQ(control_->slow_grace_periods(), 0u);
  EXPECT_EQ(Run({Frame(pkt::op::kSendOnly, 3, 2, 0, 64)}), std::vector<int>{2});
  rte_mbuf* m = held_.back().first;
  pkt::PacketDesc d;
  ASSERT_EQ(pkt::Parse(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, &d), pkt::ParseError::kOk);
  EXPECT_EQ(d.dscp, 3);
  // The QP entry survived the change: same entry, next PSN in sequence, 2 requests done.
  EXPECT_EQ(stage_->table().size(), 1u);
  EXPECT_EQ(stage_->tracker().counters().requests_completed, 2u);
  EXPECT_EQ(stage_->tracker().counters().psn_jumps, 0u);
}

TEST_F(StormStageTest, InvalidLevelsAreRefusedAndNothingChanges) {
  Make(storm::Mode::kPerMessage);
  storm::LevelConfig bad = control_->current_levels();
  bad.cutoffs = {65536, 4096, 1u << 20, 0, 0, 0, 0};
  const uint64_t gen = control_->generation();
  absl::Status s = control_->SetLevels(bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("storm.cutoffs"), std::string::npos) << s;
  EXPECT_EQ(control_->generation(), gen);
  EXPECT_EQ(control_->current_levels(), Levels(storm::Mode::kPerMessage));
}

TEST_F(StormStageTest, AutoCutoffsFollowTheObservedSizes) {
  Make(storm::Mode::kPerMessage);
  control_->set_auto_cutoffs(true);
  control_->Offline(0);  // this test does not poll: grace periods need not wait for it
  // Equal bytes at 1 KiB, 16 KiB, 256 KiB and 4 MiB requests: with K = 4 each level should get
  // one size, so the cutoffs fall between them.
  const uint32_t sizes[] = {1024, 16384, 262144, 4u << 20};
  uint32_t psn = 1;
  for (uint32_t s : sizes) {
    const uint32_t count = (4u << 20) / s;
    for (uint32_t i = 0; i < std::min<uint32_t>(count, 64); ++i) {
      // WRITE first packets announce the size; the histogram weights it by the RETH length.
      Run({Frame(pkt::op::kWriteOnly, 100 + i, psn++, s, 16)});
      Release();
    }
  }
  EXPECT_TRUE(control_->AutoStep(0.5));
  const storm::LevelConfig l = control_->current_levels();
  // 64 requests of each size except 4 MiB (1): bytes 64 KiB, 1 MiB, 16 MiB, 4 MiB.
  // Equal thirds of 21.06 MiB fall inside the 256 KiB and 4 MiB buckets.
  EXPECT_LT(l.cutoffs[0], l.cutoffs[1]);
  EXPECT_LT(l.cutoffs[1], l.cutoffs[2]);
  EXPECT_GE(l.cutoffs[0], 16384u);
  EXPECT_LE(l.cutoffs[2], 8u << 20);
  EXPECT_EQ(control_->auto_publications(), 1u);
  // Same distribution again: the cutoffs do not move enough to be republished.
  EXPECT_FALSE(control_->AutoStep(0.5));
  EXPECT_EQ(control_->auto_publications(), 1u);
}

TEST_F(StormStageTest, AutoOffKeepsStaticCutoffs) {
  Make(storm::Mode::kPerMessage);
  for (uint32_t i = 0; i < 32; ++i) {
    Run({Frame(pkt::op::kWriteOnly, 100 + i, i + 1, 300000, 16)});
    Release();
  }
  EXPECT_FALSE(control_->AutoStep(0.5));
  EXPECT_EQ(control_->current_levels().cutoffs, Levels(storm::Mode::kPerMessage).cutoffs);
  EXPECT_GT(control_->aged_histogram().Total(), 0u);
}

TEST_F(StormStageTest, ShowQpIsAnsweredByTheOwningWorker) {
  Make(storm::Mode::kPerMessage);
  // QP 1: a 1 MiB WRITE half sent (R = 512 KiB); QP 2: 10 packets held; QP 3: a small SEND.
  std::vector<std::vector<uint8_t>> in;
  in.push_back(Frame(pkt::op::kWriteFirst, 1, 1, 1u << 20, 1024));
  Run(in);
  Release();
  for (uint32_t i = 0; i < 10; ++i) Run({Frame(pkt::op::kSendMiddle, 2, 10 + i, 0, 256, 3)});
  Run({Frame(pkt::op::kSendOnly, 3, 1, 0, 64)});
  std::atomic<bool> done{false};
  absl::StatusOr<std::vector<QpRow>> rows;
  std::thread t([&] {
    rows = control_->TopQps(2, QpSort::kBacklog, absl::Seconds(5));
    done = true;
  });
  while (!done) stage_->Poll(ctx_);
  t.join();
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].qpn, 2u);
  EXPECT_EQ((*rows)[0].egress_held, 10u);
  EXPECT_EQ((*rows)[0].backlog, 10u * 1024);
  EXPECT_EQ((*rows)[0].dst_ip4, 0x0300000au);  // 10.0.0.3 in network order
  EXPECT_EQ((*rows)[1].qpn, 3u);               // 1 held packet
  // By remaining bytes: the half-sent WRITE first.
  done = false;
  std::thread t2([&] {
    rows = control_->TopQps(1, QpSort::kRemaining, absl::Seconds(5));
    done = true;
  });
  while (!done) stage_->Poll(ctx_);
  t2.join();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].qpn, 1u);
  EXPECT_EQ((*rows)[0].remaining, (1u << 20) - 1024);
  EXPECT_EQ((*rows)[0].size, 1u << 20);
}

TEST_F(StormStageTest, ShowQpTimesOutWhenTheWorkerDoesNotPoll) {
  Make(storm::Mode::kPerMessage);
  absl::StatusOr<std::vector<QpRow>> rows =
      control_->TopQps(5, QpSort::kBacklog, absl::Milliseconds(20));
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(control_->TopQps(0, QpSort::kBacklog, absl::Milliseconds(20)).ok());
}

TEST_F(StormStageTest, IdleQpsAreSweptByTheWorkerButNotWhileHeld) {
  Make(storm::Mode::kPerMessage);
  Run({Frame(pkt::op::kSendOnly, 1, 1, 0, 64)});
  Run({Frame(pkt::op::kSendOnly, 2, 1, 0, 64)});
  // Release QP 1's packet only.
  held_[0].second && --*held_[0].second;
  rte_pktmbuf_free(held_[0].first);
  held_.erase(held_.begin());
  now_ms_ += 5000;  // past idle_ms
  for (int i = 0; i < 1024 / 64 + 1; ++i) stage_->Poll(ctx_);
  EXPECT_EQ(stage_->table().size(), 1u);  // QP 2 still has a packet held
  EXPECT_EQ(stage_->table().counters().evicted_idle, 1u);
  Release();
  for (int i = 0; i < 1024 / 64 + 1; ++i) stage_->Poll(ctx_);
  EXPECT_EQ(stage_->table().size(), 0u);
  EXPECT_EQ(control_->counters().qp_evicted_idle, 2u);
  EXPECT_EQ(control_->counters().requests_completed, 2u);
}

TEST_F(StormStageTest, GraceWaitsForEveryOnlineWorker) {
  Make(storm::Mode::kPerMessage, storm::BacklogSource::kEgressQueue, /*workers=*/2);
  control_->set_grace_timeout(absl::Milliseconds(30));
  // Worker 1 never polls: the old parameters cannot be freed within the timeout.
  storm::LevelConfig next = control_->current_levels();
  next.beta = 2;
  std::atomic<bool> done{false};
  std::thread t([&] {
    EXPECT_TRUE(control_->SetLevels(next).ok());
    done = true;
  });
  while (!done) control_->Quiescent(0);
  t.join();
  EXPECT_EQ(control_->slow_grace_periods(), 1u);
  EXPECT_EQ(control_->levels().beta, 2);  // published regardless
  // Offline workers are not waited for.
  control_->Offline(1);
  next.beta = 3;
  done = false;
  std::thread t2([&] {
    EXPECT_TRUE(control_->SetLevels(next).ok());
    done = true;
  });
  while (!done) control_->Quiescent(0);
  t2.join();
  EXPECT_EQ(control_->slow_grace_periods(), 1u);
}

}  // namespace
}  // namespace heddle::pipeline
