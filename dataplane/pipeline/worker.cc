#include "dataplane/pipeline/worker.h"

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>

#include <algorithm>

#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif

namespace heddle::pipeline {
namespace {

// The largest Burst::egress of the burst's packets (0 for an empty burst).
uint16_t MaxEgress(const Burst& b) {
  uint16_t i = 0;
  uint16_t max_out = 0;
#if defined(__SSE4_1__)
  if (b.n >= 8) {
    __m128i m = _mm_setzero_si128();
    for (; i + 8 <= b.n; i += 8) {
      m = _mm_max_epu16(m, _mm_loadu_si128(reinterpret_cast<const __m128i*>(&b.egress[i])));
    }
    // The horizontal maximum: the minimum of the complements (_mm_minpos_epu16).
    const __m128i inv = _mm_xor_si128(m, _mm_set1_epi16(-1));
    max_out = static_cast<uint16_t>(~_mm_cvtsi128_si32(_mm_minpos_epu16(inv)));
  }
#endif
  for (; i < b.n; ++i) max_out = std::max(max_out, b.egress[i]);
  return max_out;
}

}  // namespace

Worker::Worker(WorkerSetup setup)
    : s_(std::move(setup)), ctx_(s_.stats), tx_(new std::array<rte_mbuf*, kMaxBurst>[kMaxPorts]) {
  if (s_.burst == 0 || s_.burst > kMaxBurst) s_.burst = 32;
  all_tx_multi_seg_ = true;
  for (uint16_t p = 0; p < s_.num_ports && p < kMaxPorts; ++p) {
    all_tx_multi_seg_ &= s_.tx_multi_seg[p];
  }
  if (s_.egress_queue_packets > 0) {
    egress_ =
        std::make_unique<PrioEgress>(PrioEgressOptions{.num_ports = s_.num_ports,
                                                       .port_ids = s_.port_ids,
                                                       .tx_queue = s_.tx_queue,
                                                       .queue_packets = s_.egress_queue_packets,
                                                       .dcb_ports = s_.dcb_ports,
                                                       .level_queue = s_.level_queue},
                                     s_.stats);
  }
}

int Worker::Run() {
  const std::atomic<bool>& stop = *s_.stop;
  // acquire pairs with the release store of the thread that stops the daemon.
  while (!stop.load(std::memory_order_acquire)) {
    if (PollOnce() > 0) {
      s_.stats->busy_loops.Add(1);
    } else {
      s_.stats->idle_loops.Add(1);
    }
  }
  // Drain: forward what already sits in the RX rings, but never spin forever on a source that
  // keeps producing (e.g. a replayed trace).
  for (unsigned i = 0; i < s_.drain_polls; ++i) {
    if (PollOnce() == 0) break;
  }
  // Then what waits in the egress queues: a few more flushes, the rest freed as "tx-full".
  if (egress_) egress_->Drain(s_.egress_drain_attempts);
  return 0;
}

uint32_t Worker::PollOnce() {
  uint32_t total = 0;
  for (const RxAssignment& q : s_.rx) {
    uint16_t n = rte_eth_rx_burst(q.port_id, q.queue, burst_.pkts, s_.burst);
    if (n == 0) continue;
    total += n;
    ProcessBurst(q.port_index, n);
  }
  // Once per poll loop, busy or idle, outside any burst.
  for (auto& stage : s_.stages) stage->Poll(ctx_);
  FreeDropped();
  // Ports still holding packets get a retry, so the queues drain when the uplink frees up even
  // if nothing more arrives.
  if (egress_) egress_->Poll();
  return total;
}

void Worker::ProcessBurst(uint16_t port_index, uint16_t n) {
  LcoreStats& st = *s_.stats;
  PortCounters& pc = st.port[port_index];
  burst_.ingress = port_index;
  burst_.egress_backlog = egress_ ? egress_->queued() : Burst::kUnknownBacklog;
  burst_.n = 0;
  burst_.all_routed = false;
  uint64_t bytes = 0;
  // Per-class counts stay in registers/stack for the burst and are added once per class.
  uint16_t per_class[kNumRoceClasses] = {};
  // Parse; malformed frames are dropped here under their parse reason.
  for (uint16_t i = 0; i < n; ++i) {
    if (i + 2 < n) rte_prefetch0(rte_pktmbuf_mtod(burst_.pkts[i + 2], void*));
    rte_mbuf* m = burst_.pkts[i];
    bytes += m->pkt_len;
    pkt::PacketDesc& d = burst_.desc[burst_.n];
    // Headers are read from the first segment; lengths are checked against the whole frame, so a
    // chained mbuf (jumbo frame, scattered RX) parses like a contiguous one.
    pkt::ParseError e =
        pkt::Parse(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, m->pkt_len, &d);
    if (e != pkt::ParseError::kOk) [[unlikely]] {
      ctx_.Drop(m, DropReasonFromParse(e));
      continue;
    }
    ++per_class[static_cast<int>(d.roce_class)];
    burst_.pkts[burst_.n] = m;
    burst_.egress[burst_.n] = kNoEgress;
    burst_.level[burst_.n] = 0;
    burst_.held[burst_.n] = nullptr;
    ++burst_.n;
  }
  for (int c = 0; c < kNumRoceClasses; ++c) {
    if (per_class[c]) pc.roce_rx_packets[c].Add(per_class[c]);
  }
  pc.rx_packets.Add(n);
  pc.rx_bytes.Add(bytes);
  st.bursts.Add(1);

  for (auto& stage : s_.stages) {
    if (burst_.n == 0) break;
    burst_.n = stage->Process(ctx_, burst_);
  }

  // From here every packet leaves heddled: sent, queued for egress, or dropped. A drop releases
  // the packet's held count (the egress scheduler and Transmit() release the others).
  if (egress_) {
    // The common burst has nothing to drop here: one pass finds that (the largest egress index,
    // eight at a time, and the segments only where a port refuses chains), and only a burst with
    // a packet to drop is compacted.
    uint16_t first_bad = MaxEgress(burst_) < s_.num_ports ? burst_.n : 0;
    if (!all_tx_multi_seg_ && first_bad != 0) {
      for (first_bad = 0; first_bad < burst_.n; ++first_bad) {
        if (burst_.pkts[first_bad]->nb_segs > 1 && !s_.tx_multi_seg[burst_.egress[first_bad]])
            [[unlikely]]
          break;
      }
    }
    if (first_bad == burst_.n) [[likely]] {
      if (burst_.n) egress_->Send(ctx_, burst_);
      FreeDropped();
      return;
    }
    uint16_t kept = first_bad;
    for (uint16_t i = first_bad; i < burst_.n; ++i) {
      rte_mbuf* m = burst_.pkts[i];
      const uint16_t out = burst_.egress[i];
      if (out >= s_.num_ports) [[unlikely]] {
        ReleaseHeld(burst_.held[i]);
        ctx_.Drop(m, DropReason::kNoEgress);
        continue;
      }
      if (m->nb_segs > 1 && !s_.tx_multi_seg[out]) [[unlikely]] {
        ReleaseHeld(burst_.held[i]);
        ctx_.Drop(m, DropReason::kTxMultiSeg);
        continue;
      }
      burst_.pkts[kept] = m;
      burst_.egress[kept] = out;
      burst_.level[kept] = burst_.level[i];
      burst_.held[kept] = burst_.held[i];
      ++kept;
    }
    burst_.n = kept;
    if (kept) egress_->Send(ctx_, burst_);
    FreeDropped();
    return;
  }

  // Stage egress, then send. Bytes are summed here: once tx_burst returns, the sent mbufs belong
  // to the driver and may already be freed. Every staged packet leaves heddled in Transmit() (sent
  // or freed), so its held count is released as it is staged.
  for (uint16_t i = 0; i < burst_.n; ++i) {
    rte_mbuf* m = burst_.pkts[i];
    uint16_t out = burst_.egress[i];
    ReleaseHeld(burst_.held[i]);
    if (out >= s_.num_ports) [[unlikely]] {
      ctx_.Drop(m, DropReason::kNoEgress);
      continue;
    }
    if (m->nb_segs > 1 && !s_.tx_multi_seg[out]) [[unlikely]] {
      ctx_.Drop(m, DropReason::kTxMultiSeg);
      continue;
    }
    tx_[out][tx_n_[out]++] = m;
    tx_bytes_[out] += m->pkt_len;
  }
  Transmit();
  FreeDropped();
}

void Worker::FreeDropped() {
  rte_mbuf** dropped;
  uint16_t nd = ctx_.TakeDropped(&dropped);
  if (nd) rte_pktmbuf_free_bulk(dropped, nd);
}

void Worker::Transmit() {
  LcoreStats& st = *s_.stats;
  for (uint16_t p = 0; p < s_.num_ports; ++p) {
    uint16_t n = tx_n_[p];
    if (n == 0) continue;
    rte_mbuf** pkts = tx_[p].data();
    uint16_t sent = rte_eth_tx_burst(s_.port_ids[p], s_.tx_queue, pkts, n);
    uint64_t bytes = tx_bytes_[p];
    if (sent < n) [[unlikely]] {
      // The refused tail is still ours: take its bytes back out, then free it.
      for (uint16_t i = sent; i < n; ++i) bytes -= pkts[i]->pkt_len;
      st.drops[static_cast<int>(DropReason::kTxFull)].Add(n - sent);
      rte_pktmbuf_free_bulk(pkts + sent, n - sent);
    }
    st.port[p].tx_packets.Add(sent);
    st.port[p].tx_bytes.Add(bytes);
    tx_n_[p] = 0;
    tx_bytes_[p] = 0;
  }
}

}  // namespace heddle::pipeline
