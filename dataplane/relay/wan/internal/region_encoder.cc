#include "dataplane/relay/wan/internal/region_encoder.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/status_macros.h"
#include "dataplane/relay/codec/frame.h"
#include "dataplane/relay/wan/internal/frame_crc.h"

namespace heddle::relay::wan_internal {
namespace {

void PutLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

uint32_t RegionInnerSteps(double tau_eff) {
  if (!(tau_eff >= 1.0)) return 1;  // also NaN
  double r = std::round(tau_eff);
  if (r >= static_cast<double>(std::numeric_limits<uint32_t>::max())) {
    return std::numeric_limits<uint32_t>::max();
  }
  return static_cast<uint32_t>(r);
}

absl::Status WriteFrameTotals(std::span<uint8_t> frame, uint64_t tokens, uint32_t inner_steps) {
  if (frame.size() < kFrameHeaderBytes + kFrameTrailerBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("frame of %u bytes is shorter than a frame header", frame.size()));
  }
  if (tokens < 1 || inner_steps < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "frame totals of %u tokens and %u inner steps: a contribution weighs at least one token "
        "and comes from at least one step",
        tokens, inner_steps));
  }
  PutLe(frame.data() + 52, inner_steps, 4);  // frame.h: inner steps at 52, token count at 56
  PutLe(frame.data() + 56, tokens, 8);
  return absl::OkStatus();
}

absl::StatusOr<FramePtr> PatchFrameTotals(std::span<const uint8_t> provisional, uint64_t tokens,
                                          uint32_t inner_steps) {
  auto out = std::make_shared<std::vector<uint8_t>>(provisional.begin(), provisional.end());
  HEDDLE_RETURN_IF_ERROR(WriteFrameTotals(*out, tokens, inner_steps));
  uint8_t* p = out->data();
  const size_t body = out->size() - kFrameTrailerBytes;
  PutLe(p + body, Crc32c(std::span<const uint8_t>(p, body)), 4);
  absl::StatusOr<FrameView> f = ParseFrame(*out);
  if (!f.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame with totals patched in does not parse: ", f.status().message()));
  }
  return FramePtr(std::move(out));
}

absl::Status ValidateSummary(const RegionSummary& s) {
  if (s.round_id == 0)
    return absl::InvalidArgumentError("region summary: round id 0 (rounds start at 1)");
  if (s.tokens > 0 && !(std::isfinite(s.tau_eff) && s.tau_eff >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %u round %u: tau_eff %g must be finite and at least 1 (it is Σ p_i τ_i)",
        s.region_id, s.round_id, s.tau_eff));
  }
  return absl::OkStatus();
}

RegionEncoder::RegionEncoder(const ModelSpec& spec, uint32_t region_id, bool error_feedback,
                             const SignKernels& kernels)
    : spec_(spec),
      slices_(Slices(spec)),
      region_id_(region_id),
      error_feedback_(error_feedback),
      kernels_(&kernels),
      residual_(slices_.size()) {
  uint64_t max_count = 0;
  for (const SliceRef& s : slices_) max_count = std::max(max_count, s.count);
  signs_.resize(FrameWords(max_count));
  magnitudes_.resize(FrameChunks(max_count, spec.chunk_size));
}

absl::StatusOr<FramePtr> RegionEncoder::Submit(uint64_t round_id, const SliceRef& s,
                                               std::span<const float> x) {
  std::lock_guard<std::mutex> l(mu_);
  if (round_id <= resolved_through_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("round %u: already over for this gateway (rounds up to %u have an outcome)",
                        round_id, resolved_through_));
  }
  if (open_round_ != 0 && open_round_ != round_id) {
    return absl::FailedPreconditionError(
        absl::StrFormat("round %u: round %u is still open on this gateway (wait for its outcome)",
                        round_id, open_round_));
  }
  if (open_round_ == round_id && finished_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("round %u: the region already finished this round", round_id));
  }
  const size_t next = open_round_ == round_id ? frames_.size() : 0;
  if (s.index != next || next >= slices_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "round %u: slice %u submitted, expected slice %u of %u (slices go in Slices() order)",
        round_id, s.index, next, slices_.size()));
  }
  const SliceRef& want = slices_[next];
  if (s.tensor_id != want.tensor_id || s.offset != want.offset || s.count != want.count ||
      s.tensor_elements != want.tensor_elements || s.dtype != want.dtype) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "round %u slice %u: (tensor %u, offset %u, count %u) does not match the model spec's "
        "(tensor %u, offset %u, count %u)",
        round_id, s.index, s.tensor_id, s.offset, s.count, want.tensor_id, want.offset,
        want.count));
  }
  if (x.size() != want.count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("round %u slice %u: %u values given, the slice has %u", round_id, s.index,
                        x.size(), want.count));
  }
  // Refuse non-finite input before touching the residual: never a half-applied slice.
  for (size_t j = 0; j < x.size(); ++j) {
    if (!std::isfinite(x[j])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("round %u slice %u: value %u is %g; the region aggregate cannot be sent",
                          round_id, s.index, j, x[j]));
    }
  }
  std::vector<float>& e = residual_[next];
  size_t bad;
  if (error_feedback_) {
    if (e.empty()) e.assign(want.count, 0.0f);
    bad = kernels_->ef_encode(DType::kFloat32, x.data(), e.data(), want.count, spec_.chunk_size,
                              signs_.data(), magnitudes_.data());
  } else {
    kernels_->pack(DType::kFloat32, x.data(), want.count, spec_.chunk_size, signs_.data(),
                   magnitudes_.data());
    bad = 0;
    for (uint64_t k = 0; k < FrameChunks(want.count, spec_.chunk_size); ++k) {
      if (!std::isfinite(magnitudes_[k])) ++bad;
    }
  }
  if (bad != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "round %u slice %u: %u chunks hold NaN or inf; the region aggregate cannot be sent",
        round_id, s.index, bad));
  }
  FrameHeader h = SliceHeader(spec_, want, round_id, region_id_);
  h.token_count = 1;  // placeholders until Finish(): PatchFrameTotals()
  h.inner_steps = 1;
  auto buf = std::make_shared<std::vector<uint8_t>>(FrameBytes(want.count, spec_.chunk_size));
  absl::Status st = WriteFrame(
      h, std::span<const float>(magnitudes_.data(), FrameChunks(want.count, h.chunk_size)),
      std::span<const uint64_t>(signs_.data(), FrameWords(want.count)), *buf);
  if (!st.ok()) return st;
  open_round_ = round_id;
  finished_ = false;
  frames_.push_back(buf);
  return FramePtr(std::move(buf));
}

absl::StatusOr<std::vector<FramePtr>> RegionEncoder::Finish(const RegionSummary& summary) {
  if (absl::Status st = ValidateSummary(summary); !st.ok()) return st;
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t r = summary.round_id;
  if (summary.region_id != region_id_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("round %u: summary names region %u, this gateway is region %u", r,
                        summary.region_id, region_id_));
  }
  if (r <= resolved_through_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("round %u: already over for this gateway (rounds up to %u have an outcome)",
                        r, resolved_through_));
  }
  if (open_round_ != 0 && open_round_ != r) {
    return absl::FailedPreconditionError(
        absl::StrFormat("round %u: round %u is still open on this gateway", r, open_round_));
  }
  if (open_round_ == r && finished_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("round %u: the region already finished this round", r));
  }
  const size_t have = open_round_ == r ? frames_.size() : 0;
  if (summary.tokens == 0 && have != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "round %u: finished with 0 tokens after %u slices were submitted", r, have));
  }
  if (summary.tokens > 0 && have != slices_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "round %u: finished with %u of %u slices submitted", r, have, slices_.size()));
  }
  open_round_ = r;
  finished_ = true;
  return frames_;
}

bool RegionEncoder::Resolve(uint64_t round_id, bool used) {
  std::lock_guard<std::mutex> l(mu_);
  if (round_id > resolved_through_) resolved_through_ = round_id;
  if (open_round_ == 0 || open_round_ > round_id) return false;
  // open_round_ ≤ round_id: its outcome is this one (or it was skipped over).
  bool retained = false;
  if (!used && error_feedback_) {
    for (size_t i = 0; i < frames_.size(); ++i) {
      absl::StatusOr<FrameView> f = ParseFrame(*frames_[i]);
      if (!f.ok() || residual_[i].empty()) continue;  // our own frames: cannot fail
      AccumulateFrame(*f, 1.0, residual_[i], *kernels_);
      retained = true;
    }
  }
  open_round_ = 0;
  finished_ = false;
  frames_.clear();
  return retained;
}

uint64_t RegionEncoder::resolved_through() const {
  std::lock_guard<std::mutex> l(mu_);
  return resolved_through_;
}

uint64_t RegionEncoder::open_round() const {
  std::lock_guard<std::mutex> l(mu_);
  return open_round_;
}

namespace {

// FramesDigest() with `crc(body, previous)` = Crc32c(body, previous), computed or derived.
template <typename BodyCrcFn>
uint64_t FramesDigestWith(std::span<const FramePtr> frames, BodyCrcFn crc) {
  // As GlobalDigest(): frame bodies without their CRC trailers; and as there, both halves
  // depend on a frame only through its body's CRC-32C and length (a 32-bit check per frame).
  uint32_t lo = 0, hi = 0x9e3779b9u;
  for (size_t i = 0; i < frames.size(); ++i) {
    std::span<const uint8_t> f;
    if (frames[i] != nullptr) f = *frames[i];
    const uint64_t body = f.size() >= kFrameTrailerBytes ? f.size() - kFrameTrailerBytes : f.size();
    uint8_t len[8];
    PutLe(len, body, 8);
    lo = Crc32c(len, lo);
    lo = crc(f, lo);
    uint8_t own[12];
    PutLe(own, crc(f, static_cast<uint32_t>(i) * 0x85ebca6bu + 1u), 4);
    PutLe(own + 4, body, 8);
    hi = Crc32c(own, hi);
  }
  return (uint64_t{hi} << 32) | lo;
}

}  // namespace

uint64_t FramesDigest(std::span<const FramePtr> frames) {
  return FramesDigestWith(frames, [](std::span<const uint8_t> f, uint32_t prev) {
    if (f.size() >= kFrameTrailerBytes) f = f.first(f.size() - kFrameTrailerBytes);
    return Crc32c(f, prev);
  });
}

uint64_t FramesDigestOfValidFrames(std::span<const FramePtr> frames) {
  return FramesDigestWith(
      frames, [](std::span<const uint8_t> f, uint32_t prev) { return BodyCrc(f, prev); });
}

}  // namespace heddle::relay::wan_internal
