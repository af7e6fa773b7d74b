#include "dataplane/pipeline/storm_stage.h"

#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <utility>

#include "dataplane/storm/rewrite.h"

namespace heddle::pipeline {

StormTagStage::StormTagStage(const storm::LevelConfig& levels, const storm::QpTableOptions& table,
                             uint32_t mtu, std::bitset<kMaxPorts> host_ports, ClockMs clock)
    : levels_(levels),
      table_(table),
      tracker_(storm::TrackerOptions{.mtu = mtu}),
      mtu_(mtu),
      host_ports_(host_ports),
      clock_(std::move(clock)) {
  if (!clock_) tsc_per_ms_ = std::max<uint64_t>(rte_get_tsc_hz() / 1000, 1);
}

uint32_t StormTagStage::NowMs() const {
  // Coarse and wrapping: the table compares last_seen by difference.
  return clock_ ? clock_() : static_cast<uint32_t>(rte_get_tsc_cycles() / tsc_per_ms_);
}

uint16_t StormTagStage::Process(WorkerContext& ctx, Burst& b) {
  // Uplink ports carry the response direction; this step tags requests only.
  if (b.ingress >= kMaxPorts || !host_ports_.test(b.ingress)) return b.n;
  const uint32_t now_ms = NowMs();

  // Pass 1: hash every RoCE packet's key and prefetch its bucket, so the table misses overlap.
  for (uint16_t i = 0; i < b.n; ++i) {
    const pkt::PacketDesc& d = b.desc[i];
    if (!(d.flags & pkt::kFlagRoce)) continue;
    const storm::QpKey key = storm::KeyFromPacket(rte_pktmbuf_mtod(b.pkts[i], const uint8_t*), d,
                                                  storm::Direction::kRequest);
    hash_[i] = storm::HashKey(key);
    table_.Prefetch(hash_[i]);
  }

  // Pass 2: look up, track, tag, rewrite. The headers are in the first segment (the parser read
  // them there), so the rewrite touches only that one.
  LcoreStats& stats = ctx.stats();
  for (uint16_t i = 0; i < b.n; ++i) {
    const pkt::PacketDesc& d = b.desc[i];
    if (!(d.flags & pkt::kFlagRoce)) continue;
    uint8_t* frame = rte_pktmbuf_mtod(b.pkts[i], uint8_t*);
    const uint32_t qpn_dir =
        (d.dest_qp & storm::kQpnMask) | static_cast<uint32_t>(storm::Direction::kRequest) << 24;
    storm::QpEntry* e = table_.FindOrInsertHashed(hash_[i], qpn_dir, now_ms, nullptr);
    const storm::TrackResult t = e ? tracker_.OnRequestPacket(*e, d) : storm::TrackResult{};
    // Backlog 0 for now: the egress-queue (QpEntry::egress_queued) and host-shim
    // (QpEntry::host_backlog) sources are not fed yet; storm.backlog_source comes with them.
    const uint8_t level = storm::TagPacket(levels_, e, d, t, /*backlog=*/0, mtu_);
    storm::SetDscp(frame, d, levels_.dscp[level]);
    if (levels_.pcp[level] >= 0) storm::SetPcp(frame, d, levels_.pcp[level]);
    stats.storm_level_packets[level].Add(1);
    stats.storm_level_bytes[level].Add(b.pkts[i]->pkt_len);
  }
  const uint64_t full = table_.counters().table_full;
  if (full != table_full_seen_) {
    stats.storm_table_full.Add(full - table_full_seen_);
    table_full_seen_ = full;
  }
  return b.n;
}

}  // namespace heddle::pipeline
