// File: dataplane/pipeline/testing/eal_pool_env.h
//
// A GoogleTest environment for the pipeline's stage tests: starts the EAL without hugepages and
// creates one mbuf pool as heddled does (dpdk::CreateMbufPool: packed across 4 KiB pages),
// shared by the binary's tests; cleans the EAL up at the end.
//
//   class Env : public heddle::pipeline::test_util::EalPoolEnv {
//    public:
//     Env() : EalPoolEnv("storm_stage_test", 2047) {}
//   };
//   ::testing::Environment* const env = ::testing::AddGlobalTestEnvironment(new Env);
//   ...rte_pktmbuf_alloc(Env::pool)
#pragma once

#include <rte_mbuf.h>

#include "drivers/dpdk/eal.h"
#include "drivers/dpdk/port.h"
#include "gtest/gtest.h"

namespace heddle::pipeline::test_util {

class EalPoolEnv : public ::testing::Environment {
 public:
  EalPoolEnv(const char* program, unsigned mbufs, unsigned memory_mb = 64)
      : program_(program), mbufs_(mbufs), memory_mb_(memory_mb) {}
  void SetUp() override {
    dpdk::EalParams p;
    p.program = program_;
    p.no_huge = true;
    p.memory_mb = memory_mb_;
    p.log_level = "error";
    ASSERT_TRUE(dpdk::InitEal(p).ok());
    absl::StatusOr<rte_mempool*> created =
        dpdk::CreateMbufPool(program_, mbufs_, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
    ASSERT_TRUE(created.ok()) << created.status();
    pool = *created;
  }
  void TearDown() override { dpdk::CleanupEal(); }
  static inline rte_mempool* pool = nullptr;

 private:
  const char* program_;
  unsigned mbufs_;
  unsigned memory_mb_;
};

}  // namespace heddle::pipeline::test_util
