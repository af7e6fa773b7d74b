// File: control/api/testing/fake_daemon_view.h
//
// A DaemonView with fixed, recognisable data for tests of the control API server, the client and
// heddlectl. Tests may edit the public members before starting the server; the accessors copy
// under a lock, so a test can also change them while the server runs.
#pragma once

#include <mutex>
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

  std::mutex mu;
  StatusView status;  // status.ports and status.lcores are also what GetPorts/GetLcores return
  std::vector<PortStatsView> port_stats;
  std::vector<DropView> drops;
  std::string config_yaml;
  RdmaView rdma;
};

}  // namespace heddle::api::testing
