// File: dataplane/storm/storm_test_util.h
//
// Test helpers: build a RoCEv2 frame with pkt::BuildRoce and parse it, so tests feed the STORM
// code the same PacketDesc the dataplane would.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::storm::testing {

struct Packet {
  std::vector<uint8_t> frame;
  pkt::PacketDesc desc{};
};

inline Packet MakePacket(uint8_t opcode, uint32_t psn, uint32_t payload_len = 0,
                         uint32_t dma_length = 0, uint32_t qpn = 0x42) {
  pkt::FrameSpec f;
  pkt::RoceSpec r;
  r.opcode = opcode;
  r.psn = psn & 0xffffff;
  r.payload_len = payload_len;
  r.dma_length = dma_length;
  r.dest_qp = qpn;
  Packet p;
  p.frame = pkt::BuildRoce(f, r);
  EXPECT_EQ(pkt::Parse(p.frame.data(), p.frame.size(), &p.desc), pkt::ParseError::kOk);
  return p;
}

inline Packet MakeAck(uint32_t psn, uint8_t syndrome = 0, uint8_t opcode = pkt::op::kAcknowledge) {
  pkt::FrameSpec f;
  pkt::RoceSpec r;
  r.opcode = opcode;
  r.psn = psn & 0xffffff;
  r.syndrome = syndrome;
  r.payload_len = opcode == pkt::op::kAcknowledge ? 0 : 256;
  Packet p;
  p.frame = pkt::BuildRoce(f, r);
  EXPECT_EQ(pkt::Parse(p.frame.data(), p.frame.size(), &p.desc), pkt::ParseError::kOk);
  return p;
}

}  // namespace heddle::storm::testing
