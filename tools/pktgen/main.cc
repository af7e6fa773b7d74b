// File: tools/pktgen/main.cc
//
// heddle-pktgen: writes deterministic RoCEv2 traces (classic pcap, nanosecond timestamps) for the
// dataplane's tests, benchmarks and demos. See trace.h for what each mix contains.
//
//   heddle-pktgen --out host.pcap [--reverse uplink.pcap] --mix demo|small|1k [--packets N]
//                 [--qps Q] [--seed S] [--ipv6] [--vlan ID] [--malformed N]
//
// The checked-in demo pair tests/data/pkt_demo_host.pcap and tests/data/pkt_demo_uplink.pcap
// comes from (run in the repository root after building build-pkt):
//
//   build-pkt/tools/pktgen/heddle-pktgen --mix demo --packets 300 --qps 8 --seed 8
//       --out tests/data/pkt_demo_host.pcap --reverse tests/data/pkt_demo_uplink.pcap
//
// (one command line; split here for width).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "dataplane/pkt/pcap_file.h"
#include "tools/pktgen/trace.h"

int main(int argc, char** argv) {
  CLI::App app{"heddle-pktgen: write RoCEv2 traffic traces (pcap) for tests and benchmarks"};
  std::string out, reverse, mix_name = "demo";
  heddle::pktgen::TraceOptions o;
  app.add_option("--out", out, "host -> uplink trace (pcap)")->required();
  app.add_option("--reverse", reverse, "also write the uplink -> host trace (pcap)");
  app.add_option("--mix", mix_name,
                 "demo: realistic multi-QP WRITE/READ/SEND/UD/atomic mix; small: 60-byte "
                 "frames; 1k: 1024-byte WRITE middle frames")
      ->capture_default_str();
  app.add_option("--packets", o.packets, "host -> uplink frames")->capture_default_str();
  app.add_option("--qps", o.qps, "RC queue pairs")->capture_default_str();
  app.add_option("--seed", o.seed, "random seed; a seed always gives the same bytes")
      ->capture_default_str();
  app.add_flag("--ipv6", o.ipv6, "IPv6 instead of IPv4");
  app.add_option("--vlan", o.vlan, "802.1Q VLAN ID (PCP 3) on every frame");
  app.add_option("--malformed", o.malformed,
                 "replace N host frames with malformed ones (bad lengths, BTH version, ICRC)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<heddle::pktgen::Mix> mix = heddle::pktgen::ParseMix(mix_name);
  if (!mix.ok()) {
    std::fprintf(stderr, "heddle-pktgen: %s\n", std::string(mix.status().message()).c_str());
    return 2;
  }
  o.mix = *mix;
  absl::StatusOr<heddle::pktgen::Trace> t = heddle::pktgen::GenerateTrace(o);
  if (!t.ok()) {
    std::fprintf(stderr, "heddle-pktgen: %s\n", std::string(t.status().message()).c_str());
    return 2;
  }
  absl::Status s = heddle::pkt::WritePcapFile(out, t->host);
  if (s.ok() && !reverse.empty()) s = heddle::pkt::WritePcapFile(reverse, t->uplink);
  if (!s.ok()) {
    std::fprintf(stderr, "heddle-pktgen: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("%s: %zu frames", out.c_str(), t->host.size());
  if (!reverse.empty()) std::printf("; %s: %zu frames", reverse.c_str(), t->uplink.size());
  std::printf("\n");
  return 0;
}
