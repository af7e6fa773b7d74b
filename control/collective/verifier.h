// File: control/collective/verifier.h
//
// The schedule verifier: symbolic execution of a Schedule (schedule.h) against what its
// collective promises (collective.h). The compiler runs it on every schedule it emits,
// `heddle-flow verify` on a schedule file, and the relay before it executes one
// (docs/optiflow-schedule.md §3).
//
//   VerifyReport report;
//   absl::Status st = VerifySchedule(schedule, &report);   // first problem, or OK
//   for (const std::string& p : report.problems) ...       // all of them (capped)
//
// What it checks, in this order (a phase that finds problems stops the later ones that would
// only repeat them):
//   1. structure: version, collective, one op list per rank, pieces, every field of every op in
//      range (peers, slots of either buffer, pieces, chunks), deps strictly earlier and increasing;
//   2. matching: per (src, dst, channel) as many sends as receives, the k-th of each agreeing on
//      piece and chunk;
//   3. races: two ops of one rank that touch the same (buffer, slot, piece), one of them writing,
//      must be ordered by deps (transitively);
//   4. execution: a dataflow run of all ranks on symbolic values — reading a slot that holds
//      nothing, a contribution reduced twice, a piece carried under the wrong chunk, and a
//      deadlock (the ops that can never run, with one wait-for cycle named op by op);
//   5. promises: every promised (rank, slot) holds exactly the promised contributions, in every
//      piece.
// Sends are eager: a send reads its source when it starts and completes at once (the executor
// buffers what is in flight); a receive completes once its deps are done and its matching send
// has started.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "control/collective/schedule.h"

namespace heddle::collective {

// Schedules the verifier accepts at most (also the file reader's caps, schedule_io.h).
inline constexpr uint32_t kMaxSchedulePieces = 1u << 16;
inline constexpr uint64_t kMaxScratchSlots = uint64_t{1} << 24;

struct VerifyReport {
  uint64_t ops = 0;                   // all ops of all ranks
  uint64_t transfers = 0;             // sends (= receives in a matched schedule)
  uint64_t max_scratch = 0;           // the largest scratch_slots of any rank
  std::vector<std::string> problems;  // all problems found, in order (at most kMaxProblems)
};

inline constexpr size_t kMaxProblems = 100;

// Symbolic execution: buffers, deps, send/recv matching, races, deadlock, the promises. OK iff
// no problem was found; otherwise InvalidArgument with the first problem (and how many more).
absl::Status VerifySchedule(const Schedule& s, VerifyReport* report = nullptr);

// Per rank, per op: the symbolic value a send/recv/recv-reduce carries (the sorted contributing
// ranks of its `chunk`, of piece `piece`) — what an executor such as the relay needs to know
// which real data an op moves. Empty for local ops. An error (VerifySchedule's) when the schedule
// does not verify.
absl::StatusOr<std::vector<std::vector<std::vector<uint32_t>>>> OpValues(const Schedule& s);

// "rank 2 op 5 (recv-reduce from 1 ch 0 piece 3 -> data[7])": how problems name an op.
std::string DescribeOp(const Schedule& s, uint32_t rank, uint32_t op);

// "send", "recv", "recv-reduce", "copy", "reduce" (the schedule file's names).
const char* OpKindName(OpKind kind);

}  // namespace heddle::collective
