// File: dataplane/lb/path.cc
#include "dataplane/lb/path.h"

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::lb {
namespace {

uint64_t LoadBe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

// (hi, lo) mask of the first `len` bits.
std::pair<uint64_t, uint64_t> MaskWords(int len) {
  auto m = [](int bits) -> uint64_t {
    if (bits <= 0) return 0;
    if (bits >= 64) return ~uint64_t{0};
    return ~uint64_t{0} << (64 - bits);
  };
  return {m(len), m(len - 64)};
}

// The prefix with its host bits cleared.
Prefix Masked(Prefix p) {
  for (int i = 0; i < 16; ++i) {
    const int bits = p.len - 8 * i;
    if (bits <= 0) {
      p.addr[i] = 0;
    } else if (bits < 8) {
      p.addr[i] &= static_cast<uint8_t>(0xff << (8 - bits));
    }
  }
  return p;
}

std::atomic<uint32_t> next_generation{1};

}  // namespace

std::string PrefixString(const Prefix& p) {
  char buf[INET6_ADDRSTRLEN];
  const bool v4 =
      p.len >= 96 &&
      std::all_of(p.addr.begin(), p.addr.begin() + 10, [](uint8_t b) { return b == 0; }) &&
      p.addr[10] == 0xff && p.addr[11] == 0xff;
  if (v4) {
    inet_ntop(AF_INET, p.addr.data() + 12, buf, sizeof(buf));
    return absl::StrCat(buf, "/", p.len - 96);
  }
  inet_ntop(AF_INET6, p.addr.data(), buf, sizeof(buf));
  return absl::StrCat(buf, "/", p.len);
}

const char* EntropyFieldName(EntropyField f) {
  switch (f) {
    case EntropyField::kUdpSourcePort:
      return "udp-sport";
    case EntropyField::kIpv6FlowLabel:
      return "flow-label";
  }
  return "invalid";
}

absl::StatusOr<Prefix> ParsePrefix(std::string_view text_view) {
  // This abseil's string_view is its own type: work on a std::string.
  const std::string text(text_view);
  Prefix p;
  std::string addr = text;
  int len = -1;
  if (const size_t slash = text.find('/'); slash != std::string::npos) {
    addr = text.substr(0, slash);
    if (!absl::SimpleAtoi(text.substr(slash + 1), &len)) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefix \"", text, "\": the length after '/' is not a number"));
    }
  }
  in_addr a4;
  in6_addr a6;
  if (inet_pton(AF_INET, addr.c_str(), &a4) == 1) {
    if (len == -1) len = 32;
    if (len < 0 || len > 32) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefix \"", text, "\": IPv4 prefix length must be 0..32"));
    }
    p.addr[10] = p.addr[11] = 0xff;
    std::memcpy(p.addr.data() + 12, &a4, 4);
    p.len = static_cast<uint8_t>(96 + len);
  } else if (inet_pton(AF_INET6, addr.c_str(), &a6) == 1) {
    if (len == -1) len = 128;
    if (len < 0 || len > 128) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefix \"", text, "\": IPv6 prefix length must be 0..128"));
    }
    std::memcpy(p.addr.data(), &a6, 16);
    p.len = static_cast<uint8_t>(len);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix \"", text, "\": not an IPv4 or IPv6 address (e.g. 10.1.0.0/16 or fd00::/64)"));
  }
  const auto [mhi, mlo] = MaskWords(p.len);
  if ((LoadBe64(p.addr.data()) & ~mhi) != 0 || (LoadBe64(p.addr.data() + 8) & ~mlo) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("prefix \"", text,
                                                   "\": host bits are set; write the network "
                                                   "address, ",
                                                   PrefixString(Masked(p))));
  }
  return p;
}

absl::StatusOr<PathTableSpec> PathTableSpecFromConfig(const PathConfig& config,
                                                      EntropyField field) {
  const uint32_t max_entropy = field == EntropyField::kUdpSourcePort ? kMaxUdpSport : kMaxFlowLabel;
  const char* field_name = EntropyFieldName(field);
  auto expand = [&](const PrefixPathsConfig& c,
                    const std::string& where) -> absl::StatusOr<std::vector<Path>> {
    if (c.ports.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": no uplink port listed"));
    }
    std::vector<uint32_t> values = c.values;
    if (values.empty()) {
      if (c.entropies == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": entropies is 0; give at least 1 (8 or more to spread)"));
      }
      for (uint32_t i = 0; i < c.entropies && i <= max_entropy; ++i) {
        values.push_back(c.first_entropy + i);
      }
    }
    if (values.size() * c.ports.size() > static_cast<size_t>(kMaxPaths)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %d entropies x %d ports = %d paths, more than the %d a path set holds; list fewer",
          where, values.size(), c.ports.size(), values.size() * c.ports.size(), kMaxPaths));
    }
    std::set<uint32_t> seen;
    for (uint32_t v : values) {
      if (v > max_entropy) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: entropy %#x does not fit the %s (at most %#x)", where, v,
                            field_name, max_entropy));
      }
      if (!seen.insert(v).second) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: entropy %#x listed twice", where, v));
      }
    }
    std::vector<Path> paths;
    for (uint16_t port : c.ports) {
      for (uint32_t v : values) paths.push_back(Path{.entropy = v, .port = port});
    }
    return paths;
  };

  PathTableSpec spec;
  for (const PrefixPathsConfig& c : config.prefixes) {
    const std::string where = absl::StrCat("paths for prefix \"", c.prefix, "\"");
    absl::StatusOr<Prefix> prefix = ParsePrefix(c.prefix);
    if (!prefix.ok()) return prefix.status();
    absl::StatusOr<std::vector<Path>> paths = expand(c, where);
    if (!paths.ok()) return paths.status();
    spec.routes.push_back({*prefix, static_cast<uint32_t>(spec.sets.size())});
    spec.sets.push_back(*std::move(paths));
  }
  if (config.has_default) {
    absl::StatusOr<std::vector<Path>> paths = expand(config.default_paths, "default paths");
    if (!paths.ok()) return paths.status();
    spec.default_set = static_cast<int32_t>(spec.sets.size());
    spec.sets.push_back(*std::move(paths));
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<const PathTable>> PathTable::Build(const PathTableSpec& spec) {
  std::unique_ptr<PathTable> t(new PathTable);
  for (size_t s = 0; s < spec.sets.size(); ++s) {
    const auto& set = spec.sets[s];
    if (set.empty() || set.size() > static_cast<size_t>(kMaxPaths)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("path set %d has %d paths; a set needs 1..%d", s, set.size(), kMaxPaths));
    }
    for (const Path& p : set) {
      if (p.entropy > kMaxFlowLabel) {
        return absl::InvalidArgumentError(
            absl::StrFormat("path set %d: entropy %#x is wider than 20 bits", s, p.entropy));
      }
    }
    t->sets_.push_back(
        {static_cast<uint32_t>(t->paths_.size()), static_cast<uint32_t>(set.size())});
    t->paths_.insert(t->paths_.end(), set.begin(), set.end());
  }
  for (uint32_t id = 0; id < t->sets_.size(); ++id) {  // paths_ is complete: it no longer moves
    t->views_.push_back({&t->paths_[t->sets_[id].first], t->sets_[id].count, id});
  }
  if (spec.default_set >= static_cast<int32_t>(spec.sets.size()) || spec.default_set < -1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "default path set %d does not exist (%d sets)", spec.default_set, spec.sets.size()));
  }
  for (const auto& r : spec.routes) {
    if (r.set >= spec.sets.size() && r.set != kRouteNoSet) {
      return absl::InvalidArgumentError(
          absl::StrFormat("route %s points to path set %d; there are %d", PrefixString(r.prefix),
                          r.set, spec.sets.size()));
    }
    if (r.prefix.len > 128) {
      return absl::InvalidArgumentError("prefix length beyond 128");
    }
    const auto [mhi, mlo] = MaskWords(r.prefix.len);
    const uint64_t hi = LoadBe64(r.prefix.addr.data()), lo = LoadBe64(r.prefix.addr.data() + 8);
    if ((hi & ~mhi) != 0 || (lo & ~mlo) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("route ", PrefixString(r.prefix), ": host bits are set"));
    }
    auto g = std::find_if(t->groups_.begin(), t->groups_.end(),
                          [&](const LengthGroup& x) { return x.len == r.prefix.len; });
    if (g == t->groups_.end()) {
      t->groups_.push_back({r.prefix.len, mhi, mlo, {}});
      g = t->groups_.end() - 1;
    }
    g->entries.push_back({hi, lo, r.set});
  }
  for (auto& g : t->groups_) {
    std::sort(g.entries.begin(), g.entries.end(), [](const Entry& a, const Entry& b) {
      return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
    });
    for (size_t i = 1; i < g.entries.size(); ++i) {
      if (g.entries[i].hi == g.entries[i - 1].hi && g.entries[i].lo == g.entries[i - 1].lo) {
        Prefix p;
        for (int b = 0; b < 8; ++b) {
          p.addr[b] = static_cast<uint8_t>(g.entries[i].hi >> (56 - 8 * b));
          p.addr[8 + b] = static_cast<uint8_t>(g.entries[i].lo >> (56 - 8 * b));
        }
        p.len = g.len;
        return absl::InvalidArgumentError(
            absl::StrCat("prefix ", PrefixString(p), " is listed twice; keep one"));
      }
    }
  }
  std::sort(t->groups_.begin(), t->groups_.end(),
            [](const LengthGroup& a, const LengthGroup& b) { return a.len > b.len; });
  t->default_set_ = spec.default_set;
  t->spec_ = spec;
  t->generation_ = next_generation.fetch_add(1, std::memory_order_relaxed);
  if (t->generation_ == 0) t->generation_ = next_generation.fetch_add(1, std::memory_order_relaxed);
  return std::unique_ptr<const PathTable>(std::move(t));
}

PathSetView PathTable::LookupWords(uint64_t hi, uint64_t lo) const {
  for (const LengthGroup& g : groups_) {
    const uint64_t h = hi & g.mask_hi, l = lo & g.mask_lo;
    auto it = std::lower_bound(g.entries.begin(), g.entries.end(), std::make_pair(h, l),
                               [](const Entry& e, const std::pair<uint64_t, uint64_t>& k) {
                                 return e.hi != k.first ? e.hi < k.first : e.lo < k.second;
                               });
    if (it != g.entries.end() && it->hi == h && it->lo == l) return set(it->set);
  }
  return default_set_ >= 0 ? set(static_cast<uint32_t>(default_set_)) : PathSetView{};
}

PathSetView PathTable::LookupAddress(const uint8_t* addr16) const {
  return LookupWords(LoadBe64(addr16), LoadBe64(addr16 + 8));
}

PathSetView PathTable::Lookup(const uint8_t* frame, const pkt::PacketDesc& desc) const {
  const uint8_t* ip = frame + desc.l3_off;
  if (desc.l3 == pkt::L3::kIpv4) {
    const uint64_t dst = static_cast<uint64_t>(ip[16]) << 24 | static_cast<uint64_t>(ip[17]) << 16 |
                         static_cast<uint64_t>(ip[18]) << 8 | ip[19];
    return LookupWords(0, uint64_t{0xffff} << 32 | dst);
  }
  if (desc.l3 == pkt::L3::kIpv6) return LookupAddress(ip + 24);
  return PathSetView{};
}

}  // namespace heddle::lb
