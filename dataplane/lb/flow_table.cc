// File: dataplane/lb/flow_table.cc
#include "dataplane/lb/flow_table.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

namespace heddle::lb {
namespace {

template <typename T>
T* AllocateZeroed(size_t n) {
  const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();  // construction only, never on the hot path
  std::memset(p, 0, bytes);
  return static_cast<T*>(p);
}

}  // namespace

FlowTable::FlowTable(const FlowTableOptions& options)
    : capacity_(std::bit_ceil(std::max<size_t>(options.capacity, 2 * kBucketEntries))),
      half_(capacity_ / kBucketEntries / 2),
      half_mask_(half_ - 1),
      idle_ns_(options.idle_ns),
      hashes_(AllocateZeroed<uint64_t>(capacity_)),
      entries_(AllocateZeroed<FlowEntry>(capacity_)) {}

size_t FlowTable::Live(size_t bucket) const {
  const uint64_t* h = &hashes_[bucket * kBucketEntries];
  size_t n = 0;
  for (size_t i = 0; i < kBucketEntries; ++i) n += h[i] != 0;
  return n;
}

FlowEntry* FlowTable::Find(uint64_t hash, uint32_t qpn) {
  if (hash == 0) return nullptr;
  qpn &= kPsnMask;
  if (FlowEntry* e = FindIn(LeftBucket(hash), hash, qpn)) return e;
  return FindIn(RightBucket(hash), hash, qpn);
}

FlowEntry* FlowTable::Insert(uint64_t hash, uint32_t qpn, uint64_t now_ns, bool* inserted) {
  if (inserted) *inserted = false;
  const size_t left = LeftBucket(hash), right = RightBucket(hash);

  // Absent: an empty slot of the emptier bucket, else the stalest idle entry of the two.
  const size_t nl = Live(left), nr = Live(right);
  size_t slot = SIZE_MAX;
  if (nl < kBucketEntries || nr < kBucketEntries) {
    const size_t b = nl <= nr ? left : right;
    for (size_t i = 0; i < kBucketEntries; ++i) {
      if (hashes_[b * kBucketEntries + i] == 0) {
        slot = b * kBucketEntries + i;
        break;
      }
    }
    ++live_;
  } else {
    for (size_t b : {left, right}) {
      for (size_t i = 0; i < kBucketEntries; ++i) {
        const size_t s = b * kBucketEntries + i;
        if (Idle(entries_[s], now_ns) &&
            (slot == SIZE_MAX || entries_[s].last_ns < entries_[slot].last_ns)) {
          slot = s;
        }
      }
    }
    if (slot == SIZE_MAX) {
      ++counters_.table_full;
      return nullptr;
    }
    ++counters_.evicted_on_insert;
  }
  FlowEntry& e = entries_[slot];
  std::memset(static_cast<void*>(&e), 0, sizeof(e));
  e.key_hash = hash;
  e.qpn = qpn;
  e.last_ns = now_ns;
  hashes_[slot] = hash;
  ++counters_.inserted;
  if (inserted) *inserted = true;
  return &e;
}

size_t FlowTable::SweepIdle(size_t begin, size_t count, uint64_t now_ns) {
  size_t evicted = 0;
  const size_t end = std::min(capacity_, begin + count);
  for (size_t s = begin; s < end; ++s) {
    if (s % kBucketEntries == 0 && s + kBucketEntries <= end) {
      // A whole bucket's hash line: most are empty, and one test skips them.
      const uint64_t* h = &hashes_[s];
      if ((h[0] | h[1] | h[2] | h[3] | h[4] | h[5] | h[6] | h[7]) == 0) {
        s += kBucketEntries - 1;
        continue;
      }
    }
    if (hashes_[s] != 0 && Idle(entries_[s], now_ns)) {
      hashes_[s] = 0;
      std::memset(static_cast<void*>(&entries_[s]), 0, sizeof(FlowEntry));
      ++evicted;
    }
  }
  live_ -= evicted;
  counters_.evicted_idle += evicted;
  return evicted;
}

}  // namespace heddle::lb
