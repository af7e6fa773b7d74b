#include "dataplane/fwd/hash_model.h"

#include <zlib.h>

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace heddle::fwd {
namespace {

const uint8_t kCheck[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};

TEST(HashModel, CatalogueCheckValues) {
  // The CRC catalogue's check values for "123456789" with each standard's initial register.
  EXPECT_EQ(Crc32(0xFFFFFFFFu, kCheck, 9), 0xCBF43926u);
  EXPECT_EQ(Crc32c(0xFFFFFFFFu, kCheck, 9), 0xE3069283u);
  EXPECT_EQ(Crc16Arc(0, kCheck, 9), 0xBB3Du);
  EXPECT_EQ(SwitchHash(HashFunction::kCrc32, 0xFFFFFFFFu, kCheck), 0xCBF43926u);
  EXPECT_EQ(SwitchHash(HashFunction::kCrc32c, 0xFFFFFFFFu, kCheck), 0xE3069283u);
  EXPECT_EQ(SwitchHash(HashFunction::kCrc16, 0, kCheck), 0xBB3Du);
  EXPECT_EQ(SwitchHash(HashFunction::kUnknown, 0xFFFFFFFFu, kCheck), 0u);
}

TEST(HashModel, Crc32MatchesZlib) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> data(rng() % 64);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    const uLong z = crc32(0L, data.data(), static_cast<uInt>(data.size()));
    EXPECT_EQ(Crc32(0xFFFFFFFFu, data.data(), data.size()), static_cast<uint32_t>(z));
  }
}

TEST(HashModel, SeedChangesTheHash) {
  const auto key = FlowKey4(0x0A000001, 0x0A000002, 17, 0xC000, 4791);
  for (HashFunction f : {HashFunction::kCrc32, HashFunction::kCrc32c, HashFunction::kCrc16}) {
    EXPECT_NE(SwitchHash(f, 1, key), SwitchHash(f, 2, key)) << static_cast<int>(f);
  }
}

TEST(HashModel, FlowKeyLayout) {
  const auto k4 = FlowKey4(0x0A010203, 0xC0A80001, 17, 0xC001, 4791);
  const uint8_t want4[] = {10, 1, 2, 3, 192, 168, 0, 1, 17, 0xC0, 0x01, 0x12, 0xB7};
  EXPECT_EQ(std::memcmp(k4.data(), want4, sizeof want4), 0);
  uint8_t src[16], dst[16];
  for (int i = 0; i < 16; ++i)
    src[i] = static_cast<uint8_t>(i), dst[i] = static_cast<uint8_t>(0xF0 | i);
  const auto k6 = FlowKey6(src, dst, 17, 0xC002, 4791);
  EXPECT_EQ(k6[0], 0);
  EXPECT_EQ(k6[15], 15);
  EXPECT_EQ(k6[16], 0xF0);
  EXPECT_EQ(k6[32], 17);
  EXPECT_EQ(k6[kFlowKeySportOffset6], 0xC0);
  EXPECT_EQ(k6[kFlowKeySportOffset6 + 1], 0x02);
  EXPECT_EQ(k6[35], 0x12);
  EXPECT_EQ(k6[36], 0xB7);
}

// The property the compiler's entropy choice rests on: changing only the source port changes H
// by a constant that depends neither on the seed nor on the addresses, in both families.
TEST(HashModel, SportContributionIsAddressAndSeedIndependent) {
  std::mt19937 rng(11);
  for (HashFunction f : {HashFunction::kCrc32, HashFunction::kCrc32c, HashFunction::kCrc16}) {
    for (int trial = 0; trial < 500; ++trial) {
      const uint32_t seed = rng();
      const uint16_t s = static_cast<uint16_t>(rng());
      const uint32_t src = rng(), dst = rng();
      const auto k0 = FlowKey4(src, dst, 17, 0, 4791);
      const auto ks = FlowKey4(src, dst, 17, s, 4791);
      EXPECT_EQ(SwitchHash(f, seed, ks) ^ SwitchHash(f, seed, k0), SportContribution(f, s));
      uint8_t a[16], b[16];
      for (int i = 0; i < 16; ++i)
        a[i] = static_cast<uint8_t>(rng()), b[i] = static_cast<uint8_t>(rng());
      const auto k60 = FlowKey6(a, b, 17, 0, 4791);
      const auto k6s = FlowKey6(a, b, 17, s, 4791);
      EXPECT_EQ(SwitchHash(f, seed, k6s) ^ SwitchHash(f, seed, k60), SportContribution(f, s));
    }
  }
  // And it is not trivially zero.
  EXPECT_NE(SportContribution(HashFunction::kCrc32, 0xC001), 0u);
}

TEST(HashModel, EcmpMemberShiftsAndReduces) {
  const auto key = FlowKey4(0x0A000001, 0x0A000102, 17, 0xC123, 4791);
  for (HashFunction f : {HashFunction::kCrc32, HashFunction::kCrc32c, HashFunction::kCrc16}) {
    const uint32_t h = SwitchHash(f, 99, key);
    for (uint8_t off : {0, 3, 8, 12}) {
      for (uint32_t n : {1u, 2u, 3u, 7u, 32u}) {
        EXPECT_EQ(EcmpMember(f, 99, off, key, n), (h >> off) % n);
      }
    }
    EXPECT_EQ(EcmpMember(f, 99, 40, key, 7), 0u);
    EXPECT_EQ(EcmpMember(f, 99, 0, key, 0), 0u);
  }
  EXPECT_EQ(EcmpMember(HashFunction::kUnknown, 99, 0, key, 8), 0u);
}

TEST(HashModel, MembersSpreadOverPorts) {
  // 4096 source ports over 8 members: every member is used, none takes more than twice its share.
  // (Offset 4: CRC-16/ARC's lowest bits see few of the source port's bits — 0x8005 has few
  // terms — so (H >> 2) % 8 takes only two values over 12 varying bits; the entropy search in
  // control/nuwa copes by keeping only ports with new choice vectors.)
  for (HashFunction f : {HashFunction::kCrc32, HashFunction::kCrc32c, HashFunction::kCrc16}) {
    std::vector<int> count(8);
    for (uint32_t s = 0; s < 4096; ++s) {
      const auto key =
          FlowKey4(0x0A000001, 0x0A000202, 17, static_cast<uint16_t>(0xC000 + s), 4791);
      ++count[EcmpMember(f, 5, 4, key, 8)];
    }
    for (int c : count) {
      EXPECT_GT(c, 256);
      EXPECT_LT(c, 1024);
    }
  }
}

}  // namespace
}  // namespace heddle::fwd
