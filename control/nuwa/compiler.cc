#include "control/nuwa/compiler.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fnv1a.h"
#include "dataplane/fwd/hash_model.h"

namespace heddle::nuwa {
namespace {

// The hosts' addresses are the plan's base with the packed digits in their low `Wf` bits, the
// same bits in both families (fabric.cc HostIpv4/HostIpv6). A class prefix given in one family
// therefore names the host set that this prefix, of the same 128-bit length, names in the other:
// the other family's base, with the bits the prefix fixes inside the digits copied over. nullopt
// when the fabric has one family only, or the prefix names no host (it disagrees with its
// family's base above the digits).
std::optional<std::pair<std::array<uint8_t, 16>, uint8_t>> TwinPrefix(
    const Fabric& f, const std::array<uint8_t, 16>& prefix, uint8_t len) {
  if (!f.addresses.has_ipv6) return std::nullopt;
  std::array<uint8_t, 16> v4{};  // ::ffff:base4
  v4[10] = v4[11] = 0xff;
  for (int b = 0; b < 4; ++b)
    v4[12 + b] = static_cast<uint8_t>(f.addresses.ipv4_base >> (24 - 8 * b));
  const std::array<uint8_t, 16>& v6 = f.addresses.ipv6_base;
  auto bit = [](const std::array<uint8_t, 16>& a, int i) { return (a[i / 8] >> (7 - i % 8)) & 1; };
  int digits = 0;  // Wf: the digits' top bit, from the least significant
  for (int j = 1; j <= kMaxTiers; ++j) {
    if (f.addresses.width[j] != 0)
      digits = std::max(digits, f.addresses.shift[j] + f.addresses.width[j]);
  }
  const int fixed = 128 - digits;  // bit positions [0, fixed) are the base's in every host address
  auto matches_base = [&](const std::array<uint8_t, 16>& base) {
    for (int i = 0; i < std::min<int>(len, fixed); ++i) {
      if (bit(prefix, i) != bit(base, i)) return false;
    }
    return true;
  };
  const bool is_v4 = matches_base(v4) && len >= 96;
  const bool is_v6 = matches_base(v6);
  if (is_v4 == is_v6) return std::nullopt;  // names no host (or both: one entry does for both)
  std::array<uint8_t, 16> twin = is_v4 ? v6 : v4;
  for (int i = fixed; i < len; ++i) {
    const uint8_t m = static_cast<uint8_t>(0x80 >> (i % 8));
    twin[i / 8] = static_cast<uint8_t>(bit(prefix, i) ? twin[i / 8] | m : twin[i / 8] & ~m);
  }
  return std::make_pair(twin, static_cast<uint8_t>(std::max<int>(len, fixed)));
}

// ---- Canonical encoding for the digest --------------------------------------------------------

class Canon {
 public:
  void U8(uint8_t v) { bytes_.push_back(v); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void F64(double v) { U64(std::bit_cast<uint64_t>(v)); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void Node(const NodeRef& n) {
    U8(n.plane);
    U8(n.tier);
    U32(n.index);
  }
  template <size_t N>
  void Bytes(const std::array<uint8_t, N>& a) {
    bytes_.insert(bytes_.end(), a.begin(), a.end());
  }
  uint64_t Fnv1a64() const { return Fnv1a::Of(bytes_.data(), bytes_.size()); }

 private:
  std::vector<uint8_t> bytes_;
};

Failures CanonicalFailures(const Failures& in) {
  Failures f = in;
  std::sort(f.links.begin(), f.links.end());
  f.links.erase(std::unique(f.links.begin(), f.links.end()), f.links.end());
  std::sort(f.switches.begin(), f.switches.end());
  f.switches.erase(std::unique(f.switches.begin(), f.switches.end()), f.switches.end());
  return f;
}

// ---- Label arithmetic on node indexes (fabric.h's numbering, without building labels) ----------
//
// A tier-i index is apart * B[i] + bpart: apart = a_{i+1..h} (a_{i+1} least significant), bpart =
// b_1..b_i (b_i least significant), B[i] = w_1..w_i. The parent through up port u drops a_{i+1}
// and appends b_{i+1} = u; the child through down port d prepends a_i = d and drops b_i.
struct Topo {
  int h = 0;
  uint32_t planes = 1;
  std::array<uint32_t, kMaxTiers + 2> m{}, w{};
  std::array<uint64_t, kMaxTiers + 1> B{};  // w_1..w_i
  std::array<uint64_t, kMaxTiers + 1> N{};  // nodes per plane at tier i
  std::array<uint64_t, kMaxTiers + 1> Q{};  // tier-1 groups under one tier-i node: m_2..m_i

  explicit Topo(const Shape& s) : h(s.tiers), planes(s.planes) {
    for (int j = 1; j <= h; ++j) m[j] = s.m[j], w[j] = s.w[j];
    B[0] = 1;
    for (int j = 1; j <= h; ++j) B[j] = B[j - 1] * w[j];
    for (int j = 0; j <= h; ++j) N[j] = NodeCount(s, j);
    Q[0] = Q[1] = 1;
    for (int j = 2; j <= h; ++j) Q[j] = Q[j - 1] * m[j];
  }
  uint64_t groups() const { return N[1] / B[1]; }
  uint64_t Apart(int i, uint64_t x) const { return x / B[i]; }
  uint32_t Parent(int i, uint64_t x, uint32_t u) const {
    return static_cast<uint32_t>((x / B[i] / m[i + 1]) * B[i + 1] + (x % B[i]) * w[i + 1] + u);
  }
  uint32_t Child(int i, uint64_t y, uint32_t d) const {
    return static_cast<uint32_t>((y / B[i] * m[i] + d) * B[i - 1] + (y % B[i]) / w[i]);
  }
  uint64_t FullUp(int i) const {
    const uint32_t n = i == 0 ? planes * w[1] : w[i + 1];
    return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  }
  // The digit a_j of the hosts of group g (j >= 2).
  uint32_t GroupDigit(uint64_t g, int j) const {
    return static_cast<uint32_t>((g / Q[j - 1]) % m[j]);
  }
  // The LCA tier of a tier-i node with apart `ap` and group g: i when g is below it.
  int Lca(int i, uint64_t ap, uint64_t g) const {
    for (int j = i; j <= h; ++j) {
      if (ap / (Q[j] / Q[i]) == g / Q[j]) return j;
    }
    return h;
  }
};

// ---- Classes --------------------------------------------------------------------------------

bool PrefixMatches(const std::array<uint8_t, 16>& addr, const std::array<uint8_t, 16>& prefix,
                   int len) {
  for (int bit = 0; bit < len; ++bit) {
    const uint8_t mk = static_cast<uint8_t>(0x80 >> (bit % 8));
    if ((addr[bit / 8] & mk) != (prefix[bit / 8] & mk)) return false;
  }
  return true;
}

std::array<uint8_t, 16> MappedV4(uint32_t v4) {
  std::array<uint8_t, 16> a{};
  a[10] = a[11] = 0xFF;
  a[12] = static_cast<uint8_t>(v4 >> 24);
  a[13] = static_cast<uint8_t>(v4 >> 16);
  a[14] = static_cast<uint8_t>(v4 >> 8);
  a[15] = static_cast<uint8_t>(v4);
  return a;
}

// A host's class: the first whose prefix holds its IPv4-mapped or its IPv6 address.
int HostClass(const Fabric& f, uint32_t host) {
  const auto& classes = f.routing.classes;
  if (classes.empty()) return -1;
  const auto v4 = MappedV4(HostIpv4(f.shape, f.addresses, host));
  std::array<uint8_t, 16> v6{};
  if (f.addresses.has_ipv6) v6 = HostIpv6(f.shape, f.addresses, host);
  for (size_t c = 0; c < classes.size(); ++c) {
    if (PrefixMatches(v4, classes[c].prefix, classes[c].prefix_len)) return static_cast<int>(c);
    if (f.addresses.has_ipv6 && PrefixMatches(v6, classes[c].prefix, classes[c].prefix_len)) {
      return static_cast<int>(c);
    }
  }
  return -1;
}

// ---- Failures -------------------------------------------------------------------------------

constexpr uint8_t kInf = 0xFF;
constexpr uint32_t kPathCountCap = 1u << 16;

// One plane's view of one re-evaluated destination from the hosts: per tier-1 group of sources,
// the replica digits b_1 of the group's tier-1 switches that still reach it; per LCA tier, the
// most shortest paths one of those switches has.
struct HostView {
  std::vector<uint64_t> reach;                  // [source group]: bit b_1
  std::array<uint32_t, kMaxTiers + 1> paths{};  // [L]
};

// Everything the exception computation needs about one plane.
struct PlaneState {
  std::array<std::vector<uint8_t>, kMaxTiers + 1> alive;      // [tier][index]
  std::array<std::vector<uint64_t>, kMaxTiers + 1> up_alive;  // [tier][index]: links alive
  std::array<std::vector<uint8_t>, kMaxTiers + 1> climb;      // [tier][index]: bit L = can reach L
  std::array<std::vector<uint64_t>, kMaxTiers + 1> usable;    // [tier][index * (h+1) + L]
  std::map<uint32_t, uint64_t> host_dead_ports;               // host -> dead ports in this plane
};

class ExceptionBuilder {
 public:
  ExceptionBuilder(const Fabric& f, Compiled& out) : f_(f), t_(f.shape), out_(out) {}

  void Run() {
    const Failures failures = CanonicalFailures(f_.failures);
    planes_.resize(t_.planes);
    for (uint32_t p = 0; p < t_.planes; ++p) InitPlane(p);
    for (const NodeRef& n : failures.switches) planes_[n.plane].alive[n.tier][n.index] = 0;
    std::map<uint32_t, uint64_t>& host_dead = host_dead_;
    for (const LinkRef& l : failures.links) {
      if (l.lower.tier == 0) {
        host_dead[l.lower.index] |= uint64_t{1} << l.up_port;
        const uint32_t p = l.up_port / t_.w[1];
        planes_[p].host_dead_ports[l.lower.index] |= uint64_t{1} << (l.up_port % t_.w[1]);
      } else {
        planes_[l.lower.plane].up_alive[l.lower.tier][l.lower.index] &= ~(uint64_t{1} << l.up_port);
      }
    }
    for (uint32_t p = 0; p < t_.planes; ++p) {
      Climb(p);
      EmitNodeMasks(p);
    }
    EmitHostMasks(host_dead);
    for (uint32_t p = 0; p < t_.planes; ++p) {
      // Destinations whose down-reachability changed: groups below a failed link's lower end or
      // a failed switch (tier < h); hosts behind a failed host link.
      std::set<uint64_t> groups;
      std::set<uint32_t> hosts;
      for (const LinkRef& l : failures.links) {
        if (l.lower.tier == 0) {
          if (l.up_port / t_.w[1] == p) hosts.insert(l.lower.index);
        } else if (l.lower.plane == p) {
          AddGroupsBelow(l.lower.tier, l.lower.index, groups);
        }
      }
      for (const NodeRef& n : failures.switches) {
        if (n.plane == p && n.tier < t_.h) AddGroupsBelow(n.tier, n.index, groups);
      }
      AddClassGroups(p, groups);
      Overrides(p, groups, hosts);
    }
    HostExceptions();
    const auto by_key = [](const fwd::OverrideSpec& a, const fwd::OverrideSpec& b) {
      return std::tie(a.plane, a.node, a.level, a.dst) < std::tie(b.plane, b.node, b.level, b.dst);
    };
    for (int i = 1; i <= t_.h; ++i) {
      auto& ov = out_.switches[i - 1].overrides;
      std::sort(ov.begin(), ov.end(), by_key);
    }
    std::sort(out_.host.overrides.begin(), out_.host.overrides.end(), by_key);
    auto& dx = out_.host.dst_exceptions;
    std::sort(dx.begin(), dx.end(),
              [](const fwd::DstExceptionSpec& a, const fwd::DstExceptionSpec& b) {
                return std::tie(a.level, a.dst) < std::tie(b.level, b.dst);
              });
    out_.stats.dst_exceptions = dx.size();
  }

 private:
  void InitPlane(uint32_t p) {
    PlaneState& ps = planes_[p];
    for (int i = 1; i <= t_.h; ++i) {
      ps.alive[i].assign(t_.N[i], 1);
      ps.up_alive[i].assign(i < t_.h ? t_.N[i] : 0, t_.FullUp(i));
    }
  }

  // climb bits and usable masks per node, top-down.
  void Climb(uint32_t p) {
    PlaneState& ps = planes_[p];
    const int h = t_.h;
    for (int i = h; i >= 1; --i) {
      ps.climb[i].assign(t_.N[i], 0);
      if (i < h) ps.usable[i].assign(t_.N[i] * (h + 1), 0);
      for (uint64_t x = 0; x < t_.N[i]; ++x) {
        if (!ps.alive[i][x]) continue;
        uint8_t bits = static_cast<uint8_t>(1u << i);
        if (i < h) {
          uint64_t up = ps.up_alive[i][x];
          uint64_t* usable = &ps.usable[i][x * (h + 1)];
          while (up) {
            const uint32_t u = static_cast<uint32_t>(std::countr_zero(up));
            up &= up - 1;
            const uint8_t pc = ps.climb[i + 1][t_.Parent(i, x, u)];
            bits |= pc;
            for (int L = i + 1; L <= h; ++L) {
              if (pc >> L & 1) usable[L] |= uint64_t{1} << u;
            }
          }
        }
        ps.climb[i][x] = bits;
      }
    }
  }

  uint64_t Usable(uint32_t p, int i, uint64_t x, int L) const {
    return planes_[p].usable[i][x * (t_.h + 1) + L];
  }

  void EmitNodeMasks(uint32_t p) {
    const PlaneState& ps = planes_[p];
    for (int i = 1; i < t_.h; ++i) {
      auto& masks = out_.switches[i - 1].node_masks;
      const uint64_t full = t_.FullUp(i);
      for (uint64_t x = 0; x < t_.N[i]; ++x) {
        if (!ps.alive[i][x]) continue;
        fwd::NodeMaskSpec e;
        e.plane = static_cast<uint8_t>(p);
        e.index = static_cast<uint32_t>(x);
        bool differs = false;
        for (int L = i + 1; L <= t_.h; ++L) {
          e.up_mask[L] = Usable(p, i, x, L);
          differs |= e.up_mask[L] != full;
        }
        if (differs) masks.push_back(e);
      }
    }
  }

  // Hosts: bit q = host port q (plane q / w_1) usable towards LCA tier L (L = 1: the ToR alive).
  void EmitHostMasks(const std::map<uint32_t, uint64_t>& host_dead) {
    std::set<uint32_t> hosts;
    for (const auto& [host, dead] : host_dead) hosts.insert(host);
    const uint8_t all_bits = static_cast<uint8_t>(((1u << (t_.h + 1)) - 1) & ~1u);
    for (uint32_t p = 0; p < t_.planes; ++p) {
      for (uint64_t x = 0; x < t_.N[1]; ++x) {
        if (planes_[p].climb[1][x] != all_bits) {
          const uint64_t g = x / t_.B[1];
          for (uint32_t a1 = 0; a1 < t_.m[1]; ++a1) {
            hosts.insert(static_cast<uint32_t>(g * t_.m[1] + a1));
          }
        }
      }
    }
    const uint64_t full = t_.FullUp(0);
    auto& masks = out_.host.node_masks;
    for (uint32_t host : hosts) {
      const auto it = host_dead.find(host);
      const uint64_t dead = it == host_dead.end() ? 0 : it->second;
      const uint64_t g = host / t_.m[1];
      fwd::NodeMaskSpec e;
      e.index = host;
      bool differs = false;
      for (int L = 1; L <= t_.h; ++L) {
        uint64_t mask = 0;
        for (uint32_t q = 0; q < t_.planes * t_.w[1]; ++q) {
          const uint32_t p = q / t_.w[1], b = q % t_.w[1];
          if (!(dead >> q & 1) && (planes_[p].climb[1][g * t_.B[1] + b] >> L & 1)) {
            mask |= uint64_t{1} << q;
          }
        }
        e.up_mask[L] = mask;
        differs |= mask != full;
      }
      if (differs) masks.push_back(e);
    }
  }

  void AddGroupsBelow(int tier, uint32_t index, std::set<uint64_t>& groups) const {
    const uint64_t first = t_.Apart(tier, index) * t_.Q[tier];
    for (uint64_t g = first; g < first + t_.Q[tier]; ++g) groups.insert(g);
  }

  // A class confining the tier-(t-1) -> t hop changes which tier-(t-1) nodes can climb to t for
  // its destinations, which the (class-blind) masks of the tiers below cannot say (with t = 2:
  // the hosts' masks): when some alive node's class-restricted climb differs, the class's groups
  // are evaluated in full.
  void AddClassGroups(uint32_t p, std::set<uint64_t>& groups) {
    const auto& classes = f_.routing.classes;
    const PlaneState& ps = planes_[p];
    for (size_t c = 0; c < classes.size(); ++c) {
      const int rt = classes[c].restrict_tier;
      if (rt < 2) continue;
      const int i = rt - 1;
      bool differs = false;
      for (uint64_t x = 0; x < t_.N[i] && !differs; ++x) {
        if (!ps.alive[i][x]) continue;
        uint8_t bits = static_cast<uint8_t>(1u << i);
        uint64_t up = ps.up_alive[i][x] & classes[c].allowed_up_mask;
        while (up) {
          const uint32_t u = static_cast<uint32_t>(std::countr_zero(up));
          up &= up - 1;
          bits |= ps.climb[i + 1][t_.Parent(i, x, u)];
        }
        differs = bits != ps.climb[i][x];
      }
      if (!differs) continue;
      if (host_class_.empty()) {
        host_class_.resize(t_.N[0]);
        for (uint32_t hst = 0; hst < t_.N[0]; ++hst) host_class_[hst] = HostClass(f_, hst);
      }
      for (uint32_t hst = 0; hst < t_.N[0]; ++hst) {
        if (host_class_[hst] == static_cast<int>(c)) groups.insert(hst / t_.m[1]);
      }
    }
  }

  int ClassOf(uint32_t host) {
    if (f_.routing.classes.empty()) return -1;
    if (!host_class_.empty()) return host_class_[host];
    return HostClass(f_, host);
  }

  // What the artifact gives node (p, i, x) for host `host` of class `cls` without overrides.
  fwd::NextHops Rule(uint32_t p, int i, uint64_t x, uint32_t host, int cls) const {
    fwd::NextHops nh;
    const uint64_t g = host / t_.m[1];
    const int L = t_.Lca(i, t_.Apart(i, x), g);
    if (L == i) {
      nh.kind = fwd::HopKind::kDown;
      nh.down_port = static_cast<uint16_t>(i == 1 ? host % t_.m[1] : t_.GroupDigit(g, i));
      return nh;
    }
    uint64_t mask = Usable(p, i, x, L);
    if (cls >= 0 && f_.routing.classes[cls].restrict_tier == i + 1) {
      mask &= f_.routing.classes[cls].allowed_up_mask;
    }
    if (mask == 0) {
      nh.kind = fwd::HopKind::kUnreachable;
    } else {
      nh.kind = fwd::HopKind::kUp;
      nh.up_mask = mask;
    }
    return nh;
  }

  // The true next hops of every node of plane p towards group g (host_level: host `host` alone,
  // with its own links) for class `cls`, into nh_[tier][index].
  void Evaluate(uint32_t p, uint64_t g, uint32_t host, bool host_level, int cls) {
    const PlaneState& ps = planes_[p];
    const int h = t_.h;
    const DestinationClass* c = cls >= 0 ? &f_.routing.classes[cls] : nullptr;
    const uint64_t host_dead = [&]() -> uint64_t {
      if (!host_level) return 0;
      auto it = ps.host_dead_ports.find(host);
      return it == ps.host_dead_ports.end() ? 0 : it->second;
    }();
    // D: the ancestors of g (per tier, by bpart) that reach it going down.
    for (int j = 1; j <= h; ++j) {
      const uint64_t ga = g / t_.Q[j];
      in_d_[j].assign(t_.B[j], 0);
      for (uint64_t b = 0; b < t_.B[j]; ++b) {
        const uint64_t x = ga * t_.B[j] + b;
        if (!ps.alive[j][x]) continue;
        if (j == 1) {
          in_d_[j][b] = !(host_dead >> b & 1);
        } else {
          const uint32_t child = t_.Child(j, x, t_.GroupDigit(g, j));
          const uint32_t back = static_cast<uint32_t>(b % t_.w[j]);
          in_d_[j][b] = in_d_[j - 1][b / t_.w[j]] && (ps.up_alive[j - 1][child] >> back & 1);
        }
      }
    }
    // R: the lowest tier at which a node reaches D by climbing; then the next hops, and the number
    // of shortest paths from the node (saturating; the host artifact needs at most 64).
    for (int i = h; i >= 1; --i) {
      r_[i].assign(t_.N[i], kInf);
      cnt_[i].assign(t_.N[i], 0);
      nh_[i].resize(t_.N[i]);
      const uint64_t ga = g / t_.Q[i];
      const uint64_t allowed =
          c != nullptr && c->restrict_tier == i + 1 ? c->allowed_up_mask : ~uint64_t{0};
      for (uint64_t x = 0; x < t_.N[i]; ++x) {
        fwd::NextHops& nh = nh_[i][x];
        nh = fwd::NextHops{};
        nh.kind = fwd::HopKind::kUnreachable;
        if (!ps.alive[i][x]) continue;
        if (x / t_.B[i] == ga && in_d_[i][x % t_.B[i]]) {
          r_[i][x] = static_cast<uint8_t>(i);
          cnt_[i][x] = 1;
          nh.kind = fwd::HopKind::kDown;
          nh.down_port = static_cast<uint16_t>(i == 1 ? host % t_.m[1] : t_.GroupDigit(g, i));
          continue;
        }
        if (i == h) continue;
        uint64_t up = ps.up_alive[i][x] & allowed;
        uint8_t best = kInf;
        uint64_t mask = 0;
        uint32_t paths = 0;
        while (up) {
          const uint32_t u = static_cast<uint32_t>(std::countr_zero(up));
          up &= up - 1;
          const uint32_t parent = t_.Parent(i, x, u);
          const uint8_t r = r_[i + 1][parent];
          if (r < best) {
            best = r;
            mask = 0;
            paths = 0;
          }
          if (r == best && r != kInf) {
            mask |= uint64_t{1} << u;
            paths = std::min<uint32_t>(paths + cnt_[i + 1][parent], kPathCountCap);
          }
        }
        r_[i][x] = best;
        cnt_[i][x] = paths;
        if (best != kInf) {
          nh.kind = fwd::HopKind::kUp;
          nh.up_mask = mask;
        }
      }
    }
  }

  void Emit(uint32_t p, int i, uint64_t x, uint8_t level, uint64_t dst, const fwd::NextHops& nh) {
    fwd::OverrideSpec o;
    o.plane = static_cast<uint8_t>(p);
    o.node = static_cast<uint32_t>(x);
    o.level = level;
    o.dst = static_cast<uint32_t>(dst);
    o.hops = nh;
    out_.switches[i - 1].overrides.push_back(o);
  }

  // The overrides of tier i for one destination (level, dst), given what a node would answer
  // without them (`eff`, by node index; null: the rule). Per-node overrides where the true next
  // hops (nh_) differ, or, when that takes fewer entries, one wildcard "unreachable" plus
  // per-node overrides where the truth is not "unreachable". Marks in `covered` the nodes an
  // override of this level now answers for (all of them with a wildcard).
  void EmitTier(uint32_t p, int i, uint8_t level, uint64_t dst, uint32_t host, int cls,
                const std::vector<fwd::NextHops>* eff, std::vector<uint8_t>& covered) {
    const PlaneState& ps = planes_[p];
    const std::vector<fwd::NextHops>& nh = nh_[i];
    uint64_t differ = 0, reachable = 0;
    std::vector<uint8_t> diff(t_.N[i], 0);
    for (uint64_t x = 0; x < t_.N[i]; ++x) {
      if (!ps.alive[i][x]) continue;
      const fwd::NextHops want = eff != nullptr ? (*eff)[x] : Rule(p, i, x, host, cls);
      if (nh[x] != want) diff[x] = 1, ++differ;
      if (nh[x].kind != fwd::HopKind::kUnreachable) ++reachable;
    }
    if (1 + reachable < differ) {
      fwd::NextHops none;
      none.kind = fwd::HopKind::kUnreachable;
      Emit(p, i, fwd::kAllNodes, level, dst, none);
      ++out_.stats.wildcards;
      for (uint64_t x = 0; x < t_.N[i]; ++x) {
        if (!ps.alive[i][x]) continue;
        covered[x] = 1;
        if (nh[x].kind != fwd::HopKind::kUnreachable) Emit(p, i, x, level, dst, nh[x]);
      }
      return;
    }
    for (uint64_t x = 0; x < t_.N[i]; ++x) {
      if (diff[x]) {
        Emit(p, i, x, level, dst, nh[x]);
        covered[x] = 1;
      }
    }
  }

  void Overrides(uint32_t p, const std::set<uint64_t>& groups, const std::set<uint32_t>& hosts) {
    const PlaneState& ps = planes_[p];
    // Every group to visit: the affected ones and those holding a host with a dead link.
    std::map<uint64_t, std::vector<uint32_t>> visit;
    for (uint64_t g : groups) visit[g];
    for (uint32_t host : hosts) visit[host / t_.m[1]].push_back(host);
    std::array<std::vector<uint8_t>, kMaxTiers + 1> l1;  // node has a level-1 override for g
    std::array<std::vector<fwd::NextHops>, kMaxTiers + 1> l1_hops;
    std::vector<fwd::NextHops> eff;
    for (auto& [g, dead_hosts] : visit) {
      const bool group_level = groups.count(g) != 0;
      const uint32_t first = static_cast<uint32_t>(g * t_.m[1]);
      uint32_t rep = first;
      for (uint32_t a1 = 0; a1 < t_.m[1]; ++a1) {
        if (!ps.host_dead_ports.count(first + a1)) {
          rep = first + a1;
          break;
        }
      }
      const int rep_class = ClassOf(rep);
      for (int i = 1; i <= t_.h; ++i) l1[i].assign(t_.N[i], 0);
      std::vector<uint32_t> host_level = dead_hosts;
      if (group_level) {
        ++out_.stats.affected_destinations;
        Evaluate(p, g, rep, false, rep_class);
        RecordHostView(p, 1, g, g);
        for (int i = 1; i <= t_.h; ++i) {
          l1_hops[i] = nh_[i];
          EmitTier(p, i, 1, g, rep, rep_class, nullptr, l1[i]);
        }
        if (!f_.routing.classes.empty()) {
          for (uint32_t a1 = 0; a1 < t_.m[1]; ++a1) {
            if (ClassOf(first + a1) != rep_class) host_level.push_back(first + a1);
          }
        }
      }
      std::sort(host_level.begin(), host_level.end());
      host_level.erase(std::unique(host_level.begin(), host_level.end()), host_level.end());
      for (uint32_t host : host_level) {
        ++out_.stats.affected_destinations;
        const int cls = ClassOf(host);
        Evaluate(p, g, host, true, cls);
        RecordHostView(p, 0, host, g);
        for (int i = 1; i <= t_.h; ++i) {
          eff.resize(t_.N[i]);
          for (uint64_t x = 0; x < t_.N[i]; ++x) {
            if (!ps.alive[i][x]) continue;
            if (l1[i][x]) {
              eff[x] = l1_hops[i][x];
              // A level-1 override is the group's; a tier-1 down port is the host's own digit.
              if (eff[x].kind == fwd::HopKind::kDown && i == 1) eff[x].down_port = host % t_.m[1];
            } else {
              eff[x] = Rule(p, i, x, host, cls);
            }
          }
          std::vector<uint8_t> covered(t_.N[i], 0);
          EmitTier(p, i, 0, host, host, cls, &eff, covered);
        }
      }
    }
  }

  // ---- Host artifacts: destination exceptions ------------------------------------------------

  // The LCA tier of every tier-1 group with group g, without a division per group: the groups
  // sharing g's tier-j subtree are one contiguous range of Q[j].
  const std::vector<uint8_t>& GroupLcas(uint64_t g) {
    if (lca_of_ == g && !lcas_.empty()) return lcas_;
    lca_of_ = g;
    lcas_.assign(t_.groups(), static_cast<uint8_t>(t_.h));
    for (int j = t_.h - 1; j >= 1; --j) {
      const uint64_t first = g / t_.Q[j] * t_.Q[j];
      std::fill(lcas_.begin() + static_cast<ptrdiff_t>(first),
                lcas_.begin() + static_cast<ptrdiff_t>(first + t_.Q[j]), static_cast<uint8_t>(j));
    }
    return lcas_;
  }

  // After Evaluate(): which tier-1 switches of plane p reach the destination, by source group.
  void RecordHostView(uint32_t p, uint8_t level, uint32_t dst, uint64_t g) {
    auto& views = host_views_[{level, dst}];
    if (views.empty()) views.resize(t_.planes);
    auto v = std::make_unique<HostView>();
    v->reach.assign(t_.groups(), 0);
    const std::vector<uint8_t>& lca = GroupLcas(g);
    const uint64_t w1 = t_.B[1];
    for (uint64_t src_group = 0, x = 0; src_group < t_.groups(); ++src_group) {
      uint64_t bits = 0;
      uint32_t most = 0;
      for (uint64_t b = 0; b < w1; ++b, ++x) {
        if (r_[1][x] == kInf) continue;
        bits |= uint64_t{1} << b;
        most = std::max(most, cnt_[1][x]);
      }
      v->reach[src_group] = bits;
      uint32_t& paths = v->paths[lca[src_group]];
      paths = std::max(paths, most);
    }
    views[p] = std::move(v);
  }

  // Bits b_1 of the tier-1 switches of source group G in plane p that can climb to tier L.
  uint64_t ClimbBits(uint32_t p, uint64_t src_group, int L) const {
    uint64_t bits = 0;
    for (uint32_t b = 0; b < t_.w[1]; ++b) {
      if (planes_[p].climb[1][src_group * t_.B[1] + b] >> L & 1) bits |= uint64_t{1} << b;
    }
    return bits;
  }

  // The entropy values a host uses at LCA tier L without a cap (HostTable: an empty list is one
  // value).
  uint32_t ListLength(int L) const {
    return std::max<uint32_t>(1, static_cast<uint32_t>(out_.host.entropy.by_lca[L].size()));
  }

  // The destination exception the views give, and whether it changes anything against `base`
  // (the exception a host would otherwise apply; null: none).
  fwd::DstExceptionSpec Summarize(const std::vector<const HostView*>& views,
                                  const std::vector<uint8_t>& lca) const {
    fwd::DstExceptionSpec e;
    const uint32_t w1 = t_.w[1];
    const uint64_t plane_bits = t_.w[1] >= 64 ? ~uint64_t{0} : (uint64_t{1} << w1) - 1;
    std::array<uint32_t, kMaxTiers + 1> paths{};
    for (uint32_t p = 0; p < t_.planes; ++p) {
      std::array<uint64_t, kMaxTiers + 1> bits{};
      if (views[p] != nullptr) {
        for (uint64_t src_group = 0; src_group < t_.groups(); ++src_group) {
          bits[lca[src_group]] |= views[p]->reach[src_group];
        }
      }
      for (int L = 1; L <= t_.h; ++L) {
        e.ports[L] |= (views[p] != nullptr ? bits[L] : plane_bits) << (p * w1);
        paths[L] = std::max(
            paths[L], views[p] != nullptr ? views[p]->paths[L] : uint32_t{fwd::kMaxHostPaths});
      }
    }
    for (int L = 1; L <= t_.h; ++L) {
      e.paths[L] = static_cast<uint8_t>(
          e.ports[L] == 0 ? 0 : std::clamp<uint32_t>(paths[L], 1, fwd::kMaxHostPaths));
    }
    return e;
  }

  // Two exceptions (null: none) the same for every host lookup.
  bool SameEffect(const fwd::DstExceptionSpec* a, const fwd::DstExceptionSpec* b) const {
    for (int L = 1; L <= t_.h; ++L) {
      const uint64_t pa = a != nullptr ? a->ports[L] : t_.FullUp(0);
      const uint64_t pb = b != nullptr ? b->ports[L] : t_.FullUp(0);
      const uint32_t na = std::min<uint32_t>(a != nullptr ? a->paths[L] : 64, ListLength(L));
      const uint32_t nb = std::min<uint32_t>(b != nullptr ? b->paths[L] : 64, ListLength(L));
      if (pa != pb || (pa != 0 && na != nb)) return false;
    }
    return true;
  }

  // The host artifact's destination exceptions and, for sources whose own failures interact
  // with the destination's, host overrides: level 1 (groups) first, then level 0 (hosts), each
  // compared with what a host would apply without it.
  void HostExceptions() {
    const uint32_t w1 = t_.w[1];
    std::map<uint32_t, fwd::DstExceptionSpec> group_entry;                 // g -> emitted
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> group_src_override;  // (g, G) -> ports
    for (const uint8_t level : {uint8_t{1}, uint8_t{0}}) {
      for (const auto& [key, plane_views] : host_views_) {
        if (key.first != level) continue;
        const uint32_t dst = key.second;
        const uint64_t g = level == 1 ? dst : dst / t_.m[1];
        std::vector<const HostView*> views(t_.planes, nullptr);
        for (uint32_t p = 0; p < t_.planes; ++p) {
          views[p] = plane_views[p].get();
          if (views[p] == nullptr && level == 0) {
            // Not re-evaluated alone in this plane: the group's view, if any.
            auto it = host_views_.find({uint8_t{1}, static_cast<uint32_t>(g)});
            if (it != host_views_.end()) views[p] = it->second[p].get();
          }
        }
        const std::vector<uint8_t>& lca = GroupLcas(g);
        const fwd::DstExceptionSpec e = Summarize(views, lca);
        const fwd::DstExceptionSpec* base = nullptr;
        if (level == 0) {
          auto it = group_entry.find(static_cast<uint32_t>(g));
          if (it != group_entry.end()) base = &it->second;
        }
        fwd::DstExceptionSpec entry = e;
        entry.level = level;
        entry.dst = dst;
        const bool emit = !SameEffect(&e, base);
        if (emit) {
          out_.host.dst_exceptions.push_back(entry);
          if (level == 1) group_entry[dst] = entry;
        }
        const fwd::DstExceptionSpec* applied = emit ? &entry : base;
        // Sources: one tier-1 group at a time (its hosts share their tier-1 switches).
        for (uint64_t src_group = 0; src_group < t_.groups(); ++src_group) {
          const int L = lca[src_group];
          uint64_t truth = 0, predicted = 0;
          for (uint32_t p = 0; p < t_.planes; ++p) {
            const uint64_t climb = ClimbBits(p, src_group, L);
            const uint64_t allowed =
                applied != nullptr ? applied->ports[L] >> (p * w1) : ~uint64_t{0};
            truth |= (views[p] != nullptr ? views[p]->reach[src_group] : climb) << (p * w1);
            predicted |= (climb & allowed) << (p * w1);
          }
          predicted &= t_.FullUp(0);
          if (level == 0) {
            auto it = group_src_override.find({static_cast<uint32_t>(g), src_group});
            if (it != group_src_override.end()) predicted = it->second;
          }
          if (truth == predicted) continue;
          if (level == 1) group_src_override[{dst, src_group}] = truth;
          for (uint32_t a1 = 0; a1 < t_.m[1]; ++a1) {
            const uint32_t src = static_cast<uint32_t>(src_group * t_.m[1] + a1);
            if (level == 0 && src == dst) continue;
            auto dead = host_dead_.find(src);
            const uint64_t ports = truth & ~(dead == host_dead_.end() ? 0 : dead->second);
            fwd::OverrideSpec o;
            o.node = src;
            o.level = level;
            o.dst = dst;
            o.hops.kind = ports != 0 ? fwd::HopKind::kUp : fwd::HopKind::kUnreachable;
            o.hops.up_mask = ports;
            out_.host.overrides.push_back(o);
          }
        }
      }
    }
  }

  const Fabric& f_;
  Topo t_;
  Compiled& out_;
  std::vector<PlaneState> planes_;
  std::vector<int> host_class_;
  std::array<std::vector<uint8_t>, kMaxTiers + 1> in_d_;
  std::array<std::vector<uint8_t>, kMaxTiers + 1> r_;
  std::array<std::vector<fwd::NextHops>, kMaxTiers + 1> nh_;
  std::array<std::vector<uint32_t>, kMaxTiers + 1> cnt_;
  std::vector<uint8_t> lcas_;  // GroupLcas(lca_of_)
  uint64_t lca_of_ = 0;
  std::map<uint32_t, uint64_t> host_dead_;  // host -> dead ports, all planes
  // What the host artifact needs about each re-evaluated destination, per plane (null: the
  // destination was not re-evaluated in that plane), keyed (level, dst).
  std::map<std::pair<uint8_t, uint32_t>, std::vector<std::unique_ptr<HostView>>> host_views_;
};

fwd::ArtifactSpec BaseSpec(const Fabric& f, uint64_t digest) {
  fwd::ArtifactSpec spec;
  spec.fabric_digest = digest;
  spec.fabric_name = f.name;
  spec.shape.tiers = static_cast<uint8_t>(f.shape.tiers);
  spec.shape.planes = static_cast<uint8_t>(f.shape.planes);
  spec.shape.rails = static_cast<uint16_t>(f.shape.rails);
  spec.shape.m = f.shape.m;
  spec.shape.w = f.shape.w;
  spec.addresses.ipv4_base = f.addresses.ipv4_base;
  spec.addresses.ipv4_prefix_len = f.addresses.ipv4_prefix_len;
  spec.addresses.has_ipv6 = f.addresses.has_ipv6;
  spec.addresses.ipv6_prefix_len = f.addresses.ipv6_prefix_len;
  spec.addresses.ipv6_base = f.addresses.ipv6_base;
  spec.addresses.width = f.addresses.width;
  spec.addresses.shift = f.addresses.shift;
  spec.hash.function = static_cast<uint8_t>(f.hash.function);
  spec.hash.seed_base = f.hash.seed_base;
  spec.hash.bit_offset = f.hash.bit_offset;
  spec.max_paths = static_cast<uint8_t>(f.routing.max_paths);
  spec.rail_local = f.routing.rail_local;
  for (const DestinationClass& c : f.routing.classes) {
    fwd::ClassSpec cs;
    cs.name = c.name;
    cs.prefix = c.prefix;
    cs.prefix_len = c.prefix_len;
    cs.max_paths = static_cast<uint8_t>(c.max_paths);
    cs.planes_mask = static_cast<uint8_t>(c.planes_mask);
    cs.restrict_tier = static_cast<uint8_t>(c.restrict_tier);
    cs.allowed_up_mask = c.allowed_up_mask;
    // A class names hosts: those with an address of either family in its prefix. Lookups match a
    // destination address of one family against the class prefixes, so the prefix goes in
    // twice, once per family, right after each other (first match wins within each family).
    std::optional<std::pair<std::array<uint8_t, 16>, uint8_t>> twin =
        TwinPrefix(f, c.prefix, c.prefix_len);
    spec.classes.push_back(cs);
    if (twin) {
      cs.prefix = twin->first;
      cs.prefix_len = twin->second;
      spec.classes.push_back(std::move(cs));
    }
  }
  return spec;
}

}  // namespace

uint64_t FabricDigest(const Fabric& f) {
  Canon c;
  c.Str("heddle-nuwa-fabric/1");
  c.Str(f.name);
  c.U8(static_cast<uint8_t>(f.kind));
  c.U8(static_cast<uint8_t>(f.shape.tiers));
  for (int j = 0; j <= kMaxTiers; ++j) c.U32(f.shape.m[j]), c.U32(f.shape.w[j]);
  c.U32(f.shape.planes);
  c.U32(f.shape.rails);
  for (const std::string& n : f.tier_names) c.Str(n);
  for (double g : f.link_gbps) c.F64(g);
  const AddressPlan& a = f.addresses;
  c.U32(a.ipv4_base);
  c.U8(a.ipv4_prefix_len);
  c.Bytes(a.ipv6_base);
  c.U8(a.ipv6_prefix_len);
  c.U8(a.has_ipv6);
  c.Bytes(a.width);
  c.Bytes(a.shift);
  c.U8(static_cast<uint8_t>(f.hash.function));
  c.U32(f.hash.seed_base);
  c.Bytes(f.hash.bit_offset);
  c.U32(f.routing.max_paths);
  c.U8(f.routing.rail_local);
  c.U32(static_cast<uint32_t>(f.routing.classes.size()));
  for (const DestinationClass& d : f.routing.classes) {
    c.Str(d.name);
    c.Bytes(d.prefix);
    c.U8(d.prefix_len);
    c.U32(d.max_paths);
    c.U32(d.planes_mask);
    c.U32(static_cast<uint32_t>(d.restrict_tier));
    c.U64(d.allowed_up_mask);
  }
  const Failures failures = CanonicalFailures(f.failures);
  c.U32(static_cast<uint32_t>(failures.links.size()));
  for (const LinkRef& l : failures.links) c.Node(l.lower), c.U32(l.up_port);
  c.U32(static_cast<uint32_t>(failures.switches.size()));
  for (const NodeRef& n : failures.switches) c.Node(n);
  return c.Fnv1a64();
}

// ---- Entropy (docs/nuwa.md §5) -----------------------------------------------------------------
//
// A host reaches a destination whose lowest common ancestor is at tier L by climbing tiers
// 1..L-1 (the tier-i switch on the way picks one of w_{i+1} up ports) and then descending on
// the one down path. Two source ports take the same path iff every switch on the way up picks
// the same member. Switch i computes member_i(s) = (H(seed_i, key(s)) >> off_i) mod w_{i+1}.
//
// Every supported CRC is affine over GF(2) in the key for a fixed length: H(seed, k ^ d) =
// H(seed, k) ^ H(0, d) ^ H(0, 0). Two keys of one flow that differ only in the source port differ
// by d = (sport s ^ s' in the sport field), so H(seed, key(s)) = H(seed, key(0)) ^ A(s) with A(s)
// = H(0, key with only sport s) ^ H(0, zero key): A depends on neither the seed nor the addresses
// (nor the family: the sport is followed by 2 bytes in both key layouts). With w_{i+1} a power of
// two, mod is a mask, and the mask and the shift commute with XOR:
//     member_i(s) = member_i(0) ^ ((A(s) >> off_i) & (w_{i+1} - 1)).
// So the vector v(s) = ((A(s) >> off_i) & (w_{i+1}-1))_{i=1..L-1} decides the path up to a fixed
// (per flow) XOR: if v(s) != v(s') the two ports pick a different member at the first tier where
// the vectors differ — and, since they agree below it, at the same switch — so they take
// different paths, for every (source, destination) pair and every seed. The compiler scans
// ports 0xC000, 0xC001, ... and keeps each port whose vector is new, up to 64 or the number of
// vectors there are (prod w_{i+1}). When the vectors cannot all be told apart (bit fields that
// overlap across tiers, or CRC-16's short register) the list is simply shorter.
//
// Without that structure (a fanout that is not a power of two, or the model `unknown`) the
// list is the first min(64, paths) consecutive ports from 0xC000: best effort, distinct paths
// likely but not guaranteed. Failures shrink ECMP sets and void the guarantee for the affected
// switches.
fwd::EntropySpec ChooseEntropies(const Fabric& f) {
  fwd::EntropySpec e;
  const auto fn = static_cast<fwd::HashFunction>(f.hash.function);
  for (int L = 2; L <= f.shape.tiers; ++L) {
    uint64_t paths = 1;
    bool pow2 = true;
    for (int i = 1; i < L; ++i) {
      paths *= f.shape.w[i + 1];
      pow2 &= std::has_single_bit(f.shape.w[i + 1]);
    }
    const uint32_t want = static_cast<uint32_t>(std::min<uint64_t>(fwd::kMaxHostPaths, paths));
    std::vector<uint32_t>& list = e.by_lca[L];
    if (fn == fwd::HashFunction::kUnknown || !pow2) {
      for (uint32_t s = 0; s < want; ++s) list.push_back(0xC000 + s);
      continue;
    }
    absl::flat_hash_set<uint64_t> seen;
    for (uint32_t s = 0xC000; s <= 0xFFFF && list.size() < want; ++s) {
      const uint32_t a = fwd::SportContribution(fn, static_cast<uint16_t>(s));
      uint64_t v = 0;
      for (int i = 1; i < L; ++i) {
        const uint8_t off = f.hash.bit_offset[i];
        const uint32_t bits = off >= 32 ? 0 : (a >> off) & (f.shape.w[i + 1] - 1);
        v = v << 7 | bits;  // w <= 64: 6 bits per tier suffice
      }
      if (seen.insert(v).second) list.push_back(s);
    }
  }
  return e;
}

uint64_t EstimateArtifactBytes(const fwd::ArtifactSpec& spec) {
  // Format version 2 (dataplane/fwd/artifact.cc): a 64-byte header, a 16-byte directory entry per
  // section, nine sections, each 8-byte aligned.
  auto align8 = [](uint64_t n) { return (n + 7) & ~uint64_t{7}; };
  uint64_t n = 64 + 9 * 16;
  n += 40 + 32 + 16;  // SHAPE, ADDR, HASH
  uint64_t names = 0;
  for (const auto& c : spec.classes) names += c.name.size();
  n += align8(8 + 40 * spec.classes.size() + names);  // CLASSES
  n += 8 + 40 * spec.node_masks.size();               // NODE_MASKS
  n += 8 + 24 * spec.overrides.size();                // OVERRIDES
  uint64_t values = 0;
  for (const auto& l : spec.entropy.by_lca) values += l.size();
  n += align8(16 + 4 * values);                                      // ENTROPY
  n += align8(8 + spec.fabric_name.size() + spec.role_name.size());  // NAME
  n += 8 + 32 * spec.dst_exceptions.size();                          // DST_EXCEPTIONS
  return n;
}

absl::StatusOr<Compiled> Compile(const Fabric& fabric) {
  if (absl::Status st = Validate(fabric); !st.ok()) return st;
  Compiled out;
  out.fabric_digest = FabricDigest(fabric);
  const int h = fabric.shape.tiers;
  for (int i = 1; i <= h; ++i) {
    fwd::ArtifactSpec spec = BaseSpec(fabric, out.fabric_digest);
    spec.role = fwd::Role::kSwitch;
    spec.tier = static_cast<uint8_t>(i);
    spec.role_name =
        fabric.tier_names[i].empty() ? absl::StrFormat("tier%d", i) : fabric.tier_names[i];
    out.switches.push_back(std::move(spec));
  }
  out.host = BaseSpec(fabric, out.fabric_digest);
  out.host.role = fwd::Role::kHost;
  out.host.tier = 0;
  out.host.role_name = fabric.tier_names[0].empty() ? "host" : fabric.tier_names[0];
  out.host.entropy = ChooseEntropies(fabric);

  if (!fabric.failures.links.empty() || !fabric.failures.switches.empty()) {
    ExceptionBuilder(fabric, out).Run();
  }

  CompileStats& st = out.stats;
  st.rules = static_cast<uint32_t>(h + 1);
  std::vector<const fwd::ArtifactSpec*> all;
  for (const auto& s : out.switches) all.push_back(&s);
  all.push_back(&out.host);
  for (const fwd::ArtifactSpec* s : all) {
    st.node_masks += s->node_masks.size();
    st.overrides += s->overrides.size();
    st.bytes += EstimateArtifactBytes(*s);
  }
  st.exceptions = st.node_masks + st.overrides + st.dst_exceptions;
  return out;
}

// ---- The lookup, evaluated from the spec -----------------------------------------------------

fwd::NextHops EvaluateSwitch4(const fwd::ArtifactSpec& spec, uint8_t plane, uint32_t index,
                              uint32_t dst) {
  fwd::NextHops nh;  // kNotInFabric
  Shape shape;
  shape.tiers = spec.shape.tiers;
  shape.m = spec.shape.m;
  shape.w = spec.shape.w;
  shape.planes = spec.shape.planes;
  shape.rails = spec.shape.rails;
  AddressPlan plan;
  plan.ipv4_base = spec.addresses.ipv4_base;
  plan.ipv4_prefix_len = spec.addresses.ipv4_prefix_len;
  plan.width = spec.addresses.width;
  plan.shift = spec.addresses.shift;
  const std::optional<uint32_t> host = HostOfIpv4(shape, plan, dst);
  if (!host) return nh;
  const Topo t(shape);
  const uint64_t g = *host / t.m[1];
  auto find_override = [&](uint32_t node, uint8_t level, uint32_t key) -> const fwd::OverrideSpec* {
    auto it = std::lower_bound(
        spec.overrides.begin(), spec.overrides.end(), std::make_tuple(plane, node, level, key),
        [](const fwd::OverrideSpec& o, const std::tuple<uint8_t, uint32_t, uint8_t, uint32_t>& k) {
          return std::tie(o.plane, o.node, o.level, o.dst) < k;
        });
    if (it != spec.overrides.end() && it->plane == plane && it->node == node &&
        it->level == level && it->dst == key) {
      return &*it;
    }
    return nullptr;
  };
  // A node's own override, else the plane's wildcard, level 0 before level 1.
  for (const auto& [level, key] : {std::pair<uint8_t, uint32_t>{0, *host},
                                   std::pair<uint8_t, uint32_t>{1, static_cast<uint32_t>(g)}}) {
    const fwd::OverrideSpec* o = find_override(index, level, key);
    if (o == nullptr) o = find_override(fwd::kAllNodes, level, key);
    if (o == nullptr) continue;
    if (level == 1 && spec.tier == 1 && o->hops.kind == fwd::HopKind::kDown) {
      // A tier-1 group override going down: the destination's own port.
      nh.kind = fwd::HopKind::kDown;
      nh.down_port = static_cast<uint16_t>(*host % t.m[1]);
      return nh;
    }
    return o->hops;
  }
  const int i = spec.tier;
  const int L = t.Lca(i, t.Apart(i, index), g);
  if (L == i) {
    nh.kind = fwd::HopKind::kDown;
    nh.down_port = static_cast<uint16_t>(i == 1 ? *host % t.m[1] : t.GroupDigit(g, i));
    return nh;
  }
  uint64_t mask = t.FullUp(i);
  auto mit =
      std::lower_bound(spec.node_masks.begin(), spec.node_masks.end(), std::make_pair(plane, index),
                       [](const fwd::NodeMaskSpec& m, const std::pair<uint8_t, uint32_t>& k) {
                         return std::tie(m.plane, m.index) < std::tie(k.first, k.second);
                       });
  if (mit != spec.node_masks.end() && mit->plane == plane && mit->index == index) {
    mask = mit->up_mask[L];
  }
  const auto mapped = MappedV4(dst);
  for (const fwd::ClassSpec& c : spec.classes) {
    if (PrefixMatches(mapped, c.prefix, c.prefix_len)) {
      if (c.restrict_tier == i + 1) mask &= c.allowed_up_mask;
      break;
    }
  }
  if (mask == 0) {
    nh.kind = fwd::HopKind::kUnreachable;
  } else {
    nh.kind = fwd::HopKind::kUp;
    nh.up_mask = mask;
  }
  return nh;
}

Fabric FabricFromArtifact(const fwd::ArtifactSpec& a) {
  Fabric f;
  f.name = a.fabric_name;
  f.shape.tiers = a.shape.tiers;
  f.shape.planes = a.shape.planes;
  f.shape.rails = a.shape.rails;
  f.shape.m = a.shape.m;
  f.shape.w = a.shape.w;
  f.addresses.ipv4_base = a.addresses.ipv4_base;
  f.addresses.ipv4_prefix_len = a.addresses.ipv4_prefix_len;
  f.addresses.has_ipv6 = a.addresses.has_ipv6;
  f.addresses.ipv6_prefix_len = a.addresses.ipv6_prefix_len;
  f.addresses.ipv6_base = a.addresses.ipv6_base;
  f.addresses.width = a.addresses.width;
  f.addresses.shift = a.addresses.shift;
  f.hash.function = static_cast<HashFunction>(a.hash.function);
  f.hash.seed_base = a.hash.seed_base;
  f.hash.bit_offset = a.hash.bit_offset;
  f.routing.max_paths = a.max_paths;
  f.routing.rail_local = a.rail_local;
  for (const fwd::ClassSpec& c : a.classes) {
    DestinationClass d;
    d.name = c.name;
    d.prefix = c.prefix;
    d.prefix_len = c.prefix_len;
    d.max_paths = c.max_paths;
    d.planes_mask = c.planes_mask;
    d.restrict_tier = c.restrict_tier;
    d.allowed_up_mask = c.allowed_up_mask;
    // The other family's copy the compiler wrote after a class (TwinPrefix) is not a class.
    if (!f.routing.classes.empty()) {
      const DestinationClass& prev = f.routing.classes.back();
      const auto twin = TwinPrefix(f, prev.prefix, prev.prefix_len);
      DestinationClass as_prev = d;
      as_prev.prefix = prev.prefix;
      as_prev.prefix_len = prev.prefix_len;
      if (twin && twin->first == d.prefix && twin->second == d.prefix_len && as_prev == prev) {
        continue;
      }
    }
    f.routing.classes.push_back(std::move(d));
  }
  for (int t = 0; t <= f.shape.tiers; ++t)
    f.tier_names[t] = t == 0 ? "host" : absl::StrCat("tier", t);
  return f;
}

}  // namespace heddle::nuwa
