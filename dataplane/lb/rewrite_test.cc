// File: dataplane/lb/rewrite_test.cc
#include "dataplane/lb/rewrite.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "dataplane/lb/lb_test_util.h"
#include "dataplane/lb/rewrite_corpus.h"
#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"

namespace heddle::lb {
namespace {

using testing::Packet;

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

TEST(Rewrite, SportIncrementalIcrcEqualsFullRecomputeOnRandomFrames) {
  std::mt19937_64 rng(2024);
  int v4 = 0, v6 = 0, vlan = 0, csum = 0;
  IcrcDeltaCache cache;  // every other frame goes through the worker's memo
  for (int i = 0; i < 3000; ++i) {
    RandomFrame rf = MakeRandomFrame(rng);
    std::vector<uint8_t>& f = rf.bytes;
    pkt::PacketDesc d;
    ASSERT_EQ(pkt::Parse(f.data(), f.size(), &d), pkt::ParseError::kOk);
    ASSERT_TRUE(pkt::VerifyIcrc(f.data(), d));
    const uint16_t ip_csum_before = d.l3 == pkt::L3::kIpv4 ? Load16(f.data() + d.l3_off + 10) : 0;
    const Path path{.entropy = static_cast<uint32_t>(rng() & 0xffff)};
    const RewriteResult r = Rewrite(f.data(), f.size(), d, path, EntropyField::kUdpSourcePort,
                                    i % 2 ? &cache : nullptr);
    ASSERT_NE(r, RewriteResult::kMalformed);
    EXPECT_EQ(Load16(f.data() + d.l4_off), path.entropy);
    // Incremental == full recompute (the independent zlib pass over the whole frame).
    ASSERT_EQ(pkt::StoredIcrc(f.data(), d), pkt::ComputeIcrc(f.data(), d))
        << "frame " << i << " len " << f.size() << " l3 " << static_cast<int>(d.l3);
    // The IPv4 header checksum does not cover UDP.
    if (d.l3 == pkt::L3::kIpv4) {
      EXPECT_EQ(Load16(f.data() + d.l3_off + 10), ip_csum_before);
      EXPECT_EQ(pkt::Ipv4HeaderChecksum(f.data() + d.l3_off, d.l4_off - d.l3_off), ip_csum_before);
    }
    // The UDP checksum: zero stays zero, non-zero stays right.
    const uint16_t udp_csum = Load16(f.data() + d.l4_off + 6);
    if (!rf.udp_checksum) {
      EXPECT_EQ(udp_csum, 0);
    } else {
      EXPECT_EQ(udp_csum, UdpChecksum(f.data(), d)) << "frame " << i;
      ++csum;
    }
    v4 += d.l3 == pkt::L3::kIpv4;
    v6 += d.l3 == pkt::L3::kIpv6;
    vlan += d.num_vlans != 0;
  }
  // The mix covered every case.
  EXPECT_GT(v4, 500);
  EXPECT_GT(v6, 500);
  EXPECT_GT(vlan, 500);
  EXPECT_GT(csum, 500);
}

// Rewrite()'s inline fast path (UDP source port, zero UDP checksum, no next-hop MAC) against
// RewriteFull() on the same frames: the same bytes out and the same result, whatever path it takes.
TEST(Rewrite, InlineFastPathEqualsFullRewrite) {
  std::mt19937_64 rng(77);
  IcrcDeltaCache cache_a, cache_b;
  int fast = 0;
  for (int i = 0; i < 3000; ++i) {
    RandomFrame rf = MakeRandomFrame(rng);
    std::vector<uint8_t> a = rf.bytes;
    pkt::PacketDesc d;
    ASSERT_EQ(pkt::Parse(a.data(), a.size(), &d), pkt::ParseError::kOk);
    Path path{.entropy = static_cast<uint32_t>(rng() % 4 == 0 ? d.udp_sport : rng() & 0xffff)};
    if (rng() % 4 == 0) {
      path.has_next_hop_mac = true;
      path.next_hop_mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i)};
    }
    const EntropyField field =
        rng() % 3 == 0 ? EntropyField::kIpv6FlowLabel : EntropyField::kUdpSourcePort;
    // Lengths that cut the ICRC now and then.
    const size_t len = rng() % 8 == 0 ? d.icrc_off + (rng() % 4) : a.size();
    std::vector<uint8_t> b = a;
    const RewriteResult ra = Rewrite(a.data(), len, d, path, field, &cache_a);
    const RewriteResult rb = RewriteFull(b.data(), len, d, path, field, &cache_b);
    ASSERT_EQ(ra, rb) << "frame " << i;
    ASSERT_EQ(a, b) << "frame " << i;
    fast += !rf.udp_checksum && !path.has_next_hop_mac && len == a.size() &&
            (field == EntropyField::kUdpSourcePort || d.l3 == pkt::L3::kIpv4);
  }
  EXPECT_GT(fast, 500);  // the fast path ran, not only the fallback
}

TEST(Rewrite, OneAndFourKibPayloadsWithAndWithoutVlan) {
  for (bool ipv6 : {false, true}) {
    for (int vlans : {0, 1, 2}) {
      for (uint32_t payload : {1024u, 4096u}) {
        pkt::FrameSpec f;
        f.ipv6 = ipv6;
        for (int v = 0; v < vlans; ++v) f.vlans.push_back({.tci = static_cast<uint16_t>(7 + v)});
        pkt::RoceSpec r;
        r.opcode = pkt::op::kWriteMiddle;
        r.payload_len = payload;
        Packet p = testing::Make(f, r);
        const Path path{.entropy = 0xc0de};
        ASSERT_EQ(Rewrite(p.data(), p.size(), p.desc, path, EntropyField::kUdpSourcePort),
                  RewriteResult::kRewritten);
        EXPECT_TRUE(pkt::VerifyIcrc(p.data(), p.desc)) << ipv6 << vlans << payload;
        EXPECT_EQ(Rewrite(p.data(), p.size(), p.desc, path, EntropyField::kUdpSourcePort),
                  RewriteResult::kUnchanged);
      }
    }
  }
}

TEST(Rewrite, FlowLabelLeavesIcrcAndUdpAlone) {
  pkt::FrameSpec f;
  f.ipv6 = true;
  f.flow_label = 0x12345;
  pkt::RoceSpec r;
  r.opcode = pkt::op::kSendOnly;
  r.payload_len = 300;
  Packet p = testing::Make(f, r);
  const std::vector<uint8_t> before = p.bytes;
  ASSERT_EQ(
      Rewrite(p.data(), p.size(), p.desc, Path{.entropy = 0xabcde}, EntropyField::kIpv6FlowLabel),
      RewriteResult::kRewritten);
  const uint8_t* ip = p.data() + p.desc.l3_off;
  EXPECT_EQ((ip[1] & 0x0f) << 16 | ip[2] << 8 | ip[3], 0xabcde);
  EXPECT_EQ(ip[0], before[p.desc.l3_off]);                    // version, traffic class high nibble
  EXPECT_EQ(ip[1] & 0xf0, before[p.desc.l3_off + 1] & 0xf0);  // traffic class low nibble
  EXPECT_TRUE(pkt::VerifyIcrc(p.data(), p.desc));
  EXPECT_EQ(pkt::StoredIcrc(p.data(), p.desc), pkt::StoredIcrc(before.data(), p.desc));
  EXPECT_EQ(0, std::memcmp(p.data() + p.desc.l4_off, before.data() + p.desc.l4_off,
                           p.size() - p.desc.l4_off));

  // IPv4 has no flow label: the source port carries the entropy's low 16 bits.
  Packet q = testing::Make(pkt::FrameSpec{}, r);
  ASSERT_EQ(
      Rewrite(q.data(), q.size(), q.desc, Path{.entropy = 0xabcde}, EntropyField::kIpv6FlowLabel),
      RewriteResult::kRewritten);
  EXPECT_EQ(Load16(q.data() + q.desc.l4_off), 0xbcde);
  EXPECT_TRUE(pkt::VerifyIcrc(q.data(), q.desc));
}

TEST(Rewrite, NextHopMac) {
  Packet p = testing::Make(pkt::FrameSpec{}, pkt::RoceSpec{});
  Path path{.entropy = p.desc.udp_sport,
            .has_next_hop_mac = true,
            .next_hop_mac = {0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}};
  ASSERT_EQ(Rewrite(p.data(), p.size(), p.desc, path, EntropyField::kUdpSourcePort),
            RewriteResult::kRewritten);
  EXPECT_EQ(0, std::memcmp(p.data(), path.next_hop_mac.data(), 6));
  EXPECT_TRUE(pkt::VerifyIcrc(p.data(), p.desc));
}

TEST(Rewrite, CorruptIcrcStaysCorrupt) {
  pkt::RoceSpec r;
  r.payload_len = 512;
  Packet p = testing::Make(pkt::FrameSpec{}, r);
  p.bytes[p.desc.payload_off + 10] ^= 0x40;  // a bit flipped on the wire
  ASSERT_FALSE(pkt::VerifyIcrc(p.data(), p.desc));
  Rewrite(p.data(), p.size(), p.desc, Path{.entropy = 0xd00d}, EntropyField::kUdpSourcePort);
  EXPECT_FALSE(pkt::VerifyIcrc(p.data(), p.desc));
  p.bytes[p.desc.payload_off + 10] ^= 0x40;  // undo the flip: the update itself was exact
  EXPECT_TRUE(pkt::VerifyIcrc(p.data(), p.desc));
}

TEST(Rewrite, HeadersOnlyGivesTheDeltaForALaterSegment) {
  pkt::RoceSpec r;
  r.opcode = pkt::op::kWriteMiddle;
  r.payload_len = 2048;
  Packet p = testing::Make(pkt::FrameSpec{}, r);
  uint32_t delta = 0;
  // Only the first 128 bytes are "contiguous"; the ICRC is beyond.
  ASSERT_EQ(RewriteHeaders(p.data(), 128, p.desc, Path{.entropy = 0xe001},
                           EntropyField::kUdpSourcePort, pkt::StoredIcrc(p.data(), p.desc), &delta),
            RewriteResult::kRewritten);
  EXPECT_NE(delta, 0u);
  EXPECT_FALSE(pkt::VerifyIcrc(p.data(), p.desc));
  ApplyIcrcDelta(p.data() + p.desc.icrc_off, delta);
  EXPECT_TRUE(pkt::VerifyIcrc(p.data(), p.desc));
}

TEST(Rewrite, RefusesWhatDoesNotFit) {
  Packet p = testing::Make(pkt::FrameSpec{}, pkt::RoceSpec{});
  const std::vector<uint8_t> before = p.bytes;
  const Path path{.entropy = 0xd00d};
  // A length that cuts the ICRC, then one that cuts UDP.
  EXPECT_EQ(Rewrite(p.data(), p.desc.icrc_off + 3u, p.desc, path, EntropyField::kUdpSourcePort),
            RewriteResult::kMalformed);
  uint32_t delta;
  EXPECT_EQ(RewriteHeaders(p.data(), p.desc.l4_off + 4u, p.desc, path, EntropyField::kUdpSourcePort,
                           0, &delta),
            RewriteResult::kMalformed);
  pkt::PacketDesc not_roce = p.desc;
  not_roce.flags = 0;
  EXPECT_EQ(Rewrite(p.data(), p.size(), not_roce, path, EntropyField::kUdpSourcePort),
            RewriteResult::kNotRoce);
  EXPECT_EQ(p.bytes, before);
}

TEST(Rewrite, Rfc1624ChecksumUpdateMatchesRecompute) {
  // Words of a toy header; the update of one word equals a recompute.
  std::mt19937 rng(5);
  for (int i = 0; i < 10000; ++i) {
    uint16_t w[10];
    for (auto& x : w) x = static_cast<uint16_t>(rng());
    auto sum = [&] {
      uint32_t s = 0;
      for (auto x : w) s += x;
      while (s >> 16) s = (s & 0xffff) + (s >> 16);
      return static_cast<uint16_t>(~s);
    };
    const uint16_t c = sum();
    const uint16_t old = w[3];
    w[3] = static_cast<uint16_t>(rng());
    const uint16_t updated = ChecksumUpdate16(c, old, w[3]);
    const uint16_t full = sum();
    // One's complement has two zeros: 0x0000 and 0xffff are the same checksum.
    EXPECT_TRUE(updated == full || (updated == 0xffff && full == 0) ||
                (updated == 0 && full == 0xffff))
        << std::hex << updated << " " << full;
  }
}

}  // namespace
}  // namespace heddle::lb
