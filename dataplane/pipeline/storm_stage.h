// File: dataplane/pipeline/storm_stage.h
//
// "storm-tag": the STORM priority tagging stage (docs/storm.md). For every RoCEv2 packet arriving
// on a host-role port (the request direction) it looks up the QP in the worker's own QpTable,
// tracks the request, computes the level and rewrites the DSCP (and the VLAN PCP when the level
// has one). Packets from uplink ports and non-RoCE packets pass untouched. It never drops.
//
//   StormTagStage stage(cfg.storm.levels, {.capacity = 65536, .idle_ms = 10'000}, /*mtu=*/4096,
//                       host_port_mask);
//   stages.push_back(&stage);   // before "port-fwd"
//
// One instance per worker: the QP table (allocated here, off the hot path) and the tracker are
// per-lcore state, written only by the worker that runs the stage.
#pragma once

#include <bitset>
#include <cstdint>
#include <functional>

#include "dataplane/pipeline/stage.h"
#include "dataplane/storm/levels.h"
#include "dataplane/storm/qp_table.h"
#include "dataplane/storm/tracker.h"

namespace heddle::pipeline {

static_assert(kMaxStormLevels == storm::kMaxLevels);

class StormTagStage final : public Stage {
 public:
  // Milliseconds on any monotonic clock; read once per burst. Tests inject one.
  using ClockMs = std::function<uint32_t()>;

  // `host_ports` has bit i set for every port index with role host. `clock` defaults to the TSC.
  StormTagStage(const storm::LevelConfig& levels, const storm::QpTableOptions& table, uint32_t mtu,
                std::bitset<kMaxPorts> host_ports, ClockMs clock = nullptr);

  const char* name() const override { return "storm-tag"; }
  uint16_t Process(WorkerContext& ctx, Burst& b) override;

  const storm::QpTable& table() const { return table_; }
  const storm::RequestTracker& tracker() const { return tracker_; }

 private:
  uint32_t NowMs() const;

  storm::LevelConfig levels_;
  storm::QpTable table_;
  storm::RequestTracker tracker_;
  uint32_t mtu_;
  std::bitset<kMaxPorts> host_ports_;
  ClockMs clock_;
  uint64_t tsc_per_ms_ = 1;
  uint64_t table_full_seen_ = 0;  // table_.counters().table_full already added to the stats
  uint64_t hash_[kMaxBurst];
};

}  // namespace heddle::pipeline
