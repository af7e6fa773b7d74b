// File: tools/heddle-sim/lib/workload.h
//
// Traffic for the simulator: flow-size CDFs (the data files under tools/heddle-sim/data, each
// citing its source) with Poisson arrivals at a target load, the mix of RDMA operations, and
// incast.
//
//   HEDDLE_ASSIGN_OR_RETURN(Cdf cdf, LoadNamedCdf("websearch"));   // or LoadCdfFile(path)
//   Rng rng(seed);
//   uint64_t size = cdf.Sample(rng);
//
// A CDF file has one point per line, "size_bytes cumulative_percent", in increasing order from a
// point at 0 % to one at 100 %; '#' starts a comment. Sizes are uniform between points (the HPCC
// traffic generator's interpolation), so the mean is the sum of interval midpoints times their
// probabilities.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/heddle-sim/lib/rng.h"

namespace heddle::sim {

// The share of each RDMA operation among a Poisson workload's messages (weights, normalized).
struct OpMix {
  double write = 1, send = 0, read = 0;
};
// "write=0.6,read=0.3,send=0.1" (any order, each at most once, missing ones 0, not all 0).
absl::StatusOr<OpMix> ParseOpMix(std::string_view text);

class Cdf {
 public:
  // Points (size, cumulative probability in [0, 1]); checked by Make().
  static absl::StatusOr<Cdf> Make(std::vector<std::pair<double, double>> points, std::string name);

  // A size of at least 1 byte.
  uint64_t Sample(Rng& rng) const;
  double Mean() const { return mean_; }
  const std::string& name() const { return name_; }
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;
  double mean_ = 0;
  std::string name_;
};

// Parses the text of a CDF file; `what` names it in errors ("websearch.cdf:4: ...").
absl::StatusOr<Cdf> ParseCdf(std::string_view text, std::string_view what);
absl::StatusOr<Cdf> LoadCdfFile(const std::string& path);
// "websearch", "hadoop", "alistorage", "googlerpc" from the data directory (HEDDLE_SIM_DATA_DIR
// in the environment, else the source tree's tools/heddle-sim/data); anything else is a path.
absl::StatusOr<Cdf> LoadNamedCdf(std::string_view name_or_path);
std::string DataDir();

}  // namespace heddle::sim
