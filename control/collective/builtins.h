// File: control/collective/builtins.h
//
// The built-in intents, as DSL texts (dsl.h): ring, direct (full mesh), tree (binomial),
// halving-doubling (recursive halving reduce-scatter + recursive doubling all-gather, the ranks
// beyond the largest power of two folded in) and hierarchical (two levels, group size param G).
// Each exists for the collective kinds where it makes sense; docs/optiflow-dsl.md lists them all
// with their texts. They are the starting points of synthesize (synthesize.h) and the reference
// algorithms schedules are compared with.
//
//   HEDDLE_ASSIGN_OR_RETURN(std::string text, BuiltinIntentText("ring", Kind::kAllReduce));
//   HEDDLE_ASSIGN_OR_RETURN(Intent intent, ParseIntent(text, {.ranks = 8}));
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "control/collective/collective.h"

namespace heddle::collective {

// "ring", "direct", "tree", "halving-doubling", "hierarchical".
std::vector<std::string> BuiltinNames();

// The DSL text of a builtin for a collective kind; NotFound if that builtin has no form for it.
absl::StatusOr<std::string> BuiltinIntentText(std::string_view name, Kind kind);

// The kinds a builtin has a form for (empty for an unknown name).
std::vector<Kind> BuiltinKinds(std::string_view name);

}  // namespace heddle::collective
