#include "dataplane/pipeline/stages.h"

#include <rte_mbuf.h>

#include <algorithm>

#include "dataplane/pkt/roce.h"

namespace heddle::pipeline {

uint16_t PortForwardStage::Process(WorkerContext& ctx, Burst& b) {
  if (b.all_routed) return b.n;  // "pin-select" chose every egress: nothing to fill or drop
  const uint16_t out = b.ingress < kMaxPorts ? peer_[b.ingress] : kNoEgress;
  // An egress an earlier stage chose ("pin-select": the path's uplink) stands.
  uint16_t kept = 0;
  for (uint16_t i = 0; i < b.n; ++i) {
    if (b.egress[i] == kNoEgress) {
      if (out == kNoEgress) {
        ctx.Drop(b, i, DropReason::kNoEgress);
        continue;
      }
      b.egress[i] = out;
    }
    MoveSlot(b, kept++, i);
  }
  return kept;
}

bool MbufIcrcValid(const rte_mbuf* m, const pkt::PacketDesc& d) {
  const uint8_t* first = rte_pktmbuf_mtod(m, const uint8_t*);
  if (m->nb_segs == 1) return pkt::VerifyIcrc(first, d);
  // Chained mbuf: the headers are in the first segment; the CRC continues over every segment's
  // share of [end of BTH, ICRC), and the ICRC itself may straddle two segments.
  uint32_t crc = pkt::IcrcOverHeaders(first, d);
  const size_t from = d.bth_off + pkt::kBthLen, to = d.icrc_off;
  size_t pos = 0;
  for (const rte_mbuf* s = m; s != nullptr && pos < to; s = s->next) {
    const size_t end = pos + s->data_len;
    const size_t a = std::max(pos, from), b = std::min(end, to);
    if (a < b) crc = pkt::IcrcContinue(crc, rte_pktmbuf_mtod(s, const uint8_t*) + (a - pos), b - a);
    pos = end;
  }
  uint8_t tmp[pkt::kIcrcLen];
  const auto* icrc =
      static_cast<const uint8_t*>(rte_pktmbuf_read(m, d.icrc_off, pkt::kIcrcLen, tmp));
  if (icrc == nullptr) return false;
  const uint32_t stored = uint32_t{icrc[0]} | uint32_t{icrc[1]} << 8 | uint32_t{icrc[2]} << 16 |
                          uint32_t{icrc[3]} << 24;
  return crc == stored;
}

uint16_t IcrcVerifyStage::Process(WorkerContext& ctx, Burst& b) {
  uint16_t kept = 0;
  for (uint16_t i = 0; i < b.n; ++i) {
    const pkt::PacketDesc& d = b.desc[i];
    if ((d.flags & pkt::kFlagRoce) && !MbufIcrcValid(b.pkts[i], d)) {
      ctx.Drop(b, i, DropReason::kIcrcBad);
      continue;
    }
    MoveSlot(b, kept++, i);
  }
  return kept;
}

}  // namespace heddle::pipeline
