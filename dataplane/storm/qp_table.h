// File: dataplane/storm/qp_table.h
//
// The per-QP state table of the STORM stage (docs/storm.md §2): one 64-byte cache line per
// (direction, source IP, destination IP, destination QPN), in a fixed-capacity open-addressed
// table of 4-entry buckets that is allocated once at construction and never again.
//
//   heddle::storm::QpTable table({.capacity = 1 << 20, .idle_ms = 10'000});
//   const heddle::storm::QpKey key = heddle::storm::KeyFromPacket(frame, desc,
//   Direction::kRequest); heddle::storm::InsertResult r; heddle::storm::QpEntry* e =
//   table.FindOrInsert(key, now_ms, &r); if (e == nullptr) { /* table full: counted, tag with the
//   default level */ }
//
// An entry is identified by a 64-bit hash of the full key plus the QPN and the direction bit; the
// full 37-byte key is not stored (it would break the 64-byte budget). Two live QPs match falsely
// only if they share QPN and direction and collide in 64 bits.
//
// Threading: a QpTable belongs to one worker (lcore). FindOrInsert/Find/SweepIdle and the counters
// are not thread-safe; the control thread's sweep must run on the owning worker (or with the
// worker quiescent). The one field another worker may write is acked_psn (see QpEntry).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

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
  uint64_t key_hash;   // 0 = empty slot
  uint32_t qpn_dir;    // QPN (24 bits) | direction << 24
  uint32_t last_seen;  // coarse time, ms ticks (wraps; compared by difference)
  uint8_t kind;        // RequestKind of the current request
  uint8_t level;       // level recorded for the current request
  uint8_t flags;       // EntryFlag bits
  uint8_t held_level;  // level of the newest packet held in heddled (valid if egress_queued > 0)
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

// 64-bit hash of the key, never 0. A fixed mix — wyhash-style folded 128-bit multiplies over the
// four address words and qpn|direction, then xxHash64's avalanche — deterministic across runs and
// builds, unlike absl::Hash, whose seed changes per process.
uint64_t HashKey(const QpKey& key);

enum class InsertResult : uint8_t {
  kFound,        // an existing entry
  kInserted,     // a new entry in an empty slot
  kEvictedIdle,  // a new entry replacing the least-recently-seen idle entry of the bucket
  kTableFull,    // no empty or idle slot in the probe window: nullptr returned
};

struct QpTableOptions {
  size_t capacity = size_t{1} << 20;  // entries; a power of two >= 4
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
  static constexpr size_t kBucketEntries = 4;  // the probe window: one 256-byte group

  // Allocates capacity * 64 bytes, zeroed, 2 MiB aligned and advised for transparent huge pages
  // (a 1 M-entry table is 64 MiB: with 4 KiB pages every lookup of a cold QP is a TLB miss).
  // A capacity that is not a power of two >= 4 is rounded
  // up to one (the caller validates configuration; this never fails on the hot path).
  explicit QpTable(const QpTableOptions& options);
  QpTable(const QpTable&) = delete;
  QpTable& operator=(const QpTable&) = delete;

  // The entry for `key`, created if absent. Updates last_seen. nullptr when the bucket has no
  // empty slot and no entry idle longer than idle_ms (counted in table_full). `result` may be null.
  // Hot path: no allocation, no locks.
  QpEntry* FindOrInsert(const QpKey& key, uint32_t now_ms, InsertResult* result);
  QpEntry* FindOrInsertHashed(uint64_t hash, uint32_t qpn_dir, uint32_t now_ms,
                              InsertResult* result);

  // Starts loading the bucket of `hash` (all four cache lines) into the cache. On a burst, hash
  // every packet's key and prefetch first, then FindOrInsertHashed(): the misses overlap instead
  // of being paid one after another.
  void Prefetch(uint64_t hash) const {
    const QpEntry* b = Bucket(hash);
    for (size_t i = 0; i < kBucketEntries; ++i) __builtin_prefetch(&b[i], 1, 3);
  }

  // The entry for `key` or nullptr. Does not touch last_seen.
  QpEntry* Find(const QpKey& key);
  const QpEntry* Find(const QpKey& key) const;

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
  QpEntry* Bucket(uint64_t hash) const { return &entries_[(hash & bucket_mask_) * kBucketEntries]; }
  bool Idle(const QpEntry& e, uint32_t now_ms) const {
    return e.egress_queued == 0 && static_cast<uint32_t>(now_ms - e.last_seen) > idle_ms_;
  }
  static void Reset(QpEntry& e, uint64_t hash, uint32_t qpn_dir, uint32_t now_ms);

  size_t capacity_;
  uint64_t bucket_mask_;
  uint32_t idle_ms_;
  size_t live_ = 0;
  struct Free {
    void operator()(QpEntry* p) const;
  };
  std::unique_ptr<QpEntry[], Free> entries_;  // 2 MiB aligned, huge pages advised (Linux)
  QpTableCounters counters_;
};

}  // namespace heddle::storm
