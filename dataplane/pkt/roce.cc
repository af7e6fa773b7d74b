// File: dataplane/pkt/roce.cc
#include "dataplane/pkt/roce.h"

namespace heddle::pkt {

const char* OpcodeName(uint8_t opcode) {
  if (opcode == op::kCnp) return "CNP";
  const OpcodeInfo info = DescribeOpcode(opcode);
  if (info.roce_class == RoceClass::kOther) return "OTHER";
  // DescribeOpcode() only knows RC 0x00-0x17 (not 0x15), UC 0x20-0x2b and UD 0x64/0x65, so the
  // index below is in range.
  const uint8_t low = opcode & 0x1f;
  switch (opcode & 0xe0) {
    case op::kRc: {
      static constexpr const char* kRcNames[] = {
          "RC_SEND_FIRST",
          "RC_SEND_MIDDLE",
          "RC_SEND_LAST",
          "RC_SEND_LAST_WITH_IMMEDIATE",
          "RC_SEND_ONLY",
          "RC_SEND_ONLY_WITH_IMMEDIATE",
          "RC_RDMA_WRITE_FIRST",
          "RC_RDMA_WRITE_MIDDLE",
          "RC_RDMA_WRITE_LAST",
          "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
          "RC_RDMA_WRITE_ONLY",
          "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
          "RC_RDMA_READ_REQUEST",
          "RC_RDMA_READ_RESPONSE_FIRST",
          "RC_RDMA_READ_RESPONSE_MIDDLE",
          "RC_RDMA_READ_RESPONSE_LAST",
          "RC_RDMA_READ_RESPONSE_ONLY",
          "RC_ACKNOWLEDGE",
          "RC_ATOMIC_ACKNOWLEDGE",
          "RC_COMPARE_SWAP",
          "RC_FETCH_ADD",
          nullptr,
          "RC_SEND_LAST_WITH_INVALIDATE",
          "RC_SEND_ONLY_WITH_INVALIDATE",
      };
      return kRcNames[low];
    }
    case op::kUc: {
      static constexpr const char* kUcNames[] = {
          "UC_SEND_FIRST",       "UC_SEND_MIDDLE",
          "UC_SEND_LAST",        "UC_SEND_LAST_WITH_IMMEDIATE",
          "UC_SEND_ONLY",        "UC_SEND_ONLY_WITH_IMMEDIATE",
          "UC_RDMA_WRITE_FIRST", "UC_RDMA_WRITE_MIDDLE",
          "UC_RDMA_WRITE_LAST",  "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
          "UC_RDMA_WRITE_ONLY",  "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
      };
      return kUcNames[low];
    }
    default:
      return opcode == op::kUdSendOnly ? "UD_SEND_ONLY" : "UD_SEND_ONLY_WITH_IMMEDIATE";
  }
}

}  // namespace heddle::pkt
