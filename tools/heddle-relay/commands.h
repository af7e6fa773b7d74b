// File: tools/heddle-relay/commands.h
//
// The subcommands of heddle-relay (docs/relay.md §7, §10): serve (the gateway's region side and
// its WAN half from the installed factory), worker (a synthetic worker), status (tables or JSON).
// Each returns the process exit code and prints errors to stderr.
#pragma once

#include <cstdint>
#include <string>

#include "dataplane/relay/service/relay.pb.h"
#include "dataplane/relay/wan/grpc_exchange.h"

namespace heddle::relay::tool {

struct ServeOptions {
  std::string config;
  std::string port_file;  // written with the bound port once serving (for scripts and tests)
  bool check_config = false;
};
int Serve(const ServeOptions& o);

struct ConnectFlags {
  std::string relay = "127.0.0.1:7400";
  std::string token;
  std::string token_file;
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  double timeout_s = 30;
};

struct WorkerOptions {
  ConnectFlags connect;
  std::string name;
  std::string region;
  double tokens_per_s = 10000;
  int64_t max_batch = 8;
  int64_t seq_len = 0;
  uint64_t model_elements = 0;  // non-zero: a one-tensor fp32 model, checked against the relay
  std::string model_file;       // or a model spec file, checked against the relay
  uint64_t rounds = 3;
  uint32_t seed = 1;
  double time_scale = 1.0;  // true slowdown: sleeps plan tokens / tokens_per_s × time_scale
  double compute_s = 1.0;   // compute time when the relay has no plan
  double pull_timeout_s = 3600;
};
int Worker(const WorkerOptions& o);

int Status(const ConnectFlags& c, bool json);

// The human-readable status (tables), for tests.
std::string RenderStatus(const v1::StatusResponse& s);
// The WAN half's counters as the status message carries them.
void FillWanStatus(const WanStats& st, v1::WanStatus* w);

}  // namespace heddle::relay::tool
