// File: dataplane/relay/wan/internal/outcome_queue.h
//
// Delivers round outcomes to the region side from one thread of its own, in the order they were
// pushed, each exactly once: callers push while holding their own locks, and the callback may
// call back into the exchange (SubmitSlice for the next round) without deadlocking. Outcomes
// pushed before a callback is set wait for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "dataplane/relay/wan/exchange.h"

namespace heddle::relay::wan_internal {

class OutcomeQueue {
 public:
  OutcomeQueue() : thread_([this] { Run(); }) {}
  ~OutcomeQueue() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  OutcomeQueue(const OutcomeQueue&) = delete;
  OutcomeQueue& operator=(const OutcomeQueue&) = delete;

  void SetCallback(WanExchange::OutcomeCallback cb) {
    {
      std::lock_guard<std::mutex> l(mu_);
      cb_ = std::move(cb);
    }
    cv_.notify_all();
  }
  void Push(uint64_t round_id, RoundOutcome outcome) {
    {
      std::lock_guard<std::mutex> l(mu_);
      items_.emplace_back(round_id, std::move(outcome));
    }
    cv_.notify_all();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [this] { return stop_ || (cb_ && !items_.empty()); });
      if (stop_) return;
      auto item = std::move(items_.front());
      items_.pop_front();
      WanExchange::OutcomeCallback cb = cb_;
      l.unlock();
      cb(item.first, std::move(item.second));
      l.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  WanExchange::OutcomeCallback cb_;
  std::deque<std::pair<uint64_t, RoundOutcome>> items_;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace heddle::relay::wan_internal
