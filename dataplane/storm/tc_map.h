// File: dataplane/storm/tc_map.h
//
// Which hardware traffic class (TC) each STORM level leaves on when an egress port serves the
// levels from DCB TX queues (storm.egress: dcb or auto; docs/storm.md §6.7). Pure policy: no
// DPDK. The config loader validates with it, heddled hands the result to the port set-up.
//
//   absl::StatusOr<storm::TcMap> m = storm::MapLevelsToTcs(cfg.storm.levels);
//   // m->nb_tcs: 4 or 8 (what DPDK's DCB TX accepts); m->level_tc[l]: TC of level l
//
// The mapping:
//   - No level has a PCP (all -1): levels map in order, level l -> TC l, on 4 TCs for K <= 4 and
//     on 8 for K > 4. The user priorities are spread over the TCs (UP p -> TC p * nb_tcs / 8).
//   - Every level has a PCP: a level's TC follows its PCP, so the NIC's TC and the PCP the
//     switches see agree. The distinct PCPs, ascending, take TCs 0, 1, ...; levels sharing a PCP
//     share a TC. A higher level must not have a lower PCP (its TC would be served after the lower
//     level's). UP p -> the TC of the largest level PCP <= p (TC 0 below the lowest).
//   - Some levels with a PCP and some without: refused (the TC of a packet that keeps its PCP is
//     not the level's).
// The control level is one of the K levels and maps like them. Levels K..7 (reachable only by a
// later `set storm levels` with more levels) map to the top level's TC: the TC layout is fixed
// when the port starts.
#pragma once

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "dataplane/storm/levels.h"

namespace heddle::storm {

inline constexpr int kMaxTcs = 8;

struct TcMap {
  uint8_t nb_tcs = 4;                          // 4 or 8
  bool by_pcp = false;                         // levels map through their PCP
  std::array<uint8_t, kMaxLevels> level_tc{};  // TC per level, all 8 levels
  std::array<uint8_t, 8> prio_tc{};            // TC per 802.1p user priority

  friend bool operator==(const TcMap&, const TcMap&) = default;
};

// The TC map of `levels` (levels.levels, levels.pcp), or an error naming storm.pcp and the fix.
absl::StatusOr<TcMap> MapLevelsToTcs(const LevelConfig& levels);

}  // namespace heddle::storm
