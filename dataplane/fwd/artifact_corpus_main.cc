// File: dataplane/fwd/artifact_corpus_main.cc
//
// Writes the seed corpus of the artifact fuzz target (tests/fuzz/corpus/fwd_artifact): valid
// artifacts of several shapes and roles, and broken ones (truncated, a flipped byte, out-of-range
// values behind valid checksums). Run it again after a format change:
//   build/dataplane/fwd/fwd_artifact_corpus tests/fuzz/corpus/fwd_artifact
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "dataplane/fwd/artifact.h"
#include "dataplane/fwd/fwd_test_util.h"

namespace {

using namespace heddle::fwd;

bool Write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& b) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, ArtifactSpec>> valid = {
      {"valid_rich_switch", testing::RichSwitch()},
      {"valid_rich_host", testing::RichHost()},
      {"valid_fat_tree_k4_tor", testing::FatTree(4, Role::kSwitch, 1)},
      {"valid_fat_tree_k8_agg", testing::FatTree(8, Role::kSwitch, 2)},
      {"valid_fat_tree_k8_core", testing::FatTree(8, Role::kSwitch, 3)},
      {"valid_fat_tree_k8_host", testing::FatTree(8, Role::kHost, 0)},
      {"valid_leaf_spine", testing::MakeSpec(Role::kSwitch, 1, {12, 10}, {1, 6})},
  };
  valid[5].second.entropy.by_lca[2] = {0xC000, 0xC001};
  valid[5].second.entropy.by_lca[3] = {0xC000, 0xC001, 0xC002, 0xC003};
  bool ok = true;
  for (const auto& [name, spec] : valid) ok &= Write(dir, name, Serialize(spec));
  const std::vector<uint8_t> rich = Serialize(testing::RichSwitch());
  ok &= Write(dir, "broken_truncated", std::vector<uint8_t>(rich.begin(), rich.begin() + 100));
  std::vector<uint8_t> flipped = rich;
  flipped[130] ^= 0x10;
  ok &= Write(dir, "broken_flipped", flipped);
  ok &= Write(dir, "broken_empty", {});
  ok &= Write(dir, "broken_header_only", std::vector<uint8_t>(rich.begin(), rich.begin() + 64));
  ArtifactSpec s = testing::RichSwitch();
  s.shape.m[1] = 0;
  ok &= Write(dir, "broken_shape_m0", Serialize(s));
  s = testing::RichSwitch();
  std::swap(s.overrides[0], s.overrides[1]);
  ok &= Write(dir, "broken_overrides_unsorted", Serialize(s));
  s = testing::RichHost();
  s.entropy.by_lca[3][0] = 0x100000;
  ok &= Write(dir, "broken_entropy_range", Serialize(s));
  s = testing::RichHost();
  s.version = 9;
  ok &= Write(dir, "broken_version", Serialize(s));
  s = testing::RichHost();
  s.version = 1;  // the format before DST_EXCEPTIONS and wildcards
  ok &= Write(dir, "broken_version_1", Serialize(s));
  s = testing::RichHost();
  std::swap(s.dst_exceptions[0], s.dst_exceptions[1]);
  ok &= Write(dir, "broken_dst_exceptions_unsorted", Serialize(s));
  s = testing::RichHost();
  s.dst_exceptions[1].paths[2] = 0;
  ok &= Write(dir, "broken_dst_exceptions_paths", Serialize(s));
  s = testing::RichHost();
  s.overrides.push_back({0, kAllNodes, 1, 2, {HopKind::kUnreachable, 0, 0}});
  ok &= Write(dir, "broken_host_wildcard", Serialize(s));
  s = testing::RichSwitch();
  s.overrides[3].hops = {HopKind::kUp, 0, 1};
  ok &= Write(dir, "broken_wildcard_kind", Serialize(s));
  s = testing::RichSwitch();
  s.dst_exceptions = {{1, 0, {0, 1, 1, 1}, {0, 1, 1, 1}}};
  ok &= Write(dir, "broken_switch_dst_exceptions", Serialize(s));
  // A switch artifact whose only overrides are wildcards, and a host artifact whose only
  // exception makes a group unreachable.
  s = testing::FatTree(8, Role::kSwitch, 2);
  s.overrides = {{0, kAllNodes, 0, 17, {HopKind::kUnreachable, 0, 0}},
                 {0, kAllNodes, 1, 9, {HopKind::kUnreachable, 0, 0}}};
  ok &= Write(dir, "valid_fat_tree_k8_agg_wildcards", Serialize(s));
  s = testing::FatTree(8, Role::kHost, 0);
  s.entropy.by_lca[3] = {0xC000, 0xC001, 0xC002, 0xC003};
  s.dst_exceptions = {{1, 9, {}, {}}};
  ok &= Write(dir, "valid_fat_tree_k8_host_dead_group", Serialize(s));
  if (!ok) {
    std::fprintf(stderr, "%s: cannot write the corpus\n", dir.c_str());
    return 1;
  }
  return 0;
}
