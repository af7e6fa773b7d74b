// The OptiFlow schedule compiler: move DAG, routing, earliest-finish-time list scheduling of
// pieces, op emission and the α–β replay that prices a schedule (compiler.h,
// docs/optiflow-compiler.md).
#include "control/collective/compiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "control/collective/topology_io.h"

namespace heddle::collective {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

// How many holders of a value a move may take its source from besides the intent's source, and
// how many relay ranks a pair of ranks is offered. Small caps keep each evaluation O(1).
constexpr size_t kMaxSubstitutes = 4;
constexpr size_t kMaxRelays = 3;
// What doubling the piece count must gain (relative) for the piece search to keep it.
constexpr double kMinPieceGain = 0.02;
// The lower bounds of the piece search add the same times in another order than the scheduler,
// so they may round differently (relative error ~1e-13 over a million additions); a candidate is
// ruled out only when its bound reaches the time to beat by this much more.
constexpr double kBoundSlack = 1e-9;

uint64_t PairKey(uint32_t a, uint32_t b) { return uint64_t{a} << 32 | b; }

// ---- The network as the scheduler sees it ------------------------------------------------------

// Ids (links of a segment, segments of a route) stored in a Network's IdArena.
class IdSpan {
 public:
  IdSpan() = default;
  IdSpan(const uint32_t* ids, size_t n) : ids_(ids), n_(static_cast<uint32_t>(n)) {}
  const uint32_t* begin() const { return ids_; }
  const uint32_t* end() const { return ids_ + n_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  uint32_t operator[](size_t i) const { return ids_[i]; }

 private:
  const uint32_t* ids_ = nullptr;
  uint32_t n_ = 0;
};

// Bump allocation of id arrays that live as long as their Network: the segments' links and the
// route lists of every rank pair, without one heap allocation (and free) each. Blocks never move,
// so an IdSpan into one stays valid.
class IdArena {
 public:
  uint32_t* Alloc(size_t n) {
    if (n > left_) {
      const size_t size = std::max(kBlock, n);
      blocks_.push_back(std::make_unique_for_overwrite<uint32_t[]>(size));
      next_ = blocks_.back().get();
      left_ = size;
    }
    uint32_t* p = next_;
    next_ += n;
    left_ -= n;
    return p;
  }

 private:
  static constexpr size_t kBlock = size_t{1} << 14;  // 64 KiB
  std::vector<std::unique_ptr<uint32_t[]>> blocks_;
  uint32_t* next_ = nullptr;
  size_t left_ = 0;
};

// A transfer between two ranks over one path: a direct link, or links through switches only.
struct Segment {
  uint32_t from = 0, to = 0;
  IdSpan links;          // topology link indexes, in path order
  double latency = 0;    // Σ l_i
  double bandwidth = 0;  // min_i w_i
  double busy = 0;       // d = α + b / bandwidth
  double Cost() const { return busy + latency; }
};

// Arrival of a transfer that starts at `start` (shared by the scheduler and the replay so that
// both compute bit-identical times).
inline double Arrival(const Segment& s, double start) { return start + s.busy + s.latency; }

// The routes a rank pair is offered (Network::Routes()): route i is a list of segment ids.
// Laid out as [n, 0, end_0, …, end_{n−1}, ids…] in the Network's arena.
class RouteList {
 public:
  explicit RouteList(const uint32_t* p) : p_(p) {}
  const uint32_t* data() const { return p_; }
  size_t size() const { return p_[0]; }
  bool empty() const { return p_[0] == 0; }
  IdSpan operator[](size_t i) const {
    const uint32_t* ids = p_ + 2 + p_[0];
    return IdSpan(ids + p_[1 + i], p_[2 + i] - p_[1 + i]);
  }
  // Holds the list's pointer into the arena, not the list: it outlives a temporary RouteList.
  class Iterator {
   public:
    Iterator(const uint32_t* p, size_t i) : p_(p), i_(i) {}
    IdSpan operator*() const { return RouteList(p_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const uint32_t* p_;
    size_t i_;
  };
  Iterator begin() const { return Iterator(p_, 0); }
  Iterator end() const { return Iterator(p_, size()); }

 private:
  const uint32_t* p_;
};

// What the routes take from the topology whatever the piece size: the links out of each node
// and between ranks, and the ranks' widest direct links. Built once per Compile() and shared
// (read only) by the Network of every candidate piece count, on every thread.
class Fabric {
 public:
  explicit Fabric(const Topology& t) : t_(t), out_(t.nodes.size()) {
    if (t.ranks <= kDensePairRanks) rank_link_.assign(size_t{t.ranks} * t.ranks, kNone);
    max_out_bw_.assign(t.ranks, 0);
    max_in_bw_.assign(t.ranks, 0);
    for (uint32_t i = 0; i < t.links.size(); ++i) {
      const Link& l = t.links[i];
      out_[l.src].push_back(i);
      if (l.src >= t.ranks || l.dst >= t.ranks) continue;
      rank_links_ = true;
      if (!rank_link_.empty()) {
        uint32_t& slot = rank_link_[size_t{l.src} * t.ranks + l.dst];
        if (slot == kNone) slot = i;
      } else {
        link_index_.emplace(PairKey(l.src, l.dst), i);
      }
      max_out_bw_[l.src] = std::max(max_out_bw_[l.src], l.bytes_per_second);
      max_in_bw_[l.dst] = std::max(max_in_bw_[l.dst], l.bytes_per_second);
    }
    has_switches_ = t.nodes.size() > t.ranks;
  }

  const Topology& topology() const { return t_; }
  // The link from rank a to rank b, or kNone.
  uint32_t RankLink(uint32_t a, uint32_t b) const {
    if (!rank_link_.empty()) return rank_link_[size_t{a} * t_.ranks + b];
    auto it = link_index_.find(PairKey(a, b));
    return it == link_index_.end() ? kNone : it->second;
  }
  const std::vector<uint32_t>& out(uint32_t node) const { return out_[node]; }
  bool has_switches() const { return has_switches_; }
  bool rank_links() const { return rank_links_; }
  double max_out_bw(uint32_t rank) const { return max_out_bw_[rank]; }
  double max_in_bw(uint32_t rank) const { return max_in_bw_[rank]; }

  // Per rank pair tables (here and in Network) of ranks² entries up to this many ranks (cheaper
  // than hashing), else hash maps.
  static constexpr uint32_t kDensePairRanks = 512;

 private:
  const Topology& t_;
  std::vector<std::vector<uint32_t>> out_;
  std::vector<uint32_t> rank_link_;                     // ranks², or empty
  absl::flat_hash_map<uint64_t, uint32_t> link_index_;  // without rank_link_
  bool has_switches_ = false, rank_links_ = false;
  std::vector<double> max_out_bw_, max_in_bw_;
};

class Network {
 public:
  Network(const Fabric& f, double piece_bytes, double alpha)
      : f_(f), t_(f.topology()), piece_bytes_(piece_bytes), alpha_(alpha) {
    if (t_.ranks <= Fabric::kDensePairRanks) {
      dense_seg_.assign(size_t{t_.ranks} * t_.ranks, kUnknown);
      dense_routes_.assign(size_t{t_.ranks} * t_.ranks, nullptr);
    }
    // Rank-to-rank direct links: the relays' lower bounds.
    min_out_.assign(t_.ranks, kInf);
    min_in_.assign(t_.ranks, kInf);
    for (const Link& l : t_.links) {
      if (l.src >= t_.ranks || l.dst >= t_.ranks) continue;
      const double c = alpha_ + piece_bytes_ / l.bytes_per_second + l.latency_s;
      min_out_[l.src] = std::min(min_out_[l.src], c);
      min_in_[l.dst] = std::min(min_in_[l.dst], c);
    }
  }

  uint32_t link_count() const { return static_cast<uint32_t>(t_.links.size()); }
  const Segment& segment(uint32_t id) const { return segments_[id]; }

  // The segment a→b: the direct link, else the shortest path through switches only. kNone if
  // neither exists.
  uint32_t Seg(uint32_t a, uint32_t b) {
    uint32_t* id;
    if (!dense_seg_.empty()) {
      id = &dense_seg_[size_t{a} * t_.ranks + b];
      if (*id != kUnknown) return *id;
      *id = kNone;
    } else {
      auto [it, inserted] = seg_index_.emplace(PairKey(a, b), kNone);
      if (!inserted) return it->second;
      id = &it->second;
    }
    if (const uint32_t li = f_.RankLink(a, b); li != kNone) {
      *id = AddSegment(a, b, &li, 1);
      return *id;
    }
    if (!f_.has_switches()) return kNone;
    const std::vector<uint32_t> links = SwitchPath(a, b);
    if (links.empty()) return kNone;
    *id = AddSegment(a, b, links.data(), links.size());
    return *id;
  }

  // Candidate routes a→b as lists of segment ids: the direct segment first, then up to
  // kMaxRelays store-and-forward relays over one rank that could beat it (lower static cost, or
  // a wider bottleneck), and — when neither exists — the statically shortest path over any
  // nodes, split at the ranks it passes. The list stays valid as long as the Network.
  // The routes of a pair and their segments depend on the pair alone, not on which routes were
  // built before (segment ids do, but nothing is decided by them), so Run(), LowerBound() and
  // Emit() may ask for routes in any order.
  RouteList Routes(uint32_t a, uint32_t b, bool multi_hop) {
    const uint32_t** list;
    if (!dense_routes_.empty()) {
      list = &dense_routes_[size_t{a} * t_.ranks + b];
    } else {
      list = &routes_[PairKey(a, b)];  // BuildRoutes() does not touch routes_
    }
    if (*list == nullptr) *list = BuildRoutes(a, b, multi_hop);
    return RouteList(*list);
  }

 private:
  const uint32_t* BuildRoutes(uint32_t a, uint32_t b, bool multi_hop) {
    route_ids_.clear();
    route_ends_.clear();
    const uint32_t direct = Seg(a, b);
    if (direct != kNone) {
      route_ids_.push_back(direct);
      route_ends_.push_back(static_cast<uint32_t>(route_ids_.size()));
    }
    if (multi_hop) AddRelayRoutes(a, b, direct);
    // [n, 0, end_0, …, end_{n−1}, ids…]: see RouteList.
    const size_t n = route_ends_.size();
    uint32_t* p = arena_.Alloc(2 + n + route_ids_.size());
    p[0] = static_cast<uint32_t>(n);
    p[1] = 0;
    std::copy(route_ends_.begin(), route_ends_.end(), p + 2);
    std::copy(route_ids_.begin(), route_ids_.end(), p + 2 + n);
    return p;
  }

  // BuildRoutes() with multi_hop: the relays, or the path over any nodes when there is no route.
  void AddRelayRoutes(uint32_t a, uint32_t b, uint32_t direct) {
    bool relays = true;
    if (direct != kNone) {
      const Segment& d = segments_[direct];
      if (d.Cost() <= min_out_[a] + min_in_[b] &&
          d.bandwidth >= std::min(f_.max_out_bw(a), f_.max_in_bw(b))) {
        relays = false;  // no relay over a rank can be cheaper or wider
      }
    }
    if (relays && f_.rank_links()) {
      std::vector<std::tuple<double, uint32_t, uint32_t, uint32_t>>& found = found_;
      found.clear();  // cost, k, seg, seg
      for (uint32_t k = 0; k < t_.ranks; ++k) {
        if (k == a || k == b) continue;
        if (f_.RankLink(a, k) == kNone || f_.RankLink(k, b) == kNone) continue;
        const uint32_t s1 = Seg(a, k), s2 = Seg(k, b);
        const double cost = segments_[s1].Cost() + segments_[s2].Cost();
        const double bw = std::min(segments_[s1].bandwidth, segments_[s2].bandwidth);
        if (direct == kNone || cost < segments_[direct].Cost() ||
            bw > segments_[direct].bandwidth) {
          found.emplace_back(cost, k, s1, s2);
        }
      }
      std::sort(found.begin(), found.end());
      for (size_t i = 0; i < found.size() && i < kMaxRelays; ++i) {
        route_ids_.push_back(std::get<2>(found[i]));
        route_ids_.push_back(std::get<3>(found[i]));
        route_ends_.push_back(static_cast<uint32_t>(route_ids_.size()));
      }
    }
    if (route_ends_.empty()) {
      std::vector<uint32_t> path = ShortestPath(a, b, /*through_ranks=*/true);
      // Split at the ranks it passes: each stretch between two ranks goes through switches
      // only (or is a link), so Seg() has a segment for it. The route takes Seg()'s segment,
      // not the stretch's own links: an equal-cost path through another switch would make the
      // pair's segment depend on which routes were asked for first, and the replay
      // (PredictTime) prices every transfer on Seg()'s segment.
      std::vector<uint32_t> route;
      uint32_t from = a;
      for (uint32_t li : path) {
        const uint32_t v = t_.links[li].dst;
        if (v < t_.ranks) {
          const uint32_t id = Seg(from, v);
          if (id == kNone) {  // unreachable: the stretch itself is such a path
            route.clear();
            break;
          }
          route.push_back(id);
          from = v;
        }
      }
      if (!route.empty()) {
        route_ids_.insert(route_ids_.end(), route.begin(), route.end());
        route_ends_.push_back(static_cast<uint32_t>(route_ids_.size()));
      }
    }
  }

  uint32_t AddSegment(uint32_t a, uint32_t b, const uint32_t* links, size_t n) {
    Segment s;
    s.from = a;
    s.to = b;
    s.bandwidth = kInf;
    for (size_t i = 0; i < n; ++i) {
      s.latency += t_.links[links[i]].latency_s;
      s.bandwidth = std::min(s.bandwidth, t_.links[links[i]].bytes_per_second);
    }
    s.busy = alpha_ + piece_bytes_ / s.bandwidth;
    uint32_t* ids = arena_.Alloc(n);
    std::copy(links, links + n, ids);
    s.links = IdSpan(ids, n);
    segments_.push_back(s);
    return static_cast<uint32_t>(segments_.size() - 1);
  }

  // Links of the path a→b through switches only (the per-source tree is cached).
  std::vector<uint32_t> SwitchPath(uint32_t a, uint32_t b) {
    auto [it, inserted] = switch_trees_.emplace(a, std::vector<uint32_t>{});
    if (inserted) it->second = Dijkstra(a, /*through_ranks=*/false);
    return Unwind(it->second, a, b);
  }
  std::vector<uint32_t> ShortestPath(uint32_t a, uint32_t b, bool through_ranks) {
    return Unwind(Dijkstra(a, through_ranks), a, b);
  }
  std::vector<uint32_t> Unwind(const std::vector<uint32_t>& parent_link, uint32_t a,
                               uint32_t b) const {
    std::vector<uint32_t> links;
    if (parent_link[b] == kNone) return links;
    for (uint32_t v = b; v != a;) {
      const uint32_t li = parent_link[v];
      links.push_back(li);
      v = t_.links[li].src;
    }
    std::reverse(links.begin(), links.end());
    return links;
  }
  // Per node, the link that reaches it on a shortest path from `a` (weights: α + b/w + l per
  // link); ranks other than `a` are only expanded when through_ranks. Ties: lower node index.
  std::vector<uint32_t> Dijkstra(uint32_t a, bool through_ranks) const {
    const size_t n = t_.nodes.size();
    std::vector<double> dist(n, kInf);
    std::vector<uint32_t> parent(n, kNone);
    using Item = std::pair<double, uint32_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
    dist[a] = 0;
    heap.emplace(0, a);
    while (!heap.empty()) {
      auto [d, v] = heap.top();
      heap.pop();
      if (d > dist[v]) continue;
      if (v != a && v < t_.ranks && !through_ranks) continue;
      for (uint32_t li : f_.out(v)) {
        const Link& l = t_.links[li];
        const double nd = d + alpha_ + piece_bytes_ / l.bytes_per_second + l.latency_s;
        if (nd < dist[l.dst]) {
          dist[l.dst] = nd;
          parent[l.dst] = li;
          heap.emplace(nd, l.dst);
        }
      }
    }
    return parent;
  }

  const Fabric& f_;
  const Topology& t_;
  double piece_bytes_, alpha_;
  std::vector<double> min_out_, min_in_;
  IdArena arena_;
  std::vector<Segment> segments_;
  // Per rank pair, Seg() and Routes(): in tables of ranks² entries up to kDensePairRanks ranks
  // (cheaper than hashing, once per source and candidate), else in hash maps.
  static constexpr uint32_t kUnknown = kNone - 1;  // dense_seg_: not looked up yet
  std::vector<uint32_t> dense_seg_;                // segment id, kNone (none) or kUnknown
  std::vector<const uint32_t*> dense_routes_;      // RouteList, or nullptr: not built yet
  absl::flat_hash_map<uint64_t, uint32_t> seg_index_;
  absl::flat_hash_map<uint64_t, const uint32_t*> routes_;
  absl::flat_hash_map<uint32_t, std::vector<uint32_t>> switch_trees_;
  // BuildRoutes()'s scratch.
  std::vector<uint32_t> route_ids_, route_ends_;
  std::vector<std::tuple<double, uint32_t, uint32_t, uint32_t>> found_;
};

// ---- The move DAG ------------------------------------------------------------------------------

struct Source {
  uint32_t rank = 0;
  uint32_t writer = kNone;  // the move that put the value there; kNone = it started there
};

struct Dag {
  std::vector<uint32_t> pred_start, preds;  // CSR, deduplicated, increasing
  std::vector<uint32_t> succ_start, succs;
  std::vector<uint32_t> src_start;  // CSR into sources: [0] is the intent's source
  std::vector<Source> sources;
};

absl::StatusOr<Dag> BuildDag(const Intent& intent, bool substitute) {
  const Collective& c = intent.collective;
  const uint64_t slots = SlotCount(c);
  const uint32_t m_count = static_cast<uint32_t>(intent.moves.size());
  struct SlotState {
    uint32_t writer = kNone;
    uint64_t value = 0;
    std::vector<uint32_t> readers;  // moves that read the slot since its last write
  };
  absl::flat_hash_map<uint64_t, SlotState> state;
  absl::flat_hash_map<uint64_t, std::vector<Source>> holders;  // value → ranks that got it
  uint64_t next_value = uint64_t{1} << 62;
  auto key = [&](uint32_t rank, uint64_t slot) { return uint64_t{rank} * slots + slot; };
  auto slot_state = [&](uint32_t rank, uint64_t slot) -> SlotState& {
    auto [it, inserted] = state.try_emplace(key(rank, slot));
    if (inserted) it->second.value = StartsWith(c, rank, slot) ? key(rank, slot) + 1 : 0;
    return it->second;
  };

  Dag dag;
  std::vector<uint32_t> preds;
  dag.pred_start.push_back(0);
  dag.src_start.push_back(0);
  for (uint32_t m = 0; m < m_count; ++m) {
    const Move& mv = intent.moves[m];
    if (mv.src >= c.ranks || mv.dst >= c.ranks || mv.slot >= slots) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "intent %s: move %u (line %u:%u): rank %u → %u slot %u is outside the collective "
          "(%u ranks, %u slots)",
          intent.name, m, mv.line, mv.column, mv.src, mv.dst, mv.slot, c.ranks, slots));
    }
    if (mv.src == mv.dst) {
      return absl::InvalidArgumentError(
          absl::StrFormat("intent %s: move %u (line %u:%u): from rank %u to itself", intent.name, m,
                          mv.line, mv.column, mv.src));
    }
    preds.clear();
    SlotState& src = slot_state(mv.src, mv.slot);
    const uint32_t src_writer = src.writer;
    const uint64_t value = src.value;
    if (src_writer != kNone) preds.push_back(src_writer);
    dag.sources.push_back(Source{mv.src, src_writer});
    src.readers.push_back(m);
    if (substitute && value != 0) {
      auto h = holders.find(value);
      if (h != holders.end()) {
        size_t taken = 0;
        for (const Source& s : h->second) {
          if (taken == kMaxSubstitutes) break;
          if (s.rank == mv.src || s.rank == mv.dst) continue;
          SlotState& hs = slot_state(s.rank, mv.slot);
          if (hs.value != value || hs.writer != s.writer) continue;  // overwritten since
          dag.sources.push_back(s);
          hs.readers.push_back(m);
          ++taken;
        }
      }
    }
    dag.src_start.push_back(static_cast<uint32_t>(dag.sources.size()));
    SlotState& dst = slot_state(mv.dst, mv.slot);
    if (dst.writer != kNone) preds.push_back(dst.writer);
    for (uint32_t r : dst.readers) {
      if (r != m) preds.push_back(r);
    }
    dst.readers.clear();
    dst.writer = m;
    dst.value = mv.kind == MoveKind::kCopy ? value : next_value++;
    if (dst.value != 0) holders[dst.value].push_back(Source{mv.dst, m});
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    dag.preds.insert(dag.preds.end(), preds.begin(), preds.end());
    dag.pred_start.push_back(static_cast<uint32_t>(dag.preds.size()));
  }
  // Successors (CSR), in increasing order.
  std::vector<uint32_t> count(m_count + 1, 0);
  for (uint32_t q : dag.preds) ++count[q + 1];
  dag.succ_start.assign(m_count + 1, 0);
  for (uint32_t m = 0; m < m_count; ++m) dag.succ_start[m + 1] = dag.succ_start[m] + count[m + 1];
  dag.succs.resize(dag.preds.size());
  std::vector<uint32_t> fill(dag.succ_start.begin(), dag.succ_start.end() - 1);
  for (uint32_t m = 0; m < m_count; ++m) {
    for (uint32_t i = dag.pred_start[m]; i < dag.pred_start[m + 1]; ++i) {
      dag.succs[fill[dag.preds[i]]++] = m;
    }
  }
  return dag;
}

// ---- The list scheduler ------------------------------------------------------------------------

// The scheduler's tables per (move, piece). The piece search keeps one set across its candidates
// (one per thread) and for the emission, reserved for its largest candidate: a candidate's tables
// then go into memory an earlier one already touched, where fresh ones of a few MB each cost the
// kernel about as much time in page faults as filling them takes.
struct PieceTables {
  std::vector<uint32_t> fin_op, rd_rank, rd_op;
  std::vector<double> fin_end, rd_end;

  void Reserve(size_t move_pieces) {
    fin_op.reserve(move_pieces);
    rd_rank.reserve(move_pieces);
    rd_op.reserve(move_pieces);
    fin_end.reserve(move_pieces);
    rd_end.reserve(move_pieces);
  }
};

class Scheduler {
 public:
  // One commit of Run(): piece cur(move) of `move` from its source `source` over `route`.
  struct Step {
    uint32_t move;
    uint32_t source;
    uint32_t route;
  };

  // With emit = false the scheduler makes the same choices and computes the same times but
  // appends no ops: Run() returns a schedule without per_rank, only its predicted_s (what the
  // piece search compares). `tables`, if given, is used instead of tables of its own.
  Scheduler(const Intent& intent, const Fabric& fabric, const Dag& dag, uint32_t pieces,
            const CompileOptions& o, bool emit = true, PieceTables* tables = nullptr)
      : intent_(intent),
        t_(fabric.topology()),
        dag_(dag),
        pieces_(pieces),
        options_(o),
        emit_(emit),
        net_(fabric, static_cast<double>(o.slot_bytes) / pieces, o.per_op_overhead_s),
        tables_(tables) {
    // Borrowed for the scheduler's life (plain members: no indirection on every access).
    if (tables_ != nullptr) SwapTables();
  }
  ~Scheduler() {
    if (tables_ != nullptr) SwapTables();
  }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The schedule; nullopt once its makespan is certain to reach `give_up_at` (the piece search
  // passes the time a candidate must beat, so a losing candidate stops early, or does not start:
  // see LowerBound()).
  // With `trace`, every commit is appended to it, for Emit().
  // With `shared_give_up` (the threaded piece search), the time to give up at may also move
  // down while the candidate is scheduled: it is read after every commit, and every check
  // below uses the lowest value seen (a stale, larger one only rules out less).
  absl::StatusOr<std::optional<Schedule>> Run(double give_up_at = kInf,
                                              std::vector<Step>* trace = nullptr,
                                              const std::atomic<double>* shared_give_up = nullptr) {
    const uint32_t m_count = static_cast<uint32_t>(intent_.moves.size());
    const size_t mp = size_t{m_count} * pieces_;
    if (trace) {
      trace->clear();
      trace->reserve(mp);
    }
    Reset();
    // A bound reaching give_up_at·(1 + kBoundSlack) is certain to be ≥ give_up_at in the
    // scheduler's own arithmetic too.
    if (shared_give_up != nullptr) {
      give_up_at = std::min(give_up_at, shared_give_up->load(std::memory_order_relaxed));
    }
    double hopeless = give_up_at * (1 + kBoundSlack);
    lower_bound_ = 0;
    const uint64_t commits_before = commits_;
    committed_ = 0;
    // The link check (LinksHopeless) counts down per link on every commit, so it runs on every
    // commit whenever it may be needed: also when the shared time is still infinite.
    const bool check_links = give_up_at != kInf || shared_give_up != nullptr;
    if (check_links || options_.debug != nullptr) lower_bound_ = LowerBound();
    if (give_up_at != kInf && lower_bound_ >= hopeless) {
      outcome_ = PieceCandidate::Outcome::kRuledOut;
      return std::nullopt;
    }
    outcome_ = PieceCandidate::Outcome::kAbandoned;
    // Sources whose only route is one direct link (every source on a mesh): Evaluate() prices
    // them without walking the route lists.
    src_fast_.assign(dag_.sources.size(), FastSource{});
    for (uint32_t m = 0; m < m_count; ++m) {
      for (uint32_t si = dag_.src_start[m]; si < dag_.src_start[m + 1]; ++si) {
        const auto& routes = SourceRoutes(m, si);
        if (routes.size() != 1 || routes[0].size() != 1) continue;
        const Segment& seg = net_.segment(routes[0][0]);
        if (seg.links.size() != 1) continue;
        src_fast_[si] = FastSource{dag_.sources[si].writer, seg.links[0], seg.busy, seg.latency};
      }
    }
    link_groups_.assign(net_.link_count(), {});
    single_seg_.assign(m_count, kNone);
    for (uint32_t m = 0; m < m_count; ++m) {
      if (dag_.src_start[m + 1] - dag_.src_start[m] != 1) continue;
      const auto& routes = SourceRoutes(m, dag_.src_start[m]);
      if (routes.size() == 1 && routes[0].size() == 1) single_seg_[m] = routes[0][0];
    }
    // Moves with several sources, each with one route of one segment (tree all-gather's copies
    // on a mesh, which may read from up to 5 holders): see JoinGroups().
    multi_src_.assign(m_count, 0);
    src_seg_.assign(dag_.sources.size(), kNone);
    for (uint32_t m = 0; m < m_count; ++m) {
      if (dag_.src_start[m + 1] - dag_.src_start[m] < 2) continue;
      bool one_segment = true;
      for (uint32_t si = dag_.src_start[m]; si < dag_.src_start[m + 1]; ++si) {
        const auto& routes = SourceRoutes(m, si);
        if (routes.size() != 1 || routes[0].size() != 1) {
          one_segment = false;
          break;
        }
        src_seg_[si] = routes[0][0];
      }
      if (!one_segment) continue;
      multi_src_[m] = 1;
    }
    src_group_.assign(dag_.sources.size(), kNone);  // made when a piece first joins
    grp_piece_.assign(m_count, kNone);
    hot_.assign(m_count, 0);

    for (uint32_t m = 0; m < m_count; ++m) {
      pending_[m] = dag_.pred_start[m + 1] - dag_.pred_start[m];
      if (pending_[m] == 0) HEDDLE_RETURN_IF_ERROR(Push(m));
    }
    while (!heap_.empty()) {
      const Entry top = heap_[0];
      const uint32_t m = top.move;
      Choice choice;
      if (top.group != kNone) {
        if (!Waiting(m, groups_[top.group].entry_piece)) {
          // Its piece left through another of its groups: the entry was a lower bound of the
          // group's minimum, which it now becomes.
          RefreshGroup(top.group);
          continue;
        }
        HeapPop();
        // Its key is its finish now (an entry whose piece is still waiting is the group's
        // minimum, checked above); a piece of several sources takes the best of them, as
        // Evaluate() picks it.
        TakeFromGroup(top.group, m, cur_[m]);
        choice = multi_src_[m] ? Evaluate(m, cur_[m]) : Choice{top.finish, 0, 0};
      } else {
        choice = Evaluate(m, cur_[m]);
        const Entry now{choice.finish, m};
        // The next entry is the smaller child of the root.
        size_t c = 1;
        if (c + 1 < heap_.size() && heap_[c + 1] < heap_[c]) ++c;
        if (c < heap_.size() && heap_[c] < now) {
          // Another entry now comes first (a piece that finishes earlier, or a group's entry,
          // which may be a lower bound): re-key this one in place (the same entries as popping
          // and pushing it, so the same order leaving the heap: keys are distinct).
          // A piece of several sources that all hold it goes to their groups instead, with the
          // new key as its floor (JoinGroups()), and so do the move's later pieces.
          if (multi_src_[m]) {
            hot_[m] = 1;
            if (AllSourcesHold(m, cur_[m])) {
              HeapPop();
              JoinGroups(m, cur_[m], now.finish);
              continue;
            }
          }
          ReplaceTop(now);
          continue;
        }
        HeapPop();
      }
      Commit(m, cur_[m], choice);
      if (trace) trace->push_back(Step{m, choice.source, choice.route});
      ++commits_;
      committed_ = commits_ - commits_before;
      grp_piece_[m] = kNone;  // out of every group it waited in
      refreshed_.resize(groups_.size(), 0);
      RefreshLinks(SourceRoutes(m, dag_.src_start[m] + choice.source)[choice.route]);
      // Its other groups keep their entry, now a lower bound, until it comes to the top.
      if (top.group != kNone && refreshed_[top.group] != commits_) RefreshGroup(top.group);
      if (shared_give_up != nullptr) {
        // Relaxed: the value only moves down and any value read is a valid time to give up at.
        const double g = shared_give_up->load(std::memory_order_relaxed);
        if (g < give_up_at) {
          give_up_at = g;
          hopeless = g * (1 + kBoundSlack);
          if (lower_bound_ >= hopeless) return std::nullopt;
        }
      }
      if (makespan_ >= give_up_at) return std::nullopt;
      const uint32_t p = cur_[m]++;
      // What still has to follow this piece (0 unless LowerBound() ran).
      if (fin_end_[Idx(m, p)] + tail_[m] >= hopeless) return std::nullopt;
      if (check_links && LinksHopeless(m, pieces_ - 1 - p, hopeless)) return std::nullopt;
      for (uint32_t i = dag_.succ_start[m]; i < dag_.succ_start[m + 1]; ++i) {
        const uint32_t s = dag_.succs[i];
        if (cur_[s] == p && --pending_[s] == 0) HEDDLE_RETURN_IF_ERROR(Push(s));
      }
      if (cur_[m] < pieces_) {
        uint32_t waiting = 0;
        for (uint32_t i = dag_.pred_start[m]; i < dag_.pred_start[m + 1]; ++i) {
          if (cur_[dag_.preds[i]] <= cur_[m]) ++waiting;
        }
        pending_[m] = waiting;
        if (waiting == 0) HEDDLE_RETURN_IF_ERROR(Push(m));
      }
    }
    for (uint32_t m = 0; m < m_count; ++m) {
      if (cur_[m] != pieces_) {
        return absl::InternalError(absl::StrFormat(
            "intent %s: move %u never became ready (dependency cycle)", intent_.name, m));
      }
    }
    outcome_ = PieceCandidate::Outcome::kScheduled;
    return Result();
  }

  // The schedule of a Run() of the same inputs that recorded `trace`, made by committing its
  // steps in order: the same ops without searching again.
  Schedule Emit(const std::vector<Step>& trace) {
    Reset();
    // Every segment of a committed route is a send on its first rank and a receive on its last:
    // each rank's list gets the room for all its ops before they are built.
    std::vector<uint32_t> count(intent_.collective.ranks, 0);
    for (const Step& step : trace) {
      for (uint32_t sid :
           SourceRoutes(step.move, dag_.src_start[step.move] + step.source)[step.route]) {
        ++count[net_.segment(sid).from];
        ++count[net_.segment(sid).to];
      }
    }
    for (uint32_t r = 0; r < count.size(); ++r) ops_[r].reserve(count[r]);
    for (const Step& step : trace) {
      Commit(step.move, cur_[step.move]++, Choice{0, step.source, step.route});
    }
    return Result();
  }

  // Of the last Run(): the lower bound it computed (0 if none), how it ended and how many
  // pieces it committed.
  double lower_bound() const { return lower_bound_; }
  PieceCandidate::Outcome outcome() const { return outcome_; }
  uint64_t committed() const { return committed_; }

 private:
  // Everything Run() and Emit() start from.
  void Reset() {
    const uint32_t m_count = static_cast<uint32_t>(intent_.moves.size());
    const uint32_t n = intent_.collective.ranks;
    const size_t mp = size_t{m_count} * pieces_;
    src_routes_.assign(dag_.sources.size(), nullptr);
    tail_.assign(m_count, 0);
    dyn_start_.assign(m_count + 1, 0);
    dyn_jobs_.clear();
    // The per-piece tables are only read for pieces this run has committed (a piece is ready,
    // priced or committed only once every move it reads from or waits for has committed it), so
    // what a table held before (an earlier candidate's, with the same PieceTables) is never seen
    // and need not be cleared: resize() keeps it and costs nothing once the tables are as large.
    fin_end_.resize(mp);
    rd_rank_.resize(mp);
    rd_end_.resize(mp);
    cur_.assign(m_count, 0);
    dst_ready_.assign(m_count, 0);
    pending_.assign(m_count, 0);
    link_free_.assign(net_.link_count(), 0);
    makespan_ = 0;
    if (options_.debug != nullptr && options_.debug->reverse_route_order) {
      for (uint32_t m = m_count; m-- > 0;) {
        for (uint32_t si = dag_.src_start[m + 1]; si-- > dag_.src_start[m];) SourceRoutes(m, si);
      }
    }
    if (emit_) {
      // The ops' indexes: only the emission reads them (DstReady() with deps, Commit()).
      fin_op_.resize(mp);
      rd_op_.resize(mp);
      scratch_.assign(size_t{n} * pieces_, {});
      ops_.assign(n, {});
    }
  }

  Schedule Result() {
    const uint32_t n = intent_.collective.ranks;
    Schedule s;
    // Every op ends by the latest receive, so this is the latest op end.
    s.predicted_s = makespan_;
    if (!emit_) return s;
    s.collective = intent_.collective;
    s.pieces = pieces_;
    s.intent = intent_.name;
    s.ranks.assign(t_.nodes.begin(), t_.nodes.begin() + t_.ranks);
    s.topology_digest = TopologyDigest(t_);
    s.slot_bytes = options_.slot_bytes;
    s.per_rank.resize(n);
    for (uint32_t r = 0; r < n; ++r) {
      s.per_rank[r].ops = std::move(ops_[r]);
      uint64_t used = 0;
      for (uint32_t p = 0; p < pieces_; ++p)
        used = std::max<uint64_t>(used, scratch_[r * pieces_ + p].size());
      s.per_rank[r].scratch_slots = used;
    }
    return s;
  }

  // A lower bound on the makespan Run() reaches with this piece count, from the move DAG and
  // the routes alone (docs/optiflow-compiler.md §4, "Pieces"). Every piece of move m finishes
  // no earlier than head(m) and is followed by at least tail(m) of work before the makespan:
  //   head(m) = max(min over m's sources s and their routes of head(writer of s) + the route's
  //                 cost (Σ busy + latency of its segments: its arrival if no link waits),
  //                 head(q) for each earlier writer q of m's destination slot)
  //   tail(m) = max over m's successors s of tail(s) + the cheapest route of s, when every
  //             source of s is m's destination (so s's pieces wait for m's), or tail(s) alone
  //             when s writes the slot m wrote (it finishes after m).
  // A link that every option of a move crosses carries all P pieces of it one after another;
  // for each such link, with jobs j (the pieces of one move: released at r_j, busy p_j, then
  // at least q_j = the rest of the route + tail until the makespan), any subset S of its jobs
  // gives min_S r + Σ_S p + min_S q. Subsets by falling q and by rising r are tried.
  // The bound is also what Run() adds to a committed piece's finish (tail_) to abandon a
  // candidate that can no longer win. 0 when some move has no route (Run() reports that).
  double LowerBound() {
    const uint32_t m_count = static_cast<uint32_t>(intent_.moves.size());
    auto route_cost = [&](IdSpan route) {
      double c = 0;
      for (uint32_t sid : route) c += net_.segment(sid).Cost();
      return c;
    };
    std::vector<double> src_cost(dag_.sources.size(), kInf);
    for (uint32_t m = 0; m < m_count; ++m) {
      for (uint32_t si = dag_.src_start[m]; si < dag_.src_start[m + 1]; ++si) {
        for (const auto& route : SourceRoutes(m, si)) {
          src_cost[si] = std::min(src_cost[si], route_cost(route));
        }
      }
    }
    std::vector<double>& head = lb_head_;
    head.assign(m_count, 0);
    for (uint32_t m = 0; m < m_count; ++m) {
      const Move& mv = intent_.moves[m];
      double h = kInf;
      for (uint32_t si = dag_.src_start[m]; si < dag_.src_start[m + 1]; ++si) {
        const uint32_t w = dag_.sources[si].writer;
        h = std::min(h, (w == kNone ? 0 : head[w]) + src_cost[si]);
      }
      if (h == kInf) return 0;
      for (uint32_t i = dag_.pred_start[m]; i < dag_.pred_start[m + 1]; ++i) {
        const Move& q = intent_.moves[dag_.preds[i]];
        if (q.dst == mv.dst && q.slot == mv.slot) h = std::max(h, head[dag_.preds[i]]);
      }
      head[m] = h;
    }
    double bound = 0;
    for (uint32_t m = m_count; m-- > 0;) {
      const Move& mv = intent_.moves[m];
      double t = 0;
      for (uint32_t i = dag_.succ_start[m]; i < dag_.succ_start[m + 1]; ++i) {
        const uint32_t s = dag_.succs[i];
        const Move& sm = intent_.moves[s];
        double gap = -1;
        bool only_m = true;
        double c = kInf;
        for (uint32_t si = dag_.src_start[s]; si < dag_.src_start[s + 1]; ++si) {
          if (dag_.sources[si].writer != m) {
            only_m = false;
            break;
          }
          c = std::min(c, src_cost[si]);
        }
        if (only_m) gap = c;
        if (sm.dst == mv.dst && sm.slot == mv.slot) gap = std::max(gap, 0.0);
        if (gap >= 0) t = std::max(t, gap + tail_[s]);
      }
      tail_[m] = t;
      bound = std::max(bound, head[m] + t);
    }
    // Links every option of a move crosses: (link, release, busy of all pieces, tail).
    struct Job {
      uint32_t link;
      double r, p, q;
    };
    std::vector<Job> jobs;
    dyn_start_.assign(m_count + 1, 0);
    dyn_left_.assign(net_.link_count(), 0);
    dyn_busy_.assign(net_.link_count(), kInf);
    dyn_tail_.assign(net_.link_count(), kInf);
    for (uint32_t m = 0; m < m_count; ++m) {
      dyn_start_[m + 1] = static_cast<uint32_t>(dyn_jobs_.size());
      const uint32_t s0 = dag_.src_start[m];
      const auto& first = SourceRoutes(m, s0);
      if (first.empty()) continue;
      for (uint32_t sid0 : first[0]) {
        for (uint32_t link : net_.segment(sid0).links) {
          Job job{link, kInf, kInf, kInf};
          bool forced = true;
          for (uint32_t si = s0; forced && si < dag_.src_start[m + 1]; ++si) {
            const uint32_t w = dag_.sources[si].writer;
            const double ready = w == kNone ? 0 : head[w];
            for (const auto& route : SourceRoutes(m, si)) {
              double before = 0;
              bool crosses = false;
              for (size_t h = 0; h < route.size() && !crosses; ++h) {
                const Segment& seg = net_.segment(route[h]);
                if (std::find(seg.links.begin(), seg.links.end(), link) != seg.links.end()) {
                  crosses = true;
                  double after = seg.latency;
                  for (size_t k = h + 1; k < route.size(); ++k) {
                    after += net_.segment(route[k]).Cost();
                  }
                  job.r = std::min(job.r, ready + before);
                  job.p = std::min(job.p, seg.busy);
                  job.q = std::min(job.q, after);
                }
                before += seg.Cost();
              }
              if (!crosses) {
                forced = false;
                break;
              }
            }
          }
          if (!forced) continue;
          job.q += tail_[m];
          // For Run()'s check while scheduling; a link a route crosses twice counts once.
          bool seen = false;
          for (size_t k = dyn_start_[m]; k < dyn_jobs_.size(); ++k) {
            seen = seen || dyn_jobs_[k].link == link;
          }
          if (!seen) {
            dyn_jobs_.push_back(DynJob{link, job.p, job.q});
            dyn_left_[link] += pieces_;
            dyn_busy_[link] = std::min(dyn_busy_[link], job.p);
            dyn_tail_[link] = std::min(dyn_tail_[link], job.q);
          }
          job.p *= pieces_;
          jobs.push_back(job);
        }
      }
      dyn_start_[m + 1] = static_cast<uint32_t>(dyn_jobs_.size());
    }
    std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
      return a.link < b.link || (a.link == b.link && a.q > b.q);
    });
    for (size_t i = 0; i < jobs.size();) {
      double r = kInf, sum = 0;
      size_t j = i;
      for (; j < jobs.size() && jobs[j].link == jobs[i].link; ++j) {
        r = std::min(r, jobs[j].r);
        sum += jobs[j].p;
        bound = std::max(bound, r + sum + jobs[j].q);
      }
      i = j;
    }
    std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
      return a.link < b.link || (a.link == b.link && a.r > b.r);
    });
    for (size_t i = 0; i < jobs.size();) {
      double q = kInf, sum = 0;
      size_t j = i;
      for (; j < jobs.size() && jobs[j].link == jobs[i].link; ++j) {
        q = std::min(q, jobs[j].q);
        sum += jobs[j].p;
        bound = std::max(bound, jobs[j].r + sum + q);
      }
      i = j;
    }
    return bound;
  }

  struct Entry {
    double finish;
    uint32_t move;
    uint32_t group = kNone;  // a link group's entry (its current minimum), or kNone
    // Min-heap order: earliest finish, then lowest move index.
    bool operator<(const Entry& o) const {
      return finish < o.finish || (finish == o.finish && move < o.move);
    }
  };
  struct Choice {
    double finish = kInf;
    uint32_t source = 0;  // index into the move's sources
    uint32_t route = 0;   // index into Routes(source rank, dst)
  };
  struct ScratchSlot {
    uint32_t reader_op = kNone;  // the send that last read it
    double free_at = 0;          // that send's end
  };

  absl::Status Push(uint32_t m) {
    // Fixed while the piece waits: every predecessor has committed it.
    dst_ready_[m] = DstReady(m, cur_[m], nullptr);
    if (const uint32_t sid = single_seg_[m]; sid != kNone) {
      // Its one option's finish is max(Arrival(max(ready, F)), dst_ready) where F is when the
      // segment's links are free; Arrival is monotone, so that is max(Arrival(F), u) with u
      // fixed from now on.
      const Segment& seg = net_.segment(sid);
      const uint32_t p = cur_[m];
      const Source& src = dag_.sources[dag_.src_start[m]];
      const double ready = src.writer == kNone ? 0 : fin_end_[Idx(src.writer, p)];
      const double u = std::max(Arrival(seg, ready), dst_ready_[m]);
      grp_piece_[m] = p;
      GroupInsert(SourceGroup(dag_.src_start[m], sid), Member{u, m, p});
      return absl::OkStatus();
    }
    if (multi_src_[m] && hot_[m] && AllSourcesHold(m, cur_[m])) {
      JoinGroups(m, cur_[m], -kInf);
      return absl::OkStatus();
    }
    const Choice c = Evaluate(m, cur_[m]);
    if (c.finish == kInf) return NoPath(m);
    HeapPush(Entry{c.finish, m});
    return absl::OkStatus();
  }

  size_t Idx(uint32_t m, uint32_t p) const { return size_t{m} * pieces_ + p; }

  // When (dst, slot) may be written by move m's piece p: after its last writer and after every
  // move that read it since (only those that actually read it at dst).
  double DstReady(uint32_t m, uint32_t p, std::vector<uint32_t>* deps) const {
    const Move& mv = intent_.moves[m];
    double ready = 0;
    for (uint32_t i = dag_.pred_start[m]; i < dag_.pred_start[m + 1]; ++i) {
      const uint32_t q = dag_.preds[i];
      const Move& qm = intent_.moves[q];
      if (qm.slot != mv.slot) continue;
      const size_t qi = Idx(q, p);
      if (qm.dst == mv.dst) {
        ready = std::max(ready, fin_end_[qi]);
        if (deps) deps->push_back(fin_op_[qi]);
      }
      if (rd_rank_[qi] == mv.dst) {
        ready = std::max(ready, rd_end_[qi]);
        if (deps) deps->push_back(rd_op_[qi]);
      }
    }
    return ready;
  }

  // The routes from move m's source si (an index into dag_.sources) to its destination.
  [[gnu::always_inline]] RouteList SourceRoutes(uint32_t m, uint32_t si) {
    const uint32_t* r = src_routes_[si];
    if (r == nullptr) r = BuildSourceRoutes(m, si);
    return RouteList(r);
  }
  [[gnu::noinline]] const uint32_t* BuildSourceRoutes(uint32_t m, uint32_t si) {
    src_routes_[si] =
        net_.Routes(dag_.sources[si].rank, intent_.moves[m].dst, options_.multi_hop).data();
    return src_routes_[si];
  }

  // The best option for piece p of move m; finish kInf when no source has a route (Push()
  // reports that as NoPath() before the piece enters the heap; later evaluations only see the
  // same or more sources).
  Choice Evaluate(uint32_t m, uint32_t p) {
    const double dst_ready = dst_ready_[m];  // DstReady(m, p), cached by Push()
    Choice best;
    const uint32_t first = dag_.src_start[m], end = dag_.src_start[m + 1];
    for (uint32_t si = first; si < end; ++si) {
      const FastSource& f = src_fast_[si];
      if (f.link != kNone) {
        if (f.writer != kNone && cur_[f.writer] <= p) continue;  // not there yet
        const double ready = f.writer == kNone ? 0 : fin_end_[Idx(f.writer, p)];
        // Arrival(), with the segment's fields at hand.
        const double at = std::max(ready, link_free_[f.link]) + f.busy + f.latency;
        const double finish = std::max(at, dst_ready);
        if (finish < best.finish) best = Choice{finish, si - first, 0};
        continue;
      }
      const Source& src = dag_.sources[si];
      if (src.writer != kNone && cur_[src.writer] <= p) continue;  // not there yet
      const double ready = src.writer == kNone ? 0 : fin_end_[Idx(src.writer, p)];
      const auto& routes = SourceRoutes(m, si);
      for (uint32_t ri = 0; ri < routes.size(); ++ri) {
        double at = ready;
        for (uint32_t sid : routes[ri]) {
          const Segment& seg = net_.segment(sid);
          double start = at;
          for (uint32_t li : seg.links) start = std::max(start, link_free_[li]);
          at = Arrival(seg, start);
        }
        const double finish = std::max(at, dst_ready);
        if (finish < best.finish) best = Choice{finish, si - first, ri};
      }
    }
    return best;
  }

  // After a piece of move m commits, with `left` pieces of m still to come: whether the links
  // every option of m crosses can no longer get their remaining pieces through in time. A
  // link's free time only grows, and the pieces still to cross it go one after another from
  // then on, so the last of them ends no earlier than free + their busy times, and what follows
  // it (at least the least q of the link's jobs, or m's own q for m's last piece) comes after.
  // O(1) per forced link of m: only m's links changed their count.
  bool LinksHopeless(uint32_t m, uint32_t left, double hopeless) {
    for (uint32_t k = dyn_start_[m]; k < dyn_start_[m + 1]; ++k) {
      const DynJob& j = dyn_jobs_[k];
      const uint64_t n = --dyn_left_[j.link];
      if (n == 0) continue;
      const double free = link_free_[j.link];
      if (free + static_cast<double>(n) * dyn_busy_[j.link] + dyn_tail_[j.link] >= hopeless) {
        return true;
      }
      if (left != 0 && free + left * j.busy + j.q >= hopeless) return true;
    }
    return false;
  }

  absl::Status NoPath(uint32_t m) const {
    const Move& mv = intent_.moves[m];
    const Source& src = dag_.sources[dag_.src_start[m]];
    return absl::InvalidArgumentError(absl::StrFormat(
        "topology: no path from '%s' to '%s'%s", t_.nodes[src.rank], t_.nodes[mv.dst],
        options_.multi_hop ? "" : " without relaying over ranks; allow multi_hop"));
  }

  // A new op at the end of rank's list, built in place (its index is the list's size before).
  Op& AppendOp(uint32_t rank) { return ops_[rank].emplace_back(); }

  void Commit(uint32_t m, uint32_t p, const Choice& choice) {
    const Move& mv = intent_.moves[m];
    const Source& src = dag_.sources[dag_.src_start[m] + choice.source];
    const IdSpan route = SourceRoutes(m, dag_.src_start[m] + choice.source)[choice.route];
    const size_t mi = Idx(m, p);
    double at = src.writer == kNone ? 0 : fin_end_[Idx(src.writer, p)];
    if (!emit_) {
      // Commit()'s times below, without the ops.
      for (size_t h = 0; h < route.size(); ++h) {
        const Segment& seg = net_.segment(route[h]);
        double start = at;
        for (uint32_t li : seg.links) start = std::max(start, link_free_[li]);
        const double arrival = Arrival(seg, start);
        for (uint32_t li : seg.links) link_free_[li] = start + seg.busy;
        if (h == 0) {
          rd_rank_[mi] = seg.from;
          rd_end_[mi] = start + seg.busy;
        }
        if (seg.to == mv.dst) {
          fin_end_[mi] = std::max(arrival, dst_ready_[m]);  // DstReady(m, p), cached by Push()
          makespan_ = std::max(makespan_, fin_end_[mi]);
        } else {
          makespan_ = std::max(makespan_, arrival);
          at = arrival;
        }
      }
      return;
    }
    uint32_t dep = src.writer == kNone ? kNone : fin_op_[Idx(src.writer, p)];
    BufRef from{BufRef::Buffer::kData, mv.slot};
    ScratchSlot* reading = nullptr;  // the scratch slot the next send reads, if any
    for (size_t h = 0; h < route.size(); ++h) {
      const Segment& seg = net_.segment(route[h]);
      double start = at;
      for (uint32_t li : seg.links) start = std::max(start, link_free_[li]);
      const double arrival = Arrival(seg, start);
      for (uint32_t li : seg.links) link_free_[li] = start + seg.busy;
      // The ops are built in place, their deps with exactly the room they need (one allocation
      // each, the emission's main cost): a send or a receive into scratch has at most one.
      const uint32_t send_op = static_cast<uint32_t>(ops_[seg.from].size());
      Op& send = AppendOp(seg.from);
      send.kind = OpKind::kSend;
      send.peer = seg.to;
      send.chunk = mv.slot;
      send.piece = p;
      send.src = from;
      if (dep != kNone) send.deps.assign(1, dep);
      send.start_s = start;
      send.end_s = start + seg.busy;
      if (h == 0) {
        rd_rank_[mi] = seg.from;
        rd_op_[mi] = send_op;
        rd_end_[mi] = start + seg.busy;
      }
      if (reading) {
        reading->reader_op = send_op;
        reading->free_at = start + seg.busy;
        reading = nullptr;
      }
      // seg.to ≠ seg.from: another rank's list, `send` is not moved by this.
      const uint32_t recv_op = static_cast<uint32_t>(ops_[seg.to].size());
      Op& recv = AppendOp(seg.to);
      recv.peer = seg.from;
      recv.chunk = mv.slot;
      recv.piece = p;
      recv.start_s = start;
      if (seg.to == mv.dst) {
        recv.kind = mv.kind == MoveKind::kCopy ? OpKind::kRecv : OpKind::kRecvReduce;
        recv.dst = BufRef{BufRef::Buffer::kData, mv.slot};
        deps_.clear();
        const double ready = DstReady(m, p, &deps_);
        std::sort(deps_.begin(), deps_.end());
        recv.deps.assign(deps_.begin(), std::unique(deps_.begin(), deps_.end()));
        // The replay's times: a receive starts with its send or once its deps have ended.
        recv.start_s = std::max(start, ready);
        recv.end_s = std::max(arrival, ready);
        fin_end_[mi] = recv.end_s;
        makespan_ = std::max(makespan_, recv.end_s);
        fin_op_[mi] = recv_op;
      } else {
        // Store and forward through the lowest-numbered scratch slot free by the arrival.
        std::vector<ScratchSlot>& pool = scratch_[size_t{seg.to} * pieces_ + p];
        uint32_t k = 0;
        while (k < pool.size() && pool[k].free_at > arrival) ++k;
        if (k == pool.size()) pool.push_back(ScratchSlot{});
        recv.kind = OpKind::kRecv;
        recv.dst = BufRef{BufRef::Buffer::kScratch, k};
        if (pool[k].reader_op != kNone) {
          recv.deps.assign(1, pool[k].reader_op);
          recv.start_s = std::max(start, pool[k].free_at);
        }
        recv.end_s = arrival;
        makespan_ = std::max(makespan_, arrival);
        dep = recv_op;
        from = BufRef{BufRef::Buffer::kScratch, k};
        reading = &pool[k];
        at = arrival;
      }
    }
  }

  const Intent& intent_;
  const Topology& t_;
  const Dag& dag_;
  const uint32_t pieces_;
  const CompileOptions& options_;
  const bool emit_;
  Network net_;
  PieceTables* const tables_;  // the caller's, whose vectors the ones below hold meanwhile
  void SwapTables() {
    fin_op_.swap(tables_->fin_op);
    rd_rank_.swap(tables_->rd_rank);
    rd_op_.swap(tables_->rd_op);
    fin_end_.swap(tables_->fin_end);
    rd_end_.swap(tables_->rd_end);
  }
  std::vector<uint32_t> fin_op_, rd_rank_, rd_op_;  // per (move, piece), see Idx()
  std::vector<double> fin_end_, rd_end_;
  std::vector<uint32_t> cur_, pending_;
  std::vector<double> dst_ready_;  // per move: DstReady() of its waiting piece
  std::vector<double> tail_;       // per move: LowerBound()'s tail(m), or 0
  std::vector<double> lb_head_;
  // LowerBound()'s links that every option of a move crosses, for the check while scheduling
  // (LinksHopeless): per move, dyn_jobs_[dyn_start_[m] .. dyn_start_[m + 1]); per link, the
  // pieces of such moves still to commit, the least busy time of one, and the least of what
  // follows one (rest of its route + tail).
  struct DynJob {
    uint32_t link;
    double busy, q;  // one piece's least busy time on the link, least time after it
  };
  std::vector<uint32_t> dyn_start_;
  std::vector<DynJob> dyn_jobs_;
  std::vector<uint64_t> dyn_left_;
  std::vector<double> dyn_busy_, dyn_tail_;
  std::vector<double> link_free_;
  double makespan_ = 0;     // the latest end of a committed op
  double lower_bound_ = 0;  // LowerBound() of the last Run(), or 0
  uint64_t committed_ = 0;  // pieces the last Run() committed
  PieceCandidate::Outcome outcome_ = PieceCandidate::Outcome::kScheduled;
  std::vector<std::vector<ScratchSlot>> scratch_;  // per (rank, piece)
  std::vector<const uint32_t*> src_routes_;        // per dag_.sources: its RouteList, or nullptr
  // Per dag_.sources: a source whose only route is one link, all Evaluate() reads of it.
  struct FastSource {
    uint32_t writer = kNone;
    uint32_t link = kNone;  // kNone: not such a source
    double busy = 0, latency = 0;
  };
  std::vector<FastSource> src_fast_;
  std::vector<std::vector<Op>> ops_;
  std::vector<uint32_t> deps_;  // Commit()'s scratch: a receive's deps before sorting

  // ---- The ready pieces ----
  // A binary min-heap by (finish, move). A group's entry stays in place and is re-keyed when
  // the group changes (group_pos_), so no stale entries pile up. Live entries have distinct
  // moves, so the order they leave in is the same with any correct heap.
  std::vector<Entry> heap_;
  std::vector<uint32_t> group_pos_;  // per group: its entry's index in heap_, or kNone
  void HeapPlace(size_t i, const Entry& e) {
    heap_[i] = e;
    if (e.group != kNone) group_pos_[e.group] = static_cast<uint32_t>(i);
  }
  void SiftUp(size_t i) {
    const Entry e = heap_[i];
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (!(e < heap_[parent])) break;
      HeapPlace(i, heap_[parent]);
      i = parent;
    }
    HeapPlace(i, e);
  }
  void SiftDown(size_t i) {
    const Entry e = heap_[i];
    const size_t n = heap_.size();
    for (;;) {
      size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && heap_[c + 1] < heap_[c]) ++c;
      if (!(heap_[c] < e)) break;
      HeapPlace(i, heap_[c]);
      i = c;
    }
    HeapPlace(i, e);
  }
  // Entry i changed its key (or was replaced): restores the heap order.
  void Resift(size_t i) {
    if (i > 0 && heap_[i] < heap_[(i - 1) / 2]) {
      SiftUp(i);
    } else {
      SiftDown(i);
    }
  }
  void HeapPush(const Entry& e) {
    heap_.push_back(e);
    SiftUp(heap_.size() - 1);
  }
  Entry HeapPop() {
    const Entry top = heap_[0];
    if (top.group != kNone) group_pos_[top.group] = kNone;
    const Entry last = heap_.back();
    heap_.pop_back();
    // `last` (usually late) takes the root's place as ReplaceTop() places it: about half the
    // comparisons of sifting it down from the root.
    if (!heap_.empty()) ReplaceTop(last);
    return top;
  }
  // The root (not a group's entry) becomes `e`, no earlier than it was: as HeapPop() and
  // HeapPush(e), the hole goes down the smaller children to a leaf, where `e` goes in and rises.
  // A re-keyed piece usually lands deep, so this costs about half the comparisons of sifting
  // it down from the root.
  void ReplaceTop(const Entry& e) {
    size_t i = 0;
    const size_t n = heap_.size();
    for (size_t c = 1; c < n; c = 2 * i + 1) {
      if (c + 1 < n && heap_[c + 1] < heap_[c]) ++c;
      HeapPlace(i, heap_[c]);
      i = c;
    }
    HeapPlace(i, e);
    SiftUp(i);
  }
  // Group gi's entry becomes `e` (none: leaves the heap).
  void HeapSetGroup(uint32_t gi, const std::optional<Entry>& e) {
    const uint32_t pos = group_pos_[gi];
    if (e) {
      if (pos == kNone) {
        HeapPush(*e);
      } else {
        HeapPlace(pos, *e);
        Resift(pos);
      }
      return;
    }
    if (pos == kNone) return;
    group_pos_[gi] = kNone;
    const Entry last = heap_.back();
    heap_.pop_back();
    if (pos < heap_.size()) {
      HeapPlace(pos, last);
      Resift(pos);
    }
  }

  // ---- Link groups ----
  // A move whose only option is one segment (one source, one route of one segment: typical for
  // reduces on a mesh) has, for piece p, the finish max(A, u): A = Arrival(when the segment's
  // links are free) is the same for every piece waiting on that segment, u its own fixed part.
  // Such pieces are kept per segment instead of in the heap: those with u ≤ A all finish at A
  // (lowest move first), the others at u. The heap holds one entry per group: its minimum,
  // re-keyed whenever a link of the segment changes or a member joins below it, or a lower bound
  // of it once its member left through another group (refreshed when it reaches the top). The
  // lazy re-evaluation
  // of k such pieces after each of the k commits on their link cost O(k²) evaluations; this costs
  // O(log k) per commit. The choices are the same: every other heap key is a lower bound of its
  // piece's finish or is re-evaluated when popped, so the piece committed next is the same
  // (compiler_golden_test).
  //
  // A move with several sources, each one segment, has for piece p the finish min over its
  // sources of max(A, u) — so once every source holds the piece and one of the move's pieces
  // was re-keyed in the heap (hot_), it waits in the group of every source's segment, and the
  // least of their entries is its finish; until then it stays in the heap. A piece that reaches a
  // group through another one is dropped there lazily (grp_piece_ says which piece of a move
  // is waiting; members of other pieces are skipped when they come to the front).
  struct Member {
    double u;
    uint32_t move, piece;
    bool operator>(const Member& o) const {
      return u > o.u || (u == o.u && (move > o.move || (move == o.move && piece > o.piece)));
    }
  };
  struct Group {
    std::vector<Member> future;                            // u > A, min-heap
    std::vector<std::pair<uint32_t, uint32_t>> saturated;  // (move, piece) with u ≤ A, min-heap
    // The piece of the heap entry's move. The entry is at most the least waiting member, and is
    // that member unless its piece left through another group (then it is refreshed when it
    // comes to the top of the heap).
    uint32_t entry_piece = kNone;
  };
  bool Waiting(uint32_t move, uint32_t piece) const { return grp_piece_[move] == piece; }
  uint32_t GroupOf(uint32_t sid) {
    if (sid >= group_of_seg_.size()) group_of_seg_.resize(sid + 1, kNone);
    uint32_t& gi = group_of_seg_[sid];
    if (gi == kNone) {
      gi = static_cast<uint32_t>(groups_.size());
      groups_.emplace_back();
      group_pos_.push_back(kNone);
      group_seg_.push_back(sid);
      for (uint32_t li : net_.segment(sid).links) link_groups_[li].push_back(gi);
    }
    return gi;
  }
  // The group of source si's segment sid.
  uint32_t SourceGroup(uint32_t si, uint32_t sid) {
    uint32_t& gi = src_group_[si];
    if (gi == kNone) gi = GroupOf(sid);
    return gi;
  }
  // Recomputes group gi's minimum and pushes it as the group's current entry.
  void RefreshGroup(uint32_t gi) {
    Group& g = groups_[gi];
    const Segment& seg = net_.segment(group_seg_[gi]);
    double free = 0;
    for (uint32_t li : seg.links) free = std::max(free, link_free_[li]);
    const double a = Arrival(seg, free);
    while (!g.future.empty() && g.future.front().u <= a) {
      g.saturated.emplace_back(g.future.front().move, g.future.front().piece);
      std::push_heap(g.saturated.begin(), g.saturated.end(), std::greater<>());
      std::pop_heap(g.future.begin(), g.future.end(), std::greater<>());
      g.future.pop_back();
    }
    DropLeftMembers(g);
    std::optional<Entry> best;
    if (!g.saturated.empty()) {
      best = Entry{a, g.saturated.front().first, gi};
      g.entry_piece = g.saturated.front().second;
    }
    if (!g.future.empty()) {
      const Entry f{g.future.front().u, g.future.front().move, gi};
      if (!best || f < *best) {
        best = f;
        g.entry_piece = g.future.front().piece;
      }
    }
    HeapSetGroup(gi, best);
  }
  // Adds a member to group gi. The group's entry is at most the least of its waiting members
  // (every change of its links refreshes it; a member that left through another group leaves
  // it a lower bound until it reaches the top), so the new member only has to be compared with
  // it.
  void GroupInsert(uint32_t gi, const Member& x) {
    Group& g = groups_[gi];
    const Segment& seg = net_.segment(group_seg_[gi]);
    double free = 0;
    for (uint32_t li : seg.links) free = std::max(free, link_free_[li]);
    const double a = Arrival(seg, free);
    Entry e{x.u, x.move, gi};
    if (x.u <= a) {
      g.saturated.emplace_back(x.move, x.piece);
      std::push_heap(g.saturated.begin(), g.saturated.end(), std::greater<>());
      e.finish = a;
    } else {
      g.future.push_back(x);
      std::push_heap(g.future.begin(), g.future.end(), std::greater<>());
    }
    const uint32_t pos = group_pos_[gi];
    if (pos == kNone) {
      g.entry_piece = x.piece;
      HeapPush(e);
    } else if (e < heap_[pos]) {
      g.entry_piece = x.piece;
      HeapPlace(pos, e);
      SiftUp(pos);
    }
  }
  // Pops the members at the front of group g that are no longer their move's waiting piece (they
  // left through another of their groups).
  [[gnu::always_inline]] void DropLeftMembers(Group& g) {
    while (!g.saturated.empty() &&
           !Waiting(g.saturated.front().first, g.saturated.front().second)) {
      std::pop_heap(g.saturated.begin(), g.saturated.end(), std::greater<>());
      g.saturated.pop_back();
    }
    while (!g.future.empty() && !Waiting(g.future.front().move, g.future.front().piece)) {
      std::pop_heap(g.future.begin(), g.future.end(), std::greater<>());
      g.future.pop_back();
    }
  }
  // Takes piece p of move m, a group's current minimum, out of the group.
  void TakeFromGroup(uint32_t gi, uint32_t m, uint32_t p) {
    Group& g = groups_[gi];
    // Members that left through another group may be ahead of it.
    DropLeftMembers(g);
    if (!g.saturated.empty() && g.saturated.front() == std::make_pair(m, p)) {
      std::pop_heap(g.saturated.begin(), g.saturated.end(), std::greater<>());
      g.saturated.pop_back();
    } else {
      std::pop_heap(g.future.begin(), g.future.end(), std::greater<>());
      g.future.pop_back();
    }
  }
  // After a commit over `route`: every group of a segment sharing one of its links.
  void RefreshLinks(IdSpan route) {
    for (uint32_t sid : route) {
      for (uint32_t li : net_.segment(sid).links) {
        for (uint32_t gi : link_groups_[li]) {
          if (refreshed_[gi] != commits_) {
            refreshed_[gi] = commits_;
            RefreshGroup(gi);
          }
        }
      }
    }
  }

  // Whether every source of move m holds piece p (its writer has committed it).
  bool AllSourcesHold(uint32_t m, uint32_t p) const {
    for (uint32_t si = dag_.src_start[m]; si < dag_.src_start[m + 1]; ++si) {
      const uint32_t w = dag_.sources[si].writer;
      if (w != kNone && cur_[w] <= p) return false;
    }
    return true;
  }
  // Piece p of move m (multi_src_) waits in the group of each source's segment, with u =
  // max(its arrival from when the source holds it, dst_ready, floor). Exact, as the heap's
  // choices go: with every source holding the piece its finish only grows with the links' free
  // times, and a piece that waited in the heap keeps its key there as the floor (the heap took
  // the least of max(finish, key) over its entries: a key above the finish — a source that got
  // the piece after it was computed — held the piece back until the key's turn came).
  void JoinGroups(uint32_t m, uint32_t p, double floor) {
    grp_piece_[m] = p;
    for (uint32_t si = dag_.src_start[m]; si < dag_.src_start[m + 1]; ++si) {
      const Segment& seg = net_.segment(src_seg_[si]);
      const uint32_t w = dag_.sources[si].writer;
      const double ready = w == kNone ? 0 : fin_end_[Idx(w, p)];
      const double u = std::max(std::max(Arrival(seg, ready), dst_ready_[m]), floor);
      GroupInsert(SourceGroup(si, src_seg_[si]), Member{u, m, p});
    }
  }

  std::vector<uint32_t> single_seg_;  // per move: its only segment, or kNone
  std::vector<uint8_t> multi_src_;    // per move: several sources, each one segment
  // Per such move: one of its pieces was re-keyed in the heap (another entry, maybe a group's
  // lower bound, came before it). Where re-pricing is rare the heap
  // costs less than joining up to five groups (hierarchical all-reduce's all-gather phase), so
  // a move's pieces wait in groups only from then on (either way is exact).
  std::vector<uint8_t> hot_;
  std::vector<uint32_t> src_seg_;    // per dag_.sources of such a move: its segment
  std::vector<uint32_t> src_group_;  // per dag_.sources of a grouped move: its group
  std::vector<uint32_t> grp_piece_;  // per move: its piece waiting in groups, or kNone
  std::vector<Group> groups_;
  std::vector<uint32_t> group_seg_, refreshed_;
  std::vector<uint32_t> group_of_seg_;              // segment → group, or kNone
  std::vector<std::vector<uint32_t>> link_groups_;  // link → groups
  uint64_t commits_ = 0;
};

// ---- The piece search on several threads --------------------------------------------------------
//
// The serial search (Compile()) tries the candidate piece counts c_0 = 1, c_1 = 2, … in order.
// Candidate k is kept iff its makespan M_k < B_k = 0.98 × the makespan of the last kept
// candidate before it (B_0 = ∞), and the search stops after two candidates in a row that are not
// kept. Scheduling a candidate with a time to give up at G ≥ B_k decides the same: abandoned
// means M_k ≥ G ≥ B_k (not kept), scheduled to completion gives M_k exactly. So the candidates
// can be scheduled at the same time, each with a G_k that is only ever ≥ B_k, and decided
// afterwards, in candidate order, by the serial rule on the exact B_k:
//
//   - Workers take candidates in order and schedule them without ops, recording their commits,
//     as the serial search does. A worker does not start candidate k while k − 2 is decided not
//     kept and k − 1 is undecided (k is needed only if k − 1 is kept): it starts k + 1 instead
//     (needed exactly when k is), or waits on cv_ for the next decision (NextLocked()).
//   - Whenever one ends, Resolve() (under mu_) decides every candidate from resolved_ on whose
//     predecessors are all decided and that has ended itself, exactly as the serial loop would,
//     and then lowers the G_k of the undecided ones: with B the exact time to beat after the
//     decided prefix (0.98 × the best kept so far), B_k ≤ B for every later k (the best only
//     falls); and for every candidate j < k that was scheduled to completion, B_k ≤ M_j (if j is
//     kept, B_k ≤ 0.98 M_j; if not, M_j ≥ B_j ≥ B_k). So G_k = min(B, min_{resolved_ ≤ j < k} M_j)
//     is safe. Once the serial search would stop, every later candidate gets G = −∞ (cancelled)
//     and no new one is started.
//   - A scheduler reads its G_k (an atomic that only moves down; written under mu_, read
//     relaxed: a stale value is larger, which only rules out less) after every commit.
//
// Which candidates are kept, the winner and its commits are therefore those of the serial
// search, whatever the threads' timing; what may differ is how far a losing candidate got
// before it was given up (CompileDebug's outcome and committed). The winner's schedule is
// emitted afterwards, on the calling thread, from its recorded commits.
class ThreadedPieceSearch {
 public:
  ThreadedPieceSearch(const Intent& intent, const Fabric& fabric, const Dag& dag,
                      const CompileOptions& o, const std::vector<uint32_t>& pieces)
      : intent_(intent), fabric_(fabric), dag_(dag), options_(o), candidates_(pieces.size()) {
    for (size_t k = 0; k < pieces.size(); ++k) candidates_[k].pieces = pieces[k];
    limit_ = pieces.size();
  }

  // Runs the search on `threads` threads (the calling one included). The winner's piece count
  // and commits, or the error the serial search would have returned.
  // The calling thread schedules its candidates in `tables` (which the emission can reuse).
  absl::Status Run(uint32_t threads, PieceTables* tables) {
    std::vector<std::thread> workers;
    for (uint32_t i = 1; i < threads; ++i) {
      try {
        workers.emplace_back([this] {
          PieceTables own;
          Work(own);
        });
      } catch (const std::system_error&) {
        break;  // no more threads: the ones running (at least this one) do the rest
      }
    }
    Work(*tables);
    for (std::thread& w : workers) w.join();
    std::lock_guard<std::mutex> l(mu_);
    if (options_.debug != nullptr) {
      for (size_t k = 0; k < limit_; ++k)
        options_.debug->candidates.push_back(candidates_[k].record);
    }
    return status_;
  }

  uint32_t best_pieces() const { return best_ == kNone ? 0 : candidates_[best_].pieces; }
  const std::vector<Scheduler::Step>& best_trace() const { return candidates_[best_].trace; }

 private:
  struct Candidate {
    uint32_t pieces = 0;
    // G_k, the time to give up at: only moves down. Its own cache line: schedulers read it
    // after every commit while Resolve() writes the others'.
    alignas(64) std::atomic<double> give_up{kInf};
    bool started = false;
    bool done = false;
    absl::Status status;
    bool scheduled = false;  // to completion: record.makespan is its makespan
    bool kept = false;       // decided, and kept by the serial rule
    PieceCandidate record;
    std::vector<Scheduler::Step> trace;
  };

  // `tables`: this thread's, for all the candidates it schedules (PieceTables).
  void Work(PieceTables& tables) {
    tables.Reserve(std::max<size_t>(intent_.moves.size(), 1) * candidates_.back().pieces);
    for (;;) {
      size_t k;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] {
          k = NextLocked();
          return k != kWait;
        });
        if (k == kDone) return;
        candidates_[k].started = true;
      }
      Candidate& c = candidates_[k];
      const auto start = std::chrono::steady_clock::now();
      Scheduler scheduler(intent_, fabric_, dag_, c.pieces, options_, /*emit=*/false, &tables);
      std::vector<Scheduler::Step> trace;
      absl::StatusOr<std::optional<Schedule>> s = scheduler.Run(kInf, &trace, &c.give_up);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::lock_guard<std::mutex> l(mu_);
      c.done = true;
      c.status = s.status();
      c.scheduled = s.ok() && s->has_value();
      c.record = PieceCandidate{c.pieces,
                                scheduler.lower_bound(),
                                kInf,
                                c.scheduled ? (*s)->predicted_s : kInf,
                                scheduler.outcome(),
                                scheduler.committed(),
                                seconds};
      if (c.scheduled) c.trace = std::move(trace);
      Resolve();
      cv_.notify_all();
    }
  }

  // The candidate a free worker starts next (mu_ held): the first one not started, or kWait, or
  // kDone when every candidate the search may still need has been started.
  // Candidate k is needed unless the two before it are not kept. When k − 2 is already decided
  // not kept, k is needed only if k − 1 is kept; a worker then does not start k on that chance
  // (a candidate twice as large as the one still running would take the CPU from it whenever
  // the machine has no idle core, and k − 1 is a loser more often than not) but k + 1, needed
  // exactly when k is (k kept implies k − 1 kept), so it starts the larger of the two that the
  // search needs if k − 1 is kept (hierarchical all-reduce at 64 ranks: P = 64 beside the
  // winning P = 16, after the losing P = 8), and waits only when k + 1 is started too.
  static constexpr size_t kWait = std::numeric_limits<size_t>::max();
  static constexpr size_t kDone = kWait - 1;
  size_t NextLocked() {
    while (next_ < limit_ && candidates_[next_].started) ++next_;
    const size_t k = next_;
    if (k >= limit_) return kDone;
    const bool blocked =
        k >= 2 && k - 2 < resolved_ && !candidates_[k - 2].kept && k - 1 >= resolved_;
    if (!blocked) return k;
    if (k + 1 < limit_ && !candidates_[k + 1].started) return k + 1;
    return kWait;
  }

  // Decides, in candidate order, every candidate whose predecessors are decided and that has
  // ended; then lowers the undecided candidates' times to give up at (see above).
  void Resolve() {  // mu_ held
    bool stop = false;
    while (resolved_ < limit_ && candidates_[resolved_].done) {
      Candidate& c = candidates_[resolved_];
      const double must_beat = best_ != kNone ? best_s_ * (1 - kMinPieceGain) : kInf;
      c.record.must_beat = must_beat;
      ++resolved_;
      if (!c.status.ok()) {
        status_ = c.status;
        stop = true;
        break;
      }
      if (c.scheduled && c.record.makespan < must_beat) {
        c.kept = true;
        if (best_ != kNone) candidates_[best_].trace = {};
        best_ = static_cast<uint32_t>(resolved_ - 1);
        best_s_ = c.record.makespan;
        worse_ = 0;
      } else {
        c.trace = {};
        if (++worse_ == 2) {
          stop = true;
          break;
        }
      }
    }
    if (stop) limit_ = resolved_;
    double g = best_ != kNone ? best_s_ * (1 - kMinPieceGain) : kInf;
    if (options_.exhaustive_piece_search) g = kInf;
    for (size_t k = resolved_; k < candidates_.size(); ++k) {
      Candidate& c = candidates_[k];
      const double want = k >= limit_ ? -kInf : g;
      // Only this function writes give_up, under mu_; the schedulers only read it.
      if (want < c.give_up.load(std::memory_order_relaxed)) {
        c.give_up.store(want, std::memory_order_relaxed);
      }
      if (c.done && c.scheduled && !options_.exhaustive_piece_search) {
        g = std::min(g, c.record.makespan);
      }
    }
  }

  const Intent& intent_;
  const Fabric& fabric_;  // shared, read only
  const Dag& dag_;
  const CompileOptions& options_;
  // Never resized (its elements hold atomics); each element's fields other than give_up are
  // written by the worker that schedules it, under mu_, and read under mu_.
  std::vector<Candidate> candidates_;
  // A std::mutex rather than absl::Mutex: ThreadSanitizer sees its locks (pthread), also when
  // Abseil is not built with it. It guards everything below.
  std::mutex mu_;
  std::condition_variable cv_;  // a candidate was decided
  size_t next_ = 0;             // candidates before it are started
  size_t limit_ = 0;            // candidates the serial search would try (so far)
  size_t resolved_ = 0;         // candidates decided, in order
  uint32_t best_ = kNone;
  double best_s_ = kInf;
  int worse_ = 0;
  absl::Status status_;
};

// ---- The replay (PredictTime) ------------------------------------------------------------------

absl::StatusOr<double> Replay(const Schedule& s, const Topology& t, uint64_t slot_bytes,
                              double alpha, Schedule* write) {
  const uint32_t n = s.collective.ranks;
  if (slot_bytes == 0) slot_bytes = s.slot_bytes;
  if (slot_bytes == 0) return absl::InvalidArgumentError("schedule: slot_bytes is 0");
  if (!(alpha >= 0) || !std::isfinite(alpha)) {
    return absl::InvalidArgumentError("per_op_overhead_s must be finite and ≥ 0");
  }
  if (s.pieces < 1) return absl::InvalidArgumentError("schedule: pieces must be at least 1");
  if (s.per_rank.size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "schedule: %u rank schedules for a collective of %u ranks", s.per_rank.size(), n));
  }
  if (t.ranks != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("schedule of %u ranks priced on a topology of %u ranks", n, t.ranks));
  }
  const Fabric fabric(t);
  Network net(fabric, static_cast<double>(slot_bytes) / s.pieces, alpha);
  std::vector<uint64_t> base(n + 1, 0);
  for (uint32_t r = 0; r < n; ++r) base[r + 1] = base[r] + s.per_rank[r].ops.size();
  const uint64_t total = base[n];
  if (total > (uint64_t{1} << 32) - 2) return absl::InvalidArgumentError("schedule: too many ops");
  auto gid = [&](uint32_t r, uint32_t i) { return static_cast<uint32_t>(base[r] + i); };

  // Match sends and receives per (src, dst, channel), in list order.
  struct Chan {
    std::vector<uint32_t> sends, recvs;
  };
  absl::flat_hash_map<std::tuple<uint32_t, uint32_t, uint32_t>, Chan> chans;
  std::vector<uint32_t> seg_of(total, kNone), match(total, kNone);
  for (uint32_t r = 0; r < n; ++r) {
    const auto& ops = s.per_rank[r].ops;
    for (uint32_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      for (uint32_t d : op.deps) {
        if (d >= i) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "schedule: rank %u op %u depends on op %u, which is not earlier", r, i, d));
        }
      }
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv || op.kind == OpKind::kRecvReduce) {
        if (op.peer >= n || op.peer == r) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "schedule: rank %u op %u: peer %u is not another rank", r, i, op.peer));
        }
      }
      if (op.kind == OpKind::kSend) {
        chans[{r, op.peer, op.channel}].sends.push_back(gid(r, i));
        const uint32_t sid = net.Seg(r, op.peer);
        if (sid == kNone) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "schedule: rank %u op %u sends to rank %u, but the topology has no link or switch "
              "path from '%s' to '%s'",
              r, i, op.peer, t.nodes[r], t.nodes[op.peer]));
        }
        seg_of[gid(r, i)] = sid;
      } else if (op.kind == OpKind::kRecv || op.kind == OpKind::kRecvReduce) {
        chans[{op.peer, r, op.channel}].recvs.push_back(gid(r, i));
      }
    }
  }
  // (The first mismatched channel in key order is reported, whatever the hash order.)
  std::optional<std::tuple<uint32_t, uint32_t, uint32_t>> bad;
  for (const auto& [k, v] : chans) {
    if (v.sends.size() != v.recvs.size()) {
      if (!bad || k < *bad) bad = k;
      continue;
    }
    for (size_t i = 0; i < v.sends.size(); ++i) {
      match[v.sends[i]] = v.recvs[i];
      match[v.recvs[i]] = v.sends[i];
    }
  }
  if (bad) {
    const Chan& v = chans[*bad];
    return absl::FailedPreconditionError(absl::StrFormat(
        "schedule: rank %u sends %u pieces to rank %u on channel %u, which receives %u",
        std::get<0>(*bad), v.sends.size(), std::get<1>(*bad), std::get<2>(*bad), v.recvs.size()));
  }
  // Every link carries its sends in planned order: (start_s, rank, op index).
  std::vector<std::vector<uint32_t>> on_link(net.link_count());
  std::vector<uint32_t> rank_of(total);
  for (uint32_t r = 0; r < n; ++r) {
    for (uint64_t g = base[r]; g < base[r + 1]; ++g) rank_of[g] = r;
  }
  auto op_at = [&](uint32_t g) -> const Op& {
    return s.per_rank[rank_of[g]].ops[g - base[rank_of[g]]];
  };
  for (uint32_t g = 0; g < total; ++g) {
    if (seg_of[g] == kNone) continue;
    for (uint32_t li : net.segment(seg_of[g]).links) on_link[li].push_back(g);
  }
  // Edges (CSR): deps, the previous send on each link, and the matching send of a receive.
  enum EdgeKind : uint8_t { kDep, kLinkOrder, kMatch };
  for (auto& list : on_link) {
    std::sort(list.begin(), list.end(), [&](uint32_t x, uint32_t y) {
      const double a = op_at(x).start_s, b = op_at(y).start_s;
      return a < b || (a == b && x < y);
    });
  }
  std::vector<uint32_t> indeg(total, 0), out_start(total + 1, 0);
  auto for_each_edge = [&](auto&& fn) {
    for (const auto& list : on_link) {
      for (size_t i = 1; i < list.size(); ++i) fn(list[i - 1], list[i], kLinkOrder);
    }
    for (uint32_t r = 0; r < n; ++r) {
      const auto& ops = s.per_rank[r].ops;
      for (uint32_t i = 0; i < ops.size(); ++i) {
        for (uint32_t d : ops[i].deps) fn(gid(r, d), gid(r, i), kDep);
        if (ops[i].kind == OpKind::kRecv || ops[i].kind == OpKind::kRecvReduce) {
          fn(match[gid(r, i)], gid(r, i), kMatch);
        }
      }
    }
  };
  for_each_edge([&](uint32_t from, uint32_t to, EdgeKind) {
    ++out_start[from + 1];
    ++indeg[to];
  });
  for (uint64_t g = 0; g < total; ++g) out_start[g + 1] += out_start[g];
  std::vector<std::pair<uint32_t, EdgeKind>> succ(out_start[total]);
  {
    std::vector<uint32_t> fill(out_start.begin(), out_start.end() - 1);
    for_each_edge([&](uint32_t from, uint32_t to, EdgeKind kind) {
      succ[fill[from]++] = {to, kind};
    });
  }
  // Kahn's algorithm; times are maxima, so the visiting order does not change them.
  std::vector<double> start(total, 0), end(total, 0), dep_end(total, 0), link_end(total, 0);
  std::vector<uint32_t> ready;
  for (uint32_t g = 0; g < total; ++g) {
    if (indeg[g] == 0) ready.push_back(g);
  }
  uint64_t done = 0;
  double makespan = 0;
  while (!ready.empty()) {
    const uint32_t g = ready.back();
    ready.pop_back();
    ++done;
    const Op& op = op_at(g);
    switch (op.kind) {
      case OpKind::kSend:
        start[g] = std::max(dep_end[g], link_end[g]);
        end[g] = start[g] + net.segment(seg_of[g]).busy;
        break;
      case OpKind::kRecv:
      case OpKind::kRecvReduce: {
        const uint32_t snd = match[g];
        start[g] = std::max(dep_end[g], start[snd]);
        end[g] = std::max(dep_end[g], Arrival(net.segment(seg_of[snd]), start[snd]));
        break;
      }
      case OpKind::kCopy:
      case OpKind::kReduce:
        start[g] = end[g] = dep_end[g];
        break;
    }
    makespan = std::max(makespan, end[g]);
    for (uint32_t e = out_start[g]; e < out_start[g + 1]; ++e) {
      const auto [x, kind] = succ[e];
      if (kind == kDep) dep_end[x] = std::max(dep_end[x], end[g]);
      if (kind == kLinkOrder) link_end[x] = std::max(link_end[x], end[g]);
      if (--indeg[x] == 0) ready.push_back(x);
    }
  }
  if (done != total) {
    for (uint32_t g = 0; g < total; ++g) {
      if (indeg[g] != 0) {
        return absl::FailedPreconditionError(
            absl::StrFormat("schedule: rank %u op %u can never start: the ops wait on each other",
                            rank_of[g], g - base[rank_of[g]]));
      }
    }
  }
  if (write) {
    for (uint32_t g = 0; g < total; ++g) {
      Op& op = write->per_rank[rank_of[g]].ops[g - base[rank_of[g]]];
      op.start_s = start[g];
      op.end_s = end[g];
    }
    write->predicted_s = makespan;
  }
  return makespan;
}

}  // namespace

absl::StatusOr<double> PredictTime(const Schedule& s, const Topology& t, uint64_t slot_bytes,
                                   double per_op_overhead_s) {
  HEDDLE_RETURN_IF_ERROR(ValidateTopology(t));
  return Replay(s, t, slot_bytes, per_op_overhead_s, nullptr);
}

absl::Status RetimeSchedule(Schedule* s, const Topology& t, uint64_t slot_bytes,
                            double per_op_overhead_s) {
  HEDDLE_RETURN_IF_ERROR(ValidateTopology(t));
  return Replay(*s, t, slot_bytes, per_op_overhead_s, s).status();
}

absl::StatusOr<Schedule> Compile(const Intent& intent, const Topology& topology,
                                 const CompileOptions& options) {
  HEDDLE_RETURN_IF_ERROR(Validate(intent.collective));
  HEDDLE_RETURN_IF_ERROR(ValidateTopology(topology));
  if (topology.ranks != intent.collective.ranks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("intent %s is for %u ranks; the topology has %u", intent.name,
                        intent.collective.ranks, topology.ranks));
  }
  if (options.slot_bytes < 1) return absl::InvalidArgumentError("compile: slot_bytes must be ≥ 1");
  if (options.pieces > kMaxCompilePieces || options.max_pieces < 1 ||
      options.max_pieces > kMaxCompilePieces) {
    return absl::InvalidArgumentError(
        absl::StrFormat("compile: pieces and max_pieces must be in 1..%u", kMaxCompilePieces));
  }
  if (!(options.per_op_overhead_s >= 0) || !std::isfinite(options.per_op_overhead_s)) {
    return absl::InvalidArgumentError("compile: per_op_overhead_s must be finite and ≥ 0");
  }
  if (options.threads > kMaxCompileThreads) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "compile: threads %u is more than %u; use 0 (one per hardware thread) or fewer",
        options.threads, kMaxCompileThreads));
  }
  const uint64_t moves = std::max<uint64_t>(intent.moves.size(), 1);
  if (moves * std::max(options.pieces, 1u) > kMaxMovePieces) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "compile: %u moves × %u pieces is more than %u; use fewer pieces or a smaller intent",
        intent.moves.size(), std::max(options.pieces, 1u), kMaxMovePieces));
  }
  HEDDLE_ASSIGN_OR_RETURN(Dag dag, BuildDag(intent, options.multi_hop));
  const Fabric fabric(topology);

  // The scheduler's own times are the replay's by construction (the tests hold them equal:
  // PredictTime() of every schedule they compile is its predicted_s, and every op's start_s and
  // end_s are pinned by compiler_golden_test), so the schedule is returned with them as they
  // are, not replayed again.
  // A candidate that cannot beat `give_up_at` is abandoned as soon as its makespan is certain
  // to reach it (nullopt). Candidates are timed without ops (emit = false), recording their
  // commits; the chosen one's are committed again with ops (Emit), without searching.
  // With options.debug, every candidate of the search is recorded there.
  if (options.debug != nullptr) options.debug->candidates.clear();
  PieceTables* search_tables = nullptr;  // the serial search's, kept across its candidates
  auto one = [&](uint32_t pieces, bool emit, double give_up_at = kInf,
                 std::vector<Scheduler::Step>* trace = nullptr,
                 double must_beat = kInf) -> absl::StatusOr<std::optional<Schedule>> {
    const auto start = std::chrono::steady_clock::now();
    Scheduler scheduler(intent, fabric, dag, pieces, options, emit, search_tables);
    HEDDLE_ASSIGN_OR_RETURN(std::optional<Schedule> s, scheduler.Run(give_up_at, trace));
    if (options.debug != nullptr && options.pieces == 0) {
      options.debug->candidates.push_back(PieceCandidate{
          pieces, scheduler.lower_bound(), must_beat, s ? s->predicted_s : kInf,
          scheduler.outcome(), scheduler.committed(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
    }
    return s;
  };
  if (options.pieces != 0) {
    HEDDLE_ASSIGN_OR_RETURN(std::optional<Schedule> s, one(options.pieces, /*emit=*/true));
    return std::move(*s);
  }
  // Powers of two up to max_pieces (and the slot size, and the move-piece budget). A piece count
  // is kept only if it beats the best so far by kMinPieceGain: more pieces mean more ops for the
  // executor, and the model's α is often 0. Stop after two that are not kept.
  std::vector<uint32_t> candidates;
  uint64_t work = 0;  // move-pieces of every candidate
  for (uint32_t p = 1; p <= options.max_pieces && p <= options.slot_bytes; p *= 2) {
    if (p > 1 && moves * p > kAutoMovePieces) break;
    candidates.push_back(p);
    work += moves * p;
  }
  uint32_t threads = options.threads;
  if (threads == 0) {
    threads = work >= kThreadedSearchWork ? std::max(1u, std::thread::hardware_concurrency()) : 1;
  }
  threads = std::min<uint32_t>(threads, static_cast<uint32_t>(candidates.size()));
  // Room for the largest candidate from the start (reserved, not touched): every candidate
  // writes into the pages the ones before it used, and so does the emission.
  const size_t most = moves * candidates.back();
  PieceTables tables;
  if (threads > 1) {
    ThreadedPieceSearch search(intent, fabric, dag, options, candidates);
    HEDDLE_RETURN_IF_ERROR(search.Run(threads, &tables));
    Scheduler scheduler(intent, fabric, dag, search.best_pieces(), options, /*emit=*/true, &tables);
    return scheduler.Emit(search.best_trace());
  }
  uint32_t best_pieces = 0;
  double best_s = kInf;
  int worse = 0;
  tables.Reserve(most);
  search_tables = &tables;
  std::vector<Scheduler::Step> trace, best_trace;
  trace.reserve(most);
  best_trace.reserve(most);
  for (uint32_t p : candidates) {
    // Kept only if strictly below this; so a schedule that reaches it is dropped unfinished.
    const double must_beat = best_pieces != 0 ? best_s * (1 - kMinPieceGain) : kInf;
    HEDDLE_ASSIGN_OR_RETURN(
        std::optional<Schedule> s,
        one(p, /*emit=*/false, options.exhaustive_piece_search ? kInf : must_beat, &trace,
            must_beat));
    if (s && s->predicted_s < must_beat) {
      best_pieces = p;
      best_s = s->predicted_s;
      std::swap(trace, best_trace);
      worse = 0;
    } else if (++worse == 2) {
      break;
    }
  }
  Scheduler scheduler(intent, fabric, dag, best_pieces, options, /*emit=*/true, &tables);
  return scheduler.Emit(best_trace);
}

}  // namespace heddle::collective
