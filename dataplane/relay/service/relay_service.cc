#include "dataplane/relay/service/relay_service.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "dataplane/relay/round/slice_digest.h"
#include "dataplane/relay/service/proto_convert.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/server_credentials.h"

namespace heddle::relay {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status Invalid(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrFormat("%s %s: cannot open", what, path));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void ToProto(const RoundStats& r, v1::RoundRow* p) {
  p->set_round_id(r.round_id);
  p->set_state(r.state);
  p->set_close_reason(r.close_reason);
  p->set_expected(r.expected);
  p->set_pushed(r.pushed);
  p->set_included(r.included);
  p->set_tokens(r.tokens);
  p->set_expected_tokens(r.expected_tokens);
  p->set_tau_eff(r.tau_eff);
  p->set_region_included(r.region_included);
  p->set_region_exclusion(r.region_exclusion);
  p->set_wait_s(r.wait_s);
  p->set_aggregate_s(r.aggregate_s);
  p->set_wan_s(r.wan_s);
  p->set_bytes_in(r.bytes_in);
  p->set_bytes_out(r.bytes_out);
  p->set_compression_ratio(r.compression_ratio);
  p->set_opened_at_s(r.opened_at_s);
  p->set_closed_at_s(r.closed_at_s);
  p->set_finished_at_s(r.finished_at_s);
  p->set_resolved_at_s(r.resolved_at_s);
  p->set_global_regions(r.global_regions);
  p->set_digest(r.digest);
}

}  // namespace

RelayService::RelayService(RoundEngine* engine, RelayServiceOptions options)
    : engine_(engine), options_(std::move(options)) {}

grpc::Status RelayService::Authorize(const grpc::ServerContext* ctx) {
  if (options_.token.empty()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    auth_failures_.fetch_add(1, std::memory_order_relaxed);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this relay requires `authorization: Bearer <token>` metadata (the relay "
                        "config's token)");
  }
  const std::string_view got(it->second.data(), it->second.size());
  const std::string want = "Bearer " + options_.token;
  // Compare every byte whatever the first difference (no early exit on a mismatch).
  unsigned diff = got.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(i < got.size() ? got[i] : 0) ^
            static_cast<unsigned char>(want[i]);
  }
  if (diff != 0) {
    auth_failures_.fetch_add(1, std::memory_order_relaxed);
    HEDDLE_LOG(kWarning, "relay: refused a call from %s: wrong bearer token", ctx->peer().c_str());
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "wrong bearer token");
  }
  return grpc::Status::OK;
}

v1::WorkerPlan RelayService::PlanOf(uint32_t sender_id) const {
  absl::StatusOr<std::string> name = engine_->WorkerName(sender_id);
  if (!name.ok()) return {};
  return PlanFor(engine_->CurrentPlan(), *name);
}

grpc::Status RelayService::Join(grpc::ServerContext* ctx, const v1::JoinRequest* req,
                                v1::JoinResponse* resp) {
  if (grpc::Status a = Authorize(ctx); !a.ok()) return a;
  if (!req->region().empty() && !options_.region.empty() && req->region() != options_.region) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrFormat("join: worker \"%s\" expects region \"%s\", this relay serves \"%s\"",
                        req->name(), req->region(), options_.region));
  }
  JoinRequest j{.name = req->name(), .spec_digest = req->spec_digest()};
  const v1::WorkerProfile& p = req->profile();
  if (p.tokens_per_s() > 0) {
    planner::WorkerSpec ws;
    ws.throughput = p.half_batch() > 0
                        ? planner::ThroughputModel::Saturating(p.tokens_per_s(), p.half_batch())
                        : planner::ThroughputModel::Constant(p.tokens_per_s());
    ws.max_batch = p.max_batch();
    ws.memory_bytes = p.memory_bytes();
    ws.fixed_bytes = p.fixed_bytes();
    ws.bytes_per_sample = p.bytes_per_sample();
    ws.seq_len = p.seq_len();
    j.planner_spec = std::move(ws);
  }
  absl::StatusOr<JoinResult> r = engine_->Join(j);
  if (!r.ok()) return ToGrpc(r.status());
  resp->set_sender_id(r->sender_id);
  resp->set_region_id(engine_->region_id());
  resp->set_region(options_.region);
  resp->set_first_round(r->first_round);
  resp->set_rejoined(r->rejoined);
  relay::ToProto(engine_->spec(), resp->mutable_spec());
  *resp->mutable_plan() = PlanFor(engine_->CurrentPlan(), req->name());
  resp->set_max_chunk_bytes(options_.max_chunk_bytes);
  return grpc::Status::OK;
}

grpc::Status RelayService::Push(grpc::ServerContext* ctx, grpc::ServerReader<v1::PushChunk>* reader,
                                v1::PushResponse* resp) {
  if (grpc::Status a = Authorize(ctx); !a.ok()) return a;
  v1::PushChunk m;
  if (!reader->Read(&m)) return Invalid("push: empty stream (no header)");
  const uint32_t sender = m.sender_id();
  const uint64_t round = m.round_id();
  // Fail fast, before the frames stream in: membership, the round, duplicates.
  if (absl::Status s = engine_->CheckPush(sender, round); !s.ok()) return ToGrpc(s);
  // One stream per (sender, round) at a time: each holds up to a whole round of frames, so a
  // retrying or hostile worker must not be able to open many at once.
  {
    absl::MutexLock l(&inflight_mu_);
    if (!inflight_.insert({sender, round}).second) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          absl::StrFormat("push for round %u from sender %u: another push of the "
                                          "same round is still streaming",
                                          round, sender));
    }
  }
  struct InflightGuard {
    RelayService* s;
    std::pair<uint32_t, uint64_t> key;
    ~InflightGuard() {
      absl::MutexLock l(&s->inflight_mu_);
      s->inflight_.erase(key);
    }
  } inflight_guard{this, {sender, round}};

  const std::vector<SliceRef> slices = Slices(engine_->spec());
  std::vector<std::vector<uint8_t>> frames(slices.size());
  uint32_t current = 0;  // the slice being received
  uint64_t total = 0;
  bool have = !m.data().empty() || m.frame_bytes() != 0;  // the header may carry data
  for (;;) {
    if (have) {
      if (m.data().size() > options_.max_chunk_bytes) {
        return Invalid(absl::StrFormat(
            "push of round %u from sender %u: a chunk of %u bytes exceeds the %u-byte limit", round,
            sender, m.data().size(), options_.max_chunk_bytes));
      }
      // Advance to the chunk's slice: slices come in order, each complete before the next.
      if (m.slice() != current) {
        if (m.slice() != current + 1 || current >= slices.size() ||
            frames[current].size() !=
                FrameBytes(slices[current].count, engine_->spec().chunk_size)) {
          return Invalid(absl::StrFormat(
              "push of round %u from sender %u: chunk for slice %u while slice %u is "
              "incomplete (%u bytes); slices must be sent in order, each whole",
              round, sender, m.slice(), current,
              current < frames.size() ? frames[current].size() : 0));
        }
        current = m.slice();
        // A long push keeps its worker alive (round.liveness_timeout counts silence).
        (void)engine_->Touch(sender);
      }
      if (current >= slices.size()) {
        return Invalid(absl::StrFormat("push of round %u: slice %u, the model has %u slices", round,
                                       current, slices.size()));
      }
      const uint64_t want = FrameBytes(slices[current].count, engine_->spec().chunk_size);
      std::vector<uint8_t>& f = frames[current];
      if (f.empty()) {
        if (m.frame_bytes() != want) {
          return Invalid(absl::StrFormat(
              "push of round %u from sender %u, slice %u: frame of %u bytes declared, the "
              "slice's frame is %u bytes",
              round, sender, current, m.frame_bytes(), want));
        }
        f.reserve(want);
      }
      if (f.size() + m.data().size() > want) {
        return Invalid(absl::StrFormat(
            "push of round %u from sender %u, slice %u: more than the frame's %u bytes", round,
            sender, current, want));
      }
      f.insert(f.end(), m.data().begin(), m.data().end());
      total += m.data().size();
    }
    if (!reader->Read(&m)) break;
    have = true;
  }
  if (ctx->IsCancelled()) {
    return grpc::Status(
        grpc::StatusCode::CANCELLED,
        absl::StrFormat("push of round %u from sender %u cancelled; nothing kept", round, sender));
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    if (frames[i].size() != FrameBytes(slices[i].count, engine_->spec().chunk_size)) {
      return Invalid(absl::StrFormat(
          "push of round %u from sender %u ended with slice %u incomplete (%u of %u bytes); "
          "nothing kept",
          round, sender, i, frames[i].size(),
          FrameBytes(slices[i].count, engine_->spec().chunk_size)));
    }
  }
  if (absl::Status s = engine_->Push(sender, round, std::move(frames)); !s.ok()) {
    return ToGrpc(s);
  }
  resp->set_round_id(round);
  resp->set_bytes(total);
  return grpc::Status::OK;
}

grpc::Status RelayService::Pull(grpc::ServerContext* ctx, const v1::PullRequest* req,
                                grpc::ServerWriter<v1::PullMessage>* writer) {
  if (grpc::Status a = Authorize(ctx); !a.ok()) return a;
  const absl::Time deadline =
      std::min(absl::FromChrono(ctx->deadline()), absl::Now() + options_.max_pull_wait);
  absl::StatusOr<WorkerOutcome> o = engine_->Pull(req->sender_id(), req->round_id(), deadline,
                                                  [ctx] { return ctx->IsCancelled(); });
  if (!o.ok()) return ToGrpc(o.status());

  v1::PullMessage msg;
  v1::PullHeader* h = msg.mutable_header();
  h->set_round_id(o->round_id);
  h->set_included(o->included);
  h->set_retained(o->retained);
  h->set_reason(o->included ? "" : o->exclusion);
  h->set_collecting_round(engine_->collecting_round());
  *h->mutable_plan() = PlanOf(req->sender_id());
  const GlobalAggregate* g = o->aggregate.get();
  const bool published = o->kind == RoundOutcome::Kind::kPublished && g != nullptr;
  h->set_outcome(published ? v1::PullHeader::PUBLISHED : v1::PullHeader::ABORTED);
  if (published) {
    h->set_digest(g->digest);
    h->set_slices(g->slices);
    h->set_weighting(WeightingName(g->weighting));
    for (const RegionPart& p : g->parts) {
      v1::RegionPart* q = h->add_parts();
      q->set_region_id(p.region_id);
      q->set_tokens(p.tokens);
      q->set_tau_eff(p.tau_eff);
      q->set_weight(p.weight);
    }
  }
  uint64_t bytes = msg.ByteSizeLong();
  auto gone = [&] {
    engine_->AddBytesOut(o->round_id, bytes);
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        absl::StrFormat("pull of round %u: the worker went away", o->round_id));
  };
  if (!writer->Write(msg)) return gone();
  if (published && !g->parts.empty()) {
    if (g->frames.size() != g->parts.size() * g->slices) {
      return grpc::Status(
          grpc::StatusCode::INTERNAL,
          absl::StrFormat("round %u: the aggregate has %u frames for %u parts × "
                          "%u slices",
                          o->round_id, g->frames.size(), g->parts.size(), g->slices));
    }
    for (uint32_t s = 0; s < g->slices; ++s) {
      SliceDigester d(o->round_id, s);
      for (const RegionPart& p : g->parts) d.AddWeight(p.weight);
      for (uint32_t p = 0; p < g->parts.size(); ++p) {
        const std::vector<uint8_t>& f = *g->frames[p * g->slices + s];
        d.AddFrame(f);
        for (size_t off = 0; off < f.size() || off == 0; off += options_.max_chunk_bytes) {
          const size_t n = std::min<size_t>(options_.max_chunk_bytes, f.size() - off);
          v1::PullMessage c;
          v1::SliceChunk* ch = c.mutable_chunk();
          ch->set_slice(s);
          ch->set_part(p);
          if (off == 0) ch->set_frame_bytes(f.size());
          ch->set_data(f.data() + off, n);
          const bool last = p + 1 == g->parts.size() && off + n == f.size();
          if (last) {
            ch->set_last(true);
            ch->set_slice_digest(d.Digest());
          }
          bytes += c.ByteSizeLong();
          if (!writer->Write(c)) return gone();
          if (f.empty()) break;
        }
      }
    }
  }
  engine_->AddBytesOut(o->round_id, bytes);
  return grpc::Status::OK;
}

grpc::Status RelayService::Report(grpc::ServerContext* ctx, const v1::ReportRequest* req,
                                  v1::ReportResponse* resp) {
  if (grpc::Status a = Authorize(ctx); !a.ok()) return a;
  if (!(req->compute_s() > 0) || req->batch_size() <= 0 || req->inner_steps() <= 0) {
    return Invalid(absl::StrFormat(
        "report of round %u: batch_size %d, inner_steps %d and compute_s %g must be positive",
        req->round_id(), req->batch_size(), req->inner_steps(), req->compute_s()));
  }
  absl::Status s = engine_->Report(req->sender_id(), {.round = req->round_id(),
                                                      .batch_size = req->batch_size(),
                                                      .inner_steps = req->inner_steps(),
                                                      .compute_s = req->compute_s()});
  if (!s.ok()) return ToGrpc(s);
  *resp->mutable_plan() = PlanOf(req->sender_id());
  return grpc::Status::OK;
}

grpc::Status RelayService::Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* req,
                                 v1::LeaveResponse*) {
  if (grpc::Status a = Authorize(ctx); !a.ok()) return a;
  return ToGrpc(engine_->Leave(req->sender_id()));
}

v1::StatusResponse RelayService::StatusTables() const {
  v1::StatusResponse resp;
  EngineStatus st = engine_->Status();
  resp.set_region_id(st.region_id);
  resp.set_region(options_.region);
  resp.set_collecting_round(st.collecting_round);
  resp.set_last_resolved_round(st.last_resolved_round);
  resp.set_rounds_published(st.rounds_published);
  resp.set_rounds_aborted(st.rounds_aborted);
  absl::StatusOr<planner::Plan> plan = engine_->CurrentPlan();
  if (plan.ok()) resp.set_plan_version(plan->version);
  for (const MemberStatus& m : st.members) {
    v1::MemberRow* row = resp.add_members();
    row->set_name(m.name);
    row->set_sender_id(m.sender_id);
    row->set_member(m.member);
    row->set_left_reason(m.left_reason);
    row->set_idle_s(m.idle_s);
    row->set_last_pushed_round(m.last_pushed_round);
    row->set_last_tokens(m.last_tokens);
    row->set_rounds_included(m.rounds_included);
    row->set_rounds_excluded(m.rounds_excluded);
    if (m.member) *row->mutable_plan() = PlanFor(plan, m.name);
  }
  for (const RoundStats& r : st.rounds) ToProto(r, resp.add_rounds());
  for (const auto& [k, v] : st.refused) (*resp.mutable_refused())[k] = v;
  resp.set_bytes_in_total(st.bytes_in_total);
  resp.set_bytes_out_total(st.bytes_out_total);
  resp.set_auth_failures(auth_failures());
  relay::ToProto(engine_->spec(), resp.mutable_spec());
  resp.set_policy(MissingPolicyName(engine_->policy().missing));
  resp.set_min_token_fraction(engine_->policy().min_token_fraction);
  resp.set_push_timeout_s(absl::ToDoubleSeconds(engine_->policy().push_timeout));
  if (const planner::Planner* p = engine_->planner(); p != nullptr) {
    resp.set_planner_mode(std::string(planner::PlanModeName(p->mode())));
    std::vector<planner::RoundIdle> idle = p->RecentRounds();
    for (size_t i = idle.size() > 16 ? idle.size() - 16 : 0; i < idle.size(); ++i) {
      v1::IdleRow* row = resp.add_idle();
      row->set_round(idle[i].round);
      row->set_compute_end_s(idle[i].compute_end_s);
      row->set_idle_s(idle[i].idle_s);
      row->set_idle_fraction(idle[i].idle_fraction);
    }
  }
  if (options_.status_extra) options_.status_extra(&resp);
  return resp;
}

grpc::Status RelayService::Status(grpc::ServerContext* ctx, const v1::StatusRequest*,
                                  v1::StatusResponse* resp) {
  if (grpc::Status a = Authorize(ctx); !a.ok()) return a;
  *resp = StatusTables();
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<RelayServer>> RelayServer::Start(RoundEngine* engine,
                                                                RelayServerOptions options) {
  if (options.service.max_chunk_bytes < 4096 || options.service.max_chunk_bytes > (64u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("relay: max_chunk_bytes %u must be within 4 KiB..64 MiB",
                        options.service.max_chunk_bytes));
  }
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("relay TLS: tls.cert and tls.key must be given together");
    }
    HEDDLE_ASSIGN_OR_RETURN(std::string cert, ReadFile(options.tls_cert_file, "tls.cert"));
    HEDDLE_ASSIGN_OR_RETURN(std::string key, ReadFile(options.tls_key_file, "tls.key"));
    grpc::SslServerCredentialsOptions ssl(
        options.tls_client_ca_file.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!options.tls_client_ca_file.empty()) {
      HEDDLE_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                              ReadFile(options.tls_client_ca_file, "tls.client_ca"));
    }
    ssl.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(ssl);
  } else if (!options.tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "relay TLS: tls.client_ca needs tls.cert and tls.key (mutual TLS is TLS first)");
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  std::unique_ptr<RelayServer> s(new RelayServer());
  s->engine_ = engine;
  s->service_ = std::make_unique<RelayService>(engine, options.service);
  grpc::ServerBuilder b;
  b.AddListeningPort(options.listen, creds, &s->port_);
  b.SetMaxReceiveMessageSize(static_cast<int>(options.service.max_chunk_bytes + (64u << 10)));
  b.SetMaxSendMessageSize(static_cast<int>(options.service.max_chunk_bytes + (64u << 10)));
  // A worker host that vanishes without closing its connections (power, partition) is found by
  // keepalive pings within ~80 s; its waiting calls are then cancelled. Workers ping too (a pull
  // may wait an hour), so allow their pings without data.
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60'000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 20'000);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  b.RegisterService(s->service_.get());
  s->server_ = b.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "relay: cannot listen on %s (address in use, or not a host:port?)", options.listen));
  }
  const absl::Duration tick = options.tick;
  s->ticker_ = std::thread([srv = s.get(), tick] {
    while (!srv->stop_.WaitForNotificationWithTimeout(tick)) srv->engine_->Tick();
  });
  return s;
}

void RelayServer::Shutdown() {
  if (server_ == nullptr) return;
  if (!stop_.HasBeenNotified()) stop_.Notify();
  // In-flight calls get a second, then are cancelled; a waiting Pull notices within 100 ms.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  if (ticker_.joinable()) ticker_.join();
  server_.reset();
}

RelayServer::~RelayServer() { Shutdown(); }

}  // namespace heddle::relay
