// File: dataplane/relay/codec/encoder.h
//
// The sender's side of the GeoMesh codec: a stateful encoder per tensor (or per slice of a large
// tensor) that keeps the error-feedback residual e in fp32 across rounds (EF-SGD, docs/relay.md
// §4). Each Encode() compresses v = x + e to sign bits and one magnitude per chunk,
// m = mean |v| over the chunk, and keeps e ← v − m·sign(v) for the next round, so what the
// compression drops this round is sent later instead of lost. All memory is allocated in
// Create(); Encode() and WriteFrame() allocate nothing.
//
//   HEDDLE_ASSIGN_OR_RETURN(SignEncoder enc, SignEncoder::Create(n, {.chunk_size = 4096}));
//   each round:
//     if (enc.Encode(DType::kBFloat16, pseudo_grad) != 0) { /* NaN/inf in the input */ }
//     std::vector<uint8_t>& buf = ...;  buf.resize(enc.FrameBytes());   // reused
//     HEDDLE_RETURN_IF_ERROR(enc.WriteFrame({.round_id = r, .sender_id = me, ...}, buf));
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/relay/codec/frame.h"
#include "dataplane/relay/codec/sign_kernels.h"

namespace heddle::relay {

struct EncoderOptions {
  // Values per magnitude: a multiple of 64 from 64 to 2^30. One magnitude per tensor: a chunk
  // size at least the tensor's length (rounded up to 64).
  uint32_t chunk_size = kDefaultChunkSize;
  // Off: every round encodes x alone (plain scaled sign, e stays 0).
  bool error_feedback = true;
};

class SignEncoder {
 public:
  // An encoder for tensors of `elements` values (at most kMaxFrameElements).
  static absl::StatusOr<SignEncoder> Create(uint64_t elements, EncoderOptions options = {},
                                            const SignKernels& kernels = ActiveKernels());

  // Encodes `elements()` values of type d at x (element-aligned). Returns the number of chunks
  // whose magnitude is not finite (NaN or inf in the input); 0 means the result can be sent.
  // Such chunks keep their e; WriteFrame() refuses to send them.
  size_t Encode(DType d, const void* x);

  uint64_t elements() const { return elements_; }
  uint32_t chunk_size() const { return options_.chunk_size; }
  // The last Encode()'s output and the residual it left.
  std::span<const uint64_t> signs() const { return signs_; }
  std::span<const float> magnitudes() const { return magnitudes_; }
  std::span<const float> error() const { return error_; }
  // The residual, writable: a sender whose frame was not used takes it back (e ← e + m·sign(v),
  // docs/relay.md §8), or restores a saved residual after a restart.
  std::span<float> mutable_error() { return error_; }
  // Forgets the residual (e = 0), e.g. after the model was reloaded.
  void ResetError();

  uint64_t FrameBytes() const;
  // The last Encode() as a frame into out (exactly FrameBytes() long). header's dtype,
  // element_count and chunk_size are taken from the encoder; a tensor_elements of 0 means the
  // frame is the whole tensor (tensor_elements = elements(), offset 0).
  absl::Status WriteFrame(FrameHeader header, std::span<uint8_t> out) const;

 private:
  SignEncoder(uint64_t elements, EncoderOptions options, const SignKernels& kernels);

  uint64_t elements_;
  EncoderOptions options_;
  const SignKernels* kernels_;
  DType dtype_ = DType::kFloat32;
  std::vector<uint64_t> signs_;
  std::vector<float> magnitudes_;
  std::vector<float> error_;
};

}  // namespace heddle::relay
