#include "control/nuwa/compiler.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>

#include "control/nuwa/oracle.h"
#include "control/nuwa/testing/random_fabric.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::nuwa {
namespace {

using testing::FatTree;
using testing::LeafSpine;

std::string Describe(const Fabric& f) {
  std::string s = "tiers " + std::to_string(f.shape.tiers) + " m";
  for (int j = 1; j <= f.shape.tiers; ++j) s += " " + std::to_string(f.shape.m[j]);
  s += " w";
  for (int j = 1; j <= f.shape.tiers; ++j) s += " " + std::to_string(f.shape.w[j]);
  s += " planes " + std::to_string(f.shape.planes) + " classes " +
       std::to_string(f.routing.classes.size()) + " failures:";
  for (const LinkRef& l : f.failures.links) {
    s += " link(" + NodeName(f, l.lower) + ":" + std::to_string(l.up_port) + ")";
  }
  for (const NodeRef& n : f.failures.switches) s += " switch(" + NodeName(f, n) + ")";
  return s;
}

// Compares the compiled switch artifacts with the oracle for the destinations `dsts`, at every
// live switch. Returns the number of (node, destination) pairs checked.
uint64_t CheckAgainstOracle(const Fabric& f, const Compiled& c, const std::vector<uint32_t>& dsts) {
  Oracle o(f);
  uint64_t checked = 0;
  for (uint32_t dst : dsts) {
    const auto table = o.AllNextHops(dst);
    const uint32_t addr = HostIpv4(f.shape, f.addresses, dst);
    for (uint32_t p = 0; p < f.shape.planes; ++p) {
      for (int t = 1; t <= f.shape.tiers; ++t) {
        for (uint32_t x = 0; x < NodeCount(f.shape, t); ++x) {
          const NodeRef node{static_cast<uint8_t>(p), static_cast<uint8_t>(t), x};
          if (!o.Alive(node)) continue;
          const fwd::NextHops want = ToNextHops(f.shape, t, table[o.NodeId(node)]);
          const fwd::NextHops got = EvaluateSwitch4(c.switches[t - 1], node.plane, x, addr);
          ++checked;
          if (got != want) {
            ADD_FAILURE() << Describe(f) << "\n  node " << NodeName(f, node) << " dst host " << dst
                          << ": artifact kind " << int(got.kind) << " port " << got.down_port
                          << " mask " << got.up_mask << ", oracle kind " << int(want.kind)
                          << " port " << want.down_port << " mask " << want.up_mask;
            return checked;
          }
        }
      }
    }
  }
  return checked;
}

// The tier of the lowest common ancestor of two hosts.
uint32_t LcaOf(const Shape& sh, uint32_t a, uint32_t b) {
  uint64_t div = 1;
  for (int L = 1; L <= sh.tiers; ++L) {
    div *= sh.m[L];
    if (a / div == b / div) return static_cast<uint32_t>(L);
  }
  return static_cast<uint32_t>(sh.tiers);
}

// Compares the host artifact (through Serialize/Decode) with the oracle for every (src, dst) of
// the two lists: the path set's ports are the oracle's first hops after the policy, empty and
// kUnreachable exactly when there are none; with a known hash model every (port, entropy) reaches
// the destination through 2L - 1 switches of the failed fabric (docs/nuwa.md §5). Returns the
// pairs checked.
uint64_t CheckHostsAgainstOracle(const Fabric& f, const Compiled& c,
                                 const std::vector<uint32_t>& srcs,
                                 const std::vector<uint32_t>& dsts) {
  absl::StatusOr<fwd::ArtifactSpec> host = fwd::Decode(fwd::Serialize(c.host));
  if (!host.ok()) {
    ADD_FAILURE() << host.status();
    return 0;
  }
  Oracle o(f);
  std::vector<fwd::HostTable> tables;
  for (uint32_t src : srcs) {
    absl::StatusOr<fwd::HostTable> t = fwd::HostTable::Build(*host, src);
    if (!t.ok()) {
      ADD_FAILURE() << t.status();
      return 0;
    }
    tables.push_back(*std::move(t));
  }
  const bool known = f.hash.function != HashFunction::kUnknown;
  uint64_t checked = 0;
  std::array<fwd::HostPath, fwd::kMaxHostPaths> paths;
  for (uint32_t dst : dsts) {
    const auto table = o.AllNextHops(dst);
    const uint32_t addr = HostIpv4(f.shape, f.addresses, dst);
    for (size_t k = 0; k < srcs.size(); ++k) {
      const uint32_t src = srcs[k];
      if (src == dst) continue;
      fwd::HopKind kind;
      const uint32_t n = tables[k].Paths4(addr, paths.data(), fwd::kMaxHostPaths, &kind);
      uint64_t got = 0, want = 0;
      for (uint32_t i = 0; i < n; ++i) got |= uint64_t{1} << paths[i].port;
      for (uint32_t p : table[o.NodeId({0, 0, src})].ports) want |= uint64_t{1} << p;
      want = PolicyPorts(f, src, dst, ClassOfHost(f, dst), want);
      ++checked;
      if (got != want || (kind == fwd::HopKind::kUp) != (want != 0)) {
        ADD_FAILURE() << Describe(f) << "\n  host " << src << " -> host " << dst << ": ports 0x"
                      << std::hex << got << " kind " << std::dec << int(kind)
                      << ", oracle (after policy) 0x" << std::hex << want;
        return checked;
      }
      if (!known) continue;
      const uint32_t hops = 2 * LcaOf(f.shape, src, dst) - 1;
      for (uint32_t i = 0; i < n; ++i) {
        const auto path =
            o.SimulatePath(table, src, dst, paths[i].port, static_cast<uint16_t>(paths[i].entropy));
        if (path.size() != hops) {
          ADD_FAILURE() << Describe(f) << "\n  host " << src << " -> host " << dst << " port "
                        << paths[i].port << " entropy " << paths[i].entropy << ": " << path.size()
                        << " switches, shortest " << hops;
          return checked;
        }
      }
    }
  }
  return checked;
}

std::vector<uint32_t> AllHosts(const Fabric& f) {
  std::vector<uint32_t> v(NodeCount(f.shape, 0));
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

TEST(Compiler, FailureFreeArtifactsCarryNoExceptions) {
  const Fabric f = FatTree(64);
  auto c = Compile(f);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->switches.size(), 3u);
  for (int t = 1; t <= 3; ++t) {
    EXPECT_EQ(c->switches[t - 1].tier, t);
    EXPECT_EQ(c->switches[t - 1].role, fwd::Role::kSwitch);
    EXPECT_TRUE(c->switches[t - 1].node_masks.empty());
    EXPECT_TRUE(c->switches[t - 1].overrides.empty());
    EXPECT_EQ(c->switches[t - 1].fabric_digest, c->fabric_digest);
  }
  EXPECT_EQ(c->switches[1].role_name, "agg");
  EXPECT_EQ(c->host.role, fwd::Role::kHost);
  EXPECT_EQ(c->stats.exceptions, 0u);
  EXPECT_EQ(c->stats.rules, 4u);
  EXPECT_LT(c->stats.bytes, 4096u);
}

TEST(Compiler, ArtifactsCarryTheFabricBack) {
  std::mt19937 rng(7);
  for (int i = 0; i < 50; ++i) {
    const Fabric f = testing::RandomFabric(rng);
    auto c = Compile(f);
    ASSERT_TRUE(c.ok()) << c.status();
    std::vector<const fwd::ArtifactSpec*> all = {&c->host};
    for (const fwd::ArtifactSpec& s : c->switches) all.push_back(&s);
    for (const fwd::ArtifactSpec* s : all) {
      const Fabric back = FabricFromArtifact(*s);
      EXPECT_EQ(back.name, f.name);
      EXPECT_EQ(back.shape, f.shape);
      EXPECT_EQ(back.addresses, f.addresses);
      EXPECT_EQ(back.hash, f.hash);
      EXPECT_EQ(back.routing, f.routing);
    }
  }
}

TEST(Compiler, RejectsInvalidFabric) {
  Fabric f = FatTree(8);
  f.failures.links.push_back({{0, 2, 3}, 9});
  EXPECT_THAT(Compile(f).status().message(), ::testing::HasSubstr("no up port 9"));
}

TEST(Compiler, DigestIsStableAndSensitive) {
  Fabric f = FatTree(8);
  f.failures.links = {{{0, 1, 3}, 1}, {{0, 2, 5}, 0}};
  Fabric g = f;
  std::reverse(g.failures.links.begin(), g.failures.links.end());
  g.failures.links.push_back(g.failures.links[0]);  // a duplicate
  EXPECT_EQ(FabricDigest(f), FabricDigest(g));
  auto cf = Compile(f);
  auto cg = Compile(g);
  ASSERT_TRUE(cf.ok() && cg.ok());
  EXPECT_EQ(cf->switches, cg->switches);
  EXPECT_EQ(cf->host, cg->host);
  Fabric h = f;
  h.hash.seed_base ^= 1;
  EXPECT_NE(FabricDigest(f), FabricDigest(h));
  h = f;
  h.failures.links.pop_back();
  EXPECT_NE(FabricDigest(f), FabricDigest(h));
  h = f;
  h.tier_names[2] = "spine";
  EXPECT_NE(FabricDigest(f), FabricDigest(h));
}

// A failed core changes no destination's down-reachability: masks (the aggs below it) only.
TEST(Compiler, FailedTopSwitchNeedsOnlyMasks) {
  Fabric f = FatTree(8);
  f.failures.switches.push_back({0, 3, 5});
  auto c = Compile(f);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->stats.overrides, 0u);
  EXPECT_EQ(c->switches[1].node_masks.size(), 8u);  // agg b_2 = 5 / 4 = 1 of each of 8 pods
  for (const auto& m : c->switches[1].node_masks) {
    EXPECT_EQ(m.index % 4, 1u);
    EXPECT_EQ(m.up_mask[3], 0b1111u & ~(1u << (5 % 4)));
  }
  EXPECT_EQ(CheckAgainstOracle(f, *c, AllHosts(f)), 128u * 79u);  // every live switch
}

// Exhaustive: every (live switch, destination) of many random small XGFTs with random planes,
// dual-homing, classes and failures.
TEST(CompilerProperty, RandomSmallFabricsMatchTheOracleEverywhere) {
  std::mt19937 rng(20240605);
  uint64_t pairs = 0, exceptions = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const Fabric f = testing::RandomFabric(rng);
    ASSERT_TRUE(Validate(f).ok()) << Validate(f) << " " << Describe(f);
    auto c = Compile(f);
    ASSERT_TRUE(c.ok()) << c.status();
    exceptions += c->stats.exceptions;
    pairs += CheckAgainstOracle(f, *c, AllHosts(f));
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(pairs, 100000u);
  EXPECT_GT(exceptions, 1000u);  // the failures really exercised the exception path
}

// Host artifacts: every (host, destination) of random small XGFTs with random failures (and
// planes, dual-homing, classes, rail_local) against the oracle's first hops.
TEST(CompilerProperty, RandomSmallFabricsHostPathSetsMatchTheOracle) {
  std::mt19937 rng(20260101);
  uint64_t pairs = 0, dst_exceptions = 0, unreachable = 0, host_overrides = 0, wildcards = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    Fabric f = testing::RandomFabric(rng);
    if (trial % 3 == 0) testing::AddRandomFailures(rng, f, 6, 2);
    auto c = Compile(f);
    ASSERT_TRUE(c.ok()) << c.status();
    dst_exceptions += c->host.dst_exceptions.size();
    host_overrides += c->host.overrides.size();
    wildcards += c->stats.wildcards;
    for (const auto& e : c->host.dst_exceptions) {
      bool none = true;
      for (int L = 1; L <= f.shape.tiers; ++L) none = none && e.ports[L] == 0;
      unreachable += none;
    }
    pairs += CheckHostsAgainstOracle(f, *c, AllHosts(f), AllHosts(f));
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(pairs, 100000u);
  // The failures really reached the hosts' path sets, made destinations unreachable from
  // everywhere, and met source-side failures.
  EXPECT_GT(dst_exceptions, 100u);
  EXPECT_GT(unreachable, 10u);
  EXPECT_GT(host_overrides, 10u);
  EXPECT_GT(wildcards, 10u);
  std::printf(
      "%llu pairs, %llu destination exceptions (%llu unreachable), %llu host overrides, "
      "%llu wildcards\n",
      static_cast<unsigned long long>(pairs), static_cast<unsigned long long>(dst_exceptions),
      static_cast<unsigned long long>(unreachable), static_cast<unsigned long long>(host_overrides),
      static_cast<unsigned long long>(wildcards));
}

// More failures than the random mix has, on slightly larger shapes.
TEST(CompilerProperty, HeavyFailuresMatchTheOracle) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 600; ++trial) {
    testing::RandomOptions o;
    o.max_children = 5;
    o.max_fanout = 5;
    Fabric f = testing::RandomFabric(rng, o);
    testing::AddRandomFailures(rng, f, 12, 3);
    auto c = Compile(f);
    ASSERT_TRUE(c.ok()) << c.status();
    CheckAgainstOracle(f, *c, AllHosts(f));
    CheckHostsAgainstOracle(f, *c, AllHosts(f), AllHosts(f));
    if (::testing::Test::HasFailure()) return;
  }
}

void LargeFatTree(uint32_t k, int samples, bool with_class) {
  std::mt19937 rng(k);
  Fabric f = FatTree(k);
  if (with_class) {
    // Pods 0..k/4-1 reach each other only through the lower half of the cores, and agg 40 has
    // lost every link into that half: its edges must avoid it for those destinations only.
    DestinationClass c;
    c.name = "low-pods";
    const uint32_t pod_shift = f.addresses.shift[3];
    const int pod_bits = std::bit_width(k / 4 - 1);
    c.prefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 0};
    c.prefix_len = static_cast<uint8_t>(128 - pod_shift - pod_bits);
    c.restrict_tier = 3;
    c.allowed_up_mask = (uint64_t{1} << (k / 4)) - 1;
    f.routing.classes.push_back(c);
    for (uint32_t u = 0; u < k / 4; ++u) f.failures.links.push_back({{0, 2, 40}, u});
  }
  testing::AddRandomFailures(rng, f, 8, 2);
  // Make sure some failures sit low in the tree, where they change down-reachability.
  f.failures.links.push_back({{0, 1, 17}, 2});
  f.failures.links.push_back({{0, 2, 41}, 1});
  f.failures.links.push_back({{0, 0, 123}, 0});
  auto c = Compile(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT(c->stats.overrides, 0u);
  // Destinations: a random sample plus every host below a failed element's lower end.
  std::set<uint32_t> dsts = {123, 17 * (k / 2), 17 * (k / 2) + 1, (41 / (k / 2)) * (k * k / 4), 0,
                             1};
  const uint32_t hosts = static_cast<uint32_t>(NodeCount(f.shape, 0));
  while (dsts.size() < static_cast<size_t>(samples)) dsts.insert(rng() % hosts);
  const uint64_t checked = CheckAgainstOracle(f, *c, {dsts.begin(), dsts.end()});
  EXPECT_GE(checked, static_cast<uint64_t>(samples) * (5 * k * k / 4 - 64));
}

// Host artifacts of a k=32 fat tree with failures next to destinations: a host whose only link
// failed, a dead ToR, an agg that lost its ToR link and some core links, random failures; a
// random sample of sources against every destination below a failure and a random sample.
TEST(CompilerProperty, FatTree32HostPathSetsSampled) {
  const uint32_t k = 32;
  std::mt19937 rng(32);
  Fabric f = FatTree(k);
  testing::AddRandomFailures(rng, f, 8, 2);
  f.failures.links.push_back({{0, 0, 123}, 0});  // host 123 cut off
  f.failures.switches.push_back({0, 1, 40});     // ToR 40: hosts 640..655 cut off
  f.failures.links.push_back({{0, 1, 17}, 2});   // ToR 17 lost agg 2 of its pod
  for (uint32_t u = 0; u < 10; ++u) f.failures.links.push_back({{0, 2, 41}, u});  // agg 41
  auto c = Compile(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT(c->host.dst_exceptions.size(), 0u);
  const uint32_t hosts = static_cast<uint32_t>(NodeCount(f.shape, 0));
  std::set<uint32_t> dsts = {
      123, 640, 655, 17 * (k / 2), 17 * (k / 2) + 1, (41 / (k / 2)) * (k * k / 4), 0};
  while (dsts.size() < 200) dsts.insert(rng() % hosts);
  std::set<uint32_t> srcs = {0, 1, 122, 124, 641, 17 * (k / 2) + 3};
  while (srcs.size() < 600) srcs.insert(rng() % hosts);
  const uint64_t checked =
      CheckHostsAgainstOracle(f, *c, {srcs.begin(), srcs.end()}, {dsts.begin(), dsts.end()});
  EXPECT_GT(checked, 200u * 590u);
}

// A dead host or ToR group is unreachable from every switch: one wildcard per tier (and per-node
// overrides only where a node still reaches it), and one destination exception for the hosts.
TEST(Compiler, DeadDestinationsNeedWildcardsNotPerNodeOverrides) {
  Fabric f = FatTree(16);
  f.failures.links.push_back({{0, 0, 77}, 0});  // host 77's only link
  f.failures.switches.push_back({0, 1, 9});     // ToR 9: hosts 72..79 (77 among them)
  auto c = Compile(f);
  ASSERT_TRUE(c.ok()) << c.status();
  for (int t = 1; t <= 3; ++t) {
    for (const fwd::OverrideSpec& o : c->switches[t - 1].overrides) {
      EXPECT_EQ(o.node, fwd::kAllNodes) << "tier " << t;
      EXPECT_EQ(o.hops.kind, fwd::HopKind::kUnreachable);
    }
  }
  // The group's wildcard per tier; host 77 is covered by its group's.
  EXPECT_EQ(c->stats.overrides, 3u);
  EXPECT_EQ(c->stats.wildcards, 3u);
  ASSERT_EQ(c->host.dst_exceptions.size(), 1u);
  const fwd::DstExceptionSpec& e = c->host.dst_exceptions[0];
  EXPECT_EQ(e.level, 1);
  EXPECT_EQ(e.dst, 9u);
  for (int L = 1; L <= 3; ++L) EXPECT_EQ(e.ports[L], 0u);
  CheckAgainstOracle(f, *c, AllHosts(f));
  CheckHostsAgainstOracle(f, *c, {0, 1, 70, 72, 77, 80, 200, 1023}, AllHosts(f));
}

// ~1M (switch, destination) pairs each.
// A class names hosts by an address of either family (the oracle's ClassOfHost); lookups match one
// family's destination address against the class prefixes, so a class given as an IPv6 prefix
// must restrict IPv4 lookups of its hosts too, and the reverse. Every switch and host answers the
// same for a destination's IPv4 and IPv6 address, and the IPv4 answers match the oracle.
TEST(Compiler, ClassesApplyToBothAddressFamilies) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    Fabric f = FatTree(8);
    const uint32_t pod_shift = f.addresses.shift[3];
    const uint32_t pod_bits = f.addresses.width[3];
    const uint32_t edge_shift = f.addresses.shift[2];
    // Pod 1 by an IPv6 prefix: its traffic climbs to the lower half of the cores only.
    DestinationClass v6;
    v6.name = "pod1-v6";
    v6.prefix = f.addresses.ipv6_base;
    v6.prefix[15 - pod_shift / 8] |= static_cast<uint8_t>(1u << (pod_shift % 8));
    v6.prefix_len = static_cast<uint8_t>(128 - pod_shift - pod_bits);
    v6.restrict_tier = 3;
    v6.allowed_up_mask = 0x3;
    // Pod 2's first edge group by an IPv4 prefix: two paths, agg 0 of its pod only.
    DestinationClass v4;
    v4.name = "pod2-edge0-v4";
    const uint32_t addr = f.addresses.ipv4_base | 2u << pod_shift;
    v4.prefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, static_cast<uint8_t>(addr >> 24),
                 static_cast<uint8_t>(addr >> 16), static_cast<uint8_t>(addr >> 8),
                 static_cast<uint8_t>(addr)};
    v4.prefix_len = static_cast<uint8_t>(128 - edge_shift - f.addresses.width[2]);
    v4.restrict_tier = 2;
    v4.allowed_up_mask = 0x1;
    v4.max_paths = 2;
    f.routing.classes = {v6, v4};
    testing::AddRandomFailures(rng, f, 3, seed % 2);
    auto c = Compile(f);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_EQ(c->host.classes.size(), 4u) << "each class once per family";
    const std::vector<uint32_t> hosts = AllHosts(f);
    EXPECT_GT(CheckAgainstOracle(f, *c, hosts), 0u);
    for (int t = 1; t <= f.shape.tiers; ++t) {
      for (uint32_t x = 0; x < NodeCount(f.shape, t); ++x) {
        absl::StatusOr<fwd::SwitchTable> table = fwd::SwitchTable::Build(c->switches[t - 1], 0, x);
        ASSERT_TRUE(table.ok()) << table.status();
        for (uint32_t h : hosts) {
          const std::array<uint8_t, 16> a6 = HostIpv6(f.shape, f.addresses, h);
          ASSERT_EQ(table->Lookup4(HostIpv4(f.shape, f.addresses, h)), table->Lookup6(a6.data()))
              << Describe(f) << " tier " << t << " node " << x << " host " << h;
        }
      }
    }
    for (uint32_t src : hosts) {
      absl::StatusOr<fwd::HostTable> table = fwd::HostTable::Build(c->host, src);
      ASSERT_TRUE(table.ok()) << table.status();
      for (uint32_t h : hosts) {
        fwd::HostPath p4[fwd::kMaxHostPaths], p6[fwd::kMaxHostPaths];
        fwd::HopKind k4, k6;
        const std::array<uint8_t, 16> a6 = HostIpv6(f.shape, f.addresses, h);
        const uint32_t n4 =
            table->Paths4(HostIpv4(f.shape, f.addresses, h), p4, fwd::kMaxHostPaths, &k4);
        const uint32_t n6 = table->Paths6(a6.data(), p6, fwd::kMaxHostPaths, &k6);
        ASSERT_EQ(n4, n6) << Describe(f) << " host " << src << " -> " << h;
        ASSERT_EQ(k4, k6);
        for (uint32_t i = 0; i < n4; ++i) ASSERT_EQ(p4[i], p6[i]);
      }
    }
  }
}

TEST(CompilerProperty, FatTree32SampledPairs) { LargeFatTree(32, 800, false); }
TEST(CompilerProperty, FatTree32ClassAndFailuresSampledPairs) { LargeFatTree(32, 400, true); }
TEST(CompilerProperty, FatTree64SampledPairs) { LargeFatTree(64, 200, false); }

// ---- Entropy ---------------------------------------------------------------------------------

uint32_t LcaTier(const Fabric& f, uint32_t a, uint32_t b) {
  uint64_t div = 1;
  for (int L = 1; L <= f.shape.tiers; ++L) {
    div *= f.shape.m[L];
    if (a / div == b / div) return L;
  }
  return f.shape.tiers;
}

// Simulated hop by hop through the oracle's next-hop sets and the hash model, every entropy of
// the host artifact takes a different path, for random (src, dst) pairs.
void CheckEntropiesDistinct(const Fabric& f, int pairs, bool expect_full) {
  auto c = Compile(f);
  ASSERT_TRUE(c.ok()) << c.status();
  Oracle o(f);
  std::mt19937 rng(3);
  const uint32_t hosts = static_cast<uint32_t>(NodeCount(f.shape, 0));
  for (int n = 0; n < pairs; ++n) {
    const uint32_t src = rng() % hosts, dst = rng() % hosts;
    const uint32_t L = LcaTier(f, src, dst);
    if (src == dst || L < 2) continue;
    const auto& list = c->host.entropy.by_lca[L];
    uint64_t paths = 1;
    for (uint32_t i = 2; i <= L; ++i) paths *= f.shape.w[i];
    if (expect_full) {
      EXPECT_EQ(list.size(), std::min<uint64_t>(64, paths));
    }
    ASSERT_FALSE(list.empty());
    const auto table = o.AllNextHops(dst);
    std::set<std::vector<NodeRef>> seen;
    for (uint32_t sport : list) {
      const auto path = o.SimulatePath(table, src, dst, 0, static_cast<uint16_t>(sport));
      ASSERT_EQ(path.size(), 2 * L - 1);
      EXPECT_TRUE(seen.insert(path).second)
          << "src " << src << " dst " << dst << " sport " << sport << " repeats a path";
    }
  }
}

TEST(Entropy, Crc32FatTreePathsAreDistinct) {
  Fabric f = FatTree(16);  // w = 8: 8 paths at L = 2, 64 at L = 3
  f.hash.bit_offset = {0, 0, 3, 9};
  CheckEntropiesDistinct(f, 300, true);
}

TEST(Entropy, Crc32cAndOverlappingOffsets) {
  Fabric f = FatTree(8);
  f.hash.function = HashFunction::kCrc32c;
  f.hash.bit_offset = {0, 5, 5, 5};  // both tiers read the same bits: fewer distinct vectors
  CheckEntropiesDistinct(f, 200, false);
  auto c = Compile(f);
  EXPECT_EQ(c->host.entropy.by_lca[3].size(), 4u);  // only w = 4 vectors exist
}

TEST(Entropy, Crc16LeafSpine64Spines) {
  Fabric f = LeafSpine(4, 16, 64);
  f.hash.function = HashFunction::kCrc16;
  f.hash.bit_offset = {0, 4, 0, 0};
  CheckEntropiesDistinct(f, 100, true);
}

TEST(Entropy, ConsecutivePortsWouldCollide) {
  // The control: without the affine choice, 16 consecutive ports over 16 core paths collide.
  Fabric f = FatTree(8);
  f.hash.bit_offset = {0, 0, 3, 9};
  Oracle o(f);
  int colliding = 0;
  for (uint32_t dst = 64; dst < 128; dst += 7) {
    const auto table = o.AllNextHops(dst);
    std::set<std::vector<NodeRef>> seen;
    for (uint32_t s = 0xC000; s < 0xC010; ++s) seen.insert(o.SimulatePath(table, 1, dst, 0, s));
    colliding += seen.size() < 16;
  }
  EXPECT_GT(colliding, 0);
  // And the compiled list is not simply the consecutive ports.
  auto c = Compile(f);
  std::vector<uint32_t> consecutive;
  for (uint32_t s = 0xC000; s < 0xC010; ++s) consecutive.push_back(s);
  EXPECT_NE(c->host.entropy.by_lca[3], consecutive);
}

TEST(Entropy, UnknownHashOrOddFanoutIsConsecutive) {
  Fabric f = FatTree(8);
  f.hash.function = HashFunction::kUnknown;
  auto c = Compile(f);
  ASSERT_EQ(c->host.entropy.by_lca[2].size(), 4u);
  EXPECT_EQ(c->host.entropy.by_lca[2][3], 0xC003u);
  f = LeafSpine(4, 4, 6);
  c = Compile(f);
  ASSERT_EQ(c->host.entropy.by_lca[2].size(), 6u);
  EXPECT_EQ(c->host.entropy.by_lca[2][5], 0xC005u);
}

}  // namespace
}  // namespace heddle::nuwa
