// File: tools/heddle-relay/config.h
//
// relay.yaml, the configuration of `heddle-relay serve` (docs/relay.md §7.4). Every key is
// checked at start-up; a mistake names the key, the value and the fix. Unknown keys are errors.
//
//   region: {id: 1, name: eu-west}
//   listen: 0.0.0.0:7400
//   token_file: /etc/heddle/relay.token     # or token: "..."; none = no bearer token
//   tls: {cert: relay.pem, key: relay.key, client_ca: workers-ca.pem}   # optional
//   model: {synthetic: {tensors: 4, elements: 1000000}}                 # model_spec.h
//   round: {push_timeout_s: 300, missing: renormalize, min_token_fraction: 0.5,
//           weighting: fednova, liveness_timeout_s: 600, keep_rounds: 16, max_workers: 4096}
//   planner: {target_round_s: 600, seq_len: 2048, min_inner_steps: 1, max_inner_steps: 1000}
//                                              # mode: balanced (default) | equal (the baseline)
//   metrics: {listen: 127.0.0.1:9470}
//   wan: {...}                                 # the WAN side's block, passed through as YAML
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "control/planner/planner.h"
#include "dataplane/relay/round/engine.h"
#include "dataplane/relay/service/relay_service.h"

namespace heddle::relay::tool {

struct RelayConfig {
  uint32_t region_id = 0;
  std::string region;
  RelayServerOptions server;  // listen, token, TLS
  ModelSpec spec;
  RoundPolicy policy;
  std::optional<planner::PlannerConfig> planner;
  std::string metrics_listen;  // empty: no metrics endpoint
  std::string wan_yaml;        // the `wan:` block as YAML text ("" when absent)
};

absl::StatusOr<RelayConfig> RelayConfigFromString(const std::string& yaml,
                                                  const std::string& base_dir = ".");
absl::StatusOr<RelayConfig> RelayConfigFromFile(const std::string& path);

}  // namespace heddle::relay::tool
