#include "dataplane/fwd/artifact.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "dataplane/fwd/crc32c.h"
#include "dataplane/fwd/fwd_test_util.h"

namespace heddle::fwd {
namespace {

using testing::FatTree;
using ::testing::HasSubstr;
using testing::MakeSpec;

using testing::RichHost;
using testing::RichSwitch;

// Recomputes both checksums after a test edits the bytes, so the edit reaches the validation
// behind them.
void Reseal(std::vector<uint8_t>& b) {
  auto put = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put(24, Crc32c(std::span<const uint8_t>(b).subspan(64)));
  put(28, 0);
  put(28, Crc32c(std::span<const uint8_t>(b.data(), 64)));
}

uint32_t Le32(const std::vector<uint8_t>& b, size_t at) {
  return b[at] | b[at + 1] << 8 | b[at + 2] << 16 | uint32_t{b[at + 3]} << 24;
}
void PutLe32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Where section `type` starts (directory entries are 16 bytes from offset 64).
size_t SectionOffset(const std::vector<uint8_t>& b, uint32_t type) {
  const uint32_t count = Le32(b, 12);
  for (uint32_t i = 0; i < count; ++i) {
    if (Le32(b, 64 + 16 * i) == type) return Le32(b, 64 + 16 * i + 8);
  }
  ADD_FAILURE() << "no section " << type;
  return 0;
}

TEST(Crc32cTest, CheckValueAndIncremental) {
  const std::string s = "123456789";
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  EXPECT_EQ(Crc32c(bytes), 0xE3069283u);
  EXPECT_EQ(Crc32c(bytes.subspan(4), Crc32c(bytes.subspan(0, 4))), 0xE3069283u);
  EXPECT_EQ(Crc32c({}), 0u);
  // 32 zero bytes: the RFC 3720 (iSCSI) test vector.
  const std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros), 0x8A9136AAu);
}

TEST(ArtifactTest, RoundTripsHandBuiltSpecs) {
  std::vector<ArtifactSpec> specs = {RichSwitch(),
                                     RichHost(),
                                     FatTree(8, Role::kSwitch, 2),
                                     FatTree(8, Role::kSwitch, 3),
                                     FatTree(4, Role::kHost, 0),
                                     MakeSpec(Role::kSwitch, 2, {16, 8}, {1, 4})};
  specs[2].node_masks = {{0, 15, {0, 0, 0, 0b0110}}};
  specs[2].overrides = {{0, 3, 0, 100, {HopKind::kDown, 2, 0}}};
  specs[4].entropy.by_lca[2] = {1, 2};
  specs[4].entropy.by_lca[3] = {1, 2, 3, 4};
  specs[5].addresses.has_ipv6 = false;
  specs[5].addresses.ipv6_base = {};
  for (const ArtifactSpec& spec : specs) {
    const std::vector<uint8_t> bytes = Serialize(spec);
    EXPECT_EQ(bytes.size() % 8, 0u);
    EXPECT_EQ(ArtifactChecksum(bytes), Crc32c(std::span<const uint8_t>(bytes).subspan(64)));
    absl::StatusOr<ArtifactSpec> back = Decode(bytes);
    ASSERT_TRUE(back.ok()) << spec.role_name << ": " << back.status();
    EXPECT_EQ(*back, spec) << spec.role_name;
    EXPECT_EQ(Serialize(*back), bytes);
  }
}

TEST(ArtifactTest, DeterministicAndSensitiveToEveryField) {
  const ArtifactSpec a = RichSwitch();
  EXPECT_EQ(Serialize(a), Serialize(RichSwitch()));
  std::vector<std::function<void(ArtifactSpec&)>> edits = {
      [](ArtifactSpec& s) { s.fabric_digest ^= 1; },
      [](ArtifactSpec& s) { s.fabric_name = "other"; },
      [](ArtifactSpec& s) { s.hash.seed_base = 8; },
      [](ArtifactSpec& s) { s.node_masks[1].up_mask[3] = 0b01; },
      [](ArtifactSpec& s) { s.overrides[0].dst = 2; },
      [](ArtifactSpec& s) { s.classes[0].name = "storagf"; },
      [](ArtifactSpec& s) { s.addresses.ipv6_base[5] = 1; },
      [](ArtifactSpec& s) { s.overrides[3].dst = 6; },
  };
  const std::vector<uint8_t> base = Serialize(a);
  for (size_t i = 0; i < edits.size(); ++i) {
    ArtifactSpec b = a;
    edits[i](b);
    EXPECT_NE(Serialize(b), base) << "edit " << i;
  }
}

TEST(ArtifactTest, EveryByteFlipIsRejected) {
  // The header carries its own checksum and the body checksum covers everything after it, so no
  // byte of the file is unchecked: every flip of every byte must fail.
  for (const ArtifactSpec& spec : {RichSwitch(), RichHost()}) {
    const std::vector<uint8_t> bytes = Serialize(spec);
    for (size_t i = 0; i < bytes.size(); ++i) {
      for (uint8_t flip : {0x01, 0x80, 0xff}) {
        std::vector<uint8_t> bad = bytes;
        bad[i] ^= flip;
        EXPECT_FALSE(Decode(bad).ok()) << "byte " << i << " ^ " << int{flip};
      }
    }
  }
}

TEST(ArtifactTest, EveryTruncationAndExtensionIsRejected) {
  const std::vector<uint8_t> bytes = Serialize(RichHost());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<ArtifactSpec> s = Decode(std::span<const uint8_t>(bytes.data(), n));
    EXPECT_FALSE(s.ok()) << n;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_THAT(Decode(longer).status().message(), HasSubstr("total length"));
  EXPECT_THAT(Decode(std::span<const uint8_t>(bytes.data(), 10)).status().message(),
              HasSubstr("64-byte header"));
}

TEST(ArtifactTest, RejectsWrongMagicVersionRoleAndTier) {
  const std::vector<uint8_t> good = Serialize(RichSwitch());
  {
    std::vector<uint8_t> b = good;
    b[7] = '2';
    Reseal(b);
    EXPECT_THAT(Decode(b).status().message(), HasSubstr("magic"));
  }
  {
    // Version 1 lacked DST_EXCEPTIONS and the wildcard node: refused, not misread.
    ArtifactSpec s = RichSwitch();
    s.version = 1;
    absl::Status st = Decode(Serialize(s)).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(st.message(), HasSubstr("format version 1; this build reads version 2"));
  }
  {
    std::vector<uint8_t> b = good;
    b[10] = 7;
    Reseal(b);
    EXPECT_THAT(Decode(b).status().message(), HasSubstr("role 7"));
  }
  {
    std::vector<uint8_t> b = good;
    b[10] = 0;  // a switch artifact relabelled as a host one: tier 1 is wrong for hosts
    Reseal(b);
    EXPECT_THAT(Decode(b).status().message(), HasSubstr("tier 1 for a host artifact"));
  }
  {
    ArtifactSpec s = RichSwitch();
    s.tier = 4;
    EXPECT_THAT(Decode(Serialize(s)).status().message(), HasSubstr("expected 1..3"));
  }
  {
    std::vector<uint8_t> b = good;
    b[45] = 1;
    Reseal(b);
    EXPECT_THAT(Decode(b).status().message(), HasSubstr("reserved bytes 40..63"));
  }
  {
    std::vector<uint8_t> b = good;
    b[100] ^= 1;  // body byte, checksums not updated
    EXPECT_EQ(Decode(b).status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(Decode(b).status().message(), HasSubstr("checksum"));
  }
}

TEST(ArtifactTest, RejectsBadDirectories) {
  const std::vector<uint8_t> good = Serialize(RichSwitch());
  struct Case {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> edit;
    const char* want;
  };
  const size_t shape_dir = 64;  // SHAPE is the first entry
  const std::vector<Case> cases = {
      {"unknown type", [&](auto& b) { PutLe32(b, shape_dir, 42); }, "unknown section type 42"},
      {"duplicate", [&](auto& b) { PutLe32(b, shape_dir + 16, 1); }, "SHAPE: listed twice"},
      {"misaligned", [&](auto& b) { PutLe32(b, shape_dir + 8, Le32(b, shape_dir + 8) + 4); },
       "8-byte aligned"},
      {"out of bounds",
       [&](auto& b) { PutLe32(b, shape_dir + 12, static_cast<uint32_t>(b.size())); }, "inside the"},
      {"huge length", [&](auto& b) { PutLe32(b, shape_dir + 12, 0xfffffff0u); }, "inside the"},
      {"inside the directory", [&](auto& b) { PutLe32(b, shape_dir + 8, 64); },
       "after the directory"},
      {"overlap",
       [&](auto& b) { PutLe32(b, shape_dir + 16 + 8, Le32(b, shape_dir + 8)); },  // ADDR = SHAPE
       "overlap"},
      {"count", [&](auto& b) { PutLe32(b, 12, 1000); }, "1000 sections"},
      {"missing", [&](auto& b) { PutLe32(b, 12, 7); },  // drop NAME, the last entry
       "NAME: missing"},
      {"reserved", [&](auto& b) { b[shape_dir + 5] = 1; }, "SHAPE: directory entry"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = good;
    c.edit(b);
    Reseal(b);
    absl::Status st = Decode(b).status();
    EXPECT_THAT(st.message(), HasSubstr(c.want)) << c.name << ": " << st;
  }
}

// Invalid values written through Serialize(): the checksums are right, the values are not.
TEST(ArtifactTest, RejectsOutOfRangeValuesNamingSectionAndField) {
  struct Case {
    const char* name;
    std::function<void(ArtifactSpec&)> edit;
    const char* want;
  };
  const std::vector<Case> cases = {
      {"tiers", [](auto& s) { s.shape.tiers = 4; }, "SHAPE: tiers 4"},
      {"tiers 1", [](auto& s) { s.shape.tiers = 1; }, "SHAPE: tiers 1"},
      {"m zero", [](auto& s) { s.shape.m[2] = 0; }, "SHAPE: m[2] = 0"},
      {"m big", [](auto& s) { s.shape.m[1] = 1025; }, "SHAPE: m[1] = 1025"},
      {"w big", [](auto& s) { s.shape.w[3] = 65; }, "SHAPE: w[3] = 65"},
      {"planes", [](auto& s) { s.shape.planes = 9; }, "SHAPE: planes 9"},
      {"planes zero", [](auto& s) { s.shape.planes = 0; }, "SHAPE: planes 0"},
      {"host ports", [](auto& s) { s.shape.planes = 8, s.shape.w[1] = 9; }, "host ports"},
      {"rails", [](auto& s) { s.shape.rails = 3; }, "SHAPE: rails 3"},
      {"m beyond tiers",
       [](auto& s) {
         s.shape.tiers = 2;
         s.shape.m[3] = 0;  // w[3] stays set
       },
       "SHAPE: m[3]/w[3] set beyond"},
      {"too many nodes",
       [](auto& s) {
         s.shape.m = {0, 1024, 1024, 64}, s.shape.w = {0, 64, 1, 1};
       },
       "nodes; at most"},
      {"width", [](auto& s) { s.addresses.width[2] = 2; }, "ADDR: width[2]/shift[2]"},
      {"shift", [](auto& s) { s.addresses.shift[3] = 3; }, "ADDR: width[3]/shift[3]"},
      {"v4 prefix", [](auto& s) { s.addresses.ipv4_prefix_len = 29; }, "ADDR: ipv4_prefix_len 29"},
      {"v4 host bits", [](auto& s) { s.addresses.ipv4_base |= 1; }, "ADDR: ipv4_base has bits"},
      {"v6 prefix", [](auto& s) { s.addresses.ipv6_prefix_len = 80; }, "ADDR: ipv6_prefix_len 80"},
      {"v6 host bits", [](auto& s) { s.addresses.ipv6_base[9] = 1; }, "ADDR: ipv6_base has bits"},
      {"hash fn", [](auto& s) { s.hash.function = 4; }, "HASH: function 4"},
      {"hash offset", [](auto& s) { s.hash.bit_offset[2] = 32; }, "HASH: bit_offset[2] = 32"},
      {"max paths", [](auto& s) { s.max_paths = 65; }, "CLASSES: max_paths 65"},
      {"rail_local without rails", [](auto& s) { s.rail_local = true; },
       "CLASSES: rail_local is set"},
      {"class prefix len", [](auto& s) { s.classes[0].prefix_len = 129; },
       "CLASSES: classes[0].prefix_len 129"},
      {"class host bits", [](auto& s) { s.classes[0].prefix[15] = 1; },
       "CLASSES: classes[0].prefix has bits"},
      {"class max paths", [](auto& s) { s.classes[1].max_paths = 100; },
       "CLASSES: classes[1].max_paths 100"},
      {"class planes", [](auto& s) { s.classes[0].planes_mask = 2; },
       "CLASSES: classes[0].planes_mask"},
      {"class tier", [](auto& s) { s.classes[0].restrict_tier = 1; },
       "CLASSES: classes[0].restrict_tier 1"},
      {"class mask", [](auto& s) { s.classes[0].allowed_up_mask = 0b100; },
       "CLASSES: classes[0].allowed_up_mask"},
      {"class mask empty", [](auto& s) { s.classes[0].allowed_up_mask = 0; },
       "CLASSES: classes[0].allowed_up_mask"},
      {"class name", [](auto& s) { s.classes[1].name = std::string(300, 'x'); },
       "CLASSES: classes[1]: name"},
      {"too many classes", [](auto& s) { s.classes.resize(65); }, "CLASSES: 65 classes"},
      {"mask plane", [](auto& s) { s.node_masks[0].plane = 1; }, "NODE_MASKS: node_masks[0].plane"},
      {"mask index", [](auto& s) { s.node_masks[1].index = 8; },
       "NODE_MASKS: node_masks[1].index 8"},
      {"mask bits", [](auto& s) { s.node_masks[0].up_mask[2] = 0b100; },
       "NODE_MASKS: node_masks[0].up_mask[2]"},
      {"mask own tier", [](auto& s) { s.node_masks[0].up_mask[1] = 1; },
       "NODE_MASKS: node_masks[0].up_mask[1]"},
      {"mask order", [](auto& s) { std::swap(s.node_masks[0], s.node_masks[1]); },
       "NODE_MASKS: node_masks[1] (plane 0, index 1) is not after"},
      {"mask duplicate", [](auto& s) { s.node_masks[1] = s.node_masks[0]; }, "sorted and unique"},
      {"override order", [](auto& s) { std::swap(s.overrides[0], s.overrides[2]); },
       "OVERRIDES: overrides[1]"},
      {"override duplicate", [](auto& s) { s.overrides[1] = s.overrides[0]; }, "sorted and unique"},
      {"override node", [](auto& s) { s.overrides[2].node = 8; }, "OVERRIDES: overrides[2].node 8"},
      {"override level", [](auto& s) { s.overrides[2].level = 2; },
       "OVERRIDES: overrides[2].level 2"},
      {"override host", [](auto& s) { s.overrides[0].dst = 16; }, "OVERRIDES: overrides[0].dst 16"},
      {"override group", [](auto& s) { s.overrides[1].dst = 8; }, "OVERRIDES: overrides[1].dst 8"},
      {"override port", [](auto& s) { s.overrides[2].hops.down_port = 2; },
       "OVERRIDES: overrides[2]: down port 2"},
      {"override up mask", [](auto& s) { s.overrides[0].hops.up_mask = 0b100; },
       "OVERRIDES: overrides[0]: up_mask"},
      {"override empty up", [](auto& s) { s.overrides[0].hops.up_mask = 0; },
       "OVERRIDES: overrides[0]: up_mask"},
      {"override kind", [](auto& s) { s.overrides[0].hops.kind = HopKind::kLocal; },
       "OVERRIDES: overrides[0].kind 4"},
      {"override unreachable", [](auto& s) { s.overrides[1].hops.down_port = 1; },
       "OVERRIDES: overrides[1]: unreachable"},
      {"switch entropy", [](auto& s) { s.entropy.by_lca[2] = {1}; }, "ENTROPY: by_lca[2]"},
      {"wildcard kind",
       [](auto& s) {
         s.overrides[3].hops = {HopKind::kUp, 0, 0b01};
       },
       "OVERRIDES: overrides[3].node 0xffffffff (every node) with kind 1"},
      {"wildcard order", [](auto& s) { std::swap(s.overrides[2], s.overrides[3]); },
       "OVERRIDES: overrides[3] (plane 0, node 4, level 1, dst 0) is not after"},
      {"wildcard group", [](auto& s) { s.overrides[3].dst = 8; }, "OVERRIDES: overrides[3].dst 8"},
      {"switch dst exceptions",
       [](auto& s) {
         s.dst_exceptions = {{1, 0, {0, 1, 1, 1}, {0, 1, 1, 1}}};
       },
       "DST_EXCEPTIONS: 1 entries in a switch artifact"},
      {"name", [](auto& s) { s.fabric_name = std::string(256, 'f'); }, "NAME: fabric/role"},
  };
  for (const Case& c : cases) {
    ArtifactSpec s = RichSwitch();
    c.edit(s);
    absl::Status st = Decode(Serialize(s)).status();
    EXPECT_FALSE(st.ok()) << c.name;
    EXPECT_THAT(st.message(), HasSubstr(c.want)) << c.name << ": " << st;
  }
  const std::vector<Case> host_cases = {
      {"entropy range", [](auto& s) { s.entropy.by_lca[3][1] = 0x100000; },
       "ENTROPY: by_lca[3][1] = 1048576"},
      {"entropy repeat", [](auto& s) { s.entropy.by_lca[2][2] = 0xC000; },
       "ENTROPY: by_lca[2][2] = 49152 repeats"},
      {"entropy lca 0", [](auto& s) { s.entropy.by_lca[0] = {1}; }, "ENTROPY: by_lca[0]"},
      {"entropy count", [](auto& s) { s.entropy.by_lca[2].resize(65); },
       "ENTROPY: by_lca[2] has 65"},
      {"host max paths", [](auto& s) { s.max_paths = 0; }, "CLASSES: max_paths 0"},
      {"host kDown",
       [](auto& s) {
         s.overrides[0].hops = {HopKind::kDown, 0, 0};
       },
       "OVERRIDES: overrides[0]: down port 0 (of 0)"},
      {"host port bits", [](auto& s) { s.node_masks[0].up_mask[3] = 1 << 4; },
       "NODE_MASKS: node_masks[0].up_mask[3]"},
      {"host plane", [](auto& s) { s.node_masks[0].plane = 1; }, "node_masks[0].plane 1"},
      {"host wildcard",
       [](auto& s) {
         s.overrides.push_back({0, kAllNodes, 0, 9, {HopKind::kUnreachable, 0, 0}});
       },
       "OVERRIDES: overrides[1].node 0xffffffff (every node) with kind 2 in a host artifact"},
      {"dst level", [](auto& s) { s.dst_exceptions[1].level = 2; },
       "DST_EXCEPTIONS: dst_exceptions[1].level 2"},
      {"dst host", [](auto& s) { s.dst_exceptions[0].dst = 64; },
       "DST_EXCEPTIONS: dst_exceptions[0].dst 64; level 0 has 64"},
      {"dst group", [](auto& s) { s.dst_exceptions[1].dst = 16; },
       "DST_EXCEPTIONS: dst_exceptions[1].dst 16; level 1 has 16"},
      {"dst port bits", [](auto& s) { s.dst_exceptions[1].ports[2] = 0b10000; },
       "DST_EXCEPTIONS: dst_exceptions[1].ports[2] = 0x10; allowed bits 0xf"},
      {"dst paths without ports", [](auto& s) { s.dst_exceptions[0].paths[3] = 1; },
       "DST_EXCEPTIONS: dst_exceptions[0].paths[3] = 1 with ports[3] = 0x0"},
      {"dst ports without paths", [](auto& s) { s.dst_exceptions[1].paths[2] = 0; },
       "DST_EXCEPTIONS: dst_exceptions[1].paths[2] = 0 with ports[2] = 0xd"},
      {"dst paths range", [](auto& s) { s.dst_exceptions[1].paths[1] = 65; },
       "DST_EXCEPTIONS: dst_exceptions[1].paths[1] = 65"},
      {"dst order", [](auto& s) { std::swap(s.dst_exceptions[0], s.dst_exceptions[1]); },
       "DST_EXCEPTIONS: dst_exceptions[1] (level 0, dst 5) is not after"},
      {"dst duplicate", [](auto& s) { s.dst_exceptions[1] = s.dst_exceptions[0]; },
       "DST_EXCEPTIONS: dst_exceptions[1] (level 0, dst 5) is not after"},
  };
  for (const Case& c : host_cases) {
    ArtifactSpec s = RichHost();
    c.edit(s);
    absl::Status st = Decode(Serialize(s)).status();
    EXPECT_THAT(st.message(), HasSubstr(c.want)) << c.name << ": " << st;
  }
}

TEST(ArtifactTest, RejectsNonZeroPaddingAndSectionLengths) {
  // NAME pads "test" + "tor" (7 bytes after the lengths) to 8.
  std::vector<uint8_t> b = Serialize(RichSwitch());
  const size_t name = SectionOffset(b, 8);
  b[name + 8 + 7] = 1;
  Reseal(b);
  EXPECT_THAT(Decode(b).status().message(), HasSubstr("NAME: padding"));

  b = Serialize(RichSwitch());
  const size_t masks = SectionOffset(b, 5);
  PutLe32(b, masks, 3);  // claims three masks, holds two
  Reseal(b);
  EXPECT_THAT(Decode(b).status().message(), HasSubstr("NODE_MASKS: length 88 does not hold 3"));

  b = Serialize(RichSwitch());
  const size_t classes = SectionOffset(b, 4);
  PutLe32(b, classes + 8 + 20, 1000);  // classes[0] name offset
  Reseal(b);
  EXPECT_THAT(Decode(b).status().message(), HasSubstr("classes[0]: name at 1000"));
}

TEST(ArtifactTest, ReadsFilesAndNamesThePath) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fwd_artifact_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tor.nuwa").string();
  const std::vector<uint8_t> bytes = Serialize(RichSwitch());
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  absl::StatusOr<ArtifactSpec> spec = ReadArtifactFile(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, RichSwitch());
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), 100);
  }
  EXPECT_THAT(ReadArtifactFile(path).status().message(), HasSubstr(path + ": artifact header"));
  EXPECT_THAT(ReadArtifactFile((dir / "missing").string()).status().message(),
              HasSubstr("cannot read " + (dir / "missing").string() + ": "));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace heddle::fwd
