#include "dataplane/relay/wan/schedule_plan.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace heddle::relay {

namespace col = ::heddle::collective;

namespace {

// More pieces than this is a schedule for another kind of payload (the relay's slices are MiBs).

const char* OpName(col::OpKind k) {
  switch (k) {
    case col::OpKind::kSend:
      return "send";
    case col::OpKind::kRecv:
      return "recv";
    case col::OpKind::kRecvReduce:
      return "recv-reduce";
    case col::OpKind::kCopy:
      return "copy";
    case col::OpKind::kReduce:
      return "reduce";
  }
  return "?";
}

}  // namespace

uint32_t PieceOfSlice(uint32_t slice, uint32_t slices, uint32_t pieces) {
  // The largest p with ⌊p·S/P⌋ ≤ s, i.e. p·S < (s+1)·P.
  const uint64_t p = ((uint64_t{slice} + 1) * pieces - 1) / slices;
  return static_cast<uint32_t>(std::min<uint64_t>(p, pieces - 1));
}

uint32_t PieceFirstSlice(uint32_t piece, uint32_t slices, uint32_t pieces) {
  return static_cast<uint32_t>(uint64_t{piece} * slices / pieces);
}

absl::Status CheckRelaySchedule(const col::Schedule& s, uint32_t ranks) {
  const col::Collective& c = s.collective;
  if (c.kind != col::Kind::kAllGather || c.ranks != ranks || c.chunks_per_rank != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "schedule '%s' is a %s over %u ranks with %u chunks per rank; the WAN exchange runs an "
        "allgather over the %u configured regions with 1 chunk per rank",
        s.intent, col::KindName(c.kind), c.ranks, c.chunks_per_rank, ranks));
  }
  if (s.per_rank.size() != ranks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("schedule '%s': ops for %u ranks, the collective has %u", s.intent,
                        s.per_rank.size(), ranks));
  }
  if (s.pieces < 1 || s.pieces > kMaxRelayPieces) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "schedule '%s': %u pieces; the relay runs 1..%u", s.intent, s.pieces, kMaxRelayPieces));
  }
  const uint32_t P = s.pieces;
  // senders[(chunk * P + piece)]: the (from, to) pairs that push it.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> edges(size_t{ranks} * P);
  for (uint32_t r = 0; r < ranks; ++r) {
    const std::vector<col::Op>& ops = s.per_rank[r].ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      const col::Op& op = ops[i];
      if (op.kind == col::OpKind::kRecvReduce || op.kind == col::OpKind::kReduce) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "schedule '%s': rank %u op %u is a %s; the relay runs copy-only all-gathers (a "
            "reduce of compressed frames would re-quantize them on the way)",
            s.intent, r, i, OpName(op.kind)));
      }
      if (op.kind != col::OpKind::kSend && op.kind != col::OpKind::kRecv) continue;
      if (op.peer >= ranks || op.peer == r || op.chunk >= ranks || op.piece >= P) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "schedule '%s': rank %u op %u (%s peer %u chunk %u piece %u) is out of range (%u "
            "ranks, %u pieces, no op to itself)",
            s.intent, r, i, OpName(op.kind), op.peer, op.chunk, op.piece, ranks, P));
      }
      if (op.kind == col::OpKind::kSend) {
        edges[op.chunk * P + op.piece].emplace_back(r, op.peer);
      }
    }
  }
  // Dataflow: a rank pushes what it holds along its sends; the owner holds its chunk from the
  // start. Iterate to a fixed point (edges may be listed in any order).
  for (uint32_t chunk = 0; chunk < ranks; ++chunk) {
    for (uint32_t p = 0; p < P; ++p) {
      std::vector<bool> held(ranks, false);
      held[chunk] = true;
      for (bool grew = true; grew;) {
        grew = false;
        for (const auto& [from, to] : edges[chunk * P + p]) {
          if (held[from] && !held[to]) held[to] = grew = true;
        }
      }
      for (uint32_t r = 0; r < ranks; ++r) {
        if (!held[r]) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "schedule '%s': piece %u of chunk %u (rank %u's frames) never reaches rank %u "
              "along the schedule's sends",
              s.intent, p, chunk, chunk, r));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardPlan> ForwardPlan::Build(const col::Schedule& s,
                                               std::span<const uint32_t> regions, uint32_t self,
                                               uint32_t slices) {
  const uint32_t ranks = static_cast<uint32_t>(regions.size());
  if (!std::is_sorted(regions.begin(), regions.end()) ||
      std::adjacent_find(regions.begin(), regions.end()) != regions.end()) {
    return absl::InvalidArgumentError("regions must be increasing");
  }
  auto it = std::find(regions.begin(), regions.end(), self);
  if (it == regions.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("region %u is not one of the configured regions", self));
  }
  if (slices < 1) return absl::InvalidArgumentError("a model of 0 slices");
  if (absl::Status st = CheckRelaySchedule(s, ranks); !st.ok()) return st;
  const uint32_t me = static_cast<uint32_t>(it - regions.begin());
  ForwardPlan plan;
  plan.regions_.assign(regions.begin(), regions.end());
  plan.pieces_ = s.pieces;
  plan.slices_ = slices;
  plan.targets_.resize(size_t{ranks} * s.pieces);
  for (const col::Op& op : s.per_rank[me].ops) {
    if (op.kind != col::OpKind::kSend || op.peer == op.chunk) continue;  // the owner holds it
    std::vector<uint32_t>& t = plan.targets_[op.chunk * s.pieces + op.piece];
    const uint32_t peer = regions[op.peer];
    auto pos = std::lower_bound(t.begin(), t.end(), peer);
    if (pos != t.end() && *pos == peer) continue;
    t.insert(pos, peer);
    ++plan.sends_;
  }
  return plan;
}

const std::vector<uint32_t>& ForwardPlan::Targets(uint32_t frame_region, uint32_t slice) const {
  static const std::vector<uint32_t> kNone;
  auto it = std::lower_bound(regions_.begin(), regions_.end(), frame_region);
  if (it == regions_.end() || *it != frame_region) return kNone;
  const uint32_t rank = static_cast<uint32_t>(it - regions_.begin());
  if (slice >= slices_) return kNone;
  const uint32_t piece = PieceOfSlice(slice, slices_, pieces_);
  return targets_[size_t{rank} * pieces_ + piece];
}

namespace {

col::Schedule Empty(const char* name, uint32_t ranks, uint32_t pieces) {
  col::Schedule s;
  s.collective = {.kind = col::Kind::kAllGather, .ranks = ranks, .chunks_per_rank = 1};
  s.pieces = std::max<uint32_t>(pieces, 1);
  s.intent = name;
  for (uint32_t r = 0; r < ranks; ++r) s.ranks.push_back(absl::StrFormat("r%u", r));
  s.per_rank.resize(ranks);
  return s;
}

col::Op Send(uint32_t peer, uint32_t chunk, uint32_t piece, std::vector<uint32_t> deps = {}) {
  return col::Op{.kind = col::OpKind::kSend,
                 .peer = peer,
                 .chunk = chunk,
                 .piece = piece,
                 .src = {.slot = chunk},
                 .deps = std::move(deps)};
}

col::Op Recv(uint32_t peer, uint32_t chunk, uint32_t piece) {
  return col::Op{.kind = col::OpKind::kRecv,
                 .peer = peer,
                 .chunk = chunk,
                 .piece = piece,
                 .dst = {.slot = chunk}};
}

}  // namespace

col::Schedule DirectAllGather(uint32_t ranks, uint32_t pieces) {
  col::Schedule s = Empty("direct", ranks, pieces);
  for (uint32_t r = 0; r < ranks; ++r) {
    std::vector<col::Op>& ops = s.per_rank[r].ops;
    for (uint32_t p = 0; p < s.pieces; ++p) {
      for (uint32_t j = 0; j < ranks; ++j) {
        if (j != r) ops.push_back(Send(j, r, p));
      }
      for (uint32_t j = 0; j < ranks; ++j) {
        if (j != r) ops.push_back(Recv(j, j, p));
      }
    }
  }
  return s;
}

col::Schedule RingAllGather(uint32_t ranks, uint32_t pieces) {
  col::Schedule s = Empty("ring", ranks, pieces);
  for (uint32_t r = 0; r < ranks && ranks > 1; ++r) {
    const uint32_t next = (r + 1) % ranks, prev = (r + ranks - 1) % ranks;
    std::vector<col::Op>& ops = s.per_rank[r].ops;
    for (uint32_t p = 0; p < s.pieces; ++p) {
      // Step t: send chunk r−t (received at step t−1), receive chunk r−1−t.
      for (uint32_t t = 0; t + 1 < ranks; ++t) {
        std::vector<uint32_t> deps;
        if (t > 0) deps.push_back(static_cast<uint32_t>(ops.size() - 1));
        ops.push_back(Send(next, (r + ranks - t) % ranks, p, std::move(deps)));
        ops.push_back(Recv(prev, (r + 2 * ranks - 1 - t) % ranks, p));
      }
    }
  }
  return s;
}

}  // namespace heddle::relay
