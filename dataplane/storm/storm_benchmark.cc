// File: dataplane/storm/storm_benchmark.cc
//
// STORM's per-packet cost — QP key + FindOrInsert + request tracking + level + DSCP rewrite — on a
// request-direction mix over 10 000 QPs, beside pkt::Parse() of the same frames in the same run;
// and the QP table alone: lookup cost by table size, load and hit/miss, and refused inserts by
// load. Each QP-table case also runs on LegacyQpTable, the probe the table had before two-choice
// buckets (one 4-entry bucket per key), kept here as the reference. Quote ratios, not times:
//   build/dataplane/storm/storm_benchmark
//   build/dataplane/storm/storm_benchmark --benchmark_filter=QpLookup
//   build/dataplane/storm/storm_benchmark --benchmark_filter=QpRefusals   # slow: ~1 min
// The mix (MTU 1024): 50% SEND only 512 B, 25% WRITE 8 KiB (8 packets), 15% READ request 64 KiB,
// 10% WRITE 32 KiB (32 packets); one message per QP per pass, QPs interleaved at random (seeded)
// with each QP's packets in PSN order. Every pass shifts each QP's PSNs by its packet count, so a
// replayed pass is new traffic to the tracker, not duplicates.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"
#include "dataplane/storm/levels.h"
#include "dataplane/storm/qp_table.h"
#include "dataplane/storm/rewrite.h"
#include "dataplane/storm/tracker.h"

namespace heddle::storm {
namespace {

// The QP table's probe before two-choice buckets (one 4-entry bucket per key, all four lines
// prefetched), with the same entries, hash, eviction rule and counters: the reference the
// QpLookup, QpRefusals and burst cases compare against. Only what those cases call. The lookups
// are out of line, as QpTable's are (and the old ones were): inlined into the benchmark loop they
// would win by the call alone.
class LegacyQpTable {
 public:
  static constexpr size_t kBucketEntries = 4;
  explicit LegacyQpTable(const QpTableOptions& o)
      : capacity_(std::bit_ceil(std::max<size_t>(o.capacity, kBucketEntries))),
        bucket_mask_(capacity_ / kBucketEntries - 1),
        idle_ms_(o.idle_ms),
        entries_(static_cast<QpEntry*>(std::aligned_alloc(64, capacity_ * sizeof(QpEntry)))) {
    std::memset(entries_.get(), 0, capacity_ * sizeof(QpEntry));
  }
  void Prefetch(uint64_t hash) const {
    const QpEntry* b = Bucket(hash);
    for (size_t i = 0; i < kBucketEntries; ++i) __builtin_prefetch(&b[i], 1, 3);
  }
  [[gnu::noinline]] QpEntry* FindHashed(uint64_t hash, uint32_t qpn_dir) const {
    QpEntry* b = Bucket(hash);
    for (size_t i = 0; i < kBucketEntries; ++i) {
      if (b[i].key_hash == hash && b[i].qpn_dir == qpn_dir) return &b[i];
    }
    return nullptr;
  }
  uint32_t Probe(uint64_t) const { return QpTable::kNoSlot; }  // its Prefetch() loads it all
  [[gnu::noinline]] QpEntry* FindOrInsertHashed(uint64_t hash, uint32_t qpn_dir, uint32_t now_ms,
                                                InsertResult* result, uint32_t = 0) {
    QpEntry* bucket = Bucket(hash);
    QpEntry* empty = nullptr;
    QpEntry* oldest_idle = nullptr;
    for (size_t i = 0; i < kBucketEntries; ++i) {
      QpEntry& e = bucket[i];
      if (e.key_hash == hash && e.qpn_dir == qpn_dir) {
        e.last_seen = now_ms;
        if (result) *result = InsertResult::kFound;
        return &e;
      }
      if (e.key_hash == 0) {
        if (empty == nullptr) empty = &e;
      } else if (Idle(e, now_ms) &&
                 (oldest_idle == nullptr || now_ms - e.last_seen > now_ms - oldest_idle->last_seen)) {
        oldest_idle = &e;
      }
    }
    QpEntry* slot = empty != nullptr ? empty : oldest_idle;
    if (slot == nullptr) {
      ++counters_.table_full;
      if (result) *result = InsertResult::kTableFull;
      return nullptr;
    }
    if (empty != nullptr) {
      ++live_;
    } else {
      ++counters_.evicted_on_insert;
    }
    *slot = QpEntry{};
    slot->key_hash = hash;
    slot->qpn_dir = qpn_dir;
    slot->last_seen = now_ms;
    slot->acked_psn = kNoPsn;
    ++counters_.inserted;
    if (result) *result = empty != nullptr ? InsertResult::kInserted : InsertResult::kEvictedIdle;
    return slot;
  }
  size_t SweepIdleRange(size_t begin, size_t count, uint32_t now_ms) {
    size_t evicted = 0;
    for (size_t i = begin; i < std::min(capacity_, begin + count); ++i) {
      if (entries_[i].key_hash != 0 && Idle(entries_[i], now_ms)) {
        entries_[i] = QpEntry{};
        ++evicted;
      }
    }
    live_ -= evicted;
    counters_.evicted_idle += evicted;
    return evicted;
  }
  const QpEntry& entry(size_t i) const { return entries_[i]; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return live_; }
  const QpTableCounters& counters() const { return counters_; }

 private:
  QpEntry* Bucket(uint64_t hash) const { return &entries_[(hash & bucket_mask_) * kBucketEntries]; }
  bool Idle(const QpEntry& e, uint32_t now_ms) const {
    return e.egress_queued == 0 && now_ms - e.last_seen > idle_ms_;
  }
  struct Free {
    void operator()(QpEntry* p) const { std::free(p); }
  };
  size_t capacity_;
  uint64_t bucket_mask_;
  uint32_t idle_ms_;
  size_t live_ = 0;
  std::unique_ptr<QpEntry[], Free> entries_;
  QpTableCounters counters_;
};

constexpr uint32_t kMtu = 1024;
constexpr int kQps = 10'000;
constexpr size_t kBurst = 32;  // packets per poll, as the pipeline's bursts

// Frames are kept as their first kHeadroom bytes plus the full length, as a chained mbuf's first
// segment, and parsed with the segmented Parse(): the trace is then ~7 MiB of headers instead of
// ~60 MiB of payload, which would evict the QP table from every cache level on each pass — no
// NIC ring recycles that much memory per 57k packets.
constexpr size_t kHeadroom = 128;

struct Trace {
  std::vector<std::vector<uint8_t>> frames;  // first kHeadroom bytes
  std::vector<uint32_t> frame_len;
  std::vector<pkt::PacketDesc> descs;
  std::vector<uint32_t> psn_stride;  // packets of the frame's QP per pass
};

const Trace& GetTrace() {
  static const Trace* trace = [] {
    auto* t = new Trace;
    std::mt19937_64 rng(12345);
    struct Msg {
      pkt::FrameSpec f;
      std::vector<pkt::RoceSpec> packets;
      size_t next = 0;
    };
    std::vector<Msg> msgs(kQps);
    for (int q = 0; q < kQps; ++q) {
      Msg& m = msgs[q];
      m.f.src_ip4 = {10, 0, static_cast<uint8_t>(q % 8), 1};
      m.f.dst_ip4 = {10, 1, static_cast<uint8_t>(q / 256 % 256), static_cast<uint8_t>(q % 64)};
      const uint32_t qpn = rng() & 0xffffff;
      const uint32_t psn0 = rng() & 0xffffff;
      const int pick = static_cast<int>(rng() % 100);
      auto add = [&](uint8_t op, uint32_t i, uint32_t payload, uint32_t dma) {
        pkt::RoceSpec r;
        r.opcode = op;
        r.dest_qp = qpn;
        r.psn = (psn0 + i) & kPsnMask;
        r.payload_len = payload;
        r.dma_length = dma;
        m.packets.push_back(r);
      };
      auto write = [&](uint32_t packets) {
        for (uint32_t i = 0; i < packets; ++i) {
          const uint8_t op = i == 0             ? pkt::op::kWriteFirst
                             : i + 1 == packets ? pkt::op::kWriteLast
                                                : pkt::op::kWriteMiddle;
          add(op, i, kMtu, packets * kMtu);
        }
      };
      if (pick < 50) {
        add(pkt::op::kSendOnly, 0, 512, 0);
      } else if (pick < 75) {
        write(8);
      } else if (pick < 90) {
        add(pkt::op::kReadRequest, 0, 0, 65536);
      } else {
        write(32);
      }
    }
    std::vector<int> pending(kQps);
    for (int q = 0; q < kQps; ++q) pending[q] = q;
    while (!pending.empty()) {
      const size_t k = rng() % pending.size();
      Msg& m = msgs[pending[k]];
      std::vector<uint8_t> full = pkt::BuildRoce(m.f, m.packets[m.next]);
      pkt::PacketDesc d;
      pkt::Parse(full.data(), full.size(), &d);
      t->descs.push_back(d);
      t->frame_len.push_back(static_cast<uint32_t>(full.size()));
      full.resize(std::min(full.size(), kHeadroom));
      t->frames.push_back(std::move(full));
      t->psn_stride.push_back(static_cast<uint32_t>(m.packets.size()));
      if (++m.next == m.packets.size()) {
        pending[k] = pending.back();
        pending.pop_back();
      }
    }
    return t;
  }();
  return *trace;
}

// The STORM stage for one request-direction packet, as the pipeline runs it after Parse().
template <typename Table = QpTable>
struct Stage {
  explicit Stage(const benchmark::State& state)
      : table({.capacity = static_cast<size_t>(state.range(1)), .idle_ms = 10'000}),
        tracker({.mtu = kMtu}) {
    config.mode = state.range(0) ? Mode::kPerPacket : Mode::kPerMessage;
  }
  void Run(uint8_t* frame, const pkt::PacketDesc& d, uint32_t now_ms) {
    const QpKey key = KeyFromPacket(frame, d, Direction::kRequest);
    RunHashed(frame, d, HashKey(key), QpTable::QpnDir(key), now_ms);
  }
  void RunHashed(uint8_t* frame, const pkt::PacketDesc& d, uint64_t hash, uint32_t qpn_dir,
                 uint32_t now_ms, uint32_t hint = QpTable::kNoSlot) {
    QpEntry* e = table.FindOrInsertHashed(hash, qpn_dir, now_ms, nullptr, hint);
    TrackResult track;
    if (e != nullptr) track = tracker.OnRequestPacket(*e, d);
    const uint64_t backlog = e ? BacklogBytes(*e, BacklogSource::kEgressQueue, kMtu) : 0;
    const uint8_t level = TagPacket(config, e, d, track, backlog, kMtu);
    if (track.size_sample) histogram.Add(track.size_sample);
    SetDscp(frame, d, config.dscp[level]);
    if (config.pcp[level] >= 0) SetPcp(frame, d, config.pcp[level]);
  }
  void Report(benchmark::State& state, size_t frames) {
    state.SetItemsProcessed(state.iterations());
    state.counters["qps"] = static_cast<double>(table.size());
    state.counters["table_full"] = static_cast<double>(table.counters().table_full);
    state.counters["duplicates"] = static_cast<double>(tracker.counters().duplicates);
    state.counters["frames"] = static_cast<double>(frames);
  }
  Table table;
  RequestTracker tracker;
  LevelConfig config;
  SizeHistogram histogram;
};

#define STORM_ARGS ArgsProduct({{0, 1}, {1 << 15, 1 << 20}})->ArgNames({"per_packet", "capacity"})

// STORM alone on pre-parsed descriptors: the frame's first touch is STORM's (a cache miss that
// the pipeline, which has just parsed the frame, does not pay).
void BM_StormColdFrame(benchmark::State& state) {
  const Trace& t = GetTrace();
  std::vector<std::vector<uint8_t>> frames = t.frames;
  Stage<> stage(state);
  const size_t n = frames.size();
  size_t i = 0;
  uint32_t pass = 0, tick = 0;
  for (auto _ : state) {
    pkt::PacketDesc d = t.descs[i];
    d.psn = (d.psn + pass * t.psn_stride[i]) & kPsnMask;
    stage.Run(frames[i].data(), d, ++tick >> 12);  // ~4k packets per ms
    benchmark::DoNotOptimize(frames[i][d.l3_off + 1]);
    if (++i == n) {
      i = 0;
      ++pass;
    }
  }
  stage.Report(state, n);
}
BENCHMARK(BM_StormColdFrame)->STORM_ARGS;

// Parse() then STORM, as the pipeline runs them: (this - BM_ParseReference) is STORM's cost.
void BM_ParseThenStorm(benchmark::State& state) {
  const Trace& t = GetTrace();
  std::vector<std::vector<uint8_t>> frames = t.frames;
  Stage<> stage(state);
  const size_t n = frames.size();
  size_t i = 0;
  uint32_t pass = 0, tick = 0;
  pkt::PacketDesc d;
  for (auto _ : state) {
    auto& f = frames[i];
    pkt::Parse(f.data(), f.size(), t.frame_len[i], &d);
    d.psn = (d.psn + pass * t.psn_stride[i]) & kPsnMask;  // the replay's PSN shift (see top)
    stage.Run(f.data(), d, ++tick >> 12);
    benchmark::DoNotOptimize(f[d.l3_off + 1]);
    if (++i == n) {
      i = 0;
      ++pass;
    }
  }
  stage.Report(state, n);
}
BENCHMARK(BM_ParseThenStorm)->STORM_ARGS;

// The same in bursts of 32, as the pipeline polls: parse and hash the burst, prefetch what every
// packet's lookup will touch, then run the stage. The table misses of a burst overlap.
template <typename Table>
void BM_ParseThenStormBurst(benchmark::State& state) {
  const Trace& t = GetTrace();
  std::vector<std::vector<uint8_t>> frames = t.frames;
  Stage<Table> stage(state);
  const size_t n = frames.size() / kBurst * kBurst;
  size_t i = 0;
  uint32_t pass = 0, tick = 0;
  pkt::PacketDesc d[kBurst];
  uint64_t hash[kBurst];
  uint32_t qpn_dir[kBurst], hint[kBurst];
  for (auto _ : state) {
    for (size_t k = 0; k < kBurst; ++k) {
      auto& f = frames[i + k];
      pkt::Parse(f.data(), f.size(), t.frame_len[i + k], &d[k]);
      d[k].psn = (d[k].psn + pass * t.psn_stride[i + k]) & kPsnMask;
      hash[k] = HashPacket(f.data(), d[k], Direction::kRequest);
      qpn_dir[k] = (d[k].dest_qp & kQpnMask) | static_cast<uint32_t>(Direction::kRequest) << 24;
      stage.table.Prefetch(hash[k]);
    }
    for (size_t k = 0; k < kBurst; ++k) hint[k] = stage.table.Probe(hash[k]);
    const uint32_t now_ms = (tick += kBurst) >> 12;
    for (size_t k = 0; k < kBurst; ++k) {
      stage.RunHashed(frames[i + k].data(), d[k], hash[k], qpn_dir[k], now_ms, hint[k]);
    }
    benchmark::DoNotOptimize(frames[i][d[0].l3_off + 1]);
    if ((i += kBurst) == n) {
      i = 0;
      ++pass;
    }
  }
  stage.Report(state, n);
  state.SetItemsProcessed(state.iterations() * kBurst);
}
BENCHMARK(BM_ParseThenStormBurst<QpTable>)->STORM_ARGS;
BENCHMARK(BM_ParseThenStormBurst<LegacyQpTable>)->STORM_ARGS;

// Reference: pkt::Parse() of the same frames in the same order.
void BM_ParseReference(benchmark::State& state) {
  const Trace& t = GetTrace();
  const size_t n = t.frames.size();
  size_t i = 0;
  pkt::PacketDesc d;
  for (auto _ : state) {
    const auto& f = t.frames[i];
    benchmark::DoNotOptimize(pkt::Parse(f.data(), f.size(), t.frame_len[i], &d));
    benchmark::DoNotOptimize(d);
    if (++i == n) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseReference);

// ---- The QP table alone ----

constexpr uint32_t kNowMs = 1'000'000;

struct HashedKey {
  uint64_t hash;
  uint32_t qpn_dir;
};

// A QP of a random IPv4 pair and QPN, hashed as the stage hashes it.
HashedKey RandomKey(std::mt19937_64& rng) {
  QpKey k;
  k.src_ip[10] = k.src_ip[11] = k.dst_ip[10] = k.dst_ip[11] = 0xff;
  const uint64_t r = rng();
  std::memcpy(k.src_ip.data() + 12, &r, 4);
  std::memcpy(k.dst_ip.data() + 12, reinterpret_cast<const uint8_t*>(&r) + 4, 4);
  k.dest_qpn = static_cast<uint32_t>(rng()) & kQpnMask;
  return {HashKey(k), QpTable::QpnDir(k)};
}

// A table filled with random QPs to load_pct of its capacity, its QPs in random order and as many
// QPs that are not in it. Built once per (table type, capacity, load): Google Benchmark calls a
// case several times, and filling a 4 M-entry table takes a second.
template <typename Table>
struct FilledTable {
  size_t capacity = 0;
  int load_pct = 0;
  std::unique_ptr<Table> table;
  std::vector<HashedKey> live, absent;
};

template <typename Table>
FilledTable<Table>& Filled(size_t capacity, int load_pct) {
  static FilledTable<Table> f;
  if (f.table != nullptr && f.capacity == capacity && f.load_pct == load_pct) return f;
  f = FilledTable<Table>{};  // the previous table is freed first
  f.capacity = capacity;
  f.load_pct = load_pct;
  f.table = std::make_unique<Table>(QpTableOptions{.capacity = capacity, .idle_ms = 10'000});
  std::mt19937_64 rng(capacity * 131 + load_pct);
  const size_t target = capacity * load_pct / 100;
  // The legacy table refuses many QPs at high load; it is offered more until it holds as many.
  for (size_t tries = 0; f.table->size() < target && tries < 8 * capacity; ++tries) {
    const HashedKey k = RandomKey(rng);
    if (f.table->FindOrInsertHashed(k.hash, k.qpn_dir, kNowMs, nullptr) != nullptr) {
      f.live.push_back(k);
    }
  }
  std::shuffle(f.live.begin(), f.live.end(), rng);
  while (f.absent.size() < f.live.size()) {
    const HashedKey k = RandomKey(rng);
    if (f.table->FindHashed(k.hash, k.qpn_dir) == nullptr) f.absent.push_back(k);
  }
  return f;
}

// ns per lookup in bursts of 32 as the stage runs them: Prefetch() every key of the burst, Probe()
// each, then look each up. A hit is FindOrInsertHashed() of a QP in the table (it writes last_seen), a miss
// FindHashed() of one that is not (the search an insert does before it writes). The keys are
// visited in random order, so the table is as cold as the cache makes it.
template <typename Table>
void BM_QpLookup(benchmark::State& state) {
  const auto capacity = static_cast<size_t>(state.range(0));
  const bool hit = state.range(2) != 0;
  FilledTable<Table>& f = Filled<Table>(capacity, static_cast<int>(state.range(1)));
  Table& table = *f.table;
  const std::vector<HashedKey>& keys = hit ? f.live : f.absent;
  const size_t n = keys.size() / kBurst * kBurst;
  size_t i = 0, found = 0;
  for (auto _ : state) {
    const HashedKey* k = &keys[i];
    uint32_t hint[kBurst];
    for (size_t j = 0; j < kBurst; ++j) table.Prefetch(k[j].hash);
    for (size_t j = 0; j < kBurst; ++j) hint[j] = table.Probe(k[j].hash);
    for (size_t j = 0; j < kBurst; ++j) {
      const QpEntry* e =
          hit ? table.FindOrInsertHashed(k[j].hash, k[j].qpn_dir, kNowMs, nullptr, hint[j])
              : table.FindHashed(k[j].hash, k[j].qpn_dir);
      benchmark::DoNotOptimize(e);
      found += e != nullptr;
    }
    if ((i += kBurst) == n) i = 0;
  }
  state.SetItemsProcessed(state.iterations() * kBurst);
  state.counters["ns_per_lookup"] = benchmark::Counter(
      kBurst, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["load_pct"] = 100.0 * table.size() / table.capacity();
  state.counters["found_pct"] = 100.0 * found / (state.iterations() * kBurst);
}
#define QP_LOOKUP_ARGS                                                      \
  ArgsProduct({{1 << 16, 1 << 20, 1 << 22}, {50, 90}, {1, 0}})             \
      ->ArgNames({"capacity", "load_pct", "hit"})
BENCHMARK(BM_QpLookup<QpTable>)->QP_LOOKUP_ARGS;
BENCHMARK(BM_QpLookup<LegacyQpTable>)->QP_LOOKUP_ARGS;

// A packet of a QP the table refuses, in bursts of 32: both buckets (the legacy table's one) are
// full of QPs seen just now, so nothing can be evicted. The table is filled until full.
template <typename Table>
void BM_QpInsertRefused(benchmark::State& state) {
  const auto capacity = static_cast<size_t>(state.range(0));
  FilledTable<Table>& f = Filled<Table>(capacity, 100);
  Table& table = *f.table;
  const size_t n = f.absent.size() / kBurst * kBurst;
  const uint64_t full_before = table.counters().table_full;
  size_t i = 0;
  for (auto _ : state) {
    const HashedKey* k = &f.absent[i];
    uint32_t hint[kBurst];
    for (size_t j = 0; j < kBurst; ++j) table.Prefetch(k[j].hash);
    for (size_t j = 0; j < kBurst; ++j) hint[j] = table.Probe(k[j].hash);
    for (size_t j = 0; j < kBurst; ++j) {
      benchmark::DoNotOptimize(
          table.FindOrInsertHashed(k[j].hash, k[j].qpn_dir, kNowMs, nullptr, hint[j]));
    }
    if ((i += kBurst) == n) i = 0;
  }
  state.SetItemsProcessed(state.iterations() * kBurst);
  state.counters["ns_per_lookup"] = benchmark::Counter(
      kBurst, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["load_pct"] = 100.0 * table.size() / table.capacity();
  state.counters["refused_pct"] =
      100.0 * (table.counters().table_full - full_before) / (state.iterations() * kBurst);
}
BENCHMARK(BM_QpInsertRefused<QpTable>)->Arg(1 << 20)->ArgName("capacity");
BENCHMARK(BM_QpInsertRefused<LegacyQpTable>)->Arg(1 << 20)->ArgName("capacity");

// Refused inserts by load, in percent of attempts (not a timing: one iteration). Fill: random QPs
// into an empty table until it holds load_pct of its capacity. Churn: then, 4 x capacity times,
// one random live QP ends (emptied by the sweep) and new QPs arrive until the table is back at
// load_pct — the steady state of a host whose QPs come and go, which refuses more than the fill.
template <typename Table>
void BM_QpRefusals(benchmark::State& state) {
  const auto capacity = static_cast<size_t>(state.range(0));
  const size_t target = capacity * static_cast<size_t>(state.range(1)) / 100;
  size_t fill_tries = 0, fill_refused = 0, churn_tries = 0, churn_refused = 0;
  for (auto _ : state) {
    Table table({.capacity = capacity, .idle_ms = 1000});
    std::mt19937_64 rng(capacity + static_cast<size_t>(state.range(1)));
    std::vector<HashedKey> live;
    // One new QP; false when refused.
    auto arrive = [&]() {
      const HashedKey k = RandomKey(rng);
      if (table.FindOrInsertHashed(k.hash, k.qpn_dir, kNowMs, nullptr) == nullptr) return false;
      live.push_back(k);
      return true;
    };
    while (table.size() < target && fill_tries < 8 * capacity) {
      ++fill_tries;
      fill_refused += !arrive();
    }
    for (size_t op = 0; op < 4 * capacity && !live.empty(); ++op) {
      const size_t j = rng() % live.size();
      QpEntry* e = table.FindHashed(live[j].hash, live[j].qpn_dir);
      e->last_seen = kNowMs - 2000;  // idle: the sweep empties it
      table.SweepIdleRange(static_cast<size_t>(e - &table.entry(0)), 1, kNowMs);
      live[j] = live.back();
      live.pop_back();
      for (size_t tries = 0; table.size() < target && tries < 1000; ++tries) {
        ++churn_tries;
        churn_refused += !arrive();
      }
    }
  }
  state.counters["fill_refused_pct"] = 100.0 * fill_refused / std::max<size_t>(fill_tries, 1);
  state.counters["churn_refused_pct"] = 100.0 * churn_refused / std::max<size_t>(churn_tries, 1);
}
#define QP_REFUSAL_ARGS                                                                     \
  ArgsProduct({{1 << 10, 1 << 16, 1 << 20}, {30, 50, 70, 80, 85, 90, 95}})                 \
      ->ArgNames({"capacity", "load_pct"})                                                  \
      ->Iterations(1)                                                                       \
      ->Unit(benchmark::kMillisecond)
BENCHMARK(BM_QpRefusals<QpTable>)->QP_REFUSAL_ARGS;
BENCHMARK(BM_QpRefusals<LegacyQpTable>)->QP_REFUSAL_ARGS;

}  // namespace
}  // namespace heddle::storm

BENCHMARK_MAIN();
