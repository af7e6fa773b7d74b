// The gRPC WAN exchange. How the pieces fit (docs/relay-wan.md has the protocol):
//
// State. One mutex `mu_` guards the round state: `rounds_` (rounds not yet published here:
// per region the provisional frames received or produced, and the region's summary),
// `kept_` (the last keep_rounds published rounds: decision and final aggregate) and
// `published_through_`. The region encoder has its own mutex; the order is mu_ → encoder, and
// SubmitSlice() never holds the encoder's while taking mu_. Each peer link has its own mutex
// for its address, handshake state and send queues.
//
// Threads. gRPC's server threads run the handlers (they take mu_ briefly; WaitDecision and
// FetchFrames wait on published_cv_). Per peer, streams_per_peer sender threads each keep one
// StreamFrames call open and write their stripe's queue into it (a reader thread per call retires
// acknowledged frames), and one more sends this region's summaries; each (re)handshakes the link
// when it is down, with exponential backoff. The link's mutex may be taken before mu_, never after.
// The coordinator runs a decider thread; every other gateway a follower thread that long-polls the
// coordinator; every gateway two preparer threads (PrepareLoop) that copy this region's frames
// (a received frame is copied by the thread that received it; a region's summary writes its
// totals into the copies, StageSlot/FinalizeLocked), check each ready region against its
// summary, and on a follower build the aggregate the decision is expected to describe. The
// coordinator's decision goes out (announced_, answered by WaitDecision) before its own final
// frames are complete: its digest follows from the provisional frames' trailers
// (internal/frame_crc.h).
// Outcomes go through an OutcomeQueue, pushed under mu_ in publication order, so the region
// side sees each round once and in order.
//
// Schedule. Frames move as the compiled schedule says (schedule_plan.h): a frame this gateway
// produces or receives is queued, at once, to the peers plan_ names for its region and slice —
// its own frames in SubmitSlice(), other regions' in the push handlers after they are stored
// (a duplicate is not forwarded again). The direct schedule gives the full mesh. Whatever a
// schedule or a dead forwarder fails to deliver, the follower fetches from the coordinator.
//
// Invariants. A round is published here only (a) by the coordinator's decider, which is the
// decision (published here once its final frames match the decision's digest), or (b) by the
// follower after it holds the coordinator's decision and frames whose GlobalDigest equals the
// decision's. Publishing r erases every round ≤ r from rounds_ and makes the handlers refuse frames
// and summaries for them, so no stale state survives.
#include "dataplane/relay/wan/grpc_exchange.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "control/collective/compiler.h"
#include "control/collective/schedule_io.h"
#include "control/collective/topology_io.h"
#include "dataplane/relay/codec/frame.h"
#include "dataplane/relay/wan/decision_log.h"
#include "dataplane/relay/wan/internal/chunk_wire.h"
#include "dataplane/relay/wan/internal/frame_crc.h"
#include "dataplane/relay/wan/internal/outcome_queue.h"
#include "dataplane/relay/wan/internal/region_encoder.h"
#include "dataplane/relay/wan/peer.grpc.pb.h"
#include "dataplane/relay/wan/schedule_plan.h"
#include "dataplane/relay/wan/schedule_source.h"

namespace heddle::relay {
namespace {

namespace pb = ::heddle::relay::peer::v1;

// The HTTP/2 stream window a WAN gateway offers its peers (see the server set-up).
constexpr int kWanWindowBytes = 64 << 20;
using wan_internal::FramePtr;

// A gateway holds frames for the next kRoundWindow rounds after the last one it published
// (a peer may be one round ahead while this gateway still fetches its previous round).
constexpr uint64_t kRoundWindow = 2;
// Largest chunk a peer may send; the server's message limit is a little above it.
constexpr uint64_t kMaxChunkBytes = uint64_t{16} << 20;
constexpr absl::Duration kMaxPoll = absl::Seconds(60);
// The full name of the StreamFrames method, which the stripes' writers open with a ByteBuffer
// request type instead of the generated stub (grpc::internal::RpcMethod keeps the pointer).
constexpr char kStreamFramesMethod[] = "/heddle.relay.peer.v1.Peer/StreamFrames";
static_assert(std::string_view(pb::Peer::service_full_name()) == "heddle.relay.peer.v1.Peer");

std::string Hex64(uint64_t v) { return absl::StrFormat("%016x", v); }

std::chrono::system_clock::time_point Deadline(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrFormat("%s: cannot read %s", key, path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A refusal of a frame for a reason of its round, not of the frame or the stream: the round is
// over or being decided at the callee, too far ahead, or it holds a different copy. A frame
// stream answers these with FrameAck{refused} and stays open.
bool RoundLevel(grpc::StatusCode c) {
  return c == grpc::StatusCode::FAILED_PRECONDITION || c == grpc::StatusCode::OUT_OF_RANGE ||
         c == grpc::StatusCode::ALREADY_EXISTS;
}

bool Transient(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::NOT_FOUND:
      return false;
    default:  // UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, auth (a peer being reconfigured), ...
      return true;
  }
}

pb::Decision ToProto(uint64_t r, const GlobalAggregate* g, const absl::Status& abort_reason) {
  pb::Decision d;
  d.set_round_id(r);
  if (g == nullptr) {
    d.set_aborted(true);
    d.set_reason(std::string(abort_reason.message()));
    return d;
  }
  d.set_weighting(static_cast<uint32_t>(g->weighting));
  for (const RegionPart& p : g->parts) {
    pb::Part* q = d.add_parts();
    q->set_region_id(p.region_id);
    q->set_tokens(p.tokens);
    q->set_tau_eff(p.tau_eff);
    q->set_weight(p.weight);
  }
  d.set_digest(g->digest);
  return d;
}

class Exchange;

// One peer: its channel, handshake state, send queues and counters.
struct Link {
  struct Item {
    uint64_t round_id = 0;
    uint32_t region = 0;  // whose frame: this gateway's, or one it forwards
    uint32_t slice = 0;
    FramePtr frame;                          // a frame, or
    std::optional<pb::RegionFinish> finish;  // a summary for the coordinator
  };

  uint32_t region_id = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  // One channel — one TCP connection, one HTTP/2 flow-control window — per stripe for the
  // frames: a single connection's window over a long fat link caps it at window / RTT, and
  // separate connections also grow their congestion windows independently.
  std::vector<std::shared_ptr<grpc::Channel>> stripe_channels;
  uint64_t generation = 0;  // bumped when the address changes
  bool ready = false;
  bool hello_in_progress = false;
  absl::Time next_attempt = absl::InfinitePast();
  absl::Duration backoff;
  std::string last_error;
  pb::HelloReply hello;  // the last successful handshake's reply
  std::vector<std::deque<Item>> queues;
  // Per frame stripe: frames written on its stream and not yet acknowledged, in order.
  std::vector<std::deque<Item>> in_flight;
  std::vector<std::thread> threads;

  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0}, frames_sent{0}, frames_received{0},
      frames_forwarded{0}, reconnects{0}, last_summary_round{0};

  // Send throughput: the time at least one frame stripe had frames in flight (guarded by mu)
  // and the frame bytes acknowledged.
  uint32_t pushes_open = 0;
  absl::Time push_busy_since;
  absl::Duration push_busy;
  uint64_t push_bytes = 0;
};

class Exchange final : public GrpcExchange, public pb::Peer::Service {
 public:
  Exchange(const ModelSpec& spec, const WanOptions& o)
      : spec_(spec),
        opt_(o),
        spec_digest_(SpecDigest(spec)),
        slices_(Slices(spec)),
        nslices_(static_cast<uint32_t>(slices_.size())),
        encoder_(spec, o.region_id, o.gateway_error_feedback) {
    regions_.push_back(o.region_id);
    for (const WanPeer& p : o.peers) {
      regions_.push_back(p.region_id);
      peer_auth_[p.region_id] = p;
    }
    std::sort(regions_.begin(), regions_.end());
    coordinator_ = o.coordinator != 0 ? o.coordinator : regions_.front();
    is_coordinator_ = coordinator_ == o.region_id;
    // StreamFrames reads its chunks as received bytes (StreamFramesWire). The generated
    // service registered its methods in the order of peer.proto, which the descriptor gives.
    const int stream_frames = pb::FrameChunk::descriptor()
                                  ->file()
                                  ->FindServiceByName("Peer")
                                  ->FindMethodByName("StreamFrames")
                                  ->index();
    MarkMethodStreamed(
        stream_frames,
        new grpc::internal::BidiStreamingHandler<Exchange, grpc::ByteBuffer, pb::FrameAck>(
            [](Exchange* self, grpc::ServerContext* ctx,
               grpc::ServerReaderWriter<pb::FrameAck, grpc::ByteBuffer>* stream) {
              return self->StreamFramesWire(ctx, stream);
            },
            this));
  }

  ~Exchange() override { Stop(); }

  absl::Status Start() {
    for (const SliceRef& s : slices_) slot_bytes_ += FrameBytes(s.count, spec_.chunk_size);
    HEDDLE_ASSIGN_OR_RETURN(schedule_, ResolveWanSchedule(opt_.schedule, regions_, slot_bytes_));
    if (opt_.coordinator_auto) {
      HEDDLE_ASSIGN_OR_RETURN(collective::Topology t, ResolveWanTopology(opt_.schedule, regions_));
      coordinator_ = ChooseCoordinator(t, regions_, slot_bytes_);
      is_coordinator_ = coordinator_ == opt_.region_id;
    }
    schedule_digest_ = WanScheduleDigest(schedule_);
    HEDDLE_RETURN_IF_ERROR(InstallPlan(0, schedule_));
    if (is_coordinator_ && !opt_.state_dir.empty()) HEDDLE_RETURN_IF_ERROR(ReplayDecisionLog());
    std::shared_ptr<grpc::ServerCredentials> server_creds = grpc::InsecureServerCredentials();
    client_creds_ = grpc::InsecureChannelCredentials();
    if (!opt_.tls.cert_file.empty()) {
      HEDDLE_ASSIGN_OR_RETURN(std::string cert, ReadFile(opt_.tls.cert_file, "wan.tls.cert"));
      HEDDLE_ASSIGN_OR_RETURN(std::string key, ReadFile(opt_.tls.key_file, "wan.tls.key"));
      HEDDLE_ASSIGN_OR_RETURN(std::string ca, ReadFile(opt_.tls.ca_file, "wan.tls.ca"));
      grpc::SslServerCredentialsOptions so(
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      so.pem_root_certs = ca;
      so.pem_key_cert_pairs.push_back({key, cert});
      server_creds = grpc::SslServerCredentials(so);
      grpc::SslCredentialsOptions co;
      co.pem_root_certs = ca;
      co.pem_private_key = key;
      co.pem_cert_chain = cert;
      client_creds_ = grpc::SslCredentials(co);
    }
    // The links exist before the server starts: handlers look callers up in links_, which is
    // fixed from here on.
    for (const WanPeer& p : opt_.peers) {
      auto l = std::make_unique<Link>();
      l->region_id = p.region_id;
      l->backoff = opt_.backoff_min;
      // The frame stripes, then one for summaries: a summary must not wait behind a stripe's
      // frames and their acknowledgement (a round trip) on its way to the coordinator.
      l->queues.resize(opt_.streams_per_peer + 1);
      l->in_flight.resize(opt_.streams_per_peer);
      SetAddressLocked(*l, p.address);
      links_[p.region_id] = std::move(l);
    }
    grpc::ServerBuilder b;
    b.AddListeningPort(opt_.listen_address, server_creds, &port_);
    b.RegisterService(this);
    b.SetMaxReceiveMessageSize(static_cast<int>(kMaxChunkBytes + (1 << 20)));
    b.SetMaxSendMessageSize(static_cast<int>(kMaxChunkBytes + (1 << 20)));
    // Peers ping every 30 s during long pushes and polls (to notice a dead link); gRPC's
    // default server policy (one ping per 5 min without data) would answer those pings with
    // GOAWAY "too_many_pings".
    b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // A long fat link needs a receive window of a bandwidth-delay product from the first byte
    // of every push (1 Gbit/s x 140 ms is 17.5 MB); HTTP/2's default 64 KiB start, grown by
    // BDP probing, costs several round trips per push.
    b.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kWanWindowBytes);
    server_ = b.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrFormat(
          "wan.listen: cannot listen on %s (address in use, or not an address of this host)",
          opt_.listen_address));
    }
    for (auto& [id, l] : links_) {
      for (uint32_t k = 0; k < opt_.streams_per_peer; ++k) {
        l->threads.emplace_back([this, link = l.get(), k] { StreamLoop(*link, k); });
      }
      l->threads.emplace_back(
          [this, link = l.get(), k = opt_.streams_per_peer] { SummaryLoop(*link, k); });
    }
    if (is_coordinator_) {
      round_thread_ = std::thread([this] { DecideLoop(); });
    } else {
      round_thread_ = std::thread([this] { FollowLoop(); });
    }
    for (std::thread& t : prepare_threads_) t = std::thread([this] { PrepareLoop(); });
    HEDDLE_LOG(kInfo,
               "wan: region %u listening on port %d, %zu peers, coordinator region %u, schedule "
               "%s (%s, %u pieces, %" PRIu64 " sends here)",
               opt_.region_id, port_, opt_.peers.size(), coordinator_, schedule_.intent.c_str(),
               Hex64(schedule_digest_).c_str(), schedule_.pieces, PlanFor(0).plan->sends());
    return absl::OkStatus();
  }

  // ---- WanExchange ----

  absl::Status SubmitSlice(uint64_t round_id, const SliceRef& s,
                           std::span<const float> region_aggregate) override {
    absl::StatusOr<FramePtr> f = encoder_.Submit(round_id, s, region_aggregate);
    if (!f.ok()) return f.status();
    {
      std::lock_guard<std::mutex> l(mu_);
      if (round_id <= published_through_) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "round %u was published without this region while its slices were coming in",
            round_id));
      }
      RegionRound& rr = rounds_[round_id].regions[opt_.region_id];
      if (rr.frames.empty()) rr.frames.resize(nslices_);
      if (rr.frames[s.index] == nullptr) ++rr.have;
      rr.frames[s.index] = *f;
      rounds_[round_id].last_frame_at = absl::Now();
      cv_.notify_all();
    }
    Forward(round_id, opt_.region_id, s.index, *f, /*from=*/0);
    return absl::OkStatus();
  }

  absl::Status FinishRegion(const RegionSummary& summary) override {
    absl::StatusOr<std::vector<FramePtr>> frames = encoder_.Finish(summary);
    if (!frames.ok()) return frames.status();
    const uint64_t r = summary.round_id;
    pb::RegionFinish fin;
    fin.set_round_id(r);
    fin.set_region_id(opt_.region_id);
    fin.set_tokens(summary.tokens);
    fin.set_tau_eff(summary.tau_eff);
    fin.set_workers(summary.workers);
    fin.set_slices(static_cast<uint32_t>(frames->size()));
    fin.set_frames_digest(wan_internal::FramesDigestOfValidFrames(*frames));
    if (opt_.schedule.measured) {
      for (const auto& [id, link] : links_) {
        auto o = opt_.schedule.rate_override.find(id);
        const double rate = o != opt_.schedule.rate_override.end() ? o->second : SendRate(*link);
        if (rate <= 0) continue;
        pb::PeerRate* pr = fin.add_send_rates();
        pr->set_region_id(id);
        pr->set_bytes_per_second(rate);
      }
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (r <= published_through_) {
        return absl::FailedPreconditionError(
            absl::StrFormat("round %u was published without this region", r));
      }
      RoundState& rs = rounds_[r];
      RegionRound& rr = rs.regions[opt_.region_id];
      rr.finished = true;
      rr.summary = fin;
      FinalizeLocked(rr);
      rs.own_finished = true;
      rs.own_finished_at = absl::Now();
      rs.last_summary_at = rs.own_finished_at;
      cv_.notify_all();
    }
    // To every peer: the coordinator decides with it, the others prepare the aggregate with it
    // while the decision is on its way. The coordinator decides only once it is queued (below):
    // the followers should have it before the decision.
    for (auto& [id, link] : links_) {
      Enqueue(*link, opt_.streams_per_peer, Link::Item{.round_id = r, .finish = fin});
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = rounds_.find(r); it != rounds_.end()) {
        it->second.own_summary_queued = true;
        cv_.notify_all();
      }
    }
    return absl::OkStatus();
  }

  void SetOutcomeCallback(OutcomeCallback cb) override { queue_.SetCallback(std::move(cb)); }

  absl::StatusOr<std::shared_ptr<const GlobalAggregate>> Published(
      uint64_t round_id) const override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = kept_.find(round_id);
    if (it == kept_.end() || it->second.aggregate == nullptr) {
      return absl::NotFoundError(absl::StrFormat(
          "round %u is not among the %u most recently published rounds here (published "
          "through %u)",
          round_id, opt_.keep_rounds, published_through_));
    }
    return it->second.aggregate;
  }

  // ---- GrpcExchange ----

  int port() const override { return port_; }

  WanStats Stats() const override {
    WanStats s;
    {
      std::lock_guard<std::mutex> l(mu_);
      s = stats_;
      s.published_through = published_through_;
      s.out_of_window_messages = stats_out_of_window_;
    }
    s.region_id = opt_.region_id;
    s.coordinator = is_coordinator_;
    s.coordinator_region = coordinator_;
    s.slot_bytes = slot_bytes_;
    const PlanAt in_use = PlanFor(s.published_through + 1);
    s.schedule_name = in_use.schedule->intent;
    s.schedule_digest = in_use.digest;
    s.schedule_pieces = in_use.schedule->pieces;
    s.schedule_predicted_s = in_use.schedule->predicted_s;
    s.schedule_switches = schedule_switches_.load(std::memory_order_relaxed);
    s.auth_failures = auth_failures_.load(std::memory_order_relaxed);
    s.malformed_messages = malformed_.load(std::memory_order_relaxed);
    s.duplicate_frames = duplicates_.load(std::memory_order_relaxed);
    s.handshake_failures = handshake_failures_.load(std::memory_order_relaxed);
    for (const auto& [id, l] : links_) {
      WanPeerStats p;
      p.region_id = id;
      {
        std::lock_guard<std::mutex> g(l->mu);
        p.address = l->address;
        p.connected = l->ready;
        for (const auto& q : l->queues) p.queued_items += q.size();
      }
      p.bytes_sent = l->bytes_sent.load(std::memory_order_relaxed);
      p.bytes_received = l->bytes_received.load(std::memory_order_relaxed);
      p.frames_sent = l->frames_sent.load(std::memory_order_relaxed);
      p.frames_received = l->frames_received.load(std::memory_order_relaxed);
      p.frames_forwarded = l->frames_forwarded.load(std::memory_order_relaxed);
      p.send_bytes_per_second = SendRate(*l);
      p.reconnects = l->reconnects.load(std::memory_order_relaxed);
      p.last_summary_round = l->last_summary_round.load(std::memory_order_relaxed);
      s.peers.push_back(std::move(p));
    }
    return s;
  }

  absl::Status SetPeerAddress(uint32_t region_id, const std::string& address) override {
    auto it = links_.find(region_id);
    if (it == links_.end()) {
      return absl::NotFoundError(absl::StrFormat("region %u is not a configured peer", region_id));
    }
    std::lock_guard<std::mutex> l(it->second->mu);
    SetAddressLocked(*it->second, address);
    it->second->cv.notify_all();
    return absl::OkStatus();
  }

  // ---- pb::Peer::Service ----

  grpc::Status Hello(grpc::ServerContext* ctx, const pb::HelloRequest* req,
                     pb::HelloReply* reply) override {
    uint32_t caller;
    if (grpc::Status st = CheckCaller(ctx, &caller); !st.ok()) return st;
    if (req->protocol_version() != kPeerProtocolVersion || req->region_id() != caller ||
        req->spec_digest() != spec_digest_) {
      handshake_failures_.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrFormat("hello from region %u: protocol %u, spec %s; this "
                          "gateway (region %u) runs protocol %u, spec %s",
                          req->region_id(), req->protocol_version(), Hex64(req->spec_digest()),
                          opt_.region_id, kPeerProtocolVersion, Hex64(spec_digest_)));
    }
    std::vector<uint32_t> theirs(req->regions().begin(), req->regions().end());
    if (theirs != regions_) {
      handshake_failures_.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrFormat("hello from region %u: it is configured with regions [%s], this "
                          "gateway with [%s]; every gateway must list the same regions",
                          caller, absl::StrJoin(theirs, ", "), absl::StrJoin(regions_, ", ")));
    }
    // 0: the default, the lowest region id (the region sets are equal, checked above).
    const uint32_t their_coordinator =
        req->coordinator() != 0 ? req->coordinator() : regions_.front();
    if (their_coordinator != coordinator_) {
      handshake_failures_.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrFormat("hello from region %u: its coordinator is region %u, this gateway's "
                          "region %u; every gateway must name the same coordinator",
                          caller, their_coordinator, coordinator_));
    }
    if (req->schedule_digest() != schedule_digest_) {
      handshake_failures_.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrFormat("hello from region %u: it runs exchange schedule '%s' (digest %s), this "
                          "gateway (region %u) runs '%s' (digest %s); every gateway must run the "
                          "same schedule: give them the same wan.schedule and wan.topology",
                          caller, req->schedule_name(), Hex64(req->schedule_digest()),
                          opt_.region_id, schedule_.intent, Hex64(schedule_digest_)));
    }
    reply->set_protocol_version(kPeerProtocolVersion);
    reply->set_region_id(opt_.region_id);
    reply->set_spec_digest(spec_digest_);
    reply->set_schedule_digest(schedule_digest_);
    for (uint32_t r : regions_) reply->add_regions(r);
    std::lock_guard<std::mutex> l(mu_);
    reply->set_published_through(published_through_);
    reply->set_oldest_kept(OldestServableLocked());
    reply->set_instance(instance_);
    return grpc::Status::OK;
  }

  grpc::Status PushFrames(grpc::ServerContext* ctx, grpc::ServerReader<pb::FrameChunk>* reader,
                          pb::PushReply* reply) override {
    uint32_t caller;
    if (grpc::Status st = CheckCaller(ctx, &caller); !st.ok()) return st;
    Inbound in;
    pb::FrameChunk c;
    while (reader->Read(&c)) {
      std::optional<pb::FrameAck> ack;
      const wan_internal::ChunkFields f{c.round_id(), c.region_id(), c.slice(), c.frame_bytes(),
                                        c.offset()};
      auto append = [&](std::vector<uint8_t>& buf) {
        buf.insert(buf.end(), c.data().begin(), c.data().end());
      };
      if (grpc::Status st = TakeChunk(caller, in, f, c.data().size(), append, &ack, false);
          !st.ok()) {
        return st;
      }
      if (!ack) continue;
      reply->set_frames(reply->frames() + 1);
      if (ack->duplicate()) reply->set_duplicates(reply->duplicates() + 1);
    }
    return EndOfPush(ctx, caller, in);
  }

  // StreamFrames, registered in place of the generated handler (constructor): the chunks are
  // read as received (grpc::ByteBuffer) and parsed by wan_internal::ReceivedChunk, which copies
  // each payload once, into the frame being assembled; the generated parser would first copy
  // it into a FrameChunk. The wire is the same FrameChunk.
  grpc::Status StreamFramesWire(grpc::ServerContext* ctx,
                                grpc::ServerReaderWriter<pb::FrameAck, grpc::ByteBuffer>* stream) {
    uint32_t caller;
    if (grpc::Status st = CheckCaller(ctx, &caller); !st.ok()) return st;
    Inbound in;
    grpc::ByteBuffer message;
    wan_internal::ReceivedChunk c;
    while (stream->Read(&message)) {
      if (absl::Status st = c.Parse(&message); !st.ok()) {
        return RefusePush(caller, grpc::StatusCode::INVALID_ARGUMENT, std::string(st.message()));
      }
      std::optional<pb::FrameAck> ack;
      if (grpc::Status st = TakeChunk(
              caller, in, c.fields(), c.payload_bytes(),
              [&](std::vector<uint8_t>& buf) { c.AppendPayload(buf); }, &ack, true);
          !st.ok()) {
        return st;
      }
      if (ack && !stream->Write(*ack)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
      }
    }
    return EndOfPush(ctx, caller, in);
  }

  grpc::Status FinishRegion(grpc::ServerContext* ctx, const pb::RegionFinish* req,
                            pb::FinishReply*) override {
    uint32_t caller;
    if (grpc::Status st = CheckCaller(ctx, &caller); !st.ok()) return st;
    auto bad = [&](std::string msg) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      HEDDLE_LOG(kWarning, "wan: region %u refused a summary from region %u: %s", opt_.region_id,
                 caller, msg.c_str());
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(msg));
    };
    const uint64_t r = req->round_id();
    if (req->region_id() != caller) {
      return bad(absl::StrFormat("round %u: region %u sent a summary for region %u", r, caller,
                                 req->region_id()));
    }
    if (req->tokens() > 0 &&
        (!std::isfinite(req->tau_eff()) || req->tau_eff() < 1.0 || req->slices() != nslices_)) {
      return bad(
          absl::StrFormat("round %u region %u: %u tokens with tau_eff %g over %u slices; "
                          "tau_eff must be finite and ≥ 1 and every one of %u slices sent",
                          r, caller, req->tokens(), req->tau_eff(), req->slices(), nslices_));
    }
    if (req->tokens() == 0 && req->slices() != 0) {
      return bad(
          absl::StrFormat("round %u region %u: 0 tokens but %u slices", r, caller, req->slices()));
    }
    if (grpc::Status st = CheckRoundWindow(r, "summary"); !st.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      ++stats_out_of_window_;
      return st;
    }
    std::lock_guard<std::mutex> l(mu_);
    RoundState& rs = rounds_[r];
    if (rs.deciding) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrFormat("round %u is being decided", r));
    }
    RegionRound& rr = rs.regions[caller];
    if (rr.finished) {
      if (rr.summary.SerializeAsString() == req->SerializeAsString()) return grpc::Status::OK;
      malformed_.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(
          grpc::StatusCode::ALREADY_EXISTS,
          absl::StrFormat("round %u: region %u already sent a different summary", r, caller));
    }
    rr.finished = true;
    rr.summary = *req;
    FinalizeLocked(rr);  // the frames copied so far get the totals (header and trailer only)
    rs.last_summary_at = absl::Now();
    for (const pb::PeerRate& pr : req->send_rates()) {
      if (std::isfinite(pr.bytes_per_second()) && pr.bytes_per_second() > 0 &&
          std::binary_search(regions_.begin(), regions_.end(), pr.region_id())) {
        rates_[{caller, pr.region_id()}] = pr.bytes_per_second();
      }
    }
    links_.at(caller)->last_summary_round.store(r, std::memory_order_relaxed);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status WaitDecision(grpc::ServerContext* ctx, const pb::DecisionRequest* req,
                            pb::DecisionReply* reply) override {
    uint32_t caller;
    if (grpc::Status st = CheckCaller(ctx, &caller); !st.ok()) return st;
    if (!is_coordinator_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrFormat("region %u is not the coordinator (region %u is)",
                                          opt_.region_id, coordinator_));
    }
    const uint64_t r = req->round_id();
    if (r == 0) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "round 0 (rounds start at 1)");
    }
    const absl::Time until = absl::Now() + std::min(absl::Milliseconds(req->wait_ms()), kMaxPoll);
    std::unique_lock<std::mutex> l(mu_);
    while (!stopping_ && r > published_through_ && !announced_.contains(r) && !ctx->IsCancelled()) {
      const absl::Time now = absl::Now();
      if (now >= until) break;
      published_cv_.wait_until(l,
                               absl::ToChronoTime(std::min(until, now + absl::Milliseconds(200))));
    }
    // A round announced is as good as published for this answer: a follower that published it
    // from the announcement and polls the next one must not see this coordinator behind it
    // (its own publication waits on the final frames, or never comes when it stops meanwhile).
    reply->set_published_through(announced_.empty()
                                     ? published_through_
                                     : std::max(published_through_, announced_.rbegin()->first));
    reply->set_oldest_kept(OldestServableLocked());
    reply->set_instance(instance_);
    if (auto a = announced_.find(r); r > published_through_ && a != announced_.end()) {
      // Decided, and published here as soon as the final frames are patched.
      reply->set_state(pb::DecisionReply::DECIDED);
      *reply->mutable_decision() = a->second;
      return grpc::Status::OK;
    }
    if (r > published_through_) {
      reply->set_state(pb::DecisionReply::PENDING);
      return grpc::Status::OK;
    }
    auto it = kept_.find(r);
    if (it == kept_.end()) {
      reply->set_state(pb::DecisionReply::EVICTED);
      return grpc::Status::OK;
    }
    reply->set_state(pb::DecisionReply::DECIDED);
    *reply->mutable_decision() = it->second.decision;
    return grpc::Status::OK;
  }

  grpc::Status FetchFrames(grpc::ServerContext* ctx, const pb::FetchRequest* req,
                           grpc::ServerWriter<pb::FrameChunk>* writer) override {
    uint32_t caller;
    if (grpc::Status st = CheckCaller(ctx, &caller); !st.ok()) return st;
    std::vector<std::pair<uint32_t, FramePtr>> frames;
    {
      std::unique_lock<std::mutex> l(mu_);
      // A follower may ask between the decision going out and its publication here.
      while (!stopping_ && announced_.contains(req->round_id()) && !ctx->IsCancelled()) {
        published_cv_.wait_for(l, std::chrono::milliseconds(200));
      }
      // Stopping before the round's publication here: not final (the follower tries again, or
      // another source), unlike NOT_FOUND (which it takes as the round lost).
      if (stopping_ || announced_.contains(req->round_id())) {
        return grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            absl::StrFormat("round %u: not published here yet, or this coordinator is "
                            "stopping: try again",
                            req->round_id()));
      }
      auto it = kept_.find(req->round_id());
      if (it != kept_.end() && it->second.aggregate == nullptr && !it->second.decision.aborted()) {
        return grpc::Status(
            grpc::StatusCode::NOT_FOUND,
            absl::StrFormat("round %u was decided before this coordinator restarted (replayed "
                            "from its decision log): its frames are not kept here",
                            req->round_id()));
      }
      if (it == kept_.end() || it->second.aggregate == nullptr) {
        return grpc::Status(
            grpc::StatusCode::NOT_FOUND,
            absl::StrFormat("round %u: no published aggregate kept here", req->round_id()));
      }
      const GlobalAggregate& g = *it->second.aggregate;
      size_t p = 0;
      while (p < g.parts.size() && g.parts[p].region_id != req->region_id()) ++p;
      if (p == g.parts.size()) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND,
                            absl::StrFormat("round %u does not include region %u", req->round_id(),
                                            req->region_id()));
      }
      for (uint32_t s : req->slices()) {
        if (s >= g.slices) {
          malformed_.fetch_add(1, std::memory_order_relaxed);
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              absl::StrFormat("slice %u of a model of %u slices", s, g.slices));
        }
        frames.emplace_back(s, g.frames[p * g.slices + s]);
      }
    }
    Link& link = *links_.at(caller);
    for (const auto& [s, f] : frames) {
      if (!WriteFrameChunks(req->round_id(), req->region_id(), s, *f,
                            [&](const pb::FrameChunk& c) { return writer->Write(c); })) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
      }
      link.bytes_sent.fetch_add(f->size(), std::memory_order_relaxed);
    }
    return grpc::Status::OK;
  }

 private:
  // A schedule in use from a round on (the configured one from round 0).
  struct PlanAt {
    uint64_t from_round = 0;
    std::shared_ptr<const collective::Schedule> schedule;
    std::shared_ptr<const ForwardPlan> plan;
    uint64_t digest = 0;
  };
  struct RegionRound {
    std::vector<FramePtr> frames;  // provisional, by slice
    uint32_t have = 0;
    bool finished = false;
    pb::RegionFinish summary;
    // The preparer patches the summary's totals into each frame as soon as both are here (by
    // slice; `patched[s]` is frames[s] with the totals written in), and once the region is
    // ready (summary and every frame) sets `prepared` and whether its frames match the
    // summary's digest; `patched` is complete when `digest_ok` (what a decision including the
    // region publishes), and emptied when not.
    bool prepared = false;
    bool digest_ok = false;
    bool patch_failed = false;  // a frame refused the totals: the region cannot be included
    std::vector<FramePtr> patched;
    // By slice: a copy of the frame made as it arrived, waiting for the summary's totals (which
    // then take a header and a trailer write, no copy); and whether a copy is being made (mu_
    // released meanwhile); and whether the copy was taken by Assemble() (not to be made again).
    std::vector<std::shared_ptr<std::vector<uint8_t>>> staged;
    std::vector<bool> patching;
    std::vector<bool> taken;
  };
  struct RoundState {
    std::map<uint32_t, RegionRound> regions;
    bool own_finished = false;
    bool own_summary_queued = false;  // to every peer (the coordinator decides after that)
    absl::Time own_finished_at;
    bool deciding = false;        // coordinator: no more frames or summaries
    uint64_t bytes_received = 0;  // of new, valid frames of this round pushed by any peer
    // Follower: the aggregate the coordinator decides when every region is ready in time,
    // built before its decision comes; published only if the decision matches it bit for bit.
    std::shared_ptr<GlobalAggregate> speculative;
    bool speculated = false;
    bool speculating = false;  // being built (the preparer, mu_ released)
    // Where the round's time went here (the per-round "wan: round r here:" log line).
    // all_prepared_at: every region ready and prepared here (what the decision waits for on
    // the coordinator, and the speculative aggregate on a follower); decided_at: the
    // coordinator's decision taken (coordinator) or received (follower).
    absl::Time last_frame_at, last_summary_at, all_prepared_at, decided_at;
  };
  struct Kept {
    pb::Decision decision;
    std::shared_ptr<const GlobalAggregate> aggregate;  // null: aborted
  };

  // ---- helpers ----

  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopped_) return;
      stopped_ = true;
      stopping_ = true;
      cv_.notify_all();
      published_cv_.notify_all();
    }
    {
      std::lock_guard<std::mutex> l(calls_mu_);
      for (grpc::ClientContext* c : calls_) c->TryCancel();
    }
    for (auto& [id, l] : links_) {
      std::lock_guard<std::mutex> g(l->mu);
      l->cv.notify_all();
    }
    if (server_ != nullptr) server_->Shutdown(Deadline(absl::Seconds(1)));
    if (round_thread_.joinable()) round_thread_.join();
    for (std::thread& t : prepare_threads_) {
      if (t.joinable()) t.join();
    }
    for (auto& [id, l] : links_) {
      for (std::thread& t : l->threads) t.join();
    }
    if (server_ != nullptr) server_->Wait();
  }

  bool Stopping() const {
    std::lock_guard<std::mutex> l(mu_);
    return stopping_;
  }

  // Registers a client call for cancellation at shutdown.
  class ScopedCall {
   public:
    ScopedCall(Exchange* ex, grpc::ClientContext* c) : ex_(ex), c_(c) {
      std::lock_guard<std::mutex> l(ex_->calls_mu_);
      ex_->calls_.insert(c_);
      if (ex_->Stopping()) c_->TryCancel();
    }
    ~ScopedCall() {
      std::lock_guard<std::mutex> l(ex_->calls_mu_);
      ex_->calls_.erase(c_);
    }

   private:
    Exchange* ex_;
    grpc::ClientContext* c_;
  };

  // A call to peer region `peer`: the deadline and this gateway's credentials for that peer.
  void Prepare(grpc::ClientContext& c, absl::Duration timeout, uint32_t peer) const {
    c.set_deadline(Deadline(timeout));
    const std::string& token = TokenFor(peer);
    if (!token.empty()) c.AddMetadata("authorization", "Bearer " + token);
    c.AddMetadata("x-heddle-region", absl::StrCat(opt_.region_id));
    c.AddMetadata("x-heddle-spec", Hex64(spec_digest_));
    c.AddMetadata("x-heddle-proto", absl::StrCat(kPeerProtocolVersion));
  }

  static std::string Metadata(const grpc::ServerContext* ctx, const char* key) {
    const auto& md = ctx->client_metadata();
    auto it = md.find(key);
    if (it == md.end()) return {};
    return std::string(it->second.data(), it->second.size());
  }

  // What a peer must present, and what this gateway sends it (WanPeer::token, cert_name).
  const std::string& TokenFor(uint32_t peer) const {
    auto it = peer_auth_.find(peer);
    return it != peer_auth_.end() && !it->second.token.empty() ? it->second.token : opt_.token;
  }
  std::string CertNameFor(uint32_t peer) const {
    auto it = peer_auth_.find(peer);
    return it != peer_auth_.end() && !it->second.cert_name.empty() ? it->second.cert_name
                                                                   : absl::StrCat(peer);
  }

  // Who is calling, checked on every call: the region it claims (x-heddle-region) must be a
  // configured peer; it must carry that peer's token (its own, or the job's); with mutual TLS
  // its verified client certificate must name that peer (cert_name among the certificate's
  // subject alternative names, or its common name when it has none) — so a gateway holding
  // one region's certificate or token cannot speak as another region; then the same model
  // spec and protocol.
  grpc::Status CheckCaller(const grpc::ServerContext* ctx, uint32_t* caller) {
    uint32_t region = 0;
    const std::string r = Metadata(ctx, "x-heddle-region");
    if (!absl::SimpleAtoi(r, &region) || region == opt_.region_id || !links_.contains(region)) {
      auth_failures_.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          absl::StrFormat("caller region '%s' is not a configured peer of "
                                          "region %u",
                                          r, opt_.region_id));
    }
    if (const std::string& token = TokenFor(region); !token.empty()) {
      const std::string got = Metadata(ctx, "authorization");
      const std::string want = "Bearer " + token;
      // Compare every byte: the time taken does not tell how much of the token matched.
      uint8_t diff = got.size() == want.size() ? 0 : 1;
      for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) diff |= got[i] ^ want[i];
      if (diff != 0) {
        auth_failures_.fetch_add(1, std::memory_order_relaxed);
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                            got.empty()
                                ? "no bearer token (authorization metadata)"
                                : absl::StrFormat("wrong bearer token for region %u", region));
      }
    }
    if (!opt_.tls.cert_file.empty()) {
      if (grpc::Status st = CheckCertificate(ctx, region); !st.ok()) return st;
    }
    const std::string spec = Metadata(ctx, "x-heddle-spec");
    const std::string proto = Metadata(ctx, "x-heddle-proto");
    if (spec != Hex64(spec_digest_) || proto != absl::StrCat(kPeerProtocolVersion)) {
      handshake_failures_.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrFormat("region %u runs model spec %s, protocol %s; region %u "
                                          "runs spec %s, protocol %u: every gateway must hold "
                                          "the same model spec and version",
                                          region, spec, proto, opt_.region_id, Hex64(spec_digest_),
                                          kPeerProtocolVersion));
    }
    *caller = region;
    return grpc::Status::OK;
  }

  // Mutual TLS: the caller's certificate (verified against wan.tls.ca by the TLS handshake)
  // must name `region`'s cert_name.
  grpc::Status CheckCertificate(const grpc::ServerContext* ctx, uint32_t region) {
    const std::string want = CertNameFor(region);
    std::vector<std::string> names;
    if (const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
        auth != nullptr && auth->IsPeerAuthenticated()) {
      for (const char* property : {GRPC_X509_SAN_PROPERTY_NAME, GRPC_X509_CN_PROPERTY_NAME}) {
        for (const grpc::string_ref& v : auth->FindPropertyValues(property)) {
          names.emplace_back(v.data(), v.size());
        }
        if (!names.empty()) break;  // the common name counts only without any SAN
      }
    }
    if (std::find(names.begin(), names.end(), want) != names.end()) return grpc::Status::OK;
    auth_failures_.fetch_add(1, std::memory_order_relaxed);
    // Not logged per refusal (a misconfigured or hostile caller would flood the log): the
    // counter (heddle_relay_wan_refused_total{reason="auth"}) and the caller's status say it.
    const std::string got = names.empty() ? "no name" : absl::StrJoin(names, ", ");
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrFormat("the caller claims region %u but its certificate names [%s], not '%s' "
                        "(region %u's wan.peers[].cert_name at region %u)",
                        region, got, want, region, opt_.region_id));
  }

  grpc::Status CheckRoundWindow(uint64_t r, const char* what) const {
    std::lock_guard<std::mutex> l(mu_);
    return CheckRoundWindowLocked(r, what);
  }
  grpc::Status CheckRoundWindowLocked(uint64_t r, const char* what) const {
    if (r <= published_through_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrFormat("%s for round %u: that round is over here (published "
                                          "through round %u)",
                                          what, r, published_through_));
    }
    if (r > published_through_ + kRoundWindow) {
      return grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                          absl::StrFormat("%s for round %u: too far ahead (published through "
                                          "round %u, holding at most %u rounds ahead)",
                                          what, r, published_through_, kRoundWindow));
    }
    return grpc::Status::OK;
  }

  grpc::Status StoreFrame(uint64_t r, uint32_t region, uint32_t slice, FramePtr frame,
                          bool* duplicate) {
    std::lock_guard<std::mutex> l(mu_);
    if (grpc::Status st = CheckRoundWindowLocked(r, "frame"); !st.ok()) return st;
    RoundState& rs = rounds_[r];
    if (rs.deciding) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrFormat("frame for round %u: the round is being decided", r));
    }
    RegionRound& rr = rs.regions[region];
    if (rr.frames.empty()) rr.frames.resize(nslices_);
    if (rr.frames[slice] != nullptr) {
      if (*rr.frames[slice] == *frame) {
        *duplicate = true;
        duplicates_.fetch_add(1, std::memory_order_relaxed);
        return grpc::Status::OK;
      }
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          absl::StrFormat("round %u slice %u: region %u already sent a different "
                                          "frame for this slice",
                                          r, slice, region));
    }
    // Progress for the fetch grace: only a valid frame new here counts (not a duplicate, not
    // one refused), under mu_ already held.
    rs.bytes_received += frame->size();
    rr.frames[slice] = std::move(frame);
    ++rr.have;
    rs.last_frame_at = absl::Now();
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // One push stream's frame being reassembled.
  struct Inbound {
    std::vector<uint8_t> buf;
    uint64_t round = 0, total = 0, got = 0;
    uint32_t slice = 0, region = 0;
    grpc::Status refused;  // a round-level refusal: the rest of the frame is read and dropped
  };

  grpc::Status RefusePush(uint32_t caller, grpc::StatusCode code, std::string msg) {
    if (code == grpc::StatusCode::FAILED_PRECONDITION || code == grpc::StatusCode::OUT_OF_RANGE) {
      // Normal around restarts and catch-up: a round over here, or too far ahead.
      std::lock_guard<std::mutex> l(mu_);
      ++stats_out_of_window_;
    } else {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      HEDDLE_LOG(kWarning, "wan: region %u refused a push from region %u: %s", opt_.region_id,
                 caller, msg.c_str());
    }
    return grpc::Status(code, std::move(msg));
  }

  // Takes one chunk of a push stream from `caller`; when it completes a frame, validates and
  // stores it, queues it on to the peers the schedule names, and sets *ack. A non-OK status
  // ends the stream (counted). With `ack_refusals` (StreamFrames), a round-level refusal
  // (RoundLevel) is counted and answered with an acknowledgement marked refused instead, so the
  // caller's stream and the other frames in flight on it go on.
  // `c` is the chunk's fields, `size` its payload's length, append(buf) appends the payload.
  template <typename AppendFn>
  grpc::Status TakeChunk(uint32_t caller, Inbound& in, const wan_internal::ChunkFields& c,
                         uint64_t size, AppendFn append, std::optional<pb::FrameAck>* ack,
                         bool ack_refusals) {
    Link& link = *links_.at(caller);
    auto refuse_frame = [&](const grpc::Status& st) {
      pb::FrameAck a;
      a.set_round_id(in.round);
      a.set_region_id(in.region);
      a.set_slice(in.slice);
      a.set_refused(true);
      a.set_reason(st.error_message());
      *ack = std::move(a);
    };
    if (in.got == 0) {
      in.refused = grpc::Status::OK;
      in.round = c.round_id;
      in.slice = c.slice;
      in.total = c.frame_bytes;
      in.region = c.region_id;
      // Its own frames, or another region's it forwards (any peer may: a schedule can route
      // over it); never this gateway's own, nor an unknown region's.
      if (in.region == opt_.region_id ||
          !std::binary_search(regions_.begin(), regions_.end(), in.region)) {
        return RefusePush(caller, grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrFormat("a push from region %u carries a frame of region %u; a "
                                          "gateway pushes its own or another configured region's "
                                          "frames, never the receiver's own",
                                          caller, in.region));
      }
      if (in.slice >= nslices_) {
        return RefusePush(caller, grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrFormat("round %u: slice %u of a model of %u slices", in.round,
                                          in.slice, nslices_));
      }
      const uint64_t want = FrameBytes(slices_[in.slice].count, spec_.chunk_size);
      if (in.total != want) {
        return RefusePush(caller, grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrFormat("round %u slice %u: frame of %u bytes announced, the "
                                          "slice's frame has %u",
                                          in.round, in.slice, in.total, want));
      }
      if (grpc::Status st = CheckRoundWindow(in.round, "frame"); !st.ok()) {
        if (!ack_refusals || !RoundLevel(st.error_code())) {
          return RefusePush(caller, st.error_code(), st.error_message());
        }
        in.refused = RefusePush(caller, st.error_code(), st.error_message());  // counts it
      }
      if (in.refused.ok()) {  // reserved, not zero-filled: the chunks append in order
        in.buf.clear();
        in.buf.reserve(in.total);
      }
    } else if (c.round_id != in.round || c.slice != in.slice || c.frame_bytes != in.total ||
               c.region_id != in.region) {
      return RefusePush(caller, grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrFormat("round %u slice %u: a chunk of another frame (round %u "
                                        "slice %u) came before this one was complete",
                                        in.round, in.slice, c.round_id, c.slice));
    }
    if (c.offset != in.got || size == 0 || size > in.total - in.got) {
      return RefusePush(
          caller, grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrFormat("round %u slice %u: chunk at offset %u of %u bytes; "
                          "expected offset %u and at most %u bytes",
                          in.round, in.slice, c.offset, size, in.got, in.total - in.got));
    }
    if (in.refused.ok()) append(in.buf);
    in.got += size;
    link.bytes_received.fetch_add(size, std::memory_order_relaxed);
    if (in.got < in.total) return grpc::Status::OK;
    in.got = 0;
    if (!in.refused.ok()) {
      refuse_frame(in.refused);
      return grpc::Status::OK;
    }
    absl::StatusOr<FrameView> f = ParseFrame(in.buf);
    absl::Status check =
        f.ok() ? CheckFrameForSlice(*f, spec_, slices_[in.slice], in.round, in.region) : f.status();
    if (check.ok() && (f->header().token_count != 1 || f->header().inner_steps != 1)) {
      check = absl::InvalidArgumentError(
          "a pushed frame must carry the provisional totals "
          "(1 token, 1 step)");
    }
    if (!check.ok()) {
      return RefusePush(
          caller, grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrFormat("round %u slice %u of region %u from region %u: bad frame: %s", in.round,
                          in.slice, in.region, caller, check.message()));
    }
    auto frame = std::make_shared<const std::vector<uint8_t>>(std::move(in.buf));
    in.buf = {};
    bool duplicate = false;
    if (grpc::Status st = StoreFrame(in.round, in.region, in.slice, frame, &duplicate); !st.ok()) {
      grpc::Status counted = RefusePush(caller, st.error_code(), st.error_message());
      if (!ack_refusals || !RoundLevel(st.error_code())) return counted;
      refuse_frame(counted);
      return grpc::Status::OK;
    }
    if (!duplicate) {
      Forward(in.round, in.region, in.slice, frame, caller);
      // The copy that will carry the totals is made now, on this thread (and the totals
      // written into it if the region's summary is here, the usual case for the last slice's
      // frame): no hand-over to a preparer thread, and no copy left for the round's tail.
      std::unique_lock<std::mutex> l(mu_);
      auto it = rounds_.find(in.round);
      if (it != rounds_.end()) {
        auto rr = it->second.regions.find(in.region);
        if (rr != it->second.regions.end() && StageableLocked(rr->second, in.slice)) {
          StageSlot(l, in.round, in.region, in.slice);
          cv_.notify_all();  // the preparer concludes the region when it is complete
        }
      }
    }
    link.frames_received.fetch_add(1, std::memory_order_relaxed);
    pb::FrameAck a;
    a.set_round_id(in.round);
    a.set_region_id(in.region);
    a.set_slice(in.slice);
    a.set_duplicate(duplicate);
    *ack = std::move(a);
    return grpc::Status::OK;
  }

  grpc::Status EndOfPush(grpc::ServerContext* ctx, uint32_t caller, const Inbound& in) {
    if (in.got == 0) return grpc::Status::OK;
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    return RefusePush(caller, grpc::StatusCode::INVALID_ARGUMENT,
                      absl::StrFormat("round %u slice %u: the stream ended after %u of %u bytes",
                                      in.round, in.slice, in.got, in.total));
  }

  template <typename WriteFn>
  bool WriteFrameChunks(uint64_t r, uint32_t region, uint32_t slice, const std::vector<uint8_t>& f,
                        WriteFn write) const {
    pb::FrameChunk c;
    c.set_round_id(r);
    c.set_region_id(region);
    c.set_slice(slice);
    c.set_frame_bytes(f.size());
    for (uint64_t off = 0; off < f.size(); off += opt_.chunk_bytes) {
      const uint64_t n = std::min<uint64_t>(opt_.chunk_bytes, f.size() - off);
      c.set_offset(off);
      c.set_data(f.data() + off, n);
      if (!write(c)) return false;
    }
    return true;
  }

  // The frame's chunks in wire form (internal/chunk_wire.h): each a serialized FrameChunk
  // header and a slice that references the shared frame, so a stripe's writer copies no payload
  // (the callee parses the same bytes as before). False when a write fails.
  bool WriteFrameWire(const Link::Item& it,
                      grpc::ClientReaderWriter<grpc::ByteBuffer, pb::FrameAck>& stream) const {
    const FramePtr& f = it.frame;
    wan_internal::ChunkFields c{it.round_id, it.region, it.slice, f->size(), 0};
    for (uint64_t off = 0; off < f->size(); off += opt_.chunk_bytes) {
      c.offset = off;
      absl::StatusOr<grpc::ByteBuffer> wire =
          wan_internal::ChunkWire(c, f, off, std::min<uint64_t>(opt_.chunk_bytes, f->size() - off));
      if (!wire.ok()) {
        HEDDLE_LOG(kWarning, "wan: chunk of round %llu slice %u not framed: %s",
                   static_cast<unsigned long long>(it.round_id), it.slice,
                   std::string(wire.status().message()).c_str());
        return false;
      }
      if (!stream.Write(*wire)) return false;
    }
    return true;
  }

  // ---- links ----

  void SetAddressLocked(Link& l, const std::string& address) {
    l.address = address;
    ++l.generation;
    l.ready = false;
    l.next_attempt = absl::InfinitePast();
    l.backoff = opt_.backoff_min;
    l.channel.reset();
    l.stripe_channels.clear();
    if (address.empty()) return;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(static_cast<int>(kMaxChunkBytes + (1 << 20)));
    args.SetMaxSendMessageSize(static_cast<int>(kMaxChunkBytes + (1 << 20)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(opt_.backoff_min)));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(opt_.backoff_min)));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(opt_.backoff_max)));
    // Parallel streams to one peer share a channel; a private subchannel per link keeps a
    // restarted peer from being reached through another link's stale connection.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kWanWindowBytes);
    // The peer's server certificate must name the peer (its cert_name), as its client
    // certificate must when it calls here (CheckCaller); tls.server_name overrides both ends'
    // names for the client check only (tests, one certificate for every gateway).
    if (!opt_.tls.cert_file.empty()) {
      args.SetSslTargetNameOverride(!opt_.tls.server_name.empty() ? opt_.tls.server_name
                                                                  : CertNameFor(l.region_id));
    }
    l.channel = grpc::CreateCustomChannel(address, client_creds_, args);
    for (uint32_t k = 0; k < opt_.streams_per_peer; ++k) {
      grpc::ChannelArguments sa = args;
      sa.SetInt("heddle.wan_stripe", static_cast<int>(k));  // a distinct channel per stripe
      l.stripe_channels.push_back(grpc::CreateCustomChannel(address, client_creds_, sa));
    }
  }

  // Blocks until the link's handshake succeeded; null when stopping.
  std::shared_ptr<grpc::Channel> Connect(Link& l) {
    std::unique_lock<std::mutex> lk(l.mu);
    for (;;) {
      if (Stopping()) return nullptr;
      if (l.ready) return l.channel;
      const absl::Time now = absl::Now();
      if (l.channel == nullptr || l.hello_in_progress || now < l.next_attempt) {
        const absl::Time until = l.channel == nullptr || l.hello_in_progress
                                     ? now + absl::Milliseconds(200)
                                     : std::min(l.next_attempt, now + absl::Milliseconds(200));
        l.cv.wait_until(lk, absl::ToChronoTime(until));
        continue;
      }
      l.hello_in_progress = true;
      std::shared_ptr<grpc::Channel> ch = l.channel;
      const uint64_t gen = l.generation;
      lk.unlock();
      pb::HelloReply reply;
      absl::Status st = SayHello(ch, l.region_id, &reply);
      lk.lock();
      l.hello_in_progress = false;
      l.cv.notify_all();
      if (gen != l.generation) continue;
      if (st.ok()) {
        l.ready = true;
        l.backoff = opt_.backoff_min;
        l.hello = reply;
        if (!l.last_error.empty()) {
          HEDDLE_LOG(kInfo, "wan: region %u: link to region %u at %s is up", opt_.region_id,
                     l.region_id, l.address.c_str());
        }
        l.last_error.clear();
        return l.channel;
      }
      if (l.last_error != st.message()) {
        HEDDLE_LOG(kWarning, "wan: region %u: handshake with region %u at %s: %s", opt_.region_id,
                   l.region_id, l.address.c_str(), std::string(st.message()).c_str());
        l.last_error = std::string(st.message());
      }
      l.next_attempt = absl::Now() + l.backoff;
      l.backoff = std::min(l.backoff * 2, opt_.backoff_max);
    }
  }

  void MarkFailed(Link& l, const absl::Status& why) {
    std::lock_guard<std::mutex> lk(l.mu);
    if (l.ready) {
      l.ready = false;
      l.reconnects.fetch_add(1, std::memory_order_relaxed);
      HEDDLE_LOG(kWarning, "wan: region %u: link to region %u down: %s", opt_.region_id,
                 l.region_id, std::string(why.message()).c_str());
      l.last_error = std::string(why.message());
    }
    l.next_attempt = absl::Now() + l.backoff;
    l.backoff = std::min(l.backoff * 2, opt_.backoff_max);
    l.cv.notify_all();
  }

  absl::Status SayHello(const std::shared_ptr<grpc::Channel>& ch, uint32_t region,
                        pb::HelloReply* reply) {
    pb::HelloRequest req;
    req.set_protocol_version(kPeerProtocolVersion);
    req.set_region_id(opt_.region_id);
    req.set_spec_digest(spec_digest_);
    for (uint32_t r : regions_) req.add_regions(r);
    req.set_coordinator(coordinator_);
    req.set_schedule_digest(schedule_digest_);
    req.set_schedule_name(schedule_.intent);
    grpc::ClientContext ctx;
    Prepare(ctx, opt_.rpc_timeout, region);
    ScopedCall reg(this, &ctx);
    grpc::Status st = pb::Peer::NewStub(ch)->Hello(&ctx, req, reply);
    if (!st.ok()) return FromGrpc(st, absl::StrFormat("hello to region %u", region));
    if (reply->region_id() != region) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the gateway configured as region %u answers as region %u", region, reply->region_id()));
    }
    // The callee checked ours; check theirs too (a callee that skipped the check, or predates
    // it, must not be linked to with another schedule).
    if (reply->protocol_version() != kPeerProtocolVersion || reply->spec_digest() != spec_digest_ ||
        reply->schedule_digest() != schedule_digest_) {
      handshake_failures_.fetch_add(1, std::memory_order_relaxed);
      return absl::FailedPreconditionError(absl::StrFormat(
          "region %u answers hello with protocol %u, spec %s, exchange schedule digest %s; this "
          "gateway (region %u) runs protocol %u, spec %s, schedule '%s' (digest %s): every "
          "gateway must run the same",
          region, reply->protocol_version(), Hex64(reply->spec_digest()),
          Hex64(reply->schedule_digest()), opt_.region_id, kPeerProtocolVersion,
          Hex64(spec_digest_), schedule_.intent, Hex64(schedule_digest_)));
    }
    return absl::OkStatus();
  }

  // Whether a queued item is no longer worth sending, this gateway having published through
  // `pub`: a frame or summary of a round before the last published one. The last published
  // round's still go: a peer may be waiting for its frames (this gateway may be the only route
  // the schedule gives them) while it assembles that round, and prepares it with the summaries
  // (the coordinator publishes a round it finished last a few milliseconds after its own
  // summary is queued, usually before it is sent); a peer refuses them once it has published
  // the round.
  static bool Stale(const Link::Item& it, uint64_t pub) { return it.round_id < pub; }

  // Queues an item and drops every stale queued item (above): while a peer is unreachable its
  // sender threads wait in Connect() and do not prune, so this is what keeps its queues to the
  // rounds in progress (peers fetch older rounds from the coordinator).
  void Enqueue(Link& l, uint32_t stripe, Link::Item item) {
    const uint64_t pub = PublishedThrough();
    std::lock_guard<std::mutex> lk(l.mu);
    for (std::deque<Link::Item>& q : l.queues) {
      // A frame stripe moves an item to its in-flight list before writing it, so its queue
      // holds nothing being sent; the summary sender sends its queue's front in place and pops
      // it afterwards only if it is still that round's summary. So the front stays (it may be
      // the summary being sent) and the rest may go.
      if (q.size() <= 1) continue;
      auto keep = std::remove_if(q.begin() + 1, q.end(),
                                 [&](const Link::Item& it) { return Stale(it, pub); });
      q.erase(keep, q.end());
    }
    l.queues[stripe].push_back(std::move(item));
    l.cv.notify_all();
  }

  // Queues a frame of `region` to the peers the schedule names for it (never back to `from`,
  // the peer it came from; 0 = this gateway's own). mu_ not held.
  void Forward(uint64_t round_id, uint32_t region, uint32_t slice, const FramePtr& frame,
               uint32_t from) {
    const std::shared_ptr<const ForwardPlan> plan = PlanFor(round_id).plan;
    for (uint32_t peer : plan->Targets(region, slice)) {
      if (peer == from) continue;
      auto it = links_.find(peer);
      if (it == links_.end()) continue;
      Enqueue(*it->second, slice % opt_.streams_per_peer,
              Link::Item{.round_id = round_id, .region = region, .slice = slice, .frame = frame});
    }
  }

  // ---- schedules ----

  PlanAt PlanFor(uint64_t round) const {
    std::lock_guard<std::mutex> l(plan_mu_);
    size_t i = 0;
    while (i + 1 < plans_.size() && plans_[i + 1].from_round <= round) ++i;
    return plans_[i];
  }

  absl::Status InstallPlan(uint64_t from_round, const collective::Schedule& s) {
    HEDDLE_ASSIGN_OR_RETURN(ForwardPlan plan,
                            ForwardPlan::Build(s, regions_, opt_.region_id, nslices_));
    PlanAt p{.from_round = from_round,
             .schedule = std::make_shared<const collective::Schedule>(s),
             .plan = std::make_shared<const ForwardPlan>(std::move(plan)),
             .digest = WanScheduleDigest(s)};
    std::lock_guard<std::mutex> l(plan_mu_);
    // A later switch replaces one announced for the same or a later round.
    while (!plans_.empty() && plans_.back().from_round >= from_round && from_round > 0) {
      plans_.pop_back();
    }
    plans_.push_back(std::move(p));
    // Keep what rounds in flight may still use: drop schedules superseded two switches ago.
    while (plans_.size() > 3) plans_.erase(plans_.begin());
    if (from_round > 0) schedule_switches_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // Coordinator: the schedule synthesized for the measured topology, with the switch to announce
  // in *sw, when it is predicted min_gain times faster than the one in use from round r + 2.
  absl::StatusOr<std::optional<collective::Schedule>> Recompile(
      uint64_t r, const std::map<std::pair<uint32_t, uint32_t>, double>& rates,
      pb::ScheduleSwitch* sw) {
    HEDDLE_ASSIGN_OR_RETURN(collective::Topology base, ResolveWanTopology(opt_.schedule, regions_));
    const collective::Topology measured = WithMeasuredRates(base, regions_, rates);
    WanScheduleOptions o = opt_.schedule;
    o.compiled = nullptr;
    o.topology_file.clear();
    o.topology_yaml = collective::TopologyToYaml(measured);
    HEDDLE_ASSIGN_OR_RETURN(collective::Schedule s, ResolveWanSchedule(o, regions_, slot_bytes_));
    const PlanAt current = PlanFor(r + 2);
    const uint64_t digest = WanScheduleDigest(s);
    if (digest == current.digest) return std::nullopt;
    HEDDLE_ASSIGN_OR_RETURN(double now,
                            collective::PredictTime(*current.schedule, measured, slot_bytes_));
    if (!(s.predicted_s * opt_.schedule.min_gain < now)) return std::nullopt;
    HEDDLE_LOG(kInfo,
               "wan: round %" PRIu64
               ": measured speeds: schedule '%s' (%s) predicted %.3f s "
               "against %.3f s for '%s'; every gateway switches at round %" PRIu64,
               r, s.intent.c_str(), Hex64(digest).c_str(), s.predicted_s, now,
               current.schedule->intent.c_str(), r + 2);
    sw->set_topology_yaml(o.topology_yaml);
    sw->set_digest(digest);
    sw->set_from_round(r + 2);
    sw->set_schedule_json(collective::ScheduleToJson(s));
    return s;
  }

  // Follower: runs the schedule the coordinator compiled from its round on, after checking that
  // it is the one announced (digest) and one the relay can run (verified, every piece reaching
  // every gateway); otherwise keeps the schedule in use (frames of any route are accepted and
  // what is missing is fetched, so this costs time, never correctness). Nothing is compiled
  // here: the search runs once, on the coordinator.
  void ApplySwitch(uint64_t r, const pb::ScheduleSwitch& sw) {
    if (sw.from_round() <= r || PlanFor(sw.from_round()).digest == sw.digest()) return;
    absl::Status st = InstallSwitch(sw);
    if (!st.ok()) {
      HEDDLE_LOG(kError,
                 "wan: region %u: cannot switch to the schedule announced for round %" PRIu64
                 ": %s; keeping the one in use",
                 opt_.region_id, sw.from_round(), std::string(st.message()).c_str());
    }
  }

  absl::Status InstallSwitch(const pb::ScheduleSwitch& sw) {
    HEDDLE_ASSIGN_OR_RETURN(
        collective::Schedule s,
        ScheduleFromSwitch(sw.schedule_json(), sw.digest(), regions_, slot_bytes_));
    return InstallPlan(sw.from_round(), s);
  }

  // Acknowledged frame bytes over the time some frame to the peer was in flight; 0 before any.
  static double SendRate(Link& l) {
    std::lock_guard<std::mutex> g(l.mu);
    absl::Duration busy = l.push_busy;
    if (l.pushes_open > 0) busy += absl::Now() - l.push_busy_since;
    if (busy <= absl::ZeroDuration()) return 0;
    return static_cast<double>(l.push_bytes) / absl::ToDoubleSeconds(busy);
  }

  uint64_t PublishedThrough() const {
    std::lock_guard<std::mutex> l(mu_);
    return published_through_;
  }

  // The summary stripe of one peer: this region's summaries, one unary call each.
  void SummaryLoop(Link& l, uint32_t stripe) {
    std::deque<Link::Item>& q = l.queues[stripe];
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(l.mu);
        l.cv.wait(lk, [&] { return !q.empty() || Stopping(); });
        if (Stopping()) return;
      }
      const uint64_t pub = PublishedThrough();
      std::optional<pb::RegionFinish> fin;
      {
        std::lock_guard<std::mutex> lk(l.mu);
        while (!q.empty() && Stale(q.front(), pub)) q.pop_front();
        if (q.empty()) continue;
        fin = q.front().finish;
      }
      std::shared_ptr<grpc::Channel> ch = Connect(l);
      if (ch == nullptr) return;
      grpc::Status st;
      {
        grpc::ClientContext ctx;
        Prepare(ctx, opt_.rpc_timeout, l.region_id);
        ScopedCall reg(this, &ctx);
        pb::FinishReply reply;
        st = pb::Peer::NewStub(ch)->FinishRegion(&ctx, *fin, &reply);
      }
      if (!st.ok() && Transient(st.error_code())) {
        if (Stopping()) return;
        MarkFailed(l, FromGrpc(st, "summary"));
        continue;  // keep it; Connect() waits out the backoff
      }
      if (!st.ok() && st.error_code() != grpc::StatusCode::FAILED_PRECONDITION) {
        HEDDLE_LOG(kWarning,
                   "wan: region %u: region %u refused the summary of round %" PRIu64 ": %s",
                   opt_.region_id, l.region_id, fin->round_id(), st.error_message().c_str());
      }
      std::lock_guard<std::mutex> lk(l.mu);
      if (!q.empty() && q.front().finish && q.front().round_id == fin->round_id()) q.pop_front();
    }
  }

  // One frame stripe of one peer: a long-lived StreamFrames call per connection. The writer (this
  // thread) moves frames from the stripe's queue to its in-flight list and writes them without
  // waiting; a reader thread takes the callee's acknowledgements, which come in order, one per
  // frame, and retires the in-flight frames. HTTP/2 flow control (the 64 MiB stream window)
  // blocks Write() when the callee falls behind, so the in-flight bytes are bounded by the link,
  // and no frame waits for another's reply round trip. When the stream fails, what is still in
  // flight goes back to the front of the queue (a callee acknowledges identical duplicates, so
  // resending a frame it did store is harmless). A frame refused for a reason of its round (over
  // or being decided at the callee, too far ahead, a different copy held) comes back as an
  // acknowledgement marked refused and is dropped without ending the stream; a frame refused as
  // malformed ends the stream and is resent up to three times, one refused for good is dropped
  // (the follower fetches it from the coordinator, or the coordinator leaves the region out). A
  // stream is closed and reopened before its deadline (push_timeout), when nothing is in flight.
  void StreamLoop(Link& l, uint32_t stripe) {
    std::deque<Link::Item>& q = l.queues[stripe];
    std::deque<Link::Item>& flight = l.in_flight[stripe];
    int refusals = 0;  // INVALID_ARGUMENT answers to the frame at the front
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(l.mu);
        l.cv.wait(lk, [&] { return !q.empty() || Stopping(); });
        if (Stopping()) return;
      }
      std::shared_ptr<grpc::Channel> ch = Connect(l);
      if (ch == nullptr) return;
      {
        std::lock_guard<std::mutex> lk(l.mu);
        if (stripe < l.stripe_channels.size()) ch = l.stripe_channels[stripe];
      }
      grpc::ClientContext ctx;
      Prepare(ctx, opt_.push_timeout, l.region_id);
      ScopedCall reg(this, &ctx);
      // StreamFrames as the generated stub opens it, but writing FrameChunks in wire form.
      std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, pb::FrameAck>> stream(
          grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, pb::FrameAck>::Create(
              ch.get(),
              grpc::internal::RpcMethod(kStreamFramesMethod,
                                        grpc::internal::RpcMethod::BIDI_STREAMING, ch),
              &ctx));
      const absl::Time opened = absl::Now();
      bool reader_done = false;  // guarded by l.mu
      std::thread reader([&] {
        pb::FrameAck ack;
        bool unexpected = false;
        while (!unexpected && stream->Read(&ack)) {
          std::lock_guard<std::mutex> lk(l.mu);
          if (flight.empty() || flight.front().round_id != ack.round_id() ||
              flight.front().region != ack.region_id() || flight.front().slice != ack.slice()) {
            HEDDLE_LOG(kWarning,
                       "wan: region %u: region %u acknowledged round %" PRIu64
                       " region %u slice %u, not the frame in flight",
                       opt_.region_id, l.region_id, ack.round_id(), ack.region_id(), ack.slice());
            unexpected = true;  // ends the call (below); what is in flight is sent again
            continue;
          }
          const Link::Item& it = flight.front();
          // A frame refused for a reason of its round (the callee counted and logged it) is
          // retired like an acknowledged one, not sent again; the stream goes on.
          if (!ack.refused()) {
            l.bytes_sent.fetch_add(it.frame->size(), std::memory_order_relaxed);
            l.frames_sent.fetch_add(1, std::memory_order_relaxed);
            if (it.region != opt_.region_id) {
              l.frames_forwarded.fetch_add(1, std::memory_order_relaxed);
            }
          }
          l.push_bytes += it.frame->size();
          flight.pop_front();
          if (flight.empty()) {
            StreamIdleLocked(l);
            l.cv.notify_all();  // a draining writer waits for this
          }
          refusals = 0;
        }
        if (unexpected) ctx.TryCancel();
        std::lock_guard<std::mutex> lk(l.mu);
        reader_done = true;
        l.cv.notify_all();
      });
      for (;;) {
        const uint64_t pub = PublishedThrough();
        Link::Item it;
        {
          std::unique_lock<std::mutex> lk(l.mu);
          if (absl::Now() - opened > opt_.push_timeout / 2) {
            // Reopen well before the deadline, once what is in flight is acknowledged. Wait for
            // exactly that (the reader notifies when in-flight empties), not for a non-empty
            // queue, which would already hold and turn this into a spin.
            l.cv.wait_for(lk, std::chrono::milliseconds(200),
                          [&] { return flight.empty() || reader_done || Stopping(); });
            if (flight.empty() || reader_done || Stopping()) break;
            continue;
          }
          l.cv.wait_for(lk, std::chrono::milliseconds(200),
                        [&] { return !q.empty() || reader_done || Stopping(); });
          if (reader_done || Stopping()) break;
          // Older rounds are over: peers fetch what they lack from the coordinator.
          while (!q.empty() && Stale(q.front(), pub)) q.pop_front();
          if (absl::Now() - opened > opt_.push_timeout / 2) continue;  // drain first (above)
          if (q.empty()) continue;
          it = std::move(q.front());
          q.pop_front();
          if (flight.empty()) StreamBusyLocked(l);
          flight.push_back(it);
        }
        if (!WriteFrameWire(it, *stream)) break;
      }
      stream->WritesDone();  // the callee acknowledges what it got, then ends the call
      reader.join();
      const grpc::Status st = stream->Finish();
      bool dropped = false;  // the refused frame was dropped, not kept for a retry
      {
        std::lock_guard<std::mutex> lk(l.mu);
        if (!flight.empty()) StreamIdleLocked(l);
        if (!st.ok() && !Transient(st.error_code()) &&
            !(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT && ++refusals < 3) &&
            !flight.empty()) {
          // The frame at the front was refused for good: drop it.
          if (st.error_code() != grpc::StatusCode::FAILED_PRECONDITION) {
            HEDDLE_LOG(kWarning, "wan: region %u: region %u refused round %" PRIu64 " slice %u: %s",
                       opt_.region_id, l.region_id, flight.front().round_id, flight.front().slice,
                       st.error_message().c_str());
          }
          flight.pop_front();
          refusals = 0;
          dropped = true;
        }
        // Not acknowledged: to the front of the queue, in order.
        q.insert(q.begin(), std::make_move_iterator(flight.begin()),
                 std::make_move_iterator(flight.end()));
        flight.clear();
      }
      if (st.ok() || Stopping()) continue;
      // The link is suspect when the call failed, or while a malformed frame is being retried
      // (the backoff paces the retries); once that frame is dropped, one bad frame is no reason
      // to take the link down.
      if (Transient(st.error_code()) ||
          (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT && !dropped)) {
        MarkFailed(l, FromGrpc(st, "push"));  // Connect() waits out the backoff
      }
    }
  }

  // Send-throughput bookkeeping: the time some frame to the peer was in flight. l.mu held.
  static void StreamBusyLocked(Link& l) {
    if (l.pushes_open++ == 0) l.push_busy_since = absl::Now();
  }
  static void StreamIdleLocked(Link& l) {
    if (l.pushes_open > 0 && --l.pushes_open == 0) l.push_busy += absl::Now() - l.push_busy_since;
  }

  // ---- publication (both roles) ----

  // Publishes round r here: keeps it, drops older round state, resolves the region encoder and
  // hands the outcome to the region side. mu_ held.
  void PublishLocked(uint64_t r, pb::Decision decision, std::shared_ptr<const GlobalAggregate> g,
                     absl::Status abort_reason, bool lost = false) {
    std::optional<absl::Time> finished_at;
    for (auto it = rounds_.begin(); it != rounds_.end() && it->first <= r;) {
      if (it->first == r && it->second.own_finished) {
        finished_at = it->second.own_finished_at;
        LogRoundTimes(r, it->second, g != nullptr && it->second.speculative == g);
      }
      for (const auto& [region, rr] : it->second.regions) {
        if (rr.finished) last_tokens_[region] = rr.summary.tokens();
      }
      it = rounds_.erase(it);
    }
    bool included = false;
    if (g != nullptr) {
      for (const RegionPart& p : g->parts) included |= p.region_id == opt_.region_id;
    }
    announced_.erase(announced_.begin(), announced_.upper_bound(r));
    kept_[r] = Kept{std::move(decision), g};
    while (kept_.size() > opt_.keep_rounds) kept_.erase(kept_.begin());
    published_through_ = r;
    RoundOutcome out;
    out.retained_by_gateway = encoder_.Resolve(r, included);
    if (g != nullptr) {
      out.kind = RoundOutcome::Kind::kPublished;
      out.aggregate = std::move(g);
      out.includes_this_region = included;
      ++stats_.rounds_published;
      if (!included) ++stats_.rounds_without_this_region;
    } else {
      out.kind = RoundOutcome::Kind::kAborted;
      out.reason = std::move(abort_reason);
      ++stats_.rounds_aborted;
      if (lost) ++stats_.rounds_lost;
    }
    if (finished_at) {
      const double s = absl::ToDoubleSeconds(absl::Now() - *finished_at);
      stats_.last_publish_seconds = s;
      stats_.publish_seconds_sum += s;
      ++stats_.publish_count;
    }
    queue_.Push(r, std::move(out));
    cv_.notify_all();
    published_cv_.notify_all();
  }

  // One line per round: the instants (Unix seconds, one clock across gateways on one host) at
  // which this gateway's region handed over, the last frame and the last summary of the round
  // arrived here, the decision was taken or came, and the round was published — what
  // tools/bench reads to split the WAN time into its phases. mu_ held.
  void LogRoundTimes(uint64_t r, const RoundState& rs, bool prepared) const {
    auto at = [](absl::Time t) {
      return t == absl::Time() ? 0.0 : absl::ToDoubleSeconds(t - absl::UnixEpoch());
    };
    HEDDLE_LOG(kInfo,
               "wan: round %" PRIu64
               " here: finished %.6f last_frame %.6f last_summary %.6f decided %.6f "
               "published %.6f prepared %d all_prepared %.6f",
               r, at(rs.own_finished_at), at(rs.last_frame_at), at(rs.last_summary_at),
               at(rs.decided_at), at(absl::Now()), prepared ? 1 : 0, at(rs.all_prepared_at));
  }

  // ---- coordinator ----

  bool RegionReadyLocked(const RoundState& rs, uint32_t region) const {
    auto it = rs.regions.find(region);
    if (it == rs.regions.end() || !it->second.finished) return false;
    return it->second.summary.tokens() == 0 || it->second.have == nslices_;
  }

  void DecideLoop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      const uint64_t r = published_through_ + 1;
      auto own_done = [&] {
        auto it = rounds_.find(r);
        return it != rounds_.end() && it->second.own_finished && it->second.own_summary_queued;
      };
      cv_.wait(l, [&] { return stopping_ || own_done(); });
      if (stopping_) return;
      const absl::Time timeout_at = rounds_[r].own_finished_at + opt_.wan_timeout;
      auto all_ready = [&] {
        const RoundState& rs = rounds_[r];
        for (uint32_t region : regions_) {
          if (!RegionReadyLocked(rs, region)) return false;
        }
        return true;
      };
      while (!stopping_ && !all_ready() && absl::Now() < timeout_at) {
        cv_.wait_until(l, absl::ToChronoTime(timeout_at));
      }
      if (stopping_) return;
      RoundState& rs = rounds_[r];
      rs.deciding = true;  // the regions are frozen now
      // The included set: regions ready with tokens whose frames are those they announced. The
      // decision needs only the final frames' lengths and trailers (the digest), which follow
      // from the provisional frames' without the patched copies: it goes out first, and the
      // copies (the preparer's, most of them made as the frames came) are waited for after.
      std::vector<RegionPart> parts;
      std::vector<wan_internal::ValidFrameSum> sums;
      std::vector<std::string> left_out;
      uint64_t expected = 0, present = 0;
      for (uint32_t region : regions_) {
        auto it = rs.regions.find(region);
        const bool reported = it != rs.regions.end() && it->second.finished;
        if (reported) {
          expected += it->second.summary.tokens();
        } else if (auto lt = last_tokens_.find(region); lt != last_tokens_.end()) {
          expected += lt->second;
        }
        if (!RegionReadyLocked(rs, region)) {
          left_out.push_back(
              absl::StrFormat("%u (%s)", region, reported ? "frames incomplete" : "no summary"));
          continue;
        }
        const RegionRound& rr = it->second;
        if (rr.summary.tokens() == 0) continue;
        bool ok = rr.prepared
                      ? rr.digest_ok
                      : !rr.patch_failed && wan_internal::FramesDigestOfValidFrames(rr.frames) ==
                                                rr.summary.frames_digest();
        std::vector<wan_internal::ValidFrameSum> region_sums;
        const uint32_t steps = wan_internal::RegionInnerSteps(rr.summary.tau_eff());
        for (uint32_t s = 0; ok && s < nslices_; ++s) {
          absl::StatusOr<wan_internal::ValidFrameSum> sum =
              wan_internal::PatchedSumOfValidFrame(*rr.frames[s], rr.summary.tokens(), steps);
          ok = sum.ok();
          if (ok) region_sums.push_back(*sum);
        }
        if (!ok) {
          ++stats_.digest_mismatches;
          left_out.push_back(absl::StrFormat("%u (frames differ from its summary)", region));
          continue;
        }
        parts.push_back(
            {.region_id = region, .tokens = rr.summary.tokens(), .tau_eff = rr.summary.tau_eff()});
        sums.insert(sums.end(), region_sums.begin(), region_sums.end());
        present += rr.summary.tokens();
      }
      if (!left_out.empty()) {
        HEDDLE_LOG(kWarning, "wan: round %" PRIu64 ": left out region(s) %s", r,
                   absl::StrJoin(left_out, ", ").c_str());
      }
      absl::Status abort;
      if (parts.empty()) {
        abort = absl::FailedPreconditionError(
            absl::StrFormat("round %u: no region contributed tokens", r));
      } else if (parts.size() < opt_.quorum.min_regions) {
        abort = absl::FailedPreconditionError(
            absl::StrFormat("round %u: %u region(s) included, the quorum is %u (left out: %s)", r,
                            parts.size(), opt_.quorum.min_regions, absl::StrJoin(left_out, ", ")));
      } else if (expected > 0 && static_cast<double>(present) < opt_.quorum.min_token_fraction *
                                                                    static_cast<double>(expected)) {
        abort = absl::FailedPreconditionError(absl::StrFormat(
            "round %u: the included regions hold %u of %u expected tokens, below the quorum's "
            "%g (left out: %s)",
            r, present, expected, opt_.quorum.min_token_fraction, absl::StrJoin(left_out, ", ")));
      }
      std::shared_ptr<GlobalAggregate> g;
      if (abort.ok()) {
        absl::StatusOr<std::shared_ptr<GlobalAggregate>> built = Decide(r, parts, sums);
        if (built.ok()) {
          g = *std::move(built);
        } else {
          abort = built.status();
        }
      }
      if (!abort.ok()) {
        HEDDLE_LOG(kWarning, "wan: round %" PRIu64 " aborted: %s", r,
                   std::string(abort.message()).c_str());
      }
      pb::Decision d = ToProto(r, g.get(), abort);
      std::optional<collective::Schedule> next;
      if (abort.ok() && opt_.schedule.measured && r % opt_.schedule.recompile_every == 0) {
        std::map<std::pair<uint32_t, uint32_t>, double> rates = rates_;
        l.unlock();  // compiling takes a while: not under mu_
        for (const auto& [id, link] : links_) {
          auto o = opt_.schedule.rate_override.find(id);
          const double rate = o != opt_.schedule.rate_override.end() ? o->second : SendRate(*link);
          if (rate > 0) rates[{opt_.region_id, id}] = rate;
        }
        absl::StatusOr<std::optional<collective::Schedule>> re =
            Recompile(r, rates, d.mutable_schedule_switch());
        if (!re.ok()) {
          HEDDLE_LOG(kWarning, "wan: round %" PRIu64 ": recompiling from measured speeds: %s", r,
                     std::string(re.status().message()).c_str());
        } else {
          next = *std::move(re);
        }
        if (!next) d.clear_schedule_switch();
        l.lock();
      }
      if (next) {
        // Installed before the decision is out: no gateway opens round r + 2 before it has
        // published r, so every gateway runs the new schedule from the same round.
        if (absl::Status st = InstallPlan(d.schedule_switch().from_round(), *next); !st.ok()) {
          d.clear_schedule_switch();
        }
      }
      // Durable before it is visible (the decision log), then out: the followers' long polls
      // answer with it from here on (WaitDecision).
      if (log_ != nullptr && !LogDecision(l, r, d)) return;  // stopping
      announced_[r] = d;
      rs.decided_at = absl::Now();
      published_cv_.notify_all();
      if (opt_.after_announce_for_testing) {
        l.unlock();
        opt_.after_announce_for_testing(r);
        l.lock();
        if (stopping_) return;
      }
      if (g != nullptr) {
        // The final frames: the preparer's patched copies (it concludes every ready region).
        auto prepared = [&] {
          for (const RegionPart& p : g->parts) {
            if (!rs.regions[p.region_id].prepared) return false;
          }
          return true;
        };
        cv_.wait(l, [&] { return stopping_ || prepared(); });
        if (stopping_) return;
        std::vector<FramePtr> provisional;  // a stored frame never changes
        for (const RegionPart& p : g->parts) {
          const RegionRound& rr = rs.regions[p.region_id];
          for (uint32_t s = 0; s < nslices_; ++s) {
            g->frames.push_back(s < rr.patched.size() ? rr.patched[s] : nullptr);
            provisional.push_back(s < rr.frames.size() ? rr.frames[s] : nullptr);
          }
        }
        // The frames the decision's digest was computed for (both from the same provisional
        // frames and totals, FrameCrcTest). The decision is out (followers publish it): it is
        // published here too, never aborted. A slot the preparer left empty, or frames that
        // do not match, are rebuilt from the provisional frames (mu_ released: whole copies).
        if (!FramesMatch(*g)) {
          ++stats_.digest_mismatches;
          HEDDLE_LOG(kWarning,
                     "wan: round %" PRIu64
                     ": the prepared final frames do not match the decision's digest %s; "
                     "rebuilding them",
                     r, Hex64(g->digest).c_str());
          l.unlock();
          RebuildFinalFrames(*g, provisional, /*all=*/FramesWhole(*g));
          l.lock();
        }
      }
      PublishLocked(r, std::move(d), std::move(g), abort);
    }
  }

  static bool FramesWhole(const GlobalAggregate& g) {
    for (const FramePtr& f : g.frames) {
      if (f == nullptr) return false;
    }
    return true;
  }
  static bool FramesMatch(const GlobalAggregate& g) {
    return FramesWhole(g) && wan_internal::GlobalDigestOfValidFrames(g) == g.digest;
  }

  // Coordinator, mu_ not held: the final frames of an announced decision, rebuilt from the
  // provisional frames with the decision's totals (the empty slots; every slot when `all`, or
  // when rebuilding the empty ones is not enough). Frames that still do not match the digest the
  // followers publish would make this gateway diverge from them: an invariant broken, the
  // process stops.
  void RebuildFinalFrames(GlobalAggregate& g, const std::vector<FramePtr>& provisional, bool all) {
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t p = 0; p < g.parts.size(); ++p) {
        const RegionPart& part = g.parts[p];
        for (uint32_t s = 0; s < g.slices; ++s) {
          const size_t i = p * g.slices + s;
          if (!all && g.frames[i] != nullptr) continue;
          g.frames[i] = nullptr;
          if (provisional[i] == nullptr) continue;
          absl::StatusOr<FramePtr> x = wan_internal::PatchValidFrameTotals(
              *provisional[i], part.tokens, wan_internal::RegionInnerSteps(part.tau_eff));
          if (x.ok()) g.frames[i] = *std::move(x);
        }
      }
      if (FramesMatch(g)) return;
      all = true;
    }
    HEDDLE_LOG(kError,
               "wan: region %u: invariant violated: the final frames rebuilt from the provisional "
               "ones do not match the announced decision's digest %s (the followers publish it); "
               "stopping the process rather than diverge",
               opt_.region_id, Hex64(g.digest).c_str());
    std::abort();
  }

  // ---- the decision log (coordinator with wan.state_dir) ----

  // Start(): opens the log and takes back what it holds: this coordinator's process identity
  // (so the followers accept its decisions), the decisions of the retained window (kept,
  // served to followers that have not published them yet; their frames are not kept, Fetch
  // answers NOT_FOUND) and the round to decide next. The region side is told the last logged
  // round is lost here (kAborted, DataLoss): this process does not hold its aggregate, and its
  // region's next round is the one after it.
  absl::Status ReplayDecisionLog() {
    HEDDLE_ASSIGN_OR_RETURN(
        log_, DecisionLog::Open(
                  opt_.state_dir,
                  {.instance = instance_, .spec_digest = spec_digest_, .region_id = opt_.region_id},
                  opt_.keep_rounds));
    // Open refused another job's or region's log (before changing it) and another process
    // holding this state_dir.
    instance_ = log_->header().instance;
    uint64_t last = 0;
    for (const LoggedDecision& rec : log_->replayed()) {
      pb::Decision d;
      if (!d.ParseFromString(rec.payload) || d.round_id() != rec.round_id) {
        return absl::DataLossError(absl::StrFormat(
            "wan.state_dir: %s: the record of round %u is not a decision of that round (its "
            "checksum is valid: written by another program?)",
            log_->path(), rec.round_id));
      }
      if (d.has_schedule_switch() && d.schedule_switch().from_round() > rec.round_id) {
        // The schedule this decision announced, as the followers learn it from the decision.
        if (absl::Status st = InstallSwitch(d.schedule_switch()); !st.ok()) {
          HEDDLE_LOG(kWarning, "wan: round %" PRIu64 ": the logged schedule switch: %s",
                     rec.round_id, std::string(st.message()).c_str());
        }
      }
      kept_[rec.round_id] = Kept{std::move(d), nullptr};  // at most keep_rounds: the log's
      last = rec.round_id;
    }
    if (last == 0) {
      HEDDLE_LOG(kInfo, "wan: region %u: new decision log %s", opt_.region_id,
                 log_->path().c_str());
      return absl::OkStatus();
    }
    published_through_ = last;
    stats_.decisions_replayed = kept_.size();
    ++stats_.rounds_lost;
    ++stats_.rounds_aborted;
    encoder_.Resolve(last, false);
    queue_.Push(last, RoundOutcome{
                          .kind = RoundOutcome::Kind::kAborted,
                          .reason = absl::DataLossError(absl::StrFormat(
                              "round %u was decided before this coordinator restarted; it "
                              "resumes from its decision log at round %u, without that round's "
                              "aggregate: resynchronize this region's model if its workers did "
                              "not apply it",
                              last, last + 1)),
                      });
    HEDDLE_LOG(kInfo,
               "wan: region %u: resumed from the decision log %s: rounds %" PRIu64 "..%" PRIu64
               " decided, the next is %" PRIu64 " (instance %s)",
               opt_.region_id, log_->path().c_str(), kept_.begin()->first, last, last + 1,
               Hex64(instance_).c_str());
    return absl::OkStatus();
  }

  // Makes round r's decision durable before any gateway can see it (DecideLoop announces it
  // right after: announced_, then PublishLocked). mu_ is released while writing (the round is
  // frozen: deciding). A write or sync that failed (Unavailable) is retried every second:
  // DecisionLog never accepts a record whose sync failed, and rewrites the retained records
  // into a new file before the retry appends, so no decision goes out unlogged. Any other error (a
  // decision too large to log) cannot be helped by retrying: the round is aborted here, never
  // published, and this coordinator decides no further round (its followers see it as down) —
  // restarting it resumes from the log. False: the decision is not to be published (stopping, or
  // that failure).
  bool LogDecision(std::unique_lock<std::mutex>& l, uint64_t r, const pb::Decision& d) {
    const std::string bytes = d.SerializeAsString();
    for (;;) {
      l.unlock();
      absl::Status st = log_->Append(r, bytes);
      l.lock();
      if (st.ok()) return true;
      if (!absl::IsUnavailable(st)) {
        HEDDLE_LOG(kError,
                   "wan: round %" PRIu64
                   ": cannot log the decision, so it is not sent; the round is aborted and this "
                   "coordinator stops deciding (restart it to resume from its log): %s",
                   r, std::string(st.message()).c_str());
        ++stats_.rounds_aborted;
        encoder_.Resolve(r, false);
        queue_.Push(r, RoundOutcome{
                           .kind = RoundOutcome::Kind::kAborted,
                           .reason = absl::InternalError(absl::StrFormat(
                               "round %u: the coordinator cannot log its decision, so it is not "
                               "sent and the coordinator stops deciding: %s",
                               r, st.message())),
                       });
        cv_.notify_all();
        return false;
      }
      HEDDLE_LOG(kError,
                 "wan: round %" PRIu64 ": cannot log the decision, so it is not sent; retrying: %s",
                 r, std::string(st.message()).c_str());
      cv_.wait_for(l, std::chrono::seconds(1), [&] { return stopping_; });
      if (stopping_) return false;
    }
  }

  // The oldest kept round from which on every kept round can be served whole (decision and, if
  // published, frames): where a (re)starting follower joins. Decisions replayed from the log
  // have no frames here. 0: nothing kept. mu_ held.
  uint64_t OldestServableLocked() const {
    if (kept_.empty()) return 0;
    uint64_t oldest = published_through_ + 1;
    for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
      if (!it->second.decision.aborted() && it->second.aggregate == nullptr) break;
      oldest = it->first;
    }
    return oldest;
  }

  // The decided aggregate of `parts`, without its frames yet: weights, and the digest from the
  // final frames' lengths and trailers (`sums`, by part then slice).
  absl::StatusOr<std::shared_ptr<GlobalAggregate>> Decide(
      uint64_t r, const std::vector<RegionPart>& parts,
      const std::vector<wan_internal::ValidFrameSum>& sums) const {
    auto g = std::make_shared<GlobalAggregate>();
    g->round_id = r;
    g->weighting = opt_.weighting;
    g->slices = nslices_;
    g->parts = parts;
    HEDDLE_ASSIGN_OR_RETURN(std::vector<double> w, GlobalWeights(g->parts, g->weighting));
    for (size_t p = 0; p < parts.size(); ++p) g->parts[p].weight = w[p];
    g->digest = wan_internal::GlobalDigestOfSums(*g, sums);
    return g;
  }

  // The aggregate of `parts` from their final frames (totals patched in): weights, digest.
  absl::StatusOr<std::shared_ptr<GlobalAggregate>> Build(
      uint64_t r, const std::vector<RegionPart>& parts,
      const std::vector<std::vector<FramePtr>>& patched) const {
    auto g = std::make_shared<GlobalAggregate>();
    g->round_id = r;
    g->weighting = opt_.weighting;
    g->slices = nslices_;
    g->parts = parts;
    HEDDLE_ASSIGN_OR_RETURN(std::vector<double> w, GlobalWeights(g->parts, g->weighting));
    for (size_t p = 0; p < parts.size(); ++p) {
      g->parts[p].weight = w[p];
      g->frames.insert(g->frames.end(), patched[p].begin(), patched[p].end());
    }
    g->digest = wan_internal::GlobalDigestOfValidFrames(*g);
    return g;
  }

  // ---- preparation (both roles) ----

  // Works ahead of the decision, off the gRPC and round threads: for every region of a round in
  // progress whose summary is here it patches the summary's totals into each frame as the frame
  // arrives (the frames that came before the summary when it comes: the last slice's frame,
  // which the summary usually overtakes, is all that is left to do when the region is ready);
  // once a region is ready (summary and every frame) it checks the frames against the
  // summary's digest (trailers only, no frame bytes read) and marks it prepared — what the
  // coordinator decides with, and what a follower publishes. On a follower, once every region
  // of its next round is prepared, it builds the aggregate the coordinator decides when nobody
  // is late (`speculative`). Nothing here is published: a follower publishes only the
  // coordinator's decision, and uses the speculative aggregate only when its parts, weights and
  // digest are the decision's, bit for bit.
  void PrepareLoop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stopping_) {
      // Oldest round first: a ready region to conclude, else a frame to patch.
      uint64_t r = 0;
      uint32_t region = 0, slice = 0;
      bool conclude = false;
      for (auto& [id, rs] : rounds_) {
        for (auto& [reg, rr] : rs.regions) {
          if (rr.prepared || (rr.finished && rr.summary.tokens() == 0)) continue;
          uint32_t todo = nslices_;
          for (uint32_t s = 0; s < nslices_ && todo == nslices_; ++s) {
            if (StageableLocked(rr, s)) todo = s;
          }
          if (todo != nslices_) {
            r = id, region = reg, slice = todo;
            break;
          }
          // Concluded when no frame is being patched (by the thread that patched the last).
          if (RegionReadyLocked(rs, reg) &&
              std::find(rr.patching.begin(), rr.patching.end(), true) == rr.patching.end()) {
            r = id, region = reg, conclude = true;
            break;
          }
        }
        if (r != 0) break;
      }
      if (r != 0 && conclude) {
        RegionRound& rr = rounds_[r].regions[region];
        rr.prepared = true;
        bool whole = !rr.patch_failed && rr.patched.size() == nslices_;
        for (uint32_t s = 0; whole && s < nslices_; ++s) whole = rr.patched[s] != nullptr;
        rr.digest_ok = whole && wan_internal::FramesDigestOfValidFrames(rr.frames) ==
                                    rr.summary.frames_digest();
        if (!rr.digest_ok) rr.patched.clear();
        rr.staged.clear();
        RoundState& rs = rounds_[r];
        bool all = true;
        for (uint32_t id : regions_) {
          auto x = rs.regions.find(id);
          all = all && RegionReadyLocked(rs, id) &&
                (x->second.prepared || x->second.summary.tokens() == 0);
        }
        if (all) rs.all_prepared_at = absl::Now();
        cv_.notify_all();
        continue;
      }
      if (r != 0) {
        StageSlot(l, r, region, slice);
        continue;
      }
      if (!is_coordinator_ && Speculate(l)) continue;
      cv_.wait(l);
    }
  }

  // Whether slice `slice` of a region can be copied now: its frame is here, not copied nor
  // being copied nor taken by Assemble(), the region not concluded nor without tokens. mu_ held.
  bool StageableLocked(RegionRound& rr, uint32_t slice) {
    if (rr.prepared || rr.patch_failed || (rr.finished && rr.summary.tokens() == 0)) return false;
    if (rr.patched.empty()) {
      rr.patched.resize(nslices_);
      rr.staged.resize(nslices_);
      rr.patching.resize(nslices_);
      rr.taken.resize(nslices_);
    }
    return slice < rr.frames.size() && rr.frames[slice] != nullptr &&
           rr.patched[slice] == nullptr && rr.staged[slice] == nullptr && !rr.patching[slice] &&
           !rr.taken[slice];
  }

  // Copies one frame (StageableLocked), mu_ held and released while copying (the slot marked
  // meanwhile), then gives it the totals if the summary is here.
  void StageSlot(std::unique_lock<std::mutex>& l, uint64_t r, uint32_t region, uint32_t slice) {
    RegionRound& rr = rounds_[r].regions[region];
    const FramePtr frame = rr.frames[slice];  // a stored frame never changes
    rr.patching[slice] = true;
    l.unlock();
    auto copy = std::make_shared<std::vector<uint8_t>>(frame->begin(), frame->end());
    l.lock();
    auto it = rounds_.find(r);  // published (and erased) meanwhile: nothing to keep
    if (it == rounds_.end()) return;
    RegionRound& now = it->second.regions[region];
    now.patching[slice] = false;
    if (now.prepared || now.frames[slice] != frame) return;
    now.staged[slice] = std::move(copy);
    FinalizeLocked(now);
  }

  // With the region's summary here, writes its totals into every copied frame (the header and
  // the trailer, derived from the provisional frame's: no body read) and moves it to `patched`.
  // mu_ held.
  void FinalizeLocked(RegionRound& rr) {
    if (rr.prepared || !rr.finished || rr.summary.tokens() == 0 || rr.patch_failed) return;
    const uint32_t steps = wan_internal::RegionInnerSteps(rr.summary.tau_eff());
    for (size_t s = 0; s < rr.staged.size(); ++s) {
      if (rr.staged[s] == nullptr) continue;
      if (!wan_internal::WriteValidFrameTotals(*rr.frames[s], *rr.staged[s], rr.summary.tokens(),
                                               steps)
               .ok()) {
        rr.patch_failed = true;
        return;
      }
      rr.patched[s] = std::move(rr.staged[s]);
      rr.staged[s] = nullptr;
    }
  }

  // Follower, mu_ held (released while building): the aggregate of the next round as the
  // coordinator decides it when every region is ready before its timeout. False: nothing to do.
  bool Speculate(std::unique_lock<std::mutex>& l) {
    const uint64_t r = published_through_ + 1;
    auto it = rounds_.find(r);
    if (it == rounds_.end() || it->second.speculated) return false;
    RoundState& rs = it->second;
    std::vector<RegionPart> parts;
    std::vector<std::vector<FramePtr>> frames;
    for (uint32_t region : regions_) {
      auto rr = rs.regions.find(region);
      if (rr == rs.regions.end() || !RegionReadyLocked(rs, region)) return false;
      if (rr->second.summary.tokens() == 0) continue;
      if (!rr->second.prepared) return false;
      if (!rr->second.digest_ok) continue;
      parts.push_back({.region_id = region,
                       .tokens = rr->second.summary.tokens(),
                       .tau_eff = rr->second.summary.tau_eff()});
      frames.push_back(rr->second.patched);
    }
    rs.speculated = true;
    if (parts.empty()) return true;
    rs.speculating = true;
    l.unlock();
    absl::StatusOr<std::shared_ptr<GlobalAggregate>> g = Build(r, parts, frames);
    l.lock();
    it = rounds_.find(r);
    if (it != rounds_.end()) {
      it->second.speculating = false;
      if (g.ok()) it->second.speculative = *std::move(g);
      cv_.notify_all();
    }
    return true;
  }

  // ---- follower ----

  void FollowLoop() {
    Link& coord = *links_.at(coordinator_);
    bool started = false;
    for (;;) {
      std::shared_ptr<grpc::Channel> ch = Connect(coord);
      if (ch == nullptr) return;
      if (!started) {
        started = true;
        uint64_t oldest;
        {
          std::lock_guard<std::mutex> lk(coord.mu);
          oldest = coord.hello.oldest_kept();
        }
        std::lock_guard<std::mutex> l(mu_);
        if (published_through_ == 0 && oldest > 1) {
          // A gateway that (re)starts while the job runs: rounds before the coordinator's
          // oldest kept one are gone. A round the region already opened among them ends
          // aborted (its workers restore their residuals); then the kept rounds follow.
          const uint64_t open = encoder_.open_round();
          if (open != 0 && open < oldest) {
            PublishLocked(open, ToProto(open, nullptr, {}), nullptr,
                          absl::DataLossError(absl::StrFormat(
                              "round %u was decided before this gateway joined and is no longer "
                              "kept by the coordinator",
                              open)),
                          /*lost=*/true);
          }
          published_through_ = std::max(published_through_, oldest - 1);
          encoder_.Resolve(published_through_, false);
          HEDDLE_LOG(kInfo,
                     "wan: region %u joins at round %" PRIu64
                     " (the coordinator keeps "
                     "rounds from %" PRIu64 ")",
                     opt_.region_id, published_through_ + 1, oldest);
        }
      }
      const uint64_t r = PublishedThrough() + 1;
      pb::DecisionRequest req;
      req.set_round_id(r);
      req.set_wait_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(opt_.decision_poll)));
      pb::DecisionReply reply;
      grpc::Status st;
      {
        grpc::ClientContext ctx;
        Prepare(ctx, opt_.decision_poll + opt_.rpc_timeout, coordinator_);
        ScopedCall reg(this, &ctx);
        st = pb::Peer::NewStub(ch)->WaitDecision(&ctx, req, &reply);
      }
      if (!st.ok()) {
        if (Stopping()) return;
        MarkFailed(coord, FromGrpc(st, "wait for a decision"));
        continue;
      }
      // The same coordinator instance behind what this gateway published: it lost decisions
      // (restarted with a decision log that was cut or replaced) and would decide those rounds
      // again, perhaps differently.
      if (coordinator_instance_ != 0 && reply.instance() == coordinator_instance_ &&
          reply.published_through() + 1 < r) {
        coordinator_lost_decisions_ = true;  // for good: it may decide those rounds again
      }
      if (coordinator_lost_decisions_) {
        {
          std::lock_guard<std::mutex> l(mu_);
          ++stats_.coordinator_restarts;
        }
        HEDDLE_LOG(kError,
                   "wan: region %u: the coordinator (region %u) was seen behind the rounds this "
                   "gateway published (now at round %" PRIu64 ", this gateway at round %" PRIu64
                   "): it lost decisions (a decision log cut or replaced); refusing its "
                   "decisions (restart every gateway of the job from a checkpoint)",
                   opt_.region_id, coordinator_, reply.published_through(), r - 1);
        MarkFailed(coord, absl::FailedPreconditionError("coordinator lost decisions"));
        continue;
      }
      if (reply.state() == pb::DecisionReply::PENDING) continue;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (auto it = rounds_.find(r); it != rounds_.end()) it->second.decided_at = absl::Now();
      }
      // Decisions must come from one coordinator instance: a restarted coordinator lost the
      // rounds it decided, and could decide one of them again differently.
      if (coordinator_instance_ == 0) coordinator_instance_ = reply.instance();
      if (reply.instance() != coordinator_instance_) {
        {
          std::lock_guard<std::mutex> l(mu_);
          ++stats_.coordinator_restarts;
        }
        HEDDLE_LOG(kError,
                   "wan: region %u: the coordinator (region %u) restarted after this gateway "
                   "published its decisions up to round %" PRIu64
                   "; refusing the new "
                   "instance's decisions (restart every gateway of the job from a checkpoint)",
                   opt_.region_id, coordinator_, r - 1);
        MarkFailed(coord, absl::FailedPreconditionError("coordinator restarted"));
        continue;
      }
      if (reply.state() == pb::DecisionReply::EVICTED) {
        std::lock_guard<std::mutex> l(mu_);
        if (published_through_ + 1 != r) continue;
        HEDDLE_LOG(kError,
                   "wan: region %u: round %" PRIu64
                   " is no longer kept by the "
                   "coordinator (oldest kept %" PRIu64 "); this region's model missed it",
                   opt_.region_id, r, reply.oldest_kept());
        PublishLocked(r, ToProto(r, nullptr, {}), nullptr,
                      absl::DataLossError(absl::StrFormat(
                          "round %u was decided while this gateway was cut off and is no longer "
                          "kept (oldest kept: %u); resynchronize the region's model",
                          r, reply.oldest_kept())),
                      /*lost=*/true);
        continue;
      }
      const pb::Decision& d = reply.decision();
      if (d.round_id() != r) {
        malformed_.fetch_add(1, std::memory_order_relaxed);
        MarkFailed(coord, absl::DataLossError(absl::StrFormat(
                              "asked for round %u's decision, got round %u's", r, d.round_id())));
        continue;
      }
      if (d.aborted()) {
        std::lock_guard<std::mutex> l(mu_);
        if (published_through_ + 1 != r) continue;
        PublishLocked(r, d, nullptr, absl::AbortedError(d.reason()));
        continue;
      }
      absl::StatusOr<std::shared_ptr<GlobalAggregate>> g = Assemble(ch, d);
      if (!g.ok() && g.status().code() == absl::StatusCode::kNotFound) {
        // Frames this gateway lacks are no longer kept by the coordinator (evicted meanwhile,
        // or the round was decided before it restarted from its decision log): the round is
        // lost here, as an evicted one.
        std::lock_guard<std::mutex> l(mu_);
        if (published_through_ + 1 != r) continue;
        HEDDLE_LOG(kError, "wan: region %u: round %" PRIu64 " cannot be assembled here: %s",
                   opt_.region_id, r, std::string(g.status().message()).c_str());
        PublishLocked(r, ToProto(r, nullptr, {}), nullptr,
                      absl::DataLossError(absl::StrFormat(
                          "round %u: the coordinator no longer holds frames this gateway lacks "
                          "(%s); resynchronize the region's model",
                          r, g.status().message())),
                      /*lost=*/true);
        continue;
      }
      if (!g.ok()) {
        if (Stopping()) return;
        HEDDLE_LOG(kWarning, "wan: region %u: round %" PRIu64 " not published yet: %s",
                   opt_.region_id, r, std::string(g.status().message()).c_str());
        MarkFailed(coord, g.status());
        continue;
      }
      if (d.has_schedule_switch()) ApplySwitch(r, d.schedule_switch());
      std::lock_guard<std::mutex> l(mu_);
      if (published_through_ + 1 != r) continue;
      PublishLocked(r, d, *std::move(g), {});
    }
  }

  // The aggregate the decision describes, from the frames held here and, for the rest, from
  // the coordinator; refused unless its digest is the decision's.
  absl::StatusOr<std::shared_ptr<GlobalAggregate>> Assemble(
      const std::shared_ptr<grpc::Channel>& ch, const pb::Decision& d) {
    const uint64_t r = d.round_id();
    auto g = std::make_shared<GlobalAggregate>();
    g->round_id = r;
    g->weighting = static_cast<Weighting>(d.weighting());
    if (d.weighting() > 1) {
      return absl::DataLossError(
          absl::StrFormat("round %u: unknown weighting %u", r, d.weighting()));
    }
    g->slices = nslices_;
    for (const pb::Part& p : d.parts()) {
      if (!std::binary_search(regions_.begin(), regions_.end(), p.region_id())) {
        return absl::DataLossError(
            absl::StrFormat("round %u: the decision includes unknown region %u", r, p.region_id()));
      }
      if (p.tokens() < 1) {  // its frames would be patched with totals no frame may carry
        malformed_.fetch_add(1, std::memory_order_relaxed);
        return absl::DataLossError(absl::StrFormat(
            "round %u: the decision includes region %u with 0 tokens (a part weighs at least "
            "one token)",
            r, p.region_id()));
      }
      g->parts.push_back({.region_id = p.region_id(),
                          .tokens = p.tokens(),
                          .tau_eff = p.tau_eff(),
                          .weight = p.weight()});
    }
    HEDDLE_ASSIGN_OR_RETURN(std::vector<double> w, GlobalWeights(g->parts, g->weighting));
    for (size_t p = 0; p < w.size(); ++p) {
      if (std::bit_cast<uint64_t>(w[p]) != std::bit_cast<uint64_t>(g->parts[p].weight)) {
        return absl::DataLossError(absl::StrFormat(
            "round %u region %u: the decision's weight %.17g differs from this gateway's %.17g", r,
            g->parts[p].region_id, g->parts[p].weight, w[p]));
      }
    }
    // Prepared ahead (PrepareLoop): the same parts, weights and digest, bit for bit, is the
    // decided aggregate.
    auto same = [&](const GlobalAggregate& s) {
      if (s.digest != d.digest() || s.weighting != g->weighting ||
          s.parts.size() != g->parts.size()) {
        return false;
      }
      for (size_t p = 0; p < s.parts.size(); ++p) {
        const RegionPart &a = s.parts[p], &b = g->parts[p];
        if (a.region_id != b.region_id || a.tokens != b.tokens ||
            std::bit_cast<uint64_t>(a.tau_eff) != std::bit_cast<uint64_t>(b.tau_eff) ||
            std::bit_cast<uint64_t>(a.weight) != std::bit_cast<uint64_t>(b.weight)) {
          return false;
        }
      }
      return true;
    };
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = rounds_.find(r);
      if (it != rounds_.end() && it->second.speculative != nullptr &&
          same(*it->second.speculative)) {
        ++stats_.rounds_prepared;
        return it->second.speculative;
      }
    }
    // Frames still on their way (from their own region, or relayed) come faster than again from
    // the coordinator (over what may be the longest link): wait while they keep arriving, and
    // fetch only what stops coming for fetch_grace (a cut link, a peer that died).
    {
      // Progress is this round's new, valid frames' bytes received from any peer (a schedule
      // may route a region's frames over another gateway), counted in StoreFrame: duplicates
      // and refused frames do not stretch the wait, and the next round's pushes are not
      // progress for this one. mu_ held.
      auto in_flight = [&]() -> uint64_t {
        auto it = rounds_.find(r);
        return it == rounds_.end() ? 0 : it->second.bytes_received;
      };
      std::unique_lock<std::mutex> l(mu_);
      auto have_all = [&] {
        auto it = rounds_.find(r);
        if (it == rounds_.end()) return true;
        for (const RegionPart& part : g->parts) {
          auto rr = it->second.regions.find(part.region_id);
          if (rr == it->second.regions.end() || rr->second.have != nslices_) return false;
        }
        return true;
      };
      uint64_t seen = in_flight();
      absl::Time progress_at = absl::Now();
      auto speculated = [&] {
        auto it = rounds_.find(r);
        return it != rounds_.end() && it->second.speculative != nullptr &&
               same(*it->second.speculative);
      };
      while (!stopping_ && !have_all()) {
        const absl::Time now = absl::Now();
        if (const uint64_t b = in_flight(); b != seen) {
          seen = b;
          progress_at = now;
        } else if (now - progress_at >= opt_.fetch_grace) {
          break;
        }
        cv_.wait_until(l, absl::ToChronoTime(now + absl::Milliseconds(20)));
      }
      // Every region ready here: the preparer is building the speculative aggregate, or has.
      auto all_ready = [&] {
        auto it = rounds_.find(r);
        if (it == rounds_.end()) return false;
        for (uint32_t region : regions_) {
          if (!RegionReadyLocked(it->second, region)) return false;
        }
        return true;
      };
      if (all_ready()) {
        cv_.wait(l, [&] {
          auto it = rounds_.find(r);
          return stopping_ || it == rounds_.end() ||
                 (it->second.speculated && !it->second.speculating);
        });
      }
      if (speculated()) {
        ++stats_.rounds_prepared;
        return rounds_.find(r)->second.speculative;
      }
    }
    // Frames held here, patched (by the preparer when the region's summary has the decision's
    // totals); the rest fetched.
    std::vector<FramePtr> provisional(g->parts.size() * size_t{nslices_});
    std::vector<FramePtr> prepared(g->parts.size() * size_t{nslices_});
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = rounds_.find(r);
      if (it != rounds_.end()) {
        for (size_t p = 0; p < g->parts.size(); ++p) {
          auto rr = it->second.regions.find(g->parts[p].region_id);
          if (rr == it->second.regions.end() || rr->second.frames.empty()) continue;
          RegionRound& x = rr->second;
          const RegionPart& part = g->parts[p];
          // The preparer's copies, also of a region not concluded yet (each is its frame with
          // the summary's totals; the digest below checks the whole).
          const bool totals =
              x.finished && x.summary.tokens() == part.tokens &&
              std::bit_cast<uint64_t>(x.summary.tau_eff()) == std::bit_cast<uint64_t>(part.tau_eff);
          for (uint32_t s = 0; s < nslices_; ++s) {
            FramePtr& out = prepared[p * nslices_ + s];
            provisional[p * nslices_ + s] = x.frames[s];
            if (totals && s < x.patched.size()) out = x.patched[s];
            // A copy still waiting for its region's summary (which has not come, or came after
            // the decision): the decision's totals go into it here, a header and a trailer.
            if (out == nullptr && s < x.staged.size() && x.staged[s] != nullptr &&
                x.frames[s] != nullptr) {
              std::shared_ptr<std::vector<uint8_t>> copy = std::move(x.staged[s]);
              x.staged[s] = nullptr;
              x.taken[s] = true;  // not copied again by the preparers
              if (wan_internal::WriteValidFrameTotals(*x.frames[s], *copy, part.tokens,
                                                      wan_internal::RegionInnerSteps(part.tau_eff))
                      .ok()) {
                out = std::move(copy);
              }
            }
          }
        }
      }
    }
    g->frames.resize(provisional.size());
    for (int attempt = 0; attempt < 2; ++attempt) {
      for (size_t p = 0; p < g->parts.size(); ++p) {
        const RegionPart& part = g->parts[p];
        std::vector<uint32_t> missing;
        for (uint32_t s = 0; s < nslices_; ++s) {
          const FramePtr& f = provisional[p * nslices_ + s];
          absl::StatusOr<FramePtr> patched =
              prepared[p * nslices_ + s] != nullptr ? prepared[p * nslices_ + s]
              : f == nullptr                        ? absl::NotFoundError("")
                                                    : wan_internal::PatchValidFrameTotals(
                                                          *f, part.tokens, wan_internal::RegionInnerSteps(part.tau_eff));
          if (patched.ok()) {
            g->frames[p * nslices_ + s] = *std::move(patched);
          } else {
            missing.push_back(s);
          }
        }
        if (!missing.empty()) {
          HEDDLE_RETURN_IF_ERROR(Fetch(ch, *g, p, missing));
        }
      }
      g->digest = wan_internal::GlobalDigestOfValidFrames(*g);
      if (g->digest == d.digest()) return g;
      {
        std::lock_guard<std::mutex> l(mu_);
        ++stats_.digest_mismatches;
      }
      HEDDLE_LOG(kWarning,
                 "wan: region %u: round %" PRIu64
                 ": assembled digest %s, decided %s; "
                 "fetching every frame from the coordinator",
                 opt_.region_id, r, Hex64(g->digest).c_str(), Hex64(d.digest()).c_str());
      std::fill(provisional.begin(), provisional.end(), nullptr);
      std::fill(prepared.begin(), prepared.end(), nullptr);
    }
    return absl::DataLossError(absl::StrFormat(
        "round %u: the frames from the coordinator do not match its decision's digest %s", r,
        Hex64(d.digest())));
  }

  absl::Status Fetch(const std::shared_ptr<grpc::Channel>& ch, GlobalAggregate& g, size_t p,
                     const std::vector<uint32_t>& slices) {
    const RegionPart& part = g.parts[p];
    pb::FetchRequest req;
    req.set_round_id(g.round_id);
    req.set_region_id(part.region_id);
    for (uint32_t s : slices) req.add_slices(s);
    grpc::ClientContext ctx;
    Prepare(ctx, opt_.push_timeout, coordinator_);
    ScopedCall reg(this, &ctx);
    auto stub = pb::Peer::NewStub(ch);
    std::unique_ptr<grpc::ClientReader<pb::FrameChunk>> reader = stub->FetchFrames(&ctx, req);
    Link& coord = *links_.at(coordinator_);
    pb::FrameChunk c;
    size_t next = 0;
    std::vector<uint8_t> buf;
    uint64_t got = 0;
    auto fail = [&](std::string msg) {
      ctx.TryCancel();
      reader->Finish();
      malformed_.fetch_add(1, std::memory_order_relaxed);
      return absl::DataLossError(
          absl::StrFormat("round %u region %u: fetch: %s", g.round_id, part.region_id, msg));
    };
    while (reader->Read(&c)) {
      if (next >= slices.size()) return fail("more frames than asked for");
      const uint32_t s = slices[next];
      const uint64_t want = FrameBytes(slices_[s].count, spec_.chunk_size);
      if (c.round_id() != g.round_id || c.region_id() != part.region_id || c.slice() != s ||
          c.frame_bytes() != want || c.offset() != got || c.data().empty() ||
          c.data().size() > want - got) {
        return fail(absl::StrFormat(
            "unexpected chunk (round %u region %u slice %u offset %u, "
            "%u bytes) while reading slice %u at offset %u",
            c.round_id(), c.region_id(), c.slice(), c.offset(), c.data().size(), s, got));
      }
      if (got == 0) buf.assign(want, 0);
      std::memcpy(buf.data() + got, c.data().data(), c.data().size());
      got += c.data().size();
      coord.bytes_received.fetch_add(c.data().size(), std::memory_order_relaxed);
      if (got < want) continue;
      got = 0;
      absl::StatusOr<FrameView> f = ParseFrame(buf);
      absl::Status check =
          f.ok() ? CheckFrameForSlice(*f, spec_, slices_[s], g.round_id, part.region_id)
                 : f.status();
      if (check.ok() && (f->header().token_count != part.tokens ||
                         f->header().inner_steps != wan_internal::RegionInnerSteps(part.tau_eff))) {
        check = absl::InvalidArgumentError("token count or inner steps differ from the decision");
      }
      if (!check.ok()) return fail(absl::StrFormat("slice %u: %s", s, check.message()));
      g.frames[p * nslices_ + s] = std::make_shared<const std::vector<uint8_t>>(std::move(buf));
      buf = {};
      ++next;
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.frames_fetched;
    }
    grpc::Status st = reader->Finish();
    if (!st.ok()) return FromGrpc(st, absl::StrFormat("fetch of round %u", g.round_id));
    if (next != slices.size()) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      return absl::DataLossError(
          absl::StrFormat("round %u region %u: fetch returned %u of %u "
                          "frames",
                          g.round_id, part.region_id, next, slices.size()));
    }
    return absl::OkStatus();
  }

  const ModelSpec spec_;
  const WanOptions opt_;
  const uint64_t spec_digest_;
  const std::vector<SliceRef> slices_;
  const uint32_t nslices_;
  std::vector<uint32_t> regions_;          // every configured region, increasing
  std::map<uint32_t, WanPeer> peer_auth_;  // by region: its token and certificate name
  uint32_t coordinator_ = 0;
  bool is_coordinator_ = false;
  wan_internal::RegionEncoder encoder_;
  // Fixed by Start(): the schedule run for the exchange and this gateway's part of it.
  collective::Schedule schedule_;
  uint64_t schedule_digest_ = 0;  // the configured schedule's: what Hello compares
  uint64_t slot_bytes_ = 0;       // one region's frames of a round
  // The schedules in use by round: the configured one from round 0, then those switched to from
  // measured speeds, by increasing from_round.
  mutable std::mutex plan_mu_;  // after mu_ and the links' mutexes, never before
  std::vector<PlanAt> plans_;
  std::atomic<uint64_t> schedule_switches_{0};
  // Coordinator, wan.schedule measured: the send rates the gateways reported, (src, dst) → B/s.
  std::map<std::pair<uint32_t, uint32_t>, double> rates_;

  std::shared_ptr<grpc::ChannelCredentials> client_creds_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::map<uint32_t, std::unique_ptr<Link>> links_;  // fixed after Start()

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Only the coordinator's WaitDecision and FetchFrames handlers wait on it, for a decision
  // announced or published (or Stop): the frames and summaries that wake cv_ many times a round
  // do not wake them.
  std::condition_variable published_cv_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::map<uint64_t, RoundState> rounds_;
  std::map<uint64_t, Kept> kept_;
  // Coordinator: decisions sent out and not yet published here (their final frames are being
  // patched); WaitDecision answers with them.
  std::map<uint64_t, pb::Decision> announced_;
  uint64_t published_through_ = 0;
  // This process's identity in decisions; a coordinator with a decision log keeps the first
  // one across restarts (ReplayDecisionLog, before the server starts).
  uint64_t instance_ = std::random_device{}() * 0x100000001ull ^ std::random_device{}() ^
                       static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  std::unique_ptr<DecisionLog> log_;   // coordinator with wan.state_dir; decider thread only
  uint64_t coordinator_instance_ = 0;  // follower thread only
  // Follower thread only: the coordinator (same instance) was seen behind what this gateway
  // published; its decisions are refused from then on.
  bool coordinator_lost_decisions_ = false;
  std::map<uint32_t, uint64_t> last_tokens_;
  WanStats stats_;
  uint64_t stats_out_of_window_ = 0;

  std::atomic<uint64_t> auth_failures_{0}, handshake_failures_{0}, malformed_{0}, duplicates_{0};

  std::mutex calls_mu_;
  std::set<grpc::ClientContext*> calls_;

  std::thread round_thread_;
  // Two: the copies of a region whose frames all came before its summary are the round's tail
  // (16.9 MB on the 134 M-value model), and two threads copy them on both cores (and with twice
  // the share of a loaded machine's CPU).
  std::array<std::thread, 2> prepare_threads_;
  wan_internal::OutcomeQueue queue_;
};

}  // namespace

absl::Status ValidateWanOptions(const WanOptions& o) {
  if (o.listen_address.empty()) {
    return absl::InvalidArgumentError("wan.listen: missing (e.g. 0.0.0.0:7443)");
  }
  std::set<uint32_t> seen = {o.region_id};
  for (size_t i = 0; i < o.peers.size(); ++i) {
    if (!seen.insert(o.peers[i].region_id).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "wan.peers[%u].region: region %u appears twice (or is this gateway's own region)", i,
          o.peers[i].region_id));
    }
  }
  if (o.coordinator != 0 && seen.count(o.coordinator) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "wan.coordinator: region %u is neither this gateway's region nor one of its peers",
        o.coordinator));
  }
  if (o.coordinator_auto && o.schedule.topology_file.empty() && o.schedule.topology_yaml.empty()) {
    // Without a topology every link looks the same and "auto" would quietly pick the lowest
    // region id: refuse rather than pretend to have chosen.
    return absl::InvalidArgumentError(
        "wan.coordinator: auto needs wan.topology (the links' latency and bandwidth it chooses "
        "from); set wan.topology, or name the coordinator's region in wan.coordinator");
  }
  if (o.streams_per_peer < 1 || o.streams_per_peer > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("wan.streams_per_peer: %u; must be 1..64", o.streams_per_peer));
  }
  if (o.wan_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("wan.wan_timeout: must be positive");
  }
  if (o.quorum.min_regions < 1 || o.quorum.min_regions > o.peers.size() + 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("wan.quorum.min_regions: %u; must be 1..%u (the configured regions)",
                        o.quorum.min_regions, o.peers.size() + 1));
  }
  if (!(o.quorum.min_token_fraction >= 0.0 && o.quorum.min_token_fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "wan.quorum.min_token_fraction: %g; must be in [0, 1]", o.quorum.min_token_fraction));
  }
  const int tls_set = !o.tls.cert_file.empty() + !o.tls.key_file.empty() + !o.tls.ca_file.empty();
  if (tls_set != 0 && tls_set != 3) {
    return absl::InvalidArgumentError("wan.tls: cert, key and ca must all be set (or none)");
  }
  if (o.chunk_bytes < 4096 || o.chunk_bytes > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "wan.chunk_bytes: %u; must be from 4096 to %u", o.chunk_bytes, kMaxChunkBytes));
  }
  if (o.keep_rounds < 1) return absl::InvalidArgumentError("wan.keep_rounds: must be at least 1");
  if (o.rpc_timeout <= absl::ZeroDuration() || o.push_timeout <= absl::ZeroDuration() ||
      o.decision_poll <= absl::ZeroDuration() || o.backoff_min <= absl::ZeroDuration() ||
      o.backoff_max < o.backoff_min) {
    return absl::InvalidArgumentError(
        "wan: rpc_timeout, push_timeout, decision_poll and backoff must be positive");
  }
  auto printable = [](const std::string& t) {
    return std::all_of(t.begin(), t.end(), [](char ch) { return ch >= 0x21 && ch <= 0x7e; });
  };
  if (!printable(o.token)) {
    return absl::InvalidArgumentError(
        "wan.token: must be printable ASCII without spaces (it goes into gRPC metadata)");
  }
  for (size_t i = 0; i < o.peers.size(); ++i) {
    if (!printable(o.peers[i].token)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "wan.peers[%u].token: must be printable ASCII without spaces (it goes into gRPC "
          "metadata)",
          i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GrpcExchange>> StartGrpcExchange(const ModelSpec& spec,
                                                                const WanOptions& options) {
  HEDDLE_RETURN_IF_ERROR(ValidateModelSpec(spec));
  HEDDLE_RETURN_IF_ERROR(ValidateWanOptions(options));
  auto ex = std::make_unique<Exchange>(spec, options);
  HEDDLE_RETURN_IF_ERROR(ex->Start());
  return std::unique_ptr<GrpcExchange>(std::move(ex));
}

absl::StatusOr<std::unique_ptr<WanExchange>> NewGrpcExchange(const ModelSpec& spec,
                                                             const WanOptions& options) {
  HEDDLE_ASSIGN_OR_RETURN(std::unique_ptr<GrpcExchange> ex, StartGrpcExchange(spec, options));
  return std::unique_ptr<WanExchange>(std::move(ex));
}

}  // namespace heddle::relay
