#include "tools/heddle-sim/lib/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::sim {

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

std::vector<BucketStats> SlowdownBuckets(const SimResult& r, uint64_t bdp) {
  constexpr uint64_t kMax = ~uint64_t{0};
  std::vector<BucketStats> b = {{"short", 0, bdp},
                                {"long", bdp, kMax},
                                {"<=10K", 0, 10'000},
                                {"10K-100K", 10'000, 100'000},
                                {"100K-1M", 100'000, 1'000'000},
                                {"1M-10M", 1'000'000, 10'000'000},
                                {">10M", 10'000'000, kMax},
                                {"all", 0, kMax}};
  // With more than WRITEs, the short, long and all buckets again per operation ("read-short").
  std::vector<int> op_of(b.size(), -1);
  bool mixed = false;
  for (const FlowRecord& f : r.flows) mixed |= f.op != Op::kWrite;
  if (mixed) {
    for (Op op : {Op::kWrite, Op::kSend, Op::kRead}) {
      bool any = false;
      for (const FlowRecord& f : r.flows) any |= f.op == op;
      if (!any) continue;
      const std::string name = OpName(op);
      b.push_back({name + "-short", 0, bdp});
      b.push_back({name + "-long", bdp, kMax});
      b.push_back({name, 0, kMax});
      op_of.resize(b.size(), static_cast<int>(op));
    }
  }
  for (size_t i = 0; i < b.size(); ++i) {
    BucketStats& s = b[i];
    std::vector<double> v;
    double sum = 0;
    for (const FlowRecord& f : r.flows) {
      if (f.finish == 0 || f.size <= s.lo || f.size > s.hi || f.ideal == 0) continue;
      if (op_of[i] >= 0 && static_cast<int>(f.op) != op_of[i]) continue;
      const double sd = static_cast<double>(f.finish - f.start) / static_cast<double>(f.ideal);
      v.push_back(sd);
      sum += sd;
    }
    std::sort(v.begin(), v.end());
    s.flows = v.size();
    s.mean = v.empty() ? 0 : sum / static_cast<double>(v.size());
    s.p50 = Percentile(v, 0.5);
    s.p99 = Percentile(v, 0.99);
    s.p999 = Percentile(v, 0.999);
  }
  return b;
}

namespace {
// Short flows: at most one bandwidth-delay product of a host link over the longest base RTT.
uint64_t Bdp(const SimResult& r) { return lb::BandwidthDelayBytes(r.lb.link_gbps, r.lb.rtt_ns); }
uint64_t Finished(const SimResult& r) {
  uint64_t n = 0;
  for (const FlowRecord& f : r.flows) n += f.finish != 0;
  return n;
}
}  // namespace

std::string FormatReport(const SimResult& r) {
  const SimConfig& c = r.config;
  std::string s = absl::StrFormat(
      "fabric %s (%u hosts), transport %s, lb %s, pin %s (threshold %u B), storm %s, ecn %s, "
      "pfc %s, trim %s, cc %s, seed %u\n",
      r.fabric_name, r.hosts, TransportName(c.transport), lb::BalancerKindName(r.lb.balancer),
      r.lb.pin ? "on" : "off", lb::EffectiveThreshold(r.lb), c.storm ? "on" : "off",
      c.ecn ? "on" : "off", c.pfc ? "on" : "off", c.trim ? "on" : "off",
      c.dcqcn        ? "dcqcn"
      : c.ecn_window ? "ecn-window"
                     : "none",
      c.seed);
  absl::StrAppendFormat(&s, "flows %u, finished %u; simulated %.3f us\n", r.flows.size(),
                        Finished(r), static_cast<double>(r.end_time) / 1e6);
  if (r.collective_flows != 0) {
    absl::StrAppendFormat(
        &s, "collectives: %u flows, %u finished; %s\n", r.collective_flows, r.collective_finished,
        r.collective_done != 0 ? absl::StrFormat("the last delivered at %.3f us",
                                                 static_cast<double>(r.collective_done) / 1e6)
                               : std::string("not complete"));
  }
  absl::StrAppendFormat(&s, "%-9s %8s %9s %9s %9s %9s\n", "slowdown", "flows", "mean", "p50", "p99",
                        "p99.9");
  for (const BucketStats& b : SlowdownBuckets(r, Bdp(r))) {
    absl::StrAppendFormat(&s, "%-9s %8u %9.3f %9.3f %9.3f %9.3f\n", b.name, b.flows, b.mean, b.p50,
                          b.p99, b.p999);
  }
  for (const SimResult::UplinkTier& u : r.uplinks) {
    uint64_t lo = ~uint64_t{0}, hi = 0;
    for (uint64_t v : u.bytes) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    absl::StrAppendFormat(
        &s, "tier-%d uplinks: %u, Jain %.4f (per switch %.4f), bytes min %u max %u\n", u.tier,
        u.bytes.size(), u.jain, u.jain_per_switch, u.bytes.empty() ? 0 : lo, hi);
  }
  absl::StrAppendFormat(
      &s,
      "packets: data sent %u delivered %u, control sent %u delivered %u; drops buffer %u "
      "unreachable %u (data %u); ecn marks %u; pfc pauses %u; retransmissions %u; timeouts %u; "
      "naks %u; cnps %u; out of order %u; trimmed %u (headers delivered %u)\n",
      r.data_packets_sent, r.data_packets_delivered, r.control_packets_sent,
      r.control_packets_delivered, r.drops_buffer, r.drops_unreachable, r.drops_data, r.ecn_marks,
      r.pfc_pauses, r.retransmissions, r.timeouts, r.naks, r.cnps, r.out_of_order, r.trims,
      r.trimmed_delivered);
  if (r.read_requests != 0 || r.fabric_guarded != 0 || r.response_guarded != 0) {
    absl::StrAppendFormat(&s,
                          "reads: requests %u, re-issued %u; storm guards: fabric %u, "
                          "response window %u\n",
                          r.read_requests, r.read_reissues, r.fabric_guarded, r.response_guarded);
  }
  absl::StrAppendFormat(&s, "queues: mean wait %.3f us, deepest %u B; level bytes:",
                        r.mean_queue_delay_ns / 1000, r.max_queue_bytes);
  for (int l = 0; l < c.levels.levels && l < static_cast<int>(r.level_bytes.size()); ++l) {
    absl::StrAppendFormat(&s, " %u", r.level_bytes[l]);
  }
  absl::StrAppendFormat(&s,
                        "\nspeed: %u events in %.3f s CPU (%.3f s wall) = %.2f M events/s, "
                        "%.2f M delivered packets/s (event queue depth up to %u)\n",
                        r.events, r.cpu_seconds, r.wall_seconds, EventsPerSecond(r) / 1e6,
                        DeliveredPacketsPerSecond(r) / 1e6, r.max_pending_events);
  return s;
}

absl::Status WriteCsv(const SimResult& r, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create output directory ", dir, ": ", ec.message()));
  }
  auto write = [&](const std::string& name, const std::string& text) -> absl::Status {
    const std::string path = absl::StrCat(dir, "/", name);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  };
  std::string fct =
      "id,src,dst,size_bytes,start_ps,delivered_ps,finish_ps,fct_ps,ideal_ps,slowdown,collective,"
      "op\n";
  for (size_t i = 0; i < r.flows.size(); ++i) {
    const FlowRecord& f = r.flows[i];
    const uint64_t fct_ps = f.finish != 0 ? f.finish - f.start : 0;
    absl::StrAppendFormat(&fct, "%u,%u,%u,%u,%u,%u,%u,%u,%u,%.6f,%d,%s\n", i, f.src, f.dst, f.size,
                          f.start, f.delivered, f.finish, fct_ps, f.ideal,
                          f.finish != 0 && f.ideal != 0
                              ? static_cast<double>(fct_ps) / static_cast<double>(f.ideal)
                              : 0.0,
                          f.collective ? 1 : 0, OpName(f.op));
  }
  if (absl::Status st = write("fct.csv", fct); !st.ok()) return st;
  std::string sum = "bucket,lo_bytes,hi_bytes,flows,mean,p50,p99,p999\n";
  for (const BucketStats& b : SlowdownBuckets(r, Bdp(r))) {
    absl::StrAppendFormat(&sum, "%s,%u,%u,%u,%.6f,%.6f,%.6f,%.6f\n", b.name, b.lo, b.hi, b.flows,
                          b.mean, b.p50, b.p99, b.p999);
  }
  if (absl::Status st = write("summary.csv", sum); !st.ok()) return st;
  std::string up = "tier,uplink,bytes\n";
  for (const SimResult::UplinkTier& u : r.uplinks) {
    for (size_t i = 0; i < u.bytes.size(); ++i) {
      absl::StrAppendFormat(&up, "%d,%u,%u\n", u.tier, i, u.bytes[i]);
    }
  }
  if (absl::Status st = write("uplinks.csv", up); !st.ok()) return st;
  std::string run =
      "flows,finished,events,cpu_s,wall_s,events_per_s,delivered_pkts_per_s,data_sent,data_"
      "delivered,"
      "control_sent,control_delivered,drops_buffer,drops_unreachable,ecn_marks,pfc_pauses,"
      "retransmissions,timeouts,naks,cnps,out_of_order,mean_queue_wait_ns,trims,drops_data,"
      "end_ps,read_requests,read_reissues,fabric_guarded,response_guarded\n";
  absl::StrAppendFormat(
      &run,
      "%u,%u,%u,%.6f,%.6f,%.0f,%.0f,%u,%u,%u,%u,%u,%u,%u,%u,%u,%u,%u,%u,%u,%.3f,%u,%u,%u,%u,%u,%u,"
      "%u\n",
      r.flows.size(), Finished(r), r.events, r.cpu_seconds, r.wall_seconds, EventsPerSecond(r),
      DeliveredPacketsPerSecond(r), r.data_packets_sent, r.data_packets_delivered,
      r.control_packets_sent, r.control_packets_delivered, r.drops_buffer, r.drops_unreachable,
      r.ecn_marks, r.pfc_pauses, r.retransmissions, r.timeouts, r.naks, r.cnps, r.out_of_order,
      r.mean_queue_delay_ns, r.trims, r.drops_data, r.end_time, r.read_requests, r.read_reissues,
      r.fabric_guarded, r.response_guarded);
  if (absl::Status st = write("run.csv", run); !st.ok()) return st;
  // Per switch egress port: packets sent, their mean wait, drops and trims. By Little's law a
  // port's time-averaged queue is packets × mean wait ÷ the run's simulated time.
  std::string qs = "tier,switch,port,up,packets,mean_wait_ns,drops,trims\n";
  for (const SimResult::PortWait& w : r.port_waits) {
    absl::StrAppendFormat(&qs, "%d,%u,%u,%d,%u,%.3f,%u,%u\n", w.tier, w.index, w.port, w.up ? 1 : 0,
                          w.packets, w.mean_wait_ns, w.drops, w.trims);
  }
  if (absl::Status st = write("queues.csv", qs); !st.ok()) return st;
  std::string lv = "level,payload_bytes\n";
  for (int l = 0; l < r.config.levels.levels && l < static_cast<int>(r.level_bytes.size()); ++l) {
    absl::StrAppendFormat(&lv, "%d,%u\n", l, r.level_bytes[l]);
  }
  return write("levels.csv", lv);
}

}  // namespace heddle::sim
