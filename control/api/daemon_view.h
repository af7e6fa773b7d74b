// File: control/api/daemon_view.h
//
// What the control API can ask of the running daemon. heddled implements DaemonView over its
// ports, stats and config; tests implement it with fixed data. The gRPC service
// (control/api/server.h) only ever talks to this interface, so it has no DPDK dependency.
// Every method is called from gRPC threads, concurrently; implementations must be thread-safe and
// must not block on the dataplane.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heddle::api {

struct PortView {
  std::string name;
  std::string role;      // "host" | "uplink"
  std::string device;    // PCI address or vdev devargs as configured
  std::string driver;    // rte_eth_dev_info.driver_name, e.g. "net_pcap", "mlx5_pci"
  uint32_t port_id = 0;  // DPDK port id
  bool link_up = false;
  uint32_t speed_mbps = 0;
  bool full_duplex = false;
  std::string mac;  // "02:00:00:00:00:01"
  uint32_t rx_queues = 0, tx_queues = 0;
  uint32_t mtu = 0;
  std::string peer;  // egress port name for packets received here
};

struct PortStatsView {
  std::string name;
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;  // dataplane counters
  // Driver counters (rte_eth_stats): missed by the NIC, errors, mbuf allocation failures.
  uint64_t hw_rx_missed = 0, hw_rx_errors = 0, hw_tx_errors = 0, hw_rx_nombuf = 0;
  // RoCEv2 packets received on this port by opcode class; names from pkt::RoceClassName.
  std::vector<std::pair<std::string, uint64_t>> roce_by_class;
};

struct LcoreView {
  uint32_t lcore_id = 0;
  std::string role;  // "main" | "worker"
  uint64_t busy_loops = 0, idle_loops = 0;
};

struct DropView {
  std::string reason;  // stable name, e.g. "ipv4-truncated"
  std::string description;
  uint64_t packets = 0;
};

struct StatusView {
  std::string version;
  uint64_t uptime_seconds = 0;
  uint32_t pid = 0;
  std::string config_path;
  std::vector<LcoreView> lcores;
  std::vector<PortView> ports;
  std::string metrics_url;  // "" when metrics are off
};

struct RdmaPortView {
  uint32_t port_num = 0;
  std::string state;                                   // "active", "down", ...
  uint32_t active_mtu = 0;                             // bytes
  std::string link_layer;                              // "Ethernet" | "InfiniBand"
  std::vector<std::pair<uint32_t, std::string>> gids;  // (index, "fe80::...")
};
struct RdmaDeviceView {
  std::string name;  // "mlx5_0"
  std::string node_guid;
  std::string fw_ver;
  std::vector<RdmaPortView> ports;
};
struct RdmaView {
  std::vector<RdmaDeviceView> devices;  // empty is a normal state
  std::string note;                     // e.g. "no RDMA device found"
};

class DaemonView {
 public:
  virtual ~DaemonView() = default;
  virtual StatusView GetStatus() = 0;
  virtual std::vector<PortView> GetPorts() = 0;
  virtual std::vector<PortStatsView> GetPortStats() = 0;
  virtual std::vector<LcoreView> GetLcores() = 0;
  virtual std::vector<DropView> GetDrops() = 0;  // every reason, zeros included
  virtual std::string GetConfigYaml() = 0;
  virtual RdmaView GetRdma() = 0;
};

}  // namespace heddle::api
