// File: control/config/config_test.cc
//
// The schema end to end: a full config, defaults, every validation rule (checked by the key path
// that opens its message line), YAML positions, unknown keys, type errors, the ToYaml round
// trip, and every shipped example under deploy/examples.

#include "control/config/config.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

constexpr char kFull[] = R"yaml(
lcores: { main: 0, workers: [1, 2] }
memory: { no_huge: true, size_mb: 512, file_prefix: "" }
mempool: { mbufs: 16383, cache: 256, data_room: 2176 }
ports:
  - name: host0
    role: host
    vdev: "net_pcap0,rx_pcap=/tmp/in.pcap,tx_pcap=/tmp/out.pcap"
    rx_queues: 2
    rx_desc: 512
    tx_desc: 2048
    mtu: 1500
    promiscuous: false
    peer: uplink0
  - name: uplink0
    role: uplink
    pci: "3B:00.1"
    devargs: "dv_flow_en=1"
dataplane: { burst_size: 64, verify_icrc: true }
storm:
  enabled: true
  levels: 3
  cutoffs: [2800, 15000]
  mode: per-packet
  dscp: [8, 16, 46]
  pcp: [-1, 3, 5]
  control_level: 1
  beta: 0.5
  backlog_max: 1048576
  unknown_size: 262144
  qp_capacity: 4096
  qp_idle_ms: 2000
  mtu: 1024
lb:
  enabled: true
  balancer: flowlet
  entropy: flow-label
  seed: 7
  flowlet_gap_ns: 20000
  reps_cache_size: 4
  flow_capacity: 4096
  flow_idle_ms: 5
  link_gbps: 400
  rtt_ns: 4000
  pin: { enabled: true, threshold_bytes: 65536, policy: least-loaded, flow: qp,
         crossing: spray-rest }
  paths:
    default: { ports: [uplink0], entropies: 4, first_entropy: 0x100, next_hop_mac: "02:00:00:00:00:09" }
    prefixes:
      - { prefix: 10.1.0.0/16, values: [0x10, 0x2000, 77] }
metrics: { enabled: false, listen: "[::1]:9464" }
control: { socket: /run/heddle/test.sock }
log: { level: debug }
eal: { args: ["--log-level=lib.eal:debug"] }
)yaml";

// The smallest valid config: everything but the ports is a default.
constexpr char kMinimal[] = R"yaml(
ports:
  - { name: host0, role: host, vdev: net_ring0 }
  - { name: uplink0, role: uplink, vdev: net_ring1 }
)yaml";

std::vector<std::string> Lines(const absl::Status& s) {
  return absl::StrSplit(std::string(s.message()), '\n');
}

// Whether a message line starts with `path: ` and contains `text`.
bool HasError(const absl::Status& s, absl::string_view path, absl::string_view text = "") {
  std::string prefix = std::string(path) + ": ";
  for (const std::string& line : Lines(s)) {
    if (line.rfind(prefix, 0) == 0 && absl::StrContains(line, text)) return true;
  }
  return false;
}

// Loads `yaml` expecting failure; returns the status for inspection.
absl::Status Fails(const std::string& yaml) {
  absl::StatusOr<Config> c = LoadString(yaml, "test.yaml");
  EXPECT_FALSE(c.ok()) << "accepted:\n" << yaml;
  if (c.ok()) return absl::OkStatus();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return c.status();
}

Config Minimal() {
  absl::StatusOr<Config> c = LoadString(kMinimal);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Config{};
}

// A port entry for the YAML-based error tests.
std::string WithPort(const std::string& extra_port_keys) {
  return std::string(kMinimal) + "  - { name: extra0, role: host, vdev: net_null0, " +
         extra_port_keys + " }\n";
}

TEST(ConfigTest, FullExample) {
  absl::StatusOr<Config> c = LoadString(kFull, "full.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->main_lcore, 0u);
  EXPECT_THAT(c->worker_lcores, ElementsAre(1u, 2u));
  EXPECT_TRUE(c->no_huge);
  EXPECT_EQ(c->memory_mb, 512u);
  EXPECT_EQ(c->file_prefix, "");
  EXPECT_EQ(c->mbufs, 16383u);
  EXPECT_EQ(c->mbuf_cache, 256);
  EXPECT_EQ(c->mbuf_data_room, 2176);
  ASSERT_THAT(c->ports, SizeIs(2));
  const PortConfig& h = c->ports[0];
  EXPECT_EQ(h.name, "host0");
  EXPECT_EQ(h.role, PortRole::kHost);
  EXPECT_EQ(h.vdev, "net_pcap0,rx_pcap=/tmp/in.pcap,tx_pcap=/tmp/out.pcap");
  EXPECT_EQ(h.pci, "");
  EXPECT_EQ(h.rx_queues, 2);
  EXPECT_EQ(h.rx_desc, 512);
  EXPECT_EQ(h.tx_desc, 2048);
  EXPECT_EQ(h.mtu, 1500);
  EXPECT_FALSE(h.promiscuous);
  EXPECT_EQ(h.peer, "uplink0");
  const PortConfig& u = c->ports[1];
  EXPECT_EQ(u.role, PortRole::kUplink);
  EXPECT_EQ(u.pci, "0000:3b:00.1");  // domain added, hex lower-cased
  EXPECT_EQ(u.devargs, "dv_flow_en=1");
  EXPECT_EQ(u.rx_queues, 1);  // defaults inside a port
  EXPECT_EQ(u.rx_desc, 1024);
  EXPECT_TRUE(u.promiscuous);
  EXPECT_EQ(u.peer, "");
  EXPECT_EQ(c->burst_size, 64);
  EXPECT_TRUE(c->verify_icrc);
  EXPECT_FALSE(c->metrics_enabled);
  EXPECT_EQ(c->metrics_listen, "[::1]:9464");
  EXPECT_EQ(c->control_socket, "/run/heddle/test.sock");
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_THAT(c->eal_args, ElementsAre("--log-level=lib.eal:debug"));
}

TEST(ConfigTest, DefaultsFillEverythingButPorts) {
  Config c = Minimal();
  Config expected;
  expected.ports = c.ports;
  EXPECT_EQ(c, expected);
  EXPECT_EQ(c.main_lcore, 0u);
  EXPECT_THAT(c.worker_lcores, ElementsAre(1u));
  EXPECT_FALSE(c.no_huge);
  EXPECT_EQ(c.mbufs, 8191u);
  EXPECT_EQ(c.burst_size, 32);
  EXPECT_EQ(c.metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(c.control_socket, "/run/heddle/heddled.sock");
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.ports[0].rx_desc, 1024);
  EXPECT_EQ(c.ports[0].mtu, 0);
}

TEST(ConfigTest, EmptySectionsMeanDefaults) {
  absl::StatusOr<Config> c = LoadString(std::string(kMinimal) + "memory:\nmetrics: {}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->memory_mb, 0u);
  EXPECT_TRUE(c->metrics_enabled);
}

TEST(ConfigTest, WorkerListSyntax) {
  absl::StatusOr<Config> c = LoadString(std::string(kMinimal) +
                                        "lcores: { main: 0, workers: \"1-3, 5\" }\n"
                                        "mempool: { mbufs: 16383 }\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->worker_lcores, ElementsAre(1u, 2u, 3u, 5u));

  c = LoadString(std::string(kMinimal) + "lcores: { main: 4, workers: 7 }\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->main_lcore, 4u);
  EXPECT_THAT(c->worker_lcores, ElementsAre(7u));

  absl::Status s = Fails(std::string(kMinimal) + "lcores: { workers: \"3-1\" }\n");
  EXPECT_TRUE(HasError(s, "lcores.workers", "runs backwards")) << s;
  s = Fails(std::string(kMinimal) + "lcores: { workers: \"1,x\" }\n");
  EXPECT_TRUE(HasError(s, "lcores.workers", "\"x\" in \"1,x\" is not an lcore id")) << s;
  s = Fails(std::string(kMinimal) + "lcores: { workers: \"1-4000000000\" }\n");
  EXPECT_TRUE(HasError(s, "lcores.workers", "0..127")) << s;
  s = Fails(std::string(kMinimal) + "lcores: { workers: { a: 1 } }\n");
  EXPECT_TRUE(HasError(s, "lcores.workers", "got a mapping")) << s;
}

// --- Validate(): one test per rule, on programmatic configs -------------------------------------

TEST(ValidateTest, MinimalIsValid) { EXPECT_TRUE(Validate(Minimal()).ok()); }

TEST(ValidateTest, WorkersNonEmpty) {
  Config c = Minimal();
  c.worker_lcores.clear();
  EXPECT_TRUE(HasError(Validate(c), "lcores.workers", "at least one worker"));
}

TEST(ValidateTest, WorkersDistinct) {
  Config c = Minimal();
  c.worker_lcores = {1, 2, 1};
  EXPECT_TRUE(HasError(Validate(c), "lcores.workers", "lcore 1 is listed twice"));
}

TEST(ValidateTest, WorkerIsNotMain) {
  Config c = Minimal();
  c.main_lcore = 2;
  c.worker_lcores = {1, 2};
  EXPECT_TRUE(HasError(Validate(c), "lcores.workers", "lcore 2 is also lcores.main"));
}

TEST(ValidateTest, LcoreIdsBelowMaxLcore) {
  Config c = Minimal();
  c.main_lcore = 128;
  c.worker_lcores = {1, 200};
  absl::Status s = Validate(c);
  EXPECT_TRUE(HasError(s, "lcores.main", "128 is out of range")) << s;
  EXPECT_TRUE(HasError(s, "lcores.workers", "lcore 200 is out of range")) << s;
  c.main_lcore = 127;
  c.worker_lcores = {1};
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ValidateTest, NoHugeNeedsSize) {
  Config c = Minimal();
  c.no_huge = true;
  c.memory_mb = 0;
  EXPECT_TRUE(HasError(Validate(c), "memory.size_mb", "no_huge"));
  c.memory_mb = 256;
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ValidateTest, FilePrefixIsAName) {
  Config c = Minimal();
  c.file_prefix = "../etc";
  EXPECT_TRUE(HasError(Validate(c), "memory.file_prefix", "\"../etc\""));
  c.file_prefix = "heddle-a.1";
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ValidateTest, PortNames) {
  Config c = Minimal();
  c.ports[0].name = "Host0";
  EXPECT_TRUE(HasError(Validate(c), "ports[0].name", "[a-z0-9_-]"));
  c.ports[0].name = std::string(33, 'a');
  EXPECT_TRUE(HasError(Validate(c), "ports[0].name", "1 to 32"));
  c.ports[0].name = std::string(32, 'a');
  EXPECT_TRUE(Validate(c).ok());
  c.ports[0].name = "";
  EXPECT_TRUE(HasError(Validate(c), "ports[0].name"));
}

TEST(ValidateTest, PortNamesUnique) {
  Config c = Minimal();
  c.ports[1].name = "host0";
  EXPECT_TRUE(HasError(Validate(c), "ports[1].name", "already ports[0].name"));
}

TEST(ValidateTest, ExactlyOneOfPciAndVdev) {
  Config c = Minimal();
  c.ports[1].pci = "0000:3b:00.0";
  EXPECT_TRUE(HasError(Validate(c), "ports[1]", "both pci and vdev"));
  c.ports[1].pci = "";
  c.ports[1].vdev = "";
  EXPECT_TRUE(HasError(Validate(c), "ports[1]", "neither pci nor vdev"));
}

TEST(ValidateTest, PciAddressFormat) {
  Config c = Minimal();
  c.ports[1].vdev = "";
  for (const char* good : {"0000:3b:00.0", "3b:00.7", "ABCD:FF:1f.3"}) {
    c.ports[1].pci = good;
    EXPECT_TRUE(Validate(c).ok()) << good;
  }
  for (const char* bad : {"3b:00", "3b:00.8", "3b:20.0", "0:3b:00.0", "eth0", "3b:0g.0"}) {
    c.ports[1].pci = bad;
    EXPECT_TRUE(HasError(Validate(c), "ports[1].pci", "is not a PCI address")) << bad;
  }
}

TEST(ValidateTest, PciAddressIsNormalisedOnLoad) {
  absl::StatusOr<Config> c = LoadString(R"yaml(
ports:
  - { name: h, role: host, pci: "3b:00.0" }
  - { name: u, role: uplink, pci: "0001:AF:1F.7" }
)yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ports[0].pci, "0000:3b:00.0");
  EXPECT_EQ(c->ports[1].pci, "0001:af:1f.7");
}

TEST(ValidateTest, SameDeviceTwice) {
  Config c = Minimal();
  c.ports[1].vdev = "net_ring0,foo=1";
  EXPECT_TRUE(HasError(Validate(c), "ports[1].vdev", "device net_ring0 is already ports[0]"));
  c = Minimal();
  c.ports[0].vdev = "";
  c.ports[0].pci = "3b:00.0";
  c.ports[1].vdev = "";
  c.ports[1].pci = "0000:3b:00.0";
  EXPECT_TRUE(HasError(Validate(c), "ports[1].pci", "already ports[0]"));
}

TEST(ValidateTest, VdevStartsWithNetDriver) {
  Config c = Minimal();
  for (const char* bad : {"pcap0,rx_pcap=a", "net_", "eth_ring0", "net_Ring0", ",x=1"}) {
    c.ports[0].vdev = bad;
    EXPECT_TRUE(HasError(Validate(c), "ports[0].vdev", "net driver")) << bad;
  }
}

TEST(ValidateTest, DevargsOnlyForPci) {
  Config c = Minimal();
  c.ports[0].devargs = "iface=eth0";
  EXPECT_TRUE(HasError(Validate(c), "ports[0].devargs", "net_ring0,iface=eth0"));
}

TEST(ValidateTest, NeedsHostAndUplink) {
  Config c = Minimal();
  c.ports[1].role = PortRole::kHost;
  EXPECT_TRUE(HasError(Validate(c), "ports", "no port has role: uplink"));
  c.ports[0].role = c.ports[1].role = PortRole::kUplink;
  EXPECT_TRUE(HasError(Validate(c), "ports", "no port has role: host"));
  c.ports.clear();
  EXPECT_TRUE(HasError(Validate(c), "ports", "none configured"));
}

TEST(ValidateTest, AtMostSixteenPorts) {
  Config c = Minimal();
  c.mbufs = 1 << 20;
  while (c.ports.size() < 16) {
    PortConfig p = c.ports[1];
    p.name = "u" + std::to_string(c.ports.size());
    p.vdev = "net_null" + std::to_string(c.ports.size());
    c.ports.push_back(p);
  }
  EXPECT_TRUE(Validate(c).ok()) << Validate(c);
  PortConfig p = c.ports[1];
  p.name = "one_too_many";
  p.vdev = "net_null99";
  c.ports.push_back(p);
  EXPECT_TRUE(HasError(Validate(c), "ports", "at most 16"));
}

TEST(ValidateTest, PeerExistsAndHasOtherRole) {
  Config c = Minimal();
  c.ports[0].peer = "uplnk0";
  EXPECT_TRUE(HasError(Validate(c), "ports[0].peer",
                       "\"uplnk0\" names no port; use the name "
                       "of an uplink port (uplink0)"));
  c.ports[0].peer = "host0";
  EXPECT_TRUE(HasError(Validate(c), "ports[0].peer", "is also a host port"));
  c.ports[0].peer = "uplink0";
  c.ports[1].peer = "host0";
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ValidateTest, RxQueues) {
  Config c = Minimal();
  c.ports[0].rx_queues = 0;
  EXPECT_TRUE(HasError(Validate(c), "ports[0].rx_queues", "1..64"));
  c.ports[0].rx_queues = 65;
  EXPECT_TRUE(HasError(Validate(c), "ports[0].rx_queues", "1..64"));
  c.ports[0].rx_queues = 64;
  c.mbufs = 1 << 20;
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ValidateTest, DescriptorsArePowersOfTwo) {
  Config c = Minimal();
  c.mbufs = 1 << 20;
  for (uint16_t bad : {0, 32, 100, 1000, 32768}) {
    c.ports[1].rx_desc = bad;
    c.ports[0].tx_desc = bad;
    absl::Status s = Validate(c);
    EXPECT_TRUE(HasError(s, "ports[1].rx_desc", "power of two in 64..16384")) << bad;
    EXPECT_TRUE(HasError(s, "ports[0].tx_desc", "power of two in 64..16384")) << bad;
  }
  for (uint16_t good : {64, 512, 16384}) {
    c.ports[1].rx_desc = good;
    c.ports[0].tx_desc = good;
    EXPECT_TRUE(Validate(c).ok()) << good;
  }
}

TEST(ValidateTest, MtuRangeAndMbufFit) {
  Config c = Minimal();
  c.ports[0].mtu = 60;
  EXPECT_TRUE(HasError(Validate(c), "ports[0].mtu", "68..9600"));
  c.ports[0].mtu = 9000;
  EXPECT_TRUE(HasError(Validate(c), "ports[0].mtu", "at least 9146"));
  c.mbuf_data_room = 9146;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c);
  // mtu 0 means the driver's 1500: that must fit too.
  c.ports[0].mtu = 0;
  c.mbuf_data_room = 1024;
  EXPECT_TRUE(HasError(Validate(c), "ports[0].mtu", "the driver default")) << Validate(c);
  EXPECT_TRUE(HasError(Validate(c), "ports[0].mtu", "at least 1646")) << Validate(c);
  c.mbuf_data_room = 1646;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c);
}

TEST(ValidateTest, BurstSize) {
  Config c = Minimal();
  c.burst_size = 0;
  EXPECT_TRUE(HasError(Validate(c), "dataplane.burst_size", "1..256"));
  c.burst_size = 257;
  EXPECT_TRUE(HasError(Validate(c), "dataplane.burst_size", "1..256"));
}

TEST(ValidateTest, MempoolLimits) {
  Config c = Minimal();
  c.mbuf_cache = 513;
  c.mbuf_data_room = 512;
  c.mbufs = 0;
  absl::Status s = Validate(c);
  EXPECT_TRUE(HasError(s, "mempool.cache", "0..512")) << s;
  EXPECT_TRUE(HasError(s, "mempool.data_room", "1024..65535")) << s;
  EXPECT_TRUE(HasError(s, "mempool.mbufs", "0;")) << s;
}

TEST(ValidateTest, MbufsCoverTheRings) {
  Config c = Minimal();
  // 2 ports * (1*1024 rx + 1 worker*1024 tx) + 1*32*2 + 256*2 = 4672.
  EXPECT_EQ(MbufsNeeded(c), 4672u);
  c.mbufs = 4672;
  EXPECT_TRUE(Validate(c).ok());
  c.mbufs = 4671;
  EXPECT_TRUE(HasError(Validate(c), "mempool.mbufs", "4672 are needed")) << Validate(c);
  EXPECT_TRUE(HasError(Validate(c), "mempool.mbufs", "set mbufs: 8191"));

  c.worker_lcores = {1, 2, 3};
  c.ports[0].rx_queues = 4;
  // host: 4*1024 + 3*1024, uplink: 1024 + 3*1024, + 3*32*2 + 256*4 = 12480.
  EXPECT_EQ(MbufsNeeded(c), 12480u);
  c.mbufs = 8191;
  EXPECT_TRUE(HasError(Validate(c), "mempool.mbufs", "12480 are needed")) << Validate(c);
  EXPECT_TRUE(HasError(Validate(c), "mempool.mbufs", "set mbufs: 16383")) << Validate(c);
}

TEST(ValidateTest, MetricsListen) {
  Config c = Minimal();
  for (const char* good : {"127.0.0.1:9464", "0.0.0.0:0", "[::1]:9464", "[::]:65535",
                           "localhost:9464", "metrics-host.example:80"}) {
    c.metrics_listen = good;
    EXPECT_TRUE(Validate(c).ok()) << good << ": " << Validate(c);
  }
  struct Bad {
    const char* listen;
    const char* why;
  };
  for (const Bad& bad : {Bad{"9464", "no port"}, Bad{"127.0.0.1:65536", "0..65535"},
                         Bad{"127.0.0.1:http", "0..65535"}, Bad{"::1:9464", "[::1]:9464"},
                         Bad{"[::1]9464", "no :port"}, Bad{"[zz]:1", "not an IPv6"},
                         Bad{"300.1.1.1:80", "not an IPv4"}, Bad{":9464", "no host"},
                         Bad{"127.0.0.1:-1", "0..65535"}}) {
    c.metrics_listen = bad.listen;
    EXPECT_TRUE(HasError(Validate(c), "metrics.listen", bad.why))
        << bad.listen << ": " << Validate(c);
  }
}

TEST(ValidateTest, ControlSocketIsAbsolute) {
  Config c = Minimal();
  c.control_socket = "heddled.sock";
  EXPECT_TRUE(HasError(Validate(c), "control.socket", "not an absolute path"));
  c.control_socket = "/" + std::string(200, 'x');
  EXPECT_TRUE(HasError(Validate(c), "control.socket", "at most 107"));
}

TEST(ValidateTest, LogLevel) {
  Config c = Minimal();
  for (const char* good : {"error", "warning", "info", "debug"}) {
    c.log_level = good;
    EXPECT_TRUE(Validate(c).ok()) << good;
  }
  c.log_level = "warn";
  EXPECT_TRUE(HasError(Validate(c), "log.level", "error, warning, info or debug"));
}

TEST(ValidateTest, EalArgsMustNotRepeatDerivedOptions) {
  Config c = Minimal();
  c.eal_args = {"--log-level=lib.eal:debug", "-l", "0-3", "--file-prefix=x", "-m512", "-a",
                "--vdev=net_null0"};
  absl::Status s = Validate(c);
  EXPECT_TRUE(HasError(s, "eal.args[1]", "set lcores instead")) << s;
  EXPECT_TRUE(HasError(s, "eal.args[3]", "memory.file_prefix")) << s;
  EXPECT_TRUE(HasError(s, "eal.args[4]", "memory.size_mb")) << s;
  EXPECT_TRUE(HasError(s, "eal.args[5]", "ports[].pci")) << s;
  EXPECT_TRUE(HasError(s, "eal.args[6]", "ports[].vdev")) << s;
  EXPECT_THAT(Lines(s), SizeIs(5));
}

TEST(ValidateTest, CollectsEveryErrorOneLineEach) {
  Config c = Minimal();
  c.worker_lcores = {0};
  c.ports[1].rx_desc = 1000;
  c.log_level = "loud";
  c.control_socket = "x.sock";
  absl::Status s = Validate(c);
  EXPECT_THAT(Lines(s), SizeIs(4)) << s;
  EXPECT_TRUE(HasError(s, "lcores.workers"));
  EXPECT_TRUE(HasError(s, "ports[1].rx_desc"));
  EXPECT_TRUE(HasError(s, "log.level"));
  EXPECT_TRUE(HasError(s, "control.socket"));
}

TEST(ValidateTest, FreeFormStringsArePrintableText) {
  Config c = Minimal();
  c.ports[0].vdev =
      "net_pcap0,rx_pcap=/tmp/a\x8f"
      "b.pcap";
  c.control_socket = "/run/heddle/x\ty.sock";
  c.eal_args = {"--huge-dir=/mnt/h\xc3\xa9"};  // valid UTF-8 is fine
  absl::Status s = Validate(c);
  EXPECT_TRUE(HasError(s, "ports[0].vdev", "invalid UTF-8 at byte 24")) << s;
  EXPECT_TRUE(HasError(s, "control.socket", "control character")) << s;
  EXPECT_THAT(Lines(s), SizeIs(2)) << s;
}

// --- The YAML pass: types, keys, positions ------------------------------------------------------

TEST(ParseTest, BadRoleNamesKeyValueAndFix) {
  absl::Status s = Fails(R"yaml(
ports:
  - { name: host0, role: host, vdev: net_ring0 }
  - { name: uplink0, role: uplinkk, vdev: net_ring1 }
)yaml");
  EXPECT_TRUE(HasError(s, "ports[1].role", "\"uplinkk\" is not a role; use \"host\" or \"uplink\""))
      << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("(test.yaml:4:")) << s;
}

TEST(ParseTest, MissingNameAndRole) {
  absl::Status s = Fails(std::string(kMinimal) + "  - { vdev: net_null0 }\n");
  EXPECT_TRUE(HasError(s, "ports[2].name", "missing")) << s;
  EXPECT_TRUE(HasError(s, "ports[2].role", "missing")) << s;
}

TEST(ParseTest, SyntaxErrorHasFileLineColumn) {
  absl::Status s = Fails("lcores:\n  main: 0\nports: [ { name: a }\n");
  EXPECT_THAT(std::string(s.message()), HasSubstr("test.yaml:4:1: YAML syntax error")) << s;

  s = Fails("lcores: { main: 0 }\nmemory:\n  no_huge: true\n   size_mb: 5\n");
  EXPECT_THAT(std::string(s.message()), HasSubstr("test.yaml:4:11: YAML syntax error")) << s;
}

TEST(ParseTest, UnknownKeySuggestsAndListsValidKeys) {
  absl::Status s = Fails(WithPort("rx_queue: 2"));
  EXPECT_TRUE(HasError(s, "ports[2].rx_queue",
                       "unknown key; did you mean \"rx_queues\"? valid keys: name, role, pci, "
                       "vdev, devargs, rx_queues, rx_desc, tx_desc, mtu, promiscuous, peer"))
      << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("(test.yaml:5:")) << s;

  s = Fails(std::string(kMinimal) + "metric: { enabled: false }\nfoo: 1\n");
  EXPECT_TRUE(HasError(s, "metric", "did you mean \"metrics\"")) << s;
  EXPECT_TRUE(HasError(s, "foo", "unknown key; valid keys: lcores, memory, mempool, ports")) << s;

  s = Fails(std::string(kMinimal) + "log: { levle: debug }\n");
  EXPECT_TRUE(HasError(s, "log.levle", "did you mean \"level\"")) << s;
}

TEST(ParseTest, StringsMustBePrintableText) {
  absl::Status s = Fails(WithPort("devargs: \"a\\x01b\"") + "log: { level: \"\xff\" }\n");
  EXPECT_TRUE(HasError(s, "ports[2].devargs", "control character or invalid UTF-8 at byte 1")) << s;
  EXPECT_TRUE(HasError(s, "log.level", "at byte 0")) << s;
}

TEST(ParseTest, DuplicateKey) {
  absl::Status s = Fails(std::string(kMinimal) + "log: { level: info, level: debug }\n");
  EXPECT_TRUE(HasError(s, "log.level", "appears twice")) << s;
}

TEST(ParseTest, TypeErrorsStateTheRange) {
  absl::Status s = Fails(std::string(kMinimal) +
                         "mempool: { mbufs: lots, cache: -1, data_room: 70000 }\n"
                         "memory: { size_mb: 99999999999999999999999 }\n"
                         "dataplane: { burst_size: 3.5, verify_icrc: maybe }\n"
                         "lcores: { main: [0] }\n"
                         "control: { socket: [a, b] }\n");
  EXPECT_TRUE(HasError(s, "mempool.mbufs", "\"lots\" is not an integer; use an integer in 1.."))
      << s;
  EXPECT_TRUE(HasError(s, "mempool.cache", "-1 is negative; use an integer in 0..512")) << s;
  EXPECT_TRUE(HasError(s, "mempool.data_room",
                       "70000 is out of range; use an integer in "
                       "1024..65535"))
      << s;
  EXPECT_TRUE(HasError(s, "memory.size_mb", "is out of range; use an integer in 0..1048576")) << s;
  EXPECT_TRUE(HasError(s, "dataplane.burst_size", "\"3.5\" is not an integer")) << s;
  EXPECT_TRUE(HasError(s, "dataplane.verify_icrc", "use true or false")) << s;
  EXPECT_TRUE(HasError(s, "lcores.main", "got a list")) << s;
  EXPECT_TRUE(HasError(s, "control.socket", "expected a string, got a list")) << s;
  EXPECT_THAT(Lines(s), SizeIs(8)) << s;
}

TEST(ParseTest, PortFieldRanges) {
  absl::Status s = Fails(WithPort("rx_queues: 65, rx_desc: 65536, tx_desc: 32, mtu: 9601"));
  EXPECT_TRUE(HasError(s, "ports[2].rx_queues", "1..64")) << s;
  EXPECT_TRUE(HasError(s, "ports[2].rx_desc", "64..16384")) << s;
  EXPECT_TRUE(HasError(s, "ports[2].tx_desc", "64..16384")) << s;
  EXPECT_TRUE(HasError(s, "ports[2].mtu", "0..9600")) << s;
}

TEST(ParseTest, WrongShapes) {
  absl::Status s = Fails("ports: { name: host0 }\n");
  EXPECT_TRUE(HasError(s, "ports", "expected a list of ports")) << s;
  s = Fails("- a\n- b\n");
  EXPECT_TRUE(HasError(s, "(top level)", "expected a mapping")) << s;
  s = Fails(std::string(kMinimal) + "memory: 512\n");
  EXPECT_TRUE(HasError(s, "memory", "expected a mapping with keys no_huge, size_mb")) << s;
  s = Fails(std::string(kMinimal) + "eal: { args: \"--foo\" }\n");
  EXPECT_TRUE(HasError(s, "eal.args", "expected a list of strings")) << s;
  s = Fails(std::string(kMinimal) + "  - just-a-string\n");
  EXPECT_TRUE(HasError(s, "ports[2]", "expected a mapping")) << s;
}

TEST(ParseTest, EmptyDocumentNeedsPorts) {
  absl::Status s = Fails("");
  EXPECT_TRUE(HasError(s, "ports", "none configured")) << s;
  s = Fails("# only a comment\n");
  EXPECT_TRUE(HasError(s, "ports", "none configured")) << s;
}

TEST(ParseTest, SeveralDocumentsAreRejected) {
  absl::Status s = Fails(std::string(kMinimal) + "---\n" + kMinimal);
  EXPECT_THAT(std::string(s.message()), HasSubstr("holds more than one YAML document (the second "
                                                  "starts at line 5)"))
      << s;
  // yaml-cpp's LoadAll() would never return on this one.
  s = Fails("lcores: {}\n---\n,\n");
  EXPECT_THAT(std::string(s.message()), HasSubstr("more than one YAML document")) << s;
}

TEST(ParseTest, StrayCommaIsASyntaxError) {
  // yaml-cpp 0.7 reads these as an empty document (Load) or loops forever (LoadAll).
  absl::Status s = Fails(",");
  EXPECT_THAT(std::string(s.message()), HasSubstr("test.yaml:1:1: YAML syntax error: unexpected "
                                                  "\",\""))
      << s;
  s = Fails("# heddle\n  ,r\n");
  EXPECT_THAT(std::string(s.message()), HasSubstr("test.yaml:2:3: YAML syntax error")) << s;
}

TEST(ParseTest, SemanticErrorsAfterParseErrorsAreNotMixedIn) {
  // A bad role would otherwise also yield "no port has role: uplink".
  absl::Status s = Fails("ports:\n  - { name: a, role: up, vdev: net_null0 }\n");
  EXPECT_THAT(Lines(s), SizeIs(1)) << s;
}

// --- storm -----------------------------------------------------------------------------------

TEST(StormConfigTest, FullExample) {
  absl::StatusOr<Config> c = LoadString(kFull, "full.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const StormConfig& s = c->storm;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.levels.levels, 3);
  EXPECT_EQ(s.levels.cutoffs[0], 2800u);
  EXPECT_EQ(s.levels.cutoffs[1], 15000u);
  EXPECT_EQ(s.levels.cutoffs[2], 0u);
  EXPECT_EQ(s.levels.mode, storm::Mode::kPerPacket);
  EXPECT_EQ(s.levels.dscp[2], 46);
  EXPECT_EQ(s.levels.pcp[0], -1);
  EXPECT_EQ(s.levels.pcp[2], 5);
  EXPECT_EQ(s.levels.control_level, 1);
  EXPECT_EQ(s.levels.beta, 0.5);
  EXPECT_EQ(s.levels.backlog_max, 1048576u);
  EXPECT_EQ(s.levels.unknown_size, 262144u);
  EXPECT_EQ(s.qp_capacity, 4096u);
  EXPECT_EQ(s.qp_idle_ms, 2000u);
  EXPECT_EQ(s.mtu, 1024u);
}

TEST(StormConfigTest, AutoQpCapacityHoldsQpsPerHostAcrossTheWorkers) {
  // 1 M QPs at <= 90 % load: 2 M entries on one worker, 1 M on each of two, 512 Ki on four.
  Config c = Minimal();
  for (auto [workers, expect] :
       {std::pair{1, 1u << 21}, {2, 1u << 20}, {3, 1u << 19}, {4, 1u << 19}, {8, 1u << 18}}) {
    c.worker_lcores.clear();
    for (int w = 0; w < workers; ++w) c.worker_lcores.push_back(static_cast<unsigned>(w + 1));
    const uint32_t cap = QpCapacityPerWorker(c);
    EXPECT_EQ(cap, expect) << workers << " workers";
    EXPECT_GE(uint64_t{cap} * workers * 9 / 10, c.storm.qps_per_host / workers * workers)
        << workers << " workers";
  }
  c.storm.qps_per_host = 1000;  // never below the minimum table
  EXPECT_EQ(QpCapacityPerWorker(c), 1024u);
  c.storm.qp_capacity = 4096;  // an explicit size wins
  EXPECT_EQ(QpCapacityPerWorker(c), 4096u);

  absl::StatusOr<Config> a = LoadString(std::string(kMinimal) +
                                        "storm: { enabled: true, qp_capacity: auto, "
                                        "qps_per_host: 100000 }\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->storm.qp_capacity, 0u);
  EXPECT_EQ(QpCapacityPerWorker(*a), 131072u);
  // Round-trips as auto; the size in force is in a comment.
  EXPECT_NE(ToYaml(*a).find("qp_capacity: auto  # 131072 entries per worker"), std::string::npos)
      << ToYaml(*a);
}

TEST(StormConfigTest, DefaultsAreOffAndValid) {
  Config c = Minimal();
  EXPECT_FALSE(c.storm.enabled);
  EXPECT_EQ(c.storm.qp_capacity, 0u);  // auto
  EXPECT_EQ(c.storm.qps_per_host, 1u << 20);
  EXPECT_EQ(c.storm.qp_idle_ms, 10000u);
  EXPECT_EQ(c.storm.mtu, 4096u);
  EXPECT_EQ(c.storm.levels, storm::LevelConfig{});
  absl::StatusOr<Config> e = LoadString(std::string(kMinimal) + "storm: { enabled: true }\n");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->storm.enabled);
  EXPECT_EQ(e->storm.levels.control_level, 3);
  // A request of unknown size is levelled as above every cutoff, the lowest level.
  EXPECT_EQ(e->storm.levels.unknown_size, storm::kUnknownSizeLowest);
  absl::StatusOr<Config> lowest =
      LoadString(std::string(kMinimal) + "storm: { unknown_size: lowest }\n");
  ASSERT_TRUE(lowest.ok()) << lowest.status();
  EXPECT_EQ(lowest->storm.levels.unknown_size, storm::kUnknownSizeLowest);
}

TEST(StormConfigTest, ControlLevelDefaultsToTheTopLevel) {
  absl::StatusOr<Config> c =
      LoadString(std::string(kMinimal) + "storm: { levels: 2, cutoffs: [1000], dscp: [0, 46] }\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->storm.levels.control_level, 1);
  EXPECT_EQ(c->storm.levels.cutoffs[1], 0u);
}

TEST(StormConfigTest, BadValuesNameKeyAndFix) {
  auto bad = [](const std::string& storm) {
    return Fails(std::string(kMinimal) + "storm: " + storm + "\n");
  };
  EXPECT_TRUE(HasError(bad("{ levels: 9 }"), "storm.levels", "1..8"));
  EXPECT_TRUE(HasError(bad("{ cutoffs: [1, 2] }"), "storm.cutoffs", "list of 3"));
  EXPECT_TRUE(HasError(bad("{ cutoffs: [100, 50, 200] }"), "storm.cutoffs", "strictly increasing"));
  EXPECT_TRUE(HasError(bad("{ mode: fifo }"), "storm.mode", "per-message"));
  EXPECT_TRUE(HasError(bad("{ dscp: [0, 10, 18, 64] }"), "storm.dscp[3]", "0..63"));
  EXPECT_TRUE(HasError(bad("{ dscp: [0, 10] }"), "storm.dscp", "list of 4"));
  EXPECT_TRUE(HasError(bad("{ pcp: [-1, 3, 8, 0] }"), "storm.pcp[2]", "0..7"));
  EXPECT_TRUE(HasError(bad("{ pcp: [-2, 3, 7, 0] }"), "storm.pcp[0]", "negative"));
  EXPECT_TRUE(HasError(bad("{ control_level: 4 }"), "storm.control_level", "not below"));
  EXPECT_TRUE(HasError(bad("{ beta: -1 }"), "storm.beta", ">= 0"));
  EXPECT_TRUE(HasError(bad("{ beta: nan }"), "storm.beta", "finite"));
  EXPECT_TRUE(HasError(bad("{ unknown_size: 0 }"), "storm.unknown_size", "1..4294967295"));
  EXPECT_TRUE(HasError(bad("{ unknown_size: 4294967296 }"), "storm.unknown_size", "out of range"));
  EXPECT_TRUE(HasError(bad("{ unknown_size: highest }"), "storm.unknown_size",
                       "\"highest\" is not a size; use bytes 1..4294967295, or lowest"));
  EXPECT_TRUE(HasError(bad("{ qp_capacity: 5000 }"), "storm.qp_capacity", "power of two"));
  EXPECT_TRUE(HasError(bad("{ qp_capacity: 512 }"), "storm.qp_capacity", "1024.."));
  EXPECT_TRUE(HasError(bad("{ qp_capacity: automatic }"), "storm.qp_capacity", ""));
  EXPECT_TRUE(HasError(bad("{ qps_per_host: 100 }"), "storm.qps_per_host", "1024.."));
  EXPECT_TRUE(HasError(bad("{ qp_idle_ms: 0 }"), "storm.qp_idle_ms", "out of range"));
  EXPECT_TRUE(HasError(bad("{ mtu: 1500 }"), "storm.mtu", "256, 512, 1024"));
  EXPECT_TRUE(HasError(bad("{ mtu: 9000 }"), "storm.mtu", "256..4096"));
  EXPECT_TRUE(HasError(bad("{ enable: true }"), "storm.enable", "did you mean \"enabled\""));
}

TEST(StormConfigTest, AutoCutoffsBacklogSourceAndEgressQueue) {
  absl::StatusOr<Config> c = LoadString(std::string(kMinimal) +
                                        "storm: { enabled: true, cutoffs: auto, auto_interval_ms: "
                                        "250, auto_keep: 0.25, backlog_source: host, "
                                        "host_backlog_dir: /run/shm, host_poll_ms: 5, "
                                        "queue_packets: 1024, fabric_guard: false, "
                                        "read_stream_capacity: 1024, response_window_ms: 5 }\n");
  ASSERT_TRUE(c.ok()) << c.status();
  const StormConfig& s = c->storm;
  EXPECT_TRUE(s.auto_cutoffs);
  EXPECT_EQ(s.levels.cutoffs, storm::LevelConfig{}.cutoffs);  // the starting point
  EXPECT_EQ(s.auto_interval_ms, 250u);
  EXPECT_EQ(s.auto_keep, 0.25);
  EXPECT_EQ(s.backlog_source, storm::BacklogSource::kHostShim);
  EXPECT_EQ(s.host_backlog_dir, "/run/shm");
  EXPECT_EQ(s.host_poll_ms, 5u);
  EXPECT_EQ(s.queue_packets, 1024u);
  EXPECT_FALSE(s.fabric_guard);
  EXPECT_EQ(s.read_stream_capacity, 1024u);
  EXPECT_EQ(s.response_window_ms, 5u);
  // Defaults.
  Config d = Minimal();
  EXPECT_FALSE(d.storm.auto_cutoffs);
  EXPECT_EQ(d.storm.backlog_source, storm::BacklogSource::kEgressQueue);
  EXPECT_EQ(d.storm.queue_packets, 512u);
  EXPECT_TRUE(d.storm.fabric_guard);
  EXPECT_EQ(d.storm.read_stream_capacity, 16384u);
  EXPECT_EQ(d.storm.response_window_ms, 2u);
  EXPECT_THAT(ToYaml(d), HasSubstr("fabric_guard: true"));
  // Round trip keeps `auto` and the source.
  absl::StatusOr<Config> back = LoadString(ToYaml(*c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->storm, c->storm);
  EXPECT_THAT(ToYaml(*c), HasSubstr("cutoffs: auto"));
  EXPECT_THAT(ToYaml(*c), HasSubstr("backlog_source: host"));
  EXPECT_THAT(ToYaml(*c), HasSubstr("fabric_guard: false"));

  auto bad = [](const std::string& storm) {
    return Fails(std::string(kMinimal) + "storm: " + storm + "\n");
  };
  EXPECT_TRUE(HasError(bad("{ cutoffs: automatic }"), "storm.cutoffs", "or \"auto\""));
  EXPECT_TRUE(HasError(bad("{ backlog_source: shim }"), "storm.backlog_source", "\"host\""));
  EXPECT_TRUE(HasError(bad("{ auto_keep: 1 }"), "storm.auto_keep", "[0, 1)"));
  EXPECT_TRUE(HasError(bad("{ auto_interval_ms: 5 }"), "storm.auto_interval_ms", "10.."));
  EXPECT_TRUE(HasError(bad("{ queue_packets: 8 }"), "storm.queue_packets", "16.."));
  EXPECT_TRUE(HasError(bad("{ host_poll_ms: 0 }"), "storm.host_poll_ms", "1.."));
  EXPECT_TRUE(HasError(bad("{ fabric_guard: maybe }"), "storm.fabric_guard", "true or false"));
  EXPECT_TRUE(HasError(bad("{ read_stream_capacity: 1000 }"), "storm.read_stream_capacity",
                       "power of two"));
  EXPECT_TRUE(HasError(bad("{ read_stream_capacity: 32 }"), "storm.read_stream_capacity", "64.."));
  EXPECT_TRUE(HasError(bad("{ response_window_ms: 5000 }"), "storm.response_window_ms", "0..1000"));
  EXPECT_TRUE(HasError(bad("{ fabric_gaurd: true }"), "storm.fabric_gaurd",
                       "did you mean \"fabric_guard\""));
}

TEST(StormConfigTest, EgressQueuesCountInTheMbufMinimum) {
  Config c = Minimal();
  const uint64_t off = MbufsNeeded(c);
  c.storm.enabled = true;
  EXPECT_EQ(MbufsNeeded(c), off + c.worker_lcores.size() * c.ports.size() * c.storm.queue_packets);
  c.mbufs = static_cast<uint32_t>(MbufsNeeded(c) - 1);
  EXPECT_TRUE(HasError(Validate(c), "mempool.mbufs", "storm.queue_packets"));
}

TEST(StormConfigTest, EgressModes) {
  // Default: the software queues, no PFC.
  Config d = Minimal();
  EXPECT_EQ(d.storm.egress, StormEgress::kSoftware);
  EXPECT_FALSE(d.storm.dcb_pfc);
  EXPECT_THAT(ToYaml(d), HasSubstr("egress: software"));

  // Each worker fills one TX ring per traffic class on an uplink: DCB needs more mbufs.
  const std::string pool = "mempool: { mbufs: 16383 }\n";
  EXPECT_TRUE(HasError(Fails(std::string(kMinimal) + "storm: { enabled: true, egress: dcb }\n"),
                       "mempool.mbufs", "for DCB TX"));
  absl::StatusOr<Config> c = LoadString(std::string(kMinimal) + pool +
                                        "storm: { enabled: true, egress: dcb, dcb_pfc: true }\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->storm.egress, StormEgress::kDcb);
  EXPECT_TRUE(c->storm.dcb_pfc);
  absl::StatusOr<Config> back = LoadString(ToYaml(*c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->storm, c->storm);
  EXPECT_THAT(ToYaml(*c), HasSubstr("egress: dcb"));

  c = LoadString(std::string(kMinimal) + pool + "storm: { enabled: true, egress: auto }\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->storm.egress, StormEgress::kAuto);
  EXPECT_EQ(std::string(StormEgressName(StormEgress::kAuto)), "auto");

  // A PCP on every level maps the levels through it; none maps them in order.
  c = LoadString(std::string(kMinimal) + pool +
                 "storm: { enabled: true, egress: auto, pcp: [1, 2, 2, 5] }\n");
  EXPECT_TRUE(c.ok()) << c.status();

  auto bad = [](const std::string& storm) {
    return Fails(std::string(kMinimal) + "storm: " + storm + "\n");
  };
  EXPECT_TRUE(HasError(bad("{ egress: hardware }"), "storm.egress", "\"software\""));
  EXPECT_TRUE(HasError(bad("{ enabled: true, egress: dcb, pcp: [-1, 3, 4, 5] }"), "storm.pcp",
                       "give every level a PCP or none"));
  EXPECT_TRUE(HasError(bad("{ enabled: true, egress: auto, pcp: [1, 5, 3, 6] }"), "storm.pcp",
                       "level 2 has PCP 3, below level 1's PCP 5"));
  EXPECT_TRUE(
      HasError(bad("{ enabled: true, dcb_pfc: true }"), "storm.dcb_pfc", "storm.egress: dcb"));
  EXPECT_TRUE(HasError(bad("{ enabled: true, egress: dcb, dcb_pfc: yes please }"), "storm.dcb_pfc",
                       "true or false"));
  // The software egress does not care about a partial PCP list.
  EXPECT_TRUE(LoadString(std::string(kMinimal) + "storm: { pcp: [-1, 3, 4, 5] }\n").ok());
}

TEST(StormConfigTest, DcbEgressAndPfcNeedStormEnabled) {
  const std::string pool = "mempool: { mbufs: 16383 }\n";
  auto bad = [&pool](const std::string& storm) {
    return Fails(std::string(kMinimal) + pool + "storm: " + storm + "\n");
  };
  // Not silently ignored while STORM is off: the key, the value and the fix.
  for (const char* mode : {"dcb", "auto"}) {
    const absl::Status s = bad(absl::StrCat("{ egress: ", mode, " }"));
    EXPECT_TRUE(HasError(s, "storm.egress", absl::StrCat(mode, " needs storm.enabled: true"))) << s;
  }
  EXPECT_TRUE(HasError(bad("{ egress: dcb, dcb_pfc: true }"), "storm.dcb_pfc",
                       "needs storm.enabled: true"));
  EXPECT_TRUE(HasError(bad("{ dcb_pfc: true }"), "storm.dcb_pfc", "needs storm.enabled: true"));
  // With STORM off the level -> TC map does not apply: a PCP list it would refuse is no error of
  // its own, only the egress mode is named.
  const absl::Status s = bad("{ egress: dcb, pcp: [1, 5, 3, 6] }");
  EXPECT_TRUE(HasError(s, "storm.egress", "needs storm.enabled: true")) << s;
  EXPECT_FALSE(HasError(s, "storm.pcp")) << s;
  EXPECT_TRUE(LoadString(std::string(kMinimal) + "storm: { pcp: [1, 5, 3, 6] }\n").ok());
  // The same keys with STORM on load.
  EXPECT_TRUE(LoadString(std::string(kMinimal) + pool +
                         "storm: { enabled: true, egress: dcb, dcb_pfc: true }\n")
                  .ok());
}

TEST(StormConfigTest, EgressNamesAreTheKeysValues) {
  EXPECT_EQ(std::string(StormEgressName(StormEgress::kSoftware)), "software");
  EXPECT_EQ(std::string(StormEgressName(StormEgress::kDcb)), "dcb");
  EXPECT_EQ(std::string(StormEgressName(StormEgress::kAuto)), "auto");
}

TEST(StormConfigTest, DcbTxRingsCountInTheMbufMinimum) {
  Config c = Minimal();
  c.storm.enabled = true;
  const uint64_t software = MbufsNeeded(c);
  c.storm.egress = StormEgress::kDcb;  // 4 levels: 4 traffic classes, 3 more TX rings per worker
  uint64_t uplink_rings = 0;
  for (const PortConfig& p : c.ports) {
    if (p.role == PortRole::kUplink) uplink_rings += c.worker_lcores.size() * p.tx_desc * 3;
  }
  ASSERT_GT(uplink_rings, 0u);
  EXPECT_EQ(MbufsNeeded(c), software + uplink_rings);
  c.mbufs = static_cast<uint32_t>(MbufsNeeded(c) - 1);
  EXPECT_TRUE(HasError(Validate(c), "mempool.mbufs", "for DCB TX"));
}

TEST(StormConfigTest, ValidateChecksProgrammaticConfigs) {
  Config c = Minimal();
  c.storm.levels.levels = 2;  // control_level stays 3
  EXPECT_TRUE(HasError(Validate(c), "storm.control_level"));
  c = Minimal();
  c.storm.mtu = 3000;
  EXPECT_TRUE(HasError(Validate(c), "storm.mtu"));
  c = Minimal();
  c.storm.levels.unknown_size = 0;
  EXPECT_TRUE(HasError(Validate(c), "storm.unknown_size"));
}

// --- lb --------------------------------------------------------------------------------------

TEST(LbConfigTest, FullExample) {
  absl::StatusOr<Config> c = LoadString(kFull, "full.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const LbConfig& l = c->lb;
  EXPECT_TRUE(l.enabled);
  EXPECT_EQ(l.params.balancer, lb::BalancerKind::kFlowlet);
  EXPECT_EQ(l.params.entropy_field, lb::EntropyField::kIpv6FlowLabel);
  EXPECT_EQ(l.params.seed, 7u);
  EXPECT_EQ(l.params.flowlet_gap_ns, 20000u);
  EXPECT_EQ(l.params.reps_cache_size, 4u);
  EXPECT_EQ(l.params.flow_capacity, 4096u);
  EXPECT_EQ(l.params.flow_idle_ns, 5'000'000u);
  EXPECT_EQ(l.params.link_gbps, 400u);
  EXPECT_EQ(l.params.rtt_ns, 4000u);
  EXPECT_TRUE(l.params.pin);
  EXPECT_EQ(l.params.threshold_bytes, 65536u);
  EXPECT_EQ(l.params.pin_policy, lb::PinPolicy::kLeastLoaded);
  EXPECT_EQ(l.params.flow_unit, lb::FlowUnit::kQp);
  EXPECT_EQ(l.params.crossing, lb::CrossingRule::kSprayRest);
  EXPECT_EQ(l.default_paths.ports, std::vector<std::string>{"uplink0"});
  EXPECT_EQ(l.default_paths.entropies, 4u);
  EXPECT_EQ(l.default_paths.first_entropy, 0x100u);
  ASSERT_EQ(l.prefixes.size(), 1u);
  EXPECT_EQ(l.prefixes[0].prefix, "10.1.0.0/16");
  EXPECT_EQ(l.prefixes[0].values, (std::vector<uint32_t>{0x10, 0x2000, 77}));

  // The path table: the /16 on every uplink (uplink0 is the only one), the default set with its
  // next-hop MAC; port names resolved to port indexes.
  absl::StatusOr<lb::PathTableSpec> spec = LbPathTableSpec(*c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->sets.size(), 2u);
  ASSERT_EQ(spec->sets[0].size(), 3u);
  EXPECT_EQ(spec->sets[0][1].entropy, 0x2000u);
  EXPECT_EQ(spec->sets[0][1].port, 1);
  EXPECT_FALSE(spec->sets[0][1].has_next_hop_mac);
  ASSERT_EQ(spec->sets[1].size(), 4u);
  EXPECT_EQ(spec->sets[1][3].entropy, 0x103u);
  EXPECT_TRUE(spec->sets[1][3].has_next_hop_mac);
  EXPECT_EQ(spec->sets[1][3].next_hop_mac, (lb::Mac{2, 0, 0, 0, 0, 9}));
  EXPECT_EQ(spec->default_set, 1);
}

TEST(LbConfigTest, DefaultsAreOffValidAndOneBdp) {
  Config c = Minimal();
  EXPECT_FALSE(c.lb.enabled);
  EXPECT_EQ(c.lb.params, lb::LbConfig{});
  EXPECT_TRUE(c.lb.has_default_paths);
  EXPECT_TRUE(c.lb.default_paths.ports.empty());  // every uplink
  // The threshold is derived: one bandwidth-delay product of link_gbps x rtt_ns.
  EXPECT_EQ(c.lb.params.threshold_bytes, 0u);
  EXPECT_EQ(lb::EffectiveThreshold(c.lb.params), 100'000u);
  EXPECT_THAT(ToYaml(c), HasSubstr("threshold_bytes: auto  # 100000 bytes"));
  absl::StatusOr<Config> e =
      LoadString(std::string(kMinimal) + "lb: { enabled: true, link_gbps: 200, rtt_ns: 12000 }\n");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(lb::EffectiveThreshold(e->lb.params), 300'000u);
  absl::StatusOr<lb::PathTableSpec> spec = LbPathTableSpec(*e);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->sets.size(), 1u);
  ASSERT_EQ(spec->sets[0].size(), 8u);  // 8 source ports from 0xC000 on uplink0
  EXPECT_EQ(spec->sets[0][0].entropy, 0xc000u);
  EXPECT_EQ(spec->sets[0][0].port, 1);
}

TEST(LbConfigTest, BadValuesNameKeyAndFix) {
  // Path sets are checked when lb is enabled.
  auto bad = [](const std::string& lb) {
    return Fails(std::string(kMinimal) + "lb: { enabled: true, " + lb.substr(2) + "\n");
  };
  EXPECT_TRUE(HasError(bad("{ balancer: ecmpp }"), "lb.balancer", "rps"));
  EXPECT_TRUE(HasError(bad("{ entropy: sport }"), "lb.entropy", "\"udp-sport\""));
  EXPECT_TRUE(HasError(bad("{ reps_cache_size: 17 }"), "lb.reps_cache_size", "1..16"));
  EXPECT_TRUE(HasError(bad("{ flow_capacity: 8 }"), "lb.flow_capacity", "16.."));
  EXPECT_TRUE(HasError(bad("{ flowlet_gap_ns: 0 }"), "lb.flowlet_gap_ns", "1.."));
  EXPECT_TRUE(HasError(bad("{ link_gbps: 0 }"), "lb.link_gbps", "1.."));
  EXPECT_TRUE(HasError(bad("{ pin: { threshold_bytes: 4294967296 } }"), "lb.pin.threshold_bytes",
                       "1..2147483648"));
  EXPECT_TRUE(HasError(bad("{ pin: { threshold_bytes: lots } }"), "lb.pin.threshold_bytes",
                       "not an integer"));
  EXPECT_TRUE(HasError(bad("{ pin: { policy: random } }"), "lb.pin.policy", "\"least-loaded\""));
  EXPECT_TRUE(HasError(bad("{ pin: { flow: message } }"), "lb.pin.flow", "\"request\""));
  EXPECT_TRUE(HasError(bad("{ pin: { crossing: move } }"), "lb.pin.crossing", "\"spray-rest\""));
  EXPECT_TRUE(HasError(bad("{ pin: { enable: true } }"), "lb.pin.enable", "did you mean"));
  EXPECT_TRUE(
      HasError(bad("{ link_gbps: 3200, rtt_ns: 10000000 }"), "lb.pin.threshold_bytes", "2^31"));
  // Path sets.
  EXPECT_TRUE(HasError(bad("{ paths: { default: { ports: [uplink9] } } }"),
                       "lb.paths.default.ports[0]", "names no port"));
  EXPECT_TRUE(HasError(bad("{ paths: { default: { ports: [host0] } } }"),
                       "lb.paths.default.ports[0]", "host port"));
  EXPECT_TRUE(HasError(bad("{ paths: { default: { entropies: 65 } } }"),
                       "lb.paths.default.entropies", "1..64"));
  EXPECT_TRUE(HasError(bad("{ paths: { default: { first_entropy: 0xfffff } } }"),
                       "lb.paths.default", "does not fit"));
  EXPECT_TRUE(HasError(bad("{ paths: { default: { values: [1, 1] } } }"), "lb.paths.default",
                       "listed twice"));
  EXPECT_TRUE(HasError(bad("{ paths: { default: { values: [0xzz] } } }"),
                       "lb.paths.default.values[0]", "not an entropy"));
  EXPECT_TRUE(HasError(bad("{ paths: { default: { next_hop_mac: 02:00 } } }"),
                       "lb.paths.default.next_hop_mac", "six hex bytes"));
  EXPECT_TRUE(HasError(bad("{ paths: { prefixes: [ { ports: [uplink0] } ] } }"),
                       "lb.paths.prefixes[0].prefix", "missing"));
  EXPECT_TRUE(HasError(bad("{ paths: { prefixes: [ { prefix: 10.1.0.1/16 } ] } }"),
                       "lb.paths.prefixes[0].prefix", ""));
  EXPECT_TRUE(HasError(bad("{ paths: { prefixes: [ { prefix: 10.1.0.0/16 }, "
                           "{ prefix: 10.1.0.0/16 } ] } }"),
                       "lb.paths.prefixes[1].prefix", "twice"));
  EXPECT_TRUE(HasError(bad("{ paths: { default: none } }"), "lb.paths", "no path set"));
  // Errors point at the line.
  EXPECT_THAT(std::string(bad("{ balancer: ecmpp }").message()), HasSubstr("(test.yaml:5:"));
  // Disabled, the path sets are not checked (the default set of every uplink may not fit).
  EXPECT_TRUE(LoadString(std::string(kMinimal) + "lb: { paths: { default: none } }\n").ok());
  // Disabled, the path sets are not checked (the default set of every uplink may not fit).
  EXPECT_TRUE(LoadString(std::string(kMinimal) + "lb: { paths: { default: none } }\n").ok());
}

TEST(LbConfigTest, RoundTripAndNoDefaultSet) {
  absl::StatusOr<Config> c = LoadString(std::string(kMinimal) + R"yaml(lb:
  enabled: true
  balancer: reps
  pin: { threshold_bytes: auto }
  paths:
    default: none
    prefixes:
      - { prefix: "fd00::/64", ports: [uplink0], entropies: 16, first_entropy: 0xd000 }
)yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->lb.has_default_paths);
  absl::StatusOr<lb::PathTableSpec> spec = LbPathTableSpec(*c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->default_set, -1);
  const std::string yaml = ToYaml(*c);
  EXPECT_THAT(yaml, HasSubstr("default: none"));
  EXPECT_THAT(yaml, HasSubstr("first_entropy: 0xd000"));
  absl::StatusOr<Config> back = LoadString(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(back->lb, c->lb);
}

// --- fwd ---------------------------------------------------------------------------------------

TEST(FwdConfigTest, ParsesRoundTripsAndMapsPorts) {
  absl::StatusOr<Config> c = LoadString(std::string(kMinimal) +
                                        "  - { name: uplink1, role: uplink, vdev: net_ring2 }\n"
                                        "fwd:\n"
                                        "  artifact: /var/lib/heddle/host.nuwa\n"
                                        "  node: \"host[3]\"\n"
                                        "  fabric: pod-a\n"
                                        "  ports: [uplink1, uplink0]\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->fwd.enabled);
  EXPECT_EQ(c->fwd.artifact, "/var/lib/heddle/host.nuwa");
  EXPECT_EQ(c->fwd.node, "host[3]");
  EXPECT_EQ(c->fwd.fabric, "pod-a");
  absl::StatusOr<std::vector<uint16_t>> map = FwdPortMap(*c);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(*map, (std::vector<uint16_t>{2, 1}));
  const std::string yaml = ToYaml(*c);
  absl::StatusOr<Config> back = LoadString(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(back->fwd, c->fwd);
  // Without ports: the uplinks in config order. An address names the node too.
  c = LoadString(std::string(kMinimal) +
                 "  - { name: uplink1, role: uplink, vdev: net_ring2 }\n"
                 "fwd: { node: 10.0.1.7 }\n");
  ASSERT_TRUE(c.ok()) << c.status();
  map = FwdPortMap(*c);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(*map, (std::vector<uint16_t>{1, 2}));
  // No fwd section: disabled, and not printed.
  EXPECT_FALSE(Minimal().fwd.enabled);
  EXPECT_THAT(ToYaml(Minimal()), Not(HasSubstr("fwd:")));
}

TEST(FwdConfigTest, BadValuesNameKeyAndFix) {
  auto bad = [](const std::string& fwd) {
    return Fails(std::string(kMinimal) + "fwd: " + fwd + "\n");
  };
  EXPECT_TRUE(HasError(bad("{ artifact: a.nuwa }"), "fwd.node", "missing"));
  EXPECT_TRUE(HasError(bad("{ node: host12 }"), "fwd.node", "name[index]"));
  EXPECT_TRUE(HasError(bad("{ node: \"host[x]\" }"), "fwd.node", "IPv4"));
  EXPECT_TRUE(HasError(bad("{ node: 10.0.0.300 }"), "fwd.node", "IPv4"));
  EXPECT_TRUE(
      HasError(bad("{ node: \"host[1]\", ports: [uplink9] }"), "fwd.ports[0]", "names no port"));
  EXPECT_TRUE(HasError(bad("{ node: \"host[1]\", ports: [host0] }"), "fwd.ports[0]", "host port"));
  EXPECT_TRUE(
      HasError(bad("{ node: \"host[1]\", ports: [uplink0, uplink0] }"), "fwd.ports[1]", "twice"));
  EXPECT_TRUE(HasError(bad("{ node: \"host[1]\", artefact: x }"), "fwd.artefact", "did you mean"));
}

// --- Round trip --------------------------------------------------------------------------------

TEST(ToYamlTest, RoundTripFull) {
  absl::StatusOr<Config> c = LoadString(kFull);
  ASSERT_TRUE(c.ok()) << c.status();
  std::string yaml = ToYaml(*c);
  absl::StatusOr<Config> back = LoadString(yaml, "rendered");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, *c) << yaml;
}

TEST(ToYamlTest, RoundTripDefaultsAreSpelledOut) {
  Config c = Minimal();
  std::string yaml = ToYaml(c);
  for (const char* key :
       {"main: 0", "mbufs: 8191", "data_room: 2176", "burst_size: 32", "rx_desc: 1024",
        "promiscuous: true", "verify_icrc: false", "qp_capacity: auto", "mode: per-message",
        "unknown_size: lowest", "\"127.0.0.1:9464\"", "\"/run/heddle/heddled.sock\""}) {
    EXPECT_THAT(yaml, HasSubstr(key));
  }
  absl::StatusOr<Config> back = LoadString(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, c);
}

TEST(ToYamlTest, RoundTripAwkwardStrings) {
  Config c = Minimal();
  c.file_prefix = "null";
  c.ports[0].vdev = "net_pcap0,rx_pcap=/tmp/a b#c: d.pcap,infinite_rx=1";
  c.ports[1].name = "true";
  c.ports[1].vdev = "";
  c.ports[1].pci = "0000:3b:00.0";
  c.ports[1].devargs = "class=eth:regex,txq_inline_max=\"x\"";
  c.ports[0].peer = "true";
  c.eal_args = {"--log-level=lib.eal:debug", "", "--huge-unlink", "'quoted'"};
  ASSERT_TRUE(Validate(c).ok()) << Validate(c);
  std::string yaml = ToYaml(c);
  absl::StatusOr<Config> back = LoadString(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, c) << yaml;
}

// --- Files -------------------------------------------------------------------------------------

TEST(LoadFileTest, MissingFile) {
  absl::StatusOr<Config> c = LoadFile("/nonexistent/heddle.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(),
            "cannot read /nonexistent/heddle.yaml: No such file or directory");
}

TEST(LoadFileTest, DirectoryIsUnreadable) {
  absl::StatusOr<Config> c = LoadFile("/");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("cannot read /: Is a directory"));
}

TEST(LoadFileTest, ReadsAndNamesTheFileInPositions) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("heddle_config_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::path good = dir / "good.yaml", bad = dir / "bad.yaml";
  std::ofstream(good) << kFull;
  std::ofstream(bad) << "ports:\n  - { name: a, role: host, vdev: net_null0, rx_queue: 1 }\n";
  absl::StatusOr<Config> c = LoadFile(good.string());
  EXPECT_TRUE(c.ok()) << c.status();
  c = LoadFile(bad.string());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("(" + bad.string() + ":2:"));
  std::filesystem::remove_all(dir);
}

TEST(ExamplesTest, EveryShippedExampleIsValid) {
  size_t n = 0, with_lb = 0;
  for (const auto& entry : std::filesystem::directory_iterator(HEDDLE_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    ++n;
    absl::StatusOr<Config> c = LoadFile(entry.path().string());
    EXPECT_TRUE(c.ok()) << entry.path() << ":\n" << c.status();
    if (!c.ok()) continue;
    absl::StatusOr<Config> back = LoadString(ToYaml(*c));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, *c) << entry.path();
    if (c->lb.enabled) {
      ++with_lb;
      EXPECT_TRUE(LbPathTableSpec(*c).ok()) << entry.path();
    }
  }
  EXPECT_GE(with_lb, 1u) << "expected pin.yaml (lb enabled) in " << HEDDLE_EXAMPLES_DIR;
  EXPECT_GE(n, 3u) << "expected virtual.yaml, mlx5-host.yaml and ring.yaml in "
                   << HEDDLE_EXAMPLES_DIR;
}

}  // namespace
}  // namespace heddle::config
