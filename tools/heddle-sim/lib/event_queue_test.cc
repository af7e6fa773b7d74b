#include "tools/heddle-sim/lib/event_queue.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tools/heddle-sim/lib/rng.h"

namespace heddle::sim {
namespace {

TEST(EventQueueTest, PopsInTimeOrderAndTiesInInsertionOrder) {
  EventQueue q;
  Rng rng(7);
  std::vector<std::tuple<TimePs, uint32_t>> pushed;
  for (uint32_t i = 0; i < 20000; ++i) {
    const TimePs t = rng.Below(500);  // many ties
    q.Push(t, static_cast<uint8_t>(i % 7), i, i * 3);
    pushed.emplace_back(t, i);
  }
  std::stable_sort(pushed.begin(), pushed.end(),
                   [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
  for (const auto& [t, i] : pushed) {
    ASSERT_FALSE(q.empty());
    const Event e = q.Pop();
    EXPECT_EQ(e.time, t);
    EXPECT_EQ(e.a, i);
    EXPECT_EQ(e.b, i * 3);
    EXPECT_EQ(e.type(), i % 7);
  }
  EXPECT_TRUE(q.empty());
}

TEST(EventQueueTest, InterleavedPushPop) {
  EventQueue q;
  Rng rng(3);
  TimePs now = 0;
  q.Push(0, 0, 0, 0);
  uint64_t popped = 0;
  while (!q.empty() && popped < 100000) {
    const Event e = q.Pop();
    ASSERT_GE(e.time, now);
    now = e.time;
    ++popped;
    for (int k = static_cast<int>(rng.Below(3)); k > 0; --k) q.Push(now + rng.Below(1000), 1, 0, 0);
  }
  EXPECT_EQ(q.pushed(), popped + q.size());
}

}  // namespace
}  // namespace heddle::sim
