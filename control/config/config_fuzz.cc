// File: control/config/config_fuzz.cc
//
// libFuzzer target for the configuration loader: any bytes must yield a Config or an error
// status, never a crash, a hang or an escaped yaml-cpp exception; a loaded config must render
// back to YAML that loads to the same config.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "control/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<heddle::config::Config> c = heddle::config::LoadString(text, "fuzz");
  if (!c.ok()) return 0;
  absl::StatusOr<heddle::config::Config> back =
      heddle::config::LoadString(heddle::config::ToYaml(*c), "rendered");
  if (!back.ok() || !(*back == *c)) std::abort();
  return 0;
}
