// File: control/collective/dsl.h
//
// The OptiFlow intent DSL: a small line-oriented language in which a person, a script or a model
// writes chunk-oriented data-movement intent — which slot goes from which rank to which, copied or
// reduced — and nothing about time, links or channels (docs/optiflow-dsl.md has the grammar).
//
//   intent ring
//   collective allgather
//   for s in 0..N-1 {
//     for r in 0..N {
//       copy chunks((r - s) % N) from r to (r + 1) % N
//     }
//   }
//
// ParseIntent() lexes, parses and expands a program for a rank count into an Intent (intent.h):
// the flat list of moves in program order. Every rank a program names is *virtual*: it is mapped
// through ExpandOptions::order to a physical rank, and so are the rank arguments of the slot
// helpers (chunk(v, j), chunks(v)), so one program gives e.g. a ring in any rank order.
//
// Errors — lexing, parsing and expansion alike (unknown names, ranks or slots out of range,
// division by zero, a failed `require`, too many moves) — come back as InvalidArgument
// "intent:LINE:COL: message" and, with machine-readable codes, in *diagnostics, which
// DiagnosticsJson() renders for whatever generated the text to act on. Hostile text never hangs
// or crashes the expansion: text size, nesting depth, loop iterations and moves are capped.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "control/collective/intent.h"

namespace heddle::collective {

struct Diagnostic {
  uint32_t line = 0, column = 0;  // 1-based; 0 = not tied to a place in the text
  std::string code;               // stable machine-readable id, e.g. "unknown-name"
  std::string message;
  bool error = true;  // false: a warning (e.g. "unused-param", "self-move"); expansion goes on

  friend bool operator==(const Diagnostic&, const Diagnostic&) = default;
};

struct ExpandOptions {
  uint32_t ranks = 0;  // N
  // Virtual → physical rank map (a permutation of 0..N-1); empty = identity. Programs speak of
  // virtual ranks; every move endpoint is mapped, and slot helpers such as chunk(v, j) map
  // their rank arguments too, so one program gives a ring in any rank order.
  std::vector<uint32_t> order;
  // Values for the program's declared parameters (`param G = 4`); naming an undeclared one is
  // an error. For broadcast and reduce, "root" (a physical rank) is always a parameter.
  std::map<std::string, int64_t> params;
  uint32_t chunks_per_rank = 0;  // 0 = what the program declares (default 1)
  uint64_t max_moves = uint64_t{1} << 24;
  // Statements executed plus loop turns; a program that runs longer fails ("too-many-steps").
  uint64_t max_steps = uint64_t{1} << 26;
};

// Caps on hostile input (docs/optiflow-dsl.md §Limits).
inline constexpr size_t kMaxIntentTextBytes = size_t{1} << 20;
inline constexpr uint32_t kMaxIntentNesting = 64;  // nested blocks and parentheses

// Parses and expands. On error: InvalidArgument whose message is the first error formatted
// "intent:LINE:COL: message"; all diagnostics (errors and warnings) appended to *diagnostics.
absl::StatusOr<Intent> ParseIntent(std::string_view text, const ExpandOptions& options,
                                   std::vector<Diagnostic>* diagnostics = nullptr);

// What a program declares, without expanding it: for tools and for synthesize (synthesize.h),
// which varies the parameters of candidate programs.
struct IntentInfo {
  std::string name;                 // the `intent` line
  Kind kind = Kind::kAllGather;     // the `collective` line
  uint32_t chunks_per_rank = 0;     // declared with `chunks K`; 0 = not declared (1)
  std::vector<std::string> params;  // declared parameters, in order (root is implicit)
};
// Lexes and parses only; errors (and warnings) as ParseIntent's.
absl::StatusOr<IntentInfo> InspectIntent(std::string_view text,
                                         std::vector<Diagnostic>* diagnostics = nullptr);

// A JSON array of {"severity": "error"|"warning", "line", "column", "code", "message"}, in the
// order given; strings escaped (control characters as \u00XX, invalid UTF-8 as U+FFFD).
std::string DiagnosticsJson(const std::vector<Diagnostic>& diagnostics);

}  // namespace heddle::collective
