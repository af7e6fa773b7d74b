// File: drivers/verbs/shim/hooks_test.cc
//
// The shim's wrappers on a fake ibv_context. InstallOnContext() is the code path the interposed
// ibv_open_device takes; the test then calls rdma-core's real inline ibv_post_send() and
// ibv_poll_cq(), which dispatch through ctx->ops to the wrappers and on to the fake provider
// below, and reads the resulting counters back through BacklogReader from the process's table
// (created in a temp dir named by HEDDLE_VERBS_SHIM_DIR).
#include "drivers/verbs/shim/hooks.h"

#include <infiniband/verbs.h>
#include <unistd.h>

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

  std::optional<QpBacklog> Counters(uint32_t qpn) {
    absl::StatusOr<BacklogReader> r =
        BacklogReader::Open(BacklogWriter::PathFor(ShimDirEnvironment::dir(), getpid()));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return std::nullopt;
    return r->Lookup(qpn);
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
