// File: control/api/client.h
//
// A thin client for the heddled control API (heddle.proto) over its unix socket. Every call has a
// deadline and turns gRPC failures into an absl::Status whose message says what to do:
//
//   HEDDLE_ASSIGN_OR_RETURN(auto client, ApiClient::Create("/run/heddle/heddled.sock",
//                                                          absl::Seconds(3)));
//   HEDDLE_ASSIGN_OR_RETURN(v1::GetStatusResponse status, client->GetStatus());
//
// A daemon that is not running shows up as
//   "cannot reach heddled at /run/heddle/heddled.sock: <reason>; is heddled running? (-s to choose
//    another socket)".
// Errors the daemon itself returns (e.g. INVALID_ARGUMENT from SetStorm, FAILED_PRECONDITION from
// GetStorm when storm is disabled) keep their code, and their message follows "heddled <Rpc>: ".
// Creating the client does not connect; the first call does. A client is safe to share between
// threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "control/api/heddle.pb.h"

namespace heddle::api {

class ApiClient {
 public:
  static constexpr char kDefaultSocketPath[] = "/run/heddle/heddled.sock";

  // `timeout` bounds each call, connection set-up included.
  static absl::StatusOr<std::unique_ptr<ApiClient>> Create(const std::string& socket_path,
                                                           absl::Duration timeout);
  ~ApiClient();

  absl::StatusOr<v1::GetStatusResponse> GetStatus();
  absl::StatusOr<v1::GetPortsResponse> GetPorts();
  absl::StatusOr<v1::GetStatsResponse> GetStats();
  absl::StatusOr<v1::GetDropsResponse> GetDrops(bool include_zero);
  absl::StatusOr<v1::GetConfigResponse> GetConfig();
  absl::StatusOr<v1::GetRdmaResponse> GetRdma();
  absl::StatusOr<v1::GetStormResponse> GetStorm();
  // `top` 1..1000 QPs, largest first by `sort`: "backlog", "remaining" or "idle".
  absl::StatusOr<v1::ListQpsResponse> ListQps(uint32_t top, const std::string& sort);
  // Fields left unset in `request` keep their value in the daemon.
  absl::StatusOr<v1::SetStormResponse> SetStorm(const v1::SetStormRequest& request);
  absl::StatusOr<v1::GetLbResponse> GetLb();
  // Fields left unset in `request` keep their value in the daemon.
  absl::StatusOr<v1::SetLbResponse> SetLb(const v1::SetLbRequest& request);
  // Nüwa artifacts (docs/nuwa-install.md).
  absl::StatusOr<v1::InstallArtifactResponse> InstallArtifact(
      const v1::InstallArtifactRequest& request);
  absl::StatusOr<v1::GetArtifactResponse> GetArtifact();
  absl::StatusOr<v1::DiffArtifactResponse> DiffArtifact(const v1::DiffArtifactRequest& request);
  absl::StatusOr<v1::RollbackArtifactResponse> RollbackArtifact(
      const v1::RollbackArtifactRequest& request);

  const std::string& socket_path() const { return socket_path_; }

 private:
  struct Impl;
  ApiClient(std::string socket_path, absl::Duration timeout, std::unique_ptr<Impl> impl);

  template <typename Request, typename Response, typename Method>
  absl::StatusOr<Response> Call(const char* rpc, Method method, const Request& request);

  std::string socket_path_;
  absl::Duration timeout_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace heddle::api
