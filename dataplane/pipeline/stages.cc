#include "dataplane/pipeline/stages.h"

#include <rte_mbuf.h>

namespace heddle::pipeline {

uint16_t PortForwardStage::Process(WorkerContext& ctx, Burst& b) {
  const uint16_t out = b.ingress < kMaxPorts ? peer_[b.ingress] : kNoEgress;
  if (out == kNoEgress) {
    for (uint16_t i = 0; i < b.n; ++i) ctx.Drop(b.pkts[i], DropReason::kNoEgress);
    return 0;
  }
  for (uint16_t i = 0; i < b.n; ++i) b.egress[i] = out;
  return b.n;
}

uint16_t IcrcVerifyStage::Process(WorkerContext& ctx, Burst& b) {
  uint16_t kept = 0;
  for (uint16_t i = 0; i < b.n; ++i) {
    const pkt::PacketDesc& d = b.desc[i];
    // The descriptor's offsets are within the first segment (the parser saw data_len bytes).
    if ((d.flags & pkt::kFlagRoce) &&
        !pkt::VerifyIcrc(rte_pktmbuf_mtod(b.pkts[i], const uint8_t*), d)) {
      ctx.Drop(b.pkts[i], DropReason::kIcrcBad);
      continue;
    }
    MoveSlot(b, kept++, i);
  }
  return kept;
}

}  // namespace heddle::pipeline
