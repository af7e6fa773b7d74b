// File: dataplane/storm/tracker.cc
#include "dataplane/storm/tracker.h"

#include <algorithm>

namespace heddle::storm {
RequestTracker::RequestTracker(const TrackerOptions& options)
    : mtu_(std::max<uint32_t>(options.mtu, 256)) {}

bool RequestTracker::OnResponsePacket(QpEntry& e, const pkt::PacketDesc& desc) {
  uint32_t acked;
  switch (desc.roce_class) {
    case pkt::RoceClass::kAck:
    case pkt::RoceClass::kAtomicAck: {
      if (!(desc.flags & pkt::kFlagAeth)) return false;
      const uint8_t syndrome_type = (desc.aeth >> 29) & 0x7;
      // 000 ACK: PSN acknowledged. 001 RNR NAK, 011 NAK: PSN is the one not accepted.
      if (syndrome_type == 0) {
        acked = desc.psn & kPsnMask;
      } else if (syndrome_type == 1 || syndrome_type == 3) {
        acked = (desc.psn - 1) & kPsnMask;
      } else {
        return false;  // reserved
      }
      break;
    }
    case pkt::RoceClass::kReadResponse:
      acked = desc.psn & kPsnMask;
      break;
    default:
      return false;
  }
  const uint32_t current = LoadAckedPsn(e);
  if (current != kNoPsn && !PsnAfter(acked, current)) return false;
  StoreAckedPsn(e, acked);
  ++counters_.acks;
  return true;
}

}  // namespace heddle::storm
