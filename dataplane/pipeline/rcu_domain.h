// File: dataplane/pipeline/rcu_domain.h
//
// The workers' RCU domain for objects the control thread publishes by pointer swap (StormControl,
// LbControl): an rte_rcu_qsbr variable with every worker registered and online, and the list of
// retired objects waiting for their grace period.
//
//   RcuDomain rcu(num_workers, "storm");
//   ...control thread, after swapping the published pointer:  rcu.Retire(std::move(old));
//   ...worker w, once per poll loop, outside any burst:        rcu.Quiescent(w);
//
// Retire() waits up to grace_timeout for every worker to pass a quiescent state (or be offline);
// an object still possibly read then is kept, counted in slow_grace_periods() and freed by a later
// Retire() or Reclaim(). Objects are never freed early. Retire/Reclaim/Clear are not thread-safe:
// the owner serialises them (its publication mutex). Quiescent/Offline/Online are per worker.
#pragma once

#include <rte_rcu_qsbr.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"

namespace heddle::pipeline {

class RcuDomain {
 public:
  // `name` prefixes the slow-grace warning ("storm", "lb").
  RcuDomain(int num_workers, const char* name);
  ~RcuDomain();
  RcuDomain(const RcuDomain&) = delete;
  RcuDomain& operator=(const RcuDomain&) = delete;

  void Quiescent(int w) { rte_rcu_qsbr_quiescent(qsbr_, static_cast<unsigned>(w)); }
  // A worker that stops reading (e.g. stops polling) goes offline so grace periods do not wait
  // for it; Online() before it reads again.
  void Offline(int w) { rte_rcu_qsbr_thread_offline(qsbr_, static_cast<unsigned>(w)); }
  void Online(int w) { rte_rcu_qsbr_thread_online(qsbr_, static_cast<unsigned>(w)); }

  // Keeps `old` until every worker has passed a quiescent state after this call; waits up to
  // grace_timeout for it (and for older retired objects).
  void Retire(std::shared_ptr<const void> old);
  // Frees the retired objects whose grace period has passed; with `wait`, waits up to
  // grace_timeout for the rest.
  void Reclaim(bool wait);
  // Drops every retired object: only once the workers have stopped.
  void Clear() { retired_.clear(); }

  // Grace periods that had not completed within grace_timeout (their objects are freed later).
  uint64_t slow_grace_periods() const { return slow_grace_.load(std::memory_order_relaxed); }
  void set_grace_timeout(absl::Duration d) { grace_timeout_ = d; }

 private:
  struct Retired {
    std::shared_ptr<const void> object;
    uint64_t token;
  };
  const char* name_;
  rte_rcu_qsbr* qsbr_ = nullptr;  // aligned heap block
  std::vector<Retired> retired_;
  std::atomic<uint64_t> slow_grace_{0};
  absl::Duration grace_timeout_ = absl::Seconds(1);
};

}  // namespace heddle::pipeline
