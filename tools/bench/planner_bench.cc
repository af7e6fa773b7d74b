// planner_bench: straggler idle and useful tokens per second with the GeoMesh planner against
// equal batches and inner steps, on simulated heterogeneous workers (control/planner/sim.h,
// docs/planner.md §7). Prints, per speed mix and noise level, the median and range over seeds of
//   idle ratio        = straggler idle (GPU·s) with equal steps ÷ with the planner
//   throughput ratio  = useful tokens per wall second with the planner ÷ with equal steps
//
//   build/control/planner/planner_bench [--rounds 500] [--seeds 5] [--json]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "control/planner/sim.h"

namespace {

using heddle::planner::SimComparison;
using heddle::planner::SimConfig;
using heddle::planner::SimWorker;
using heddle::planner::SolverConfig;

struct Mix {
  std::string name;
  std::vector<SimWorker> workers;
};

std::vector<SimWorker> Speeds(const std::vector<double>& rel, const std::vector<int64_t>& mem,
                              int copies = 1) {
  std::vector<SimWorker> out;
  for (int c = 0; c < copies; ++c) {
    for (size_t i = 0; i < rel.size(); ++i) {
      out.push_back({absl::StrFormat("w%02d", static_cast<int>(out.size())), 10000 * rel[i], 4,
                     mem.size() == 1 ? mem[0] : mem[i]});
    }
  }
  return out;
}

struct Noise {
  std::string name;
  double step, round, drift, hiccup;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rounds = 500;
  int seeds = 5;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--seeds") && i + 1 < argc) {
      seeds = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      std::fprintf(stderr, "usage: %s [--rounds N] [--seeds S] [--json]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1 || seeds < 1) {
    std::fprintf(stderr, "--rounds and --seeds must be >= 1\n");
    return 2;
  }
  const std::vector<Mix> mixes = {
      {"1:2:4", Speeds({1, 2, 4}, {32})},
      {"1:2:4 mem 16/32/64", Speeds({1, 2, 4}, {16, 32, 64})},
      {"1:1:4", Speeds({1, 1, 4}, {32})},
      {"2:3 x4", Speeds({2, 3}, {32}, 4)},
      {"1..8", Speeds({1, 2, 3, 4, 5, 6, 7, 8}, {32})},
      {"1:2:4 x8", Speeds({1, 2, 4}, {32}, 8)},
  };
  const std::vector<Noise> noises = {
      {"base", 0.05, 0.02, 0.01, 0},
      {"noisy", 0.10, 0.05, 0.02, 0.001},
  };
  if (!json) {
    std::printf(
        "planner_bench: %lld rounds x %d seeds; T = 600 s, WAN exchange 30 s (not overlapped), "
        "seq_len 2048, inner steps 10..1000, r(b) = peak*b/(b+4), slowest peak 10k tokens/s\n"
        "noise base: step 5%%, round 2%%, drift 1%%/round; noisy: step 10%%, round 5%%, "
        "drift 2%%/round, 0.1%% of steps 3x long\n\n",
        static_cast<long long>(rounds), seeds);
    std::printf("%-20s %-6s %4s %-10s %-15s %9s %9s %-22s %-22s %7s %9s\n", "mix", "noise", "N",
                "equal b*H", "planner b / H", "idle eq", "idle pl", "idle ratio [min,max]",
                "tput ratio [min,max]", "replans", "over T");
  } else {
    std::printf("[\n");
  }
  bool first = true;
  for (const Noise& nz : noises) {
    for (const Mix& mix : mixes) {
      std::vector<double> idle_ratio, tput_ratio, idle_eq, idle_pl, replans, over;
      SimComparison last;
      for (int s = 0; s < seeds; ++s) {
        SimConfig c;
        c.workers = mix.workers;
        c.planner.solver = SolverConfig{.target_round_s = 600,
                                        .min_inner_steps = 10,
                                        .max_inner_steps = 1000,
                                        .seq_len = 2048,
                                        .comm_s = 30};
        c.rounds = rounds;
        c.step_noise = nz.step;
        c.round_noise = nz.round;
        c.drift = nz.drift;
        c.hiccup_prob = nz.hiccup;
        c.seed = 1000 + s;
        absl::StatusOr<SimComparison> r = heddle::planner::Simulate(c);
        if (!r.ok()) {
          std::fprintf(stderr, "%s: %s\n", mix.name.c_str(), r.status().ToString().c_str());
          return 1;
        }
        idle_ratio.push_back(r->idle_ratio);
        tput_ratio.push_back(r->throughput_ratio);
        idle_eq.push_back(r->equal.idle_fraction);
        idle_pl.push_back(r->planner.idle_fraction);
        replans.push_back(static_cast<double>(r->planner.replans));
        over.push_back(r->planner.rounds_over_target);
        last = *r;
      }
      const auto [imin, imax] = std::minmax_element(idle_ratio.begin(), idle_ratio.end());
      const auto [tmin, tmax] = std::minmax_element(tput_ratio.begin(), tput_ratio.end());
      if (json) {
        std::printf(
            "%s  {\"mix\": \"%s\", \"noise\": \"%s\", \"workers\": %zu, \"idle_ratio\": %.3f, "
            "\"idle_ratio_min\": %.3f, \"idle_ratio_max\": %.3f, \"throughput_ratio\": %.4f, "
            "\"idle_fraction_equal\": %.4f, \"idle_fraction_planner\": %.4f, \"replans\": %.1f}",
            first ? "" : ",\n", mix.name.c_str(), nz.name.c_str(), mix.workers.size(),
            Median(idle_ratio), *imin, *imax, Median(tput_ratio), Median(idle_eq), Median(idle_pl),
            Median(replans));
        first = false;
        continue;
      }
      std::printf(
          "%-20s %-6s %4zu %-10s %-15s %8.1f%% %8.2f%% %6.1fx [%5.1f,%5.1f] %6.2fx [%5.2f,%5.2f] "
          "%7.1f %8.0f%%\n",
          mix.name.c_str(), nz.name.c_str(), mix.workers.size(),
          absl::StrFormat("%dx%d", last.equal.batch_size_min, last.equal.inner_steps_min).c_str(),
          absl::StrFormat("%d-%d / %d-%d", last.planner.batch_size_min, last.planner.batch_size_max,
                          last.planner.inner_steps_min, last.planner.inner_steps_max)
              .c_str(),
          100 * Median(idle_eq), 100 * Median(idle_pl), Median(idle_ratio), *imin, *imax,
          Median(tput_ratio), *tmin, *tmax, Median(replans), 100 * Median(over));
    }
  }
  if (json) std::printf("\n]\n");
  return 0;
}
