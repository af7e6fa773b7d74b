// File: dataplane/lb/lb_test_util.h
//
// Test-only helpers for dataplane/lb: parsed frames from the pkt builder, whole messages cut into
// MTU-sized packets, and path tables.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dataplane/lb/path.h"
#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::lb::testing {

struct Packet {
  std::vector<uint8_t> bytes;
  pkt::PacketDesc desc{};
  const uint8_t* data() const { return bytes.data(); }
  uint8_t* data() { return bytes.data(); }
  size_t size() const { return bytes.size(); }
};

inline Packet Make(const pkt::FrameSpec& f, const pkt::RoceSpec& r) {
  Packet p;
  p.bytes = pkt::BuildRoce(f, r);
  EXPECT_EQ(pkt::Parse(p.bytes.data(), p.bytes.size(), &p.desc), pkt::ParseError::kOk);
  return p;
}

// A frame between host `src` and host `dst` (IPv4 10.0.0.src -> 10.1.0.dst).
inline pkt::FrameSpec Hosts(uint8_t src, uint8_t dst) {
  pkt::FrameSpec f;
  f.src_ip4 = {10, 0, 0, src};
  f.dst_ip4 = {10, 1, 0, dst};
  return f;
}

// The same frame seen in the reverse direction (addresses swapped).
inline pkt::FrameSpec Reverse(pkt::FrameSpec f) {
  std::swap(f.src_ip4, f.dst_ip4);
  std::swap(f.src_ip6, f.dst_ip6);
  std::swap(f.src_mac, f.dst_mac);
  return f;
}

// The RC opcode of a WRITE or SEND message's packet: only, first, middle or last.
inline uint8_t MessageOpcode(bool write, bool first, bool last) {
  if (write) {
    return first && last ? pkt::op::kWriteOnly
           : first       ? pkt::op::kWriteFirst
           : last        ? pkt::op::kWriteLast
                         : pkt::op::kWriteMiddle;
  }
  return first && last ? pkt::op::kSendOnly
         : first       ? pkt::op::kSendFirst
         : last        ? pkt::op::kSendLast
                       : pkt::op::kSendMiddle;
}

// The packets of one message: WRITE (RETH on the first) or SEND of `bytes` at `mtu`.
inline std::vector<Packet> Message(const pkt::FrameSpec& f, bool write, uint32_t qpn, uint32_t psn,
                                   uint32_t bytes, uint32_t mtu = 1024) {
  std::vector<Packet> out;
  const uint32_t n = bytes == 0 ? 1 : (bytes + mtu - 1) / mtu;
  for (uint32_t i = 0; i < n; ++i) {
    pkt::RoceSpec r;
    const bool last = i + 1 == n;
    r.opcode = MessageOpcode(write, i == 0, last);
    r.dest_qp = qpn;
    r.psn = (psn + i) & 0xffffff;
    r.dma_length = bytes;
    r.payload_len = last ? bytes - i * mtu : mtu;
    out.push_back(Make(f, r));
  }
  return out;
}

// An ACK (syndrome 0), NAK (0x60 | code) or RNR NAK (0x20 | timer) for `psn`, towards `f`'s source.
inline Packet Ack(const pkt::FrameSpec& request_side, uint32_t requester_qpn, uint32_t psn,
                  uint8_t syndrome = 0, bool ce = false) {
  pkt::FrameSpec f = Reverse(request_side);
  if (ce) f.ecn = 3;
  pkt::RoceSpec r;
  r.opcode = pkt::op::kAcknowledge;
  r.dest_qp = requester_qpn;
  r.psn = psn;
  r.syndrome = syndrome;
  return Make(f, r);
}

inline Packet Cnp(const pkt::FrameSpec& request_side, uint32_t requester_qpn) {
  pkt::RoceSpec r;
  r.opcode = pkt::op::kCnp;
  r.dest_qp = requester_qpn;
  return Make(Reverse(request_side), r);
}

// A table with one default set of `n` UDP source ports 0xC000.. on port 0.
inline std::unique_ptr<const PathTable> DefaultTable(uint32_t n, uint32_t first = 0xc000) {
  PathConfig c;
  c.default_paths.entropies = n;
  c.default_paths.first_entropy = first;
  auto spec = PathTableSpecFromConfig(c, EntropyField::kUdpSourcePort);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto t = PathTable::Build(*spec);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

}  // namespace heddle::lb::testing
