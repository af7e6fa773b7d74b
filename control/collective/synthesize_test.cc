#include "control/collective/synthesize.h"

#include <cmath>
#include <string>

#include "control/collective/builtins.h"
#include "control/collective/testing/intents.h"
#include "control/collective/verifier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::collective {
namespace {

using ::testing::HasSubstr;

constexpr double kGbit = 1e9 / 8;

// Four regions, 10 Gbit/s and 30 ms between every pair, one pair 4x slower.
Topology Wan(uint32_t slow_a, uint32_t slow_b) {
  Topology t = testing::Mesh(4, 10 * kGbit, 0.030);
  testing::SetLink(t, slow_a, slow_b, 2.5 * kGbit);
  return t;
}

// A builtin in identity order compiled as a hard-wired library would run it: no relays.
double Baseline(const std::string& name, const Collective& c, const Topology& t, CompileOptions o) {
  Intent in = *ParseIntent(*BuiltinIntentText(name, c.kind), ExpandOptions{.ranks = c.ranks});
  o.multi_hop = false;
  absl::StatusOr<Schedule> s = Compile(in, t, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? s->predicted_s : 0;
}

TEST(Synthesize, BeatsRingAndDirectOnAnAsymmetricWan) {
  for (auto [a, b] : {std::pair{0u, 2u}, std::pair{0u, 1u}}) {
    for (Kind kind : {Kind::kAllGather, Kind::kAllReduce}) {
      Topology t = Wan(a, b);
      Collective c{kind, 4, 1};
      SynthesizeOptions o;
      o.compile.slot_bytes = 64 << 20;
      o.budget = 40;
      absl::StatusOr<Synthesized> s = Synthesize(c, t, o);
      ASSERT_TRUE(s.ok()) << s.status();
      const double ring = Baseline("ring", c, t, o.compile);
      const double direct = Baseline("direct", c, t, o.compile);
      const std::string what =
          absl::StrCat(KindName(kind), " slow ", a, "-", b, ": best ", s->best.name, " ",
                       s->schedule.predicted_s, " s, ring ", ring, " s, direct ", direct, " s");
      EXPECT_GE(std::min(ring, direct) / s->schedule.predicted_s, 1.3) << what;
      EXPECT_TRUE(VerifySchedule(s->schedule).ok()) << VerifySchedule(s->schedule);
      EXPECT_LE(s->tried.size(), 40u);
      EXPECT_EQ(s->intent.collective, c);
    }
  }
}

TEST(Synthesize, Deterministic) {
  Topology t = Wan(1, 3);
  SynthesizeOptions o;
  o.budget = 30;
  o.seed = 7;
  absl::StatusOr<Synthesized> x = Synthesize({Kind::kAllReduce, 4, 1}, t, o);
  absl::StatusOr<Synthesized> y = Synthesize({Kind::kAllReduce, 4, 1}, t, o);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->best.name, y->best.name);
  EXPECT_EQ(x->tried, y->tried);
  EXPECT_TRUE(x->schedule == y->schedule);
}

TEST(Synthesize, TriesEveryBuiltinAndParameter) {
  Topology t = testing::Mesh(6, kGbit, 0.01);
  SynthesizeOptions o;
  o.budget = 200;
  absl::StatusOr<Synthesized> s = Synthesize({Kind::kAllGather, 6, 1}, t, o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<std::string> names;
  for (const auto& [name, time] : s->tried) names.push_back(name);
  for (const char* want : {"ring order=identity", "direct order=identity", "tree order=identity",
                           "halving-doubling order=identity", "hierarchical G=2 order=identity",
                           "hierarchical G=3 order=identity"}) {
    EXPECT_THAT(names, ::testing::Contains(want));
  }
  // A symmetric mesh: the greedy order is the identity, so it is not tried twice.
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("ring order=greedy")));
  EXPECT_TRUE(s->failures.empty())
      << s->failures.front().first << ": " << s->failures.front().second;
  EXPECT_LE(s->tried.size(), 200u);
}

TEST(Synthesize, ExtraCandidatesAreCheckedAndMayWin) {
  Topology t = Wan(0, 2);
  SynthesizeOptions o;
  o.budget = 5;
  // Misses rank 3 entirely: parses, but breaks the all-gather's promises.
  o.extra.push_back(Candidate{"partial",
                              R"(intent partial
collective allgather
copy chunk(0, 0) from 0 to 1
)",
                              {}});
  o.extra.push_back(Candidate{"garbage", "intent ??", {}});
  o.extra.push_back(Candidate{"mine", *BuiltinIntentText("direct", Kind::kAllGather), {}});
  absl::StatusOr<Synthesized> s = Synthesize({Kind::kAllGather, 4, 1}, t, o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->tried.size(), 5u);
  EXPECT_EQ(s->tried[0].first, "partial");
  EXPECT_TRUE(std::isinf(s->tried[0].second));
  EXPECT_TRUE(std::isinf(s->tried[1].second));
  ASSERT_EQ(s->failures.size(), 2u);
  EXPECT_THAT(s->failures[1].second, HasSubstr("intent:1:"));
  EXPECT_NE(s->best.name, "partial");
  EXPECT_FALSE(std::isinf(s->tried[2].second));
}

TEST(Synthesize, BroadcastKeepsTheRoot) {
  Topology t = testing::Mesh(5, kGbit, 0.001);
  SynthesizeOptions o;
  o.budget = 20;
  absl::StatusOr<Synthesized> s = Synthesize({Kind::kBroadcast, 5, 1, 3}, t, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->schedule.collective.root, 3u);
  EXPECT_TRUE(VerifySchedule(s->schedule).ok()) << VerifySchedule(s->schedule);
}

TEST(Synthesize, RejectsMismatchedInput) {
  SynthesizeOptions o;
  EXPECT_FALSE(Synthesize({Kind::kAllGather, 3, 1}, testing::Mesh(4, kGbit, 0), o).ok());
  o.budget = 0;
  EXPECT_FALSE(Synthesize({Kind::kAllGather, 4, 1}, testing::Mesh(4, kGbit, 0), o).ok());
}

TEST(Synthesize, WidestRingAvoidsTheSlowLink) {
  Topology t = Wan(0, 1);
  std::vector<uint32_t> order = WidestRingOrder(t);
  ASSERT_EQ(order.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const uint32_t x = order[i], y = order[(i + 1) % 4];
    EXPECT_FALSE((x == 0 && y == 1) || (x == 1 && y == 0)) << i;
  }
  std::vector<uint32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<uint32_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace heddle::collective
