// File: tools/heddle-relay/main.cc
//
// heddle-relay: the GeoMesh gateway (docs/relay.md §7) and its tools.
//   heddle-relay serve --config relay.yaml [--port-file F] [--check-config]
//   heddle-relay worker --relay HOST:PORT --name NAME [--tokens-per-s X] [--rounds N] ...
//   heddle-relay status [--relay HOST:PORT] [-j]
// Exit codes: 0 success, 1 a failure (printed on stderr), 2 bad command line.
#include <iostream>

#include "CLI/CLI.hpp"
#include "common/log.h"
#include "common/version.h"
#include "tools/heddle-relay/commands.h"

namespace {

void AddConnect(CLI::App* app, heddle::relay::tool::ConnectFlags& c) {
  app->add_option("--relay", c.relay, "the region relay, host:port")->capture_default_str();
  app->add_option("--token", c.token, "bearer token (prefer --token-file)");
  app->add_option("--token-file", c.token_file, "file holding the bearer token");
  app->add_option("--tls-ca", c.tls_ca, "CA certificate to verify the relay (turns TLS on)");
  app->add_option("--tls-cert", c.tls_cert, "client certificate (mutual TLS)");
  app->add_option("--tls-key", c.tls_key, "client key (mutual TLS)");
  app->add_option("--tls-server-name", c.tls_server_name, "name expected in the relay's cert");
  app->add_option("--timeout", c.timeout_s, "seconds for each unary call")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace heddle::relay::tool;
  CLI::App app("GeoMesh relay: the region gateway, a synthetic worker, status.", "heddle-relay");
  app.set_version_flag("--version", std::string(heddle::kVersion));
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "debug logging");
  app.require_subcommand(1);

  ServeOptions serve;
  CLI::App* s = app.add_subcommand("serve", "run the region relay (and its WAN half)");
  s->add_option("-c,--config", serve.config, "relay.yaml")->required();
  s->add_option("--port-file", serve.port_file, "write the bound worker port here when ready");
  s->add_flag("--check-config", serve.check_config, "validate the config and exit");

  WorkerOptions w;
  CLI::App* wk = app.add_subcommand("worker",
                                    "a synthetic worker: sleeps for its planned "
                                    "compute time, pushes random pseudo-gradients, "
                                    "pulls and checks each round");
  AddConnect(wk, w.connect);
  wk->add_option("--name", w.name, "worker name (stable identity)")->required();
  wk->add_option("--region", w.region, "the region it expects to join");
  wk->add_option("--tokens-per-s", w.tokens_per_s, "profiled throughput for the planner")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  wk->add_option("--max-batch", w.max_batch, "largest batch that fits")->capture_default_str();
  wk->add_option("--seq-len", w.seq_len, "tokens per sample (0: the relay's default)");
  auto* me = wk->add_option("--model-elements", w.model_elements,
                            "check the relay serves a one-tensor fp32 model of this size");
  wk->add_option("--model", w.model_file, "check the relay serves this model spec (YAML)")
      ->excludes(me);
  wk->add_option("--rounds", w.rounds, "rounds to run")->capture_default_str();
  wk->add_option("--seed", w.seed, "pseudo-gradient seed")->capture_default_str();
  wk->add_option(
        "--time-scale", w.time_scale,
        "slowdown against the announced profile: sleeps plan tokens / --tokens-per-s times this")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  wk->add_option("--compute-s", w.compute_s, "compute time without a plan")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  wk->add_option("--pull-timeout", w.pull_timeout_s, "seconds to wait for a round to end")
      ->capture_default_str();

  ConnectFlags st;
  bool json = false;
  CLI::App* stc = app.add_subcommand("status", "members, rounds and counters of a relay");
  AddConnect(stc, st);
  stc->add_flag("-j,--json", json, "JSON instead of tables");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, std::cout, std::cerr) == 0 ? 0 : 2;
  }
  if (verbose) heddle::log::SetLevel(heddle::log::kDebug);
  if (s->parsed()) return Serve(serve);
  if (wk->parsed()) return Worker(w);
  return Status(st, json);
}
