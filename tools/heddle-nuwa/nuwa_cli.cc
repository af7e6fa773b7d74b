// File: tools/heddle-nuwa/nuwa_cli.cc
//
// The commands of heddle-nuwa (nuwa_cli.h). Each one loads its inputs into a `Source` (a fabric
// file compiled in memory, a directory of artifacts, or one artifact), then renders text (tables
// as tools/heddlectl draws them) or JSON.
#include "tools/heddle-nuwa/nuwa_cli.h"

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/version.h"
#include "control/nuwa/compiler.h"
#include "control/nuwa/dsl.h"
#include "control/nuwa/fabric.h"
#include "control/nuwa/oracle.h"
#include "dataplane/fwd/artifact.h"
#include "tools/heddlectl/table.h"

namespace heddle::nuwa::cli {
namespace {

namespace fs = std::filesystem;
using api::cli::Table;
using fwd::ArtifactSpec;
using fwd::HopKind;
using fwd::NextHops;

// ---- JSON
// ----------------------------------------------------------------------------------------

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// A JSON object or array built in order, rendered compactly on one line.
class Json {
 public:
  static Json Object() { return Json('{', '}'); }
  static Json Array() { return Json('[', ']'); }
  Json& Field(std::string_view key, const std::string& raw) {
    Sep();
    absl::StrAppend(&body_, JsonString(key), ":", raw);
    return *this;
  }
  Json& Str(std::string_view key, std::string_view v) { return Field(key, JsonString(v)); }
  Json& Num(std::string_view key, uint64_t v) { return Field(key, absl::StrCat(v)); }
  Json& Bool(std::string_view key, bool v) { return Field(key, v ? "true" : "false"); }
  Json& Obj(std::string_view key, const Json& v) { return Field(key, v.Render()); }
  Json& Add(const std::string& raw) {
    Sep();
    body_ += raw;
    return *this;
  }
  Json& Add(const Json& v) { return Add(v.Render()); }
  std::string Render() const {
    return absl::StrCat(std::string(1, open_), body_, std::string(1, close_));
  }

 private:
  Json(char open, char close) : open_(open), close_(close) {}
  void Sep() {
    if (!body_.empty()) body_ += ",";
  }
  char open_, close_;
  std::string body_;
};

// ---- Formatting
// ----------------------------------------------------------------------------------

std::string Mac(const std::array<uint8_t, 6>& m) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

std::string Hex64(uint64_t v) { return absl::StrFormat("0x%016x", v); }

std::string KindName(HopKind k) {
  switch (k) {
    case HopKind::kDown:
      return "down";
    case HopKind::kUp:
      return "up";
    case HopKind::kUnreachable:
      return "unreachable";
    case HopKind::kNotInFabric:
      return "not-in-fabric";
    case HopKind::kLocal:
      return "local";
  }
  return "?";
}

// "0-3,6" for a bit set.
std::string Bits(uint64_t mask, uint32_t add = 0) {
  std::vector<std::string> parts;
  for (int i = 0; i < 64;) {
    if (!(mask >> i & 1)) {
      ++i;
      continue;
    }
    int j = i;
    while (j + 1 < 64 && (mask >> (j + 1) & 1)) ++j;
    parts.push_back(i == j ? absl::StrCat(i + add) : absl::StrCat(i + add, "-", j + add));
    i = j + 1;
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ",");
}

uint64_t AllBits(uint32_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

// ---- Sources: what a command reads
// ---------------------------------------------------------------

struct Source {
  Fabric fabric;                       // from the YAML, or rebuilt from artifacts
  bool from_yaml = false;              // failures/kind are only known from a fabric file
  std::vector<ArtifactSpec> switches;  // [t - 1]
  std::optional<ArtifactSpec> host;    //
  uint64_t digest = 0;
  double compile_ms = 0;
  CompileStats stats;
};

absl::StatusOr<Source> FromFabricFile(const std::string& path) {
  absl::StatusOr<Fabric> f = LoadFabricFile(path);
  if (!f.ok()) return f.status();
  Source s;
  s.fabric = *std::move(f);
  s.from_yaml = true;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Compiled> c = Compile(s.fabric);
  const auto t1 = std::chrono::steady_clock::now();
  if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", c.status().message()));
  s.compile_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  s.switches = std::move(c->switches);
  s.host = std::move(c->host);
  s.digest = c->fabric_digest;
  s.stats = c->stats;
  return s;
}

absl::StatusOr<Source> FromArtifactDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory of artifacts"));
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".nuwa") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no *.nuwa artifacts; run `heddle-nuwa compile FABRIC -o ", dir, "`"));
  }
  Source s;
  std::map<int, ArtifactSpec> by_tier;
  std::optional<std::string> digest_from;
  for (const fs::path& p : files) {
    absl::StatusOr<ArtifactSpec> a = fwd::ReadArtifactFile(p.string());
    if (!a.ok()) return a.status();
    if (digest_from && a->fabric_digest != s.digest) {
      return absl::InvalidArgumentError(absl::StrCat(
          p.string(), ": fabric digest ", Hex64(a->fabric_digest), " differs from ", *digest_from,
          "'s ", Hex64(s.digest), "; the directory mixes compilations, recompile it"));
    }
    s.digest = a->fabric_digest;
    digest_from = p.string();
    const int tier = a->role == fwd::Role::kHost ? 0 : a->tier;
    if (by_tier.count(tier)) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.string(), ": a second artifact for tier ", tier));
    }
    by_tier.emplace(tier, *std::move(a));
  }
  const ArtifactSpec& any = by_tier.begin()->second;
  s.fabric = FabricFromArtifact(any);
  for (int t = 0; t <= s.fabric.shape.tiers; ++t) {
    auto it = by_tier.find(t);
    if (it == by_tier.end()) {
      return absl::NotFoundError(absl::StrCat(
          dir, ": no artifact for ", t == 0 ? "the hosts" : absl::StrCat("switch tier ", t),
          "; the directory is incomplete, recompile it"));
    }
    if (!it->second.role_name.empty()) s.fabric.tier_names[t] = it->second.role_name;
    if (t == 0) {
      s.host = it->second;
    } else {
      s.switches.push_back(it->second);
    }
  }
  return s;
}

// A fabric file or an artifact directory; --fabric and --artifacts say which.
absl::StatusOr<Source> LoadSource(const std::string& fabric, const std::string& artifacts) {
  if (!fabric.empty() && !artifacts.empty()) {
    return absl::InvalidArgumentError("give --fabric or --artifacts, not both");
  }
  if (!fabric.empty()) return FromFabricFile(fabric);
  if (!artifacts.empty()) return FromArtifactDir(artifacts);
  return absl::InvalidArgumentError("give --fabric FILE or --artifacts DIR");
}

const ArtifactSpec& SpecFor(const Source& s, int tier) {
  return tier == 0 ? *s.host : s.switches[tier - 1];
}

// ---- Names
// -----------------------------------------------------------------------------------------

std::string HostName(const Fabric& f, uint32_t host) { return NodeName(f, NodeRef{0, 0, host}); }

// The neighbour at `port` of `node` (switch: down or up port; host: its port).
std::string Neighbour(const Fabric& f, NodeRef node, uint32_t port) {
  const uint32_t down = DownPorts(f.shape, node.tier);
  if (node.tier > 0 && port < down) return NodeName(f, Child(f.shape, node, port));
  return NodeName(f, Parent(f.shape, node, port - down));
}

// A destination: an IPv4/IPv6 address or a host name.
struct Destination {
  bool v6 = false;
  uint32_t v4 = 0;
  std::array<uint8_t, 16> addr6{};
  std::string text;
  std::optional<uint32_t> host;
};

absl::StatusOr<Destination> ParseDestination(const Fabric& f, const std::string& text) {
  Destination d;
  d.text = text;
  in_addr a4;
  if (inet_pton(AF_INET, text.c_str(), &a4) == 1) {
    d.v4 = ntohl(a4.s_addr);
    d.host = HostOfIpv4(f.shape, f.addresses, d.v4);
    return d;
  }
  if (inet_pton(AF_INET6, text.c_str(), d.addr6.data()) == 1) {
    d.v6 = true;
    d.host = HostOfIpv6(f.shape, f.addresses, d.addr6);
    return d;
  }
  absl::StatusOr<NodeRef> n = ParseNodeName(f, text);
  if (!n.ok() || n->tier != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dst ", text, ": not an IPv4 or IPv6 address or a host name (such as ",
                     HostName(f, 0), " or ", FormatIpv4(HostIpv4(f.shape, f.addresses, 0)), ")"));
  }
  d.host = n->index;
  d.v4 = HostIpv4(f.shape, f.addresses, n->index);
  d.text = FormatIpv4(d.v4);
  return d;
}

absl::StatusOr<NodeRef> ParseNode(const Fabric& f, const std::string& text) {
  absl::StatusOr<NodeRef> n = ParseNodeName(f, text);
  if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat("--node ", n.status().message()));
  return n;
}

// ---- compile
// ---------------------------------------------------------------------------------------

std::string FileNameOf(const ArtifactSpec& a) {
  return absl::StrCat(a.role == fwd::Role::kHost ? "host" : a.role_name, ".nuwa");
}

int Compile_(const std::string& fabric_path, const std::string& out_dir, bool json,
             std::ostream& out, std::ostream& err) {
  absl::StatusOr<Source> s = FromFabricFile(fabric_path);
  if (!s.ok()) {
    err << "heddle-nuwa compile: " << s.status().message() << "\n";
    return kExitBadInput;
  }
  std::vector<const ArtifactSpec*> all;
  for (const ArtifactSpec& a : s->switches) all.push_back(&a);
  all.push_back(&*s->host);
  std::set<std::string> names;
  for (const ArtifactSpec* a : all) {
    if (!names.insert(FileNameOf(*a)).second) {
      err << "heddle-nuwa compile: two roles would both be written to " << FileNameOf(*a)
          << "; rename the switch tier (fabric.tier_names) so that none is called \"host\"\n";
      return kExitBadInput;
    }
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) {
    err << "heddle-nuwa compile: cannot create " << out_dir << ": " << ec.message() << "\n";
    return kExitBadInput;
  }
  const Fabric& f = s->fabric;
  Table t({{"ROLE"},
           {"TIER", Table::kRight},
           {"NODES", Table::kRight},
           {"NODE-MASKS", Table::kRight},
           {"OVERRIDES", Table::kRight},
           {"DST-EXCEPTIONS", Table::kRight},
           {"ENTROPY", Table::kRight},
           {"BYTES", Table::kRight},
           {"FILE"}});
  Json roles = Json::Array();
  uint64_t total_bytes = 0, masks = 0, overrides = 0, dst_exceptions = 0;
  for (const ArtifactSpec* a : all) {
    const std::vector<uint8_t> bytes = fwd::Serialize(*a);
    const std::string path = (fs::path(out_dir) / FileNameOf(*a)).string();
    const std::string tmp = path + ".tmp";
    {
      std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
      o.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
      if (!o) {
        err << "heddle-nuwa compile: cannot write " << tmp << "\n";
        return kExitBadInput;
      }
    }
    fs::rename(tmp, path, ec);  // a reader never sees half an artifact
    if (ec) {
      err << "heddle-nuwa compile: cannot rename " << tmp << ": " << ec.message() << "\n";
      return kExitBadInput;
    }
    const int tier = a->role == fwd::Role::kHost ? 0 : a->tier;
    uint64_t nodes = NodeCount(f.shape, tier) * (tier == 0 ? 1 : f.shape.planes);
    uint64_t entropy = 0;
    for (const auto& l : a->entropy.by_lca) entropy += l.size();
    total_bytes += bytes.size();
    masks += a->node_masks.size();
    overrides += a->overrides.size();
    dst_exceptions += a->dst_exceptions.size();
    const std::string role = tier == 0 ? f.tier_names[0] : a->role_name;
    t.AddRow({role, absl::StrCat(tier), absl::StrCat(nodes), absl::StrCat(a->node_masks.size()),
              absl::StrCat(a->overrides.size()),
              tier == 0 ? absl::StrCat(a->dst_exceptions.size()) : "-",
              tier == 0 ? absl::StrCat(entropy) : "-", absl::StrCat(bytes.size()), path});
    roles.Add(Json::Object()
                  .Str("role", role)
                  .Num("tier", tier)
                  .Num("nodes", nodes)
                  .Num("node_masks", a->node_masks.size())
                  .Num("overrides", a->overrides.size())
                  .Num("dst_exceptions", a->dst_exceptions.size())
                  .Num("entropy_values", entropy)
                  .Num("bytes", bytes.size())
                  .Str("file", path));
  }
  uint64_t switches = 0;
  for (int i = 1; i <= f.shape.tiers; ++i) switches += NodeCount(f.shape, i) * f.shape.planes;
  if (json) {
    out << Json::Object()
               .Str("fabric", f.name)
               .Str("kind", nuwa::KindName(f.kind))
               .Num("hosts", NodeCount(f.shape, 0))
               .Num("switches", switches)
               .Num("rules", all.size())
               .Num("exceptions", masks + overrides + dst_exceptions)
               .Num("bytes", total_bytes)
               .Field("compile_ms", absl::StrFormat("%.3f", s->compile_ms))
               .Str("digest", Hex64(s->digest))
               .Obj("roles", roles)
               .Render()
        << "\n";
    return kExitOk;
  }
  out << absl::StrFormat("fabric %s: %s, %d switch tiers, %u plane%s, %u hosts, %u switches\n",
                         f.name, nuwa::KindName(f.kind), f.shape.tiers, f.shape.planes,
                         f.shape.planes == 1 ? "" : "s", NodeCount(f.shape, 0), switches);
  out << t.Render();
  out << absl::StrFormat(
      "%u rules, %u exceptions (%u node masks, %u overrides, %u destination exceptions), %u bytes "
      "in all, compiled in %.3f ms\ndigest %s\n",
      all.size(), masks + overrides + dst_exceptions, masks, overrides, dst_exceptions, total_bytes,
      s->compile_ms, Hex64(s->digest));
  return kExitOk;
}

// ---- show
// ------------------------------------------------------------------------------------------

// The prefix of the subtree of a tier-i node with digits `label` above tier i (i = h: the fabric).
std::string SubtreePrefix(const Fabric& f, int tier, const Label& label) {
  const Shape& s = f.shape;
  const AddressPlan& p = f.addresses;
  if (tier >= s.tiers) return absl::StrCat(FormatIpv4(p.ipv4_base), "/", p.ipv4_prefix_len);
  uint32_t v = p.ipv4_base;
  for (int j = tier + 1; j <= s.tiers; ++j) v |= label.a[j] << p.shift[j];
  const int len = 32 - p.shift[tier + 1];
  return absl::StrCat(FormatIpv4(v), "/", len);
}

// "a3=2 a2=1" for the digits above `tier` (most significant first).
std::string DigitsAbove(const Shape& s, int tier, const Label& label) {
  std::vector<std::string> parts;
  for (int j = s.tiers; j > tier; --j) parts.push_back(absl::StrCat("a", j, "=", label.a[j]));
  return absl::StrJoin(parts, " ");
}

std::string PortList(const Fabric& f, NodeRef node, uint64_t mask, uint32_t base,
                     std::vector<uint32_t>* ports) {
  std::vector<std::string> parts;
  for (uint32_t u = 0; u < 64; ++u) {
    if (!(mask >> u & 1)) continue;
    ports->push_back(base + u);
    parts.push_back(absl::StrCat(base + u, " ", Neighbour(f, node, base + u)));
  }
  if (parts.size() > 8) {
    return absl::StrCat(parts.size(), " ports ", Bits(mask, base), " (",
                        Neighbour(f, node, ports->front()), " .. ",
                        Neighbour(f, node, ports->back()), ")");
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

const fwd::NodeMaskSpec* FindMask(const ArtifactSpec& a, uint8_t plane, uint32_t index) {
  for (const auto& m : a.node_masks) {
    if (m.plane == plane && m.index == index) return &m;
  }
  return nullptr;
}

std::string HopsText(const Fabric& f, NodeRef node, const NextHops& h) {
  std::vector<uint32_t> ports;
  switch (h.kind) {
    case HopKind::kDown:
      return absl::StrCat("down port ", h.down_port, " ", Neighbour(f, node, h.down_port));
    case HopKind::kUp:
      return absl::StrCat("up ",
                          PortList(f, node, h.up_mask, DownPorts(f.shape, node.tier), &ports));
    default:
      return KindName(h.kind);
  }
}

Json HopsJson(const Fabric& f, NodeRef node, const NextHops& h) {
  Json j = Json::Object();
  j.Str("kind", KindName(h.kind));
  Json ports = Json::Array();
  if (h.kind == HopKind::kDown) {
    ports.Add(
        Json::Object().Num("port", h.down_port).Str("neighbour", Neighbour(f, node, h.down_port)));
  } else if (h.kind == HopKind::kUp) {
    const uint32_t base = DownPorts(f.shape, node.tier);
    for (uint32_t u = 0; u < 64; ++u) {
      if (h.up_mask >> u & 1) {
        ports.Add(
            Json::Object().Num("port", base + u).Str("neighbour", Neighbour(f, node, base + u)));
      }
    }
  }
  j.Obj("ports", ports);
  return j;
}

std::string LevelDst(const Fabric& f, uint8_t level, uint32_t dst) {
  if (level == 0) return HostName(f, dst);
  return absl::StrCat(f.tier_names[1], " group ", dst, " (", HostName(f, dst * f.shape.m[1]),
                      " ..)");
}

std::string OverrideDst(const Fabric& f, const fwd::OverrideSpec& o) {
  return LevelDst(f, o.level, o.dst);
}

// An override's node: its name, or "every <tier>" for a wildcard (with the plane when several).
std::string OverrideNode(const Fabric& f, uint8_t plane, int tier, uint32_t node) {
  if (node == fwd::kAllNodes) {
    return absl::StrCat(f.shape.planes > 1 ? absl::StrCat("p", plane, "/") : "", "every ",
                        f.tier_names[tier]);
  }
  return NodeName(
      f, NodeRef{static_cast<uint8_t>(tier == 0 ? 0 : plane), static_cast<uint8_t>(tier), node});
}

// A destination exception's ports and entropy caps by LCA tier.
std::string DstExceptionText(const Fabric& f, const fwd::DstExceptionSpec& e) {
  bool none = true;
  for (int L = 1; L <= f.shape.tiers; ++L) none = none && e.ports[L] == 0;
  if (none) return "unreachable from every host";
  std::vector<std::string> parts;
  for (int L = 1; L <= f.shape.tiers; ++L) {
    parts.push_back(absl::StrCat("L", L, ": ports ", Bits(e.ports[L]), " paths ", e.paths[L]));
  }
  return absl::StrJoin(parts, "  ");
}

int ShowNode(const Source& s, const std::string& node_text, bool json, std::ostream& out,
             std::ostream& err) {
  const Fabric& f = s.fabric;
  absl::StatusOr<NodeRef> node = ParseNode(f, node_text);
  if (!node.ok()) {
    err << "heddle-nuwa show: " << node.status().message() << "\n";
    return kExitBadInput;
  }
  const int i = node->tier;
  const Shape& sh = f.shape;
  const Label label = LabelOf(sh, i, node->index);
  const ArtifactSpec& a = SpecFor(s, i);
  const uint8_t key_plane = i == 0 ? 0 : node->plane;
  const fwd::NodeMaskSpec* mask = FindMask(a, key_plane, node->index);
  std::vector<std::string> b;
  for (int j = 1; j <= i; ++j) b.push_back(absl::StrCat("b", j, "=", label.b[j]));
  const std::string label_text = absl::StrCat(
      DigitsAbove(sh, i, label), b.empty() || i == sh.tiers ? "" : " ", absl::StrJoin(b, " "));

  Table t({{"LCA"}, {"MATCH"}, {"PREFIX"}, {"ACTION"}});
  Json rules = Json::Array();
  auto add = [&](std::string lca, std::string match, std::string prefix, std::string action,
                 const Json& detail) {
    t.AddRow({lca, match, prefix, action});
    rules.Add(Json::Object()
                  .Str("lca", lca)
                  .Str("match", match)
                  .Str("prefix", prefix)
                  .Str("action", action)
                  .Obj("detail", detail));
  };
  if (i > 0) {
    // Down: the destination is below this switch.
    std::vector<std::string> kids;
    for (uint32_t d = 0; d < sh.m[i] && d < 4; ++d) {
      kids.push_back(absl::StrCat(d, " ", Neighbour(f, *node, d)));
    }
    if (sh.m[i] > 4)
      kids.push_back(absl::StrCat("..", sh.m[i] - 1, " ", Neighbour(f, *node, sh.m[i] - 1)));
    add(f.tier_names[i] + " (here)", i == sh.tiers ? "any host" : DigitsAbove(sh, i, label),
        SubtreePrefix(f, i, label),
        absl::StrCat("down port = dst.a", i, ": ", absl::StrJoin(kids, ", ")),
        Json::Object().Str("kind", "down").Str("port", absl::StrCat("a", i)).Num("ports", sh.m[i]));
  }
  const uint32_t base = DownPorts(sh, i);
  const uint32_t nup = i == 0 ? UpPorts(sh, 0) : UpPorts(sh, i);
  for (int L = std::max(i + 1, 1); L <= sh.tiers && nup > 0; ++L) {
    const uint64_t all = AllBits(nup);
    const uint64_t m = mask ? mask->up_mask[L] & all : all;
    std::vector<uint32_t> ports;
    std::string action;
    if (i == 0) {
      std::vector<std::string> parts;
      for (uint32_t p = 0; p < nup; ++p) {
        if (m >> p & 1) parts.push_back(absl::StrCat(p, " ", Neighbour(f, *node, p)));
      }
      const size_t entropies = std::max<size_t>(
          1, !a.entropy.by_lca[L].empty() ? a.entropy.by_lca[L].size()
                                          : (L < sh.tiers ? a.entropy.by_lca[L + 1].size() : 1));
      const size_t paths =
          std::min<size_t>(f.routing.max_paths, std::popcount(m) * (L == 1 ? 1 : entropies));
      action = absl::StrCat("ports ", parts.empty() ? "none" : absl::StrJoin(parts, ", "), "; ",
                            paths, " path", paths == 1 ? "" : "s");
      if (L >= 2 && !a.entropy.by_lca[L].empty()) {
        action += absl::StrCat(" (entropy from ", a.entropy.by_lca[L].front(), ", ",
                               a.entropy.by_lca[L].size(), " values)");
      }
    } else {
      action = absl::StrCat(std::popcount(m) == 1 ? "up port " : "up ECMP ",
                            PortList(f, *node, m, base, &ports));
    }
    if (m != all) action += "  [mask]";
    std::string match;
    if (L == 1 && i == 0) {
      match = absl::StrCat(DigitsAbove(sh, 1, label), ", a1 != ", label.a[1]);
    } else {
      match = absl::StrCat(L < sh.tiers ? DigitsAbove(sh, L, label) + ", " : "", "a", L,
                           " != ", label.a[L]);
    }
    Json detail = Json::Object().Str("kind", i == 0 ? "paths" : "up").Str("mask", Bits(m, base));
    add(f.tier_names[L], match, SubtreePrefix(f, L, label), action, detail);
  }
  if (i == 0) {
    // A host reaching itself.
    add(f.tier_names[0] + " (here)", "this host",
        absl::StrCat(FormatIpv4(HostIpv4(sh, f.addresses, node->index)), "/32"), "local",
        Json::Object().Str("kind", "local"));
  }
  // Class policies that touch this node.
  Table ct({{"CLASS"}, {"PREFIX"}, {"POLICY"}});
  Json classes = Json::Array();
  for (const DestinationClass& c : f.routing.classes) {
    std::vector<std::string> policy;
    if (i > 0 && c.restrict_tier == i + 1) {
      std::vector<uint32_t> ports;
      policy.push_back(
          absl::StrCat("up only via ", f.tier_names[c.restrict_tier], " b", c.restrict_tier, " in ",
                       Bits(c.allowed_up_mask), ": ",
                       PortList(f, *node, c.allowed_up_mask & AllBits(nup), base, &ports)));
    }
    if (i == 0 && c.max_paths) policy.push_back(absl::StrCat("at most ", c.max_paths, " paths"));
    if (i == 0 && c.planes_mask) policy.push_back(absl::StrCat("planes ", Bits(c.planes_mask)));
    if (policy.empty()) continue;
    const std::string prefix = FormatPrefix128(c.prefix, c.prefix_len);
    ct.AddRow({c.name, prefix, absl::StrJoin(policy, "; ")});
    classes.Add(Json::Object()
                    .Str("name", c.name)
                    .Str("prefix", prefix)
                    .Str("policy", absl::StrJoin(policy, "; ")));
  }
  if (i == 0 && f.routing.rail_local && sh.rails) {
    ct.AddRow(
        {"(rail_local)", "other rails", absl::StrCat("no path; own rail ", label.a[2] % sh.rails)});
    classes.Add(Json::Object()
                    .Str("name", "rail_local")
                    .Str("prefix", "other rails")
                    .Str("policy", "no path"));
  }
  // Overrides of this node.
  Table ot({{"LEVEL", Table::kRight}, {"DESTINATION"}, {"NEXT HOPS"}});
  Json overrides = Json::Array();
  for (const fwd::OverrideSpec& o : a.overrides) {
    if (o.plane != key_plane || (o.node != node->index && o.node != fwd::kAllNodes)) continue;
    const std::string hops = i == 0 && o.hops.kind == HopKind::kUp
                                 ? absl::StrCat("ports ", Bits(o.hops.up_mask))
                                 : HopsText(f, *node, o.hops);
    const bool wildcard = o.node == fwd::kAllNodes;
    ot.AddRow({absl::StrCat(o.level), OverrideDst(f, o),
               wildcard ? absl::StrCat(hops, " (every ", f.tier_names[i], ")") : hops});
    overrides.Add(Json::Object()
                      .Num("level", o.level)
                      .Num("dst", o.dst)
                      .Bool("wildcard", wildcard)
                      .Str("destination", OverrideDst(f, o))
                      .Obj("hops", HopsJson(f, *node, o.hops)));
  }
  const std::string title = absl::StrCat(
      NodeName(f, *node), ": ", i == 0 ? "host" : "switch", " tier ", i, " (", f.tier_names[i],
      "), ", i == 0 ? "" : absl::StrCat("plane ", node->plane, ", "), "label ", label_text,
      ", mac ", i == 0 ? Mac(HostPortMac(node->index, 0)) : Mac(NodeMac(*node)));
  if (json) {
    out << Json::Object()
               .Str("node", NodeName(f, *node))
               .Num("tier", i)
               .Str("role", f.tier_names[i])
               .Num("plane", i == 0 ? 0 : node->plane)
               .Num("index", node->index)
               .Str("label", label_text)
               .Str("mac", i == 0 ? Mac(HostPortMac(node->index, 0)) : Mac(NodeMac(*node)))
               .Obj("rules", rules)
               .Obj("classes", classes)
               .Obj("overrides", overrides)
               .Render()
        << "\n";
    return kExitOk;
  }
  out << title << "\n" << t.Render();
  if (!ct.empty()) out << "\n" << ct.Render();
  out << "\n";
  if (ot.empty()) {
    out << "no overrides\n";
  } else {
    out << ot.Render();
  }
  return kExitOk;
}

int ShowArtifact(const std::string& path, bool json, std::ostream& out, std::ostream& err) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    err << "heddle-nuwa show: cannot read " << path << "\n";
    return kExitBadInput;
  }
  absl::StatusOr<ArtifactSpec> a = fwd::Decode(bytes);
  if (!a.ok()) {
    err << "heddle-nuwa show: " << path << ": " << a.status().message() << "\n";
    return kExitBadInput;
  }
  Fabric f = FabricFromArtifact(*a);
  const int tier = a->role == fwd::Role::kHost ? 0 : a->tier;
  if (!a->role_name.empty()) f.tier_names[tier] = a->role_name;
  const Shape& sh = f.shape;
  std::vector<std::string> ms, ws;
  for (int j = 1; j <= sh.tiers; ++j) {
    ms.push_back(absl::StrCat(sh.m[j]));
    ws.push_back(absl::StrCat(sh.w[j]));
  }
  std::vector<std::string> fields;
  for (int j = 1; j <= sh.tiers; ++j) {
    const int lo = f.addresses.shift[j], hi = lo + f.addresses.width[j] - 1;
    fields.push_back(absl::StrCat("a", j, " bits ", lo, "..", hi));
  }
  std::vector<std::string> offsets;
  for (int j = 1; j <= sh.tiers; ++j) {
    offsets.push_back(absl::StrCat("tier", j, " ", a->hash.bit_offset[j]));
  }
  std::string rule;
  if (tier == 0) {
    rule =
        absl::StrCat("LCA tier L of (this host, dst) from the first differing digit; paths = ",
                     "ports (planes x ", sh.w[1], ") x entropy[L], interleaved by port, at most ",
                     uint32_t{a->max_paths}, a->rail_local ? "; no path to other rails" : "");
  } else {
    rule =
        absl::StrCat("dst digits a", tier + 1, "..a", sh.tiers, " == own ? down port dst.a", tier,
                     " (0..", sh.m[tier] - 1, ")",
                     tier < sh.tiers ? absl::StrCat(" : up ports ", sh.m[tier], "..",
                                                    sh.m[tier] + sh.w[tier + 1] - 1, " & mask[LCA]")
                                     : "");
  }
  Table mt({{"NODE"}, {"MASKS BY LCA TIER"}});
  Json masks = Json::Array();
  for (const fwd::NodeMaskSpec& m : a->node_masks) {
    std::vector<std::string> parts;
    Json by = Json::Object();
    for (int L = std::max(1, tier + 1); L <= sh.tiers; ++L) {
      parts.push_back(absl::StrCat("L", L, ": ", Bits(m.up_mask[L])));
      by.Str(absl::StrCat(L), Bits(m.up_mask[L]));
    }
    const NodeRef n{static_cast<uint8_t>(tier == 0 ? 0 : m.plane), static_cast<uint8_t>(tier),
                    m.index};
    mt.AddRow({NodeName(f, n), absl::StrJoin(parts, "  ")});
    masks.Add(Json::Object().Str("node", NodeName(f, n)).Obj("up_mask", by));
  }
  Table ot({{"NODE"}, {"LEVEL", Table::kRight}, {"DESTINATION"}, {"NEXT HOPS"}});
  Json overrides = Json::Array();
  for (const fwd::OverrideSpec& o : a->overrides) {
    const std::string node_name = OverrideNode(f, o.plane, tier, o.node);
    std::string hops = KindName(o.hops.kind);
    if (o.hops.kind == HopKind::kDown) hops = absl::StrCat("down port ", o.hops.down_port);
    if (o.hops.kind == HopKind::kUp) {
      hops = absl::StrCat(tier == 0 ? "ports " : "up ",
                          Bits(o.hops.up_mask, tier == 0 ? 0 : sh.m[tier]));
    }
    ot.AddRow({node_name, absl::StrCat(o.level), OverrideDst(f, o), hops});
    overrides.Add(Json::Object()
                      .Str("node", node_name)
                      .Num("level", o.level)
                      .Num("dst", o.dst)
                      .Str("kind", KindName(o.hops.kind))
                      .Num("down_port", o.hops.down_port)
                      .Str("up_mask", Bits(o.hops.up_mask)));
  }
  Table dt({{"LEVEL", Table::kRight}, {"DESTINATION"}, {"PORTS AND PATHS BY LCA TIER"}});
  Json dst_exceptions = Json::Array();
  for (const fwd::DstExceptionSpec& e : a->dst_exceptions) {
    dt.AddRow({absl::StrCat(e.level), LevelDst(f, e.level, e.dst), DstExceptionText(f, e)});
    Json ports = Json::Object(), paths = Json::Object();
    for (int L = 1; L <= sh.tiers; ++L) {
      ports.Str(absl::StrCat(L), Bits(e.ports[L]));
      paths.Num(absl::StrCat(L), e.paths[L]);
    }
    dst_exceptions.Add(Json::Object()
                           .Num("level", e.level)
                           .Num("dst", e.dst)
                           .Str("destination", LevelDst(f, e.level, e.dst))
                           .Obj("ports", ports)
                           .Obj("paths", paths));
  }
  Json entropy = Json::Object();
  std::vector<std::string> entropy_lines;
  for (int L = 0; L <= sh.tiers; ++L) {
    const auto& l = a->entropy.by_lca[L];
    if (l.empty()) continue;
    Json values = Json::Array();
    for (uint32_t v : l) values.Add(absl::StrCat(v));
    entropy.Obj(absl::StrCat(L), values);
    std::vector<std::string> shown;
    for (size_t k = 0; k < l.size() && k < 8; ++k) shown.push_back(absl::StrCat(l[k]));
    entropy_lines.push_back(absl::StrCat("  LCA tier ", L, ": ", l.size(), " values: ",
                                         absl::StrJoin(shown, " "), l.size() > 8 ? " ..." : ""));
  }
  const std::string v4 =
      absl::StrCat(FormatIpv4(f.addresses.ipv4_base), "/", f.addresses.ipv4_prefix_len);
  const std::string v6 = f.addresses.has_ipv6 ? absl::StrCat(FormatIpv6(f.addresses.ipv6_base), "/",
                                                             f.addresses.ipv6_prefix_len)
                                              : "none";
  if (json) {
    Json classes = Json::Array();
    for (const fwd::ClassSpec& c : a->classes) {
      classes.Add(Json::Object()
                      .Str("name", c.name)
                      .Num("prefix_len", c.prefix_len)
                      .Num("max_paths", c.max_paths)
                      .Num("planes_mask", c.planes_mask)
                      .Num("restrict_tier", c.restrict_tier)
                      .Str("allowed", Bits(c.allowed_up_mask)));
    }
    out << Json::Object()
               .Str("file", path)
               .Str("fabric", a->fabric_name)
               .Str("role", a->role_name)
               .Num("tier", tier)
               .Num("version", a->version)
               .Num("bytes", bytes.size())
               .Str("checksum", absl::StrFormat("0x%08x", fwd::ArtifactChecksum(bytes)))
               .Str("digest", Hex64(a->fabric_digest))
               .Str("m", absl::StrJoin(ms, ","))
               .Str("w", absl::StrJoin(ws, ","))
               .Num("planes", sh.planes)
               .Num("rails", sh.rails)
               .Str("ipv4", v4)
               .Str("ipv6", v6)
               .Str("hash", HashFunctionName(f.hash.function))
               .Num("seed", f.hash.seed_base)
               .Str("rule", rule)
               .Obj("classes", classes)
               .Obj("node_masks", masks)
               .Obj("overrides", overrides)
               .Obj("dst_exceptions", dst_exceptions)
               .Obj("entropy", entropy)
               .Render()
        << "\n";
    return kExitOk;
  }
  out << absl::StrFormat("%s: %s role %s (tier %d) of fabric %s\n", path,
                         tier == 0 ? "host" : "switch", a->role_name, tier, a->fabric_name);
  out << api::cli::RenderKeyValues({
      {"version", absl::StrCat(a->version)},
      {"bytes", absl::StrCat(bytes.size())},
      {"checksum", absl::StrFormat("0x%08x (CRC-32C)", fwd::ArtifactChecksum(bytes))},
      {"digest", Hex64(a->fabric_digest)},
      {"shape", absl::StrCat("m = (", absl::StrJoin(ms, ", "), "), w = (", absl::StrJoin(ws, ", "),
                             "), ", sh.planes, " plane(s)",
                             sh.rails ? absl::StrCat(", ", sh.rails, " rails") : "")},
      {"addresses", absl::StrCat(v4, ", ", absl::StrJoin(fields, ", "), "; ipv6 ", v6)},
      {"hash", absl::StrCat(HashFunctionName(f.hash.function), ", seed ", f.hash.seed_base,
                            ", bit offsets ", absl::StrJoin(offsets, ", "))},
      {"rule", rule},
      {"classes", absl::StrCat(a->classes.size())},
      {"node masks", absl::StrCat(a->node_masks.size())},
      {"overrides", absl::StrCat(a->overrides.size())},
      {"destination exceptions", absl::StrCat(a->dst_exceptions.size())},
  });
  for (const fwd::ClassSpec& c : a->classes) {
    out << absl::StrFormat(
        "  class %s: /%d of the 128-bit form, max_paths %d, planes %s, via %s\n", c.name,
        c.prefix_len, c.max_paths, c.planes_mask ? Bits(c.planes_mask) : "all",
        c.restrict_tier
            ? absl::StrCat("tier ", c.restrict_tier, " replicas ", Bits(c.allowed_up_mask))
            : "any");
  }
  if (!entropy_lines.empty()) out << "entropy:\n" << absl::StrJoin(entropy_lines, "\n") << "\n";
  if (!mt.empty()) out << "\n" << mt.Render();
  if (!ot.empty()) out << "\n" << ot.Render();
  if (!dt.empty()) out << "\n" << dt.Render();
  return kExitOk;
}

// ---- query
// -----------------------------------------------------------------------------------------

int Query(const Source& s, const std::string& node_text, const std::string& dst_text, bool json,
          std::ostream& out, std::ostream& err) {
  const Fabric& f = s.fabric;
  absl::StatusOr<NodeRef> node = ParseNode(f, node_text);
  if (!node.ok()) {
    err << "heddle-nuwa query: " << node.status().message() << "\n";
    return kExitBadInput;
  }
  absl::StatusOr<Destination> dst = ParseDestination(f, dst_text);
  if (!dst.ok()) {
    err << "heddle-nuwa query: " << dst.status().message() << "\n";
    return kExitBadInput;
  }
  const std::string dst_name = dst->host ? HostName(f, *dst->host) : "no host of this fabric";
  const std::string head = absl::StrCat(NodeName(f, *node), " -> ", dst->text, " (", dst_name, ")");
  if (node->tier > 0) {
    absl::StatusOr<fwd::SwitchTable> t =
        fwd::SwitchTable::Build(SpecFor(s, node->tier), node->plane, node->index);
    if (!t.ok()) {
      err << "heddle-nuwa query: " << t.status().message() << "\n";
      return kExitBadInput;
    }
    const NextHops h = dst->v6 ? t->Lookup6(dst->addr6.data()) : t->Lookup4(dst->v4);
    if (json) {
      out << Json::Object()
                 .Str("node", NodeName(f, *node))
                 .Str("dst", dst->text)
                 .Str("dst_host", dst->host ? HostName(f, *dst->host) : "")
                 .Obj("next_hops", HopsJson(f, *node, h))
                 .Render()
          << "\n";
      return kExitOk;
    }
    Table tt({{"PORT", Table::kRight}, {"NEIGHBOUR"}});
    int n = 0;
    if (h.kind == HopKind::kDown) {
      tt.AddRow({absl::StrCat(h.down_port), Neighbour(f, *node, h.down_port)});
      n = 1;
    } else if (h.kind == HopKind::kUp) {
      const uint32_t base = DownPorts(f.shape, node->tier);
      for (uint32_t u = 0; u < 64; ++u) {
        if (!(h.up_mask >> u & 1)) continue;
        tt.AddRow({absl::StrCat(base + u), Neighbour(f, *node, base + u)});
        ++n;
      }
    }
    out << head << ": " << KindName(h.kind);
    if (n)
      out << ", " << n << " next hop" << (n == 1 ? "" : "s") << "\n" << tt.Render();
    else
      out << "\n";
    return kExitOk;
  }
  absl::StatusOr<fwd::HostTable> t = fwd::HostTable::Build(*s.host, node->index);
  if (!t.ok()) {
    err << "heddle-nuwa query: " << t.status().message() << "\n";
    return kExitBadInput;
  }
  std::array<fwd::HostPath, fwd::kMaxHostPaths> paths;
  HopKind kind = HopKind::kNotInFabric;
  const uint32_t n = dst->v6 ? t->Paths6(dst->addr6.data(), paths.data(), fwd::kMaxHostPaths, &kind)
                             : t->Paths4(dst->v4, paths.data(), fwd::kMaxHostPaths, &kind);
  if (json) {
    Json list = Json::Array();
    for (uint32_t k = 0; k < n; ++k) {
      list.Add(Json::Object()
                   .Num("port", paths[k].port)
                   .Str("next_hop_mac", Mac(paths[k].next_hop_mac))
                   .Str("neighbour", Neighbour(f, *node, paths[k].port))
                   .Num("entropy", paths[k].entropy));
    }
    out << Json::Object()
               .Str("node", NodeName(f, *node))
               .Str("dst", dst->text)
               .Str("dst_host", dst->host ? HostName(f, *dst->host) : "")
               .Str("kind", KindName(kind))
               .Obj("paths", list)
               .Render()
        << "\n";
    return kExitOk;
  }
  out << head << ": " << KindName(kind);
  if (n == 0) {
    out << "\n";
    return kExitOk;
  }
  out << ", " << n << " path" << (n == 1 ? "" : "s") << "\n";
  Table tt({{"PORT", Table::kRight}, {"NEXT-HOP MAC"}, {"NEIGHBOUR"}, {"ENTROPY", Table::kRight}});
  for (uint32_t k = 0; k < n; ++k) {
    tt.AddRow({absl::StrCat(paths[k].port), Mac(paths[k].next_hop_mac),
               Neighbour(f, *node, paths[k].port), absl::StrCat(paths[k].entropy)});
  }
  out << tt.Render();
  return kExitOk;
}

// ---- diff
// ------------------------------------------------------------------------------------------

// Artifacts keyed by role file name.
absl::StatusOr<std::map<std::string, ArtifactSpec>> LoadForDiff(const std::string& path,
                                                                Fabric* names) {
  std::map<std::string, ArtifactSpec> roles;
  std::error_code ec;
  if (fs::is_directory(path, ec) || !absl::EndsWith(path, ".nuwa")) {
    absl::StatusOr<Source> s =
        fs::is_directory(path, ec) ? FromArtifactDir(path) : FromFabricFile(path);
    if (!s.ok()) return s.status();
    *names = s->fabric;
    for (const ArtifactSpec& a : s->switches) roles.emplace(FileNameOf(a), a);
    roles.emplace(FileNameOf(*s->host), *s->host);
    return roles;
  }
  absl::StatusOr<ArtifactSpec> a = fwd::ReadArtifactFile(path);
  if (!a.ok()) return a.status();
  *names = FabricFromArtifact(*a);
  const int tier = a->role == fwd::Role::kHost ? 0 : a->tier;
  if (!a->role_name.empty()) names->tier_names[tier] = a->role_name;
  roles.emplace("artifact", *std::move(a));
  return roles;
}

template <typename T, typename Key>
void DiffKeyed(const std::vector<T>& x, const std::vector<T>& y, Key key, uint64_t* added,
               uint64_t* removed, uint64_t* changed, std::vector<std::string>* lines,
               const std::function<std::string(const T&)>& describe) {
  std::map<decltype(key(x[0])), const T*> a, b;
  for (const T& e : x) a[key(e)] = &e;
  for (const T& e : y) b[key(e)] = &e;
  for (const auto& [k, e] : a) {
    auto it = b.find(k);
    if (it == b.end()) {
      ++*removed;
      if (lines->size() < 20) lines->push_back("    - " + describe(*e));
    } else if (!(*it->second == *e)) {
      ++*changed;
      if (lines->size() < 20) {
        lines->push_back("    ~ " + describe(*e) + "  ->  " + describe(*it->second));
      }
    }
  }
  for (const auto& [k, e] : b) {
    if (!a.count(k)) {
      ++*added;
      if (lines->size() < 20) lines->push_back("    + " + describe(*e));
    }
  }
}

int Diff(const std::string& left, const std::string& right, std::ostream& out, std::ostream& err) {
  Fabric fa, fb;
  absl::StatusOr<std::map<std::string, ArtifactSpec>> a = LoadForDiff(left, &fa);
  if (!a.ok()) {
    err << "heddle-nuwa diff: " << a.status().message() << "\n";
    return kExitBadInput;
  }
  absl::StatusOr<std::map<std::string, ArtifactSpec>> b = LoadForDiff(right, &fb);
  if (!b.ok()) {
    err << "heddle-nuwa diff: " << b.status().message() << "\n";
    return kExitBadInput;
  }
  if (a->size() == 1 && b->size() == 1 && a->begin()->first != b->begin()->first) {
    err << "heddle-nuwa diff: compare two artifacts, two artifact directories or two fabrics\n";
    return kExitBadInput;
  }
  bool differs = false;
  std::set<std::string> roles;
  for (const auto& [k, v] : *a) roles.insert(k);
  for (const auto& [k, v] : *b) roles.insert(k);
  for (const std::string& role : roles) {
    auto ia = a->find(role), ib = b->find(role);
    if (ia == a->end() || ib == b->end()) {
      out << "role " << role << ": only in " << (ia == a->end() ? right : left) << "\n";
      differs = true;
      continue;
    }
    const ArtifactSpec& x = ia->second;
    const ArtifactSpec& y = ib->second;
    std::vector<std::string> what;
    if (!(x.shape == y.shape)) what.push_back("shape");
    if (!(x.addresses == y.addresses)) what.push_back("addresses");
    if (!(x.hash == y.hash)) what.push_back("hash model");
    if (x.max_paths != y.max_paths || x.rail_local != y.rail_local || !(x.classes == y.classes)) {
      what.push_back("routing policy");
    }
    if (!(x.entropy == y.entropy)) what.push_back("entropy");
    if (x.fabric_name != y.fabric_name || x.role_name != y.role_name) what.push_back("names");
    const int tier = x.role == fwd::Role::kHost ? 0 : x.tier;
    uint64_t ma = 0, mr = 0, mc = 0, oa = 0, orr = 0, oc = 0;
    std::vector<std::string> lines;
    auto node_name = [&](uint8_t plane, uint32_t index) {
      const Fabric& f = fb;
      return NodeName(f, NodeRef{static_cast<uint8_t>(tier == 0 ? 0 : plane),
                                 static_cast<uint8_t>(tier), index});
    };
    DiffKeyed<fwd::NodeMaskSpec>(
        x.node_masks, y.node_masks,
        [](const fwd::NodeMaskSpec& m) { return std::make_pair(m.plane, m.index); }, &ma, &mr, &mc,
        &lines,
        [&](const fwd::NodeMaskSpec& m) {
          std::vector<std::string> p;
          for (int L = 1; L <= x.shape.tiers; ++L) {
            if (L > tier) p.push_back(absl::StrCat("L", L, " ", Bits(m.up_mask[L])));
          }
          return absl::StrCat("mask ", node_name(m.plane, m.index), ": ", absl::StrJoin(p, " "));
        });
    DiffKeyed<fwd::OverrideSpec>(
        x.overrides, y.overrides,
        [](const fwd::OverrideSpec& o) { return std::make_tuple(o.plane, o.node, o.level, o.dst); },
        &oa, &orr, &oc, &lines,
        [&](const fwd::OverrideSpec& o) {
          std::string hops = KindName(o.hops.kind);
          if (o.hops.kind == HopKind::kDown) hops += absl::StrCat(" ", o.hops.down_port);
          if (o.hops.kind == HopKind::kUp) hops += absl::StrCat(" ", Bits(o.hops.up_mask));
          return absl::StrCat("override ", OverrideNode(fb, o.plane, tier, o.node), " -> ",
                              OverrideDst(fb, o), ": ", hops);
        });
    uint64_t da = 0, dr = 0, dc = 0;
    DiffKeyed<fwd::DstExceptionSpec>(
        x.dst_exceptions, y.dst_exceptions,
        [](const fwd::DstExceptionSpec& e) { return std::make_pair(e.level, e.dst); }, &da, &dr,
        &dc, &lines,
        [&](const fwd::DstExceptionSpec& e) {
          return absl::StrCat("destination exception ", LevelDst(fb, e.level, e.dst), ": ",
                              DstExceptionText(fb, e));
        });
    const bool same = what.empty() && ma + mr + mc + oa + orr + oc + da + dr + dc == 0;
    if (same) {
      out << "role " << role << ": unchanged\n";
      continue;
    }
    differs = true;
    out << "role " << role << ":";
    if (!what.empty()) out << " " << absl::StrJoin(what, ", ") << " changed;";
    out << absl::StrFormat(" node masks +%u -%u ~%u, overrides +%u -%u ~%u", ma, mr, mc, oa, orr,
                           oc);
    if (da + dr + dc != 0)
      out << absl::StrFormat(", destination exceptions +%u -%u ~%u", da, dr, dc);
    out << "\n";
    for (const std::string& l : lines) out << l << "\n";
  }
  return differs ? kExitDiffers : kExitOk;
}

// ---- verify
// ----------------------------------------------------------------------------------------

// The tier of the lowest common ancestor of two hosts (1: the same tier-1 switches).
uint32_t LcaTierOf(const Shape& sh, uint32_t a, uint32_t b) {
  uint64_t div = 1;
  for (int L = 1; L <= sh.tiers; ++L) {
    div *= sh.m[L];
    if (a / div == b / div) return static_cast<uint32_t>(L);
  }
  return static_cast<uint32_t>(sh.tiers);
}

int Verify(const std::string& fabric_path, uint64_t sample, uint64_t seed, std::ostream& out,
           std::ostream& err) {
  absl::StatusOr<Source> s = FromFabricFile(fabric_path);
  if (!s.ok()) {
    err << "heddle-nuwa verify: " << s.status().message() << "\n";
    return kExitBadInput;
  }
  const Fabric& f = s->fabric;
  const Shape& sh = f.shape;
  // Check what a loader sees: every artifact through its bytes.
  std::vector<ArtifactSpec> decoded;
  for (int t = 0; t <= sh.tiers; ++t) {
    absl::StatusOr<ArtifactSpec> d = fwd::Decode(fwd::Serialize(SpecFor(*s, t)));
    if (!d.ok() || !(*d == SpecFor(*s, t))) {
      err << "heddle-nuwa verify: the " << f.tier_names[t] << " artifact does not survive "
          << "Serialize/Decode: " << (d.ok() ? "decoded differently" : d.status().message())
          << "\n";
      return kExitDiffers;
    }
    decoded.push_back(*std::move(d));
  }
  // Every switch node, as (plane, tier, index); hosts are checked separately.
  std::vector<NodeRef> switches;
  for (uint8_t p = 0; p < sh.planes; ++p) {
    for (int t = 1; t <= sh.tiers; ++t) {
      for (uint32_t i = 0; i < NodeCount(sh, t); ++i) {
        switches.push_back(NodeRef{p, static_cast<uint8_t>(t), i});
      }
    }
  }
  const uint32_t hosts = static_cast<uint32_t>(NodeCount(sh, 0));
  const uint64_t all_pairs = uint64_t{switches.size() + hosts} * hosts;
  // (dst, node id) pairs: node ids < switches.size() are switches, the rest hosts.
  std::map<uint32_t, std::vector<uint32_t>> by_dst;
  std::mt19937_64 rng(seed);
  const bool exhaustive = sample == 0 || sample >= all_pairs;
  if (exhaustive) {
    for (uint32_t d = 0; d < hosts; ++d) {
      auto& v = by_dst[d];
      for (uint32_t n = 0; n < switches.size() + hosts; ++n) v.push_back(n);
    }
  } else {
    // One BFS per destination dominates: draw the destinations from a pool of about one per 64
    // pairs, so that a large fabric's sample costs seconds, not minutes.
    const uint64_t pool_size = std::clamp<uint64_t>(sample / 64, 1, hosts);
    std::vector<uint32_t> pool;
    for (uint64_t k = 0; k < pool_size; ++k) pool.push_back(static_cast<uint32_t>(rng() % hosts));
    for (uint64_t k = 0; k < sample; ++k) {
      by_dst[pool[rng() % pool.size()]].push_back(
          static_cast<uint32_t>(rng() % (switches.size() + hosts)));
    }
  }
  Oracle oracle(f);
  std::map<NodeRef, fwd::SwitchTable> switch_tables;
  std::map<uint32_t, fwd::HostTable> host_tables;
  uint64_t checked = 0, mismatches = 0, entropy_pairs = 0, entropy_short = 0;
  const bool entropy_exact = [&] {
    if (f.hash.function == HashFunction::kUnknown) return false;
    if (!f.failures.links.empty() || !f.failures.switches.empty()) return false;
    for (int j = 2; j <= sh.tiers; ++j) {
      if (!std::has_single_bit(sh.w[j])) return false;
    }
    return true;
  }();
  std::vector<std::string> first;
  auto report = [&](std::string line) {
    ++mismatches;
    if (first.size() < 10) first.push_back(std::move(line));
  };
  for (auto& [dst, nodes] : by_dst) {
    const std::vector<OracleHops> table = oracle.AllNextHops(dst);
    const uint32_t addr = HostIpv4(sh, f.addresses, dst);
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    for (uint32_t n : nodes) {
      const NodeRef ref = n < switches.size()
                              ? switches[n]
                              : NodeRef{0, 0, n - static_cast<uint32_t>(switches.size())};
      if (!oracle.Alive(ref)) continue;  // a failed switch forwards nothing
      ++checked;
      if (n < switches.size()) {
        auto it = switch_tables.find(ref);
        if (it == switch_tables.end()) {
          absl::StatusOr<fwd::SwitchTable> t =
              fwd::SwitchTable::Build(decoded[ref.tier], ref.plane, ref.index);
          if (!t.ok()) {
            report(absl::StrCat(NodeName(f, ref), ": ", t.status().message()));
            continue;
          }
          it = switch_tables.emplace(ref, *std::move(t)).first;
        }
        const NextHops got = it->second.Lookup4(addr);
        const NextHops want = ToNextHops(sh, ref.tier, table[oracle.NodeId(ref)]);
        if (!(got == want)) {
          report(absl::StrCat(NodeName(f, ref), " -> ", HostName(f, dst), ": artifact ",
                              HopsText(f, ref, got), ", oracle ", HopsText(f, ref, want)));
        }
        continue;
      }
      const uint32_t src = ref.index;
      auto it = host_tables.find(src);
      if (it == host_tables.end()) {
        absl::StatusOr<fwd::HostTable> t = fwd::HostTable::Build(decoded[0], src);
        if (!t.ok()) {
          report(absl::StrCat(HostName(f, src), ": ", t.status().message()));
          continue;
        }
        it = host_tables.emplace(src, *std::move(t)).first;
      }
      std::array<fwd::HostPath, fwd::kMaxHostPaths> paths;
      HopKind kind = HopKind::kNotInFabric;
      const uint32_t np = it->second.Paths4(addr, paths.data(), fwd::kMaxHostPaths, &kind);
      const OracleHops& want = table[oracle.NodeId(ref)];
      if (src == dst) {
        if (kind != HopKind::kLocal) {
          report(absl::StrCat(HostName(f, src), " -> itself: artifact ", KindName(kind),
                              ", expected local"));
        }
        continue;
      }
      // The path set's ports: the oracle's first hops, narrowed by the policy exactly as the
      // host applies it (the class's planes, rail_local, then the cap: paths interleave ports, so
      // a cap of n keeps the n lowest ports).
      uint64_t got_ports = 0, want_ports = 0;
      for (uint32_t k = 0; k < np; ++k) got_ports |= uint64_t{1} << paths[k].port;
      for (uint32_t p : want.ports) want_ports |= uint64_t{1} << p;
      const int cls = ClassOfHost(f, dst);
      want_ports = PolicyPorts(f, src, dst, cls, want_ports);
      if (got_ports != want_ports || (np == 0) != (want_ports == 0)) {
        report(absl::StrCat(HostName(f, src), " -> ", HostName(f, dst), ": artifact ports ",
                            Bits(got_ports), ", oracle ", Bits(want_ports)));
        continue;
      }
      // Every (port, entropy) must lead to the destination on a shortest path through the failed
      // fabric, the switches hashing over their surviving next hops (docs/nuwa.md §5).
      if (f.hash.function != HashFunction::kUnknown) {
        const uint32_t hops = 2 * LcaTierOf(sh, src, dst) - 1;
        bool ok = true;
        for (uint32_t k = 0; k < np && ok; ++k) {
          const auto path = oracle.SimulatePath(table, src, dst, paths[k].port,
                                                static_cast<uint16_t>(paths[k].entropy));
          if (path.size() != hops) {
            report(absl::StrCat(HostName(f, src), " -> ", HostName(f, dst), ": port ",
                                paths[k].port, " entropy ", paths[k].entropy, " takes ",
                                path.size(), " switches, the shortest path ", hops));
            ok = false;
          }
        }
        if (!ok) continue;
      }
      // Entropy: the paths leaving on one port should visit distinct switch sequences.
      if (np > 1) {
        ++entropy_pairs;
        std::map<uint32_t, std::set<std::vector<NodeRef>>> seen;
        std::map<uint32_t, uint32_t> count;
        for (uint32_t k = 0; k < np; ++k) {
          seen[paths[k].port].insert(oracle.SimulatePath(table, src, dst, paths[k].port,
                                                         static_cast<uint16_t>(paths[k].entropy)));
          ++count[paths[k].port];
        }
        bool distinct = true;
        for (const auto& [port, set] : seen) distinct &= set.size() == count[port];
        if (!distinct) {
          ++entropy_short;
          if (entropy_exact && (cls < 0 || f.routing.classes[cls].restrict_tier == 0)) {
            report(absl::StrCat(HostName(f, src), " -> ", HostName(f, dst),
                                ": two entropy values of one port take the same path"));
          }
        }
      }
    }
  }
  out << absl::StrFormat(
      "verified %u of %u (node, destination) pairs (%s) against the BFS oracle: %u mismatch%s\n",
      checked, all_pairs, exhaustive ? "all" : absl::StrCat("sample, seed ", seed), mismatches,
      mismatches == 1 ? "" : "es");
  out << absl::StrFormat(
      "entropy: %u of %u multi-path host pairs take distinct paths per port%s\n",
      entropy_pairs - entropy_short, entropy_pairs,
      !entropy_exact
          ? " (best effort: unknown hash, failures or a fanout that is not a power of two)"
          : (f.routing.classes.empty() ? "" : " (best effort for classes with via)"));
  for (const std::string& l : first) out << "  " << l << "\n";
  return mismatches ? kExitDiffers : kExitOk;
}

}  // namespace

int Main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app(
      "Compile Nüwa fabric descriptions into forwarding artifacts and inspect them "
      "(docs/nuwa.md).",
      "heddle-nuwa");
  app.set_version_flag("--version", std::string(kVersion));
  app.require_subcommand(1);

  std::string fabric, artifacts, out_dir, node, dst, target;
  std::vector<std::string> pair;
  bool json = false;
  uint64_t sample = 0, seed = 1;

  CLI::App* compile = app.add_subcommand("compile", "compile FABRIC.yaml into DIR/<role>.nuwa");
  compile->add_option("fabric", target, "fabric description (YAML)")->required();
  compile->add_option("-o,--out", out_dir, "output directory")->required();
  compile->add_flag("--json", json, "print the summary as JSON");

  CLI::App* show = app.add_subcommand("show", "render an artifact, or one node's rules");
  show->add_option("artifact", target, "an artifact file (*.nuwa)");
  show->add_option("--fabric", fabric, "fabric description (YAML), with --node");
  show->add_option("--artifacts", artifacts, "directory of compiled artifacts, with --node");
  show->add_option("--node", node, "node name (agg[3], p1/spine[2], host[7] or a host address)");
  show->add_flag("--json", json, "print JSON");

  CLI::App* query = app.add_subcommand("query", "next hops of a switch or path set of a host");
  query->add_option("--fabric", fabric, "fabric description (YAML), compiled in memory");
  query->add_option("--artifacts", artifacts, "directory of compiled artifacts");
  query->add_option("--node", node, "node name")->required();
  query->add_option("--dst", dst, "destination IPv4/IPv6 address or host name")->required();
  query->add_flag("--json", json, "print JSON");

  CLI::App* diff = app.add_subcommand("diff", "compare two artifacts, artifact dirs or fabrics");
  diff->add_option("a b", pair, "the two inputs")->required()->expected(2);

  CLI::App* verify = app.add_subcommand("verify", "check the artifacts against the BFS oracle");
  verify->add_option("--fabric", fabric, "fabric description (YAML)")->required();
  verify->add_option("--sample", sample, "check N random (node, destination) pairs; 0: all");
  verify->add_option("--seed", seed, "seed of the sample");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion&) {
    out << "heddle-nuwa " << kVersion << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);
    err << "heddle-nuwa: " << e.what() << "\nRun 'heddle-nuwa --help' for more information.\n";
    return kExitBadInput;
  }

  if (compile->parsed()) return Compile_(target, out_dir, json, out, err);
  if (show->parsed()) {
    if (!target.empty()) {
      if (!node.empty() || !fabric.empty() || !artifacts.empty()) {
        err << "heddle-nuwa show: give an artifact file, or --node with --fabric or --artifacts\n";
        return kExitBadInput;
      }
      return ShowArtifact(target, json, out, err);
    }
    if (node.empty()) {
      err << "heddle-nuwa show: give an artifact file, or --node with --fabric or --artifacts\n";
      return kExitBadInput;
    }
    absl::StatusOr<Source> s = LoadSource(fabric, artifacts);
    if (!s.ok()) {
      err << "heddle-nuwa show: " << s.status().message() << "\n";
      return kExitBadInput;
    }
    return ShowNode(*s, node, json, out, err);
  }
  if (query->parsed()) {
    absl::StatusOr<Source> s = LoadSource(fabric, artifacts);
    if (!s.ok()) {
      err << "heddle-nuwa query: " << s.status().message() << "\n";
      return kExitBadInput;
    }
    return Query(*s, node, dst, json, out, err);
  }
  if (diff->parsed()) return Diff(pair[0], pair[1], out, err);
  if (verify->parsed()) return Verify(fabric, sample, seed, out, err);
  return kExitBadInput;
}

}  // namespace heddle::nuwa::cli
