#include "tools/heddle-flow/flow_cli.h"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/collective/internal/test_schedules.h"
#include "control/collective/schedule_io.h"
#include "control/collective/verifier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/heddle-flow/proposer.h"

namespace heddle::flow {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::string kData = HEDDLE_FLOW_TESTDATA;
const std::string kPython = HEDDLE_PYTHON;

struct Result {
  int code = 0;
  std::string out, err;
};

Result Flow(std::vector<std::string> args) {
  args.insert(args.begin(), "heddle-flow");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  Result r;
  r.code = cli::Main(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

class FlowCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("flow_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

// --piece-search lists every piece count tried; the exhaustive search schedules every one of
// them (a makespan on every line, never below its bound) and picks the same piece count.
TEST_F(FlowCli, CompilePrintsThePieceSearch) {
  const std::vector<std::string> base = {"compile",   "--topology",    kData + "/wan4.yaml",
                                         "--builtin", "ring",          "--collective",
                                         "allgather", "--piece-search"};
  Result pruned = Flow(base);
  ASSERT_EQ(pruned.code, cli::kExitOk) << pruned.err;
  EXPECT_THAT(pruned.out, StartsWith("piece search:\n  P=1 bound "));
  std::vector<std::string> args = base;
  args.push_back("--exhaustive");
  Result exhaustive = Flow(args);
  ASSERT_EQ(exhaustive.code, cli::kExitOk) << exhaustive.err;
  EXPECT_THAT(exhaustive.out, StartsWith("piece search (exhaustive):\n  P=1 bound "));
  EXPECT_THAT(exhaustive.out, Not(HasSubstr("ruled out")));
  EXPECT_THAT(exhaustive.out, Not(HasSubstr("abandoned")));
  int lines = 0;
  for (size_t at = exhaustive.out.find("  P="); at != std::string::npos;
       at = exhaustive.out.find("  P=", at + 1)) {
    ++lines;
    const std::string line = exhaustive.out.substr(at, exhaustive.out.find('\n', at) - at);
    EXPECT_THAT(line, HasSubstr(", makespan ")) << line;
    EXPECT_THAT(line, ::testing::MatchesRegex(".*; [0-9]+\\.[0-9] ms")) << line;
    EXPECT_THAT(line, Not(HasSubstr("(bound -"))) << line;
  }
  EXPECT_GE(lines, 2);
  // The schedule summary after the search is the same.
  EXPECT_EQ(pruned.out.substr(pruned.out.find("schedule ")),
            exhaustive.out.substr(exhaustive.out.find("schedule ")));
  args = base;
  args.push_back("--json");
  EXPECT_EQ(Flow(args).code, cli::kExitBadInput);
}

TEST_F(FlowCli, CompileWritesAVerifiedScheduleAndVerifyAcceptsIt) {
  const std::string out = Path("ring.json");
  Result r = Flow({"compile", "--topology", kData + "/wan4.yaml", "--intent",
                   kData + "/ring_allgather.flow", "--pieces", "2", "-o", out});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_THAT(r.out, StartsWith("schedule my-ring: allgather over 4 ranks (1 chunk per rank)\n"));
  EXPECT_THAT(r.out, HasSubstr("2 pieces per slot"));
  EXPECT_THAT(r.out, HasSubstr("verified\n"));
  absl::StatusOr<collective::Schedule> s = collective::ReadScheduleFile(out);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->ranks, (std::vector<std::string>{"eu", "us", "asia", "sa"}));
  EXPECT_EQ(s->pieces, 2u);
  EXPECT_GT(s->predicted_s, 0);

  Result v = Flow({"verify", out});
  EXPECT_EQ(v.code, cli::kExitOk) << v.err;
  EXPECT_THAT(v.out, HasSubstr("verified: every promise holds"));
  Result j = Flow({"verify", out, "-j"});
  EXPECT_EQ(j.code, cli::kExitOk);
  EXPECT_THAT(j.out, HasSubstr("\"verified\": true"));
  EXPECT_THAT(j.out, HasSubstr("\"problems\": []"));
}

TEST_F(FlowCli, CompileIsDeterministic) {
  std::vector<std::string> outs;
  for (int i = 0; i < 2; ++i) {
    Result r = Flow({"compile", "--topology", kData + "/wan4.yaml", "--builtin", "ring",
                     "--collective", "allreduce", "--order", "eu,asia,us,sa", "-j"});
    ASSERT_EQ(r.code, cli::kExitOk) << r.err;
    outs.push_back(r.out);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_THAT(outs[0], HasSubstr("\"collective\": \"allreduce\""));
  EXPECT_THAT(outs[0], HasSubstr("\"output\": null"));
  Result k = Flow({"compile", "--topology", kData + "/wan4.yaml", "--builtin", "direct",
                   "--collective", "alltoall", "--chunks", "2", "-j"});
  ASSERT_EQ(k.code, cli::kExitOk) << k.err;
  EXPECT_THAT(k.out, HasSubstr("\"chunks_per_rank\": 2"));
}

// --threads N schedules the candidate piece counts on N threads: the schedule file is the serial
// search's, byte for byte.
TEST_F(FlowCli, CompileOnSeveralThreadsWritesTheSameScheduleFile) {
  auto read = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  };
  for (const char* builtin : {"halving-doubling", "tree"}) {
    std::vector<std::string> files;
    for (const char* threads : {"1", "2", "3"}) {
      const std::string out = Path(absl::StrCat(builtin, "-", threads, ".json"));
      Result r = Flow({"compile", "--topology", kData + "/wan4.yaml", "--builtin", builtin,
                       "--collective", "allreduce", "--threads", threads, "-o", out});
      ASSERT_EQ(r.code, cli::kExitOk) << builtin << " " << threads << ": " << r.err;
      files.push_back(read(out));
      ASSERT_FALSE(files.back().empty()) << out;
    }
    EXPECT_EQ(files[1], files[0]) << builtin;
    EXPECT_EQ(files[2], files[0]) << builtin;
  }
  Result r = Flow(
      {"compile", "--topology", kData + "/wan4.yaml", "--builtin", "ring", "--threads", "257"});
  EXPECT_EQ(r.code, cli::kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("--threads"));
}

TEST_F(FlowCli, CompileRejectsBadIntentsAndOptions) {
  Result r =
      Flow({"compile", "--topology", kData + "/wan4.yaml", "--intent", kData + "/broken.flow"});
  EXPECT_EQ(r.code, cli::kExitRejected);
  EXPECT_THAT(r.err, HasSubstr("intent:4:"));
  r = Flow({"compile", "--topology", kData + "/wan4.yaml", "--builtin", "nope"});
  EXPECT_EQ(r.code, cli::kExitBadInput);
  r = Flow({"compile", "--topology", kData + "/wan4.yaml", "--builtin", "ring", "--intent",
            kData + "/ring_allgather.flow"});
  EXPECT_EQ(r.code, cli::kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("one of them"));
  r = Flow({"compile", "--topology", kData + "/missing.yaml", "--builtin", "ring"});
  EXPECT_EQ(r.code, cli::kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("missing.yaml: cannot open the topology"));
  r = Flow({"compile", "--topology", kData + "/wan4.yaml", "--builtin", "ring", "--order",
            "eu,eu,us,sa"});
  EXPECT_EQ(r.code, cli::kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("appears twice"));
  r = Flow({"compile", "--topology", kData + "/wan4.yaml", "--intent",
            kData + "/ring_allgather.flow", "--collective", "allreduce"});
  EXPECT_EQ(r.code, cli::kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("is a allgather intent, not allreduce"));
  r = Flow({"compile", "--topology", kData + "/wan4.yaml", "--builtin", "ring", "--param", "x"});
  EXPECT_EQ(r.code, cli::kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("NAME=INTEGER"));
}

TEST_F(FlowCli, VerifyReportsEveryProblemAndBadFiles) {
  collective::Schedule s = collective::testing::RingAllGather(3, 1);
  s.per_rank[0].ops[0].deps = {1};  // a forward reference
  s.per_rank[1].ops[0].piece = 5;
  const std::string path = Path("bad.json");
  ASSERT_TRUE(collective::WriteScheduleFile(path, s).ok());
  Result r = Flow({"verify", path});
  EXPECT_EQ(r.code, cli::kExitRejected);
  EXPECT_THAT(r.out, HasSubstr("2 problems:\n"));
  EXPECT_THAT(r.out, HasSubstr("dep 1 is not an earlier op"));
  EXPECT_THAT(r.out, HasSubstr("piece 5 is out of range"));
  Result j = Flow({"verify", path, "--json"});
  EXPECT_EQ(j.code, cli::kExitRejected);
  EXPECT_THAT(j.out, HasSubstr("\"verified\": false"));

  std::FILE* f = std::fopen(Path("garbage.json").c_str(), "w");
  std::fputs("{\"format\": \"heddle-schedule\", \"format_version\": 9}", f);
  std::fclose(f);
  r = Flow({"verify", Path("garbage.json")});
  EXPECT_EQ(r.code, cli::kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("format_version 9 is not supported"));
}

TEST_F(FlowCli, CheckPrintsMachineReadableDiagnostics) {
  Result ok = Flow({"check", "--intent", kData + "/ring_allgather.flow", "--ranks", "5",
                    "--diagnostics", "json"});
  EXPECT_EQ(ok.code, cli::kExitOk) << ok.err;
  EXPECT_EQ(ok.out, "[]\n");
  Result text = Flow({"check", "--intent", kData + "/ring_allgather.flow", "--ranks", "5"});
  EXPECT_EQ(text.code, cli::kExitOk);
  EXPECT_THAT(text.out,
              HasSubstr("ok: my-ring, allgather over 5 ranks (1 chunk per rank), 20 moves"));

  Result bad =
      Flow({"check", "--intent", kData + "/broken.flow", "--ranks", "4", "--diagnostics", "json"});
  EXPECT_EQ(bad.code, cli::kExitRejected);
  EXPECT_THAT(bad.out, StartsWith("[\n  {"));
  EXPECT_THAT(bad.out, HasSubstr("\"line\": 4"));
  EXPECT_THAT(bad.out, HasSubstr("\"severity\": \"error\""));

  // Expands fine; the postcondition check rejects it, as a diagnostic with a code.
  Result twice = Flow({"check", "--intent", kData + "/double_reduce.flow", "--ranks", "3",
                       "--diagnostics", "json"});
  EXPECT_EQ(twice.code, cli::kExitRejected);
  EXPECT_THAT(twice.out, HasSubstr("\"code\": \"postcondition\""));
  Result missing = Flow({"check", "--intent", kData + "/nope.flow", "--ranks", "3"});
  EXPECT_EQ(missing.code, cli::kExitBadInput);
}

TEST_F(FlowCli, BuiltinsListAndShow) {
  Result list = Flow({"builtins"});
  EXPECT_EQ(list.code, cli::kExitOk);
  for (const char* name : {"ring", "direct", "tree", "halving-doubling", "hierarchical"}) {
    EXPECT_THAT(list.out, HasSubstr(name));
  }
  Result json = Flow({"builtins", "-j"});
  EXPECT_THAT(json.out, HasSubstr("{\"name\": \"ring\", \"collectives\": ["));
  Result show = Flow({"builtins", "--show", "ring", "--collective", "allgather"});
  EXPECT_EQ(show.code, cli::kExitOk);
  EXPECT_THAT(show.out, HasSubstr("collective allgather"));
  Result none = Flow({"builtins", "--show", "no-such"});
  EXPECT_EQ(none.code, cli::kExitBadInput);
}

TEST_F(FlowCli, PredictRepricesASchedule) {
  const std::string out = Path("s.json");
  Result c =
      Flow({"compile", "--topology", kData + "/wan4.yaml", "--builtin", "direct", "-o", out});
  ASSERT_EQ(c.code, cli::kExitOk) << c.err;
  absl::StatusOr<collective::Schedule> s = collective::ReadScheduleFile(out);
  ASSERT_TRUE(s.ok());
  Result p = Flow({"predict", "--topology", kData + "/wan4.yaml", out, "-j"});
  EXPECT_EQ(p.code, cli::kExitOk) << p.err;
  // Same topology and slot size: the compiler's own prediction.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), s->predicted_s);
  EXPECT_THAT(p.out, StartsWith("{\"predicted_s\": " + std::string(buf, end) + ","));
  Result twice = Flow({"predict", "--topology", kData + "/wan4.yaml", out, "--slot-bytes",
                       std::to_string(s->slot_bytes * 2)});
  EXPECT_EQ(twice.code, cli::kExitOk);
  EXPECT_THAT(twice.out, Not(HasSubstr("note: compiled for topology")));
}

TEST_F(FlowCli, SynthesizeFindsAVerifiedSchedule) {
  const std::string out = Path("best.json");
  Result r = Flow({"synthesize", "--topology", kData + "/wan4.yaml", "--collective", "allreduce",
                   "--budget", "20", "-o", out, "-j"});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"best\": "));
  EXPECT_THAT(r.out, HasSubstr("\"proposals\": []"));
  absl::StatusOr<collective::Schedule> s = collective::ReadScheduleFile(out);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(collective::VerifySchedule(*s).ok());
}

// --root names the root of broadcast and reduce; other collectives have none and ignore it.
TEST_F(FlowCli, SynthesizeIgnoresRootForUnrootedCollectives) {
  Result r = Flow({"synthesize", "--topology", kData + "/wan4.yaml", "--collective", "allreduce",
                   "--root", "1", "--budget", "10"});
  EXPECT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("verified"));
}

TEST_F(FlowCli, SynthesizeRefusesABadProposerTimeout) {
  for (const char* v : {"nan", "0", "1e9"}) {
    Result r = Flow({"synthesize", "--topology", kData + "/wan4.yaml", "--collective", "allgather",
                     "--proposer-timeout", v});
    EXPECT_EQ(r.code, cli::kExitBadInput) << v;
    EXPECT_THAT(r.err, HasSubstr("--proposer-timeout")) << v;
  }
}

TEST_F(FlowCli, SynthesizeFeedsRejectionsBackToTheProposer) {
  Result r = Flow({"synthesize", "--topology", kData + "/wan4.yaml", "--collective", "allreduce",
                   "--budget", "20", "--rounds", "2", "--proposer",
                   kPython + " " + kData + "/learning_proposer.py"});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("proposal-1: rejected\nintent:3:"));
  EXPECT_THAT(r.out, HasSubstr("proposal-2: accepted, predicted "));
}

TEST_F(FlowCli, SynthesizeSurvivesAFailingProposer) {
  Result r = Flow({"synthesize", "--topology", kData + "/wan4.yaml", "--collective", "allgather",
                   "--budget", "10", "--rounds", "1", "--proposer", "exit 3", "-j"});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"accepted\": false"));
  EXPECT_THAT(r.out, HasSubstr("the proposer exited with status 3"));
}

TEST(Proposer, RunCommandPassesStdinAndStdout) {
  absl::StatusOr<CommandResult> r = RunCommand("tr a-z A-Z", "hello\n", 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "HELLO\n");
  EXPECT_EQ(r->exit_code, 0);
  // A large input that the command never reads must not block us.
  r = RunCommand("exit 4", std::string(1 << 20, 'x'), 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 4);
}

TEST(Proposer, RunCommandKillsAHungCommand) {
  absl::StatusOr<CommandResult> r = RunCommand("sleep 100", "", 0.2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  r = RunCommand("yes", "", 30, 4096);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  // One that closes its stdout and keeps running is killed at the deadline too.
  r = RunCommand("echo hi; exec >&-; sleep 100", "", 0.5);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(Proposer, PromptAndReply) {
  PromptParts p;
  p.collective = "allreduce over 4 ranks (1 chunk per rank)";
  p.topology_yaml = "ranks: [a, b]\n";
  p.best_name = "ring";
  p.best_predicted_s = 0.25;
  p.best_text = "intent ring\n";
  p.rejected_text = "garbage";
  p.rejected_diagnostics = "[{\"code\": \"syntax\"}]";
  p.round = 2;
  p.rounds = 3;
  const std::string prompt = BuildPrompt(p);
  EXPECT_THAT(prompt, StartsWith("# heddle-flow synthesize: proposal 2 of 3\n"));
  EXPECT_THAT(prompt, HasSubstr("## Collective\nallreduce over 4 ranks"));
  EXPECT_THAT(prompt, HasSubstr("## Topology (YAML)\nranks: [a, b]\n"));
  EXPECT_THAT(prompt, HasSubstr("## Best so far: ring, predicted 0.25 s\nintent ring\n"));
  EXPECT_THAT(prompt, HasSubstr("Diagnostics (JSON):\n[{\"code\": \"syntax\"}]\nText:\ngarbage\n"));
  EXPECT_EQ(ExtractIntentText("Sure:\n```dsl\nintent x\n```\nthanks"), "intent x\n");
  EXPECT_EQ(ExtractIntentText("intent y\n"), "intent y\n");
}

}  // namespace
}  // namespace heddle::flow
