// File: dataplane/lb/balancer.cc
#include "dataplane/lb/balancer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heddle::lb {

const char* BalancerKindName(BalancerKind k) {
  constexpr const char* kNames[] = {
#define HEDDLE_LB_NAME_(e, n, d) n,
      HEDDLE_FOREACH_BALANCER(HEDDLE_LB_NAME_)
#undef HEDDLE_LB_NAME_
  };
  const auto i = static_cast<size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "invalid";
}

const char* BalancerKindDescription(BalancerKind k) {
  constexpr const char* kDescs[] = {
#define HEDDLE_LB_DESC_(e, n, d) d,
      HEDDLE_FOREACH_BALANCER(HEDDLE_LB_DESC_)
#undef HEDDLE_LB_DESC_
  };
  const auto i = static_cast<size_t>(k);
  return i < std::size(kDescs) ? kDescs[i] : "invalid";
}

absl::StatusOr<BalancerKind> ParseBalancerKind(std::string_view name_view) {
  const std::string name(name_view);
  std::string valid;
  for (int i = 0; i < static_cast<int>(BalancerKind::kCount); ++i) {
    const auto k = static_cast<BalancerKind>(i);
    if (name == BalancerKindName(k)) return k;
    absl::StrAppend(&valid, i == 0 ? "" : ", ", BalancerKindName(k));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown load balancer \"", name, "\"; one of: ", valid));
}

PathLoads::PathLoads(uint32_t max_sets)
    : max_sets_(std::max<uint32_t>(max_sets, 1)),
      slots_(new Slot[static_cast<size_t>(max_sets_) * kMaxPaths]) {
  Reset();
}

void PathLoads::Reset() {
  std::memset(static_cast<void*>(slots_.get()), 0,
              sizeof(Slot) * static_cast<size_t>(max_sets_) * kMaxPaths);
}

Balancer::Balancer(const BalancerParams& params, internal::Rng* rng, PathLoads* loads)
    : kind_(params.kind),
      rps_(rng),
      flowlet_(rng, params.flowlet_gap_ns),
      reps_(rng,
            std::clamp<uint32_t>(params.reps_cache_size, 1, static_cast<uint32_t>(kMaxRepsCache)),
            &counters_),
      adaptive_(rng, loads) {}

void Balancer::Reconfigure(const BalancerParams& params) {
  kind_ = params.kind;
  flowlet_.set_gap_ns(params.flowlet_gap_ns);
  reps_.set_cache_size(
      std::clamp<uint32_t>(params.reps_cache_size, 1, static_cast<uint32_t>(kMaxRepsCache)));
}

}  // namespace heddle::lb
