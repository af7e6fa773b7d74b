// Parse() and the ICRC on frames whose bytes are not contiguous (chained mbufs): only the first
// part holds the headers; lengths are checked against the whole frame.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::pkt {
namespace {

std::vector<uint8_t> Frame(uint8_t opcode, uint32_t payload, bool ipv6 = false) {
  FrameSpec f;
  f.ipv6 = ipv6;
  RoceSpec r;
  r.opcode = opcode;
  r.dest_qp = 0xabc;
  r.psn = 77;
  r.dma_length = 1 << 20;
  r.payload_len = payload;
  return BuildRoce(f, r);
}

TEST(Segmented, SameDescAsContiguousWhenHeadersFitTheFirstPart) {
  for (bool v6 : {false, true}) {
    for (uint8_t op : {op::kWriteFirst, op::kReadResponseLast, op::kSendOnly, op::kWriteMiddle}) {
      std::vector<uint8_t> f = Frame(op, 4000, v6);
      PacketDesc whole, split;
      ASSERT_EQ(Parse(f.data(), f.size(), &whole), ParseError::kOk);
      // The parser may only look at the first 128 bytes: copy them alone so any read beyond is
      // out of bounds (and caught under ASan).
      std::vector<uint8_t> head(f.begin(), f.begin() + 128);
      ASSERT_EQ(Parse(head.data(), head.size(), f.size(), &split), ParseError::kOk);
      EXPECT_EQ(std::memcmp(&whole, &split, sizeof(whole)), 0) << int(op) << " v6=" << v6;
      EXPECT_GT(split.icrc_off, head.size());
    }
  }
}

TEST(Segmented, LengthsAreCheckedAgainstTheWholeFrame) {
  std::vector<uint8_t> f = Frame(op::kWriteOnly, 3000);
  PacketDesc d;
  // The whole frame is shorter than IP says: an error, as for a contiguous truncated frame.
  EXPECT_EQ(Parse(f.data(), 200, 2000, &d), ParseError::kIpv4BadLength);
  // Only the contiguous part short: fine.
  EXPECT_EQ(Parse(f.data(), 200, f.size(), &d), ParseError::kOk);
  // frame_len below len is taken as len.
  EXPECT_EQ(Parse(f.data(), f.size(), 10, &d), ParseError::kOk);
}

TEST(Segmented, HeadersStraddlingTheFirstPartAreTruncated) {
  std::vector<uint8_t> f = Frame(op::kWriteFirst, 3000);  // BTH at 42, RETH 54..70
  PacketDesc d;
  EXPECT_EQ(Parse(f.data(), 40, f.size(), &d), ParseError::kUdpTruncated);
  EXPECT_EQ(Parse(f.data(), 50, f.size(), &d), ParseError::kBthTruncated);
  EXPECT_EQ(Parse(f.data(), 60, f.size(), &d), ParseError::kRoceExtTruncated);
  EXPECT_EQ(Parse(f.data(), 70, f.size(), &d), ParseError::kOk);
}

TEST(Segmented, IcrcInPiecesEqualsIcrcInOneGo) {
  for (bool v6 : {false, true}) {
    std::vector<uint8_t> f = Frame(op::kWriteLast, 2500, v6);
    PacketDesc d;
    ASSERT_EQ(Parse(f.data(), f.size(), &d), ParseError::kOk);
    const uint32_t want = ComputeIcrc(f.data(), d);
    EXPECT_EQ(want, StoredIcrc(f.data(), d));
    for (size_t piece : {1u, 7u, 64u, 1000u}) {
      uint32_t c = IcrcOverHeaders(f.data(), d);
      for (size_t off = d.bth_off + kBthLen; off < d.icrc_off; off += piece) {
        c = IcrcContinue(c, f.data() + off, std::min<size_t>(piece, d.icrc_off - off));
      }
      EXPECT_EQ(c, want) << "piece " << piece;
    }
  }
}

}  // namespace
}  // namespace heddle::pkt
