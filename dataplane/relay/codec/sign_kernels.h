// File: dataplane/relay/codec/sign_kernels.h
//
// The GeoMesh sign codec's kernels (docs/relay.md §2): they turn a tensor of fp32, bf16 or fp16
// values into sign bits plus one magnitude per chunk, and add weighted signs back into an fp32
// accumulator. Scalar, AVX2 and AVX-512 forms exist; all give bit-identical results, and the best
// the CPU supports is picked once, at first use. Most callers want the encoder (encoder.h) and
// the frame functions (frame.h); the kernels are public for them, for the aggregation, for the
// benchmark and for tests that compare the forms.
//
//   const SignKernels& k = ActiveKernels();
//   k.pack(DType::kFloat32, x, n, 4096, signs, mags);   // signs: (n + 63) / 64 words
//   k.accumulate(acc, sign_bytes, n, w * m);             // acc[j] += bit j ? -(w*m) : (w*m)
//
// Definitions every form follows exactly:
//   * sign bit of x: 1 when x < 0 (an ordered compare), else 0. So +0 and -0 both give 0 (+1),
//     every NaN gives 0, -inf and negative denormals give 1. Bit j of the stream is bit (j % 64)
//     of 64-bit word j / 64 (least significant first); bits past n in the last word are 0. Stored
//     little-endian, byte k bit b is value 8k + b.
//   * magnitude of a chunk of c values: m = (float)(S / c), S = Σ|x| summed in a fixed order.
//     Each block of 64 values (one sign word; the chunk's last block may be shorter) sums into
//     16 fp32 partials, value b of the block into partial b % 16, each from +0.0f in index
//     order (so at most four values a partial); the partials add, as doubles, into the chunk's
//     16 fp64 lanes, block after block; the lanes fold pairwise (l[k] += l[k + s] for
//     s = 8, 4, 2, 1) and S = l[0]. The order is the same in every form, so the float is too.
//     The fp32 partials cost at most three roundings (m is within a few ulps of the exact mean)
//     and halve the widening work against summing every value in fp64; a chunk holding values
//     above FLT_MAX / 4 may get an infinite m. A NaN m is returned as the quiet NaN 0x7FC00000.
//   * chunks: chunk k covers values [k·c, min((k+1)·c, n)); c is a multiple of 64, so every chunk
//     starts on a sign word.
//   * accumulate: acc[j] = acc[j] + (bit j ? -c : c), one fp32 add per value (the coefficient c
//     is formed once per chunk by the caller); decode: out[j] = bit j ? -m : m.
//   * error feedback, per chunk: v = x + e (fp32 add); bits and m from v; then, when m is
//     finite, e = v - (bit ? -m : m) (one fp32 subtract); a chunk whose m is not finite keeps
//     its old e. No kernel contracts a multiply and an add into an FMA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace heddle::relay {

// The element type of a source tensor. The values are the frame's dtype field (frame.h).
enum class DType : uint8_t { kFloat32 = 1, kBFloat16 = 2, kFloat16 = 3 };

// Bytes per value of a dtype, 0 for an unknown one.
size_t DTypeBytes(DType d);
const char* DTypeName(DType d);

enum class Isa : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
const char* IsaName(Isa isa);

// Signs and chunk magnitudes of n values: signs gets (n + 63) / 64 words; mags, unless null,
// gets (n + chunk - 1) / chunk floats. chunk: a multiple of 64, at least 64.
using PackFn = void (*)(const void* x, size_t n, size_t chunk, uint64_t* signs, float* mags);
// The same for v = x + e, and e updated in place (see above); mags must not be null. Returns
// the number of chunks whose magnitude is not finite (those keep their e).
using EfEncodeFn = size_t (*)(const void* x, float* e, size_t n, size_t chunk, uint64_t* signs,
                              float* mags);
// acc[j] += bit j ? -c : c for j < n; signs: the little-endian sign stream, any alignment.
using AccumulateFn = void (*)(float* acc, const uint8_t* signs, size_t n, float c);
// out[j] = bit j ? -m : m.
using DecodeFn = void (*)(float* out, const uint8_t* signs, size_t n, float m);

struct SignKernels {
  Isa isa;
  PackFn pack_f32, pack_bf16, pack_f16;
  EfEncodeFn ef_f32, ef_bf16, ef_f16;
  AccumulateFn accumulate;
  DecodeFn decode;

  void pack(DType d, const void* x, size_t n, size_t chunk, uint64_t* signs, float* mags) const;
  size_t ef_encode(DType d, const void* x, float* e, size_t n, size_t chunk, uint64_t* signs,
                   float* mags) const;
};

// The kernels of one ISA, or null when this CPU (or build) does not have it. kScalar always
// exists.
const SignKernels* KernelsFor(Isa isa);

// The best kernels for this CPU, chosen on first call and fixed after. The environment variable
// HEDDLE_RELAY_ISA=scalar|avx2|avx512 caps the choice (for benchmarks and for comparing forms in
// a running system); an unknown or unsupported value falls back to the best available.
const SignKernels& ActiveKernels();

// Scalar conversions the kernels use, exposed for tests: bf16 and fp16 bits to fp32 (exact;
// an fp16 signalling NaN comes back quiet, as the F16C instruction returns it).
float BFloat16ToFloat(uint16_t bits);
float Float16ToFloat(uint16_t bits);

}  // namespace heddle::relay
