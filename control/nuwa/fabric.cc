#include "control/nuwa/fabric.h"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <charconv>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace heddle::nuwa {

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kClos2:
      return "clos2";
    case Kind::kFatTree:
      return "fat-tree";
    case Kind::kClos3:
      return "clos3";
    case Kind::kRailOptimized:
      return "rail-optimized";
  }
  return "?";
}

const char* HashFunctionName(HashFunction f) {
  switch (f) {
    case HashFunction::kUnknown:
      return "unknown";
    case HashFunction::kCrc32:
      return "crc32";
    case HashFunction::kCrc32c:
      return "crc32c";
    case HashFunction::kCrc16:
      return "crc16";
  }
  return "?";
}

namespace {

// Product of m_j for j in (tier, h] and of w_j for j in [1, tier].
uint64_t APart(const Shape& s, int tier) {
  uint64_t n = 1;
  for (int j = tier + 1; j <= s.tiers; ++j) n *= s.m[j];
  return n;
}
uint64_t BPart(const Shape& s, int tier) {
  uint64_t n = 1;
  for (int j = 1; j <= tier; ++j) n *= s.w[j];
  return n;
}

}  // namespace

uint64_t NodeCount(const Shape& shape, int tier) {
  if (tier < 0 || tier > shape.tiers) return 0;
  return APart(shape, tier) * BPart(shape, tier);
}

Label LabelOf(const Shape& shape, int tier, uint32_t index) {
  Label label;
  const uint64_t bcount = BPart(shape, tier);
  uint64_t bpart = index % bcount;
  uint64_t apart = index / bcount;
  // b digits: b_1 most significant.
  for (int j = tier; j >= 1; --j) {
    label.b[j] = static_cast<uint32_t>(bpart % shape.w[j]);
    bpart /= shape.w[j];
  }
  // a digits: a_h most significant.
  for (int j = tier + 1; j <= shape.tiers; ++j) {
    label.a[j] = static_cast<uint32_t>(apart % shape.m[j]);
    apart /= shape.m[j];
  }
  return label;
}

uint32_t IndexOf(const Shape& shape, int tier, const Label& label) {
  uint64_t apart = 0;
  for (int j = shape.tiers; j >= tier + 1; --j) apart = apart * shape.m[j] + label.a[j];
  uint64_t bpart = 0;
  for (int j = 1; j <= tier; ++j) bpart = bpart * shape.w[j] + label.b[j];
  return static_cast<uint32_t>(apart * BPart(shape, tier) + bpart);
}

uint32_t DownPorts(const Shape& shape, int tier) {
  return tier >= 1 && tier <= shape.tiers ? shape.m[tier] : 0;
}

uint32_t UpPorts(const Shape& shape, int tier) {
  if (tier == 0) return shape.planes * shape.w[1];
  return tier < shape.tiers ? shape.w[tier + 1] : 0;
}

NodeRef Parent(const Shape& shape, NodeRef node, uint32_t up_port) {
  Label label = LabelOf(shape, node.tier, node.index);
  NodeRef parent;
  parent.tier = static_cast<uint8_t>(node.tier + 1);
  uint32_t b = up_port;
  parent.plane = node.plane;
  if (node.tier == 0) {
    parent.plane = static_cast<uint8_t>(up_port / shape.w[1]);
    b = up_port % shape.w[1];
  }
  label.a[parent.tier] = 0;
  label.b[parent.tier] = b;
  parent.index = IndexOf(shape, parent.tier, label);
  return parent;
}

NodeRef Child(const Shape& shape, NodeRef node, uint32_t down_port) {
  Label label = LabelOf(shape, node.tier, node.index);
  NodeRef child;
  child.tier = static_cast<uint8_t>(node.tier - 1);
  child.plane = child.tier == 0 ? 0 : node.plane;
  label.a[node.tier] = down_port;
  label.b[node.tier] = 0;
  child.index = IndexOf(shape, child.tier, label);
  return child;
}

absl::Status LayOutAddresses(const Shape& shape, AddressPlan& plan) {
  int shift = 0;
  for (int j = 1; j <= shape.tiers; ++j) {
    const uint32_t m = shape.m[j];
    int width = m <= 1 ? 1 : static_cast<int>(std::bit_width(m - 1));
    plan.width[j] = static_cast<uint8_t>(width);
    plan.shift[j] = static_cast<uint8_t>(shift);
    shift += width;
  }
  for (int j = shape.tiers + 1; j <= kMaxTiers; ++j) plan.width[j] = plan.shift[j] = 0;
  if (plan.ipv4_prefix_len > 32 || shift > 32 - plan.ipv4_prefix_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "addressing.ipv4: the host fields need %d bits but a /%d prefix leaves %d; use a shorter "
        "prefix (at most /%d)",
        shift, plan.ipv4_prefix_len, 32 - std::min<int>(plan.ipv4_prefix_len, 32), 32 - shift));
  }
  const uint32_t host_mask = plan.ipv4_prefix_len == 0
                                 ? ~0u
                                 : (plan.ipv4_prefix_len == 32 ? 0u : ~0u >> plan.ipv4_prefix_len);
  if ((plan.ipv4_base & host_mask) != 0) {
    return absl::InvalidArgumentError(
        "addressing.ipv4: the prefix has host bits set; give the network address");
  }
  if (plan.has_ipv6) {
    if (plan.ipv6_prefix_len > 64) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "addressing.ipv6: /%d leaves no room for the host fields in the low 64 bits; use /64 or "
          "shorter",
          plan.ipv6_prefix_len));
    }
    for (int bit = plan.ipv6_prefix_len; bit < 128; ++bit) {
      if (plan.ipv6_base[bit / 8] & (0x80 >> (bit % 8))) {
        return absl::InvalidArgumentError(
            "addressing.ipv6: the prefix has host bits set; give the network address");
      }
    }
  }
  return absl::OkStatus();
}

namespace {

uint64_t PackHost(const Shape& shape, const AddressPlan& plan, uint32_t host) {
  const Label label = LabelOf(shape, 0, host);
  uint64_t v = 0;
  for (int j = 1; j <= shape.tiers; ++j) v |= uint64_t{label.a[j]} << plan.shift[j];
  return v;
}

std::optional<uint32_t> UnpackHost(const Shape& shape, const AddressPlan& plan, uint64_t v) {
  Label label;
  int used = 0;
  for (int j = 1; j <= shape.tiers; ++j) {
    uint64_t digit = (v >> plan.shift[j]) & ((uint64_t{1} << plan.width[j]) - 1);
    if (digit >= shape.m[j]) return std::nullopt;
    label.a[j] = static_cast<uint32_t>(digit);
    used = plan.shift[j] + plan.width[j];
  }
  if (used < 64 && (v >> used) != 0) return std::nullopt;
  return IndexOf(shape, 0, label);
}

}  // namespace

uint32_t HostIpv4(const Shape& shape, const AddressPlan& plan, uint32_t host) {
  return plan.ipv4_base | static_cast<uint32_t>(PackHost(shape, plan, host));
}

std::array<uint8_t, 16> HostIpv6(const Shape& shape, const AddressPlan& plan, uint32_t host) {
  std::array<uint8_t, 16> addr = plan.ipv6_base;
  const uint64_t v = PackHost(shape, plan, host);
  for (int i = 0; i < 8; ++i) addr[15 - i] |= static_cast<uint8_t>(v >> (8 * i));
  return addr;
}

std::optional<uint32_t> HostOfIpv4(const Shape& shape, const AddressPlan& plan, uint32_t addr) {
  const uint32_t net_mask = plan.ipv4_prefix_len == 0 ? 0u : ~0u << (32 - plan.ipv4_prefix_len);
  if ((addr & net_mask) != plan.ipv4_base) return std::nullopt;
  return UnpackHost(shape, plan, addr & ~net_mask);
}

std::optional<uint32_t> HostOfIpv6(const Shape& shape, const AddressPlan& plan,
                                   const std::array<uint8_t, 16>& addr) {
  if (!plan.has_ipv6) return std::nullopt;
  for (int bit = 0; bit < plan.ipv6_prefix_len; ++bit) {
    const uint8_t m = 0x80 >> (bit % 8);
    if ((addr[bit / 8] & m) != (plan.ipv6_base[bit / 8] & m)) return std::nullopt;
  }
  // Bits between the prefix and the low 64 must be zero.
  for (int bit = plan.ipv6_prefix_len; bit < 64; ++bit) {
    if (addr[bit / 8] & (0x80 >> (bit % 8))) return std::nullopt;
  }
  uint64_t v = 0;
  for (int i = 8; i < 16; ++i) v = v << 8 | addr[i];
  return UnpackHost(shape, plan, v);
}

std::string FormatIpv4(uint32_t a) {
  return absl::StrCat(a >> 24, ".", (a >> 16) & 255, ".", (a >> 8) & 255, ".", a & 255);
}

std::string FormatIpv6(const std::array<uint8_t, 16>& a) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, a.data(), buf, sizeof(buf));
  return buf;
}

std::string FormatPrefix128(const std::array<uint8_t, 16>& p, int len) {
  const bool v4 = len >= 96 &&
                  std::all_of(p.begin(), p.begin() + 10, [](uint8_t b) { return b == 0; }) &&
                  p[10] == 0xff && p[11] == 0xff;
  if (!v4) return absl::StrCat(FormatIpv6(p), "/", len);
  return absl::StrCat(
      FormatIpv4(uint32_t{p[12]} << 24 | uint32_t{p[13]} << 16 | uint32_t{p[14]} << 8 | p[15]), "/",
      len - 96);
}

std::array<uint8_t, 6> NodeMac(NodeRef node) {
  return {0x02,
          node.plane,
          node.tier,
          static_cast<uint8_t>(node.index >> 16),
          static_cast<uint8_t>(node.index >> 8),
          static_cast<uint8_t>(node.index)};
}

std::array<uint8_t, 6> HostPortMac(uint32_t host, uint32_t port) {
  return {0x02,
          static_cast<uint8_t>(port),
          0x00,
          static_cast<uint8_t>(host >> 16),
          static_cast<uint8_t>(host >> 8),
          static_cast<uint8_t>(host)};
}

uint32_t SwitchSeed(uint32_t seed_base, NodeRef node) {
  // A fixed mix (murmur3 finaliser) of the base and the node's identity: distinct per switch,
  // reproducible by anyone who knows the base.
  uint32_t h = seed_base ^ (uint32_t{node.plane} << 28) ^ (uint32_t{node.tier} << 24) ^ node.index;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

namespace {

absl::Status CheckNode(const Fabric& f, NodeRef n, absl::string_view what) {
  if (n.tier > f.shape.tiers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: tier %d does not exist (the fabric has %d switch tiers)", what, n.tier,
                        f.shape.tiers));
  }
  if (n.tier > 0 && n.plane >= f.shape.planes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: plane %d does not exist (the fabric has %d)", what, n.plane, f.shape.planes));
  }
  if (n.index >= NodeCount(f.shape, n.tier)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s index %u out of range (%u of them)",
                                                      what, f.tier_names[n.tier], n.index,
                                                      NodeCount(f.shape, n.tier)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const Fabric& f) {
  const Shape& s = f.shape;
  if (s.tiers < 2 || s.tiers > kMaxTiers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fabric: %d switch tiers; heddle compiles 2- and 3-tier fabrics", s.tiers));
  }
  for (int j = 1; j <= s.tiers; ++j) {
    if (s.m[j] < 1 || s.m[j] > kMaxChildren) {
      return absl::InvalidArgumentError(
          absl::StrFormat("fabric: %s switches have %u children; allowed 1..%u", f.tier_names[j],
                          s.m[j], kMaxChildren));
    }
    if (s.w[j] < 1 || s.w[j] > kMaxFanout) {
      return absl::InvalidArgumentError(
          absl::StrFormat("fabric: each %s has %u uplinks to %s switches; allowed 1..%u",
                          f.tier_names[j - 1], s.w[j], f.tier_names[j], kMaxFanout));
    }
  }
  if (s.planes < 1 || s.planes > kMaxPlanes || s.planes * s.w[1] > kMaxFanout) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fabric: %u planes x %u host uplinks; allowed 1..%u planes and at most %u host ports",
        s.planes, s.w[1], kMaxPlanes, kMaxFanout));
  }
  if (s.rails != 0 && s.m[2] % s.rails != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fabric: %u leaves per group is not a multiple of %u rails", s.m[2], s.rails));
  }
  uint64_t total = 0;
  for (int t = 0; t <= s.tiers; ++t) total += NodeCount(s, t) * (t == 0 ? 1 : s.planes);
  if (total > (uint64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fabric: %u nodes; at most 16M (24-bit node indexes)", total));
  }
  AddressPlan plan = f.addresses;
  if (absl::Status st = LayOutAddresses(s, plan); !st.ok()) return st;
  if (plan.width != f.addresses.width || plan.shift != f.addresses.shift) {
    return absl::InvalidArgumentError(
        "addressing: the field layout does not match the shape; call LayOutAddresses()");
  }
  if (f.routing.max_paths < 1 || f.routing.max_paths > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("routing.max_paths: %u; allowed 1..64", f.routing.max_paths));
  }
  if (f.routing.rail_local && s.rails == 0) {
    return absl::InvalidArgumentError(
        "routing.rail_local: the fabric has no rails; set fabric.rails or drop rail_local");
  }
  for (const DestinationClass& c : f.routing.classes) {
    if (c.max_paths > 64) {
      return absl::InvalidArgumentError(
          absl::StrFormat("routing.classes[%s].max_paths: %u; allowed 0..64", c.name, c.max_paths));
    }
    if (c.planes_mask >> s.planes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "routing.classes[%s].planes: a plane beyond the fabric's %u", c.name, s.planes));
    }
    if (c.restrict_tier != 0) {
      if (c.restrict_tier < 2 || c.restrict_tier > s.tiers) {
        return absl::InvalidArgumentError(
            absl::StrFormat("routing.classes[%s].via: tier %d; only tiers 2..%d can be restricted",
                            c.name, c.restrict_tier, s.tiers));
      }
      const uint32_t w = s.w[c.restrict_tier];
      const uint64_t all = w == 64 ? ~uint64_t{0} : (uint64_t{1} << w) - 1;
      if ((c.allowed_up_mask & all) == 0 || (c.allowed_up_mask & ~all) != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "routing.classes[%s].via: the allowed %s indexes must be within 0..%u and not empty",
            c.name, f.tier_names[c.restrict_tier], w - 1));
      }
    }
  }
  for (const LinkRef& l : f.failures.links) {
    if (absl::Status st = CheckNode(f, l.lower, "failures.links"); !st.ok()) return st;
    if (l.lower.tier >= s.tiers || l.up_port >= UpPorts(s, l.lower.tier)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("failures.links: %s has no up port %u", NodeName(f, l.lower), l.up_port));
    }
  }
  for (const NodeRef& n : f.failures.switches) {
    if (n.tier == 0) {
      return absl::InvalidArgumentError("failures.switches: a host is not a switch");
    }
    if (absl::Status st = CheckNode(f, n, "failures.switches"); !st.ok()) return st;
  }
  return absl::OkStatus();
}

std::string NodeName(const Fabric& fabric, NodeRef node) {
  const std::string& tier = fabric.tier_names[node.tier];
  std::string base =
      absl::StrCat(tier.empty() ? absl::StrCat("tier", node.tier) : tier, "[", node.index, "]");
  if (node.tier > 0 && fabric.shape.planes > 1) return absl::StrCat("p", node.plane, "/", base);
  return base;
}

absl::StatusOr<NodeRef> ParseNodeName(const Fabric& fabric, std::string_view text_in) {
  const absl::string_view text(text_in.data(), text_in.size());
  absl::string_view rest = text;
  NodeRef node;
  // An address names a host.
  if (rest.find('[') == absl::string_view::npos) {
    unsigned a, b, c, d;
    char tail;
    std::string s(rest);
    if (std::sscanf(s.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a < 256 && b < 256 &&
        c < 256 && d < 256) {
      auto host = HostOfIpv4(fabric.shape, fabric.addresses, a << 24 | b << 16 | c << 8 | d);
      if (!host) {
        return absl::NotFoundError(
            absl::StrCat("node ", text, ": no host of fabric ", fabric.name, " has that address"));
      }
      return NodeRef{0, 0, *host};
    }
    return absl::InvalidArgumentError(absl::StrCat("node ", text, ": expected NAME[INDEX] (e.g. ",
                                                   NodeName(fabric, NodeRef{0, 1, 0}),
                                                   "), pN/NAME[INDEX] or a host's IPv4 address"));
  }
  if (absl::ConsumePrefix(&rest, "p")) {
    size_t slash = rest.find('/');
    uint32_t plane;
    if (slash == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, slash), &plane) ||
        plane >= kMaxPlanes) {
      rest = text;  // a tier name that starts with 'p' ("pod-switch"): parse it whole
    } else {
      node.plane = static_cast<uint8_t>(plane);
      rest.remove_prefix(slash + 1);
    }
  }
  const size_t open = rest.find('[');
  absl::string_view tier_name = rest.substr(0, open);
  absl::string_view index_text = rest.substr(open + 1);
  if (!absl::ConsumeSuffix(&index_text, "]")) {
    return absl::InvalidArgumentError(absl::StrCat("node ", text, ": missing ']'"));
  }
  int tier = -1;
  for (int t = 0; t <= fabric.shape.tiers; ++t) {
    if (tier_name == fabric.tier_names[t] || tier_name == absl::StrCat("tier", t)) tier = t;
  }
  if (tier < 0) {
    std::string names;
    for (int t = 0; t <= fabric.shape.tiers; ++t) {
      absl::StrAppend(&names, t ? ", " : "", fabric.tier_names[t]);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("node ", text, ": unknown tier '", tier_name, "'; this fabric has ", names));
  }
  uint32_t index;
  if (!absl::SimpleAtoi(index_text, &index)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", text, ": bad index '", index_text, "'"));
  }
  node.tier = static_cast<uint8_t>(tier);
  node.index = index;
  if (tier == 0) node.plane = 0;
  if (absl::Status st = CheckNode(fabric, node, absl::StrCat("node ", text)); !st.ok()) return st;
  return node;
}

}  // namespace heddle::nuwa
