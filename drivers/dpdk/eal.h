// File: drivers/dpdk/eal.h
//
// DPDK EAL bring-up from heddle's settings: builds the EAL argument vector (lcores, memory,
// devices, runtime-file policy), checks the hugepage state first so a missing reservation is
// reported with the fix rather than a bare EAL failure, and tears the EAL down at exit.
//
//   EalParams p = ...;                     // from the config
//   HEDDLE_RETURN_IF_ERROR(InitEal(p));    // rte_eal_init
//   ...
//   CleanupEal();                          // rte_eal_cleanup
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace heddle::dpdk {

struct EalParams {
  std::string program = "heddled";
  unsigned main_lcore = 0;
  std::vector<unsigned> worker_lcores;
  bool no_huge = false;
  unsigned memory_mb = 0;          // 0 = EAL default
  std::string file_prefix;         // "" = --in-memory: no shared runtime files at all
  std::vector<std::string> pci;    // "0000:3b:00.0" or "0000:3b:00.0,dv_flow_en=1"
  std::vector<std::string> vdevs;  // "net_pcap0,rx_pcap=..."
  std::string log_level = "info";
  std::vector<std::string> extra;  // appended verbatim
};

// The argv handed to rte_eal_init (argv[0] included).
std::vector<std::string> BuildEalArgs(const EalParams& p);

// When hugepages are wanted, checks /proc/meminfo-style text for a reservation and says how to
// make one (or to use no_huge) when there is none.
absl::Status CheckHugepages(const EalParams& p, const std::string& meminfo_path = "/proc/meminfo");

// Every configured lcore must be a CPU in this process's affinity mask (EAL's `-l` maps lcore n to
// CPU n); says which ones are allowed otherwise.
absl::Status CheckLcores(const EalParams& p);

// rte_eal_init with the arguments above; errors carry rte_errno's meaning and the usual fix.
absl::Status InitEal(const EalParams& p);

// rte_eal_cleanup. Safe to call once after a successful InitEal.
void CleanupEal();

}  // namespace heddle::dpdk
