// File: dataplane/lb/rewrite.cc
#include "dataplane/lb/rewrite.h"

#include <cstring>

#include "dataplane/lb/icrc_update.h"
#include "dataplane/pkt/roce.h"

namespace heddle::lb {
namespace {

// The headers Rewrite touches all lie within `len`: the L3 header (IPv6: its first 4 bytes), UDP.
bool HeadersFit(size_t len, const pkt::PacketDesc& d) {
  if (d.l3 == pkt::L3::kNone || d.l4_off < d.l3_off + 4) return false;
  return static_cast<size_t>(d.l4_off) + pkt::kUdpHeaderLen <= len &&
         d.bth_off == d.l4_off + pkt::kUdpHeaderLen && d.icrc_off >= d.bth_off + pkt::kBthLen;
}

}  // namespace

RewriteResult RewriteHeaders(uint8_t* frame, size_t len, const pkt::PacketDesc& desc,
                             const Path& path, EntropyField field, uint32_t stored_icrc,
                             uint32_t* icrc_delta, IcrcDeltaCache* cache) noexcept {
  *icrc_delta = 0;
  if ((desc.flags & pkt::kFlagRoce) == 0) return RewriteResult::kNotRoce;
  if (frame == nullptr || !HeadersFit(len, desc)) return RewriteResult::kMalformed;
  bool changed = false;
  if (path.has_next_hop_mac && std::memcmp(frame, path.next_hop_mac.data(), 6) != 0) {
    std::memcpy(frame, path.next_hop_mac.data(), 6);
    changed = true;
  }
  if (field == EntropyField::kIpv6FlowLabel && desc.l3 == pkt::L3::kIpv6) {
    uint8_t* ip = frame + desc.l3_off;
    const uint32_t label = path.entropy & kMaxFlowLabel;
    const uint32_t old = static_cast<uint32_t>(ip[1] & 0x0f) << 16 | ip[2] << 8 | ip[3];
    if (old != label) {
      ip[1] = static_cast<uint8_t>((ip[1] & 0xf0) | label >> 16);
      ip[2] = static_cast<uint8_t>(label >> 8);
      ip[3] = static_cast<uint8_t>(label);
      changed = true;
    }
    return changed ? RewriteResult::kRewritten : RewriteResult::kUnchanged;
  }
  uint8_t* udp = frame + desc.l4_off;
  const uint16_t old_port = static_cast<uint16_t>(udp[0] << 8 | udp[1]);
  const uint16_t new_port = static_cast<uint16_t>(path.entropy);
  if (old_port != new_port) {
    udp[0] = static_cast<uint8_t>(new_port >> 8);
    udp[1] = static_cast<uint8_t>(new_port);
    // The bytes the ICRC covers after the port: the rest of UDP (6), BTH, up to the ICRC.
    const uint32_t tail = desc.icrc_off - desc.l4_off - 2u;
    const uint32_t delta = cache != nullptr ? cache->Delta16(old_port, new_port, tail)
                                            : IcrcDelta16(old_port, new_port, tail);
    *icrc_delta = delta;
    const uint16_t csum = static_cast<uint16_t>(udp[6] << 8 | udp[7]);
    if (csum != 0) {
      // The port word, then the ICRC's two words: the ICRC is the UDP payload's last 4 bytes,
      // 16-bit aligned (everything before it in the datagram is a multiple of 4 bytes). Its
      // wire bytes are the little-endian value's bytes in order.
      uint16_t c = ChecksumUpdate16(csum, old_port, new_port);
      const uint32_t new_icrc = stored_icrc ^ delta;
      auto word = [](uint32_t icrc, int i) {  // wire bytes 2i, 2i+1
        return static_cast<uint16_t>(((icrc >> (16 * i)) << 8 & 0xff00) |
                                     ((icrc >> (16 * i + 8)) & 0xff));
      };
      c = ChecksumUpdate16(c, word(stored_icrc, 0), word(new_icrc, 0));
      c = ChecksumUpdate16(c, word(stored_icrc, 1), word(new_icrc, 1));
      if (c == 0) c = 0xffff;  // 0 means "no checksum" (RFC 768)
      udp[6] = static_cast<uint8_t>(c >> 8);
      udp[7] = static_cast<uint8_t>(c);
    }
    changed = true;
  }
  return changed ? RewriteResult::kRewritten : RewriteResult::kUnchanged;
}

RewriteResult RewriteFull(uint8_t* frame, size_t len, const pkt::PacketDesc& desc, const Path& path,
                          EntropyField field, IcrcDeltaCache* cache) noexcept {
  if ((desc.flags & pkt::kFlagRoce) == 0) return RewriteResult::kNotRoce;
  if (static_cast<size_t>(desc.icrc_off) + pkt::kIcrcLen > len) return RewriteResult::kMalformed;
  uint32_t delta = 0;
  const RewriteResult r =
      RewriteHeaders(frame, len, desc, path, field, pkt::StoredIcrc(frame, desc), &delta, cache);
  if (delta != 0) ApplyIcrcDelta(frame + desc.icrc_off, delta);
  return r;
}

}  // namespace heddle::lb
