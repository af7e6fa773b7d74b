#include "dataplane/pipeline/storm_stage.h"

#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "dataplane/storm/rewrite.h"
#include "drivers/verbs/host_backlog.h"

namespace heddle::pipeline {

StormTagStage::StormTagStage(const Options& options)
    : o_(options),
      table_(options.table),
      tracker_(storm::TrackerOptions{.mtu = options.mtu}),
      hist_(options.control->histogram(options.worker)) {
  if (!o_.clock) tsc_per_ms_ = std::max<uint64_t>(rte_get_tsc_hz() / 1000, 1);
  if (o_.housekeep_every == 0) o_.housekeep_every = 1;
  rows_.reserve(StormControl::kMaxTopQps);
}

uint32_t StormTagStage::NowMs() const {
  // Coarse and wrapping: the table compares last_seen by difference.
  return o_.clock ? o_.clock() : static_cast<uint32_t>(rte_get_tsc_cycles() / tsc_per_ms_);
}

// B from the host shim: the bytes the application posted on this QP and that have not completed,
// less the current request's own size when it is known (B is the work queued *behind* it).
// Looked up when a request starts (and per packet in per-packet mode) and cached in the entry.
uint64_t StormTagStage::HostBacklog(storm::QpEntry& e, const uint8_t* frame,
                                    const pkt::PacketDesc& d, const storm::TrackResult& t,
                                    const verbs::HostBacklogIndex* host, bool every_packet) {
  const bool starts =
      t.outcome == storm::TrackOutcome::kStart || t.outcome == storm::TrackOutcome::kOrphan;
  if (host != nullptr &&
      (starts || (every_packet && t.outcome == storm::TrackOutcome::kContinue))) {
    const storm::QpKey k = storm::KeyFromPacket(frame, d, storm::Direction::kRequest);
    const uint64_t bytes = host->LookupBytes(k.dst_ip, k.dest_qpn);
    if (bytes != 0) ++host_hits_;
    e.host_backlog = static_cast<uint32_t>(std::min<uint64_t>(bytes, UINT32_MAX));
  }
  uint64_t b = e.host_backlog;
  if (e.flags & storm::kEntrySizeKnown) b = b > e.size ? b - e.size : 0;
  return b;
}

uint16_t StormTagStage::Process(WorkerContext& ctx, Burst& b) {
  const storm::LevelConfig& L = o_.control->levels();
  const uint32_t now_ms = NowMs();
  if (b.ingress >= kMaxPorts || !o_.host_ports.test(b.ingress)) {
    // Towards the host: no rewrite, no request tracking. Control classes leave first, but the
    // in-order guard holds here too: a remote READ request must not overtake its QP's WRITE
    // packets queued for the host, nor an ACK the READ responses before it (implied NAK). CNPs
    // are not PSN-ordered and are never capped.
    for (uint16_t i = 0; i < b.n; ++i) {
      const pkt::PacketDesc& d = b.desc[i];
      if (!(d.flags & pkt::kFlagRoce)) continue;
      if (d.roce_class == pkt::RoceClass::kCnp) {
        b.level[i] = L.control_level;
        continue;
      }
      const storm::QpKey key = storm::KeyFromPacket(rte_pktmbuf_mtod(b.pkts[i], const uint8_t*), d,
                                                    storm::Direction::kResponse);
      storm::QpEntry* e = table_.FindOrInsertHashed(storm::HashKey(key),
                                                    storm::QpTable::QpnDir(key), now_ms, nullptr);
      if (e == nullptr) {
        b.level[i] = 0;  // untracked: one level for the whole QP
        continue;
      }
      uint8_t level = storm::IsControlClass(d.roce_class) ? L.control_level : 0;
      if (L.mode == storm::Mode::kPerMessage && e->egress_queued > 0) {
        level = std::min(level, e->held_level);
      }
      ++e->egress_queued;
      e->held_level = level;
      b.held[i] = &e->egress_queued;
      b.level[i] = level;
    }
    CountTableFull(ctx.stats());
    return b.n;
  }
  const verbs::HostBacklogIndex* host =
      o_.backlog_source == storm::BacklogSource::kHostShim ? o_.control->host_backlog() : nullptr;
  const bool per_message = L.mode == storm::Mode::kPerMessage;
  if (++burst_no_ == 0) burst_no_ = 1;  // 0 is "not marked"
  uint16_t n_marked = 0;

  // Pass 1: hash every RoCE packet's key and prefetch its two tag lines. Pass 2: read the tags,
  // prefetch the entry line they name. Pass 3: look up, track, tag, rewrite. The misses of a
  // burst overlap instead of being paid one after another (QpTable::Probe()).
  uint16_t idx[kMaxBurst];
  uint16_t n_roce = 0;
  for (uint16_t i = 0; i < b.n; ++i) {
    const pkt::PacketDesc& d = b.desc[i];
    if (!(d.flags & pkt::kFlagRoce)) continue;
    hash_[n_roce] = storm::HashPacket(rte_pktmbuf_mtod(b.pkts[i], const uint8_t*), d,
                                      storm::Direction::kRequest);
    table_.Prefetch(hash_[n_roce]);
    idx[n_roce++] = i;
  }
  uint32_t hint[kMaxBurst];
  for (uint16_t j = 0; j < n_roce; ++j) hint[j] = table_.Probe(hash_[j]);

  // The headers are in the first segment (the parser read them there), so the rewrite touches
  // only that one. Per-level packets and bytes are summed here and added once per burst.
  uint32_t level_packets[storm::kMaxLevels] = {};
  uint64_t level_bytes[storm::kMaxLevels] = {};
  const uint8_t default_level = storm::DefaultLevel(L, o_.mtu);
  for (uint16_t j = 0; j < n_roce; ++j) {
    const uint16_t i = idx[j];
    const pkt::PacketDesc& d = b.desc[i];
    uint8_t* frame = rte_pktmbuf_mtod(b.pkts[i], uint8_t*);
    uint8_t level;
    if (d.roce_class == pkt::RoceClass::kCnp) [[unlikely]] {
      // Congestion notifications are not PSN-ordered: never capped behind the QP's data, so the
      // sender's rate control hears of congestion at once.
      level = L.control_level;
    } else {
      const uint32_t qpn_dir =
          (d.dest_qp & storm::kQpnMask) | static_cast<uint32_t>(storm::Direction::kRequest) << 24;
      storm::InsertResult ir;
      storm::QpEntry* e = table_.FindOrInsertHashed(hash_[j], qpn_dir, now_ms, &ir, hint[j]);
      if (e != nullptr) [[likely]] {
        if (ir != storm::InsertResult::kFound) [[unlikely]] {
          uint32_t ip4 = 0;
          if (d.l3 == pkt::L3::kIpv4) std::memcpy(&ip4, frame + d.l3_off + 16, 4);
          e->dst_ip4 = ip4;
        }
        const storm::TrackResult t = tracker_.OnRequestPacket(*e, d);
        if (t.size_sample) hist_->Add(t.size_sample);
        uint64_t backlog = 0;
        switch (o_.backlog_source) {
          case storm::BacklogSource::kEgressQueue:
            // The QP's packets still queued from earlier bursts (not this burst's own packets,
            // which leave with it unless the port pushes back).
            if (e->burst_mark != burst_no_ || ir != storm::InsertResult::kFound) {
              e->burst_mark = burst_no_;
              marked_[n_marked++] = e;  // not evictable before the burst ends: egress_queued > 0
              e->queued_at_mark =
                  static_cast<uint16_t>(std::min<uint32_t>(e->egress_queued, 0xffff));
            }
            backlog = uint64_t{e->queued_at_mark} * o_.mtu;
            break;
          case storm::BacklogSource::kHostShim:
            backlog = HostBacklog(*e, frame, d, t, host, !per_message);
            break;
          default:
            break;
        }
        // In-order guard: a QP's packet never takes a higher level than its packets still held
        // in heddled, so strict priority never reorders a QP (reordering-tolerant per-packet mode
        // excepted).
        const uint8_t ceiling =
            per_message && e->egress_queued > 0 ? e->held_level : storm::kMaxLevels - 1;
        level = storm::TagPacket(L, e, d, t, backlog, o_.mtu, ceiling);
        ++e->egress_queued;
        e->held_level = level;
        b.held[i] = &e->egress_queued;
      } else {
        // The table refused the QP: all its packets share the default level, control classes
        // included, or a READ request would overtake the QP's queued data (no guard without an
        // entry). A control class may still go lower.
        level = storm::IsControlClass(d.roce_class) ? std::min(L.control_level, default_level)
                                                    : default_level;
      }
    }
    b.level[i] = level;
    storm::SetDscp(frame, d, L.dscp[level]);
    if (L.pcp[level] >= 0) storm::SetPcp(frame, d, L.pcp[level]);
    ++level_packets[level];
    level_bytes[level] += b.pkts[i]->pkt_len;
  }
  LcoreStats& stats = ctx.stats();
  for (int l = 0; l < storm::kMaxLevels; ++l) {
    if (level_packets[l] == 0) continue;
    stats.storm_level_packets[l].Add(level_packets[l]);
    stats.storm_level_bytes[l].Add(level_bytes[l]);
  }
  for (uint16_t j = 0; j < n_marked; ++j) marked_[j]->burst_mark = 0;
  CountTableFull(stats);
  return b.n;
}

void StormTagStage::CountTableFull(LcoreStats& stats) {
  const uint64_t full = table_.counters().table_full;
  if (full != table_full_seen_) {
    stats.storm_table_full.Add(full - table_full_seen_);
    table_full_seen_ = full;
  }
}

void StormTagStage::Poll(WorkerContext& ctx) {
  // Outside any burst: nothing read from the control object is held past this point.
  o_.control->Quiescent(o_.worker);
  if (++polls_ % o_.housekeep_every != 0) return;
  const uint32_t now_ms = NowMs();
  Housekeep(now_ms);
  ScanForQuery(now_ms);
}

void StormTagStage::Housekeep(uint32_t now_ms) {
  table_.SweepIdleRange(sweep_cursor_, o_.sweep_slice, now_ms);
  sweep_cursor_ += o_.sweep_slice;
  if (sweep_cursor_ >= table_.capacity()) sweep_cursor_ = 0;
  o_.control->PublishCounters(o_.worker, Counters());
}

StormWorkerCounters StormTagStage::Counters() const {
  StormWorkerCounters c;
  const storm::QpTableCounters& t = table_.counters();
  c.qp_live = table_.size();
  c.qp_capacity = table_.capacity();
  c.qp_inserted = t.inserted;
  c.qp_table_full = t.table_full;
  c.qp_evicted_idle = t.evicted_idle;
  c.qp_evicted_on_insert = t.evicted_on_insert;
  const storm::TrackerCounters& r = tracker_.counters();
  c.requests_started = r.requests_started;
  c.requests_completed = r.requests_completed;
  c.orphans = r.orphans;
  c.abandoned = r.abandoned;
  c.duplicates = r.duplicates;
  c.psn_jumps = r.psn_jumps;
  c.bogus_length = r.bogus_length;
  c.overrun = r.overrun;
  c.host_backlog_hits = host_hits_;
  return c;
}

void StormTagStage::ScanForQuery(uint32_t now_ms) {
  if (scan_seq_ == 0) {
    const StormControl::QpQuery q = o_.control->PendingQuery(o_.worker);
    if (q.seq == 0 || q.seq == answered_seq_) return;
    scan_seq_ = q.seq;
    scan_n_ = std::clamp(q.n, 1, StormControl::kMaxTopQps);
    scan_sort_ = q.sort;
    scan_pos_ = 0;
    rows_.clear();
  }
  const QpSort sort = scan_sort_;
  // Max-heap on "ranks later": rows_.front() is the worst row kept.
  auto worse_first = [sort](const QpRow& a, const QpRow& b) { return QpRowBefore(a, b, sort); };
  const size_t end = std::min(table_.capacity(), scan_pos_ + o_.query_slice);
  for (; scan_pos_ < end; ++scan_pos_) {
    const storm::QpEntry& e = table_.entry(scan_pos_);
    if (e.key_hash == 0) continue;
    QpRow r;
    r.worker = static_cast<uint32_t>(o_.worker);
    r.qpn = storm::EntryQpn(e);
    r.direction = static_cast<uint8_t>(storm::EntryDirection(e));
    r.kind = e.kind;
    r.level = e.level;
    r.flags = e.flags;
    r.dst_ip4 = e.dst_ip4;
    r.size = e.size;
    r.sent = e.sent;
    r.remaining = (e.flags & storm::kEntryInProgress)
                      ? storm::RemainingBytes(e, e.sent, o_.control->levels().unknown_floor)
                      : 0;
    r.egress_held = e.egress_queued;
    r.host_backlog = e.host_backlog;
    r.backlog = storm::BacklogBytes(e, o_.backlog_source, o_.mtu);
    r.completed = e.completed;
    r.idle_ms = now_ms - e.last_seen;
    r.key_hash = e.key_hash;
    if (rows_.size() < static_cast<size_t>(scan_n_)) {
      rows_.push_back(r);
      std::push_heap(rows_.begin(), rows_.end(), worse_first);
    } else if (QpRowBefore(r, rows_.front(), sort)) {
      std::pop_heap(rows_.begin(), rows_.end(), worse_first);
      rows_.back() = r;
      std::push_heap(rows_.begin(), rows_.end(), worse_first);
    }
  }
  if (scan_pos_ < table_.capacity()) return;
  std::sort_heap(rows_.begin(), rows_.end(), worse_first);
  o_.control->Answer(o_.worker, scan_seq_, rows_);
  answered_seq_ = scan_seq_;
  scan_seq_ = 0;
}

}  // namespace heddle::pipeline
