// File: control/api/internal/unix_socket.h
//
// Small POSIX helpers for the control socket: what is at a path (nothing, a live listener, a stale
// socket left by a crashed daemon, something else), and making its directory. Used by the server
// before it hands the path to gRPC, which would otherwise unlink any socket it finds there,
// including a live daemon's.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heddle::api::internal {

enum class PathState {
  kAbsent,       // nothing at the path
  kListening,    // a unix socket that accepts connections
  kStaleSocket,  // a unix socket nobody listens on (connect: ECONNREFUSED)
  kNotASocket,   // a file, directory, fifo, ...
};

// Checks that `path` fits in sockaddr_un.sun_path and is not empty.
absl::Status ValidateSocketPath(const std::string& path);

// Classifies what is at `path`; errors are stat/connect failures other than "absent"/"refused".
absl::StatusOr<PathState> ProbeSocketPath(const std::string& path);

// Creates the directory that will hold `path` (and any missing ancestors) with `mode`; a directory
// that already exists is left as it is.
absl::Status EnsureParentDirectory(const std::string& path, mode_t mode);

}  // namespace heddle::api::internal
