// File: tools/heddlectl/artifact_commands.cc
//
// Nüwa forwarding artifacts (docs/nuwa-install.md): `artifact install FILE [--dry-run]`,
// `artifact show`, `artifact diff FILE` and `artifact rollback [--to ID]`. heddlectl reads the
// file and sends its bytes, so heddled needs no access to the operator's files; the daemon checks
// everything and answers with what is in force. Human output is tables; -j prints the RPC response
// unchanged as JSON.
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "dataplane/fwd/artifact.h"
#include "tools/heddlectl/command.h"
#include "tools/heddlectl/table.h"

namespace heddle::api::cli {
namespace {

// What the daemon takes (control/api/server.cc); a larger file is refused before sending.
// The file's bytes as the RPC carries them.
absl::StatusOr<std::string> ReadArtifact(const std::string& path) {
  HEDDLE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, fwd::ReadArtifactBytes(path));
  return std::string(bytes.begin(), bytes.end());
}

std::string Time(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string Checksum(uint32_t c) { return absl::StrFormat("%08x", c); }

std::string Summary(const v1::Artifact& a) {
  return RenderKeyValues({
      {"artifact", a.id() == 0 ? std::string("(not installed)") : absl::StrCat("#", a.id())},
      {"source", a.source()},
      {"installed", Time(a.installed_unix_ms())},
      {"fabric", absl::StrFormat("%s (digest %016x)", a.fabric(), a.fabric_digest())},
      {"node", a.node()},
      {"format", absl::StrFormat("version %d, %d bytes, checksum %s", a.version(), a.bytes(),
                                 Checksum(a.checksum()))},
      {"shape", a.shape()},
      {"hash", a.hash()},
      {"policy", absl::StrCat("max ", a.max_paths(), " paths", a.rail_local() ? ", rail-local" : "",
                              ", ", a.classes(), " destination class(es)")},
      {"exceptions",
       absl::StrCat(a.node_masks(), " node mask(s), ", a.overrides(), " override(s)")},
      {"path sets", absl::StrCat(a.path_sets(), " over ", a.prefixes(), " prefix(es); ",
                                 a.no_path(), " prefix(es) without a path")},
  });
}

absl::Status Install(CommandContext& ctx, const std::string& file, bool dry_run) {
  HEDDLE_ASSIGN_OR_RETURN(std::string bytes, ReadArtifact(file));
  v1::InstallArtifactRequest req;
  req.set_artifact(std::move(bytes));
  req.set_source(file);
  req.set_dry_run(dry_run);
  HEDDLE_ASSIGN_OR_RETURN(v1::InstallArtifactResponse r, ctx.client.InstallArtifact(req));
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << (dry_run ? absl::StrCat("dry run: ", file, " passes every check; not installed\n")
                      : absl::StrCat("installed ", file, " as artifact #", r.artifact().id(), "\n"))
          << Summary(r.artifact());
  return absl::OkStatus();
}

absl::Status Show(CommandContext& ctx) {
  HEDDLE_ASSIGN_OR_RETURN(v1::GetArtifactResponse r, ctx.client.GetArtifact());
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << RenderKeyValues({
      {"node", r.node()},
      {"fabric", r.fabric().empty() ? std::string("any (fwd.fabric not set)") : r.fabric()},
      {"publications", absl::StrCat(r.generation(), " (", r.installs(), " install(s), ",
                                    r.rollbacks(), " rollback(s), ", r.rejected(), " refused)")},
  });
  if (!r.has_installed()) {
    ctx.out << "\nno artifact installed: path sets come from lb.paths (or none)\n";
    return absl::OkStatus();
  }
  ctx.out << "\n" << Summary(r.installed());
  if (r.history_size() == 0) return absl::OkStatus();
  Table t({{"ID", Table::kRight},
           {"INSTALLED"},
           {"SOURCE"},
           {"FABRIC"},
           {"CHECKSUM"},
           {"PATH SETS", Table::kRight}});
  for (const v1::Artifact& a : r.history()) {
    t.AddRow({absl::StrCat(a.id()), Time(a.installed_unix_ms()), a.source(), a.fabric(),
              Checksum(a.checksum()), absl::StrCat(a.path_sets())});
  }
  ctx.out << "\nearlier artifacts (heddlectl artifact rollback [--to ID])\n" << t.Render();
  return absl::OkStatus();
}

absl::Status Diff(CommandContext& ctx, const std::string& file) {
  HEDDLE_ASSIGN_OR_RETURN(std::string bytes, ReadArtifact(file));
  v1::DiffArtifactRequest req;
  req.set_artifact(std::move(bytes));
  HEDDLE_ASSIGN_OR_RETURN(v1::DiffArtifactResponse r, ctx.client.DiffArtifact(req));
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << "installed #" << r.installed().id() << " (" << r.installed().source() << ") vs "
          << file << "\n";
  if (r.fields_size() == 0 && r.paths_size() == 0) {
    ctx.out << "no difference (" << r.prefixes_same() << " prefix(es) with the same path set)\n";
    return absl::OkStatus();
  }
  if (r.fields_size() > 0) {
    Table t({{"FIELD"}, {"INSTALLED"}, {"GIVEN"}});
    for (const v1::ArtifactFieldDiff& f : r.fields()) {
      t.AddRow({f.field(), f.installed(), f.given()});
    }
    ctx.out << "\n" << t.Render();
  }
  ctx.out << "\npath sets: " << r.paths_size() << " prefix(es) differ, " << r.prefixes_same()
          << " the same\n";
  for (const v1::ArtifactPathDiff& p : r.paths()) {
    ctx.out << "  " << p.prefix() << "\n    - " << p.installed() << "\n    + " << p.given() << "\n";
  }
  return absl::OkStatus();
}

absl::Status Rollback(CommandContext& ctx, std::optional<uint64_t> to) {
  v1::RollbackArtifactRequest req;
  if (to) req.set_to(*to);
  HEDDLE_ASSIGN_OR_RETURN(v1::RollbackArtifactResponse r, ctx.client.RollbackArtifact(req));
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << "rolled back to artifact #" << r.artifact().id() << "\n" << Summary(r.artifact());
  return absl::OkStatus();
}

struct FileArgs {
  std::string file;
  bool dry_run = false;
};

struct RollbackArgs {
  uint64_t to = 0;
  CLI::Option* to_opt = nullptr;
};

}  // namespace

void RegisterArtifactCommands(CommandRegistry& registry) {
  auto install = std::make_shared<FileArgs>();
  registry.Add(
      {.verb = "artifact",
       .object = "install",
       .help = "check a Nüwa host artifact and install it without stopping traffic",
       .add_options =
           [install](CLI::App& app) {
             app.add_option("file", install->file, "the artifact heddle-nuwa compiled")->required();
             app.add_flag("--dry-run", install->dry_run,
                          "run every check and build the table, install nothing");
           },
       .run = [install](
                  CommandContext& ctx) { return Install(ctx, install->file, install->dry_run); }});
  registry.Add({.verb = "artifact",
                .object = "show",
                .help = "the installed artifact and the earlier ones kept for rollback",
                .run = Show});
  auto diff = std::make_shared<FileArgs>();
  registry.Add({.verb = "artifact",
                .object = "diff",
                .help = "what installing an artifact would change: fields and path sets",
                .add_options =
                    [diff](CLI::App& app) {
                      app.add_option("file", diff->file, "the artifact to compare")->required();
                    },
                .run = [diff](CommandContext& ctx) { return Diff(ctx, diff->file); }});
  auto rollback = std::make_shared<RollbackArgs>();
  registry.Add({.verb = "artifact",
                .object = "rollback",
                .help = "go back to the previous artifact, or to an earlier one (--to ID)",
                .add_options =
                    [rollback](CLI::App& app) {
                      rollback->to_opt = app.add_option(
                          "--to", rollback->to, "an artifact id from `heddlectl artifact show`");
                      rollback->to_opt->check(CLI::PositiveNumber);
                    },
                .run =
                    [rollback](CommandContext& ctx) {
                      std::optional<uint64_t> to;
                      if (rollback->to_opt != nullptr && rollback->to_opt->count() > 0) {
                        to = rollback->to;
                      }
                      return Rollback(ctx, to);
                    }});
}

}  // namespace heddle::api::cli
