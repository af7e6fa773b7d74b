// File: common/fnv1a.h
//
// FNV-1a, 64 bits: the digests that name a topology, a schedule or a fabric description (not a
// checksum against corruption: that is common/crc32c.h). Fields are fed little-endian and
// fixed-width, so a digest is the same on every host and build.
//
//   Fnv1a h;
//   h.U64(ranks);
//   h.Str(name);            // its length, then its bytes
//   uint64_t d = h.value();
//   uint64_t s = Fnv1a::Of("text");   // the plain FNV-1a of some bytes
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace heddle {

class Fnv1a {
 public:
  static constexpr uint64_t kOffset = 0xcbf29ce484222325ull;
  static constexpr uint64_t kPrime = 0x100000001b3ull;

  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ b[i]) * kPrime;
  }
  void U64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    Bytes(b, 8);
  }
  // The bits of `d`, -0 taken as +0.
  void Double(double d) {
    if (d == 0) d = 0;
    U64(std::bit_cast<uint64_t>(d));
  }
  // Length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
  void Str(std::string_view s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  uint64_t value() const { return h_; }

  static uint64_t Of(std::string_view s) {
    Fnv1a h;
    h.Bytes(s.data(), s.size());
    return h.value();
  }
  static uint64_t Of(const void* p, size_t n) {
    Fnv1a h;
    h.Bytes(p, n);
    return h.value();
  }

 private:
  uint64_t h_ = kOffset;
};

}  // namespace heddle
