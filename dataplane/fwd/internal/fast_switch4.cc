// The fast IPv4 switch lookup (fields.h FastSwitch4), scalar, AVX2 and AVX-512. All compute, per address:
//   in   = the bits outside the digit fields equal the prefix (and, unless every m_j is a power of
//          two, every digit is below m_j);
//   up   = a digit above the node's tier differs from the node's own;
//   kind = in ? (up ? the upward kind : kDown) : kNotInFabric, down_port = a_tier when down,
//   up_mask = the node's up mask when in and up.
#include <cstring>

#include "dataplane/fwd/internal/fields.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace heddle::fwd::internal {
namespace {

constexpr uint64_t kNotInFabricWord = 3;  // HopKind::kNotInFabric

template <bool kPow2>
void Scalar(const FastSwitch4& f, const uint32_t* dst, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint64_t words[2];
    FastSwitch4Words<kPow2>(f, dst[i], words);
    std::memcpy(out + 16 * i, words, sizeof(words));
  }
}

#if defined(__x86_64__)
// Four NextHops (64 bytes) from 64-bit lanes w = [W0 W1 W2 W3] (first words) and mk = [M0 M1 M2
// M3] (up masks): [W0 M0 W1 M1] and [W2 M2 W3 M3]. A macro: __m256i values do not cross a call
// in a function compiled for the baseline ISA.
#define HEDDLE_FWD_STORE4(p, w, mk)                                                                \
  do {                                                                                             \
    const __m256i lo_ = _mm256_unpacklo_epi64((w), (mk)); /* W0 M0 | W2 M2 */                      \
    const __m256i hi_ = _mm256_unpackhi_epi64((w), (mk)); /* W1 M1 | W3 M3 */                      \
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute2x128_si256(lo_, hi_, 0x20)); \
    _mm256_storeu_si256(reinterpret_cast<__m256i*>((p) + 32),                                      \
                        _mm256_permute2x128_si256(lo_, hi_, 0x31));                                \
  } while (0)

[[gnu::target("avx2")]] void Avx2(const FastSwitch4& f, const uint32_t* dst, void* out_v,
                                  size_t n) {
  uint8_t* out = static_cast<uint8_t*>(out_v);
  const __m256i field_bits = _mm256_set1_epi32(static_cast<int>(f.field_bits));
  const __m256i base = _mm256_set1_epi32(static_cast<int>(f.base));
  const __m256i own = _mm256_set1_epi32(static_cast<int>(f.own));
  const __m256i above = _mm256_set1_epi32(static_cast<int>(f.above));
  const __m256i down_mask = _mm256_set1_epi32(static_cast<int>(f.down_mask));
  const __m128i down_shift = _mm_cvtsi32_si128(static_cast<int>(f.down_shift));
  const __m256i up_word = _mm256_set1_epi32(static_cast<int>(f.up_word));
  const __m256i not_in_fabric = _mm256_set1_epi32(static_cast<int>(kNotInFabricWord));
  const __m256i up_mask = _mm256_set1_epi64x(static_cast<long long>(f.up_mask));
  const __m256i zero = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi32(-1);
  __m128i shift[4];
  __m256i digit_mask[4], m[4];
  for (int j = 1; j <= 3; ++j) {
    shift[j] = _mm_cvtsi32_si128(static_cast<int>(f.shift[j]));
    digit_mask[j] = _mm256_set1_epi32(static_cast<int>(f.digit_mask[j]));
    m[j] = _mm256_set1_epi32(static_cast<int>(f.m[j]));
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + i));
    const __m256i v = _mm256_and_si256(a, field_bits);
    __m256i in = _mm256_cmpeq_epi32(_mm256_andnot_si256(field_bits, a), base);
    if (!f.pow2) {
      for (int j = 1; j <= 3; ++j) {
        const __m256i d = _mm256_and_si256(_mm256_srl_epi32(v, shift[j]), digit_mask[j]);
        in = _mm256_and_si256(in, _mm256_cmpgt_epi32(m[j], d));
      }
    }
    const __m256i up = _mm256_xor_si256(
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_xor_si256(v, own), above), zero), ones);
    const __m256i port =
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(v, down_shift), down_mask), 16);
    const __m256i w0 = _mm256_blendv_epi8(not_in_fabric, _mm256_blendv_epi8(port, up_word, up), in);
    const __m256i sel = _mm256_and_si256(in, up);
    const __m256i w_lo = _mm256_cvtepu32_epi64(_mm256_castsi256_si128(w0));
    const __m256i w_hi = _mm256_cvtepu32_epi64(_mm256_extracti128_si256(w0, 1));
    const __m256i m_lo =
        _mm256_and_si256(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(sel)), up_mask);
    const __m256i m_hi =
        _mm256_and_si256(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(sel, 1)), up_mask);
    HEDDLE_FWD_STORE4(out + 16 * i, w_lo, m_lo);
    HEDDLE_FWD_STORE4(out + 16 * (i + 4), w_hi, m_hi);
  }
  FastSwitch4Scalar(f, dst + i, out + 16 * i, n - i);
}
#undef HEDDLE_FWD_STORE4

// GCC 12 warns that the "undefined" pass-through operand of its AVX-512 intrinsics
// (_mm512_undefined_epi32, deliberately self-initialized) may be used uninitialized; every lane
// here is written under an all-ones mask, so the operand is never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Sixteen addresses a step. The answers' first words are built as 32-bit lanes and widened to
// 64 bits, the up masks come from a masked move, and vpermt2q interleaves the two into NextHops
// four to a 64-byte store.
[[gnu::target("avx512f,avx512vl,avx512bw")]] void Avx512(const FastSwitch4& f,
                                                         const uint32_t* dst, void* out_v,
                                                         size_t n) {
  uint8_t* out = static_cast<uint8_t*>(out_v);
  const __m512i field_bits = _mm512_set1_epi32(static_cast<int>(f.field_bits));
  const __m512i base = _mm512_set1_epi32(static_cast<int>(f.base));
  const __m512i own = _mm512_set1_epi32(static_cast<int>(f.own));
  const __m512i above = _mm512_set1_epi32(static_cast<int>(f.above));
  const __m512i down_mask = _mm512_set1_epi32(static_cast<int>(f.down_mask));
  const __m128i down_shift = _mm_cvtsi32_si128(static_cast<int>(f.down_shift));
  const __m512i up_word = _mm512_set1_epi32(static_cast<int>(f.up_word));
  const __m512i not_in_fabric = _mm512_set1_epi32(static_cast<int>(kNotInFabricWord));
  const __m512i up_mask = _mm512_set1_epi64(static_cast<long long>(f.up_mask));
  __m128i shift[4];
  __m512i digit_mask[4], m[4];
  for (int j = 1; j <= 3; ++j) {
    shift[j] = _mm_cvtsi32_si128(static_cast<int>(f.shift[j]));
    digit_mask[j] = _mm512_set1_epi32(static_cast<int>(f.digit_mask[j]));
    m[j] = _mm512_set1_epi32(static_cast<int>(f.m[j]));
  }
  // 64-bit lanes: [w0 m0 w1 m1 w2 m2 w3 m3] from w (indexes 0..7) and m (8..15), and the same
  // for lanes 4..7.
  const __m512i lo_idx = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
  const __m512i hi_idx = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i a = _mm512_loadu_si512(dst + i);
    const __m512i v = _mm512_and_si512(a, field_bits);
    __mmask16 in = _mm512_cmpeq_epi32_mask(_mm512_andnot_si512(field_bits, a), base);
    if (!f.pow2) {
      for (int j = 1; j <= 3; ++j) {
        const __m512i d = _mm512_and_si512(_mm512_srl_epi32(v, shift[j]), digit_mask[j]);
        in &= _mm512_cmplt_epu32_mask(d, m[j]);
      }
    }
    const __mmask16 up =
        _mm512_test_epi32_mask(_mm512_xor_si512(v, own), above);  // a digit above differs
    const __m512i port =
        _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(v, down_shift), down_mask), 16);
    const __m512i w0 =
        _mm512_mask_blend_epi32(in, not_in_fabric, _mm512_mask_blend_epi32(up, port, up_word));
    const __mmask16 sel = in & up;
    const __m512i w_lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(w0));
    const __m512i w_hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(w0, 1));
    const __m512i m_lo = _mm512_maskz_mov_epi64(static_cast<__mmask8>(sel), up_mask);
    const __m512i m_hi = _mm512_maskz_mov_epi64(static_cast<__mmask8>(sel >> 8), up_mask);
    uint8_t* p = out + 16 * i;
    _mm512_storeu_si512(p, _mm512_permutex2var_epi64(w_lo, lo_idx, m_lo));
    _mm512_storeu_si512(p + 64, _mm512_permutex2var_epi64(w_lo, hi_idx, m_lo));
    _mm512_storeu_si512(p + 128, _mm512_permutex2var_epi64(w_hi, lo_idx, m_hi));
    _mm512_storeu_si512(p + 192, _mm512_permutex2var_epi64(w_hi, hi_idx, m_hi));
  }
  FastSwitch4Scalar(f, dst + i, out + 16 * i, n - i);
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void FastSwitch4Scalar(const FastSwitch4& f, const uint32_t* dst, void* out, size_t n) {
  if (f.pow2) {
    Scalar<true>(f, dst, static_cast<uint8_t*>(out), n);
  } else {
    Scalar<false>(f, dst, static_cast<uint8_t*>(out), n);
  }
}

FastSwitch4Fn FastSwitch4Avx2() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) return Avx2;
#endif
  return nullptr;
}

FastSwitch4Fn FastSwitch4Avx512() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw")) {
    return Avx512;
  }
#endif
  return nullptr;
}

FastSwitch4Fn PickFastSwitch4() {
  if (FastSwitch4Fn fn = FastSwitch4Avx512()) return fn;
  if (FastSwitch4Fn fn = FastSwitch4Avx2()) return fn;
  return FastSwitch4Scalar;
}

}  // namespace heddle::fwd::internal
