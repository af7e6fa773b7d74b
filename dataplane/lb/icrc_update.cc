// File: dataplane/lb/icrc_update.cc
#include "dataplane/lb/icrc_update.h"

#include <array>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HEDDLE_LB_X86 1
#endif

namespace heddle::lb {
namespace icrc_internal {
namespace {

// IEEE 802.3 CRC-32, reflected (zlib's crc32()).
constexpr uint32_t kPoly = 0xedb88320u;
constexpr uint32_t kOne = 1u << 31;  // x^0

constexpr std::array<uint32_t, 256> MakeByteTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kByteTable = MakeByteTable();

// s(x) · x^8 mod P: one step of the register over a zero byte.
constexpr uint32_t TimesX8(uint32_t s) { return (s >> 8) ^ kByteTable[s & 0xff]; }

constexpr uint32_t MulModLoop(uint32_t a, uint32_t b) {
  // Branch-free: for each coefficient of a (x^0 first), add b when it is set, then b *= x.
  uint32_t p = 0;
  for (int i = 0; i < 32; ++i) {
    p ^= b & (0u - ((a >> (31 - i)) & 1));
    b = (b >> 1) ^ (kPoly & (0u - (b & 1)));
  }
  return p;
}

// kPowLo[i] = x^(8·i), kPowHi[i] = x^(8·256·i), so x^(8·n) = kPowHi[n >> 8] · kPowLo[n & 255].
constexpr std::array<uint32_t, 256> MakePowLo() {
  std::array<uint32_t, 256> t{};
  t[0] = kOne;
  for (int i = 1; i < 256; ++i) t[i] = TimesX8(t[i - 1]);
  return t;
}
constexpr std::array<uint32_t, 256> kPowLo = MakePowLo();
constexpr std::array<uint32_t, 256> MakePowHi() {
  std::array<uint32_t, 256> t{};
  const uint32_t step = TimesX8(kPowLo[255]);  // x^(8·256)
  t[0] = kOne;
  for (int i = 1; i < 256; ++i) t[i] = MulModLoop(t[i - 1], step);
  return t;
}
constexpr std::array<uint32_t, 256> kPowHi = MakePowHi();

static_assert(MulModLoop(kOne, 0x12345678u) == 0x12345678u, "x^0 is the identity");
static_assert(MulModLoop(kPowLo[3], kPowLo[5]) == kPowLo[8], "x^24 · x^40 == x^64");

}  // namespace

uint32_t MulModPortable(uint32_t a, uint32_t b) noexcept { return MulModLoop(a, b); }

#if defined(HEDDLE_LB_X86)
// Reflected operands: the carry-less product of rev(A) and rev(B) is rev63(A·B), so shifted left
// by one it is the 64-bit reflected product: its high half is the x^0..x^31 part H, its low half
// the x^32..x^63 part L (as a reflected value times x^32). A·B mod P = H + L·x^32 mod P, and
// L·x^32 is four steps of the byte table.
__attribute__((target("pclmul,sse2"))) uint32_t MulModClmul(uint32_t a, uint32_t b) noexcept {
  const __m128i p = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(a)),
                                         _mm_cvtsi32_si128(static_cast<int>(b)), 0x00);
  const uint64_t r = static_cast<uint64_t>(_mm_cvtsi128_si64(p)) << 1;
  uint32_t lo = static_cast<uint32_t>(r);
  lo = TimesX8(TimesX8(TimesX8(TimesX8(lo))));
  return static_cast<uint32_t>(r >> 32) ^ lo;
}
bool HaveClmul() noexcept {
  static const bool have = __builtin_cpu_supports("pclmul");
  return have;
}
#else
uint32_t MulModClmul(uint32_t a, uint32_t b) noexcept { return MulModLoop(a, b); }
bool HaveClmul() noexcept { return false; }
#endif

uint32_t MulMod(uint32_t a, uint32_t b) noexcept {
  return HaveClmul() ? MulModClmul(a, b) : MulModLoop(a, b);
}

uint32_t XPow8n(uint32_t n) noexcept {
  n &= 0xffff;
  const uint32_t lo = kPowLo[n & 0xff];
  return (n >> 8) == 0 ? lo : MulMod(kPowHi[n >> 8], lo);
}

}  // namespace icrc_internal

uint32_t IcrcDelta16(uint16_t old_value, uint16_t new_value, uint32_t tail_len) noexcept {
  using icrc_internal::kByteTable;
  const uint32_t d = static_cast<uint32_t>(old_value ^ new_value);
  if (d == 0) return 0;
  // raw(δ): the register from zero over the two bytes, high byte first (wire order).
  uint32_t s = kByteTable[d >> 8];
  s = (s >> 8) ^ kByteTable[(s ^ d) & 0xff];
  return icrc_internal::MulMod(s, icrc_internal::XPow8n(tail_len));
}

}  // namespace heddle::lb
