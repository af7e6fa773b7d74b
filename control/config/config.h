// File: control/config/config.h
//
// heddled's configuration: the YAML schema (docs/config.md) parsed into plain structs and
// validated. Every error names the key path, the bad value and the fix, e.g.
//   ports[1].role: "uplinkk" is not a role; use "host" or "uplink"
// Loading never throws (yaml-cpp exceptions are caught here) and never returns half a config.
//
//   absl::StatusOr<heddle::config::Config> c = heddle::config::LoadFile("heddle.yaml");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/lb/path.h"
#include "dataplane/lb/pin.h"
#include "dataplane/storm/levels.h"

namespace heddle::config {

enum class PortRole { kHost, kUplink };
const char* PortRoleName(PortRole r);  // "host" / "uplink"

struct PortConfig {
  std::string name;  // unique, [a-z0-9_-]{1,32}; used in metrics labels and the CLI
  PortRole role = PortRole::kHost;
  // Exactly one of pci / vdev is set.
  std::string pci;          // "0000:3b:00.0" (domain optional: "3b:00.0" is normalised to it)
  std::string vdev;         // "net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap"
  std::string devargs;      // extra devargs for a PCI device, e.g. "dv_flow_en=1" (optional)
  uint16_t rx_queues = 1;   // 1..64; RSS spreads across them when > 1
  uint16_t rx_desc = 1024;  // ring sizes, powers of two 64..16384
  uint16_t tx_desc = 1024;
  uint16_t mtu = 0;  // 0 = leave the driver default; else 68..9600
  bool promiscuous = true;
  std::string peer;  // name of the port packets from this one go to; "" = default pairing

  friend bool operator==(const PortConfig&, const PortConfig&) = default;
};

// How an uplink port serves the STORM levels (storm.egress, docs/storm.md §6.7).
enum class StormEgress : uint8_t {
  kSoftware,  // per-level software queues in strict priority in front of one TX queue per worker
  kDcb,       // each level on its DCB traffic class's TX queue; start-up fails where impossible
  kAuto,      // DCB where the port supports it, software elsewhere (logged, shown)
};
const char* StormEgressName(StormEgress e);  // "software" / "dcb" / "auto"

// STORM tagging (docs/storm.md, docs/config.md `storm`). The level formula's parameters are the
// library's own LevelConfig, validated by storm::ValidateLevelConfig().
struct StormConfig {
  bool enabled = false;
  storm::LevelConfig levels;  // levels, cutoffs, mode, dscp, pcp, control_level, beta, ...
  // QP table entries per worker; power of two, 1024..16M. 0 (`qp_capacity: auto`, the default):
  // sized so the workers together hold qps_per_host entries (QpCapacityPerWorker()).
  uint32_t qp_capacity = 0;
  uint32_t qps_per_host = 1u << 20;  // QP entries the auto capacity is sized for; 1024..16M
  uint32_t qp_idle_ms = 10000;       // a QP idle this long may be evicted
  uint32_t mtu = 4096;               // RoCE path MTU for PSN/backlog math; power of two, 256..4096
  // Cutoffs derived at run time from the observed request sizes (storm.cutoffs: auto); the static
  // `levels.cutoffs` are then only the starting point.
  bool auto_cutoffs = false;
  uint32_t auto_interval_ms = 1000;  // how often auto cutoffs are recomputed; 10..3600000
  double auto_keep = 0.5;            // share of the older size totals kept per interval, [0, 1)
  // Where a QP's backlog B comes from: none, egress (heddled's own queues), host (verbs shim).
  storm::BacklogSource backlog_source = storm::BacklogSource::kEgressQueue;
  std::string host_backlog_dir = "/dev/shm";  // where the shim's heddle-verbs-<pid> tables live
  uint32_t host_poll_ms = 10;                 // how often those tables are read; 1..10000
  // Per-message mode with the response join (backlog_source host): a request never takes a
  // higher level than its QP's packets still unacknowledged in the fabric (docs/storm.md §6.5).
  bool fabric_guard = true;
  // READ responses the host sends as responder (docs/storm.md §6.6): entries of each worker's READ
  // stream table (128 B each; power of two, 64..4M), and how long, in per-message mode with
  // fabric_guard, a QP's later READ response streams and ACKs stay at or below the level of its
  // last READ response (0..1000 ms; 0: not capped).
  uint32_t read_stream_capacity = 16384;
  uint32_t response_window_ms = 2;
  // Strict-priority egress: packets held per egress port per worker under backpressure, shared by
  // the levels (a full port drops the newest packet of its lowest level); 16..65536.
  uint32_t queue_packets = 512;
  // Uplink ports' egress: software queues, DCB TX queues per level's traffic class, or auto.
  // The level -> TC map is storm::MapLevelsToTcs() of the levels at start-up.
  StormEgress egress = StormEgress::kSoftware;
  bool dcb_pfc = false;  // with DCB TX: also enable priority flow control (RTE_ETH_DCB_PFC_SUPPORT)

  friend bool operator==(const StormConfig&, const StormConfig&) = default;
};

// One path set of `lb.paths` (docs/config.md `lb`): the paths a packet towards the set's
// destinations may take, the cross product of its uplink ports and its entropy values.
struct LbPathSetConfig {
  std::string prefix;               // "10.1.0.0/16"; empty for lb.paths.default
  std::vector<std::string> ports;   // uplink port names; empty: every uplink port, in config order
  uint32_t entropies = 8;           // N values first_entropy, first_entropy + 1, ...
  uint32_t first_entropy = 0xc000;  // RoCEv2 source ports conventionally sit in 0xC000-0xFFFF
  std::vector<uint32_t> values;     // explicit entropy values; when set, the two above are unused
  std::string next_hop_mac;         // "02:00:00:00:00:09": written as the destination MAC; "": kept

  friend bool operator==(const LbPathSetConfig&, const LbPathSetConfig&) = default;
};

// PIN and the load balancer beneath it (docs/pin.md, docs/config.md `lb`). The selector's own
// parameters are the library's lb::LbConfig, checked by lb::ValidateLbConfig().
struct LbConfig {
  bool enabled = false;
  lb::LbConfig params;  // balancer, pin, pin policy, flow unit, crossing, threshold (0: one BDP of
                        // link_gbps x rtt_ns), seed, flowlet gap, REPS cache, entropy field, ...
  bool has_default_paths = true;  // lb.paths.default: none turns it off
  LbPathSetConfig default_paths;
  std::vector<LbPathSetConfig> prefixes;

  friend bool operator==(const LbConfig&, const LbConfig&) = default;
};

// Nüwa forwarding (docs/config.md `fwd`, docs/nuwa-install.md): heddled is a host of a fabric the
// Nüwa compiler described; it installs the fabric's *host* artifact and takes its path sets
// (uplink, next-hop MAC, entropies per destination prefix) instead of lb.paths. The section's
// presence turns the pin-select stage on even when lb.enabled is false (then with balancer ecmp,
// pin off).
struct FwdConfig {
  bool enabled = false;  // the `fwd` section is present
  // A host artifact installed at start-up (heddle-nuwa compile writes it); "" = none until
  // `heddlectl artifact install`. A relative path is relative to the configuration file.
  std::string artifact;
  // Which host of the fabric this heddled is: "host[12]" (any name[index]) or the host's IPv4
  // address in the fabric's address plan. Required.
  std::string node;
  // When set, an artifact compiled for another fabric (by its name) is refused.
  std::string fabric;
  // Uplink port names by the artifact's host port number (plane * w_1 + b_1); empty: the uplink
  // ports in config order.
  std::vector<std::string> ports;

  friend bool operator==(const FwdConfig&, const FwdConfig&) = default;
};

struct Config {
  // lcores
  unsigned main_lcore = 0;
  std::vector<unsigned> worker_lcores = {1};  // non-empty, distinct, none equal to main_lcore
  // memory
  bool no_huge = false;
  unsigned memory_mb = 0;   // -m; 0 = EAL default (required > 0 when no_huge)
  std::string file_prefix;  // --file-prefix; "" = run in memory (--in-memory), no runtime files
  // mempool
  uint32_t mbufs = 8191;                 // per NUMA socket in use; >= what the rings need (checked)
  uint16_t mbuf_cache = 256;             // 0..512
  uint16_t mbuf_data_room = 2048 + 128;  // RTE_MBUF_DEFAULT_BUF_SIZE; 1024..65535
  // ports (at least one host and one uplink)
  std::vector<PortConfig> ports;
  // dataplane
  uint16_t burst_size = 32;  // 1..256
  bool verify_icrc = false;  // drop RoCEv2 frames with a bad ICRC (costs a CRC per packet)
  // storm
  StormConfig storm;
  // lb (PIN)
  LbConfig lb;
  // fwd (Nüwa artifact)
  FwdConfig fwd;
  // metrics
  bool metrics_enabled = true;
  std::string metrics_listen = "127.0.0.1:9464";  // host:port; port 0 = any free port
  // control API
  std::string control_socket = "/run/heddle/heddled.sock";
  // logging
  std::string log_level = "info";  // error|warning|info|debug
  // extra EAL arguments appended verbatim (after the ones derived above)
  std::vector<std::string> eal_args;

  friend bool operator==(const Config&, const Config&) = default;
};

// Parses YAML text. `source` names the file in messages.
absl::StatusOr<Config> LoadString(const std::string& yaml, const std::string& source = "<string>");
absl::StatusOr<Config> LoadFile(const std::string& path);
// Semantic checks across keys (lcores distinct, ≥1 host and ≥1 uplink port, peers exist, unique
// names, mbufs sufficient for rings). LoadString/LoadFile call this; exposed for programmatic
// configs.
absl::Status Validate(const Config& c);
// How many mbufs the configured rings and caches can hold at once (Validate() requires
// `mbufs` >= this): the sum over ports of rx_queues*rx_desc + workers*tx_desc, plus
// workers*burst_size*2 in flight, plus mbuf_cache*(workers+1) parked in per-lcore caches.
uint64_t MbufsNeeded(const Config& c);
// The QP table entries each worker allocates: storm.qp_capacity, or for auto the power of two
// that holds storm.qps_per_host / workers entries at 90 % load (the table holds that much, see
// dataplane/storm/qp_table.h), at least 1024. 1 M QPs: 2 M entries on one worker, 1 M each on
// two, 512 Ki each on four (66 bytes per entry with its tag).
uint32_t QpCapacityPerWorker(const Config& c);
// The path table spec of lb.paths: port names resolved to port indexes (an empty list: every
// uplink), prefixes and entropies checked, next-hop MACs set. Errors name the lb.paths key.
absl::StatusOr<lb::PathTableSpec> LbPathTableSpec(const Config& c);
// The daemon port indexes of fwd.ports (artifact host port p -> index [p]): the named ports, or
// every uplink port in config order. Errors name the fwd.ports key.
absl::StatusOr<std::vector<uint16_t>> FwdPortMap(const Config& c);
// The effective config rendered back to YAML (defaults filled in): `heddlectl show config`.
std::string ToYaml(const Config& c);

}  // namespace heddle::config
