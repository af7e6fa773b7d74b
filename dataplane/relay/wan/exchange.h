// File: dataplane/relay/wan/exchange.h
//
// The seam between a gateway's two halves (docs/relay.md §7):
//
//   region side (round engine, worker service)          WAN side (this interface)
//   ------------------------------------------          -------------------------
//   closes round r over its workers, aggregates   --->  SubmitSlice(r, s, fp32 region aggregate)
//   every slice in Slices() order, then               re-compresses it at once with the gateway's
//   FinishRegion(r, tokens, τ_eff)                    own error feedback; exchanges region frames
//                                                     with the other gateways; a coordinator
//   publishes r to its workers, opens r+1        <---  decides which regions round r includes;
//                                                     OutcomeCallback(r, published | aborted)
//
// Every gateway ends a round with the same GlobalAggregate: the same region frames (bytes), the
// same weights (doubles) and the same order (increasing region id), so AccumulateGlobalSlice()
// gives the same fp32 bits on every gateway and every worker — workers receive the region frames
// and weights, not a dense tensor, which is R/32 of the fp32 size.
//
// Implementations: NewLocalExchange() (one region, no peers: the global aggregate is the
// region's own re-compressed frame) and the gRPC exchange between gateways (wan/grpc_exchange.h).
// The protocol, the weight math and the failure cases: docs/relay-wan.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/relay/codec/aggregate.h"
#include "dataplane/relay/codec/encoder.h"
#include "dataplane/relay/round/model_spec.h"

namespace heddle::relay {

// What a region contributes to round r, given after its last slice.
struct RegionSummary {
  uint64_t round_id = 0;
  uint32_t region_id = 0;
  // N_r: the tokens of the region's included workers. 0 = the region has nothing this round
  // (its round aborted, e.g. below quorum); then no slices were submitted.
  uint64_t tokens = 0;
  // FedNova's effective step count of the region aggregate, Σ_i p_i τ_i over its workers
  // (p_i = n_i / N_r), ≥ 1. Carried bit-exactly (IEEE double) to every gateway.
  double tau_eff = 1.0;
  uint32_t workers = 0;  // included workers, for status only
};

// One region's part of a published round.
struct RegionPart {
  uint32_t region_id = 0;
  uint64_t tokens = 0;
  double tau_eff = 1.0;
  double weight = 0;  // W_r, GlobalWeights()
};

// A published round: identical on every gateway.
struct GlobalAggregate {
  uint64_t round_id = 0;
  Weighting weighting = Weighting::kFedNova;
  std::vector<RegionPart> parts;  // included regions, increasing region id
  uint32_t slices = 0;            // Slices(spec).size()
  // frames[p * slices + s]: part p's frame for slice s (a valid frame: ParseFrame() accepts it;
  // its sender id is the region id, its tokens N_r).
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> frames;
  // CRC-32C based digest of the parts (ids, tokens, τ_eff, weights) and, in order, every
  // frame's length and body CRC-32C (it depends on a frame through those only: a check against
  // accidental mismatch, not a hash of the bytes): equal on every gateway; workers and peers
  // compare it.
  uint64_t digest = 0;
};

// The region-level weights (docs/relay.md §7): with N = Σ N_r and p_r = N_r / N,
//   tokens:   W_r = p_r
//   fednova:  W_r = τ_eff · p_r / τ_eff,r,  τ_eff = Σ_r p_r τ_eff,r
// which makes Σ_r W_r·A_r equal the worker-level FedNova aggregate over every included worker
// when A_r is the exact region aggregate. Computed in double in increasing region id.
absl::StatusOr<std::vector<double>> GlobalWeights(std::span<const RegionPart> parts,
                                                  Weighting weighting);

// out = Σ_p W_p · decode(frame of part p, slice s), from +0.0f, in part order. out.size() must
// be exactly the slice's element count. Every part's frame is validated first (checksum,
// round, sender = region id, tokens, the same slice shape); on any error out is left untouched.
// The same bits on every host and kernel form for the same aggregate.
absl::Status AccumulateGlobalSlice(const GlobalAggregate& g, uint32_t slice, std::span<float> out,
                                   const SignKernels& k = ActiveKernels());

uint64_t GlobalDigest(const GlobalAggregate& g);

struct RoundOutcome {
  enum class Kind : uint8_t {
    kPublished,  // `aggregate` is the round's result (which may or may not include this region)
    kAborted,    // the round was abandoned everywhere: nothing to apply; `reason` says why
  };
  Kind kind = Kind::kAborted;
  absl::Status reason;  // for kAborted
  std::shared_ptr<const GlobalAggregate> aggregate;
  bool includes_this_region = false;
  // This region submitted frames for the round, they were not applied (the round left the
  // region out, or aborted), and the gateway put them back into its error-feedback residual
  // (e ← e + m·sign(v)): the region's work goes out with its next included round. The region's
  // workers must then NOT restore their own residuals for this round — that would count their
  // work twice. False when the gateway has no error feedback: then the workers restore.
  bool retained_by_gateway = false;
};

class WanExchange {
 public:
  virtual ~WanExchange() = default;

  // The region's aggregate of slice s for round r (fp32, s.count values), in Slices() order.
  // Compressed at once (gateway error feedback); the span is not kept.
  virtual absl::Status SubmitSlice(uint64_t round_id, const SliceRef& s,
                                   std::span<const float> region_aggregate) = 0;
  // After the region's last slice of round r, or alone with tokens = 0.
  virtual absl::Status FinishRegion(const RegionSummary& summary) = 0;

  // Called exactly once per round id, in increasing round order, from an exchange thread. A
  // gateway that was cut off gets the rounds it missed, in order, when it reconnects.
  using OutcomeCallback = std::function<void(uint64_t round_id, RoundOutcome outcome)>;
  virtual void SetOutcomeCallback(OutcomeCallback cb) = 0;

  // A recently published round (the last few are kept), e.g. for a worker that pulls late.
  virtual absl::StatusOr<std::shared_ptr<const GlobalAggregate>> Published(
      uint64_t round_id) const = 0;
};

struct LocalExchangeOptions {
  uint32_t region_id = 0;
  Weighting weighting = Weighting::kFedNova;
  bool gateway_error_feedback = true;
  uint32_t keep_rounds = 4;
};

// One region, no peers: each round publishes the region's own frames with weight W = 1 (tokens)
// or 1 (fednova: τ_eff/τ_eff,r = 1).
absl::StatusOr<std::unique_ptr<WanExchange>> NewLocalExchange(const ModelSpec& spec,
                                                              const LocalExchangeOptions& options);

}  // namespace heddle::relay
