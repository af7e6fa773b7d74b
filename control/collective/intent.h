// File: control/collective/intent.h
//
// Data-movement intent, expanded: what the DSL (dsl.h) lowers a program to for a given rank
// count, and what the compiler (compiler.h) schedules. An intent says which chunk goes where,
// copied or reduced, and nothing about time, links, channels or pipelining — those are the
// compiler's (docs/optiflow.md §3).
//
// Moves run in program order: a move reads the source rank's slot as the moves before it left
// it and writes the destination rank's slot. The compiler keeps exactly the orderings that
// program order implies on each (rank, slot) — read after write, write after read, write after
// write — and is free to run everything else in parallel, to split chunks into pieces and to
// route a move over other ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control/collective/collective.h"

namespace heddle::collective {

enum class MoveKind : uint8_t {
  kCopy,    // dst.slot := src.slot
  kReduce,  // dst.slot := dst.slot ⊕ src.slot
};

struct Move {
  MoveKind kind = MoveKind::kCopy;
  uint64_t slot = 0;
  uint32_t src = 0;
  uint32_t dst = 0;
  // Where the statement that produced the move sits in the intent text (1-based; 0 = unknown),
  // so diagnostics about a move point at its source.
  uint32_t line = 0;
  uint32_t column = 0;

  friend bool operator==(const Move&, const Move&) = default;
};

struct Intent {
  std::string name;       // e.g. "ring"; from the program's `intent` line or the builtin
  Collective collective;  // ranks filled in by the expansion
  std::vector<Move> moves;
};

}  // namespace heddle::collective
