// File: dataplane/lb/rewrite_corpus.cc
#include "dataplane/lb/rewrite_corpus.h"

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/roce.h"

namespace heddle::lb {

uint16_t UdpChecksum(const uint8_t* frame, const pkt::PacketDesc& d) {
  const uint8_t* ip = frame + d.l3_off;
  const uint8_t* udp = frame + d.l4_off;
  const uint32_t udp_len = static_cast<uint32_t>(udp[4] << 8 | udp[5]);
  uint64_t sum = 0;
  auto add_bytes = [&](const uint8_t* p, size_t n) {
    for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
    if (n & 1) sum += static_cast<uint32_t>(p[n - 1] << 8);
  };
  if (d.l3 == pkt::L3::kIpv4) {
    add_bytes(ip + 12, 8);
  } else {
    add_bytes(ip + 8, 32);
  }
  sum += pkt::kIpProtoUdp;
  sum += udp_len;
  add_bytes(udp, 6);  // ports and length; the checksum field counts as zero
  add_bytes(udp + 8, udp_len - 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const auto c = static_cast<uint16_t>(~sum);
  return c == 0 ? 0xffff : c;
}

RandomFrame MakeRandomFrame(std::mt19937_64& rng) {
  static constexpr uint8_t kOpcodes[] = {
      pkt::op::kWriteFirst,         pkt::op::kWriteMiddle,  pkt::op::kWriteLast,
      pkt::op::kWriteOnly,          pkt::op::kWriteOnlyImm, pkt::op::kSendFirst,
      pkt::op::kSendMiddle,         pkt::op::kSendLast,     pkt::op::kSendOnly,
      pkt::op::kSendOnlyImm,        pkt::op::kReadRequest,  pkt::op::kReadResponseFirst,
      pkt::op::kReadResponseMiddle, pkt::op::kAcknowledge,  pkt::op::kCompareSwap,
      pkt::op::kUdSendOnly,         pkt::op::kCnp};
  pkt::FrameSpec f;
  f.ipv6 = rng() % 2 == 0;
  const int vlans = static_cast<int>(rng() % 3);
  for (int v = 0; v < vlans; ++v) {
    f.vlans.push_back({.tpid = v == 0 && vlans == 2 ? pkt::kEtherTypeQinQ : pkt::kEtherTypeVlan,
                       .tci = static_cast<uint16_t>(rng())});
  }
  for (auto& b : f.src_ip4) b = static_cast<uint8_t>(rng());
  for (auto& b : f.dst_ip4) b = static_cast<uint8_t>(rng());
  for (auto& b : f.src_ip6) b = static_cast<uint8_t>(rng());
  for (auto& b : f.dst_ip6) b = static_cast<uint8_t>(rng());
  f.dscp = static_cast<uint8_t>(rng() & 0x3f);
  f.ecn = static_cast<uint8_t>(rng() & 3);
  f.ttl = static_cast<uint8_t>(1 + rng() % 255);
  f.flow_label = static_cast<uint32_t>(rng() & 0xfffff);
  f.ip_id = static_cast<uint16_t>(rng());
  if (!f.ipv6 && rng() % 8 == 0) f.ipv4_options.assign(4 * (1 + rng() % 3), 1);  // NOPs
  f.udp_sport = static_cast<uint16_t>(rng());

  pkt::RoceSpec r;
  r.opcode = kOpcodes[rng() % std::size(kOpcodes)];
  r.dest_qp = static_cast<uint32_t>(rng() & 0xffffff);
  r.psn = static_cast<uint32_t>(rng() & 0xffffff);
  r.fecn = rng() % 4 == 0;
  r.becn = rng() % 4 == 0;
  r.ack_req = rng() % 2 == 0;
  r.dma_length = static_cast<uint32_t>(rng());
  r.va = rng();
  r.rkey = static_cast<uint32_t>(rng());
  r.payload_seed = static_cast<uint8_t>(rng());
  const pkt::OpcodeInfo info = pkt::DescribeOpcode(r.opcode);
  const bool data = info.roce_class == pkt::RoceClass::kWrite ||
                    info.roce_class == pkt::RoceClass::kSend ||
                    info.roce_class == pkt::RoceClass::kReadResponse;
  if (data) {
    switch (rng() % 5) {
      case 0:
        r.payload_len = 1024;
        break;
      case 1:
        r.payload_len = 4096;
        break;
      case 2:
        r.payload_len = static_cast<uint32_t>(rng() % 64);
        break;
      default:
        r.payload_len = static_cast<uint32_t>(rng() % 4097);
        break;
    }
  }
  RandomFrame out;
  out.bytes = pkt::BuildRoce(f, r);
  out.udp_checksum = rng() % 2 == 0;
  if (out.udp_checksum) {
    pkt::PacketDesc d;
    if (pkt::Parse(out.bytes.data(), out.bytes.size(), &d) == pkt::ParseError::kOk) {
      const uint16_t c = UdpChecksum(out.bytes.data(), d);
      out.bytes[d.l4_off + 6] = static_cast<uint8_t>(c >> 8);
      out.bytes[d.l4_off + 7] = static_cast<uint8_t>(c);
    } else {
      out.udp_checksum = false;
    }
  }
  return out;
}

}  // namespace heddle::lb
