#include "drivers/dpdk/port.h"

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_memory.h>
#include <rte_mempool.h>

#include <algorithm>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace heddle::dpdk {

std::string EthdevNameFor(const PortParams& p) {
  std::string first(p.device.substr(0, p.device.find(',')));
  if (!p.is_vdev && std::count(first.begin(), first.end(), ':') == 1) first = "0000:" + first;
  return first;
}

namespace {

std::vector<std::string> ProbedNames() {
  std::vector<std::string> names;
  uint16_t pid;
  RTE_ETH_FOREACH_DEV(pid) {
    char name[RTE_ETH_NAME_MAX_LEN];
    if (rte_eth_dev_get_name_by_port(pid, name) == 0) names.push_back(name);
  }
  return names;
}

}  // namespace

absl::StatusOr<Port> Port::Find(const PortParams& p) {
  const std::string want = EthdevNameFor(p);
  uint16_t pid = 0;
  bool found = rte_eth_dev_get_port_by_name(want.c_str(), &pid) == 0;
  if (!found) {
    // mlx5 and others name ports after the PCI address plus a suffix (representors); match the
    // underlying device instead.
    uint16_t it;
    RTE_ETH_FOREACH_DEV(it) {
      rte_eth_dev_info info;
      if (rte_eth_dev_info_get(it, &info) != 0 || info.device == nullptr) continue;
      if (want == rte_dev_name(info.device)) {
        pid = it;
        found = true;
        break;
      }
    }
  }
  if (!found) {
    std::vector<std::string> probed = ProbedNames();
    std::string have = probed.empty() ? "none" : absl::StrJoin(probed, ", ");
    std::string why =
        p.is_vdev
            ? absl::StrCat("vdev \"", p.device, "\" was not created: check the driver name (", want,
                           ") and its devargs (e.g. a missing rx_pcap file or a driver "
                           "plugin not installed: ls /usr/lib/*/dpdk/pmds-*)")
            : absl::StrCat("PCI device ", want,
                           " was not probed: no such device, or not bound to a DPDK-capable "
                           "driver (vfio-pci, or mlx5_core for mlx5); check `dpdk-devbind.py -s`");
    return absl::NotFoundError(absl::StrCat("port ", p.name, ": ", why, "; probed ports: ", have));
  }
  Port port;
  port.params_ = p;
  port.port_id_ = pid;
  rte_eth_dev_info info;
  if (int rc = rte_eth_dev_info_get(pid, &info); rc != 0) {
    return absl::InternalError(
        absl::StrCat("port ", p.name, ": rte_eth_dev_info_get: ", rte_strerror(-rc)));
  }
  port.driver_ = info.driver_name ? info.driver_name : "unknown";
  int sock = rte_eth_dev_socket_id(pid);
  port.socket_id_ = sock < 0 ? 0 : sock;
  return port;
}

absl::Status Port::Configure(rte_mempool* pool) {
  const std::string& n = params_.name;
  rte_eth_dev_info info;
  if (int rc = rte_eth_dev_info_get(port_id_, &info); rc != 0) {
    return absl::InternalError(
        absl::StrCat("port ", n, ": rte_eth_dev_info_get: ", rte_strerror(-rc)));
  }
  if (params_.rx_queues > info.max_rx_queues) {
    return absl::InvalidArgumentError(
        absl::StrCat("ports[", n, "].rx_queues: ", params_.rx_queues, " exceeds what driver ",
                     driver_, " offers (", info.max_rx_queues, "); lower rx_queues",
                     driver_ == "net_pcap" ? " or give net_pcap one rx_pcap= per queue" : ""));
  }
  rte_eth_conf conf{};
  rss_enabled_ = false;
  const uint64_t rss_hf =
      (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP) & info.flow_type_rss_offloads;
  if (params_.rx_queues > 1) {
    if (rss_hf != 0) {
      conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
      conf.rx_adv_conf.rss_conf.rss_key = nullptr;  // driver default key
      conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
      rss_enabled_ = true;
    } else {
      HEDDLE_LOG(kWarning,
                 "port %s: driver %s does not hash (RSS); its %u RX queues are filled as the "
                 "driver decides",
                 n.c_str(), driver_.c_str(), params_.rx_queues);
    }
  }
  // Chained mbufs (jumbo frames received into several segments) are forwarded as they are; a
  // driver must be told so, or it may pick a TX path that sends only the first segment.
  // Some software PMDs take chains without advertising the offload (net_pcap copies the segments
  // out, net_ring and net_null pass the pointer on, net_tap and net_af_packet write each segment).
  static constexpr const char* kChainSafeVdevs[] = {"net_pcap", "net_ring", "net_null", "net_tap",
                                                    "net_af_packet"};
  const bool advertised = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
  if (advertised) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  tx_multi_seg_ = advertised || std::any_of(std::begin(kChainSafeVdevs), std::end(kChainSafeVdevs),
                                            [&](const char* d) { return driver_ == d; });
  if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE) {
    conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;  // one pool, refcnt 1
  }

  dcb_.reset();
  dcb_fallback_.clear();
  if (params_.tx_dcb != PortParams::TxDcb::kOff) {
    absl::Status why = ConfigureDcb(info, conf, rss_hf, pool);
    if (why.ok()) return absl::OkStatus();
    // The port may be started (the layout is read after start) and half set up: stop it; the
    // software configuration below replaces the DCB one.
    dcb_.reset();
    if (started_) {
      // A port that did not stop stays started: configuring it again would fail (EBUSY).
      if (int rc = rte_eth_dev_stop(port_id_); rc != 0) {
        return absl::InternalError(absl::StrCat("port ", n, ": rte_eth_dev_stop after the DCB ",
                                                "set-up failed (", why.message(),
                                                "): ", rte_strerror(-rc)));
      }
      started_ = false;
    }
    if (params_.tx_dcb == PortParams::TxDcb::kRequire) {
      return absl::Status(why.code(), absl::StrCat("storm.egress dcb: ", why.message()));
    }
    dcb_fallback_ = std::string(why.message());
    HEDDLE_LOG(kWarning, "storm.egress auto: %s; port %s serves the levels from software queues",
               dcb_fallback_.c_str(), n.c_str());
  }

  if (params_.tx_queues > info.max_tx_queues) {
    return absl::InvalidArgumentError(absl::StrCat(
        "port ", n, ": needs ", params_.tx_queues, " TX queues (one per worker lcore) but driver ",
        driver_, " offers ", info.max_tx_queues, "; use fewer lcores.workers",
        driver_ == "net_pcap" ? " or give net_pcap one tx_pcap= per queue" : ""));
  }
  if (int rc = rte_eth_dev_configure(port_id_, params_.rx_queues, params_.tx_queues, &conf);
      rc != 0) {
    return absl::InternalError(absl::StrCat("port ", n, ": rte_eth_dev_configure(",
                                            params_.rx_queues, " rx, ", params_.tx_queues,
                                            " tx): ", rte_strerror(-rc)));
  }
  return SetUpQueues(info, conf, params_.rx_queues, params_.rx_desc, params_.tx_queues, pool);
}

absl::Status Port::SetUpQueues(const rte_eth_dev_info& info, const rte_eth_conf& conf,
                               uint16_t nb_rx, uint16_t rx_desc, uint16_t nb_tx,
                               rte_mempool* pool) {
  const std::string& n = params_.name;
  uint16_t rxd = rx_desc, txd = params_.tx_desc;
  if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &rxd, &txd); rc != 0) {
    return absl::InternalError(
        absl::StrCat("port ", n, ": descriptor counts: ", rte_strerror(-rc)));
  }
  if (params_.mtu != 0) {
    if (int rc = rte_eth_dev_set_mtu(port_id_, params_.mtu); rc != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ports[", n, "].mtu: ", params_.mtu, " refused by driver ", driver_, ": ",
                       rte_strerror(-rc), " (max ", info.max_mtu, ")"));
    }
  }
  for (uint16_t q = 0; q < nb_rx; ++q) {
    rte_eth_rxconf rxc = info.default_rxconf;
    if (int rc = rte_eth_rx_queue_setup(port_id_, q, rxd, socket_id_, &rxc, pool); rc != 0) {
      return absl::InternalError(
          absl::StrCat("port ", n, ": RX queue ", q, " setup: ", rte_strerror(-rc)));
    }
  }
  // Every configured queue is set up (a DCB PMD may name any of them for a traffic class).
  for (uint16_t q = 0; q < nb_tx; ++q) {
    rte_eth_txconf txc = info.default_txconf;
    txc.offloads = conf.txmode.offloads;
    if (int rc = rte_eth_tx_queue_setup(port_id_, q, txd, socket_id_, &txc); rc != 0) {
      return absl::InternalError(
          absl::StrCat("port ", n, ": TX queue ", q, " setup: ", rte_strerror(-rc)));
    }
  }
  rx_queue_ids_.clear();
  for (uint16_t q = 0; q < nb_rx; ++q) rx_queue_ids_.push_back(q);
  tx_queues_configured_ = nb_tx;
  return absl::OkStatus();
}

absl::Status Port::ConfigureDcb(const rte_eth_dev_info& info, const rte_eth_conf& base,
                                uint64_t rss_hf, rte_mempool* pool) {
  const std::string& n = params_.name;
  const uint16_t workers = params_.tx_queues;
  rte_eth_dcb_info probe{};
  DcbCaps caps = CapsOf(info);
  caps.driver = driver_;
  caps.dcb_info_supported = rte_eth_dev_get_dcb_info(port_id_, &probe) != -ENOTSUP;
  HEDDLE_ASSIGN_OR_RETURN(DcbConfPlan plan,
                          PlanDcbConf(n, caps, params_.dcb_tcs, workers, params_.dcb_pfc));
  // The queue counts and RX rings the device's dev_info allows, checked before the first DCB
  // configure (which already changes i40e's TC map), so a refusal leaves the NIC as it was; both
  // are checked again with the DCB-mode dev_info below.
  {
    DcbConfPlan pre = plan;
    HEDDLE_RETURN_IF_ERROR(PlanDcbQueueCounts(n, CapsOf(info), workers, &pre));
    HEDDLE_RETURN_IF_ERROR(PlanDcbRxDesc(n, driver_, pre, params_.rx_queues, params_.rx_desc,
                                         info.rx_desc_lim, info.default_rxconf.rx_free_thresh)
                               .status());
  }
  rte_eth_conf conf = base;
  ApplyDcbConf(plan, rss_hf, &conf);
  auto configure = [&]() -> absl::Status {
    if (int rc = rte_eth_dev_configure(port_id_, plan.nb_rx_queues, plan.nb_tx_queues, &conf);
        rc != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("port ", n, ": driver ", driver_, " refused DCB with ", int{plan.nb_tcs},
                       " TCs on ", plan.nb_rx_queues, " RX / ", plan.nb_tx_queues,
                       " TX queues: rte_eth_dev_configure: ", rte_strerror(-rc)));
    }
    return absl::OkStatus();
  };
  HEDDLE_RETURN_IF_ERROR(configure());
  // The queue counts the PMD allows with DCB on, then configure again with them.
  rte_eth_dev_info dinfo;
  if (int rc = rte_eth_dev_info_get(port_id_, &dinfo); rc != 0) {
    return absl::InternalError(
        absl::StrCat("port ", n, ": rte_eth_dev_info_get: ", rte_strerror(-rc)));
  }
  const uint16_t first_rx = plan.nb_rx_queues, first_tx = plan.nb_tx_queues;
  HEDDLE_RETURN_IF_ERROR(PlanDcbQueueCounts(n, CapsOf(dinfo), workers, &plan));
  if (plan.nb_rx_queues != first_rx || plan.nb_tx_queues != first_tx) {
    HEDDLE_RETURN_IF_ERROR(configure());
  }
  // RSS spreads each TC's packets over all of the TC's RX queues, so all are polled; their rings
  // share what the port's rx_queues x rx_desc would hold (the pool fills every ring at start).
  HEDDLE_ASSIGN_OR_RETURN(const uint16_t rxd,
                          PlanDcbRxDesc(n, driver_, plan, params_.rx_queues, params_.rx_desc,
                                        dinfo.rx_desc_lim, dinfo.default_rxconf.rx_free_thresh));
  HEDDLE_RETURN_IF_ERROR(SetUpQueues(dinfo, conf, plan.nb_rx_queues, rxd, plan.nb_tx_queues, pool));
  // ixgbe programs its TC count in dev_start: the layout is read from the started port.
  if (int rc = rte_eth_dev_start(port_id_); rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("port ", n, ": driver ", driver_,
                     " did not start with DCB: rte_eth_dev_start: ", rte_strerror(-rc)));
  }
  started_ = true;
  rte_eth_dcb_info layout{};
  if (int rc = rte_eth_dev_get_dcb_info(port_id_, &layout); rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "port ", n, ": driver ", driver_, ": rte_eth_dev_get_dcb_info: ", rte_strerror(-rc)));
  }
  HEDDLE_ASSIGN_OR_RETURN(DcbQueues q,
                          PlanDcbQueues(n, driver_, plan, params_.dcb_tcs, layout, workers));
  rx_queue_ids_ = q.rx_queues;
  rss_enabled_ = rss_hf != 0;
  dcb_ = std::move(q);
  return absl::OkStatus();
}

absl::Status Port::Start() {
  // A DCB port was started by Configure() (its TC layout exists only once started).
  if (!started_) {
    if (int rc = rte_eth_dev_start(port_id_); rc != 0) {
      return absl::InternalError(
          absl::StrCat("port ", params_.name, ": rte_eth_dev_start: ", rte_strerror(-rc)));
    }
    started_ = true;
  }
  if (params_.promiscuous) {
    int rc = rte_eth_promiscuous_enable(port_id_);
    if (rc != 0 && rc != -ENOTSUP) {
      HEDDLE_LOG(kWarning, "port %s: promiscuous mode: %s", params_.name.c_str(),
                 rte_strerror(-rc));
    }
  }
  return absl::OkStatus();
}

void Port::StopAndClose() {
  if (closed_) return;
  if (started_) {
    if (int rc = rte_eth_dev_stop(port_id_); rc != 0) {
      HEDDLE_LOG(kWarning, "port %s: stop: %s", params_.name.c_str(), rte_strerror(-rc));
    }
    started_ = false;
  }
  if (int rc = rte_eth_dev_close(port_id_); rc != 0) {
    HEDDLE_LOG(kWarning, "port %s: close: %s", params_.name.c_str(), rte_strerror(-rc));
  }
  closed_ = true;
}

std::string Port::MacAddress() const {
  rte_ether_addr a{};
  if (rte_eth_macaddr_get(port_id_, &a) != 0) return "";
  char buf[RTE_ETHER_ADDR_FMT_SIZE];
  rte_ether_format_addr(buf, sizeof(buf), &a);
  for (char* c = buf; *c; ++c) *c = static_cast<char>(tolower(*c));
  return buf;
}

LinkInfo Port::Link() const {
  rte_eth_link l{};
  LinkInfo out;
  if (closed_ || rte_eth_link_get_nowait(port_id_, &l) != 0) return out;
  out.up = l.link_status == RTE_ETH_LINK_UP;
  out.speed_mbps = l.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN ? 0 : l.link_speed;
  out.full_duplex = l.link_duplex == RTE_ETH_LINK_FULL_DUPLEX;
  return out;
}

HwStats Port::Stats() const {
  HwStats h;
  rte_eth_stats s{};
  if (closed_ || rte_eth_stats_get(port_id_, &s) != 0) return h;
  h.rx_missed = s.imissed;
  h.rx_errors = s.ierrors;
  h.tx_errors = s.oerrors;
  h.rx_nombuf = s.rx_nombuf;
  h.rx_packets = s.ipackets;
  h.tx_packets = s.opackets;
  return h;
}

namespace {

// rte_pktmbuf_pool_create() for PackedMbufPools(). Without hugepages DPDK keeps every object
// inside one 4 KiB page (the IOVA-contiguity rule), so a ~2.4 KiB mbuf takes a page of its own:
// 40 % of the pool's memory is padding, and every mbuf header and every frame start lands in
// the same L1 set, so a burst of 32 evicts itself. When IOVA is VA, a virtually contiguous
// object is IOVA-contiguous too, and the pool can pack its objects (RTE_MEMPOOL_F_NO_IOVA_CONTIG).
rte_mempool* PackedPktmbufPool(const char* name, uint32_t n, uint16_t cache, uint16_t data_room,
                               int socket_id) {
  rte_mempool* mp = rte_mempool_create_empty(name, n, sizeof(rte_mbuf) + data_room, cache,
                                             sizeof(rte_pktmbuf_pool_private), socket_id,
                                             RTE_MEMPOOL_F_NO_IOVA_CONTIG);
  if (mp == nullptr) return nullptr;
  int ret = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr);
  if (ret == 0) {
    rte_pktmbuf_pool_private priv{};
    priv.mbuf_data_room_size = data_room;
    priv.mbuf_priv_size = 0;
    rte_pktmbuf_pool_init(mp, &priv);
    ret = rte_mempool_populate_default(mp);
  }
  if (ret < 0) {
    rte_mempool_free(mp);
    rte_errno = -ret;
    return nullptr;
  }
  // Such a pool records no IOVA for its objects (RTE_BAD_IOVA). IOVA is VA here, so each
  // object's IOVA is its address: set in its header first, so rte_mempool_virt2iova() and the
  // buffer IOVA rte_pktmbuf_init() derives from it are what a device's DMA needs.
  rte_mempool_obj_iter(
      mp,
      [](rte_mempool* pool, void* arg, void* obj, unsigned idx) {
        rte_mempool_get_header(obj)->iova = rte_mem_virt2iova(obj);
        rte_pktmbuf_init(pool, arg, obj, idx);
      },
      nullptr);
  return mp;
}

}  // namespace

bool PackedMbufPools() { return !rte_eal_has_hugepages() && rte_eal_iova_mode() == RTE_IOVA_VA; }

absl::StatusOr<rte_mempool*> CreateMbufPool(const std::string& name, uint32_t mbufs, uint16_t cache,
                                            uint16_t data_room, int socket_id) {
  rte_mempool* mp =
      PackedMbufPools()
          ? PackedPktmbufPool(name.c_str(), mbufs, cache, data_room, socket_id)
          : rte_pktmbuf_pool_create(name.c_str(), mbufs, cache, 0, data_room, socket_id);
  if (mp == nullptr) {
    int err = rte_errno;
    return absl::ResourceExhaustedError(absl::StrCat(
        "mbuf pool ", name, " (", mbufs, " mbufs of ", data_room, " B on socket ", socket_id,
        "): ", rte_strerror(err),
        err == ENOMEM ? "; raise memory.size_mb (no_huge) or hugepages, or lower mempool.mbufs"
                      : ""));
  }
  return mp;
}

}  // namespace heddle::dpdk
