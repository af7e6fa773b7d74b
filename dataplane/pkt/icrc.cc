// File: dataplane/pkt/icrc.cc
//
// RoCEv2 invariant CRC. The variant fields sit in the first few dozen bytes (IP, UDP, BTH), so only
// those are copied into a stack buffer and masked; the CRC then continues over the rest of the
// frame in place. zlib's crc32() is the IEEE 802.3 CRC-32 the ICRC uses, and it chains: crc32(c, b)
// continues a running value c over more bytes b.
#include <zlib.h>

#include <cstring>

#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::pkt {

uint32_t IcrcOverHeaders(const uint8_t* data, const PacketDesc& d) noexcept {
  if ((d.flags & kFlagRoce) == 0 || d.l3 == L3::kNone) return 0;
  // Pseudo-LRH + the largest IPv4 header (60 B; IPv6 is 40 B) + UDP + BTH.
  uint8_t buf[8 + 60 + kUdpHeaderLen + kBthLen];
  const size_t ip_hdr_len = d.l4_off - d.l3_off;
  const size_t masked_len = 8 + ip_hdr_len + kUdpHeaderLen + kBthLen;
  if (ip_hdr_len > 60 || d.bth_off != d.l4_off + kUdpHeaderLen) return 0;

  std::memset(buf, 0xff, 8);
  std::memcpy(buf + 8, data + d.l3_off, ip_hdr_len + kUdpHeaderLen + kBthLen);
  uint8_t* ip = buf + 8;
  if (d.l3 == L3::kIpv4) {
    ip[1] = 0xff;            // TOS
    ip[8] = 0xff;            // TTL
    ip[10] = ip[11] = 0xff;  // header checksum
  } else {
    ip[0] |= 0x0f;                 // traffic class, high nibble
    ip[1] = ip[2] = ip[3] = 0xff;  // traffic class low nibble + flow label
    ip[7] = 0xff;                  // hop limit
  }
  uint8_t* udp = ip + ip_hdr_len;
  udp[6] = udp[7] = 0xff;  // UDP checksum
  uint8_t* bth = udp + kUdpHeaderLen;
  bth[4] = 0xff;  // FECN, BECN, reserved

  uLong crc = crc32(0L, Z_NULL, 0);
  return static_cast<uint32_t>(crc32(crc, buf, static_cast<uInt>(masked_len)));
}

uint32_t IcrcContinue(uint32_t crc, const uint8_t* bytes, size_t n) noexcept {
  return static_cast<uint32_t>(crc32(crc, bytes, static_cast<uInt>(n)));
}

uint32_t ComputeIcrc(const uint8_t* data, const PacketDesc& d) noexcept {
  if ((d.flags & kFlagRoce) == 0 || d.l3 == L3::kNone) return 0;
  const size_t rest = d.bth_off + kBthLen;
  return IcrcContinue(IcrcOverHeaders(data, d), data + rest, d.icrc_off - rest);
}

uint32_t StoredIcrc(const uint8_t* data, const PacketDesc& d) noexcept {
  if ((d.flags & kFlagRoce) == 0) return 0;
  const uint8_t* p = data + d.icrc_off;
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace heddle::pkt
