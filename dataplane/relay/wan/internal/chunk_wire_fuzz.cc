// File: dataplane/relay/wan/internal/chunk_wire_fuzz.cc
//
// libFuzzer target for the callee's reader of StreamFrames chunks (ReceivedChunk, chunk_wire.h):
// the bytes come from a peer. The input's first byte picks how the rest is split into slices
// (gRPC hands a message over in slices of any size); the rest is the message. Beyond "no crash,
// no hang, no out-of-bounds read" (ASan), it aborts when:
//   * ReceivedChunk accepts what FrameChunk::ParseFromString refuses, or the other way round;
//   * an accepted chunk's fields or payload differ from the generated parser's;
//   * a refused chunk keeps fields or a payload;
//   * the accepted fields and payload, written back by ChunkWire, are not the bytes the
//     generated serializer writes for the same message.
// Built as relay_chunk_wire_fuzz (clang, HEDDLE_FUZZ=ON) and, with tests/fuzz/replay_main.cc,
// as the relay_chunk_wire_fuzz_replay regression runner that ctest uses on
// tests/fuzz/corpus/relay_chunk_wire.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/relay/wan/internal/chunk_wire.h"
#include "dataplane/relay/wan/peer.pb.h"

namespace {

namespace pb = ::heddle::relay::peer::v1;
using heddle::relay::wan_internal::ChunkFields;
using heddle::relay::wan_internal::ChunkWire;
using heddle::relay::wan_internal::FramePtr;
using heddle::relay::wan_internal::ReceivedChunk;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "relay_chunk_wire_fuzz: invariant violated: %s\n", what);
  std::abort();
}

std::string Bytes(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!b.Dump(&slices).ok()) Fail("a ByteBuffer that does not dump");
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = 1 + data[0] % 32;  // slice length; 32 and up: one slice per 32 bytes
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += step) {
    slices.emplace_back(bytes.data() + at, std::min(step, bytes.size() - at));
  }
  if (slices.empty()) slices.emplace_back(bytes.data(), 0);

  pb::FrameChunk m;
  const bool want_ok = m.ParseFromString(bytes);
  ReceivedChunk rc;
  const bool ok = rc.Parse(grpc::ByteBuffer(slices.data(), slices.size())).ok();
  if (ok != want_ok)
    Fail(ok ? "accepted what the generated parser refuses"
            : "refused what the generated parser accepts");
  const ChunkFields& f = rc.fields();
  if (!ok) {
    if (f.round_id != 0 || f.region_id != 0 || f.slice != 0 || f.frame_bytes != 0 ||
        f.offset != 0 || rc.payload_bytes() != 0) {
      Fail("a refused chunk kept fields");
    }
    return 0;
  }
  if (f.round_id != m.round_id() || f.region_id != m.region_id() || f.slice != m.slice() ||
      f.frame_bytes != m.frame_bytes() || f.offset != m.offset()) {
    Fail("fields differ from the generated parser's");
  }
  if (rc.payload_bytes() != m.data().size()) Fail("payload length differs");
  auto payload = std::make_shared<std::vector<uint8_t>>();
  rc.AppendPayload(*payload);
  if (std::string(payload->begin(), payload->end()) != m.data()) Fail("payload differs");

  pb::FrameChunk canonical;  // the fields alone: m also keeps the unknown fields it skipped
  canonical.set_round_id(m.round_id());
  canonical.set_region_id(m.region_id());
  canonical.set_slice(m.slice());
  canonical.set_frame_bytes(m.frame_bytes());
  canonical.set_offset(m.offset());
  canonical.set_data(m.data());
  const FramePtr frame = payload;
  auto wire = ChunkWire(f, frame, 0, frame->size());
  if (!wire.ok()) Fail("ChunkWire refused a whole frame");
  if (Bytes(*wire) != canonical.SerializeAsString()) Fail("ChunkWire's bytes differ");
  return 0;
}
