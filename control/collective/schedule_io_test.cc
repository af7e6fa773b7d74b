#include "control/collective/schedule_io.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fnv1a.h"
#include "control/collective/internal/test_schedules.h"
#include "control/collective/verifier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::collective {
namespace {

using ::heddle::collective::testing::DirectAllReduce;
using ::heddle::collective::testing::RingAllGather;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A schedule with every kind of op, odd names and timing values that need all 17 digits.
Schedule Sample() {
  Schedule s = DirectAllReduce(3, 2, /*via_scratch=*/true);
  s.intent = "direct \"scratch\"\\\n\t\x01 é";
  s.ranks = {"eu-west", "us \"east\"", "ap\\south"};
  s.topology_digest = 0xfedcba9876543210ull;
  s.slot_bytes = 123456789012345ull;
  s.predicted_s = 0.1 + 0.2;
  double t = 1.0 / 3;
  for (RankSchedule& rs : s.per_rank) {
    for (Op& o : rs.ops) {
      o.start_s = t;
      o.end_s = t * 1e-9;
      t *= 1.7;
    }
  }
  // A copy from scratch back to data, to have every kind.
  Op copy;
  copy.kind = OpKind::kCopy;
  copy.piece = 1;
  copy.src = BufRef{BufRef::Buffer::kData, 0};
  copy.dst = BufRef{BufRef::Buffer::kScratch, 1};
  copy.deps = {1, 2};
  copy.start_s = 1e300;
  copy.end_s = -0.0;
  s.per_rank[0].ops.push_back(copy);
  return s;
}

TEST(ScheduleIo, RoundTripIsIdentical) {
  const Schedule s = Sample();
  const std::string json = ScheduleToJson(s);
  absl::StatusOr<Schedule> back = ScheduleFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_EQ(ScheduleToJson(*back), json);
  EXPECT_EQ(ScheduleDigest(*back), ScheduleDigest(s));
}

TEST(ScheduleIo, FormatIsTheDocumentedOne) {
  Schedule s = RingAllGather(2, 1);
  s.per_rank[0].ops[0].end_s = 0.25;
  s.predicted_s = 0.5;
  s.topology_digest = 0xabc;
  const std::string json = ScheduleToJson(s);
  EXPECT_THAT(json, StartsWith("{\"format\": \"heddle-schedule\", \"format_version\": 1,\n"
                               " \"collective\": {\"kind\": \"allgather\", \"ranks\": 2, "
                               "\"chunks_per_rank\": 1, \"root\": 0},\n"
                               " \"pieces\": 1, \"intent\": \"ring\",\n"
                               " \"ranks\": [\"r0\", \"r1\"],\n"
                               " \"topology_digest\": \"0000000000000abc\", \"slot_bytes\": "
                               "1048576, \"predicted_s\": 0.5,\n"
                               " \"per_rank\": [\n"
                               "  {\"scratch_slots\": 0, \"ops\": [\n"
                               "   {\"op\": \"send\", \"peer\": 1, \"channel\": 0, \"chunk\": 0, "
                               "\"piece\": 0, \"src\": {\"buffer\": \"data\", \"slot\": 0}, "
                               "\"deps\": [], \"start_s\": 0, \"end_s\": 0.25},\n"
                               "   {\"op\": \"recv\", \"peer\": 1, \"channel\": 0, \"chunk\": 1, "
                               "\"piece\": 0, \"dst\": {\"buffer\": \"data\", \"slot\": 1}, "
                               "\"deps\": [], \"start_s\": 0, \"end_s\": 0}\n"
                               "  ]},\n"));
}

TEST(ScheduleIo, FieldOrderAndWhitespaceDoNotMatter) {
  const std::string json = R"({
    "per_rank": [{"ops": [], "scratch_slots": 0}],
    "slot_bytes": 8, "topology_digest": "0", "ranks": [], "intent": "",
    "pieces": 1, "collective": {"root": 0, "chunks_per_rank": 1, "ranks": 1, "kind": "allreduce"},
    "format_version": 1, "format": "heddle-schedule"
  })";
  absl::StatusOr<Schedule> s = ScheduleFromJson(json);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->collective.kind, Kind::kAllReduce);
  EXPECT_EQ(s->predicted_s, 0);  // optional
  EXPECT_TRUE(VerifySchedule(*s).ok());
}

TEST(ScheduleIo, DigestIgnoresPredictionsOnly) {
  Schedule a = Sample();
  Schedule b = a;
  b.predicted_s = 99;
  b.per_rank[1].ops[3].start_s = 7;
  b.per_rank[2].ops[0].end_s = 8;
  EXPECT_EQ(ScheduleDigest(a), ScheduleDigest(b));
  // The same value in every build and on every host: pinned.
  EXPECT_EQ(ScheduleDigest(RingAllGather(3, 2)), ScheduleDigest(RingAllGather(3, 2)));
  const uint64_t ring = ScheduleDigest(RingAllGather(3, 2));
  for (auto mutate : std::vector<void (*)(Schedule*)>{
           [](Schedule* s) { s->per_rank[0].ops[0].peer = 2; },
           [](Schedule* s) { s->per_rank[0].ops[0].channel = 1; },
           [](Schedule* s) { s->per_rank[0].ops[0].chunk = 1; },
           [](Schedule* s) { s->per_rank[0].ops[0].piece = 1; },
           [](Schedule* s) { s->per_rank[0].ops[0].src.slot = 1; },
           [](Schedule* s) { s->per_rank[1].ops[5].deps = {}; },
           [](Schedule* s) { s->per_rank[1].scratch_slots = 1; },
           [](Schedule* s) { s->intent = "ring2"; },
           [](Schedule* s) { s->ranks[0] = "x"; },
           [](Schedule* s) { s->topology_digest = 1; },
           [](Schedule* s) { s->slot_bytes = 1; },
           [](Schedule* s) { s->pieces = 3; },
           [](Schedule* s) { s->collective.kind = Kind::kAllReduce; },
       }) {
    Schedule m = RingAllGather(3, 2);
    mutate(&m);
    EXPECT_NE(ScheduleDigest(m), ring);
  }
}

TEST(ScheduleIo, DigestsHashWithFnv1a64) {
  // The published FNV-1a 64 test vectors (common/fnv1a.h, which the schedule and topology
  // digests use).
  EXPECT_EQ(Fnv1a::Of(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a::Of("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a::Of("foobar"), 0x85944171f73967e8ull);
  Fnv1a h;
  h.Str("ab");
  h.Str("c");
  Fnv1a g;
  g.Str("a");
  g.Str("bc");
  EXPECT_NE(h.value(), g.value());  // length-prefixed
  Fnv1a z, m;
  z.Double(0.0);
  m.Double(-0.0);
  EXPECT_EQ(z.value(), m.value());
}

TEST(ScheduleIo, DigestIsPinned) {
  // FNV-1a 64 over the canonical form: a change here changes every stored digest.
  EXPECT_EQ(ScheduleDigest(RingAllGather(2, 1)), ScheduleDigest(RingAllGather(2, 1)));
  EXPECT_EQ(absl::StrFormat("%016x", ScheduleDigest(RingAllGather(2, 1))), "63ffd19e1cce48d2");
}

TEST(ScheduleIo, NonFiniteTimesAreWrittenAsNull) {
  Schedule s = RingAllGather(2, 1);
  s.predicted_s = INFINITY;
  const std::string json = ScheduleToJson(s);
  EXPECT_THAT(json, HasSubstr("\"predicted_s\": null"));
  absl::StatusOr<Schedule> back = ScheduleFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::isnan(back->predicted_s));
}

// The error for `json` (which must not parse).
std::string ErrorOf(std::string_view json) {
  absl::StatusOr<Schedule> s = ScheduleFromJson(json);
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : std::string(s.status().message());
}

std::string Replace(std::string s, std::string_view from, std::string_view to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(ScheduleIo, HostileInputIsRejectedWithWhereAndWhat) {
  const std::string good = ScheduleToJson(RingAllGather(2, 1));
  EXPECT_EQ(ErrorOf(""), "schedule:1:1: expected a JSON object (a heddle schedule), found the end");
  EXPECT_EQ(ErrorOf("[]"),
            "schedule:1:1: expected a JSON object (a heddle schedule), found an array");
  EXPECT_EQ(ErrorOf(good + "x"),
            absl::StrCat("schedule:", 1 + std::count(good.begin(), good.end(), '\n'),
                         ":1: unexpected 'x' after the schedule's closing brace"));
  EXPECT_EQ(ErrorOf(Replace(good, "\"format_version\": 1", "\"format_version\": 2")),
            "schedule:1:49: format_version: format_version 2 is not supported; this build reads 1");
  // A newer version whose first difference is a field this build does not know.
  EXPECT_THAT(ErrorOf(Replace(Replace(good, "\"format_version\": 1", "\"format_version\": 3"),
                              "{\"format\"", "{\"layers\": 2, \"format\"")),
              StartsWith("schedule: format_version 3 is not supported; this build reads 1"));
  EXPECT_EQ(ErrorOf(Replace(good, "heddle-schedule", "nuwa-artifact")),
            "schedule:1:12: format: \"nuwa-artifact\" is not a heddle schedule (expected "
            "\"heddle-schedule\")");
  EXPECT_THAT(ErrorOf(Replace(good, "\"peer\": 1", "\"peer\": -1")),
              HasSubstr("per_rank[0].ops[0].peer: expected an integer in 0..4294967295, found -1"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"peer\": 1", "\"peer\": 1.5")),
              HasSubstr("peer: expected an integer in 0..4294967295, found 1.5"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"peer\": 1", "\"peer\": 4294967296")),
              HasSubstr("found 4294967296"));
  EXPECT_THAT(
      ErrorOf(Replace(good, "\"chunk\": 0", "\"chunk\": 18446744073709551616")),
      HasSubstr("per_rank[0].ops[0].chunk: expected an integer in 0..18446744073709551615"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"peer\": 1", "\"peer\": \"1\"")),
              HasSubstr("peer: expected a number, found a string"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"peer\": 1, ", "")),
              HasSubstr("per_rank[0].ops[0]: missing field \"peer\""));
  EXPECT_THAT(ErrorOf(Replace(good, "\"peer\": 1, ", "\"peer\": 1, \"peer\": 1, ")),
              HasSubstr("per_rank[0].ops[0].peer: duplicate field"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"peer\": 1, ", "\"per\": 1, ")),
              HasSubstr("per_rank[0].ops[0].per: unknown field (expected one of: op, peer"));
  EXPECT_THAT(
      ErrorOf(Replace(good, "\"op\": \"send\"", "\"op\": \"sned\"")),
      HasSubstr("ops[0].op: \"sned\" is not an op (send, recv, recv-reduce, copy, reduce)"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"deps\": []",
                              "\"deps\": [], \"dst\": {\"buffer\": "
                              "\"data\", \"slot\": 0}")),
              HasSubstr("per_rank[0].ops[0].dst: a send op has no \"dst\""));
  EXPECT_THAT(ErrorOf(Replace(good, "\"buffer\": \"data\"", "\"buffer\": \"heap\"")),
              HasSubstr("src.buffer: \"heap\" is not a buffer (\"data\" or \"scratch\")"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"kind\": \"allgather\"", "\"kind\": \"gather\"")),
              HasSubstr("collective.kind: \"gather\" is not a collective"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"0000000000000000\"", "\"xyz\"")),
              HasSubstr("topology_digest: \"xyz\" is not a 64-bit hex digest"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"deps\": []", "\"deps\": [1,]")),
              HasSubstr("per_rank[0].ops[0].deps[1]: expected a number, found ']'"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"deps\": []", "\"deps\": [01]")),
              HasSubstr("leading zeros are not allowed"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"end_s\": 0}", "\"end_s\": 1e999}")),
              HasSubstr("number out of range: 1e999"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"intent\": \"ring\"", "\"intent\": \"ri\nng\"")),
              HasSubstr("intent: control character in a string"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"intent\": \"ring\"", "\"intent\": \"\\ud800\"")),
              HasSubstr("unpaired surrogate"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"intent\": \"ring\"", "\"intent\": \"\\q\"")),
              HasSubstr("invalid escape '\\q'"));
  EXPECT_THAT(ErrorOf(good.substr(0, good.size() / 2)), HasSubstr("found the end"));
  EXPECT_THAT(ErrorOf(Replace(good, "\"pieces\": 1, ", "")), HasSubstr("missing field \"pieces\""));
  EXPECT_THAT(ErrorOf(std::string(100000, '[')), HasSubstr("expected a JSON object"));
  EXPECT_THAT(ErrorOf(std::string("{\"format\": \"heddle-schedule\"\0}", 31)),
              HasSubstr("expected ',' or '}', found byte 0x00"));
}

TEST(ScheduleIo, UnicodeEscapesDecodeToUtf8) {
  const std::string good = ScheduleToJson(RingAllGather(2, 1));
  absl::StatusOr<Schedule> s = ScheduleFromJson(
      Replace(good, "\"intent\": \"ring\"", R"("intent": "\u00e9\ud83d\ude00\/")"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->intent, "\xc3\xa9\xf0\x9f\x98\x80/");
}

TEST(ScheduleIo, LargeSchedulesRoundTrip) {
  // 128 ranks × 2 pieces ≈ 130k ops.
  const Schedule s = RingAllGather(128, 4);
  const std::string json = ScheduleToJson(s);
  absl::StatusOr<Schedule> back = ScheduleFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_TRUE(VerifySchedule(*back).ok());
}

TEST(ScheduleIo, Files) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/schedule_io_test.json";
  const Schedule s = Sample();
  ASSERT_TRUE(WriteScheduleFile(path, s).ok());
  absl::StatusOr<Schedule> back = ReadScheduleFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("{\n  \"format\": 7", f);
    std::fclose(f);
  }
  EXPECT_EQ(ReadScheduleFile(path).status().message(),
            path + ":2:13: format: expected a string, found a number");
  std::filesystem::remove(path);
  EXPECT_EQ(ReadScheduleFile(path).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace heddle::collective
