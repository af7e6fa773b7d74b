// The AVX-512 (F) kernels. Same results as the scalar ones bit for bit (sign_kernels.h): a sign
// word's 64 values are four 16-float vectors whose |v| add into one 16-lane fp32 partial, which
// widens into two 8-double accumulators (lanes 0-7 and 8-15); compares give the sign bits as
// masks directly.
#include "dataplane/relay/codec/internal/kernel_common.h"
#include "dataplane/relay/codec/internal/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,f16c")
// GCC 12 warns that the "undefined" pass-through operand of its AVX-512 intrinsics
// (_mm512_undefined_*, deliberately self-initialized) may be used uninitialized; the intrinsics
// used here write every lane under an all-ones mask, so the operand is never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace heddle::relay::internal {
namespace {

template <DType D>
inline __m512 Load16(const void* x, size_t i) {
  if constexpr (D == DType::kFloat32) {
    return _mm512_loadu_ps(static_cast<const float*>(x) + i);
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(x) + i));
    if constexpr (D == DType::kBFloat16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

inline __m256 High8(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

template <DType D, bool kEf>
inline void SignChunk(const void* x, const float* e, size_t nc, uint64_t* words, double* lanes) {
  const __m512 zero = _mm512_setzero_ps();
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  size_t i = 0;
  for (; i + 64 <= nc; i += 64) {
    uint64_t w = 0;
    __m512 p = zero;
    for (size_t q = 0; q < 4; ++q) {
      __m512 v = Load16<D>(x, i + 16 * q);
      if constexpr (kEf) v = _mm512_add_ps(v, _mm512_loadu_ps(e + i + 16 * q));
      const __mmask16 neg = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
      w |= uint64_t{static_cast<uint16_t>(neg)} << (16 * q);
      p = _mm512_add_ps(p, _mm512_abs_ps(v));
    }
    words[i / 64] = w;
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(High8(p)));
  }
  _mm512_storeu_pd(lanes, lo);
  _mm512_storeu_pd(lanes + 8, hi);
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
  const __m512 zero = _mm512_setzero_ps();
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
    const __m512 mp = _mm512_set1_ps(m);
    const __m512 mn = _mm512_set1_ps(-m);
    size_t i = 0;
    for (; i + 16 <= nc; i += 16) {
      const __m512 v = _mm512_add_ps(Load16<D>(xc, i), _mm512_loadu_ps(ec + i));
      const __m512 sm = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), mp, mn);
      _mm512_storeu_ps(ec + i, _mm512_sub_ps(v, sm));
    }
    EfUpdateTail<D>(xc, ec, i, nc, m);
  }
  return nonfinite;
}

void Accumulate(float* acc, const uint8_t* signs, size_t n, float c) {
  const __m512 cp = _mm512_set1_ps(c);
  const __m512 cn = _mm512_set1_ps(-c);
  size_t j = 0;
  for (; j + 64 <= n; j += 64) {
    uint64_t w;
    std::memcpy(&w, signs + j / 8, 8);
    for (size_t q = 0; q < 4; ++q) {
      const __m512 s = _mm512_mask_blend_ps(static_cast<__mmask16>(w >> (16 * q)), cp, cn);
      float* p = acc + j + 16 * q;
      _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), s));
    }
  }
  for (; j + 16 <= n; j += 16) {
    uint16_t w;
    std::memcpy(&w, signs + j / 8, 2);
    const __m512 s = _mm512_mask_blend_ps(w, cp, cn);
    _mm512_storeu_ps(acc + j, _mm512_add_ps(_mm512_loadu_ps(acc + j), s));
  }
  AccumulateTail(acc, signs, j, n, c);
}

void Decode(float* out, const uint8_t* signs, size_t n, float m) {
  const __m512 mp = _mm512_set1_ps(m);
  const __m512 mn = _mm512_set1_ps(-m);
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    uint16_t w;
    std::memcpy(&w, signs + j / 8, 2);
    _mm512_storeu_ps(out + j, _mm512_mask_blend_ps(w, mp, mn));
  }
  DecodeTail(out, signs, j, n, m);
}

}  // namespace

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

const SignKernels* Avx512KernelsIfBuilt() {
  static constexpr SignKernels k = {
      Isa::kAvx512,
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
const SignKernels* Avx512KernelsIfBuilt() { return nullptr; }
}  // namespace heddle::relay::internal

#endif
