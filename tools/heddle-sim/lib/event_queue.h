// File: tools/heddle-sim/lib/event_queue.h
//
// The simulator's event queue: a 4-ary min-heap of small plain events ordered by (time, sequence).
// The sequence number is the order of insertion, so events due at the same picosecond run in the
// order they were scheduled: a run is a pure function of its inputs and its seed.
//
//   EventQueue q;
//   q.Push(/*time_ps=*/1000, EventType::kTxDone, node_port, packet);
//   while (!q.empty()) { Event e = q.Pop(); ... }
//
// Events are 24 bytes and live in one vector that grows to the run's high-water mark and is then
// reused: no allocation per event. A 4-ary heap halves the depth of a binary one and keeps a
// node's children in one or two cache lines; measured in sim_benchmark (docs/sim.md §6).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace heddle::sim {

// Time in picoseconds: 4096 bytes at 400 Gb/s take 81 920 ps, exactly.
using TimePs = uint64_t;

struct Event {
  TimePs time = 0;
  uint64_t key = 0;  // (seq << 8) | type: the order of insertion breaks ties, type rides along
  uint32_t a = 0;    // event arguments (a port, a QP, a packet index ...)
  uint32_t b = 0;

  uint8_t type() const { return static_cast<uint8_t>(key & 0xff); }
};
static_assert(sizeof(Event) == 24);

class EventQueue {
 public:
  void Reserve(size_t n) { heap_.reserve(n); }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // Events pushed so far (the next sequence number).
  uint64_t pushed() const { return seq_; }
  TimePs top_time() const { return heap_.front().time; }

  void Push(TimePs time, uint8_t type, uint32_t a, uint32_t b) {
    Event e{time, (seq_++ << 8) | type, a, b};
    size_t i = heap_.size();
    heap_.push_back(e);
    while (i > 0) {
      const size_t parent = (i - 1) >> 2;
      if (!Less(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }

  // The earliest event (the first scheduled among equal times). The queue must not be empty.
  Event Pop() {
    const Event top = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    const size_t n = heap_.size();
    if (n == 0) return top;
    size_t i = 0;
    const Event* h = heap_.data();
    for (;;) {
      const size_t c = 4 * i + 1;
      size_t best;
      if (c + 4 <= n) [[likely]] {
        // All four children: a branch-free tournament (the comparisons are unpredictable).
        const size_t a = c + Less(h[c + 1], h[c]);
        const size_t b = c + 2 + Less(h[c + 3], h[c + 2]);
        best = Less(h[b], h[a]) ? b : a;
      } else {
        if (c >= n) break;
        best = c;
        for (size_t k = c + 1; k < n; ++k) best = Less(h[k], h[best]) ? k : best;
      }
      if (!Less(h[best], last)) break;
      heap_[i] = h[best];
      i = best;
    }
    heap_[i] = last;
    return top;
  }

  void Clear() {
    heap_.clear();
    seq_ = 0;
  }

 private:
  // (time, key) as one 128-bit number: compiled to a compare and a subtract with borrow, no
  // branch.
  static bool Less(const Event& x, const Event& y) {
    using U128 = unsigned __int128;
    return (U128{x.time} << 64 | x.key) < (U128{y.time} << 64 | y.key);
  }
  std::vector<Event> heap_;
  uint64_t seq_ = 0;
};

}  // namespace heddle::sim
