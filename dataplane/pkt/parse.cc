// File: dataplane/pkt/parse.cc
//
// One forward pass: L2 (Ethernet + up to two tags), L3 (IPv4/IPv6), UDP, then BTH and the
// extension headers DescribeOpcode() lists. Every read is preceded by a check against `end`, the
// end of the innermost enclosing header's extent (frame, then IP datagram, then UDP datagram), so a
// lying length field can only produce an error, never a read past the frame.
#include "dataplane/pkt/parse.h"

#include <array>
#include <cstring>

#include "dataplane/pkt/internal/bytes.h"
#include "dataplane/pkt/roce.h"

namespace heddle::pkt {

static_assert(sizeof(PacketDesc) <= 48, "PacketDesc must stay within 48 bytes");

using internal::Load16;
using internal::Load24;
using internal::Load32;

namespace {

// DescribeOpcode() evaluated once per opcode at compile time: one load per packet on the hot path.
constexpr std::array<OpcodeInfo, 256> kOpcodeTable = [] {
  std::array<OpcodeInfo, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = DescribeOpcode(static_cast<uint8_t>(i));
  return t;
}();

// BTH and its extension headers within the UDP payload [p, end).
// Headers are read only below `readable` (the contiguous part); lengths are checked against
// udp_end, which may lie beyond it in a segmented frame.
ParseError ParseRoce(const uint8_t* frame, size_t bth_off, size_t udp_end, size_t readable,
                     PacketDesc* d) {
  if (udp_end - bth_off < static_cast<size_t>(kBthLen + kIcrcLen) || readable < bth_off + kBthLen) {
    return ParseError::kBthTruncated;
  }
  const uint8_t* bth = frame + bth_off;
  d->bth_off = static_cast<uint16_t>(bth_off);
  d->opcode = bth[0];
  if ((bth[1] & 0x0f) != 0) return ParseError::kBthBadVersion;
  d->pad_count = (bth[1] >> 4) & 0x3;
  d->pkey = Load16(bth + 2);
  d->dest_qp = Load24(bth + 5);
  d->psn = Load24(bth + 9);
  uint16_t flags = d->flags;
  if (bth[1] & 0x80) flags |= kFlagSolicited;
  if (bth[4] & 0x80) flags |= kFlagFecn;
  if (bth[4] & 0x40) flags |= kFlagBecn;
  if (bth[8] & 0x80) flags |= kFlagAckReq;

  const OpcodeInfo info = kOpcodeTable[d->opcode];
  d->roce_class = info.roce_class;
  const size_t ext_off = bth_off + kBthLen;
  const size_t room = udp_end - ext_off;  // >= kIcrcLen, checked above
  if (info.ext_len > room || ext_off + info.ext_len > readable) {
    return ParseError::kRoceExtTruncated;
  }
  if (info.ext_len + static_cast<size_t>(kIcrcLen) > room) return ParseError::kRoceNoIcrc;

  // Extension headers in wire order; only the fields the stages need are decoded.
  size_t off = ext_off;
  if (info.flags & kFlagDeth) off += kDethLen;
  if (info.flags & kFlagReth) {
    d->dma_length = Load32(frame + off + 12);
    off += kRethLen;
  }
  if (info.flags & kFlagAtomicEth) off += kAtomicEthLen;
  if (info.flags & kFlagAeth) {
    d->aeth = Load32(frame + off);
    off += kAethLen;
  }
  off = ext_off + info.ext_len;

  d->flags = static_cast<uint16_t>(flags | info.flags | kFlagRoce);
  d->payload_off = static_cast<uint16_t>(off);
  d->icrc_off = static_cast<uint16_t>(udp_end - kIcrcLen);
  d->payload_len = static_cast<uint16_t>(d->icrc_off - off);
  return ParseError::kOk;
}

}  // namespace

ParseError Parse(const uint8_t* data, size_t len, PacketDesc* out) noexcept {
  return Parse(data, len, len, out);
}

ParseError Parse(const uint8_t* data, size_t len, size_t frame_len, PacketDesc* out) noexcept {
  PacketDesc& d = *out;
  std::memset(&d, 0, sizeof(d));
  // Offsets are 16-bit; anything longer than that is no Ethernet frame heddle handles. Parsing only
  // the first 64 KiB keeps every offset representable.
  if (frame_len < len) frame_len = len;
  if (frame_len > 0xffff) frame_len = 0xffff;
  if (len > frame_len) len = frame_len;
  if (len < static_cast<size_t>(kEthHeaderLen)) return ParseError::kEthTruncated;

  size_t off = 12;
  uint16_t ether_type = Load16(data + off);
  off += 2;
  while (ether_type == kEtherTypeVlan || ether_type == kEtherTypeQinQ) {
    if (d.num_vlans == kMaxVlanTags) return ParseError::kVlanTooMany;
    if (len - off < static_cast<size_t>(kVlanTagLen)) return ParseError::kVlanTruncated;
    d.vlan_tci[d.num_vlans] = Load16(data + off);
    d.num_vlans = d.num_vlans + 1;
    ether_type = Load16(data + off + 2);
    off += kVlanTagLen;
  }
  d.ether_type = ether_type;
  d.l3_off = static_cast<uint16_t>(off);

  size_t l4_off = 0;
  size_t ip_end = 0;
  if (ether_type == kEtherTypeIpv4) {
    if (len - off < static_cast<size_t>(kIpv4MinHeaderLen)) return ParseError::kIpv4Truncated;
    const uint8_t* ip = data + off;
    if ((ip[0] >> 4) != 4) return ParseError::kIpv4BadVersion;
    const size_t ihl = static_cast<size_t>(ip[0] & 0x0f) * 4;
    if (ihl < static_cast<size_t>(kIpv4MinHeaderLen) || ihl > len - off) {
      return ParseError::kIpv4BadIhl;
    }
    const size_t total = Load16(ip + 2);
    if (total < ihl || total > frame_len - off) return ParseError::kIpv4BadLength;
    d.l3 = L3::kIpv4;
    d.dscp = ip[1] >> 2;
    d.ecn = ip[1] & 0x3;
    d.ip_proto = ip[9];
    d.ip_len = static_cast<uint16_t>(total);
    if (ihl > static_cast<size_t>(kIpv4MinHeaderLen)) d.flags |= kFlagIpv4Options;
    l4_off = off + ihl;
    ip_end = off + total;
    d.l4_off = static_cast<uint16_t>(l4_off);
    const uint16_t frag = Load16(ip + 6);
    if ((frag & 0x2000) != 0 || (frag & 0x1fff) != 0) {
      // Only the first fragment holds the UDP header and none holds a whole RoCE datagram: forward
      // fragments untouched.
      d.flags |= kFlagIpFragment;
      return ParseError::kOk;
    }
  } else if (ether_type == kEtherTypeIpv6) {
    if (len - off < static_cast<size_t>(kIpv6HeaderLen)) return ParseError::kIpv6Truncated;
    const uint8_t* ip = data + off;
    if ((ip[0] >> 4) != 6) return ParseError::kIpv6BadVersion;
    const size_t total = kIpv6HeaderLen + static_cast<size_t>(Load16(ip + 4));
    if (total > frame_len - off) return ParseError::kIpv6BadLength;
    const uint8_t tclass = static_cast<uint8_t>((ip[0] & 0x0f) << 4 | ip[1] >> 4);
    d.l3 = L3::kIpv6;
    d.dscp = tclass >> 2;
    d.ecn = tclass & 0x3;
    d.ip_proto = ip[6];
    d.ip_len = static_cast<uint16_t>(total);
    l4_off = off + kIpv6HeaderLen;
    ip_end = off + total;
    d.l4_off = static_cast<uint16_t>(l4_off);
  } else {
    return ParseError::kOk;  // ARP, LLDP, ...: not ours to judge
  }

  if (d.ip_proto != kIpProtoUdp) return ParseError::kOk;
  if (ip_end - l4_off < static_cast<size_t>(kUdpHeaderLen) ||
      len - l4_off < static_cast<size_t>(kUdpHeaderLen)) {
    return ParseError::kUdpTruncated;
  }
  const uint8_t* udp = data + l4_off;
  const size_t udp_len = Load16(udp + 4);
  if (udp_len < static_cast<size_t>(kUdpHeaderLen) || udp_len > ip_end - l4_off) {
    return ParseError::kUdpBadLength;
  }
  d.udp_sport = Load16(udp);
  if (Load16(udp + 2) != kRoceV2UdpPort) return ParseError::kOk;
  return ParseRoce(data, l4_off + kUdpHeaderLen, l4_off + udp_len, len, &d);
}

}  // namespace heddle::pkt
