// File: dataplane/relay/round/slice_digest.h
//
// The digest a pull carries for each slice of a published round (docs/relay.md §7.3): CRC-32C
// over the round id, the slice index, every part's weight (IEEE double bits) and, per part in
// order, the frame's length and its own CRC-32C trailer, widened to 64 bits with the byte count.
// The relay computes it from the GlobalAggregate it serves; the client recomputes it over what it
// received and refuses to write a slice that does not match, so a mixed-up slice never reaches
// the model; each frame's content is bound by its trailer, which ParseFrame() checks.
//
// Why the trailer and not the frame's bytes: a CRC run over a message that ends in its own CRC
// ends in a state that depends only on the state before it and the length (the CRC residue), so
// chaining a CRC over whole frames would not see their content at all.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "common/crc32c.h"

namespace heddle::relay {

class SliceDigester {
 public:
  SliceDigester(uint64_t round_id, uint32_t slice) {
    uint8_t b[12];
    std::memcpy(b, &round_id, 8);
    std::memcpy(b + 8, &slice, 4);
    Add(b);
  }
  void AddWeight(double w) {
    uint8_t b[8];
    std::memcpy(b, &w, 8);
    Add(b);
  }
  // A validated frame (at least its 4-byte trailer): its length and its CRC-32C.
  void AddFrame(std::span<const uint8_t> frame) {
    uint8_t b[12] = {};
    const uint64_t n = frame.size();
    std::memcpy(b, &n, 8);
    if (n >= 4) std::memcpy(b + 8, frame.data() + n - 4, 4);
    Add(b);
  }
  void Add(std::span<const uint8_t> bytes) {
    crc_ = Crc32c(bytes, crc_);
    bytes_ += bytes.size();
  }
  uint64_t Digest() const { return (bytes_ << 32) ^ crc_; }

 private:
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace heddle::relay
