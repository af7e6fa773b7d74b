// SwitchTable and HostTable against an expectation computed here by walking enumerated labels
// (fwd_test_util.h Model): which a-digits differ, the node's masks, the first matching class, the
// node's overrides, for every (node, destination) pair of small fabrics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "dataplane/fwd/artifact.h"
#include "dataplane/fwd/fwd_test_util.h"

namespace heddle::fwd {
namespace {

using testing::Addr4;
using testing::Addr6;
using testing::FatTree;
using ::testing::HasSubstr;
using testing::Label;
using testing::MakeSpec;
using testing::Mapped;
using testing::Model;

std::string Str(const NextHops& h) {
  return "{kind " + std::to_string(static_cast<int>(h.kind)) + " down " +
         std::to_string(h.down_port) + " up " + std::to_string(h.up_mask) + "}";
}

// Bit i of a 16-byte address, most significant first.
bool Bit(const std::array<uint8_t, 16>& a, int i) { return a[i / 8] >> (7 - i % 8) & 1; }
bool InPrefix(const std::array<uint8_t, 16>& addr, const std::array<uint8_t, 16>& prefix, int len) {
  for (int i = 0; i < len; ++i) {
    if (Bit(addr, i) != Bit(prefix, i)) return false;
  }
  return true;
}
int FirstClass(const ArtifactSpec& spec, const std::array<uint8_t, 16>& addr) {
  for (size_t i = 0; i < spec.classes.size(); ++i) {
    if (InPrefix(addr, spec.classes[i].prefix, spec.classes[i].prefix_len))
      return static_cast<int>(i);
  }
  return -1;
}

// What a switch should do, from the labels.
NextHops ExpectSwitch(const ArtifactSpec& spec, uint8_t plane, uint32_t node, const Label& self,
                      uint32_t dst_index, const Label& dst, const std::array<uint8_t, 16>& addr) {
  const int t = spec.tier;
  for (uint8_t level : {0, 1}) {
    const uint32_t key = level == 0 ? dst_index : dst_index / spec.shape.m[1];
    // The node's own override, else the plane's wildcard.
    for (const uint32_t who : {node, kAllNodes}) {
      for (const OverrideSpec& o : spec.overrides) {
        if (o.plane == plane && o.node == who && o.level == level && o.dst == key) {
          // A tier-1 group override going down: the destination's own port.
          if (level == 1 && t == 1 && o.hops.kind == HopKind::kDown) {
            return NextHops{HopKind::kDown, static_cast<uint16_t>(dst.a[1]), 0};
          }
          return o.hops;
        }
      }
    }
  }
  int lca = 0;
  for (int j = t + 1; j <= spec.shape.tiers; ++j) {
    if (dst.a[j] != self.a[j]) lca = j;
  }
  if (lca == 0) return NextHops{HopKind::kDown, static_cast<uint16_t>(dst.a[t]), 0};
  uint64_t up = (uint64_t{1} << spec.shape.w[t + 1]) - 1;
  for (const NodeMaskSpec& m : spec.node_masks) {
    if (m.plane == plane && m.index == node) up = m.up_mask[lca];
  }
  const int cls = FirstClass(spec, addr);
  if (cls >= 0 && spec.classes[cls].restrict_tier == t + 1) up &= spec.classes[cls].allowed_up_mask;
  if (up == 0) return NextHops{HopKind::kUnreachable, 0, 0};
  return NextHops{HopKind::kUp, 0, up};
}

// Checks every node of the artifact's tier against every host, IPv4 (single and bulk) and IPv6.
void CheckSwitches(const ArtifactSpec& spec, int* checked = nullptr) {
  const Model model(spec.shape);
  const std::vector<Label> nodes = model.Labels(spec.tier);
  const std::vector<Label> hosts = model.Labels(0);
  std::vector<uint32_t> addrs;
  for (const Label& h : hosts) addrs.push_back(Addr4(spec, h.a));
  std::vector<NextHops> bulk(addrs.size());
  for (uint8_t plane = 0; plane < spec.shape.planes; ++plane) {
    for (uint32_t n = 0; n < nodes.size(); ++n) {
      absl::StatusOr<SwitchTable> t = SwitchTable::Build(spec, plane, n);
      ASSERT_TRUE(t.ok()) << t.status();
      t->LookupBulk4(addrs.data(), bulk.data(), addrs.size());
      for (uint32_t d = 0; d < hosts.size(); ++d) {
        const NextHops want4 =
            ExpectSwitch(spec, plane, n, nodes[n], d, hosts[d], Mapped(addrs[d]));
        ASSERT_EQ(t->Lookup4(addrs[d]), want4)
            << "tier " << int{spec.tier} << " node " << n << " dst " << d << ": got "
            << Str(t->Lookup4(addrs[d])) << " want " << Str(want4);
        ASSERT_EQ(bulk[d], want4) << "bulk: node " << n << " dst " << d;
        if (spec.addresses.has_ipv6) {
          const std::array<uint8_t, 16> a6 = Addr6(spec, hosts[d].a);
          ASSERT_EQ(t->Lookup6(a6.data()), ExpectSwitch(spec, plane, n, nodes[n], d, hosts[d], a6))
              << "v6: node " << n << " dst " << d;
        }
        if (checked) ++*checked;
      }
    }
  }
}

TEST(SwitchTableTest, FailureFreeFatTrees) {
  for (uint32_t k : {4u, 8u}) {
    for (uint8_t tier = 1; tier <= 3; ++tier) {
      SCOPED_TRACE("k=" + std::to_string(k) + " tier " + std::to_string(tier));
      const ArtifactSpec spec = FatTree(k, Role::kSwitch, tier);
      int checked = 0;
      CheckSwitches(spec, &checked);
      const uint64_t nodes = tier == 3 ? k * k / 4 : k * k / 2;
      EXPECT_EQ(checked, static_cast<int>(nodes * k * k * k / 4));
    }
  }
}

TEST(SwitchTableTest, FatTreeK4ByHand) {
  // k=4: hosts 0..15 are pod-major, 2 per ToR; ToR 0 (pod 0) holds hosts 0 and 1.
  const ArtifactSpec spec = FatTree(4, Role::kSwitch, 1);
  absl::StatusOr<SwitchTable> tor0 = SwitchTable::Build(spec, 0, 0);
  ASSERT_TRUE(tor0.ok());
  EXPECT_EQ(tor0->Lookup4(10u << 24 | 1), (NextHops{HopKind::kDown, 1, 0}));   // host 1
  EXPECT_EQ(tor0->Lookup4(10u << 24 | 2), (NextHops{HopKind::kUp, 0, 0b11}));  // host 2, pod 0
  EXPECT_EQ(tor0->Lookup4(10u << 24 | 15), (NextHops{HopKind::kUp, 0, 0b11}));
  const ArtifactSpec core_spec = FatTree(4, Role::kSwitch, 3);
  absl::StatusOr<SwitchTable> core = SwitchTable::Build(core_spec, 0, 3);
  ASSERT_TRUE(core.ok());
  EXPECT_EQ(core->Lookup4(10u << 24 | 13), (NextHops{HopKind::kDown, 3, 0}));  // pod 3
}

TEST(SwitchTableTest, LeafSpineWithNonPowerOfTwoFanouts) {
  // 10 leaves of 12 hosts, 6 spines: digit values 12..15 and 10..15 are no hosts.
  ArtifactSpec leaf = MakeSpec(Role::kSwitch, 1, {12, 10}, {1, 6});
  CheckSwitches(leaf);
  ArtifactSpec spine = MakeSpec(Role::kSwitch, 2, {12, 10}, {1, 6});
  CheckSwitches(spine);
  absl::StatusOr<SwitchTable> t = SwitchTable::Build(leaf, 0, 3);
  ASSERT_TRUE(t.ok());
  const uint32_t base = 10u << 24;
  EXPECT_EQ(t->Lookup4(base | 3 << 4 | 12).kind, HopKind::kNotInFabric);      // a_1 = 12
  EXPECT_EQ(t->Lookup4(base | 10 << 4 | 1).kind, HopKind::kNotInFabric);      // a_2 = 10
  EXPECT_EQ(t->Lookup4(base | 1 << 8 | 3 << 4).kind, HopKind::kNotInFabric);  // bit above fields
  EXPECT_EQ(t->Lookup4(11u << 24 | 3 << 4).kind, HopKind::kNotInFabric);      // other prefix
  EXPECT_EQ(t->Lookup4(base | 3 << 4 | 11), (NextHops{HopKind::kDown, 11, 0}));
  EXPECT_EQ(t->Lookup4(base | 9 << 4 | 11), (NextHops{HopKind::kUp, 0, 0b111111}));
  uint32_t dst[4] = {base | 3 << 4 | 12, base | 3 << 4 | 2, 0, base | 2 << 4};
  NextHops out[4];
  t->LookupBulk4(dst, out, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], t->Lookup4(dst[i])) << i;
  // IPv6: outside the prefix, bits between the /48 and the fields, a v6-less artifact.
  std::array<uint8_t, 16> a6 = Addr6(leaf, {0, 2, 3});
  EXPECT_EQ(t->Lookup6(a6.data()), (NextHops{HopKind::kDown, 2, 0}));
  a6[7] = 1;
  EXPECT_EQ(t->Lookup6(a6.data()).kind, HopKind::kNotInFabric);
  a6 = Addr6(leaf, {0, 2, 3});
  a6[2] = 1;
  EXPECT_EQ(t->Lookup6(a6.data()).kind, HopKind::kNotInFabric);
  leaf.addresses.has_ipv6 = false;
  absl::StatusOr<SwitchTable> v4only = SwitchTable::Build(leaf, 0, 3);
  ASSERT_TRUE(v4only.ok());
  a6 = Addr6(leaf, {0, 2, 3});
  EXPECT_EQ(v4only->Lookup6(a6.data()).kind, HopKind::kNotInFabric);
}

// Random masks, overrides and classes on a k=8 fat tree (and two planes), every tier.
TEST(SwitchTableTest, MasksOverridesAndClasses) {
  std::mt19937 rng(11);
  for (int round = 0; round < 6; ++round) {
    for (uint8_t tier = 1; tier <= 3; ++tier) {
      ArtifactSpec spec = FatTree(8, Role::kSwitch, tier);
      spec.shape.planes = round % 2 ? 2 : 1;
      const Model model(spec.shape);
      const uint32_t nodes = static_cast<uint32_t>(model.Labels(tier).size());
      const uint32_t hosts = model.Hosts();
      const uint64_t all_up = tier < 3 ? (uint64_t{1} << spec.shape.w[tier + 1]) - 1 : 0;
      for (uint8_t plane = 0; plane < spec.shape.planes; ++plane) {
        for (uint32_t n = 0; n < nodes; ++n) {
          if (tier < 3 && rng() % 3 == 0) {
            NodeMaskSpec m{plane, n, {}};
            for (int l = tier + 1; l <= 3; ++l) m.up_mask[l] = rng() & all_up;
            spec.node_masks.push_back(m);
          }
          if (rng() % 2 == 0) {
            for (int i = 0; i < 1 + static_cast<int>(rng() % 6); ++i) {
              OverrideSpec o;
              o.plane = plane;
              o.node = n;
              o.level = rng() % 2;
              o.dst = rng() % (o.level == 0 ? hosts : hosts / spec.shape.m[1]);
              const int kind = rng() % 3;
              if (kind == 0)
                o.hops = {HopKind::kDown, static_cast<uint16_t>(rng() % spec.shape.m[tier]), 0};
              if (kind == 1 && all_up) o.hops = {HopKind::kUp, 0, (rng() & all_up) | 1};
              if (kind == 2 || (kind == 1 && !all_up)) o.hops = {HopKind::kUnreachable, 0, 0};
              spec.overrides.push_back(o);
            }
          }
        }
      }
      // Wildcards: some destinations unreachable from every node of the plane without an entry.
      for (uint8_t plane = 0; plane < spec.shape.planes; ++plane) {
        for (int i = 0; i < 6; ++i) {
          OverrideSpec o;
          o.plane = plane;
          o.node = kAllNodes;
          o.level = rng() % 2;
          o.dst = rng() % (o.level == 0 ? hosts : hosts / spec.shape.m[1]);
          o.hops.kind = HopKind::kUnreachable;
          spec.overrides.push_back(o);
        }
      }
      std::sort(spec.overrides.begin(), spec.overrides.end(), [](const auto& x, const auto& y) {
        return std::tie(x.plane, x.node, x.level, x.dst) <
               std::tie(y.plane, y.node, y.level, y.dst);
      });
      spec.overrides.erase(std::unique(spec.overrides.begin(), spec.overrides.end(),
                                       [](const auto& x, const auto& y) {
                                         return std::tie(x.plane, x.node, x.level, x.dst) ==
                                                std::tie(y.plane, y.node, y.level, y.dst);
                                       }),
                           spec.overrides.end());
      // Classes: pod 1 via aggregation b_2 = 2 only; hosts 64..71 (pod 4's first half) via cores
      // b_3 in {1, 3}; an IPv6-only class restricting tier 2 for the whole fabric; a later
      // catch-all that must never restrict anything (the first match wins).
      ClassSpec pod1{"pod1", Mapped(10u << 24 | 1 << 4), 96 + 28, 0, 0, 2, 0b0100};
      ClassSpec half{"half", Mapped(10u << 24 | 4 << 4), 96 + 29, 0, 0, 3, 0b1010};
      ClassSpec v6{"v6", spec.addresses.ipv6_base, 48, 0, 0, 2, 0b0001};
      ClassSpec all{"all", {}, 0, 0, 0, 3, 0b0001};
      spec.classes = {pod1, half, v6, all};
      ASSERT_TRUE(Decode(Serialize(spec)).ok()) << Decode(Serialize(spec)).status();
      SCOPED_TRACE("round " + std::to_string(round) + " tier " + std::to_string(tier));
      CheckSwitches(spec);
    }
  }
}

// LookupBulk4 runs a vector form on CPUs that have one; Lookup4 runs the scalar form. Random
// addresses (in the fabric, outside it, invalid digits) and every burst length up to 40, so the
// vector body and the scalar tail both run, must give the same answers.
TEST(SwitchTableTest, BulkEqualsSingleOnRandomAddresses) {
  std::mt19937 rng(5);
  for (const ArtifactSpec& spec :
       {FatTree(8, Role::kSwitch, 1), FatTree(8, Role::kSwitch, 2), FatTree(8, Role::kSwitch, 3),
        MakeSpec(Role::kSwitch, 1, {12, 10}, {1, 6}),
        MakeSpec(Role::kSwitch, 2, {5, 3, 7}, {1, 3, 2})}) {
    const uint32_t nodes = static_cast<uint32_t>(Model(spec.shape).Labels(spec.tier).size());
    for (uint32_t node : {0u, nodes / 2, nodes - 1}) {
      absl::StatusOr<SwitchTable> t = SwitchTable::Build(spec, 0, node);
      ASSERT_TRUE(t.ok());
      for (size_t n = 0; n <= 40; ++n) {
        std::vector<uint32_t> dst(n);
        for (uint32_t& d : dst) {
          const uint32_t r = rng();
          d = r % 4 == 0 ? r : (10u << 24) | (r % 4 == 1 ? r & 0xffff : r & 0x3ff);
        }
        std::vector<NextHops> out(n + 1);
        out[n] = NextHops{HopKind::kLocal, 7, 7};  // must stay untouched
        t->LookupBulk4(dst.data(), out.data(), n);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(out[i], t->Lookup4(dst[i])) << "n " << n << " i " << i << " dst " << dst[i];
        }
        ASSERT_EQ(out[n], (NextHops{HopKind::kLocal, 7, 7}));
      }
    }
  }
}

TEST(SwitchTableTest, BuildRejectsWrongNodes) {
  const ArtifactSpec spec = FatTree(4, Role::kSwitch, 2);
  EXPECT_THAT(SwitchTable::Build(spec, 1, 0).status().message(), HasSubstr("plane 1"));
  EXPECT_THAT(SwitchTable::Build(spec, 0, 8).status().message(), HasSubstr("index 8"));
  EXPECT_THAT(SwitchTable::Build(FatTree(4, Role::kHost, 0), 0, 0).status().message(),
              HasSubstr("host artifact"));
  EXPECT_THAT(HostTable::Build(spec, 0).status().message(), HasSubstr("switch artifact"));
  EXPECT_THAT(HostTable::Build(FatTree(4, Role::kHost, 0), 16).status().message(),
              HasSubstr("host 16"));
}

TEST(SwitchTableTest, MemoryIsSmall) {
  ArtifactSpec spec = FatTree(64, Role::kSwitch, 1);
  absl::StatusOr<SwitchTable> t = SwitchTable::Build(spec, 0, 100);
  ASSERT_TRUE(t.ok());
  EXPECT_LT(t->memory_bytes(), 512u);
  spec.overrides = {{0, 100, 0, 5, {HopKind::kUnreachable, 0, 0}}};
  t = SwitchTable::Build(spec, 0, 100);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Lookup4(Addr4(spec, {0, 5, 0, 0})).kind, HopKind::kUnreachable);
  EXPECT_EQ(t->Lookup4(Addr4(spec, {0, 6, 0, 0})).kind, HopKind::kUp);
  EXPECT_LT(t->memory_bytes(), 1024u);
}

// ---- Hosts -----------------------------------------------------------------------------------
std::array<uint8_t, 6> ExpectMac(const ArtifactSpec& spec, const Model& model, const Label& host,
                                 uint32_t port) {
  const std::vector<Label> tors = model.Labels(1);
  const uint32_t w1 = spec.shape.w[1];
  for (uint32_t i = 0; i < tors.size(); ++i) {
    bool same = tors[i].b[1] == port % w1;
    for (int j = 2; j <= spec.shape.tiers; ++j) same = same && tors[i].a[j] == host.a[j];
    if (same) {
      return {0x02,
              static_cast<uint8_t>(port / w1),
              0x01,
              static_cast<uint8_t>(i >> 16),
              static_cast<uint8_t>(i >> 8),
              static_cast<uint8_t>(i)};
    }
  }
  ADD_FAILURE() << "no tor above port " << port;
  return {};
}

std::vector<HostPath> ExpectPaths(const ArtifactSpec& spec, const Model& model, uint32_t self,
                                  uint32_t dst, const std::array<uint8_t, 16>& addr, uint32_t cap,
                                  HopKind* kind) {
  const std::vector<Label> hosts = model.Labels(0);
  const Label& a = hosts[self];
  const Label& b = hosts[dst];
  if (self == dst) {
    *kind = HopKind::kLocal;
    return {};
  }
  if (spec.rail_local && a.a[2] % spec.shape.rails != b.a[2] % spec.shape.rails) {
    *kind = HopKind::kUnreachable;
    return {};
  }
  int lca = 0;
  for (int j = 1; j <= spec.shape.tiers; ++j) {
    if (a.a[j] != b.a[j]) lca = j;
  }
  const uint32_t nports = spec.shape.planes * spec.shape.w[1];
  std::vector<bool> allowed(nports, true);
  for (const NodeMaskSpec& m : spec.node_masks) {
    if (m.index == self) {
      for (uint32_t p = 0; p < nports; ++p) allowed[p] = m.up_mask[lca] >> p & 1;
    }
  }
  // The destination's exception (host first, then its group): fewer ports, fewer entropies.
  size_t entropy_cap = kMaxHostPaths;
  for (uint8_t level : {0, 1}) {
    const uint32_t key = level == 0 ? dst : dst / spec.shape.m[1];
    const DstExceptionSpec* found = nullptr;
    for (const DstExceptionSpec& e : spec.dst_exceptions) {
      if (e.level == level && e.dst == key) found = &e;
    }
    if (found) {
      for (uint32_t p = 0; p < nports; ++p) allowed[p] = allowed[p] && (found->ports[lca] >> p & 1);
      entropy_cap = found->paths[lca];
      break;
    }
  }
  for (uint8_t level : {0, 1}) {
    const uint32_t key = level == 0 ? dst : dst / spec.shape.m[1];
    const OverrideSpec* found = nullptr;
    for (const OverrideSpec& o : spec.overrides) {
      if (o.node == self && o.level == level && o.dst == key) found = &o;
    }
    if (found) {
      if (found->hops.kind == HopKind::kUnreachable) {
        *kind = HopKind::kUnreachable;
        return {};
      }
      for (uint32_t p = 0; p < nports; ++p) allowed[p] = found->hops.up_mask >> p & 1;
      break;
    }
  }
  uint32_t limit = spec.max_paths;
  const int cls = FirstClass(spec, addr);
  if (cls >= 0) {
    const ClassSpec& c = spec.classes[cls];
    if (c.max_paths) limit = c.max_paths;
    for (uint32_t p = 0; p < nports; ++p) {
      if (c.planes_mask && !(c.planes_mask >> (p / spec.shape.w[1]) & 1)) allowed[p] = false;
    }
  }
  limit = std::min(limit, cap);
  std::vector<uint32_t> entropy = spec.entropy.by_lca[lca];
  if (entropy.empty()) {
    entropy = {0};
    for (int l = 1; l <= spec.shape.tiers; ++l) {
      if (!spec.entropy.by_lca[l].empty()) {
        entropy = {spec.entropy.by_lca[l][0]};
        break;
      }
    }
  }
  if (entropy.size() > entropy_cap) entropy.resize(entropy_cap);
  std::vector<HostPath> out;
  for (uint32_t e : entropy) {
    for (uint32_t p = 0; p < nports && out.size() < limit; ++p) {
      if (allowed[p])
        out.push_back(HostPath{static_cast<uint16_t>(p), e, ExpectMac(spec, model, a, p)});
    }
  }
  *kind = out.empty() ? HopKind::kUnreachable : HopKind::kUp;
  return out;
}

// Longest-prefix match over PrefixPathSets(), to check that it reproduces Paths().
const HostTable::PrefixPaths* Lpm(const std::vector<HostTable::PrefixPaths>& sets,
                                  const std::array<uint8_t, 16>& addr) {
  for (const auto& s : sets) {  // most specific first
    if (InPrefix(addr, s.prefix, s.prefix_len)) return &s;
  }
  return nullptr;
}

void CheckHosts(const ArtifactSpec& spec, std::vector<uint32_t> selves = {}) {
  const Model model(spec.shape);
  const std::vector<Label> hosts = model.Labels(0);
  if (selves.empty()) {
    for (uint32_t h = 0; h < hosts.size(); ++h) selves.push_back(h);
  }
  std::array<HostPath, kMaxHostPaths> got;
  for (uint32_t self : selves) {
    absl::StatusOr<HostTable> t = HostTable::Build(spec, self);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->host(), self);
    const auto sets4 = t->PrefixPathSets(false);
    const auto sets6 = t->PrefixPathSets(true);
    EXPECT_EQ(sets6.empty(), !spec.addresses.has_ipv6);
    for (size_t i = 1; i < sets4.size(); ++i) {
      ASSERT_GE(sets4[i - 1].prefix_len, sets4[i].prefix_len) << "most specific first";
    }
    for (uint32_t d = 0; d < hosts.size(); ++d) {
      for (bool v6 : {false, true}) {
        if (v6 && !spec.addresses.has_ipv6) continue;
        const std::array<uint8_t, 16> addr =
            v6 ? Addr6(spec, hosts[d].a) : Mapped(Addr4(spec, hosts[d].a));
        for (uint32_t cap : {1u, 3u, 64u}) {
          HopKind want_kind, kind;
          const std::vector<HostPath> want =
              ExpectPaths(spec, model, self, d, addr, cap, &want_kind);
          const uint32_t n = v6 ? t->Paths6(addr.data(), got.data(), cap, &kind)
                                : t->Paths4(Addr4(spec, hosts[d].a), got.data(), cap, &kind);
          ASSERT_EQ(kind, want_kind) << "host " << self << " dst " << d << " v6 " << v6;
          ASSERT_EQ(std::vector<HostPath>(got.begin(), got.begin() + n), want)
              << "host " << self << " dst " << d << " v6 " << v6 << " cap " << cap;
          if (cap == 64) {
            const HostTable::PrefixPaths* p = Lpm(v6 ? sets6 : sets4, addr);
            ASSERT_NE(p, nullptr) << "host " << self << " dst " << d;
            EXPECT_EQ(p->kind, want_kind) << "prefix set: host " << self << " dst " << d;
            EXPECT_EQ(p->paths, want) << "prefix set: host " << self << " dst " << d;
          }
        }
      }
    }
  }
}

TEST(HostTableTest, FatTreeWithEntropy) {
  ArtifactSpec spec = FatTree(4, Role::kHost, 0);
  spec.max_paths = 16;
  spec.entropy.by_lca[2] = {0xC000, 0xC001};
  spec.entropy.by_lca[3] = {0xC000, 0xC001, 0xC002, 0xC003};
  CheckHosts(spec);
  // By hand: host 0 to host 15 (other pod): four entropies on the one port.
  absl::StatusOr<HostTable> t = HostTable::Build(spec, 0);
  ASSERT_TRUE(t.ok());
  std::array<HostPath, kMaxHostPaths> out;
  HopKind kind;
  ASSERT_EQ(t->Paths4(10u << 24 | 15, out.data(), 64, &kind), 4u);
  EXPECT_EQ(kind, HopKind::kUp);
  EXPECT_EQ(out[3], (HostPath{0, 0xC003, {0x02, 0, 1, 0, 0, 0}}));
  EXPECT_EQ(t->Paths4(10u << 24 | 0, out.data(), 64, &kind), 0u);
  EXPECT_EQ(kind, HopKind::kLocal);
  EXPECT_EQ(t->Paths4(9u << 24, out.data(), 64, &kind), 0u);
  EXPECT_EQ(kind, HopKind::kNotInFabric);
  EXPECT_EQ(t->PrefixPathSets(false).size(), 4u);  // self, ToR group, pod, fabric
  ArtifactSpec bare = FatTree(8, Role::kHost, 0);  // no entropy at all
  CheckHosts(bare, {0, 17, 127});
}

TEST(HostTableTest, DualHomedAndMultiPlane) {
  // Two ToRs per host (w_1 = 2), leaf-spine.
  ArtifactSpec dual = MakeSpec(Role::kHost, 0, {8, 6}, {2, 4});
  dual.max_paths = 6;
  dual.entropy.by_lca[2] = {100, 101, 102, 103};
  CheckHosts(dual);
  // Two planes x two ToRs: four host ports, a class confined to plane 1 with 2 paths, an IPv6
  // class capped at 5.
  ArtifactSpec planes = MakeSpec(Role::kHost, 0, {4, 4, 2}, {2, 2, 2}, 2);
  planes.max_paths = 12;
  planes.entropy.by_lca[1] = {7};
  planes.entropy.by_lca[2] = {1, 2};
  planes.entropy.by_lca[3] = {1, 2, 3, 4};
  ClassSpec p1{"plane1", Mapped(10u << 24 | 1 << 4 | 1 << 2), 96 + 30, 2, 0b10, 0, ~uint64_t{0}};
  ClassSpec v6{"v6", planes.addresses.ipv6_base, 48, 5, 0, 0, ~uint64_t{0}};
  planes.classes = {p1, v6};
  CheckHosts(planes);
  absl::StatusOr<HostTable> t = HostTable::Build(planes, 0);
  ASSERT_TRUE(t.ok());
  std::array<HostPath, kMaxHostPaths> out;
  HopKind kind;
  // Host 0 to a host of the other subtree: 4 ports x 4 entropies, capped at 12, ports first.
  ASSERT_EQ(t->Paths4(Addr4(planes, {0, 0, 0, 1}), out.data(), 64, &kind), 12u);
  EXPECT_EQ(out[0].port, 0);
  EXPECT_EQ(out[1].port, 1);
  EXPECT_EQ(out[2].port, 2);
  EXPECT_EQ(out[2].next_hop_mac, (std::array<uint8_t, 6>{0x02, 1, 1, 0, 0, 0}));
  EXPECT_EQ(out[4].entropy, 2u);
}

TEST(HostTableTest, RailLocal) {
  // 8 leaves per group in 4 rails, 2 groups: a_2 % 4 is the rail.
  ArtifactSpec spec = MakeSpec(Role::kHost, 0, {4, 8, 2}, {1, 2, 4}, 1, 4);
  spec.rail_local = true;
  spec.entropy.by_lca[2] = {1, 2};
  spec.entropy.by_lca[3] = {1, 2, 3};
  CheckHosts(spec);
  absl::StatusOr<HostTable> t = HostTable::Build(spec, 5);  // a_2 = 1: rail 1
  ASSERT_TRUE(t.ok());
  std::array<HostPath, kMaxHostPaths> out;
  HopKind kind;
  EXPECT_EQ(t->Paths4(Addr4(spec, {0, 0, 2, 0}), out.data(), 64, &kind), 0u);
  EXPECT_EQ(kind, HopKind::kUnreachable);
  EXPECT_EQ(t->Paths4(Addr4(spec, {0, 0, 5, 1}), out.data(), 64, &kind), 3u);  // rail 1, group 1
  EXPECT_EQ(kind, HopKind::kUp);
}

TEST(HostTableTest, HostMasksAndOverrides) {
  ArtifactSpec spec = MakeSpec(Role::kHost, 0, {4, 4, 2}, {2, 2, 2}, 2);
  spec.entropy.by_lca[2] = {1, 2};
  spec.entropy.by_lca[3] = {1, 2, 3};
  spec.node_masks = {{0, 3, {0, 0b1111, 0b0111, 0b0110}}, {0, 9, {0, 0, 0, 0}}};
  spec.overrides = {{0, 3, 0, 20, {HopKind::kUp, 0, 0b1000}},
                    {0, 3, 1, 6, {HopKind::kUnreachable, 0, 0}},
                    {0, 9, 1, 0, {HopKind::kUp, 0, 0b0001}}};
  ClassSpec c{"c", Mapped(10u << 24 | 1 << 4 | 1 << 2), 96 + 30, 1, 0, 0, ~uint64_t{0}};
  spec.classes = {c};
  ASSERT_TRUE(Decode(Serialize(spec)).ok());
  CheckHosts(spec, {0, 3, 9});
}

TEST(HostTableTest, DestinationExceptions) {
  // Two planes, dual-homed, 3 tiers: 4 host ports. Host 20 is unreachable from everywhere; group
  // 6 lost port 1 (plane 0, b_1 = 1) beyond its own tier-1 group and keeps one path per port at
  // LCA tier 3; host 25 (group 6) has its own entry; host 3 also has a source override for
  // group 6 and a host mask.
  ArtifactSpec spec = MakeSpec(Role::kHost, 0, {4, 4, 2}, {2, 2, 2}, 2);
  spec.entropy.by_lca[2] = {1, 2};
  spec.entropy.by_lca[3] = {1, 2, 3};
  spec.node_masks = {{0, 3, {0, 0b1111, 0b0111, 0b0110}}};
  spec.overrides = {{0, 3, 1, 6, {HopKind::kUp, 0, 0b0100}}};
  spec.dst_exceptions = {{0, 20, {}, {}},
                         {0, 25, {0, 0b0001, 0b0001, 0b0001}, {0, 1, 1, 1}},
                         {1, 6, {0, 0b1111, 0b1101, 0b1101}, {0, 1, 2, 1}}};
  ClassSpec c{"c", Mapped(10u << 24 | 1 << 4 | 1 << 2), 96 + 30, 1, 0, 0, ~uint64_t{0}};
  spec.classes = {c};
  ASSERT_TRUE(Decode(Serialize(spec)).ok()) << Decode(Serialize(spec)).status();
  CheckHosts(spec, {0, 3, 9, 20, 24, 25, 26});
  // By hand: host 0 -> host 20: unreachable, no paths; host 0 -> host 26 (group 6, LCA tier 3):
  // ports 0, 2, 3, one entropy each.
  absl::StatusOr<HostTable> t = HostTable::Build(spec, 0);
  ASSERT_TRUE(t.ok());
  const Model model(spec.shape);
  const std::vector<Label> hosts = model.Labels(0);
  std::array<HostPath, kMaxHostPaths> out;
  HopKind kind;
  EXPECT_EQ(t->Paths4(Addr4(spec, hosts[20].a), out.data(), 64, &kind), 0u);
  EXPECT_EQ(kind, HopKind::kUnreachable);
  ASSERT_EQ(t->Paths4(Addr4(spec, hosts[26].a), out.data(), 64, &kind), 3u);
  EXPECT_EQ(kind, HopKind::kUp);
  EXPECT_EQ(out[0].port, 0);
  EXPECT_EQ(out[1].port, 2);
  EXPECT_EQ(out[2].port, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i].entropy, 1u);
}

}  // namespace
}  // namespace heddle::fwd
