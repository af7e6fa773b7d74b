// File: dataplane/storm/qp_table.cc
#include "dataplane/storm/qp_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>

namespace heddle::storm {
namespace {

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
// ::ffff:a.b.c.d
inline bool V4Mapped(const std::array<uint8_t, 16>& a) {
  return Load64(a.data()) == 0 && a[8] == 0 && a[9] == 0 && a[10] == 0xff && a[11] == 0xff;
}

}  // namespace

uint64_t HashKey(const QpKey& key) {
  if (V4Mapped(key.src_ip) && V4Mapped(key.dst_ip)) {
    return hash_internal::HashV4(Load32(key.src_ip.data() + 12), Load32(key.dst_ip.data() + 12),
                                 QpTable::QpnDir(key));
  }
  // Fixed-size input (36 bytes): the four address words and qpn|direction into each register,
  // in the orders of HashV4().
  const uint64_t s0 = Load64(key.src_ip.data()), s1 = Load64(key.src_ip.data() + 8);
  const uint64_t d0 = Load64(key.dst_ip.data()), d1 = Load64(key.dst_ip.data() + 8);
  const uint32_t qd = QpTable::QpnDir(key);
  uint32_t lo = hash_internal::kSeedA;
  for (uint64_t w : {s0, s1, d0, d1}) lo = Crc32cStepU64(lo, w);
  lo = Crc32cStepU32(lo, qd);
  uint32_t hi = Crc32cStepU32(hash_internal::kSeedB, qd);
  for (uint64_t w : {s0, s1, d0, d1}) hi = Crc32cStepU64(hi, w ^ (w >> 32));
  return hash_internal::Combine(lo, hi);
}

QpKey KeyFromPacket(const uint8_t* frame, const pkt::PacketDesc& desc, Direction direction) {
  QpKey key;
  key.direction = direction;
  key.dest_qpn = desc.dest_qp & kQpnMask;
  const uint8_t* ip = frame + desc.l3_off;
  if (desc.l3 == pkt::L3::kIpv4) {
    // ::ffff:a.b.c.d
    key.src_ip[10] = key.src_ip[11] = 0xff;
    key.dst_ip[10] = key.dst_ip[11] = 0xff;
    std::memcpy(key.src_ip.data() + 12, ip + 12, 4);
    std::memcpy(key.dst_ip.data() + 12, ip + 16, 4);
  } else if (desc.l3 == pkt::L3::kIpv6) {
    std::memcpy(key.src_ip.data(), ip + 8, 16);
    std::memcpy(key.dst_ip.data(), ip + 24, 16);
  }
  return key;
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;

// n zeroed T, cache-line aligned, or 2 MiB aligned and advised for huge pages when that large.
template <typename T>
T* AllocateZeroed(size_t n) {
  const size_t bytes = n * sizeof(T);
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();  // construction, off the hot path
#ifdef MADV_HUGEPAGE
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advisory; failure is harmless
#endif
  std::memset(p, 0, rounded);
  return static_cast<T*>(p);
}
}  // namespace

QpTable::QpTable(const QpTableOptions& options)
    : capacity_(std::bit_ceil(std::max<size_t>(options.capacity, 4))),
      buckets_(std::max<size_t>(capacity_ / kBucketEntries, 1)),
      half_mask_(buckets_ > 1 ? buckets_ / 2 - 1 : 0),
      right_base_(buckets_ > 1 ? buckets_ / 2 : 0),
      slot_mask_(capacity_ >= kBucketEntries ? ~uint32_t{0} : (uint32_t{1} << capacity_) - 1),
      idle_ms_(options.idle_ms),
      entries_(AllocateZeroed<QpEntry>(capacity_)),
      tags_(AllocateZeroed<uint16_t>(buckets_ * kBucketEntries)),
      no_idle_before_(AllocateZeroed<uint32_t>(buckets_)) {}

void QpTable::Reset(size_t slot, uint64_t hash, uint32_t qpn_dir, uint32_t now_ms) {
  QpEntry& e = entries_[slot];
  e = QpEntry{};
  e.key_hash = hash;
  e.qpn_dir = qpn_dir;
  e.last_seen = now_ms;
  e.acked_psn = kNoPsn;
  tags_[slot] = Tag(hash);
}

QpEntry* QpTable::FindIn(size_t left, size_t right, uint64_t hash, uint32_t qpn_dir,
                         uint16_t tag) const {
  // Both buckets' matches in one mask (left in the low half), so that where the QP lives is not a
  // branch to mispredict. A single-bucket table has left == right: its high half stays empty.
  const uint64_t m = MatchMask(Tags(left), tag) |
                     (right != left ? uint64_t{MatchMask(Tags(right), tag)} << 32 : 0);
  for (uint64_t rest = m; rest != 0; rest &= rest - 1) {
    const unsigned bit = static_cast<unsigned>(std::countr_zero(rest));
    QpEntry& e = entries_[(bit < 32 ? left : right) * kBucketEntries + (bit & 31)];
    if (e.key_hash == hash && e.qpn_dir == qpn_dir) return &e;
  }
  return nullptr;
}

QpEntry* QpTable::OldestIdle(size_t bucket, uint32_t now_ms) {
  uint32_t& hint = no_idle_before_[bucket];
  // A hint in (now, now + idle_ms + 1] still holds; anything else has passed (or is 0: none).
  if (hint != 0 && hint - now_ms - 1 < idle_ms_ + 1) return nullptr;
  QpEntry* base = &entries_[bucket * kBucketEntries];
  QpEntry* oldest = nullptr;
  uint32_t oldest_age = 0;
  uint32_t max_live_age = 0;  // the oldest entry that is not yet idle
  bool held_past_idle = false;
  for (uint32_t m = ~MatchMask(Tags(bucket), 0) & slot_mask_; m != 0; m &= m - 1) {
    const QpEntry& e = base[std::countr_zero(m)];
    const uint32_t age = now_ms - e.last_seen;
    if (age <= idle_ms_) {
      max_live_age = std::max(max_live_age, age);
    } else if (e.egress_queued != 0) {
      held_past_idle = true;  // idle as soon as its packets leave: no time to note
    } else if (oldest == nullptr || age > oldest_age) {
      oldest = const_cast<QpEntry*>(&e);
      oldest_age = age;
    }
  }
  // Nothing idle: the first entry that can become idle is the oldest one, at now + idle_ms + 1 -
  // its age (last_seen only grows, and a replacement starts at a later last_seen). 0 = none.
  hint = oldest == nullptr && !held_past_idle ? now_ms + (idle_ms_ - max_live_age) + 1 : 0;
  return oldest;
}

QpEntry* QpTable::FindOrInsert(const QpKey& key, uint32_t now_ms, InsertResult* result) {
  return FindOrInsertHashed(HashKey(key), QpnDir(key), now_ms, result);
}

QpEntry* QpTable::FindOrInsertSlow(uint64_t hash, uint32_t qpn_dir, uint32_t now_ms,
                                   InsertResult* result) {
  const uint16_t tag = Tag(hash);
  const size_t left = LeftBucket(hash), right = RightBucket(hash);
  QpEntry* e = FindIn(left, right, hash, qpn_dir, tag);
  if (e != nullptr) {
    e->last_seen = now_ms;
    if (result) *result = InsertResult::kFound;
    return e;
  }
  const uint32_t el = MatchMask(Tags(left), 0) & slot_mask_;
  const uint32_t er = right != left ? MatchMask(Tags(right), 0) & slot_mask_ : 0;
  InsertResult r;
  size_t slot;
  if ((el | er) != 0) {
    // The emptier bucket; the left one on a tie (d-left: the halves fill unevenly, which
    // balances the buckets better than a fair tie-break).
    const bool go_right = std::popcount(er) > std::popcount(el);
    slot = (go_right ? right : left) * kBucketEntries + std::countr_zero(go_right ? er : el);
    r = InsertResult::kInserted;
    ++live_;
  } else {
    QpEntry* victim = OldestIdle(left, now_ms);
    if (right != left) {
      QpEntry* v = OldestIdle(right, now_ms);
      if (v != nullptr &&
          (victim == nullptr || static_cast<uint32_t>(now_ms - v->last_seen) >
                                    static_cast<uint32_t>(now_ms - victim->last_seen))) {
        victim = v;
      }
    }
    if (victim == nullptr) {
      ++counters_.table_full;
      if (result) *result = InsertResult::kTableFull;
      return nullptr;
    }
    slot = static_cast<size_t>(victim - entries_.get());
    r = InsertResult::kEvictedIdle;
    ++counters_.evicted_on_insert;
  }
  Reset(slot, hash, qpn_dir, now_ms);
  ++counters_.inserted;
  if (result) *result = r;
  return &entries_[slot];
}

const QpEntry* QpTable::FindHashed(uint64_t hash, uint32_t qpn_dir) const {
  const uint16_t tag = Tag(hash);
  const size_t left = LeftBucket(hash), right = RightBucket(hash);
  return FindIn(left, right, hash, qpn_dir, tag);
}

QpEntry* QpTable::FindHashed(uint64_t hash, uint32_t qpn_dir) {
  return const_cast<QpEntry*>(static_cast<const QpTable*>(this)->FindHashed(hash, qpn_dir));
}

const QpEntry* QpTable::Find(const QpKey& key) const {
  return FindHashed(HashKey(key), QpnDir(key));
}

QpEntry* QpTable::Find(const QpKey& key) { return FindHashed(HashKey(key), QpnDir(key)); }

size_t QpTable::SweepIdle(uint32_t now_ms) { return SweepIdleRange(0, capacity_, now_ms); }

size_t QpTable::SweepIdleRange(size_t begin, size_t count, uint32_t now_ms) {
  if (begin >= capacity_ || count == 0) return 0;
  const size_t end = begin + std::min(count, capacity_ - begin);
  size_t evicted = 0;
  for (size_t i = begin; i < end; ++i) {
    QpEntry& e = entries_[i];
    if (e.key_hash != 0 && Idle(e, now_ms)) {
      e = QpEntry{};
      tags_[i] = 0;
      ++evicted;
    }
  }
  for (size_t b = begin / kBucketEntries; b <= (end - 1) / kBucketEntries; ++b) {
    no_idle_before_[b] = 0;
  }
  live_ -= evicted;
  counters_.evicted_idle += evicted;
  return evicted;
}

}  // namespace heddle::storm
