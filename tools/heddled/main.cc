// heddled: the heddle host daemon.
//   heddled -c heddle.yaml [--check-config] [--log-level LEVEL] [-- EAL args...]
// Exit codes: 0 clean stop (or valid config), 1 bad config or start-up failure, 2 usage error.
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/log.h"
#include "common/version.h"
#include "control/config/config.h"
#include "tools/heddled/daemon.h"
#include "tools/heddled/fwd_service.h"

int main(int argc, char** argv) {
  // Everything after "--" goes to the EAL untouched.
  std::vector<std::string> eal_extra;
  int own_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      own_argc = i;
      for (int j = i + 1; j < argc; ++j) eal_extra.push_back(argv[j]);
      break;
    }
  }

  CLI::App app{"heddled: heddle host daemon (STORM, PIN, Nuwa dataplane on DPDK)", "heddled"};
  std::string config_path;
  bool check_only = false;
  std::string log_level;
  app.add_option("-c,--config", config_path, "YAML configuration (docs/config.md)")->required();
  app.add_flag("--check-config", check_only, "validate the configuration and exit 0/1");
  app.add_option("--log-level", log_level, "error|warning|info|debug (overrides log.level)");
  app.set_version_flag("--version", std::string("heddled ") + heddle::kVersion);
  try {
    app.parse(own_argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  auto cfg = heddle::config::LoadFile(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "heddled: %s: invalid configuration:\n%s\n", config_path.c_str(),
                 std::string(cfg.status().message()).c_str());
    return 1;
  }
  // Command-line overrides go through the same checks as the file.
  if (!log_level.empty()) cfg->log_level = log_level;
  for (auto& a : eal_extra) cfg->eal_args.push_back(a);
  if (auto s = heddle::config::Validate(*cfg); !s.ok()) {
    std::fprintf(stderr, "heddled: %s: invalid configuration (with command-line overrides):\n%s\n",
                 config_path.c_str(), std::string(s.message()).c_str());
    return 1;
  }
  if (check_only) {
    // A configured artifact is checked as an install would check it.
    if (auto s = heddle::heddled::CheckConfiguredArtifact(*cfg, config_path); !s.ok()) {
      std::fprintf(stderr, "heddled: %s: invalid configuration:\n%s\n", config_path.c_str(),
                   std::string(s.message()).c_str());
      return 1;
    }
    std::printf("%s: OK (%zu ports, %zu worker lcore(s))\n", config_path.c_str(), cfg->ports.size(),
                cfg->worker_lcores.size());
    return 0;
  }
  heddle::log::SetLevel(cfg->log_level == "error"     ? heddle::log::kError
                        : cfg->log_level == "warning" ? heddle::log::kWarning
                        : cfg->log_level == "debug"   ? heddle::log::kDebug
                                                      : heddle::log::kInfo);

  heddle::heddled::BlockTerminationSignals();
  heddle::heddled::Daemon daemon(*std::move(cfg), config_path);
  if (auto s = daemon.Start(); !s.ok()) {
    std::fprintf(stderr, "heddled: start-up failed: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  daemon.WaitForSignal();
  daemon.Stop();
  HEDDLE_LOG(kInfo, "stopped cleanly");
  return 0;
}
