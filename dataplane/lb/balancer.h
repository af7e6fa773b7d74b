// File: dataplane/lb/balancer.h
//
// The fine-grained load balancers beneath PIN (docs/pin.md §3), behind one interface: each picks a
// path index in a destination's path set for one packet of a flow, from at most the flow's entry
// (FlowEntry, two cache lines) and the worker's per-path state (PathLoads).
//
//   kind          per packet                                         state it uses
//   ecmp          hash of the flow key (no spraying: the baseline)   none
//   rps           uniformly random                                   the generator
//   round-robin   the flow's next path in turn                       rr_next
//   flowlet       a random new path after an idle gap > flowlet_gap  current_path, last_ns
//                 (LetFlow), else the flowlet's path
//   reps          a path recycled from an acknowledgement that came  the REPS cache, PSN history
//                 back unmarked, else a random one (REPS)
//   adaptive      the least loaded/congested of the flow's current   PathLoads, current_path
//                 path and two random ones (power of two choices)
//
//   Balancer b(params, seed, &loads);
//   uint8_t i = b.Pick({.flow = e, .set = set, .flow_hash = h, .now_ns = now, .gap_ns = gap});
//   b.OnPathFeedback(*e, set, i, PathSignal::kGood);   // from an acknowledgement, see pin.h
//
// One interface, no virtual call: every balancer class meets the LoadBalancer concept, and
// Balancer dispatches on its kind with a switch whose branch the CPU predicts perfectly (one kind
// per worker). Everything is deterministic under the seed: the same packets and feedback in the
// same order give the same paths.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "dataplane/lb/flow_table.h"
#include "dataplane/lb/internal/hash.h"
#include "dataplane/lb/path.h"

namespace heddle::lb {

#define HEDDLE_FOREACH_BALANCER(X)                                               \
  X(kEcmp, "ecmp", "per-flow hash: one path per flow, no spraying")              \
  X(kRps, "rps", "random packet spraying: a uniformly random path per packet")   \
  X(kRoundRobin, "round-robin", "each flow's packets take the paths in turn")    \
  X(kFlowlet, "flowlet", "LetFlow: a random new path after an idle gap")         \
  X(kReps, "reps", "REPS: reuse paths whose packets were acknowledged unmarked") \
  X(kAdaptive, "adaptive", "least loaded/congested of the current and two random paths")

enum class BalancerKind : uint8_t {
#define HEDDLE_LB_ENUM_(e, n, d) e,
  HEDDLE_FOREACH_BALANCER(HEDDLE_LB_ENUM_)
#undef HEDDLE_LB_ENUM_
      kCount
};
const char* BalancerKindName(BalancerKind k);
const char* BalancerKindDescription(BalancerKind k);
// "reps" -> kReps; the error lists the valid names.
absl::StatusOr<BalancerKind> ParseBalancerKind(std::string_view name);

// What feedback says about the path one packet took.
enum class PathSignal : uint8_t {
  kGood,       // acknowledged, no congestion seen
  kCongested,  // acknowledged but ECN-marked, or sent before a CNP (tainted)
  kLost,       // NAKed (a sequence error: lost, or overtaken by a later packet)
};

// Per worker, per (path set, path): bytes recently sent and a congestion penalty, both decaying
// by half every 2^kLoadEpochShift ns (65.5 µs, a few RTTs), updated lazily when touched. The
// adaptive balancer and PIN's least-loaded policy read them. Sets with ids >= max_sets share
// slots modulo max_sets (their loads mix; nothing breaks).
class PathLoads {
 public:
  static constexpr int kLoadEpochShift = 16;
  // Penalties in bytes-equivalent per packet: an ECN-marked (or tainted) packet, a lost one.
  static constexpr uint32_t kCongestedPenalty = 16 * 1024;
  static constexpr uint32_t kLostPenalty = 64 * 1024;

  explicit PathLoads(uint32_t max_sets);
  void Reset();

  void AddBytes(uint32_t set, uint32_t path, uint32_t bytes, uint64_t now_ns) {
    Slot& s = At(set, path, now_ns);
    s.load = Sat(uint64_t{s.load} + bytes);
  }
  void AddPenalty(uint32_t set, uint32_t path, uint32_t amount, uint64_t now_ns) {
    Slot& s = At(set, path, now_ns);
    s.penalty = Sat(uint64_t{s.penalty} + amount);
  }
  // load + penalty, decayed to now.
  uint64_t Score(uint32_t set, uint32_t path, uint64_t now_ns) {
    const Slot& s = At(set, path, now_ns);
    return uint64_t{s.load} + s.penalty;
  }
  uint64_t Load(uint32_t set, uint32_t path, uint64_t now_ns) { return At(set, path, now_ns).load; }
  uint64_t Penalty(uint32_t set, uint32_t path, uint64_t now_ns) {
    return At(set, path, now_ns).penalty;
  }

 private:
  struct Slot {
    uint32_t load;
    uint32_t penalty;
    uint32_t epoch;
  };
  static uint32_t Sat(uint64_t v) {
    return v > 0xffffffffu ? 0xffffffffu : static_cast<uint32_t>(v);
  }
  Slot& At(uint32_t set, uint32_t path, uint64_t now_ns) {
    // Set ids below max_sets_ (the usual case) skip the division: a 32-bit div per packet was
    // the largest single cost of Choose() in the forwarding benchmark.
    const uint32_t slot_set = set < max_sets_ ? set : set % max_sets_;
    Slot& s = slots_[slot_set * kMaxPaths + (path % kMaxPaths)];
    const uint32_t epoch = static_cast<uint32_t>(now_ns >> kLoadEpochShift);
    const uint32_t age = epoch - s.epoch;
    if (age != 0) {
      s.load = age >= 32 ? 0 : s.load >> age;
      s.penalty = age >= 32 ? 0 : s.penalty >> age;
      s.epoch = epoch;
    }
    return s;
  }
  uint32_t max_sets_;
  std::unique_ptr<Slot[]> slots_;
};

// Everything a balancer may look at for one packet.
struct PickContext {
  FlowEntry* flow = nullptr;  // the flow's entry (never null when a balancer is asked)
  PathSetView set;            // set.size >= 1
  uint64_t flow_hash = 0;
  uint64_t now_ns = 0;
  uint64_t gap_ns = 0;  // time since the flow's previous packet (~0 for its first)
};

struct BalancerParams {
  BalancerKind kind = BalancerKind::kReps;
  uint64_t flowlet_gap_ns = 50'000;
  uint32_t reps_cache_size = 8;  // 1..kMaxRepsCache
};

// The counters the balancers keep (REPS's cache).
struct BalancerCounters {
  uint64_t reps_recycled = 0;      // acknowledged-unmarked paths put in the cache
  uint64_t reps_not_recycled = 0;  // acknowledged paths left out: marked, tainted or lost
  uint64_t reps_overflow = 0;      // cache full: the oldest cached path dropped for a fresh one
  uint64_t reps_reused = 0;        // packets sent on a cached path
  uint64_t reps_explored = 0;      // packets sent on a random path (cache empty)
};

// What every balancer offers.
template <typename B>
concept LoadBalancer = requires(B b, const PickContext& c, FlowEntry& e, PathSetView s,
                                uint8_t path, PathSignal signal) {
  { b.Pick(c) } -> std::same_as<uint8_t>;
  { b.OnPathFeedback(e, s, path, signal) } -> std::same_as<void>;
};

class EcmpBalancer {
 public:
  [[gnu::always_inline]] uint8_t Pick(const PickContext& c) {
    return static_cast<uint8_t>(internal::FastRange(c.flow_hash, c.set.size));
  }
  void OnPathFeedback(FlowEntry&, PathSetView, uint8_t, PathSignal) {}
};

class RpsBalancer {
 public:
  explicit RpsBalancer(internal::Rng* rng) : rng_(rng) {}
  [[gnu::always_inline]] uint8_t Pick(const PickContext& c) {
    return static_cast<uint8_t>(rng_->Below(c.set.size));
  }
  void OnPathFeedback(FlowEntry&, PathSetView, uint8_t, PathSignal) {}

 private:
  internal::Rng* rng_;
};

class RoundRobinBalancer {
 public:
  [[gnu::always_inline]] uint8_t Pick(const PickContext& c) {
    FlowEntry& e = *c.flow;
    const uint8_t i = e.rr_next < c.set.size ? e.rr_next : 0;
    e.rr_next = static_cast<uint8_t>(i + 1u == c.set.size ? 0 : i + 1);
    return i;
  }
  void OnPathFeedback(FlowEntry&, PathSetView, uint8_t, PathSignal) {}
};

class FlowletBalancer {
 public:
  FlowletBalancer(internal::Rng* rng, uint64_t gap_ns) : rng_(rng), gap_ns_(gap_ns) {}
  [[gnu::always_inline]] uint8_t Pick(const PickContext& c) {
    FlowEntry& e = *c.flow;
    if (c.gap_ns > gap_ns_ || e.current_path >= c.set.size) {
      e.current_path = static_cast<uint8_t>(rng_->Below(c.set.size));
      ++flowlets_;
    }
    return e.current_path;
  }
  void OnPathFeedback(FlowEntry&, PathSetView, uint8_t, PathSignal) {}
  uint64_t flowlets() const { return flowlets_; }
  void set_gap_ns(uint64_t gap_ns) { gap_ns_ = gap_ns; }

 private:
  internal::Rng* rng_;
  uint64_t gap_ns_;
  uint64_t flowlets_ = 0;
};

// REPS (Bonato et al., arXiv 2407.21625): a path whose packet came back acknowledged without a
// congestion mark is put in a small per-flow cache and reused by the next packet; with the cache
// empty the packet explores a random path. Marked, tainted (sent before a CNP) and lost packets'
// paths are not recycled, so congested paths fall out of use within an RTT.
class RepsBalancer {
 public:
  RepsBalancer(internal::Rng* rng, uint32_t cache_size, BalancerCounters* counters)
      : rng_(rng), cache_size_(cache_size), counters_(counters) {}
  [[gnu::always_inline]] uint8_t Pick(const PickContext& c) {
    FlowEntry& e = *c.flow;
    while (e.reps_count != 0) {
      const uint8_t p = e.reps[e.reps_head];
      e.reps_head = static_cast<uint8_t>((e.reps_head + 1) % kMaxRepsCache);
      --e.reps_count;
      if (p < c.set.size) {
        ++counters_->reps_reused;
        return p;
      }
    }
    ++counters_->reps_explored;
    return static_cast<uint8_t>(rng_->Below(c.set.size));
  }
  void OnPathFeedback(FlowEntry& e, PathSetView set, uint8_t path, PathSignal signal) {
    if (signal != PathSignal::kGood || path >= set.size) {
      ++counters_->reps_not_recycled;
      return;
    }
    if (e.reps_count >= cache_size_) {  // full: drop the oldest, keep the freshest news
      e.reps_head = static_cast<uint8_t>((e.reps_head + 1) % kMaxRepsCache);
      --e.reps_count;
      ++counters_->reps_overflow;
    }
    e.reps[(e.reps_head + e.reps_count) % kMaxRepsCache] = path;
    ++e.reps_count;
    ++counters_->reps_recycled;
  }
  // A smaller cache applies as flows recycle: a flow's cache above it shrinks by one per recycled
  // path (the ring never holds more than kMaxRepsCache).
  void set_cache_size(uint32_t cache_size) { cache_size_ = cache_size; }

 private:
  internal::Rng* rng_;
  uint32_t cache_size_;
  BalancerCounters* counters_;
};

// Power of two choices with memory (as DRILL): the flow's current path and two random ones; the
// lowest PathLoads score (recent bytes + congestion penalty) wins, the current path on a tie.
class AdaptiveBalancer {
 public:
  AdaptiveBalancer(internal::Rng* rng, PathLoads* loads) : rng_(rng), loads_(loads) {}
  [[gnu::always_inline]] uint8_t Pick(const PickContext& c) {
    FlowEntry& e = *c.flow;
    const uint32_t n = c.set.size;
    uint32_t best = e.current_path < n ? e.current_path : rng_->Below(n);
    uint64_t best_score = loads_->Score(c.set.id, best, c.now_ns);
    for (int k = 0; k < 2; ++k) {
      const uint32_t p = rng_->Below(n);
      const uint64_t s = loads_->Score(c.set.id, p, c.now_ns);
      if (s < best_score) {
        best = p;
        best_score = s;
      }
    }
    e.current_path = static_cast<uint8_t>(best);
    return e.current_path;
  }
  // The penalties themselves go into PathLoads (pin.h does it for every balancer).
  void OnPathFeedback(FlowEntry&, PathSetView, uint8_t, PathSignal) {}

 private:
  internal::Rng* rng_;
  PathLoads* loads_;
};

static_assert(LoadBalancer<EcmpBalancer> && LoadBalancer<RpsBalancer> &&
              LoadBalancer<RoundRobinBalancer> && LoadBalancer<FlowletBalancer> &&
              LoadBalancer<RepsBalancer> && LoadBalancer<AdaptiveBalancer>);

// The balancer a worker runs: one of the above, chosen by kind.
class Balancer {
 public:
  // `rng` and `loads` outlive the balancer (the PinSelector owns all three).
  Balancer(const BalancerParams& params, internal::Rng* rng, PathLoads* loads);

  BalancerKind kind() const { return kind_; }
  // Owning worker, between bursts: another kind and parameters for the packets that follow. The
  // counters and every flow's state (REPS cache, flowlet and round-robin state) are kept: each
  // balancer checks the indexes it reads against the set, so state another kind left is harmless.
  void Reconfigure(const BalancerParams& params);
  [[gnu::always_inline]] uint8_t Pick(const PickContext& c) {
    switch (kind_) {
      case BalancerKind::kEcmp:
        return ecmp_.Pick(c);
      case BalancerKind::kRps:
        return rps_.Pick(c);
      case BalancerKind::kRoundRobin:
        return rr_.Pick(c);
      case BalancerKind::kFlowlet:
        return flowlet_.Pick(c);
      case BalancerKind::kReps:
        return reps_.Pick(c);
      case BalancerKind::kAdaptive:
      default:
        return adaptive_.Pick(c);
    }
  }
  void OnPathFeedback(FlowEntry& e, PathSetView s, uint8_t path, PathSignal signal) {
    if (kind_ == BalancerKind::kReps) reps_.OnPathFeedback(e, s, path, signal);
  }
  const BalancerCounters& counters() const { return counters_; }
  uint64_t flowlets() const { return flowlet_.flowlets(); }

 private:
  BalancerKind kind_;
  BalancerCounters counters_;
  EcmpBalancer ecmp_;
  RpsBalancer rps_;
  RoundRobinBalancer rr_;
  FlowletBalancer flowlet_;
  RepsBalancer reps_;
  AdaptiveBalancer adaptive_;
};

}  // namespace heddle::lb
