// File: common/crc32c.h
//
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF):
// the checksum Nüwa artifacts (dataplane/fwd/artifact.h) and GeoMesh relay frames
// (dataplane/relay/codec/frame.h) carry. Abseil 20220623 has no absl/crc, and zlib's crc32() is
// the IEEE polynomial. Where the build targets SSE4.2 (x86-64 builds here use -msse4.2) the
// CRC32 instruction does eight bytes a step; elsewhere a slicing-by-8 table does. Both give the
// same value (Crc32cPortable() is the table form, kept callable so tests can compare the two).
//
//   uint32_t c = heddle::Crc32c(bytes);                   // whole buffer
//   uint32_t c2 = heddle::Crc32c(more, Crc32c(first));    // incremental: continue from a value
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace heddle {
namespace crc32c_internal {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
  return t;
}

inline constexpr Tables kTables = MakeTables();

}  // namespace crc32c_internal

// The table form. Crc32cPortable("123456789") == 0xE3069283 (the standard check value).
inline uint32_t Crc32cPortable(std::span<const uint8_t> bytes, uint32_t previous = 0) {
  const auto& t = crc32c_internal::kTables;
  uint32_t c = ~previous;
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8) {
    const uint32_t lo =
        c ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return ~c;
}

// One step of the CRC-32C register over a value's bytes in little-endian order, with no initial
// value or final XOR: the SSE4.2 `crc32` instruction's operation, for hashing words (QP keys,
// flow tags). Crc32cStep*Portable() are the same bitwise and constexpr, for builds without SSE4.2
// and for tests. ~Crc32cStepU64(~0u, w) == Crc32c(the 8 bytes of w).
constexpr uint32_t Crc32cStepU8Portable(uint32_t crc, uint8_t v) {
  crc ^= v;
  for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  return crc;
}
constexpr uint32_t Crc32cStepU32Portable(uint32_t crc, uint32_t v) {
  for (int k = 0; k < 4; ++k) crc = Crc32cStepU8Portable(crc, static_cast<uint8_t>(v >> (8 * k)));
  return crc;
}
constexpr uint32_t Crc32cStepU64Portable(uint32_t crc, uint64_t v) {
  return Crc32cStepU32Portable(Crc32cStepU32Portable(crc, static_cast<uint32_t>(v)),
                               static_cast<uint32_t>(v >> 32));
}
inline uint32_t Crc32cStepU32(uint32_t crc, uint32_t v) {
#if defined(__SSE4_2__)
  return _mm_crc32_u32(crc, v);
#else
  return Crc32cStepU32Portable(crc, v);
#endif
}
inline uint32_t Crc32cStepU64(uint32_t crc, uint64_t v) {
#if defined(__SSE4_2__) && defined(__x86_64__)
  return static_cast<uint32_t>(_mm_crc32_u64(crc, v));
#else
  return Crc32cStepU64Portable(crc, v);
#endif
}

// Crc32c("123456789") == 0xE3069283.
inline uint32_t Crc32c(std::span<const uint8_t> bytes, uint32_t previous = 0) {
#if defined(__SSE4_2__)
  uint64_t c = ~previous;
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
#else
  return Crc32cPortable(bytes, previous);
#endif
}

}  // namespace heddle
