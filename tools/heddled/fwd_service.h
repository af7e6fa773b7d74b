// File: tools/heddled/fwd_service.h
//
// heddled's Nüwa install manager (docs/nuwa-install.md): takes a host artifact (the bytes of a
// file heddle-nuwa compiled), checks it — checksum and version (fwd::Decode), role host, the
// configured fabric name, this node in the artifact's shape (fwd::HostTable::Build), capacity
// (ports the configuration maps, path-set count, entropy width) — turns this host's path sets
// into an lb::PathTable (uplink port, entropy, next-hop MAC per path), builds it whole off the
// hot path and publishes it through the pin-select stages' LbControl: one pointer swap, the old
// table freed after an RCU grace period. Any failure leaves the running artifact in force.
//
//   HEDDLE_ASSIGN_OR_RETURN(FwdService::Options o, FwdService::OptionsFromConfig(cfg));
//   o.publish = [lb](auto table) { return lb->SetPathTable(std::move(table)); };
//   FwdService fwd(std::move(o));
//   HEDDLE_ASSIGN_OR_RETURN(api::ArtifactView v, fwd.Install(bytes, "fabric-host.nuwa", false));
//
// Every install keeps the artifact's bytes; the last `history` installs (the running one
// included) stay for Rollback(), which pops back to an earlier one and publishes it again. The
// artifact's path sets replace lb.paths entirely while an artifact is installed.
//
// Thread-safe: the control API calls it from gRPC threads; one install or rollback at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control/api/daemon_view.h"
#include "control/config/config.h"
#include "dataplane/fwd/artifact.h"
#include "dataplane/lb/path.h"

namespace heddle::heddled {

// Path sets a table may hold: PIN's flow entries keep a 16-bit set id (dataplane/lb/flow_table.h).
inline constexpr size_t kMaxFwdPathSets = 0xfffe;
// Destination prefixes: a host's path sets are one prefix per subtree level, refined by classes
// and rails — a few to a few thousand. Far more means an artifact this daemon should not take.
inline constexpr size_t kMaxFwdPrefixes = 1 << 20;
inline constexpr size_t kFwdHistory = 8;

class FwdService {
 public:
  struct Options {
    std::string node;    // fwd.node: "host[12]" or the host's IPv4 address
    std::string fabric;  // fwd.fabric: "" accepts any
    // Daemon port index by the artifact's host port number, and the daemon's port names.
    std::vector<uint16_t> port_map;
    std::vector<std::string> port_names;
    lb::EntropyField entropy_field = lb::EntropyField::kUdpSourcePort;
    size_t max_path_sets = kMaxFwdPathSets;
    size_t max_prefixes = kMaxFwdPrefixes;
    size_t history = kFwdHistory;  // installs kept, the running one included (>= 1)
    // Publishes a table to the workers; returns once the old one is no longer read.
    std::function<absl::Status(std::shared_ptr<const lb::PathTable>)> publish;
    std::function<int64_t()> now_unix_ms;  // defaults to the wall clock
  };
  // The options of cfg.fwd (port names resolved, lb.entropy); publish is left for the caller.
  static absl::StatusOr<Options> OptionsFromConfig(const config::Config& cfg);

  // An artifact checked and turned into this host's path table, not yet published.
  struct Prepared {
    std::vector<uint8_t> bytes;
    fwd::ArtifactSpec spec;
    uint32_t host = 0;
    lb::PathTableSpec table_spec;
    std::shared_ptr<const lb::PathTable> table;
    api::ArtifactView view;  // id 0, no install time yet
  };

  explicit FwdService(Options options);

  // Every check an install makes, and the table built; nothing published or counted.
  absl::StatusOr<Prepared> Prepare(std::span<const uint8_t> bytes, const std::string& source) const;
  // Prepare() then publish; with dry_run only Prepare(). On error the running artifact stays and
  // the rejection is counted.
  absl::StatusOr<api::ArtifactView> Install(std::span<const uint8_t> bytes,
                                            const std::string& source, bool dry_run);
  // Records `p` as installed without publishing: start-up, where the table is handed to the
  // LbControl the workers are created with.
  api::ArtifactView Adopt(Prepared p);
  // Back to the install with id `to` (default: the one before the running one); the installs
  // above it are dropped. FailedPrecondition when there is none to go back to.
  absl::StatusOr<api::ArtifactView> Rollback(std::optional<uint64_t> to);
  api::ArtifactStateView State() const;
  // Differences between the running artifact and `bytes` (which must pass Prepare()).
  absl::StatusOr<api::ArtifactDiffView> Diff(std::span<const uint8_t> bytes) const;

  struct Counters {
    uint64_t installs = 0, rejected = 0, rollbacks = 0, generation = 0;
    bool installed = false;
  };
  Counters counters() const;

 private:
  struct Entry {
    Prepared prepared;
    api::ArtifactView view;
  };
  absl::Status PublishLocked(const Prepared& p);
  api::ArtifactView AdoptLocked(Prepared p);

  Options o_;
  mutable std::mutex mu_;      // one install, rollback or read at a time
  std::deque<Entry> history_;  // front: the running artifact
  uint64_t next_id_ = 1;
  Counters counters_;
};

// The host index `node` names in `spec` ("name[N]" or an IPv4 address of its address plan), or an
// error naming fwd.node.
absl::StatusOr<uint32_t> ResolveHost(const fwd::ArtifactSpec& spec, const std::string& node);
// fwd.artifact as a path: relative ones are taken from the configuration file's directory.
std::string ResolveArtifactPath(const std::string& config_path, const std::string& artifact);
// heddled --check-config: loads and checks fwd.artifact as an install would (no publication).
absl::Status CheckConfiguredArtifact(const config::Config& cfg, const std::string& config_path);

}  // namespace heddle::heddled
