// File: dataplane/storm/tracker.h
//
// Request tracking (docs/storm.md §1-§2): from the request-direction packets of one QP it keeps
// the current RDMA request's kind, size, bytes sent and PSN window in the QP's QpEntry, and from
// the response direction it records the highest acknowledged PSN.
//
//   heddle::storm::RequestTracker tracker({.mtu = 4096});
//   heddle::storm::TrackResult t = tracker.OnRequestPacket(*entry, desc);
//   uint8_t level = heddle::storm::TagPacket(config, entry, desc, t, backlog, mtu);  // levels.h
//   if (t.size_sample) histogram.Add(t.size_sample);
//
// PSNs are 24-bit and compared modulo 2^24. A packet whose PSN is not after next_psn - 1 is a
// duplicate or retransmission: it changes no accounting. A forward jump advances next_psn; `sent`
// counts only payload bytes of packets actually seen, each PSN at most once.
//
// A RequestTracker holds only configuration and per-worker counters; all per-QP state is in the
// QpEntry. Hot path: no allocation, no locks, no exceptions.
#pragma once

#include <algorithm>
#include <cstdint>

#include "dataplane/pkt/parse.h"
#include "dataplane/storm/qp_table.h"

namespace heddle::storm {

// True if a is after b modulo 2^24 (a - b in (0, 2^23)).
constexpr bool PsnAfter(uint32_t a, uint32_t b) {
  const uint32_t d = (a - b) & kPsnMask;
  return d != 0 && d < (1u << 23);
}
constexpr uint32_t PsnAdd(uint32_t a, uint32_t n) { return (a + n) & kPsnMask; }

// The largest RDMA message (IBTA: 2^31 bytes). A RETH length above it is counted as bogus but
// still tracked (the level treats it as huge).
inline constexpr uint32_t kMaxMessageBytes = 1u << 31;

enum class TrackOutcome : uint8_t {
  kStart,       // first/only packet: a new request started (entry fields reset for it)
  kOrphan,      // a middle/last packet with no request in progress (entry created mid-message, or
                // its first packet lost): tracked as a request of unknown size from here
  kContinue,    // a later packet of the request in progress
  kDuplicate,   // PSN not after next_psn - 1: retransmission or duplicate; nothing accounted
  kNotTracked,  // not a request-direction data class (ACK, CNP, READ response, other, not RoCE)
};

struct TrackResult {
  TrackOutcome outcome = TrackOutcome::kNotTracked;
  bool completed = false;    // this packet ended the request (last/only)
  uint32_t sent_before = 0;  // entry.sent before this packet's payload was added
  // Non-zero when a request's size became known with this packet (RETH at the start of a WRITE
  // or READ, 8 for an atomic, the byte count at a SEND's last packet): feed the size histogram.
  uint32_t size_sample = 0;
};

struct TrackerOptions {
  uint32_t mtu = 4096;  // path MTU in payload bytes, for end_psn
};

struct TrackerCounters {
  uint64_t requests_started = 0;
  uint64_t requests_completed = 0;
  uint64_t orphans = 0;       // requests picked up mid-message
  uint64_t abandoned = 0;     // a request started while the previous one was in progress
  uint64_t duplicates = 0;    // packets with an old PSN (retransmissions, duplicates)
  uint64_t psn_jumps = 0;     // packets whose PSN was ahead of next_psn
  uint64_t bogus_length = 0;  // RETH DMA length > 2^31
  uint64_t overrun = 0;       // payload beyond a known request size
  uint64_t acks = 0;          // response packets that advanced acked_psn
  uint64_t acks_old = 0;      // ApplyAck: at or before acked_psn (duplicate, reordered, older)
  uint64_t acks_ahead = 0;    // ApplyAck: after every PSN the QP sent (not its response)
};

// What a response-direction packet acknowledges (DecodeAck).
enum class AckKind : uint8_t {
  kNone,       // not an acknowledging class: request classes, CNP, other
  kAck,        // acknowledges up to *acked_psn: ACK, NAK, atomic ACK, READ response
  kMalformed,  // an ACK or atomic ACK without AETH, or with a reserved AETH syndrome
};

// The PSN up to which a response acknowledges its QP's requests: an ACK (AETH syndrome 000) or
// an atomic ACK its PSN; a NAK (RNR 001, NAK 011) PSN - 1, the packets before the one refused; a
// READ response (any of first/middle/last/only) its PSN, since the responder answers in order.
AckKind DecodeAck(const pkt::PacketDesc& desc, uint32_t* acked_psn);

enum class AckOutcome : uint8_t {
  kAdvanced,  // acked_psn moved forward
  kOld,       // at or before acked_psn (a duplicate, reordered or older ACK): nothing changed
  kAhead,     // after every PSN the QP sent: not a response to it (ignored)
};

// The smallest RoCE path MTU: the most packets a message can take.
inline constexpr uint32_t kMinRoceMtu = 256;

// The last PSN a response to the QP's requests so far may carry: next_psn - 1, or for a READ in
// the current request the last of its responses, ceil(size / mtu) of them (the responder's MTU
// is not seen on the request side: the default, the smallest MTU, gives an upper bound). Needs
// kEntryPsnValid.
uint32_t LastAnswerablePsn(const QpEntry& e, uint32_t mtu = kMinRoceMtu);

// Packets of the QP not yet acknowledged: request packets sent, and READ responses expected at
// `mtu`, after acked_psn. 0 when everything is acknowledged; kNoPsn when nothing was ever
// acknowledged (no response joined) or no request was seen. Owner only (plain reads).
uint32_t UnacknowledgedPackets(const QpEntry& e, uint32_t mtu);

class RequestTracker {
 public:
  explicit RequestTracker(const TrackerOptions& options = {});

  // A packet of the request direction (host -> uplink) on the entry of its QP. Updates kind,
  // size, sent, first/next/end PSN, completed, flags. Never touches level (TagPacket does).
  // Inline: it runs for every request packet.
  TrackResult OnRequestPacket(QpEntry& entry, const pkt::PacketDesc& desc);

  // A packet of the response direction. ACKs (and READ responses / atomic ACKs, which acknowledge
  // implicitly) advance acked_psn to their PSN; NAKs (sequence error, RNR) to PSN - 1. The only
  // store is a relaxed atomic one to acked_psn, so it may run on another worker than
  // OnRequestPacket for the same entry. Returns true if acked_psn advanced.
  bool OnResponsePacket(QpEntry& entry, const pkt::PacketDesc& desc);

  // The response join (docs/storm.md §6.1): `acked_psn` (from DecodeAck) applied to the QP's
  // request entry by the worker that owns it — the only writer of its request fields, so the
  // acknowledgement can be checked against what the QP sent. It advances acked_psn when the PSN
  // is after it and not after LastAnswerablePsn(); an acked_psn that is itself after that PSN
  // (left by an earlier incarnation of the QP, whose PSNs started elsewhere) is replaced. PSNs
  // compare modulo 2^24. Relaxed atomic store, like OnResponsePacket.
  AckOutcome ApplyAck(QpEntry& entry, uint32_t acked_psn);

  // OnRequestPacket()'s first case on its own, for callers that know more than it does (the
  // storm-tag stage's lean path): if `desc` is the next middle packet, in order, of the request of
  // kind `kind` in progress on `entry` — the caller has checked that it is neither a first nor a
  // last packet, and that `kind` is KindOf(desc.roce_class), a WRITE or a SEND — it accounts the
  // packet exactly as OnRequestPacket() would (outcome kContinue), stores sent before it in
  // *sent_before and returns true. Otherwise it changes nothing and returns false.
  bool TryContinue(QpEntry& entry, const pkt::PacketDesc& desc, RequestKind kind,
                   uint32_t* sent_before);

  // OnRequestPacket()'s one-packet case on its own, with the level, for the storm-tag stage's
  // lean path. The caller has checked that `desc` is a first and last packet and that `kind` is
  // KindOf(desc.roce_class), a WRITE or a SEND. If the QP has no request in progress and the PSN
  // is the expected one (or the QP's first), it accounts the packet exactly as OnRequestPacket()
  // would (outcome kStart, completed), except requests_started and requests_completed, which the
  // caller adds once per burst with CountOnePacketRequests(); then it stores
  // level_of(R) — R = RemainingBytes() of the new request before its packet, the request's size
  // or `unknown` (UnknownBytes() of the configuration) — in entry.level with kEntryLevelValid, as
  // TagPacket() would for a request that starts, and returns true with the level in *level and
  // TrackResult::size_sample in *size_sample. Otherwise it changes nothing and returns false.
  template <typename LevelOf>
  bool TryOnePacket(QpEntry& entry, const pkt::PacketDesc& desc, RequestKind kind, uint32_t unknown,
                    LevelOf level_of, uint8_t* level, uint32_t* size_sample);
  // Adds n requests started and completed (TryOnePacket()'s).
  void CountOnePacketRequests(uint32_t n) {
    counters_.requests_started += n;
    counters_.requests_completed += n;
  }

  const TrackerCounters& counters() const { return counters_; }
  uint32_t mtu() const { return mtu_; }

 private:
  uint32_t mtu_;
  TrackerCounters counters_;
};

// Data bytes of a packet: payload minus the BTH pad bytes.
inline uint32_t DataBytes(const pkt::PacketDesc& d) {
  return d.payload_len > d.pad_count ? d.payload_len - d.pad_count : 0;
}

// ---- Inline definitions (the per-packet path) ----

namespace tracker_internal {
constexpr RequestKind KindOf(pkt::RoceClass c) {
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
}  // namespace tracker_internal

[[gnu::always_inline]] inline bool RequestTracker::TryContinue(QpEntry& e,
                                                                const pkt::PacketDesc& desc,
                                                                RequestKind kind,
                                                                uint32_t* sent_before) {
  constexpr uint8_t kInOrder = kEntryPsnValid | kEntryInProgress;
  const uint32_t psn = desc.psn & kPsnMask;
  const uint8_t flags = e.flags;
  if ((flags & kInOrder) != kInOrder || psn != e.next_psn ||
      static_cast<RequestKind>(e.kind) != kind) {
    return false;
  }
  const uint32_t before = e.sent;
  const uint32_t sent = tracker_internal::SaturatingAdd(before, DataBytes(desc));
  if ((flags & kEntrySizeKnown) && sent > e.size && before <= e.size) [[unlikely]] {
    ++counters_.overrun;
  }
  e.sent = sent;
  e.next_psn = PsnAdd(psn, 1);
  *sent_before = before;
  return true;
}

template <typename LevelOf>
[[gnu::always_inline]] inline bool RequestTracker::TryOnePacket(QpEntry& e,
                                                                const pkt::PacketDesc& desc,
                                                                RequestKind kind, uint32_t unknown,
                                                                LevelOf level_of, uint8_t* level,
                                                                uint32_t* size_sample) {
  const uint32_t psn = desc.psn & kPsnMask;
  const uint8_t flags = e.flags;
  if ((flags & kEntryInProgress) || ((flags & kEntryPsnValid) && psn != e.next_psn)) {
    return false;
  }
  const uint32_t data = DataBytes(desc);
  uint32_t size;
  bool known;
  if (kind == RequestKind::kWrite) {
    known = desc.flags & pkt::kFlagReth;
    size = known ? desc.dma_length : 0;
    if (known) [[likely]] {
      if (size > kMaxMessageBytes) [[unlikely]]
        ++counters_.bogus_length;
      if (data > size) [[unlikely]]
        ++counters_.overrun;
    }
  } else {
    known = true;
    size = data;
  }
  // RemainingBytes() with nothing sent before the packet.
  const uint8_t l = level_of(known ? uint64_t{size} : uint64_t{unknown});
  e.kind = static_cast<uint8_t>(kind);
  e.level = l;
  e.flags = static_cast<uint8_t>(kEntryPsnValid | kEntryEndPsnValid | kEntryLevelValid |
                                 (known ? kEntrySizeKnown : 0));
  e.size = size;
  e.sent = data;
  e.first_psn = psn;
  e.end_psn = psn;
  e.next_psn = PsnAdd(psn, 1);
  ++e.completed;
  *level = l;
  *size_sample = known ? size : 0;
  return true;
}

// The entry's fields are read into locals and written back once: QpEntry's uint8_t fields may
// alias anything, so stores through the entry would make the compiler reload everything else.
[[gnu::always_inline]] inline TrackResult RequestTracker::OnRequestPacket(
    QpEntry& e, const pkt::PacketDesc& desc) {
  TrackResult r;
  const RequestKind kind = tracker_internal::KindOf(desc.roce_class);
  if (kind == RequestKind::kNone) return r;
  const uint32_t psn = desc.psn & kPsnMask;
  uint8_t flags = e.flags;
  uint32_t size = e.size;
  uint32_t sent = e.sent;
  const bool first = desc.flags & pkt::kFlagFirst;
  const bool last =
      kind == RequestKind::kRead || kind == RequestKind::kAtomic || (desc.flags & pkt::kFlagLast);

  // The common case of a multi-packet message: the next middle packet of the request in progress,
  // in order. Same accounting as below, fewer questions.
  if (!first && !last && TryContinue(e, desc, kind, &r.sent_before)) [[likely]] {
    r.outcome = TrackOutcome::kContinue;
    return r;
  }
  // A whole request in one packet (SEND or WRITE only, READ request, atomic), in order, with
  // nothing in progress: the common case of small messages. Same accounting as below.
  if (first && last && !(flags & kEntryInProgress) &&
      (!(flags & kEntryPsnValid) || psn == e.next_psn)) {
    const bool reth = (kind == RequestKind::kWrite || kind == RequestKind::kRead) &&
                      (desc.flags & pkt::kFlagReth);
    const uint32_t data = kind == RequestKind::kRead ? 0 : DataBytes(desc);
    uint8_t f = kEntryPsnValid | kEntryEndPsnValid;
    size = 0;
    if (reth) {
      size = desc.dma_length;
      if (size > kMaxMessageBytes) [[unlikely]] ++counters_.bogus_length;
      if (data > size) [[unlikely]] ++counters_.overrun;
    } else if (kind == RequestKind::kAtomic) {
      size = 8;
    } else if (kind == RequestKind::kSend) {
      size = data;
    }
    if (reth || kind == RequestKind::kAtomic || kind == RequestKind::kSend) {
      f |= kEntrySizeKnown;
      r.size_sample = size;
    }
    e.kind = static_cast<uint8_t>(kind);
    e.flags = f;
    e.size = size;
    e.sent = data;
    e.first_psn = psn;
    e.end_psn = psn;
    e.next_psn = PsnAdd(psn, 1);
    ++e.completed;
    ++counters_.requests_started;
    ++counters_.requests_completed;
    r.outcome = TrackOutcome::kStart;
    r.completed = true;
    return r;
  }

  if (flags & kEntryPsnValid) {
    const uint32_t next = e.next_psn;
    if (!PsnAfter(psn, (next - 1) & kPsnMask)) [[unlikely]] {
      ++counters_.duplicates;
      r.outcome = TrackOutcome::kDuplicate;
      r.sent_before = sent;
      return r;
    }
    if (psn != next) [[unlikely]]
      ++counters_.psn_jumps;
  }

  const bool in_progress = flags & kEntryInProgress;
  if (first || !in_progress || static_cast<RequestKind>(e.kind) != kind) {
    // A new request: at its first packet, or picked up mid-message (an orphan: a middle or last
    // packet with nothing in progress, or of another kind after a lost first/last), whose size is
    // unknown from here, even for a WRITE whose RETH was missed.
    if (in_progress) ++counters_.abandoned;
    flags = static_cast<uint8_t>((flags & kEntryPsnValid) | kEntryInProgress);
    size = 0;
    sent = 0;
    e.kind = static_cast<uint8_t>(kind);
    e.first_psn = psn;
    uint32_t end = psn;
    const bool reth = (kind == RequestKind::kWrite || kind == RequestKind::kRead) &&
                      (desc.flags & pkt::kFlagReth);
    if (reth && desc.dma_length > kMaxMessageBytes) [[unlikely]]
      ++counters_.bogus_length;
    if (first) {
      if (reth) {
        size = desc.dma_length;
        flags |= kEntrySizeKnown;
        r.size_sample = size;
      } else if (kind == RequestKind::kAtomic) {
        size = 8;
        flags |= kEntrySizeKnown;
        r.size_sample = 8;
      }
      // A WRITE's last PSN follows from its size; beyond 2^23 packets a 24-bit PSN cannot say
      // it. (A READ request is one packet on this direction; its responses consume the PSN
      // range.)
      if (kind == RequestKind::kWrite && (flags & kEntrySizeKnown)) {
        const uint64_t packets = std::max<uint64_t>(1, (uint64_t{size} + mtu_ - 1) / mtu_);
        if (packets < (1u << 23)) {
          end = PsnAdd(psn, static_cast<uint32_t>(packets - 1));
          flags |= kEntryEndPsnValid;
        }
      } else if (last) {
        flags |= kEntryEndPsnValid;
      }
      ++counters_.requests_started;
      r.outcome = TrackOutcome::kStart;
    } else {
      ++counters_.orphans;
      r.outcome = TrackOutcome::kOrphan;
    }
    e.end_psn = end;
  } else {
    r.outcome = TrackOutcome::kContinue;
  }

  r.sent_before = sent;
  // A READ request carries no data on this direction; its RETH length is its size.
  if (kind != RequestKind::kRead) sent = tracker_internal::SaturatingAdd(sent, DataBytes(desc));
  if ((flags & kEntrySizeKnown) && kind != RequestKind::kAtomic && sent > size &&
      r.sent_before <= size) [[unlikely]] {
    ++counters_.overrun;
  }
  e.next_psn = PsnAdd(psn, 1);
  flags |= kEntryPsnValid;

  if (last) {
    if (kind == RequestKind::kSend && !(flags & kEntrySizeKnown)) {
      size = sent;
      flags |= kEntrySizeKnown;
      if (r.outcome != TrackOutcome::kOrphan) r.size_sample = sent;
    }
    e.end_psn = psn;
    flags = static_cast<uint8_t>((flags | kEntryEndPsnValid) & ~kEntryInProgress);
    ++e.completed;
    ++counters_.requests_completed;
    r.completed = true;
  }
  e.flags = flags;
  e.size = size;
  e.sent = sent;
  return r;
}

}  // namespace heddle::storm
