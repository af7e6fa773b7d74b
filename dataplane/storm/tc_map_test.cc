#include "dataplane/storm/tc_map.h"

#include <string>

#include "gtest/gtest.h"

namespace heddle::storm {
namespace {

using Arr = std::array<uint8_t, 8>;

LevelConfig Levels(int k, std::array<int8_t, 8> pcp = {-1, -1, -1, -1, -1, -1, -1, -1}) {
  LevelConfig c;
  c.levels = k;
  c.control_level = static_cast<uint8_t>(k - 1);
  c.pcp = pcp;
  return c;
}

TEST(TcMapTest, InOrderOnFourTcsUpToFourLevels) {
  absl::StatusOr<TcMap> m = MapLevelsToTcs(Levels(4));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->nb_tcs, 4);
  EXPECT_FALSE(m->by_pcp);
  // Levels 4..7 exist only after a later `set storm levels`: they take the top level's TC.
  EXPECT_EQ(m->level_tc, (Arr{0, 1, 2, 3, 3, 3, 3, 3}));
  EXPECT_EQ(m->prio_tc, (Arr{0, 0, 1, 1, 2, 2, 3, 3}));

  m = MapLevelsToTcs(Levels(2));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->nb_tcs, 4);
  EXPECT_EQ(m->level_tc, (Arr{0, 1, 1, 1, 1, 1, 1, 1}));

  m = MapLevelsToTcs(Levels(1));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->level_tc, (Arr{0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(TcMapTest, InOrderOnEightTcsAboveFourLevels) {
  absl::StatusOr<TcMap> m = MapLevelsToTcs(Levels(5));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->nb_tcs, 8);
  EXPECT_EQ(m->level_tc, (Arr{0, 1, 2, 3, 4, 4, 4, 4}));
  EXPECT_EQ(m->prio_tc, (Arr{0, 1, 2, 3, 4, 5, 6, 7}));
  m = MapLevelsToTcs(Levels(8));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->level_tc, (Arr{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(TcMapTest, ThroughPcp) {
  // Two levels share PCP 3: they share a TC; the distinct PCPs 1, 3, 5 take TCs 0, 1, 2.
  absl::StatusOr<TcMap> m = MapLevelsToTcs(Levels(4, {1, 3, 3, 5, -1, -1, -1, -1}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->by_pcp);
  EXPECT_EQ(m->nb_tcs, 4);
  EXPECT_EQ(m->level_tc, (Arr{0, 1, 1, 2, 2, 2, 2, 2}));
  // UP 0 lies below every level PCP (TC 0); UP p takes the TC of the largest level PCP <= p.
  EXPECT_EQ(m->prio_tc, (Arr{0, 0, 0, 1, 1, 2, 2, 2}));

  // Six distinct PCPs need 8 TCs.
  m = MapLevelsToTcs(Levels(6, {0, 1, 2, 4, 6, 7, -1, -1}));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->nb_tcs, 8);
  EXPECT_EQ(m->level_tc, (Arr{0, 1, 2, 3, 4, 5, 5, 5}));
  EXPECT_EQ(m->prio_tc, (Arr{0, 1, 2, 2, 3, 3, 4, 5}));
}

TEST(TcMapTest, RefusesAPartialPcpList) {
  absl::StatusOr<TcMap> m = MapLevelsToTcs(Levels(4, {-1, 2, 4, 6, -1, -1, -1, -1}));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(m.status().message());
  EXPECT_NE(msg.find("storm.pcp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("level 0 has none"), std::string::npos) << msg;
}

TEST(TcMapTest, RefusesAHigherLevelWithALowerPcp) {
  absl::StatusOr<TcMap> m = MapLevelsToTcs(Levels(3, {2, 5, 4, -1, -1, -1, -1, -1}));
  ASSERT_FALSE(m.ok());
  const std::string msg(m.status().message());
  EXPECT_NE(msg.find("level 2 has PCP 4, below level 1's PCP 5"), std::string::npos) << msg;
}

TEST(TcMapTest, RefusesLevelsOutOfRange) {
  EXPECT_FALSE(MapLevelsToTcs(Levels(0)).ok());
  LevelConfig c = Levels(8);
  c.levels = 9;
  EXPECT_FALSE(MapLevelsToTcs(c).ok());
}

}  // namespace
}  // namespace heddle::storm
