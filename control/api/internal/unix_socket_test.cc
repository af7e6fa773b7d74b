// File: control/api/internal/unix_socket_test.cc
#include "control/api/internal/unix_socket.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "control/api/testing/temp_dir.h"
#include "control/api/testing/unix_listener.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::api::internal {
namespace {

using ::heddle::api::testing::TempDir;
using ::heddle::api::testing::UnixListener;
using ::testing::HasSubstr;

mode_t ModeOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

TEST(ValidateSocketPathTest, RejectsEmptyAndTooLong) {
  EXPECT_FALSE(ValidateSocketPath("").ok());
  const absl::Status s = ValidateSocketPath("/tmp/" + std::string(200, 'a'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("choose a shorter path"));
  EXPECT_TRUE(ValidateSocketPath("/run/heddle/heddled.sock").ok());
}

TEST(ProbeSocketPathTest, ClassifiesWhatIsThere) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());

  EXPECT_EQ(*ProbeSocketPath(dir.Join("absent.sock")), PathState::kAbsent);

  const std::string file = dir.Join("file");
  std::ofstream(file) << "x";
  EXPECT_EQ(*ProbeSocketPath(file), PathState::kNotASocket);
  EXPECT_EQ(*ProbeSocketPath(dir.path()), PathState::kNotASocket);

  const std::string live = dir.Join("live.sock");
  UnixListener listener(live, /*listen=*/true);
  ASSERT_TRUE(listener.ok());
  EXPECT_EQ(*ProbeSocketPath(live), PathState::kListening);

  listener.Close();
  EXPECT_EQ(*ProbeSocketPath(live), PathState::kStaleSocket);

  const std::string bound_only = dir.Join("bound.sock");
  UnixListener not_listening(bound_only, /*listen=*/false);
  ASSERT_TRUE(not_listening.ok());
  EXPECT_EQ(*ProbeSocketPath(bound_only), PathState::kStaleSocket);
}

TEST(EnsureParentDirectoryTest, CreatesMissingAncestorsWithMode) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string sock = dir.Join("a/b/heddled.sock");
  ASSERT_TRUE(EnsureParentDirectory(sock, 0750).ok());
  EXPECT_EQ(ModeOf(dir.Join("a")), 0750u);
  EXPECT_EQ(ModeOf(dir.Join("a/b")), 0750u);

  // An existing directory keeps its mode.
  chmod(dir.Join("a/b").c_str(), 0755);
  ASSERT_TRUE(EnsureParentDirectory(sock, 0750).ok());
  EXPECT_EQ(ModeOf(dir.Join("a/b")), 0755u);
}

TEST(EnsureParentDirectoryTest, FileInTheWayIsAnError) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  std::ofstream(dir.Join("f")) << "x";
  const absl::Status s = EnsureParentDirectory(dir.Join("f/heddled.sock"), 0750);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("is not a directory"));
}

}  // namespace
}  // namespace heddle::api::internal
