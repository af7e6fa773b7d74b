// File: dataplane/lb/lb_fairness_main.cc
//
// lb_fairness: per-path byte shares and Jain's index for each balancer with and without PIN, on
// the WebSearch and AliStorage flow-size distributions (SimulateFairness(), fairness_sim.h). The
// table in docs/pin.md §6 is its output:
//   build/dataplane/lb/lb_fairness                       # 50 ms per row, seed 1
//   build/dataplane/lb/lb_fairness --send-share 1        # every message a SEND of unknown size
//   build/dataplane/lb/lb_fairness --threshold 16384 --duration-ms 20 --workload alistorage
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dataplane/lb/fairness_sim.h"

int main(int argc, char** argv) {
  using namespace heddle::lb;
  FairnessParams base;
  std::vector<Workload> workloads = {Workload::kWebSearch, Workload::kAliStorage};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--duration-ms") {
      base.duration_ns = std::strtoull(v, nullptr, 10) * 1'000'000;
    } else if (k == "--window-us") {
      base.window_ns = std::strtoull(v, nullptr, 10) * 1000;
    } else if (k == "--paths") {
      base.paths = static_cast<uint32_t>(std::atoi(v));
    } else if (k == "--qps") {
      base.qps = static_cast<uint32_t>(std::atoi(v));
    } else if (k == "--threshold") {
      base.threshold_bytes = std::strtoull(v, nullptr, 10);
    } else if (k == "--seed") {
      base.seed = std::strtoull(v, nullptr, 10);
    } else if (k == "--send-share") {
      base.send_share = std::atof(v);
    } else if (k == "--policy") {
      base.pin_policy =
          std::string(v) == "least-loaded" ? PinPolicy::kLeastLoaded : PinPolicy::kHash;
    } else if (k == "--crossing") {
      base.crossing =
          std::string(v) == "spray-rest" ? CrossingRule::kSprayRest : CrossingRule::kStayPinned;
    } else if (k == "--workload") {
      workloads = {std::string(v) == "alistorage" ? Workload::kAliStorage : Workload::kWebSearch};
    } else {
      std::fprintf(stderr,
                   "usage: lb_fairness [--duration-ms 50] [--window-us 100] [--paths 16] [--qps 64]"
                   " [--threshold 100000] [--seed 1] [--send-share 0] [--policy hash|least-loaded]"
                   " [--crossing stay-pinned|spray-rest] [--workload websearch|alistorage]\n");
      return 2;
    }
  }
  std::printf(
      "%u paths, %u QPs, host %.0f Gb/s, fabric load %.1f, MTU %u, threshold %llu B, %s pinning,"
      " crossing %s, %.0f %% SENDs, %llu ms per row, %llu us windows, seed %llu\n\n",
      base.paths, base.qps, base.host_gbps, base.fabric_load, base.mtu,
      static_cast<unsigned long long>(base.threshold_bytes), PinPolicyName(base.pin_policy),
      CrossingRuleName(base.crossing), 100 * base.send_share,
      static_cast<unsigned long long>(base.duration_ns / 1'000'000),
      static_cast<unsigned long long>(base.window_ns / 1000),
      static_cast<unsigned long long>(base.seed));
  std::printf(
      "| workload | balancer | PIN | J (run) | J (windows, mean) | J (windows, min) | J predicted |"
      " pinned bytes | ECN-marked |\n|---|---|---|---|---|---|---|---|---|\n");
  for (Workload w : workloads) {
    for (int k = 0; k < static_cast<int>(BalancerKind::kCount); ++k) {
      for (bool pin : {false, true}) {
        const auto kind = static_cast<BalancerKind>(k);
        if (kind == BalancerKind::kEcmp && pin) continue;  // pinned + ECMP is ECMP
        FairnessParams p = base;
        p.workload = w;
        p.balancer = kind;
        p.pin = pin;
        const FairnessResult r = SimulateFairness(p);
        // The prediction assumes sprayed packets land at random: not so for ECMP and flowlets.
        char predicted[16] = "n/a";
        if (kind != BalancerKind::kEcmp && kind != BalancerKind::kFlowlet) {
          std::snprintf(predicted, sizeof(predicted), "%.4f", r.jain_window_predicted);
        }
        std::printf("| %s | %s | %s | %.4f | %.4f | %.4f | %s | %.2f %% | %.2f %% |\n",
                    WorkloadName(w), BalancerKindName(kind), pin ? "on" : "off", r.jain_overall,
                    r.jain_window_mean, r.jain_window_min, predicted, 100 * r.pinned_byte_share,
                    100 * r.marked_share);
        std::fflush(stdout);
      }
    }
  }
  for (Workload w : workloads) {
    std::printf("\n%s: mean flow %.0f B; bytes in flows <= threshold (CDF): %.2f %%\n",
                WorkloadName(w), CdfMean(w),
                100 * CdfByteShareAtOrBelow(w, static_cast<double>(base.threshold_bytes)));
  }
  return 0;
}
