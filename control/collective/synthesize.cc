// The candidate search of synthesize.h (docs/optiflow-compiler.md §6).
#include "control/collective/synthesize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/xoshiro.h"
#include "control/collective/builtins.h"
#include "control/collective/intent_check.h"
#include "control/collective/topology_io.h"

namespace heddle::collective {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Group sizes tried for hierarchical: the divisors of N closest to √N first, at most this many.
constexpr size_t kMaxGroupSizes = 6;
// Starts the greedy ring tries (all of them up to this many ranks, else the first ones).
constexpr uint32_t kMaxRingStarts = 64;

struct Base {
  std::string name;  // builtin name plus parameters, e.g. "hierarchical G=2"
  std::string text;
  std::map<std::string, int64_t> params;
};

std::string OrderName(const std::vector<uint32_t>& order) {
  return absl::StrCat("[", absl::StrJoin(order, ","), "]");
}

class Search {
 public:
  Search(const Collective& c, const Topology& t, const SynthesizeOptions& o)
      : c_(c), t_(t), o_(o) {}

  absl::StatusOr<Synthesized> Run() {
    HEDDLE_RETURN_IF_ERROR(Validate(c_));
    HEDDLE_RETURN_IF_ERROR(ValidateTopology(t_));
    if (t_.ranks != c_.ranks) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "synthesize: the collective has %u ranks; the topology has %u", c_.ranks, t_.ranks));
    }
    if (o_.budget < 1) return absl::InvalidArgumentError("synthesize: budget must be at least 1");

    for (const Candidate& x : o_.extra) {
      if (Spent()) break;
      Candidate cand = x;
      if (cand.options.ranks == 0) cand.options.ranks = c_.ranks;
      if (cand.options.chunks_per_rank == 0) cand.options.chunks_per_rank = c_.chunks_per_rank;
      if ((c_.kind == Kind::kBroadcast || c_.kind == Kind::kReduce) &&
          !cand.options.params.count("root")) {
        cand.options.params["root"] = c_.root;
      }
      Try(cand);
    }

    std::vector<Base> bases = Bases();
    std::vector<std::pair<std::string, std::vector<uint32_t>>> orders = {
        {"identity", Identity()}, {"greedy", WidestRingOrder(t_)}};
    if (orders[1].second == orders[0].second) orders.pop_back();
    for (const Base& b : bases) {
      for (const auto& [order_name, order] : orders) {
        if (Spent()) break;
        Try(Make(b, absl::StrCat(b.name, " order=", order_name), order));
      }
    }

    // Local search over rank orders, from the best candidate so far.
    Xoshiro256 rng(o_.seed);
    const uint32_t n = c_.ranks;
    uint32_t mutation = 0;
    uint32_t fruitless = 0;
    while (!Spent() && best_ && n >= 3 && fruitless < 4 * o_.budget) {
      std::vector<uint32_t> order = best_->first.options.order;
      if (order.empty()) order = Identity();
      const uint32_t i = static_cast<uint32_t>(rng.Next() % n);
      uint32_t j = static_cast<uint32_t>(rng.Next() % (n - 1));
      if (j >= i) ++j;
      if (rng.Next() & 1) {
        std::swap(order[i], order[j]);
      } else {
        std::reverse(order.begin() + std::min(i, j), order.begin() + std::max(i, j) + 1);
      }
      const Base* base = BaseOf(best_->first);
      if (!base || seen_orders_.count(std::make_pair(base->name, order))) {
        ++fruitless;
        continue;
      }
      Try(Make(*base, absl::StrCat(base->name, " order=m", ++mutation, OrderName(order)), order));
    }

    if (!best_) {
      std::string why = failures_.empty()
                            ? "no candidate has a form for this collective"
                            : absl::StrCat(failures_.front().first, ": ", failures_.front().second);
      return absl::NotFoundError(
          absl::StrFormat("synthesize: no candidate compiled for %s on %u ranks (%s)",
                          KindName(c_.kind), c_.ranks, why));
    }
    Synthesized out;
    out.best = std::move(best_->first);
    out.intent = std::move(best_intent_);
    out.schedule = std::move(best_->second);
    out.tried = std::move(tried_);
    out.failures = std::move(failures_);
    return out;
  }

 private:
  bool Spent() const { return tried_.size() >= o_.budget; }

  std::vector<uint32_t> Identity() const {
    std::vector<uint32_t> v(c_.ranks);
    for (uint32_t i = 0; i < c_.ranks; ++i) v[i] = i;
    return v;
  }

  std::vector<Base> Bases() const {
    std::vector<Base> out;
    for (const std::string& name : BuiltinNames()) {
      absl::StatusOr<std::string> text = BuiltinIntentText(name, c_.kind);
      if (!text.ok()) continue;
      std::map<std::string, int64_t> params;
      if (c_.kind == Kind::kBroadcast || c_.kind == Kind::kReduce) params["root"] = c_.root;
      absl::StatusOr<IntentInfo> info = InspectIntent(*text);
      if (!info.ok()) continue;
      if (absl::c_linear_search(info->params, "G")) {
        for (uint32_t g : GroupSizes()) {
          std::map<std::string, int64_t> p = params;
          p["G"] = g;
          out.push_back(Base{absl::StrCat(name, " G=", g), *text, std::move(p)});
        }
      } else {
        out.push_back(Base{name, *text, params});
      }
    }
    return out;
  }

  // Divisors of N strictly between 1 and N (or N itself when there are none), closest to √N
  // first, then smaller.
  std::vector<uint32_t> GroupSizes() const {
    const uint32_t n = c_.ranks;
    std::vector<uint32_t> d;
    for (uint32_t g = 2; g < n; ++g) {
      if (n % g == 0) d.push_back(g);
    }
    if (d.empty()) d.push_back(n);
    const double root = std::sqrt(static_cast<double>(n));
    std::stable_sort(d.begin(), d.end(), [&](uint32_t a, uint32_t b) {
      return std::abs(a - root) < std::abs(b - root);
    });
    if (d.size() > kMaxGroupSizes) d.resize(kMaxGroupSizes);
    std::sort(d.begin(), d.end());
    return d;
  }

  Candidate Make(const Base& b, std::string name, const std::vector<uint32_t>& order) const {
    Candidate cand;
    cand.name = std::move(name);
    cand.text = b.text;
    cand.options.ranks = c_.ranks;
    cand.options.order = order;
    cand.options.params = b.params;
    cand.options.chunks_per_rank = c_.chunks_per_rank;
    return cand;
  }

  const Base* BaseOf(const Candidate& cand) {
    if (bases_.empty()) bases_ = Bases();
    for (const Base& b : bases_) {
      if (b.text == cand.text && b.params == cand.options.params) return &b;
    }
    return nullptr;
  }

  void Fail(const std::string& name, std::string why) {
    tried_.emplace_back(name, kInf);
    failures_.emplace_back(name, std::move(why));
  }

  void Try(const Candidate& cand) {
    if (const Base* b = BaseOf(cand)) {
      seen_orders_.insert(
          std::make_pair(b->name, cand.options.order.empty() ? Identity() : cand.options.order));
    }
    absl::StatusOr<Intent> intent = ParseIntent(cand.text, cand.options);
    if (!intent.ok()) return Fail(cand.name, std::string(intent.status().message()));
    if (!(intent->collective == c_)) {
      return Fail(cand.name,
                  absl::StrFormat("the intent is a %s of %u ranks × %u chunks (root "
                                  "%u); wanted a %s of %u ranks × %u chunks (root %u)",
                                  KindName(intent->collective.kind), intent->collective.ranks,
                                  intent->collective.chunks_per_rank, intent->collective.root,
                                  KindName(c_.kind), c_.ranks, c_.chunks_per_rank, c_.root));
    }
    if (absl::Status st = CheckIntent(*intent); !st.ok()) {
      return Fail(cand.name, std::string(st.message()));
    }
    absl::StatusOr<Schedule> s = Compile(*intent, t_, o_.compile);
    if (!s.ok()) return Fail(cand.name, std::string(s.status().message()));
    tried_.emplace_back(cand.name, s->predicted_s);
    if (!best_ || s->predicted_s < best_->second.predicted_s ||
        (s->predicted_s == best_->second.predicted_s && cand.name < best_->first.name)) {
      best_.emplace(cand, std::move(*s));
      best_intent_ = std::move(*intent);
    }
  }

  const Collective& c_;
  const Topology& t_;
  const SynthesizeOptions& o_;
  std::vector<Base> bases_;
  std::set<std::pair<std::string, std::vector<uint32_t>>> seen_orders_;
  std::optional<std::pair<Candidate, Schedule>> best_;
  Intent best_intent_;
  std::vector<std::pair<std::string, double>> tried_;
  std::vector<std::pair<std::string, std::string>> failures_;
};

}  // namespace

std::vector<uint32_t> WidestRingOrder(const Topology& t) {
  const uint32_t n = t.ranks;
  std::vector<uint32_t> identity(n);
  for (uint32_t i = 0; i < n; ++i) identity[i] = i;
  if (n <= 2) return identity;
  // Direct rank-to-rank links only; a pair without one counts as bandwidth 0.
  std::vector<double> bw(size_t{n} * n, 0), lat(size_t{n} * n, kInf);
  for (const Link& l : t.links) {
    if (l.src < n && l.dst < n) {
      bw[size_t{l.src} * n + l.dst] = l.bytes_per_second;
      lat[size_t{l.src} * n + l.dst] = l.latency_s;
    }
  }
  std::optional<std::tuple<double, double, uint32_t>> best_key;  // -bottleneck, latency, start
  std::vector<uint32_t> best = identity;
  for (uint32_t start = 0; start < n && start < kMaxRingStarts; ++start) {
    std::vector<uint32_t> order = {start};
    std::vector<char> used(n, 0);
    used[start] = 1;
    double bottleneck = kInf, latency = 0;
    for (uint32_t step = 1; step < n; ++step) {
      const uint32_t at = order.back();
      uint32_t pick = n;
      for (uint32_t v = 0; v < n; ++v) {
        if (used[v]) continue;
        if (pick == n || bw[size_t{at} * n + v] > bw[size_t{at} * n + pick] ||
            (bw[size_t{at} * n + v] == bw[size_t{at} * n + pick] &&
             lat[size_t{at} * n + v] < lat[size_t{at} * n + pick])) {
          pick = v;
        }
      }
      used[pick] = 1;
      bottleneck = std::min(bottleneck, bw[size_t{at} * n + pick]);
      latency += lat[size_t{at} * n + pick];
      order.push_back(pick);
    }
    bottleneck = std::min(bottleneck, bw[size_t{order.back()} * n + start]);
    latency += lat[size_t{order.back()} * n + start];
    const auto key = std::make_tuple(-bottleneck, latency, start);
    if (!best_key || key < *best_key) {
      best_key = key;
      best = order;
    }
  }
  return best;
}

absl::StatusOr<Synthesized> Synthesize(const Collective& c, const Topology& t,
                                       const SynthesizeOptions& o) {
  return Search(c, t, o).Run();
}

}  // namespace heddle::collective
