#include "drivers/dpdk/dcb_plan.h"

#include <algorithm>
#include <bit>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace heddle::dpdk {
namespace {

// ports[].rx_desc's range (a power of two).
constexpr uint64_t kMinRxDesc = 64, kMaxRxDesc = 16384;

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

DcbCaps CapsOf(const rte_eth_dev_info& info) {
  return DcbCaps{.driver = info.driver_name ? info.driver_name : "unknown",
                 .max_rx_queues = info.max_rx_queues,
                 .max_tx_queues = info.max_tx_queues,
                 .vmdq_queue_base = info.vmdq_queue_base};
}

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
                                                   " traffic classes asked; DCB takes 4 or 8"));
  }
  HEDDLE_RETURN_IF_ERROR(CheckLevelTcs(port, tcs, tcs.nb_tcs));
  if (workers == 0) {
    return absl::InvalidArgumentError(absl::StrCat("port ", port, ": no worker to plan for"));
  }
  const uint32_t need = uint32_t{workers} * tcs.nb_tcs;
  const uint16_t offered = std::min(caps.max_rx_queues, caps.max_tx_queues);
  if (offered < need) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " offers ", offered, " queues; DCB needs ", need, " (", workers,
                     " worker(s) x ", int{tcs.nb_tcs},
                     " traffic classes): use fewer lcores.workers or fewer storm.levels", kFix));
  }
  DcbConfPlan p;
  p.nb_tcs = tcs.nb_tcs;
  // Enough for a PMD that splits the configured queues between the TCs (i40e refuses fewer
  // queues than TCs); PlanDcbQueueCounts() sets the real counts once DCB is on.
  p.nb_rx_queues = static_cast<uint16_t>(need);
  p.nb_tx_queues = static_cast<uint16_t>(need);
  p.dcb_capability_en = RTE_ETH_DCB_PG_SUPPORT | (pfc ? RTE_ETH_DCB_PFC_SUPPORT : 0);
  p.dcb_tc = tcs.prio_tc;
  return p;
}

void ApplyDcbConf(const DcbConfPlan& plan, uint64_t rss_hf, rte_eth_conf* conf) {
  const rte_eth_nb_tcs n = plan.nb_tcs == 8 ? RTE_ETH_8_TCS : RTE_ETH_4_TCS;
  // RX in DCB mode is what makes ixgbe report and program its TCs and i40e set them up at all;
  // RSS then spreads each TC's packets over that TC's RX queues.
  conf->rxmode.mq_mode = rss_hf != 0 ? RTE_ETH_MQ_RX_DCB_RSS : RTE_ETH_MQ_RX_DCB;
  conf->rx_adv_conf.rss_conf.rss_key = nullptr;  // driver default key
  conf->rx_adv_conf.rss_conf.rss_hf = rss_hf;
  conf->rx_adv_conf.dcb_rx_conf.nb_tcs = n;
  conf->txmode.mq_mode = RTE_ETH_MQ_TX_DCB;
  conf->tx_adv_conf.dcb_tx_conf.nb_tcs = n;
  for (int up = 0; up < RTE_ETH_DCB_NUM_USER_PRIORITIES; ++up) {
    conf->rx_adv_conf.dcb_rx_conf.dcb_tc[up] = plan.dcb_tc[up];
    conf->tx_adv_conf.dcb_tx_conf.dcb_tc[up] = plan.dcb_tc[up];
  }
  conf->dcb_capability_en = plan.dcb_capability_en;
}

absl::Status PlanDcbQueueCounts(const std::string& port, const DcbCaps& caps, uint16_t workers,
                                DcbConfPlan* plan) {
  // The PF's queues: all of them (ixgbe lays its TCs out over 128 whatever was configured;
  // i40e splits what was configured), but not the VMDq pools' after them.
  auto pf = [&](uint16_t max) {
    const uint16_t n = caps.vmdq_queue_base != 0 ? std::min(caps.vmdq_queue_base, max) : max;
    return std::min<uint16_t>(n, RTE_ETH_DCB_NUM_QUEUES);
  };
  const uint16_t rx = pf(caps.max_rx_queues), tx = pf(caps.max_tx_queues);
  const uint32_t need = uint32_t{workers} * plan->nb_tcs;
  if (std::min(rx, tx) < need) {
    return absl::FailedPreconditionError(absl::StrCat(
        "port ", port, ": driver ", caps.driver, " offers ", rx, " RX / ", tx,
        " TX queues with DCB on", caps.vmdq_queue_base != 0 ? " (before its VMDq pools)" : "",
        "; DCB needs ", need, " (", workers, " worker(s) x ", int{plan->nb_tcs},
        " traffic classes): use fewer lcores.workers or fewer storm.levels", kFix));
  }
  plan->nb_rx_queues = rx;
  plan->nb_tx_queues = tx;
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> PlanDcbRxDesc(const std::string& port, const std::string& driver,
                                       const DcbConfPlan& plan, uint16_t rx_queues,
                                       uint16_t rx_desc, const rte_eth_desc_lim& lim,
                                       uint16_t rx_free_thresh) {
  const std::string where = absl::StrCat("port ", port, ": driver ", driver);
  const uint32_t total = uint32_t{rx_queues} * rx_desc;
  const uint32_t nb = std::max<uint16_t>(plan.nb_rx_queues, 1);
  // Ring sizes: multiples of the PMD's step and of rx_free_thresh, above rx_free_thresh, within
  // the PMD's minimum and maximum.
  const uint32_t step =
      std::lcm(std::max<uint32_t>(lim.nb_align, 1), std::max<uint32_t>(rx_free_thresh, 1));
  const uint32_t low = std::max<uint32_t>({lim.nb_min, uint32_t{rx_free_thresh} + 1, 1});
  const uint32_t least = (low + step - 1) / step * step;
  const uint32_t most = (lim.nb_max != 0 ? lim.nb_max : UINT16_MAX) / step * step;
  if (least > most) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": no RX ring size is a multiple of its rx_free_thresh ",
                     rx_free_thresh, " above it within its limits ", lim.nb_min, "..", lim.nb_max,
                     " (step ", lim.nb_align, ")", kFix));
  }
  // The share, down to the step (so within the budget), but not below the smallest ring.
  const uint32_t rxd = std::clamp(total / nb / step * step, least, most);
  if (uint64_t{rxd} * nb > total) {
    // ports[].rx_desc is a power of two in 64..16384: the smallest that fits, or with 16384 the
    // rx_queues that do.
    const uint64_t need = uint64_t{rxd} * nb;
    const uint64_t fit = (need + rx_queues - 1) / std::max<uint16_t>(rx_queues, 1);
    const uint64_t raise = std::bit_ceil(std::max<uint64_t>(fit, kMinRxDesc));
    const std::string fix =
        raise <= kMaxRxDesc ? absl::StrCat("raise rx_desc to ", raise)
                            : absl::StrCat("raise rx_desc to ", kMaxRxDesc, " and rx_queues to ",
                                           (need + kMaxRxDesc - 1) / kMaxRxDesc);
    return absl::FailedPreconditionError(absl::StrCat(
        where, " receives on ", nb, " RX queues with DCB, of at least ", rxd,
        " descriptors each (a multiple of its rx_free_thresh ", rx_free_thresh, " above it; ", need,
        " mbufs filled at start); ports[", port, "].rx_queues x rx_desc allows ", total, ": ", fix,
        " (mempool.mbufs' minimum grows with it)", kFix));
  }
  return static_cast<uint16_t>(rxd);
}

absl::StatusOr<DcbQueues> PlanDcbQueues(const std::string& port, const std::string& driver,
                                        const DcbConfPlan& plan, const DcbTcs& tcs,
                                        const rte_eth_dcb_info& info, uint16_t workers) {
  const std::string where = absl::StrCat("port ", port, ": driver ", driver);
  if (info.nb_tcs != plan.nb_tcs) {
    // ixgbe answers 1 while the RX mode lacks RTE_ETH_MQ_RX_DCB_FLAG, and i40e too; both were
    // given it, so the PMD did not turn DCB on. (ixgbe answers 8 before its first start with the
    // flag: the layout is read from the started port.)
    return absl::FailedPreconditionError(absl::StrCat(
        where, " reports ", int{info.nb_tcs}, " traffic classes after start with DCB configured ",
        "for ", int{plan.nb_tcs}, " (RX and TX): the PMD did not enable DCB", kFix));
  }
  DcbQueues q;
  q.nb_tcs = plan.nb_tcs;
  q.level_tc = tcs.level_tc;
  for (int t = 0; t < plan.nb_tcs; ++t) {
    q.tc_base[t] = info.tc_queue.tc_txq[0][t].base;
    q.tc_count[t] = info.tc_queue.tc_txq[0][t].nb_queue;
    q.tc_bws[t] = info.tc_bws[t];
    // Every TC can receive (any user priority maps to one), so each needs RX queues we set up.
    const auto& rxq = info.tc_queue.tc_rxq[0][t];
    if (rxq.nb_queue == 0 || uint32_t{rxq.base} + rxq.nb_queue > plan.nb_rx_queues) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": TC ", t, " has RX queues ", rxq.base, "+", rxq.nb_queue, " of the ",
          plan.nb_rx_queues, " configured; its packets would not be received", kFix));
    }
    for (uint16_t i = 0; i < rxq.nb_queue; ++i) {
      q.rx_queues.push_back(static_cast<uint16_t>(rxq.base + i));
    }
  }
  std::sort(q.rx_queues.begin(), q.rx_queues.end());
  q.rx_queues.erase(std::unique(q.rx_queues.begin(), q.rx_queues.end()), q.rx_queues.end());
  // Only the TCs a level uses need a TX queue per worker.
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
