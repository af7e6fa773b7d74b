#include "dataplane/relay/service/proto_convert.h"

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace heddle::relay {

void ToProto(const ModelSpec& spec, v1::ModelSpec* out) {
  out->Clear();
  for (const TensorSpec& t : spec.tensors) {
    v1::TensorSpec* p = out->add_tensors();
    p->set_id(t.id);
    p->set_name(t.name);
    p->set_elements(t.elements);
    p->set_dtype(DTypeName(t.dtype));
  }
  out->set_chunk_size(spec.chunk_size);
  out->set_slice_elements(spec.slice_elements);
  out->set_digest(SpecDigest(spec));
}

absl::StatusOr<ModelSpec> FromProto(const v1::ModelSpec& in) {
  ModelSpec spec;
  for (const v1::TensorSpec& p : in.tensors()) {
    HEDDLE_ASSIGN_OR_RETURN(DType d, ParseDType(p.dtype()));
    spec.tensors.push_back({.id = p.id(), .name = p.name(), .elements = p.elements(), .dtype = d});
  }
  spec.chunk_size = in.chunk_size();
  spec.slice_elements = in.slice_elements();
  HEDDLE_RETURN_IF_ERROR(ValidateModelSpec(spec));
  if (in.digest() != 0 && in.digest() != SpecDigest(spec)) {
    return absl::DataLossError(
        absl::StrFormat("model spec: digest %016x does not match its content (%016x)", in.digest(),
                        SpecDigest(spec)));
  }
  return spec;
}

v1::WorkerPlan PlanFor(const absl::StatusOr<planner::Plan>& plan, const std::string& worker) {
  v1::WorkerPlan out;
  if (!plan.ok()) {
    out.set_reason(std::string(plan.status().message()));
    return out;
  }
  for (const planner::WorkerAssignment& a : plan->workers) {
    if (a.worker_id != worker) continue;
    out.set_valid(true);
    out.set_version(plan->version);
    out.set_batch_size(a.batch_size);
    out.set_inner_steps(a.inner_steps);
    out.set_seq_len(a.seq_len);
    out.set_tokens(a.tokens);
    out.set_predicted_compute_s(a.predicted_finish_s);
    out.set_target_round_s(plan->target_round_s);
    return out;
  }
  out.set_reason(absl::StrFormat("worker %s is not in plan %u", worker, plan->version));
  return out;
}

}  // namespace heddle::relay
