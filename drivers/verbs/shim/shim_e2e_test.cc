// File: drivers/verbs/shim/shim_e2e_test.cc
//
// Runs plain libibverbs programs with libheddle_verbs_shim.so preloaded. shim_e2e_probe.cc: it
// must exit normally, its ibv_open_device must resolve to the shim, and with no device opened
// (none exists on a test machine; if one does, the shim's table must be gone after exit) nothing
// is left in the table directory. shim_e2e_qp_probe.cc, on a fake provider library preloaded
// behind the shim: connecting a QP through the real ibv_modify_qp symbol records its peer in the
// table, a rejected modify changes nothing, ibv_destroy_qp retires the QP.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "drivers/verbs/shim/backlog_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if defined(__SANITIZE_ADDRESS__)
#define HEDDLE_SHIM_E2E_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEDDLE_SHIM_E2E_ASAN 1
#endif
#endif

#if defined(HEDDLE_SHIM_E2E_ASAN)
extern "C" void __asan_init();
#endif

namespace {

using heddle::verbs::shim::BacklogReader;
using heddle::verbs::shim::QpBacklog;

using ::testing::HasSubstr;
using ::testing::Not;

struct ProbeRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

// LD_PRELOAD=<libs>. In an AddressSanitizer build with a shared ASan runtime (gcc's default) the
// shim and the probes link that runtime, which must come first in the process's library list:
// ahead of the preloaded shim too, or ASan refuses to start the probe.
std::string Preload(const std::string& libs) {
  std::string list = libs;
#if defined(HEDDLE_SHIM_E2E_ASAN)
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&__asan_init), &info) != 0 && info.dli_fname != nullptr &&
      std::string(info.dli_fname).find("libasan") != std::string::npos) {
    list = std::string(info.dli_fname) + " " + list;
  }
#endif
  return "LD_PRELOAD=\"" + list + "\"";
}

ProbeRun RunProbe(const std::string& env, const char* probe = HEDDLE_SHIM_PROBE) {
  ProbeRun r;
  const std::string cmd = env + " " + probe + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  r.status = pclose(p);
  return r;
}

class ShimE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/heddle-shim-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ShimE2eTest, PreloadedIntoAVerbsProgramIsHarmless) {
  ProbeRun r = RunProbe(Preload(HEDDLE_SHIM_SO) + " HEDDLE_VERBS_SHIM_DIR=" + dir_);
  ASSERT_TRUE(WIFEXITED(r.status)) << r.out;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("devices: "));
  EXPECT_THAT(r.out, HasSubstr("ibv_open_device from: " HEDDLE_SHIM_SO));
  EXPECT_THAT(r.out, Not(HasSubstr("heddle verbs shim")));  // no warning
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << r.out;
}

TEST_F(ShimE2eTest, WithoutPreloadTheProbeUsesLibibverbs) {
  ProbeRun r = RunProbe("HEDDLE_VERBS_SHIM_DIR=" + dir_);
  ASSERT_TRUE(WIFEXITED(r.status)) << r.out;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("ibv_open_device from: "));
  EXPECT_THAT(r.out, Not(HasSubstr("libheddle_verbs_shim")));
}

TEST_F(ShimE2eTest, UnwritableTableDirStillRunsNormally) {
  ProbeRun r = RunProbe(Preload(HEDDLE_SHIM_SO) + " HEDDLE_VERBS_SHIM_DIR=" + dir_ + "/missing");
  ASSERT_TRUE(WIFEXITED(r.status)) << r.out;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.out;
}

std::vector<QpBacklog> QpsIn(const std::string& table) {
  std::vector<QpBacklog> qps;
  absl::StatusOr<BacklogReader> r = BacklogReader::Open(table);
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) r->ForEachQp([&](const QpBacklog& q) { qps.push_back(q); });
  return qps;
}

TEST_F(ShimE2eTest, ModifyQpRecordsThePeerAndDestroyRetiresIt) {
  const std::string out = dir_ + "/out";
  std::filesystem::create_directory(out);
  ProbeRun r = RunProbe(Preload(std::string(HEDDLE_SHIM_SO) + " " + HEDDLE_SHIM_FAKEVERBS_SO) +
                            " HEDDLE_VERBS_SHIM_DIR=" + dir_ + " HEDDLE_E2E_OUT=" + out,
                        HEDDLE_SHIM_QP_PROBE);
  ASSERT_TRUE(WIFEXITED(r.status)) << r.out;
  ASSERT_EQ(WEXITSTATUS(r.status), 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("ibv_modify_qp from: " HEDDLE_SHIM_SO));
  EXPECT_THAT(r.out, HasSubstr("ibv_destroy_qp from: " HEDDLE_SHIM_SO));
  EXPECT_THAT(r.out, HasSubstr("modify rtr: 0\n"));
  EXPECT_THAT(r.out, HasSubstr("modify rejected: 22\n"));  // EINVAL from the provider, unchanged
  EXPECT_THAT(r.out, HasSubstr("destroy: 0\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("heddle verbs shim")));

  const std::vector<QpBacklog> connected = QpsIn(out + "/connected");
  ASSERT_EQ(connected.size(), 1u) << r.out;
  const QpBacklog& q = connected[0];
  EXPECT_EQ(q.qpn, 0x1234u);
  EXPECT_TRUE(q.has_peer);
  EXPECT_EQ(q.dest_qpn, 0x5678u);  // not 0xbad: the rejected modify was not recorded
  const std::array<uint8_t, 16> want = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7};
  EXPECT_EQ(q.dgid, want);
  EXPECT_EQ(q.posted_bytes, 4096u);
  EXPECT_EQ(q.backlog_bytes(), 4096u);

  EXPECT_TRUE(QpsIn(out + "/destroyed").empty());
  // The probe exited normally: its table is gone, only the snapshots remain.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                          std::filesystem::directory_iterator()),
            1);
}

}  // namespace
