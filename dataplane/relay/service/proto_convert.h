// File: dataplane/relay/service/proto_convert.h
//
// Conversions between relay.proto messages and the C++ types both ends use (model spec, plan),
// shared by the service and the client. Conversions from the wire validate what they build.
#pragma once

#include "absl/status/statusor.h"
#include "control/planner/solver.h"
#include "dataplane/relay/round/model_spec.h"
#include "dataplane/relay/service/relay.pb.h"

namespace heddle::relay {

void ToProto(const ModelSpec& spec, v1::ModelSpec* out);
// Validates the spec and checks the digest it carries (when non-zero).
absl::StatusOr<ModelSpec> FromProto(const v1::ModelSpec& in);

// The assignment of `worker` in `plan`, or valid = false with the reason.
v1::WorkerPlan PlanFor(const absl::StatusOr<planner::Plan>& plan, const std::string& worker);

}  // namespace heddle::relay
