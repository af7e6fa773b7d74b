// File: control/api/testing/fake_daemon_view.cc
#include "control/api/testing/fake_daemon_view.h"

namespace heddle::api::testing {

FakeDaemonView::FakeDaemonView() {
  status.version = "0.1.0-test";
  status.uptime_seconds = 93784;  // 1d 02:03:04
  status.pid = 4242;
  status.config_path = "/etc/heddle/heddled.yaml";
  status.metrics_url = "http://127.0.0.1:9464/metrics";
  status.lcores = {
      {.lcore_id = 0, .role = "main", .busy_loops = 0, .idle_loops = 0},
      {.lcore_id = 2, .role = "worker", .busy_loops = 250, .idle_loops = 750},
  };
  PortView host;
  host.name = "host0";
  host.role = "host";
  host.device = "net_pcap0,iface=veth0";
  host.driver = "net_pcap";
  host.port_id = 0;
  host.link_up = true;
  host.speed_mbps = 10000;
  host.full_duplex = true;
  host.mac = "02:00:00:00:00:01";
  host.rx_queues = 1;
  host.tx_queues = 1;
  host.mtu = 1500;
  host.peer = "uplink0";
  PortView uplink;
  uplink.name = "uplink0";
  uplink.role = "uplink";
  uplink.device = "0000:3b:00.0";
  uplink.driver = "mlx5_pci";
  uplink.port_id = 1;
  uplink.link_up = false;
  uplink.speed_mbps = 0;
  uplink.mac = "02:00:00:00:00:02";
  uplink.rx_queues = 2;
  uplink.tx_queues = 2;
  uplink.mtu = 9000;
  uplink.peer = "host0";
  status.ports = {host, uplink};

  PortStatsView s0;
  s0.name = "host0";
  s0.rx_packets = 1000;
  s0.rx_bytes = 1234567;
  s0.tx_packets = 990;
  s0.tx_bytes = 1200000;
  s0.hw_rx_missed = 3;
  s0.hw_rx_errors = 1;
  s0.hw_tx_errors = 0;
  s0.hw_rx_nombuf = 7;
  s0.roce_by_class = {{"rdma-write", 600}, {"send", 300}, {"ack", 0}};
  PortStatsView s1;
  s1.name = "uplink0";
  s1.rx_packets = 555;
  s1.rx_bytes = 66600;
  s1.tx_packets = 1000;
  s1.tx_bytes = 1234567;
  s1.roce_by_class = {{"rdma-write", 0}, {"send", 0}, {"ack", 550}};
  port_stats = {s0, s1};

  drops = {
      {.reason = "ipv4-truncated", .description = "IPv4 header shorter than IHL", .packets = 5},
      {.reason = "no-route", .description = "no forwarding entry", .packets = 0},
      {.reason = "bth-bad-opcode", .description = "reserved BTH opcode", .packets = 12},
  };

  config_yaml = "ports:\n  - name: host0\n    role: host\n  - name: uplink0\n    role: uplink\n";

  RdmaDeviceView dev;
  dev.name = "mlx5_0";
  dev.node_guid = "0c42:a103:0012:3456";
  dev.fw_ver = "22.36.1010";
  RdmaPortView rport;
  rport.port_num = 1;
  rport.state = "active";
  rport.active_mtu = 4096;
  rport.link_layer = "Ethernet";
  rport.gids = {{0, "fe80::42:aff:fe00:1"}, {3, "::ffff:10.0.0.1"}};
  dev.ports = {rport};
  rdma.devices = {dev};
}

StatusView FakeDaemonView::GetStatus() {
  std::lock_guard<std::mutex> lock(mu);
  return status;
}
std::vector<PortView> FakeDaemonView::GetPorts() {
  std::lock_guard<std::mutex> lock(mu);
  return status.ports;
}
std::vector<PortStatsView> FakeDaemonView::GetPortStats() {
  std::lock_guard<std::mutex> lock(mu);
  return port_stats;
}
std::vector<LcoreView> FakeDaemonView::GetLcores() {
  std::lock_guard<std::mutex> lock(mu);
  return status.lcores;
}
std::vector<DropView> FakeDaemonView::GetDrops() {
  std::lock_guard<std::mutex> lock(mu);
  return drops;
}
std::string FakeDaemonView::GetConfigYaml() {
  std::lock_guard<std::mutex> lock(mu);
  return config_yaml;
}
RdmaView FakeDaemonView::GetRdma() {
  std::lock_guard<std::mutex> lock(mu);
  return rdma;
}

}  // namespace heddle::api::testing
