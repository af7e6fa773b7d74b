#include "tools/heddle-relay/commands.h"

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "dataplane/relay/client/client.h"
#include "dataplane/relay/service/relay.grpc.pb.h"
#include "dataplane/relay/service/relay_service.h"
#include "dataplane/relay/wan/grpc_exchange.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "tools/heddle-relay/config.h"
#include "tools/heddle-relay/relay_metrics.h"
#include "tools/heddle-relay/wan_hook.h"
#include "tools/heddlectl/table.h"

namespace heddle::relay::tool {
namespace {

using heddle::api::cli::RenderKeyValues;
using heddle::api::cli::Table;

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "heddle-relay: %s\n", std::string(s.message()).c_str());
  return 1;
}

absl::StatusOr<std::string> Token(const ConnectFlags& c) {
  if (c.token_file.empty()) return c.token;
  std::ifstream in(c.token_file);
  if (!in)
    return absl::NotFoundError(absl::StrFormat("--token-file %s: cannot open", c.token_file));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  return t;
}

std::string Bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f %s", b, units[u]) : absl::StrFormat("%.1f %s", b, units[u]);
}

// xorshift64*: fast pseudo-gradients for large synthetic models.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  float Uniform() {  // in [-1, 1)
    return static_cast<float>(static_cast<int64_t>(Next() >> 11) - (int64_t{1} << 52)) /
           static_cast<float>(int64_t{1} << 52);
  }
};

}  // namespace

int Serve(const ServeOptions& o) {
  absl::StatusOr<RelayConfig> cfg = RelayConfigFromFile(o.config);
  if (!cfg.ok()) return Fail(cfg.status());
  if (o.check_config) {
    std::printf("%s: ok (region %s id %u, %zu tensors, %zu slices, spec digest %016llx)\n",
                o.config.c_str(), cfg->region.c_str(), cfg->region_id, cfg->spec.tensors.size(),
                Slices(cfg->spec).size(), static_cast<unsigned long long>(SpecDigest(cfg->spec)));
    return 0;
  }
  // SIGINT/SIGTERM are taken by sigwait below; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  std::unique_ptr<planner::Planner> planner;
  if (cfg->planner.has_value()) {
    absl::StatusOr<std::unique_ptr<planner::Planner>> p = planner::Planner::Create(*cfg->planner);
    if (!p.ok()) return Fail(p.status());
    planner = *std::move(p);
  }
  std::string dir = ".";
  if (size_t slash = o.config.rfind('/'); slash != std::string::npos) {
    dir = o.config.substr(0, slash);
  }
  absl::StatusOr<std::unique_ptr<WanExchange>> ex =
      GetWanExchangeFactory()({.region_id = cfg->region_id,
                               .region = cfg->region,
                               .spec = &cfg->spec,
                               .weighting = cfg->policy.weighting,
                               .wan_yaml = cfg->wan_yaml,
                               .config_dir = dir});
  if (!ex.ok()) return Fail(ex.status());
  // The gRPC WAN half has counters of its own for the status tables and metrics.
  if (auto* grpc_ex = dynamic_cast<GrpcExchange*>(ex->get())) {
    cfg->server.service.status_extra = [grpc_ex](v1::StatusResponse* resp) {
      FillWanStatus(grpc_ex->Stats(), resp->mutable_wan());
    };
  }
  absl::StatusOr<std::unique_ptr<RoundEngine>> engine =
      RoundEngine::Create({.region_id = cfg->region_id,
                           .spec = cfg->spec,
                           .policy = cfg->policy,
                           .planner = planner.get()},
                          *std::move(ex));
  if (!engine.ok()) return Fail(engine.status());
  absl::StatusOr<std::unique_ptr<RelayServer>> server =
      RelayServer::Start(engine->get(), cfg->server);
  if (!server.ok()) return Fail(server.status());
  std::unique_ptr<MetricsEndpoint> metrics;
  if (!cfg->metrics_listen.empty()) {
    RelayService* svc = &(*server)->service();
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> m =
        MetricsEndpoint::Start(cfg->metrics_listen, [svc] { return svc->StatusTables(); });
    if (!m.ok()) return Fail(m.status());
    metrics = *std::move(m);
  }
  std::printf(
      "heddle-relay: region %s (id %u) serving workers on port %d%s; model: %zu tensors, %zu "
      "slices, spec digest %016llx; policy %s; metrics %s\n",
      cfg->region.c_str(), cfg->region_id, (*server)->port(),
      cfg->server.service.token.empty() ? " (no token)" : "", cfg->spec.tensors.size(),
      Slices(cfg->spec).size(), static_cast<unsigned long long>(SpecDigest(cfg->spec)),
      MissingPolicyName(cfg->policy.missing),
      metrics ? absl::StrFormat("on port %d", metrics->port()).c_str() : "off");
  std::fflush(stdout);
  if (!o.port_file.empty()) {
    const std::string tmp = o.port_file + ".tmp";
    std::ofstream(tmp) << (*server)->port() << "\n";
    std::rename(tmp.c_str(), o.port_file.c_str());
  }
  int sig = 0;
  sigwait(&sigs, &sig);
  std::printf("heddle-relay: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  metrics.reset();
  (*server)->Shutdown();
  server->reset();
  engine->reset();
  return 0;
}

int Worker(const WorkerOptions& o) {
  absl::StatusOr<std::string> token = Token(o.connect);
  if (!token.ok()) return Fail(token.status());
  uint64_t digest = 0;
  if (o.model_elements > 0 || !o.model_file.empty()) {
    absl::StatusOr<ModelSpec> spec =
        o.model_file.empty() ? ModelSpecFromString(absl::StrFormat(
                                   "tensors: [{name: model, elements: %u}]", o.model_elements))
                             : ModelSpecFromFile(o.model_file);
    if (!spec.ok()) return Fail(spec.status());
    digest = SpecDigest(*spec);
  }
  RelayClientOptions co{.address = o.connect.relay,
                        .token = *token,
                        .tls_ca_file = o.connect.tls_ca,
                        .tls_cert_file = o.connect.tls_cert,
                        .tls_key_file = o.connect.tls_key,
                        .tls_server_name = o.connect.tls_server_name,
                        .rpc_timeout = absl::Seconds(o.connect.timeout_s),
                        .pull_timeout = absl::Seconds(o.pull_timeout_s)};
  WorkerInfo me{.name = o.name,
                .region = o.region,
                .tokens_per_s = o.tokens_per_s,
                .max_batch = o.max_batch,
                .seq_len = o.seq_len};
  absl::StatusOr<std::unique_ptr<RelayClient>> c = RelayClient::Connect(co, me, digest);
  if (!c.ok()) return Fail(c.status());
  RelayClient& client = **c;
  const ModelSpec& spec = client.spec();
  std::printf("worker %s: sender %u in region %u, first round %llu, %zu tensors (%llu values)\n",
              o.name.c_str(), client.sender_id(), client.region_id(),
              static_cast<unsigned long long>(client.next_round()), spec.tensors.size(),
              static_cast<unsigned long long>(TotalElements(spec)));
  std::fflush(stdout);
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<std::vector<float>> outputs;
  for (const TensorSpec& t : spec.tensors) {
    inputs.emplace_back(t.elements * DTypeBytes(t.dtype));
    outputs.emplace_back(t.elements);
  }
  Rng rng{0x9E3779B97F4A7C15ull ^ (uint64_t{o.seed} << 17) ^ std::hash<std::string>()(o.name)};
  int failures = 0;
  // --rounds counts round ids from the first one: a worker that catches up (below) skips
  // computing for rounds that closed without it, and every worker stops after the same round.
  const uint64_t last = client.next_round() + o.rounds - 1;
  std::vector<float*> out;
  for (auto& v : outputs) out.push_back(v.data());
  auto print_round = [&](uint64_t r, const PullResult& pull, const std::string& push_note,
                         double pull_s) {
    // A checksum of the fp32 aggregate itself: every worker of every region prints the same.
    uint32_t sum = 0;
    for (const auto& v : outputs) {
      sum = Crc32c(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                            v.size() * sizeof(float)),
                   sum);
    }
    std::printf(
        "round %llu: %s digest %016llx sum %08x regions %u tokens %llu; %s; pull %s after %.2f "
        "s%s%s\n",
        static_cast<unsigned long long>(r),
        !pull.applied ? "aborted" : (pull.included ? "included" : "excluded"),
        static_cast<unsigned long long>(pull.digest), sum, pull.regions,
        static_cast<unsigned long long>(pull.tokens), push_note.c_str(), Bytes(pull.bytes).c_str(),
        pull_s, pull.reason.empty() ? "" : "; ", pull.reason.c_str());
    std::fflush(stdout);
  };
  for (uint64_t i = 0; i < o.rounds && client.next_round() <= last; ++i) {
    const uint64_t r = client.next_round();
    const WorkerPlan plan = client.plan();
    // The plan's tokens at the announced rate, times --time-scale: the worker really runs
    // time_scale times slower than its profile whatever the planner estimates. (Sleeping for the
    // plan's predicted_compute_s instead would follow the estimate, and the estimator, fed its own
    // prediction back, would never settle.)
    const double compute =
        plan.valid ? static_cast<double>(plan.tokens) / o.tokens_per_s * o.time_scale : o.compute_s;
    const absl::Time start = absl::Now();
    absl::SleepFor(absl::Seconds(compute));
    std::vector<TensorInput> in;
    for (size_t t = 0; t < spec.tensors.size(); ++t) {
      const DType d = spec.tensors[t].dtype;
      if (d == DType::kFloat32) {
        auto* p = reinterpret_cast<float*>(inputs[t].data());
        for (uint64_t j = 0; j < spec.tensors[t].elements; ++j) p[j] = rng.Uniform();
      } else {
        // bf16/fp16 bit patterns of small values: exponent near 2^-1..2^-8.
        auto* p = reinterpret_cast<uint16_t*>(inputs[t].data());
        const uint16_t base = d == DType::kBFloat16 ? 0x3c00 : 0x2000;
        for (uint64_t j = 0; j < spec.tensors[t].elements; ++j) {
          const uint64_t x = rng.Next();
          p[j] = static_cast<uint16_t>(base + (x & 0x3ff) + ((x >> 20) & 1 ? 0x8000 : 0));
        }
      }
      in.push_back({inputs[t].data(), d});
    }
    const double compute_s = absl::ToDoubleSeconds(absl::Now() - start);
    const uint64_t tokens =
        plan.valid ? static_cast<uint64_t>(plan.tokens)
                   : std::max<uint64_t>(1, static_cast<uint64_t>(o.tokens_per_s * compute));
    const uint32_t steps = plan.valid ? static_cast<uint32_t>(plan.inner_steps) : 1;
    absl::StatusOr<PushStats> push = client.PushRound(r, in, tokens, steps);
    std::string push_note;
    if (push.ok()) {
      push_note = absl::StrFormat(
          "push %s (%.1fx)", Bytes(push->frame_bytes),
          static_cast<double>(push->source_bytes) / static_cast<double>(push->frame_bytes));
    } else {
      push_note = absl::StrFormat("push refused (%s)", push.status().message());
    }
    const absl::Time pull_start = absl::Now();
    absl::StatusOr<PullResult> pull = client.PullRound(r, out);
    if (!pull.ok()) {
      std::printf("round %llu: pull failed: %s\n", static_cast<unsigned long long>(r),
                  std::string(pull.status().message()).c_str());
      std::fflush(stdout);
      ++failures;
      if (pull.status().code() == absl::StatusCode::kDataLoss) continue;
      break;
    }
    print_round(r, *pull, push_note, absl::ToDoubleSeconds(absl::Now() - pull_start));
    // Behind the region (it was cut off from the other gateways, or this worker was slow): the
    // relay already collects a later round. Apply the rounds in between — every worker must hold
    // the same model — and compute for the round being collected.
    uint64_t collecting = pull->collecting_round;
    while (collecting > client.next_round() && client.next_round() <= last) {
      const uint64_t m = client.next_round();
      const absl::Time t = absl::Now();
      absl::StatusOr<PullResult> cu = client.PullRound(m, out);
      if (!cu.ok()) {
        std::printf("round %llu: pull failed: %s\n", static_cast<unsigned long long>(m),
                    std::string(cu.status().message()).c_str());
        std::fflush(stdout);
        ++failures;
        break;
      }
      print_round(m, *cu, "caught up (no push)", absl::ToDoubleSeconds(absl::Now() - t));
      collecting = std::max(collecting, cu->collecting_round);
    }
    if (plan.valid) {
      absl::Status rep = client.Report(r, plan.batch_size, plan.inner_steps, compute_s);
      if (!rep.ok()) {
        std::fprintf(stderr, "heddle-relay worker: report: %s\n",
                     std::string(rep.message()).c_str());
      }
    }
  }
  absl::Status left = client.Leave();
  if (!left.ok())
    std::fprintf(stderr, "heddle-relay worker: %s\n", std::string(left.message()).c_str());
  return failures == 0 ? 0 : 1;
}

void FillWanStatus(const WanStats& st, v1::WanStatus* w) {
  w->set_coordinator(st.coordinator);
  w->set_published_through(st.published_through);
  w->set_rounds_published(st.rounds_published);
  w->set_rounds_aborted(st.rounds_aborted);
  w->set_rounds_without_this_region(st.rounds_without_this_region);
  w->set_auth_failures(st.auth_failures);
  w->set_handshake_failures(st.handshake_failures);
  w->set_malformed_messages(st.malformed_messages);
  w->set_digest_mismatches(st.digest_mismatches);
  w->set_frames_fetched(st.frames_fetched);
  w->set_schedule_name(st.schedule_name);
  w->set_schedule_digest(st.schedule_digest);
  w->set_schedule_pieces(st.schedule_pieces);
  w->set_schedule_predicted_s(st.schedule_predicted_s);
  w->set_schedule_switches(st.schedule_switches);
  w->set_coordinator_region(st.coordinator_region);
  w->set_slot_bytes(st.slot_bytes);
  w->set_rounds_prepared(st.rounds_prepared);
  w->set_rounds_lost(st.rounds_lost);
  w->set_duplicate_frames(st.duplicate_frames);
  w->set_out_of_window_messages(st.out_of_window_messages);
  w->set_coordinator_restarts(st.coordinator_restarts);
  w->set_decisions_replayed(st.decisions_replayed);
  w->set_last_publish_s(st.last_publish_seconds);
  w->set_mean_publish_s(st.publish_count ? st.publish_seconds_sum / double(st.publish_count) : 0);
  for (const WanPeerStats& p : st.peers) {
    v1::WanPeerRow* r = w->add_peers();
    r->set_region_id(p.region_id);
    r->set_address(p.address);
    r->set_connected(p.connected);
    r->set_bytes_sent(p.bytes_sent);
    r->set_bytes_received(p.bytes_received);
    r->set_frames_sent(p.frames_sent);
    r->set_frames_received(p.frames_received);
    r->set_reconnects(p.reconnects);
    r->set_queued_items(p.queued_items);
    r->set_frames_forwarded(p.frames_forwarded);
    r->set_send_bytes_per_second(p.send_bytes_per_second);
  }
}

std::string RenderStatus(const v1::StatusResponse& s) {
  std::string out = RenderKeyValues({
      {"region", absl::StrFormat("%s (id %u)", s.region(), s.region_id())},
      {"round", absl::StrFormat("collecting %u, last resolved %u", s.collecting_round(),
                                s.last_resolved_round())},
      {"rounds",
       absl::StrFormat("%u published, %u aborted", s.rounds_published(), s.rounds_aborted())},
      {"model",
       absl::StrFormat("%d tensors, chunk %u, slice %u, digest %016x", s.spec().tensors_size(),
                       s.spec().chunk_size(), s.spec().slice_elements(), s.spec().digest())},
      {"policy", absl::StrFormat("%s, min_token_fraction %.2f, push_timeout %.0f s", s.policy(),
                                 s.min_token_fraction(), s.push_timeout_s())},
      {"lan bytes",
       absl::StrFormat("in %s, out %s", Bytes(s.bytes_in_total()), Bytes(s.bytes_out_total()))},
      {"auth failures", absl::StrFormat("%u", s.auth_failures())},
      {"planner", s.planner_mode().empty()
                      ? std::string("off")
                      : absl::StrFormat("%s, plan version %u", s.planner_mode(), s.plan_version())},
  });
  out += "\n";
  Table m({{"WORKER"},
           {"SENDER", Table::kRight},
           {"STATE"},
           {"IDLE-S", Table::kRight},
           {"LAST-ROUND", Table::kRight},
           {"TOKENS", Table::kRight},
           {"IN", Table::kRight},
           {"OUT", Table::kRight},
           {"BATCH", Table::kRight},
           {"STEPS", Table::kRight}});
  for (const v1::MemberRow& r : s.members()) {
    m.AddRow({r.name(), absl::StrCat(r.sender_id()), r.member() ? "member" : r.left_reason(),
              absl::StrFormat("%.1f", r.idle_s()), absl::StrCat(r.last_pushed_round()),
              absl::StrCat(r.last_tokens()), absl::StrCat(r.rounds_included()),
              absl::StrCat(r.rounds_excluded()),
              r.plan().valid() ? absl::StrCat(r.plan().batch_size()) : "-",
              r.plan().valid() ? absl::StrCat(r.plan().inner_steps()) : "-"});
  }
  out += m.empty() ? "no workers\n" : m.Render();
  out += "\n";
  Table t({{"ROUND", Table::kRight},
           {"STATE"},
           {"CLOSE"},
           {"WORKERS", Table::kRight},
           {"TOKENS", Table::kRight},
           {"WAIT-S", Table::kRight},
           {"AGG-S", Table::kRight},
           {"WAN-S", Table::kRight},
           {"IN", Table::kRight},
           {"OUT", Table::kRight},
           {"RATIO", Table::kRight},
           {"DIGEST"},
           {"NOTE"}});
  for (const v1::RoundRow& r : s.rounds()) {
    t.AddRow({absl::StrCat(r.round_id()), r.state(), r.close_reason(),
              absl::StrFormat("%u/%u/%u", r.included(), r.pushed(), r.expected()),
              absl::StrCat(r.tokens()), absl::StrFormat("%.2f", r.wait_s()),
              absl::StrFormat("%.3f", r.aggregate_s()), absl::StrFormat("%.3f", r.wan_s()),
              Bytes(r.bytes_in()), Bytes(r.bytes_out()),
              r.compression_ratio() > 0 ? absl::StrFormat("%.1f", r.compression_ratio()) : "-",
              r.digest() ? absl::StrFormat("%016x", r.digest()) : "-", r.region_exclusion()});
  }
  out += t.Render();
  if (s.idle_size() > 0) {
    out += "\n";
    Table idle({{"ROUND", Table::kRight},
                {"COMPUTE-END-S", Table::kRight},
                {"STRAGGLER-IDLE-S", Table::kRight},
                {"IDLE-FRACTION", Table::kRight}});
    for (const v1::IdleRow& r : s.idle()) {
      idle.AddRow({absl::StrCat(r.round()), absl::StrFormat("%.2f", r.compute_end_s()),
                   absl::StrFormat("%.2f", r.idle_s()),
                   absl::StrFormat("%.1f %%", 100.0 * r.idle_fraction())});
    }
    out += idle.Render();
  }
  if (s.has_wan()) {
    const v1::WanStatus& w = s.wan();
    out += "\n";
    out += RenderKeyValues({
        {"wan",
         absl::StrFormat("%s, published through round %u",
                         w.coordinator() ? "coordinator" : "follower", w.published_through())},
        // Published and aborted are exclusive (their sum is the rounds resolved here); the
        // counts in parentheses are parts of them, and the replayed decisions are not rounds
        // resolved by this process.
        {"wan rounds",
         absl::StrFormat("%u published (%u without this region, %u prepared ahead), %u aborted "
                         "(%u lost); %u decisions replayed from the decision log",
                         w.rounds_published(), w.rounds_without_this_region(), w.rounds_prepared(),
                         w.rounds_aborted(), w.rounds_lost(), w.decisions_replayed())},
        {"wan schedule",
         absl::StrFormat("%s (digest %016x, %u pieces, predicted %.3f s per exchange; %u "
                         "switches from measured speeds)",
                         w.schedule_name(), w.schedule_digest(), w.schedule_pieces(),
                         w.schedule_predicted_s(), w.schedule_switches())},
        {"wan time", absl::StrFormat("last %.3f s, mean %.3f s (this region's aggregate -> "
                                     "publication)",
                                     w.last_publish_s(), w.mean_publish_s())},
        {"wan refusals",
         absl::StrFormat("auth %u, handshake %u, malformed %u, digest mismatches %u, out of "
                         "window %u, restarted coordinator %u",
                         w.auth_failures(), w.handshake_failures(), w.malformed_messages(),
                         w.digest_mismatches(), w.out_of_window_messages(),
                         w.coordinator_restarts())},
        {"wan duplicates", absl::StrFormat("%u frames received again, acknowledged without "
                                           "being applied again",
                                           w.duplicate_frames())},
    });
    Table p({{"PEER", Table::kRight},
             {"ADDRESS"},
             {"STATE"},
             {"SENT", Table::kRight},
             {"RECEIVED", Table::kRight},
             {"FRAMES-OUT", Table::kRight},
             {"FRAMES-IN", Table::kRight},
             {"FORWARDED", Table::kRight},
             {"RECONNECTS", Table::kRight},
             {"QUEUED", Table::kRight},
             {"SEND-RATE", Table::kRight}});
    for (const v1::WanPeerRow& r : w.peers()) {
      p.AddRow({absl::StrCat(r.region_id()), r.address(), r.connected() ? "up" : "down",
                Bytes(r.bytes_sent()), Bytes(r.bytes_received()), absl::StrCat(r.frames_sent()),
                absl::StrCat(r.frames_received()), absl::StrCat(r.frames_forwarded()),
                absl::StrCat(r.reconnects()), absl::StrCat(r.queued_items()),
                absl::StrFormat("%.1f Mbit/s", r.send_bytes_per_second() * 8 / 1e6)});
    }
    out += p.Render();
  }
  if (!s.refused().empty()) {
    out += "\nrefused pushes:";
    std::map<std::string, uint64_t> sorted(s.refused().begin(), s.refused().end());
    for (const auto& [k, v] : sorted) out += absl::StrFormat(" %s %u", k, v);
    out += "\n";
  }
  return out;
}

int Status(const ConnectFlags& c, bool json) {
  absl::StatusOr<std::string> token = Token(c);
  if (!token.ok()) return Fail(token.status());
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (!c.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    std::ifstream in(c.tls_ca);
    std::stringstream ss;
    ss << in.rdbuf();
    ssl.pem_root_certs = ss.str();
    if (!c.tls_cert.empty()) {
      std::ifstream ci(c.tls_cert), ki(c.tls_key);
      std::stringstream cs, ks;
      cs << ci.rdbuf();
      ks << ki.rdbuf();
      ssl.pem_cert_chain = cs.str();
      ssl.pem_private_key = ks.str();
    }
    creds = grpc::SslCredentials(ssl);
    if (!c.tls_server_name.empty()) args.SetSslTargetNameOverride(c.tls_server_name);
  }
  auto stub = v1::Relay::NewStub(grpc::CreateCustomChannel(c.relay, creds, args));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(c.timeout_s)));
  if (!token->empty()) ctx.AddMetadata("authorization", "Bearer " + *token);
  v1::StatusResponse resp;
  grpc::Status st = stub->Status(&ctx, v1::StatusRequest(), &resp);
  if (!st.ok()) {
    std::fprintf(stderr, "heddle-relay: relay %s Status: %s%s\n", c.relay.c_str(),
                 st.error_message().c_str(),
                 st.error_code() == grpc::StatusCode::UNAVAILABLE
                     ? " (is heddle-relay serve running there? --relay to choose)"
                     : "");
    return 1;
  }
  if (json) {
    std::string out;
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = true;
    opts.always_print_primitive_fields = true;
    opts.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(resp, &out, opts);
    std::cout << out;
  } else {
    std::cout << RenderStatus(resp);
  }
  return 0;
}

}  // namespace heddle::relay::tool
