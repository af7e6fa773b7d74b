// File: dataplane/storm/qp_table_test.cc
#include "dataplane/storm/qp_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"

namespace heddle::storm {

// Reads the probe geometry and checks the tag array against the entries.
struct QpTablePeer {
  static uint16_t Tag(uint64_t hash) { return QpTable::Tag(hash); }
  static size_t Left(const QpTable& t, uint64_t hash) { return t.LeftBucket(hash); }
  static size_t Right(const QpTable& t, uint64_t hash) { return t.RightBucket(hash); }

  // Every slot's tag is its entry's (0 when empty, and for slots past a tiny table's capacity);
  // size() counts the live entries; each live entry sits in one of its two buckets, and a lookup
  // of its hash and qpn_dir finds that very entry (so no QP is in the table twice).
  static testing::AssertionResult Consistent(const QpTable& t) {
    size_t live = 0;
    for (size_t i = 0; i < t.buckets_ * QpTable::kBucketEntries; ++i) {
      if (i >= t.capacity()) {
        if (t.tags_[i] != 0) return testing::AssertionFailure() << "padding tag at " << i;
        continue;
      }
      const QpEntry& e = t.entry(i);
      const uint16_t want = e.key_hash == 0 ? 0 : QpTable::Tag(e.key_hash);
      if (t.tags_[i] != want) {
        return testing::AssertionFailure()
               << "slot " << i << ": tag " << t.tags_[i] << ", entry wants " << want;
      }
      if (e.key_hash == 0) continue;
      ++live;
      const size_t b = i / QpTable::kBucketEntries;
      if (b != t.LeftBucket(e.key_hash) && b != t.RightBucket(e.key_hash)) {
        return testing::AssertionFailure() << "slot " << i << " is in neither of its buckets";
      }
      if (t.FindHashed(e.key_hash, e.qpn_dir) != &e) {
        return testing::AssertionFailure() << "slot " << i << " is not what a lookup finds";
      }
    }
    if (live != t.size()) {
      return testing::AssertionFailure() << live << " live entries, size() " << t.size();
    }
    return testing::AssertionSuccess();
  }
};

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
  EXPECT_EQ(HashKey(Key(0x123456)), 0x4e60087d5309e659ull);
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

// The hash's registers (hi << 32 | lo) back from a hash: the multiply by the odd kMix undone.
uint64_t Registers(uint64_t hash) {
  uint64_t inv = hash_internal::kMix;  // Newton's iteration for the inverse mod 2^64
  for (int k = 0; k < 5; ++k) inv *= 2 - hash_internal::kMix * inv;
  return hash * inv;
}

// Rank over GF(2) of a set of 64-bit vectors.
int Rank(std::vector<uint64_t> rows) {
  int r = 0;
  for (int bit = 63; bit >= 0; --bit) {
    auto p = std::find_if(rows.begin() + r, rows.end(), [bit](uint64_t v) { return v >> bit & 1; });
    if (p == rows.end()) continue;
    std::iter_swap(rows.begin() + r, p);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i != static_cast<size_t>(r) && (rows[i] >> bit & 1)) rows[i] ^= rows[r];
    }
    ++r;
  }
  return r;
}

// An IPv4 key with its 89 bits given: source and destination words as in memory, qpn|direction.
uint64_t HashV4Bits(uint32_t src, uint32_t dst, uint32_t qpn_dir) {
  QpKey k;
  k.direction = static_cast<Direction>(qpn_dir >> 24 & 1);
  k.dest_qpn = qpn_dir & kQpnMask;
  k.src_ip[10] = k.src_ip[11] = k.dst_ip[10] = k.dst_ip[11] = 0xff;
  std::memcpy(k.src_ip.data() + 12, &src, 4);
  std::memcpy(k.dst_ip.data() + 12, &dst, 4);
  return HashKey(k);
}

TEST(HashKeyTest, CrcIsCastagnoliAndTheInstructionAgreesWithThePortableForm) {
  // The standard check value of CRC-32C: "123456789" with the register and result inverted.
  uint32_t crc = ~0u;
  for (char c : std::string("123456789")) {
    crc = Crc32cStepU8Portable(crc, static_cast<uint8_t>(c));
  }
  EXPECT_EQ(~crc, 0xE3069283u);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000; ++i) {  // the step is the buffer CRC's register, without the XORs
    const uint64_t w = rng();
    uint8_t bytes[8];
    std::memcpy(bytes, &w, 8);
    EXPECT_EQ(~Crc32cStepU64(~0u, w), Crc32c(std::span<const uint8_t>(bytes, 8)));
  }
  for (int i = 0; i < 10000; ++i) {
    const auto c = static_cast<uint32_t>(rng());
    const uint64_t v = rng();
    EXPECT_EQ(Crc32cStepU32(c, static_cast<uint32_t>(v)),
              Crc32cStepU32Portable(c, static_cast<uint32_t>(v)));
    EXPECT_EQ(Crc32cStepU64(c, v), Crc32cStepU64Portable(c, v));
  }
}

TEST(HashKeyTest, KeysAFewBitsApartNeverShareTheLowRegister) {
  // Every IPv4 key within 3 bits of a base (source, destination, QPN, direction: 89 bits) — any
  // two are at most 6 bits apart — has its own low register, so its own bits 0..31 of the hash
  // (a bijection of it): keys that differ in a few bits, like adjacent hosts and sequential
  // QPNs, are told apart by the low register alone.
  const uint32_t src = 0x0100000a, dst = 0x0201000a, qd = 0x000123;
  auto flip = [&](uint32_t& s, uint32_t& d, uint32_t& q, int bit) {
    if (bit < 32) {
      s ^= 1u << bit;
    } else if (bit < 64) {
      d ^= 1u << (bit - 32);
    } else {
      q ^= 1u << (bit - 64);  // 24 QPN bits, then the direction (bit 24)
    }
  };
  auto hash_with = [&](std::initializer_list<int> bits) {
    uint32_t s = src, d = dst, q = qd;
    for (int bit : bits) flip(s, d, q, bit);
    return static_cast<uint32_t>(HashV4Bits(s, d, q));
  };
  std::vector<uint32_t> low = {hash_with({})};
  for (int a = 0; a < 89; ++a) {
    low.push_back(hash_with({a}));
    for (int b = a + 1; b < 89; ++b) {
      low.push_back(hash_with({a, b}));
      for (int c = b + 1; c < 89; ++c) low.push_back(hash_with({a, b, c}));
    }
  }
  std::sort(low.begin(), low.end());
  EXPECT_GT(low.size(), 100000u);
  EXPECT_EQ(std::adjacent_find(low.begin(), low.end()), low.end());
}

TEST(HashKeyTest, Ipv4AddressPairsOfOneQpnNeverCollide) {
  // The registers are linear in the key bits: flipping address bit i flips a fixed pattern. If
  // the 64 patterns are independent (rank 64), no two of the 2^64 address pairs of one QPN and
  // direction share a hash.
  for (uint32_t qd : {0x000001u, 0x1abcdefu}) {
    const uint64_t base = Registers(HashV4Bits(0, 0, qd));
    std::vector<uint64_t> patterns;
    for (int bit = 0; bit < 64; ++bit) {
      const uint32_t s = bit < 32 ? 1u << bit : 0, d = bit < 32 ? 0 : 1u << (bit - 32);
      patterns.push_back(Registers(HashV4Bits(s, d, qd)) ^ base);
    }
    EXPECT_EQ(Rank(patterns), 64) << qd;
  }
}

// Counts of keys per bucket of a table's left and right halves, and per (left, tag) pair.
struct Spread {
  explicit Spread(const QpTable& t) : left(t.capacity() / 64), right(t.capacity() / 64) {}
  void Add(const QpTable& t, uint64_t h) {
    ++left[QpTablePeer::Left(t, h)];
    ++right[QpTablePeer::Right(t, h) - left.size()];
    pairs.insert(QpTablePeer::Left(t, h) << 24 | QpTablePeer::Right(t, h));
    tags.insert(QpTablePeer::Left(t, h) << 16 | QpTablePeer::Tag(h));
    ++keys;
  }
  std::vector<int> left, right;
  std::set<uint64_t> pairs, tags;
  size_t keys = 0;
};

TEST(HashKeyTest, SequentialQpnsAndAdjacentHostsSpreadOverBothBucketsAndTags) {
  // What the two-choice table needs of the hash (docs/storm.md §6.2), for the keys a host really
  // has — runs of QPNs to runs of peers — here 16 peers x 1024 QPNs and 128 x 128, four keys per
  // bucket of each half on average: both halves evenly filled (no bucket above 16 of its 32
  // entries, few empty), the right bucket independent of the left one (keys that share a left
  // bucket almost never share the right one too) and tags that tell a bucket's keys apart.
  QpTable t({.capacity = 1 << 18, .idle_ms = 1000});  // 2 x 4096 buckets
  for (const auto [peers, qpns] : {std::pair{16u, 1024u}, std::pair{128u, 128u}}) {
    Spread s(t);
    for (uint32_t p = 0; p < peers; ++p) {
      for (uint32_t q = 0; q < qpns; ++q) {
        QpKey k = Key(0x100 + q);
        k.dst_ip[14] = static_cast<uint8_t>(p >> 8);
        k.dst_ip[15] = static_cast<uint8_t>(p);
        s.Add(t, HashKey(k));
      }
    }
    ASSERT_EQ(s.keys, 16384u);
    for (const std::vector<int>* half : {&s.left, &s.right}) {
      EXPECT_LE(*std::max_element(half->begin(), half->end()), 16) << peers;
      // A uniform hash leaves e^-4 (1.8 %, ~75) of the buckets empty.
      EXPECT_LT(std::count(half->begin(), half->end(), 0), 150) << peers;
    }
    // 4 keys per left bucket over 4096 right buckets: ~6 pairs shared at random.
    EXPECT_GT(s.pairs.size(), s.keys - 40) << peers;
    // 4 keys per left bucket and 2^16 tags: a shared tag is rare.
    EXPECT_GT(s.tags.size(), s.keys - 10) << peers;
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

// A QP of a random IPv4 pair and QPN.
QpKey RandomKey(std::mt19937_64& rng) {
  QpKey k = Key(0);
  const uint64_t r = rng();
  std::memcpy(k.src_ip.data() + 12, &r, 4);
  std::memcpy(k.dst_ip.data() + 12, reinterpret_cast<const uint8_t*>(&r) + 4, 4);
  k.dest_qpn = static_cast<uint32_t>(rng()) & kQpnMask;
  return k;
}

size_t Slot(const QpTable& t, const QpEntry* e) { return static_cast<size_t>(e - &t.entry(0)); }

// Empties one live entry, as the sweep does once it idles.
void End(QpTable& t, QpEntry* e, uint32_t now_ms) {
  e->last_seen = now_ms - t.idle_ms() - 1;
  ASSERT_EQ(t.SweepIdleRange(Slot(t, e), 1, now_ms), 1u);
}

TEST(QpTableTest, HoldsNinetyPercentOfRandomQps) {
  // The geometry's purpose (docs/storm.md §6.2): one 4-entry bucket per key refused ~0.8 % of
  // QPs at 30 % load; two 32-entry buckets per key refuse fewer than 0.1 % up to 90 %.
  for (const size_t capacity : {size_t{1} << 10, size_t{1} << 16}) {
    QpTable t({.capacity = capacity, .idle_ms = 1000});
    std::mt19937_64 rng(capacity);
    size_t tries = 0;
    while (t.size() < capacity * 9 / 10 && tries < 2 * capacity) {
      ++tries;
      t.FindOrInsert(RandomKey(rng), 0, nullptr);
    }
    ASSERT_EQ(t.size(), capacity * 9 / 10);
    EXPECT_LT(t.counters().table_full, tries / 1000 + 1) << "capacity " << capacity;
    EXPECT_EQ(t.counters().table_full + t.size(), tries);
    EXPECT_TRUE(QpTablePeer::Consistent(t));
  }
}

TEST(QpTableTest, HoldsNinetyPercentWhileQpsComeAndGo) {
  // The steady state of a busy host refuses more than a fill from empty: QPs end at random (the
  // sweep empties them) and new ones arrive, 4 x capacity times, at 90 % load.
  constexpr size_t kCapacity = size_t{1} << 16;
  QpTable t({.capacity = kCapacity, .idle_ms = 1000});
  std::mt19937_64 rng(90);
  std::vector<QpEntry*> live;
  size_t tries = 0, refused = 0;
  auto arrive = [&](uint32_t now) {
    ++tries;
    QpEntry* e = t.FindOrInsert(RandomKey(rng), now, nullptr);
    if (e == nullptr) {
      ++refused;
    } else {
      live.push_back(e);
    }
  };
  // Bounded, so that a broken table fails instead of spinning.
  auto refill = [&] {
    for (int k = 0; t.size() < kCapacity * 9 / 10 && k < 1000; ++k) arrive(0);
    ASSERT_EQ(t.size(), kCapacity * 9 / 10);
  };
  while (t.size() < kCapacity * 9 / 10 && tries < 2 * kCapacity) arrive(0);
  ASSERT_EQ(t.size(), kCapacity * 9 / 10);
  tries = refused = 0;
  for (size_t op = 0; op < 4 * kCapacity; ++op) {
    const size_t j = rng() % live.size();
    End(t, live[j], 0);  // nothing idles but the QPs that end
    live[j] = live.back();
    live.pop_back();
    ASSERT_NO_FATAL_FAILURE(refill());
  }
  EXPECT_LT(refused, tries / 1000) << refused << " of " << tries;
  EXPECT_EQ(t.counters().table_full, refused);
  EXPECT_TRUE(QpTablePeer::Consistent(t));
}

TEST(QpTableTest, TablesSmallerThanTwoBucketsHoldExactlyTheirCapacity) {
  for (const size_t capacity : {4, 8, 16, 32, 64}) {
    QpTable t({.capacity = capacity, .idle_ms = 1000});
    std::mt19937_64 rng(capacity);
    for (int i = 0; i < 500; ++i) t.FindOrInsert(RandomKey(rng), 0, nullptr);
    EXPECT_EQ(t.size(), capacity);
    EXPECT_EQ(t.counters().inserted, capacity);
    EXPECT_EQ(t.counters().table_full, 500 - capacity);
    EXPECT_TRUE(QpTablePeer::Consistent(t));
  }
}

TEST(QpTableTest, KeysSharingTheirLowHashBitsSpreadOverTheirSecondBucket) {
  // 2000 QPs whose hashes share bits 0..23 (the left bucket of any table up to 16 M entries):
  // they fill that bucket, then each goes to its right bucket. One bucket per key held 4.
  QpTable t({.capacity = 1 << 16, .idle_ms = 1000});
  std::mt19937_64 rng(1);
  std::vector<uint64_t> hashes;
  for (uint32_t q = 0; q < 2000; ++q) {
    const uint64_t h = (rng() << 24) | 0xabcdef;
    hashes.push_back(h);
    ASSERT_NE(t.FindOrInsertHashed(h, q, 0, nullptr), nullptr) << q;
  }
  EXPECT_EQ(t.counters().table_full, 0u);
  EXPECT_EQ(t.size(), 2000u);
  for (uint32_t q = 0; q < 2000; ++q) {
    const QpEntry* e = t.FindHashed(hashes[q], q);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->key_hash, hashes[q]);
  }
  EXPECT_TRUE(QpTablePeer::Consistent(t));
}

TEST(QpTableTest, KeysSharingBothBucketsFillThemThenAreRefusedAlone) {
  // 100 QPs whose hashes share bits 0..47 (both buckets) but not their tags: the two buckets hold
  // 64; the rest are refused and counted, and QPs of other buckets do not notice.
  QpTable t({.capacity = 1 << 12, .idle_ms = 1000});
  std::mt19937_64 rng(2);
  const uint64_t low = rng() & 0xffffffffffffull;
  std::vector<QpEntry*> held;
  size_t refused = 0;
  for (uint32_t q = 0; q < 100; ++q) {
    QpEntry* e = t.FindOrInsertHashed(uint64_t{q + 1} << 48 | low, q, 0, nullptr);
    if (e == nullptr) {
      ++refused;
    } else {
      held.push_back(e);
    }
  }
  EXPECT_EQ(held.size(), 2 * QpTable::kBucketEntries);
  EXPECT_EQ(refused, 100 - 2 * QpTable::kBucketEntries);
  EXPECT_EQ(t.counters().table_full, refused);
  for (uint32_t q = 0; q < 64; ++q) {
    EXPECT_EQ(t.FindHashed(uint64_t{q + 1} << 48 | low, q), held[q]);
  }
  // QPs that share at most one of the two buckets are not refused.
  for (uint32_t q = 0; q < 1000; ++q) {
    const uint64_t h = HashKey(Key(q));
    if (QpTablePeer::Left(t, h) == QpTablePeer::Left(t, low) &&
        QpTablePeer::Right(t, h) == QpTablePeer::Right(t, low)) {
      continue;
    }
    ASSERT_NE(t.FindOrInsert(Key(q), 0, nullptr), nullptr) << q;
  }
  EXPECT_EQ(t.counters().table_full, refused);
  // One of the 64 ends: the next QP of those buckets takes its slot.
  End(t, held[10], 5000);
  InsertResult r;
  EXPECT_EQ(t.FindOrInsertHashed(uint64_t{500} << 48 | low, 500, 5000, &r), held[10]);
  EXPECT_EQ(r, InsertResult::kInserted);
  EXPECT_TRUE(QpTablePeer::Consistent(t));
}

TEST(QpTableTest, EqualTagsAndEvenEqualHashesAreToldApartByTheEntry) {
  // Tags are 16 bits: QPs whose hashes differ only below them match each other's tag, and QPs of
  // one hash (a 64-bit collision) differ only in qpn_dir. Neither is ever confused.
  QpTable t({.capacity = 1 << 12, .idle_ms = 1000});
  const uint64_t h = 0x1234'5678'9abc'def0ull;
  std::vector<QpEntry*> e;
  for (uint32_t q = 0; q < 20; ++q) e.push_back(t.FindOrInsertHashed(h, q, 0, nullptr));
  for (uint32_t q = 0; q < 20; ++q) {
    e.push_back(t.FindOrInsertHashed(h ^ uint64_t{q + 1} << 30, 7, 0, nullptr));
  }
  ASSERT_EQ(std::set<QpEntry*>(e.begin(), e.end()).size(), 40u);
  EXPECT_EQ(std::count(e.begin(), e.end(), nullptr), 0);
  for (uint32_t q = 0; q < 20; ++q) {
    EXPECT_EQ(t.FindHashed(h, q), e[q]);
    EXPECT_EQ(t.FindHashed(h ^ uint64_t{q + 1} << 30, 7), e[20 + q]);
  }
  EXPECT_EQ(t.FindHashed(h, 20), nullptr);
  EXPECT_EQ(t.FindHashed(h ^ 1, 0), nullptr);
  EXPECT_TRUE(QpTablePeer::Consistent(t));
}

// 64 QPs that share both buckets of a 4096-entry table, seen at times 0, 10, 20, ...
struct FullPair {
  explicit FullPair(QpTable& t) {
    for (uint32_t q = 0; q < 64; ++q) {
      e.push_back(t.FindOrInsertHashed(Hash(q), q, q * 10, nullptr));
    }
  }
  static uint64_t Hash(uint32_t q) { return uint64_t{q + 1} << 48 | 0x0000'1234'5678'9abcull; }
  std::vector<QpEntry*> e;
};

TEST(QpTableTest, InsertEvictsTheLeastRecentlySeenIdleEntryOfBothBuckets) {
  QpTable t({.capacity = 1 << 12, .idle_ms = 1000});
  FullPair p(t);
  ASSERT_EQ(QpTablePeer::Left(t, FullPair::Hash(0)), QpTablePeer::Left(t, FullPair::Hash(63)));
  ASSERT_EQ(t.size(), 64u);
  // QP 0 is the oldest but still has packets held; QP 1 is the oldest idle one. Which bucket
  // each sits in does not matter.
  p.e[0]->egress_queued = 1;
  InsertResult r;
  QpEntry* n = t.FindOrInsertHashed(FullPair::Hash(100), 100, 1015, &r);
  EXPECT_EQ(r, InsertResult::kEvictedIdle);
  EXPECT_EQ(n, p.e[1]);
  EXPECT_EQ(t.FindHashed(FullPair::Hash(1), 1), nullptr);
  EXPECT_EQ(t.FindHashed(FullPair::Hash(0), 0), p.e[0]);
  // At 1015 only QPs 0 and 1 were idle: the next new QP is refused.
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(101), 101, 1015, &r), nullptr);
  EXPECT_EQ(r, InsertResult::kTableFull);
  EXPECT_EQ(t.counters().evicted_on_insert, 1u);
  EXPECT_EQ(t.counters().table_full, 1u);
  EXPECT_EQ(t.size(), 64u);
  EXPECT_TRUE(QpTablePeer::Consistent(t));
}

TEST(QpTableTest, RefusalsOfAFullPairEndWhenItsOldestEntryIdles) {
  // A refused insert notes when the buckets' first entry can idle and skips reading them until
  // then; it must not refuse once that time has come, nor after held packets left.
  QpTable t({.capacity = 1 << 12, .idle_ms = 1000});
  FullPair p(t);  // last_seen 0, 10, ..., 630
  p.e[0]->egress_queued = 3;
  InsertResult r;
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(100), 100, 900, &r), nullptr);
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(100), 100, 1000, &r), nullptr);
  // QP 0 is past idle_ms at 1001 but held; QP 1 idles at 1011.
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(100), 100, 1005, &r), nullptr);
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(100), 100, 1010, &r), nullptr);
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(100), 100, 1011, &r), p.e[1]);
  EXPECT_EQ(r, InsertResult::kEvictedIdle);
  // Now QP 0's packets leave: it is idle at once, whatever was noted.
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(101), 101, 1011, &r), nullptr);
  p.e[0]->egress_queued = 0;
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(101), 101, 1011, &r), p.e[0]);
  EXPECT_EQ(t.counters().table_full, 5u);
  EXPECT_EQ(t.counters().evicted_on_insert, 2u);
  EXPECT_TRUE(QpTablePeer::Consistent(t));
}

TEST(QpTableTest, RefusalsOfAFullPairSurviveClockWrap) {
  QpTable t({.capacity = 1 << 12, .idle_ms = 1000});
  std::vector<QpEntry*> e;
  for (uint32_t q = 0; q < 64; ++q) {
    e.push_back(t.FindOrInsertHashed(FullPair::Hash(q), q, 0xffffff00u + q, nullptr));
  }
  InsertResult r;
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(100), 100, 0xffffffffu, &r), nullptr);
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(100), 100, 0x2e7u, &r), nullptr);  // 999 ms
  EXPECT_EQ(t.FindOrInsertHashed(FullPair::Hash(100), 100, 0x2e9u, &r), e[0]);     // 1001 ms
  EXPECT_EQ(r, InsertResult::kEvictedIdle);
}

TEST(QpTableTest, SweepsAndEvictionsKeepTagsAndEntriesInStep) {
  QpTable t({.capacity = 1 << 12, .idle_ms = 100});
  std::mt19937_64 rng(3);
  std::vector<QpEntry*> live;
  uint32_t now = 0;
  for (int round = 0; round < 50; ++round) {
    now += 37;
    for (int i = 0; i < 150; ++i) {
      QpEntry* e = t.FindOrInsert(RandomKey(rng), now, nullptr);
      if (e != nullptr && rng() % 8 == 0) e->egress_queued = 1;  // held: never idle
    }
    // Some held packets leave.
    for (size_t i = 0; i < t.capacity(); ++i) {
      if (t.entry(i).egress_queued != 0 && rng() % 4 == 0) {
        t.FindHashed(t.entry(i).key_hash, t.entry(i).qpn_dir)->egress_queued = 0;
      }
    }
    t.SweepIdleRange(rng() % t.capacity(), 300, now);
    ASSERT_TRUE(QpTablePeer::Consistent(t)) << "round " << round;
  }
  EXPECT_GT(t.counters().evicted_on_insert, 0u);
  EXPECT_GT(t.counters().evicted_idle, 0u);
  EXPECT_EQ(t.counters().inserted - t.counters().evicted_on_insert - t.counters().evicted_idle,
            t.size());
}

TEST(QpTableTest, EntriesNeverMove) {
  QpTable t({.capacity = 1 << 12, .idle_ms = 100});
  std::mt19937_64 rng(4);
  std::vector<std::pair<QpKey, QpEntry*>> first;
  for (int i = 0; i < 1000; ++i) {
    const QpKey k = RandomKey(rng);
    first.emplace_back(k, t.FindOrInsert(k, 0, nullptr));
    first.back().second->egress_queued = 1;
  }
  for (int i = 0; i < 10'000; ++i) t.FindOrInsert(RandomKey(rng), 500, nullptr);  // full, churned
  t.SweepIdle(1000);
  for (const auto& [k, e] : first) EXPECT_EQ(t.Find(k), e);
}

TEST(QpTableTest, PrefetchAndProbeNeverChangeAResult) {
  // Two tables fed the same operations, one with bursts prefetched and probed — hints in order,
  // shuffled, stale (probed before inserts and sweeps), or naming another key's slot — return the
  // same entries.
  QpTable a({.capacity = 1 << 10, .idle_ms = 100});
  QpTable b({.capacity = 1 << 10, .idle_ms = 100});
  std::mt19937_64 rng(5);
  std::vector<QpKey> pool;
  for (int i = 0; i < 4000; ++i) pool.push_back(RandomKey(rng));
  size_t hinted = 0;
  for (uint32_t now = 0; now < 400; ++now) {
    std::vector<QpKey> burst;
    for (size_t i = rng() % 64; i > 0; --i) burst.push_back(pool[rng() % pool.size()]);
    for (const QpKey& k : burst) b.Prefetch(HashKey(k));
    std::vector<uint32_t> hint;
    for (const QpKey& k : burst) hint.push_back(b.Probe(HashKey(k)));
    switch (rng() % 4) {
      case 0:
        std::shuffle(hint.begin(), hint.end(), rng);
        break;
      case 1:
        std::fill(hint.begin(), hint.end(), QpTable::kNoSlot);
        break;
      case 2:
        for (uint32_t& h : hint) h = static_cast<uint32_t>(rng() % 2048);
        break;  // even out of range
      default:
        break;
    }
    for (size_t i = 0; i < burst.size(); ++i) {
      const QpKey& k = burst[i];
      InsertResult ra, rb;
      QpEntry* ea = a.FindOrInsert(k, now, &ra);
      QpEntry* eb = b.FindOrInsertHashed(HashKey(k), QpTable::QpnDir(k), now, &rb, hint[i]);
      hinted += hint[i] != QpTable::kNoSlot;
      ASSERT_EQ(ea == nullptr, eb == nullptr);
      if (ea != nullptr) {
        ASSERT_EQ(Slot(a, ea), Slot(b, eb));
      }
      ASSERT_EQ(ra, rb);
      ASSERT_EQ(a.Find(k) == nullptr, b.Find(k) == nullptr);
    }
    a.SweepIdleRange(now % 16 * 64, 64, now);
    b.SweepIdleRange(now % 16 * 64, 64, now);
  }
  EXPECT_GT(hinted, 1000u);
  EXPECT_EQ(a.size(), b.size());
  EXPECT_GT(a.counters().table_full, 0u);
  EXPECT_GT(a.counters().evicted_on_insert, 0u);
  EXPECT_EQ(a.counters().evicted_on_insert, b.counters().evicted_on_insert);
  EXPECT_TRUE(QpTablePeer::Consistent(b));
}

TEST(QpTableTest, HashPacketIsHashKeyOfThePacketsKey) {
  // IPv4 takes the 4-byte path in both; an IPv6 packet (even one with v4-mapped addresses) the
  // key's.
  std::mt19937_64 rng(11);
  for (int i = 0; i < 200; ++i) {
    for (bool v6 : {false, true}) {
      std::vector<uint8_t> f(128, 0);
      pkt::PacketDesc d{};
      d.l3_off = 14;
      d.l3 = v6 ? pkt::L3::kIpv6 : pkt::L3::kIpv4;
      d.dest_qp = static_cast<uint32_t>(rng());
      for (auto& byte : f) byte = static_cast<uint8_t>(rng());
      if (v6 && i % 2 == 0) {  // ::ffff:a.b.c.d in both addresses
        for (int a : {14 + 8, 14 + 24}) {
          std::fill_n(&f[a], 10, 0);
          f[a + 10] = f[a + 11] = 0xff;
        }
      }
      for (Direction dir : {Direction::kRequest, Direction::kResponse}) {
        EXPECT_EQ(HashPacket(f.data(), d, dir), HashKey(KeyFromPacket(f.data(), d, dir)));
      }
    }
  }
}

}  // namespace
}  // namespace heddle::storm
