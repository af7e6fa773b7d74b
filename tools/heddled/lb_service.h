// File: tools/heddled/lb_service.h
//
// heddled's PIN / load-balancing control side (docs/pin.md, docs/config.md `lb`): builds the path
// table from lb.paths, owns the LbControl the workers' pin-select stages read, and answers the
// control API's lb calls (show lb, set lb) without stopping the dataplane. An installed Nüwa
// artifact (FwdService) publishes its own path table through control(); with fwd configured and
// lb disabled the service still runs, with balancer ecmp and pin off, so that the artifact's
// paths (uplink, entropy, next-hop MAC) are applied per flow.
//
//   HEDDLE_ASSIGN_OR_RETURN(std::unique_ptr<LbService> lb, LbService::Create(cfg, num_workers));
//   ...stages get lb->control()...
//   lb->WorkersStopped();                // after the workers returned
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control/api/daemon_view.h"
#include "control/config/config.h"
#include "dataplane/pipeline/lb_control.h"

namespace heddle::heddled {

class LbService {
 public:
  // Off the hot path, at start-up: the path table from cfg.lb.paths (port names resolved),
  // validated and built whole, unless `table` is given (the artifact installed at start-up), or
  // lb is disabled (fwd only: no table until an artifact is installed). Errors name the lb key.
  static absl::StatusOr<std::unique_ptr<LbService>> Create(
      const config::Config& cfg, int num_workers,
      std::shared_ptr<const lb::PathTable> table = nullptr);
  // The parameters pin-select runs with: lb's, or with lb disabled (fwd only) ecmp without PIN.
  static lb::LbConfig EffectiveParams(const config::Config& cfg);

  pipeline::LbControl* control() { return control_.get(); }
  // Every worker returned: they go offline, so no grace period waits for them any more.
  void WorkersStopped();

  // The state in force and the counters summed over workers.
  api::LbView View() const;
  // Applies `u` hitlessly (one RCU publication); on error nothing changes. Updates `cfg` (what
  // `show config` prints).
  absl::Status Apply(const api::LbUpdate& u, config::LbConfig* cfg);

 private:
  LbService(const config::Config& cfg, std::shared_ptr<const lb::PathTable> table, int num_workers);

  int num_workers_;
  bool enabled_;                         // lb.enabled (else running for fwd only)
  std::vector<std::string> port_names_;  // by port index
  std::unique_ptr<pipeline::LbControl> control_;
  std::mutex apply_mu_;  // one `set lb` at a time
};

}  // namespace heddle::heddled
