// File: control/collective/synthesize.h
//
// The search that needs no language model (docs/optiflow-compiler.md §6): it proposes candidate
// intents for a collective on a topology, compiles each (compiler.h) and keeps the one with the
// best predicted time. Candidates are the built-in intents (builtins.h) × rank orders × their
// parameters, plus whatever an external proposer (a person, a script, a model) passes in
// SynthesizeOptions::extra.
//
//   SynthesizeOptions o;
//   o.compile.slot_bytes = 64 << 20;
//   HEDDLE_ASSIGN_OR_RETURN(Synthesized s, Synthesize({Kind::kAllGather, 4}, topology, o));
//   // s.schedule is the fastest found; s.tried lists every candidate with its prediction.
//
// Search, in order, each candidate costing one unit of `budget`:
//   1. the extra candidates, as given;
//   2. every builtin with a form for the kind × each parameter value (the group size G of
//      hierarchical over the divisors of N) × two rank orders: identity and "greedy" (a
//      Hamiltonian ring that follows the widest links: from each start, the widest link to an
//      unvisited rank, ties to the lower latency, then the lower index; the start whose ring has
//      the widest bottleneck wins);
//   3. with what is left, local search over rank orders under `seed`: take the best candidate so
//      far, swap two ranks or reverse a segment of its order, keep the mutant if it is faster.
// Every candidate is checked (CheckIntent) before it is compiled, so a wrong proposal is recorded
// as failed, never chosen. Ties in predicted time go to the smaller name. The same inputs give
// the same result on every host.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "control/collective/collective.h"
#include "control/collective/compiler.h"
#include "control/collective/dsl.h"
#include "control/collective/intent.h"
#include "control/collective/schedule.h"
#include "control/collective/topology.h"

namespace heddle::collective {

struct Candidate {
  std::string name;  // unique among the candidates of one search, e.g. "ring order=greedy"
  std::string text;  // the intent DSL program
  ExpandOptions options;
};

struct SynthesizeOptions {
  CompileOptions compile;
  uint32_t budget = 200;  // candidates compiled at most (extra ones included)
  uint64_t seed = 1;
  std::vector<Candidate> extra;  // extra: e.g. from an external proposer
};

struct Synthesized {
  Candidate best;
  Intent intent;
  Schedule schedule;
  // name → predicted_s, in the order tried; +infinity for a candidate that failed to parse,
  // check or compile (the reasons are in `failures`).
  std::vector<std::pair<std::string, double>> tried;
  std::vector<std::pair<std::string, std::string>> failures;  // name → error message
};

absl::StatusOr<Synthesized> Synthesize(const Collective& c, const Topology& t,
                                       const SynthesizeOptions& o);

// The "greedy" rank order of the search (exposed for tests and tools).
std::vector<uint32_t> WidestRingOrder(const Topology& t);

}  // namespace heddle::collective
