#include "drivers/dpdk/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"

namespace heddle::dpdk {

std::vector<std::string> BuildEalArgs(const EalParams& p) {
  std::vector<std::string> a = {p.program};
  std::vector<std::string> lcores = {std::to_string(p.main_lcore)};
  for (unsigned w : p.worker_lcores) lcores.push_back(std::to_string(w));
  a.push_back("-l");
  a.push_back(absl::StrJoin(lcores, ","));
  a.push_back("--main-lcore=" + std::to_string(p.main_lcore));
  if (p.no_huge) a.push_back("--no-huge");
  if (p.memory_mb > 0) {
    a.push_back("-m");
    a.push_back(std::to_string(p.memory_mb));
  }
  if (p.file_prefix.empty()) {
    // No hugepage files, no shared config, no telemetry socket: nothing is left in /var/run/dpdk.
    // (--no-huge already keeps memory private; EAL refuses --in-memory together with it.)
    a.push_back(p.no_huge ? "--no-shconf" : "--in-memory");
    a.push_back("--no-telemetry");
  } else {
    a.push_back("--file-prefix=" + p.file_prefix);
  }
  if (p.pci.empty()) {
    a.push_back("--no-pci");
  } else {
    for (const auto& d : p.pci) {
      a.push_back("-a");
      a.push_back(d);
    }
  }
  for (const auto& v : p.vdevs) {
    a.push_back("--vdev");
    a.push_back(v);
  }
  // EAL's own chatter follows heddle's level, one step quieter: "info" keeps EAL at notice.
  const char* eal_level = p.log_level == "debug"     ? "info"
                          : p.log_level == "error"   ? "error"
                          : p.log_level == "warning" ? "warning"
                                                     : "notice";
  a.push_back(absl::StrCat("--log-level=", eal_level));
  for (const auto& e : p.extra) a.push_back(e);
  return a;
}

absl::Status CheckHugepages(const EalParams& p, const std::string& meminfo_path) {
  if (p.no_huge) return absl::OkStatus();
  std::ifstream in(meminfo_path);
  if (!in) return absl::OkStatus();  // not Linux-like; let EAL decide
  std::string line;
  long total = -1, free_pages = -1;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    long v;
    ls >> key >> v;
    if (key == "HugePages_Total:") total = v;
    if (key == "HugePages_Free:") free_pages = v;
  }
  if (total == 0) {
    return absl::FailedPreconditionError(
        "memory.no_huge is false but no hugepages are reserved (HugePages_Total: 0); reserve some "
        "with `sysctl -w vm.nr_hugepages=1024` (2 MiB pages) or `dpdk-hugepages.py -p 2M --setup "
        "2G`, or set memory.no_huge: true with memory.size_mb for tests and demos");
  }
  if (total > 0 && free_pages == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "all ", total,
        " reserved hugepages are in use (HugePages_Free: 0); stop the process holding them, "
        "raise vm.nr_hugepages, or set memory.no_huge: true for tests and demos"));
  }
  return absl::OkStatus();
}

absl::Status CheckLcores(const EalParams& p) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return absl::OkStatus();  // let EAL decide
  std::vector<unsigned> usable;
  for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) usable.push_back(c);
  }
  auto check = [&](unsigned lcore, const char* key) -> absl::Status {
    if (lcore < CPU_SETSIZE && CPU_ISSET(lcore, &set)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": lcore ", lcore,
                     " is not a CPU this process may run on (allowed: ", absl::StrJoin(usable, ","),
                     "); pick lcores from that list (see `lscpu`, `taskset -p $$`)"));
  };
  if (auto s = check(p.main_lcore, "lcores.main"); !s.ok()) return s;
  for (unsigned w : p.worker_lcores) {
    if (auto s = check(w, "lcores.workers"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status InitEal(const EalParams& p) {
  if (auto s = CheckHugepages(p); !s.ok()) return s;
  if (auto s = CheckLcores(p); !s.ok()) return s;
  std::vector<std::string> args = BuildEalArgs(p);
  HEDDLE_LOG(kDebug, "EAL args: %s", absl::StrJoin(args, " ").c_str());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  int rc = rte_eal_init(static_cast<int>(args.size()), argv.data());
  if (rc < 0) {
    int err = rte_errno;
    std::string hint;
    switch (err) {
      case EACCES:
        hint =
            "permission denied: run as root or grant CAP_SYS_ADMIN, CAP_IPC_LOCK, "
            "CAP_SYS_RAWIO (see deploy/README.md)";
        break;
      case EALREADY:
        hint = "the EAL is already initialised in this process";
        break;
      case ENOMEM:
        hint = p.no_huge ? "not enough memory: lower memory.size_mb or free memory"
                         : "hugepage memory could not be mapped: check vm.nr_hugepages, the "
                           "hugetlbfs mount, or use memory.no_huge: true for tests";
        break;
      case ENODEV:
        hint = "a device could not be probed: check the ports' pci/vdev devargs and drivers";
        break;
      case EINVAL:
        hint = "invalid EAL arguments (lcores that do not exist? extra eal.args?)";
        break;
      case EPROTO:
        hint = "primary process not found (file_prefix names a secondary?)";
        break;
      default:
        hint = "see the EAL messages above";
    }
    return absl::InternalError(absl::StrCat("rte_eal_init failed: ", rte_strerror(err), " (", err,
                                            "): ", hint, "; EAL args: ", absl::StrJoin(args, " ")));
  }
  return absl::OkStatus();
}

void CleanupEal() {
  // EAL makes its runtime directory even when nothing is shared; remove it if it is left empty
  // (rmdir refuses a non-empty one, e.g. a primary process that shares it is still running).
  std::string runtime_dir = rte_eal_get_runtime_dir();
  rte_eal_cleanup();
  if (!runtime_dir.empty()) rmdir(runtime_dir.c_str());
}

}  // namespace heddle::dpdk
