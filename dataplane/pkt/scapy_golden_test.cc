// File: dataplane/pkt/scapy_golden_test.cc
//
// Checks Parse() and the ICRC against frames scapy.contrib.roce built (tests/data/scapy_golden.py,
// run live by the ctest fixture pkt_scapy_golden_generate). The pcap and the expectation file come
// from the environment: HEDDLE_SCAPY_PCAP, HEDDLE_SCAPY_EXPECT.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/pcap_file.h"

namespace heddle::pkt {
namespace {

using Expect = std::map<std::string, std::string>;

std::vector<Expect> ReadExpectations(const std::string& path) {
  std::vector<Expect> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    Expect e;
    for (absl::string_view tok : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(tok, absl::MaxSplits('=', 1));
      e[kv.first] = kv.second;
    }
    out.push_back(std::move(e));
  }
  return out;
}

uint32_t Num(const Expect& e, const std::string& key) {
  auto it = e.find(key);
  EXPECT_NE(it, e.end()) << "missing " << key;
  if (it == e.end()) return 0;
  uint32_t v = 0;
  const std::string& s = it->second;
  const bool ok =
      s.rfind("0x", 0) == 0 ? absl::SimpleHexAtoi(s.substr(2), &v) : absl::SimpleAtoi(s, &v);
  EXPECT_TRUE(ok) << key << "=" << s;
  return v;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

TEST(ScapyGolden, ParserAndIcrcAgreeWithScapy) {
  const std::string pcap = Env("HEDDLE_SCAPY_PCAP");
  const std::string expect = Env("HEDDLE_SCAPY_EXPECT");
  ASSERT_FALSE(pcap.empty()) << "set HEDDLE_SCAPY_PCAP (ctest does)";
  ASSERT_FALSE(expect.empty()) << "set HEDDLE_SCAPY_EXPECT (ctest does)";
  absl::StatusOr<std::vector<PcapRecord>> recs = ReadPcapFile(pcap);
  ASSERT_TRUE(recs.ok()) << recs.status();
  const std::vector<Expect> exps = ReadExpectations(expect);
  ASSERT_EQ(recs->size(), exps.size());
  ASSERT_GE(exps.size(), 150u) << "the generator should make every opcode in several shapes";

  int roce = 0, errors = 0;
  for (size_t i = 0; i < exps.size(); ++i) {
    const Expect& e = exps[i];
    const std::vector<uint8_t>& f = (*recs)[i].data;
    SCOPED_TRACE("frame " + std::to_string(i));
    ASSERT_EQ(Num(e, "i"), i);
    PacketDesc d;
    const ParseError err = Parse(f.data(), f.size(), &d);
    ASSERT_EQ(std::string(ParseErrorName(err)), e.at("err"));
    if (err != ParseError::kOk) {
      ++errors;
      continue;
    }
    EXPECT_EQ(std::string(RoceClassName(d.roce_class)), e.at("cls"));
    if (e.at("cls") == "none") {
      EXPECT_FALSE(d.flags & kFlagRoce);
      continue;
    }
    ++roce;
    EXPECT_TRUE(d.flags & kFlagRoce);
    EXPECT_EQ(d.opcode, Num(e, "opcode"));
    EXPECT_EQ(d.dest_qp, Num(e, "qp"));
    EXPECT_EQ(d.psn, Num(e, "psn"));
    if (e.at("dma") == "-") {
      EXPECT_FALSE(d.flags & kFlagReth);
    } else {
      EXPECT_TRUE(d.flags & kFlagReth);
      EXPECT_EQ(d.dma_length, Num(e, "dma"));
    }
    EXPECT_EQ(d.pad_count, Num(e, "pad"));
    EXPECT_EQ(d.payload_len, Num(e, "plen"));
    EXPECT_EQ(static_cast<uint32_t>(d.l3), Num(e, "l3"));
    EXPECT_EQ(d.num_vlans, Num(e, "vlans"));
    EXPECT_EQ(ComputeIcrc(f.data(), d), Num(e, "icrc"));
    EXPECT_EQ(StoredIcrc(f.data(), d), Num(e, "icrc"));
    EXPECT_TRUE(VerifyIcrc(f.data(), d));
  }
  EXPECT_GE(roce, 140);
  EXPECT_GE(errors, 5);
}

}  // namespace
}  // namespace heddle::pkt
