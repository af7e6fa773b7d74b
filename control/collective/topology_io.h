// File: control/collective/topology_io.h
//
// Reading, checking, fingerprinting and writing the topologies of topology.h, and building one
// from a Nüwa fabric (docs/optiflow-compiler.md §1).
//
//   HEDDLE_ASSIGN_OR_RETURN(Topology t, ParseTopology(yaml_text));
//   uint64_t digest = TopologyDigest(t);       // what a schedule records it was compiled for
//   std::string canonical = TopologyToYaml(t);  // every directed link explicit; parses back to t
//
// Errors name the place and the key ("topology:4:5: links[1].bandwidth: ...") and say what to
// write instead. yaml-cpp's exceptions never escape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "control/collective/topology.h"
#include "control/nuwa/fabric.h"

namespace YAML {
class Node;
}

namespace heddle::collective {

// Limits: how many nodes (ranks and switches) and directed links a topology may have.
inline constexpr uint32_t kMaxTopologyNodes = 1 << 16;
inline constexpr uint64_t kMaxTopologyLinks = uint64_t{1} << 20;  // a full mesh of 1024 ranks

// The YAML form documented in topology.h. Validates the result (ValidateTopology).
absl::StatusOr<Topology> TopologyFromYaml(const YAML::Node& node);
// Parses one YAML document and calls TopologyFromYaml.
absl::StatusOr<Topology> ParseTopology(std::string_view yaml_text);

// Unique, non-empty names without whitespace; 1..kMaxRanks ranks; links between known, distinct
// nodes with a positive finite bandwidth and a finite latency ≥ 0; at most one link per
// (src, dst); every rank reaches every other rank (possibly through other nodes).
absl::Status ValidateTopology(const Topology& t);

// FNV-1a (64 bit) over the rank count, the names and the links sorted by (src, dst), with
// doubles hashed by their bits: the same on every host and build, independent of link order.
uint64_t TopologyDigest(const Topology& t);

// Canonical YAML: names, then every directed link as {from, to, bandwidth: <bytes>B/s,
// latency: <seconds>s} with the numbers written exactly. ParseTopology(TopologyToYaml(t)) == t
// for a valid t (links keep their order).
std::string TopologyToYaml(const Topology& t);

// A Nüwa fabric: hosts are the ranks (in host order, named as nuwa::NodeName does), every
// switch of every plane a forwarding node, every live fabric link both ways. A tier's bandwidth
// is fabric.link_gbps[tier] when set, else `bytes_per_second`; every link has `latency_s`.
// Failed links and switches are left out. Fabrics of more than kMaxRanks hosts or
// kMaxTopologyNodes nodes are refused.
absl::StatusOr<Topology> TopologyFromFabric(const nuwa::Fabric& f, double bytes_per_second,
                                            double latency_s);

// "10Gbit", "2.5 Gbit/s", "100MB/s", "1250000000B/s" → bytes per second; "30ms", "1.5s", "0"
// → seconds. Exposed for tests and for tools that take these values on their command line.
absl::StatusOr<double> ParseBandwidth(std::string_view text);
absl::StatusOr<double> ParseLatency(std::string_view text);

}  // namespace heddle::collective
