// File: dataplane/pkt/builder_test.cc
//
// The builder against scapy's bytes (exact equality), and every opcode x VLAN depth x L3 flavour x
// payload size round-tripped through Parse() with the ICRC and IPv4 checksum verified.
#include "dataplane/pkt/builder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dataplane/pkt/parse.h"

namespace heddle::pkt {
namespace {

std::vector<uint8_t> Hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(Builder, MatchesScapyWriteFirstByteForByte) {
  // scapy: Ether/IP(id=0x1234, flags=DF, tos=0x68)/UDP(sport=0xc001, chksum=0)/
  //        BTH(opcode=6, dqpn=0x123, psn=0x10, migreq=1)/RETH/32 B.
  const std::vector<uint8_t> want =
      Hex("02000000000202000000000108004568005c12344000401113f30a0000010a000002c00112b70048000006"
          "40ffff000001230000001000007f00000010000000123400010000000102030405060708090a0b0c0d0e0f"
          "101112131415161718191a1b1c1d1e1f4bdc9575");
  FrameSpec f;
  f.dscp = 26;
  f.ip_id = 0x1234;
  f.udp_sport = 0xc001;
  RoceSpec r;
  r.opcode = op::kWriteFirst;
  r.dest_qp = 0x123;
  r.psn = 0x10;
  r.va = 0x7f0000001000;
  r.rkey = 0x1234;
  r.dma_length = 0x10000;
  r.payload_len = 32;
  EXPECT_EQ(BuildRoce(f, r), want);
}

TEST(Builder, MatchesScapyAckInVlanByteForByte) {
  const std::vector<uint8_t> want =
      Hex("0200000000020200000000018100606408004500003012344000401114870a0000010a000002c00212b7001c"
          "00001100800100abcdef00fffffe1f000042ffcad02a");
  FrameSpec f;
  f.vlans = {VlanTag{kEtherTypeVlan, 3 << 13 | 100}};
  f.ip_id = 0x1234;
  f.udp_sport = 0xc002;
  RoceSpec r;
  r.opcode = op::kAcknowledge;
  r.mig_req = false;
  r.pkey = 0x8001;
  r.dest_qp = 0xabcdef;
  r.psn = 0xfffffe;
  r.syndrome = 0x1f;
  r.msn = 0x42;
  EXPECT_EQ(BuildRoce(f, r), want);
}

TEST(Builder, MatchesScapyCnpByteForByte) {
  // scapy: Ether/IP(tos=3, id=0x1234, DF)/UDP(sport=0xc004)/cnp(0x55) (BECN set, MigReq clear).
  const std::vector<uint8_t> want =
      Hex("02000000000202000000000108004503003c12344000401114780a0000010a000002c00412b7002800008100"
          "ffff4000005500000000000000000000000000000000000000003d10a311");
  FrameSpec f;
  f.ecn = 3;
  f.ip_id = 0x1234;
  f.udp_sport = 0xc004;
  RoceSpec r;
  r.opcode = op::kCnp;
  r.mig_req = false;
  r.becn = true;
  r.dest_qp = 0x55;
  EXPECT_EQ(BuildRoce(f, r), want);
}

struct Shape {
  int vlans;
  bool ipv6;
  bool options;
};

// Every opcode the parser knows (and a few it does not) in every shape, payload 0-9 bytes and one
// MTU-sized payload.
TEST(Builder, RoundTripsEveryOpcodeAndShape) {
  std::vector<uint8_t> opcodes;
  for (int o = 0; o < 256; ++o) {
    const RoceClass c = DescribeOpcode(static_cast<uint8_t>(o)).roce_class;
    if (c != RoceClass::kOther || o == 0x15 || o == 0x40 || o == 0xa0 || o == 0xff) {
      opcodes.push_back(static_cast<uint8_t>(o));
    }
  }
  ASSERT_EQ(opcodes.size(), 23u + 12u + 2u + 1u + 4u);
  const Shape kShapes[] = {{0, false, false}, {1, false, false}, {2, false, true},
                           {0, true, false},  {2, true, false},  {0, false, true}};
  int built = 0;
  for (const Shape& s : kShapes) {
    FrameSpec f;
    if (s.vlans >= 1) f.vlans.push_back({kEtherTypeQinQ, 0x2005});
    if (s.vlans >= 2) f.vlans.push_back({kEtherTypeVlan, 0xa123});
    f.ipv6 = s.ipv6;
    if (s.options) f.ipv4_options = {0x94, 0x04, 0x00, 0x00, 0x01};  // router alert + NOP
    f.dscp = 46;
    f.ecn = 2;
    f.flow_label = 0xabcde;
    f.udp_sport = 0xd00d;
    for (uint8_t opcode : opcodes) {
      for (uint32_t len : {0u, 1u, 2u, 3u, 4u, 5u, 7u, 9u, 1024u}) {
        RoceSpec r;
        r.opcode = opcode;
        r.dest_qp = 0x10000 + opcode;
        r.psn = 0xfffff0 + len % 16;
        r.pkey = 0x7fff;
        r.ack_req = len % 2 == 1;
        r.fecn = len == 3;
        r.dma_length = 0x1000 + len;
        r.syndrome = 0x1f;
        r.msn = 0x123456;
        r.payload_len = len;
        const std::vector<uint8_t> fr = BuildRoce(f, r);
        const std::string what = "opcode " + std::to_string(opcode) + " len " +
                                 std::to_string(len) + " vlans " + std::to_string(s.vlans) +
                                 (s.ipv6 ? " v6" : " v4");
        PacketDesc d;
        ASSERT_EQ(Parse(fr.data(), fr.size(), &d), ParseError::kOk) << what;
        const OpcodeInfo info = DescribeOpcode(opcode);
        EXPECT_EQ(d.num_vlans, s.vlans) << what;
        if (s.vlans >= 1) {
          EXPECT_EQ(d.vlan_tci[0], 0x2005);
        }
        EXPECT_EQ(d.l3, s.ipv6 ? L3::kIpv6 : L3::kIpv4);
        EXPECT_EQ((d.flags & kFlagIpv4Options) != 0, s.options && !s.ipv6);
        EXPECT_EQ(int{d.dscp}, 46);
        EXPECT_EQ(int{d.ecn}, 2);
        EXPECT_EQ(d.udp_sport, 0xd00d);
        EXPECT_EQ(d.opcode, opcode);
        EXPECT_EQ(d.roce_class, info.roce_class);
        EXPECT_EQ(d.dest_qp, r.dest_qp);
        EXPECT_EQ(d.psn, r.psn);
        EXPECT_EQ(d.pkey, 0x7fff);
        EXPECT_EQ((d.flags & kFlagAckReq) != 0, r.ack_req);
        EXPECT_EQ((d.flags & kFlagFecn) != 0, r.fecn);
        EXPECT_EQ(d.flags & ~(kFlagAckReq | kFlagFecn | kFlagIpv4Options), kFlagRoce | info.flags)
            << what;
        EXPECT_EQ(d.dma_length, (info.flags & kFlagReth) ? r.dma_length : 0u) << what;
        EXPECT_EQ(d.aeth, (info.flags & kFlagAeth) ? 0x1f123456u : 0u) << what;
        const uint32_t padded = (len + 3) & ~3u;
        EXPECT_EQ(int{d.pad_count}, static_cast<int>(padded - len)) << what;
        EXPECT_EQ(d.payload_len, padded) << what;
        EXPECT_EQ(d.payload_off, d.bth_off + kBthLen + info.ext_len);
        EXPECT_EQ(fr.size(), std::max<size_t>(60, RoceFrameLen(f, opcode, len)));
        EXPECT_EQ(d.l3_off + d.ip_len, RoceFrameLen(f, opcode, len)) << what;
        EXPECT_TRUE(VerifyIcrc(fr.data(), d)) << what;
        if (!s.ipv6) {
          const size_t ihl = d.l4_off - d.l3_off;
          EXPECT_EQ(Ipv4HeaderChecksum(fr.data() + d.l3_off, ihl),
                    fr[d.l3_off + 10] << 8 | fr[d.l3_off + 11])
              << what;
        }
        ++built;
      }
    }
  }
  EXPECT_EQ(built, 6 * 42 * 9);
}

TEST(Builder, PayloadBytesAndPadding) {
  FrameSpec f;
  RoceSpec r;
  r.opcode = op::kSendOnly;
  r.payload = {'h', 'e', 'd', 'd', 'l', 'e'};
  const std::vector<uint8_t> fr = BuildRoce(f, r);
  PacketDesc d;
  ASSERT_EQ(Parse(fr.data(), fr.size(), &d), ParseError::kOk);
  EXPECT_EQ(int{d.pad_count}, 2);
  EXPECT_EQ(std::string(fr.begin() + d.payload_off, fr.begin() + d.payload_off + 6), "heddle");
  EXPECT_EQ(fr[d.payload_off + 6], 0);
  EXPECT_EQ(fr[d.payload_off + 7], 0);
  // 14 + 20 + 8 + 12 + 8 + 4 = 66: no Ethernet padding needed.
  EXPECT_EQ(fr.size(), 66u);
}

TEST(Builder, MinimumFramePadding) {
  FrameSpec f;
  RoceSpec r;
  r.opcode = op::kSendOnly;  // 58 bytes of headers + ICRC
  std::vector<uint8_t> fr = BuildRoce(f, r);
  ASSERT_EQ(fr.size(), 60u);
  PacketDesc d;
  ASSERT_EQ(Parse(fr.data(), fr.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.ip_len, 44);
  EXPECT_EQ(d.icrc_off, 54);
  EXPECT_TRUE(VerifyIcrc(fr.data(), d));
  f.min_frame_len = 0;
  EXPECT_EQ(BuildRoce(f, r).size(), 58u);
  f.min_frame_len = 1020;
  fr = BuildRoce(f, r);
  EXPECT_EQ(fr.size(), 1020u);
  ASSERT_EQ(Parse(fr.data(), fr.size(), &d), ParseError::kOk);
  EXPECT_TRUE(VerifyIcrc(fr.data(), d));
}

TEST(Builder, ExtensionHeaderContents) {
  FrameSpec f;
  RoceSpec r;
  r.opcode = op::kUdSendOnlyImm;
  r.qkey = 0x80010000;
  r.src_qp = 0x000abc;
  r.imm = 0xcafef00d;
  std::vector<uint8_t> fr = BuildRoce(f, r);
  const size_t ext = 14 + 20 + 8 + 12;
  EXPECT_EQ(std::vector<uint8_t>(fr.begin() + ext, fr.begin() + ext + 12),
            (std::vector<uint8_t>{0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x0a, 0xbc, 0xca, 0xfe, 0xf0,
                                  0x0d}));
  r = RoceSpec();
  r.opcode = op::kCompareSwap;
  r.va = 0x0102030405060708;
  r.rkey = 0x11223344;
  r.swap_add = 0xa1a2a3a4a5a6a7a8;
  r.compare = 0xb1b2b3b4b5b6b7b8;
  fr = BuildRoce(f, r);
  EXPECT_EQ(fr[ext], 0x01);
  EXPECT_EQ(fr[ext + 8], 0x11);
  EXPECT_EQ(fr[ext + 12], 0xa1);
  EXPECT_EQ(fr[ext + 20], 0xb1);
  EXPECT_EQ(fr[ext + 27], 0xb8);
  r = RoceSpec();
  r.opcode = op::kAtomicAcknowledge;
  r.syndrome = 0x00;
  r.msn = 7;
  r.orig_data = 0x99;
  fr = BuildRoce(f, r);
  EXPECT_EQ(fr[ext + 3], 7);
  EXPECT_EQ(fr[ext + 11], 0x99);
  r = RoceSpec();
  r.opcode = op::kSendOnlyInval;
  r.inval_rkey = 0xdeadbeef;
  fr = BuildRoce(f, r);
  EXPECT_EQ(fr[ext], 0xde);
  EXPECT_EQ(fr[ext + 3], 0xef);
}

TEST(Builder, NonRoceFrames) {
  FrameSpec f;
  f.vlans = {{kEtherTypeVlan, 7}};
  std::vector<uint8_t> arp = BuildArpRequest(f);
  PacketDesc d;
  ASSERT_EQ(Parse(arp.data(), arp.size(), &d), ParseError::kOk);
  EXPECT_EQ(arp.size(), 60u);
  EXPECT_EQ(d.ether_type, kEtherTypeArp);
  EXPECT_EQ(d.num_vlans, 1);
  EXPECT_EQ(arp[0], 0xff);
  EXPECT_EQ(arp[18 + 7], 1);  // opcode request
  f.udp_dport = 53;
  const uint8_t payload[100] = {};
  std::vector<uint8_t> udp = BuildUdp(f, payload);
  ASSERT_EQ(Parse(udp.data(), udp.size(), &d), ParseError::kOk);
  EXPECT_EQ(d.roce_class, RoceClass::kNone);
  EXPECT_EQ(d.ip_proto, 17);
  EXPECT_EQ(d.ip_len, 128);
  EXPECT_EQ(udp.size(), 18u + 128u);
}

TEST(Builder, RewriteIcrcAfterEdit) {
  FrameSpec f;
  RoceSpec r;
  r.opcode = op::kWriteMiddle;
  r.payload_len = 64;
  std::vector<uint8_t> fr = BuildRoce(f, r);
  fr[34] ^= 0x40;  // UDP source port: covered by the ICRC
  PacketDesc d;
  ASSERT_EQ(Parse(fr.data(), fr.size(), &d), ParseError::kOk);
  EXPECT_FALSE(VerifyIcrc(fr.data(), d));
  EXPECT_TRUE(RewriteIcrc(fr));
  EXPECT_TRUE(VerifyIcrc(fr.data(), d));
  std::vector<uint8_t> arp = BuildArpRequest(f);
  EXPECT_FALSE(RewriteIcrc(arp));
}

TEST(Builder, TruncationsOfBuiltFramesAreErrors) {
  FrameSpec f;
  f.vlans = {{kEtherTypeVlan, 1}, {kEtherTypeVlan, 2}};
  for (bool v6 : {false, true}) {
    f.ipv6 = v6;
    for (uint8_t opcode : {op::kWriteOnlyImm, op::kAtomicAcknowledge, op::kFetchAdd,
                           op::kUdSendOnlyImm, op::kCnp, op::kSendLastInval}) {
      RoceSpec r;
      r.opcode = opcode;
      r.payload_len = 5;
      f.min_frame_len = 0;
      const std::vector<uint8_t> fr = BuildRoce(f, r);
      for (size_t n = 0; n < fr.size(); ++n) {
        const std::vector<uint8_t> cut(fr.begin(), fr.begin() + n);
        PacketDesc d;
        EXPECT_NE(Parse(cut.data(), cut.size(), &d), ParseError::kOk) << int{opcode} << " " << n;
      }
    }
  }
}

}  // namespace
}  // namespace heddle::pkt
