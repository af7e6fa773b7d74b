#include "tools/heddled/fwd_service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "control/nuwa/fabric.h"

namespace heddle::heddled {
namespace {

nuwa::Shape ShapeOf(const fwd::ArtifactSpec& s) {
  nuwa::Shape shape;
  shape.tiers = s.shape.tiers;
  for (int i = 0; i <= fwd::kMaxTiers; ++i) {
    shape.m[i] = s.shape.m[i];
    shape.w[i] = s.shape.w[i];
  }
  shape.planes = s.shape.planes;
  shape.rails = s.shape.rails;
  return shape;
}

nuwa::AddressPlan PlanOf(const fwd::ArtifactSpec& s) {
  nuwa::AddressPlan plan;
  plan.ipv4_base = s.addresses.ipv4_base;
  plan.ipv4_prefix_len = s.addresses.ipv4_prefix_len;
  plan.has_ipv6 = s.addresses.has_ipv6;
  plan.ipv6_prefix_len = s.addresses.ipv6_prefix_len;
  plan.ipv6_base = s.addresses.ipv6_base;
  plan.width = s.addresses.width;
  plan.shift = s.addresses.shift;
  return plan;
}

std::string Ipv4String(uint32_t host_order) {
  const uint32_t n = htonl(host_order);
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &n, buf, sizeof buf);
  return buf;
}

std::string Ipv6String(const std::array<uint8_t, 16>& a) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
  return buf;
}

std::string MacString(const std::array<uint8_t, 6>& m) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

std::string RoleString(const fwd::ArtifactSpec& s) {
  if (s.role == fwd::Role::kHost) return s.role_name.empty() ? "host" : s.role_name;
  return absl::StrCat(s.role_name.empty() ? "switch" : s.role_name, " (switch tier ",
                      static_cast<int>(s.tier), ")");
}

std::string ShapeString(const fwd::ShapeSpec& s) {
  std::vector<std::string> m, w;
  for (int i = 1; i <= s.tiers && i <= fwd::kMaxTiers; ++i) {
    m.push_back(absl::StrCat(s.m[i]));
    w.push_back(absl::StrCat(s.w[i]));
  }
  std::string out = absl::StrCat(static_cast<int>(s.tiers), " tiers, m ", absl::StrJoin(m, "x"),
                                 ", w ", absl::StrJoin(w, "x"), ", ", static_cast<int>(s.planes),
                                 s.planes == 1 ? " plane" : " planes");
  if (s.rails != 0) absl::StrAppend(&out, ", ", s.rails, " rails");
  return out;
}

std::string HashString(const fwd::HashSpec& h) {
  static constexpr const char* kNames[] = {"unknown", "crc32", "crc32c", "crc16"};
  if (h.function == 0) return "unknown";
  const char* name = h.function < 4 ? kNames[h.function] : "function?";
  std::vector<std::string> bits;
  for (int i = 1; i <= fwd::kMaxTiers; ++i) bits.push_back(absl::StrCat(h.bit_offset[i]));
  return absl::StrFormat("%s seed 0x%08x bits %s", name, h.seed_base, absl::StrJoin(bits, "/"));
}

std::string AddressString(const fwd::AddressSpec& a) {
  std::string out = absl::StrCat(Ipv4String(a.ipv4_base), "/", a.ipv4_prefix_len);
  if (a.has_ipv6) absl::StrAppend(&out, ", ", Ipv6String(a.ipv6_base), "/", a.ipv6_prefix_len);
  std::vector<std::string> fields;
  for (int i = 1; i <= fwd::kMaxTiers; ++i) {
    if (a.width[i] != 0) fields.push_back(absl::StrCat(a.width[i], "@", a.shift[i]));
  }
  absl::StrAppend(&out, ", digits ", absl::StrJoin(fields, " "));
  return out;
}

std::string ClassesString(const std::vector<fwd::ClassSpec>& classes) {
  if (classes.empty()) return "none";
  std::vector<std::string> parts;
  for (const fwd::ClassSpec& c : classes) {
    lb::Prefix p;
    p.addr = c.prefix;
    p.len = c.prefix_len;
    parts.push_back(absl::StrFormat("%s %s max %d planes 0x%x tier %d up 0x%x", c.name,
                                    lb::PrefixString(p), c.max_paths, c.planes_mask,
                                    c.restrict_tier, c.allowed_up_mask));
  }
  return absl::StrJoin(parts, "; ");
}

std::string EntropyString(const fwd::EntropySpec& e) {
  std::vector<std::string> parts;
  for (int l = 0; l <= fwd::kMaxTiers; ++l) {
    if (e.by_lca[l].empty()) continue;
    std::vector<std::string> v;
    for (uint32_t x : e.by_lca[l]) v.push_back(absl::StrFormat("0x%x", x));
    parts.push_back(absl::StrCat("lca ", l, ": ", absl::StrJoin(v, " ")));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, "; ");
}

// Orders path sets so identical ones share one set id.
struct PathsLess {
  bool operator()(const std::vector<lb::Path>& a, const std::vector<lb::Path>& b) const {
    return std::lexicographical_compare(
        a.begin(), a.end(), b.begin(), b.end(), [](const lb::Path& x, const lb::Path& y) {
          return std::tie(x.port, x.entropy, x.has_next_hop_mac, x.next_hop_mac) <
                 std::tie(y.port, y.entropy, y.has_next_hop_mac, y.next_hop_mac);
        });
  }
};

std::string PathsString(const std::vector<lb::Path>& paths,
                        const std::vector<std::string>& port_names) {
  std::vector<std::string> parts;
  for (const lb::Path& p : paths) {
    const std::string port = p.port < port_names.size() ? port_names[p.port] : absl::StrCat(p.port);
    parts.push_back(absl::StrFormat("%s 0x%04x @%s", port, p.entropy,
                                    p.has_next_hop_mac ? MacString(p.next_hop_mac) : "-"));
  }
  return absl::StrCat(paths.size(),
                      paths.size() == 1 ? " path: " : " paths: ", absl::StrJoin(parts, ", "));
}

// prefix -> the rendered path set ("no path" for routes without one).
std::map<std::string, std::string> RenderRoutes(const lb::PathTableSpec& spec,
                                                const std::vector<std::string>& port_names) {
  std::map<std::string, std::string> out;
  for (const lb::PathTableSpec::Route& r : spec.routes) {
    out[lb::PrefixString(r.prefix)] = r.set == lb::kRouteNoSet || r.set >= spec.sets.size()
                                          ? "no path"
                                          : PathsString(spec.sets[r.set], port_names);
  }
  return out;
}

int64_t WallClockMs() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace

absl::StatusOr<uint32_t> ResolveHost(const fwd::ArtifactSpec& spec, const std::string& node) {
  const nuwa::Shape shape = ShapeOf(spec);
  const uint64_t hosts = nuwa::NodeCount(shape, 0);
  const std::string fabric = spec.fabric_name.empty() ? "the artifact's fabric"
                                                      : absl::StrCat("fabric ", spec.fabric_name);
  in_addr a4;
  if (inet_pton(AF_INET, node.c_str(), &a4) == 1) {
    const uint32_t addr = ntohl(a4.s_addr);
    const std::optional<uint32_t> host = nuwa::HostOfIpv4(shape, PlanOf(spec), addr);
    if (!host || *host >= hosts) {
      return absl::InvalidArgumentError(
          absl::StrCat("fwd.node: ", node, " is no host address of ", fabric, " (",
                       Ipv4String(spec.addresses.ipv4_base), "/", spec.addresses.ipv4_prefix_len,
                       ", hosts ", Ipv4String(nuwa::HostIpv4(shape, PlanOf(spec), 0)),
                       " and up); give this host's address or its name, e.g. host[3]"));
    }
    return *host;
  }
  const size_t open = node.find('[');
  uint64_t index = 0;
  if (open == std::string::npos || open == 0 || node.back() != ']' ||
      !absl::SimpleAtoi(absl::string_view(node).substr(open + 1, node.size() - open - 2), &index)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fwd.node: \"", node, "\" is neither name[index] (\"host[12]\") nor an IPv4 address"));
  }
  const std::string name = node.substr(0, open);
  const std::string role = spec.role_name.empty() ? "host" : spec.role_name;
  if (name != role && name != "host") {
    return absl::InvalidArgumentError(absl::StrCat("fwd.node: \"", node, "\" is no host of ",
                                                   fabric, "; its hosts are ", role, "[0..",
                                                   hosts - 1, "]"));
  }
  if (index >= hosts) {
    return absl::InvalidArgumentError(absl::StrCat("fwd.node: \"", node, "\" is not in ", fabric,
                                                   ", which has ", hosts, " hosts (", role, "[0..",
                                                   hosts - 1,
                                                   "]); is this the right "
                                                   "artifact or node?"));
  }
  return static_cast<uint32_t>(index);
}

std::string ResolveArtifactPath(const std::string& config_path, const std::string& artifact) {
  if (artifact.empty() || artifact[0] == '/') return artifact;
  const size_t slash = config_path.rfind('/');
  if (slash == std::string::npos) return artifact;
  return absl::StrCat(config_path.substr(0, slash + 1), artifact);
}

absl::StatusOr<FwdService::Options> FwdService::OptionsFromConfig(const config::Config& cfg) {
  Options o;
  o.node = cfg.fwd.node;
  o.fabric = cfg.fwd.fabric;
  HEDDLE_ASSIGN_OR_RETURN(o.port_map, config::FwdPortMap(cfg));
  for (const config::PortConfig& p : cfg.ports) o.port_names.push_back(p.name);
  o.entropy_field = cfg.lb.params.entropy_field;
  return o;
}

FwdService::FwdService(Options options) : o_(std::move(options)) {
  if (o_.history == 0) o_.history = 1;
  if (!o_.now_unix_ms) o_.now_unix_ms = &WallClockMs;
}

absl::StatusOr<FwdService::Prepared> FwdService::Prepare(std::span<const uint8_t> bytes,
                                                         const std::string& source) const {
  const std::string what = absl::StrCat("artifact ", source.empty() ? "(unnamed)" : source);
  absl::StatusOr<fwd::ArtifactSpec> decoded = fwd::Decode(bytes);
  if (!decoded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", decoded.status().message()));
  }
  Prepared p;
  p.bytes.assign(bytes.begin(), bytes.end());
  p.spec = *std::move(decoded);
  const fwd::ArtifactSpec& spec = p.spec;
  if (spec.role != fwd::Role::kHost) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is the ", RoleString(spec), " artifact of fabric \"", spec.fabric_name,
                     "\"; heddled runs on a host and installs the fabric's host artifact"));
  }
  if (!o_.fabric.empty() && spec.fabric_name != o_.fabric) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is for fabric \"", spec.fabric_name,
                                                   "\", but this host is in fabric \"", o_.fabric,
                                                   "\" (fwd.fabric); install that fabric's "
                                                   "artifact or fix fwd.fabric"));
  }
  absl::StatusOr<uint32_t> host = ResolveHost(spec, o_.node);
  if (!host.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", host.status().message()));
  p.host = *host;
  absl::StatusOr<fwd::HostTable> table = fwd::HostTable::Build(spec, p.host);
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": host ", p.host, ": ", table.status().message()));
  }

  // This host's path sets as (prefix, set) routes; equal sets shared.
  std::vector<fwd::HostTable::PrefixPaths> prefixes = table->PrefixPathSets(/*ipv6=*/false);
  if (spec.addresses.has_ipv6) {
    std::vector<fwd::HostTable::PrefixPaths> v6 = table->PrefixPathSets(/*ipv6=*/true);
    prefixes.insert(prefixes.end(), std::make_move_iterator(v6.begin()),
                    std::make_move_iterator(v6.end()));
  }
  if (prefixes.size() > o_.max_prefixes) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": ", prefixes.size(),
                                                     " destination prefixes for this host, more "
                                                     "than the ",
                                                     o_.max_prefixes, " heddled takes"));
  }
  const uint32_t max_entropy =
      o_.entropy_field == lb::EntropyField::kUdpSourcePort ? lb::kMaxUdpSport : lb::kMaxFlowLabel;
  std::map<std::vector<lb::Path>, uint32_t, PathsLess> set_ids;
  lb::PathTableSpec& ts = p.table_spec;
  uint32_t with_set = 0, without = 0;
  for (const fwd::HostTable::PrefixPaths& pp : prefixes) {
    lb::Prefix prefix;
    prefix.addr = pp.prefix;
    prefix.len = pp.prefix_len;
    const std::string where = absl::StrCat(what, ": prefix ", lb::PrefixString(prefix));
    if (pp.kind != fwd::HopKind::kUp || pp.paths.empty()) {
      // Unreachable destinations and this host itself: explicitly not balanced, so a shorter
      // prefix's set does not apply; pin-select leaves such packets to port-fwd.
      ts.routes.push_back({prefix, lb::kRouteNoSet});
      ++without;
      continue;
    }
    if (pp.paths.size() > static_cast<size_t>(lb::kMaxPaths)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          where, " has ", pp.paths.size(), " paths; a path set holds at most ", lb::kMaxPaths));
    }
    std::vector<lb::Path> paths;
    for (const fwd::HostPath& hp : pp.paths) {
      if (hp.port >= o_.port_map.size()) {
        std::vector<std::string> mapped;
        for (uint16_t i : o_.port_map) {
          mapped.push_back(i < o_.port_names.size() ? o_.port_names[i] : absl::StrCat(i));
        }
        return absl::ResourceExhaustedError(absl::StrCat(
            where, ": a path leaves on host port ", hp.port, " but fwd.ports maps only ",
            o_.port_map.size(), " (", absl::StrJoin(mapped, ", "),
            "); configure one uplink per host port of the fabric (planes x w_1 = ",
            static_cast<uint32_t>(spec.shape.planes) * spec.shape.w[1], ")"));
      }
      if (hp.entropy > max_entropy) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: entropy 0x%x does not fit lb.entropy %s (at most 0x%x)", where,
                            hp.entropy, lb::EntropyFieldName(o_.entropy_field), max_entropy));
      }
      lb::Path path;
      path.entropy = hp.entropy;
      path.port = o_.port_map[hp.port];
      path.has_next_hop_mac = true;
      path.next_hop_mac = hp.next_hop_mac;
      paths.push_back(path);
    }
    auto [it, fresh] = set_ids.emplace(paths, static_cast<uint32_t>(ts.sets.size()));
    if (fresh) {
      if (ts.sets.size() >= o_.max_path_sets) {
        return absl::ResourceExhaustedError(absl::StrCat(what, ": more than ", o_.max_path_sets,
                                                         " distinct path sets for this host"));
      }
      ts.sets.push_back(std::move(paths));
    }
    ts.routes.push_back({prefix, it->second});
    ++with_set;
  }
  absl::StatusOr<std::unique_ptr<const lb::PathTable>> built = lb::PathTable::Build(ts);
  if (!built.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": this host's path table: ", built.status().message()));
  }
  p.table = std::shared_ptr<const lb::PathTable>(std::move(*built));

  api::ArtifactView& v = p.view;
  v.source = source;
  v.bytes = bytes.size();
  v.version = spec.version;
  v.checksum = fwd::ArtifactChecksum(bytes);
  v.fabric_digest = spec.fabric_digest;
  v.fabric = spec.fabric_name;
  v.role = RoleString(spec);
  v.host = p.host;
  v.node = absl::StrCat(spec.role_name.empty() ? "host" : spec.role_name, "[", p.host, "] (",
                        Ipv4String(nuwa::HostIpv4(ShapeOf(spec), PlanOf(spec), p.host)), ")");
  v.shape = ShapeString(spec.shape);
  v.hash = HashString(spec.hash);
  v.max_paths = spec.max_paths;
  v.rail_local = spec.rail_local;
  v.classes = static_cast<uint32_t>(spec.classes.size());
  v.node_masks = static_cast<uint32_t>(spec.node_masks.size());
  v.overrides = static_cast<uint32_t>(spec.overrides.size());
  v.path_sets = static_cast<uint32_t>(ts.sets.size());
  v.prefixes = with_set;
  v.no_path = without;
  return p;
}

absl::Status FwdService::PublishLocked(const Prepared& p) {
  if (!o_.publish) return absl::InternalError("no path table publisher");
  HEDDLE_RETURN_IF_ERROR(o_.publish(p.table));
  ++counters_.generation;
  return absl::OkStatus();
}

absl::StatusOr<api::ArtifactView> FwdService::Install(std::span<const uint8_t> bytes,
                                                      const std::string& source, bool dry_run) {
  absl::StatusOr<Prepared> p = Prepare(bytes, source);
  std::lock_guard<std::mutex> g(mu_);
  if (!p.ok()) {
    if (!dry_run) ++counters_.rejected;
    HEDDLE_LOG(kWarning, "fwd: %s refused: %s", dry_run ? "dry-run install" : "install",
               std::string(p.status().message()).c_str());
    return p.status();
  }
  if (dry_run) return p->view;
  if (absl::Status s = PublishLocked(*p); !s.ok()) {
    ++counters_.rejected;
    return s;
  }
  return AdoptLocked(*std::move(p));
}

api::ArtifactView FwdService::Adopt(Prepared p) {
  std::lock_guard<std::mutex> g(mu_);
  return AdoptLocked(std::move(p));
}

api::ArtifactView FwdService::AdoptLocked(Prepared p) {
  Entry e;
  e.view = p.view;
  e.view.id = next_id_++;
  e.view.installed_unix_ms = o_.now_unix_ms();
  e.prepared = std::move(p);
  ++counters_.installs;
  counters_.installed = true;
  HEDDLE_LOG(kInfo,
             "fwd: artifact #%llu installed from %s: fabric %s, %s, %u path set(s) over %u "
             "prefix(es), %u without a path, checksum %08x",
             static_cast<unsigned long long>(e.view.id), e.view.source.c_str(),
             e.view.fabric.c_str(), e.view.node.c_str(), e.view.path_sets, e.view.prefixes,
             e.view.no_path, e.view.checksum);
  history_.push_front(std::move(e));
  while (history_.size() > o_.history) history_.pop_back();
  return history_.front().view;
}

absl::StatusOr<api::ArtifactView> FwdService::Rollback(std::optional<uint64_t> to) {
  std::lock_guard<std::mutex> g(mu_);
  if (history_.size() < 2) {
    return absl::FailedPreconditionError(
        history_.empty() ? "no artifact is installed; nothing to roll back"
                         : absl::StrCat("only the running artifact #", history_.front().view.id,
                                        " is kept; there is no earlier one to roll back to"));
  }
  size_t k = 1;
  if (to) {
    k = 0;
    while (k < history_.size() && history_[k].view.id != *to) ++k;
    if (k == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("artifact #", *to, " is the running one; nothing to roll back"));
    }
    if (k == history_.size()) {
      std::vector<std::string> ids;
      for (size_t i = 1; i < history_.size(); ++i) ids.push_back(absl::StrCat(history_[i].view.id));
      return absl::FailedPreconditionError(
          absl::StrCat("artifact #", *to, " is not in the history; roll back to one of ",
                       absl::StrJoin(ids, ", "), " (heddlectl artifact show)"));
    }
  }
  // The stored table was built for this configuration and is immutable: publish it again.
  HEDDLE_RETURN_IF_ERROR(PublishLocked(history_[k].prepared));
  const uint64_t from = history_.front().view.id;
  history_.erase(history_.begin(), history_.begin() + static_cast<std::ptrdiff_t>(k));
  ++counters_.rollbacks;
  HEDDLE_LOG(kInfo, "fwd: rolled back from artifact #%llu to #%llu (%s)",
             static_cast<unsigned long long>(from),
             static_cast<unsigned long long>(history_.front().view.id),
             history_.front().view.source.c_str());
  return history_.front().view;
}

api::ArtifactStateView FwdService::State() const {
  std::lock_guard<std::mutex> g(mu_);
  api::ArtifactStateView s;
  s.node = o_.node;
  s.fabric = o_.fabric;
  if (!history_.empty()) s.installed = history_.front().view;
  for (size_t i = 1; i < history_.size(); ++i) s.history.push_back(history_[i].view);
  s.generation = counters_.generation;
  s.installs = counters_.installs;
  s.rejected = counters_.rejected;
  s.rollbacks = counters_.rollbacks;
  return s;
}

FwdService::Counters FwdService::counters() const {
  std::lock_guard<std::mutex> g(mu_);
  return counters_;
}

absl::StatusOr<api::ArtifactDiffView> FwdService::Diff(std::span<const uint8_t> bytes) const {
  HEDDLE_ASSIGN_OR_RETURN(Prepared given, Prepare(bytes, "(given)"));
  std::lock_guard<std::mutex> g(mu_);
  if (history_.empty()) {
    return absl::FailedPreconditionError(
        "no artifact is installed; nothing to compare with (artifact install --dry-run checks "
        "one alone)");
  }
  const Prepared& now = history_.front().prepared;
  api::ArtifactDiffView d;
  d.installed = history_.front().view;
  d.given = given.view;
  const fwd::ArtifactSpec& a = now.spec;
  const fwd::ArtifactSpec& b = given.spec;
  auto field = [&d](const char* name, const std::string& x, const std::string& y) {
    if (x != y) d.fields.push_back({name, x, y});
  };
  auto count = [&field](const char* name, size_t x, size_t y) {
    field(name, absl::StrCat(x), absl::StrCat(y));
  };
  count("version", a.version, b.version);
  field("checksum", absl::StrFormat("%08x", d.installed.checksum),
        absl::StrFormat("%08x", d.given.checksum));
  field("fabric_digest", absl::StrFormat("%016x", a.fabric_digest),
        absl::StrFormat("%016x", b.fabric_digest));
  field("fabric", a.fabric_name, b.fabric_name);
  field("role", RoleString(a), RoleString(b));
  field("node", d.installed.node, d.given.node);
  field("shape", ShapeString(a.shape), ShapeString(b.shape));
  field("addresses", AddressString(a.addresses), AddressString(b.addresses));
  field("hash", HashString(a.hash), HashString(b.hash));
  count("max_paths", a.max_paths, b.max_paths);
  field("rail_local", a.rail_local ? "true" : "false", b.rail_local ? "true" : "false");
  field("classes", ClassesString(a.classes), ClassesString(b.classes));
  count("node_masks", a.node_masks.size(), b.node_masks.size());
  count("overrides", a.overrides.size(), b.overrides.size());
  field("entropy", EntropyString(a.entropy), EntropyString(b.entropy));
  count("path_sets", d.installed.path_sets, d.given.path_sets);

  const std::map<std::string, std::string> x = RenderRoutes(now.table_spec, o_.port_names);
  const std::map<std::string, std::string> y = RenderRoutes(given.table_spec, o_.port_names);
  std::set<std::string> keys;
  for (const auto& [k, v] : x) keys.insert(k);
  for (const auto& [k, v] : y) keys.insert(k);
  for (const std::string& k : keys) {
    auto i = x.find(k);
    auto j = y.find(k);
    const std::string xs = i == x.end() ? "-" : i->second;
    const std::string ys = j == y.end() ? "-" : j->second;
    if (xs == ys) {
      ++d.prefixes_same;
    } else {
      d.paths.push_back({k, xs, ys});
    }
  }
  return d;
}

absl::Status CheckConfiguredArtifact(const config::Config& cfg, const std::string& config_path) {
  if (!cfg.fwd.enabled || cfg.fwd.artifact.empty()) return absl::OkStatus();
  const std::string path = ResolveArtifactPath(config_path, cfg.fwd.artifact);
  absl::StatusOr<std::vector<uint8_t>> bytes = fwd::ReadArtifactBytes(path);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("fwd.artifact: ", bytes.status().message()));
  }
  HEDDLE_ASSIGN_OR_RETURN(FwdService::Options o, FwdService::OptionsFromConfig(cfg));
  FwdService probe(std::move(o));
  absl::StatusOr<FwdService::Prepared> p = probe.Prepare(*bytes, path);
  if (!p.ok())
    return absl::InvalidArgumentError(absl::StrCat("fwd.artifact: ", p.status().message()));
  return absl::OkStatus();
}

}  // namespace heddle::heddled
