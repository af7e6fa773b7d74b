// File: control/collective/schedule_io.h
//
// The schedule file: a Schedule (schedule.h) as JSON, versioned by `format_version`
// (docs/optiflow-schedule.md §2 describes every field). `heddle-flow compile` writes it,
// `heddle-flow verify` and the relay read it.
//
//   std::string json = ScheduleToJson(s);                     // one op per line
//   HEDDLE_ASSIGN_OR_RETURN(Schedule back, ScheduleFromJson(json));   // back == s
//   uint64_t id = ScheduleDigest(s);                          // ignores the timing predictions
//
// The reader is strict and streams (no document tree, so 100k-op files read in well under a
// second): an unknown format or format_version, a missing, duplicate, unknown or ill-typed field,
// a number out of its field's range, or anything after the closing brace is an InvalidArgument
// naming the line, the column and the field's path ("per_rank[2].ops[17].peer"). It checks the
// file's shape only; whether the schedule is right is VerifySchedule()'s (verifier.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "control/collective/schedule.h"

namespace heddle::collective {

inline constexpr std::string_view kScheduleFormatName = "heddle-schedule";
inline constexpr size_t kMaxScheduleFileBytes = size_t{1} << 30;

// Documented, versioned (format_version); doubles in their shortest round-trip form (a
// non-finite prediction is written as null and read back as NaN).
std::string ScheduleToJson(const Schedule& s);

// Strict: unknown version, missing/ill-typed fields → clear error (see above).
absl::StatusOr<Schedule> ScheduleFromJson(std::string_view json);

// Stable (FNV-1a 64 over a canonical little-endian byte form, the same on every host and build)
// over everything but the predictions (start_s, end_s, predicted_s) and the fields an op's kind
// does not use (a copy's peer, a send's dst, ...), which the file does not carry either.
uint64_t ScheduleDigest(const Schedule& s);

// The file forms; errors name the path.
absl::StatusOr<Schedule> ReadScheduleFile(const std::string& path);
absl::Status WriteScheduleFile(const std::string& path, const Schedule& s);

}  // namespace heddle::collective
