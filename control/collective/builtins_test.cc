#include "control/collective/builtins.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/collective/dsl.h"
#include "control/collective/intent_check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::collective {
namespace {

constexpr Kind kAllKinds[] = {Kind::kAllGather, Kind::kReduceScatter, Kind::kAllReduce,
                              Kind::kBroadcast, Kind::kReduce,        Kind::kAllToAll};

std::vector<uint32_t> Divisors(uint32_t n) {
  std::vector<uint32_t> d;
  for (uint32_t g = 1; g <= n; ++g) {
    if (n % g == 0) d.push_back(g);
  }
  return d;
}

// A rank order that is not the identity: a fixed shuffle, so the order mapping is exercised.
std::vector<uint32_t> Shuffled(uint32_t n) {
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = (i * 7 + 3) % n;
  // (7i + 3) mod n is a permutation when gcd(7, n) = 1; fall back to reversal otherwise.
  if (n % 7 == 0) {
    for (uint32_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  }
  return order;
}

TEST(Builtins, NamesAndForms) {
  EXPECT_THAT(BuiltinNames(),
              ::testing::ElementsAre("ring", "direct", "tree", "halving-doubling", "hierarchical"));
  EXPECT_EQ(BuiltinKinds("ring").size(), 5u);
  EXPECT_EQ(BuiltinKinds("direct").size(), 6u);
  EXPECT_EQ(BuiltinKinds("tree").size(), 5u);
  EXPECT_EQ(BuiltinKinds("halving-doubling").size(), 3u);
  EXPECT_EQ(BuiltinKinds("hierarchical").size(), 6u);
  EXPECT_TRUE(BuiltinKinds("nope").empty());
  EXPECT_EQ(BuiltinIntentText("ring", Kind::kAllToAll).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(BuiltinIntentText("halving-doubling", Kind::kBroadcast).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(BuiltinIntentText("butterfly", Kind::kAllReduce).status().code(),
            absl::StatusCode::kNotFound);
}

// The acceptance test of the builtins: every builtin, every kind it has a form for, every N in
// 2..64, K in {1, 2}, identity and shuffled rank orders (and for rooted kinds, several roots;
// for hierarchical, every group size dividing N) expands without error or warning and passes
// CheckIntent.
TEST(Builtins, EveryBuiltinKeepsItsPromiseOn2To64Ranks) {
  uint64_t checked = 0;
  for (const std::string& name : BuiltinNames()) {
    for (Kind kind : kAllKinds) {
      absl::StatusOr<std::string> text = BuiltinIntentText(name, kind);
      if (!text.ok()) continue;
      for (uint32_t n = 2; n <= 64; ++n) {
        const bool rooted = kind == Kind::kBroadcast || kind == Kind::kReduce;
        std::vector<int64_t> roots = {0};
        if (rooted) roots = {0, n - 1, n / 2};
        std::vector<int64_t> groups = {0};
        if (name == "hierarchical") {
          groups.clear();
          for (uint32_t g : Divisors(n)) groups.push_back(g);
        }
        for (uint32_t k : {1u, 2u}) {
          for (bool shuffle : {false, true}) {
            for (int64_t root : roots) {
              for (int64_t g : groups) {
                ExpandOptions o{.ranks = n, .chunks_per_rank = k};
                if (shuffle) o.order = Shuffled(n);
                if (rooted) o.params["root"] = root;
                if (g != 0) o.params["G"] = g;
                const std::string what =
                    absl::StrCat(name, " ", KindName(kind), " N=", n, " K=", k,
                                 " shuffled=", shuffle, " root=", root, " G=", g);
                std::vector<Diagnostic> diags;
                absl::StatusOr<Intent> intent = ParseIntent(*text, o, &diags);
                ASSERT_TRUE(intent.ok()) << what << ": " << intent.status();
                EXPECT_TRUE(diags.empty()) << what << ": " << DiagnosticsJson(diags);
                EXPECT_EQ(intent->name, name);
                EXPECT_EQ(intent->collective.kind, kind);
                EXPECT_EQ(intent->collective.ranks, n);
                EXPECT_EQ(intent->collective.chunks_per_rank, k);
                if (rooted) {
                  EXPECT_EQ(intent->collective.root, root);
                }
                absl::Status s = CheckIntent(*intent);
                ASSERT_TRUE(s.ok()) << what << ": " << s;
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 4000u);
}

// The default G (4) refuses a rank count it does not divide with the require's message.
TEST(Builtins, HierarchicalRequiresTheGroupSizeToDivideN) {
  absl::StatusOr<std::string> text = BuiltinIntentText("hierarchical", Kind::kAllReduce);
  ASSERT_TRUE(text.ok());
  std::vector<Diagnostic> diags;
  absl::StatusOr<Intent> i = ParseIntent(*text, {.ranks = 6}, &diags);
  ASSERT_FALSE(i.ok());
  EXPECT_THAT(i.status().message(),
              ::testing::HasSubstr("the group size G must divide the rank count N"));
  ASSERT_FALSE(diags.empty());
  EXPECT_EQ(diags.back().code, "require-failed");
  EXPECT_TRUE(ParseIntent(*text, {.ranks = 8}).ok());
}

// Move counts that pin the shape of each algorithm (N = 8, K = 1).
TEST(Builtins, MoveCountsMatchTheAlgorithms) {
  auto moves = [](std::string_view name, Kind kind, uint32_t n) -> size_t {
    absl::StatusOr<std::string> text = BuiltinIntentText(name, kind);
    if (!text.ok()) return 0;
    absl::StatusOr<Intent> i = ParseIntent(*text, {.ranks = n});
    return i.ok() ? i->moves.size() : 0;
  };
  EXPECT_EQ(moves("ring", Kind::kAllReduce, 8), 2u * 7 * 8);
  EXPECT_EQ(moves("direct", Kind::kAllGather, 8), 8u * 7);
  EXPECT_EQ(moves("direct", Kind::kAllToAll, 8), 8u * 7);
  EXPECT_EQ(moves("tree", Kind::kBroadcast, 8), 7u);
  EXPECT_EQ(moves("ring", Kind::kBroadcast, 8), 7u);
  // Halving-doubling on a power of two: log2(8) rounds of N moves of N/2.. blocks each way.
  EXPECT_EQ(moves("halving-doubling", Kind::kAllReduce, 8), 2u * 8 * (4 + 2 + 1));
  // Hierarchical all-reduce, G = 4, two groups: intra RS 2·3·4, inter RS+AG 4·2·1·2, intra AG.
  EXPECT_EQ(moves("hierarchical", Kind::kAllReduce, 8), 2u * (2 * 3 * 4 * 2) + 4 * 2 * 2);
}

// Big rank counts work and stay within the default move budget.
TEST(Builtins, FiveHundredTwelveRanks) {
  for (const std::string& name : BuiltinNames()) {
    absl::StatusOr<std::string> text = BuiltinIntentText(name, Kind::kAllReduce);
    ASSERT_TRUE(text.ok());
    absl::StatusOr<Intent> i = ParseIntent(*text, {.ranks = 512});
    ASSERT_TRUE(i.ok()) << name << ": " << i.status();
    EXPECT_TRUE(CheckIntent(*i).ok()) << name;
  }
  absl::StatusOr<std::string> a2a = BuiltinIntentText("hierarchical", Kind::kAllToAll);
  ASSERT_TRUE(a2a.ok());
  absl::StatusOr<Intent> i = ParseIntent(*a2a, {.ranks = 512, .params = {{"G", 16}}});
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_TRUE(CheckIntent(*i).ok());
}

}  // namespace
}  // namespace heddle::collective
