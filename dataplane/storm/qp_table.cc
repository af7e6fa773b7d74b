// File: dataplane/storm/qp_table.cc
#include "dataplane/storm/qp_table.h"

#include <algorithm>

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>

namespace heddle::storm {
namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ull;

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 64x64 -> 128-bit multiply folded to 64 bits (wyhash's "mum"): one multiply mixes every input
// bit into the middle of the product, and the fold brings the high half back down.
inline uint64_t Mum(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

}  // namespace

uint64_t HashKey(const QpKey& key) {
  // Fixed-size input (36 bytes): two independent folded multiplies over the four address words
  // (they run in parallel), one more with qpn|direction, then the xxHash64 avalanche. The
  // constants are xxHash64's primes; byte order is the host's (the hash never leaves the host).
  const uint64_t a =
      Mum(Load64(key.src_ip.data()) ^ kPrime1, Load64(key.src_ip.data() + 8) ^ kPrime2);
  const uint64_t b =
      Mum(Load64(key.dst_ip.data()) ^ kPrime3, Load64(key.dst_ip.data() + 8) ^ kPrime4);
  uint64_t h =
      Mum(a ^ b ^ kPrime5, (static_cast<uint64_t>(QpTable::QpnDir(key)) << 32 | 36) ^ kPrime1);
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h == 0 ? 1 : h;  // 0 marks an empty slot
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

QpEntry* AllocateEntries(size_t n) {
  const size_t bytes = n * sizeof(QpEntry);
  const size_t align = bytes >= kHugePage ? kHugePage : alignof(QpEntry);
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();  // construction, off the hot path
#ifdef MADV_HUGEPAGE
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advisory; failure is harmless
#endif
  std::memset(p, 0, rounded);
  return static_cast<QpEntry*>(p);
}
}  // namespace

void QpTable::Free::operator()(QpEntry* p) const { std::free(p); }

QpTable::QpTable(const QpTableOptions& options)
    : capacity_(
          std::bit_ceil(options.capacity < kBucketEntries ? kBucketEntries : options.capacity)),
      bucket_mask_(capacity_ / kBucketEntries - 1),
      idle_ms_(options.idle_ms),
      entries_(AllocateEntries(capacity_)) {}

void QpTable::Reset(QpEntry& e, uint64_t hash, uint32_t qpn_dir, uint32_t now_ms) {
  e = QpEntry{};
  e.key_hash = hash;
  e.qpn_dir = qpn_dir;
  e.last_seen = now_ms;
  e.acked_psn = kNoPsn;
}

QpEntry* QpTable::FindOrInsert(const QpKey& key, uint32_t now_ms, InsertResult* result) {
  return FindOrInsertHashed(HashKey(key), QpnDir(key), now_ms, result);
}

QpEntry* QpTable::FindOrInsertHashed(uint64_t hash, uint32_t qpn_dir, uint32_t now_ms,
                                     InsertResult* result) {
  QpEntry* bucket = Bucket(hash);
  QpEntry* empty = nullptr;
  QpEntry* oldest_idle = nullptr;
  for (size_t i = 0; i < kBucketEntries; ++i) {
    QpEntry& e = bucket[i];
    if (e.key_hash == hash && e.qpn_dir == qpn_dir) {
      e.last_seen = now_ms;
      if (result) *result = InsertResult::kFound;
      return &e;
    }
    if (e.key_hash == 0) {
      if (empty == nullptr) empty = &e;
    } else if (Idle(e, now_ms) && (oldest_idle == nullptr ||
                                   static_cast<uint32_t>(now_ms - e.last_seen) >
                                       static_cast<uint32_t>(now_ms - oldest_idle->last_seen))) {
      oldest_idle = &e;
    }
  }
  InsertResult r;
  QpEntry* slot;
  if (empty != nullptr) {
    slot = empty;
    r = InsertResult::kInserted;
    ++live_;
  } else if (oldest_idle != nullptr) {
    slot = oldest_idle;
    r = InsertResult::kEvictedIdle;
    ++counters_.evicted_on_insert;
  } else {
    ++counters_.table_full;
    if (result) *result = InsertResult::kTableFull;
    return nullptr;
  }
  Reset(*slot, hash, qpn_dir, now_ms);
  ++counters_.inserted;
  if (result) *result = r;
  return slot;
}

const QpEntry* QpTable::Find(const QpKey& key) const {
  const uint64_t hash = HashKey(key);
  const uint32_t qpn_dir = QpnDir(key);
  const QpEntry* bucket = Bucket(hash);
  for (size_t i = 0; i < kBucketEntries; ++i) {
    if (bucket[i].key_hash == hash && bucket[i].qpn_dir == qpn_dir) return &bucket[i];
  }
  return nullptr;
}

QpEntry* QpTable::Find(const QpKey& key) {
  return const_cast<QpEntry*>(static_cast<const QpTable*>(this)->Find(key));
}

size_t QpTable::SweepIdle(uint32_t now_ms) { return SweepIdleRange(0, capacity_, now_ms); }

size_t QpTable::SweepIdleRange(size_t begin, size_t count, uint32_t now_ms) {
  size_t evicted = 0;
  const size_t end = begin < capacity_ ? begin + std::min(count, capacity_ - begin) : begin;
  for (size_t i = begin; i < end; ++i) {
    QpEntry& e = entries_[i];
    if (e.key_hash != 0 && Idle(e, now_ms)) {
      e = QpEntry{};
      ++evicted;
    }
  }
  live_ -= evicted;
  counters_.evicted_idle += evicted;
  return evicted;
}

}  // namespace heddle::storm
