// File: control/collective/topology.h
//
// The network a collective runs on, as the compiler sees it (docs/optiflow.md §4): ranks (which
// hold data) and optionally forwarding-only nodes (switches: no buffers, no data), joined by
// directed links with a bandwidth and a latency. Ranks are nodes 0..ranks-1 in the order given;
// switches follow. A WAN between regional gateways is ranks only, usually a full mesh; a Nüwa
// fabric (control/nuwa) gives hosts as ranks and its switches as forwarding nodes.
//
// YAML form (docs/optiflow.md §4):
//   ranks: [eu, us, asia]              # names; or `ranks: 8` for r0..r7
//   switches: [tor0]                   # optional forwarding-only nodes
//   default: {bandwidth: 10Gbit, latency: 30ms}   # every rank pair not listed, both directions
//   links:
//     - {between: [eu, us], bandwidth: 2.5Gbit, latency: 40ms}   # both directions
//     - {from: us, to: asia, bandwidth: 1Gbit}                   # one direction
// Bandwidths take bit/s (`Gbit`, `Mbit`, `kbit`, `bit`) or bytes/s (`GB/s`, `MB/s`); latencies
// `s`, `ms`, `us`, `ns`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heddle::collective {

struct Link {
  uint32_t src = 0;  // node index
  uint32_t dst = 0;
  double bytes_per_second = 0;  // > 0
  double latency_s = 0;         // ≥ 0, one way

  friend bool operator==(const Link&, const Link&) = default;
};

struct Topology {
  std::vector<std::string> nodes;  // ranks first, then switches; unique names
  uint32_t ranks = 0;
  std::vector<Link> links;  // directed; at most one per (src, dst)

  friend bool operator==(const Topology&, const Topology&) = default;
};

}  // namespace heddle::collective
