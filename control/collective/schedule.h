// File: control/collective/schedule.h
//
// An executable schedule: what the compiler (compiler.h) emits, the verifier (verifier.h)
// checks and the relay (dataplane/relay/wan) runs between gateways. Its file form is JSON,
// versioned (schedule_io.h, docs/optiflow.md §5).
//
// Buffers. Every rank has the collective's data slots (collective.h) and its own scratch slots
// 0..scratch_slots-1 (for chunks it only forwards or reduces on the way). Every slot is split into
// `pieces` equal pieces; an op moves one piece of one slot.
//
// Ops. Each rank has an ordered list of ops. An op may start once every op in its `deps` (indices
// of earlier ops of the same rank) has completed; ops not ordered by deps may run in any order or
// at once, so two ops of one rank that touch the same (slot, piece) and of which one writes it must
// be ordered by deps (transitively), or the schedule has a race.
//   kSend        reads `src` (piece `piece`) when it starts and hands it to `peer` on `channel`.
//   kRecv        completes when its deps are done and the matching send has started; writes `dst`.
//   kRecvReduce  as kRecv, but dst := dst ⊕ received.
//   kCopy        local: dst := src.       kReduce   local: dst := dst ⊕ src.
// Sends from a to b on channel c match the receives of b from a on channel c one to one, in list
// order (the k-th send with the k-th receive); they must agree on `piece` and `chunk`.
//
// `chunk` names the data slot whose (partial) value a send or receive carries, also when the
// buffer is a scratch slot: executors that move real data keyed by chunk (the relay keys frames
// by region and slice) use it; the verifier checks it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control/collective/collective.h"

namespace heddle::collective {

inline constexpr uint32_t kScheduleFormatVersion = 1;

enum class OpKind : uint8_t { kSend, kRecv, kRecvReduce, kCopy, kReduce };

struct BufRef {
  enum class Buffer : uint8_t { kData, kScratch };
  Buffer buffer = Buffer::kData;
  uint64_t slot = 0;

  friend bool operator==(const BufRef&, const BufRef&) = default;
};

struct Op {
  OpKind kind = OpKind::kSend;
  uint32_t peer = 0;           // send / receive: the other rank
  uint32_t channel = 0;        // send / receive: the connection between the two ranks
  uint64_t chunk = 0;          // send / receive: the data slot the piece belongs to
  uint32_t piece = 0;          // < Schedule::pieces
  BufRef src;                  // send, copy, reduce
  BufRef dst;                  // recv, recv-reduce, copy, reduce
  std::vector<uint32_t> deps;  // earlier ops of this rank, increasing
  // The compiler's prediction under its cost model (seconds from the collective's start).
  double start_s = 0;
  double end_s = 0;

  friend bool operator==(const Op&, const Op&) = default;
};

struct RankSchedule {
  uint64_t scratch_slots = 0;
  std::vector<Op> ops;

  friend bool operator==(const RankSchedule&, const RankSchedule&) = default;
};

struct Schedule {
  uint32_t version = kScheduleFormatVersion;
  Collective collective;
  uint32_t pieces = 1;
  std::string intent;                  // the intent's name
  std::vector<std::string> ranks;      // the topology's rank names, by rank index
  uint64_t topology_digest = 0;        // TopologyDigest() of what it was compiled for
  uint64_t slot_bytes = 0;             // the slot size the prediction assumed
  double predicted_s = 0;              // the cost model's completion time
  std::vector<RankSchedule> per_rank;  // size collective.ranks

  friend bool operator==(const Schedule&, const Schedule&) = default;
};

}  // namespace heddle::collective
