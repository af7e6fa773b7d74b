// The AVX2 (+F16C) kernels. Same results as the scalar ones bit for bit (sign_kernels.h): a sign
// word's 64 values are eight 8-float vectors; the even ones add into the fp32 partial of lanes
// 0-7, the odd ones into that of lanes 8-15, and the partials widen into four 4-double
// accumulators; tails shorter than a sign word go to the shared scalar code.
#include "dataplane/relay/codec/internal/kernel_common.h"
#include "dataplane/relay/codec/internal/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif

namespace heddle::relay::internal {
namespace {

template <DType D>
inline __m256 Load8(const void* x, size_t i) {
  if constexpr (D == DType::kFloat32) {
    return _mm256_loadu_ps(static_cast<const float*>(x) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(x) + i));
    if constexpr (D == DType::kBFloat16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

// Signs and lane sums of values [0, nc) of one chunk, whole sign words by vector, the rest by
// PackTail/EfTail. With kEf the values are x + e.
template <DType D, bool kEf>
inline void SignChunk(const void* x, const float* e, size_t nc, uint64_t* words, double* lanes) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256d acc[4];
  for (__m256d& a : acc) a = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 64 <= nc; i += 64) {
    uint64_t w = 0;
    __m256 p[2] = {zero, zero};
    for (size_t r = 0; r < 8; ++r) {
      __m256 v = Load8<D>(x, i + 8 * r);
      if constexpr (kEf) v = _mm256_add_ps(v, _mm256_loadu_ps(e + i + 8 * r));
      const uint32_t bits =
          static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_LT_OQ)));
      w |= uint64_t{bits} << (8 * r);
      p[r % 2] = _mm256_add_ps(p[r % 2], _mm256_and_ps(v, abs_mask));
    }
    words[i / 64] = w;
    for (size_t h = 0; h < 2; ++h) {
      acc[2 * h] = _mm256_add_pd(acc[2 * h], _mm256_cvtps_pd(_mm256_castps256_ps128(p[h])));
      acc[2 * h + 1] =
          _mm256_add_pd(acc[2 * h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(p[h], 1)));
    }
  }
  for (size_t k = 0; k < 4; ++k) _mm256_storeu_pd(lanes + 4 * k, acc[k]);
  if constexpr (kEf) {
    EfTail<D>(x, e, i, nc, words, lanes);
  } else {
    PackTail<D>(x, i, nc, words, lanes);
  }
}

template <DType D>
void Pack(const void* x, size_t n, size_t chunk, uint64_t* signs, float* mags) {
  for (size_t start = 0, k = 0; start < n; start += chunk, ++k) {
    const size_t nc = n - start < chunk ? n - start : chunk;
    double lanes[kLanes];
    SignChunk<D, false>(Advance<D>(x, start), nullptr, nc, signs + start / 64, lanes);
    if (mags != nullptr) mags[k] = MagnitudeOf(lanes, nc);
  }
}

template <DType D>
size_t Ef(const void* x, float* e, size_t n, size_t chunk, uint64_t* signs, float* mags) {
  const __m256 zero = _mm256_setzero_ps();
  size_t nonfinite = 0;
  for (size_t start = 0, k = 0; start < n; start += chunk, ++k) {
    const size_t nc = n - start < chunk ? n - start : chunk;
    const void* xc = Advance<D>(x, start);
    float* ec = e + start;
    double lanes[kLanes];
    SignChunk<D, true>(xc, ec, nc, signs + start / 64, lanes);
    const float m = MagnitudeOf(lanes, nc);
    mags[k] = m;
    if (!std::isfinite(m)) {
      ++nonfinite;
      continue;
    }
    const __m256 mp = _mm256_set1_ps(m);
    const __m256 mn = _mm256_set1_ps(-m);
    size_t i = 0;
    for (; i + 8 <= nc; i += 8) {
      const __m256 v = _mm256_add_ps(Load8<D>(xc, i), _mm256_loadu_ps(ec + i));
      const __m256 sm = _mm256_blendv_ps(mp, mn, _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
      _mm256_storeu_ps(ec + i, _mm256_sub_ps(v, sm));
    }
    EfUpdateTail<D>(xc, ec, i, nc, m);
  }
  return nonfinite;
}

// The mask of lanes whose bit is set in byte b.
inline __m256 ByteMask(uint8_t b, __m256i sel) {
  const __m256i v = _mm256_and_si256(_mm256_set1_epi32(b), sel);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(v, sel));
}

void Accumulate(float* acc, const uint8_t* signs, size_t n, float c) {
  const __m256 cp = _mm256_set1_ps(c);
  const __m256 cn = _mm256_set1_ps(-c);
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 s = _mm256_blendv_ps(cp, cn, ByteMask(signs[j / 8], sel));
    _mm256_storeu_ps(acc + j, _mm256_add_ps(_mm256_loadu_ps(acc + j), s));
  }
  AccumulateTail(acc, signs, j, n, c);
}

void Decode(float* out, const uint8_t* signs, size_t n, float m) {
  const __m256 mp = _mm256_set1_ps(m);
  const __m256 mn = _mm256_set1_ps(-m);
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(out + j, _mm256_blendv_ps(mp, mn, ByteMask(signs[j / 8], sel)));
  }
  DecodeTail(out, signs, j, n, m);
}

}  // namespace

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const SignKernels* Avx2KernelsIfBuilt() {
  static constexpr SignKernels k = {
      Isa::kAvx2,
      Pack<DType::kFloat32>,
      Pack<DType::kBFloat16>,
      Pack<DType::kFloat16>,
      Ef<DType::kFloat32>,
      Ef<DType::kBFloat16>,
      Ef<DType::kFloat16>,
      Accumulate,
      Decode,
  };
  return &k;
}

}  // namespace heddle::relay::internal

#else  // !__x86_64__

namespace heddle::relay::internal {
const SignKernels* Avx2KernelsIfBuilt() { return nullptr; }
}  // namespace heddle::relay::internal

#endif
