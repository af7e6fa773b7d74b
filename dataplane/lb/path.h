// File: dataplane/lb/path.h
//
// The path model of PIN and the load balancers (docs/pin.md §1). A *path* is an uplink port plus
// an *entropy* value: the RoCEv2 UDP source port (IPv4 and IPv6) or the IPv6 flow label, the
// field the fabric's ECMP hash reads, so that different entropies take different fabric paths.
// Each destination has a *path set*: the paths a packet towards it may take. A balancer picks an
// index into the set; Rewrite() (rewrite.h) writes the path's entropy into the packet and the
// caller sends it on the path's port.
//
//   HEDDLE_ASSIGN_OR_RETURN(PathTableSpec spec, PathTableSpecFromConfig(config.paths, field));
//   HEDDLE_ASSIGN_OR_RETURN(std::unique_ptr<const PathTable> table, PathTable::Build(spec));
//   PathSetView set = table->Lookup(frame, desc);  // longest prefix match on the destination
//   if (set.size != 0) { const Path& p = set[i]; ... }
//
// Where path sets come from: from configuration (N entropies per destination prefix, or a
// default set for every destination, PathTableSpecFromConfig()), or from the installed routing
// artifact (Nüwa, dataplane/fwd; heddled's FwdService), which knows the uplink, the next-hop MAC
// and entropy values that the fabric actually spreads over distinct paths. Both produce a
// PathTableSpec; the table is built and validated off the hot path, then published whole (an RCU
// pointer swap in the pipeline), and never changes afterwards. Every table carries a distinct
// generation number, so per-flow state can tell that the paths it refers to were replaced.
//
// Lookup() is a longest-prefix match by binary search within each prefix length in use (longest
// first): meant for configuration-sized tables (tens to thousands of prefixes). PIN looks it up
// once per flow, not per packet.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/pkt/parse.h"

namespace heddle::lb {

// Paths per set: path indexes are one byte in the per-flow state, and the adaptive balancer's
// per-path scores are kept for this many.
inline constexpr int kMaxPaths = 64;
using Mac = std::array<uint8_t, 6>;

// Where the entropy goes. The UDP source port is covered by the RoCEv2 ICRC (rewritten with an
// incremental ICRC update); the IPv6 flow label is masked in the ICRC and is not in the UDP
// pseudo-header, so rewriting it touches nothing else. IPv4 frames have no flow label: with
// kIpv6FlowLabel they get the UDP source port (the entropy's low 16 bits).
enum class EntropyField : uint8_t { kUdpSourcePort, kIpv6FlowLabel };
// "udp-sport", "flow-label"
const char* EntropyFieldName(EntropyField f);

inline constexpr uint32_t kMaxUdpSport = 0xffff;
inline constexpr uint32_t kMaxFlowLabel = 0xfffff;

// One path: 16 bytes.
struct Path {
  uint32_t entropy = 0;           // UDP source port (16 bits) or IPv6 flow label (20 bits)
  uint16_t port = 0;              // index of the uplink port the path leaves on
  bool has_next_hop_mac = false;  // Rewrite() sets the destination MAC to next_hop_mac
  uint8_t reserved = 0;
  Mac next_hop_mac{};
  uint16_t reserved2 = 0;

  friend bool operator==(const Path&, const Path&) = default;
};
static_assert(sizeof(Path) == 16);

// A path set as the hot path sees it: a view into the table that owns it.
struct PathSetView {
  const Path* paths = nullptr;
  uint32_t size = 0;  // 0: no path set (the destination is not balanced)
  uint32_t id = 0;    // index of the set in its table
  const Path& operator[](size_t i) const { return paths[i]; }
};

// An address prefix. IPv4 prefixes are IPv4-mapped IPv6 ones (::ffff:a.b.c.d/96+len).
struct Prefix {
  std::array<uint8_t, 16> addr{};
  uint8_t len = 0;  // 0..128
};
// "10.1.0.0/16", "fd00::/64", "10.0.0.1" (a host: /32 or /128). Host bits must be zero.
absl::StatusOr<Prefix> ParsePrefix(std::string_view text);
// "10.1.0.0/16" (IPv4-mapped prefixes of length >= 96 in dotted form), "fd00::/64".
std::string PrefixString(const Prefix& prefix);

// A route to kRouteNoSet says "these destinations are not balanced" even where a shorter prefix
// (or the default set) would give them a set: the routing artifact's unreachable destinations and
// the host's own address inside its subtree's prefix.
inline constexpr uint32_t kRouteNoSet = 0xffffffff;

// The installed form of a path table: what the configuration gives (lb.paths) or the installed
// routing artifact (Nüwa, docs/nuwa-install.md).
struct PathTableSpec {
  struct Route {
    Prefix prefix;
    uint32_t set = 0;  // index into sets, or kRouteNoSet
  };
  std::vector<std::vector<Path>> sets;  // each 1..kMaxPaths paths
  std::vector<Route> routes;
  int32_t default_set = -1;  // for destinations no route matches; -1: those are not balanced
};

// The configuration form (until the routing artifact lands): per destination prefix, N entropies
// on each of the listed uplink ports — the cross product is the path set — or explicit entropy
// values; plus a default set for every other destination.
struct PrefixPathsConfig {
  std::string prefix;                 // "10.1.0.0/16"; ignored for the default set
  std::vector<uint16_t> ports = {0};  // uplink port indexes
  uint32_t entropies = 8;             // N values: first_entropy, first_entropy + 1, ...
  uint32_t first_entropy = 0xc000;    // RoCEv2 source ports conventionally sit in 0xC000-0xFFFF
  std::vector<uint32_t> values;       // explicit entropy values; when set, N and first are unused
};
struct PathConfig {
  std::vector<PrefixPathsConfig> prefixes;
  bool has_default = true;
  PrefixPathsConfig default_paths;  // 8 source ports 0xC000-0xC007 on port 0
};
// Validates (ports x entropies <= kMaxPaths, values fit `field`, no duplicate prefixes) and
// expands the configuration. Errors name the prefix and the fix.
absl::StatusOr<PathTableSpec> PathTableSpecFromConfig(const PathConfig& config, EntropyField field);

class PathTable {
 public:
  // Validates and builds (off the hot path). Errors: a set with no path or more than kMaxPaths, an
  // entropy beyond 20 bits, a route to a missing set, a prefix with host bits set or listed twice.
  static absl::StatusOr<std::unique_ptr<const PathTable>> Build(const PathTableSpec& spec);

  // The set for the frame's destination address (longest prefix, else the default set); size 0 if
  // none applies or the frame is not IP. `desc` from pkt::Parse() of `frame`.
  PathSetView Lookup(const uint8_t* frame, const pkt::PacketDesc& desc) const;
  // The same for a 16-byte address (IPv4 as ::ffff:a.b.c.d).
  PathSetView LookupAddress(const uint8_t* addr16) const;

  PathSetView set(uint32_t id) const { return id < views_.size() ? views_[id] : PathSetView{}; }
  size_t num_sets() const { return views_.size(); }
  // Every set's view, indexed by id (num_sets() of them): for callers that check the id once.
  const PathSetView* views() const { return views_.data(); }
  // Distinct for every table built in this process (never 0).
  uint32_t generation() const { return generation_; }
  const PathTableSpec& spec() const { return spec_; }

 private:
  struct SetRange {
    uint32_t first;
    uint32_t count;
  };
  struct Entry {
    uint64_t hi, lo;  // masked address, big-endian words
    uint32_t set;
  };
  struct LengthGroup {
    uint8_t len;
    uint64_t mask_hi, mask_lo;
    std::vector<Entry> entries;  // sorted by (hi, lo)
  };
  PathTable() = default;
  PathTable(const PathTable&) = delete;  // views_ point into paths_
  PathTable& operator=(const PathTable&) = delete;
  PathSetView LookupWords(uint64_t hi, uint64_t lo) const;

  PathTableSpec spec_;
  std::vector<Path> paths_;
  std::vector<SetRange> sets_;
  std::vector<PathSetView> views_;   // views_[id] = set(id)
  std::vector<LengthGroup> groups_;  // longest prefix first
  int32_t default_set_ = -1;
  uint32_t generation_ = 0;
};

}  // namespace heddle::lb
