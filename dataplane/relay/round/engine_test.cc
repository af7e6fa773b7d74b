#include "dataplane/relay/round/engine.h"

#include <cstring>
#include <random>
#include <thread>

#include "dataplane/relay/codec/encoder.h"
#include "dataplane/relay/round/slice_digest.h"
#include "dataplane/relay/round/testing/fake_exchange.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

using ::testing::HasSubstr;

// Four slices: tensor a (300 values) in 128 + 128 + 44, tensor b (64 values) in one.
ModelSpec TestSpec() {
  ModelSpec s;
  s.tensors = {{.id = 0, .name = "a", .elements = 300}, {.id = 1, .name = "b", .elements = 64}};
  s.chunk_size = 64;
  s.slice_elements = 128;
  return s;
}

class FakeClock {
 public:
  absl::Time Now() {
    absl::MutexLock l(&mu_);
    return t_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    t_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time t_ = absl::FromUnixSeconds(1'000'000);
};

// One worker's frames of a round: random values per slice, plain scaled sign.
std::vector<std::vector<uint8_t>> MakeFrames(const ModelSpec& spec, uint64_t round, uint32_t sender,
                                             uint64_t tokens, uint32_t steps, uint32_t seed) {
  std::mt19937 rng(seed * 7919 + round);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<std::vector<uint8_t>> out;
  for (const SliceRef& s : Slices(spec)) {
    std::vector<float> v(s.count);
    for (float& x : v) x = dist(rng);
    SignEncoder enc =
        *SignEncoder::Create(s.count, {.chunk_size = spec.chunk_size, .error_feedback = false});
    EXPECT_EQ(enc.Encode(DType::kFloat32, v.data()), 0u);
    FrameHeader h = SliceHeader(spec, s, round, sender);
    h.token_count = tokens;
    h.inner_steps = steps;
    std::vector<uint8_t> buf(enc.FrameBytes());
    EXPECT_TRUE(enc.WriteFrame(h, buf).ok());
    out.push_back(std::move(buf));
  }
  return out;
}

// The region aggregate of slice s over the given workers' frames, computed directly.
std::vector<float> Expected(const ModelSpec& spec,
                            const std::vector<std::vector<std::vector<uint8_t>>*>& frames,
                            uint32_t slice, Weighting w) {
  std::vector<FrameView> views;
  for (auto* f : frames) views.push_back(*ParseFrame((*f)[slice]));
  std::vector<float> out(Slices(spec)[slice].count);
  Aggregator agg;
  EXPECT_TRUE(agg.Aggregate(views, {.weighting = w}, out).ok());
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class EngineTest : public ::testing::Test {
 protected:
  void Make(RoundPolicy policy = {}, planner::Planner* planner = nullptr,
            std::function<bool(const RoundOutcome&)> retained = nullptr) {
    spec_ = TestSpec();
    auto ex = std::make_unique<testing::FakeExchange>(
        spec_, testing::FakeExchangeOptions{.keep_submitted = true});
    fake_ = ex.get();
    EngineOptions o{.region_id = 1,
                    .spec = spec_,
                    .policy = policy,
                    .now = [this] { return clock_.Now(); },
                    .planner = planner,
                    .retained_by_gateway = std::move(retained)};
    auto e = RoundEngine::Create(std::move(o), std::move(ex));
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }
  uint32_t JoinOk(const std::string& name) {
    absl::StatusOr<JoinResult> j = engine_->Join({.name = name});
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? j->sender_id : 0;
  }
  absl::Status PushOk(uint32_t sender, uint64_t round, uint64_t tokens = 100, uint32_t steps = 1) {
    return engine_->Push(sender, round, MakeFrames(spec_, round, sender, tokens, steps, sender));
  }
  bool Resolved(uint64_t r) { return engine_->WaitResolved(r, absl::Now() + absl::Seconds(30)); }
  WorkerOutcome PullOk(uint32_t sender, uint64_t r) {
    absl::StatusOr<WorkerOutcome> o = engine_->Pull(sender, r, absl::Now() + absl::Seconds(30));
    EXPECT_TRUE(o.ok()) << o.status();
    return o.ok() ? *o : WorkerOutcome{};
  }
  RoundStats Stats(uint64_t r) {
    for (const RoundStats& s : engine_->Status().rounds) {
      if (s.round_id == r) return s;
    }
    return {};
  }

  FakeClock clock_;
  ModelSpec spec_;
  testing::FakeExchange* fake_ = nullptr;
  std::unique_ptr<RoundEngine> engine_;
};

TEST_F(EngineTest, JoinGivesStableSenderIds) {
  Make();
  EXPECT_EQ(JoinOk("w-a"), 1u);
  EXPECT_EQ(JoinOk("w-b"), 2u);
  absl::StatusOr<JoinResult> again = engine_->Join({.name = "w-a"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->sender_id, 1u);
  EXPECT_TRUE(again->rejoined);
  ASSERT_TRUE(engine_->Leave(1).ok());
  EXPECT_EQ(engine_->Touch(1).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(JoinOk("w-a"), 1u);  // the name keeps its id after leaving
  EXPECT_TRUE(engine_->Touch(1).ok());
  EXPECT_EQ(engine_->Touch(9).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->Join({.name = "has space"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status bad = engine_->Join({.name = "w-c", .spec_digest = 12345}).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.message(), HasSubstr("model spec digest"));
  EXPECT_TRUE(engine_->Join({.name = "w-c", .spec_digest = SpecDigest(spec_)}).ok());
}

TEST_F(EngineTest, RoundCompletesAndPublishesTheAggregate) {
  Make();
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  auto fa = MakeFrames(spec_, 1, a, 100, 1, a);
  auto fb = MakeFrames(spec_, 1, b, 300, 3, b);
  ASSERT_TRUE(engine_->Push(a, 1, fa).ok());
  EXPECT_EQ(engine_->collecting_round(), 1u);
  EXPECT_EQ(Stats(1).state, "open");
  ASSERT_TRUE(engine_->Push(b, 1, fb).ok());
  ASSERT_TRUE(Resolved(1));
  EXPECT_EQ(engine_->collecting_round(), 2u);

  RegionSummary sum = fake_->last_summary();
  EXPECT_EQ(sum.round_id, 1u);
  EXPECT_EQ(sum.tokens, 400u);
  EXPECT_EQ(sum.workers, 2u);
  EXPECT_DOUBLE_EQ(sum.tau_eff, 0.25 * 1 + 0.75 * 3);
  for (uint32_t s = 0; s < 4; ++s) {
    EXPECT_TRUE(
        SameBits(fake_->submitted(1, s), Expected(spec_, {&fa, &fb}, s, Weighting::kFedNova)))
        << "slice " << s;
  }
  WorkerOutcome oa = PullOk(a, 1), ob = PullOk(b, 1);
  EXPECT_EQ(oa.kind, RoundOutcome::Kind::kPublished);
  EXPECT_TRUE(oa.included);
  EXPECT_TRUE(ob.included);
  ASSERT_NE(oa.aggregate, nullptr);
  EXPECT_EQ(oa.aggregate->digest, ob.aggregate->digest);
  RoundStats st = Stats(1);
  EXPECT_EQ(st.state, "published");
  EXPECT_EQ(st.close_reason, "complete");
  EXPECT_EQ(st.included, 2u);
  uint64_t bytes = 0;
  for (auto& f : fa) bytes += f.size();
  for (auto& f : fb) bytes += f.size();
  EXPECT_EQ(st.bytes_in, bytes);
  EXPECT_DOUBLE_EQ(st.compression_ratio, 2.0 * 4 * 364 / bytes);
  EXPECT_TRUE(st.region_included);
}

TEST_F(EngineTest, ArrivalOrderDoesNotChangeABit) {
  std::vector<std::vector<float>> first;
  uint64_t first_digest = 0;
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, {2, 0, 1}, {1, 2, 0}}) {
    Make();
    std::vector<uint32_t> ids = {JoinOk("w-a"), JoinOk("w-b"), JoinOk("w-c")};
    for (int i : order) ASSERT_TRUE(PushOk(ids[i], 1, 100 * (i + 1), i + 1).ok());
    ASSERT_TRUE(Resolved(1));
    std::vector<std::vector<float>> got;
    for (uint32_t s = 0; s < 4; ++s) got.push_back(fake_->submitted(1, s));
    uint64_t digest = PullOk(ids[0], 1).aggregate->digest;
    if (first.empty()) {
      first = got;
      first_digest = digest;
    } else {
      for (uint32_t s = 0; s < 4; ++s) EXPECT_TRUE(SameBits(first[s], got[s])) << "slice " << s;
      EXPECT_EQ(digest, first_digest);
    }
    engine_.reset();
  }
}

TEST_F(EngineTest, DuplicateOldFutureAndReplayedPushesAreRefused) {
  Make();
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  ASSERT_TRUE(PushOk(a, 1).ok());
  EXPECT_EQ(PushOk(a, 1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(engine_->CheckPush(a, 1).code(), absl::StatusCode::kAlreadyExists);
  absl::Status future = PushOk(b, 3);
  EXPECT_EQ(future.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(future.message(), HasSubstr("round 3 has not begun; the relay collects round 1"));
  ASSERT_TRUE(PushOk(b, 1).ok());
  ASSERT_TRUE(Resolved(1));
  // Round 1 is over: a late push for it names both rounds; a re-send of one already taken is a
  // duplicate.
  EXPECT_EQ(PushOk(a, 1).code(), absl::StatusCode::kAlreadyExists);
  // A round-1 frame replayed inside a round-2 push.
  absl::Status replay = engine_->Push(a, 2, MakeFrames(spec_, 1, a, 100, 1, a));
  EXPECT_EQ(replay.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(replay.message(), HasSubstr("the frame is of round 1"));
  EXPECT_THAT(replay.message(), HasSubstr("push of round 2"));
  // Non-members.
  EXPECT_EQ(PushOk(42, 2).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(engine_->Leave(b).ok());
  EXPECT_EQ(PushOk(b, 2).code(), absl::StatusCode::kPermissionDenied);
  EngineStatus st = engine_->Status();
  EXPECT_EQ(st.refused["duplicate"], 3u);
  EXPECT_EQ(st.refused["wrong_round"], 2u);
  EXPECT_EQ(st.refused["not_member"], 2u);
}

TEST_F(EngineTest, LatePushNamesBothRounds) {
  Make({.push_timeout = absl::Seconds(10)});
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  ASSERT_TRUE(PushOk(a, 1).ok());
  clock_.Advance(absl::Seconds(11));
  engine_->Tick();
  ASSERT_TRUE(Resolved(1));
  absl::Status late = PushOk(b, 1);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.message(), HasSubstr("round 1 is closed; the relay now collects round 2"));
}

TEST_F(EngineTest, MalformedFramesAreRefusedAndTheRoundStillCompletes) {
  Make();
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  auto flipped = MakeFrames(spec_, 1, a, 100, 1, a);
  flipped[2][70] ^= 0x10;
  absl::Status s = engine_->Push(a, 1, flipped);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("slice 2"));
  auto short_push = MakeFrames(spec_, 1, a, 100, 1, a);
  short_push.pop_back();
  EXPECT_THAT(engine_->Push(a, 1, short_push).message(), HasSubstr("3 frames, the model has 4"));
  // Someone else's frames (sender id b) pushed as a.
  s = engine_->Push(a, 1, MakeFrames(spec_, 1, b, 100, 1, a));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sender id"));
  // Token counts that differ between slices.
  auto mixed = MakeFrames(spec_, 1, a, 100, 1, a);
  mixed[3] = MakeFrames(spec_, 1, a, 200, 1, a)[3];
  s = engine_->Push(a, 1, mixed);
  EXPECT_THAT(s.message(), HasSubstr("every slice of a push must carry the same counts"));
  EXPECT_EQ(Stats(1).state, "collecting");  // nothing was kept
  ASSERT_TRUE(PushOk(a, 1).ok());
  ASSERT_TRUE(PushOk(b, 1).ok());
  ASSERT_TRUE(Resolved(1));
  EXPECT_TRUE(PullOk(a, 1).included);
  EngineStatus st = engine_->Status();
  EXPECT_EQ(st.refused["malformed"], 3u);
  EXPECT_EQ(st.refused["inconsistent"], 1u);
}

TEST_F(EngineTest, LostWorkerIsRenormalizedAway) {
  Make({.push_timeout = absl::Seconds(30), .min_token_fraction = 0.5});
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b"), c = JoinOk("w-c");
  auto fa = MakeFrames(spec_, 1, a, 100, 1, a);
  auto fb = MakeFrames(spec_, 1, b, 100, 1, b);
  ASSERT_TRUE(engine_->Push(a, 1, fa).ok());
  ASSERT_TRUE(engine_->Push(b, 1, fb).ok());
  clock_.Advance(absl::Seconds(29));
  engine_->Tick();
  EXPECT_EQ(engine_->collecting_round(), 1u);  // not yet
  clock_.Advance(absl::Seconds(2));
  engine_->Tick();
  ASSERT_TRUE(Resolved(1));
  RoundStats st = Stats(1);
  EXPECT_EQ(st.close_reason, "deadline");
  EXPECT_EQ(st.expected, 3u);
  EXPECT_EQ(st.included, 2u);
  EXPECT_EQ(st.tokens, 200u);
  EXPECT_EQ(st.expected_tokens, 300u);  // c's expected tokens: the present workers' mean
  EXPECT_DOUBLE_EQ(st.wait_s, 31);
  for (uint32_t s = 0; s < 4; ++s) {
    EXPECT_TRUE(
        SameBits(fake_->submitted(1, s), Expected(spec_, {&fa, &fb}, s, Weighting::kFedNova)));
  }
  EXPECT_TRUE(PullOk(a, 1).included);
  WorkerOutcome oc = PullOk(c, 1);
  EXPECT_EQ(oc.kind, RoundOutcome::Kind::kPublished);  // c applies the update too
  EXPECT_FALSE(oc.included);
  EXPECT_THAT(oc.exclusion, HasSubstr("no push from this worker by round 1's deadline"));
}

TEST_F(EngineTest, LostWorkerAbortsTheRegionUnderTheAbortPolicy) {
  Make({.push_timeout = absl::Seconds(30), .missing = MissingPolicy::kAbort});
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  ASSERT_TRUE(PushOk(a, 1).ok());
  clock_.Advance(absl::Seconds(31));
  engine_->Tick();
  ASSERT_TRUE(Resolved(1));
  EXPECT_EQ(fake_->last_summary().tokens, 0u);
  EXPECT_EQ(fake_->slices_submitted(1), 0u);
  WorkerOutcome oa = PullOk(a, 1);
  EXPECT_FALSE(oa.included);
  EXPECT_THAT(oa.exclusion, HasSubstr("policy abort: 1 of 2 expected workers missing"));
  EXPECT_THAT(oa.exclusion, HasSubstr("w-b (sender 2)"));
  EXPECT_FALSE(PullOk(b, 1).included);
  EXPECT_FALSE(Stats(1).region_included);
}

TEST_F(EngineTest, BelowQuorumTheRegionContributesNothing) {
  Make({.push_timeout = absl::Seconds(30), .min_token_fraction = 0.6});
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  // Round 1 complete: b's last tokens (300) become its expected tokens.
  ASSERT_TRUE(PushOk(a, 1, 100).ok());
  ASSERT_TRUE(PushOk(b, 1, 300).ok());
  ASSERT_TRUE(Resolved(1));
  ASSERT_TRUE(PushOk(a, 2, 100).ok());
  clock_.Advance(absl::Seconds(31));
  engine_->Tick();
  ASSERT_TRUE(Resolved(2));
  EXPECT_EQ(fake_->last_summary().tokens, 0u);
  WorkerOutcome oa = PullOk(a, 2);
  EXPECT_FALSE(oa.included);
  EXPECT_THAT(oa.exclusion, HasSubstr("below quorum: present workers hold 100 of 400"));
}

TEST_F(EngineTest, LeavingMidRoundClosesItWithTheRest) {
  Make();
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  ASSERT_TRUE(PushOk(a, 1).ok());
  ASSERT_TRUE(engine_->Leave(b).ok());
  ASSERT_TRUE(Resolved(1));
  EXPECT_EQ(Stats(1).close_reason, "members left");
  EXPECT_TRUE(PullOk(a, 1).included);
  WorkerOutcome ob = PullOk(b, 1);  // a former member may still pull
  EXPECT_THAT(ob.exclusion, HasSubstr("left the region during round 1"));
}

TEST_F(EngineTest, SilentMembersAreDropped) {
  Make({.liveness_timeout = absl::Seconds(60)});
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  clock_.Advance(absl::Seconds(40));
  ASSERT_TRUE(engine_->Touch(a).ok());
  clock_.Advance(absl::Seconds(30));
  engine_->Tick();
  EXPECT_TRUE(engine_->Touch(a).ok());
  absl::Status s = engine_->Touch(b);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("liveness_timeout"));
  // Round 1 opens with a alone.
  ASSERT_TRUE(PushOk(a, 1).ok());
  ASSERT_TRUE(Resolved(1));
}

TEST_F(EngineTest, JoinerAfterOpenStartsNextRound) {
  Make();
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  ASSERT_TRUE(PushOk(a, 1).ok());
  absl::StatusOr<JoinResult> c = engine_->Join({.name = "w-c"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->first_round, 2u);
  absl::Status s = PushOk(c->sender_id, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("joined after round 1 opened"));
  ASSERT_TRUE(PushOk(b, 1).ok());
  ASSERT_TRUE(Resolved(1));
  EXPECT_THAT(PullOk(c->sender_id, 1).exclusion, HasSubstr("joined after it opened"));
  // Round 2 expects all three.
  ASSERT_TRUE(PushOk(a, 2).ok());
  EXPECT_EQ(Stats(2).expected, 3u);
}

TEST_F(EngineTest, RoundWaitsForMinWorkersBeforeOpening) {
  Make({.push_timeout = absl::Seconds(10), .min_workers = 2});
  uint32_t a = JoinOk("w-a");
  ASSERT_TRUE(PushOk(a, 1).ok());
  clock_.Advance(absl::Seconds(60));
  engine_->Tick();
  EXPECT_EQ(Stats(1).state, "collecting");  // held, no deadline yet
  absl::StatusOr<JoinResult> b = engine_->Join({.name = "w-b"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first_round, 1u);  // the round opened with both
  EXPECT_EQ(Stats(1).state, "open");
  EXPECT_EQ(Stats(1).expected, 2u);
  ASSERT_TRUE(PushOk(b->sender_id, 1).ok());
  ASSERT_TRUE(Resolved(1));
  EXPECT_EQ(Stats(1).included, 2u);
  EXPECT_EQ(engine_->Join({.name = "w-c"}).status().code(), absl::StatusCode::kOk);
}

TEST(SliceDigestTest, SeesFrameContentRoundAndSlice) {
  const ModelSpec spec = TestSpec();
  auto f1 = MakeFrames(spec, 1, 1, 100, 1, 1);
  auto f2 = MakeFrames(spec, 1, 1, 100, 1, 2);  // same lengths, other values
  ASSERT_EQ(f1[0].size(), f2[0].size());
  auto digest = [](uint64_t r, uint32_t s, const std::vector<uint8_t>& f) {
    SliceDigester d(r, s);
    d.AddWeight(1.0);
    d.AddFrame(f);
    return d.Digest();
  };
  EXPECT_EQ(digest(1, 0, f1[0]), digest(1, 0, f1[0]));
  EXPECT_NE(digest(1, 0, f1[0]), digest(1, 0, f2[0]));
  EXPECT_NE(digest(1, 0, f1[0]), digest(2, 0, f1[0]));
  EXPECT_NE(digest(1, 0, f1[0]), digest(1, 1, f1[0]));
  SliceDigester w(1, 0);
  w.AddWeight(0.5);
  w.AddFrame(f1[0]);
  EXPECT_NE(w.Digest(), digest(1, 0, f1[0]));
}

TEST_F(EngineTest, TimesAreMeasuredOnTheInjectedClock) {
  Make();
  fake_->set_auto_publish(false);
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  ASSERT_TRUE(PushOk(a, 1).ok());
  clock_.Advance(absl::Seconds(7));
  ASSERT_TRUE(PushOk(b, 1).ok());
  // Wait for the region's part to reach the exchange.
  for (int i = 0; i < 3000 && fake_->last_summary().round_id != 1; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(fake_->last_summary().round_id, 1u);
  // Round 2 collects while round 1 is at the WAN, but is not submitted before 1 resolves.
  ASSERT_TRUE(PushOk(a, 2).ok());
  ASSERT_TRUE(PushOk(b, 2).ok());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(fake_->last_summary().round_id, 1u);
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(fake_->Release(1).ok());
  ASSERT_TRUE(Resolved(1));
  RoundStats st = Stats(1);
  EXPECT_DOUBLE_EQ(st.wait_s, 7);
  EXPECT_DOUBLE_EQ(st.aggregate_s, 0);
  EXPECT_DOUBLE_EQ(st.wan_s, 5);
  // The same instants on the clock's own scale (seconds since the epoch).
  EXPECT_GT(st.opened_at_s, 0);
  EXPECT_DOUBLE_EQ(st.closed_at_s - st.opened_at_s, 7);
  EXPECT_DOUBLE_EQ(st.finished_at_s, st.closed_at_s);
  EXPECT_DOUBLE_EQ(st.resolved_at_s - st.finished_at_s, 5);
  for (int i = 0; i < 3000 && fake_->last_summary().round_id != 2; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(fake_->last_summary().round_id, 2u);
  ASSERT_TRUE(fake_->Release(2).ok());
  ASSERT_TRUE(Resolved(2));
}

TEST_F(EngineTest, RoundPublishedWithoutTheRegionEndsItsCollection) {
  Make();
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  ASSERT_TRUE(PushOk(a, 1).ok());
  fake_->PublishWithoutRegion(1);
  ASSERT_TRUE(Resolved(1));
  EXPECT_EQ(engine_->collecting_round(), 2u);
  WorkerOutcome oa = PullOk(a, 1);
  EXPECT_EQ(oa.kind, RoundOutcome::Kind::kPublished);
  EXPECT_FALSE(oa.included);
  EXPECT_THAT(oa.exclusion, HasSubstr("published without region 1"));
  EXPECT_FALSE(PullOk(b, 1).included);
  // Rounds missed entirely (a cut-off gateway) arrive in order and move collection on.
  fake_->Abort(2, absl::UnavailableError("coordinator lost quorum"));
  ASSERT_TRUE(Resolved(2));
  WorkerOutcome o2 = PullOk(a, 2);
  EXPECT_EQ(o2.kind, RoundOutcome::Kind::kAborted);
  EXPECT_THAT(o2.exclusion, HasSubstr("coordinator lost quorum"));
  EXPECT_EQ(engine_->collecting_round(), 3u);
  ASSERT_TRUE(PushOk(a, 3).ok());
  ASSERT_TRUE(PushOk(b, 3).ok());
  ASSERT_TRUE(Resolved(3));
  EXPECT_TRUE(PullOk(b, 3).included);
}

TEST_F(EngineTest, AnOutcomeOutOfOrderDoesNotWedgeLaterRounds) {
  Make();
  fake_->set_auto_publish(false);
  uint32_t a = JoinOk("w-a");
  ASSERT_TRUE(PushOk(a, 1).ok());
  for (int i = 0; i < 3000 && fake_->last_summary().round_id != 1; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(PushOk(a, 2).ok());  // closed, waiting for round 1's outcome
  // An exchange that skips round 1's outcome and delivers round 2's.
  fake_->PublishWithoutRegion(2);
  ASSERT_TRUE(Resolved(2));
  WorkerOutcome o1 = PullOk(a, 1);
  EXPECT_EQ(o1.kind, RoundOutcome::Kind::kAborted);
  EXPECT_THAT(o1.exclusion, HasSubstr("no outcome for round 1"));
  EXPECT_FALSE(PullOk(a, 2).included);
  fake_->set_auto_publish(true);
  ASSERT_TRUE(PushOk(a, 3).ok());
  ASSERT_TRUE(Resolved(3));
  EXPECT_TRUE(PullOk(a, 3).included);
}

TEST_F(EngineTest, AnUpdateTheGatewayKeptIsNotRestoredByTheWorkers) {
  Make({.push_timeout = absl::Seconds(10)}, nullptr, [](const RoundOutcome&) { return true; });
  fake_->set_auto_publish(false);
  uint32_t a = JoinOk("w-a"), b = JoinOk("w-b");
  ASSERT_TRUE(PushOk(a, 1).ok());
  clock_.Advance(absl::Seconds(11));
  engine_->Tick();  // b is late: a alone makes the region's part
  for (int i = 0; i < 3000 && fake_->last_summary().round_id != 1; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(fake_->last_summary().tokens, 100u);
  fake_->PublishWithoutRegion(1);  // the coordinator left the region out; the gateway kept it
  ASSERT_TRUE(Resolved(1));
  WorkerOutcome oa = PullOk(a, 1);
  EXPECT_FALSE(oa.included);
  EXPECT_TRUE(oa.retained);
  EXPECT_THAT(oa.exclusion, HasSubstr("the gateway keeps the region's update"));
  WorkerOutcome ob = PullOk(b, 1);  // b's push never reached the gateway: b restores
  EXPECT_FALSE(ob.included);
  EXPECT_FALSE(ob.retained);
  // A region that sat out submitted nothing: nothing can have been kept.
  ASSERT_TRUE(engine_->Leave(b).ok());
  fake_->set_auto_publish(true);
  Make({.push_timeout = absl::Seconds(10), .missing = MissingPolicy::kAbort}, nullptr,
       [](const RoundOutcome&) { return true; });
  a = JoinOk("w-a");
  b = JoinOk("w-b");
  ASSERT_TRUE(PushOk(a, 1).ok());
  clock_.Advance(absl::Seconds(11));
  engine_->Tick();
  ASSERT_TRUE(Resolved(1));
  EXPECT_FALSE(PullOk(a, 1).retained);
}

TEST_F(EngineTest, PullDeadlinesAndRangesAreReported) {
  Make({.keep_rounds = 2});
  uint32_t a = JoinOk("w-a");
  absl::StatusOr<WorkerOutcome> o = engine_->Pull(a, 1, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(o.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(o.status().message(), HasSubstr("the round has not ended by the pull deadline"));
  EXPECT_EQ(engine_->Pull(a, 5, absl::Now()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  bool cancel = true;
  o = engine_->Pull(a, 1, absl::Now() + absl::Seconds(60), [&] { return cancel; });
  EXPECT_EQ(o.status().code(), absl::StatusCode::kCancelled);
  for (uint64_t r = 1; r <= 4; ++r) {
    ASSERT_TRUE(PushOk(a, r).ok());
    ASSERT_TRUE(Resolved(r));
  }
  absl::Status old = engine_->Pull(a, 1, absl::Now()).status();
  EXPECT_EQ(old.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(old.message(), HasSubstr("no longer holds it"));
  EXPECT_TRUE(PullOk(a, 4).included);
  EXPECT_EQ(engine_->Pull(77, 4, absl::Now()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineTest, PlannerTokensAreTheExpectedTokens) {
  planner::PlannerConfig pc;
  pc.solver.target_round_s = 60;
  pc.solver.seq_len = 10;
  pc.solver.max_inner_steps = 100;
  auto p = planner::Planner::Create(pc);
  ASSERT_TRUE(p.ok()) << p.status();
  Make({.push_timeout = absl::Seconds(30), .min_token_fraction = 0.5}, p->get());
  planner::WorkerSpec ws{.throughput = planner::ThroughputModel::Constant(1000), .max_batch = 8};
  auto a = engine_->Join({.name = "w-a", .planner_spec = ws});
  auto b = engine_->Join({.name = "w-b", .planner_spec = ws});
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<planner::Plan> plan = engine_->CurrentPlan();
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->workers.size(), 2u);
  const uint64_t planned = plan->workers[1].tokens;
  ASSERT_GT(planned, 0u);
  ASSERT_TRUE(PushOk(a->sender_id, 1, 1).ok());
  clock_.Advance(absl::Seconds(31));
  engine_->Tick();
  ASSERT_TRUE(Resolved(1));
  EXPECT_EQ(Stats(1).expected_tokens, 1 + planned);
  EXPECT_FALSE(PullOk(a->sender_id, 1).included);  // 1 token of 1 + planned: below quorum
  ASSERT_TRUE(
      engine_
          ->Report(a->sender_id, {.round = 1, .batch_size = 8, .inner_steps = 1, .compute_s = 1.0})
          .ok());
  ASSERT_TRUE(engine_->Leave(b->sender_id).ok());
  plan = engine_->CurrentPlan();
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->workers.size(), 1u);
}

}  // namespace
}  // namespace heddle::relay
