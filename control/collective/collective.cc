#include "control/collective/collective.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace heddle::collective {

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kAllGather:
      return "allgather";
    case Kind::kReduceScatter:
      return "reducescatter";
    case Kind::kAllReduce:
      return "allreduce";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kReduce:
      return "reduce";
    case Kind::kAllToAll:
      return "alltoall";
  }
  return "?";
}

std::optional<Kind> KindFromName(std::string_view name) {
  for (Kind k : {Kind::kAllGather, Kind::kReduceScatter, Kind::kAllReduce, Kind::kBroadcast,
                 Kind::kReduce, Kind::kAllToAll}) {
    if (name == KindName(k)) return k;
  }
  return std::nullopt;
}

uint64_t SlotCount(const Collective& c) {
  const uint64_t n = c.ranks, k = c.chunks_per_rank;
  switch (c.kind) {
    case Kind::kAllGather:
    case Kind::kReduceScatter:
    case Kind::kAllReduce:
      return n * k;
    case Kind::kBroadcast:
    case Kind::kReduce:
      return k;
    case Kind::kAllToAll:
      return n * n * k;
  }
  return 0;
}

absl::Status Validate(const Collective& c) {
  if (c.ranks < 1 || c.ranks > kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("collective: %u ranks; use 1..%u", c.ranks, kMaxRanks));
  }
  if (c.chunks_per_rank < 1) {
    return absl::InvalidArgumentError("collective: chunks per rank must be at least 1");
  }
  if ((c.kind == Kind::kBroadcast || c.kind == Kind::kReduce) && c.root >= c.ranks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collective %s: root %u is not one of the %u ranks", KindName(c.kind), c.root, c.ranks));
  }
  if (c.chunks_per_rank > kMaxSlots || SlotCount(c) > kMaxSlots) {
    return absl::InvalidArgumentError(
        absl::StrFormat("collective %s: %u ranks × %u chunks per rank is more than %u slots",
                        KindName(c.kind), c.ranks, c.chunks_per_rank, kMaxSlots));
  }
  return absl::OkStatus();
}

uint32_t SlotOwner(const Collective& c, uint64_t slot) {
  switch (c.kind) {
    case Kind::kAllGather:
    case Kind::kReduceScatter:
    case Kind::kAllReduce:
      return static_cast<uint32_t>(slot / c.chunks_per_rank);
    case Kind::kBroadcast:
    case Kind::kReduce:
      return c.root;
    case Kind::kAllToAll:
      return static_cast<uint32_t>(slot / c.chunks_per_rank / c.ranks);
  }
  return 0;
}

namespace {
uint32_t AllToAllDst(const Collective& c, uint64_t slot) {
  return static_cast<uint32_t>(slot / c.chunks_per_rank % c.ranks);
}
std::vector<uint32_t> AllRanks(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}
}  // namespace

bool StartsWith(const Collective& c, uint32_t rank, uint64_t slot) {
  if (slot >= SlotCount(c) || rank >= c.ranks) return false;
  switch (c.kind) {
    case Kind::kAllGather:
    case Kind::kAllToAll:
    case Kind::kBroadcast:
      return SlotOwner(c, slot) == rank;
    case Kind::kReduceScatter:
    case Kind::kAllReduce:
    case Kind::kReduce:
      return true;
  }
  return false;
}

std::optional<std::vector<uint32_t>> Promise(const Collective& c, uint32_t rank, uint64_t slot) {
  if (slot >= SlotCount(c) || rank >= c.ranks) return std::nullopt;
  switch (c.kind) {
    case Kind::kAllGather:
    case Kind::kBroadcast:
      return std::vector<uint32_t>{SlotOwner(c, slot)};
    case Kind::kReduceScatter:
      if (SlotOwner(c, slot) != rank) return std::nullopt;
      return AllRanks(c.ranks);
    case Kind::kAllReduce:
      return AllRanks(c.ranks);
    case Kind::kReduce:
      if (rank != c.root) return std::nullopt;
      return AllRanks(c.ranks);
    case Kind::kAllToAll:
      if (AllToAllDst(c, slot) != rank) return std::nullopt;
      return std::vector<uint32_t>{SlotOwner(c, slot)};
  }
  return std::nullopt;
}

}  // namespace heddle::collective
