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
// Response join (docs/storm.md §6.1): with the host backlog source and a published host index,
// every ACK/NAK, atomic ACK and READ response towards the host is paired through the index with
// its QP's request entry (the index maps the response's source IP and BTH QPN, the requester's
// local QPN, to the request's destination QPN). If this worker holds the entry it applies the
// acknowledgement (RequestTracker::ApplyAck); otherwise it posts it to every other worker's ring
// (StormControl::ack_ring), and the worker that holds the entry applies it when it drains its
// rings in Poll(). No worker writes another's table. In per-message mode the joined acked_psn
// feeds the fabric ordering guard (§6.5, Options::fabric_guard).
//
// READ responses the host sends as responder (docs/storm.md §6.6) are tracked per stream in a
// side table (storm::ReadStreamTable) and levelled like a request of the stream's size: the READ
// request's RETH length when the READ, seen arriving from the uplink, was joined through the host
// index to the responses' key (on this worker, or posted to the others through
// StormControl::read_ring), else the bytes so far (unknown size). In per-message mode with
// fabric_guard, a QP's next READ response stream and its ACKs stay at or below the level of its
// last READ response for response_window_ms (no acknowledgement tells the responder when its
// responses left the fabric), and no response raises held_level while the QP's own requests are
// unacknowledged.
//
// One instance per worker: the QP table (allocated here, off the hot path), the tracker and the
// size histogram are per-lcore state, written only by the worker that runs the stage. Poll()
// reports the worker's RCU quiescent state, drains the response-join rings, sweeps idle QPs a
// slice at a time, answers `show qp` queries and publishes the table and tracker counters.
#pragma once

#include <bitset>
#include <cstdint>
#include <functional>
#include <vector>

#include "dataplane/pipeline/stage.h"
#include "dataplane/pipeline/storm_control.h"
#include "dataplane/storm/guard.h"
#include "dataplane/storm/levels.h"
#include "dataplane/storm/qp_table.h"
#include "dataplane/storm/read_streams.h"
#include "dataplane/storm/tracker.h"

namespace heddle::pipeline {

static_assert(kMaxStormLevels == storm::kMaxLevels);

class StormTagStage final : public Stage {
 public:
  // Milliseconds on any monotonic clock. Tests inject one.
  using ClockMs = std::function<uint32_t()>;

  struct Options {
    storm::QpTableOptions table;
    uint32_t mtu = 4096;                // RoCE path MTU (payload bytes per packet)
    std::bitset<kMaxPorts> host_ports;  // bit i set for every port index with role host
    storm::BacklogSource backlog_source = storm::BacklogSource::kEgressQueue;
    StormControl* control = nullptr;  // required; outlives the stage
    int worker = 0;                   // this worker's index in `control`
    ClockMs clock;                    // defaults to the TSC
    // Poll(): entries swept per housekeeping slice, and slices run every `housekeep_every` polls.
    // The defaults sweep 4 entries per poll (a 1 M-entry table every 262,144 polls) and publish
    // the counters every 32 polls, a few instructions per packet.
    uint32_t sweep_slice = 128;
    uint32_t housekeep_every = 32;
    uint32_t query_slice = 4096;  // entries scanned per poll while a `show qp` query is pending
    // Per-message mode with a response join: a request never takes a higher level than its QP's
    // packets still unacknowledged in the fabric (storm.fabric_guard, docs/storm.md §6.5).
    bool fabric_guard = true;
    uint32_t drain_budget = 256;  // messages taken from each inbound join ring per poll
    // READ responses the host sends (docs/storm.md §6.6): side-table entries (128 bytes each),
    // and how long (at least, in ms) a QP's later READ response streams and ACKs stay capped at
    // its last READ response's level (per-message mode with fabric_guard; 0: not capped).
    size_t read_streams = 16384;
    // The lean path for bursts of WRITE and SEND packets (storm_stage.cc). Tests turn it off to
    // compare it with the general path; the two give the same results.
    bool lean = true;
    uint32_t response_window_ms = 2;
  };

  // Unacknowledged packets beyond which the fabric guard assumes the join lost track of the QP
  // and stops capping it (dataplane/storm/guard.h).
  static constexpr uint32_t kMaxGuardedUnacked = storm::kMaxGuardedUnacked;

  explicit StormTagStage(const Options& options);

  const char* name() const override { return "storm-tag"; }
  uint16_t Process(WorkerContext& ctx, Burst& b) override;
  void Poll(WorkerContext& ctx) override;

  const storm::QpTable& table() const { return table_; }
  const storm::RequestTracker& tracker() const { return tracker_; }
  const storm::ReadStreamTable& read_streams() const { return reads_; }
  // Bursts the lean path took, and the one-packet requests it accounted (for tests).
  uint64_t lean_bursts() const { return lean_bursts_; }
  uint64_t lean_one_packet_requests() const { return lean_one_packet_; }

 private:
  uint32_t NowMs() const;
  uint64_t HostBacklog(storm::QpEntry& e, const uint8_t* frame, const pkt::PacketDesc& d,
                       const storm::TrackResult& t, const verbs::HostBacklogIndex* host,
                       bool every_packet);
  bool ResolvePair(const storm::QpKey& key, const verbs::HostBacklogIndex& host);
  storm::QpEntry* MemoEntry();
  void JoinResponse(const storm::QpKey& key, const pkt::PacketDesc& d,
                    const verbs::HostBacklogIndex& host);
  void JoinReadRequest(const storm::QpKey& key, const pkt::PacketDesc& d,
                       const verbs::HostBacklogIndex& host, uint32_t now_ms);
  void FlushJoins();
  void FlushReads();
  void DrainJoins();
  void DrainReads();
  uint8_t TagHostResponse(storm::QpEntry& e, const pkt::PacketDesc& d, uint64_t hash,
                          uint32_t qpn_dir, uint64_t backlog, uint8_t ceiling,
                          const storm::LevelConfig& L, uint32_t now_ms, bool joined);
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
  uint64_t lean_bursts_ = 0;
  uint64_t lean_one_packet_ = 0;
  struct JoinCounters {
    uint64_t joined_local = 0, joined_remote = 0, no_pair = 0, no_entry = 0, ring_full = 0,
             malformed = 0, fabric_guarded = 0;
  };
  JoinCounters join_;
  // READ responses the host sends as responder (§6.6): the side table, its tracker, the READ
  // join's counters (storm::ReadStreamTracker counts what the pending FIFOs made of the READs).
  storm::ReadStreamTable reads_;
  storm::ReadStreamTracker read_tracker_;
  struct ReadJoinCounters {
    uint64_t local = 0, remote = 0, no_pair = 0, no_entry = 0, ring_full = 0, malformed = 0,
             response_guarded = 0;
  };
  ReadJoinCounters rj_;
  size_t read_sweep_cursor_ = 0;
  // The last response joined in the current towards-host burst (a READ response stream is one QP
  // for many packets in a row): its key and what it joined to. Valid while join_memo_valid_.
  bool join_memo_valid_ = false;
  storm::QpKey join_memo_key_;
  uint64_t join_memo_hash_ = 0;
  uint32_t join_memo_qpn_dir_ = 0;
  storm::QpEntry* join_memo_entry_ = nullptr;  // nullptr: not in this worker's table
  bool join_memo_paired_ = false;
  // Acknowledgements for other workers, gathered over a burst (consecutive ones of one QP merged)
  // and posted to the rings at its end.
  AckMessage pending_joins_[kMaxBurst];
  uint16_t n_pending_joins_ = 0;
  // READ requests for other workers, gathered over a burst and posted at its end.
  ReadMessage pending_reads_[kMaxBurst];
  uint16_t n_pending_reads_ = 0;
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
  // QPs seen recently: key hash -> table slot, direct-mapped on the hash's low bits (4 KiB). A
  // hit skips the tag probe; the lookup verifies the slot, so a stale one only costs the probe.
  static constexpr uint32_t kRecentSlots = 256;
  struct RecentSlot {
    uint64_t hash = 0;  // 0: empty (HashKey is never 0)
    uint32_t slot = 0;
  };
  RecentSlot recent_[kRecentSlots];
};

}  // namespace heddle::pipeline
