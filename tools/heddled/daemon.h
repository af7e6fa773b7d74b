// File: tools/heddled/daemon.h
//
// heddled's lifecycle: config -> EAL -> ports and mempool -> metrics exposer -> control API ->
// ports started -> workers launched; then, on SIGINT/SIGTERM: workers stopped and drained,
// control API and exposer shut (socket removed), ports stopped and closed, EAL cleaned up.
// Any failure on the way up unwinds what was already set up and returns a Status saying what is
// wrong; nothing is left half-running.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "control/config/config.h"

namespace heddle::heddled {

class Daemon {
 public:
  Daemon(config::Config cfg, std::string config_path);
  ~Daemon();

  // Brings everything up. On error, everything set up so far is torn down again.
  absl::Status Start();
  // Blocks until SIGINT/SIGTERM (which the caller blocked in every thread before Start()).
  int WaitForSignal();
  // Stops and tears down; idempotent.
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Blocks SIGINT, SIGTERM and SIGPIPE in the calling thread; threads created afterwards (EAL,
// gRPC, civetweb) inherit the mask, so the signals reach only Daemon::WaitForSignal's sigwait.
void BlockTerminationSignals();

}  // namespace heddle::heddled
