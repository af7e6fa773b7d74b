// The scalar pieces every kernel form shares (sign_kernels.h states the definitions): value
// loads, the sign predicate, the lane fold, the magnitude, and the per-chunk tails the vector
// forms hand back to scalar code. Included by the kernel .cc files only, before any target
// pragma, so every form runs these exact instructions-as-defined for its tails. Internal linkage:
// no inline function here can be merged with an AVX-compiled copy from another file.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dataplane/relay/codec/sign_kernels.h"

namespace heddle::relay::internal {
namespace {

constexpr size_t kLanes = 16;  // fp32 partials per block and fp64 lanes per chunk
constexpr uint32_t kCanonicalNan = 0x7FC00000u;

inline float F32FromBits(uint32_t b) { return std::bit_cast<float>(b); }

inline float Bf16ToF32(uint16_t h) { return F32FromBits(uint32_t{h} << 16); }

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    if (mant == 0) return F32FromBits(sign);
    const float f = static_cast<float>(mant) * 0x1p-24f;  // exact: mant < 2^10
    return sign ? -f : f;
  }
  if (exp == 31) return F32FromBits(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0));
  return F32FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

template <DType D>
inline float LoadAt(const void* x, size_t i) {
  if constexpr (D == DType::kFloat32) {
    float v;
    std::memcpy(&v, static_cast<const uint8_t*>(x) + 4 * i, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, static_cast<const uint8_t*>(x) + 2 * i, 2);
    return D == DType::kBFloat16 ? Bf16ToF32(h) : F16ToF32(h);
  }
}

template <DType D>
inline const void* Advance(const void* x, size_t i) {
  return static_cast<const uint8_t*>(x) + i * (D == DType::kFloat32 ? 4 : 2);
}

inline bool Negative(float v) { return v < 0.0f; }

// Adds a block's fp32 partials into the chunk's fp64 lanes.
inline void AddPartials(double* lanes, const float* p) {
  for (size_t l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(p[l]);
}

inline double FoldLanes(double* l) {
  for (size_t s = kLanes / 2; s >= 1; s /= 2) {
    for (size_t k = 0; k < s; ++k) l[k] += l[k + s];
  }
  return l[0];
}

inline float MagnitudeOf(double* lanes, size_t count) {
  const float m = static_cast<float>(FoldLanes(lanes) / static_cast<double>(count));
  return std::isnan(m) ? F32FromBits(kCanonicalNan) : m;
}

// Values [i0, nc) of a chunk at x (i0 a multiple of 64), block by block: sign words from word
// i0 / 64 of `words`, |x| into the block's fp32 partials (from +0.0f, in index order), and the
// partials into the fp64 lanes.
template <DType D>
inline void PackTail(const void* x, size_t i0, size_t nc, uint64_t* words, double* lanes) {
  for (size_t i = i0; i < nc; i += 64) {
    uint64_t w = 0;
    float p[kLanes] = {};
    const size_t end = nc - i < 64 ? nc - i : 64;
    for (size_t b = 0; b < end; ++b) {
      const float v = LoadAt<D>(x, i + b);
      w |= uint64_t{Negative(v)} << b;
      p[b % kLanes] += std::fabs(v);
    }
    words[i / 64] = w;
    AddPartials(lanes, p);
  }
}

// Error feedback, first pass over values [i0, nc): v = x + e, signs and sums from v.
template <DType D>
inline void EfTail(const void* x, const float* e, size_t i0, size_t nc, uint64_t* words,
                   double* lanes) {
  for (size_t i = i0; i < nc; i += 64) {
    uint64_t w = 0;
    float p[kLanes] = {};
    const size_t end = nc - i < 64 ? nc - i : 64;
    for (size_t b = 0; b < end; ++b) {
      const float v = LoadAt<D>(x, i + b) + e[i + b];
      w |= uint64_t{Negative(v)} << b;
      p[b % kLanes] += std::fabs(v);
    }
    words[i / 64] = w;
    AddPartials(lanes, p);
  }
}

// Error feedback, second pass over values [i0, nc): e = v - (neg ? -m : m).
template <DType D>
inline void EfUpdateTail(const void* x, float* e, size_t i0, size_t nc, float m) {
  for (size_t i = i0; i < nc; ++i) {
    const float v = LoadAt<D>(x, i) + e[i];
    e[i] = v - (Negative(v) ? -m : m);
  }
}

inline bool BitAt(const uint8_t* signs, size_t j) { return (signs[j / 8] >> (j % 8)) & 1u; }

inline void AccumulateTail(float* acc, const uint8_t* signs, size_t i0, size_t n, float c) {
  for (size_t j = i0; j < n; ++j) acc[j] = acc[j] + (BitAt(signs, j) ? -c : c);
}

inline void DecodeTail(float* out, const uint8_t* signs, size_t i0, size_t n, float m) {
  for (size_t j = i0; j < n; ++j) out[j] = BitAt(signs, j) ? -m : m;
}

}  // namespace
}  // namespace heddle::relay::internal
