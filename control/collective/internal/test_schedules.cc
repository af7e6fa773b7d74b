#include "control/collective/internal/test_schedules.h"

#include <algorithm>
#include <vector>

namespace heddle::collective::testing {

namespace {

BufRef Data(uint64_t slot) { return BufRef{BufRef::Buffer::kData, slot}; }
BufRef Scratch(uint64_t slot) { return BufRef{BufRef::Buffer::kScratch, slot}; }

Op Send(uint32_t peer, uint64_t chunk, uint32_t piece, BufRef src, std::vector<uint32_t> deps) {
  Op o;
  o.kind = OpKind::kSend;
  o.peer = peer;
  o.chunk = chunk;
  o.piece = piece;
  o.src = src;
  o.deps = std::move(deps);
  return o;
}

Op Recv(OpKind kind, uint32_t peer, uint64_t chunk, uint32_t piece, BufRef dst,
        std::vector<uint32_t> deps) {
  Op o;
  o.kind = kind;
  o.peer = peer;
  o.chunk = chunk;
  o.piece = piece;
  o.dst = dst;
  o.deps = std::move(deps);
  return o;
}

Schedule Empty(Kind kind, uint32_t ranks, uint32_t pieces, uint32_t k, const char* name) {
  Schedule s;
  s.collective = Collective{kind, ranks, k};
  s.pieces = pieces;
  s.intent = name;
  for (uint32_t r = 0; r < ranks; ++r) s.ranks.push_back("r" + std::to_string(r));
  s.slot_bytes = 1 << 20;
  s.per_rank.resize(ranks);
  return s;
}

}  // namespace

Schedule RingAllGather(uint32_t n, uint32_t pieces, uint32_t k) {
  Schedule s = Empty(Kind::kAllGather, n, pieces, k, "ring");
  for (uint32_t r = 0; r < n; ++r) {
    std::vector<Op>& ops = s.per_rank[r].ops;
    // recv_at[j * pieces + p]: the receive of the previous step for chunk j, piece p.
    std::vector<uint32_t> recv_at(static_cast<size_t>(k) * pieces, 0);
    for (uint32_t t = 0; t + 1 < n; ++t) {
      const uint32_t send_owner = (r + n - t) % n;
      const uint32_t recv_owner = (r + n - 1 - t) % n;
      for (uint32_t j = 0; j < k; ++j) {
        for (uint32_t p = 0; p < pieces; ++p) {
          const uint64_t slot = uint64_t{send_owner} * k + j;
          std::vector<uint32_t> deps;
          if (t > 0) deps.push_back(recv_at[j * pieces + p]);
          ops.push_back(Send((r + 1) % n, slot, p, Data(slot), deps));
        }
      }
      for (uint32_t j = 0; j < k; ++j) {
        for (uint32_t p = 0; p < pieces; ++p) {
          const uint64_t slot = uint64_t{recv_owner} * k + j;
          recv_at[j * pieces + p] = static_cast<uint32_t>(ops.size());
          ops.push_back(Recv(OpKind::kRecv, (r + n - 1) % n, slot, p, Data(slot), {}));
        }
      }
    }
  }
  return s;
}

Schedule DirectAllReduce(uint32_t n, uint32_t pieces, bool via_scratch, uint32_t k) {
  Schedule s = Empty(Kind::kAllReduce, n, pieces, k, via_scratch ? "direct-scratch" : "direct");
  for (uint32_t r = 0; r < n; ++r) {
    std::vector<Op>& ops = s.per_rank[r].ops;
    if (via_scratch) s.per_rank[r].scratch_slots = uint64_t{n - 1} * k;
    // Phase 1: every other owner's slots to their owner.
    std::vector<uint32_t> sent(static_cast<size_t>(n) * k * pieces, 0);  // [slot][piece]
    for (uint32_t q = 0; q < n; ++q) {
      if (q == r) continue;
      for (uint32_t j = 0; j < k; ++j) {
        for (uint32_t p = 0; p < pieces; ++p) {
          const uint64_t slot = uint64_t{q} * k + j;
          sent[slot * pieces + p] = static_cast<uint32_t>(ops.size());
          ops.push_back(Send(q, slot, p, Data(slot), {}));
        }
      }
    }
    // The owner reduces what arrives, one contribution after the other.
    std::vector<int64_t> last(static_cast<size_t>(k) * pieces, -1);  // [j][piece]
    uint64_t scratch = 0;
    for (uint32_t q = 0; q < n; ++q) {
      if (q == r) continue;
      for (uint32_t j = 0; j < k; ++j) {
        const uint64_t slot = uint64_t{r} * k + j;
        for (uint32_t p = 0; p < pieces; ++p) {
          int64_t& prev = last[j * pieces + p];
          std::vector<uint32_t> deps;
          if (prev >= 0) deps.push_back(static_cast<uint32_t>(prev));
          if (!via_scratch) {
            prev = static_cast<int64_t>(ops.size());
            ops.push_back(Recv(OpKind::kRecvReduce, q, slot, p, Data(slot), deps));
            continue;
          }
          const uint32_t recv = static_cast<uint32_t>(ops.size());
          ops.push_back(Recv(OpKind::kRecv, q, slot, p, Scratch(scratch), {}));
          Op red;
          red.kind = OpKind::kReduce;
          red.piece = p;
          red.src = Scratch(scratch);
          red.dst = Data(slot);
          if (prev >= 0 && static_cast<uint32_t>(prev) < recv) {
            red.deps = {static_cast<uint32_t>(prev), recv};
          } else {
            red.deps = {recv};
          }
          prev = static_cast<int64_t>(ops.size());
          ops.push_back(red);
        }
        ++scratch;
      }
    }
    // Phase 2: the reduced slots to every rank.
    for (uint32_t q = 0; q < n; ++q) {
      if (q == r) continue;
      for (uint32_t j = 0; j < k; ++j) {
        for (uint32_t p = 0; p < pieces; ++p) {
          const uint64_t slot = uint64_t{r} * k + j;
          ops.push_back(
              Send(q, slot, p, Data(slot), {static_cast<uint32_t>(last[j * pieces + p])}));
        }
      }
    }
    for (uint32_t q = 0; q < n; ++q) {
      if (q == r) continue;
      for (uint32_t j = 0; j < k; ++j) {
        for (uint32_t p = 0; p < pieces; ++p) {
          const uint64_t slot = uint64_t{q} * k + j;
          ops.push_back(Recv(OpKind::kRecv, q, slot, p, Data(slot), {sent[slot * pieces + p]}));
        }
      }
    }
  }
  return s;
}

void RemoveOp(Schedule* s, uint32_t rank, uint32_t op) {
  std::vector<Op>& ops = s->per_rank[rank].ops;
  ops.erase(ops.begin() + op);
  for (Op& o : ops) {
    std::vector<uint32_t> deps;
    for (uint32_t d : o.deps) {
      if (d == op) continue;
      deps.push_back(d > op ? d - 1 : d);
    }
    o.deps = std::move(deps);
  }
}

uint32_t FindOp(const Schedule& s, uint32_t rank, OpKind kind, uint32_t peer, uint64_t chunk,
                uint32_t from) {
  const std::vector<Op>& ops = s.per_rank[rank].ops;
  for (uint32_t i = from; i < ops.size(); ++i) {
    if (ops[i].kind == kind && ops[i].peer == peer &&
        (chunk == UINT64_MAX || ops[i].chunk == chunk)) {
      return i;
    }
  }
  return UINT32_MAX;
}

}  // namespace heddle::collective::testing
