// File: dataplane/pipeline/pin_stage.h
//
// "pin-select": PIN and the load balancer beneath it in the pipeline (docs/pin.md). For every
// RoCEv2 packet arriving on a host-role port (the request direction) the worker's own
// lb::PinSelector chooses a path of the destination's path set: the packet leaves on the path's
// uplink (Burst::egress, which "port-fwd" then leaves alone), with the path's entropy written into
// the UDP source port (and the ICRC updated incrementally, no pass over the payload) or the IPv6
// flow label, and the path's next-hop MAC when it has one. Packets that are not RoCE, or whose
// destination has no path set, are left untouched for "port-fwd". It never drops.
//
//   PinSelectStage stage({.host_ports = hosts, .control = &ctl, .worker = 0, .config = lb});
//   stages.push_back(&stage);   // after "storm-tag", before "port-fwd"
//
// Feedback (docs/pin.md §3, §4): REPS recycles the paths whose packets were acknowledged unmarked,
// and the adaptive balancer and the least-loaded pin policy add penalties for marked and lost
// ones. The acknowledgements arrive from the uplinks carrying the requester's *local* QPN, while
// PIN's flows are keyed by the destination QPN the requests carry. The verbs shim's pair index
// (drivers/verbs/host_backlog.h, PairedDestQpn) joins the two: with a published host index (STORM
// with backlog_source host reads the shim's tables and publishes it here too) every ACK/NAK, READ
// response and CNP from an uplink is paired and applied to its flow, on this worker or, through
// LbControl's rings, on the worker that holds it. Without the index there is no join: REPS finds
// its caches empty and sprays at random (it degrades to RPS), and the adaptive balancer and the
// least-loaded policy see only the bytes this worker sent. Counted: join-no-index.
//
// Frames whose headers do not fit the first segment are left alone (counted by the selector as
// malformed); a chained mbuf whose ICRC lies in a later segment is rewritten with
// lb::RewriteHeaders() and its ICRC patched where it lies.
//
// One instance per worker: the selector (its flow table allocated here, off the hot path) is
// per-lcore state. Poll() reports the worker's RCU quiescent state, then applies parameters and a
// path table published since the last poll (lb_control.h explains the order), drains the
// feedback rings, sweeps idle flows a slice at a time and publishes the counters.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "dataplane/lb/icrc_update.h"
#include "dataplane/lb/pin.h"
#include "dataplane/lb/rewrite.h"
#include "dataplane/pipeline/lb_control.h"
#include "dataplane/pipeline/stage.h"

struct rte_mbuf;

namespace heddle::pipeline {

class PinSelectStage final : public Stage {
 public:
  // Nanoseconds on any monotonic clock. Tests inject one.
  using ClockNs = std::function<uint64_t()>;

  struct Options {
    std::bitset<kMaxPorts> host_ports;  // bit i set for every port index with role host
    LbControl* control = nullptr;       // required; outlives the stage
    int worker = 0;                     // this worker's index in `control`
    // The fixed part of the configuration (flow unit, entropy field, table sizes, idle time); the
    // run-time part comes from control->params(). The seed is mixed with the worker index.
    lb::LbConfig config;
    ClockNs clock;  // defaults to the TSC
    // Poll(): flow entries swept per housekeeping slice; slices run every `housekeep_every` polls
    // (8 entries a poll; the counters are published with each slice, as storm-tag's every 32).
    uint32_t sweep_slice = 256;
    uint32_t housekeep_every = 32;
    uint32_t drain_budget = 256;  // feedback messages taken from each inbound ring per poll
  };

  explicit PinSelectStage(const Options& options);

  const char* name() const override { return "pin-select"; }
  uint16_t Process(WorkerContext& ctx, Burst& b) override;
  void Poll(WorkerContext& ctx) override;

  const lb::PinSelector& selector() const { return *sel_; }

 private:
  uint64_t NowNs() const;
  void Apply(const LbParams& p);
  // Out of line: inline, its live values made the compiler spill the fast path's.
  [[gnu::noinline]] bool ChooseGeneral(const pkt::PacketDesc& d, rte_mbuf* m, uint64_t now_ns,
                                       lb::EntropyField field, lb::PathChoice* c,
                                       lb::RewriteResult* r);
  lb::RewriteResult RewriteGeneral(rte_mbuf* m, const pkt::PacketDesc& d, const lb::Path& path,
                                   lb::EntropyField field);
  void Feedback(const pkt::PacketDesc& d, const uint8_t* frame, uint64_t now_ns,
                const verbs::HostBacklogIndex* host);
  void FlushFeedback();
  void DrainFeedback();
  void Publish();
  // Adds path_counts_ to the published per-path counters and clears it.
  void FoldPathCounts();
  // The slots `table` counts in: per row (set id, the last row every later set) its largest set.
  void SetFoldRows(const lb::PathTable* table);
  void Add(PinStageCounter c, uint64_t n) {
    std::atomic<uint64_t>& v = stage_[static_cast<size_t>(c)];
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void Set(PinStageCounter c, uint64_t n) {
    stage_[static_cast<size_t>(c)].store(n, std::memory_order_relaxed);
  }

  Options o_;
  std::unique_ptr<lb::PinSelector> sel_;
  lb::IcrcDeltaCache icrc_cache_;  // this worker's memo of ICRC deltas
  uint64_t applied_generation_ = 0;
  double ns_per_tsc_ = 1.0;
  std::atomic<uint64_t>* stage_;         // LbControl's block for this worker
  std::atomic<uint64_t>* selector_out_;  // ditto, the selector's counters as last published
  std::atomic<uint64_t>* path_bytes_;
  std::atomic<uint64_t>* path_packets_;
  // Per (path set, path) slot as path_bytes_: packets << kPathPacketShift | bytes, one add per
  // packet, folded into path_bytes_ and path_packets_ when published (Publish(), every
  // housekeep_every polls), before a new path table, and before a slot's packet count could
  // overflow its 24 bits (kFoldPackets packets since the last fold).
  static constexpr int kPathPacketShift = 40;
  static constexpr uint64_t kOnePathPacket = uint64_t{1} << kPathPacketShift;
  static constexpr uint64_t kFoldPackets = uint64_t{1} << 23;
  std::unique_ptr<uint64_t[]> path_counts_;
  // SetFoldRows(): [begin, end) slot ranges of the rows the current table counts in.
  std::array<std::pair<uint16_t, uint16_t>, kLbReportedSets + 1> fold_ranges_{};
  size_t num_fold_ranges_ = 0;
  uint64_t unfolded_packets_ = 0;
  uint32_t polls_ = 0;
  size_t sweep_cursor_ = 0;
  // Feedback for flows other workers may hold, gathered over a burst and posted at its end.
  FeedbackMessage pending_[kMaxBurst];
  uint16_t n_pending_ = 0;
};

}  // namespace heddle::pipeline
