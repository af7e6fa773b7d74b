// File: dataplane/pkt/internal/bytes.h
//
// Big-endian loads for the parser and the ICRC code. Callers check bounds first; these only read.
#pragma once

#include <cstdint>

namespace heddle::pkt::internal {

inline uint16_t Load16(const uint8_t* p) {
  return static_cast<uint16_t>(static_cast<uint16_t>(p[0]) << 8 | p[1]);
}
inline uint32_t Load24(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 16 | static_cast<uint32_t>(p[1]) << 8 | p[2];
}
inline uint32_t Load32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | p[3];
}

}  // namespace heddle::pkt::internal
