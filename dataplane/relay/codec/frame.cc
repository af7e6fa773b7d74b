#include "dataplane/relay/codec/frame.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/crc32c.h"

namespace heddle::relay {
namespace {

uint64_t GetLe(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void PutLe(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

template <typename... Args>
absl::Status Bad(const absl::FormatSpec<Args...>& msg, const Args&... args) {
  return absl::InvalidArgumentError("relay frame: " + absl::StrFormat(msg, args...));
}

uint64_t MagnitudesOffset() { return kFrameHeaderBytes; }
uint64_t SignsOffset(uint64_t chunks) { return kFrameHeaderBytes + (4 * chunks + 7) / 8 * 8; }

// A magnitude a frame may carry: finite, and +0 or positive (the sign bit clear, so -0 too is
// refused: a magnitude is a mean of absolute values).
bool GoodMagnitude(float m) { return std::isfinite(m) && (std::bit_cast<uint32_t>(m) >> 31) == 0; }

}  // namespace

absl::Status ValidateHeader(const FrameHeader& h) {
  if (DTypeBytes(h.dtype) == 0) {
    return Bad("dtype %u unknown; known: 1 fp32, 2 bf16, 3 fp16", static_cast<unsigned>(h.dtype));
  }
  if (h.chunk_size < kMinChunkSize || h.chunk_size > kMaxChunkSize || h.chunk_size % 64 != 0) {
    return Bad("chunk size %u: must be a multiple of 64 from %u to %u", h.chunk_size, kMinChunkSize,
               kMaxChunkSize);
  }
  if (h.tensor_elements > kMaxTensorElements) {
    return Bad("tensor of %u elements: more than the %u a frame can address", h.tensor_elements,
               kMaxTensorElements);
  }
  if (h.element_count > kMaxFrameElements) {
    return Bad(
        "%u elements in one frame: more than %u; split the tensor into frames of whole "
        "chunks",
        h.element_count, kMaxFrameElements);
  }
  if (h.element_offset > h.tensor_elements ||
      h.element_count > h.tensor_elements - h.element_offset) {
    return Bad("elements [%u, %u + %u) lie outside the tensor's %u", h.element_offset,
               h.element_offset, h.element_count, h.tensor_elements);
  }
  if (h.element_offset % h.chunk_size != 0) {
    return Bad("element offset %u is not a multiple of the chunk size %u", h.element_offset,
               h.chunk_size);
  }
  const bool last = h.element_offset + h.element_count == h.tensor_elements;
  if (!last && h.element_count % h.chunk_size != 0) {
    return Bad(
        "%u elements at offset %u of %u: only the tensor's last frame may end in a "
        "partial chunk of %u",
        h.element_count, h.element_offset, h.tensor_elements, h.chunk_size);
  }
  if (h.element_count == 0 && h.tensor_elements != 0) {
    return Bad("no elements, for a tensor of %u", h.tensor_elements);
  }
  if (h.inner_steps == 0) return Bad("inner steps 0: a contribution comes from at least one step");
  if (h.token_count == 0) return Bad("token count 0: a contribution weighs at least one token");
  return absl::OkStatus();
}

uint64_t FrameChunks(uint64_t element_count, uint32_t chunk_size) {
  return (element_count + chunk_size - 1) / chunk_size;
}

uint64_t FrameWords(uint64_t element_count) { return (element_count + 63) / 64; }

uint64_t FrameBytes(uint64_t element_count, uint32_t chunk_size) {
  return SignsOffset(FrameChunks(element_count, chunk_size)) + 8 * FrameWords(element_count) +
         kFrameTrailerBytes;
}

float FrameView::magnitude(uint64_t k) const {
  float m;
  std::memcpy(&m, magnitudes_ + 4 * k, 4);  // little-endian host (x86-64, AArch64)
  return m;
}

uint64_t FrameView::sign_word(uint64_t i) const { return GetLe(signs_ + 8 * i, 8); }

absl::StatusOr<FrameView> ParseFrame(std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  const size_t len = bytes.size();
  if (len < kFrameHeaderBytes + kFrameTrailerBytes) {
    return Bad("%u bytes, shorter than the %u-byte header and checksum", len,
               kFrameHeaderBytes + kFrameTrailerBytes);
  }
  if (std::memcmp(p, kFrameMagic, 4) != 0) {
    return Bad("magic %02x%02x%02x%02x is not \"HGSF\": not a GeoMesh relay frame", p[0], p[1],
               p[2], p[3]);
  }
  const uint16_t version = static_cast<uint16_t>(GetLe(p + 4, 2));
  if (version != kFrameVersion) {
    return Bad("version %u; this build reads version %u", version, kFrameVersion);
  }
  const uint32_t stored = static_cast<uint32_t>(GetLe(p + len - 4, 4));
  const uint32_t computed = Crc32c(bytes.first(len - 4));
  if (stored != computed) {
    return absl::DataLossError(
        absl::StrFormat("relay frame: checksum 0x%08x, computed 0x%08x over %u bytes: corrupted "
                        "or truncated in transit",
                        stored, computed, len - 4));
  }
  if (p[7] != 0) return Bad("flags 0x%02x: none are defined in version 1", p[7]);
  FrameHeader h;
  h.dtype = static_cast<DType>(p[6]);
  h.round_id = GetLe(p + 8, 8);
  h.sender_id = static_cast<uint32_t>(GetLe(p + 16, 4));
  h.tensor_id = static_cast<uint32_t>(GetLe(p + 20, 4));
  h.tensor_elements = GetLe(p + 24, 8);
  h.element_offset = GetLe(p + 32, 8);
  h.element_count = GetLe(p + 40, 8);
  h.chunk_size = static_cast<uint32_t>(GetLe(p + 48, 4));
  h.inner_steps = static_cast<uint32_t>(GetLe(p + 52, 4));
  h.token_count = GetLe(p + 56, 8);
  if (absl::Status s = ValidateHeader(h); !s.ok()) return s;
  const uint64_t chunks = FrameChunks(h.element_count, h.chunk_size);
  const uint64_t words = FrameWords(h.element_count);
  const uint64_t want = FrameBytes(h.element_count, h.chunk_size);
  if (len != want) {
    return Bad(
        "%u bytes, but %u elements in chunks of %u (%u magnitudes, %u sign words) make "
        "%u",
        len, h.element_count, h.chunk_size, chunks, words, want);
  }
  const uint64_t signs_at = SignsOffset(chunks);
  for (uint64_t i = MagnitudesOffset() + 4 * chunks; i < signs_at; ++i) {
    if (p[i] != 0) return Bad("padding byte %u is 0x%02x, not 0", i, p[i]);
  }
  FrameView v;
  v.header_ = h;
  v.chunks_ = chunks;
  v.magnitudes_ = p + MagnitudesOffset();
  v.signs_ = p + signs_at;
  v.bytes_ = bytes;
  for (uint64_t k = 0; k < chunks; ++k) {
    const float m = v.magnitude(k);
    if (!GoodMagnitude(m)) return Bad("magnitude of chunk %u is %g: not finite and >= 0", k, m);
  }
  if (h.element_count % 64 != 0) {
    const uint64_t unused = ~uint64_t{0} << (h.element_count % 64);
    if ((v.sign_word(words - 1) & unused) != 0) {
      return Bad("sign bits set past element %u in the last word", h.element_count);
    }
  }
  return v;
}

absl::Status WriteFrame(const FrameHeader& h, std::span<const float> magnitudes,
                        std::span<const uint64_t> signs, std::span<uint8_t> out) {
  if (absl::Status s = ValidateHeader(h); !s.ok()) return s;
  const uint64_t chunks = FrameChunks(h.element_count, h.chunk_size);
  const uint64_t words = FrameWords(h.element_count);
  if (magnitudes.size() != chunks || signs.size() != words) {
    return Bad(
        "%u magnitudes and %u sign words given; %u elements in chunks of %u take %u "
        "and %u",
        magnitudes.size(), signs.size(), h.element_count, h.chunk_size, chunks, words);
  }
  const uint64_t want = FrameBytes(h.element_count, h.chunk_size);
  if (out.size() != want)
    return Bad("output buffer of %u bytes; the frame takes %u", out.size(), want);
  for (uint64_t k = 0; k < chunks; ++k) {
    if (!GoodMagnitude(magnitudes[k])) {
      return Bad("magnitude of chunk %u is %g: not finite and >= 0 (non-finite input values?)", k,
                 magnitudes[k]);
    }
  }
  if (h.element_count % 64 != 0 && (signs[words - 1] & (~uint64_t{0} << (h.element_count % 64)))) {
    return Bad("sign bits set past element %u in the last word", h.element_count);
  }
  uint8_t* p = out.data();
  std::memcpy(p, kFrameMagic, 4);
  PutLe(p + 4, kFrameVersion, 2);
  p[6] = static_cast<uint8_t>(h.dtype);
  p[7] = 0;
  PutLe(p + 8, h.round_id, 8);
  PutLe(p + 16, h.sender_id, 4);
  PutLe(p + 20, h.tensor_id, 4);
  PutLe(p + 24, h.tensor_elements, 8);
  PutLe(p + 32, h.element_offset, 8);
  PutLe(p + 40, h.element_count, 8);
  PutLe(p + 48, h.chunk_size, 4);
  PutLe(p + 52, h.inner_steps, 4);
  PutLe(p + 56, h.token_count, 8);
  std::memcpy(p + MagnitudesOffset(), magnitudes.data(), 4 * chunks);  // little-endian host
  const uint64_t signs_at = SignsOffset(chunks);
  std::memset(p + MagnitudesOffset() + 4 * chunks, 0, signs_at - MagnitudesOffset() - 4 * chunks);
  std::memcpy(p + signs_at, signs.data(), 8 * words);
  PutLe(p + want - 4, Crc32c(out.first(want - 4)), 4);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> BuildFrame(const FrameHeader& h,
                                                std::span<const float> magnitudes,
                                                std::span<const uint64_t> signs) {
  if (absl::Status s = ValidateHeader(h); !s.ok()) return s;
  std::vector<uint8_t> out(FrameBytes(h.element_count, h.chunk_size));
  if (absl::Status s = WriteFrame(h, magnitudes, signs, out); !s.ok()) return s;
  return out;
}

bool AccumulateFrame(const FrameView& f, double weight, std::span<float> acc,
                     const SignKernels& k) {
  const uint64_t n = f.header().element_count;
  if (acc.size() < n) return false;
  const uint64_t c = f.header().chunk_size;
  for (uint64_t i = 0, start = 0; i < f.chunks(); ++i, start += c) {
    const float coefficient = static_cast<float>(weight * static_cast<double>(f.magnitude(i)));
    k.accumulate(acc.data() + start, f.sign_bytes() + start / 8, std::min(c, n - start),
                 coefficient);
  }
  return true;
}

bool DecodeFrame(const FrameView& f, std::span<float> out, const SignKernels& k) {
  const uint64_t n = f.header().element_count;
  if (out.size() < n) return false;
  const uint64_t c = f.header().chunk_size;
  for (uint64_t i = 0, start = 0; i < f.chunks(); ++i, start += c) {
    k.decode(out.data() + start, f.sign_bytes() + start / 8, std::min(c, n - start),
             f.magnitude(i));
  }
  return true;
}

}  // namespace heddle::relay
