// File: control/api/server_test.cc
//
// ApiServer and ApiClient together over a real unix socket in a temp dir, answering from a
// FakeDaemonView.
#include "control/api/server.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "absl/time/time.h"
#include "control/api/client.h"
#include "control/api/heddle.grpc.pb.h"
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
using ::testing::ElementsAre;
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

// ---- STORM ----

// A stub without ApiClient's defaults, to send requests with fields left unset.
std::unique_ptr<v1::Heddle::Stub> RawStub(const std::string& path) {
  return v1::Heddle::NewStub(
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
}

TEST_F(ApiServerTest, GetStormMapsEveryField) {
  view_.storm.host_errors = {"/dev/shm/heddle-verbs-77: layout version 9, expected 1"};
  view_.storm.auto_publications = 12;
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto r = Client(socket_path_)->GetStorm();
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::Storm& s = r->storm();
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.levels(), 4u);
  EXPECT_EQ(s.mode(), "per-message");
  EXPECT_FALSE(s.auto_cutoffs());
  EXPECT_THAT(s.cutoffs(), ElementsAre(4096u, 65536u, 1048576u));
  EXPECT_EQ(s.control_level(), 3u);
  EXPECT_DOUBLE_EQ(s.beta(), 1.5);
  EXPECT_EQ(s.backlog_max(), 16777216u);
  EXPECT_EQ(s.backlog_source(), "egress");
  EXPECT_EQ(s.generation(), 7u);
  EXPECT_EQ(s.auto_interval_ms(), 1000u);
  EXPECT_EQ(s.auto_publications(), 12u);
  ASSERT_EQ(s.per_level_size(), 4);
  const v1::StormLevel& top = s.per_level(0);
  EXPECT_EQ(top.level(), 3u);
  EXPECT_EQ(top.dscp(), 26u);
  EXPECT_EQ(top.pcp(), -1);
  EXPECT_EQ(top.r_min(), 0u);
  EXPECT_EQ(top.r_max(), 4096u);
  EXPECT_TRUE(top.control());
  EXPECT_EQ(top.tagged_packets(), 1003u);
  EXPECT_EQ(top.tagged_bytes(), 2000003u);
  EXPECT_EQ(top.egress_tx_packets(), 903u);
  EXPECT_EQ(s.per_level(1).pcp(), 5);
  EXPECT_FALSE(s.per_level(1).control());
  const v1::StormLevel& bottom = s.per_level(3);
  EXPECT_EQ(bottom.level(), 0u);
  EXPECT_EQ(bottom.r_min(), 1048576u);
  EXPECT_EQ(bottom.r_max(), 0u);
  EXPECT_EQ(bottom.egress_drops(), 17u);
  EXPECT_EQ(bottom.egress_queue_depth(), 5u);
  EXPECT_EQ(s.qp_table().live(), 321u);
  EXPECT_EQ(s.qp_table().capacity(), 131072u);
  EXPECT_EQ(s.qp_table().table_full(), 2u);
  EXPECT_EQ(s.qp_table().evicted_idle(), 40u);
  EXPECT_EQ(s.qp_table().evicted_on_insert(), 3u);
  EXPECT_EQ(s.tracker().requests_started(), 5000u);
  EXPECT_EQ(s.tracker().requests_completed(), 4990u);
  EXPECT_EQ(s.tracker().orphans(), 4u);
  EXPECT_EQ(s.tracker().abandoned(), 1u);
  EXPECT_EQ(s.tracker().duplicates(), 12u);
  EXPECT_EQ(s.tracker().psn_jumps(), 6u);
  EXPECT_EQ(s.tracker().bogus_length(), 0u);
  EXPECT_EQ(s.tracker().overrun(), 2u);
  EXPECT_EQ(s.host().tables(), 2u);
  EXPECT_EQ(s.host().qps(), 48u);
  EXPECT_EQ(s.host().backlog_hits(), 777u);
  EXPECT_EQ(s.host().pairs(), 46u);
  EXPECT_EQ(s.host().ambiguous_pairs(), 1u);
  EXPECT_EQ(s.join().joined_local(), 900u);
  EXPECT_EQ(s.join().joined_remote(), 300u);
  EXPECT_EQ(s.join().no_pair(), 12u);
  EXPECT_EQ(s.join().no_entry(), 5u);
  EXPECT_EQ(s.join().ring_full(), 0u);
  EXPECT_EQ(s.join().malformed(), 1u);
  EXPECT_EQ(s.join().acks_advanced(), 1100u);
  EXPECT_EQ(s.join().acks_old(), 95u);
  EXPECT_EQ(s.join().acks_ahead(), 5u);
  EXPECT_EQ(s.join().fabric_guarded(), 42u);
  const v1::StormReadResponses& rr = s.read_responses();
  EXPECT_EQ(rr.sized(), 60u);
  EXPECT_EQ(rr.unknown(), 7u);
  EXPECT_EQ(rr.orphans(), 2u);
  EXPECT_EQ(rr.late(), 3u);
  EXPECT_EQ(rr.duplicates(), 11u);
  EXPECT_EQ(rr.psn_jumps(), 4u);
  EXPECT_EQ(rr.abandoned(), 1u);
  EXPECT_EQ(rr.overrun(), 0u);
  EXPECT_EQ(rr.malformed(), 5u);
  EXPECT_EQ(rr.live(), 9u);
  EXPECT_EQ(rr.capacity(), 32768u);
  EXPECT_EQ(rr.table_full(), 6u);
  EXPECT_EQ(rr.evicted(), 8u);
  EXPECT_EQ(rr.window_guarded(), 13u);
  EXPECT_EQ(rr.requests_local(), 40u);
  EXPECT_EQ(rr.requests_remote(), 23u);
  EXPECT_EQ(rr.requests_no_pair(), 2u);
  EXPECT_EQ(rr.requests_no_entry(), 21u);
  EXPECT_EQ(rr.requests_ring_full(), 0u);
  EXPECT_EQ(rr.requests_malformed(), 1u);
  EXPECT_EQ(rr.requests_pending_full(), 14u);
  EXPECT_EQ(rr.requests_stale(), 15u);
  EXPECT_EQ(rr.requests_too_late(), 16u);
  EXPECT_THAT(s.host().errors(),
              ElementsAre("/dev/shm/heddle-verbs-77: layout version 9, expected 1"));
}

TEST_F(ApiServerTest, ListQpsPassesTopAndSortAndMapsRows) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);

  auto r = client->ListQps(2, "remaining");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(view_.last_top, 2u);
  EXPECT_EQ(view_.last_sort, "remaining");
  EXPECT_EQ(r->sort(), "remaining");
  EXPECT_EQ(r->top(), 2u);
  ASSERT_EQ(r->qps_size(), 2);
  const v1::Qp& q = r->qps(0);
  EXPECT_EQ(q.worker(), 0u);
  EXPECT_EQ(q.qpn(), 0x11u);
  EXPECT_EQ(q.direction(), "request");
  EXPECT_EQ(q.kind(), "write");
  EXPECT_EQ(q.level(), 2u);
  EXPECT_EQ(q.dst(), "10.0.0.2");
  EXPECT_TRUE(q.size_known());
  EXPECT_TRUE(q.in_progress());
  EXPECT_EQ(q.size(), 65536u);
  EXPECT_EQ(q.sent(), 16384u);
  EXPECT_EQ(q.remaining(), 49152u);
  EXPECT_EQ(q.backlog_bytes(), 8192u);
  EXPECT_EQ(q.egress_held(), 2u);
  EXPECT_EQ(q.host_backlog(), 0u);
  EXPECT_EQ(q.completed(), 31u);
  EXPECT_EQ(q.idle_ms(), 3u);
  ASSERT_TRUE(q.has_acked_psn());
  EXPECT_EQ(q.acked_psn(), 1000u);
  EXPECT_EQ(q.unacked(), 4u);

  r = client->ListQps(1000, "idle");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->qps_size(), 3);
  EXPECT_EQ(r->qps(0).qpn(), 0xabcdefu);
  EXPECT_EQ(r->qps(0).dst(), "ipv6");
}

TEST_F(ApiServerTest, ListQpsDefaultsWhenTopAndSortAreUnset) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = RawStub(socket_path_);
  grpc::ClientContext context;
  v1::ListQpsResponse r;
  const grpc::Status status = stub->ListQps(&context, v1::ListQpsRequest(), &r);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(view_.last_top, 20u);
  EXPECT_EQ(view_.last_sort, "backlog");
  EXPECT_EQ(r.top(), 20u);
  EXPECT_EQ(r.sort(), "backlog");
  ASSERT_EQ(r.qps_size(), 3);
  EXPECT_EQ(r.qps(0).qpn(), 0x2au);  // largest backlog first
}

TEST_F(ApiServerTest, ListQpsRejectsBadTopAndSortWithoutAskingTheDaemon) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);
  for (uint32_t top : {0u, 1001u}) {
    auto r = client->ListQps(top, "backlog");
    ASSERT_FALSE(r.ok()) << top;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("list 1..1000 QPs"));
  }
  auto r = client->ListQps(5, "size");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("cannot sort QPs by \"size\"; use backlog, remaining or idle"));
  EXPECT_EQ(view_.last_top, 0u);
}

TEST_F(ApiServerTest, SetStormLeavesUnsetFieldsUnsetAndKeepsZeros) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);

  v1::SetStormRequest only_zero;
  only_zero.set_control_level(0);
  auto r = client->SetStorm(only_zero);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(view_.last_update.has_value());
  EXPECT_EQ(view_.last_update->control_level, std::optional<uint32_t>(0));
  EXPECT_FALSE(view_.last_update->levels.has_value());
  EXPECT_FALSE(view_.last_update->cutoffs.has_value());
  EXPECT_FALSE(view_.last_update->cutoffs_auto);
  EXPECT_FALSE(view_.last_update->mode.has_value());
  EXPECT_FALSE(view_.last_update->dscp.has_value());
  EXPECT_FALSE(view_.last_update->pcp.has_value());
  EXPECT_FALSE(view_.last_update->beta.has_value());
  EXPECT_EQ(r->storm().control_level(), 0u);
  EXPECT_EQ(r->storm().generation(), 8u);

  // One level: an empty cutoff list is given, not absent; beta 0 is a value.
  v1::SetStormRequest one_level;
  one_level.set_levels(1);
  one_level.mutable_cutoffs();
  one_level.mutable_dscp()->add_values(0);
  one_level.mutable_pcp()->add_values(-1);
  one_level.set_beta(0);
  r = client->SetStorm(one_level);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(view_.last_update->levels, std::optional<uint32_t>(1));
  ASSERT_TRUE(view_.last_update->cutoffs.has_value());
  EXPECT_TRUE(view_.last_update->cutoffs->empty());
  EXPECT_EQ(view_.last_update->beta, std::optional<double>(0));
  EXPECT_FALSE(view_.last_update->control_level.has_value());
  EXPECT_EQ(r->storm().levels(), 1u);
  EXPECT_EQ(r->storm().cutoffs_size(), 0);
  ASSERT_EQ(r->storm().per_level_size(), 1);
  EXPECT_EQ(r->storm().per_level(0).r_max(), 0u);
}

TEST_F(ApiServerTest, SetStormCarriesEveryFieldAndAnswersTheNewState) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  v1::SetStormRequest req;
  req.set_levels(3);
  for (uint64_t c : {8192u, 262144u}) req.mutable_cutoffs()->add_values(c);
  req.set_mode("per-packet");
  for (uint32_t d : {8u, 16u, 46u}) req.mutable_dscp()->add_values(d);
  for (int32_t p : {-1, 3, 6}) req.mutable_pcp()->add_values(p);
  req.set_control_level(2);
  req.set_beta(0.25);
  req.set_unknown_size(262144);
  auto r = Client(socket_path_)->SetStorm(req);
  ASSERT_TRUE(r.ok()) << r.status();

  ASSERT_TRUE(view_.last_update.has_value());
  const StormUpdate& u = *view_.last_update;
  EXPECT_EQ(u.levels, std::optional<uint32_t>(3));
  ASSERT_TRUE(u.cutoffs.has_value());
  EXPECT_THAT(*u.cutoffs, ElementsAre(8192u, 262144u));
  EXPECT_FALSE(u.cutoffs_auto);
  EXPECT_EQ(u.mode, std::optional<std::string>("per-packet"));
  ASSERT_TRUE(u.dscp.has_value());
  EXPECT_THAT(*u.dscp, ElementsAre(8u, 16u, 46u));
  ASSERT_TRUE(u.pcp.has_value());
  EXPECT_THAT(*u.pcp, ElementsAre(-1, 3, 6));
  EXPECT_EQ(u.control_level, std::optional<uint32_t>(2));
  EXPECT_EQ(u.beta, std::optional<double>(0.25));
  EXPECT_EQ(u.unknown_size, std::optional<uint32_t>(262144));

  const v1::Storm& s = r->storm();
  EXPECT_EQ(s.levels(), 3u);
  EXPECT_THAT(s.cutoffs(), ElementsAre(8192u, 262144u));
  EXPECT_EQ(s.mode(), "per-packet");
  EXPECT_DOUBLE_EQ(s.beta(), 0.25);
  EXPECT_EQ(s.unknown_size(), 262144u);
  EXPECT_EQ(s.generation(), 8u);
  ASSERT_EQ(s.per_level_size(), 3);
  EXPECT_EQ(s.per_level(0).level(), 2u);
  EXPECT_EQ(s.per_level(0).dscp(), 46u);
  EXPECT_EQ(s.per_level(0).pcp(), 6);
  EXPECT_TRUE(s.per_level(0).control());
  EXPECT_EQ(s.per_level(2).pcp(), -1);

  v1::SetStormRequest to_auto;
  to_auto.set_cutoffs_auto(true);
  r = Client(socket_path_)->SetStorm(to_auto);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(view_.last_update->cutoffs_auto);
  EXPECT_FALSE(view_.last_update->cutoffs.has_value());
  EXPECT_TRUE(r->storm().auto_cutoffs());
}

TEST_F(ApiServerTest, SetStormRejectsMalformedRequestsWithoutAskingTheDaemon) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);
  struct Case {
    const char* name;
    v1::SetStormRequest request;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back({"empty", {}, "sets nothing"});
  {
    v1::SetStormRequest both;
    both.mutable_cutoffs()->add_values(4096);
    both.set_cutoffs_auto(true);
    cases.push_back({"both cutoffs", both, "either static cutoffs or auto cutoffs, not both"});
  }
  {
    v1::SetStormRequest mode;
    mode.set_mode("fast");
    cases.push_back({"mode", mode, "storm mode \"fast\" is not one of per-message, per-packet"});
  }
  {
    v1::SetStormRequest beta;
    beta.set_beta(-1);
    cases.push_back({"negative beta", beta, "must be a finite number >= 0"});
    beta.set_beta(std::numeric_limits<double>::quiet_NaN());
    cases.push_back({"nan beta", beta, "must be a finite number >= 0"});
  }
  {
    v1::SetStormRequest unknown;
    unknown.set_unknown_size(0);
    cases.push_back({"zero unknown_size", unknown, "storm unknown_size 0 is out of range"});
    unknown.set_unknown_size(uint64_t{1} << 32);
    cases.push_back({"huge unknown_size", unknown, "use 1 to 4294967295 bytes"});
  }
  for (const Case& c : cases) {
    auto r = client->SetStorm(c.request);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.name;
    EXPECT_THAT(r.status().message(), HasSubstr("heddled SetStorm: ")) << c.name;
  }
  EXPECT_FALSE(view_.last_update.has_value());
}

TEST_F(ApiServerTest, DaemonStatusCodesAndMessagesReachTheClient) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);

  const absl::Status errors[] = {
      absl::FailedPreconditionError("storm is disabled; set storm.enabled: true and restart"),
      absl::InvalidArgumentError("storm.cutoffs: 2 values for 4 levels; give 3"),
      absl::DeadlineExceededError("new cutoffs not published within 2s: a worker is stuck"),
      absl::UnimplementedError("per-packet mode needs the egress stage"),
  };
  for (const absl::Status& e : errors) {
    {
      std::lock_guard<std::mutex> lock(view_.mu);
      view_.storm_error = e;
    }
    auto get = client->GetStorm();
    ASSERT_FALSE(get.ok()) << e;
    EXPECT_EQ(get.status().code(), e.code());
    EXPECT_EQ(get.status().message(), "heddled GetStorm: " + std::string(e.message()));
    auto list = client->ListQps(5, "idle");
    ASSERT_FALSE(list.ok()) << e;
    EXPECT_EQ(list.status().code(), e.code());
    EXPECT_EQ(list.status().message(), "heddled ListQps: " + std::string(e.message()));
    v1::SetStormRequest req;
    req.set_mode("per-packet");
    auto set = client->SetStorm(req);
    ASSERT_FALSE(set.ok()) << e;
    EXPECT_EQ(set.status().code(), e.code());
    EXPECT_EQ(set.status().message(), "heddled SetStorm: " + std::string(e.message()));
  }
}

TEST_F(ApiServerTest, GetLbMapsEveryField) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto r = Client(socket_path_)->GetLb();
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::Lb& lb = r->lb();
  EXPECT_TRUE(lb.enabled());
  EXPECT_EQ(lb.balancer(), "reps");
  EXPECT_TRUE(lb.pin());
  EXPECT_EQ(lb.threshold_bytes(), 100000u);
  EXPECT_TRUE(lb.threshold_auto());
  EXPECT_EQ(lb.pin_policy(), "hash");
  EXPECT_EQ(lb.flow_unit(), "request");
  EXPECT_EQ(lb.crossing(), "stay-pinned");
  EXPECT_EQ(lb.entropy(), "udp-sport");
  EXPECT_EQ(lb.generation(), 3u);
  EXPECT_FALSE(lb.feedback_join());
  EXPECT_EQ(lb.pinned_flows(), 900u);
  EXPECT_EQ(lb.sprayed_flows(), 100u);
  EXPECT_EQ(lb.pinned_packets(), 4000u);
  EXPECT_EQ(lb.sprayed_packets(), 60000u);
  EXPECT_EQ(lb.pinned_bytes(), 4'200'000u);
  EXPECT_EQ(lb.sprayed_bytes(), 63'000'000u);
  EXPECT_EQ(lb.flows_live(), 12u);
  EXPECT_EQ(lb.flow_capacity(), 65536u);
  ASSERT_EQ(lb.sets_size(), 1);
  EXPECT_EQ(lb.sets(0).prefix(), "default");
  EXPECT_DOUBLE_EQ(lb.sets(0).jain_index(), 0.9423);
  ASSERT_EQ(lb.sets(0).paths_size(), 4);
  EXPECT_EQ(lb.sets(0).paths(3).port(), "uplink1");
  EXPECT_EQ(lb.sets(0).paths(3).entropy(), 0xc001u);
  EXPECT_EQ(lb.sets(0).paths(3).bytes(), 10'000'000u);
  EXPECT_EQ(lb.sets(0).paths(3).packets(), 10000u);
  ASSERT_EQ(lb.counters_size(), 2);
  EXPECT_EQ(lb.counters(1).name(), "join-no-index");
  EXPECT_EQ(lb.counters(1).value(), 77u);
  EXPECT_THAT(lb.counters(1).description(), HasSubstr("no host index"));
}

TEST_F(ApiServerTest, SetLbCarriesWhatIsSetAndRefusesEmptyOrContradictoryRequests) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);
  v1::SetLbRequest req;
  req.set_balancer("adaptive");
  req.set_threshold_bytes(65536);
  req.set_pin(false);  // false is a value, not "unset"
  auto r = client->SetLb(req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(view_.last_lb_update.has_value());
  EXPECT_EQ(view_.last_lb_update->balancer, std::optional<std::string>("adaptive"));
  EXPECT_EQ(view_.last_lb_update->threshold_bytes, std::optional<uint64_t>(65536));
  EXPECT_EQ(view_.last_lb_update->pin, std::optional<bool>(false));
  EXPECT_FALSE(view_.last_lb_update->pin_policy.has_value());
  EXPECT_FALSE(view_.last_lb_update->threshold_auto);
  EXPECT_EQ(r->lb().balancer(), "adaptive");
  EXPECT_EQ(r->lb().threshold_bytes(), 65536u);
  EXPECT_FALSE(r->lb().threshold_auto());
  EXPECT_FALSE(r->lb().pin());
  EXPECT_EQ(r->lb().generation(), 4u);

  view_.last_lb_update.reset();
  struct Case {
    v1::SetLbRequest req;
    std::string message;
  };
  std::vector<Case> cases(2);
  cases[0].message = "nothing to change";
  cases[1].req.set_threshold_bytes(1);
  cases[1].req.set_threshold_auto(true);
  cases[1].message = "not both";
  for (const Case& c : cases) {
    auto bad = client->SetLb(c.req);
    ASSERT_FALSE(bad.ok()) << c.message;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(), HasSubstr("heddled SetLb: "));
    EXPECT_THAT(bad.status().message(), HasSubstr(c.message));
  }
  EXPECT_FALSE(view_.last_lb_update.has_value());

  // The daemon's own refusal and its FailedPrecondition reach the client unchanged.
  v1::SetLbRequest unknown;
  unknown.set_balancer("spray");
  auto refused = client->SetLb(unknown);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("lb.balancer"));
  {
    std::lock_guard<std::mutex> lock(view_.mu);
    view_.lb_error = absl::FailedPreconditionError("lb is not enabled");
  }
  auto off = client->GetLb();
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(off.status().message(), "heddled GetLb: lb is not enabled");
}

TEST_F(ApiServerTest, ArtifactRpcsCarryBytesAndMapEveryField) {
  auto server = ApiServer::Start(socket_path_, &view_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(socket_path_);

  auto got = client->GetArtifact();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->node(), "host[3]");
  EXPECT_EQ(got->fabric(), "pod-a");
  ASSERT_TRUE(got->has_installed());
  const v1::Artifact& a = got->installed();
  EXPECT_EQ(a.id(), 2u);
  EXPECT_EQ(a.source(), "pod-a-host.nuwa");
  EXPECT_EQ(a.installed_unix_ms(), 1'700'000'000'000);
  EXPECT_EQ(a.bytes(), 1432u);
  EXPECT_EQ(a.version(), 1u);
  EXPECT_EQ(a.checksum(), 0xdeadbeefu);
  EXPECT_EQ(a.fabric_digest(), 0x0123456789abcdefull);
  EXPECT_EQ(a.fabric(), "pod-a");
  EXPECT_EQ(a.role(), "host");
  EXPECT_EQ(a.node(), "host[3] (10.0.0.3)");
  EXPECT_EQ(a.host(), 3u);
  EXPECT_EQ(a.shape(), "2 tiers, m 4x4, w 1x2, 1 plane");
  EXPECT_EQ(a.hash(), "crc32 seed 0x00000007 bits 0/8/0");
  EXPECT_EQ(a.max_paths(), 16u);
  EXPECT_EQ(a.classes(), 1u);
  EXPECT_EQ(a.node_masks(), 2u);
  EXPECT_EQ(a.overrides(), 1u);
  EXPECT_EQ(a.path_sets(), 3u);
  EXPECT_EQ(a.prefixes(), 4u);
  EXPECT_EQ(a.no_path(), 1u);
  ASSERT_EQ(got->history_size(), 1);
  EXPECT_EQ(got->history(0).id(), 1u);
  EXPECT_EQ(got->generation(), 2u);
  EXPECT_EQ(got->installs(), 2u);
  EXPECT_EQ(got->rejected(), 1u);

  // Install: the bytes arrive unchanged (binary, larger than the old 64 KiB request limit).
  std::string bytes(200 * 1024, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  v1::InstallArtifactRequest req;
  req.set_artifact(bytes);
  req.set_source("b.nuwa");
  auto inst = client->InstallArtifact(req);
  ASSERT_TRUE(inst.ok()) << inst.status();
  ASSERT_TRUE(view_.last_install.has_value());
  EXPECT_EQ(view_.last_install->bytes, bytes);
  EXPECT_EQ(view_.last_install->source, "b.nuwa");
  EXPECT_FALSE(view_.last_install->dry_run);
  EXPECT_EQ(inst->artifact().id(), 3u);
  EXPECT_EQ(inst->artifact().bytes(), bytes.size());
  EXPECT_FALSE(inst->dry_run());
  req.set_dry_run(true);
  inst = client->InstallArtifact(req);
  ASSERT_TRUE(inst.ok()) << inst.status();
  EXPECT_TRUE(view_.last_install->dry_run);
  EXPECT_TRUE(inst->dry_run());
  EXPECT_EQ(inst->artifact().id(), 0u);

  // Refusals: the daemon's reason, and the server's own size checks without asking the daemon.
  req.set_dry_run(false);
  req.set_artifact("bad bytes");
  auto bad = client->InstallArtifact(req);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("heddled InstallArtifact: artifact b.nuwa: "
                                                "checksum mismatch"));
  view_.last_install.reset();
  req.set_artifact("");
  bad = client->InstallArtifact(req);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("empty"));
  req.set_artifact(std::string((4 << 20) + 1, 'x'));
  bad = client->InstallArtifact(req);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("more than the 4194304"));
  EXPECT_FALSE(view_.last_install.has_value());

  // Diff.
  v1::DiffArtifactRequest dreq;
  dreq.set_artifact("other");
  auto diff = client->DiffArtifact(dreq);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_EQ(view_.last_diff_bytes, std::optional<std::string>("other"));
  EXPECT_EQ(diff->installed().id(), 2u);
  EXPECT_EQ(diff->given().checksum(), 0x01020304u);
  ASSERT_EQ(diff->fields_size(), 2);
  EXPECT_EQ(diff->fields(1).field(), "overrides");
  EXPECT_EQ(diff->fields(1).installed(), "1");
  EXPECT_EQ(diff->fields(1).given(), "0");
  ASSERT_EQ(diff->paths_size(), 1);
  EXPECT_EQ(diff->paths(0).prefix(), "10.0.4.0/22");
  EXPECT_EQ(diff->paths(0).given(), "-");
  EXPECT_EQ(diff->prefixes_same(), 3u);

  // Rollback: unset `to` stays unset; a given one arrives.
  auto rb = client->RollbackArtifact(v1::RollbackArtifactRequest());
  ASSERT_TRUE(rb.ok()) << rb.status();
  ASSERT_TRUE(view_.last_rollback_to.has_value());
  EXPECT_FALSE(view_.last_rollback_to->has_value());
  EXPECT_EQ(rb->artifact().id(), 2u);
  v1::RollbackArtifactRequest to;
  to.set_to(1);
  rb = client->RollbackArtifact(to);
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(*view_.last_rollback_to, std::optional<uint64_t>(1));
  EXPECT_EQ(rb->artifact().id(), 1u);
  rb = client->RollbackArtifact(to);
  ASSERT_FALSE(rb.ok());
  EXPECT_EQ(rb.status().code(), absl::StatusCode::kFailedPrecondition);
}

// A daemon whose DaemonView has no STORM methods yet: the defaults answer UNIMPLEMENTED.
class NoStormView : public DaemonView {
 public:
  StatusView GetStatus() override { return {}; }
  std::vector<PortView> GetPorts() override { return {}; }
  std::vector<PortStatsView> GetPortStats() override { return {}; }
  std::vector<LcoreView> GetLcores() override { return {}; }
  std::vector<DropView> GetDrops() override { return {}; }
  std::string GetConfigYaml() override { return ""; }
  RdmaView GetRdma() override { return {}; }
};

TEST(ApiServerStormTest, DefaultViewMethodsAnswerUnimplemented) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  NoStormView view;
  auto server = ApiServer::Start(dir.Join("h.sock"), &view);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(dir.Join("h.sock"));
  auto get = client->GetStorm();
  ASSERT_FALSE(get.ok());
  EXPECT_EQ(get.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(get.status().message(), "heddled GetStorm: this heddled has no STORM control yet");
  EXPECT_EQ(client->ListQps(20, "backlog").status().code(), absl::StatusCode::kUnimplemented);
  v1::SetStormRequest req;
  req.set_beta(1);
  EXPECT_EQ(client->SetStorm(req).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(client->GetLb().status().code(), absl::StatusCode::kUnimplemented);
  v1::SetLbRequest lb;
  lb.set_pin(true);
  EXPECT_EQ(client->SetLb(lb).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(client->GetArtifact().status().code(), absl::StatusCode::kUnimplemented);
  v1::InstallArtifactRequest install;
  install.set_artifact("x");
  EXPECT_EQ(client->InstallArtifact(install).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ApiServerStormTest, DaemonWithoutTheRpcIsCalledOlder) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  v1::Heddle::Service
      bare;  // every method answers UNIMPLEMENTED with no message, like an old build
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + dir.Join("old.sock"), grpc::InsecureServerCredentials());
  builder.RegisterService(&bare);
  std::unique_ptr<grpc::Server> old = builder.BuildAndStart();
  ASSERT_NE(old, nullptr);
  auto r = Client(dir.Join("old.sock"))->GetStorm();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(r.status().message(),
              HasSubstr("does not support GetStorm; it is older than this heddlectl"));
  old->Shutdown();
}

TEST(ApiServerStormTest, ClientDeadlineIsStillReportedAsATimeout) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  class SlowView : public FakeDaemonView {
   public:
    absl::StatusOr<StormView> GetStorm() override {
      absl::SleepFor(absl::Milliseconds(600));
      return FakeDaemonView::GetStorm();
    }
  };
  SlowView view;
  auto server = ApiServer::Start(dir.Join("h.sock"), &view);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = ApiClient::Create(dir.Join("h.sock"), absl::Milliseconds(200));
  ASSERT_TRUE(client.ok());
  auto r = (*client)->GetStorm();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("did not answer GetStorm within 200ms"));
}

}  // namespace
}  // namespace heddle::api
