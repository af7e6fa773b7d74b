// File: dataplane/pkt/roce.h
//
// RoCEv2 wire constants shared by the parser, the frame builder and the stages: header lengths,
// the IBTA BTH opcodes heddle understands, and DescribeOpcode(), which says for one opcode which
// class it belongs to, which extension headers follow BTH (in wire order: DETH, RETH, AtomicETH,
// AETH, AtomicAckETH, ImmDt, IETH) and whether it starts or ends a message.
//
//   const heddle::pkt::OpcodeInfo info = heddle::pkt::DescribeOpcode(bth[0]);
//   if (info.flags & heddle::pkt::kFlagReth) { ... RETH at bth + kBthLen + ... }
//
// RD (0x40-0x5F), XRC (0xA0-0xBF), the reserved and the vendor-specific opcodes are kOther with no
// extension headers: heddle forwards them without looking past BTH.
#pragma once

#include <cstdint>

#include "dataplane/pkt/parse.h"

namespace heddle::pkt {

inline constexpr int kEthHeaderLen = 14;
inline constexpr int kVlanTagLen = 4;
inline constexpr int kIpv4MinHeaderLen = 20;
inline constexpr int kIpv6HeaderLen = 40;
inline constexpr int kUdpHeaderLen = 8;
inline constexpr int kBthLen = 12;
inline constexpr int kRethLen = 16;
inline constexpr int kAethLen = 4;
inline constexpr int kImmDtLen = 4;
inline constexpr int kIethLen = 4;
inline constexpr int kDethLen = 8;
inline constexpr int kAtomicEthLen = 28;
inline constexpr int kAtomicAckEthLen = 8;
// A CNP carries 16 reserved bytes between BTH and the ICRC (RoCEv2 annex A17).
inline constexpr int kCnpReservedLen = 16;

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeQinQ = 0x88a8;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
inline constexpr uint8_t kIpProtoUdp = 17;

// BTH opcodes (IBTA vol. 1, table 38). The upper three bits select the transport.
namespace op {
inline constexpr uint8_t kRc = 0x00;
inline constexpr uint8_t kUc = 0x20;
inline constexpr uint8_t kRd = 0x40;
inline constexpr uint8_t kUd = 0x60;
inline constexpr uint8_t kCnpGroup = 0x80;
inline constexpr uint8_t kXrc = 0xa0;
// Low five bits, valid for RC (and for UC up to kWriteOnlyImm).
inline constexpr uint8_t kSendFirst = 0x00;
inline constexpr uint8_t kSendMiddle = 0x01;
inline constexpr uint8_t kSendLast = 0x02;
inline constexpr uint8_t kSendLastImm = 0x03;
inline constexpr uint8_t kSendOnly = 0x04;
inline constexpr uint8_t kSendOnlyImm = 0x05;
inline constexpr uint8_t kWriteFirst = 0x06;
inline constexpr uint8_t kWriteMiddle = 0x07;
inline constexpr uint8_t kWriteLast = 0x08;
inline constexpr uint8_t kWriteLastImm = 0x09;
inline constexpr uint8_t kWriteOnly = 0x0a;
inline constexpr uint8_t kWriteOnlyImm = 0x0b;
inline constexpr uint8_t kReadRequest = 0x0c;
inline constexpr uint8_t kReadResponseFirst = 0x0d;
inline constexpr uint8_t kReadResponseMiddle = 0x0e;
inline constexpr uint8_t kReadResponseLast = 0x0f;
inline constexpr uint8_t kReadResponseOnly = 0x10;
inline constexpr uint8_t kAcknowledge = 0x11;
inline constexpr uint8_t kAtomicAcknowledge = 0x12;
inline constexpr uint8_t kCompareSwap = 0x13;
inline constexpr uint8_t kFetchAdd = 0x14;
inline constexpr uint8_t kSendLastInval = 0x16;
inline constexpr uint8_t kSendOnlyInval = 0x17;
// Full opcodes outside RC.
inline constexpr uint8_t kUdSendOnly = kUd | kSendOnly;        // 0x64
inline constexpr uint8_t kUdSendOnlyImm = kUd | kSendOnlyImm;  // 0x65
inline constexpr uint8_t kCnp = 0x81;
}  // namespace op

// What one opcode means on the wire.
struct OpcodeInfo {
  RoceClass roce_class;
  uint16_t flags;   // DescFlag bits: kFlagReth..kFlagAtomicAck for the headers, kFlagFirst/Last
  uint8_t ext_len;  // bytes of extension headers between BTH and the payload
};

namespace internal {
constexpr OpcodeInfo MakeInfo(RoceClass c, uint16_t flags) {
  uint8_t len = 0;
  if (flags & kFlagDeth) len += kDethLen;
  if (flags & kFlagReth) len += kRethLen;
  if (flags & kFlagAtomicEth) len += kAtomicEthLen;
  if (flags & kFlagAeth) len += kAethLen;
  if (flags & kFlagAtomicAck) len += kAtomicAckEthLen;
  if (flags & kFlagImm) len += kImmDtLen;
  if (flags & kFlagIeth) len += kIethLen;
  return OpcodeInfo{c, flags, len};
}
// SEND and WRITE opcodes common to RC and UC (low five bits 0x00-0x0b).
constexpr OpcodeInfo SendWriteInfo(uint8_t low) {
  constexpr uint16_t F = kFlagFirst, L = kFlagLast;
  switch (low) {
    case op::kSendFirst:
      return MakeInfo(RoceClass::kSend, F);
    case op::kSendMiddle:
      return MakeInfo(RoceClass::kSend, 0);
    case op::kSendLast:
      return MakeInfo(RoceClass::kSend, L);
    case op::kSendLastImm:
      return MakeInfo(RoceClass::kSend, L | kFlagImm);
    case op::kSendOnly:
      return MakeInfo(RoceClass::kSend, F | L);
    case op::kSendOnlyImm:
      return MakeInfo(RoceClass::kSend, F | L | kFlagImm);
    case op::kWriteFirst:
      return MakeInfo(RoceClass::kWrite, F | kFlagReth);
    case op::kWriteMiddle:
      return MakeInfo(RoceClass::kWrite, 0);
    case op::kWriteLast:
      return MakeInfo(RoceClass::kWrite, L);
    case op::kWriteLastImm:
      return MakeInfo(RoceClass::kWrite, L | kFlagImm);
    case op::kWriteOnly:
      return MakeInfo(RoceClass::kWrite, F | L | kFlagReth);
    case op::kWriteOnlyImm:
      return MakeInfo(RoceClass::kWrite, F | L | kFlagReth | kFlagImm);
    default:
      return MakeInfo(RoceClass::kOther, 0);
  }
}
}  // namespace internal

constexpr OpcodeInfo DescribeOpcode(uint8_t opcode) {
  constexpr uint16_t F = kFlagFirst, L = kFlagLast;
  const uint8_t low = opcode & 0x1f;
  switch (opcode & 0xe0) {
    case op::kRc:
      if (low <= op::kWriteOnlyImm) return internal::SendWriteInfo(low);
      switch (low) {
        case op::kReadRequest:
          return internal::MakeInfo(RoceClass::kReadRequest, F | L | kFlagReth);
        case op::kReadResponseFirst:
          return internal::MakeInfo(RoceClass::kReadResponse, F | kFlagAeth);
        case op::kReadResponseMiddle:
          return internal::MakeInfo(RoceClass::kReadResponse, 0);
        case op::kReadResponseLast:
          return internal::MakeInfo(RoceClass::kReadResponse, L | kFlagAeth);
        case op::kReadResponseOnly:
          return internal::MakeInfo(RoceClass::kReadResponse, F | L | kFlagAeth);
        case op::kAcknowledge:
          return internal::MakeInfo(RoceClass::kAck, F | L | kFlagAeth);
        case op::kAtomicAcknowledge:
          return internal::MakeInfo(RoceClass::kAtomicAck, F | L | kFlagAeth | kFlagAtomicAck);
        case op::kCompareSwap:
        case op::kFetchAdd:
          return internal::MakeInfo(RoceClass::kAtomic, F | L | kFlagAtomicEth);
        case op::kSendLastInval:
          return internal::MakeInfo(RoceClass::kSend, L | kFlagIeth);
        case op::kSendOnlyInval:
          return internal::MakeInfo(RoceClass::kSend, F | L | kFlagIeth);
        default:
          return internal::MakeInfo(RoceClass::kOther, 0);
      }
    case op::kUc:
      return low <= op::kWriteOnlyImm ? internal::SendWriteInfo(low)
                                      : internal::MakeInfo(RoceClass::kOther, 0);
    case op::kUd:
      if (opcode == op::kUdSendOnly) return internal::MakeInfo(RoceClass::kSend, F | L | kFlagDeth);
      if (opcode == op::kUdSendOnlyImm) {
        return internal::MakeInfo(RoceClass::kSend, F | L | kFlagDeth | kFlagImm);
      }
      return internal::MakeInfo(RoceClass::kOther, 0);
    default:
      if (opcode == op::kCnp) return OpcodeInfo{RoceClass::kCnp, F | L, kCnpReservedLen};
      return internal::MakeInfo(RoceClass::kOther, 0);
  }
}

// "RC_RDMA_WRITE_FIRST", "UD_SEND_ONLY", "CNP" (scapy's contrib.roce spelling); every opcode
// DescribeOpcode() calls kOther is "OTHER".
const char* OpcodeName(uint8_t opcode);

}  // namespace heddle::pkt
