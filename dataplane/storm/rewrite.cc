// File: dataplane/storm/rewrite.cc
#include "dataplane/storm/rewrite.h"

#include "dataplane/pkt/roce.h"

namespace heddle::storm {

void SetDscp(uint8_t* frame, const pkt::PacketDesc& desc, uint8_t dscp) {
  dscp &= 0x3f;
  uint8_t* ip = frame + desc.l3_off;
  if (desc.l3 == pkt::L3::kIpv4) {
    const uint8_t old_tos = ip[1];
    const uint8_t new_tos = static_cast<uint8_t>(dscp << 2 | (old_tos & 0x3));
    if (new_tos == old_tos) return;
    // The TOS is the low byte of the header's first 16-bit word (version/IHL, TOS).
    const uint16_t old_word = static_cast<uint16_t>(ip[0] << 8 | old_tos);
    const uint16_t new_word = static_cast<uint16_t>(ip[0] << 8 | new_tos);
    const uint16_t checksum = static_cast<uint16_t>(ip[10] << 8 | ip[11]);
    const uint16_t updated = ChecksumUpdate16(checksum, old_word, new_word);
    ip[1] = new_tos;
    ip[10] = static_cast<uint8_t>(updated >> 8);
    ip[11] = static_cast<uint8_t>(updated);
  } else if (desc.l3 == pkt::L3::kIpv6) {
    // Version (4) | traffic class (8) | flow label (20): DSCP is the class's top 6 bits, i.e. the
    // low nibble of byte 0 and the top 2 bits of byte 1; ECN is bits 5-4 of byte 1.
    ip[0] = static_cast<uint8_t>((ip[0] & 0xf0) | dscp >> 2);
    ip[1] = static_cast<uint8_t>((ip[1] & 0x3f) | (dscp & 0x3) << 6);
  }
}

bool SetPcp(uint8_t* frame, const pkt::PacketDesc& desc, int pcp) {
  if (desc.num_vlans == 0 || pcp < 0 || pcp > 7) return false;
  // Outermost tag: TPID at bytes 12-13, TCI at 14-15; PCP is the TCI's top 3 bits.
  uint8_t* tci = frame + 2 * 6 + 2;
  tci[0] = static_cast<uint8_t>((tci[0] & 0x1f) | pcp << 5);
  return true;
}

}  // namespace heddle::storm
