// File: dataplane/pkt/pcap_file_test.cc
#include "dataplane/pkt/pcap_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "dataplane/pkt/builder.h"

namespace heddle::pkt {
namespace {

class PcapFileTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/heddle_pcap_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& p : created_) std::remove(p.c_str());
    rmdir(dir_.c_str());
  }
  std::string Path(const std::string& name) {
    created_.push_back(dir_ + "/" + name);
    return created_.back();
  }
  static std::vector<uint8_t> Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  }
  std::string dir_;
  std::vector<std::string> created_;
};

TEST_F(PcapFileTest, RoundTripNanoAndMicro) {
  FrameSpec f;
  RoceSpec r;
  r.opcode = op::kWriteOnly;
  r.payload_len = 100;
  const std::vector<uint8_t> roce = BuildRoce(f, r);
  const std::vector<uint8_t> arp = BuildArpRequest(f);
  for (PcapPrecision p : {PcapPrecision::kNano, PcapPrecision::kMicro}) {
    const std::string path = Path(p == PcapPrecision::kNano ? "n.pcap" : "u.pcap");
    auto w = PcapWriter::Open(path, p);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->Write(1700000000123456789ull, roce).ok());
    ASSERT_TRUE(w->Write(1700000001000001000ull, arp).ok());
    ASSERT_TRUE(w->Close().ok());
    const std::vector<uint8_t> raw = Slurp(path);
    ASSERT_EQ(raw.size(), 24u + 16u + roce.size() + 16u + arp.size());
    EXPECT_EQ(raw[0], p == PcapPrecision::kNano ? 0x4d : 0xd4);
    EXPECT_EQ(raw[20], 1);  // DLT_EN10MB
    auto recs = ReadPcapFile(path);
    ASSERT_TRUE(recs.ok()) << recs.status();
    ASSERT_EQ(recs->size(), 2u);
    EXPECT_EQ((*recs)[0].data, roce);
    EXPECT_EQ((*recs)[0].orig_len, roce.size());
    EXPECT_EQ((*recs)[1].data, arp);
    EXPECT_EQ((*recs)[0].timestamp_ns,
              p == PcapPrecision::kNano ? 1700000000123456789ull : 1700000000123456000ull);
    EXPECT_EQ((*recs)[1].timestamp_ns, 1700000001000001000ull);
  }
}

TEST_F(PcapFileTest, SnapLengthCutsAndKeepsOrigLen) {
  const std::string path = Path("snap.pcap");
  auto w = PcapWriter::Open(path, PcapPrecision::kNano, 64);
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> big(200, 0xab);
  ASSERT_TRUE(w->Write(0, big).ok());
  ASSERT_TRUE(w->Close().ok());
  EXPECT_FALSE(w->Write(0, big).ok());  // closed
  auto recs = ReadPcapFile(path);
  ASSERT_TRUE(recs.ok());
  EXPECT_EQ((*recs)[0].data.size(), 64u);
  EXPECT_EQ((*recs)[0].orig_len, 200u);
}

TEST_F(PcapFileTest, BigEndianFileReads) {
  // A big-endian microsecond header and one 4-byte record.
  const std::vector<uint8_t> b = {0xa1, 0xb2, 0xc3, 0xd4, 0,    2, 0, 4, 0, 0, 0, 0, 0, 0, 0,
                                  0,    0,    0,    0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0,
                                  0,    7,    0,    0,    0,    4, 0, 0, 0, 4, 1, 2, 3, 4};
  auto recs = ParsePcap(b);
  ASSERT_TRUE(recs.ok()) << recs.status();
  ASSERT_EQ(recs->size(), 1u);
  EXPECT_EQ((*recs)[0].timestamp_ns, 5000007000ull);
  EXPECT_EQ((*recs)[0].data, (std::vector<uint8_t>{1, 2, 3, 4}));
}

TEST_F(PcapFileTest, CorruptFilesAreErrors) {
  const std::string path = Path("ok.pcap");
  std::vector<PcapRecord> recs(3);
  for (size_t i = 0; i < recs.size(); ++i) {
    recs[i].timestamp_ns = i * 1000;
    recs[i].data.assign(60 + i, static_cast<uint8_t>(i));
  }
  ASSERT_TRUE(WritePcapFile(path, recs).ok());
  const std::vector<uint8_t> good = Slurp(path);
  ASSERT_TRUE(ParsePcap(good).ok());
  // Every truncation that does not fall on a record boundary is an error.
  size_t boundaries[] = {24, 24 + 16 + 60, 24 + 16 + 60 + 16 + 61};
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    const bool boundary = n == boundaries[0] || n == boundaries[1] || n == boundaries[2];
    EXPECT_EQ(ParsePcap(cut).ok(), boundary) << n;
  }
  struct Edit {
    const char* name;
    size_t off;
    uint8_t value;
    const char* message;
    size_t off2 = 0;  // optional second edit (0: none)
    uint8_t value2 = 0;
  };
  const Edit kEdits[] = {
      {"bad magic", 0, 0x00, "bad magic"},
      {"link type raw ip", 20, 101, "not Ethernet"},
      {"caplen beyond file", 24 + 9, 0x10, "left in the file", 24 + 13, 0x10},
      {"caplen > origlen", 24 + 8, 61, "original length"},
      {"caplen huge", 24 + 11, 0x7f, "exceeds"},
      {"nanoseconds >= 1e9", 24 + 7, 0x7f, "out of range"},
  };
  for (const Edit& e : kEdits) {
    std::vector<uint8_t> b = good;
    b[e.off] = e.value;
    if (e.off2 != 0) b[e.off2] = e.value2;
    auto r = ParsePcap(b);
    ASSERT_FALSE(r.ok()) << e.name;
    EXPECT_NE(r.status().message().find(e.message), std::string::npos)
        << e.name << ": " << r.status();
  }
  EXPECT_FALSE(ReadPcapFile(dir_ + "/missing.pcap").ok());
  EXPECT_FALSE(PcapWriter::Open(dir_ + "/no/such/dir.pcap").ok());
}

}  // namespace
}  // namespace heddle::pkt
