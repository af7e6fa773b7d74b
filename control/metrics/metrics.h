// File: control/metrics/metrics.h
//
// Prometheus exposition of the dataplane's counters. The workers bump plain per-lcore counters
// (dataplane/pipeline/stats.h); nothing here touches the hot path. On every scrape,
// DataplaneCollectable takes ONE summed snapshot and turns it into metric families, so all the
// samples of one scrape describe the same instant and no per-lcore counter is read twice.
//
//   pipeline::DataplaneStats stats(num_ports, worker_lcores);
//   metrics::MetricsSources src;
//   src.snapshot = [&stats] { return stats.Snapshot(); };
//   src.ports = {{"host0", "host"}, {"uplink0", "uplink"}};
//   src.version = heddle::kVersion;
//   HEDDLE_ASSIGN_OR_RETURN(auto server, metrics::MetricsServer::Start("127.0.0.1:9464", src));
//   // Prometheus scrapes server->url() until `server` is destroyed.
//
// Families (all counters are monotonic sums over lcores):
//   heddle_port_{rx,tx}_{packets,bytes}_total{port,role}
//   heddle_port_hw_{rx_missed,rx_errors,tx_errors,rx_nombuf}_total{port,role}  (if hw_stats is set)
//   heddle_dataplane_drops_total{reason}      every reason, zeros included, so rate() works
//   heddle_roce_rx_packets_total{port,class}  every RoCE opcode class except "none"
//   heddle_lcore_poll_loops_total{lcore,state="busy"|"idle"}
//   heddle_storm_level_{packets,bytes}_total{level}, heddle_storm_qp_table_full_total,
//   heddle_storm_egress_{tx_packets,drops}_total{level}, heddle_storm_egress_queue_depth{level}
//                                             (if storm_levels > 0; levels 0..storm_levels-1)
//   heddle_storm_join_total{result}, heddle_storm_acks_total{result},
//   heddle_storm_fabric_guarded_total         (if storm_levels > 0 and storm_join is set)
//   heddle_storm_read_streams_total{result}, heddle_storm_read_responses_total{reason},
//   heddle_storm_response_window_guarded_total (if storm_levels > 0 and storm_reads is set)
//   heddle_storm_read_joins_total{result}     (also storm_reads().join: backlog source host)
//   heddle_lb_balancer{balancer} (1: the one in force), heddle_lb_pin_threshold_bytes,
//   heddle_lb_{flows,packets,bytes}_total{verdict}, heddle_lb_path_{bytes,packets}_total{set,path},
//   heddle_lb_path_jain_index{set}, heddle_lb_flow_entries{state}, heddle_lb_events_total{event}
//                                             (if lb is set: PIN, docs/pin.md)
//   heddle_fwd_artifact_installs_total{result="installed"|"rejected"|"rolled_back"},
//   heddle_fwd_artifact_generation, heddle_fwd_artifact_installed
//                                             (if fwd is set: Nüwa, docs/nuwa-install.md)
//   heddle_build_info{version} 1, heddle_uptime_seconds
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/pipeline/stats.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace heddle::metrics {

// Labels of one configured port, indexed like StatsSnapshot::ports.
struct PortLabel {
  std::string name;  // "uplink0"
  std::string role;  // "host" or "uplink"
};

// Counters the NIC keeps itself (DPDK rte_eth_stats), indexed like the ports.
struct HwPortStats {
  uint64_t rx_missed = 0, rx_errors = 0, tx_errors = 0, rx_nombuf = 0;
};

// STORM's response join and fabric guard (docs/storm.md §6.1, §6.5), summed over workers.
struct StormJoinCounters {
  uint64_t joined_local = 0, joined_remote = 0, no_pair = 0, no_entry = 0, ring_full = 0,
           malformed = 0;
  uint64_t acks_advanced = 0, acks_old = 0, acks_ahead = 0;
  uint64_t fabric_guarded = 0;
};

// READ responses the host sends as responder (docs/storm.md §6.6), summed over workers.
struct StormReadCounters {
  // Streams by how their size was known; `late` counts unknown ones sized after they started.
  uint64_t sized = 0, unknown = 0, orphans = 0, late = 0;
  // Responses out of the ordinary: old PSN, jump, Last lost, beyond the READ, no AETH; and
  // responses of QPs the READ stream table refused.
  uint64_t duplicates = 0, psn_jumps = 0, abandoned = 0, overrun = 0, malformed = 0, table_full = 0;
  uint64_t window_guarded = 0;  // streams and ACKs the response window lowered
  // The READ join (backlog source host): exported only when `join` is set.
  bool join = false;
  uint64_t local = 0, remote = 0, no_pair = 0, no_entry = 0, ring_full = 0, join_malformed = 0,
           pending_full = 0, stale = 0, too_late = 0;
};

// PIN and the load balancer (docs/pin.md), summed over workers. Bounded label sets: six balancer
// kinds, three verdicts, at most 8 path sets of at most 64 paths, the counters' stable names.
struct LbMetrics {
  std::vector<std::string> balancers;  // every kind, for heddle_lb_balancer
  std::string balancer;                // the one in force
  uint64_t threshold_bytes = 0;
  uint64_t pinned_flows = 0, sprayed_flows = 0;
  uint64_t pinned_packets = 0, sprayed_packets = 0, stateless_packets = 0;
  uint64_t pinned_bytes = 0, sprayed_bytes = 0, stateless_bytes = 0;
  uint64_t flows_live = 0, flow_capacity = 0;
  struct Path {
    uint64_t bytes = 0, packets = 0;
  };
  struct Set {
    uint32_t set = 0;
    std::vector<Path> paths;  // by path index
    double jain_index = 0;    // 0: nothing sent yet
  };
  std::vector<Set> sets;
  std::vector<std::pair<std::string, uint64_t>> events;  // (stable counter name, value)
};

// Nüwa artifact installs (docs/nuwa-install.md).
struct FwdMetrics {
  uint64_t installs = 0;  // artifacts installed (start-up and heddlectl artifact install)
  uint64_t rejected = 0;  // refused: the running artifact stayed
  uint64_t rollbacks = 0;
  uint64_t generation = 0;  // path tables published from artifacts
  bool installed = false;
};

// Where a scrape reads from. The callbacks run on the HTTP server's threads, one scrape at a time
// (DataplaneCollectable serializes them), never on a worker lcore.
struct MetricsSources {
  std::function<pipeline::StatsSnapshot()> snapshot;   // required
  std::function<std::vector<HwPortStats>()> hw_stats;  // optional, indexed like ports
  // Ports beyond the end of this list are labelled port="port<i>", role="unknown".
  std::vector<PortLabel> ports;
  std::string version;
  // storm.levels when STORM tagging is enabled, else 0 (its families are then not exported).
  int storm_levels = 0;
  // Optional: the number of levels to export now, when it can change at run time (set storm
  // levels). The daemon returns the most levels ever in force, so no series disappears.
  std::function<int()> storm_levels_now;
  // Optional: the response join's counters (the workers publish them once per housekeeping slice).
  std::function<StormJoinCounters()> storm_join;
  // Optional: the READ responses the host sends as responder.
  std::function<StormReadCounters()> storm_reads;
  // Optional: PIN and the load balancer (lb.enabled); its families are exported only when set.
  std::function<LbMetrics()> lb;
  // Optional: Nüwa artifact installs (fwd configured).
  std::function<FwdMetrics()> fwd;
};

// Builds the metric families from one snapshot per Collect(). Thread-safe.
class DataplaneCollectable : public prometheus::Collectable {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // `now` is injectable so tests can check heddle_uptime_seconds; uptime counts from construction.
  explicit DataplaneCollectable(MetricsSources sources,
                                Clock now = &std::chrono::steady_clock::now);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  MetricsSources sources_;
  Clock now_;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;  // one scrape at a time: the sources need not be reentrant
};

// An HTTP server (prometheus-cpp's pull Exposer over civetweb) serving /metrics.
class MetricsServer {
 public:
  // `listen` is "IPv4:port" (e.g. "127.0.0.1:9464"; "0.0.0.0:9464" for every interface) or
  // "[IPv6]:port"; port 0 picks a free port, reported by port() and url(). Fails with
  // InvalidArgument for a malformed address or a missing snapshot source, and with Unavailable
  // (or PermissionDenied) when the address cannot be bound, e.g.
  // "metrics.listen 127.0.0.1:9464: address already in use; choose another port or set
  // metrics.enabled: false". Never throws.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                              MetricsSources sources);
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // "http://127.0.0.1:9464/metrics", with the port actually bound.
  std::string url() const;
  uint16_t port() const { return port_; }

 private:
  MetricsServer(std::string host, uint16_t port, std::shared_ptr<DataplaneCollectable> collectable,
                std::unique_ptr<prometheus::Exposer> exposer);

  std::string host_;  // as given, brackets included for IPv6
  uint16_t port_;
  // Declared before exposer_ so the server stops (and no scrape can run) before it is destroyed.
  std::shared_ptr<DataplaneCollectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace heddle::metrics
