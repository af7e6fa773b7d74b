// File: tools/heddle-sim/lib/rng.h
//
// The simulator's random numbers: xoshiro256** seeded through SplitMix64 (common/xoshiro.h),
// with the few draws the model needs. Not <random>'s distributions, so that a seed gives the same
// run with any standard library.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/xoshiro.h"

namespace heddle::sim {

class Rng : public Xoshiro256 {
 public:
  explicit Rng(uint64_t seed = 1) : Xoshiro256(seed) {}
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n); n >= 1.
  uint32_t Below(uint32_t n) {
    return static_cast<uint32_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  // Exponential with the given mean.
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
};

// A per-purpose stream: the same seed and stream id always give the same sequence.
inline uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed ^ (stream + 0x632BE59BD9B4E019ull) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace heddle::sim
