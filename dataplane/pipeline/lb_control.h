// File: dataplane/pipeline/lb_control.h
//
// The state the control plane shares with the workers' "pin-select" stages (docs/pin.md §9):
//   * the load-balancing parameters a running daemon may change (balancer kind, pin on/off, pin
//     policy, crossing rule, threshold, flowlet gap, REPS cache) and the path table, published by
//     RCU exactly as StormControl publishes STORM's levels: the control thread swaps a pointer to
//     an immutable LbParams and frees the old one after every worker passed a quiescent state
//     (rte_rcu_qsbr). A change appears to a worker between two bursts, whole;
//   * the host backlog index (drivers/verbs/host_backlog.h), published the same way, for the
//     feedback join: it pairs an ACK/NAK or READ response from the uplink with the destination QPN
//     of the requests it answers, which names the flow in PIN's table;
//   * the feedback rings (one single-producer/single-consumer ring per ordered pair of workers):
//     the worker that receives a reverse packet for a flow it does not hold posts the decoded
//     feedback to every other worker; the owner applies it in its poll loop. No worker ever
//     touches another's PinSelector;
//   * per-worker counters: the selector's (lb::LbCounter), the stage's own, and bytes and packets
//     per (path set, path index) for the first kLbReportedSets sets, each written by one worker
//     (relaxed load + store) and summed at scrape time.
//
// Why a worker may keep a table pointer between polls. The stage's PinSelector holds the table
// across bursts (it is the flows' reference for path indexes). Stage::Poll() therefore reports
// the quiescent state *first* and only then reads the parameters and hands a new table to the
// selector: a grace period that started after a publication ends only at a quiescent state whose
// token load saw that publication (acquire), so the read after it sees the new pointer and the
// selector drops the old table before any burst could use it again. The old table is freed only
// after that quiescent state was observed.
//
//   LbControl ctl(config, std::move(table), /*num_workers=*/2);
//   ...worker i, once per poll loop:   ctl.Quiescent(i); const LbParams& p = ctl.params();
//   ...control thread:                 HEDDLE_RETURN_IF_ERROR(ctl.Update(change));
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
#include "dataplane/lb/path.h"
#include "dataplane/lb/pin.h"
#include "dataplane/pipeline/rcu_domain.h"
#include "dataplane/pipeline/spsc_ring.h"

namespace heddle::verbs {
class HostBacklogIndex;
}

namespace heddle::pipeline {

// Path sets whose per-path bytes are counted (and exported); later sets are balanced all the
// same, their bytes count under "other".
inline constexpr int kLbReportedSets = 8;

// X(enumerator, "stable-name", "description"): the stage's own counters, beside the selector's.
#define HEDDLE_FOREACH_PIN_STAGE_COUNTER(X)                                                     \
  X(kRewritten, "rewritten", "packets whose entropy (and ICRC) or next-hop MAC was rewritten")  \
  X(kUnchanged, "unchanged", "packets that already carried their path's entropy")               \
  X(kRewriteRefused, "rewrite-refused", "rewrite refused (headers beyond the first segment)")   \
  X(kPinnedBytes, "pinned-bytes", "bytes (whole frames) sent on their flow's pinned path")      \
  X(kSprayedBytes, "sprayed-bytes", "bytes sent on the balancer's path")                        \
  X(kStatelessBytes, "stateless-bytes", "bytes of control packets and table-full fallbacks")    \
  X(kUntouchedPackets, "untouched", "request-direction packets left alone (not RoCE, no set)")  \
  X(kReversePackets, "reverse-packets", "RoCE packets from the uplinks looked at for feedback") \
  X(kJoinNoIndex, "join-no-index", "reverse packets with feedback but no host index to join")   \
  X(kJoinNoPair, "join-no-pair", "reverse packets the host index could not pair")               \
  X(kJoinedLocal, "joined-local", "feedback applied to this worker's flow")                     \
  X(kJoinedRemote, "joined-remote", "feedback another worker posted, applied here")             \
  X(kJoinNoFlow, "join-no-flow", "feedback for a flow no worker held")                          \
  X(kJoinRingFull, "join-ring-full", "feedback lost to a full ring")                            \
  X(kFlowsLive, "flows-live", "flow entries in use (gauge)")                                    \
  X(kFlowCapacity, "flow-capacity", "flow entries (gauge)")                                     \
  X(kFlowsEvicted, "flows-evicted", "idle flow entries emptied or replaced")                    \
  X(kRepsReused, "reps-reused", "REPS: packets sent on a recycled path")                        \
  X(kRepsExplored, "reps-explored", "REPS: packets sent on a random path (cache empty)")        \
  X(kRepsRecycled, "reps-recycled", "REPS: acknowledged-unmarked paths put in a cache")         \
  X(kGeneration, "generation", "parameter generation this worker applied (gauge)")

enum class PinStageCounter : uint8_t {
#define HEDDLE_PIN_STAGE_ENUM_(e, n, d) e,
  HEDDLE_FOREACH_PIN_STAGE_COUNTER(HEDDLE_PIN_STAGE_ENUM_)
#undef HEDDLE_PIN_STAGE_ENUM_
      kCount
};
inline constexpr int kNumPinStageCounters = static_cast<int>(PinStageCounter::kCount);
const char* PinStageCounterName(PinStageCounter c);
const char* PinStageCounterDescription(PinStageCounter c);

// What the workers read, immutable once published.
struct LbParams {
  lb::LbConfig config;  // only the fields PinSelector::Reconfigure() applies change at run time
  std::shared_ptr<const lb::PathTable> table;
  uint64_t generation = 0;
};

// Feedback one worker decoded for a flow another may hold.
struct FeedbackMessage {
  uint64_t flow_hash;  // lb::PinSelector::HashReverse()
  uint32_t request_qpn;
  uint32_t psn;
  uint8_t kind;  // lb::FeedbackKind
  uint8_t ce;
  uint8_t reserved[6];
};
static_assert(sizeof(FeedbackMessage) == 24);
using FeedbackRing = SpscRing<FeedbackMessage>;

// A change `set lb` makes; absent fields stay as they are.
struct LbChange {
  std::optional<lb::BalancerKind> balancer;
  std::optional<uint64_t> threshold_bytes;  // 0: one bandwidth-delay product
  std::optional<lb::PinPolicy> pin_policy;
  std::optional<bool> pin;
};

// Sums over workers.
struct LbTotals {
  std::array<uint64_t, lb::kNumLbCounters> selector{};
  std::array<uint64_t, kNumPinStageCounters> stage{};
  // [set][path]; set kLbReportedSets collects every later set by path index.
  std::array<std::array<uint64_t, lb::kMaxPaths>, kLbReportedSets + 1> path_bytes{};
  std::array<std::array<uint64_t, lb::kMaxPaths>, kLbReportedSets + 1> path_packets{};
  uint64_t selector_counter(lb::LbCounter c) const { return selector[static_cast<size_t>(c)]; }
  uint64_t stage_counter(PinStageCounter c) const { return stage[static_cast<size_t>(c)]; }
};

class LbControl {
 public:
  static constexpr size_t kDefaultRingSlots = 1024;

  // `config` must pass lb::ValidateLbConfig(); `table` may be null (nothing is balanced). Workers
  // 0..num_workers-1 start online. With more than one worker, allocates num_workers *
  // (num_workers - 1) feedback rings of `ring_slots` slots.
  LbControl(const lb::LbConfig& config, std::shared_ptr<const lb::PathTable> table, int num_workers,
            size_t ring_slots = kDefaultRingSlots);
  ~LbControl();
  LbControl(const LbControl&) = delete;
  LbControl& operator=(const LbControl&) = delete;

  int num_workers() const { return num_workers_; }

  // ---- worker side (lcore of worker `w`) ----
  // Valid until this worker's next Quiescent().
  const LbParams& params() const { return *params_.load(std::memory_order_acquire); }
  // nullptr when no index was published. Valid until this worker's next Quiescent().
  const verbs::HostBacklogIndex* host_backlog() const {
    return host_.load(std::memory_order_acquire);
  }
  void Quiescent(int w) { rcu_.Quiescent(w); }
  void Offline(int w) { rcu_.Offline(w); }
  void Online(int w) { rcu_.Online(w); }
  // The feedback ring from worker `from` (its only producer) to `to` (its only consumer); nullptr
  // when from == to or either is out of range.
  FeedbackRing* ring(int from, int to) {
    if (from == to || from < 0 || to < 0 || from >= num_workers_ || to >= num_workers_) {
      return nullptr;
    }
    return rings_[static_cast<size_t>(from) * num_workers_ + to].get();
  }
  // Counters of worker `w`, written only by it (relaxed load + store).
  std::atomic<uint64_t>* selector_counters(int w) { return workers_[w].selector.data(); }
  std::atomic<uint64_t>* stage_counters(int w) { return workers_[w].stage.data(); }
  // [set * kMaxPaths + path], set <= kLbReportedSets.
  std::atomic<uint64_t>* path_bytes(int w) { return workers_[w].path_bytes.data(); }
  std::atomic<uint64_t>* path_packets(int w) { return workers_[w].path_packets.data(); }

  // ---- control side (any thread; serialised internally) ----
  // Applies `change` to the parameters in force, validates, publishes; the old parameters are
  // freed after a grace period. On error nothing changes.
  absl::Status Update(const LbChange& change);
  // Publishes a new path table with the parameters in force (flows keep pinned paths the new
  // table still has).
  absl::Status SetPathTable(std::shared_ptr<const lb::PathTable> table);
  struct Current {
    lb::LbConfig config;
    std::shared_ptr<const lb::PathTable> table;
    uint64_t generation = 0;
  };
  Current current() const;
  uint64_t published_generation() const { return generation_.load(std::memory_order_relaxed); }
  void PublishHostBacklog(std::shared_ptr<const verbs::HostBacklogIndex> index);
  bool has_host_backlog() const { return host_.load(std::memory_order_relaxed) != nullptr; }

  LbTotals totals() const;
  uint64_t slow_grace_periods() const { return rcu_.slow_grace_periods(); }
  void set_grace_timeout(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    rcu_.set_grace_timeout(d);
  }

 private:
  struct alignas(64) WorkerBlock {
    std::array<std::atomic<uint64_t>, lb::kNumLbCounters> selector{};
    std::array<std::atomic<uint64_t>, kNumPinStageCounters> stage{};
    std::array<std::atomic<uint64_t>, (kLbReportedSets + 1) * lb::kMaxPaths> path_bytes{};
    std::array<std::atomic<uint64_t>, (kLbReportedSets + 1) * lb::kMaxPaths> path_packets{};
  };

  void PublishLocked(const lb::LbConfig& config, std::shared_ptr<const lb::PathTable> table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_workers_;
  RcuDomain rcu_;  // Retire under mu_
  std::unique_ptr<WorkerBlock[]> workers_;
  std::unique_ptr<std::unique_ptr<FeedbackRing>[]> rings_;  // [from * num_workers_ + to]
  std::atomic<const LbParams*> params_{nullptr};
  std::atomic<const verbs::HostBacklogIndex*> host_{nullptr};
  std::atomic<uint64_t> generation_{0};  // relaxed: for display

  mutable absl::Mutex mu_;
  std::shared_ptr<const LbParams> params_owner_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const verbs::HostBacklogIndex> host_owner_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heddle::pipeline
