// File: dataplane/pkt/icrc_test.cc
//
// ICRC: scapy-made golden values, invariance under exactly the variant fields, sensitivity to
// everything else (notably the UDP source port), and an IPv6 check against a second, naive
// implementation (mask a full copy, one crc32 call) since scapy computes no IPv6 ICRC.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"
#include "dataplane/pkt/testing/golden.h"

namespace heddle::pkt {
namespace {

using golden::Hex;
using golden::kWriteFirst;

// scapy: RC SEND only behind 802.1ad + 802.1Q with a 4-byte IPv4 option (covered by the ICRC).
const char kSendOnlyOpts[] =
    "02000000000202000000000188a8000a810000140800460000381234400040117f7a0a0000010a0000029404"
    "0000c00312b70020000004b0ffffc0000007800000016162636465000000043675d6";

PacketDesc MustParse(const std::vector<uint8_t>& f) {
  PacketDesc d;
  EXPECT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk);
  return d;
}

TEST(Icrc, MatchesScapy) {
  for (const char* hex : {kWriteFirst, kSendOnlyOpts}) {
    const std::vector<uint8_t> f = Hex(hex);
    const PacketDesc d = MustParse(f);
    EXPECT_TRUE(VerifyIcrc(f.data(), d)) << hex;
  }
  const std::vector<uint8_t> f = Hex(kWriteFirst);
  EXPECT_EQ(ComputeIcrc(f.data(), MustParse(f)), 0x7595dc4bu);
}

TEST(Icrc, VariantFieldsDoNotMatter) {
  const std::vector<uint8_t> base = Hex(kWriteFirst);
  const uint32_t want = ComputeIcrc(base.data(), MustParse(base));
  // TOS, TTL, IP checksum (2), UDP checksum (2), BTH byte 4 (FECN/BECN/resv), and the Ethernet
  // header, which the ICRC never covers.
  for (size_t off : {15u, 22u, 24u, 25u, 40u, 41u, 46u, 0u, 6u}) {
    for (uint8_t v : {0x00, 0x5a, 0xff}) {
      std::vector<uint8_t> f = base;
      f[off] = v;
      EXPECT_EQ(ComputeIcrc(f.data(), MustParse(f)), want) << "byte " << off;
    }
  }
}

TEST(Icrc, InvariantFieldsDo) {
  const std::vector<uint8_t> base = Hex(kWriteFirst);
  const PacketDesc d0 = MustParse(base);
  const uint32_t want = ComputeIcrc(base.data(), d0);
  // Every covered byte: IP id/flags/proto/addresses, UDP ports, BTH, RETH, payload.
  for (size_t off = 14; off < d0.icrc_off; ++off) {
    if (off == 15 || off == 22 || off == 24 || off == 25 || off == 40 || off == 41 || off == 46) {
      continue;
    }
    // Skip bytes whose change alters the parse (version/IHL, lengths, protocol, dport, TVer).
    if (off == 14 || off == 16 || off == 17 || off == 20 || off == 23 || off == 36 || off == 37 ||
        off == 38 || off == 39 || off == 43) {
      continue;
    }
    std::vector<uint8_t> f = base;
    f[off] ^= 0x01;
    PacketDesc d;
    ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk) << off;
    EXPECT_NE(ComputeIcrc(f.data(), d), want) << "byte " << off;
  }
}

TEST(Icrc, UdpSourcePortIsCovered) {
  std::vector<uint8_t> f = Hex(kWriteFirst);
  const uint32_t before = ComputeIcrc(f.data(), MustParse(f));
  f[34] = 0xd0;
  const PacketDesc d = MustParse(f);
  EXPECT_NE(ComputeIcrc(f.data(), d), before);
  EXPECT_FALSE(VerifyIcrc(f.data(), d));
}

TEST(Icrc, StoredIsLittleEndian) {
  std::vector<uint8_t> f = Hex(kWriteFirst);
  const PacketDesc d = MustParse(f);
  f[d.icrc_off] = 0x01;
  f[d.icrc_off + 1] = 0x02;
  f[d.icrc_off + 2] = 0x03;
  f[d.icrc_off + 3] = 0x04;
  EXPECT_EQ(StoredIcrc(f.data(), d), 0x04030201u);
}

TEST(Icrc, NotRoceGivesZero) {
  std::vector<uint8_t> f = Hex(kWriteFirst);
  f[37] = 0xb8;  // dport 4792
  const PacketDesc d = MustParse(f);
  EXPECT_EQ(ComputeIcrc(f.data(), d), 0u);
  EXPECT_EQ(StoredIcrc(f.data(), d), 0u);
}

// The naive reference: copy from the IP header to the ICRC, set the variant fields, prefix eight
// 0xff bytes, one crc32 call.
uint32_t NaiveIcrcIpv6(const std::vector<uint8_t>& f, size_t l3, size_t icrc_off) {
  std::vector<uint8_t> v(8 + icrc_off - l3, 0xff);
  std::copy(f.begin() + l3, f.begin() + icrc_off, v.begin() + 8);
  uint8_t* ip = v.data() + 8;
  ip[0] |= 0x0f;
  ip[1] = ip[2] = ip[3] = 0xff;
  ip[7] = 0xff;
  ip[40 + 6] = ip[40 + 7] = 0xff;
  ip[48 + 4] = 0xff;
  return static_cast<uint32_t>(crc32(0, v.data(), static_cast<uInt>(v.size())));
}

TEST(Icrc, Ipv6AgainstNaiveReference) {
  // Ethernet / IPv6 (tclass 0xb9, flow label 0x12345) / UDP / BTH SEND only / 10 B + 2 pad.
  std::vector<uint8_t> f = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd};
  const uint8_t ip6[8] = {0x6b, 0x91, 0x23, 0x45, 0x00, 8 + 12 + 12 + 4, 17, 64};
  f.insert(f.end(), ip6, ip6 + 8);
  for (int i = 0; i < 32; ++i) f.push_back(static_cast<uint8_t>(0x20 + i));
  const uint8_t udp[8] = {0xc0, 0x10, 0x12, 0xb7, 0x00, 36, 0xab, 0xcd};
  f.insert(f.end(), udp, udp + 8);
  const uint8_t bth[12] = {0x04, 0x20, 0xff, 0xff, 0xc0, 0x00, 0x02, 0x01, 0x80, 0x00, 0x00, 0x09};
  f.insert(f.end(), bth, bth + 12);
  for (int i = 0; i < 12; ++i) f.push_back(static_cast<uint8_t>(i < 10 ? 'a' + i : 0));
  f.insert(f.end(), {0, 0, 0, 0});
  const PacketDesc d = MustParse(f);
  ASSERT_EQ(d.roce_class, RoceClass::kSend);
  const uint32_t want = NaiveIcrcIpv6(f, d.l3_off, d.icrc_off);
  EXPECT_EQ(ComputeIcrc(f.data(), d), want);
  // Traffic class, flow label, hop limit are variant.
  for (size_t off : {14u, 15u, 16u, 17u, 21u}) {
    std::vector<uint8_t> g = f;
    g[off] ^= (off == 14 ? 0x0f : 0xff);
    EXPECT_EQ(ComputeIcrc(g.data(), MustParse(g)), want) << off;
  }
  // The version nibble and the payload length are not (payload length kept consistent here by
  // flipping a source-address bit instead).
  std::vector<uint8_t> g = f;
  g[22] ^= 0x80;
  EXPECT_NE(ComputeIcrc(g.data(), MustParse(g)), want);
}

}  // namespace
}  // namespace heddle::pkt
