// File: tools/heddle-sim/heddle_sim_main.cc
//
// heddle-sim: the packet-level fabric simulator's command line (docs/sim.md §5).
//
//   heddle-sim --fabric deploy/examples/fabrics/leaf-spine.yaml --workload websearch --load 0.5
//              --duration 5ms --lb rps --pin on --storm off --transport gbn --seed 1 --out out/
//
// Prints the report (FCT slowdown by size bucket, uplink balance, drops, events/s and delivered
// packets/s) on stdout, a progress bar with ETA on stderr while it runs (when stderr is a
// terminal, or with --progress), and with --out the CSV files of report.h.
// Exit codes: 0 done, 2 bad input.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "control/nuwa/dsl.h"
#include "tools/heddle-sim/lib/report.h"
#include "tools/heddle-sim/lib/simulator.h"

namespace {

using heddle::sim::SimConfig;

// "5ms", "200us", "1.5s", "750ns", "1000" (ns).
bool ParseDuration(const std::string& text, uint64_t* ns) {
  struct Unit {
    const char* suffix;
    double scale;
  };
  for (const Unit u : {Unit{"ns", 1}, Unit{"us", 1e3}, Unit{"ms", 1e6}, Unit{"s", 1e9}}) {
    const std::string suffix = u.suffix;
    if (text.size() > suffix.size() && text.ends_with(suffix)) {
      double v;
      if (!absl::SimpleAtod(text.substr(0, text.size() - suffix.size()), &v) || v < 0) {
        return false;
      }
      *ns = static_cast<uint64_t>(v * u.scale + 0.5);
      return true;
    }
  }
  double v;
  if (!absl::SimpleAtod(text, &v) || v < 0) return false;
  *ns = static_cast<uint64_t>(v + 0.5);
  return true;
}

bool OnOff(const std::string& v) { return v == "on"; }

int Fail(const std::string& message) {
  std::cerr << "heddle-sim: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"heddle-sim: packet-level fabric simulator on heddle's STORM, PIN and Nüwa code"};
  std::string fabric_path, workload = "websearch", duration = "1ms", max_time, out_dir;
  std::string lb_name = "ecmp", pin = "off", storm = "off", storm_mode = "auto";
  std::string transport = "gbn", ecn = "on", pfc = "off", trim = "off", qp_per_message = "off",
              cc = "none", flow_unit = "request";
  std::string rto = "100us", ops = "write=1", storm_guard = "on";
  double load = 0.5, latency_ns = 1000, link_gbps = 0;
  uint64_t seed = 1, pin_threshold = 0;
  uint32_t unknown_size = heddle::storm::kUnknownSizeLowest;
  uint32_t mtu = 4096, levels = 4, buffer_pkts = 100, kmin = 25, kmax = 76, window = 0;
  uint32_t qps_per_pair = 1, incast_senders = 0, incast_receiver = 0;
  uint64_t incast_size = 500'000;
  std::string incast_period = "0";
  bool progress = false, quiet = false;
  std::vector<std::string> degraded;
  std::string collective = "none", compute_gap = "0";
  uint32_t collective_hosts = 0, iterations = 1;
  uint64_t collective_bytes = 64 << 20;
  app.add_option("--fabric", fabric_path, "fabric description (Nüwa DSL, docs/nuwa.md)")
      ->required();
  app.add_option("--workload", workload,
                 "websearch | hadoop | alistorage | googlerpc | a CDF file | none");
  app.add_option("--load", load, "Poisson load per host, share of its link rate");
  app.add_option("--duration", duration, "arrivals stop after this (e.g. 5ms)");
  app.add_option("--max-time", max_time, "end the run here even if flows remain (default 20x)");
  app.add_option("--lb", lb_name, "ecmp | rps | round-robin | flowlet | reps | adaptive");
  app.add_option("--pin", pin, "on | off")->check(CLI::IsMember({"on", "off"}));
  app.add_option("--pin-threshold", pin_threshold, "bytes; 0: one bandwidth-delay product");
  app.add_option("--flow-unit", flow_unit, "request | qp")->check(CLI::IsMember({"request", "qp"}));
  app.add_option("--storm", storm, "on | off")->check(CLI::IsMember({"on", "off"}));
  app.add_option("--ops", ops,
                 "the Poisson workload's RDMA operations, e.g. write=0.6,read=0.3,send=0.1 "
                 "(READs need --transport gbn)");
  app.add_option("--storm-guard", storm_guard,
                 "on | off: STORM's fabric guard and READ response window (per-message mode)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--storm-mode", storm_mode, "per-message | per-packet | auto (by transport)")
      ->check(CLI::IsMember({"per-message", "per-packet", "auto"}));
  app.add_option("--levels", levels, "priority levels (queues), 1..8");
  app.add_option("--storm-unknown-size", unknown_size,
                 "bytes: the size a request of unknown size (SEND, READ response stream without "
                 "a join) is levelled as in per-message mode; default above every cutoff");
  app.add_option("--transport", transport, "gbn | sr")->check(CLI::IsMember({"gbn", "sr"}));
  app.add_option("--window-pkts", window, "packets in flight per QP; 0: one base RTT");
  app.add_option("--rto", rto, "retransmission timeout");
  app.add_option("--qps-per-pair", qps_per_pair, "QPs per (source, destination)");
  app.add_option("--qp-per-message", qp_per_message,
                 "on | off: every message on a QP of its own (a connection per flow)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--mtu", mtu, "payload bytes per packet");
  app.add_option("--latency-ns", latency_ns, "one-way latency of every link");
  app.add_option("--link-gbps", link_gbps, "override every tier's link speed");
  app.add_option("--buffer-pkts", buffer_pkts, "egress buffer per switch port, MTU packets");
  app.add_option("--ecn", ecn, "on | off")->check(CLI::IsMember({"on", "off"}));
  app.add_option("--ecn-kmin-pkts", kmin, "ECN marking starts above this queue (packets)");
  app.add_option("--ecn-kmax-pkts", kmax, "every packet marked from this queue (packets)");
  app.add_option("--pfc", pfc, "on | off")->check(CLI::IsMember({"on", "off"}));
  app.add_option("--trim", trim, "on | off: switches cut what does not fit to its header (NAKed)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--cc", cc,
                 "congestion control: none | dcqcn (rate, CNPs) | ecn-window (DCTCP-like window)")
      ->check(CLI::IsMember({"none", "dcqcn", "ecn-window"}));
  app.add_option("--incast-senders", incast_senders, "add an incast of N senders (0: none)");
  app.add_option("--incast-receiver", incast_receiver, "the incast's receiver host");
  app.add_option("--incast-size", incast_size, "bytes per incast sender");
  app.add_option("--incast-period", incast_period, "repeat the incast (0: once)");
  app.add_option("--degraded-link", degraded,
                 "NODE:UP_PORT[:GBPS[:EXTRA_LATENCY_NS]], e.g. leaf[0]:0:100:0 (repeatable)");
  app.add_option("--collective", collective,
                 "training traffic: none | ring (all-reduce) | alltoall, with --workload or alone")
      ->check(CLI::IsMember({"none", "ring", "alltoall"}));
  app.add_option("--collective-hosts", collective_hosts,
                 "hosts in the collective, spread over the fabric (0: all)");
  app.add_option("--collective-bytes", collective_bytes, "bytes per host per iteration");
  app.add_option("--iterations", iterations, "collective iterations");
  app.add_option("--compute-gap", compute_gap, "compute time between iterations (e.g. 20us)");
  app.add_option("--seed", seed, "random seed; the same seed gives the same run");
  app.add_option("--out", out_dir, "write fct.csv, summary.csv, uplinks.csv, run.csv here");
  app.add_flag("--progress", progress, "progress bar even when stderr is no terminal");
  app.add_flag("--quiet", quiet, "no progress bar");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  absl::StatusOr<heddle::nuwa::Fabric> fabric = heddle::nuwa::LoadFabricFile(fabric_path);
  if (!fabric.ok()) return Fail(std::string(fabric.status().message()));
  if (link_gbps > 0) {
    for (int t = 1; t <= fabric->shape.tiers; ++t) fabric->link_gbps[t] = link_gbps;
  }

  SimConfig c;
  c.seed = seed;
  c.mtu = mtu;
  c.link_latency_ns = latency_ns;
  const uint64_t pkt = uint64_t{mtu} + c.header_bytes;
  c.buffer_bytes = buffer_pkts * pkt;
  c.ecn = OnOff(ecn);
  c.ecn_kmin_bytes = kmin * pkt;
  c.ecn_kmax_bytes = kmax * pkt;
  c.pfc = OnOff(pfc);
  c.trim = OnOff(trim);
  c.pfc_xoff_bytes = buffer_pkts * pkt * 2 / 5;
  c.pfc_xon_bytes = buffer_pkts * pkt * 3 / 10;
  c.dcqcn = cc == "dcqcn";
  c.ecn_window = cc == "ecn-window";
  c.transport = transport == "gbn" ? heddle::sim::Transport::kGoBackN
                                   : heddle::sim::Transport::kSelectiveRepeat;
  c.window_packets = window;
  c.qps_per_pair = qps_per_pair;
  c.qp_per_message = OnOff(qp_per_message);
  if (!ParseDuration(duration, &c.duration_ns) || c.duration_ns == 0) {
    return Fail(absl::StrCat("--duration ", duration, ": give a time such as 5ms or 200us"));
  }
  if (!max_time.empty() && !ParseDuration(max_time, &c.max_time_ns)) {
    return Fail(absl::StrCat("--max-time ", max_time, ": give a time such as 50ms"));
  }
  if (!ParseDuration(rto, &c.rto_ns) || c.rto_ns == 0) {
    return Fail(absl::StrCat("--rto ", rto, ": give a time such as 100us"));
  }
  uint64_t period_ns = 0;
  if (!ParseDuration(incast_period, &period_ns)) {
    return Fail(absl::StrCat("--incast-period ", incast_period, ": give a time such as 100us"));
  }
  for (const std::string& d : degraded) {
    std::vector<std::string> f = absl::StrSplit(d, ':');
    SimConfig::Degraded link;
    uint32_t port = 0;
    bool ok = f.size() >= 2 && f.size() <= 4 && absl::SimpleAtoi(f[1], &port);
    link.lower = f[0];
    link.up_port = port;
    if (ok && f.size() >= 3) ok = absl::SimpleAtod(f[2], &link.gbps);
    if (ok && f.size() == 4) ok = absl::SimpleAtod(f[3], &link.extra_latency_ns);
    if (!ok) {
      return Fail(
          absl::StrCat("--degraded-link ", d,
                       ": give NODE:UP_PORT[:GBPS[:EXTRA_LATENCY_NS]], e.g. leaf[0]:0:100"));
    }
    c.degraded.push_back(link);
  }
  c.storm = OnOff(storm);
  c.storm_fabric_guard = OnOff(storm_guard);
  absl::StatusOr<heddle::sim::OpMix> mix = heddle::sim::ParseOpMix(ops);
  if (!mix.ok()) return Fail(absl::StrCat("--", mix.status().message()));
  c.ops = *mix;
  c.levels.levels = static_cast<int>(levels);
  c.levels.control_level = static_cast<uint8_t>(levels - 1);
  c.levels.unknown_size = unknown_size;
  if (levels != 4) {
    // Cutoffs for other K: powers of 16 from 4 KiB, the default's spacing.
    for (uint32_t i = 0; i + 1 < levels && i < c.levels.cutoffs.size(); ++i) {
      c.levels.cutoffs[i] = static_cast<uint32_t>(std::min<uint64_t>(4096ull << (4 * i), 1u << 30));
    }
  }
  const bool per_packet = storm_mode == "per-packet" ||
                          (storm_mode == "auto" && c.transport != heddle::sim::Transport::kGoBackN);
  c.levels.mode = per_packet ? heddle::storm::Mode::kPerPacket : heddle::storm::Mode::kPerMessage;
  absl::StatusOr<heddle::lb::BalancerKind> kind = heddle::lb::ParseBalancerKind(lb_name);
  if (!kind.ok()) return Fail(absl::StrCat("--lb: ", kind.status().message()));
  c.lb.balancer = *kind;
  c.lb.pin = OnOff(pin);
  c.lb.threshold_bytes = pin_threshold;
  c.lb.flow_unit = flow_unit == "qp" ? heddle::lb::FlowUnit::kQp : heddle::lb::FlowUnit::kRequest;

  absl::StatusOr<std::unique_ptr<heddle::sim::Simulator>> sim =
      heddle::sim::Simulator::Create(*fabric, c);
  if (!sim.ok()) return Fail(std::string(sim.status().message()));
  if (workload != "none") {
    absl::StatusOr<heddle::sim::Cdf> cdf = heddle::sim::LoadNamedCdf(workload);
    if (!cdf.ok()) return Fail(std::string(cdf.status().message()));
    if (absl::Status st = (*sim)->SetPoissonWorkload(*cdf, load); !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  if (incast_senders > 0) {
    if (absl::Status st =
            (*sim)->AddIncast(incast_receiver, incast_senders, incast_size, 0, period_ns);
        !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }

  if (collective != "none") {
    uint64_t gap_ns = 0;
    if (!ParseDuration(compute_gap, &gap_ns)) {
      return Fail(absl::StrCat("--compute-gap ", compute_gap, ": give a time such as 20us"));
    }
    const uint32_t all = (*sim)->hosts();
    const uint32_t n = collective_hosts == 0 ? all : std::min(collective_hosts, all);
    std::vector<uint32_t> hosts;
    for (uint32_t i = 0; i < n; ++i) hosts.push_back(static_cast<uint32_t>(uint64_t{i} * all / n));
    const auto kind = collective == "ring" ? heddle::sim::Simulator::Collective::kRingAllReduce
                                           : heddle::sim::Simulator::Collective::kAllToAll;
    if (absl::Status st =
            (*sim)->AddCollective(kind, hosts, collective_bytes, 0, iterations, gap_ns);
        !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }

  if (!quiet && (progress || isatty(STDERR_FILENO))) {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t arrivals_ps = c.duration_ns * 1000;
    (*sim)->SetProgress([t0, arrivals_ps](uint64_t now, uint64_t) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double frac = std::min(1.0, static_cast<double>(now) / arrivals_ps);
      const int bar = static_cast<int>(frac * 30);
      std::string eta = "draining";
      if (frac < 1 && frac > 0) {
        eta = absl::StrFormat("ETA %.0f s", elapsed * (1 - frac) / frac);
      }
      std::fprintf(stderr, "\r[%-30s] %5.1f%%  sim %.3f ms  %s   ",
                   std::string(static_cast<size_t>(bar), '#').c_str(), frac * 100,
                   static_cast<double>(now) / 1e9, eta.c_str());
      std::fflush(stderr);
    });
  }
  const heddle::sim::SimResult r = (*sim)->Run();
  if (!quiet && (progress || isatty(STDERR_FILENO))) std::fprintf(stderr, "\n");
  std::cout << heddle::sim::FormatReport(r);
  if (!out_dir.empty()) {
    if (absl::Status st = heddle::sim::WriteCsv(r, out_dir); !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  return 0;
}
