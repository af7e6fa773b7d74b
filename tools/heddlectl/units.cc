// File: tools/heddlectl/units.cc
#include "tools/heddlectl/units.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace heddle::api::cli {
namespace {

struct Unit {
  const char* name;
  int shift;
};
constexpr Unit kUnits[] = {{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};

std::string SizeHelp(absl::string_view text) {
  return absl::StrCat("size \"", text,
                      "\": give bytes, optionally with a binary suffix: 4096, 4K, 4KiB, 1M, 1MiB, "
                      "1G");
}

std::vector<absl::string_view> SplitList(absl::string_view text) {
  std::vector<absl::string_view> items;
  if (absl::StripAsciiWhitespace(text).empty()) return items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    items.push_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

}  // namespace

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[digits]))) {
    ++digits;
  }
  if (digits == 0) return absl::InvalidArgumentError(SizeHelp(text));
  uint64_t value = 0;
  if (!absl::SimpleAtoi(s.substr(0, digits), &value)) {
    return absl::InvalidArgumentError(absl::StrCat("size \"", text, "\" is too large"));
  }
  const std::string suffix = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(digits)));
  int shift = -1;
  if (suffix.empty() || suffix == "b") shift = 0;
  if (suffix == "k" || suffix == "kib") shift = 10;
  if (suffix == "m" || suffix == "mib") shift = 20;
  if (suffix == "g" || suffix == "gib") shift = 30;
  if (suffix == "t" || suffix == "tib") shift = 40;
  if (shift < 0) {
    if (suffix == "kb" || suffix == "mb" || suffix == "gb" || suffix == "tb") {
      return absl::InvalidArgumentError(absl::StrCat(
          "size \"", text, "\" is ambiguous: write ", s.substr(0, digits),
          absl::AsciiStrToUpper(suffix.substr(0, 1)), " or ", s.substr(0, digits),
          absl::AsciiStrToUpper(suffix.substr(0, 1)), "iB for a binary multiple, or the bytes"));
    }
    return absl::InvalidArgumentError(SizeHelp(text));
  }
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return absl::InvalidArgumentError(absl::StrCat("size \"", text, "\" is too large"));
  }
  return value << shift;
}

absl::StatusOr<std::vector<uint64_t>> ParseSizeList(absl::string_view text) {
  std::vector<uint64_t> out;
  for (absl::string_view item : SplitList(text)) {
    absl::StatusOr<uint64_t> size = ParseSize(item);
    if (!size.ok()) return size.status();
    out.push_back(*size);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ParseIntList(absl::string_view text, int64_t min, int64_t max,
                                                  absl::string_view what, const int64_t* keep_is) {
  std::vector<int64_t> out;
  for (absl::string_view item : SplitList(text)) {
    int64_t value = 0;
    if (keep_is != nullptr && absl::AsciiStrToLower(item) == "keep") {
      value = *keep_is;
    } else if (!absl::SimpleAtoi(item, &value) || value < min || value > max) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " \"", item, "\": each value must be an ", "integer in ", min, "..",
                       max, keep_is != nullptr ? " (or keep)" : ""));
    }
    out.push_back(value);
  }
  return out;
}

std::string FormatSize(uint64_t bytes) {
  for (const Unit& unit : kUnits) {
    const uint64_t one = uint64_t{1} << unit.shift;
    if (bytes < one) continue;
    if (bytes % one == 0) return absl::StrCat(bytes >> unit.shift, " ", unit.name);
    return absl::StrFormat("%.1f %s", static_cast<double>(bytes) / static_cast<double>(one),
                           unit.name);
  }
  return absl::StrCat(bytes, " B");
}

std::string FormatRange(uint64_t r_min, uint64_t r_max) {
  if (r_max == 0) return r_min == 0 ? "any" : absl::StrCat("> ", FormatSize(r_min));
  if (r_min == 0) return absl::StrCat("≤ ", FormatSize(r_max));
  return absl::StrCat(FormatSize(r_min), "–", FormatSize(r_max));
}

}  // namespace heddle::api::cli
