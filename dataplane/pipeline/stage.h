// File: dataplane/pipeline/stage.h
//
// The stage interface of the per-lcore run-to-completion loop. A worker receives a burst from one
// RX queue, parses every packet into a pkt::PacketDesc, then hands the burst through its stage
// chain (e.g. "port-fwd", later "storm-tag", "pin-select") and transmits what is left.
//
// Contract of Stage::Process(ctx, burst):
//   * it sees burst.n packets, with pkts[i], desc[i] and egress[i] in step;
//   * it keeps the packets that go on, compacted in their original order at the front of the
//     three arrays, and returns how many that is;
//   * every packet it does not keep goes to ctx.Drop(mbuf, reason) exactly once: the drop is
//     counted under its reason and the mbuf is freed after the burst;
//   * it allocates nothing, takes no lock, throws nothing; per-lcore state only.
// One virtual call per stage per burst; the per-packet loop inside a stage is direct code.
#pragma once

#include <cstdint>

#include "dataplane/pipeline/stats.h"
#include "dataplane/pkt/parse.h"

struct rte_mbuf;

namespace heddle::pipeline {

inline constexpr uint16_t kMaxBurst = 256;
inline constexpr uint16_t kNoEgress = 0xffff;

struct Burst {
  uint16_t n = 0;
  uint16_t ingress = 0;  // index of the port the burst came from
  // Packets waiting in the worker's egress queues when the burst arrived (PrioEgress::queued()),
  // or kUnknownBacklog. 0 tells a stage that no flow has packets held from earlier bursts.
  static constexpr uint32_t kUnknownBacklog = ~uint32_t{0};
  uint32_t egress_backlog = kUnknownBacklog;
  // True when a stage has chosen every packet's egress (none is kNoEgress): "pin-select" sets it
  // for a burst it routed whole, and "port-fwd" then has nothing to fill. Stages after the one
  // that set it may drop packets (the rest stay routed) but must not clear an egress. The worker
  // clears it for every burst.
  bool all_routed = false;
  rte_mbuf* pkts[kMaxBurst];
  uint16_t egress[kMaxBurst];  // port index each packet leaves on; kNoEgress until chosen
  // Egress priority level (0 = lowest, served last); 0 unless a stage ("storm-tag") sets it. The
  // worker serves a port's levels in strict priority when its TX queue pushes back.
  uint8_t level[kMaxBurst];
  // Per-flow count of this flow's packets held inside heddled (in this burst or in an egress
  // queue), or nullptr. A stage that sets it has already added 1; the worker subtracts 1 when the
  // packet leaves (sent to the driver or dropped). Lets a stage see its QP's own egress backlog
  // and keep a QP's packets in order across levels (docs/storm.md §5).
  uint32_t* held[kMaxBurst];
  pkt::PacketDesc desc[kMaxBurst];
};

// A packet leaves heddled (sent or dropped): its flow's held count goes down, never below 0.
inline void ReleaseHeld(uint32_t* held) {
  if (held != nullptr && *held != 0) --*held;
}

// What a stage may touch besides the burst: its lcore's counters and the drop list.
class WorkerContext {
 public:
  explicit WorkerContext(LcoreStats* stats) : stats_(stats) {}
  LcoreStats& stats() { return *stats_; }
  void Drop(rte_mbuf* m, DropReason r) {
    stats_->drops[static_cast<int>(r)].Add(1);
    dropped_[n_dropped_++] = m;
  }
  // Drops packet i of a burst: also releases its held count (Burst::held). Stages drop with this.
  void Drop(Burst& b, uint16_t i, DropReason r) {
    ReleaseHeld(b.held[i]);
    b.held[i] = nullptr;
    Drop(b.pkts[i], r);
  }
  // Called by the worker after each burst: frees what the stages dropped.
  uint16_t TakeDropped(rte_mbuf*** out) {
    *out = dropped_;
    uint16_t n = n_dropped_;
    n_dropped_ = 0;
    return n;
  }

 private:
  LcoreStats* stats_;
  uint16_t n_dropped_ = 0;
  rte_mbuf* dropped_[kMaxBurst];
};

class Stage {
 public:
  virtual ~Stage() = default;
  // Stable name used in stats, traces, metrics labels and the CLI ("port-fwd").
  virtual const char* name() const = 0;
  virtual uint16_t Process(WorkerContext& ctx, Burst& b) = 0;
  // Called once per poll loop, busy or idle, on the worker's lcore, outside any burst: picks up
  // published configuration, runs bounded housekeeping slices. Must stay short (microseconds).
  virtual void Poll(WorkerContext& ctx) {}
};

// Moves packet `from` to slot `to` (to <= from) in all the per-packet arrays.
inline void MoveSlot(Burst& b, uint16_t to, uint16_t from) {
  if (to == from) return;
  b.pkts[to] = b.pkts[from];
  b.egress[to] = b.egress[from];
  b.level[to] = b.level[from];
  b.held[to] = b.held[from];
  b.desc[to] = b.desc[from];
}

}  // namespace heddle::pipeline
