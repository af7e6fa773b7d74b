// Throughput of the sign codec's kernels against memcpy of the same bytes, in one run
// (tools/bench/relay_codec_bench.py prints the ratios). Bytes counted are the input the kernel
// processes: the source tensor for pack and encode (4 bytes a value for fp32, 2 for bf16/fp16),
// the fp32 accumulator for accumulate (read and written in place, plus n/8 sign bytes read) and
// the fp32 output for decode. memcpy/<bytes> copies that many bytes to another buffer.
//
//   build/dataplane/relay/codec/relay_codec_benchmark --benchmark_filter='pack|memcpy'
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "dataplane/relay/codec/sign_kernels.h"

namespace heddle::relay {
namespace {

struct Buffers {
  explicit Buffers(size_t n)
      : src(4 * n), dst(4 * n), e(n, 0.0f), acc(n, 0.0f), signs(n / 64 + 1), mags(n / 64 + 1) {
    std::mt19937_64 rng(1);
    std::normal_distribution<float> g(0.0f, 1e-3f);
    for (size_t i = 0; i < n; ++i) {
      const float v = g(rng);
      std::memcpy(&src[4 * i], &v, 4);
    }
    // bf16/fp16 views read the first 2n bytes: keep them finite fp16 values too.
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = static_cast<uint16_t>((rng() & 0x83FF) | ((1 + rng() % 29) << 10));
      std::memcpy(&dst[2 * i], &h, 2);
    }
    std::memcpy(src.data(), dst.data(), 2 * n);
  }
  std::vector<uint8_t> src, dst;
  std::vector<float> e, acc;
  std::vector<uint64_t> signs;
  std::vector<float> mags;
};

Buffers& Get(size_t n) {
  static std::vector<std::pair<size_t, Buffers*>> cache;
  for (auto& [k, b] : cache) {
    if (k == n) return *b;
  }
  cache.push_back({n, new Buffers(n)});
  return *cache.back().second;
}

void Memcpy(benchmark::State& state, size_t bytes) {
  Buffers& b = Get(bytes / 2);  // src holds 4·(bytes/2) ≥ bytes
  for (auto _ : state) {
    std::memcpy(b.dst.data(), b.src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void Pack(benchmark::State& state, const SignKernels* k, DType d, size_t n) {
  Buffers& b = Get(n);
  for (auto _ : state) {
    k->pack(d, b.src.data(), n, 4096, b.signs.data(), b.mags.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * DTypeBytes(d)));
}

void Encode(benchmark::State& state, const SignKernels* k, DType d, size_t n) {
  Buffers& b = Get(n);
  for (auto _ : state) {
    k->ef_encode(d, b.src.data(), b.e.data(), n, 4096, b.signs.data(), b.mags.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * DTypeBytes(d)));
}

void Accumulate(benchmark::State& state, const SignKernels* k, size_t n) {
  Buffers& b = Get(n);
  const uint8_t* signs = b.src.data();  // any bits will do
  for (auto _ : state) {
    for (size_t c = 0; c < n; c += 4096) {
      k->accumulate(b.acc.data() + c, signs + c / 8, std::min<size_t>(4096, n - c), 1e-7f);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * 4));
}

void Decode(benchmark::State& state, const SignKernels* k, size_t n) {
  Buffers& b = Get(n);
  const uint8_t* signs = b.src.data();
  for (auto _ : state) {
    for (size_t c = 0; c < n; c += 4096) {
      k->decode(b.acc.data() + c, signs + c / 8, std::min<size_t>(4096, n - c), 1e-3f);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * 4));
}

void RegisterAll() {
  // 256 Ki values (1 MiB of fp32: cache-resident on most servers) and 16 Mi (64 MiB: DRAM).
  for (size_t n : {size_t{1} << 18, size_t{1} << 24}) {
    const std::string ns = std::to_string(n);
    for (size_t bytes : {2 * n, 4 * n}) {
      benchmark::RegisterBenchmark(("memcpy/" + std::to_string(bytes)).c_str(), Memcpy, bytes);
    }
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      const SignKernels* k = KernelsFor(isa);
      if (k == nullptr) continue;
      const std::string is = IsaName(isa);
      for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
        const std::string ds = DTypeName(d);
        benchmark::RegisterBenchmark(("pack/" + is + "/" + ds + "/" + ns).c_str(), Pack, k, d, n);
        benchmark::RegisterBenchmark(("encode_ef/" + is + "/" + ds + "/" + ns).c_str(), Encode, k,
                                     d, n);
      }
      benchmark::RegisterBenchmark(("accumulate/" + is + "/" + ns).c_str(), Accumulate, k, n);
      benchmark::RegisterBenchmark(("decode/" + is + "/" + ns).c_str(), Decode, k, n);
    }
  }
}

}  // namespace
}  // namespace heddle::relay

int main(int argc, char** argv) {
  heddle::relay::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
