// File: tools/heddlectl/storm_commands.cc
//
// STORM (docs/storm.md): `show storm`, `show qp` and `set storm SETTING VALUE`. A `set` is one
// SetStorm RPC, applied by the daemon as one batch without restart; heddlectl then prints the state
// the daemon answers with, so what is shown is what is in force. Human output is tables; -j prints
// the RPC response unchanged as JSON.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "tools/heddlectl/command.h"
#include "tools/heddlectl/table.h"
#include "tools/heddlectl/units.h"

namespace heddle::api::cli {
namespace {

constexpr int64_t kPcpKeep = -1;

std::string Num(uint64_t v) { return absl::StrCat(v); }

std::string Sizes(const google::protobuf::RepeatedField<uint64_t>& sizes) {
  std::vector<std::string> parts;
  for (uint64_t s : sizes) parts.push_back(FormatSize(s));
  return absl::StrJoin(parts, ", ");
}

std::string Cutoffs(const v1::Storm& s) {
  const std::string in_use = s.cutoffs().empty() ? "none (one level)" : Sizes(s.cutoffs());
  if (!s.auto_cutoffs()) return in_use;
  return absl::StrCat("auto: ", in_use, " (every ", s.auto_interval_ms(), " ms, ",
                      s.auto_publications(), " published)");
}

std::string Levels(const v1::Storm& s) {
  if (s.levels() <= 1) return Num(s.levels());
  return absl::StrCat(s.levels(), " (level ", s.levels() - 1, " served first)");
}

std::string Backlog(const v1::Storm& s) {
  if (s.backlog_source() == "none" || s.backlog_source().empty()) return "none";
  return absl::StrCat(s.backlog_source(), ", capped at ", FormatSize(s.backlog_max()));
}

// storm.unknown_size and the level it gives a request of unknown size in per-message mode.
std::string UnknownSize(const v1::Storm& s) {
  constexpr uint64_t kLowest = 4294967295u;  // storm::kUnknownSizeLowest
  const std::string scope = s.mode() == "per-packet" ? " in per-message mode" : "";
  if (s.unknown_size() == 0) return "-";  // a daemon that does not report it
  if (s.unknown_size() >= kLowest) return absl::StrCat("lowest (level 0", scope, ")");
  uint64_t above = 0;
  for (uint64_t c : s.cutoffs()) above += s.unknown_size() > c ? 1 : 0;
  const uint64_t top = s.levels() > 0 ? s.levels() - 1 : 0;
  return absl::StrCat(FormatSize(s.unknown_size()), " (level ", top - std::min(above, top), scope,
                      ")");
}

std::string HostShim(const v1::Storm& s) {
  std::string out = absl::StrCat(s.host().tables(), " tables, ", s.host().qps(), " QPs, ",
                                 s.host().backlog_hits(), " backlog hits");
  if (s.backlog_source() == "host") {
    absl::StrAppend(&out, ", ", s.host().pairs(), " pairs");
    if (s.host().ambiguous_pairs() > 0) {
      absl::StrAppend(&out, " (", s.host().ambiguous_pairs(), " ambiguous)");
    }
  }
  return out;
}

// One row per port: how it serves the levels, and with DCB which TC and TX queues each level
// leaves on (highest level first); with a fall-back, why.
std::string Egress(const v1::Storm& s) {
  Table t(
      {{"PORT"}, {"EGRESS"}, {"CONFIGURED"}, {"TCS", Table::kRight}, {"LEVEL->TC (TX QUEUES)"}});
  for (const v1::StormEgressPort& p : s.egress_ports()) {
    std::string map;
    if (p.mode() == "dcb") {
      std::vector<std::string> parts;
      for (int i = p.levels_size() - 1; i >= 0; --i) {
        const v1::StormEgressLevel& l = p.levels(i);
        std::string queues = Num(l.first_queue());
        if (l.queues() > 1) absl::StrAppend(&queues, "-", l.first_queue() + l.queues() - 1);
        parts.push_back(absl::StrCat(l.level(), "->", l.tc(), " (", queues, ")"));
      }
      map = absl::StrJoin(parts, ", ");
    } else if (!p.fallback().empty()) {
      map = absl::StrCat("fell back: ", p.fallback());
    }
    t.AddRow({p.port(), p.mode(), p.configured(),
              p.mode() == "dcb" ? Num(p.traffic_classes()) : "-", map});
  }
  return t.Render();
}

// The settings, then one row per level, highest (served first) on top.
std::string Summary(const v1::Storm& s) {
  if (!s.enabled()) return "storm: disabled\n";
  std::string out = RenderKeyValues({
      {"mode", s.mode()},
      {"levels", Levels(s)},
      {"cutoffs", Cutoffs(s)},
      {"control level", Num(s.control_level())},
      {"beta", absl::StrFormat("%g", s.beta())},
      {"unknown size", UnknownSize(s)},
      {"backlog", Backlog(s)},
      {"host shim", HostShim(s)},
      {"generation", Num(s.generation())},
  });
  std::vector<const v1::StormLevel*> levels;
  for (const v1::StormLevel& l : s.per_level()) levels.push_back(&l);
  std::stable_sort(
      levels.begin(), levels.end(),
      [](const v1::StormLevel* a, const v1::StormLevel* b) { return a->level() > b->level(); });
  Table t({{"LEVEL", Table::kRight},
           {"DSCP", Table::kRight},
           {"PCP", Table::kRight},
           {"REMAINING"},
           {"CONTROL"},
           {"TAGGED-PKTS", Table::kRight},
           {"TAGGED-BYTES", Table::kRight},
           {"EGRESS-TX", Table::kRight},
           {"EGRESS-DROPS", Table::kRight},
           {"QUEUED", Table::kRight}});
  for (const v1::StormLevel* l : levels) {
    t.AddRow({Num(l->level()), Num(l->dscp()), l->pcp() < 0 ? "keep" : Num(l->pcp()),
              FormatRange(l->r_min(), l->r_max()), l->control() ? "yes" : "",
              Num(l->tagged_packets()), Num(l->tagged_bytes()), Num(l->egress_tx_packets()),
              Num(l->egress_drops()), Num(l->egress_queue_depth())});
  }
  absl::StrAppend(&out, "\n", t.Render());
  if (s.egress_ports_size() > 0) absl::StrAppend(&out, "\nEgress\n", Egress(s));
  return out;
}

std::string Counters(const v1::Storm& s) {
  Table table({{"QPS-LIVE", Table::kRight},
               {"CAPACITY", Table::kRight},
               {"TABLE-FULL", Table::kRight},
               {"EVICTED-IDLE", Table::kRight},
               {"EVICTED-ON-INSERT", Table::kRight}});
  const v1::StormQpTable& q = s.qp_table();
  table.AddRow({Num(q.live()), Num(q.capacity()), Num(q.table_full()), Num(q.evicted_idle()),
                Num(q.evicted_on_insert())});
  Table tracker({{"STARTED", Table::kRight},
                 {"COMPLETED", Table::kRight},
                 {"ORPHANS", Table::kRight},
                 {"ABANDONED", Table::kRight},
                 {"DUPLICATES", Table::kRight},
                 {"PSN-JUMPS", Table::kRight},
                 {"BOGUS-LENGTH", Table::kRight},
                 {"OVERRUN", Table::kRight}});
  const v1::StormTracker& r = s.tracker();
  tracker.AddRow({Num(r.requests_started()), Num(r.requests_completed()), Num(r.orphans()),
                  Num(r.abandoned()), Num(r.duplicates()), Num(r.psn_jumps()),
                  Num(r.bogus_length()), Num(r.overrun())});
  std::string out = absl::StrCat("\nQP table, all workers\n", table.Render(),
                                 "\nRequests tracked\n", tracker.Render());
  // The response join runs with the verbs shim only (docs/storm.md §6.1).
  if (s.backlog_source() == "host") {
    Table join({{"LOCAL", Table::kRight},
                {"REMOTE", Table::kRight},
                {"NO-PAIR", Table::kRight},
                {"NO-ENTRY", Table::kRight},
                {"RING-FULL", Table::kRight},
                {"MALFORMED", Table::kRight},
                {"ADVANCED", Table::kRight},
                {"OLD", Table::kRight},
                {"AHEAD", Table::kRight},
                {"FABRIC-GUARDED", Table::kRight}});
    const v1::StormJoin& j = s.join();
    join.AddRow({Num(j.joined_local()), Num(j.joined_remote()), Num(j.no_pair()), Num(j.no_entry()),
                 Num(j.ring_full()), Num(j.malformed()), Num(j.acks_advanced()), Num(j.acks_old()),
                 Num(j.acks_ahead()), Num(j.fabric_guarded())});
    absl::StrAppend(&out, "\nResponses joined to their requests\n", join.Render());
  }
  // READ responses the host sends as responder (docs/storm.md §6.6): tracked with or without the
  // shim; the READ requests are joined to them with it only.
  const v1::StormReadResponses& rr = s.read_responses();
  Table streams({{"SIZED", Table::kRight},
                 {"UNKNOWN", Table::kRight},
                 {"ORPHANS", Table::kRight},
                 {"LATE", Table::kRight},
                 {"DUPLICATES", Table::kRight},
                 {"PSN-JUMPS", Table::kRight},
                 {"ABANDONED", Table::kRight},
                 {"OVERRUN", Table::kRight},
                 {"MALFORMED", Table::kRight},
                 {"WINDOW-GUARDED", Table::kRight}});
  streams.AddRow({Num(rr.sized()), Num(rr.unknown()), Num(rr.orphans()), Num(rr.late()),
                  Num(rr.duplicates()), Num(rr.psn_jumps()), Num(rr.abandoned()), Num(rr.overrun()),
                  Num(rr.malformed()), Num(rr.window_guarded())});
  Table read_table({{"STREAMS-LIVE", Table::kRight},
                    {"CAPACITY", Table::kRight},
                    {"TABLE-FULL", Table::kRight},
                    {"EVICTED", Table::kRight}});
  read_table.AddRow({Num(rr.live()), Num(rr.capacity()), Num(rr.table_full()), Num(rr.evicted())});
  absl::StrAppend(&out, "\nREAD responses sent as responder\n", streams.Render(),
                  "\nREAD stream table, all workers\n", read_table.Render());
  if (s.backlog_source() == "host") {
    Table reads({{"LOCAL", Table::kRight},
                 {"REMOTE", Table::kRight},
                 {"NO-PAIR", Table::kRight},
                 {"NO-ENTRY", Table::kRight},
                 {"RING-FULL", Table::kRight},
                 {"MALFORMED", Table::kRight},
                 {"PENDING-FULL", Table::kRight},
                 {"STALE", Table::kRight},
                 {"TOO-LATE", Table::kRight}});
    reads.AddRow({Num(rr.requests_local()), Num(rr.requests_remote()), Num(rr.requests_no_pair()),
                  Num(rr.requests_no_entry()), Num(rr.requests_ring_full()),
                  Num(rr.requests_malformed()), Num(rr.requests_pending_full()),
                  Num(rr.requests_stale()), Num(rr.requests_too_late())});
    absl::StrAppend(&out, "\nREAD requests joined to their responses\n", reads.Render());
  }
  if (!s.host().errors().empty()) {
    absl::StrAppend(&out, "\nhost shim tables refused:\n");
    for (const std::string& e : s.host().errors()) absl::StrAppend(&out, "  ", e, "\n");
  }
  return out;
}

absl::Status ShowStorm(CommandContext& ctx) {
  HEDDLE_ASSIGN_OR_RETURN(v1::GetStormResponse r, ctx.client.GetStorm());
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << Summary(r.storm());
  if (r.storm().enabled()) ctx.out << Counters(r.storm());
  return absl::OkStatus();
}

struct QpArgs {
  uint32_t top = 20;
  std::string sort = "backlog";
};

absl::Status ShowQp(CommandContext& ctx, const QpArgs& args) {
  HEDDLE_ASSIGN_OR_RETURN(v1::ListQpsResponse r, ctx.client.ListQps(args.top, args.sort));
  if (ctx.options.json) return PrintJson(r, ctx.out);
  if (r.qps().empty()) {
    ctx.out << "no QPs tracked\n";
    return absl::OkStatus();
  }
  Table t({{"WORKER", Table::kRight},
           {"QPN", Table::kRight},
           {"DIR"},
           {"KIND"},
           {"LEVEL", Table::kRight},
           {"DST"},
           {"SIZE", Table::kRight},
           {"SENT", Table::kRight},
           {"REMAINING", Table::kRight},
           {"BACKLOG", Table::kRight},
           {"HELD", Table::kRight},
           {"HOST-BACKLOG", Table::kRight},
           {"COMPLETED", Table::kRight},
           {"ACKED", Table::kRight},
           {"UNACKED", Table::kRight},
           {"IDLE-MS", Table::kRight}});
  for (const v1::Qp& q : r.qps()) {
    // No request in progress: nothing to size. In progress with an unknown size (a SEND before
    // its last packet): "?".
    const std::string unknown = q.in_progress() ? "?" : "-";
    t.AddRow({Num(q.worker()), Num(q.qpn()), q.direction(), q.kind(), Num(q.level()), q.dst(),
              q.size_known() ? Num(q.size()) : unknown, q.in_progress() ? Num(q.sent()) : "-",
              q.size_known() ? Num(q.remaining()) : unknown, Num(q.backlog_bytes()),
              Num(q.egress_held()), Num(q.host_backlog()), Num(q.completed()),
              q.has_acked_psn() ? Num(q.acked_psn()) : "-",
              q.has_unacked() ? Num(q.unacked()) : "-", Num(q.idle_ms())});
  }
  ctx.out << t.Render();
  return absl::OkStatus();
}

// `set storm SETTING ...`: each setting is a subcommand; the strings are checked at parse time
// (a bad value is a usage error, exit 2) and converted again in Request().
struct SetArgs {
  CLI::App* levels_cmd = nullptr;
  CLI::App* cutoffs_cmd = nullptr;
  CLI::App* mode_cmd = nullptr;
  CLI::App* dscp_cmd = nullptr;
  CLI::App* pcp_cmd = nullptr;
  CLI::App* control_level_cmd = nullptr;
  CLI::App* beta_cmd = nullptr;
  CLI::App* unknown_size_cmd = nullptr;

  uint32_t levels = 0;
  std::string cutoffs;  // "a,b,..." | "auto"; empty when not given
  bool cutoffs_given = false;
  std::string mode;
  std::string dscp;
  bool dscp_given = false;
  std::string pcp;
  bool pcp_given = false;
  uint32_t control_level = 0;
  bool control_level_given = false;
  double beta = 0;
  std::string unknown_size;  // SIZE | lowest
};

std::string Check(const absl::Status& status) {
  return status.ok() ? std::string() : std::string(status.message());
}

CLI::Validator CutoffsValidator() {
  return CLI::Validator(
      [](std::string& value) {
        if (value == "auto") return std::string();
        return Check(ParseSizeList(value).status());
      },
      "SIZES|auto", "cutoffs");
}

CLI::Validator BetaValidator() {
  return CLI::Validator(
      [](std::string& value) {
        double beta = 0;
        if (absl::SimpleAtod(value, &beta) && std::isfinite(beta) && beta >= 0) {
          return std::string();
        }
        return absl::StrCat("\"", value, "\" is not a finite number >= 0");
      },
      "NUMBER", "beta");
}

CLI::Validator UnknownSizeValidator() {
  return CLI::Validator(
      [](std::string& value) {
        if (value == "lowest") return std::string();
        absl::StatusOr<uint64_t> size = ParseSize(value);
        if (!size.ok()) return Check(size.status());
        if (*size < 1 || *size > 4294967295u) {
          return absl::StrCat("\"", value,
                              "\" is out of range; use 1 to 4294967295 bytes or lowest");
        }
        return std::string();
      },
      "SIZE|lowest", "unknown-size");
}

CLI::Validator LevelsValidator() {
  return CLI::Validator(
      [](std::string& value) {
        uint32_t levels = 0;
        if (absl::SimpleAtoi(value, &levels) && levels >= 1) return std::string();
        return absl::StrCat("\"", value, "\" is not a number of levels (1 or more)");
      },
      "K", "levels");
}

CLI::Validator DscpValidator() {
  return CLI::Validator(
      [](std::string& value) { return Check(ParseIntList(value, 0, 63, "dscp").status()); }, "LIST",
      "dscp");
}

CLI::Validator PcpValidator() {
  return CLI::Validator(
      [](std::string& value) {
        return Check(ParseIntList(value, -1, 7, "pcp", &kPcpKeep).status());
      },
      "LIST", "pcp");
}

void AddSetOptions(CLI::App& storm, const std::shared_ptr<SetArgs>& args) {
  storm.require_subcommand(1);
  auto setting = [&storm](const std::string& name, const std::string& help) {
    CLI::App* sub = storm.add_subcommand(name, help);
    sub->fallthrough();  // -j and friends may follow the value
    return sub;
  };

  args->levels_cmd = setting("levels", "number of levels K (the daemon allows 1..8)");
  args->levels_cmd->add_option("count", args->levels, "K")->required()->check(LevelsValidator());
  args->levels_cmd
      ->add_option("--cutoffs", args->cutoffs,
                   "K-1 increasing sizes (4K,64K,1M) or auto; one level needs none")
      ->check(CutoffsValidator());
  args->levels_cmd->add_option("--dscp", args->dscp, "K DSCP values, level 0 first")
      ->check(DscpValidator());
  args->levels_cmd
      ->add_option("--pcp", args->pcp, "K VLAN PCP values, level 0 first; -1 or keep: unchanged")
      ->check(PcpValidator());
  args->levels_cmd->add_option("--control-level", args->control_level,
                               "level of ACK/NAK, CNP, READ requests, atomic ACKs");

  args->cutoffs_cmd = setting("cutoffs", "remaining-size cutoffs c_1..c_{K-1}, or auto");
  args->cutoffs_cmd
      ->add_option("sizes", args->cutoffs, "4K,64K,1M (bytes, K/KiB, M/MiB, G/GiB) or auto")
      ->required()
      ->check(CutoffsValidator());

  args->mode_cmd = setting("mode", "per-message or per-packet");
  args->mode_cmd->add_option("mode", args->mode, "per-message | per-packet")
      ->required()
      ->check(CLI::IsMember({"per-message", "per-packet"}));

  args->dscp_cmd = setting("dscp", "DSCP per level, level 0 first");
  args->dscp_cmd->add_option("values", args->dscp, "K values 0..63, e.g. 0,10,18,26")
      ->required()
      ->check(DscpValidator());

  args->pcp_cmd = setting("pcp", "VLAN PCP per level, level 0 first");
  args->pcp_cmd->add_option("values", args->pcp, "K values 0..7, -1 or keep: unchanged")
      ->required()
      ->check(PcpValidator());

  args->control_level_cmd = setting("control-level", "level of ACK/NAK, CNP, READ requests");
  args->control_level_cmd->add_option("level", args->control_level, "0..K-1")->required();

  args->beta_cmd = setting("beta", "weight of the QP backlog in the level formula");
  args->beta_cmd->add_option("beta", args->beta, "finite, >= 0; 0 ignores backlog")
      ->required()
      ->check(BetaValidator());

  args->unknown_size_cmd =
      setting("unknown-size", "per-message level of a SEND or READ response of unknown size");
  args->unknown_size_cmd
      ->add_option("size", args->unknown_size,
                   "the size it is levelled as (256K, 1M, ...) or lowest (above every cutoff)")
      ->required()
      ->check(UnknownSizeValidator());
}

// The options' presence, read after parsing.
void NoteGiven(SetArgs& args) {
  auto given = [](CLI::App* app, const std::string& name) {
    const CLI::Option* o = app->get_option_no_throw(name);
    return o != nullptr && o->count() > 0;
  };
  if (args.levels_cmd->parsed()) {
    args.cutoffs_given = given(args.levels_cmd, "--cutoffs");
    args.dscp_given = given(args.levels_cmd, "--dscp");
    args.pcp_given = given(args.levels_cmd, "--pcp");
    args.control_level_given = given(args.levels_cmd, "--control-level");
  }
  if (args.cutoffs_cmd->parsed()) args.cutoffs_given = true;
  if (args.dscp_cmd->parsed()) args.dscp_given = true;
  if (args.pcp_cmd->parsed()) args.pcp_given = true;
  if (args.control_level_cmd->parsed()) args.control_level_given = true;
}

absl::StatusOr<v1::SetStormRequest> Request(SetArgs& args) {
  NoteGiven(args);
  v1::SetStormRequest req;
  if (args.levels_cmd->parsed()) {
    req.set_levels(args.levels);
    // One level has no cutoffs; say so rather than make the operator type an empty list.
    if (args.levels == 1 && !args.cutoffs_given) req.mutable_cutoffs();
  }
  if (args.cutoffs_given) {
    if (args.cutoffs == "auto") {
      req.set_cutoffs_auto(true);
    } else {
      HEDDLE_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, ParseSizeList(args.cutoffs));
      v1::UInt64List* list = req.mutable_cutoffs();  // present even when empty
      for (uint64_t s : sizes) list->add_values(s);
    }
  }
  if (args.mode_cmd->parsed()) req.set_mode(args.mode);
  if (args.dscp_given) {
    HEDDLE_ASSIGN_OR_RETURN(std::vector<int64_t> dscp, ParseIntList(args.dscp, 0, 63, "dscp"));
    v1::UInt32List* list = req.mutable_dscp();
    for (int64_t d : dscp) list->add_values(static_cast<uint32_t>(d));
  }
  if (args.pcp_given) {
    HEDDLE_ASSIGN_OR_RETURN(std::vector<int64_t> pcp,
                            ParseIntList(args.pcp, -1, 7, "pcp", &kPcpKeep));
    v1::Int32List* list = req.mutable_pcp();
    for (int64_t p : pcp) list->add_values(static_cast<int32_t>(p));
  }
  if (args.control_level_given) req.set_control_level(args.control_level);
  if (args.beta_cmd->parsed()) req.set_beta(args.beta);
  if (args.unknown_size_cmd->parsed()) {
    if (args.unknown_size == "lowest") {
      req.set_unknown_size(4294967295u);  // storm::kUnknownSizeLowest
    } else {
      HEDDLE_ASSIGN_OR_RETURN(uint64_t size, ParseSize(args.unknown_size));
      req.set_unknown_size(size);
    }
  }
  return req;
}

absl::Status SetStorm(CommandContext& ctx, SetArgs& args) {
  HEDDLE_ASSIGN_OR_RETURN(v1::SetStormRequest req, Request(args));
  HEDDLE_ASSIGN_OR_RETURN(v1::SetStormResponse r, ctx.client.SetStorm(req));
  if (ctx.options.json) return PrintJson(r, ctx.out);
  ctx.out << Summary(r.storm());
  return absl::OkStatus();
}

}  // namespace

void RegisterStormCommands(CommandRegistry& registry) {
  registry.Add({.verb = "show",
                .object = "storm",
                .help = "STORM levels, cutoffs, mode, per-level counters, QP table counters",
                .run = ShowStorm});
  auto qp = std::make_shared<QpArgs>();
  registry.Add({.verb = "show",
                .object = "qp",
                .help = "tracked QPs with the largest backlog, remaining size or idle time",
                .add_options =
                    [qp](CLI::App& app) {
                      app.add_option("--top", qp->top, "how many QPs")
                          ->check(CLI::Range(1, 1000))
                          ->capture_default_str();
                      app.add_option("--sort", qp->sort, "largest first by")
                          ->check(CLI::IsMember({"backlog", "remaining", "idle"}))
                          ->capture_default_str();
                    },
                .run = [qp](CommandContext& ctx) { return ShowQp(ctx, *qp); }});
  auto set = std::make_shared<SetArgs>();
  registry.Add({.verb = "set",
                .object = "storm",
                .help = "change STORM levels, cutoffs, mode, dscp, pcp, control-level, beta or "
                        "unknown-size at run time",
                .add_options = [set](CLI::App& app) { AddSetOptions(app, set); },
                .run = [set](CommandContext& ctx) { return SetStorm(ctx, *set); }});
}

}  // namespace heddle::api::cli
