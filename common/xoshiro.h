// File: common/xoshiro.h
//
// xoshiro256** seeded through SplitMix64 (Blackman and Vigna): a small, fast generator whose
// sequence is fixed by its seed on every compiler and standard library, for code that must be
// deterministic under a seed (the balancers' choices, the simulator). Not for secrets.
//
//   heddle::Xoshiro256 g(seed);
//   uint64_t x = g.Next();
#pragma once

#include <cstdint>

namespace heddle {

class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) { Seed(seed); }
  void Seed(uint64_t seed) {
    for (uint64_t& w : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      w = z ^ (z >> 31);
    }
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace heddle
