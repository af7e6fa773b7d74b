// File: dataplane/relay/service/relay_service.h
//
// The worker-facing gRPC service of a heddle-relay gateway (relay.proto, docs/relay.md §7) over a
// RoundEngine, and the server that hosts it:
//
//   HEDDLE_ASSIGN_OR_RETURN(std::unique_ptr<RelayServer> server,
//                           RelayServer::Start(engine.get(), {.listen = "0.0.0.0:7400",
//                                                             .token = token}));
//   ... server->port() ...; server->Shutdown();
//
// Authentication: when `token` is set, every RPC must carry the metadata
// `authorization: Bearer <token>`; a missing one is UNAUTHENTICATED, a wrong one
// PERMISSION_DENIED, both counted (auth_failures). TLS: a certificate and key turn it on; a client
// CA on top requires and verifies client certificates (mutual TLS). A worker may only act as the
// sender id it joined as — the id is checked against the engine on every call, and frames carry
// it too (CheckFrameForSlice).
//
// Messages: a push or pull carries frame bytes in chunks of at most max_chunk_bytes (4 MiB); a
// frame is reassembled with its declared size as the limit (which must be the slice's exact frame
// size), so one push never holds more than the worker's round of compressed frames. The server's
// receive limit is max_chunk_bytes plus 64 KiB of framing.
//
// Threads: gRPC's synchronous server; a Pull holds its thread while it waits for the round (the
// engine wakes it). A ticker thread calls RoundEngine::Tick() every `tick`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <utility>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "dataplane/relay/round/engine.h"
#include "dataplane/relay/service/relay.grpc.pb.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace heddle::relay {

inline constexpr uint32_t kMaxChunkBytes = 4u << 20;

struct RelayServiceOptions {
  std::string region;  // the region's name (checked against a join's region, if it gives one)
  std::string token;   // empty: no bearer token required
  uint32_t max_chunk_bytes = kMaxChunkBytes;
  // The longest a Pull waits for its round when the call has no (or a later) deadline.
  absl::Duration max_pull_wait = absl::Minutes(60);
  // Adds what the service does not own to the status tables (the binary fills in the WAN half).
  std::function<void(v1::StatusResponse*)> status_extra;
};

class RelayService final : public v1::Relay::Service {
 public:
  RelayService(RoundEngine* engine, RelayServiceOptions options);

  grpc::Status Join(grpc::ServerContext* ctx, const v1::JoinRequest* req,
                    v1::JoinResponse* resp) override;
  grpc::Status Push(grpc::ServerContext* ctx, grpc::ServerReader<v1::PushChunk>* reader,
                    v1::PushResponse* resp) override;
  grpc::Status Pull(grpc::ServerContext* ctx, const v1::PullRequest* req,
                    grpc::ServerWriter<v1::PullMessage>* writer) override;
  grpc::Status Report(grpc::ServerContext* ctx, const v1::ReportRequest* req,
                      v1::ReportResponse* resp) override;
  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* req,
                     v1::LeaveResponse* resp) override;
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusResponse* resp) override;

  uint64_t auth_failures() const { return auth_failures_.load(std::memory_order_relaxed); }
  // The status tables, as the Status RPC returns them (also for the metrics exporter).
  v1::StatusResponse StatusTables() const;

 private:
  grpc::Status Authorize(const grpc::ServerContext* ctx);
  v1::WorkerPlan PlanOf(uint32_t sender_id) const;

  RoundEngine* const engine_;
  const RelayServiceOptions options_;
  // Counted with relaxed order: a statistic, read by Status and the metrics scrape.
  std::atomic<uint64_t> auth_failures_{0};
  // (sender, round) of the push streams in progress.
  absl::Mutex inflight_mu_;
  std::set<std::pair<uint32_t, uint64_t>> inflight_ ABSL_GUARDED_BY(inflight_mu_);
};

struct RelayServerOptions {
  std::string listen = "127.0.0.1:7400";  // port 0 picks a free one (port())
  RelayServiceOptions service;
  // TLS: server certificate and key (PEM files); with a client CA, mutual TLS.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  absl::Duration tick = absl::Milliseconds(100);
};

class RelayServer {
 public:
  static absl::StatusOr<std::unique_ptr<RelayServer>> Start(RoundEngine* engine,
                                                            RelayServerOptions options);
  ~RelayServer();
  int port() const { return port_; }
  RelayService& service() { return *service_; }
  // Stops accepting calls, cancels those in flight (their deadlines bound the wait) and stops the
  // ticker. Idempotent.
  void Shutdown();

 private:
  RelayServer() = default;
  std::unique_ptr<RelayService> service_;
  std::unique_ptr<grpc::Server> server_;
  RoundEngine* engine_ = nullptr;
  int port_ = 0;
  absl::Notification stop_;
  std::thread ticker_;
};

}  // namespace heddle::relay
