// File: control/nuwa/dsl.cc
//
// YAML -> Fabric in three steps. The structural pass walks the document (types, ranges, unknown
// and duplicate keys) and tags each problem with the position of the node at fault; the fabric
// section comes first because everything after it (tier names in `via`, node names in failures,
// the address field widths) depends on the shape. fabric.h's Validate() then runs as a backstop
// for the rules that span sections; its messages already name the key and are placed at the
// section they name.

#include "control/nuwa/dsl.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <span>
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
#include "absl/strings/strip.h"
#include "common/text_match.h"
#include "common/yaml_documents.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace heddle::nuwa {
namespace {

constexpr size_t kMaxFileSize = 16 << 20;
constexpr size_t kMaxNameLength = 64;
constexpr double kMaxLinkGbps = 100000;  // 100 Tb/s: anything above is a unit mix-up
constexpr uint32_t kDefaultLinkGbps = 400;

using Keys = std::span<const absl::string_view>;

constexpr absl::string_view kTopKeys[] = {"fabric", "addressing", "hash", "routing", "failures"};
constexpr absl::string_view kFabricKeys[] = {"name",
                                             "kind",
                                             "k",
                                             "hosts_per_leaf",
                                             "leaves",
                                             "spines",
                                             "hosts_per_tor",
                                             "tors_per_pod",
                                             "pods",
                                             "aggs_per_pod",
                                             "cores_per_agg",
                                             "rails",
                                             "servers_per_su",
                                             "sus_per_group",
                                             "groups",
                                             "spines_per_group",
                                             "cores_per_spine",
                                             "host_uplinks",
                                             "planes",
                                             "tier_names",
                                             "link_gbps"};
constexpr absl::string_view kAddressingKeys[] = {"ipv4", "ipv6"};
constexpr absl::string_view kHashKeys[] = {"function", "seed", "bit_offset"};
constexpr absl::string_view kRoutingKeys[] = {"max_paths", "rail_local", "classes"};
constexpr size_t kMaxClasses = 32;
constexpr absl::string_view kClassKeys[] = {"name", "prefix", "max_paths", "planes", "via"};
constexpr absl::string_view kViaKeys[] = {"tier", "indexes"};
constexpr absl::string_view kFailureKeys[] = {"links", "switches"};
constexpr absl::string_view kLinkKeys[] = {"node", "up_port"};

// The keys every kind takes, and each kind's own parameters (required first).
constexpr absl::string_view kCommonFabricKeys[] = {"name", "kind", "planes", "tier_names",
                                                   "link_gbps"};
struct KindSpec {
  Kind kind;
  absl::string_view name;
  std::span<const absl::string_view> required;
  std::span<const absl::string_view> optional;
};
constexpr absl::string_view kFatTreeRequired[] = {"k"};
constexpr absl::string_view kClos2Required[] = {"hosts_per_leaf", "leaves", "spines"};
constexpr absl::string_view kClos3Required[] = {"hosts_per_tor", "tors_per_pod", "pods",
                                                "aggs_per_pod", "cores_per_agg"};
constexpr absl::string_view kRailRequired[] = {"rails", "servers_per_su", "sus_per_group",
                                               "spines_per_group"};
constexpr absl::string_view kHostUplinks[] = {"host_uplinks"};
constexpr absl::string_view kRailOptional[] = {"groups", "cores_per_spine", "host_uplinks"};
constexpr KindSpec kKinds[] = {
    {Kind::kClos2, "clos2", kClos2Required, kHostUplinks},
    {Kind::kFatTree, "fat-tree", kFatTreeRequired, {}},
    {Kind::kClos3, "clos3", kClos3Required, kHostUplinks},
    {Kind::kRailOptimized, "rail-optimized", kRailRequired, kRailOptional},
};

bool Contains(Keys keys, absl::string_view key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", s, "\""); }

std::string DidYouMean(absl::string_view s, Keys candidates) {
  absl::string_view best = NearestKey(s, candidates);
  return best.empty() ? "" : absl::StrCat("did you mean ", Quote(best), "? ");
}

bool IsName(absl::string_view s) {
  if (s.empty() || s.size() > kMaxNameLength) return false;
  for (char ch : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' &&
        ch != '.') {
      return false;
    }
  }
  return true;
}

// Tier names end up in node names ("agg[3]", "p1/agg[3]") and link names ("agg[3]-core[5]").
bool IsTierName(absl::string_view s) {
  if (s.empty() || s.size() > 16 || !absl::ascii_islower(static_cast<unsigned char>(s[0]))) {
    return false;
  }
  for (char ch : s) {
    if (!absl::ascii_islower(static_cast<unsigned char>(ch)) &&
        !absl::ascii_isdigit(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-') {
      return false;
    }
  }
  // "tier2" is how ParseNodeName names tiers by number.
  uint32_t n;
  return !(absl::StartsWith(s, "tier") && absl::SimpleAtoi(s.substr(4), &n));
}

// Shortest decimal form that reads back to the same double.
std::string FormatDouble(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, ptr) : absl::StrCat(v);
}

// "0-3,6" for bits 0,1,2,3,6.
std::string FormatIndexes(uint64_t mask) {
  std::vector<std::string> parts;
  for (int i = 0; i < 64;) {
    if (!(mask >> i & 1)) {
      ++i;
      continue;
    }
    int j = i;
    while (j + 1 < 64 && (mask >> (j + 1) & 1)) ++j;
    parts.push_back(i == j ? absl::StrCat(i) : absl::StrCat(i, "-", j));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

bool HasPlanePrefix(absl::string_view s) {
  if (!absl::ConsumePrefix(&s, "p")) return false;
  size_t slash = s.find('/');
  uint32_t plane;
  return slash != absl::string_view::npos && absl::SimpleAtoi(s.substr(0, slash), &plane);
}

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  void Parse(const YAML::Node& root, Fabric* f) {
    if (root.IsNull() || !root.IsDefined()) {
      Error(root, "fabric", "missing; the file must describe a fabric (see docs/nuwa.md §1)");
      return;
    }
    if (!Map(root, "", kTopKeys)) return;
    root_ = root;
    auto fabric = Child(root, "fabric");
    if (!fabric) {
      Error(root, "fabric", "missing; add a `fabric:` section with name, kind and its parameters");
      return;
    }
    if (!Fabric_(*fabric, f)) return;  // the rest depends on the shape
    Addressing(f);
    Hash(f);
    Routing(f);
    Failures_(f);
  }

  const std::vector<std::string>& problems() const { return problems_; }

  // Where section `key` (top level) starts, for messages that name only a key.
  YAML::Mark SectionMark(absl::string_view key) const {
    if (root_ && root_->IsMap()) {
      for (auto it = root_->begin(); it != root_->end(); ++it) {
        const YAML::Node k = it->first;
        if (k.IsScalar() && k.Scalar() == key) return k.Mark();
      }
    }
    return YAML::Mark::null_mark();
  }

 private:
  std::string Where(const YAML::Mark& m) const {
    if (m.is_null()) return absl::StrCat(file_, ":1:1");
    return absl::StrCat(file_, ":", m.line + 1, ":", m.column + 1);
  }

  void Error(const YAML::Node& n, absl::string_view path, absl::string_view msg) {
    problems_.push_back(absl::StrCat(Where(n.IsDefined() ? n.Mark() : YAML::Mark::null_mark()),
                                     ": ", path.empty() ? "(top level)" : path, ": ", msg));
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

  static std::string Join(absl::string_view path, absl::string_view key) {
    return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
  }

  static std::optional<YAML::Node> Child(const YAML::Node& map, absl::string_view key) {
    if (!map.IsMap()) return std::nullopt;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node k = it->first;
      if (k.IsScalar() && k.Scalar() == key) return YAML::Node(it->second);
    }
    return std::nullopt;
  }

  // True if `n` is a mapping; reports non-string, unknown and duplicate keys.
  bool Map(const YAML::Node& n, absl::string_view path, Keys keys) {
    if (!n.IsMap()) {
      Error(n, path,
            absl::StrCat("expected a mapping with keys ", absl::StrJoin(keys, ", "), ", got ",
                         Describe(n)));
      return false;
    }
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node k = it->first;
      if (!k.IsScalar()) {
        Error(k, path, absl::StrCat("keys must be plain names, got ", Describe(k)));
        continue;
      }
      const std::string& key = k.Scalar();
      if (!seen.insert(key).second) {
        Error(k, Join(path, key), "appears twice; keep one");
        continue;
      }
      if (Contains(keys, key)) continue;
      Error(k, Join(path, key),
            absl::StrCat("unknown key; ", DidYouMean(key, keys),
                         "valid keys: ", absl::StrJoin(keys, ", ")));
    }
    return true;
  }

  // A section that may be absent or empty ("hash:"), meaning all defaults.
  std::optional<YAML::Node> Section(const YAML::Node& map, absl::string_view key,
                                    absl::string_view path, Keys keys) {
    auto n = Child(map, key);
    if (!n || n->IsNull()) return std::nullopt;
    if (!Map(*n, path, keys)) return std::nullopt;
    return n;
  }

  template <typename T>
  bool Uint(const YAML::Node& n, const std::string& path, uint64_t lo, uint64_t hi, T* out,
            bool hex = false) {
    std::string range = absl::StrCat("an integer in ", lo, "..", hi);
    if (!n.IsScalar()) {
      Error(n, path, absl::StrCat("expected ", range, ", got ", Describe(n)));
      return false;
    }
    uint64_t v = 0;
    switch (ParseUint(n.Scalar(), &v, hex)) {
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

  bool Number(const YAML::Node& n, const std::string& path, double lo, double hi, double* out) {
    double v = 0;
    if (!n.IsScalar() || !absl::SimpleAtod(n.Scalar(), &v) || !std::isfinite(v) ||
        absl::StrContains(n.Scalar(), "x") || absl::StrContains(n.Scalar(), "X")) {
      Error(n, path,
            absl::StrCat(Describe(n), " is not a number; use a decimal number such as 400"));
      return false;
    }
    if (v <= lo || v > hi) {
      Error(n, path,
            absl::StrCat(n.Scalar(), " is out of range; use a number above ", FormatDouble(lo),
                         " and at most ", FormatDouble(hi)));
      return false;
    }
    *out = v;
    return true;
  }

  bool Bool(const YAML::Node& n, const std::string& path, bool* out) {
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      Error(n, path, absl::StrCat(Describe(n), " is not a boolean; use true or false"));
      return false;
    }
    *out = v;
    return true;
  }

  bool Scalar(const YAML::Node& n, const std::string& path, absl::string_view what,
              std::string* out) {
    if (!n.IsScalar() || n.Scalar().empty()) {
      Error(n, path, absl::StrCat("expected ", what, ", got ", Describe(n)));
      return false;
    }
    *out = n.Scalar();
    return true;
  }

  bool Name(const YAML::Node& n, const std::string& path, std::string* out) {
    if (!Scalar(n, path, "a name", out)) return false;
    if (!IsName(*out)) {
      Error(n, path,
            absl::StrCat(Quote(*out), " is not a valid name; use 1..", kMaxNameLength,
                         " letters, digits, '.', '_' or '-'"));
      return false;
    }
    return true;
  }

  // ---- fabric ----------------------------------------------------------------------------------

  bool Fabric_(const YAML::Node& n, Fabric* f) {
    const size_t before = problems_.size();
    if (!Map(n, "fabric", kFabricKeys)) return false;
    if (auto v = Child(n, "name")) {
      Name(*v, "fabric.name", &f->name);
    } else {
      Error(n, "fabric.name", "missing; give the fabric a name (letters, digits, '.', '_', '-')");
    }
    auto kind_node = Child(n, "kind");
    std::vector<absl::string_view> kind_names;
    for (const KindSpec& k : kKinds) kind_names.push_back(k.name);
    const KindSpec* spec = nullptr;
    if (!kind_node) {
      Error(n, "fabric.kind",
            absl::StrCat("missing; set one of ", absl::StrJoin(kind_names, ", ")));
      return false;
    }
    std::string kind;
    if (!Scalar(*kind_node, "fabric.kind", "a topology kind", &kind)) return false;
    for (const KindSpec& k : kKinds) {
      if (k.name == kind) spec = &k;
    }
    if (!spec) {
      Error(*kind_node, "fabric.kind",
            absl::StrCat(Quote(kind), " is not a topology kind; ", DidYouMean(kind, kind_names),
                         "use one of ", absl::StrJoin(kind_names, ", ")));
      return false;
    }
    f->kind = spec->kind;

    // Parameters of other kinds are mistakes, not something to ignore.
    std::vector<absl::string_view> own(spec->required.begin(), spec->required.end());
    own.insert(own.end(), spec->optional.begin(), spec->optional.end());
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node k = it->first;
      if (!k.IsScalar() || !Contains(kFabricKeys, k.Scalar())) continue;
      if (Contains(kCommonFabricKeys, k.Scalar()) || Contains(own, k.Scalar())) continue;
      Error(k, Join("fabric", k.Scalar()),
            absl::StrCat("does not apply to kind ", spec->name, "; ", spec->name, " takes ",
                         absl::StrJoin(own, ", ")));
    }
    bool missing = false;
    for (absl::string_view key : spec->required) {
      if (!Child(n, key)) {
        Error(n, Join("fabric", key),
              absl::StrCat("missing; kind ", spec->name, " needs ",
                           absl::StrJoin(spec->required, ", ")));
        missing = true;
      }
    }
    if (missing) return false;

    Shape& s = f->shape;
    auto m = [&](absl::string_view key, uint32_t* out) {
      return Uint(*Child(n, key), Join("fabric", key), 1, kMaxChildren, out);
    };
    auto w = [&](absl::string_view key, uint32_t* out) {
      if (auto v = Child(n, key)) return Uint(*v, Join("fabric", key), 1, kMaxFanout, out);
      *out = 1;  // optional ones (host_uplinks) default to 1
      return true;
    };
    switch (spec->kind) {
      case Kind::kFatTree: {
        uint32_t k = 0;
        const YAML::Node kn = *Child(n, "k");
        if (!Uint(kn, "fabric.k", 4, 2 * kMaxFanout, &k)) break;
        if (k % 2 != 0) {
          Error(
              kn, "fabric.k",
              absl::StrCat(k, " is odd; a k-ary fat tree needs an even k in 4..", 2 * kMaxFanout));
          break;
        }
        s.tiers = 3;
        s.m = {0, k / 2, k / 2, k};
        s.w = {0, 1, k / 2, k / 2};
        break;
      }
      case Kind::kClos2:
        s.tiers = 2;
        m("hosts_per_leaf", &s.m[1]);
        m("leaves", &s.m[2]);
        w("host_uplinks", &s.w[1]);
        w("spines", &s.w[2]);
        break;
      case Kind::kClos3:
        s.tiers = 3;
        m("hosts_per_tor", &s.m[1]);
        m("tors_per_pod", &s.m[2]);
        m("pods", &s.m[3]);
        w("host_uplinks", &s.w[1]);
        w("aggs_per_pod", &s.w[2]);
        w("cores_per_agg", &s.w[3]);
        break;
      case Kind::kRailOptimized: {
        uint32_t sus = 0;
        if (!Uint(*Child(n, "rails"), "fabric.rails", 1, kMaxChildren, &s.rails)) break;
        m("servers_per_su", &s.m[1]);
        if (!Uint(*Child(n, "sus_per_group"), "fabric.sus_per_group", 1, kMaxChildren, &sus)) {
          break;
        }
        if (uint64_t{sus} * s.rails > kMaxChildren) {
          Error(*Child(n, "sus_per_group"), "fabric.sus_per_group",
                absl::StrCat(sus, " scale units x ", s.rails, " rails = ", uint64_t{sus} * s.rails,
                             " leaves per group; a spine takes at most ", kMaxChildren,
                             ", so use fewer scale units per group and more groups"));
          break;
        }
        s.m[2] = sus * s.rails;
        w("host_uplinks", &s.w[1]);
        w("spines_per_group", &s.w[2]);
        auto cores = Child(n, "cores_per_spine");
        auto groups = Child(n, "groups");
        if (cores) {
          s.tiers = 3;
          w("cores_per_spine", &s.w[3]);
          if (!groups) {
            Error(n, "fabric.groups",
                  "missing; a 3-tier rail-optimized fabric (cores_per_spine is set) needs the "
                  "number of groups the cores join");
            break;
          }
          m("groups", &s.m[3]);
        } else {
          s.tiers = 2;
          uint32_t g = 1;
          if (groups && Uint(*groups, "fabric.groups", 1, kMaxChildren, &g) && g != 1) {
            Error(*groups, "fabric.groups",
                  absl::StrCat(g,
                               " groups need a core tier to join them; set cores_per_spine, "
                               "or drop groups for a 2-tier fabric"));
          }
        }
        break;
      }
    }
    s.planes = 1;
    if (auto v = Child(n, "planes")) Uint(*v, "fabric.planes", 1, kMaxPlanes, &s.planes);
    if (problems_.size() != before) return false;
    uint64_t nodes = 0;
    for (int t = 0; t <= s.tiers; ++t) nodes += NodeCount(s, t) * (t == 0 ? 1 : s.planes);
    if (nodes > (uint64_t{1} << 24)) {
      Error(n, "fabric",
            absl::StrCat("describes ", nodes,
                         " nodes; heddle numbers nodes with 24 bits (at most 16,777,216), so make "
                         "the fabric smaller"));
      return false;
    }
    if (s.planes * s.w[1] > kMaxFanout) {
      Error(*Child(n, "planes"), "fabric.planes",
            absl::StrCat(s.planes, " planes x ", s.w[1], " host uplinks = ", s.planes * s.w[1],
                         " host ports; at most ", kMaxFanout));
      return false;
    }

    f->tier_names = DefaultTierNames(f->kind, s.tiers);
    if (auto v = Child(n, "tier_names")) TierNames(*v, f);
    f->link_gbps = {};
    for (int t = 1; t <= s.tiers; ++t) f->link_gbps[t] = kDefaultLinkGbps;
    if (auto v = Child(n, "link_gbps")) LinkGbps(*v, f);
    return problems_.size() == before;
  }

  void TierNames(const YAML::Node& n, Fabric* f) {
    const int tiers = f->shape.tiers;
    const std::string example =
        absl::StrCat("[", absl::StrJoin(std::span(f->tier_names).first(tiers + 1), ", "), "]");
    if (!n.IsSequence() || static_cast<int>(n.size()) != tiers + 1) {
      Error(n, "fabric.tier_names",
            absl::StrCat("expected a list of ", tiers + 1, " names, hosts first (this fabric has ",
                         tiers, " switch tiers), such as ", example, ", got ",
                         n.IsSequence() ? absl::StrCat(n.size(), " names") : Describe(n)));
      return;
    }
    std::array<std::string, kMaxTiers + 1> names{};
    for (int t = 0; t <= tiers; ++t) {
      const std::string path = absl::StrCat("fabric.tier_names[", t, "]");
      if (!Scalar(n[t], path, "a tier name", &names[t])) return;
      if (!IsTierName(names[t])) {
        Error(n[t], path,
              absl::StrCat(Quote(names[t]),
                           " is not a valid tier name; use up to 16 lower-case letters, digits, "
                           "'_' or '-', starting with a letter (and not tierN)"));
        return;
      }
      for (int u = 0; u < t; ++u) {
        if (names[u] == names[t]) {
          Error(n[t], path, absl::StrCat(Quote(names[t]), " names two tiers; make them distinct"));
          return;
        }
      }
    }
    f->tier_names = names;
  }

  // A number for every tier, or a mapping from the upper tier's name to the speed of the links
  // below it ({leaf: 400, spine: 800}: host-leaf 400, leaf-spine 800).
  void LinkGbps(const YAML::Node& n, Fabric* f) {
    const int tiers = f->shape.tiers;
    if (n.IsScalar()) {
      double v;
      if (!Number(n, "fabric.link_gbps", 0, kMaxLinkGbps, &v)) return;
      for (int t = 1; t <= tiers; ++t) f->link_gbps[t] = v;
      return;
    }
    std::vector<absl::string_view> keys;
    for (int t = 1; t <= tiers; ++t) keys.push_back(f->tier_names[t]);
    if (!Map(n, "fabric.link_gbps", keys)) return;
    for (int t = 1; t <= tiers; ++t) {
      const std::string path = absl::StrCat("fabric.link_gbps.", f->tier_names[t]);
      auto v = Child(n, f->tier_names[t]);
      if (!v) {
        Error(n, path,
              absl::StrCat("missing; give the speed of the ", f->tier_names[t - 1], "-",
                           f->tier_names[t], " links, or one number for all tiers"));
        continue;
      }
      Number(*v, path, 0, kMaxLinkGbps, &f->link_gbps[t]);
    }
  }

  // ---- addressing ------------------------------------------------------------------------------

  void Addressing(Fabric* f) {
    AddressPlan& plan = f->addresses;
    plan = AddressPlan{};
    plan.ipv4_base = 10u << 24;
    plan.ipv4_prefix_len = 8;
    auto sec = Section(*root_, "addressing", "addressing", kAddressingKeys);
    std::optional<YAML::Node> v4, v6;
    if (sec) {
      v4 = Child(*sec, "ipv4");
      v6 = Child(*sec, "ipv6");
    }
    if (v4) {
      std::array<uint8_t, 16> a{};
      uint8_t len = 0;
      bool is_v4 = false;
      if (!Prefix(*v4, "addressing.ipv4", &a, &len, &is_v4)) return;
      if (!is_v4) {
        Error(*v4, "addressing.ipv4", "is an IPv6 prefix; put it under addressing.ipv6");
        return;
      }
      plan.ipv4_base = uint32_t{a[12]} << 24 | uint32_t{a[13]} << 16 | uint32_t{a[14]} << 8 | a[15];
      plan.ipv4_prefix_len = static_cast<uint8_t>(len - 96);
    }
    if (v6) {
      bool is_v4 = false;
      uint8_t len = 0;
      if (!Prefix(*v6, "addressing.ipv6", &plan.ipv6_base, &len, &is_v4)) return;
      if (is_v4) {
        Error(*v6, "addressing.ipv6", "is an IPv4 prefix; put it under addressing.ipv4");
        return;
      }
      plan.has_ipv6 = true;
      plan.ipv6_prefix_len = len;
    }
    if (absl::Status st = LayOutAddresses(f->shape, plan); !st.ok()) {
      absl::string_view msg = st.message();
      const bool about_v6 = absl::StartsWith(msg, "addressing.ipv6");
      absl::ConsumePrefix(&msg, about_v6 ? "addressing.ipv6: " : "addressing.ipv4: ");
      const std::optional<YAML::Node>& at = about_v6 ? v6 : v4;
      Error(at ? *at : (sec ? *sec : *root_), about_v6 ? "addressing.ipv6" : "addressing.ipv4",
            at ? std::string(msg) : absl::StrCat("the default 10.0.0.0/8: ", msg));
    }
  }

  // "10.1.0.0/16" -> ::ffff:10.1.0.0 / 112; "fd00::/48" as is. Host bits must be clear.
  bool Prefix(const YAML::Node& n, const std::string& path, std::array<uint8_t, 16>* addr,
              uint8_t* len, bool* is_v4) {
    std::string text;
    if (!Scalar(n, path, "a CIDR prefix such as 10.0.0.0/8 or fd00::/48", &text)) return false;
    const size_t slash = text.find('/');
    if (slash == std::string::npos) {
      Error(n, path,
            absl::StrCat(Quote(text),
                         " has no prefix length; write a CIDR prefix such as 10.0.0.0/8"));
      return false;
    }
    const std::string host = text.substr(0, slash);
    *addr = {};
    uint32_t max_len = 32;
    in_addr a4;
    if (inet_pton(AF_INET, host.c_str(), &a4) == 1) {
      *is_v4 = true;
      (*addr)[10] = (*addr)[11] = 0xff;
      std::memcpy(addr->data() + 12, &a4, 4);
    } else if (inet_pton(AF_INET6, host.c_str(), addr->data()) == 1) {
      *is_v4 = false;
      max_len = 128;
    } else {
      Error(n, path, absl::StrCat(Quote(host), " is not an IPv4 or IPv6 address"));
      return false;
    }
    uint64_t l = 0;
    if (ParseUint(absl::string_view(text).substr(slash + 1), &l) != UintParse::kOk || l > max_len) {
      Error(
          n, path,
          absl::StrCat(Quote(text.substr(slash + 1)), " is not a prefix length; use 0..", max_len));
      return false;
    }
    const int full = static_cast<int>(l) + (*is_v4 ? 96 : 0);
    std::array<uint8_t, 16> net = *addr;
    for (int bit = full; bit < 128; ++bit)
      net[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
    if (net != *addr) {
      const std::string fixed = *is_v4
                                    ? FormatIpv4(uint32_t{net[12]} << 24 | uint32_t{net[13]} << 16 |
                                                 uint32_t{net[14]} << 8 | net[15])
                                    : FormatIpv6(net);
      Error(n, path,
            absl::StrCat(Quote(text), " has host bits set; give the network address ", fixed, "/",
                         l));
      return false;
    }
    *len = static_cast<uint8_t>(full);
    return true;
  }

  // ---- hash ------------------------------------------------------------------------------------

  void Hash(Fabric* f) {
    HashModel& h = f->hash;
    h = HashModel{};
    h.function = HashFunction::kUnknown;
    for (int t = 1; t <= f->shape.tiers; ++t) h.bit_offset[t] = DefaultBitOffset(t);
    auto sec = Section(*root_, "hash", "hash", kHashKeys);
    if (!sec) return;
    if (auto v = Child(*sec, "function")) {
      constexpr absl::string_view kFunctions[] = {"unknown", "crc32", "crc32c", "crc16"};
      std::string name;
      if (Scalar(*v, "hash.function", "a hash function", &name)) {
        bool found = false;
        for (HashFunction fn : {HashFunction::kUnknown, HashFunction::kCrc32, HashFunction::kCrc32c,
                                HashFunction::kCrc16}) {
          if (name == HashFunctionName(fn)) h.function = fn, found = true;
        }
        if (!found) {
          Error(*v, "hash.function",
                absl::StrCat(Quote(name), " is not a known hash model; ",
                             DidYouMean(name, kFunctions), "use one of ",
                             absl::StrJoin(kFunctions, ", "),
                             " (unknown: entropy values are consecutive, not path-distinct)"));
        }
      }
    }
    if (auto v = Child(*sec, "seed")) Uint(*v, "hash.seed", 0, UINT32_MAX, &h.seed_base, true);
    if (auto v = Child(*sec, "bit_offset")) {
      const uint32_t max = h.function == HashFunction::kCrc16 ? 15 : 31;
      const int tiers = f->shape.tiers;
      if (v->IsScalar()) {
        uint8_t off = 0;
        if (Uint(*v, "hash.bit_offset", 0, max, &off)) {
          for (int t = 1; t <= tiers; ++t) h.bit_offset[t] = off;
        }
        return;
      }
      std::vector<absl::string_view> keys;
      for (int t = 1; t <= tiers; ++t) keys.push_back(f->tier_names[t]);
      if (!Map(*v, "hash.bit_offset", keys)) return;
      for (int t = 1; t <= tiers; ++t) {
        if (auto o = Child(*v, f->tier_names[t])) {
          Uint(*o, absl::StrCat("hash.bit_offset.", f->tier_names[t]), 0, max, &h.bit_offset[t]);
        }
      }
    }
  }

  // ---- routing ---------------------------------------------------------------------------------

  void Routing(Fabric* f) {
    RoutingPolicy& r = f->routing;
    r = RoutingPolicy{};
    auto sec = Section(*root_, "routing", "routing", kRoutingKeys);
    if (!sec) return;
    if (auto v = Child(*sec, "max_paths")) {
      Uint(*v, "routing.max_paths", 1, fwd_max_paths_, &r.max_paths);
    }
    if (auto v = Child(*sec, "rail_local")) {
      if (Bool(*v, "routing.rail_local", &r.rail_local) && r.rail_local && f->shape.rails == 0) {
        Error(*v, "routing.rail_local",
              absl::StrCat("kind ", KindName(f->kind),
                           " has no rails; rail_local applies to rail-optimized fabrics only"));
      }
    }
    auto classes = Child(*sec, "classes");
    if (!classes || classes->IsNull()) return;
    if (!classes->IsSequence()) {
      Error(*classes, "routing.classes",
            absl::StrCat("expected a list of classes ({name, prefix, ...}), got ",
                         Describe(*classes)));
      return;
    }
    if (classes->size() > kMaxClasses) {
      Error(*classes, "routing.classes",
            absl::StrCat(classes->size(), " classes; at most ", kMaxClasses,
                         " (each takes an IPv4 and an IPv6 entry in the artifacts)"));
      return;
    }
    std::set<std::string> names;
    for (size_t i = 0; i < classes->size(); ++i) {
      const YAML::Node c = (*classes)[i];
      const std::string path = absl::StrCat("routing.classes[", i, "]");
      DestinationClass dc;
      if (!Class(c, path, *f, &dc)) continue;
      if (!names.insert(dc.name).second) {
        Error(*Child(c, "name"), path + ".name",
              absl::StrCat(Quote(dc.name), " names two classes; make the names distinct"));
        continue;
      }
      r.classes.push_back(std::move(dc));
    }
  }

  bool Class(const YAML::Node& c, const std::string& path, const Fabric& f, DestinationClass* dc) {
    const size_t before = problems_.size();
    if (!Map(c, path, kClassKeys)) return false;
    for (absl::string_view key : {"name", "prefix"}) {
      if (!Child(c, key)) {
        Error(c, Join(path, key),
              absl::StrCat("missing; a class needs a name and a destination prefix"));
      }
    }
    if (problems_.size() != before) return false;
    Name(*Child(c, "name"), path + ".name", &dc->name);
    bool is_v4;
    Prefix(*Child(c, "prefix"), path + ".prefix", &dc->prefix, &dc->prefix_len, &is_v4);
    if (auto v = Child(c, "max_paths")) {
      Uint(*v, path + ".max_paths", 1, fwd_max_paths_, &dc->max_paths);
    }
    if (auto v = Child(c, "planes")) {
      const std::string pp = path + ".planes";
      if (!v->IsSequence() || v->size() == 0) {
        Error(*v, pp,
              absl::StrCat("expected a non-empty list of plane numbers in 0..", f.shape.planes - 1,
                           ", got ", Describe(*v)));
      } else {
        for (size_t i = 0; i < v->size(); ++i) {
          uint32_t p = 0;
          if (!Uint((*v)[i], absl::StrCat(pp, "[", i, "]"), 0, f.shape.planes - 1, &p)) continue;
          if (dc->planes_mask & (1u << p)) {
            Error((*v)[i], absl::StrCat(pp, "[", i, "]"),
                  absl::StrCat("plane ", p, " is listed twice; keep one"));
          }
          dc->planes_mask |= 1u << p;
        }
      }
    }
    if (auto v = Section(c, "via", path + ".via", kViaKeys)) Via(*v, path + ".via", f, dc);
    return problems_.size() == before;
  }

  void Via(const YAML::Node& n, const std::string& path, const Fabric& f, DestinationClass* dc) {
    auto tier = Child(n, "tier");
    auto indexes = Child(n, "indexes");
    if (!tier || !indexes) {
      Error(n, path,
            "needs both tier (the tier name to go through) and indexes (which of its replicas, "
            "e.g. \"0-3\")");
      return;
    }
    std::string name;
    if (!Scalar(*tier, path + ".tier", "a tier name", &name)) return;
    std::vector<absl::string_view> allowed;
    for (int t = 2; t <= f.shape.tiers; ++t) allowed.push_back(f.tier_names[t]);
    int t = 0;
    for (int u = 0; u <= f.shape.tiers; ++u) {
      if (name == f.tier_names[u] || name == absl::StrCat("tier", u)) t = u;
    }
    if (t < 2) {
      Error(*tier, path + ".tier",
            absl::StrCat(Quote(name),
                         t == 0 && name != f.tier_names[0] ? " is not a tier of this fabric"
                                                           : " cannot be restricted",
                         "; use one of ", absl::StrJoin(allowed, ", "),
                         " (the first switch tier is chosen by the host's port, see planes)"));
      return;
    }
    const uint32_t w = f.shape.w[t];
    const std::string ip = path + ".indexes";
    const std::string range_hint =
        absl::StrCat("; each ", f.tier_names[t - 1], " has ", w, " ", f.tier_names[t],
                     " parents, so use indexes in 0..", w - 1);
    uint64_t mask = 0;
    auto add = [&](const YAML::Node& at, uint64_t lo, uint64_t hi) {
      if (lo > hi || hi >= w) {
        Error(at, ip,
              absl::StrCat(lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, "-", hi),
                           " is out of range", range_hint));
        return false;
      }
      for (uint64_t i = lo; i <= hi; ++i) mask |= uint64_t{1} << i;
      return true;
    };
    if (indexes->IsSequence()) {
      if (indexes->size() == 0) {
        Error(*indexes, ip, absl::StrCat("is empty", range_hint));
        return;
      }
      for (size_t i = 0; i < indexes->size(); ++i) {
        uint64_t v = 0;
        if (!Uint((*indexes)[i], absl::StrCat(ip, "[", i, "]"), 0, w - 1, &v)) return;
        mask |= uint64_t{1} << v;
      }
    } else if (indexes->IsScalar()) {
      for (absl::string_view part : absl::StrSplit(indexes->Scalar(), ',')) {
        part = absl::StripAsciiWhitespace(part);
        std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
        uint64_t lo = 0, hi = 0;
        if (ParseUint(ends[0], &lo) != UintParse::kOk ||
            (ends.size() == 2 && ParseUint(ends[1], &hi) != UintParse::kOk)) {
          Error(*indexes, ip,
                absl::StrCat(Quote(part), " is not an index or a range; write e.g. \"0-3,6\"",
                             range_hint));
          return;
        }
        if (ends.size() == 1) hi = lo;
        if (!add(*indexes, lo, hi)) return;
      }
    } else {
      Error(*indexes, ip,
            absl::StrCat("expected \"0-3,6\" or a list of indexes, got ", Describe(*indexes)));
      return;
    }
    dc->restrict_tier = t;
    dc->allowed_up_mask = mask;
  }

  // ---- failures --------------------------------------------------------------------------------

  // A node name in a failure entry; in a multi-plane fabric a switch needs its plane unless
  // `plane` (from the other end of a link) supplies it.
  std::optional<NodeRef> Node(const YAML::Node& at, const std::string& path, const Fabric& f,
                              std::string_view text_in, std::optional<uint8_t> plane) {
    const absl::string_view text(text_in.data(), text_in.size());
    absl::StatusOr<NodeRef> node = ParseNodeName(f, text_in);
    if (!node.ok()) {
      Error(at, path, absl::StrCat(node.status().message()));
      return std::nullopt;
    }
    if (node->tier > 0 && f.shape.planes > 1 && !HasPlanePrefix(text)) {
      if (!plane) {
        Error(at, path,
              absl::StrCat(Quote(text), " is in one of ", f.shape.planes,
                           " planes; name the plane, e.g. p0/", text));
        return std::nullopt;
      }
      node->plane = *plane;
    }
    return *node;
  }

  std::optional<LinkRef> LinkFromString(const YAML::Node& at, const std::string& path,
                                        const Fabric& f) {
    const std::string text = at.Scalar();
    // Split at "]-" (names), else at the '-' where both sides name nodes (addresses).
    std::vector<std::pair<std::string, std::string>> splits;
    if (size_t p = text.find("]-"); p != std::string::npos) {
      splits.push_back({text.substr(0, p + 1), text.substr(p + 2)});
    } else {
      for (size_t p = text.find('-'); p != std::string::npos; p = text.find('-', p + 1)) {
        if (ParseNodeName(f, text.substr(0, p)).ok() && ParseNodeName(f, text.substr(p + 1)).ok()) {
          splits.push_back({text.substr(0, p), text.substr(p + 1)});
        }
      }
    }
    if (splits.empty()) {
      Error(at, path,
            absl::StrCat(Quote(text), " is not a link; write the two ends as A-B, e.g. ",
                         NodeName(f, NodeRef{0, 1, 0}), "-", NodeName(f, NodeRef{0, 2, 0}),
                         ", or {node: NAME, up_port: N}"));
      return std::nullopt;
    }
    const auto& [left, right] = splits[0];
    std::optional<uint8_t> plane;
    for (const std::string& side : {left, right}) {
      if (HasPlanePrefix(side)) {
        auto n = ParseNodeName(f, side);
        if (n.ok()) plane = n->plane;
      }
    }
    auto a = Node(at, path, f, left, plane);
    if (!a) return std::nullopt;
    auto b = Node(at, path, f, right, plane);
    if (!b) return std::nullopt;
    NodeRef lower = a->tier < b->tier ? *a : *b;
    NodeRef upper = a->tier < b->tier ? *b : *a;
    if (upper.tier != lower.tier + 1) {
      Error(at, path,
            absl::StrCat(NodeName(f, *a), " and ", NodeName(f, *b),
                         " are not in adjacent tiers; a link joins a node and one of its parents"));
      return std::nullopt;
    }
    std::vector<std::string> parents;
    for (uint32_t u = 0; u < UpPorts(f.shape, lower.tier); ++u) {
      const NodeRef p = Parent(f.shape, lower, u);
      if (p == upper) return LinkRef{lower, u};
      if (p.plane == upper.plane && parents.size() < 8) parents.push_back(NodeName(f, p));
    }
    Error(at, path,
          absl::StrCat(NodeName(f, lower), " and ", NodeName(f, upper), " are not linked; ",
                       NodeName(f, lower), "'s ", f.tier_names[upper.tier], " parents",
                       parents.size() == 8 ? " include " : " are ", absl::StrJoin(parents, ", ")));
    return std::nullopt;
  }

  void Failures_(Fabric* f) {
    f->failures = Failures{};
    auto sec = Section(*root_, "failures", "failures", kFailureKeys);
    if (!sec) return;
    if (auto links = Child(*sec, "links"); links && !links->IsNull()) {
      if (!links->IsSequence()) {
        Error(*links, "failures.links",
              absl::StrCat("expected a list of links such as [\"agg[3]-core[5]\"], got ",
                           Describe(*links)));
      } else {
        for (size_t i = 0; i < links->size(); ++i) {
          const YAML::Node e = (*links)[i];
          const std::string path = absl::StrCat("failures.links[", i, "]");
          std::optional<LinkRef> link;
          if (e.IsScalar()) {
            link = LinkFromString(e, path, *f);
          } else if (e.IsMap()) {
            link = LinkFromMap(e, path, *f);
          } else {
            Error(e, path,
                  absl::StrCat("expected \"A-B\" or {node: NAME, up_port: N}, got ", Describe(e)));
          }
          if (!link) continue;
          auto dup = std::find(f->failures.links.begin(), f->failures.links.end(), *link);
          if (dup != f->failures.links.end()) {
            Error(e, path,
                  absl::StrCat("the same link as failures.links[", dup - f->failures.links.begin(),
                               "]; keep one"));
            continue;
          }
          f->failures.links.push_back(*link);
        }
      }
    }
    if (auto sw = Child(*sec, "switches"); sw && !sw->IsNull()) {
      if (!sw->IsSequence()) {
        Error(*sw, "failures.switches",
              absl::StrCat("expected a list of switch names such as [\"core[5]\"], got ",
                           Describe(*sw)));
        return;
      }
      for (size_t i = 0; i < sw->size(); ++i) {
        const YAML::Node e = (*sw)[i];
        const std::string path = absl::StrCat("failures.switches[", i, "]");
        std::string text;
        if (!Scalar(e, path, "a switch name", &text)) continue;
        auto node = Node(e, path, *f, text, std::nullopt);
        if (!node) continue;
        if (node->tier == 0) {
          Error(e, path,
                absl::StrCat(Quote(text), " is a host; fail its links under failures.links"));
          continue;
        }
        auto& list = f->failures.switches;
        if (auto dup = std::find(list.begin(), list.end(), *node); dup != list.end()) {
          Error(e, path,
                absl::StrCat("the same switch as failures.switches[", dup - list.begin(),
                             "]; keep one"));
          continue;
        }
        list.push_back(*node);
      }
    }
  }

  std::optional<LinkRef> LinkFromMap(const YAML::Node& e, const std::string& path,
                                     const Fabric& f) {
    if (!Map(e, path, kLinkKeys)) return std::nullopt;
    auto node_n = Child(e, "node");
    auto port_n = Child(e, "up_port");
    if (!node_n || !port_n) {
      Error(e, path, "needs node and up_port, e.g. {node: agg[3], up_port: 1}");
      return std::nullopt;
    }
    std::string text;
    if (!Scalar(*node_n, path + ".node", "a node name", &text)) return std::nullopt;
    auto node = Node(*node_n, path + ".node", f, text, std::nullopt);
    if (!node) return std::nullopt;
    if (node->tier >= f.shape.tiers) {
      Error(
          *node_n, path + ".node",
          absl::StrCat(NodeName(f, *node),
                       " is in the top tier and has no up ports; name the lower end of the link"));
      return std::nullopt;
    }
    const uint32_t ports = UpPorts(f.shape, node->tier);
    uint32_t u = 0;
    if (!Uint(*port_n, path + ".up_port", 0, ports - 1, &u)) return std::nullopt;
    return LinkRef{*node, u};
  }

  std::string file_;
  std::vector<std::string> problems_;
  std::optional<YAML::Node> root_;
  static constexpr uint32_t fwd_max_paths_ = 64;
};

absl::Status SyntaxError(const std::string& file, const YAML::Mark& mark, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(file, ":", mark.line + 1, ":", mark.column + 1, ": YAML syntax error: ", what,
                   "; fix the YAML there (indentation, a missing ':', an unclosed quote or "
                   "bracket, tabs instead of spaces)"));
}

}  // namespace

std::array<std::string, kMaxTiers + 1> DefaultTierNames(Kind kind, int tiers) {
  std::array<std::string, kMaxTiers + 1> names;
  switch (kind) {
    case Kind::kFatTree:
    case Kind::kClos3:
      names = {"host", "tor", "agg", "core"};
      break;
    case Kind::kClos2:
      names = {"host", "leaf", "spine", "core"};
      break;
    case Kind::kRailOptimized:
      names = {"host", "leaf", "spine", "core"};
      break;
  }
  for (int t = tiers + 1; t <= kMaxTiers; ++t) names[t].clear();
  return names;
}

absl::StatusOr<Fabric> ParseFabricYaml(std::string_view text_in, std::string_view file_in) {
  const std::string text(text_in);
  const std::string file(file_in);
  Fabric f;
  Parser parser(file);
  try {
    // yaml-cpp 0.7 neither rejects nor consumes a stray ',' before a document's content: Load()
    // returns an empty document and LoadAll() loops forever. Walk the documents with the event
    // parser, stopping at the second, and treat a document that starts where the previous one
    // started as the syntax error it is.
    if (std::optional<SecondYamlDocument> second = FindSecondYamlDocument(text)) {
      const YAML::Mark& m = second->mark;
      if (second->stray) {
        return SyntaxError(
            file, m,
            absl::StrCat("unexpected ", Quote(absl::string_view(text).substr(m.pos, 1)),
                         " where the document's content should start"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(file, ":", m.line + 1,
                       ":1: (top level): a second YAML document starts "
                       "here; a fabric file holds one, so remove the "
                       "extra '---'"));
    }
    parser.Parse(YAML::Load(text), &f);
  } catch (const YAML::ParserException& e) {
    return SyntaxError(file, e.mark, e.msg);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": cannot read YAML: ", e.what()));
  }
  if (!parser.problems().empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(parser.problems(), "\n"));
  }
  if (absl::Status st = Validate(f); !st.ok()) {
    // Place the message at the section it names ("routing.max_paths: ..." -> routing).
    const std::string msg(st.message());
    const std::string section = msg.substr(0, msg.find_first_of(".:["));
    YAML::Mark m = parser.SectionMark(section);
    if (m.is_null()) m = parser.SectionMark("fabric");
    if (m.is_null()) m = YAML::Mark();
    return absl::InvalidArgumentError(
        absl::StrCat(file, ":", m.line + 1, ":", m.column + 1, ": ", msg));
  }
  return f;
}

absl::StatusOr<Fabric> LoadFabricFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::string text;
  char buf[16384];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxFileSize) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": larger than ", kMaxFileSize >> 20,
                                                     " MiB; a fabric description is a few KiB"));
    }
  }
  if (in.bad()) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  return ParseFabricYaml(text, path);
}

std::string FabricToYaml(const Fabric& f) {
  const Shape& s = f.shape;
  YAML::Emitter out;
  out << YAML::BeginMap;

  out << YAML::Key << "fabric" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << f.name;
  out << YAML::Key << "kind" << YAML::Value << KindName(f.kind);
  auto param = [&](const char* key, uint64_t v) { out << YAML::Key << key << YAML::Value << v; };
  switch (f.kind) {
    case Kind::kFatTree:
      param("k", s.m[3]);
      break;
    case Kind::kClos2:
      param("hosts_per_leaf", s.m[1]);
      param("leaves", s.m[2]);
      param("spines", s.w[2]);
      param("host_uplinks", s.w[1]);
      break;
    case Kind::kClos3:
      param("hosts_per_tor", s.m[1]);
      param("tors_per_pod", s.m[2]);
      param("pods", s.m[3]);
      param("aggs_per_pod", s.w[2]);
      param("cores_per_agg", s.w[3]);
      param("host_uplinks", s.w[1]);
      break;
    case Kind::kRailOptimized:
      param("rails", s.rails);
      param("servers_per_su", s.m[1]);
      param("sus_per_group", s.rails ? s.m[2] / s.rails : 0);
      param("spines_per_group", s.w[2]);
      if (s.tiers == 3) {
        param("groups", s.m[3]);
        param("cores_per_spine", s.w[3]);
      }
      param("host_uplinks", s.w[1]);
      break;
  }
  param("planes", s.planes);
  out << YAML::Key << "tier_names" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int t = 0; t <= s.tiers; ++t) out << f.tier_names[t];
  out << YAML::EndSeq;
  bool uniform = true;
  for (int t = 2; t <= s.tiers; ++t) uniform &= f.link_gbps[t] == f.link_gbps[1];
  out << YAML::Key << "link_gbps" << YAML::Value;
  if (uniform) {
    out << FormatDouble(f.link_gbps[1]);
  } else {
    out << YAML::Flow << YAML::BeginMap;
    for (int t = 1; t <= s.tiers; ++t) {
      out << YAML::Key << f.tier_names[t] << YAML::Value << FormatDouble(f.link_gbps[t]);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;

  const AddressPlan& a = f.addresses;
  out << YAML::Key << "addressing" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "ipv4" << YAML::Value
      << absl::StrCat(FormatIpv4(a.ipv4_base), "/", a.ipv4_prefix_len);
  if (a.has_ipv6) {
    out << YAML::Key << "ipv6" << YAML::Value
        << absl::StrCat(FormatIpv6(a.ipv6_base), "/", a.ipv6_prefix_len);
  }
  out << YAML::EndMap;

  out << YAML::Key << "hash" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "function" << YAML::Value << HashFunctionName(f.hash.function);
  out << YAML::Key << "seed" << YAML::Value << f.hash.seed_base;
  out << YAML::Key << "bit_offset" << YAML::Value << YAML::Flow << YAML::BeginMap;
  for (int t = 1; t <= s.tiers; ++t) {
    out << YAML::Key << f.tier_names[t] << YAML::Value << uint32_t{f.hash.bit_offset[t]};
  }
  out << YAML::EndMap << YAML::EndMap;

  const RoutingPolicy& r = f.routing;
  out << YAML::Key << "routing" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "max_paths" << YAML::Value << r.max_paths;
  out << YAML::Key << "rail_local" << YAML::Value << r.rail_local;
  out << YAML::Key << "classes" << YAML::Value;
  if (r.classes.empty()) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (const DestinationClass& c : r.classes) {
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << c.name;
    out << YAML::Key << "prefix" << YAML::Value << FormatPrefix128(c.prefix, c.prefix_len);
    if (c.max_paths != 0) out << YAML::Key << "max_paths" << YAML::Value << c.max_paths;
    if (c.planes_mask != 0) {
      out << YAML::Key << "planes" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (uint32_t p = 0; p < 32; ++p) {
        if (c.planes_mask >> p & 1) out << p;
      }
      out << YAML::EndSeq;
    }
    if (c.restrict_tier != 0) {
      out << YAML::Key << "via" << YAML::Value << YAML::Flow << YAML::BeginMap;
      out << YAML::Key << "tier" << YAML::Value << f.tier_names[c.restrict_tier];
      out << YAML::Key << "indexes" << YAML::Value << YAML::DoubleQuoted
          << FormatIndexes(c.allowed_up_mask);
      out << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;

  out << YAML::Key << "failures" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "links" << YAML::Value;
  if (f.failures.links.empty()) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (const LinkRef& l : f.failures.links) {
    out << YAML::DoubleQuoted
        << absl::StrCat(NodeName(f, l.lower), "-", NodeName(f, Parent(s, l.lower, l.up_port)));
  }
  out << YAML::EndSeq;
  out << YAML::Key << "switches" << YAML::Value;
  if (f.failures.switches.empty()) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (const NodeRef& n : f.failures.switches) out << YAML::DoubleQuoted << NodeName(f, n);
  out << YAML::EndSeq << YAML::EndMap;

  out << YAML::EndMap;
  return absl::StrCat(out.c_str(), "\n");
}

}  // namespace heddle::nuwa
