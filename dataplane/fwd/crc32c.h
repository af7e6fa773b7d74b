// File: dataplane/fwd/crc32c.h
//
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF):
// the checksum Nüwa artifacts carry (artifact.h). Abseil 20220623 has no absl/crc, and zlib's
// crc32() is the IEEE polynomial, so this is a small slicing-by-8 table implementation; artifacts
// are at most a few MiB and are checked once per install, off the hot path.
//
//   uint32_t c = Crc32c(bytes);                  // whole buffer
//   uint32_t c2 = Crc32c(more, Crc32c(first));   // incremental: continue from a previous value
#pragma once

#include <cstdint>
#include <span>

namespace heddle::fwd {

// Crc32c("123456789") == 0xE3069283 (the standard check value).
uint32_t Crc32c(std::span<const uint8_t> bytes, uint32_t previous = 0);

}  // namespace heddle::fwd
