// File: dataplane/pkt/builder_corpus_main.cc
//
// pkt_builder_corpus: writes a varied set of builder frames (every RC/UC/UD opcode, the CNP, some
// kOther opcodes, 0-2 VLAN tags, IPv4 with and without options, IPv6, payloads of 0-40 bytes, plus
// ARP and plain UDP) for the independent decoders to check: a pcap and an expectation file in the
// format of tests/data/scapy_roce_util.py, filled from the specs given to the builder (not from
// Parse()). With --seed-dir it also writes every frame and a few truncations of it as separate
// files, the seed corpus for the pkt_parse fuzz target.
//
//   pkt_builder_corpus --pcap OUT.pcap --expect OUT.expect [--seed-dir DIR]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/pcap_file.h"

namespace heddle::pkt {
namespace {

int Main(int argc, char** argv) {
  std::string pcap_path, expect_path, seed_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--pcap") {
      pcap_path = argv[i + 1];
    } else if (flag == "--expect") {
      expect_path = argv[i + 1];
    } else if (flag == "--seed-dir") {
      seed_dir = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (pcap_path.empty() || expect_path.empty()) {
    std::fprintf(stderr, "usage: %s --pcap OUT.pcap --expect OUT.expect [--seed-dir DIR]\n",
                 argv[0]);
    return 2;
  }

  std::vector<uint8_t> opcodes;
  for (int o = 0; o < 256; ++o) {
    if (DescribeOpcode(static_cast<uint8_t>(o)).roce_class != RoceClass::kOther) {
      opcodes.push_back(static_cast<uint8_t>(o));
    }
  }
  for (uint8_t o : {0x15, 0x2c, 0x4a, 0x60, 0xa3, 0xc7}) opcodes.push_back(o);

  std::vector<PcapRecord> recs;
  std::vector<std::string> lines;
  auto add = [&](std::vector<uint8_t> frame, std::string line) {
    PcapRecord r;
    r.timestamp_ns = 1700000000000000000ull + recs.size() * 1000;
    r.orig_len = static_cast<uint32_t>(frame.size());
    r.data = std::move(frame);
    lines.push_back(absl::StrFormat("i=%d %s", recs.size(), line));
    recs.push_back(std::move(r));
  };

  int i = 0;
  for (uint8_t opcode : opcodes) {
    for (int shape = 0; shape < 5; ++shape) {
      FrameSpec f;
      const int vlans = shape % 3;
      if (vlans == 2) f.vlans.push_back({kEtherTypeQinQ, 5 << 13 | 300});
      if (vlans >= 1) f.vlans.push_back({kEtherTypeVlan, static_cast<uint16_t>(3 << 13 | i)});
      f.ipv6 = shape == 3 || shape == 4;
      if (shape == 1) f.ipv4_options = {0x94, 0x04, 0x00, 0x00};
      f.dscp = static_cast<uint8_t>(i % 64);
      f.ecn = static_cast<uint8_t>(i % 4);
      f.flow_label = static_cast<uint32_t>(i * 977);
      f.ip_id = static_cast<uint16_t>(i);
      f.ttl = static_cast<uint8_t>(64 - i % 3);
      f.udp_sport = static_cast<uint16_t>(0xc000 + i);
      f.src_ip4 = {10, 2, 0, 1};
      f.dst_ip4 = {10, 2, static_cast<uint8_t>(i % 250), 2};
      RoceSpec r;
      r.opcode = opcode;
      r.dest_qp = static_cast<uint32_t>(0x200 + i * 5);
      r.psn = static_cast<uint32_t>((0xfffff8 + i) & 0xffffff);
      r.pkey = static_cast<uint16_t>(0xffff - i);
      r.ack_req = i % 2 == 1;
      r.solicited = i % 3 == 0;
      r.fecn = i % 5 == 0;
      r.becn = i % 7 == 0;
      r.va = 0x7f0000000000ull + i * 0x1000ull;
      r.rkey = 0x100 + i;
      r.dma_length = static_cast<uint32_t>(0x400 * (i + 1));
      r.syndrome = static_cast<uint8_t>(i % 2 ? 0x1f : 0x60);
      r.msn = static_cast<uint32_t>(i);
      r.imm = 0x1badcafe;
      r.inval_rkey = 0xc0ffee;
      r.qkey = 0x80010000;
      r.src_qp = 0x123;
      r.swap_add = 1;
      r.orig_data = 0x1234;
      // Only data-carrying opcodes get a payload; ACKs, atomics, READ requests and CNPs have none.
      const OpcodeInfo info = DescribeOpcode(opcode);
      const bool data =
          info.roce_class == RoceClass::kSend || info.roce_class == RoceClass::kWrite ||
          info.roce_class == RoceClass::kReadResponse || info.roce_class == RoceClass::kOther;
      r.payload_len = data ? static_cast<uint32_t>((i * 13) % 41) : 0;
      r.payload_seed = static_cast<uint8_t>(i);
      std::vector<uint8_t> frame = BuildRoce(f, r);
      const uint32_t pad = (4 - r.payload_len % 4) % 4;
      const size_t icrc_off = RoceFrameLen(f, opcode, r.payload_len) - kIcrcLen;
      uint32_t icrc = 0;
      for (int k = 0; k < 4; ++k) icrc |= static_cast<uint32_t>(frame[icrc_off + k]) << (8 * k);
      add(std::move(frame),
          absl::StrFormat(
              "err=ok cls=%s opcode=0x%02x qp=0x%06x psn=%d dma=%s pad=%d plen=%d l3=%d vlans=%d "
              "icrc=0x%08x",
              RoceClassName(info.roce_class), opcode, r.dest_qp, r.psn,
              (info.flags & kFlagReth) ? absl::StrFormat("%d", r.dma_length) : "-", pad,
              r.payload_len + pad, f.ipv6 ? 6 : 4, vlans, icrc));
      ++i;
    }
  }
  FrameSpec f;
  add(BuildArpRequest(f), "err=ok cls=none");
  f.udp_dport = 47000;  // no dissector claims it
  const std::vector<uint8_t> dns(40, 'q');
  add(BuildUdp(f, dns), "err=ok cls=none");
  f.ipv6 = true;
  f.vlans = {{kEtherTypeVlan, 9}};
  f.udp_dport = 4792;
  add(BuildUdp(f, dns), "err=ok cls=none");

  absl::Status s = WritePcapFile(pcap_path, recs);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::ofstream out(expect_path);
  for (const std::string& l : lines) out << l << "\n";
  if (!out) {
    std::fprintf(stderr, "%s: write failed\n", expect_path.c_str());
    return 1;
  }
  if (!seed_dir.empty()) {
    for (size_t n = 0; n < recs.size(); ++n) {
      const std::vector<uint8_t>& fr = recs[n].data;
      // The whole frame and cuts inside the headers and the ICRC.
      for (size_t cut : {fr.size(), fr.size() - 1, fr.size() / 2, size_t{50}}) {
        if (cut > fr.size()) continue;
        if (n % 3 != 0 && cut != fr.size()) continue;  // keep the corpus small
        const std::string path = absl::StrFormat("%s/builder-%03d-%d", seed_dir, n, cut);
        std::ofstream seed(path, std::ios::binary);
        seed.write(reinterpret_cast<const char*>(fr.data()), static_cast<std::streamsize>(cut));
      }
    }
  }
  std::printf("wrote %zu frames to %s\n", recs.size(), pcap_path.c_str());
  return 0;
}

}  // namespace
}  // namespace heddle::pkt

int main(int argc, char** argv) { return heddle::pkt::Main(argc, argv); }
