// File: common/text_match.h
//
// Helpers the YAML readers (control/config, control/nuwa/dsl) share for their error messages and
// strict scalars: an edit distance for "did you mean" on unknown keys and values, the nearest
// candidate within a likely typo, and a strict unsigned integer parse.
//
//   if (absl::string_view best = heddle::NearestKey(key, valid_keys); !best.empty()) ...
//   uint64_t v;
//   switch (heddle::ParseUint(text, &v, /*allow_hex=*/true)) { ... }
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace heddle {

// Levenshtein distance.
inline size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The candidate closest to `s` if it is a likely typo of it — one edit for keys of up to three
// characters, two for longer ones — else empty. The first of equally close candidates wins.
template <typename Range>
absl::string_view NearestKey(absl::string_view s, const Range& candidates) {
  absl::string_view best;
  size_t best_distance = std::min<size_t>(2, std::max<size_t>(1, s.size() / 2)) + 1;
  for (absl::string_view c : candidates) {
    const size_t d = EditDistance(s, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

enum class UintParse { kOk, kNegative, kNotInteger, kTooBig };

// Strict unsigned integer: decimal, or hexadecimal with 0x/0X when `allow_hex`; no sign, no
// fraction, no exponent, no surrounding text. A minus sign before what would parse is kNegative,
// before anything else kNotInteger.
inline UintParse ParseUint(absl::string_view s, uint64_t* v, bool allow_hex = false) {
  if (!s.empty() && s[0] == '-') {
    uint64_t ignored;
    return ParseUint(s.substr(1), &ignored, allow_hex) == UintParse::kNotInteger
               ? UintParse::kNotInteger
               : UintParse::kNegative;
  }
  int base = 10;
  if (allow_hex && (absl::StartsWith(s, "0x") || absl::StartsWith(s, "0X"))) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty()) return UintParse::kNotInteger;
  const unsigned char first = static_cast<unsigned char>(s[0]);
  if (base == 10 ? !absl::ascii_isdigit(first) : !absl::ascii_isxdigit(first)) {
    return UintParse::kNotInteger;
  }
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *v, base);
  if (ptr != s.data() + s.size()) return UintParse::kNotInteger;
  if (ec == std::errc::result_out_of_range) return UintParse::kTooBig;
  return ec == std::errc() ? UintParse::kOk : UintParse::kNotInteger;
}

}  // namespace heddle
