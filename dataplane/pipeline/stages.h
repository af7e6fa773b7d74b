// File: dataplane/pipeline/stages.h
//
// The stages of the foundation pipeline:
//   "port-fwd"    — every packet leaves on its ingress port's peer (host <-> uplink), unless an
//                   earlier stage already chose its egress ("pin-select"); a packet with neither
//                   drops under "no-egress".
//   "icrc-verify" — drops RoCEv2 frames whose ICRC does not match (config dataplane.verify_icrc).
#pragma once

#include <array>

#include "dataplane/pipeline/stage.h"

namespace heddle::pipeline {

class PortForwardStage final : public Stage {
 public:
  // peer[i] = egress port index for ingress port i, or kNoEgress.
  explicit PortForwardStage(const std::array<uint16_t, kMaxPorts>& peer) : peer_(peer) {}
  const char* name() const override { return "port-fwd"; }
  uint16_t Process(WorkerContext& ctx, Burst& b) override;

 private:
  std::array<uint16_t, kMaxPorts> peer_;
};

// True when the ICRC of the RoCE frame in `m` (single or chained mbuf) matches its bytes.
bool MbufIcrcValid(const rte_mbuf* m, const pkt::PacketDesc& d);

class IcrcVerifyStage final : public Stage {
 public:
  const char* name() const override { return "icrc-verify"; }
  uint16_t Process(WorkerContext& ctx, Burst& b) override;
};

}  // namespace heddle::pipeline
