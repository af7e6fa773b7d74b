// File: control/collective/testing/intents.h
//
// Test and benchmark helpers of the compiler: hand-built intents (the classic algorithms written
// as move lists, independent of the DSL), small topologies, and an independent consistency check
// of compiled schedules — send/recv matching per channel, backward deps, and a symbolic execution
// (contribution sets, N ≤ 64) in two different dependency-respecting orders whose end state must
// keep every promise of the collective.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "control/collective/collective.h"
#include "control/collective/intent.h"
#include "control/collective/schedule.h"
#include "control/collective/topology.h"

namespace heddle::collective::testing {

inline Move Copy(uint64_t slot, uint32_t src, uint32_t dst) {
  return Move{MoveKind::kCopy, slot, src, dst};
}
inline Move Reduce(uint64_t slot, uint32_t src, uint32_t dst) {
  return Move{MoveKind::kReduce, slot, src, dst};
}

inline Intent RingAllGather(uint32_t n) {
  Intent in{"ring", {Kind::kAllGather, n, 1}, {}};
  for (uint32_t k = 0; k + 1 < n; ++k) {
    for (uint32_t r = 0; r < n; ++r) in.moves.push_back(Copy((r + n - k) % n, r, (r + 1) % n));
  }
  return in;
}

inline Intent DirectAllGather(uint32_t n) {
  Intent in{"direct", {Kind::kAllGather, n, 1}, {}};
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t d = 0; d < n; ++d) {
      if (d != r) in.moves.push_back(Copy(r, r, d));
    }
  }
  return in;
}

// Reduce-scatter then all-gather around the ring; rank r ends the first phase owning slot r+1.
inline Intent RingAllReduce(uint32_t n) {
  Intent in{"ring", {Kind::kAllReduce, n, 1}, {}};
  for (uint32_t k = 0; k + 1 < n; ++k) {
    for (uint32_t r = 0; r < n; ++r) in.moves.push_back(Reduce((r + n - k) % n, r, (r + 1) % n));
  }
  for (uint32_t k = 0; k + 1 < n; ++k) {
    for (uint32_t r = 0; r < n; ++r) {
      in.moves.push_back(Copy((r + 1 + n - k) % n, r, (r + 1) % n));
    }
  }
  return in;
}

inline Intent DirectAllReduce(uint32_t n) {
  Intent in{"direct", {Kind::kAllReduce, n, 1}, {}};
  for (uint32_t s = 0; s < n; ++s) {
    for (uint32_t r = 0; r < n; ++r) {
      if (r != s) in.moves.push_back(Reduce(s, r, s));
    }
  }
  for (uint32_t s = 0; s < n; ++s) {
    for (uint32_t d = 0; d < n; ++d) {
      if (d != s) in.moves.push_back(Copy(s, s, d));
    }
  }
  return in;
}

// Recursive halving (reduce-scatter) then recursive doubling (all-gather); n a power of two.
inline Intent HalvingDoublingAllReduce(uint32_t n) {
  Intent in{"halving-doubling", {Kind::kAllReduce, n, 1}, {}};
  // Rank r's range of slots it is responsible for shrinks by half every step.
  std::vector<std::pair<uint32_t, uint32_t>> range(n, {0, n});
  for (uint32_t d = n / 2; d >= 1; d /= 2) {
    std::vector<std::pair<uint32_t, uint32_t>> next = range;
    for (uint32_t r = 0; r < n; ++r) {
      const uint32_t peer = r ^ d;
      auto [lo, hi] = range[r];
      const uint32_t mid = (lo + hi) / 2;
      // The lower rank of the pair keeps the lower half; it sends the upper half to its peer.
      const bool lower = (r & d) == 0;
      const uint32_t send_lo = lower ? mid : lo, send_hi = lower ? hi : mid;
      for (uint32_t s = send_lo; s < send_hi; ++s) in.moves.push_back(Reduce(s, r, peer));
      next[r] = lower ? std::make_pair(lo, mid) : std::make_pair(mid, hi);
    }
    range = next;
    if (d == 1) break;
  }
  for (uint32_t d = 1; d < n; d *= 2) {
    std::vector<std::pair<uint32_t, uint32_t>> next = range;
    for (uint32_t r = 0; r < n; ++r) {
      const uint32_t peer = r ^ d;
      for (uint32_t s = range[r].first; s < range[r].second; ++s) {
        in.moves.push_back(Copy(s, r, peer));
      }
      next[r] = {std::min(range[r].first, range[peer].first),
                 std::max(range[r].second, range[peer].second)};
    }
    range = next;
  }
  return in;
}

// A full mesh of named ranks r0.. with one bandwidth and latency, both directions.
inline Topology Mesh(uint32_t n, double bytes_per_second, double latency_s) {
  Topology t;
  t.ranks = n;
  for (uint32_t i = 0; i < n; ++i) t.nodes.push_back(absl::StrCat("r", i));
  for (uint32_t a = 0; a < n; ++a) {
    for (uint32_t b = 0; b < n; ++b) {
      if (a != b) t.links.push_back(Link{a, b, bytes_per_second, latency_s});
    }
  }
  return t;
}

inline void SetLink(Topology& t, uint32_t a, uint32_t b, double bytes_per_second) {
  for (Link& l : t.links) {
    if ((l.src == a && l.dst == b) || (l.src == b && l.dst == a)) {
      l.bytes_per_second = bytes_per_second;
    }
  }
}

// Checks what the verifier checks in depth, independently and more simply (see the file
// comment). OK or the first problem.
inline absl::Status CheckSchedule(const Schedule& s) {
  const uint32_t n = s.collective.ranks;
  if (s.per_rank.size() != n) return absl::InternalError("per_rank size");
  if (n > 64) return absl::InvalidArgumentError("CheckSchedule handles at most 64 ranks");
  const uint64_t slots = SlotCount(s.collective);
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<std::pair<uint32_t, uint32_t>>>
      sends, recvs;
  for (uint32_t r = 0; r < n; ++r) {
    const auto& ops = s.per_rank[r].ops;
    for (uint32_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      for (size_t k = 0; k < op.deps.size(); ++k) {
        if (op.deps[k] >= i || (k > 0 && op.deps[k] <= op.deps[k - 1])) {
          return absl::InternalError(
              absl::StrFormat("rank %u op %u: deps not increasing and "
                              "earlier",
                              r, i));
        }
      }
      if (op.piece >= s.pieces) return absl::InternalError("piece out of range");
      if (op.end_s < op.start_s) return absl::InternalError("op ends before it starts");
      for (const BufRef* b : {&op.src, &op.dst}) {
        const uint64_t limit =
            b->buffer == BufRef::Buffer::kData ? slots : s.per_rank[r].scratch_slots;
        if (b->slot >= limit) {
          return absl::InternalError(absl::StrFormat("rank %u op %u: slot out of range", r, i));
        }
      }
      if (op.kind == OpKind::kSend) sends[{r, op.peer, op.channel}].push_back({r, i});
      if (op.kind == OpKind::kRecv || op.kind == OpKind::kRecvReduce) {
        recvs[{op.peer, r, op.channel}].push_back({r, i});
      }
    }
  }
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint32_t, uint32_t>> match;  // recv → send
  for (const auto& [key, list] : sends) {
    const auto& other = recvs[key];
    if (other.size() != list.size()) {
      return absl::InternalError(absl::StrFormat("channel %u→%u: %u sends, %u receives",
                                                 std::get<0>(key), std::get<1>(key), list.size(),
                                                 other.size()));
    }
    for (size_t k = 0; k < list.size(); ++k) {
      const Op& a = s.per_rank[list[k].first].ops[list[k].second];
      const Op& b = s.per_rank[other[k].first].ops[other[k].second];
      if (a.piece != b.piece || a.chunk != b.chunk) {
        return absl::InternalError("a send and its receive disagree on piece or chunk");
      }
      match[other[k]] = list[k];
    }
  }
  for (const auto& [key, list] : recvs) {
    if (!sends.count(key) && !list.empty()) return absl::InternalError("receive without send");
  }
  // Symbolic execution in two orders: lowest (rank, op) first and highest first.
  for (bool reverse : {false, true}) {
    std::map<std::tuple<uint32_t, int, uint64_t, uint32_t>, uint64_t> value;  // contributions
    auto get = [&](uint32_t r, const BufRef& b, uint64_t slot_for_start, uint32_t piece) {
      auto it = value.find({r, static_cast<int>(b.buffer), b.slot, piece});
      if (it != value.end()) return it->second;
      if (b.buffer == BufRef::Buffer::kData && StartsWith(s.collective, r, slot_for_start)) {
        return uint64_t{1} << r;
      }
      return uint64_t{0};
    };
    std::vector<std::vector<char>> done(n);
    std::vector<std::map<uint32_t, uint64_t>> carried(n);  // send op → value it read
    for (uint32_t r = 0; r < n; ++r) done[r].assign(s.per_rank[r].ops.size(), 0);
    size_t remaining = 0;
    for (uint32_t r = 0; r < n; ++r) remaining += s.per_rank[r].ops.size();
    while (remaining > 0) {
      bool progressed = false;
      for (uint32_t rr = 0; rr < n; ++rr) {
        const uint32_t r = reverse ? n - 1 - rr : rr;
        const auto& ops = s.per_rank[r].ops;
        for (uint32_t ii = 0; ii < ops.size(); ++ii) {
          const uint32_t i = reverse ? static_cast<uint32_t>(ops.size()) - 1 - ii : ii;
          if (done[r][i]) continue;
          const Op& op = ops[i];
          if (!std::all_of(op.deps.begin(), op.deps.end(),
                           [&](uint32_t d) { return done[r][d]; })) {
            continue;
          }
          uint64_t incoming = 0;
          if (op.kind == OpKind::kRecv || op.kind == OpKind::kRecvReduce) {
            auto [sr, si] = match.at({r, i});
            if (!done[sr][si]) continue;
            incoming = carried[sr].at(si);
          }
          switch (op.kind) {
            case OpKind::kSend:
              carried[r][i] = get(r, op.src, op.chunk, op.piece);
              break;
            case OpKind::kRecv:
              value[{r, static_cast<int>(op.dst.buffer), op.dst.slot, op.piece}] = incoming;
              break;
            case OpKind::kRecvReduce: {
              const uint64_t have = get(r, op.dst, op.chunk, op.piece);
              if (have & incoming) {
                return absl::InternalError(
                    absl::StrFormat("rank %u op %u: a contribution is reduced twice", r, i));
              }
              value[{r, static_cast<int>(op.dst.buffer), op.dst.slot, op.piece}] = have | incoming;
              break;
            }
            case OpKind::kCopy:
            case OpKind::kReduce:
              return absl::InternalError("unexpected local op");
          }
          done[r][i] = 1;
          --remaining;
          progressed = true;
        }
      }
      if (!progressed) return absl::InternalError("deadlock");
    }
    for (uint32_t r = 0; r < n; ++r) {
      for (uint64_t slot = 0; slot < slots; ++slot) {
        auto want = Promise(s.collective, r, slot);
        if (!want) continue;
        uint64_t mask = 0;
        for (uint32_t w : *want) mask |= uint64_t{1} << w;
        for (uint32_t p = 0; p < s.pieces; ++p) {
          const uint64_t have = get(r, BufRef{BufRef::Buffer::kData, slot}, slot, p);
          if (have != mask) {
            return absl::InternalError(
                absl::StrFormat("%s order: rank %u slot %u piece %u holds %#x, must hold %#x",
                                reverse ? "reverse" : "forward", r, slot, p, have, mask));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace heddle::collective::testing
