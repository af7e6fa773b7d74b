// File: dataplane/fwd/artifact.h
//
// Nüwa forwarding artifacts (docs/nuwa.md §4): what the compiler (control/nuwa) writes and what
// switches, heddled and the simulator load. One artifact per node *role* — the switches of one
// tier, or the hosts — holds the role's routing rule, which every node of the role evaluates with
// its own label (fabric.h: the shape and the node index are all it needs), plus the few
// per-node exceptions that failures and policies cause. No per-destination table exists anywhere:
// a lookup extracts the destination's digits from its address and compares them with the node's.
//
//   ArtifactSpec spec = ...;                           // control/nuwa/compiler.h fills it
//   std::vector<uint8_t> bytes = Serialize(spec);      // versioned, checksummed, mmap-able
//   HEDDLE_ASSIGN_OR_RETURN(ArtifactSpec back, Decode(bytes));  // validates everything
//   HEDDLE_ASSIGN_OR_RETURN(SwitchTable t, SwitchTable::Build(back, /*plane=*/0, /*index=*/12));
//   NextHops nh = t.Lookup4(dst);                      // no allocation, no locks
//
// This layer has no dependency on control/: the shape, address plan and hash model are repeated
// here as plain fields (control/nuwa/fabric.h documents their meaning).
//
// Binary layout (little-endian, every section 8-byte aligned, so a reader can use a mapped file
// in place): a 64-byte header (magic "HDLNUWA1", format version, role, tier, total length, CRC-32C
// of everything after the header, a CRC-32C of the header itself, fabric digest, section count)
// followed by a section directory and typed sections (SHAPE, ADDR, HASH, CLASSES (the routing
// policy: max_paths, rail_local, the classes), NODE_MASKS, OVERRIDES, ENTROPY, NAME,
// DST_EXCEPTIONS (format version 2: hosts' destination-side failures)); artifact.cc
// spells out every field. With both checksums no byte of an artifact goes unchecked. Decode()
// rejects a wrong magic, an unknown version, a length or checksum mismatch, sections out of bounds
// or overlapping, unsorted or duplicate keys, values out of range (a digit, a port, a tier),
// non-zero padding, with an error that names the section and the field.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/fwd/internal/fields.h"

namespace heddle::fwd {

// Version 2 added DST_EXCEPTIONS and the wildcard override node (kAllNodes).
inline constexpr uint16_t kArtifactVersion = 2;
inline constexpr int kMaxTiers = 3;
inline constexpr int kMaxHostPaths = 64;

enum class Role : uint8_t { kHost = 0, kSwitch = 1 };

// ---- Spec: the decoded form ------------------------------------------------------------------
struct ShapeSpec {
  uint8_t tiers = 2;
  uint8_t planes = 1;
  uint16_t rails = 0;
  std::array<uint32_t, kMaxTiers + 1> m{};  // [1..tiers]
  std::array<uint32_t, kMaxTiers + 1> w{};
  friend bool operator==(const ShapeSpec&, const ShapeSpec&) = default;
};

struct AddressSpec {
  uint32_t ipv4_base = 0;  // host order
  uint8_t ipv4_prefix_len = 0;
  bool has_ipv6 = false;
  uint8_t ipv6_prefix_len = 0;
  std::array<uint8_t, 16> ipv6_base{};
  std::array<uint8_t, kMaxTiers + 1> width{};
  std::array<uint8_t, kMaxTiers + 1> shift{};
  friend bool operator==(const AddressSpec&, const AddressSpec&) = default;
};

// control/nuwa/fabric.h HashModel. function: 0 unknown, 1 crc32, 2 crc32c, 3 crc16.
struct HashSpec {
  uint8_t function = 0;
  uint32_t seed_base = 0;
  std::array<uint8_t, kMaxTiers + 1> bit_offset{};
  friend bool operator==(const HashSpec&, const HashSpec&) = default;
};

// control/nuwa/fabric.h DestinationClass.
struct ClassSpec {
  std::string name;
  std::array<uint8_t, 16> prefix{};  // IPv4 as ::ffff:a.b.c.d
  uint8_t prefix_len = 0;
  uint8_t max_paths = 0;
  uint8_t planes_mask = 0;
  uint8_t restrict_tier = 0;
  uint64_t allowed_up_mask = ~uint64_t{0};
  friend bool operator==(const ClassSpec&, const ClassSpec&) = default;
};

// Failures seen from one switch, for destinations whose down-reachability the failures did not
// change: the up ports still usable towards a destination whose lowest common ancestor with this
// node sits at tier L (up_mask[L], L = tier+1..tiers). Nodes without an entry use all up ports.
struct NodeMaskSpec {
  uint8_t plane = 0;
  uint32_t index = 0;
  std::array<uint64_t, kMaxTiers + 1> up_mask{};
  friend bool operator==(const NodeMaskSpec&, const NodeMaskSpec&) = default;
};

// The next-hop set of one node towards some destinations, when the rule (with masks) is wrong for
// them: destinations whose down-reachability a failure changed. level 1: every host of tier-1
// group `dst` (host index / m_1); level 0: host `dst` alone (host-link failures). A level-1 kDown
// override of a tier-1 switch goes down to each destination's own port (a_1), whatever its
// down_port says.
enum class HopKind : uint8_t {
  kDown = 0,         // one down port
  kUp = 1,           // a set of up ports
  kUnreachable = 2,  // no valley-free path (drop, counted)
  kNotInFabric = 3,  // the address is no host of this fabric
  kLocal = 4,        // host tables only: the destination is this host
};
struct NextHops {
  HopKind kind = HopKind::kNotInFabric;
  uint16_t down_port = 0;  // kDown: the port (0..m_tier-1)
  uint64_t up_mask = 0;    // kUp: bit u set = up port m_tier + u
  friend bool operator==(const NextHops&, const NextHops&) = default;
};
// OverrideSpec::node of a wildcard override (switch artifacts only, kind kUnreachable): the
// destination is unreachable from every node of the tier in that plane that has no override of
// its own for the same (level, dst). One entry replaces the per-node kUnreachable overrides of a
// dead host or tier-1 group.
inline constexpr uint32_t kAllNodes = 0xFFFFFFFF;
struct OverrideSpec {
  uint8_t plane = 0;
  uint32_t node = 0;  // a node index of the tier, or kAllNodes
  uint8_t level = 1;
  uint32_t dst = 0;
  NextHops hops;
  friend bool operator==(const OverrideSpec&, const OverrideSpec&) = default;
};

// Host artifacts: UDP source ports (or flow labels) that take distinct paths through the fabric
// towards a destination whose lowest common ancestor with the source is at tier L (entropy[L],
// L = 2..tiers; a destination under the same tier-1 switch has one path). With a known hash model
// and power-of-two fanouts the compiler picks values whose ECMP choices differ at some tier below
// L for *every* (source, destination) pair (docs/nuwa.md §5: CRC is affine in the key, so the
// choice vectors of two source ports differ by a constant that does not depend on the addresses).
// With the model `unknown`, consecutive values.
struct EntropySpec {
  std::array<std::vector<uint32_t>, kMaxTiers + 1> by_lca;
  friend bool operator==(const EntropySpec&, const EntropySpec&) = default;
};

// Host artifacts: what a failure near a destination does to every source's path set. Key: one
// destination host (level 0) or every host of one tier-1 group (level 1, dst = host / m_1); a
// host looks for level 0 first. For a source whose lowest common ancestor with the destination
// is at tier L:
//   ports[L]  the host ports (bit plane * w_1 + b_1) that still lead to the destination on a
//             shortest valley-free path from a source whose own climb to tier L is intact; the
//             host ands it with its node mask for L. 0 in every used tier: the destination is
//             unreachable from every host (the wildcard "unreachable").
//   paths[L]  the most shortest paths any such source still has through one port (at most 64):
//             the host uses at most this many entropy values per port, the first of its list.
// Sources whose own failures interact with the destination's (both ports[L] and their mask allow
// a port that no longer leads there) get host overrides (OverrideSpec, node = the source host).
struct DstExceptionSpec {
  uint8_t level = 1;
  uint32_t dst = 0;
  std::array<uint64_t, kMaxTiers + 1> ports{};  // [L], L = 1..tiers; others 0
  std::array<uint8_t, kMaxTiers + 1> paths{};   // [L]; 0 exactly when ports[L] is 0
  friend bool operator==(const DstExceptionSpec&, const DstExceptionSpec&) = default;
};

struct ArtifactSpec {
  uint16_t version = kArtifactVersion;
  Role role = Role::kSwitch;
  uint8_t tier = 0;            // switch artifacts: the tier (1..tiers); hosts: 0
  uint64_t fabric_digest = 0;  // the same in every artifact of one compilation
  std::string fabric_name;
  std::string role_name;  // "tor", "spine", "host", ...
  ShapeSpec shape;
  AddressSpec addresses;
  HashSpec hash;
  uint8_t max_paths = 16;  // hosts: the policy's path-set cap
  bool rail_local = false;
  std::vector<ClassSpec> classes;
  std::vector<NodeMaskSpec> node_masks;          // sorted by (plane, index), unique
  std::vector<OverrideSpec> overrides;           // sorted by (plane, node, level, dst), unique
  EntropySpec entropy;                           // hosts only
  std::vector<DstExceptionSpec> dst_exceptions;  // hosts only; sorted by (level, dst), unique
  friend bool operator==(const ArtifactSpec&, const ArtifactSpec&) = default;
};

// Deterministic: the same spec gives the same bytes.
std::vector<uint8_t> Serialize(const ArtifactSpec& spec);
// Validates every byte it reads; never reads outside `bytes`.
absl::StatusOr<ArtifactSpec> Decode(std::span<const uint8_t> bytes);
// Artifacts are small: a file larger than this is no artifact.
inline constexpr size_t kMaxArtifactBytes = size_t{4} << 20;
// The bytes of an artifact file, undecoded (for tools that send them on). Errors name the path:
// "cannot read PATH: <errno text>", "PATH: larger than N bytes".
absl::StatusOr<std::vector<uint8_t>> ReadArtifactBytes(const std::string& path);
// Reads a file with ReadArtifactBytes() and decodes it; errors name the path.
absl::StatusOr<ArtifactSpec> ReadArtifactFile(const std::string& path);
// The CRC-32C the header carries (for `show`).
uint32_t ArtifactChecksum(std::span<const uint8_t> bytes);

// ---- Lookup: switches ------------------------------------------------------------------------
// A switch's table: the role's rule bound to one node, with that node's masks and overrides
// gathered into a small open-addressed table. Built off the hot path; Lookup is a handful of
// shifts and compares plus, only when the node has overrides, one probe.
class SwitchTable {
 public:
  static absl::StatusOr<SwitchTable> Build(const ArtifactSpec& spec, uint8_t plane, uint32_t index);
  NextHops Lookup4(uint32_t dst) const;          // host order
  NextHops Lookup6(const uint8_t* dst16) const;  // network order
  void LookupBulk4(const uint32_t* dst, NextHops* out, size_t n) const;
  size_t memory_bytes() const;

 private:
  struct OverrideSlot {
    uint32_t key = 0;  // 0: empty; else 1 + (level << 24 | dst)
    NextHops hops;
  };
  struct Restriction {
    internal::ClassMatch match;
    uint64_t allowed = ~uint64_t{0};  // the class's allowed_up_mask if it restricts tier + 1
  };
  NextHops Resolve(uint64_t v, uint64_t allowed) const;
  NextHops LookupGeneral4(uint32_t dst) const;
  // With overrides beside the fast path: true if `dst` lies in a tier-1 group that has one.
  bool OverriddenGroup4(uint32_t dst) const {
    if ((dst & ~fields_.v4_field_bits) != fields_.v4_base) return false;
    const uint32_t g = ((dst & fields_.v4_field_bits) >> fields_.shift[2]) & group_mask_;
    return override_groups_[g >> 6] >> (g & 63) & 1;
  }
  const NextHops* FindOverride(uint32_t key) const;
  uint64_t Allowed4(uint32_t dst) const;
  uint64_t Allowed6(const uint8_t* dst16) const;

  internal::Fields fields_;
  uint8_t tier_ = 0;
  uint8_t down_shift_ = 0;
  uint32_t down_mask_ = 0;
  uint64_t own_above_ = 0;   // this node's a-digits above its tier, packed like an address
  uint64_t above_mask_ = 0;  // the field bits of tiers above this node's
  // The fast path: no classes restrict this tier, the same up mask for every LCA tier (no
  // failures near this node): one answer for every destination reached upwards. Overrides (a dead
  // host or group elsewhere, often a wildcard in every switch of the plane) leave it in use: a bit
  // per tier-1 group (its digits above tier 1, packed as in the address) marks the groups that
  // have any, and only their destinations take the general path.
  internal::FastSwitch4 fast_;
  internal::FastSwitch4Fn fast_fn_ = nullptr;      // null: the general path
  std::vector<uint64_t> override_groups_;          // empty: no overrides beside the fast path
  uint32_t group_mask_ = 0;
  std::array<uint64_t, kMaxTiers + 1> up_mask_{};  // by LCA tier: usable up ports
  // Classes in match order up to the last one that restricts tier + 1 (empty: none does).
  std::vector<Restriction> restrictions_;
  std::vector<OverrideSlot> overrides_;  // open-addressed, power-of-two size; empty: none
  uint32_t override_shift_ = 32;
};

// ---- Lookup: hosts ---------------------------------------------------------------------------
// One path of a host's path set: the port it leaves on (plane * w_1 + b_1), the next hop's MAC
// (that port's tier-1 switch) and the entropy to write.
struct HostPath {
  uint16_t port = 0;
  uint32_t entropy = 0;
  std::array<uint8_t, 6> next_hop_mac{};
  friend bool operator==(const HostPath&, const HostPath&) = default;
};

// A host's view: its path set per destination. Paths interleave ports first (port 0 entropy 0,
// port 1 entropy 0, ..., port 0 entropy 1, ...) so a cap keeps every port in use; the class of the
// destination may lower the cap and drop planes; rail-local fabrics give no path to other rails.
// The entropy list is entropy.by_lca[L] for the LCA tier L; a tier without a list (usually L = 1,
// the same ToR group) gets one value, the first of the lowest tier that has a list (else 0).
// Host artifacts may carry failures too, keyed like a switch's with plane 0 and the host index:
// a node mask (bit p = host port p) narrows the ports per LCA tier, an override (kUp: the ports,
// kUnreachable) replaces them for one destination host or tier-1 group. A destination exception
// (DstExceptionSpec, shared by all hosts) narrows the ports and caps the entropy values per port
// for one destination host or group; all of it is looked up without allocating.
class HostTable {
 public:
  static absl::StatusOr<HostTable> Build(const ArtifactSpec& spec, uint32_t host);
  // Writes up to `cap` paths; returns how many, with `kind` (kUp when paths were written,
  // kLocal, kUnreachable or kNotInFabric otherwise).
  uint32_t Paths4(uint32_t dst, HostPath* out, uint32_t cap, HopKind* kind) const;
  uint32_t Paths6(const uint8_t* dst16, HostPath* out, uint32_t cap, HopKind* kind) const;

  // The same information as (prefix, path set) pairs, most specific first, for PIN's PathTable
  // (dataplane/lb/path.h): one prefix per subtree level around this host, refined where classes
  // or rails make destinations differ. A few to a few thousand entries.
  struct PrefixPaths {
    std::array<uint8_t, 16> prefix{};  // IPv4 as ::ffff:a.b.c.d
    uint8_t prefix_len = 0;
    HopKind kind = HopKind::kUp;
    std::vector<HostPath> paths;
  };
  std::vector<PrefixPaths> PrefixPathSets(bool ipv6) const;
  uint32_t host() const { return host_; }

 private:
  struct HostClass {
    internal::ClassMatch match;
    std::array<uint8_t, 16> prefix{};
    uint8_t prefix_len = 0;
    uint32_t max_paths = 0;  // the effective cap for the class
    uint64_t port_mask = 0;  // the ports of the class's planes
  };
  struct HostOverride {
    uint32_t key = 0;  // level << 24 | dst
    NextHops hops;
  };
  struct DstException {
    uint32_t key = 0;  // level << 24 | dst
    std::array<uint64_t, kMaxTiers + 1> ports{};
    std::array<uint8_t, kMaxTiers + 1> paths{};
  };
  int Class4(uint32_t dst) const;
  int Class6(const uint8_t* dst16) const;
  uint32_t Paths(uint64_t v, int cls, HostPath* out, uint32_t cap, HopKind* kind) const;
  // The path set towards a destination with LCA tier `lca`, class `cls` (-1: none), under a
  // host override `ovr` and a destination exception `dx` (either may be null).
  uint32_t Compose(int lca, int cls, const NextHops* ovr, const DstException* dx, HostPath* out,
                   uint32_t cap, HopKind* kind) const;
  const NextHops* FindOverride(uint32_t level, uint32_t dst) const;
  const DstException* FindDstException(uint32_t level, uint32_t dst) const;

  internal::Fields fields_;
  AddressSpec addresses_;
  uint32_t host_ = 0;
  uint64_t own_fields_ = 0;  // this host's digits, packed like an address
  uint32_t rails_ = 0;       // rail_local only; else 0
  uint32_t own_rail_ = 0;    // a_2 % rails
  uint32_t max_paths_ = 0;
  uint64_t all_ports_ = 0;
  std::array<uint64_t, kMaxTiers + 1> port_mask_{};           // by LCA tier (node masks applied)
  std::array<std::vector<uint32_t>, kMaxTiers + 1> entropy_;  // by LCA tier, never empty
  std::array<std::array<uint8_t, 6>, kMaxHostPaths> port_mac_{};
  std::vector<HostClass> classes_;
  std::vector<HostOverride> overrides_;       // sorted by key
  std::vector<DstException> dst_exceptions_;  // sorted by key
};

}  // namespace heddle::fwd
