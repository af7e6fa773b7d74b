// File: dataplane/relay/round/engine.h
//
// The region round engine (docs/relay.md §8): the region half of a heddle-relay gateway. It keeps
// the region's members (join by worker name → a stable sender id), collects each round's pushes
// (one validated frame per slice, held compressed), closes the round when every expected worker
// has pushed or at the push deadline, applies the missing-worker policy, aggregates slice by
// slice into one fp32 buffer and hands each slice to the WAN exchange (wan/exchange.h), and
// publishes the exchange's outcome to the workers that pull it.
//
//   HEDDLE_ASSIGN_OR_RETURN(std::unique_ptr<RoundEngine> e,
//                           RoundEngine::Create(options, std::move(exchange)));
//   HEDDLE_ASSIGN_OR_RETURN(JoinResult j, e->Join({.name = "gpu3"}));
//   HEDDLE_RETURN_IF_ERROR(e->Push(j.sender_id, round, std::move(frames)));
//   HEDDLE_ASSIGN_OR_RETURN(WorkerOutcome o, e->Pull(j.sender_id, round, absl::Now() + wait));
//   every second or so: e->Tick();           // deadlines and liveness, on the injected clock
//
// A round's life in the region:
//
//   collecting ──first push──▶ open ──all expected pushed / deadline──▶ closed
//        (expected = members now; deadline = now + push_timeout)          │ aggregation thread
//                                                                         ▼
//   resolved ◀──OutcomeCallback(r)── at the WAN ◀──FinishRegion── submitting slices
//
// * Round ids are global and start at 1. The engine collects one round at a time; round r+1
//   collects while r is being aggregated or is at the WAN, but r+1 is only submitted after r's
//   outcome came back (the exchange sees rounds in order).
// * Round r opens at its first push (once the region has round.min_workers members): its expected
//   workers are the members at that moment, and its deadline is push_timeout later. A worker that
//   joins after r opened starts with r+1.
// * A worker is included only if all its slices arrived and validated; a push is all or nothing.
//   At the close, missing workers are dropped: kRenormalize aggregates over the present workers
//   if their tokens reach min_token_fraction of the expected tokens (each missing worker's
//   expected tokens: its planned tokens, else its last round's, else the present workers' mean),
//   else the region contributes nothing (tokens = 0); kAbort gives tokens = 0 whenever anyone is
//   missing. Nothing partial is ever submitted: the region's slices all come from the same
//   included set, and a failure midway submits tokens = 0 (FinishRegion) instead.
// * Every pull of round r says whether this worker's push is in the published aggregate, and if
//   not, why (late, below quorum, region excluded, round aborted): the client then restores its
//   residual.
//
// Concurrency. One absl::Mutex (mu_) guards all the state: members, rounds, outcomes, stats.
// It is held only for bookkeeping — validating a push (ParseFrame is a CRC pass over the frame
// bytes, done before taking the lock), recording frames, deciding a close — never across the
// aggregation math, a WanExchange call or a wait. Three kinds of thread come in:
//   - RPC threads (Join/Push/Pull/Report/Leave/Status), any number. Pull waits on mu_ with
//     Mutex::AwaitWithDeadline for its round to resolve; the deadline is real time (the RPC's),
//     while every policy decision (push deadline, liveness) uses the injected clock.
//   - One aggregation thread owned by the engine. It takes the oldest closed round once the round
//     before it is resolved, copies out what it needs under mu_ (shared pointers to the frame
//     bytes, the included set, the weighting — the frames are immutable once pushed), and then
//     runs without the lock: Aggregator per slice into the single fp32 slice buffer it owns,
//     SubmitSlice, FinishRegion. It re-takes mu_ only to record progress and times.
//   - The exchange's thread, calling the outcome callback (possibly synchronously inside
//     FinishRegion on the aggregation thread, which holds no lock then). The callback takes mu_,
//     records the outcome, resolves the round (and any earlier round still pending — a gateway
//     cut off gets its missed rounds, in order, and a round published without this region ends
//     the region's collection of it at once), and wakes the pullers.
// Lock order: mu_ before the planner's own mutex (the engine calls the planner under mu_; the
// planner never calls back). The exchange is never called under mu_, and the exchange may call
// the callback from any thread, so the callback is the only entry that can race with Stop():
// the destructor first detaches the callback (SetOutcomeCallback(nullptr) returns after any
// delivery in progress, for the exchanges in this tree), then stops the aggregation thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "control/planner/planner.h"
#include "dataplane/relay/codec/aggregate.h"
#include "dataplane/relay/round/model_spec.h"
#include "dataplane/relay/wan/exchange.h"

namespace heddle::relay {

enum class MissingPolicy : uint8_t {
  kRenormalize = 0,  // aggregate over the present workers, if they hold the quorum share
  kAbort = 1,        // the region sits the round out when any expected worker is missing
};
const char* MissingPolicyName(MissingPolicy p);
absl::StatusOr<MissingPolicy> ParseMissingPolicy(std::string_view name);

struct RoundPolicy {
  // After a round's first push, how long the others have to push theirs.
  absl::Duration push_timeout = absl::Seconds(300);
  MissingPolicy missing = MissingPolicy::kRenormalize;
  // kRenormalize: the least share of the expected tokens the present workers must hold.
  double min_token_fraction = 0.5;
  Weighting weighting = Weighting::kFedNova;
  // A member with no call in progress and none for this long is dropped (as if it left).
  absl::Duration liveness_timeout = absl::Seconds(600);
  // Resolved rounds kept for pulls (and the status table).
  uint32_t keep_rounds = 16;
  uint32_t max_workers = 4096;
  // A round opens (fixes its expected set, starts its deadline) only once this many workers are
  // members: pushes that come earlier are held. For start-up, so the first round is not formed by
  // whoever joined first.
  uint32_t min_workers = 1;
};
absl::Status ValidateRoundPolicy(const RoundPolicy& p);

struct EngineOptions {
  uint32_t region_id = 1;
  ModelSpec spec;
  RoundPolicy policy;
  // The clock of every policy decision (deadlines, liveness, times in the stats).
  std::function<absl::Time()> now = [] { return absl::Now(); };
  // Optional, not owned, must outlive the engine: members are added and removed, reports
  // forwarded, the plan's tokens used as the expected tokens, the WAN time fed back.
  planner::Planner* planner = nullptr;
  // Whether an outcome that leaves this region out (or aborts) says the gateway kept the region's
  // submitted update in its own error-feedback residual (the WAN side's
  // RoundOutcome::retained_by_gateway): then the region's included workers must not restore
  // theirs, or the work would count twice. Null: read that field when the exchange header has it.
  std::function<bool(const RoundOutcome&)> retained_by_gateway;
};

struct JoinRequest {
  std::string name;          // the worker's stable identity in the region
  uint64_t spec_digest = 0;  // 0: not checked
  // For the planner (ignored without one); its id is set to `name`.
  std::optional<planner::WorkerSpec> planner_spec;
};

struct JoinResult {
  uint32_t sender_id = 0;
  uint64_t first_round = 0;  // the first round this worker can push
  bool rejoined = false;     // the name was a member already (a restarted worker)
};

// A pushed frame: the bytes (immutable, shared with the aggregation) and the validated view.
struct HeldFrame {
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  FrameView view;
};

// What a pull of round r returns to one worker.
struct WorkerOutcome {
  uint64_t round_id = 0;
  RoundOutcome::Kind kind = RoundOutcome::Kind::kAborted;
  absl::Status reason;                               // kAborted: why
  std::shared_ptr<const GlobalAggregate> aggregate;  // kPublished
  bool included = false;                             // this worker's push is in the aggregate
  // Not included, but the gateway kept the region's update (with this worker's push in it) in its
  // residual: the worker must leave its own residual as it is.
  bool retained = false;
  std::string exclusion;  // why not included, when it is not
};

struct RoundStats {
  uint64_t round_id = 0;
  std::string state;         // "collecting", "open", "closed", "wan", "published", "aborted"
  std::string close_reason;  // "complete", "deadline", "members left", "published without us"
  uint32_t expected = 0;
  uint32_t pushed = 0;
  uint32_t included = 0;
  uint64_t tokens = 0;  // the region's N_r (0: contributed nothing)
  uint64_t expected_tokens = 0;
  double tau_eff = 0;
  bool region_included = false;  // in the published aggregate
  std::string region_exclusion;  // why the region contributed nothing, if so
  double wait_s = 0;             // open → close (waiting for workers)
  double aggregate_s = 0;        // close → FinishRegion returned (aggregation and submission)
  double wan_s = 0;              // FinishRegion → outcome
  uint64_t bytes_in = 0;         // accepted frame bytes (LAN)
  uint64_t bytes_out = 0;        // bytes served to pulls (LAN)
  double compression_ratio = 0;  // included workers × fp32 model bytes ÷ their frame bytes
  uint32_t global_regions = 0;
  uint64_t digest = 0;
  // When the round opened, closed, was handed to the WAN (FinishRegion) and resolved: seconds
  // since the Unix epoch on the engine's clock; 0 = not yet.
  double opened_at_s = 0;
  double closed_at_s = 0;
  double finished_at_s = 0;
  double resolved_at_s = 0;
};

struct MemberStatus {
  std::string name;
  uint32_t sender_id = 0;
  bool member = false;  // false: left or dropped (kept so the name keeps its id)
  std::string left_reason;
  double idle_s = 0;  // since its last call (injected clock)
  uint64_t last_pushed_round = 0;
  uint64_t last_tokens = 0;
  uint64_t rounds_included = 0;
  uint64_t rounds_excluded = 0;
};

struct EngineStatus {
  uint32_t region_id = 0;
  uint64_t collecting_round = 0;
  uint64_t last_resolved_round = 0;
  uint64_t rounds_published = 0;
  uint64_t rounds_aborted = 0;
  std::vector<MemberStatus> members;  // by sender id
  std::vector<RoundStats> rounds;     // oldest first: the kept resolved ones, then in flight
  // Refused pushes by reason: "malformed", "wrong_round", "duplicate", "not_member",
  // "not_expected", "inconsistent".
  std::map<std::string, uint64_t> refused;
  uint64_t bytes_in_total = 0;
  uint64_t bytes_out_total = 0;
};

class RoundEngine {
 public:
  static absl::StatusOr<std::unique_ptr<RoundEngine>> Create(EngineOptions options,
                                                             std::unique_ptr<WanExchange> exchange);
  ~RoundEngine();
  RoundEngine(const RoundEngine&) = delete;
  RoundEngine& operator=(const RoundEngine&) = delete;

  const ModelSpec& spec() const { return options_.spec; }
  uint32_t region_id() const { return options_.region_id; }
  const RoundPolicy& policy() const { return options_.policy; }
  const planner::Planner* planner() const { return options_.planner; }
  // The total frame bytes of one worker's round (what a push stream may carry).
  uint64_t RoundFrameBytes() const { return round_frame_bytes_; }

  absl::StatusOr<JoinResult> Join(const JoinRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Leave(uint32_t sender_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Records activity (liveness) and checks membership: NotFound for an unknown sender id,
  // PermissionDenied for one that left or was dropped.
  absl::Status Touch(uint32_t sender_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Early check of a push about to stream: would round `round_id` take one from this worker now?
  absl::Status CheckPush(uint32_t sender_id, uint64_t round_id) ABSL_LOCKS_EXCLUDED(mu_);
  // All of the worker's frames of round `round_id`, one per slice in Slices() order. Validated
  // whole (ParseFrame, CheckFrameForSlice, equal token and step counts) before anything is kept.
  absl::Status Push(uint32_t sender_id, uint64_t round_id, std::vector<std::vector<uint8_t>> frames)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits (until `deadline`, real time) for round `round_id` to resolve. DeadlineExceeded when it
  // has not; OutOfRange when it is no longer kept; FailedPrecondition for a round not yet begun.
  // `cancelled`, if given, is polled (a cancelled RPC stops waiting).
  absl::StatusOr<WorkerOutcome> Pull(uint32_t sender_id, uint64_t round_id, absl::Time deadline,
                                     std::function<bool()> cancelled = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forwards a compute-time report to the planner (a no-op without one).
  absl::Status Report(uint32_t sender_id, const planner::WorkerReport& report)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The plan in force (FailedPrecondition without a planner or a plan).
  absl::StatusOr<planner::Plan> CurrentPlan() const;
  // The name a sender id was issued to (NotFound for an unknown id).
  absl::StatusOr<std::string> WorkerName(uint32_t sender_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Counts bytes served by a pull of round r.
  void AddBytesOut(uint64_t round_id, uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // Applies deadlines and liveness at options.now(). The service calls it every ~100 ms.
  void Tick() ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t collecting_round() const ABSL_LOCKS_EXCLUDED(mu_);
  EngineStatus Status() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until round r has resolved or the real-time deadline passes (for tests and tools).
  bool WaitResolved(uint64_t round_id, absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Member {
    std::string name;
    uint32_t sender_id = 0;
    bool member = true;
    std::string left_reason;
    absl::Time last_seen;
    int active_calls = 0;
    uint64_t last_pushed_round = 0;
    uint64_t last_tokens = 0;
    uint64_t rounds_included = 0;
    uint64_t rounds_excluded = 0;
    bool planned = false;  // added to the planner
  };
  struct WorkerPush {
    std::vector<HeldFrame> frames;  // per slice
    uint64_t tokens = 0;
    uint32_t inner_steps = 1;
    uint64_t bytes = 0;
  };
  enum class State : uint8_t { kCollecting, kOpen, kClosed, kSubmitting, kWan, kResolved };
  struct Round {
    uint64_t id = 0;
    State state = State::kCollecting;
    absl::Time opened_at, closed_at, finished_at, resolved_at;
    absl::Time deadline = absl::InfiniteFuture();
    std::set<uint32_t> expected;
    std::map<uint32_t, uint64_t> expected_tokens;  // per expected worker, fixed at close
    std::map<uint32_t, WorkerPush> pushes;  // by sender id: the aggregation order; freed once used
    std::set<uint32_t> pushed;              // who pushed (kept after the frames are freed)
    std::set<uint32_t> included;            // the region's included set, at close
    std::string region_exclusion;           // non-empty: the region contributes nothing
    std::map<uint32_t, std::string> exclusion;  // per worker, why not included
    RoundStats stats;
    // Outcome, when resolved.
    RoundOutcome::Kind kind = RoundOutcome::Kind::kAborted;
    absl::Status reason;
    std::shared_ptr<const GlobalAggregate> aggregate;
    bool region_in_aggregate = false;
    bool region_retained = false;  // left out, the gateway kept the region's update
  };

  RoundEngine(EngineOptions options, std::unique_ptr<WanExchange> exchange);
  void Start();
  absl::Status MemberCheckLocked(uint32_t sender_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RoundCheckLocked(const Member& m, uint64_t round_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Round& Collecting() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveMemberLocked(Member& m, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens the collecting round if it has a push and the region has min_workers members.
  void MaybeOpenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the collecting round if it is complete (or `force`, at its deadline).
  void MaybeCloseLocked(bool deadline_passed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseLocked(Round& r, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t ExpectedTokensLocked(const Member& m, const Round& r,
                                const std::optional<planner::Plan>& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnOutcome(uint64_t round_id, RoundOutcome outcome) ABSL_LOCKS_EXCLUDED(mu_);
  void ResolveLocked(Round& r, const RoundOutcome& outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AggregationLoop();
  // Aggregates and submits one closed round (no lock held).
  void SubmitRound(uint64_t round_id);
  WorkerOutcome OutcomeFor(const Round& r, uint32_t sender_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Count(const char* reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++refused_[reason]; }

  const EngineOptions options_;
  const std::vector<SliceRef> slices_;
  const uint64_t round_frame_bytes_;
  std::unique_ptr<WanExchange> exchange_;

  mutable absl::Mutex mu_;
  std::map<std::string, uint32_t, std::less<>> ids_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, Member> members_ ABSL_GUARDED_BY(mu_);  // every sender id ever issued
  uint32_t next_sender_ ABSL_GUARDED_BY(mu_) = 1;
  // In flight and the kept resolved rounds, by id. The collecting round is the largest key.
  std::map<uint64_t, Round> rounds_ ABSL_GUARDED_BY(mu_);
  uint64_t collecting_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t last_resolved_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rounds_published_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rounds_aborted_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> refused_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_in_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_out_total_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread aggregation_thread_;
};

}  // namespace heddle::relay
