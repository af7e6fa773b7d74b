#include "dataplane/pipeline/storm_control.h"


#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"

namespace heddle::pipeline {
namespace {

constexpr int kNumCounters = sizeof(StormWorkerCounters) / sizeof(uint64_t);
static_assert(sizeof(StormWorkerCounters) == kNumCounters * sizeof(uint64_t));

// Cutoffs that moved by more than 1/8 (or appeared/disappeared) are worth a publication; smaller
// moves are the histogram's noise.
bool CutoffsMoved(const std::array<uint32_t, storm::kMaxLevels - 1>& a,
                  const std::array<uint32_t, storm::kMaxLevels - 1>& b, int levels) {
  for (int i = 0; i + 1 < levels; ++i) {
    const uint64_t x = a[i], y = b[i];
    const uint64_t diff = x > y ? x - y : y - x;
    if (diff * 8 > std::max(x, y)) return true;
  }
  return false;
}

}  // namespace

bool QpRowBefore(const QpRow& a, const QpRow& b, QpSort sort) {
  switch (sort) {
    case QpSort::kRemaining:
      if (a.remaining != b.remaining) return a.remaining > b.remaining;
      return a.backlog > b.backlog;
    case QpSort::kIdle:
      return a.idle_ms > b.idle_ms;
    case QpSort::kBacklog:
    default:
      if (a.backlog != b.backlog) return a.backlog > b.backlog;
      return a.remaining > b.remaining;
  }
}

StormControl::StormControl(const storm::LevelConfig& levels, int num_workers, bool auto_cutoffs,
                           size_t ack_ring_slots)
    : num_workers_(std::max(num_workers, 1)),
      rcu_(num_workers_, "storm"),
      workers_(new WorkerBlock[std::max(num_workers, 1)]),
      ack_rings_(new std::unique_ptr<AckRing>[static_cast<size_t>(num_workers_) * num_workers_]),
      read_rings_(new std::unique_ptr<ReadRing>[static_cast<size_t>(num_workers_) * num_workers_]) {
  for (int from = 0; from < num_workers_; ++from) {
    for (int to = 0; to < num_workers_; ++to) {
      if (from != to) {
        ack_rings_[static_cast<size_t>(from) * num_workers_ + to] =
            std::make_unique<AckRing>(ack_ring_slots);
        read_rings_[static_cast<size_t>(from) * num_workers_ + to] =
            std::make_unique<ReadRing>(ack_ring_slots);
      }
    }
  }
  for (int w = 0; w < num_workers_; ++w) workers_[w].rows.reserve(kMaxTopQps);
  auto_.store(auto_cutoffs, std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  PublishParamsLocked(levels);
}

StormControl::~StormControl() {
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


void StormControl::PublishCounters(int w, const StormWorkerCounters& c) {
  uint64_t v[kNumCounters];
  std::memcpy(v, &c, sizeof v);
  for (int i = 0; i < kNumCounters; ++i) {
    workers_[w].counters[i].store(v[i], std::memory_order_relaxed);
  }
}

StormWorkerCounters StormControl::counters() const {
  uint64_t sum[kNumCounters] = {};
  for (int w = 0; w < num_workers_; ++w) {
    for (int i = 0; i < kNumCounters; ++i) {
      sum[i] += workers_[w].counters[i].load(std::memory_order_relaxed);
    }
  }
  StormWorkerCounters out;
  std::memcpy(&out, sum, sizeof out);
  return out;
}

void StormControl::PublishParamsLocked(const storm::LevelConfig& levels) {
  auto p = std::make_shared<Params>();
  p->levels = levels;
  p->generation = params_owner_ ? params_owner_->generation + 1 : 1;
  std::shared_ptr<const Params> old = std::move(params_owner_);
  params_owner_ = std::move(p);
  params_.store(params_owner_.get(), std::memory_order_release);
  generation_.store(params_owner_->generation, std::memory_order_relaxed);
  if (old) rcu_.Retire(std::move(old));
}

absl::Status StormControl::SetLevels(const storm::LevelConfig& levels,
                                     std::optional<bool> auto_cutoffs,
                                     std::optional<uint64_t> if_generation) {
  if (absl::Status s = storm::ValidateLevelConfig(levels); !s.ok()) return s;
  absl::MutexLock l(&mu_);
  if (if_generation && params_owner_->generation != *if_generation) {
    return absl::AbortedError("storm levels changed while this update was prepared; retry");
  }
  if (auto_cutoffs) auto_.store(*auto_cutoffs, std::memory_order_relaxed);
  PublishParamsLocked(levels);
  return absl::OkStatus();
}

StormControl::Current StormControl::current() const {
  absl::MutexLock l(&mu_);
  return {params_owner_->levels, params_owner_->generation, auto_.load(std::memory_order_relaxed)};
}

storm::LevelConfig StormControl::current_levels() const {
  absl::MutexLock l(&mu_);
  return params_owner_->levels;
}

void StormControl::PublishHostBacklog(std::shared_ptr<const verbs::HostBacklogIndex> index) {
  absl::MutexLock l(&mu_);
  std::shared_ptr<const verbs::HostBacklogIndex> old = std::move(host_owner_);
  host_owner_ = std::move(index);
  host_.store(host_owner_.get(), std::memory_order_release);
  if (old) rcu_.Retire(std::move(old));
}



bool StormControl::AutoStep(double keep) {
  storm::SizeHistogram sum;
  for (int w = 0; w < num_workers_; ++w) {
    const storm::SizeHistogram snap = workers_[w].hist.Snapshot();
    for (int b = 0; b < storm::SizeHistogram::kBuckets; ++b) {
      sum.set_bytes(b, sum.bytes(b) + snap.bytes(b));
    }
  }
  absl::MutexLock l(&mu_);
  const storm::SizeHistogram fresh = storm::HistogramDelta(sum, last_sum_);
  last_sum_ = sum;
  storm::AgeHistogram(&aged_, fresh, keep);
  rcu_.Reclaim(/*wait=*/false);
  if (!auto_.load(std::memory_order_relaxed)) return false;
  storm::LevelConfig next = params_owner_->levels;
  auto cut = storm::AutoCutoffs(aged_, next.levels);
  if (!cut || !CutoffsMoved(*cut, next.cutoffs, next.levels)) return false;
  next.cutoffs = *cut;
  if (!storm::ValidateLevelConfig(next).ok()) return false;  // e.g. two cutoffs in one bucket
  PublishParamsLocked(next);
  auto_published_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

storm::SizeHistogram StormControl::aged_histogram() const {
  absl::MutexLock l(&mu_);
  return aged_;
}

StormControl::QpQuery StormControl::PendingQuery(int w) const {
  const WorkerBlock& b = workers_[w];
  QpQuery q;
  q.seq = b.query_seq.load(std::memory_order_acquire);
  q.n = b.query_n.load(std::memory_order_relaxed);
  q.sort = b.query_sort.load(std::memory_order_relaxed);
  return q;
}

void StormControl::Answer(int w, uint64_t seq, const std::vector<QpRow>& rows) {
  WorkerBlock& b = workers_[w];
  b.rows.clear();  // capacity kept: no allocation up to kMaxTopQps rows
  const size_t n = std::min<size_t>(rows.size(), kMaxTopQps);
  b.rows.insert(b.rows.end(), rows.begin(), rows.begin() + n);
  b.answered_seq.store(seq, std::memory_order_release);
}

absl::StatusOr<std::vector<QpRow>> StormControl::TopQps(int n, QpSort sort,
                                                        absl::Duration timeout) {
  if (n < 1 || n > kMaxTopQps) {
    return absl::InvalidArgumentError(
        absl::StrCat("top ", n, " is out of range; use 1..", kMaxTopQps));
  }
  absl::MutexLock l(&query_mu_);
  const uint64_t seq = ++query_seq_;
  for (int w = 0; w < num_workers_; ++w) {
    workers_[w].query_n.store(n, std::memory_order_relaxed);
    workers_[w].query_sort.store(sort, std::memory_order_relaxed);
    workers_[w].query_seq.store(seq, std::memory_order_release);
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<int> missing;
  for (;;) {
    missing.clear();
    for (int w = 0; w < num_workers_; ++w) {
      if (workers_[w].answered_seq.load(std::memory_order_acquire) != seq) missing.push_back(w);
    }
    if (missing.empty() || absl::Now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!missing.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat("worker(s) ", absl::StrJoin(missing, ", "), " did not answer within ",
                     absl::FormatDuration(timeout), " (stopped or stalled)"));
  }
  std::vector<QpRow> all;
  for (int w = 0; w < num_workers_; ++w) {
    all.insert(all.end(), workers_[w].rows.begin(), workers_[w].rows.end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [sort](const QpRow& a, const QpRow& b) { return QpRowBefore(a, b, sort); });
  if (all.size() > static_cast<size_t>(n)) all.resize(n);
  return all;
}

}  // namespace heddle::pipeline
