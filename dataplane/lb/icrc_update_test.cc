// File: dataplane/lb/icrc_update_test.cc
#include "dataplane/lb/icrc_update.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <random>
#include <vector>

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"

namespace heddle::lb {
namespace {

using icrc_internal::MulMod;
using icrc_internal::MulModClmul;
using icrc_internal::MulModPortable;
using icrc_internal::XPow8n;

TEST(IcrcUpdate, MulModAgreesBetweenClmulAndLoop) {
  if (!icrc_internal::HaveClmul()) GTEST_SKIP() << "no PCLMULQDQ on this CPU";
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const auto a = static_cast<uint32_t>(rng());
    const auto b = static_cast<uint32_t>(rng());
    ASSERT_EQ(MulModClmul(a, b), MulModPortable(a, b)) << std::hex << a << " " << b;
  }
  EXPECT_EQ(MulModClmul(0, 0x1234), 0u);
  EXPECT_EQ(MulModClmul(1u << 31, 0xdeadbeef), 0xdeadbeefu);
}

// zlib's crc32_combine() is the same algebra, independently implemented: crc(A ‖ B) =
// x^(8|B|)·crc(A) ^ crc(B).
TEST(IcrcUpdate, XPowMatchesZlibCombine) {
  std::mt19937_64 rng(11);
  for (uint32_t n :
       {0u, 1u, 2u, 7u, 255u, 256u, 257u, 1000u, 1042u, 4114u, 8191u, 8192u, 9000u, 65535u}) {
    // One spare byte: zlib returns 0 for a null buffer, which an empty vector may hand it.
    std::vector<uint8_t> a(13), b(n + 1);
    for (auto& x : a) x = static_cast<uint8_t>(rng());
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    const uLong ca = crc32(0, a.data(), static_cast<uInt>(a.size()));
    const uLong cb = crc32(0, b.data(), n);
    const uLong whole = crc32(ca, b.data(), n);
    EXPECT_EQ(MulMod(XPow8n(n), static_cast<uint32_t>(ca)) ^ static_cast<uint32_t>(cb), whole)
        << "n=" << n;
  }
}

// Flip a 16-bit word anywhere in a random buffer and check the predicted CRC against zlib.
TEST(IcrcUpdate, Delta16MatchesRecomputeOnRandomBuffers) {
  std::mt19937_64 rng(3);
  for (int iter = 0; iter < 5000; ++iter) {
    const size_t len = 2 + rng() % 9000;
    std::vector<uint8_t> buf(len);
    for (auto& x : buf) x = static_cast<uint8_t>(rng());
    const size_t off = rng() % (len - 1);
    const uint16_t old_v = static_cast<uint16_t>(buf[off] << 8 | buf[off + 1]);
    const uint16_t new_v = static_cast<uint16_t>(rng());
    const uint32_t before = static_cast<uint32_t>(crc32(0, buf.data(), static_cast<uInt>(len)));
    buf[off] = static_cast<uint8_t>(new_v >> 8);
    buf[off + 1] = static_cast<uint8_t>(new_v);
    const uint32_t after = static_cast<uint32_t>(crc32(0, buf.data(), static_cast<uInt>(len)));
    ASSERT_EQ(before ^ IcrcDelta16(old_v, new_v, static_cast<uint32_t>(len - off - 2)), after)
        << "len=" << len << " off=" << off;
  }
}

// The memo answers what IcrcDelta16 answers, across collisions, repeats and every tail length.
TEST(IcrcUpdate, CacheAgreesWithTheComputationUnderCollisions) {
  std::mt19937_64 rng(5);
  IcrcDeltaCache cache;
  for (int iter = 0; iter < 200000; ++iter) {
    // Few distinct values, so entries repeat and collide (256 slots).
    const auto old_v = static_cast<uint16_t>(0xc000 + rng() % 40);
    const auto new_v = static_cast<uint16_t>(0xc000 + rng() % 40);
    const auto tail = static_cast<uint32_t>(iter % 7 == 0 ? rng() % 70000 : 1000 + rng() % 30);
    ASSERT_EQ(cache.Delta16(old_v, new_v, tail), IcrcDelta16(old_v, new_v, tail))
        << std::hex << old_v << " " << new_v << std::dec << " tail " << tail;
  }
  EXPECT_EQ(cache.Delta16(0xc000, 0xc000, 1000), 0u);
}

// The hot tail's tables answer what IcrcDelta16 answers, through changes of the dominant frame
// size (the table follows it), mixed sizes and two sizes of equal frequency.
TEST(IcrcUpdate, CacheFollowsTheHotTail) {
  std::mt19937_64 rng(9);
  IcrcDeltaCache cache;
  auto check = [&](uint32_t tail) {
    const auto old_v = static_cast<uint16_t>(rng());
    const auto new_v = static_cast<uint16_t>(rng());
    ASSERT_EQ(cache.Delta16(old_v, new_v, tail), IcrcDelta16(old_v, new_v, tail))
        << std::hex << old_v << " " << new_v << std::dec << " tail " << tail;
  };
  for (const uint32_t dominant : {54u, 1046u, 4110u}) {
    for (int i = 0; i < 20000; ++i) {
      const uint32_t kind = static_cast<uint32_t>(rng() % 10);
      check(kind < 7   ? dominant
            : kind < 9 ? static_cast<uint32_t>(rng() % 9000)
                       : (dominant == 54 ? 1046u : 54u));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  for (int i = 0; i < 20000; ++i) {
    check(i % 2 ? 100u : 200u);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Delta16Wire(), given the two bytes of each value as they sit in the frame (loaded as a native
// word), answers what Delta16() answers for the values, hot tail or not.
TEST(IcrcUpdate, WireOrderDeltaMatches) {
  std::mt19937_64 rng(11);
  IcrcDeltaCache cache;
  auto wire = [](uint16_t v) {
    const uint8_t bytes[2] = {static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
    uint16_t w;
    std::memcpy(&w, bytes, sizeof w);
    return w;
  };
  for (int i = 0; i < 40000; ++i) {
    const auto old_v = static_cast<uint16_t>(rng());
    const auto new_v = static_cast<uint16_t>(rng());
    const uint32_t tail = i % 4 != 0 ? 54u : static_cast<uint32_t>(rng() % 5000);
    ASSERT_EQ(cache.Delta16Wire(wire(old_v), wire(new_v), tail), IcrcDelta16(old_v, new_v, tail))
        << std::hex << old_v << " " << new_v << std::dec << " tail " << tail;
  }
}

// The span form (tail + 2, as a frame's icrc_off - l4_off gives it): before any table is built,
// on the hot table, on the memo, and across a change of the hot tail.
TEST(IcrcUpdate, SpanDeltaMatches) {
  std::mt19937_64 rng(12);
  IcrcDeltaCache cache;
  for (int i = 0; i < 40000; ++i) {
    const auto old_v = static_cast<uint16_t>(rng());
    const auto new_v = static_cast<uint16_t>(rng());
    // The hot tail moves from 54 to 1078 halfway; a few spans at the bounds (2, 65537).
    const uint32_t tail = i % 4 != 0      ? (i < 20000 ? 54u : 1078u)
                          : i % 1000 == 0 ? (i % 2000 == 0 ? 0u : 0xffffu)
                                          : static_cast<uint32_t>(rng() % 5000);
    uint16_t old_wire, new_wire;
    const uint8_t old_bytes[2] = {static_cast<uint8_t>(old_v >> 8), static_cast<uint8_t>(old_v)};
    const uint8_t new_bytes[2] = {static_cast<uint8_t>(new_v >> 8), static_cast<uint8_t>(new_v)};
    std::memcpy(&old_wire, old_bytes, sizeof old_wire);
    std::memcpy(&new_wire, new_bytes, sizeof new_wire);
    ASSERT_EQ(cache.DeltaSpanWire(old_wire, new_wire, tail + 2), IcrcDelta16(old_v, new_v, tail))
        << std::hex << old_v << " " << new_v << std::dec << " tail " << tail;
  }
}

// Before any tail is hot, and for tails past 16 bits, the answers are still IcrcDelta16()'s.
TEST(IcrcUpdate, CacheAnswersEveryTailLength) {
  IcrcDeltaCache cache;
  for (const uint32_t tail : {0xffffffffu, 0u, 0x10000u, 0xffffu, 0xffffffffu}) {
    EXPECT_EQ(cache.Delta16(0xc000, 0x1234, tail), IcrcDelta16(0xc000, 0x1234, tail)) << tail;
  }
}

TEST(IcrcUpdate, NoChangeNoDelta) { EXPECT_EQ(IcrcDelta16(0xc000, 0xc000, 1000), 0u); }

}  // namespace
}  // namespace heddle::lb
