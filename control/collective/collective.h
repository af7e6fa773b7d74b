// File: control/collective/collective.h
//
// What a collective promises, in one model shared by the intent DSL (dsl.h), the compiler
// (compiler.h), the verifier (verifier.h) and the relay that executes schedules
// (docs/optiflow.md §2).
//
// Every rank has the same numbered *data slots*, one chunk each. A slot's identity is global: slot
// s on rank a and slot s on rank b hold (parts of) the same logical chunk. A slot's *value* is the
// set of contributions it holds: contribution (r, s) is rank r's original input for slot s. A copy
// replaces the destination's value with the source's; a reduce unites them and is wrong when they
// overlap (a contribution reduced twice). The collective fixes the slot count, which slots start
// where, and what every rank must end with:
//
//   kind             slots C        starts with                    must end with
//   all-gather       N·K            rank r: slots [rK, rK+K) own   every rank: every slot {owner}
//   reduce-scatter   N·K            every rank: every slot own     rank r: slots [rK, rK+K) all N
//   all-reduce       N·K            every rank: every slot own     every rank: every slot all N
//   broadcast        K              root: every slot own           every rank: every slot {root}
//   reduce           K              every rank: every slot own     root: every slot all N
//   all-to-all       N·N·K          rank r: slots (r, d, j) own    rank d: slots (s, d, j) {s}
//
// (N ranks, K chunks per rank; all-to-all slot (src, dst, j) = (src·N + dst)·K + j.) "own" means
// contribution (r, s) for rank r; "{owner}" the owner's. Ranks may hold other slots at the end
// (scratch use is free); only what the table promises is checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace heddle::collective {

enum class Kind : uint8_t {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllToAll
};

// "allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall" (the DSL's names).
const char* KindName(Kind kind);
std::optional<Kind> KindFromName(std::string_view name);

struct Collective {
  Kind kind = Kind::kAllGather;
  uint32_t ranks = 0;            // N ≥ 1
  uint32_t chunks_per_rank = 1;  // K ≥ 1
  uint32_t root = 0;             // broadcast and reduce only

  friend bool operator==(const Collective&, const Collective&) = default;
};

inline constexpr uint32_t kMaxRanks = 4096;
inline constexpr uint64_t kMaxSlots = uint64_t{1} << 24;

// Checks ranks, K, root and that the slot count stays ≤ kMaxSlots.
absl::Status Validate(const Collective& c);

// C, the number of data slots (the table above).
uint64_t SlotCount(const Collective& c);

// Whether rank r starts with its own contribution in slot s.
bool StartsWith(const Collective& c, uint32_t rank, uint64_t slot);

// What rank r must hold in slot s at the end: nullopt = nothing promised; otherwise the ranks
// whose contributions (r', s) the slot must hold, exactly (increasing).
std::optional<std::vector<uint32_t>> Promise(const Collective& c, uint32_t rank, uint64_t slot);

// All-gather / reduce-scatter / all-reduce: the rank a slot belongs to (s / K). All-to-all: the
// source rank. Broadcast / reduce: the root.
uint32_t SlotOwner(const Collective& c, uint64_t slot);

}  // namespace heddle::collective
