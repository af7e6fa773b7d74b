#include "dataplane/relay/codec/sign_kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "dataplane/relay/codec/internal/kernel_common.h"
#include "dataplane/relay/codec/internal/kernels.h"

namespace heddle::relay {
namespace internal {
namespace {

// The scalar forms: the reference the vector forms are tested against, written as the
// definitions in sign_kernels.h read.
template <DType D>
void PackScalar(const void* x, size_t n, size_t chunk, uint64_t* signs, float* mags) {
  for (size_t start = 0, k = 0; start < n; start += chunk, ++k) {
    const size_t nc = n - start < chunk ? n - start : chunk;
    double lanes[kLanes] = {};
    PackTail<D>(Advance<D>(x, start), 0, nc, signs + start / 64, lanes);
    if (mags != nullptr) mags[k] = MagnitudeOf(lanes, nc);
  }
}

template <DType D>
size_t EfScalar(const void* x, float* e, size_t n, size_t chunk, uint64_t* signs, float* mags) {
  size_t nonfinite = 0;
  for (size_t start = 0, k = 0; start < n; start += chunk, ++k) {
    const size_t nc = n - start < chunk ? n - start : chunk;
    const void* xc = Advance<D>(x, start);
    double lanes[kLanes] = {};
    EfTail<D>(xc, e + start, 0, nc, signs + start / 64, lanes);
    const float m = MagnitudeOf(lanes, nc);
    mags[k] = m;
    if (!std::isfinite(m)) {
      ++nonfinite;
      continue;
    }
    EfUpdateTail<D>(xc, e + start, 0, nc, m);
  }
  return nonfinite;
}

void AccumulateScalar(float* acc, const uint8_t* signs, size_t n, float c) {
  AccumulateTail(acc, signs, 0, n, c);
}

void DecodeScalar(float* out, const uint8_t* signs, size_t n, float m) {
  DecodeTail(out, signs, 0, n, m);
}

}  // namespace

const SignKernels& ScalarKernels() {
  static constexpr SignKernels k = {
      Isa::kScalar,
      PackScalar<DType::kFloat32>,
      PackScalar<DType::kBFloat16>,
      PackScalar<DType::kFloat16>,
      EfScalar<DType::kFloat32>,
      EfScalar<DType::kBFloat16>,
      EfScalar<DType::kFloat16>,
      AccumulateScalar,
      DecodeScalar,
  };
  return k;
}

}  // namespace internal

size_t DTypeBytes(DType d) {
  switch (d) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
  }
  return 0;
}

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "fp32";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "fp16";
  }
  return "unknown";
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

void SignKernels::pack(DType d, const void* x, size_t n, size_t chunk, uint64_t* signs,
                       float* mags) const {
  switch (d) {
    case DType::kFloat32:
      return pack_f32(x, n, chunk, signs, mags);
    case DType::kBFloat16:
      return pack_bf16(x, n, chunk, signs, mags);
    case DType::kFloat16:
      return pack_f16(x, n, chunk, signs, mags);
  }
}

size_t SignKernels::ef_encode(DType d, const void* x, float* e, size_t n, size_t chunk,
                              uint64_t* signs, float* mags) const {
  switch (d) {
    case DType::kFloat32:
      return ef_f32(x, e, n, chunk, signs, mags);
    case DType::kBFloat16:
      return ef_bf16(x, e, n, chunk, signs, mags);
    case DType::kFloat16:
      return ef_f16(x, e, n, chunk, signs, mags);
  }
  return 0;
}

namespace {

#if defined(__x86_64__)
// CPUID.1:ECX.F16C[bit 29]; clang's __builtin_cpu_supports does not know "f16c".
bool HasF16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
#endif

}  // namespace

const SignKernels* KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return &internal::ScalarKernels();
    case Isa::kAvx2:
#if defined(__x86_64__)
      if (__builtin_cpu_supports("avx2") && HasF16c()) return internal::Avx2KernelsIfBuilt();
#endif
      return nullptr;
    case Isa::kAvx512:
#if defined(__x86_64__)
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
        return internal::Avx512KernelsIfBuilt();
      }
#endif
      return nullptr;
  }
  return nullptr;
}

namespace {

const SignKernels& Choose() {
  Isa cap = Isa::kAvx512;
  if (const char* env = std::getenv("HEDDLE_RELAY_ISA")) {
    if (std::strcmp(env, "scalar") == 0) cap = Isa::kScalar;
    if (std::strcmp(env, "avx2") == 0) cap = Isa::kAvx2;
  }
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (static_cast<int>(isa) > static_cast<int>(cap)) continue;
    if (const SignKernels* k = KernelsFor(isa)) return *k;
  }
  return internal::ScalarKernels();
}

}  // namespace

const SignKernels& ActiveKernels() {
  static const SignKernels& k = Choose();
  return k;
}

float BFloat16ToFloat(uint16_t bits) { return internal::Bf16ToF32(bits); }
float Float16ToFloat(uint16_t bits) { return internal::F16ToF32(bits); }

}  // namespace heddle::relay
