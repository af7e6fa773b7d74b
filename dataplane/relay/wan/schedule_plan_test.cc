#include "dataplane/relay/wan/schedule_plan.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

namespace col = ::heddle::collective;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

col::Op Send(uint32_t peer, uint32_t chunk, uint32_t piece) {
  return {.kind = col::OpKind::kSend,
          .peer = peer,
          .chunk = chunk,
          .piece = piece,
          .src = {.slot = chunk}};
}
col::Op Recv(uint32_t peer, uint32_t chunk, uint32_t piece) {
  return {.kind = col::OpKind::kRecv,
          .peer = peer,
          .chunk = chunk,
          .piece = piece,
          .dst = {.slot = chunk}};
}

// Three ranks, rank 1 the hub: 0 and 2 never talk; rank 1 forwards 0's chunk to 2 and 2's to 0.
col::Schedule Relayed(uint32_t pieces) {
  col::Schedule s;
  s.collective = {.kind = col::Kind::kAllGather, .ranks = 3, .chunks_per_rank = 1};
  s.pieces = pieces;
  s.intent = "relayed";
  s.per_rank.resize(3);
  for (uint32_t p = 0; p < pieces; ++p) {
    s.per_rank[0].ops.push_back(Send(1, 0, p));
    s.per_rank[0].ops.push_back(Recv(1, 1, p));
    s.per_rank[0].ops.push_back(Recv(1, 2, p));
    s.per_rank[2].ops.push_back(Send(1, 2, p));
    s.per_rank[2].ops.push_back(Recv(1, 1, p));
    s.per_rank[2].ops.push_back(Recv(1, 0, p));
    s.per_rank[1].ops.push_back(Recv(0, 0, p));
    s.per_rank[1].ops.push_back(Recv(2, 2, p));
    s.per_rank[1].ops.push_back(Send(0, 1, p));
    s.per_rank[1].ops.push_back(Send(2, 1, p));
    s.per_rank[1].ops.push_back(Send(2, 0, p));
    s.per_rank[1].ops.push_back(Send(0, 2, p));
  }
  return s;
}

TEST(PieceOfSliceTest, PiecesAreContiguousAndCoverEverySlice) {
  for (uint32_t slices : {1u, 2u, 3u, 7u, 16u, 100u}) {
    for (uint32_t pieces : {1u, 2u, 3u, 4u, 7u, 16u, 33u}) {
      for (uint32_t s = 0; s < slices; ++s) {
        const uint32_t p = PieceOfSlice(s, slices, pieces);
        ASSERT_LT(p, pieces);
        EXPECT_LE(PieceFirstSlice(p, slices, pieces), s) << slices << " " << pieces << " " << s;
        EXPECT_LT(s, PieceFirstSlice(p + 1, slices, pieces)) << slices << " " << pieces << " " << s;
      }
      EXPECT_EQ(PieceFirstSlice(0, slices, pieces), 0u);
      EXPECT_EQ(PieceFirstSlice(pieces, slices, pieces), slices);
    }
  }
  // 7 slices, 3 pieces: [0,2) [2,4) [4,7).
  EXPECT_EQ(PieceOfSlice(1, 7, 3), 0u);
  EXPECT_EQ(PieceOfSlice(2, 7, 3), 1u);
  EXPECT_EQ(PieceOfSlice(3, 7, 3), 1u);
  EXPECT_EQ(PieceOfSlice(4, 7, 3), 2u);
  EXPECT_EQ(PieceOfSlice(6, 7, 3), 2u);
  // 2 slices, 4 pieces: pieces 0 and 2 are empty; slice 0 is piece 1, slice 1 piece 3.
  EXPECT_EQ(PieceOfSlice(0, 2, 4), 1u);
  EXPECT_EQ(PieceOfSlice(1, 2, 4), 3u);
}

TEST(ForwardPlanTest, DirectSendsOwnFramesToEveryPeerAndForwardsNothing) {
  const std::vector<uint32_t> regions = {1, 4, 9};
  const col::Schedule s = DirectAllGather(3, 2);
  ASSERT_TRUE(CheckRelaySchedule(s, 3).ok());
  absl::StatusOr<ForwardPlan> plan = ForwardPlan::Build(s, regions, 4, 5);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (uint32_t slice = 0; slice < 5; ++slice) {
    EXPECT_THAT(plan->Targets(4, slice), ElementsAre(1, 9));
    EXPECT_THAT(plan->Targets(1, slice), IsEmpty());
    EXPECT_THAT(plan->Targets(9, slice), IsEmpty());
  }
  EXPECT_THAT(plan->Targets(7, 0), IsEmpty());  // not a region
  EXPECT_THAT(plan->Targets(4, 5), IsEmpty());  // not a slice
  EXPECT_EQ(plan->sends(), 4u);                 // 2 peers x 2 pieces
}

TEST(ForwardPlanTest, RelayedScheduleForwardsThroughTheHubOnly) {
  const std::vector<uint32_t> regions = {1, 2, 3};
  const col::Schedule s = Relayed(1);
  ASSERT_TRUE(CheckRelaySchedule(s, 3).ok());
  absl::StatusOr<ForwardPlan> edge = ForwardPlan::Build(s, regions, 1, 7);
  absl::StatusOr<ForwardPlan> hub = ForwardPlan::Build(s, regions, 2, 7);
  absl::StatusOr<ForwardPlan> far = ForwardPlan::Build(s, regions, 3, 7);
  ASSERT_TRUE(edge.ok() && hub.ok() && far.ok());
  for (uint32_t slice = 0; slice < 7; ++slice) {
    EXPECT_THAT(edge->Targets(1, slice), ElementsAre(2));  // never to region 3
    EXPECT_THAT(edge->Targets(3, slice), IsEmpty());       // received, not forwarded
    EXPECT_THAT(hub->Targets(1, slice), ElementsAre(3));
    EXPECT_THAT(hub->Targets(2, slice), ElementsAre(1, 3));
    EXPECT_THAT(hub->Targets(3, slice), ElementsAre(1));
    EXPECT_THAT(far->Targets(3, slice), ElementsAre(2));
    EXPECT_THAT(far->Targets(1, slice), IsEmpty());
  }
}

TEST(ForwardPlanTest, RoutesDifferPerPiece) {
  // Two pieces: piece 0 of rank 0's chunk goes direct to rank 2, piece 1 via rank 1.
  col::Schedule s = DirectAllGather(3, 2);
  for (col::Op& op : s.per_rank[0].ops) {
    if (op.kind == col::OpKind::kSend && op.peer == 2 && op.piece == 1) op.peer = 1;
  }
  s.per_rank[1].ops.push_back(Send(2, 0, 1));
  ASSERT_TRUE(CheckRelaySchedule(s, 3).ok());
  const std::vector<uint32_t> regions = {10, 20, 30};
  absl::StatusOr<ForwardPlan> a = ForwardPlan::Build(s, regions, 10, 7);
  absl::StatusOr<ForwardPlan> b = ForwardPlan::Build(s, regions, 20, 7);
  ASSERT_TRUE(a.ok() && b.ok());
  // 7 slices in 2 pieces: [0, 3) and [3, 7).
  for (uint32_t slice : {0u, 1u, 2u}) {
    EXPECT_THAT(a->Targets(10, slice), ElementsAre(20, 30)) << slice;
    EXPECT_THAT(b->Targets(10, slice), IsEmpty()) << slice;
  }
  for (uint32_t slice : {3u, 4u, 6u}) {
    EXPECT_THAT(a->Targets(10, slice), ElementsAre(20)) << slice;
    EXPECT_THAT(b->Targets(10, slice), ElementsAre(30)) << slice;
  }
}

TEST(ForwardPlanTest, RingForwardsWhatItReceivedToTheNextRank) {
  const col::Schedule s = RingAllGather(4, 3);
  ASSERT_TRUE(CheckRelaySchedule(s, 4).ok());
  const std::vector<uint32_t> regions = {1, 2, 3, 4};
  absl::StatusOr<ForwardPlan> p = ForwardPlan::Build(s, regions, 2, 9);
  ASSERT_TRUE(p.ok());
  for (uint32_t slice = 0; slice < 9; ++slice) {
    EXPECT_THAT(p->Targets(2, slice), ElementsAre(3));  // own
    EXPECT_THAT(p->Targets(1, slice), ElementsAre(3));  // from 1, on to 3
    EXPECT_THAT(p->Targets(4, slice), ElementsAre(3));  // from 1 (4→1→2), on to 3
    EXPECT_THAT(p->Targets(3, slice), IsEmpty());       // 3's chunk ends here (3→4→1→2)
  }
}

TEST(CheckRelayScheduleTest, RefusesWhatTheRelayCannotRun) {
  col::Schedule s = DirectAllGather(3, 1);
  EXPECT_THAT(CheckRelaySchedule(s, 4).message(), HasSubstr("3 ranks"));

  col::Schedule ar = s;
  ar.collective.kind = col::Kind::kAllReduce;
  EXPECT_THAT(CheckRelaySchedule(ar, 3).message(), HasSubstr("allreduce"));

  col::Schedule k2 = s;
  k2.collective.chunks_per_rank = 2;
  EXPECT_THAT(CheckRelaySchedule(k2, 3).message(), HasSubstr("2 chunks per rank"));

  col::Schedule reduce = s;
  reduce.per_rank[1].ops.push_back({.kind = col::OpKind::kRecvReduce, .peer = 0, .chunk = 0});
  EXPECT_THAT(CheckRelaySchedule(reduce, 3).message(), HasSubstr("copy-only"));

  col::Schedule range = s;
  range.per_rank[0].ops.push_back(Send(0, 0, 0));  // to itself
  EXPECT_THAT(CheckRelaySchedule(range, 3).message(), HasSubstr("out of range"));
  range = s;
  range.per_rank[0].ops.push_back(Send(1, 0, 1));  // piece 1 of 1
  EXPECT_THAT(CheckRelaySchedule(range, 3).message(), HasSubstr("out of range"));

  // Dropped send: rank 2's chunk never reaches rank 0.
  col::Schedule dropped = s;
  auto& ops = dropped.per_rank[2].ops;
  ops.erase(std::find_if(ops.begin(), ops.end(), [](const col::Op& op) {
    return op.kind == col::OpKind::kSend && op.peer == 0;
  }));
  EXPECT_THAT(CheckRelaySchedule(dropped, 3).message(),
              HasSubstr("piece 0 of chunk 2 (rank 2's frames) never reaches rank 0"));

  // A forward of something the forwarder never gets does not count.
  col::Schedule phantom = Relayed(1);
  auto& hub = phantom.per_rank[1].ops;
  hub.erase(std::find_if(hub.begin(), hub.end(), [](const col::Op& op) {
    return op.kind == col::OpKind::kRecv && op.chunk == 0;
  }));
  phantom.per_rank[0].ops.erase(phantom.per_rank[0].ops.begin());  // 0 never sends its chunk
  EXPECT_THAT(CheckRelaySchedule(phantom, 3).message(), HasSubstr("chunk 0"));

  EXPECT_FALSE(ForwardPlan::Build(s, std::vector<uint32_t>{1, 2, 3}, 5, 7).ok());
  EXPECT_FALSE(ForwardPlan::Build(s, std::vector<uint32_t>{3, 2, 1}, 1, 7).ok());
  EXPECT_FALSE(ForwardPlan::Build(s, std::vector<uint32_t>{1, 2, 3}, 1, 0).ok());
}

}  // namespace
}  // namespace heddle::relay
