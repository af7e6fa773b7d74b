// File: dataplane/pipeline/spsc_ring_test.cc
//
// SpscRing: FIFO order, full and empty, capacity rounding, slot and position wrap-around, and one
// producer thread against one consumer thread (every message once, in order).
#include "dataplane/pipeline/spsc_ring.h"

#include <cstdint>
#include <thread>

#include "gtest/gtest.h"

namespace heddle::pipeline {
namespace {

struct Msg {
  uint64_t a;
  uint32_t b;
  uint32_t c;
};

TEST(SpscRingTest, CapacityIsRoundedUpToAPowerOfTwo) {
  EXPECT_EQ(SpscRing<Msg>(0).capacity(), 2u);
  EXPECT_EQ(SpscRing<Msg>(1).capacity(), 2u);
  EXPECT_EQ(SpscRing<Msg>(5).capacity(), 8u);
  EXPECT_EQ(SpscRing<Msg>(1024).capacity(), 1024u);
}

TEST(SpscRingTest, FifoUntilFullThenRefusesUntilPopped) {
  SpscRing<Msg> ring(4);
  Msg m{};
  EXPECT_FALSE(ring.TryPop(&m));  // empty
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(ring.TryPush({i, i + 1, i + 2}));
  EXPECT_EQ(ring.size(), 4u);
  EXPECT_FALSE(ring.TryPush({99, 0, 0}));  // full: nothing written
  ASSERT_TRUE(ring.TryPop(&m));
  EXPECT_EQ(m.a, 0u);
  EXPECT_EQ(m.b, 1u);
  EXPECT_EQ(m.c, 2u);
  EXPECT_TRUE(ring.TryPush({4, 5, 6}));  // one slot free again
  EXPECT_FALSE(ring.TryPush({99, 0, 0}));
  for (uint64_t want = 1; want <= 4; ++want) {
    ASSERT_TRUE(ring.TryPop(&m));
    EXPECT_EQ(m.a, want);
  }
  EXPECT_FALSE(ring.TryPop(&m));
  EXPECT_EQ(ring.size(), 0u);
}

TEST(SpscRingTest, SlotsAndPositionsWrapAround) {
  // Positions start 5 short of 2^32: the ring goes around its 8 slots many times and its
  // positions wrap to 0 on the way, without losing, duplicating or reordering a message, and
  // "full" stays exact across the wrap.
  SpscRing<Msg> ring(8, UINT32_MAX - 4);
  uint64_t pushed = 0, popped = 0;
  Msg m{};
  for (int round = 0; round < 100; ++round) {
    const int burst = 1 + round % 8;
    for (int i = 0; i < burst; ++i) ASSERT_TRUE(ring.TryPush({pushed++, 0, 0}));
    if (burst == 8) {
      EXPECT_FALSE(ring.TryPush({pushed, 0, 0}));
    }
    for (int i = 0; i < burst; ++i) {
      ASSERT_TRUE(ring.TryPop(&m));
      EXPECT_EQ(m.a, popped++);
    }
    EXPECT_FALSE(ring.TryPop(&m));
  }
  EXPECT_EQ(pushed, popped);
  // Fill it exactly while the positions sit across 2^32.
  SpscRing<Msg> across(4, UINT32_MAX - 1);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(across.TryPush({i, 0, 0}));
  EXPECT_FALSE(across.TryPush({9, 0, 0}));
  EXPECT_EQ(across.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(across.TryPop(&m));
    EXPECT_EQ(m.a, i);
  }
}

TEST(SpscRingTest, OneProducerThreadAndOneConsumerThread) {
  // The producer retries on full (a test, not the stage: the stage counts and drops). The consumer
  // must see 0, 1, 2, ... with the payload written before each push.
  constexpr uint64_t kMessages = 1'000'000;
  SpscRing<Msg> ring(64);
  uint64_t full = 0;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kMessages; ++i) {
      const Msg m{i, static_cast<uint32_t>(i * 7), static_cast<uint32_t>(~i)};
      while (!ring.TryPush(m)) ++full;
    }
  });
  uint64_t next = 0;
  Msg m{};
  while (next < kMessages) {
    if (!ring.TryPop(&m)) continue;
    ASSERT_EQ(m.a, next);
    ASSERT_EQ(m.b, static_cast<uint32_t>(next * 7));
    ASSERT_EQ(m.c, static_cast<uint32_t>(~next));
    ++next;
  }
  producer.join();
  EXPECT_FALSE(ring.TryPop(&m));
  EXPECT_EQ(next, kMessages);
  (void)full;  // how often the producer caught up depends on scheduling
}

}  // namespace
}  // namespace heddle::pipeline
