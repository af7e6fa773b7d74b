// File: dataplane/fwd/internal/fields.h
//
// The address plan and destination classes in the form the lookups evaluate them: a destination
// is in the fabric when its bits outside the digit fields equal the prefix (one masked compare),
// and its digits a_1..a_h are shifts and masks of the rest. Slots for tiers the fabric does not
// have extract 0 and allow only 0, so the lookups run the same straight-line code for 2 and 3
// tiers. Built by artifact code only (lookup.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace heddle::fwd::internal {

inline uint64_t LoadBe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

struct Fields {
  uint8_t tiers = 0;
  // IPv4: (addr & ~v4_field_bits) == v4_base  <=>  inside the prefix with the bits between the
  // prefix and the fields zero; the fields are addr & v4_field_bits.
  uint32_t v4_field_bits = 0;
  uint32_t v4_base = 0;
  // IPv6 (prefix <= /64): the high 64 bits equal v6_hi exactly, the low 64 bits above the fields
  // are zero.
  bool has_v6 = false;
  uint64_t v6_hi = 0;
  uint64_t v6_field_bits = 0;
  std::array<uint8_t, 4> shift{};
  std::array<uint32_t, 4> digit_mask{};
  std::array<uint32_t, 4> m{1, 1, 1, 1};
  // bit_tier[b]: the tier whose field holds bit b of the packed fields (0 above them).
  std::array<uint8_t, 64> bit_tier{};

  bool Fields4(uint32_t addr, uint64_t* v) const {
    *v = addr & v4_field_bits;
    return (addr & ~v4_field_bits) == v4_base;
  }
  bool Fields6(const uint8_t* addr, uint64_t* v) const {
    *v = LoadBe64(addr + 8);
    return static_cast<int>(has_v6) & static_cast<int>(LoadBe64(addr) == v6_hi) &
           static_cast<int>((*v & ~v6_field_bits) == 0);
  }
  // The digits a_1..a_3 (0 beyond the fabric's tiers); false when one is >= m_j.
  bool Digits(uint64_t v, std::array<uint32_t, 4>& d) const {
    d[1] = static_cast<uint32_t>(v >> shift[1]) & digit_mask[1];
    d[2] = static_cast<uint32_t>(v >> shift[2]) & digit_mask[2];
    d[3] = static_cast<uint32_t>(v >> shift[3]) & digit_mask[3];
    // d < m (both below 2^31) exactly when d - m wraps, setting the top bit: one AND, no branch.
    return ((d[1] - m[1]) & (d[2] - m[2]) & (d[3] - m[3])) >> 31;
  }
  // Host index (a_h most significant) and tier-1 group (host / m_1).
  uint32_t Group(const std::array<uint32_t, 4>& d) const { return d[3] * m[2] + d[2]; }
  uint32_t Host(const std::array<uint32_t, 4>& d) const { return Group(d) * m[1] + d[1]; }
  // The highest tier whose digit differs between two packed field values (0: equal).
  int HighestDiff(uint64_t x) const { return x == 0 ? 0 : bit_tier[63 - __builtin_clzll(x)]; }
};

// A destination class's prefix as masked compares: IPv4 destinations (as ::ffff:a.b.c.d) and
// IPv6 ones. v4_any: the class can match IPv4 destinations at all.
struct ClassMatch {
  bool v4_any = false;
  uint32_t v4_mask = 0;
  uint32_t v4_value = 0;
  std::array<uint64_t, 2> v6_mask{};
  std::array<uint64_t, 2> v6_value{};

  bool Match4(uint32_t addr) const {
    return static_cast<int>(v4_any) & static_cast<int>((addr & v4_mask) == v4_value);
  }
  bool Match6(const uint8_t* addr) const {
    return static_cast<int>((LoadBe64(addr) & v6_mask[0]) == v6_value[0]) &
           static_cast<int>((LoadBe64(addr + 8) & v6_mask[1]) == v6_value[1]);
  }
};

// A switch's IPv4 lookup when one answer covers every destination reached upwards (no failures
// near the node, no class restricting its tier, no overrides): the straight-line form that
// SwitchTable::LookupBulk4 runs, scalar or with AVX2 or AVX-512 (chosen once, when the table is
// built).
// Answers are written as NextHops: the 64-bit words {kind | down_port << 16} and up_mask.
struct FastSwitch4 {
  uint32_t field_bits = 0;
  uint32_t base = 0;
  uint32_t own = 0;    // the node's a-digits above its tier, packed
  uint32_t above = 0;  // their field bits
  uint32_t down_shift = 0;
  uint32_t down_mask = 0;
  bool pow2 = true;  // every digit field holds exactly m_j values: no digit range check
  std::array<uint32_t, 4> shift{};
  std::array<uint32_t, 4> digit_mask{};
  std::array<uint32_t, 4> m{};
  uint64_t up_word = 0;  // the first word of the upward answer (its kind)
  uint64_t up_mask = 0;
};
// One answer, as the two words of a NextHops.
template <bool kPow2>
inline void FastSwitch4Words(const FastSwitch4& f, uint32_t a, uint64_t words[2]) {
  const uint32_t v = a & f.field_bits;
  uint32_t in = (a & ~f.field_bits) == f.base;
  if constexpr (!kPow2) {
    // d < m exactly when d - m wraps (both below 2^31).
    in &= (((v >> f.shift[1] & f.digit_mask[1]) - f.m[1]) &
           ((v >> f.shift[2] & f.digit_mask[2]) - f.m[2]) &
           ((v >> f.shift[3] & f.digit_mask[3]) - f.m[3])) >>
          31;
  }
  const bool up = ((v ^ f.own) & f.above) != 0;
  const uint64_t down_word = uint64_t{(v >> f.down_shift) & f.down_mask} << 16;
  words[0] = !in ? uint64_t{3} /* kNotInFabric */ : up ? f.up_word : down_word;
  words[1] = in && up ? f.up_mask : 0;
}
using FastSwitch4Fn = void (*)(const FastSwitch4& f, const uint32_t* dst, void* out, size_t n);
void FastSwitch4Scalar(const FastSwitch4& f, const uint32_t* dst, void* out, size_t n);
// The vector forms, or nullptr where the CPU lacks the instructions (tests compare each with the
// scalar form).
FastSwitch4Fn FastSwitch4Avx2();
FastSwitch4Fn FastSwitch4Avx512();
// AVX-512 (F, VL, BW) when the CPU has it, else AVX2, else the scalar form.
FastSwitch4Fn PickFastSwitch4();

}  // namespace heddle::fwd::internal
