// File: dataplane/pkt/builder.cc
#include "dataplane/pkt/builder.h"

#include <algorithm>

#include "dataplane/pkt/parse.h"

namespace heddle::pkt {
namespace {

void Put8(std::vector<uint8_t>& v, uint8_t x) { v.push_back(x); }
void Put16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}
void Put24(std::vector<uint8_t>& v, uint32_t x) {
  v.push_back(static_cast<uint8_t>(x >> 16));
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}
void Put32(std::vector<uint8_t>& v, uint32_t x) {
  Put16(v, static_cast<uint16_t>(x >> 16));
  Put16(v, static_cast<uint16_t>(x));
}
void Put64(std::vector<uint8_t>& v, uint64_t x) {
  Put32(v, static_cast<uint32_t>(x >> 32));
  Put32(v, static_cast<uint32_t>(x));
}
void Set16(std::vector<uint8_t>& v, size_t off, uint16_t x) {
  v[off] = static_cast<uint8_t>(x >> 8);
  v[off + 1] = static_cast<uint8_t>(x);
}

size_t Ipv4OptionsLen(const FrameSpec& f) {
  size_t n = std::min<size_t>(f.ipv4_options.size(), 40);
  return (n + 3) & ~size_t{3};
}

size_t L3HeaderLen(const FrameSpec& f) {
  return f.ipv6 ? kIpv6HeaderLen : kIpv4MinHeaderLen + Ipv4OptionsLen(f);
}

size_t L2Len(const FrameSpec& f) {
  return kEthHeaderLen + kVlanTagLen * std::min<size_t>(f.vlans.size(), kMaxVlanTags);
}

// Ethernet + tags, ending with `ether_type`.
void PutL2(std::vector<uint8_t>& v, const FrameSpec& f, uint16_t ether_type) {
  v.insert(v.end(), f.dst_mac.begin(), f.dst_mac.end());
  v.insert(v.end(), f.src_mac.begin(), f.src_mac.end());
  const size_t tags = std::min<size_t>(f.vlans.size(), kMaxVlanTags);
  for (size_t i = 0; i < tags; ++i) {
    Put16(v, f.vlans[i].tpid);
    Put16(v, f.vlans[i].tci);
  }
  Put16(v, ether_type);
}

// L2 + IP + UDP headers for a UDP payload of `udp_payload_len` bytes.
std::vector<uint8_t> UdpHeaders(const FrameSpec& f, size_t udp_payload_len) {
  std::vector<uint8_t> v;
  v.reserve(L2Len(f) + L3HeaderLen(f) + kUdpHeaderLen + udp_payload_len + 64);
  PutL2(v, f, f.ipv6 ? kEtherTypeIpv6 : kEtherTypeIpv4);
  const size_t udp_len = kUdpHeaderLen + udp_payload_len;
  const uint8_t tos = static_cast<uint8_t>((f.dscp & 0x3f) << 2 | (f.ecn & 0x3));
  if (f.ipv6) {
    const uint32_t vtf = 6u << 28 | static_cast<uint32_t>(tos) << 20 | (f.flow_label & 0xfffff);
    Put32(v, vtf);
    Put16(v, static_cast<uint16_t>(udp_len));
    Put8(v, kIpProtoUdp);
    Put8(v, f.ttl);
    v.insert(v.end(), f.src_ip6.begin(), f.src_ip6.end());
    v.insert(v.end(), f.dst_ip6.begin(), f.dst_ip6.end());
  } else {
    const size_t l3_off = v.size();
    const size_t opt_len = Ipv4OptionsLen(f);
    const size_t ihl = kIpv4MinHeaderLen + opt_len;
    Put8(v, static_cast<uint8_t>(0x40 | ihl / 4));
    Put8(v, tos);
    Put16(v, static_cast<uint16_t>(ihl + udp_len));
    Put16(v, f.ip_id);
    Put16(v, f.dont_fragment ? 0x4000 : 0);
    Put8(v, f.ttl);
    Put8(v, kIpProtoUdp);
    Put16(v, 0);  // checksum, below
    v.insert(v.end(), f.src_ip4.begin(), f.src_ip4.end());
    v.insert(v.end(), f.dst_ip4.begin(), f.dst_ip4.end());
    const size_t given = std::min<size_t>(f.ipv4_options.size(), 40);
    v.insert(v.end(), f.ipv4_options.begin(), f.ipv4_options.begin() + given);
    v.resize(v.size() + (opt_len - given), 0);
    Set16(v, l3_off + 10, Ipv4HeaderChecksum(v.data() + l3_off, ihl));
  }
  Put16(v, f.udp_sport);
  Put16(v, f.udp_dport);
  Put16(v, static_cast<uint16_t>(udp_len));
  Put16(v, 0);  // RoCEv2 senders leave the UDP checksum 0
  return v;
}

void PadToMinimum(std::vector<uint8_t>& v, const FrameSpec& f) {
  if (v.size() < f.min_frame_len) v.resize(f.min_frame_len, 0);
}

}  // namespace

uint16_t Ipv4HeaderChecksum(const uint8_t* header, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) {
    if (i == 10) continue;  // the checksum field itself counts as zero
    sum += static_cast<uint32_t>(header[i]) << 8 | header[i + 1];
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

size_t RoceFrameLen(const FrameSpec& frame, uint8_t opcode, size_t payload_len) {
  const size_t pad = (4 - payload_len % 4) % 4;
  return L2Len(frame) + L3HeaderLen(frame) + kUdpHeaderLen + kBthLen +
         DescribeOpcode(opcode).ext_len + payload_len + pad + kIcrcLen;
}

std::vector<uint8_t> BuildRoce(const FrameSpec& frame, const RoceSpec& r) {
  std::vector<uint8_t> payload = r.payload;
  if (payload.empty()) {
    payload.resize(r.payload_len);
    for (size_t i = 0; i < payload.size(); ++i) {
      payload[i] = static_cast<uint8_t>(r.payload_seed + i);
    }
  }
  const uint8_t pad = static_cast<uint8_t>((4 - payload.size() % 4) % 4);
  const OpcodeInfo info = DescribeOpcode(r.opcode);
  const size_t roce_len = kBthLen + info.ext_len + payload.size() + pad + kIcrcLen;
  std::vector<uint8_t> v = UdpHeaders(frame, roce_len);

  // BTH.
  Put8(v, r.opcode);
  Put8(v, static_cast<uint8_t>((r.solicited ? 0x80 : 0) | (r.mig_req ? 0x40 : 0) | pad << 4 |
                               (r.tver & 0x0f)));
  Put16(v, r.pkey);
  Put8(v, static_cast<uint8_t>((r.fecn ? 0x80 : 0) | (r.becn ? 0x40 : 0)));
  Put24(v, r.dest_qp & 0xffffff);
  Put8(v, r.ack_req ? 0x80 : 0);
  Put24(v, r.psn & 0xffffff);

  // Extension headers in IBTA order.
  if (info.flags & kFlagDeth) {
    Put32(v, r.qkey);
    Put8(v, 0);
    Put24(v, r.src_qp & 0xffffff);
  }
  if (info.flags & kFlagReth) {
    Put64(v, r.va);
    Put32(v, r.rkey);
    Put32(v, r.dma_length);
  }
  if (info.flags & kFlagAtomicEth) {
    Put64(v, r.va);
    Put32(v, r.rkey);
    Put64(v, r.swap_add);
    Put64(v, r.compare);
  }
  if (info.flags & kFlagAeth) {
    Put8(v, r.syndrome);
    Put24(v, r.msn & 0xffffff);
  }
  if (info.flags & kFlagAtomicAck) Put64(v, r.orig_data);
  if (info.flags & kFlagImm) Put32(v, r.imm);
  if (info.flags & kFlagIeth) Put32(v, r.inval_rkey);
  if (info.roce_class == RoceClass::kCnp) v.resize(v.size() + kCnpReservedLen, 0);

  v.insert(v.end(), payload.begin(), payload.end());
  v.resize(v.size() + pad, 0);
  v.resize(v.size() + kIcrcLen, 0);
  PadToMinimum(v, frame);
  RewriteIcrc(v);
  return v;
}

std::vector<uint8_t> BuildUdp(const FrameSpec& frame, std::span<const uint8_t> payload) {
  std::vector<uint8_t> v = UdpHeaders(frame, payload.size());
  v.insert(v.end(), payload.begin(), payload.end());
  PadToMinimum(v, frame);
  return v;
}

std::vector<uint8_t> BuildArpRequest(const FrameSpec& frame) {
  FrameSpec f = frame;
  f.dst_mac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  std::vector<uint8_t> v;
  PutL2(v, f, kEtherTypeArp);
  Put16(v, 1);       // hardware type Ethernet
  Put16(v, 0x0800);  // protocol IPv4
  Put8(v, 6);
  Put8(v, 4);
  Put16(v, 1);  // request
  v.insert(v.end(), f.src_mac.begin(), f.src_mac.end());
  v.insert(v.end(), f.src_ip4.begin(), f.src_ip4.end());
  v.resize(v.size() + 6, 0);  // target MAC unknown
  v.insert(v.end(), f.dst_ip4.begin(), f.dst_ip4.end());
  PadToMinimum(v, f);
  return v;
}

bool RewriteIcrc(std::vector<uint8_t>& frame) {
  PacketDesc d;
  if (Parse(frame.data(), frame.size(), &d) != ParseError::kOk || !(d.flags & kFlagRoce)) {
    return false;
  }
  const uint32_t icrc = ComputeIcrc(frame.data(), d);
  for (int i = 0; i < kIcrcLen; ++i) frame[d.icrc_off + i] = static_cast<uint8_t>(icrc >> (8 * i));
  return true;
}

}  // namespace heddle::pkt
