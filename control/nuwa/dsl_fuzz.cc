// File: control/nuwa/dsl_fuzz.cc
//
// libFuzzer target for the fabric DSL: any bytes must yield a valid Fabric or an error status,
// never a crash, a hang or an escaped yaml-cpp exception; an accepted fabric must pass
// Validate() and its canonical YAML must parse back to the same fabric and render identically.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "control/nuwa/dsl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<heddle::nuwa::Fabric> f = heddle::nuwa::ParseFabricYaml(text, "fuzz.yaml");
  if (!f.ok()) return 0;
  if (!heddle::nuwa::Validate(*f).ok()) std::abort();
  const std::string canonical = heddle::nuwa::FabricToYaml(*f);
  absl::StatusOr<heddle::nuwa::Fabric> back =
      heddle::nuwa::ParseFabricYaml(canonical, "canonical.yaml");
  if (!back.ok() || !(*back == *f)) std::abort();
  if (heddle::nuwa::FabricToYaml(*back) != canonical) std::abort();
  return 0;
}
