// File: dataplane/pipeline/egress.h
//
// PrioEgress: a worker's strict-priority egress scheduler for STORM levels (docs/storm.md §5).
// It sits after the stage chain, in place of the worker's direct rte_eth_tx_burst, and keeps per
// egress port one software FIFO per level (0 = lowest, 7 = highest). While a port's TX queue
// accepts everything the FIFOs stay empty and a burst only leaves highest level first; when the
// queue pushes back, what it refuses waits in the FIFOs instead of being dropped, and the highest
// waiting level always goes first: a lower level never leaves while a higher one is waiting.
//
//   PrioEgress eg({.num_ports = 2, .port_ids = ids, .tx_queue = q, .queue_packets = 512}, stats);
//   eg.Send(ctx, burst);   // after the stages; ctx frees its drops after the burst
//   eg.Poll();             // once per poll loop, busy or idle: retries the backlogged ports
//   eg.Drain(16);          // at stop: a few more flushes, then frees the rest as "tx-full"
//
// Memory is bounded and allocated in the constructor: a port holds at most `queue_packets`
// packets over all its levels (one shared budget), and each level's ring can hold the whole budget
// ({rte_mbuf*, held*} = 16 bytes a slot, so 8 * 16 * queue_packets bytes per port). When a full
// port gets a packet of level L, the newest packet of the lowest non-empty level is pushed out if
// that level is below L, else the arrival itself is dropped; both count under "storm-queue-full"
// and egress_level_drops[level of the dropped packet].
//
// DCB ports (PrioEgressOptions::dcb_ports, docs/storm.md §6.7): the port has one TX queue per
// hardware traffic class, and each level leaves on its class's (level_queue[port][level]); the
// NIC serves the classes. Each queue is handled like a software port of its own: packets go to
// it in arrival order while nothing waits for it, what it refuses waits in the FIFOs of its
// levels, and those are flushed highest level first until that queue refuses one. A full queue
// holds back only the levels on it, never another queue's (a stalled low class never delays a
// high one). The budget, push-out and counters are the same as above. The choice is made per
// burst: a burst for one software port takes the software fast path even when other ports are
// DCB ports.
//
// Every packet's Burst::held count (if set) is decremented, saturating at 0, exactly when the
// packet leaves heddled: accepted by the driver, pushed out, refused, or freed at stop.
//
// Per-lcore state only: one instance per worker, used only on that worker's lcore. No allocation,
// lock or exception after construction.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "dataplane/pipeline/stage.h"
#include "dataplane/pipeline/stats.h"

struct rte_mbuf;

namespace heddle::pipeline {

struct PrioEgressOptions {
  uint16_t num_ports = 0;                      // ports 0..num_ports-1; at most kMaxPorts
  std::array<uint16_t, kMaxPorts> port_ids{};  // DPDK port id by port index
  uint16_t tx_queue = 0;                       // this worker's TX queue on every port
  uint32_t queue_packets = 512;                // packets held per port over all levels; >= 1
  uint32_t dcb_ports = 0;                      // bit p: port p sends each level on its own queue
  // DCB ports only: this worker's TX queue per level (the queue of the level's traffic class).
  std::array<std::array<uint16_t, kMaxStormLevels>, kMaxPorts> level_queue{};
};

class PrioEgress {
 public:
  static constexpr int kLevels = kMaxStormLevels;

  // `stats` must outlive the scheduler; its egress_level_depth gauges are reset to 0 here.
  PrioEgress(const PrioEgressOptions& options, LcoreStats* stats);
  // Frees what is still queued (releasing the held counts) without counting it: call Drain()
  // first to have it counted.
  ~PrioEgress();
  PrioEgress(const PrioEgress&) = delete;
  PrioEgress& operator=(const PrioEgress&) = delete;

  // Takes the burst's b.n packets, all with egress[i] < num_ports and level[i], held[i] set (a
  // level above 7 counts as 7). Per egress port, highest level first and in arrival order within
  // a level: a port with nothing queued hands them to the driver and queues what it refuses; a
  // port with queued packets queues them behind, then flushes. Drops go to ctx.Drop(), at most one
  // per packet taken, so the context's per-burst drop list cannot overflow.
  void Send(WorkerContext& ctx, const Burst& b);

  // Once per poll loop: flushes every port that holds packets and that Send() has not already
  // flushed since the previous Poll(). A DCB port is always retried here: a burst serves only the
  // queues it has packets for. Returns the packets the driver accepted.
  uint32_t Poll();

  // Hands port `port`'s queued packets to the driver, highest level first, until the driver
  // refuses one (on a DCB port: each level until its own queue refuses one). Returns how many
  // it accepted.
  uint32_t Flush(uint16_t port);

  // At stop: flushes every port until all is sent or `attempts` consecutive rounds sent nothing
  // (pausing 10 us between those), then frees what is left, counted under "tx-full". Returns how
  // many packets were freed.
  uint32_t Drain(unsigned attempts);

  uint32_t queued() const;                          // all ports, all levels
  uint32_t queued(uint16_t port) const;             // one port, all levels
  uint32_t queued(uint16_t port, int level) const;  // one port, one level
  uint32_t capacity() const { return cap_; }

 private:
  struct LevelQueue {
    uint32_t head = 0;  // ring index of the oldest packet
    uint32_t count = 0;
  };
  struct PortQueues {
    std::array<LevelQueue, kLevels> level;
    uint32_t total = 0;     // over the levels; <= cap_
    uint32_t nonempty = 0;  // bit l set when level l holds packets
  };

  size_t Slot(uint16_t port, int level, uint32_t i) const {
    return (static_cast<size_t>(port) * kLevels + level) * cap_ + i;
  }
  uint32_t Wrap(uint32_t i) const { return i >= cap_ ? i - cap_ : i; }
  // The burst sorted by port; each port served as a software or a DCB port.
  void SendSorted(WorkerContext& ctx, const Burst& b);
  // sorted_*[lo, hi): one DCB port's packets, sent per level on the level's queue.
  void SendDcb(WorkerContext& ctx, uint16_t port, uint16_t lo, uint16_t hi);
  // DCB port `port`'s levels sharing its k-th queue, highest first, until the queue refuses one.
  uint32_t FlushGroup(uint16_t port, int k);
  void Enqueue(WorkerContext& ctx, uint16_t port, rte_mbuf* m, uint32_t* held, int level);
  void DropFull(WorkerContext& ctx, rte_mbuf* m, uint32_t* held, int level);
  // rte_eth_tx_burst plus the port counters and held releases of what the driver accepted.
  uint16_t TxBurst(uint16_t port, uint16_t queue, rte_mbuf** pkts, uint32_t* const* held,
                   uint16_t n);
  // Frees every queued packet (held released); returns how many.
  uint32_t FreeAll();
  void StoreDepth();

  uint16_t num_ports_;
  std::array<uint16_t, kMaxPorts> port_ids_;
  uint16_t tx_queue_;
  uint32_t cap_;
  uint32_t dcb_ports_;
  // A DCB port's distinct TX queues (levels sharing a traffic class share one).
  struct DcbGroups {
    int n = 0;                                // distinct queues
    std::array<uint16_t, kLevels> queue{};    // TX queue of group k
    std::array<uint32_t, kLevels> levels{};   // bit l: level l goes on group k's queue
    std::array<uint8_t, kLevels> of_level{};  // group of level l
  };
  std::array<DcbGroups, kMaxPorts> groups_{};
  LcoreStats* stats_;
  std::array<PortQueues, kMaxPorts> ports_{};
  // The rings, as two parallel arrays so a run of mbuf pointers goes to the driver as it is:
  // slot (port, level, i) at Slot(port, level, i).
  std::unique_ptr<rte_mbuf*[]> mbufs_;
  std::unique_ptr<uint32_t*[]> held_;
  std::array<uint32_t, kLevels> depth_{};         // queued per level over the ports
  std::array<uint32_t, kLevels> depth_stored_{};  // last value stored in the gauges
  uint32_t flushed_ = 0;                          // bit p: port p flushed since the last Poll()
  // One burst sorted by (port, level descending), stable.
  rte_mbuf* sorted_pkts_[kMaxBurst];
  uint32_t* sorted_held_[kMaxBurst];
  uint8_t sorted_level_[kMaxBurst];
  // One DCB port's packets grouped by level (arrival order within a level).
  rte_mbuf* level_pkts_[kMaxBurst];
  uint32_t* level_held_[kMaxBurst];
  uint8_t level_level_[kMaxBurst];
};

}  // namespace heddle::pipeline
