// File: drivers/verbs/shim/hooks_test.cc
//
// The shim's wrappers on a fake ibv_context. InstallOnContext() is the code path the interposed
// ibv_open_device takes; the test then calls rdma-core's real inline ibv_post_send() and
// ibv_poll_cq(), which dispatch through ctx->ops to the wrappers and on to the fake provider
// below, and reads the resulting counters back through BacklogReader from the process's table
// (created in a temp dir named by HEDDLE_VERBS_SHIM_DIR). The real ibv_modify_qp() and
// ibv_destroy_qp() dispatch through libibverbs' private provider ops, which a fake context cannot
// provide, so the tests call what the interposed symbols call after them: OnQpModified() and
// OnQpDestroyed() (shim_e2e_test runs the symbols themselves).
#include "drivers/verbs/shim/hooks.h"

#include <infiniband/verbs.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "drivers/verbs/shim/backlog_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::verbs::shim {
namespace {

using ::testing::ElementsAre;

// Points HEDDLE_VERBS_SHIM_DIR at a fresh temp dir for the whole process; removes it at the end.
class ShimDirEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/heddle-shim-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv(kShimDirEnv, dir_.c_str(), 1);
    setenv(kShimCapacityEnv, "128", 1);
  }
  void TearDown() override {
    UnlinkProcessTable();
    std::filesystem::remove_all(dir_);
  }
  static const std::string& dir() { return dir_; }

 private:
  static inline std::string dir_;
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new ShimDirEnvironment);

// The fake provider: records what reached it, fails where told, hands out queued completions.
struct FakeProvider {
  std::vector<uint64_t> posted_wr_ids;
  int post_calls = 0;
  int fail_at = -1;  // index in the WR list at which post_send fails with ENOMEM
  std::vector<ibv_wc> completions;
  int poll_calls = 0;
};
FakeProvider* g_fake = nullptr;

int FakePostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  ++g_fake->post_calls;
  int i = 0;
  for (ibv_send_wr* p = wr; p != nullptr; p = p->next, ++i) {
    if (i == g_fake->fail_at) {
      *bad_wr = p;
      return ENOMEM;
    }
    g_fake->posted_wr_ids.push_back(p->wr_id);
  }
  return 0;
}

int FakePollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  ++g_fake->poll_calls;
  int n = 0;
  while (n < num_entries && !g_fake->completions.empty()) {
    wc[n++] = g_fake->completions.front();
    g_fake->completions.erase(g_fake->completions.begin());
  }
  return n;
}

// A context, QP and CQ wired to the fake provider, as a provider's ibv_open_device would return.
class ShimHooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = &fake_;
    std::memset(&ctx_, 0, sizeof(ctx_));
    std::memset(&qp_, 0, sizeof(qp_));
    std::memset(&cq_, 0, sizeof(cq_));
    ctx_.ops.post_send = &FakePostSend;
    ctx_.ops.poll_cq = &FakePollCq;
    ctx_.cmd_fd = -1;
    qp_.context = &ctx_;
    qp_.qp_num = NextQpn();
    cq_.context = &ctx_;
    ASSERT_TRUE(InstallOnContext(&ctx_));
  }
  void TearDown() override {
    ForgetContext(&ctx_);
    g_fake = nullptr;
  }

  // Tests in one process share the table: give each its own QPNs.
  static uint32_t NextQpn() {
    static uint32_t next = 0x100;
    return next += 0x10;
  }

  // WR i carries wr_id i and one SGE per entry of `sge_lengths[i]`.
  void BuildWrs(const std::vector<std::vector<uint32_t>>& sge_lengths,
                const std::vector<bool>& signaled) {
    sges_.clear();
    wrs_.assign(sge_lengths.size(), ibv_send_wr{});
    sges_.resize(sge_lengths.size());
    for (size_t i = 0; i < sge_lengths.size(); ++i) {
      for (uint32_t len : sge_lengths[i]) sges_[i].push_back(ibv_sge{0x1000, len, 0x42});
      wrs_[i].wr_id = i;
      wrs_[i].next = i + 1 < wrs_.size() ? &wrs_[i + 1] : nullptr;
      wrs_[i].sg_list = sges_[i].data();
      wrs_[i].num_sge = static_cast<int>(sges_[i].size());
      wrs_[i].opcode = IBV_WR_RDMA_WRITE;
      wrs_[i].send_flags = signaled[i] ? IBV_SEND_SIGNALED : 0;
    }
  }

  // The live QPs with QPN `qpn`, from any context.
  static std::vector<QpBacklog> AllCounters(uint32_t qpn) {
    std::vector<QpBacklog> qps;
    absl::StatusOr<BacklogReader> r =
        BacklogReader::Open(BacklogWriter::PathFor(ShimDirEnvironment::dir(), getpid()));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return qps;
    r->ForEachQp([&](const QpBacklog& q) {
      if (q.qpn == qpn) qps.push_back(q);
    });
    return qps;
  }
  static std::optional<QpBacklog> Counters(uint32_t qpn) {
    std::vector<QpBacklog> qps = AllCounters(qpn);
    EXPECT_LE(qps.size(), 1u);
    if (qps.empty()) return std::nullopt;
    return qps[0];
  }

  // What ibv_modify_qp(INIT -> RTR) carries for an RC QP over RoCE.
  static ibv_qp_attr RtrAttr(uint32_t dest_qpn, const std::array<uint8_t, 16>& dgid) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_4096;
    attr.dest_qp_num = dest_qpn;
    attr.rq_psn = 0;
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, dgid.data(), 16);
    attr.ah_attr.grh.sgid_index = 3;
    attr.ah_attr.port_num = 1;
    return attr;
  }
  static constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  static std::array<uint8_t, 16> V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
  }

  void Post(uint32_t bytes) {
    BuildWrs({{bytes}}, {false});
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(&qp_, &wrs_[0], &bad), 0);
  }

  static ibv_wc Wc(uint32_t qpn, ibv_wc_status status, ibv_wc_opcode opcode, uint64_t wr_id) {
    ibv_wc wc{};
    wc.qp_num = qpn;
    wc.status = status;
    wc.opcode = opcode;
    wc.wr_id = wr_id;
    return wc;
  }

  FakeProvider fake_;
  ibv_context ctx_;
  ibv_qp qp_;
  ibv_cq cq_;
  std::vector<ibv_send_wr> wrs_;
  std::vector<std::vector<ibv_sge>> sges_;
};

TEST_F(ShimHooksTest, InstallWrapsBothOps) {
  EXPECT_NE(ctx_.ops.post_send, &FakePostSend);
  EXPECT_NE(ctx_.ops.poll_cq, &FakePollCq);
  EXPECT_TRUE(InstallOnContext(&ctx_));  // idempotent: does not wrap the wrapper
  ForgetContext(&ctx_);
  EXPECT_EQ(ctx_.ops.post_send, &FakePostSend);
  EXPECT_EQ(ctx_.ops.poll_cq, &FakePollCq);
  EXPECT_FALSE(InstallOnContext(nullptr));
}

TEST_F(ShimHooksTest, AcceptedPostCountsEveryWr) {
  BuildWrs({{100}, {200, 56}, {0}}, {false, false, true});
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(&qp_, &wrs_[0], &bad), 0);

  EXPECT_EQ(fake_.post_calls, 1);
  EXPECT_THAT(fake_.posted_wr_ids, ElementsAre(0, 1, 2));
  std::optional<QpBacklog> q = Counters(qp_.qp_num);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->posted_wqes, 3u);
  EXPECT_EQ(q->posted_bytes, 356u);
  EXPECT_EQ(q->completed_wqes, 0u);
  EXPECT_EQ(q->backlog_bytes(), 356u);
}

TEST_F(ShimHooksTest, RejectedPostCountsOnlyWrsBeforeBadWr) {
  BuildWrs({{10}, {20}, {40}, {80}}, {true, true, true, true});
  fake_.fail_at = 2;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(&qp_, &wrs_[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs_[2]);  // the provider's bad_wr reaches the caller unchanged

  std::optional<QpBacklog> q = Counters(qp_.qp_num);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->posted_wqes, 2u);
  EXPECT_EQ(q->posted_bytes, 30u);
}

TEST_F(ShimHooksTest, PostRejectedAtTheFirstWrCountsNothing) {
  BuildWrs({{10}, {20}}, {true, true});
  fake_.fail_at = 0;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(&qp_, &wrs_[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs_[0]);
  EXPECT_FALSE(Counters(qp_.qp_num).has_value());  // not even a slot
}

TEST_F(ShimHooksTest, PollCountsCompletionsAndSettlesSignaledWrs) {
  // Selective signaling: four WRs, only the last one signaled, then a second signaled batch.
  BuildWrs({{1000}, {1000}, {1000}, {24}}, {false, false, false, true});
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(&qp_, &wrs_[0], &bad), 0);
  BuildWrs({{500}}, {true});
  ASSERT_EQ(ibv_post_send(&qp_, &wrs_[0], &bad), 0);
  const uint32_t other_qpn = NextQpn();  // never posted a send: a receive-only QP

  fake_.completions = {
      Wc(qp_.qp_num, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 3),
      Wc(qp_.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV, 77),  // a receive on the same QP
      Wc(other_qpn, IBV_WC_SUCCESS, IBV_WC_RECV, 78),
  };
  ibv_wc wc[8];
  ASSERT_EQ(ibv_poll_cq(&cq_, 8, wc), 3);
  EXPECT_EQ(wc[0].wr_id, 3u);  // completions reach the application untouched
  EXPECT_EQ(wc[2].qp_num, other_qpn);

  std::optional<QpBacklog> q = Counters(qp_.qp_num);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->posted_wqes, 5u);
  EXPECT_EQ(q->posted_bytes, 3524u);
  EXPECT_EQ(q->completions, 2u);
  EXPECT_EQ(q->completed_wqes, 4u);  // the signaled WR covers the three unsignaled before it
  EXPECT_EQ(q->completed_bytes, 3024u);
  EXPECT_EQ(q->backlog_bytes(), 500u);
  EXPECT_FALSE(Counters(other_qpn).has_value());

  // The second batch fails (flushed): counted as an error, backlog stays.
  fake_.completions = {Wc(qp_.qp_num, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0)};
  ASSERT_EQ(ibv_poll_cq(&cq_, 8, wc), 1);
  q = Counters(qp_.qp_num);
  EXPECT_EQ(q->completions, 3u);
  EXPECT_EQ(q->error_completions, 1u);
  EXPECT_EQ(q->completed_bytes, 3024u);

  // An empty poll is passed through.
  EXPECT_EQ(ibv_poll_cq(&cq_, 8, wc), 0);
  EXPECT_EQ(fake_.poll_calls, 3);
}

TEST_F(ShimHooksTest, ReinstallAfterForgetDoesNotDoubleCount) {
  ForgetContext(&ctx_);
  ASSERT_TRUE(InstallOnContext(&ctx_));
  ASSERT_TRUE(InstallOnContext(&ctx_));
  BuildWrs({{64}}, {false});
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(&qp_, &wrs_[0], &bad), 0);
  EXPECT_EQ(fake_.post_calls, 1);
  EXPECT_EQ(Counters(qp_.qp_num)->posted_bytes, 64u);
}

TEST_F(ShimHooksTest, ConnectingAQpRecordsItsPeer) {
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  OnQpModified(&qp_, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
  EXPECT_FALSE(Counters(qp_.qp_num).has_value());  // nothing to record yet

  ibv_qp_attr rtr = RtrAttr(0x5678, V4(192, 0, 2, 7));
  OnQpModified(&qp_, &rtr, kRtrMask);
  std::optional<QpBacklog> q = Counters(qp_.qp_num);
  ASSERT_TRUE(q.has_value());
  EXPECT_TRUE(q->has_peer);
  EXPECT_EQ(q->dest_qpn, 0x5678u);
  EXPECT_EQ(q->dgid, V4(192, 0, 2, 7));
  EXPECT_EQ(q->posted_bytes, 0u);

  // RTR -> RTS carries no peer attributes: the peer stays.
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  OnQpModified(&qp_, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT);
  Post(1500);
  q = Counters(qp_.qp_num);
  EXPECT_TRUE(q->has_peer);
  EXPECT_EQ(q->dest_qpn, 0x5678u);
  EXPECT_EQ(q->backlog_bytes(), 1500u);
}

TEST_F(ShimHooksTest, AddressVectorWithoutGrhGivesNoPeer) {
  ibv_qp_attr rtr = RtrAttr(0x42, V4(10, 0, 0, 1));
  rtr.ah_attr.is_global = 0;  // InfiniBand, LID-routed: no address on the wire to key on
  OnQpModified(&qp_, &rtr, kRtrMask);
  std::optional<QpBacklog> q = Counters(qp_.qp_num);
  ASSERT_TRUE(q.has_value());
  EXPECT_FALSE(q->has_peer);
  EXPECT_EQ(q->dest_qpn, 0u);
}

TEST_F(ShimHooksTest, ModifyOnAContextTheShimDoesNotAccountForIsIgnored) {
  ibv_context other{};
  ibv_qp other_qp{};
  other_qp.context = &other;
  other_qp.qp_num = NextQpn();
  ibv_qp_attr rtr = RtrAttr(1, V4(10, 0, 0, 1));
  OnQpModified(&other_qp, &rtr, kRtrMask);
  OnQpModified(nullptr, &rtr, kRtrMask);
  OnQpModified(&qp_, nullptr, kRtrMask);
  EXPECT_FALSE(Counters(other_qp.qp_num).has_value());
  EXPECT_FALSE(Counters(qp_.qp_num).has_value());
}

TEST_F(ShimHooksTest, ResetDiscardsQueuedWorkAndThePeer) {
  ibv_qp_attr rtr = RtrAttr(0x77, V4(10, 0, 0, 7));
  OnQpModified(&qp_, &rtr, kRtrMask);
  Post(9000);
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  OnQpModified(&qp_, &reset, IBV_QP_STATE);
  std::optional<QpBacklog> q = Counters(qp_.qp_num);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->backlog_bytes(), 0u);
  EXPECT_FALSE(q->has_peer);
  EXPECT_EQ(q->posted_bytes, 9000u);
}

TEST_F(ShimHooksTest, DestroyRetiresTheQpAndAReusedQpnStartsAfresh) {
  ibv_qp_attr rtr = RtrAttr(0x100, V4(10, 0, 0, 1));
  OnQpModified(&qp_, &rtr, kRtrMask);
  Post(64 * 1024);  // still queued when the QP is destroyed
  OnQpDestroyed(&ctx_, qp_.qp_num);
  EXPECT_FALSE(Counters(qp_.qp_num).has_value());
  // A completion polled late for the old QP counts nowhere.
  fake_.completions = {Wc(qp_.qp_num, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0)};
  ibv_wc wc[4];
  ASSERT_EQ(ibv_poll_cq(&cq_, 4, wc), 1);
  EXPECT_FALSE(Counters(qp_.qp_num).has_value());

  // The provider hands the same QPN to a new QP, connected to another peer.
  ibv_qp_attr rtr2 = RtrAttr(0x200, V4(10, 0, 0, 2));
  OnQpModified(&qp_, &rtr2, kRtrMask);
  Post(100);
  std::optional<QpBacklog> q = Counters(qp_.qp_num);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->backlog_bytes(), 100u);
  EXPECT_EQ(q->dest_qpn, 0x200u);
  EXPECT_EQ(q->dgid, V4(10, 0, 0, 2));
  EXPECT_GT(q->generation, 0u);

  OnQpDestroyed(nullptr, qp_.qp_num);  // no context: ignored
  EXPECT_TRUE(Counters(qp_.qp_num).has_value());
}

TEST_F(ShimHooksTest, SameQpnOnTwoDevicesKeepsTwoPeers) {
  // QPNs are per device: a second context may hand out the same number.
  ibv_context ctx2{};
  ctx2.ops.post_send = &FakePostSend;
  ctx2.ops.poll_cq = &FakePollCq;
  ASSERT_TRUE(InstallOnContext(&ctx2));
  ibv_qp qp2{};
  qp2.context = &ctx2;
  qp2.qp_num = qp_.qp_num;
  ibv_qp_attr a = RtrAttr(0x1, V4(10, 0, 0, 1));
  ibv_qp_attr b = RtrAttr(0x2, V4(10, 0, 1, 1));
  OnQpModified(&qp_, &a, kRtrMask);
  OnQpModified(&qp2, &b, kRtrMask);
  Post(10);
  BuildWrs({{20}}, {false});
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(&qp2, &wrs_[0], &bad), 0);

  std::vector<QpBacklog> qps = AllCounters(qp_.qp_num);
  ASSERT_EQ(qps.size(), 2u);
  if (qps[0].dest_qpn != 0x1) std::swap(qps[0], qps[1]);
  EXPECT_EQ(qps[0].dest_qpn, 0x1u);
  EXPECT_EQ(qps[0].backlog_bytes(), 10u);
  EXPECT_EQ(qps[1].dest_qpn, 0x2u);
  EXPECT_EQ(qps[1].dgid, V4(10, 0, 1, 1));
  EXPECT_EQ(qps[1].backlog_bytes(), 20u);
  EXPECT_NE(qps[0].context_index, qps[1].context_index);

  OnQpDestroyed(&ctx2, qp2.qp_num);  // retires the second device's QP only
  qps = AllCounters(qp_.qp_num);
  ASSERT_EQ(qps.size(), 1u);
  EXPECT_EQ(qps[0].dest_qpn, 0x1u);
  ForgetContext(&ctx2);
}

// In a fresh process (threadsafe death-test style re-executes the binary), a table that cannot be
// created leaves contexts untouched, with one warning, and posts still reach the provider.
TEST(ShimPassThroughTest, NoTableMeansUntouchedContext) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::filesystem::remove_all(ShimDirEnvironment::dir());
        setenv(kShimDirEnv, "/nonexistent/heddle-shim", 1);
        FakeProvider fake;
        g_fake = &fake;
        ibv_context ctx{};
        ctx.ops.post_send = &FakePostSend;
        ctx.ops.poll_cq = &FakePollCq;
        const bool installed = InstallOnContext(&ctx);
        InstallOnContext(&ctx);  // warns only once
        ibv_qp qp{};
        qp.context = &ctx;
        ibv_send_wr wr{};
        ibv_send_wr* bad = nullptr;
        const int rc = ibv_post_send(&qp, &wr, &bad);
        const bool ok = !installed && ctx.ops.post_send == &FakePostSend &&
                        ctx.ops.poll_cq == &FakePollCq && rc == 0 && fake.post_calls == 1;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "^heddle verbs shim \\(pid [0-9]+\\): backlog table /nonexistent/heddle-shim/"
      "heddle-verbs-[0-9]+.tmp: cannot create: No such file or directory; check that the "
      "directory exists and is writable; RDMA runs unmodified, without backlog accounting\n$");
}

}  // namespace
}  // namespace heddle::verbs::shim
