// heddle-relay: the config, the metrics, and the whole binary on loopback — `serve` and two
// `worker` processes run three rounds; `status -j` reads the result.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "control/metrics/testing/http_get.h"
#include "dataplane/relay/round/model_spec.h"
#include "dataplane/relay/wan/grpc_exchange.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/heddle-relay/commands.h"
#include "tools/heddle-relay/config.h"
#include "tools/heddle-relay/relay_metrics.h"
#include "tools/heddle-relay/wan_hook.h"

extern char** environ;

namespace heddle::relay::tool {
namespace {

using ::heddle::metrics::test_util::HttpGet;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr char kSmall[] = R"(
region: {id: 2, name: eu}
listen: 127.0.0.1:0
token: t0ken
model: {chunk_size: 1024, slice_elements: 65536,
        tensors: [{name: w, elements: 150000}, {name: b, elements: 3000, dtype: bf16}]}
round: {push_timeout_s: 60, missing: renormalize, min_token_fraction: 0.5, min_workers: 2}
planner: {target_round_s: 2, seq_len: 16, max_inner_steps: 50}
metrics: {listen: 127.0.0.1:0}
)";

TEST(RelayConfigTest, ParsesEveryBlock) {
  absl::StatusOr<RelayConfig> c = RelayConfigFromString(kSmall);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->region_id, 2u);
  EXPECT_EQ(c->region, "eu");
  EXPECT_EQ(c->server.listen, "127.0.0.1:0");
  EXPECT_EQ(c->server.service.token, "t0ken");
  EXPECT_EQ(c->spec.tensors.size(), 2u);
  EXPECT_EQ(c->spec.tensors[1].dtype, DType::kBFloat16);
  EXPECT_EQ(c->policy.push_timeout, absl::Seconds(60));
  EXPECT_EQ(c->policy.min_workers, 2u);
  ASSERT_TRUE(c->planner.has_value());
  EXPECT_EQ(c->planner->solver.target_round_s, 2);
  EXPECT_EQ(c->planner->mode, planner::PlanMode::kBalanced);
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:0");
  EXPECT_TRUE(c->wan_yaml.empty());
}

TEST(RelayConfigTest, TheExampleParses) {
  // The example points at a token file the test does not have; everything else must hold.
  std::string text = ReadAll(HEDDLE_RELAY_EXAMPLE);
  ASSERT_FALSE(text.empty());
  text = absl::StrReplaceAll(text, {{"token_file: /etc/heddle/relay.token", "token: x"}});
  absl::StatusOr<RelayConfig> c = RelayConfigFromString(text);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->spec.tensors.size(), 3u);
  EXPECT_DOUBLE_EQ(c->policy.min_token_fraction, 0.75);
}

TEST(RelayConfigTest, MistakesNameTheKey) {
  auto err = [](const std::string& yaml) {
    absl::StatusOr<RelayConfig> c = RelayConfigFromString(yaml);
    return c.ok() ? std::string("ok") : std::string(c.status().message());
  };
  const std::string model = "model: {tensors: [{name: w, elements: 64}]}\n";
  EXPECT_THAT(err("region: {id: 1}\n" + model + "colour: blue\n"),
              HasSubstr("unknown key \"colour\""));
  EXPECT_THAT(err(model), HasSubstr("region: required"));
  EXPECT_THAT(err("region: {id: 1}\n"), HasSubstr("model: required"));
  EXPECT_THAT(err("region: {id: 1}\n" + model + "round: {missing: skip}\n"),
              HasSubstr("expected renormalize or abort"));
  EXPECT_THAT(err("region: {id: 1}\n" + model + "round: {min_token_fraction: 2}\n"),
              HasSubstr("min_token_fraction 2 must be within [0, 1]"));
  EXPECT_THAT(err("region: {id: 1}\n" + model + "round: {push_timeout_s: soon}\n"),
              HasSubstr("round.push_timeout_s"));
  EXPECT_THAT(err("region: {id: 1}\n" + model + "token: a\ntoken_file: b\n"),
              HasSubstr("not both"));
  EXPECT_THAT(err("region: {id: 1}\n" + model + "planner: {mode: fastest}\n"),
              HasSubstr("planner.mode \"fastest\": expected balanced"));
  absl::StatusOr<RelayConfig> eq =
      RelayConfigFromString("region: {id: 1}\n" + model + "planner: {mode: equal}\n");
  ASSERT_TRUE(eq.ok()) << eq.status();
  EXPECT_EQ(eq->planner->mode, planner::PlanMode::kEqual);
}

TEST(WanHookTest, DefaultExchangeReadsTheWanBlock) {
  absl::StatusOr<RelayConfig> c =
      RelayConfigFromString(std::string(kSmall) + "wan: {peers: [a:1]}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->wan_yaml, HasSubstr("peers"));
  WanContext ctx{.region_id = 2, .spec = &c->spec, .wan_yaml = c->wan_yaml};
  // A malformed block is refused with the WAN side's message, naming the key.
  absl::StatusOr<std::unique_ptr<WanExchange>> ex = GetWanExchangeFactory()(ctx);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(std::string(ex.status().message()), HasSubstr("wan."));
  // The WAN block must name the same region as the config.
  ctx.wan_yaml = "{region: 3, listen: 127.0.0.1:0, peers: [{region: 1, address: 127.0.0.1:1}]}";
  ex = GetWanExchangeFactory()(ctx);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(std::string(ex.status().message()), HasSubstr("region.id is 2"));
  // One weighting for both levels.
  ctx.wan_yaml =
      "{region: 2, listen: 127.0.0.1:0, weighting: tokens, "
      "peers: [{region: 1, address: 127.0.0.1:1}]}";
  ex = GetWanExchangeFactory()(ctx);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(std::string(ex.status().message()), HasSubstr("one weighting"));
  ctx.wan_yaml.clear();
  EXPECT_TRUE(GetWanExchangeFactory()(ctx).ok());
  // An installed factory is what serve uses.
  bool called = false;
  SetWanExchangeFactory([&](const WanContext& w) -> absl::StatusOr<std::unique_ptr<WanExchange>> {
    called = true;
    EXPECT_EQ(w.region_id, 2u);
    return absl::UnimplementedError("test factory");
  });
  EXPECT_EQ(GetWanExchangeFactory()(ctx).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(called);
  SetWanExchangeFactory(nullptr);
}

TEST(WanHookTest, StateDirIsRelativeToTheConfigFile) {
  absl::StatusOr<RelayConfig> c = RelayConfigFromString(std::string(kSmall));
  ASSERT_TRUE(c.ok()) << c.status();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrFormat("heddle_relay_state_%d", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // Region 1 is the coordinator (the lowest id): it opens its decision log under the config's
  // directory.
  WanContext ctx{.region_id = 1,
                 .spec = &c->spec,
                 .wan_yaml =
                     "{region: 1, listen: 127.0.0.1:0, peers: [{region: 2, address: "
                     "127.0.0.1:1}], state_dir: wan-state}",
                 .config_dir = dir.string()};
  absl::StatusOr<std::unique_ptr<WanExchange>> ex = GetWanExchangeFactory()(ctx);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE(std::filesystem::exists(dir / "wan-state" / "decisions.log"));
  ex->reset();
  std::filesystem::remove_all(dir);
}

// The samples of one family in Prometheus text, by label set ("{...}", "" without labels).
std::map<std::string, double> Samples(const std::string& text, const std::string& name) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    const std::string series = line.substr(0, space);
    const size_t brace = series.find('{');
    if (series.substr(0, brace) != name) continue;
    out[brace == std::string::npos ? "" : series.substr(brace)] = std::stod(line.substr(space + 1));
  }
  return out;
}

double Sum(const std::map<std::string, double>& samples) {
  double sum = 0;
  for (const auto& [labels, v] : samples) sum += v;
  return sum;
}

TEST(RelayMetricsTest, FamiliesFromOneSnapshot) {
  v1::StatusResponse s;
  s.set_collecting_round(5);
  s.set_last_resolved_round(4);
  s.set_rounds_published(3);
  s.set_rounds_aborted(1);
  s.set_bytes_in_total(1000);
  (*s.mutable_refused())["duplicate"] = 2;
  v1::RoundRow* r = s.add_rounds();
  r->set_round_id(4);
  r->set_wait_s(1.5);
  r->set_wan_s(0.25);
  r->set_compression_ratio(31.5);
  v1::MemberRow* m = s.add_members();
  m->set_name("gpu-a");
  m->set_member(true);
  m->mutable_plan()->set_valid(true);
  m->mutable_plan()->set_batch_size(16);
  const std::string text = RenderMetricsText(s);
  EXPECT_THAT(text, HasSubstr("heddle_relay_rounds_total{outcome=\"published\"} 3"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_last_round_seconds{phase=\"wait\"} 1.5"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_last_round_seconds{phase=\"wan\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_compression_ratio 31.5"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_pushes_refused_total{reason=\"duplicate\"} 2"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_pushes_refused_total{reason=\"malformed\"} 0"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_lan_bytes_total{direction=\"in\"} 1000"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_plan_batch_size{worker=\"gpu-a\"} 16"));
  EXPECT_THAT(RenderStatus(s), HasSubstr("collecting 5, last resolved 4"));
  EXPECT_THAT(text, Not(HasSubstr("heddle_relay_wan_bytes_total")));
  // Without a planner: no mode series, "off" in the table; with one, its mode and plan version.
  EXPECT_THAT(text, Not(HasSubstr("heddle_relay_planner_mode")));
  EXPECT_THAT(RenderStatus(s), ContainsRegex("planner: +off"));
  s.set_planner_mode("equal");
  s.set_plan_version(3);
  EXPECT_THAT(RenderMetricsText(s), HasSubstr("heddle_relay_planner_mode{mode=\"equal\"} 1"));
  EXPECT_THAT(RenderStatus(s), HasSubstr("equal, plan version 3"));
}

TEST(RelayMetricsTest, WanHalfFromTheExchangeStats) {
  WanStats st;
  st.coordinator = true;
  st.published_through = 7;
  st.rounds_published = 6;
  st.auth_failures = 3;
  st.rounds_aborted = 2;
  st.rounds_lost = 1;
  st.duplicate_frames = 9;
  st.out_of_window_messages = 4;
  st.coordinator_restarts = 8;
  st.decisions_replayed = 12;
  st.publish_seconds_sum = 3.0;
  st.publish_count = 6;
  st.last_publish_seconds = 0.75;
  st.peers.push_back({.region_id = 2,
                      .address = "10.0.0.2:7443",
                      .connected = true,
                      .bytes_sent = 4096,
                      .bytes_received = 8192});
  st.peers.push_back({.region_id = 3,
                      .address = "10.0.0.3:7443",
                      .frames_forwarded = 11,
                      .send_bytes_per_second = 25e6,
                      .reconnects = 5});
  st.schedule_name = "auto: direct";
  st.schedule_digest = 0x0123456789abcdefull;
  st.schedule_pieces = 4;
  st.schedule_predicted_s = 0.25;
  v1::StatusResponse s;
  FillWanStatus(st, s.mutable_wan());
  EXPECT_DOUBLE_EQ(s.wan().mean_publish_s(), 0.5);
  const std::string text = RenderMetricsText(s);
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_bytes_total{peer=\"2\",direction=\"out\"} 4096"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_bytes_total{peer=\"2\",direction=\"in\"} 8192"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_peer_up{peer=\"3\"} 0"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_reconnects_total{peer=\"3\"} 5"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_refused_total{reason=\"auth\"} 3"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_refused_total{reason=\"out_of_window\"} 4"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_refused_total{reason=\"coordinator_restart\"} 8"));
  // Duplicates were acknowledged, not refused: a series of their own.
  // (A worker's duplicate push on the LAN side is refused: heddle_relay_pushes_refused_total.)
  EXPECT_FALSE(Samples(text, "heddle_relay_wan_refused_total").contains("{reason=\"duplicate\"}"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_duplicate_frames_total 9"));
  EXPECT_EQ(Sum(Samples(text, "heddle_relay_wan_refused_total")), 3 + 4 + 8);
  // Exclusive outcomes only; the parts of one outcome in series of their own.
  EXPECT_EQ(Samples(text, "heddle_relay_wan_rounds_total"),
            (std::map<std::string, double>{{"{outcome=\"aborted\"}", 2},
                                           {"{outcome=\"published\"}", 6}}));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_rounds_lost_total 1"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_rounds_without_this_region_total 0"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_rounds_prepared_total 0"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_decisions_replayed_total 12"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_publish_seconds{stat=\"last\"} 0.75"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_forwarded_frames_total{peer=\"3\"} 11"));
  EXPECT_THAT(text,
              HasSubstr("heddle_relay_wan_schedule_predicted_seconds{schedule=\"auto: direct\"} "
                        "0.25"));
  const std::string table = RenderStatus(s);
  EXPECT_THAT(table, HasSubstr("coordinator, published through round 7\n"));
  EXPECT_THAT(table, HasSubstr("6 published (0 without this region, 0 prepared ahead), 2 aborted "
                               "(1 lost); 12 decisions replayed from the decision log"));
  EXPECT_THAT(table, HasSubstr("digest mismatches 0, out of window 4, restarted coordinator 8\n"));
  EXPECT_THAT(table, HasSubstr("9 frames received again, acknowledged without being applied"));
  EXPECT_THAT(table, HasSubstr("10.0.0.3:7443"));
  EXPECT_THAT(table, HasSubstr("down"));
  EXPECT_THAT(table, HasSubstr("auto: direct (digest 0123456789abcdef, 4 pieces, predicted "
                               "0.250 s per exchange; 0 switches from measured speeds)"));
  EXPECT_THAT(table, HasSubstr("FORWARDED"));
  EXPECT_THAT(table, HasSubstr("200.0 Mbit/s"));
  EXPECT_THAT(text, HasSubstr("heddle_relay_wan_send_rate_bytes_per_second{peer=\"3\"} 25000000"));
}

// What a scrape of the endpoint returns is the snapshot's families, taken at scrape time.
TEST(RelayMetricsTest, EndpointServesTheSnapshotsFamilies) {
  std::atomic<int> scrapes{0};
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> m =
      MetricsEndpoint::Start("127.0.0.1:0", [&scrapes] {
        v1::StatusResponse s;
        s.set_rounds_published(100 + scrapes.fetch_add(1, std::memory_order_relaxed));
        WanStats w;
        w.rounds_published = 5;
        w.duplicate_frames = 2;
        FillWanStatus(w, s.mutable_wan());
        return s;
      });
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_GT((*m)->port(), 0);
  const absl::StatusOr<std::string> first_scrape = HttpGet((*m)->port(), "/metrics");
  ASSERT_TRUE(first_scrape.ok()) << first_scrape.status();
  const std::string& first = *first_scrape;
  EXPECT_THAT(first, HasSubstr("heddle_relay_rounds_total{outcome=\"published\"} 100"));
  EXPECT_THAT(first, HasSubstr("heddle_relay_wan_rounds_total{outcome=\"published\"} 5"));
  EXPECT_THAT(first, HasSubstr("heddle_relay_wan_duplicate_frames_total 2"));
  const absl::StatusOr<std::string> second = HttpGet((*m)->port(), "/metrics");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(*second, HasSubstr("heddle_relay_rounds_total{outcome=\"published\"} 101"));
  // A port already taken: a clear error, no exception.
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> taken = MetricsEndpoint::Start(
      absl::StrFormat("127.0.0.1:%d", (*m)->port()), [] { return v1::StatusResponse(); });
  ASSERT_FALSE(taken.ok());
  EXPECT_THAT(std::string(taken.status().message()), HasSubstr("cannot serve metrics"));
}

// One gateway of a two-region WAN on loopback; its region side is the outcomes it is handed.
class OutcomeLog {
 public:
  WanExchange::OutcomeCallback Callback() {
    return [this](uint64_t r, RoundOutcome o) {
      std::lock_guard<std::mutex> l(mu_);
      got_.emplace_back(r, std::move(o));
      cv_.notify_all();
    };
  }
  // Round r's outcome; fails the test if it does not come within a minute.
  std::optional<RoundOutcome> Wait(uint64_t r) {
    std::unique_lock<std::mutex> l(mu_);
    auto find = [&]() -> const RoundOutcome* {
      for (const auto& [round, o] : got_) {
        if (round == r) return &o;
      }
      return nullptr;
    };
    if (!cv_.wait_for(l, std::chrono::seconds(60), [&] { return find() != nullptr; })) {
      ADD_FAILURE() << "no outcome for round " << r;
      return std::nullopt;
    }
    return *find();
  }
  // How many rounds were resolved here, in all and published.
  std::pair<size_t, size_t> Counts() {
    std::lock_guard<std::mutex> l(mu_);
    size_t published = 0;
    for (const auto& [round, o] : got_) published += o.kind == RoundOutcome::Kind::kPublished;
    return {got_.size(), published};
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<uint64_t, RoundOutcome>> got_;
};

// The outcome log before the exchange: members are destroyed in reverse order, and the exchange's
// outcome thread calls into the log until the exchange is gone.
struct TestGateway {
  std::unique_ptr<OutcomeLog> outcomes;
  std::unique_ptr<GrpcExchange> ex;
};

TestGateway StartGateway(const ModelSpec& spec, uint32_t region, const std::string& state_dir) {
  WanOptions o;
  o.region_id = region;
  o.listen_address = "127.0.0.1:0";
  o.peers.push_back({.region_id = region == 1 ? 2u : 1u, .address = ""});
  o.token = "wan-t0ken";
  o.keep_rounds = 8;
  o.rpc_timeout = absl::Seconds(20);
  o.decision_poll = absl::Seconds(2);
  o.backoff_min = absl::Milliseconds(10);
  o.backoff_max = absl::Milliseconds(200);
  if (region == 1) o.state_dir = state_dir;  // region 1 decides (the lowest id)
  TestGateway g{.outcomes = std::make_unique<OutcomeLog>()};
  absl::StatusOr<std::unique_ptr<GrpcExchange>> ex = StartGrpcExchange(spec, o);
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return g;
  g.ex = *std::move(ex);
  g.ex->SetOutcomeCallback(g.outcomes->Callback());
  return g;
}

void Connect(TestGateway& a, uint32_t a_region, TestGateway& b, uint32_t b_region) {
  ASSERT_TRUE(a.ex->SetPeerAddress(b_region, absl::StrFormat("127.0.0.1:%d", b.ex->port())).ok());
  ASSERT_TRUE(b.ex->SetPeerAddress(a_region, absl::StrFormat("127.0.0.1:%d", a.ex->port())).ok());
}

// The region's aggregate of round r (tokens 0: the region has nothing this round).
void SubmitRound(WanExchange& ex, const ModelSpec& spec, uint32_t region, uint64_t r,
                 uint64_t tokens) {
  if (tokens > 0) {
    for (const SliceRef& s : Slices(spec)) {
      std::vector<float> v(s.count);
      for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 7 + region * 13 + r) % 17) - 8.0f;
      ASSERT_TRUE(ex.SubmitSlice(r, s, v).ok());
    }
  }
  ASSERT_TRUE(
      ex.FinishRegion({.round_id = r, .region_id = region, .tokens = tokens, .workers = 2}).ok());
}

// The WAN round series of one gateway, checked against the outcomes its region side was handed:
// the outcome label is exclusive (each round resolved counted once, under its kind).
void ExpectOutcomesCountEachRoundOnce(const TestGateway& g, const char* which) {
  v1::StatusResponse s;
  FillWanStatus(g.ex->Stats(), s.mutable_wan());
  const std::map<std::string, double> rounds =
      Samples(RenderMetricsText(s), "heddle_relay_wan_rounds_total");
  const auto [resolved, published] = g.outcomes->Counts();
  EXPECT_EQ(Sum(rounds), double(resolved)) << which;
  EXPECT_EQ(rounds.at("{outcome=\"published\"}"), double(published)) << which;
  EXPECT_EQ(rounds.at("{outcome=\"aborted\"}"), double(resolved - published)) << which;
}

// Rounds published with and without a region, aborted everywhere, and a coordinator restarted
// from its decision log (replayed decisions, a lost round): on every gateway the outcomes of
// heddle_relay_wan_rounds_total add up to the rounds it resolved, while the finer counts (parts
// of those outcomes) are non-zero in their own series.
TEST(RelayMetricsTest, WanRoundOutcomesSumToTheRoundsResolved) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromString(
      "chunk_size: 256\nslice_elements: 8192\n"
      "tensors: [{name: w, elements: 20000}, {name: b, elements: 1000}]\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::filesystem::path state = std::filesystem::temp_directory_path() /
                                      absl::StrFormat("heddle_relay_wan_outcomes_%d", getpid());
  std::filesystem::remove_all(state);
  TestGateway g1 = StartGateway(*spec, 1, state.string());
  TestGateway g2 = StartGateway(*spec, 2, state.string());
  ASSERT_TRUE(g1.ex != nullptr && g2.ex != nullptr);
  Connect(g1, 1, g2, 2);
  // Round 1: both regions. Round 2: region 2 has no tokens, published without it. Round 3: no
  // region has tokens, aborted everywhere.
  const uint64_t tokens[4][3] = {{}, {0, 1000, 2000}, {0, 1000, 0}, {0, 0, 0}};
  for (uint64_t r = 1; r <= 3; ++r) {
    SubmitRound(*g2.ex, *spec, 2, r, tokens[r][2]);
    SubmitRound(*g1.ex, *spec, 1, r, tokens[r][1]);
    for (TestGateway* g : {&g1, &g2}) {
      std::optional<RoundOutcome> o = g->outcomes->Wait(r);
      ASSERT_TRUE(o.has_value());
      EXPECT_EQ(o->kind, r == 3 ? RoundOutcome::Kind::kAborted : RoundOutcome::Kind::kPublished)
          << "round " << r;
    }
  }
  EXPECT_EQ(g2.ex->Stats().rounds_without_this_region, 1u);
  ExpectOutcomesCountEachRoundOnce(g1, "coordinator");
  // The coordinator restarts from its log: it replays rounds 1-3 and resolves round 3 again,
  // as lost (this process holds no aggregate for it); round 4 is published everywhere.
  g1.ex.reset();
  g1 = StartGateway(*spec, 1, state.string());
  ASSERT_TRUE(g1.ex != nullptr);
  Connect(g1, 1, g2, 2);
  std::optional<RoundOutcome> lost = g1.outcomes->Wait(3);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(lost->kind, RoundOutcome::Kind::kAborted);
  EXPECT_EQ(lost->reason.code(), absl::StatusCode::kDataLoss);
  SubmitRound(*g2.ex, *spec, 2, 4, 2000);
  SubmitRound(*g1.ex, *spec, 1, 4, 1000);
  for (TestGateway* g : {&g1, &g2}) {
    std::optional<RoundOutcome> o = g->outcomes->Wait(4);
    ASSERT_TRUE(o.has_value());
    EXPECT_EQ(o->kind, RoundOutcome::Kind::kPublished);
  }
  const WanStats st1 = g1.ex->Stats();
  EXPECT_EQ(st1.decisions_replayed, 3u);
  EXPECT_EQ(st1.rounds_lost, 1u);
  EXPECT_EQ(g1.outcomes->Counts(), (std::pair<size_t, size_t>{2, 1}));
  EXPECT_EQ(g2.outcomes->Counts(), (std::pair<size_t, size_t>{4, 3}));
  ExpectOutcomesCountEachRoundOnce(g1, "restarted coordinator");
  ExpectOutcomesCountEachRoundOnce(g2, "follower");
  // The parts of an outcome, each in its own series.
  auto series = [](const TestGateway& g, const std::string& name) {
    v1::StatusResponse s;
    FillWanStatus(g.ex->Stats(), s.mutable_wan());
    return Samples(RenderMetricsText(s), name);
  };
  using Single = std::map<std::string, double>;
  EXPECT_EQ(series(g1, "heddle_relay_wan_rounds_lost_total"), (Single{{"", 1}}));
  EXPECT_EQ(series(g1, "heddle_relay_wan_decisions_replayed_total"), (Single{{"", 3}}));
  EXPECT_EQ(series(g2, "heddle_relay_wan_rounds_without_this_region_total"), (Single{{"", 1}}));
  g1.ex.reset();
  g2.ex.reset();
  std::filesystem::remove_all(state);
}

// A child process with stdout and stderr in files.
struct Child {
  pid_t pid = -1;
  std::string out, err;
};

Child Spawn(std::vector<std::string> args, const std::string& dir, const std::string& name) {
  Child c{.out = dir + "/" + name + ".out", .err = dir + "/" + name + ".err"};
  args.insert(args.begin(), HEDDLE_RELAY_PATH);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  if (posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return c;
}

// Waits for the child to exit (bounded, so a hang fails the test instead of blocking ctest).
int WaitExit(Child& c, absl::Duration limit) {
  const absl::Time end = absl::Now() + limit;
  int status = 0;
  while (absl::Now() < end) {
    pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid) {
      c.pid = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(c.pid, SIGKILL);
  waitpid(c.pid, &status, 0);
  c.pid = -1;
  return -1;
}

class BinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/heddle_relay_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (Child* c : {&serve_}) {
      if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, nullptr, 0);
      }
    }
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  Child serve_;
};

// round N: included digest HEX ... -> {N: HEX}
std::map<int, std::string> Digests(const std::string& out) {
  std::map<int, std::string> d;
  std::regex re(R"(round (\d+): included digest ([0-9a-f]{16}))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    d[std::stoi((*it)[1])] = (*it)[2];
  }
  return d;
}

TEST_F(BinaryTest, ServeAndTwoWorkersRunThreeRounds) {
  const std::string cfg = dir_ + "/relay.yaml";
  std::ofstream(cfg) << kSmall;
  const std::string port_file = dir_ + "/port";
  serve_ = Spawn({"serve", "--config", cfg, "--port-file", port_file}, dir_, "serve");
  ASSERT_GT(serve_.pid, 0);
  std::string port;
  for (int i = 0; i < 1500 && port.empty(); ++i) {
    port = ReadAll(port_file);
    if (port.empty()) absl::SleepFor(absl::Milliseconds(20));
  }
  while (!port.empty() && port.back() == '\n') port.pop_back();
  ASSERT_FALSE(port.empty()) << ReadAll(serve_.err);
  const std::string relay = "127.0.0.1:" + port;
  std::vector<Child> workers;
  for (const char* name : {"gpu-a", "gpu-b"}) {
    workers.push_back(
        Spawn({"worker", "--relay", relay, "--token", "t0ken", "--name", name, "--region", "eu",
               "--rounds", "3", "--time-scale", "0.05", "--tokens-per-s",
               name[4] == 'a' ? "1000" : "3000", "--timeout", "60", "--pull-timeout", "120"},
              dir_, name));
    ASSERT_GT(workers.back().pid, 0);
  }
  std::vector<std::map<int, std::string>> digests;
  for (Child& w : workers) {
    EXPECT_EQ(WaitExit(w, absl::Seconds(240)), 0) << ReadAll(w.out) << ReadAll(w.err);
    digests.push_back(Digests(ReadAll(w.out)));
  }
  // round.min_workers: 2 makes both take part in rounds 1..3.
  ASSERT_EQ(digests[0].size(), 3u) << ReadAll(workers[0].out);
  EXPECT_EQ(digests[0], digests[1]);
  EXPECT_EQ(digests[0].begin()->first, 1);

  Child st = Spawn({"status", "--relay", relay, "--token", "t0ken", "-j"}, dir_, "status");
  ASSERT_EQ(WaitExit(st, absl::Seconds(60)), 0) << ReadAll(st.err);
  const std::string json = ReadAll(st.out);
  EXPECT_THAT(json, HasSubstr("\"rounds_published\": \"3\""));
  EXPECT_THAT(json, HasSubstr("\"name\": \"gpu-a\""));
  for (const auto& [round, hex] : digests[0]) {
    EXPECT_THAT(json, HasSubstr(std::to_string(std::stoull(hex, nullptr, 16))))
        << "round " << round << " digest";
  }
  Child bad = Spawn({"status", "--relay", relay, "--token", "nope"}, dir_, "bad");
  EXPECT_EQ(WaitExit(bad, absl::Seconds(60)), 1);
  EXPECT_THAT(ReadAll(bad.err), HasSubstr("wrong bearer token"));

  kill(serve_.pid, SIGTERM);
  EXPECT_EQ(WaitExit(serve_, absl::Seconds(60)), 0) << ReadAll(serve_.err);
  EXPECT_THAT(ReadAll(serve_.out), HasSubstr("SIGTERM, shutting down"));
}

}  // namespace
}  // namespace heddle::relay::tool
