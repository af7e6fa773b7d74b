// File: dataplane/storm/tracker.cc
#include "dataplane/storm/tracker.h"

#include <algorithm>

namespace heddle::storm {
RequestTracker::RequestTracker(const TrackerOptions& options)
    : mtu_(std::max<uint32_t>(options.mtu, 256)) {}

AckKind DecodeAck(const pkt::PacketDesc& desc, uint32_t* acked_psn) {
  switch (desc.roce_class) {
    case pkt::RoceClass::kAck:
    case pkt::RoceClass::kAtomicAck: {
      if (!(desc.flags & pkt::kFlagAeth)) return AckKind::kMalformed;
      const uint8_t syndrome_type = (desc.aeth >> 29) & 0x7;
      // 000 ACK: PSN acknowledged. 001 RNR NAK, 011 NAK: PSN is the one not accepted.
      if (syndrome_type == 0) {
        *acked_psn = desc.psn & kPsnMask;
      } else if (syndrome_type == 1 || syndrome_type == 3) {
        *acked_psn = (desc.psn - 1) & kPsnMask;
      } else {
        return AckKind::kMalformed;  // reserved
      }
      return AckKind::kAck;
    }
    case pkt::RoceClass::kReadResponse:
      *acked_psn = desc.psn & kPsnMask;
      return AckKind::kAck;
    default:
      return AckKind::kNone;
  }
}

uint32_t LastAnswerablePsn(const QpEntry& e, uint32_t mtu) {
  uint32_t last = (e.next_psn - 1) & kPsnMask;
  if (static_cast<RequestKind>(e.kind) == RequestKind::kRead && (e.flags & kEntrySizeKnown)) {
    // At most 2^22 responses: the span stays well inside the 2^23 comparison window.
    mtu = std::max(mtu, kMinRoceMtu);
    const uint64_t responses =
        std::clamp<uint64_t>((uint64_t{e.size} + mtu - 1) / mtu, 1, uint64_t{1} << 22);
    const uint32_t read_last = PsnAdd(e.first_psn, static_cast<uint32_t>(responses - 1));
    if (PsnAfter(read_last, last)) last = read_last;
  }
  return last;
}

uint32_t UnacknowledgedPackets(const QpEntry& e, uint32_t mtu) {
  if (e.acked_psn == kNoPsn || !(e.flags & kEntryPsnValid)) return kNoPsn;
  const uint32_t d = (LastAnswerablePsn(e, mtu) - e.acked_psn) & kPsnMask;
  return d < (1u << 23) ? d : 0;  // acknowledged beyond it: nothing outstanding
}

bool RequestTracker::OnResponsePacket(QpEntry& e, const pkt::PacketDesc& desc) {
  uint32_t acked;
  if (DecodeAck(desc, &acked) != AckKind::kAck) return false;
  const uint32_t current = LoadAckedPsn(e);
  if (current != kNoPsn && !PsnAfter(acked, current)) return false;
  StoreAckedPsn(e, acked);
  ++counters_.acks;
  return true;
}

AckOutcome RequestTracker::ApplyAck(QpEntry& e, uint32_t acked) {
  acked &= kPsnMask;
  const uint32_t current = LoadAckedPsn(e);
  if (e.flags & kEntryPsnValid) {
    const uint32_t last = LastAnswerablePsn(e);
    if (PsnAfter(acked, last)) {
      ++counters_.acks_ahead;
      return AckOutcome::kAhead;
    }
    // A current value after `last` belongs to no PSN this QP sent: any answerable one replaces it.
    if (current != kNoPsn && !PsnAfter(current, last) && !PsnAfter(acked, current)) {
      ++counters_.acks_old;
      return AckOutcome::kOld;
    }
  } else if (current != kNoPsn && !PsnAfter(acked, current)) {
    ++counters_.acks_old;
    return AckOutcome::kOld;
  }
  StoreAckedPsn(e, acked);
  ++counters_.acks;
  return AckOutcome::kAdvanced;
}

}  // namespace heddle::storm
