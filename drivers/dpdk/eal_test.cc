#include "drivers/dpdk/eal.h"

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_memory.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <vector>

#include "absl/strings/str_join.h"
#include "drivers/dpdk/port.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::dpdk {
namespace {

using ::testing::HasSubstr;

TEST(BuildEalArgs, InMemoryNoHugeVdevs) {
  EalParams p;
  p.main_lcore = 0;
  p.worker_lcores = {1, 3};
  p.no_huge = true;
  p.memory_mb = 256;
  p.vdevs = {"net_null0", "net_ring0"};
  std::string s = absl::StrJoin(BuildEalArgs(p), " ");
  EXPECT_THAT(s, HasSubstr("-l 0,1,3 --main-lcore=0 --no-huge -m 256 --no-shconf --no-telemetry "
                           "--no-pci --vdev net_null0 --vdev net_ring0"));
}

TEST(BuildEalArgs, PciDevicesAndPrefix) {
  EalParams p;
  p.worker_lcores = {2};
  p.file_prefix = "heddle";
  p.pci = {"0000:3b:00.0,dv_flow_en=1"};
  p.extra = {"--huge-unlink"};
  auto a = BuildEalArgs(p);
  std::string s = absl::StrJoin(a, " ");
  EXPECT_THAT(s, HasSubstr("--file-prefix=heddle -a 0000:3b:00.0,dv_flow_en=1"));
  EXPECT_THAT(s, Not(HasSubstr("--no-pci")));
  EXPECT_THAT(s, Not(HasSubstr("--in-memory")));
  EXPECT_EQ(a.back(), "--huge-unlink");
}

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/heddle-meminfo-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(CheckHugepages, NoneReservedNamesTheFix) {
  std::string f =
      WriteTemp("MemTotal: 1000 kB\nHugePages_Total:       0\nHugePages_Free:        0\n");
  EalParams p;
  auto s = CheckHugepages(p, f);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("vm.nr_hugepages"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("no_huge"));
  p.no_huge = true;
  EXPECT_TRUE(CheckHugepages(p, f).ok());
  std::remove(f.c_str());
}

TEST(CheckHugepages, AllInUseAndAvailable) {
  std::string busy = WriteTemp("HugePages_Total:     512\nHugePages_Free:        0\n");
  std::string ok = WriteTemp("HugePages_Total:     512\nHugePages_Free:      100\n");
  EalParams p;
  EXPECT_THAT(std::string(CheckHugepages(p, busy).message()), HasSubstr("in use"));
  EXPECT_TRUE(CheckHugepages(p, ok).ok());
  std::remove(busy.c_str());
  std::remove(ok.c_str());
}

TEST(CheckLcores, NamesTheKeyAndTheAllowedCpus) {
  EalParams p;
  p.main_lcore = 0;
  p.worker_lcores = {1000};
  auto s = CheckLcores(p);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("lcores.workers: lcore 1000"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("allowed: 0"));
  p.worker_lcores = {};
  EXPECT_TRUE(CheckLcores(p).ok());
}

TEST(EthdevNameFor, NormalisesPciAndVdev) {
  EXPECT_EQ(EthdevNameFor({.device = "3b:00.0"}), "0000:3b:00.0");
  EXPECT_EQ(EthdevNameFor({.device = "0000:3b:00.1,dv_flow_en=1"}), "0000:3b:00.1");
  EXPECT_EQ(EthdevNameFor({.device = "net_pcap0,rx_pcap=a.pcap", .is_vdev = true}), "net_pcap0");
}

// Real EAL on virtual devices: the EAL can start once per process, so one test does it all.
TEST(PortOnVdevs, FindConfigureStartStop) {
  EalParams p;
  p.program = "dpdk_eal_test";
  p.worker_lcores = {};
  p.no_huge = true;
  p.memory_mb = 128;
  p.vdevs = {"net_ring0", "net_null0", "net_null1"};
  p.log_level = "error";
  ASSERT_TRUE(InitEal(p).ok());

  auto missing = Port::Find({.name = "up9", .device = "net_null9", .is_vdev = true});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("port up9: vdev \"net_null9\""));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("net_ring0"));  // lists probed
  auto missing_pci = Port::Find({.name = "nic", .device = "3b:00.0"});
  ASSERT_FALSE(missing_pci.ok());
  EXPECT_THAT(std::string(missing_pci.status().message()), HasSubstr("0000:3b:00.0"));
  EXPECT_THAT(std::string(missing_pci.status().message()), HasSubstr("dpdk-devbind.py"));

  auto pool = CreateMbufPool("test_pool", 2047, 32, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // Without hugepages IOVA is VA and the pool packs its mbufs across 4 KiB pages: consecutive
  // objects ~2.4 KiB apart, not one a page, and each mbuf still a whole, initialised pktmbuf.
  EXPECT_EQ(rte_eal_iova_mode(), RTE_IOVA_VA);
  ASSERT_TRUE(PackedMbufPools());
  EXPECT_EQ(rte_pktmbuf_data_room_size(*pool), RTE_MBUF_DEFAULT_BUF_SIZE);
  EXPECT_EQ(rte_pktmbuf_priv_size(*pool), 0u);
  std::vector<uintptr_t> objs;
  rte_mempool_obj_iter(
      *pool,
      [](rte_mempool*, void* v, void* obj, unsigned) {
        static_cast<std::vector<uintptr_t>*>(v)->push_back(reinterpret_cast<uintptr_t>(obj));
        auto* m = static_cast<rte_mbuf*>(obj);
        EXPECT_EQ(m->buf_len, RTE_MBUF_DEFAULT_BUF_SIZE);
        EXPECT_EQ(m->buf_iova, rte_mem_virt2iova(m->buf_addr));
        EXPECT_EQ(rte_mempool_virt2iova(obj), rte_mem_virt2iova(obj));
      },
      &objs);
  ASSERT_EQ(objs.size(), 2047u);
  std::sort(objs.begin(), objs.end());
  size_t crossing = 0;
  for (size_t i = 1; i < objs.size(); ++i) {
    EXPECT_LT(objs[i] - objs[i - 1], 4096u);
    crossing += (objs[i - 1] >> 12) != ((objs[i - 1] + sizeof(rte_mbuf) +
                                         RTE_MBUF_DEFAULT_BUF_SIZE - 1) >> 12);
  }
  EXPECT_GT(crossing, objs.size() / 4);
  // Mbuf headers spread over the L1 sets instead of all sharing one.
  std::set<uintptr_t> sets;
  for (uintptr_t o : objs) sets.insert((o >> 6) & 63);
  EXPECT_GT(sets.size(), 16u);

  auto ring = Port::Find({.name = "h",
                          .device = "net_ring0",
                          .is_vdev = true,
                          .rx_queues = 1,
                          .tx_queues = 1,
                          .rx_desc = 256,
                          .tx_desc = 256});
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->driver(), "net_ring");
  auto too_many = *ring;
  ASSERT_TRUE(ring->Configure(*pool).ok());
  ASSERT_TRUE(ring->Start().ok());
  EXPECT_TRUE(ring->Link().up);
  EXPECT_EQ(ring->MacAddress().size(), 17u);

  // net_ring loops TX back to RX: a packet sent comes back and shows in the driver counters.
  rte_mbuf* m = rte_pktmbuf_alloc(*pool);
  ASSERT_NE(m, nullptr);
  ASSERT_NE(rte_pktmbuf_append(m, 60), nullptr);
  ASSERT_EQ(rte_eth_tx_burst(ring->port_id(), 0, &m, 1), 1);
  rte_mbuf* back[4];
  ASSERT_EQ(rte_eth_rx_burst(ring->port_id(), 0, back, 4), 1);
  EXPECT_EQ(back[0]->pkt_len, 60u);
  rte_pktmbuf_free(back[0]);
  EXPECT_EQ(ring->Stats().tx_packets, 1u);
  ring->StopAndClose();
  ring->StopAndClose();  // idempotent
  EXPECT_FALSE(ring->Link().up);

  // DCB TX on a PMD without it: required, Configure() fails naming the port and the driver;
  // preferred, the port is configured without it (one TX queue per worker) and says why.
  PortParams dcb{.name = "up1", .device = "net_null1", .is_vdev = true, .tx_queues = 2};
  dcb.tx_dcb = PortParams::TxDcb::kRequire;
  dcb.dcb_tcs = {
      .nb_tcs = 4, .level_tc = {0, 1, 2, 3, 3, 3, 3, 3}, .prio_tc = {0, 0, 1, 1, 2, 2, 3, 3}};
  auto required = Port::Find(dcb);
  ASSERT_TRUE(required.ok());
  absl::Status s_required = required->Configure(*pool);
  ASSERT_FALSE(s_required.ok());
  EXPECT_EQ(s_required.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s_required.message()),
              HasSubstr("storm.egress dcb: port up1: driver net_null has no DCB"));
  EXPECT_FALSE(required->dcb().has_value());
  dcb.tx_dcb = PortParams::TxDcb::kPrefer;
  auto preferred = Port::Find(dcb);
  ASSERT_TRUE(preferred.ok());
  ASSERT_TRUE(preferred->Configure(*pool).ok());
  EXPECT_FALSE(preferred->dcb().has_value());
  EXPECT_THAT(preferred->dcb_fallback(), HasSubstr("port up1: driver net_null has no DCB"));
  EXPECT_EQ(preferred->tx_queues_configured(), 2);
  ASSERT_TRUE(preferred->Start().ok());
  rte_mbuf* out = rte_pktmbuf_alloc(*pool);
  ASSERT_NE(out, nullptr);
  ASSERT_NE(rte_pktmbuf_append(out, 60), nullptr);
  EXPECT_EQ(rte_eth_tx_burst(preferred->port_id(), 1, &out, 1), 1);  // worker 1's queue
  preferred->StopAndClose();
  // Off: nothing to fall back from.
  EXPECT_TRUE(ring->dcb_fallback().empty());

  auto null_port =
      Port::Find({.name = "u", .device = "net_null0", .is_vdev = true, .rx_queues = 2000});
  ASSERT_TRUE(null_port.ok());
  auto s = null_port->Configure(*pool);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("rx_queues: 2000 exceeds"));
  null_port->StopAndClose();
  rte_mempool_free(*pool);
  CleanupEal();
}

}  // namespace
}  // namespace heddle::dpdk
