// SwitchTable and HostTable (artifact.h): the role's rule bound to one node.
//
// A destination's digits are bit fields of its address (Fields). A node compares the digits
// above its own tier with its own, packed the same way, by one XOR and mask: equal means the
// destination is below it (down port a_tier); otherwise the highest differing field is the tier
// L of the lowest common ancestor, which picks the node's usable up ports (its mask for L, all
// up ports without failures), narrowed by the destination's class when the class restricts the
// hops to tier + 1. Destinations whose reachability a failure changed are overrides, probed
// first, and only on nodes that have any.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "dataplane/fwd/artifact.h"

namespace heddle::fwd {
namespace {

uint64_t BitsMask(uint32_t bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

uint64_t NodeCount(const ShapeSpec& s, int tier) {
  uint64_t n = 1;
  for (int j = tier + 1; j <= s.tiers; ++j) n *= s.m[j];
  for (int j = 1; j <= tier; ++j) n *= s.w[j];
  return n;
}

// The a-digits of a tier-`tier` node (a_{tier+1..h}) from its index (a-part most significant,
// a_h first; then the b-part, b_1 first).
std::array<uint32_t, 4> ADigits(const ShapeSpec& s, int tier, uint32_t index) {
  uint64_t bcount = 1;
  for (int j = 1; j <= tier; ++j) bcount *= s.w[j];
  uint64_t apart = index / bcount;
  std::array<uint32_t, 4> a{};
  for (int j = tier + 1; j <= s.tiers; ++j) {
    a[j] = static_cast<uint32_t>(apart % s.m[j]);
    apart /= s.m[j];
  }
  return a;
}

internal::Fields MakeFields(const ArtifactSpec& spec) {
  const ShapeSpec& s = spec.shape;
  const AddressSpec& a = spec.addresses;
  internal::Fields f;
  f.tiers = s.tiers;
  int used = 0;
  for (int j = 1; j <= s.tiers; ++j) {
    f.shift[j] = a.shift[j];
    f.digit_mask[j] = static_cast<uint32_t>(BitsMask(a.width[j]));
    f.m[j] = s.m[j];
    for (int b = a.shift[j]; b < a.shift[j] + a.width[j]; ++b)
      f.bit_tier[b] = static_cast<uint8_t>(j);
    used = a.shift[j] + a.width[j];
  }
  f.v4_field_bits = static_cast<uint32_t>(BitsMask(used));
  f.v4_base = a.ipv4_base;
  f.has_v6 = a.has_ipv6;
  f.v6_hi = internal::LoadBe64(a.ipv6_base.data());
  f.v6_field_bits = BitsMask(used);
  return f;
}

uint64_t Pack(const internal::Fields& f, const std::array<uint32_t, 4>& d, int from_tier) {
  uint64_t v = 0;
  for (int j = from_tier; j <= f.tiers; ++j) v |= uint64_t{d[j]} << f.shift[j];
  return v;
}

uint64_t FieldMask(const internal::Fields& f, int from_tier) {
  uint64_t v = 0;
  for (int j = from_tier; j <= f.tiers; ++j) v |= uint64_t{f.digit_mask[j]} << f.shift[j];
  return v;
}

// The first `len` bits of a 128-bit value as two 64-bit masks.
std::array<uint64_t, 2> PrefixMask128(int len) {
  return {len >= 64 ? ~uint64_t{0} : (len == 0 ? 0 : ~uint64_t{0} << (64 - len)),
          len <= 64 ? 0 : (len >= 128 ? ~uint64_t{0} : ~uint64_t{0} << (128 - len))};
}

internal::ClassMatch MakeMatch(const ClassSpec& c) {
  internal::ClassMatch m;
  m.v6_mask = PrefixMask128(c.prefix_len);
  m.v6_value = {internal::LoadBe64(c.prefix.data()) & m.v6_mask[0],
                internal::LoadBe64(c.prefix.data() + 8) & m.v6_mask[1]};
  // IPv4 destinations are ::ffff:a.b.c.d: the class matches them when its first
  // min(len, 96) bits agree with ::ffff:0:0, and then on the remaining len - 96 bits.
  constexpr uint64_t kMappedHi = 0;
  constexpr uint64_t kMappedLo = uint64_t{0xffff} << 32;
  const std::array<uint64_t, 2> head = PrefixMask128(std::min<int>(c.prefix_len, 96));
  m.v4_any = (kMappedHi & head[0]) == (m.v6_value[0] & head[0]) &&
             (kMappedLo & head[1]) == (m.v6_value[1] & head[1]);
  m.v4_mask = static_cast<uint32_t>(m.v6_mask[1]);
  m.v4_value = static_cast<uint32_t>(m.v6_value[1]);
  return m;
}

}  // namespace

// ---- SwitchTable -----------------------------------------------------------------------------
absl::StatusOr<SwitchTable> SwitchTable::Build(const ArtifactSpec& spec, uint8_t plane,
                                               uint32_t index) {
  const ShapeSpec& s = spec.shape;
  if (spec.role != Role::kSwitch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("switch table: artifact '%s' is a host artifact", spec.role_name));
  }
  if (spec.tier < 1 || spec.tier > s.tiers || s.tiers > kMaxTiers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("switch table: tier %u outside 1..%u", spec.tier, s.tiers));
  }
  if (plane >= s.planes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "switch table: plane %u; fabric '%s' has %u planes", plane, spec.fabric_name, s.planes));
  }
  if (index >= NodeCount(s, spec.tier)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("switch table: %s index %u; the tier has %u switches per plane",
                        spec.role_name, index, NodeCount(s, spec.tier)));
  }
  SwitchTable t;
  t.fields_ = MakeFields(spec);
  t.tier_ = spec.tier;
  t.down_shift_ = t.fields_.shift[spec.tier];
  t.down_mask_ = t.fields_.digit_mask[spec.tier];
  t.own_above_ = Pack(t.fields_, ADigits(s, spec.tier, index), spec.tier + 1);
  t.above_mask_ = FieldMask(t.fields_, spec.tier + 1);
  const uint64_t all_up = spec.tier < s.tiers ? BitsMask(s.w[spec.tier + 1]) : 0;
  for (int l = spec.tier + 1; l <= s.tiers; ++l) t.up_mask_[l] = all_up;
  auto mask =
      std::lower_bound(spec.node_masks.begin(), spec.node_masks.end(), std::make_pair(plane, index),
                       [](const NodeMaskSpec& m, const std::pair<uint8_t, uint32_t>& key) {
                         return std::make_pair(m.plane, m.index) < key;
                       });
  if (mask != spec.node_masks.end() && mask->plane == plane && mask->index == index) {
    for (int l = spec.tier + 1; l <= s.tiers; ++l) t.up_mask_[l] = mask->up_mask[l] & all_up;
  }
  // Classes up to the last one restricting this tier's up hops: a later class can only be the
  // first match when none of these matched, and then it restricts nothing here.
  size_t last = 0;
  for (size_t i = 0; i < spec.classes.size(); ++i) {
    if (spec.classes[i].restrict_tier == spec.tier + 1) last = i + 1;
  }
  for (size_t i = 0; i < last; ++i) {
    const ClassSpec& c = spec.classes[i];
    Restriction r;
    r.match = MakeMatch(c);
    r.allowed = c.restrict_tier == spec.tier + 1 ? c.allowed_up_mask : ~uint64_t{0};
    t.restrictions_.push_back(r);
  }
  bool uniform = true;
  for (int l = spec.tier + 2; l <= s.tiers; ++l) {
    uniform = uniform && t.up_mask_[l] == t.up_mask_[l - 1];
  }
  // Overrides of this node: an open-addressed table at most half full. A wildcard override of the
  // plane (kAllNodes) applies where the node has no entry of its own for the same (level, dst), so
  // it is folded in under the same key and the lookup needs no second probe.
  size_t n = 0;
  for (const OverrideSpec& o : spec.overrides) {
    n += o.plane == plane && (o.node == index || o.node == kAllNodes);
  }
  if (n > 0) {
    const size_t cap = std::bit_ceil(2 * n);
    t.overrides_.assign(cap, OverrideSlot{});
    t.override_shift_ = static_cast<uint32_t>(32 - std::countr_zero(cap));
    for (const bool wildcard : {false, true}) {
      for (const OverrideSpec& o : spec.overrides) {
        if (o.plane != plane || o.node != (wildcard ? kAllNodes : index)) continue;
        if (o.level > 1 || o.dst >= (1u << 24)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "switch table: override level %u dst %u out of range", o.level, o.dst));
        }
        const uint32_t key = 1 + (uint32_t{o.level} << 24 | o.dst);
        size_t i = (key * 0x9E3779B1u) >> t.override_shift_;
        bool taken = false;
        while (t.overrides_[i].key != 0) {
          if (t.overrides_[i].key == key) {
            if (!wildcard) {
              return absl::InvalidArgumentError(absl::StrFormat(
                  "switch table: two overrides for level %u dst %u", o.level, o.dst));
            }
            taken = true;  // the node's own entry wins
            break;
          }
          i = (i + 1) & (cap - 1);
        }
        if (!taken) t.overrides_[i] = OverrideSlot{key, o.hops};
      }
    }
  }
  // Overrides beside the fast path: the tier-1 groups they name, as bits indexed by the group's
  // packed digits above tier 1 — up to 2^20 groups (128 KiB), else the general path.
  int group_bits = 0;
  for (int j = 2; j <= s.tiers; ++j) {
    const int top = t.fields_.shift[j] + static_cast<int>(std::bit_width(t.fields_.digit_mask[j]));
    group_bits = std::max(group_bits, top - t.fields_.shift[2]);
  }
  const bool groups_fit = s.tiers >= 2 && group_bits <= 20;
  if (uniform && t.restrictions_.empty() && (t.overrides_.empty() || groups_fit)) {
    if (!t.overrides_.empty()) {
      t.group_mask_ = static_cast<uint32_t>((uint64_t{1} << group_bits) - 1);
      t.override_groups_.assign((size_t{1} << group_bits) / 64 + 1, 0);
      for (const OverrideSlot& o : t.overrides_) {
        if (o.key == 0) continue;
        const uint32_t level = (o.key - 1) >> 24, dst = (o.key - 1) & 0xffffff;
        const uint32_t group = level == 0 ? dst / s.m[1] : dst;  // dense: a3 * m2 + a2
        const uint32_t a2 = group % s.m[2], a3 = s.tiers >= 3 ? group / s.m[2] : 0;
        uint32_t g = a2;
        if (s.tiers >= 3) g |= a3 << (t.fields_.shift[3] - t.fields_.shift[2]);
        g &= t.group_mask_;
        t.override_groups_[g >> 6] |= uint64_t{1} << (g & 63);
      }
    }
    internal::FastSwitch4& f = t.fast_;
    f.field_bits = t.fields_.v4_field_bits;
    f.base = t.fields_.v4_base;
    f.own = static_cast<uint32_t>(t.own_above_);
    f.above = static_cast<uint32_t>(t.above_mask_);
    f.down_shift = t.down_shift_;
    f.down_mask = t.down_mask_;
    for (int j = 1; j <= kMaxTiers; ++j) {
      f.shift[j] = t.fields_.shift[j];
      f.digit_mask[j] = t.fields_.digit_mask[j];
      f.m[j] = t.fields_.m[j];
      // No range check only where the digit's field holds exactly m_j values: a power-of-two m_j
      // in a wider field (an artifact may lay its fields out wider than needed) still needs it.
      f.pow2 = f.pow2 && uint64_t{f.digit_mask[j]} + 1 == f.m[j];
    }
    const uint64_t up = spec.tier < s.tiers ? t.up_mask_[spec.tier + 1] : 0;
    f.up_word = static_cast<uint64_t>(up != 0 ? HopKind::kUp : HopKind::kUnreachable);
    f.up_mask = up;
    t.fast_fn_ = internal::PickFastSwitch4();
  }
  return t;
}

const NextHops* SwitchTable::FindOverride(uint32_t key) const {
  const size_t mask = overrides_.size() - 1;
  for (size_t i = (key * 0x9E3779B1u) >> override_shift_;; i = (i + 1) & mask) {
    const OverrideSlot& slot = overrides_[i];
    if (slot.key == key) return &slot.hops;
    if (slot.key == 0) return nullptr;
  }
}

inline NextHops SwitchTable::Resolve(uint64_t v, uint64_t allowed) const {
  NextHops nh;
  std::array<uint32_t, 4> d;
  if (!fields_.Digits(v, d)) return nh;  // kNotInFabric
  if (!overrides_.empty()) [[unlikely]] {
    const uint32_t host = fields_.Host(d);
    if (const NextHops* o = FindOverride(1 + host)) return *o;
    if (const NextHops* o = FindOverride(1 + (1u << 24 | fields_.Group(d)))) {
      // A group's override at tier 1 going down goes to the destination's own port.
      if (tier_ == 1 && o->kind == HopKind::kDown) {
        nh.kind = HopKind::kDown;
        nh.down_port = static_cast<uint16_t>((v >> down_shift_) & down_mask_);
        return nh;
      }
      return *o;
    }
  }
  const uint64_t diff = (v ^ own_above_) & above_mask_;
  if (diff == 0) {
    nh.kind = HopKind::kDown;
    nh.down_port = static_cast<uint16_t>((v >> down_shift_) & down_mask_);
    return nh;
  }
  const uint64_t up = up_mask_[fields_.HighestDiff(diff)] & allowed;
  nh.kind = up != 0 ? HopKind::kUp : HopKind::kUnreachable;
  nh.up_mask = up;
  return nh;
}

inline uint64_t SwitchTable::Allowed4(uint32_t dst) const {
  for (const Restriction& r : restrictions_) {
    if (r.match.Match4(dst)) return r.allowed;
  }
  return ~uint64_t{0};
}

inline uint64_t SwitchTable::Allowed6(const uint8_t* dst16) const {
  for (const Restriction& r : restrictions_) {
    if (r.match.Match6(dst16)) return r.allowed;
  }
  return ~uint64_t{0};
}

static_assert(offsetof(NextHops, kind) == 0 && offsetof(NextHops, down_port) == 2 &&
                  offsetof(NextHops, up_mask) == 8 && sizeof(NextHops) == 16 &&
                  static_cast<int>(HopKind::kNotInFabric) == 3 &&
                  static_cast<int>(HopKind::kDown) == 0,
              "FastSwitch4 writes NextHops as two words");

NextHops SwitchTable::Lookup4(uint32_t dst) const {
  if (fast_fn_ != nullptr) {
    if (!override_groups_.empty() && OverriddenGroup4(dst)) [[unlikely]] {
      return LookupGeneral4(dst);
    }
    uint64_t words[2];
    if (fast_.pow2) {
      internal::FastSwitch4Words<true>(fast_, dst, words);
    } else {
      internal::FastSwitch4Words<false>(fast_, dst, words);
    }
    NextHops nh;
    std::memcpy(&nh, words, sizeof(nh));
    return nh;
  }
  return LookupGeneral4(dst);
}

NextHops SwitchTable::LookupGeneral4(uint32_t dst) const {
  uint64_t v;
  if (!fields_.Fields4(dst, &v)) return NextHops{};
  return Resolve(v, restrictions_.empty() ? ~uint64_t{0} : Allowed4(dst));
}

NextHops SwitchTable::Lookup6(const uint8_t* dst16) const {
  uint64_t v;
  if (!fields_.Fields6(dst16, &v)) return NextHops{};
  return Resolve(v, restrictions_.empty() ? ~uint64_t{0} : Allowed6(dst16));
}

void SwitchTable::LookupBulk4(const uint32_t* dst, NextHops* out, size_t n) const {
  if (fast_fn_ != nullptr) {
    fast_fn_(fast_, dst, out, n);
    if (!override_groups_.empty()) {
      for (size_t i = 0; i < n; ++i) {
        if (OverriddenGroup4(dst[i])) [[unlikely]] out[i] = LookupGeneral4(dst[i]);
      }
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = LookupGeneral4(dst[i]);
}

size_t SwitchTable::memory_bytes() const {
  return sizeof(*this) + restrictions_.capacity() * sizeof(Restriction) +
         overrides_.capacity() * sizeof(OverrideSlot) +
         override_groups_.capacity() * sizeof(uint64_t);
}

// ---- HostTable -------------------------------------------------------------------------------
absl::StatusOr<HostTable> HostTable::Build(const ArtifactSpec& spec, uint32_t host) {
  const ShapeSpec& s = spec.shape;
  if (spec.role != Role::kHost) {
    return absl::InvalidArgumentError(
        absl::StrFormat("host table: artifact '%s' is a switch artifact", spec.role_name));
  }
  if (s.tiers < 2 || s.tiers > kMaxTiers || s.planes * s.w[1] > kMaxHostPaths ||
      s.planes * s.w[1] == 0) {
    return absl::InvalidArgumentError("host table: shape out of range (decode the artifact first)");
  }
  if (host >= NodeCount(s, 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host table: host %u; fabric '%s' has %u hosts", host, spec.fabric_name, NodeCount(s, 0)));
  }
  HostTable t;
  t.fields_ = MakeFields(spec);
  t.addresses_ = spec.addresses;
  t.host_ = host;
  t.own_fields_ = Pack(t.fields_, ADigits(s, 0, host), 1);
  t.rails_ = spec.rail_local ? s.rails : 0;
  t.own_rail_ = t.rails_ != 0 ? ADigits(s, 0, host)[2] % t.rails_ : 0;
  t.max_paths_ = std::clamp<uint32_t>(spec.max_paths, 1, kMaxHostPaths);
  const uint32_t w1 = s.w[1];
  t.all_ports_ = BitsMask(s.planes * w1);
  for (int l = 1; l <= s.tiers; ++l) t.port_mask_[l] = t.all_ports_;
  for (const NodeMaskSpec& m : spec.node_masks) {
    if (m.plane == 0 && m.index == host) {
      for (int l = 1; l <= s.tiers; ++l) t.port_mask_[l] = m.up_mask[l] & t.all_ports_;
    }
  }
  // Entropy by LCA tier; a tier without its own list (and the same-ToR tier 1, which has one
  // path per port) uses the first value of the lowest tier that has one, or 0.
  uint32_t fallback = 0;
  for (int l = kMaxTiers; l >= 1; --l) {
    if (!spec.entropy.by_lca[l].empty()) fallback = spec.entropy.by_lca[l][0];
  }
  for (int l = 1; l <= s.tiers; ++l) {
    const auto& list = spec.entropy.by_lca[l];
    if (list.empty()) {
      t.entropy_[l] = {fallback};
    } else {
      t.entropy_[l].assign(list.begin(),
                           list.begin() + std::min<size_t>(list.size(), kMaxHostPaths));
    }
  }
  // Port p leads to the tier-1 switch b_1 = p % w_1 of plane p / w_1 above this host's group.
  const uint32_t group = host / s.m[1];
  for (uint32_t p = 0; p < s.planes * w1; ++p) {
    const uint32_t index = group * w1 + p % w1;
    t.port_mac_[p] = {0x02,
                      static_cast<uint8_t>(p / w1),
                      0x01,
                      static_cast<uint8_t>(index >> 16),
                      static_cast<uint8_t>(index >> 8),
                      static_cast<uint8_t>(index)};
  }
  for (const ClassSpec& c : spec.classes) {
    HostClass hc;
    hc.match = MakeMatch(c);
    hc.prefix = c.prefix;
    hc.prefix_len = c.prefix_len;
    hc.max_paths = c.max_paths != 0 ? std::min<uint32_t>(c.max_paths, kMaxHostPaths) : t.max_paths_;
    hc.port_mask = 0;
    for (uint32_t p = 0; p < s.planes; ++p) {
      if (c.planes_mask == 0 || (c.planes_mask >> p & 1)) hc.port_mask |= BitsMask(w1) << (p * w1);
    }
    t.classes_.push_back(hc);
  }
  for (const OverrideSpec& o : spec.overrides) {
    if (o.plane == 0 && o.node == host) {
      t.overrides_.push_back(HostOverride{uint32_t{o.level} << 24 | o.dst, o.hops});
    }
  }
  std::sort(t.overrides_.begin(), t.overrides_.end(),
            [](const HostOverride& x, const HostOverride& y) { return x.key < y.key; });
  t.dst_exceptions_.reserve(spec.dst_exceptions.size());
  for (const DstExceptionSpec& e : spec.dst_exceptions) {
    DstException x;
    x.key = uint32_t{e.level} << 24 | e.dst;
    for (int l = 1; l <= s.tiers; ++l) {
      x.ports[l] = e.ports[l] & t.all_ports_;
      x.paths[l] = e.paths[l];
    }
    t.dst_exceptions_.push_back(x);
  }
  std::sort(t.dst_exceptions_.begin(), t.dst_exceptions_.end(),
            [](const DstException& x, const DstException& y) { return x.key < y.key; });
  return t;
}

const HostTable::DstException* HostTable::FindDstException(uint32_t level, uint32_t dst) const {
  const uint32_t key = level << 24 | dst;
  auto it = std::lower_bound(dst_exceptions_.begin(), dst_exceptions_.end(), key,
                             [](const DstException& e, uint32_t k) { return e.key < k; });
  return it != dst_exceptions_.end() && it->key == key ? &*it : nullptr;
}

const NextHops* HostTable::FindOverride(uint32_t level, uint32_t dst) const {
  const uint32_t key = level << 24 | dst;
  auto it = std::lower_bound(overrides_.begin(), overrides_.end(), key,
                             [](const HostOverride& o, uint32_t k) { return o.key < k; });
  return it != overrides_.end() && it->key == key ? &it->hops : nullptr;
}

int HostTable::Class4(uint32_t dst) const {
  for (size_t i = 0; i < classes_.size(); ++i) {
    if (classes_[i].match.Match4(dst)) return static_cast<int>(i);
  }
  return -1;
}

int HostTable::Class6(const uint8_t* dst16) const {
  for (size_t i = 0; i < classes_.size(); ++i) {
    if (classes_[i].match.Match6(dst16)) return static_cast<int>(i);
  }
  return -1;
}

uint32_t HostTable::Compose(int lca, int cls, const NextHops* ovr, const DstException* dx,
                            HostPath* out, uint32_t cap, HopKind* kind) const {
  uint64_t ports = port_mask_[lca];
  uint32_t limit = max_paths_;
  size_t entropies = entropy_[lca].size();
  if (dx != nullptr) {
    // The destination's failures: the ports still leading there from an intact source, at most
    // paths[lca] entropy values per port (the first of the list).
    ports &= dx->ports[lca];
    entropies = std::min<size_t>(entropies, dx->paths[lca]);
  }
  if (ovr != nullptr) {
    if (ovr->kind != HopKind::kUp) {
      *kind = HopKind::kUnreachable;
      return 0;
    }
    ports = ovr->up_mask & all_ports_;
  }
  if (cls >= 0) {
    ports &= classes_[cls].port_mask;
    limit = classes_[cls].max_paths;
  }
  limit = std::min(limit, cap);
  if (ports == 0) {
    *kind = HopKind::kUnreachable;
    return 0;
  }
  uint32_t n = 0;
  for (size_t k = 0; k < entropies; ++k) {
    const uint32_t e = entropy_[lca][k];
    for (uint64_t left = ports; left != 0 && n < limit; left &= left - 1) {
      const int p = std::countr_zero(left);
      out[n++] = HostPath{static_cast<uint16_t>(p), e, port_mac_[p]};
    }
    if (n >= limit) break;
  }
  *kind = n > 0 ? HopKind::kUp : HopKind::kUnreachable;
  return n;
}

uint32_t HostTable::Paths(uint64_t v, int cls, HostPath* out, uint32_t cap, HopKind* kind) const {
  std::array<uint32_t, 4> d;
  if (!fields_.Digits(v, d)) {
    *kind = HopKind::kNotInFabric;
    return 0;
  }
  const int lca = fields_.HighestDiff(v ^ own_fields_);
  if (lca == 0) {
    *kind = HopKind::kLocal;
    return 0;
  }
  // Rail-local: a leaf's rail is a_2 % rails, and other rails are reached over NVLink first.
  if (rails_ != 0 && d[2] % rails_ != own_rail_) {
    *kind = HopKind::kUnreachable;
    return 0;
  }
  const NextHops* ovr = nullptr;
  if (!overrides_.empty()) {
    ovr = FindOverride(0, fields_.Host(d));
    if (ovr == nullptr) ovr = FindOverride(1, fields_.Group(d));
  }
  const DstException* dx = nullptr;
  if (!dst_exceptions_.empty()) {
    dx = FindDstException(0, fields_.Host(d));
    if (dx == nullptr) dx = FindDstException(1, fields_.Group(d));
  }
  return Compose(lca, cls, ovr, dx, out, cap, kind);
}

uint32_t HostTable::Paths4(uint32_t dst, HostPath* out, uint32_t cap, HopKind* kind) const {
  uint64_t v;
  if (!fields_.Fields4(dst, &v)) {
    *kind = HopKind::kNotInFabric;
    return 0;
  }
  return Paths(v, classes_.empty() ? -1 : Class4(dst), out, cap, kind);
}

uint32_t HostTable::Paths6(const uint8_t* dst16, HostPath* out, uint32_t cap, HopKind* kind) const {
  uint64_t v;
  if (!fields_.Fields6(dst16, &v)) {
    *kind = HopKind::kNotInFabric;
    return 0;
  }
  return Paths(v, classes_.empty() ? -1 : Class6(dst16), out, cap, kind);
}

// ---- HostTable::PrefixPathSets ----------------------------------------------------------------
// The path set is a function of (is it this host, the LCA tier, the rail, a host override, a
// destination exception, the class), and each of these is decided by membership in a prefix: the
// subtree prefixes Q_0 (this host) .. Q_h (the fabric), the tier-1 group prefixes of other rails,
// of overrides and of destination exceptions, the host prefixes of overrides and of destination
// exceptions, the class prefixes. Prefixes are laminar (two are nested or disjoint),
// so for an address whose longest match among them is p, "the address is inside prefix q" is
// "q contains p" for every q of the family: each p, evaluated by containment, gives the path set
// of exactly the addresses for which it is the longest match.
namespace {

struct P128 {
  uint64_t hi = 0, lo = 0;
  int len = 0;
  friend bool operator==(const P128&, const P128&) = default;
};

bool Contains(const P128& outer, const P128& inner) {
  if (outer.len > inner.len) return false;
  const std::array<uint64_t, 2> m = PrefixMask128(outer.len);
  return ((outer.hi ^ inner.hi) & m[0]) == 0 && ((outer.lo ^ inner.lo) & m[1]) == 0;
}

P128 FromBytes(const std::array<uint8_t, 16>& a, int len) {
  return P128{internal::LoadBe64(a.data()), internal::LoadBe64(a.data() + 8), len};
}

std::array<uint8_t, 16> ToBytes(const P128& p) {
  std::array<uint8_t, 16> a;
  for (int i = 0; i < 8; ++i) {
    a[i] = static_cast<uint8_t>(p.hi >> (56 - 8 * i));
    a[8 + i] = static_cast<uint8_t>(p.lo >> (56 - 8 * i));
  }
  return a;
}

}  // namespace

std::vector<HostTable::PrefixPaths> HostTable::PrefixPathSets(bool ipv6) const {
  std::vector<PrefixPaths> result;
  if (ipv6 && !fields_.has_v6) return result;
  const int tiers = fields_.tiers;
  const int used = std::popcount(fields_.v6_field_bits);
  // The prefix of the addresses whose fields of tiers >= j equal those of packed value v.
  auto at = [&](uint64_t v, int j) {
    const int low = j <= tiers ? fields_.shift[j] : used;
    const uint64_t fields = v & fields_.v6_field_bits & (~uint64_t{0} << low);
    return ipv6 ? P128{fields_.v6_hi, fields, 128 - low}
                : P128{0, uint64_t{0xffff} << 32 | fields_.v4_base | fields, 128 - low};
  };
  auto fields_of = [&](const P128& p) { return p.lo & fields_.v6_field_bits; };
  std::array<P128, kMaxTiers + 1> q;  // q[L]: the destinations with LCA tier <= L
  for (int l = 0; l <= tiers; ++l) q[l] = at(own_fields_, l + 1);
  std::vector<P128> family(q.begin(), q.begin() + tiers + 1);
  const int group_len = 128 - fields_.shift[2];
  auto pack_group = [&](uint32_t g) {
    const std::array<uint32_t, 4> d{0, 0, g % fields_.m[2], g / fields_.m[2]};
    return Pack(fields_, d, 2);
  };
  const uint32_t groups = fields_.m[2] * fields_.m[3];
  if (rails_ != 0) {
    for (uint32_t g = 0; g < groups; ++g) {
      if ((g % fields_.m[2]) % rails_ != own_rail_) family.push_back(at(pack_group(g), 2));
    }
  }
  std::vector<uint32_t> keys;
  keys.reserve(overrides_.size() + dst_exceptions_.size());
  for (const HostOverride& o : overrides_) keys.push_back(o.key);
  for (const DstException& e : dst_exceptions_) keys.push_back(e.key);
  for (const uint32_t key : keys) {
    const uint32_t dst = key & 0xffffff;
    if (key >> 24 == 0) {
      const std::array<uint32_t, 4> d{0, dst % fields_.m[1], dst / fields_.m[1] % fields_.m[2],
                                      dst / fields_.m[1] / fields_.m[2]};
      family.push_back(at(Pack(fields_, d, 1), 1));
    } else {
      family.push_back(at(pack_group(dst), 2));
    }
  }
  for (const HostClass& c : classes_) {
    const P128 p = FromBytes(c.prefix, c.prefix_len);
    if (Contains(q[tiers], p)) family.push_back(p);
  }
  std::sort(family.begin(), family.end(), [](const P128& x, const P128& y) {
    return std::tie(y.len, x.hi, x.lo) < std::tie(x.len, y.hi, y.lo);
  });
  family.erase(std::unique(family.begin(), family.end()), family.end());

  std::array<HostPath, kMaxHostPaths> buf;
  for (const P128& p : family) {
    PrefixPaths entry;
    entry.prefix = ToBytes(p);
    entry.prefix_len = static_cast<uint8_t>(p.len);
    if (p == q[0]) {
      entry.kind = HopKind::kLocal;
      result.push_back(std::move(entry));
      continue;
    }
    int lca = 1;
    while (!Contains(q[lca], p)) ++lca;  // q[tiers] contains every member
    std::array<uint32_t, 4> d;
    const bool in_group = p.len >= group_len;
    const bool valid = fields_.Digits(fields_of(p), d);
    if (in_group && rails_ != 0 && valid && d[2] % rails_ != own_rail_) {
      entry.kind = HopKind::kUnreachable;
      result.push_back(std::move(entry));
      continue;
    }
    const NextHops* ovr = nullptr;
    if (!overrides_.empty() && valid) {
      if (p.len == 128) ovr = FindOverride(0, fields_.Host(d));
      if (ovr == nullptr && in_group) ovr = FindOverride(1, fields_.Group(d));
    }
    const DstException* dx = nullptr;
    if (!dst_exceptions_.empty() && valid) {
      if (p.len == 128) dx = FindDstException(0, fields_.Host(d));
      if (dx == nullptr && in_group) dx = FindDstException(1, fields_.Group(d));
    }
    int cls = -1;
    for (size_t i = 0; i < classes_.size() && cls < 0; ++i) {
      if (Contains(FromBytes(classes_[i].prefix, classes_[i].prefix_len), p)) {
        cls = static_cast<int>(i);
      }
    }
    const uint32_t n = Compose(lca, cls, ovr, dx, buf.data(), kMaxHostPaths, &entry.kind);
    entry.paths.assign(buf.begin(), buf.begin() + n);
    result.push_back(std::move(entry));
  }
  return result;
}

}  // namespace heddle::fwd
