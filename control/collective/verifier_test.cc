#include "control/collective/verifier.h"

#include <string>
#include <vector>

#include "control/collective/internal/test_schedules.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::collective {
namespace {

using ::heddle::collective::testing::DirectAllReduce;
using ::heddle::collective::testing::FindOp;
using ::heddle::collective::testing::RemoveOp;
using ::heddle::collective::testing::RingAllGather;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

BufRef Data(uint64_t slot) { return BufRef{BufRef::Buffer::kData, slot}; }
BufRef Scratch(uint64_t slot) { return BufRef{BufRef::Buffer::kScratch, slot}; }

Op MakeOp(OpKind kind, uint32_t peer, uint64_t chunk, BufRef src, BufRef dst,
          std::vector<uint32_t> deps = {}, uint32_t piece = 0) {
  Op o;
  o.kind = kind;
  o.peer = peer;
  o.chunk = chunk;
  o.src = src;
  o.dst = dst;
  o.piece = piece;
  o.deps = std::move(deps);
  return o;
}

std::vector<uint32_t> AllBefore(uint32_t n) {
  std::vector<uint32_t> d(n);
  for (uint32_t i = 0; i < n; ++i) d[i] = i;
  return d;
}

// The first problem, checking that it is also the returned error.
std::string FirstProblem(const Schedule& s) {
  VerifyReport report;
  absl::Status st = VerifySchedule(s, &report);
  EXPECT_FALSE(st.ok());
  if (report.problems.empty()) return "";
  EXPECT_THAT(std::string(st.message()), HasSubstr(report.problems.front()));
  return report.problems.front();
}

TEST(Verifier, RingAllGatherVerifiesForManyShapes) {
  for (uint32_t n : {1u, 2u, 3u, 5u, 8u}) {
    for (uint32_t p : {1u, 3u}) {
      for (uint32_t k : {1u, 2u}) {
        VerifyReport report;
        Schedule s = RingAllGather(n, p, k);
        EXPECT_TRUE(VerifySchedule(s, &report).ok())
            << "n=" << n << " p=" << p << " k=" << k << ": " << VerifySchedule(s).message();
        EXPECT_EQ(report.transfers, uint64_t{n} * (n - 1) * p * k);
        EXPECT_EQ(report.ops, 2 * report.transfers);
        EXPECT_THAT(report.problems, SizeIs(0));
      }
    }
  }
}

TEST(Verifier, DirectAllReduceVerifiesWithAndWithoutScratch) {
  for (uint32_t n : {1u, 2u, 4u, 7u}) {
    for (bool scratch : {false, true}) {
      VerifyReport report;
      Schedule s = DirectAllReduce(n, 2, scratch, 2);
      EXPECT_TRUE(VerifySchedule(s, &report).ok())
          << "n=" << n << " scratch=" << scratch << ": " << VerifySchedule(s).message();
      EXPECT_EQ(report.max_scratch, scratch ? uint64_t{n - 1} * 2 : 0);
    }
  }
}

TEST(Verifier, DroppedSendReceivePairBreaksThePromise) {
  Schedule s = RingAllGather(4, 1);
  // The last step: rank 1 forwards rank 2's chunk (1 - 2 mod 4 = 3... step 2 sends owner r-2).
  const uint32_t send = FindOp(s, 1, OpKind::kSend, 2, /*chunk=*/3);
  const uint32_t recv = FindOp(s, 2, OpKind::kRecv, 1, /*chunk=*/3);
  ASSERT_NE(send, UINT32_MAX);
  ASSERT_NE(recv, UINT32_MAX);
  RemoveOp(&s, 1, send);
  RemoveOp(&s, 2, recv);
  EXPECT_EQ(FirstProblem(s),
            "rank 2 data[3] piece 0 ends with nothing; the allgather promises {3}");
}

TEST(Verifier, DroppedForwardingPairLeavesALaterSendReadingNothing) {
  Schedule s = RingAllGather(4, 1);
  // Step 0 of rank 0 (its own chunk to rank 1), which rank 1 forwards at step 1.
  RemoveOp(&s, 0, FindOp(s, 0, OpKind::kSend, 1, 0));
  RemoveOp(&s, 1, FindOp(s, 1, OpKind::kRecv, 0, 0));
  EXPECT_THAT(FirstProblem(s), HasSubstr("(send to 2 ch 0 piece 0 chunk 0 <- data[0]) reads "
                                         "data[0] piece 0, which holds nothing"));
}

TEST(Verifier, DroppedSendAloneIsAMatchingError) {
  Schedule s = RingAllGather(3, 2);
  RemoveOp(&s, 0, FindOp(s, 0, OpKind::kSend, 1));
  EXPECT_THAT(FirstProblem(s),
              HasSubstr("rank 0 sends 3 pieces to rank 1 on channel 0 but rank 1 receives 4; the "
                        "first unmatched is rank 1 (r1) op 7"));
}

TEST(Verifier, DoubleReduceIsNamed) {
  Schedule s = DirectAllReduce(3, 1, /*via_scratch=*/true);
  // Rank 0 reduces scratch[0] (rank 1's contribution) into data[0] once more at the end.
  std::vector<Op>& ops = s.per_rank[0].ops;
  const uint32_t n = static_cast<uint32_t>(ops.size());
  Op again = MakeOp(OpKind::kReduce, 0, 0, Scratch(0), Data(0), AllBefore(n));
  ops.push_back(again);
  EXPECT_THAT(FirstProblem(s),
              HasSubstr("(reduce scratch[0] -> data[0] piece 0) reduces rank 1's contribution to "
                        "chunk 0 twice (data[0] already holds {0-2}, adds {1})"));
}

TEST(Verifier, RecvReduceOfAnAlreadyReducedContribution) {
  // Two ranks all-reduce: each sends its data to the other twice; the second recv-reduce adds
  // the peer's contribution again.
  Schedule s;
  s.collective = Collective{Kind::kAllReduce, 2, 1};
  s.per_rank.resize(2);
  for (uint32_t r = 0; r < 2; ++r) {
    const uint32_t q = 1 - r;
    s.per_rank[r].ops = {
        MakeOp(OpKind::kSend, q, q, Data(q), {}),
        MakeOp(OpKind::kSend, q, q, Data(q), {}),
        MakeOp(OpKind::kRecvReduce, q, r, {}, Data(r), {}),
        MakeOp(OpKind::kRecvReduce, q, r, {}, Data(r), {2}),
    };
  }
  EXPECT_THAT(FirstProblem(s),
              HasSubstr("rank 1 op 3 (recv-reduce from 0 ch 0 piece 0 chunk 1 -> data[1]) reduces "
                        "rank 0's contribution to chunk 1 twice (data[1] already holds {0-1}, adds "
                        "{0})"));
}

TEST(Verifier, ForwardDepIsACycle) {
  Schedule s = RingAllGather(3, 1);
  s.per_rank[1].ops[0].deps = {2};
  EXPECT_EQ(FirstProblem(s),
            "rank 1 (r1) op 0 (send to 2 ch 0 piece 0 chunk 1 <- data[1]): dep 2 is not an earlier "
            "op of rank 1 (a dependency cycle or a forward reference)");
}

TEST(Verifier, CrossRankDeadlockNamesTheCycle) {
  // Two ranks each receive before they send.
  Schedule s;
  s.collective = Collective{Kind::kAllGather, 2, 1};
  s.per_rank.resize(2);
  for (uint32_t r = 0; r < 2; ++r) {
    const uint32_t q = 1 - r;
    s.per_rank[r].ops = {MakeOp(OpKind::kRecv, q, q, {}, Data(q)),
                         MakeOp(OpKind::kSend, q, r, Data(r), {}, {0})};
  }
  EXPECT_EQ(FirstProblem(s),
            "deadlock: 4 ops never run; cycle: rank 0 op 0 (recv from 1 ch 0 piece 0 chunk 1 -> "
            "data[1]) waits for rank 1 op 1 (send to 0 ch 0 piece 0 chunk 1 <- data[1]) waits for "
            "rank 1 op 0 (recv from 0 ch 0 piece 0 chunk 0 -> data[0]) waits for rank 0 op 1 (send "
            "to 1 ch 0 piece 0 chunk 0 <- data[0]) waits for rank 0 op 0 (recv from 1 ch 0 piece 0 "
            "chunk 1 -> data[1])");
}

TEST(Verifier, DeadlockAroundARingNamesEveryRank) {
  // Five ranks in a ring, each receiving its predecessor's chunk before sending its own.
  Schedule s;
  s.collective = Collective{Kind::kAllGather, 5, 1};
  s.per_rank.resize(5);
  for (uint32_t r = 0; r < 5; ++r) {
    const uint32_t prev = (r + 4) % 5;
    s.per_rank[r].ops = {MakeOp(OpKind::kRecv, prev, prev, {}, Data(prev)),
                         MakeOp(OpKind::kSend, (r + 1) % 5, r, Data(r), {}, {0})};
  }
  const std::string p = FirstProblem(s);
  EXPECT_THAT(p, HasSubstr("deadlock: 10 ops never run; cycle: rank 0 op 0 (recv from 4"));
  size_t waits = 0;
  for (size_t at = p.find("waits for"); at != std::string::npos; at = p.find("waits for", at + 1)) {
    ++waits;
  }
  EXPECT_EQ(waits, 10u);
}

TEST(Verifier, ReceiveOverwritingASlotAConcurrentSendReadsIsARace) {
  Schedule s = DirectAllReduce(3, 1);
  // Rank 0's phase-2 receive of rank 1's reduced chunk no longer waits for the phase-1 send of
  // that chunk to rank 1.
  const uint32_t send = FindOp(s, 0, OpKind::kSend, 1, 1);
  const uint32_t recv = FindOp(s, 0, OpKind::kRecv, 1, 1);
  ASSERT_EQ(s.per_rank[0].ops[recv].deps, std::vector<uint32_t>{send});
  s.per_rank[0].ops[recv].deps.clear();
  EXPECT_EQ(FirstProblem(s),
            "race on rank 0 data[1] piece 0: rank 0 (r0) op 0 (send to 1 ch 0 piece 0 chunk 1 <- "
            "data[1]) reads it and rank 0 (r0) op 6 (recv from 1 ch 0 piece 0 chunk 1 -> data[1]) "
            "writes it, and neither is ordered before the other by deps");
}

TEST(Verifier, TransitiveOrderIsNotARace) {
  // One rank, copies through a chain: op 2 writes data[0]'s copy target after op 0 wrote it,
  // ordered only through op 1.
  Schedule s;
  s.collective = Collective{Kind::kAllReduce, 1, 1};
  s.per_rank.resize(1);
  s.per_rank[0].scratch_slots = 2;
  s.per_rank[0].ops = {MakeOp(OpKind::kCopy, 0, 0, Data(0), Scratch(0)),
                       MakeOp(OpKind::kCopy, 0, 0, Data(0), Scratch(1), {0}),
                       MakeOp(OpKind::kCopy, 0, 0, Data(0), Scratch(0), {1})};
  EXPECT_TRUE(VerifySchedule(s).ok()) << VerifySchedule(s).message();
  s.per_rank[0].ops[1].deps.clear();
  EXPECT_THAT(FirstProblem(s), HasSubstr("race on rank 0 scratch[0] piece 0: rank 0 op 0"));
}

TEST(Verifier, TwoReadersNeedNoOrder) {
  Schedule s = RingAllGather(2, 1);
  // Rank 0 sends its own chunk twice, unordered, on another channel as well.
  Op extra = s.per_rank[0].ops[0];
  extra.channel = 1;
  s.per_rank[0].ops.push_back(extra);
  Op recv = s.per_rank[1].ops[1];
  recv.channel = 1;
  recv.deps = {1};
  s.per_rank[1].ops.push_back(recv);
  EXPECT_TRUE(VerifySchedule(s).ok()) << VerifySchedule(s).message();
}

TEST(Verifier, BufferOverruns) {
  Schedule s = RingAllGather(3, 1);
  s.per_rank[0].ops[0].src.slot = 3;
  EXPECT_THAT(FirstProblem(s),
              HasSubstr("source data slot 3 is out of range (the allgather has 3 data slots)"));
  s = DirectAllReduce(3, 1, /*via_scratch=*/true);
  const uint32_t recv = FindOp(s, 2, OpKind::kRecv, 1);
  s.per_rank[2].ops[recv].dst.slot = 2;
  EXPECT_THAT(FirstProblem(s), HasSubstr("destination scratch slot 2 is out of range (rank 2 has "
                                         "2 scratch slots)"));
  s = RingAllGather(3, 2);
  s.per_rank[1].ops[0].piece = 2;
  EXPECT_THAT(FirstProblem(s), HasSubstr("piece 2 is out of range (slots have 2 pieces)"));
  s = RingAllGather(3, 1);
  s.per_rank[1].ops[0].chunk = 7;
  EXPECT_THAT(FirstProblem(s), HasSubstr("chunk 7 is out of range"));
}

TEST(Verifier, MatchedSendAndReceiveMustAgree) {
  Schedule s = RingAllGather(3, 2);
  s.per_rank[1].ops[1].piece = 0;  // rank 0's... rank 1's second send (piece 1) now says piece 0
  EXPECT_THAT(FirstProblem(s), HasSubstr("but they disagree on the piece"));
  s = RingAllGather(3, 1);
  const uint32_t recv = FindOp(s, 2, OpKind::kRecv, 1);
  s.per_rank[2].ops[recv].chunk = 0;
  EXPECT_THAT(FirstProblem(s), HasSubstr("but they disagree on the chunk"));
}

TEST(Verifier, ChunkLabelMustMatchTheData) {
  Schedule s = RingAllGather(3, 1);
  // Rank 0 labels its first send (its own chunk 0) chunk 2, and rank 1's receive agrees.
  s.per_rank[0].ops[0].chunk = 2;
  s.per_rank[1].ops[FindOp(s, 1, OpKind::kRecv, 0)].chunk = 2;
  EXPECT_THAT(FirstProblem(s),
              HasSubstr("op 0 (send to 1 ch 0 piece 0 chunk 2 <- data[0]) is labelled chunk 2 but "
                        "carries chunk 0's data"));
}

TEST(Verifier, DataSlotMustHoldItsOwnChunk) {
  Schedule s;
  s.collective = Collective{Kind::kAllGather, 2, 1};
  s.per_rank.resize(2);
  // Rank 0 copies its chunk into data[1] instead of receiving rank 1's.
  s.per_rank[0].ops = {MakeOp(OpKind::kSend, 1, 0, Data(0), {}),
                       MakeOp(OpKind::kCopy, 0, 0, Data(0), Data(1))};
  s.per_rank[1].ops = {MakeOp(OpKind::kRecv, 0, 0, {}, Data(0))};
  EXPECT_THAT(FirstProblem(s), HasSubstr("writes chunk 0's data into data slot 1"));
}

TEST(Verifier, BrokenPromiseNamesWhatIsHeldAndWhatIsPromised) {
  Schedule s = DirectAllReduce(3, 1);
  // Rank 1's last receive-reduce overwrites instead: its chunk ends with rank 2's part only.
  s.per_rank[1].ops[FindOp(s, 1, OpKind::kRecvReduce, 2)].kind = OpKind::kRecv;
  VerifyReport report;
  const absl::Status st = VerifySchedule(s, &report);
  EXPECT_EQ(st.message(),
            "schedule does not verify: rank 0 data[1] piece 0 ends with {2}; the allreduce "
            "promises {0-2} (and 2 more problems)");
  EXPECT_THAT(report.problems,
              ElementsAre("rank 0 data[1] piece 0 ends with {2}; the allreduce promises {0-2}",
                          "rank 1 data[1] piece 0 ends with {2}; the allreduce promises {0-2}",
                          "rank 2 data[1] piece 0 ends with {2}; the allreduce promises {0-2}"));
}

TEST(Verifier, StructuralErrors) {
  Schedule s = RingAllGather(3, 1);
  s.version = 2;
  EXPECT_THAT(FirstProblem(s), HasSubstr("schedule format version 2"));
  s = RingAllGather(3, 1);
  s.per_rank.pop_back();
  EXPECT_EQ(FirstProblem(s), "2 op lists for a collective of 3 ranks");
  s = RingAllGather(3, 1);
  s.pieces = 0;
  EXPECT_THAT(FirstProblem(s), HasSubstr("0 pieces per slot"));
  s = RingAllGather(3, 1);
  s.collective.ranks = 0;
  EXPECT_THAT(FirstProblem(s), HasSubstr("0 ranks"));
  s = RingAllGather(3, 1);
  s.per_rank[0].ops[0].peer = 0;
  EXPECT_THAT(FirstProblem(s), HasSubstr("cannot send to or receive from itself"));
  s = RingAllGather(3, 1);
  s.per_rank[0].ops[0].peer = 9;
  EXPECT_THAT(FirstProblem(s), HasSubstr("peer 9 is not one of the 3 ranks"));
  s = RingAllGather(4, 2);
  s.per_rank[0].ops.back().deps = {3, 1};
  EXPECT_THAT(FirstProblem(s), HasSubstr("deps are not strictly increasing (1 after 3)"));
  s = RingAllGather(3, 1);
  s.per_rank[0].ops[0].kind = static_cast<OpKind>(9);
  EXPECT_THAT(FirstProblem(s), HasSubstr("unknown op kind"));
  s = RingAllGather(3, 1);
  s.per_rank[0].scratch_slots = 1;
  s.per_rank[0].ops.push_back(MakeOp(OpKind::kReduce, 0, 0, Scratch(0), Scratch(0)));
  EXPECT_THAT(FirstProblem(s), HasSubstr("reduces a slot into itself"));
}

TEST(Verifier, ReadingAnEmptySlot) {
  Schedule s = RingAllGather(2, 1);
  s.per_rank[0].scratch_slots = 1;
  s.per_rank[0].ops.push_back(MakeOp(OpKind::kCopy, 0, 0, Scratch(0), Scratch(0)));
  EXPECT_THAT(FirstProblem(s), HasSubstr("reads scratch[0] piece 0, which holds nothing"));
  s = DirectAllReduce(2, 1, /*via_scratch=*/true);
  // Reduce into a scratch slot nothing was received into.
  s.per_rank[0].scratch_slots = 2;
  s.per_rank[0].ops.push_back(MakeOp(OpKind::kReduce, 0, 0, Data(0), Scratch(1),
                                     AllBefore(static_cast<uint32_t>(s.per_rank[0].ops.size()))));
  EXPECT_THAT(FirstProblem(s), HasSubstr("reduces into scratch[1] piece 0, which holds nothing"));
}

TEST(Verifier, ProblemsAreCappedAndCounted) {
  Schedule s = RingAllGather(2, 1);
  for (int i = 0; i < 150; ++i)
    s.per_rank[0].ops.push_back(MakeOp(OpKind::kSend, 7, 0, Data(0), {}));
  VerifyReport report;
  absl::Status st = VerifySchedule(s, &report);
  EXPECT_THAT(report.problems, SizeIs(kMaxProblems));
  EXPECT_THAT(std::string(st.message()), HasSubstr("(and at least 99 more problems)"));
}

TEST(Verifier, OpValuesNameTheContributionsEachTransferCarries) {
  Schedule s = DirectAllReduce(3, 1);
  absl::StatusOr<std::vector<std::vector<std::vector<uint32_t>>>> v = OpValues(s);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_THAT(*v, SizeIs(3));
  const auto& r0 = (*v)[0];
  ASSERT_EQ(r0.size(), s.per_rank[0].ops.size());
  // Phase 1: rank 0 sends its own contribution to rank 1's chunk.
  EXPECT_THAT(r0[FindOp(s, 0, OpKind::kSend, 1, 1)], ElementsAre(0u));
  // The first receive-reduce carries rank 1's contribution.
  EXPECT_THAT(r0[FindOp(s, 0, OpKind::kRecvReduce, 1, 0)], ElementsAre(1u));
  // Phase 2: the reduced chunk.
  const uint32_t first_recv_reduce = FindOp(s, 0, OpKind::kRecvReduce, 1, 0);
  EXPECT_THAT(r0[FindOp(s, 0, OpKind::kSend, 1, 0, first_recv_reduce)], ElementsAre(0u, 1u, 2u));
  EXPECT_THAT(r0[FindOp(s, 0, OpKind::kRecv, 2, 2)], ElementsAre(0u, 1u, 2u));
  Schedule bad = s;
  bad.pieces = 0;
  EXPECT_FALSE(OpValues(bad).ok());
}

TEST(Verifier, OtherCollectives) {
  // Broadcast from root 1 over 3 ranks: root sends directly.
  Schedule b;
  b.collective = Collective{Kind::kBroadcast, 3, 1, 1};
  b.per_rank.resize(3);
  b.per_rank[1].ops = {MakeOp(OpKind::kSend, 0, 0, Data(0), {}),
                       MakeOp(OpKind::kSend, 2, 0, Data(0), {})};
  b.per_rank[0].ops = {MakeOp(OpKind::kRecv, 1, 0, {}, Data(0))};
  b.per_rank[2].ops = {MakeOp(OpKind::kRecv, 1, 0, {}, Data(0))};
  EXPECT_TRUE(VerifySchedule(b).ok()) << VerifySchedule(b).message();
  b.per_rank[2].ops.clear();
  b.per_rank[1].ops.pop_back();
  EXPECT_EQ(FirstProblem(b),
            "rank 2 data[0] piece 0 ends with nothing; the broadcast promises {1}");

  // Reduce to root 0 over 2 ranks; reduce-scatter over 2 ranks.
  Schedule r;
  r.collective = Collective{Kind::kReduce, 2, 1, 0};
  r.per_rank.resize(2);
  r.per_rank[1].ops = {MakeOp(OpKind::kSend, 0, 0, Data(0), {})};
  r.per_rank[0].ops = {MakeOp(OpKind::kRecvReduce, 1, 0, {}, Data(0))};
  EXPECT_TRUE(VerifySchedule(r).ok()) << VerifySchedule(r).message();
  r.collective.kind = Kind::kReduceScatter;  // rank 1 now owes {0,1} in data[1]
  EXPECT_EQ(FirstProblem(r),
            "rank 1 data[1] piece 0 ends with {1}; the reducescatter promises {0-1}");

  // All-to-all over 2 ranks: slot (src, dst) = src*2 + dst.
  Schedule a;
  a.collective = Collective{Kind::kAllToAll, 2, 1};
  a.per_rank.resize(2);
  a.per_rank[0].ops = {MakeOp(OpKind::kSend, 1, 1, Data(1), {}),
                       MakeOp(OpKind::kRecv, 1, 2, {}, Data(2))};
  a.per_rank[1].ops = {MakeOp(OpKind::kSend, 0, 2, Data(2), {}),
                       MakeOp(OpKind::kRecv, 0, 1, {}, Data(1))};
  EXPECT_TRUE(VerifySchedule(a).ok()) << VerifySchedule(a).message();
}

TEST(Verifier, LargeSchedulesVerify) {
  // 512 ranks: ~520k ops through every phase (not timed; the worklist keeps it linear).
  VerifyReport report;
  EXPECT_TRUE(VerifySchedule(RingAllGather(512, 1), &report).ok());
  EXPECT_EQ(report.ops, 2u * 512 * 511);
  EXPECT_TRUE(VerifySchedule(DirectAllReduce(128, 2, /*via_scratch=*/true)).ok());
}

TEST(Verifier, UntouchedSlotsAreCheckedOncePerSlotNotPerPiece) {
  // One rank, 2^20 slots of 65536 pieces each and no ops: what it starts with is what it owes.
  Schedule s;
  s.collective = Collective{Kind::kAllReduce, 1, 1u << 20};
  s.pieces = kMaxSchedulePieces;
  s.per_rank.resize(1);
  EXPECT_TRUE(VerifySchedule(s).ok());
  // 4096 ranks owing everything and doing nothing: the problem cap ends the check.
  s.collective = Collective{Kind::kAllGather, kMaxRanks, 4096};
  s.per_rank.resize(kMaxRanks);
  VerifyReport report;
  EXPECT_FALSE(VerifySchedule(s, &report).ok());
  EXPECT_THAT(report.problems, SizeIs(kMaxProblems));
  EXPECT_EQ(report.problems.front(),
            "rank 0 data[4096] pieces 0-65535 ends with nothing; the allgather promises {1}");
}

TEST(Verifier, DescribeOpNamesRankAndOp) {
  Schedule s = RingAllGather(2, 1);
  EXPECT_EQ(DescribeOp(s, 1, 1), "rank 1 (r1) op 1 (recv from 0 ch 0 piece 0 chunk 0 -> data[0])");
  EXPECT_EQ(DescribeOp(s, 1, 9), "rank 1 (r1) op 9");
  EXPECT_STREQ(OpKindName(OpKind::kRecvReduce), "recv-reduce");
}

}  // namespace
}  // namespace heddle::collective
