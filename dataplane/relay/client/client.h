// File: dataplane/relay/client/client.h
//
// The worker's side of a GeoMesh round (docs/relay.md §10): join the region's relay, push this
// round's pseudo-gradient sign-compressed (one error-feedback SignEncoder per slice), pull the
// round's global aggregate into fp32 buffers, report the measured compute time to the planner.
// The header is small and free of gRPC and protobuf types on purpose: the Python binding wraps it.
//
//   WorkerInfo me{.name = "us-east/gpu3", .tokens_per_s = 40000, .memory_bytes = 80ull << 30};
//   HEDDLE_ASSIGN_OR_RETURN(std::unique_ptr<RelayClient> c,
//                           RelayClient::Connect({.address = "relay:7400", .token = tok}, me));
//   for (uint64_t r = c->next_round();; r = c->next_round()) {
//     WorkerPlan p = c->plan();                         // batch size, inner steps of this round
//     ... p.inner_steps steps of p.batch_size; pseudo-gradient per tensor in grads ...
//     HEDDLE_RETURN_IF_ERROR(c->PushRound(r, grads, tokens, p.inner_steps));
//     HEDDLE_ASSIGN_OR_RETURN(PullResult res, c->PullRound(r, outs));  // outs[t]: fp32 buffers
//     if (res.applied) ... apply outs as the outer gradient ...
//     c->Report(r, p.batch_size, p.inner_steps, compute_seconds);
//   }
//
// Rounds: PushRound(r) then PullRound(r), in round order. A round this worker could not push in
// time (FailedPrecondition from PushRound naming the relay's current round) is still pulled: the
// update is applied like everyone else's, and the client takes back what it encoded into the
// error-feedback residual (e ← e + m·sign(v)), so no work is lost. The same happens when the
// pull says the worker was excluded (late, below quorum, region excluded) or the round aborted.
//
// Memory: the residuals (fp32, the model's size — error feedback needs them), the frames last
// pushed (1/32 of that, kept until the pull settles the round) and one message at a time.
// PullRound writes the aggregate slice by slice straight into the caller's buffers after checking
// each slice's digest; nothing the size of the model is allocated per round.
//
// Every RPC has a deadline; errors come back as absl::Status naming the round, the slice and
// what the relay said. Not thread-safe: one RelayClient per worker process, used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/relay/codec/sign_kernels.h"
#include "dataplane/relay/round/model_spec.h"

namespace heddle::relay {

struct RelayClientOptions {
  std::string address;  // "host:port", "ipv6:[::1]:7400" or "unix:/path"
  std::string token;    // bearer token the relay requires; empty = none
  // TLS: a CA to verify the relay with turns it on; a client cert and key for mutual TLS.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;  // override of the name checked in the relay's certificate
  absl::Duration rpc_timeout = absl::Seconds(30);   // Join, Report, Leave, Status
  absl::Duration push_timeout = absl::Minutes(10);  // one PushRound (the whole stream)
  // How long PullRound waits for the round to end (the slowest worker plus the WAN exchange).
  absl::Duration pull_timeout = absl::Minutes(60);
  bool error_feedback = true;
};

// What the planner needs to know about this worker (control/planner/model.h).
struct WorkerInfo {
  std::string name;    // unique in the region, printable ASCII, ≤ 128 bytes: the stable identity
  std::string region;  // the region the worker believes it is in; checked against the relay's
  double tokens_per_s = 0;  // profiled throughput at its usual batch (> 0 for planning)
  double half_batch = 0;    // > 0: saturating model r(b) = peak·b/(b + half_batch)
  int64_t max_batch = 0;    // or memory_bytes / fixed_bytes / bytes_per_sample
  uint64_t memory_bytes = 0;
  uint64_t fixed_bytes = 0;
  uint64_t bytes_per_sample = 0;
  int64_t seq_len = 0;  // 0 = the relay's default
};

// This worker's part of the plan in force (valid = false when the relay has no plan yet).
struct WorkerPlan {
  bool valid = false;
  uint64_t version = 0;
  int64_t batch_size = 0;
  int64_t inner_steps = 0;
  int64_t seq_len = 0;
  int64_t tokens = 0;              // batch_size · inner_steps · seq_len
  double predicted_compute_s = 0;  // when this worker should push, from the round's start
  double target_round_s = 0;
};

// One tensor of the model spec, in spec order: its values in the spec's dtype.
struct TensorInput {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
};

struct PushStats {
  uint64_t round_id = 0;
  uint64_t frame_bytes = 0;       // what went on the wire
  uint64_t source_bytes = 0;      // the tensors' bytes in their dtype
  uint32_t nonfinite_chunks = 0;  // always 0 on success (NaN/inf in the input is refused)
};

struct PullResult {
  uint64_t round_id = 0;
  // The buffers hold the round's global aggregate (every worker of every region computes the same
  // bits). False: the round was aborted everywhere, nothing to apply, the buffers are untouched.
  bool applied = false;
  // This worker's push is in the aggregate. When false, its frames went back into the residual —
  // unless the reason says the gateway kept the region's update (then it goes out later from
  // there, and the worker's residual is left as it is).
  bool included = false;
  std::string reason;    // why not included / not applied; empty otherwise
  uint64_t digest = 0;   // the GlobalAggregate digest (equal on every worker)
  uint32_t regions = 0;  // regions in the aggregate
  uint64_t tokens = 0;   // tokens in the aggregate, all regions
  uint64_t bytes = 0;    // received for this pull
  // The round the relay collects pushes for when it answered: more than round_id + 1 means this
  // worker is behind (its region was cut off, or it was slow) and should pull the rounds in
  // between before computing for that one.
  uint64_t collecting_round = 0;
};

struct RoundStatus {
  uint64_t current_round = 0;  // the round pushes go to now
  uint64_t last_published = 0;
};

class RelayClient {
 public:
  // Connects, checks the model spec with the relay (the relay's spec is adopted: spec()), and
  // joins. `spec_digest` ≠ 0 is the SpecDigest() the worker holds; a mismatch fails the join.
  static absl::StatusOr<std::unique_ptr<RelayClient>> Connect(const RelayClientOptions& options,
                                                              const WorkerInfo& me,
                                                              uint64_t spec_digest = 0);
  ~RelayClient();
  RelayClient(const RelayClient&) = delete;
  RelayClient& operator=(const RelayClient&) = delete;

  const ModelSpec& spec() const;
  uint32_t sender_id() const;
  uint32_t region_id() const;
  // The round to push next: the join's first round, then one past the last pulled.
  uint64_t next_round() const;
  // The plan from the last join or pull reply.
  const WorkerPlan& plan() const;

  // Encodes every slice of the model (tensors[t] in spec order, spec dtype) with error feedback
  // and streams the frames of round `round_id`. tokens ≥ 1 and inner_steps ≥ 1 are this round's
  // (FedNova weighting). FailedPrecondition when the relay is on another round (the residual is
  // restored at once: nothing was used), InvalidArgument on NaN/inf input (nothing sent, the
  // residual untouched), AlreadyExists when the round was already pushed. After any other failure
  // the update is back in the residual too: RetryPush() resends it, or the worker moves on.
  absl::StatusOr<PushStats> PushRound(uint64_t round_id, std::span<const TensorInput> tensors,
                                      uint64_t tokens, uint32_t inner_steps);

  // Resends round `round_id`'s frames after a PushRound that failed in transport (UNAVAILABLE,
  // DEADLINE_EXCEEDED...): the same bytes, no new encode (a second PushRound of the round is
  // refused, because the failed attempt's update is already back in the residual).
  // AlreadyExists-safe: if the relay had taken the first attempt, this is a success.
  absl::StatusOr<PushStats> RetryPush(uint64_t round_id);

  // Waits for round `round_id` to end and writes its global aggregate into out[t] (fp32,
  // spec().tensors[t].elements values each; overwritten). Each slice's digest and frames are
  // checked before it is written. Restores the residual when this worker's push is not in the
  // aggregate. On an error the buffers may hold some of the round's slices: do not apply them;
  // the round can be pulled again (nothing is settled until a pull succeeds).
  absl::StatusOr<PullResult> PullRound(uint64_t round_id, std::span<float* const> out);

  // The measured compute time of round `round_id` (start of the round to the push), for the
  // planner. The reply's plan (if any) is in plan() afterwards.
  absl::Status Report(uint64_t round_id, int64_t batch_size, int64_t inner_steps, double compute_s);

  absl::StatusOr<RoundStatus> Status();
  // Leaves the region; the client can only be destroyed after. The destructor leaves too.
  absl::Status Leave();

 private:
  struct Impl;
  explicit RelayClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heddle::relay
