// File: control/api/testing/fake_daemon_view.h
//
// A DaemonView with fixed, recognisable data for tests of the control API server, the client and
// heddlectl. Tests may edit the public members before starting the server; the accessors copy
// under a lock, so a test can also change them while the server runs.
//
// STORM: GetStorm returns `storm`; ListQps sorts `qps` as asked and keeps the first `top`;
// SetStorm records the update in `last_update`, checks list lengths the way the daemon does,
// applies it to `storm` (levels and ranges recomputed, generation + 1) and returns the result. A
// non-OK `storm_error` is returned by all three instead; `set_storm_error` by SetStorm only.
//
// lb: GetLb returns `lb`; SetLb records the update in `last_lb_update`, checks the names the way
// the daemon does, applies it (generation + 1) and returns the result; a non-OK `lb_error` is
// returned by both instead.
//
// Artifacts: GetArtifact returns `artifact`. InstallArtifact records the request in
// `last_install`; bytes starting with "bad" are refused (InvalidArgument, rejected + 1) like a
// corrupt artifact; otherwise, unless dry_run, the view becomes the installed one (id + 1, the
// previous one first in the history). RollbackArtifact records `to` and pops the history to it.
// DiffArtifact records the bytes and returns `diff`. A non-OK `artifact_error` is returned by all
// four instead.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "control/api/daemon_view.h"

namespace heddle::api::testing {

class FakeDaemonView : public DaemonView {
 public:
  FakeDaemonView();

  StatusView GetStatus() override;
  std::vector<PortView> GetPorts() override;
  std::vector<PortStatsView> GetPortStats() override;
  std::vector<LcoreView> GetLcores() override;
  std::vector<DropView> GetDrops() override;
  std::string GetConfigYaml() override;
  RdmaView GetRdma() override;
  absl::StatusOr<StormView> GetStorm() override;
  absl::StatusOr<std::vector<QpView>> ListQps(uint32_t top, const std::string& sort) override;
  absl::StatusOr<StormView> SetStorm(const StormUpdate& update) override;
  absl::StatusOr<LbView> GetLb() override;
  absl::StatusOr<LbView> SetLb(const LbUpdate& update) override;
  absl::StatusOr<ArtifactView> InstallArtifact(const ArtifactInstall& install) override;
  absl::StatusOr<ArtifactStateView> GetArtifact() override;
  absl::StatusOr<ArtifactDiffView> DiffArtifact(const std::string& bytes) override;
  absl::StatusOr<ArtifactView> RollbackArtifact(std::optional<uint64_t> to) override;

  // (r_min, r_max] of each level for these cutoffs, level K-1 first in the order the daemon lists.
  static std::vector<StormLevelView> LevelsFor(const std::vector<uint64_t>& cutoffs,
                                               uint32_t control_level);

  std::mutex mu;
  StatusView status;  // status.ports and status.lcores are also what GetPorts/GetLcores return
  std::vector<PortStatsView> port_stats;
  std::vector<DropView> drops;
  std::string config_yaml;
  RdmaView rdma;

  StormView storm;
  std::vector<QpView> qps;
  absl::Status storm_error;
  absl::Status set_storm_error;
  std::optional<StormUpdate> last_update;
  uint32_t last_top = 0;
  std::string last_sort;

  LbView lb;
  absl::Status lb_error;
  std::optional<LbUpdate> last_lb_update;

  ArtifactStateView artifact;
  ArtifactDiffView diff;
  absl::Status artifact_error;
  std::optional<ArtifactInstall> last_install;
  std::optional<std::string> last_diff_bytes;
  std::optional<std::optional<uint64_t>> last_rollback_to;
};

}  // namespace heddle::api::testing
