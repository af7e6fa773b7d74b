#include "control/planner/estimator.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::planner {
namespace {

bool InOpenUnit(double x) { return std::isfinite(x) && x > 0 && x <= 1; }

}  // namespace

absl::Status ValidateEstimatorConfig(const EstimatorConfig& c) {
  if (!InOpenUnit(c.alpha)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("estimator alpha %g must be in (0, 1]", c.alpha));
  }
  if (!InOpenUnit(c.dev_alpha)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("estimator dev_alpha %g must be in (0, 1]", c.dev_alpha));
  }
  if (!std::isfinite(c.initial_dev) || c.initial_dev <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("estimator initial_dev %g must be positive and finite", c.initial_dev));
  }
  if (!std::isfinite(c.min_dev) || c.min_dev <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("estimator min_dev %g must be positive and finite", c.min_dev));
  }
  if (!std::isfinite(c.reject_k) || c.reject_k < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "estimator reject_k %g must be finite and >= 1 (deviations before a sample is an outlier)",
        c.reject_k));
  }
  if (c.shift_after < 1 || c.shift_after > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("estimator shift_after ", c.shift_after, " out of range 1..1000"));
  }
  return absl::OkStatus();
}

ThroughputEstimator::Outcome ThroughputEstimator::Add(double ratio) {
  const double x = std::log(ratio);
  const double r = x - mean_;
  const double gate = config_.reject_k * std::max(dev_, config_.min_dev);
  if (std::abs(r) <= gate) {
    // The profile counts as one sample: the first samples are averaged with it (weights 1/2,
    // 1/3, ...) until that weight falls to alpha, then the EWMA takes over.
    const double w = std::max(config_.alpha, 1.0 / static_cast<double>(accepted_ + 2));
    mean_ += w * r;
    // The deviation has no prior worth keeping once samples arrive: it starts as their mean.
    const double wd = std::max(config_.dev_alpha, 1.0 / static_cast<double>(accepted_ + 1));
    dev_ += wd * (std::abs(r) - dev_);
    ++accepted_;
    run_ = 0;
    run_sign_ = 0;
    run_sum_ = 0;
    return Outcome::kAccepted;
  }
  const int sign = r > 0 ? 1 : -1;
  if (sign != run_sign_) {
    run_ = 0;
    run_sum_ = 0;
    run_sign_ = sign;
  }
  ++run_;
  run_sum_ += x;
  if (run_ >= config_.shift_after) {
    // A level shift: restart at the run's mean. The noise around the new level is taken to be
    // what it was (the winsorized updates above have already widened the gate a little).
    mean_ = run_sum_ / static_cast<double>(run_);
    ++shifts_;
    ++accepted_;
    run_ = 0;
    run_sign_ = 0;
    run_sum_ = 0;
    return Outcome::kShifted;
  }
  // The deviation learns from outliers too, clipped at the gate (winsorized): learning only from
  // accepted samples would bias it low, narrowing the gate until genuine noise is rejected.
  dev_ += config_.dev_alpha * (gate - dev_);
  ++rejected_;
  return Outcome::kRejected;
}

double ThroughputEstimator::Scale() const { return std::exp(mean_); }

}  // namespace heddle::planner
