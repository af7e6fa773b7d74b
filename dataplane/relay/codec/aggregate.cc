#include "dataplane/relay/codec/aggregate.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_format.h"

namespace heddle::relay {

const char* WeightingName(Weighting w) {
  switch (w) {
    case Weighting::kTokens:
      return "tokens";
    case Weighting::kFedNova:
      return "fednova";
  }
  return "unknown";
}

namespace {

// ComputeWeights() into caller-owned vectors (the Aggregator reuses its own).
absl::Status WeightsInto(std::span<const Contribution> present, Weighting weighting,
                         std::vector<size_t>& order, std::vector<double>& w) {
  if (present.empty()) return absl::FailedPreconditionError("aggregate: no contributions");
  order.resize(present.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return present[a].sender_id < present[b].sender_id; });
  uint64_t total = 0;
  for (size_t n = 0; n < order.size(); ++n) {
    const Contribution& c = present[order[n]];
    if (n > 0 && present[order[n - 1]].sender_id == c.sender_id) {
      return absl::InvalidArgumentError(
          absl::StrFormat("aggregate: sender %u contributes twice", c.sender_id));
    }
    if (c.tokens == 0 || c.inner_steps == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "aggregate: sender %u has %u tokens and %u inner steps; both must be at least 1",
          c.sender_id, c.tokens, c.inner_steps));
    }
    if (c.tokens > UINT64_MAX - total) {
      return absl::InvalidArgumentError("aggregate: token counts add up past 2^64");
    }
    total += c.tokens;
  }
  const double n_total = static_cast<double>(total);
  w.resize(present.size());
  for (size_t i = 0; i < present.size(); ++i) {
    w[i] = static_cast<double>(present[i].tokens) / n_total;
  }
  if (weighting == Weighting::kFedNova) {
    double tau_eff = 0;  // Σ p_i τ_i in increasing sender id
    for (size_t i : order) tau_eff += w[i] * static_cast<double>(present[i].inner_steps);
    for (size_t i = 0; i < present.size(); ++i) {
      w[i] = tau_eff * (w[i] / static_cast<double>(present[i].inner_steps));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<double>> ComputeWeights(std::span<const Contribution> present,
                                                   Weighting weighting) {
  std::vector<size_t> order;
  std::vector<double> w;
  if (absl::Status s = WeightsInto(present, weighting, order, w); !s.ok()) return s;
  return w;
}

Aggregator::Aggregator(size_t max_senders) {
  order_.reserve(max_senders);
  present_.reserve(max_senders);
  weights_.reserve(max_senders);
}

absl::Status Aggregator::Aggregate(std::span<const FrameView> frames,
                                   const AggregateOptions& options, std::span<float> out,
                                   const SignKernels& k) {
  if (frames.empty()) return absl::FailedPreconditionError("aggregate: no contributions");
  const FrameHeader& h0 = frames[0].header();
  present_.clear();
  uint64_t present_tokens = 0;
  for (const FrameView& f : frames) {
    const FrameHeader& h = f.header();
    if (h.round_id != h0.round_id || h.tensor_id != h0.tensor_id ||
        h.tensor_elements != h0.tensor_elements || h.element_offset != h0.element_offset ||
        h.element_count != h0.element_count || h.chunk_size != h0.chunk_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "aggregate: sender %u's frame (round %u, tensor %u, elements %u+%u of %u, chunk %u) "
          "does not match sender %u's (round %u, tensor %u, elements %u+%u of %u, chunk %u)",
          h.sender_id, h.round_id, h.tensor_id, h.element_offset, h.element_count,
          h.tensor_elements, h.chunk_size, h0.sender_id, h0.round_id, h0.tensor_id,
          h0.element_offset, h0.element_count, h0.tensor_elements, h0.chunk_size));
    }
    present_.push_back({h.sender_id, h.token_count, h.inner_steps});
    present_tokens += h.token_count;  // overflow is caught by ComputeWeights
  }
  if (out.size() != h0.element_count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "aggregate: output of %u values for frames of %u", out.size(), h0.element_count));
  }
  if (absl::Status s = WeightsInto(present_, options.weighting, order_, weights_); !s.ok()) {
    return s;
  }
  if (options.expected_tokens != 0 &&
      static_cast<double>(present_tokens) <
          options.min_token_fraction * static_cast<double>(options.expected_tokens)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "aggregate: %u senders hold %u of the %u tokens expected, below the %.3f required",
        frames.size(), present_tokens, options.expected_tokens, options.min_token_fraction));
  }
  // order_ holds the frames' indexes by increasing sender id (present_[i] is frames[i]).
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t i : order_) AccumulateFrame(frames[i], weights_[i], out, k);
  return absl::OkStatus();
}

}  // namespace heddle::relay
