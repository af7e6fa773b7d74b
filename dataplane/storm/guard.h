// File: dataplane/storm/guard.h
//
// STORM's ordering guards (docs/storm.md §5, §6.5, §6.6) as free functions: the decisions that
// keep a QP's packets in order while strict priority serves its levels. They read and update the
// QP's entry and READ stream and count what they capped in counters the caller owns; they touch no
// packet and no table, so the storm-tag stage (dataplane/pipeline/storm_stage.cc) and heddle-sim
// (tools/heddle-sim) run the very same rules. All inline: the stage calls them per packet.
//
//   uint8_t ceiling = storm::InOrderCeiling(e, per_message, top);            // §5
//   if (fabric_guard) ceiling = std::min(ceiling, storm::FabricCeiling(e, t, guarded));  // §6.5
//   uint8_t level = storm::TagPacketTop(L, top, &e, d, t, backlog, mtu, ceiling);
//
// A packet the host sends as the QP's responder (§6.6) is levelled by ReadResponseLevel() (READ
// responses, on their stream) or AckLevel() (ACK/NAK, atomic ACK) under ResponseCeiling(), and
// its level is then held by HoldResponseLevel().
#pragma once

#include <algorithm>
#include <cstdint>

#include "dataplane/storm/levels.h"
#include "dataplane/storm/qp_table.h"
#include "dataplane/storm/read_streams.h"
#include "dataplane/storm/tracker.h"

namespace heddle::storm {

// Unacknowledged packets beyond which the fabric guard assumes the response join lost track of
// the QP (acknowledgements not seen, e.g. taking another path) and stops capping it.
inline constexpr uint32_t kMaxGuardedUnacked = 1u << 15;

// The in-order guard (§5): in per-message mode a QP's packet never takes a higher level than its
// packets still held (egress_queued > 0) at held_level, so strict priority never reorders the QP;
// never above `top` (TopLevel(), a held level may predate a lower K). Per-packet mode (reordering
// tolerant) is not capped.
inline uint8_t InOrderCeiling(const QpEntry& e, bool per_message, int top) {
  const uint8_t t = static_cast<uint8_t>(top);
  return per_message && e.egress_queued > 0 && e.held_level < t ? e.held_level : t;
}

// The fabric ordering guard (§6.5), for a request packet once the tracker gave `t` and only where
// the response join feeds acked_psn (per-message mode, storm.fabric_guard): at the first packet
// of a request, the level of the QP's packets sent and not yet acknowledged, if there are any;
// else no cap (kMaxLevels - 1). The in-order guard keeps each new request at or below the newest
// packet's level while older ones are unacknowledged, so the newest packet (held_level) carries
// the lowest level of the window. Counts each cap in `guarded`.
inline uint8_t FabricCeiling(QpEntry& e, const TrackResult& t, uint64_t& guarded) {
  constexpr uint8_t kNoCap = kMaxLevels - 1;
  if (t.outcome != TrackOutcome::kStart && t.outcome != TrackOutcome::kOrphan) {
    return kNoCap;  // later packets keep the level their request started with
  }
  const uint32_t acked = LoadAckedPsn(e);
  if (acked == kNoPsn) return kNoCap;  // nothing joined for this QP: no cap
  // Packets before this request's first one that are not acknowledged. An acknowledgement ahead
  // of them (READ responses) gives 2^24 - k, beyond the bound.
  const uint32_t unacked = ((e.first_psn - 1) - acked) & kPsnMask;
  if (unacked == 0 || unacked > kMaxGuardedUnacked) return kNoCap;
  ++guarded;
  return e.held_level;
}

// True while the fabric guard tracks packets of the QP's own requests sent and not acknowledged:
// its next request will be capped at held_level (FabricCeiling()), which must then not rise above
// their level. Only meaningful where the fabric guard applies.
inline bool RequestsUnacknowledged(QpEntry& e) {
  if (!(e.flags & kEntryPsnValid)) return false;
  const uint32_t acked = LoadAckedPsn(e);
  if (acked == kNoPsn) return false;
  const uint32_t unacked = ((e.next_psn - 1) - acked) & kPsnMask;
  return unacked != 0 && unacked <= kMaxGuardedUnacked;
}

// True while the READ stream's last response, tagged at s.tagged_ms, is within the response
// window (`window_ms`, storm.response_window_ms) of now_ms (wrapping milliseconds).
inline bool InResponseWindow(const ReadStreamEntry& s, uint32_t now_ms, uint32_t window_ms) {
  return (s.flags & kStreamTagged) && static_cast<uint32_t>(now_ms - s.tagged_ms) <= window_ms;
}

// The cap of a packet the host sends as the QP's responder: the in-order guard's `ceiling` (one
// queue per QP), never above the top level in force.
inline uint8_t ResponseCeiling(const LevelConfig& L, uint8_t ceiling) {
  const int top = std::clamp(L.levels, 1, kMaxLevels) - 1;
  return ceiling > top ? static_cast<uint8_t>(top) : ceiling;
}

// The level of a READ response the host sends, on its stream `s` once ReadStreamTracker::
// OnResponse() gave `r`, under `ceiling` (ResponseCeiling()). A stream's later packets, duplicates
// and malformed ones reuse its level (per-message; per-packet mode levels every new packet). A
// new stream (per-message) takes no level above the QP's last READ response while that is within
// `window_ms` (0: no window; the window applies in per-message mode with storm.fabric_guard): an
// overtaking stream is a sequence error at the requester. B is the READs queued behind this one at
// the responder with the host source, else `backlog`. Records the level on the stream (resp_level,
// tagged_ms) and counts a windowed cap in `guarded`.
inline uint8_t ReadResponseLevel(const LevelConfig& L, ReadStreamEntry& s, const StreamResult& r,
                                 BacklogSource source, uint64_t backlog, uint8_t ceiling,
                                 uint32_t mtu, uint32_t window_ms, uint32_t now_ms,
                                 uint64_t& guarded) {
  const bool per_message = L.mode == Mode::kPerMessage;
  const bool reuse = r.outcome == StreamOutcome::kDuplicate ||
                     r.outcome == StreamOutcome::kMalformed ||
                     (r.outcome == StreamOutcome::kContinue && per_message);
  uint8_t level;
  if (reuse && (s.flags & kStreamLevelValid)) {
    level = std::min(s.level, ceiling);
  } else if (r.outcome == StreamOutcome::kMalformed) {
    level = std::min(DefaultLevel(L, mtu), ceiling);
  } else {
    // A stream starts (per-message: its level for good) or, per-packet, any new packet.
    bool windowed = false;
    if (per_message && window_ms > 0 && r.outcome != StreamOutcome::kContinue &&
        InResponseWindow(s, now_ms, window_ms) && s.resp_level < ceiling) {
      ceiling = s.resp_level;
      windowed = true;
    }
    if (source == BacklogSource::kHostShim) backlog = PendingReadBytes(s);
    const uint8_t computed =
        ComputeLevel(L, ReadStreamRemaining(s, r.sent_before, UnknownBytes(L)), backlog, mtu);
    level = std::min(computed, ceiling);
    if (windowed && computed > level) ++guarded;
    s.level = level;
    s.flags |= kStreamLevelValid;
  }
  s.resp_level = level;
  s.tagged_ms = now_ms;
  s.flags |= kStreamTagged;
  return level;
}

// The level of an ACK/NAK or atomic ACK the host sends: control_level under `ceiling`
// (ResponseCeiling()), and in per-message mode no higher than the QP's last READ response `s`
// (nullptr: none known) while that is within `window_ms` (0: no window): an ACK past an
// outstanding READ's responses makes the requester re-issue the READ (implied NAK). Counts a
// windowed cap in `guarded`.
inline uint8_t AckLevel(const LevelConfig& L, const ReadStreamEntry* s, uint8_t ceiling,
                        uint32_t window_ms, uint32_t now_ms, uint64_t& guarded) {
  uint8_t level = std::min(L.control_level, ceiling);
  if (L.mode == Mode::kPerMessage && window_ms > 0 && s != nullptr &&
      InResponseWindow(*s, now_ms, window_ms) && s->resp_level < level) {
    level = s->resp_level;
    ++guarded;
  }
  return level;
}

// After a response packet took `level`: it becomes the QP's held level, except that held_level
// does not rise while the QP's own requests are unacknowledged under the fabric guard
// (`guard_requests`: per-message mode, storm.fabric_guard and a response join), since their next
// request is capped at it (§6.5). Responses are not capped by that window themselves.
inline void HoldResponseLevel(QpEntry& e, uint8_t level, bool guard_requests) {
  if (level <= e.held_level || !guard_requests || !RequestsUnacknowledged(e)) {
    e.held_level = level;
  }
}

}  // namespace heddle::storm
