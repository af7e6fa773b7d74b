#include "dataplane/relay/wan/grpc_exchange.h"

#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "control/collective/schedule_io.h"
#include "dataplane/relay/codec/frame.h"
#include "dataplane/relay/wan/internal/region_encoder.h"
#include "dataplane/relay/wan/peer.grpc.pb.h"
#include "dataplane/relay/wan/schedule_plan.h"
#include "dataplane/relay/wan/schedule_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

namespace pb = ::heddle::relay::peer::v1;
using ::testing::HasSubstr;
using wan_internal::FramePtr;

// 4 tensors, 7 slices of up to 16384 values; frames of ~6 KiB, sent in 4 KiB chunks.
ModelSpec TestSpec() {
  absl::StatusOr<ModelSpec> s = ModelSpecFromString(
      "chunk_size: 256\nslice_elements: 16384\ntensors:\n"
      "  - {name: embed, elements: 40000}\n  - {name: a, elements: 1000}\n"
      "  - {name: b, elements: 16384}\n  - {name: head, elements: 20000}\n");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// Outcomes seen by one gateway's region side.
struct Outcomes {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, RoundOutcome> got;
  std::vector<uint64_t> order;
  int duplicates = 0;

  WanExchange::OutcomeCallback Callback() {
    return [this](uint64_t r, RoundOutcome o) {
      std::lock_guard<std::mutex> l(mu);
      if (got.contains(r)) ++duplicates;
      got[r] = std::move(o);
      order.push_back(r);
      cv.notify_all();
    };
  }
  RoundOutcome Wait(uint64_t r) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return got.contains(r); });
    return got[r];
  }
  bool Has(uint64_t r) {
    std::lock_guard<std::mutex> l(mu);
    return got.contains(r);
  }
};

// The region side of one gateway: deterministic fp32 aggregates per (region, round).
std::vector<float> RegionSlice(uint32_t region, uint64_t round, const SliceRef& s) {
  std::mt19937_64 rng(region * 1000003 + round * 7919 + s.index);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(s.count);
  for (float& x : v) x = d(rng);
  return v;
}

// Region 2's frames of round 1, one per slice, as the bytes a peer streams.
std::vector<std::vector<uint8_t>> Region2Round1Frames(const ModelSpec& spec) {
  wan_internal::RegionEncoder enc(spec, 2, true);
  std::vector<std::vector<uint8_t>> frames;
  for (const SliceRef& s : Slices(spec)) frames.push_back(**enc.Submit(1, s, RegionSlice(2, 1, s)));
  return frames;
}

uint64_t Tokens(uint32_t region, uint64_t round) { return 1000 * region + 17 * round; }
double Tau(uint32_t region, uint64_t round) { return 1.0 + 0.25 * region + 0.5 * (round % 3); }

void SubmitRegion(WanExchange& ex, const ModelSpec& spec, uint32_t region, uint64_t round) {
  for (const SliceRef& s : Slices(spec)) {
    ASSERT_TRUE(ex.SubmitSlice(round, s, RegionSlice(region, round, s)).ok());
  }
  ASSERT_TRUE(ex.FinishRegion({.round_id = round,
                               .region_id = region,
                               .tokens = Tokens(region, round),
                               .tau_eff = Tau(region, round),
                               .workers = 3})
                  .ok());
}

// Waits (without a time limit: the test's own timeout catches a hang) for a condition on stats.
template <typename Pred>
void WaitUntil(Pred pred) {
  while (!pred()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// The outcomes before the exchange: members are destroyed in reverse order, and the exchange's
// outcome thread calls into them until the exchange is gone.
struct Gateway {
  std::unique_ptr<Outcomes> outcomes = std::make_unique<Outcomes>();
  std::unique_ptr<GrpcExchange> ex;
};

class Mesh {
 public:
  explicit Mesh(ModelSpec spec, std::vector<uint32_t> regions = {1, 2, 3})
      : spec_(std::move(spec)), regions_(std::move(regions)) {}

  WanOptions Options(uint32_t region) const {
    WanOptions o;
    o.region_id = region;
    o.listen_address = "127.0.0.1:0";
    for (uint32_t r : regions_) {
      if (r != region) o.peers.push_back({.region_id = r, .address = ""});
    }
    o.streams_per_peer = 3;
    o.wan_timeout = absl::Seconds(600);  // never reached unless a test shortens it
    o.token = "s3cret-token";
    o.chunk_bytes = 4096;
    o.keep_rounds = 4;
    o.rpc_timeout = absl::Seconds(20);
    o.decision_poll = absl::Seconds(2);
    o.backoff_min = absl::Milliseconds(10);
    o.backoff_max = absl::Milliseconds(200);
    return o;
  }

  void Start(uint32_t region, WanOptions o) {
    absl::StatusOr<std::unique_ptr<GrpcExchange>> ex = StartGrpcExchange(spec_, o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    Gateway& g = gw_[region];
    g.ex = *std::move(ex);
    g.outcomes = std::make_unique<Outcomes>();
    g.ex->SetOutcomeCallback(g.outcomes->Callback());
  }
  void StartAll(std::function<void(WanOptions&)> tweak = nullptr) {
    for (uint32_t r : regions_) {
      WanOptions o = Options(r);
      if (tweak) tweak(o);
      Start(r, o);
    }
    ConnectAll();
  }
  // Tells every gateway every other gateway's address.
  void ConnectAll() {
    for (auto& [r, g] : gw_) {
      if (g.ex == nullptr) continue;
      for (auto& [q, h] : gw_) {
        if (q == r || h.ex == nullptr) continue;
        ASSERT_TRUE(g.ex->SetPeerAddress(q, Address(q)).ok());
      }
    }
  }
  std::string Address(uint32_t region) {
    return absl::StrFormat("127.0.0.1:%d", gw_.at(region).ex->port());
  }

  GrpcExchange& ex(uint32_t r) { return *gw_.at(r).ex; }
  Outcomes& outcomes(uint32_t r) { return *gw_.at(r).outcomes; }
  void Kill(uint32_t r) { gw_.at(r).ex.reset(); }
  const ModelSpec& spec() const { return spec_; }

 private:
  ModelSpec spec_;
  std::vector<uint32_t> regions_;
  std::map<uint32_t, Gateway> gw_;
};

// Runs region `region`'s round r and waits until the coordinator (region 1) holds its summary
// and every frame: the tests that shorten the coordinator's wan_timeout start the timeout only
// after that, so what it leaves out is exactly the region that never sent anything.
void SubmitReady(Mesh& m, uint32_t region, uint64_t r) {
  const size_t nslices = Slices(m.spec()).size();
  const uint64_t before = m.ex(1).Stats().peers[region - 2].frames_received;
  SubmitRegion(m.ex(region), m.spec(), region, r);
  WaitUntil([&] {
    const WanPeerStats p = m.ex(1).Stats().peers[region - 2];
    return p.last_summary_round == r && p.frames_received >= before + nslices;
  });
}

std::vector<uint32_t> PartIds(const GlobalAggregate& g) {
  std::vector<uint32_t> ids;
  for (const RegionPart& p : g.parts) ids.push_back(p.region_id);
  return ids;
}

// Every slice's dense aggregate, as bytes.
std::vector<std::vector<float>> Dense(const GlobalAggregate& g, const ModelSpec& spec) {
  std::vector<std::vector<float>> out;
  for (const SliceRef& s : Slices(spec)) {
    out.emplace_back(s.count);
    EXPECT_TRUE(AccumulateGlobalSlice(g, s.index, out.back()).ok());
  }
  return out;
}

// The aggregate computed independently: each region's frames from a fresh encoder fed the same
// rounds (error feedback carries over), patched, weighted.
class Reference {
 public:
  explicit Reference(const ModelSpec& spec) : spec_(spec) {}
  // Feeds region r's round (call for every round the region submitted, in order); `used`
  // says whether the round included it.
  std::vector<FramePtr> Feed(uint32_t region, uint64_t round, bool used) {
    auto [it, fresh] = enc_.try_emplace(region, nullptr);
    if (fresh) it->second = std::make_unique<wan_internal::RegionEncoder>(spec_, region, true);
    std::vector<FramePtr> frames;
    for (const SliceRef& s : Slices(spec_)) {
      absl::StatusOr<FramePtr> f = it->second->Submit(round, s, RegionSlice(region, round, s));
      EXPECT_TRUE(f.ok());
      absl::StatusOr<FramePtr> p = wan_internal::PatchFrameTotals(
          **f, Tokens(region, round), wan_internal::RegionInnerSteps(Tau(region, round)));
      EXPECT_TRUE(p.ok());
      frames.push_back(*p);
    }
    EXPECT_TRUE(it->second
                    ->Finish({.round_id = round,
                              .region_id = region,
                              .tokens = Tokens(region, round),
                              .tau_eff = Tau(region, round)})
                    .ok());
    it->second->Resolve(round, used);
    return frames;
  }
  GlobalAggregate Aggregate(uint64_t round, const std::map<uint32_t, std::vector<FramePtr>>& in) {
    GlobalAggregate g;
    g.round_id = round;
    g.slices = static_cast<uint32_t>(Slices(spec_).size());
    for (const auto& [region, frames] : in) {
      g.parts.push_back(
          {.region_id = region, .tokens = Tokens(region, round), .tau_eff = Tau(region, round)});
      g.frames.insert(g.frames.end(), frames.begin(), frames.end());
    }
    std::vector<double> w = *GlobalWeights(g.parts, g.weighting);
    for (size_t i = 0; i < w.size(); ++i) g.parts[i].weight = w[i];
    g.digest = GlobalDigest(g);
    return g;
  }

 private:
  ModelSpec spec_;
  std::map<uint32_t, std::unique_ptr<wan_internal::RegionEncoder>> enc_;
};

void ExpectSameEverywhere(Mesh& m, uint64_t r, std::vector<uint32_t> gateways,
                          const GlobalAggregate* reference = nullptr) {
  RoundOutcome first = m.outcomes(gateways[0]).Wait(r);
  ASSERT_EQ(first.kind, RoundOutcome::Kind::kPublished) << first.reason;
  const auto dense0 = Dense(*first.aggregate, m.spec());
  for (uint32_t gw : gateways) {
    RoundOutcome o = m.outcomes(gw).Wait(r);
    ASSERT_EQ(o.kind, RoundOutcome::Kind::kPublished) << "gateway " << gw << ": " << o.reason;
    const GlobalAggregate& g = *o.aggregate;
    EXPECT_EQ(g.round_id, r);
    EXPECT_EQ(g.digest, first.aggregate->digest) << "gateway " << gw << " round " << r;
    EXPECT_EQ(GlobalDigest(g), g.digest);
    ASSERT_EQ(g.frames.size(), first.aggregate->frames.size());
    for (size_t i = 0; i < g.frames.size(); ++i) {
      ASSERT_EQ(*g.frames[i], *first.aggregate->frames[i]) << "gateway " << gw << " frame " << i;
    }
    const auto dense = Dense(g, m.spec());
    for (size_t s = 0; s < dense.size(); ++s) {
      ASSERT_EQ(0, std::memcmp(dense[s].data(), dense0[s].data(), dense[s].size() * 4));
    }
    EXPECT_EQ((*m.ex(gw).Published(r)).get(), o.aggregate.get());
  }
  if (reference != nullptr) {
    EXPECT_EQ(first.aggregate->digest, reference->digest) << "round " << r;
    EXPECT_EQ(PartIds(*first.aggregate), PartIds(*reference));
  }
}

TEST(GrpcExchangeTest, ThreeGatewaysPublishBitIdenticalAggregatesEveryRound) {
  Mesh m(TestSpec());
  m.StartAll();
  Reference ref(m.spec());
  for (uint64_t r = 1; r <= 4; ++r) {
    std::map<uint32_t, std::vector<FramePtr>> frames;
    for (uint32_t region : {1u, 2u, 3u}) frames[region] = ref.Feed(region, r, true);
    // The regions run concurrently, as they do in production.
    std::vector<std::thread> t;
    for (uint32_t region : {3u, 1u, 2u}) {
      t.emplace_back([&, region] { SubmitRegion(m.ex(region), m.spec(), region, r); });
    }
    for (std::thread& x : t) x.join();
    GlobalAggregate want = ref.Aggregate(r, frames);
    ExpectSameEverywhere(m, r, {1, 2, 3}, &want);
    for (uint32_t gw : {1u, 2u, 3u}) {
      RoundOutcome o = m.outcomes(gw).Wait(r);
      EXPECT_TRUE(o.includes_this_region);
      EXPECT_FALSE(o.retained_by_gateway);
      EXPECT_EQ(PartIds(*o.aggregate), (std::vector<uint32_t>{1, 2, 3}));
    }
  }
  for (uint32_t gw : {1u, 2u, 3u}) {
    Outcomes& o = m.outcomes(gw);
    std::lock_guard<std::mutex> l(o.mu);
    EXPECT_EQ(o.order, (std::vector<uint64_t>{1, 2, 3, 4})) << "gateway " << gw;
    EXPECT_EQ(o.duplicates, 0);
    WanStats s = m.ex(gw).Stats();
    EXPECT_EQ(s.rounds_published, 4u);
    EXPECT_EQ(s.published_through, 4u);
    EXPECT_EQ(s.coordinator, gw == 1);
    EXPECT_EQ(s.auth_failures, 0u);
    EXPECT_EQ(s.malformed_messages, 0u);
    EXPECT_EQ(s.digest_mismatches, 0u);
    EXPECT_EQ(s.publish_count, 4u);
    ASSERT_EQ(s.peers.size(), 2u);
    for (const WanPeerStats& p : s.peers) {
      EXPECT_GT(p.bytes_sent, 0u);
      EXPECT_GT(p.frames_received, 0u);
    }
  }
  // Past rounds are refused with a clear error.
  const SliceRef s0 = Slices(m.spec())[0];
  EXPECT_EQ(m.ex(2).SubmitSlice(3, s0, RegionSlice(2, 3, s0)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(m.ex(2).Published(99).ok());
}

// The same inputs, finished in a different order by the regions: the same bits.
TEST(GrpcExchangeTest, ArrivalOrderOfRegionsDoesNotChangeABit) {
  std::vector<uint64_t> digests[2];
  const std::vector<uint32_t> orders[2] = {{1, 2, 3}, {3, 2, 1}};
  for (int run = 0; run < 2; ++run) {
    Mesh m(TestSpec());
    m.StartAll([&](WanOptions& o) { o.streams_per_peer = run == 0 ? 1 : 4; });
    for (uint64_t r = 1; r <= 2; ++r) {
      for (uint32_t region : orders[run]) {
        // The next region starts only once this one is ready at the coordinator.
        if (region != 1) {
          SubmitReady(m, region, r);
        } else {
          SubmitRegion(m.ex(1), m.spec(), 1, r);
        }
      }
      ExpectSameEverywhere(m, r, {1, 2, 3});
      digests[run].push_back(m.outcomes(1).Wait(r).aggregate->digest);
    }
  }
  EXPECT_EQ(digests[0], digests[1]);
}

TEST(GrpcExchangeTest, RegionWithoutTokensIsLeftOut) {
  Mesh m(TestSpec());
  m.StartAll();
  SubmitRegion(m.ex(1), m.spec(), 1, 1);
  ASSERT_TRUE(m.ex(2).FinishRegion({.round_id = 1, .region_id = 2, .tokens = 0}).ok());
  SubmitRegion(m.ex(3), m.spec(), 3, 1);
  ExpectSameEverywhere(m, 1, {1, 2, 3});
  EXPECT_EQ(PartIds(*m.outcomes(2).Wait(1).aggregate), (std::vector<uint32_t>{1, 3}));
  EXPECT_FALSE(m.outcomes(2).Wait(1).includes_this_region);
  EXPECT_FALSE(m.outcomes(2).Wait(1).retained_by_gateway);  // it sent nothing
  EXPECT_TRUE(m.outcomes(3).Wait(1).includes_this_region);
  // Every region without tokens: the round aborts everywhere.
  for (uint32_t region : {1u, 2u, 3u}) {
    ASSERT_TRUE(m.ex(region).FinishRegion({.round_id = 2, .region_id = region, .tokens = 0}).ok());
  }
  for (uint32_t gw : {1u, 2u, 3u}) {
    RoundOutcome o = m.outcomes(gw).Wait(2);
    EXPECT_EQ(o.kind, RoundOutcome::Kind::kAborted);
    EXPECT_THAT(o.reason.message(), HasSubstr("no region contributed tokens"));
  }
}

TEST(GrpcExchangeTest, QuorumAbortsTheRoundEverywhere) {
  Mesh m(TestSpec());
  m.StartAll([](WanOptions& o) {
    o.quorum.min_regions = 3;
    if (o.region_id == 1) o.wan_timeout = absl::Milliseconds(200);
  });
  SubmitReady(m, 2, 1);
  SubmitRegion(m.ex(1), m.spec(), 1, 1);  // region 3 stays silent: 2 of 3 regions
  for (uint32_t gw : {1u, 2u, 3u}) {
    RoundOutcome o = m.outcomes(gw).Wait(1);
    EXPECT_EQ(o.kind, RoundOutcome::Kind::kAborted) << "gateway " << gw;
    EXPECT_THAT(o.reason.message(), HasSubstr("quorum is 3"));
  }
  // The aborted round's frames went back into the residuals of the regions that sent them.
  EXPECT_TRUE(m.outcomes(1).Wait(1).retained_by_gateway);
  EXPECT_TRUE(m.outcomes(2).Wait(1).retained_by_gateway);
  EXPECT_FALSE(m.outcomes(3).Wait(1).retained_by_gateway);
}

// Region 3 cannot reach the coordinator: the coordinator's timeout leaves it out of rounds 1
// and 2; when the link comes back, gateway 3 publishes both (without its region, the first
// retained in its residual), identical to the others, then rejoins round 3.
TEST(GrpcExchangeTest, CoordinatorTimeoutLeavesOutACutOffRegionThatCatchesUpAndRejoins) {
  Mesh m(TestSpec());
  m.StartAll([](WanOptions& o) {
    if (o.region_id == 1) o.wan_timeout = absl::Milliseconds(300);
  });
  // Cut 3 off from the coordinator: a closed port.
  ASSERT_TRUE(m.ex(3).SetPeerAddress(1, "127.0.0.1:1").ok());
  Reference ref(m.spec());
  for (uint64_t r = 1; r <= 2; ++r) {
    std::map<uint32_t, std::vector<FramePtr>> frames;
    for (uint32_t region : {1u, 2u}) frames[region] = ref.Feed(region, r, true);
    if (r == 1) {
      SubmitRegion(m.ex(3), m.spec(), 3, 1);  // finishes, but cannot reach the coordinator
      ref.Feed(3, 1, false);
    }
    SubmitReady(m, 2, r);
    SubmitRegion(m.ex(1), m.spec(), 1, r);
    GlobalAggregate want = ref.Aggregate(r, frames);
    ExpectSameEverywhere(m, r, {1, 2}, &want);
  }
  EXPECT_FALSE(m.outcomes(3).Has(1));  // no decision, no publication: it waits
  ASSERT_TRUE(m.ex(3).SetPeerAddress(1, m.Address(1)).ok());
  ExpectSameEverywhere(m, 1, {1, 2, 3});
  ExpectSameEverywhere(m, 2, {1, 2, 3});
  EXPECT_FALSE(m.outcomes(3).Wait(1).includes_this_region);
  EXPECT_TRUE(m.outcomes(3).Wait(1).retained_by_gateway);
  EXPECT_FALSE(m.outcomes(3).Wait(2).includes_this_region);
  EXPECT_FALSE(m.outcomes(3).Wait(2).retained_by_gateway);
  // Round 3: everyone.
  std::map<uint32_t, std::vector<FramePtr>> frames;
  for (uint32_t region : {1u, 2u, 3u}) frames[region] = ref.Feed(region, 3, true);
  for (uint32_t region : {3u, 2u}) {
    SubmitReady(m, region, 3);
  }
  SubmitRegion(m.ex(1), m.spec(), 1, 3);
  GlobalAggregate want = ref.Aggregate(3, frames);
  ExpectSameEverywhere(m, 3, {1, 2, 3}, &want);
  EXPECT_TRUE(m.outcomes(3).Wait(3).includes_this_region);
  {
    Outcomes& o = m.outcomes(3);
    std::lock_guard<std::mutex> l(o.mu);
    EXPECT_EQ(o.order, (std::vector<uint64_t>{1, 2, 3}));
  }
  WanStats s1 = m.ex(1).Stats();
  EXPECT_EQ(s1.rounds_published, 3u);
  WanStats s3 = m.ex(3).Stats();
  EXPECT_EQ(s3.rounds_without_this_region, 2u);
}

TEST(GrpcExchangeTest, GatewayKilledAndRestartedCatchesUpAndRejoins) {
  Mesh m(TestSpec());
  m.StartAll([](WanOptions& o) {
    if (o.region_id == 1) o.wan_timeout = absl::Milliseconds(300);
  });
  const size_t nslices = Slices(m.spec()).size();
  for (uint32_t region : {2u, 3u}) SubmitReady(m, region, 1);
  SubmitRegion(m.ex(1), m.spec(), 1, 1);
  ExpectSameEverywhere(m, 1, {1, 2, 3});
  const uint64_t digest1 = m.outcomes(1).Wait(1).aggregate->digest;
  m.Kill(3);
  for (uint64_t r = 2; r <= 4; ++r) {
    SubmitReady(m, 2, r);
    SubmitRegion(m.ex(1), m.spec(), 1, r);
    ExpectSameEverywhere(m, r, {1, 2});
    EXPECT_EQ(PartIds(*m.outcomes(1).Wait(r).aggregate), (std::vector<uint32_t>{1, 2}));
  }
  // What waits for the dead peer is the round in progress and the last published one (a peer
  // may still be assembling it, with this gateway its only route for some frames) and at most
  // one older item at the head of each of its 3 streams' queues; on the summary stripe, the
  // summaries of the same two rounds and one older: not every round since it died.
  for (uint32_t gw : {1u, 2u}) {
    const WanPeerStats p3 = m.ex(gw).Stats().peers[1];
    EXPECT_EQ(p3.region_id, 3u);
    EXPECT_FALSE(p3.connected);
    EXPECT_LE(p3.queued_items, 2 * nslices + 3 + 3) << "gateway " << gw;
  }
  // Restart 3 (a new port): it replays the rounds the coordinator keeps (1..4), then rejoins.
  m.Start(3, m.Options(3));
  m.ConnectAll();
  for (uint64_t r = 1; r <= 4; ++r) ExpectSameEverywhere(m, r, {1, 2, 3});
  // Round 1 holds region 3's frames from before the restart: it does include the region; the
  // new instance had nothing open, so nothing is retained.
  EXPECT_EQ(m.outcomes(3).Wait(1).aggregate->digest, digest1);
  EXPECT_TRUE(m.outcomes(3).Wait(1).includes_this_region);
  EXPECT_FALSE(m.outcomes(3).Wait(1).retained_by_gateway);
  EXPECT_FALSE(m.outcomes(3).Wait(4).includes_this_region);
  EXPECT_GE(m.ex(3).Stats().frames_fetched, 4 * nslices);  // it held none of those frames
  for (uint32_t region : {3u, 2u}) {
    SubmitReady(m, region, 5);
  }
  SubmitRegion(m.ex(1), m.spec(), 1, 5);
  ExpectSameEverywhere(m, 5, {1, 2, 3});
  EXPECT_EQ(PartIds(*m.outcomes(3).Wait(5).aggregate), (std::vector<uint32_t>{1, 2, 3}));
  {
    Outcomes& o = m.outcomes(3);
    std::lock_guard<std::mutex> l(o.mu);
    EXPECT_EQ(o.order, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  }
  EXPECT_GE(m.ex(1).Stats().peers[1].reconnects + m.ex(2).Stats().peers[1].reconnects, 1u);
}

// A gateway that holds a wrong copy of a region frame (here: a peer sent it a valid frame that
// differs from what the coordinator decided on) sees the digest mismatch, refetches from the
// coordinator and publishes the decided bits.
TEST(GrpcExchangeTest, DigestMismatchIsRepairedFromTheCoordinator) {
  Mesh m(TestSpec());
  m.StartAll();
  const std::vector<SliceRef> slices = Slices(m.spec());
  std::vector<float> x = RegionSlice(2, 1, slices[0]);
  for (float& v : x) v = -v;
  wan_internal::RegionEncoder forger(m.spec(), 2, true);
  const std::vector<uint8_t> wrong = **forger.Submit(1, slices[0], x);
  {
    // Pushed to gateway 3 as region 2, before the real gateway 2 sends anything.
    grpc::ChannelArguments args;
    auto stub = pb::Peer::NewStub(
        grpc::CreateCustomChannel(m.Address(3), grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext c;
    c.AddMetadata("authorization", "Bearer s3cret-token");
    c.AddMetadata("x-heddle-region", "2");
    c.AddMetadata("x-heddle-spec", absl::StrFormat("%016x", SpecDigest(m.spec())));
    c.AddMetadata("x-heddle-proto", absl::StrCat(kPeerProtocolVersion));
    pb::PushReply reply;
    auto w = stub->PushFrames(&c, &reply);
    pb::FrameChunk ch;
    ch.set_round_id(1);
    ch.set_region_id(2);
    ch.set_slice(0);
    ch.set_frame_bytes(wrong.size());
    ch.set_offset(0);
    ch.set_data(wrong.data(), wrong.size());
    ASSERT_TRUE(w->Write(ch));
    w->WritesDone();
    ASSERT_TRUE(w->Finish().ok());
  }
  for (uint32_t region : {1u, 2u, 3u}) SubmitRegion(m.ex(region), m.spec(), region, 1);
  ExpectSameEverywhere(m, 1, {1, 2, 3});
  EXPECT_EQ(m.ex(3).Stats().digest_mismatches, 1u);
  EXPECT_GE(m.ex(3).Stats().frames_fetched, 3 * slices.size());  // the refetch: every frame
  EXPECT_EQ(m.ex(2).Stats().digest_mismatches, 0u);
}

// A restarted coordinator lost the decisions it made; the followers refuse its new decisions
// rather than risk publishing a round twice with different contents (no split brain).
TEST(GrpcExchangeTest, FollowersRefuseDecisionsOfARestartedCoordinator) {
  Mesh m(TestSpec());
  auto short_timeout = [](WanOptions& o) {
    if (o.region_id == 1) o.wan_timeout = absl::Milliseconds(200);
  };
  m.StartAll(short_timeout);
  for (uint32_t region : {2u, 3u}) SubmitReady(m, region, 1);
  SubmitRegion(m.ex(1), m.spec(), 1, 1);
  ExpectSameEverywhere(m, 1, {1, 2, 3});
  m.Kill(1);
  WanOptions o = m.Options(1);
  short_timeout(o);
  m.Start(1, o);
  m.ConnectAll();
  // The new coordinator starts over at round 1 (alone: the others are at round 2), then round 2.
  SubmitRegion(m.ex(1), m.spec(), 1, 1);
  m.outcomes(1).Wait(1);
  for (uint32_t region : {2u, 3u}) SubmitRegion(m.ex(region), m.spec(), region, 2);
  SubmitRegion(m.ex(1), m.spec(), 1, 2);
  ASSERT_EQ(m.outcomes(1).Wait(2).kind, RoundOutcome::Kind::kPublished);
  WaitUntil([&] {
    return m.ex(2).Stats().coordinator_restarts > 0 && m.ex(3).Stats().coordinator_restarts > 0;
  });
  EXPECT_FALSE(m.outcomes(2).Has(2));
  EXPECT_FALSE(m.outcomes(3).Has(2));
}

// ---- a raw peer: what a misconfigured or hostile gateway sends ----

class RawPeer {
 public:
  RawPeer(int port, std::shared_ptr<grpc::ChannelCredentials> creds = nullptr,
          std::string name = "")
      : stub_(nullptr) {
    grpc::ChannelArguments args;
    if (!name.empty()) args.SetSslTargetNameOverride(name);
    stub_ = pb::Peer::NewStub(
        grpc::CreateCustomChannel(absl::StrFormat("127.0.0.1:%d", port),
                                  creds ? creds : grpc::InsecureChannelCredentials(), args));
  }
  struct Md {
    std::string token = "s3cret-token";
    std::string region = "2";
    std::string spec;
  };
  void Prepare(grpc::ClientContext& c, const Md& md) {
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (!md.token.empty()) c.AddMetadata("authorization", "Bearer " + md.token);
    c.AddMetadata("x-heddle-region", md.region);
    c.AddMetadata("x-heddle-spec", md.spec);
    c.AddMetadata("x-heddle-proto", absl::StrCat(kPeerProtocolVersion));
  }
  grpc::Status Hello(const Md& md, pb::HelloRequest req = {}) {
    grpc::ClientContext c;
    Prepare(c, md);
    pb::HelloReply reply;
    return stub_->Hello(&c, req, &reply);
  }
  grpc::Status Push(const Md& md, const std::vector<pb::FrameChunk>& chunks,
                    pb::PushReply* reply = nullptr) {
    grpc::ClientContext c;
    Prepare(c, md);
    pb::PushReply r;
    auto w = stub_->PushFrames(&c, reply ? reply : &r);
    for (const pb::FrameChunk& ch : chunks) {
      if (!w->Write(ch)) break;
    }
    w->WritesDone();
    return w->Finish();
  }
  grpc::Status Finish(const Md& md, const pb::RegionFinish& f) {
    grpc::ClientContext c;
    Prepare(c, md);
    pb::FinishReply reply;
    return stub_->FinishRegion(&c, f, &reply);
  }
  grpc::Status Wait(const Md& md, const pb::DecisionRequest& req) {
    grpc::ClientContext c;
    Prepare(c, md);
    pb::DecisionReply reply;
    return stub_->WaitDecision(&c, req, &reply);
  }
  grpc::Status Fetch(const Md& md, const pb::FetchRequest& req) {
    grpc::ClientContext c;
    Prepare(c, md);
    auto r = stub_->FetchFrames(&c, req);
    pb::FrameChunk ch;
    while (r->Read(&ch)) {
    }
    return r->Finish();
  }
  grpc::Status Stream(const Md& md, const std::vector<pb::FrameChunk>& chunks) {
    grpc::ClientContext c;
    Prepare(c, md);
    auto s = stub_->StreamFrames(&c);
    for (const pb::FrameChunk& ch : chunks) {
      if (!s->Write(ch)) break;
    }
    s->WritesDone();
    pb::FrameAck ack;
    while (s->Read(&ack)) {
    }
    return s->Finish();
  }
  // A poll that answers at once (wait_ms 0).
  grpc::Status Poll(const Md& md, uint64_t round, pb::DecisionReply* reply) {
    grpc::ClientContext c;
    Prepare(c, md);
    pb::DecisionRequest req;
    req.set_round_id(round);
    req.set_wait_ms(0);
    return stub_->WaitDecision(&c, req, reply);
  }

 private:
  std::unique_ptr<pb::Peer::Stub> stub_;
};

std::vector<pb::FrameChunk> Chunks(uint64_t round, uint32_t region, uint32_t slice,
                                   const std::vector<uint8_t>& f, size_t chunk = 1024) {
  std::vector<pb::FrameChunk> out;
  for (size_t off = 0; off < f.size(); off += chunk) {
    pb::FrameChunk c;
    c.set_round_id(round);
    c.set_region_id(region);
    c.set_slice(slice);
    c.set_frame_bytes(f.size());
    c.set_offset(off);
    c.set_data(f.data() + off, std::min(chunk, f.size() - off));
    out.push_back(c);
  }
  return out;
}

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

// ---- compiled schedules (docs/relay-wan.md §10) ----

collective::Op SchedSend(uint32_t peer, uint32_t chunk, uint32_t piece) {
  return {.kind = collective::OpKind::kSend,
          .peer = peer,
          .chunk = chunk,
          .piece = piece,
          .src = {.slot = chunk}};
}
collective::Op SchedRecv(uint32_t peer, uint32_t chunk, uint32_t piece) {
  return {.kind = collective::OpKind::kRecv,
          .peer = peer,
          .chunk = chunk,
          .piece = piece,
          .dst = {.slot = chunk}};
}

// An all-gather over ranks 0, 1, 2 where rank 1 is the hub: ranks 0 and 2 never talk; rank 1
// forwards each one's frames to the other. In two pieces, each routed the same way.
std::shared_ptr<const collective::Schedule> HubSchedule() {
  auto s = std::make_shared<collective::Schedule>();
  s->collective = {.kind = collective::Kind::kAllGather, .ranks = 3, .chunks_per_rank = 1};
  s->pieces = 2;
  s->intent = "hub";
  s->ranks = {"1", "2", "3"};
  s->per_rank.resize(3);
  for (uint32_t p = 0; p < 2; ++p) {
    for (uint32_t edge : {0u, 2u}) {
      const uint32_t other = 2 - edge;
      s->per_rank[edge].ops.push_back(SchedSend(1, edge, p));
      s->per_rank[edge].ops.push_back(SchedRecv(1, 1, p));
      s->per_rank[edge].ops.push_back(SchedRecv(1, other, p));
      s->per_rank[1].ops.push_back(SchedRecv(edge, edge, p));
      s->per_rank[1].ops.push_back(SchedSend(edge, 1, p));
    }
    const uint32_t recv0 = static_cast<uint32_t>(s->per_rank[1].ops.size() - 4);
    s->per_rank[1].ops.push_back(SchedSend(2, 0, p));
    s->per_rank[1].ops.back().deps = {recv0};
    s->per_rank[1].ops.push_back(SchedSend(0, 2, p));
    s->per_rank[1].ops.back().deps = {recv0 + 2};
  }
  return s;
}

const WanPeerStats& Peer(const WanStats& s, uint32_t region) {
  for (const WanPeerStats& p : s.peers) {
    if (p.region_id == region) return p;
  }
  ADD_FAILURE() << "no peer " << region;
  return s.peers.front();
}

TEST(GrpcExchangeScheduleTest, RelayedScheduleReachesTheFarRegionOnlyThroughTheHub) {
  Mesh m(TestSpec());
  m.StartAll([](WanOptions& o) {
    o.schedule.compiled = HubSchedule();
    // Every frame comes through the hub: the follower never has to fetch (it would only after
    // frames stopped coming for this long).
    o.fetch_grace = absl::Seconds(600);
  });
  const uint64_t nslices = Slices(m.spec()).size();
  Reference ref(m.spec());
  for (uint64_t r = 1; r <= 2; ++r) {
    std::map<uint32_t, std::vector<FramePtr>> frames;
    for (uint32_t region : {1u, 2u, 3u}) frames[region] = ref.Feed(region, r, true);
    std::vector<std::thread> t;
    for (uint32_t region : {3u, 1u, 2u}) {
      t.emplace_back([&, region] { SubmitRegion(m.ex(region), m.spec(), region, r); });
    }
    for (std::thread& x : t) x.join();
    GlobalAggregate want = ref.Aggregate(r, frames);
    ExpectSameEverywhere(m, r, {1, 2, 3}, &want);
  }
  // A frame counts as sent when its acknowledgement comes back, which may be after every
  // gateway published: wait for the hub's last acknowledgements before reading the counters.
  WaitUntil([&] {
    const WanStats s2 = m.ex(2).Stats();
    return Peer(s2, 3).frames_sent >= 2 * 2 * nslices &&
           Peer(s2, 1).frames_sent >= 2 * 2 * nslices &&
           Peer(s2, 3).frames_forwarded >= 2 * nslices &&
           Peer(s2, 1).frames_forwarded >= 2 * nslices;
  });
  const WanStats s1 = m.ex(1).Stats(), s2 = m.ex(2).Stats(), s3 = m.ex(3).Stats();
  for (const WanStats* s : {&s1, &s2, &s3}) {
    EXPECT_EQ(s->schedule_name, "hub");
    EXPECT_EQ(s->schedule_digest, s1.schedule_digest);
    EXPECT_EQ(s->schedule_pieces, 2u);
    EXPECT_EQ(s->frames_fetched, 0u);
    EXPECT_EQ(s->malformed_messages, 0u);
    EXPECT_EQ(s->digest_mismatches, 0u);
  }
  // Regions 1 and 3 never exchange a frame; the hub forwards each one's to the other.
  EXPECT_EQ(Peer(s1, 3).frames_sent, 0u);
  EXPECT_EQ(Peer(s3, 1).frames_sent, 0u);
  EXPECT_EQ(Peer(s1, 3).frames_received, 0u);
  EXPECT_EQ(Peer(s3, 1).frames_received, 0u);
  EXPECT_EQ(Peer(s2, 3).frames_sent, 2 * 2 * nslices);  // its own and region 1's, two rounds
  EXPECT_EQ(Peer(s2, 3).frames_forwarded, 2 * nslices);
  EXPECT_EQ(Peer(s2, 1).frames_forwarded, 2 * nslices);
  EXPECT_EQ(Peer(s3, 2).frames_received, 2 * 2 * nslices);
  EXPECT_EQ(Peer(s1, 2).frames_forwarded, 0u);
  // Send throughput is measured on the links that carried pushes, and only there.
  EXPECT_GT(Peer(s2, 3).send_bytes_per_second, 0);
  EXPECT_GT(Peer(s1, 2).send_bytes_per_second, 0);
  EXPECT_EQ(Peer(s1, 3).send_bytes_per_second, 0);
  EXPECT_EQ(Peer(s3, 1).send_bytes_per_second, 0);
}

// Killed in the middle of a round, the hub costs time, never correctness: the coordinator leaves
// out what it could not get and the far region fetches the rest from it.
TEST(GrpcExchangeScheduleTest, ForwarderKilledMidRoundStillPublishesTheSameBitsEverywhere) {
  Mesh m(TestSpec());
  m.StartAll([](WanOptions& o) {
    o.schedule.compiled = HubSchedule();
    o.fetch_grace = absl::Milliseconds(50);
    // Long enough for the hub to die and region 3 to submit before the round is decided.
    if (o.region_id == 1) o.wan_timeout = absl::Seconds(3);
  });
  const size_t nslices = Slices(m.spec()).size();
  Reference ref(m.spec());
  // Round 1: the hub holds region 1's frames (some maybe forwarded, some not) when it dies.
  SubmitRegion(m.ex(1), m.spec(), 1, 1);
  WaitUntil([&] { return Peer(m.ex(2).Stats(), 1).frames_received >= nslices; });
  m.Kill(2);
  SubmitRegion(m.ex(3), m.spec(), 3, 1);
  // Region 3's frames never reach the coordinator (only through the hub): after wan_timeout
  // the round includes region 1 alone, and region 3 fetches what the hub did not forward.
  std::map<uint32_t, std::vector<FramePtr>> frames;
  frames[1] = ref.Feed(1, 1, true);
  ref.Feed(3, 1, false);
  GlobalAggregate want = ref.Aggregate(1, frames);
  ExpectSameEverywhere(m, 1, {1, 3}, &want);
  EXPECT_FALSE(m.outcomes(3).Wait(1).includes_this_region);
  EXPECT_TRUE(m.outcomes(3).Wait(1).retained_by_gateway);
  const WanStats s3 = m.ex(3).Stats();
  EXPECT_EQ(s3.frames_fetched + Peer(s3, 2).frames_received, nslices);
  EXPECT_EQ(s3.digest_mismatches, 0u);
}

// wan.schedule measured: the gateways report that the link between regions 1 and 3 is slow; the
// coordinator recompiles after round 2 and every gateway runs the relayed schedule from round 4.
TEST(GrpcExchangeScheduleTest, MeasuredSpeedsSwitchEveryGatewayAtTheSameRound) {
  Mesh m(TestSpec());
  m.StartAll([](WanOptions& o) {
    o.schedule.name = "auto";
    o.schedule.measured = true;
    o.schedule.recompile_every = 2;
    o.schedule.topology_yaml =
        "ranks: ['1', '2', '3']\ndefault: {bandwidth: 1Gbit, latency: 5ms}\n";
    // 10 kB/s between 1 and 3, 1 GB/s elsewhere, whatever loopback measures.
    for (uint32_t peer : {1u, 2u, 3u}) {
      if (peer == o.region_id) continue;
      o.schedule.rate_override[peer] = o.region_id + peer == 4 ? 1e4 : 1e9;
    }
  });
  const WanStats before = m.ex(1).Stats();
  EXPECT_EQ(before.schedule_switches, 0u);
  Reference ref(m.spec());
  std::map<uint64_t, uint64_t> forwarded_at;  // hub's forwarded frames after each round
  for (uint64_t r = 1; r <= 5; ++r) {
    std::map<uint32_t, std::vector<FramePtr>> frames;
    for (uint32_t region : {1u, 2u, 3u}) frames[region] = ref.Feed(region, r, true);
    std::vector<std::thread> t;
    for (uint32_t region : {3u, 1u, 2u}) {
      t.emplace_back([&, region] { SubmitRegion(m.ex(region), m.spec(), region, r); });
    }
    for (std::thread& x : t) x.join();
    GlobalAggregate want = ref.Aggregate(r, frames);
    ExpectSameEverywhere(m, r, {1, 2, 3}, &want);
  }
  // After round 5 is published everywhere, every gateway runs the same new schedule.
  const WanStats s1 = m.ex(1).Stats(), s2 = m.ex(2).Stats(), s3 = m.ex(3).Stats();
  for (const WanStats* s : {&s1, &s2, &s3}) {
    EXPECT_EQ(s->schedule_switches, 1u);
    EXPECT_EQ(s->schedule_digest, s1.schedule_digest);
    EXPECT_NE(s->schedule_digest, before.schedule_digest);
    EXPECT_EQ(s->digest_mismatches, 0u);
  }
  EXPECT_GT(s1.schedule_predicted_s, 0);
  // The new schedule routes around the slow pair through region 2.
  EXPECT_GT(Peer(s2, 1).frames_forwarded + Peer(s2, 3).frames_forwarded, 0u);
  // The handshake still compares the configured schedule: a restarted gateway links up again.
  m.Kill(3);
  m.Start(3, [&] {
    WanOptions o = m.Options(3);
    o.schedule.name = "auto";
    o.schedule.measured = true;
    o.schedule.recompile_every = 2;
    o.schedule.topology_yaml =
        "ranks: ['1', '2', '3']\ndefault: {bandwidth: 1Gbit, latency: 5ms}\n";
    return o;
  }());
  m.ConnectAll();
  // It replays the rounds the coordinator keeps (2..5): round 2's decision carries the switch.
  for (uint64_t r = 2; r <= 5; ++r) ExpectSameEverywhere(m, r, {1, 2, 3});
  EXPECT_EQ(m.ex(3).Stats().schedule_digest, s1.schedule_digest);
}

TEST(GrpcExchangeScheduleTest, GatewaysRunningDifferentSchedulesDoNotLinkUp) {
  Mesh m(TestSpec(), {1, 2});
  m.StartAll([](WanOptions& o) {
    if (o.region_id == 2) o.schedule.name = "ring";  // with 2 regions the same routing, but
    o.schedule.pieces = o.region_id == 2 ? 2 : 1;    // another schedule all the same
  });
  // The follower (region 2) says hello to the coordinator at once, and is refused.
  WaitUntil([&] { return m.ex(1).Stats().handshake_failures > 0; });
  EXPECT_FALSE(m.ex(2).Stats().peers[0].connected);
  EXPECT_NE(m.ex(1).Stats().schedule_digest, m.ex(2).Stats().schedule_digest);

  RawPeer raw(m.ex(1).port());
  pb::HelloRequest hello;
  hello.set_protocol_version(kPeerProtocolVersion);
  hello.set_region_id(2);
  hello.set_spec_digest(SpecDigest(m.spec()));
  hello.add_regions(1);
  hello.add_regions(2);
  hello.set_schedule_name("ring");
  hello.set_schedule_digest(m.ex(2).Stats().schedule_digest);
  grpc::Status st = raw.Hello({.spec = Hex(SpecDigest(m.spec()))}, hello);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("it runs exchange schedule 'ring'"));
  EXPECT_THAT(st.error_message(), HasSubstr("runs 'direct'"));
  EXPECT_THAT(st.error_message(), HasSubstr("same schedule"));
  hello.set_schedule_digest(m.ex(1).Stats().schedule_digest);
  EXPECT_TRUE(raw.Hello({.spec = Hex(SpecDigest(m.spec()))}, hello).ok());
}

TEST(GrpcExchangeScheduleTest, ScheduleTheRelayCannotRunFailsAtStart) {
  WanOptions o;
  o.region_id = 1;
  o.listen_address = "127.0.0.1:0";
  o.peers = {{.region_id = 2}, {.region_id = 3}};
  auto s = std::make_shared<collective::Schedule>(*HubSchedule());
  s->per_rank[1].ops.pop_back();  // the hub no longer forwards region 3's last piece to region 1
  o.schedule.compiled = s;
  absl::StatusOr<std::unique_ptr<GrpcExchange>> ex = StartGrpcExchange(TestSpec(), o);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(ex.status().message(), HasSubstr("wan.schedule"));
  EXPECT_THAT(ex.status().message(), HasSubstr("'hub' does not verify"));
  o.schedule = {.name = "no-such-schedule"};
  EXPECT_FALSE(StartGrpcExchange(TestSpec(), o).ok());
}

// ---- the frame stream, preparation ahead of the decision, the handshake's reply ----

// StreamFrames: the callee acknowledges every frame in order as it stores it (identical copies
// as duplicates), and a refused frame ends the stream after the acknowledgements of those before
// it — what the sender's in-flight list relies on.
TEST(GrpcExchangeTest, FrameStreamAcknowledgesEachFrameInOrderAndStopsAtARefusedOne) {
  Mesh m(TestSpec());
  m.StartAll();
  const std::vector<std::vector<uint8_t>> frames = Region2Round1Frames(m.spec());
  auto stub =
      pb::Peer::NewStub(grpc::CreateChannel(m.Address(1), grpc::InsecureChannelCredentials()));
  auto run = [&](const std::vector<std::vector<pb::FrameChunk>>& pushes,
                 std::vector<pb::FrameAck>* acks) {
    grpc::ClientContext c;
    c.AddMetadata("authorization", "Bearer s3cret-token");
    c.AddMetadata("x-heddle-region", "2");
    c.AddMetadata("x-heddle-spec", Hex(SpecDigest(m.spec())));
    c.AddMetadata("x-heddle-proto", absl::StrCat(kPeerProtocolVersion));
    auto stream = stub->StreamFrames(&c);
    std::thread reader([&] {
      pb::FrameAck a;
      while (stream->Read(&a)) acks->push_back(a);
    });
    for (const auto& chunks : pushes) {
      for (const pb::FrameChunk& ch : chunks) {
        if (!stream->Write(ch)) break;
      }
    }
    stream->WritesDone();
    reader.join();
    return stream->Finish();
  };
  // Slices 0, 1, 2 written back to back, then slice 0 again: four acknowledgements, in order.
  std::vector<pb::FrameAck> acks;
  grpc::Status st = run({Chunks(1, 2, 0, frames[0]), Chunks(1, 2, 1, frames[1]),
                         Chunks(1, 2, 2, frames[2]), Chunks(1, 2, 0, frames[0])},
                        &acks);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(acks.size(), 4u);
  const uint32_t want_slices[] = {0, 1, 2, 0};
  for (size_t i = 0; i < acks.size(); ++i) {
    EXPECT_EQ(acks[i].round_id(), 1u);
    EXPECT_EQ(acks[i].region_id(), 2u);
    EXPECT_EQ(acks[i].slice(), want_slices[i]);
    EXPECT_EQ(acks[i].duplicate(), i == 3);
  }
  EXPECT_EQ(Peer(m.ex(1).Stats(), 2).frames_received, 4u);
  // Slice 3, a damaged slice 4, slice 5: slice 3 is acknowledged, then the stream ends with
  // the refusal and slice 5 is not taken.
  std::vector<uint8_t> bad = frames[4];
  bad[100] ^= 1;
  acks.clear();
  st = run({Chunks(1, 2, 3, frames[3]), Chunks(1, 2, 4, bad), Chunks(1, 2, 5, frames[5])}, &acks);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("bad frame"));
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].slice(), 3u);
  EXPECT_EQ(m.ex(1).Stats().malformed_messages, 1u);
  EXPECT_EQ(Peer(m.ex(1).Stats(), 2).frames_received, 5u);
}

// The callee reads StreamFrames' chunks as bytes (wan_internal::ReceivedChunk): any valid
// encoding of a FrameChunk is taken as the generated parser would take it (here: fields in
// reverse order, with an unknown field), and bytes that are not a FrameChunk end the stream as
// malformed (INVALID_ARGUMENT, counted) after the acknowledgements of the frames before them.
TEST(GrpcExchangeTest, FrameStreamReadsAnyEncodingOfAChunkAndRefusesBytesThatAreNone) {
  Mesh m(TestSpec());
  m.StartAll();
  const std::vector<std::vector<uint8_t>> frames = Region2Round1Frames(m.spec());
  std::shared_ptr<grpc::Channel> ch =
      grpc::CreateChannel(m.Address(1), grpc::InsecureChannelCredentials());
  auto varint = [](uint64_t v) {
    std::string s;
    for (; v >= 0x80; v >>= 7) s.push_back(static_cast<char>(v | 0x80));
    s.push_back(static_cast<char>(v));
    return s;
  };
  // Slice 0 as the generated serializer writes it; slice 1 with its fields reversed and an
  // unknown field 9 first; then a message cut inside its payload.
  std::vector<std::string> messages;
  for (const pb::FrameChunk& c : Chunks(1, 2, 0, frames[0]))
    messages.push_back(c.SerializeAsString());
  for (const pb::FrameChunk& c : Chunks(1, 2, 1, frames[1])) {
    messages.push_back("\x48" + varint(12345) + "\x32" + varint(c.data().size()) + c.data() +
                       "\x28" + varint(c.offset()) + "\x20" + varint(c.frame_bytes()) + "\x18" +
                       varint(c.slice()) + "\x10" + varint(c.region_id()) + "\x08" +
                       varint(c.round_id()));
  }
  messages.push_back(Chunks(1, 2, 2, frames[2])[0].SerializeAsString().substr(0, 40));
  grpc::ClientContext c;
  c.AddMetadata("authorization", "Bearer s3cret-token");
  c.AddMetadata("x-heddle-region", "2");
  c.AddMetadata("x-heddle-spec", Hex(SpecDigest(m.spec())));
  c.AddMetadata("x-heddle-proto", absl::StrCat(kPeerProtocolVersion));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, pb::FrameAck>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, pb::FrameAck>::Create(
          ch.get(),
          grpc::internal::RpcMethod("/heddle.relay.peer.v1.Peer/StreamFrames",
                                    grpc::internal::RpcMethod::BIDI_STREAMING, ch),
          &c));
  std::vector<pb::FrameAck> acks;
  std::thread reader([&] {
    pb::FrameAck a;
    while (stream->Read(&a)) acks.push_back(a);
  });
  for (const std::string& msg : messages) {
    grpc::Slice slice(msg);
    if (!stream->Write(grpc::ByteBuffer(&slice, 1))) break;
  }
  stream->WritesDone();
  reader.join();
  const grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("malformed FrameChunk"));
  ASSERT_EQ(acks.size(), 2u);
  EXPECT_EQ(acks[0].slice(), 0u);
  EXPECT_EQ(acks[1].slice(), 1u);
  EXPECT_FALSE(acks[1].duplicate());
  EXPECT_FALSE(acks[1].refused());
  EXPECT_EQ(m.ex(1).Stats().malformed_messages, 1u);
  EXPECT_EQ(Peer(m.ex(1).Stats(), 2).frames_received, 2u);
}

// A frame refused for a reason of its round (too far ahead; a different copy already held) is
// answered with an acknowledgement marked refused, counted, and the stream goes on: the frames
// after it are stored and acknowledged, and the call ends OK.
TEST(GrpcExchangeTest, FrameStreamAnswersRoundLevelRefusalsAndStaysOpen) {
  Mesh m(TestSpec());
  m.StartAll();
  const std::vector<SliceRef> slices = Slices(m.spec());
  wan_internal::RegionEncoder other(m.spec(), 2, true);
  const std::vector<std::vector<uint8_t>> frames = Region2Round1Frames(m.spec());
  // Slice 0 of round 1 with other values: a different copy of a frame the callee will hold.
  const std::vector<uint8_t> conflicting =
      **other.Submit(1, slices[0], RegionSlice(3, 7, slices[0]));
  ASSERT_NE(conflicting, frames[0]);
  auto stub =
      pb::Peer::NewStub(grpc::CreateChannel(m.Address(1), grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  c.AddMetadata("authorization", "Bearer s3cret-token");
  c.AddMetadata("x-heddle-region", "2");
  c.AddMetadata("x-heddle-spec", Hex(SpecDigest(m.spec())));
  c.AddMetadata("x-heddle-proto", absl::StrCat(kPeerProtocolVersion));
  auto stream = stub->StreamFrames(&c);
  std::vector<pb::FrameAck> acks;
  std::thread reader([&] {
    pb::FrameAck a;
    while (stream->Read(&a)) acks.push_back(a);
  });
  // Round 9 is too far ahead (nothing published yet), then slice 0 of round 1, its conflicting
  // copy, and slice 1.
  for (const auto& chunks : {Chunks(9, 2, 2, frames[2]), Chunks(1, 2, 0, frames[0]),
                             Chunks(1, 2, 0, conflicting), Chunks(1, 2, 1, frames[1])}) {
    for (const pb::FrameChunk& ch : chunks) ASSERT_TRUE(stream->Write(ch));
  }
  stream->WritesDone();
  reader.join();
  const grpc::Status st = stream->Finish();
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(acks.size(), 4u);
  EXPECT_TRUE(acks[0].refused());
  EXPECT_EQ(acks[0].round_id(), 9u);
  EXPECT_EQ(acks[0].slice(), 2u);
  EXPECT_THAT(acks[0].reason(), HasSubstr("too far ahead"));
  EXPECT_FALSE(acks[1].refused());
  EXPECT_EQ(acks[1].slice(), 0u);
  EXPECT_TRUE(acks[2].refused());
  EXPECT_THAT(acks[2].reason(), HasSubstr("different frame"));
  EXPECT_FALSE(acks[3].refused());
  EXPECT_EQ(acks[3].slice(), 1u);
  const WanStats s = m.ex(1).Stats();
  EXPECT_EQ(s.out_of_window_messages, 1u);
  EXPECT_EQ(Peer(s, 2).frames_received, 2u);
}

// A peer that answers Hello as region 2 and refuses every frame stream as malformed at its
// first chunk, except one starting with slice `hold_slice`, which it holds open until the caller
// cancels (so a test knows the sender got past every frame before it).
class RefusingPeer final : public pb::Peer::Service {
 public:
  RefusingPeer(uint64_t spec_digest, uint32_t hold_slice)
      : spec_digest_(spec_digest), hold_slice_(hold_slice) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
  }
  ~RefusingPeer() override { server_->Shutdown(std::chrono::system_clock::now()); }

  std::string Address() const { return absl::StrFormat("127.0.0.1:%d", port_); }
  void SetScheduleDigest(uint64_t d) { schedule_digest_.store(d, std::memory_order_relaxed); }
  int refused() const { return refused_.load(std::memory_order_relaxed); }
  bool holding() const { return holding_.load(std::memory_order_acquire); }

  grpc::Status Hello(grpc::ServerContext*, const pb::HelloRequest*,
                     pb::HelloReply* reply) override {
    reply->set_protocol_version(kPeerProtocolVersion);
    reply->set_region_id(2);
    reply->set_spec_digest(spec_digest_);
    reply->add_regions(1);
    reply->add_regions(2);
    reply->set_schedule_digest(schedule_digest_.load(std::memory_order_relaxed));
    return grpc::Status::OK;
  }
  grpc::Status StreamFrames(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<pb::FrameAck, pb::FrameChunk>* stream) override {
    pb::FrameChunk c;
    if (!stream->Read(&c)) return grpc::Status::OK;
    if (c.slice() == hold_slice_) {
      holding_.store(true, std::memory_order_release);
      while (stream->Read(&c)) {
      }
      return grpc::Status(grpc::StatusCode::CANCELLED, "held");
    }
    refused_.fetch_add(1, std::memory_order_relaxed);
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad frame");
  }

 private:
  const uint64_t spec_digest_;
  const uint32_t hold_slice_;
  std::atomic<uint64_t> schedule_digest_{0};
  std::atomic<int> refused_{0};
  std::atomic<bool> holding_{false};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// A frame refused as malformed is resent twice, each time after the link is marked failed (the
// backoff paces the retries); the third refusal drops it without taking the link down again:
// two reconnects per dropped frame, not three.
TEST(GrpcExchangeTest, FrameDroppedAfterItsLastRefusalDoesNotResetTheLink) {
  const ModelSpec spec = TestSpec();
  const uint32_t nslices = static_cast<uint32_t>(Slices(spec).size());
  RefusingPeer peer(SpecDigest(spec), nslices - 1);  // holds the last slice's stream
  Mesh m(spec, {1, 2});
  WanOptions o = m.Options(1);
  o.streams_per_peer = 1;  // every frame on one stripe, in slice order
  o.backoff_min = absl::Milliseconds(1);
  o.backoff_max = absl::Milliseconds(2);
  m.Start(1, o);
  peer.SetScheduleDigest(m.ex(1).Stats().schedule_digest);
  ASSERT_TRUE(m.ex(1).SetPeerAddress(2, peer.Address()).ok());
  for (const SliceRef& s : Slices(spec)) {
    ASSERT_TRUE(m.ex(1).SubmitSlice(1, s, RegionSlice(1, 1, s)).ok());
  }
  // The stripe reaches the last slice only after every frame before it was dropped.
  WaitUntil([&] { return peer.holding(); });
  EXPECT_EQ(peer.refused(), 3 * static_cast<int>(nslices - 1));
  EXPECT_EQ(Peer(m.ex(1).Stats(), 2).reconnects, 2u * (nslices - 1));
}

// A gateway's own stream: every frame of several rounds is acknowledged (nothing left in flight
// or queued), counted once per frame, with no refusal — many frames in flight per stripe.
TEST(GrpcExchangeTest, FrameStreamsDeliverEveryFrameOnceWithManyInFlight) {
  Mesh m(TestSpec());
  m.StartAll([](WanOptions& o) { o.streams_per_peer = 1; });  // every slice on one stream
  const uint64_t nslices = Slices(m.spec()).size();
  for (uint64_t r = 1; r <= 3; ++r) {
    std::vector<std::thread> t;
    for (uint32_t region : {1u, 2u, 3u}) {
      t.emplace_back([&, region] { SubmitRegion(m.ex(region), m.spec(), region, r); });
    }
    for (std::thread& x : t) x.join();
    ExpectSameEverywhere(m, r, {1, 2, 3});
  }
  for (uint32_t gw : {1u, 2u, 3u}) {
    WaitUntil([&] {
      for (const WanPeerStats& p : m.ex(gw).Stats().peers) {
        if (p.frames_sent < 3 * nslices || p.queued_items > 0) return false;
      }
      return true;
    });
    const WanStats s = m.ex(gw).Stats();
    EXPECT_EQ(s.malformed_messages, 0u);
    EXPECT_EQ(s.frames_fetched, 0u);
    for (const WanPeerStats& p : s.peers) {
      EXPECT_EQ(p.frames_sent, 3 * nslices) << "gateway " << gw << " to " << p.region_id;
      EXPECT_EQ(p.frames_received, 3 * nslices) << "gateway " << gw << " from " << p.region_id;
      EXPECT_EQ(p.reconnects, 0u);
    }
  }
}

// A follower that holds every region's frames and summary before the decision comes publishes
// the aggregate it prepared (the decision's bits), and never one the decision does not describe.
TEST(GrpcExchangeTest, FollowerPublishesTheAggregatePreparedBeforeTheDecision) {
  Mesh m(TestSpec());
  m.StartAll();
  const uint64_t nslices = Slices(m.spec()).size();
  Reference ref(m.spec());
  for (uint64_t r = 1; r <= 3; ++r) {
    std::map<uint32_t, std::vector<FramePtr>> frames;
    for (uint32_t region : {1u, 2u, 3u}) frames[region] = ref.Feed(region, r, true);
    // Regions 1 and 2 first; gateway 3 holds their summaries and frames before its own region
    // finishes (the coordinator cannot decide before that).
    for (uint32_t region : {1u, 2u}) SubmitRegion(m.ex(region), m.spec(), region, r);
    WaitUntil([&] {
      const WanStats s = m.ex(3).Stats();
      for (uint32_t peer : {1u, 2u}) {
        const WanPeerStats& p = Peer(s, peer);
        if (p.last_summary_round != r || p.frames_received < r * nslices) return false;
      }
      return true;
    });
    SubmitRegion(m.ex(3), m.spec(), 3, r);
    GlobalAggregate want = ref.Aggregate(r, frames);
    ExpectSameEverywhere(m, r, {1, 2, 3}, &want);
  }
  // Usually every round is published from the prepared aggregate; a decision that reaches
  // gateway 3 before it marked its own region ready (a loaded machine) takes the patch-and-check
  // path instead, which publishes the same bits (checked above), so only "some" is certain.
  EXPECT_GE(m.ex(3).Stats().rounds_prepared, 1u);
  EXPECT_LE(m.ex(3).Stats().rounds_prepared, 3u);
  EXPECT_EQ(m.ex(3).Stats().digest_mismatches, 0u);
  EXPECT_EQ(m.ex(1).Stats().rounds_prepared, 0u);  // the coordinator decides, it prepares none
}

// Gateway 3 holds region 2's frames and summary (from a raw peer), the coordinator never does:
// gateway 3's prepared aggregate includes region 2, the decision does not — gateway 3 publishes
// the decision's aggregate, the same bits as the coordinator.
TEST(GrpcExchangeTest, FollowerDropsAPreparedAggregateTheDecisionDoesNotDescribe) {
  Mesh m(TestSpec());
  m.Start(1, [&] {
    WanOptions o = m.Options(1);
    o.wan_timeout = absl::Seconds(1);
    return o;
  }());
  m.Start(3, m.Options(3));
  ASSERT_TRUE(m.ex(1).SetPeerAddress(3, m.Address(3)).ok());
  ASSERT_TRUE(m.ex(3).SetPeerAddress(1, m.Address(1)).ok());
  const std::vector<SliceRef> slices = Slices(m.spec());
  wan_internal::RegionEncoder enc(m.spec(), 2, true);
  std::vector<FramePtr> frames2;
  RawPeer raw(m.ex(3).port());
  const RawPeer::Md md{.spec = Hex(SpecDigest(m.spec()))};
  for (const SliceRef& s : slices) {
    frames2.push_back(*enc.Submit(1, s, RegionSlice(2, 1, s)));
    ASSERT_TRUE(raw.Push(md, Chunks(1, 2, s.index, *frames2.back())).ok());
  }
  pb::RegionFinish f;
  f.set_round_id(1);
  f.set_region_id(2);
  f.set_tokens(Tokens(2, 1));
  f.set_tau_eff(Tau(2, 1));
  f.set_workers(3);
  f.set_slices(static_cast<uint32_t>(slices.size()));
  f.set_frames_digest(wan_internal::FramesDigest(frames2));
  ASSERT_TRUE(raw.Finish(md, f).ok());
  Reference ref(m.spec());
  std::map<uint32_t, std::vector<FramePtr>> frames;
  for (uint32_t region : {1u, 3u}) frames[region] = ref.Feed(region, 1, true);
  std::vector<std::thread> t;
  for (uint32_t region : {1u, 3u}) {
    t.emplace_back([&, region] { SubmitRegion(m.ex(region), m.spec(), region, 1); });
  }
  for (std::thread& x : t) x.join();
  GlobalAggregate want = ref.Aggregate(1, frames);
  ExpectSameEverywhere(m, 1, {1, 3}, &want);
  EXPECT_EQ(m.ex(3).Stats().rounds_prepared, 0u);
}

// Region 2 (a raw peer) sends its summary before its frames, as the WAN usually delivers them
// (the summary overtakes the last slice's frame): the gateways patch the totals into each frame
// as it comes, and publish the reference's bits with region 2 in.
TEST(GrpcExchangeTest, SummaryBeforeTheFramesPublishesTheSameBits) {
  Mesh m(TestSpec());
  m.Start(1, m.Options(1));
  m.Start(3, m.Options(3));
  ASSERT_TRUE(m.ex(1).SetPeerAddress(3, m.Address(3)).ok());
  ASSERT_TRUE(m.ex(3).SetPeerAddress(1, m.Address(1)).ok());
  const std::vector<SliceRef> slices = Slices(m.spec());
  wan_internal::RegionEncoder enc(m.spec(), 2, true);
  std::vector<FramePtr> frames2;
  for (const SliceRef& s : slices) frames2.push_back(*enc.Submit(1, s, RegionSlice(2, 1, s)));
  pb::RegionFinish f;
  f.set_round_id(1);
  f.set_region_id(2);
  f.set_tokens(Tokens(2, 1));
  f.set_tau_eff(Tau(2, 1));
  f.set_workers(3);
  f.set_slices(static_cast<uint32_t>(slices.size()));
  f.set_frames_digest(wan_internal::FramesDigest(frames2));
  RawPeer to1(m.ex(1).port()), to3(m.ex(3).port());
  const RawPeer::Md md{.spec = Hex(SpecDigest(m.spec()))};
  ASSERT_TRUE(to1.Finish(md, f).ok());
  ASSERT_TRUE(to3.Finish(md, f).ok());
  // Gateways 1 and 3 finish their regions while region 2's frames are still on their way.
  Reference ref(m.spec());
  std::map<uint32_t, std::vector<FramePtr>> frames;
  for (uint32_t region : {1u, 2u, 3u}) frames[region] = ref.Feed(region, 1, true);
  std::vector<std::thread> t;
  for (uint32_t region : {1u, 3u}) {
    t.emplace_back([&, region] { SubmitRegion(m.ex(region), m.spec(), region, 1); });
  }
  for (const SliceRef& s : slices) {
    ASSERT_TRUE(to1.Push(md, Chunks(1, 2, s.index, *frames2[s.index])).ok());
    ASSERT_TRUE(to3.Push(md, Chunks(1, 2, s.index, *frames2[s.index])).ok());
  }
  for (std::thread& x : t) x.join();
  GlobalAggregate want = ref.Aggregate(1, frames);
  ExpectSameEverywhere(m, 1, {1, 3}, &want);
  EXPECT_EQ(PartIds(*m.outcomes(1).Wait(1).aggregate), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(m.ex(1).Stats().digest_mismatches, 0u);
  EXPECT_EQ(m.ex(3).Stats().digest_mismatches, 0u);
}

// Region 2's summary comes first and its last frame is not the one it announced (a valid frame,
// another body): the frames patched before that one are dropped with it, region 2 is left out on
// the coordinator (counted), and both gateways publish the same aggregate without it.
TEST(GrpcExchangeTest, FrameThatDiffersFromTheSummaryAfterEarlyPatchesLeavesTheRegionOut) {
  Mesh m(TestSpec());
  m.Start(1, m.Options(1));
  m.Start(3, m.Options(3));
  ASSERT_TRUE(m.ex(1).SetPeerAddress(3, m.Address(3)).ok());
  ASSERT_TRUE(m.ex(3).SetPeerAddress(1, m.Address(1)).ok());
  const std::vector<SliceRef> slices = Slices(m.spec());
  wan_internal::RegionEncoder enc(m.spec(), 2, true), other(m.spec(), 2, true);
  std::vector<FramePtr> frames2, sent;
  for (const SliceRef& s : slices) {
    frames2.push_back(*enc.Submit(1, s, RegionSlice(2, 1, s)));
    const FramePtr changed = *other.Submit(1, s, RegionSlice(2, 99, s));
    sent.push_back(s.index + 1 < slices.size() ? frames2.back() : changed);
  }
  ASSERT_NE(*sent.back(), *frames2.back());
  pb::RegionFinish f;
  f.set_round_id(1);
  f.set_region_id(2);
  f.set_tokens(Tokens(2, 1));
  f.set_tau_eff(Tau(2, 1));
  f.set_workers(3);
  f.set_slices(static_cast<uint32_t>(slices.size()));
  f.set_frames_digest(wan_internal::FramesDigest(frames2));
  RawPeer to1(m.ex(1).port()), to3(m.ex(3).port());
  const RawPeer::Md md{.spec = Hex(SpecDigest(m.spec()))};
  ASSERT_TRUE(to1.Finish(md, f).ok());
  ASSERT_TRUE(to3.Finish(md, f).ok());
  for (const SliceRef& s : slices) {
    ASSERT_TRUE(to1.Push(md, Chunks(1, 2, s.index, *sent[s.index])).ok());
    ASSERT_TRUE(to3.Push(md, Chunks(1, 2, s.index, *sent[s.index])).ok());
  }
  Reference ref(m.spec());
  std::map<uint32_t, std::vector<FramePtr>> frames;
  for (uint32_t region : {1u, 3u}) frames[region] = ref.Feed(region, 1, true);
  std::vector<std::thread> t;
  for (uint32_t region : {1u, 3u}) {
    t.emplace_back([&, region] { SubmitRegion(m.ex(region), m.spec(), region, 1); });
  }
  for (std::thread& x : t) x.join();
  GlobalAggregate want = ref.Aggregate(1, frames);
  ExpectSameEverywhere(m, 1, {1, 3}, &want);
  EXPECT_EQ(m.ex(1).Stats().digest_mismatches, 1u);
}

// The handshake's reply is checked too: a peer answering with another exchange schedule's digest
// is not linked to (counted), one answering with this gateway's is.
// Holds the coordinator's own publication of one round once its decision is out
// (WanOptions::after_announce_for_testing) until released. Shared with the hook, which may run
// until the coordinator stops.
class AnnounceGate {
 public:
  explicit AnnounceGate(uint64_t round) : round_(round) {}
  std::function<void(uint64_t)> Hook(std::shared_ptr<AnnounceGate> self) {
    return [self](uint64_t r) {
      std::unique_lock<std::mutex> l(self->mu_);
      if (r != self->round_) return;
      self->announced_ = true;
      self->cv_.notify_all();
      self->cv_.wait(l, [&] { return self->released_; });
    };
  }
  void WaitAnnounced() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return announced_; });
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  const uint64_t round_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool announced_ = false;
  bool released_ = false;
};

// Releases the gate before the gateways stop (declared after the Mesh), also on a failed
// assertion.
struct ReleaseOnExit {
  std::shared_ptr<AnnounceGate> gate;
  ~ReleaseOnExit() { gate->Release(); }
};

// The coordinator's own publication of round 1 is held back after its decision went out: the
// followers publish round 1 from the announcement and poll round 2, and the coordinator answers
// those polls as one at round 1, not behind them (which they would take as a coordinator that
// lost decisions, for good).
TEST(GrpcExchangeTest, FollowersPollingAheadOfTheCoordinatorsOwnPublicationKeepItsDecisions) {
  auto gate = std::make_shared<AnnounceGate>(1);
  Mesh m(TestSpec());
  m.StartAll([&](WanOptions& o) {
    o.decision_poll = absl::Milliseconds(50);
    // A follower waits for the frames still coming rather than fetch them from the coordinator
    // (which answers only once it has published, held back here).
    o.fetch_grace = absl::Seconds(600);
    if (o.region_id == 1) o.after_announce_for_testing = gate->Hook(gate);
  });
  ReleaseOnExit release{gate};
  for (uint32_t region : {1u, 2u, 3u}) SubmitRegion(m.ex(region), m.spec(), region, 1);
  gate->WaitAnnounced();
  for (uint32_t gw : {2u, 3u}) {
    RoundOutcome o = m.outcomes(gw).Wait(1);
    ASSERT_EQ(o.kind, RoundOutcome::Kind::kPublished) << o.reason;
  }
  EXPECT_FALSE(m.outcomes(1).Has(1));  // still held back
  RawPeer peer(m.ex(1).port());
  pb::DecisionReply reply;
  ASSERT_TRUE(peer.Poll({.spec = Hex(SpecDigest(m.spec()))}, 2, &reply).ok());
  EXPECT_EQ(reply.state(), pb::DecisionReply::PENDING);
  EXPECT_EQ(reply.published_through(), 1u);
  // The followers' own polls of round 2 (50 ms each) are answered meanwhile.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (uint32_t gw : {2u, 3u}) ASSERT_EQ(m.ex(gw).Stats().coordinator_restarts, 0u) << gw;
  gate->Release();
  ExpectSameEverywhere(m, 1, {1, 2, 3});  // every gateway at round 1 before round 2 starts
  for (uint32_t region : {1u, 2u, 3u}) SubmitRegion(m.ex(region), m.spec(), region, 2);
  ExpectSameEverywhere(m, 2, {1, 2, 3});
  for (uint32_t gw : {2u, 3u}) EXPECT_EQ(m.ex(gw).Stats().coordinator_restarts, 0u) << gw;
}

// Gateways 2 and 3 are not linked: each lacks the other's frames and fetches them from the
// coordinator, whose own publication of round 1 is held back after its decision went out. The
// followers take the decision from the announcement, ask for the frames in the announced
// window (answered once the coordinator has published) and publish the same bits.
TEST(GrpcExchangeTest, FollowerLackingARegionsFramesFetchesThemInTheAnnouncedWindow) {
  auto gate = std::make_shared<AnnounceGate>(1);
  Mesh m(TestSpec());
  for (uint32_t region : {1u, 2u, 3u}) {
    WanOptions o = m.Options(region);
    o.fetch_grace = absl::Milliseconds(10);
    if (region == 1) o.after_announce_for_testing = gate->Hook(gate);
    m.Start(region, o);
  }
  for (uint32_t region : {2u, 3u}) {
    ASSERT_TRUE(m.ex(1).SetPeerAddress(region, m.Address(region)).ok());
    ASSERT_TRUE(m.ex(region).SetPeerAddress(1, m.Address(1)).ok());
  }
  ReleaseOnExit release{gate};
  const size_t nslices = Slices(m.spec()).size();
  Reference ref(m.spec());
  std::map<uint32_t, std::vector<FramePtr>> frames;
  for (uint32_t region : {1u, 2u, 3u}) frames[region] = ref.Feed(region, 1, true);
  for (uint32_t region : {1u, 2u, 3u}) SubmitRegion(m.ex(region), m.spec(), region, 1);
  gate->WaitAnnounced();
  // The followers' fetches reach the coordinator meanwhile; without the other follower's
  // frames neither can publish before the coordinator does.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(m.outcomes(2).Has(1));
  EXPECT_FALSE(m.outcomes(3).Has(1));
  gate->Release();
  GlobalAggregate want = ref.Aggregate(1, frames);
  ExpectSameEverywhere(m, 1, {1, 2, 3}, &want);
  for (uint32_t gw : {2u, 3u}) {
    const WanStats s = m.ex(gw).Stats();
    EXPECT_GE(s.frames_fetched, nslices) << gw;
    EXPECT_EQ(s.rounds_lost, 0u) << gw;
    EXPECT_EQ(s.digest_mismatches, 0u) << gw;
  }
}

TEST(GrpcExchangeScheduleTest, HelloReplyWithAnotherScheduleDigestIsRefused) {
  class FakeCoordinator final : public pb::Peer::Service {
   public:
    explicit FakeCoordinator(uint64_t spec) : spec_(spec) {}
    std::atomic<uint64_t> schedule_digest{0};
    std::atomic<int> hellos{0};
    grpc::Status Hello(grpc::ServerContext*, const pb::HelloRequest*,
                       pb::HelloReply* reply) override {
      hellos.fetch_add(1);
      reply->set_protocol_version(kPeerProtocolVersion);
      reply->set_region_id(1);
      reply->set_spec_digest(spec_);
      reply->add_regions(1);
      reply->add_regions(2);
      reply->set_schedule_digest(schedule_digest.load());
      return grpc::Status::OK;
    }
    grpc::Status WaitDecision(grpc::ServerContext*, const pb::DecisionRequest*,
                              pb::DecisionReply* reply) override {
      reply->set_state(pb::DecisionReply::PENDING);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return grpc::Status::OK;
    }

   private:
    uint64_t spec_;
  };
  FakeCoordinator fake(SpecDigest(TestSpec()));
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&fake);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  Mesh m(TestSpec(), {1, 2});
  m.Start(2, m.Options(2));
  const uint64_t ours = m.ex(2).Stats().schedule_digest;
  fake.schedule_digest = ours ^ 1;
  ASSERT_TRUE(m.ex(2).SetPeerAddress(1, absl::StrFormat("127.0.0.1:%d", port)).ok());
  WaitUntil([&] { return m.ex(2).Stats().handshake_failures >= 2; });
  EXPECT_FALSE(m.ex(2).Stats().peers[0].connected);
  // The same peer answering with this gateway's digest: linked.
  fake.schedule_digest = ours;
  WaitUntil([&] { return m.ex(2).Stats().peers[0].connected; });
  m.Kill(2);
  server->Shutdown();
}

TEST(GrpcExchangeTest, UnauthenticatedAndMismatchedPeersAreRefusedAndCounted) {
  Mesh m(TestSpec());
  m.StartAll();
  RawPeer raw(m.ex(1).port());
  const std::string spec = Hex(SpecDigest(m.spec()));
  pb::HelloRequest hello;
  hello.set_protocol_version(kPeerProtocolVersion);
  hello.set_region_id(2);
  hello.set_spec_digest(SpecDigest(m.spec()));
  for (uint32_t r : {1, 2, 3}) hello.add_regions(r);
  hello.set_schedule_digest(m.ex(1).Stats().schedule_digest);
  EXPECT_TRUE(raw.Hello({.spec = spec}, hello).ok());

  grpc::Status st = raw.Hello({.token = "", .spec = spec}, hello);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(st.error_message(), HasSubstr("no bearer token"));
  st = raw.Hello({.token = "s3cret-tokem", .spec = spec}, hello);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(st.error_message(), HasSubstr("wrong bearer token"));
  st = raw.Hello({.region = "9", .spec = spec}, hello);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  st = raw.Hello({.region = "1", .spec = spec}, hello);  // its own id
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(m.ex(1).Stats().auth_failures, 4u);

  st = raw.Hello({.spec = Hex(SpecDigest(m.spec()) ^ 1)}, hello);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("same model spec"));
  pb::HelloRequest other_spec = hello;
  other_spec.set_spec_digest(7);
  EXPECT_EQ(raw.Hello({.spec = spec}, other_spec).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  pb::HelloRequest other_regions = hello;
  other_regions.add_regions(4);
  st = raw.Hello({.spec = spec}, other_regions);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("same regions"));
  pb::HelloRequest other_coordinator = hello;
  other_coordinator.set_coordinator(3);  // this mesh's is region 1 (the lowest, the default)
  st = raw.Hello({.spec = spec}, other_coordinator);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("same coordinator"));
  other_coordinator.set_coordinator(1);  // named explicitly: the same one
  EXPECT_TRUE(raw.Hello({.spec = spec}, other_coordinator).ok());
  EXPECT_EQ(m.ex(1).Stats().handshake_failures, 4u);
  // Every RPC checks, not only the handshake.
  EXPECT_EQ(raw.Push({.token = "", .spec = spec}, {}).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(m.ex(1).Stats().auth_failures, 5u);

  // A gateway with the wrong token never links up; the exchange keeps working for the others.
  WanOptions o = m.Options(3);
  o.listen_address = "127.0.0.1:0";
  o.token = "not-the-token";
  absl::StatusOr<std::unique_ptr<GrpcExchange>> intruder = StartGrpcExchange(m.spec(), o);
  ASSERT_TRUE(intruder.ok());
  ASSERT_TRUE((*intruder)->SetPeerAddress(1, m.Address(1)).ok());
  const uint64_t before = m.ex(1).Stats().auth_failures;
  WaitUntil([&] { return m.ex(1).Stats().auth_failures > before; });
  EXPECT_FALSE((*intruder)->Stats().peers[0].connected);
}

TEST(GrpcExchangeTest, MalformedPeerMessagesAreRefusedWithClearErrorsAndCounted) {
  Mesh m(TestSpec());
  m.StartAll();
  RawPeer raw(m.ex(1).port());
  const RawPeer::Md md{.spec = Hex(SpecDigest(m.spec()))};
  const std::vector<SliceRef> slices = Slices(m.spec());
  // Region 2's genuine provisional frames for round 1.
  wan_internal::RegionEncoder enc(m.spec(), 2, true);
  std::vector<std::vector<uint8_t>> frames;
  for (const SliceRef& s : slices) frames.push_back(**enc.Submit(1, s, RegionSlice(2, 1, s)));
  uint64_t malformed = 0, out_of_window = 0;
  auto expect_refused = [&](grpc::Status st, grpc::StatusCode code, const std::string& text) {
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(text));
    if (code == grpc::StatusCode::FAILED_PRECONDITION || code == grpc::StatusCode::OUT_OF_RANGE) {
      ++out_of_window;
    } else {
      ++malformed;
    }
    EXPECT_EQ(m.ex(1).Stats().malformed_messages, malformed);
    EXPECT_EQ(m.ex(1).Stats().out_of_window_messages, out_of_window);
  };
  // Bad frame bytes (the checksum catches a flipped bit).
  std::vector<uint8_t> bad = frames[0];
  bad[200] ^= 4;
  expect_refused(raw.Push(md, Chunks(1, 2, 0, bad)), grpc::StatusCode::INVALID_ARGUMENT,
                 "bad frame");
  // A valid frame in the place of another slice of the same size, of a different size.
  expect_refused(raw.Push(md, Chunks(1, 2, 1, frames[0])), grpc::StatusCode::INVALID_ARGUMENT,
                 "element offset is 0, expected 16384");
  expect_refused(raw.Push(md, Chunks(1, 2, 3, frames[0])), grpc::StatusCode::INVALID_ARGUMENT,
                 "bytes announced");
  expect_refused(raw.Push(md, Chunks(1, 2, 99, frames[0])), grpc::StatusCode::INVALID_ARGUMENT,
                 "slice 99");
  // A frame passed off as another region's (a forwarder relays frames, but the sender id must
  // be the region it claims), the callee's own region, an unknown region; a round far ahead, a
  // past round.
  expect_refused(raw.Push(md, Chunks(1, 3, 0, frames[0])), grpc::StatusCode::INVALID_ARGUMENT,
                 "sender id is 2, expected 3");
  expect_refused(raw.Push(md, Chunks(1, 1, 0, frames[0])), grpc::StatusCode::INVALID_ARGUMENT,
                 "never the receiver's own");
  expect_refused(raw.Push(md, Chunks(1, 9, 0, frames[0])), grpc::StatusCode::INVALID_ARGUMENT,
                 "carries a frame of region 9");
  expect_refused(raw.Push(md, Chunks(9, 2, 0, frames[0])), grpc::StatusCode::OUT_OF_RANGE,
                 "too far ahead");
  expect_refused(raw.Push(md, Chunks(0, 2, 0, frames[0])), grpc::StatusCode::FAILED_PRECONDITION,
                 "over here");
  // The frame says round 1, the chunks round 2.
  expect_refused(raw.Push(md, Chunks(2, 2, 0, frames[0])), grpc::StatusCode::INVALID_ARGUMENT,
                 "round");
  // Chunks out of order, a stream that stops inside a frame.
  std::vector<pb::FrameChunk> c = Chunks(1, 2, 0, frames[0]);
  ASSERT_GE(c.size(), 2u);
  std::swap(c[0], c[1]);
  expect_refused(raw.Push(md, c), grpc::StatusCode::INVALID_ARGUMENT, "expected offset 0");
  c = Chunks(1, 2, 0, frames[0]);
  c.pop_back();
  expect_refused(raw.Push(md, c), grpc::StatusCode::INVALID_ARGUMENT, "stream ended after");
  // The genuine frame, then the same again (acknowledged), then a different one (refused).
  pb::PushReply reply;
  ASSERT_TRUE(raw.Push(md, Chunks(1, 2, 0, frames[0]), &reply).ok());
  EXPECT_EQ(reply.frames(), 1u);
  ASSERT_TRUE(raw.Push(md, Chunks(1, 2, 0, frames[0]), &reply).ok());
  EXPECT_EQ(reply.duplicates(), 1u);
  EXPECT_EQ(m.ex(1).Stats().duplicate_frames, 1u);
  wan_internal::RegionEncoder other(m.spec(), 2, true);
  std::vector<float> x = RegionSlice(2, 1, slices[0]);
  x[0] = -x[0] - 1;
  std::vector<uint8_t> different = **other.Submit(1, slices[0], x);
  expect_refused(raw.Push(md, Chunks(1, 2, 0, different)), grpc::StatusCode::ALREADY_EXISTS,
                 "different frame");
  // Summaries: inconsistent, for another region, then a conflicting duplicate.
  pb::RegionFinish f;
  f.set_round_id(1);
  f.set_region_id(2);
  f.set_tokens(10);
  f.set_tau_eff(0.5);
  f.set_slices(static_cast<uint32_t>(slices.size()));
  expect_refused(raw.Finish(md, f), grpc::StatusCode::INVALID_ARGUMENT, "tau_eff");
  f.set_tau_eff(2.0);
  f.set_region_id(3);
  expect_refused(raw.Finish(md, f), grpc::StatusCode::INVALID_ARGUMENT, "summary for region 3");
  f.set_region_id(2);
  ASSERT_TRUE(raw.Finish(md, f).ok());
  ASSERT_TRUE(raw.Finish(md, f).ok());  // a retry
  f.set_tokens(11);
  expect_refused(raw.Finish(md, f), grpc::StatusCode::ALREADY_EXISTS, "different summary");
  // A follower takes summaries too (it prepares the aggregate with them) and checks them alike.
  RawPeer raw3(m.ex(3).port());
  EXPECT_TRUE(raw3.Finish(md, f).ok());
  f.set_tokens(12);
  EXPECT_EQ(raw3.Finish(md, f).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  // The exchange still works: region 2's real gateway has not sent anything for round 1, and the
  // raw summary's digest does not match the frames, so region 2 is left out... after the
  // timeout; nothing to wait for here.
}

// Mutual TLS with certificates generated for the test.
TEST(GrpcExchangeTest, MutualTls) {
  if (std::system("which openssl > /dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl CLI";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrFormat("heddle_wan_tls_%d", getpid());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(
      0, std::system(
             absl::StrFormat("sh %s/gen_certs.sh %s", HEDDLE_WAN_TESTDATA, dir.string()).c_str()));
  Mesh m(TestSpec(), {1, 2});
  m.StartAll([&](WanOptions& o) {
    o.tls = {.cert_file = (dir / "peer.pem").string(),
             .key_file = (dir / "peer.key").string(),
             .ca_file = (dir / "ca.pem").string(),
             .server_name = "heddle-peer"};
    for (WanPeer& p : o.peers) p.cert_name = "heddle-peer";  // one certificate for both
  });
  SubmitRegion(m.ex(2), m.spec(), 2, 1);
  SubmitRegion(m.ex(1), m.spec(), 1, 1);
  ExpectSameEverywhere(m, 1, {1, 2});
  EXPECT_EQ(PartIds(*m.outcomes(2).Wait(1).aggregate), (std::vector<uint32_t>{1, 2}));

  auto read = [&](const char* name) {
    std::ifstream in(dir / name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const RawPeer::Md md{.spec = Hex(SpecDigest(m.spec()))};
  pb::HelloRequest hello;
  hello.set_protocol_version(kPeerProtocolVersion);
  hello.set_region_id(2);
  hello.set_spec_digest(SpecDigest(m.spec()));
  hello.add_regions(1);
  hello.add_regions(2);
  hello.set_schedule_digest(m.ex(1).Stats().schedule_digest);
  // With the right client certificate: accepted.
  RawPeer good(m.ex(1).port(),
               grpc::SslCredentials({read("ca.pem"), read("peer.key"), read("peer.pem")}),
               "heddle-peer");
  EXPECT_TRUE(good.Hello(md, hello).ok());
  // No client certificate, a certificate from another CA, plaintext: the handshake fails.
  RawPeer anonymous(m.ex(1).port(), grpc::SslCredentials({read("ca.pem"), "", ""}), "heddle-peer");
  EXPECT_EQ(anonymous.Hello(md, hello).error_code(), grpc::StatusCode::UNAVAILABLE);
  RawPeer stranger(
      m.ex(1).port(),
      grpc::SslCredentials({read("ca.pem"), read("stranger.key"), read("stranger.pem")}),
      "heddle-peer");
  EXPECT_EQ(stranger.Hello(md, hello).error_code(), grpc::StatusCode::UNAVAILABLE);
  RawPeer plain(m.ex(1).port());
  EXPECT_EQ(plain.Hello(md, hello).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A server whose certificate the client's CA did not sign: refused by the client.
  RawPeer wrong_ca(m.ex(1).port(),
                   grpc::SslCredentials({read("other.pem"), read("peer.key"), read("peer.pem")}),
                   "heddle-peer");
  EXPECT_EQ(wrong_ca.Hello(md, hello).error_code(), grpc::StatusCode::UNAVAILABLE);
  std::filesystem::remove_all(dir);
}

// ---- identity: a region bound to its certificate, per-peer tokens (docs/relay-wan.md §5) ----

// Generates the test certificates (testdata/gen_certs.sh) into a fresh directory; "" without
// the openssl CLI.
std::filesystem::path TestCerts(const char* tag) {
  if (std::system("which openssl > /dev/null 2>&1") != 0) return {};
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrFormat("heddle_wan_%s_%d", tag, getpid());
  std::filesystem::remove_all(dir);
  const std::string cmd =
      absl::StrFormat("sh %s/gen_certs.sh %s", HEDDLE_WAN_TESTDATA, dir.string());
  if (std::system(cmd.c_str()) != 0) return {};
  return dir;
}

std::string ReadText(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pb::HelloRequest HelloFrom(const Mesh& m, uint32_t region, std::vector<uint32_t> regions,
                           uint64_t schedule_digest) {
  pb::HelloRequest hello;
  hello.set_protocol_version(kPeerProtocolVersion);
  hello.set_region_id(region);
  hello.set_spec_digest(SpecDigest(m.spec()));
  for (uint32_t r : regions) hello.add_regions(r);
  hello.set_schedule_digest(schedule_digest);
  return hello;
}

TEST(GrpcExchangeAuthTest, RegionIsBoundToItsCertificate) {
  const std::filesystem::path dir = TestCerts("region_certs");
  if (dir.empty()) GTEST_SKIP() << "no openssl CLI";
  // Every gateway has its own region's certificate (named "1", "2", "3": the default
  // cert_name), and no tls.server_name: each end checks that the other's certificate names
  // the region it is configured as.
  Mesh m(TestSpec());
  m.StartAll([&](WanOptions& o) {
    const std::string r = absl::StrFormat("region-%u", o.region_id);
    o.tls = {.cert_file = (dir / (r + ".pem")).string(),
             .key_file = (dir / (r + ".key")).string(),
             .ca_file = (dir / "ca.pem").string()};
  });
  for (uint32_t region : {3u, 2u, 1u}) SubmitRegion(m.ex(region), m.spec(), region, 1);
  ExpectSameEverywhere(m, 1, {1, 2, 3});
  EXPECT_EQ(PartIds(*m.outcomes(3).Wait(1).aggregate), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(m.ex(1).Stats().auth_failures, 0u);

  const RawPeer::Md as2{.region = "2", .spec = Hex(SpecDigest(m.spec()))};
  const RawPeer::Md as3{.region = "3", .spec = Hex(SpecDigest(m.spec()))};
  const uint64_t digest = m.ex(1).Stats().schedule_digest;
  auto creds = [&](const std::string& name) {
    return grpc::SslCredentials({ReadText(dir / "ca.pem"), ReadText(dir / (name + ".key")),
                                 ReadText(dir / (name + ".pem"))});
  };
  // Region 2's certificate, claiming region 2: accepted.
  RawPeer eu(m.ex(1).port(), creds("region-2"), "1");
  EXPECT_TRUE(eu.Hello(as2, HelloFrom(m, 2, {1, 2, 3}, digest)).ok());
  // Region 2's certificate (valid, from the job's CA, with the job's token) claiming region 3:
  // refused, counted, both names in the message; on every call, not only the handshake.
  grpc::Status st = eu.Hello(as3, HelloFrom(m, 3, {1, 2, 3}, digest));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("claims region 3"));
  EXPECT_THAT(st.error_message(), HasSubstr("names [2], not '3'"));
  EXPECT_EQ(m.ex(1).Stats().auth_failures, 1u);
  EXPECT_EQ(eu.Finish(as3, pb::RegionFinish()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(eu.Push(as3, {}).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(eu.Stream(as3, {}).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  pb::DecisionRequest wait;
  wait.set_round_id(1);
  EXPECT_EQ(eu.Wait(as3, wait).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  pb::FetchRequest fetch;
  fetch.set_round_id(1);
  EXPECT_EQ(eu.Fetch(as3, fetch).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(m.ex(1).Stats().auth_failures, 6u);
  // A certificate with the name as its common name and no subject alternative names: the
  // common name counts.
  RawPeer cn3(m.ex(1).port(), creds("cn-3"), "1");
  EXPECT_TRUE(cn3.Hello(as3, HelloFrom(m, 3, {1, 2, 3}, digest)).ok());
  EXPECT_EQ(cn3.Hello(as2, HelloFrom(m, 2, {1, 2, 3}, digest)).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A certificate of the CA naming no region ("heddle-peer"): refused as any region.
  RawPeer other(m.ex(1).port(), creds("peer"), "1");
  st = other.Hello(as2, HelloFrom(m, 2, {1, 2, 3}, digest));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("names [heddle-peer], not '2'"));
  EXPECT_EQ(m.ex(1).Stats().auth_failures, 8u);
  // The caller's side: a server whose certificate does not name the expected region fails the
  // TLS handshake (region 1's server, expected to be region 3).
  RawPeer wrong_server(m.ex(1).port(), creds("region-2"), "3");
  EXPECT_EQ(wrong_server.Hello(as2, HelloFrom(m, 2, {1, 2, 3}, digest)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // The exchange still runs.
  for (uint32_t region : {1u, 2u, 3u}) SubmitRegion(m.ex(region), m.spec(), region, 2);
  ExpectSameEverywhere(m, 2, {1, 2, 3});
  std::filesystem::remove_all(dir);
}

TEST(GrpcExchangeAuthTest, ConfiguredCertNameReplacesTheRegionId) {
  const std::filesystem::path dir = TestCerts("cert_name");
  if (dir.empty()) GTEST_SKIP() << "no openssl CLI";
  // Two gateways with the one "heddle-peer" certificate, named so in each other's cert_name
  // (the client check uses the same names: no server_name).
  Mesh m(TestSpec(), {1, 2});
  m.StartAll([&](WanOptions& o) {
    o.tls = {.cert_file = (dir / "peer.pem").string(),
             .key_file = (dir / "peer.key").string(),
             .ca_file = (dir / "ca.pem").string()};
    for (WanPeer& p : o.peers) p.cert_name = "heddle-peer";
  });
  SubmitRegion(m.ex(2), m.spec(), 2, 1);
  SubmitRegion(m.ex(1), m.spec(), 1, 1);
  ExpectSameEverywhere(m, 1, {1, 2});
  // Region 2's own certificate ("2") is now the wrong one for region 2.
  RawPeer two(m.ex(1).port(),
              grpc::SslCredentials({ReadText(dir / "ca.pem"), ReadText(dir / "region-2.key"),
                                    ReadText(dir / "region-2.pem")}),
              "heddle-peer");
  const grpc::Status st = two.Hello({.region = "2", .spec = Hex(SpecDigest(m.spec()))},
                                    HelloFrom(m, 2, {1, 2}, m.ex(1).Stats().schedule_digest));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("not 'heddle-peer'"));
  std::filesystem::remove_all(dir);
}

TEST(GrpcExchangeAuthTest, PerPeerTokensBindEachPairOfGateways) {
  // Plaintext. Pairs 1–2 and 1–3 have their own secrets; 2–3 uses the job's token.
  const std::map<std::pair<uint32_t, uint32_t>, std::string> pair_token = {{{1, 2}, "tok-12"},
                                                                           {{1, 3}, "tok-13"}};
  Mesh m(TestSpec());
  m.StartAll([&](WanOptions& o) {
    for (WanPeer& p : o.peers) {
      auto it =
          pair_token.find({std::min(o.region_id, p.region_id), std::max(o.region_id, p.region_id)});
      if (it != pair_token.end()) p.token = it->second;
    }
  });
  for (uint64_t r = 1; r <= 2; ++r) {
    for (uint32_t region : {2u, 3u, 1u}) SubmitRegion(m.ex(region), m.spec(), region, r);
    ExpectSameEverywhere(m, r, {1, 2, 3});
    EXPECT_EQ(PartIds(*m.outcomes(1).Wait(r).aggregate), (std::vector<uint32_t>{1, 2, 3}));
  }
  for (uint32_t g : {1u, 2u, 3u}) EXPECT_EQ(m.ex(g).Stats().auth_failures, 0u) << g;

  const std::string spec = Hex(SpecDigest(m.spec()));
  const uint64_t digest = m.ex(1).Stats().schedule_digest;
  RawPeer to1(m.ex(1).port());
  EXPECT_TRUE(to1.Hello({.token = "tok-12", .region = "2", .spec = spec},
                        HelloFrom(m, 2, {1, 2, 3}, digest))
                  .ok());
  // The 1–2 secret does not let its holder speak as region 3, nor does the job's token replace
  // a pair's own.
  grpc::Status st = to1.Hello({.token = "tok-12", .region = "3", .spec = spec},
                              HelloFrom(m, 3, {1, 2, 3}, digest));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(st.error_message(), HasSubstr("wrong bearer token for region 3"));
  EXPECT_EQ(to1.Hello({.token = "s3cret-token", .region = "2", .spec = spec},
                      HelloFrom(m, 2, {1, 2, 3}, digest))
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(m.ex(1).Stats().auth_failures, 2u);
  // Between 2 and 3, the job's token.
  RawPeer to3(m.ex(3).port());
  EXPECT_TRUE(to3.Hello({.token = "s3cret-token", .region = "2", .spec = spec},
                        HelloFrom(m, 2, {1, 2, 3}, digest))
                  .ok());
  EXPECT_EQ(to3.Hello({.token = "tok-12", .region = "2", .spec = spec},
                      HelloFrom(m, 2, {1, 2, 3}, digest))
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(m.ex(3).Stats().auth_failures, 1u);
}

TEST(WanOptionsTest, PeerIdentityTokensAndStateDir) {
  const std::string path = std::filesystem::temp_directory_path() /
                           absl::StrFormat("heddle_wan_peer_token_%d", getpid());
  { std::ofstream(path) << "  tok-13\n"; }
  absl::StatusOr<WanOptions> o = WanOptionsFromYaml(YAML::Load(absl::StrFormat(R"(
region: 2
listen: 0.0.0.0:7443
token: job-token
peers:
  - {region: 1, address: "gw1:7443", cert_name: gw-eu.example, token: tok-12}
  - {region: 3, address: "gw3:7443", token_file: %s}
  - {region: 4, address: "gw4:7443"}
state_dir: /var/lib/heddle/wan
)",
                                                                               path)));
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->peers.size(), 3u);
  EXPECT_EQ(o->peers[0].cert_name, "gw-eu.example");
  EXPECT_EQ(o->peers[0].token, "tok-12");
  EXPECT_EQ(o->peers[1].cert_name, "");
  EXPECT_EQ(o->peers[1].token, "tok-13");
  EXPECT_EQ(o->peers[2].token, "");
  EXPECT_EQ(o->token, "job-token");
  EXPECT_EQ(o->state_dir, "/var/lib/heddle/wan");
  std::filesystem::remove(path);

  auto error = [](const std::string& more) {
    absl::StatusOr<WanOptions> o =
        WanOptionsFromYaml(YAML::Load("region: 1\nlisten: a:1\n" + more));
    EXPECT_FALSE(o.ok()) << more;
    return std::string(o.status().message());
  };
  EXPECT_THAT(error("peers: [{region: 2, address: b:1, cert_name: ''}]"),
              HasSubstr("wan.peers[0].cert_name: empty"));
  EXPECT_THAT(error("peers: [{region: 2, address: b:1, token: a, token_file: /x}]"),
              HasSubstr("wan.peers[0].token_file: give token or token_file"));
  EXPECT_THAT(error("peers: [{region: 2, address: b:1, token_file: /nonexistent/t}]"),
              HasSubstr("wan.peers[0].token_file: cannot read"));
  EXPECT_THAT(error("peers: [{region: 2, address: b:1, token: 'a b'}]"),
              HasSubstr("wan.peers[0].token: must be printable"));
  EXPECT_THAT(error("peers: [{region: 2, address: b:1, name: x}]"),
              HasSubstr("wan.peers[0].name: unknown key"));
  EXPECT_THAT(error("state_dir: ''"), HasSubstr("wan.state_dir: empty"));
}

// ---- the coordinator's decision log (docs/relay-wan.md §6) ----

std::filesystem::path StateDir(const char* tag) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrFormat("heddle_wan_state_%s_%d", tag, getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// Every gateway's outcomes: each round at most once, and the same digest wherever published.
void ExpectNoRoundPublishedTwiceDifferently(Mesh& m, std::vector<uint32_t> gateways,
                                            uint64_t through) {
  for (uint32_t gw : gateways) EXPECT_EQ(m.outcomes(gw).duplicates, 0) << gw;
  for (uint64_t r = 1; r <= through; ++r) {
    std::optional<uint64_t> digest;
    for (uint32_t gw : gateways) {
      if (!m.outcomes(gw).Has(r)) continue;
      const RoundOutcome o = m.outcomes(gw).Wait(r);
      if (o.kind != RoundOutcome::Kind::kPublished) continue;
      if (!digest) digest = o.aggregate->digest;
      EXPECT_EQ(o.aggregate->digest, *digest) << "round " << r << " gateway " << gw;
    }
  }
}

TEST(GrpcExchangeTest, CoordinatorRestartedFromItsDecisionLogResumes) {
  const std::filesystem::path state = StateDir("resume");
  Mesh m(TestSpec());
  auto options = [&](WanOptions& o) {
    if (o.region_id == 1) {
      o.state_dir = state.string();
      o.wan_timeout = absl::Milliseconds(300);  // only round 3 below waits for it
    }
  };
  m.StartAll(options);
  for (uint64_t r = 1; r <= 2; ++r) {
    for (uint32_t region : {2u, 3u}) SubmitReady(m, region, r);
    SubmitRegion(m.ex(1), m.spec(), 1, r);
    ExpectSameEverywhere(m, r, {1, 2, 3});
  }
  // Round 3: regions 2 and 3 have handed everything to the coordinator, which dies before its
  // own region finishes (round 3 undecided).
  for (uint32_t region : {2u, 3u}) SubmitReady(m, region, 3);
  m.Kill(1);
  WanOptions o = m.Options(1);
  options(o);
  m.Start(1, o);
  m.ConnectAll();
  // It resumes after round 2 (whose aggregate this new process does not hold: its region is
  // told so) with its old identity.
  const RoundOutcome resumed = m.outcomes(1).Wait(2);
  EXPECT_EQ(resumed.kind, RoundOutcome::Kind::kAborted);
  EXPECT_EQ(resumed.reason.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(resumed.reason.message(), HasSubstr("decision log"));
  EXPECT_FALSE(m.outcomes(1).Has(1));
  EXPECT_EQ(m.ex(1).Stats().published_through, 2u);
  EXPECT_EQ(m.ex(1).Stats().decisions_replayed, 2u);
  EXPECT_EQ(m.ex(1).Published(2).status().code(), absl::StatusCode::kNotFound);
  // Round 3: what regions 2 and 3 handed to the old process is gone with it (unless an
  // acknowledgement was lost in the kill and they sent it again); the new one decides after
  // wan_timeout with its own region and whatever reached it, and everyone publishes that.
  SubmitRegion(m.ex(1), m.spec(), 1, 3);
  ExpectSameEverywhere(m, 3, {1, 2, 3});
  const std::vector<uint32_t> parts3 = PartIds(*m.outcomes(2).Wait(3).aggregate);
  EXPECT_EQ(parts3.front(), 1u);
  for (uint32_t g : {2u, 3u}) {
    EXPECT_EQ(m.outcomes(g).Wait(3).includes_this_region,
              std::find(parts3.begin(), parts3.end(), g) != parts3.end());
  }
  // Then every region again, bit-identical everywhere.
  for (uint64_t r = 4; r <= 5; ++r) {
    for (uint32_t region : {2u, 3u}) SubmitReady(m, region, r);
    SubmitRegion(m.ex(1), m.spec(), 1, r);
    ExpectSameEverywhere(m, r, {1, 2, 3});
    EXPECT_EQ(PartIds(*m.outcomes(3).Wait(r).aggregate), (std::vector<uint32_t>{1, 2, 3}));
  }
  for (uint32_t g : {2u, 3u}) {
    EXPECT_EQ(m.ex(g).Stats().coordinator_restarts, 0u);
    EXPECT_EQ(m.ex(g).Stats().rounds_lost, 0u);
    for (uint64_t r = 1; r <= 5; ++r) {
      EXPECT_EQ(m.outcomes(g).Wait(r).kind, RoundOutcome::Kind::kPublished) << g << " " << r;
    }
  }
  ExpectNoRoundPublishedTwiceDifferently(m, {1, 2, 3}, 5);
  // A gateway restarted now catches up from the oldest kept round whose frames the coordinator
  // holds (3), not from the replayed round 2 it could not fetch, and rejoins.
  m.Kill(3);
  m.Start(3, m.Options(3));
  m.ConnectAll();
  ASSERT_EQ(m.outcomes(3).Wait(5).kind, RoundOutcome::Kind::kPublished);
  EXPECT_EQ(m.outcomes(3).Wait(3).kind, RoundOutcome::Kind::kPublished);
  EXPECT_FALSE(m.outcomes(3).Has(2));
  for (uint32_t region : {2u, 3u}) SubmitReady(m, region, 6);
  SubmitRegion(m.ex(1), m.spec(), 1, 6);
  ExpectSameEverywhere(m, 6, {1, 2, 3});
  EXPECT_EQ(PartIds(*m.outcomes(3).Wait(6).aggregate), (std::vector<uint32_t>{1, 2, 3}));
  std::filesystem::remove_all(state);
}

TEST(GrpcExchangeTest, CoordinatorRestartedFromALogMissingPublishedRoundsIsRefused) {
  const std::filesystem::path state = StateDir("behind");
  Mesh m(TestSpec());
  auto options = [&](WanOptions& o) {
    if (o.region_id == 1) {
      o.state_dir = state.string();
      o.wan_timeout = absl::Milliseconds(300);
    }
  };
  m.StartAll(options);
  for (uint32_t region : {2u, 3u}) SubmitReady(m, region, 1);
  SubmitRegion(m.ex(1), m.spec(), 1, 1);
  ExpectSameEverywhere(m, 1, {1, 2, 3});
  const std::filesystem::path log = state / "decisions.log";
  const std::string after_round_1 = ReadText(log);
  for (uint32_t region : {2u, 3u}) SubmitReady(m, region, 2);
  SubmitRegion(m.ex(1), m.spec(), 1, 2);
  ExpectSameEverywhere(m, 2, {1, 2, 3});
  // The coordinator comes back with the log as it was after round 1 (a lost disk, a restored
  // backup): same identity, but it would decide round 2 again.
  m.Kill(1);
  { std::ofstream(log, std::ios::binary | std::ios::trunc) << after_round_1; }
  WanOptions o = m.Options(1);
  options(o);
  m.Start(1, o);
  m.ConnectAll();
  EXPECT_EQ(m.ex(1).Stats().published_through, 1u);
  // The followers, through round 2, see it behind them and stop taking its decisions.
  WaitUntil([&] {
    return m.ex(2).Stats().coordinator_restarts > 0 && m.ex(3).Stats().coordinator_restarts > 0;
  });
  // It decides round 2 again (alone: the others are past it), then round 3 with everyone's
  // frames; the followers go on refusing it, though it is no longer behind them: it has shown
  // it lost decisions.
  for (uint32_t region : {2u, 3u}) SubmitRegion(m.ex(region), m.spec(), region, 3);
  SubmitRegion(m.ex(1), m.spec(), 1, 2);
  ASSERT_EQ(m.outcomes(1).Wait(2).kind, RoundOutcome::Kind::kPublished);
  SubmitRegion(m.ex(1), m.spec(), 1, 3);
  ASSERT_EQ(m.outcomes(1).Wait(3).kind, RoundOutcome::Kind::kPublished);
  const uint64_t refused2 = m.ex(2).Stats().coordinator_restarts;
  const uint64_t refused3 = m.ex(3).Stats().coordinator_restarts;
  WaitUntil([&] {
    return m.ex(2).Stats().coordinator_restarts > refused2 &&
           m.ex(3).Stats().coordinator_restarts > refused3;
  });
  EXPECT_FALSE(m.outcomes(2).Has(3));
  EXPECT_FALSE(m.outcomes(3).Has(3));
  EXPECT_EQ(m.outcomes(2).duplicates, 0);
  EXPECT_EQ(m.outcomes(3).duplicates, 0);
  std::filesystem::remove_all(state);
}

TEST(GrpcExchangeTest, DecisionLogOfAnotherJobFailsAtStart) {
  const std::filesystem::path state = StateDir("other_job");
  Mesh m(TestSpec());
  WanOptions o = m.Options(1);
  o.state_dir = state.string();
  {
    absl::StatusOr<std::unique_ptr<GrpcExchange>> ex = StartGrpcExchange(m.spec(), o);
    ASSERT_TRUE(ex.ok()) << ex.status();
  }
  absl::StatusOr<ModelSpec> other = ModelSpecFromString(
      "chunk_size: 256\nslice_elements: 16384\ntensors:\n  - {name: w, elements: 5000}\n");
  ASSERT_TRUE(other.ok());
  absl::StatusOr<std::unique_ptr<GrpcExchange>> ex = StartGrpcExchange(*other, o);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(ex.status().message(), HasSubstr("wan.state_dir"));
  EXPECT_THAT(ex.status().message(), HasSubstr("its own state_dir"));
  std::filesystem::remove_all(state);
}

TEST(WanOptionsTest, RelativeTokenFilesAreReadFromTheConfigDirectory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrFormat("heddle_wan_token_dir_%d", getpid());
  std::filesystem::create_directories(dir / "secrets");
  { std::ofstream(dir / "secrets" / "job.token") << "tok-job\n"; }
  { std::ofstream(dir / "secrets" / "peer3.token") << "tok-13\n"; }
  const YAML::Node wan = YAML::Load(R"(
region: 1
listen: 0.0.0.0:7443
token_file: secrets/job.token
peers: [{region: 3, address: "gw3:7443", token_file: secrets/peer3.token}]
)");
  absl::StatusOr<WanOptions> o = WanOptionsFromYaml(wan, dir.string());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->token, "tok-job");
  EXPECT_EQ(o->peers[0].token, "tok-13");
  // Not from the working directory (where secrets/ does not exist).
  absl::StatusOr<WanOptions> cwd = WanOptionsFromYaml(wan);
  ASSERT_FALSE(cwd.ok());
  EXPECT_THAT(cwd.status().message(), HasSubstr("cannot read secrets/peer3.token"));
  std::filesystem::remove_all(dir);
}

TEST(WanOptionsTest, FromYaml) {
  const std::string path =
      std::filesystem::temp_directory_path() / absl::StrFormat("heddle_wan_token_%d", getpid());
  { std::ofstream(path) << "tok-123\n"; }
  YAML::Node n = YAML::Load(absl::StrFormat(R"(
region: 2
listen: 0.0.0.0:7443
peers: [{region: 1, address: "gw1:7443"}, {region: 3, address: "gw3:7443"}]
streams_per_peer: 8
wan_timeout: 90s
quorum: {min_regions: 2, min_token_fraction: 0.5}
token_file: %s
tls: {cert: a.pem, key: a.key, ca: ca.pem}
chunk_bytes: 1048576
keep_rounds: 6
weighting: tokens
gateway_error_feedback: false
rpc_timeout: 500ms
coordinator: 3
)",
                                            path));
  absl::StatusOr<WanOptions> o = WanOptionsFromYaml(n);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->region_id, 2u);
  EXPECT_EQ(o->listen_address, "0.0.0.0:7443");
  ASSERT_EQ(o->peers.size(), 2u);
  EXPECT_EQ(o->peers[1].region_id, 3u);
  EXPECT_EQ(o->peers[1].address, "gw3:7443");
  EXPECT_EQ(o->streams_per_peer, 8u);
  EXPECT_EQ(o->wan_timeout, absl::Seconds(90));
  EXPECT_EQ(o->quorum.min_regions, 2u);
  EXPECT_EQ(o->quorum.min_token_fraction, 0.5);
  EXPECT_EQ(o->token, "tok-123");
  EXPECT_EQ(o->tls.ca_file, "ca.pem");
  EXPECT_EQ(o->chunk_bytes, 1048576u);
  EXPECT_EQ(o->keep_rounds, 6u);
  EXPECT_EQ(o->weighting, Weighting::kTokens);
  EXPECT_FALSE(o->gateway_error_feedback);
  EXPECT_EQ(o->rpc_timeout, absl::Milliseconds(500));
  EXPECT_EQ(o->coordinator, 3u);
  std::filesystem::remove(path);

  auto error = [](const std::string& yaml) {
    absl::StatusOr<WanOptions> o = WanOptionsFromYaml(YAML::Load(yaml));
    EXPECT_FALSE(o.ok()) << yaml;
    return std::string(o.status().message());
  };
  EXPECT_THAT(error("listen: a:1"), HasSubstr("wan.region"));
  EXPECT_THAT(error("region: 1"), HasSubstr("wan.listen"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\npeers: [{region: 2}]"),
              HasSubstr("wan.peers[0].address"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\npeers: [{region: 1, address: b:1}]"),
              HasSubstr("wan.peers[0].region"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\nwan_timeout: soon"), HasSubstr("wan.wan_timeout"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\nstreams_per_peer: 0"),
              HasSubstr("wan.streams_per_peer"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\ntls: {cert: a.pem}"), HasSubstr("wan.tls"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\ntoken_file: /nonexistent/t"),
              HasSubstr("wan.token_file"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\nquorum: {min_regions: 3}"),
              HasSubstr("wan.quorum.min_regions"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\nweighting: mean"), HasSubstr("wan.weighting"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\nchunk_bytes: 10"), HasSubstr("wan.chunk_bytes"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\nbogus: 1"), HasSubstr("wan.bogus: unknown key"));
  EXPECT_THAT(error("region: 1\nlisten: a:1\npeers: [{region: 2, address: b:1}]\ncoordinator: 5"),
              HasSubstr("wan.coordinator: region 5"));
  EXPECT_THAT(error("region: x\nlisten: a:1"), HasSubstr("wan.region"));
  EXPECT_THAT(error("- 1"), HasSubstr("wan: expected a mapping"));
}

TEST(WanOptionsTest, ScheduleAndTopology) {
  const char* base = "region: 1\nlisten: 0.0.0.0:7443\npeers: [{region: 2, address: 'b:1'}]\n";
  auto parse = [&](const std::string& more) {
    return WanOptionsFromYaml(YAML::Load(std::string(base) + more));
  };
  absl::StatusOr<WanOptions> o = parse("");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->schedule.name, "direct");
  o = parse("schedule: auto\ntopology: wan.yaml\n");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->schedule.name, "auto");
  EXPECT_EQ(o->schedule.topology_file, "wan.yaml");
  o = parse(
      "schedule: {name: hierarchical, pieces: 4, params: {G: 2}}\n"
      "topology: {ranks: ['1', '2'], default: {bandwidth: 1Gbit, latency: 10ms}}\n");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->schedule.name, "hierarchical");
  EXPECT_EQ(o->schedule.pieces, 4u);
  EXPECT_EQ(o->schedule.params.at("G"), 2);
  EXPECT_THAT(o->schedule.topology_yaml, HasSubstr("ranks"));
  o = parse("schedule: {file: s.json}\n");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->schedule.name, "file");
  EXPECT_EQ(o->schedule.file, "s.json");

  o = parse("schedule: {name: auto, measured: true, recompile_every: 4}\n");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->schedule.measured);
  EXPECT_EQ(o->schedule.recompile_every, 4u);
  EXPECT_THAT(
      parse("schedule: {name: ring, measured: true}\n").status().message(),
      HasSubstr("wan.schedule.measured: recompiling from measured speeds needs name: auto"));
  EXPECT_THAT(
      parse("schedule: {name: auto, measured: true, recompile_every: 0}\n").status().message(),
      HasSubstr("wan.schedule.recompile_every"));

  EXPECT_THAT(parse("schedule: {name: ring, file: s.json}\n").status().message(),
              HasSubstr("wan.schedule: give name or file"));
  EXPECT_THAT(parse("schedule: {name: ring, depth: 2}\n").status().message(),
              HasSubstr("wan.schedule.depth: unknown key"));
  EXPECT_THAT(parse("schedule: {name: ring, params: {G: two}}\n").status().message(),
              HasSubstr("wan.schedule.params.G"));
  EXPECT_THAT(parse("schedule: [ring]\n").status().message(), HasSubstr("wan.schedule"));
  EXPECT_THAT(parse("topology: [1, 2]\n").status().message(), HasSubstr("wan.topology"));
}

// The schedules the configuration resolves to, on the WAN of the issue: 4 regions, one link 4x
// slower than the rest.
TEST(WanScheduleTest, ResolvesDirectRingAutoAndFiles) {
  const std::vector<uint32_t> regions = {1, 2, 5, 7};
  WanScheduleOptions o;
  o.topology_yaml =
      "ranks: ['1', '2', '5', '7']\ndefault: {bandwidth: 200Mbit, latency: 20ms}\n"
      "links: [{between: ['1', '5'], bandwidth: 50Mbit, latency: 20ms}]\n";
  const uint64_t slot = 1 << 20;
  std::map<std::string, collective::Schedule> got;
  for (const char* name : {"direct", "ring", "auto"}) {
    o.name = name;
    absl::StatusOr<collective::Schedule> s = ResolveWanSchedule(o, regions, slot);
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    EXPECT_GT(s->predicted_s, 0) << name;
    EXPECT_EQ(s->ranks, (std::vector<std::string>{"1", "2", "5", "7"}));
    // Deterministic: the same configuration, the same schedule (what every gateway relies on).
    absl::StatusOr<collective::Schedule> again = ResolveWanSchedule(o, regions, slot);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(WanScheduleDigest(*again), WanScheduleDigest(*s)) << name;
    got[name] = *s;
  }
  // Direct: each gateway sends its own frames to every other, nothing forwarded.
  absl::StatusOr<ForwardPlan> direct = ForwardPlan::Build(got["direct"], regions, 1, 8);
  ASSERT_TRUE(direct.ok());
  for (uint32_t slice = 0; slice < 8; ++slice) {
    EXPECT_THAT(direct->Targets(1, slice), ::testing::ElementsAre(2, 5, 7));
    EXPECT_TRUE(direct->Targets(5, slice).empty());
  }
  // The synthesized schedule beats both on this WAN, by relaying around the slow link.
  EXPECT_LT(got["auto"].predicted_s * 1.3,
            std::min(got["direct"].predicted_s, got["ring"].predicted_s));
  uint64_t forwards = 0;
  for (uint32_t region : regions) {
    absl::StatusOr<ForwardPlan> p = ForwardPlan::Build(got["auto"], regions, region, 8);
    ASSERT_TRUE(p.ok());
    for (uint32_t other : regions) {
      if (other == region) continue;
      for (uint32_t slice = 0; slice < 8; ++slice) forwards += p->Targets(other, slice).size();
    }
  }
  EXPECT_GT(forwards, 0u);

  // A schedule file: the one `auto` gave, read back; another topology's is refused.
  const std::string path = std::filesystem::temp_directory_path() /
                           absl::StrFormat("heddle_wan_schedule_%d.json", getpid());
  ASSERT_TRUE(collective::WriteScheduleFile(path, got["auto"]).ok());
  WanScheduleOptions f = o;
  f.name = "file";
  f.file = path;
  absl::StatusOr<collective::Schedule> read = ResolveWanSchedule(f, regions, slot);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(WanScheduleDigest(*read), WanScheduleDigest(got["auto"]));
  f.topology_yaml = "ranks: ['1', '2', '5', '7']\ndefault: {bandwidth: 1Gbit, latency: 5ms}\n";
  EXPECT_THAT(ResolveWanSchedule(f, regions, slot).status().message(),
              HasSubstr("compiled for another topology"));
  std::filesystem::remove(path);
}

TEST(WanScheduleTest, ConfigurationMistakesNameTheKey) {
  const std::vector<uint32_t> regions = {1, 2, 3};
  WanScheduleOptions o;
  o.topology_yaml = "ranks: [eu, us, asia]\ndefault: {bandwidth: 1Gbit, latency: 5ms}\n";
  EXPECT_THAT(ResolveWanSchedule(o, regions, 1024).status().message(),
              HasSubstr("wan.topology: ranks [eu, us, asia]; they must be the configured "
                        "regions by id, in increasing order: [1, 2, 3]"));
  o.topology_yaml = "ranks: ['1', '2', '3']\ndefault: {bandwidth: fast}\n";
  EXPECT_THAT(ResolveWanSchedule(o, regions, 1024).status().message(), HasSubstr("wan.topology"));
  o.topology_yaml = "";
  o.topology_file = "/nonexistent/wan.yaml";
  EXPECT_THAT(ResolveWanSchedule(o, regions, 1024).status().message(),
              HasSubstr("wan.topology: cannot read /nonexistent/wan.yaml"));
  o.topology_file = "";
  o.name = "no-such";
  EXPECT_THAT(ResolveWanSchedule(o, regions, 1024).status().message(),
              HasSubstr("wan.schedule: 'no-such'"));
  o.name = "file";
  o.file = "/nonexistent/s.json";
  EXPECT_THAT(ResolveWanSchedule(o, regions, 1024).status().message(),
              HasSubstr("wan.schedule.file"));
}

// A switch's compiled schedule is run only if it parses, has the announced digest and is one the
// relay can run.
TEST(WanScheduleTest, SwitchPayloadIsCheckedBeforeItIsRun) {
  const std::vector<uint32_t> regions = {1, 2, 3};
  const collective::Schedule hub = *HubSchedule();
  const std::string json = collective::ScheduleToJson(hub);
  const uint64_t digest = WanScheduleDigest(hub);
  absl::StatusOr<collective::Schedule> s = ScheduleFromSwitch(json, digest, regions, 1 << 20);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(WanScheduleDigest(*s), digest);
  EXPECT_EQ(s->intent, "hub");
  EXPECT_EQ(ScheduleFromSwitch(json, digest ^ 1, regions, 1 << 20).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(ScheduleFromSwitch(json, digest ^ 1, regions, 1 << 20).status().message(),
              HasSubstr("digest"));
  EXPECT_THAT(ScheduleFromSwitch("{\"format\": ", digest, regions, 1 << 20).status().message(),
              HasSubstr("does not parse"));
  EXPECT_FALSE(ScheduleFromSwitch("", digest, regions, 1 << 20).ok());
  // Its own digest, but a piece never reaches a gateway: refused.
  collective::Schedule broken = hub;
  broken.per_rank[1].ops.pop_back();
  EXPECT_FALSE(ScheduleFromSwitch(collective::ScheduleToJson(broken), WanScheduleDigest(broken),
                                  regions, 1 << 20)
                   .ok());
  // Four regions: a three-rank schedule is not theirs.
  EXPECT_FALSE(ScheduleFromSwitch(json, digest, std::vector<uint32_t>{1, 2, 3, 4}, 1 << 20).ok());
}

// wan.coordinator: auto picks the region whose decision reaches everyone first.
TEST(WanScheduleTest, CoordinatorChosenByLatency) {
  const std::vector<uint32_t> regions = {1, 2, 3};
  WanScheduleOptions o;
  // eu–us 20 ms, eu–asia 70 ms, us–asia 40 ms one way: us (2) is in the middle.
  o.topology_yaml =
      "ranks: ['1', '2', '3']\ndefault: {bandwidth: 1Gbit, latency: 20ms}\nlinks:\n"
      "  - {between: ['1', '3'], bandwidth: 1Gbit, latency: 70ms}\n"
      "  - {between: ['2', '3'], bandwidth: 1Gbit, latency: 40ms}\n";
  absl::StatusOr<collective::Topology> t = ResolveWanTopology(o, regions);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(ChooseCoordinator(*t, regions, 1 << 20), 2u);
  // All equal: the lowest id.
  o.topology_yaml = "ranks: ['1', '2', '3']\ndefault: {bandwidth: 1Gbit, latency: 20ms}\n";
  t = ResolveWanTopology(o, regions);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(ChooseCoordinator(*t, regions, 1 << 20), 1u);
  // Equal latencies, but the link between 1 and 3 is slow: 2 holds every region's frames first.
  o.topology_yaml =
      "ranks: ['1', '2', '3']\ndefault: {bandwidth: 1Gbit, latency: 20ms}\nlinks:\n"
      "  - {between: ['1', '3'], bandwidth: 10Mbit, latency: 20ms}\n";
  t = ResolveWanTopology(o, regions);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(ChooseCoordinator(*t, regions, 1 << 20), 2u);
  // From the `wan:` block, and every gateway of a mesh names the same one.
  YAML::Node n = YAML::Load(
      "region: 1\nlisten: 127.0.0.1:0\npeers: [{region: 2, address: a:1}]\ncoordinator: auto\n"
      "topology: {ranks: ['1', '2'], default: {bandwidth: 1Gbit, latency: 20ms}}\n");
  absl::StatusOr<WanOptions> w = WanOptionsFromYaml(n);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->coordinator_auto);
}

// A coordinator without a direct link to some region still pays for that region's frames, at
// the bottleneck of the route they take; of parallel links the lower latency wins with its own
// bandwidth.
TEST(WanScheduleTest, CoordinatorCostUsesTheRouteBottleneck) {
  const std::vector<uint32_t> regions = {1, 2, 3};
  WanScheduleOptions o;
  // 1–2 fast, 2–3 slow, no 1–3 link: region 3's frames cross the slow link whatever the
  // coordinator, and 2 is one hop nearer to everyone than 1 (whose route from 3 goes via 2).
  o.topology_yaml =
      "ranks: ['1', '2', '3']\nlinks:\n"
      "  - {between: ['1', '2'], bandwidth: 1Gbit, latency: 1ms}\n"
      "  - {between: ['2', '3'], bandwidth: 10Mbit, latency: 1ms}\n";
  absl::StatusOr<collective::Topology> t = ResolveWanTopology(o, regions);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(ChooseCoordinator(*t, regions, 1 << 20), 2u);
  // Built in code, every link 1 ms and 1 GB/s but two parallel links 3 -> 1: the 1 ms one
  // carries 1 kB/s, the 1 GB/s one takes 50 ms. The route is the 1 ms link, with its own
  // bandwidth: region 3's frames take over 1000 s to reach 1, so 2 is chosen, not the lowest id.
  collective::Topology u;
  u.nodes = {"1", "2", "3"};
  u.ranks = 3;
  for (uint32_t i = 0; i < 3; ++i) {
    for (uint32_t j = 0; j < 3; ++j) {
      if (i != j && !(i == 2 && j == 0)) {
        u.links.push_back({.src = i, .dst = j, .bytes_per_second = 1e9, .latency_s = 0.001});
      }
    }
  }
  u.links.push_back({.src = 2, .dst = 0, .bytes_per_second = 1e3, .latency_s = 0.001});
  u.links.push_back({.src = 2, .dst = 0, .bytes_per_second = 1e9, .latency_s = 0.050});
  EXPECT_EQ(ChooseCoordinator(u, regions, 1 << 20), 2u);
}

// `coordinator: auto` without a topology has nothing to choose from: refused at start-up,
// naming both keys, from YAML and from options built in code.
TEST(GrpcExchangeTest, CoordinatorAutoWithoutTopologyFailsAtStart) {
  YAML::Node n = YAML::Load(
      "region: 1\nlisten: 127.0.0.1:0\npeers: [{region: 2, address: a:1}]\ncoordinator: auto\n");
  absl::StatusOr<WanOptions> w = WanOptionsFromYaml(n);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("wan.coordinator"));
  EXPECT_THAT(w.status().message(), HasSubstr("wan.topology"));
  WanOptions o;
  o.region_id = 1;
  o.listen_address = "127.0.0.1:0";
  o.peers = {{.region_id = 2}};
  o.coordinator_auto = true;
  absl::StatusOr<std::unique_ptr<GrpcExchange>> ex = StartGrpcExchange(TestSpec(), o);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(ex.status().message(), HasSubstr("wan.topology"));
}

TEST(GrpcExchangeTest, BadOptionsFailAtStart) {
  WanOptions o;
  o.region_id = 1;
  o.listen_address = "256.1.1.1:0";
  EXPECT_THAT(StartGrpcExchange(TestSpec(), o).status().message(), HasSubstr("wan.listen"));
  o.listen_address = "127.0.0.1:0";
  o.tls = {.cert_file = "/nonexistent.pem", .key_file = "k", .ca_file = "c"};
  EXPECT_THAT(StartGrpcExchange(TestSpec(), o).status().message(), HasSubstr("wan.tls.cert"));
}

long PeakRssKiB() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// 2^27 values in slices of 2^24 (8 slices), three gateways in this process: the result is
// checked, and the process's peak memory grows by compressed sizes, not by fp32 × regions.
TEST(GrpcExchangeLargeTest, StreamsALargeModelInBoundedMemory) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromString(
      "chunk_size: 4096\nslice_elements: 16777216\nsynthetic: {tensors: 2, elements: 67108864}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const uint64_t n = TotalElements(*spec);
  ASSERT_EQ(n, uint64_t{1} << 27);
  const long before = PeakRssKiB();
  long exchanged = 0;  // the peak once every gateway published, before the checks' buffers
  {
    Mesh m(*spec);
    m.StartAll([](WanOptions& o) {
      o.gateway_error_feedback = false;  // its residual is one fp32 model per gateway by design
      o.chunk_bytes = 1 << 20;
      o.streams_per_peer = 4;
    });
    std::vector<float> x;
    for (uint32_t region : {1u, 2u, 3u}) {
      for (const SliceRef& s : Slices(*spec)) {
        x.resize(s.count);
        std::mt19937 rng(region * 131 + s.index);
        for (float& v : x) v = static_cast<float>(static_cast<int32_t>(rng())) * 1e-9f;
        ASSERT_TRUE(m.ex(region).SubmitSlice(1, s, x).ok());
      }
      ASSERT_TRUE(
          m.ex(region)
              .FinishRegion(
                  {.round_id = 1, .region_id = region, .tokens = 100 * region, .tau_eff = 2.0})
              .ok());
    }
    std::vector<float> out0, out;
    RoundOutcome o1 = m.outcomes(1).Wait(1);
    ASSERT_EQ(o1.kind, RoundOutcome::Kind::kPublished);
    ASSERT_EQ(PartIds(*o1.aggregate), (std::vector<uint32_t>{1, 2, 3}));
    for (uint32_t gw : {2u, 3u}) {
      RoundOutcome o = m.outcomes(gw).Wait(1);
      ASSERT_EQ(o.kind, RoundOutcome::Kind::kPublished);
      EXPECT_EQ(o.aggregate->digest, o1.aggregate->digest);
    }
    exchanged = PeakRssKiB();
    // Slice 5 on two gateways: the same bits, and the tokens-weighted mean of the region
    // frames' decodings (W = N_r / N with equal τ).
    const SliceRef s5 = Slices(*spec)[5];
    out0.resize(s5.count);
    out.resize(s5.count);
    ASSERT_TRUE(AccumulateGlobalSlice(*o1.aggregate, 5, out0).ok());
    ASSERT_TRUE(AccumulateGlobalSlice(*m.outcomes(3).Wait(1).aggregate, 5, out).ok());
    EXPECT_EQ(0, std::memcmp(out0.data(), out.data(), out.size() * 4));
    const GlobalAggregate& g = *o1.aggregate;
    EXPECT_DOUBLE_EQ(g.parts[0].weight, 100.0 / 600);
    std::vector<float> ref(s5.count, 0.0f);
    for (size_t p = 0; p < 3; ++p) {
      absl::StatusOr<FrameView> f = ParseFrame(*g.frames[p * g.slices + 5]);
      ASSERT_TRUE(f.ok());
      ASSERT_TRUE(AccumulateFrame(*f, g.parts[p].weight, ref));
    }
    EXPECT_EQ(0, std::memcmp(out0.data(), ref.data(), out.size() * 4));
  }
  const long growth_mib = (exchanged - before) / 1024;
  const long fp32_mib = static_cast<long>(n * 4 >> 20);        // 512 MiB: the model in fp32
  const long compressed_mib = static_cast<long>(n / 8 >> 20);  // 16 MiB: one region's frames
  RecordProperty("peak_rss_growth_mib", static_cast<int>(growth_mib));
  fprintf(stderr, "peak RSS growth %ld MiB (fp32 model %ld MiB, one region compressed %ld MiB)\n",
          growth_mib, fp32_mib, compressed_mib);
  // What is held up to publication: per gateway, three regions' frames as received and as
  // published (patched copies), gRPC buffers, and the test's one fp32 input slice (64 MiB).
  // Holding the regions in fp32 would take 1.5 GiB per gateway, 4.5 GiB here.
  EXPECT_LT(growth_mib, 3 * 3 * 2 * compressed_mib + 64 + 128);
  EXPECT_LT(growth_mib, fp32_mib);
}

}  // namespace
}  // namespace heddle::relay
