// File: control/planner/estimator.h
//
// Online estimate of one worker's speed relative to its profiled throughput model
// (docs/planner.md §4). Every round the worker reports how long its inner steps took; the ratio
// measured tokens/s ÷ model tokens/s at the batch it ran is one sample of its speed scale. The
// estimator keeps an EWMA of the log of that ratio, rejects outliers (a sample further than
// reject_k robust deviations from the mean: a preempted step, a checkpoint write, a GC pause), and
// accepts a persistent change of level (shift_after consecutive outliers on the same side: thermal
// throttling, a noisy neighbour, a driver change) by restarting at their mean.
//
//   ThroughputEstimator est(EstimatorConfig{});
//   est.Add(measured_tokens_per_s / model_tokens_per_s);   // returns what it did with the sample
//   double scale = est.Scale();                            // 1.0 until the first sample
//
// Not thread-safe; the Planner holds it under its mutex.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace heddle::planner {

struct EstimatorConfig {
  double alpha = 0.2;         // EWMA weight of a new accepted sample (log scale); the first
                              // samples get 1/2, 1/3, ... (the profile counts as one) until
                              // that falls to alpha
  double dev_alpha = 0.1;     // EWMA weight of |sample − mean| (clipped at the gate) in the
                              // deviation estimate; 1, 1/2, 1/3, ... for the first samples
  double initial_dev = 0.25;  // deviation before any sample (the gate around the profile)
  double min_dev = 0.02;      // floor on the deviation, so low-noise workers keep a gate
  double reject_k = 4.0;      // outlier gate: |log sample − mean| > reject_k · max(dev, min_dev)
  int64_t shift_after = 3;    // this many consecutive same-side outliers are a level shift
};

absl::Status ValidateEstimatorConfig(const EstimatorConfig& c);

class ThroughputEstimator {
 public:
  enum class Outcome { kAccepted, kRejected, kShifted };

  explicit ThroughputEstimator(const EstimatorConfig& config) : config_(config) {}

  // `ratio` is measured ÷ modelled rate; it must be positive and finite (the caller validates).
  Outcome Add(double ratio);

  // The current speed scale, exp(mean of log ratios); 1.0 before any sample.
  double Scale() const;
  // The robust deviation of log samples (about the relative noise of a round's measurement).
  double Deviation() const { return dev_; }
  int64_t accepted() const { return accepted_; }
  int64_t rejected() const { return rejected_; }
  int64_t shifts() const { return shifts_; }

 private:
  EstimatorConfig config_;
  double mean_ = 0;  // log of the scale
  double dev_ = config_.initial_dev;
  int64_t accepted_ = 0;
  int64_t rejected_ = 0;
  int64_t shifts_ = 0;
  // The current run of outliers on one side of the mean.
  int64_t run_ = 0;
  int run_sign_ = 0;
  double run_sum_ = 0;
};

}  // namespace heddle::planner
