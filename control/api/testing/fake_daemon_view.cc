// File: control/api/testing/fake_daemon_view.cc
#include "control/api/testing/fake_daemon_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace heddle::api::testing {

FakeDaemonView::FakeDaemonView() {
  status.version = "0.1.0-test";
  status.uptime_seconds = 93784;  // 1d 02:03:04
  status.pid = 4242;
  status.config_path = "/etc/heddle/heddled.yaml";
  status.metrics_url = "http://127.0.0.1:9464/metrics";
  status.lcores = {
      {.lcore_id = 0, .role = "main", .busy_loops = 0, .idle_loops = 0},
      {.lcore_id = 2, .role = "worker", .busy_loops = 250, .idle_loops = 750},
  };
  PortView host;
  host.name = "host0";
  host.role = "host";
  host.device = "net_pcap0,iface=veth0";
  host.driver = "net_pcap";
  host.port_id = 0;
  host.link_up = true;
  host.speed_mbps = 10000;
  host.full_duplex = true;
  host.mac = "02:00:00:00:00:01";
  host.rx_queues = 1;
  host.tx_queues = 1;
  host.mtu = 1500;
  host.peer = "uplink0";
  PortView uplink;
  uplink.name = "uplink0";
  uplink.role = "uplink";
  uplink.device = "0000:3b:00.0";
  uplink.driver = "mlx5_pci";
  uplink.port_id = 1;
  uplink.link_up = false;
  uplink.speed_mbps = 0;
  uplink.mac = "02:00:00:00:00:02";
  uplink.rx_queues = 2;
  uplink.tx_queues = 2;
  uplink.mtu = 9000;
  uplink.peer = "host0";
  status.ports = {host, uplink};

  PortStatsView s0;
  s0.name = "host0";
  s0.rx_packets = 1000;
  s0.rx_bytes = 1234567;
  s0.tx_packets = 990;
  s0.tx_bytes = 1200000;
  s0.hw_rx_missed = 3;
  s0.hw_rx_errors = 1;
  s0.hw_tx_errors = 0;
  s0.hw_rx_nombuf = 7;
  s0.roce_by_class = {{"rdma-write", 600}, {"send", 300}, {"ack", 0}};
  PortStatsView s1;
  s1.name = "uplink0";
  s1.rx_packets = 555;
  s1.rx_bytes = 66600;
  s1.tx_packets = 1000;
  s1.tx_bytes = 1234567;
  s1.roce_by_class = {{"rdma-write", 0}, {"send", 0}, {"ack", 550}};
  port_stats = {s0, s1};

  drops = {
      {.reason = "ipv4-truncated", .description = "IPv4 header shorter than IHL", .packets = 5},
      {.reason = "no-route", .description = "no forwarding entry", .packets = 0},
      {.reason = "bth-bad-opcode", .description = "reserved BTH opcode", .packets = 12},
  };

  config_yaml = "ports:\n  - name: host0\n    role: host\n  - name: uplink0\n    role: uplink\n";

  RdmaDeviceView dev;
  dev.name = "mlx5_0";
  dev.node_guid = "0c42:a103:0012:3456";
  dev.fw_ver = "22.36.1010";
  RdmaPortView rport;
  rport.port_num = 1;
  rport.state = "active";
  rport.active_mtu = 4096;
  rport.link_layer = "Ethernet";
  rport.gids = {{0, "fe80::42:aff:fe00:1"}, {3, "::ffff:10.0.0.1"}};
  dev.ports = {rport};
  rdma.devices = {dev};

  lb.enabled = true;
  lb.balancer = "reps";
  lb.pin = true;
  lb.threshold_bytes = 100000;
  lb.threshold_auto = true;
  lb.pin_policy = "hash";
  lb.flow_unit = "request";
  lb.crossing = "stay-pinned";
  lb.entropy = "udp-sport";
  lb.generation = 3;
  lb.pinned_flows = 900;
  lb.sprayed_flows = 100;
  lb.pinned_packets = 4000;
  lb.sprayed_packets = 60000;
  lb.pinned_bytes = 4'200'000;
  lb.sprayed_bytes = 63'000'000;
  lb.flows_live = 12;
  lb.flow_capacity = 65536;
  LbPathSetView set;
  set.set = 0;
  set.prefix = "default";
  for (uint32_t i = 0; i < 4; ++i) {
    set.paths.push_back({i, i < 2 ? "uplink0" : "uplink1", 0xc000 + i % 2,
                         i == 3 ? 10'000'000u : 20'000'000u, i == 3 ? 10000u : 20000u});
  }
  set.jain_index = 0.9423;  // 20, 20, 20, 10 MB
  lb.sets = {set};

  ArtifactView art;
  art.id = 2;
  art.source = "pod-a-host.nuwa";
  art.installed_unix_ms = 1'700'000'000'000;
  art.bytes = 1432;
  art.version = 1;
  art.checksum = 0xdeadbeef;
  art.fabric_digest = 0x0123456789abcdefull;
  art.fabric = "pod-a";
  art.role = "host";
  art.node = "host[3] (10.0.0.3)";
  art.host = 3;
  art.shape = "2 tiers, m 4x4, w 1x2, 1 plane";
  art.hash = "crc32 seed 0x00000007 bits 0/8/0";
  art.max_paths = 16;
  art.classes = 1;
  art.node_masks = 2;
  art.overrides = 1;
  art.path_sets = 3;
  art.prefixes = 4;
  art.no_path = 1;
  artifact.node = "host[3]";
  artifact.fabric = "pod-a";
  artifact.installed = art;
  ArtifactView old = art;
  old.id = 1;
  old.source = "/etc/heddle/pod-a-host.nuwa";
  old.checksum = 0x01020304;
  old.node_masks = 0;
  old.overrides = 0;
  artifact.history = {old};
  artifact.generation = 2;
  artifact.installs = 2;
  artifact.rejected = 1;
  diff.installed = art;
  diff.given = old;
  diff.fields = {{"checksum", "deadbeef", "01020304"}, {"overrides", "1", "0"}};
  diff.paths = {{"10.0.4.0/22", "2 paths: uplink1 0xc000 @02:01:01:00:00:01", "-"}};
  diff.prefixes_same = 3;
  lb.counters = {{"pinned-flows", "messages started pinned", 900},
                 {"join-no-index", "reverse packets with feedback but no host index to join", 77}};

  storm.enabled = true;
  storm.levels = 4;
  storm.mode = "per-message";
  storm.auto_cutoffs = false;
  storm.cutoffs = {4096, 65536, 1048576};
  storm.control_level = 3;
  storm.beta = 1.5;
  storm.backlog_max = 16777216;
  storm.unknown_size = 4294967295u;
  storm.backlog_source = "egress";
  storm.generation = 7;
  storm.auto_interval_ms = 1000;
  storm.auto_publications = 0;
  storm.per_level = LevelsFor(storm.cutoffs, storm.control_level);
  const uint32_t dscp[] = {0, 10, 18, 26};
  for (StormLevelView& l : storm.per_level) {
    l.dscp = dscp[l.level];
    l.tagged_packets = 1000 + l.level;
    l.tagged_bytes = 2000000 + l.level;
    l.egress_tx_packets = 900 + l.level;
    l.egress_drops = l.level == 0 ? 17 : 0;
    l.egress_queue_depth = l.level == 0 ? 5 : 0;
  }
  storm.per_level[1].pcp = 5;  // level 2
  storm.qp_live = 321;
  storm.qp_capacity = 131072;
  storm.qp_table_full = 2;
  storm.qp_evicted_idle = 40;
  storm.qp_evicted_on_insert = 3;
  storm.egress_ports = {
      {.port = "host0", .configured = "software", .mode = "software"},
      {.port = "uplink0",
       .configured = "dcb",
       .mode = "dcb",
       .traffic_classes = 4,
       .levels = {{0, 0, 0, 2}, {1, 1, 64, 2}, {2, 2, 96, 2}, {3, 3, 112, 2}}},
      {.port = "uplink1",
       .configured = "auto",
       .mode = "software",
       .fallback = "port uplink1: driver net_ring has no DCB"},
  };
  storm.requests_started = 5000;
  storm.requests_completed = 4990;
  storm.orphans = 4;
  storm.abandoned = 1;
  storm.duplicates = 12;
  storm.psn_jumps = 6;
  storm.bogus_length = 0;
  storm.overrun = 2;
  storm.host_tables = 2;
  storm.host_qps = 48;
  storm.host_backlog_hits = 777;
  storm.host_pairs = 46;
  storm.host_ambiguous_pairs = 1;
  storm.resp_joined_local = 900;
  storm.resp_joined_remote = 300;
  storm.resp_no_pair = 12;
  storm.resp_no_entry = 5;
  storm.resp_ring_full = 0;
  storm.resp_malformed = 1;
  storm.acks_advanced = 1100;
  storm.acks_old = 95;
  storm.acks_ahead = 5;
  storm.fabric_guarded = 42;
  storm.read_sized = 60;
  storm.read_unknown = 7;
  storm.read_orphans = 2;
  storm.read_late = 3;
  storm.read_duplicates = 11;
  storm.read_psn_jumps = 4;
  storm.read_abandoned = 1;
  storm.read_overrun = 0;
  storm.read_malformed = 5;
  storm.read_live = 9;
  storm.read_capacity = 32768;
  storm.read_table_full = 6;
  storm.read_evicted = 8;
  storm.response_guarded = 13;
  storm.rreq_local = 40;
  storm.rreq_remote = 23;
  storm.rreq_no_pair = 2;
  storm.rreq_no_entry = 21;
  storm.rreq_ring_full = 0;
  storm.rreq_malformed = 1;
  storm.rreq_pending_full = 14;
  storm.rreq_stale = 15;
  storm.rreq_too_late = 16;

  QpView a;
  a.worker = 0;
  a.qpn = 0x11;
  a.direction = "request";
  a.kind = "write";
  a.level = 2;
  a.dst = "10.0.0.2";
  a.size_known = true;
  a.in_progress = true;
  a.size = 65536;
  a.sent = 16384;
  a.remaining = 49152;
  a.backlog_bytes = 8192;
  a.egress_held = 2;
  a.host_backlog = 0;
  a.completed = 31;
  a.idle_ms = 3;
  a.acked = true;
  a.acked_psn = 1000;
  a.unacked = 4;
  QpView b;
  b.worker = 1;
  b.qpn = 0x2a;
  b.direction = "request";
  b.kind = "send";
  b.level = 3;
  b.dst = "10.0.0.3";
  b.size_known = false;
  b.in_progress = true;
  b.size = 0;
  b.sent = 2048;
  b.remaining = 0;
  b.backlog_bytes = 1048576;
  b.egress_held = 0;
  b.host_backlog = 1048576;
  b.completed = 9;
  b.idle_ms = 0;
  QpView c;
  c.worker = 0;
  c.qpn = 0xabcdef;
  c.direction = "response";
  c.kind = "-";
  c.level = 0;
  c.dst = "ipv6";
  c.size_known = false;
  c.in_progress = false;
  c.completed = 0;
  c.idle_ms = 9000;
  qps = {a, b, c};
}

std::vector<StormLevelView> FakeDaemonView::LevelsFor(const std::vector<uint64_t>& cutoffs,
                                                      uint32_t control_level) {
  const uint32_t k = static_cast<uint32_t>(cutoffs.size()) + 1;
  std::vector<StormLevelView> levels;
  for (uint32_t i = 0; i < k; ++i) {  // level K-1-i covers (c_i, c_{i+1}], c_0 = 0, c_K = inf
    StormLevelView l;
    l.level = k - 1 - i;
    l.r_min = i == 0 ? 0 : cutoffs[i - 1];
    l.r_max = i == k - 1 ? 0 : cutoffs[i];
    l.control = l.level == control_level;
    levels.push_back(l);
  }
  return levels;
}

StatusView FakeDaemonView::GetStatus() {
  std::lock_guard<std::mutex> lock(mu);
  return status;
}
std::vector<PortView> FakeDaemonView::GetPorts() {
  std::lock_guard<std::mutex> lock(mu);
  return status.ports;
}
std::vector<PortStatsView> FakeDaemonView::GetPortStats() {
  std::lock_guard<std::mutex> lock(mu);
  return port_stats;
}
std::vector<LcoreView> FakeDaemonView::GetLcores() {
  std::lock_guard<std::mutex> lock(mu);
  return status.lcores;
}
std::vector<DropView> FakeDaemonView::GetDrops() {
  std::lock_guard<std::mutex> lock(mu);
  return drops;
}
std::string FakeDaemonView::GetConfigYaml() {
  std::lock_guard<std::mutex> lock(mu);
  return config_yaml;
}
RdmaView FakeDaemonView::GetRdma() {
  std::lock_guard<std::mutex> lock(mu);
  return rdma;
}

absl::StatusOr<StormView> FakeDaemonView::GetStorm() {
  std::lock_guard<std::mutex> lock(mu);
  if (!storm_error.ok()) return storm_error;
  return storm;
}

absl::StatusOr<std::vector<QpView>> FakeDaemonView::ListQps(uint32_t top, const std::string& sort) {
  std::lock_guard<std::mutex> lock(mu);
  last_top = top;
  last_sort = sort;
  if (!storm_error.ok()) return storm_error;
  std::vector<QpView> out = qps;
  auto key = [&sort](const QpView& q) -> uint64_t {
    if (sort == "remaining") return q.remaining;
    if (sort == "idle") return q.idle_ms;
    return q.backlog_bytes;
  };
  std::stable_sort(out.begin(), out.end(),
                   [&key](const QpView& x, const QpView& y) { return key(x) > key(y); });
  if (out.size() > top) out.resize(top);
  return out;
}

absl::StatusOr<StormView> FakeDaemonView::SetStorm(const StormUpdate& update) {
  std::lock_guard<std::mutex> lock(mu);
  last_update = update;
  if (!storm_error.ok()) return storm_error;
  if (!set_storm_error.ok()) return set_storm_error;
  StormView next = storm;
  if (update.levels) next.levels = *update.levels;
  if (update.cutoffs) {
    next.cutoffs = *update.cutoffs;
    next.auto_cutoffs = false;
  }
  if (update.cutoffs_auto) next.auto_cutoffs = true;
  if (next.cutoffs.size() + 1 != next.levels) {
    return absl::InvalidArgumentError(absl::StrCat("storm.cutoffs: ", next.cutoffs.size(),
                                                   " values for ", next.levels, " levels; give ",
                                                   next.levels - 1));
  }
  if (update.mode) next.mode = *update.mode;
  if (update.control_level) next.control_level = *update.control_level;
  if (next.control_level >= next.levels) next.control_level = next.levels - 1;
  if (update.beta) next.beta = *update.beta;
  if (update.unknown_size) next.unknown_size = *update.unknown_size;
  std::vector<StormLevelView> levels = LevelsFor(next.cutoffs, next.control_level);
  for (StormLevelView& l : levels) {
    for (const StormLevelView& old : storm.per_level) {
      if (old.level == l.level) {
        l.dscp = old.dscp;
        l.pcp = old.pcp;
      }
    }
    if (update.dscp) {
      if (update.dscp->size() != next.levels) {
        return absl::InvalidArgumentError("storm.dscp: one value per level");
      }
      l.dscp = (*update.dscp)[l.level];
    }
    if (update.pcp) {
      if (update.pcp->size() != next.levels) {
        return absl::InvalidArgumentError("storm.pcp: one value per level");
      }
      l.pcp = (*update.pcp)[l.level];
    }
  }
  next.per_level = std::move(levels);
  ++next.generation;
  storm = next;
  return storm;
}

}  // namespace heddle::api::testing

namespace heddle::api::testing {

absl::StatusOr<LbView> FakeDaemonView::GetLb() {
  std::lock_guard<std::mutex> lock(mu);
  if (!lb_error.ok()) return lb_error;
  return lb;
}

absl::StatusOr<LbView> FakeDaemonView::SetLb(const LbUpdate& update) {
  std::lock_guard<std::mutex> lock(mu);
  last_lb_update = update;
  if (!lb_error.ok()) return lb_error;
  LbView next = lb;
  if (update.balancer) {
    static const char* const kKinds[] = {"ecmp",    "rps",  "round-robin",
                                         "flowlet", "reps", "adaptive"};
    if (std::find(std::begin(kKinds), std::end(kKinds), *update.balancer) == std::end(kKinds)) {
      return absl::InvalidArgumentError(
          absl::StrCat("lb.balancer: unknown load balancer \"", *update.balancer, "\""));
    }
    next.balancer = *update.balancer;
  }
  if (update.threshold_bytes) {
    next.threshold_bytes = *update.threshold_bytes;
    next.threshold_auto = false;
  }
  if (update.threshold_auto) {
    next.threshold_bytes = 100000;
    next.threshold_auto = true;
  }
  if (update.pin_policy) next.pin_policy = *update.pin_policy;
  if (update.pin) next.pin = *update.pin;
  ++next.generation;
  lb = next;
  return lb;
}

}  // namespace heddle::api::testing

namespace heddle::api::testing {

absl::StatusOr<ArtifactView> FakeDaemonView::InstallArtifact(const ArtifactInstall& install) {
  std::lock_guard<std::mutex> lock(mu);
  last_install = install;
  if (!artifact_error.ok()) return artifact_error;
  if (install.bytes.rfind("bad", 0) == 0) {
    if (!install.dry_run) ++artifact.rejected;
    return absl::InvalidArgumentError(absl::StrCat("artifact ", install.source,
                                                   ": checksum mismatch (header says 12345678, "
                                                   "content has 9abcdef0)"));
  }
  ArtifactView v = artifact.installed ? *artifact.installed : ArtifactView{};
  v.source = install.source;
  v.bytes = install.bytes.size();
  if (install.dry_run) {
    v.id = 0;
    return v;
  }
  v.id = artifact.installed ? artifact.installed->id + 1 : 1;
  if (artifact.installed) artifact.history.insert(artifact.history.begin(), *artifact.installed);
  artifact.installed = v;
  ++artifact.installs;
  ++artifact.generation;
  return v;
}

absl::StatusOr<ArtifactStateView> FakeDaemonView::GetArtifact() {
  std::lock_guard<std::mutex> lock(mu);
  if (!artifact_error.ok()) return artifact_error;
  return artifact;
}

absl::StatusOr<ArtifactDiffView> FakeDaemonView::DiffArtifact(const std::string& bytes) {
  std::lock_guard<std::mutex> lock(mu);
  last_diff_bytes = bytes;
  if (!artifact_error.ok()) return artifact_error;
  return diff;
}

absl::StatusOr<ArtifactView> FakeDaemonView::RollbackArtifact(std::optional<uint64_t> to) {
  std::lock_guard<std::mutex> lock(mu);
  last_rollback_to = to;
  if (!artifact_error.ok()) return artifact_error;
  size_t k = 0;
  if (to) {
    while (k < artifact.history.size() && artifact.history[k].id != *to) ++k;
  }
  if (k >= artifact.history.size()) {
    return absl::FailedPreconditionError("there is no earlier artifact to roll back to");
  }
  artifact.installed = artifact.history[k];
  artifact.history.erase(artifact.history.begin(),
                         artifact.history.begin() + static_cast<std::ptrdiff_t>(k) + 1);
  ++artifact.rollbacks;
  ++artifact.generation;
  return *artifact.installed;
}

}  // namespace heddle::api::testing
