// File: control/api/daemon_view.h
//
// What the control API can ask of the running daemon. heddled implements DaemonView over its
// ports, stats and config; tests implement it with fixed data. The gRPC service
// (control/api/server.h) only ever talks to this interface, so it has no DPDK dependency.
// Every method is called from gRPC threads, concurrently; implementations must be thread-safe and
// must not block on the dataplane.
//
// The STORM methods (GetStorm, ListQps, SetStorm) and the lb ones (GetLb, SetLb) have defaults
// that answer UNIMPLEMENTED, so a daemon without them still builds; the control API passes a
// returned status to the client with its code and message unchanged, so the messages are written
// for the operator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heddle::api {

struct PortView {
  std::string name;
  std::string role;      // "host" | "uplink"
  std::string device;    // PCI address or vdev devargs as configured
  std::string driver;    // rte_eth_dev_info.driver_name, e.g. "net_pcap", "mlx5_pci"
  uint32_t port_id = 0;  // DPDK port id
  bool link_up = false;
  uint32_t speed_mbps = 0;
  bool full_duplex = false;
  std::string mac;  // "02:00:00:00:00:01"
  uint32_t rx_queues = 0, tx_queues = 0;
  uint32_t mtu = 0;
  std::string peer;  // egress port name for packets received here
};

struct PortStatsView {
  std::string name;
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;  // dataplane counters
  // Driver counters (rte_eth_stats): missed by the NIC, errors, mbuf allocation failures.
  uint64_t hw_rx_missed = 0, hw_rx_errors = 0, hw_tx_errors = 0, hw_rx_nombuf = 0;
  // RoCEv2 packets received on this port by opcode class; names from pkt::RoceClassName.
  std::vector<std::pair<std::string, uint64_t>> roce_by_class;
};

struct LcoreView {
  uint32_t lcore_id = 0;
  std::string role;  // "main" | "worker"
  uint64_t busy_loops = 0, idle_loops = 0;
};

struct DropView {
  std::string reason;  // stable name, e.g. "ipv4-truncated"
  std::string description;
  uint64_t packets = 0;
};

struct StatusView {
  std::string version;
  uint64_t uptime_seconds = 0;
  uint32_t pid = 0;
  std::string config_path;
  std::vector<LcoreView> lcores;
  std::vector<PortView> ports;
  std::string metrics_url;  // "" when metrics are off
};

struct RdmaPortView {
  uint32_t port_num = 0;
  std::string state;                                   // "active", "down", ...
  uint32_t active_mtu = 0;                             // bytes
  std::string link_layer;                              // "Ethernet" | "InfiniBand"
  std::vector<std::pair<uint32_t, std::string>> gids;  // (index, "fe80::...")
};
struct RdmaDeviceView {
  std::string name;  // "mlx5_0"
  std::string node_guid;
  std::string fw_ver;
  std::vector<RdmaPortView> ports;
};
struct RdmaView {
  std::vector<RdmaDeviceView> devices;  // empty is a normal state
  std::string note;                     // e.g. "no RDMA device found"
};

// One STORM level (docs/storm.md §3), with the counters of the stages that act on it.
struct StormLevelView {
  uint32_t level = 0;  // 0 = lowest; K-1 served first
  uint32_t dscp = 0;
  int32_t pcp = -1;  // -1: PCP kept
  // Effective remaining size range of requests at this level: (r_min, r_max] bytes; r_max = 0
  // means unbounded (the lowest level). Level K-1-i covers (c_i, c_{i+1}], see docs/storm.md §3.
  uint64_t r_min = 0, r_max = 0;
  bool control = false;  // the control level (ACK/NAK, CNP, READ request, atomic ACK)
  uint64_t tagged_packets = 0, tagged_bytes = 0;  // storm-tag stage
  // Strict-priority egress; the depth is packets queued now.
  uint64_t egress_tx_packets = 0, egress_drops = 0, egress_queue_depth = 0;
};

// The STORM state in force and its counters, summed over workers.
// How one port serves the STORM levels (storm.egress, docs/storm.md §6.7).
struct StormEgressLevelView {
  uint32_t level = 0, tc = 0;
  uint32_t first_queue = 0, queues = 0;  // the TC's TX queues the workers use
};
struct StormEgressPortView {
  std::string port;
  std::string configured;        // storm.egress for this port: "software" | "dcb" | "auto"
  std::string mode;              // in force: "software" | "dcb"
  std::string fallback;          // why `auto` serves this port from software ("" otherwise)
  uint32_t traffic_classes = 0;  // with dcb
  std::vector<StormEgressLevelView> levels;  // with dcb: level -> TC, queues
};

struct StormView {
  bool enabled = false;
  uint32_t levels = 0;
  std::string mode;  // "per-message" | "per-packet"
  bool auto_cutoffs = false;
  std::vector<uint64_t> cutoffs;  // c_1 < ... < c_{K-1}, bytes (the ones in use, auto or static)
  uint32_t control_level = 0;
  double beta = 0;
  uint64_t backlog_max = 0;
  uint64_t unknown_size = 0;   // per-message R of a request of unknown size (storm.unknown_size)
  std::string backlog_source;  // "none" | "egress" | "host"
  uint64_t generation = 0;     // bumps on every published change
  uint32_t auto_interval_ms = 0;
  uint64_t auto_publications = 0;
  std::vector<StormLevelView> per_level;
  uint64_t qp_live = 0, qp_capacity = 0, qp_table_full = 0, qp_evicted_idle = 0,
           qp_evicted_on_insert = 0;
  uint64_t requests_started = 0, requests_completed = 0, orphans = 0, abandoned = 0, duplicates = 0,
           psn_jumps = 0, bogus_length = 0, overrun = 0;
  uint64_t host_tables = 0, host_qps = 0, host_backlog_hits = 0;
  uint64_t host_pairs = 0, host_ambiguous_pairs = 0;  // (peer, local QPN) keys; of which unpaired
  std::vector<std::string> host_errors;               // one line per shim table refused
  // Response join and fabric guard (docs/storm.md §6.1, §6.5), summed over workers.
  uint64_t resp_joined_local = 0, resp_joined_remote = 0, resp_no_pair = 0, resp_no_entry = 0,
           resp_ring_full = 0, resp_malformed = 0;
  uint64_t acks_advanced = 0, acks_old = 0, acks_ahead = 0, fabric_guarded = 0;
  // READ responses the host sends as responder (docs/storm.md §6.6), summed over workers: the
  // streams, the side table, the response window and the READ join
  // (pipeline::StormWorkerCounters has the meanings).
  uint64_t read_sized = 0, read_unknown = 0, read_orphans = 0, read_late = 0, read_duplicates = 0,
           read_psn_jumps = 0, read_abandoned = 0, read_overrun = 0, read_malformed = 0;
  uint64_t read_live = 0, read_capacity = 0, read_table_full = 0, read_evicted = 0,
           response_guarded = 0;
  uint64_t rreq_local = 0, rreq_remote = 0, rreq_no_pair = 0, rreq_no_entry = 0, rreq_ring_full = 0,
           rreq_malformed = 0, rreq_pending_full = 0, rreq_stale = 0, rreq_too_late = 0;
  std::vector<StormEgressPortView> egress_ports;  // one per port, in config order
};

// One tracked QP (an entry of a worker's QpTable, docs/storm.md §2).
struct QpView {
  uint32_t worker = 0, qpn = 0;
  std::string direction;  // "request" | "response"
  std::string kind;       // "write" | "read" | "send" | "atomic" | "-"
  uint32_t level = 0;
  std::string dst;  // destination IPv4 dotted, or "ipv6"
  bool size_known = false, in_progress = false;
  uint64_t size = 0, sent = 0, remaining = 0;
  uint64_t backlog_bytes = 0;  // B for the configured source
  uint32_t egress_held = 0;    // packets held in heddled
  uint64_t host_backlog = 0;   // bytes, verbs shim
  uint64_t completed = 0;      // requests completed on the QP
  uint32_t idle_ms = 0;
  // Response join (docs/storm.md §6.1): set when a response was joined to the QP.
  bool acked = false;
  uint32_t acked_psn = 0;  // highest PSN acknowledged (ACK/NAK, READ responses)
  uint32_t unacked = 0;    // packets sent, or READ responses expected, after acked_psn
};

// A change to the STORM settings, applied as one batch (all of it or nothing). Fields not set are
// left as they are.
struct StormUpdate {
  std::optional<uint32_t> levels;
  std::optional<std::vector<uint64_t>> cutoffs;  // exactly levels-1 strictly increasing values
  bool cutoffs_auto = false;                     // switch to auto cutoffs (exclusive with cutoffs)
  std::optional<std::string> mode;
  std::optional<std::vector<uint32_t>> dscp;  // one per level
  std::optional<std::vector<int32_t>> pcp;    // one per level, -1 keeps
  std::optional<uint32_t> control_level;
  std::optional<double> beta;
  std::optional<uint32_t> unknown_size;  // 1..4294967295
};

// One path of a path set (docs/pin.md §1) and the bytes the pin-select stages sent on it.
struct LbPathView {
  uint32_t index = 0;    // in its set
  std::string port;      // uplink port name
  uint32_t entropy = 0;  // UDP source port or IPv6 flow label
  uint64_t bytes = 0, packets = 0;
};
struct LbPathSetView {
  uint32_t set = 0;
  std::string prefix;  // "10.1.0.0/16", or "default"
  std::vector<LbPathView> paths;
  // Jain's fairness index of the paths' bytes, (sum x)^2 / (n sum x^2): 1 is perfectly even, 1/n
  // all on one path; 0 when nothing was sent yet.
  double jain_index = 0;
};
struct LbCounterView {
  std::string name;  // stable name ("pinned-flows", "joined-local", ...)
  std::string description;
  uint64_t value = 0;
};

// PIN and the balancer in force, and their counters summed over workers.
struct LbView {
  bool enabled = false;
  std::string balancer;  // "ecmp" | "rps" | "round-robin" | "flowlet" | "reps" | "adaptive"
  bool pin = false;
  uint64_t threshold_bytes = 0;  // in force
  bool threshold_auto = false;   // derived: one bandwidth-delay product
  std::string pin_policy, flow_unit, crossing, entropy;
  uint64_t generation = 0;     // bumps on every published change
  bool feedback_join = false;  // a host index is published: feedback reaches the balancers
  uint64_t pinned_flows = 0, sprayed_flows = 0, pinned_packets = 0, sprayed_packets = 0;
  uint64_t pinned_bytes = 0, sprayed_bytes = 0, stateless_bytes = 0;
  uint64_t flows_live = 0, flow_capacity = 0;
  std::vector<LbPathSetView> sets;      // the first sets (pipeline::kLbReportedSets)
  std::vector<LbCounterView> counters;  // every selector and stage counter
};

// A change to PIN and the balancer, applied as one publication. Fields not set stay as they are.
struct LbUpdate {
  std::optional<std::string> balancer;
  std::optional<uint64_t> threshold_bytes;  // 1..2^31
  bool threshold_auto = false;              // back to one bandwidth-delay product
  std::optional<std::string> pin_policy;    // "hash" | "least-loaded" | "balancer"
  std::optional<bool> pin;
};

// ---- Nüwa forwarding artifacts (docs/nuwa-install.md) -------------------------------------------
// One installed (or examined) host artifact.
struct ArtifactView {
  uint64_t id = 0;     // install number this daemon gave it (1, 2, ...); 0: not installed
  std::string source;  // the file name heddlectl sent, or the configured fwd.artifact path
  int64_t installed_unix_ms = 0;
  uint64_t bytes = 0;
  uint32_t version = 0;
  uint32_t checksum = 0;  // CRC-32C the header carries
  uint64_t fabric_digest = 0;
  std::string fabric;  // the fabric's name
  std::string role;    // the artifact's role name ("host")
  std::string node;    // this host as the artifact numbers it, "host[3] (10.0.0.3)"
  uint32_t host = 0;   // its index
  std::string shape;   // "2 tiers, m 4x4, w 1x4, 1 plane"
  std::string hash;    // "crc32 seed 0x1234" or "unknown"
  uint32_t max_paths = 0;
  bool rail_local = false;
  uint32_t classes = 0, node_masks = 0, overrides = 0;
  uint32_t path_sets = 0;  // distinct path sets the table holds
  uint32_t prefixes = 0;   // prefixes with a path set
  uint32_t no_path = 0;    // prefixes explicitly without one (unreachable, this host)
};

struct ArtifactStateView {
  std::string node;    // fwd.node as configured
  std::string fabric;  // fwd.fabric ("" = any)
  std::optional<ArtifactView> installed;
  std::vector<ArtifactView> history;  // earlier installs still kept, newest first
  uint64_t generation = 0;            // path tables published from artifacts (installs, rollbacks)
  uint64_t installs = 0, rejected = 0, rollbacks = 0;
};

struct ArtifactInstall {
  std::string bytes;   // the artifact file's content
  std::string source;  // a name for it (the client's file name); shown by `artifact show`
  bool dry_run = false;
};

struct ArtifactDiffLine {
  std::string field;  // "fabric_digest", "shape", "overrides", ...
  std::string installed, given;
};
// A destination prefix whose path set differs; "-" where one side has no such prefix.
struct ArtifactPathDiff {
  std::string prefix;
  std::string installed, given;
};
struct ArtifactDiffView {
  ArtifactView installed, given;
  std::vector<ArtifactDiffLine> fields;
  std::vector<ArtifactPathDiff> paths;
  uint32_t prefixes_same = 0;
};

class DaemonView {
 public:
  virtual ~DaemonView() = default;
  virtual StatusView GetStatus() = 0;
  virtual std::vector<PortView> GetPorts() = 0;
  virtual std::vector<PortStatsView> GetPortStats() = 0;
  virtual std::vector<LcoreView> GetLcores() = 0;
  virtual std::vector<DropView> GetDrops() = 0;  // every reason, zeros included
  virtual std::string GetConfigYaml() = 0;
  virtual RdmaView GetRdma() = 0;

  // STORM. Errors reach heddlectl as they are: FailedPrecondition when storm is disabled,
  // InvalidArgument for an update the daemon refuses (with its reason), DeadlineExceeded when a
  // change could not be published in time. Do not return Unavailable: clients read that as "the
  // daemon is not running".
  //
  // The state in force; FailedPrecondition when storm is disabled.
  virtual absl::StatusOr<StormView> GetStorm() { return StormUnimplemented(); }
  // At most `top` (1..1000) tracked QPs, largest first by `sort`: "backlog" (backlog_bytes),
  // "remaining" or "idle" (idle_ms). The server checks both arguments before calling.
  virtual absl::StatusOr<std::vector<QpView>> ListQps(uint32_t top, const std::string& sort) {
    return StormUnimplemented();
  }
  // Applies `update` atomically, without restart or packet loss, and returns the state now in
  // force. The server has already refused an empty update, cutoffs together with cutoffs_auto, a
  // mode other than "per-message"/"per-packet" and a negative or non-finite beta; the rest (list
  // lengths against levels, ranges, ordering) is the daemon's to check.
  virtual absl::StatusOr<StormView> SetStorm(const StormUpdate& update) {
    return StormUnimplemented();
  }

  // PIN and the load balancer (docs/pin.md). The same error rules as STORM: FailedPrecondition
  // when lb is disabled, InvalidArgument for a change the daemon refuses.
  virtual absl::StatusOr<LbView> GetLb() { return LbUnimplemented(); }
  // Applies `update` as one publication, without restart or a moved message; returns the state
  // now in force. The server has already refused an empty update and threshold_bytes together
  // with threshold_auto; names and ranges are the daemon's to check.
  virtual absl::StatusOr<LbView> SetLb(const LbUpdate& update) { return LbUnimplemented(); }

  // Nüwa artifacts. FailedPrecondition when fwd is not configured (or, for diff and rollback,
  // when there is nothing to compare with or go back to); InvalidArgument for an artifact the
  // daemon refuses, with the reason — the running artifact then stays. Install and rollback
  // publish one path table (RCU) and return once the old one can no longer be read.
  virtual absl::StatusOr<ArtifactView> InstallArtifact(const ArtifactInstall& install) {
    return FwdUnimplemented();
  }
  virtual absl::StatusOr<ArtifactStateView> GetArtifact() { return FwdUnimplemented(); }
  virtual absl::StatusOr<ArtifactDiffView> DiffArtifact(const std::string& bytes) {
    return FwdUnimplemented();
  }
  // `to`: an install id from the history; unset: the install before the running one.
  virtual absl::StatusOr<ArtifactView> RollbackArtifact(std::optional<uint64_t> to) {
    return FwdUnimplemented();
  }

 private:
  static absl::Status FwdUnimplemented() {
    return absl::UnimplementedError("this heddled has no forwarding artifact control yet");
  }
  static absl::Status LbUnimplemented() {
    return absl::UnimplementedError("this heddled has no load-balancing control yet");
  }
  static absl::Status StormUnimplemented() {
    return absl::UnimplementedError("this heddled has no STORM control yet");
  }
};

}  // namespace heddle::api
