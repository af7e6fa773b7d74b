// File: dataplane/lb/rewrite_corpus_main.cc
//
// lb_rewrite_corpus: random RoCEv2 frames with their entropy rewritten by lb::Rewrite() (the
// incremental ICRC update), for the scapy cross-check (tests/data/scapy_check_lb_rewrite.py).
// Every frame is also checked here against a full ICRC recompute; the tool fails on the first
// mismatch. One expectation line per frame:
//   i=3 l3=6 vlans=1 field=flow-label value=0x1c2d3 udp_csum=1 len=1122
//
//   lb_rewrite_corpus --pcap out.pcap --expect out.expect [--count 2000] [--seed 1]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "dataplane/lb/rewrite.h"
#include "dataplane/lb/rewrite_corpus.h"
#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/pcap_file.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: lb_rewrite_corpus --pcap FILE --expect FILE [--count N] [--seed S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace heddle;
  std::string pcap_path, expect_path;
  int count = 2000;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--pcap")) {
      pcap_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--expect")) {
      expect_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--count")) {
      count = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--seed")) {
      seed = std::strtoull(argv[i + 1], nullptr, 0);
    } else {
      return Usage();
    }
  }
  if (pcap_path.empty() || expect_path.empty() || count <= 0) return Usage();
  auto writer = pkt::PcapWriter::Open(pcap_path);
  if (!writer.ok()) {
    std::fprintf(stderr, "%s\n", writer.status().ToString().c_str());
    return 1;
  }
  std::FILE* expect = std::fopen(expect_path.c_str(), "w");
  if (expect == nullptr) {
    std::perror(expect_path.c_str());
    return 1;
  }

  std::mt19937_64 rng(seed);
  // The sizes the brief names first: 1 KiB and 4 KiB payloads, IPv4/IPv6, 0-2 VLAN tags.
  std::vector<std::vector<uint8_t>> frames;
  std::vector<bool> checksummed;
  for (bool v6 : {false, true}) {
    for (int vlans = 0; vlans <= 2; ++vlans) {
      for (uint32_t payload : {1024u, 4096u}) {
        pkt::FrameSpec f;
        f.ipv6 = v6;
        for (int v = 0; v < vlans; ++v) f.vlans.push_back({.tci = static_cast<uint16_t>(v + 1)});
        pkt::RoceSpec r;
        r.opcode = pkt::op::kWriteFirst;
        r.dma_length = 1 << 20;
        r.payload_len = payload;
        frames.push_back(pkt::BuildRoce(f, r));
        checksummed.push_back(false);
      }
    }
  }
  while (static_cast<int>(frames.size()) < count) {
    lb::RandomFrame rf = lb::MakeRandomFrame(rng);
    frames.push_back(std::move(rf.bytes));
    checksummed.push_back(rf.udp_checksum);
  }

  for (size_t i = 0; i < frames.size(); ++i) {
    std::vector<uint8_t>& f = frames[i];
    pkt::PacketDesc d;
    if (pkt::Parse(f.data(), f.size(), &d) != pkt::ParseError::kOk) {
      std::fprintf(stderr, "frame %zu does not parse\n", i);
      return 1;
    }
    const bool label = d.l3 == pkt::L3::kIpv6 && rng() % 3 == 0;
    const lb::EntropyField field =
        label ? lb::EntropyField::kIpv6FlowLabel : lb::EntropyField::kUdpSourcePort;
    const uint32_t value = static_cast<uint32_t>(rng() & (label ? 0xfffff : 0xffff));
    if (lb::Rewrite(f.data(), f.size(), d, lb::Path{.entropy = value}, field) ==
        lb::RewriteResult::kMalformed) {
      std::fprintf(stderr, "frame %zu: rewrite refused\n", i);
      return 1;
    }
    if (!pkt::VerifyIcrc(f.data(), d)) {
      std::fprintf(stderr, "frame %zu: incremental ICRC %08x != full recompute %08x\n", i,
                   pkt::StoredIcrc(f.data(), d), pkt::ComputeIcrc(f.data(), d));
      return 1;
    }
    if (auto s = writer->Write(i * 1000, f); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    std::fprintf(expect, "i=%zu l3=%d vlans=%d field=%s value=%#x udp_csum=%d len=%zu\n", i,
                 static_cast<int>(d.l3), static_cast<int>(d.num_vlans), lb::EntropyFieldName(field),
                 value, checksummed[i] ? 1 : 0, f.size());
  }
  if (auto s = writer->Close(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::fclose(expect);
  std::printf("%zu rewritten frames, incremental ICRC == full recompute on all\n", frames.size());
  return 0;
}
