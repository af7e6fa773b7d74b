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
#include <span>

#include "absl/status/statusor.h"
#include "control/collective/schedule.h"
#include "dataplane/relay/wan/grpc_exchange.h"

namespace heddle::relay {

// `regions`: every configured region, increasing; `slot_bytes`: one region's frames of a round
// (what the compiler tunes the pipelining for). Checked with CheckRelaySchedule().
absl::StatusOr<collective::Schedule> ResolveWanSchedule(const WanScheduleOptions& o,
                                                        std::span<const uint32_t> regions,
                                                        uint64_t slot_bytes);

// Stable across hosts and builds; what Hello compares.
uint64_t WanScheduleDigest(const collective::Schedule& s);

}  // namespace heddle::relay
