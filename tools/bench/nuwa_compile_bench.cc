// nuwa_compile_bench: how long the Nüwa compiler takes to turn a fabric into its forwarding
// artifacts, and how many bytes they take, against the plain BFS oracle (one valley-free BFS per
// destination host, the HPCC-lineage simulators' routing setup) measured in the same run.
//
//   nuwa_compile_bench [--oracle-budget SECONDS] [--failures LINKS] [--seed N] [--only NAME]
//
// Per fabric: compile time (median of repeated runs), artifact bytes and exceptions; the oracle's
// full per-(node, destination) table generation, timed over every destination when that fits the
// budget (default 20 s), else over a sample of destinations and extrapolated linearly (stated on
// the line); the ratio oracle / compile; then the same compile with random failures. Times are
// the thread's CPU time.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "control/nuwa/compiler.h"
#include "control/nuwa/oracle.h"
#include "control/nuwa/testing/random_fabric.h"

namespace heddle::nuwa {
namespace {

// Thread CPU time: the machines here are shared, so wall time would charge other jobs' load to
// whichever side happened to run under it. Both sides are single-threaded.
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
};

double Seconds(double a, double b) { return b - a; }

struct CompileTiming {
  double median_s = 0;
  int runs = 0;
  Compiled out;
};

CompileTiming TimeCompile(const Fabric& f) {
  CompileTiming t;
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 3 || (Seconds(start, Clock::now()) < 0.5 && times.size() < 201)) {
    const auto a = Clock::now();
    auto c = Compile(f);
    const auto b = Clock::now();
    if (!c.ok()) {
      std::fprintf(stderr, "compile %s: %s\n", f.name.c_str(),
                   std::string(c.status().message()).c_str());
      std::exit(1);
    }
    times.push_back(Seconds(a, b));
    t.out = std::move(*c);
  }
  std::sort(times.begin(), times.end());
  t.median_s = times[times.size() / 2];
  t.runs = static_cast<int>(times.size());
  return t;
}

struct OracleTiming {
  double total_s = 0;  // measured or extrapolated
  double build_s = 0;
  uint64_t measured = 0, destinations = 0;
  uint64_t entries = 0;  // (switch, destination) entries: live switches x destinations
};

OracleTiming TimeOracle(const Fabric& f, double budget_s, std::mt19937& rng) {
  OracleTiming t;
  const auto a = Clock::now();
  Oracle o(f);
  t.build_s = Seconds(a, Clock::now());
  const uint32_t hosts = static_cast<uint32_t>(NodeCount(f.shape, 0));
  t.destinations = hosts;
  uint64_t switches = 0;
  for (uint32_t p = 0; p < f.shape.planes; ++p) {
    for (int tier = 1; tier <= f.shape.tiers; ++tier) switches += NodeCount(f.shape, tier);
  }
  t.entries = switches * hosts;
  // A sample first, then the rest when the whole run fits the budget.
  std::vector<uint32_t> order(hosts);
  for (uint32_t i = 0; i < hosts; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  uint64_t sink = 0;
  double spent = 0;
  const auto s0 = Clock::now();
  uint64_t n = 0;
  for (; n < hosts; ++n) {
    const auto table = o.AllNextHops(order[n]);
    sink += table.size() + table[order[n]].ports.size();
    spent = Seconds(s0, Clock::now());
    // Stop sampling once the whole run is known to exceed the budget and the sample has had
    // a couple of seconds (or 8 destinations, whichever is more).
    if (n + 1 >= 8 && n + 1 < hosts && (spent / (n + 1)) * hosts > budget_s &&
        spent >= std::min(2.0, budget_s / 10)) {
      ++n;
      break;
    }
  }
  t.measured = n;
  t.total_s = t.build_s + spent / static_cast<double>(n) * static_cast<double>(hosts);
  if (sink == 42) std::printf(" ");
  return t;
}

void Row(const Fabric& f, double budget_s, int failure_links, std::mt19937& rng) {
  const CompileTiming c = TimeCompile(f);
  const OracleTiming o = TimeOracle(f, budget_s, rng);
  uint64_t switches = 0;
  for (int tier = 1; tier <= f.shape.tiers; ++tier) switches += NodeCount(f.shape, tier);
  switches *= f.shape.planes;
  std::printf(
      "%-28s hosts %7llu switches %6llu | compile %9.3f ms (median of %d) bytes %6llu "
      "exceptions %llu | oracle %10.3f s ",
      f.name.c_str(), static_cast<unsigned long long>(NodeCount(f.shape, 0)),
      static_cast<unsigned long long>(switches), c.median_s * 1e3, c.runs,
      static_cast<unsigned long long>(c.out.stats.bytes),
      static_cast<unsigned long long>(c.out.stats.exceptions), o.total_s);
  if (o.measured < o.destinations) {
    std::printf("(extrapolated from %llu of %llu destinations) ",
                static_cast<unsigned long long>(o.measured),
                static_cast<unsigned long long>(o.destinations));
  } else {
    std::printf("(all %llu destinations) ", static_cast<unsigned long long>(o.destinations));
  }
  std::printf("%.3g entries | oracle/compile %.3gx\n", static_cast<double>(o.entries),
              o.total_s / c.median_s);

  Fabric ff = f;
  testing::AddRandomFailures(rng, ff, failure_links, 1);
  const CompileTiming cf = TimeCompile(ff);
  std::printf(
      "%-28s   with %d failed links + 1 switch: compile %9.3f ms, bytes %llu, node masks "
      "%llu, overrides %llu (%llu wildcards), host destination exceptions %llu, destinations "
      "re-evaluated %llu\n",
      "", failure_links, cf.median_s * 1e3, static_cast<unsigned long long>(cf.out.stats.bytes),
      static_cast<unsigned long long>(cf.out.stats.node_masks),
      static_cast<unsigned long long>(cf.out.stats.overrides),
      static_cast<unsigned long long>(cf.out.stats.wildcards),
      static_cast<unsigned long long>(cf.out.stats.dst_exceptions),
      static_cast<unsigned long long>(cf.out.stats.affected_destinations));
  std::fflush(stdout);
}

}  // namespace
}  // namespace heddle::nuwa

int main(int argc, char** argv) {
  using namespace heddle::nuwa;
  double budget = 20;
  int failures = 8;
  unsigned seed = 1;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--oracle-budget") {
      budget = std::atof(next());
    } else if (a == "--failures") {
      failures = std::atoi(next());
    } else if (a == "--seed") {
      seed = static_cast<unsigned>(std::atoi(next()));
    } else if (a == "--only") {
      only = next();
    } else {
      std::fprintf(stderr,
                   "usage: nuwa_compile_bench [--oracle-budget SECONDS] [--failures LINKS] "
                   "[--seed N] [--only NAME]\n");
      return 2;
    }
  }
  std::mt19937 rng(seed);
  std::vector<Fabric> fabrics;
  for (uint32_t k : {8u, 16u, 32u, 64u}) fabrics.push_back(testing::FatTree(k));
  // 32,768 GPUs: 8 rails, 32 servers per scale unit, radix-64 switches. A leaf takes one rail of
  // one SU (32 NICs down, 32 up); a pod is 4 SUs x 8 rails = 32 leaves under 32 spines; 32 pods
  // under 32 x 32 cores (m = (32, 32, 32), w = (1, 32, 32)).
  Fabric rail = testing::RailOptimized(32, 8, 4, 32, 32, 32, 1);
  rail.name = "rail-optimized-32k";
  fabrics.push_back(rail);
  std::printf(
      "nuwa_compile_bench: oracle budget %.0f s per fabric, seed %u; bytes are the "
      "artifacts' serialized sizes (all roles)\n",
      budget, seed);
  for (const Fabric& f : fabrics) {
    if (!only.empty() && f.name.find(only) == std::string::npos) continue;
    Row(f, budget, failures, rng);
  }
  return 0;
}
