// File: control/collective/topology_fuzz.cc
//
// libFuzzer target for the topology YAML (topology_io.h): any bytes must give a valid topology or
// an InvalidArgument — never a crash, a hang or an escaped yaml-cpp exception. An accepted
// topology must pass ValidateTopology, its canonical YAML must parse back to the same topology
// with the same digest, and a small one must compile a direct all-gather whose replayed time is
// the compiler's prediction.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "control/collective/compiler.h"
#include "control/collective/topology_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace heddle::collective;
  if (size > (1 << 16)) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Topology> t = ParseTopology(text);
  if (!t.ok()) {
    if (t.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (!ValidateTopology(*t).ok()) std::abort();
  if (t->links.size() > 4096) return 0;  // `default:` expands a few bytes into a full mesh
  absl::StatusOr<Topology> back = ParseTopology(TopologyToYaml(*t));
  if (!back.ok() || !(*back == *t) || TopologyDigest(*back) != TopologyDigest(*t)) std::abort();
  if (t->ranks >= 2 && t->ranks <= 6 && t->links.size() <= 256) {
    Intent in{"direct", {Kind::kAllGather, t->ranks, 1}, {}};
    for (uint32_t r = 0; r < t->ranks; ++r) {
      for (uint32_t d = 0; d < t->ranks; ++d) {
        if (d != r) in.moves.push_back(Move{MoveKind::kCopy, r, r, d});
      }
    }
    CompileOptions o;
    o.pieces = 2;
    absl::StatusOr<Schedule> s = Compile(in, *t, o);
    if (!s.ok()) std::abort();  // a valid topology connects every rank pair
    absl::StatusOr<double> p = PredictTime(*s, *t, 0);
    if (!p.ok() || *p != s->predicted_s) std::abort();
  }
  return 0;
}
