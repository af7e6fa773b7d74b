#include "control/collective/intent_check.h"

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heddle::collective {
namespace {

constexpr int32_t kEmpty = -1;
constexpr uint32_t kNoMove = UINT32_MAX;

// Symbolic values: sets of contributing ranks as bitsets in one pool, immutable once made, so a
// copy shares its source's value. Ranks 0..N-1 start with the singletons 0..N-1.
class Values {
 public:
  explicit Values(uint32_t ranks) : ranks_(ranks), words_((ranks + 63) / 64) {
    for (uint32_t r = 0; r < ranks; ++r) {
      const int32_t id = NewValue();
      pool_[static_cast<size_t>(id) * words_ + r / 64] |= uint64_t{1} << (r % 64);
    }
  }

  const uint64_t* Bits(int32_t id) const { return &pool_[static_cast<size_t>(id) * words_]; }

  // The lowest rank in both sets, or -1.
  int64_t FirstCommon(int32_t a, int32_t b) const {
    const uint64_t *x = Bits(a), *y = Bits(b);
    for (size_t w = 0; w < words_; ++w) {
      if (const uint64_t both = x[w] & y[w]; both != 0) {
        return static_cast<int64_t>(w * 64 + static_cast<size_t>(std::countr_zero(both)));
      }
    }
    return -1;
  }

  int32_t Union(int32_t a, int32_t b) {
    const int32_t id = NewValue();
    uint64_t* out = &pool_[static_cast<size_t>(id) * words_];
    const uint64_t *x = Bits(a), *y = Bits(b);
    for (size_t w = 0; w < words_; ++w) out[w] = x[w] | y[w];
    return id;
  }

  bool IsExactly(int32_t id, uint32_t rank) const {
    if (id == static_cast<int32_t>(rank)) return true;
    const uint64_t* x = Bits(id);
    for (size_t w = 0; w < words_; ++w) {
      const uint64_t want = w == rank / 64 ? uint64_t{1} << (rank % 64) : 0;
      if (x[w] != want) return false;
    }
    return true;
  }

  bool IsAll(int32_t id) const {
    const uint64_t* x = Bits(id);
    size_t count = 0;
    for (size_t w = 0; w < words_; ++w) count += static_cast<size_t>(std::popcount(x[w]));
    return count == ranks_;
  }

  // "{0-3, 5}", at most a dozen runs.
  std::string Format(int32_t id) const {
    if (id == kEmpty) return "nothing";
    std::string out = "{";
    int runs = 0;
    uint32_t r = 0;
    while (r < ranks_) {
      if (!Has(id, r)) {
        ++r;
        continue;
      }
      uint32_t end = r;
      while (end + 1 < ranks_ && Has(id, end + 1)) ++end;
      if (runs == 12) {
        out += ", …";
        break;
      }
      absl::StrAppend(&out, runs > 0 ? ", " : "", r);
      if (end > r) absl::StrAppend(&out, "-", end);
      ++runs;
      r = end + 1;
    }
    return out + "}";
  }

 private:
  bool Has(int32_t id, uint32_t r) const { return (Bits(id)[r / 64] >> (r % 64)) & 1; }
  int32_t NewValue() {
    const int32_t id = static_cast<int32_t>(pool_.size() / words_);
    pool_.resize(pool_.size() + words_, 0);
    return id;
  }

  uint32_t ranks_;
  size_t words_;
  std::vector<uint64_t> pool_;
};

std::string At(const Move& m) {
  if (m.line == 0) return "";
  return absl::StrFormat("intent:%u:%u: ", m.line, m.column);
}

std::string DescribeSlot(const Collective& c, uint64_t slot) {
  const uint64_t k = c.chunks_per_rank;
  switch (c.kind) {
    case Kind::kAllGather:
    case Kind::kReduceScatter:
    case Kind::kAllReduce:
      return absl::StrFormat("slot %u (chunk %u of rank %u)", slot, slot % k, slot / k);
    case Kind::kAllToAll:
      return absl::StrFormat("slot %u (chunk %u from rank %u to rank %u)", slot, slot % k,
                             slot / k / c.ranks, slot / k % c.ranks);
    case Kind::kBroadcast:
    case Kind::kReduce:
      break;
  }
  return absl::StrFormat("slot %u", slot);
}

}  // namespace

absl::Status CheckIntent(const Intent& intent) {
  const Collective& c = intent.collective;
  if (absl::Status s = Validate(c); !s.ok()) return s;
  const uint32_t n = c.ranks;
  const uint64_t slots = SlotCount(c);
  const char* kind = KindName(c.kind);

  struct Held {
    int32_t value;
    uint32_t move;  // the last move that wrote it
  };
  absl::flat_hash_map<uint64_t, Held> held;  // key: slot · N + rank; touched pairs only
  Values values(n);
  auto get = [&](uint32_t rank, uint64_t slot) -> Held {
    auto it = held.find(slot * n + rank);
    if (it != held.end()) return it->second;
    return {StartsWith(c, rank, slot) ? static_cast<int32_t>(rank) : kEmpty, kNoMove};
  };

  for (size_t i = 0; i < intent.moves.size(); ++i) {
    const Move& m = intent.moves[i];
    const char* verb = m.kind == MoveKind::kCopy ? "copy" : "reduce";
    if (m.src >= n || m.dst >= n) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%smove %u (%s slot %u from rank %u to rank %u): a rank is not one of "
                          "the %u ranks",
                          At(m), i, verb, m.slot, m.src, m.dst, n));
    }
    if (m.slot >= slots) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%smove %u (%s slot %u from rank %u to rank %u): %s over %u ranks has %u slots", At(m), i,
          verb, m.slot, m.src, m.dst, kind, n, slots));
    }
    const Held src = get(m.src, m.slot);
    if (src.value == kEmpty) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s%s %s from rank %u to rank %u reads a slot that holds nothing on rank %u", At(m), verb,
          DescribeSlot(c, m.slot), m.src, m.dst, m.src));
    }
    const uint64_t key = m.slot * n + m.dst;
    if (m.kind == MoveKind::kCopy || m.src == m.dst) {
      if (m.src == m.dst && m.kind == MoveKind::kReduce) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%sreduce %s from rank %u into itself: every contribution it holds, %s, would be "
            "reduced twice",
            At(m), DescribeSlot(c, m.slot), m.src, values.Format(src.value)));
      }
      held[key] = {src.value, static_cast<uint32_t>(i)};
      continue;
    }
    const Held dst = get(m.dst, m.slot);
    if (dst.value == kEmpty) {
      held[key] = {src.value, static_cast<uint32_t>(i)};
      continue;
    }
    if (const int64_t both = values.FirstCommon(src.value, dst.value); both >= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%sreduce %s from rank %u into rank %u: the contribution of rank %d would be reduced "
          "twice (rank %u holds %s, rank %u holds %s)",
          At(m), DescribeSlot(c, m.slot), m.src, m.dst, both, m.src, values.Format(src.value),
          m.dst, values.Format(dst.value)));
    }
    held[key] = {values.Union(src.value, dst.value), static_cast<uint32_t>(i)};
  }

  // The promises, in slot then rank order (collective.h's table).
  auto broken = [&](uint32_t rank, uint64_t slot, const Held& h, const std::string& want) {
    std::string last = "it was never written";
    if (h.move != kNoMove) {
      const Move& m = intent.moves[h.move];
      last = m.line != 0
                 ? absl::StrFormat("last written by the move at intent:%u:%u", m.line, m.column)
                 : absl::StrFormat("last written by move %u", h.move);
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("%s over %u ranks: rank %u %s holds %s but must hold %s (%s)", kind, n,
                        rank, DescribeSlot(c, slot), values.Format(h.value), want, last));
  };
  const std::string all = n == 1 ? "{0}" : absl::StrFormat("{0-%u}", n - 1);
  auto expect_all = [&](uint32_t rank, uint64_t slot) -> absl::Status {
    const Held h = get(rank, slot);
    if (h.value == kEmpty || !values.IsAll(h.value)) return broken(rank, slot, h, all);
    return absl::OkStatus();
  };
  auto expect_one = [&](uint32_t rank, uint64_t slot, uint32_t owner) -> absl::Status {
    const Held h = get(rank, slot);
    if (h.value == kEmpty || !values.IsExactly(h.value, owner)) {
      return broken(rank, slot, h, absl::StrCat("{", owner, "}"));
    }
    return absl::OkStatus();
  };
  for (uint64_t slot = 0; slot < slots; ++slot) {
    const uint32_t owner = SlotOwner(c, slot);
    switch (c.kind) {
      case Kind::kAllGather:
      case Kind::kBroadcast:
        for (uint32_t r = 0; r < n; ++r) {
          if (absl::Status s = expect_one(r, slot, owner); !s.ok()) return s;
        }
        break;
      case Kind::kAllReduce:
        for (uint32_t r = 0; r < n; ++r) {
          if (absl::Status s = expect_all(r, slot); !s.ok()) return s;
        }
        break;
      case Kind::kReduceScatter:
      case Kind::kReduce:
        if (absl::Status s = expect_all(owner, slot); !s.ok()) return s;
        break;
      case Kind::kAllToAll: {
        const uint32_t dst = static_cast<uint32_t>(slot / c.chunks_per_rank % n);
        if (absl::Status s = expect_one(dst, slot, owner); !s.ok()) return s;
        break;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace heddle::collective
