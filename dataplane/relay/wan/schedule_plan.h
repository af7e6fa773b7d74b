// File: dataplane/relay/wan/schedule_plan.h
//
// How a gateway runs a compiled OptiFlow schedule (control/collective/schedule.h) for the WAN
// exchange (docs/relay-wan.md §10). The exchange is an all-gather: rank i is the i-th configured
// region in increasing region id, K = 1 (slot i = region i's frames, chunk i), and piece p of P
// covers the slices [⌊p·S/P⌋, ⌊(p+1)·S/P⌋) of the model's S slices (Slices(spec) order); with
// P > S some pieces are empty. A send op of rank i (peer j, chunk c, piece p) becomes: every frame
// of region c in a slice of piece p is pushed to region j as soon as this gateway holds it (its
// own encoder's output, or a frame received from any peer). Frames are bytes and the aggregate is
// assembled in increasing region id whatever route a frame took, so any copy-only all-gather
// keeps the global aggregate bit-identical on every gateway; reduce ops are refused (a reduce of
// compressed frames would re-quantize on the way and make the bits depend on the route).
//
//   HEDDLE_ASSIGN_OR_RETURN(ForwardPlan plan, ForwardPlan::Build(schedule, regions, my_region,
//                                                           slices));
//   for (uint32_t peer : plan.Targets(frame_region, slice)) Push(peer, frame);
//
// Deps and the compiler's time steps are not enforced: dataflow order (push when held) is never
// later than the schedule's own order, and frames from unscheduled peers are accepted as well.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control/collective/schedule.h"

namespace heddle::relay {

// The most pieces a schedule the relay runs may cut each region's frames into.
inline constexpr uint32_t kMaxRelayPieces = 1u << 16;

// The piece slice s belongs to: the p with ⌊p·S/P⌋ ≤ s < ⌊(p+1)·S/P⌋ (s < S, P ≥ 1).
uint32_t PieceOfSlice(uint32_t slice, uint32_t slices, uint32_t pieces);
// ⌊p·S/P⌋: the first slice of piece p (== the next piece's first when the piece is empty).
uint32_t PieceFirstSlice(uint32_t piece, uint32_t slices, uint32_t pieces);

// Whether the relay can run s over `ranks` regions: an all-gather of `ranks` ranks with one chunk
// per rank, copy ops only (send, recv, copy), every send's chunk, piece and peer in range, and —
// pushing whatever is held along the send ops — every piece of every chunk reaches every rank.
// The error names the first problem ("piece 2 of region 1's frames never reaches rank 2").
absl::Status CheckRelaySchedule(const collective::Schedule& s, uint32_t ranks);

class ForwardPlan {
 public:
  // `regions`: every configured region, increasing (rank i = regions[i]); `self` one of them;
  // `slices`: S, the model's slice count (≥ 1).
  static absl::StatusOr<ForwardPlan> Build(const collective::Schedule& s,
                                           std::span<const uint32_t> regions, uint32_t self,
                                           uint32_t slices);

  // The peers (region ids, increasing, never `self` nor `frame_region`) this gateway pushes
  // region frame_region's frame of `slice` to. Empty for an unknown region.
  const std::vector<uint32_t>& Targets(uint32_t frame_region, uint32_t slice) const;

  uint32_t pieces() const { return pieces_; }
  uint32_t slices() const { return slices_; }
  // Distinct (peer, chunk, piece) sends of this gateway.
  uint64_t sends() const { return sends_; }

 private:
  std::vector<uint32_t> regions_;
  uint32_t pieces_ = 1;
  uint32_t slices_ = 0;
  uint64_t sends_ = 0;
  // targets_[rank of the frame's region * pieces_ + piece]
  std::vector<std::vector<uint32_t>> targets_;
};

// Hand-built copy-only all-gathers (the compiler's builtins give the same routing, with its
// timing): `direct` — every rank sends its own chunk to every other rank; `ring` — rank r sends
// to r+1 what it received from r−1, R−1 steps, pipelined per piece.
collective::Schedule DirectAllGather(uint32_t ranks, uint32_t pieces);
collective::Schedule RingAllGather(uint32_t ranks, uint32_t pieces);

}  // namespace heddle::relay
