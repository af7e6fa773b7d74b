// Port::Configure()'s DCB sequence through the real rte_ethdev calls, against fake PMDs that
// answer as ixgbe and i40e do (fake_dcb_pmd.h) and one that refuses DCB.
//
// How the fakes sit behind rte_ethdev: DPDK's driver SDK header (ethdev_driver.h, needed to fill
// an eth_dev_ops of our own behind rte_eth_dev_allocate()) is not installed by Debian's
// libdpdk-dev 22.11. So each fake is a real net_null port (real queues, real configure, start,
// queue set-up and bursts) whose DCB-specific answers are interposed at the ethdev API: this
// binary is linked with --wrap for rte_eth_dev_info_get, rte_eth_dev_configure,
// rte_eth_dev_start, rte_eth_dev_stop, rte_eth_dev_get_dcb_info, rte_eth_rx_queue_setup and
// rte_eth_tx_queue_setup, and for a fake port the wrapper answers as the PMD would (driver name,
// queue counts, refusals, the TC layout at the moment the PMD has it) and forwards the rest to the
// real net_null. Port's code is unchanged and makes its calls in its own order; every call but the
// queue set-ups is logged, so the tests check the order too; the queue set-ups (queue id and
// descriptors) are recorded per configure and as they were at start.
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "drivers/dpdk/eal.h"
#include "drivers/dpdk/fake_dcb_pmd.h"
#include "drivers/dpdk/port.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::dpdk {
namespace {

enum class FakeKind { kIxgbe, kI40e, kRefusesDcb };

struct FakePmd {
  FakeKind kind;
  bool rx_dcb = false;      // the configured RX mode carries RTE_ETH_MQ_RX_DCB_FLAG
  uint8_t conf_tcs = 0;     // dcb_rx_conf.nb_tcs configured
  uint16_t nb_rx = 0;       // RX queues configured
  uint8_t started_tcs = 0;  // ixgbe: the TC count dev_start programmed (0: not since configure)
  uint16_t nb_tx = 0;       // TX queues configured
  int stop_rc = 0;          // != 0: rte_eth_dev_stop fails with it (the port stays started)
  // Queue id -> nb_desc of the queues set up since the last configure, and as they were at the
  // last start (with the counts configured then).
  std::map<uint16_t, uint16_t> rx_setup, tx_setup, rx_at_start, tx_at_start;
  uint16_t nb_rx_at_start = 0, nb_tx_at_start = 0;
  std::vector<std::string> calls;
};

std::map<uint16_t, FakePmd>& Fakes() {
  static std::map<uint16_t, FakePmd> fakes;
  return fakes;
}

FakePmd* FakeFor(uint16_t port) {
  auto it = Fakes().find(port);
  return it == Fakes().end() ? nullptr : &it->second;
}

const char* DriverName(FakeKind k) {
  switch (k) {
    case FakeKind::kIxgbe:
      return "net_ixgbe";
    case FakeKind::kI40e:
      return "net_i40e";
    case FakeKind::kRefusesDcb:
      return "net_refuses_dcb";
  }
  return "?";
}

std::string RxMode(rte_eth_rx_mq_mode m) {
  switch (m) {
    case RTE_ETH_MQ_RX_NONE:
      return "NONE";
    case RTE_ETH_MQ_RX_RSS:
      return "RSS";
    case RTE_ETH_MQ_RX_DCB:
      return "DCB";
    case RTE_ETH_MQ_RX_DCB_RSS:
      return "DCB_RSS";
    default:
      return absl::StrCat(int{m});
  }
}

}  // namespace
}  // namespace heddle::dpdk

using heddle::dpdk::FakeFor;
using heddle::dpdk::FakeKind;
using heddle::dpdk::FakePmd;
namespace fake = heddle::dpdk::fake;

extern "C" {
int __real_rte_eth_dev_info_get(uint16_t port_id, struct rte_eth_dev_info* dev_info);
int __real_rte_eth_dev_configure(uint16_t port_id, uint16_t nb_rx_q, uint16_t nb_tx_q,
                                 const struct rte_eth_conf* dev_conf);
int __real_rte_eth_dev_start(uint16_t port_id);
int __real_rte_eth_dev_stop(uint16_t port_id);
int __real_rte_eth_dev_get_dcb_info(uint16_t port_id, struct rte_eth_dcb_info* dcb_info);
int __real_rte_eth_rx_queue_setup(uint16_t port_id, uint16_t rx_queue_id, uint16_t nb_rx_desc,
                                  unsigned int socket_id, const struct rte_eth_rxconf* rx_conf,
                                  struct rte_mempool* mb_pool);
int __real_rte_eth_tx_queue_setup(uint16_t port_id, uint16_t tx_queue_id, uint16_t nb_tx_desc,
                                  unsigned int socket_id, const struct rte_eth_txconf* tx_conf);

int __wrap_rte_eth_rx_queue_setup(uint16_t port_id, uint16_t rx_queue_id, uint16_t nb_rx_desc,
                                  unsigned int socket_id, const struct rte_eth_rxconf* rx_conf,
                                  struct rte_mempool* mb_pool) {
  const int rc =
      __real_rte_eth_rx_queue_setup(port_id, rx_queue_id, nb_rx_desc, socket_id, rx_conf, mb_pool);
  if (FakePmd* f = FakeFor(port_id); f != nullptr && rc == 0) f->rx_setup[rx_queue_id] = nb_rx_desc;
  return rc;
}

int __wrap_rte_eth_tx_queue_setup(uint16_t port_id, uint16_t tx_queue_id, uint16_t nb_tx_desc,
                                  unsigned int socket_id, const struct rte_eth_txconf* tx_conf) {
  const int rc =
      __real_rte_eth_tx_queue_setup(port_id, tx_queue_id, nb_tx_desc, socket_id, tx_conf);
  if (FakePmd* f = FakeFor(port_id); f != nullptr && rc == 0) f->tx_setup[tx_queue_id] = nb_tx_desc;
  return rc;
}

int __wrap_rte_eth_dev_info_get(uint16_t port_id, struct rte_eth_dev_info* info) {
  const int rc = __real_rte_eth_dev_info_get(port_id, info);
  FakePmd* f = FakeFor(port_id);
  if (rc != 0 || f == nullptr) return rc;
  info->driver_name = heddle::dpdk::DriverName(f->kind);
  info->flow_type_rss_offloads = RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP;
  info->vmdq_queue_base = 0;
  info->vmdq_pool_base = 0;
  switch (f->kind) {
    case FakeKind::kIxgbe:
      info->max_rx_queues = info->max_tx_queues = fake::kIxgbeQueues;
      info->rx_desc_lim = fake::kIxgbeRxDescLim;
      info->default_rxconf.rx_free_thresh = fake::kIxgbeRxFreeThresh;
      break;
    case FakeKind::kI40e:
      // The PF's queue pairs, then the VMDq pools' (counted in max_*_queues).
      info->max_rx_queues = info->max_tx_queues = fake::kI40ePfQueues + fake::kI40eVmdqQueues;
      info->vmdq_queue_base = fake::kI40ePfQueues;
      info->vmdq_pool_base = fake::kI40eVmdqPoolBase;
      info->rx_desc_lim = fake::kI40eRxDescLim;
      info->default_rxconf.rx_free_thresh = fake::kI40eRxFreeThresh;
      break;
    case FakeKind::kRefusesDcb:
      info->max_rx_queues = info->max_tx_queues = 64;
      break;
  }
  return 0;
}

int __wrap_rte_eth_dev_configure(uint16_t port_id, uint16_t nb_rx_q, uint16_t nb_tx_q,
                                 const struct rte_eth_conf* conf) {
  FakePmd* f = FakeFor(port_id);
  if (f == nullptr) return __real_rte_eth_dev_configure(port_id, nb_rx_q, nb_tx_q, conf);
  const bool rx_dcb = (conf->rxmode.mq_mode & RTE_ETH_MQ_RX_DCB_FLAG) != 0;
  const bool tx_dcb = conf->txmode.mq_mode == RTE_ETH_MQ_TX_DCB;
  const uint8_t rx_tcs = static_cast<uint8_t>(conf->rx_adv_conf.dcb_rx_conf.nb_tcs);
  const uint8_t tx_tcs = static_cast<uint8_t>(conf->tx_adv_conf.dcb_tx_conf.nb_tcs);
  f->calls.push_back(absl::StrCat(
      "configure ", nb_rx_q, "/", nb_tx_q, " rx=", heddle::dpdk::RxMode(conf->rxmode.mq_mode),
      tx_dcb ? " tx=DCB" : "", rx_dcb ? absl::StrCat(" tcs=", rx_tcs) : ""));
  switch (f->kind) {
    case FakeKind::kIxgbe:
      // ixgbe_check_mq_mode(): DCB takes 4 or 8 TCs, RX and TX alike.
      if ((rx_dcb && rx_tcs != 4 && rx_tcs != 8) || (tx_dcb && tx_tcs != 4 && tx_tcs != 8)) {
        return -EINVAL;
      }
      break;
    case FakeKind::kI40e:
      // i40e_dcb_setup() (only with the RX flag) from dcb_rx_conf; fewer queues than TCs fails.
      if (rx_dcb && fake::I40eQueuesPerTc(nb_rx_q, rx_tcs) == 0) return -EINVAL;
      break;
    case FakeKind::kRefusesDcb:
      if (rx_dcb || tx_dcb) return -EINVAL;
      break;
  }
  const int rc = __real_rte_eth_dev_configure(port_id, nb_rx_q, nb_tx_q, conf);
  if (rc == 0) {
    f->rx_dcb = rx_dcb;
    f->conf_tcs = rx_tcs;
    f->nb_rx = nb_rx_q;
    f->nb_tx = nb_tx_q;
    f->started_tcs = 0;
    f->rx_setup.clear();
    f->tx_setup.clear();
  }
  return rc;
}

int __wrap_rte_eth_dev_start(uint16_t port_id) {
  const int rc = __real_rte_eth_dev_start(port_id);
  if (FakePmd* f = FakeFor(port_id); f != nullptr && rc == 0) {
    f->calls.push_back("start");
    f->rx_at_start = f->rx_setup;
    f->tx_at_start = f->tx_setup;
    f->nb_rx_at_start = f->nb_rx;
    f->nb_tx_at_start = f->nb_tx;
    if (f->rx_dcb) f->started_tcs = f->conf_tcs;  // ixgbe_dcb_hw_configure() in dev_start
  }
  return rc;
}

int __wrap_rte_eth_dev_stop(uint16_t port_id) {
  if (FakePmd* f = FakeFor(port_id)) {
    f->calls.push_back("stop");
    if (f->stop_rc != 0) return f->stop_rc;
  }
  return __real_rte_eth_dev_stop(port_id);
}

int __wrap_rte_eth_dev_get_dcb_info(uint16_t port_id, struct rte_eth_dcb_info* info) {
  FakePmd* f = FakeFor(port_id);
  if (f == nullptr) return __real_rte_eth_dev_get_dcb_info(port_id, info);
  f->calls.push_back("dcb_info");
  switch (f->kind) {
    case FakeKind::kIxgbe:
      *info = fake::IxgbeDcbInfo(f->rx_dcb, f->started_tcs);
      break;
    case FakeKind::kI40e:
      *info = fake::I40eDcbInfo(f->rx_dcb, f->conf_tcs, f->nb_rx);
      break;
    case FakeKind::kRefusesDcb:
      *info = rte_eth_dcb_info{};
      info->nb_tcs = 1;
      break;
  }
  return 0;
}
}  // extern "C"

namespace heddle::dpdk {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kVdevs = 12;
rte_mempool* g_pool = nullptr;

// One EAL per process: net_null0..7, one per test, and a pool.
class EalEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    EalParams p;
    p.program = "dpdk_dcb_port_test";
    p.no_huge = true;
    p.memory_mb = 256;
    for (int i = 0; i < kVdevs; ++i) p.vdevs.push_back(absl::StrCat("net_null", i));
    p.log_level = "error";
    ASSERT_TRUE(InitEal(p).ok());
    absl::StatusOr<rte_mempool*> pool =
        CreateMbufPool("dcb_test_pool", 8191, 32, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
    ASSERT_TRUE(pool.ok()) << pool.status();
    g_pool = *pool;
  }
  void TearDown() override {
    rte_mempool_free(g_pool);
    CleanupEal();
  }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new EalEnvironment);

DcbTcs InOrder(uint8_t nb_tcs, int levels) {
  DcbTcs t;
  t.nb_tcs = nb_tcs;
  for (int l = 0; l < kDcbLevels; ++l)
    t.level_tc[l] = static_cast<uint8_t>(std::min(l, levels - 1));
  for (int p = 0; p < 8; ++p) t.prio_tc[p] = static_cast<uint8_t>(p * nb_tcs / 8);
  return t;
}

// A port on net_null<vdev> that answers as `kind`.
absl::StatusOr<Port> FakePort(int vdev, FakeKind kind, PortParams::TxDcb mode, uint16_t workers,
                              DcbTcs tcs, uint16_t rx_desc = 4096) {
  const std::string dev = absl::StrCat("net_null", vdev);
  uint16_t pid = 0;
  if (rte_eth_dev_get_port_by_name(dev.c_str(), &pid) != 0) {
    return absl::NotFoundError(dev);
  }
  Fakes().erase(pid);
  Fakes().emplace(pid, FakePmd{.kind = kind});
  PortParams p{.name = absl::StrCat("up", vdev),
               .device = dev,
               .is_vdev = true,
               .rx_queues = 2,
               .tx_queues = workers,
               // 2 x 4096: ixgbe's 128 RX rings of 64 (above its rx_free_thresh 32), i40e's 64
               // of 128.
               .rx_desc = rx_desc,
               .tx_desc = 256};
  p.tx_dcb = mode;
  p.dcb_tcs = tcs;
  return Port::Find(p);
}

// At the start: every configured queue (nb_rx RX, nb_tx TX) was set up, RX with `rxd`
// descriptors each and TX with `txd`.
void ExpectSetUpAtStart(const FakePmd& f, uint16_t nb_rx, uint16_t rxd, uint16_t nb_tx,
                        uint16_t txd) {
  EXPECT_EQ(f.nb_rx_at_start, nb_rx);
  EXPECT_EQ(f.nb_tx_at_start, nb_tx);
  std::map<uint16_t, uint16_t> rx, tx;
  for (uint16_t q = 0; q < nb_rx; ++q) rx[q] = rxd;
  for (uint16_t q = 0; q < nb_tx; ++q) tx[q] = txd;
  EXPECT_EQ(f.rx_at_start, rx);
  EXPECT_EQ(f.tx_at_start, tx);
}

// One packet out on `txq` and at least one in on `rxq`: the port forwards on those queues.
void ExpectForwards(const Port& port, uint16_t txq, uint16_t rxq) {
  rte_mbuf* m = rte_pktmbuf_alloc(g_pool);
  ASSERT_NE(m, nullptr);
  ASSERT_NE(rte_pktmbuf_append(m, 60), nullptr);
  EXPECT_EQ(rte_eth_tx_burst(port.port_id(), txq, &m, 1), 1) << "TX queue " << txq;
  rte_mbuf* in[4];
  const uint16_t n = rte_eth_rx_burst(port.port_id(), rxq, in, 4);  // net_null makes packets up
  EXPECT_GT(n, 0) << "RX queue " << rxq;
  rte_pktmbuf_free_bulk(in, n);
}

TEST(DcbPortTest, IxgbeLikeGetsItsTcsOnlyFromTheStartedPortWithRxDcb) {
  absl::StatusOr<Port> port =
      FakePort(0, FakeKind::kIxgbe, PortParams::TxDcb::kRequire, 2, InOrder(4, 4));
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(port->driver(), "net_ixgbe");
  ASSERT_TRUE(port->Configure(g_pool).ok());
  const FakePmd& f = *FakeFor(port->port_id());
  // The probe before configure, one DCB configure (ixgbe's dev_info does not change with DCB:
  // 128 queues, so a second configure with all of them), start, then the layout.
  EXPECT_THAT(f.calls,
              ElementsAre("dcb_info", "configure 8/8 rx=DCB_RSS tx=DCB tcs=4",
                          "configure 128/128 rx=DCB_RSS tx=DCB tcs=4", "start", "dcb_info"));
  ASSERT_TRUE(port->dcb().has_value());
  const DcbQueues& q = *port->dcb();
  EXPECT_EQ(q.nb_tcs, 4);
  ASSERT_EQ(q.level_queue.size(), 2u);
  // (worker, level) -> TX queue: TC bases 0/64/96/112, as ixgbe reports them.
  EXPECT_EQ(q.level_queue[0], (std::array<uint16_t, 8>{0, 64, 96, 112, 112, 112, 112, 112}));
  EXPECT_EQ(q.level_queue[1], (std::array<uint16_t, 8>{1, 65, 97, 113, 113, 113, 113, 113}));
  EXPECT_EQ(port->tx_queues_configured(), 128);
  // All 128 queues set up before the start, RX rings of 64: 2 x 4096 over 128, a multiple of
  // ixgbe's rx_free_thresh (32) above it.
  ExpectSetUpAtStart(f, 128, 64, 128, 256);
  // RX: every TC's 16 queues (RSS spreads a TC over all of them), not the 2 of rx_queues.
  ASSERT_EQ(port->rx_queue_ids().size(), 64u);
  EXPECT_EQ(port->rx_queue_ids()[16], 32);
  EXPECT_TRUE(port->rss_enabled());
  EXPECT_TRUE(port->dcb_fallback().empty());

  // Start() finds the port started (the layout needed it) and does not start it twice.
  ASSERT_TRUE(port->Start().ok());
  EXPECT_EQ(std::count(f.calls.begin(), f.calls.end(), "start"), 1);
  ExpectForwards(*port, q.level_queue[1][3], port->rx_queue_ids().back());
  port->StopAndClose();
}

TEST(DcbPortTest, IxgbeLikeEightTcsFourWorkers) {
  absl::StatusOr<Port> port =
      FakePort(1, FakeKind::kIxgbe, PortParams::TxDcb::kPrefer, 4, InOrder(8, 8));
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_TRUE(port->Configure(g_pool).ok());
  ASSERT_TRUE(port->dcb().has_value()) << port->dcb_fallback();
  EXPECT_EQ(port->dcb()->level_queue[3],
            (std::array<uint16_t, 8>{3, 35, 67, 83, 99, 107, 115, 123}));
  EXPECT_EQ(port->rx_queue_ids().size(), 128u);
  ExpectSetUpAtStart(*FakeFor(port->port_id()), 128, 64, 128, 256);
  ASSERT_TRUE(port->Start().ok());
  ExpectForwards(*port, 123, 127);
  port->StopAndClose();
}

TEST(DcbPortTest, I40eLikeSplitsThePfQueuesItWasConfiguredWith) {
  absl::StatusOr<Port> port =
      FakePort(2, FakeKind::kI40e, PortParams::TxDcb::kRequire, 3, InOrder(4, 4));
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_TRUE(port->Configure(g_pool).ok());
  const FakePmd& f = *FakeFor(port->port_id());
  // First configure with workers x TCs, then with the PF's 64 queue pairs (vmdq_queue_base, not
  // the 128 that count the VMDq pools, nor vmdq_pool_base = 1).
  EXPECT_THAT(f.calls, ElementsAre("dcb_info", "configure 12/12 rx=DCB_RSS tx=DCB tcs=4",
                                   "configure 64/64 rx=DCB_RSS tx=DCB tcs=4", "start", "dcb_info"));
  ASSERT_TRUE(port->dcb().has_value());
  // 16 queue pairs per TC, TC t from 16 t: worker w sends TC t on 16 t + w.
  EXPECT_EQ(port->dcb()->level_queue[0], (std::array<uint16_t, 8>{0, 16, 32, 48, 48, 48, 48, 48}));
  EXPECT_EQ(port->dcb()->level_queue[2], (std::array<uint16_t, 8>{2, 18, 34, 50, 50, 50, 50, 50}));
  EXPECT_EQ(port->tx_queues_configured(), 64);
  EXPECT_EQ(port->rx_queue_ids().size(), 64u);
  // The PF's 64 queue pairs set up before the start, RX rings of 2 x 4096 / 64 = 128.
  ExpectSetUpAtStart(f, 64, 128, 64, 256);
  ASSERT_TRUE(port->Start().ok());
  ExpectForwards(*port, 50, 63);
  port->StopAndClose();
}

TEST(DcbPortTest, AutoFallsBackOnAPmdThatRefusesDcbAndTheSoftwarePortForwards) {
  absl::StatusOr<Port> port =
      FakePort(3, FakeKind::kRefusesDcb, PortParams::TxDcb::kPrefer, 2, InOrder(4, 4));
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_TRUE(port->Configure(g_pool).ok());
  EXPECT_FALSE(port->dcb().has_value());
  EXPECT_EQ(port->dcb_fallback(),
            "port up3: driver net_refuses_dcb refused DCB with 4 TCs on 8 RX / 8 TX queues: "
            "rte_eth_dev_configure: Invalid argument");
  const FakePmd& f = *FakeFor(port->port_id());
  EXPECT_THAT(f.calls, ElementsAre("dcb_info", "configure 8/8 rx=DCB_RSS tx=DCB tcs=4",
                                   "configure 2/2 rx=RSS"));
  EXPECT_EQ(port->tx_queues_configured(), 2);
  EXPECT_THAT(port->rx_queue_ids(), ElementsAre(0, 1));
  ASSERT_TRUE(port->Start().ok());
  ExpectForwards(*port, 1, 1);  // worker 1's TX queue, the second RX queue
  port->StopAndClose();
}

TEST(DcbPortTest, DcbRefusesAPmdThatRefusesDcbNamingPortAndReason) {
  absl::StatusOr<Port> port =
      FakePort(4, FakeKind::kRefusesDcb, PortParams::TxDcb::kRequire, 2, InOrder(4, 4));
  ASSERT_TRUE(port.ok()) << port.status();
  absl::Status s = port->Configure(g_pool);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "storm.egress dcb: port up4: driver net_refuses_dcb refused DCB with 4 TCs on 8 RX / "
            "8 TX queues: rte_eth_dev_configure: Invalid argument");
  EXPECT_FALSE(port->dcb().has_value());
  port->StopAndClose();
}

TEST(DcbPortTest, AutoStopsAStartedPortWhoseLayoutIsRefusedAndReconfiguresIt) {
  // Nine workers on ixgbe's 8-TC layout: TC 4 has 8 TX queues. Known only from the started port,
  // which auto then stops and configures without DCB.
  absl::StatusOr<Port> port =
      FakePort(5, FakeKind::kIxgbe, PortParams::TxDcb::kPrefer, 9, InOrder(8, 8));
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_TRUE(port->Configure(g_pool).ok());
  EXPECT_FALSE(port->dcb().has_value());
  EXPECT_THAT(port->dcb_fallback(),
              HasSubstr("port up5: driver net_ixgbe: TC 4 has 8 TX queue(s) (from 96)"));
  const FakePmd& f = *FakeFor(port->port_id());
  EXPECT_THAT(f.calls, ElementsAre("dcb_info", "configure 72/72 rx=DCB_RSS tx=DCB tcs=8",
                                   "configure 128/128 rx=DCB_RSS tx=DCB tcs=8", "start", "dcb_info",
                                   "stop", "configure 2/9 rx=RSS"));
  EXPECT_EQ(port->tx_queues_configured(), 9);
  EXPECT_THAT(port->rx_queue_ids(), ElementsAre(0, 1));
  ASSERT_TRUE(port->Start().ok());
  EXPECT_EQ(std::count(f.calls.begin(), f.calls.end(), "start"), 2);
  // The software configuration's own queues and rings at its start.
  ExpectSetUpAtStart(f, 2, 4096, 9, 256);
  ExpectForwards(*port, 8, 0);

  // Required instead: the same refusal fails Configure() and leaves the port stopped.
  absl::StatusOr<Port> req =
      FakePort(6, FakeKind::kIxgbe, PortParams::TxDcb::kRequire, 9, InOrder(8, 8));
  ASSERT_TRUE(req.ok());
  absl::Status s = req->Configure(g_pool);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("storm.egress dcb: port up6: driver net_ixgbe: TC 4 has 8 TX queue(s)"));
  EXPECT_EQ(FakeFor(req->port_id())->calls.back(), "stop");
  req->StopAndClose();
  port->StopAndClose();
}

TEST(DcbPortTest, ATooSmallRxBudgetIsRefusedBeforeAnyDcbConfigure) {
  // 2 x 1024 cannot fill ixgbe's 128 RX rings of 64: known from the dev_info before configure, so
  // auto falls back without configuring DCB at all.
  absl::StatusOr<Port> port =
      FakePort(7, FakeKind::kIxgbe, PortParams::TxDcb::kPrefer, 2, InOrder(4, 4), 1024);
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_TRUE(port->Configure(g_pool).ok());
  EXPECT_FALSE(port->dcb().has_value());
  EXPECT_THAT(port->dcb_fallback(),
              HasSubstr("port up7: driver net_ixgbe receives on 128 RX queues with DCB, of at "
                        "least 64 descriptors each"));
  const FakePmd& f = *FakeFor(port->port_id());
  EXPECT_THAT(f.calls, ElementsAre("dcb_info", "configure 2/2 rx=RSS"));
  port->StopAndClose();

  // Required: fails naming the rx_desc needed, with no configure made.
  absl::StatusOr<Port> req =
      FakePort(8, FakeKind::kI40e, PortParams::TxDcb::kRequire, 2, InOrder(4, 4), 1024);
  ASSERT_TRUE(req.ok());
  absl::Status s = req->Configure(g_pool);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("storm.egress dcb: port up8: driver net_i40e receives on 64 RX queues"));
  EXPECT_THAT(FakeFor(req->port_id())->calls, ElementsAre("dcb_info"));
  req->StopAndClose();
}

TEST(DcbPortTest, AFailedStopAfterARefusedLayoutIsReportedAndTheConfigureNotTried) {
  // ixgbe's 8-TC layout refused for nine workers after start; then the stop fails.
  absl::StatusOr<Port> port =
      FakePort(9, FakeKind::kIxgbe, PortParams::TxDcb::kPrefer, 9, InOrder(8, 8));
  ASSERT_TRUE(port.ok()) << port.status();
  FakePmd& f = *FakeFor(port->port_id());
  f.stop_rc = -EIO;
  absl::Status s = port->Configure(g_pool);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("port up9: rte_eth_dev_stop after the DCB set-up failed (port up9: driver "
                        "net_ixgbe: TC 4 has 8 TX queue(s)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("): Input/output error"));
  // No software configure of the still started port.
  EXPECT_EQ(f.calls.back(), "stop");
  EXPECT_FALSE(port->dcb().has_value());
  // The port is still known as started: StopAndClose() stops it.
  f.stop_rc = 0;
  port->StopAndClose();
  EXPECT_EQ(std::count(f.calls.begin(), f.calls.end(), "stop"), 2);
}

}  // namespace
}  // namespace heddle::dpdk
