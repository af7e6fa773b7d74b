#include "dataplane/pipeline/egress.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <bit>
#include <cassert>

namespace heddle::pipeline {
namespace {

// Packets handed to the driver per call when flushing a level: rte_eth_tx_burst takes a uint16_t
// count, and a driver stops at its free descriptors anyway.
constexpr uint32_t kMaxRun = kMaxBurst;
constexpr unsigned kDrainPauseUs = 10;

inline int LevelOf(uint8_t level) {
  return level < PrioEgress::kLevels ? level : PrioEgress::kLevels - 1;
}

}  // namespace

PrioEgress::PrioEgress(const PrioEgressOptions& o, LcoreStats* stats)
    : num_ports_(std::min<uint16_t>(o.num_ports, kMaxPorts)),
      port_ids_(o.port_ids),
      tx_queue_(o.tx_queue),
      cap_(std::max<uint32_t>(o.queue_packets, 1)),
      dcb_ports_(o.dcb_ports & ((num_ports_ >= 32 ? 0u : 1u << num_ports_) - 1)),
      stats_(stats) {
  // The distinct queues of each DCB port, highest level's first, and the levels on each.
  for (uint16_t p = 0; p < num_ports_; ++p) {
    if (!(dcb_ports_ & (1u << p))) continue;
    DcbGroups& g = groups_[p];
    for (int l = kLevels - 1; l >= 0; --l) {
      const uint16_t queue = o.level_queue[p][l];
      int k = 0;
      while (k < g.n && g.queue[k] != queue) ++k;
      if (k == g.n) g.queue[g.n++] = queue;
      g.of_level[l] = static_cast<uint8_t>(k);
      g.levels[k] |= 1u << l;
    }
  }
  const size_t slots = static_cast<size_t>(num_ports_) * kLevels * cap_;
  mbufs_.reset(new rte_mbuf*[slots]);
  held_.reset(new uint32_t*[slots]);
  for (auto& d : stats_->egress_level_depth) d.store(0, std::memory_order_relaxed);
}

PrioEgress::~PrioEgress() { FreeAll(); }

uint32_t PrioEgress::queued() const {
  uint32_t n = 0;
  for (uint16_t p = 0; p < num_ports_; ++p) n += ports_[p].total;
  return n;
}

uint32_t PrioEgress::queued(uint16_t port) const {
  return port < num_ports_ ? ports_[port].total : 0;
}

uint32_t PrioEgress::queued(uint16_t port, int level) const {
  return port < num_ports_ && level >= 0 && level < kLevels ? ports_[port].level[level].count : 0;
}

void PrioEgress::Send(WorkerContext& ctx, const Burst& b) {
  if (b.n == 0) return;
  // The common case: the whole burst leaves on one software (non-DCB) port that has nothing
  // queued. It goes to the driver as it came; only what the driver refuses is queued, each packet
  // at its level. A DCB port's burst is split by queue in SendSorted().
  // One pass checks the port and sums the bytes and per-level packets before the driver call
  // (after it, the mbufs it took are no longer ours); the refused tail is taken back out.
  const uint16_t p0 = b.egress[0];
  bool one_port = true;
  uint64_t bytes = 0;
  uint16_t per_level[kLevels] = {};
  for (uint16_t i = 0; i < b.n; ++i) {
    one_port &= b.egress[i] == p0;
    bytes += b.pkts[i]->pkt_len;
    ++per_level[LevelOf(b.level[i])];
  }
  if (one_port && !(dcb_ports_ & (1u << p0)) && ports_[p0].total == 0) [[likely]] {
    assert(p0 < num_ports_);
    flushed_ |= 1u << p0;
    // The driver reads the array and takes the mbufs it accepts; it does not write the array.
    const uint16_t sent =
        rte_eth_tx_burst(port_ids_[p0], tx_queue_, const_cast<rte_mbuf**>(b.pkts), b.n);
    for (uint16_t i = sent; i < b.n; ++i) {
      bytes -= b.pkts[i]->pkt_len;
      --per_level[LevelOf(b.level[i])];
    }
    for (uint16_t i = 0; i < sent; ++i) ReleaseHeld(b.held[i]);
    if (sent) {
      stats_->port[p0].tx_packets.Add(sent);
      stats_->port[p0].tx_bytes.Add(bytes);
    }
    for (int l = 0; l < kLevels; ++l) {
      if (per_level[l]) stats_->egress_level_tx[l].Add(per_level[l]);
    }
    if (sent == b.n) return;  // nothing queued: the depth gauges have not moved
    for (uint16_t i = sent; i < b.n; ++i) {
      Enqueue(ctx, p0, b.pkts[i], b.held[i], LevelOf(b.level[i]));
    }
    StoreDepth();
    return;
  }
  SendSorted(ctx, b);
}

void PrioEgress::SendSorted(WorkerContext& ctx, const Burst& b) {
  // Stable counting sort by egress port, arrival order kept: a port that takes the whole burst
  // sends it as it came (no reordering when there is no backpressure); levels matter from the
  // first refused packet on. pos[p] is first the number of packets for port p - 1, then the start
  // of port p, then (after placement) the start of port p + 1.
  uint16_t pos[kMaxPorts + 1];
  std::fill_n(pos, num_ports_ + 1, uint16_t{0});
  uint32_t ports_seen = 0;
  for (uint16_t i = 0; i < b.n; ++i) {
    assert(b.egress[i] < num_ports_);
    ++pos[b.egress[i] + 1];
    ports_seen |= 1u << b.egress[i];
  }
  for (int k = 1; k <= num_ports_; ++k) pos[k] += pos[k - 1];
  for (uint16_t i = 0; i < b.n; ++i) {
    const uint16_t to = pos[b.egress[i]]++;
    sorted_pkts_[to] = b.pkts[i];
    sorted_held_[to] = b.held[i];
    sorted_level_[to] = static_cast<uint8_t>(LevelOf(b.level[i]));
  }

  for (uint32_t mask = ports_seen; mask != 0; mask &= mask - 1) {
    const auto p = static_cast<uint16_t>(std::countr_zero(mask));
    const uint16_t lo = p == 0 ? 0 : pos[p - 1];
    const uint16_t hi = pos[p];
    if (dcb_ports_ & (1u << p)) {
      // Not marked flushed: SendDcb serves only the queues this burst has packets for, so the
      // next Poll() must still retry what waits for the port's other queues.
      SendDcb(ctx, p, lo, hi);
      continue;
    }
    flushed_ |= 1u << p;
    if (ports_[p].total == 0) {
      // Nothing waits on this port: the burst goes straight to the driver in arrival order, and
      // only what it refuses is queued, each packet at its level.
      const uint16_t sent = TxBurst(p, tx_queue_, sorted_pkts_ + lo, sorted_held_ + lo, hi - lo);
      uint16_t per_level[kLevels] = {};
      for (uint16_t i = lo; i < lo + sent; ++i) ++per_level[sorted_level_[i]];
      for (int l = 0; l < kLevels; ++l) {
        if (per_level[l]) stats_->egress_level_tx[l].Add(per_level[l]);
      }
      for (uint16_t i = lo + sent; i < hi; ++i) {
        Enqueue(ctx, p, sorted_pkts_[i], sorted_held_[i], sorted_level_[i]);
      }
    } else {
      // Packets wait already: the new ones queue behind those of their level, then the port is
      // served in strict priority, so a new high-level packet overtakes queued lower ones.
      for (uint16_t i = lo; i < hi; ++i) {
        Enqueue(ctx, p, sorted_pkts_[i], sorted_held_[i], sorted_level_[i]);
      }
      Flush(p);
    }
  }
  StoreDepth();
}

void PrioEgress::SendDcb(WorkerContext& ctx, uint16_t p, uint16_t lo, uint16_t hi) {
  // Stable counting sort by TX queue (group), arrival order kept within a queue.
  const DcbGroups& g = groups_[p];
  uint16_t count[kLevels] = {};
  for (uint16_t i = lo; i < hi; ++i) ++count[g.of_level[sorted_level_[i]]];
  uint16_t start[kLevels], next[kLevels];
  uint16_t at = 0;
  for (int k = 0; k < g.n; ++k) {
    start[k] = next[k] = at;
    at += count[k];
  }
  for (uint16_t i = lo; i < hi; ++i) {
    const uint16_t to = next[g.of_level[sorted_level_[i]]]++;
    level_pkts_[to] = sorted_pkts_[i];
    level_held_[to] = sorted_held_[i];
    level_level_[to] = sorted_level_[i];
  }
  PortQueues& q = ports_[p];
  for (int k = 0; k < g.n; ++k) {
    if (count[k] == 0) continue;
    const uint16_t s0 = start[k], n = count[k];
    if ((q.nonempty & g.levels[k]) == 0) {
      // Nothing waits for this queue: the packets go to it as they came, what it refuses is
      // queued at its level.
      const uint16_t sent = TxBurst(p, g.queue[k], level_pkts_ + s0, level_held_ + s0, n);
      uint16_t per_level[kLevels] = {};
      for (uint16_t i = s0; i < s0 + sent; ++i) ++per_level[level_level_[i]];
      for (int l = 0; l < kLevels; ++l) {
        if (per_level[l]) stats_->egress_level_tx[l].Add(per_level[l]);
      }
      for (uint16_t i = s0 + sent; i < s0 + n; ++i) {
        Enqueue(ctx, p, level_pkts_[i], level_held_[i], level_level_[i]);
      }
    } else {
      // Behind what waits for this queue; then the queue (only) is served.
      for (uint16_t i = s0; i < s0 + n; ++i) {
        Enqueue(ctx, p, level_pkts_[i], level_held_[i], level_level_[i]);
      }
      FlushGroup(p, k);
    }
  }
}

uint32_t PrioEgress::FlushGroup(uint16_t p, int k) {
  PortQueues& q = ports_[p];
  const DcbGroups& g = groups_[p];
  uint32_t total = 0;
  // The queue's waiting levels, highest first (strict priority between the levels sharing a
  // queue), until the queue refuses a packet.
  while ((q.nonempty & g.levels[k]) != 0) {
    const int level = std::bit_width(q.nonempty & g.levels[k]) - 1;
    LevelQueue& lq = q.level[level];
    const size_t base = Slot(p, level, 0);
    while (lq.count != 0) {
      const auto run = static_cast<uint16_t>(std::min({lq.count, cap_ - lq.head, kMaxRun}));
      const uint16_t sent =
          TxBurst(p, g.queue[k], &mbufs_[base + lq.head], &held_[base + lq.head], run);
      if (sent) stats_->egress_level_tx[level].Add(sent);
      lq.head = Wrap(lq.head + sent);
      lq.count -= sent;
      q.total -= sent;
      depth_[level] -= sent;
      total += sent;
      if (sent < run) return total;  // this queue is full; the other queues are not held back
    }
    lq.head = 0;
    q.nonempty &= ~(1u << level);
  }
  return total;
}

void PrioEgress::Enqueue(WorkerContext& ctx, uint16_t p, rte_mbuf* m, uint32_t* held, int level) {
  PortQueues& q = ports_[p];
  if (q.total == cap_) [[unlikely]] {
    // Full: push out the newest packet of the lowest waiting level if that level is below the
    // arrival's, else refuse the arrival. q.nonempty != 0 here since cap_ >= 1.
    const int lowest = std::countr_zero(q.nonempty);
    if (lowest >= level) {
      DropFull(ctx, m, held, level);
      return;
    }
    LevelQueue& victim = q.level[lowest];
    const size_t s = Slot(p, lowest, Wrap(victim.head + victim.count - 1));
    --victim.count;
    --q.total;
    --depth_[lowest];
    if (victim.count == 0) {
      victim.head = 0;
      q.nonempty &= ~(1u << lowest);
    }
    DropFull(ctx, mbufs_[s], held_[s], lowest);
  }
  LevelQueue& lq = q.level[level];
  const size_t s = Slot(p, level, Wrap(lq.head + lq.count));
  mbufs_[s] = m;
  held_[s] = held;
  ++lq.count;
  ++q.total;
  ++depth_[level];
  q.nonempty |= 1u << level;
}

void PrioEgress::DropFull(WorkerContext& ctx, rte_mbuf* m, uint32_t* held, int level) {
  ReleaseHeld(held);
  stats_->egress_level_drops[level].Add(1);
  ctx.Drop(m, DropReason::kStormQueueFull);
}

uint16_t PrioEgress::TxBurst(uint16_t p, uint16_t queue, rte_mbuf** pkts, uint32_t* const* held,
                             uint16_t n) {
  if (n == 0) return 0;
  // Bytes are summed before the call: once it returns, the accepted mbufs belong to the driver
  // and may already be freed. The refused ones are still ours.
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i) bytes += pkts[i]->pkt_len;
  const uint16_t sent = rte_eth_tx_burst(port_ids_[p], queue, pkts, n);
  for (uint16_t i = sent; i < n; ++i) bytes -= pkts[i]->pkt_len;
  for (uint16_t i = 0; i < sent; ++i) ReleaseHeld(held[i]);
  if (sent) {
    stats_->port[p].tx_packets.Add(sent);
    stats_->port[p].tx_bytes.Add(bytes);
  }
  return sent;
}

uint32_t PrioEgress::Flush(uint16_t p) {
  PortQueues& q = ports_[p];
  uint32_t total = 0;
  if (dcb_ports_ & (1u << p)) {
    // Every queue on its own: a full one does not stop the others.
    for (int k = 0; k < groups_[p].n; ++k) total += FlushGroup(p, k);
    return total;
  }
  while (q.nonempty != 0) {
    const int level = std::bit_width(q.nonempty) - 1;  // the highest waiting level
    LevelQueue& lq = q.level[level];
    const size_t base = Slot(p, level, 0);
    while (lq.count != 0) {
      // The contiguous run from the head; a wrapped level takes a second call.
      const auto run = static_cast<uint16_t>(std::min({lq.count, cap_ - lq.head, kMaxRun}));
      const uint16_t sent =
          TxBurst(p, tx_queue_, &mbufs_[base + lq.head], &held_[base + lq.head], run);
      if (sent) stats_->egress_level_tx[level].Add(sent);
      lq.head = Wrap(lq.head + sent);
      lq.count -= sent;
      q.total -= sent;
      depth_[level] -= sent;
      total += sent;
      // Strict priority: when the driver refuses part of this level, no lower level may go.
      if (sent < run) return total;
    }
    lq.head = 0;
    q.nonempty &= ~(1u << level);
  }
  return total;
}

uint32_t PrioEgress::Poll() {
  uint32_t sent = 0;
  bool flushed_any = false;
  for (uint16_t p = 0; p < num_ports_; ++p) {
    if (ports_[p].total == 0 || (flushed_ & (1u << p))) continue;
    sent += Flush(p);
    flushed_any = true;
  }
  flushed_ = 0;
  if (flushed_any) StoreDepth();
  return sent;
}

uint32_t PrioEgress::Drain(unsigned attempts) {
  for (unsigned idle = 0; idle < attempts && queued() != 0;) {
    uint32_t sent = 0;
    for (uint16_t p = 0; p < num_ports_; ++p) {
      if (ports_[p].total != 0) sent += Flush(p);
    }
    if (sent != 0) {
      idle = 0;
    } else if (++idle < attempts) {
      rte_delay_us_block(kDrainPauseUs);  // give the NIC time to complete descriptors
    }
  }
  const uint32_t freed = FreeAll();
  if (freed) stats_->drops[static_cast<int>(DropReason::kTxFull)].Add(freed);
  flushed_ = 0;
  StoreDepth();
  return freed;
}

uint32_t PrioEgress::FreeAll() {
  uint32_t freed = 0;
  for (uint16_t p = 0; p < num_ports_; ++p) {
    PortQueues& q = ports_[p];
    for (int level = 0; level < kLevels; ++level) {
      LevelQueue& lq = q.level[level];
      const size_t base = Slot(p, level, 0);
      while (lq.count != 0) {
        const uint32_t run = std::min(lq.count, cap_ - lq.head);
        for (uint32_t i = 0; i < run; ++i) ReleaseHeld(held_[base + lq.head + i]);
        rte_pktmbuf_free_bulk(&mbufs_[base + lq.head], run);
        lq.head = Wrap(lq.head + run);
        lq.count -= run;
        depth_[level] -= run;
        freed += run;
      }
      lq.head = 0;
    }
    q.total = 0;
    q.nonempty = 0;
  }
  return freed;
}

void PrioEgress::StoreDepth() {
  for (int l = 0; l < kLevels; ++l) {
    if (depth_[l] != depth_stored_[l]) {
      // relaxed: a gauge read by the metrics thread; no other data hangs on it.
      stats_->egress_level_depth[l].store(depth_[l], std::memory_order_relaxed);
      depth_stored_[l] = depth_[l];
    }
  }
}

}  // namespace heddle::pipeline
