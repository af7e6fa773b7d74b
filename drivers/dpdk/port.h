// File: drivers/dpdk/port.h
//
// One DPDK ethdev as heddle uses it: find it among the probed devices (PCI address or vdev
// name), configure RX queues (RSS across them when there are several and the driver hashes) and
// one TX queue per worker lcore, start it, report link state and driver counters, stop and close.
// Also the mbuf pool. All of this runs on the main lcore, before workers start or after they stop;
// LinkState()/HwStats() are safe from control threads while workers run.
//
// With DCB asked for (PortParams::tx_dcb, from storm.egress), Configure() runs the sequence of
// dcb_plan.h: RX DCB_RSS and TX DCB with the TC map, queue counts re-read with DCB on, every queue
// set up, the port *started* (ixgbe programs its TCs in dev_start) and the TC layout read from
// it; it records each worker's TX queue per STORM level (dcb()) and the RX queues to poll, all of
// every TC's (rx_queue_ids()). When the device cannot, Configure() stops the port again and fails
// naming the port and why (kRequire), or configures it as without DCB and records why (kPrefer).
// Start() then starts what is not started yet. A DCB port is thus started inside Configure(): its
// statistics count from then, not from Start().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "drivers/dpdk/dcb_plan.h"

struct rte_mempool;

namespace heddle::dpdk {

struct PortParams {
  std::string name;    // heddle's name for the port, for messages
  std::string device;  // "0000:3b:00.0" or the vdev devargs "net_pcap0,rx_pcap=..."
  bool is_vdev = false;
  uint16_t rx_queues = 1;
  uint16_t tx_queues = 1;
  uint16_t rx_desc = 1024;
  uint16_t tx_desc = 1024;
  uint16_t mtu = 0;  // 0 = driver default
  bool promiscuous = true;
  // DCB for the STORM levels: off (one TX queue per worker), required (Configure() fails when
  // the device cannot) or preferred (falls back to one TX queue per worker, logged). tx_queues is
  // the number of workers either way.
  enum class TxDcb { kOff, kRequire, kPrefer } tx_dcb = TxDcb::kOff;
  DcbTcs dcb_tcs;        // level -> TC layout (storm::MapLevelsToTcs)
  bool dcb_pfc = false;  // also ask for priority flow control (RTE_ETH_DCB_PFC_SUPPORT)
};

struct LinkInfo {
  bool up = false;
  uint32_t speed_mbps = 0;
  bool full_duplex = false;
};

struct HwStats {
  uint64_t rx_missed = 0, rx_errors = 0, tx_errors = 0, rx_nombuf = 0;
  uint64_t rx_packets = 0, tx_packets = 0;
};

// The ethdev name a device string registers under: the vdev's first devargs token, or the PCI
// address with a "0000:" domain.
std::string EthdevNameFor(const PortParams& p);

class Port {
 public:
  // Finds the probed port. Not found → an error that names the devargs and the likely cause.
  static absl::StatusOr<Port> Find(const PortParams& p);

  // Configures queues, RSS, MTU; sets up RX queues from `pool`. With DCB on, also starts the port
  // (its TC layout exists only once started): it may receive from then on, and its counters
  // (Stats()) count from Configure(), not from Start().
  absl::Status Configure(rte_mempool* pool);
  absl::Status Start();
  // Stops (if started) and closes. Idempotent.
  void StopAndClose();

  uint16_t port_id() const { return port_id_; }
  const PortParams& params() const { return params_; }
  const std::string& driver() const { return driver_; }
  int socket_id() const { return socket_id_; }
  std::string MacAddress() const;
  LinkInfo Link() const;
  HwStats Stats() const;
  bool rss_enabled() const { return rss_enabled_; }
  // After Configure(): whether TX accepts chained mbufs (RTE_ETH_TX_OFFLOAD_MULTI_SEGS).
  bool tx_multi_seg() const { return tx_multi_seg_; }
  // After Configure(): each worker's TX queue per STORM level when DCB TX is on, else nullopt.
  const std::optional<DcbQueues>& dcb() const { return dcb_; }
  // After Configure(): why a preferred DCB TX fell back to software ("" otherwise).
  const std::string& dcb_fallback() const { return dcb_fallback_; }
  // After Configure(): TX queues configured (tx_queues, or the PMD's DCB queue count).
  uint16_t tx_queues_configured() const { return tx_queues_configured_; }
  // After Configure(): the RX queues the workers poll: 0..rx_queues-1, or with DCB every RX queue
  // of every TC as the PMD lays them out (RSS spreads a TC's packets over all of its queues).
  const std::vector<uint16_t>& rx_queue_ids() const { return rx_queue_ids_; }

 private:
  Port() = default;
  // The DCB sequence; leaves the port started on success, possibly started on a refusal.
  absl::Status ConfigureDcb(const rte_eth_dev_info& info, const rte_eth_conf& base, uint64_t rss_hf,
                            rte_mempool* pool);
  // Descriptor counts, MTU, and the set-up of queues 0..nb_rx-1 and 0..nb_tx-1.
  absl::Status SetUpQueues(const rte_eth_dev_info& info, const rte_eth_conf& conf, uint16_t nb_rx,
                           uint16_t rx_desc, uint16_t nb_tx, rte_mempool* pool);
  PortParams params_;
  uint16_t port_id_ = 0;
  std::string driver_;
  int socket_id_ = 0;
  bool started_ = false;
  bool closed_ = false;
  bool rss_enabled_ = false;
  bool tx_multi_seg_ = false;
  std::optional<DcbQueues> dcb_;
  std::string dcb_fallback_;
  uint16_t tx_queues_configured_ = 0;
  std::vector<uint16_t> rx_queue_ids_;
};

// True when mbuf pools pack their objects across 4 KiB pages: no hugepages and IOVA as VA
// (DPDK's no-huge mode), where virtual contiguity is all a device's DMA needs.
bool PackedMbufPools();

// A pktmbuf pool. `name` must be unique per process. Packed (RTE_MEMPOOL_F_NO_IOVA_CONTIG) when
// PackedMbufPools(); otherwise exactly rte_pktmbuf_pool_create().
absl::StatusOr<rte_mempool*> CreateMbufPool(const std::string& name, uint32_t mbufs, uint16_t cache,
                                            uint16_t data_room, int socket_id);

}  // namespace heddle::dpdk
