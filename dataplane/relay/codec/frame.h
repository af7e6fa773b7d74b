// File: dataplane/relay/codec/frame.h
//
// The GeoMesh relay frame (docs/relay.md §3): one worker's (or one gateway's) sign-compressed
// contribution to one round for one tensor, or for a whole-chunk slice of a large tensor.
// Versioned and CRC-32C checked; ParseFrame() validates every field against the others and the
// buffer length and returns a view into the bytes (no copy), or an absl::Status saying what is
// wrong. Little-endian throughout:
//
//   off  size  field
//     0     4  magic "HGSF"
//     4     2  version (1)
//     6     1  dtype of the source tensor (1 fp32, 2 bf16, 3 fp16)
//     7     1  flags (0; reserved)
//     8     8  round id
//    16     4  sender id
//    20     4  tensor id
//    24     8  tensor elements (the whole tensor)
//    32     8  element offset (of this frame's first value; a multiple of chunk size)
//    40     8  element count n (whole chunks, except in the tensor's last frame)
//    48     4  chunk size c (a multiple of 64, 64..2^30)
//    52     4  inner steps τ (≥ 1; FedNova weighting)
//    56     8  token count (≥ 1)
//    64  4·C   magnitudes, fp32, C = ceil(n / c) (finite, +0 or positive)
//     …  0|4   zero padding to a multiple of 8
//     …  8·W   sign words, W = ceil(n / 64), bit j = value j < 0; unused high bits 0
//     …     4  CRC-32C of every byte before it
//
//   FrameHeader h{.round_id = r, .sender_id = me, .tensor_id = t, ...};
//   std::vector<uint8_t> buf(FrameBytes(h.element_count, h.chunk_size));
//   HEDDLE_RETURN_IF_ERROR(WriteFrame(h, magnitudes, signs, buf));
//   HEDDLE_ASSIGN_OR_RETURN(FrameView f, ParseFrame(buf));
//   AccumulateFrame(f, weight, acc);            // acc[j] += (float)(weight·m_chunk(j)) · ±1
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/relay/codec/sign_kernels.h"

namespace heddle::relay {

inline constexpr uint8_t kFrameMagic[4] = {'H', 'G', 'S', 'F'};
inline constexpr uint16_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 64;
inline constexpr size_t kFrameTrailerBytes = 4;
inline constexpr uint32_t kDefaultChunkSize = 4096;
inline constexpr uint32_t kMinChunkSize = 64;
inline constexpr uint32_t kMaxChunkSize = uint32_t{1} << 30;
// One frame carries at most 2^34 values (2 GiB of sign words); larger tensors are sent as
// several frames of whole chunks.
inline constexpr uint64_t kMaxFrameElements = uint64_t{1} << 34;
inline constexpr uint64_t kMaxTensorElements = uint64_t{1} << 48;

struct FrameHeader {
  uint64_t round_id = 0;
  uint32_t sender_id = 0;
  uint32_t tensor_id = 0;
  DType dtype = DType::kFloat32;
  uint64_t tensor_elements = 0;
  uint64_t element_offset = 0;
  uint64_t element_count = 0;
  uint32_t chunk_size = kDefaultChunkSize;
  uint32_t inner_steps = 1;
  uint64_t token_count = 0;

  bool operator==(const FrameHeader&) const = default;
};

// Checks a header on its own: dtype, chunk size, counts, offsets, steps and tokens.
absl::Status ValidateHeader(const FrameHeader& h);

// Magnitudes per frame, sign words per frame, and the frame's size in bytes; for a header that
// passes ValidateHeader() (none of these overflow there).
uint64_t FrameChunks(uint64_t element_count, uint32_t chunk_size);
uint64_t FrameWords(uint64_t element_count);
uint64_t FrameBytes(uint64_t element_count, uint32_t chunk_size);

// A validated frame: the header and where magnitudes and signs sit in the caller's buffer, which
// must outlive the view.
class FrameView {
 public:
  const FrameHeader& header() const { return header_; }
  uint64_t chunks() const { return chunks_; }
  float magnitude(uint64_t k) const;
  // The sign stream, element_count bits, little-endian (sign_kernels.h), any alignment.
  const uint8_t* sign_bytes() const { return signs_; }
  uint64_t sign_word(uint64_t i) const;
  std::span<const uint8_t> bytes() const { return bytes_; }

 private:
  friend absl::StatusOr<FrameView> ParseFrame(std::span<const uint8_t> bytes);
  FrameHeader header_;
  uint64_t chunks_ = 0;
  const uint8_t* magnitudes_ = nullptr;
  const uint8_t* signs_ = nullptr;
  std::span<const uint8_t> bytes_;
};

// Validates everything (length, magic, version, checksum, header fields, counts against the
// length, zero padding and unused bits, magnitudes finite and not negative). Never reads outside
// `bytes`.
absl::StatusOr<FrameView> ParseFrame(std::span<const uint8_t> bytes);

// Writes the frame for header h, with FrameChunks() magnitudes and FrameWords() sign words, into
// out, which must be exactly FrameBytes() long. Refuses a bad header, non-finite or negative
// magnitudes, and sign bits set past element_count.
absl::Status WriteFrame(const FrameHeader& h, std::span<const float> magnitudes,
                        std::span<const uint64_t> signs, std::span<uint8_t> out);
// The same into a new buffer.
absl::StatusOr<std::vector<uint8_t>> BuildFrame(const FrameHeader& h,
                                                std::span<const float> magnitudes,
                                                std::span<const uint64_t> signs);

// acc[j] += c_k · (bit j ? -1 : 1) for the frame's values, c_k = (float)(weight · (double)m_k)
// for value j's chunk k: one rounding to fp32 per chunk, then one fp32 add per value. Returns
// false, touching nothing, when acc is shorter than element_count.
bool AccumulateFrame(const FrameView& f, double weight, std::span<float> acc,
                     const SignKernels& k = ActiveKernels());
// out[j] = bit j ? -m_k : m_k, the frame's dense fp32 reading. False when out is too short.
bool DecodeFrame(const FrameView& f, std::span<float> out, const SignKernels& k = ActiveKernels());

}  // namespace heddle::relay
