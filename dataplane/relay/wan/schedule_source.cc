#include "dataplane/relay/wan/schedule_source.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/status_macros.h"
#include "dataplane/relay/wan/schedule_plan.h"

namespace heddle::relay {

namespace col = ::heddle::collective;

namespace {

// A 64-bit digest from two CRC-32C lanes over a canonical byte stream.
class Digest {
 public:
  void U64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    lo_ = Crc32c(std::span<const uint8_t>(b, 8), lo_);
    b[0] ^= 0x5a;
    hi_ = Crc32c(std::span<const uint8_t>(b, 8), hi_ ^ 0x9e3779b9u);
  }
  void Str(const std::string& s) {
    U64(s.size());
    for (char c : s) U64(static_cast<uint8_t>(c));
  }
  uint64_t value() const { return (uint64_t{hi_} << 32) | lo_; }

 private:
  uint32_t lo_ = 0, hi_ = 0;
};

}  // namespace

uint64_t WanScheduleDigest(const col::Schedule& s) {
  Digest d;
  d.U64(s.version);
  d.U64(static_cast<uint64_t>(s.collective.kind));
  d.U64(s.collective.ranks);
  d.U64(s.collective.chunks_per_rank);
  d.U64(s.collective.root);
  d.U64(s.pieces);
  d.Str(s.intent);
  d.U64(s.ranks.size());
  for (const std::string& r : s.ranks) d.Str(r);
  d.U64(s.topology_digest);
  d.U64(s.slot_bytes);
  d.U64(s.per_rank.size());
  for (const col::RankSchedule& rs : s.per_rank) {
    d.U64(rs.scratch_slots);
    d.U64(rs.ops.size());
    for (const col::Op& op : rs.ops) {
      d.U64(static_cast<uint64_t>(op.kind));
      d.U64(op.peer);
      d.U64(op.channel);
      d.U64(op.chunk);
      d.U64(op.piece);
      d.U64(static_cast<uint64_t>(op.src.buffer));
      d.U64(op.src.slot);
      d.U64(static_cast<uint64_t>(op.dst.buffer));
      d.U64(op.dst.slot);
      d.U64(op.deps.size());
      for (uint32_t dep : op.deps) d.U64(dep);
    }
  }
  return d.value();
}

absl::StatusOr<col::Schedule> ResolveWanSchedule(const WanScheduleOptions& o,
                                                 std::span<const uint32_t> regions,
                                                 uint64_t slot_bytes) {
  const uint32_t ranks = static_cast<uint32_t>(regions.size());
  col::Schedule s;
  if (o.compiled != nullptr) {
    s = *o.compiled;
  } else if (o.name == "direct" || o.name == "ring") {
    s = o.name == "direct" ? DirectAllGather(ranks, o.pieces == 0 ? 1 : o.pieces)
                           : RingAllGather(ranks, o.pieces == 0 ? 1 : o.pieces);
    for (uint32_t i = 0; i < ranks; ++i) s.ranks[i] = absl::StrFormat("%u", regions[i]);
    s.slot_bytes = slot_bytes;
  } else {
    return absl::UnimplementedError(absl::StrFormat(
        "wan.schedule: '%s' needs the schedule compiler; use direct or ring", o.name));
  }
  if (absl::Status st = CheckRelaySchedule(s, ranks); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("wan.schedule: ", st.message()));
  }
  return s;
}

}  // namespace heddle::relay
