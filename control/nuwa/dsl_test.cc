#include "control/nuwa/dsl.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::nuwa {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Example(const std::string& name) { return absl::StrCat(HEDDLE_FABRICS_DIR, "/", name); }

Fabric MustLoad(const std::string& name) {
  absl::StatusOr<Fabric> f = LoadFabricFile(Example(name));
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *f : Fabric{};
}

TEST(Dsl, EveryExampleParsesValidatesAndRoundTrips) {
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(HEDDLE_FABRICS_DIR)) {
    if (e.path().extension() != ".yaml") continue;
    ++count;
    SCOPED_TRACE(e.path().string());
    absl::StatusOr<Fabric> f = LoadFabricFile(e.path().string());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_TRUE(Validate(*f).ok()) << Validate(*f);
    const std::string canonical = FabricToYaml(*f);
    absl::StatusOr<Fabric> back = ParseFabricYaml(canonical, "canonical.yaml");
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << canonical;
    EXPECT_EQ(*back, *f) << canonical;
    EXPECT_EQ(FabricToYaml(*back), canonical);
  }
  EXPECT_GE(count, 7);
}

TEST(Dsl, FatTreeLowersToXgft) {
  const Fabric f = MustLoad("fat-tree-k4.yaml");
  EXPECT_EQ(f.name, "ft4");
  EXPECT_EQ(f.kind, Kind::kFatTree);
  EXPECT_EQ(f.shape.tiers, 3);
  EXPECT_EQ(f.shape.m, (std::array<uint32_t, 4>{0, 2, 2, 4}));
  EXPECT_EQ(f.shape.w, (std::array<uint32_t, 4>{0, 1, 2, 2}));
  EXPECT_EQ(NodeCount(f.shape, 0), 16u);
  EXPECT_EQ(NodeCount(f.shape, 3), 4u);
  EXPECT_EQ(f.tier_names, (std::array<std::string, 4>{"host", "tor", "agg", "core"}));
  EXPECT_EQ(f.link_gbps, (std::array<double, 4>{0, 100, 100, 100}));
  EXPECT_EQ(f.addresses.ipv4_base, 10u << 24);
  EXPECT_EQ(f.addresses.ipv4_prefix_len, 24);
  EXPECT_TRUE(f.addresses.has_ipv6);
  EXPECT_EQ(f.addresses.ipv6_prefix_len, 64);
  EXPECT_EQ(f.addresses.ipv6_base[1], 0x00);
  EXPECT_EQ(f.addresses.ipv6_base[0], 0xfd);
  EXPECT_EQ(f.addresses.ipv6_base[3], 0x04);
  EXPECT_EQ(f.hash.function, HashFunction::kCrc32);
  EXPECT_EQ(f.hash.seed_base, 0x2au);
  // Distinct default windows per tier (no polarization).
  EXPECT_EQ(f.hash.bit_offset, (std::array<uint8_t, 4>{0, 0, 6, 12}));
  EXPECT_EQ(f.routing.max_paths, 16u);
  EXPECT_EQ(HostIpv4(f.shape, f.addresses, 15), (10u << 24) | 0x0f);
}

TEST(Dsl, KindsLowerToTheirShapes) {
  const Fabric clos2 = MustLoad("leaf-spine.yaml");
  EXPECT_EQ(clos2.shape.tiers, 2);
  EXPECT_EQ(clos2.shape.m, (std::array<uint32_t, 4>{0, 32, 32, 0}));
  EXPECT_EQ(clos2.shape.w, (std::array<uint32_t, 4>{0, 1, 16, 0}));
  EXPECT_EQ(clos2.tier_names[1], "leaf");
  EXPECT_EQ(clos2.tier_names[3], "");

  const Fabric dual = MustLoad("clos3-dual-homed.yaml");
  EXPECT_EQ(dual.shape.m, (std::array<uint32_t, 4>{0, 24, 16, 8}));
  EXPECT_EQ(dual.shape.w, (std::array<uint32_t, 4>{0, 2, 4, 8}));
  EXPECT_EQ(UpPorts(dual.shape, 0), 2u);
  EXPECT_EQ(dual.tier_names[0], "server");
  EXPECT_EQ(dual.link_gbps, (std::array<double, 4>{0, 100, 400, 400}));
  EXPECT_EQ(dual.hash.bit_offset, (std::array<uint8_t, 4>{0, 0, 8, 16}));

  const Fabric rail = MustLoad("rail-2tier.yaml");
  EXPECT_EQ(rail.kind, Kind::kRailOptimized);
  EXPECT_EQ(rail.shape.tiers, 2);
  EXPECT_EQ(rail.shape.rails, 8u);
  EXPECT_EQ(rail.shape.m, (std::array<uint32_t, 4>{0, 16, 64, 0}));  // 8 SUs x 8 rails
  EXPECT_EQ(NodeCount(rail.shape, 0), 1024u);
  EXPECT_TRUE(rail.routing.rail_local);
  EXPECT_EQ(rail.routing.max_paths, 8u);

  const Fabric big = MustLoad("rail-32k-2planes.yaml");
  EXPECT_EQ(big.shape.tiers, 3);
  EXPECT_EQ(big.shape.planes, 2u);
  EXPECT_EQ(NodeCount(big.shape, 0), 32768u);
  EXPECT_EQ(NodeCount(big.shape, 1), 1024u);
  EXPECT_EQ(NodeCount(big.shape, 2), 512u);
  EXPECT_EQ(NodeCount(big.shape, 3), 512u);
  EXPECT_EQ(big.tier_names, (std::array<std::string, 4>{"host", "leaf", "spine", "core"}));

  const Fabric ft64 = MustLoad("fat-tree-k64.yaml");
  EXPECT_EQ(NodeCount(ft64.shape, 0), 65536u);
  EXPECT_EQ(ft64.link_gbps[3], 800);
}

TEST(Dsl, FailuresAndClassesResolveToLinksAndMasks) {
  const Fabric f = MustLoad("fat-tree-k8-failures.yaml");
  ASSERT_EQ(f.failures.links.size(), 3u);
  // "core[13]-agg[3]": named upper end first; the link is agg[3]'s up port to core[13].
  const LinkRef& l0 = f.failures.links[0];
  EXPECT_EQ(l0.lower, (NodeRef{0, 2, 3}));
  EXPECT_EQ(Parent(f.shape, l0.lower, l0.up_port), (NodeRef{0, 3, 13}));
  const LinkRef& l1 = f.failures.links[1];
  EXPECT_EQ(l1.lower, (NodeRef{0, 1, 9}));
  EXPECT_EQ(Parent(f.shape, l1.lower, l1.up_port), (NodeRef{0, 2, 10}));
  EXPECT_EQ(f.failures.links[2], (LinkRef{NodeRef{0, 0, 17}, 0}));
  ASSERT_EQ(f.failures.switches.size(), 1u);
  EXPECT_EQ(f.failures.switches[0], (NodeRef{0, 3, 14}));

  ASSERT_EQ(f.routing.classes.size(), 2u);
  const DestinationClass& storage = f.routing.classes[0];
  EXPECT_EQ(storage.name, "storage");
  EXPECT_EQ(storage.prefix_len, 96 + 28);
  EXPECT_EQ(storage.prefix[10], 0xff);
  EXPECT_EQ(storage.prefix[15], 48);
  EXPECT_EQ(storage.max_paths, 4u);
  EXPECT_EQ(storage.restrict_tier, 2);
  EXPECT_EQ(storage.allowed_up_mask, 0b11u);
  const DestinationClass& mgmt = f.routing.classes[1];
  EXPECT_EQ(mgmt.prefix_len, 128);
  EXPECT_EQ(mgmt.prefix[15], 0x7f);
  EXPECT_EQ(mgmt.restrict_tier, 0);
  EXPECT_EQ(mgmt.allowed_up_mask, ~uint64_t{0});
}

constexpr char kBase[] = R"(fabric:
  name: t
  kind: fat-tree
  k: 4
)";

TEST(Dsl, LinkNamesInEveryForm) {
  const std::string yaml = absl::StrCat(R"(fabric:
  name: t
  kind: clos2
  hosts_per_leaf: 4
  leaves: 4
  spines: 4
  host_uplinks: 2
  planes: 2
failures:
  links:
    - p1/leaf[3]-spine[6]
    - spine[5]-p0/leaf[1]
    - host[5]-p1/leaf[2]
    - 10.0.0.6-p0/leaf[3]
    - {node: "p1/leaf[0]", up_port: 3}
  switches: ["p1/spine[7]"]
)");
  absl::StatusOr<Fabric> f = ParseFabricYaml(yaml, "t.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  const auto& links = f->failures.links;
  ASSERT_EQ(links.size(), 5u);
  EXPECT_EQ(links[0].lower, (NodeRef{1, 1, 3}));
  EXPECT_EQ(Parent(f->shape, links[0].lower, links[0].up_port), (NodeRef{1, 2, 6}));
  EXPECT_EQ(Parent(f->shape, links[1].lower, links[1].up_port), (NodeRef{0, 2, 5}));
  EXPECT_EQ(links[2].lower, (NodeRef{0, 0, 5}));
  EXPECT_EQ(Parent(f->shape, links[2].lower, links[2].up_port), (NodeRef{1, 1, 2}));
  EXPECT_EQ(links[3].lower, (NodeRef{0, 0, 6}));
  EXPECT_EQ(Parent(f->shape, links[3].lower, links[3].up_port), (NodeRef{0, 1, 3}));
  EXPECT_EQ(links[4], (LinkRef{NodeRef{1, 1, 0}, 3}));
  EXPECT_EQ(f->failures.switches, (std::vector<NodeRef>{NodeRef{1, 2, 7}}));
  absl::StatusOr<Fabric> back = ParseFabricYaml(FabricToYaml(*f), "canonical.yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *f);
}

TEST(Dsl, ScalarAndMapFormsAgree) {
  absl::StatusOr<Fabric> a = ParseFabricYaml(absl::StrCat(kBase, R"(  link_gbps: 200
hash: {function: crc16, bit_offset: 3}
)"),
                                             "a.yaml");
  absl::StatusOr<Fabric> b =
      ParseFabricYaml(absl::StrCat(kBase, R"(  link_gbps: {tor: 200, agg: 200, core: 200}
hash: {function: crc16, bit_offset: {tor: 3, agg: 3, core: 3}}
)"),
                      "b.yaml");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->hash.bit_offset, (std::array<uint8_t, 4>{0, 3, 3, 3}));
}

TEST(Dsl, ViaIndexesAsListOrRanges) {
  auto mask = [](const std::string& indexes) -> uint64_t {
    absl::StatusOr<Fabric> f =
        ParseFabricYaml(absl::StrCat(R"(fabric: {name: t, kind: fat-tree, k: 16}
routing:
  classes:
    - {name: c, prefix: 10.0.0.0/16, via: {tier: core, indexes: )",
                                     indexes, "}}\n"),
                        "t.yaml");
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? f->routing.classes[0].allowed_up_mask : 0;
  };
  EXPECT_EQ(mask("\"0-3,6\""), 0b1001111u);
  EXPECT_EQ(mask("[0, 1, 2, 3, 6]"), 0b1001111u);
  EXPECT_EQ(mask("7"), 0b10000000u);
}

struct BadCase {
  std::string name;
  std::string yaml;
  int line;         // of the first problem
  std::string key;  // the key the first problem names
  std::string fragment;
};

std::vector<BadCase> BadCases() {
  const std::string base = kBase;
  std::string many_classes = base + "routing:\n  classes:\n";
  for (int i = 0; i < 33; ++i) {
    many_classes += "    - {name: c" + std::to_string(i) + ", prefix: 10.0.0." +
                    std::to_string(i) + "/32}\n";
  }
  return {
      {"too_many_classes", many_classes, 7, "routing.classes", "at most 32"},
      {"empty", "", 1, "fabric", "missing"},
      {"no_fabric", "routing: {max_paths: 4}\n", 1, "fabric", "missing"},
      {"unknown_top_key", base + "rooting: {}\n", 5, "rooting", "did you mean \"routing\""},
      {"unknown_fabric_key", base + "  plane: 2\n", 5, "fabric.plane", "did you mean \"planes\""},
      {"duplicate_key", base + "  k: 8\n", 5, "fabric.k", "appears twice"},
      {"missing_kind", "fabric:\n  name: t\n  k: 4\n", 2, "fabric.kind", "missing"},
      {"bad_kind", "fabric:\n  name: t\n  kind: fat_tree\n  k: 4\n", 3, "fabric.kind",
       "did you mean \"fat-tree\""},
      {"missing_name", "fabric:\n  kind: fat-tree\n  k: 4\n", 2, "fabric.name", "missing"},
      {"bad_name", "fabric:\n  name: a b\n  kind: fat-tree\n  k: 4\n", 2, "fabric.name",
       "not a valid name"},
      {"other_kinds_key", base + "  spines: 4\n", 5, "fabric.spines",
       "does not apply to kind fat-tree"},
      {"missing_param", "fabric:\n  name: t\n  kind: clos2\n  leaves: 4\n  spines: 2\n", 2,
       "fabric.hosts_per_leaf", "kind clos2 needs"},
      {"odd_k", "fabric:\n  name: t\n  kind: fat-tree\n  k: 5\n", 4, "fabric.k", "is odd"},
      {"k_too_big", "fabric:\n  name: t\n  kind: fat-tree\n  k: 130\n", 4, "fabric.k",
       "out of range; use an integer in 4..128"},
      {"not_integer", "fabric:\n  name: t\n  kind: fat-tree\n  k: four\n", 4, "fabric.k",
       "is not an integer"},
      {"negative",
       "fabric:\n  name: t\n  kind: clos2\n  hosts_per_leaf: -1\n  leaves: 4\n  spines: 2\n", 4,
       "fabric.hosts_per_leaf", "is negative"},
      {"fanout_too_big",
       "fabric:\n  name: t\n  kind: clos2\n  hosts_per_leaf: 4\n  leaves: 4\n  spines: 65\n", 6,
       "fabric.spines", "1..64"},
      {"planes_too_many", base + "  planes: 9\n", 5, "fabric.planes", "1..8"},
      {"rail_groups_without_cores",
       "fabric:\n  name: t\n  kind: rail-optimized\n  rails: 4\n  servers_per_su: 4\n"
       "  sus_per_group: 2\n  spines_per_group: 2\n  groups: 4\n",
       8, "fabric.groups", "set cores_per_spine"},
      {"rail_too_many_leaves",
       "fabric:\n  name: t\n  kind: rail-optimized\n  rails: 8\n  servers_per_su: 4\n"
       "  sus_per_group: 200\n  spines_per_group: 2\n",
       6, "fabric.sus_per_group", "1600 leaves per group"},
      {"too_many_nodes",
       "fabric:\n  name: t\n  kind: clos3\n  hosts_per_tor: 1024\n  tors_per_pod: 1024\n"
       "  pods: 64\n  aggs_per_pod: 2\n  cores_per_agg: 2\n",
       2, "fabric", "24 bits"},
      {"tier_names_length", base + "  tier_names: [host, tor, agg]\n", 5, "fabric.tier_names",
       "a list of 4 names"},
      {"tier_names_duplicate", base + "  tier_names: [host, tor, tor, core]\n", 5,
       "fabric.tier_names[2]", "names two tiers"},
      {"tier_names_invalid", base + "  tier_names: [host, tier1, agg, core]\n", 5,
       "fabric.tier_names[1]", "not a valid tier name"},
      {"link_gbps_not_number", base + "  link_gbps: fast\n", 5, "fabric.link_gbps", "not a number"},
      {"link_gbps_zero", base + "  link_gbps: 0\n", 5, "fabric.link_gbps", "out of range"},
      {"link_gbps_map_missing", base + "  link_gbps: {tor: 100, agg: 100}\n", 5,
       "fabric.link_gbps.core", "missing"},
      {"link_gbps_map_unknown", base + "  link_gbps: {tor: 100, agg: 100, cores: 1}\n", 5,
       "fabric.link_gbps.cores", "did you mean \"core\""},
      {"ipv4_not_cidr", base + "addressing:\n  ipv4: 10.0.0.0\n", 6, "addressing.ipv4",
       "no prefix length"},
      {"ipv4_host_bits", base + "addressing:\n  ipv4: 10.1.2.3/16\n", 6, "addressing.ipv4",
       "network address 10.1.0.0/16"},
      {"ipv4_no_room", base + "addressing:\n  ipv4: 10.0.0.0/30\n", 6, "addressing.ipv4",
       "need 4 bits"},
      {"ipv4_given_v6", base + "addressing:\n  ipv4: fd00::/48\n", 6, "addressing.ipv4",
       "put it under addressing.ipv6"},
      {"ipv6_too_long", base + "addressing:\n  ipv6: fd00::/96\n", 6, "addressing.ipv6",
       "use /64 or shorter"},
      {"ipv6_bad_address", base + "addressing:\n  ipv6: fd00:::1/48\n", 6, "addressing.ipv6",
       "not an IPv4 or IPv6 address"},
      {"hash_function", base + "hash:\n  function: crc33\n", 6, "hash.function",
       "did you mean \"crc32\""},
      {"hash_seed", base + "hash:\n  seed: 0x1ffffffff\n", 6, "hash.seed", "out of range"},
      {"bit_offset_crc16", base + "hash:\n  function: crc16\n  bit_offset: {agg: 16}\n", 7,
       "hash.bit_offset.agg", "0..15"},
      {"max_paths_zero", base + "routing:\n  max_paths: 0\n", 6, "routing.max_paths", "1..64"},
      {"rail_local_without_rails", base + "routing:\n  rail_local: true\n", 6, "routing.rail_local",
       "has no rails"},
      {"rail_local_not_bool", base + "routing:\n  rail_local: maybe\n", 6, "routing.rail_local",
       "not a boolean"},
      {"classes_not_list", base + "routing:\n  classes: {name: a}\n", 6, "routing.classes",
       "expected a list"},
      {"class_missing_prefix", base + "routing:\n  classes:\n    - name: a\n", 7,
       "routing.classes[0].prefix", "missing"},
      {"class_duplicate",
       base + "routing:\n  classes:\n    - {name: a, prefix: 10.0.0.0/28}\n"
              "    - {name: a, prefix: 10.0.0.16/28}\n",
       8, "routing.classes[1].name", "names two classes"},
      {"class_unknown_key",
       base + "routing:\n  classes:\n    - {name: a, prefix: 10.0.0.0/28, max_path: 2}\n", 7,
       "routing.classes[0].max_path", "did you mean \"max_paths\""},
      {"class_planes",
       base + "routing:\n  classes:\n    - {name: a, prefix: 10.0.0.0/28, "
              "planes: [1]}\n",
       7, "routing.classes[0].planes[0]", "0..0"},
      {"via_unknown_tier",
       base + "routing:\n  classes:\n    - name: a\n      prefix: 10.0.0.0/28\n"
              "      via: {tier: spine, indexes: \"0\"}\n",
       9, "routing.classes[0].via.tier", "not a tier of this fabric"},
      {"via_first_tier",
       base + "routing:\n  classes:\n    - name: a\n      prefix: 10.0.0.0/28\n"
              "      via: {tier: tor, indexes: \"0\"}\n",
       9, "routing.classes[0].via.tier", "cannot be restricted"},
      {"via_out_of_range",
       base + "routing:\n  classes:\n    - name: a\n      prefix: 10.0.0.0/28\n"
              "      via: {tier: core, indexes: \"0-2\"}\n",
       9, "routing.classes[0].via.indexes", "use indexes in 0..1"},
      {"via_garbage",
       base + "routing:\n  classes:\n    - name: a\n      prefix: 10.0.0.0/28\n"
              "      via: {tier: core, indexes: \"a-b\"}\n",
       9, "routing.classes[0].via.indexes", "not an index or a range"},
      {"link_not_adjacent", base + "failures:\n  links:\n    - agg[0]-core[3]\n", 7,
       "failures.links[0]",
       "agg[0] and core[3] are not linked; agg[0]'s core parents are "
       "core[0], core[1]"},
      {"link_same_tier", base + "failures:\n  links:\n    - agg[0]-agg[1]\n", 7,
       "failures.links[0]", "not in adjacent tiers"},
      {"link_unknown_tier", base + "failures:\n  links:\n    - agg[0]-spine[1]\n", 7,
       "failures.links[0]", "unknown tier 'spine'"},
      {"link_index_range", base + "failures:\n  links:\n    - tor[8]-agg[1]\n", 7,
       "failures.links[0]", "index 8 out of range"},
      {"link_not_a_link", base + "failures:\n  links:\n    - agg[0]\n", 7, "failures.links[0]",
       "is not a link"},
      {"link_duplicate", base + "failures:\n  links:\n    - tor[0]-agg[0]\n    - agg[0]-tor[0]\n",
       8, "failures.links[1]", "the same link as failures.links[0]"},
      {"link_up_port", base + "failures:\n  links:\n    - {node: \"tor[0]\", up_port: 2}\n", 7,
       "failures.links[0].up_port", "0..1"},
      {"link_top_tier", base + "failures:\n  links:\n    - {node: \"core[0]\", up_port: 0}\n", 7,
       "failures.links[0].node", "top tier"},
      {"switch_is_host", base + "failures:\n  switches: [\"host[3]\"]\n", 6, "failures.switches[0]",
       "is a host"},
      {"switch_needs_plane", base + "  planes: 2\nfailures:\n  switches: [\"agg[3]\"]\n", 7,
       "failures.switches[0]", "name the plane, e.g. p0/agg[3]"},
      {"syntax", base + "routing:\n  max_paths: [1\n", 7, "", "YAML syntax error"},
      {"two_documents", base + "---\nfabric: {}\n", 5, "(top level)", "second YAML document"},
      {"stray_comma", ", fabric: {}\n", 1, "", "YAML syntax error"},
  };
}

class DslBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(DslBad, NamesLineKeyAndProblem) {
  const BadCase& c = GetParam();
  absl::StatusOr<Fabric> f = ParseFabricYaml(c.yaml, "t.yaml");
  ASSERT_FALSE(f.ok()) << c.yaml;
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string first(
      std::vector<std::string>(absl::StrSplit(f.status().message(), '\n')).front());
  EXPECT_THAT(first, StartsWith(absl::StrCat("t.yaml:", c.line, ":"))) << f.status();
  if (!c.key.empty()) {
    EXPECT_THAT(first, HasSubstr(absl::StrCat(": ", c.key, ": "))) << first;
  }
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.fragment));
}

INSTANTIATE_TEST_SUITE_P(Cases, DslBad, ::testing::ValuesIn(BadCases()),
                         [](const auto& info) { return info.param.name; });

TEST(Dsl, ReportsEveryProblemOnItsOwnLine) {
  absl::StatusOr<Fabric> f = ParseFabricYaml(R"(fabric:
  name: t
  kind: clos2
  hosts_per_leaf: 0
  leaves: x
  spines: 2
  colour: blue
)",
                                             "t.yaml");
  ASSERT_FALSE(f.ok());
  const std::vector<std::string> lines = absl::StrSplit(f.status().message(), '\n');
  ASSERT_EQ(lines.size(), 3u) << f.status();
  EXPECT_THAT(lines[0], StartsWith("t.yaml:7:3: fabric.colour: unknown key"));
  EXPECT_THAT(lines[1], StartsWith("t.yaml:4:19: fabric.hosts_per_leaf: 0 is out of range"));
  EXPECT_THAT(lines[2], StartsWith("t.yaml:5:11: fabric.leaves: \"x\" is not an integer"));
}

TEST(Dsl, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "fabric: ";
  for (int i = 0; i < 100000; ++i) deep += "[";
  EXPECT_FALSE(ParseFabricYaml(deep, "deep.yaml").ok());
}

TEST(Dsl, MissingFileNamesThePath) {
  absl::StatusOr<Fabric> f = LoadFabricFile("/nonexistent/fabric.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("/nonexistent/fabric.yaml"));
}

TEST(Dsl, CanonicalFormIsExplicit) {
  absl::StatusOr<Fabric> f = ParseFabricYaml(kBase, "t.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string y = FabricToYaml(*f);
  for (const char* s :
       {"kind: fat-tree", "k: 4", "planes: 1", "tier_names: [host, tor, agg, core]",
        "link_gbps: 400", "ipv4: 10.0.0.0/8", "function: unknown",
        "bit_offset: {tor: 0, agg: 6, core: 12}", "max_paths: 16", "rail_local: false"}) {
    EXPECT_THAT(y, HasSubstr(s)) << y;
  }
}

}  // namespace
}  // namespace heddle::nuwa
