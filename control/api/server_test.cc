// File: control/api/server_test.cc
//
// ApiServer and ApiClient together over a real unix socket in a temp dir, answering from a
// FakeDaemonView.
#include "control/api/server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "absl/time/time.h"
#include "control/api/client.h"
#include "control/api/testing/fake_daemon_view.h"
#include "control/api/testing/temp_dir.h"
#include "control/api/testing/unix_listener.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::api {
namespace {

using ::heddle::api::testing::FakeDaemonView;
using ::heddle::api::testing::TempDir;
using ::heddle::api::testing::UnixListener;
using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

std::unique_ptr<ApiClient> Client(const std::string& path) {
  auto client = ApiClient::Create(path, absl::Seconds(5));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    socket_path_ = dir_.Join("run/heddle/heddled.sock");
  }

  TempDir dir_;
  std::string socket_path_;
  FakeDaemonView view_;
};

TEST_F(ApiServerTest, CreatesParentDirectoryAndSocketWithModes) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->socket_path(), socket_path_);
  EXPECT_EQ(ModeOf(dir_.Join("run/heddle")), 0750u);
  struct stat st;
  ASSERT_EQ(lstat(socket_path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
}

TEST_F(ApiServerTest, EveryRpcMapsTheView) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);
  ASSERT_NE(client, nullptr);

  auto status = client->GetStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->version(), "0.1.0-test");
  EXPECT_EQ(status->uptime_seconds(), 93784u);
  EXPECT_EQ(status->pid(), 4242u);
  EXPECT_EQ(status->config_path(), "/etc/heddle/heddled.yaml");
  EXPECT_EQ(status->metrics_url(), "http://127.0.0.1:9464/metrics");
  ASSERT_EQ(status->lcores_size(), 2);
  EXPECT_EQ(status->lcores(1).lcore_id(), 2u);
  EXPECT_EQ(status->lcores(1).role(), "worker");
  EXPECT_DOUBLE_EQ(status->lcores(1).busy_percent(), 25.0);
  EXPECT_DOUBLE_EQ(status->lcores(0).busy_percent(), 0.0);
  ASSERT_EQ(status->ports_size(), 2);
  EXPECT_EQ(status->ports(0).driver(), "net_pcap");
  EXPECT_TRUE(status->ports(0).link_up());
  EXPECT_FALSE(status->ports(1).link_up());

  auto ports = client->GetPorts();
  ASSERT_TRUE(ports.ok()) << ports.status();
  ASSERT_EQ(ports->ports_size(), 2);
  const v1::Port& up = ports->ports(1);
  EXPECT_EQ(up.name(), "uplink0");
  EXPECT_EQ(up.role(), "uplink");
  EXPECT_EQ(up.device(), "0000:3b:00.0");
  EXPECT_EQ(up.driver(), "mlx5_pci");
  EXPECT_EQ(up.port_id(), 1u);
  EXPECT_EQ(up.mac(), "02:00:00:00:00:02");
  EXPECT_EQ(up.rx_queues(), 2u);
  EXPECT_EQ(up.tx_queues(), 2u);
  EXPECT_EQ(up.mtu(), 9000u);
  EXPECT_EQ(up.peer(), "host0");
  EXPECT_EQ(ports->ports(0).speed_mbps(), 10000u);
  EXPECT_TRUE(ports->ports(0).full_duplex());

  auto stats = client->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->ports_size(), 2);
  const v1::PortStats& h = stats->ports(0);
  EXPECT_EQ(h.name(), "host0");
  EXPECT_EQ(h.rx_packets(), 1000u);
  EXPECT_EQ(h.rx_bytes(), 1234567u);
  EXPECT_EQ(h.tx_packets(), 990u);
  EXPECT_EQ(h.tx_bytes(), 1200000u);
  EXPECT_EQ(h.hw_rx_missed(), 3u);
  EXPECT_EQ(h.hw_rx_errors(), 1u);
  EXPECT_EQ(h.hw_tx_errors(), 0u);
  EXPECT_EQ(h.hw_rx_nombuf(), 7u);
  ASSERT_EQ(h.roce_by_class_size(), 3);
  EXPECT_EQ(h.roce_by_class(0).class_name(), "rdma-write");
  EXPECT_EQ(h.roce_by_class(0).packets(), 600u);
  EXPECT_EQ(h.roce_by_class(1).class_name(), "send");
  EXPECT_EQ(stats->ports(1).roce_by_class(2).packets(), 550u);
  ASSERT_EQ(stats->lcores_size(), 2);
  EXPECT_EQ(stats->lcores(1).busy_loops(), 250u);
  EXPECT_EQ(stats->lcores(1).idle_loops(), 750u);

  auto config = client->GetConfig();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->yaml(), view_.config_yaml);

  auto rdma = client->GetRdma();
  ASSERT_TRUE(rdma.ok()) << rdma.status();
  ASSERT_EQ(rdma->devices_size(), 1);
  const v1::RdmaDevice& dev = rdma->devices(0);
  EXPECT_EQ(dev.name(), "mlx5_0");
  EXPECT_EQ(dev.node_guid(), "0c42:a103:0012:3456");
  EXPECT_EQ(dev.fw_ver(), "22.36.1010");
  ASSERT_EQ(dev.ports_size(), 1);
  EXPECT_EQ(dev.ports(0).state(), "active");
  EXPECT_EQ(dev.ports(0).active_mtu(), 4096u);
  EXPECT_EQ(dev.ports(0).link_layer(), "Ethernet");
  ASSERT_EQ(dev.ports(0).gids_size(), 2);
  EXPECT_EQ(dev.ports(0).gids(1).index(), 3u);
  EXPECT_EQ(dev.ports(0).gids(1).gid(), "::ffff:10.0.0.1");
  EXPECT_EQ(rdma->note(), "");
}

TEST_F(ApiServerTest, DropsAreNonZeroUnlessAskedForAll) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);
  ASSERT_NE(client, nullptr);

  auto nonzero = client->GetDrops(/*include_zero=*/false);
  ASSERT_TRUE(nonzero.ok()) << nonzero.status();
  ASSERT_EQ(nonzero->drops_size(), 2);
  EXPECT_EQ(nonzero->drops(0).reason(), "ipv4-truncated");
  EXPECT_EQ(nonzero->drops(0).packets(), 5u);
  EXPECT_EQ(nonzero->drops(0).description(), "IPv4 header shorter than IHL");
  EXPECT_EQ(nonzero->drops(1).reason(), "bth-bad-opcode");
  EXPECT_EQ(nonzero->total_packets(), 17u);

  auto all = client->GetDrops(/*include_zero=*/true);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->drops_size(), 3);
  EXPECT_EQ(all->drops(1).reason(), "no-route");
  EXPECT_EQ(all->drops(1).packets(), 0u);
  EXPECT_EQ(all->total_packets(), 17u);
}

TEST_F(ApiServerTest, EmptyRdmaCarriesTheNote) {
  view_.rdma = RdmaView{.devices = {}, .note = "no RDMA device found"};
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto rdma = Client(socket_path_)->GetRdma();
  ASSERT_TRUE(rdma.ok()) << rdma.status();
  EXPECT_EQ(rdma->devices_size(), 0);
  EXPECT_EQ(rdma->note(), "no RDMA device found");
}

TEST_F(ApiServerTest, SecondServerOnSamePathIsRefusedAndFirstKeepsServing) {
  auto first = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(first.ok()) << first.status();

  FakeDaemonView other;
  auto second = ApiServer::Start(socket_path_, &other);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(second.status().message(),
              HasSubstr("another heddled is listening on " + socket_path_));

  ASSERT_TRUE(Exists(socket_path_));
  auto status = Client(socket_path_)->GetStatus();
  EXPECT_TRUE(status.ok()) << status.status();
}

TEST_F(ApiServerTest, StaleSocketIsReplaced) {
  ASSERT_EQ(mkdir(dir_.Join("run").c_str(), 0750), 0);
  ASSERT_EQ(mkdir(dir_.Join("run/heddle").c_str(), 0750), 0);
  {
    UnixListener dead(socket_path_, /*listen=*/true);
    ASSERT_TRUE(dead.ok());
  }  // closed, file left behind: what a crashed daemon leaves
  struct stat before;
  ASSERT_EQ(lstat(socket_path_.c_str(), &before), 0);
  ASSERT_TRUE(S_ISSOCK(before.st_mode));

  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(ModeOf(socket_path_), 0660u);
  auto status = Client(socket_path_)->GetStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->pid(), 4242u);
}

TEST_F(ApiServerTest, RegularFileAtPathIsRefusedAndKept) {
  const std::string path = dir_.Join("heddled.sock");
  std::ofstream(path) << "not a socket\n";

  auto server = ApiServer::Start(path, &view_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(server.status().message(), HasSubstr(path + " exists and is not a socket"));

  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str(), "not a socket\n");
}

TEST_F(ApiServerTest, ParentThatIsAFileIsAClearError) {
  std::ofstream(dir_.Join("run")) << "x";
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("is not a directory"));
}

TEST_F(ApiServerTest, TooLongPathIsAClearError) {
  auto server = ApiServer::Start(dir_.Join(std::string(120, 's')), &view_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ApiServerTest, NullViewIsRejected) {
  EXPECT_FALSE(ApiServer::Start(socket_path_, nullptr).ok());
  EXPECT_FALSE(Exists(socket_path_));
}

TEST_F(ApiServerTest, ShutdownRemovesSocketAndClientSaysSo) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);
  ASSERT_TRUE(client->GetStatus().ok());

  (*server)->Shutdown();
  EXPECT_FALSE(Exists(socket_path_));
  (*server)->Shutdown();  // idempotent

  auto status = client->GetStatus();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.status().message(), HasSubstr("cannot reach heddled at " + socket_path_));
  EXPECT_THAT(status.status().message(),
              HasSubstr("is heddled running? (-s to choose another socket)"));

  // The path is free again for the next daemon.
  auto again = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(again.ok()) << again.status();
}

TEST_F(ApiServerTest, DestructorRemovesSocket) {
  {
    auto server = ApiServer::Start(socket_path_, &view_);
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_TRUE(Exists(socket_path_));
  }
  EXPECT_FALSE(Exists(socket_path_));
}

TEST_F(ApiServerTest, ShutdownLeavesAReplacementSocketAlone) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  // Someone removed our socket and put theirs in its place.
  ASSERT_EQ(unlink(socket_path_.c_str()), 0);
  UnixListener other(socket_path_, /*listen=*/true);
  ASSERT_TRUE(other.ok());

  (*server)->Shutdown();
  EXPECT_TRUE(Exists(socket_path_));
}

TEST(ApiClientTest, UnreachableDaemonNamesThePathAndTheFix) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.Join("nobody.sock");
  auto client = Client(path);
  ASSERT_NE(client, nullptr);
  auto status = client->GetStatus();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.status().message(), HasSubstr("cannot reach heddled at " + path + ": "));
  EXPECT_THAT(status.status().message(), HasSubstr("is heddled running?"));
}

TEST(ApiClientTest, RejectsBadArguments) {
  EXPECT_FALSE(ApiClient::Create("", absl::Seconds(1)).ok());
  EXPECT_FALSE(ApiClient::Create("/tmp/x.sock", absl::ZeroDuration()).ok());
}

class ThrowingView : public FakeDaemonView {
 public:
  std::string GetConfigYaml() override { throw std::runtime_error("yaml emitter broke"); }
};

TEST(ApiServerErrorTest, ViewExceptionFailsOnlyThatCall) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  ThrowingView view;
  auto server = ApiServer::Start(dir.Join("h.sock"), &view);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(dir.Join("h.sock"));

  auto config = client->GetConfig();
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(config.status().message(), HasSubstr("yaml emitter broke"));
  EXPECT_TRUE(client->GetStatus().ok());
}

}  // namespace
}  // namespace heddle::api
