// File: drivers/dpdk/dcb_plan.h
//
// DCB set-up of one port, planned from what the device reports (docs/storm.md §6.7): STORM levels
// leave on hardware traffic classes (TCs), each worker owning one TX queue per TC, so the NIC's
// own scheduler (strict priority or ETS, as the operator configures it) serves the levels.
//
// The sequence follows testpmd's init_port_dcb_config() (DPDK 22.11), because the DCB PMDs need
// all of it: ixgbe reports its TCs and TX layout only when the RX mode carries
// RTE_ETH_MQ_RX_DCB_FLAG and programs the TC count in dev_start; i40e sets DCB up (from
// rx_adv_conf.dcb_rx_conf) only with that flag and splits the queues it was configured with
// between the TCs.
//
//   DcbCaps caps = ...;                        // dev_info + whether get_dcb_info answers
//   HEDDLE_ASSIGN_OR_RETURN(DcbConfPlan c, PlanDcbConf(name, caps, tcs, workers, pfc));
//   ApplyDcbConf(c, rss_hf, &eth_conf);        // RX DCB(_RSS) + TX DCB, both with the TC map
//   rte_eth_dev_configure(port, c.nb_rx_queues, c.nb_tx_queues, &eth_conf);
//   rte_eth_dev_info_get(port, &info);         // re-read: the counts with DCB on
//   HEDDLE_RETURN_IF_ERROR(PlanDcbQueueCounts(name, CapsOf(info), workers, &c));
//   rte_eth_dev_configure(...);                // again, when the counts changed
//   HEDDLE_ASSIGN_OR_RETURN(uint16_t rxd, PlanDcbRxDesc(..., rx_free_thresh));  // set up every
//   queue rte_eth_dev_start(port); rte_eth_dev_get_dcb_info(port, &dinfo);    // the PMD's TC
//   layout, only now final HEDDLE_ASSIGN_OR_RETURN(DcbQueues q, PlanDcbQueues(name, driver, c, tcs,
//   dinfo, workers));
//   // q.level_queue[w][level]: worker w's TX queue for that level; q.rx_queues: RX queues to poll
//
// Each step is a pure function of what the device reports, so every refusal (no DCB in the PMD,
// too few queues, a PMD that reports another TC count after start, a TC with fewer queues than
// workers) is unit-tested with fake capabilities. The messages name the port, the driver and the
// fix.
#pragma once

#include <rte_ethdev.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heddle::dpdk {

constexpr int kDcbLevels = 8;  // STORM levels 0..7

// The level -> TC layout asked for (storm::TcMap, copied: drivers do not depend on storm).
struct DcbTcs {
  uint8_t nb_tcs = 4;                          // 4 or 8
  std::array<uint8_t, kDcbLevels> level_tc{};  // TC per level
  std::array<uint8_t, 8> prio_tc{};            // TC per 802.1p user priority (dcb_tc[])
};

// What the device reports (rte_eth_dev_info_get()).
struct DcbCaps {
  std::string driver;               // dev_info.driver_name
  uint16_t max_rx_queues = 0;       // dev_info.max_rx_queues
  uint16_t max_tx_queues = 0;       // dev_info.max_tx_queues
  uint16_t vmdq_queue_base = 0;     // dev_info.vmdq_queue_base: first queue of the VMDq pools
  bool dcb_info_supported = false;  // rte_eth_dev_get_dcb_info() did not answer -ENOTSUP
};

// DcbCaps from a dev_info (dcb_info_supported left false: the caller probes it).
DcbCaps CapsOf(const rte_eth_dev_info& info);

struct DcbConfPlan {
  uint8_t nb_tcs = 0;
  // Queue counts to pass to rte_eth_dev_configure(): workers x TCs for the first configure, the
  // PF's whole queue range once PlanDcbQueueCounts() has seen the DCB-mode dev_info. Every one is
  // set up (a DCB PMD may name any of them for a TC).
  uint16_t nb_rx_queues = 0;
  uint16_t nb_tx_queues = 0;
  uint32_t dcb_capability_en = 0;   // RTE_ETH_DCB_PG_SUPPORT [| RTE_ETH_DCB_PFC_SUPPORT]
  std::array<uint8_t, 8> dcb_tc{};  // user priority -> TC
};

// Where each worker sends each level, from rte_eth_dev_get_dcb_info() after start.
struct DcbQueues {
  uint8_t nb_tcs = 0;
  std::array<uint16_t, 8> tc_base{};   // first TX queue of TC t (pool 0), as the PMD reports it
  std::array<uint16_t, 8> tc_count{};  // TX queues of TC t
  std::array<uint8_t, 8> tc_bws{};     // TX bandwidth share of TC t, percent (the PMD's ETS)
  std::array<uint8_t, kDcbLevels> level_tc{};
  std::vector<std::array<uint16_t, kDcbLevels>> level_queue;  // [worker][level] -> TX queue
  // Every RX queue of every TC, ascending: RSS spreads a TC's packets over all of its queues
  // (ixgbe: 16 per TC), so all of them are polled.
  std::vector<uint16_t> rx_queues;
};

// The DCB configuration with first queue counts (workers x TCs), or why the device cannot have it
// (the PMD has no DCB — mlx5 gets its own advice —, fewer queues than workers x TCs, a bad TC
// count or level map).
absl::StatusOr<DcbConfPlan> PlanDcbConf(const std::string& port, const DcbCaps& caps,
                                        const DcbTcs& tcs, uint16_t workers, bool pfc);

// Sets, as testpmd's get_eth_dcb_conf() does for DCB without VMDq: rxmode.mq_mode =
// RTE_ETH_MQ_RX_DCB_RSS (RTE_ETH_MQ_RX_DCB when rss_hf is 0) with rss_hf, rx_adv_conf.dcb_rx_conf
// and tx_adv_conf.dcb_tx_conf both {nb_tcs, dcb_tc[UP]}, txmode.mq_mode = RTE_ETH_MQ_TX_DCB and
// dcb_capability_en.
void ApplyDcbConf(const DcbConfPlan& plan, uint64_t rss_hf, rte_eth_conf* conf);

// With the dev_info read after the DCB configure: the queue counts to configure, every queue of
// the PF (up to vmdq_queue_base when the PMD keeps VMDq pools after the PF's queues, else
// max_*_queues; at most RTE_ETH_DCB_NUM_QUEUES). Not as testpmd does, deliberately: with
// vmdq_pool_base > 0 (i40e) testpmd configures nb_rxq = nb_txq = num_tcs, one queue per TC, too
// few for one TX queue per worker in each TC. Refuses fewer than workers x TCs.
absl::Status PlanDcbQueueCounts(const std::string& port, const DcbCaps& caps, uint16_t workers,
                                DcbConfPlan* plan);

// RX descriptors per queue on a DCB port: its nb_rx_queues rings share what the port's
// rx_queues x rx_desc would hold (the pool fills every RX ring at start, and mempool.mbufs' minimum
// counts rx_queues x rx_desc), within the PMD's limits. Each ring is a multiple of the PMD's
// rx_free_thresh (dev_info.default_rxconf) strictly above it: ixgbe's bulk-alloc and vector RX
// need rx_free_thresh < nb_desc and nb_desc % rx_free_thresh == 0, else it turns vector RX off for
// the whole port. Refuses when even the smallest such rings need more, naming the rx_desc needed.
absl::StatusOr<uint16_t> PlanDcbRxDesc(const std::string& port, const std::string& driver,
                                       const DcbConfPlan& plan, uint16_t rx_queues,
                                       uint16_t rx_desc, const rte_eth_desc_lim& lim,
                                       uint16_t rx_free_thresh);

// Worker w's queue for TC t is tc_txq[0][t].base + w. Refuses a PMD that reports another TC
// count than asked, a TC with fewer TX queues than workers or queues past nb_tx_queues, and a TC
// without RX queues (or RX queues past nb_rx_queues).
absl::StatusOr<DcbQueues> PlanDcbQueues(const std::string& port, const std::string& driver,
                                        const DcbConfPlan& plan, const DcbTcs& tcs,
                                        const rte_eth_dcb_info& info, uint16_t workers);

// "4 TCs: L0->TC0 q0-1, ...": for logs and `show storm`.
std::string DescribeDcbQueues(const DcbQueues& q, int levels);

}  // namespace heddle::dpdk
