// File: dataplane/pipeline/stats.h
//
// Per-lcore counters written by exactly one worker lcore and read by the control and metrics
// threads, and the summed snapshot those readers build.
//
// Writers bump with relaxed load+store (one writer per cache line, so no lock prefix is needed and
// no cache line is shared between lcores); readers load relaxed. A reader may see a burst half
// counted; it never sees a torn 64-bit value and totals are monotonic per counter.
//
//   LcoreStats* s = stats.lcore(idx);           // on the worker
//   s->port[p].rx_packets.Add(n);
//   StatsSnapshot snap = stats.Snapshot();       // on a reader: sums every lcore
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "dataplane/pkt/parse.h"

namespace heddle::pipeline {

inline constexpr int kMaxPorts = 16;
inline constexpr int kMaxLcores = 128;
inline constexpr int kMaxStormLevels = 8;  // storm::kMaxLevels (no storm dependency here)

// Every reason a packet is dropped in the dataplane, with a stable name used in metrics labels,
// the CLI and traces. The parser's failures come first, in their order (DropReasonFromParse()
// relies on it); reasons of the stages follow.
#define HEDDLE_FOREACH_DROP_REASON(X)                                           \
  HEDDLE_FOREACH_PARSE_FAILURE(X)                                               \
  X(kIcrcBad, "icrc-bad", "RoCEv2 ICRC mismatch (only when verify_icrc is on)") \
  X(kNoEgress, "no-egress", "no egress port for the ingress port")              \
  X(kTxFull, "tx-full", "egress TX queue full")                                 \
  X(kTxMultiSeg, "tx-multi-seg", "chained mbuf for a port whose TX takes one segment only") \
  X(kStormQueueFull, "storm-queue-full", "STORM egress level queue full under backpressure")

enum class DropReason : uint8_t {
#define HEDDLE_PIPELINE_ENUM_(e, n, d) e,
  HEDDLE_FOREACH_DROP_REASON(HEDDLE_PIPELINE_ENUM_)
#undef HEDDLE_PIPELINE_ENUM_
      kCount
};
inline constexpr int kNumDropReasons = static_cast<int>(DropReason::kCount);
inline constexpr int kNumRoceClasses = static_cast<int>(pkt::RoceClass::kCount);

const char* DropReasonName(DropReason r);
const char* DropReasonDescription(DropReason r);
// Maps a non-OK parse error to its drop reason.
DropReason DropReasonFromParse(pkt::ParseError e);

// A counter with one writer. Add() is a relaxed load + store: no locked instruction.
class Counter {
 public:
  void Add(uint64_t n) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t Get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

struct PortCounters {
  Counter rx_packets, rx_bytes, tx_packets, tx_bytes;
  std::array<Counter, kNumRoceClasses> roce_rx_packets;  // by opcode class, counted at ingress
};

struct alignas(64) LcoreStats {
  std::array<PortCounters, kMaxPorts> port;
  std::array<Counter, kNumDropReasons> drops;
  Counter busy_loops;  // poll iterations that received at least one packet
  Counter idle_loops;  // poll iterations that received nothing
  Counter bursts;
  // "storm-tag": packets and bytes tagged per level, and QPs refused by a full QP table.
  std::array<Counter, kMaxStormLevels> storm_level_packets, storm_level_bytes;
  Counter storm_table_full;
  // Strict-priority egress (all ports): packets handed to the driver per level, dropped because
  // the level's queue was full, and packets currently queued per level (a gauge: the worker stores
  // the depth after each flush; Add() is not used on it).
  std::array<Counter, kMaxStormLevels> egress_level_tx, egress_level_drops;
  std::array<std::atomic<uint64_t>, kMaxStormLevels> egress_level_depth{};
};

struct PortSnapshot {
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  std::array<uint64_t, kNumRoceClasses> roce_rx_packets{};
};
struct LcoreSnapshot {
  unsigned lcore_id = 0;
  uint64_t busy_loops = 0, idle_loops = 0, bursts = 0;
};
struct StatsSnapshot {
  std::vector<PortSnapshot> ports;                // indexed like the configured ports
  std::array<uint64_t, kNumDropReasons> drops{};  // summed over lcores
  std::vector<LcoreSnapshot> lcores;              // one per worker lcore
  std::array<uint64_t, kMaxStormLevels> storm_level_packets{}, storm_level_bytes{};
  uint64_t storm_table_full = 0;
  std::array<uint64_t, kMaxStormLevels> egress_level_tx{}, egress_level_drops{},
      egress_level_depth{};
};

// Owns one LcoreStats per worker. Built before workers start; never resized while they run.
class DataplaneStats {
 public:
  DataplaneStats(int num_ports, std::vector<unsigned> worker_lcore_ids);
  LcoreStats* lcore(int worker_index) { return &per_lcore_[worker_index]; }
  int num_ports() const { return num_ports_; }
  StatsSnapshot Snapshot() const;

 private:
  int num_ports_;
  std::vector<unsigned> lcore_ids_;
  std::unique_ptr<LcoreStats[]> per_lcore_;
};

}  // namespace heddle::pipeline
