// File: dataplane/storm/read_streams.cc
#include "dataplane/storm/read_streams.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "dataplane/storm/tracker.h"

namespace heddle::storm {
namespace {

void* AllocZeroed(size_t bytes) {
  bytes = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) std::abort();  // construction only, off the hot path
  std::memset(p, 0, bytes);
  return p;
}

}  // namespace

StreamResult ReadStreamTracker::OnResponse(ReadStreamEntry& s, const pkt::PacketDesc& d) {
  StreamResult r;
  const bool first = d.flags & pkt::kFlagFirst;
  const bool last = d.flags & pkt::kFlagLast;
  r.sent_before = s.sent;
  // READ response First, Last and Only carry an AETH (IBTA 9.3.4); the parser reads it whenever
  // the opcode says so, so a descriptor without one did not come from a well-formed frame.
  if ((first || last) && !(d.flags & pkt::kFlagAeth)) [[unlikely]] {
    ++counters_.malformed;
    r.outcome = StreamOutcome::kMalformed;
    return r;
  }
  const uint32_t psn = d.psn & kPsnMask;
  uint8_t flags = s.flags;
  if (flags & kStreamPsnValid) {
    if (!PsnAfter(psn, (s.next_psn - 1) & kPsnMask)) {
      ++counters_.duplicates;
      r.outcome = StreamOutcome::kDuplicate;
      return r;
    }
    if (psn != s.next_psn) ++counters_.psn_jumps;
  }

  if (first || !(flags & kStreamInProgress)) {
    if (first && (flags & kStreamInProgress)) ++counters_.abandoned;
    flags = static_cast<uint8_t>((flags & (kStreamPsnValid | kStreamTagged)) | kStreamInProgress);
    s.first_psn = psn;
    s.sent = 0;
    s.size = 0;
    uint32_t size = 0;
    const bool matched = TakePending(s, psn, &size);
    if (first) {
      if (matched) {
        s.size = size;
        flags |= kStreamSizeKnown;
        r.joined = true;
        r.size_sample = size;
        ++counters_.started_sized;
      } else {
        ++counters_.started_unknown;
      }
      r.outcome = StreamOutcome::kStart;
    } else {
      // A READ's first response is First or Only: a pending READ at a Middle/Last's PSN is not
      // this stream's (TakePending dropped it with the older ones).
      flags |= kStreamPartial;
      ++counters_.orphans;
      r.outcome = StreamOutcome::kOrphan;
    }
    r.sent_before = 0;
  } else {
    r.outcome = StreamOutcome::kContinue;
  }

  s.sent = tracker_internal::SaturatingAdd(s.sent, DataBytes(d));
  if ((flags & kStreamSizeKnown) && s.sent > s.size && r.sent_before <= s.size) ++counters_.overrun;
  s.next_psn = PsnAdd(psn, 1);
  flags |= kStreamPsnValid;
  if (last) {
    if (!(flags & kStreamSizeKnown)) {
      s.size = s.sent;
      flags |= kStreamSizeKnown;
      if (!(flags & kStreamPartial)) r.size_sample = s.sent;
    }
    flags &= static_cast<uint8_t>(~kStreamInProgress);
    ++s.completed;
    ++counters_.completed;
    r.completed = true;
  }
  s.flags = flags;
  return r;
}

PendingOutcome ReadStreamTracker::AddPending(ReadStreamEntry& s, uint32_t psn, uint32_t size) {
  psn &= kPsnMask;
  if (s.flags & kStreamPsnValid) {
    if (psn == s.first_psn && !(s.flags & kStreamPartial)) {
      if ((s.flags & kStreamInProgress) && !(s.flags & kStreamSizeKnown)) {
        s.size = size;
        s.flags |= kStreamSizeKnown;
        ++counters_.late_joins;
        if (s.sent > size) ++counters_.overrun;
        return PendingOutcome::kLateJoin;
      }
      if (!(s.flags & kStreamInProgress)) {
        ++counters_.too_late;
        return PendingOutcome::kTooLate;
      }
    }
    if (!PsnAfter(psn, (s.next_psn - 1) & kPsnMask)) {
      ++counters_.stale;
      return PendingOutcome::kStale;
    }
  }
  ++counters_.pending_queued;
  for (int i = 0; i < s.n_pending; ++i) {
    if (s.pending[i].psn == psn) {  // the same READ again before it was answered
      s.pending[i].size = size;
      return PendingOutcome::kQueued;
    }
  }
  PendingOutcome out = PendingOutcome::kQueued;
  if (s.n_pending == kMaxPendingReads) {
    std::memmove(&s.pending[0], &s.pending[1], sizeof(PendingRead) * (kMaxPendingReads - 1));
    --s.n_pending;
    ++counters_.pending_full;
    out = PendingOutcome::kQueuedFull;
  }
  s.pending[s.n_pending++] = PendingRead{psn, size};
  return out;
}

bool ReadStreamTracker::TakePending(ReadStreamEntry& s, uint32_t psn, uint32_t* size) {
  bool found = false;
  int kept = 0;
  for (int i = 0; i < s.n_pending; ++i) {
    const PendingRead p = s.pending[i];
    if (!found && p.psn == psn) {
      *size = p.size;
      found = true;
    } else if (!PsnAfter(p.psn, psn)) {
      ++counters_.stale;  // at or before this stream's first PSN: it will never start a stream
    } else {
      s.pending[kept++] = p;
    }
  }
  s.n_pending = static_cast<uint8_t>(kept);
  return found;
}

ReadStreamTable::ReadStreamTable(const ReadStreamTableOptions& options)
    : capacity_(std::bit_ceil(std::max<size_t>(options.capacity, kBucketEntries))),
      bucket_mask_(capacity_ / kBucketEntries - 1),
      idle_ms_(options.idle_ms),
      entries_(static_cast<ReadStreamEntry*>(AllocZeroed(capacity_ * sizeof(ReadStreamEntry)))),
      tags_(static_cast<uint16_t*>(AllocZeroed(capacity_ * sizeof(uint16_t)))) {}

ReadStreamEntry* ReadStreamTable::FindIn(size_t bucket, uint64_t hash, uint32_t qpn_dir,
                                         uint16_t tag) {
  const size_t base = bucket * kBucketEntries;
  for (size_t i = 0; i < kBucketEntries; ++i) {
    if (tags_[base + i] != tag) continue;
    ReadStreamEntry& e = entries_[base + i];
    if (e.key_hash == hash && e.qpn_dir == qpn_dir) return &e;
  }
  return nullptr;
}

ReadStreamEntry* ReadStreamTable::Find(uint64_t hash, uint32_t qpn_dir) {
  const uint16_t tag = Tag(hash);
  if (ReadStreamEntry* e = FindIn(LeftBucket(hash), hash, qpn_dir, tag)) return e;
  return FindIn(RightBucket(hash), hash, qpn_dir, tag);
}

ReadStreamEntry* ReadStreamTable::FindOrInsert(uint64_t hash, uint32_t qpn_dir, uint32_t now_ms,
                                               InsertResult* result) {
  if (ReadStreamEntry* e = Find(hash, qpn_dir)) {
    e->last_seen = now_ms;
    if (result) *result = InsertResult::kFound;
    return e;
  }
  // Two choices: an empty slot of the emptier bucket (the left one on a tie), else the least
  // recently seen entry of the two idle longer than idle_ms.
  const size_t buckets[2] = {LeftBucket(hash), RightBucket(hash)};
  size_t empty[2] = {kNoSlot, kNoSlot};
  size_t free_count[2] = {0, 0};
  for (int b = 0; b < 2; ++b) {
    const size_t base = buckets[b] * kBucketEntries;
    for (size_t i = 0; i < kBucketEntries; ++i) {
      if (tags_[base + i] != 0) continue;
      if (empty[b] == kNoSlot) empty[b] = base + i;
      ++free_count[b];
    }
  }
  size_t slot = free_count[1] > free_count[0] ? empty[1] : empty[0];
  InsertResult how = InsertResult::kInserted;
  if (slot == kNoSlot) {
    uint32_t oldest_age = 0;
    for (size_t bucket : buckets) {
      const size_t base = bucket * kBucketEntries;
      for (size_t i = 0; i < kBucketEntries; ++i) {
        const ReadStreamEntry& e = entries_[base + i];
        const uint32_t age = now_ms - e.last_seen;
        if (Idle(e, now_ms) && (slot == kNoSlot || age > oldest_age)) {
          oldest_age = age;
          slot = base + i;
        }
      }
    }
    if (slot == kNoSlot) {
      ++counters_.table_full;
      if (result) *result = InsertResult::kTableFull;
      return nullptr;
    }
    Empty(slot);
    ++counters_.evicted_on_insert;
    how = InsertResult::kEvictedIdle;
  }
  ReadStreamEntry& e = entries_[slot];
  e.key_hash = hash;
  e.qpn_dir = qpn_dir;
  e.last_seen = now_ms;
  tags_[slot] = Tag(hash);
  ++live_;
  ++counters_.inserted;
  if (result) *result = how;
  return &e;
}

void ReadStreamTable::Empty(size_t slot) {
  std::memset(&entries_[slot], 0, sizeof(ReadStreamEntry));
  tags_[slot] = 0;
  --live_;
}

size_t ReadStreamTable::SweepIdleRange(size_t begin, size_t count, uint32_t now_ms) {
  size_t n = 0;
  const size_t end = std::min(capacity_, begin + count);
  for (size_t i = begin; i < end; ++i) {
    if (tags_[i] != 0 && Idle(entries_[i], now_ms)) {
      Empty(i);
      ++n;
    }
  }
  counters_.evicted_idle += n;
  return n;
}

}  // namespace heddle::storm
