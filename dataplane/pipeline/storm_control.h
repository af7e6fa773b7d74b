// File: dataplane/pipeline/storm_control.h
//
// The state the control plane shares with the workers' "storm-tag" stages (docs/storm.md §3, §7):
//   * the level parameters (LevelConfig), published by RCU: the control thread swaps a pointer to
//     an immutable copy and frees the old one after every worker passed a quiescent state
//     (rte_rcu_qsbr; a worker reports once per poll loop, in Stage::Poll). No packet ever sees a
//     half-written configuration, and no worker waits for the control thread;
//   * the host backlog index read from the verbs shim's tables (storm.backlog_source: host),
//     published the same way;
//   * per-worker request-size histograms, from which AutoStep() derives equal-bytes cutoffs
//     (storm.cutoffs: auto);
//   * per-worker counters the stage publishes (QP table and tracker), and the `show qp` query:
//     the control thread posts a request, each worker answers it from its own table a slice per
//     poll loop, so the table is only ever read by the thread that writes it;
//   * the response join's rings (docs/storm.md §6.1): one bounded single-producer/single-consumer
//     ring per ordered pair of workers, allocated here, at setup. A worker that receives an
//     acknowledgement for a QP whose request entry is not in its own table posts it to every other
//     worker's ring; each worker drains its inbound rings in its poll loop and applies what it
//     finds in its own table. No worker ever writes another worker's table.
//   * the READ join's rings (docs/storm.md §6.6), one more per ordered pair of workers, the same
//     way: a worker that receives a READ request towards the host for a QP whose responses it does
//     not track posts (key hash, QPN/direction, PSN, size) to every other worker; the one that
//     sees the QP's outgoing packets queues it for the READ response stream it will send.
//
//   StormControl ctl(cfg.storm.levels, /*num_workers=*/2);
//   ...worker i, once per poll loop:  ctl.Quiescent(i);
//   ...worker i, per burst:           const storm::LevelConfig& l = ctl.levels();
//   ...control thread:                HEDDLE_RETURN_IF_ERROR(ctl.SetLevels(new_levels));
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/pipeline/rcu_domain.h"
#include "dataplane/pipeline/spsc_ring.h"
#include "dataplane/storm/levels.h"

namespace heddle::verbs {
class HostBacklogIndex;
}

namespace heddle::pipeline {

// One QP as `show qp` reports it.
struct QpRow {
  uint32_t worker = 0;
  uint32_t qpn = 0;
  uint8_t direction = 0;  // storm::Direction
  uint8_t kind = 0;       // storm::RequestKind of the current request
  uint8_t level = 0;      // level recorded for the current request
  uint8_t flags = 0;      // storm::EntryFlag bits
  uint32_t dst_ip4 = 0;   // as on the wire (network order); 0 for IPv6
  uint32_t size = 0;      // request size (valid if flags & kEntrySizeKnown)
  uint32_t sent = 0;
  uint64_t remaining = 0;     // R of the level formula
  uint32_t egress_held = 0;   // packets held in heddled
  uint32_t host_backlog = 0;  // bytes, from the verbs shim
  uint64_t backlog = 0;       // B of the level formula for the configured source, bytes
  uint32_t completed = 0;
  uint32_t idle_ms = 0;
  uint64_t key_hash = 0;
  // From the response join (docs/storm.md §6.1): the highest PSN acknowledged, and the packets
  // sent (or READ responses expected at the path MTU) after it. storm::kNoPsn when no response
  // was joined to the QP (no shim, no pair, a response-direction entry).
  uint32_t acked_psn = 0xffffffff;
  uint32_t unacked = 0xffffffff;
};

// An acknowledgement joined to a request entry this worker does not hold (docs/storm.md §6.1):
// the request-direction key's hash and QPN/direction word, and the PSN it acknowledges
// (storm::DecodeAck: a NAK's PSN - 1 already).
struct AckMessage {
  uint64_t key_hash;
  uint32_t qpn_dir;
  uint32_t acked_psn;
};
using AckRing = SpscRing<AckMessage>;

// A READ request towards the host, joined to the request-direction key of the READ responses the
// host will send (docs/storm.md §6.6): that key's hash and QPN/direction word, the READ's PSN (its
// first response's) and its RETH DMA length.
struct ReadMessage {
  uint64_t key_hash;
  uint32_t qpn_dir;
  uint32_t psn;
  uint32_t size;
  uint32_t reserved;
};
using ReadRing = SpscRing<ReadMessage>;

enum class QpSort : uint8_t { kBacklog, kRemaining, kIdle };
// True if `a` ranks before `b` in `show qp` order.
bool QpRowBefore(const QpRow& a, const QpRow& b, QpSort sort);

// Counters a stage publishes about its worker's table and tracker (relaxed stores, one writer).
struct StormWorkerCounters {
  uint64_t qp_live = 0, qp_capacity = 0, qp_inserted = 0, qp_table_full = 0, qp_evicted_idle = 0,
           qp_evicted_on_insert = 0;
  uint64_t requests_started = 0, requests_completed = 0, orphans = 0, abandoned = 0, duplicates = 0,
           psn_jumps = 0, bogus_length = 0, overrun = 0;
  uint64_t host_backlog_hits = 0;  // requests that found a host backlog entry
  // The response join (docs/storm.md §6.1). Per acknowledging response packet towards the host
  // (ACK/NAK, atomic ACK, READ response) while a host index is published: joined in this worker's
  // table, malformed (no AETH, reserved syndrome), or no pair in the host index. Per message
  // drained from another worker: applied (joined remotely) or not found here (no entry; a
  // single-worker miss is counted there too). Per message refused by a full ring: ring full.
  uint64_t resp_joined_local = 0, resp_joined_remote = 0, resp_no_pair = 0, resp_no_entry = 0,
           resp_ring_full = 0, resp_malformed = 0;
  // What the joined acknowledgements did to acked_psn (RequestTracker::ApplyAck).
  uint64_t acks_advanced = 0, acks_old = 0, acks_ahead = 0;
  // Requests started while their QP had packets unacknowledged in the fabric: their level was
  // capped at those packets' level by the fabric ordering guard (docs/storm.md §6.5), which
  // lowered it only if it was higher.
  uint64_t fabric_guarded = 0;
  // READ responses the host sends as responder (docs/storm.md §6.6). Streams started sized by a
  // joined READ, of unknown size, picked up mid-way (orphans), or sized after they started (late);
  // responses at an old PSN (duplicates), after the next one (jumps), streams whose Last was lost
  // (abandoned) or that sent more than their READ (overrun), First/Last/Only without AETH
  // (malformed); the side table's live entries, capacity, refused inserts and evictions; READ
  // responses and ACKs the response window lowered (guarded).
  uint64_t read_sized = 0, read_unknown = 0, read_orphans = 0, read_late = 0, read_duplicates = 0,
           read_psn_jumps = 0, read_abandoned = 0, read_overrun = 0, read_malformed = 0;
  uint64_t read_live = 0, read_capacity = 0, read_table_full = 0, read_evicted = 0;
  uint64_t response_guarded = 0;
  // READ requests towards the host (with the host index): queued on this worker's entry, queued
  // by another worker from its ring, no pair in the host index, no worker tracks the QP (drained
  // and not held here), ring full, no RETH (malformed); and what their pending FIFO made of them:
  // the oldest dropped for a newer one (full), never matched (stale: before the QP's next response
  // PSN), or arrived after their whole stream was sent (too late).
  uint64_t rreq_local = 0, rreq_remote = 0, rreq_no_pair = 0, rreq_no_entry = 0, rreq_ring_full = 0,
           rreq_malformed = 0, rreq_pending_full = 0, rreq_stale = 0, rreq_too_late = 0;
};

class StormControl {
 public:
  static constexpr int kMaxTopQps = 1000;
  // Slots of each response-join ring (16 bytes each).
  static constexpr size_t kDefaultAckRingSlots = 1024;

  // `levels` must pass storm::ValidateLevelConfig(). Workers 0..num_workers-1 start online: the
  // first grace period waits for each of them to poll once. With more than one worker, allocates
  // num_workers * (num_workers - 1) response-join rings of `ack_ring_slots` slots, and as many
  // READ-join rings of the same size.
  StormControl(const storm::LevelConfig& levels, int num_workers, bool auto_cutoffs = false,
               size_t ack_ring_slots = kDefaultAckRingSlots);
  ~StormControl();
  StormControl(const StormControl&) = delete;
  StormControl& operator=(const StormControl&) = delete;

  int num_workers() const { return num_workers_; }

  // ---- worker side (lcore of worker `w`) ----
  // Valid until this worker's next Quiescent().
  const storm::LevelConfig& levels() const {
    return params_.load(std::memory_order_acquire)->levels;
  }
  // Worker side only (dereferences the RCU-published object); other threads use
  // published_generation().
  uint64_t generation() const { return params_.load(std::memory_order_acquire)->generation; }
  // nullptr when no index was published. Valid until this worker's next Quiescent().
  const verbs::HostBacklogIndex* host_backlog() const {
    return host_.load(std::memory_order_acquire);
  }
  // Once per poll loop, holding no pointer obtained above.
  void Quiescent(int w) { rcu_.Quiescent(w); }
  // A worker that stops polling for good (or for long) goes offline so grace periods do not wait
  // for it; Online() before it reads again.
  void Offline(int w) { rcu_.Offline(w); }
  void Online(int w) { rcu_.Online(w); }
  storm::SizeHistogram* histogram(int w) { return &workers_[w].hist; }
  void PublishCounters(int w, const StormWorkerCounters& c);
  // The response-join ring from worker `from` (its only producer) to worker `to` (its only
  // consumer); nullptr when from == to or either is out of range.
  AckRing* ack_ring(int from, int to) {
    if (from == to || from < 0 || to < 0 || from >= num_workers_ || to >= num_workers_) {
      return nullptr;
    }
    return ack_rings_[static_cast<size_t>(from) * num_workers_ + to].get();
  }
  // The READ join's ring from `from` to `to` (docs/storm.md §6.6); same rules as ack_ring().
  ReadRing* read_ring(int from, int to) {
    if (from == to || from < 0 || to < 0 || from >= num_workers_ || to >= num_workers_) {
      return nullptr;
    }
    return read_rings_[static_cast<size_t>(from) * num_workers_ + to].get();
  }

  // The pending `show qp` request of worker `w`: a sequence number different from the last one
  // the worker answered means "scan your table and Answer()".
  struct QpQuery {
    uint64_t seq = 0;
    int n = 0;
    QpSort sort = QpSort::kBacklog;
  };
  QpQuery PendingQuery(int w) const;
  // Rows: at most query.n, best first. The buffer was reserved at construction: no allocation if
  // rows.size() <= kMaxTopQps (the stage keeps its own reserved buffer and passes it here).
  void Answer(int w, uint64_t seq, const std::vector<QpRow>& rows);

  // ---- control side (any thread; serialised internally) ----
  // Validates and publishes; old parameters are freed after a grace period (or later, if a worker
  // does not pass one within `grace_timeout`: never while a worker may still read them).
  // `auto_cutoffs`, when given, is stored under the same lock as the publication (AutoStep reads
  // it under that lock), so explicit cutoffs are never replaced by an AutoStep that still saw auto
  // on. `if_generation`, when given, makes it a compare-and-publish: Aborted if another
  // publication came first (the caller re-reads and retries).
  absl::Status SetLevels(const storm::LevelConfig& levels,
                         std::optional<bool> auto_cutoffs = std::nullopt,
                         std::optional<uint64_t> if_generation = std::nullopt);
  storm::LevelConfig current_levels() const;
  struct Current {
    storm::LevelConfig levels;
    uint64_t generation;
    bool auto_cutoffs;
  };
  Current current() const;  // one consistent read, for read-modify-publish
  // Any thread: the generation in force, without dereferencing the RCU-published object.
  uint64_t published_generation() const { return generation_.load(std::memory_order_relaxed); }
  void PublishHostBacklog(std::shared_ptr<const verbs::HostBacklogIndex> index);

  bool auto_cutoffs() const { return auto_.load(std::memory_order_relaxed); }
  void set_auto_cutoffs(bool on) { auto_.store(on, std::memory_order_relaxed); }
  // One auto-cutoffs interval: sums the workers' histograms, ages the totals by `keep`
  // (aged = aged * keep + fresh) and, when auto cutoffs are on and the equal-bytes cutoffs moved
  // by more than 1/8 of their value, publishes them. Returns whether it published.
  bool AutoStep(double keep);
  storm::SizeHistogram aged_histogram() const;
  uint64_t auto_publications() const { return auto_published_.load(std::memory_order_relaxed); }

  // Sum over workers (relaxed loads).
  StormWorkerCounters counters() const;

  // Top `n` (<= kMaxTopQps) QPs over all workers by `sort`. Waits up to `timeout` for every
  // worker to answer; DeadlineExceeded names the workers that did not (e.g. stopped).
  absl::StatusOr<std::vector<QpRow>> TopQps(int n, QpSort sort, absl::Duration timeout);

  // Grace periods that had not completed within grace_timeout (their objects are freed later).
  uint64_t slow_grace_periods() const { return rcu_.slow_grace_periods(); }
  void set_grace_timeout(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    rcu_.set_grace_timeout(d);
  }

 private:
  struct Params {
    storm::LevelConfig levels;
    uint64_t generation = 0;
  };
  struct alignas(64) WorkerBlock {
    storm::SizeHistogram hist;
    std::array<std::atomic<uint64_t>, sizeof(StormWorkerCounters) / sizeof(uint64_t)> counters{};
    std::atomic<uint64_t> query_seq{0};
    std::atomic<uint64_t> answered_seq{0};
    std::atomic<int> query_n{0};
    std::atomic<QpSort> query_sort{QpSort::kBacklog};
    std::vector<QpRow> rows;  // written by the worker before answered_seq (release)
  };

  void PublishParamsLocked(const storm::LevelConfig& levels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_workers_;
  RcuDomain rcu_;  // Retire/Reclaim under mu_
  std::unique_ptr<WorkerBlock[]> workers_;
  std::unique_ptr<std::unique_ptr<AckRing>[]> ack_rings_;    // [from * num_workers_ + to]
  std::unique_ptr<std::unique_ptr<ReadRing>[]> read_rings_;  // [from * num_workers_ + to]
  std::atomic<const Params*> params_{nullptr};
  std::atomic<const verbs::HostBacklogIndex*> host_{nullptr};
  std::atomic<bool> auto_{false};
  std::atomic<uint64_t> auto_published_{0};
  std::atomic<uint64_t> generation_{0};  // relaxed: a number for display, nothing hangs on it

  mutable absl::Mutex mu_;
  std::shared_ptr<const Params> params_owner_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const verbs::HostBacklogIndex> host_owner_ ABSL_GUARDED_BY(mu_);
  storm::SizeHistogram last_sum_ ABSL_GUARDED_BY(mu_);
  storm::SizeHistogram aged_ ABSL_GUARDED_BY(mu_);
  absl::Mutex query_mu_;  // one `show qp` at a time
  uint64_t query_seq_ ABSL_GUARDED_BY(query_mu_) = 0;
};

}  // namespace heddle::pipeline
