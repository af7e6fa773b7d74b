// File: dataplane/storm/tracker.cc
#include "dataplane/storm/tracker.h"

#include <algorithm>

namespace heddle::storm {
namespace {

RequestKind KindOf(pkt::RoceClass c) {
  switch (c) {
    case pkt::RoceClass::kWrite:
      return RequestKind::kWrite;
    case pkt::RoceClass::kReadRequest:
      return RequestKind::kRead;
    case pkt::RoceClass::kSend:
      return RequestKind::kSend;
    case pkt::RoceClass::kAtomic:
      return RequestKind::kAtomic;
    default:
      return RequestKind::kNone;
  }
}

inline uint32_t SaturatingAdd(uint32_t a, uint32_t b) {
  const uint32_t s = a + b;
  return s < a ? UINT32_MAX : s;
}

}  // namespace

RequestTracker::RequestTracker(const TrackerOptions& options)
    : mtu_(std::max<uint32_t>(options.mtu, 256)) {}

void RequestTracker::StartRequest(QpEntry& e, const pkt::PacketDesc& desc, RequestKind kind,
                                  TrackResult* r) {
  const uint32_t psn = desc.psn & kPsnMask;
  e.kind = static_cast<uint8_t>(kind);
  e.flags = static_cast<uint8_t>((e.flags & kEntryPsnValid) | kEntryInProgress);
  e.size = 0;
  e.sent = 0;
  e.first_psn = psn;
  e.end_psn = psn;
  switch (kind) {
    case RequestKind::kWrite:
    case RequestKind::kRead:
      if (desc.flags & pkt::kFlagReth) {
        e.size = desc.dma_length;
        e.flags |= kEntrySizeKnown;
        if (desc.dma_length > kMaxMessageBytes) ++counters_.bogus_length;
        r->size_sample = desc.dma_length;
      }
      break;
    case RequestKind::kAtomic:
      e.size = 8;
      e.flags |= kEntrySizeKnown;
      r->size_sample = 8;
      break;
    default:
      break;
  }
  // A WRITE's last PSN follows from its size; beyond 2^23 packets a 24-bit PSN cannot say it.
  // (A READ request is one packet on this direction; its responses consume the PSN range.)
  if (kind == RequestKind::kWrite && (e.flags & kEntrySizeKnown)) {
    const uint64_t packets = std::max<uint64_t>(1, (uint64_t{e.size} + mtu_ - 1) / mtu_);
    if (packets < (1u << 23)) {
      e.end_psn = PsnAdd(psn, static_cast<uint32_t>(packets - 1));
      e.flags |= kEntryEndPsnValid;
    }
  } else if (kind == RequestKind::kAtomic || kind == RequestKind::kRead ||
             (desc.flags & pkt::kFlagLast)) {
    e.flags |= kEntryEndPsnValid;
  }
}

TrackResult RequestTracker::OnRequestPacket(QpEntry& e, const pkt::PacketDesc& desc) {
  TrackResult r;
  const RequestKind kind = KindOf(desc.roce_class);
  if (kind == RequestKind::kNone) return r;
  const uint32_t psn = desc.psn & kPsnMask;

  if ((e.flags & kEntryPsnValid) && !PsnAfter(psn, (e.next_psn - 1) & kPsnMask)) {
    ++counters_.duplicates;
    r.outcome = TrackOutcome::kDuplicate;
    r.sent_before = e.sent;
    return r;
  }
  if ((e.flags & kEntryPsnValid) && psn != e.next_psn) ++counters_.psn_jumps;

  const bool first = desc.flags & pkt::kFlagFirst;
  const bool in_progress = e.flags & kEntryInProgress;
  if (first) {
    if (in_progress) ++counters_.abandoned;
    StartRequest(e, desc, kind, &r);
    ++counters_.requests_started;
    r.outcome = TrackOutcome::kStart;
  } else if (!in_progress || static_cast<RequestKind>(e.kind) != kind) {
    // Picked up mid-message (or a middle of another kind after a lost first/last): the size is
    // unknown from here, even for a WRITE whose RETH we missed.
    if (in_progress) ++counters_.abandoned;
    StartRequest(e, desc, kind, &r);
    e.flags &= static_cast<uint8_t>(~(kEntrySizeKnown | kEntryEndPsnValid));
    e.size = 0;
    r.size_sample = 0;
    ++counters_.orphans;
    r.outcome = TrackOutcome::kOrphan;
  } else {
    r.outcome = TrackOutcome::kContinue;
  }

  r.sent_before = e.sent;
  // A READ request carries no data on this direction; its RETH length is its size.
  if (kind != RequestKind::kRead) e.sent = SaturatingAdd(e.sent, DataBytes(desc));
  if ((e.flags & kEntrySizeKnown) && kind != RequestKind::kAtomic && e.sent > e.size &&
      r.sent_before <= e.size) {
    ++counters_.overrun;
  }
  e.next_psn = PsnAdd(psn, 1);
  e.flags |= kEntryPsnValid;

  const bool last =
      kind == RequestKind::kRead || kind == RequestKind::kAtomic || (desc.flags & pkt::kFlagLast);
  if (last) {
    if (kind == RequestKind::kSend && !(e.flags & kEntrySizeKnown)) {
      e.size = e.sent;
      e.flags |= kEntrySizeKnown;
      if (r.outcome != TrackOutcome::kOrphan) r.size_sample = e.sent;
    }
    e.end_psn = psn;
    e.flags |= kEntryEndPsnValid;
    e.flags &= static_cast<uint8_t>(~kEntryInProgress);
    ++e.completed;
    ++counters_.requests_completed;
    r.completed = true;
  }
  return r;
}

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
