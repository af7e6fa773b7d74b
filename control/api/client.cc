// File: control/api/client.cc
#include "control/api/client.h"

#include <grpcpp/grpcpp.h>

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "control/api/heddle.grpc.pb.h"
#include "control/api/internal/unix_socket.h"

namespace heddle::api {

namespace {

// gRPC's connect errors are long and generic ("failed to connect to all addresses; last error:
// UNKNOWN: unix:...: No such file or directory"); look at the path to say what is actually wrong.
std::string UnreachableReason(const std::string& path, const std::string& grpc_reason) {
  absl::StatusOr<internal::PathState> state = internal::ProbeSocketPath(path);
  if (!state.ok()) return std::string(state.status().message());  // e.g. permission denied
  switch (*state) {
    case internal::PathState::kAbsent:
      return "no such socket";
    case internal::PathState::kStaleSocket:
      return "connection refused (a socket is there but nothing listens on it)";
    case internal::PathState::kNotASocket:
      return "not a socket";
    case internal::PathState::kListening:
      break;  // something listens but the call still failed: gRPC knows best
  }
  return grpc_reason;
}

}  // namespace

struct ApiClient::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Heddle::Stub> stub;
};

ApiClient::ApiClient(std::string socket_path, absl::Duration timeout, std::unique_ptr<Impl> impl)
    : socket_path_(std::move(socket_path)), timeout_(timeout), impl_(std::move(impl)) {}

ApiClient::~ApiClient() = default;

absl::StatusOr<std::unique_ptr<ApiClient>> ApiClient::Create(const std::string& socket_path,
                                                             absl::Duration timeout) {
  if (absl::Status s = internal::ValidateSocketPath(socket_path); !s.ok()) return s;
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("control API timeout must be positive");
  }
  auto impl = std::make_unique<Impl>();
  try {
    grpc::ChannelArguments args;
    // One attempt, no reconnect back-off hidden behind the deadline: an operator wants to know
    // now that the daemon is down.
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    impl->channel = grpc::CreateCustomChannel(absl::StrCat("unix:", socket_path),
                                              grpc::InsecureChannelCredentials(), args);
    impl->stub = v1::Heddle::NewStub(impl->channel);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("cannot create a channel to ", socket_path, ": ", e.what()));
  }
  return std::unique_ptr<ApiClient>(new ApiClient(socket_path, timeout, std::move(impl)));
}

template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> ApiClient::Call(const char* rpc, Method method, const Request& request) {
  grpc::ClientContext context;
  const absl::Time deadline = absl::Now() + timeout_;
  context.set_deadline(absl::ToChronoTime(deadline));
  Response response;
  grpc::Status status;
  try {
    status = (impl_->stub.get()->*method)(&context, request, &response);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(rpc, ": ", e.what()));
  }
  if (status.ok()) return response;

  const std::string reason = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(absl::StrCat("cannot reach heddled at ", socket_path_, ": ",
                                                 UnreachableReason(socket_path_, reason),
                                                 "; is heddled running? (-s to choose another "
                                                 "socket)"));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      // Well before our deadline it is the daemon's own answer (e.g. a change it could not
      // publish in time): pass its message on. The slack covers timers that fire a little early.
      if (absl::Now() < deadline - absl::Milliseconds(20)) break;
      return absl::DeadlineExceededError(
          absl::StrCat("heddled at ", socket_path_, " did not answer ", rpc, " within ",
                       absl::FormatDuration(timeout_),
                       "; is it overloaded or stuck? (--timeout to wait longer)"));
    case grpc::StatusCode::UNIMPLEMENTED:
      // gRPC answers an unknown method with an empty message; a message is the daemon's own.
      if (!reason.empty()) break;
      return absl::UnimplementedError(absl::StrCat("heddled at ", socket_path_,
                                                   " does not support ", rpc,
                                                   "; it is older than this heddlectl"));
    default:
      break;
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("heddled ", rpc, ": ", reason));
}

absl::StatusOr<v1::GetStatusResponse> ApiClient::GetStatus() {
  return Call<v1::GetStatusRequest, v1::GetStatusResponse>(
      "GetStatus", &v1::Heddle::Stub::GetStatus, v1::GetStatusRequest());
}

absl::StatusOr<v1::GetPortsResponse> ApiClient::GetPorts() {
  return Call<v1::GetPortsRequest, v1::GetPortsResponse>("GetPorts", &v1::Heddle::Stub::GetPorts,
                                                         v1::GetPortsRequest());
}

absl::StatusOr<v1::GetStatsResponse> ApiClient::GetStats() {
  return Call<v1::GetStatsRequest, v1::GetStatsResponse>("GetStats", &v1::Heddle::Stub::GetStats,
                                                         v1::GetStatsRequest());
}

absl::StatusOr<v1::GetDropsResponse> ApiClient::GetDrops(bool include_zero) {
  v1::GetDropsRequest request;
  request.set_include_zero(include_zero);
  return Call<v1::GetDropsRequest, v1::GetDropsResponse>("GetDrops", &v1::Heddle::Stub::GetDrops,
                                                         request);
}

absl::StatusOr<v1::GetConfigResponse> ApiClient::GetConfig() {
  return Call<v1::GetConfigRequest, v1::GetConfigResponse>(
      "GetConfig", &v1::Heddle::Stub::GetConfig, v1::GetConfigRequest());
}

absl::StatusOr<v1::GetRdmaResponse> ApiClient::GetRdma() {
  return Call<v1::GetRdmaRequest, v1::GetRdmaResponse>("GetRdma", &v1::Heddle::Stub::GetRdma,
                                                       v1::GetRdmaRequest());
}

absl::StatusOr<v1::GetStormResponse> ApiClient::GetStorm() {
  return Call<v1::GetStormRequest, v1::GetStormResponse>("GetStorm", &v1::Heddle::Stub::GetStorm,
                                                         v1::GetStormRequest());
}

absl::StatusOr<v1::ListQpsResponse> ApiClient::ListQps(uint32_t top, const std::string& sort) {
  v1::ListQpsRequest request;
  request.set_top(top);
  request.set_sort(sort);
  return Call<v1::ListQpsRequest, v1::ListQpsResponse>("ListQps", &v1::Heddle::Stub::ListQps,
                                                       request);
}

absl::StatusOr<v1::SetStormResponse> ApiClient::SetStorm(const v1::SetStormRequest& request) {
  return Call<v1::SetStormRequest, v1::SetStormResponse>("SetStorm", &v1::Heddle::Stub::SetStorm,
                                                         request);
}

absl::StatusOr<v1::GetLbResponse> ApiClient::GetLb() {
  return Call<v1::GetLbRequest, v1::GetLbResponse>("GetLb", &v1::Heddle::Stub::GetLb,
                                                   v1::GetLbRequest());
}

absl::StatusOr<v1::SetLbResponse> ApiClient::SetLb(const v1::SetLbRequest& request) {
  return Call<v1::SetLbRequest, v1::SetLbResponse>("SetLb", &v1::Heddle::Stub::SetLb, request);
}

absl::StatusOr<v1::InstallArtifactResponse> ApiClient::InstallArtifact(
    const v1::InstallArtifactRequest& request) {
  return Call<v1::InstallArtifactRequest, v1::InstallArtifactResponse>(
      "InstallArtifact", &v1::Heddle::Stub::InstallArtifact, request);
}

absl::StatusOr<v1::GetArtifactResponse> ApiClient::GetArtifact() {
  return Call<v1::GetArtifactRequest, v1::GetArtifactResponse>(
      "GetArtifact", &v1::Heddle::Stub::GetArtifact, v1::GetArtifactRequest());
}

absl::StatusOr<v1::DiffArtifactResponse> ApiClient::DiffArtifact(
    const v1::DiffArtifactRequest& request) {
  return Call<v1::DiffArtifactRequest, v1::DiffArtifactResponse>(
      "DiffArtifact", &v1::Heddle::Stub::DiffArtifact, request);
}

absl::StatusOr<v1::RollbackArtifactResponse> ApiClient::RollbackArtifact(
    const v1::RollbackArtifactRequest& request) {
  return Call<v1::RollbackArtifactRequest, v1::RollbackArtifactResponse>(
      "RollbackArtifact", &v1::Heddle::Stub::RollbackArtifact, request);
}

}  // namespace heddle::api
