#include "dataplane/relay/wan/internal/frame_crc.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/status_macros.h"
#include "dataplane/relay/codec/frame.h"

namespace heddle::relay::wan_internal {
namespace {

// A linear map on the 32-bit register: column i is the image of bit i.
using Op = std::array<uint32_t, 32>;

uint32_t Apply(const Op& m, uint32_t v) {
  uint32_t s = 0;
  for (int i = 0; v != 0; ++i, v >>= 1) {
    if (v & 1) s ^= m[i];
  }
  return s;
}

Op Compose(const Op& a, const Op& b) {  // a after b
  Op r;
  for (int i = 0; i < 32; ++i) r[i] = Apply(a, b[i]);
  return r;
}

Op ZeroByte() {
  Op bit;  // one zero bit through the reflected register: c' = (c >> 1) ^ (P if c & 1)
  bit[0] = 0x82F63B78u;
  for (int i = 1; i < 32; ++i) bit[i] = uint32_t{1} << (i - 1);
  const Op two = Compose(bit, bit);
  const Op four = Compose(two, two);
  return Compose(four, four);
}

Op Zeros(uint64_t n) {
  static std::mutex mu;
  static std::map<uint64_t, Op>* cache = new std::map<uint64_t, Op>();
  {
    std::lock_guard<std::mutex> l(mu);
    if (auto it = cache->find(n); it != cache->end()) return it->second;
  }
  static const Op kZeroByte = ZeroByte();
  Op result;
  for (int i = 0; i < 32; ++i) result[i] = uint32_t{1} << i;
  Op p = kZeroByte;
  for (uint64_t k = n; k != 0;) {
    if (k & 1) result = Compose(p, result);
    k >>= 1;
    if (k != 0) p = Compose(p, p);
  }
  std::lock_guard<std::mutex> l(mu);
  if (cache->size() < 256) cache->emplace(n, result);  // a model has a few frame lengths
  return result;
}

uint32_t Trailer(std::span<const uint8_t> f) {
  const uint8_t* p = f.data() + f.size() - kFrameTrailerBytes;
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void PutLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

uint32_t Crc32cExtendZeros(uint32_t reg, uint64_t n) { return Apply(Zeros(n), reg); }

uint32_t BodyCrc(std::span<const uint8_t> frame, uint32_t previous) {
  if (frame.size() < kFrameTrailerBytes) return Crc32c(frame, previous);
  // Crc32c(x, prev) = ~Z(~prev) ^ R(x) with Z the zeros operator over |x| bytes and R linear,
  // so Crc32c(x, prev) ^ Crc32c(x, 0) = Z(prev); the trailer is Crc32c(body, 0).
  return Trailer(frame) ^ Crc32cExtendZeros(previous, frame.size() - kFrameTrailerBytes);
}

namespace {

// The trailer of a valid frame `provisional` whose header became `header` (the rest unchanged).
// The body changed by D = old ^ new, non-zero in the header only: the new CRC is the old one
// ^ R(D), and R(D) is R of the header's difference followed by zeros.
uint32_t PatchedTrailer(std::span<const uint8_t> provisional, const uint8_t* header) {
  uint8_t d[kFrameHeaderBytes];
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) d[i] = provisional[i] ^ header[i];
  const size_t body = provisional.size() - kFrameTrailerBytes;
  const uint32_t head = ~Crc32c(std::span<const uint8_t>(d, kFrameHeaderBytes), ~uint32_t{0});
  return Trailer(provisional) ^ Crc32cExtendZeros(head, body - kFrameHeaderBytes);
}

}  // namespace

absl::StatusOr<FramePtr> PatchValidFrameTotals(std::span<const uint8_t> provisional,
                                               uint64_t tokens, uint32_t inner_steps) {
  auto out = std::make_shared<std::vector<uint8_t>>(provisional.begin(), provisional.end());
  HEDDLE_RETURN_IF_ERROR(WriteValidFrameTotals(provisional, *out, tokens, inner_steps));
  return FramePtr(std::move(out));
}

absl::Status WriteValidFrameTotals(std::span<const uint8_t> provisional, std::span<uint8_t> copy,
                                   uint64_t tokens, uint32_t inner_steps) {
  if (copy.size() != provisional.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("a copy of %u bytes of a frame of %u bytes",
                                                      copy.size(), provisional.size()));
  }
  HEDDLE_RETURN_IF_ERROR(WriteFrameTotals(copy, tokens, inner_steps));
  PutLe(copy.data() + copy.size() - kFrameTrailerBytes, PatchedTrailer(provisional, copy.data()),
        4);
  return absl::OkStatus();
}

ValidFrameSum SumOfValidFrame(std::span<const uint8_t> frame) {
  return {.bytes = frame.size(),
          .trailer = frame.size() >= kFrameTrailerBytes ? Trailer(frame) : 0};
}

uint32_t BodyCrc(const ValidFrameSum& frame, uint32_t previous) {
  return frame.trailer ^ Crc32cExtendZeros(previous, frame.bytes - kFrameTrailerBytes);
}

absl::StatusOr<ValidFrameSum> PatchedSumOfValidFrame(std::span<const uint8_t> provisional,
                                                     uint64_t tokens, uint32_t inner_steps) {
  // The header and a trailer's room: WriteFrameTotals() refuses what it refuses on the frame.
  std::array<uint8_t, kFrameHeaderBytes + kFrameTrailerBytes> head{};
  if (provisional.size() >= head.size()) {
    std::memcpy(head.data(), provisional.data(), kFrameHeaderBytes);
  }
  HEDDLE_RETURN_IF_ERROR(
      WriteFrameTotals(std::span<uint8_t>(head.data(), std::min(head.size(), provisional.size())),
                       tokens, inner_steps));
  return ValidFrameSum{.bytes = provisional.size(),
                       .trailer = PatchedTrailer(provisional, head.data())};
}

}  // namespace heddle::relay::wan_internal
