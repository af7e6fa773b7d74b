#include "control/collective/dsl.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "control/collective/builtins.h"
#include "control/collective/intent_check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::collective {

void PrintTo(const Move& m, std::ostream* os) {
  *os << (m.kind == MoveKind::kCopy ? "copy" : "reduce") << " slot " << m.slot << " " << m.src
      << "->" << m.dst << " @" << m.line << ":" << m.column;
}

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kRing[] = R"(# a ring all-gather
intent ring
collective allgather
for s in 0..N-1 {
  for r in 0..N {
    copy chunks((r - s) % N) from r to (r + 1) % N
  }
}
)";

// What a failing program reports: its first error.
struct Failed {
  std::string status;  // the status message
  Diagnostic error;    // the error diagnostic
  std::vector<Diagnostic> all;
};

Failed Fail(const std::string& text, ExpandOptions o = {.ranks = 4}) {
  Failed f;
  absl::StatusOr<Intent> i = ParseIntent(text, o, &f.all);
  EXPECT_FALSE(i.ok()) << text;
  if (i.ok()) return f;
  f.status = std::string(i.status().message());
  EXPECT_EQ(i.status().code(), absl::StatusCode::kInvalidArgument);
  for (const Diagnostic& d : f.all) {
    if (d.error) f.error = d;
  }
  EXPECT_EQ(f.status,
            absl::StrFormat("intent:%u:%u: %s", f.error.line, f.error.column, f.error.message));
  return f;
}

// The value of an expression, read back as the slot of a one-move broadcast program.
int64_t Value(const std::string& expr) {
  const std::string text = absl::StrCat("intent v\ncollective broadcast chunks 1000000\n",
                                        "copy slots(", expr, ") from 0 to 1\n");
  absl::StatusOr<Intent> i = ParseIntent(text, {.ranks = 8});
  EXPECT_TRUE(i.ok()) << expr << ": " << i.status();
  if (!i.ok() || i->moves.size() != 1) return -1;
  return static_cast<int64_t>(i->moves[0].slot);
}

std::string Prog(const std::string& kind, const std::string& body) {
  return absl::StrCat("intent t\ncollective ", kind, "\n", body);
}

// ---------------------------------------------------------------------------------------------
// Good programs

TEST(Dsl, RingExpandsToTheExpectedMoves) {
  std::vector<Diagnostic> diags;
  absl::StatusOr<Intent> i = ParseIntent(kRing, {.ranks = 3}, &diags);
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_TRUE(diags.empty());
  EXPECT_EQ(i->name, "ring");
  EXPECT_EQ(i->collective, (Collective{Kind::kAllGather, 3, 1, 0}));
  const std::vector<Move> want = {
      {MoveKind::kCopy, 0, 0, 1, 6, 5}, {MoveKind::kCopy, 1, 1, 2, 6, 5},
      {MoveKind::kCopy, 2, 2, 0, 6, 5}, {MoveKind::kCopy, 2, 0, 1, 6, 5},
      {MoveKind::kCopy, 0, 1, 2, 6, 5}, {MoveKind::kCopy, 1, 2, 0, 6, 5},
  };
  EXPECT_EQ(i->moves, want);
  EXPECT_TRUE(CheckIntent(*i).ok());
}

TEST(Dsl, OrderMapsEveryRankAndChunkHelper) {
  // Virtual rank v is physical order[v]; chunks(v) and chunk(v, j) follow the same map.
  const std::string text = Prog("allgather chunks 2",
                                "copy chunks(0) from 0 to 1\n"
                                "copy chunk(2, 1) from 2 to 0\n");
  absl::StatusOr<Intent> i = ParseIntent(text, {.ranks = 3, .order = {2, 0, 1}});
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->collective.chunks_per_rank, 2u);
  ASSERT_EQ(i->moves.size(), 3u);
  EXPECT_EQ(i->moves[0], (Move{MoveKind::kCopy, 4, 2, 0, 3, 1}));
  EXPECT_EQ(i->moves[1], (Move{MoveKind::kCopy, 5, 2, 0, 3, 1}));
  EXPECT_EQ(i->moves[2], (Move{MoveKind::kCopy, 3, 1, 2, 4, 1}));
  // The same ring program in a shuffled order is still a correct all-gather.
  absl::StatusOr<Intent> r = ParseIntent(kRing, {.ranks = 5, .order = {3, 1, 4, 0, 2}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(CheckIntent(*r).ok());
  EXPECT_EQ(r->moves[0].src, 3u);
  EXPECT_EQ(r->moves[0].dst, 1u);
}

TEST(Dsl, ChunksOptionOverridesTheDeclaredCount) {
  absl::StatusOr<Intent> i = ParseIntent(Prog("allgather chunks 3", "copy chunks(1) from 1 to 0\n"),
                                         {.ranks = 2, .chunks_per_rank = 2});
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->collective.chunks_per_rank, 2u);
  EXPECT_EQ(i->moves.size(), 2u);
}

TEST(Dsl, ArithmeticFloorsAndModuloIsNonNegative) {
  EXPECT_EQ(Value("(0 - 1) % 4"), 3);
  EXPECT_EQ(Value("-7 % 4"), 1);
  EXPECT_EQ(Value("7 % -4"), 3);
  EXPECT_EQ(Value("-(-7 / 2)"), 4);  // floor(-3.5) = -4
  EXPECT_EQ(Value("7 / 2"), 3);
  EXPECT_EQ(Value("-(7 / -2)"), 4);
  EXPECT_EQ(Value("-8 / 2 + 10"), 6);
  EXPECT_EQ(Value("5 ^ 3"), 6);
  EXPECT_EQ(Value("6 & 3"), 2);
  EXPECT_EQ(Value("4 | 1"), 5);
  EXPECT_EQ(Value("1 << 4"), 16);
  EXPECT_EQ(Value("-(-9 >> 1)"), 5);  // arithmetic shift floors
  EXPECT_EQ(Value("1 + 2 * 3"), 7);
  EXPECT_EQ(Value("1 << 2 + 1"), 8);  // + binds tighter than <<
  EXPECT_EQ(Value("6 & 3 == 2"), 1);  // & binds tighter than == (unlike C)
  EXPECT_EQ(Value("2 ^ 3 & 1"), 3);   // & before ^ before |
  EXPECT_EQ(Value("1 | 2 ^ 3"), 1);
  EXPECT_EQ(Value("3 < 4 && 4 < 3 || 1"), 1);
  EXPECT_EQ(Value("!0 + !5"), 1);
  EXPECT_EQ(Value("0x10 + 0XfF"), 271);
  EXPECT_EQ(Value("log2(N) + log2(9) + clog2(9) + clog2(1)"), 3 + 3 + 4 + 0);
  EXPECT_EQ(Value("pow2(10) + min(4, 2, 9) + max(1, 7)"), 1024 + 2 + 7);
  EXPECT_EQ(Value("N * 10 + K % 7"), 81);  // K = 1000000 here
  EXPECT_EQ(Value("(1 +\n 2)"), 3);        // newlines inside parentheses are ignored
  EXPECT_EQ(Value("9223372036854775807 % 10"), 7);
  EXPECT_EQ(Value("(-9223372036854775807 - 1) % -1"), 0);
}

TEST(Dsl, LoopsStepsIfElseAndLet) {
  const std::string text = Prog("broadcast chunks 100", R"(
let base = 10
for i in 0..3 {            # 0 1 2: the upper bound is excluded
  copy slots(base + i) from 0 to 1
}
for i in 9..3 step -3 { copy slots(i) from 0 to 1 }   # 9 6
for i in 3..3 { copy slots(50) from 0 to 1 }          # nothing
if N == 4 {
  copy slots(20) from 0 to 1
}
else {
  copy slots(21) from 0 to 1
}
if N == 5 { copy slots(30) from 0 to 1 } else if N == 4 { copy slots(31) from 0 to 1 } else { copy slots(32) from 0 to 1 }
copy slots(0..100 step 40) from 0 to 1; copy slots(5..1 step -2) from 0 to 1
)");
  absl::StatusOr<Intent> i = ParseIntent(text, {.ranks = 4});
  ASSERT_TRUE(i.ok()) << i.status();
  std::vector<uint64_t> slots;
  for (const Move& m : i->moves) slots.push_back(m.slot);
  EXPECT_THAT(slots, ElementsAre(10, 11, 12, 9, 6, 20, 31, 0, 40, 80, 5, 3));
}

TEST(Dsl, ParamsDefaultsOverridesAndRoot) {
  const std::string text = Prog("broadcast", R"(param G = N / 2
param H = G + 1
require G * 2 == N "G is half of N"
copy all from root to (root + H) % N
)");
  absl::StatusOr<Intent> i = ParseIntent(text, {.ranks = 4});
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->moves, (std::vector<Move>{{MoveKind::kCopy, 0, 0, 3, 6, 1}}));
  i = ParseIntent(text, {.ranks = 4, .params = {{"H", 2}, {"root", 3}}});
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->collective.root, 3u);
  EXPECT_EQ(i->moves[0].src, 3u);
  EXPECT_EQ(i->moves[0].dst, 1u);
  // root is a physical rank; in the program it is the virtual rank mapped to it.
  i = ParseIntent(text, {.ranks = 4, .order = {3, 2, 1, 0}, .params = {{"root", 1}}});
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->moves[0].src, 1u);
  EXPECT_EQ(i->moves[0].dst, 2u);  // virtual (2 + 3) % 4 = 1 → physical 2
  Failed f = Fail(text, {.ranks = 4, .params = {{"G", 1}}});
  EXPECT_EQ(f.error.code, "require-failed");
  EXPECT_EQ(f.status, "intent:5:1: G is half of N (N = 4, K = 1)");
}

TEST(Dsl, WarningsAreNotFatal) {
  std::vector<Diagnostic> diags;
  absl::StatusOr<Intent> i = ParseIntent(
      Prog("allgather", "param unused = 3\nfor r in 0..N { copy chunks(r) from r to 0 }\n"),
      {.ranks = 3}, &diags);
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->moves.size(), 2u);  // rank 0 to itself is dropped
  ASSERT_EQ(diags.size(), 2u);
  EXPECT_EQ(diags[0], (Diagnostic{3, 7, "unused-param", "parameter unused is never used", false}));
  EXPECT_EQ(diags[1].code, "self-move");
  EXPECT_FALSE(diags[1].error);
  EXPECT_EQ(diags[1].line, 4u);
  EXPECT_EQ(diags[1].column, 17u);
}

// ---------------------------------------------------------------------------------------------
// Each error class, with its code and place

struct ErrorCase {
  std::string text;
  std::string code;
  uint32_t line, column;
  std::string message_part;
  ExpandOptions options = {.ranks = 4};
};

TEST(Dsl, EveryErrorClassHasItsCodeAndPlace) {
  const std::vector<ErrorCase> cases = {
      {"intent t\ncollective allgather\ncopy chunks(0) from 0 @ 1\n", "bad-character", 3, 23,
       "unexpected character '@'"},
      {"intent t\ncollective allgather\ncopy \x01", "bad-character", 3, 6, "byte 0x01"},
      {"intent t\ncollective allgather\nrequire 1 \"open\n", "unterminated-string", 3, 11,
       "not closed"},
      {"intent t\ncollective allgather\nlet x = 99999999999999999999\n", "integer-too-large", 3, 9,
       "larger than 2^63-1"},
      {"intent t\ncollective allgather\nlet x = 12ab\n", "syntax", 3, 11, "run into a name"},
      {"intent t\ncollective allgather\ncopy chunks(0) from 0 into 1\n", "syntax", 3, 23,
       "expected 'to', found 'into'"},
      {"intent t\ncollective allgather\nreduce chunks(0) from 0 to 1\n", "syntax", 3, 25,
       "expected 'into', found 'to'"},
      {"intent t\ncollective allgather\nfor i in 0..N {\n  copy chunks(i) from i to 0\n", "syntax",
       5, 1, "a '{' is not closed"},
      {"intent t\ncollective allgather\nlet x = (1 + 2\n", "syntax", 4, 1, "expected ')'"},
      {"intent t\ncollective allgather\nlet x = 1 2\n", "syntax", 3, 11,
       "expected the end of the statement, found number 2"},
      {"intent t\ncollective allgather\nmove chunks(0) from 0 to 1\n", "syntax", 3, 1,
       "unknown statement 'move'"},
      {"intent t\ncollective allgather\nlet x = 1 < 2 < 3\n", "syntax", 3, 15, "do not chain"},
      {"intent t\ncollective allgather\nlet x = min(1)\n", "syntax", 3, 9,
       "min takes 2 to 8 arguments"},
      {"intent t\ncollective allgather\nlet x = y + 1\n", "unknown-name", 3, 9, "unknown name 'y'"},
      {"intent t\ncollective allgather\nlet x = sqrt(4)\n", "unknown-name", 3, 9,
       "unknown function 'sqrt'"},
      {"intent t\ncollective allgather\nlet x = x + 1\n", "unknown-name", 3, 9, "unknown name 'x'"},
      {"intent t\ncollective allgather\nfor r in 0..N { let q = r }\ncopy chunks(q) from 0 to 1\n",
       "unknown-name", 4, 13, "unknown name 'q'"},
      {"intent t\ncollective allgather\nlet x = 1\nlet x = 2\n", "redefined", 4, 5,
       "x is already defined at 3:5"},
      {"intent t\ncollective allgather\nlet N = 2\n", "redefined", 3, 5, "built-in word"},
      {"intent t\ncollective broadcast\nparam root = 1\n", "redefined", 3, 7, "root is built in"},
      {"collective allgather\n", "missing-header", 1, 1, "starts with 'intent <name>'"},
      {"intent t\ncopy chunks(0) from 0 to 1\n", "missing-header", 2, 1,
       "expected 'collective <kind>'"},
      {"intent t\n", "missing-header", 2, 1, "no 'collective <kind>' line"},
      {"intent t\nintent u\ncollective allgather\n", "duplicate-header", 2, 1, "second 'intent'"},
      {"intent t\ncollective gather\n", "unknown-collective", 2, 12, "unknown collective 'gather'"},
      {"intent t\ncollective broadcast\ncopy chunk(0, 0) from 0 to 1\n", "wrong-collective", 3, 6,
       "chunk(v, j) names a rank's chunk"},
      {"intent t\ncollective allgather\ncopy chunks(0, 1) from 0 to 1\n", "wrong-collective", 3, 6,
       "all-to-all slots only"},
      {"intent t\ncollective alltoall\ncopy chunks(0) from 0 to 1\n", "wrong-collective", 3, 6,
       "use chunks(s, d)"},
      {"intent t\ncollective allgather\ncopy all from root to 1\n", "wrong-collective", 3, 15,
       "root exists for broadcast and reduce only"},
      {"intent t\ncollective allgather\ncopy chunks(0) from 0 to N\n", "rank-out-of-range", 3, 26,
       "rank 4 is not one of the 4 ranks (0..3)"},
      // A value error points at the start of the expression, not at its operator.
      {"intent t\ncollective allgather\nfor r in 0..N {\n  copy chunks(r) from r to r + 1\n}\n",
       "rank-out-of-range", 4, 28, "rank 4 is not one of the 4 ranks"},
      {"intent t\ncollective allgather\ncopy chunks(-1) from 0 to 1\n", "rank-out-of-range", 3, 13,
       "rank -1"},
      {"intent t\ncollective allgather\ncopy chunk(1, K) from 1 to 0\n", "slot-out-of-range", 3, 15,
       "chunk index 1 is not one of 0..K-1"},
      {"intent t\ncollective allgather\ncopy slots(2..5) from 1 to 0\n", "slot-out-of-range", 3, 12,
       "slot 4 is not one of the 4 slots of allgather (N = 4, K = 1)"},
      {"intent t\ncollective allgather\ncopy -1 from 1 to 0\n", "slot-out-of-range", 3, 6,
       "slot -1 is negative"},
      {"intent t\ncollective allgather\nlet z = 0\nlet x = 1 / z\n", "division-by-zero", 4, 11,
       "division by zero"},
      {"intent t\ncollective allgather\nlet x = N % (N - 4)\n", "division-by-zero", 3, 11,
       "modulo by zero"},
      {"intent t\ncollective allgather\nlet x = 9223372036854775807 + 1\n", "overflow", 3, 29,
       "integer overflow"},
      {"intent t\ncollective allgather\nlet x = 1 << 63\n", "bad-argument", 3, 11, "shift by 63"},
      {"intent t\ncollective allgather\nlet x = log2(0)\n", "bad-argument", 3, 9, "log2(0)"},
      {"intent t\ncollective allgather\nlet x = pow2(63)\n", "bad-argument", 3, 9, "pow2(63)"},
      {"intent t\ncollective allgather\nfor i in 0..4 step N - 4 { }\n", "zero-step", 3, 20,
       "step must not be 0"},
      {"intent t\ncollective allgather\nfor i in 0..1000 {\n  copy chunks(0) from 0 to 1\n}\n",
       "too-many-moves",
       4,
       3,
       "more than 100 moves",
       {.ranks = 4, .max_moves = 100}},
      {"intent t\ncollective allgather\nfor i in 0..pow2(62) { }\n",
       "too-many-steps",
       3,
       1,
       "more than 1000 statements",
       {.ranks = 4, .max_steps = 1000}},
      {"intent t\ncollective allgather\nrequire N % 3 == 0 \"N must be a multiple of 3\"\n",
       "require-failed", 3, 1, "N must be a multiple of 3 (N = 4, K = 1)"},
      {"intent t\ncollective allgather\nparam G = 2\nrequire G > 0 \"\"\n",
       "unknown-param",
       0,
       0,
       "no parameter 'H' in this program; it declares G",
       {.ranks = 4, .params = {{"H", 1}}}},
      {"intent t\ncollective allgather\n",
       "unknown-param",
       0,
       0,
       "(it declares none)",
       {.ranks = 4, .params = {{"root", 1}}}},
      {"intent t\ncollective broadcast\n",
       "bad-options",
       0,
       0,
       "root 4 is not one of the 4",
       {.ranks = 4, .params = {{"root", 4}}}},
      {"intent t\ncollective allgather\n",
       "bad-order",
       0,
       0,
       "not a permutation",
       {.ranks = 3, .order = {0, 1, 1}}},
      {"intent t\ncollective allgather\n",
       "bad-order",
       0,
       0,
       "2 entries for 3 ranks",
       {.ranks = 3, .order = {0, 1}}},
      {"intent t\ncollective allgather\n", "bad-options", 0, 0, "at least 1", {.ranks = 0}},
      {"intent t\ncollective alltoall\n",
       "bad-options",
       0,
       0,
       "more than",
       {.ranks = 4096, .chunks_per_rank = 4096}},
      {"intent t\ncollective allgather\nif 1 { param x = 1 }\n", "syntax", 3, 8,
       "'param' only at the top level"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.text);
    Failed f = Fail(c.text, c.options);
    EXPECT_EQ(f.error.code, c.code);
    EXPECT_EQ(f.error.line, c.line);
    EXPECT_EQ(f.error.column, c.column);
    EXPECT_THAT(f.error.message, HasSubstr(c.message_part));
    EXPECT_TRUE(f.error.error);
  }
}

TEST(Dsl, HostileInputNeverCrashesOrHangs) {
  ExpandOptions o{.ranks = 4};
  // Deep parentheses, long operator chains, deep blocks, long else-if chains, huge text.
  EXPECT_EQ(Fail(Prog("allgather", "let x = " + std::string(100000, '(') + "1\n"), o).error.code,
            "too-deep");
  std::string chain = "let x = 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_EQ(Fail(Prog("allgather", chain + "\n"), o).error.code, "too-deep");
  EXPECT_EQ(Fail(Prog("allgather", "let x = " + std::string(100000, '-') + "1\n"), o).error.code,
            "too-deep");
  std::string blocks;
  for (int i = 0; i < 10000; ++i) blocks += "if 1 {\n";
  EXPECT_EQ(Fail(Prog("allgather", blocks), o).error.code, "too-deep");
  // 64 nested blocks are fine, the 65th is not (loops count once each).
  auto nested = [](int depth) {
    std::string t;
    for (int i = 0; i < depth; ++i) t += absl::StrCat("for v", i, " in 0..1 {\n");
    for (int i = 0; i < depth; ++i) t += "}\n";
    return t;
  };
  EXPECT_TRUE(ParseIntent(Prog("allgather", nested(64)), o).ok());
  Failed deep = Fail(Prog("allgather", nested(65)), o);
  EXPECT_EQ(deep.error.code, "too-deep");
  EXPECT_EQ(deep.error.line, 67u);
  EXPECT_EQ(deep.error.column, 17u);
  std::string elifs = "if 0 { }";
  for (int i = 0; i < 10000; ++i) elifs += " else if 0 { }";
  EXPECT_EQ(Fail(Prog("allgather", elifs + "\n"), o).error.code, "too-deep");
  Failed big = Fail(std::string(kMaxIntentTextBytes + 1, '#'), o);
  EXPECT_EQ(big.error.code, "too-large");
  EXPECT_EQ(big.status, "intent:1:1: the intent is 1048577 bytes; at most 1048576 are accepted");
  // Nested loops whose product is astronomical stop at the step cap.
  EXPECT_EQ(Fail(Prog("allgather", "for a in 0..pow2(40) { for b in 0..pow2(40) { } }\n"),
                 {.ranks = 4, .max_steps = 100000})
                .error.code,
            "too-many-steps");
  // A huge slot range stops at the move cap, before building the moves.
  EXPECT_EQ(Fail(Prog("alltoall", "copy all from 0 to 1\n"), {.ranks = 4096, .max_moves = 1000})
                .error.code,
            "too-many-moves");
  // Loops with bounds near the integer limits neither overflow nor run away.
  absl::StatusOr<Intent> i = ParseIntent(
      Prog("allgather",
           "for i in 9223372036854775806..9223372036854775807 step 4611686018427387904 { }\n"
           "for i in -9223372036854775807..-9223372036854775806 step -1 { }\n"),
      o);
  EXPECT_TRUE(i.ok()) << i.status();
  // NUL bytes and stray bytes anywhere are errors, not crashes.
  EXPECT_EQ(Fail(std::string("intent t\0", 9), o).error.code, "bad-character");
}

// Random mutations of every builtin must give an intent or an error, never a crash or a hang; an
// accepted mutant goes through CheckIntent too (which may reject it, but must not crash).
TEST(Dsl, RandomMutationsOfTheBuiltinsNeverCrash) {
  std::mt19937_64 rng(20261203);
  static constexpr std::string_view kPieces[] = {"(",
                                                 ")",
                                                 "{",
                                                 "}",
                                                 "..",
                                                 " step ",
                                                 "-",
                                                 "0",
                                                 "N",
                                                 "K",
                                                 "\n",
                                                 "#",
                                                 "\"",
                                                 "%",
                                                 "^",
                                                 "<<",
                                                 " for i in 0..N { ",
                                                 " copy ",
                                                 " reduce ",
                                                 " all ",
                                                 " chunks(",
                                                 " slots(",
                                                 ",",
                                                 "9223372036854775807",
                                                 " root ",
                                                 " let ",
                                                 " if ",
                                                 " else ",
                                                 " param ",
                                                 " require ",
                                                 "\xff",
                                                 "/",
                                                 "0x"};
  uint64_t accepted = 0, rejected = 0;
  for (const std::string& name : BuiltinNames()) {
    for (Kind kind : {Kind::kAllGather, Kind::kReduceScatter, Kind::kAllReduce, Kind::kBroadcast,
                      Kind::kReduce, Kind::kAllToAll}) {
      absl::StatusOr<std::string> base = BuiltinIntentText(name, kind);
      if (!base.ok()) continue;
      for (int round = 0; round < 300; ++round) {
        std::string text = *base;
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits && !text.empty(); ++e) {
          const size_t at = rng() % text.size();
          switch (rng() % 4) {
            case 0:  // delete a run
              text.erase(at, 1 + rng() % 8);
              break;
            case 1:  // insert a piece
              text.insert(at, kPieces[rng() % std::size(kPieces)]);
              break;
            case 2:  // flip a byte
              text[at] = static_cast<char>(rng() % 256);
              break;
            case 3: {  // duplicate a slice elsewhere
              const size_t len = std::min<size_t>(1 + rng() % 40, text.size() - at);
              const std::string slice = text.substr(at, len);
              text.insert(rng() % text.size(), slice);
              break;
            }
          }
        }
        ExpandOptions o{.ranks = static_cast<uint32_t>(1 + rng() % 12),
                        .max_moves = 20000,
                        .max_steps = 200000};
        std::vector<Diagnostic> diags;
        absl::StatusOr<Intent> i = ParseIntent(text, o, &diags);
        if (i.ok()) {
          ++accepted;
          (void)CheckIntent(*i);
        } else {
          ++rejected;
          EXPECT_THAT(std::string(i.status().message()), StartsWith("intent:"));
          ASSERT_FALSE(diags.empty());
          EXPECT_TRUE(diags.back().error);
        }
        EXPECT_THAT(DiagnosticsJson(diags), StartsWith("["));
      }
    }
  }
  EXPECT_GT(accepted, 0u);
  EXPECT_GT(rejected, 0u);
}

TEST(Dsl, InspectReportsTheDeclarationsWithoutExpanding) {
  absl::StatusOr<IntentInfo> info =
      InspectIntent(Prog("alltoall chunks 3", "param G = 4\nparam H = G\nrequire G > 0 \"\"\n"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name, "t");
  EXPECT_EQ(info->kind, Kind::kAllToAll);
  EXPECT_EQ(info->chunks_per_rank, 3u);
  EXPECT_THAT(info->params, ElementsAre("G", "H"));
  std::vector<Diagnostic> diags;
  EXPECT_FALSE(InspectIntent("intent t\ncollective x\n", &diags).ok());
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].code, "unknown-collective");
}

// ---------------------------------------------------------------------------------------------
// Diagnostics JSON

TEST(Dsl, DiagnosticsJsonEscapes) {
  EXPECT_EQ(DiagnosticsJson({}), "[]");
  const std::vector<Diagnostic> d = {
      {3, 7, "unknown-name", "name \"x\\y\"\n\ttab\x01", true},
      {0, 0, "unused-param", "caf\xc3\xa9 \xff\xc3 \xed\xa0\x80 \xf0\x9f\x98\x80", false},
  };
  EXPECT_EQ(DiagnosticsJson(d),
            "[\n"
            "  {\"severity\": \"error\", \"line\": 3, \"column\": 7, \"code\": \"unknown-name\", "
            "\"message\": \"name \\\"x\\\\y\\\"\\n\\ttab\\u0001\"},\n"
            "  {\"severity\": \"warning\", \"line\": 0, \"column\": 0, \"code\": \"unused-param\", "
            "\"message\": \"caf\xc3\xa9 \\ufffd\\ufffd \\ufffd\\ufffd\\ufffd "
            "\xf0\x9f\x98\x80\"}\n"
            "]");
}

// The example of docs/optiflow-dsl.md §4: a warning, then the error.
TEST(Dsl, TheDocumentedDiagnosticsExample) {
  std::vector<Diagnostic> diags;
  absl::StatusOr<Intent> i = ParseIntent(
      "intent shifted\ncollective allgather\nparam H = 2\nfor r in 0..N {\n"
      "  copy chunks(r) from r to r + 1\n}\n",
      {.ranks = 4}, &diags);
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(i.status().message(), "intent:5:28: rank 4 is not one of the 4 ranks (0..3)");
  EXPECT_EQ(DiagnosticsJson(diags),
            "[\n"
            "  {\"severity\": \"warning\", \"line\": 3, \"column\": 7, \"code\": \"unused-param\", "
            "\"message\": \"parameter H is never used\"},\n"
            "  {\"severity\": \"error\", \"line\": 5, \"column\": 28, \"code\": "
            "\"rank-out-of-range\", \"message\": \"rank 4 is not one of the 4 ranks (0..3)\"}\n"
            "]");
}

TEST(Dsl, DiagnosticsOfAFailedExpansionRenderAsJson) {
  std::vector<Diagnostic> diags;
  absl::StatusOr<Intent> i = ParseIntent(
      Prog("allgather", "param G = 2\ncopy chunks(0) from 0 to \"x\"\n"), {.ranks = 4}, &diags);
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(DiagnosticsJson(diags),
            "[\n"
            "  {\"severity\": \"error\", \"line\": 4, \"column\": 26, \"code\": \"syntax\", "
            "\"message\": \"expected a value, found a string\"}\n"
            "]");
}

}  // namespace
}  // namespace heddle::collective
