// File: control/api/server.cc
#include "control/api/server.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "control/api/heddle.grpc.pb.h"
#include "control/api/internal/unix_socket.h"

namespace heddle::api {

namespace {

constexpr mode_t kSocketDirMode = 0750;
constexpr mode_t kSocketMode = 0660;
// In-flight calls get this long to finish when the server stops; every RPC here is a snapshot read
// or, for SetStorm and SetLb, one publication.
constexpr auto kShutdownGrace = std::chrono::milliseconds(500);
// Requests are tiny except InstallArtifact and DiffArtifact, which carry an artifact file (a host
// artifact is a few KiB; kMaxArtifactBytes bounds it); anything bigger is a confused or hostile
// client.
constexpr size_t kMaxArtifactBytes = 4 << 20;
constexpr int kMaxRequestBytes = kMaxArtifactBytes + 64 * 1024;

void ToProto(const PortView& in, v1::Port* out) {
  out->set_name(in.name);
  out->set_role(in.role);
  out->set_device(in.device);
  out->set_driver(in.driver);
  out->set_port_id(in.port_id);
  out->set_link_up(in.link_up);
  out->set_speed_mbps(in.speed_mbps);
  out->set_full_duplex(in.full_duplex);
  out->set_mac(in.mac);
  out->set_rx_queues(in.rx_queues);
  out->set_tx_queues(in.tx_queues);
  out->set_mtu(in.mtu);
  out->set_peer(in.peer);
}

void ToProto(const LcoreView& in, v1::Lcore* out) {
  out->set_lcore_id(in.lcore_id);
  out->set_role(in.role);
  out->set_busy_loops(in.busy_loops);
  out->set_idle_loops(in.idle_loops);
  const double total = static_cast<double>(in.busy_loops) + static_cast<double>(in.idle_loops);
  out->set_busy_percent(total > 0 ? 100.0 * static_cast<double>(in.busy_loops) / total : 0.0);
}

void ToProto(const PortStatsView& in, v1::PortStats* out) {
  out->set_name(in.name);
  out->set_rx_packets(in.rx_packets);
  out->set_rx_bytes(in.rx_bytes);
  out->set_tx_packets(in.tx_packets);
  out->set_tx_bytes(in.tx_bytes);
  out->set_hw_rx_missed(in.hw_rx_missed);
  out->set_hw_rx_errors(in.hw_rx_errors);
  out->set_hw_tx_errors(in.hw_tx_errors);
  out->set_hw_rx_nombuf(in.hw_rx_nombuf);
  for (const auto& [name, packets] : in.roce_by_class) {
    v1::RoceClassCount* c = out->add_roce_by_class();
    c->set_class_name(name);
    c->set_packets(packets);
  }
}

void ToProto(const RdmaDeviceView& in, v1::RdmaDevice* out) {
  out->set_name(in.name);
  out->set_node_guid(in.node_guid);
  out->set_fw_ver(in.fw_ver);
  for (const RdmaPortView& p : in.ports) {
    v1::RdmaPort* port = out->add_ports();
    port->set_port_num(p.port_num);
    port->set_state(p.state);
    port->set_active_mtu(p.active_mtu);
    port->set_link_layer(p.link_layer);
    for (const auto& [index, gid] : p.gids) {
      v1::Gid* g = port->add_gids();
      g->set_index(index);
      g->set_gid(gid);
    }
  }
}

void ToProto(const StormView& in, v1::Storm* out) {
  out->set_enabled(in.enabled);
  out->set_levels(in.levels);
  out->set_mode(in.mode);
  out->set_auto_cutoffs(in.auto_cutoffs);
  for (uint64_t c : in.cutoffs) out->add_cutoffs(c);
  out->set_control_level(in.control_level);
  out->set_beta(in.beta);
  out->set_backlog_max(in.backlog_max);
  out->set_unknown_size(in.unknown_size);
  out->set_backlog_source(in.backlog_source);
  out->set_generation(in.generation);
  out->set_auto_interval_ms(in.auto_interval_ms);
  out->set_auto_publications(in.auto_publications);
  for (const StormLevelView& l : in.per_level) {
    v1::StormLevel* level = out->add_per_level();
    level->set_level(l.level);
    level->set_dscp(l.dscp);
    level->set_pcp(l.pcp);
    level->set_r_min(l.r_min);
    level->set_r_max(l.r_max);
    level->set_control(l.control);
    level->set_tagged_packets(l.tagged_packets);
    level->set_tagged_bytes(l.tagged_bytes);
    level->set_egress_tx_packets(l.egress_tx_packets);
    level->set_egress_drops(l.egress_drops);
    level->set_egress_queue_depth(l.egress_queue_depth);
  }
  for (const StormEgressPortView& e : in.egress_ports) {
    v1::StormEgressPort* port = out->add_egress_ports();
    port->set_port(e.port);
    port->set_configured(e.configured);
    port->set_mode(e.mode);
    port->set_fallback(e.fallback);
    port->set_traffic_classes(e.traffic_classes);
    for (const StormEgressLevelView& l : e.levels) {
      v1::StormEgressLevel* level = port->add_levels();
      level->set_level(l.level);
      level->set_tc(l.tc);
      level->set_first_queue(l.first_queue);
      level->set_queues(l.queues);
    }
  }
  v1::StormQpTable* table = out->mutable_qp_table();
  table->set_live(in.qp_live);
  table->set_capacity(in.qp_capacity);
  table->set_table_full(in.qp_table_full);
  table->set_evicted_idle(in.qp_evicted_idle);
  table->set_evicted_on_insert(in.qp_evicted_on_insert);
  v1::StormTracker* tracker = out->mutable_tracker();
  tracker->set_requests_started(in.requests_started);
  tracker->set_requests_completed(in.requests_completed);
  tracker->set_orphans(in.orphans);
  tracker->set_abandoned(in.abandoned);
  tracker->set_duplicates(in.duplicates);
  tracker->set_psn_jumps(in.psn_jumps);
  tracker->set_bogus_length(in.bogus_length);
  tracker->set_overrun(in.overrun);
  v1::StormHost* host = out->mutable_host();
  host->set_tables(in.host_tables);
  host->set_qps(in.host_qps);
  host->set_backlog_hits(in.host_backlog_hits);
  for (const std::string& e : in.host_errors) host->add_errors(e);
  host->set_pairs(in.host_pairs);
  host->set_ambiguous_pairs(in.host_ambiguous_pairs);
  v1::StormJoin* join = out->mutable_join();
  join->set_joined_local(in.resp_joined_local);
  join->set_joined_remote(in.resp_joined_remote);
  join->set_no_pair(in.resp_no_pair);
  join->set_no_entry(in.resp_no_entry);
  join->set_ring_full(in.resp_ring_full);
  join->set_malformed(in.resp_malformed);
  join->set_acks_advanced(in.acks_advanced);
  join->set_acks_old(in.acks_old);
  join->set_acks_ahead(in.acks_ahead);
  join->set_fabric_guarded(in.fabric_guarded);
  v1::StormReadResponses* rr = out->mutable_read_responses();
  rr->set_sized(in.read_sized);
  rr->set_unknown(in.read_unknown);
  rr->set_orphans(in.read_orphans);
  rr->set_late(in.read_late);
  rr->set_duplicates(in.read_duplicates);
  rr->set_psn_jumps(in.read_psn_jumps);
  rr->set_abandoned(in.read_abandoned);
  rr->set_overrun(in.read_overrun);
  rr->set_malformed(in.read_malformed);
  rr->set_live(in.read_live);
  rr->set_capacity(in.read_capacity);
  rr->set_table_full(in.read_table_full);
  rr->set_evicted(in.read_evicted);
  rr->set_window_guarded(in.response_guarded);
  rr->set_requests_local(in.rreq_local);
  rr->set_requests_remote(in.rreq_remote);
  rr->set_requests_no_pair(in.rreq_no_pair);
  rr->set_requests_no_entry(in.rreq_no_entry);
  rr->set_requests_ring_full(in.rreq_ring_full);
  rr->set_requests_malformed(in.rreq_malformed);
  rr->set_requests_pending_full(in.rreq_pending_full);
  rr->set_requests_stale(in.rreq_stale);
  rr->set_requests_too_late(in.rreq_too_late);
}

void ToProto(const QpView& in, v1::Qp* out) {
  out->set_worker(in.worker);
  out->set_qpn(in.qpn);
  out->set_direction(in.direction);
  out->set_kind(in.kind);
  out->set_level(in.level);
  out->set_dst(in.dst);
  out->set_size_known(in.size_known);
  out->set_in_progress(in.in_progress);
  out->set_size(in.size);
  out->set_sent(in.sent);
  out->set_remaining(in.remaining);
  out->set_backlog_bytes(in.backlog_bytes);
  out->set_egress_held(in.egress_held);
  out->set_host_backlog(in.host_backlog);
  out->set_completed(in.completed);
  out->set_idle_ms(in.idle_ms);
  if (in.acked) {
    out->set_acked_psn(in.acked_psn);
    out->set_unacked(in.unacked);
  }
}

void ToProto(const LbView& in, v1::Lb* out) {
  out->set_enabled(in.enabled);
  out->set_balancer(in.balancer);
  out->set_pin(in.pin);
  out->set_threshold_bytes(in.threshold_bytes);
  out->set_threshold_auto(in.threshold_auto);
  out->set_pin_policy(in.pin_policy);
  out->set_flow_unit(in.flow_unit);
  out->set_crossing(in.crossing);
  out->set_entropy(in.entropy);
  out->set_generation(in.generation);
  out->set_feedback_join(in.feedback_join);
  out->set_pinned_flows(in.pinned_flows);
  out->set_sprayed_flows(in.sprayed_flows);
  out->set_pinned_packets(in.pinned_packets);
  out->set_sprayed_packets(in.sprayed_packets);
  out->set_pinned_bytes(in.pinned_bytes);
  out->set_sprayed_bytes(in.sprayed_bytes);
  out->set_stateless_bytes(in.stateless_bytes);
  out->set_flows_live(in.flows_live);
  out->set_flow_capacity(in.flow_capacity);
  for (const LbPathSetView& s : in.sets) {
    v1::LbPathSet* set = out->add_sets();
    set->set_set(s.set);
    set->set_prefix(s.prefix);
    set->set_jain_index(s.jain_index);
    for (const LbPathView& p : s.paths) {
      v1::LbPath* path = set->add_paths();
      path->set_index(p.index);
      path->set_port(p.port);
      path->set_entropy(p.entropy);
      path->set_bytes(p.bytes);
      path->set_packets(p.packets);
    }
  }
  for (const LbCounterView& c : in.counters) {
    v1::LbCounter* counter = out->add_counters();
    counter->set_name(c.name);
    counter->set_value(c.value);
    counter->set_description(c.description);
  }
}

absl::StatusOr<LbUpdate> FromProto(const v1::SetLbRequest& in) {
  LbUpdate update;
  if (in.has_balancer()) update.balancer = in.balancer();
  if (in.has_threshold_bytes()) update.threshold_bytes = in.threshold_bytes();
  update.threshold_auto = in.threshold_auto();
  if (in.has_pin_policy()) update.pin_policy = in.pin_policy();
  if (in.has_pin()) update.pin = in.pin();
  if (update.threshold_bytes && update.threshold_auto) {
    return absl::InvalidArgumentError("give either threshold_bytes or threshold_auto, not both");
  }
  if (!update.balancer && !update.threshold_bytes && !update.threshold_auto && !update.pin_policy &&
      !update.pin) {
    return absl::InvalidArgumentError(
        "nothing to change; set balancer, threshold_bytes, threshold_auto, pin_policy or pin");
  }
  return update;
}

// Checks what needs no daemon state and turns the request into the view's StormUpdate.
absl::StatusOr<StormUpdate> FromProto(const v1::SetStormRequest& in) {
  StormUpdate update;
  if (in.has_levels()) update.levels = in.levels();
  if (in.has_cutoffs()) {
    if (in.cutoffs_auto()) {
      return absl::InvalidArgumentError(
          "give either static cutoffs or auto cutoffs, not both in one change");
    }
    update.cutoffs.emplace(in.cutoffs().values().begin(), in.cutoffs().values().end());
  }
  update.cutoffs_auto = in.cutoffs_auto();
  if (in.has_mode()) {
    if (in.mode() != "per-message" && in.mode() != "per-packet") {
      return absl::InvalidArgumentError(
          absl::StrCat("storm mode \"", in.mode(), "\" is not one of per-message, per-packet"));
    }
    update.mode = in.mode();
  }
  if (in.has_dscp()) update.dscp.emplace(in.dscp().values().begin(), in.dscp().values().end());
  if (in.has_pcp()) update.pcp.emplace(in.pcp().values().begin(), in.pcp().values().end());
  if (in.has_control_level()) update.control_level = in.control_level();
  if (in.has_beta()) {
    if (!std::isfinite(in.beta()) || in.beta() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("storm beta ", in.beta(), " must be a finite number >= 0"));
    }
    update.beta = in.beta();
  }
  if (in.has_unknown_size()) {
    if (in.unknown_size() < 1 || in.unknown_size() > UINT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          "storm unknown_size ", in.unknown_size(),
          " is out of range; use 1 to 4294967295 bytes (4294967295: the lowest level)"));
    }
    update.unknown_size = static_cast<uint32_t>(in.unknown_size());
  }
  if (!update.levels && !update.cutoffs && !update.cutoffs_auto && !update.mode && !update.dscp &&
      !update.pcp && !update.control_level && !update.beta && !update.unknown_size) {
    return absl::InvalidArgumentError("the storm change sets nothing; give at least one setting");
  }
  return update;
}

void ToProto(const ArtifactView& in, v1::Artifact* out) {
  out->set_id(in.id);
  out->set_source(in.source);
  out->set_installed_unix_ms(in.installed_unix_ms);
  out->set_bytes(in.bytes);
  out->set_version(in.version);
  out->set_checksum(in.checksum);
  out->set_fabric_digest(in.fabric_digest);
  out->set_fabric(in.fabric);
  out->set_role(in.role);
  out->set_node(in.node);
  out->set_host(in.host);
  out->set_shape(in.shape);
  out->set_hash(in.hash);
  out->set_max_paths(in.max_paths);
  out->set_rail_local(in.rail_local);
  out->set_classes(in.classes);
  out->set_node_masks(in.node_masks);
  out->set_overrides(in.overrides);
  out->set_path_sets(in.path_sets);
  out->set_prefixes(in.prefixes);
  out->set_no_path(in.no_path);
}

absl::Status CheckArtifactSize(const std::string& bytes) {
  if (bytes.empty()) {
    return absl::InvalidArgumentError("the artifact is empty; give the file heddle-nuwa wrote");
  }
  if (bytes.size() > kMaxArtifactBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the artifact is ", bytes.size(), " bytes, more than the ", kMaxArtifactBytes,
                     " a host artifact can be; is it the right file?"));
  }
  return absl::OkStatus();
}

constexpr uint32_t kDefaultQpTop = 20;
constexpr uint32_t kMaxQpTop = 1000;

// absl and gRPC share the canonical status codes (absl/status/status.h says so), so the code maps
// one to one and the daemon's message reaches the client unchanged.
grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// The view belongs to the daemon; whatever it throws stops here and becomes an INTERNAL error for
// this one call instead of taking down the gRPC thread (and the daemon with it). `fn` returns
// nothing or the call's absl::Status.
template <typename Fn>
grpc::Status Guarded(const char* rpc, Fn&& fn) {
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
      fn();
      return grpc::Status::OK;
    } else {
      return ToGrpc(fn());
    }
  } catch (const std::exception& e) {
    HEDDLE_LOG(kError, "control api %s: %s", rpc, e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat(rpc, ": ", e.what()));
  } catch (...) {
    HEDDLE_LOG(kError, "control api %s: unknown exception", rpc);
    return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat(rpc, ": unknown error"));
  }
}

}  // namespace

class HeddleServiceImpl final : public v1::Heddle::Service {
 public:
  explicit HeddleServiceImpl(DaemonView* view) : view_(view) {}

  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::GetStatusResponse* out) override {
    return Guarded("GetStatus", [&] {
      const StatusView s = view_->GetStatus();
      out->set_version(s.version);
      out->set_uptime_seconds(s.uptime_seconds);
      out->set_pid(s.pid);
      out->set_config_path(s.config_path);
      for (const LcoreView& l : s.lcores) ToProto(l, out->add_lcores());
      for (const PortView& p : s.ports) ToProto(p, out->add_ports());
      out->set_metrics_url(s.metrics_url);
    });
  }

  grpc::Status GetPorts(grpc::ServerContext*, const v1::GetPortsRequest*,
                        v1::GetPortsResponse* out) override {
    return Guarded("GetPorts", [&] {
      for (const PortView& p : view_->GetPorts()) ToProto(p, out->add_ports());
    });
  }

  grpc::Status GetStats(grpc::ServerContext*, const v1::GetStatsRequest*,
                        v1::GetStatsResponse* out) override {
    return Guarded("GetStats", [&] {
      for (const PortStatsView& p : view_->GetPortStats()) ToProto(p, out->add_ports());
      for (const LcoreView& l : view_->GetLcores()) ToProto(l, out->add_lcores());
    });
  }

  grpc::Status GetDrops(grpc::ServerContext*, const v1::GetDropsRequest* req,
                        v1::GetDropsResponse* out) override {
    return Guarded("GetDrops", [&] {
      uint64_t total = 0;
      for (const DropView& d : view_->GetDrops()) {
        total += d.packets;
        if (d.packets == 0 && !req->include_zero()) continue;
        v1::Drop* drop = out->add_drops();
        drop->set_reason(d.reason);
        drop->set_description(d.description);
        drop->set_packets(d.packets);
      }
      out->set_total_packets(total);
    });
  }

  grpc::Status GetConfig(grpc::ServerContext*, const v1::GetConfigRequest*,
                         v1::GetConfigResponse* out) override {
    return Guarded("GetConfig", [&] { out->set_yaml(view_->GetConfigYaml()); });
  }

  grpc::Status GetRdma(grpc::ServerContext*, const v1::GetRdmaRequest*,
                       v1::GetRdmaResponse* out) override {
    return Guarded("GetRdma", [&] {
      const RdmaView r = view_->GetRdma();
      for (const RdmaDeviceView& d : r.devices) ToProto(d, out->add_devices());
      out->set_note(r.note);
    });
  }

  grpc::Status GetStorm(grpc::ServerContext*, const v1::GetStormRequest*,
                        v1::GetStormResponse* out) override {
    return Guarded("GetStorm", [&]() -> absl::Status {
      HEDDLE_ASSIGN_OR_RETURN(const StormView storm, view_->GetStorm());
      ToProto(storm, out->mutable_storm());
      return absl::OkStatus();
    });
  }

  grpc::Status ListQps(grpc::ServerContext*, const v1::ListQpsRequest* req,
                       v1::ListQpsResponse* out) override {
    return Guarded("ListQps", [&]() -> absl::Status {
      const uint32_t top = req->has_top() ? req->top() : kDefaultQpTop;
      if (top < 1 || top > kMaxQpTop) {
        return absl::InvalidArgumentError(
            absl::StrCat("top ", top, " is out of range; list 1..", kMaxQpTop, " QPs"));
      }
      const std::string sort = req->sort().empty() ? "backlog" : req->sort();
      if (sort != "backlog" && sort != "remaining" && sort != "idle") {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot sort QPs by \"", sort, "\"; use backlog, remaining or idle"));
      }
      HEDDLE_ASSIGN_OR_RETURN(const std::vector<QpView> qps, view_->ListQps(top, sort));
      for (size_t i = 0; i < qps.size() && i < top; ++i) ToProto(qps[i], out->add_qps());
      out->set_sort(sort);
      out->set_top(top);
      return absl::OkStatus();
    });
  }

  grpc::Status GetLb(grpc::ServerContext*, const v1::GetLbRequest*,
                     v1::GetLbResponse* out) override {
    return Guarded("GetLb", [&]() -> absl::Status {
      HEDDLE_ASSIGN_OR_RETURN(const LbView lb, view_->GetLb());
      ToProto(lb, out->mutable_lb());
      return absl::OkStatus();
    });
  }

  grpc::Status SetLb(grpc::ServerContext*, const v1::SetLbRequest* req,
                     v1::SetLbResponse* out) override {
    return Guarded("SetLb", [&]() -> absl::Status {
      HEDDLE_ASSIGN_OR_RETURN(const LbUpdate update, FromProto(*req));
      HEDDLE_ASSIGN_OR_RETURN(const LbView lb, view_->SetLb(update));
      ToProto(lb, out->mutable_lb());
      return absl::OkStatus();
    });
  }

  grpc::Status InstallArtifact(grpc::ServerContext*, const v1::InstallArtifactRequest* req,
                               v1::InstallArtifactResponse* out) override {
    return Guarded("InstallArtifact", [&]() -> absl::Status {
      HEDDLE_RETURN_IF_ERROR(CheckArtifactSize(req->artifact()));
      ArtifactInstall install;
      install.bytes = req->artifact();
      install.source = req->source();
      install.dry_run = req->dry_run();
      HEDDLE_ASSIGN_OR_RETURN(const ArtifactView a, view_->InstallArtifact(install));
      ToProto(a, out->mutable_artifact());
      out->set_dry_run(req->dry_run());
      return absl::OkStatus();
    });
  }

  grpc::Status GetArtifact(grpc::ServerContext*, const v1::GetArtifactRequest*,
                           v1::GetArtifactResponse* out) override {
    return Guarded("GetArtifact", [&]() -> absl::Status {
      HEDDLE_ASSIGN_OR_RETURN(const ArtifactStateView st, view_->GetArtifact());
      out->set_node(st.node);
      out->set_fabric(st.fabric);
      if (st.installed) ToProto(*st.installed, out->mutable_installed());
      for (const ArtifactView& a : st.history) ToProto(a, out->add_history());
      out->set_generation(st.generation);
      out->set_installs(st.installs);
      out->set_rejected(st.rejected);
      out->set_rollbacks(st.rollbacks);
      return absl::OkStatus();
    });
  }

  grpc::Status DiffArtifact(grpc::ServerContext*, const v1::DiffArtifactRequest* req,
                            v1::DiffArtifactResponse* out) override {
    return Guarded("DiffArtifact", [&]() -> absl::Status {
      HEDDLE_RETURN_IF_ERROR(CheckArtifactSize(req->artifact()));
      HEDDLE_ASSIGN_OR_RETURN(const ArtifactDiffView d, view_->DiffArtifact(req->artifact()));
      ToProto(d.installed, out->mutable_installed());
      ToProto(d.given, out->mutable_given());
      for (const ArtifactDiffLine& f : d.fields) {
        v1::ArtifactFieldDiff* o = out->add_fields();
        o->set_field(f.field);
        o->set_installed(f.installed);
        o->set_given(f.given);
      }
      for (const ArtifactPathDiff& p : d.paths) {
        v1::ArtifactPathDiff* o = out->add_paths();
        o->set_prefix(p.prefix);
        o->set_installed(p.installed);
        o->set_given(p.given);
      }
      out->set_prefixes_same(d.prefixes_same);
      return absl::OkStatus();
    });
  }

  grpc::Status RollbackArtifact(grpc::ServerContext*, const v1::RollbackArtifactRequest* req,
                                v1::RollbackArtifactResponse* out) override {
    return Guarded("RollbackArtifact", [&]() -> absl::Status {
      std::optional<uint64_t> to;
      if (req->has_to()) to = req->to();
      HEDDLE_ASSIGN_OR_RETURN(const ArtifactView a, view_->RollbackArtifact(to));
      ToProto(a, out->mutable_artifact());
      return absl::OkStatus();
    });
  }

  grpc::Status SetStorm(grpc::ServerContext*, const v1::SetStormRequest* req,
                        v1::SetStormResponse* out) override {
    return Guarded("SetStorm", [&]() -> absl::Status {
      HEDDLE_ASSIGN_OR_RETURN(const StormUpdate update, FromProto(*req));
      HEDDLE_ASSIGN_OR_RETURN(const StormView storm, view_->SetStorm(update));
      ToProto(storm, out->mutable_storm());
      return absl::OkStatus();
    });
  }

 private:
  DaemonView* const view_;
};

namespace {

// Makes sure `path` can be handed to gRPC: gRPC unlinks whatever socket is at the path before it
// binds, so a live daemon's socket must be detected here, not there.
absl::Status ClaimSocketPath(const std::string& path) {
  HEDDLE_RETURN_IF_ERROR(internal::EnsureParentDirectory(path, kSocketDirMode));
  HEDDLE_ASSIGN_OR_RETURN(internal::PathState state, internal::ProbeSocketPath(path));
  switch (state) {
    case internal::PathState::kAbsent:
      return absl::OkStatus();
    case internal::PathState::kListening:
      return absl::AlreadyExistsError(
          absl::StrCat("another heddled is listening on ", path,
                       "; stop it first or give this one another control socket"));
    case internal::PathState::kNotASocket:
      return absl::FailedPreconditionError(
          absl::StrCat("control socket path ", path,
                       " exists and is not a socket; remove it or choose another path"));
    case internal::PathState::kStaleSocket:
      if (unlink(path.c_str()) != 0 && errno != ENOENT) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot remove stale control socket ", path, ": ", std::strerror(errno)));
      }
      HEDDLE_LOG(kInfo, "control api: removed stale socket %s", path.c_str());
      return absl::OkStatus();
  }
  return absl::InternalError("unreachable");
}

std::string ParentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Sets the bound socket's mode and gives it its public name, atomically and without replacing
// anything.
absl::Status PublishSocket(const std::string& bind_path, const std::string& socket_path) {
  if (chmod(bind_path.c_str(), kSocketMode) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot set mode 0660 on ", bind_path, ": ", std::strerror(errno)));
  }
  if (link(bind_path.c_str(), socket_path.c_str()) == 0) return absl::OkStatus();
  const int err = errno;
  if (err == EEXIST) {
    absl::StatusOr<internal::PathState> state = internal::ProbeSocketPath(socket_path);
    if (state.ok() && *state == internal::PathState::kListening) {
      return absl::AlreadyExistsError(absl::StrCat("another heddled is listening on ", socket_path,
                                                   "; it started at the same time as this one"));
    }
    return absl::AlreadyExistsError(
        absl::StrCat(socket_path, " appeared while the control API was starting; retry"));
  }
  return absl::PermissionDeniedError(absl::StrCat("cannot link control socket ", bind_path, " to ",
                                                  socket_path, ": ", std::strerror(err)));
}

}  // namespace

ApiServer::ApiServer(std::string socket_path, std::unique_ptr<HeddleServiceImpl> service)
    : socket_path_(std::move(socket_path)), service_(std::move(service)) {}

ApiServer::~ApiServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(const std::string& socket_path,
                                                            DaemonView* view) {
  if (view == nullptr) return absl::InvalidArgumentError("ApiServer::Start: view is null");
  HEDDLE_RETURN_IF_ERROR(ClaimSocketPath(socket_path));

  // gRPC binds a private name in the same directory; the socket gets its mode there and is then
  // hard-linked to the public path. link(2) fails if anything has appeared at the path since the
  // probe, so two daemons starting together cannot both win, and gRPC, which unlinks its own bind
  // path on start and on shutdown, never touches the public name.
  const std::string bind_path =
      absl::StrCat(ParentDir(socket_path), "/.heddled-", getpid(), ".sock.tmp");
  HEDDLE_RETURN_IF_ERROR(internal::ValidateSocketPath(bind_path));
  HEDDLE_ASSIGN_OR_RETURN(internal::PathState bind_state, internal::ProbeSocketPath(bind_path));
  if (bind_state == internal::PathState::kNotASocket) {
    return absl::FailedPreconditionError(
        absl::StrCat(bind_path, " exists and is not a socket; remove it"));
  }

  std::unique_ptr<ApiServer> api(
      new ApiServer(socket_path, std::make_unique<HeddleServiceImpl>(view)));
  try {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("unix:", bind_path), grpc::InsecureServerCredentials());
    builder.RegisterService(api->service_.get());
    builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
    api->server_ = builder.BuildAndStart();
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("cannot start control API on unix:", socket_path, ": ", e.what()));
  }
  if (api->server_ == nullptr) {
    // gRPC logs its reason but does not return it; name the usual cause.
    const std::string dir = ParentDir(socket_path);
    std::string reason = "gRPC could not bind the socket";
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
      reason = absl::StrCat(dir, ": ", std::strerror(errno));
    }
    return absl::UnavailableError(absl::StrCat("cannot listen on unix:", socket_path, ": ", reason,
                                               "; check the directory's owner and mode"));
  }

  absl::Status published = PublishSocket(bind_path, socket_path);
  unlink(bind_path.c_str());
  HEDDLE_RETURN_IF_ERROR(published);
  struct stat st;
  if (lstat(socket_path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return absl::InternalError(
        absl::StrCat("control API started but ", socket_path, " is not a socket"));
  }
  api->socket_dev_ = st.st_dev;
  api->socket_ino_ = st.st_ino;
  HEDDLE_LOG(kInfo, "control api: listening on unix:%s", socket_path.c_str());
  return api;
}

void ApiServer::Shutdown() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server_->Wait();
  server_.reset();
  // Only remove the file this server created: after a stale-socket takeover by a newer daemon the
  // path may belong to someone else.
  struct stat st;
  if (lstat(socket_path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == socket_dev_ &&
      st.st_ino == socket_ino_) {
    if (unlink(socket_path_.c_str()) != 0 && errno != ENOENT) {
      HEDDLE_LOG(kWarning, "control api: cannot remove %s: %s", socket_path_.c_str(),
                 std::strerror(errno));
    }
  }
}

}  // namespace heddle::api
