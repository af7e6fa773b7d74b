// File: dataplane/relay/wan/schedule_source.h
//
// Where a gateway's exchange schedule comes from (docs/relay-wan.md §10): the `wan.schedule:`
// and `wan.topology:` configuration resolved into one compiled all-gather over the configured
// regions, the same on every gateway for the same configuration (compilation is deterministic),
// and the digest the gateways compare at the handshake.
//
//   HEDDLE_ASSIGN_OR_RETURN(collective::Schedule s,
//                           ResolveWanSchedule(options.schedule, regions, frame_bytes));
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <utility>

#include "absl/status/statusor.h"
#include "control/collective/schedule.h"
#include "control/collective/topology.h"
#include "dataplane/relay/wan/grpc_exchange.h"

namespace heddle::relay {

// `regions`: every configured region, increasing; `slot_bytes`: one region's frames of a round
// (what the compiler tunes the pipelining for). Checked with CheckRelaySchedule().
absl::StatusOr<collective::Schedule> ResolveWanSchedule(const WanScheduleOptions& o,
                                                        std::span<const uint32_t> regions,
                                                        uint64_t slot_bytes);

// The WAN the schedule is compiled for: o.topology_yaml, else o.topology_file, else a full mesh
// of equal 1 Gbit/s, 30 ms links; its ranks must be the regions by id, increasing.
absl::StatusOr<collective::Topology> ResolveWanTopology(const WanScheduleOptions& o,
                                                        std::span<const uint32_t> regions);

// `t` with the bandwidth of every directed link (rank i → rank j) for which rates holds
// (regions[i], regions[j]) > 0 replaced by that rate (bytes/s).
collective::Topology WithMeasuredRates(
    collective::Topology t, std::span<const uint32_t> regions,
    const std::map<std::pair<uint32_t, uint32_t>, double>& rates);

// Stable across hosts and builds; what Hello compares.
uint64_t WanScheduleDigest(const collective::Schedule& s);

}  // namespace heddle::relay
