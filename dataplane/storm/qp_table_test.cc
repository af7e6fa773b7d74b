// File: dataplane/storm/qp_table_test.cc
#include "dataplane/storm/qp_table.h"

#include <gtest/gtest.h>

#include <bit>
#include <set>
#include <vector>

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"

namespace heddle::storm {
namespace {

QpKey Key(uint32_t qpn, uint8_t host = 1, Direction dir = Direction::kRequest) {
  QpKey k;
  k.direction = dir;
  k.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, host};
  k.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 1, 1};
  k.dest_qpn = qpn;
  return k;
}

TEST(QpEntryTest, IsOneCacheLine) {
  EXPECT_EQ(sizeof(QpEntry), 64u);
  EXPECT_EQ(alignof(QpEntry), 64u);
  QpTable t({.capacity = 64});
  QpEntry* e = t.FindOrInsert(Key(1), 0, nullptr);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(e) % 64, 0u);
}

TEST(KeyFromPacketTest, MapsIpv4IntoIpv6) {
  pkt::FrameSpec f;
  f.src_ip4 = {192, 168, 1, 2};
  f.dst_ip4 = {192, 168, 3, 4};
  pkt::RoceSpec r;
  r.dest_qp = 0xabcdef;
  const auto frame = pkt::BuildRoce(f, r);
  pkt::PacketDesc d;
  ASSERT_EQ(pkt::Parse(frame.data(), frame.size(), &d), pkt::ParseError::kOk);
  const QpKey k = KeyFromPacket(frame.data(), d, Direction::kResponse);
  const std::array<uint8_t, 16> src = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 2};
  const std::array<uint8_t, 16> dst = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 3, 4};
  EXPECT_EQ(k.src_ip, src);
  EXPECT_EQ(k.dst_ip, dst);
  EXPECT_EQ(k.dest_qpn, 0xabcdefu);
  EXPECT_EQ(k.direction, Direction::kResponse);
}

TEST(KeyFromPacketTest, CopiesIpv6Addresses) {
  pkt::FrameSpec f;
  f.ipv6 = true;
  f.src_ip6 = {0xfd, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  f.dst_ip6 = {0xfd, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 1};
  f.vlans = {pkt::VlanTag{}};
  pkt::RoceSpec r;
  r.dest_qp = 7;
  const auto frame = pkt::BuildRoce(f, r);
  pkt::PacketDesc d;
  ASSERT_EQ(pkt::Parse(frame.data(), frame.size(), &d), pkt::ParseError::kOk);
  const QpKey k = KeyFromPacket(frame.data(), d, Direction::kRequest);
  EXPECT_EQ(k.src_ip, f.src_ip6);
  EXPECT_EQ(k.dst_ip, f.dst_ip6);
  EXPECT_EQ(k.dest_qpn, 7u);
}

TEST(HashKeyTest, DeterministicAndSensitiveToEveryField) {
  // A fixed value: the hash must not depend on the process (absl::Hash does).
  EXPECT_EQ(HashKey(Key(1)), HashKey(Key(1)));
  EXPECT_EQ(HashKey(Key(0x123456)), 0x40a0e1b4295ae3feull);
  std::set<uint64_t> seen;
  seen.insert(HashKey(Key(1)));
  seen.insert(HashKey(Key(2)));
  seen.insert(HashKey(Key(1, 2)));
  seen.insert(HashKey(Key(1, 1, Direction::kResponse)));
  QpKey swapped = Key(1);
  std::swap(swapped.src_ip, swapped.dst_ip);
  seen.insert(HashKey(swapped));
  EXPECT_EQ(seen.size(), 5u);
  for (uint32_t q = 0; q < 1000; ++q) EXPECT_NE(HashKey(Key(q)), 0u);
}

TEST(HashKeyTest, EveryInputBitAvalanches) {
  // Flipping any one key bit flips about half the hash bits (32 of 64), averaged over keys.
  const QpKey base = Key(0x123456);
  for (int bit = 0; bit < 8 * 36; ++bit) {
    double flipped = 0;
    for (uint32_t q = 0; q < 64; ++q) {
      QpKey a = base;
      a.dest_qpn = q * 0x10101;
      QpKey b = a;
      if (bit < 128) {
        b.src_ip[bit / 8] ^= 1 << (bit % 8);
      } else if (bit < 256) {
        b.dst_ip[(bit - 128) / 8] ^= 1 << (bit % 8);
      } else if (bit < 280) {
        b.dest_qpn ^= 1u << (bit - 256);
      } else {
        b.direction = Direction::kResponse;
      }
      flipped += std::popcount(HashKey(a) ^ HashKey(b));
    }
    EXPECT_NEAR(flipped / 64, 32.0, 3.0) << "bit " << bit;
  }
}

TEST(HashKeyTest, SpreadsSequentialQpnsOverBuckets) {
  // 4096 sequential QPNs into 1024 buckets: a good mix leaves few buckets empty (~1.8% for a
  // uniform hash) and none overfull by much.
  std::vector<int> counts(1024);
  for (uint32_t q = 0; q < 4096; ++q) ++counts[HashKey(Key(q)) & 1023];
  int empty = 0, max = 0;
  for (int c : counts) {
    empty += c == 0;
    max = std::max(max, c);
  }
  EXPECT_LT(empty, 60);
  EXPECT_LT(max, 16);
}

TEST(QpTableTest, InsertThenFind) {
  QpTable t({.capacity = 1024, .idle_ms = 100});
  InsertResult r;
  QpEntry* e = t.FindOrInsert(Key(5), 10, &r);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(r, InsertResult::kInserted);
  EXPECT_EQ(EntryQpn(*e), 5u);
  EXPECT_EQ(EntryDirection(*e), Direction::kRequest);
  EXPECT_EQ(e->last_seen, 10u);
  EXPECT_EQ(LoadAckedPsn(*e), kNoPsn);
  e->sent = 1234;

  EXPECT_EQ(t.FindOrInsert(Key(5), 20, &r), e);
  EXPECT_EQ(r, InsertResult::kFound);
  EXPECT_EQ(e->sent, 1234u);
  EXPECT_EQ(e->last_seen, 20u);
  EXPECT_EQ(t.Find(Key(5)), e);
  EXPECT_EQ(e->last_seen, 20u);
  EXPECT_EQ(t.Find(Key(6)), nullptr);
  EXPECT_EQ(t.Find(Key(5, 1, Direction::kResponse)), nullptr);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.counters().inserted, 1u);
}

TEST(QpTableTest, RoundsCapacityUpToPowerOfTwo) {
  EXPECT_EQ(QpTable({.capacity = 1000}).capacity(), 1024u);
  EXPECT_EQ(QpTable({.capacity = 1}).capacity(), 4u);
}

TEST(QpTableTest, FullBucketRefusesAndCountsThenSurvives) {
  // Capacity 4 = one bucket: the fifth live QP has nowhere to go.
  QpTable t({.capacity = 4, .idle_ms = 100});
  for (uint32_t q = 0; q < 4; ++q) ASSERT_NE(t.FindOrInsert(Key(q), 0, nullptr), nullptr);
  InsertResult r;
  EXPECT_EQ(t.FindOrInsert(Key(99), 50, &r), nullptr);
  EXPECT_EQ(r, InsertResult::kTableFull);
  EXPECT_EQ(t.FindOrInsert(Key(100), 50, &r), nullptr);
  EXPECT_EQ(t.counters().table_full, 2u);
  // The live entries are untouched and still found.
  for (uint32_t q = 0; q < 4; ++q) EXPECT_NE(t.FindOrInsert(Key(q), 60, &r), nullptr);
  EXPECT_EQ(r, InsertResult::kFound);
  EXPECT_EQ(t.size(), 4u);
}

TEST(QpTableTest, InsertEvictsLeastRecentlySeenIdleEntry) {
  QpTable t({.capacity = 4, .idle_ms = 100});
  t.FindOrInsert(Key(0), 0, nullptr)->sent = 111;
  t.FindOrInsert(Key(1), 10, nullptr);
  t.FindOrInsert(Key(2), 20, nullptr);
  t.FindOrInsert(Key(3), 150, nullptr);
  // At t=200: QPs 0, 1 and 2 are idle (> 100 ms); 0 is the least recently seen.
  InsertResult r;
  QpEntry* e = t.FindOrInsert(Key(42), 200, &r);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(r, InsertResult::kEvictedIdle);
  EXPECT_EQ(EntryQpn(*e), 42u);
  EXPECT_EQ(e->sent, 0u);  // fresh state, not the evicted QP's
  EXPECT_EQ(t.Find(Key(0)), nullptr);
  EXPECT_NE(t.Find(Key(1)), nullptr);
  EXPECT_EQ(t.counters().evicted_on_insert, 1u);
  EXPECT_EQ(t.size(), 4u);
  // Next victim is QP 1.
  t.FindOrInsert(Key(43), 200, &r);
  EXPECT_EQ(r, InsertResult::kEvictedIdle);
  EXPECT_EQ(t.Find(Key(1)), nullptr);
  EXPECT_NE(t.Find(Key(2)), nullptr);
}

TEST(QpTableTest, IdleComparisonSurvivesClockWrap) {
  QpTable t({.capacity = 4, .idle_ms = 100});
  for (uint32_t q = 0; q < 4; ++q) t.FindOrInsert(Key(q), 0xffffffc0u, nullptr);
  // 0x40 + 0x40 = 128 ms later across the wrap: idle.
  InsertResult r;
  EXPECT_NE(t.FindOrInsert(Key(9), 0x40u, &r), nullptr);
  EXPECT_EQ(r, InsertResult::kEvictedIdle);
  // 10 ms later than last_seen across the wrap: not idle.
  QpTable u({.capacity = 4, .idle_ms = 100});
  for (uint32_t q = 0; q < 4; ++q) u.FindOrInsert(Key(q), 0xfffffffbu, nullptr);
  EXPECT_EQ(u.FindOrInsert(Key(9), 5u, &r), nullptr);
  EXPECT_EQ(r, InsertResult::kTableFull);
}

TEST(QpTableTest, SweepIdleReclaimsOnlyIdleEntries) {
  QpTable t({.capacity = 1024, .idle_ms = 1000});
  for (uint32_t q = 0; q < 50; ++q) ASSERT_NE(t.FindOrInsert(Key(q), 0, nullptr), nullptr);
  for (uint32_t q = 50; q < 80; ++q) ASSERT_NE(t.FindOrInsert(Key(q), 900, nullptr), nullptr);
  EXPECT_EQ(t.SweepIdle(1000), 0u);  // exactly idle_ms is not idle
  EXPECT_EQ(t.SweepIdle(1500), 50u);
  EXPECT_EQ(t.counters().evicted_idle, 50u);
  EXPECT_EQ(t.size(), 30u);
  for (uint32_t q = 0; q < 50; ++q) EXPECT_EQ(t.Find(Key(q)), nullptr);
  for (uint32_t q = 50; q < 80; ++q) EXPECT_NE(t.Find(Key(q)), nullptr);
  // Reclaimed slots are reusable.
  InsertResult r;
  EXPECT_NE(t.FindOrInsert(Key(0), 1500, &r), nullptr);
  EXPECT_EQ(r, InsertResult::kInserted);
}

TEST(QpTableTest, SlicedSweepCoversTheTableAndSparesHeldEntries) {
  QpTable t({.capacity = 1024, .idle_ms = 1000});
  for (uint32_t q = 0; q < 200; ++q) ASSERT_NE(t.FindOrInsert(Key(q), 0, nullptr), nullptr);
  // Packets of QP 7 are still held in heddled: its counter is referenced, it is not idle.
  t.Find(Key(7))->egress_queued = 2;
  InsertResult r;
  size_t evicted = 0;
  for (size_t begin = 0; begin < t.capacity(); begin += 100) {
    evicted += t.SweepIdleRange(begin, 100, 5000);
  }
  EXPECT_EQ(t.SweepIdleRange(t.capacity(), 100, 5000), 0u);  // past the end: nothing
  EXPECT_EQ(t.SweepIdleRange(1000, 1000, 5000), 0u);         // clamped at the end
  EXPECT_EQ(evicted, 199u);
  EXPECT_EQ(t.size(), 1u);
  ASSERT_NE(t.Find(Key(7)), nullptr);
  // Once its packets left, it is idle like the others.
  t.Find(Key(7))->egress_queued = 0;
  EXPECT_EQ(t.SweepIdleRange(0, t.capacity(), 5000), 1u);
  EXPECT_NE(t.FindOrInsert(Key(7), 5000, &r), nullptr);
  EXPECT_EQ(r, InsertResult::kInserted);
}

TEST(QpTableTest, OverloadedTableAccountsForEveryInsert) {
  QpTable t({.capacity = 64, .idle_ms = 1'000'000});
  size_t ok = 0;
  for (uint32_t q = 0; q < 1000; ++q) ok += t.FindOrInsert(Key(q), 0, nullptr) != nullptr;
  EXPECT_EQ(ok, t.counters().inserted);
  EXPECT_EQ(ok + t.counters().table_full, 1000u);
  EXPECT_LE(ok, 64u);
  EXPECT_GT(ok, 48u);  // buckets fill up before refusals dominate
  EXPECT_EQ(t.size(), ok);
}

}  // namespace
}  // namespace heddle::storm
