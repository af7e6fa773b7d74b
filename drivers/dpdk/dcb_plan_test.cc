// The DCB planner against what ixgbe and i40e report (fake_dcb_pmd.h): the RX + TX DCB
// configuration, queue counts from the DCB-mode dev_info (ixgbe's 128, i40e's PF queues before
// its VMDq pools), the 4- and 8-TC layouts once started, what both answer without the RX DCB flag
// (1 TC) and ixgbe before start (8 TCs), too few queues, PFC on and off, and PMDs without DCB.
#include "drivers/dpdk/dcb_plan.h"

#include <string>

#include "drivers/dpdk/fake_dcb_pmd.h"
#include "gtest/gtest.h"

namespace heddle::dpdk {
namespace {

DcbTcs InOrder(uint8_t nb_tcs, int levels) {
  DcbTcs t;
  t.nb_tcs = nb_tcs;
  for (int l = 0; l < kDcbLevels; ++l)
    t.level_tc[l] = static_cast<uint8_t>(std::min(l, levels - 1));
  for (int p = 0; p < 8; ++p) t.prio_tc[p] = static_cast<uint8_t>(p * nb_tcs / 8);
  return t;
}

DcbCaps Ixgbe() {
  return DcbCaps{.driver = "net_ixgbe",
                 .max_rx_queues = fake::kIxgbeQueues,
                 .max_tx_queues = fake::kIxgbeQueues,
                 .dcb_info_supported = true};
}

// i40e with VMDq: max_*_queues count the pools' queues after the PF's (vmdq_queue_base).
DcbCaps I40e() {
  const uint16_t all = fake::kI40ePfQueues + fake::kI40eVmdqQueues;
  return DcbCaps{.driver = "net_i40e",
                 .max_rx_queues = all,
                 .max_tx_queues = all,
                 .vmdq_queue_base = fake::kI40ePfQueues,
                 .dcb_info_supported = true};
}

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// PlanDcbConf + PlanDcbQueueCounts with the same capabilities before and after the configure.
absl::StatusOr<DcbConfPlan> Plan(const DcbCaps& caps, const DcbTcs& tcs, uint16_t workers,
                                 bool pfc = false) {
  absl::StatusOr<DcbConfPlan> c = PlanDcbConf("uplink0", caps, tcs, workers, pfc);
  if (!c.ok()) return c;
  if (absl::Status s = PlanDcbQueueCounts("uplink0", caps, workers, &*c); !s.ok()) return s;
  return c;
}

TEST(DcbPlanTest, FourTcsOnIxgbe) {
  const DcbTcs tcs = InOrder(4, 4);
  absl::StatusOr<DcbConfPlan> c = PlanDcbConf("uplink0", Ixgbe(), tcs, 2, /*pfc=*/false);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nb_tcs, 4);
  EXPECT_EQ(c->nb_rx_queues, 8);  // first configure: workers x TCs
  EXPECT_EQ(c->nb_tx_queues, 8);
  EXPECT_EQ(c->dcb_capability_en, RTE_ETH_DCB_PG_SUPPORT);

  rte_eth_conf conf{};
  conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
  ApplyDcbConf(*c, RTE_ETH_RSS_IP, &conf);
  EXPECT_EQ(conf.txmode.mq_mode, RTE_ETH_MQ_TX_DCB);
  EXPECT_EQ(conf.tx_adv_conf.dcb_tx_conf.nb_tcs, RTE_ETH_4_TCS);
  // RX in DCB with RSS inside each TC, with the same map: what makes ixgbe and i40e set DCB up.
  EXPECT_EQ(conf.rxmode.mq_mode, RTE_ETH_MQ_RX_DCB_RSS);
  EXPECT_TRUE(conf.rxmode.mq_mode & RTE_ETH_MQ_RX_DCB_FLAG);
  EXPECT_EQ(conf.rx_adv_conf.rss_conf.rss_hf, RTE_ETH_RSS_IP);
  EXPECT_EQ(conf.rx_adv_conf.dcb_rx_conf.nb_tcs, RTE_ETH_4_TCS);
  const uint8_t want_up[8] = {0, 0, 1, 1, 2, 2, 3, 3};
  for (int up = 0; up < 8; ++up) {
    EXPECT_EQ(conf.tx_adv_conf.dcb_tx_conf.dcb_tc[up], want_up[up]);
    EXPECT_EQ(conf.rx_adv_conf.dcb_rx_conf.dcb_tc[up], want_up[up]);
  }

  // With DCB on, every one of ixgbe's queues is configured (its layout spans all 128).
  ASSERT_TRUE(PlanDcbQueueCounts("uplink0", Ixgbe(), 2, &*c).ok());
  EXPECT_EQ(c->nb_rx_queues, 128);
  EXPECT_EQ(c->nb_tx_queues, 128);

  absl::StatusOr<DcbQueues> q =
      PlanDcbQueues("uplink0", "net_ixgbe", *c, tcs, fake::IxgbeDcbInfo(true, 4), 2);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->level_queue.size(), 2u);
  // Worker w sends level l on TC l's first queue + w; levels past K-1 on the top TC.
  EXPECT_EQ(q->level_queue[0], (std::array<uint16_t, 8>{0, 64, 96, 112, 112, 112, 112, 112}));
  EXPECT_EQ(q->level_queue[1], (std::array<uint16_t, 8>{1, 65, 97, 113, 113, 113, 113, 113}));
  EXPECT_EQ(q->tc_bws[3], 25);  // the PMD's ETS shares, reported for the log
  // RX: 16 queues per TC at TC x 32, all polled.
  ASSERT_EQ(q->rx_queues.size(), 64u);
  EXPECT_EQ(q->rx_queues[0], 0);
  EXPECT_EQ(q->rx_queues[15], 15);
  EXPECT_EQ(q->rx_queues[16], 32);
  EXPECT_EQ(q->rx_queues[63], 96 + 15);
  EXPECT_EQ(DescribeDcbQueues(*q, 4),
            "4 TCs: L0->TC0 q0-1, L1->TC1 q64-65, L2->TC2 q96-97, "
            "L3->TC3 q112-113");
}

TEST(DcbPlanTest, EightTcsWithPfc) {
  const DcbTcs tcs = InOrder(8, 8);
  absl::StatusOr<DcbConfPlan> c = Plan(Ixgbe(), tcs, 4, /*pfc=*/true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dcb_capability_en, RTE_ETH_DCB_PG_SUPPORT | RTE_ETH_DCB_PFC_SUPPORT);
  rte_eth_conf conf{};
  ApplyDcbConf(*c, 0, &conf);
  EXPECT_EQ(conf.tx_adv_conf.dcb_tx_conf.nb_tcs, RTE_ETH_8_TCS);
  EXPECT_EQ(conf.rx_adv_conf.dcb_rx_conf.nb_tcs, RTE_ETH_8_TCS);
  EXPECT_EQ(conf.rxmode.mq_mode, RTE_ETH_MQ_RX_DCB);  // a PMD that does not hash: DCB alone
  EXPECT_EQ(conf.dcb_capability_en, RTE_ETH_DCB_PG_SUPPORT | RTE_ETH_DCB_PFC_SUPPORT);

  absl::StatusOr<DcbQueues> q =
      PlanDcbQueues("uplink0", "net_ixgbe", *c, tcs, fake::IxgbeDcbInfo(true, 8), 4);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->level_queue[3], (std::array<uint16_t, 8>{3, 35, 67, 83, 99, 107, 115, 123}));
  EXPECT_EQ(q->rx_queues.size(), 128u);  // 8 x 16: every RX queue
}

TEST(DcbPlanTest, I40eSplitsThePfQueuesBetweenTheTcs) {
  // i40e's configure splits the queues it was given; the counts are the PF's 64 (vmdq_queue_base),
  // not the 128 that include its VMDq pools, nor vmdq_pool_base (a pool index, 1).
  const DcbTcs tcs = InOrder(4, 4);
  absl::StatusOr<DcbConfPlan> c = Plan(I40e(), tcs, 3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nb_rx_queues, 64);
  EXPECT_EQ(c->nb_tx_queues, 64);
  absl::StatusOr<DcbQueues> q =
      PlanDcbQueues("uplink0", "net_i40e", *c, tcs, fake::I40eDcbInfo(true, 4, c->nb_rx_queues), 3);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->level_queue[2], (std::array<uint16_t, 8>{2, 18, 34, 50, 50, 50, 50, 50}));
  EXPECT_EQ(q->rx_queues.size(), 64u);

  // With its first configure (workers x TCs = 12 queues) i40e gives each TC 2^1 = 2 queue pairs:
  // fewer than the three workers. Hence the second configure on the PF's whole range.
  absl::StatusOr<DcbConfPlan> first = PlanDcbConf("uplink0", I40e(), tcs, 3, false);
  ASSERT_TRUE(first.ok());
  q = PlanDcbQueues("uplink0", "net_i40e", *first, tcs,
                    fake::I40eDcbInfo(true, 4, first->nb_rx_queues), 3);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(Msg(q.status()).find("TC 0 has 2 TX queue(s) (from 0); each of the 3 worker(s)"),
            std::string::npos)
      << q.status();
}

TEST(DcbPlanTest, EightTcsNeedQueuesForEveryWorkerInEveryUsedTc) {
  // ixgbe's 8-TC layout gives TCs 4..7 eight queues each: nine workers do not fit.
  const DcbTcs tcs = InOrder(8, 8);
  absl::StatusOr<DcbConfPlan> c = Plan(Ixgbe(), tcs, 9);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<DcbQueues> q =
      PlanDcbQueues("uplink0", "net_ixgbe", *c, tcs, fake::IxgbeDcbInfo(true, 8), 9);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(Msg(q.status()).find("TC 4 has 8 TX queue(s) (from 96)"), std::string::npos)
      << Msg(q.status());
  EXPECT_NE(Msg(q.status()).find("uplink0"), std::string::npos);

  // Five levels on 8 TCs use TCs 0..4 only: TC 4's eight queues still bound the workers.
  const DcbTcs five = InOrder(8, 5);
  q = PlanDcbQueues("uplink0", "net_ixgbe", *c, five, fake::IxgbeDcbInfo(true, 8), 8);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->level_queue[7][4], 96 + 7);
  EXPECT_EQ(q->level_queue[7][7], 96 + 7);
}

TEST(DcbPlanTest, FewerQueuesThanWorkersTimesTcs) {
  DcbCaps caps = Ixgbe();
  caps.max_tx_queues = 16;
  absl::StatusOr<DcbConfPlan> c = PlanDcbConf("uplink0", caps, InOrder(8, 8), 4, false);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string m = Msg(c.status());
  EXPECT_NE(m.find("port uplink0: driver net_ixgbe offers 16 queues; DCB needs 32 (4 "
                   "worker(s) x 8 traffic classes)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("storm.egress"), std::string::npos) << m;
  // Four TCs fit in the same 16 queues.
  EXPECT_TRUE(PlanDcbConf("uplink0", caps, InOrder(4, 4), 4, false).ok());
}

TEST(DcbPlanTest, QueueCountsComeFromTheDcbModeDevInfo) {
  // A device that offers 128 queues before DCB and 16 once DCB is on: the re-read counts.
  const DcbTcs tcs = InOrder(8, 8);
  absl::StatusOr<DcbConfPlan> c = PlanDcbConf("uplink0", Ixgbe(), tcs, 4, false);
  ASSERT_TRUE(c.ok()) << c.status();
  DcbCaps after = Ixgbe();
  after.max_tx_queues = 16;
  absl::Status s = PlanDcbQueueCounts("uplink0", after, 4, &*c);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(s).find("offers 128 RX / 16 TX queues with DCB on; DCB needs 32"),
            std::string::npos)
      << s;
  // i40e: the PF's queues end at vmdq_queue_base, which the message says.
  DcbCaps small = I40e();
  small.vmdq_queue_base = 16;
  s = PlanDcbQueueCounts("uplink0", small, 4, &*c);
  EXPECT_NE(Msg(s).find("16 RX / 16 TX queues with DCB on (before its VMDq pools)"),
            std::string::npos)
      << s;
}

TEST(DcbPlanTest, QueuesPastTheConfiguredCountAreRefused) {
  const DcbTcs tcs = InOrder(4, 4);
  DcbCaps caps = Ixgbe();
  caps.max_tx_queues = 64;
  absl::StatusOr<DcbConfPlan> c = Plan(caps, tcs, 2);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->nb_tx_queues, 64);
  // The PMD lays TC 1 out from queue 64: beyond the 64 configured.
  absl::StatusOr<DcbQueues> q =
      PlanDcbQueues("uplink0", "net_ixgbe", *c, tcs, fake::IxgbeDcbInfo(true, 4), 2);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(Msg(q.status()).find("TC 1's TX queues 64..65 lie past the 64 configured"),
            std::string::npos)
      << Msg(q.status());
  // RX queues past the configured count: a TC whose packets no polled queue would receive.
  caps = Ixgbe();
  caps.max_rx_queues = 64;
  c = Plan(caps, tcs, 2);
  ASSERT_TRUE(c.ok());
  q = PlanDcbQueues("uplink0", "net_ixgbe", *c, tcs, fake::IxgbeDcbInfo(true, 4), 2);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(Msg(q.status()).find("TC 2 has RX queues 64+16 of the 64 configured"),
            std::string::npos)
      << Msg(q.status());
}

TEST(DcbPlanTest, RxRingsShareTheRxQueuesTimesRxDescBudget) {
  absl::StatusOr<DcbConfPlan> c = Plan(Ixgbe(), InOrder(4, 4), 2);
  ASSERT_TRUE(c.ok());
  constexpr uint16_t kThresh = fake::kIxgbeRxFreeThresh;
  // 4 x 2048 over ixgbe's 128 RX queues: 64 each, the smallest multiple of rx_free_thresh (32)
  // above it.
  absl::StatusOr<uint16_t> rxd =
      PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 4, 2048, fake::kIxgbeRxDescLim, kThresh);
  ASSERT_TRUE(rxd.ok()) << rxd.status();
  EXPECT_EQ(*rxd, 64);
  // 4 x 3200 / 128 = 100: down to a multiple of 32 (not only of ixgbe's step of 8).
  rxd = PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 4, 3200, fake::kIxgbeRxDescLim, kThresh);
  ASSERT_TRUE(rxd.ok()) << rxd.status();
  EXPECT_EQ(*rxd, 96);
  // 4 x 1024 / 128 = 32: ixgbe's minimum, but not above rx_free_thresh (vector RX off): refused
  // rather than shrunk.
  rxd = PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 4, 1024, fake::kIxgbeRxDescLim, kThresh);
  EXPECT_EQ(rxd.status().code(), absl::StatusCode::kFailedPrecondition);
  // 3 x 1000 / 128 = 23: 64 x 128 = 8192 mbufs do not fit in 3000.
  rxd = PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 3, 1000, fake::kIxgbeRxDescLim, kThresh);
  EXPECT_EQ(rxd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(rxd.status())
                .find("port uplink0: driver net_ixgbe receives on 128 RX queues with DCB, of at "
                      "least 64 descriptors each (a multiple of its rx_free_thresh 32 above it; "
                      "8192 mbufs filled at start); ports[uplink0].rx_queues x rx_desc allows "
                      "3000: raise rx_desc to 4096 (mempool.mbufs"),
            std::string::npos)
      << rxd.status();
  // 8192 / 3 = 2731 is not a valid rx_desc: the next power of two is named.
  EXPECT_TRUE(
      PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 3, 4096, fake::kIxgbeRxDescLim, kThresh).ok());
  // Past rx_desc's maximum of 16384, the rx_queues that fit with it are named too.
  // (rx_free_thresh 128: rings of 256, 128 x 256 = 32768 mbufs.)
  rxd = PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 1, 1024, fake::kIxgbeRxDescLim, 128);
  EXPECT_NE(Msg(rxd.status()).find("raise rx_desc to 16384 and rx_queues to 2"), std::string::npos)
      << rxd.status();
  // testpmd's DCB rx_free_thresh of 64: rings of 128, so 4 x 2048 no longer fits.
  rxd = PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 4, 2048, fake::kIxgbeRxDescLim, 64);
  EXPECT_FALSE(rxd.ok());
  rxd = PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 4, 4096, fake::kIxgbeRxDescLim, 64);
  ASSERT_TRUE(rxd.ok()) << rxd.status();
  EXPECT_EQ(*rxd, 128);
  // i40e's 64 rings of at least 64: 4000 is too little; 4196 / 64 = 65, down to its step of 32
  // and up to its minimum: 64.
  absl::StatusOr<DcbConfPlan> i = Plan(I40e(), InOrder(4, 4), 2);
  ASSERT_TRUE(i.ok());
  constexpr uint16_t kI40eThresh = fake::kI40eRxFreeThresh;
  rxd = PlanDcbRxDesc("uplink0", "net_i40e", *i, 1, 4000, fake::kI40eRxDescLim, kI40eThresh);
  EXPECT_FALSE(rxd.ok());
  rxd = PlanDcbRxDesc("uplink0", "net_i40e", *i, 1, 4096 + 100, fake::kI40eRxDescLim, kI40eThresh);
  ASSERT_TRUE(rxd.ok()) << rxd.status();
  EXPECT_EQ(*rxd, 64);
  rxd = PlanDcbRxDesc("uplink0", "net_i40e", *i, 2, 4096, fake::kI40eRxDescLim, kI40eThresh);
  ASSERT_TRUE(rxd.ok());
  EXPECT_EQ(*rxd, 128);
  // A PMD without rx_free_thresh (0) only has its own limits.
  rxd = PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 4, 1024, fake::kIxgbeRxDescLim, 0);
  ASSERT_TRUE(rxd.ok()) << rxd.status();
  EXPECT_EQ(*rxd, 32);
  // No multiple of rx_free_thresh above it within the PMD's maximum.
  rxd = PlanDcbRxDesc("uplink0", "net_ixgbe", *c, 4, 1024, fake::kIxgbeRxDescLim, 4096);
  EXPECT_EQ(rxd.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(DcbPlanTest, PmdsWithoutDcb) {
  DcbCaps ring{
      .driver = "net_ring", .max_rx_queues = 16, .max_tx_queues = 16, .dcb_info_supported = false};
  absl::StatusOr<DcbConfPlan> c = PlanDcbConf("uplink0", ring, InOrder(4, 4), 1, false);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(Msg(c.status()),
            "port uplink0: driver net_ring has no DCB (rte_eth_dev_get_dcb_info: not supported); "
            "TX traffic classes need a DCB PMD such as ixgbe, i40e or ice; use storm.egress: "
            "software (or auto to fall back per port)");

  DcbCaps mlx5{.driver = "mlx5_pci",
               .max_rx_queues = 1024,
               .max_tx_queues = 1024,
               .dcb_info_supported = true};
  c = PlanDcbConf("uplink0", mlx5, InOrder(4, 4), 1, false);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(Msg(c.status()).find("mlnx_qos --trust dscp"), std::string::npos) << Msg(c.status());
}

TEST(DcbPlanTest, RefusesABadLayout) {
  DcbTcs tcs = InOrder(4, 4);
  tcs.nb_tcs = 3;
  EXPECT_FALSE(PlanDcbConf("uplink0", Ixgbe(), tcs, 1, false).ok());
  tcs = InOrder(4, 4);
  tcs.level_tc[7] = 4;
  EXPECT_FALSE(PlanDcbConf("uplink0", Ixgbe(), tcs, 1, false).ok());
  EXPECT_FALSE(PlanDcbConf("uplink0", Ixgbe(), InOrder(4, 4), 0, false).ok());
}

TEST(DcbPlanTest, OneTcAnswersAreRefused) {
  // What ixgbe and i40e answer without the RX DCB flag: 1 TC.
  const DcbTcs tcs = InOrder(4, 4);
  absl::StatusOr<DcbConfPlan> c = Plan(Ixgbe(), tcs, 1);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const rte_eth_dcb_info& info : {fake::IxgbeDcbInfo(false, 4), fake::IxgbeDcbInfo(false, 0),
                                       fake::I40eDcbInfo(false, 4, 64)}) {
    absl::StatusOr<DcbQueues> q = PlanDcbQueues("uplink0", "net_ixgbe", *c, tcs, info, 1);
    EXPECT_EQ(q.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(Msg(q.status())
                  .find("reports 1 traffic classes after start with DCB configured for "
                        "4 (RX and TX): the PMD did not enable DCB"),
              std::string::npos)
        << q.status();
  }
  // ixgbe with the RX flag before its first start: ixgbe_dcb_init()'s 8 TCs with the 8-TC layout,
  // not the 4 asked, so it is read from the started port only.
  const rte_eth_dcb_info unstarted = fake::IxgbeDcbInfo(true, 0);
  EXPECT_EQ(unstarted.nb_tcs, 8);
  EXPECT_EQ(unstarted.tc_queue.tc_txq[0][4].base, 96);
  EXPECT_NE(Msg(PlanDcbQueues("uplink0", "net_ixgbe", *c, tcs, unstarted, 1).status())
                .find("reports 8 traffic classes after start with DCB configured for 4"),
            std::string::npos);
  // 0 TCs, or 8 when 4 were asked, likewise.
  rte_eth_dcb_info none{};
  EXPECT_NE(Msg(PlanDcbQueues("uplink1", "net_i40e", *c, tcs, none, 1).status())
                .find("port uplink1: driver net_i40e reports 0 traffic classes"),
            std::string::npos);
  EXPECT_NE(
      Msg(PlanDcbQueues("uplink1", "net_i40e", *c, tcs, fake::IxgbeDcbInfo(true, 8), 1).status())
          .find("reports 8 traffic classes"),
      std::string::npos);
}

TEST(DcbPlanTest, ALevelPastTheTcsIsRefusedAlikeBeforeAndAfterConfigure) {
  DcbTcs tcs = InOrder(4, 4);
  tcs.level_tc[5] = 4;
  absl::StatusOr<DcbConfPlan> c = PlanDcbConf("uplink0", Ixgbe(), tcs, 1, false);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(c.status()), "port uplink0: level 5 maps to TC 4 of 4");
  // The queue plan checks against the configured TC count with the same message.
  c = Plan(Ixgbe(), InOrder(4, 4), 1);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<DcbQueues> q =
      PlanDcbQueues("uplink0", "net_ixgbe", *c, tcs, fake::IxgbeDcbInfo(true, 4), 1);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(q.status()), "port uplink0: level 5 maps to TC 4 of 4");
}

}  // namespace
}  // namespace heddle::dpdk
