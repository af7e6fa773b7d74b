// The vector forms of the fast IPv4 switch lookup (internal/fast_switch4.cc: AVX2, AVX-512)
// against the scalar form, on random parameters (power-of-two fanouts or not, digits that fit or
// overflow their fields) and random addresses, for every burst length up to 70, so every tail
// length of both vector widths is covered. A form the CPU lacks is reported as skipped.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "dataplane/fwd/internal/fields.h"

namespace heddle::fwd::internal {
namespace {

FastSwitch4 RandomParams(std::mt19937& rng) {
  FastSwitch4 f;
  // Three digit fields above a 16-bit prefix: widths 1..5 bits, packed from bit 0 up.
  uint32_t at = 0;
  for (int j = 1; j <= 3; ++j) {
    const uint32_t width = 1 + rng() % 5;
    f.shift[j] = at;
    f.digit_mask[j] = (1u << width) - 1;
    f.pow2 = rng() % 2 == 0 && f.pow2;
    f.m[j] = f.pow2 ? 1u << width : 1 + rng() % (1u << width);
    at += width;
  }
  f.field_bits = (1u << at) - 1;
  f.base = (10u << 24) & ~f.field_bits;
  const int tier = 1 + static_cast<int>(rng() % 3);
  f.above = 0;
  for (int j = tier + 1; j <= 3; ++j) f.above |= f.digit_mask[j] << f.shift[j];
  f.own = rng() & f.above;
  f.down_shift = f.shift[tier];
  f.down_mask = f.digit_mask[tier];
  f.up_word = rng() % 2 ? 1 /* kUp */ : 2 /* kUnreachable */;
  // The low 1..64 bits (1 << 64 would be undefined).
  f.up_mask = (uint64_t{rng()} << 32 | rng()) & (~uint64_t{0} >> (63 - rng() % 64));
  return f;
}

void ExpectSameAsScalar(FastSwitch4Fn fn, const char* name) {
  if (fn == nullptr) GTEST_SKIP() << name << " not supported by this CPU";
  std::mt19937 rng(77);
  for (int trial = 0; trial < 200; ++trial) {
    const FastSwitch4 f = RandomParams(rng);
    for (size_t n = 0; n <= 70; ++n) {
      std::vector<uint32_t> dst(n);
      for (uint32_t& d : dst) {
        const uint32_t r = rng();
        // In the prefix mostly (own digits above often), sometimes anywhere.
        d = r % 5 == 0 ? r
                       : f.base | ((r % 3 == 0 ? (f.own | (r >> 8 & ~f.above)) : r >> 4) &
                                   f.field_bits);
      }
      std::vector<uint8_t> want(16 * n + 16, 0xa5), got(16 * n + 16, 0xa5);
      FastSwitch4Scalar(f, dst.data(), want.data(), n);
      fn(f, dst.data(), got.data(), n);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size()))
          << name << " trial " << trial << " n " << n << " pow2 " << f.pow2;
    }
  }
}

TEST(FastSwitch4Test, Avx2EqualsScalar) { ExpectSameAsScalar(FastSwitch4Avx2(), "AVX2"); }
TEST(FastSwitch4Test, Avx512EqualsScalar) { ExpectSameAsScalar(FastSwitch4Avx512(), "AVX-512"); }

}  // namespace
}  // namespace heddle::fwd::internal
