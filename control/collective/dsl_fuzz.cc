// File: control/collective/dsl_fuzz.cc
//
// libFuzzer target for the intent DSL (dsl.h): any bytes, expanded for a few rank counts with
// small caps, must give an intent or an InvalidArgument "intent:LINE:COL: ..." with its error
// last in the diagnostics — never a crash, a hang or an out-of-range move. An accepted intent
// goes through CheckIntent (intent_check.h), which may reject it but must not crash, and the
// diagnostics must render as JSON without raw control bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "control/collective/dsl.h"
#include "control/collective/intent_check.h"

namespace {

void Check(std::string_view text, uint32_t ranks, bool shuffled) {
  using namespace heddle::collective;
  ExpandOptions o{.ranks = ranks, .max_moves = 1 << 16, .max_steps = 1 << 18};
  if (shuffled) {
    for (uint32_t i = 0; i < ranks; ++i) o.order.push_back(ranks - 1 - i);
  }
  std::vector<Diagnostic> diags;
  absl::StatusOr<Intent> intent = ParseIntent(text, o, &diags);
  if (intent.ok()) {
    const Collective& c = intent->collective;
    if (c.ranks != ranks || !Validate(c).ok()) std::abort();
    if (intent->moves.size() > o.max_moves) std::abort();
    const uint64_t slots = SlotCount(c);
    for (const Move& m : intent->moves) {
      if (m.src >= ranks || m.dst >= ranks || m.src == m.dst || m.slot >= slots) std::abort();
    }
    (void)CheckIntent(*intent);
  } else {
    if (intent.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (diags.empty() || !diags.back().error) std::abort();
    if (std::string(intent.status().message()).rfind("intent:", 0) != 0) std::abort();
  }
  for (const Diagnostic& d : diags) {
    if (d.code.empty()) std::abort();
  }
  for (char ch : DiagnosticsJson(diags)) {
    if (static_cast<unsigned char>(ch) < 0x20 && ch != '\n') std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Check(text, 1, false);
  Check(text, 5, true);
  Check(text, 8, false);
  return 0;
}
