// File: dataplane/pipeline/storm_stage.h
//
// "storm-tag": the STORM priority tagging stage (docs/storm.md). For every RoCEv2 packet arriving
// on a host-role port (the request direction) it looks up the QP in the worker's own QpTable,
// tracks the request, computes the level from the published LevelConfig and rewrites the DSCP
// (and the VLAN PCP when the level has one). It sets Burst::level (the egress queue) and
// Burst::held (the QP's count of packets held in heddled). Packets from uplink ports are not
// rewritten; their control classes (READ request, ACK/NAK, CNP, atomic ACK) take the control level
// for egress scheduling towards the host, capped like requests by the in-order guard (a
// response-direction entry per QP; CNPs are never capped). It never drops.
//
//   StormTagStage stage({.table = {.capacity = 65536}, .mtu = 4096, .host_ports = hosts,
//                        .control = &ctl, .worker = 0});
//   stages.push_back(&stage);   // before "port-fwd"
//
// One instance per worker: the QP table (allocated here, off the hot path), the tracker and the
// size histogram are per-lcore state, written only by the worker that runs the stage. Poll()
// reports the worker's RCU quiescent state, sweeps idle QPs a slice at a time, answers `show qp`
// queries and publishes the table and tracker counters.
#pragma once

#include <bitset>
#include <cstdint>
#include <functional>
#include <vector>

#include "dataplane/pipeline/stage.h"
#include "dataplane/pipeline/storm_control.h"
#include "dataplane/storm/levels.h"
#include "dataplane/storm/qp_table.h"
#include "dataplane/storm/tracker.h"

namespace heddle::pipeline {

static_assert(kMaxStormLevels == storm::kMaxLevels);

class StormTagStage final : public Stage {
 public:
  // Milliseconds on any monotonic clock. Tests inject one.
  using ClockMs = std::function<uint32_t()>;

  struct Options {
    storm::QpTableOptions table;
    uint32_t mtu = 4096;                 // RoCE path MTU (payload bytes per packet)
    std::bitset<kMaxPorts> host_ports;   // bit i set for every port index with role host
    storm::BacklogSource backlog_source = storm::BacklogSource::kEgressQueue;
    StormControl* control = nullptr;     // required; outlives the stage
    int worker = 0;                      // this worker's index in `control`
    ClockMs clock;                       // defaults to the TSC
    // Poll(): entries swept per housekeeping slice, and slices run every `housekeep_every` polls.
    uint32_t sweep_slice = 64;
    uint32_t housekeep_every = 8;
    uint32_t query_slice = 4096;  // entries scanned per poll while a `show qp` query is pending
  };

  explicit StormTagStage(const Options& options);

  const char* name() const override { return "storm-tag"; }
  uint16_t Process(WorkerContext& ctx, Burst& b) override;
  void Poll(WorkerContext& ctx) override;

  const storm::QpTable& table() const { return table_; }
  const storm::RequestTracker& tracker() const { return tracker_; }

 private:
  uint32_t NowMs() const;
  uint64_t HostBacklog(storm::QpEntry& e, const uint8_t* frame, const pkt::PacketDesc& d,
                       const storm::TrackResult& t, const verbs::HostBacklogIndex* host,
                       bool every_packet);
  void Housekeep(uint32_t now_ms);
  void CountTableFull(LcoreStats& stats);
  void ScanForQuery(uint32_t now_ms);
  StormWorkerCounters Counters() const;

  Options o_;
  storm::QpTable table_;
  storm::RequestTracker tracker_;
  storm::SizeHistogram* hist_;
  uint64_t tsc_per_ms_ = 1;
  uint64_t table_full_seen_ = 0;  // table_.counters().table_full already added to the stats
  uint64_t host_hits_ = 0;
  uint32_t polls_ = 0;
  // Bursts seen on host ports (wraps, skipping 0; QpEntry::burst_mark). Marks are cleared at the
  // end of each burst, so a wrapped number never matches a mark left by an old burst.
  uint16_t burst_no_ = 0;
  storm::QpEntry* marked_[kMaxBurst];
  size_t sweep_cursor_ = 0;
  // `show qp`: the query being answered (0: none), its scan position and its top-n heap.
  uint64_t answered_seq_ = 0;
  uint64_t scan_seq_ = 0;
  size_t scan_pos_ = 0;
  int scan_n_ = 0;
  QpSort scan_sort_ = QpSort::kBacklog;
  std::vector<QpRow> rows_;  // reserved to StormControl::kMaxTopQps at construction
  uint64_t hash_[kMaxBurst];
};

}  // namespace heddle::pipeline
