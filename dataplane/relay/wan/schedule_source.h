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
#include <string_view>
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

// `wan.coordinator: auto`: the region whose decision reaches every gateway first on topology
// `t` (ranks = `regions` in order): the smallest max_i arrival(i → c) + max_g latency(c → g),
// arrival = the shortest-latency path's latency plus slot_bytes / the path's bottleneck
// bandwidth (infinite with no path; of parallel links the lower latency, with its own
// bandwidth), since the coordinator decides once it holds every region's frames, then its
// decision travels one more latency to each gateway. Ties go to the lower region id; every gateway
// computes the same from the same topology.
uint32_t ChooseCoordinator(const collective::Topology& t, std::span<const uint32_t> regions,
                           uint64_t slot_bytes);

// A schedule announced by the coordinator in a switch (peer.proto ScheduleSwitch): `json` in the
// schedule file format, refused unless it parses, its digest is `digest` and the relay can run
// it over `regions` (VerifySchedule and CheckRelaySchedule, as ResolveWanSchedule).
absl::StatusOr<collective::Schedule> ScheduleFromSwitch(std::string_view json, uint64_t digest,
                                                        std::span<const uint32_t> regions,
                                                        uint64_t slot_bytes);

}  // namespace heddle::relay
