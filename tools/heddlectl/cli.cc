// File: tools/heddlectl/cli.cc
#include "tools/heddlectl/cli.h"

#include <CLI/CLI.hpp>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/version.h"
#include "control/api/client.h"
#include "tools/heddlectl/command.h"

namespace heddle::api::cli {

int Main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CommandRegistry registry;
  RegisterAllCommands(registry);

  GlobalOptions options;
  options.socket_path = ApiClient::kDefaultSocketPath;
  CLI::App app("Operate a running heddled over its control socket.", "heddlectl");
  app.set_version_flag("--version", std::string(kVersion));
  app.add_option("-s,--socket", options.socket_path, "heddled control socket")
      ->envname("HEDDLE_SOCKET")
      ->capture_default_str();
  app.add_flag("-j,--json", options.json, "print the daemon's answer as JSON");
  app.add_option("--timeout", options.timeout_ms, "give up on the daemon after this many ms")
      ->check(CLI::Range(1, 3600 * 1000))
      ->capture_default_str();
  app.require_subcommand(1);

  // verb -> its parser; every (verb, object) parser -> its command.
  std::map<std::string, CLI::App*> verbs;
  std::vector<std::pair<CLI::App*, const Command*>> leaves;
  std::map<std::string, std::string> verb_objects;  // verb -> "status, ports, ..."
  try {
    for (const Command& command : registry.commands()) {
      CLI::App*& verb = verbs[command.verb];
      if (verb == nullptr) {
        verb = app.add_subcommand(command.verb, "");
        verb->footer("Run 'heddlectl " + command.verb + " OBJECT --help' for an object's flags.");
        verb->require_subcommand(1);
        verb->fallthrough();  // global flags may come after the verb
      }
      CLI::App* leaf = verb->add_subcommand(command.object, command.help);
      leaf->fallthrough();
      if (command.add_options) command.add_options(*leaf);
      leaves.emplace_back(leaf, &command);
      std::string& objects = verb_objects[command.verb];
      objects += (objects.empty() ? "" : ", ") + command.object;
    }
    for (auto& [name, verb] : verbs) verb->description("objects: " + verb_objects[name]);
  } catch (const CLI::ConstructionError& e) {
    err << "heddlectl: internal error building the command line: " << e.what() << "\n";
    return kExitFailure;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion&) {
    out << "heddlectl " << kVersion << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    // --help arrives here too, as an "error" with exit code 0.
    if (e.get_exit_code() == 0) return app.exit(e, out, err);
    // A verb without a known object: name what it accepts rather than CLI11's generic text.
    for (const auto& [name, verb] : verbs) {
      if (!verb->parsed()) continue;
      bool has_object = false;
      for (const auto& [leaf, cmd] : leaves) has_object |= leaf->parsed();
      if (has_object) break;
      const std::vector<std::string> extras = app.remaining(/*recurse=*/true);
      err << "heddlectl: "
          << (extras.empty() ? "missing object" : "unknown object '" + extras.front() + "'")
          << " for '" << name << "'; expected one of: " << verb_objects[name]
          << "\nRun 'heddlectl --help' for more information.\n";
      return kExitUsage;
    }
    // An object whose settings are subcommands (`set storm levels ...`) without a known one.
    for (const auto& [leaf, cmd] : leaves) {
      if (!leaf->parsed()) continue;
      const std::vector<CLI::App*> subs = leaf->get_subcommands([](CLI::App*) { return true; });
      bool has_sub = subs.empty();
      std::string names;
      for (CLI::App* sub : subs) {
        has_sub |= sub->parsed();
        names += (names.empty() ? "" : ", ") + sub->get_name();
      }
      if (has_sub) break;
      const std::vector<std::string> extras = app.remaining(/*recurse=*/true);
      err << "heddlectl: "
          << (extras.empty() ? "missing subcommand" : "unknown subcommand '" + extras.front() + "'")
          << " for '" << cmd->verb << " " << cmd->object << "'; expected one of: " << names
          << "\nRun 'heddlectl " << cmd->verb << " " << cmd->object
          << " --help' for more information.\n";
      return kExitUsage;
    }
    bool any_verb = false;
    for (const auto& [name, verb] : verbs) any_verb |= verb->parsed();
    if (!any_verb) {
      const std::vector<std::string> extras = app.remaining(/*recurse=*/true);
      std::string known;
      for (const auto& [name, verb] : verbs) known += (known.empty() ? "" : ", ") + name;
      err << "heddlectl: "
          << (extras.empty() ? "missing command" : "unknown command '" + extras.front() + "'")
          << "; expected one of: " << known << "\nRun 'heddlectl --help' for more information.\n";
      return kExitUsage;
    }
    app.exit(e, out, err);
    return kExitUsage;
  }

  const Command* command = nullptr;
  for (const auto& [leaf, cmd] : leaves) {
    if (leaf->parsed()) command = cmd;
  }
  if (command == nullptr) {  // require_subcommand makes this unreachable; stay safe anyway
    err << "heddlectl: no command given; see heddlectl --help\n";
    return kExitUsage;
  }

  auto client = ApiClient::Create(options.socket_path, absl::Milliseconds(options.timeout_ms));
  if (!client.ok()) {
    err << "heddlectl: " << client.status().message() << "\n";
    return kExitUsage;  // only bad arguments (path too long, ...) fail here
  }
  CommandContext ctx{**client, options, out};
  absl::Status status;
  try {
    status = command->run(ctx);
  } catch (const std::exception& e) {
    status = absl::InternalError(e.what());
  }
  out.flush();
  if (!status.ok()) {
    err << "heddlectl: " << status.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace heddle::api::cli
