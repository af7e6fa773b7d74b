// File: dataplane/storm/read_streams.h
//
// READ responses the local host sends as the responder (docs/storm.md §6.6). They leave on the
// QP's request-direction key — (local IP, peer IP, the peer's QPN), the key of the QP's own
// requests — but they carry the PSNs of the *peer's* READ requests, not the QP's own, and their
// size is the RETH length of a READ request that arrived from the uplink. QpEntry is full (§6.3),
// so the stream state lives beside the QP table, in a small per-worker side table keyed by the same
// hash and QPN/direction word:
//
//   heddle::storm::ReadStreamTable streams({.capacity = 16384, .idle_ms = 10'000});
//   heddle::storm::ReadStreamTracker tracker;
//   ...a READ request towards the host, joined to the responses' key (the verbs shim's pairs):
//   ReadStreamEntry* s = streams.FindOrInsert(hash, qpn_dir, now_ms, nullptr);
//   if (s) tracker.AddPending(*s, read_request_psn, dma_length);
//   ...every READ response packet the host sends:
//   ReadStreamEntry* s = streams.FindOrInsert(hash, qpn_dir, now_ms, nullptr);  // nullptr: full
//   StreamResult r = tracker.OnResponse(*s, desc);
//   uint64_t R = ReadStreamRemaining(*s, r.sent_before, UnknownBytes(config));
//
// A stream is the responses to one READ: First, Middle..., Last, or a single Only, at consecutive
// PSNs starting at the READ request's PSN. Its size is known when a pending READ with that PSN was
// queued on the entry (the join); otherwise it is tracked like a SEND of unknown size: R =
// max(bytes so far, UnknownBytes(config)), the byte count becoming its size at its Last packet.
// PSNs are 24-bit and compare modulo 2^24: a response whose PSN is not after next_psn - 1 is a
// duplicate (a READ the requester re-issued) and changes nothing; a jump forward is counted and
// followed.
//
// Pending READs: a FIFO of at most kMaxPendingReads per QP, in arrival order (the responder answers
// READs in PSN order, so the oldest is normally the next stream). A stream starting at PSN p takes
// the pending READ at p and drops those at PSNs before it (answered without their first response
// seen, or re-issued: counted stale). A full FIFO drops its oldest entry for the new one (counted),
// so entries that never match (a wrong pair) cannot clog it. A READ that arrives after its stream
// started — the join crossed workers more slowly than the host answered — still sizes the stream
// from its next packet (a late join; per-message levels stay as they were fixed).
//
// The table: entries of 128 bytes (two cache lines: the stream on the first, the pending READs on
// the second, touched only when a stream starts or a READ is queued) in buckets of 8, with a
// 16-bit tag per entry in a separate array (a bucket's tags are 16 bytes), allocated once. As in
// QpTable, a key may live in one of two buckets (two-choice, the emptier one on insert), so the
// table fills evenly. An insert with both buckets full replaces the least recently seen entry idle
// longer than idle_ms, else it is refused (counted): the caller then tags the QP's responses as
// before this table existed.
// One worker owns a table; nothing here is thread-safe or allocates after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "dataplane/pkt/parse.h"
#include "dataplane/storm/qp_table.h"

namespace heddle::storm {

// Pending READs kept per QP (the responder's outstanding READs; mlx5 allows 16 per QP, most
// applications configure fewer).
inline constexpr int kMaxPendingReads = 8;

struct PendingRead {
  uint32_t psn;   // the READ request's PSN: its first response's
  uint32_t size;  // RETH DMA length
};

// Bits of ReadStreamEntry::flags.
enum ReadStreamFlag : uint8_t {
  kStreamPsnValid = 1u << 0,    // next_psn holds a PSN (a response was seen)
  kStreamInProgress = 1u << 1,  // a stream started and its Last/Only was not seen
  kStreamSizeKnown = 1u << 2,   // `size` is the READ's DMA length (joined) or its final count
  kStreamLevelValid = 1u << 3,  // `level` was computed for the current stream
  kStreamTagged = 1u << 4,      // tagged_ms and resp_level describe the newest response tagged
  kStreamPartial = 1u << 5,     // picked up mid-way (an orphan): its byte count is not its size
};

struct alignas(64) ReadStreamEntry {
  // First line: identity and the stream in progress.
  uint64_t key_hash;   // 0 = empty; QpTable's hash of the request-direction key
  uint32_t qpn_dir;    // QPN (24 bits) | direction << 24, as in QpEntry
  uint32_t last_seen;  // coarse time, ms ticks
  uint32_t first_psn;  // PSN of the current stream's first packet
  uint32_t next_psn;   // next expected response PSN (kStreamPsnValid)
  uint32_t size;       // the stream's size in bytes (kStreamSizeKnown)
  uint32_t sent;       // payload bytes of the current stream seen so far
  uint32_t tagged_ms;  // when the QP's newest READ response was tagged (the response window)
  uint32_t completed;  // streams completed on this QP
  uint8_t level;       // level recorded for the current stream (kStreamLevelValid)
  uint8_t flags;       // ReadStreamFlag bits
  uint8_t resp_level;  // level of the QP's newest READ response tagged (kStreamTagged)
  uint8_t n_pending;   // entries of `pending` in use, oldest first
  uint8_t reserved[20];
  // Second line.
  PendingRead pending[kMaxPendingReads];
};
static_assert(sizeof(ReadStreamEntry) == 128, "two cache lines: stream, pending READs");

enum class StreamOutcome : uint8_t {
  kStart,      // First/Only: a new stream (sized if a pending READ at its PSN was queued)
  kOrphan,     // Middle/Last with no stream in progress: unknown size from here
  kContinue,   // a later packet of the stream in progress
  kDuplicate,  // PSN not after next_psn - 1: a re-issued READ's response; nothing accounted
  kMalformed,  // First/Last/Only without AETH: nothing changed
};

struct StreamResult {
  StreamOutcome outcome = StreamOutcome::kMalformed;
  bool joined = false;       // kStart: the size came from a pending READ
  bool completed = false;    // this packet ended the stream (Last/Only)
  uint32_t sent_before = 0;  // entry.sent before this packet's payload was added
  // Non-zero when the stream's size became known with this packet (the joined size at the start,
  // the byte count at the Last of an unknown-size stream that was not an orphan): feed the size
  // histogram.
  uint32_t size_sample = 0;
};

enum class PendingOutcome : uint8_t {
  kQueued,      // appended to the FIFO
  kQueuedFull,  // appended after dropping the oldest entry (the FIFO was full)
  kLateJoin,    // the stream at its PSN is in progress with an unknown size: sized from now on
  kTooLate,     // the stream at its PSN already ended (sized by its byte count)
  kStale,       // a PSN before the QP's next response PSN: a re-issued or already answered READ
};

struct ReadStreamCounters {
  uint64_t started_sized = 0;    // streams started with a joined size
  uint64_t started_unknown = 0;  // streams started (First/Only) with no pending READ at their PSN
  uint64_t orphans = 0;          // streams picked up mid-way (Middle/Last first seen)
  uint64_t completed = 0;
  uint64_t duplicates = 0;  // responses at an old PSN
  uint64_t psn_jumps = 0;   // responses after next_psn
  uint64_t abandoned = 0;   // a stream started while another was in progress (its Last lost)
  uint64_t overrun = 0;     // streams that sent more than their joined size
  uint64_t malformed = 0;   // First/Last/Only without AETH
  uint64_t pending_queued = 0;
  uint64_t pending_full = 0;  // oldest pending READs dropped for a newer one
  uint64_t late_joins = 0;
  uint64_t too_late = 0;
  uint64_t stale = 0;  // pending READs dropped or refused as before the stream (never matched)
};

// R of the level formula for the stream, given the bytes sent before the current packet; `unknown`
// is UnknownBytes() of the configuration (storm.unknown_size per message, the floor per packet).
inline uint64_t ReadStreamRemaining(const ReadStreamEntry& s, uint32_t sent_before,
                                    uint32_t unknown) {
  if (s.flags & kStreamSizeKnown) return s.size > sent_before ? uint64_t{s.size} - sent_before : 0;
  return sent_before > unknown ? sent_before : unknown;
}

// Bytes of the READs queued behind the current stream (its backlog B with the host source).
inline uint64_t PendingReadBytes(const ReadStreamEntry& s) {
  uint64_t b = 0;
  for (int i = 0; i < s.n_pending; ++i) b += s.pending[i].size;
  return b;
}

class ReadStreamTracker {
 public:
  // One READ response packet the host sends, on its QP's entry. Never touches level or the
  // tag fields (the stage does).
  StreamResult OnResponse(ReadStreamEntry& s, const pkt::PacketDesc& desc);
  // A READ request towards the host at `psn` for `size` bytes, joined to this entry.
  PendingOutcome AddPending(ReadStreamEntry& s, uint32_t psn, uint32_t size);

  const ReadStreamCounters& counters() const { return counters_; }

 private:
  // Removes the pending READ at `psn` (true, its size in *size) and those before it (stale).
  bool TakePending(ReadStreamEntry& s, uint32_t psn, uint32_t* size);

  ReadStreamCounters counters_;
};

struct ReadStreamTableOptions {
  size_t capacity = 16384;    // entries; rounded up to a power of two >= 8
  uint32_t idle_ms = 10'000;  // an entry idle longer than this may be replaced
};

struct ReadStreamTableCounters {
  uint64_t inserted = 0;
  uint64_t table_full = 0;         // refused inserts
  uint64_t evicted_idle = 0;       // idle entries emptied by the sweep
  uint64_t evicted_on_insert = 0;  // idle entries replaced by an insert
};

class ReadStreamTable {
 public:
  static constexpr size_t kBucketEntries = 8;

  explicit ReadStreamTable(const ReadStreamTableOptions& options);
  ReadStreamTable(const ReadStreamTable&) = delete;
  ReadStreamTable& operator=(const ReadStreamTable&) = delete;

  // The entry, or nullptr. Does not touch last_seen.
  ReadStreamEntry* Find(uint64_t hash, uint32_t qpn_dir);
  // The entry, created if absent; updates last_seen. nullptr when its bucket is full and nothing
  // in it is idle (counted). `result` may be null.
  ReadStreamEntry* FindOrInsert(uint64_t hash, uint32_t qpn_dir, uint32_t now_ms,
                                InsertResult* result);
  // Empties the entries of [begin, begin + count) idle longer than idle_ms; returns how many.
  size_t SweepIdleRange(size_t begin, size_t count, uint32_t now_ms);

  const ReadStreamEntry& entry(size_t i) const { return entries_[i]; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return live_; }
  const ReadStreamTableCounters& counters() const { return counters_; }

 private:
  static uint16_t Tag(uint64_t hash) {
    const auto t = static_cast<uint16_t>(hash >> 48);
    return static_cast<uint16_t>(t + (t == 0));
  }
  // Two choices from disjoint hash bits (QpTable uses bits 0..47 and the top 16 for its own
  // buckets and tags; the collisions that matter here are between keys of this table).
  size_t LeftBucket(uint64_t hash) const { return (hash >> 8) & bucket_mask_; }
  size_t RightBucket(uint64_t hash) const { return (hash >> 28) & bucket_mask_; }
  static constexpr size_t kNoSlot = ~size_t{0};
  ReadStreamEntry* FindIn(size_t bucket, uint64_t hash, uint32_t qpn_dir, uint16_t tag);
  bool Idle(const ReadStreamEntry& e, uint32_t now_ms) const {
    return static_cast<uint32_t>(now_ms - e.last_seen) > idle_ms_;
  }
  void Empty(size_t slot);

  struct Free {
    void operator()(void* p) const { std::free(p); }
  };

  size_t capacity_;
  uint64_t bucket_mask_;
  uint32_t idle_ms_;
  size_t live_ = 0;
  std::unique_ptr<ReadStreamEntry[], Free> entries_;
  std::unique_ptr<uint16_t[], Free> tags_;  // 0 = empty slot
  ReadStreamTableCounters counters_;
};

}  // namespace heddle::storm
