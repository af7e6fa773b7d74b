// File: tools/heddlectl/heddlectl_test.cc
//
// Runs the real heddlectl binary as a subprocess against an ApiServer answering from a
// FakeDaemonView on a socket in a temp dir: every `show` object in table and -j form, `set storm`,
// socket selection, and the exit codes for an unreachable daemon and for usage errors.
#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "control/api/heddle.pb.h"
#include "control/api/server.h"
#include "control/api/testing/fake_daemon_view.h"
#include "control/api/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace heddle::api::cli {
namespace {

using ::heddle::api::testing::FakeDaemonView;
using ::heddle::api::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs heddlectl with `args`; HEDDLE_SOCKET is removed from the environment unless `socket_env`
// is given. Output goes through files in `dir` so no pipe can fill up and block the child.
Result RunHeddlectl(const TempDir& dir, const std::vector<std::string>& args,
                    const std::string& socket_env = "") {
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("HEDDLE_SOCKET=", 0) != 0) env_storage.emplace_back(*e);
  }
  if (!socket_env.empty()) env_storage.push_back("HEDDLE_SOCKET=" + socket_env);
  std::vector<char*> envp;
  for (std::string& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> argv_storage = {HEDDLECTL_PATH};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_storage) argv.push_back(s.data());
  argv.push_back(nullptr);

  const std::string out_path = dir.Join("stdout");
  const std::string err_path = dir.Join("stderr");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  Result result;
  pid_t pid;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << rc;
    return result;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

template <typename Message>
Message ParseJson(const std::string& json) {
  Message message;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &message);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return message;
}

class HeddlectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    socket_ = dir_.Join("heddled.sock");
    StartServer();
  }

  void StartServer() {
    auto server = ApiServer::Start(socket_, &view_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // heddlectl -s <socket> args..., expected to succeed.
  Result Ok(std::vector<std::string> args) {
    args.insert(args.begin(), {"-s", socket_});
    Result r = RunHeddlectl(dir_, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    return r;
  }

  // heddlectl -s <socket> args..., expected to fail with `exit_code` and print nothing on stdout.
  Result Fails(int exit_code, std::vector<std::string> args) {
    args.insert(args.begin(), {"-s", socket_});
    Result r = RunHeddlectl(dir_, args);
    EXPECT_EQ(r.exit_code, exit_code) << r.out << r.err;
    EXPECT_EQ(r.out, "");
    return r;
  }

  std::optional<LbUpdate> LastLbUpdate() {
    std::lock_guard<std::mutex> lock(view_.mu);
    return view_.last_lb_update;
  }

  std::optional<ArtifactInstall> LastInstall() {
    std::lock_guard<std::mutex> lock(view_.mu);
    return view_.last_install;
  }

  // Writes `bytes` to a file in the test's directory and returns its path.
  std::string WriteFile(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.Join(name);
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    return path;
  }

  std::optional<StormUpdate> LastUpdate() {
    std::lock_guard<std::mutex> lock(view_.mu);
    return view_.last_update;
  }

  TempDir dir_;
  std::string socket_;
  FakeDaemonView view_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(HeddlectlTest, ShowStatusTable) {
  const Result r = Ok({"show", "status"});
  EXPECT_THAT(r.out, HasSubstr("version:  0.1.0-test\n"));
  EXPECT_THAT(r.out, HasSubstr("pid:      4242\n"));
  EXPECT_THAT(r.out, HasSubstr("uptime:   1d 02:03:04\n"));
  EXPECT_THAT(r.out, HasSubstr("metrics:  http://127.0.0.1:9464/metrics\n"));
  EXPECT_THAT(r.out, HasSubstr("LCORE  ROLE    BUSY%\n"
                               "    0  main        -\n"
                               "    2  worker   25.0\n"));
  EXPECT_THAT(r.out, HasSubstr("PORT     ROLE    DRIVER    DEVICE                 LINK\n"
                               "host0    host    net_pcap  net_pcap0,iface=veth0  up 10G full\n"
                               "uplink0  uplink  mlx5_pci  0000:3b:00.0           down\n"));
}

TEST_F(HeddlectlTest, ShowStatusJson) {
  const Result r = Ok({"-j", "show", "status"});
  // uint64 travels as a JSON string, lowerCamelCase names.
  EXPECT_THAT(r.out, HasSubstr("\"uptimeSeconds\": \"93784\""));
  const auto status = ParseJson<v1::GetStatusResponse>(r.out);
  EXPECT_EQ(status.version(), "0.1.0-test");
  EXPECT_EQ(status.pid(), 4242u);
  ASSERT_EQ(status.ports_size(), 2);
  EXPECT_EQ(status.ports(1).driver(), "mlx5_pci");
  EXPECT_FALSE(status.ports(1).link_up());
  ASSERT_EQ(status.lcores_size(), 2);
  EXPECT_DOUBLE_EQ(status.lcores(1).busy_percent(), 25.0);
}

TEST_F(HeddlectlTest, JsonPrintsFieldsAtTheirDefaultToo) {
  view_.status.metrics_url = "";
  const Result r = Ok({"show", "status", "--json"});  // global flag after the object
  EXPECT_THAT(r.out, HasSubstr("\"metricsUrl\": \"\""));
  EXPECT_THAT(r.out, HasSubstr("\"linkUp\": false"));
  const Result table = Ok({"show", "status"});
  EXPECT_THAT(table.out, HasSubstr("metrics:  off\n"));
}

TEST_F(HeddlectlTest, ShowPortsTable) {
  const Result r = Ok({"show", "ports"});
  EXPECT_EQ(r.out,
            "PORT     ID  ROLE    DRIVER    DEVICE                 LINK          MTU  RXQ  TXQ  MAC"
            "                PEER\n"
            "host0     0  host    net_pcap  net_pcap0,iface=veth0  up 10G full  1500    1    1  "
            "02:00:00:00:00:01  uplink0\n"
            "uplink0   1  uplink  mlx5_pci  0000:3b:00.0           down         9000    2    2  "
            "02:00:00:00:00:02  host0\n");
}

TEST_F(HeddlectlTest, ShowPortsJson) {
  const auto ports = ParseJson<v1::GetPortsResponse>(Ok({"-j", "show", "ports"}).out);
  ASSERT_EQ(ports.ports_size(), 2);
  EXPECT_EQ(ports.ports(0).name(), "host0");
  EXPECT_EQ(ports.ports(0).speed_mbps(), 10000u);
  EXPECT_EQ(ports.ports(1).mtu(), 9000u);
  EXPECT_EQ(ports.ports(1).peer(), "host0");
}

TEST_F(HeddlectlTest, ShowStatsTable) {
  const Result r = Ok({"show", "stats"});
  EXPECT_THAT(r.out,
              HasSubstr("PORT     RX-PKTS  RX-BYTES  TX-PKTS  TX-BYTES  HW-MISSED  HW-RX-ERR  "
                        "HW-TX-ERR  NO-MBUF\n"
                        "host0       1000   1234567      990   1200000          3          1  "
                        "        0        7\n"));
  EXPECT_THAT(r.out, HasSubstr("PORT     rdma-write  send  ack\n"
                               "host0           600   300    0\n"
                               "uplink0           0     0  550\n"));
  EXPECT_THAT(r.out, HasSubstr("LCORE  ROLE    BUSY-LOOPS  IDLE-LOOPS  BUSY%\n"
                               "    0  main             0           0      -\n"
                               "    2  worker         250         750   25.0\n"));
}

TEST_F(HeddlectlTest, ShowStatsJson) {
  const auto stats = ParseJson<v1::GetStatsResponse>(Ok({"-j", "show", "stats"}).out);
  ASSERT_EQ(stats.ports_size(), 2);
  EXPECT_EQ(stats.ports(0).rx_bytes(), 1234567u);
  EXPECT_EQ(stats.ports(0).hw_rx_nombuf(), 7u);
  ASSERT_EQ(stats.ports(1).roce_by_class_size(), 3);
  EXPECT_EQ(stats.ports(1).roce_by_class(2).class_name(), "ack");
  EXPECT_EQ(stats.ports(1).roce_by_class(2).packets(), 550u);
  ASSERT_EQ(stats.lcores_size(), 2);
  EXPECT_EQ(stats.lcores(1).idle_loops(), 750u);
}

TEST_F(HeddlectlTest, ShowDropsHidesZerosUnlessAll) {
  const Result r = Ok({"show", "drops"});
  EXPECT_EQ(r.out,
            "REASON          PACKETS  DESCRIPTION\n"
            "ipv4-truncated        5  IPv4 header shorter than IHL\n"
            "bth-bad-opcode       12  reserved BTH opcode\n"
            "total: 17 packets dropped\n");
  const Result all = Ok({"show", "drops", "--all"});
  EXPECT_THAT(all.out, HasSubstr("no-route              0  no forwarding entry\n"));
}

TEST_F(HeddlectlTest, ShowDropsWhenNothingDropped) {
  for (DropView& d : view_.drops) d.packets = 0;
  EXPECT_EQ(Ok({"show", "drops"}).out, "no packets dropped (--all lists every reason)\n");
}

TEST_F(HeddlectlTest, ShowDropsJson) {
  const auto drops = ParseJson<v1::GetDropsResponse>(Ok({"show", "drops", "-j"}).out);
  ASSERT_EQ(drops.drops_size(), 2);
  EXPECT_EQ(drops.drops(1).reason(), "bth-bad-opcode");
  EXPECT_EQ(drops.total_packets(), 17u);
  const auto all = ParseJson<v1::GetDropsResponse>(Ok({"-j", "show", "drops", "-a"}).out);
  ASSERT_EQ(all.drops_size(), 3);
  EXPECT_EQ(all.drops(1).reason(), "no-route");
  EXPECT_EQ(all.drops(1).packets(), 0u);
}

TEST_F(HeddlectlTest, ShowConfig) {
  EXPECT_EQ(Ok({"show", "config"}).out, view_.config_yaml);
  const auto config = ParseJson<v1::GetConfigResponse>(Ok({"-j", "show", "config"}).out);
  EXPECT_EQ(config.yaml(), view_.config_yaml);
}

TEST_F(HeddlectlTest, ShowRdmaTable) {
  const Result r = Ok({"show", "rdma"});
  EXPECT_THAT(r.out, HasSubstr("DEVICE  NODE-GUID            FW          PORTS\n"
                               "mlx5_0  0c42:a103:0012:3456  22.36.1010      1\n"));
  EXPECT_THAT(r.out,
              HasSubstr("DEVICE  PORT  STATE    MTU  LINK-LAYER  GID-INDEX  GID\n"
                        "mlx5_0     1  active  4096  Ethernet            0  fe80::42:aff:fe00:1\n"
                        "mlx5_0     1  active  4096  Ethernet            3  ::ffff:10.0.0.1\n"));
}

TEST_F(HeddlectlTest, ShowRdmaWithoutDevices) {
  view_.rdma = RdmaView{.devices = {}, .note = "no RDMA device found"};
  EXPECT_EQ(Ok({"show", "rdma"}).out, "no RDMA device found\n");
  const auto rdma = ParseJson<v1::GetRdmaResponse>(Ok({"-j", "show", "rdma"}).out);
  EXPECT_EQ(rdma.devices_size(), 0);
  EXPECT_EQ(rdma.note(), "no RDMA device found");
}

TEST_F(HeddlectlTest, ShowRdmaJson) {
  const auto rdma = ParseJson<v1::GetRdmaResponse>(Ok({"-j", "show", "rdma"}).out);
  ASSERT_EQ(rdma.devices_size(), 1);
  ASSERT_EQ(rdma.devices(0).ports_size(), 1);
  EXPECT_EQ(rdma.devices(0).ports(0).active_mtu(), 4096u);
  ASSERT_EQ(rdma.devices(0).ports(0).gids_size(), 2);
  EXPECT_EQ(rdma.devices(0).ports(0).gids(0).gid(), "fe80::42:aff:fe00:1");
}

TEST_F(HeddlectlTest, SocketFromEnvironmentAndFlagWins) {
  Result r = RunHeddlectl(dir_, {"-j", "show", "config"}, /*socket_env=*/socket_);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"yaml\""));

  const std::string nowhere = dir_.Join("nowhere.sock");
  r = RunHeddlectl(dir_, {"-s", nowhere, "show", "config"}, /*socket_env=*/socket_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot reach heddled at " + nowhere));
}

TEST_F(HeddlectlTest, UnreachableDaemonExitsOneWithHelp) {
  server_->Shutdown();
  const Result r = RunHeddlectl(dir_, {"-s", socket_, "--timeout", "2000", "show", "status"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("heddlectl: cannot reach heddled at " + socket_ +
                               ": no such socket; is heddled running? (-s to choose another "
                               "socket)"));
}

TEST_F(HeddlectlTest, UsageErrorsExitTwo) {
  Result r = RunHeddlectl(dir_, {"-s", socket_, "show", "bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown object 'bogus' for 'show'; expected one of: status"));
  EXPECT_EQ(r.out, "");

  r = RunHeddlectl(dir_, {"-s", socket_, "frobnicate", "status"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'frobnicate'"));

  r = RunHeddlectl(dir_, {"-s", socket_});
  EXPECT_EQ(r.exit_code, 2);

  r = RunHeddlectl(dir_, {"-s", socket_, "show", "status", "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2);

  r = RunHeddlectl(dir_, {"-s", socket_, "--timeout", "0", "show", "status"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(HeddlectlTest, HelpAndVersionExitZero) {
  Result r = RunHeddlectl(dir_, {"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("HEDDLE_SOCKET"));
  EXPECT_THAT(r.out, HasSubstr("status, ports, stats, drops, config, rdma, storm, qp"));
  r = RunHeddlectl(dir_, {"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("heddlectl "));
}

TEST_F(HeddlectlTest, DaemonErrorExitsOne) {
  // A server that is up but fails the call: the message is the daemon's, the exit code 1.
  class Broken : public FakeDaemonView {
    std::string GetConfigYaml() override { throw std::runtime_error("config unavailable"); }
  };
  server_->Shutdown();
  Broken broken;
  auto server = ApiServer::Start(socket_, &broken);
  ASSERT_TRUE(server.ok()) << server.status();
  const Result r = RunHeddlectl(dir_, {"-s", socket_, "show", "config"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("config unavailable"));
  EXPECT_THAT(r.err, Not(HasSubstr("cannot reach")));
}

// ---- STORM ----

TEST_F(HeddlectlTest, ShowStormTable) {
  const Result r = Ok({"show", "storm"});
  EXPECT_THAT(r.out, HasSubstr("mode:           per-message\n"
                               "levels:         4 (level 3 served first)\n"
                               "cutoffs:        4 KiB, 64 KiB, 1 MiB\n"
                               "control level:  3\n"
                               "beta:           1.5\n"
                               "unknown size:   lowest (level 0)\n"
                               "backlog:        egress, capped at 16 MiB\n"
                               "host shim:      2 tables, 48 QPs, 777 backlog hits\n"
                               "generation:     7\n"));
  EXPECT_THAT(r.out,
              HasSubstr("LEVEL  DSCP   PCP  REMAINING     CONTROL  TAGGED-PKTS  TAGGED-BYTES  "
                        "EGRESS-TX  EGRESS-DROPS  QUEUED\n"
                        "    3    26  keep  ≤ 4 KiB       yes             1003       2000003  "
                        "      903             0       0\n"
                        "    2    18     5  4 KiB–64 KiB                  1002       2000002  "
                        "      902             0       0\n"
                        "    1    10  keep  64 KiB–1 MiB                  1001       2000001  "
                        "      901             0       0\n"
                        "    0     0  keep  > 1 MiB                       1000       2000000  "
                        "      900            17       5\n"));
  EXPECT_THAT(r.out,
              HasSubstr("QPS-LIVE  CAPACITY  TABLE-FULL  EVICTED-IDLE  EVICTED-ON-INSERT\n"
                        "     321    131072           2            40                  3\n"));
  EXPECT_THAT(r.out, HasSubstr("STARTED  COMPLETED  ORPHANS  ABANDONED  DUPLICATES  PSN-JUMPS  "
                               "BOGUS-LENGTH  OVERRUN\n"
                               "   5000       4990        4          1          12          6  "
                               "           0        2\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("refused")));
  EXPECT_THAT(r.out, Not(HasSubstr("Responses joined")));  // egress source: no join
  // READ responses the host sent as responder: tracked without the join too.
  EXPECT_THAT(r.out, HasSubstr("READ responses sent as responder\n"
                               "SIZED  UNKNOWN  ORPHANS  LATE  DUPLICATES  PSN-JUMPS  ABANDONED  "
                               "OVERRUN  MALFORMED  WINDOW-GUARDED\n"
                               "   60        7        2     3          11          4          1  "
                               "      0          5              13\n"));
  EXPECT_THAT(r.out, HasSubstr("READ stream table, all workers\n"
                               "STREAMS-LIVE  CAPACITY  TABLE-FULL  EVICTED\n"
                               "           9     32768           6        8\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("READ requests joined")));
  // How each port serves the levels: DCB with its level -> TC map, or software (and why).
  EXPECT_THAT(r.out,
              HasSubstr("Egress\n"
                        "PORT     EGRESS    CONFIGURED  TCS  LEVEL->TC (TX QUEUES)\n"
                        "host0    software  software      -\n"
                        "uplink0  dcb       dcb           4  3->3 (112-113), 2->2 (96-97), "
                        "1->1 (64-65), 0->0 (0-1)\n"
                        "uplink1  software  auto          -  fell back: port uplink1: driver "
                        "net_ring has no DCB\n"));
}

TEST_F(HeddlectlTest, ShowStormAutoCutoffsAndHostErrors) {
  view_.storm.auto_cutoffs = true;
  view_.storm.cutoffs = {6144, 131072, 3145728};
  view_.storm.auto_publications = 12;
  view_.storm.backlog_source = "host";
  view_.storm.host_errors = {"/dev/shm/heddle-verbs-77: layout version 9, expected 1",
                             "/dev/shm/heddle-verbs-78: not a heddle table"};
  const Result r = Ok({"show", "storm"});
  EXPECT_THAT(r.out, HasSubstr("cutoffs:        auto: 6 KiB, 128 KiB, 3 MiB (every 1000 ms, 12 "
                               "published)\n"));
  EXPECT_THAT(r.out, HasSubstr("backlog:        host, capped at 16 MiB\n"));
  EXPECT_THAT(r.out, HasSubstr("host shim:      2 tables, 48 QPs, 777 backlog hits, 46 pairs (1 "
                               "ambiguous)\n"));
  EXPECT_THAT(r.out, HasSubstr("Responses joined to their requests\n"
                               "LOCAL  REMOTE  NO-PAIR  NO-ENTRY  RING-FULL  MALFORMED  ADVANCED  "
                               "OLD  AHEAD  FABRIC-GUARDED\n"
                               "  900     300       12         5          0          1      1100  "
                               " 95      5              42\n"));
  EXPECT_THAT(r.out, HasSubstr("READ requests joined to their responses\n"
                               "LOCAL  REMOTE  NO-PAIR  NO-ENTRY  RING-FULL  MALFORMED  "
                               "PENDING-FULL  STALE  TOO-LATE\n"
                               "   40      23        2        21          0          1  "
                               "          14     15        16\n"));
  EXPECT_THAT(r.out, HasSubstr("host shim tables refused:\n"
                               "  /dev/shm/heddle-verbs-77: layout version 9, expected 1\n"
                               "  /dev/shm/heddle-verbs-78: not a heddle table\n"));
}

TEST_F(HeddlectlTest, ShowStormJson) {
  const Result r = Ok({"-j", "show", "storm"});
  for (const char* key : {"\"perLevel\"", "\"rMax\": \"4096\"", "\"egressQueueDepth\"",
                          "\"qpTable\"", "\"evictedOnInsert\": \"3\"", "\"controlLevel\": 3",
                          "\"backlogSource\": \"egress\"", "\"psnJumps\": \"6\""}) {
    EXPECT_THAT(r.out, HasSubstr(key));
  }
  const auto storm = ParseJson<v1::GetStormResponse>(r.out).storm();
  EXPECT_EQ(storm.levels(), 4u);
  EXPECT_THAT(storm.cutoffs(), ElementsAre(4096u, 65536u, 1048576u));
  ASSERT_EQ(storm.per_level_size(), 4);
  EXPECT_EQ(storm.per_level(3).egress_drops(), 17u);
  EXPECT_EQ(storm.per_level(1).pcp(), 5);
  EXPECT_EQ(storm.tracker().requests_completed(), 4990u);
  EXPECT_EQ(storm.host().backlog_hits(), 777u);
  EXPECT_EQ(storm.join().joined_remote(), 300u);
  EXPECT_EQ(storm.join().fabric_guarded(), 42u);
  EXPECT_EQ(storm.read_responses().sized(), 60u);
  EXPECT_EQ(storm.read_responses().requests_too_late(), 16u);
  EXPECT_THAT(r.out, HasSubstr("\"readResponses\""));
  EXPECT_THAT(r.out, HasSubstr("\"windowGuarded\": \"13\""));
  ASSERT_EQ(storm.egress_ports_size(), 3);
  EXPECT_EQ(storm.egress_ports(1).mode(), "dcb");
  EXPECT_EQ(storm.egress_ports(1).levels(2).first_queue(), 96u);
  EXPECT_EQ(storm.egress_ports(2).fallback(), "port uplink1: driver net_ring has no DCB");
}

TEST_F(HeddlectlTest, ShowStormWhenDisabledIsTheDaemonsErrorAndExitsOne) {
  view_.storm_error =
      absl::FailedPreconditionError("storm is disabled; set storm.enabled: true and restart");
  const Result r = Fails(1, {"show", "storm"});
  EXPECT_EQ(r.err,
            "heddlectl: heddled GetStorm: storm is disabled; set storm.enabled: true and "
            "restart\n");
}

TEST_F(HeddlectlTest, ShowQpTableDefaultsToTop20ByBacklog) {
  const Result r = Ok({"show", "qp"});
  EXPECT_EQ(view_.last_top, 20u);
  EXPECT_EQ(view_.last_sort, "backlog");
  EXPECT_EQ(r.out,
            "WORKER       QPN  DIR       KIND   LEVEL  DST        SIZE   SENT  REMAINING  BACKLOG  "
            "HELD  HOST-BACKLOG  COMPLETED  ACKED  UNACKED  IDLE-MS\n"
            "     1        42  request   send       3  10.0.0.3      ?   2048          ?  1048576  "
            "   0       1048576          9      -        -        0\n"
            "     0        17  request   write      2  10.0.0.2  65536  16384      49152     8192  "
            "   2             0         31   1000        4        3\n"
            "     0  11259375  response  -          0  ipv6          -      -          -        0  "
            "   0             0          0      -        -     9000\n");
}

TEST_F(HeddlectlTest, ShowQpTopAndSort) {
  Result r = Ok({"show", "qp", "--top", "1", "--sort", "idle"});
  EXPECT_EQ(view_.last_top, 1u);
  EXPECT_EQ(view_.last_sort, "idle");
  EXPECT_THAT(r.out, HasSubstr("11259375"));
  EXPECT_THAT(r.out, Not(HasSubstr("10.0.0.2")));
  r = Ok({"show", "qp", "--sort", "remaining", "--top", "2"});
  EXPECT_EQ(view_.last_sort, "remaining");
  EXPECT_THAT(r.out, HasSubstr("10.0.0.2"));
  EXPECT_THAT(r.out, Not(HasSubstr("ipv6")));
}

TEST_F(HeddlectlTest, ShowQpJsonAndEmpty) {
  const auto qps = ParseJson<v1::ListQpsResponse>(Ok({"-j", "show", "qp", "--top", "2"}).out);
  EXPECT_EQ(qps.sort(), "backlog");
  EXPECT_EQ(qps.top(), 2u);
  ASSERT_EQ(qps.qps_size(), 2);
  EXPECT_EQ(qps.qps(0).qpn(), 42u);
  EXPECT_EQ(qps.qps(0).host_backlog(), 1048576u);
  EXPECT_FALSE(qps.qps(0).size_known());
  EXPECT_EQ(qps.qps(1).remaining(), 49152u);

  view_.qps.clear();
  EXPECT_EQ(Ok({"show", "qp"}).out, "no QPs tracked\n");
}

TEST_F(HeddlectlTest, ShowQpBadArgumentsAreUsageErrors) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"show", "qp", "--top", "0"},
                                             {"show", "qp", "--top", "1001"},
                                             {"show", "qp", "--top", "many"},
                                             {"show", "qp", "--sort", "size"}}) {
    const Result r = Fails(2, args);
    EXPECT_THAT(r.err, Not(HasSubstr("heddled"))) << args.back();
  }
  EXPECT_EQ(view_.last_top, 0u);  // never asked
}

TEST_F(HeddlectlTest, SetStormLevelsWithEverythingIsOneUpdate) {
  const Result r = Ok({"set", "storm", "levels", "3", "--cutoffs", "8K,256KiB", "--dscp", "8,16,46",
                       "--pcp", "-1,3,6", "--control-level", "2"});
  const std::optional<StormUpdate> u = LastUpdate();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->levels, std::optional<uint32_t>(3));
  ASSERT_TRUE(u->cutoffs.has_value());
  EXPECT_THAT(*u->cutoffs, ElementsAre(8192u, 262144u));
  ASSERT_TRUE(u->dscp.has_value());
  EXPECT_THAT(*u->dscp, ElementsAre(8u, 16u, 46u));
  ASSERT_TRUE(u->pcp.has_value());
  EXPECT_THAT(*u->pcp, ElementsAre(-1, 3, 6));
  EXPECT_EQ(u->control_level, std::optional<uint32_t>(2));
  EXPECT_FALSE(u->mode.has_value());
  EXPECT_FALSE(u->beta.has_value());
  EXPECT_FALSE(u->cutoffs_auto);
  // The answer is the state in force, shown as `show storm` shows it.
  EXPECT_THAT(r.out, HasSubstr("levels:         3 (level 2 served first)\n"
                               "cutoffs:        8 KiB, 256 KiB\n"
                               "control level:  2\n"));
  EXPECT_THAT(r.out, HasSubstr("generation:     8\n"));
  EXPECT_THAT(r.out, HasSubstr("    2    46     6  ≤ 8 KiB        yes"));
  EXPECT_THAT(r.out, HasSubstr("    1    16     3  8 KiB–256 KiB"));
  EXPECT_THAT(r.out, HasSubstr("    0     8  keep  > 256 KiB"));
  EXPECT_THAT(r.out, Not(HasSubstr("QPS-LIVE")));
}

TEST_F(HeddlectlTest, SetStormEachSettingAloneLeavesTheRestUnset) {
  Ok({"set", "storm", "cutoffs", "4096,64K,1MiB"});
  std::optional<StormUpdate> u = LastUpdate();
  ASSERT_TRUE(u.has_value() && u->cutoffs.has_value());
  EXPECT_THAT(*u->cutoffs, ElementsAre(4096u, 65536u, 1048576u));
  EXPECT_FALSE(u->levels.has_value());
  EXPECT_FALSE(u->cutoffs_auto);

  Ok({"set", "storm", "cutoffs", "auto"});
  u = LastUpdate();
  EXPECT_TRUE(u->cutoffs_auto);
  EXPECT_FALSE(u->cutoffs.has_value());

  Ok({"set", "storm", "mode", "per-packet"});
  u = LastUpdate();
  EXPECT_EQ(u->mode, std::optional<std::string>("per-packet"));
  EXPECT_FALSE(u->cutoffs_auto);

  Ok({"set", "storm", "dscp", "0,8,16,46"});
  u = LastUpdate();
  ASSERT_TRUE(u->dscp.has_value());
  EXPECT_THAT(*u->dscp, ElementsAre(0u, 8u, 16u, 46u));
  EXPECT_FALSE(u->mode.has_value());

  Ok({"set", "storm", "pcp", "-1,keep,3,7"});
  u = LastUpdate();
  ASSERT_TRUE(u->pcp.has_value());
  EXPECT_THAT(*u->pcp, ElementsAre(-1, -1, 3, 7));
  EXPECT_FALSE(u->dscp.has_value());

  Ok({"set", "storm", "control-level", "0"});
  u = LastUpdate();
  EXPECT_EQ(u->control_level, std::optional<uint32_t>(0));  // zero is a value, not "unset"
  EXPECT_FALSE(u->pcp.has_value());
  EXPECT_FALSE(u->beta.has_value());

  const Result r = Ok({"set", "storm", "beta", "0"});
  u = LastUpdate();
  EXPECT_EQ(u->beta, std::optional<double>(0));
  EXPECT_FALSE(u->control_level.has_value());
  EXPECT_THAT(r.out, HasSubstr("beta:           0\n"));

  // The level it gives is shown beside the size: 256 KiB is level 1 under 4K/64K/1M. The mode
  // is per-packet since above, which demotes from a floor instead: per-message only.
  const Result sized = Ok({"set", "storm", "unknown-size", "256K"});
  u = LastUpdate();
  EXPECT_EQ(u->unknown_size, std::optional<uint32_t>(262144));
  EXPECT_FALSE(u->beta.has_value());
  EXPECT_THAT(sized.out, HasSubstr("unknown size:   256 KiB (level 1 in per-message mode)\n"));
  const Result per_message = Ok({"set", "storm", "mode", "per-message"});
  EXPECT_FALSE(LastUpdate()->unknown_size.has_value());
  EXPECT_THAT(per_message.out, HasSubstr("unknown size:   256 KiB (level 1)\n"));
  const Result lowest = Ok({"set", "storm", "unknown-size", "lowest"});
  EXPECT_EQ(LastUpdate()->unknown_size, std::optional<uint32_t>(4294967295u));
  EXPECT_THAT(lowest.out, HasSubstr("unknown size:   lowest (level 0)\n"));
}

TEST_F(HeddlectlTest, SetStormOneLevelSendsAnEmptyCutoffList) {
  const Result r = Ok({"set", "storm", "levels", "1", "--dscp", "0", "--pcp", "keep"});
  const std::optional<StormUpdate> u = LastUpdate();
  ASSERT_TRUE(u.has_value());
  ASSERT_TRUE(u->cutoffs.has_value());
  EXPECT_TRUE(u->cutoffs->empty());
  EXPECT_THAT(r.out, HasSubstr("levels:         1\n"
                               "cutoffs:        none (one level)\n"));
  EXPECT_THAT(r.out, HasSubstr("    0     0  keep  any"));
}

TEST_F(HeddlectlTest, SetStormJson) {
  const Result r = Ok({"set", "storm", "mode", "per-packet", "-j"});
  EXPECT_THAT(r.out, HasSubstr("\"generation\": \"8\""));
  const auto set = ParseJson<v1::SetStormResponse>(r.out);
  EXPECT_EQ(set.storm().mode(), "per-packet");
  EXPECT_EQ(set.storm().generation(), 8u);
}

TEST_F(HeddlectlTest, SetStormRefusedByTheDaemonExitsOneWithItsMessage) {
  Result r = Fails(1, {"set", "storm", "levels", "5"});
  EXPECT_EQ(r.err, "heddlectl: heddled SetStorm: storm.cutoffs: 3 values for 5 levels; give 4\n");

  view_.set_storm_error =
      absl::DeadlineExceededError("new tables not published within 2s: worker 3 is stuck");
  r = Fails(1, {"set", "storm", "beta", "2"});
  EXPECT_EQ(r.err,
            "heddlectl: heddled SetStorm: new tables not published within 2s: worker 3 is "
            "stuck\n");
}

TEST_F(HeddlectlTest, SetStormBadArgumentsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"set", "storm"},
       "missing subcommand for 'set storm'; expected one of: levels, cutoffs, "
       "mode, dscp, pcp, control-level, beta, unknown-size"},
      {{"set", "storm", "bogus"}, "unknown subcommand 'bogus' for 'set storm'"},
      {{"set", "storm", "cutoffs", "4KB,64K,1M"}, "ambiguous: write 4K or 4KiB"},
      {{"set", "storm", "cutoffs", "4X"}, "size \"4X\""},
      {{"set", "storm", "cutoffs"}, "sizes is required"},
      {{"set", "storm", "levels", "4", "--cutoffs", "1,x"}, "size \"x\""},
      {{"set", "storm", "levels", "0"}, "\"0\" is not a number of levels (1 or more)"},
      {{"set", "storm", "levels", "four"}, "\"four\" is not a number of levels"},
      {{"set", "storm", "mode", "fast"}, "fast"},
      {{"set", "storm", "dscp", "0,10,18,64"},
       "dscp \"64\": each value must be an integer in 0..63"},
      {{"set", "storm", "pcp", "8"}, "pcp \"8\""},
      {{"set", "storm", "beta", "-1"}, "\"-1\" is not a finite number >= 0"},
      {{"set", "storm", "beta", "nan"}, "\"nan\" is not a finite number >= 0"},
      {{"set", "storm", "control-level", "-2"}, "level = -2"},
      {{"set", "storm", "unknown-size", "0"}, "\"0\" is out of range; use 1 to 4294967295"},
      {{"set", "storm", "unknown-size", "4G"}, "\"4G\" is out of range"},
      {{"set", "storm", "unknown-size", "highest"}, "size \"highest\""},
      {{"set", "storm", "unknown-size"}, "size is required"},
  };
  for (const Case& c : cases) {
    const Result r = Fails(2, c.args);
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args.back();
  }
  EXPECT_FALSE(LastUpdate().has_value());  // nothing reached the daemon
}

TEST_F(HeddlectlTest, SetHelpListsTheSettings) {
  const Result r = RunHeddlectl(dir_, {"set", "storm", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* setting :
       {"levels", "cutoffs", "mode", "dscp", "pcp", "control-level", "beta"}) {
    EXPECT_THAT(r.out, HasSubstr(setting));
  }
}

TEST_F(HeddlectlTest, ShowLbTable) {
  const Result r = Ok({"show", "lb"});
  EXPECT_THAT(r.out, HasSubstr("balancer:       reps\n"));
  EXPECT_THAT(r.out, HasSubstr("pin threshold:  97.7 KiB (auto: one bandwidth-delay product)\n"));
  EXPECT_THAT(r.out, HasSubstr("feedback join:  off (no host index: REPS explores)\n"));
  EXPECT_THAT(r.out, HasSubstr("flows:          12 live of 65536 entries\n"));
  EXPECT_THAT(r.out, HasSubstr("pinned     900  90.0 %     4000   4200000   6.2 %"));
  EXPECT_THAT(r.out, HasSubstr("sprayed    100  10.0 %    60000  63000000  93.8 %"));
  EXPECT_THAT(r.out, HasSubstr("path set 0 (default): 4 paths, Jain's index 0.9423\n"));
  EXPECT_THAT(r.out, HasSubstr("   3  uplink1   0xc001    10000  10000000  14.3 %"));
  EXPECT_THAT(r.out, HasSubstr("join-no-index"));
}

TEST_F(HeddlectlTest, ShowLbJsonAndDisabled) {
  const v1::GetLbResponse r = ParseJson<v1::GetLbResponse>(Ok({"show", "lb", "-j"}).out);
  EXPECT_EQ(r.lb().balancer(), "reps");
  EXPECT_EQ(r.lb().sets(0).paths_size(), 4);
  view_.lb_error = absl::FailedPreconditionError("lb is not enabled; set lb.enabled: true");
  const Result off = Fails(1, {"show", "lb"});
  EXPECT_EQ(off.err, "heddlectl: heddled GetLb: lb is not enabled; set lb.enabled: true\n");
}

TEST_F(HeddlectlTest, SetLbEachSettingIsOneUpdate) {
  Result r = Ok({"set", "lb", "balancer", "adaptive"});
  std::optional<LbUpdate> u = LastLbUpdate();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->balancer, std::optional<std::string>("adaptive"));
  EXPECT_FALSE(u->threshold_bytes.has_value());
  EXPECT_FALSE(u->pin.has_value());
  EXPECT_THAT(r.out, HasSubstr("balancer:       adaptive\n"));
  EXPECT_THAT(r.out, HasSubstr("generation:     4\n"));

  r = Ok({"set", "lb", "pin-threshold", "64K"});
  u = LastLbUpdate();
  EXPECT_EQ(u->threshold_bytes, std::optional<uint64_t>(65536));
  EXPECT_FALSE(u->threshold_auto);
  EXPECT_FALSE(u->balancer.has_value());
  EXPECT_THAT(r.out, HasSubstr("pin threshold:  64 KiB\n"));

  Ok({"set", "lb", "pin-threshold", "auto"});
  u = LastLbUpdate();
  EXPECT_TRUE(u->threshold_auto);
  EXPECT_FALSE(u->threshold_bytes.has_value());

  Ok({"set", "lb", "pin-policy", "least-loaded"});
  EXPECT_EQ(LastLbUpdate()->pin_policy, std::optional<std::string>("least-loaded"));

  r = Ok({"set", "lb", "pin", "off", "-j"});
  EXPECT_EQ(LastLbUpdate()->pin, std::optional<bool>(false));
  EXPECT_FALSE(ParseJson<v1::SetLbResponse>(r.out).lb().pin());
}

TEST_F(HeddlectlTest, SetLbBadArgumentsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"set", "lb"}, "expected one of: balancer, pin-threshold, pin-policy, pin"},
      {{"set", "lb", "balancer", "spray"}, "spray"},
      {{"set", "lb", "pin-threshold", "4KB"}, "ambiguous: write 4K or 4KiB"},
      {{"set", "lb", "pin-threshold", "0"}, "use pin off"},
      {{"set", "lb", "pin-policy", "random"}, "random"},
      {{"set", "lb", "pin", "maybe"}, "maybe"},
  };
  for (const Case& c : cases) {
    const Result r = Fails(2, c.args);
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args.back();
  }
  EXPECT_FALSE(LastLbUpdate().has_value());
}

TEST_F(HeddlectlTest, ArtifactInstallSendsTheFileBytes) {
  std::string bytes = "HDLNUWA1";
  bytes += std::string("\0\x01\xff\n binary", 12);
  const std::string file = WriteFile("b.nuwa", bytes);
  Result r = Ok({"artifact", "install", file});
  std::optional<ArtifactInstall> in = LastInstall();
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->bytes, bytes);
  EXPECT_EQ(in->source, file);
  EXPECT_FALSE(in->dry_run);
  EXPECT_THAT(r.out, HasSubstr("installed " + file + " as artifact #3\n"));
  EXPECT_THAT(r.out, HasSubstr("fabric:      pod-a (digest 0123456789abcdef)\n"));
  EXPECT_THAT(r.out, HasSubstr("node:        host[3] (10.0.0.3)\n"));
  EXPECT_THAT(r.out, HasSubstr("path sets:   3 over 4 prefix(es); 1 prefix(es) without a path\n"));

  r = Ok({"artifact", "install", file, "--dry-run"});
  EXPECT_TRUE(LastInstall()->dry_run);
  EXPECT_THAT(r.out, HasSubstr("dry run: " + file + " passes every check; not installed\n"));
  EXPECT_THAT(r.out, HasSubstr("artifact:    (not installed)\n"));

  const auto j =
      ParseJson<v1::InstallArtifactResponse>(Ok({"-j", "artifact", "install", file}).out);
  EXPECT_EQ(j.artifact().id(), 4u);
  EXPECT_EQ(j.artifact().bytes(), bytes.size());
}

TEST_F(HeddlectlTest, ArtifactInstallRefusedKeepsTheDaemonsReason) {
  const Result r = Fails(1, {"artifact", "install", WriteFile("bad.nuwa", "bad artifact")});
  EXPECT_THAT(r.err, HasSubstr("heddled InstallArtifact: artifact "));
  EXPECT_THAT(r.err, HasSubstr("checksum mismatch"));
  EXPECT_EQ(view_.artifact.rejected, 2u);
  // A missing file never reaches the daemon.
  view_.last_install.reset();
  const Result missing = Fails(1, {"artifact", "install", dir_.Join("nope.nuwa")});
  EXPECT_THAT(missing.err, HasSubstr("cannot read " + dir_.Join("nope.nuwa")));
  EXPECT_FALSE(LastInstall().has_value());
  Fails(2, {"artifact", "install"});
  {
    std::lock_guard<std::mutex> lock(view_.mu);
    view_.artifact_error = absl::FailedPreconditionError("fwd is not configured");
  }
  EXPECT_THAT(Fails(1, {"artifact", "show"}).err,
              HasSubstr("heddled GetArtifact: fwd is not configured"));
}

TEST_F(HeddlectlTest, ArtifactShowTableAndJson) {
  const Result r = Ok({"artifact", "show"});
  EXPECT_THAT(r.out, HasSubstr("node:          host[3]\n"));
  EXPECT_THAT(r.out, HasSubstr("publications:  2 (2 install(s), 0 rollback(s), 1 refused)\n"));
  EXPECT_THAT(r.out, HasSubstr("artifact:    #2\n"));
  EXPECT_THAT(r.out, HasSubstr("installed:   2023-11-14 22:13:20 UTC\n"));
  EXPECT_THAT(r.out, HasSubstr("format:      version 1, 1432 bytes, checksum deadbeef\n"));
  EXPECT_THAT(r.out, HasSubstr("exceptions:  2 node mask(s), 1 override(s)\n"));
  EXPECT_THAT(r.out, HasSubstr("ID  INSTALLED                SOURCE                       FABRIC  "
                               "CHECKSUM  PATH SETS\n"
                               " 1  2023-11-14 22:13:20 UTC  /etc/heddle/pod-a-host.nuwa  pod-a   "
                               "01020304          3\n"));
  const auto j = ParseJson<v1::GetArtifactResponse>(Ok({"artifact", "show", "-j"}).out);
  EXPECT_EQ(j.installed().checksum(), 0xdeadbeefu);
  ASSERT_EQ(j.history_size(), 1);
  EXPECT_EQ(j.history(0).id(), 1u);
  {
    std::lock_guard<std::mutex> lock(view_.mu);
    view_.artifact.installed.reset();
  }
  EXPECT_THAT(Ok({"artifact", "show"}).out, HasSubstr("no artifact installed"));
}

TEST_F(HeddlectlTest, ArtifactDiffListsFieldsAndPathSets) {
  const std::string file = WriteFile("c.nuwa", "other artifact");
  const Result r = Ok({"artifact", "diff", file});
  EXPECT_EQ(view_.last_diff_bytes, std::optional<std::string>("other artifact"));
  EXPECT_THAT(r.out, HasSubstr("installed #2 (pod-a-host.nuwa) vs " + file + "\n"));
  EXPECT_THAT(r.out, HasSubstr("FIELD      INSTALLED  GIVEN\n"
                               "checksum   deadbeef   01020304\n"
                               "overrides  1          0\n"));
  EXPECT_THAT(r.out, HasSubstr("path sets: 1 prefix(es) differ, 3 the same\n"
                               "  10.0.4.0/22\n"
                               "    - 2 paths: uplink1 0xc000 @02:01:01:00:00:01\n"
                               "    + -\n"));
  const auto j = ParseJson<v1::DiffArtifactResponse>(Ok({"-j", "artifact", "diff", file}).out);
  EXPECT_EQ(j.fields_size(), 2);
  {
    std::lock_guard<std::mutex> lock(view_.mu);
    view_.diff.fields.clear();
    view_.diff.paths.clear();
  }
  EXPECT_THAT(Ok({"artifact", "diff", file}).out,
              HasSubstr("no difference (3 prefix(es) with the same path set)"));
}

TEST_F(HeddlectlTest, ArtifactRollbackToThePreviousOrAnId) {
  Ok({"artifact", "install", WriteFile("b.nuwa", "b")});  // #3 over #2 over #1
  Result r = Ok({"artifact", "rollback"});
  EXPECT_THAT(r.out, HasSubstr("rolled back to artifact #2\n"));
  ASSERT_TRUE(view_.last_rollback_to.has_value());
  EXPECT_FALSE(view_.last_rollback_to->has_value());
  r = Ok({"artifact", "rollback", "--to", "1", "-j"});
  EXPECT_EQ(*view_.last_rollback_to, std::optional<uint64_t>(1));
  EXPECT_EQ(ParseJson<v1::RollbackArtifactResponse>(r.out).artifact().id(), 1u);
  EXPECT_THAT(Fails(1, {"artifact", "rollback"}).err, HasSubstr("no earlier artifact"));
  Fails(2, {"artifact", "rollback", "--to", "x"});
  Fails(2, {"artifact", "rollback", "--to", "0"});
  EXPECT_THAT(Fails(2, {"artifact", "frobnicate"}).err,
              HasSubstr("expected one of: install, show, diff, rollback"));
}

}  // namespace
}  // namespace heddle::api::cli
