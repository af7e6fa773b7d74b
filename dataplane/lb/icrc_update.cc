// File: dataplane/lb/icrc_update.cc
#include "dataplane/lb/icrc_update.h"

#include <array>
#include <bit>

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

// x^(8·n) for every n < kDirectPows (32 KiB): the tails of frames up to an MTU of 8 KiB take one
// load instead of a load, a multiply and its reduction.
constexpr uint32_t kDirectPows = 8192;
constexpr std::array<uint32_t, kDirectPows> MakePowDirect() {
  std::array<uint32_t, kDirectPows> t{};
  t[0] = kOne;
  for (uint32_t i = 1; i < kDirectPows; ++i) t[i] = TimesX8(t[i - 1]);
  return t;
}
constexpr std::array<uint32_t, kDirectPows> kPowDirect = MakePowDirect();

static_assert(MulModLoop(kOne, 0x12345678u) == 0x12345678u, "x^0 is the identity");
static_assert(MulModLoop(kPowLo[3], kPowLo[5]) == kPowLo[8], "x^24 · x^40 == x^64");

}  // namespace

uint32_t MulModPortable(uint32_t a, uint32_t b) noexcept { return MulModLoop(a, b); }

#if defined(HEDDLE_LB_X86)
// Reflected operands: the carry-less product of rev(A) and rev(B) is rev63(A·B), so shifted left
// by one it is the 64-bit reflected product R: its high half is the x^0..x^31 part H, its low half
// the x^32..x^63 part L (as a reflected value times x^32). A·B mod P = H + L·x^32 mod P. L·x^32 mod
// P is a bit-reflected Barrett reduction (as in Intel's "Fast CRC Computation Using PCLMULQDQ"
// and Linux's crc32-pclmul): T1 = L·µ, T2 = low32(T1)·P', and (R ^ T2) >> 32 is the result, with
// µ = x^64 / P and P' = P as 33-bit reflected constants. Two more multiplies instead of four
// dependent table loads.
__attribute__((target("pclmul,sse2"))) uint32_t MulModClmul(uint32_t a, uint32_t b) noexcept {
  constexpr int64_t kMu = 0x1F7011641;      // x^64 div P, reflected
  constexpr int64_t kPoly33 = 0x1DB710641;  // P, reflected, with its x^32 term
  const __m128i p = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(a)),
                                         _mm_cvtsi32_si128(static_cast<int>(b)), 0x00);
  const uint64_t r = static_cast<uint64_t>(_mm_cvtsi128_si64(p)) << 1;
  const __m128i t1 = _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<int64_t>(r & 0xffffffffu)),
                                          _mm_cvtsi64_si128(kMu), 0x00);
  const uint64_t t1_lo = static_cast<uint64_t>(_mm_cvtsi128_si64(t1)) & 0xffffffffu;
  const __m128i t2 = _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<int64_t>(t1_lo)),
                                          _mm_cvtsi64_si128(kPoly33), 0x00);
  return static_cast<uint32_t>((r ^ static_cast<uint64_t>(_mm_cvtsi128_si64(t2))) >> 32);
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
  if (n < kDirectPows) return kPowDirect[n];
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

uint32_t IcrcDeltaCache::Cold(uint32_t d, uint32_t tail_len) noexcept {
  if (tail_len > 0xffff) return IcrcDelta16(0, static_cast<uint16_t>(d), tail_len);
  // Boyer-Moore majority vote over the window's cold tails; at the end of the window its winner
  // replaces the hot tail if it came a quarter more often (votes_ counts it at most).
  if (tail_len == candidate_) {
    ++votes_;
  } else if (votes_ == 0) {
    candidate_ = tail_len;
    votes_ = 1;
  } else {
    --votes_;
  }
  if (++cold_calls_ == kWindow) {
    const bool adopt = votes_ > hot_hits_ + hot_hits_ / 4;
    const uint32_t winner = candidate_;
    hot_hits_ = 0;
    candidate_ = kNoTail;
    votes_ = 0;
    cold_calls_ = 0;
    if (adopt) {
      Adopt(winner);
      if (winner == tail_len) return hot_lo_[d & 0xff] ^ hot_hi_[d >> 8];
    }
  }
  if (d == 0) return 0;
  const uint32_t key = d | tail_len << 16;  // never 0: d != 0
  Way* w = sets_[(key * 0x9E3779B1u) >> (32 - kBits)].way;
  if (w[0].key == key) return w[0].delta;
  if (w[1].key == key) return w[1].delta;
  // Miss: the older way makes room (a few keys that share a set, e.g. a few QPs' source ports
  // against the path entropies, all stay).
  w[1] = w[0];
  w[0] = Way{key, IcrcDelta16(0, static_cast<uint16_t>(d), tail_len)};
  return w[0].delta;
}

void IcrcDeltaCache::Adopt(uint32_t tail_len) noexcept {
  // Linear in d: each table entry is the XOR of the deltas of its set bits.
  uint32_t basis[16];
  for (int k = 0; k < 16; ++k) basis[k] = IcrcDelta16(0, static_cast<uint16_t>(1u << k), tail_len);
  hot_lo_[0] = hot_hi_[0] = 0;
  for (uint32_t b = 1; b < 256; ++b) {
    const int low = std::countr_zero(b);
    hot_lo_[b] = hot_lo_[b & (b - 1)] ^ basis[low];
    hot_hi_[b] = hot_hi_[b & (b - 1)] ^ basis[8 + low];
  }
  hot_tail_ = tail_len;
  hot_span_ = uint64_t{tail_len} + 2;
}

}  // namespace heddle::lb
