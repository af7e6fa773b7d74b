// File: tools/bench/fwd_lookup_bench.cc
//
// Nüwa's switch lookup (dataplane/fwd SwitchTable) against DPDK's rte_fib (DIR-24-8) holding the
// equivalent routes, for one tier-1, tier-2 and tier-3 switch of a k=64 fat tree (65,536 hosts),
// in one run: the same destinations (uniformly random hosts), bursts of 32, runs interleaved.
//
//   ninja -C build fwd_lookup_bench && build/tools/bench/fwd_lookup_bench [--rounds 5]
//       [--nh-bytes 2|4|8] [--dsts 1048576] [--seconds 0.25] [--raw-ids] [--dead-hosts N]
//
// rte_fib gets the routes two ways, both checked equal to SwitchTable for every host before
// timing:
//   per-host   one /32 per destination host (65,536 routes): the per-destination table of a
//              conventional control plane; next hop = the down port, or an ECMP group id (64 +
//              the group) for destinations reached upwards.
//   per-group  one /27 per tier-1 group (2,048 routes; a tier-1 switch keeps /32s for its own
//              32 hosts): the same answers with the host digit a_1 aggregated away.
// Next hops take the smallest DIR-24-8 entry that fits unless --nh-bytes says otherwise: 2 bytes,
// since an entry also holds the index of its tbl8 group (at most 2^(8 * bytes - 1) - 1 groups) and
// the /32s of 256 /24s need 256 groups, beyond 1-byte entries' 127. Memory: rte_fib's tbl24 + tbl8
// as configured (its RIB, used only for updates, is not counted); ours:
// SwitchTable::memory_bytes(). rte_fib's lookup is timed both as its scalar implementation and,
// where this DPDK build and CPU have it, its AVX-512 one; the ratio is against the faster of the
// two. Both sides end with the same next-hop set per destination, consumed the same way:
// SwitchTable answers with it, and rte_fib's next-hop id is turned into it through a 128-entry
// table (an L1 load; what a dataplane using rte_fib does with the id). --raw-ids times rte_fib's
// ids alone (a lower bound on its cost, for reference).
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_fib.h>
#include <rte_lcore.h>
#include <rte_memory.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dataplane/fwd/artifact.h"
#include "dataplane/fwd/fwd_test_util.h"

namespace {

using namespace heddle::fwd;
using Clock = std::chrono::steady_clock;

constexpr int kBurst = 32;
constexpr uint64_t kNotInFabric = 127;

struct Options {
  int rounds = 5;
  int nh_bytes = 2;
  size_t dsts = 1 << 20;
  double seconds = 0.25;
  bool raw_ids = false;     // time rte_fib's ids without turning them into next-hop sets
  uint32_t dead_hosts = 0;  // hosts unreachable through wildcard overrides
};

// Next-hop ids shared by both sides: down ports as themselves, each distinct up set 64 + i.
class NextHopIds {
 public:
  uint64_t Id(const NextHops& h) {
    switch (h.kind) {
      case HopKind::kDown:
        return h.down_port;
      case HopKind::kUp: {
        auto [it, fresh] = up_.emplace(h.up_mask, 64 + up_.size());
        return it->second;
      }
      default:
        return kNotInFabric;
    }
  }
  // The next-hop set of every id (ids < 128): what a dataplane turns rte_fib's answer into.
  std::vector<NextHops> Sets() const {
    std::vector<NextHops> sets(kNotInFabric + 1, NextHops{HopKind::kNotInFabric, 0, 0});
    for (uint16_t p = 0; p < 64; ++p) sets[p] = NextHops{HopKind::kDown, p, 0};
    for (const auto& [mask, id] : up_) sets[id] = NextHops{HopKind::kUp, 0, mask};
    return sets;
  }

 private:
  std::map<uint64_t, uint64_t> up_;
};

struct Fib {
  rte_fib* fib = nullptr;
  size_t bytes = 0;
  size_t routes = 0;
};

Fib MakeFib(const char* name, int nh_bytes, uint32_t num_tbl8, size_t max_routes) {
  rte_fib_conf conf{};
  conf.type = RTE_FIB_DIR24_8;
  conf.default_nh = kNotInFabric;
  conf.max_routes = static_cast<int>(max_routes);
  conf.rib_ext_sz = 0;
  const int sz = nh_bytes == 8 ? 3 : nh_bytes == 4 ? 2 : nh_bytes == 2 ? 1 : 0;
  conf.dir24_8.nh_sz = static_cast<rte_fib_dir24_8_nh_sz>(sz);
  conf.dir24_8.num_tbl8 = num_tbl8;
  Fib f;
  f.fib = rte_fib_create(name, SOCKET_ID_ANY, &conf);
  if (f.fib == nullptr) {
    std::fprintf(stderr, "rte_fib_create(%s) failed: %s\n", name, rte_strerror(rte_errno));
    std::exit(1);
  }
  // dir24_8_create: tbl24 of 2^24 entries, (num_tbl8 + 1) groups of 256 entries.
  f.bytes = (size_t{1} << 24) * nh_bytes + size_t{num_tbl8 + 1} * 256 * nh_bytes;
  return f;
}

void Add(Fib& f, uint32_t ip, uint8_t depth, uint64_t nh) {
  if (rte_fib_add(f.fib, ip, depth, nh) != 0) {
    std::fprintf(stderr, "rte_fib_add failed\n");
    std::exit(1);
  }
  ++f.routes;
}

// Lookups per second of `fn(first, count)` over the destination array, best of one timed
// stretch of `seconds`.
template <typename Fn>
double Rate(const std::vector<uint32_t>& dst, double seconds, Fn fn) {
  size_t done = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    for (size_t i = 0; i + kBurst <= dst.size(); i += kBurst) fn(i);
    done += dst.size() / kBurst * kBurst;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return done / elapsed;
}

volatile uint64_t g_sink;

void RunNode(uint8_t tier, uint32_t index, const Options& opt, const std::vector<uint32_t>& hosts,
             const std::vector<testing::Label>& labels, const std::vector<uint32_t>& dst) {
  ArtifactSpec spec = testing::FatTree(64, Role::kSwitch, tier);
  // --dead-hosts: hosts whose only link failed, unreachable from every switch of the plane (the
  // compiler's wildcard overrides); every other destination keeps the failure-free answer.
  std::vector<bool> dead(hosts.size() + 1, false);  // [hosts.size()]: "no host", never dead
  for (uint32_t i = 0; i < opt.dead_hosts; ++i) {
    const uint32_t h = static_cast<uint32_t>((uint64_t{i} * 7919 + 13) % hosts.size());
    if (dead[h]) continue;
    dead[h] = true;
    OverrideSpec o;
    o.plane = 0;
    o.node = kAllNodes;
    o.level = 0;
    o.dst = h;
    o.hops.kind = HopKind::kUnreachable;
    spec.overrides.push_back(o);
  }
  std::sort(spec.overrides.begin(), spec.overrides.end(),
            [](const OverrideSpec& x, const OverrideSpec& y) { return x.dst < y.dst; });
  absl::StatusOr<SwitchTable> table = SwitchTable::Build(spec, 0, index);
  if (!table.ok()) {
    std::fprintf(stderr, "%s\n", std::string(table.status().message()).c_str());
    std::exit(1);
  }
  // The node's own a-digits, from the enumerated labels (not from the table).
  const testing::Label self = testing::Model(spec.shape).Labels(tier)[index];
  NextHopIds ids;
  auto route_of = [&](const testing::Label& h, size_t host) {
    if (dead[host]) return ids.Id(NextHops{HopKind::kUnreachable, 0, 0});
    int lca = 0;
    for (int j = tier + 1; j <= 3; ++j) {
      if (h.a[j] != self.a[j]) lca = j;
    }
    if (lca == 0) return ids.Id(NextHops{HopKind::kDown, static_cast<uint16_t>(h.a[tier]), 0});
    return ids.Id(NextHops{HopKind::kUp, 0, (uint64_t{1} << spec.shape.w[tier + 1]) - 1});
  };
  // One /24 holds 256 hosts: the fabric's /16 needs 256 tbl8 groups; a few spare.
  const uint32_t kTbl8 = 264;
  std::string name = "perhost" + std::to_string(tier);
  Fib per_host = MakeFib(name.c_str(), opt.nh_bytes, kTbl8, hosts.size() + 16);
  for (size_t h = 0; h < hosts.size(); ++h) Add(per_host, hosts[h], 32, route_of(labels[h], h));
  name = "pergroup" + std::to_string(tier);
  Fib per_group = MakeFib(name.c_str(), opt.nh_bytes, kTbl8, hosts.size() + 16);
  const uint32_t m1 = spec.shape.m[1];
  for (size_t g = 0; g < hosts.size() / m1; ++g) {
    const testing::Label& first = labels[g * m1];
    bool own_group = tier == 1;
    for (int j = 2; j <= 3; ++j) own_group = own_group && first.a[j] == self.a[j];
    if (own_group) {
      for (uint32_t h = 0; h < m1; ++h)
        Add(per_group, hosts[g * m1 + h], 32, route_of(labels[g * m1 + h], g * m1 + h));
    } else {
      Add(per_group, hosts[g * m1], 27, route_of(first, hosts.size()));  // the group's answer
      for (uint32_t h = 0; h < m1; ++h) {
        if (dead[g * m1 + h])
          Add(per_group, hosts[g * m1 + h], 32, route_of(labels[g * m1 + h], g * m1 + h));
      }
    }
  }
  // Equivalence, every host, before any timing.
  std::vector<uint32_t> all = hosts;
  std::vector<uint64_t> a(all.size()), b(all.size());
  std::vector<NextHops> ours(all.size());
  rte_fib_lookup_bulk(per_host.fib, all.data(), a.data(), static_cast<int>(all.size()));
  rte_fib_lookup_bulk(per_group.fib, all.data(), b.data(), static_cast<int>(all.size()));
  table->LookupBulk4(all.data(), ours.data(), all.size());
  for (size_t h = 0; h < all.size(); ++h) {
    const uint64_t want = ids.Id(ours[h]);
    if (a[h] != want || b[h] != want || ids.Id(table->Lookup4(all[h])) != want) {
      std::fprintf(stderr, "tier %u node %u host %zu: rte_fib %lu/%lu, SwitchTable %lu\n", tier,
                   index, h, a[h], b[h], want);
      std::exit(1);
    }
  }

  std::vector<uint32_t> d = dst;  // rte_fib wants a non-const array
  const std::vector<NextHops> sets = ids.Sets();
  const bool has_avx512 =
      rte_fib_select_lookup(per_host.fib, RTE_FIB_LOOKUP_DIR24_8_VECTOR_AVX512) == 0 &&
      rte_fib_select_lookup(per_group.fib, RTE_FIB_LOOKUP_DIR24_8_VECTOR_AVX512) == 0;
  struct Series {
    const char* name;
    std::vector<double> rates;
  };
  std::vector<Series> series = {{"nuwa Lookup4", {}},
                                {"nuwa LookupBulk4", {}},
                                {"rte_fib per-host scalar", {}},
                                {"rte_fib per-host avx512", {}},
                                {"rte_fib per-group scalar", {}},
                                {"rte_fib per-group avx512", {}}};
  for (int round = 0; round < opt.rounds; ++round) {
    for (size_t k = 0; k < series.size(); ++k) {
      const size_t s = (k + round) % series.size();  // rotate the order every round
      uint64_t sum = 0;
      double r = 0;
      if (s == 0) {
        r = Rate(d, opt.seconds, [&](size_t i) {
          for (int j = 0; j < kBurst; ++j) {
            const NextHops h = table->Lookup4(d[i + j]);
            sum += h.down_port + h.up_mask;
          }
        });
      } else if (s == 1) {
        NextHops out[kBurst];
        r = Rate(d, opt.seconds, [&](size_t i) {
          table->LookupBulk4(&d[i], out, kBurst);
          for (int j = 0; j < kBurst; ++j) sum += out[j].down_port + out[j].up_mask;
        });
      } else {
        Fib& f = s <= 3 ? per_host : per_group;
        const bool avx = s == 3 || s == 5;
        if (avx && !has_avx512) continue;
        rte_fib_select_lookup(f.fib, avx ? RTE_FIB_LOOKUP_DIR24_8_VECTOR_AVX512
                                         : RTE_FIB_LOOKUP_DIR24_8_SCALAR_INLINE);
        uint64_t out[kBurst];
        if (opt.raw_ids) {
          r = Rate(d, opt.seconds, [&](size_t i) {
            rte_fib_lookup_bulk(f.fib, &d[i], out, kBurst);
            for (int j = 0; j < kBurst; ++j) sum += out[j];
          });
        } else {
          // The id to its next-hop set, consumed as SwitchTable's answers are.
          r = Rate(d, opt.seconds, [&](size_t i) {
            rte_fib_lookup_bulk(f.fib, &d[i], out, kBurst);
            for (int j = 0; j < kBurst; ++j) {
              const NextHops& h = sets[out[j]];
              sum += h.down_port + h.up_mask;
            }
          });
        }
      }
      g_sink = sum;
      series[s].rates.push_back(r);
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("\n%s[%u] (tier %u): %zu destination hosts, %zu lookups per run, %d rounds\n",
              tier == 1   ? "tor"
              : tier == 2 ? "agg"
                          : "core",
              index, tier, hosts.size(), dst.size(), opt.rounds);
  std::printf("  %-26s %10s  %s\n", "", "Mlookups/s", "median [min, max]");
  for (const Series& s : series) {
    if (s.rates.empty()) {
      std::printf("  %-26s %10s\n", s.name, "n/a");
      continue;
    }
    std::printf("  %-26s %10.1f  [%.1f, %.1f]\n", s.name, median(s.rates) / 1e6,
                *std::min_element(s.rates.begin(), s.rates.end()) / 1e6,
                *std::max_element(s.rates.begin(), s.rates.end()) / 1e6);
  }
  // Ratios paired within a round, against the faster rte_fib implementation of that round.
  for (int variant : {2, 4}) {
    std::vector<double> single, bulk;
    for (int r = 0; r < opt.rounds; ++r) {
      double ref = series[variant].rates[r];
      if (has_avx512) ref = std::max(ref, series[variant + 1].rates[r]);
      single.push_back(series[0].rates[r] / ref);
      bulk.push_back(series[1].rates[r] / ref);
    }
    std::printf(
        "  ratio vs rte_fib %-9s  Lookup4 %.2fx [%.2f, %.2f]  LookupBulk4 %.2fx [%.2f, %.2f]\n",
        variant == 2 ? "per-host" : "per-group", median(single),
        *std::min_element(single.begin(), single.end()),
        *std::max_element(single.begin(), single.end()), median(bulk),
        *std::min_element(bulk.begin(), bulk.end()), *std::max_element(bulk.begin(), bulk.end()));
  }
  std::printf(
      "  memory: nuwa %zu B; rte_fib (%d-byte next hops) %zu B tbl24+tbl8 (%zu per-host "
      "routes, %zu per-group routes): nuwa = 1/%.0f\n",
      table->memory_bytes(), opt.nh_bytes, per_host.bytes, per_host.routes, per_group.routes,
      static_cast<double>(per_host.bytes) / table->memory_bytes());
  rte_fib_free(per_host.fib);
  rte_fib_free(per_group.fib);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rounds") {
      opt.rounds = std::max(1, std::atoi(next()));
    } else if (a == "--nh-bytes") {
      opt.nh_bytes = std::atoi(next());
    } else if (a == "--dsts") {
      opt.dsts = std::max<size_t>(kBurst, std::strtoull(next(), nullptr, 10));
    } else if (a == "--seconds") {
      opt.seconds = std::atof(next());
    } else if (a == "--raw-ids") {
      opt.raw_ids = true;
    } else if (a == "--dead-hosts") {
      opt.dead_hosts = static_cast<uint32_t>(std::strtoul(next(), nullptr, 10));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--rounds N] [--nh-bytes 1|2|4|8] [--dsts N] [--seconds S] "
                   "[--raw-ids] [--dead-hosts N]\n",
                   argv[0]);
      return 2;
    }
  }
  if (opt.nh_bytes != 1 && opt.nh_bytes != 2 && opt.nh_bytes != 4 && opt.nh_bytes != 8) {
    std::fprintf(stderr, "--nh-bytes: 1, 2, 4 or 8\n");
    return 2;
  }
  // No hugepages, no PCI, no runtime files; AVX-512 allowed so rte_fib may use its vector lookup.
  const char* eal[] = {"fwd_lookup_bench",
                       "-l",
                       "0",
                       "--no-huge",
                       "-m",
                       "1024",
                       "--no-pci",
                       "--no-shconf",
                       "--no-telemetry",
                       "--log-level=error",
                       "--force-max-simd-bitwidth=512"};
  if (rte_eal_init(static_cast<int>(std::size(eal)), const_cast<char**>(eal)) < 0) {
    std::fprintf(stderr, "rte_eal_init failed: %s\n", rte_strerror(rte_errno));
    return 1;
  }
  const ArtifactSpec shape = testing::FatTree(64, Role::kSwitch, 1);
  const std::vector<testing::Label> labels = testing::Model(shape.shape).Labels(0);
  std::vector<uint32_t> hosts;
  for (const testing::Label& l : labels) hosts.push_back(testing::Addr4(shape, l.a));
  std::mt19937_64 rng(42);
  std::vector<uint32_t> dst(opt.dsts);
  for (uint32_t& x : dst) x = hosts[rng() % hosts.size()];
  std::printf(
      "fat tree k=64: %zu hosts in 10.0.0.0/16, %zu random destinations (seed 42), "
      "bursts of %d\n",
      hosts.size(), dst.size(), kBurst);
  RunNode(1, 1000, opt, hosts, labels, dst);
  RunNode(2, 1000, opt, hosts, labels, dst);
  RunNode(3, 500, opt, hosts, labels, dst);
  rte_eal_cleanup();
  return 0;
}
