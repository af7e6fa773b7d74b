// File: dataplane/fwd/fwd_test_util.h
//
// Hand-built artifact specs for the fwd tests, the fuzz corpus and the benchmark, written without
// control/ (this layer must not depend on it): a shape, its address plan (digit fields packed
// a_1 lowest, each ceil(log2 m_j) bits wide) and host addresses. The tests' expectations come
// from Model, which enumerates labels in the documented numbering order instead of computing
// them arithmetically.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

#include "dataplane/fwd/artifact.h"

namespace heddle::fwd::testing {

inline ArtifactSpec MakeSpec(Role role, uint8_t tier, std::vector<uint32_t> m,
                             std::vector<uint32_t> w, uint8_t planes = 1, uint16_t rails = 0) {
  ArtifactSpec spec;
  spec.role = role;
  spec.tier = tier;
  spec.fabric_digest = 0x1234567890abcdefULL;
  spec.fabric_name = "test";
  spec.role_name = role == Role::kHost ? "host" : "tier" + std::to_string(tier);
  spec.shape.tiers = static_cast<uint8_t>(m.size());
  spec.shape.planes = planes;
  spec.shape.rails = rails;
  int shift = 0;
  for (size_t j = 1; j <= m.size(); ++j) {
    spec.shape.m[j] = m[j - 1];
    spec.shape.w[j] = w[j - 1];
    const int width = m[j - 1] <= 1 ? 1 : std::bit_width(m[j - 1] - 1);
    spec.addresses.width[j] = static_cast<uint8_t>(width);
    spec.addresses.shift[j] = static_cast<uint8_t>(shift);
    shift += width;
  }
  spec.addresses.ipv4_base = 10u << 24;  // 10.0.0.0/8
  spec.addresses.ipv4_prefix_len = 8;
  spec.addresses.has_ipv6 = true;
  spec.addresses.ipv6_base = {0xfd, 0x00, 0x00, 0x0a};  // fd00:a::/48
  spec.addresses.ipv6_prefix_len = 48;
  spec.hash.function = 2;
  spec.hash.seed_base = 7;
  spec.hash.bit_offset = {0, 0, 8, 16};
  return spec;
}

// k-ary fat tree: m = (k/2, k/2, k), w = (1, k/2, k/2).
inline ArtifactSpec FatTree(uint32_t k, Role role, uint8_t tier) {
  return MakeSpec(role, tier, {k / 2, k / 2, k}, {1, k / 2, k / 2});
}

// Labels in the documented numbering order (a_h outermost ... b_tier innermost), enumerated.
struct Label {
  std::array<uint32_t, 4> a{};
  std::array<uint32_t, 4> b{};
};

class Model {
 public:
  explicit Model(const ShapeSpec& s) : s_(s) {}

  std::vector<Label> Labels(int tier) const {
    std::vector<Label> out;
    Label l;
    Enumerate(tier, s_.tiers, l, out);
    return out;
  }
  uint32_t Hosts() const { return static_cast<uint32_t>(Labels(0).size()); }

 private:
  // Digits from the most significant: a_h .. a_{tier+1}, then b_1 .. b_tier.
  void Enumerate(int tier, int j, Label& l, std::vector<Label>& out) const {
    if (j > tier) {
      for (uint32_t x = 0; x < s_.m[j]; ++x) {
        l.a[j] = x;
        Enumerate(tier, j - 1, l, out);
      }
      return;
    }
    EnumerateB(tier, 1, l, out);
  }
  void EnumerateB(int tier, int j, Label& l, std::vector<Label>& out) const {
    if (j > tier) {
      out.push_back(l);
      return;
    }
    for (uint32_t x = 0; x < s_.w[j]; ++x) {
      l.b[j] = x;
      EnumerateB(tier, j + 1, l, out);
    }
  }
  ShapeSpec s_;
};

inline uint64_t PackDigits(const ArtifactSpec& spec, const std::array<uint32_t, 4>& a) {
  uint64_t v = 0;
  for (int j = 1; j <= spec.shape.tiers; ++j) v |= uint64_t{a[j]} << spec.addresses.shift[j];
  return v;
}

inline uint32_t Addr4(const ArtifactSpec& spec, const std::array<uint32_t, 4>& a) {
  return spec.addresses.ipv4_base | static_cast<uint32_t>(PackDigits(spec, a));
}

inline std::array<uint8_t, 16> Addr6(const ArtifactSpec& spec, const std::array<uint32_t, 4>& a) {
  std::array<uint8_t, 16> out = spec.addresses.ipv6_base;
  const uint64_t v = PackDigits(spec, a);
  for (int i = 0; i < 8; ++i) out[15 - i] |= static_cast<uint8_t>(v >> (8 * i));
  return out;
}

// ::ffff:a.b.c.d
inline std::array<uint8_t, 16> Mapped(uint32_t v4) {
  std::array<uint8_t, 16> out{};
  out[10] = out[11] = 0xff;
  out[12] = static_cast<uint8_t>(v4 >> 24);
  out[13] = static_cast<uint8_t>(v4 >> 16);
  out[14] = static_cast<uint8_t>(v4 >> 8);
  out[15] = static_cast<uint8_t>(v4);
  return out;
}

// A tier-1 switch artifact of a k=4 fat tree with every section populated.
inline ArtifactSpec RichSwitch() {
  ArtifactSpec spec = FatTree(4, Role::kSwitch, 1);
  spec.role_name = "tor";
  spec.node_masks = {{0, 1, {0, 0, 0b01, 0b11}}, {0, 5, {0, 0, 0b10, 0b10}}};
  spec.overrides = {
      {0, 1, 0, 3, {HopKind::kUp, 0, 0b10}},
      {0, 1, 1, 6, {HopKind::kUnreachable, 0, 0}},
      {0, 4, 1, 0, {HopKind::kDown, 1, 0}},
      {0, kAllNodes, 1, 5, {HopKind::kUnreachable, 0, 0}},
  };
  ClassSpec storage;
  storage.name = "storage";
  storage.prefix = Mapped(10u << 24 | 8);
  storage.prefix_len = 96 + 29;
  storage.max_paths = 2;
  storage.planes_mask = 1;
  storage.restrict_tier = 2;
  storage.allowed_up_mask = 0b01;
  ClassSpec all;
  all.name = "everything-else";
  all.prefix_len = 0;
  spec.classes = {storage, all};
  return spec;
}

inline ArtifactSpec RichHost() {
  ArtifactSpec spec = MakeSpec(Role::kHost, 0, {4, 8, 2}, {2, 4, 2}, /*planes=*/2, /*rails=*/4);
  spec.rail_local = true;
  spec.max_paths = 8;
  spec.entropy.by_lca[1] = {0xC000};
  spec.entropy.by_lca[2] = {0xC000, 0xC001, 0xC002};
  spec.entropy.by_lca[3] = {0xC000, 0xC001, 0xC002, 0xC003, 0xFFFFF};
  spec.node_masks = {{0, 2, {0, 0b1111, 0b1011, 0b1011}}};
  spec.overrides = {{0, 2, 0, 9, {HopKind::kUp, 0, 0b0100}}};
  // Host 5 unreachable from everywhere; group 3 lost its plane-0 port 1 beyond the ToR and has
  // two paths left per port at LCA tier 3.
  spec.dst_exceptions = {{0, 5, {0, 0, 0, 0}, {0, 0, 0, 0}},
                         {1, 3, {0, 0b1111, 0b1101, 0b1101}, {0, 1, 3, 2}}};
  ClassSpec c;
  c.name = "v6-storage";
  c.prefix = {0xfd, 0x00, 0x00, 0x0a};
  c.prefix_len = 60;
  c.max_paths = 3;
  c.planes_mask = 2;
  spec.classes = {c};
  return spec;
}

}  // namespace heddle::fwd::testing
