#include "dataplane/relay/wan/internal/chunk_wire.h"

#include <grpcpp/support/slice.h>

#include <array>

#include "absl/strings/str_format.h"

namespace heddle::relay::wan_internal {
namespace {

// Protobuf's wire types (encoding.md): a field's tag is (number << 3) | type.
constexpr uint8_t kVarint = 0;
constexpr uint8_t kLengthDelimited = 2;

constexpr uint8_t Tag(uint8_t field, uint8_t type) {
  return static_cast<uint8_t>(field << 3 | type);
}

size_t PutVarint(uint64_t v, uint8_t* p) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  p[n++] = static_cast<uint8_t>(v);
  return n;
}

// A proto3 scalar field: omitted when zero, as the generated serializer does.
size_t PutVarintField(uint8_t field, uint64_t v, uint8_t* p) {
  if (v == 0) return 0;
  p[0] = Tag(field, kVarint);
  return 1 + PutVarint(v, p + 1);
}

void ReleaseFrame(void* owner) { delete static_cast<FramePtr*>(owner); }

}  // namespace

size_t EncodeChunkHeader(const ChunkFields& fields, uint64_t payload_bytes,
                         std::span<uint8_t, kMaxChunkHeaderBytes> out) {
  // The field numbers of peer.proto's FrameChunk; chunk_wire_test.cc checks them against the
  // generated descriptor.
  uint8_t* p = out.data();
  size_t n = 0;
  n += PutVarintField(1, fields.round_id, p + n);
  n += PutVarintField(2, fields.region_id, p + n);
  n += PutVarintField(3, fields.slice, p + n);
  n += PutVarintField(4, fields.frame_bytes, p + n);
  n += PutVarintField(5, fields.offset, p + n);
  if (payload_bytes > 0) {  // proto3 omits empty bytes
    p[n++] = Tag(6, kLengthDelimited);
    n += PutVarint(payload_bytes, p + n);
  }
  return n;
}

absl::StatusOr<grpc::ByteBuffer> ChunkWire(const ChunkFields& fields, const FramePtr& frame,
                                           uint64_t offset, uint64_t n) {
  if (frame == nullptr || offset > frame->size() || n > frame->size() - offset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chunk of %u bytes at offset %u outside a frame of %u bytes", n, offset,
                        frame == nullptr ? 0 : frame->size()));
  }
  std::array<uint8_t, kMaxChunkHeaderBytes> header;
  const size_t h = EncodeChunkHeader(fields, n, header);
  if (n == 0) {
    grpc::Slice only(header.data(), h);
    return grpc::ByteBuffer(&only, 1);
  }
  // The payload slice owns one reference to the frame: gRPC may hold the slice after Write()
  // returned (until the bytes are on the socket), and the exchange may drop the frame sooner.
  // gRPC does not write into a slice it sends, so the const_cast never lets it change a byte.
  std::array<grpc::Slice, 2> slices = {
      grpc::Slice(header.data(), h),
      grpc::Slice(const_cast<uint8_t*>(frame->data() + offset), n, &ReleaseFrame,
                  new FramePtr(frame)),
  };
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace heddle::relay::wan_internal
