// File: dataplane/lb/flow_table.h
//
// Per-flow state of PIN and the balancers (docs/pin.md §2): one 128-byte entry (two cache lines)
// per QP seen in the request direction, keyed by (source address, destination address,
// destination QPN), in a fixed-capacity table allocated once at construction.
//
//   FlowTable table({.capacity = 1 << 16, .idle_ns = 10'000'000});
//   bool inserted;
//   FlowEntry* e = table.FindOrInsert(hash, qpn, now_ns, &inserted);
//   if (e == nullptr) { /* table full: counted; the caller falls back to a stateless choice */ }
//
// The first line holds what every packet touches (the message's size and bytes, the pinned path,
// the flowlet/round-robin/adaptive state); the second the feedback state only REPS and the
// adaptive balancer need (which path each of the last 16 PSNs took, the acknowledged and tainted
// PSNs, the REPS cache of recycled paths). Even in request mode (a flow is one RDMA message) the
// entry is per QP: a message's state is reset when the next one starts, and REPS's cache outlives
// messages, as REPS keeps it per connection.
//
// Two-choice buckets of 8: a key may live in one bucket of each half of the table; an insert goes
// to the emptier one (measured, flow_table_test: no insert refused at 75 % load, ~0.1 % at 85 %;
// size the table for at most 75 % live flows). The keys' 64-bit hashes sit in their own array, one
// 64-byte line per bucket, so a lookup reads two hash lines and one entry. An entry is identified
// by its hash and QPN (the full key is not stored). With both buckets full, an insert replaces the
// least recently seen entry idle for longer than idle_ns (counted); if none is idle it is refused
// (counted) and the caller chooses without state. Entries never move while they live.
//
// Threading: a FlowTable belongs to one worker; nothing in it is thread-safe.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif

#include "dataplane/pkt/parse.h"

namespace heddle::lb {

inline constexpr uint32_t kPsnMask = 0xffffff;
inline constexpr int kPsnHistory = 16;    // PSNs whose path a flow remembers (a power of two)
inline constexpr int kMaxRepsCache = 16;  // REPS cache capacity bound
inline constexpr uint8_t kNoPath = 0xff;  // a path index that is none
inline constexpr uint16_t kNoPathSet = 0xffff;

// True if a is after b modulo 2^24.
constexpr bool PsnAfter(uint32_t a, uint32_t b) {
  const uint32_t d = (a - b) & kPsnMask;
  return d != 0 && d < (1u << 23);
}

// Bits of FlowEntry::flags.
enum FlowFlag : uint8_t {
  kFlowInMessage = 1u << 0,  // a message started and its last packet was not seen
  kFlowSizeKnown = 1u << 1,  // the current message's size was known when it started
  kFlowPinned = 1u << 2,     // the current message is pinned to pinned_path (else sprayed)
  kFlowPinValid = 1u << 3,  // pinned_path holds a path of this flow (QP mode: kept across messages)
  kFlowCrossed = 1u << 4,   // the pinned message of unknown size passed the threshold
  kFlowLong = 1u << 5,      // QP mode: the QP proved long; its next messages are sprayed
};
// Bits of FlowEntry::fb_flags.
enum FeedbackFlag : uint8_t {
  kFbPsnValid = 1u << 0,    // next_psn holds a PSN
  kFbAckValid = 1u << 1,    // acked_psn holds a PSN
  kFbTaintValid = 1u << 2,  // taint_psn holds a PSN
};

struct alignas(64) FlowEntry {
  // Line 1: every packet.
  uint64_t key_hash;    // 0 = empty slot
  uint32_t qpn;         // destination QPN (24 bits)
  uint32_t generation;  // PathTable::generation() that path_set and the path indexes refer to
  uint64_t last_ns;     // time of the last packet (flowlet gap, idleness)
  uint64_t flow_bytes;  // payload bytes of the current flow: the message, or in QP mode the QP's
                        // bytes since it became active (a pinned one-packet message in request
                        // mode leaves this and flow_threshold as they were: nothing reads
                        // them before the next message sets them)
  // Messages started, times internal::kMessageSaltStep (mod 2^64): the salt of the pinned-path
  // hash in request mode (internal::MessageHashSalted()), one add per message.
  uint64_t message_salt;
  uint32_t pinned_entropy;  // the pinned path's entropy and port, to find it in a new table
  uint16_t pinned_port;
  uint16_t pinned_rest;     // the Path's next two bytes: the pinned path's first 8 bytes are copied
                            // whole (PinSelector::CopyPinnedPath()); nothing reads them
  uint8_t flags;            // FlowFlag
  uint8_t pinned_path;      // pinned path index (kFlowPinValid)
  uint8_t current_path;     // flowlet: the flowlet's path; adaptive: the last choice; else unused
  uint8_t rr_next;          // round-robin: the next path index
  uint32_t flow_threshold;  // the threshold when the current message started (bytes, saturated)
  uint16_t path_set;        // set id in the table of `generation`; kNoPathSet: not balanced
  uint8_t line1_pad[6];
  // Line 2: feedback (REPS, adaptive).
  uint32_t next_psn;            // PSN after the newest packet sent (kFbPsnValid)
  uint32_t acked_psn;           // highest PSN acknowledged (kFbAckValid)
  uint32_t taint_psn;           // packets up to this PSN were sent before a congestion signal (CNP)
  uint8_t hist[kPsnHistory];    // path of PSN p at hist[p % kPsnHistory]; kNoPath: none/consumed
  uint8_t reps[kMaxRepsCache];  // REPS: recycled path indexes, a ring (oldest at reps_head)
  uint8_t reps_head;
  uint8_t reps_count;
  uint8_t fb_flags;  // FeedbackFlag
  uint8_t line2_pad[17];
};
static_assert(sizeof(FlowEntry) == 128, "FlowEntry must be two cache lines");
static_assert(offsetof(FlowEntry, pinned_port) == offsetof(FlowEntry, pinned_entropy) + 4 &&
              offsetof(FlowEntry, pinned_rest) == offsetof(FlowEntry, pinned_entropy) + 6);
static_assert(offsetof(FlowEntry, next_psn) == 64, "feedback state starts the second line");

struct FlowTableOptions {
  size_t capacity = size_t{1} << 16;  // entries; rounded up to a power of two >= 16; <= 75 % live
  uint64_t idle_ns = 10'000'000;      // an entry idle longer than this may be replaced
};

struct FlowTableCounters {
  uint64_t inserted = 0;           // new entries (in empty or replaced slots)
  uint64_t table_full = 0;         // refused inserts
  uint64_t evicted_on_insert = 0;  // idle entries replaced by an insert
  uint64_t evicted_idle = 0;       // idle entries emptied by SweepIdle
};

class FlowTable {
 public:
  static constexpr size_t kBucketEntries = 8;

  explicit FlowTable(const FlowTableOptions& options);
  FlowTable(const FlowTable&) = delete;
  FlowTable& operator=(const FlowTable&) = delete;

  // The entry for (hash, qpn), created zeroed (key_hash, qpn set; everything else 0) if absent;
  // nullptr if both buckets are full of live entries. Does not touch last_ns (the caller owns
  // it: the flowlet gap is read before it is updated). `inserted` may be null.
  // Inline: a live flow's lookup (every packet) reads two hash lines and one entry line.
  FlowEntry* FindOrInsert(uint64_t hash, uint32_t qpn, uint64_t now_ns, bool* inserted) {
    if (hash == 0) hash = 1;
    qpn &= kPsnMask;
    FlowEntry* e = FindIn(LeftBucket(hash), hash, qpn);
    if (e == nullptr) e = FindIn(RightBucket(hash), hash, qpn);
    if (e != nullptr) [[likely]] {
      if (inserted) *inserted = false;
      return e;
    }
    return Insert(hash, qpn, now_ns, inserted);
  }
  // The entry or nullptr.
  FlowEntry* Find(uint64_t hash, uint32_t qpn);

  // Starts loading the key's two hash lines (a burst's lookups overlap their misses).
  void Prefetch(uint64_t hash) const {
    __builtin_prefetch(&hashes_[LeftBucket(hash) * kBucketEntries], 0, 3);
    __builtin_prefetch(&hashes_[RightBucket(hash) * kBucketEntries], 0, 3);
  }

  // Empties entries [begin, begin + count) idle longer than idle_ns at now_ns; returns how many.
  size_t SweepIdle(size_t begin, size_t count, uint64_t now_ns);

  const FlowEntry& entry(size_t i) const { return entries_[i]; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return live_; }
  const FlowTableCounters& counters() const { return counters_; }
  // Entries removed so far (emptied by the sweep or replaced by an insert): a change tells a
  // holder of entry pointers that one may now be empty or hold another key.
  uint64_t removals() const { return counters_.evicted_idle + counters_.evicted_on_insert; }

 private:
  size_t LeftBucket(uint64_t h) const { return h & half_mask_; }
  size_t RightBucket(uint64_t h) const { return half_ + ((h >> 32) & half_mask_); }
  // The bucket's entry for (hash, qpn) or nullptr: its 8 hashes compared at once, then the QPN of
  // each match (one, but for a 64-bit collision).
  FlowEntry* FindIn(size_t bucket, uint64_t hash, uint32_t qpn) {
    const uint64_t* h = &hashes_[bucket * kBucketEntries];
#if defined(__SSE4_1__)
    // The bucket's hash line as four pairs of 64-bit lanes; one mask bit per matching lane.
    const __m128i k = _mm_set1_epi64x(static_cast<long long>(hash));
    const auto* p = reinterpret_cast<const __m128i*>(h);
    auto pair = [&](int j) {
      return static_cast<uint32_t>(
          _mm_movemask_pd(_mm_castsi128_pd(_mm_cmpeq_epi64(_mm_load_si128(p + j), k))));
    };
    uint32_t match = pair(0) | pair(1) << 2 | pair(2) << 4 | pair(3) << 6;
#else
    uint32_t match = 0;
    for (size_t i = 0; i < kBucketEntries; ++i) match |= static_cast<uint32_t>(h[i] == hash) << i;
#endif
    for (; match != 0; match &= match - 1) {
      FlowEntry& e = entries_[bucket * kBucketEntries + std::countr_zero(match)];
      if (e.qpn == qpn) [[likely]]
        return &e;
    }
    return nullptr;
  }
  // FindOrInsert() of an absent key.
  FlowEntry* Insert(uint64_t hash, uint32_t qpn, uint64_t now_ns, bool* inserted);
  size_t Live(size_t bucket) const;
  bool Idle(const FlowEntry& e, uint64_t now_ns) const { return now_ns - e.last_ns > idle_ns_; }

  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  size_t capacity_;
  size_t half_;       // buckets per half
  size_t half_mask_;  // half_ - 1
  uint64_t idle_ns_;
  size_t live_ = 0;
  std::unique_ptr<uint64_t[], Free> hashes_;  // kBucketEntries per bucket, line aligned
  std::unique_ptr<FlowEntry[], Free> entries_;
  FlowTableCounters counters_;
};

}  // namespace heddle::lb
