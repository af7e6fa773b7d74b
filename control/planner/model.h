// File: control/planner/model.h
//
// What the GeoMesh workload planner knows about one training worker (docs/planner.md §2): how
// fast it turns samples into tokens as a function of its batch size, how large a batch fits in its
// memory, and its sequence length. The solver (solver.h) and the planner (planner.h) take these
// specs; everything here is plain data plus validation, so the relay's gRPC service can fill the
// structs from its messages.
//
//   WorkerSpec w{.id = "us-east/gpu3",
//                .throughput = ThroughputModel::Saturating(/*peak_tokens_per_s=*/40000,
//                                                          /*half_batch=*/4),
//                .max_batch = 32};
//   if (absl::Status s = ValidateWorkerSpec(w, /*default_seq_len=*/2048); !s.ok()) ...
//
// Throughput models (tokens per second at batch size b, one worker):
//   kConstant    r(b) = peak                               (a single measured rate)
//   kSaturating  r(b) = peak · b / (b + half_batch)        (fixed per-step overhead: the step time
//                                                           is affine, t(b) = seq·(b + b½)/peak)
//   kTable       measured (batch, tokens/s) points, linear interpolation between them, through the
//                origin below the first point and flat beyond the last one (conservative).
// Every model must give a step time t(b) = b·seq_len / r(b) that does not fall as b grows: a larger
// batch never takes less time per step. The tables are checked for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace heddle::planner {

struct ThroughputPoint {
  double batch = 0;         // samples per step (> 0)
  double tokens_per_s = 0;  // measured at that batch (> 0)
};

struct ThroughputModel {
  enum class Kind { kConstant, kSaturating, kTable };

  static ThroughputModel Constant(double tokens_per_s);
  static ThroughputModel Saturating(double peak_tokens_per_s, double half_batch);
  static ThroughputModel Table(std::vector<ThroughputPoint> points);

  // Tokens per second at batch `batch` (> 0). Only meaningful on a validated model.
  double TokensPerSecond(double batch) const;

  Kind kind = Kind::kConstant;
  double peak_tokens_per_s = 0;         // kConstant, kSaturating
  double half_batch = 0;                // kSaturating (≥ 0)
  std::vector<ThroughputPoint> points;  // kTable, batch strictly increasing
};

struct WorkerSpec {
  // Unique among the planner's workers; printable ASCII, at most 128 bytes.
  std::string id;
  // The profiled speed. The planner's online estimator scales it by what the worker reports.
  ThroughputModel throughput;
  // The largest batch that fits in memory: either given directly (max_batch > 0) or computed as
  // floor((memory_bytes − fixed_bytes) / bytes_per_sample) from the three fields below.
  int64_t max_batch = 0;
  uint64_t memory_bytes = 0;
  uint64_t fixed_bytes = 0;       // weights, optimizer state, workspace
  uint64_t bytes_per_sample = 0;  // activations etc. per sample of seq_len tokens
  int64_t seq_len = 0;            // tokens per sample; 0 = the planner's default
  // A floor on this worker's tokens per round (its own token target); 0 = none.
  int64_t min_tokens_per_round = 0;
};

absl::Status ValidateThroughputModel(const ThroughputModel& m);

// Checks every field; the messages name the worker, the field, the value and the fix.
absl::Status ValidateWorkerSpec(const WorkerSpec& w, int64_t default_seq_len);

// The largest batch the memory admits (before rounding to the batch granularity). Call on a
// validated spec.
int64_t MemoryMaxBatch(const WorkerSpec& w);

// seq_len, or the default when the spec leaves it 0.
inline int64_t EffectiveSeqLen(const WorkerSpec& w, int64_t default_seq_len) {
  return w.seq_len > 0 ? w.seq_len : default_seq_len;
}

}  // namespace heddle::planner
