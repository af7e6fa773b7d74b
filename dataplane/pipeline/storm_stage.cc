#include "dataplane/pipeline/storm_stage.h"

#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "dataplane/storm/rewrite.h"
#include "drivers/verbs/host_backlog.h"

namespace heddle::pipeline {

StormTagStage::StormTagStage(const Options& options)
    : o_(options),
      table_(options.table),
      tracker_(storm::TrackerOptions{.mtu = options.mtu}),
      hist_(options.control->histogram(options.worker)),
      reads_(storm::ReadStreamTableOptions{.capacity = options.read_streams,
                                           .idle_ms = options.table.idle_ms}) {
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

namespace {
// Response classes that acknowledge the requests of their QP (storm::DecodeAck).
constexpr bool Acknowledges(pkt::RoceClass c) {
  return c == pkt::RoceClass::kAck || c == pkt::RoceClass::kAtomicAck ||
         c == pkt::RoceClass::kReadResponse;
}
// The same classes leaving the host: it answers as the QP's responder (docs/storm.md §6.6).
constexpr bool IsHostResponse(pkt::RoceClass c) { return Acknowledges(c); }
}  // namespace

// Pairs a packet towards the host with its QP's request direction through the host index, once
// per run of packets of one QP in a burst: true if paired, and then join_memo_hash_ and
// join_memo_qpn_dir_ name the request-direction key — from us to the peer, to the peer's QPN —
// that the QP's requests, and the responses the host sends on it, travel with. `key` is the
// packet's response-direction key: source = the peer, BTH QPN = the local QPN.
bool StormTagStage::ResolvePair(const storm::QpKey& key, const verbs::HostBacklogIndex& host) {
  if (!join_memo_valid_ || !(key == join_memo_key_)) {
    join_memo_valid_ = true;
    join_memo_key_ = key;
    const uint32_t dest_qpn = host.PairedDestQpn(key.src_ip, key.dest_qpn);
    join_memo_paired_ = dest_qpn != verbs::HostBacklogIndex::kNoPair;
    if (join_memo_paired_) {
      // The request direction of the same QP: from us to the peer, to the peer's QPN.
      storm::QpKey req;
      req.direction = storm::Direction::kRequest;
      req.src_ip = key.dst_ip;
      req.dst_ip = key.src_ip;
      req.dest_qpn = dest_qpn;
      join_memo_hash_ = storm::HashKey(req);
      join_memo_qpn_dir_ = storm::QpTable::QpnDir(req);
      join_memo_entry_ = table_.FindHashed(join_memo_hash_, join_memo_qpn_dir_);
    }
  }
  return join_memo_paired_;
}

// The memo's request entry in this worker's table, or nullptr. The response-direction inserts of
// this burst may have reused an idle slot: check it still holds the QP (the key check is on the
// line the caller writes anyway).
storm::QpEntry* StormTagStage::MemoEntry() {
  storm::QpEntry* e = join_memo_entry_;
  if (e != nullptr && e->key_hash == join_memo_hash_ && e->qpn_dir == join_memo_qpn_dir_) return e;
  join_memo_entry_ = nullptr;
  return nullptr;
}

// The response join (docs/storm.md §6.1), for one acknowledging packet towards the host. `key` is
// its response-direction key: source = the peer, BTH QPN = the requester's local QPN.
void StormTagStage::JoinResponse(const storm::QpKey& key, const pkt::PacketDesc& d,
                                 const verbs::HostBacklogIndex& host) {
  uint32_t acked;
  if (storm::DecodeAck(d, &acked) != storm::AckKind::kAck) {
    ++join_.malformed;
    return;
  }
  if (!ResolvePair(key, host)) {
    ++join_.no_pair;
    return;
  }
  if (storm::QpEntry* e = MemoEntry()) {
    ++join_.joined_local;
    tracker_.ApplyAck(*e, acked);
    return;
  }
  if (o_.control->num_workers() == 1) {
    ++join_.no_entry;
    return;
  }
  // Another worker's, maybe (RSS put the QP's requests there). Consecutive acknowledgements of
  // one QP become one message carrying the latest PSN.
  if (n_pending_joins_ > 0) {
    AckMessage& last = pending_joins_[n_pending_joins_ - 1];
    if (last.key_hash == join_memo_hash_ && last.qpn_dir == join_memo_qpn_dir_) {
      if (storm::PsnAfter(acked, last.acked_psn)) last.acked_psn = acked;
      return;
    }
  }
  pending_joins_[n_pending_joins_++] = AckMessage{join_memo_hash_, join_memo_qpn_dir_, acked};
}

// The READ join (docs/storm.md §6.6), for a READ request towards the host: the host will answer
// it with READ responses on the QP's request-direction key, at PSNs from the READ's, carrying its
// RETH length. The worker that sees the QP's outgoing packets — the one holding its request entry
// (the NIC sends a QP's requests and responses from one UDP source port, so RSS puts them on one
// worker) — queues it on the QP's READ stream entry. With one worker that is this one even before
// the QP sent anything.
void StormTagStage::JoinReadRequest(const storm::QpKey& key, const pkt::PacketDesc& d,
                                    const verbs::HostBacklogIndex& host, uint32_t now_ms) {
  if (!(d.flags & pkt::kFlagReth)) {
    ++rj_.malformed;
    return;
  }
  if (!ResolvePair(key, host)) {
    ++rj_.no_pair;
    return;
  }
  const uint32_t psn = d.psn & storm::kPsnMask;
  storm::ReadStreamEntry* s = reads_.Find(join_memo_hash_, join_memo_qpn_dir_);
  if (s == nullptr && (MemoEntry() != nullptr || o_.control->num_workers() == 1)) {
    s = reads_.FindOrInsert(join_memo_hash_, join_memo_qpn_dir_, now_ms, nullptr);
    if (s == nullptr) return;  // the side table is full (counted there)
  }
  if (s != nullptr) {
    s->last_seen = now_ms;
    ++rj_.local;
    read_tracker_.AddPending(*s, psn, d.dma_length);
    return;
  }
  pending_reads_[n_pending_reads_++] =
      ReadMessage{join_memo_hash_, join_memo_qpn_dir_, psn, d.dma_length, 0};
}

// Posts the burst's acknowledgements for other workers to each of them: which one holds the
// request entry is not known here (the requests' RSS hash is not the responses').
void StormTagStage::FlushJoins() {
  const int n = o_.control->num_workers();
  for (uint16_t j = 0; j < n_pending_joins_; ++j) {
    for (int w = 0; w < n; ++w) {
      if (w == o_.worker) continue;
      if (!o_.control->ack_ring(o_.worker, w)->TryPush(pending_joins_[j])) ++join_.ring_full;
    }
  }
  n_pending_joins_ = 0;
}

// Posts the burst's READ requests for other workers to each of them (which one sees the QP's
// outgoing packets is not known here).
void StormTagStage::FlushReads() {
  const int n = o_.control->num_workers();
  for (uint16_t j = 0; j < n_pending_reads_; ++j) {
    for (int w = 0; w < n; ++w) {
      if (w == o_.worker) continue;
      if (!o_.control->read_ring(o_.worker, w)->TryPush(pending_reads_[j])) ++rj_.ring_full;
    }
  }
  n_pending_reads_ = 0;
}

// Queues the READs other workers joined for QPs this worker tracks (from Poll()).
void StormTagStage::DrainReads() {
  const int n = o_.control->num_workers();
  uint32_t now_ms = 0;
  bool have_now = false;
  for (int w = 0; w < n; ++w) {
    if (w == o_.worker) continue;
    ReadRing* ring = o_.control->read_ring(w, o_.worker);
    ReadMessage m;
    for (uint32_t k = 0; k < o_.drain_budget && ring->TryPop(&m); ++k) {
      if (!have_now) {
        now_ms = NowMs();
        have_now = true;
      }
      storm::ReadStreamEntry* s = reads_.Find(m.key_hash, m.qpn_dir);
      if (s == nullptr) {
        if (table_.FindHashed(m.key_hash, m.qpn_dir) == nullptr) {
          ++rj_.no_entry;  // not ours (or no longer tracked)
          continue;
        }
        s = reads_.FindOrInsert(m.key_hash, m.qpn_dir, now_ms, nullptr);
        if (s == nullptr) continue;  // the side table is full (counted there)
      }
      s->last_seen = now_ms;
      ++rj_.remote;
      read_tracker_.AddPending(*s, m.psn, m.size);
    }
  }
}

// Applies what other workers joined to entries of this worker's table (from Poll(), outside any
// burst).
void StormTagStage::DrainJoins() {
  const int n = o_.control->num_workers();
  for (int w = 0; w < n; ++w) {
    if (w == o_.worker) continue;
    AckRing* ring = o_.control->ack_ring(w, o_.worker);
    AckMessage m;
    for (uint32_t k = 0; k < o_.drain_budget && ring->TryPop(&m); ++k) {
      storm::QpEntry* e = table_.FindHashed(m.key_hash, m.qpn_dir);
      if (e == nullptr) {
        ++join_.no_entry;  // not ours (or no longer tracked)
        continue;
      }
      ++join_.joined_remote;
      tracker_.ApplyAck(*e, m.acked_psn);
    }
  }
}

// A packet the host sends as the QP's responder — a READ response, an ACK/NAK or an atomic ACK —
// on the QP's request-direction entry (docs/storm.md §6.6). They carry the PSNs of the peer's
// requests, which the QP's own requests do not share, so the request tracker leaves them alone;
// the in-order guard's `ceiling` still applies (one queue per QP in heddled). Two more rules keep
// the QP in order in the fabric in per-message mode:
//   * the response window: a new READ response stream, an ACK or an atomic ACK never takes a level
//     above the QP's last READ response for response_window_ms after it was tagged. An ACK past an
//     outstanding READ's responses makes the requester re-issue the READ (implied NAK), and a
//     stream overtaking the one before it is a sequence error. Nothing acknowledges responses, so
//     time stands in for the acknowledgement the request side has; every packet of the chain is
//     capped, so the newest READ response holds the lowest level still possibly in the fabric.
//     A response overtaking an earlier ACK is harmless: it acknowledges the same requests.
//   * held_level does not rise while the QP's own requests are unacknowledged (the fabric guard
//     caps their next one at it, §6.5); responses are not capped by that window themselves.
//
// The decisions are storm::ResponseCeiling(), ReadResponseLevel(), AckLevel() and
// HoldResponseLevel() (dataplane/storm/guard.h), which heddle-sim calls too; the stage finds the
// READ stream in its side table and feeds the stream tracker.
uint8_t StormTagStage::TagHostResponse(storm::QpEntry& e, const pkt::PacketDesc& d, uint64_t hash,
                                       uint32_t qpn_dir, uint64_t backlog, uint8_t ceiling,
                                       const storm::LevelConfig& L, uint32_t now_ms, bool joined) {
  ceiling = storm::ResponseCeiling(L, ceiling);
  // The response window applies in per-message mode with the fabric guard (0: off).
  const uint32_t window_ms = o_.fabric_guard ? o_.response_window_ms : 0;
  uint8_t level;
  if (d.roce_class == pkt::RoceClass::kReadResponse) {
    storm::ReadStreamEntry* s = reads_.FindOrInsert(hash, qpn_dir, now_ms, nullptr);
    if (s == nullptr) [[unlikely]] {
      // The side table refused the QP: its responses share the default level, as without it.
      level = std::min(storm::DefaultLevel(L, o_.mtu), ceiling);
    } else {
      const storm::StreamResult r = read_tracker_.OnResponse(*s, d);
      if (r.size_sample) hist_->Add(r.size_sample);
      // B: the READs queued behind this one at the responder (host source), or the QP's packets
      // queued in heddled (egress source).
      level = storm::ReadResponseLevel(L, *s, r, o_.backlog_source, backlog, ceiling, o_.mtu,
                                       window_ms, now_ms, rj_.response_guarded);
    }
  } else {
    const storm::ReadStreamEntry* s =
        L.mode == storm::Mode::kPerMessage && window_ms > 0 && reads_.size() > 0
            ? reads_.Find(hash, qpn_dir)
            : nullptr;
    level = storm::AckLevel(L, s, ceiling, window_ms, now_ms, rj_.response_guarded);
  }
  storm::HoldResponseLevel(e, level, joined && o_.fabric_guard);
  return level;
}

uint16_t StormTagStage::Process(WorkerContext& ctx, Burst& b) {
  const storm::LevelConfig& L = o_.control->levels();
  const uint32_t now_ms = NowMs();
  if (b.ingress >= kMaxPorts || !o_.host_ports.test(b.ingress)) {
    // Towards the host: no rewrite, no request tracking. Control classes leave first, but the
    // in-order guard holds here too: a remote READ request must not overtake its QP's WRITE
    // packets queued for the host, nor an ACK the READ responses before it (implied NAK). CNPs
    // are not PSN-ordered and are never capped. Acknowledgements are joined to their requests.
    const verbs::HostBacklogIndex* host =
        o_.backlog_source == storm::BacklogSource::kHostShim ? o_.control->host_backlog() : nullptr;
    join_memo_valid_ = false;
    for (uint16_t i = 0; i < b.n; ++i) {
      const pkt::PacketDesc& d = b.desc[i];
      if (!(d.flags & pkt::kFlagRoce)) continue;
      if (d.roce_class == pkt::RoceClass::kCnp) {
        b.level[i] = L.control_level;
        continue;
      }
      const storm::QpKey key = storm::KeyFromPacket(rte_pktmbuf_mtod(b.pkts[i], const uint8_t*), d,
                                                    storm::Direction::kResponse);
      if (host != nullptr) {
        if (Acknowledges(d.roce_class)) {
          JoinResponse(key, d, *host);
        } else if (d.roce_class == pkt::RoceClass::kReadRequest) {
          JoinReadRequest(key, d, *host, now_ms);  // §6.6
        }
      }
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
    if (n_pending_joins_ > 0) FlushJoins();
    if (n_pending_reads_ > 0) FlushReads();
    CountTableFull(ctx.stats());
    return b.n;
  }
  const verbs::HostBacklogIndex* host =
      o_.backlog_source == storm::BacklogSource::kHostShim ? o_.control->host_backlog() : nullptr;
  const bool per_message = L.mode == storm::Mode::kPerMessage;
  if (++burst_no_ == 0) burst_no_ = 1;  // 0 is "not marked"
  uint16_t n_marked = 0;

  // Pass 1: hash every RoCE packet's key; a QP seen recently has its slot remembered (its entry
  // line is prefetched), any other gets its two tag lines prefetched. Pass 2: read those tags,
  // prefetch the entry line they name (QpTable::Probe()). Pass 3: look up (the slot is a hint the
  // lookup verifies), track, tag, rewrite. The misses of a burst overlap instead of being paid
  // one after another.
  constexpr uint32_t kNeedsProbe = storm::QpTable::kNoSlot - 1;  // never a slot (<= 16 M)
  uint16_t idx[kMaxBurst];
  uint32_t hint[kMaxBurst];
  uint16_t n_roce = 0;
  uint16_t n_probe = 0;
  uint32_t class_mask = 0;  // bit c set if the burst holds a RoCE packet of class c
  for (uint16_t i = 0; i < b.n; ++i) {
    const pkt::PacketDesc& d = b.desc[i];
    if (!(d.flags & pkt::kFlagRoce)) continue;
    class_mask |= 1u << static_cast<unsigned>(d.roce_class);
    const uint64_t h = storm::HashPacket(rte_pktmbuf_mtod(b.pkts[i], const uint8_t*), d,
                                         storm::Direction::kRequest);
    hash_[n_roce] = h;
    const RecentSlot& r = recent_[h & (kRecentSlots - 1)];
    if (r.hash == h) {
      hint[n_roce] = r.slot;
      table_.PrefetchSlot(r.slot);
    } else {
      hint[n_roce] = kNeedsProbe;
      table_.Prefetch(h);
      ++n_probe;
    }
    idx[n_roce++] = i;
  }
  // A run of one QP's packets (a NIC sends a message's packets back to back) is probed once.
  for (uint16_t j = 0; n_probe != 0 && j < n_roce; ++j) {
    if (hint[j] != kNeedsProbe) continue;
    hint[j] = j > 0 && hash_[j] == hash_[j - 1] ? hint[j - 1] : table_.Probe(hash_[j]);
    // Remembered as the lookup would: a hint that proves wrong is replaced when it is used.
    if (hint[j] != storm::QpTable::kNoSlot) {
      recent_[hash_[j] & (kRecentSlots - 1)] = {hash_[j], hint[j]};
    }
  }

  // The headers are in the first segment (the parser read them there), so the rewrite touches
  // only that one. Per-level packets and bytes are summed here and added once per burst.
  uint32_t level_packets[storm::kMaxLevels] = {};
  uint64_t level_bytes[storm::kMaxLevels] = {};
  const uint8_t default_level = storm::DefaultLevel(L, o_.mtu);
  const int top_level = storm::TopLevel(L);
  storm::QpEntry* prev_entry = nullptr;  // the entry of the previous RoCE packet (j - 1)
  // The fabric guard needs the response join, which needs the host index (§6.5).
  const bool fabric_guard = per_message && host != nullptr && o_.fabric_guard;
  bool any_pcp = false;
  for (int l = 0; l <= top_level; ++l) any_pcp |= L.pcp[l] >= 0;
  // With nothing waiting in the worker's egress queues no QP has packets queued from earlier
  // bursts: every QP's egress backlog is 0 and needs no per-burst mark.
  const bool egress_idle = b.egress_backlog == 0;
  // The lean path: a burst of WRITE and SEND packets, per-message mode, no backlog to look up (the
  // egress queues are empty, or no backlog source), no host index, no PCP. It does what the
  // general loop below does for such a burst — same levels, rewrites, entry state and counters
  // (storm_lean_test compares them on random traffic) — without its questions per packet.
  constexpr uint32_t kLeanClasses = 1u << static_cast<unsigned>(pkt::RoceClass::kWrite) |
                                    1u << static_cast<unsigned>(pkt::RoceClass::kSend);
  if (o_.lean && per_message && host == nullptr && !any_pcp && (class_mask & ~kLeanClasses) == 0 &&
      (o_.backlog_source == storm::BacklogSource::kNone ||
       (o_.backlog_source == storm::BacklogSource::kEgressQueue && egress_idle))) {
    const uint8_t top = static_cast<uint8_t>(top_level);
    const uint32_t mtu = o_.mtu;
    const uint32_t unknown_size = L.unknown_size;  // per-message: UnknownBytes(L)
    // Everything a packet needs is loaded into locals before its first store: the byte stores
    // (entry fields, the frame, Burst::level) may alias anything, and would make the compiler
    // load it all again.
    uint8_t dscp[storm::kMaxLevels];
    std::memcpy(dscp, L.dscp.data(), sizeof(dscp));
    const std::array<uint32_t, storm::kMaxLevels - 1> cutoffs = L.cutoffs;
    uint32_t one_packet = 0;  // one-packet requests, added to the tracker's counters at the end
    // The last one-packet request's remaining bytes and their level against the cutoffs: a burst
    // of small messages mostly repeats a size (never ~0: R is at most 2^32).
    uint64_t memo_remaining = ~uint64_t{0};
    uint8_t memo_unboosted = 0;
    // The previous RoCE packet's QP (hash 0: none; HashKey is never 0) and entry.
    uint64_t prev_hash = 0;
    uint32_t prev_qpn_dir = 0;
    storm::QpEntry* e = nullptr;
    for (uint16_t j = 0; j < n_roce; ++j) {
      const uint16_t i = n_roce == b.n ? j : idx[j];
      const pkt::PacketDesc& d = b.desc[i];
      rte_mbuf* const m = b.pkts[i];
      uint8_t* const frame = rte_pktmbuf_mtod(m, uint8_t*);
      const uint32_t pkt_len = m->pkt_len;
      const uint16_t dflags = d.flags;
      const pkt::L3 l3 = d.l3;
      const uint16_t l3_off = d.l3_off;
      const uint32_t qpn_dir = d.dest_qp & storm::kQpnMask;  // Direction::kRequest is 0
      const storm::RequestKind kind = d.roce_class == pkt::RoceClass::kWrite
                                          ? storm::RequestKind::kWrite
                                          : storm::RequestKind::kSend;
      const uint64_t h = hash_[j];
      storm::InsertResult ir = storm::InsertResult::kFound;
      // The previous packet's QP: its entry holds that packet (egress_queued > 0), so nothing
      // evicted it since, and its last_seen is now_ms already.
      if (h != prev_hash || qpn_dir != prev_qpn_dir) {
        e = table_.FindAt(hint[j], h, qpn_dir);
        if (e != nullptr) [[likely]] {
          e->last_seen = now_ms;  // the hint was remembered or probed: recent_ holds it
        } else {
          e = table_.FindOrInsertHashed(h, qpn_dir, now_ms, &ir);
          if (e != nullptr) recent_[h & (kRecentSlots - 1)] = {h, table_.SlotOf(e)};
        }
        prev_hash = e != nullptr ? h : 0;
        prev_qpn_dir = qpn_dir;
      }
      uint8_t level;
      if (e != nullptr) [[likely]] {
        if (ir != storm::InsertResult::kFound) [[unlikely]] {
          uint32_t ip4 = 0;
          if (l3 == pkt::L3::kIpv4) std::memcpy(&ip4, frame + l3_off + 16, 4);
          e->dst_ip4 = ip4;
        }
        // The in-order guard's cap, clamped as TagPacketTop() clamps it.
        const uint8_t ceiling = storm::InOrderCeiling(*e, /*per_message=*/true, top);
        const uint16_t ends = dflags & (pkt::kFlagFirst | pkt::kFlagLast);
        uint32_t sent_before, size_sample;
        if (ends == 0 && (e->flags & storm::kEntryLevelValid) &&
            tracker_.TryContinue(*e, d, kind, &sent_before)) {
          level = std::min(e->level, ceiling);  // per-message: the request's level
        } else if (ends == (pkt::kFlagFirst | pkt::kFlagLast) &&
                   tracker_.TryOnePacket(
                       *e, d, kind, unknown_size,
                       [&](uint64_t r) {
                         if (r != memo_remaining) [[unlikely]] {
                           memo_remaining = r;
                           memo_unboosted = storm::UnboostedLevel(cutoffs, top, r);
                         }
                         return std::min(memo_unboosted, ceiling);
                       },
                       &level, &size_sample)) {
          ++one_packet;  // a whole message: a new request, its level for good
          if (size_sample) hist_->Add(size_sample);
        } else {
          const storm::TrackResult t = tracker_.OnRequestPacket(*e, d);
          if (t.size_sample) hist_->Add(t.size_sample);
          level = storm::TagPacketTop(L, top_level, e, d, t, 0, mtu, ceiling);
        }
        e->held_level = level;
        ++e->egress_queued;
        b.held[i] = &e->egress_queued;
      } else {
        level = default_level;  // the table refused the QP (WRITE and SEND: no control class)
      }
      ++level_packets[level];
      level_bytes[level] += pkt_len;
      b.level[i] = level;
      storm::SetDscpAt(frame + l3_off, l3, dscp[level]);
    }
    tracker_.CountOnePacketRequests(one_packet);
    ++lean_bursts_;
    lean_one_packet_ += one_packet;
  } else {
    for (uint16_t j = 0; j < n_roce; ++j) {
      const uint16_t i = n_roce == b.n ? j : idx[j];
      const pkt::PacketDesc& d = b.desc[i];
      uint8_t* frame = rte_pktmbuf_mtod(b.pkts[i], uint8_t*);
      uint8_t level;
      if (d.roce_class == pkt::RoceClass::kCnp) [[unlikely]] {
        // Congestion notifications are not PSN-ordered: never capped behind the QP's data, so the
        // sender's rate control hears of congestion at once.
        level = L.control_level;
        prev_entry = nullptr;
      } else {
        const uint32_t qpn_dir =
            (d.dest_qp & storm::kQpnMask) | static_cast<uint32_t>(storm::Direction::kRequest) << 24;
        storm::InsertResult ir;
        storm::QpEntry* e;
        if (prev_entry != nullptr && hash_[j] == hash_[j - 1] && prev_entry->qpn_dir == qpn_dir) {
          // The previous packet's QP: its entry holds that packet (egress_queued > 0), so nothing
          // evicted it since, and its last_seen is now_ms already.
          e = prev_entry;
          ir = storm::InsertResult::kFound;
        } else {
          e = table_.FindOrInsertHashed(hash_[j], qpn_dir, now_ms, &ir, hint[j]);
          if (e != nullptr) recent_[hash_[j] & (kRecentSlots - 1)] = {hash_[j], table_.SlotOf(e)};
        }
        prev_entry = e;
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
              if (egress_idle) break;
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
          uint8_t ceiling = storm::InOrderCeiling(*e, per_message, top_level);
          if (fabric_guard) {
            ceiling = std::min(ceiling, storm::FabricCeiling(*e, t, join_.fabric_guarded));  // §6.5
          }
          if (IsHostResponse(d.roce_class)) [[unlikely]] {
            // The host answers as the QP's responder: READ responses, ACKs, atomic ACKs (§6.6).
            level = TagHostResponse(*e, d, hash_[j], qpn_dir, backlog, ceiling, L, now_ms,
                                    per_message && host != nullptr);
          } else {
            level = storm::TagPacketTop(L, top_level, e, d, t, backlog, o_.mtu, ceiling);
            e->held_level = level;
          }
          ++e->egress_queued;
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
      if (any_pcp && L.pcp[level] >= 0) storm::SetPcp(frame, d, L.pcp[level]);
      ++level_packets[level];
      level_bytes[level] += b.pkts[i]->pkt_len;
    }
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
  if (o_.control->num_workers() > 1) {
    DrainJoins();
    DrainReads();
  }
  if (++polls_ % o_.housekeep_every != 0) return;
  const uint32_t now_ms = NowMs();
  Housekeep(now_ms);
  ScanForQuery(now_ms);
}

void StormTagStage::Housekeep(uint32_t now_ms) {
  table_.SweepIdleRange(sweep_cursor_, o_.sweep_slice, now_ms);
  sweep_cursor_ += o_.sweep_slice;
  if (sweep_cursor_ >= table_.capacity()) sweep_cursor_ = 0;
  reads_.SweepIdleRange(read_sweep_cursor_, o_.sweep_slice, now_ms);
  read_sweep_cursor_ += o_.sweep_slice;
  if (read_sweep_cursor_ >= reads_.capacity()) read_sweep_cursor_ = 0;
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
  c.resp_joined_local = join_.joined_local;
  c.resp_joined_remote = join_.joined_remote;
  c.resp_no_pair = join_.no_pair;
  c.resp_no_entry = join_.no_entry;
  c.resp_ring_full = join_.ring_full;
  c.resp_malformed = join_.malformed;
  c.acks_advanced = r.acks;
  c.acks_old = r.acks_old;
  c.acks_ahead = r.acks_ahead;
  c.fabric_guarded = join_.fabric_guarded;
  const storm::ReadStreamCounters& rs = read_tracker_.counters();
  c.read_sized = rs.started_sized;
  c.read_unknown = rs.started_unknown;
  c.read_orphans = rs.orphans;
  c.read_late = rs.late_joins;
  c.read_duplicates = rs.duplicates;
  c.read_psn_jumps = rs.psn_jumps;
  c.read_abandoned = rs.abandoned;
  c.read_overrun = rs.overrun;
  c.read_malformed = rs.malformed;
  const storm::ReadStreamTableCounters& rt = reads_.counters();
  c.read_live = reads_.size();
  c.read_capacity = reads_.capacity();
  c.read_table_full = rt.table_full;
  c.read_evicted = rt.evicted_idle + rt.evicted_on_insert;
  c.response_guarded = rj_.response_guarded;
  c.rreq_local = rj_.local;
  c.rreq_remote = rj_.remote;
  c.rreq_no_pair = rj_.no_pair;
  c.rreq_no_entry = rj_.no_entry;
  c.rreq_ring_full = rj_.ring_full;
  c.rreq_malformed = rj_.malformed;
  c.rreq_pending_full = rs.pending_full;
  c.rreq_stale = rs.stale;
  c.rreq_too_late = rs.too_late;
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
    r.acked_psn = e.acked_psn;  // this worker is its only writer
    r.unacked = storm::UnacknowledgedPackets(e, o_.mtu);
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
