// File: control/api/internal/unix_socket.cc
#include "control/api/internal/unix_socket.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace heddle::api::internal {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace

absl::Status ValidateSocketPath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("control socket path is empty");
  constexpr size_t kMax = sizeof(sockaddr_un{}.sun_path) - 1;
  if (path.size() > kMax) {
    return absl::InvalidArgumentError(absl::StrCat("control socket path ", path, " is ",
                                                   path.size(), " bytes; unix sockets allow ", kMax,
                                                   "; choose a shorter path"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PathState> ProbeSocketPath(const std::string& path) {
  if (absl::Status s = ValidateSocketPath(path); !s.ok()) return s;
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return PathState::kAbsent;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot inspect ", path, ": ", ErrnoText(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) return PathState::kNotASocket;

  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket(AF_UNIX): ", ErrnoText(errno)));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  int rc;
  do {
    rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  if (rc == 0) return PathState::kListening;
  // ECONNREFUSED: socket file without a listener. ENOENT: removed between lstat and connect.
  if (err == ECONNREFUSED) return PathState::kStaleSocket;
  if (err == ENOENT) return PathState::kAbsent;
  // EAGAIN: a listener whose backlog is full is still a listener.
  if (err == EAGAIN) return PathState::kListening;
  return absl::FailedPreconditionError(
      absl::StrCat("cannot probe socket ", path, ": ", ErrnoText(err)));
}

absl::Status EnsureParentDirectory(const std::string& path, mode_t mode) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return absl::OkStatus();  // cwd or "/"
  const std::string dir = path.substr(0, slash);
  // Walk down from the root, creating each missing component.
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (mkdir(prefix.c_str(), mode) == 0) {
      // mkdir applies the umask; the socket directory's mode is part of its access control.
      if (chmod(prefix.c_str(), mode) != 0) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot set mode of ", prefix, ": ", ErrnoText(errno)));
      }
      continue;
    }
    if (errno == EEXIST) {
      struct stat st;
      if (stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create socket directory ", dir, ": ", prefix, " exists and is not a directory"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create socket directory ", prefix, ": ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

}  // namespace heddle::api::internal
