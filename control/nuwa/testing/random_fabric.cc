#include "control/nuwa/testing/random_fabric.h"

#include <algorithm>
#include <set>

namespace heddle::nuwa::testing {
namespace {

void Finish(Fabric& f) {
  f.addresses.ipv4_base = 10u << 24;
  f.addresses.ipv4_prefix_len = 8;
  f.addresses.has_ipv6 = true;
  f.addresses.ipv6_base = {0xfd, 0x00, 0x00, 0x01};
  f.addresses.ipv6_prefix_len = 48;
  (void)LayOutAddresses(f.shape, f.addresses);
  f.hash.function = HashFunction::kCrc32;
  f.hash.seed_base = 0x5eed;
  f.hash.bit_offset = {0, 0, 8, 16};
}

uint32_t Pick(std::mt19937& rng, uint32_t lo, uint32_t hi) {
  return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
}

}  // namespace

Fabric FatTree(uint32_t k) {
  Fabric f;
  f.name = "fat-tree-k" + std::to_string(k);
  f.kind = Kind::kFatTree;
  f.shape.tiers = 3;
  f.shape.m = {0, k / 2, k / 2, k};
  f.shape.w = {0, 1, k / 2, k / 2};
  f.tier_names = {"host", "edge", "agg", "core"};
  Finish(f);
  return f;
}

Fabric LeafSpine(uint32_t hosts_per_leaf, uint32_t leaves, uint32_t spines) {
  Fabric f;
  f.name = "leaf-spine";
  f.kind = Kind::kClos2;
  f.shape.tiers = 2;
  f.shape.m = {0, hosts_per_leaf, leaves};
  f.shape.w = {0, 1, spines};
  f.tier_names = {"host", "leaf", "spine", ""};
  Finish(f);
  return f;
}

Fabric RailOptimized(uint32_t servers_per_su, uint32_t rails, uint32_t sus_per_pod, uint32_t pods,
                     uint32_t spines, uint32_t cores, uint32_t planes) {
  Fabric f;
  f.name = "rail-optimized";
  f.kind = Kind::kRailOptimized;
  f.shape.tiers = 3;
  f.shape.m = {0, servers_per_su, rails * sus_per_pod, pods};
  f.shape.w = {0, 1, spines, cores};
  f.shape.rails = rails;
  f.shape.planes = planes;
  f.tier_names = {"gpu", "leaf", "spine", "core"};
  Finish(f);
  return f;
}

void AddRandomFailures(std::mt19937& rng, Fabric& f, int links, int switches) {
  const Shape& s = f.shape;
  std::set<LinkRef> seen_links(f.failures.links.begin(), f.failures.links.end());
  for (int n = 0, tries = 0; n < links && tries < 1000; ++tries) {
    LinkRef l;
    l.lower.tier = static_cast<uint8_t>(Pick(rng, 0, s.tiers - 1));
    l.lower.plane = l.lower.tier == 0 ? 0 : static_cast<uint8_t>(Pick(rng, 0, s.planes - 1));
    l.lower.index = Pick(rng, 0, static_cast<uint32_t>(NodeCount(s, l.lower.tier)) - 1);
    l.up_port = Pick(rng, 0, UpPorts(s, l.lower.tier) - 1);
    if (seen_links.insert(l).second) {
      f.failures.links.push_back(l);
      ++n;
    }
  }
  std::set<NodeRef> seen(f.failures.switches.begin(), f.failures.switches.end());
  for (int n = 0, tries = 0; n < switches && tries < 1000; ++tries) {
    NodeRef sw;
    sw.tier = static_cast<uint8_t>(Pick(rng, 1, s.tiers));
    sw.plane = static_cast<uint8_t>(Pick(rng, 0, s.planes - 1));
    sw.index = Pick(rng, 0, static_cast<uint32_t>(NodeCount(s, sw.tier)) - 1);
    if (seen.insert(sw).second) {
      f.failures.switches.push_back(sw);
      ++n;
    }
  }
}

Fabric RandomFabric(std::mt19937& rng, const RandomOptions& o) {
  Fabric f;
  f.name = "random";
  f.kind = Kind::kClos3;
  f.shape.tiers = static_cast<int>(Pick(rng, 2, 3));
  if (f.shape.tiers == 2) f.kind = Kind::kClos2;
  for (int j = 1; j <= f.shape.tiers; ++j) {
    f.shape.m[j] = Pick(rng, 1, o.max_children);
    f.shape.w[j] = Pick(rng, 1, o.max_fanout);
  }
  f.shape.w[1] = Pick(rng, 1, 2);  // dual-homing at most
  f.shape.planes = Pick(rng, 1, 2);
  f.tier_names = {"host", "tor", "spine", "core"};
  Finish(f);
  f.hash.function = static_cast<HashFunction>(Pick(rng, 1, 3));
  f.hash.seed_base = rng();
  for (int j = 1; j <= f.shape.tiers; ++j)
    f.hash.bit_offset[j] = static_cast<uint8_t>(Pick(rng, 0, 12));
  const uint32_t hosts = static_cast<uint32_t>(NodeCount(f.shape, 0));
  if (o.classes && Pick(rng, 0, 9) < 5) {
    const int n = static_cast<int>(Pick(rng, 1, 2));
    for (int c = 0; c < n; ++c) {
      DestinationClass dc;
      dc.name = "class" + std::to_string(c);
      const uint32_t addr = HostIpv4(f.shape, f.addresses, Pick(rng, 0, hosts - 1));
      dc.prefix[10] = dc.prefix[11] = 0xFF;
      dc.prefix_len = static_cast<uint8_t>(Pick(rng, 96 + 8, 128));
      for (int b = 0; b < 4; ++b) dc.prefix[12 + b] = static_cast<uint8_t>(addr >> (24 - 8 * b));
      // Clear the host bits beyond the prefix.
      for (int bit = dc.prefix_len; bit < 128; ++bit) {
        dc.prefix[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
      }
      if (Pick(rng, 0, 2) != 0) {
        dc.restrict_tier = static_cast<int>(Pick(rng, 2, f.shape.tiers));
        const uint32_t w = f.shape.w[dc.restrict_tier];
        const uint64_t all = w == 64 ? ~uint64_t{0} : (uint64_t{1} << w) - 1;
        do {
          dc.allowed_up_mask = (uint64_t{rng()} << 32 | rng()) & all;
        } while (dc.allowed_up_mask == 0);
      }
      f.routing.classes.push_back(dc);
    }
  }
  if (o.failures) {
    AddRandomFailures(rng, f, static_cast<int>(Pick(rng, 0, 4)), static_cast<int>(Pick(rng, 0, 2)));
  }
  return f;
}

}  // namespace heddle::nuwa::testing
