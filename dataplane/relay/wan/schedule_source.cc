#include "dataplane/relay/wan/schedule_source.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "control/collective/builtins.h"
#include "control/collective/compiler.h"
#include "control/collective/dsl.h"
#include "control/collective/schedule_io.h"
#include "control/collective/synthesize.h"
#include "control/collective/topology_io.h"
#include "control/collective/verifier.h"
#include "dataplane/relay/wan/schedule_plan.h"

namespace heddle::relay {

namespace col = ::heddle::collective;

namespace {

absl::Status Bad(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("wan.", key, ": ", what));
}

}  // namespace

// Without wan.topology, a full mesh of equal links: the prediction is then nominal, and every
// pattern is priced alike.
absl::StatusOr<col::Topology> ResolveWanTopology(const WanScheduleOptions& o,
                                                 std::span<const uint32_t> regions) {
  std::string text = o.topology_yaml;
  if (text.empty() && !o.topology_file.empty()) {
    std::ifstream in(o.topology_file);
    if (!in) return Bad("topology", absl::StrFormat("cannot read %s", o.topology_file));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  std::vector<std::string> names;
  for (uint32_t r : regions) names.push_back(absl::StrCat(r));
  if (text.empty()) {
    text = absl::StrFormat("ranks: [%s]\ndefault: {bandwidth: 1Gbit, latency: 30ms}\n",
                           absl::StrJoin(names, ", "));
  }
  absl::StatusOr<col::Topology> t = col::ParseTopology(text);
  if (!t.ok()) return Bad("topology", t.status().message());
  const std::vector<std::string> got(t->nodes.begin(), t->nodes.begin() + t->ranks);
  if (got != names) {
    return Bad("topology",
               absl::StrFormat("ranks [%s]; they must be the configured regions by id, in "
                               "increasing order: [%s]",
                               absl::StrJoin(got, ", "), absl::StrJoin(names, ", ")));
  }
  return t;
}

col::Topology WithMeasuredRates(col::Topology t, std::span<const uint32_t> regions,
                                const std::map<std::pair<uint32_t, uint32_t>, double>& rates) {
  for (col::Link& l : t.links) {
    if (l.src >= regions.size() || l.dst >= regions.size()) continue;  // a switch
    auto it = rates.find({regions[l.src], regions[l.dst]});
    if (it != rates.end() && it->second > 0 && std::isfinite(it->second)) {
      l.bytes_per_second = it->second;
    }
  }
  return t;
}

namespace {

absl::StatusOr<col::Schedule> CompileBuiltin(const std::string& name, const WanScheduleOptions& o,
                                             uint32_t ranks, const col::Topology& t,
                                             const col::CompileOptions& co) {
  absl::StatusOr<std::string> text = col::BuiltinIntentText(name, col::Kind::kAllGather);
  if (!text.ok()) {
    return Bad(
        "schedule",
        absl::StrFormat("'%s' is not direct, ring, auto, file or a builtin with an "
                        "allgather form (%s): %s",
                        name, absl::StrJoin(col::BuiltinNames(), ", "), text.status().message()));
  }
  col::ExpandOptions eo;
  eo.ranks = ranks;
  eo.params = o.params;
  absl::StatusOr<col::Intent> intent = col::ParseIntent(*text, eo);
  if (!intent.ok()) return Bad("schedule", intent.status().message());
  absl::StatusOr<col::Schedule> s = col::Compile(*intent, t, co);
  if (!s.ok()) return Bad("schedule", s.status().message());
  return s;
}

}  // namespace

uint64_t WanScheduleDigest(const col::Schedule& s) { return col::ScheduleDigest(s); }

absl::StatusOr<col::Schedule> ResolveWanSchedule(const WanScheduleOptions& o,
                                                 std::span<const uint32_t> regions,
                                                 uint64_t slot_bytes) {
  const uint32_t ranks = static_cast<uint32_t>(regions.size());
  col::Schedule s;
  if (o.compiled != nullptr) {
    s = *o.compiled;
  } else if (o.name == "file") {
    absl::StatusOr<col::Schedule> read = col::ReadScheduleFile(o.file);
    if (!read.ok()) return Bad("schedule.file", read.status().message());
    s = *std::move(read);
    if (!o.topology_yaml.empty() || !o.topology_file.empty()) {
      HEDDLE_ASSIGN_OR_RETURN(col::Topology t, ResolveWanTopology(o, regions));
      if (s.topology_digest != col::TopologyDigest(t)) {
        return Bad("schedule.file",
                   absl::StrFormat("%s was compiled for another topology (digest %016x) than "
                                   "wan.topology (%016x); recompile it, or drop wan.topology",
                                   o.file, s.topology_digest, col::TopologyDigest(t)));
      }
    }
  } else {
    HEDDLE_ASSIGN_OR_RETURN(col::Topology t, ResolveWanTopology(o, regions));
    col::CompileOptions co;
    co.slot_bytes = std::max<uint64_t>(slot_bytes, 1);
    co.pieces = o.pieces;
    if (o.name == "auto") {
      col::SynthesizeOptions so;
      so.compile = co;
      absl::StatusOr<col::Synthesized> best = col::Synthesize(
          {.kind = col::Kind::kAllGather, .ranks = ranks, .chunks_per_rank = 1}, t, so);
      if (!best.ok()) return Bad("schedule", best.status().message());
      s = std::move(best->schedule);
      s.intent = absl::StrCat("auto: ", best->best.name);
    } else {
      // direct and ring as a hard-wired library runs them: no relays (today's full mesh).
      co.multi_hop = o.name != "direct" && o.name != "ring";
      HEDDLE_ASSIGN_OR_RETURN(s, CompileBuiltin(o.name, o, ranks, t, co));
    }
  }
  if (absl::Status st = col::VerifySchedule(s); !st.ok()) {
    return Bad("schedule", absl::StrCat("'", s.intent, "' does not verify: ", st.message()));
  }
  if (absl::Status st = CheckRelaySchedule(s, ranks); !st.ok()) {
    return Bad("schedule", st.message());
  }
  return s;
}

absl::StatusOr<col::Schedule> ScheduleFromSwitch(std::string_view json, uint64_t digest,
                                                 std::span<const uint32_t> regions,
                                                 uint64_t slot_bytes) {
  if (json.empty()) return absl::InvalidArgumentError("the switch carries no compiled schedule");
  absl::StatusOr<col::Schedule> parsed = col::ScheduleFromJson(json);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the announced schedule does not parse: ", parsed.status().message()));
  }
  if (const uint64_t d = WanScheduleDigest(*parsed); d != digest) {
    return absl::DataLossError(absl::StrFormat(
        "the announced schedule's digest is %016x, the switch says %016x", d, digest));
  }
  WanScheduleOptions o;
  o.compiled = std::make_shared<const col::Schedule>(*std::move(parsed));
  return ResolveWanSchedule(o, regions, slot_bytes);
}

uint32_t ChooseCoordinator(const col::Topology& t, std::span<const uint32_t> regions,
                           uint64_t slot_bytes) {
  const size_t n = t.nodes.size();
  const double inf = std::numeric_limits<double>::infinity();
  // Per ordered pair, the shortest-latency route and the bottleneck bandwidth along it (0: no
  // route). Of parallel links the lower latency wins, and its own bandwidth goes with it.
  std::vector<double> lat(n * n, inf), bw(n * n, 0);
  for (size_t i = 0; i < n; ++i) {
    lat[i * n + i] = 0;
    bw[i * n + i] = inf;
  }
  auto better = [](double l1, double b1, double l0, double b0) {
    return l1 < l0 || (l1 == l0 && b1 > b0);
  };
  for (const col::Link& l : t.links) {
    if (l.src >= n || l.dst >= n) continue;
    const size_t ij = l.src * n + l.dst;
    if (better(l.latency_s, l.bytes_per_second, lat[ij], bw[ij])) {
      lat[ij] = l.latency_s;
      bw[ij] = l.bytes_per_second;
    }
  }
  for (size_t k = 0; k < n; ++k) {  // shortest latencies (switches, or missing rank pairs)
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        const double l = lat[i * n + k] + lat[k * n + j];
        const double b = std::min(bw[i * n + k], bw[k * n + j]);
        if (better(l, b, lat[i * n + j], bw[i * n + j])) {
          lat[i * n + j] = l;
          bw[i * n + j] = b;
        }
      }
    }
  }
  // One region's frames from i to c: the route's latency plus the frames at its bottleneck;
  // infinite with no route (or a route of no bandwidth), so such a coordinator is never chosen
  // over one every region can reach.
  auto transfer = [&](size_t i, size_t c) {
    const double b = bw[i * n + c];
    if (lat[i * n + c] == inf || !(b > 0)) return inf;
    return lat[i * n + c] + static_cast<double>(slot_bytes) / b;
  };
  const size_t ranks = std::min<size_t>(regions.size(), t.ranks);
  uint32_t best = regions.empty() ? 0 : regions.front();
  double best_cost = inf;
  for (size_t c = 0; c < ranks; ++c) {
    double in = 0, out = 0;
    for (size_t i = 0; i < ranks; ++i) {
      if (i == c) continue;
      in = std::max(in, transfer(i, c));
      out = std::max(out, lat[c * n + i]);
    }
    if (in + out < best_cost) {
      best_cost = in + out;
      best = regions[c];
    }
  }
  return best;
}

}  // namespace heddle::relay
