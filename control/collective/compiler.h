// File: control/collective/compiler.h
//
// The OptiFlow schedule compiler (docs/optiflow-compiler.md §2–§5): it turns an expanded intent
// (intent.h) into an executable per-rank schedule (schedule.h) for one topology (topology.h),
// deterministically, and predicts its completion time under an α–β cost model.
//
//   HEDDLE_ASSIGN_OR_RETURN(Schedule s, Compile(intent, topology, CompileOptions{}));
//   // s.predicted_s == *PredictTime(s, topology, s.slot_bytes)
//
// What it decides, and what it keeps:
//   - It keeps exactly the orderings the intent's program order implies per (rank, slot) (read
//     after write, write after read, write after write) and runs everything else in parallel.
//   - It splits every slot into `pieces` pieces (pipelining) and schedules each piece of each
//     move on its own; piece p of a move waits only for piece p of the moves it depends on.
//   - It routes each piece: over the direct link (or the shortest path through switches), over
//     other ranks (store-and-forward through a scratch slot) when that finishes earlier, or — for
//     a move whose source value another rank already holds identically — from that rank instead
//     ("source substitution").
//   - Every directed link carries one transfer at a time, in the order the scheduler commits
//     them (earliest-finish-time list scheduling, ties by move index).
//   - One channel per (src, dst) rank pair: every op uses channel 0.
//
// Cost model (per transfer of b = slot_bytes / pieces bytes over a path whose links have
// latencies l_i and bandwidths w_i; switches forward cut-through, ranks store and forward):
//   the links are busy for   d = α + b / min_i w_i        from the transfer's start,
//   the piece arrives at      start + d + Σ l_i.
// Local ops take no time. The same inputs give a byte-identical schedule on every host.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "control/collective/intent.h"
#include "control/collective/schedule.h"
#include "control/collective/topology.h"

namespace heddle::collective {

// One piece count the piece search tried (CompileDebug::candidates).
struct PieceCandidate {
  enum class Outcome {
    kScheduled,  // scheduled to completion: makespan is its time
    kRuledOut,   // not scheduled: its lower bound already reached the time to beat
    kAbandoned,  // stopped while scheduling: certain to reach the time to beat
  };
  uint32_t pieces = 0;
  double lower_bound = 0;  // the bound on its makespan the search computed
  double must_beat = 0;    // what it had to beat to be kept (infinity for the first)
  double makespan = 0;     // the scheduler's makespan (kScheduled only)
  Outcome outcome = Outcome::kScheduled;
  uint64_t committed = 0;  // pieces (of moves × pieces) it committed before it ended
  double seconds = 0;      // wall time it took (to schedule, rule out or abandon it)
};

// What tests and tools may ask of Compile() besides the schedule.
struct CompileDebug {
  // In: build every route the intent needs before each candidate is scheduled, last move and
  // last source first (the result must not depend on the order routes are built in).
  bool reverse_route_order = false;
  // Out (pieces = 0): every candidate the search tried, in order. The lower bound is computed
  // in the exhaustive search too, so that it can be compared with the makespan.
  std::vector<PieceCandidate> candidates;
};

struct CompileOptions {
  uint64_t slot_bytes = 1 << 20;  // bytes of one data slot (the size the schedule is tuned for)
  uint32_t pieces = 0;            // 0 = the compiler picks (pipelining depth)
  uint32_t max_pieces = 64;
  bool multi_hop = true;         // may route a move over other ranks / switches
  double per_op_overhead_s = 0;  // α added to every transfer on top of link latency
  // With pieces = 0: schedule every candidate piece count to completion instead of ruling out
  // early, by lower bounds, those that cannot be kept. The result is the same either way (the
  // tests compare them); this is the slow reference.
  bool exhaustive_piece_search = false;
  // With pieces = 0: how many threads schedule candidate piece counts at the same time. 0 = one
  // per hardware thread when the candidates add up to kThreadedSearchWork move-pieces or more,
  // else 1; 1 = the serial search on the calling thread; never more than there are candidates.
  // The chosen piece count and the schedule are those of the serial search (byte for byte);
  // only CompileDebug's record of how far a losing candidate got may differ.
  uint32_t threads = 0;
  CompileDebug* debug = nullptr;  // not owned; see CompileDebug
};

// Upper bound on pieces (explicit or searched) and on moves × pieces.
inline constexpr uint32_t kMaxCompilePieces = 1024;
inline constexpr uint64_t kMaxMovePieces = uint64_t{1} << 22;  // ~8M ops, ~1 GB
// When the compiler picks the piece count it keeps moves × pieces under this many.
inline constexpr uint64_t kAutoMovePieces = uint64_t{1} << 20;
// CompileOptions::threads = 0 searches on several threads from this many move-pieces (summed
// over the candidate piece counts) on: below it a thread costs more than it saves.
inline constexpr uint64_t kThreadedSearchWork = uint64_t{1} << 16;
inline constexpr uint32_t kMaxCompileThreads = 256;

// Errors: InvalidArgument for a bad intent (moves naming ranks or slots outside the collective, a
// move from a rank to itself), a topology of another rank count, an invalid topology or options,
// or a pair of ranks with no path (multi_hop = false allows only paths through switches).
absl::StatusOr<Schedule> Compile(const Intent& intent, const Topology& topology,
                                 const CompileOptions& options);

// The cost model's completion time of a schedule on a topology (what Compile() put in
// predicted_s; also used to re-price a schedule on another topology, e.g. measured speeds).
// Every link carries its transfers in the order of the schedule's start_s (then rank, then op
// index), which is the order Compile() committed them. slot_bytes 0 = the schedule's.
// `per_op_overhead_s` is the α the schedule is priced with (Compile()'s per_op_overhead_s).
// Ranks are matched by index; the topology must have the schedule's rank count. A schedule whose
// sends and receives do not match, or whose ops wait on each other, is FailedPrecondition.
absl::StatusOr<double> PredictTime(const Schedule& s, const Topology& t, uint64_t slot_bytes,
                                   double per_op_overhead_s = 0);

// As PredictTime, and also rewrites every op's start_s / end_s and s->predicted_s.
absl::Status RetimeSchedule(Schedule* s, const Topology& t, uint64_t slot_bytes,
                            double per_op_overhead_s = 0);

}  // namespace heddle::collective
