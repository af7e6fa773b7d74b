// File: dataplane/relay/codec/aggregate.h
//
// The aggregation math the relays run (docs/relay.md §5): from the frames of one round for one
// tensor (slice), the aggregate
//
//   Δ[j] = Σ_i w_i · m_i(chunk of j) · s_i[j],   s_i[j] = ±1 the sign bits of sender i,
//
// with the weights w_i from the token counts n_i and inner steps τ_i the frames carry:
//
//   tokens:   w_i = n_i / N,                     N = Σ n_i               (Σ w_i = 1)
//   fednova:  w_i = τ_eff · p_i / τ_i,           p_i = n_i / N, τ_eff = Σ p_i τ_i
//
// Only the senders present count: a missing worker's weight is spread over the rest by the
// same formulas (renormalized), provided the present tokens reach the configured share.
// Senders are added in increasing sender id, whatever order their frames arrived in, so every
// gateway holding the same frames computes a bit-identical Δ.
//
//   Aggregator agg(max_senders);
//   HEDDLE_RETURN_IF_ERROR(agg.Aggregate(frames, {.weighting = Weighting::kFedNova}, out));
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/relay/codec/frame.h"

namespace heddle::relay {

enum class Weighting : uint8_t {
  kTokens = 0,   // w_i ∝ n_i
  kFedNova = 1,  // w_i ∝ n_i / τ_i, scaled by τ_eff
};
const char* WeightingName(Weighting w);

struct Contribution {
  uint32_t sender_id = 0;
  uint64_t tokens = 0;       // n_i ≥ 1
  uint32_t inner_steps = 1;  // τ_i ≥ 1
};

struct AggregateOptions {
  // FedNova by default: it is token weighting when every τ_i is equal, and stays consistent
  // with the token-weighted objective when they differ (docs/relay.md §5).
  Weighting weighting = Weighting::kFedNova;
  // When non-zero: the round's expected token total, and the least share of it the present
  // senders must hold for the aggregate to be formed (else FailedPrecondition: abort the round).
  uint64_t expected_tokens = 0;
  double min_token_fraction = 0.0;
};

// The weights of `present`, in the same order as given. Fails on an empty set, a duplicate
// sender, a zero token or step count, or a token total past 2^64. Computed in double, in
// increasing sender id where an order matters (τ_eff), so any permutation of `present` gives the
// same bits for each sender.
absl::StatusOr<std::vector<double>> ComputeWeights(std::span<const Contribution> present,
                                                   Weighting weighting);

class Aggregator {
 public:
  // Room for max_senders frames per call; more are still handled, with one allocation.
  explicit Aggregator(size_t max_senders = 64);

  // out (element_count values) = Δ of the frames, which must agree on round, tensor, slice and
  // chunk size and come from distinct senders.
  absl::Status Aggregate(std::span<const FrameView> frames, const AggregateOptions& options,
                         std::span<float> out, const SignKernels& k = ActiveKernels());

 private:
  std::vector<size_t> order_;
  std::vector<Contribution> present_;
  std::vector<double> weights_;
};

}  // namespace heddle::relay
