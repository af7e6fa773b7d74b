#include "tools/heddle-relay/relay_metrics.h"

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "control/metrics/family.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace heddle::relay::tool {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

using ::heddle::metrics::AddSample;
using ::heddle::metrics::NewFamily;

std::vector<MetricFamily> Families(const v1::StatusResponse& s) {
  std::vector<MetricFamily> out;
  MetricFamily rounds =
      NewFamily("heddle_relay_rounds_total", "Rounds resolved, by outcome", MetricType::Counter);
  AddSample(rounds, {{"outcome", "published"}}, s.rounds_published());
  AddSample(rounds, {{"outcome", "aborted"}}, s.rounds_aborted());
  out.push_back(std::move(rounds));
  MetricFamily round = NewFamily("heddle_relay_round",
                                 "Round ids: the one collecting pushes, the "
                                 "last resolved",
                                 MetricType::Gauge);
  AddSample(round, {{"state", "collecting"}}, s.collecting_round());
  AddSample(round, {{"state", "resolved"}}, s.last_resolved_round());
  out.push_back(std::move(round));

  const v1::RoundRow* last = nullptr;
  for (const v1::RoundRow& r : s.rounds()) {
    if (r.round_id() == s.last_resolved_round()) last = &r;
  }
  if (last != nullptr) {
    MetricFamily t = NewFamily("heddle_relay_last_round_seconds",
                               "Time split of the last resolved round: waiting for workers, "
                               "aggregation and submission, WAN exchange",
                               MetricType::Gauge);
    AddSample(t, {{"phase", "wait"}}, last->wait_s());
    AddSample(t, {{"phase", "aggregate"}}, last->aggregate_s());
    AddSample(t, {{"phase", "wan"}}, last->wan_s());
    out.push_back(std::move(t));
    MetricFamily tok =
        NewFamily("heddle_relay_last_round_tokens",
                  "Tokens the region contributed to the last resolved round", MetricType::Gauge);
    AddSample(tok, {}, last->tokens());
    out.push_back(std::move(tok));
    MetricFamily w =
        NewFamily("heddle_relay_last_round_workers",
                  "Workers expected in and included in the last resolved round", MetricType::Gauge);
    AddSample(w, {{"set", "expected"}}, last->expected());
    AddSample(w, {{"set", "included"}}, last->included());
    out.push_back(std::move(w));
    MetricFamily cr = NewFamily("heddle_relay_compression_ratio",
                                "fp32 bytes of the included workers' model copies over the frame "
                                "bytes they pushed, last resolved round",
                                MetricType::Gauge);
    AddSample(cr, {}, last->compression_ratio());
    out.push_back(std::move(cr));
  }
  MetricFamily bytes =
      NewFamily("heddle_relay_lan_bytes_total",
                "Bytes from workers (accepted pushes) and to workers (pulls)", MetricType::Counter);
  AddSample(bytes, {{"direction", "in"}}, s.bytes_in_total());
  AddSample(bytes, {{"direction", "out"}}, s.bytes_out_total());
  out.push_back(std::move(bytes));
  if (s.has_wan()) {
    const v1::WanStatus& w = s.wan();
    // Per peer region: a handful of gateways, a bounded label set.
    MetricFamily wb = NewFamily("heddle_relay_wan_bytes_total",
                                "Bytes exchanged with each peer gateway", MetricType::Counter);
    MetricFamily wu = NewFamily("heddle_relay_wan_peer_up",
                                "1 when the link to the peer gateway is up", MetricType::Gauge);
    MetricFamily wfw = NewFamily("heddle_relay_wan_forwarded_frames_total",
                                 "Other regions' frames relayed to each peer gateway, as the "
                                 "exchange schedule routes them",
                                 MetricType::Counter);
    MetricFamily wsr = NewFamily("heddle_relay_wan_send_rate_bytes_per_second",
                                 "Measured send throughput to each peer gateway while push "
                                 "streams to it were open",
                                 MetricType::Gauge);
    MetricFamily wr =
        NewFamily("heddle_relay_wan_reconnects_total",
                  "Calls to the peer gateway that failed and reconnected", MetricType::Counter);
    for (const v1::WanPeerRow& p : w.peers()) {
      std::string peer = std::to_string(p.region_id());
      AddSample(wb, {{"peer", peer}, {"direction", "out"}}, p.bytes_sent());
      AddSample(wb, {{"peer", peer}, {"direction", "in"}}, p.bytes_received());
      AddSample(wu, {{"peer", peer}}, p.connected() ? 1 : 0);
      AddSample(wr, {{"peer", peer}}, p.reconnects());
      AddSample(wfw, {{"peer", peer}}, p.frames_forwarded());
      AddSample(wsr, {{"peer", peer}}, p.send_bytes_per_second());
    }
    out.push_back(std::move(wb));
    out.push_back(std::move(wu));
    out.push_back(std::move(wr));
    out.push_back(std::move(wfw));
    out.push_back(std::move(wsr));
    MetricFamily ws = NewFamily("heddle_relay_wan_schedule_predicted_seconds",
                                "The exchange schedule's predicted time for one round (compiler "
                                "cost model on wan.topology), labelled by the schedule",
                                MetricType::Gauge);
    AddSample(ws, {{"schedule", w.schedule_name()}}, w.schedule_predicted_s());
    out.push_back(std::move(ws));
    MetricFamily wt = NewFamily("heddle_relay_wan_publish_seconds",
                                "This region's aggregate handed to the WAN -> the round published",
                                MetricType::Gauge);
    AddSample(wt, {{"stat", "last"}}, w.last_publish_s());
    AddSample(wt, {{"stat", "mean"}}, w.mean_publish_s());
    out.push_back(std::move(wt));
    // A refusal is a call or message this gateway turned away; an identical frame received
    // again is acknowledged (already held, not applied twice), so it is counted apart.
    MetricFamily wf = NewFamily("heddle_relay_wan_refused_total",
                                "WAN calls and messages refused, by reason (the reasons are "
                                "exclusive: each refusal is counted once)",
                                MetricType::Counter);
    AddSample(wf, {{"reason", "auth"}}, w.auth_failures());
    AddSample(wf, {{"reason", "handshake"}}, w.handshake_failures());
    AddSample(wf, {{"reason", "malformed"}}, w.malformed_messages());
    AddSample(wf, {{"reason", "digest_mismatch"}}, w.digest_mismatches());
    AddSample(wf, {{"reason", "out_of_window"}}, w.out_of_window_messages());
    AddSample(wf, {{"reason", "coordinator_restart"}}, w.coordinator_restarts());
    out.push_back(std::move(wf));
    MetricFamily wd = NewFamily("heddle_relay_wan_duplicate_frames_total",
                                "Frames received again identical to one already held (a peer's "
                                "retry): acknowledged without being applied again, not refused",
                                MetricType::Counter);
    AddSample(wd, {}, w.duplicate_frames());
    out.push_back(std::move(wd));
    // Every round this gateway resolves ends published or aborted, once (PublishLocked, the
    // decision log's replay and a decision the log could not take, in grpc_exchange.cc): the
    // outcomes sum to the rounds resolved. The
    // finer counts below are parts of one outcome, so they are series of their own.
    MetricFamily wo = NewFamily("heddle_relay_wan_rounds_total",
                                "Rounds of the WAN exchange resolved at this gateway, by final "
                                "outcome (exclusive: the sum is the rounds resolved)",
                                MetricType::Counter);
    AddSample(wo, {{"outcome", "published"}}, w.rounds_published());
    AddSample(wo, {{"outcome", "aborted"}}, w.rounds_aborted());
    out.push_back(std::move(wo));
    MetricFamily wwo = NewFamily("heddle_relay_wan_rounds_without_this_region_total",
                                 "Rounds published without this region's frames (of the "
                                 "rounds_total outcome published)",
                                 MetricType::Counter);
    AddSample(wwo, {}, w.rounds_without_this_region());
    out.push_back(std::move(wwo));
    MetricFamily wpr = NewFamily("heddle_relay_wan_rounds_prepared_total",
                                 "Follower: rounds published from the aggregate prepared before "
                                 "the decision came (of the rounds_total outcome published)",
                                 MetricType::Counter);
    AddSample(wpr, {}, w.rounds_prepared());
    out.push_back(std::move(wpr));
    MetricFamily wl = NewFamily("heddle_relay_wan_rounds_lost_total",
                                "Rounds decided whose aggregate this gateway could not get (no "
                                "longer kept, or decided before the coordinator restarted): "
                                "DataLoss, resynchronize the region's model (of the rounds_total "
                                "outcome aborted)",
                                MetricType::Counter);
    AddSample(wl, {}, w.rounds_lost());
    out.push_back(std::move(wl));
    MetricFamily wrp = NewFamily("heddle_relay_wan_decisions_replayed_total",
                                 "Coordinator with wan.state_dir: decisions read back from its "
                                 "decision log at start-up (decided before the restart; of them "
                                 "only the last is resolved here, as a lost round)",
                                 MetricType::Counter);
    AddSample(wrp, {}, w.decisions_replayed());
    out.push_back(std::move(wrp));
  }
  MetricFamily refused = NewFamily("heddle_relay_pushes_refused_total", "Pushes refused, by reason",
                                   MetricType::Counter);
  for (const char* r :
       {"malformed", "wrong_round", "duplicate", "not_member", "not_expected", "inconsistent"}) {
    auto it = s.refused().find(r);
    AddSample(refused, {{"reason", r}}, it == s.refused().end() ? 0 : it->second);
  }
  out.push_back(std::move(refused));
  MetricFamily auth =
      NewFamily("heddle_relay_auth_failures_total",
                "Calls refused for a missing or wrong bearer token", MetricType::Counter);
  AddSample(auth, {}, s.auth_failures());
  out.push_back(std::move(auth));
  MetricFamily workers =
      NewFamily("heddle_relay_workers", "Workers known to the relay", MetricType::Gauge);
  int members = 0;
  for (const v1::MemberRow& m : s.members()) members += m.member();
  AddSample(workers, {{"state", "member"}}, members);
  AddSample(workers, {{"state", "gone"}}, s.members_size() - members);
  out.push_back(std::move(workers));
  if (s.idle_size() > 0) {
    const v1::IdleRow& i = s.idle(s.idle_size() - 1);
    MetricFamily idle = NewFamily("heddle_relay_straggler_idle_seconds",
                                  "GPU-seconds the workers waited for the slowest, last planner "
                                  "round",
                                  MetricType::Gauge);
    AddSample(idle, {}, i.idle_s());
    out.push_back(std::move(idle));
    MetricFamily frac =
        NewFamily("heddle_relay_straggler_idle_fraction",
                  "Idle share of the GPU time, last planner round", MetricType::Gauge);
    AddSample(frac, {}, i.idle_fraction());
    out.push_back(std::move(frac));
  }
  if (!s.planner_mode().empty()) {
    MetricFamily pm = NewFamily("heddle_relay_planner_mode",
                                "1 for the planner's mode (planner.mode: balanced, or the equal "
                                "batches and steps baseline)",
                                MetricType::Gauge);
    AddSample(pm, {{"mode", s.planner_mode()}}, 1);
    out.push_back(std::move(pm));
  }
  MetricFamily batch =
      NewFamily("heddle_relay_plan_batch_size", "Planned batch size per worker", MetricType::Gauge);
  MetricFamily steps = NewFamily("heddle_relay_plan_inner_steps", "Planned inner steps per worker",
                                 MetricType::Gauge);
  for (const v1::MemberRow& m : s.members()) {
    if (!m.member() || !m.plan().valid()) continue;
    AddSample(batch, {{"worker", m.name()}}, m.plan().batch_size());
    AddSample(steps, {{"worker", m.name()}}, m.plan().inner_steps());
  }
  out.push_back(std::move(batch));
  out.push_back(std::move(steps));
  return out;
}

class RelayCollectable : public prometheus::Collectable {
 public:
  explicit RelayCollectable(std::function<v1::StatusResponse()> snapshot)
      : snapshot_(std::move(snapshot)) {}
  std::vector<MetricFamily> Collect() const override { return Families(snapshot_()); }

 private:
  std::function<v1::StatusResponse()> snapshot_;
};

}  // namespace

std::string RenderMetricsText(const v1::StatusResponse& s) {
  return prometheus::TextSerializer().Serialize(Families(s));
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& listen, std::function<v1::StatusResponse()> snapshot) {
  std::unique_ptr<MetricsEndpoint> m(new MetricsEndpoint());
  // prometheus-cpp and civetweb report failures by throwing; none may escape.
  try {
    m->collectable_ = std::make_shared<RelayCollectable>(std::move(snapshot));
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/2);
    m->exposer_->RegisterCollectable(m->collectable_);
    std::vector<int> ports = m->exposer_->GetListeningPorts();
    if (ports.empty()) return absl::InternalError("metrics.listen: no port bound");
    m->port_ = ports[0];
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrFormat(
        "metrics.listen %s: cannot serve metrics: %s (address in use? a host:port?)", listen,
        e.what()));
  }
  return m;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace heddle::relay::tool
