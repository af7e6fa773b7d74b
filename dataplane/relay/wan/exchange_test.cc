#include "dataplane/relay/wan/exchange.h"

#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "common/crc32c.h"
#include "dataplane/relay/codec/frame.h"
#include "dataplane/relay/wan/internal/frame_crc.h"
#include "dataplane/relay/wan/internal/region_encoder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using wan_internal::FramePtr;
using wan_internal::RegionEncoder;

ModelSpec SmallSpec() {
  absl::StatusOr<ModelSpec> s = ModelSpecFromString(
      "chunk_size: 64\nslice_elements: 256\ntensors: [{name: a, elements: 1000}, {name: b, "
      "elements: 100}]\n");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::vector<float> RandomValues(size_t n, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Region 1: N = 100, τ_eff = 1; region 2: N = 300, τ_eff = 3 (the codec's worker-level case one
// level up): tokens (1/4, 3/4); fednova τ = 2.5, W = 2.5·(1/4)/1 = 2.5·(3/4)/3 = 0.625.
TEST(GlobalWeightsTest, HandChecked) {
  const std::vector<RegionPart> p = {{.region_id = 1, .tokens = 100, .tau_eff = 1.0},
                                     {.region_id = 2, .tokens = 300, .tau_eff = 3.0}};
  absl::StatusOr<std::vector<double>> tokens = GlobalWeights(p, Weighting::kTokens);
  absl::StatusOr<std::vector<double>> nova = GlobalWeights(p, Weighting::kFedNova);
  ASSERT_TRUE(tokens.ok() && nova.ok());
  EXPECT_THAT(*tokens, ElementsAre(0.25, 0.75));
  EXPECT_THAT(*nova, ElementsAre(0.625, 0.625));
  // Fractional τ_eff: N = (80, 80, 80), τ = (8, 4, 2.5): τ = 14.5/3, W_r = τ/(3 τ_r).
  const std::vector<RegionPart> q = {{.region_id = 3, .tokens = 80, .tau_eff = 8.0},
                                     {.region_id = 5, .tokens = 80, .tau_eff = 4.0},
                                     {.region_id = 9, .tokens = 80, .tau_eff = 2.5}};
  nova = GlobalWeights(q, Weighting::kFedNova);
  ASSERT_TRUE(nova.ok());
  const double tau = 14.5 / 3;
  EXPECT_THAT(*nova, ElementsAre(DoubleNear(tau / 24, 1e-15), DoubleNear(tau / 12, 1e-15),
                                 DoubleNear(tau / 7.5, 1e-15)));
}

TEST(GlobalWeightsTest, Errors) {
  EXPECT_THAT(GlobalWeights({}, Weighting::kTokens).status().message(), HasSubstr("no regions"));
  const std::vector<RegionPart> unordered = {{.region_id = 2, .tokens = 1},
                                             {.region_id = 1, .tokens = 1}};
  EXPECT_THAT(GlobalWeights(unordered, Weighting::kTokens).status().message(),
              HasSubstr("increasing region id"));
  const std::vector<RegionPart> twice = {{.region_id = 1, .tokens = 1},
                                         {.region_id = 1, .tokens = 1}};
  EXPECT_FALSE(GlobalWeights(twice, Weighting::kTokens).ok());
  const std::vector<RegionPart> zero = {{.region_id = 1, .tokens = 0}};
  EXPECT_THAT(GlobalWeights(zero, Weighting::kTokens).status().message(), HasSubstr("0 tokens"));
  const std::vector<RegionPart> tau = {{.region_id = 1, .tokens = 5, .tau_eff = 0.5}};
  EXPECT_THAT(GlobalWeights(tau, Weighting::kFedNova).status().message(), HasSubstr("tau_eff"));
  const std::vector<RegionPart> nan = {{.region_id = 1, .tokens = 5, .tau_eff = std::nan("")}};
  EXPECT_FALSE(GlobalWeights(nan, Weighting::kFedNova).ok());
  const std::vector<RegionPart> big = {{.region_id = 1, .tokens = UINT64_MAX},
                                       {.region_id = 2, .tokens = 1}};
  EXPECT_THAT(GlobalWeights(big, Weighting::kTokens).status().message(), HasSubstr("2^64"));
}

// The two-level aggregate equals the flat worker-level one (docs/relay-wan.md §3):
//   A_r = Σ_{i∈r} w_i^r Δ_i,  w_i^r = τ_r·(n_i/N_r)/τ_i,  τ_r = Σ_{i∈r} (n_i/N_r) τ_i
//   W_r A_r = τ·(N_r/N)/τ_r · τ_r·n_i/(N_r τ_i) Δ_i = τ·(n_i/N)/τ_i Δ_i = w_i Δ_i
// with τ = Σ_r (N_r/N) τ_r = Σ_i (n_i/N) τ_i, FedNova's τ_eff over every worker; for tokens
// W_r w_i^r = (N_r/N)(n_i/N_r) = n_i/N. Checked in double on random workers and updates.
TEST(GlobalWeightsTest, RegionLevelWeightsGiveTheFlatWorkerLevelAggregate) {
  std::mt19937_64 rng(7);
  for (Weighting weighting : {Weighting::kFedNova, Weighting::kTokens}) {
    for (int trial = 0; trial < 20; ++trial) {
      const int regions = 1 + int(rng() % 5);
      const size_t dim = 64;
      std::vector<Contribution> all;
      std::vector<std::vector<double>> delta_all;
      std::vector<RegionPart> parts;
      std::vector<std::vector<double>> region_agg;
      uint32_t next_sender = 1;
      for (int r = 0; r < regions; ++r) {
        const int workers = 1 + int(rng() % 6);
        std::vector<Contribution> members;
        std::vector<std::vector<double>> deltas;
        for (int i = 0; i < workers; ++i) {
          Contribution c{.sender_id = next_sender++,
                         .tokens = 1 + rng() % 100000,
                         .inner_steps = uint32_t(1 + rng() % 64)};
          std::normal_distribution<double> d(0, 1);
          std::vector<double> v(dim);
          for (double& x : v) x = d(rng);
          members.push_back(c);
          deltas.push_back(v);
          all.push_back(c);
          delta_all.push_back(v);
        }
        absl::StatusOr<std::vector<double>> w = ComputeWeights(members, weighting);
        ASSERT_TRUE(w.ok());
        uint64_t n_r = 0;
        for (const Contribution& c : members) n_r += c.tokens;
        double tau_r = 0;  // Σ p_i τ_i
        for (const Contribution& c : members)
          tau_r += double(c.tokens) / double(n_r) * c.inner_steps;
        std::vector<double> a(dim, 0.0);
        for (size_t i = 0; i < members.size(); ++i) {
          for (size_t j = 0; j < dim; ++j) a[j] += (*w)[i] * deltas[i][j];
        }
        parts.push_back({.region_id = uint32_t(10 + r), .tokens = n_r, .tau_eff = tau_r});
        region_agg.push_back(a);
      }
      absl::StatusOr<std::vector<double>> big_w = GlobalWeights(parts, weighting);
      absl::StatusOr<std::vector<double>> flat_w = ComputeWeights(all, weighting);
      ASSERT_TRUE(big_w.ok() && flat_w.ok());
      std::vector<double> two_level(dim, 0.0), flat(dim, 0.0);
      for (size_t r = 0; r < parts.size(); ++r) {
        for (size_t j = 0; j < dim; ++j) two_level[j] += (*big_w)[r] * region_agg[r][j];
      }
      for (size_t i = 0; i < all.size(); ++i) {
        for (size_t j = 0; j < dim; ++j) flat[j] += (*flat_w)[i] * delta_all[i][j];
      }
      for (size_t j = 0; j < dim; ++j) {
        EXPECT_NEAR(two_level[j], flat[j], 1e-12 * (1 + std::abs(flat[j])))
            << "weighting " << WeightingName(weighting) << " trial " << trial << " j " << j;
      }
    }
  }
  // And token weighting is not FedNova when the τ differ (the check above can tell them apart).
  const std::vector<RegionPart> p = {{.region_id = 1, .tokens = 100, .tau_eff = 1.0},
                                     {.region_id = 2, .tokens = 300, .tau_eff = 3.0}};
  EXPECT_NE((*GlobalWeights(p, Weighting::kTokens))[0],
            (*GlobalWeights(p, Weighting::kFedNova))[0]);
}

// Frames of `regions` regions for every slice of a spec, encoded from random data.
GlobalAggregate MakeAggregate(const ModelSpec& spec, uint64_t round, std::vector<uint32_t> regions,
                              uint64_t seed) {
  std::mt19937_64 rng(seed);
  GlobalAggregate g;
  g.round_id = round;
  g.weighting = Weighting::kFedNova;
  const std::vector<SliceRef> slices = Slices(spec);
  g.slices = uint32_t(slices.size());
  for (uint32_t region : regions) {
    RegionSummary sum{.round_id = round,
                      .region_id = region,
                      .tokens = 1 + rng() % 1000,
                      .tau_eff = 1.0 + double(rng() % 1000) / 100.0};
    g.parts.push_back({.region_id = region, .tokens = sum.tokens, .tau_eff = sum.tau_eff});
    RegionEncoder enc(spec, region, true);
    for (const SliceRef& s : slices) {
      std::vector<float> x = RandomValues(s.count, rng);
      EXPECT_TRUE(enc.Submit(round, s, x).ok());
    }
    absl::StatusOr<std::vector<FramePtr>> frames = enc.Finish(sum);
    EXPECT_TRUE(frames.ok()) << frames.status();
    for (const FramePtr& f : *frames) {
      absl::StatusOr<FramePtr> p = wan_internal::PatchFrameTotals(
          *f, sum.tokens, wan_internal::RegionInnerSteps(sum.tau_eff));
      EXPECT_TRUE(p.ok()) << p.status();
      g.frames.push_back(*p);
    }
  }
  absl::StatusOr<std::vector<double>> w = GlobalWeights(g.parts, g.weighting);
  EXPECT_TRUE(w.ok());
  for (size_t i = 0; i < g.parts.size(); ++i) g.parts[i].weight = (*w)[i];
  g.digest = GlobalDigest(g);
  return g;
}

TEST(AccumulateGlobalSliceTest, MatchesFrameByFrameReferenceInEveryKernelForm) {
  const ModelSpec spec = SmallSpec();
  const GlobalAggregate g = MakeAggregate(spec, 3, {2, 5, 11}, 1);
  const std::vector<SliceRef> slices = Slices(spec);
  for (const SliceRef& s : slices) {
    // Reference: +0.0f, then each region's frame in increasing region id with its weight.
    std::vector<float> ref(s.count, 0.0f);
    for (size_t p = 0; p < g.parts.size(); ++p) {
      absl::StatusOr<FrameView> f = ParseFrame(*g.frames[p * g.slices + s.index]);
      ASSERT_TRUE(f.ok());
      EXPECT_EQ(f->header().sender_id, g.parts[p].region_id);
      EXPECT_EQ(f->header().token_count, g.parts[p].tokens);
      EXPECT_EQ(f->header().inner_steps, wan_internal::RegionInnerSteps(g.parts[p].tau_eff));
      ASSERT_TRUE(AccumulateFrame(*f, g.parts[p].weight, ref, *KernelsFor(Isa::kScalar)));
    }
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      const SignKernels* k = KernelsFor(isa);
      if (k == nullptr) continue;
      std::vector<float> out(s.count, 123.0f);
      ASSERT_TRUE(AccumulateGlobalSlice(g, s.index, out, *k).ok());
      EXPECT_EQ(0, std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)))
          << "slice " << s.index << " isa " << int(isa);
    }
  }
}

TEST(AccumulateGlobalSliceTest, RefusesBadInputAndLeavesOutputAlone) {
  const ModelSpec spec = SmallSpec();
  GlobalAggregate g = MakeAggregate(spec, 3, {2, 5}, 2);
  std::vector<float> out(256, 7.0f);
  EXPECT_THAT(AccumulateGlobalSlice(g, 99, out).message(), HasSubstr("slice 99"));
  std::vector<float> short_out(100, 7.0f);
  EXPECT_THAT(AccumulateGlobalSlice(g, 0, short_out).message(), HasSubstr("output holds 100"));
  // A corrupted byte in the second region's frame: nothing written.
  auto bad = std::make_shared<std::vector<uint8_t>>(*g.frames[g.slices + 0]);
  (*bad)[100] ^= 1;
  g.frames[g.slices + 0] = bad;
  EXPECT_EQ(AccumulateGlobalSlice(g, 0, out).code(), absl::StatusCode::kDataLoss);
  for (float v : out) ASSERT_EQ(v, 7.0f);
  // A frame of another region in a part's place.
  GlobalAggregate h = MakeAggregate(spec, 3, {2, 5}, 2);
  std::swap(h.frames[0], h.frames[h.slices]);
  EXPECT_THAT(AccumulateGlobalSlice(h, 0, out).message(), HasSubstr("sender"));
  h.frames.pop_back();
  EXPECT_THAT(AccumulateGlobalSlice(h, 0, out).message(), HasSubstr("frames for 2 regions"));
}

TEST(GlobalDigestTest, EqualForEqualContentAndSensitiveToEveryField) {
  const ModelSpec spec = SmallSpec();
  const GlobalAggregate g = MakeAggregate(spec, 4, {1, 2, 3}, 3);
  // A deep copy (fresh buffers) has the same digest.
  GlobalAggregate copy = g;
  for (auto& f : copy.frames) f = std::make_shared<std::vector<uint8_t>>(*f);
  EXPECT_EQ(GlobalDigest(copy), g.digest);
  std::vector<GlobalAggregate> variants;
  auto variant = [&](auto change) {
    GlobalAggregate v = copy;
    change(v);
    variants.push_back(v);
  };
  variant([](GlobalAggregate& v) { v.round_id++; });
  variant([](GlobalAggregate& v) { v.weighting = Weighting::kTokens; });
  variant([](GlobalAggregate& v) { v.parts[1].tokens++; });
  variant([](GlobalAggregate& v) { v.parts[1].region_id = 7; });
  variant(
      [](GlobalAggregate& v) { v.parts[0].tau_eff = std::nextafter(v.parts[0].tau_eff, 99.0); });
  variant([](GlobalAggregate& v) { v.parts[2].weight = std::nextafter(v.parts[2].weight, 9.0); });
  variant([](GlobalAggregate& v) { std::swap(v.frames[0], v.frames[1]); });
  variant([](GlobalAggregate& v) { std::swap(v.frames[0], v.frames[v.slices]); });
  variant([](GlobalAggregate& v) {
    auto f = std::make_shared<std::vector<uint8_t>>(*v.frames[4]);
    (*f)[f->size() / 2] ^= 0x10;
    v.frames[4] = f;
  });
  variant([](GlobalAggregate& v) { v.frames.pop_back(); });
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_NE(GlobalDigest(variants[i]), g.digest) << "variant " << i;
  }
}

// The digests and the totals patch derived from valid frames' trailers equal the full
// computations bit for bit (what every gateway relies on to agree with the others).
TEST(FrameCrcTest, DerivedFromTrailersEqualsComputedOnValidFrames) {
  const ModelSpec spec = SmallSpec();
  std::mt19937_64 rng(7);
  // Zeros operator against feeding zero bytes.
  for (uint64_t n : {0, 1, 3, 64, 1000, 65537}) {
    const std::vector<uint8_t> zeros(n, 0);
    for (uint32_t prev : {0u, 1u, 0xdeadbeefu}) {
      // Crc32c(zeros, prev) = ~Z(~prev).
      EXPECT_EQ(Crc32c(zeros, prev), ~wan_internal::Crc32cExtendZeros(~prev, n)) << n;
    }
  }
  for (uint64_t round = 1; round <= 3; ++round) {
    RegionEncoder enc(spec, 4, true);
    std::vector<FramePtr> frames;
    for (const SliceRef& s : Slices(spec)) {
      absl::StatusOr<FramePtr> f = enc.Submit(round, s, RandomValues(s.count, rng));
      ASSERT_TRUE(f.ok());
      frames.push_back(*f);
      const std::span<const uint8_t> body(f->get()->data(), f->get()->size() - kFrameTrailerBytes);
      for (uint32_t prev : {0u, 0x9e3779b9u, uint32_t(rng())}) {
        EXPECT_EQ(wan_internal::BodyCrc(**f, prev), Crc32c(body, prev));
      }
      for (uint64_t tokens : {uint64_t{1}, uint64_t{12345}, ~uint64_t{0}}) {
        const uint32_t steps = uint32_t(rng()) | 1;  // ≥ 1
        absl::StatusOr<FramePtr> want = wan_internal::PatchFrameTotals(**f, tokens, steps);
        absl::StatusOr<FramePtr> got = wan_internal::PatchValidFrameTotals(**f, tokens, steps);
        ASSERT_TRUE(want.ok() && got.ok());
        EXPECT_EQ(**got, **want);
        EXPECT_TRUE(ParseFrame(**got).ok());
        // In two steps, on a copy made before the totals were known.
        std::vector<uint8_t> copy(**f);
        ASSERT_TRUE(wan_internal::WriteValidFrameTotals(**f, copy, tokens, steps).ok());
        EXPECT_EQ(copy, **want);
        // The patched frame's length and trailer, without the patched frame.
        absl::StatusOr<wan_internal::ValidFrameSum> sum =
            wan_internal::PatchedSumOfValidFrame(**f, tokens, steps);
        ASSERT_TRUE(sum.ok());
        EXPECT_EQ(sum->bytes, (*want)->size());
        EXPECT_EQ(sum->trailer, wan_internal::SumOfValidFrame(**want).trailer);
      }
    }
    frames.push_back(nullptr);  // a missing frame hashes as empty in both
    EXPECT_EQ(wan_internal::FramesDigestOfValidFrames(frames), wan_internal::FramesDigest(frames));
    const GlobalAggregate g = MakeAggregate(spec, round, {1, 3, 8}, round);
    EXPECT_EQ(wan_internal::GlobalDigestOfValidFrames(g), GlobalDigest(g));
    std::vector<wan_internal::ValidFrameSum> sums;
    for (const FramePtr& x : g.frames) sums.push_back(wan_internal::SumOfValidFrame(*x));
    EXPECT_EQ(wan_internal::GlobalDigestOfSums(g, sums), GlobalDigest(g));
    sums.back().trailer ^= 1;  // one frame's body differs: so does the digest
    EXPECT_NE(wan_internal::GlobalDigestOfSums(g, sums), GlobalDigest(g));
    sums.pop_back();  // and one frame fewer
    EXPECT_NE(wan_internal::GlobalDigestOfSums(g, sums), GlobalDigest(g));
  }
  EXPECT_FALSE(wan_internal::PatchValidFrameTotals(std::vector<uint8_t>(10), 1, 1).ok());
  EXPECT_FALSE(wan_internal::PatchedSumOfValidFrame(std::vector<uint8_t>(10), 1, 1).ok());
  std::vector<uint8_t> short_copy(10);
  EXPECT_FALSE(
      wan_internal::WriteValidFrameTotals(std::vector<uint8_t>(100), short_copy, 1, 1).ok());
  // Totals no frame may carry are refused by both, before anything is written.
  RegionEncoder enc(spec, 4, true);
  absl::StatusOr<FramePtr> f =
      enc.Submit(1, Slices(spec)[0], RandomValues(Slices(spec)[0].count, rng));
  ASSERT_TRUE(f.ok());
  for (auto [tokens, steps] : {std::pair<uint64_t, uint32_t>{0, 1}, {1, 0}}) {
    absl::StatusOr<FramePtr> valid = wan_internal::PatchValidFrameTotals(**f, tokens, steps);
    EXPECT_EQ(valid.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(valid.status().message(), HasSubstr("at least one token"));
    EXPECT_EQ(wan_internal::PatchFrameTotals(**f, tokens, steps).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(wan_internal::PatchedSumOfValidFrame(**f, tokens, steps).status().code(),
              absl::StatusCode::kInvalidArgument);
    std::vector<uint8_t> copy(**f);
    EXPECT_EQ(wan_internal::WriteValidFrameTotals(**f, copy, tokens, steps).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(copy, **f);  // nothing written
  }
}

// Collects outcomes from the exchange thread.
struct Outcomes {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<uint64_t, RoundOutcome>> got;
  WanExchange::OutcomeCallback Callback() {
    return [this](uint64_t r, RoundOutcome o) {
      std::lock_guard<std::mutex> l(mu);
      got.emplace_back(r, std::move(o));
      cv.notify_all();
    };
  }
  void WaitFor(size_t n) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return got.size() >= n; });
  }
};

TEST(LocalExchangeTest, PublishesEachRoundOnceInOrder) {
  const ModelSpec spec = SmallSpec();
  absl::StatusOr<std::unique_ptr<WanExchange>> ex =
      NewLocalExchange(spec, {.region_id = 4, .keep_rounds = 2});
  ASSERT_TRUE(ex.ok());
  Outcomes outcomes;
  (*ex)->SetOutcomeCallback(outcomes.Callback());
  std::mt19937_64 rng(5);
  const std::vector<SliceRef> slices = Slices(spec);
  for (uint64_t r = 1; r <= 4; ++r) {
    std::vector<std::vector<float>> inputs;
    for (const SliceRef& s : slices) {
      inputs.push_back(RandomValues(s.count, rng));
      ASSERT_TRUE((*ex)->SubmitSlice(r, s, inputs.back()).ok());
    }
    ASSERT_TRUE(
        (*ex)
            ->FinishRegion(
                {.round_id = r, .region_id = 4, .tokens = 10 * r, .tau_eff = 1.5, .workers = 2})
            .ok());
    outcomes.WaitFor(r);
    const auto& [id, o] = outcomes.got.back();
    ASSERT_EQ(id, r);
    ASSERT_EQ(o.kind, RoundOutcome::Kind::kPublished);
    EXPECT_TRUE(o.includes_this_region);
    const GlobalAggregate& g = *o.aggregate;
    EXPECT_EQ(g.round_id, r);
    ASSERT_EQ(g.parts.size(), 1u);
    EXPECT_EQ(g.parts[0].weight, 1.0);
    EXPECT_EQ(g.parts[0].tokens, 10 * r);
    EXPECT_EQ(g.digest, GlobalDigest(g));
    // With weight 1 the aggregate is the frame's decoding: signs agree with v = x + e.
    for (const SliceRef& s : slices) {
      std::vector<float> out(s.count), dec(s.count);
      ASSERT_TRUE(AccumulateGlobalSlice(g, s.index, out).ok());
      absl::StatusOr<FrameView> f = ParseFrame(*g.frames[s.index]);
      ASSERT_TRUE(f.ok());
      EXPECT_EQ(f->header().inner_steps, 2u);  // round(1.5)
      ASSERT_TRUE(DecodeFrame(*f, dec));
      EXPECT_EQ(0, std::memcmp(out.data(), dec.data(), out.size() * 4));
    }
    absl::StatusOr<std::shared_ptr<const GlobalAggregate>> p = (*ex)->Published(r);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->get(), o.aggregate.get());
  }
  EXPECT_EQ(outcomes.got.size(), 4u);
  EXPECT_FALSE((*ex)->Published(2).ok());  // keep_rounds = 2
  EXPECT_TRUE((*ex)->Published(3).ok());
  // A past round, a slice out of order, a wrong length, a mismatched summary.
  std::vector<float> x(slices[0].count, 1.0f);
  EXPECT_EQ((*ex)->SubmitSlice(4, slices[0], x).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT((*ex)->SubmitSlice(5, slices[1], x).message(), HasSubstr("expected slice 0"));
  EXPECT_THAT((*ex)->SubmitSlice(5, slices[0], std::vector<float>(3)).message(),
              HasSubstr("3 values given"));
  std::vector<float> nan = x;
  nan[5] = std::nanf("");
  EXPECT_THAT((*ex)->SubmitSlice(5, slices[0], nan).message(), HasSubstr("value 5"));
  ASSERT_TRUE((*ex)->SubmitSlice(5, slices[0], x).ok());
  EXPECT_THAT((*ex)->FinishRegion({.round_id = 5, .region_id = 4, .tokens = 1}).message(),
              HasSubstr("1 of 5 slices"));
  EXPECT_THAT((*ex)->FinishRegion({.round_id = 5, .region_id = 3, .tokens = 1}).message(),
              HasSubstr("region 3"));
}

TEST(LocalExchangeTest, RegionWithoutTokensAbortsTheRound) {
  const ModelSpec spec = SmallSpec();
  absl::StatusOr<std::unique_ptr<WanExchange>> ex = NewLocalExchange(spec, {.region_id = 1});
  ASSERT_TRUE(ex.ok());
  Outcomes outcomes;
  ASSERT_TRUE((*ex)->FinishRegion({.round_id = 1, .region_id = 1, .tokens = 0}).ok());
  (*ex)->SetOutcomeCallback(outcomes.Callback());  // outcomes wait for a callback
  outcomes.WaitFor(1);
  EXPECT_EQ(outcomes.got[0].first, 1u);
  EXPECT_EQ(outcomes.got[0].second.kind, RoundOutcome::Kind::kAborted);
  EXPECT_THAT(outcomes.got[0].second.reason.message(), HasSubstr("no tokens"));
  EXPECT_FALSE(outcomes.got[0].second.retained_by_gateway);
  EXPECT_FALSE((*ex)->Published(1).ok());
}

// Gateway error feedback: what the gateway sends over T rounds differs from what the region gave
// it by the residual alone, which stays bounded; without error feedback the difference grows
// with T (a constant input's sign-compression error repeats every round).
TEST(RegionEncoderTest, ErrorFeedbackKeepsTheDriftBounded) {
  const ModelSpec spec = SmallSpec();
  const SliceRef s = Slices(spec)[0];
  std::mt19937_64 rng(9);
  const std::vector<float> x = RandomValues(s.count, rng);
  auto drift_after = [&](bool ef, int rounds) {
    RegionEncoder enc(spec, 1, ef);
    std::vector<double> sent(s.count, 0.0), given(s.count, 0.0);
    for (int r = 1; r <= rounds; ++r) {
      absl::StatusOr<FramePtr> f = enc.Submit(r, s, x);
      EXPECT_TRUE(f.ok());
      std::vector<float> dec(s.count);
      EXPECT_TRUE(DecodeFrame(*ParseFrame(**f), dec));
      for (size_t j = 0; j < s.count; ++j) {
        sent[j] += dec[j];
        given[j] += x[j];
      }
      enc.Resolve(r, true);
    }
    double worst = 0;
    for (size_t j = 0; j < s.count; ++j) worst = std::max(worst, std::abs(sent[j] - given[j]));
    return worst;
  };
  // sent − given = −e_T: it levels off (here ~53 at T = 64, ~78 at 512) while plain sign
  // compression's error grows linearly (~175 at 64, ~1400 at 512).
  const double ef64 = drift_after(true, 64), ef512 = drift_after(true, 512);
  const double plain64 = drift_after(false, 64), plain512 = drift_after(false, 512);
  EXPECT_LT(ef512, 2 * ef64);        // 8× the rounds, not 8× the drift
  EXPECT_GT(plain512, 7 * plain64);  // the test can tell: plain does grow linearly
  EXPECT_LT(ef512 * 10, plain512);
}

// A round that does not use the region's frames puts them back into the residual: the next
// round sends (almost exactly) what the lost one would have, plus the new input.
TEST(RegionEncoderTest, UnusedRoundIsRetainedInTheResidual) {
  const ModelSpec spec = SmallSpec();
  const SliceRef s = Slices(spec)[0];
  std::mt19937_64 rng(11);
  const std::vector<float> x = RandomValues(s.count, rng);
  const std::vector<float> zero(s.count, 0.0f);
  RegionEncoder retained(spec, 1, true), fresh(spec, 1, true);
  ASSERT_TRUE(retained.Submit(1, s, x).ok());
  EXPECT_TRUE(retained.Resolve(1, false));
  absl::StatusOr<FramePtr> again = retained.Submit(2, s, zero);  // sends e ≈ x
  absl::StatusOr<FramePtr> once = fresh.Submit(2, s, x);
  ASSERT_TRUE(again.ok() && once.ok());
  absl::StatusOr<FrameView> a = ParseFrame(**again), b = ParseFrame(**once);
  ASSERT_TRUE(a.ok() && b.ok());
  for (uint64_t i = 0; i < FrameWords(s.count); ++i) EXPECT_EQ(a->sign_word(i), b->sign_word(i));
  for (uint64_t k = 0; k < a->chunks(); ++k) {
    EXPECT_NEAR(a->magnitude(k), b->magnitude(k), 1e-5 * b->magnitude(k));
  }
  // Without error feedback nothing is retained.
  RegionEncoder plain(spec, 1, false);
  ASSERT_TRUE(plain.Submit(1, s, x).ok());
  EXPECT_FALSE(plain.Resolve(1, false));
  // A resolved round cannot be submitted again.
  EXPECT_EQ(plain.Submit(1, s, x).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PatchFrameTotalsTest, WritesTotalsAndAValidChecksum) {
  const ModelSpec spec = SmallSpec();
  const SliceRef s = Slices(spec)[0];
  RegionEncoder enc(spec, 6, true);
  std::mt19937_64 rng(1);
  absl::StatusOr<FramePtr> f = enc.Submit(1, s, RandomValues(s.count, rng));
  ASSERT_TRUE(f.ok());
  absl::StatusOr<FramePtr> p = wan_internal::PatchFrameTotals(**f, 12345, 7);
  ASSERT_TRUE(p.ok());
  absl::StatusOr<FrameView> v = ParseFrame(**p);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->header().token_count, 12345u);
  EXPECT_EQ(v->header().inner_steps, 7u);
  EXPECT_TRUE(CheckFrameForSlice(*v, spec, s, 1, 6).ok());
  EXPECT_FALSE(wan_internal::PatchFrameTotals(**f, 0, 1).ok());  // tokens ≥ 1
  EXPECT_EQ(wan_internal::RegionInnerSteps(0.2), 1u);
  EXPECT_EQ(wan_internal::RegionInnerSteps(2.5), 3u);
  EXPECT_EQ(wan_internal::RegionInnerSteps(1e300), UINT32_MAX);
}

}  // namespace
}  // namespace heddle::relay
