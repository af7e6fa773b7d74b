// File: dataplane/pkt/builder.h
//
// An off-hot-path RoCEv2 frame builder for tests, tools (heddle-pktgen) and the simulator. It
// allocates and returns whole frames (no FCS): Ethernet with 0-2 VLAN tags, IPv4 (with options) or
// IPv6, UDP (checksum 0, as RoCEv2 NICs send it), BTH, the extension headers the opcode calls for
// (see DescribeOpcode() in roce.h), a payload padded to 4 bytes with BTH PadCnt set, and a correct
// IPv4 header checksum and ICRC. Non-RoCE frames (ARP, plain UDP) make traffic mixes.
//
//   heddle::pkt::FrameSpec f;             // MACs, addresses, VLANs, DSCP, UDP ports
//   heddle::pkt::RoceSpec r;
//   r.opcode = heddle::pkt::op::kWriteFirst;
//   r.dest_qp = 0x12;  r.psn = 100;  r.dma_length = 65536;  r.payload_len = 1024;
//   std::vector<uint8_t> frame = heddle::pkt::BuildRoce(f, r);
//
// Not for the dataplane: it allocates. The builder shares only the opcode table with the parser;
// its output is cross-checked against scapy and tshark (tests/data/scapy_*, ctest pkt_* tests).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dataplane/pkt/roce.h"

namespace heddle::pkt {

using MacAddr = std::array<uint8_t, 6>;

struct VlanTag {
  uint16_t tpid = kEtherTypeVlan;  // kEtherTypeVlan (802.1Q) or kEtherTypeQinQ (802.1ad)
  uint16_t tci = 0;                // PCP << 13 | DEI << 12 | VID
};

// Everything below BTH.
struct FrameSpec {
  MacAddr dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  MacAddr src_mac = {0x02, 0, 0, 0, 0, 0x01};
  std::vector<VlanTag> vlans;  // outermost first; at most kMaxVlanTags
  bool ipv6 = false;
  std::array<uint8_t, 4> src_ip4 = {10, 0, 0, 1};
  std::array<uint8_t, 4> dst_ip4 = {10, 0, 0, 2};
  std::array<uint8_t, 16> src_ip6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  std::array<uint8_t, 16> dst_ip6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  uint8_t dscp = 0;                   // 6 bits
  uint8_t ecn = 0;                    // 2 bits
  uint8_t ttl = 64;                   // IPv4 TTL or IPv6 hop limit
  uint32_t flow_label = 0;            // IPv6, 20 bits
  uint16_t ip_id = 0;                 // IPv4 identification
  bool dont_fragment = true;          // IPv4 DF
  std::vector<uint8_t> ipv4_options;  // zero-padded to a multiple of 4; at most 40 bytes
  uint16_t udp_sport = 0xc000;
  uint16_t udp_dport = kRoceV2UdpPort;
  size_t min_frame_len = 60;  // Ethernet minimum without FCS; shorter frames get zero padding
};

// BTH and the extension headers. Fields for headers the opcode does not carry are ignored.
struct RoceSpec {
  uint8_t opcode = op::kSendOnly;
  bool solicited = false;
  bool mig_req = true;
  bool ack_req = false;
  bool fecn = false;
  bool becn = false;
  uint8_t tver = 0;  // BTH transport version; anything but 0 is malformed
  uint16_t pkey = 0xffff;
  uint32_t dest_qp = 0;  // 24 bits
  uint32_t psn = 0;      // 24 bits
  // RETH (WRITE first/only, READ request); AtomicETH uses va and rkey too.
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_length = 0;
  // AETH.
  uint8_t syndrome = 0;
  uint32_t msn = 0;         // 24 bits
  uint32_t imm = 0;         // ImmDt
  uint32_t inval_rkey = 0;  // IETH
  uint32_t qkey = 0;        // DETH
  uint32_t src_qp = 0;      // DETH, 24 bits
  uint64_t swap_add = 0;    // AtomicETH
  uint64_t compare = 0;     // AtomicETH
  uint64_t orig_data = 0;   // AtomicAckETH
  // Payload: `payload` if non-empty, else payload_len bytes of (payload_seed + i).
  std::vector<uint8_t> payload;
  uint32_t payload_len = 0;
  uint8_t payload_seed = 0;
};

// A complete RoCEv2 frame with correct lengths, IPv4 checksum, PadCnt and ICRC.
std::vector<uint8_t> BuildRoce(const FrameSpec& frame, const RoceSpec& roce);

// Bytes BuildRoce() adds around a payload of `payload_len` bytes before min_frame_len padding:
// L2 + L3 + UDP + BTH + extension headers + pad + ICRC.
size_t RoceFrameLen(const FrameSpec& frame, uint8_t opcode, size_t payload_len);

// A UDP datagram to frame.udp_dport (not RoCE unless that is 4791) with a zero checksum.
std::vector<uint8_t> BuildUdp(const FrameSpec& frame, std::span<const uint8_t> payload);

// A broadcast ARP request "who has dst_ip4, tell src_ip4" from src_mac (IPv4 fields only).
std::vector<uint8_t> BuildArpRequest(const FrameSpec& frame);

// Recomputes the ICRC of a RoCE frame in place (after an edit). False if it does not parse as
// RoCE.
bool RewriteIcrc(std::vector<uint8_t>& frame);

// The RFC 791 header checksum of `len` bytes (checksum field included as it is).
uint16_t Ipv4HeaderChecksum(const uint8_t* header, size_t len);

}  // namespace heddle::pkt
