#include "dataplane/relay/client/client.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "dataplane/relay/codec/encoder.h"
#include "dataplane/relay/round/slice_digest.h"
#include "dataplane/relay/service/proto_convert.h"
#include "dataplane/relay/service/relay.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"

namespace heddle::relay {
namespace {

// The relay's chunks are at most 4 MiB; leave room for the message framing.
constexpr int kMaxReceiveBytes = (4 << 20) + (1 << 20);

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("%s %s: cannot open", what, path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

WorkerPlan FromProto(const v1::WorkerPlan& p) {
  return {.valid = p.valid(),
          .version = p.version(),
          .batch_size = p.batch_size(),
          .inner_steps = p.inner_steps(),
          .seq_len = p.seq_len(),
          .tokens = p.tokens(),
          .predicted_compute_s = p.predicted_compute_s(),
          .target_round_s = p.target_round_s()};
}

// e ← e + sign·m per chunk for the chunks of the encoder's last Encode() whose magnitude is
// finite: undoes the residual update of an encode whose frame is not sent.
void RestoreLastEncode(SignEncoder& enc) {
  const SignKernels& k = ActiveKernels();
  std::span<float> e = enc.mutable_error();
  const auto signs = reinterpret_cast<const uint8_t*>(enc.signs().data());
  const uint64_t c = enc.chunk_size();
  for (uint64_t ch = 0; ch < enc.magnitudes().size(); ++ch) {
    const float m = enc.magnitudes()[ch];
    if (!std::isfinite(m)) continue;
    const uint64_t begin = ch * c;
    const uint64_t n = std::min<uint64_t>(c, enc.elements() - begin);
    k.accumulate(e.data() + begin, signs + begin / 8, n, m);
  }
}

}  // namespace

struct RelayClient::Impl {
  RelayClientOptions options;
  WorkerInfo me;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Relay::Stub> stub;
  ModelSpec spec;
  std::vector<SliceRef> slices;
  std::vector<SignEncoder> encoders;  // one per slice: the error-feedback residuals
  uint32_t sender_id = 0;
  uint32_t region_id = 0;
  uint64_t next_round = 1;
  uint32_t max_chunk_bytes = 4u << 20;
  WorkerPlan plan;
  bool left = false;
  // The frames pushed (or attempted) per round, until its pull settles whether the relay used
  // them. `restored`: already put back into the residual (the push failed).
  struct Sent {
    std::vector<std::vector<uint8_t>> frames;
    bool restored = false;
  };
  std::map<uint64_t, Sent> sent;

  void Prepare(grpc::ClientContext& ctx, absl::Duration timeout) const {
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    if (!options.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options.token);
  }

  absl::Status Error(const char* rpc, const grpc::Status& s) const {
    std::string msg = absl::StrFormat("relay %s %s: %s", options.address, rpc, s.error_message());
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      msg += " (is heddle-relay running there, and TLS set the same on both ends?)";
    } else if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      msg += " (the call's deadline passed)";
    }
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), msg);
  }

  // The push stream of one round: a header, then every frame in chunks.
  grpc::Status Stream(uint64_t round, const std::vector<std::vector<uint8_t>>& frames) {
    grpc::ClientContext ctx;
    Prepare(ctx, options.push_timeout);
    v1::PushResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::PushChunk>> w = stub->Push(&ctx, &resp);
    v1::PushChunk m;
    m.set_sender_id(sender_id);
    m.set_round_id(round);
    bool ok = w->Write(m);
    for (size_t i = 0; ok && i < frames.size(); ++i) {
      const std::vector<uint8_t>& f = frames[i];
      for (size_t off = 0; ok && off < f.size(); off += max_chunk_bytes) {
        v1::PushChunk c;
        c.set_slice(i);
        if (off == 0) c.set_frame_bytes(f.size());
        c.set_data(f.data() + off, std::min<size_t>(max_chunk_bytes, f.size() - off));
        ok = w->Write(c);
      }
    }
    if (ok) w->WritesDone();
    return w->Finish();
  }

  // e += w · decode(frame) per slice: w = +1 puts a sent frame back into the residual, −1 takes
  // it out again.
  void Move(Sent& s, double w) {
    for (size_t i = 0; i < s.frames.size() && i < encoders.size(); ++i) {
      absl::StatusOr<FrameView> f = ParseFrame(s.frames[i]);
      if (f.ok()) AccumulateFrame(*f, w, encoders[i].mutable_error());
    }
    s.restored = w > 0;
  }

  // Adds (sign +1) or removes (sign −1) the round's sent frames to/from the residuals.
  absl::Status Settle(uint64_t round, bool used) {
    auto it = sent.find(round);
    if (it == sent.end()) return absl::OkStatus();
    Sent& s = it->second;
    double w = 0;
    if (!used && !s.restored) w = 1.0;  // not used: take it back
    if (used && s.restored) w = -1.0;   // taken after all (the push's reply was lost)
    if (w != 0) {
      for (size_t i = 0; i < s.frames.size() && i < encoders.size(); ++i) {
        absl::StatusOr<FrameView> f = ParseFrame(s.frames[i]);
        if (!f.ok()) return f.status();
        AccumulateFrame(*f, w, encoders[i].mutable_error());
      }
    }
    sent.erase(sent.begin(), std::next(it));  // older rounds can no longer be settled either
    return absl::OkStatus();
  }
};

RelayClient::RelayClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RelayClient::~RelayClient() {
  if (impl_ != nullptr && !impl_->left && impl_->sender_id != 0) {
    impl_->options.rpc_timeout = std::min(impl_->options.rpc_timeout, absl::Seconds(5));
    (void)Leave();
  }
}

absl::StatusOr<std::unique_ptr<RelayClient>> RelayClient::Connect(const RelayClientOptions& options,
                                                                  const WorkerInfo& me,
                                                                  uint64_t spec_digest) {
  if (options.address.empty()) return absl::InvalidArgumentError("relay client: no address");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->me = me;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  args.SetMaxSendMessageSize(kMaxReceiveBytes);
  // A pull may wait an hour with nothing on the wire: keepalive pings find a dead relay (and keep
  // NAT and firewall state alive) in the meantime. The relay permits pings every 20 s.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (!options.tls_ca_file.empty() || !options.tls_cert_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      HEDDLE_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(options.tls_ca_file, "tls ca"));
    }
    if (!options.tls_cert_file.empty()) {
      HEDDLE_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadFile(options.tls_cert_file, "tls cert"));
      HEDDLE_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFile(options.tls_key_file, "tls key"));
    }
    creds = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  impl->channel = grpc::CreateCustomChannel(options.address, creds, args);
  impl->stub = v1::Relay::NewStub(impl->channel);

  v1::JoinRequest req;
  req.set_name(me.name);
  req.set_region(me.region);
  req.set_spec_digest(spec_digest);
  v1::WorkerProfile* p = req.mutable_profile();
  p->set_tokens_per_s(me.tokens_per_s);
  p->set_half_batch(me.half_batch);
  p->set_max_batch(me.max_batch);
  p->set_memory_bytes(me.memory_bytes);
  p->set_fixed_bytes(me.fixed_bytes);
  p->set_bytes_per_sample(me.bytes_per_sample);
  p->set_seq_len(me.seq_len);
  v1::JoinResponse resp;
  grpc::ClientContext ctx;
  impl->Prepare(ctx, options.rpc_timeout);
  ctx.set_wait_for_ready(true);  // the relay may still be starting
  grpc::Status s = impl->stub->Join(&ctx, req, &resp);
  if (!s.ok()) return impl->Error("Join", s);
  HEDDLE_ASSIGN_OR_RETURN(impl->spec, FromProto(resp.spec()));
  impl->slices = Slices(impl->spec);
  for (const SliceRef& sl : impl->slices) {
    HEDDLE_ASSIGN_OR_RETURN(
        SignEncoder enc, SignEncoder::Create(sl.count, {.chunk_size = impl->spec.chunk_size,
                                                        .error_feedback = options.error_feedback}));
    impl->encoders.push_back(std::move(enc));
  }
  impl->sender_id = resp.sender_id();
  impl->region_id = resp.region_id();
  impl->next_round = resp.first_round();
  impl->max_chunk_bytes = std::clamp<uint32_t>(resp.max_chunk_bytes(), 4096, 4u << 20);
  impl->plan = FromProto(resp.plan());
  return std::unique_ptr<RelayClient>(new RelayClient(std::move(impl)));
}

const ModelSpec& RelayClient::spec() const { return impl_->spec; }
uint32_t RelayClient::sender_id() const { return impl_->sender_id; }
uint32_t RelayClient::region_id() const { return impl_->region_id; }
uint64_t RelayClient::next_round() const { return impl_->next_round; }
const WorkerPlan& RelayClient::plan() const { return impl_->plan; }

absl::StatusOr<PushStats> RelayClient::PushRound(uint64_t round_id,
                                                 std::span<const TensorInput> tensors,
                                                 uint64_t tokens, uint32_t inner_steps) {
  Impl& I = *impl_;
  if (I.left) return absl::FailedPreconditionError("push: the client has left the relay");
  if (tensors.size() != I.spec.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("push of round %u: %u tensors given, the model has %u", round_id,
                        tensors.size(), I.spec.tensors.size()));
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (tensors[t].data == nullptr || tensors[t].dtype != I.spec.tensors[t].dtype) {
      return absl::InvalidArgumentError(
          absl::StrFormat("push of round %u: tensor %u (%s): %s, the model spec says %s", round_id,
                          t, I.spec.tensors[t].name,
                          tensors[t].data == nullptr ? "no data" : DTypeName(tensors[t].dtype),
                          DTypeName(I.spec.tensors[t].dtype)));
    }
  }
  if (tokens == 0 || inner_steps == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("push of round %u: tokens (%u) and inner_steps (%u) must be at least 1",
                        round_id, tokens, inner_steps));
  }
  if (auto it = I.sent.find(round_id); it != I.sent.end()) {
    if (!it->second.restored) {
      return absl::AlreadyExistsError(
          absl::StrFormat("push of round %u: this client already pushed it", round_id));
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "push of round %u: an earlier attempt failed and its update is back in the residual; "
        "resend it with RetryPush(%u), or pull round %u and push the next one",
        round_id, round_id, round_id));
  }
  PushStats stats{.round_id = round_id};
  // Encode every slice first: a NaN anywhere sends nothing and leaves every residual as it was.
  std::vector<std::vector<uint8_t>> frames(I.slices.size());
  for (size_t i = 0; i < I.slices.size(); ++i) {
    const SliceRef& s = I.slices[i];
    const size_t width = DTypeBytes(s.dtype);
    size_t t = 0;  // the tensor's index (ids increase, but need not be 0..n-1)
    while (I.spec.tensors[t].id != s.tensor_id) ++t;
    const auto* src = static_cast<const uint8_t*>(tensors[t].data) + s.offset * width;
    SignEncoder& enc = I.encoders[i];
    const size_t bad = enc.Encode(s.dtype, src);
    if (bad != 0) {
      RestoreLastEncode(enc);
      for (size_t j = 0; j < i; ++j) RestoreLastEncode(I.encoders[j]);
      return absl::InvalidArgumentError(absl::StrFormat(
          "push of round %u: tensor %s has NaN or inf in %u chunk(s) of slice %u (elements "
          "%u..%u); nothing sent",
          round_id, I.spec.tensors[t].name, bad, s.index, s.offset, s.offset + s.count));
    }
    FrameHeader h = SliceHeader(I.spec, s, round_id, I.sender_id);
    h.token_count = tokens;
    h.inner_steps = inner_steps;
    frames[i].resize(enc.FrameBytes());
    if (absl::Status st = enc.WriteFrame(h, frames[i]); !st.ok()) {
      for (size_t j = 0; j <= i; ++j) RestoreLastEncode(I.encoders[j]);
      return st;
    }
    stats.frame_bytes += frames[i].size();
    stats.source_bytes += s.count * width;
  }

  grpc::Status st = I.Stream(round_id, frames);
  Impl::Sent& kept = I.sent[round_id];
  kept.frames = std::move(frames);
  kept.restored = false;
  if (st.ok()) return stats;
  if (st.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
    // Not taken (or unknown): put it back now; RetryPush() resends it, and the pull of this round
    // corrects it should the relay have taken it after all.
    I.Move(kept, 1.0);
  } else {
    // The relay holds an earlier push of this round (from before a restart of this worker): that
    // one settles at its pull; this encoding went nowhere and goes back into the residual.
    for (size_t i = 0; i < kept.frames.size(); ++i) RestoreLastEncode(I.encoders[i]);
    I.sent.erase(round_id);
  }
  return I.Error("Push", st);
}

absl::StatusOr<PushStats> RelayClient::RetryPush(uint64_t round_id) {
  Impl& I = *impl_;
  auto it = I.sent.find(round_id);
  if (it == I.sent.end()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "retry of round %u: no encoded push of that round is held (push it with PushRound)",
        round_id));
  }
  Impl::Sent& kept = it->second;
  if (!kept.restored) {
    return absl::AlreadyExistsError(
        absl::StrFormat("retry of round %u: the round was already pushed", round_id));
  }
  PushStats stats{.round_id = round_id};
  for (size_t i = 0; i < kept.frames.size(); ++i) {
    stats.frame_bytes += kept.frames[i].size();
    stats.source_bytes += I.slices[i].count * DTypeBytes(I.slices[i].dtype);
  }
  I.Move(kept, -1.0);  // out of the residual again: it is being sent
  grpc::Status st = I.Stream(round_id, kept.frames);
  if (st.ok() || st.error_code() == grpc::StatusCode::ALREADY_EXISTS) return stats;
  I.Move(kept, 1.0);
  return I.Error("Push", st);
}

absl::StatusOr<PullResult> RelayClient::PullRound(uint64_t round_id, std::span<float* const> out) {
  Impl& I = *impl_;
  if (out.size() != I.spec.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pull of round %u: %u output buffers, the model has %u tensors", round_id,
                        out.size(), I.spec.tensors.size()));
  }
  for (size_t t = 0; t < out.size(); ++t) {
    if (out[t] == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("pull of round %u: no buffer for tensor %s",
                                                        round_id, I.spec.tensors[t].name));
    }
  }
  grpc::ClientContext ctx;
  I.Prepare(ctx, I.options.pull_timeout);
  v1::PullRequest req;
  req.set_sender_id(I.sender_id);
  req.set_round_id(round_id);
  std::unique_ptr<grpc::ClientReader<v1::PullMessage>> r = I.stub->Pull(&ctx, req);
  v1::PullMessage msg;
  PullResult res{.round_id = round_id};
  auto fail = [&](absl::Status st) {
    ctx.TryCancel();
    (void)r->Finish();
    return st;
  };
  if (!r->Read(&msg)) return I.Error("Pull", r->Finish());
  if (!msg.has_header() || msg.header().round_id() != round_id) {
    return fail(absl::DataLossError(
        absl::StrFormat("pull of round %u: the relay's reply does not start with the round's "
                        "header",
                        round_id)));
  }
  const v1::PullHeader h = msg.header();
  res.bytes += msg.ByteSizeLong();
  res.included = h.included();
  res.reason = h.reason();
  res.collecting_round = h.collecting_round();
  if (h.plan().valid()) I.plan = FromProto(h.plan());
  if (h.outcome() == v1::PullHeader::PUBLISHED) {
    if (h.slices() != I.slices.size()) {
      return fail(absl::DataLossError(
          absl::StrFormat("pull of round %u: the aggregate has %u slices, the model %u", round_id,
                          h.slices(), I.slices.size())));
    }
    res.digest = h.digest();
    res.regions = h.parts_size();
    for (const v1::RegionPart& p : h.parts()) res.tokens += p.tokens();
    const size_t parts = h.parts_size();
    // One slice's frames at a time: the memory bound of a pull.
    std::vector<std::vector<uint8_t>> frames(parts);
    std::vector<uint64_t> announced(parts, 0);
    std::vector<FrameView> views;
    auto dest = [&](const SliceRef& s) {
      size_t t = 0;
      while (I.spec.tensors[t].id != s.tensor_id) ++t;
      return std::span<float>(out[t] + s.offset, s.count);
    };
    if (parts == 0) {
      for (const SliceRef& s : I.slices) std::ranges::fill(dest(s), 0.0f);
    } else {
      uint32_t slice = 0;
      while (slice < I.slices.size()) {
        if (!r->Read(&msg)) {
          grpc::Status st = r->Finish();
          if (!st.ok()) return I.Error("Pull", st);
          return absl::DataLossError(absl::StrFormat("pull of round %u ended after %u of %u slices",
                                                     round_id, slice, I.slices.size()));
        }
        res.bytes += msg.ByteSizeLong();
        if (!msg.has_chunk()) {
          return fail(absl::DataLossError(absl::StrFormat(
              "pull of round %u: unexpected message in slice %u", round_id, slice)));
        }
        const v1::SliceChunk& c = msg.chunk();
        if (c.slice() != slice || c.part() >= parts) {
          return fail(absl::DataLossError(absl::StrFormat(
              "pull of round %u: chunk for slice %u part %u while receiving slice %u of %u parts",
              round_id, c.slice(), c.part(), slice, parts)));
        }
        std::vector<uint8_t>& f = frames[c.part()];
        if (c.frame_bytes() != 0) {
          // A frame's first chunk: its size bounds what follows (a region frame of one slice).
          const uint64_t limit = FrameBytes(I.slices[slice].count, 64);
          if (!f.empty() || c.frame_bytes() > limit) {
            return fail(absl::DataLossError(absl::StrFormat(
                "pull of round %u, slice %u, part %u: frame of %u bytes announced (limit %u)",
                round_id, slice, c.part(), c.frame_bytes(), limit)));
          }
          f.reserve(c.frame_bytes());
          announced[c.part()] = c.frame_bytes();
        }
        if (f.size() + c.data().size() > announced[c.part()]) {
          return fail(absl::DataLossError(
              absl::StrFormat("pull of round %u, slice %u, part %u: more bytes than announced",
                              round_id, slice, c.part())));
        }
        f.insert(f.end(), c.data().begin(), c.data().end());
        if (!c.last()) continue;
        // The slice is complete: check its digest, then write it.
        SliceDigester d(round_id, slice);
        for (const v1::RegionPart& p : h.parts()) d.AddWeight(p.weight());
        for (const auto& fb : frames) d.AddFrame(fb);
        if (d.Digest() != c.slice_digest()) {
          return fail(absl::DataLossError(absl::StrFormat(
              "pull of round %u, slice %u: digest %016x, the relay sent %016x; slice not applied",
              round_id, slice, d.Digest(), c.slice_digest())));
        }
        // Every part's frame must be this slice of this round from that region before any of
        // them is written (the same checks as AccumulateGlobalSlice).
        const SliceRef& sl = I.slices[slice];
        std::span<float> dst = dest(sl);
        views.clear();
        for (size_t p = 0; p < parts; ++p) {
          const v1::RegionPart& part = h.parts(p);
          absl::StatusOr<FrameView> fv = ParseFrame(frames[p]);
          if (!fv.ok()) {
            return fail(
                absl::Status(fv.status().code(),
                             absl::StrFormat("pull of round %u, slice %u, region %u: %s", round_id,
                                             slice, part.region_id(), fv.status().message())));
          }
          const FrameHeader& fh = fv->header();
          if (fh.round_id != round_id || fh.sender_id != part.region_id() ||
              fh.token_count != part.tokens() || fh.tensor_id != sl.tensor_id ||
              fh.element_offset != sl.offset || fh.element_count != sl.count) {
            return fail(absl::DataLossError(absl::StrFormat(
                "pull of round %u, slice %u (tensor %u [%u, +%u)), region %u: the frame is round "
                "%u, sender %u, %u tokens, tensor %u [%u, +%u)",
                round_id, slice, sl.tensor_id, sl.offset, sl.count, part.region_id(), fh.round_id,
                fh.sender_id, fh.token_count, fh.tensor_id, fh.element_offset, fh.element_count)));
          }
          views.push_back(*fv);
        }
        std::ranges::fill(dst, 0.0f);
        for (size_t p = 0; p < parts; ++p) AccumulateFrame(views[p], h.parts(p).weight(), dst);
        for (size_t p = 0; p < parts; ++p) {
          frames[p].clear();
          announced[p] = 0;
        }
        ++slice;
      }
    }
    res.applied = true;
  }
  while (r->Read(&msg)) {
  }
  grpc::Status st = r->Finish();
  if (!st.ok()) return I.Error("Pull", st);
  // Retained: the gateway carries this push in its residual, so it counts as used here.
  HEDDLE_RETURN_IF_ERROR(I.Settle(round_id, res.included || h.retained()));
  I.next_round = std::max(I.next_round, round_id + 1);
  return res;
}

absl::Status RelayClient::Report(uint64_t round_id, int64_t batch_size, int64_t inner_steps,
                                 double compute_s) {
  Impl& I = *impl_;
  v1::ReportRequest req;
  req.set_sender_id(I.sender_id);
  req.set_round_id(round_id);
  req.set_batch_size(batch_size);
  req.set_inner_steps(inner_steps);
  req.set_compute_s(compute_s);
  v1::ReportResponse resp;
  grpc::ClientContext ctx;
  I.Prepare(ctx, I.options.rpc_timeout);
  grpc::Status s = I.stub->Report(&ctx, req, &resp);
  if (!s.ok()) return I.Error("Report", s);
  if (resp.plan().valid()) I.plan = FromProto(resp.plan());
  return absl::OkStatus();
}

absl::StatusOr<RoundStatus> RelayClient::Status() {
  Impl& I = *impl_;
  v1::StatusResponse resp;
  grpc::ClientContext ctx;
  I.Prepare(ctx, I.options.rpc_timeout);
  grpc::Status s = I.stub->Status(&ctx, v1::StatusRequest(), &resp);
  if (!s.ok()) return I.Error("Status", s);
  return RoundStatus{.current_round = resp.collecting_round(),
                     .last_published = resp.last_resolved_round()};
}

absl::Status RelayClient::Leave() {
  Impl& I = *impl_;
  if (I.left) return absl::OkStatus();
  v1::LeaveRequest req;
  req.set_sender_id(I.sender_id);
  v1::LeaveResponse resp;
  grpc::ClientContext ctx;
  I.Prepare(ctx, I.options.rpc_timeout);
  grpc::Status s = I.stub->Leave(&ctx, req, &resp);
  I.left = true;
  if (!s.ok()) return I.Error("Leave", s);
  return absl::OkStatus();
}

}  // namespace heddle::relay
