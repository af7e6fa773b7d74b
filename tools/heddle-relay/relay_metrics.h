// File: tools/heddle-relay/relay_metrics.h
//
// Prometheus exposition of a relay (prometheus-cpp pull exposer), built at scrape time from ONE
// status snapshot (RelayService::StatusTables), so every sample of a scrape describes the same
// instant:
//
//   heddle_relay_rounds_total{outcome="published"|"aborted"}
//   heddle_relay_round{state="collecting"|"resolved"}          round ids
//   heddle_relay_last_round_seconds{phase="wait"|"aggregate"|"wan"}   the last resolved round
//   heddle_relay_last_round_tokens, heddle_relay_last_round_workers{set="expected"|"included"}
//   heddle_relay_compression_ratio                     last resolved round: fp32 bytes ÷ frame
//   bytes heddle_relay_lan_bytes_total{direction="in"|"out"}
//   heddle_relay_pushes_refused_total{reason}, heddle_relay_auth_failures_total
//   heddle_relay_workers{state="member"|"gone"}
//   heddle_relay_straggler_idle_seconds, heddle_relay_straggler_idle_fraction  (planner, last
//   round) heddle_relay_plan_batch_size{worker}, heddle_relay_plan_inner_steps{worker}
//     (one sample per member: bounded by round.max_workers; drop them in the scrape config for
//      very large regions)
// The WAN half's counters are heddle_relay_wan_* (docs/relay-wan.md §8). Every counter's label
// set is exclusive, so a sum over a label counts each round or refusal once:
// rounds_total{outcome} is published | aborted, and the counts that are parts of an outcome
// (without this region, prepared, lost) or no outcome at all (decisions replayed, duplicate
// frames acknowledged) are series of their own.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dataplane/relay/service/relay.pb.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace heddle::relay::tool {

class MetricsEndpoint {
 public:
  // listen: "host:port" (port 0 picks one).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& listen, std::function<v1::StatusResponse()> snapshot);
  ~MetricsEndpoint();
  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  // The exposer holds the collectable by weak_ptr only: it lives here, and outlives the exposer
  // (members are destroyed in reverse order).
  std::shared_ptr<prometheus::Collectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

// The families of one snapshot (for tests).
std::string RenderMetricsText(const v1::StatusResponse& s);

}  // namespace heddle::relay::tool
