#include "dataplane/relay/wan/internal/chunk_wire.h"

#include <grpcpp/support/slice.h>

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dataplane/relay/wan/peer.pb.h"
#include "gtest/gtest.h"

namespace heddle::relay::wan_internal {
namespace {

namespace pb = ::heddle::relay::peer::v1;

constexpr uint64_t kChunkLimit = uint64_t{16} << 20;  // grpc_exchange.cc's kMaxChunkBytes
constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();

FramePtr Frame(size_t n, uint8_t seed = 1) {
  auto f = std::make_shared<std::vector<uint8_t>>(n);
  uint32_t x = seed;
  for (uint8_t& b : *f) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return f;
}

// The message the exchange built before the wire form (WriteFrameChunks' FrameChunk).
pb::FrameChunk OldChunk(const ChunkFields& c, const std::vector<uint8_t>& f, uint64_t off,
                        uint64_t n) {
  pb::FrameChunk m;
  m.set_round_id(c.round_id);
  m.set_region_id(c.region_id);
  m.set_slice(c.slice);
  m.set_frame_bytes(c.frame_bytes);
  m.set_offset(c.offset);
  m.set_data(f.data() + off, n);
  return m;
}

std::vector<grpc::Slice> Slices(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> s;
  EXPECT_TRUE(b.Dump(&s).ok());
  return s;
}

std::string Bytes(const grpc::ByteBuffer& b) {
  std::string out;
  for (const grpc::Slice& s : Slices(b)) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// Parses the wire form with the generated parser and checks it is, field for field and byte
// for byte, the message the old path built.
void ExpectSameAsOldPath(const ChunkFields& c, const FramePtr& f, uint64_t off, uint64_t n) {
  SCOPED_TRACE(testing::Message() << "round " << c.round_id << " region " << c.region_id
                                  << " slice " << c.slice << " frame_bytes " << c.frame_bytes
                                  << " offset " << c.offset << " payload " << n);
  absl::StatusOr<grpc::ByteBuffer> wire = ChunkWire(c, f, off, n);
  ASSERT_TRUE(wire.ok()) << wire.status();
  const pb::FrameChunk want = OldChunk(c, *f, off, n);
  const std::string bytes = Bytes(*wire);
  EXPECT_EQ(wire->Length(), bytes.size());
  pb::FrameChunk got;
  ASSERT_TRUE(got.ParseFromString(bytes));
  EXPECT_EQ(got.round_id(), c.round_id);
  EXPECT_EQ(got.region_id(), c.region_id);
  EXPECT_EQ(got.slice(), c.slice);
  EXPECT_EQ(got.frame_bytes(), c.frame_bytes);
  EXPECT_EQ(got.offset(), c.offset);
  EXPECT_TRUE(got.data() == want.data());  // not EXPECT_EQ: megabytes in a failure message
  EXPECT_EQ(got.data().size(), n);
  // Byte for byte the generated serializer's output, so nothing on the callee's side can tell.
  EXPECT_TRUE(bytes == want.SerializeAsString());
  EXPECT_TRUE(got.SerializeAsString() == want.SerializeAsString());
  // And the callee's reader gives the same fields and payload, without the generated parser.
  ReceivedChunk rc;
  ASSERT_TRUE(rc.Parse(*wire).ok());
  EXPECT_EQ(rc.fields().round_id, c.round_id);
  EXPECT_EQ(rc.fields().region_id, c.region_id);
  EXPECT_EQ(rc.fields().slice, c.slice);
  EXPECT_EQ(rc.fields().frame_bytes, c.frame_bytes);
  EXPECT_EQ(rc.fields().offset, c.offset);
  EXPECT_EQ(rc.payload_bytes(), n);
  std::vector<uint8_t> payload = {0xAB};  // appended to what is there
  rc.AppendPayload(payload);
  ASSERT_EQ(payload.size(), n + 1);
  EXPECT_EQ(payload[0], 0xAB);
  EXPECT_TRUE(std::equal(payload.begin() + 1, payload.end(), f->begin() + off));
}

TEST(ChunkWireTest, FieldNumbersAndTypesAreThoseOfPeerProto) {
  const google::protobuf::Descriptor* d = pb::FrameChunk::descriptor();
  ASSERT_EQ(d->field_count(), 6);
  using FD = google::protobuf::FieldDescriptor;
  const struct {
    const char* name;
    int number;
    FD::Type type;
  } want[] = {{"round_id", 1, FD::TYPE_UINT64}, {"region_id", 2, FD::TYPE_UINT32},
              {"slice", 3, FD::TYPE_UINT32},    {"frame_bytes", 4, FD::TYPE_UINT64},
              {"offset", 5, FD::TYPE_UINT64},   {"data", 6, FD::TYPE_BYTES}};
  for (const auto& w : want) {
    const FD* f = d->FindFieldByName(w.name);
    ASSERT_NE(f, nullptr) << w.name;
    EXPECT_EQ(f->number(), w.number) << w.name;
    EXPECT_EQ(f->type(), w.type) << w.name;
    EXPECT_FALSE(f->is_repeated()) << w.name;
  }
}

TEST(ChunkWireTest, EveryChunkOfAFrameParsesBackToTheOldMessage) {
  const FramePtr f = Frame(10'000);
  const uint64_t chunk = 4096;
  std::string joined;
  for (uint64_t off = 0; off < f->size(); off += chunk) {
    const uint64_t n = std::min<uint64_t>(chunk, f->size() - off);
    const ChunkFields c{7, 3, 12, f->size(), off};
    ExpectSameAsOldPath(c, f, off, n);
    pb::FrameChunk got;
    ASSERT_TRUE(got.ParseFromString(Bytes(*ChunkWire(c, f, off, n))));
    joined += got.data();
  }
  EXPECT_TRUE(joined == std::string(f->begin(), f->end()));
}

TEST(ChunkWireTest, EmptyPayloadAndZeroFieldsAreOmittedAsProto3Does) {
  const FramePtr empty = Frame(0);
  ExpectSameAsOldPath(ChunkFields{}, empty, 0, 0);  // the empty message: zero bytes
  EXPECT_EQ(ChunkWire(ChunkFields{}, empty, 0, 0)->Length(), 0u);
  ExpectSameAsOldPath(ChunkFields{5, 0, 0, 0, 0}, empty, 0, 0);
  ExpectSameAsOldPath(ChunkFields{0, 2, 0, 9, 0}, Frame(9), 0, 0);
  ExpectSameAsOldPath(ChunkFields{0, 0, 0, 0, 0}, Frame(9), 0, 9);  // payload only
  ExpectSameAsOldPath(ChunkFields{1, 2, 3, 9, 9}, Frame(9), 9, 0);  // at the frame's end
}

TEST(ChunkWireTest, PayloadAtTheChunkLimit) {
  const FramePtr f = Frame(kChunkLimit + 1000, 9);
  ExpectSameAsOldPath(ChunkFields{2, 1, 0, f->size(), 0}, f, 0, kChunkLimit);
  ExpectSameAsOldPath(ChunkFields{2, 1, 0, f->size(), 1000}, f, 1000, kChunkLimit);
  // 16 MiB + one byte: a 4-byte length varint either way.
  ExpectSameAsOldPath(ChunkFields{2, 1, 0, f->size(), 999}, f, 999, kChunkLimit + 1);
}

TEST(ChunkWireTest, LargeVarintsAndTheirBoundaries) {
  const FramePtr f = Frame(200);
  // Every length a varint can take (1 to 10 bytes) and the values on both sides of each step.
  std::vector<uint64_t> v64 = {1, kMax64, kMax64 - 1, uint64_t{1} << 63};
  for (int bits = 7; bits < 64; bits += 7) {
    v64.push_back((uint64_t{1} << bits) - 1);
    v64.push_back(uint64_t{1} << bits);
  }
  const std::vector<uint32_t> v32 = {1, 127, 128, 16383, 16384, (1u << 28) - 1, 1u << 28, kMax32};
  for (uint64_t v : v64) {
    ExpectSameAsOldPath(ChunkFields{v, 1, 1, v, v}, f, 0, f->size());
    ExpectSameAsOldPath(ChunkFields{v, 0, 0, 0, 0}, f, 13, 50);
  }
  for (uint32_t v : v32) ExpectSameAsOldPath(ChunkFields{1, v, v, 200, 0}, f, 0, 128);
  ExpectSameAsOldPath(ChunkFields{kMax64, kMax32, kMax32, kMax64, kMax64}, f, 0, 127);
  // Payload lengths at the 1 → 2 byte step of the length varint.
  ExpectSameAsOldPath(ChunkFields{1, 1, 1, 200, 0}, f, 0, 127);
  ExpectSameAsOldPath(ChunkFields{1, 1, 1, 200, 0}, f, 0, 128);
}

TEST(ChunkWireTest, HeaderAtItsLongestFitsTheBound) {
  std::array<uint8_t, kMaxChunkHeaderBytes> out;
  EXPECT_EQ(EncodeChunkHeader(ChunkFields{kMax64, kMax32, kMax32, kMax64, kMax64}, kMax64, out),
            kMaxChunkHeaderBytes);
}

TEST(ChunkWireTest, PayloadIsReferencedNotCopiedAndKeepsTheFrameAlive) {
  FramePtr f = Frame(5000);
  const uint8_t* base = f->data();
  const std::weak_ptr<const std::vector<uint8_t>> alive = f;
  absl::StatusOr<grpc::ByteBuffer> wire = ChunkWire(ChunkFields{1, 2, 3, 5000, 100}, f, 100, 4000);
  ASSERT_TRUE(wire.ok());
  {
    const std::vector<grpc::Slice> s = Slices(*wire);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[1].begin(), base + 100);  // the frame's own bytes
    EXPECT_EQ(s[1].size(), 4000u);
  }
  f.reset();  // the exchange let go of the frame: the buffer still holds it
  EXPECT_FALSE(alive.expired());
  grpc::ByteBuffer copy = *wire;  // what gRPC does with a ByteBuffer it is asked to write
  wire = absl::InternalError("dropped");
  EXPECT_FALSE(alive.expired());
  EXPECT_EQ(Slices(copy)[1].begin(), base + 100);
  copy.Clear();
  EXPECT_TRUE(alive.expired());  // the last slice reference released it
}

TEST(ChunkWireTest, RangesOutsideTheFrameAreRefused) {
  const FramePtr f = Frame(100);
  EXPECT_EQ(ChunkWire(ChunkFields{}, nullptr, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkWire(ChunkFields{}, f, 0, 101).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkWire(ChunkFields{}, f, 101, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkWire(ChunkFields{}, f, 60, 41).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkWire(ChunkFields{}, f, 1, kMax64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ChunkWire(ChunkFields{}, f, 60, 40).ok());
}

// `bytes` as a received message: split into slices at random places (gRPC hands a large
// message over in many slices).
grpc::ByteBuffer Received(const std::string& bytes, std::mt19937& rng) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = std::min<size_t>(bytes.size() - at, 1 + rng() % 64);
    slices.emplace_back(bytes.data() + at, n);
    at += n;
  }
  if (slices.empty()) slices.emplace_back(bytes.data(), 0);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The callee's reader accepts what the generated parser accepts, and reads the same fields.
void ExpectReadsLikeTheGeneratedParser(const std::string& bytes, std::mt19937& rng) {
  pb::FrameChunk m;
  const bool want_ok = m.ParseFromString(bytes);
  ReceivedChunk rc;
  const absl::Status st = rc.Parse(Received(bytes, rng));
  ASSERT_EQ(st.ok(), want_ok) << st << " on " << testing::PrintToString(bytes);
  if (!want_ok) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(rc.payload_bytes(), 0u);
    return;
  }
  EXPECT_EQ(rc.fields().round_id, m.round_id());
  EXPECT_EQ(rc.fields().region_id, m.region_id());
  EXPECT_EQ(rc.fields().slice, m.slice());
  EXPECT_EQ(rc.fields().frame_bytes, m.frame_bytes());
  EXPECT_EQ(rc.fields().offset, m.offset());
  ASSERT_EQ(rc.payload_bytes(), m.data().size());
  std::vector<uint8_t> payload;
  rc.AppendPayload(payload);
  EXPECT_TRUE(std::string(payload.begin(), payload.end()) == m.data());
}

std::string Varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
  return s;
}
std::string Key(int field, int type) { return Varint(static_cast<uint64_t>(field) << 3 | type); }

TEST(ReceivedChunkTest, HandWrittenEncodingsReadAsTheGeneratedParserReadsThem) {
  std::mt19937 rng(1);
  const std::string payload = "payload bytes";
  const std::string data = Key(6, 2) + Varint(payload.size()) + payload;
  const std::vector<std::string> cases = {
      "",                                                    // the empty message
      data,                                                  // the payload alone
      data + Key(1, 0) + Varint(5) + Key(2, 0) + Varint(3),  // fields out of order
      Key(1, 0) + Varint(5) + Key(1, 0) + Varint(9),         // the last occurrence wins
      data + Key(6, 2) + Varint(3) + "abc",                  // the last payload wins
      data + Key(6, 2) + Varint(0),                          // ... also when it is empty
      Key(2, 0) + Varint(kMax64),                            // uint32 from a 10-byte varint
      Key(3, 0) + Varint(uint64_t{1} << 35 | 7),             // keeps the low 32 bits
      Key(1, 2) + Varint(2) + "xy" + Key(2, 0) + Varint(4),  // known number, other wire type
      Key(6, 0) + Varint(77) + Key(4, 5) + "abcd" + Key(5, 1) + "12345678",  // likewise
      Key(99, 0) + Varint(1) + Key(1000, 2) + Varint(1) + "z" + data,        // unknown fields
      Key(7, 3) + Key(1, 0) + Varint(1) + Key(7, 4) + data,                  // an unknown group
      Key(7, 3) + Key(1, 0) + Varint(1) + Key(8, 4),  // a group closed by another
      Key(1, 4),                                      // an end group at the top
      Key(7, 3) + data,                               // a group never closed
      Key(1, 6) + Varint(1),                          // wire types 6 and 7 do not exist
      Key(1, 7) + Varint(1),
      Key(0, 0) + Varint(1),  // field number 0
      Key(0, 2) + Varint(1) + "a",
      std::string(1, '\0'),
      Key(1, 0),                                     // a field without its value
      Key(1, 0) + std::string(10, '\x80') + "\x01",  // an 11-byte varint
      Key(1, 0) + std::string(9, '\xff') + "\x01",   // 10 bytes: fine
      Key(1, 0) + std::string(9, '\xff') + "\x7f",   // 10 bytes, bits past 64
      Key(6, 2) + Varint(20) + "short",              // a payload cut short
      Key(6, 2) + Varint(uint64_t{1} << 31) + "x",   // a length over INT_MAX
      Key(6, 2) + Varint(kMax64) + "x",
      std::string(5, '\x80'),                                  // a truncated tag
      std::string("\x88\x80\x80\x80\x00", 5) + Varint(1),      // a 5-byte tag
      std::string("\x88\x80\x80\x80\x80\x00", 6) + Varint(1),  // a 6-byte tag
      std::string("\x88\x80\x80\x80\x10", 5) + Varint(1),      // 5 bytes, bits past 32
      Varint(uint64_t{50092785101} << 3) + Varint(1),          // a field number over 2^29
      Key(536870911, 0) + Varint(1),                           // the largest field number
      // An unknown field whose length does not fit 32 bits (SkipField would keep its low 32
      // bits, 0, and go on), one encoded in 6 bytes, and the same inside a group.
      Key(9, 2) + Varint(uint64_t{1} << 35) + data,
      Key(9, 2) + std::string("\x81\x80\x80\x80\x80\x00", 6) + "x" + data,
      Key(6, 2) + std::string("\x81\x80\x80\x80\x80\x00", 6) + "x",
      Key(7, 3) + Key(9, 2) + Varint(uint64_t{1} << 35) + Key(7, 4) + data,
      Key(7, 3) + Key(9, 2) + Varint(1) + "y" + Key(7, 4) + data,
      Key(7, 3) + Key(9, 1) + "12345678" + Key(9, 5) + "1234" + Key(7, 4) + data,
      // Inside a group: a field number 0, and a 6-byte tag.
      Key(7, 3) + Key(0, 1) + "12345678" + Key(7, 4) + data,
      Key(7, 3) + std::string("\x88\x80\x80\x80\x80\x00", 6) + Varint(1) + Key(7, 4) + data,
  };
  for (const std::string& c : cases) ExpectReadsLikeTheGeneratedParser(c, rng);
  // Nested unknown groups around the recursion limit (100).
  for (int depth : {98, 99, 100, 101, 102}) {
    std::string g;
    for (int i = 0; i < depth; ++i) g += Key(7, 3);
    for (int i = 0; i < depth; ++i) g += Key(7, 4);
    ExpectReadsLikeTheGeneratedParser(g + data, rng);
  }
}

TEST(ReceivedChunkTest, RandomCorruptionsReadAsTheGeneratedParserReadsThem) {
  std::mt19937 rng(7);
  const FramePtr f = Frame(3000, 3);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t off = rng() % 2000, n = rng() % 1000;
    const ChunkFields c{rng() % 3 == 0 ? kMax64 : rng() % 1000, static_cast<uint32_t>(rng()),
                        static_cast<uint32_t>(rng() % 64), f->size(), off};
    std::string bytes = OldChunk(c, *f, off, n).SerializeAsString();
    switch (rng() % 5) {
      case 0:  // flip a few bytes
        for (int k = 1 + rng() % 3; k > 0 && !bytes.empty(); --k) {
          bytes[rng() % bytes.size()] = static_cast<char>(rng());
        }
        break;
      case 1:  // cut it short
        bytes.resize(rng() % (bytes.size() + 1));
        break;
      case 2: {  // insert random bytes
        std::string junk(1 + rng() % 8, '\0');
        for (char& ch : junk) ch = static_cast<char>(rng());
        bytes.insert(rng() % (bytes.size() + 1), junk);
        break;
      }
      case 3:  // the header's bytes mutated, the payload intact
        for (int k = 0; k < 3; ++k)
          bytes[rng() % std::min<size_t>(bytes.size(), 30)] ^= 1 << (rng() % 8);
        break;
      default:  // append another encoded chunk (every field occurs twice)
        bytes += OldChunk(ChunkFields{1, 2, 3, 4, 5}, *f, 0, rng() % 50).SerializeAsString();
    }
    ExpectReadsLikeTheGeneratedParser(bytes, rng);
    if (testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace heddle::relay::wan_internal
