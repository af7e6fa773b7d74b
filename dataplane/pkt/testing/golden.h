// File: dataplane/pkt/testing/golden.h
//
// Test-only helpers shared by the pkt tests: hex text to bytes, and the golden frames more than one
// test checks. The frames come from scapy's contrib.roce (which computes their ICRC).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heddle::pkt::golden {

inline std::vector<uint8_t> Hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// RC RDMA WRITE first, IPv4, RETH dma_length 0x10000, 32 B payload, TOS 0x68 (DSCP 26), MigReq
// set; ICRC bytes 4b dc 95 75.
inline constexpr char kWriteFirst[] =
    "02000000000202000000000108004568005c12344000401113f30a0000010a000002c00112b70048000006"
    "40ffff000001230000001000007f00000010000000123400010000000102030405060708090a0b0c0d0e0f"
    "101112131415161718191a1b1c1d1e1f4bdc9575";

}  // namespace heddle::pkt::golden
