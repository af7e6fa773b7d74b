// Pins the compiler's output: every builtin × every kind it has × N ∈ {2..16} (and all-gather /
// all-reduce at 64) × four topologies, with the compiler picking the piece count. Each case is a
// line of testdata/compiler_golden.txt: the chosen pieces, predicted_s (%.17g), the op count and
// an FNV-1a 64 hash of the schedule's JSON. A change to the compiler that keeps every schedule
// byte for byte passes; one that makes any prediction worse fails; one that changes a schedule
// must regenerate the file (and say why in its commit):
//
//   export HEDDLE_WRITE_GOLDEN=$PWD/control/collective/testdata/compiler_golden.txt
//   build/control/collective/collective_compiler_golden_test
//
// To judge a change of the piece search's rule before making it, the same cases can be compiled
// with the exhaustive search instead, writing every candidate's makespan (a line per case:
// "name kind ranks topology| P:makespan P:makespan ..."); the test is then skipped.
// control/collective/testing/piece_search_rules.py replays rules over that file:
//
//   HEDDLE_WRITE_PIECE_CURVES=/tmp/curves.txt
//   build/control/collective/collective_compiler_golden_test python3
//   control/collective/testing/piece_search_rules.py /tmp/curves.txt
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "control/collective/builtins.h"
#include "control/collective/compiler.h"
#include "control/collective/dsl.h"
#include "control/collective/schedule_io.h"
#include "control/collective/testing/intents.h"
#include "gtest/gtest.h"

namespace heddle::collective {
namespace {

constexpr double kGbit = 1e9 / 8;

// FNV-1a's prime, but an offset one digit short of FNV's 14695981039346656037 (not
// common/fnv1a.h): the golden file's hashes were made with it, and it fingerprints as well.
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

struct Case {
  std::string topology;
  Topology t;
  double alpha = 0;
};

std::vector<Case> Topologies(uint32_t n) {
  std::vector<Case> out;
  out.push_back({"mesh", testing::Mesh(n, kGbit, 0.001)});
  Topology slow = testing::Mesh(n, kGbit, 0.001);
  testing::SetLink(slow, 0, n - 1, kGbit / 4);
  out.push_back({"slow", slow});
  out.push_back({"slow-alpha", slow, 1e-4});
  // Every directed pair its own bandwidth (0.5..2.5 Gbit/s) and latency (0.5..2.5 ms).
  Topology hetero = testing::Mesh(n, kGbit, 0.001);
  for (Link& l : hetero.links) {
    l.bytes_per_second = kGbit * (1 + (l.src * 7 + l.dst * 13) % 5) / 2;
    l.latency_s = 0.0005 * (1 + (l.src * 3 + l.dst * 5) % 5);
  }
  out.push_back({"hetero", hetero});
  return out;
}

// "name kind n topology" → "pieces predicted ops hash", with the piece search on `threads`
// threads. With `curves`, every case is compiled with the exhaustive piece search and its
// candidates' makespans are written there.
std::map<std::string, std::string> Compute(std::ofstream* curves = nullptr, uint32_t threads = 1) {
  std::map<std::string, std::string> lines;
  std::vector<uint32_t> sizes;
  for (uint32_t n = 2; n <= 16; ++n) sizes.push_back(n);
  sizes.push_back(64);
  for (uint32_t n : sizes) {
    for (const Case& c : Topologies(n)) {
      for (const std::string& name : BuiltinNames()) {
        for (Kind kind : BuiltinKinds(name)) {
          if (n > 16 && kind != Kind::kAllGather && kind != Kind::kAllReduce) continue;
          ExpandOptions e{.ranks = n};
          if (kind == Kind::kBroadcast || kind == Kind::kReduce) e.params["root"] = n / 2;
          if (name == "hierarchical") e.params["G"] = n % 4 == 0 ? 4 : (n % 2 == 0 ? 2 : 1);
          absl::StatusOr<Intent> in = ParseIntent(*BuiltinIntentText(name, kind), e);
          EXPECT_TRUE(in.ok()) << in.status();
          if (!in.ok()) continue;
          CompileOptions o;
          o.per_op_overhead_s = c.alpha;
          o.threads = threads;
          CompileDebug debug;
          if (curves != nullptr) {
            o.exhaustive_piece_search = true;
            o.debug = &debug;
          }
          absl::StatusOr<Schedule> s = Compile(*in, c.t, o);
          const std::string key = absl::StrCat(name, " ", KindName(kind), " ", n, " ", c.topology);
          EXPECT_TRUE(s.ok()) << key << ": " << s.status();
          if (!s.ok()) continue;
          if (curves != nullptr) {
            *curves << key << "|";
            for (const PieceCandidate& pc : debug.candidates) {
              *curves << absl::StrFormat(" %u:%.17g", pc.pieces, pc.makespan);
            }
            *curves << "\n";
          }
          uint64_t ops = 0;
          for (const RankSchedule& r : s->per_rank) ops += r.ops.size();
          lines[key] = absl::StrFormat("%u %.17g %u %016x", s->pieces, s->predicted_s, ops,
                                       Fnv1a(ScheduleToJson(*s)));
        }
      }
    }
  }
  return lines;
}

// testdata/compiler_golden.txt as "name kind n topology" → "pieces predicted ops hash".
std::map<std::string, std::string> Golden() {
  std::ifstream f(HEDDLE_COMPILER_GOLDEN);
  EXPECT_TRUE(f.good()) << HEDDLE_COMPILER_GOLDEN;
  std::map<std::string, std::string> golden;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t bar = line.find(" | ");
    EXPECT_NE(bar, std::string::npos) << line;
    if (bar == std::string::npos) continue;
    golden[line.substr(0, bar)] = line.substr(bar + 3);
  }
  return golden;
}

TEST(CompilerGolden, SchedulesAndPredictionsAreUnchanged) {
  if (const char* out = std::getenv("HEDDLE_WRITE_PIECE_CURVES")) {
    std::ofstream f(out);
    Compute(&f);
    ASSERT_TRUE(f.good()) << out;
    GTEST_SKIP() << "wrote " << out;
  }
  const std::map<std::string, std::string> now = Compute();
  if (const char* out = std::getenv("HEDDLE_WRITE_GOLDEN")) {
    std::ofstream f(out);
    f << "# name kind ranks topology | pieces predicted_s ops schedule-hash "
         "(compiler_golden_test)\n";
    for (const auto& [k, v] : now) f << k << " | " << v << "\n";
    ASSERT_TRUE(f.good()) << out;
    GTEST_SKIP() << "wrote " << out;
  }
  const std::map<std::string, std::string> golden = Golden();
  ASSERT_FALSE(golden.empty());
  EXPECT_EQ(golden.size(), now.size());
  for (const auto& [key, want] : golden) {
    auto it = now.find(key);
    if (it == now.end()) {
      ADD_FAILURE() << key << ": not compiled any more";
      continue;
    }
    uint32_t wp, np;
    double wt, nt;
    std::istringstream(want) >> wp >> wt;
    std::istringstream(it->second) >> np >> nt;
    EXPECT_LE(nt, wt) << key << ": predicted time got worse";
    EXPECT_EQ(it->second, want) << key << ": the schedule changed";
  }
}

// The piece search on 2 and 3 threads chooses what the serial one chooses: every golden schedule
// byte for byte (the serial search is the one pinned above).
TEST(CompilerGolden, ThreadedPieceSearchGivesTheGoldenSchedules) {
  if (std::getenv("HEDDLE_WRITE_PIECE_CURVES") || std::getenv("HEDDLE_WRITE_GOLDEN")) {
    GTEST_SKIP() << "writing files";
  }
  const std::map<std::string, std::string> golden = Golden();
  ASSERT_FALSE(golden.empty());
  for (const uint32_t threads : {2u, 3u}) {
    const std::map<std::string, std::string> now = Compute(nullptr, threads);
    EXPECT_EQ(now.size(), golden.size()) << threads << " threads";
    for (const auto& [key, want] : golden) {
      auto it = now.find(key);
      if (it == now.end()) {
        ADD_FAILURE() << key << ": not compiled on " << threads << " threads";
        continue;
      }
      EXPECT_EQ(it->second, want) << key << ": another schedule on " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace heddle::collective
