// The worker service on loopback (port 0): RelayClient workers against a RelayServer over a
// RoundEngine and the test-only single-region exchange.
#include "dataplane/relay/service/relay_service.h"

#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_format.h"
#include "dataplane/relay/client/client.h"
#include "dataplane/relay/codec/encoder.h"
#include "dataplane/relay/round/testing/fake_exchange.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "s3cret-token";

// Two tensors, three slices of up to 65536 values: each frame (≈ 8.3 KB) travels in 3 chunks of
// the test's 4 KiB limit.
ModelSpec TestSpec() {
  ModelSpec s;
  s.tensors = {{.id = 0, .name = "w", .elements = 100000},
               {.id = 3, .name = "b", .elements = 1000, .dtype = DType::kBFloat16}};
  s.chunk_size = 1024;
  s.slice_elements = 65536;
  return s;
}

struct Worker {
  std::vector<float> w;
  std::vector<uint16_t> b;  // bf16
  std::vector<float> out_w, out_b;
  void Fill(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d;
    w.resize(100000);
    b.resize(1000);
    for (float& x : w) x = d(rng);
    for (uint16_t& x : b) {
      float f = d(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      x = static_cast<uint16_t>(bits >> 16);
    }
    out_w.assign(100000, -1.0f);
    out_b.assign(1000, -1.0f);
  }
  std::vector<TensorInput> In() {
    return {{w.data(), DType::kFloat32}, {b.data(), DType::kBFloat16}};
  }
  std::vector<float*> Out() { return {out_w.data(), out_b.data()}; }
};

class ServiceTest : public ::testing::Test {
 protected:
  void Start(RoundPolicy policy = {}, std::function<bool(const RoundOutcome&)> retained = nullptr) {
    spec_ = TestSpec();
    auto ex = std::make_unique<testing::FakeExchange>(spec_, testing::FakeExchangeOptions{});
    fake_ = ex.get();
    auto e = RoundEngine::Create(
        {.region_id = 1, .spec = spec_, .policy = policy, .retained_by_gateway = retained},
        std::move(ex));
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    auto s = RelayServer::Start(
        engine_.get(), {.listen = "127.0.0.1:0",
                        .service = {.region = "eu", .token = kToken, .max_chunk_bytes = 4096},
                        .tick = absl::Milliseconds(20)});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    address_ = absl::StrFormat("127.0.0.1:%d", server_->port());
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  RelayClientOptions Opts(std::string token = kToken) {
    return {.address = address_,
            .token = std::move(token),
            .rpc_timeout = absl::Seconds(20),
            .push_timeout = absl::Seconds(30),
            .pull_timeout = absl::Seconds(60)};
  }
  std::unique_ptr<RelayClient> ConnectOk(const std::string& name) {
    auto c = RelayClient::Connect(Opts(), {.name = name, .region = "eu"}, SpecDigest(spec_));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  std::unique_ptr<v1::Relay::Stub> RawStub() {
    return v1::Relay::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }
  static void Auth(grpc::ClientContext& ctx) {
    ctx.AddMetadata("authorization", std::string("Bearer ") + kToken);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  }

  ModelSpec spec_;
  testing::FakeExchange* fake_ = nullptr;
  std::unique_ptr<RoundEngine> engine_;
  std::unique_ptr<RelayServer> server_;
  std::string address_;
};

// What a worker must have computed for round r: the aggregate the exchange published, read with
// the exchange's own accumulation.
std::vector<float> Reference(const GlobalAggregate& g, const ModelSpec& spec, uint32_t tensor_id) {
  std::vector<float> out;
  for (const SliceRef& s : Slices(spec)) {
    if (s.tensor_id != tensor_id) continue;
    std::vector<float> part(s.count);
    EXPECT_TRUE(testing::FakeAccumulateSlice(g, s.index, part).ok());
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

TEST_F(ServiceTest, TwoWorkersCompleteThreeRounds) {
  Start();
  auto a = ConnectOk("gpu-a");
  auto b = ConnectOk("gpu-b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->sender_id(), 1u);
  EXPECT_EQ(b->sender_id(), 2u);
  EXPECT_EQ(a->next_round(), 1u);
  EXPECT_EQ(SpecDigest(a->spec()), SpecDigest(spec_));
  Worker wa, wb;
  for (uint64_t r = 1; r <= 3; ++r) {
    ASSERT_EQ(a->next_round(), r);
    wa.Fill(10 + r);
    wb.Fill(20 + r);
    PullResult ra, rb;
    std::thread tb([&] {
      auto push = b->PushRound(r, wb.In(), 300, 3);
      ASSERT_TRUE(push.ok()) << push.status();
      auto pull = b->PullRound(r, wb.Out());
      ASSERT_TRUE(pull.ok()) << pull.status();
      rb = *pull;
    });
    auto push = a->PushRound(r, wa.In(), 100, 1);
    ASSERT_TRUE(push.ok()) << push.status();
    EXPECT_GT(push->source_bytes / push->frame_bytes, 25u);
    auto pull = a->PullRound(r, wa.Out());
    ASSERT_TRUE(pull.ok()) << pull.status();
    ra = *pull;
    tb.join();
    EXPECT_TRUE(ra.applied && ra.included && rb.included);
    EXPECT_EQ(ra.digest, rb.digest);
    EXPECT_EQ(ra.tokens, 400u);
    EXPECT_EQ(ra.regions, 1u);
    // Bit-identical on both workers, and equal to the published aggregate.
    EXPECT_EQ(std::memcmp(wa.out_w.data(), wb.out_w.data(), wa.out_w.size() * 4), 0);
    EXPECT_EQ(std::memcmp(wa.out_b.data(), wb.out_b.data(), wa.out_b.size() * 4), 0);
    auto g = fake_->Published(r);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ((*g)->digest, ra.digest);
    EXPECT_EQ(Reference(**g, spec_, 0), wa.out_w);
    EXPECT_EQ(Reference(**g, spec_, 3), wa.out_b);
  }
  auto st = a->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->current_round, 4u);
  EXPECT_EQ(st->last_published, 3u);
  v1::StatusResponse tables = server_->service().StatusTables();
  EXPECT_EQ(tables.rounds_published(), 3u);
  EXPECT_EQ(tables.members_size(), 2);
  EXPECT_GT(tables.rounds(0).compression_ratio(), 25.0);
  EXPECT_GT(tables.bytes_out_total(), 0u);
  EXPECT_TRUE(a->Leave().ok());
  EXPECT_FALSE(server_->service().StatusTables().members(0).member());
}

TEST_F(ServiceTest, WrongOrMissingTokenIsRefused) {
  Start();
  auto bad = RelayClient::Connect(Opts("wrong"), {.name = "gpu-a"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("wrong bearer token"));
  auto none = RelayClient::Connect(Opts(""), {.name = "gpu-a"});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(server_->service().auth_failures(), 2u);
  EXPECT_TRUE(engine_->Status().members.empty());
  // The right token, the wrong region.
  auto region = RelayClient::Connect(Opts(), {.name = "gpu-a", .region = "us"});
  EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(region.status().message()), HasSubstr("this relay serves \"eu\""));
}

TEST_F(ServiceTest, MalformedFrameIsRefusedAndTheRoundStillCompletes) {
  Start();
  auto stub = RawStub();
  // Worker a pushes a frame with a flipped byte by hand.
  v1::JoinRequest jr;
  jr.set_name("gpu-a");
  v1::JoinResponse jresp;
  {
    grpc::ClientContext ctx;
    Auth(ctx);
    ASSERT_TRUE(stub->Join(&ctx, jr, &jresp).ok());
  }
  auto b = ConnectOk("gpu-b");
  ASSERT_TRUE(b);
  {
    grpc::ClientContext ctx;
    Auth(ctx);
    v1::PushResponse resp;
    auto w = stub->Push(&ctx, &resp);
    v1::PushChunk h;
    h.set_sender_id(jresp.sender_id());
    h.set_round_id(1);
    ASSERT_TRUE(w->Write(h));
    for (const SliceRef& s : Slices(spec_)) {
      SignEncoder enc = *SignEncoder::Create(s.count, {.chunk_size = spec_.chunk_size});
      std::vector<float> v(s.count, 1.0f);
      std::vector<uint16_t> v16(s.count, 0x3f80);
      enc.Encode(s.dtype,
                 s.dtype == DType::kFloat32 ? static_cast<const void*>(v.data()) : v16.data());
      FrameHeader fh = SliceHeader(spec_, s, 1, jresp.sender_id());
      fh.token_count = 10;
      std::vector<uint8_t> f(enc.FrameBytes());
      ASSERT_TRUE(enc.WriteFrame(fh, f).ok());
      if (s.index == 1) f[100] ^= 1;
      v1::PushChunk c;
      c.set_slice(s.index);
      c.set_frame_bytes(f.size());
      c.set_data(f.data(), f.size());  // one chunk: larger than the 4 KiB limit
      w->Write(c);
    }
    w->WritesDone();
    grpc::Status st = w->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("exceeds the 4096-byte limit"));
  }
  EXPECT_EQ(engine_->Status().rounds.back().pushed, 0u);
  // The same worker, through the client library (re-joins as the same sender), but with a
  // corrupted frame injected through the stream: here a frame with a bad checksum, in chunks.
  auto a = ConnectOk("gpu-a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->sender_id(), jresp.sender_id());
  {
    grpc::ClientContext ctx;
    Auth(ctx);
    v1::PushResponse resp;
    auto w = stub->Push(&ctx, &resp);
    v1::PushChunk h;
    h.set_sender_id(jresp.sender_id());
    h.set_round_id(1);
    ASSERT_TRUE(w->Write(h));
    for (const SliceRef& s : Slices(spec_)) {
      SignEncoder enc = *SignEncoder::Create(s.count, {.chunk_size = spec_.chunk_size});
      std::vector<float> v(s.count, -1.0f);
      std::vector<uint16_t> v16(s.count, 0xbf80);
      enc.Encode(s.dtype,
                 s.dtype == DType::kFloat32 ? static_cast<const void*>(v.data()) : v16.data());
      FrameHeader fh = SliceHeader(spec_, s, 1, jresp.sender_id());
      fh.token_count = 10;
      std::vector<uint8_t> f(enc.FrameBytes());
      ASSERT_TRUE(enc.WriteFrame(fh, f).ok());
      if (s.index == 2) f[f.size() - 1] ^= 0x80;
      for (size_t off = 0; off < f.size(); off += 4096) {
        v1::PushChunk c;
        c.set_slice(s.index);
        if (off == 0) c.set_frame_bytes(f.size());
        c.set_data(f.data() + off, std::min<size_t>(4096, f.size() - off));
        w->Write(c);
      }
    }
    w->WritesDone();
    grpc::Status st = w->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS);
    EXPECT_THAT(st.error_message(), HasSubstr("push of round 1 from sender 1, slice 2"));
  }
  EXPECT_EQ(engine_->Status().refused["malformed"], 1u);
  Worker wa, wb;
  wa.Fill(1);
  wb.Fill(2);
  std::thread tb([&] {
    ASSERT_TRUE(b->PushRound(1, wb.In(), 100, 1).ok());
    auto pull = b->PullRound(1, wb.Out());
    ASSERT_TRUE(pull.ok()) << pull.status();
    EXPECT_TRUE(pull->included);
  });
  auto push = a->PushRound(1, wa.In(), 100, 1);
  ASSERT_TRUE(push.ok()) << push.status();
  auto pull = a->PullRound(1, wa.Out());
  tb.join();
  ASSERT_TRUE(pull.ok()) << pull.status();
  EXPECT_TRUE(pull->included);
  EXPECT_EQ(pull->tokens, 200u);
}

TEST_F(ServiceTest, WorkerKilledMidPushRoundCompletesWithTheRest) {
  Start({.push_timeout = absl::Milliseconds(300), .min_token_fraction = 0.4});
  auto a = ConnectOk("gpu-a");
  auto b = ConnectOk("gpu-b");
  ASSERT_TRUE(a && b);
  Worker wa;
  wa.Fill(7);
  ASSERT_TRUE(a->PushRound(1, wa.In(), 100, 1).ok());
  // b starts its push and dies halfway: the stream is cancelled.
  {
    auto stub = RawStub();
    grpc::ClientContext ctx;
    Auth(ctx);
    v1::PushResponse resp;
    auto w = stub->Push(&ctx, &resp);
    v1::PushChunk h;
    h.set_sender_id(b->sender_id());
    h.set_round_id(1);
    ASSERT_TRUE(w->Write(h));
    v1::PushChunk c;
    c.set_slice(0);
    c.set_frame_bytes(FrameBytes(65536, spec_.chunk_size));
    c.set_data(std::string(4096, '\0'));
    ASSERT_TRUE(w->Write(c));
    ctx.TryCancel();
    EXPECT_EQ(w->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  auto pull = a->PullRound(1, wa.Out());
  ASSERT_TRUE(pull.ok()) << pull.status();
  EXPECT_TRUE(pull->applied);
  EXPECT_TRUE(pull->included);
  EXPECT_EQ(pull->tokens, 100u);
  EngineStatus st = engine_->Status();
  EXPECT_EQ(st.rounds.front().close_reason, "deadline");
  EXPECT_EQ(st.rounds.front().included, 1u);
  // b comes back: it applies round 1 without its push, and goes on with round 2.
  Worker wb;
  wb.Fill(8);
  auto pb = b->PullRound(1, wb.Out());
  ASSERT_TRUE(pb.ok()) << pb.status();
  EXPECT_TRUE(pb->applied);
  EXPECT_FALSE(pb->included);
  EXPECT_THAT(pb->reason, HasSubstr("no push from this worker by round 1's deadline"));
  EXPECT_EQ(wb.out_w, wa.out_w);
  EXPECT_EQ(b->next_round(), 2u);
}

TEST_F(ServiceTest, OnlyOnePushStreamPerWorkerAndRoundAtATime) {
  Start({});
  auto a = ConnectOk("gpu-a");
  auto b = ConnectOk("gpu-b");
  ASSERT_TRUE(a && b);
  auto stub = RawStub();
  // A first stream for (a, round 1) that stays open with part of a frame in it.
  grpc::ClientContext ctx1;
  Auth(ctx1);
  v1::PushResponse resp1;
  auto w1 = stub->Push(&ctx1, &resp1);
  v1::PushChunk h;
  h.set_sender_id(a->sender_id());
  h.set_round_id(1);
  ASSERT_TRUE(w1->Write(h));
  v1::PushChunk c;
  c.set_slice(0);
  c.set_frame_bytes(FrameBytes(65536, spec_.chunk_size));
  c.set_data(std::string(4096, '\0'));
  ASSERT_TRUE(w1->Write(c));
  // A second one for the same worker and round is refused while the first streams (retried until
  // the server has seen the first one's header).
  grpc::Status second;
  for (int i = 0; i < 200; ++i) {
    grpc::ClientContext ctx2;
    Auth(ctx2);
    v1::PushResponse resp2;
    auto w2 = stub->Push(&ctx2, &resp2);
    ASSERT_TRUE(w2->Write(h));
    w2->WritesDone();
    second = w2->Finish();
    if (second.error_code() == grpc::StatusCode::ALREADY_EXISTS) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(second.error_code(), grpc::StatusCode::ALREADY_EXISTS) << second.error_message();
  EXPECT_THAT(second.error_message(), HasSubstr("still streaming"));
  ctx1.TryCancel();
  EXPECT_EQ(w1->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // Once it ended, the worker pushes the round normally, and the round completes.
  Worker wa, wb;
  wa.Fill(1);
  wb.Fill(2);
  absl::StatusOr<PushStats> pa = a->PushRound(1, wa.In(), 100, 1);
  // The cancelled stream's handler may still be unwinding. A push refused as ALREADY_EXISTS
  // went back into the residual and is not held for RetryPush: push the round again.
  for (int i = 0; i < 200 && !pa.ok() && pa.status().code() == absl::StatusCode::kAlreadyExists;
       ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    pa = a->PushRound(1, wa.In(), 100, 1);
  }
  ASSERT_TRUE(pa.ok()) << pa.status();
  ASSERT_TRUE(b->PushRound(1, wb.In(), 100, 1).ok());
  auto pull = a->PullRound(1, wa.Out());
  ASSERT_TRUE(pull.ok()) << pull.status();
  EXPECT_TRUE(pull->included);
}

TEST_F(ServiceTest, LatePushIsRefusedNamingBothRoundsAndTheWorkerStillApplies) {
  Start({.push_timeout = absl::Milliseconds(200), .min_token_fraction = 0.1});
  auto a = ConnectOk("gpu-a");
  auto b = ConnectOk("gpu-b");
  ASSERT_TRUE(a && b);
  Worker wa, wb;
  wa.Fill(1);
  wb.Fill(2);
  ASSERT_TRUE(a->PushRound(1, wa.In(), 100, 1).ok());
  ASSERT_TRUE(engine_->WaitResolved(1, absl::Now() + absl::Seconds(30)));
  auto late = b->PushRound(1, wb.In(), 100, 1);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(late.status().message()),
              HasSubstr("round 1 is closed; the relay now collects round 2"));
  auto pb = b->PullRound(1, wb.Out());
  ASSERT_TRUE(pb.ok());
  EXPECT_TRUE(pb->applied);
  EXPECT_FALSE(pb->included);
  // Unknown sender and a pull of a round that has not begun.
  auto stub = RawStub();
  grpc::ClientContext ctx;
  Auth(ctx);
  v1::PullRequest req;
  req.set_sender_id(99);
  req.set_round_id(1);
  auto r = stub->Pull(&ctx, req);
  v1::PullMessage m;
  EXPECT_FALSE(r->Read(&m));
  EXPECT_EQ(r->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceTest, RefusedPushGoesBackIntoTheResidual) {
  Start({.push_timeout = absl::Milliseconds(200), .min_token_fraction = 0.1});
  auto a = ConnectOk("gpu-a");
  auto b = ConnectOk("gpu-b");
  ASSERT_TRUE(a && b);
  Worker wa, wb;
  wa.Fill(3);
  wb.Fill(4);
  // Round 1 closes without a; its late push is refused and restored: e = v1 again.
  ASSERT_TRUE(b->PushRound(1, wb.In(), 100, 1).ok());
  ASSERT_TRUE(engine_->WaitResolved(1, absl::Now() + absl::Seconds(30)));
  ASSERT_FALSE(a->PushRound(1, wa.In(), 100, 1).ok());
  ASSERT_TRUE(a->PullRound(1, wa.Out()).ok());
  ASSERT_TRUE(b->PullRound(1, wb.Out()).ok());
  ASSERT_TRUE(b->Leave().ok());
  // Round 2, a alone with a zero input: what it sends is its residual, i.e. round 1's input.
  Worker zero;
  zero.Fill(0);
  std::fill(zero.w.begin(), zero.w.end(), 0.0f);
  std::fill(zero.b.begin(), zero.b.end(), uint16_t{0});
  ASSERT_TRUE(a->PushRound(2, zero.In(), 100, 1).ok());
  auto pull = a->PullRound(2, zero.Out());
  ASSERT_TRUE(pull.ok()) << pull.status();
  ASSERT_TRUE(pull->included);
  // Reference: round 1's input compressed on its own (a fresh encoder).
  for (const SliceRef& s : Slices(spec_)) {
    if (s.tensor_id != 0) continue;
    SignEncoder enc = *SignEncoder::Create(s.count, {.chunk_size = spec_.chunk_size});
    enc.Encode(DType::kFloat32, wa.w.data() + s.offset);
    for (uint64_t j = 0; j < s.count; ++j) {
      const float m = enc.magnitudes()[j / spec_.chunk_size];
      const float want = (enc.signs()[j / 64] >> (j % 64)) & 1 ? -m : m;
      ASSERT_NEAR(zero.out_w[s.offset + j], want, 1e-5f * m) << "value " << s.offset + j;
    }
  }
}

TEST_F(ServiceTest, MutualTls) {
  spec_ = TestSpec();
  auto ex = std::make_unique<testing::FakeExchange>(spec_, testing::FakeExchangeOptions{});
  auto e = RoundEngine::Create({.region_id = 1, .spec = spec_}, std::move(ex));
  ASSERT_TRUE(e.ok());
  engine_ = *std::move(e);
  const std::string dir = HEDDLE_RELAY_TLS_DIR;
  auto s = RelayServer::Start(engine_.get(), {.listen = "127.0.0.1:0",
                                              .service = {.token = kToken},
                                              .tls_cert_file = dir + "/server.pem",
                                              .tls_key_file = dir + "/server.key",
                                              .tls_client_ca_file = dir + "/ca.pem"});
  ASSERT_TRUE(s.ok()) << s.status();
  server_ = *std::move(s);
  address_ = absl::StrFormat("localhost:%d", server_->port());
  RelayClientOptions o = Opts();
  o.rpc_timeout = absl::Seconds(5);
  o.tls_ca_file = dir + "/ca.pem";
  o.tls_cert_file = dir + "/client.pem";
  o.tls_key_file = dir + "/client.key";
  auto ok = RelayClient::Connect(o, {.name = "gpu-a"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->sender_id(), 1u);
  // TLS without a client certificate: the handshake fails.
  RelayClientOptions no_cert = o;
  no_cert.tls_cert_file.clear();
  no_cert.tls_key_file.clear();
  no_cert.rpc_timeout = absl::Seconds(1);
  EXPECT_FALSE(RelayClient::Connect(no_cert, {.name = "gpu-b"}).ok());
  // Plain text to a TLS port.
  RelayClientOptions plain = Opts();
  plain.rpc_timeout = absl::Seconds(1);
  EXPECT_FALSE(RelayClient::Connect(plain, {.name = "gpu-c"}).ok());
  EXPECT_EQ(engine_->Status().members.size(), 1u);
  // Client CA without a server certificate is a configuration error.
  auto bad = RelayServer::Start(engine_.get(),
                                {.listen = "127.0.0.1:0", .tls_client_ca_file = dir + "/ca.pem"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ServiceTest, RetryPushResendsTheSameFramesOnce) {
  Start();
  auto a = ConnectOk("gpu-a");
  ASSERT_TRUE(a);
  Worker w1, w2, w3;
  w1.Fill(1);
  w2.Fill(2);
  w3.Fill(3);
  ASSERT_TRUE(a->PushRound(1, w1.In(), 100, 1).ok());
  EXPECT_EQ(a->PushRound(1, w1.In(), 100, 1).status().code(), absl::StatusCode::kAlreadyExists);
  // Round 3 has not begun (the relay collects 2): refused and back in the residual; a second
  // PushRound of it is refused, RetryPush resends it once the relay collects it.
  ASSERT_TRUE(engine_->WaitResolved(1, absl::Now() + absl::Seconds(30)));
  auto early = a->PushRound(3, w3.In(), 100, 1);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(a->PushRound(3, w3.In(), 100, 1).status().message()),
              HasSubstr("RetryPush(3)"));
  EXPECT_EQ(a->RetryPush(3).status().code(), absl::StatusCode::kFailedPrecondition);  // still early
  ASSERT_TRUE(a->PullRound(1, w1.Out()).ok());
  ASSERT_TRUE(a->PushRound(2, w2.In(), 100, 1).ok());
  ASSERT_TRUE(a->PullRound(2, w2.Out()).ok());
  auto retry = a->RetryPush(3);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(a->RetryPush(3).status().code(), absl::StatusCode::kAlreadyExists);
  auto pull = a->PullRound(3, w3.Out());
  ASSERT_TRUE(pull.ok()) << pull.status();
  EXPECT_TRUE(pull->included);
  EXPECT_EQ(engine_->Status().refused["wrong_round"], 2u);
}

TEST_F(ServiceTest, EightWorkersPushAndPullConcurrently) {
  Start({.min_workers = 8});
  std::vector<std::unique_ptr<RelayClient>> clients;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(ConnectOk(absl::StrFormat("gpu-%d", i)));
    ASSERT_TRUE(clients.back());
  }
  std::vector<Worker> w(8);
  std::vector<uint64_t> digests(8 * 2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (uint64_t r = 1; r <= 2; ++r) {
        w[i].Fill(100 * i + r);
        auto push = clients[i]->PushRound(r, w[i].In(), 100 + i, 1 + i % 3);
        ASSERT_TRUE(push.ok()) << push.status();
        auto pull = clients[i]->PullRound(r, w[i].Out());
        ASSERT_TRUE(pull.ok()) << pull.status();
        EXPECT_TRUE(pull->included);
        digests[i * 2 + (r - 1)] = pull->digest;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 1; i < 8; ++i) {
    EXPECT_EQ(digests[i * 2], digests[0]);
    EXPECT_EQ(digests[i * 2 + 1], digests[1]);
    EXPECT_EQ(w[i].out_w, w[0].out_w);
  }
  EXPECT_EQ(engine_->Status().rounds_published, 2u);
}

TEST_F(ServiceTest, APushTheGatewayKeptStaysOutOfTheWorkerResidual) {
  Start({}, [](const RoundOutcome&) { return true; });
  fake_->set_auto_publish(false);
  auto a = ConnectOk("gpu-a");
  ASSERT_TRUE(a);
  Worker w1;
  w1.Fill(5);
  ASSERT_TRUE(a->PushRound(1, w1.In(), 100, 1).ok());
  for (int i = 0; i < 3000 && fake_->last_summary().round_id != 1; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  fake_->PublishWithoutRegion(1);
  auto p1 = a->PullRound(1, w1.Out());
  ASSERT_TRUE(p1.ok()) << p1.status();
  EXPECT_FALSE(p1->included);
  EXPECT_THAT(p1->reason, HasSubstr("the gateway keeps the region's update"));
  // Round 2 with a zero input sends the residual round 1 left, e1 = v1 − m·sign(v1): not v1.
  fake_->set_auto_publish(true);
  Worker zero;
  zero.Fill(0);
  std::fill(zero.w.begin(), zero.w.end(), 0.0f);
  std::fill(zero.b.begin(), zero.b.end(), uint16_t{0});
  ASSERT_TRUE(a->PushRound(2, zero.In(), 100, 1).ok());
  auto p2 = a->PullRound(2, zero.Out());
  ASSERT_TRUE(p2.ok()) << p2.status();
  ASSERT_TRUE(p2->included);
  for (const SliceRef& s : Slices(spec_)) {
    if (s.tensor_id != 0) continue;
    SignEncoder enc = *SignEncoder::Create(s.count, {.chunk_size = spec_.chunk_size});
    enc.Encode(DType::kFloat32, w1.w.data() + s.offset);
    std::vector<float> z(s.count, 0.0f);
    enc.Encode(DType::kFloat32, z.data());
    for (uint64_t j = 0; j < s.count; ++j) {
      const float m = enc.magnitudes()[j / spec_.chunk_size];
      const float want = (enc.signs()[j / 64] >> (j % 64)) & 1 ? -m : m;
      ASSERT_NEAR(zero.out_w[s.offset + j], want, 1e-5f * m) << "value " << s.offset + j;
    }
  }
}

}  // namespace
}  // namespace heddle::relay
