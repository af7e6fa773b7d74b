// File: control/nuwa/fabric.h
//
// The fabric model every part of Nüwa works on (docs/nuwa.md §2): the DSL (dsl.h) lowers each
// topology kind into it, the compiler (compiler.h) turns it into forwarding artifacts, and the
// oracle (oracle.h) expands it into an explicit graph to check them.
//
// AI fabrics are generalized fat trees (XGFT(h; m_1..m_h; w_1..w_h), Öhring et al. 1995): h tiers
// of switches above the hosts (tier 0). A tier-i switch has m_i children; a tier-(i-1) node has
// w_i parents. A tier-i node carries a label of "position" digits a_{i+1..h} (a_j < m_j: which
// subtree it sits in) and "replica" digits b_1..b_i (b_j < w_j: which of the parallel copies it
// is). Links join a tier-(i-1) node (a_i, a_{i+1..h}; b_1..b_{i-1}) to every tier-i node
// (a_{i+1..h}; b_1..b_{i-1}, b_i), b_i < w_i. Everything about routing follows from the labels:
// a destination host's digits a_1..a_h are fields of its address; a switch whose a-digits equal
// the destination's above its tier has the destination below it and goes down through child
// a_i; any other switch goes up, to any of its w_{i+1} parents (all are on shortest paths).
//
//   k-ary fat tree          m = (k/2, k/2, k),           w = (1, k/2, k/2)
//   2-tier leaf-spine       m = (hosts/leaf, leaves),    w = (1, spines)
//   dual-homed hosts        w_1 = 2 (each host has two ToRs, which share the tier above)
//   rail-optimized          hosts are GPU NICs; leaf a_2 = su * rails + rail inside a group
//
// Planes are disjoint copies of the switch fabric: host port p of every host connects to plane
// p. Nodes are numbered per (plane, tier) by Index(): the a-digits most significant (a_h first),
// then the b-digits (b_1 first), so a fat tree's hosts are pod-major and core c sits above the
// aggregation switch c / (k/2) of every pod, as in the usual drawings.
//
// Ports of a tier-i switch: down ports 0..m_i-1 lead to child a_i = port, up ports
// m_i..m_i+w_{i+1}-1 to parent b_{i+1} = port - m_i. Host ports: plane * w_1 + b_1.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heddle::nuwa {

inline constexpr int kMaxTiers = 3;         // switch tiers above the hosts
inline constexpr uint32_t kMaxFanout = 64;  // w_i: up-port sets are 64-bit masks
inline constexpr uint32_t kMaxChildren = 1024;
inline constexpr uint32_t kMaxPlanes = 8;

enum class Kind : uint8_t { kClos2, kFatTree, kClos3, kRailOptimized };
// "clos2", "fat-tree", "clos3", "rail-optimized"
const char* KindName(Kind kind);

struct Shape {
  int tiers = 2;                            // h
  std::array<uint32_t, kMaxTiers + 1> m{};  // m[1..h]; m[0] unused
  std::array<uint32_t, kMaxTiers + 1> w{};  // w[1..h]; w[0] unused
  uint32_t planes = 1;
  uint32_t rails = 0;  // rail-optimized: GPUs (NICs) per server; rail = a_2 % rails. 0: no rails

  friend bool operator==(const Shape&, const Shape&) = default;
};

// A node: tier 0 is a host. index < NodeCount(shape, tier).
struct NodeRef {
  uint8_t plane = 0;  // always 0 for hosts (a host sits in every plane)
  uint8_t tier = 0;
  uint32_t index = 0;
  friend bool operator==(const NodeRef&, const NodeRef&) = default;
  friend bool operator<(const NodeRef& x, const NodeRef& y) {
    return std::tie(x.plane, x.tier, x.index) < std::tie(y.plane, y.tier, y.index);
  }
};

struct Label {
  std::array<uint32_t, kMaxTiers + 1> a{};  // a[j], j = tier+1..h
  std::array<uint32_t, kMaxTiers + 1> b{};  // b[j], j = 1..tier
  friend bool operator==(const Label&, const Label&) = default;
};

// Nodes of one tier in one plane (tier 0: hosts).
uint64_t NodeCount(const Shape& shape, int tier);
Label LabelOf(const Shape& shape, int tier, uint32_t index);
uint32_t IndexOf(const Shape& shape, int tier, const Label& label);
// Ports of a node: m_i + w_{i+1} for a switch (no up ports at the top), planes * w_1 for a host.
uint32_t DownPorts(const Shape& shape, int tier);  // m_tier (0 for hosts)
uint32_t UpPorts(const Shape& shape, int tier);    // w_{tier+1} (0 at the top tier)
// The node at the other end of `node`'s up port u (u < UpPorts) / down port d (d < DownPorts).
// For a host, u indexes its ports (plane * w_1 + b_1).
NodeRef Parent(const Shape& shape, NodeRef node, uint32_t up_port);
NodeRef Child(const Shape& shape, NodeRef node, uint32_t down_port);

// ---- Addresses -------------------------------------------------------------------------------
// A host's address is the fabric prefix with its digits packed as bit fields, a_1 in the lowest
// bits: addr = base | a_1 << shift[1] | a_2 << shift[2] | ... ; width[j] = ceil(log2(m_j)) (at
// least 1), shift[1] = 0, shift[j+1] = shift[j] + width[j]. The host bits must fit beside the
// prefix. The same plan gives IPv4 and IPv6 addresses (IPv6: the fields in the low 64 bits).
struct AddressPlan {
  uint32_t ipv4_base = 0;  // host order, e.g. 10.0.0.0
  uint8_t ipv4_prefix_len = 8;
  std::array<uint8_t, 16> ipv6_base{};  // network order
  uint8_t ipv6_prefix_len = 48;
  bool has_ipv6 = false;
  std::array<uint8_t, kMaxTiers + 1> width{};
  std::array<uint8_t, kMaxTiers + 1> shift{};
  friend bool operator==(const AddressPlan&, const AddressPlan&) = default;
};
// Fills width/shift from the shape and checks the fields fit.
absl::Status LayOutAddresses(const Shape& shape, AddressPlan& plan);
uint32_t HostIpv4(const Shape& shape, const AddressPlan& plan, uint32_t host);
std::array<uint8_t, 16> HostIpv6(const Shape& shape, const AddressPlan& plan, uint32_t host);
// The host an address names, or nullopt (outside the prefix, or a digit >= m_j).
std::optional<uint32_t> HostOfIpv4(const Shape& shape, const AddressPlan& plan, uint32_t addr);
std::optional<uint32_t> HostOfIpv6(const Shape& shape, const AddressPlan& plan,
                                   const std::array<uint8_t, 16>& addr);

// Text forms: "10.0.1.2", "fd00::1", and a 128-bit prefix as the DSL writes it ("10.0.0.0/16" for
// an IPv4-mapped ::ffff:a.b.c.d/96+len, else "fd00:1::/48").
std::string FormatIpv4(uint32_t addr);
std::string FormatIpv6(const std::array<uint8_t, 16>& addr);
std::string FormatPrefix128(const std::array<uint8_t, 16>& prefix, int prefix_len);

// Locally administered MACs: 02:<plane>:<tier>:<index, 24 bits>; hosts have one per port
// (02:<port>:00:<host index>) — a host's next hop on port p is its tier-1 parent's MAC.
std::array<uint8_t, 6> NodeMac(NodeRef node);
std::array<uint8_t, 6> HostPortMac(uint32_t host, uint32_t port);

// ---- Hash model ------------------------------------------------------------------------------
// How switches pick one member of an ECMP set, when known: H = hash(seed, key) with key = src
// address, dst address, IP protocol, UDP source port, UDP destination port (network order, IPv4:
// 13 bytes, IPv6: 37); member = (H >> bit_offset[tier]) % n over the n usable up ports in
// ascending port order. seed = SwitchSeed(seed_base, node).
enum class HashFunction : uint8_t { kUnknown, kCrc32, kCrc32c, kCrc16 };
// "unknown", "crc32", "crc32c", "crc16"
const char* HashFunctionName(HashFunction f);
struct HashModel {
  HashFunction function = HashFunction::kUnknown;
  uint32_t seed_base = 0;
  std::array<uint8_t, kMaxTiers + 1> bit_offset{};  // per switch tier
  friend bool operator==(const HashModel&, const HashModel&) = default;
};
uint32_t SwitchSeed(uint32_t seed_base, NodeRef node);

// ---- Routing policy --------------------------------------------------------------------------
// A destination class: destinations inside `prefix` (IPv4 as ::ffff:a.b.c.d/96+len) get their
// own host path-set cap and planes, and may be confined to some up ports of one tier (e.g.
// storage traffic through spines 0-3 only). Classes match in order; the first one wins.
struct DestinationClass {
  std::string name;
  std::array<uint8_t, 16> prefix{};
  uint8_t prefix_len = 0;                   // of the 128-bit form
  uint32_t max_paths = 0;                   // 0: the policy's
  uint32_t planes_mask = 0;                 // bit p: plane p allowed; 0: all
  int restrict_tier = 0;                    // 0: none; else up ports of tier-(restrict_tier-1)
  uint64_t allowed_up_mask = ~uint64_t{0};  //   nodes towards tier restrict_tier: bit b_tier
  friend bool operator==(const DestinationClass&, const DestinationClass&) = default;
};

struct RoutingPolicy {
  uint32_t max_paths = 16;  // cap on a host's path set per destination (1..64)
  // Rail-optimized fabrics: hosts get no fabric path to another rail (that traffic crosses
  // NVLink first, as PXN does); switches are unaffected.
  bool rail_local = false;
  std::vector<DestinationClass> classes;
  friend bool operator==(const RoutingPolicy&, const RoutingPolicy&) = default;
};

// ---- Failures --------------------------------------------------------------------------------
// A link is named by its lower end and that node's up port.
struct LinkRef {
  NodeRef lower;
  uint32_t up_port = 0;
  friend bool operator==(const LinkRef&, const LinkRef&) = default;
  friend bool operator<(const LinkRef& x, const LinkRef& y) {
    return std::tie(x.lower, x.up_port) < std::tie(y.lower, y.up_port);
  }
};
struct Failures {
  std::vector<LinkRef> links;
  std::vector<NodeRef> switches;  // tier >= 1
  friend bool operator==(const Failures&, const Failures&) = default;
};

// ---- The fabric ------------------------------------------------------------------------------
struct Fabric {
  std::string name;
  Kind kind = Kind::kClos2;
  Shape shape;
  std::array<std::string, kMaxTiers + 1> tier_names;  // [0] "host", then e.g. "tor", "agg", "core"
  std::array<double, kMaxTiers + 1> link_gbps{};      // [i]: links between tier i-1 and tier i
  AddressPlan addresses;
  HashModel hash;
  RoutingPolicy routing;
  Failures failures;
  friend bool operator==(const Fabric&, const Fabric&) = default;
};

// Shape limits (tiers 2..3, 1 <= m_i <= kMaxChildren, 1 <= w_i <= kMaxFanout, planes, rails
// dividing m_2), the address plan, classes and failures naming real nodes and links. Errors name
// the field and the fix.
absl::Status Validate(const Fabric& fabric);

// "host[12]", "tor[3]", "p1/spine[4]" (plane prefix when the fabric has several planes); the tier
// names come from fabric.tier_names. ParseNodeName also takes "tier2[4]" and a host's address.
std::string NodeName(const Fabric& fabric, NodeRef node);
absl::StatusOr<NodeRef> ParseNodeName(const Fabric& fabric, std::string_view text);

}  // namespace heddle::nuwa
