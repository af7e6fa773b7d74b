// File: tools/heddlectl/command.h
//
// heddlectl's subcommand registry. Every `heddlectl VERB OBJECT` (show status, show drops, ...)
// is one Command; the CLI front end (cli.cc) builds its argument parser from the registry, so a new
// feature adds an object or a verb by registering one more Command, in one place:
//
//   void RegisterStormCommands(CommandRegistry& registry) {
//     registry.Add({.verb = "show", .object = "storm", .help = "STORM levels and thresholds",
//                   .run = [](CommandContext& ctx) -> absl::Status { ... }});
//   }
//
// and calling that function from RegisterAllCommands (commands.cc).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "control/api/client.h"
#include "google/protobuf/message.h"

namespace CLI {
class App;
}  // namespace CLI

namespace heddle::api::cli {

struct GlobalOptions {
  std::string socket_path;
  bool json = false;
  int timeout_ms = 3000;
};

struct CommandContext {
  ApiClient& client;
  const GlobalOptions& options;
  std::ostream& out;
};

struct Command {
  std::string verb;    // "show"
  std::string object;  // "status"
  std::string help;
  // Adds the command's own flags and positionals to its parser; may be empty. State the flags
  // write to is captured (e.g. in a shared_ptr) by both this and `run`.
  std::function<void(CLI::App&)> add_options;
  // Runs after a successful parse; an error goes to stderr and makes heddlectl exit 1.
  std::function<absl::Status(CommandContext&)> run;
};

class CommandRegistry {
 public:
  void Add(Command command) { commands_.push_back(std::move(command)); }
  const std::vector<Command>& commands() const { return commands_; }

 private:
  std::vector<Command> commands_;
};

// Every command heddlectl knows.
void RegisterAllCommands(CommandRegistry& registry);
// The read-only `show` family.
void RegisterShowCommands(CommandRegistry& registry);
// STORM: `show storm`, `show qp`, `set storm ...` (storm_commands.cc).
void RegisterStormCommands(CommandRegistry& registry);
// PIN and the load balancer: `show lb`, `set lb ...` (lb_commands.cc).
void RegisterLbCommands(CommandRegistry& registry);
// Nüwa artifacts: `artifact install|show|diff|rollback` (artifact_commands.cc).
void RegisterArtifactCommands(CommandRegistry& registry);

// -j output: the response message as JSON (lowerCamelCase names, fields at their default value
// included, so scripts always see every key).
absl::Status PrintJson(const google::protobuf::Message& message, std::ostream& out);

}  // namespace heddle::api::cli
