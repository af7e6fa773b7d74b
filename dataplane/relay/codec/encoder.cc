#include "dataplane/relay/codec/encoder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace heddle::relay {

absl::StatusOr<SignEncoder> SignEncoder::Create(uint64_t elements, EncoderOptions options,
                                                const SignKernels& kernels) {
  const uint32_t c = options.chunk_size;
  if (c < kMinChunkSize || c > kMaxChunkSize || c % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("relay encoder: chunk size %u must be a multiple of 64 from %u to %u", c,
                        kMinChunkSize, kMaxChunkSize));
  }
  if (elements > kMaxFrameElements) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "relay encoder: %u elements is more than one frame carries (%u); encode the tensor in "
        "slices of whole chunks",
        elements, kMaxFrameElements));
  }
  return SignEncoder(elements, options, kernels);
}

SignEncoder::SignEncoder(uint64_t elements, EncoderOptions options, const SignKernels& kernels)
    : elements_(elements),
      options_(options),
      kernels_(&kernels),
      signs_(FrameWords(elements)),
      magnitudes_(FrameChunks(elements, options.chunk_size)),
      error_(elements, 0.0f) {}

size_t SignEncoder::Encode(DType d, const void* x) {
  dtype_ = d;
  if (options_.error_feedback) {
    return kernels_->ef_encode(d, x, error_.data(), elements_, options_.chunk_size, signs_.data(),
                               magnitudes_.data());
  }
  kernels_->pack(d, x, elements_, options_.chunk_size, signs_.data(), magnitudes_.data());
  return static_cast<size_t>(std::count_if(magnitudes_.begin(), magnitudes_.end(),
                                           [](float m) { return !std::isfinite(m); }));
}

void SignEncoder::ResetError() { std::fill(error_.begin(), error_.end(), 0.0f); }

uint64_t SignEncoder::FrameBytes() const {
  return relay::FrameBytes(elements_, options_.chunk_size);
}

absl::Status SignEncoder::WriteFrame(FrameHeader header, std::span<uint8_t> out) const {
  header.dtype = dtype_;
  header.element_count = elements_;
  header.chunk_size = options_.chunk_size;
  if (header.tensor_elements == 0 && header.element_offset == 0) header.tensor_elements = elements_;
  return relay::WriteFrame(header, magnitudes_, signs_, out);
}

}  // namespace heddle::relay
