#include "control/nuwa/oracle.h"

#include <set>

#include "control/nuwa/testing/random_fabric.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::nuwa {
namespace {

using ::testing::ElementsAre;
using testing::FatTree;
using testing::LeafSpine;

// k = 4: 16 hosts, 2 per edge, edges 0-1 in pod 0, ...; an edge has down ports 0-1, up 2-3;
// an agg has down ports 0-1 (edges), up 2-3 (cores); a core has down ports 0-3 (pods).
TEST(Oracle, FatTreeFailureFree) {
  const Fabric f = FatTree(4);
  Oracle o(f);
  const auto t = o.AllNextHops(0);  // host 0: pod 0, edge 0, port 0
  EXPECT_TRUE(t[o.NodeId({0, 0, 0})].local);
  EXPECT_THAT(t[o.NodeId({0, 1, 0})].ports, ElementsAre(0));     // its edge: down
  EXPECT_THAT(t[o.NodeId({0, 1, 1})].ports, ElementsAre(2, 3));  // same pod: up to both aggs
  EXPECT_THAT(t[o.NodeId({0, 1, 4})].ports, ElementsAre(2, 3));  // another pod: up
  EXPECT_THAT(t[o.NodeId({0, 2, 1})].ports, ElementsAre(0));     // agg of pod 0: down to edge 0
  EXPECT_THAT(t[o.NodeId({0, 2, 2})].ports, ElementsAre(2, 3));  // agg of pod 1: up
  for (uint32_t c = 0; c < 4; ++c) EXPECT_THAT(t[o.NodeId({0, 3, c})].ports, ElementsAre(0));
  EXPECT_THAT(t[o.NodeId({0, 0, 5})].ports, ElementsAre(0));  // a host: its one port
}

TEST(Oracle, FatTreeLinkFailureIsAvoidedValleyFree) {
  Fabric f = FatTree(4);
  // edge 0 -- agg 0 (edge 0's up port 0) fails.
  f.failures.links.push_back({{0, 1, 0}, 0});
  Oracle o(f);
  const auto t = o.AllNextHops(0);
  // Agg 0 cannot reach host 0 at all (down then up again would be a valley); nor can the cores
  // above it (b_2 = 0: cores 0 and 1), which only reach pod 0 through agg 0.
  EXPECT_FALSE(t[o.NodeId({0, 2, 0})].reachable);
  EXPECT_FALSE(t[o.NodeId({0, 3, 0})].reachable);
  EXPECT_FALSE(t[o.NodeId({0, 3, 1})].reachable);
  EXPECT_THAT(t[o.NodeId({0, 3, 2})].ports, ElementsAre(0));
  // Every edge elsewhere climbs only to agg b_2 = 1 (up port 3).
  EXPECT_THAT(t[o.NodeId({0, 1, 1})].ports, ElementsAre(3));
  EXPECT_THAT(t[o.NodeId({0, 1, 6})].ports, ElementsAre(3));
  // Edge 0 itself still goes down; host 1 (also under edge 0) is unaffected at edge 0.
  EXPECT_THAT(t[o.NodeId({0, 1, 0})].ports, ElementsAre(0));
  // Host 4 (pod 1) is unaffected by the failure: edges of pod 0 other than edge 0 use both aggs.
  const auto t4 = o.AllNextHops(4);
  EXPECT_THAT(t4[o.NodeId({0, 1, 1})].ports, ElementsAre(2, 3));
  // Edge 0 towards pod 1: only its live up port.
  EXPECT_THAT(t4[o.NodeId({0, 1, 0})].ports, ElementsAre(3));
}

TEST(Oracle, FailedSwitchAndClassRestriction) {
  Fabric f = LeafSpine(2, 3, 4);  // leaves: down 0-1, up 2-5
  f.failures.switches.push_back({0, 2, 1});
  DestinationClass c;
  c.name = "storage";
  c.prefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 0};
  c.prefix_len = 96 + 30;  // hosts 0-3
  c.restrict_tier = 2;
  c.allowed_up_mask = 0b0011;
  f.routing.classes.push_back(c);
  ASSERT_TRUE(Validate(f).ok()) << Validate(f);
  Oracle o(f);
  // Host 2 (leaf 1) is in the class: leaves go only to spine 0 (spine 1 is dead).
  EXPECT_THAT(o.NextHops({0, 1, 0}, 2).ports, ElementsAre(2));
  // Host 4 (leaf 2) is not: all live spines.
  EXPECT_THAT(o.NextHops({0, 1, 0}, 4).ports, ElementsAre(2, 4, 5));
  // A spine outside the allowed set still delivers downwards.
  EXPECT_THAT(o.NextHops({0, 2, 3}, 2).ports, ElementsAre(1));
  EXPECT_FALSE(o.NextHops({0, 2, 1}, 2).reachable);  // dead
}

TEST(Oracle, ToNextHops) {
  const Shape s = FatTree(4).shape;
  EXPECT_EQ(ToNextHops(s, 1, OracleHops{true, false, {1}}).kind, fwd::HopKind::kDown);
  const fwd::NextHops up = ToNextHops(s, 1, OracleHops{true, false, {2, 3}});
  EXPECT_EQ(up.kind, fwd::HopKind::kUp);
  EXPECT_EQ(up.up_mask, 0b11u);
  EXPECT_EQ(ToNextHops(s, 1, OracleHops{}).kind, fwd::HopKind::kUnreachable);
  EXPECT_EQ(ToNextHops(s, 1, OracleHops{true, false, {0, 2}}).kind, fwd::HopKind::kNotInFabric);
}

TEST(Oracle, SimulatedPathsClimbToTheLcaAndDescend) {
  const Fabric f = FatTree(8);
  Oracle o(f);
  const auto t = o.AllNextHops(100);  // pod 6
  std::set<std::vector<NodeRef>> paths;
  for (uint16_t sport = 0xC000; sport < 0xC000 + 256; ++sport) {
    const auto path = o.SimulatePath(t, 3, 100, 0, sport);
    ASSERT_EQ(path.size(), 5u);  // edge, agg, core, agg, edge
    EXPECT_EQ(path[0], (NodeRef{0, 1, 0}));
    EXPECT_EQ(path[2].tier, 3);
    EXPECT_EQ(path[4], (NodeRef{0, 1, 100 / 4}));
    paths.insert(path);
  }
  EXPECT_EQ(paths.size(), 16u);  // (k/2)^2 core paths, all used by 256 ports
  // The same packet takes the same path.
  EXPECT_EQ(o.SimulatePath(t, 3, 100, 0, 0xC123), o.SimulatePath(t, 3, 100, 0, 0xC123));
}

}  // namespace
}  // namespace heddle::nuwa
