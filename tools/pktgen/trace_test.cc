// File: tools/pktgen/trace_test.cc
#include "tools/pktgen/trace.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::pktgen {
namespace {

using pkt::PacketDesc;
using pkt::ParseError;
using pkt::RoceClass;

Trace MustGenerate(const TraceOptions& o) {
  absl::StatusOr<Trace> t = GenerateTrace(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : Trace();
}

struct Parsed {
  PacketDesc d;
  bool ok;  // parsed and, if RoCE, ICRC verified
};

std::vector<Parsed> ParseAll(const std::vector<pkt::PcapRecord>& recs) {
  std::vector<Parsed> out;
  for (const pkt::PcapRecord& r : recs) {
    Parsed p;
    const ParseError e = pkt::Parse(r.data.data(), r.data.size(), &p.d);
    p.ok =
        e == ParseError::kOk && (!(p.d.flags & pkt::kFlagRoce) || VerifyIcrc(r.data.data(), p.d));
    out.push_back(p);
  }
  return out;
}

uint32_t PsnDelta(uint32_t from, uint32_t to) { return (to - from) & 0xffffff; }

TEST(Trace, DemoIsDeterministicPerSeed) {
  TraceOptions o;
  o.packets = 300;
  const Trace a = MustGenerate(o);
  const Trace b = MustGenerate(o);
  ASSERT_EQ(a.host.size(), 300u);
  ASSERT_EQ(a.host.size(), b.host.size());
  ASSERT_EQ(a.uplink.size(), b.uplink.size());
  for (size_t i = 0; i < a.host.size(); ++i) {
    EXPECT_EQ(a.host[i].data, b.host[i].data);
    EXPECT_EQ(a.host[i].timestamp_ns, b.host[i].timestamp_ns);
  }
  o.seed = 2;
  const Trace c = MustGenerate(o);
  size_t same = 0;
  for (size_t i = 0; i < std::min(a.host.size(), c.host.size()); ++i) {
    same += a.host[i].data == c.host[i].data;
  }
  EXPECT_LT(same, a.host.size() / 10);
}

TEST(Trace, DemoContainsTheRealisticMixAndConsistentPsns) {
  TraceOptions o;
  o.packets = 3000;
  o.qps = 6;
  const Trace t = MustGenerate(o);
  const std::vector<Parsed> host = ParseAll(t.host);
  const std::vector<Parsed> up = ParseAll(t.uplink);
  std::map<uint8_t, int> host_ops, up_ops;
  int non_roce = 0, ud = 0;
  // Per destination QP: the last PSN and whether it was a READ request (which reserves a range).
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> last;  // qp -> (psn, span)
  std::set<uint32_t> ack_req_psns;
  std::vector<std::pair<uint32_t, uint32_t>> read_ranges;  // [psn, psn + n) of READ requests
  std::set<uint32_t> dma_lengths;
  for (size_t i = 0; i < host.size(); ++i) {
    const Parsed& p = host[i];
    ASSERT_TRUE(p.ok) << "host frame " << i;
    if (!(p.d.flags & pkt::kFlagRoce)) {
      ++non_roce;
      continue;
    }
    ++host_ops[p.d.opcode];
    if (p.d.flags & pkt::kFlagDeth) {
      ++ud;
      continue;
    }
    if (p.d.flags & pkt::kFlagReth) dma_lengths.insert(p.d.dma_length);
    if (p.d.flags & pkt::kFlagAckReq) ack_req_psns.insert(p.d.psn);
    uint32_t span = 1;
    if (p.d.roce_class == RoceClass::kReadRequest) {
      // The responder answers in MTU-sized packets; this trace uses 1 KiB or 4 KiB MTUs, so the
      // reserved span is one of two values.
      read_ranges.push_back({p.d.psn, (p.d.dma_length + 1023) / 1024});
      span = 0;  // checked below against either MTU
    }
    auto it = last.find(p.d.dest_qp);
    if (it != last.end()) {
      const uint32_t delta = PsnDelta(it->second.first, p.d.psn);
      if (it->second.second == 0) {
        EXPECT_GE(delta, 1u) << "frame " << i;
      } else {
        EXPECT_EQ(delta, it->second.second) << "frame " << i << " qp " << p.d.dest_qp;
      }
    }
    last[p.d.dest_qp] = {p.d.psn, span};
    if (i > 0) {
      EXPECT_GE(t.host[i].timestamp_ns, t.host[i - 1].timestamp_ns);
    }
  }
  using namespace pkt::op;
  for (uint8_t opcode : {kWriteFirst, kWriteMiddle, kWriteLast, kReadRequest, kSendFirst,
                         kSendMiddle, kSendLast, kSendOnly, kUdSendOnly}) {
    EXPECT_GT(host_ops[opcode], 0) << "opcode " << int{opcode};
  }
  EXPECT_GT(host_ops[kCompareSwap] + host_ops[kFetchAdd], 0);
  EXPECT_GT(non_roce, 10);
  EXPECT_GT(ud, 10);
  EXPECT_LT(*dma_lengths.begin(), 64u * 1024);
  EXPECT_GT(*dma_lengths.rbegin(), 100u * 1024);

  std::map<uint32_t, uint32_t> msn;
  for (size_t i = 0; i < up.size(); ++i) {
    const Parsed& p = up[i];
    ASSERT_TRUE(p.ok) << "uplink frame " << i;
    ASSERT_TRUE(p.d.flags & pkt::kFlagRoce);
    ++up_ops[p.d.opcode];
    if (i > 0) {
      EXPECT_GE(t.uplink[i].timestamp_ns, t.uplink[i - 1].timestamp_ns);
    }
    if (p.d.roce_class == RoceClass::kAck || p.d.roce_class == RoceClass::kAtomicAck) {
      EXPECT_TRUE(ack_req_psns.count(p.d.psn)) << "ACK for a PSN the host never asked about";
    }
    if (p.d.roce_class == RoceClass::kReadResponse) {
      bool inside = false;
      for (auto [start, n1k] : read_ranges) inside |= PsnDelta(start, p.d.psn) < n1k;
      EXPECT_TRUE(inside) << "READ response PSN outside every READ request's range";
    }
    if (p.d.flags & pkt::kFlagAeth) {
      auto it = msn.find(p.d.dest_qp);
      const uint32_t m = p.d.aeth & 0xffffff;
      if (it != msn.end()) {
        EXPECT_GE(m, it->second) << "MSN went backwards";
      }
      msn[p.d.dest_qp] = m;
    }
  }
  EXPECT_GT(up_ops[kAcknowledge], 0);
  EXPECT_GT(up_ops[kReadResponseFirst] + up_ops[kReadResponseOnly], 0);
  EXPECT_GT(up_ops[kAtomicAcknowledge], 0);
  EXPECT_GT(up_ops[kCnp], 0);
}

TEST(Trace, SmallMixIsSixtyByteFrames) {
  TraceOptions o;
  o.mix = Mix::kSmall;
  o.packets = 500;
  const Trace t = MustGenerate(o);
  ASSERT_EQ(t.host.size(), 500u);
  std::map<uint32_t, uint32_t> last;
  for (const pkt::PcapRecord& r : t.host) {
    EXPECT_EQ(r.data.size(), 60u);
    PacketDesc d;
    ASSERT_EQ(pkt::Parse(r.data.data(), r.data.size(), &d), ParseError::kOk);
    EXPECT_EQ(d.roce_class, RoceClass::kSend);
    EXPECT_TRUE(pkt::VerifyIcrc(r.data.data(), d));
    auto it = last.find(d.dest_qp);
    if (it != last.end()) {
      EXPECT_EQ(PsnDelta(it->second, d.psn), 1u);
    }
    last[d.dest_qp] = d.psn;
  }
  EXPECT_EQ(last.size(), 8u);
  EXPECT_GT(t.uplink.size(), 0u);
}

TEST(Trace, OneKMixIs1024ByteWrites) {
  TraceOptions o;
  o.mix = Mix::k1k;
  o.packets = 200;
  for (bool v6 : {false, true}) {
    o.ipv6 = v6;
    const Trace t = MustGenerate(o);
    int middles = 0;
    for (const pkt::PcapRecord& r : t.host) {
      EXPECT_EQ(r.data.size(), 1024u);
      PacketDesc d;
      ASSERT_EQ(pkt::Parse(r.data.data(), r.data.size(), &d), ParseError::kOk);
      EXPECT_EQ(d.roce_class, RoceClass::kWrite);
      EXPECT_TRUE(pkt::VerifyIcrc(r.data.data(), d));
      EXPECT_GE(d.payload_len, 920);
      middles += d.opcode == pkt::op::kWriteMiddle;
    }
    EXPECT_EQ(middles, 200 - 8);
  }
}

TEST(Trace, Ipv6AndVlan) {
  TraceOptions o;
  o.packets = 200;
  o.ipv6 = true;
  o.vlan = 42;
  const Trace t = MustGenerate(o);
  for (const std::vector<pkt::PcapRecord>* dir : {&t.host, &t.uplink}) {
    for (const Parsed& p : ParseAll(*dir)) {
      EXPECT_TRUE(p.ok);
      EXPECT_EQ(p.d.num_vlans, 1);
      EXPECT_EQ(p.d.vlan_tci[0] & 0xfff, 42);
      EXPECT_EQ(p.d.vlan_tci[0] >> 13, 3);
      EXPECT_EQ(p.d.l3, pkt::L3::kIpv6);
    }
  }
}

TEST(Trace, MalformedCountIsExact) {
  for (bool v6 : {false, true}) {
    TraceOptions o;
    o.packets = 400;
    o.malformed = 25;
    o.ipv6 = v6;
    const Trace t = MustGenerate(o);
    ASSERT_EQ(t.host.size(), 400u);
    int bad = 0;
    std::set<ParseError> errors;
    for (const pkt::PcapRecord& r : t.host) {
      PacketDesc d;
      const ParseError e = pkt::Parse(r.data.data(), r.data.size(), &d);
      errors.insert(e);
      bad += e != ParseError::kOk || ((d.flags & pkt::kFlagRoce) && !VerifyIcrc(r.data.data(), d));
    }
    EXPECT_EQ(bad, 25);
    EXPECT_GE(errors.size(), 6u);  // ok + five distinct errors
  }
}

TEST(Trace, BadOptionsAreErrors) {
  EXPECT_FALSE(ParseMix("huge").ok());
  EXPECT_EQ(*ParseMix("1k"), Mix::k1k);
  TraceOptions o;
  o.packets = 0;
  EXPECT_FALSE(GenerateTrace(o).ok());
  o = TraceOptions();
  o.qps = 0;
  EXPECT_FALSE(GenerateTrace(o).ok());
  o = TraceOptions();
  o.vlan = 5000;
  EXPECT_FALSE(GenerateTrace(o).ok());
  o = TraceOptions();
  o.packets = 10;
  o.malformed = 11;
  EXPECT_FALSE(GenerateTrace(o).ok());
}

}  // namespace
}  // namespace heddle::pktgen
