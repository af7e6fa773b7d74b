// File: dataplane/pipeline/worker.h
//
// The per-lcore run-to-completion loop:
//   for each assigned (port, RX queue): RX burst -> parse -> stage chain -> TX burst per egress
//   then, once per poll loop: every stage's Poll(), and a retry of the egress ports still holding
//   packets (when the strict-priority egress is on)
// until `stop` is set, then a bounded drain of what is still in the RX queues and the egress
// queues. Each worker owns one TX queue on every port (its index), its counters (LcoreStats), its
// stages and its egress queues, so nothing it writes is shared with another lcore.
//
//   Worker w(std::move(setup));
//   rte_eal_remote_launch(&Worker::Launch, &w, lcore);   // returns when stop is set
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <vector>

#include "dataplane/pipeline/egress.h"
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
  // Strict-priority egress (egress.h): packets held per egress port under TX backpressure, shared
  // by the levels (Burst::level). 0 = off: packets go straight to rte_eth_tx_burst and what the TX
  // queue refuses is dropped as "tx-full". heddled sets storm.queue_packets when storm is on.
  uint32_t egress_queue_packets = 0;
  // DCB TX ports (docs/storm.md §6.7), with the strict-priority egress only: bit p set when port
  // p sends each level on its traffic class's queue, level_queue[p][level] (this worker's).
  uint32_t dcb_ports = 0;
  std::array<std::array<uint16_t, kMaxStormLevels>, kMaxPorts> level_queue{};
  // At stop, consecutive flushes of the egress queues that may send nothing before what is left
  // is freed (counted as "tx-full").
  unsigned egress_drain_attempts = 16;
};

class Worker {
 public:
  explicit Worker(WorkerSetup setup);
  // The loop; returns 0 when stopped.
  int Run();
  // rte_lcore_function_t adaptor: arg is a Worker*.
  static int Launch(void* arg) { return static_cast<Worker*>(arg)->Run(); }

  // One poll loop: every assigned RX queue, then every stage's Poll() and the egress retry.
  // Returns packets received. Exposed for tests.
  uint32_t PollOnce();
  // The strict-priority egress, or nullptr when egress_queue_packets is 0. Exposed for tests.
  const PrioEgress* egress() const { return egress_.get(); }

 private:
  void ProcessBurst(uint16_t port_index, uint16_t n);
  void Transmit();
  void FreeDropped();

  WorkerSetup s_;
  WorkerContext ctx_;
  Burst burst_;
  // Per-egress-port TX staging, flushed after every burst.
  std::array<uint16_t, kMaxPorts> tx_n_{};
  std::array<uint64_t, kMaxPorts> tx_bytes_{};
  std::unique_ptr<std::array<rte_mbuf*, kMaxBurst>[]> tx_;
  // Every port takes chained mbufs (s_.tx_multi_seg): a burst's segments need no check.
  bool all_tx_multi_seg_ = false;
  // Declared after s_: destroyed (freeing what it still holds) while the stages, whose counters
  // the held pointers name, are still alive.
  std::unique_ptr<PrioEgress> egress_;
};

}  // namespace heddle::pipeline
