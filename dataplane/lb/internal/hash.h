// File: dataplane/lb/internal/hash.h
//
// The flow hash of dataplane/lb and the seeded generator of its balancers. Fixed functions,
// deterministic across runs and builds (unlike absl::Hash): tests and the simulator replay.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/xoshiro.h"

namespace heddle::lb::internal {

inline constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
inline constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
inline constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;
inline constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ull;

// 64x64 -> 128-bit multiply folded to 64 bits (wyhash's "mum").
inline uint64_t Mum(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}
// xxHash64's avalanche.
inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}
inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Hash of (source address, destination address, destination QPN); never 0. `v6`: 16-byte
// addresses, else 4-byte ones. Byte order is the host's (the hash never leaves the host).
inline uint64_t HashFlow(const uint8_t* src, const uint8_t* dst, bool v6, uint32_t qpn) {
  uint64_t h;
  if (!v6) {
    h = Mum((uint64_t{Load32(src)} << 32 | Load32(dst)) ^ kPrime1,
            (uint64_t{qpn & 0xffffff} << 32 | 4) ^ kPrime2);
  } else {
    const uint64_t a = Mum(Load64(src) ^ kPrime1, Load64(src + 8) ^ kPrime2);
    const uint64_t b = Mum(Load64(dst) ^ kPrime3, Load64(dst + 8) ^ kPrime4);
    h = Mum(a ^ b ^ kPrime3, (uint64_t{qpn & 0xffffff} << 32 | 16) ^ kPrime1);
  }
  h = Avalanche(h);
  return h == 0 ? 1 : h;
}

// The hash that places a flow's message number `m` (request mode's pinned path): the flow hash
// (already avalanched: HashFlow()) times the number spread over 64 bits, folded. Its high half, all
// FastRange() reads, is uniform over the paths for each flow and independent across flows (chi-
// square over thousands of messages per flow and path-set sizes 2..64 as for xxHash's avalanche
// of the same pair), in a third of the instructions: one multiply on the per-packet path.
inline uint64_t MessageHash(uint64_t h, uint64_t m) { return Mum(h, (m * kPrime1) ^ kPrime4); }
// MessageHash(h, m) from the message number's salt m × kPrime1 (mod 2^64), which a flow entry
// keeps and advances by one add per message (kMessageSaltStep): no multiply before the one that
// mixes it with the flow hash, on the chain from the entry's load to the pinned path's.
inline constexpr uint64_t kMessageSaltStep = kPrime1;
inline uint64_t MessageHashSalted(uint64_t h, uint64_t salt) { return Mum(h, salt ^ kPrime4); }

// Lemire's multiply-shift: a value in [0, n) from 32 well-mixed bits.
inline uint32_t FastRange(uint64_t x, uint32_t n) {
  return static_cast<uint32_t>((static_cast<uint64_t>(static_cast<uint32_t>(x >> 32)) * n) >> 32);
}

// The balancers' deterministic generator (common/xoshiro.h) with their range draw.
class Rng : public Xoshiro256 {
 public:
  explicit Rng(uint64_t seed) : Xoshiro256(seed) {}
  // Uniform in [0, n), n >= 1.
  uint32_t Below(uint32_t n) { return FastRange(Next(), n); }
};

}  // namespace heddle::lb::internal
