// The artifact's binary form (artifact.h; docs/nuwa.md §4).
//
// Header (64 bytes, little-endian):
//    0 magic "HDLNUWA1"        8 u16 version      10 u8 role       11 u8 tier
//   12 u32 section count      16 u64 total length (header included)
//   24 u32 CRC-32C of bytes [64, total length)
//   28 u32 CRC-32C of the header with this field zero (so no header byte goes unchecked)
//   32 u64 fabric digest      40..63 zero
// Section directory at 64: one 16-byte entry per section (u32 type, u32 zero, u32 offset from
// the start of the artifact, u32 length), then the sections, each 8-byte aligned, zero padded.
//
//   SHAPE (1)       40 B: u8 tiers, u8 planes, u16 rails, u32 0, u32 m[4], u32 w[4]
//   ADDR (2)        32 B: u32 ipv4_base, u8 ipv4_prefix_len, u8 has_ipv6, u8 ipv6_prefix_len, u8 0,
//                         u8 ipv6_base[16], u8 width[4], u8 shift[4]
//   HASH (3)        16 B: u8 function, u8 0[3], u32 seed_base, u8 bit_offset[4], u32 0
//   CLASSES (4)     the routing policy: u8 max_paths, u8 rail_local, u16 count, u32 0, then count
//                   40-byte entries (u8 prefix[16], u8 prefix_len, u8 max_paths, u8 planes_mask,
//                   u8 restrict_tier, u32 name offset in the section, u32 name length, u32 0,
//                   u64 allowed_up_mask), then the names, zero padded to 8
//   NODE_MASKS (5)  u32 count, u32 0, then count 40-byte entries (u8 plane, u8 0[3], u32 index,
//                   u64 up_mask[4])
//   OVERRIDES (6)   u32 count, u32 0, then count 24-byte entries (u8 plane, u8 level, u8 kind,
//                   u8 0, u32 node, u32 dst, u16 down_port, u16 0, u64 up_mask); node 0xFFFFFFFF
//                   (kAllNodes, switch artifacts only, kind 2 unreachable): every node of the
//                   plane without its own entry for (level, dst)
//   ENTROPY (7)     u32 count[4], then the values (u32) of by_lca[0..3] in turn, zero padded to 8
//   NAME (8)        u32 fabric name length, u32 role name length, the two names, zero padded to 8
//   DST_EXCEPTIONS (9, version 2)  u32 count, u32 0, then count 32-byte entries (u8 level,
//                   u8 paths[1..3], u32 dst, u64 ports[1..3]); host artifacts only (switch
//                   artifacts: count 0); sorted by (level, dst)
//
// Serialize() writes every section, in type order, so equal specs give equal bytes.
#include "dataplane/fwd/artifact.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "dataplane/fwd/crc32c.h"

namespace heddle::fwd {
namespace {

constexpr char kMagic[8] = {'H', 'D', 'L', 'N', 'U', 'W', 'A', '1'};
constexpr size_t kHeaderSize = 64;
constexpr size_t kDirEntrySize = 16;
constexpr size_t kMaxSections = 16;
constexpr size_t kMaxName = 255;
constexpr size_t kMaxClasses = 64;
constexpr uint32_t kMaxEntropy = 0xFFFFF;  // 20 bits: a UDP source port or an IPv6 flow label
constexpr uint32_t kMaxChildren = 1024;
constexpr uint32_t kMaxFanout = 64;
constexpr uint32_t kMaxPlanes = 8;

enum Section : uint32_t {
  kShape = 1,
  kAddr = 2,
  kHash = 3,
  kClasses = 4,
  kNodeMasks = 5,
  kOverrides = 6,
  kEntropy = 7,
  kName = 8,
  kDstExceptions = 9,
  kSectionTypes = 10,
};
constexpr const char* kSectionNames[kSectionTypes] = {
    "?",          "SHAPE",     "ADDR",    "HASH", "CLASSES",
    "NODE_MASKS", "OVERRIDES", "ENTROPY", "NAME", "DST_EXCEPTIONS"};

constexpr size_t kShapeSize = 40;
constexpr size_t kAddrSize = 32;
constexpr size_t kHashSize = 16;
constexpr size_t kClassEntrySize = 40;
constexpr size_t kMaskEntrySize = 40;
constexpr size_t kOverrideEntrySize = 24;
constexpr size_t kDstExceptionEntrySize = 32;

size_t Pad8(size_t n) { return (n + 7) & ~size_t{7}; }

// ---- Writing ---------------------------------------------------------------------------------
class Writer {
 public:
  void U8(uint8_t v) { buf_.push_back(v); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Bytes(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  void Zeros(size_t n) { buf_.insert(buf_.end(), n, 0); }
  void Align8() { Zeros(Pad8(buf_.size()) - buf_.size()); }
  size_t size() const { return buf_.size(); }
  std::vector<uint8_t>& buf() { return buf_; }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> buf_;
};

void PutLe(std::vector<uint8_t>& buf, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) buf[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

void WriteShape(Writer& w, const ShapeSpec& s) {
  w.U8(s.tiers);
  w.U8(s.planes);
  w.U16(s.rails);
  w.U32(0);
  for (uint32_t m : s.m) w.U32(m);
  for (uint32_t x : s.w) w.U32(x);
}

void WriteAddr(Writer& w, const AddressSpec& a) {
  w.U32(a.ipv4_base);
  w.U8(a.ipv4_prefix_len);
  w.U8(a.has_ipv6 ? 1 : 0);
  w.U8(a.ipv6_prefix_len);
  w.U8(0);
  w.Bytes(a.ipv6_base.data(), 16);
  w.Bytes(a.width.data(), 4);
  w.Bytes(a.shift.data(), 4);
}

void WriteHash(Writer& w, const HashSpec& h) {
  w.U8(h.function);
  w.Zeros(3);
  w.U32(h.seed_base);
  w.Bytes(h.bit_offset.data(), 4);
  w.U32(0);
}

void WriteClasses(Writer& w, const ArtifactSpec& spec) {
  w.U8(spec.max_paths);
  w.U8(spec.rail_local ? 1 : 0);
  w.U16(static_cast<uint16_t>(spec.classes.size()));
  w.U32(0);
  uint32_t name_at = static_cast<uint32_t>(8 + kClassEntrySize * spec.classes.size());
  for (const ClassSpec& c : spec.classes) {
    w.Bytes(c.prefix.data(), 16);
    w.U8(c.prefix_len);
    w.U8(c.max_paths);
    w.U8(c.planes_mask);
    w.U8(c.restrict_tier);
    w.U32(name_at);
    w.U32(static_cast<uint32_t>(c.name.size()));
    w.U32(0);
    w.U64(c.allowed_up_mask);
    name_at += static_cast<uint32_t>(c.name.size());
  }
  for (const ClassSpec& c : spec.classes) w.Bytes(c.name.data(), c.name.size());
  w.Align8();
}

void WriteNodeMasks(Writer& w, const std::vector<NodeMaskSpec>& masks) {
  w.U32(static_cast<uint32_t>(masks.size()));
  w.U32(0);
  for (const NodeMaskSpec& m : masks) {
    w.U8(m.plane);
    w.Zeros(3);
    w.U32(m.index);
    for (uint64_t x : m.up_mask) w.U64(x);
  }
}

void WriteOverrides(Writer& w, const std::vector<OverrideSpec>& overrides) {
  w.U32(static_cast<uint32_t>(overrides.size()));
  w.U32(0);
  for (const OverrideSpec& o : overrides) {
    w.U8(o.plane);
    w.U8(o.level);
    w.U8(static_cast<uint8_t>(o.hops.kind));
    w.U8(0);
    w.U32(o.node);
    w.U32(o.dst);
    w.U16(o.hops.down_port);
    w.U16(0);
    w.U64(o.hops.up_mask);
  }
}

void WriteDstExceptions(Writer& w, const std::vector<DstExceptionSpec>& exceptions) {
  w.U32(static_cast<uint32_t>(exceptions.size()));
  w.U32(0);
  for (const DstExceptionSpec& e : exceptions) {
    w.U8(e.level);
    for (int l = 1; l <= kMaxTiers; ++l) w.U8(e.paths[l]);
    w.U32(e.dst);
    for (int l = 1; l <= kMaxTiers; ++l) w.U64(e.ports[l]);
  }
}

void WriteEntropy(Writer& w, const EntropySpec& e) {
  for (const auto& list : e.by_lca) w.U32(static_cast<uint32_t>(list.size()));
  for (const auto& list : e.by_lca) {
    for (uint32_t v : list) w.U32(v);
  }
  w.Align8();
}

void WriteName(Writer& w, const ArtifactSpec& spec) {
  w.U32(static_cast<uint32_t>(spec.fabric_name.size()));
  w.U32(static_cast<uint32_t>(spec.role_name.size()));
  w.Bytes(spec.fabric_name.data(), spec.fabric_name.size());
  w.Bytes(spec.role_name.data(), spec.role_name.size());
  w.Align8();
}

// ---- Reading ---------------------------------------------------------------------------------
// A bounds-checked little-endian cursor over one section. Reads past the end return 0 and set
// `overrun`; callers check the section length first, so an overrun is a bug guard, not the
// validation itself.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  uint8_t U8() { return static_cast<uint8_t>(Le(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Le(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Le(4)); }
  uint64_t U64() { return Le(8); }
  void Bytes(void* out, size_t n) {
    if (n > b_.size() - pos_) {
      overrun_ = true;
      std::memset(out, 0, n);
      return;
    }
    std::memcpy(out, b_.data() + pos_, n);
    pos_ += n;
  }
  void Seek(size_t pos) {
    if (pos > b_.size()) {
      overrun_ = true;
      pos = b_.size();
    }
    pos_ = pos;
  }
  size_t pos() const { return pos_; }
  size_t size() const { return b_.size(); }
  bool overrun() const { return overrun_; }
  // True when every byte in [from, to) is zero (padding, reserved fields).
  bool ZeroRange(size_t from, size_t to) const {
    if (to > b_.size() || from > to) return false;
    for (size_t i = from; i < to; ++i) {
      if (b_[i] != 0) return false;
    }
    return true;
  }

 private:
  uint64_t Le(int n) {
    if (static_cast<size_t>(n) > b_.size() - pos_) {
      overrun_ = true;
      pos_ = b_.size();
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{b_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  bool overrun_ = false;
};

uint64_t LeAt(std::span<const uint8_t> b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{b[at + i]} << (8 * i);
  return v;
}

absl::Status Bad(Section s, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("artifact section ", kSectionNames[s], ": ",
                                                 absl::string_view(what.data(), what.size())));
}

uint64_t BitsMask(uint32_t bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

uint64_t NodeCount(const ShapeSpec& s, int tier) {
  uint64_t n = 1;
  for (int j = tier + 1; j <= s.tiers; ++j) n *= s.m[j];
  for (int j = 1; j <= tier; ++j) n *= s.w[j];
  return n;
}

absl::Status ReadShape(Reader r, ShapeSpec& s) {
  if (r.size() != kShapeSize) {
    return Bad(kShape, absl::StrFormat("length %u, expected %u", r.size(), kShapeSize));
  }
  s.tiers = r.U8();
  s.planes = r.U8();
  s.rails = r.U16();
  if (r.U32() != 0) return Bad(kShape, "reserved bytes 4..7 are not zero");
  for (uint32_t& m : s.m) m = r.U32();
  for (uint32_t& w : s.w) w = r.U32();
  if (s.tiers < 2 || s.tiers > kMaxTiers) {
    return Bad(kShape, absl::StrFormat("tiers %u; only 2- and 3-tier fabrics exist", s.tiers));
  }
  if (s.planes < 1 || s.planes > kMaxPlanes) {
    return Bad(kShape, absl::StrFormat("planes %u; allowed 1..%u", s.planes, kMaxPlanes));
  }
  if (s.m[0] != 0 || s.w[0] != 0) return Bad(kShape, "m[0]/w[0] (unused) are not zero");
  for (int j = 1; j <= kMaxTiers; ++j) {
    if (j > s.tiers) {
      if (s.m[j] != 0 || s.w[j] != 0) {
        return Bad(kShape, absl::StrFormat("m[%d]/w[%d] set beyond the %u tiers", j, j, s.tiers));
      }
      continue;
    }
    if (s.m[j] < 1 || s.m[j] > kMaxChildren) {
      return Bad(kShape, absl::StrFormat("m[%d] = %u; allowed 1..%u", j, s.m[j], kMaxChildren));
    }
    if (s.w[j] < 1 || s.w[j] > kMaxFanout) {
      return Bad(kShape, absl::StrFormat("w[%d] = %u; allowed 1..%u", j, s.w[j], kMaxFanout));
    }
  }
  if (s.planes * s.w[1] > kMaxFanout) {
    return Bad(kShape, absl::StrFormat("planes %u x w[1] %u host ports; at most %u", s.planes,
                                       s.w[1], kMaxFanout));
  }
  if (s.rails != 0 && (s.rails > s.m[2] || s.m[2] % s.rails != 0)) {
    return Bad(kShape, absl::StrFormat("rails %u does not divide m[2] = %u", s.rails, s.m[2]));
  }
  uint64_t total = 0;
  for (int t = 0; t <= s.tiers; ++t) total += NodeCount(s, t) * (t == 0 ? 1 : s.planes);
  if (total > (uint64_t{1} << 24)) {
    return Bad(kShape, absl::StrFormat("%u nodes; at most 2^24 (24-bit node indexes)", total));
  }
  return absl::OkStatus();
}

absl::Status ReadAddr(Reader r, const ShapeSpec& s, AddressSpec& a) {
  if (r.size() != kAddrSize) {
    return Bad(kAddr, absl::StrFormat("length %u, expected %u", r.size(), kAddrSize));
  }
  a.ipv4_base = r.U32();
  a.ipv4_prefix_len = r.U8();
  const uint8_t has6 = r.U8();
  a.ipv6_prefix_len = r.U8();
  if (r.U8() != 0) return Bad(kAddr, "reserved byte 7 is not zero");
  r.Bytes(a.ipv6_base.data(), 16);
  r.Bytes(a.width.data(), 4);
  r.Bytes(a.shift.data(), 4);
  if (has6 > 1) return Bad(kAddr, absl::StrFormat("has_ipv6 = %u; expected 0 or 1", has6));
  a.has_ipv6 = has6 == 1;
  int shift = 0;
  for (int j = 1; j <= kMaxTiers; ++j) {
    int width = 0, want_shift = 0;
    if (j <= s.tiers) {
      width = s.m[j] <= 1 ? 1 : std::bit_width(s.m[j] - 1);
      want_shift = shift;
      shift += width;
    }
    if (a.width[j] != width || a.shift[j] != want_shift) {
      return Bad(kAddr, absl::StrFormat("width[%d]/shift[%d] = %u/%u; the shape gives %d/%d", j, j,
                                        a.width[j], a.shift[j], width, want_shift));
    }
  }
  if (a.width[0] != 0 || a.shift[0] != 0) return Bad(kAddr, "width[0]/shift[0] are not zero");
  if (a.ipv4_prefix_len > 32 || shift > 32 - a.ipv4_prefix_len) {
    return Bad(kAddr, absl::StrFormat("ipv4_prefix_len %u leaves no room for %d host bits",
                                      a.ipv4_prefix_len, shift));
  }
  const uint32_t host_bits = a.ipv4_prefix_len == 0 ? ~0u : ~0u >> a.ipv4_prefix_len;
  if (a.ipv4_prefix_len < 32 && (a.ipv4_base & host_bits) != 0) {
    return Bad(kAddr, "ipv4_base has bits set beyond ipv4_prefix_len");
  }
  if (a.ipv6_prefix_len > 128) {
    return Bad(kAddr, absl::StrFormat("ipv6_prefix_len %u > 128", a.ipv6_prefix_len));
  }
  if (a.has_ipv6) {
    if (a.ipv6_prefix_len > 64) {
      return Bad(kAddr, absl::StrFormat("ipv6_prefix_len %u; at most 64 (the host fields live in "
                                        "the low 64 bits)",
                                        a.ipv6_prefix_len));
    }
    for (int bit = a.ipv6_prefix_len; bit < 128; ++bit) {
      if (a.ipv6_base[bit / 8] & (0x80 >> (bit % 8))) {
        return Bad(kAddr, "ipv6_base has bits set beyond ipv6_prefix_len");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ReadHash(Reader r, const ShapeSpec& s, HashSpec& h) {
  if (r.size() != kHashSize) {
    return Bad(kHash, absl::StrFormat("length %u, expected %u", r.size(), kHashSize));
  }
  h.function = r.U8();
  if (!r.ZeroRange(1, 4)) return Bad(kHash, "reserved bytes 1..3 are not zero");
  r.Seek(4);
  h.seed_base = r.U32();
  r.Bytes(h.bit_offset.data(), 4);
  if (r.U32() != 0) return Bad(kHash, "reserved bytes 12..15 are not zero");
  if (h.function > 3) {
    return Bad(kHash, absl::StrFormat("function %u; known: 0 unknown, 1 crc32, 2 crc32c, 3 crc16",
                                      h.function));
  }
  for (int j = 0; j <= kMaxTiers; ++j) {
    if (h.bit_offset[j] > 31) {
      return Bad(kHash, absl::StrFormat("bit_offset[%d] = %u; at most 31", j, h.bit_offset[j]));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadName(Reader r, ArtifactSpec& spec) {
  if (r.size() < 8) return Bad(kName, "shorter than its 8-byte length fields");
  const uint32_t fl = r.U32(), rl = r.U32();
  if (fl > kMaxName || rl > kMaxName) {
    return Bad(kName,
               absl::StrFormat("fabric/role name lengths %u/%u; at most %u", fl, rl, kMaxName));
  }
  if (r.size() != Pad8(8 + fl + rl)) {
    return Bad(kName, absl::StrFormat("length %u does not match names of %u and %u bytes", r.size(),
                                      fl, rl));
  }
  spec.fabric_name.resize(fl);
  spec.role_name.resize(rl);
  r.Bytes(spec.fabric_name.data(), fl);
  r.Bytes(spec.role_name.data(), rl);
  if (!r.ZeroRange(8 + fl + rl, r.size())) return Bad(kName, "padding is not zero");
  return absl::OkStatus();
}

bool PrefixHasHostBits(const std::array<uint8_t, 16>& p, int len) {
  for (int bit = len; bit < 128; ++bit) {
    if (p[bit / 8] & (0x80 >> (bit % 8))) return true;
  }
  return false;
}

absl::Status ReadClasses(Reader r, ArtifactSpec& spec) {
  const ShapeSpec& s = spec.shape;
  if (r.size() < 8) return Bad(kClasses, "shorter than its 8-byte policy header");
  spec.max_paths = r.U8();
  const uint8_t rail_local = r.U8();
  const uint16_t count = r.U16();
  if (r.U32() != 0) return Bad(kClasses, "reserved bytes 4..7 are not zero");
  if (spec.max_paths > kMaxHostPaths || (spec.role == Role::kHost && spec.max_paths == 0)) {
    return Bad(kClasses,
               absl::StrFormat("max_paths %u; allowed 1..%d", spec.max_paths, kMaxHostPaths));
  }
  if (rail_local > 1) {
    return Bad(kClasses, absl::StrFormat("rail_local = %u; expected 0 or 1", rail_local));
  }
  spec.rail_local = rail_local == 1;
  if (spec.rail_local && s.rails == 0) {
    return Bad(kClasses, "rail_local is set but SHAPE.rails is 0");
  }
  if (count > kMaxClasses) {
    return Bad(kClasses, absl::StrFormat("%u classes; at most %u", count, kMaxClasses));
  }
  const size_t names_at = 8 + kClassEntrySize * count;
  if (r.size() < names_at) {
    return Bad(kClasses, absl::StrFormat("length %u is too short for %u classes", r.size(), count));
  }
  spec.classes.resize(count);
  std::vector<uint32_t> name_lens(count);
  size_t names_end = names_at;
  for (uint16_t i = 0; i < count; ++i) {
    ClassSpec& c = spec.classes[i];
    r.Bytes(c.prefix.data(), 16);
    c.prefix_len = r.U8();
    c.max_paths = r.U8();
    c.planes_mask = r.U8();
    c.restrict_tier = r.U8();
    const uint32_t name_off = r.U32(), name_len = r.U32();
    if (r.U32() != 0) {
      return Bad(kClasses, absl::StrFormat("classes[%u]: reserved bytes are not zero", i));
    }
    c.allowed_up_mask = r.U64();
    // Names follow the entries back to back, in class order.
    if (name_off != names_end || name_len > kMaxName || name_len > r.size() - names_end) {
      return Bad(kClasses, absl::StrFormat("classes[%u]: name at %u, %u bytes; expected at %u, "
                                           "at most %u bytes, inside the section",
                                           i, name_off, name_len, names_end, kMaxName));
    }
    names_end += name_len;
    name_lens[i] = name_len;
    const std::string where = absl::StrFormat("classes[%u]", i);
    if (c.prefix_len > 128) {
      return Bad(kClasses, absl::StrFormat("%s.prefix_len %u > 128", where, c.prefix_len));
    }
    if (PrefixHasHostBits(c.prefix, c.prefix_len)) {
      return Bad(kClasses, absl::StrCat(where, ".prefix has bits set beyond its length"));
    }
    if (c.max_paths > kMaxHostPaths) {
      return Bad(kClasses, absl::StrFormat("%s.max_paths %u; allowed 0..%d", where, c.max_paths,
                                           kMaxHostPaths));
    }
    if ((c.planes_mask >> s.planes) != 0) {
      return Bad(kClasses, absl::StrFormat("%s.planes_mask 0x%x names a plane beyond %u", where,
                                           c.planes_mask, s.planes));
    }
    if (c.restrict_tier != 0) {
      if (c.restrict_tier < 2 || c.restrict_tier > s.tiers) {
        return Bad(kClasses, absl::StrFormat("%s.restrict_tier %u; allowed 0 or 2..%u", where,
                                             c.restrict_tier, s.tiers));
      }
      const uint64_t all = BitsMask(s.w[c.restrict_tier]);
      if ((c.allowed_up_mask & all) == 0 || (c.allowed_up_mask & ~all) != 0) {
        return Bad(kClasses, absl::StrFormat(
                                 "%s.allowed_up_mask 0x%x; must be non-empty within the %u "
                                 "parents at tier %u",
                                 where, c.allowed_up_mask, s.w[c.restrict_tier], c.restrict_tier));
      }
    }
  }
  if (r.size() != Pad8(names_end)) {
    return Bad(kClasses, absl::StrFormat("length %u; the entries and names take %u (padded)",
                                         r.size(), Pad8(names_end)));
  }
  // The names, now that their extents are known to lie inside the section.
  r.Seek(names_at);
  for (uint16_t i = 0; i < count; ++i) {
    spec.classes[i].name.resize(name_lens[i]);
    r.Bytes(spec.classes[i].name.data(), name_lens[i]);
  }
  if (!r.ZeroRange(names_end, r.size())) return Bad(kClasses, "padding is not zero");
  return absl::OkStatus();
}

// Up ports of the role's nodes: a tier-t switch has w_{t+1} (none at the top), a host
// planes * w_1.
uint32_t UpPortCount(const ArtifactSpec& spec) {
  const ShapeSpec& s = spec.shape;
  if (spec.role == Role::kHost) return s.planes * s.w[1];
  return spec.tier < s.tiers ? s.w[spec.tier + 1] : 0;
}

absl::Status ReadNodeMasks(Reader r, ArtifactSpec& spec) {
  if (r.size() < 8) return Bad(kNodeMasks, "shorter than its 8-byte count");
  const uint32_t count = r.U32();
  if (r.U32() != 0) return Bad(kNodeMasks, "reserved bytes 4..7 are not zero");
  if ((r.size() - 8) / kMaskEntrySize != count || (r.size() - 8) % kMaskEntrySize != 0) {
    return Bad(kNodeMasks, absl::StrFormat("length %u does not hold %u entries of %u bytes",
                                           r.size(), count, kMaskEntrySize));
  }
  const ShapeSpec& s = spec.shape;
  const uint8_t tier = spec.role == Role::kHost ? 0 : spec.tier;
  const uint64_t nodes = NodeCount(s, tier);
  const uint32_t planes = spec.role == Role::kHost ? 1 : s.planes;
  const uint64_t up_bits = BitsMask(UpPortCount(spec));
  spec.node_masks.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    NodeMaskSpec& m = spec.node_masks[i];
    m.plane = r.U8();
    if (!r.ZeroRange(r.pos(), r.pos() + 3)) {
      return Bad(kNodeMasks, absl::StrFormat("node_masks[%u]: reserved bytes are not zero", i));
    }
    r.Seek(r.pos() + 3);
    m.index = r.U32();
    for (uint64_t& x : m.up_mask) x = r.U64();
    if (m.plane >= planes) {
      return Bad(kNodeMasks,
                 absl::StrFormat("node_masks[%u].plane %u; the role has %u", i, m.plane, planes));
    }
    if (m.index >= nodes) {
      return Bad(kNodeMasks, absl::StrFormat("node_masks[%u].index %u; the tier has %u nodes", i,
                                             m.index, nodes));
    }
    for (int l = 0; l <= kMaxTiers; ++l) {
      // Masks exist for the LCA tiers above the node: tier+1..tiers (hosts: 1..tiers).
      const bool used = l > tier && l <= s.tiers && up_bits != 0;
      if (!used ? m.up_mask[l] != 0 : (m.up_mask[l] & ~up_bits) != 0) {
        return Bad(kNodeMasks,
                   absl::StrFormat("node_masks[%u].up_mask[%d] = 0x%x; allowed bits 0x%x", i, l,
                                   m.up_mask[l], used ? up_bits : 0));
      }
    }
    if (i > 0) {
      const NodeMaskSpec& p = spec.node_masks[i - 1];
      if (std::tie(p.plane, p.index) >= std::tie(m.plane, m.index)) {
        return Bad(kNodeMasks,
                   absl::StrFormat("node_masks[%u] (plane %u, index %u) is not after the previous "
                                   "entry: keys must be sorted and unique",
                                   i, m.plane, m.index));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ReadOverrides(Reader r, ArtifactSpec& spec) {
  if (r.size() < 8) return Bad(kOverrides, "shorter than its 8-byte count");
  const uint32_t count = r.U32();
  if (r.U32() != 0) return Bad(kOverrides, "reserved bytes 4..7 are not zero");
  if ((r.size() - 8) / kOverrideEntrySize != count || (r.size() - 8) % kOverrideEntrySize != 0) {
    return Bad(kOverrides, absl::StrFormat("length %u does not hold %u entries of %u bytes",
                                           r.size(), count, kOverrideEntrySize));
  }
  const ShapeSpec& s = spec.shape;
  const uint8_t tier = spec.role == Role::kHost ? 0 : spec.tier;
  const uint64_t nodes = NodeCount(s, tier);
  const uint64_t hosts = NodeCount(s, 0);
  const uint64_t groups = hosts / s.m[1];
  const uint32_t planes = spec.role == Role::kHost ? 1 : s.planes;
  const uint64_t up_bits = BitsMask(UpPortCount(spec));
  const uint32_t down_ports = spec.role == Role::kHost ? 0 : s.m[tier];
  spec.overrides.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    OverrideSpec& o = spec.overrides[i];
    o.plane = r.U8();
    o.level = r.U8();
    const uint8_t kind = r.U8();
    const uint8_t reserved = r.U8();
    o.node = r.U32();
    o.dst = r.U32();
    o.hops.down_port = r.U16();
    const uint16_t reserved2 = r.U16();
    o.hops.up_mask = r.U64();
    o.hops.kind = static_cast<HopKind>(kind);
    const std::string where = absl::StrFormat("overrides[%u]", i);
    if (reserved != 0 || reserved2 != 0) {
      return Bad(kOverrides, absl::StrCat(where, ": reserved bytes are not zero"));
    }
    if (o.plane >= planes) {
      return Bad(kOverrides,
                 absl::StrFormat("%s.plane %u; the role has %u", where, o.plane, planes));
    }
    if (o.node == kAllNodes) {
      if (spec.role == Role::kHost || o.hops.kind != HopKind::kUnreachable) {
        return Bad(
            kOverrides,
            absl::StrFormat("%s.node 0x%x (every node) with kind %u in a %s artifact; only "
                            "switch artifacts have these, and only with kind 2 unreachable",
                            where, o.node, kind, spec.role == Role::kHost ? "host" : "switch"));
      }
    } else if (o.node >= nodes) {
      return Bad(kOverrides,
                 absl::StrFormat("%s.node %u; the tier has %u nodes", where, o.node, nodes));
    }
    if (o.level > 1) {
      return Bad(kOverrides,
                 absl::StrFormat("%s.level %u; 0 (host) or 1 (tier-1 group)", where, o.level));
    }
    const uint64_t dst_limit = o.level == 0 ? hosts : groups;
    if (o.dst >= dst_limit) {
      return Bad(kOverrides, absl::StrFormat("%s.dst %u; level %u has %u destinations", where,
                                             o.dst, o.level, dst_limit));
    }
    switch (o.hops.kind) {
      case HopKind::kDown:
        if (o.hops.down_port >= down_ports || o.hops.up_mask != 0) {
          return Bad(kOverrides,
                     absl::StrFormat("%s: down port %u (of %u) with up_mask 0x%x", where,
                                     o.hops.down_port, down_ports, o.hops.up_mask));
        }
        break;
      case HopKind::kUp:
        if (o.hops.up_mask == 0 || (o.hops.up_mask & ~up_bits) != 0 || o.hops.down_port != 0) {
          return Bad(kOverrides,
                     absl::StrFormat("%s: up_mask 0x%x; must be non-empty within 0x%x (down_port "
                                     "%u must be 0)",
                                     where, o.hops.up_mask, up_bits, o.hops.down_port));
        }
        break;
      case HopKind::kUnreachable:
        if (o.hops.up_mask != 0 || o.hops.down_port != 0) {
          return Bad(kOverrides, absl::StrCat(where, ": unreachable with a port or up_mask set"));
        }
        break;
      default:
        return Bad(kOverrides,
                   absl::StrFormat("%s.kind %u; allowed 0 down, 1 up, 2 unreachable", where, kind));
    }
    if (i > 0) {
      const OverrideSpec& p = spec.overrides[i - 1];
      if (std::tie(p.plane, p.node, p.level, p.dst) >= std::tie(o.plane, o.node, o.level, o.dst)) {
        return Bad(kOverrides, absl::StrFormat("%s (plane %u, node %u, level %u, dst %u) is not "
                                               "after the previous entry: keys must be sorted "
                                               "and unique",
                                               where, o.plane, o.node, o.level, o.dst));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ReadDstExceptions(Reader r, ArtifactSpec& spec) {
  if (r.size() < 8) return Bad(kDstExceptions, "shorter than its 8-byte count");
  const uint32_t count = r.U32();
  if (r.U32() != 0) return Bad(kDstExceptions, "reserved bytes 4..7 are not zero");
  if ((r.size() - 8) / kDstExceptionEntrySize != count ||
      (r.size() - 8) % kDstExceptionEntrySize != 0) {
    return Bad(kDstExceptions, absl::StrFormat("length %u does not hold %u entries of %u bytes",
                                               r.size(), count, kDstExceptionEntrySize));
  }
  if (spec.role != Role::kHost && count != 0) {
    return Bad(kDstExceptions,
               absl::StrFormat("%u entries in a switch artifact; only host artifacts have them "
                               "(switches carry overrides)",
                               count));
  }
  const ShapeSpec& s = spec.shape;
  const uint64_t hosts = NodeCount(s, 0);
  const uint64_t groups = hosts / s.m[1];
  const uint64_t port_bits = BitsMask(s.planes * s.w[1]);
  spec.dst_exceptions.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    DstExceptionSpec& e = spec.dst_exceptions[i];
    e.level = r.U8();
    for (int l = 1; l <= kMaxTiers; ++l) e.paths[l] = r.U8();
    e.dst = r.U32();
    for (int l = 1; l <= kMaxTiers; ++l) e.ports[l] = r.U64();
    const std::string where = absl::StrFormat("dst_exceptions[%u]", i);
    if (e.level > 1) {
      return Bad(kDstExceptions,
                 absl::StrFormat("%s.level %u; 0 (host) or 1 (tier-1 group)", where, e.level));
    }
    const uint64_t dst_limit = e.level == 0 ? hosts : groups;
    if (e.dst >= dst_limit) {
      return Bad(kDstExceptions, absl::StrFormat("%s.dst %u; level %u has %u destinations", where,
                                                 e.dst, e.level, dst_limit));
    }
    for (int l = 1; l <= kMaxTiers; ++l) {
      const bool used = l <= s.tiers;
      if (!used ? e.ports[l] != 0 : (e.ports[l] & ~port_bits) != 0) {
        return Bad(kDstExceptions,
                   absl::StrFormat("%s.ports[%d] = 0x%x; allowed bits 0x%x (the host ports)", where,
                                   l, e.ports[l], used ? port_bits : 0));
      }
      if (e.paths[l] > kMaxHostPaths || (e.paths[l] == 0) != (e.ports[l] == 0)) {
        return Bad(kDstExceptions,
                   absl::StrFormat("%s.paths[%d] = %u with ports[%d] = 0x%x; paths is 1..%d when "
                                   "some port is left, else 0",
                                   where, l, e.paths[l], l, e.ports[l], kMaxHostPaths));
      }
    }
    if (i > 0) {
      const DstExceptionSpec& p = spec.dst_exceptions[i - 1];
      if (std::tie(p.level, p.dst) >= std::tie(e.level, e.dst)) {
        return Bad(kDstExceptions, absl::StrFormat("%s (level %u, dst %u) is not after the "
                                                   "previous entry: keys must be sorted and unique",
                                                   where, e.level, e.dst));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ReadEntropy(Reader r, ArtifactSpec& spec) {
  if (r.size() < 16) return Bad(kEntropy, "shorter than its four 4-byte counts");
  std::array<uint32_t, kMaxTiers + 1> counts;
  size_t total = 0;
  for (int l = 0; l <= kMaxTiers; ++l) {
    counts[l] = r.U32();
    const bool allowed = spec.role == Role::kHost && l >= 1 && l <= spec.shape.tiers;
    if (counts[l] > (allowed ? static_cast<uint32_t>(kMaxHostPaths) : 0u)) {
      return Bad(kEntropy, absl::StrFormat("by_lca[%d] has %u values; allowed %d%s", l, counts[l],
                                           allowed ? kMaxHostPaths : 0,
                                           spec.role == Role::kHost ? "" : " (switch artifact)"));
    }
    total += counts[l];
  }
  if (r.size() != Pad8(16 + 4 * total)) {
    return Bad(kEntropy, absl::StrFormat("length %u does not hold %u values", r.size(), total));
  }
  for (int l = 0; l <= kMaxTiers; ++l) {
    auto& list = spec.entropy.by_lca[l];
    list.resize(counts[l]);
    for (uint32_t i = 0; i < counts[l]; ++i) {
      list[i] = r.U32();
      if (list[i] > kMaxEntropy) {
        return Bad(kEntropy, absl::StrFormat("by_lca[%d][%u] = %u; at most 0x%x (20 bits)", l, i,
                                             list[i], kMaxEntropy));
      }
      for (uint32_t k = 0; k < i; ++k) {
        if (list[k] == list[i]) {
          return Bad(kEntropy, absl::StrFormat("by_lca[%d][%u] = %u repeats by_lca[%d][%u]", l, i,
                                               list[i], l, k));
        }
      }
    }
  }
  if (!r.ZeroRange(16 + 4 * total, r.size())) return Bad(kEntropy, "padding is not zero");
  return absl::OkStatus();
}

}  // namespace

std::vector<uint8_t> Serialize(const ArtifactSpec& spec) {
  Writer w;
  w.Zeros(kHeaderSize);
  constexpr uint32_t kCount = kSectionTypes - 1;
  w.Zeros(kDirEntrySize * kCount);
  std::array<std::pair<uint32_t, uint32_t>, kSectionTypes> extent{};
  for (uint32_t type = 1; type < kSectionTypes; ++type) {
    w.Align8();
    const size_t start = w.size();
    switch (type) {
      case kShape:
        WriteShape(w, spec.shape);
        break;
      case kAddr:
        WriteAddr(w, spec.addresses);
        break;
      case kHash:
        WriteHash(w, spec.hash);
        break;
      case kClasses:
        WriteClasses(w, spec);
        break;
      case kNodeMasks:
        WriteNodeMasks(w, spec.node_masks);
        break;
      case kOverrides:
        WriteOverrides(w, spec.overrides);
        break;
      case kEntropy:
        WriteEntropy(w, spec.entropy);
        break;
      case kName:
        WriteName(w, spec);
        break;
      case kDstExceptions:
        WriteDstExceptions(w, spec.dst_exceptions);
        break;
    }
    extent[type] = {static_cast<uint32_t>(start), static_cast<uint32_t>(w.size() - start)};
  }
  std::vector<uint8_t>& b = w.buf();
  for (uint32_t type = 1; type < kSectionTypes; ++type) {
    const size_t at = kHeaderSize + kDirEntrySize * (type - 1);
    PutLe(b, at, type, 4);
    PutLe(b, at + 8, extent[type].first, 4);
    PutLe(b, at + 12, extent[type].second, 4);
  }
  std::memcpy(b.data(), kMagic, 8);
  PutLe(b, 8, spec.version, 2);
  b[10] = static_cast<uint8_t>(spec.role);
  b[11] = spec.tier;
  PutLe(b, 12, kCount, 4);
  PutLe(b, 16, b.size(), 8);
  PutLe(b, 24, Crc32c(std::span<const uint8_t>(b).subspan(kHeaderSize)), 4);
  PutLe(b, 32, spec.fabric_digest, 8);
  PutLe(b, 28, Crc32c(std::span<const uint8_t>(b.data(), kHeaderSize)), 4);
  return std::move(b);
}

uint32_t ArtifactChecksum(std::span<const uint8_t> bytes) {
  if (bytes.size() < kHeaderSize) return 0;
  return static_cast<uint32_t>(LeAt(bytes, 24, 4));
}

absl::StatusOr<ArtifactSpec> Decode(std::span<const uint8_t> bytes) {
  if (bytes.size() < kHeaderSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "artifact: %u bytes; a Nüwa artifact starts with a %u-byte header (truncated file?)",
        bytes.size(), kHeaderSize));
  }
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) {
    return absl::InvalidArgumentError(
        "artifact header: bad magic (expected \"HDLNUWA1\"); not a Nüwa artifact");
  }
  {
    std::array<uint8_t, kHeaderSize> header;
    std::memcpy(header.data(), bytes.data(), kHeaderSize);
    std::memset(header.data() + 28, 0, 4);
    const uint32_t want = Crc32c(header);
    const uint32_t got = static_cast<uint32_t>(LeAt(bytes, 28, 4));
    if (want != got) {
      return absl::DataLossError(absl::StrFormat(
          "artifact header: checksum 0x%08x, computed 0x%08x; the header is corrupt", got, want));
    }
  }
  ArtifactSpec spec;
  spec.version = static_cast<uint16_t>(LeAt(bytes, 8, 2));
  if (spec.version != kArtifactVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("artifact header: format version %u; this build reads version %u "
                        "(recompile the fabric with a matching heddle-nuwa)",
                        spec.version, kArtifactVersion));
  }
  const uint64_t total = LeAt(bytes, 16, 8);
  if (total != bytes.size()) {
    return absl::DataLossError(absl::StrFormat(
        "artifact header: total length %u but %u bytes given (truncated or padded file)", total,
        bytes.size()));
  }
  {
    const uint32_t want = Crc32c(bytes.subspan(kHeaderSize));
    const uint32_t got = static_cast<uint32_t>(LeAt(bytes, 24, 4));
    if (want != got) {
      return absl::DataLossError(absl::StrFormat(
          "artifact: checksum 0x%08x, computed 0x%08x over bytes 64..%u; the file is corrupt", got,
          want, bytes.size()));
    }
  }
  const uint8_t role = bytes[10];
  if (role > 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("artifact header: role %u; expected 0 (host) or 1 (switch)", role));
  }
  spec.role = static_cast<Role>(role);
  spec.tier = bytes[11];
  spec.fabric_digest = LeAt(bytes, 32, 8);
  for (size_t i = 40; i < kHeaderSize; ++i) {
    if (bytes[i] != 0) {
      return absl::InvalidArgumentError("artifact header: reserved bytes 40..63 are not zero");
    }
  }
  const uint64_t count = LeAt(bytes, 12, 4);
  if (count > kMaxSections || kHeaderSize + kDirEntrySize * count > bytes.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "artifact header: %u sections; at most %u, with the directory inside the file", count,
        kMaxSections));
  }
  const size_t dir_end = kHeaderSize + kDirEntrySize * count;
  std::array<std::span<const uint8_t>, kSectionTypes> sections{};
  std::array<bool, kSectionTypes> seen{};
  std::vector<std::pair<size_t, size_t>> extents;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = kHeaderSize + kDirEntrySize * i;
    const uint32_t type = static_cast<uint32_t>(LeAt(bytes, at, 4));
    const uint32_t zero = static_cast<uint32_t>(LeAt(bytes, at + 4, 4));
    const uint64_t off = LeAt(bytes, at + 8, 4);
    const uint64_t len = LeAt(bytes, at + 12, 4);
    if (type == 0 || type >= kSectionTypes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "artifact directory[%u]: unknown section type %u (written by a newer heddle-nuwa?)", i,
          type));
    }
    const Section s = static_cast<Section>(type);
    if (zero != 0) return Bad(s, "directory entry: reserved bytes are not zero");
    if (seen[type]) return Bad(s, "listed twice in the directory");
    seen[type] = true;
    if (off % 8 != 0 || off < dir_end || off + len > bytes.size()) {
      return Bad(s, absl::StrFormat("offset %u, length %u: must be 8-byte aligned, after the "
                                    "directory (%u) and inside the %u-byte file",
                                    off, len, dir_end, bytes.size()));
    }
    sections[type] = bytes.subspan(off, len);
    extents.emplace_back(off, off + len);
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].first < extents[i - 1].second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "artifact directory: sections at %u..%u and %u..%u overlap", extents[i - 1].first,
          extents[i - 1].second, extents[i].first, extents[i].second));
    }
  }
  for (Section s : {kShape, kAddr, kHash, kClasses, kName}) {
    if (!seen[s]) return Bad(s, "missing (required in every artifact)");
  }
  absl::Status st = ReadShape(Reader(sections[kShape]), spec.shape);
  if (!st.ok()) return st;
  if (spec.role == Role::kSwitch ? spec.tier < 1 || spec.tier > spec.shape.tiers : spec.tier != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("artifact header: tier %u for a %s artifact; expected %s", spec.tier,
                        spec.role == Role::kSwitch ? "switch" : "host",
                        spec.role == Role::kSwitch ? absl::StrCat("1..", spec.shape.tiers) : "0"));
  }
  if (!(st = ReadAddr(Reader(sections[kAddr]), spec.shape, spec.addresses)).ok()) return st;
  if (!(st = ReadHash(Reader(sections[kHash]), spec.shape, spec.hash)).ok()) return st;
  if (!(st = ReadName(Reader(sections[kName]), spec)).ok()) return st;
  if (!(st = ReadClasses(Reader(sections[kClasses]), spec)).ok()) return st;
  if (seen[kNodeMasks] && !(st = ReadNodeMasks(Reader(sections[kNodeMasks]), spec)).ok()) {
    return st;
  }
  if (seen[kOverrides] && !(st = ReadOverrides(Reader(sections[kOverrides]), spec)).ok()) {
    return st;
  }
  if (seen[kEntropy] && !(st = ReadEntropy(Reader(sections[kEntropy]), spec)).ok()) return st;
  if (seen[kDstExceptions] &&
      !(st = ReadDstExceptions(Reader(sections[kDstExceptions]), spec)).ok()) {
    return st;
  }
  return spec;
}

absl::StatusOr<std::vector<uint8_t>> ReadArtifactBytes(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::vector<uint8_t> out;
  uint8_t buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(err)));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
    if (out.size() > kMaxArtifactBytes) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, ": larger than ", kMaxArtifactBytes,
                                                     " bytes; is this a heddle-nuwa artifact?"));
    }
  }
  close(fd);
  return out;
}

absl::StatusOr<ArtifactSpec> ReadArtifactFile(const std::string& path) {
  HEDDLE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadArtifactBytes(path));
  absl::StatusOr<ArtifactSpec> spec = Decode(bytes);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace heddle::fwd
