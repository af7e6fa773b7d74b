#include "control/collective/verifier.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace heddle::collective {

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kRecvReduce:
      return "recv-reduce";
    case OpKind::kCopy:
      return "copy";
    case OpKind::kReduce:
      return "reduce";
  }
  return "?";
}

namespace {

std::string BufName(const BufRef& b) {
  return absl::StrFormat("%s[%u]", b.buffer == BufRef::Buffer::kData ? "data" : "scratch", b.slot);
}

bool Reads(OpKind k) { return k == OpKind::kSend || k == OpKind::kCopy || k == OpKind::kReduce; }
bool Writes(OpKind k) { return k != OpKind::kSend; }
bool IsRecv(OpKind k) { return k == OpKind::kRecv || k == OpKind::kRecvReduce; }

}  // namespace

std::string DescribeOp(const Schedule& s, uint32_t rank, uint32_t op) {
  std::string who = absl::StrCat("rank ", rank);
  if (rank < s.ranks.size() && !s.ranks[rank].empty())
    absl::StrAppend(&who, " (", s.ranks[rank], ")");
  if (rank >= s.per_rank.size() || op >= s.per_rank[rank].ops.size()) {
    return absl::StrCat(who, " op ", op);
  }
  const Op& o = s.per_rank[rank].ops[op];
  std::string what;
  switch (o.kind) {
    case OpKind::kSend:
      what = absl::StrFormat("send to %u ch %u piece %u chunk %u <- %s", o.peer, o.channel, o.piece,
                             o.chunk, BufName(o.src));
      break;
    case OpKind::kRecv:
    case OpKind::kRecvReduce:
      what = absl::StrFormat("%s from %u ch %u piece %u chunk %u -> %s", OpKindName(o.kind), o.peer,
                             o.channel, o.piece, o.chunk, BufName(o.dst));
      break;
    case OpKind::kCopy:
    case OpKind::kReduce:
      what = absl::StrFormat("%s %s -> %s piece %u", OpKindName(o.kind), BufName(o.src),
                             BufName(o.dst), o.piece);
      break;
    default:
      what = absl::StrFormat("kind %d", static_cast<int>(o.kind));
  }
  return absl::StrCat(who, " op ", op, " (", what, ")");
}

namespace {

// Problems past the cap are only counted: the macro skips formatting them (and evaluating the
// arguments, which name ops and rank sets), so a badly broken schedule costs no more than a
// good one.
#define PROBLEM(...)        \
  do {                      \
    if (Full()) {           \
      ++problem_count_;     \
    } else {                \
      Problem(__VA_ARGS__); \
    }                       \
  } while (0)

// Symbolic values, hash-consed. A value is a chunk (the data slot whose contributions it holds)
// and the set of contributing ranks, a bitset of ceil(N/64) words. Copies, sends and receives
// pass value ids around; only reduces make new sets, and equal sets (e.g. the same partial sum
// in every piece) share one id, so memory grows with the distinct partial sums, not with ops.
class ValueStore {
 public:
  static constexpr uint32_t kEmpty = 0;

  explicit ValueStore(uint32_t ranks) : words_((ranks + 63) / 64) {
    infos_.push_back({0, 0});  // kEmpty: no chunk, no ranks
    pool_.assign(words_, 0);
  }

  uint64_t Chunk(uint32_t id) const { return infos_[id].chunk; }
  const uint64_t* Bits(uint32_t id) const { return pool_.data() + infos_[id].offset; }

  uint32_t Singleton(uint64_t chunk, uint32_t rank) {
    tmp_.assign(words_, 0);
    tmp_[rank / 64] |= uint64_t{1} << (rank % 64);
    return Intern(chunk);
  }

  // The union of a and b (same chunk); false when they overlap (nothing is made).
  bool Union(uint32_t a, uint32_t b, uint32_t* out, uint32_t* first_common) {
    const uint64_t* x = Bits(a);
    const uint64_t* y = Bits(b);
    tmp_.resize(words_);
    for (size_t w = 0; w < words_; ++w) {
      if (x[w] & y[w]) {
        *first_common = static_cast<uint32_t>(w * 64 + std::countr_zero(x[w] & y[w]));
        return false;
      }
      tmp_[w] = x[w] | y[w];
    }
    *out = Intern(Chunk(a));
    return true;
  }

  std::vector<uint32_t> Ranks(uint32_t id) const {
    std::vector<uint32_t> r;
    if (id == kEmpty) return r;
    const uint64_t* x = Bits(id);
    for (size_t w = 0; w < words_; ++w) {
      for (uint64_t m = x[w]; m != 0; m &= m - 1) {
        r.push_back(static_cast<uint32_t>(w * 64 + std::countr_zero(m)));
      }
    }
    return r;
  }

  size_t Count(uint32_t id) const {
    size_t n = 0;
    const uint64_t* x = Bits(id);
    for (size_t w = 0; w < words_; ++w) n += std::popcount(x[w]);
    return n;
  }
  bool Has(uint32_t id, uint32_t rank) const { return (Bits(id)[rank / 64] >> (rank % 64)) & 1; }

 private:
  struct Info {
    uint64_t chunk;
    size_t offset;
  };

  uint32_t Intern(uint64_t chunk) {
    uint64_t h = chunk * 0x9E3779B97F4A7C15ull;
    for (uint64_t w : tmp_) h = (h ^ w) * 0x100000001B3ull + (h >> 29);
    auto [it, inserted] = by_hash_.try_emplace(h, 0);
    for (uint32_t id = it->second; !inserted && id != kEmpty; id = next_[id]) {
      if (Chunk(id) == chunk && std::equal(tmp_.begin(), tmp_.end(), Bits(id))) return id;
    }
    const uint32_t id = static_cast<uint32_t>(infos_.size());
    infos_.push_back({chunk, pool_.size()});
    pool_.insert(pool_.end(), tmp_.begin(), tmp_.end());
    if (next_.size() < infos_.size()) next_.resize(infos_.size(), kEmpty);
    next_[id] = inserted ? kEmpty : it->second;
    it->second = id;
    return id;
  }

  size_t words_;
  std::vector<Info> infos_;
  std::vector<uint64_t> pool_;
  std::vector<uint32_t> next_ = {kEmpty};  // chain of ids with the same hash
  absl::flat_hash_map<uint64_t, uint32_t> by_hash_;
  std::vector<uint64_t> tmp_;
};

// (buffer, slot, piece) of one rank as one key: slot < 2^40 after the range checks (data slots
// < 2^24, scratch slots < 2^24), piece < 2^16.
uint64_t SlotKey(const BufRef& b, uint32_t piece) {
  return (b.slot << 17) | (uint64_t{b.buffer == BufRef::Buffer::kScratch} << 16) | piece;
}

class Verifier {
 public:
  explicit Verifier(const Schedule& s) : s_(s) {}

  // Runs every phase; fills values_ when `want_values`.
  absl::Status Run(VerifyReport* report, bool want_values);

  std::vector<std::vector<std::vector<uint32_t>>> TakeValues() { return std::move(op_values_); }

 private:
  template <typename... Args>
  void Problem(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
    ++problem_count_;
    if (problems_.size() < kMaxProblems) problems_.push_back(absl::StrFormat(fmt, args...));
  }
  bool Full() const { return problems_.size() >= kMaxProblems; }
  std::string Name(uint32_t rank, uint32_t op) const { return DescribeOp(s_, rank, op); }

  void CheckStructure();
  void CheckBuf(uint32_t rank, uint32_t i, const char* role, const BufRef& b);
  void MatchTransfers();
  void CheckRaces();
  void CheckRacesOfRank(uint32_t rank);
  bool Reaches(uint32_t rank, uint32_t from, uint32_t to);
  void Execute(bool want_values);
  void Deadlock(const std::vector<std::vector<uint32_t>>& pending);
  uint32_t Get(uint32_t rank, const BufRef& b, uint32_t piece);
  void Set(uint32_t rank, const BufRef& b, uint32_t piece, uint32_t v) {
    state_[rank][SlotKey(b, piece)] = v;
  }
  void CheckPromises();

  const Schedule& s_;
  uint32_t n_ = 0;
  uint64_t slots_ = 0;
  std::vector<std::string> problems_;
  uint64_t problem_count_ = 0;
  // match_[rank][op]: for a send, the matching receive's op index on the peer; for a receive, the
  // matching send's on the peer; unused otherwise.
  std::vector<std::vector<uint32_t>> match_;
  // Race check: a DFS over deps, visited stamps per rank op.
  std::vector<uint32_t> stamp_;
  uint32_t stamp_now_ = 0;
  std::vector<uint32_t> dfs_stack_;
  // Execution.
  std::unique_ptr<ValueStore> values_;
  std::vector<absl::flat_hash_map<uint64_t, uint32_t>> state_;
  std::vector<std::vector<uint32_t>> carried_;  // per rank op: the value a transfer carries
  std::vector<std::vector<std::vector<uint32_t>>> op_values_;
  bool deadlocked_ = false;
};

absl::Status Verifier::Run(VerifyReport* report, bool want_values) {
  CheckStructure();
  if (problems_.empty()) MatchTransfers();
  if (problems_.empty()) {
    CheckRaces();
    const bool raced = !problems_.empty();
    Execute(want_values);
    // A race makes the values depend on timing; promise failures after one would only repeat it.
    if (!raced && !deadlocked_) CheckPromises();
  }
  if (report != nullptr) {
    report->ops = 0;
    report->transfers = 0;
    report->max_scratch = 0;
    for (const RankSchedule& r : s_.per_rank) {
      report->ops += r.ops.size();
      report->max_scratch = std::max(report->max_scratch, r.scratch_slots);
      for (const Op& o : r.ops) report->transfers += o.kind == OpKind::kSend;
    }
    report->problems = problems_;
  }
  if (problems_.empty()) return absl::OkStatus();
  std::string msg = absl::StrCat("schedule does not verify: ", problems_.front());
  // Past the cap some phases stop looking, so the count is then a lower bound.
  if (problem_count_ > 1) {
    absl::StrAppend(&msg, " (and ", Full() ? "at least " : "", problem_count_ - 1,
                    " more problems)");
  }
  return absl::InvalidArgumentError(msg);
}

// "{0-3,5,7-9}": a rank set, runs collapsed, so a 512-rank value stays readable.
std::string FormatRanks(const std::vector<uint32_t>& r) {
  std::string out = "{";
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (i > 0) out += ",";
    absl::StrAppend(&out, r[i]);
    if (j > i) absl::StrAppend(&out, "-", r[j]);
    i = j + 1;
  }
  return out + "}";
}

void Verifier::CheckBuf(uint32_t rank, uint32_t i, const char* role, const BufRef& b) {
  if (b.buffer == BufRef::Buffer::kData) {
    if (b.slot >= slots_) {
      PROBLEM("%s: %s data slot %u is out of range (the %s has %u data slots)", Name(rank, i), role,
              b.slot, KindName(s_.collective.kind), slots_);
    }
  } else if (b.buffer == BufRef::Buffer::kScratch) {
    if (b.slot >= s_.per_rank[rank].scratch_slots) {
      PROBLEM("%s: %s scratch slot %u is out of range (rank %u has %u scratch slots)",
              Name(rank, i), role, b.slot, rank, s_.per_rank[rank].scratch_slots);
    }
  } else {
    PROBLEM("%s: %s buffer %d is neither data nor scratch", Name(rank, i), role,
            static_cast<int>(b.buffer));
  }
}

void Verifier::CheckStructure() {
  if (s_.version != kScheduleFormatVersion) {
    PROBLEM("schedule format version %u; this build knows version %u", s_.version,
            kScheduleFormatVersion);
    return;
  }
  if (absl::Status st = Validate(s_.collective); !st.ok()) {
    PROBLEM("%s", st.message());
    return;
  }
  n_ = s_.collective.ranks;
  slots_ = SlotCount(s_.collective);
  if (s_.per_rank.size() != n_) {
    PROBLEM("%u op lists for a collective of %u ranks", s_.per_rank.size(), n_);
    return;
  }
  if (s_.pieces < 1 || s_.pieces > kMaxSchedulePieces) {
    PROBLEM("%u pieces per slot; use 1..%u", s_.pieces, kMaxSchedulePieces);
    return;
  }
  if (!s_.ranks.empty() && s_.ranks.size() != n_) {
    PROBLEM("%u rank names for a collective of %u ranks", s_.ranks.size(), n_);
  }
  for (uint32_t rank = 0; rank < n_ && !Full(); ++rank) {
    const RankSchedule& rs = s_.per_rank[rank];
    if (rs.scratch_slots > kMaxScratchSlots) {
      PROBLEM("rank %u: %u scratch slots; at most %u", rank, rs.scratch_slots, kMaxScratchSlots);
      continue;
    }
    if (rs.ops.size() >= UINT32_MAX) {
      PROBLEM("rank %u: %u ops; at most %u", rank, rs.ops.size(), UINT32_MAX - 1);
      continue;
    }
    for (uint32_t i = 0; i < rs.ops.size() && !Full(); ++i) {
      const Op& o = rs.ops[i];
      if (o.kind > OpKind::kReduce) {
        PROBLEM("%s: unknown op kind", Name(rank, i));
        continue;
      }
      if (o.kind == OpKind::kSend || IsRecv(o.kind)) {
        if (o.peer >= n_) {
          PROBLEM("%s: peer %u is not one of the %u ranks", Name(rank, i), o.peer, n_);
        } else if (o.peer == rank) {
          PROBLEM("%s: a rank cannot send to or receive from itself (use copy)", Name(rank, i));
        }
        if (o.chunk >= slots_) {
          PROBLEM("%s: chunk %u is out of range (the %s has %u data slots)", Name(rank, i), o.chunk,
                  KindName(s_.collective.kind), slots_);
        }
      }
      if (o.piece >= s_.pieces) {
        PROBLEM("%s: piece %u is out of range (slots have %u pieces)", Name(rank, i), o.piece,
                s_.pieces);
      }
      if (Reads(o.kind)) CheckBuf(rank, i, "source", o.src);
      if (Writes(o.kind)) CheckBuf(rank, i, "destination", o.dst);
      if (o.kind == OpKind::kReduce && o.src == o.dst) {
        PROBLEM("%s: reduces a slot into itself (every contribution twice)", Name(rank, i));
      }
      for (size_t k = 0; k < o.deps.size(); ++k) {
        if (o.deps[k] >= i) {
          PROBLEM(
              "%s: dep %u is not an earlier op of rank %u (a dependency cycle or a forward "
              "reference)",
              Name(rank, i), o.deps[k], rank);
          break;
        }
        if (k > 0 && o.deps[k] <= o.deps[k - 1]) {
          PROBLEM("%s: deps are not strictly increasing (%u after %u)", Name(rank, i), o.deps[k],
                  o.deps[k - 1]);
          break;
        }
      }
    }
  }
}

void Verifier::MatchTransfers() {
  // (src, dst, channel) -> (the sends on src, the receives on dst), in list order. An ordered map
  // so problems come out in the same order on every host.
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>,
           std::pair<std::vector<uint32_t>, std::vector<uint32_t>>>
      channels;
  match_.assign(n_, {});
  for (uint32_t rank = 0; rank < n_; ++rank) {
    const std::vector<Op>& ops = s_.per_rank[rank].ops;
    match_[rank].assign(ops.size(), UINT32_MAX);
    for (uint32_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == OpKind::kSend) {
        channels[{rank, ops[i].peer, ops[i].channel}].first.push_back(i);
      } else if (IsRecv(ops[i].kind)) {
        channels[{ops[i].peer, rank, ops[i].channel}].second.push_back(i);
      }
    }
  }
  for (const auto& [key, lists] : channels) {
    if (Full()) return;
    const auto [a, b, ch] = key;
    const std::vector<uint32_t>& sends = lists.first;
    const std::vector<uint32_t>& recvs = lists.second;
    const size_t common = std::min(sends.size(), recvs.size());
    if (sends.size() != recvs.size()) {
      PROBLEM(
          "rank %u sends %u pieces to rank %u on channel %u but rank %u receives %u; the first "
          "unmatched is %s",
          a, sends.size(), b, ch, b, recvs.size(),
          sends.size() > common ? Name(a, sends[common]) : Name(b, recvs[common]));
    }
    for (size_t k = 0; k < common; ++k) {
      const Op& so = s_.per_rank[a].ops[sends[k]];
      const Op& ro = s_.per_rank[b].ops[recvs[k]];
      if (so.piece != ro.piece || so.chunk != ro.chunk) {
        PROBLEM("%s is matched with %s (transfer %u on the channel) but they disagree on the %s",
                Name(a, sends[k]), Name(b, recvs[k]), k, so.piece != ro.piece ? "piece" : "chunk");
      }
      match_[a][sends[k]] = recvs[k];
      match_[b][recvs[k]] = sends[k];
    }
  }
}

// Whether op `from` is ordered before op `to` (from < to) of one rank by deps, transitively.
// A DFS backwards from `to` over deps that never goes below `from` (deps point only to earlier
// ops, so no path from `from` leaves [from, to]). Visited marks are stamps, reset in O(1).
bool Verifier::Reaches(uint32_t rank, uint32_t from, uint32_t to) {
  const std::vector<Op>& ops = s_.per_rank[rank].ops;
  const std::vector<uint32_t>& direct = ops[to].deps;
  if (std::binary_search(direct.begin(), direct.end(), from)) return true;
  if (direct.empty() || direct.back() < from) return false;
  if (++stamp_now_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    stamp_now_ = 1;
  }
  dfs_stack_.clear();
  dfs_stack_.push_back(to);
  while (!dfs_stack_.empty()) {
    const uint32_t x = dfs_stack_.back();
    dfs_stack_.pop_back();
    const std::vector<uint32_t>& deps = ops[x].deps;
    // deps are increasing: walk from the largest down to `from`.
    for (auto it = deps.rbegin(); it != deps.rend() && *it >= from; ++it) {
      if (*it == from) return true;
      if (stamp_[*it] != stamp_now_) {
        stamp_[*it] = stamp_now_;
        dfs_stack_.push_back(*it);
      }
    }
  }
  return false;
}

void Verifier::CheckRacesOfRank(uint32_t rank) {
  // Per (buffer, slot, piece): the last op that wrote it and the ops that read it since. A new
  // access must be ordered after the last writer, and a new write after those readers too;
  // earlier accesses are then ordered before it transitively (they were checked against that
  // writer), so this finds every unordered conflicting pair that is not implied by one already
  // reported.
  struct History {
    uint32_t writer = UINT32_MAX;
    std::vector<uint32_t> readers;
  };
  absl::flat_hash_map<uint64_t, History> hist;
  const std::vector<Op>& ops = s_.per_rank[rank].ops;
  stamp_.assign(ops.size(), 0);
  stamp_now_ = 0;
  for (uint32_t i = 0; i < ops.size() && !Full(); ++i) {
    const Op& o = ops[i];
    std::pair<BufRef, bool> acc[2];
    int n = 0;
    if (Reads(o.kind) && !(Writes(o.kind) && o.src == o.dst)) acc[n++] = {o.src, false};
    if (Writes(o.kind)) acc[n++] = {o.dst, true};
    for (int a = 0; a < n; ++a) {
      const BufRef& buf = acc[a].first;
      const bool write = acc[a].second;
      History& h = hist[SlotKey(buf, o.piece)];
      auto conflict = [&](uint32_t other) {
        if (other == i || Reaches(rank, other, i)) return;
        const bool other_writes = h.writer == other;
        PROBLEM(
            "race on rank %u %s piece %u: %s %s it and %s %s it, and neither is ordered "
            "before the other by deps",
            rank, BufName(buf), o.piece, Name(rank, other), other_writes ? "writes" : "reads",
            Name(rank, i), write ? "writes" : "reads");
      };
      if (h.writer != UINT32_MAX) conflict(h.writer);
      if (write) {
        for (uint32_t r : h.readers) conflict(r);
        h.writer = i;
        h.readers.clear();
      } else {
        h.readers.push_back(i);
      }
    }
  }
}

void Verifier::CheckRaces() {
  for (uint32_t rank = 0; rank < n_ && !Full(); ++rank) CheckRacesOfRank(rank);
  stamp_ = {};
}

uint32_t Verifier::Get(uint32_t rank, const BufRef& b, uint32_t piece) {
  const auto& st = state_[rank];
  if (auto it = st.find(SlotKey(b, piece)); it != st.end()) return it->second;
  if (b.buffer == BufRef::Buffer::kData && StartsWith(s_.collective, rank, b.slot)) {
    return values_->Singleton(b.slot, rank);
  }
  return ValueStore::kEmpty;
}

void Verifier::Execute(bool want_values) {
  values_ = std::make_unique<ValueStore>(n_);
  state_.assign(n_, {});
  carried_.assign(n_, {});
  // Successors by deps, per rank, as CSR: succ[start[i] .. start[i+1]).
  std::vector<std::vector<uint32_t>> start(n_), succ(n_);
  std::vector<std::vector<uint32_t>> pending(n_);
  std::deque<std::pair<uint32_t, uint32_t>> ready;
  for (uint32_t r = 0; r < n_; ++r) {
    const auto& ops = s_.per_rank[r].ops;
    carried_[r].assign(ops.size(), ValueStore::kEmpty);
    start[r].assign(ops.size() + 1, 0);
    pending[r].assign(ops.size(), 0);
    for (uint32_t i = 0; i < ops.size(); ++i) {
      for (uint32_t d : ops[i].deps) ++start[r][d + 1];
      pending[r][i] = static_cast<uint32_t>(ops[i].deps.size()) + (IsRecv(ops[i].kind) ? 1 : 0);
    }
    for (size_t i = 0; i < ops.size(); ++i) start[r][i + 1] += start[r][i];
    succ[r].resize(start[r].back());
    std::vector<uint32_t> fill(start[r].begin(), start[r].end() - 1);
    for (uint32_t i = 0; i < ops.size(); ++i) {
      for (uint32_t d : ops[i].deps) succ[r][fill[d]++] = i;
    }
    for (uint32_t i = 0; i < ops.size(); ++i) {
      if (pending[r][i] == 0) ready.emplace_back(r, i);
    }
  }
  auto release = [&](uint32_t r, uint32_t i) {
    if (--pending[r][i] == 0) ready.emplace_back(r, i);
  };
  auto store = [&](uint32_t r, uint32_t i, const BufRef& dst, uint32_t piece, uint32_t v) {
    if (v != ValueStore::kEmpty && dst.buffer == BufRef::Buffer::kData &&
        values_->Chunk(v) != dst.slot) {
      PROBLEM("%s writes chunk %u's data into data slot %u", Name(r, i), values_->Chunk(v),
              dst.slot);
    }
    Set(r, dst, piece, v);
  };
  // dst := dst ⊕ v.
  auto reduce_into = [&](uint32_t r, uint32_t i, const BufRef& dst, uint32_t piece, uint32_t v) {
    if (v == ValueStore::kEmpty) return;  // its source's problem was reported
    const uint32_t d = Get(r, dst, piece);
    if (d == ValueStore::kEmpty) {
      PROBLEM("%s reduces into %s piece %u, which holds nothing (receive or copy into it first)",
              Name(r, i), BufName(dst), piece);
      return;
    }
    if (values_->Chunk(d) != values_->Chunk(v)) {
      PROBLEM("%s reduces chunk %u's data into %s, which holds chunk %u's", Name(r, i),
              values_->Chunk(v), BufName(dst), values_->Chunk(d));
      return;
    }
    uint32_t out = 0, common = 0;
    if (!values_->Union(d, v, &out, &common)) {
      PROBLEM("%s reduces rank %u's contribution to chunk %u twice (%s already holds %s, adds %s)",
              Name(r, i), common, values_->Chunk(d), BufName(dst), FormatRanks(values_->Ranks(d)),
              FormatRanks(values_->Ranks(v)));
      return;
    }
    Set(r, dst, piece, out);
  };
  uint64_t run = 0;
  while (!ready.empty()) {
    const auto [r, i] = ready.front();
    ready.pop_front();
    ++run;
    const Op& o = s_.per_rank[r].ops[i];
    switch (o.kind) {
      case OpKind::kSend: {
        const uint32_t v = Get(r, o.src, o.piece);
        if (v == ValueStore::kEmpty) {
          PROBLEM("%s reads %s piece %u, which holds nothing", Name(r, i), BufName(o.src), o.piece);
        } else if (values_->Chunk(v) != o.chunk) {
          PROBLEM("%s is labelled chunk %u but carries chunk %u's data", Name(r, i), o.chunk,
                  values_->Chunk(v));
        }
        carried_[r][i] = v;
        release(o.peer, match_[r][i]);
        break;
      }
      case OpKind::kRecv:
      case OpKind::kRecvReduce: {
        const uint32_t v = carried_[o.peer][match_[r][i]];
        carried_[r][i] = v;
        if (o.kind == OpKind::kRecv) {
          store(r, i, o.dst, o.piece, v);
        } else {
          reduce_into(r, i, o.dst, o.piece, v);
        }
        break;
      }
      case OpKind::kCopy:
      case OpKind::kReduce: {
        const uint32_t v = Get(r, o.src, o.piece);
        if (v == ValueStore::kEmpty) {
          PROBLEM("%s reads %s piece %u, which holds nothing", Name(r, i), BufName(o.src), o.piece);
        } else if (o.kind == OpKind::kCopy) {
          store(r, i, o.dst, o.piece, v);
        } else {
          reduce_into(r, i, o.dst, o.piece, v);
        }
        break;
      }
    }
    for (uint32_t k = start[r][i]; k < start[r][i + 1]; ++k) release(r, succ[r][k]);
    pending[r][i] = UINT32_MAX;  // done
  }
  uint64_t total = 0;
  for (uint32_t r = 0; r < n_; ++r) total += s_.per_rank[r].ops.size();
  if (run < total) {
    deadlocked_ = true;
    Deadlock(pending);
    return;
  }
  if (want_values) {
    op_values_.assign(n_, {});
    for (uint32_t r = 0; r < n_; ++r) {
      op_values_[r].resize(carried_[r].size());
      for (size_t i = 0; i < carried_[r].size(); ++i) {
        op_values_[r][i] = values_->Ranks(carried_[r][i]);
      }
    }
  }
}

// Names one wait-for cycle among the ops that never ran. Every such op waits for an op that never
// ran either (an unfinished dep, or for a receive its matching send), so walking "waits for" from
// any of them must come back to an op already on the walk.
void Verifier::Deadlock(const std::vector<std::vector<uint32_t>>& pending) {
  uint64_t stuck = 0;
  std::pair<uint32_t, uint32_t> first{UINT32_MAX, 0};
  for (uint32_t r = 0; r < n_; ++r) {
    for (uint32_t i = 0; i < pending[r].size(); ++i) {
      if (pending[r][i] != UINT32_MAX) {
        if (stuck++ == 0) first = {r, i};
      }
    }
  }
  auto waits_for = [&](uint32_t r, uint32_t i) -> std::pair<uint32_t, uint32_t> {
    const Op& o = s_.per_rank[r].ops[i];
    for (uint32_t d : o.deps) {
      if (pending[r][d] != UINT32_MAX) return {r, d};
    }
    return {o.peer, match_[r][i]};  // a receive whose send never started
  };
  std::vector<std::pair<uint32_t, uint32_t>> path;
  absl::flat_hash_map<uint64_t, size_t> on_path;
  auto cur = first;
  while (true) {
    const uint64_t key = (uint64_t{cur.first} << 32) | cur.second;
    auto [it, inserted] = on_path.try_emplace(key, path.size());
    if (!inserted) {
      path.erase(path.begin(), path.begin() + static_cast<ptrdiff_t>(it->second));
      break;
    }
    path.push_back(cur);
    cur = waits_for(cur.first, cur.second);
  }
  std::string cycle;
  for (const auto& [r, i] : path) absl::StrAppend(&cycle, Name(r, i), " waits for ");
  absl::StrAppend(&cycle, Name(path.front().first, path.front().second));
  PROBLEM("deadlock: %u ops never run; cycle: %s", stuck, cycle);
}

// Every promised (rank, slot), every piece. A slot no op wrote still holds its starting value in
// every piece, so it is checked once, not once per piece: the cost is that of the promised slots
// plus the pieces written, and the problem cap ends it early when much is wrong.
void Verifier::CheckPromises() {
  const Collective& c = s_.collective;
  const uint64_t k = c.chunks_per_rank;
  // All-gather, broadcast and all-to-all promise the owner's contribution; the reducing kinds all
  // N (collective.h's table; Promise() spells the same out as a vector).
  const bool promises_all =
      c.kind == Kind::kReduceScatter || c.kind == Kind::kAllReduce || c.kind == Kind::kReduce;
  auto holds = [&](uint32_t v, uint64_t sl) {
    if (v == ValueStore::kEmpty || values_->Chunk(v) != sl) return false;
    if (promises_all) return values_->Count(v) == n_;
    return values_->Count(v) == 1 && values_->Has(v, SlotOwner(c, sl));
  };
  auto report = [&](uint32_t r, uint64_t sl, const std::string& pieces, uint32_t v) {
    const std::optional<std::vector<uint32_t>> want = Promise(c, r, sl);
    PROBLEM("rank %u data[%u] %s ends with %s; the %s promises %s", r, sl, pieces,
            v == ValueStore::kEmpty ? std::string("nothing") : FormatRanks(values_->Ranks(v)),
            KindName(c.kind), want.has_value() ? FormatRanks(*want) : "nothing");
  };
  for (uint32_t r = 0; r < n_ && !Full(); ++r) {
    absl::flat_hash_set<uint64_t> written;
    for (const auto& [key, v] : state_[r]) {
      if (((key >> 16) & 1) == 0) written.insert(key >> 17);
    }
    auto check = [&](uint64_t sl) {
      if (!written.contains(sl)) {
        const uint32_t v = Get(r, BufRef{BufRef::Buffer::kData, sl}, 0);
        if (!holds(v, sl)) {
          report(r, sl,
                 s_.pieces == 1 ? std::string("piece 0")
                                : absl::StrFormat("pieces 0-%u", s_.pieces - 1),
                 v);
        }
        return;
      }
      for (uint32_t p = 0; p < s_.pieces && !Full(); ++p) {
        const uint32_t v = Get(r, BufRef{BufRef::Buffer::kData, sl}, p);
        if (!holds(v, sl)) report(r, sl, absl::StrCat("piece ", p), v);
      }
    };
    switch (c.kind) {
      case Kind::kReduceScatter:
        for (uint64_t j = 0; j < k && !Full(); ++j) check(r * k + j);
        break;
      case Kind::kReduce:
        if (r != c.root) break;
        [[fallthrough]];
      case Kind::kAllGather:
      case Kind::kAllReduce:
      case Kind::kBroadcast:
        for (uint64_t sl = 0; sl < slots_ && !Full(); ++sl) check(sl);
        break;
      case Kind::kAllToAll:
        for (uint64_t src = 0; src < n_ && !Full(); ++src) {
          for (uint64_t j = 0; j < k && !Full(); ++j) check((src * n_ + r) * k + j);
        }
        break;
    }
  }
}

}  // namespace

absl::Status VerifySchedule(const Schedule& s, VerifyReport* report) {
  Verifier v(s);
  return v.Run(report, /*want_values=*/false);
}

absl::StatusOr<std::vector<std::vector<std::vector<uint32_t>>>> OpValues(const Schedule& s) {
  Verifier v(s);
  if (absl::Status st = v.Run(nullptr, /*want_values=*/true); !st.ok()) return st;
  return v.TakeValues();
}

}  // namespace heddle::collective

#undef PROBLEM
