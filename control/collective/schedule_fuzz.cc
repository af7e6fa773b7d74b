// File: control/collective/schedule_fuzz.cc
//
// libFuzzer target for the schedule file reader and the verifier: any bytes must give a Schedule
// or an error status, never a crash or a hang; whatever parses must verify or fail to verify
// without crashing (VerifySchedule() and OpValues() agree), and its JSON must read back to the
// same JSON and the same digest.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "control/collective/schedule_io.h"
#include "control/collective/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace heddle::collective;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Schedule> s = ScheduleFromJson(text);
  if (!s.ok()) return 0;
  VerifyReport report;
  const absl::Status verified = VerifySchedule(*s, &report);
  if (verified.ok() != report.problems.empty()) std::abort();
  if (report.problems.size() > kMaxProblems) std::abort();
  if (OpValues(*s).ok() != verified.ok()) std::abort();
  const std::string json = ScheduleToJson(*s);
  absl::StatusOr<Schedule> back = ScheduleFromJson(json);
  if (!back.ok()) std::abort();
  // Compared as text: a NaN prediction (read from null) is not equal to itself.
  if (ScheduleToJson(*back) != json) std::abort();
  if (ScheduleDigest(*back) != ScheduleDigest(*s)) std::abort();
  return 0;
}
