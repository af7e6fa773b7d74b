// File: control/metrics/metrics.cc
//
// Metric families built from one StatsSnapshot per scrape, and the civetweb-backed HTTP server.
#include "control/metrics/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "control/metrics/family.h"
#include "dataplane/pkt/parse.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_type.h"

namespace heddle::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;


PortLabel LabelOf(const std::vector<PortLabel>& ports, size_t i) {
  if (i < ports.size()) return ports[i];
  return PortLabel{absl::StrCat("port", i), "unknown"};
}

std::vector<ClientMetric::Label> PortLabels(const PortLabel& p) {
  return {{"port", p.name}, {"role", p.role}};
}

// A parsed `metrics.listen` value.
struct ListenAddress {
  int family = AF_INET;
  std::string host;  // without brackets
  uint16_t port = 0;
  std::string civet;  // what civetweb's listening_ports expects
  std::string url_host;
};

absl::StatusOr<ListenAddress> ParseListen(const std::string& listen) {
  auto bad = [&listen](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics.listen \"", listen, "\": ", why,
                     "; expected IPv4:port such as 127.0.0.1:9464 (port 0 picks a free port) "
                     "or [IPv6]:port"));
  };
  ListenAddress a;
  std::string port_text;
  if (!listen.empty() && listen.front() == '[') {
    size_t close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return bad("IPv6 address must be written [address]:port");
    }
    a.family = AF_INET6;
    a.host = listen.substr(1, close - 1);
    port_text = listen.substr(close + 2);
  } else {
    size_t colon = listen.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    a.host = listen.substr(0, colon);
    port_text = listen.substr(colon + 1);
  }
  in6_addr buf;
  if (a.host.empty() || inet_pton(a.family, a.host.c_str(), &buf) != 1) {
    return bad(absl::StrCat("\"", a.host, "\" is not a numeric ",
                            a.family == AF_INET ? "IPv4" : "IPv6", " address"));
  }
  uint32_t port = 0;
  if (port_text.empty() || port_text.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return bad(absl::StrCat("\"", port_text, "\" is not a port number in 0-65535"));
  }
  a.port = static_cast<uint16_t>(port);
  a.url_host = a.family == AF_INET6 ? absl::StrCat("[", a.host, "]") : a.host;
  a.civet = absl::StrCat(a.url_host, ":", a.port);
  return a;
}

// civetweb reports every start-up failure with the same text, so bind the address ourselves to
// learn the reason and say how to fix it.
absl::Status ExplainStartFailure(const std::string& listen, const ListenAddress& a,
                                 const char* server_error) {
  const std::string prefix = absl::StrCat("metrics.listen ", listen, ": ");
  int fd = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int err = 0;
  if (fd < 0) {
    err = errno;
  } else {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as civetweb does
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (a.family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
      sin->sin_family = AF_INET;
      sin->sin_port = htons(a.port);
      inet_pton(AF_INET, a.host.c_str(), &sin->sin_addr);
      len = sizeof(*sin);
    } else {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
      sin6->sin6_family = AF_INET6;
      sin6->sin6_port = htons(a.port);
      inet_pton(AF_INET6, a.host.c_str(), &sin6->sin6_addr);
      len = sizeof(*sin6);
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) err = errno;
    close(fd);
  }
  switch (err) {
    case EADDRINUSE:
      return absl::UnavailableError(absl::StrCat(
          prefix, "address already in use; choose another port or set metrics.enabled: false"));
    case EADDRNOTAVAIL:
      return absl::InvalidArgumentError(absl::StrCat(
          prefix,
          "address not available: no interface on this host has it; use 127.0.0.1, 0.0.0.0 or "
          "one of this host's addresses"));
    case EACCES:
      return absl::PermissionDeniedError(absl::StrCat(
          prefix,
          "permission denied: ports below 1024 need CAP_NET_BIND_SERVICE; choose a port >= 1024"));
    case EAFNOSUPPORT:
      return absl::UnavailableError(
          absl::StrCat(prefix, "this host has no IPv6 support; use an IPv4 address"));
    case 0:
      // The address binds, yet the HTTP server refused it (e.g. civetweb built without IPv6).
      return absl::UnavailableError(
          absl::StrCat(prefix, "the HTTP server could not listen there (", server_error,
                       "); use an IPv4 address or set metrics.enabled: false"));
    default:
      return absl::UnavailableError(absl::StrCat(prefix, "cannot listen: ", std::strerror(err),
                                                 "; choose another address or set "
                                                 "metrics.enabled: false"));
  }
}

}  // namespace

DataplaneCollectable::DataplaneCollectable(MetricsSources sources, Clock now)
    : sources_(std::move(sources)), now_(std::move(now)), start_(now_()) {}

std::vector<MetricFamily> DataplaneCollectable::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  const pipeline::StatsSnapshot snap = sources_.snapshot();  // the one snapshot of this scrape
  std::vector<HwPortStats> hw;
  if (sources_.hw_stats) hw = sources_.hw_stats();

  std::vector<MetricFamily> out;
  out.reserve(16);

  MetricFamily rx_packets =
      NewFamily("heddle_port_rx_packets_total",
                "Packets received by the dataplane on the port, summed over worker lcores.",
                MetricType::Counter);
  MetricFamily rx_bytes = NewFamily(
      "heddle_port_rx_bytes_total",
      "Bytes (frame length as seen by the dataplane) received on the port.", MetricType::Counter);
  MetricFamily tx_packets = NewFamily(
      "heddle_port_tx_packets_total",
      "Packets handed to the port's TX queues and accepted by the driver.", MetricType::Counter);
  MetricFamily tx_bytes =
      NewFamily("heddle_port_tx_bytes_total",
                "Bytes (frame length as seen by the dataplane) transmitted on the port.",
                MetricType::Counter);
  MetricFamily roce = NewFamily(
      "heddle_roce_rx_packets_total",
      "RoCEv2 packets received on the port, by BTH opcode class (non-RoCE traffic excluded).",
      MetricType::Counter);
  for (size_t p = 0; p < snap.ports.size(); ++p) {
    const pipeline::PortSnapshot& ps = snap.ports[p];
    const PortLabel label = LabelOf(sources_.ports, p);
    AddSample(rx_packets, PortLabels(label), static_cast<double>(ps.rx_packets));
    AddSample(rx_bytes, PortLabels(label), static_cast<double>(ps.rx_bytes));
    AddSample(tx_packets, PortLabels(label), static_cast<double>(ps.tx_packets));
    AddSample(tx_bytes, PortLabels(label), static_cast<double>(ps.tx_bytes));
    for (int c = 0; c < pipeline::kNumRoceClasses; ++c) {
      const auto cls = static_cast<pkt::RoceClass>(c);
      if (cls == pkt::RoceClass::kNone) continue;
      AddSample(roce, {{"port", label.name}, {"class", pkt::RoceClassName(cls)}},
                static_cast<double>(ps.roce_rx_packets[c]));
    }
  }
  out.push_back(std::move(rx_packets));
  out.push_back(std::move(rx_bytes));
  out.push_back(std::move(tx_packets));
  out.push_back(std::move(tx_bytes));

  if (sources_.hw_stats) {
    struct HwField {
      const char* name;
      const char* help;
      uint64_t HwPortStats::*field;
    };
    static constexpr HwField kHwFields[] = {
        {"heddle_port_hw_rx_missed_total",
         "Packets the NIC dropped because the RX queues were full (imissed): the workers fell "
         "behind.",
         &HwPortStats::rx_missed},
        {"heddle_port_hw_rx_errors_total", "Erroneous packets received, as counted by the NIC.",
         &HwPortStats::rx_errors},
        {"heddle_port_hw_tx_errors_total", "Packets the NIC failed to transmit.",
         &HwPortStats::tx_errors},
        {"heddle_port_hw_rx_nombuf_total", "RX mbuf allocation failures: the mbuf pool was empty.",
         &HwPortStats::rx_nombuf},
    };
    for (const HwField& f : kHwFields) {
      MetricFamily fam = NewFamily(f.name, f.help, MetricType::Counter);
      for (size_t p = 0; p < hw.size(); ++p) {
        AddSample(fam, PortLabels(LabelOf(sources_.ports, p)), static_cast<double>(hw[p].*f.field));
      }
      out.push_back(std::move(fam));
    }
  }

  MetricFamily drops =
      NewFamily("heddle_dataplane_drops_total",
                "Packets dropped by the dataplane, by reason; every reason is always exported.",
                MetricType::Counter);
  for (int r = 0; r < pipeline::kNumDropReasons; ++r) {
    AddSample(drops, {{"reason", pipeline::DropReasonName(static_cast<pipeline::DropReason>(r))}},
              static_cast<double>(snap.drops[r]));
  }
  out.push_back(std::move(drops));
  out.push_back(std::move(roce));

  MetricFamily loops = NewFamily(
      "heddle_lcore_poll_loops_total",
      "Poll-loop iterations of each worker lcore; state=\"busy\" received at least one packet, "
      "state=\"idle\" received none.",
      MetricType::Counter);
  for (const pipeline::LcoreSnapshot& l : snap.lcores) {
    const std::string id = absl::StrCat(l.lcore_id);
    AddSample(loops, {{"lcore", id}, {"state", "busy"}}, static_cast<double>(l.busy_loops));
    AddSample(loops, {{"lcore", id}, {"state", "idle"}}, static_cast<double>(l.idle_loops));
  }
  out.push_back(std::move(loops));

  if (sources_.storm_levels > 0) {
    const int levels =
        std::min(std::max(sources_.storm_levels,
                          sources_.storm_levels_now ? sources_.storm_levels_now() : 0),
                 pipeline::kMaxStormLevels);
    MetricFamily packets = NewFamily(
        "heddle_storm_level_packets_total",
        "RoCEv2 packets from host ports tagged by storm-tag, by STORM level (level K-1 is served "
        "first).",
        MetricType::Counter);
    MetricFamily bytes =
        NewFamily("heddle_storm_level_bytes_total",
                  "Bytes (whole frames) of the packets tagged by storm-tag, by STORM level.",
                  MetricType::Counter);
    for (int k = 0; k < levels; ++k) {
      AddSample(packets, {{"level", absl::StrCat(k)}},
                static_cast<double>(snap.storm_level_packets[k]));
      AddSample(bytes, {{"level", absl::StrCat(k)}},
                static_cast<double>(snap.storm_level_bytes[k]));
    }
    out.push_back(std::move(packets));
    out.push_back(std::move(bytes));
    MetricFamily full = NewFamily(
        "heddle_storm_qp_table_full_total",
        "QP lookups refused by a full STORM QP table (the packet got the default level); raise "
        "storm.qp_capacity if this grows.",
        MetricType::Counter);
    AddSample(full, {}, static_cast<double>(snap.storm_table_full));
    out.push_back(std::move(full));

    MetricFamily eg_tx =
        NewFamily("heddle_storm_egress_tx_packets_total",
                  "Packets of each STORM level accepted by the egress ports' TX queues from the "
                  "strict-priority egress, summed over ports and worker lcores.",
                  MetricType::Counter);
    MetricFamily eg_drops = NewFamily(
        "heddle_storm_egress_drops_total",
        "Packets of each STORM level dropped because their egress port's queue budget "
        "(storm.queue_packets) was full: pushed out by a higher level, or refused on arrival.",
        MetricType::Counter);
    MetricFamily eg_depth = NewFamily(
        "heddle_storm_egress_queue_depth",
        "Packets of each STORM level waiting in the strict-priority egress queues, summed over "
        "ports and worker lcores.",
        MetricType::Gauge);
    for (int k = 0; k < levels; ++k) {
      AddSample(eg_tx, {{"level", absl::StrCat(k)}}, static_cast<double>(snap.egress_level_tx[k]));
      AddSample(eg_drops, {{"level", absl::StrCat(k)}},
                static_cast<double>(snap.egress_level_drops[k]));
      AddSample(eg_depth, {{"level", absl::StrCat(k)}},
                static_cast<double>(snap.egress_level_depth[k]));
    }
    out.push_back(std::move(eg_tx));
    out.push_back(std::move(eg_drops));
    out.push_back(std::move(eg_depth));

    if (sources_.storm_join) {
      const StormJoinCounters j = sources_.storm_join();
      MetricFamily join = NewFamily(
          "heddle_storm_join_total",
          "STORM's join of acknowledgements towards the host to their QP's request entry "
          "(storm.backlog_source host). Per acknowledging response packet: joined_local, no_pair "
          "(the verbs shim pairs no QP with it) or malformed; per message another worker posted: "
          "joined_remote or no_entry; per message refused by a full ring: ring_full.",
          MetricType::Counter);
      const std::pair<const char*, uint64_t> results[] = {
          {"joined_local", j.joined_local}, {"joined_remote", j.joined_remote},
          {"no_pair", j.no_pair},           {"no_entry", j.no_entry},
          {"ring_full", j.ring_full},       {"malformed", j.malformed}};
      for (const auto& [name, v] : results) {
        AddSample(join, {{"result", name}}, static_cast<double>(v));
      }
      out.push_back(std::move(join));
      MetricFamily acks = NewFamily(
          "heddle_storm_acks_total",
          "Joined acknowledgements by their effect on the QP's acknowledged PSN: advanced, old (at "
          "or before it) or ahead (after every PSN the QP sent; ignored).",
          MetricType::Counter);
      AddSample(acks, {{"result", "advanced"}}, static_cast<double>(j.acks_advanced));
      AddSample(acks, {{"result", "old"}}, static_cast<double>(j.acks_old));
      AddSample(acks, {{"result", "ahead"}}, static_cast<double>(j.acks_ahead));
      out.push_back(std::move(acks));
      MetricFamily guarded = NewFamily(
          "heddle_storm_fabric_guarded_total",
          "Requests started while their QP had packets unacknowledged in the fabric: their level "
          "was capped at those packets' level (storm.fabric_guard).",
          MetricType::Counter);
      AddSample(guarded, {}, static_cast<double>(j.fabric_guarded));
      out.push_back(std::move(guarded));
    }

    if (sources_.storm_reads) {
      const StormReadCounters r = sources_.storm_reads();
      MetricFamily streams = NewFamily(
          "heddle_storm_read_streams_total",
          "READ response streams the host sent as the responder, by how their size was known: "
          "sized (a joined READ request), unknown (levelled like a SEND of unknown size), orphan "
          "(picked up mid-way); late counts unknown ones sized by a READ joined after they "
          "started.",
          MetricType::Counter);
      const std::pair<const char*, uint64_t> stream_results[] = {
          {"sized", r.sized}, {"unknown", r.unknown}, {"orphan", r.orphans}, {"late", r.late}};
      for (const auto& [name, v] : stream_results) {
        AddSample(streams, {{"result", name}}, static_cast<double>(v));
      }
      out.push_back(std::move(streams));
      MetricFamily odd = NewFamily(
          "heddle_storm_read_responses_total",
          "READ responses the host sent out of the ordinary: duplicate (old PSN), psn_jump, "
          "abandoned (a stream's Last not seen), overrun (beyond the joined READ), malformed (no "
          "AETH), table_full (the READ stream table refused the QP: default level).",
          MetricType::Counter);
      const std::pair<const char*, uint64_t> reasons[] = {
          {"duplicate", r.duplicates}, {"psn_jump", r.psn_jumps},  {"abandoned", r.abandoned},
          {"overrun", r.overrun},      {"malformed", r.malformed}, {"table_full", r.table_full}};
      for (const auto& [name, v] : reasons) {
        AddSample(odd, {{"reason", name}}, static_cast<double>(v));
      }
      out.push_back(std::move(odd));
      MetricFamily window = NewFamily(
          "heddle_storm_response_window_guarded_total",
          "READ response streams and ACKs the host sent whose level the response window lowered "
          "to its QP's last READ response's (storm.fabric_guard, per-message mode).",
          MetricType::Counter);
      AddSample(window, {}, static_cast<double>(r.window_guarded));
      out.push_back(std::move(window));
      if (r.join) {
        MetricFamily joins = NewFamily(
            "heddle_storm_read_joins_total",
            "READ requests towards the host joined to the READ responses it will send "
            "(storm.backlog_source host): local, remote (through another worker's ring), no_pair, "
            "no_entry (drained by a worker not tracking the QP), ring_full, malformed (no RETH); "
            "and of those queued: pending_full (dropped oldest), stale (never matched), too_late "
            "(their stream was already sent).",
            MetricType::Counter);
        const std::pair<const char*, uint64_t> join_results[] = {{"local", r.local},
                                                                 {"remote", r.remote},
                                                                 {"no_pair", r.no_pair},
                                                                 {"no_entry", r.no_entry},
                                                                 {"ring_full", r.ring_full},
                                                                 {"malformed", r.join_malformed},
                                                                 {"pending_full", r.pending_full},
                                                                 {"stale", r.stale},
                                                                 {"too_late", r.too_late}};
        for (const auto& [name, v] : join_results) {
          AddSample(joins, {{"result", name}}, static_cast<double>(v));
        }
        out.push_back(std::move(joins));
      }
    }
  }

  if (sources_.lb) {
    const LbMetrics l = sources_.lb();
    MetricFamily kind = NewFamily(
        "heddle_lb_balancer",
        "1 for the load balancer in force under PIN (lb.balancer, heddlectl set lb balancer), 0 "
        "for the others.",
        MetricType::Gauge);
    for (const std::string& b : l.balancers) {
      AddSample(kind, {{"balancer", b}}, b == l.balancer ? 1 : 0);
    }
    out.push_back(std::move(kind));
    MetricFamily threshold =
        NewFamily("heddle_lb_pin_threshold_bytes",
                  "PIN's threshold in force: messages of at most this many bytes keep one path.",
                  MetricType::Gauge);
    AddSample(threshold, {}, static_cast<double>(l.threshold_bytes));
    out.push_back(std::move(threshold));
    MetricFamily flows = NewFamily(
        "heddle_lb_flows_total",
        "Flows (messages, or QP periods in qp flow mode) started pinned to one path or sprayed by "
        "the balancer.",
        MetricType::Counter);
    AddSample(flows, {{"verdict", "pinned"}}, static_cast<double>(l.pinned_flows));
    AddSample(flows, {{"verdict", "sprayed"}}, static_cast<double>(l.sprayed_flows));
    out.push_back(std::move(flows));
    MetricFamily packets = NewFamily(
        "heddle_lb_packets_total",
        "Request-direction packets pin-select sent on a path: pinned, sprayed, or stateless "
        "(control packets and flow-table-full fallbacks on their QP's hashed path).",
        MetricType::Counter);
    MetricFamily bytes = NewFamily("heddle_lb_bytes_total",
                                   "Bytes (whole frames) of those packets, by the same verdicts.",
                                   MetricType::Counter);
    const std::tuple<const char*, uint64_t, uint64_t> verdicts[] = {
        {"pinned", l.pinned_packets, l.pinned_bytes},
        {"sprayed", l.sprayed_packets, l.sprayed_bytes},
        {"stateless", l.stateless_packets, l.stateless_bytes}};
    for (const auto& [name, p, b] : verdicts) {
      AddSample(packets, {{"verdict", name}}, static_cast<double>(p));
      AddSample(bytes, {{"verdict", name}}, static_cast<double>(b));
    }
    out.push_back(std::move(packets));
    out.push_back(std::move(bytes));
    MetricFamily path_bytes = NewFamily(
        "heddle_lb_path_bytes_total",
        "Bytes pin-select sent on each path (set = path set id, path = index in the set; heddlectl "
        "show lb names their uplink and entropy).",
        MetricType::Counter);
    MetricFamily path_packets =
        NewFamily("heddle_lb_path_packets_total", "Packets pin-select sent on each path, as above.",
                  MetricType::Counter);
    MetricFamily jain = NewFamily(
        "heddle_lb_path_jain_index",
        "Jain's fairness index of the bytes over a path set's paths since start: 1 is even, 1/n "
        "all on one path, 0 nothing sent yet.",
        MetricType::Gauge);
    for (const LbMetrics::Set& set : l.sets) {
      const std::string sid = absl::StrCat(set.set);
      for (size_t i = 0; i < set.paths.size(); ++i) {
        const std::string pid = absl::StrCat(i);
        AddSample(path_bytes, {{"set", sid}, {"path", pid}},
                  static_cast<double>(set.paths[i].bytes));
        AddSample(path_packets, {{"set", sid}, {"path", pid}},
                  static_cast<double>(set.paths[i].packets));
      }
      AddSample(jain, {{"set", sid}}, set.jain_index);
    }
    out.push_back(std::move(path_bytes));
    out.push_back(std::move(path_packets));
    out.push_back(std::move(jain));
    MetricFamily entries =
        NewFamily("heddle_lb_flow_entries",
                  "PIN's flow table entries over all workers: live, capacity.", MetricType::Gauge);
    AddSample(entries, {{"state", "live"}}, static_cast<double>(l.flows_live));
    AddSample(entries, {{"state", "capacity"}}, static_cast<double>(l.flow_capacity));
    out.push_back(std::move(entries));
    MetricFamily events = NewFamily(
        "heddle_lb_events_total",
        "Every PIN selector and pin-select counter by its stable name (docs/pin.md; heddlectl "
        "show lb explains each): malformed, table-full, crossed-threshold, feedback and join "
        "outcomes, REPS recycling, ...",
        MetricType::Counter);
    for (const auto& [name, v] : l.events) {
      AddSample(events, {{"event", name}}, static_cast<double>(v));
    }
    out.push_back(std::move(events));
  }

  if (sources_.fwd) {
    const FwdMetrics f = sources_.fwd();
    MetricFamily installs = NewFamily(
        "heddle_fwd_artifact_installs_total",
        "Nüwa host artifacts installed, refused (the running one stayed) and rolled back to "
        "(heddlectl artifact install|rollback, fwd.artifact at start-up).",
        MetricType::Counter);
    AddSample(installs, {{"result", "installed"}}, static_cast<double>(f.installs));
    AddSample(installs, {{"result", "rejected"}}, static_cast<double>(f.rejected));
    AddSample(installs, {{"result", "rolled_back"}}, static_cast<double>(f.rollbacks));
    out.push_back(std::move(installs));
    MetricFamily generation = NewFamily(
        "heddle_fwd_artifact_generation",
        "Path tables published from artifacts since start (each install or rollback adds one).",
        MetricType::Gauge);
    AddSample(generation, {}, static_cast<double>(f.generation));
    out.push_back(std::move(generation));
    MetricFamily installed =
        NewFamily("heddle_fwd_artifact_installed",
                  "1 when a Nüwa artifact's path sets are in force, 0 when none was installed yet.",
                  MetricType::Gauge);
    AddSample(installed, {}, f.installed ? 1 : 0);
    out.push_back(std::move(installed));
  }

  MetricFamily build =
      NewFamily("heddle_build_info", "Always 1; the version label names the running heddle build.",
                MetricType::Gauge);
  AddSample(build, {{"version", sources_.version}}, 1);
  out.push_back(std::move(build));

  MetricFamily uptime =
      NewFamily("heddle_uptime_seconds",
                "Seconds since the metrics source was created (daemon start).", MetricType::Gauge);
  AddSample(uptime, {}, std::chrono::duration<double>(now_() - start_).count());
  out.push_back(std::move(uptime));
  return out;
}

MetricsServer::MetricsServer(std::string host, uint16_t port,
                             std::shared_ptr<DataplaneCollectable> collectable,
                             std::unique_ptr<prometheus::Exposer> exposer)
    : host_(std::move(host)),
      port_(port),
      collectable_(std::move(collectable)),
      exposer_(std::move(exposer)) {}

MetricsServer::~MetricsServer() = default;

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                                    MetricsSources sources) {
  if (!sources.snapshot) {
    return absl::InvalidArgumentError(
        "metrics: MetricsSources.snapshot is not set; the server needs the dataplane counters");
  }
  HEDDLE_ASSIGN_OR_RETURN(ListenAddress addr, ParseListen(listen));
  auto collectable = std::make_shared<DataplaneCollectable>(std::move(sources));
  std::unique_ptr<prometheus::Exposer> exposer;
  std::vector<int> ports;
  // prometheus-cpp and civetweb report failures by throwing; none may escape.
  try {
    exposer = std::make_unique<prometheus::Exposer>(addr.civet, /*num_threads=*/2);
    exposer->RegisterCollectable(collectable);
    ports = exposer->GetListeningPorts();
  } catch (const std::exception& e) {
    return ExplainStartFailure(listen, addr, e.what());
  } catch (...) {
    return ExplainStartFailure(listen, addr, "unknown error");
  }
  if (ports.empty() || ports[0] <= 0 || ports[0] > 65535) {
    return absl::InternalError(absl::StrCat("metrics.listen ", listen,
                                            ": the HTTP server started but reports no bound port"));
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(
      addr.url_host, static_cast<uint16_t>(ports[0]), std::move(collectable), std::move(exposer)));
}

std::string MetricsServer::url() const {
  return absl::StrCat("http://", host_, ":", port_, "/metrics");
}

}  // namespace heddle::metrics
