// The topology YAML reader and writer, validation, digest and the Nüwa conversion
// (topology_io.h, docs/optiflow-compiler.md §1).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/fnv1a.h"
#include "common/status_macros.h"
#include "common/yaml_documents.h"
#include "control/collective/collective.h"
#include "control/collective/topology_io.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace heddle::collective {
namespace {

// A number followed by a unit from `units` (longest match first is not needed: units are
// matched exactly after the number's end).
absl::StatusOr<double> ParseWithUnit(absl::string_view text, const char* what,
                                     const std::vector<std::pair<std::string, double>>& units,
                                     const char* hint, bool bare_zero_ok) {
  std::string s(absl::StripAsciiWhitespace(text));
  size_t end = 0;
  while (end < s.size() && (absl::ascii_isdigit(static_cast<unsigned char>(s[end])) ||
                            (end == 0 && (s[end] == '-' || s[end] == '+')) || s[end] == '.' ||
                            s[end] == 'e' || s[end] == 'E' ||
                            ((s[end] == '+' || s[end] == '-') && end > 0 &&
                             (s[end - 1] == 'e' || s[end - 1] == 'E')))) {
    // Stop at an 'e' that starts a unit rather than an exponent (no digit or sign after it).
    if ((s[end] == 'e' || s[end] == 'E') &&
        (end + 1 >= s.size() || !(absl::ascii_isdigit(static_cast<unsigned char>(s[end + 1])) ||
                                  s[end + 1] == '+' || s[end + 1] == '-'))) {
      break;
    }
    ++end;
  }
  double value = 0;
  if (end == 0 || !absl::SimpleAtod(s.substr(0, end), &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s '%s' is not a number with a unit; %s", what, text, hint));
  }
  std::string unit(absl::StripAsciiWhitespace(absl::string_view(s).substr(end)));
  if (unit.empty()) {
    if (bare_zero_ok && value == 0) return 0.0;
    return absl::InvalidArgumentError(absl::StrFormat("%s '%s' has no unit; %s", what, text, hint));
  }
  for (const auto& [name, scale] : units) {
    if (unit != name) continue;
    if (!std::isfinite(value * scale)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s '%s' is out of range", what, text));
    }
    return value * scale;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s '%s': unknown unit '%s'; %s", what, text, unit, hint));
}

constexpr char kBandwidthHint[] =
    "write bits per second (bit, kbit, Mbit, Gbit, Tbit, optionally with /s) or bytes per "
    "second (B/s, kB/s, MB/s, GB/s), e.g. 10Gbit or 1.25GB/s";
constexpr char kLatencyHint[] = "write s, ms, us or ns, e.g. 30ms";

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  // Printable ASCII: names travel in YAML, JSON schedules, metrics and command lines unchanged.
  for (unsigned char c : name) {
    if (c <= ' ' || c >= 0x7f) return false;
  }
  return true;
}

// ---- YAML reading ------------------------------------------------------------------------------

class Reader {
 public:
  absl::StatusOr<Topology> Read(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) {
      return absl::InvalidArgumentError(
          "topology: empty; give `ranks:` and links (see docs/optiflow-compiler.md §1)");
    }
    if (!root.IsMap()) return Error(root, "(top level)", "must be a map with `ranks:` and links");
    HEDDLE_RETURN_IF_ERROR(Keys(root, "(top level)", {"ranks", "switches", "default", "links"}));
    Topology t;
    const YAML::Node ranks = root["ranks"];
    if (!ranks.IsDefined() || ranks.IsNull()) {
      return Error(root, "ranks", "missing; write `ranks: [a, b, c]` or `ranks: 4`");
    }
    if (ranks.IsScalar()) {
      uint32_t n = 0;
      if (!absl::SimpleAtoi(ranks.Scalar(), &n) || n < 1 || n > kMaxRanks) {
        return Error(
            ranks, "ranks",
            absl::StrFormat("'%s' is not a rank count in 1..%u", ranks.Scalar(), kMaxRanks));
      }
      for (uint32_t i = 0; i < n; ++i) t.nodes.push_back(absl::StrCat("r", i));
    } else if (ranks.IsSequence()) {
      HEDDLE_RETURN_IF_ERROR(Names(ranks, "ranks", &t.nodes));
      if (t.nodes.empty()) return Error(ranks, "ranks", "empty; a topology needs at least 1 rank");
    } else {
      return Error(ranks, "ranks", "must be a list of names or a count");
    }
    t.ranks = static_cast<uint32_t>(t.nodes.size());
    if (t.ranks > kMaxRanks) {
      return Error(ranks, "ranks", absl::StrFormat("%u ranks; at most %u", t.ranks, kMaxRanks));
    }
    if (const YAML::Node sw = root["switches"]; sw.IsDefined() && !sw.IsNull()) {
      if (!sw.IsSequence()) return Error(sw, "switches", "must be a list of names");
      HEDDLE_RETURN_IF_ERROR(Names(sw, "switches", &t.nodes));
    }
    if (t.nodes.size() > kMaxTopologyNodes) {
      return Error(root, "switches",
                   absl::StrFormat("%u nodes; at most %u", t.nodes.size(), kMaxTopologyNodes));
    }
    for (uint32_t i = 0; i < t.nodes.size(); ++i) {
      if (!index_.emplace(t.nodes[i], i).second) {
        return Error(i < t.ranks ? ranks : root["switches"], i < t.ranks ? "ranks" : "switches",
                     absl::StrFormat("'%s' is named twice; names must be unique", t.nodes[i]));
      }
    }

    std::optional<double> default_bw, default_lat;
    const YAML::Node def = root["default"];
    if (def.IsDefined() && !def.IsNull()) {
      if (!def.IsMap()) return Error(def, "default", "must be a map {bandwidth, latency}");
      HEDDLE_RETURN_IF_ERROR(Keys(def, "default", {"bandwidth", "latency"}));
      HEDDLE_ASSIGN_OR_RETURN(double bw, Bandwidth(def["bandwidth"], "default.bandwidth"));
      default_bw = bw;
      default_lat = 0.0;
      if (def["latency"].IsDefined()) {
        HEDDLE_ASSIGN_OR_RETURN(double lat, Latency(def["latency"], "default.latency"));
        default_lat = lat;
      }
    }

    // Explicit links first, in file order; then the default for every directed rank pair that
    // no explicit link covers.
    std::map<std::pair<uint32_t, uint32_t>, uint64_t> seen;  // (src, dst) → link index
    const YAML::Node links = root["links"];
    if (links.IsDefined() && !links.IsNull()) {
      if (!links.IsSequence()) return Error(links, "links", "must be a list of links");
      for (size_t i = 0; i < links.size(); ++i) {
        const YAML::Node l = links[i];
        const std::string key = absl::StrCat("links[", i, "]");
        if (!l.IsMap())
          return Error(l, key, "must be a map, e.g. {between: [a, b], bandwidth: 1Gbit}");
        HEDDLE_RETURN_IF_ERROR(Keys(l, key, {"between", "from", "to", "bandwidth", "latency"}));
        std::vector<std::pair<uint32_t, uint32_t>> dirs;
        if (l["between"].IsDefined()) {
          if (l["from"].IsDefined() || l["to"].IsDefined()) {
            return Error(l, key, "give either `between: [a, b]` or `from:` and `to:`, not both");
          }
          const YAML::Node b = l["between"];
          if (!b.IsSequence() || b.size() != 2) {
            return Error(b, key + ".between", "must name two nodes, e.g. [eu, us]");
          }
          HEDDLE_ASSIGN_OR_RETURN(uint32_t x, NodeOf(b[0], key + ".between[0]"));
          HEDDLE_ASSIGN_OR_RETURN(uint32_t y, NodeOf(b[1], key + ".between[1]"));
          dirs = {{x, y}, {y, x}};
        } else {
          if (!l["from"].IsDefined() || !l["to"].IsDefined()) {
            return Error(l, key, "needs `between: [a, b]` or both `from:` and `to:`");
          }
          HEDDLE_ASSIGN_OR_RETURN(uint32_t x, NodeOf(l["from"], key + ".from"));
          HEDDLE_ASSIGN_OR_RETURN(uint32_t y, NodeOf(l["to"], key + ".to"));
          dirs = {{x, y}};
        }
        double bw = 0, lat = default_lat.value_or(0);
        if (l["bandwidth"].IsDefined()) {
          HEDDLE_ASSIGN_OR_RETURN(bw, Bandwidth(l["bandwidth"], key + ".bandwidth"));
        } else if (default_bw) {
          bw = *default_bw;
        } else {
          return Error(l, key + ".bandwidth",
                       "missing, and there is no `default:` to take it from");
        }
        if (l["latency"].IsDefined()) {
          HEDDLE_ASSIGN_OR_RETURN(lat, Latency(l["latency"], key + ".latency"));
        }
        for (auto [x, y] : dirs) {
          if (x == y) {
            return Error(l, key, absl::StrFormat("joins '%s' to itself", t.nodes[x]));
          }
          if (!seen.emplace(std::make_pair(x, y), t.links.size()).second) {
            return Error(
                l, key,
                absl::StrFormat("a second link from '%s' to '%s'; give each direction once",
                                t.nodes[x], t.nodes[y]));
          }
          t.links.push_back(Link{x, y, bw, lat});
        }
        if (t.links.size() > kMaxTopologyLinks) {
          return Error(l, key, absl::StrFormat("more than %u links", kMaxTopologyLinks));
        }
      }
    }
    if (default_bw) {
      if (uint64_t{t.ranks} * t.ranks > kMaxTopologyLinks) {
        return Error(def, "default", "a full mesh of this many ranks has too many links");
      }
      for (uint32_t a = 0; a < t.ranks; ++a) {
        for (uint32_t b = 0; b < t.ranks; ++b) {
          if (a != b && !seen.count({a, b}))
            t.links.push_back(Link{a, b, *default_bw, *default_lat});
        }
      }
    }
    HEDDLE_RETURN_IF_ERROR(ValidateTopology(t));
    return t;
  }

 private:
  static std::string Where(const YAML::Node& n) {
    if (!n.IsDefined()) return "topology";
    const YAML::Mark m = n.Mark();
    if (m.is_null()) return "topology";
    return absl::StrCat("topology:", m.line + 1, ":", m.column + 1);
  }
  static absl::Status Error(const YAML::Node& n, absl::string_view key, absl::string_view msg) {
    return absl::InvalidArgumentError(absl::StrCat(Where(n), ": ", key, ": ", msg));
  }
  static absl::Status Keys(const YAML::Node& map, absl::string_view key,
                           std::initializer_list<const char*> known) {
    std::vector<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node k = it->first;
      const std::string name = k.IsScalar() ? k.Scalar() : "?";
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
        return Error(k, key, absl::StrFormat("key '%s' is given twice", name));
      }
      seen.push_back(name);
      if (std::none_of(known.begin(), known.end(), [&](const char* x) { return name == x; })) {
        std::vector<std::string> names(known.begin(), known.end());
        return Error(
            k, key,
            absl::StrFormat("unknown key '%s'; known keys: %s", name, absl::StrJoin(names, ", ")));
      }
    }
    return absl::OkStatus();
  }
  static absl::Status Names(const YAML::Node& seq, absl::string_view key,
                            std::vector<std::string>* out) {
    for (size_t i = 0; i < seq.size(); ++i) {
      const YAML::Node n = seq[i];
      if (!n.IsScalar() || !ValidName(n.Scalar())) {
        return Error(
            n, absl::StrCat(key, "[", i, "]"),
            "must be a non-empty name of at most 128 printable ASCII characters without spaces");
      }
      out->push_back(n.Scalar());
      if (out->size() > kMaxTopologyNodes) {
        return Error(n, key, absl::StrFormat("more than %u nodes", kMaxTopologyNodes));
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<uint32_t> NodeOf(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) return Error(n, key, "must be a node name");
    auto it = index_.find(n.Scalar());
    if (it == index_.end()) {
      return Error(n, key,
                   absl::StrFormat("'%s' is not a rank or switch; declare it under `ranks:` or "
                                   "`switches:`",
                                   n.Scalar()));
    }
    return it->second;
  }
  static absl::StatusOr<double> Bandwidth(const YAML::Node& n, const std::string& key) {
    if (!n.IsDefined() || !n.IsScalar())
      return Error(n, key, absl::StrCat("missing; ", kBandwidthHint));
    absl::StatusOr<double> v = ParseBandwidth(n.Scalar());
    if (!v.ok()) return Error(n, key, v.status().message());
    if (!(*v > 0)) return Error(n, key, "must be positive");
    return *v;
  }
  static absl::StatusOr<double> Latency(const YAML::Node& n, const std::string& key) {
    if (!n.IsScalar()) return Error(n, key, absl::StrCat("must be a duration; ", kLatencyHint));
    absl::StatusOr<double> v = ParseLatency(n.Scalar());
    if (!v.ok()) return Error(n, key, v.status().message());
    if (*v < 0) return Error(n, key, "must not be negative");
    return *v;
  }

  absl::flat_hash_map<std::string, uint32_t> index_;
};

std::string ExactNumber(double v) { return absl::StrFormat("%.17g", v); }

}  // namespace

absl::StatusOr<double> ParseBandwidth(std::string_view text) {
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"bit", 1.0 / 8},    {"kbit", 1e3 / 8},    {"Mbit", 1e6 / 8},   {"Gbit", 1e9 / 8},
      {"Tbit", 1e12 / 8},  {"bit/s", 1.0 / 8},   {"kbit/s", 1e3 / 8}, {"Mbit/s", 1e6 / 8},
      {"Gbit/s", 1e9 / 8}, {"Tbit/s", 1e12 / 8}, {"bps", 1.0 / 8},    {"kbps", 1e3 / 8},
      {"Mbps", 1e6 / 8},   {"Gbps", 1e9 / 8},    {"B/s", 1},          {"kB/s", 1e3},
      {"MB/s", 1e6},       {"GB/s", 1e9},        {"TB/s", 1e12}};
  return ParseWithUnit(absl::string_view(text.data(), text.size()), "bandwidth", kUnits,
                       kBandwidthHint, /*bare_zero_ok=*/false);
}

absl::StatusOr<double> ParseLatency(std::string_view text) {
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"µs", 1e-6}, {"ns", 1e-9}};
  return ParseWithUnit(absl::string_view(text.data(), text.size()), "latency", kUnits, kLatencyHint,
                       /*bare_zero_ok=*/true);
}

absl::StatusOr<Topology> TopologyFromYaml(const YAML::Node& node) {
  try {
    return Reader().Read(node);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("topology: cannot read YAML: ", e.what()));
  }
}

absl::StatusOr<Topology> ParseTopology(std::string_view yaml_text) {
  const std::string text(yaml_text);
  try {
    // yaml-cpp 0.7 neither rejects nor consumes a stray ',' before a document's content (Load()
    // returns an empty document); walk the documents with the event parser first, as the Nüwa
    // DSL does, and refuse a second document.
    if (std::optional<SecondYamlDocument> second = FindSecondYamlDocument(text)) {
      const YAML::Mark& m = second->mark;
      if (second->stray) {
        return absl::InvalidArgumentError(
            absl::StrFormat("topology:%d:%d: unexpected '%s' where the document should start",
                            m.line + 1, m.column + 1, text.substr(m.pos, 1)));
      }
      return absl::InvalidArgumentError(absl::StrFormat(
          "topology:%d:1: a second YAML document starts here; a topology holds one", m.line + 1));
    }
    return TopologyFromYaml(YAML::Load(text));
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(absl::StrFormat("topology:%d:%d: YAML syntax: %s",
                                                      e.mark.line + 1, e.mark.column + 1, e.msg));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("topology: cannot read YAML: ", e.what()));
  }
}

absl::Status ValidateTopology(const Topology& t) {
  if (t.ranks < 1 || t.ranks > kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("topology: %u ranks; use 1..%u", t.ranks, kMaxRanks));
  }
  if (t.nodes.size() < t.ranks || t.nodes.size() > kMaxTopologyNodes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("topology: %u nodes for %u ranks; need ranks ≤ nodes ≤ %u", t.nodes.size(),
                        t.ranks, kMaxTopologyNodes));
  }
  if (t.links.size() > kMaxTopologyLinks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("topology: %u links; at most %u", t.links.size(), kMaxTopologyLinks));
  }
  absl::flat_hash_map<absl::string_view, uint32_t> names;
  for (uint32_t i = 0; i < t.nodes.size(); ++i) {
    if (!ValidName(t.nodes[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "topology: node %u: name '%s' must be 1..128 printable ASCII characters, no spaces", i,
          t.nodes[i]));
    }
    if (!names.emplace(t.nodes[i], i).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("topology: '%s' is named twice; names must be unique", t.nodes[i]));
    }
  }
  const uint32_t n = static_cast<uint32_t>(t.nodes.size());
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  pairs.reserve(t.links.size());
  std::vector<std::vector<uint32_t>> out(n), in(n);
  for (size_t i = 0; i < t.links.size(); ++i) {
    const Link& l = t.links[i];
    if (l.src >= n || l.dst >= n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "topology: links[%u]: node %u is not one of the %u nodes", i, std::max(l.src, l.dst), n));
    }
    if (l.src == l.dst) {
      return absl::InvalidArgumentError(
          absl::StrFormat("topology: links[%u]: joins '%s' to itself", i, t.nodes[l.src]));
    }
    if (!(l.bytes_per_second > 0) || !std::isfinite(l.bytes_per_second)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("topology: link %s→%s: bandwidth %g must be positive and finite",
                          t.nodes[l.src], t.nodes[l.dst], l.bytes_per_second));
    }
    if (!(l.latency_s >= 0) || !std::isfinite(l.latency_s)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("topology: link %s→%s: latency %g must be finite and ≥ 0", t.nodes[l.src],
                          t.nodes[l.dst], l.latency_s));
    }
    pairs.emplace_back(l.src, l.dst);
    out[l.src].push_back(l.dst);
    in[l.dst].push_back(l.src);
  }
  std::sort(pairs.begin(), pairs.end());
  for (size_t i = 1; i < pairs.size(); ++i) {
    if (pairs[i] == pairs[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("topology: two links from '%s' to '%s'; give each direction once",
                          t.nodes[pairs[i].first], t.nodes[pairs[i].second]));
    }
  }
  // Every rank reaches rank 0 and rank 0 reaches every rank, so every pair is connected.
  for (const auto* adj : {&out, &in}) {
    std::vector<char> reached(n, 0);
    std::vector<uint32_t> stack = {0};
    reached[0] = 1;
    while (!stack.empty()) {
      uint32_t v = stack.back();
      stack.pop_back();
      for (uint32_t w : (*adj)[v]) {
        if (!reached[w]) {
          reached[w] = 1;
          stack.push_back(w);
        }
      }
    }
    for (uint32_t r = 0; r < t.ranks; ++r) {
      if (!reached[r]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "topology: no path %s '%s' %s '%s'; add links so that every rank reaches every other",
            adj == &out ? "from" : "to", t.nodes[0], adj == &out ? "to" : "from", t.nodes[r]));
      }
    }
  }
  return absl::OkStatus();
}

uint64_t TopologyDigest(const Topology& t) {
  Fnv1a h;
  h.U64(t.ranks);
  h.U64(t.nodes.size());
  for (const std::string& name : t.nodes) h.Str(name);
  std::vector<const Link*> links;
  links.reserve(t.links.size());
  for (const Link& l : t.links) links.push_back(&l);
  std::sort(links.begin(), links.end(), [](const Link* x, const Link* y) {
    return std::tie(x->src, x->dst) < std::tie(y->src, y->dst);
  });
  h.U64(links.size());
  for (const Link* l : links) {
    h.U64(l->src);
    h.U64(l->dst);
    h.Double(l->bytes_per_second);
    h.Double(l->latency_s);
  }
  return h.value();
}

std::string TopologyToYaml(const Topology& t) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "ranks" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (uint32_t i = 0; i < t.ranks && i < t.nodes.size(); ++i) out << t.nodes[i];
  out << YAML::EndSeq;
  if (t.nodes.size() > t.ranks) {
    out << YAML::Key << "switches" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (size_t i = t.ranks; i < t.nodes.size(); ++i) out << t.nodes[i];
    out << YAML::EndSeq;
  }
  out << YAML::Key << "links" << YAML::Value << YAML::BeginSeq;
  auto name = [&](uint32_t i) { return i < t.nodes.size() ? t.nodes[i] : absl::StrCat("?", i); };
  for (const Link& l : t.links) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "from" << YAML::Value << name(l.src);
    out << YAML::Key << "to" << YAML::Value << name(l.dst);
    out << YAML::Key << "bandwidth" << YAML::Value << ExactNumber(l.bytes_per_second) + "B/s";
    out << YAML::Key << "latency" << YAML::Value << ExactNumber(l.latency_s) + "s";
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

absl::StatusOr<Topology> TopologyFromFabric(const nuwa::Fabric& f, double bytes_per_second,
                                            double latency_s) {
  HEDDLE_RETURN_IF_ERROR(nuwa::Validate(f));
  if (!(bytes_per_second > 0) || !std::isfinite(bytes_per_second)) {
    return absl::InvalidArgumentError("fabric topology: bytes_per_second must be positive");
  }
  if (!(latency_s >= 0) || !std::isfinite(latency_s)) {
    return absl::InvalidArgumentError("fabric topology: latency must be finite and ≥ 0");
  }
  const nuwa::Shape& s = f.shape;
  const uint64_t hosts = nuwa::NodeCount(s, 0);
  if (hosts > kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fabric '%s': %u hosts; a collective topology takes at most %u ranks",
                        f.name, hosts, kMaxRanks));
  }
  uint64_t nodes = hosts;
  for (int tier = 1; tier <= s.tiers; ++tier)
    nodes += uint64_t{s.planes} * nuwa::NodeCount(s, tier);
  if (nodes > kMaxTopologyNodes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fabric '%s': %u nodes; a collective topology takes at most %u", f.name,
                        nodes, kMaxTopologyNodes));
  }
  // Dense numbering: hosts, then per plane, per tier, by index.
  std::vector<uint64_t> base((s.planes) * (s.tiers + 1), 0);
  auto id = [&](nuwa::NodeRef n) -> uint32_t {
    if (n.tier == 0) return n.index;
    return static_cast<uint32_t>(base[n.plane * (s.tiers + 1) + n.tier] + n.index);
  };
  Topology t;
  t.ranks = static_cast<uint32_t>(hosts);
  for (uint32_t h = 0; h < hosts; ++h) t.nodes.push_back(nuwa::NodeName(f, nuwa::NodeRef{0, 0, h}));
  for (uint32_t p = 0; p < s.planes; ++p) {
    for (int tier = 1; tier <= s.tiers; ++tier) {
      base[p * (s.tiers + 1) + tier] = t.nodes.size();
      const uint64_t count = nuwa::NodeCount(s, tier);
      for (uint32_t i = 0; i < count; ++i) {
        t.nodes.push_back(nuwa::NodeName(
            f, nuwa::NodeRef{static_cast<uint8_t>(p), static_cast<uint8_t>(tier), i}));
      }
    }
  }
  std::vector<nuwa::NodeRef> dead_switches = f.failures.switches;
  std::sort(dead_switches.begin(), dead_switches.end());
  std::vector<nuwa::LinkRef> dead_links = f.failures.links;
  std::sort(dead_links.begin(), dead_links.end());
  auto dead = [&](nuwa::NodeRef n) {
    return n.tier > 0 && std::binary_search(dead_switches.begin(), dead_switches.end(), n);
  };
  auto add = [&](nuwa::NodeRef lower, int tier) -> absl::Status {
    const uint32_t ups = nuwa::UpPorts(s, tier);
    for (uint32_t u = 0; u < ups; ++u) {
      const nuwa::NodeRef up = nuwa::Parent(s, lower, u);
      if (dead(lower) || dead(up)) continue;
      if (std::binary_search(dead_links.begin(), dead_links.end(), nuwa::LinkRef{lower, u})) {
        continue;
      }
      const double gbps = f.link_gbps[up.tier];
      const double bw = gbps > 0 ? gbps * 1e9 / 8 : bytes_per_second;
      t.links.push_back(Link{id(lower), id(up), bw, latency_s});
      t.links.push_back(Link{id(up), id(lower), bw, latency_s});
      if (t.links.size() > kMaxTopologyLinks) {
        return absl::InvalidArgumentError(
            absl::StrFormat("fabric '%s': more than %u links", f.name, kMaxTopologyLinks));
      }
    }
    return absl::OkStatus();
  };
  for (uint32_t h = 0; h < hosts; ++h) HEDDLE_RETURN_IF_ERROR(add(nuwa::NodeRef{0, 0, h}, 0));
  for (uint32_t p = 0; p < s.planes; ++p) {
    for (int tier = 1; tier < s.tiers; ++tier) {
      const uint64_t count = nuwa::NodeCount(s, tier);
      for (uint32_t i = 0; i < count; ++i) {
        HEDDLE_RETURN_IF_ERROR(
            add(nuwa::NodeRef{static_cast<uint8_t>(p), static_cast<uint8_t>(tier), i}, tier));
      }
    }
  }
  HEDDLE_RETURN_IF_ERROR(ValidateTopology(t));
  return t;
}

}  // namespace heddle::collective
