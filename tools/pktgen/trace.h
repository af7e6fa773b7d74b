// File: tools/pktgen/trace.h
//
// The trace generator behind heddle-pktgen: deterministic (seeded) RoCEv2 traffic for one host,
// as two pcap streams: host -> uplink (requests and data) and uplink -> host (ACKs, READ
// responses, atomic ACKs, CNPs). PSNs are consistent per QP in both directions: requests use the
// requester's PSN space (a READ request reserves one PSN per response packet), responses echo it.
//
//   heddle::pktgen::TraceOptions o;  o.mix = heddle::pktgen::Mix::kDemo;  o.packets = 400;
//   absl::StatusOr<heddle::pktgen::Trace> t = heddle::pktgen::GenerateTrace(o);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/pkt/pcap_file.h"

namespace heddle::pktgen {

enum class Mix {
  kDemo,   // realistic: WRITE/READ/SEND/UD/atomics over several QPs, 1 KiB or 4 KiB MTU, ARP/UDP
  kSmall,  // minimum-size frames: zero-length RC/UC SEND only, 60 bytes with IPv4 and no tag
  k1k,     // 1024-byte frames: one long RDMA WRITE per QP, WRITE middle packets
};

// "demo" -> kDemo; error naming the accepted values otherwise.
absl::StatusOr<Mix> ParseMix(const std::string& name);

struct TraceOptions {
  Mix mix = Mix::kDemo;
  int packets = 1000;  // host -> uplink frames, malformed ones included
  int qps = 8;         // RC queue pairs (demo also uses one UD QP)
  uint64_t seed = 1;
  bool ipv6 = false;
  int vlan = -1;      // 802.1Q VID (PCP 3) on every frame; -1: untagged
  int malformed = 0;  // host frames replaced by malformed ones (bad lengths, BTH version, ICRC)
  uint64_t start_ns = 1700000000000000000ull;
};

struct Trace {
  std::vector<pkt::PcapRecord> host;    // host -> uplink
  std::vector<pkt::PcapRecord> uplink;  // uplink -> host, in time order
};

absl::StatusOr<Trace> GenerateTrace(const TraceOptions& options);

}  // namespace heddle::pktgen
