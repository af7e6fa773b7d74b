// File: drivers/verbs/shim/shim_e2e_test.cc
//
// Runs a plain libibverbs program (shim_e2e_probe.cc) with libheddle_verbs_shim.so preloaded:
// it must exit normally, its ibv_open_device must resolve to the shim, and with no device opened
// (none exists on a test machine; if one does, the shim's table must be gone after exit) nothing
// is left in the table directory.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct ProbeRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

ProbeRun RunProbe(const std::string& env) {
  ProbeRun r;
  const std::string cmd = env + " " + HEDDLE_SHIM_PROBE + " 2>&1";
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
  ProbeRun r =
      RunProbe(std::string("LD_PRELOAD=") + HEDDLE_SHIM_SO + " HEDDLE_VERBS_SHIM_DIR=" + dir_);
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
  ProbeRun r = RunProbe(std::string("LD_PRELOAD=") + HEDDLE_SHIM_SO +
                        " HEDDLE_VERBS_SHIM_DIR=" + dir_ + "/missing");
  ASSERT_TRUE(WIFEXITED(r.status)) << r.out;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.out;
}

}  // namespace
