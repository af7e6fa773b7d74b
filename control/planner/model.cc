#include "control/planner/model.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::planner {
namespace {

bool PositiveFinite(double x) { return std::isfinite(x) && x > 0; }

std::string Fmt(double x) { return absl::StrFormat("%g", x); }

}  // namespace

ThroughputModel ThroughputModel::Constant(double tokens_per_s) {
  ThroughputModel m;
  m.kind = Kind::kConstant;
  m.peak_tokens_per_s = tokens_per_s;
  return m;
}

ThroughputModel ThroughputModel::Saturating(double peak_tokens_per_s, double half_batch) {
  ThroughputModel m;
  m.kind = Kind::kSaturating;
  m.peak_tokens_per_s = peak_tokens_per_s;
  m.half_batch = half_batch;
  return m;
}

ThroughputModel ThroughputModel::Table(std::vector<ThroughputPoint> points) {
  ThroughputModel m;
  m.kind = Kind::kTable;
  m.points = std::move(points);
  return m;
}

double ThroughputModel::TokensPerSecond(double batch) const {
  switch (kind) {
    case Kind::kConstant:
      return peak_tokens_per_s;
    case Kind::kSaturating:
      return peak_tokens_per_s * batch / (batch + half_batch);
    case Kind::kTable: {
      const ThroughputPoint& first = points.front();
      if (batch <= first.batch) return first.tokens_per_s * batch / first.batch;
      for (size_t j = 1; j < points.size(); ++j) {
        const ThroughputPoint& a = points[j - 1];
        const ThroughputPoint& b = points[j];
        if (batch <= b.batch) {
          return a.tokens_per_s +
                 (b.tokens_per_s - a.tokens_per_s) * (batch - a.batch) / (b.batch - a.batch);
        }
      }
      return points.back().tokens_per_s;
    }
  }
  return 0;
}

absl::Status ValidateThroughputModel(const ThroughputModel& m) {
  switch (m.kind) {
    case ThroughputModel::Kind::kConstant:
      if (!PositiveFinite(m.peak_tokens_per_s)) {
        return absl::InvalidArgumentError(
            absl::StrCat("throughput: tokens_per_s ", Fmt(m.peak_tokens_per_s),
                         " must be a positive finite number (a measured rate in tokens/s)"));
      }
      return absl::OkStatus();
    case ThroughputModel::Kind::kSaturating:
      if (!PositiveFinite(m.peak_tokens_per_s)) {
        return absl::InvalidArgumentError(absl::StrCat("throughput: peak_tokens_per_s ",
                                                       Fmt(m.peak_tokens_per_s),
                                                       " must be a positive finite number"));
      }
      if (!std::isfinite(m.half_batch) || m.half_batch < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "throughput: half_batch ", Fmt(m.half_batch),
            " must be finite and >= 0 (the batch at which the rate is half the peak)"));
      }
      return absl::OkStatus();
    case ThroughputModel::Kind::kTable: {
      if (m.points.empty()) {
        return absl::InvalidArgumentError(
            "throughput: a table model needs at least one (batch, tokens_per_s) point");
      }
      if (m.points.size() > 4096) {
        return absl::InvalidArgumentError(
            absl::StrCat("throughput: ", m.points.size(), " table points; at most 4096"));
      }
      for (size_t j = 0; j < m.points.size(); ++j) {
        const ThroughputPoint& p = m.points[j];
        if (!PositiveFinite(p.batch) || !PositiveFinite(p.tokens_per_s)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "throughput: table point ", j, " (batch ", Fmt(p.batch), ", tokens_per_s ",
              Fmt(p.tokens_per_s), ") must have a positive finite batch and rate"));
        }
        if (j == 0) continue;
        const ThroughputPoint& q = m.points[j - 1];
        if (p.batch <= q.batch) {
          return absl::InvalidArgumentError(
              absl::StrCat("throughput: table batches must increase strictly; point ", j,
                           " has batch ", Fmt(p.batch), " after ", Fmt(q.batch)));
        }
        // Step time b·seq/r(b) must not fall as b grows; between two points it is monotone
        // (docs/planner.md §2), so checking the points is enough.
        if (p.batch * q.tokens_per_s < q.batch * p.tokens_per_s) {
          return absl::InvalidArgumentError(absl::StrCat(
              "throughput: table point ", j, " (batch ", Fmt(p.batch), ", ", Fmt(p.tokens_per_s),
              " tokens/s) gives a shorter step than point ", j - 1, " (batch ", Fmt(q.batch), ", ",
              Fmt(q.tokens_per_s),
              " tokens/s); a larger batch cannot take less time per step: re-measure or drop one"));
        }
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("throughput: unknown model kind");
}

namespace {

constexpr int64_t kMaxBatch = int64_t{1} << 20;
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
constexpr int64_t kMaxTokensPerStep = int64_t{1} << 30;

bool PrintableId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

int64_t MemoryMaxBatch(const WorkerSpec& w) {
  if (w.max_batch > 0) return w.max_batch;
  if (w.memory_bytes <= w.fixed_bytes || w.bytes_per_sample == 0) return 0;
  uint64_t b = (w.memory_bytes - w.fixed_bytes) / w.bytes_per_sample;
  return b > static_cast<uint64_t>(kMaxBatch) ? kMaxBatch : static_cast<int64_t>(b);
}

absl::Status ValidateWorkerSpec(const WorkerSpec& w, int64_t default_seq_len) {
  if (!PrintableId(w.id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker id \"", absl::CHexEscape(w.id),
                     "\" must be 1..128 printable ASCII characters without spaces"));
  }
  const std::string who = absl::StrCat("worker ", w.id, ": ");
  if (w.seq_len < 0 || w.seq_len > kMaxSeqLen) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, "seq_len ", w.seq_len, " out of range; use 1..", kMaxSeqLen, " or 0 for the default"));
  }
  const int64_t seq = EffectiveSeqLen(w, default_seq_len);
  if (seq <= 0 || seq > kMaxSeqLen) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "sequence length ", seq, " out of range 1..", kMaxSeqLen));
  }
  if (absl::Status s = ValidateThroughputModel(w.throughput); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(who, s.message()));
  }
  if (w.max_batch < 0 || w.max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "max_batch ", w.max_batch, " out of range 1..", kMaxBatch,
                     " (or 0 with memory_bytes and bytes_per_sample)"));
  }
  if (w.max_batch == 0) {
    if (w.memory_bytes == 0 || w.bytes_per_sample == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, "give max_batch, or memory_bytes and bytes_per_sample"));
    }
    if (MemoryMaxBatch(w) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, "memory too small for one sample: memory_bytes ", w.memory_bytes,
                       " minus fixed_bytes ", w.fixed_bytes, " leaves less than bytes_per_sample ",
                       w.bytes_per_sample));
    }
  }
  const int64_t max_batch = MemoryMaxBatch(w);
  if (max_batch * seq > kMaxTokensPerStep) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "max batch ", max_batch, " x seq_len ", seq, " = ", max_batch * seq,
                     " tokens per step exceeds 2^30; lower max_batch"));
  }
  if (w.min_tokens_per_round < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, "min_tokens_per_round ", w.min_tokens_per_round, " must be >= 0 (0 = none)"));
  }
  return absl::OkStatus();
}

}  // namespace heddle::planner
