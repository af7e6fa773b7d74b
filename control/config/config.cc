// File: control/config/config.cc
//
// YAML -> Config in two passes. The structural pass walks the document: types, ranges, unknown
// and duplicate keys, each error tagged with the file position of the offending node. Validate()
// then checks the rules that span keys. Each pass collects every problem it finds, one per line,
// so that a single `heddled --check-config` run shows all of them; the second pass runs only when
// the first found nothing, because rules across keys mean little over values that did not parse.

#include "control/config/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/text_match.h"
#include "common/yaml_documents.h"
#include "dataplane/storm/levels.h"
#include "dataplane/storm/tc_map.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace heddle::config {
namespace {

// Limits shared by the parser (which states them in its range messages) and Validate().
constexpr unsigned kMaxLcores = 128;  // RTE_MAX_LCORE of Debian's DPDK 22.11 build
constexpr size_t kMaxPorts = 16;
constexpr uint64_t kMaxMemoryMb = 1 << 20;  // 1 TiB: anything larger is a typo
constexpr uint16_t kMaxRxQueues = 64;
constexpr uint16_t kMinDesc = 64;
constexpr uint16_t kMaxDesc = 16384;
constexpr uint16_t kMinMtu = 68;  // the IPv4 minimum
constexpr uint16_t kMaxMtu = 9600;
constexpr uint16_t kMaxBurst = 256;
constexpr uint16_t kMaxMbufCache = 512;  // RTE_MEMPOOL_CACHE_MAX_SIZE
constexpr uint16_t kMinDataRoom = 1024;
constexpr unsigned kDefaultMtu = 1500;       // what drivers use when ports[].mtu is 0
constexpr unsigned kMbufHeadroom = 128;      // RTE_PKTMBUF_HEADROOM
constexpr unsigned kFrameOverhead = 14 + 4;  // Ethernet header + one VLAN tag; the CRC is stripped
constexpr size_t kMaxSocketPath = 107;       // sizeof(sockaddr_un::sun_path) - 1
constexpr size_t kMaxFileSize = 16 << 20;

// The keys each mapping accepts, in the order docs/config.md and ToYaml() use.
constexpr absl::string_view kTopKeys[] = {"lcores",    "memory",  "mempool", "ports",
                                          "dataplane", "storm",   "lb",      "fwd",
                                          "metrics",   "control", "log",     "eal"};
constexpr absl::string_view kLcoreKeys[] = {"main", "workers"};
constexpr absl::string_view kMemoryKeys[] = {"no_huge", "size_mb", "file_prefix"};
constexpr absl::string_view kMempoolKeys[] = {"mbufs", "cache", "data_room"};
constexpr absl::string_view kPortKeys[] = {"name",    "role",        "pci",     "vdev",
                                           "devargs", "rx_queues",   "rx_desc", "tx_desc",
                                           "mtu",     "promiscuous", "peer"};
constexpr absl::string_view kDataplaneKeys[] = {"burst_size", "verify_icrc"};
constexpr absl::string_view kStormKeys[] = {"enabled",
                                            "levels",
                                            "cutoffs",
                                            "mode",
                                            "dscp",
                                            "pcp",
                                            "control_level",
                                            "beta",
                                            "backlog_max",
                                            "unknown_size",
                                            "qp_capacity",
                                            "qp_idle_ms",
                                            "mtu",
                                            "auto_interval_ms",
                                            "auto_keep",
                                            "backlog_source",
                                            "host_backlog_dir",
                                            "host_poll_ms",
                                            "queue_packets",
                                            "qps_per_host",
                                            "fabric_guard",
                                            "read_stream_capacity",
                                            "response_window_ms",
                                            "egress",
                                            "dcb_pfc"};
constexpr absl::string_view kStormEgressNames[] = {"software", "dcb", "auto"};
constexpr StormEgress kStormEgressValues[] = {StormEgress::kSoftware, StormEgress::kDcb,
                                              StormEgress::kAuto};
// StormEgressName() indexes kStormEgressNames by the enum.
static_assert(std::size(kStormEgressNames) == std::size(kStormEgressValues));
static_assert([] {
  for (size_t i = 0; i < std::size(kStormEgressValues); ++i) {
    if (static_cast<size_t>(kStormEgressValues[i]) != i) return false;
  }
  return true;
}());
constexpr uint32_t kMinQpCapacity = 1024;
constexpr uint32_t kMaxQpCapacity = 16u << 20;
constexpr uint32_t kMinReadStreams = 64;
constexpr uint32_t kMaxReadStreams = 4u << 20;
constexpr uint32_t kMinStormMtu = 256;
constexpr uint32_t kMaxStormMtu = 4096;
constexpr absl::string_view kLbKeys[] = {
    "enabled",        "balancer",        "entropy",       "seed",
    "flowlet_gap_ns", "reps_cache_size", "flow_capacity", "flow_idle_ms",
    "link_gbps",      "rtt_ns",          "pin",           "paths"};
constexpr absl::string_view kLbPinKeys[] = {"enabled", "threshold_bytes", "policy", "flow",
                                            "crossing"};
constexpr absl::string_view kLbPathsKeys[] = {"default", "prefixes"};
constexpr absl::string_view kLbDefaultSetKeys[] = {"ports", "entropies", "first_entropy", "values",
                                                   "next_hop_mac"};
constexpr absl::string_view kLbPrefixSetKeys[] = {"prefix",        "ports",  "entropies",
                                                  "first_entropy", "values", "next_hop_mac"};
constexpr uint32_t kMinLbFlows = 16;
constexpr uint32_t kMaxLbFlows = 1u << 26;
constexpr uint64_t kMaxLbThreshold = uint64_t{1} << 31;  // the largest RDMA message
constexpr absl::string_view kFwdKeys[] = {"artifact", "node", "fabric", "ports"};
constexpr absl::string_view kMetricsKeys[] = {"enabled", "listen"};
constexpr absl::string_view kControlKeys[] = {"socket"};
constexpr absl::string_view kLogKeys[] = {"level"};
constexpr absl::string_view kEalKeys[] = {"args"};
constexpr absl::string_view kLogLevels[] = {"error", "warning", "info", "debug"};

std::string Join(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", s, "\""); }

bool IsHex(absl::string_view s) {
  for (char ch : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(ch))) return false;
  }
  return !s.empty();
}

// "3b:00.0" or "0000:3B:00.0" -> "0000:3b:00.0"; nullopt if it is not a PCI address.
std::optional<std::string> NormalizePci(absl::string_view s) {
  std::vector<absl::string_view> parts = absl::StrSplit(s, ':');
  if (parts.size() == 2) parts.insert(parts.begin(), "0000");
  if (parts.size() != 3) return std::nullopt;
  absl::string_view domain = parts[0], bus = parts[1], devfn = parts[2];
  size_t dot = devfn.find('.');
  if (dot == absl::string_view::npos) return std::nullopt;
  absl::string_view dev = devfn.substr(0, dot), fn = devfn.substr(dot + 1);
  if (domain.size() != 4 || !IsHex(domain) || bus.size() != 2 || !IsHex(bus) || dev.size() != 2 ||
      !IsHex(dev) || fn.size() != 1 || fn[0] < '0' || fn[0] > '7') {
    return std::nullopt;
  }
  if (std::stoul(std::string(dev), nullptr, 16) > 0x1f) return std::nullopt;
  return absl::AsciiStrToLower(absl::StrCat(domain, ":", bus, ":", dev, ".", fn));
}

// The vdev's instance name ("net_pcap0" of "net_pcap0,rx_pcap=..."), or "" if it does not start
// with a DPDK net driver name.
std::string VdevName(absl::string_view vdev) {
  absl::string_view name = vdev.substr(0, vdev.find(','));
  if (name.size() <= 4 || name.substr(0, 4) != "net_") return "";
  for (char ch : name) {
    if (!absl::ascii_islower(static_cast<unsigned char>(ch)) &&
        !absl::ascii_isdigit(static_cast<unsigned char>(ch)) && ch != '_') {
      return "";
    }
  }
  return std::string(name);
}

// "02:00:00:00:00:09" (or with '-') -> the six bytes; nullopt if it is not a MAC address.
std::optional<lb::Mac> ParseMac(absl::string_view s) {
  std::vector<absl::string_view> parts = absl::StrSplit(s, absl::ByAnyChar(":-"));
  if (parts.size() != 6) return std::nullopt;
  lb::Mac mac{};
  for (size_t i = 0; i < 6; ++i) {
    if (parts[i].size() != 2 || !IsHex(parts[i])) return std::nullopt;
    mac[i] = static_cast<uint8_t>(std::stoul(std::string(parts[i]), nullptr, 16));
  }
  return mac;
}

bool IsPortName(absl::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  for (char ch : s) {
    if (!absl::ascii_islower(static_cast<unsigned char>(ch)) &&
        !absl::ascii_isdigit(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-') {
      return false;
    }
  }
  return true;
}

// "host[12]" (a node name as heddle-nuwa prints it; the install checks the name) or a dotted IPv4
// address.
bool IsFwdNodeName(absl::string_view s) {
  in_addr a4;
  if (inet_pton(AF_INET, std::string(s).c_str(), &a4) == 1) return true;
  const size_t open = s.find('[');
  if (open == absl::string_view::npos || open == 0 || s.back() != ']') return false;
  const absl::string_view digits = s.substr(open + 1, s.size() - open - 2);
  uint64_t v = 0;
  return !digits.empty() && digits.size() <= 10 && absl::SimpleAtoi(digits, &v) &&
         std::all_of(digits.begin(), digits.end(),
                     [](char ch) { return absl::ascii_isdigit(static_cast<unsigned char>(ch)); });
}

bool IsFilePrefix(absl::string_view s) {
  if (s.size() > 64) return false;
  for (char ch : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' &&
        ch != '.') {
      return false;
    }
  }
  return true;
}

// Where `s` stops being printable text (valid UTF-8 without control characters), or npos.
// Config strings end up in argv, paths and messages, and must survive ToYaml unchanged.
size_t BadTextAt(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if (b < 0x20 || b == 0x7f) return i;
      ++i;
      continue;
    }
    size_t len = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 && b < 0xe0 ? 2 : 0;
    if (len == 0 || (len == 3 && b >= 0xf0) || i + len > s.size()) return i;
    unsigned char b1 = static_cast<unsigned char>(s[i + 1]);
    // Reject overlong forms, UTF-16 surrogates and code points above U+10FFFF.
    if ((b == 0xe0 && b1 < 0xa0) || (b == 0xed && b1 > 0x9f) || (b == 0xf0 && b1 < 0x90) ||
        (b == 0xf4 && b1 > 0x8f)) {
      return i;
    }
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return i;
    }
    i += len;
  }
  return absl::string_view::npos;
}

std::string BadTextMessage(size_t at) {
  return absl::StrCat("has a control character or invalid UTF-8 at byte ", at,
                      "; use printable text");
}

// What is wrong with a metrics listen address, or nullopt if it is fine.
std::optional<std::string> ListenProblem(absl::string_view s) {
  absl::string_view host, port;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == absl::string_view::npos) return "has an unclosed '['; write [::1]:9464";
    host = s.substr(1, close - 1);
    absl::string_view rest = s.substr(close + 1);
    if (rest.empty() || rest[0] != ':')
      return "has no :port after the IPv6 address; write [::1]:9464";
    port = rest.substr(1);
    in6_addr a6;
    if (inet_pton(AF_INET6, std::string(host).c_str(), &a6) != 1) {
      return absl::StrCat(Quote(host), " is not an IPv6 address");
    }
  } else {
    size_t colon = s.rfind(':');
    if (colon == absl::string_view::npos) {
      return "has no port; write host:port such as 127.0.0.1:9464";
    }
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return "looks like an IPv6 address without brackets; write [addr]:port such as [::1]:9464";
    }
    if (host.empty()) return "has no host; use 0.0.0.0:9464 for all IPv4 addresses";
    bool dotted = true;
    for (char ch : host) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(ch)) && ch != '.') dotted = false;
    }
    in_addr a4;
    if (dotted && inet_pton(AF_INET, std::string(host).c_str(), &a4) != 1) {
      return absl::StrCat(Quote(host), " is not an IPv4 address");
    }
    for (char ch : host) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-') {
        return absl::StrCat(Quote(host), " is not a host name or address");
      }
    }
  }
  uint64_t p = 0;
  if (ParseUint(port, &p) != UintParse::kOk || p > 65535) {
    return absl::StrCat("port ", Quote(port), " is not a port number in 0..65535");
  }
  return std::nullopt;
}

// EAL options heddled derives from other keys; repeating them in eal.args makes the EAL fail or
// silently run with something other than what the config says.
struct DerivedEalOption {
  absl::string_view flag;
  absl::string_view instead;
};
constexpr DerivedEalOption kDerivedEalOptions[] = {
    {"-l", "lcores"},
    {"-c", "lcores"},
    {"--lcores", "lcores"},
    {"--main-lcore", "lcores.main"},
    {"--master-lcore", "lcores.main"},
    {"-m", "memory.size_mb"},
    {"--no-huge", "memory.no_huge"},
    {"--file-prefix", "memory.file_prefix"},
    {"--in-memory", "memory.file_prefix: \"\""},
    {"-a", "ports[].pci"},
    {"--allow", "ports[].pci"},
    {"--vdev", "ports[].vdev"},
};

std::optional<absl::string_view> DerivedFrom(absl::string_view arg) {
  for (const auto& o : kDerivedEalOptions) {
    if (arg == o.flag) return o.instead;
    if (arg.substr(0, o.flag.size()) != o.flag) continue;
    absl::string_view rest = arg.substr(o.flag.size());
    // "--file-prefix=x"; short options also take their value attached: "-l1-3", "-m512".
    if (rest[0] == '=' || (o.flag.size() == 2 && o.flag[1] != '-')) return o.instead;
  }
  return std::nullopt;
}

// The smallest 2^k - 1 >= n: the mempool's most memory-efficient size.
uint64_t SuggestedMbufs(uint64_t n) {
  uint64_t s = 1;
  while (s - 1 < n) s <<= 1;
  return s - 1;
}

class Problems {
 public:
  void Add(std::string msg) { list_.push_back(std::move(msg)); }
  bool empty() const { return list_.empty(); }
  absl::Status ToStatus() const {
    if (list_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(list_, "\n"));
  }

 private:
  std::vector<std::string> list_;
};

// The structural pass: YAML nodes -> Config fields.
class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  void Parse(const YAML::Node& root, Config* c) {
    if (root.IsNull()) return;  // an empty file: every default, no ports (Validate says so)
    if (!Map(root, "", kTopKeys)) return;
    if (auto n = Section(root, "lcores", kLcoreKeys)) Lcores(*n, c);
    if (auto n = Section(root, "memory", kMemoryKeys)) {
      if (auto v = Child(*n, "no_huge")) Bool(*v, "memory.no_huge", &c->no_huge);
      if (auto v = Child(*n, "size_mb")) Uint(*v, "memory.size_mb", 0, kMaxMemoryMb, &c->memory_mb);
      if (auto v = Child(*n, "file_prefix")) String(*v, "memory.file_prefix", &c->file_prefix);
    }
    if (auto n = Section(root, "mempool", kMempoolKeys)) {
      if (auto v = Child(*n, "mbufs")) Uint(*v, "mempool.mbufs", 1, UINT32_MAX, &c->mbufs);
      if (auto v = Child(*n, "cache")) Uint(*v, "mempool.cache", 0, kMaxMbufCache, &c->mbuf_cache);
      if (auto v = Child(*n, "data_room")) {
        Uint(*v, "mempool.data_room", kMinDataRoom, UINT16_MAX, &c->mbuf_data_room);
      }
    }
    if (auto n = Child(root, "ports")) Ports(*n, c);
    if (auto n = Section(root, "dataplane", kDataplaneKeys)) {
      if (auto v = Child(*n, "burst_size")) {
        Uint(*v, "dataplane.burst_size", 1, kMaxBurst, &c->burst_size);
      }
      if (auto v = Child(*n, "verify_icrc")) Bool(*v, "dataplane.verify_icrc", &c->verify_icrc);
    }
    if (auto n = Section(root, "storm", kStormKeys)) Storm(*n, &c->storm);
    if (auto n = Section(root, "lb", kLbKeys)) Lb(*n, &c->lb);
    if (auto n = Section(root, "fwd", kFwdKeys)) {
      c->fwd.enabled = true;
      if (auto v = Child(*n, "artifact")) String(*v, "fwd.artifact", &c->fwd.artifact);
      if (auto v = Child(*n, "node")) String(*v, "fwd.node", &c->fwd.node);
      if (auto v = Child(*n, "fabric")) String(*v, "fwd.fabric", &c->fwd.fabric);
      if (auto v = Child(*n, "ports")) StringList(*v, "fwd.ports", &c->fwd.ports);
    }
    if (auto n = Section(root, "metrics", kMetricsKeys)) {
      if (auto v = Child(*n, "enabled")) Bool(*v, "metrics.enabled", &c->metrics_enabled);
      if (auto v = Child(*n, "listen")) String(*v, "metrics.listen", &c->metrics_listen);
    }
    if (auto n = Section(root, "control", kControlKeys)) {
      if (auto v = Child(*n, "socket")) String(*v, "control.socket", &c->control_socket);
    }
    if (auto n = Section(root, "log", kLogKeys)) {
      if (auto v = Child(*n, "level")) String(*v, "log.level", &c->log_level);
    }
    if (auto n = Section(root, "eal", kEalKeys)) {
      if (auto v = Child(*n, "args")) StringList(*v, "eal.args", &c->eal_args);
    }
  }

  const Problems& problems() const { return problems_; }

 private:
  void Error(const YAML::Node& n, absl::string_view path, absl::string_view msg) {
    std::string where;
    YAML::Mark m = n.Mark();
    if (!m.is_null()) where = absl::StrCat(" (", source_, ":", m.line + 1, ":", m.column + 1, ")");
    problems_.Add(absl::StrCat(path.empty() ? "(top level)" : path, ": ", msg, where));
  }

  static std::string Describe(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Scalar:
        return Quote(n.Scalar());
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Map:
        return "a mapping";
      default:
        return "nothing";
    }
  }

  static std::optional<YAML::Node> Child(const YAML::Node& map, absl::string_view key) {
    if (!map.IsMap()) return std::nullopt;
    const YAML::Node v = map[std::string(key)];
    if (!v.IsDefined()) return std::nullopt;
    return v;
  }

  // True if `n` is a mapping; reports non-string, unknown and duplicate keys.
  template <size_t N>
  bool Map(const YAML::Node& n, absl::string_view path, const absl::string_view (&keys)[N]) {
    if (!n.IsMap()) {
      Error(n, path,
            absl::StrCat("expected a mapping with keys ", absl::StrJoin(keys, ", "), ", got ",
                         Describe(n)));
      return false;
    }
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node k = it->first;  // a copy: `it->first` lives in a temporary proxy
      if (!k.IsScalar()) {
        Error(k, path, absl::StrCat("keys must be plain names, got ", Describe(k)));
        continue;
      }
      const std::string& key = k.Scalar();
      if (!seen.insert(key).second) {
        Error(k, Join(path, key), "appears twice; keep one");
        continue;
      }
      if (std::find(std::begin(keys), std::end(keys), key) != std::end(keys)) continue;
      // Suggest only close matches: one edit for short keys, two for longer ones.
      const absl::string_view best = NearestKey(key, keys);
      std::string hint = best.empty() ? "" : absl::StrCat("did you mean ", Quote(best), "? ");
      Error(k, Join(path, key),
            absl::StrCat("unknown key; ", hint, "valid keys: ", absl::StrJoin(keys, ", ")));
    }
    return true;
  }

  // A top-level section: absent or empty ("memory:") means all defaults.
  template <size_t N>
  std::optional<YAML::Node> Section(const YAML::Node& root, absl::string_view key,
                                    const absl::string_view (&keys)[N]) {
    auto n = Child(root, key);
    if (!n || n->IsNull()) return std::nullopt;
    if (!Map(*n, key, keys)) return std::nullopt;
    return n;
  }

  template <typename T>
  bool Uint(const YAML::Node& n, const std::string& path, uint64_t lo, uint64_t hi, T* out) {
    std::string range = absl::StrCat("an integer in ", lo, "..", hi);
    if (!n.IsScalar()) {
      Error(n, path, absl::StrCat("expected ", range, ", got ", Describe(n)));
      return false;
    }
    uint64_t v = 0;
    switch (ParseUint(n.Scalar(), &v)) {
      case UintParse::kNotInteger:
        Error(n, path, absl::StrCat(Quote(n.Scalar()), " is not an integer; use ", range));
        return false;
      case UintParse::kNegative:
        Error(n, path, absl::StrCat(n.Scalar(), " is negative; use ", range));
        return false;
      case UintParse::kTooBig:
        Error(n, path, absl::StrCat(n.Scalar(), " is out of range; use ", range));
        return false;
      case UintParse::kOk:
        break;
    }
    if (v < lo || v > hi) {
      Error(n, path, absl::StrCat(v, " is out of range; use ", range));
      return false;
    }
    *out = static_cast<T>(v);
    return true;
  }

  void Bool(const YAML::Node& n, const std::string& path, bool* out) {
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      Error(n, path, absl::StrCat(Describe(n), " is not a boolean; use true or false"));
      return;
    }
    *out = v;
  }

  // Null ("key:" with no value) reads as the empty string.
  bool String(const YAML::Node& n, const std::string& path, std::string* out) {
    if (n.IsNull()) {
      out->clear();
      return true;
    }
    if (!n.IsScalar()) {
      Error(n, path, absl::StrCat("expected a string, got ", Describe(n)));
      return false;
    }
    if (size_t at = BadTextAt(n.Scalar()); at != absl::string_view::npos) {
      Error(n, path, BadTextMessage(at));
      return false;
    }
    *out = n.Scalar();
    return true;
  }

  void StringList(const YAML::Node& n, const std::string& path, std::vector<std::string>* out) {
    if (n.IsNull()) {
      out->clear();
      return;
    }
    if (!n.IsSequence()) {
      Error(n, path,
            absl::StrCat("expected a list of strings such as [\"--log-level=lib.eal:debug\"], got ",
                         Describe(n)));
      return;
    }
    out->clear();
    for (size_t i = 0; i < n.size(); ++i) {
      std::string s;
      if (String(n[i], absl::StrCat(path, "[", i, "]"), &s)) out->push_back(std::move(s));
    }
  }

  // A list of `size` values, each read by `item(node, path, index)`; false (reported) if `n` is
  // not a list of that length.
  template <typename F>
  bool FixedList(const YAML::Node& n, const std::string& path, int size, absl::string_view what,
                 F item) {
    if (!n.IsSequence() || static_cast<int>(n.size()) != size) {
      Error(n, path,
            absl::StrCat("expected a list of ", size, " ", what, " (one per storm.levels",
                         path == "storm.cutoffs" ? " boundary, levels - 1" : "", "), got ",
                         n.IsSequence() ? absl::StrCat(n.size(), " values") : Describe(n)));
      return false;
    }
    for (int i = 0; i < size; ++i) item(n[i], absl::StrCat(path, "[", i, "]"), i);
    return true;
  }

  void Storm(const YAML::Node& n, StormConfig* s) {
    storm::LevelConfig& l = s->levels;
    if (auto v = Child(n, "enabled")) Bool(*v, "storm.enabled", &s->enabled);
    if (auto v = Child(n, "levels")) Uint(*v, "storm.levels", 1, storm::kMaxLevels, &l.levels);
    const int k = l.levels;
    // Entries past K-1 / K are unused; keep them canonical so that configs compare equal.
    for (int i = std::max(k - 1, 0); i < storm::kMaxLevels - 1; ++i) l.cutoffs[i] = 0;
    if (auto v = Child(n, "cutoffs"); v && v->IsScalar() && v->Scalar() == "auto") {
      s->auto_cutoffs = true;
      // Until the first auto interval the levels need valid cutoffs for any K, not the default
      // ladder's three: 4 KiB, x16 each, kept strictly increasing past 2^31.
      uint64_t c = 4096;
      for (int i = 0; i + 1 < k; ++i, c *= 16) {
        l.cutoffs[i] = static_cast<uint32_t>(std::min<uint64_t>(c, (uint64_t{1} << 31) + i));
      }
    } else if (v) {
      FixedList(*v, "storm.cutoffs", k - 1, "strictly increasing byte sizes (or \"auto\")",
                [&](const YAML::Node& e, const std::string& path, int i) {
                  Uint(e, path, 1, UINT32_MAX, &l.cutoffs[i]);
                });
    }
    if (auto v = Child(n, "mode")) {
      std::string mode;
      if (String(*v, "storm.mode", &mode)) {
        if (mode == "per-message") {
          l.mode = storm::Mode::kPerMessage;
        } else if (mode == "per-packet") {
          l.mode = storm::Mode::kPerPacket;
        } else {
          Error(*v, "storm.mode",
                absl::StrCat(Quote(mode),
                             " is not a mode; use \"per-message\" (in-order RoCEv2) or "
                             "\"per-packet\""));
        }
      }
    }
    if (auto v = Child(n, "dscp")) {
      FixedList(*v, "storm.dscp", k, "DSCP values 0..63",
                [&](const YAML::Node& e, const std::string& path, int i) {
                  Uint(e, path, 0, 63, &l.dscp[i]);
                });
    }
    if (auto v = Child(n, "pcp")) {
      FixedList(*v, "storm.pcp", k, "PCP values -1..7 (-1 keeps the tag's)",
                [&](const YAML::Node& e, const std::string& path, int i) {
                  if (e.IsScalar() && e.Scalar() == "-1") {
                    l.pcp[i] = -1;
                  } else {
                    Uint(e, path, 0, 7, &l.pcp[i]);
                  }
                });
    }
    // Default: K-1, served first (docs/storm.md §3).
    l.control_level = static_cast<uint8_t>(k - 1);
    if (auto v = Child(n, "control_level")) {
      Uint(*v, "storm.control_level", 0, storm::kMaxLevels - 1, &l.control_level);
    }
    if (auto v = Child(n, "beta")) {
      double beta = 0;
      if (!v->IsScalar() || !absl::SimpleAtod(v->Scalar(), &beta) || !std::isfinite(beta) ||
          beta < 0) {
        Error(*v, "storm.beta",
              absl::StrCat(Describe(*v),
                           " is not a finite number >= 0; use 0 to ignore backlog, 1 default"));
      } else {
        l.beta = beta;
      }
    }
    if (auto v = Child(n, "backlog_max")) {
      Uint(*v, "storm.backlog_max", 0, UINT32_MAX, &l.backlog_max);
    }
    // Per-message mode: the size a request of unknown size is levelled as (docs/storm.md §3).
    uint64_t ignored = 0;
    if (auto v = Child(n, "unknown_size"); v && v->IsScalar() && v->Scalar() == "lowest") {
      l.unknown_size = storm::kUnknownSizeLowest;
    } else if (v && v->IsScalar() && ParseUint(v->Scalar(), &ignored) == UintParse::kNotInteger) {
      Error(*v, "storm.unknown_size",
            absl::StrCat(Quote(v->Scalar()),
                         " is not a size; use bytes 1..4294967295, or lowest (the default)"));
    } else if (v) {
      Uint(*v, "storm.unknown_size", 1, UINT32_MAX, &l.unknown_size);
    }
    if (auto v = Child(n, "qp_capacity"); v && v->IsScalar() && v->Scalar() == "auto") {
      s->qp_capacity = 0;
    } else if (v) {
      Uint(*v, "storm.qp_capacity", kMinQpCapacity, kMaxQpCapacity, &s->qp_capacity);
    }
    if (auto v = Child(n, "qps_per_host")) {
      Uint(*v, "storm.qps_per_host", kMinQpCapacity, kMaxQpCapacity, &s->qps_per_host);
    }
    if (auto v = Child(n, "qp_idle_ms")) {
      Uint(*v, "storm.qp_idle_ms", 1, UINT32_MAX / 2, &s->qp_idle_ms);
    }
    if (auto v = Child(n, "mtu")) Uint(*v, "storm.mtu", kMinStormMtu, kMaxStormMtu, &s->mtu);
    if (auto v = Child(n, "auto_interval_ms")) {
      Uint(*v, "storm.auto_interval_ms", 10, 3'600'000, &s->auto_interval_ms);
    }
    if (auto v = Child(n, "auto_keep")) {
      double keep = 0;
      if (!v->IsScalar() || !absl::SimpleAtod(v->Scalar(), &keep) || !(keep >= 0 && keep < 1)) {
        Error(*v, "storm.auto_keep",
              absl::StrCat(Describe(*v), " is not a number in [0, 1); use 0.5 (default) to halve ",
                           "older totals each interval, 0 to use the last interval only"));
      } else {
        s->auto_keep = keep;
      }
    }
    if (auto v = Child(n, "backlog_source")) {
      std::string src;
      if (String(*v, "storm.backlog_source", &src)) {
        if (src == "none") {
          s->backlog_source = storm::BacklogSource::kNone;
        } else if (src == "egress") {
          s->backlog_source = storm::BacklogSource::kEgressQueue;
        } else if (src == "host") {
          s->backlog_source = storm::BacklogSource::kHostShim;
        } else {
          Error(*v, "storm.backlog_source",
                absl::StrCat(Quote(src),
                             " is not a backlog source; use \"egress\" (heddled's own queues), "
                             "\"host\" (the verbs shim's tables) or \"none\""));
        }
      }
    }
    if (auto v = Child(n, "host_backlog_dir")) {
      String(*v, "storm.host_backlog_dir", &s->host_backlog_dir);
    }
    if (auto v = Child(n, "host_poll_ms"))
      Uint(*v, "storm.host_poll_ms", 1, 10'000, &s->host_poll_ms);
    if (auto v = Child(n, "queue_packets")) {
      Uint(*v, "storm.queue_packets", 16, 65'536, &s->queue_packets);
    }
    if (auto v = Child(n, "fabric_guard")) Bool(*v, "storm.fabric_guard", &s->fabric_guard);
    if (auto v = Child(n, "read_stream_capacity")) {
      Uint(*v, "storm.read_stream_capacity", kMinReadStreams, kMaxReadStreams,
           &s->read_stream_capacity);
    }
    if (auto v = Child(n, "response_window_ms")) {
      Uint(*v, "storm.response_window_ms", 0, 1000, &s->response_window_ms);
    }
    if (auto v = Child(n, "egress")) {
      Choice(*v, "storm.egress", kStormEgressNames, kStormEgressValues, &s->egress);
    }
    if (auto v = Child(n, "dcb_pfc")) Bool(*v, "storm.dcb_pfc", &s->dcb_pfc);
  }

  // One of `names` (in the order of `values`); else reported with the list.
  template <typename E, size_t N>
  void Choice(const YAML::Node& n, const std::string& path, const absl::string_view (&names)[N],
              const E (&values)[N], E* out) {
    std::string v;
    if (!String(n, path, &v)) return;
    for (size_t i = 0; i < N; ++i) {
      if (v == names[i]) {
        *out = values[i];
        return;
      }
    }
    std::vector<std::string> quoted;
    for (absl::string_view name : names) quoted.push_back(Quote(name));
    Error(n, path, absl::StrCat(Quote(v), " is not one of ", absl::StrJoin(quoted, ", ")));
  }

  // An entropy value: decimal or 0x-prefixed hex, at most 20 bits (the flow label's width; a
  // UDP source port's 16 are checked once the field is known).
  bool Entropy(const YAML::Node& n, const std::string& path, uint32_t* out) {
    if (n.IsScalar() && absl::StartsWithIgnoreCase(n.Scalar(), "0x")) {
      uint64_t v = 0;
      const std::string& t = n.Scalar();
      auto [ptr, ec] = std::from_chars(t.data() + 2, t.data() + t.size(), v, 16);
      if (ec != std::errc() || ptr != t.data() + t.size() || t.size() == 2 ||
          v > lb::kMaxFlowLabel) {
        Error(n, path,
              absl::StrCat(Quote(t),
                           " is not an entropy; use 0..1048575 or hex up to 0xfffff "
                           "(a UDP source port: up to 0xffff)"));
        return false;
      }
      *out = static_cast<uint32_t>(v);
      return true;
    }
    return Uint(n, path, 0, lb::kMaxFlowLabel, out);
  }

  void LbPathSet(const YAML::Node& n, const std::string& path, bool with_prefix,
                 LbPathSetConfig* s) {
    if (with_prefix) {
      if (!Map(n, path, kLbPrefixSetKeys)) return;
      if (auto v = Child(n, "prefix")) {
        if (String(*v, path + ".prefix", &s->prefix)) {
          if (absl::StatusOr<lb::Prefix> p = lb::ParsePrefix(s->prefix); !p.ok()) {
            Error(*v, path + ".prefix", p.status().message());
          }
        }
      } else {
        Error(n, path + ".prefix", "missing; give the destination prefix, e.g. 10.1.0.0/16");
      }
    } else if (!Map(n, path, kLbDefaultSetKeys)) {
      return;
    }
    if (auto v = Child(n, "ports")) StringList(*v, path + ".ports", &s->ports);
    if (auto v = Child(n, "entropies")) {
      Uint(*v, path + ".entropies", 1, lb::kMaxPaths, &s->entropies);
    }
    if (auto v = Child(n, "first_entropy")) Entropy(*v, path + ".first_entropy", &s->first_entropy);
    if (auto v = Child(n, "values")) {
      if (!v->IsSequence() || v->size() == 0 || v->size() > static_cast<size_t>(lb::kMaxPaths)) {
        Error(*v, path + ".values",
              absl::StrCat("expected a list of 1..", lb::kMaxPaths,
                           " entropy values such as [0xc000, 0xc011], got ",
                           v->IsSequence() ? absl::StrCat(v->size(), " values") : Describe(*v)));
      } else {
        s->values.clear();
        for (size_t i = 0; i < v->size(); ++i) {
          uint32_t e = 0;
          if (Entropy((*v)[i], absl::StrCat(path, ".values[", i, "]"), &e)) s->values.push_back(e);
        }
      }
    }
    if (auto v = Child(n, "next_hop_mac")) {
      if (String(*v, path + ".next_hop_mac", &s->next_hop_mac) && !s->next_hop_mac.empty() &&
          !ParseMac(s->next_hop_mac)) {
        Error(*v, path + ".next_hop_mac",
              absl::StrCat(Quote(s->next_hop_mac),
                           " is not a MAC address; write six hex bytes such as 02:00:00:00:00:09"));
      }
    }
  }

  void Lb(const YAML::Node& n, LbConfig* c) {
    lb::LbConfig& p = c->params;
    if (auto v = Child(n, "enabled")) Bool(*v, "lb.enabled", &c->enabled);
    if (auto v = Child(n, "balancer")) {
      std::string name;
      if (String(*v, "lb.balancer", &name)) {
        absl::StatusOr<lb::BalancerKind> k = lb::ParseBalancerKind(name);
        if (k.ok()) {
          p.balancer = *k;
        } else {
          Error(*v, "lb.balancer", k.status().message());
        }
      }
    }
    if (auto v = Child(n, "entropy")) {
      constexpr absl::string_view kNames[] = {"udp-sport", "flow-label"};
      constexpr lb::EntropyField kValues[] = {lb::EntropyField::kUdpSourcePort,
                                              lb::EntropyField::kIpv6FlowLabel};
      Choice(*v, "lb.entropy", kNames, kValues, &p.entropy_field);
    }
    if (auto v = Child(n, "seed")) Uint(*v, "lb.seed", 0, UINT64_MAX, &p.seed);
    if (auto v = Child(n, "flowlet_gap_ns")) {
      Uint(*v, "lb.flowlet_gap_ns", 1, 1'000'000'000, &p.flowlet_gap_ns);
    }
    if (auto v = Child(n, "reps_cache_size")) {
      Uint(*v, "lb.reps_cache_size", 1, lb::kMaxRepsCache, &p.reps_cache_size);
    }
    if (auto v = Child(n, "flow_capacity")) {
      Uint(*v, "lb.flow_capacity", kMinLbFlows, kMaxLbFlows, &p.flow_capacity);
    }
    if (auto v = Child(n, "flow_idle_ms")) {
      uint64_t ms = 0;
      if (Uint(*v, "lb.flow_idle_ms", 1, 3'600'000, &ms)) p.flow_idle_ns = ms * 1'000'000;
    }
    if (auto v = Child(n, "link_gbps")) Uint(*v, "lb.link_gbps", 1, 3200, &p.link_gbps);
    if (auto v = Child(n, "rtt_ns")) Uint(*v, "lb.rtt_ns", 1, 100'000'000, &p.rtt_ns);
    if (auto pin = Child(n, "pin"); pin && !pin->IsNull() && Map(*pin, "lb.pin", kLbPinKeys)) {
      if (auto v = Child(*pin, "enabled")) Bool(*v, "lb.pin.enabled", &p.pin);
      if (auto v = Child(*pin, "threshold_bytes"); v && v->IsScalar() && v->Scalar() == "auto") {
        p.threshold_bytes = 0;
      } else if (v) {
        Uint(*v, "lb.pin.threshold_bytes", 1, kMaxLbThreshold, &p.threshold_bytes);
      }
      if (auto v = Child(*pin, "policy")) {
        constexpr absl::string_view kNames[] = {"hash", "least-loaded", "balancer"};
        constexpr lb::PinPolicy kValues[] = {lb::PinPolicy::kHash, lb::PinPolicy::kLeastLoaded,
                                             lb::PinPolicy::kBalancer};
        Choice(*v, "lb.pin.policy", kNames, kValues, &p.pin_policy);
      }
      if (auto v = Child(*pin, "flow")) {
        constexpr absl::string_view kNames[] = {"request", "qp"};
        constexpr lb::FlowUnit kValues[] = {lb::FlowUnit::kRequest, lb::FlowUnit::kQp};
        Choice(*v, "lb.pin.flow", kNames, kValues, &p.flow_unit);
      }
      if (auto v = Child(*pin, "crossing")) {
        constexpr absl::string_view kNames[] = {"stay-pinned", "spray-rest"};
        constexpr lb::CrossingRule kValues[] = {lb::CrossingRule::kStayPinned,
                                                lb::CrossingRule::kSprayRest};
        Choice(*v, "lb.pin.crossing", kNames, kValues, &p.crossing);
      }
    }
    auto paths = Child(n, "paths");
    if (!paths || paths->IsNull() || !Map(*paths, "lb.paths", kLbPathsKeys)) return;
    if (auto v = Child(*paths, "default")) {
      if (v->IsScalar() && v->Scalar() == "none") {
        c->has_default_paths = false;
      } else if (!v->IsNull()) {
        c->has_default_paths = true;
        LbPathSet(*v, "lb.paths.default", false, &c->default_paths);
      }
    }
    if (auto v = Child(*paths, "prefixes"); v && !v->IsNull()) {
      if (!v->IsSequence()) {
        Error(*v, "lb.paths.prefixes",
              absl::StrCat("expected a list of path sets (\"- prefix: 10.1.0.0/16 ...\"), got ",
                           Describe(*v)));
        return;
      }
      for (size_t i = 0; i < v->size(); ++i) {
        LbPathSetConfig set;
        LbPathSet((*v)[i], absl::StrCat("lb.paths.prefixes[", i, "]"), true, &set);
        c->prefixes.push_back(std::move(set));
      }
    }
  }

  void Lcores(const YAML::Node& n, Config* c) {
    const std::string range = absl::StrCat("0..", kMaxLcores - 1);
    if (auto v = Child(n, "main")) Uint(*v, "lcores.main", 0, kMaxLcores - 1, &c->main_lcore);
    auto w = Child(n, "workers");
    if (!w) return;
    if (w->IsSequence()) {
      c->worker_lcores.clear();
      for (size_t i = 0; i < w->size(); ++i) {
        unsigned id = 0;
        if (Uint((*w)[i], absl::StrCat("lcores.workers[", i, "]"), 0, kMaxLcores - 1, &id)) {
          c->worker_lcores.push_back(id);
        }
      }
      return;
    }
    if (!w->IsScalar()) {
      Error(*w, "lcores.workers",
            absl::StrCat("expected a list of lcore ids such as [1, 2] or a string such as "
                         "\"1-3,5\", got ",
                         Describe(*w)));
      return;
    }
    // "1-3,5" (the EAL's own list syntax); a single integer is a one-element list.
    std::vector<unsigned> ids;
    for (absl::string_view item : absl::StrSplit(w->Scalar(), ',')) {
      item = absl::StripAsciiWhitespace(item);
      std::vector<absl::string_view> ends = absl::StrSplit(item, absl::MaxSplits('-', 1));
      uint64_t lo = 0, hi = 0;
      bool ok = ParseUint(absl::StripAsciiWhitespace(ends[0]), &lo) == UintParse::kOk;
      hi = lo;
      if (ok && ends.size() == 2) {
        ok = ParseUint(absl::StripAsciiWhitespace(ends[1]), &hi) == UintParse::kOk;
      }
      if (!ok) {
        Error(*w, "lcores.workers",
              absl::StrCat(Quote(item), " in ", Quote(w->Scalar()),
                           " is not an lcore id or range; write ids and ranges such as \"1-3,5\""));
        return;
      }
      if (lo > hi) {
        Error(*w, "lcores.workers",
              absl::StrCat("range ", Quote(item), " runs backwards; write it low-high, e.g. \"", hi,
                           "-", lo, "\""));
        return;
      }
      if (hi >= kMaxLcores) {
        Error(*w, "lcores.workers",
              absl::StrCat("lcore ", hi, " in ", Quote(item), " is out of range; use lcore ids in ",
                           range));
        return;
      }
      for (uint64_t id = lo; id <= hi; ++id) ids.push_back(static_cast<unsigned>(id));
    }
    c->worker_lcores = std::move(ids);
  }

  void Ports(const YAML::Node& n, Config* c) {
    if (n.IsNull()) return;
    if (!n.IsSequence()) {
      Error(n, "ports",
            absl::StrCat("expected a list of ports (\"- name: host0 ...\"), got ", Describe(n)));
      return;
    }
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node p = n[i];
      const std::string path = absl::StrCat("ports[", i, "]");
      PortConfig pc;
      if (!Map(p, path, kPortKeys)) {
        c->ports.push_back(std::move(pc));
        continue;
      }
      if (auto v = Child(p, "name")) {
        String(*v, path + ".name", &pc.name);
      } else {
        Error(p, path + ".name", "missing; give every port a unique name such as host0");
      }
      if (auto v = Child(p, "role")) {
        std::string role;
        if (String(*v, path + ".role", &role)) {
          if (role == "host") {
            pc.role = PortRole::kHost;
          } else if (role == "uplink") {
            pc.role = PortRole::kUplink;
          } else {
            Error(*v, path + ".role",
                  absl::StrCat(Quote(role), " is not a role; use \"host\" or \"uplink\""));
          }
        }
      } else {
        Error(p, path + ".role", "missing; set \"host\" or \"uplink\"");
      }
      if (auto v = Child(p, "pci")) {
        if (String(*v, path + ".pci", &pc.pci)) {
          // Stored normalised; Validate() reports a malformed address.
          if (auto norm = NormalizePci(pc.pci)) pc.pci = *norm;
        }
      }
      if (auto v = Child(p, "vdev")) String(*v, path + ".vdev", &pc.vdev);
      if (auto v = Child(p, "devargs")) String(*v, path + ".devargs", &pc.devargs);
      if (auto v = Child(p, "rx_queues")) {
        Uint(*v, path + ".rx_queues", 1, kMaxRxQueues, &pc.rx_queues);
      }
      if (auto v = Child(p, "rx_desc"))
        Uint(*v, path + ".rx_desc", kMinDesc, kMaxDesc, &pc.rx_desc);
      if (auto v = Child(p, "tx_desc"))
        Uint(*v, path + ".tx_desc", kMinDesc, kMaxDesc, &pc.tx_desc);
      if (auto v = Child(p, "mtu")) Uint(*v, path + ".mtu", 0, kMaxMtu, &pc.mtu);
      if (auto v = Child(p, "promiscuous")) Bool(*v, path + ".promiscuous", &pc.promiscuous);
      if (auto v = Child(p, "peer")) String(*v, path + ".peer", &pc.peer);
      c->ports.push_back(std::move(pc));
    }
  }

  std::string source_;
  Problems problems_;
};

}  // namespace

const char* PortRoleName(PortRole r) { return r == PortRole::kHost ? "host" : "uplink"; }

const char* StormEgressName(StormEgress e) {
  // kStormEgressNames is indexed by the enum (checked where the tables are defined); its entries
  // are string literals, so data() is NUL-terminated.
  const auto i = static_cast<size_t>(e);
  return i < std::size(kStormEgressNames) ? kStormEgressNames[i].data() : "?";
}

uint64_t MbufsNeeded(const Config& c) {
  const uint64_t workers = c.worker_lcores.size();
  uint64_t n = 0;
  for (const PortConfig& p : c.ports) {
    n += uint64_t{p.rx_queues} * p.rx_desc + workers * p.tx_desc;
  }
  n += workers * c.burst_size * 2;
  n += uint64_t{c.mbuf_cache} * (workers + 1);
  // STORM's strict-priority egress queues hold up to queue_packets per port per worker.
  if (c.storm.enabled) n += workers * c.ports.size() * c.storm.queue_packets;
  // With DCB TX an uplink's workers each fill one TX ring per traffic class, not one.
  if (c.storm.enabled && c.storm.egress != StormEgress::kSoftware) {
    if (absl::StatusOr<storm::TcMap> m = storm::MapLevelsToTcs(c.storm.levels); m.ok()) {
      for (const PortConfig& p : c.ports) {
        if (p.role == PortRole::kUplink) n += workers * p.tx_desc * (m->nb_tcs - 1u);
      }
    }
  }
  return n;
}

absl::Status Validate(const Config& c) {
  Problems p;
  const std::string lcore_range = absl::StrCat("0..", kMaxLcores - 1);

  // lcores
  if (c.main_lcore >= kMaxLcores) {
    p.Add(absl::StrCat("lcores.main: ", c.main_lcore, " is out of range; use an lcore id in ",
                       lcore_range, " (RTE_MAX_LCORE is ", kMaxLcores, ")"));
  }
  if (c.worker_lcores.empty()) {
    p.Add("lcores.workers: empty; list at least one worker lcore, e.g. [1]");
  }
  std::set<unsigned> seen_lcores;
  for (unsigned w : c.worker_lcores) {
    if (w >= kMaxLcores) {
      p.Add(absl::StrCat("lcores.workers: lcore ", w, " is out of range; use lcore ids in ",
                         lcore_range, " (RTE_MAX_LCORE is ", kMaxLcores, ")"));
    } else if (w == c.main_lcore) {
      p.Add(absl::StrCat("lcores.workers: lcore ", w,
                         " is also lcores.main; the main lcore runs the control thread, so give "
                         "the workers other lcores or move lcores.main"));
    } else if (!seen_lcores.insert(w).second) {
      p.Add(absl::StrCat("lcores.workers: lcore ", w, " is listed twice; list each lcore once"));
    }
  }

  // memory
  if (c.no_huge && c.memory_mb == 0) {
    p.Add(
        "memory.size_mb: 0 with memory.no_huge: true; without hugepages the EAL needs an "
        "explicit size, e.g. size_mb: 512");
  }
  if (c.memory_mb > kMaxMemoryMb) {
    p.Add(absl::StrCat("memory.size_mb: ", c.memory_mb, " is out of range; use 0..", kMaxMemoryMb,
                       " (0 = EAL default)"));
  }
  if (!IsFilePrefix(c.file_prefix)) {
    p.Add(absl::StrCat("memory.file_prefix: ", Quote(c.file_prefix),
                       " is not a valid prefix; use up to 64 of [A-Za-z0-9_.-], or \"\" to run "
                       "in memory"));
  }

  // mempool
  if (c.mbufs == 0) p.Add("mempool.mbufs: 0; the mbuf pool needs mbufs, e.g. 8191");
  if (c.mbuf_cache > kMaxMbufCache) {
    p.Add(
        absl::StrCat("mempool.cache: ", c.mbuf_cache, " is out of range; use 0..", kMaxMbufCache));
  }
  if (c.mbuf_data_room < kMinDataRoom) {
    p.Add(absl::StrCat("mempool.data_room: ", c.mbuf_data_room, " is out of range; use ",
                       kMinDataRoom, "..65535 (2176 holds a 1500-byte MTU frame)"));
  }

  // ports
  size_t hosts = 0, uplinks = 0;
  for (const PortConfig& port : c.ports) (port.role == PortRole::kHost ? hosts : uplinks)++;
  if (c.ports.empty()) {
    p.Add(
        "ports: none configured; add at least one port with role: host and one with "
        "role: uplink");
  } else {
    if (hosts == 0) p.Add("ports: no port has role: host; heddled needs at least one host port");
    if (uplinks == 0) {
      p.Add("ports: no port has role: uplink; heddled needs at least one uplink port");
    }
  }
  if (c.ports.size() > kMaxPorts) {
    p.Add(absl::StrCat("ports: ", c.ports.size(), " ports configured; at most ", kMaxPorts,
                       " are supported"));
  }
  std::map<std::string, size_t> names, devices;
  for (size_t i = 0; i < c.ports.size(); ++i) {
    const PortConfig& port = c.ports[i];
    const std::string path = absl::StrCat("ports[", i, "]");
    if (!IsPortName(port.name)) {
      p.Add(absl::StrCat(path, ".name: ", Quote(port.name),
                         " is not a valid port name; use 1 to 32 of [a-z0-9_-], e.g. host0"));
    } else if (auto [it, fresh] = names.emplace(port.name, i); !fresh) {
      p.Add(absl::StrCat(path, ".name: ", Quote(port.name), " is already ports[", it->second,
                         "].name; port names must be unique"));
    }
    std::string device;  // what the EAL registers the port under, to catch a device used twice
    if (!port.pci.empty() && !port.vdev.empty()) {
      p.Add(absl::StrCat(path,
                         ": both pci and vdev are set; keep pci for a NIC or vdev for a "
                         "virtual device, not both"));
    } else if (port.pci.empty() && port.vdev.empty()) {
      p.Add(absl::StrCat(path,
                         ": neither pci nor vdev is set; set pci: \"0000:3b:00.0\" for a "
                         "NIC or vdev: \"net_pcap0,rx_pcap=in.pcap\" for a virtual device"));
    } else if (!port.pci.empty()) {
      if (auto norm = NormalizePci(port.pci)) {
        device = *norm;
      } else {
        p.Add(absl::StrCat(path, ".pci: ", Quote(port.pci),
                           " is not a PCI address; use domain:bus:device.function such as "
                           "0000:3b:00.0 (see `lspci -D` or `dpdk-devbind.py -s`)"));
      }
    } else {
      device = VdevName(port.vdev);
      if (device.empty()) {
        p.Add(absl::StrCat(path, ".vdev: ", Quote(port.vdev),
                           " does not start with a DPDK net driver instance name; use e.g. "
                           "\"net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap\", \"net_ring0\" or "
                           "\"net_null0\""));
      }
      if (!port.devargs.empty()) {
        p.Add(absl::StrCat(path,
                           ".devargs: only applies to pci ports; append the arguments to "
                           "vdev instead, e.g. \"",
                           device.empty() ? "net_pcap0" : device, ",", port.devargs, "\""));
      }
    }
    if (!device.empty()) {
      if (auto [it, fresh] = devices.emplace(device, i); !fresh) {
        p.Add(absl::StrCat(path, ".", port.pci.empty() ? "vdev" : "pci", ": device ", device,
                           " is already ports[", it->second,
                           "]; each device backs one port (number vdevs: net_ring0, net_ring1)"));
      }
    }
    if (port.rx_queues < 1 || port.rx_queues > kMaxRxQueues) {
      p.Add(absl::StrCat(path, ".rx_queues: ", port.rx_queues, " is out of range; use 1..",
                         kMaxRxQueues));
    }
    for (auto [key, v] : {std::pair{"rx_desc", port.rx_desc}, std::pair{"tx_desc", port.tx_desc}}) {
      if (v < kMinDesc || v > kMaxDesc || (v & (v - 1)) != 0) {
        p.Add(absl::StrCat(path, ".", key, ": ", v, " is not a power of two in ", kMinDesc, "..",
                           kMaxDesc, "; use e.g. 512, 1024 or 4096"));
      }
    }
    if (port.mtu != 0 && (port.mtu < kMinMtu || port.mtu > kMaxMtu)) {
      p.Add(absl::StrCat(path, ".mtu: ", port.mtu, " is out of range; use 0 (driver default) or ",
                         kMinMtu, "..", kMaxMtu));
    } else if (const unsigned mtu = port.mtu != 0 ? port.mtu : kDefaultMtu;
               c.mbuf_data_room >= kMinDataRoom &&
               mtu + kFrameOverhead > c.mbuf_data_room - kMbufHeadroom) {
      // Receive does not scatter frames across mbufs: a whole frame must fit in one. mtu 0 leaves
      // the driver default, 1500 on Ethernet ports.
      p.Add(absl::StrCat(path, ".mtu: ", mtu, port.mtu == 0 ? " (the driver default)" : "",
                         " does not fit in one mbuf (mempool.data_room ", c.mbuf_data_room,
                         " minus ", kMbufHeadroom, " B headroom leaves ",
                         c.mbuf_data_room - kMbufHeadroom, " B, a frame needs mtu + ",
                         kFrameOverhead, "); raise mempool.data_room to at least ",
                         mtu + kFrameOverhead + kMbufHeadroom, " or lower the mtu"));
    }
  }
  for (size_t i = 0; i < c.ports.size(); ++i) {
    const PortConfig& port = c.ports[i];
    if (port.peer.empty()) continue;
    const std::string path = absl::StrCat("ports[", i, "].peer");
    auto it = names.find(port.peer);
    if (it == names.end()) {
      std::vector<std::string> others;
      for (const PortConfig& o : c.ports) {
        if (o.role != port.role && !o.name.empty()) others.push_back(o.name);
      }
      p.Add(absl::StrCat(path, ": ", Quote(port.peer), " names no port; use the name of ",
                         port.role == PortRole::kHost ? "an uplink" : "a host", " port",
                         others.empty() ? "" : absl::StrCat(" (", absl::StrJoin(others, ", "), ")"),
                         ", or remove peer for the default pairing"));
    } else if (c.ports[it->second].role == port.role) {
      p.Add(absl::StrCat(path, ": ", Quote(port.peer), " is also a ", PortRoleName(port.role),
                         " port; a peer must have the other role (",
                         port.role == PortRole::kHost ? "uplink" : "host", ")"));
    }
  }

  // Free-form strings; the others are checked against their own formats above or below.
  auto check_text = [&p](const std::string& path, const std::string& v) {
    if (size_t at = BadTextAt(v); at != absl::string_view::npos) {
      p.Add(absl::StrCat(path, ": ", BadTextMessage(at)));
    }
  };
  for (size_t i = 0; i < c.ports.size(); ++i) {
    check_text(absl::StrCat("ports[", i, "].vdev"), c.ports[i].vdev);
    check_text(absl::StrCat("ports[", i, "].devargs"), c.ports[i].devargs);
  }
  check_text("control.socket", c.control_socket);
  for (size_t i = 0; i < c.eal_args.size(); ++i) {
    check_text(absl::StrCat("eal.args[", i, "]"), c.eal_args[i]);
  }

  // dataplane
  if (c.burst_size < 1 || c.burst_size > kMaxBurst) {
    p.Add(absl::StrCat("dataplane.burst_size: ", c.burst_size, " is out of range; use 1..",
                       kMaxBurst, " (32 is the usual choice)"));
  }

  // The pool must cover every mbuf the rings, bursts and caches can hold at once, or RX starves.
  if (uint64_t need = MbufsNeeded(c); c.mbufs > 0 && c.mbufs < need) {
    p.Add(absl::StrCat("mempool.mbufs: ", c.mbufs, " is too few for the configured rings; ", need,
                       " are needed (sum over ports of rx_queues*rx_desc + workers*tx_desc, "
                       "+ workers*burst_size*2 + cache*(workers+1)",
                       c.storm.enabled ? " + workers*ports*storm.queue_packets" : "",
                       c.storm.enabled && c.storm.egress != StormEgress::kSoftware
                           ? " + workers*tx_desc*(traffic classes - 1) per uplink for DCB TX"
                           : "",
                       "); set mbufs: ", SuggestedMbufs(need), " or shrink the rings"));
  }

  // storm: the level parameters are checked by the library, whose messages name storm.* keys.
  // DCB TX serves the STORM levels, so it (and PFC on it) only means something with STORM on;
  // the level -> TC map is checked only then (docs/storm.md §6.7).
  if (absl::Status s = storm::ValidateLevelConfig(c.storm.levels); !s.ok()) {
    p.Add(std::string(s.message()));
  } else if (c.storm.enabled && c.storm.egress != StormEgress::kSoftware) {
    // DCB TX needs a traffic class per level.
    if (absl::StatusOr<storm::TcMap> m = storm::MapLevelsToTcs(c.storm.levels); !m.ok()) {
      p.Add(std::string(m.status().message()));
    }
  }
  if (!c.storm.enabled && c.storm.egress != StormEgress::kSoftware) {
    p.Add(absl::StrCat("storm.egress: ", StormEgressName(c.storm.egress),
                       " needs storm.enabled: true (DCB TX queues serve the STORM levels); "
                       "set storm.enabled: true, or storm.egress: software"));
  }
  if (c.storm.dcb_pfc && !c.storm.enabled) {
    p.Add(
        "storm.dcb_pfc: true needs storm.enabled: true and storm.egress: dcb (or auto); "
        "enable STORM or drop dcb_pfc");
  } else if (c.storm.dcb_pfc && c.storm.egress == StormEgress::kSoftware) {
    p.Add("storm.dcb_pfc: true needs DCB TX; set storm.egress: dcb (or auto), or drop dcb_pfc");
  }
  auto power_of_two = [](uint32_t v) { return v != 0 && (v & (v - 1)) == 0; };
  if (c.storm.qp_capacity != 0 &&
      (c.storm.qp_capacity < kMinQpCapacity || c.storm.qp_capacity > kMaxQpCapacity ||
       !power_of_two(c.storm.qp_capacity))) {
    p.Add(absl::StrCat("storm.qp_capacity: ", c.storm.qp_capacity, " is not a power of two in ",
                       kMinQpCapacity, "..", kMaxQpCapacity,
                       "; use e.g. 65536 (66 B per entry per worker), or auto"));
  }
  if (c.storm.read_stream_capacity < kMinReadStreams ||
      c.storm.read_stream_capacity > kMaxReadStreams ||
      !power_of_two(c.storm.read_stream_capacity)) {
    p.Add(absl::StrCat("storm.read_stream_capacity: ", c.storm.read_stream_capacity,
                       " is not a power of two in ", kMinReadStreams, "..", kMaxReadStreams,
                       "; use e.g. 16384 (128 B per entry per worker)"));
  }
  if (c.storm.response_window_ms > 1000) {
    p.Add(absl::StrCat("storm.response_window_ms: ", c.storm.response_window_ms,
                       " is not in 0..1000; use e.g. 2 (0 turns the response window off)"));
  }
  if (c.storm.qps_per_host < kMinQpCapacity || c.storm.qps_per_host > kMaxQpCapacity) {
    p.Add(absl::StrCat("storm.qps_per_host: ", c.storm.qps_per_host, " is not in ", kMinQpCapacity,
                       "..", kMaxQpCapacity, "; use e.g. 1048576"));
  }
  if (c.storm.qp_idle_ms == 0) {
    p.Add("storm.qp_idle_ms: 0; an entry must be idle a while before eviction, e.g. 10000");
  }
  if (c.storm.mtu < kMinStormMtu || c.storm.mtu > kMaxStormMtu || !power_of_two(c.storm.mtu)) {
    p.Add(absl::StrCat("storm.mtu: ", c.storm.mtu, " is not a RoCE path MTU; use 256, 512, 1024, ",
                       "2048 or 4096"));
  }

  // lb: the selector's parameters (the threshold it derives first: the library would name its own
  // field), then, when enabled, the path sets.
  if (c.lb.params.threshold_bytes == 0 && c.lb.params.link_gbps != 0 && c.lb.params.rtt_ns != 0 &&
      lb::EffectiveThreshold(c.lb.params) > kMaxLbThreshold) {
    p.Add(absl::StrCat("lb.pin.threshold_bytes: auto derives ", lb::EffectiveThreshold(c.lb.params),
                       " bytes from lb.link_gbps x lb.rtt_ns / 8, more than the largest RDMA "
                       "message (2^31); lower them or set lb.pin.threshold_bytes"));
  } else if (absl::Status s = lb::ValidateLbConfig(c.lb.params); !s.ok()) {
    p.Add(std::string(s.message()));
  }
  if (c.lb.enabled) {
    if (!c.lb.has_default_paths && c.lb.prefixes.empty()) {
      p.Add(
          "lb.paths: no path set (default: none and no prefixes); nothing would be balanced, "
          "list prefixes or keep a default set");
    } else if (absl::StatusOr<lb::PathTableSpec> spec = LbPathTableSpec(c); !spec.ok()) {
      p.Add(std::string(spec.status().message()));
    } else if (absl::StatusOr<std::unique_ptr<const lb::PathTable>> t = lb::PathTable::Build(*spec);
               !t.ok()) {
      p.Add(absl::StrCat("lb.paths: ", t.status().message()));
    }
  }

  // fwd: the node's form here; whether the artifact has it is the install's to check.
  if (c.fwd.enabled) {
    if (c.fwd.node.empty()) {
      p.Add(
          "fwd.node: missing; name this host as the fabric does, e.g. node: \"host[12]\" or its "
          "address node: 10.0.3.4");
    } else if (!IsFwdNodeName(c.fwd.node)) {
      p.Add(absl::StrCat("fwd.node: ", Quote(c.fwd.node),
                         " is neither name[index] (\"host[12]\") nor an IPv4 address"));
    }
    check_text("fwd.artifact", c.fwd.artifact);
    check_text("fwd.fabric", c.fwd.fabric);
    if (absl::StatusOr<std::vector<uint16_t>> m = FwdPortMap(c); !m.ok()) {
      p.Add(std::string(m.status().message()));
    }
  }

  // metrics
  if (auto why = ListenProblem(c.metrics_listen)) {
    p.Add(absl::StrCat("metrics.listen: ", Quote(c.metrics_listen), " ", *why));
  }

  // control
  if (c.control_socket.empty() || c.control_socket[0] != '/') {
    p.Add(absl::StrCat("control.socket: ", Quote(c.control_socket),
                       " is not an absolute path; use e.g. /run/heddle/heddled.sock"));
  } else if (c.control_socket.size() > kMaxSocketPath) {
    p.Add(absl::StrCat("control.socket: path is ", c.control_socket.size(),
                       " bytes long; a unix socket path holds at most ", kMaxSocketPath,
                       ", use a shorter one such as /run/heddle/heddled.sock"));
  }

  // log
  if (std::find(std::begin(kLogLevels), std::end(kLogLevels), c.log_level) ==
      std::end(kLogLevels)) {
    p.Add(absl::StrCat("log.level: ", Quote(c.log_level),
                       " is not a level; use error, warning, info or debug"));
  }

  // eal
  for (size_t i = 0; i < c.eal_args.size(); ++i) {
    if (auto instead = DerivedFrom(c.eal_args[i])) {
      p.Add(absl::StrCat("eal.args[", i, "]: ", Quote(c.eal_args[i]),
                         " is derived by heddled; set ", *instead, " instead"));
    }
  }
  return p.ToStatus();
}

namespace {

absl::Status SyntaxError(const std::string& source, const YAML::Mark& mark,
                         absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", mark.line + 1, ":", mark.column + 1, ": YAML syntax error: ", what,
                   "; fix the YAML there (indentation, a missing ':', an unclosed quote or "
                   "bracket, tabs instead of spaces)"));
}

}  // namespace

absl::StatusOr<lb::PathTableSpec> LbPathTableSpec(const Config& c) {
  const lb::EntropyField field = c.lb.params.entropy_field;
  // Each set alone first, so that an error names its key.
  auto one = [&](const LbPathSetConfig& s,
                 const std::string& where) -> absl::StatusOr<std::vector<lb::Path>> {
    lb::PrefixPathsConfig pc;
    pc.ports.clear();
    if (s.ports.empty()) {
      for (size_t i = 0; i < c.ports.size(); ++i) {
        if (c.ports[i].role == PortRole::kUplink) pc.ports.push_back(static_cast<uint16_t>(i));
      }
      if (pc.ports.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".ports: empty (every uplink) but no port has role uplink"));
      }
    }
    for (size_t k = 0; k < s.ports.size(); ++k) {
      size_t i = 0;
      while (i < c.ports.size() && c.ports[i].name != s.ports[k]) ++i;
      if (i == c.ports.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".ports[", k, "]: ", Quote(s.ports[k]), " names no port; use a ports[].name"));
      }
      if (c.ports[i].role != PortRole::kUplink) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".ports[", k, "]: ", Quote(s.ports[k]),
                         " is a host port; a path leaves on an uplink port"));
      }
      if (std::find(pc.ports.begin(), pc.ports.end(), i) != pc.ports.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".ports[", k, "]: ", Quote(s.ports[k]), " listed twice"));
      }
      pc.ports.push_back(static_cast<uint16_t>(i));
    }
    pc.entropies = s.entropies;
    pc.first_entropy = s.first_entropy;
    pc.values = s.values;
    lb::PathConfig one_set;
    one_set.default_paths = pc;
    absl::StatusOr<lb::PathTableSpec> spec = lb::PathTableSpecFromConfig(one_set, field);
    if (!spec.ok()) {
      // The library says "default paths: ..."; say which key instead.
      std::string msg(spec.status().message());
      if (absl::StartsWith(msg, "default paths")) msg = msg.substr(strlen("default paths"));
      return absl::InvalidArgumentError(absl::StrCat(where, msg));
    }
    std::vector<lb::Path> paths = std::move(spec->sets[0]);
    if (!s.next_hop_mac.empty()) {
      std::optional<lb::Mac> mac = ParseMac(s.next_hop_mac);
      if (!mac) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".next_hop_mac: ", Quote(s.next_hop_mac), " is not a MAC address"));
      }
      for (lb::Path& path : paths) {
        path.has_next_hop_mac = true;
        path.next_hop_mac = *mac;
      }
    }
    return paths;
  };
  lb::PathTableSpec spec;
  std::set<std::pair<std::array<uint8_t, 16>, uint8_t>> seen;
  for (size_t i = 0; i < c.lb.prefixes.size(); ++i) {
    const std::string where = absl::StrCat("lb.paths.prefixes[", i, "]");
    const LbPathSetConfig& s = c.lb.prefixes[i];
    absl::StatusOr<lb::Prefix> prefix = lb::ParsePrefix(s.prefix);
    if (!prefix.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".prefix: ", prefix.status().message()));
    }
    if (!seen.insert({prefix->addr, prefix->len}).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".prefix: ", Quote(s.prefix), " is listed twice; keep one"));
    }
    absl::StatusOr<std::vector<lb::Path>> paths = one(s, where);
    if (!paths.ok()) return paths.status();
    spec.routes.push_back({*prefix, static_cast<uint32_t>(spec.sets.size())});
    spec.sets.push_back(*std::move(paths));
  }
  if (c.lb.has_default_paths) {
    absl::StatusOr<std::vector<lb::Path>> paths = one(c.lb.default_paths, "lb.paths.default");
    if (!paths.ok()) return paths.status();
    spec.default_set = static_cast<int32_t>(spec.sets.size());
    spec.sets.push_back(*std::move(paths));
  }
  return spec;
}

absl::StatusOr<std::vector<uint16_t>> FwdPortMap(const Config& c) {
  std::vector<uint16_t> map;
  if (c.fwd.ports.empty()) {
    for (size_t i = 0; i < c.ports.size(); ++i) {
      if (c.ports[i].role == PortRole::kUplink) map.push_back(static_cast<uint16_t>(i));
    }
    if (map.empty()) {
      return absl::InvalidArgumentError(
          "fwd.ports: empty (every uplink) but no port has role uplink");
    }
    return map;
  }
  for (size_t k = 0; k < c.fwd.ports.size(); ++k) {
    const std::string& name = c.fwd.ports[k];
    size_t i = 0;
    while (i < c.ports.size() && c.ports[i].name != name) ++i;
    if (i == c.ports.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("fwd.ports[", k, "]: ", Quote(name), " names no port; use a ports[].name"));
    }
    if (c.ports[i].role != PortRole::kUplink) {
      return absl::InvalidArgumentError(
          absl::StrCat("fwd.ports[", k, "]: ", Quote(name),
                       " is a host port; the artifact's host ports are uplinks"));
    }
    if (std::find(map.begin(), map.end(), i) != map.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("fwd.ports[", k, "]: ", Quote(name), " listed twice"));
    }
    map.push_back(static_cast<uint16_t>(i));
  }
  return map;
}

uint32_t QpCapacityPerWorker(const Config& c) {
  if (c.storm.qp_capacity != 0) return c.storm.qp_capacity;
  const uint64_t workers = std::max<size_t>(c.worker_lcores.size(), 1);
  const uint64_t per_worker = (c.storm.qps_per_host + workers - 1) / workers;
  const uint64_t slots = (per_worker * 10 + 8) / 9;  // at most 90 % full
  return static_cast<uint32_t>(
      std::clamp<uint64_t>(std::bit_ceil(slots), kMinQpCapacity, kMaxQpCapacity));
}

absl::StatusOr<Config> LoadString(const std::string& yaml, const std::string& source) {
  Config c;
  try {
    // yaml-cpp 0.7 neither rejects nor consumes a stray ',' before a document's content: Load()
    // returns an empty document and LoadAll() loops forever, yielding more of them. So walk the
    // documents with the event parser, stopping at the second, and treat a document that starts
    // where the previous one started as the syntax error it is.
    if (std::optional<SecondYamlDocument> second = FindSecondYamlDocument(yaml)) {
      const YAML::Mark& m = second->mark;
      if (second->stray) {
        return SyntaxError(
            source, m,
            absl::StrCat("unexpected ", Quote(absl::string_view(yaml).substr(m.pos, 1)),
                         " where a document's content should start"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": holds more than one YAML document (the second starts at line ",
                       m.line + 1, "); heddled reads one, so remove the extra '---' separators"));
    }
    Parser parser(source);
    parser.Parse(YAML::Load(yaml), &c);
    if (!parser.problems().empty()) return parser.problems().ToStatus();
  } catch (const YAML::ParserException& e) {
    return SyntaxError(source, e.mark, e.msg);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": cannot read YAML: ", e.what()));
  }
  if (absl::Status s = Validate(c); !s.ok()) return s;
  return c;
}

absl::StatusOr<Config> LoadFile(const std::string& path) {
  auto cannot_read = [&path](int err) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(err)));
  };
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cannot_read(errno);
  std::string text;
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return cannot_read(err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxFileSize) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, ": larger than ", kMaxFileSize >> 20,
                                                     " MiB; is this really a heddle config?"));
    }
  }
  close(fd);
  return LoadString(text, path);
}

std::string ToYaml(const Config& c) {
  YAML::Emitter out;
  // Free-form strings are always double-quoted so that they read back as the same string.
  out << YAML::Comment("heddled effective configuration (defaults filled in); docs/config.md");
  out << YAML::BeginMap;

  out << YAML::Key << "lcores" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "main" << YAML::Value << c.main_lcore;
  out << YAML::Key << "workers" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (unsigned w : c.worker_lcores) out << w;
  out << YAML::EndSeq << YAML::EndMap;

  out << YAML::Key << "memory" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "no_huge" << YAML::Value << c.no_huge;
  out << YAML::Key << "size_mb" << YAML::Value << c.memory_mb;
  out << YAML::Key << "file_prefix" << YAML::Value << YAML::DoubleQuoted << c.file_prefix;
  out << YAML::EndMap;

  out << YAML::Key << "mempool" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "mbufs" << YAML::Value << c.mbufs;
  out << YAML::Key << "cache" << YAML::Value << c.mbuf_cache;
  out << YAML::Key << "data_room" << YAML::Value << c.mbuf_data_room;
  out << YAML::EndMap;

  out << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq;
  for (const PortConfig& p : c.ports) {
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << p.name;
    out << YAML::Key << "role" << YAML::Value << PortRoleName(p.role);
    // A valid port has exactly one of pci / vdev; an invalid one is shown as it is.
    if (!p.pci.empty() || p.vdev.empty()) {
      out << YAML::Key << "pci" << YAML::Value << YAML::DoubleQuoted << p.pci;
    }
    if (!p.vdev.empty()) out << YAML::Key << "vdev" << YAML::Value << YAML::DoubleQuoted << p.vdev;
    if (!p.pci.empty() || !p.devargs.empty()) {
      out << YAML::Key << "devargs" << YAML::Value << YAML::DoubleQuoted << p.devargs;
    }
    out << YAML::Key << "rx_queues" << YAML::Value << p.rx_queues;
    out << YAML::Key << "rx_desc" << YAML::Value << p.rx_desc;
    out << YAML::Key << "tx_desc" << YAML::Value << p.tx_desc;
    out << YAML::Key << "mtu" << YAML::Value << p.mtu;
    out << YAML::Key << "promiscuous" << YAML::Value << p.promiscuous;
    out << YAML::Key << "peer" << YAML::Value << YAML::DoubleQuoted << p.peer;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;

  out << YAML::Key << "dataplane" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "burst_size" << YAML::Value << c.burst_size;
  out << YAML::Key << "verify_icrc" << YAML::Value << c.verify_icrc;
  out << YAML::EndMap;

  const storm::LevelConfig& l = c.storm.levels;
  const int k = std::clamp(l.levels, 1, storm::kMaxLevels);
  out << YAML::Key << "storm" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << c.storm.enabled;
  out << YAML::Key << "levels" << YAML::Value << l.levels;
  if (c.storm.auto_cutoffs) {
    out << YAML::Key << "cutoffs" << YAML::Value << "auto";
  } else {
    out << YAML::Key << "cutoffs" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int i = 0; i + 1 < k; ++i) out << l.cutoffs[i];
    out << YAML::EndSeq;
  }
  out << YAML::Key << "mode" << YAML::Value
      << (l.mode == storm::Mode::kPerPacket ? "per-packet" : "per-message");
  out << YAML::Key << "dscp" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int i = 0; i < k; ++i) out << static_cast<unsigned>(l.dscp[i]);
  out << YAML::EndSeq;
  out << YAML::Key << "pcp" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int i = 0; i < k; ++i) out << static_cast<int>(l.pcp[i]);
  out << YAML::EndSeq;
  out << YAML::Key << "control_level" << YAML::Value << static_cast<unsigned>(l.control_level);
  out << YAML::Key << "beta" << YAML::Value << l.beta;
  out << YAML::Key << "backlog_max" << YAML::Value << l.backlog_max;
  if (l.unknown_size == storm::kUnknownSizeLowest) {
    out << YAML::Key << "unknown_size" << YAML::Value << "lowest";
  } else {
    out << YAML::Key << "unknown_size" << YAML::Value << l.unknown_size;
  }
  if (c.storm.qp_capacity == 0) {
    out << YAML::Key << "qp_capacity" << YAML::Value << "auto"
        << YAML::Comment(absl::StrCat(QpCapacityPerWorker(c), " entries per worker"));
  } else {
    out << YAML::Key << "qp_capacity" << YAML::Value << c.storm.qp_capacity;
  }
  out << YAML::Key << "qps_per_host" << YAML::Value << c.storm.qps_per_host;
  out << YAML::Key << "qp_idle_ms" << YAML::Value << c.storm.qp_idle_ms;
  out << YAML::Key << "mtu" << YAML::Value << c.storm.mtu;
  out << YAML::Key << "auto_interval_ms" << YAML::Value << c.storm.auto_interval_ms;
  out << YAML::Key << "auto_keep" << YAML::Value << c.storm.auto_keep;
  out << YAML::Key << "backlog_source" << YAML::Value
      << (c.storm.backlog_source == storm::BacklogSource::kNone       ? "none"
          : c.storm.backlog_source == storm::BacklogSource::kHostShim ? "host"
                                                                      : "egress");
  out << YAML::Key << "host_backlog_dir" << YAML::Value << c.storm.host_backlog_dir;
  out << YAML::Key << "host_poll_ms" << YAML::Value << c.storm.host_poll_ms;
  out << YAML::Key << "queue_packets" << YAML::Value << c.storm.queue_packets;
  out << YAML::Key << "fabric_guard" << YAML::Value << c.storm.fabric_guard;
  out << YAML::Key << "read_stream_capacity" << YAML::Value << c.storm.read_stream_capacity;
  out << YAML::Key << "response_window_ms" << YAML::Value << c.storm.response_window_ms;
  out << YAML::Key << "egress" << YAML::Value << StormEgressName(c.storm.egress);
  out << YAML::Key << "dcb_pfc" << YAML::Value << c.storm.dcb_pfc;
  out << YAML::EndMap;

  const lb::LbConfig& lp = c.lb.params;
  out << YAML::Key << "lb" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << c.lb.enabled;
  out << YAML::Key << "balancer" << YAML::Value << lb::BalancerKindName(lp.balancer);
  out << YAML::Key << "entropy" << YAML::Value << lb::EntropyFieldName(lp.entropy_field);
  out << YAML::Key << "seed" << YAML::Value << lp.seed;
  out << YAML::Key << "flowlet_gap_ns" << YAML::Value << lp.flowlet_gap_ns;
  out << YAML::Key << "reps_cache_size" << YAML::Value << lp.reps_cache_size;
  out << YAML::Key << "flow_capacity" << YAML::Value << lp.flow_capacity;
  out << YAML::Key << "flow_idle_ms" << YAML::Value << lp.flow_idle_ns / 1'000'000;
  out << YAML::Key << "link_gbps" << YAML::Value << lp.link_gbps;
  out << YAML::Key << "rtt_ns" << YAML::Value << lp.rtt_ns;
  out << YAML::Key << "pin" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << lp.pin;
  if (lp.threshold_bytes == 0) {
    out << YAML::Key << "threshold_bytes" << YAML::Value << "auto"
        << YAML::Comment(
               absl::StrCat(lb::EffectiveThreshold(lp), " bytes: link_gbps x rtt_ns / 8"));
  } else {
    out << YAML::Key << "threshold_bytes" << YAML::Value << lp.threshold_bytes;
  }
  out << YAML::Key << "policy" << YAML::Value << lb::PinPolicyName(lp.pin_policy);
  out << YAML::Key << "flow" << YAML::Value << lb::FlowUnitName(lp.flow_unit);
  out << YAML::Key << "crossing" << YAML::Value << lb::CrossingRuleName(lp.crossing);
  out << YAML::EndMap;
  auto path_set = [&out](const LbPathSetConfig& s, bool with_prefix) {
    out << YAML::BeginMap;
    if (with_prefix) out << YAML::Key << "prefix" << YAML::Value << YAML::DoubleQuoted << s.prefix;
    out << YAML::Key << "ports" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const std::string& port : s.ports) out << YAML::DoubleQuoted << port;
    out << YAML::EndSeq;
    if (s.values.empty()) {
      out << YAML::Key << "entropies" << YAML::Value << s.entropies;
      out << YAML::Key << "first_entropy" << YAML::Value
          << absl::StrCat("0x", absl::Hex(s.first_entropy));
    } else {
      out << YAML::Key << "values" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (uint32_t v : s.values) out << absl::StrCat("0x", absl::Hex(v));
      out << YAML::EndSeq;
    }
    out << YAML::Key << "next_hop_mac" << YAML::Value << YAML::DoubleQuoted << s.next_hop_mac;
    out << YAML::EndMap;
  };
  out << YAML::Key << "paths" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "default" << YAML::Value;
  if (c.lb.has_default_paths) {
    path_set(c.lb.default_paths, false);
  } else {
    out << "none";
  }
  out << YAML::Key << "prefixes" << YAML::Value << YAML::BeginSeq;
  for (const LbPathSetConfig& s : c.lb.prefixes) path_set(s, true);
  out << YAML::EndSeq;
  out << YAML::EndMap << YAML::EndMap;

  if (c.fwd.enabled) {
    out << YAML::Key << "fwd" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "artifact" << YAML::Value << YAML::DoubleQuoted << c.fwd.artifact;
    out << YAML::Key << "node" << YAML::Value << YAML::DoubleQuoted << c.fwd.node;
    out << YAML::Key << "fabric" << YAML::Value << YAML::DoubleQuoted << c.fwd.fabric;
    out << YAML::Key << "ports" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const std::string& port : c.fwd.ports) out << YAML::DoubleQuoted << port;
    out << YAML::EndSeq << YAML::EndMap;
  }

  out << YAML::Key << "metrics" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << c.metrics_enabled;
  out << YAML::Key << "listen" << YAML::Value << YAML::DoubleQuoted << c.metrics_listen;
  out << YAML::EndMap;

  out << YAML::Key << "control" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "socket" << YAML::Value << YAML::DoubleQuoted << c.control_socket;
  out << YAML::EndMap;

  out << YAML::Key << "log" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "level" << YAML::Value << c.log_level;
  out << YAML::EndMap;

  out << YAML::Key << "eal" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "args" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& a : c.eal_args) out << YAML::DoubleQuoted << a;
  out << YAML::EndSeq << YAML::EndMap;

  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace heddle::config
