// File: dataplane/pkt/parse.h
//
// The packet parser: one pass over (const uint8_t*, len) that fills a compact PacketDesc with the
// offsets and RoCEv2 fields the stages need (opcode class, destination QP, PSN, DMA length, flags).
// It never reads outside [data, data + len), never allocates, never throws, and has no DPDK types,
// so the simulator and fuzzers use it exactly as the dataplane does.
//
//   heddle::pkt::PacketDesc d;
//   heddle::pkt::ParseError e = heddle::pkt::Parse(buf, len, &d);
//   if (e != heddle::pkt::ParseError::kOk) { count drop under ParseErrorName(e) }
//   else if (d.roce_class != heddle::pkt::RoceClass::kNone) { ... d.dest_qp, d.psn ... }
//
// What is an error and what is not:
//   * A well-formed frame that is not RoCEv2 (ARP, LLDP, TCP, UDP to another port, an IPv4
//     non-first fragment) parses OK with roce_class == kNone: the dataplane forwards it untouched.
//   * A frame whose headers contradict its length (truncated Ethernet/VLAN/IP/UDP/BTH or extension
//     headers, IPv4 IHL < 5, IP total length beyond the frame, UDP length beyond the IP payload, no
//     room for the 4-byte ICRC) returns a specific ParseError. The desc is then only partially
//     valid.
//   * Ethernet padding after the IP datagram is allowed (IP total length < frame length).
#pragma once

#include <cstddef>
#include <cstdint>

namespace heddle::pkt {

inline constexpr uint16_t kRoceV2UdpPort = 4791;
inline constexpr int kMaxVlanTags = 2;
inline constexpr int kIcrcLen = 4;

// X(enumerator, "stable-name", "one-line description"). Every way a frame can fail to parse; the
// dataplane's drop reasons start with this list (dataplane/pipeline/stats.h).
#define HEDDLE_FOREACH_PARSE_FAILURE(X)                                                       \
  X(kEthTruncated, "eth-truncated", "frame shorter than an Ethernet header")                  \
  X(kVlanTruncated, "vlan-truncated", "802.1Q tag cut short")                                 \
  X(kVlanTooMany, "vlan-too-many", "more than two 802.1Q/802.1ad tags")                       \
  X(kIpv4Truncated, "ipv4-truncated", "IPv4 header cut short")                                \
  X(kIpv4BadVersion, "ipv4-bad-version", "IPv4 ethertype but version != 4")                   \
  X(kIpv4BadIhl, "ipv4-bad-ihl", "IPv4 IHL < 5 or beyond the frame")                          \
  X(kIpv4BadLength, "ipv4-bad-length", "IPv4 total length < IHL or beyond the frame")         \
  X(kIpv6Truncated, "ipv6-truncated", "IPv6 header cut short")                                \
  X(kIpv6BadVersion, "ipv6-bad-version", "IPv6 ethertype but version != 6")                   \
  X(kIpv6BadLength, "ipv6-bad-length", "IPv6 payload length beyond the frame")                \
  X(kUdpTruncated, "udp-truncated", "UDP header cut short")                                   \
  X(kUdpBadLength, "udp-bad-length", "UDP length < 8 or beyond the IP payload")               \
  X(kBthTruncated, "bth-truncated", "RoCEv2 datagram shorter than BTH + ICRC")                \
  X(kBthBadVersion, "bth-bad-version", "BTH transport header version != 0")                   \
  X(kRoceExtTruncated, "roce-ext-truncated", "RETH/AETH/DETH/ImmDt/IETH/AtomicETH cut short") \
  X(kRoceNoIcrc, "roce-no-icrc", "no room for the 4-byte ICRC after the headers")

#define HEDDLE_FOREACH_PARSE_ERROR(X) \
  X(kOk, "ok", "parsed")              \
  HEDDLE_FOREACH_PARSE_FAILURE(X)

enum class ParseError : uint8_t {
#define HEDDLE_PKT_ENUM_(e, n, d) e,
  HEDDLE_FOREACH_PARSE_ERROR(HEDDLE_PKT_ENUM_)
#undef HEDDLE_PKT_ENUM_
      kCount
};
// "ipv4-truncated"
constexpr const char* ParseErrorName(ParseError e) {
  constexpr const char* kNames[] = {
#define HEDDLE_PKT_NAME_(e, n, d) n,
      HEDDLE_FOREACH_PARSE_ERROR(HEDDLE_PKT_NAME_)
#undef HEDDLE_PKT_NAME_
  };
  return static_cast<size_t>(e) < sizeof(kNames) / sizeof(kNames[0])
             ? kNames[static_cast<size_t>(e)]
             : "invalid";
}
// One line for the CLI and metrics help.
constexpr const char* ParseErrorDescription(ParseError e) {
  constexpr const char* kDescs[] = {
#define HEDDLE_PKT_DESC_(e, n, d) d,
      HEDDLE_FOREACH_PARSE_ERROR(HEDDLE_PKT_DESC_)
#undef HEDDLE_PKT_DESC_
  };
  return static_cast<size_t>(e) < sizeof(kDescs) / sizeof(kDescs[0])
             ? kDescs[static_cast<size_t>(e)]
             : "invalid";
}

// Opcode classes for counting and for the STORM/PIN stages. kNone = not RoCEv2.
#define HEDDLE_FOREACH_ROCE_CLASS(X)                                             \
  X(kNone, "none", "not RoCEv2")                                                 \
  X(kSend, "send", "SEND first/middle/last/only (with imm/inval)")               \
  X(kWrite, "write", "RDMA WRITE first/middle/last/only (with imm)")             \
  X(kReadRequest, "read-request", "RDMA READ request")                           \
  X(kReadResponse, "read-response", "RDMA READ response first/middle/last/only") \
  X(kAck, "ack", "ACK / NAK (AETH only)")                                        \
  X(kAtomic, "atomic", "compare-swap / fetch-add")                               \
  X(kAtomicAck, "atomic-ack", "atomic acknowledge")                              \
  X(kCnp, "cnp", "congestion notification packet (opcode 0x81)")                 \
  X(kOther, "other", "other BTH opcodes (RD, XRC, resync, reserved)")

enum class RoceClass : uint8_t {
#define HEDDLE_PKT_ENUM_(e, n, d) e,
  HEDDLE_FOREACH_ROCE_CLASS(HEDDLE_PKT_ENUM_)
#undef HEDDLE_PKT_ENUM_
      kCount
};
constexpr const char* RoceClassName(RoceClass c) {
  constexpr const char* kNames[] = {
#define HEDDLE_PKT_NAME_(e, n, d) n,
      HEDDLE_FOREACH_ROCE_CLASS(HEDDLE_PKT_NAME_)
#undef HEDDLE_PKT_NAME_
  };
  return static_cast<size_t>(c) < sizeof(kNames) / sizeof(kNames[0])
             ? kNames[static_cast<size_t>(c)]
             : "invalid";
}

enum class L3 : uint8_t { kNone = 0, kIpv4 = 4, kIpv6 = 6 };

// Flags in PacketDesc::flags.
enum DescFlag : uint16_t {
  kFlagRoce = 1u << 0,        // UDP dport 4791 and a BTH parsed
  kFlagReth = 1u << 1,        // dma_length / RETH present
  kFlagAeth = 1u << 2,        // aeth present
  kFlagImm = 1u << 3,         // ImmDt present
  kFlagIeth = 1u << 4,        // IETH (send with invalidate) present
  kFlagDeth = 1u << 5,        // DETH (UD) present
  kFlagAtomicEth = 1u << 6,   // AtomicETH present
  kFlagAtomicAck = 1u << 7,   // AtomicAckETH present
  kFlagFirst = 1u << 8,       // first or only packet of a message
  kFlagLast = 1u << 9,        // last or only packet of a message
  kFlagAckReq = 1u << 10,     // BTH A bit
  kFlagSolicited = 1u << 11,  // BTH SE bit
  kFlagFecn = 1u << 12,       // BTH byte 4 bit 7
  kFlagBecn = 1u << 13,       // BTH byte 4 bit 6
  kFlagIpv4Options = 1u << 14,
  kFlagIpFragment = 1u << 15,  // IPv4 MF or non-zero fragment offset
};

// The compact result. All offsets are from the start of the frame. 48 bytes: the small fields
// share bytes (num_vlans/pad_count, dscp/ecn are bit-fields), so take them by value.
// Fields the frame does not have (no VLAN, not IP, not RoCE) are zero.
struct PacketDesc {
  uint16_t l3_off;       // IP header (for a non-IP frame: the first byte after the L2 headers)
  uint16_t l4_off;       // UDP header (valid if ip_proto == 17 and not kFlagIpFragment)
  uint16_t bth_off;      // BTH (valid if kFlagRoce)
  uint16_t payload_off;  // first byte after all RoCE extension headers (for a CNP: after its
                         // 16 reserved bytes)
  uint16_t payload_len;  // bytes from payload_off to icrc_off (the PadCnt pad bytes included)
  uint16_t icrc_off;     // 4-byte ICRC
  uint16_t ip_len;       // bytes from l3_off to the end of the IP datagram (<= frame length)
  uint16_t ether_type;   // innermost ethertype
  uint16_t vlan_tci[kMaxVlanTags];  // outermost first
  uint16_t udp_sport;
  uint16_t flags;  // DescFlag bits
  uint16_t pkey;
  uint8_t num_vlans : 4;
  uint8_t pad_count : 4;  // BTH PadCnt
  L3 l3;
  uint8_t ip_proto;
  uint8_t dscp : 6;  // IPv4 TOS >> 2, IPv6 traffic class >> 2
  uint8_t ecn : 2;   // low 2 bits of TOS / traffic class
  uint8_t opcode;    // BTH opcode
  RoceClass roce_class;
  uint32_t dest_qp;     // 24 bits
  uint32_t psn;         // 24 bits
  uint32_t dma_length;  // RETH DMA length (kFlagReth)
  uint32_t aeth;        // AETH: syndrome << 24 | MSN (kFlagAeth)
};

// Parses one frame. Never reads outside [data, data+len); len may be 0 and data may then be null.
ParseError Parse(const uint8_t* data, size_t len, PacketDesc* out) noexcept;

// Parses a frame of `frame_len` bytes of which only the first `len` (>= the headers) are
// contiguous at `data`, as in a chained mbuf whose first segment holds the headers. Length fields
// are checked against frame_len; headers are read only within [data, data+len) (headers that
// straddle the end of the contiguous part count as truncated). Offsets past `len` (payload, ICRC)
// then point into later segments: use IcrcOverHeaders()/IcrcContinue() there, not ComputeIcrc().
ParseError Parse(const uint8_t* data, size_t len, size_t frame_len, PacketDesc* out) noexcept;

// The RoCEv2 ICRC of a parsed RoCE frame: CRC-32 over a 64-bit all-ones pseudo-LRH, the IP header
// with its variant fields set to ones (IPv4 TOS, TTL, checksum; IPv6 traffic class, flow label, hop
// limit), the UDP header with its checksum set to ones, BTH with byte 4 set to ones, and everything
// up to the ICRC. Returned as the value that sits on the wire read as a little-endian uint32.
// `d` must come from Parse() of this very frame returning kOk with kFlagRoce; for a desc without
// kFlagRoce both functions return 0 and read nothing (so VerifyIcrc() is then trivially true:
// test kFlagRoce first).
uint32_t ComputeIcrc(const uint8_t* data, const PacketDesc& d) noexcept;
// The ICRC stored in the frame, read little-endian.
uint32_t StoredIcrc(const uint8_t* data, const PacketDesc& d) noexcept;
inline bool VerifyIcrc(const uint8_t* data, const PacketDesc& d) noexcept {
  return ComputeIcrc(data, d) == StoredIcrc(data, d);
}

// The ICRC in two steps, for frames whose bytes are not contiguous: IcrcOverHeaders() covers the
// pseudo-LRH and the masked IP/UDP/BTH headers (all within the contiguous part); IcrcContinue()
// then runs over the bytes from d.bth_off + 12 up to d.icrc_off, piece by piece, in order.
//   uint32_t c = IcrcOverHeaders(first, d);
//   for each piece: c = IcrcContinue(c, piece, piece_len);
//   c == ComputeIcrc(...) for the same frame laid out contiguously.
uint32_t IcrcOverHeaders(const uint8_t* data, const PacketDesc& d) noexcept;
uint32_t IcrcContinue(uint32_t crc, const uint8_t* bytes, size_t n) noexcept;

}  // namespace heddle::pkt
