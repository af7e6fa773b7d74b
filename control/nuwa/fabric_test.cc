#include "control/nuwa/fabric.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::nuwa {
namespace {

Fabric FatTree(uint32_t k) {
  Fabric f;
  f.name = "ft";
  f.kind = Kind::kFatTree;
  f.shape.tiers = 3;
  f.shape.m = {0, k / 2, k / 2, k};
  f.shape.w = {0, 1, k / 2, k / 2};
  f.tier_names = {"host", "edge", "agg", "core"};
  f.addresses.ipv4_base = 10u << 24;
  f.addresses.ipv4_prefix_len = 8;
  EXPECT_TRUE(LayOutAddresses(f.shape, f.addresses).ok());
  return f;
}

TEST(Fabric, FatTreeCounts) {
  const Fabric f = FatTree(8);
  EXPECT_EQ(NodeCount(f.shape, 0), 128u);
  EXPECT_EQ(NodeCount(f.shape, 1), 32u);
  EXPECT_EQ(NodeCount(f.shape, 2), 32u);
  EXPECT_EQ(NodeCount(f.shape, 3), 16u);
  EXPECT_TRUE(Validate(f).ok()) << Validate(f);
}

TEST(Fabric, LabelIndexRoundTrip) {
  const Fabric f = FatTree(8);
  for (int t = 0; t <= 3; ++t) {
    for (uint32_t i = 0; i < NodeCount(f.shape, t); ++i) {
      EXPECT_EQ(IndexOf(f.shape, t, LabelOf(f.shape, t, i)), i) << t << " " << i;
    }
  }
}

TEST(Fabric, FatTreeWiringIsTheUsualOne) {
  const uint32_t k = 8;
  const Fabric f = FatTree(k);
  // Host h sits under edge h / (k/2); edge e of pod p connects to every agg of pod p.
  for (uint32_t h = 0; h < NodeCount(f.shape, 0); ++h) {
    EXPECT_EQ(Parent(f.shape, {0, 0, h}, 0), (NodeRef{0, 1, h / (k / 2)}));
  }
  for (uint32_t e = 0; e < NodeCount(f.shape, 1); ++e) {
    for (uint32_t u = 0; u < k / 2; ++u) {
      NodeRef agg = Parent(f.shape, {0, 1, e}, u);
      EXPECT_EQ(agg.index, (e / (k / 2)) * (k / 2) + u);
      // The agg's down port back to this edge.
      EXPECT_EQ(Child(f.shape, agg, e % (k / 2)), (NodeRef{0, 1, e}));
    }
  }
  // Core c connects to agg c / (k/2) of every pod; each core has one link per pod.
  std::set<NodeRef> cores;
  for (uint32_t a = 0; a < NodeCount(f.shape, 2); ++a) {
    for (uint32_t u = 0; u < k / 2; ++u) {
      NodeRef core = Parent(f.shape, {0, 2, a}, u);
      EXPECT_EQ(core.index / (k / 2), a % (k / 2));
      EXPECT_EQ(Child(f.shape, core, a / (k / 2)), (NodeRef{0, 2, a}));
      cores.insert(core);
    }
  }
  EXPECT_EQ(cores.size(), 16u);
}

TEST(Fabric, AddressesRoundTripAndReject) {
  Fabric f = FatTree(8);
  f.addresses.has_ipv6 = true;
  f.addresses.ipv6_base = {0xfd, 0, 0, 1};
  ASSERT_TRUE(LayOutAddresses(f.shape, f.addresses).ok());
  for (uint32_t h = 0; h < NodeCount(f.shape, 0); ++h) {
    EXPECT_EQ(HostOfIpv4(f.shape, f.addresses, HostIpv4(f.shape, f.addresses, h)), h);
    EXPECT_EQ(HostOfIpv6(f.shape, f.addresses, HostIpv6(f.shape, f.addresses, h)), h);
  }
  // 8 pods x 4 edges x 4 hosts: 2 + 2 + 3 bits. Digit out of range / outside the prefix.
  EXPECT_EQ(HostOfIpv4(f.shape, f.addresses, (10u << 24) | (1u << 7)), std::nullopt);
  EXPECT_EQ(HostOfIpv4(f.shape, f.addresses, 11u << 24), std::nullopt);
  EXPECT_EQ(HostIpv4(f.shape, f.addresses, 5), (10u << 24) | (1u << 2) | 1u);
}

TEST(Fabric, NamesParse) {
  Fabric f = FatTree(8);
  EXPECT_EQ(NodeName(f, {0, 2, 7}), "agg[7]");
  EXPECT_EQ(*ParseNodeName(f, "agg[7]"), (NodeRef{0, 2, 7}));
  EXPECT_EQ(*ParseNodeName(f, "tier3[1]"), (NodeRef{0, 3, 1}));
  EXPECT_EQ(*ParseNodeName(f, "10.0.0.5"), (NodeRef{0, 0, 5}));
  EXPECT_FALSE(ParseNodeName(f, "agg[32]").ok());
  EXPECT_FALSE(ParseNodeName(f, "spine[0]").ok());
  EXPECT_FALSE(ParseNodeName(f, "agg[x]").ok());
  f.shape.planes = 2;
  EXPECT_EQ(NodeName(f, {1, 3, 2}), "p1/core[2]");
  EXPECT_EQ(*ParseNodeName(f, "p1/core[2]"), (NodeRef{1, 3, 2}));
}

TEST(Fabric, ValidateNamesTheProblem) {
  Fabric f = FatTree(8);
  f.failures.links.push_back({{0, 2, 3}, 9});
  EXPECT_THAT(Validate(f).message(), testing::HasSubstr("no up port 9"));
  f = FatTree(8);
  f.addresses.ipv4_prefix_len = 28;
  EXPECT_THAT(Validate(f).message(), testing::HasSubstr("use a shorter prefix"));
}

}  // namespace
}  // namespace heddle::nuwa
