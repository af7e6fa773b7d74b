#include "drivers/dpdk/dcb_plan.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace heddle::dpdk {
namespace {

constexpr const char* kFix = "; use storm.egress: software (or auto to fall back per port)";

// Every level's TC is one of the `nb_tcs` configured.
absl::Status CheckLevelTcs(const std::string& port, const DcbTcs& tcs, int nb_tcs) {
  for (int l = 0; l < kDcbLevels; ++l) {
    if (tcs.level_tc[l] >= nb_tcs) {
      return absl::InvalidArgumentError(absl::StrCat("port ", port, ": level ", l, " maps to TC ",
                                                     int{tcs.level_tc[l]}, " of ", nb_tcs));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DcbConfPlan> PlanDcbConf(const std::string& port, const DcbCaps& caps,
                                        const DcbTcs& tcs, uint16_t workers, bool pfc) {
  const std::string where = absl::StrCat("port ", port, ": driver ", caps.driver);
  if (absl::StrContains(caps.driver, "mlx5")) {
    // ConnectX takes the TC from the packet's DSCP or PCP (trust mode), not from the TX queue.
    return absl::FailedPreconditionError(absl::StrCat(
        where,
        " has no DCB TX mode: ConnectX picks the traffic class from each packet's DSCP "
        "(mlnx_qos --trust dscp) or PCP, so the level DSCPs already reach its ETS scheduler; use "
        "storm.egress: software and map the DSCPs to strict-priority TCs (docs/storm.md §6.7)"));
  }
  if (!caps.dcb_info_supported) {
    return absl::FailedPreconditionError(absl::StrCat(
        where,
        " has no DCB (rte_eth_dev_get_dcb_info: not supported); TX traffic classes need a DCB "
        "PMD such as ixgbe, i40e or ice",
        kFix));
  }
  if (tcs.nb_tcs != 4 && tcs.nb_tcs != 8) {
    return absl::InvalidArgumentError(absl::StrCat("port ", port, ": ", int{tcs.nb_tcs},
                                                   " traffic classes asked; DCB TX takes 4 or 8"));
  }
  HEDDLE_RETURN_IF_ERROR(CheckLevelTcs(port, tcs, tcs.nb_tcs));
  if (workers == 0) {
    return absl::InvalidArgumentError(absl::StrCat("port ", port, ": no worker to plan for"));
  }
  const uint32_t need = uint32_t{workers} * tcs.nb_tcs;
  if (caps.max_tx_queues < need) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " offers ", caps.max_tx_queues, " TX queues; DCB TX needs ", need, " (",
                     workers, " worker(s) x ", int{tcs.nb_tcs},
                     " traffic classes): use fewer lcores.workers or fewer storm.levels", kFix));
  }
  DcbConfPlan p;
  p.nb_tcs = tcs.nb_tcs;
  // The PMD splits its queues between the TCs by its own layout (ixgbe: 64/32/16/16 of 128 for 4
  // TCs); every queue it may name is configured, as testpmd does for DCB without VMDq pools.
  p.nb_tx_queues = caps.vmdq_pool_base != 0 ? caps.vmdq_pool_base : caps.max_tx_queues;
  p.nb_tx_queues = std::min<uint16_t>(p.nb_tx_queues, RTE_ETH_DCB_NUM_QUEUES);
  if (p.nb_tx_queues < need) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " has ", p.nb_tx_queues, " TX queues outside its VMDq pools; DCB TX needs ", need,
        " (", workers, " worker(s) x ", int{tcs.nb_tcs}, " traffic classes)", kFix));
  }
  p.dcb_capability_en = RTE_ETH_DCB_PG_SUPPORT | (pfc ? RTE_ETH_DCB_PFC_SUPPORT : 0);
  p.dcb_tc = tcs.prio_tc;
  return p;
}

void ApplyDcbConf(const DcbConfPlan& plan, rte_eth_conf* conf) {
  conf->txmode.mq_mode = RTE_ETH_MQ_TX_DCB;
  conf->tx_adv_conf.dcb_tx_conf.nb_tcs = plan.nb_tcs == 8 ? RTE_ETH_8_TCS : RTE_ETH_4_TCS;
  for (int up = 0; up < RTE_ETH_DCB_NUM_USER_PRIORITIES; ++up) {
    conf->tx_adv_conf.dcb_tx_conf.dcb_tc[up] = plan.dcb_tc[up];
  }
  conf->dcb_capability_en = plan.dcb_capability_en;
}

absl::StatusOr<DcbQueues> PlanDcbQueues(const std::string& port, const std::string& driver,
                                        const DcbConfPlan& plan, const DcbTcs& tcs,
                                        const rte_eth_dcb_info& info, uint16_t workers) {
  const std::string where = absl::StrCat("port ", port, ": driver ", driver);
  if (info.nb_tcs == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " reports 0 traffic classes after DCB TX was configured with ", int{plan.nb_tcs},
        ": the PMD did not enable DCB TX (i40e sets DCB up only with an RX DCB mode, which "
        "heddled leaves at RSS)",
        kFix));
  }
  if (info.nb_tcs != plan.nb_tcs) {
    // ixgbe answers 1 while the RX mode lacks RTE_ETH_MQ_RX_DCB_FLAG (ixgbe_dev_get_dcb_info(),
    // DPDK 22.11), which is heddled's TX-only set-up today.
    return absl::FailedPreconditionError(absl::StrCat(
        where, " reports ", int{info.nb_tcs}, " traffic classes after DCB TX was configured with ",
        int{plan.nb_tcs},
        " (ixgbe reports its TCs only with an RX DCB mode, which heddled does not set up yet: "
        "DCB TX is unproven on every PMD, docs/storm.md §6.7)",
        kFix));
  }
  DcbQueues q;
  q.nb_tcs = plan.nb_tcs;
  q.level_tc = tcs.level_tc;
  for (int t = 0; t < plan.nb_tcs; ++t) {
    q.tc_base[t] = info.tc_queue.tc_txq[0][t].base;
    q.tc_count[t] = info.tc_queue.tc_txq[0][t].nb_queue;
    q.tc_bws[t] = info.tc_bws[t];
  }
  // Only the TCs a level uses need a queue per worker.
  HEDDLE_RETURN_IF_ERROR(CheckLevelTcs(port, tcs, plan.nb_tcs));
  for (int l = 0; l < kDcbLevels; ++l) {
    const int t = tcs.level_tc[l];
    if (q.tc_count[t] < workers) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": TC ", t, " has ", q.tc_count[t], " TX queue(s) (from ", q.tc_base[t],
          "); each of the ", workers, " worker(s) needs one: use fewer lcores.workers", kFix));
    }
    if (uint32_t{q.tc_base[t]} + workers > plan.nb_tx_queues) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": TC ", t, "'s TX queues ", q.tc_base[t], "..", q.tc_base[t] + workers - 1,
          " lie past the ", plan.nb_tx_queues, " configured", kFix));
    }
  }
  q.level_queue.resize(workers);
  for (uint16_t w = 0; w < workers; ++w) {
    for (int l = 0; l < kDcbLevels; ++l) {
      q.level_queue[w][l] = static_cast<uint16_t>(q.tc_base[tcs.level_tc[l]] + w);
    }
  }
  return q;
}

std::string DescribeDcbQueues(const DcbQueues& q, int levels) {
  std::string out = absl::StrCat(int{q.nb_tcs}, " TCs:");
  const int workers = static_cast<int>(q.level_queue.size());
  for (int l = 0; l < std::min(levels, kDcbLevels); ++l) {
    const int t = q.level_tc[l];
    absl::StrAppend(&out, l ? ", " : " ", "L", l, "->TC", t, " q", q.tc_base[t]);
    if (workers > 1) absl::StrAppend(&out, "-", q.tc_base[t] + workers - 1);
  }
  return out;
}

}  // namespace heddle::dpdk
