// File: dataplane/storm/rewrite_test.cc
#include "dataplane/storm/rewrite.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::storm {
namespace {

pkt::PacketDesc ParseOk(const std::vector<uint8_t>& f) {
  pkt::PacketDesc d;
  EXPECT_EQ(pkt::Parse(f.data(), f.size(), &d), pkt::ParseError::kOk);
  return d;
}

TEST(RewriteTest, Ipv4DscpKeepsEcnAndChecksum) {
  pkt::FrameSpec f;
  f.dscp = 0;
  f.ecn = 3;
  std::vector<uint8_t> frame = pkt::BuildRoce(f, pkt::RoceSpec{.opcode = pkt::op::kSendOnly});
  const pkt::PacketDesc d = ParseOk(frame);
  SetDscp(frame.data(), d, 46);
  const pkt::PacketDesc after = ParseOk(frame);
  EXPECT_EQ(after.dscp, 46);
  EXPECT_EQ(after.ecn, 3);
  EXPECT_EQ(frame[d.l3_off + 1], 46 << 2 | 3);
  const uint16_t stored = static_cast<uint16_t>(frame[d.l3_off + 10] << 8 | frame[d.l3_off + 11]);
  EXPECT_EQ(stored, pkt::Ipv4HeaderChecksum(frame.data() + d.l3_off, 20));
  EXPECT_TRUE(pkt::VerifyIcrc(frame.data(), after));
}

TEST(RewriteTest, Ipv6TrafficClassKeepsEcnAndFlowLabel) {
  pkt::FrameSpec f;
  f.ipv6 = true;
  f.dscp = 63;
  f.ecn = 2;
  f.flow_label = 0xabcde;
  std::vector<uint8_t> frame = pkt::BuildRoce(f, pkt::RoceSpec{.opcode = pkt::op::kSendOnly});
  const pkt::PacketDesc d = ParseOk(frame);
  SetDscp(frame.data(), d, 0x15);  // 010101: exercises both bytes
  const pkt::PacketDesc after = ParseOk(frame);
  EXPECT_EQ(after.dscp, 0x15);
  EXPECT_EQ(after.ecn, 2);
  const uint8_t* ip = frame.data() + d.l3_off;
  EXPECT_EQ(ip[0] >> 4, 6);
  const uint32_t flow = (ip[1] & 0xf) << 16 | ip[2] << 8 | ip[3];
  EXPECT_EQ(flow, 0xabcdeu);
  EXPECT_TRUE(pkt::VerifyIcrc(frame.data(), after));
}

TEST(RewriteTest, PcpOnOuterTagOnly) {
  pkt::FrameSpec f;
  f.vlans = {pkt::VlanTag{.tpid = pkt::kEtherTypeQinQ, .tci = 0x1123}, pkt::VlanTag{.tci = 0xe456}};
  std::vector<uint8_t> frame = pkt::BuildRoce(f, pkt::RoceSpec{});
  const pkt::PacketDesc d = ParseOk(frame);
  EXPECT_TRUE(SetPcp(frame.data(), d, 5));
  const pkt::PacketDesc after = ParseOk(frame);
  EXPECT_EQ(after.vlan_tci[0], 5 << 13 | 0x1123);  // DEI and VID kept
  EXPECT_EQ(after.vlan_tci[1], 0xe456);
  EXPECT_FALSE(SetPcp(frame.data(), d, -1));
  EXPECT_FALSE(SetPcp(frame.data(), d, 8));
  EXPECT_EQ(ParseOk(frame).vlan_tci[0], 5 << 13 | 0x1123);

  std::vector<uint8_t> untagged = pkt::BuildRoce(pkt::FrameSpec{}, pkt::RoceSpec{});
  const std::vector<uint8_t> copy = untagged;
  EXPECT_FALSE(SetPcp(untagged.data(), ParseOk(untagged), 3));
  EXPECT_EQ(untagged, copy);
}

TEST(RewriteTest, NonIpFrameIsUntouched) {
  std::vector<uint8_t> arp = pkt::BuildArpRequest(pkt::FrameSpec{});
  const std::vector<uint8_t> copy = arp;
  SetDscp(arp.data(), ParseOk(arp), 46);
  EXPECT_EQ(arp, copy);
}

TEST(RewriteTest, ChecksumUpdateMatchesFullRecomputeExhaustivelyOverTos) {
  // Every old TOS x every new DSCP on one header, including ones whose checksum is 0x0000/0xffff
  // territory (the RFC 1624 corner case).
  pkt::FrameSpec f;
  f.ip_id = 0xb1f4;
  for (int tos = 0; tos < 256; ++tos) {
    f.dscp = static_cast<uint8_t>(tos >> 2);
    f.ecn = static_cast<uint8_t>(tos & 3);
    std::vector<uint8_t> base = pkt::BuildRoce(f, pkt::RoceSpec{});
    const pkt::PacketDesc d = ParseOk(base);
    for (int dscp = 0; dscp < 64; ++dscp) {
      std::vector<uint8_t> frame = base;
      SetDscp(frame.data(), d, static_cast<uint8_t>(dscp));
      const uint8_t* ip = frame.data() + d.l3_off;
      ASSERT_EQ(static_cast<uint16_t>(ip[10] << 8 | ip[11]), pkt::Ipv4HeaderChecksum(ip, 20))
          << tos << " -> " << dscp;
    }
  }
}

TEST(RewriteTest, RandomFramesKeepIcrcChecksumAndEcn) {
  std::mt19937_64 rng(20261202);
  const uint8_t ops[] = {pkt::op::kSendOnly,    pkt::op::kWriteFirst,  pkt::op::kWriteMiddle,
                         pkt::op::kReadRequest, pkt::op::kAcknowledge, pkt::op::kReadResponseLast,
                         pkt::op::kCompareSwap, pkt::op::kCnp};
  for (int i = 0; i < 3000; ++i) {
    pkt::FrameSpec f;
    f.ipv6 = rng() % 3 == 0;
    f.dscp = rng() % 64;
    f.ecn = rng() % 4;
    f.ttl = rng() % 256;
    f.ip_id = static_cast<uint16_t>(rng());
    f.flow_label = rng() & 0xfffff;
    f.src_ip4 = {static_cast<uint8_t>(rng()), static_cast<uint8_t>(rng()), 1, 2};
    f.dst_ip4 = {static_cast<uint8_t>(rng()), 3, static_cast<uint8_t>(rng()), 4};
    if (!f.ipv6 && rng() % 4 == 0) f.ipv4_options = {1, 1, 1, 1, 0x94, 4, 0, 0};
    for (int v = 0, n = rng() % 3; v < n; ++v) {
      f.vlans.push_back(pkt::VlanTag{.tci = static_cast<uint16_t>(rng())});
    }
    f.udp_sport = static_cast<uint16_t>(rng());
    pkt::RoceSpec r;
    r.opcode = ops[rng() % std::size(ops)];
    r.dest_qp = rng() & 0xffffff;
    r.psn = rng() & 0xffffff;
    r.dma_length = static_cast<uint32_t>(rng());
    r.payload_len = (r.opcode == pkt::op::kWriteFirst || r.opcode == pkt::op::kSendOnly ||
                     r.opcode == pkt::op::kWriteMiddle)
                        ? rng() % 1500
                        : 0;
    r.payload_seed = static_cast<uint8_t>(rng());
    std::vector<uint8_t> frame = pkt::BuildRoce(f, r);
    const pkt::PacketDesc d = ParseOk(frame);
    ASSERT_TRUE(d.flags & pkt::kFlagRoce);
    const uint32_t icrc = pkt::StoredIcrc(frame.data(), d);
    ASSERT_EQ(pkt::ComputeIcrc(frame.data(), d), icrc);

    const uint8_t dscp = rng() % 64;
    const int pcp = static_cast<int>(rng() % 9) - 1;
    SetDscp(frame.data(), d, dscp);
    SetPcp(frame.data(), d, pcp);
    const pkt::PacketDesc after = ParseOk(frame);
    ASSERT_EQ(after.dscp, dscp) << i;
    ASSERT_EQ(after.ecn, f.ecn) << i;
    ASSERT_EQ(pkt::ComputeIcrc(frame.data(), after), icrc) << i;
    ASSERT_EQ(pkt::StoredIcrc(frame.data(), after), icrc) << i;
    if (!f.ipv6) {
      const uint8_t* ip = frame.data() + d.l3_off;
      const size_t ihl = (ip[0] & 0xf) * 4u;
      ASSERT_EQ(static_cast<uint16_t>(ip[10] << 8 | ip[11]), pkt::Ipv4HeaderChecksum(ip, ihl)) << i;
    }
    if (!f.vlans.empty()) {
      const int expect = pcp >= 0 ? pcp : f.vlans[0].tci >> 13;
      ASSERT_EQ(after.vlan_tci[0] >> 13, expect) << i;
      ASSERT_EQ(after.vlan_tci[0] & 0x1fff, f.vlans[0].tci & 0x1fff) << i;
    }
  }
}

}  // namespace
}  // namespace heddle::storm
