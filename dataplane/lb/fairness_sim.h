// File: dataplane/lb/fairness_sim.h
//
// A small, deterministic simulation of how evenly one host's bytes spread over the paths of a
// path set under a balancer, with and without PIN (docs/pin.md §6). It drives the real
// PinSelector with real frames and measures per-path byte shares and Jain's fairness index
// J = (Σx)² / (n·Σx²) — over the whole run and over short windows, where pinned flows hurt most.
//
// The model, on purpose small: `qps` QPs, each busy all the time with RDMA WRITEs (or SENDs of
// unknown size, `send_share`) whose sizes follow a flow-size CDF (WebSearch or AliStorage 2019,
// from the HPCC/ConWeave traffic generators); a packet of a random QP leaves every
// wire_bytes / host_gbps; each path is a fluid queue draining at host_gbps / (paths ·
// fabric_load), whose packets are ECN-marked above ecn_threshold_bytes; each packet is
// acknowledged rtt_ns plus its queueing delay later (CE echoed), which feeds REPS and the
// adaptive balancer. No switch, no loss, no retransmission, no congestion control.
//
//   FairnessParams p{.workload = Workload::kWebSearch, .balancer = BalancerKind::kRps};
//   FairnessResult r = SimulateFairness(p);   // r.jain_window_mean, r.pinned_byte_share, ...
//
// Off the hot path (tests, lb_fairness, docs). Deterministic under `seed`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/lb/balancer.h"
#include "dataplane/lb/pin.h"

namespace heddle::lb {

enum class Workload : uint8_t { kWebSearch, kAliStorage };
const char* WorkloadName(Workload w);  // "websearch", "alistorage"

// (size in bytes, cumulative probability) points; sizes are uniform inside each interval.
std::span<const std::pair<double, double>> WorkloadCdf(Workload w);
// Mean size of the CDF (bytes), and the share of bytes in flows of at most `threshold` bytes.
double CdfMean(Workload w);
double CdfByteShareAtOrBelow(Workload w, double threshold);

struct FairnessParams {
  Workload workload = Workload::kWebSearch;
  BalancerKind balancer = BalancerKind::kRps;
  bool pin = true;
  PinPolicy pin_policy = PinPolicy::kHash;
  CrossingRule crossing = CrossingRule::kStayPinned;
  uint64_t threshold_bytes = 100'000;
  double send_share = 0;  // share of messages that are SENDs (size unknown until the end)
  uint32_t paths = 16;
  uint32_t qps = 64;
  uint32_t mtu = 4096;
  double host_gbps = 400;
  double fabric_load = 0.8;
  uint64_t duration_ns = 50'000'000;
  uint64_t window_ns = 100'000;
  uint64_t rtt_ns = 8'000;
  uint64_t ecn_threshold_bytes = 64 * 1024;
  uint64_t seed = 1;
};

struct FairnessResult {
  std::vector<uint64_t> path_bytes;
  uint64_t packets = 0;
  uint64_t messages = 0;
  double jain_overall = 0;      // over the whole run
  double jain_window_mean = 0;  // mean over windows of window_ns
  double jain_window_min = 0;
  // Jain's index the analysis of docs/pin.md §6 predicts for each window from what it placed
  // (sprayed packets and each pinned message's bytes in the window, placed at random), averaged.
  double jain_window_predicted = 0;
  double pinned_byte_share = 0;  // bytes sent pinned / all bytes
  double marked_share = 0;       // packets ECN-marked on their path
};

FairnessResult SimulateFairness(const FairnessParams& p);

// Jain's fairness index of `x`: 1 when all equal, 1/n when one takes all; 1 for all zeros.
double JainIndex(std::span<const double> x);

}  // namespace heddle::lb
