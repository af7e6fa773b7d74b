// The AVX-512 (F, BW) kernels. Same results as the scalar ones bit for bit (sign_kernels.h): a
// sign word's 64 values are four 16-float vectors whose |v| add into one 16-lane fp32 partial,
// which widens into two 8-double accumulators (lanes 0-7 and 8-15); compares give the sign bits as
// masks directly. 16-bit packing reads 32 values a vector and takes signs and |v| on the 16-bit
// words before widening (PackHalf16).
#include "dataplane/relay/codec/internal/kernel_common.h"
#include "dataplane/relay/codec/internal/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx2,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,f16c")
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

// Pack for bf16/fp16 on 16-bit words, 64 values (one sign word) per step. Negative(v) is a range
// of the raw word read as int16: (-32768, -128] for bf16 (0x8001..0xFF80: -0, -NaN excluded),
// (-32768, -1024] for fp16 (0x8001..0xFC00). |v| is the word with its sign cleared, widened to the
// exact fp32 value: bf16 by placing the word in the high half of a lane (unpack with zero after a
// qword permute, so lane l holds value l, then 16 + l), fp16 by the F16C conversion. The |v| add
// into the block partial in the same order as the 16-float form (from the first vector; 0 + x is
// x), so the sums are bit-identical.
template <DType D>
inline void SignChunk16(const void* x, size_t nc, uint64_t* words, double* lanes) {
  static_assert(D != DType::kFloat32);
  const __m512i lowest = _mm512_set1_epi16(INT16_MIN);
  const __m512i upper = _mm512_set1_epi16(D == DType::kBFloat16 ? -127 : -1023);
  const __m512i magnitude_bits = _mm512_set1_epi16(0x7FFF);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i qword_order = _mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0);
  const uint16_t* h = static_cast<const uint16_t*>(x);
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  size_t i = 0;
  for (; i + 64 <= nc; i += 64) {
    __mmask32 neg[2];
    __m512 v[4];
    for (size_t half = 0; half < 2; ++half) {
      const __m512i raw = _mm512_loadu_si512(h + i + 32 * half);
      neg[half] = _mm512_mask_cmplt_epi16_mask(_mm512_cmpgt_epi16_mask(raw, lowest), raw, upper);
      const __m512i a = _mm512_and_si512(raw, magnitude_bits);
      if constexpr (D == DType::kBFloat16) {
        const __m512i ordered = _mm512_permutexvar_epi64(qword_order, a);
        v[2 * half] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, ordered));
        v[2 * half + 1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, ordered));
      } else {
        v[2 * half] = _mm512_cvtph_ps(_mm512_castsi512_si256(a));
        v[2 * half + 1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(a, 1));
      }
    }
    words[i / 64] = _cvtmask64_u64(_mm512_kunpackd(neg[1], neg[0]));
    const __m512 p = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v[0], v[1]), v[2]), v[3]);
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(High8(p)));
  }
  _mm512_storeu_pd(lanes, lo);
  _mm512_storeu_pd(lanes + 8, hi);
  PackTail<D>(x, i, nc, words, lanes);
}

template <DType D>
void Pack(const void* x, size_t n, size_t chunk, uint64_t* signs, float* mags) {
  for (size_t start = 0, k = 0; start < n; start += chunk, ++k) {
    const size_t nc = n - start < chunk ? n - start : chunk;
    double lanes[kLanes];
    if constexpr (D == DType::kFloat32) {
      SignChunk<D, false>(Advance<D>(x, start), nullptr, nc, signs + start / 64, lanes);
    } else {
      SignChunk16<D>(Advance<D>(x, start), nc, signs + start / 64, lanes);
    }
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
