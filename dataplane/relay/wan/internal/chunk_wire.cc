#include "dataplane/relay/wan/internal/chunk_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <array>
#include <utility>

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

namespace {

using google::protobuf::io::CodedInputStream;
using WFL = google::protobuf::internal::WireFormatLite;

// The generated parser's rules (protobuf 3.21 parse_context), which CodedInputStream's own
// readers are laxer than:
//   * a tag is a varint of at most 5 bytes, of which it keeps the low 32 bits;
//   * a length is a varint of at most 5 bytes below 2^31 (ReadVarint32, which SkipField uses,
//     would keep the low 32 bits of a longer one);
//   * other varints take up to 10 bytes.
bool ReadTag(CodedInputStream& in, uint32_t& tag) {
  const int at = in.CurrentPosition();
  uint64_t v = 0;
  if (!in.ReadVarint64(&v) || in.CurrentPosition() - at > 5) return false;
  tag = static_cast<uint32_t>(v);
  return true;
}

bool ReadLength(CodedInputStream& in, int& n) {
  const int at = in.CurrentPosition();
  uint64_t v = 0;
  if (!in.ReadVarint64(&v) || in.CurrentPosition() - at > 5 || v > INT32_MAX) return false;
  n = static_cast<int>(v);
  return true;
}

// Skips the value of a field this reader does not keep (unknown, or a known number with
// another wire type), groups included, as the generated parser skips it into its unknown
// fields. False when it is malformed.
bool SkipValue(CodedInputStream& in, uint32_t tag) {
  switch (WFL::GetTagWireType(tag)) {
    case WFL::WIRETYPE_VARINT: {
      uint64_t v;
      return in.ReadVarint64(&v);
    }
    case WFL::WIRETYPE_FIXED64:
      return in.Skip(8);
    case WFL::WIRETYPE_FIXED32:
      return in.Skip(4);
    case WFL::WIRETYPE_LENGTH_DELIMITED: {
      int n = 0;
      return ReadLength(in, n) && in.Skip(n);
    }
    case WFL::WIRETYPE_START_GROUP: {
      // Up to the end-group tag of the same number; nesting counts against the stream's
      // recursion limit (100, the generated parser's too).
      if (!in.IncrementRecursionDepth()) return false;
      for (;;) {
        uint32_t inner = 0;
        if (in.BytesUntilLimit() == 0 || !ReadTag(in, inner)) return false;
        if (WFL::GetTagFieldNumber(inner) == 0) return false;
        if (WFL::GetTagWireType(inner) == WFL::WIRETYPE_END_GROUP) {
          in.DecrementRecursionDepth();
          return WFL::GetTagFieldNumber(inner) == WFL::GetTagFieldNumber(tag);
        }
        if (!SkipValue(in, inner)) return false;
      }
    }
    default:  // an end group outside its group; wire types 6 and 7 do not exist
      return false;
  }
}

// FrameChunk's fields from `message`; the payload's place and length, not its bytes.
absl::Status ParseChunkFields(grpc::ByteBuffer& message, ChunkFields& fields, uint64_t& payload_at,
                              uint64_t& payload_bytes) {
  if (!message.Valid()) return absl::OkStatus();  // no bytes: the empty message
  grpc::ProtoBufferReader reader(&message);
  if (!reader.status().ok()) {
    return absl::InvalidArgumentError(reader.status().error_message());
  }
  // A negative limit would be no limit: a message this long is refused outright (the server's
  // receive limit keeps them far shorter).
  if (message.Length() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("a chunk message longer than 2^31 - 1 bytes");
  }
  CodedInputStream in(&reader);
  in.PushLimit(static_cast<int>(message.Length()));  // BytesUntilLimit() == 0: the end
  for (;;) {
    if (in.BytesUntilLimit() == 0) return absl::OkStatus();
    uint32_t tag = 0;
    if (!ReadTag(in, tag)) return absl::InvalidArgumentError("a malformed tag");
    const int field = WFL::GetTagFieldNumber(tag);
    const WFL::WireType type = WFL::GetTagWireType(tag);
    if (field == 0) return absl::InvalidArgumentError("a field with number 0");
    if (type == WFL::WIRETYPE_VARINT && field >= 1 && field <= 5) {
      // A uint32 field keeps the low 32 bits of its varint.
      uint64_t v = 0;
      if (!in.ReadVarint64(&v)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("field %d: a truncated or overlong varint", field));
      }
      switch (field) {
        case 1:
          fields.round_id = v;
          break;
        case 2:
          fields.region_id = static_cast<uint32_t>(v);
          break;
        case 3:
          fields.slice = static_cast<uint32_t>(v);
          break;
        case 4:
          fields.frame_bytes = v;
          break;
        default:
          fields.offset = v;
          break;
      }
    } else if (type == WFL::WIRETYPE_LENGTH_DELIMITED && field == 6) {
      int n = 0;
      if (!ReadLength(in, n))
        return absl::InvalidArgumentError("the payload's length is malformed");
      payload_at = static_cast<uint64_t>(in.CurrentPosition());
      payload_bytes = static_cast<uint64_t>(n);
      if (!in.Skip(n)) {
        return absl::InvalidArgumentError("the payload is shorter than its length says");
      }
    } else if (!SkipValue(in, tag)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("field %d of wire type %d is malformed", field, type));
    }
  }
}

}  // namespace

absl::Status ReceivedChunk::Parse(grpc::ByteBuffer* message) {
  message_.Clear();
  message_.Swap(message);
  fields_ = ChunkFields{};
  payload_at_ = payload_bytes_ = 0;
  absl::Status st = ParseChunkFields(message_, fields_, payload_at_, payload_bytes_);
  if (st.ok()) return st;
  const uint64_t size = message_.Length();
  message_.Clear();
  fields_ = ChunkFields{};
  payload_at_ = payload_bytes_ = 0;
  return absl::InvalidArgumentError(
      absl::StrFormat("malformed FrameChunk message of %u bytes: %s", size, st.message()));
}

void ReceivedChunk::AppendPayload(std::vector<uint8_t>& out) {
  if (payload_bytes_ == 0) return;
  grpc::ProtoBufferReader reader(&message_);
  reader.Skip(static_cast<int>(payload_at_));  // within the message: Parse() read past it
  uint64_t left = payload_bytes_;
  const void* data = nullptr;
  int size = 0;
  while (left > 0 && reader.Next(&data, &size)) {
    const uint64_t n = std::min<uint64_t>(left, static_cast<uint64_t>(size));
    const uint8_t* p = static_cast<const uint8_t*>(data);
    out.insert(out.end(), p, p + n);
    left -= n;
  }
}

}  // namespace heddle::relay::wan_internal
