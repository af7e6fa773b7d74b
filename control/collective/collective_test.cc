#include "control/collective/collective.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::collective {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

TEST(Collective, SlotCountsFollowTheTable) {
  EXPECT_EQ(SlotCount({Kind::kAllGather, 4, 2}), 8u);
  EXPECT_EQ(SlotCount({Kind::kReduceScatter, 4, 2}), 8u);
  EXPECT_EQ(SlotCount({Kind::kAllReduce, 4, 1}), 4u);
  EXPECT_EQ(SlotCount({Kind::kBroadcast, 4, 3, 1}), 3u);
  EXPECT_EQ(SlotCount({Kind::kReduce, 4, 3, 1}), 3u);
  EXPECT_EQ(SlotCount({Kind::kAllToAll, 4, 2}), 32u);
}

TEST(Collective, AllGatherStartsOwnedAndEndsEverywhere) {
  Collective c{Kind::kAllGather, 3, 2};
  EXPECT_TRUE(StartsWith(c, 1, 2));
  EXPECT_TRUE(StartsWith(c, 1, 3));
  EXPECT_FALSE(StartsWith(c, 1, 4));
  EXPECT_THAT(Promise(c, 0, 5), Optional(ElementsAre(2u)));
  EXPECT_EQ(SlotOwner(c, 5), 2u);
}

TEST(Collective, ReduceScatterPromisesOnlyTheOwnedSlots) {
  Collective c{Kind::kReduceScatter, 3, 1};
  EXPECT_TRUE(StartsWith(c, 0, 2));
  EXPECT_EQ(Promise(c, 0, 2), std::nullopt);
  EXPECT_THAT(Promise(c, 2, 2), Optional(ElementsAre(0u, 1u, 2u)));
}

TEST(Collective, RootedCollectives) {
  Collective b{Kind::kBroadcast, 4, 1, 2};
  EXPECT_TRUE(StartsWith(b, 2, 0));
  EXPECT_FALSE(StartsWith(b, 0, 0));
  EXPECT_THAT(Promise(b, 3, 0), Optional(ElementsAre(2u)));
  Collective r{Kind::kReduce, 3, 1, 1};
  EXPECT_EQ(Promise(r, 0, 0), std::nullopt);
  EXPECT_THAT(Promise(r, 1, 0), Optional(ElementsAre(0u, 1u, 2u)));
}

TEST(Collective, AllToAllSlotsAreSourceDestinationPairs) {
  Collective c{Kind::kAllToAll, 3, 1};
  // slot (src 1, dst 2) = 1*3 + 2 = 5
  EXPECT_TRUE(StartsWith(c, 1, 5));
  EXPECT_FALSE(StartsWith(c, 2, 5));
  EXPECT_EQ(Promise(c, 1, 5), std::nullopt);
  EXPECT_THAT(Promise(c, 2, 5), Optional(ElementsAre(1u)));
}

TEST(Collective, ValidateRefusesBadShapes) {
  EXPECT_FALSE(Validate({Kind::kAllGather, 0, 1}).ok());
  EXPECT_FALSE(Validate({Kind::kAllGather, 2, 0}).ok());
  EXPECT_FALSE(Validate({Kind::kBroadcast, 2, 1, 2}).ok());
  EXPECT_FALSE(Validate({Kind::kAllToAll, 4096, 4096}).ok());
  EXPECT_TRUE(Validate({Kind::kAllReduce, 64, 4}).ok());
  EXPECT_EQ(KindFromName("alltoall"), Kind::kAllToAll);
  EXPECT_EQ(KindFromName("gather"), std::nullopt);
}

}  // namespace
}  // namespace heddle::collective
