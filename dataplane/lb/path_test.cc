// File: dataplane/lb/path_test.cc
#include "dataplane/lb/path.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dataplane/lb/lb_test_util.h"

namespace heddle::lb {
namespace {

using ::testing::HasSubstr;

TEST(Prefix, ParsesIpv4AndIpv6) {
  auto p = ParsePrefix("10.1.0.0/16");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->len, 96 + 16);
  EXPECT_EQ(p->addr[10], 0xff);
  EXPECT_EQ(p->addr[12], 10);
  EXPECT_EQ(p->addr[13], 1);
  auto h = ParsePrefix("10.1.2.3");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->len, 128);
  auto v6 = ParsePrefix("fd00:1::/32");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->len, 32);
  EXPECT_EQ(v6->addr[0], 0xfd);
  EXPECT_EQ(v6->addr[3], 0x01);
}

TEST(Prefix, ErrorsSayWhatToFix) {
  EXPECT_THAT(ParsePrefix("10.1.0.1/16").status().message(), HasSubstr("10.1.0.0/16"));
  EXPECT_THAT(ParsePrefix("10.1.0.0/33").status().message(), HasSubstr("0..32"));
  EXPECT_THAT(ParsePrefix("fd00::/129").status().message(), HasSubstr("0..128"));
  EXPECT_THAT(ParsePrefix("banana/8").status().message(), HasSubstr("not an IPv4 or IPv6"));
  EXPECT_THAT(ParsePrefix("10.0.0.0/x").status().message(), HasSubstr("not a number"));
}

TEST(PathConfig, ExpandsPortsTimesEntropies) {
  PathConfig c;
  c.prefixes.push_back(
      {.prefix = "10.1.0.0/16", .ports = {0, 1}, .entropies = 4, .first_entropy = 0xd000});
  c.prefixes.push_back({.prefix = "10.2.0.0/16", .ports = {1}, .values = {0xc123, 0xc456}});
  auto spec = PathTableSpecFromConfig(c, EntropyField::kUdpSourcePort);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->sets.size(), 3u);  // two prefixes + the default
  ASSERT_EQ(spec->sets[0].size(), 8u);
  EXPECT_EQ(spec->sets[0][0].port, 0);
  EXPECT_EQ(spec->sets[0][0].entropy, 0xd000u);
  EXPECT_EQ(spec->sets[0][7].port, 1);
  EXPECT_EQ(spec->sets[0][7].entropy, 0xd003u);
  ASSERT_EQ(spec->sets[1].size(), 2u);
  EXPECT_EQ(spec->sets[1][1].entropy, 0xc456u);
  EXPECT_EQ(spec->default_set, 2);
  EXPECT_EQ(spec->sets[2].size(), 8u);
}

TEST(PathConfig, RejectsWhatCannotWork) {
  PathConfig c;
  c.default_paths.entropies = 65;
  EXPECT_THAT(PathTableSpecFromConfig(c, EntropyField::kUdpSourcePort).status().message(),
              HasSubstr("more than the 64"));
  c.default_paths.entropies = 8;
  c.default_paths.first_entropy = 0xfffe;  // runs past 16 bits
  EXPECT_THAT(PathTableSpecFromConfig(c, EntropyField::kUdpSourcePort).status().message(),
              HasSubstr("does not fit the udp-sport"));
  EXPECT_TRUE(PathTableSpecFromConfig(c, EntropyField::kIpv6FlowLabel).ok());
  c.default_paths.first_entropy = 0xc000;
  c.default_paths.values = {1, 2, 1};
  EXPECT_THAT(PathTableSpecFromConfig(c, EntropyField::kUdpSourcePort).status().message(),
              HasSubstr("listed twice"));
  c.default_paths.values.clear();
  c.default_paths.ports.clear();
  EXPECT_THAT(PathTableSpecFromConfig(c, EntropyField::kUdpSourcePort).status().message(),
              HasSubstr("no uplink port"));
}

TEST(PathTable, BuildRejectsBadSpecs) {
  PathTableSpec s;
  s.sets = {{}};
  EXPECT_FALSE(PathTable::Build(s).ok());
  s.sets = {{Path{.entropy = 0x100000}}};
  EXPECT_THAT(PathTable::Build(s).status().message(), HasSubstr("wider than 20 bits"));
  s.sets = {{Path{.entropy = 1}}};
  s.routes = {{*ParsePrefix("10.0.0.0/8"), 1}};
  EXPECT_THAT(PathTable::Build(s).status().message(), HasSubstr("points to path set 1"));
  s.routes = {{*ParsePrefix("10.0.0.0/8"), 0}, {*ParsePrefix("10.0.0.0/8"), 0}};
  EXPECT_THAT(PathTable::Build(s).status().message(), HasSubstr("listed twice"));
  s.routes.clear();
  s.default_set = 3;
  EXPECT_THAT(PathTable::Build(s).status().message(), HasSubstr("does not exist"));
}

TEST(PathTable, RouteWithNoSetHidesShorterPrefixesAndTheDefault) {
  PathTableSpec s;
  s.sets = {{Path{.entropy = 1}}, {Path{.entropy = 2}}};
  s.routes = {{*ParsePrefix("10.1.0.0/16"), 0},
              {*ParsePrefix("10.1.2.0/24"), kRouteNoSet},
              {*ParsePrefix("10.1.2.9/32"), 0}};
  s.default_set = 1;
  auto table = PathTable::Build(s);
  ASSERT_TRUE(table.ok()) << table.status();
  auto lookup = [&](const char* a) {
    auto p = ParsePrefix(a);
    EXPECT_TRUE(p.ok()) << a;
    return (*table)->LookupAddress(p->addr.data());
  };
  EXPECT_EQ(lookup("10.1.3.4").size, 1u);
  EXPECT_EQ(lookup("10.1.3.4").paths[0].entropy, 1u);
  EXPECT_EQ(lookup("10.1.2.4").size, 0u);  // not balanced, though 10.1/16 and the default match
  EXPECT_EQ(lookup("10.1.2.9").size, 1u);  // a longer prefix still wins
  EXPECT_EQ(lookup("10.9.0.1").paths[0].entropy, 2u);
  EXPECT_EQ(PrefixString(*ParsePrefix("10.1.2.0/24")), "10.1.2.0/24");
  EXPECT_EQ(PrefixString(*ParsePrefix("fd00::/64")), "fd00::/64");
}

TEST(PathTable, LongestPrefixWinsThenDefault) {
  PathConfig c;
  c.prefixes.push_back({.prefix = "10.1.0.0/16", .entropies = 2});
  c.prefixes.push_back({.prefix = "10.1.7.0/24", .entropies = 3});
  c.prefixes.push_back({.prefix = "fd00:0:0:2::/64", .entropies = 5});
  c.default_paths.entropies = 4;
  auto spec = PathTableSpecFromConfig(c, EntropyField::kUdpSourcePort);
  ASSERT_TRUE(spec.ok());
  auto table = PathTable::Build(*spec);
  ASSERT_TRUE(table.ok()) << table.status();
  const PathTable& t = **table;

  auto lookup4 = [&](uint8_t a, uint8_t b, uint8_t c3, uint8_t d) {
    pkt::FrameSpec f;
    f.dst_ip4 = {a, b, c3, d};
    testing::Packet p = testing::Make(f, pkt::RoceSpec{});
    return t.Lookup(p.data(), p.desc).size;
  };
  EXPECT_EQ(lookup4(10, 1, 0, 9), 2u);
  EXPECT_EQ(lookup4(10, 1, 7, 9), 3u);
  EXPECT_EQ(lookup4(10, 2, 7, 9), 4u);  // default

  pkt::FrameSpec f6;
  f6.ipv6 = true;
  f6.dst_ip6 = {0xfd, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9};
  testing::Packet p6 = testing::Make(f6, pkt::RoceSpec{});
  EXPECT_EQ(t.Lookup(p6.data(), p6.desc).size, 5u);
  f6.dst_ip6[7] = 3;
  p6 = testing::Make(f6, pkt::RoceSpec{});
  EXPECT_EQ(t.Lookup(p6.data(), p6.desc).size, 4u);

  // Without a default set, unmatched destinations are not balanced.
  c.has_default = false;
  auto t2 = PathTable::Build(*PathTableSpecFromConfig(c, EntropyField::kUdpSourcePort));
  ASSERT_TRUE(t2.ok());
  pkt::FrameSpec f;
  f.dst_ip4 = {192, 168, 0, 1};
  testing::Packet p = testing::Make(f, pkt::RoceSpec{});
  EXPECT_EQ((*t2)->Lookup(p.data(), p.desc).size, 0u);
  EXPECT_NE((*t2)->generation(), t.generation());
}

}  // namespace
}  // namespace heddle::lb
