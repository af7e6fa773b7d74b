#include "tools/heddle-flow/flow_cli.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "control/collective/builtins.h"
#include "control/collective/collective.h"
#include "control/collective/compiler.h"
#include "control/collective/dsl.h"
#include "control/collective/intent_check.h"
#include "control/collective/schedule_io.h"
#include "control/collective/synthesize.h"
#include "control/collective/topology_io.h"
#include "control/collective/verifier.h"
#include "tools/heddle-flow/proposer.h"

namespace heddle::flow::cli {

namespace {

using collective::Collective;
using collective::CompileOptions;
using collective::Diagnostic;
using collective::ExpandOptions;
using collective::Intent;
using collective::Kind;
using collective::Schedule;
using collective::Topology;
using collective::VerifyReport;

// ---------------------------------------------------------------------------------------------
// Small helpers.

std::string JsonStr(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Doubles in JSON: shortest round-trip form; null when not finite.
std::string JsonNum(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

// "12.3 ms", "1.52 s", "850 us": for people.
std::string Seconds(double s) {
  if (!std::isfinite(s)) return "unknown";
  if (s >= 1) return absl::StrFormat("%.4g s", s);
  if (s >= 1e-3) return absl::StrFormat("%.4g ms", s * 1e3);
  return absl::StrFormat("%.4g us", s * 1e6);
}

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the ", what));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<Topology> LoadTopology(const std::string& path) {
  HEDDLE_ASSIGN_OR_RETURN(std::string text, ReadFile(path, "topology"));
  absl::StatusOr<Topology> t = collective::ParseTopology(text);
  if (!t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
  }
  return t;
}

absl::StatusOr<Kind> ParseKind(const std::string& name) {
  std::optional<Kind> k = collective::KindFromName(name);
  if (!k.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--collective ", name,
        ": not a collective (allgather, reducescatter, allreduce, broadcast, reduce, alltoall)"));
  }
  return *k;
}

absl::StatusOr<std::map<std::string, int64_t>> ParseParams(const std::vector<std::string>& kvs) {
  std::map<std::string, int64_t> params;
  for (const std::string& kv : kvs) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    int64_t v = 0;
    if (p.first.empty() || !absl::SimpleAtoi(p.second, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--param ", kv, ": write NAME=INTEGER, e.g. --param G=4"));
    }
    params[p.first] = v;
  }
  return params;
}

// "2,0,1" or rank names "us,eu,asia" (names need a topology): a permutation of 0..N-1.
absl::StatusOr<std::vector<uint32_t>> ParseOrder(const std::string& text, uint32_t n,
                                                 const Topology* t) {
  std::vector<uint32_t> order;
  if (text.empty()) return order;
  std::vector<bool> seen(n, false);
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    uint32_t r = 0;
    bool found = absl::SimpleAtoi(part, &r);
    if (!found && t != nullptr) {
      for (uint32_t i = 0; i < t->ranks; ++i) {
        if (t->nodes[i] == part) {
          r = i;
          found = true;
        }
      }
    }
    if (!found || r >= n) {
      return absl::InvalidArgumentError(absl::StrCat("--order: \"", part, "\" is not a rank (0..",
                                                     n - 1, t ? " or a rank name" : "", ")"));
    }
    if (seen[r]) {
      return absl::InvalidArgumentError(absl::StrCat("--order: rank ", part, " appears twice"));
    }
    seen[r] = true;
    order.push_back(r);
  }
  if (order.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("--order names ", order.size(), " ranks; give all ", n, " exactly once"));
  }
  return order;
}

// A Status from ParseIntent or CheckIntent as a diagnostic when none carries it already: the
// "intent:LINE:COL: " prefix, if any, becomes the position.
Diagnostic DiagnosticFromStatus(const absl::Status& st, const char* code) {
  Diagnostic d;
  d.code = code;
  absl::string_view msg = st.message();
  if (absl::ConsumePrefix(&msg, "intent:")) {
    std::vector<absl::string_view> parts = absl::StrSplit(msg, absl::MaxSplits(':', 2));
    if (parts.size() == 3 && absl::SimpleAtoi(parts[0], &d.line) &&
        absl::SimpleAtoi(parts[1], &d.column)) {
      msg = absl::StripLeadingAsciiWhitespace(parts[2]);
    } else {
      msg = st.message();
    }
  }
  d.message = std::string(msg);
  return d;
}

bool HasError(const std::vector<Diagnostic>& diags) {
  return std::any_of(diags.begin(), diags.end(), [](const Diagnostic& d) { return d.error; });
}

void PrintDiagnosticsText(const std::vector<Diagnostic>& diags, std::ostream& os) {
  for (const Diagnostic& d : diags) {
    os << "intent:" << d.line << ":" << d.column << ": " << (d.error ? "error" : "warning") << ": "
       << d.message << " [" << d.code << "]\n";
  }
}

// Parses, expands and checks intent text: the intent, or every diagnostic (errors and warnings)
// in *diags with at least one error.
absl::StatusOr<Intent> IntentFromText(const std::string& text, const ExpandOptions& eo,
                                      std::vector<Diagnostic>* diags) {
  const size_t before = diags->size();
  absl::StatusOr<Intent> intent = collective::ParseIntent(text, eo, diags);
  if (!intent.ok()) {
    if (!HasError(std::vector<Diagnostic>(diags->begin() + before, diags->end()))) {
      diags->push_back(DiagnosticFromStatus(intent.status(), "invalid"));
    }
    return intent.status();
  }
  if (absl::Status st = collective::CheckIntent(*intent); !st.ok()) {
    diags->push_back(DiagnosticFromStatus(st, "postcondition"));
    return st;
  }
  return intent;
}

std::string CollectiveText(const Collective& c) {
  std::string s = absl::StrFormat("%s over %u ranks (%u chunk%s per rank", KindName(c.kind),
                                  c.ranks, c.chunks_per_rank, c.chunks_per_rank == 1 ? "" : "s");
  if (c.kind == Kind::kBroadcast || c.kind == Kind::kReduce) absl::StrAppend(&s, ", root ", c.root);
  return s + ")";
}

// The summary `compile` and `synthesize` print.
void PrintScheduleSummary(const Schedule& s, const VerifyReport& report, const std::string& output,
                          std::ostream& out) {
  out << "schedule " << s.intent << ": " << CollectiveText(s.collective) << "\n";
  out << "  " << report.ops << " ops, " << report.transfers << " transfers, " << s.pieces
      << " piece" << (s.pieces == 1 ? "" : "s") << " per slot, max scratch " << report.max_scratch
      << "\n";
  out << "  predicted " << Seconds(s.predicted_s) << " for " << s.slot_bytes
      << "-byte slots on topology " << Hex(s.topology_digest) << "\n";
  out << "  digest " << Hex(collective::ScheduleDigest(s)) << ", verified\n";
  if (!output.empty()) out << "  wrote " << output << "\n";
}

std::string ScheduleSummaryJson(const Schedule& s, const VerifyReport& report,
                                const std::string& output) {
  return absl::StrCat(
      "{\"intent\": ", JsonStr(s.intent),
      ", \"collective\": ", JsonStr(KindName(s.collective.kind)),
      ", \"ranks\": ", s.collective.ranks, ", \"chunks_per_rank\": ", s.collective.chunks_per_rank,
      ", \"root\": ", s.collective.root, ", \"pieces\": ", s.pieces, ", \"ops\": ", report.ops,
      ", \"transfers\": ", report.transfers, ", \"max_scratch\": ", report.max_scratch,
      ", \"slot_bytes\": ", s.slot_bytes, ", \"predicted_s\": ", JsonNum(s.predicted_s),
      ", \"topology_digest\": ", JsonStr(Hex(s.topology_digest)),
      ", \"schedule_digest\": ", JsonStr(Hex(collective::ScheduleDigest(s))),
      ", \"verified\": true, \"output\": ", output.empty() ? "null" : JsonStr(output), "}");
}

// Verifies and writes a compiled schedule; prints the summary. A schedule that does not verify is
// the compiler's bug: reported with every problem, exit 1.
int Emit(const char* cmd, const Schedule& s, const std::string& output, bool json,
         std::ostream& out, std::ostream& err, const std::string& extra_json = "") {
  VerifyReport report;
  if (absl::Status st = collective::VerifySchedule(s, &report); !st.ok()) {
    err << "heddle-flow " << cmd << ": the compiled schedule does not verify:\n";
    for (const std::string& p : report.problems) err << "  " << p << "\n";
    return kExitRejected;
  }
  if (!output.empty()) {
    if (absl::Status st = collective::WriteScheduleFile(output, s); !st.ok()) {
      err << "heddle-flow " << cmd << ": " << st.message() << "\n";
      return kExitBadInput;
    }
  }
  if (json) {
    std::string j = ScheduleSummaryJson(s, report, output);
    if (!extra_json.empty()) j = absl::StrCat(j.substr(0, j.size() - 1), ", ", extra_json, "}");
    out << j << "\n";
  } else {
    PrintScheduleSummary(s, report, output, out);
  }
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// Commands.

struct CompileArgs {
  std::string topology, intent_file, builtin, collective, order, output;
  std::vector<std::string> params;
  uint64_t slot_bytes = 1 << 20;
  uint32_t pieces = 0;
  uint32_t chunks = 0;
  bool json = false;
  bool piece_search = false;  // print every candidate piece count the search tried
  bool exhaustive = false;    // schedule every candidate to completion (the slow reference)
  // Threads of the piece search (CompileOptions::threads); -1 = not given: 0 (automatic), or 1
  // with --piece-search, whose report of how far each loser got is then the same every run.
  int threads = -1;
};

// One line per candidate of the piece search: its lower bound, what it had to beat, and its
// makespan or why it has none.
void PrintPieceSearch(const collective::CompileDebug& d, std::ostream& out) {
  for (const collective::PieceCandidate& c : d.candidates) {
    out << "  P=" << c.pieces << " bound " << absl::StrFormat("%.6f", c.lower_bound) << " s";
    if (std::isfinite(c.must_beat)) {
      out << ", must beat " << absl::StrFormat("%.6f", c.must_beat) << " s";
    }
    switch (c.outcome) {
      case collective::PieceCandidate::Outcome::kScheduled: {
        out << ", makespan " << absl::StrFormat("%.6f", c.makespan) << " s";
        // The bound adds the same times in another order: equal within rounding is exact.
        const double below = 1 - c.lower_bound / c.makespan;
        if (std::abs(below) < 1e-9) {
          out << " (bound exact)";
        } else {
          out << " (bound " << absl::StrFormat("%.2f", 100 * below) << " % below)";
        }
        break;
      }
      case collective::PieceCandidate::Outcome::kRuledOut:
        out << ", ruled out by its bound";
        break;
      case collective::PieceCandidate::Outcome::kAbandoned:
        out << ", abandoned while scheduling after " << c.committed << " pieces";
        break;
    }
    out << "; " << absl::StrFormat("%.1f", 1e3 * c.seconds) << " ms\n";
  }
}

int Compile_(const CompileArgs& a, std::ostream& out, std::ostream& err) {
  if (a.intent_file.empty() == a.builtin.empty()) {
    err << "heddle-flow compile: give --intent FILE or --builtin NAME (one of them)\n";
    return kExitBadInput;
  }
  absl::StatusOr<Topology> t = LoadTopology(a.topology);
  if (!t.ok()) {
    err << "heddle-flow compile: " << t.status().message() << "\n";
    return kExitBadInput;
  }
  std::string text;
  if (!a.builtin.empty()) {
    absl::StatusOr<Kind> kind = ParseKind(a.collective.empty() ? "allreduce" : a.collective);
    if (!kind.ok()) {
      err << "heddle-flow compile: " << kind.status().message() << "\n";
      return kExitBadInput;
    }
    absl::StatusOr<std::string> b = collective::BuiltinIntentText(a.builtin, *kind);
    if (!b.ok()) {
      err << "heddle-flow compile: " << b.status().message() << " (see heddle-flow builtins)\n";
      return kExitBadInput;
    }
    text = *b;
  } else {
    absl::StatusOr<std::string> f = ReadFile(a.intent_file, "intent");
    if (!f.ok()) {
      err << "heddle-flow compile: " << f.status().message() << "\n";
      return kExitBadInput;
    }
    text = *f;
    if (!a.collective.empty()) {
      absl::StatusOr<Kind> kind = ParseKind(a.collective);
      absl::StatusOr<collective::IntentInfo> info = collective::InspectIntent(text);
      if (!kind.ok()) {
        err << "heddle-flow compile: " << kind.status().message() << "\n";
        return kExitBadInput;
      }
      if (info.ok() && info->kind != *kind) {
        err << "heddle-flow compile: " << a.intent_file << " is a " << KindName(info->kind)
            << " intent, not " << KindName(*kind) << "\n";
        return kExitBadInput;
      }
    }
  }
  ExpandOptions eo;
  eo.ranks = t->ranks;
  absl::StatusOr<std::map<std::string, int64_t>> params = ParseParams(a.params);
  absl::StatusOr<std::vector<uint32_t>> order = ParseOrder(a.order, t->ranks, &*t);
  if (!params.ok() || !order.ok()) {
    err << "heddle-flow compile: "
        << (!params.ok() ? params.status().message() : order.status().message()) << "\n";
    return kExitBadInput;
  }
  eo.params = *params;
  eo.order = *order;
  eo.chunks_per_rank = a.chunks;
  std::vector<Diagnostic> diags;
  absl::StatusOr<Intent> intent = IntentFromText(text, eo, &diags);
  if (!intent.ok()) {
    err << "heddle-flow compile: the intent is rejected:\n";
    PrintDiagnosticsText(diags, err);
    return kExitRejected;
  }
  if (a.piece_search && (a.json || a.pieces != 0)) {
    err << "heddle-flow compile: --piece-search prints text for a searched piece count (no "
           "--json, no --pieces)\n";
    return kExitBadInput;
  }
  CompileOptions co;
  co.slot_bytes = a.slot_bytes;
  co.pieces = a.pieces;
  co.exhaustive_piece_search = a.exhaustive;
  co.threads = a.threads >= 0 ? static_cast<uint32_t>(a.threads) : (a.piece_search ? 1 : 0);
  collective::CompileDebug debug;
  if (a.piece_search) co.debug = &debug;
  absl::StatusOr<Schedule> s = collective::Compile(*intent, *t, co);
  if (!s.ok()) {
    err << "heddle-flow compile: " << s.status().message() << "\n";
    return kExitRejected;
  }
  if (a.piece_search) {
    out << "piece search" << (a.exhaustive ? " (exhaustive)" : "") << ":\n";
    PrintPieceSearch(debug, out);
  }
  return Emit("compile", *s, a.output, a.json, out, err);
}

int Verify(const std::string& path, bool json, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Schedule> s = collective::ReadScheduleFile(path);
  if (!s.ok()) {
    err << "heddle-flow verify: " << s.status().message() << "\n";
    return kExitBadInput;
  }
  VerifyReport report;
  const absl::Status st = collective::VerifySchedule(*s, &report);
  if (json) {
    out << "{\"file\": " << JsonStr(path) << ", \"verified\": " << (st.ok() ? "true" : "false")
        << ", \"intent\": " << JsonStr(s->intent)
        << ", \"collective\": " << JsonStr(KindName(s->collective.kind))
        << ", \"ranks\": " << s->collective.ranks << ", \"ops\": " << report.ops
        << ", \"transfers\": " << report.transfers << ", \"max_scratch\": " << report.max_scratch
        << ", \"digest\": " << JsonStr(Hex(collective::ScheduleDigest(*s))) << ", \"problems\": [";
    for (size_t i = 0; i < report.problems.size(); ++i) {
      out << (i ? ", " : "") << JsonStr(report.problems[i]);
    }
    out << "]}\n";
  } else {
    out << path << ": " << s->intent << ", " << CollectiveText(s->collective) << ": " << report.ops
        << " ops, " << report.transfers << " transfers, " << s->pieces << " piece"
        << (s->pieces == 1 ? "" : "s") << " per slot, max scratch " << report.max_scratch << "\n";
    if (st.ok()) {
      out << "verified: every promise holds, every contribution reduced once, no race, no "
             "deadlock\n";
    } else {
      out << report.problems.size()
          << (report.problems.size() == collective::kMaxProblems ? " (or more)" : "") << " problem"
          << (report.problems.size() == 1 ? "" : "s") << ":\n";
      for (const std::string& p : report.problems) out << "  " << p << "\n";
    }
  }
  return st.ok() ? kExitOk : kExitRejected;
}

struct CheckArgs {
  std::string intent_file, order, diagnostics = "text";
  uint32_t ranks = 0;
  uint32_t chunks = 0;
  std::vector<std::string> params;
};

int Check(const CheckArgs& a, std::ostream& out, std::ostream& err) {
  if (a.diagnostics != "text" && a.diagnostics != "json") {
    err << "heddle-flow check: --diagnostics " << a.diagnostics << ": use json or text\n";
    return kExitBadInput;
  }
  absl::StatusOr<std::string> text = ReadFile(a.intent_file, "intent");
  if (!text.ok()) {
    err << "heddle-flow check: " << text.status().message() << "\n";
    return kExitBadInput;
  }
  absl::StatusOr<std::map<std::string, int64_t>> params = ParseParams(a.params);
  absl::StatusOr<std::vector<uint32_t>> order = ParseOrder(a.order, a.ranks, nullptr);
  if (!params.ok() || !order.ok()) {
    err << "heddle-flow check: "
        << (!params.ok() ? params.status().message() : order.status().message()) << "\n";
    return kExitBadInput;
  }
  ExpandOptions eo;
  eo.ranks = a.ranks;
  eo.params = *params;
  eo.order = *order;
  eo.chunks_per_rank = a.chunks;
  std::vector<Diagnostic> diags;
  absl::StatusOr<Intent> intent = IntentFromText(*text, eo, &diags);
  if (a.diagnostics == "json") {
    out << collective::DiagnosticsJson(diags) << "\n";
  } else {
    PrintDiagnosticsText(diags, out);
    if (intent.ok()) {
      out << "ok: " << intent->name << ", " << CollectiveText(intent->collective) << ", "
          << intent->moves.size() << " moves\n";
    }
  }
  return intent.ok() ? kExitOk : kExitRejected;
}

int Builtins(const std::string& show, const std::string& kind_name, bool json, std::ostream& out,
             std::ostream& err) {
  if (!show.empty()) {
    absl::StatusOr<Kind> kind = ParseKind(kind_name.empty() ? "allreduce" : kind_name);
    if (!kind.ok()) {
      err << "heddle-flow builtins: " << kind.status().message() << "\n";
      return kExitBadInput;
    }
    absl::StatusOr<std::string> text = collective::BuiltinIntentText(show, *kind);
    if (!text.ok()) {
      err << "heddle-flow builtins: " << text.status().message() << "\n";
      return kExitBadInput;
    }
    if (json) {
      out << "{\"name\": " << JsonStr(show) << ", \"collective\": " << JsonStr(KindName(*kind))
          << ", \"text\": " << JsonStr(*text) << "}\n";
    } else {
      out << *text;
      if (!text->empty() && text->back() != '\n') out << "\n";
    }
    return kExitOk;
  }
  if (json) out << "[";
  bool first = true;
  for (const std::string& name : collective::BuiltinNames()) {
    const std::vector<Kind> kinds = collective::BuiltinKinds(name);
    if (json) {
      out << (first ? "" : ", ") << "{\"name\": " << JsonStr(name) << ", \"collectives\": [";
      for (size_t i = 0; i < kinds.size(); ++i)
        out << (i ? ", " : "") << JsonStr(KindName(kinds[i]));
      out << "]}";
    } else {
      out << absl::StrFormat("%-20s", name);
      for (size_t i = 0; i < kinds.size(); ++i) out << (i ? " " : "") << KindName(kinds[i]);
      out << "\n";
    }
    first = false;
  }
  if (json) out << "]\n";
  return kExitOk;
}

int Predict(const std::string& topology, const std::string& path, uint64_t slot_bytes, bool json,
            std::ostream& out, std::ostream& err) {
  absl::StatusOr<Topology> t = LoadTopology(topology);
  if (!t.ok()) {
    err << "heddle-flow predict: " << t.status().message() << "\n";
    return kExitBadInput;
  }
  absl::StatusOr<Schedule> s = collective::ReadScheduleFile(path);
  if (!s.ok()) {
    err << "heddle-flow predict: " << s.status().message() << "\n";
    return kExitBadInput;
  }
  if (absl::Status st = collective::VerifySchedule(*s); !st.ok()) {
    err << "heddle-flow predict: " << path << ": " << st.message() << "\n";
    return kExitRejected;
  }
  const uint64_t bytes = slot_bytes != 0 ? slot_bytes : s->slot_bytes;
  absl::StatusOr<double> p = collective::PredictTime(*s, *t, bytes);
  if (!p.ok()) {
    err << "heddle-flow predict: " << p.status().message() << "\n";
    return kExitBadInput;
  }
  const uint64_t digest = collective::TopologyDigest(*t);
  if (json) {
    out << "{\"predicted_s\": " << JsonNum(*p) << ", \"slot_bytes\": " << bytes
        << ", \"compiled_predicted_s\": " << JsonNum(s->predicted_s)
        << ", \"compiled_slot_bytes\": " << s->slot_bytes
        << ", \"topology_digest\": " << JsonStr(Hex(digest))
        << ", \"compiled_for\": " << JsonStr(Hex(s->topology_digest)) << "}\n";
  } else {
    out << "predicted " << Seconds(*p) << " for " << bytes << "-byte slots on " << topology
        << " (compiled: " << Seconds(s->predicted_s) << " for " << s->slot_bytes
        << "-byte slots)\n";
    if (digest != s->topology_digest) {
      out << "note: compiled for topology " << Hex(s->topology_digest) << ", this one is "
          << Hex(digest) << "\n";
    }
  }
  return kExitOk;
}

struct SynthesizeArgs {
  std::string topology, collective, proposer, output;
  uint32_t budget = 200, rounds = 3, root = 0, chunks = 1;
  uint64_t seed = 1, slot_bytes = 1 << 20;
  double proposer_timeout_s = 60;
  bool json = false;
};

int Synthesize_(const SynthesizeArgs& a, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Topology> t = LoadTopology(a.topology);
  absl::StatusOr<Kind> kind = ParseKind(a.collective);
  if (!t.ok() || !kind.ok()) {
    err << "heddle-flow synthesize: " << (!t.ok() ? t.status().message() : kind.status().message())
        << "\n";
    return kExitBadInput;
  }
  // Only broadcast and reduce have a root; the expanded intents of the others carry root 0.
  const bool rooted = *kind == Kind::kBroadcast || *kind == Kind::kReduce;
  const Collective c{*kind, t->ranks, a.chunks, rooted ? a.root : 0};
  if (absl::Status st = collective::Validate(c); !st.ok()) {
    err << "heddle-flow synthesize: " << st.message() << "\n";
    return kExitBadInput;
  }
  CompileOptions co;
  co.slot_bytes = a.slot_bytes;
  ExpandOptions eo;
  eo.ranks = t->ranks;
  eo.chunks_per_rank = a.chunks;
  if (*kind == Kind::kBroadcast || *kind == Kind::kReduce) eo.params["root"] = a.root;

  // The proposal loop: each round shows the proposer the best compiled intent so far and the
  // diagnostics of its last rejected proposal; accepted proposals join the search as candidates.
  std::vector<collective::Candidate> extra;
  std::string proposals_json;
  if (!a.proposer.empty()) {
    flow::PromptParts prompt;
    prompt.collective = CollectiveText(c);
    prompt.topology_yaml = collective::TopologyToYaml(*t);
    prompt.rounds = static_cast<int>(a.rounds);
    // The builtins are the starting point.
    for (const std::string& name : collective::BuiltinNames()) {
      absl::StatusOr<std::string> text = collective::BuiltinIntentText(name, *kind);
      if (!text.ok()) continue;
      std::vector<Diagnostic> ignored;
      absl::StatusOr<Intent> intent = IntentFromText(*text, eo, &ignored);
      if (!intent.ok()) continue;
      absl::StatusOr<Schedule> s = collective::Compile(*intent, *t, co);
      if (s.ok() && (prompt.best_name.empty() || s->predicted_s < prompt.best_predicted_s)) {
        prompt.best_name = name;
        prompt.best_predicted_s = s->predicted_s;
        prompt.best_text = *text;
      }
    }
    for (uint32_t round = 1; round <= a.rounds; ++round) {
      prompt.round = static_cast<int>(round);
      std::vector<Diagnostic> diags;
      std::string text;
      std::optional<double> predicted;
      absl::StatusOr<flow::CommandResult> r =
          flow::RunCommand(a.proposer, flow::BuildPrompt(prompt), a.proposer_timeout_s);
      if (!r.ok()) {
        diags.push_back(Diagnostic{0, 0, "proposer-failed", std::string(r.status().message())});
      } else if (r->exit_code != 0) {
        diags.push_back(Diagnostic{0, 0, "proposer-failed",
                                   absl::StrCat("the proposer exited with status ", r->exit_code)});
      } else {
        text = flow::ExtractIntentText(r->out);
        absl::StatusOr<Intent> intent = IntentFromText(text, eo, &diags);
        if (intent.ok() && intent->collective.kind != *kind) {
          diags.push_back(
              Diagnostic{0, 0, "wrong-collective",
                         absl::StrCat("the intent is a ", KindName(intent->collective.kind),
                                      "; the task is a ", KindName(*kind))});
        } else if (intent.ok()) {
          absl::StatusOr<Schedule> s = collective::Compile(*intent, *t, co);
          if (!s.ok()) {
            diags.push_back(Diagnostic{0, 0, "compile", std::string(s.status().message())});
          } else if (absl::Status v = collective::VerifySchedule(*s); !v.ok()) {
            diags.push_back(Diagnostic{0, 0, "verify", std::string(v.message())});
          } else {
            predicted = s->predicted_s;
          }
        }
      }
      const std::string name = absl::StrCat("proposal-", round);
      absl::StrAppend(&proposals_json, proposals_json.empty() ? "" : ", ",
                      "{\"name\": ", JsonStr(name),
                      ", \"accepted\": ", predicted ? "true" : "false",
                      ", \"predicted_s\": ", predicted ? JsonNum(*predicted) : "null",
                      ", \"diagnostics\": ", collective::DiagnosticsJson(diags), "}");
      if (predicted.has_value()) {
        if (!a.json) out << name << ": accepted, predicted " << Seconds(*predicted) << "\n";
        extra.push_back(collective::Candidate{name, text, eo});
        if (*predicted < prompt.best_predicted_s || prompt.best_name.empty()) {
          prompt.best_name = name;
          prompt.best_predicted_s = *predicted;
          prompt.best_text = text;
        }
        prompt.rejected_text.clear();
        prompt.rejected_diagnostics.clear();
      } else {
        if (!a.json) {
          out << name << ": rejected\n";
          PrintDiagnosticsText(diags, out);
        }
        prompt.rejected_text = text;
        prompt.rejected_diagnostics = collective::DiagnosticsJson(diags);
      }
    }
  }

  collective::SynthesizeOptions so;
  so.compile = co;
  so.budget = a.budget;
  so.seed = a.seed;
  so.extra = extra;
  absl::StatusOr<collective::Synthesized> best = collective::Synthesize(c, *t, so);
  if (!best.ok()) {
    err << "heddle-flow synthesize: " << best.status().message() << "\n";
    return kExitRejected;
  }
  std::string tried_json;
  for (const auto& [name, s] : best->tried) {
    absl::StrAppend(&tried_json, tried_json.empty() ? "" : ", ", "{\"name\": ", JsonStr(name),
                    ", \"predicted_s\": ", JsonNum(s), "}");
  }
  if (!a.json) {
    out << "tried " << best->tried.size() << " candidates; best " << best->best.name << "\n";
  }
  return Emit("synthesize", best->schedule, a.output, a.json, out, err,
              absl::StrCat("\"best\": ", JsonStr(best->best.name), ", \"tried\": [", tried_json,
                           "], \"proposals\": [", proposals_json, "]"));
}

}  // namespace

int Main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app(
      "OptiFlow collectives: compile data-movement intent into verified schedules "
      "(docs/optiflow-schedule.md).",
      "heddle-flow");
  app.set_version_flag("--version", std::string(kVersion));
  app.require_subcommand(1);

  CompileArgs ca;
  CLI::App* compile = app.add_subcommand("compile", "intent + topology -> verified schedule");
  compile->add_option("--topology", ca.topology, "topology (YAML)")->required();
  compile->add_option("--intent", ca.intent_file, "intent program (DSL text)");
  compile->add_option("--builtin", ca.builtin, "a built-in intent (see heddle-flow builtins)");
  compile->add_option("--collective", ca.collective,
                      "collective of a builtin (default allreduce); checked against --intent");
  compile->add_option("--param", ca.params, "a parameter of the program, NAME=INTEGER");
  compile->add_option("--order", ca.order, "virtual-to-physical rank order: indices or names");
  compile->add_option("--slot-bytes", ca.slot_bytes, "bytes of one data slot (default 1 MiB)");
  compile->add_option("--pieces", ca.pieces, "pieces per slot (default: the compiler picks)");
  compile->add_option("--chunks", ca.chunks, "chunks per rank (default: the program's)");
  compile->add_option("-o,--output", ca.output, "write the schedule (JSON) here");
  compile->add_flag("-j,--json", ca.json, "print the summary as JSON");
  compile->add_flag("--piece-search", ca.piece_search,
                    "print every piece count tried: lower bound, time to beat, makespan");
  compile->add_flag("--exhaustive", ca.exhaustive,
                    "schedule every candidate piece count to completion (same result, slower)");
  compile
      ->add_option("--threads", ca.threads,
                   "threads of the piece search (same schedule as 1; default: one per hardware "
                   "thread for a large search, 1 with --piece-search)")
      ->check(CLI::Range(0, static_cast<int>(collective::kMaxCompileThreads)));

  std::string verify_path;
  bool verify_json = false;
  CLI::App* verify = app.add_subcommand("verify", "verify a schedule file");
  verify->add_option("schedule", verify_path, "schedule (JSON)")->required();
  verify->add_flag("-j,--json", verify_json, "print the report as JSON");

  CheckArgs ka;
  CLI::App* check = app.add_subcommand("check", "parse, expand and check an intent for N ranks");
  check->add_option("--intent", ka.intent_file, "intent program (DSL text)")->required();
  check->add_option("--ranks", ka.ranks, "N")->required();
  check->add_option("--chunks", ka.chunks, "chunks per rank (default: the program's)");
  check->add_option("--param", ka.params, "a parameter of the program, NAME=INTEGER");
  check->add_option("--order", ka.order, "virtual-to-physical rank order (indices)");
  check->add_option("--diagnostics", ka.diagnostics, "json: a JSON array on stdout; text");

  SynthesizeArgs sa;
  CLI::App* synth = app.add_subcommand("synthesize", "search intents for the fastest schedule");
  synth->add_option("--topology", sa.topology, "topology (YAML)")->required();
  synth->add_option("--collective", sa.collective, "collective kind")->required();
  synth->add_option("--chunks", sa.chunks, "chunks per rank (default 1)");
  synth->add_option("--root", sa.root, "root of broadcast / reduce (default 0)");
  synth->add_option("--budget", sa.budget, "candidates to compile at most (default 200)");
  synth->add_option("--seed", sa.seed, "seed of the search");
  synth->add_option("--slot-bytes", sa.slot_bytes, "bytes of one data slot (default 1 MiB)");
  synth->add_option("--proposer", sa.proposer,
                    "shell command: reads a prompt on stdin, prints intent text");
  synth->add_option("--rounds", sa.rounds, "proposal rounds (default 3)");
  synth
      ->add_option("--proposer-timeout", sa.proposer_timeout_s,
                   "seconds one proposal may take (default 60)")
      ->check([](const std::string& v) -> std::string {
        double s = 0;
        // NaN passes CLI::Range; this refuses it too.
        if (!absl::SimpleAtod(v, &s) || !(s >= 0.001 && s <= 86400.0)) {
          return "seconds in 0.001..86400";
        }
        return "";
      });
  synth->add_option("-o,--output", sa.output, "write the best schedule (JSON) here");
  synth->add_flag("-j,--json", sa.json, "print the result as JSON");

  std::string show, show_kind;
  bool builtins_json = false;
  CLI::App* builtins = app.add_subcommand("builtins", "list the built-in intents, or show one");
  builtins->add_option("--show", show, "print this builtin's text");
  builtins->add_option("--collective", show_kind,
                       "with --show: the collective (default allreduce)");
  builtins->add_flag("-j,--json", builtins_json, "print JSON");

  std::string predict_topology, predict_path;
  uint64_t predict_bytes = 0;
  bool predict_json = false;
  CLI::App* predict = app.add_subcommand("predict", "the cost model's time of a schedule");
  predict->add_option("--topology", predict_topology, "topology (YAML)")->required();
  predict->add_option("schedule", predict_path, "schedule (JSON)")->required();
  predict->add_option("--slot-bytes", predict_bytes, "slot size (default: the schedule's)");
  predict->add_flag("-j,--json", predict_json, "print JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion&) {
    out << "heddle-flow " << kVersion << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);
    err << "heddle-flow: " << e.what() << "\nRun 'heddle-flow --help' for more information.\n";
    return kExitBadInput;
  }
  if (compile->parsed()) return Compile_(ca, out, err);
  if (verify->parsed()) return Verify(verify_path, verify_json, out, err);
  if (check->parsed()) return Check(ka, out, err);
  if (synth->parsed()) return Synthesize_(sa, out, err);
  if (builtins->parsed()) return Builtins(show, show_kind, builtins_json, out, err);
  if (predict->parsed())
    return Predict(predict_topology, predict_path, predict_bytes, predict_json, out, err);
  return kExitBadInput;
}

}  // namespace heddle::flow::cli
