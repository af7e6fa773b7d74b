#include "dataplane/relay/codec/aggregate.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(WeightsTest, TokensHandChecked) {
  absl::StatusOr<std::vector<double>> w =
      ComputeWeights(std::vector<Contribution>{{7, 1, 1}, {3, 3, 5}}, Weighting::kTokens);
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(*w, ElementsAre(0.25, 0.75));
}

// Worker A: batch 100 tokens/step, τ = 1 → n = 100; worker B: the same batch, τ = 3 → n = 300.
// Token weighting gives B three times A's weight on an update that already holds three times
// the steps; FedNova weights the per-step updates by their tokens (p = 1/4, 3/4), then scales
// by τ_eff = 1/4·1 + 3/4·3 = 2.5: w = 2.5·(1/4)/1 = 0.625 and 2.5·(3/4)/3 = 0.625.
TEST(WeightsTest, FedNovaHandChecked) {
  const std::vector<Contribution> c = {{1, 100, 1}, {2, 300, 3}};
  absl::StatusOr<std::vector<double>> tokens = ComputeWeights(c, Weighting::kTokens);
  absl::StatusOr<std::vector<double>> nova = ComputeWeights(c, Weighting::kFedNova);
  ASSERT_TRUE(tokens.ok() && nova.ok());
  EXPECT_THAT(*tokens, ElementsAre(0.25, 0.75));
  EXPECT_THAT(*nova, ElementsAre(0.625, 0.625));
  // Three workers, batches 10/20/40 per step, steps 8/4/2: every n_i = 80, τ_eff = 14/3.
  const std::vector<Contribution> d = {{1, 80, 8}, {2, 80, 4}, {3, 80, 2}};
  nova = ComputeWeights(d, Weighting::kFedNova);
  ASSERT_TRUE(nova.ok());
  EXPECT_THAT(*nova, ElementsAre(DoubleNear(14.0 / 72, 1e-15), DoubleNear(14.0 / 36, 1e-15),
                                 DoubleNear(14.0 / 18, 1e-15)));
}

TEST(WeightsTest, FedNovaWithEqualStepsIsTokenWeighting) {
  const std::vector<Contribution> c = {{1, 17, 5}, {2, 400, 5}, {9, 3, 5}};
  absl::StatusOr<std::vector<double>> tokens = ComputeWeights(c, Weighting::kTokens);
  absl::StatusOr<std::vector<double>> nova = ComputeWeights(c, Weighting::kFedNova);
  ASSERT_TRUE(tokens.ok() && nova.ok());
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR((*nova)[i], (*tokens)[i], 1e-15);
}

TEST(WeightsTest, Errors) {
  EXPECT_FALSE(ComputeWeights({}, Weighting::kTokens).ok());
  EXPECT_THAT(ComputeWeights(std::vector<Contribution>{{1, 5, 1}, {1, 6, 1}}, Weighting::kTokens)
                  .status()
                  .message(),
              HasSubstr("sender 1 contributes twice"));
  EXPECT_FALSE(ComputeWeights(std::vector<Contribution>{{1, 0, 1}}, Weighting::kTokens).ok());
  EXPECT_FALSE(ComputeWeights(std::vector<Contribution>{{1, 5, 0}}, Weighting::kFedNova).ok());
  EXPECT_THAT(
      ComputeWeights(std::vector<Contribution>{{1, UINT64_MAX, 1}, {2, 1, 1}}, Weighting::kTokens)
          .status()
          .message(),
      HasSubstr("past 2^64"));
}

std::vector<Contribution> RandomContributions(std::mt19937_64& rng, size_t k) {
  std::vector<Contribution> c;
  for (size_t i = 0; i < k; ++i) {
    c.push_back({static_cast<uint32_t>(i * 7 + rng() % 7), 1 + rng() % 1000000,
                 static_cast<uint32_t>(1 + rng() % 500)});
  }
  return c;
}

TEST(WeightsTest, PropertiesOnRandomSets) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<Contribution> c = RandomContributions(rng, 1 + trial % 12);
    absl::StatusOr<std::vector<double>> t = ComputeWeights(c, Weighting::kTokens);
    absl::StatusOr<std::vector<double>> f = ComputeWeights(c, Weighting::kFedNova);
    ASSERT_TRUE(t.ok() && f.ok());
    EXPECT_NEAR(std::accumulate(t->begin(), t->end(), 0.0), 1.0, 1e-12);
    // FedNova: Σ_i w_i τ_i / τ_eff = Σ p_i = 1; each w_i > 0.
    double tau_eff = 0;
    for (size_t i = 0; i < c.size(); ++i) tau_eff += (*t)[i] * c[i].inner_steps;
    double s = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_GT((*f)[i], 0.0);
      s += (*f)[i] * c[i].inner_steps / tau_eff;
    }
    EXPECT_NEAR(s, 1.0, 1e-12);
    // Any order of the same contributions: the same bits per sender.
    std::vector<size_t> perm(c.size());
    std::iota(perm.begin(), perm.end(), size_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<Contribution> shuffled;
    for (size_t i : perm) shuffled.push_back(c[i]);
    for (Weighting w : {Weighting::kTokens, Weighting::kFedNova}) {
      absl::StatusOr<std::vector<double>> a = ComputeWeights(c, w);
      absl::StatusOr<std::vector<double>> b = ComputeWeights(shuffled, w);
      for (size_t k = 0; k < perm.size(); ++k) {
        ASSERT_EQ(std::bit_cast<uint64_t>((*b)[k]), std::bit_cast<uint64_t>((*a)[perm[k]]));
      }
    }
    // A missing worker: token weights of the rest renormalize to w_i / (1 - w_missing).
    if (c.size() > 1) {
      std::vector<Contribution> rest(c.begin() + 1, c.end());
      absl::StatusOr<std::vector<double>> r = ComputeWeights(rest, Weighting::kTokens);
      ASSERT_TRUE(r.ok());
      for (size_t i = 0; i < rest.size(); ++i) {
        EXPECT_NEAR((*r)[i], (*t)[i + 1] / (1.0 - (*t)[0]), 1e-12);
      }
    }
  }
}

// Frames of `senders` random contributions over n values.
struct Round {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<FrameView> frames;
};

Round MakeRound(std::mt19937_64& rng, const std::vector<Contribution>& who, uint64_t n,
                uint32_t chunk, uint64_t round_id = 5) {
  Round r;
  for (const Contribution& c : who) {
    FrameHeader h{.round_id = round_id,
                  .sender_id = c.sender_id,
                  .tensor_id = 3,
                  .tensor_elements = n,
                  .element_count = n,
                  .chunk_size = chunk,
                  .inner_steps = c.inner_steps,
                  .token_count = c.tokens};
    std::vector<float> mags(FrameChunks(n, chunk));
    for (float& m : mags) m = std::ldexp(static_cast<float>(1 + rng() % 100000), -20);
    std::vector<uint64_t> signs(FrameWords(n));
    for (uint64_t& w : signs) w = rng();
    if (n % 64) signs.back() &= ~(~uint64_t{0} << (n % 64));
    absl::StatusOr<std::vector<uint8_t>> b = BuildFrame(h, mags, signs);
    EXPECT_TRUE(b.ok()) << b.status();
    r.bytes.push_back(*b);
  }
  for (const std::vector<uint8_t>& b : r.bytes) r.frames.push_back(*ParseFrame(b));
  return r;
}

TEST(AggregatorTest, HandChecked) {
  // Sender 1: 1 token, m = 2, all positive. Sender 2: 3 tokens, m = 4, odd values negative.
  // Δ = 1/4·2 + 3/4·4·s = 0.5 ± 3.
  const FrameHeader base{
      .round_id = 1, .tensor_elements = 64, .element_count = 64, .chunk_size = 64};
  FrameHeader h1 = base, h2 = base;
  h1.sender_id = 1;
  h1.token_count = 1;
  h2.sender_id = 2;
  h2.token_count = 3;
  const std::vector<float> m1 = {2.0f}, m2 = {4.0f};
  const std::vector<uint64_t> s1 = {0}, s2 = {0xAAAAAAAAAAAAAAAAull};
  std::vector<uint8_t> b1 = *BuildFrame(h1, m1, s1), b2 = *BuildFrame(h2, m2, s2);
  const std::vector<FrameView> frames = {*ParseFrame(b2), *ParseFrame(b1)};
  Aggregator agg;
  std::vector<float> out(64, 99.0f);
  // The default weighting is FedNova; with equal steps (τ = 1 here) it is token weighting.
  EXPECT_EQ(AggregateOptions{}.weighting, Weighting::kFedNova);
  ASSERT_TRUE(agg.Aggregate(frames, {}, out).ok());
  for (size_t j = 0; j < 64; ++j) ASSERT_EQ(out[j], j % 2 ? -2.5f : 3.5f) << j;
  // FedNova with τ = 1 and 3: weights 0.625 each (see WeightsTest.FedNovaHandChecked).
  h1.inner_steps = 1;
  h2.inner_steps = 3;
  b1 = *BuildFrame(h1, m1, s1);
  b2 = *BuildFrame(h2, m2, s2);
  const std::vector<FrameView> nova = {*ParseFrame(b1), *ParseFrame(b2)};
  ASSERT_TRUE(agg.Aggregate(nova, {.weighting = Weighting::kFedNova}, out).ok());
  for (size_t j = 0; j < 64; ++j) ASSERT_EQ(out[j], j % 2 ? 1.25f - 2.5f : 1.25f + 2.5f) << j;
}

TEST(AggregatorTest, ArrivalOrderAndKernelsDoNotChangeABit) {
  std::mt19937_64 rng(2);
  const uint64_t n = 10000;
  const std::vector<Contribution> who = RandomContributions(rng, 6);
  Round r = MakeRound(rng, who, n, 1024);
  Aggregator agg(8);
  for (Weighting w : {Weighting::kTokens, Weighting::kFedNova}) {
    std::vector<float> ref(n);
    ASSERT_TRUE(agg.Aggregate(r.frames, {.weighting = w}, ref, *KernelsFor(Isa::kScalar)).ok());
    // The same sum written out in the test: senders by id, c = (float)(w·m), fp32 adds.
    std::vector<size_t> order(who.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return who[a].sender_id < who[b].sender_id; });
    const std::vector<double> weights = *ComputeWeights(who, w);
    std::vector<float> want(n, 0.0f);
    for (size_t i : order) {
      for (size_t j = 0; j < n; ++j) {
        const float c = static_cast<float>(weights[i] * r.frames[i].magnitude(j / 1024));
        const bool neg = (r.frames[i].sign_word(j / 64) >> (j % 64)) & 1;
        want[j] = want[j] + (neg ? -c : c);
      }
    }
    ASSERT_EQ(0, std::memcmp(ref.data(), want.data(), 4 * n));
    for (int trial = 0; trial < 10; ++trial) {
      std::vector<FrameView> shuffled = r.frames;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        const SignKernels* k = KernelsFor(isa);
        if (k == nullptr) continue;
        std::vector<float> out(n);
        ASSERT_TRUE(agg.Aggregate(shuffled, {.weighting = w}, out, *k).ok());
        ASSERT_EQ(0, std::memcmp(ref.data(), out.data(), 4 * n)) << IsaName(isa);
      }
    }
  }
}

TEST(AggregatorTest, MissingWorkerRenormalizesOrAbortsByPolicy) {
  std::mt19937_64 rng(3);
  const std::vector<Contribution> who = {{1, 100, 1}, {2, 100, 1}, {3, 200, 1}};
  Round r = MakeRound(rng, who, 128, 64);
  Aggregator agg;
  std::vector<float> all(128), without3(128);
  ASSERT_TRUE(agg.Aggregate(r.frames, {}, all).ok());
  const std::vector<FrameView> two(r.frames.begin(), r.frames.begin() + 2);
  // Workers 1 and 2 hold half the 400 tokens expected.
  const AggregateOptions strict{.expected_tokens = 400, .min_token_fraction = 0.75};
  absl::Status s = agg.Aggregate(two, strict, without3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("200 of the 400 tokens"));
  ASSERT_TRUE(
      agg.Aggregate(two, {.expected_tokens = 400, .min_token_fraction = 0.5}, without3).ok());
  // Renormalized: each of the two weighs 1/2 now (1/4 before).
  for (size_t j = 0; j < 128; ++j) {
    float want = 0.0f;
    for (size_t i = 0; i < 2; ++i) {
      const float c = static_cast<float>(0.5 * r.frames[i].magnitude(j / 64));
      want = want + (((r.frames[i].sign_word(j / 64) >> (j % 64)) & 1) ? -c : c);
    }
    ASSERT_EQ(without3[j], want) << j;
  }
}

TEST(AggregatorTest, RefusesFramesThatDoNotBelongTogether) {
  std::mt19937_64 rng(4);
  Round a = MakeRound(rng, {{1, 10, 1}, {2, 10, 1}}, 128, 64, /*round_id=*/5);
  Round b = MakeRound(rng, {{3, 10, 1}}, 128, 64, /*round_id=*/6);
  Round c = MakeRound(rng, {{4, 10, 1}}, 128, 128);
  Round dup = MakeRound(rng, {{1, 10, 1}}, 128, 64);
  Aggregator agg;
  std::vector<float> out(128);
  std::vector<FrameView> f = a.frames;
  f.push_back(b.frames[0]);
  EXPECT_THAT(agg.Aggregate(f, {}, out).message(), HasSubstr("does not match"));
  f = a.frames;
  f.push_back(c.frames[0]);
  EXPECT_THAT(agg.Aggregate(f, {}, out).message(), HasSubstr("chunk 128"));
  f = a.frames;
  f.push_back(dup.frames[0]);
  EXPECT_THAT(agg.Aggregate(f, {}, out).message(), HasSubstr("twice"));
  std::vector<float> small(127);
  EXPECT_THAT(agg.Aggregate(a.frames, {}, small).message(), HasSubstr("output of 127"));
  EXPECT_FALSE(agg.Aggregate({}, {}, out).ok());
}

}  // namespace
}  // namespace heddle::relay
