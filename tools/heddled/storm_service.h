// File: tools/heddled/storm_service.h
//
// heddled's STORM control side: owns the StormControl the workers' storm-tag stages read, runs
// the background thread that recomputes auto cutoffs (storm.auto_interval_ms) and reads the verbs
// shim's backlog tables (storm.host_poll_ms, when storm.backlog_source is host), and answers the
// control API's storm calls (show storm, show qp, set storm) without stopping the dataplane.
//
//   StormService storm(cfg.storm, num_workers);
//   ...stages get storm.control()...
//   storm.StartThread();                // after the workers run
//   ...
//   storm.StopThread();                 // before the workers stop
//   storm.WorkersStopped();             // after they returned
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "control/api/daemon_view.h"
#include "control/config/config.h"
#include "dataplane/pipeline/stats.h"
#include "dataplane/pipeline/storm_control.h"

namespace heddle::verbs {
class HostBacklogReader;
}

namespace heddle::heddled {

class StormService {
 public:
  StormService(const config::StormConfig& cfg, int num_workers);
  ~StormService();

  pipeline::StormControl* control() { return control_.get(); }
  // The most levels ever in force (the metrics export that many, so no series disappears).
  int max_levels() const { return max_levels_.load(std::memory_order_relaxed); }

  // Also hand every host index read to `listener` (lb's feedback join); set before StartThread().
  void set_host_listener(
      std::function<void(std::shared_ptr<const verbs::HostBacklogIndex>)> listener) {
    host_listener_ = std::move(listener);
  }

  void StartThread();
  void StopThread();
  // Every worker returned: they go offline, so no grace period waits for them any more.
  void WorkersStopped();

  // One round of the background thread's work, for tests and the thread itself.
  void AutoTick();
  void HostTick();

  // DaemonView parts. `snap` supplies the per-level dataplane counters.
  api::StormView View(const pipeline::StatsSnapshot& snap) const;
  absl::StatusOr<std::vector<api::QpView>> ListQps(uint32_t top, const std::string& sort);
  // Applies `u` hitlessly; on error nothing changes. Updates `cfg` (what `show config` prints).
  absl::Status Apply(const api::StormUpdate& u, config::StormConfig* cfg);

 private:
  void Run();
  absl::Status ApplyOnce(const api::StormUpdate& u, config::StormConfig* cfg);

  config::StormConfig cfg_;  // as configured; levels in force are control_->current_levels()
  int num_workers_;
  std::unique_ptr<pipeline::StormControl> control_;
  std::unique_ptr<verbs::HostBacklogReader> host_reader_;  // storm thread only (keeps maps open)
  std::function<void(std::shared_ptr<const verbs::HostBacklogIndex>)> host_listener_;

  mutable std::mutex host_mu_;
  uint64_t host_tables_ = 0, host_qps_ = 0, host_pairs_ = 0, host_ambiguous_pairs_ = 0;
  std::vector<std::string> host_errors_;

  std::mutex apply_mu_;  // one `set storm` at a time (read-modify-publish)
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int> max_levels_;
};

}  // namespace heddle::heddled
