// File: control/api/server.h
//
// The control API server: the `heddle.api.v1.Heddle` gRPC service (heddle.proto) on a unix socket,
// answering from a DaemonView. heddled starts one on its control thread:
//
//   HEDDLE_ASSIGN_OR_RETURN(auto api, ApiServer::Start("/run/heddle/heddled.sock", &view));
//   ...
//   api->Shutdown();  // or let it go out of scope
//
// Start owns the socket path for the server's lifetime:
//   - creates the parent directory (mode 0750) when it is missing;
//   - refuses to start when another server answers on the path ("another heddled is listening");
//   - removes a stale socket left behind by a daemon that died;
//   - refuses, and leaves alone, anything at the path that is not a socket;
//   - makes the socket mode 0660 so that access is governed by the directory and the group.
// gRPC binds a private name in the same directory (".heddled-<pid>.sock.tmp") that is then
// hard-linked to the public path, so the socket appears there already at mode 0660 and a daemon
// racing this one cannot have its socket replaced.
// Shutdown stops the server (in-flight calls get a short deadline) and unlinks the socket, unless
// something else has replaced it meanwhile. Failures come back as a Status; nothing throws or
// aborts.
//
// The view is called from gRPC threads concurrently and must outlive the server.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "control/api/daemon_view.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace heddle::api {

class HeddleServiceImpl;

class ApiServer {
 public:
  static absl::StatusOr<std::unique_ptr<ApiServer>> Start(const std::string& socket_path,
                                                          DaemonView* view);

  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;
  ~ApiServer();

  // Idempotent; also run by the destructor. Call from one thread (the daemon's control thread).
  void Shutdown();

  const std::string& socket_path() const { return socket_path_; }

 private:
  ApiServer(std::string socket_path, std::unique_ptr<HeddleServiceImpl> service);

  std::string socket_path_;
  std::unique_ptr<HeddleServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  // Identity of the socket file this server created, so Shutdown only unlinks its own.
  dev_t socket_dev_ = 0;
  ino_t socket_ino_ = 0;
};

}  // namespace heddle::api
