// File: dataplane/storm/levels.cc
#include "dataplane/storm/levels.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace heddle::storm {

absl::Status ValidateLevelConfig(const LevelConfig& c) {
  if (c.levels < 1 || c.levels > kMaxLevels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "storm.levels: ", c.levels, " is out of range; use 1 to ", kMaxLevels, " (default 4)"));
  }
  for (int i = 0; i + 1 < c.levels; ++i) {
    if (c.cutoffs[i] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("storm.cutoffs: c_", i + 1, " is 0; with storm.levels = ", c.levels,
                       " give ", c.levels - 1, " cutoffs in bytes, each > 0"));
    }
    if (i > 0 && c.cutoffs[i] <= c.cutoffs[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "storm.cutoffs: c_", i + 1, " = ", c.cutoffs[i], " is not greater than c_", i, " = ",
          c.cutoffs[i - 1], "; cutoffs must be strictly increasing byte sizes"));
    }
  }
  if (!std::isfinite(c.beta) || c.beta < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("storm.beta: ", c.beta,
                     " is not a finite number >= 0; use 0 to ignore backlog, 1 default"));
  }
  for (int k = 0; k < c.levels; ++k) {
    if (c.dscp[k] > 63) {
      return absl::InvalidArgumentError(
          absl::StrCat("storm.dscp[", k, "]: ", c.dscp[k], " is not a DSCP; use 0 to 63"));
    }
    if (c.pcp[k] < -1 || c.pcp[k] > 7) {
      return absl::InvalidArgumentError(absl::StrCat(
          "storm.pcp[", k, "]: ", c.pcp[k], " is not a PCP; use 0 to 7, or -1 to keep the tag's"));
    }
  }
  if (c.control_level >= c.levels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "storm.control_level: ", c.control_level, " is not below storm.levels = ", c.levels,
        "; use 0 to ", c.levels - 1, " (default ", c.levels - 1, ", served first)"));
  }
  if (c.unknown_size == 0) {
    return absl::InvalidArgumentError(
        "storm.unknown_size: 0 is not a size; give the bytes a request of unknown size (a SEND "
        "without the host shim, a READ response stream without a join) is levelled as in "
        "per-message mode, 1 to 4294967295 (default 4294967295: the lowest level)");
  }
  return absl::OkStatus();
}

uint8_t ComputeLevel(const LevelConfig& c, uint64_t remaining, uint64_t backlog, uint32_t mtu) {
  const int k = std::clamp(c.levels, 1, kMaxLevels);
  int above = 0;
  if (backlog == 0 || c.beta == 0) {
    // No boost: R_eff = R, compared with the cutoffs as integers.
    while (above + 1 < k && remaining > c.cutoffs[above]) ++above;
    return static_cast<uint8_t>(k - 1 - above);
  }
  const double r = static_cast<double>(remaining);
  const double b = static_cast<double>(std::min<uint64_t>(backlog, c.backlog_max));
  const double denom = std::max(r, static_cast<double>(std::max<uint32_t>(mtu, 1)));
  // R_eff > c  <=>  R / (1 + beta*B/D) > c  <=>  R*D > c * (D + beta*B)   (D = max(R, MTU) > 0):
  // multiplications only, no division on the per-packet path.
  const double lhs = r * denom;
  const double scale = denom + c.beta * b;
  while (above + 1 < k && lhs > static_cast<double>(c.cutoffs[above]) * scale) ++above;
  return static_cast<uint8_t>(k - 1 - above);
}

uint8_t ComputeLevelCapped(const LevelConfig& c, QpEntry* entry, const TrackResult& track,
                           uint64_t backlog, uint32_t mtu, uint8_t ceiling) {
  const uint8_t level = std::min(
      ComputeLevel(c, RemainingBytes(*entry, track.sent_before, UnknownBytes(c)), backlog, mtu),
      ceiling);
  entry->level = level;
  entry->flags |= kEntryLevelValid;
  return level;
}

int SizeHistogram::BucketOf(uint64_t size) {
  if (size == 0) return 0;
  return std::min(kBuckets - 1, static_cast<int>(std::bit_width(size)) - 1);
}

SizeHistogram SizeHistogram::Snapshot() const {
  SizeHistogram out;
  for (int i = 0; i < kBuckets; ++i) {
    out.bytes_[i] = std::atomic_ref<const uint64_t>(bytes_[i]).load(std::memory_order_relaxed);
  }
  return out;
}

uint64_t SizeHistogram::Total() const {
  uint64_t t = 0;
  for (uint64_t b : bytes_) t += b;
  return t;
}

SizeHistogram HistogramDelta(const SizeHistogram& now, const SizeHistogram& before) {
  SizeHistogram d;
  for (int i = 0; i < SizeHistogram::kBuckets; ++i) {
    d.set_bytes(i, now.bytes(i) >= before.bytes(i) ? now.bytes(i) - before.bytes(i) : 0);
  }
  return d;
}

void AgeHistogram(SizeHistogram* aged, const SizeHistogram& fresh, double keep) {
  keep = std::clamp(keep, 0.0, 1.0);
  for (int i = 0; i < SizeHistogram::kBuckets; ++i) {
    const double old = static_cast<double>(aged->bytes(i)) * keep;
    aged->set_bytes(i, static_cast<uint64_t>(std::llround(old)) + fresh.bytes(i));
  }
}

std::optional<std::array<uint32_t, kMaxLevels - 1>> AutoCutoffs(const SizeHistogram& h,
                                                                int levels) {
  std::array<uint32_t, kMaxLevels - 1> out{};
  const int k = std::clamp(levels, 1, kMaxLevels);
  const double total = static_cast<double>(h.Total());
  if (total <= 0) return std::nullopt;
  if (k == 1) return out;
  // Walk the buckets from small to large; c_j sits where the cumulative bytes reach j/K of the
  // total. Inside bucket b (sizes 2^b..2^(b+1)) place it at 2^(b + fraction of that bucket).
  // When the target is within kSlack of a populated bucket's edge and empty buckets follow (or
  // precede) it, the cutoff goes to the geometric middle of that empty stretch instead: the split
  // is equal within kSlack either way, and a cutoff that hugs a populated size would move a few
  // requests of one mode to the other level on every sampling wobble.
  constexpr double kMaxCut = 4294967295.0 - kMaxLevels;
  constexpr double kSlack = 0.05;  // of total / K
  const double tol = kSlack * total / k;
  auto prev_nonempty = [&](int b) {
    for (int i = b - 1; i >= 0; --i)
      if (h.bytes(i) > 0) return i;
    return -1;
  };
  auto next_nonempty = [&](int b) {
    for (int i = b + 1; i < SizeHistogram::kBuckets; ++i)
      if (h.bytes(i) > 0) return i;
    return -1;
  };
  int j = 1;
  double cum = 0;
  for (int b = 0; b < SizeHistogram::kBuckets && j < k; ++b) {
    const double in = static_cast<double>(h.bytes(b));
    if (in <= 0) continue;
    while (j < k && cum + in >= total * j / k) {
      const double target = total * j / k;
      const int p = prev_nonempty(b);
      const int n = next_nonempty(b);
      double log2_cut;
      if (target - cum <= tol && p >= 0 && p + 1 < b) {
        log2_cut = (p + 1 + b) / 2.0;  // middle of the empty buckets p+1 .. b-1
      } else if (cum + in - target <= tol && n > b + 1) {
        log2_cut = (b + 1 + n) / 2.0;  // middle of the empty buckets b+1 .. n-1
      } else {
        log2_cut = b + std::clamp((target - cum) / in, 0.0, 1.0);
      }
      const double cut = std::min(std::exp2(log2_cut), kMaxCut);
      out[j - 1] = static_cast<uint32_t>(std::llround(std::max(cut, 1.0)));
      ++j;
    }
    cum += in;
  }
  for (; j < k; ++j) out[j - 1] = static_cast<uint32_t>(kMaxCut);  // rounding left a gap
  for (int i = 1; i + 1 < k; ++i) out[i] = std::max(out[i], out[i - 1] + 1);
  return out;
}

}  // namespace heddle::storm
