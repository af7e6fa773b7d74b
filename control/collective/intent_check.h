// File: control/collective/intent_check.h
//
// The postcondition of an expanded intent (intent.h), checked before anything is compiled: the
// moves are run in program order on symbolic values — per rank and slot, the set of ranks whose
// contributions it holds — starting from what the collective says each rank starts with
// (collective.h), and the end state is compared with what the collective promises.
//
//   HEDDLE_RETURN_IF_ERROR(CheckIntent(intent));
//
// Values are compact bitsets shared between the (rank, slot) pairs that hold them, and only
// touched pairs are stored, so all-to-all over 512 ranks costs memory in proportion to the moves.
#pragma once

#include "absl/status/status.h"
#include "control/collective/intent.h"

namespace heddle::collective {

// Runs the moves in program order on symbolic values; OK iff every promise holds and no
// contribution is reduced twice; the error names the first broken promise (rank, slot, what
// it holds vs what it must) or the offending move (with its line:col). A move that reads an
// empty slot, or names a rank or slot outside the collective, is an error too.
absl::Status CheckIntent(const Intent& intent);

}  // namespace heddle::collective
