#include "dataplane/relay/wan/exchange.h"

#include <bit>
#include <cmath>
#include <map>
#include <mutex>

#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "dataplane/relay/codec/frame.h"
#include "dataplane/relay/wan/internal/frame_crc.h"
#include "dataplane/relay/wan/internal/outcome_queue.h"
#include "dataplane/relay/wan/internal/region_encoder.h"

namespace heddle::relay {
namespace {

void Put(std::string& b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

absl::StatusOr<std::vector<double>> GlobalWeights(std::span<const RegionPart> parts,
                                                  Weighting weighting) {
  if (parts.empty()) return absl::FailedPreconditionError("global weights: no regions included");
  uint64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const RegionPart& p = parts[i];
    if (i > 0 && parts[i - 1].region_id >= p.region_id) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "global weights: region %u listed after region %u; parts go in increasing region id, "
          "each once",
          p.region_id, parts[i - 1].region_id));
    }
    if (p.tokens == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("global weights: region %u has 0 tokens", p.region_id));
    }
    if (!(std::isfinite(p.tau_eff) && p.tau_eff >= 1.0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "global weights: region %u has tau_eff %g; it must be finite and at least 1", p.region_id,
          p.tau_eff));
    }
    if (p.tokens > UINT64_MAX - total) {
      return absl::InvalidArgumentError("global weights: token counts add up past 2^64");
    }
    total += p.tokens;
  }
  const double n = static_cast<double>(total);
  std::vector<double> w(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) w[i] = static_cast<double>(parts[i].tokens) / n;
  if (weighting == Weighting::kFedNova) {
    double tau = 0;  // τ_eff = Σ_r p_r τ_eff,r, increasing region id
    for (size_t i = 0; i < parts.size(); ++i) tau += w[i] * parts[i].tau_eff;
    for (size_t i = 0; i < parts.size(); ++i) w[i] = tau * (w[i] / parts[i].tau_eff);
  }
  return w;
}

absl::Status AccumulateGlobalSlice(const GlobalAggregate& g, uint32_t slice, std::span<float> out,
                                   const SignKernels& k) {
  if (slice >= g.slices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("round %u: slice %u of a model of %u slices", g.round_id, slice, g.slices));
  }
  if (g.frames.size() != g.parts.size() * size_t{g.slices}) {
    return absl::InvalidArgumentError(
        absl::StrFormat("round %u: %u frames for %u regions × %u slices", g.round_id,
                        g.frames.size(), g.parts.size(), g.slices));
  }
  // Validate every frame first: out is written only when all of them are good.
  std::vector<FrameView> views;
  views.reserve(g.parts.size());
  for (size_t p = 0; p < g.parts.size(); ++p) {
    const auto& buf = g.frames[p * g.slices + slice];
    if (buf == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("round %u: region %u has no frame for slice %u", g.round_id,
                          g.parts[p].region_id, slice));
    }
    absl::StatusOr<FrameView> f = ParseFrame(*buf);
    if (!f.ok()) {
      return absl::DataLossError(absl::StrFormat("round %u region %u slice %u: %s", g.round_id,
                                                 g.parts[p].region_id, slice,
                                                 f.status().message()));
    }
    const FrameHeader& h = f->header();
    if (h.round_id != g.round_id || h.sender_id != g.parts[p].region_id ||
        h.token_count != g.parts[p].tokens) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "round %u region %u slice %u: the frame says round %u, sender %u, %u tokens", g.round_id,
          g.parts[p].region_id, slice, h.round_id, h.sender_id, h.token_count));
    }
    if (!views.empty()) {
      const FrameHeader& h0 = views.front().header();
      if (h.tensor_id != h0.tensor_id || h.element_offset != h0.element_offset ||
          h.element_count != h0.element_count || h.chunk_size != h0.chunk_size) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "round %u slice %u: region %u's frame covers tensor %u [%u, +%u) chunk %u, region "
            "%u's tensor %u [%u, +%u) chunk %u",
            g.round_id, slice, g.parts[p].region_id, h.tensor_id, h.element_offset, h.element_count,
            h.chunk_size, g.parts[0].region_id, h0.tensor_id, h0.element_offset, h0.element_count,
            h0.chunk_size));
      }
    }
    if (h.element_count != out.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("round %u slice %u: output holds %u values, the slice has %u", g.round_id,
                          slice, out.size(), h.element_count));
    }
    views.push_back(*f);
  }
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t p = 0; p < views.size(); ++p) AccumulateFrame(views[p], g.parts[p].weight, out, k);
  return absl::OkStatus();
}

namespace {

// GlobalDigest() of g's header and n frames, frame i of `bytes(i)` bytes, with `crc(i, previous)`
// = Crc32c(frame i's body, previous), computed or derived.
template <typename BytesFn, typename BodyCrcFn>
uint64_t GlobalDigestWith(const GlobalAggregate& g, size_t n, BytesFn bytes, BodyCrcFn crc) {
  // lo: CRC-32C of the canonical stream (header, then each frame's length and body); hi:
  // CRC-32C over the header and each frame's own CRC seeded with its position, and its length.
  // CRC-32C is affine (Crc32c(body, prev) = Crc32c(body, 0) ^ Z_n(prev)), so both halves
  // depend on a frame only through its body's CRC-32C and its length: two frames of one length
  // with the same CRC-32C give the same digest. It is a 32-bit check per frame against
  // accidental mismatch, not a 64-bit hash of the bytes, and no protection against a chosen
  // change (authentication is the transport's job).
  std::string b;
  Put(b, 1, 2);  // digest layout version
  Put(b, g.round_id, 8);
  Put(b, static_cast<uint8_t>(g.weighting), 1);
  Put(b, g.slices, 4);
  Put(b, g.parts.size(), 4);
  for (const RegionPart& p : g.parts) {
    Put(b, p.region_id, 4);
    Put(b, p.tokens, 8);
    Put(b, std::bit_cast<uint64_t>(p.tau_eff), 8);
    Put(b, std::bit_cast<uint64_t>(p.weight), 8);
  }
  Put(b, n, 8);
  uint32_t lo = Crc32c(AsBytes(b));
  uint32_t hi = Crc32c(AsBytes(b), 0x9e3779b9u);
  for (size_t i = 0; i < n; ++i) {
    // Without the frame's CRC trailer: a message followed by its own CRC leaves the CRC
    // register in a fixed state, which would hide the frame's content. The trailer is a
    // function of the body; ParseFrame() checks it.
    const uint64_t size = bytes(i);
    const uint64_t body = size >= kFrameTrailerBytes ? size - kFrameTrailerBytes : size;
    std::string len;
    Put(len, body, 8);
    lo = Crc32c(AsBytes(len), lo);
    lo = crc(i, lo);
    std::string own;
    Put(own, crc(i, static_cast<uint32_t>(i) * 0x85ebca6bu + 1u), 4);
    Put(own, body, 8);
    hi = Crc32c(AsBytes(own), hi);
  }
  return (uint64_t{hi} << 32) | lo;
}

}  // namespace

namespace {
std::span<const uint8_t> FrameAt(const GlobalAggregate& g, size_t i) {
  return g.frames[i] != nullptr ? std::span<const uint8_t>(*g.frames[i])
                                : std::span<const uint8_t>();
}
}  // namespace

uint64_t GlobalDigest(const GlobalAggregate& g) {
  return GlobalDigestWith(
      g, g.frames.size(), [&](size_t i) { return FrameAt(g, i).size(); },
      [&](size_t i, uint32_t prev) {
        std::span<const uint8_t> f = FrameAt(g, i);
        if (f.size() >= kFrameTrailerBytes) f = f.first(f.size() - kFrameTrailerBytes);
        return Crc32c(f, prev);
      });
}

namespace wan_internal {
uint64_t GlobalDigestOfValidFrames(const GlobalAggregate& g) {
  return GlobalDigestWith(
      g, g.frames.size(), [&](size_t i) { return FrameAt(g, i).size(); },
      [&](size_t i, uint32_t prev) { return BodyCrc(FrameAt(g, i), prev); });
}

uint64_t GlobalDigestOfSums(const GlobalAggregate& g, std::span<const ValidFrameSum> frames) {
  return GlobalDigestWith(
      g, frames.size(), [&](size_t i) { return frames[i].bytes; },
      [&](size_t i, uint32_t prev) { return BodyCrc(frames[i], prev); });
}
}  // namespace wan_internal

namespace {

using wan_internal::FramePtr;

// One region, no peers.
class LocalExchange final : public WanExchange {
 public:
  LocalExchange(const ModelSpec& spec, const LocalExchangeOptions& o)
      : options_(o),
        encoder_(spec, o.region_id, o.gateway_error_feedback),
        slices_(static_cast<uint32_t>(encoder_.slices().size())) {}

  absl::Status SubmitSlice(uint64_t round_id, const SliceRef& s,
                           std::span<const float> region_aggregate) override {
    return encoder_.Submit(round_id, s, region_aggregate).status();
  }

  absl::Status FinishRegion(const RegionSummary& summary) override {
    absl::StatusOr<std::vector<FramePtr>> frames = encoder_.Finish(summary);
    if (!frames.ok()) return frames.status();
    const uint64_t r = summary.round_id;
    RoundOutcome out;
    if (summary.tokens == 0) {
      out.kind = RoundOutcome::Kind::kAborted;
      out.reason = absl::FailedPreconditionError(absl::StrFormat(
          "round %u: region %u, the only region, contributed no tokens", r, options_.region_id));
      out.retained_by_gateway = encoder_.Resolve(r, false);
      queue_.Push(r, std::move(out));
      return absl::OkStatus();
    }
    auto g = std::make_shared<GlobalAggregate>();
    g->round_id = r;
    g->weighting = options_.weighting;
    g->slices = slices_;
    g->parts.push_back(RegionPart{
        .region_id = options_.region_id, .tokens = summary.tokens, .tau_eff = summary.tau_eff});
    absl::StatusOr<std::vector<double>> w = GlobalWeights(g->parts, g->weighting);
    if (!w.ok()) return w.status();
    g->parts[0].weight = (*w)[0];
    const uint32_t steps = wan_internal::RegionInnerSteps(summary.tau_eff);
    for (const FramePtr& f : *frames) {
      absl::StatusOr<FramePtr> patched = wan_internal::PatchFrameTotals(*f, summary.tokens, steps);
      if (!patched.ok()) return patched.status();
      g->frames.push_back(*std::move(patched));
    }
    g->digest = GlobalDigest(*g);
    encoder_.Resolve(r, true);
    {
      std::lock_guard<std::mutex> l(mu_);
      published_[r] = g;
      while (published_.size() > std::max<uint32_t>(1, options_.keep_rounds)) {
        published_.erase(published_.begin());
      }
    }
    out.kind = RoundOutcome::Kind::kPublished;
    out.aggregate = std::move(g);
    out.includes_this_region = true;
    queue_.Push(r, std::move(out));
    return absl::OkStatus();
  }

  void SetOutcomeCallback(OutcomeCallback cb) override { queue_.SetCallback(std::move(cb)); }

  absl::StatusOr<std::shared_ptr<const GlobalAggregate>> Published(
      uint64_t round_id) const override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = published_.find(round_id);
    if (it == published_.end()) {
      return absl::NotFoundError(
          absl::StrFormat("round %u is not among the %u most recently published rounds", round_id,
                          options_.keep_rounds));
    }
    return it->second;
  }

 private:
  const LocalExchangeOptions options_;
  wan_internal::RegionEncoder encoder_;
  const uint32_t slices_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<const GlobalAggregate>> published_;
  wan_internal::OutcomeQueue queue_;  // last: its thread stops first
};

}  // namespace

absl::StatusOr<std::unique_ptr<WanExchange>> NewLocalExchange(const ModelSpec& spec,
                                                              const LocalExchangeOptions& options) {
  if (absl::Status st = ValidateModelSpec(spec); !st.ok()) return st;
  return std::unique_ptr<WanExchange>(new LocalExchange(spec, options));
}

}  // namespace heddle::relay
