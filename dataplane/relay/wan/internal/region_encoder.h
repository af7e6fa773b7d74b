// File: dataplane/relay/wan/internal/region_encoder.h
//
// The gateway's re-compression of its region aggregate (docs/relay-wan.md §2): one fp32
// error-feedback residual per slice (allocated at the slice's first use), the codec's ef_encode
// kernel, and the frames of the open round kept (compressed) until the round's outcome is known:
//
//   Submit(r, s, x)   v = x + e_s; frame = (m, sign(v)); e_s ← v − m·sign(v)
//   Finish(summary)   closes r: every slice was submitted (tokens > 0) or none (tokens = 0)
//   Resolve(r, used)  used: forget the frames; not used: e_s ← e_s + m·sign(v) for every slice
//                     encoded in r, so the region's work is sent with its next included round
//
// Frames are written with placeholder totals (1 token, 1 step) because N_r and τ_eff,r are
// known only at Finish(); PatchFrameTotals() writes the real ones into a copy. Every gateway
// applies the same patch to the same provisional bytes, so the final frames are identical.
//
// Thread-safe (one internal mutex; Submit() holds it while encoding one slice).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/relay/codec/sign_kernels.h"
#include "dataplane/relay/round/model_spec.h"
#include "dataplane/relay/wan/exchange.h"

namespace heddle::relay::wan_internal {

using FramePtr = std::shared_ptr<const std::vector<uint8_t>>;

// inner_steps of a region frame: max(1, round(τ_eff)), clamped to uint32 (information only).
uint32_t RegionInnerSteps(double tau_eff);

// Writes token_count and inner_steps into `frame`'s header (the trailer is left to the
// caller); refused (InvalidArgument, nothing written) for a frame shorter than a header and
// trailer, tokens < 1 or inner_steps < 1 — what ParseFrame() would refuse in the result. The one
// place both patches below write the totals.
absl::Status WriteFrameTotals(std::span<uint8_t> frame, uint64_t tokens, uint32_t inner_steps);

// A copy of the valid frame `provisional` with token_count and inner_steps replaced and the
// checksum recomputed; refused (InvalidArgument) unless WriteFrameTotals() accepts the totals
// and the result parses.
absl::StatusOr<FramePtr> PatchFrameTotals(std::span<const uint8_t> provisional, uint64_t tokens,
                                          uint32_t inner_steps);

// A digest of a region's frames in slice order (the provisional ones a RegionFinish announces).
uint64_t FramesDigest(std::span<const FramePtr> frames);

// Checks a region summary on its own (tokens, τ_eff finite and ≥ 1 when tokens > 0).
absl::Status ValidateSummary(const RegionSummary& s);

class RegionEncoder {
 public:
  RegionEncoder(const ModelSpec& spec, uint32_t region_id, bool error_feedback,
                const SignKernels& kernels = ActiveKernels());

  // Slice s of round r, in Slices() order, r greater than every resolved round. A new round
  // may start only after the previous one was resolved.
  absl::StatusOr<FramePtr> Submit(uint64_t round_id, const SliceRef& s, std::span<const float> x);
  // The provisional frames of the round, in slice order (empty for tokens = 0).
  absl::StatusOr<std::vector<FramePtr>> Finish(const RegionSummary& summary);
  // Returns whether frames were put back into the residual (retained_by_gateway).
  bool Resolve(uint64_t round_id, bool used);

  uint64_t resolved_through() const;
  uint64_t open_round() const;  // 0: none
  const std::vector<SliceRef>& slices() const { return slices_; }

 private:
  const ModelSpec spec_;
  const std::vector<SliceRef> slices_;
  const uint32_t region_id_;
  const bool error_feedback_;
  const SignKernels* kernels_;

  mutable std::mutex mu_;
  uint64_t resolved_through_ = 0;  // every round ≤ this is resolved
  uint64_t open_round_ = 0;        // 0: none
  bool finished_ = false;
  std::vector<FramePtr> frames_;              // of open_round_, in slice order
  std::vector<std::vector<float>> residual_;  // per slice, empty until first used
  std::vector<uint64_t> signs_;
  std::vector<float> magnitudes_;
};

}  // namespace heddle::relay::wan_internal
