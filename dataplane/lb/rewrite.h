// File: dataplane/lb/rewrite.h
//
// Writes a chosen path into a RoCEv2 frame (docs/pin.md §5): its entropy into the UDP source port
// or the IPv6 flow label, and its next-hop MAC (if the path has one) into the destination MAC.
//
//   PathChoice c = selector.Choose(desc, frame, len, now_ns);
//   if (c.path != nullptr) {
//     RewriteResult r = Rewrite(frame, len, desc, *c.path, config.entropy_field);
//     burst.egress[i] = c.path->port;
//   }
//
// What else changes, and why:
//   * UDP source port: covered by the ICRC, which is updated incrementally from the two changed
//     bytes (IcrcDelta16(), icrc_update.h) — no pass over the payload. The IPv4 header checksum
//     does not cover UDP. A zero UDP checksum (what RoCEv2 NICs send) stays zero; a non-zero one
//     is updated per RFC 1624 eqn. 3 for the port word and for the two words of the ICRC, which
//     sits inside the UDP payload and changed too (0x0000 is sent as 0xFFFF, RFC 768).
//   * IPv6 flow label: masked in the ICRC and not in the UDP pseudo-header: nothing else changes.
//     IPv4 frames have none; with EntropyField::kIpv6FlowLabel they get the UDP source port.
//   * Destination MAC: outside the ICRC and every checksum.
// The ICRC update preserves the old ICRC's validity: a frame that arrived with a bad ICRC still
// has one. `desc` is the parser's view and is not updated (desc.udp_sport keeps the old port).
//
// Frames whose bytes are not contiguous (a chained mbuf with the ICRC in a later segment): rewrite
// the headers with RewriteHeaders(), giving it the ICRC as stored (a non-zero UDP checksum needs
// its old and new words), and XOR the returned delta into the ICRC word yourself.
//
// Hot path: a few loads and stores, no allocation. The frame is checked against `len` first: a
// desc that does not fit the frame (not from Parse() of it) is refused, nothing is written.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dataplane/lb/icrc_update.h"
#include "dataplane/lb/path.h"
#include "dataplane/pkt/parse.h"

namespace heddle::lb {

enum class RewriteResult : uint8_t {
  kRewritten,  // the frame changed
  kUnchanged,  // it already carried this path
  kNotRoce,    // no kFlagRoce: untouched
  kMalformed,  // the desc's offsets do not fit `len`: untouched
};

// Rewrites a contiguous RoCEv2 frame of `len` bytes in place: entropy (+ ICRC / UDP checksum)
// and next-hop MAC.
// `cache` (optional, the caller's thread's own) memoizes the ICRC deltas.
// Inline: the common frame (UDP source port, zero UDP checksum, no next-hop MAC) is rewritten here;
// the rest by RewriteFull().
inline RewriteResult Rewrite(uint8_t* frame, size_t len, const pkt::PacketDesc& desc,
                             const Path& path, EntropyField field,
                             IcrcDeltaCache* cache = nullptr) noexcept;
// Rewrite() without the inline fast path.
RewriteResult RewriteFull(uint8_t* frame, size_t len, const pkt::PacketDesc& desc, const Path& path,
                          EntropyField field, IcrcDeltaCache* cache = nullptr) noexcept;

// The same for a frame whose first `len` bytes (all its headers) are contiguous and whose ICRC
// may lie beyond: writes the headers, and returns in *icrc_delta what to XOR into the ICRC word
// read little-endian (0 when the ICRC does not change). `stored_icrc`: the frame's ICRC word read
// little-endian (pkt::StoredIcrc()); only read when the UDP checksum is non-zero.
RewriteResult RewriteHeaders(uint8_t* frame, size_t len, const pkt::PacketDesc& desc,
                             const Path& path, EntropyField field, uint32_t stored_icrc,
                             uint32_t* icrc_delta, IcrcDeltaCache* cache = nullptr) noexcept;

// Applies a delta to the little-endian ICRC at `icrc`.
inline void ApplyIcrcDelta(uint8_t* icrc, uint32_t delta) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    uint32_t v;  // one 32-bit XOR: the word is little-endian on the wire
    std::memcpy(&v, icrc, sizeof v);
    v ^= delta;
    std::memcpy(icrc, &v, sizeof v);
  } else {
    icrc[0] ^= static_cast<uint8_t>(delta);
    icrc[1] ^= static_cast<uint8_t>(delta >> 8);
    icrc[2] ^= static_cast<uint8_t>(delta >> 16);
    icrc[3] ^= static_cast<uint8_t>(delta >> 24);
  }
}

// RFC 1624 eqn. 3: a one's-complement checksum after one 16-bit word changed from old_word to
// new_word (host-order values of network-order words).
constexpr uint16_t ChecksumUpdate16(uint16_t checksum, uint16_t old_word, uint16_t new_word) {
  uint32_t sum = static_cast<uint16_t>(~checksum) +
                 static_cast<uint32_t>(static_cast<uint16_t>(~old_word)) + new_word;
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// RewriteFitting()'s `len` for a frame that lies whole at `frame` (Parse() checked its ICRC against
// its length): nothing past the ICRC's end is read or written.
inline constexpr size_t kWholeFrame = ~size_t{0};

// Rewrite() of a frame whose geometry Rewrite() accepts (RoCE; IPv4 or IPv6 with UDP at least 4
// bytes in; BTH right after UDP; the ICRC after BTH and within `len`, or `len` kWholeFrame),
// `frame` not null. The caller has checked that (PinSelector::TryChooseRewriteFast() does; for
// TryChooseRewriteParsed() and TryChooseRewriteWhole(), Parse() did).
// Inline: the common frame (the UDP source port, a zero UDP checksum, no next-hop MAC).
[[gnu::always_inline]] inline RewriteResult RewriteFitting(uint8_t* frame, size_t len,
                                                           const pkt::PacketDesc& desc,
                                                           const Path& path, EntropyField field,
                                                           IcrcDeltaCache& cache) noexcept {
  // The offsets before any store into the frame: it may alias the desc (-fno-strict-aliasing).
  const uint32_t l4_off = desc.l4_off;
  const uint32_t icrc_off = desc.icrc_off;
  uint8_t* udp = frame + l4_off;
  const bool sport = field == EntropyField::kUdpSourcePort || desc.l3 != pkt::L3::kIpv6;
  uint16_t checksum;  // zero or not: the byte order does not matter
  std::memcpy(&checksum, udp + 6, sizeof checksum);
  if (!sport || path.has_next_hop_mac || checksum != 0) [[unlikely]] {
    // A whole frame's length is only needed here, from the desc: its ICRC's end.
    if (len == kWholeFrame) len = size_t{icrc_off} + pkt::kIcrcLen;
    return RewriteFull(frame, len, desc, path, field, &cache);
  }
  // The ports as their bytes sit in the frame (network order), loaded and stored as one word.
  uint16_t old_wire;
  std::memcpy(&old_wire, udp, sizeof old_wire);
  auto new_wire = static_cast<uint16_t>(path.entropy);
  if constexpr (std::endian::native == std::endian::little) new_wire = __builtin_bswap16(new_wire);
  if (old_wire == new_wire) return RewriteResult::kUnchanged;
  std::memcpy(udp, &new_wire, sizeof new_wire);
  // From the port to the ICRC: the port, the rest of UDP, BTH, up to the ICRC (at least 20 bytes:
  // the geometry was checked).
  ApplyIcrcDelta(frame + icrc_off, cache.DeltaSpanWire(old_wire, new_wire, icrc_off - l4_off));
  return RewriteResult::kRewritten;
}

[[gnu::always_inline]] inline RewriteResult Rewrite(uint8_t* frame, size_t len,
                                                    const pkt::PacketDesc& desc, const Path& path,
                                                    EntropyField field,
                                                    IcrcDeltaCache* cache) noexcept {
  // The checks of RewriteHeaders()'s HeadersFit() and of the ICRC's place.
  const bool fits = (desc.flags & pkt::kFlagRoce) && desc.l3 != pkt::L3::kNone &&
                    desc.l4_off >= desc.l3_off + 4 && desc.bth_off == desc.l4_off + 8 &&
                    desc.icrc_off >= desc.bth_off + 12 && size_t{desc.icrc_off} + 4 <= len;
  if (!fits || cache == nullptr || frame == nullptr) {
    return RewriteFull(frame, len, desc, path, field, cache);
  }
  return RewriteFitting(frame, len, desc, path, field, *cache);
}

}  // namespace heddle::lb
