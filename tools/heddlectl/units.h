// File: tools/heddlectl/units.h
//
// Sizes and lists as an operator types and reads them in heddlectl. Multiples are binary:
//
//   ParseSize("4K") == ParseSize("4KiB") == 4096;  ParseSize("1M") == 1048576
//   ParseSizeList("4K,64K,1MiB") == {4096, 65536, 1048576}
//   FormatSize(65536) == "64 KiB";  FormatSize(1536) == "1.5 KiB";  FormatSize(100) == "100 B"
//   FormatRange(0, 4096) == "≤ 4 KiB";  FormatRange(4096, 65536) == "4 KiB–64 KiB"
//
// "KB"/"MB" are refused: half the world reads them as powers of ten. Errors name the text and
// say what is accepted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heddle::api::cli {

// A byte count with an optional suffix B, K/KiB, M/MiB, G/GiB, T/TiB (case-insensitive).
absl::StatusOr<uint64_t> ParseSize(absl::string_view text);

// Comma-separated sizes; "" is the empty list. Spaces around items are ignored.
absl::StatusOr<std::vector<uint64_t>> ParseSizeList(absl::string_view text);

// Comma-separated integers, each in [min, max]; "" is the empty list. `what` names the values in
// errors ("dscp"). When `keep_is` is set, the word "keep" stands for that value (PCP -1).
absl::StatusOr<std::vector<int64_t>> ParseIntList(absl::string_view text, int64_t min, int64_t max,
                                                  absl::string_view what,
                                                  const int64_t* keep_is = nullptr);

// The largest binary unit the value reaches: exact ("64 KiB") when it is a whole multiple, else
// one decimal ("1.5 KiB").
std::string FormatSize(uint64_t bytes);

// A STORM level's remaining-size range (r_min, r_max], r_max 0 meaning unbounded.
std::string FormatRange(uint64_t r_min, uint64_t r_max);

}  // namespace heddle::api::cli
