// File: dataplane/storm/qp_table.h
//
// The per-QP state table of the STORM stage (docs/storm.md §2): one 64-byte cache line per
// (direction, source IP, destination IP, destination QPN), in a fixed-capacity table that is
// allocated once at construction and never again.
//
//   heddle::storm::QpTable table({.capacity = 1 << 20, .idle_ms = 10'000});
//   const heddle::storm::QpKey key =
//       heddle::storm::KeyFromPacket(frame, desc, Direction::kRequest);
//   heddle::storm::InsertResult r;
//   heddle::storm::QpEntry* e = table.FindOrInsert(key, now_ms, &r);
//   if (e == nullptr) { /* table full: counted, tag with the default level */ }
//
// An entry is identified by a 64-bit hash of the full key plus the QPN and the direction bit; the
// full 37-byte key is not stored (it would break the 64-byte budget). Two live QPs match falsely
// only if they share QPN and direction and collide in 64 bits.
//
// Probe scheme (two-choice, d-left): the entries form buckets of 32; a key may live in one bucket
// of the left half of the table or one of the right half, both picked by disjoint bits of its
// hash. An insert goes to the emptier of the two (the left one on a tie); a lookup checks both.
// Beside the entries, a tag array holds 16 bits of each entry's hash (0 = empty slot): a bucket's
// 32 tags are one cache line, so a lookup reads two tag lines and then, but for a 1-in-2000 false
// tag match, only the entry line whose tag matches. Tags and a 4-byte word per bucket add 2.1
// bytes per entry (66 MiB for 1 M entries). Measured (docs/storm.md §6.2): with QPs coming and
// going, under 0.01 % of inserts are refused at 90 % load (none at 85 %), where one 4-entry bucket
// per key refused 0.8 % of QPs at 30 % load and 2.8 % under churn.
//
// Entries never move: a pointer returned by FindOrInsert*() or Find*() stays valid until that
// entry is emptied (SweepIdle*(), or replaced by an insert after idling), and entry(i) is the same
// QP from one scan to the next while it lives.
//
// Threading: a QpTable belongs to one worker (lcore). FindOrInsert/Find/SweepIdle and the counters
// are not thread-safe; the control thread's sweep must run on the owning worker (or with the worker
// quiescent). The one field another worker may write is acked_psn (see QpEntry).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/crc32c.h"
#include "dataplane/pkt/parse.h"

namespace heddle::storm {

inline constexpr uint32_t kPsnMask = 0xffffff;
inline constexpr uint32_t kQpnMask = 0xffffff;
// acked_psn before any acknowledgement was seen (not a 24-bit PSN).
inline constexpr uint32_t kNoPsn = 0xffffffff;

enum class Direction : uint8_t {
  kRequest = 0,   // host -> uplink: SEND, WRITE, READ request, ATOMIC
  kResponse = 1,  // uplink -> host: ACK/NAK, READ responses, atomic ACKs, CNPs
};

// What the current request of an entry is. Stored in QpEntry::kind.
enum class RequestKind : uint8_t { kNone = 0, kWrite, kRead, kSend, kAtomic };

// Bits of QpEntry::flags.
enum EntryFlag : uint8_t {
  kEntrySizeKnown = 1u << 0,    // `size` is the request's size (0 may then be a real size)
  kEntryInProgress = 1u << 1,   // a request started and its last packet has not been seen
  kEntryPsnValid = 1u << 2,     // next_psn holds a PSN (a request-direction packet was seen)
  kEntryEndPsnValid = 1u << 3,  // end_psn holds the request's last PSN
  kEntryLevelValid = 1u << 4,   // `level` was computed for the current request
};

// One QP's state; one cache line. Field meanings are in docs/storm.md §2. Request-direction fields
// are written only by the worker that owns the table; acked_psn may be written by the worker that
// receives the QP's responses, always through StoreAckedPsn()/LoadAckedPsn() (relaxed atomics on a
// naturally aligned 4-byte word, so the struct stays trivially copyable).
struct alignas(64) QpEntry {
  uint64_t key_hash;       // 0 = empty slot
  uint32_t qpn_dir;        // QPN (24 bits) | direction << 24
  uint32_t last_seen;      // coarse time, ms ticks (wraps; compared by difference)
  uint8_t kind;            // RequestKind of the current request
  uint8_t level;           // level recorded for the current request
  uint8_t flags;           // EntryFlag bits
  uint8_t held_level;      // level of the newest packet tagged: the in-order guard's cap while
                           // egress_queued > 0, the fabric guard's while packets are unacknowledged
  uint32_t size;           // request size S in bytes (meaningful if kEntrySizeKnown)
  uint32_t sent;           // payload bytes of the current request seen so far
  uint32_t first_psn;      // PSN of the current request's first packet
  uint32_t next_psn;       // next expected PSN
  uint32_t end_psn;        // last PSN of the current request (if kEntryEndPsnValid)
  uint32_t acked_psn;      // highest PSN acknowledged (kNoPsn: none); atomic access only
  uint32_t completed;      // requests completed on this QP
  uint32_t egress_queued;  // packets of this QP held in heddled (burst or egress queue)
  uint32_t host_backlog;   // bytes posted by the application, not yet on the wire (shim)
  uint32_t dst_ip4;        // IPv4 destination as on the wire (for `show qp`); 0 for IPv6
  // The storm-tag stage's burst number when it first saw this QP in a burst, and egress_queued
  // then: the QP's packets queued from earlier bursts (the egress backlog source).
  uint16_t burst_mark;
  uint16_t queued_at_mark;
};
static_assert(sizeof(QpEntry) == 64, "QpEntry must be one cache line");
static_assert(alignof(QpEntry) == 64);
static_assert(std::atomic_ref<uint32_t>::required_alignment <= alignof(uint32_t));

inline Direction EntryDirection(const QpEntry& e) {
  return static_cast<Direction>((e.qpn_dir >> 24) & 1);
}
inline uint32_t EntryQpn(const QpEntry& e) { return e.qpn_dir & kQpnMask; }

// Relaxed: acked_psn is a progress hint read by the same or another worker; nothing else is
// published through it, so no ordering with other fields is needed.
inline void StoreAckedPsn(QpEntry& e, uint32_t psn) {
  std::atomic_ref<uint32_t>(e.acked_psn).store(psn, std::memory_order_relaxed);
}
inline uint32_t LoadAckedPsn(QpEntry& e) {
  return std::atomic_ref<uint32_t>(e.acked_psn).load(std::memory_order_relaxed);
}

// The lookup key. Addresses are 16 bytes: IPv4 is mapped as ::ffff:a.b.c.d.
struct QpKey {
  Direction direction = Direction::kRequest;
  std::array<uint8_t, 16> src_ip{};
  std::array<uint8_t, 16> dst_ip{};
  uint32_t dest_qpn = 0;  // 24 bits

  friend bool operator==(const QpKey&, const QpKey&) = default;
};

// The key of a parsed RoCE frame as seen in `direction` (addresses as on the wire, not swapped).
// `desc` must come from pkt::Parse() of `frame` with l3 != kNone.
QpKey KeyFromPacket(const uint8_t* frame, const pkt::PacketDesc& desc, Direction direction);

// 64-bit hash of the key, never 0: two CRC-32C registers (the SSE4.2 `crc32` instruction where
// the build has it, as DPDK's rte_hash hashes its keys; bytewise elsewhere, with the same values)
// over the key's words, each from its own fixed seed and in its own word order — low: seed A,
// the address words, then qpn|direction; high: seed B, qpn|direction, then each address word w
// as w ^ (w >> 32) — side by side and multiplied by one odd constant. Deterministic
// across runs and builds, unlike absl::Hash, whose seed changes per process. The table takes its
// left bucket from bits 0..23, its right one from 24..47 and its tag from 48..63 (QpTable).
// CRC-32C detects every change of a few bits in messages this short (up to 6 of an IPv4 key's
// 89, checked), so keys that differ in a few address or QPN bits (adjacent hosts, sequential
// QPNs) never share the low register; they spread evenly over left buckets because a CRC is
// linear, so an aligned run of keys maps affinely onto the bucket bits (the Spread test checks
// it — distinct registers alone would say nothing about 12-odd bucket bits); the multiply spreads
// keys that share a left bucket over their right buckets and tags; two IPv4 address pairs of one
// QPN never collide (the registers together are injective on the 64 address bits: the Castagnoli
// polynomial has the factor x + 1, so a CRC keeps its input's parity, and two registers over the
// same words in another order would lose one bit; the high register's words are therefore folded
// first). qp_table_test.cc checks these properties; a CRC is linear and does not avalanche, and the
// table does not need it to. When both addresses are IPv4 (mapped) only their 4-byte forms are
// hashed: the per-packet HashPacket() reads them straight from the IPv4 header without building a
// key.
uint64_t HashKey(const QpKey& key);

namespace hash_internal {
inline constexpr uint32_t kSeedA = 0x9E3779B9u;
inline constexpr uint32_t kSeedB = 0x85EBCA77u;
// The CRC-32C register steps are common/crc32c.h's Crc32cStepU32/U64: the `crc32`
// instruction, or bytewise with the same values.
// The two registers side by side, times an odd constant (a bijection: no two keys that the
// registers tell apart collide; bits 0..23 are a bijection of the low register's, bits 24..63
// mix both registers), never 0 (0 marks an empty slot).
inline constexpr uint64_t kMix = 0x9E3779B97F4A7C15ull;
inline uint64_t Combine(uint32_t lo, uint32_t hi) {
  const uint64_t h = (uint64_t{hi} << 32 | lo) * kMix;
  return h == 0 ? 1 : h;
}
// src and dst are the addresses' 4 bytes as in memory (network order, loaded as host words).
inline uint64_t HashV4(uint32_t src, uint32_t dst, uint32_t qpn_dir) {
  const uint64_t addrs = uint64_t{src} << 32 | dst;
  return Combine(Crc32cStepU32(Crc32cStepU64(kSeedA, addrs), qpn_dir),
                 Crc32cStepU64(Crc32cStepU32(kSeedB, qpn_dir), addrs ^ (addrs >> 32)));
}
}  // namespace hash_internal

// HashKey(KeyFromPacket(frame, desc, direction)), without building the key for IPv4.
inline uint64_t HashPacket(const uint8_t* frame, const pkt::PacketDesc& desc, Direction direction) {
  if (desc.l3 == pkt::L3::kIpv4) {
    uint32_t src, dst;
    std::memcpy(&src, frame + desc.l3_off + 12, 4);
    std::memcpy(&dst, frame + desc.l3_off + 16, 4);
    return hash_internal::HashV4(
        src, dst, (desc.dest_qp & kQpnMask) | static_cast<uint32_t>(direction) << 24);
  }
  return HashKey(KeyFromPacket(frame, desc, direction));
}

enum class InsertResult : uint8_t {
  kFound,        // an existing entry
  kInserted,     // a new entry in an empty slot
  kEvictedIdle,  // a new entry replacing the least-recently-seen idle entry of its two buckets
  kTableFull,    // no empty or idle slot in either bucket: nullptr returned
};

struct QpTableOptions {
  size_t capacity = size_t{1} << 20;  // entries; a power of two >= 4 (hold <= 90 % of it live)
  uint32_t idle_ms = 10'000;          // an entry idle longer than this may be evicted
};

struct QpTableCounters {
  uint64_t inserted = 0;           // new entries (in empty or evicted slots)
  uint64_t table_full = 0;         // refused inserts (storm-table-full)
  uint64_t evicted_idle = 0;       // idle entries reclaimed by SweepIdle
  uint64_t evicted_on_insert = 0;  // idle entries replaced by FindOrInsert
};

class QpTable {
 public:
  // Entries per bucket. A bucket's tags (2 bytes each) fill one cache line. A table smaller than
  // one bucket is a single bucket of `capacity` entries.
  static constexpr size_t kBucketEntries = 32;

  // Allocates capacity * 64 bytes of entries and capacity * 2 bytes of tags (plus 4 bytes per
  // bucket), zeroed; each array is 2 MiB aligned and advised for transparent huge pages when it
  // is that large (a 1 M-entry table is 64 MiB: with 4 KiB pages every lookup of a cold QP is a
  // TLB miss). A capacity that is not a power of two >= 4 is rounded up to one (the caller
  // validates configuration; this never fails on the hot path).
  explicit QpTable(const QpTableOptions& options);
  QpTable(const QpTable&) = delete;
  QpTable& operator=(const QpTable&) = delete;

  // The entry for `key`, created if absent. Updates last_seen. A new entry goes to an empty slot of
  // the emptier of its two buckets; with both full it replaces the entry of the two buckets that
  // was seen least recently among those idle longer than idle_ms with egress_queued == 0 (counted
  // in evicted_on_insert); with none, nullptr (counted in table_full). `result` may be null.
  // Hot path: no allocation, no locks; two tag lines and one entry line are touched, except when
  // both buckets are full: then their entries are read to find an idle one, and a bucket that has
  // none is not read again until its oldest entry can have idled.
  QpEntry* FindOrInsert(const QpKey& key, uint32_t now_ms, InsertResult* result);
  // `hint`: Probe()'s answer for this hash (below); checked first, inline.
  QpEntry* FindOrInsertHashed(uint64_t hash, uint32_t qpn_dir, uint32_t now_ms,
                              InsertResult* result, uint32_t hint = kNoSlot) {
    if (QpEntry* g = FindAt(hint, hash, qpn_dir)) [[likely]] {
      g->last_seen = now_ms;
      if (result) *result = InsertResult::kFound;
      return g;
    }
    return FindOrInsertSlow(hash, qpn_dir, now_ms, result);
  }
  // FindOrInsertHashed()'s inline part alone: the entry at slot `hint` if it holds the QP (its
  // last_seen not touched), else nullptr — then FindOrInsertHashed() without a hint does the rest.
  QpEntry* FindAt(uint32_t hint, uint64_t hash, uint32_t qpn_dir) {
    if (hint < capacity_) [[likely]] {
      QpEntry& g = entries_[hint];
      if (g.key_hash == hash && g.qpn_dir == qpn_dir) [[likely]]
        return &g;
    }
    return nullptr;
  }

  // A burst's lookups in three passes, so that its cache misses overlap instead of being paid one
  // after another:
  //
  //   for (i = 0; i < n; ++i) { hash[i] = HashPacket(...); table.Prefetch(hash[i]); }
  //   for (i = 0; i < n; ++i) hint[i] = table.Probe(hash[i]);
  //   for (i = 0; i < n; ++i) e = table.FindOrInsertHashed(hash[i], qpn_dir[i], now_ms, &r,
  //   hint[i]);
  //
  // Prefetch() starts loading the key's two tag lines. Probe() reads them (in cache by then),
  // prefetches the entry line whose tag matches and returns that slot (kNoSlot: no tag matches,
  // a new QP). The lookup checks the hinted entry first; entries never move, so if it holds the
  // key it is the key's entry, and a stale or wrong hint only costs the full two-bucket lookup.
  // Neither call changes anything: they are cache hints, and a lookup without them is as correct.
  static constexpr uint32_t kNoSlot = ~uint32_t{0};
  void Prefetch(uint64_t hash) const {
    __builtin_prefetch(Tags(LeftBucket(hash)), 0, 3);
    __builtin_prefetch(Tags(RightBucket(hash)), 0, 3);
  }
  // The slot of an entry of this table, and a prefetch of a slot's entry line (a slot remembered
  // from an earlier burst: the lookup verifies it).
  uint32_t SlotOf(const QpEntry* e) const { return static_cast<uint32_t>(e - entries_.get()); }
  void PrefetchSlot(uint32_t slot) const {
    if (slot < capacity_) __builtin_prefetch(&entries_[slot], 1, 3);
  }
  // Branch-free: which bucket holds the QP is a coin toss, and a mispredicted branch on a tag load
  // would serialize the loads.
  uint32_t Probe(uint64_t hash) const {
    const uint16_t tag = Tag(hash);
    const size_t left = LeftBucket(hash), right = RightBucket(hash);
    const uint32_t ml = MatchMask(Tags(left), tag);
    const uint32_t mr = MatchMask(Tags(right), tag);
    const size_t slot = ml != 0 ? left * kBucketEntries + std::countr_zero(ml)
                                : right * kBucketEntries + (std::countr_zero(mr) & 31);
    const bool found = (ml | mr) != 0;
    // No match (a new QP, which the insert only writes): the right tag line, already cached.
    __builtin_prefetch(
        found ? static_cast<const void*>(&entries_[slot]) : static_cast<const void*>(Tags(right)),
        1, 3);
    return found ? static_cast<uint32_t>(slot) : kNoSlot;
  }

  // The entry for `key` (or hash and qpn_dir) or nullptr. Does not touch last_seen.
  QpEntry* Find(const QpKey& key);
  const QpEntry* Find(const QpKey& key) const;
  QpEntry* FindHashed(uint64_t hash, uint32_t qpn_dir);
  const QpEntry* FindHashed(uint64_t hash, uint32_t qpn_dir) const;

  // Empties every entry idle longer than idle_ms at `now_ms`; returns how many. An entry with
  // packets still held in heddled (egress_queued > 0) is never idle: its counter is referenced.
  size_t SweepIdle(uint32_t now_ms);
  // The same over entries [begin, begin + count) (clamped to the capacity): the owning worker
  // sweeps the table a slice per poll loop.
  size_t SweepIdleRange(size_t begin, size_t count, uint32_t now_ms);

  // Entry i in [0, capacity): for scans by the owning thread (empty when key_hash == 0).
  const QpEntry& entry(size_t i) const { return entries_[i]; }

  size_t capacity() const { return capacity_; }
  size_t size() const { return live_; }
  uint32_t idle_ms() const { return idle_ms_; }
  const QpTableCounters& counters() const { return counters_; }

  static uint32_t QpnDir(const QpKey& key) {
    return (key.dest_qpn & kQpnMask) | static_cast<uint32_t>(key.direction) << 24;
  }

 private:
  friend struct QpTablePeer;  // qp_table_test.cc: checks the tags against the entries

  // Tag of a hash: its top 16 bits, never 0 (0 marks an empty slot). The bucket indices use bits
  // 0..23 and 24..47, so keys that share a bucket still differ in their tags.
  static uint16_t Tag(uint64_t hash) {
    const auto t = static_cast<uint16_t>(hash >> 48);
    return static_cast<uint16_t>(t + (t == 0));
  }
  size_t LeftBucket(uint64_t hash) const { return hash & half_mask_; }
  size_t RightBucket(uint64_t hash) const { return right_base_ + ((hash >> 24) & half_mask_); }
  const uint16_t* Tags(size_t bucket) const { return &tags_[bucket * kBucketEntries]; }

  // Bit i set where tags[i] == tag, for a bucket's 32 tags (64-byte aligned).
  static uint32_t MatchMask(const uint16_t* tags, uint16_t tag) {
#if defined(__SSE2__)
    const __m128i t = _mm_set1_epi16(static_cast<short>(tag));
    const __m128i* p = reinterpret_cast<const __m128i*>(tags);
    // Equal lanes are 0xffff, which packs (signed saturation) to 0xff; others to 0.
    const __m128i lo = _mm_packs_epi16(_mm_cmpeq_epi16(_mm_load_si128(p), t),
                                       _mm_cmpeq_epi16(_mm_load_si128(p + 1), t));
    const __m128i hi = _mm_packs_epi16(_mm_cmpeq_epi16(_mm_load_si128(p + 2), t),
                                       _mm_cmpeq_epi16(_mm_load_si128(p + 3), t));
    return static_cast<uint32_t>(_mm_movemask_epi8(lo)) |
           static_cast<uint32_t>(_mm_movemask_epi8(hi)) << 16;
#else
    uint32_t m = 0;
    for (size_t i = 0; i < kBucketEntries; ++i) m |= static_cast<uint32_t>(tags[i] == tag) << i;
    return m;
#endif
  }

  bool Idle(const QpEntry& e, uint32_t now_ms) const {
    return e.egress_queued == 0 && static_cast<uint32_t>(now_ms - e.last_seen) > idle_ms_;
  }
  QpEntry* FindOrInsertSlow(uint64_t hash, uint32_t qpn_dir, uint32_t now_ms, InsertResult* result);
  QpEntry* FindIn(size_t left, size_t right, uint64_t hash, uint32_t qpn_dir, uint16_t tag) const;
  // The least recently seen idle entry of `bucket`, or nullptr (then notes when one may be).
  QpEntry* OldestIdle(size_t bucket, uint32_t now_ms);
  void Reset(size_t slot, uint64_t hash, uint32_t qpn_dir, uint32_t now_ms);

  struct Free {
    void operator()(void* p) const { std::free(p); }
  };

  size_t capacity_;
  size_t buckets_;
  uint64_t half_mask_;   // buckets per half - 1 (0 for a single bucket)
  uint64_t right_base_;  // first bucket of the right half (0 for a single bucket)
  uint32_t slot_mask_;   // the slots of a bucket that exist (fewer than 32 in a tiny table)
  uint32_t idle_ms_;
  size_t live_ = 0;
  std::unique_ptr<QpEntry[], Free> entries_;  // 2 MiB aligned, huge pages advised
  std::unique_ptr<uint16_t[], Free> tags_;    // kBucketEntries per bucket, line aligned
  // Per bucket, when not 0: no entry of the bucket can be idle before this time (ms), learnt when
  // an insert found both buckets full and nothing idle. It stays a lower bound as entries are
  // seen or replaced (last_seen only grows); the sweep clears it as it passes, so that it never
  // outlives the 2^32 ms clock. It spares full buckets the 32-line scan on every packet of a QP
  // the table refuses.
  std::unique_ptr<uint32_t[], Free> no_idle_before_;
  QpTableCounters counters_;
};

}  // namespace heddle::storm
