#include "tools/heddled/lb_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace heddle::heddled {

lb::LbConfig LbService::EffectiveParams(const config::Config& cfg) {
  lb::LbConfig p = cfg.lb.params;
  if (!cfg.lb.enabled) {
    // fwd without lb: one path per flow (its hash), as the fabric's own ECMP would choose.
    p.balancer = lb::BalancerKind::kEcmp;
    p.pin = false;
  }
  return p;
}

absl::StatusOr<std::unique_ptr<LbService>> LbService::Create(
    const config::Config& cfg, int num_workers, std::shared_ptr<const lb::PathTable> table) {
  if (!table && cfg.lb.enabled) {
    absl::StatusOr<lb::PathTableSpec> spec = config::LbPathTableSpec(cfg);
    if (!spec.ok()) return spec.status();
    absl::StatusOr<std::unique_ptr<const lb::PathTable>> built = lb::PathTable::Build(*spec);
    if (!built.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("lb.paths: ", built.status().message()));
    }
    table = std::shared_ptr<const lb::PathTable>(std::move(*built));
  }
  if (absl::Status s = lb::ValidateLbConfig(EffectiveParams(cfg)); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  return std::unique_ptr<LbService>(new LbService(cfg, std::move(table), num_workers));
}

LbService::LbService(const config::Config& cfg, std::shared_ptr<const lb::PathTable> table,
                     int num_workers)
    : num_workers_(num_workers), enabled_(cfg.lb.enabled) {
  for (const config::PortConfig& p : cfg.ports) port_names_.push_back(p.name);
  control_ =
      std::make_unique<pipeline::LbControl>(EffectiveParams(cfg), std::move(table), num_workers);
}

api::LbView LbService::View() const {
  const pipeline::LbControl::Current now = control_->current();
  const lb::LbConfig& c = now.config;
  api::LbView v;
  v.enabled = enabled_;
  v.balancer = lb::BalancerKindName(c.balancer);
  v.pin = c.pin;
  v.threshold_bytes = lb::EffectiveThreshold(c);
  v.threshold_auto = c.threshold_bytes == 0;
  v.pin_policy = lb::PinPolicyName(c.pin_policy);
  v.flow_unit = lb::FlowUnitName(c.flow_unit);
  v.crossing = lb::CrossingRuleName(c.crossing);
  v.entropy = lb::EntropyFieldName(c.entropy_field);
  v.generation = now.generation;
  v.feedback_join = control_->has_host_backlog();
  const pipeline::LbTotals t = control_->totals();
  v.pinned_flows = t.selector_counter(lb::LbCounter::kPinnedFlows);
  v.sprayed_flows = t.selector_counter(lb::LbCounter::kSprayedFlows);
  v.pinned_packets = t.selector_counter(lb::LbCounter::kPinnedPackets);
  v.sprayed_packets = t.selector_counter(lb::LbCounter::kSprayedPackets);
  v.pinned_bytes = t.stage_counter(pipeline::PinStageCounter::kPinnedBytes);
  v.sprayed_bytes = t.stage_counter(pipeline::PinStageCounter::kSprayedBytes);
  v.stateless_bytes = t.stage_counter(pipeline::PinStageCounter::kStatelessBytes);
  v.flows_live = t.stage_counter(pipeline::PinStageCounter::kFlowsLive);
  v.flow_capacity = t.stage_counter(pipeline::PinStageCounter::kFlowCapacity);
  if (now.table) {
    const size_t n = std::min<size_t>(now.table->num_sets(), pipeline::kLbReportedSets);
    // A set is named by the first prefix routed to it (lb.paths or the artifact), or "default".
    std::vector<std::string> set_names(n);
    const lb::PathTableSpec& spec = now.table->spec();
    if (spec.default_set >= 0 && static_cast<size_t>(spec.default_set) < n) {
      set_names[spec.default_set] = "default";
    }
    for (const lb::PathTableSpec::Route& r : spec.routes) {
      if (r.set < n && set_names[r.set].empty()) set_names[r.set] = lb::PrefixString(r.prefix);
    }
    for (size_t s = 0; s < n; ++s) {
      const lb::PathSetView set = now.table->set(static_cast<uint32_t>(s));
      api::LbPathSetView sv;
      sv.set = static_cast<uint32_t>(s);
      sv.prefix = set_names[s].empty() ? absl::StrCat("set ", s) : set_names[s];
      double sum = 0, sum_sq = 0;
      for (uint32_t i = 0; i < set.size; ++i) {
        api::LbPathView pv;
        pv.index = i;
        pv.port =
            set[i].port < port_names_.size() ? port_names_[set[i].port] : absl::StrCat(set[i].port);
        pv.entropy = set[i].entropy;
        pv.bytes = t.path_bytes[s][i];
        pv.packets = t.path_packets[s][i];
        sum += static_cast<double>(pv.bytes);
        sum_sq += static_cast<double>(pv.bytes) * static_cast<double>(pv.bytes);
        sv.paths.push_back(std::move(pv));
      }
      sv.jain_index = sum_sq > 0 ? sum * sum / (set.size * sum_sq) : 0;
      v.sets.push_back(std::move(sv));
    }
  }
  for (int i = 0; i < lb::kNumLbCounters; ++i) {
    const auto c = static_cast<lb::LbCounter>(i);
    v.counters.push_back({lb::LbCounterName(c), lb::LbCounterDescription(c), t.selector[i]});
  }
  for (int i = 0; i < pipeline::kNumPinStageCounters; ++i) {
    const auto c = static_cast<pipeline::PinStageCounter>(i);
    v.counters.push_back(
        {pipeline::PinStageCounterName(c), pipeline::PinStageCounterDescription(c), t.stage[i]});
  }
  return v;
}

absl::Status LbService::Apply(const api::LbUpdate& u, config::LbConfig* cfg) {
  std::lock_guard<std::mutex> g(apply_mu_);
  pipeline::LbChange change;
  if (u.threshold_bytes && u.threshold_auto) {
    return absl::InvalidArgumentError("give either a threshold or auto, not both");
  }
  if (u.balancer) {
    absl::StatusOr<lb::BalancerKind> k = lb::ParseBalancerKind(*u.balancer);
    if (!k.ok())
      return absl::InvalidArgumentError(absl::StrCat("lb.balancer: ", k.status().message()));
    change.balancer = *k;
  }
  if (u.threshold_bytes) {
    if (*u.threshold_bytes == 0 || *u.threshold_bytes > (uint64_t{1} << 31)) {
      return absl::InvalidArgumentError(
          absl::StrCat("lb.pin.threshold_bytes: ", *u.threshold_bytes,
                       " is out of range; use 1..2147483648 (the largest RDMA message), or auto"));
    }
    change.threshold_bytes = *u.threshold_bytes;
  }
  if (u.threshold_auto) change.threshold_bytes = 0;
  if (u.pin_policy) {
    if (*u.pin_policy == "hash") {
      change.pin_policy = lb::PinPolicy::kHash;
    } else if (*u.pin_policy == "least-loaded") {
      change.pin_policy = lb::PinPolicy::kLeastLoaded;
    } else if (*u.pin_policy == "balancer") {
      change.pin_policy = lb::PinPolicy::kBalancer;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("lb.pin.policy: \"", *u.pin_policy,
                       "\" is not a policy; use hash, least-loaded or balancer"));
    }
  }
  change.pin = u.pin;
  if (absl::Status s = control_->Update(change); !s.ok()) return s;
  if (cfg != nullptr) {
    const lb::LbConfig now = control_->current().config;
    cfg->params.balancer = now.balancer;
    cfg->params.threshold_bytes = now.threshold_bytes;
    cfg->params.pin_policy = now.pin_policy;
    cfg->params.pin = now.pin;
  }
  HEDDLE_LOG(kInfo, "lb: parameters updated (generation %llu)",
             static_cast<unsigned long long>(control_->published_generation()));
  return absl::OkStatus();
}

void LbService::WorkersStopped() {
  for (int w = 0; w < num_workers_; ++w) control_->Offline(w);
}

}  // namespace heddle::heddled
