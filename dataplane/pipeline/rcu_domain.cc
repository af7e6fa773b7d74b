// File: dataplane/pipeline/rcu_domain.cc
#include "dataplane/pipeline/rcu_domain.h"

#include <rte_common.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/time/clock.h"
#include "common/log.h"

namespace heddle::pipeline {

RcuDomain::RcuDomain(int num_workers, const char* name) : name_(name) {
  const auto n = static_cast<unsigned>(num_workers < 1 ? 1 : num_workers);
  const size_t sz = rte_rcu_qsbr_get_memsize(n);
  const size_t rounded = (sz + RTE_CACHE_LINE_SIZE - 1) / RTE_CACHE_LINE_SIZE * RTE_CACHE_LINE_SIZE;
  void* mem = std::aligned_alloc(RTE_CACHE_LINE_SIZE, rounded);
  if (mem == nullptr) std::abort();  // start-up only
  std::memset(mem, 0, rounded);
  qsbr_ = static_cast<rte_rcu_qsbr*>(mem);
  rte_rcu_qsbr_init(qsbr_, n);
  for (unsigned w = 0; w < n; ++w) {
    rte_rcu_qsbr_thread_register(qsbr_, w);
    rte_rcu_qsbr_thread_online(qsbr_, w);
  }
}

RcuDomain::~RcuDomain() {
  retired_.clear();
  std::free(qsbr_);
}

void RcuDomain::Retire(std::shared_ptr<const void> old) {
  // The token covers every worker's state as of now: once each has passed a quiescent state (or
  // is offline) after it, none can still hold `old`.
  retired_.push_back({std::move(old), rte_rcu_qsbr_start(qsbr_)});
  Reclaim(/*wait=*/true);
}

void RcuDomain::Reclaim(bool wait) {
  const absl::Time deadline = absl::Now() + grace_timeout_;
  while (!retired_.empty()) {
    // Tokens grow with publication order: the first pending one is the oldest.
    size_t done = 0;
    while (done < retired_.size() && rte_rcu_qsbr_check(qsbr_, retired_[done].token, false) == 1) {
      ++done;
    }
    retired_.erase(retired_.begin(), retired_.begin() + static_cast<std::ptrdiff_t>(done));
    if (retired_.empty() || !wait) return;
    if (absl::Now() >= deadline) {
      slow_grace_.fetch_add(1, std::memory_order_relaxed);
      HEDDLE_LOG(kWarning,
                 "%s: a worker has not passed a quiescent state for %s; %zu old "
                 "configuration(s) kept until it does",
                 name_, absl::FormatDuration(grace_timeout_).c_str(), retired_.size());
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace heddle::pipeline
