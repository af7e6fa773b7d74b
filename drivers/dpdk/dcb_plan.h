// File: drivers/dpdk/dcb_plan.h
//
// DCB TX set-up of one port, planned without a device (docs/storm.md §6.7): STORM levels leave on
// hardware traffic classes (TCs), each worker owning one TX queue per TC, so the NIC's own
// scheduler (strict priority or ETS, as the operator configures it) serves the levels.
//
//   DcbCaps caps = ...;                        // dev_info + whether get_dcb_info answers
//   HEDDLE_ASSIGN_OR_RETURN(DcbConfPlan c, PlanDcbConf(name, caps, tcs, workers, pfc));
//   ApplyDcbConf(c, &eth_conf);                // txmode.mq_mode, dcb_tx_conf, capabilities
//   rte_eth_dev_configure(port, rxq, c.nb_tx_queues, &eth_conf);
//   rte_eth_dev_get_dcb_info(port, &info);
//   HEDDLE_ASSIGN_OR_RETURN(DcbQueues q, PlanDcbQueues(name, driver, c, tcs, info, workers));
//   // q.level_queue[w][level]: worker w's TX queue for that level
//
// Both steps are pure functions of what the device reports, so every refusal (no DCB in the PMD,
// too few queues, a PMD that reports no TCs after configure, a TC with fewer queues than workers)
// is unit-tested with fake capabilities. The messages name the port, the driver and the fix.
#pragma once

#include <rte_ethdev.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace heddle::dpdk {

constexpr int kDcbLevels = 8;  // STORM levels 0..7

// The level -> TC layout asked for (storm::TcMap, copied: drivers do not depend on storm).
struct DcbTcs {
  uint8_t nb_tcs = 4;                          // 4 or 8
  std::array<uint8_t, kDcbLevels> level_tc{};  // TC per level
  std::array<uint8_t, 8> prio_tc{};            // TC per 802.1p user priority (dcb_tc[])
};

// What the device reports before rte_eth_dev_configure().
struct DcbCaps {
  std::string driver;               // dev_info.driver_name
  uint16_t max_tx_queues = 0;       // dev_info.max_tx_queues
  uint16_t vmdq_pool_base = 0;      // dev_info.vmdq_pool_base
  bool dcb_info_supported = false;  // rte_eth_dev_get_dcb_info() did not answer -ENOTSUP
};

struct DcbConfPlan {
  uint8_t nb_tcs = 0;
  uint16_t nb_tx_queues = 0;        // to pass to rte_eth_dev_configure() (and set up, all)
  uint32_t dcb_capability_en = 0;   // RTE_ETH_DCB_PG_SUPPORT [| RTE_ETH_DCB_PFC_SUPPORT]
  std::array<uint8_t, 8> dcb_tc{};  // user priority -> TC
};

// Where each worker sends each level, from rte_eth_dev_get_dcb_info() after configure.
struct DcbQueues {
  uint8_t nb_tcs = 0;
  std::array<uint16_t, 8> tc_base{};   // first TX queue of TC t (pool 0)
  std::array<uint16_t, 8> tc_count{};  // TX queues of TC t
  std::array<uint8_t, 8> tc_bws{};     // TX bandwidth share of TC t, percent (the PMD's ETS)
  std::array<uint8_t, kDcbLevels> level_tc{};
  std::vector<std::array<uint16_t, kDcbLevels>> level_queue;  // [worker][level] -> TX queue
};

// The DCB TX configuration, or why the device cannot have it (the PMD has no DCB — mlx5 gets its
// own advice —, fewer TX queues than workers x TCs, a bad TC count).
absl::StatusOr<DcbConfPlan> PlanDcbConf(const std::string& port, const DcbCaps& caps,
                                        const DcbTcs& tcs, uint16_t workers, bool pfc);

// Sets txmode.mq_mode = RTE_ETH_MQ_TX_DCB, tx_adv_conf.dcb_tx_conf and dcb_capability_en. RX is
// left as it is (RSS or none).
void ApplyDcbConf(const DcbConfPlan& plan, rte_eth_conf* conf);

// Worker w's queue for TC t is tc_txq[0][t].base + w. Refuses a PMD that reports no TCs, or
// other than nb_tcs, after configure, and a TC with fewer queues than workers or queues past
// nb_tx_queues.
absl::StatusOr<DcbQueues> PlanDcbQueues(const std::string& port, const std::string& driver,
                                        const DcbConfPlan& plan, const DcbTcs& tcs,
                                        const rte_eth_dcb_info& info, uint16_t workers);

// "4 TCs: L0->TC0 q0-1, ...": for logs and `show storm`.
std::string DescribeDcbQueues(const DcbQueues& q, int levels);

}  // namespace heddle::dpdk
