// File: dataplane/relay/round/model_spec.h
//
// What a GeoMesh round moves: the model's tensors (id, name, element count, source dtype), the
// codec's chunk size, and how tensors are cut into slices — the unit of one frame, one gRPC
// message group, one aggregation step and one WAN transfer. Slicing is what keeps the relay's
// memory bounded for models of billions of parameters: nothing handles more than one slice of
// fp32 at a time, and whole rounds are held only in compressed form (docs/relay.md §7).
//
// Every participant (workers, the region relay, the other gateways) must hold the same spec;
// SpecDigest() is compared at join and at peering, so a mismatch is refused up front rather
// than discovered as a shape error mid-round.
//
//   HEDDLE_ASSIGN_OR_RETURN(ModelSpec spec, ModelSpecFromString("tensors: [{name: w, elements: 1048576}]"));
//   for (const SliceRef& s : Slices(spec)) { ... s.tensor_id, s.offset, s.count ... }
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/relay/codec/frame.h"

namespace heddle::relay {

struct TensorSpec {
  uint32_t id = 0;     // unique; tensors are listed in increasing id
  std::string name;    // printable ASCII, at most 256 bytes, unique
  uint64_t elements = 0;  // 1..kMaxTensorElements
  DType dtype = DType::kFloat32;  // what the workers hold (the frame's source dtype)
};

// Default slice: 2^24 values — 2 MiB of sign words, 64 MiB as fp32 while being aggregated.
inline constexpr uint64_t kDefaultSliceElements = uint64_t{1} << 24;

struct ModelSpec {
  std::vector<TensorSpec> tensors;
  uint32_t chunk_size = kDefaultChunkSize;  // values per magnitude (frame.h)
  // Values per slice: a multiple of chunk_size, at most kMaxFrameElements. A tensor of n values
  // is sent as ceil(n / slice_elements) frames; the last one may be shorter.
  uint64_t slice_elements = kDefaultSliceElements;
};

// One slice: frame `index` of the round in the fixed order (tensor id, then offset).
struct SliceRef {
  uint32_t index = 0;
  uint32_t tensor_id = 0;
  DType dtype = DType::kFloat32;
  uint64_t tensor_elements = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
};

// Checks ids (unique, increasing), names, element counts, chunk and slice sizes, and that the
// model has at most kMaxSlices slices. Messages name the tensor and the field.
inline constexpr uint32_t kMaxSlices = 1u << 20;
absl::Status ValidateModelSpec(const ModelSpec& spec);

// The slices of a validated spec in round order.
std::vector<SliceRef> Slices(const ModelSpec& spec);
uint64_t TotalElements(const ModelSpec& spec);

// A 64-bit digest of every field (CRC-32C based, stable across hosts and versions of this
// code): equal specs give equal digests.
uint64_t SpecDigest(const ModelSpec& spec);

// The header a frame for slice s must carry in round r from sender `sender` (tokens and steps
// left for the caller). Frames that do not match are refused by CheckFrameForSlice().
FrameHeader SliceHeader(const ModelSpec& spec, const SliceRef& s, uint64_t round_id,
                        uint32_t sender_id);
// OK when f is exactly slice s's frame of round r from sender: every shape field, the round and
// the sender. The message names the field, what was expected and what came.
absl::Status CheckFrameForSlice(const FrameView& f, const ModelSpec& spec, const SliceRef& s,
                                uint64_t round_id, uint32_t sender_id);

// YAML form (a relay config's `model:` block, or a file), e.g.
//   chunk_size: 4096
//   slice_elements: 16777216
//   tensors:
//     - {name: embed, elements: 1048576, dtype: bf16}
//     - {name: head, elements: 4096}            # id defaults to the position, dtype to fp32
// A synthetic model: `synthetic: {tensors: 4, elements: 1000000}`.
absl::StatusOr<ModelSpec> ModelSpecFromString(std::string_view yaml);
absl::StatusOr<ModelSpec> ModelSpecFromFile(const std::string& path);

// DTypeName() (sign_kernels.h) prints "fp32", "bf16", "fp16"; this reads them back.
absl::StatusOr<DType> ParseDType(std::string_view name);

}  // namespace heddle::relay
