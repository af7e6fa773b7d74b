// File: dataplane/pkt/parse_test.cc
//
// Golden frames (hex made by scapy.contrib.roce, fields checked by hand against IBTA/RFC layouts),
// their expected descs, and malformed variants: every truncation point, lying length fields, bad
// versions, too many tags. The builder and scapy cross-checks add volume; these stay readable.
#include "dataplane/pkt/parse.h"

#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "dataplane/pkt/roce.h"
#include "dataplane/pkt/testing/golden.h"

namespace heddle::pkt {
namespace {

using golden::Hex;
using golden::kWriteFirst;

// RC ACK in one 802.1Q tag (VID 100, PCP 3), AETH syndrome 0x1f MSN 0x42, P_Key 0x8001.
const char kAckVlan[] =
    "0200000000020200000000018100606408004500003012344000401114870a0000010a000002c00212b7001c"
    "00001100800100abcdef00fffffe1f000042ffcad02a";
// RC SEND only, 802.1ad + 802.1Q, IPv4 router-alert option, PadCnt 3, SE/A/FECN/BECN set.
const char kSendOnlyPadQinq[] =
    "02000000000202000000000188a8000a810000140800460000381234400040117f7a0a0000010a0000029404"
    "0000c00312b70020000004b0ffffc0000007800000016162636465000000043675d6";
// CNP for QP 0x55, ECN CE (TOS 0x03), BECN set.
const char kCnp[] =
    "02000000000202000000000108004503003c12344000401114780a0000010a000002c00412b7002800008100"
    "ffff4000005500000000000000000000000000000000000000003d10a311";
// UD SEND only with immediate: DETH (Q_Key 0x11111111, src QP 0x99), ImmDt, 4 B payload.
const char kUdImm[] =
    "02000000000202000000000108004500003c123440004011147b0a0000010a000002c00512b7002800006500"
    "ffff00000001000000021111111100000099deadbeef78797a77ccb56d30";

struct Golden {
  const char* name;
  const char* hex;
  uint8_t num_vlans;
  uint16_t vlan0;
  uint16_t vlan1;
  uint16_t l3_off;
  uint16_t bth_off;
  uint16_t payload_off;
  uint16_t payload_len;
  uint8_t opcode;
  RoceClass cls;
  uint32_t dest_qp;
  uint32_t psn;
  uint32_t dma_length;
  uint32_t aeth;
  uint16_t flags;
  uint8_t pad;
  uint8_t dscp;
  uint8_t ecn;
  uint16_t pkey;
  uint16_t udp_sport;
  uint32_t icrc;  // as scapy stored it, read little-endian
};

const Golden kGoldens[] = {
    {"write_first",
     kWriteFirst,
     0,
     0,
     0,
     14,
     42,
     70,
     32,
     0x06,
     RoceClass::kWrite,
     0x123,
     0x10,
     0x10000,
     0,
     kFlagRoce | kFlagReth | kFlagFirst,
     0,
     26,
     0,
     0xffff,
     0xc001,
     0x7595dc4b},
    {"ack_vlan",
     kAckVlan,
     1,
     0x6064,
     0,
     18,
     46,
     62,
     0,
     0x11,
     RoceClass::kAck,
     0xabcdef,
     0xfffffe,
     0,
     0x1f000042,
     kFlagRoce | kFlagAeth | kFlagFirst | kFlagLast,
     0,
     0,
     0,
     0x8001,
     0xc002,
     0x2ad0caff},
    {"send_only_pad_qinq",
     kSendOnlyPadQinq,
     2,
     0x000a,
     0x0014,
     22,
     54,
     66,
     8,
     0x04,
     RoceClass::kSend,
     7,
     1,
     0,
     0,
     kFlagRoce | kFlagFirst | kFlagLast | kFlagSolicited | kFlagAckReq | kFlagFecn | kFlagBecn |
         kFlagIpv4Options,
     3,
     0,
     0,
     0xffff,
     0xc003,
     0xd6753604},
    {"cnp",
     kCnp,
     0,
     0,
     0,
     14,
     42,
     70,
     0,
     0x81,
     RoceClass::kCnp,
     0x55,
     0,
     0,
     0,
     kFlagRoce | kFlagBecn | kFlagFirst | kFlagLast,
     0,
     0,
     3,
     0xffff,
     0xc004,
     0x11a3103d},
    {"ud_imm",
     kUdImm,
     0,
     0,
     0,
     14,
     42,
     66,
     4,
     0x65,
     RoceClass::kSend,
     1,
     2,
     0,
     0,
     kFlagRoce | kFlagDeth | kFlagImm | kFlagFirst | kFlagLast,
     0,
     0,
     0,
     0xffff,
     0xc005,
     0x306db5cc},
};

// Keeps ctest's discovered names short (the default prints the struct's bytes).
void PrintTo(const Golden& g, std::ostream* os) { *os << g.name; }

class GoldenTest : public testing::TestWithParam<Golden> {};

TEST_P(GoldenTest, ParsesEveryField) {
  const Golden& g = GetParam();
  const std::vector<uint8_t> f = Hex(g.hex);
  PacketDesc d;
  ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk) << g.name;
  EXPECT_EQ(d.num_vlans, g.num_vlans);
  EXPECT_EQ(d.vlan_tci[0], g.vlan0);
  EXPECT_EQ(d.vlan_tci[1], g.vlan1);
  EXPECT_EQ(d.ether_type, kEtherTypeIpv4);
  EXPECT_EQ(d.l3, L3::kIpv4);
  EXPECT_EQ(d.l3_off, g.l3_off);
  EXPECT_EQ(d.ip_len, f.size() - g.l3_off);
  EXPECT_EQ(d.ip_proto, 17);
  EXPECT_EQ(d.l4_off, g.bth_off - 8);
  EXPECT_EQ(d.bth_off, g.bth_off);
  EXPECT_EQ(d.payload_off, g.payload_off);
  EXPECT_EQ(d.payload_len, g.payload_len);
  EXPECT_EQ(d.icrc_off, f.size() - 4);
  EXPECT_EQ(d.opcode, g.opcode);
  EXPECT_EQ(d.roce_class, g.cls);
  EXPECT_EQ(d.dest_qp, g.dest_qp);
  EXPECT_EQ(d.psn, g.psn);
  EXPECT_EQ(d.dma_length, g.dma_length);
  EXPECT_EQ(d.aeth, g.aeth);
  EXPECT_EQ(d.flags, g.flags) << std::hex << d.flags << " vs " << g.flags;
  EXPECT_EQ(int{d.pad_count}, g.pad);
  EXPECT_EQ(int{d.dscp}, g.dscp);
  EXPECT_EQ(int{d.ecn}, g.ecn);
  EXPECT_EQ(d.pkey, g.pkey);
  EXPECT_EQ(d.udp_sport, g.udp_sport);
  EXPECT_EQ(StoredIcrc(f.data(), d), g.icrc);
  EXPECT_EQ(ComputeIcrc(f.data(), d), g.icrc);
  EXPECT_TRUE(VerifyIcrc(f.data(), d));
}

// Cutting a valid RoCE frame anywhere must give an error (the IP length then lies), never a crash;
// the copy is exactly `n` bytes so ASan catches any over-read.
TEST_P(GoldenTest, EveryTruncationIsAnError) {
  const std::vector<uint8_t> f = Hex(GetParam().hex);
  for (size_t n = 0; n < f.size(); ++n) {
    std::vector<uint8_t> cut(f.begin(), f.begin() + n);
    PacketDesc d;
    EXPECT_NE(Parse(cut.data(), cut.size(), &d), ParseError::kOk) << "length " << n;
  }
}

// The same cut, but with the IPv4 total length and the UDP length rewritten to match, so that the
// error comes from the RoCE layer itself.
TEST_P(GoldenTest, ConsistentTruncationIsARoceError) {
  const std::vector<uint8_t> f = Hex(GetParam().hex);
  PacketDesc full;
  ASSERT_EQ(Parse(f.data(), f.size(), &full), ParseError::kOk);
  const OpcodeInfo info = DescribeOpcode(full.opcode);
  for (size_t n = full.bth_off; n < f.size(); ++n) {
    std::vector<uint8_t> cut(f.begin(), f.begin() + n);
    const size_t ip_total = n - full.l3_off;
    const size_t udp_len = n - full.l4_off;
    cut[full.l3_off + 2] = static_cast<uint8_t>(ip_total >> 8);
    cut[full.l3_off + 3] = static_cast<uint8_t>(ip_total);
    cut[full.l4_off + 4] = static_cast<uint8_t>(udp_len >> 8);
    cut[full.l4_off + 5] = static_cast<uint8_t>(udp_len);
    PacketDesc d;
    const ParseError e = Parse(cut.data(), cut.size(), &d);
    const size_t roce = n - full.bth_off;
    ParseError want = ParseError::kOk;
    if (roce < static_cast<size_t>(kBthLen + kIcrcLen)) {
      want = ParseError::kBthTruncated;
    } else if (roce < static_cast<size_t>(kBthLen + info.ext_len)) {
      want = ParseError::kRoceExtTruncated;
    } else if (roce < static_cast<size_t>(kBthLen + info.ext_len + kIcrcLen)) {
      want = ParseError::kRoceNoIcrc;
    }
    EXPECT_EQ(e, want) << "length " << n << ": " << ParseErrorName(e);
    if (e == ParseError::kOk) {
      EXPECT_EQ(d.payload_len, n - 4 - d.payload_off);
      EXPECT_EQ(d.icrc_off, n - 4);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Scapy, GoldenTest, testing::ValuesIn(kGoldens),
                         [](const testing::TestParamInfo<Golden>& i) { return i.param.name; });

// Malformed variants of kWriteFirst: (byte offset, new value) edits and the expected error.
struct Mutation {
  const char* name;
  std::vector<std::pair<size_t, uint8_t>> edits;
  ParseError want;
};

TEST(ParseMalformed, Mutations) {
  const std::vector<uint8_t> base = Hex(kWriteFirst);
  const Mutation kCases[] = {
      {"ipv4 version 6", {{14, 0x65}}, ParseError::kIpv4BadVersion},
      {"ipv4 ihl 4", {{14, 0x44}}, ParseError::kIpv4BadIhl},
      {"ipv4 ihl 0", {{14, 0x40}}, ParseError::kIpv4BadIhl},
      {"ipv4 total below ihl", {{16, 0x00}, {17, 0x13}}, ParseError::kIpv4BadLength},
      {"ipv4 total beyond frame", {{16, 0x00}, {17, 0x5d}}, ParseError::kIpv4BadLength},
      {"ipv4 total 0xffff", {{16, 0xff}, {17, 0xff}}, ParseError::kIpv4BadLength},
      {"udp length 7", {{38, 0x00}, {39, 0x07}}, ParseError::kUdpBadLength},
      {"udp length beyond ip", {{38, 0x00}, {39, 0x49}}, ParseError::kUdpBadLength},
      {"udp length 0xffff", {{38, 0xff}, {39, 0xff}}, ParseError::kUdpBadLength},
      {"bth tver 1", {{43, 0x41}}, ParseError::kBthBadVersion},
      {"udp length only bth", {{38, 0x00}, {39, 0x14}}, ParseError::kBthTruncated},
      {"udp length bth+icrc+8", {{38, 0x00}, {39, 0x1c}}, ParseError::kRoceExtTruncated},
      {"udp length bth+reth", {{38, 0x00}, {39, 0x24}}, ParseError::kRoceNoIcrc},
      {"ethertype ipv6 on ipv4 bytes", {{12, 0x86}, {13, 0xdd}}, ParseError::kIpv6BadVersion},
  };
  for (const Mutation& m : kCases) {
    std::vector<uint8_t> f = base;
    for (auto [off, v] : m.edits) f[off] = v;
    PacketDesc d;
    EXPECT_EQ(Parse(f.data(), f.size(), &d), m.want) << m.name;
  }
}

TEST(ParseMalformed, EmptyAndNull) {
  PacketDesc d;
  EXPECT_EQ(Parse(nullptr, 0, &d), ParseError::kEthTruncated);
  const uint8_t b[13] = {};
  EXPECT_EQ(Parse(b, sizeof(b), &d), ParseError::kEthTruncated);
}

TEST(ParseMalformed, VlanTruncatedAndTooMany) {
  std::vector<uint8_t> f = Hex(kAckVlan);
  PacketDesc d;
  EXPECT_EQ(Parse(f.data(), 16, &d), ParseError::kVlanTruncated);
  EXPECT_EQ(Parse(f.data(), 17, &d), ParseError::kVlanTruncated);
  // Three tags: inner ethertype of the first tag says "another tag" twice.
  std::vector<uint8_t> three(f.begin(), f.begin() + 14);
  for (int i = 0; i < 3; ++i) {
    three.insert(three.end(), {0x00, 0x05, 0x81, 0x00});
  }
  three.resize(80, 0);
  EXPECT_EQ(Parse(three.data(), three.size(), &d), ParseError::kVlanTooMany);
  EXPECT_EQ(d.num_vlans, 2);
}

TEST(ParseMalformed, Ipv4TruncatedHeader) {
  const std::vector<uint8_t> f = Hex(kWriteFirst);
  PacketDesc d;
  for (size_t n = 14; n < 34; ++n) {
    EXPECT_EQ(Parse(f.data(), n, &d), ParseError::kIpv4Truncated) << n;
  }
}

TEST(ParseMalformed, Ipv4OptionsBeyondFrame) {
  std::vector<uint8_t> f = Hex(kWriteFirst);
  f[14] = 0x4f;  // IHL 15 = 60 bytes
  PacketDesc d;
  EXPECT_EQ(Parse(f.data(), 14 + 40, &d), ParseError::kIpv4BadIhl);
}

TEST(ParseMalformed, UdpHeaderBeyondIpPayload) {
  std::vector<uint8_t> f = Hex(kWriteFirst);
  f[17] = 24;  // IPv4 total length 24: 4 bytes of UDP header
  PacketDesc d;
  EXPECT_EQ(Parse(f.data(), f.size(), &d), ParseError::kUdpTruncated);
}

// An IPv6 RoCE frame: RC READ request with RETH, traffic class 0xb9 (DSCP 46, ECN 1), flow label.
std::vector<uint8_t> Ipv6ReadRequest() {
  std::vector<uint8_t> f = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd};
  const uint8_t ip6[8] = {0x6b, 0x91, 0x23, 0x45, 0x00, 8 + 12 + 16 + 4, 17, 64};
  f.insert(f.end(), ip6, ip6 + 8);
  for (int i = 0; i < 32; ++i) f.push_back(static_cast<uint8_t>(i));
  const uint8_t udp[8] = {0xc0, 0x10, 0x12, 0xb7, 0x00, 40, 0, 0};
  f.insert(f.end(), udp, udp + 8);
  const uint8_t bth[12] = {0x0c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x02, 0x01, 0x80, 0x00, 0x00, 0x09};
  f.insert(f.end(), bth, bth + 12);
  const uint8_t reth[16] = {0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 7, 0x00, 0x04, 0x00, 0x00};
  f.insert(f.end(), reth, reth + 16);
  f.insert(f.end(), {0, 0, 0, 0});  // ICRC, not checked here
  return f;
}

TEST(ParseIpv6, ReadRequest) {
  const std::vector<uint8_t> f = Ipv6ReadRequest();
  PacketDesc d;
  ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.l3, L3::kIpv6);
  EXPECT_EQ(d.ether_type, kEtherTypeIpv6);
  EXPECT_EQ(d.l4_off, 54);
  EXPECT_EQ(d.bth_off, 62);
  EXPECT_EQ(d.ip_len, 80);
  EXPECT_EQ(int{d.dscp}, 46);
  EXPECT_EQ(int{d.ecn}, 1);
  EXPECT_EQ(d.roce_class, RoceClass::kReadRequest);
  EXPECT_EQ(d.dest_qp, 0x201u);
  EXPECT_EQ(d.psn, 9u);
  EXPECT_EQ(d.dma_length, 0x40000u);
  EXPECT_EQ(d.flags, kFlagRoce | kFlagReth | kFlagFirst | kFlagLast | kFlagAckReq);
  EXPECT_EQ(d.payload_len, 0);
}

TEST(ParseIpv6, Errors) {
  std::vector<uint8_t> f = Ipv6ReadRequest();
  PacketDesc d;
  for (size_t n = 14; n < 54; ++n) {
    EXPECT_EQ(Parse(f.data(), n, &d), ParseError::kIpv6Truncated) << n;
  }
  for (size_t n = 54; n < f.size(); ++n) {
    EXPECT_EQ(Parse(f.data(), n, &d), ParseError::kIpv6BadLength) << n;
  }
  std::vector<uint8_t> v = f;
  v[14] = 0x4b;
  EXPECT_EQ(Parse(v.data(), v.size(), &d), ParseError::kIpv6BadVersion);
  // Next header TCP: fine, not RoCE.
  v = f;
  v[20] = 6;
  ASSERT_EQ(Parse(v.data(), v.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.roce_class, RoceClass::kNone);
  EXPECT_EQ(d.ip_proto, 6);
  // A hop-by-hop extension header is not walked: not RoCE.
  v[20] = 0;
  ASSERT_EQ(Parse(v.data(), v.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.flags & kFlagRoce, 0);
}

TEST(ParseNonRoce, ArpLldpTcpOtherUdpAndEthernetPadding) {
  PacketDesc d;
  // ARP request, padded to 60 bytes.
  std::vector<uint8_t> arp = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06};
  arp.resize(60, 0);
  ASSERT_EQ(Parse(arp.data(), arp.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.ether_type, kEtherTypeArp);
  EXPECT_EQ(d.l3, L3::kNone);
  EXPECT_EQ(d.roce_class, RoceClass::kNone);
  EXPECT_EQ(d.l3_off, 14);
  // A bare Ethernet header with an unknown ethertype.
  ASSERT_EQ(Parse(arp.data(), 14, &d), ParseError::kOk);

  // UDP to port 4792 with the RoCE bytes behind it: not RoCE.
  std::vector<uint8_t> f = Hex(kWriteFirst);
  f[37] = 0xb8;
  ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.roce_class, RoceClass::kNone);
  EXPECT_EQ(d.udp_sport, 0xc001);
  EXPECT_EQ(d.flags, 0);
  // TCP.
  f = Hex(kWriteFirst);
  f[23] = 6;
  ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.ip_proto, 6);
  EXPECT_EQ(d.roce_class, RoceClass::kNone);
  // Ethernet trailer after the datagram: still RoCE, ICRC found by the UDP length.
  f = Hex(kAckVlan);
  f.insert(f.end(), 6, 0);
  ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.roce_class, RoceClass::kAck);
  EXPECT_EQ(d.icrc_off, f.size() - 10);
  EXPECT_TRUE(VerifyIcrc(f.data(), d));
}

TEST(ParseNonRoce, Ipv4Fragments) {
  PacketDesc d;
  std::vector<uint8_t> f = Hex(kWriteFirst);
  f[20] = 0x20;  // MF, offset 0: a first fragment
  ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.roce_class, RoceClass::kNone);
  EXPECT_TRUE(d.flags & kFlagIpFragment);
  EXPECT_FALSE(d.flags & kFlagRoce);
  f[20] = 0x00;
  f[21] = 0x08;  // offset 64, last fragment: bytes after the IP header are not a UDP header
  ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.flags, kFlagIpFragment);
  EXPECT_EQ(d.udp_sport, 0);
}

// Every BTH opcode: class, header flags and extension length as IBTA lays them out.
TEST(ParseOpcodes, DescribeEveryOpcode) {
  struct Want {
    uint8_t opcode;
    RoceClass cls;
    uint16_t flags;
    int ext_len;
  };
  constexpr uint16_t F = kFlagFirst, L = kFlagLast;
  const Want kWant[] = {
      {0x00, RoceClass::kSend, F, 0},
      {0x01, RoceClass::kSend, 0, 0},
      {0x02, RoceClass::kSend, L, 0},
      {0x03, RoceClass::kSend, L | kFlagImm, 4},
      {0x04, RoceClass::kSend, F | L, 0},
      {0x05, RoceClass::kSend, F | L | kFlagImm, 4},
      {0x06, RoceClass::kWrite, F | kFlagReth, 16},
      {0x07, RoceClass::kWrite, 0, 0},
      {0x08, RoceClass::kWrite, L, 0},
      {0x09, RoceClass::kWrite, L | kFlagImm, 4},
      {0x0a, RoceClass::kWrite, F | L | kFlagReth, 16},
      {0x0b, RoceClass::kWrite, F | L | kFlagReth | kFlagImm, 20},
      {0x0c, RoceClass::kReadRequest, F | L | kFlagReth, 16},
      {0x0d, RoceClass::kReadResponse, F | kFlagAeth, 4},
      {0x0e, RoceClass::kReadResponse, 0, 0},
      {0x0f, RoceClass::kReadResponse, L | kFlagAeth, 4},
      {0x10, RoceClass::kReadResponse, F | L | kFlagAeth, 4},
      {0x11, RoceClass::kAck, F | L | kFlagAeth, 4},
      {0x12, RoceClass::kAtomicAck, F | L | kFlagAeth | kFlagAtomicAck, 12},
      {0x13, RoceClass::kAtomic, F | L | kFlagAtomicEth, 28},
      {0x14, RoceClass::kAtomic, F | L | kFlagAtomicEth, 28},
      {0x15, RoceClass::kOther, 0, 0},
      {0x16, RoceClass::kSend, L | kFlagIeth, 4},
      {0x17, RoceClass::kSend, F | L | kFlagIeth, 4},
      {0x18, RoceClass::kOther, 0, 0},
      {0x1f, RoceClass::kOther, 0, 0},
      {0x20, RoceClass::kSend, F, 0},
      {0x25, RoceClass::kSend, F | L | kFlagImm, 4},
      {0x26, RoceClass::kWrite, F | kFlagReth, 16},
      {0x2b, RoceClass::kWrite, F | L | kFlagReth | kFlagImm, 20},
      {0x2c, RoceClass::kOther, 0, 0},  // no READ on UC
      {0x31, RoceClass::kOther, 0, 0},  // no ACK on UC
      {0x40, RoceClass::kOther, 0, 0},  // RD
      {0x4a, RoceClass::kOther, 0, 0},
      {0x60, RoceClass::kOther, 0, 0},  // UD has only SEND only (+imm)
      {0x64, RoceClass::kSend, F | L | kFlagDeth, 8},
      {0x65, RoceClass::kSend, F | L | kFlagDeth | kFlagImm, 12},
      {0x66, RoceClass::kOther, 0, 0},
      {0x80, RoceClass::kOther, 0, 0},
      {0x81, RoceClass::kCnp, F | L, 16},
      {0xa0, RoceClass::kOther, 0, 0},  // XRC
      {0xc0, RoceClass::kOther, 0, 0},  // vendor
      {0xff, RoceClass::kOther, 0, 0},
  };
  for (const Want& w : kWant) {
    const OpcodeInfo info = DescribeOpcode(w.opcode);
    EXPECT_EQ(info.roce_class, w.cls) << int{w.opcode};
    EXPECT_EQ(info.flags, w.flags) << int{w.opcode};
    EXPECT_EQ(info.ext_len, w.ext_len) << int{w.opcode};
  }
  EXPECT_STREQ(OpcodeName(0x06), "RC_RDMA_WRITE_FIRST");
  EXPECT_STREQ(OpcodeName(0x2b), "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
  EXPECT_STREQ(OpcodeName(0x65), "UD_SEND_ONLY_WITH_IMMEDIATE");
  EXPECT_STREQ(OpcodeName(0x17), "RC_SEND_ONLY_WITH_INVALIDATE");
  EXPECT_STREQ(OpcodeName(0x81), "CNP");
  EXPECT_STREQ(OpcodeName(0x15), "OTHER");
  EXPECT_STREQ(OpcodeName(0x4a), "OTHER");
}

// Every one of the 256 opcodes in a real frame: kOther parses no extension header, the others
// parse exactly DescribeOpcode()'s headers.
TEST(ParseOpcodes, AllOpcodesInAFrame) {
  std::vector<uint8_t> f = Hex(kWriteFirst);  // 32 payload bytes behind RETH: room for any ext
  for (int opcode = 0; opcode < 256; ++opcode) {
    f[42] = static_cast<uint8_t>(opcode);
    PacketDesc d;
    ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk) << opcode;
    const OpcodeInfo info = DescribeOpcode(static_cast<uint8_t>(opcode));
    EXPECT_EQ(d.roce_class, info.roce_class);
    EXPECT_EQ(d.payload_off, 54 + info.ext_len);
    EXPECT_EQ(d.payload_len + d.payload_off, d.icrc_off);
    EXPECT_EQ((d.flags & kFlagReth) != 0, d.dma_length != 0) << opcode;
    EXPECT_TRUE(d.flags & kFlagRoce);
  }
}

TEST(ParseErrors, NamesAreStable) {
  EXPECT_STREQ(ParseErrorName(ParseError::kIpv4Truncated), "ipv4-truncated");
  EXPECT_STREQ(ParseErrorName(ParseError::kRoceNoIcrc), "roce-no-icrc");
  EXPECT_STREQ(ParseErrorName(ParseError::kCount), "invalid");
  EXPECT_STREQ(RoceClassName(RoceClass::kReadResponse), "read-response");
}

TEST(ParseDesc, FitsInFortyEightBytes) { EXPECT_LE(sizeof(PacketDesc), 48u); }

}  // namespace
}  // namespace heddle::pkt
