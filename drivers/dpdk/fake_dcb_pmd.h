// File: drivers/dpdk/fake_dcb_pmd.h
//
// For tests: what the DCB PMDs of DPDK 22.11 answer, as read from their sources (not from a NIC),
// reduced to the parts the DCB set-up depends on. dcb_plan_test feeds these answers to the pure
// planner; dcb_port_test puts them behind the real rte_ethdev calls of a net_null port (see
// there), so Port::Configure() meets them in the order it makes the calls.
//
//   ixgbe (ixgbe_ethdev.c, ixgbe_rxtx.c): 128 RX / 128 TX queues, no VMDq pools before DCB, RX
//     rings of 32..4096 descriptors in steps of 8, default rx_free_thresh 32 (bulk-alloc and
//     vector RX only with nb_desc a multiple of it above it).
//     rte_eth_dev_get_dcb_info() reports nb_tcs = 1 and no queue layout unless rxmode.mq_mode
//     carries RTE_ETH_MQ_RX_DCB_FLAG; with it, the TC count it reports (num_tcs.pg_tcs) is what
//     dev_start programmed, and before the first start after such a configure it is
//     ixgbe_dcb_init()'s 8, with the 8-TC layout, whatever was asked.
//     With DCB on and started: TX 64/32/16/16 (4 TCs) or 32/32/16/16/8/8/8/8 (8 TCs) from queue
//     0 on; RX 16 queues per TC at TC x 32 (4 TCs) or TC x 16 (8 TCs).
//   i40e (i40e_ethdev.c): the PF's queues come first, VMDq pools after them (vmdq_queue_base;
//     vmdq_pool_base is a pool index, 1). i40e_dev_configure() calls i40e_dcb_setup() only when
//     the RX mode carries the DCB flag; it takes nb_tcs and dcb_tc[] from rx_adv_conf.dcb_rx_conf
//     and gives each TC min(2^floor(log2(nb_rx_queues / nb_tcs)), 64) queue pairs, TC t from
//     t x that (RX and TX alike). Fewer RX queues than TCs fails the configure. Without the flag
//     it reports 1 TC. The layout exists from configure on. RX rings of 64..4096 descriptors in
//     steps of 32, default rx_free_thresh 32.
#pragma once

#include <rte_ethdev.h>

#include <algorithm>
#include <cstdint>

namespace heddle::dpdk::fake {

// ixgbe_dev_get_dcb_info(): `rx_dcb` = the configured RX mode carries the DCB flag; `nb_tcs` =
// what dev_start programmed (0 = not started since: ixgbe_dcb_init()'s pg_tcs = 8).
inline rte_eth_dcb_info IxgbeDcbInfo(bool rx_dcb, uint8_t nb_tcs) {
  rte_eth_dcb_info info{};
  if (!rx_dcb) {
    info.nb_tcs = 1;
    return info;
  }
  if (nb_tcs == 0) nb_tcs = 8;
  info.nb_tcs = nb_tcs;
  const uint16_t four[] = {64, 32, 16, 16};
  const uint16_t eight[] = {32, 32, 16, 16, 8, 8, 8, 8};
  uint16_t base = 0;
  for (int t = 0; t < nb_tcs; ++t) {
    const uint16_t n = nb_tcs == 4 ? four[t] : eight[t];
    info.tc_queue.tc_txq[0][t].base = base;
    info.tc_queue.tc_txq[0][t].nb_queue = n;
    info.tc_queue.tc_rxq[0][t].base = static_cast<uint16_t>(t * (nb_tcs == 4 ? 32 : 16));
    info.tc_queue.tc_rxq[0][t].nb_queue = 16;
    info.tc_bws[t] = static_cast<uint8_t>(100 / nb_tcs);
    base += n;
  }
  return info;
}

inline constexpr uint16_t kIxgbeQueues = 128;
// ixgbe's descriptor limits (IXGBE_MIN_RING_DESC, IXGBE_MAX_RING_DESC, IXGBE_RXD_ALIGN).
inline constexpr rte_eth_desc_lim kIxgbeRxDescLim{.nb_max = 4096, .nb_min = 32, .nb_align = 8};
// dev_info.default_rxconf.rx_free_thresh (IXGBE_DEFAULT_RX_FREE_THRESH).
inline constexpr uint16_t kIxgbeRxFreeThresh = 32;

// i40e's queue pairs per TC for `nb_rx_queues` configured (0 = the configure fails).
inline uint16_t I40eQueuesPerTc(uint16_t nb_rx_queues, uint8_t nb_tcs) {
  const unsigned per = nb_tcs ? nb_rx_queues / nb_tcs : 0;
  if (per == 0) return 0;
  unsigned p2 = 1;
  while (p2 * 2 <= per) p2 *= 2;
  return static_cast<uint16_t>(std::min(p2, 64u));
}

// i40e_dev_get_dcb_info() after a configure with `nb_rx_queues` and dcb_rx_conf.nb_tcs `nb_tcs`.
inline rte_eth_dcb_info I40eDcbInfo(bool rx_dcb, uint8_t nb_tcs, uint16_t nb_rx_queues) {
  rte_eth_dcb_info info{};
  const uint8_t tcs = rx_dcb ? nb_tcs : 1;
  const uint16_t per = I40eQueuesPerTc(nb_rx_queues, tcs);
  info.nb_tcs = tcs;
  for (int t = 0; t < tcs; ++t) {
    info.tc_queue.tc_rxq[0][t].base = static_cast<uint16_t>(t * per);
    info.tc_queue.tc_rxq[0][t].nb_queue = per;
    info.tc_queue.tc_txq[0][t].base = info.tc_queue.tc_rxq[0][t].base;
    info.tc_queue.tc_txq[0][t].nb_queue = per;
    info.tc_bws[t] = static_cast<uint8_t>(100 / tcs + (t < 100 % tcs ? 1 : 0));
  }
  return info;
}

inline constexpr uint16_t kI40ePfQueues = 64;    // vmdq_queue_base
inline constexpr uint16_t kI40eVmdqQueues = 64;  // 16 pools x 4 after the PF's
inline constexpr uint16_t kI40eVmdqPoolBase = 1;
// i40e's descriptor limits (I40E_MIN_RING_DESC, I40E_MAX_RING_DESC, I40E_ALIGN_RING_DESC).
inline constexpr rte_eth_desc_lim kI40eRxDescLim{.nb_max = 4096, .nb_min = 64, .nb_align = 32};
// dev_info.default_rxconf.rx_free_thresh (I40E_DEFAULT_RX_FREE_THRESH).
inline constexpr uint16_t kI40eRxFreeThresh = 32;

}  // namespace heddle::dpdk::fake
