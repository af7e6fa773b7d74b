// File: dataplane/lb/flow_table_test.cc
#include "dataplane/lb/flow_table.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "dataplane/lb/internal/hash.h"

namespace heddle::lb {
namespace {

// Well-mixed, never 0 (a constant low bit would leave half of the left buckets unused).
uint64_t H(uint64_t i) {
  const uint64_t h = internal::Avalanche(i + 1);
  return h == 0 ? 1 : h;
}

TEST(FlowTable, InsertFindAndKeyByHashAndQpn) {
  FlowTable t({.capacity = 1024, .idle_ns = 1000});
  bool inserted = false;
  FlowEntry* a = t.FindOrInsert(H(1), 7, 0, &inserted);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(inserted);
  EXPECT_EQ(a->key_hash, H(1));
  EXPECT_EQ(a->qpn, 7u);
  a->flow_bytes = 99;
  EXPECT_EQ(t.FindOrInsert(H(1), 7, 5, &inserted), a);
  EXPECT_FALSE(inserted);
  EXPECT_EQ(a->flow_bytes, 99u);
  FlowEntry* b = t.FindOrInsert(H(1), 8, 5, &inserted);  // same hash, other QPN: another flow
  EXPECT_TRUE(inserted);
  EXPECT_NE(a, b);
  EXPECT_EQ(t.Find(H(1), 7), a);
  EXPECT_EQ(t.Find(H(2), 7), nullptr);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.counters().inserted, 2u);
}

TEST(FlowTable, FullIsCountedThenIdleEntriesAreReplaced) {
  // 16 entries: two buckets of 8, every key may use both.
  FlowTable t({.capacity = 16, .idle_ns = 1000});
  for (uint64_t i = 0; i < 16; ++i) {
    FlowEntry* e = t.FindOrInsert(H(i), 1, 100, nullptr);
    ASSERT_NE(e, nullptr) << i;
    e->last_ns = 100 + i;  // the caller owns last_ns
  }
  EXPECT_EQ(t.size(), 16u);
  EXPECT_EQ(t.FindOrInsert(H(100), 1, 500, nullptr), nullptr);
  EXPECT_EQ(t.counters().table_full, 1u);
  // Past the idle time the stalest entry (i = 0) gives way.
  FlowEntry* e = t.FindOrInsert(H(100), 1, 1101, nullptr);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(t.counters().evicted_on_insert, 1u);
  EXPECT_EQ(t.Find(H(0), 1), nullptr);
  EXPECT_NE(t.Find(H(1), 1), nullptr);
  EXPECT_EQ(t.size(), 16u);
}

TEST(FlowTable, SweepEmptiesIdleEntries) {
  FlowTable t({.capacity = 256, .idle_ns = 1000});
  for (uint64_t i = 0; i < 100; ++i) t.FindOrInsert(H(i), 1, i < 50 ? 0 : 900, nullptr);
  EXPECT_EQ(t.SweepIdle(0, t.capacity(), 1500), 50u);
  EXPECT_EQ(t.size(), 50u);
  EXPECT_EQ(t.counters().evicted_idle, 50u);
  EXPECT_EQ(t.Find(H(10), 1), nullptr);
  EXPECT_NE(t.Find(H(60), 1), nullptr);
}

// Sweeps of any slice (aligned to the 8-entry buckets or not, the sweep skips empty buckets
// whole) empty exactly the idle live entries in it.
TEST(FlowTable, SweepSlicesMatchAnEntryByEntrySweep) {
  std::mt19937_64 rng(5);
  FlowTable t({.capacity = 1024, .idle_ns = 1000});
  std::vector<uint64_t> last(100);  // key i's last_ns; a sparse table with empty buckets
  for (uint64_t i = 0; i < last.size(); ++i) {
    FlowEntry* e = t.FindOrInsert(H(i), 1, 0, nullptr);
    ASSERT_NE(e, nullptr);
    e->last_ns = last[i] = rng() % 3000;
  }
  const uint64_t now = 2500;
  size_t cursor = 0;
  while (cursor < t.capacity()) {
    const size_t count = 1 + rng() % 40;
    // What an entry-by-entry sweep of [cursor, cursor + count) empties.
    size_t want = 0;
    for (size_t s = cursor; s < std::min(t.capacity(), cursor + count); ++s) {
      const FlowEntry& e = t.entry(s);
      if (e.key_hash != 0 && now - e.last_ns > 1000) ++want;
    }
    EXPECT_EQ(t.SweepIdle(cursor, count, now), want) << cursor << " +" << count;
    cursor += count;
  }
  for (uint64_t i = 0; i < last.size(); ++i) {
    EXPECT_EQ(t.Find(H(i), 1) != nullptr, now - last[i] <= 1000) << i;
  }
}

// Two choices of 8: nothing refused at 75 % load, a fraction of a percent at 85 %.
TEST(FlowTable, TwoChoiceLoad) {
  for (auto [percent, max_refused_per_mille] : {std::pair{75, 0}, std::pair{85, 3}}) {
    FlowTable t({.capacity = 1 << 16, .idle_ns = 1000});
    const size_t n = t.capacity() * percent / 100;
    size_t refused = 0;
    for (uint64_t i = 0; i < n; ++i) refused += t.FindOrInsert(H(i), 3, 0, nullptr) == nullptr;
    EXPECT_LE(refused, n * max_refused_per_mille / 1000)
        << "refused " << refused << " of " << n << " at " << percent << " %";
    EXPECT_EQ(t.counters().table_full, refused);
  }
}

}  // namespace
}  // namespace heddle::lb
