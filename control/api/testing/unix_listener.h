// File: control/api/testing/unix_listener.h
//
// Test helper: a raw AF_UNIX stream socket bound at a path, optionally listening. Closing an
// unlistened or closed socket without unlinking leaves exactly the "stale socket" a crashed daemon
// leaves behind.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace heddle::api::testing {

class UnixListener {
 public:
  // Binds at `path`; listens when `listen` is true. ok() tells whether that worked.
  UnixListener(const std::string& path, bool listen) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
        (listen && ::listen(fd_, 4) != 0)) {
      Close();
    }
  }
  ~UnixListener() { Close(); }
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  bool ok() const { return fd_ >= 0; }
  // Closes the descriptor and leaves the socket file in place.
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace heddle::api::testing
