#include "control/collective/intent_check.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "control/collective/builtins.h"
#include "control/collective/dsl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::collective {
namespace {

using ::testing::HasSubstr;

Intent Expand(std::string_view builtin, Kind kind, uint32_t n, uint32_t k = 1) {
  absl::StatusOr<std::string> text = BuiltinIntentText(builtin, kind);
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<Intent> i = ParseIntent(*text, {.ranks = n, .chunks_per_rank = k});
  EXPECT_TRUE(i.ok()) << i.status();
  return *i;
}

TEST(IntentCheck, AcceptsAHandWrittenAllGather) {
  Intent i{"pair", {Kind::kAllGather, 2, 1}, {}};
  i.moves = {{MoveKind::kCopy, 0, 0, 1}, {MoveKind::kCopy, 1, 1, 0}};
  EXPECT_TRUE(CheckIntent(i).ok());
}

TEST(IntentCheck, EmptyIntentBreaksThePromise) {
  Intent i{"nothing", {Kind::kAllReduce, 3, 1}, {}};
  absl::Status s = CheckIntent(i);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("rank 0 slot 0 (chunk 0 of rank 0) holds {0} but must hold "
                        "{0-2} (it was never written)"));
}

TEST(IntentCheck, CatchesADroppedMove) {
  Intent i = Expand("ring", Kind::kAllReduce, 5);
  ASSERT_TRUE(CheckIntent(i).ok());
  // Drop the last all-gather move: its destination never gets the finished block.
  const Move dropped = i.moves.back();
  i.moves.pop_back();
  absl::Status s = CheckIntent(i);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("rank ", dropped.dst, " slot ", dropped.slot)));
  EXPECT_THAT(std::string(s.message()), HasSubstr("but must hold {0-4}"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("last written by the move at intent:"));
}

TEST(IntentCheck, CatchesADoubleReduce) {
  Intent i = Expand("direct", Kind::kReduceScatter, 4);
  // Repeat the first reduce: its source's contribution lands twice.
  Move again = i.moves.front();
  i.moves.insert(i.moves.begin() + 1, again);
  absl::Status s = CheckIntent(i);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrFormat("intent:%u:%u: reduce", again.line, again.column)));
  EXPECT_THAT(std::string(s.message()), HasSubstr("would be reduced twice"));
}

TEST(IntentCheck, CatchesAWrongDestination) {
  Intent i = Expand("ring", Kind::kAllGather, 4);
  // Send the first move to the wrong rank: its intended receiver then forwards nothing useful.
  ASSERT_EQ(i.moves[0], (Move{MoveKind::kCopy, 0, 0, 1, 6, 5}));
  i.moves[0].dst = 2;
  absl::Status s = CheckIntent(i);
  ASSERT_FALSE(s.ok());
  // Rank 1 never got block 0, so passing it on in the next step reads an empty slot.
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("copy slot 0 (chunk 0 of rank 0) from rank 1 to rank 2 "
                        "reads a slot that holds nothing on rank 1"));
}

// A bug in the program text: the ring all-reduce stops its all-gather one step short. The error
// names a rank that misses a finished block and the statement that last wrote it.
TEST(IntentCheck, CatchesABugInTheProgramText) {
  absl::StatusOr<std::string> text = BuiltinIntentText("ring", Kind::kAllReduce);
  ASSERT_TRUE(text.ok());
  std::string buggy = *text;
  const std::string ag = "for s in 0..N-1 {\n  for r in 0..N {\n    copy";
  const size_t at = buggy.find(ag);
  ASSERT_NE(at, std::string::npos);
  buggy.replace(at, 15, "for s in 0..N-2");
  absl::StatusOr<Intent> i = ParseIntent(buggy, {.ranks = 4});
  ASSERT_TRUE(i.ok()) << i.status();
  absl::Status s = CheckIntent(*i);
  ASSERT_FALSE(s.ok());
  // Rank 3 still holds the partial sum the reduce-scatter (line 7) left in slot 0.
  EXPECT_EQ(s.message(),
            "allreduce over 4 ranks: rank 3 slot 0 (chunk 0 of rank 0) holds {1-3} but must hold "
            "{0-3} (last written by the move at intent:7:5)");
}

TEST(IntentCheck, CatchesReadingAnEmptySlot) {
  Intent i{"bad", {Kind::kAllGather, 3, 1}, {}};
  i.moves = {{MoveKind::kCopy, 2, 0, 1, 7, 3}};
  absl::Status s = CheckIntent(i);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "intent:7:3: copy slot 2 (chunk 0 of rank 2) from rank 0 to rank 1 reads a slot that "
            "holds nothing on rank 0");
}

TEST(IntentCheck, CatchesSelfReduceAndOutOfRange) {
  Intent i{"bad", {Kind::kReduce, 3, 1, 0}, {}};
  i.moves = {{MoveKind::kReduce, 0, 1, 1}};
  EXPECT_THAT(std::string(CheckIntent(i).message()), HasSubstr("into itself"));
  i.moves = {{MoveKind::kCopy, 1, 1, 0}};
  EXPECT_THAT(std::string(CheckIntent(i).message()), HasSubstr("reduce over 3 ranks has 1 slots"));
  i.moves = {{MoveKind::kCopy, 0, 3, 0}};
  EXPECT_THAT(std::string(CheckIntent(i).message()), HasSubstr("a rank is not one of the 3 ranks"));
  i.collective.ranks = 0;
  EXPECT_FALSE(CheckIntent(i).ok());
}

TEST(IntentCheck, ReduceIntoAnEmptySlotActsAsACopy) {
  Intent i{"rs", {Kind::kReduceScatter, 2, 1}, {}};
  // Reduce-scatter: rank 1 needs slot 1 from both; rank 0 reduces into it.
  i.moves = {{MoveKind::kReduce, 1, 0, 1}, {MoveKind::kReduce, 0, 1, 0}};
  EXPECT_TRUE(CheckIntent(i).ok());
  Intent g{"ag", {Kind::kAllGather, 2, 1}, {}};
  g.moves = {{MoveKind::kReduce, 0, 0, 1}, {MoveKind::kReduce, 1, 1, 0}};
  EXPECT_TRUE(CheckIntent(g).ok());
}

TEST(IntentCheck, AllToAllPromisesOnlyTheDestination) {
  Intent i{"a2a", {Kind::kAllToAll, 2, 1}, {}};
  // slot (0,1) = 1 to rank 1, slot (1,0) = 2 to rank 0.
  i.moves = {{MoveKind::kCopy, 1, 0, 1}, {MoveKind::kCopy, 2, 1, 0}};
  EXPECT_TRUE(CheckIntent(i).ok());
  i.moves.pop_back();
  EXPECT_THAT(std::string(CheckIntent(i).message()),
              HasSubstr("rank 0 slot 2 (chunk 0 from rank 1 to rank 0) holds nothing but must "
                        "hold {1}"));
}

// The check's own promise table agrees with collective.h's Promise() for every pair.
TEST(IntentCheck, AgreesWithPromiseOnSmallCollectives) {
  for (Kind kind : {Kind::kAllGather, Kind::kReduceScatter, Kind::kAllReduce, Kind::kBroadcast,
                    Kind::kReduce, Kind::kAllToAll}) {
    for (uint32_t n : {1u, 3u, 4u}) {
      Collective c{kind, n, 2, n - 1};
      // An intent that leaves every rank with what it started: it passes iff every promised
      // pair starts satisfied and no pair is promised something it does not start with.
      Intent i{"none", c, {}};
      bool starts_satisfied = true;
      for (uint32_t r = 0; r < n; ++r) {
        for (uint64_t s = 0; s < SlotCount(c); ++s) {
          std::optional<std::vector<uint32_t>> p = Promise(c, r, s);
          if (!p) continue;
          const bool have = StartsWith(c, r, s);
          if (!(have && *p == std::vector<uint32_t>{r})) starts_satisfied = false;
        }
      }
      EXPECT_EQ(CheckIntent(i).ok(), starts_satisfied) << KindName(kind) << " " << n;
    }
  }
}

TEST(IntentCheck, FiveHundredTwelveRanksAllToAll) {
  Intent i = Expand("direct", Kind::kAllToAll, 512);
  EXPECT_EQ(i.moves.size(), 512u * 511);
  EXPECT_TRUE(CheckIntent(i).ok());
  i.moves.erase(i.moves.begin() + 1000);
  EXPECT_FALSE(CheckIntent(i).ok());
}

}  // namespace
}  // namespace heddle::collective
