// File: control/collective/internal/test_schedules.h
//
// Hand-built schedules for tests of the verifier, the schedule file format and the tools that
// take schedules (independent of the compiler, so a compiler bug cannot hide a verifier bug):
//
//   Schedule s = RingAllGather(/*ranks=*/4, /*pieces=*/2);
//   RemoveOp(&s, 1, 3);   // seed a bug: drop an op, renumbering the deps of the ops after it
#pragma once

#include <cstdint>

#include "control/collective/schedule.h"

namespace heddle::collective::testing {

// All-gather over a ring: at step t rank r sends the chunks of rank r-t to r+1 and receives those
// of rank r-1-t from r-1; a forwarded piece waits for its receive. N ranks, K chunks per rank,
// P pieces per slot, channel 0.
Schedule RingAllGather(uint32_t ranks, uint32_t pieces, uint32_t chunks_per_rank = 1);

// All-reduce in two direct (full-mesh) phases: every rank sends each other rank's slots to their
// owner, who reduces them in arrival order (one after the other), then every owner sends its
// reduced slots to every rank. With `via_scratch` the first phase receives into scratch slots and
// reduces locally (copy-free reduce ops) instead of receive-reducing into the data slot.
Schedule DirectAllReduce(uint32_t ranks, uint32_t pieces, bool via_scratch = false,
                         uint32_t chunks_per_rank = 1);

// Removes op `op` of rank `rank`: deps on it are dropped, deps on later ops renumbered.
void RemoveOp(Schedule* s, uint32_t rank, uint32_t op);

// Index of the first op of `rank` of the given kind with the given peer (and, unless UINT64_MAX,
// chunk) at or after `from`; UINT32_MAX if none.
uint32_t FindOp(const Schedule& s, uint32_t rank, OpKind kind, uint32_t peer,
                uint64_t chunk = UINT64_MAX, uint32_t from = 0);

}  // namespace heddle::collective::testing
