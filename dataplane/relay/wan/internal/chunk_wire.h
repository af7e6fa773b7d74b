// File: dataplane/relay/wan/internal/chunk_wire.h
//
// One chunk of a region frame in the wire form of a `peer.v1.FrameChunk` message, without
// copying the frame's bytes. A gateway's frame stripes write many megabytes per round; building
// a FrameChunk copies each chunk into the message and gRPC serializes it into a second buffer.
// Here a chunk is two slices of one grpc::ByteBuffer:
//
//   [ fields 1–5 (round, region, slice, frame bytes, offset) | tag of field 6 | payload length ]
//   [ the payload: frame[offset, offset + n), referenced, not copied ]
//
// The first slice is the message's serialization minus its payload, as protobuf's own
// serializer writes it (fields in number order, proto3 zeros omitted, no payload field when n
// is 0), so the whole buffer is byte for byte what FrameChunk::SerializeAsString() gives for
// the same fields (chunk_wire_test.cc proves it and parses it back): the callee reads it with
// the generated parser, unchanged. The second slice holds a reference to the shared frame
// (released by the slice's destroy callback, when gRPC has sent it), so the frame outlives
// the write even if the exchange has dropped it meanwhile.
//
// The buffer is written on a StreamFrames call typed <grpc::ByteBuffer, FrameAck>
// (kStreamFramesMethod, grpc_exchange.cc); gRPC passes a ByteBuffer through as is.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/relay/wan/internal/region_encoder.h"

namespace heddle::relay::wan_internal {

// FrameChunk's fields other than the payload.
struct ChunkFields {
  uint64_t round_id = 0;
  uint32_t region_id = 0;
  uint32_t slice = 0;
  uint64_t frame_bytes = 0;
  uint64_t offset = 0;
};

// The longest header: five tags of one byte, four 10-byte varints (the uint64 fields and the
// payload length) and two 5-byte ones (the uint32 fields), and the payload's tag.
inline constexpr size_t kMaxChunkHeaderBytes = 6 + 4 * 10 + 2 * 5;

// Writes the header of a chunk with `payload_bytes` of payload into `out` (at least
// kMaxChunkHeaderBytes long) and returns its length.
size_t EncodeChunkHeader(const ChunkFields& fields, uint64_t payload_bytes,
                         std::span<uint8_t, kMaxChunkHeaderBytes> out);

// The chunk frame[offset, offset + n) of `frame` in wire form (`fields.offset` is what the
// message says; the exchange passes the same offset). Refused (InvalidArgument) for a null
// frame or a range that is not inside it. Allocates the header slice and one reference to the
// frame; never copies the payload.
absl::StatusOr<grpc::ByteBuffer> ChunkWire(const ChunkFields& fields, const FramePtr& frame,
                                           uint64_t offset, uint64_t n);

// The callee's side: a FrameChunk read as a grpc::ByteBuffer (a StreamFrames stream typed
// <FrameAck, grpc::ByteBuffer>), its fields parsed and its payload left in the received slices
// until AppendPayload() copies it once, straight into the frame being assembled. The generated
// parser would copy the payload into the message first (and allocate a string for it), then
// the exchange would copy it again into the frame.
//
// Parse() accepts exactly what FrameChunk::ParseFromString() accepts, with the same result:
// fields in any order, the last occurrence of a field wins, a known field number with another
// wire type and unknown fields are skipped, truncated or malformed input is refused
// (chunk_wire_test.cc compares the two on valid chunks and on random corruptions of them).
class ReceivedChunk {
 public:
  // Takes the message's slices (swapped out of *message, which is left empty: grpc::ByteBuffer
  // has no move constructor, a copy would allocate) and parses its fields. On error the chunk
  // is empty and the status says why.
  absl::Status Parse(grpc::ByteBuffer* message);
  // The same from a buffer the caller keeps (a new reference to its slices).
  absl::Status Parse(const grpc::ByteBuffer& message) {
    grpc::ByteBuffer copy(message);
    return Parse(&copy);
  }

  const ChunkFields& fields() const { return fields_; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  // Appends the payload to `out`, one copy from the received slices (no zero fill).
  void AppendPayload(std::vector<uint8_t>& out);

 private:
  grpc::ByteBuffer message_;
  ChunkFields fields_;
  uint64_t payload_at_ = 0;  // the payload's offset in the message
  uint64_t payload_bytes_ = 0;
};

}  // namespace heddle::relay::wan_internal
