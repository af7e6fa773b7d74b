#include "dataplane/pipeline/lb_control.h"


#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace heddle::pipeline {

const char* PinStageCounterName(PinStageCounter c) {
  constexpr const char* kNames[] = {
#define HEDDLE_PIN_STAGE_NAME_(e, n, d) n,
      HEDDLE_FOREACH_PIN_STAGE_COUNTER(HEDDLE_PIN_STAGE_NAME_)
#undef HEDDLE_PIN_STAGE_NAME_
  };
  const auto i = static_cast<size_t>(c);
  return i < std::size(kNames) ? kNames[i] : "invalid";
}

const char* PinStageCounterDescription(PinStageCounter c) {
  constexpr const char* kDescs[] = {
#define HEDDLE_PIN_STAGE_DESC_(e, n, d) d,
      HEDDLE_FOREACH_PIN_STAGE_COUNTER(HEDDLE_PIN_STAGE_DESC_)
#undef HEDDLE_PIN_STAGE_DESC_
  };
  const auto i = static_cast<size_t>(c);
  return i < std::size(kDescs) ? kDescs[i] : "invalid";
}

LbControl::LbControl(const lb::LbConfig& config, std::shared_ptr<const lb::PathTable> table,
                     int num_workers, size_t ring_slots)
    : num_workers_(std::max(num_workers, 1)),
      rcu_(num_workers_, "lb"),
      workers_(new WorkerBlock[std::max(num_workers, 1)]),
      rings_(new std::unique_ptr<FeedbackRing>[static_cast<size_t>(num_workers_) * num_workers_]) {
  for (int from = 0; from < num_workers_; ++from) {
    for (int to = 0; to < num_workers_; ++to) {
      if (from != to) {
        rings_[static_cast<size_t>(from) * num_workers_ + to] =
            std::make_unique<FeedbackRing>(ring_slots);
      }
    }
  }
  absl::MutexLock l(&mu_);
  PublishLocked(config, std::move(table));
}

LbControl::~LbControl() {
  {
    absl::MutexLock l(&mu_);
    // Whoever destroys this has stopped the workers: nothing reads the published objects any more.
    rcu_.Clear();
    params_.store(nullptr, std::memory_order_relaxed);
    host_.store(nullptr, std::memory_order_relaxed);
    params_owner_.reset();
    host_owner_.reset();
  }
}


void LbControl::PublishLocked(const lb::LbConfig& config,
                              std::shared_ptr<const lb::PathTable> table) {
  auto p = std::make_shared<LbParams>();
  p->config = config;
  p->table = std::move(table);
  p->generation = params_owner_ ? params_owner_->generation + 1 : 1;
  std::shared_ptr<const LbParams> old = std::move(params_owner_);
  params_owner_ = std::move(p);
  // release: a worker that loads the pointer (acquire) sees the whole object and its table.
  params_.store(params_owner_.get(), std::memory_order_release);
  generation_.store(params_owner_->generation, std::memory_order_relaxed);
  if (old) rcu_.Retire(std::move(old));
}

absl::Status LbControl::Update(const LbChange& change) {
  absl::MutexLock l(&mu_);
  lb::LbConfig next = params_owner_->config;
  if (change.balancer) next.balancer = *change.balancer;
  if (change.threshold_bytes) next.threshold_bytes = *change.threshold_bytes;
  if (change.pin_policy) next.pin_policy = *change.pin_policy;
  if (change.pin) next.pin = *change.pin;
  if (absl::Status s = lb::ValidateLbConfig(next); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  PublishLocked(next, params_owner_->table);
  return absl::OkStatus();
}

absl::Status LbControl::SetPathTable(std::shared_ptr<const lb::PathTable> table) {
  absl::MutexLock l(&mu_);
  PublishLocked(params_owner_->config, std::move(table));
  return absl::OkStatus();
}

LbControl::Current LbControl::current() const {
  absl::MutexLock l(&mu_);
  return {params_owner_->config, params_owner_->table, params_owner_->generation};
}

void LbControl::PublishHostBacklog(std::shared_ptr<const verbs::HostBacklogIndex> index) {
  absl::MutexLock l(&mu_);
  std::shared_ptr<const verbs::HostBacklogIndex> old = std::move(host_owner_);
  host_owner_ = std::move(index);
  host_.store(host_owner_.get(), std::memory_order_release);
  if (old) rcu_.Retire(std::move(old));
}


LbTotals LbControl::totals() const {
  LbTotals t;
  for (int w = 0; w < num_workers_; ++w) {
    const WorkerBlock& b = workers_[w];
    for (int i = 0; i < lb::kNumLbCounters; ++i) {
      t.selector[i] += b.selector[i].load(std::memory_order_relaxed);
    }
    for (int i = 0; i < kNumPinStageCounters; ++i) {
      const uint64_t v = b.stage[i].load(std::memory_order_relaxed);
      // The generation is a gauge of what each worker applied: report the oldest.
      if (i == static_cast<int>(PinStageCounter::kGeneration)) {
        t.stage[i] = w == 0 ? v : std::min(t.stage[i], v);
      } else {
        t.stage[i] += v;
      }
    }
    for (int s = 0; s <= kLbReportedSets; ++s) {
      for (int p = 0; p < lb::kMaxPaths; ++p) {
        t.path_bytes[s][p] += b.path_bytes[s * lb::kMaxPaths + p].load(std::memory_order_relaxed);
        t.path_packets[s][p] +=
            b.path_packets[s * lb::kMaxPaths + p].load(std::memory_order_relaxed);
      }
    }
  }
  return t;
}

}  // namespace heddle::pipeline
