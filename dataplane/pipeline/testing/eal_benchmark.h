// File: dataplane/pipeline/testing/eal_benchmark.h
//
// What the pipeline's stage benchmarks share: main() under the EAL (no hugepages, as the
// benchmarks here run) and the daemon's own mbuf pool (dpdk::CreateMbufPool: packed across
// 4 KiB pages without hugepages), so a stage is timed on the memory layout heddled gives it.
//
//   int main(int argc, char** argv) {
//     return heddle::pipeline::test_util::RunBenchmarksUnderEal("pin_stage_benchmark", argc, argv);
//   }
#pragma once

#include <rte_mbuf.h>

#include <cstdio>
#include <cstdlib>

#include "benchmark/benchmark.h"
#include "drivers/dpdk/eal.h"
#include "drivers/dpdk/port.h"

namespace heddle::pipeline::test_util {

inline int RunBenchmarksUnderEal(const char* program, int argc, char** argv,
                                 unsigned memory_mb = 512) {
  dpdk::EalParams p;
  p.program = program;
  p.no_huge = true;
  p.memory_mb = memory_mb;
  p.log_level = "error";
  if (absl::Status s = dpdk::InitEal(p); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, s.ToString().c_str());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  dpdk::CleanupEal();
  return 0;
}

// A pool of n mbufs of DPDK's default size, as heddled creates it; aborts if there is no memory.
inline rte_mempool* BenchmarkPool(const char* name, unsigned n) {
  absl::StatusOr<rte_mempool*> pool =
      dpdk::CreateMbufPool(name, n, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
  if (!pool.ok()) {
    std::fprintf(stderr, "%s\n", pool.status().ToString().c_str());
    std::abort();
  }
  return *pool;
}

}  // namespace heddle::pipeline::test_util
