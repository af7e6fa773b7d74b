// File: dataplane/relay/wan/internal/frame_crc.h
//
// CRC-32C arithmetic on frames that are already known to be valid (their 4-byte trailer is the
// CRC-32C of the bytes before it: every frame a gateway holds passed ParseFrame() on receipt or
// was written by its own encoder). CRC-32C is affine over GF(2), so the CRC of such a body from
// any starting value, and the CRC after a few header bytes change, follow from the trailer and
// an operator for "n zero bytes" (a 32 × 32 bit matrix, cached per length) without reading the
// body again. The exchange uses this for the per-round digests and the totals patch, which would
// otherwise read every frame of every region several times per round on the critical path:
//
//   Crc32c(body, prev) == BodyCrc(frame, prev)           for a valid frame
//   PatchValidFrameTotals(f, n, s) == PatchFrameTotals(f, n, s)   bit for bit
//   FramesDigestOfValidFrames(fs) == FramesDigest(fs),  GlobalDigestOfValidFrames(g) ==
//   GlobalDigest(g)
//   PatchedSumOfValidFrame(f, n, s) == SumOfValidFrame(*PatchValidFrameTotals(f, n, s))
//
// On an invalid frame (a trailer that does not match its body) the results differ from the
// full computations: never call these on bytes that were not validated.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "dataplane/relay/wan/exchange.h"
#include "dataplane/relay/wan/internal/region_encoder.h"

namespace heddle::relay::wan_internal {

// The CRC-32C register after n zero bytes, from `reg` (the raw register, not complemented).
uint32_t Crc32cExtendZeros(uint32_t reg, uint64_t n);

// Crc32c(body, previous) of a valid frame's body (the frame without its trailer). A frame shorter
// than a trailer is its own body (read in full).
uint32_t BodyCrc(std::span<const uint8_t> frame, uint32_t previous);

// PatchFrameTotals() for a valid frame: a copy with the totals written (WriteFrameTotals(), so
// the same refusals) and the trailer updated from the old one (the body is copied, not read
// again, nor parsed: the caller vouches for the frame).
absl::StatusOr<FramePtr> PatchValidFrameTotals(std::span<const uint8_t> provisional,
                                               uint64_t tokens, uint32_t inner_steps);
// The same in two steps, for a copy made before the totals are known: `copy` holds the bytes of
// the valid frame `provisional`; this writes the totals and the trailer into it (the header and
// trailer only), after which it is PatchValidFrameTotals(provisional, tokens, inner_steps)'s
// frame. Same refusals; a copy of another length is refused, nothing written.
absl::Status WriteValidFrameTotals(std::span<const uint8_t> provisional, std::span<uint8_t> copy,
                                   uint64_t tokens, uint32_t inner_steps);

// FramesDigest() and GlobalDigest() of valid frames, from their trailers.
uint64_t FramesDigestOfValidFrames(std::span<const FramePtr> frames);
uint64_t GlobalDigestOfValidFrames(const GlobalAggregate& g);

// All that the digests read of a valid frame: its length and its trailer.
struct ValidFrameSum {
  uint64_t bytes = 0;
  uint32_t trailer = 0;
};
ValidFrameSum SumOfValidFrame(std::span<const uint8_t> frame);
uint32_t BodyCrc(const ValidFrameSum& frame, uint32_t previous);
// The sum of PatchValidFrameTotals(provisional, tokens, inner_steps)'s frame (the same
// refusals), without copying or reading the body: what a decision's digest needs of the final
// frames before they exist.
absl::StatusOr<ValidFrameSum> PatchedSumOfValidFrame(std::span<const uint8_t> provisional,
                                                     uint64_t tokens, uint32_t inner_steps);
// GlobalDigestOfValidFrames() of g with `frames` for g.frames (g.frames is not read): equal to
// it when frames[i] is SumOfValidFrame(*g.frames[i]).
uint64_t GlobalDigestOfSums(const GlobalAggregate& g, std::span<const ValidFrameSum> frames);

}  // namespace heddle::relay::wan_internal
