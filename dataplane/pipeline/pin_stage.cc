#include "dataplane/pipeline/pin_stage.h"

#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "dataplane/lb/rewrite.h"
#include "drivers/verbs/host_backlog.h"

namespace heddle::pipeline {
namespace {

// Writes `n` bytes at offset `off` of a chained mbuf, across segment boundaries.
void WriteChain(rte_mbuf* m, size_t off, const uint8_t* src, size_t n) {
  for (rte_mbuf* s = m; s != nullptr && n > 0; s = s->next) {
    if (off >= s->data_len) {
      off -= s->data_len;
      continue;
    }
    const size_t k = std::min<size_t>(n, s->data_len - off);
    std::memcpy(rte_pktmbuf_mtod_offset(s, uint8_t*, off), src, k);
    src += k;
    n -= k;
    off = 0;
  }
}

// The peer's address of a packet from the uplink (its source) as the host index keys it:
// 16 bytes, IPv4 as ::ffff:a.b.c.d.
std::array<uint8_t, 16> SourceAddress(const uint8_t* frame, const pkt::PacketDesc& d) {
  std::array<uint8_t, 16> a{};
  const uint8_t* ip = frame + d.l3_off;
  if (d.l3 == pkt::L3::kIpv4) {
    a[10] = a[11] = 0xff;
    std::memcpy(a.data() + 12, ip + 12, 4);
  } else {
    std::memcpy(a.data(), ip + 8, 16);
  }
  return a;
}

}  // namespace

PinSelectStage::PinSelectStage(const Options& options)
    : o_(options),
      stage_(options.control->stage_counters(options.worker)),
      selector_out_(options.control->selector_counters(options.worker)),
      path_bytes_(options.control->path_bytes(options.worker)),
      path_packets_(options.control->path_packets(options.worker)),
      path_counts_(new uint64_t[(kLbReportedSets + 1) * lb::kMaxPaths]()) {
  if (!o_.clock) ns_per_tsc_ = 1e9 / static_cast<double>(std::max<uint64_t>(rte_get_tsc_hz(), 1));
  if (o_.housekeep_every == 0) o_.housekeep_every = 1;
  lb::LbConfig c = o_.config;
  c.seed = o_.config.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(o_.worker) + 1;
  // Off the hot path: the flow table is allocated here. The run-time parameters and the table
  // come from the control object (this is the control thread, before the worker runs).
  const LbParams& p = o_.control->params();
  sel_ = std::make_unique<lb::PinSelector>(c, p.table.get());
  SetFoldRows(p.table.get());
  sel_->SetFeedbackExpected(o_.control->has_host_backlog());
  Apply(p);
  Publish();
}

uint64_t PinSelectStage::NowNs() const {
  return o_.clock ? o_.clock()
                  : static_cast<uint64_t>(static_cast<double>(rte_get_tsc_cycles()) * ns_per_tsc_);
}

void PinSelectStage::Apply(const LbParams& p) {
  if (p.table.get() != sel_->table()) {
    // The counts so far belong to the old table's (set, path) slots.
    FoldPathCounts();
    sel_->SetPathTable(p.table.get());
    SetFoldRows(p.table.get());
  }
  sel_->Reconfigure(p.config);
  applied_generation_ = p.generation;
  Set(PinStageCounter::kGeneration, p.generation);
}

uint16_t PinSelectStage::Process(WorkerContext& ctx, Burst& b) {
  (void)ctx;
  const uint64_t now_ns = NowNs();
  if (b.ingress >= kMaxPorts || !o_.host_ports.test(b.ingress)) {
    // From the uplinks, towards the host: "port-fwd" chooses the egress; only feedback here.
    const verbs::HostBacklogIndex* host = o_.control->host_backlog();
    uint64_t reverse = 0;
    for (uint16_t i = 0; i < b.n; ++i) {
      const pkt::PacketDesc& d = b.desc[i];
      if (!(d.flags & pkt::kFlagRoce)) continue;
      ++reverse;
      Feedback(d, rte_pktmbuf_mtod(b.pkts[i], const uint8_t*), now_ns, host);
    }
    if (reverse) Add(PinStageCounter::kReversePackets, reverse);
    if (n_pending_ > 0) FlushFeedback();
    return b.n;
  }

  lb::PinSelector& sel = *sel_;
  const lb::EntropyField field = sel.config().entropy_field;
  // What the fast path reads of the selector, once for the burst (nothing reconfigures it within).
  const lb::PinSelector::FastParams params = sel.Params(field);
  // Locals, not members: a store into a frame may alias any member, which would then be loaded
  // again for every packet.
  lb::PinSelector::BurstTally tally;
  lb::IcrcDeltaCache& icrc = icrc_cache_;
  // Rewritten: every packet but these (one count fewer per packet).
  uint64_t unchanged = 0, refused = 0, untouched = 0;
  // Bytes by verdict: pinned, sprayed, stateless (control packets and table-full fallbacks).
  uint64_t verdict_bytes[3] = {0, 0, 0};
  static_assert(static_cast<int>(lb::Verdict::kPinned) == 0 &&
                static_cast<int>(lb::Verdict::kSprayed) == 1);
  // A local: the rewrite's byte stores may alias any member, so it would be loaded per packet.
  uint64_t* const path_counts = path_counts_.get();
  const uint16_t n = b.n;
  // The loop, inline twice: for the common parameters (no PSN history or path loads, the UDP
  // source port) without their per-packet tests, and for any others.
  auto run = [&](auto plain) __attribute__((always_inline)) {
    constexpr bool kPlain = decltype(plain)::value;
    for (uint16_t i = 0; i < n; ++i) {
      const pkt::PacketDesc& d = b.desc[i];
      rte_mbuf* m = b.pkts[i];
      uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
      lb::PathChoice c;
      lb::RewriteResult r;
      size_t verdict;  // index into verdict_bytes
      // The burst's descs are Parse()'s of these frames (stage.h). The fast path takes only RoCE,
      // and only frames of one segment (its data_len is its pkt_len, which Parse() checked the ICRC
      // against); chained mbufs take the general path.
      if (m->nb_segs == 1 && sel.template TryChooseRewriteWhole<kPlain>(
                                 params, d, frame, now_ns, icrc, tally, &c, &r)) [[likely]] {
        verdict = static_cast<size_t>(c.verdict);  // pinned or sprayed
      } else {
        // Its own locals: c and r, never addressed, stay in registers on the fast path.
        lb::PathChoice general;
        lb::RewriteResult general_rewrite;
        if (!ChooseGeneral(d, m, now_ns, field, &general, &general_rewrite)) {
          ++untouched;
          continue;
        }
        c = general;
        r = general_rewrite;
        verdict = std::min<size_t>(static_cast<size_t>(c.verdict), 2);
      }
      if (r != lb::RewriteResult::kRewritten) [[unlikely]] {
        if (r != lb::RewriteResult::kUnchanged) {
          ++refused;  // headers that do not fit: forwarded as port-fwd would
          continue;
        }
        ++unchanged;
      }
      b.egress[i] = c.path->port;
      const uint32_t bytes = m->pkt_len;
      verdict_bytes[verdict] += bytes;
      // Sets past the reported ones share the last row.
      size_t row = c.set_id;
      if (row > kLbReportedSets) [[unlikely]]
        row = kLbReportedSets;
      path_counts[row * lb::kMaxPaths + c.index] += kOnePathPacket | bytes;  // bytes < 2^40
    }
  };
  if (!params.record_or_track && params.sport_always) [[likely]] {
    run(std::true_type{});
  } else {
    run(std::false_type{});
  }
  sel.Commit(tally);
  // The packed counts hold fewer than 2^24 packets per slot between two folds.
  unfolded_packets_ += n;
  if (unfolded_packets_ >= kFoldPackets) [[unlikely]]
    FoldPathCounts();
  // Every packet has its path's uplink: "port-fwd" has nothing left to do.
  b.all_routed = untouched == 0 && refused == 0;
  const uint64_t rewritten = n - untouched - refused - unchanged;
  if (rewritten) Add(PinStageCounter::kRewritten, rewritten);
  if (unchanged) Add(PinStageCounter::kUnchanged, unchanged);
  if (refused) Add(PinStageCounter::kRewriteRefused, refused);
  if (untouched) Add(PinStageCounter::kUntouchedPackets, untouched);
  if (verdict_bytes[0]) Add(PinStageCounter::kPinnedBytes, verdict_bytes[0]);
  if (verdict_bytes[1]) Add(PinStageCounter::kSprayedBytes, verdict_bytes[1]);
  if (verdict_bytes[2]) Add(PinStageCounter::kStatelessBytes, verdict_bytes[2]);
  return b.n;
}

// Where the fast path declines: Choose() and the general rewrite. False: not RoCE, or no path
// (the packet is left to port-fwd).
bool PinSelectStage::ChooseGeneral(const pkt::PacketDesc& d, rte_mbuf* m, uint64_t now_ns,
                                   lb::EntropyField field, lb::PathChoice* c,
                                   lb::RewriteResult* r) {
  if (!(d.flags & pkt::kFlagRoce)) return false;
  *c = sel_->Choose(d, rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, now_ns);
  if (c->path == nullptr) return false;
  *r = RewriteGeneral(m, d, *c->path, field);
  return true;
}

// The rewrite of a packet the selector's general path placed: Rewrite() when the ICRC lies in
// the first segment, else the headers here and the ICRC patched where it lies (a chained mbuf).
// kMalformed: refused (headers that do not fit, an ICRC that cannot be read).
lb::RewriteResult PinSelectStage::RewriteGeneral(rte_mbuf* m, const pkt::PacketDesc& d,
                                                 const lb::Path& path, lb::EntropyField field) {
  uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
  const size_t len = m->data_len;
  if (static_cast<size_t>(d.icrc_off) + pkt::kIcrcLen <= len) {
    return lb::Rewrite(frame, len, d, path, field, &icrc_cache_);
  }
  uint8_t icrc[pkt::kIcrcLen];
  const auto* at = static_cast<const uint8_t*>(rte_pktmbuf_read(m, d.icrc_off, 4, icrc));
  if (at == nullptr) [[unlikely]] {
    return lb::RewriteResult::kMalformed;
  }
  std::memcpy(icrc, at, sizeof icrc);
  const uint32_t stored = uint32_t{icrc[0]} | uint32_t{icrc[1]} << 8 | uint32_t{icrc[2]} << 16 |
                          uint32_t{icrc[3]} << 24;
  uint32_t delta = 0;
  const lb::RewriteResult r =
      lb::RewriteHeaders(frame, len, d, path, field, stored, &delta, &icrc_cache_);
  if (delta != 0) {
    lb::ApplyIcrcDelta(icrc, delta);
    WriteChain(m, d.icrc_off, icrc, sizeof icrc);
  }
  return r;
}

// One reverse-direction RoCE packet: decode its feedback, pair it with the requests' flow through
// the host index, apply it here or post it to the other workers.
void PinSelectStage::Feedback(const pkt::PacketDesc& d, const uint8_t* frame, uint64_t now_ns,
                              const verbs::HostBacklogIndex* host) {
  const lb::Feedback fb = lb::DecodeFeedback(d);
  if (fb.kind == lb::FeedbackKind::kNone) return;
  if (host == nullptr) {
    Add(PinStageCounter::kJoinNoIndex, 1);
    return;
  }
  const uint32_t qpn = host->PairedDestQpn(SourceAddress(frame, d), d.dest_qp & lb::kPsnMask);
  if (qpn == verbs::HostBacklogIndex::kNoPair) {
    Add(PinStageCounter::kJoinNoPair, 1);
    return;
  }
  const uint64_t hash = lb::PinSelector::HashReverse(frame, d, qpn);
  if (sel_->mutable_flows().Find(hash, qpn) != nullptr) {
    sel_->OnFeedback(hash, qpn, fb, now_ns);
    Add(PinStageCounter::kJoinedLocal, 1);
    return;
  }
  if (o_.control->num_workers() == 1) {
    Add(PinStageCounter::kJoinNoFlow, 1);
    return;
  }
  // Another worker's flow, maybe (RSS put the requests there). Consecutive acknowledgements of one
  // flow become one message carrying the latest PSN.
  if (n_pending_ > 0 && fb.kind == lb::FeedbackKind::kAck) {
    FeedbackMessage& last = pending_[n_pending_ - 1];
    if (last.flow_hash == hash && last.request_qpn == qpn &&
        last.kind == static_cast<uint8_t>(lb::FeedbackKind::kAck) && last.ce == fb.ce) {
      if (lb::PsnAfter(fb.psn, last.psn)) last.psn = fb.psn;
      return;
    }
  }
  pending_[n_pending_++] =
      FeedbackMessage{hash, qpn, fb.psn, static_cast<uint8_t>(fb.kind), fb.ce, {}};
}

void PinSelectStage::FlushFeedback() {
  const int n = o_.control->num_workers();
  uint64_t full = 0;
  for (uint16_t j = 0; j < n_pending_; ++j) {
    for (int w = 0; w < n; ++w) {
      FeedbackRing* ring = o_.control->ring(o_.worker, w);
      if (ring != nullptr && !ring->TryPush(pending_[j])) ++full;
    }
  }
  if (full) Add(PinStageCounter::kJoinRingFull, full);
  n_pending_ = 0;
}

void PinSelectStage::DrainFeedback() {
  const int n = o_.control->num_workers();
  uint64_t now_ns = 0;
  uint64_t joined = 0, no_flow = 0;
  for (int w = 0; w < n; ++w) {
    FeedbackRing* ring = o_.control->ring(w, o_.worker);
    if (ring == nullptr) continue;  // w == this worker
    FeedbackMessage m;
    for (uint32_t k = 0; k < o_.drain_budget && ring->TryPop(&m); ++k) {
      if (sel_->mutable_flows().Find(m.flow_hash, m.request_qpn) == nullptr) {
        ++no_flow;  // not ours (or no longer tracked)
        continue;
      }
      if (now_ns == 0) now_ns = NowNs();
      lb::Feedback fb;
      fb.kind = static_cast<lb::FeedbackKind>(m.kind);
      fb.psn = m.psn;
      fb.ce = m.ce != 0;
      sel_->OnFeedback(m.flow_hash, m.request_qpn, fb, now_ns);
      ++joined;
    }
  }
  if (joined) Add(PinStageCounter::kJoinedRemote, joined);
  if (no_flow) Add(PinStageCounter::kJoinNoFlow, no_flow);
}

void PinSelectStage::Poll(WorkerContext& ctx) {
  (void)ctx;
  // Quiescent first, then read: see lb_control.h on why the selector may keep the table.
  o_.control->Quiescent(o_.worker);
  const LbParams& p = o_.control->params();
  if (p.generation != applied_generation_) Apply(p);
  // No index, no join: no feedback can reach the selector, so it records no per-PSN paths.
  const bool expected = o_.control->has_host_backlog();
  if (expected != sel_->feedback_expected()) sel_->SetFeedbackExpected(expected);
  if (o_.control->num_workers() > 1) DrainFeedback();
  if (++polls_ < o_.housekeep_every) return;  // a count, not a division per poll
  polls_ = 0;
  const lb::FlowTable& flows = sel_->flows();
  sel_->SweepIdle(sweep_cursor_, o_.sweep_slice, NowNs());
  sweep_cursor_ += o_.sweep_slice;
  if (sweep_cursor_ >= flows.capacity()) sweep_cursor_ = 0;
  Publish();
}

void PinSelectStage::SetFoldRows(const lb::PathTable* table) {
  std::array<uint32_t, kLbReportedSets + 1> paths{};  // per row, its largest set
  const size_t sets = table != nullptr ? table->num_sets() : 0;
  for (size_t id = 0; id < sets; ++id) {
    uint32_t& row = paths[std::min<size_t>(id, kLbReportedSets)];
    row = std::max(row, table->set(static_cast<uint32_t>(id)).size);
  }
  num_fold_ranges_ = 0;
  for (size_t row = 0; row < paths.size(); ++row) {
    if (paths[row] == 0) continue;
    const auto begin = static_cast<uint16_t>(row * lb::kMaxPaths);
    fold_ranges_[num_fold_ranges_++] = {begin, static_cast<uint16_t>(begin + paths[row])};
  }
}

void PinSelectStage::FoldPathCounts() {
  uint64_t* const counts = path_counts_.get();
  for (size_t k = 0; k < num_fold_ranges_; ++k) {
    for (size_t slot = fold_ranges_[k].first; slot < fold_ranges_[k].second; ++slot) {
      const uint64_t v = counts[slot];
      if (v == 0) continue;
      counts[slot] = 0;
      std::atomic<uint64_t>& pb = path_bytes_[slot];
      pb.store(pb.load(std::memory_order_relaxed) + (v & (kOnePathPacket - 1)),
               std::memory_order_relaxed);
      std::atomic<uint64_t>& pp = path_packets_[slot];
      pp.store(pp.load(std::memory_order_relaxed) + (v >> kPathPacketShift),
               std::memory_order_relaxed);
    }
  }
  unfolded_packets_ = 0;
}

void PinSelectStage::Publish() {
  FoldPathCounts();
  for (int i = 0; i < lb::kNumLbCounters; ++i) {
    selector_out_[i].store(sel_->counter(static_cast<lb::LbCounter>(i)), std::memory_order_relaxed);
  }
  const lb::FlowTable& flows = sel_->flows();
  Set(PinStageCounter::kFlowsLive, flows.size());
  Set(PinStageCounter::kFlowCapacity, flows.capacity());
  Set(PinStageCounter::kFlowsEvicted,
      flows.counters().evicted_idle + flows.counters().evicted_on_insert);
  const lb::BalancerCounters& bc = sel_->balancer().counters();
  Set(PinStageCounter::kRepsReused, bc.reps_reused);
  Set(PinStageCounter::kRepsExplored, bc.reps_explored);
  Set(PinStageCounter::kRepsRecycled, bc.reps_recycled);
}

}  // namespace heddle::pipeline
