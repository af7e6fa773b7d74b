#include "dataplane/relay/codec/sign_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace heddle::relay {
namespace {

constexpr DType kDTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

std::vector<const SignKernels*> VectorForms() {
  std::vector<const SignKernels*> v;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (const SignKernels* k = KernelsFor(isa)) v.push_back(k);
  }
  return v;
}

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// Test data as raw bytes of the dtype: random values of mixed scales and signs, random bit
// patterns (every class: NaN, inf, denormal), and the special values at fixed places.
std::vector<uint8_t> RandomTensor(DType d, size_t n, std::mt19937_64& rng, bool specials) {
  std::vector<uint8_t> out(n * DTypeBytes(d));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-30, 30);
  for (size_t i = 0; i < n; ++i) {
    const int kind = static_cast<int>(rng() % 16);
    if (d == DType::kFloat32) {
      float v = std::ldexp(u(rng), scale(rng));
      if (specials && kind == 0) v = std::bit_cast<float>(static_cast<uint32_t>(rng()));
      if (specials && kind == 1) {
        const float sp[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x7F800001u),  // signalling NaN
                            std::bit_cast<float>(0xFF800001u),
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            std::bit_cast<float>(0x807FFFFFu),  // largest negative denormal
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min()};
        v = sp[rng() % std::size(sp)];
      }
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      uint16_t h;
      if (d == DType::kBFloat16) {
        h = static_cast<uint16_t>(Bits(std::ldexp(u(rng), scale(rng))) >> 16);
      } else {
        // fp16: exponent in range, random mantissa and sign.
        h = static_cast<uint16_t>((rng() & 0x83FFu) | ((1 + rng() % 29) << 10));
      }
      if (specials && kind == 0) h = static_cast<uint16_t>(rng());
      if (specials && kind == 1) {
        const uint16_t bf[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0,
                               0xFFC0, 0x7F81, 0x0001, 0x8001};
        const uint16_t hf[] = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00,
                               0xFE00, 0x7C01, 0x0001, 0x8001, 0x83FF};
        h = d == DType::kBFloat16 ? bf[rng() % std::size(bf)] : hf[rng() % std::size(hf)];
      }
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

float ValueAt(DType d, const uint8_t* x, size_t i) {
  if (d == DType::kFloat32) {
    float v;
    std::memcpy(&v, x + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, x + 2 * i, 2);
  return d == DType::kBFloat16 ? BFloat16ToFloat(h) : Float16ToFloat(h);
}

size_t Words(size_t n) { return (n + 63) / 64; }
size_t Chunks(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }

TEST(SignKernelsTest, ScalarAlwaysThereAndActiveIsTheBest) {
  ASSERT_NE(KernelsFor(Isa::kScalar), nullptr);
  EXPECT_EQ(KernelsFor(Isa::kScalar)->isa, Isa::kScalar);
  Isa best = Isa::kScalar;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (KernelsFor(isa) != nullptr) best = isa;
  }
  if (std::getenv("HEDDLE_RELAY_ISA") == nullptr) {
    EXPECT_EQ(ActiveKernels().isa, best);
  }
#if defined(__x86_64__)
  unsigned a, b, c, d;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  EXPECT_EQ(KernelsFor(Isa::kAvx2) != nullptr, __builtin_cpu_supports("avx2") && f16c);
  EXPECT_EQ(KernelsFor(Isa::kAvx512) != nullptr,
            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"));
#endif
}

TEST(SignKernelsTest, HandCheckedPackAndMagnitude) {
  const float x[] = {1.0f, -2.0f, 3.0f, -4.0f, 0.0f, -0.0f, std::nanf(""), -std::nanf("")};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    const SignKernels* k = KernelsFor(isa);
    if (k == nullptr) continue;
    SCOPED_TRACE(IsaName(isa));
    uint64_t w = ~uint64_t{0};
    float m = -1;
    k->pack_f32(x, 4, 64, &w, &m);
    EXPECT_EQ(w, 0b1010u);
    EXPECT_EQ(m, 2.5f);
    // ±0 and NaN of either sign are not negative: bits 4..7 stay 0; the NaN makes m NaN.
    k->pack_f32(x, 8, 64, &w, &m);
    EXPECT_EQ(w, 0b1010u);
    EXPECT_EQ(Bits(m), 0x7FC00000u);
  }
}

TEST(SignKernelsTest, ChunkMagnitudesAreMeansOfTheirOwnValues) {
  // 130 values, chunks of 64: means of 64, 64 and 2 values.
  std::vector<float> x(130);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (i < 64 ? 1 : i < 128 ? 3 : 10);
  uint64_t w[3];
  float m[3];
  KernelsFor(Isa::kScalar)->pack_f32(x.data(), x.size(), 64, w, m);
  EXPECT_EQ(m[0], 1.0f);
  EXPECT_EQ(m[1], 3.0f);
  EXPECT_EQ(m[2], 10.0f);
  EXPECT_EQ(w[2], 0b10u);  // 128 % 3 == 2 (positive), 129 % 3 == 0 (negative)
}

// The scalar form against the definitions, written independently: bit = x < 0, m within a
// few ulps of the long-double mean.
TEST(SignKernelsTest, ScalarMatchesDefinition) {
  std::mt19937_64 rng(1);
  for (DType d : kDTypes) {
    for (size_t n : {1, 5, 63, 64, 65, 200, 4095, 4097, 10000}) {
      SCOPED_TRACE(testing::Message() << DTypeName(d) << " n=" << n);
      const std::vector<uint8_t> x = RandomTensor(d, n, rng, /*specials=*/false);
      const size_t chunk = 128;
      std::vector<uint64_t> w(Words(n), 0xAAAA);
      std::vector<float> m(Chunks(n, chunk));
      KernelsFor(Isa::kScalar)->pack(d, x.data(), n, chunk, w.data(), m.data());
      for (size_t j = 0; j < 64 * w.size(); ++j) {
        const bool bit = (w[j / 64] >> (j % 64)) & 1;
        ASSERT_EQ(bit, j < n && ValueAt(d, x.data(), j) < 0.0f) << "value " << j;
      }
      for (size_t c = 0; c < m.size(); ++c) {
        long double s = 0;
        const size_t end = std::min(n, (c + 1) * chunk);
        for (size_t j = c * chunk; j < end; ++j) s += std::fabs(ValueAt(d, x.data(), j));
        const double want = static_cast<double>(s / (end - c * chunk));
        EXPECT_NEAR(m[c], want, std::abs(want) * 1e-6) << "chunk " << c;
      }
    }
  }
}

// The summation order is part of the definition. Random data almost never shows it: a double
// sum of floats rounds to the same float in any order unless the exact sum sits next to a float
// rounding midpoint. These chunks sit there: 1 + 2^-24 is the midpoint between two floats, and
// two values of 2^-53 (half a double ulp at 1) push the sum above it or vanish, depending on
// whether they meet each other or 2^-24 before they meet 1; the rest are zeros. Every form must
// follow the lanes-and-fold order exactly to agree.
double DefinedAbsSum(const std::vector<float>& x) {
  double lanes[16] = {};
  for (size_t block = 0; block < x.size(); block += 64) {
    float p[16] = {};
    for (size_t b = 0; b < 64 && block + b < x.size(); ++b) p[b % 16] += std::fabs(x[block + b]);
    for (size_t l = 0; l < 16; ++l) lanes[l] += p[l];
  }
  for (size_t s = 8; s >= 1; s /= 2) {
    for (size_t k = 0; k < s; ++k) lanes[k] += lanes[k + s];
  }
  return lanes[0];
}

TEST(SignKernelsTest, MagnitudeFollowsTheDefinedSummationOrder) {
  std::mt19937_64 rng(6);
  int order_sensitive = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = trial % 2 ? 64 : 256;  // powers of two: dividing by n is exact
    std::vector<float> x(n);
    for (float& v : x) v = rng() % 2 ? 0.0f : -0.0f;
    std::vector<size_t> pos(n);
    for (size_t i = 0; i < n; ++i) pos[i] = i;
    std::shuffle(pos.begin(), pos.end(), rng);
    x[pos[0]] = -1.0f;
    x[pos[1]] = std::ldexp(1.0f, -24);
    x[pos[2]] = std::ldexp(1.0f, -53);
    x[pos[3]] = -std::ldexp(1.0f, -53);
    double sequential = 0;
    for (float v : x) sequential += std::fabs(static_cast<double>(v));
    const float want = static_cast<float>(DefinedAbsSum(x) / static_cast<double>(n));
    if (want != static_cast<float>(sequential / static_cast<double>(n))) ++order_sensitive;
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      const SignKernels* k = KernelsFor(isa);
      if (k == nullptr) continue;
      std::vector<uint64_t> w(Words(n));
      float m;
      k->pack_f32(x.data(), n, n, w.data(), &m);
      ASSERT_EQ(Bits(m), Bits(want)) << IsaName(isa) << " trial " << trial;
      std::vector<float> e(n, 0.0f);
      k->ef_f32(x.data(), e.data(), n, n, w.data(), &m);
      ASSERT_EQ(Bits(m), Bits(want)) << IsaName(isa) << " trial " << trial;
    }
  }
  // The data did test the order: a plain left-to-right sum gives another float often enough.
  EXPECT_GT(order_sensitive, 30);
}

// Every vector form against the scalar one: all lengths 0..300, element offsets 0..7 (so the
// loads start off every alignment), chunk sizes 64, 128 and 4096, with and without specials.
TEST(SignKernelsTest, PackFormsBitIdenticalToScalar) {
  const SignKernels& ref = *KernelsFor(Isa::kScalar);
  std::mt19937_64 rng(2);
  for (const SignKernels* k : VectorForms()) {
    for (DType d : kDTypes) {
      for (bool specials : {false, true}) {
        const std::vector<uint8_t> data = RandomTensor(d, 300 + 8, rng, specials);
        for (size_t off = 0; off < 8; ++off) {
          const uint8_t* x = data.data() + off * DTypeBytes(d);
          for (size_t n = 0; n <= 300; ++n) {
            for (size_t chunk : {64, 128, 4096}) {
              std::vector<uint64_t> w0(Words(n) + 1, 0x5555), w1(Words(n) + 1, 0x5555);
              std::vector<float> m0(Chunks(n, chunk) + 1, 7), m1(Chunks(n, chunk) + 1, 7);
              ref.pack(d, x, n, chunk, w0.data(), m0.data());
              k->pack(d, x, n, chunk, w1.data(), m1.data());
              ASSERT_EQ(w0, w1) << IsaName(k->isa) << " " << DTypeName(d) << " n=" << n
                                << " off=" << off << " chunk=" << chunk;
              ASSERT_EQ(0, std::memcmp(m0.data(), m1.data(), 4 * m0.size()))
                  << IsaName(k->isa) << " " << DTypeName(d) << " n=" << n << " off=" << off
                  << " chunk=" << chunk << " m " << m0[0] << " vs " << m1[0];
              // Nothing written past the last word or chunk.
              ASSERT_EQ(w1.back(), 0x5555u);
              ASSERT_EQ(m1.back(), 7.0f);
            }
          }
        }
      }
    }
  }
}

// Every 16-bit word, in order and in a shuffled order: the vector forms take signs and |v| on the
// raw words (ranges of int16), so every sign, zero, infinity, NaN and subnormal pattern is
// checked against the scalar definition. The finite words alone also check the magnitudes.
TEST(SignKernelsTest, PackFormsBitIdenticalOnEvery16BitWord) {
  const SignKernels& ref = *KernelsFor(Isa::kScalar);
  std::mt19937_64 rng(16);
  for (DType d : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<uint16_t> all(65536), finite;
    for (uint32_t w = 0; w < 65536; ++w) {
      all[w] = static_cast<uint16_t>(w);
      if (std::isfinite(ValueAt(d, reinterpret_cast<const uint8_t*>(&all[w]), 0))) {
        finite.push_back(all[w]);
      }
    }
    std::vector<uint16_t> shuffled = all;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (const std::vector<uint16_t>* words : {&all, &shuffled, &finite}) {
      const size_t n = words->size();
      for (size_t chunk : {size_t{64}, size_t{4096}}) {
        std::vector<uint64_t> w0(Words(n)), w1(Words(n));
        std::vector<float> m0(Chunks(n, chunk)), m1(Chunks(n, chunk));
        ref.pack(d, words->data(), n, chunk, w0.data(), m0.data());
        for (const SignKernels* k : VectorForms()) {
          k->pack(d, words->data(), n, chunk, w1.data(), m1.data());
          ASSERT_EQ(w0, w1) << IsaName(k->isa) << " " << DTypeName(d) << " n=" << n;
          ASSERT_EQ(0, std::memcmp(m0.data(), m1.data(), 4 * m0.size()))
              << IsaName(k->isa) << " " << DTypeName(d) << " n=" << n << " chunk=" << chunk;
        }
      }
    }
  }
}

TEST(SignKernelsTest, PackFormsBitIdenticalOnLargeTensors) {
  const SignKernels& ref = *KernelsFor(Isa::kScalar);
  std::mt19937_64 rng(3);
  for (const SignKernels* k : VectorForms()) {
    for (DType d : kDTypes) {
      for (size_t n : {4096, 4097, 70001}) {
        const std::vector<uint8_t> x = RandomTensor(d, n, rng, n == 4097);
        for (size_t chunk : {64, 4096, 1 << 20}) {
          std::vector<uint64_t> w0(Words(n)), w1(Words(n));
          std::vector<float> m0(Chunks(n, chunk)), m1(Chunks(n, chunk));
          ref.pack(d, x.data(), n, chunk, w0.data(), m0.data());
          k->pack(d, x.data(), n, chunk, w1.data(), m1.data());
          ASSERT_EQ(w0, w1);
          ASSERT_EQ(0, std::memcmp(m0.data(), m1.data(), 4 * m0.size()));
          // A null magnitude array gives the same signs.
          std::vector<uint64_t> w2(Words(n));
          k->pack(d, x.data(), n, chunk, w2.data(), nullptr);
          ASSERT_EQ(w0, w2);
        }
      }
    }
  }
}

bool SameOrBothNan(float a, float b) {
  return Bits(a) == Bits(b) || (std::isnan(a) && std::isnan(b));
}

TEST(SignKernelsTest, ErrorFeedbackFormsBitIdenticalToScalar) {
  const SignKernels& ref = *KernelsFor(Isa::kScalar);
  std::mt19937_64 rng(4);
  std::normal_distribution<float> g(0.0f, 0.01f);
  for (const SignKernels* k : VectorForms()) {
    for (DType d : kDTypes) {
      for (bool specials : {false, true}) {
        const std::vector<uint8_t> data = RandomTensor(d, 300 + 8, rng, specials);
        std::vector<float> e_start(300 + 8);
        for (float& v : e_start) v = g(rng);
        for (size_t off = 0; off < 8; ++off) {
          const uint8_t* x = data.data() + off * DTypeBytes(d);
          for (size_t n = 0; n <= 300; n += (n < 70 ? 1 : 7)) {
            for (size_t chunk : {64, 128}) {
              std::vector<float> e0(e_start.begin() + off, e_start.begin() + off + n), e1 = e0;
              std::vector<uint64_t> w0(Words(n)), w1(Words(n));
              std::vector<float> m0(Chunks(n, chunk)), m1(Chunks(n, chunk));
              const size_t bad0 = ref.ef_encode(d, x, e0.data(), n, chunk, w0.data(), m0.data());
              const size_t bad1 = k->ef_encode(d, x, e1.data(), n, chunk, w1.data(), m1.data());
              const std::string what = std::string(IsaName(k->isa)) + " " + DTypeName(d) +
                                       " n=" + std::to_string(n) + " off=" + std::to_string(off);
              ASSERT_EQ(bad0, bad1) << what;
              ASSERT_EQ(w0, w1) << what;
              ASSERT_EQ(0, std::memcmp(m0.data(), m1.data(), 4 * m0.size())) << what;
              for (size_t j = 0; j < n; ++j) {
                ASSERT_TRUE(SameOrBothNan(e0[j], e1[j]))
                    << what << " e[" << j << "] " << e0[j] << " vs " << e1[j];
                if (!specials) {
                  ASSERT_EQ(Bits(e0[j]), Bits(e1[j])) << what;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(SignKernelsTest, ErrorFeedbackHandChecked) {
  // x = [1, -3, 0.5, -0.5], e = [0.5, 0, -1, 0]: v = [1.5, -3, -0.5, -0.5], m = 5.5 / 4.
  const float x[] = {1.0f, -3.0f, 0.5f, -0.5f};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    const SignKernels* k = KernelsFor(isa);
    if (k == nullptr) continue;
    float e[] = {0.5f, 0.0f, -1.0f, 0.0f};
    uint64_t w;
    float m;
    EXPECT_EQ(k->ef_f32(x, e, 4, 64, &w, &m), 0u);
    EXPECT_EQ(w, 0b1110u);
    EXPECT_EQ(m, 1.375f);
    EXPECT_THAT(
        e, testing::ElementsAre(1.5f - 1.375f, -3.0f + 1.375f, -0.5f + 1.375f, -0.5f + 1.375f));
    // A non-finite chunk keeps its error and is counted; the other chunk is updated.
    std::vector<float> xx(128, 1.0f), ee(128, 0.25f);
    xx[70] = std::numeric_limits<float>::infinity();
    uint64_t ww[2];
    float mm[2];
    EXPECT_EQ(k->ef_f32(xx.data(), ee.data(), 128, 64, ww, mm), 1u);
    EXPECT_EQ(mm[0], 1.25f);
    EXPECT_TRUE(std::isinf(mm[1]));
    EXPECT_EQ(ee[0], 0.0f);
    EXPECT_EQ(ee[64], 0.25f);
    EXPECT_EQ(ee[70], 0.25f);
  }
}

TEST(SignKernelsTest, AccumulateAndDecodeFormsBitIdenticalToScalar) {
  const SignKernels& ref = *KernelsFor(Isa::kScalar);
  std::mt19937_64 rng(5);
  std::vector<uint8_t> signs(64 + 8);
  for (uint8_t& b : signs) b = static_cast<uint8_t>(rng());
  std::vector<float> acc_start(300 + 8);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float& v : acc_start) v = u(rng);
  const float coefficients[] = {
      0.3f, 1e-30f, 0.0f, -0.0f, 1e38f, std::numeric_limits<float>::denorm_min(), 3.14159f};
  for (const SignKernels* k : VectorForms()) {
    for (size_t soff = 0; soff < 8; ++soff) {
      for (size_t aoff = 0; aoff < 8; aoff += 3) {
        for (size_t n = 0; n <= 300; ++n) {
          for (float c : coefficients) {
            std::vector<float> a0(acc_start.begin() + aoff, acc_start.begin() + aoff + n + 1);
            std::vector<float> a1 = a0;
            ref.accumulate(a0.data(), signs.data() + soff, n, c);
            k->accumulate(a1.data(), signs.data() + soff, n, c);
            ASSERT_EQ(0, std::memcmp(a0.data(), a1.data(), 4 * a0.size()))
                << IsaName(k->isa) << " n=" << n << " soff=" << soff << " c=" << c;
            std::vector<float> d0(n + 1, 9.0f), d1(n + 1, 9.0f);
            ref.decode(d0.data(), signs.data() + soff, n, c);
            k->decode(d1.data(), signs.data() + soff, n, c);
            ASSERT_EQ(0, std::memcmp(d0.data(), d1.data(), 4 * d0.size()))
                << IsaName(k->isa) << " n=" << n << " soff=" << soff;
            ASSERT_EQ(d1[n], 9.0f);
          }
        }
      }
    }
  }
}

TEST(SignKernelsTest, AccumulateHandChecked) {
  const uint8_t signs[] = {0b0101'0011, 0b1};  // values 0,1,4,6,8 negative
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    const SignKernels* k = KernelsFor(isa);
    if (k == nullptr) continue;
    std::vector<float> acc(9, 1.0f);
    k->accumulate(acc.data(), signs, 9, 0.25f);
    EXPECT_THAT(
        acc, testing::ElementsAre(0.75f, 0.75f, 1.25f, 1.25f, 0.75f, 1.25f, 0.75f, 1.25f, 0.75f));
    std::vector<float> out(9);
    k->decode(out.data(), signs, 9, 2.0f);
    EXPECT_THAT(out, testing::ElementsAre(-2, -2, 2, 2, -2, 2, -2, 2, -2));
  }
}

TEST(SignKernelsTest, HalfConversionsExact) {
  EXPECT_EQ(Float16ToFloat(0x3C00), 1.0f);
  EXPECT_EQ(Float16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(Float16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Float16ToFloat(0x83FF), -std::ldexp(1023.0f, -24));
  EXPECT_EQ(Float16ToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(Float16ToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Bits(Float16ToFloat(0x8000)), 0x80000000u);
  EXPECT_EQ(Bits(Float16ToFloat(0x7C01)), 0x7FC02000u);  // signalling NaN comes back quiet
  EXPECT_EQ(BFloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bits(BFloat16ToFloat(0x8001)), 0x80010000u);
}

#if defined(__x86_64__)
[[gnu::target("f16c")]] uint32_t HardwareF16(uint16_t h) {
  return static_cast<uint32_t>(
      _mm_cvtsi128_si32(_mm_castps_si128(_mm_cvtph_ps(_mm_cvtsi32_si128(h)))));
}

TEST(SignKernelsTest, Float16ConversionMatchesF16cForEveryValue) {
  unsigned a, b, c, d;
  if (!(__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0)) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(Bits(Float16ToFloat(static_cast<uint16_t>(h))), HardwareF16(static_cast<uint16_t>(h)))
        << std::hex << h;
  }
}
#endif

}  // namespace
}  // namespace heddle::relay
