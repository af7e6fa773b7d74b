// File: tools/heddlectl/lb_commands.cc
//
// PIN and the load balancer (docs/pin.md): `show lb` and `set lb SETTING VALUE`. A `set` is one
// SetLb RPC, published by the daemon as one change without restart or a moved message; heddlectl
// then prints the state the daemon answers with. Human output is tables; -j prints the RPC
// response unchanged as JSON.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "tools/heddlectl/command.h"
#include "tools/heddlectl/table.h"
#include "tools/heddlectl/units.h"

namespace heddle::api::cli {
namespace {

std::string Num(uint64_t v) { return absl::StrCat(v); }

std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return absl::StrFormat("%.1f %%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string Threshold(const v1::Lb& lb) {
  if (!lb.pin()) return "off (every message sprayed)";
  return absl::StrCat(FormatSize(lb.threshold_bytes()),
                      lb.threshold_auto() ? " (auto: one bandwidth-delay product)" : "");
}

std::string Summary(const v1::Lb& lb) {
  if (!lb.enabled()) return "lb: disabled\n";
  const uint64_t flows = lb.pinned_flows() + lb.sprayed_flows();
  const uint64_t bytes = lb.pinned_bytes() + lb.sprayed_bytes();
  std::string out = RenderKeyValues({
      {"balancer", lb.balancer()},
      {"pin threshold", Threshold(lb)},
      {"pin policy", lb.pin_policy()},
      {"flow unit", lb.flow_unit()},
      {"crossing", lb.crossing()},
      {"entropy", lb.entropy()},
      {"feedback join",
       lb.feedback_join() ? "on (verbs shim pair index)" : "off (no host index: REPS explores)"},
      {"flows", absl::StrCat(lb.flows_live(), " live of ", lb.flow_capacity(), " entries")},
      {"generation", Num(lb.generation())},
  });
  Table t({{"", Table::kLeft},
           {"FLOWS", Table::kRight},
           {"SHARE", Table::kRight},
           {"PACKETS", Table::kRight},
           {"BYTES", Table::kRight},
           {"SHARE", Table::kRight}});
  t.AddRow({"pinned", Num(lb.pinned_flows()), Percent(lb.pinned_flows(), flows),
            Num(lb.pinned_packets()), Num(lb.pinned_bytes()), Percent(lb.pinned_bytes(), bytes)});
  t.AddRow({"sprayed", Num(lb.sprayed_flows()), Percent(lb.sprayed_flows(), flows),
            Num(lb.sprayed_packets()), Num(lb.sprayed_bytes()),
            Percent(lb.sprayed_bytes(), bytes)});
  absl::StrAppend(&out, "\n", t.Render());
  return out;
}

std::string Paths(const v1::Lb& lb) {
  std::string out;
  for (const v1::LbPathSet& s : lb.sets()) {
    uint64_t total = 0;
    for (const v1::LbPath& p : s.paths()) total += p.bytes();
    absl::StrAppend(&out, "\npath set ", s.set(), " (", s.prefix(), "): ", s.paths_size(),
                    " paths, Jain's index ",
                    total == 0 ? std::string("-") : absl::StrFormat("%.4f", s.jain_index()), "\n");
    Table t({{"PATH", Table::kRight},
             {"PORT"},
             {"ENTROPY", Table::kRight},
             {"PACKETS", Table::kRight},
             {"BYTES", Table::kRight},
             {"SHARE", Table::kRight}});
    for (const v1::LbPath& p : s.paths()) {
      t.AddRow({Num(p.index()), p.port(), absl::StrFormat("0x%04x", p.entropy()), Num(p.packets()),
                Num(p.bytes()), Percent(p.bytes(), total)});
    }
    absl::StrAppend(&out, t.Render());
  }
  return out;
}

std::string Counters(const v1::Lb& lb) {
  Table t({{"COUNTER"}, {"VALUE", Table::kRight}, {"MEANING"}});
  for (const v1::LbCounter& c : lb.counters()) {
    if (c.value() == 0) continue;
    t.AddRow({c.name(), Num(c.value()), c.description()});
  }
  return absl::StrCat("\ncounters, all workers (zeros hidden; -j shows every one)\n", t.Render());
}

absl::Status ShowLb(CommandContext& ctx) {
  HEDDLE_ASSIGN_OR_RETURN(v1::GetLbResponse r, ctx.client.GetLb());
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << Summary(r.lb());
  if (r.lb().enabled()) ctx.out << Paths(r.lb()) << Counters(r.lb());
  return absl::OkStatus();
}

// `set lb SETTING VALUE`: each setting is a subcommand; values are checked at parse time (a bad
// value is a usage error, exit 2).
struct SetArgs {
  CLI::App* balancer_cmd = nullptr;
  CLI::App* threshold_cmd = nullptr;
  CLI::App* policy_cmd = nullptr;
  CLI::App* pin_cmd = nullptr;
  std::string balancer;
  std::string threshold;  // a size or "auto"
  std::string policy;
  std::string pin;  // "on" | "off"
};

CLI::Validator ThresholdValidator() {
  return CLI::Validator(
      [](std::string& value) {
        if (value == "auto") return std::string();
        absl::StatusOr<uint64_t> v = ParseSize(value);
        if (!v.ok()) return std::string(v.status().message());
        if (*v == 0) return std::string("a threshold of 0 bytes pins nothing; use pin off");
        return std::string();
      },
      "SIZE|auto", "threshold");
}

void AddSetOptions(CLI::App& lb, const std::shared_ptr<SetArgs>& args) {
  lb.require_subcommand(1);
  auto setting = [&lb](const std::string& name, const std::string& help) {
    CLI::App* sub = lb.add_subcommand(name, help);
    sub->fallthrough();  // -j and friends may follow the value
    return sub;
  };
  args->balancer_cmd = setting("balancer", "the balancer that sprays long messages");
  args->balancer_cmd
      ->add_option("kind", args->balancer, "ecmp | rps | round-robin | flowlet | reps | adaptive")
      ->required()
      ->check(CLI::IsMember({"ecmp", "rps", "round-robin", "flowlet", "reps", "adaptive"}));
  args->threshold_cmd = setting("pin-threshold", "messages up to this size are pinned");
  args->threshold_cmd
      ->add_option("size", args->threshold,
                   "bytes (K/KiB, M/MiB, G/GiB), or auto: one bandwidth-delay product")
      ->required()
      ->check(ThresholdValidator());
  args->policy_cmd = setting("pin-policy", "how a pinned message's path is chosen");
  args->policy_cmd->add_option("policy", args->policy, "hash | least-loaded | balancer")
      ->required()
      ->check(CLI::IsMember({"hash", "least-loaded", "balancer"}));
  args->pin_cmd = setting("pin", "pin short messages (on) or spray every message (off)");
  args->pin_cmd->add_option("state", args->pin, "on | off")
      ->required()
      ->check(CLI::IsMember({"on", "off"}));
}

absl::StatusOr<v1::SetLbRequest> Request(const SetArgs& args) {
  v1::SetLbRequest req;
  if (args.balancer_cmd->parsed()) req.set_balancer(args.balancer);
  if (args.threshold_cmd->parsed()) {
    if (args.threshold == "auto") {
      req.set_threshold_auto(true);
    } else {
      HEDDLE_ASSIGN_OR_RETURN(uint64_t bytes, ParseSize(args.threshold));
      req.set_threshold_bytes(bytes);
    }
  }
  if (args.policy_cmd->parsed()) req.set_pin_policy(args.policy);
  if (args.pin_cmd->parsed()) req.set_pin(args.pin == "on");
  return req;
}

absl::Status SetLb(CommandContext& ctx, const SetArgs& args) {
  HEDDLE_ASSIGN_OR_RETURN(v1::SetLbRequest req, Request(args));
  HEDDLE_ASSIGN_OR_RETURN(v1::SetLbResponse r, ctx.client.SetLb(req));
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << Summary(r.lb());
  return absl::OkStatus();
}

}  // namespace

void RegisterLbCommands(CommandRegistry& registry) {
  registry.Add({.verb = "show",
                .object = "lb",
                .help = "PIN and the load balancer: threshold, pinned vs sprayed, per-path bytes",
                .run = ShowLb});
  auto set = std::make_shared<SetArgs>();
  registry.Add({.verb = "set",
                .object = "lb",
                .help = "change the balancer, pin-threshold, pin-policy or pin at run time",
                .add_options = [set](CLI::App& app) { AddSetOptions(app, set); },
                .run = [set](CommandContext& ctx) { return SetLb(ctx, *set); }});
}

}  // namespace heddle::api::cli
