// File: dataplane/pipeline/worker.h
//
// The per-lcore run-to-completion loop:
//   for each assigned (port, RX queue): RX burst -> parse -> stage chain -> TX burst per egress
// until `stop` is set, then a bounded drain of what is still in the RX queues. Each worker owns one
// TX queue on every port (its index), its counters (LcoreStats) and its stages, so nothing it
// writes is shared with another lcore.
//
//   Worker w(std::move(setup));
//   rte_eal_remote_launch(&Worker::Launch, &w, lcore);   // returns when stop is set
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <vector>

#include "dataplane/pipeline/stage.h"

namespace heddle::pipeline {

struct RxAssignment {
  uint16_t port_index;  // heddle's port index (stats, peer maps)
  uint16_t port_id;     // DPDK port id
  uint16_t queue;
};

constexpr std::array<bool, kMaxPorts> MakeAllTrue() {
  std::array<bool, kMaxPorts> a{};
  a.fill(true);
  return a;
}

struct WorkerSetup {
  unsigned lcore_id = 0;
  std::vector<RxAssignment> rx;
  std::array<uint16_t, kMaxPorts> port_ids{};  // DPDK port id by port index
  uint16_t num_ports = 0;
  uint16_t tx_queue = 0;  // this worker's TX queue on every port
  // Whether each port's TX takes chained mbufs (RTE_ETH_TX_OFFLOAD_MULTI_SEGS); chains bound for a
  // port that does not are dropped as "tx-multi-seg" rather than handed to a driver that would
  // send only their first segment.
  std::array<bool, kMaxPorts> tx_multi_seg = MakeAllTrue();
  uint16_t burst = 32;
  std::vector<std::unique_ptr<Stage>> stages;
  LcoreStats* stats = nullptr;
  const std::atomic<bool>* stop = nullptr;
  // Polls after `stop` with nothing received before the worker returns (bounded drain).
  unsigned drain_polls = 64;
};

class Worker {
 public:
  explicit Worker(WorkerSetup setup);
  // The loop; returns 0 when stopped.
  int Run();
  // rte_lcore_function_t adaptor: arg is a Worker*.
  static int Launch(void* arg) { return static_cast<Worker*>(arg)->Run(); }

  // One poll over every assigned queue; returns packets received. Exposed for tests.
  uint32_t PollOnce();

 private:
  void ProcessBurst(uint16_t port_index, uint16_t n);
  void Transmit();

  WorkerSetup s_;
  WorkerContext ctx_;
  Burst burst_;
  // Per-egress-port TX staging, flushed after every burst.
  std::array<uint16_t, kMaxPorts> tx_n_{};
  std::array<uint64_t, kMaxPorts> tx_bytes_{};
  std::unique_ptr<std::array<rte_mbuf*, kMaxBurst>[]> tx_;
};

}  // namespace heddle::pipeline
