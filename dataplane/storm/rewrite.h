// File: dataplane/storm/rewrite.h
//
// In-place DSCP and VLAN PCP rewrites for the STORM level of a packet (docs/storm.md §5).
//
//   heddle::storm::SetDscp(frame, desc, config.dscp[level]);
//   if (config.pcp[level] >= 0) heddle::storm::SetPcp(frame, desc, config.pcp[level]);
//
// DSCP goes into the IPv4 TOS or the IPv6 traffic class; the ECN bits are never touched. The IPv4
// header checksum is updated incrementally (RFC 1624, eqn. 3) from the one changed 16-bit word.
// Both fields are masked in the RoCEv2 ICRC, so the ICRC stays valid. `desc` must come from
// pkt::Parse() of this frame; its dscp field is not updated (it is the parser's view). Hot path: a
// few byte stores, no allocation.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "dataplane/pkt/parse.h"

namespace heddle::storm {

// Sets the DSCP (low 6 bits of `dscp`) of an IPv4 or IPv6 frame; no-op for other frames.
// Inline: it runs for every tagged packet.
inline void SetDscp(uint8_t* frame, const pkt::PacketDesc& desc, uint8_t dscp);

// SetDscp() with the frame's IP header at `ip` and its L3 kind given (desc.l3_off, desc.l3).
inline void SetDscpAt(uint8_t* ip, pkt::L3 l3, uint8_t dscp);

// Sets the PCP (0..7) of the outermost VLAN tag; false (frame untouched) if the frame has no VLAN
// tag or pcp is outside 0..7 (-1 means "keep").
bool SetPcp(uint8_t* frame, const pkt::PacketDesc& desc, int pcp);

// RFC 1624 eqn. 3: the checksum after one 16-bit word of the header changed from old_word to
// new_word (host-order values of network-order words).
constexpr uint16_t ChecksumUpdate16(uint16_t checksum, uint16_t old_word, uint16_t new_word) {
  // HC' = ~(~HC + ~m + m')
  uint32_t sum = static_cast<uint16_t>(~checksum) +
                 static_cast<uint32_t>(static_cast<uint16_t>(~old_word)) + new_word;
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

inline void SetDscp(uint8_t* frame, const pkt::PacketDesc& desc, uint8_t dscp) {
  SetDscpAt(frame + desc.l3_off, desc.l3, dscp);
}

inline void SetDscpAt(uint8_t* ip, pkt::L3 l3, uint8_t dscp) {
  dscp &= 0x3f;
  if (l3 == pkt::L3::kIpv4) {
    // The TOS is the second byte of the header's first 16-bit word (version/IHL, TOS): one word
    // in, one checksum word updated (RFC 1624). The one's complement sum does not depend on byte
    // order, so the words are taken as they sit in memory, without swapping: on a little-endian
    // load the TOS is the high byte, its ECN bits are bits 8-9 and the DSCP bits 10-15 (on a
    // big-endian one the same mask and shift apply to the network-order word).
    uint16_t w0, csum;
    std::memcpy(&w0, ip, 2);
    constexpr bool kLittle = std::endian::native == std::endian::little;
    const uint16_t keep = kLittle ? 0x03ff : 0xff03;
    const int shift = kLittle ? 10 : 2;
    const auto new_word = static_cast<uint16_t>((w0 & keep) | dscp << shift);
    if (new_word == w0) return;
    std::memcpy(&csum, ip + 10, 2);
    const uint16_t updated = ChecksumUpdate16(csum, w0, new_word);
    std::memcpy(ip, &new_word, 2);
    std::memcpy(ip + 10, &updated, 2);
  } else if (l3 == pkt::L3::kIpv6) {
    // Version (4) | traffic class (8) | flow label (20): DSCP is the class's top 6 bits, i.e. the
    // low nibble of byte 0 and the top 2 bits of byte 1; ECN is bits 5-4 of byte 1.
    ip[0] = static_cast<uint8_t>((ip[0] & 0xf0) | dscp >> 2);
    ip[1] = static_cast<uint8_t>((ip[1] & 0x3f) | (dscp & 0x3) << 6);
  }
}

}  // namespace heddle::storm
