#include <yaml-cpp/yaml.h>

#include <string>

#include "control/collective/topology_io.h"
#include "control/nuwa/dsl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::collective {
namespace {

using ::testing::HasSubstr;

const Link* FindLink(const Topology& t, uint32_t a, uint32_t b) {
  for (const Link& l : t.links) {
    if (l.src == a && l.dst == b) return &l;
  }
  return nullptr;
}

TEST(Topology, ParsesNamesDefaultsAndOverrides) {
  absl::StatusOr<Topology> t = ParseTopology(R"(
ranks: [eu, us, asia]
default: {bandwidth: 10Gbit, latency: 30ms}
links:
  - {between: [eu, us], bandwidth: 2.5Gbit, latency: 40ms}
  - {from: us, to: asia, bandwidth: 100MB/s}
)");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ranks, 3u);
  EXPECT_EQ(t->nodes, (std::vector<std::string>{"eu", "us", "asia"}));
  EXPECT_EQ(t->links.size(), 6u);
  const Link* eu_us = FindLink(*t, 0, 1);
  ASSERT_NE(eu_us, nullptr);
  EXPECT_DOUBLE_EQ(eu_us->bytes_per_second, 2.5e9 / 8);
  EXPECT_DOUBLE_EQ(eu_us->latency_s, 0.040);
  EXPECT_DOUBLE_EQ(FindLink(*t, 1, 0)->bytes_per_second, 2.5e9 / 8);
  // One direction given; it takes the default's latency; the other direction is the default.
  EXPECT_DOUBLE_EQ(FindLink(*t, 1, 2)->bytes_per_second, 100e6);
  EXPECT_DOUBLE_EQ(FindLink(*t, 1, 2)->latency_s, 0.030);
  EXPECT_DOUBLE_EQ(FindLink(*t, 2, 1)->bytes_per_second, 10e9 / 8);
  EXPECT_DOUBLE_EQ(FindLink(*t, 0, 2)->latency_s, 0.030);
}

TEST(Topology, RankCountAndSwitches) {
  absl::StatusOr<Topology> t = ParseTopology(R"(
ranks: 3
switches: [tor]
links:
  - {between: [r0, tor], bandwidth: 1GB/s, latency: 1us}
  - {between: [r1, tor], bandwidth: 1GB/s, latency: 1us}
  - {between: [r2, tor], bandwidth: 1GB/s}
)");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ranks, 3u);
  EXPECT_EQ(t->nodes.back(), "tor");
  EXPECT_DOUBLE_EQ(FindLink(*t, 0, 3)->latency_s, 1e-6);
  EXPECT_DOUBLE_EQ(FindLink(*t, 3, 2)->latency_s, 0);
}

TEST(Topology, Units) {
  EXPECT_DOUBLE_EQ(*ParseBandwidth("10Gbit"), 1.25e9);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("2.5 Gbit/s"), 2.5e9 / 8);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("800Mbit"), 1e8);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("8kbit"), 1000);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("1.5GB/s"), 1.5e9);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("1e3MB/s"), 1e9);
  EXPECT_DOUBLE_EQ(*ParseLatency("30ms"), 0.030);
  EXPECT_DOUBLE_EQ(*ParseLatency("1.5s"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseLatency("250us"), 250e-6);
  EXPECT_DOUBLE_EQ(*ParseLatency("100ns"), 1e-7);
  EXPECT_DOUBLE_EQ(*ParseLatency("0"), 0);
  EXPECT_THAT(ParseBandwidth("10").status().message(), HasSubstr("no unit"));
  EXPECT_THAT(ParseBandwidth("10Gb").status().message(), HasSubstr("unknown unit 'Gb'"));
  EXPECT_THAT(ParseBandwidth("fast").status().message(), HasSubstr("not a number"));
  EXPECT_THAT(ParseLatency("30").status().message(), HasSubstr("no unit"));
  EXPECT_THAT(ParseLatency("3h").status().message(), HasSubstr("unknown unit"));
}

struct BadCase {
  const char* yaml;
  const char* message;
};

TEST(Topology, BadInputNamesTheKey) {
  const BadCase cases[] = {
      {"", "empty"},
      {"[1, 2]", "must be a map"},
      {"links: []", "ranks: missing"},
      {"ranks: 0", "not a rank count"},
      {"ranks: 99999", "not a rank count"},
      {"ranks: [a, a]\ndefault: {bandwidth: 1Gbit}", "'a' is named twice"},
      {"ranks: [a, 'b c']", "ranks[1]"},
      {"ranks: [a, \"b\\xff\"]", "ranks[1]"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 1Gbit, bandwidth: 2Gbit}",
       "key 'bandwidth' is given twice"},
      {"ranks: [a, b]\nlinkz: []", "unknown key 'linkz'"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, c], bandwidth: 1Gbit}",
       "links[0].between[1]: 'c' is not a rank or switch"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 0Gbit}",
       "links[0].bandwidth: must be positive"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: -1Gbit}", "links[0].bandwidth"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 1Gbit, latency: -1ms}",
       "links[0].latency: must not be negative"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, b]}", "links[0].bandwidth: missing"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, a], bandwidth: 1Gbit}", "to itself"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 1Gbit}\n"
       "  - {from: b, to: a, bandwidth: 1Gbit}",
       "links[1]: a second link from 'b' to 'a'"},
      {"ranks: [a, b, c]\nlinks:\n  - {between: [a, b], bandwidth: 1Gbit}", "no path"},
      {"ranks: [a, b]\nlinks:\n  - {from: a, to: b, bandwidth: 1Gbit}", "no path"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 1Gbit, color: red}",
       "unknown key 'color'"},
      {"ranks: [a, b]\nlinks:\n  - {between: [a, b], from: a, bandwidth: 1Gbit}", "not both"},
      {"ranks: [a, b]\nlinks: {a: b}", "links: must be a list"},
      {"ranks: [a, b]\nlinks: [{between: [a, b], bandwidth: {x: 1}}]", "links[0].bandwidth"},
      {"ranks: [a, b\n", "YAML syntax"},
      {"ranks: 2\n---\nranks: 3\n", "second YAML document"},
      {", ranks: 2", "topology:1:1"},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<Topology> t = ParseTopology(c.yaml);
    ASSERT_FALSE(t.ok()) << c.yaml;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_THAT(t.status().message(), HasSubstr(c.message)) << c.yaml;
  }
}

TEST(Topology, ErrorsCarryLineAndColumn) {
  absl::StatusOr<Topology> t =
      ParseTopology("ranks: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 3furlongs}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("topology:3:"));
}

TEST(Topology, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "ranks: " + std::string(5000, '[') + std::string(5000, ']');
  EXPECT_FALSE(ParseTopology(deep).ok());
}

TEST(Topology, DigestIsStableAndSensitive) {
  const char* text = R"(
ranks: [eu, us, asia]
default: {bandwidth: 10Gbit, latency: 30ms}
)";
  Topology t = *ParseTopology(text);
  const uint64_t d = TopologyDigest(t);
  // A pinned value: the digest must not change across hosts or builds.
  EXPECT_EQ(d, TopologyDigest(*ParseTopology(text)));
  EXPECT_EQ(d, 0x032b2deab1d605b3ULL) << std::hex << d;
  // Independent of link order.
  Topology reversed = t;
  std::reverse(reversed.links.begin(), reversed.links.end());
  EXPECT_EQ(TopologyDigest(reversed), d);
  Topology slower = t;
  slower.links[2].bytes_per_second /= 4;
  EXPECT_NE(TopologyDigest(slower), d);
  Topology renamed = t;
  renamed.nodes[1] = "usa";
  EXPECT_NE(TopologyDigest(renamed), d);
  Topology later = t;
  later.links[0].latency_s = std::nextafter(later.links[0].latency_s, 1.0);
  EXPECT_NE(TopologyDigest(later), d);
}

TEST(Topology, YamlRoundTripIsExact) {
  Topology t = *ParseTopology(R"(
ranks: [eu, "us:east", asia]
switches: ["p1/spine[0]"]
default: {bandwidth: 3Gbit, latency: 33.3ms}
links:
  - {between: [eu, "p1/spine[0]"], bandwidth: 0.7GB/s, latency: 1.1us}
)");
  const std::string yaml = TopologyToYaml(t);
  absl::StatusOr<Topology> back = ParseTopology(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, t);
  EXPECT_EQ(TopologyToYaml(*back), yaml);
}

TEST(Topology, ValidateCatchesHandBuiltMistakes) {
  Topology t;
  t.nodes = {"a", "b"};
  t.ranks = 2;
  t.links = {{0, 1, 1e9, 0}, {1, 0, 1e9, 0}};
  EXPECT_TRUE(ValidateTopology(t).ok());
  Topology dup = t;
  dup.links.push_back({0, 1, 2e9, 0});
  EXPECT_THAT(ValidateTopology(dup).message(), HasSubstr("two links from 'a' to 'b'"));
  Topology nan = t;
  nan.links[0].bytes_per_second = std::nan("");
  EXPECT_FALSE(ValidateTopology(nan).ok());
  Topology unknown = t;
  unknown.links[0].dst = 7;
  EXPECT_FALSE(ValidateTopology(unknown).ok());
  Topology few = t;
  few.ranks = 3;
  EXPECT_FALSE(ValidateTopology(few).ok());
}

TEST(Topology, FromFabric) {
  absl::StatusOr<nuwa::Fabric> f =
      nuwa::LoadFabricFile(std::string(HEDDLE_FABRICS_DIR) + "/fat-tree-k4.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<Topology> t = TopologyFromFabric(*f, 1e9, 1e-6);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ranks, 16u);
  EXPECT_EQ(t->nodes.size(), 16u + 8 + 8 + 4);
  // k=4: 16 host links, 16 ToR-agg links, 16 agg-core links, both directions.
  EXPECT_EQ(t->links.size(), 2u * 48);
  EXPECT_DOUBLE_EQ(t->links[0].bytes_per_second, 100e9 / 8);  // link_gbps: 100
  EXPECT_DOUBLE_EQ(t->links[0].latency_s, 1e-6);
  EXPECT_TRUE(ValidateTopology(*t).ok());
  // Deterministic and round-trips through YAML.
  EXPECT_EQ(TopologyDigest(*TopologyFromFabric(*f, 1e9, 1e-6)), TopologyDigest(*t));
  EXPECT_EQ(*ParseTopology(TopologyToYaml(*t)), *t);
  EXPECT_FALSE(TopologyFromFabric(*f, 0, 1e-6).ok());
  EXPECT_FALSE(TopologyFromFabric(*f, 1e9, -1).ok());
}

TEST(Topology, FromFabricDropsFailedLinks) {
  absl::StatusOr<nuwa::Fabric> f =
      nuwa::LoadFabricFile(std::string(HEDDLE_FABRICS_DIR) + "/fat-tree-k4.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  const size_t all = TopologyFromFabric(*f, 1e9, 0)->links.size();
  f->failures.switches.push_back(nuwa::NodeRef{0, 3, 0});                 // a core switch: 4 links
  f->failures.links.push_back(nuwa::LinkRef{nuwa::NodeRef{0, 1, 0}, 0});  // a ToR uplink
  absl::StatusOr<Topology> t = TopologyFromFabric(*f, 1e9, 0);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->links.size(), all - 2 * 5);
  // The example's failures cut host[17] off (its only link): no topology to schedule on.
  absl::StatusOr<nuwa::Fabric> cut =
      nuwa::LoadFabricFile(std::string(HEDDLE_FABRICS_DIR) + "/fat-tree-k8-failures.yaml");
  ASSERT_TRUE(cut.ok()) << cut.status();
  absl::StatusOr<Topology> none = TopologyFromFabric(*cut, 1e9, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("host[17]"));
}

TEST(Topology, FromFabricRefusesTooManyHosts) {
  absl::StatusOr<nuwa::Fabric> f =
      nuwa::LoadFabricFile(std::string(HEDDLE_FABRICS_DIR) + "/fat-tree-k64.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<Topology> t = TopologyFromFabric(*f, 1e9, 0);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("at most 4096 ranks"));
}

}  // namespace
}  // namespace heddle::collective
