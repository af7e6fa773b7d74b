// File: dataplane/pipeline/spsc_ring.h
//
// A bounded, lock-free ring with exactly one producer thread and one consumer thread, for small
// trivially copyable messages between two workers (the storm-tag stage's response join,
// docs/storm.md §6.1). Allocated once at construction; push and pop never allocate, never block
// and never wait for the other side: a full ring refuses the push, an empty one the pop.
//
//   SpscRing<AckMessage> ring(1024);           // setup: capacity rounded up to a power of two
//   ...producer (one thread only):  if (!ring.TryPush(m)) ++ring_full;   // counted drop
//   ...consumer (one thread only):  AckMessage m; while (ring.TryPop(&m)) Apply(m);
//
// How it stays correct without locks. Two free-running 32-bit positions: `tail_`, the number of
// messages ever pushed, written only by the producer, and `head_`, the number ever popped, written
// only by the consumer. Slot i of the array holds message number n when n & mask == i. The ring
// holds tail - head messages (unsigned subtraction, so a position wrapping past 2^32 is harmless
// as long as the capacity is at most 2^31, which the constructor enforces).
//   * Producer: writes the message into slot tail & mask, then stores tail + 1 with release
//     order. The consumer loads tail with acquire order, so once it sees the new tail it also
//     sees the message bytes written before it.
//   * Consumer: copies slot head & mask out, then stores head + 1 with release order. The producer
//     loads head with acquire order before it reuses a slot, so the consumer's copy happened
//     before the producer overwrites it (the slot is handed back only after it was read).
// Each side keeps a private copy of the other side's position (`cached_head_`, `cached_tail_`) and
// reloads the shared one only when its copy says full (producer) or empty (consumer): in the
// common case a push or pop touches no cache line the other core writes, except the slot itself.
// The producer's fields and the consumer's fields live on separate cache lines so that the two
// cores never false-share one.
//
// Not for more than one producer or more than one consumer: two producers would both write slot
// tail & mask. StormControl owns one ring per (producer worker, consumer worker) pair for that
// reason.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace heddle::pipeline {

template <typename T>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<T>, "messages are copied in and out by value");

 public:
  static constexpr size_t kMaxCapacity = size_t{1} << 31;

  // `capacity` is rounded up to a power of two in [2, 2^31]. `start` is the initial position of
  // both sides (tests start near 2^32 to cover the positions' wrap).
  explicit SpscRing(size_t capacity, uint32_t start = 0)
      : mask_(static_cast<uint32_t>(std::bit_ceil(std::clamp<size_t>(capacity, 2, kMaxCapacity)) -
                                    1)),
        slots_(new T[size_t{mask_} + 1]) {
    head_.store(start, std::memory_order_relaxed);
    tail_.store(start, std::memory_order_relaxed);
    cached_head_ = start;
    cached_tail_ = start;
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  size_t capacity() const { return size_t{mask_} + 1; }

  // Producer only. False (nothing written) when the ring is full.
  bool TryPush(const T& v) {
    const uint32_t tail = tail_.load(std::memory_order_relaxed);  // our own position
    if (tail - cached_head_ > mask_) {
      cached_head_ = head_.load(std::memory_order_acquire);  // pairs with the pop's release
      if (tail - cached_head_ > mask_) return false;
    }
    slots_[tail & mask_] = v;
    tail_.store(tail + 1, std::memory_order_release);  // publishes the slot
    return true;
  }

  // Consumer only. False when the ring is empty.
  bool TryPop(T* out) {
    const uint32_t head = head_.load(std::memory_order_relaxed);  // our own position
    if (head == cached_tail_) {
      cached_tail_ = tail_.load(std::memory_order_acquire);  // pairs with the push's release
      if (head == cached_tail_) return false;
    }
    *out = slots_[head & mask_];
    head_.store(head + 1, std::memory_order_release);  // hands the slot back
    return true;
  }

  // Messages in the ring as the calling side last saw them; exact only when neither side runs.
  size_t size() const {
    return tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire);
  }

 private:
  const uint32_t mask_;
  const std::unique_ptr<T[]> slots_;
  // Consumer's line: its position and its copy of the producer's.
  alignas(64) std::atomic<uint32_t> head_{0};
  uint32_t cached_tail_ = 0;
  // Producer's line.
  alignas(64) std::atomic<uint32_t> tail_{0};
  uint32_t cached_head_ = 0;
};

}  // namespace heddle::pipeline
