#include "dataplane/relay/client/client.h"

#include <utility>

namespace heddle::relay {

// The gRPC transport lands with the service (relay.proto); until then Connect() refuses.
struct RelayClient::Impl {
  ModelSpec spec;
  WorkerPlan plan;
};

RelayClient::RelayClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RelayClient::~RelayClient() = default;

absl::StatusOr<std::unique_ptr<RelayClient>> RelayClient::Connect(const RelayClientOptions&,
                                                                  const WorkerInfo&, uint64_t) {
  return absl::UnimplementedError("RelayClient: the relay service is not built yet");
}

const ModelSpec& RelayClient::spec() const { return impl_->spec; }
uint32_t RelayClient::sender_id() const { return 0; }
uint32_t RelayClient::region_id() const { return 0; }
uint64_t RelayClient::next_round() const { return 0; }
const WorkerPlan& RelayClient::plan() const { return impl_->plan; }

absl::StatusOr<PushStats> RelayClient::PushRound(uint64_t, std::span<const TensorInput>, uint64_t,
                                                 uint32_t) {
  return absl::UnimplementedError("RelayClient::PushRound");
}
absl::StatusOr<PullResult> RelayClient::PullRound(uint64_t, std::span<float* const>) {
  return absl::UnimplementedError("RelayClient::PullRound");
}
absl::Status RelayClient::Report(uint64_t, int64_t, int64_t, double) {
  return absl::UnimplementedError("RelayClient::Report");
}
absl::StatusOr<RoundStatus> RelayClient::Status() {
  return absl::UnimplementedError("RelayClient::Status");
}
absl::Status RelayClient::Leave() { return absl::UnimplementedError("RelayClient::Leave"); }

}  // namespace heddle::relay
