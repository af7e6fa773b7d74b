#include "dataplane/relay/codec/frame.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

using ::testing::HasSubstr;

TEST(Crc32cTest, HardwareAndTableFormsAgree) {
  const std::string check = "123456789";
  std::span<const uint8_t> b(reinterpret_cast<const uint8_t*>(check.data()), check.size());
  EXPECT_EQ(Crc32c(b), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable(b), 0xE3069283u);
  std::mt19937_64 rng(1);
  std::vector<uint8_t> buf(300);
  for (uint8_t& v : buf) v = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < 8; ++off) {
    for (size_t n = 0; n + off <= buf.size(); n += 13) {
      std::span<const uint8_t> s(buf.data() + off, n);
      ASSERT_EQ(Crc32c(s), Crc32cPortable(s)) << n;
      ASSERT_EQ(Crc32c(s.subspan(n / 2), Crc32c(s.first(n / 2))), Crc32c(s));
    }
  }
}

struct Built {
  FrameHeader h;
  std::vector<float> mags;
  std::vector<uint64_t> signs;
  std::vector<uint8_t> bytes;
};

Built Make(uint64_t n, uint32_t chunk, std::mt19937_64& rng, uint64_t tensor = 0,
           uint64_t offset = 0) {
  Built b;
  b.h = {.round_id = 0x0102030405060708,
         .sender_id = 0xA1B2C3D4,
         .tensor_id = 77,
         .dtype = DType::kBFloat16,
         .tensor_elements = tensor == 0 ? n : tensor,
         .element_offset = offset,
         .element_count = n,
         .chunk_size = chunk,
         .inner_steps = 12,
         .token_count = 123456789};
  b.mags.resize(FrameChunks(n, chunk));
  for (float& m : b.mags) m = std::ldexp(static_cast<float>(rng() % 1000 + 1), -12);
  b.signs.resize(FrameWords(n));
  for (uint64_t& w : b.signs) w = rng();
  if (n % 64 != 0) b.signs.back() &= ~(~uint64_t{0} << (n % 64));
  absl::StatusOr<std::vector<uint8_t>> f = BuildFrame(b.h, b.mags, b.signs);
  EXPECT_TRUE(f.ok()) << f.status();
  if (f.ok()) b.bytes = *f;
  return b;
}

TEST(FrameTest, SizesFollowTheLayout) {
  // One 4096-value chunk: 64 header + 4 magnitude + 4 padding + 512 signs + 4 checksum.
  EXPECT_EQ(FrameBytes(4096, 4096), 588u);
  EXPECT_EQ(FrameBytes(8192, 4096), 64u + 8 + 1024 + 4);
  EXPECT_EQ(FrameBytes(65, 64), 64u + 8 + 16 + 4);
  EXPECT_EQ(FrameBytes(0, 64), 68u);
  EXPECT_EQ(FrameBytes(kMaxFrameElements, 64),
            64u + 4 * (kMaxFrameElements / 64) + kMaxFrameElements / 8 + 4);
}

TEST(FrameTest, GoldenLayout) {
  std::mt19937_64 rng(2);
  Built b = Make(65, 64, rng);
  const std::vector<uint8_t>& f = b.bytes;
  ASSERT_EQ(f.size(), FrameBytes(65, 64));
  EXPECT_EQ(std::string(f.begin(), f.begin() + 4), "HGSF");
  EXPECT_EQ(f[4], 1);
  EXPECT_EQ(f[5], 0);
  EXPECT_EQ(f[6], 2);  // bf16
  EXPECT_EQ(f[7], 0);
  EXPECT_EQ(f[8], 0x08);
  EXPECT_EQ(f[15], 0x01);
  EXPECT_EQ(f[16], 0xD4);
  EXPECT_EQ(f[20], 77);
  EXPECT_EQ(f[24], 65);  // tensor elements
  EXPECT_EQ(f[40], 65);  // element count
  EXPECT_EQ(f[48], 64);  // chunk size
  EXPECT_EQ(f[52], 12);  // inner steps
  uint64_t tokens;
  std::memcpy(&tokens, &f[56], 8);
  EXPECT_EQ(tokens, 123456789u);
  float m1;
  std::memcpy(&m1, &f[68], 4);
  EXPECT_EQ(m1, b.mags[1]);
  uint64_t w0;
  std::memcpy(&w0, &f[72], 8);
  EXPECT_EQ(w0, b.signs[0]);
  uint32_t crc;
  std::memcpy(&crc, &f[f.size() - 4], 4);
  EXPECT_EQ(crc, Crc32c(std::span<const uint8_t>(f).first(f.size() - 4)));
}

TEST(FrameTest, RoundTrips) {
  std::mt19937_64 rng(3);
  for (uint64_t n : {1, 63, 64, 65, 127, 128, 4095, 4096, 4097, 20000}) {
    for (uint32_t chunk : {64u, 128u, 4096u, 1u << 20}) {
      Built b = Make(n, chunk, rng);
      absl::StatusOr<FrameView> v = ParseFrame(b.bytes);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(v->header(), b.h);
      ASSERT_EQ(v->chunks(), b.mags.size());
      for (size_t k = 0; k < b.mags.size(); ++k) EXPECT_EQ(v->magnitude(k), b.mags[k]);
      for (size_t i = 0; i < b.signs.size(); ++i) ASSERT_EQ(v->sign_word(i), b.signs[i]);
    }
  }
  // Slices of a larger tensor: whole chunks, and the last one partial.
  Built mid = Make(256, 128, rng, /*tensor=*/1000, /*offset=*/512);
  EXPECT_TRUE(ParseFrame(mid.bytes).ok());
  Built last = Make(104, 128, rng, /*tensor=*/1000, /*offset=*/896);
  EXPECT_TRUE(ParseFrame(last.bytes).ok());
  // The empty tensor.
  Built empty = Make(0, 64, rng);
  absl::StatusOr<FrameView> v = ParseFrame(empty.bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->chunks(), 0u);
}

TEST(FrameTest, EveryTruncationAndEveryByteFlipIsRefused) {
  std::mt19937_64 rng(4);
  Built b = Make(200, 64, rng);
  for (size_t len = 0; len < b.bytes.size(); ++len) {
    std::vector<uint8_t> t(b.bytes.begin(), b.bytes.begin() + len);
    EXPECT_FALSE(ParseFrame(t).ok()) << len;
  }
  std::vector<uint8_t> longer = b.bytes;
  longer.push_back(0);
  EXPECT_FALSE(ParseFrame(longer).ok());
  for (size_t i = 0; i < b.bytes.size(); ++i) {
    for (uint8_t bit : {0x01, 0x80}) {
      std::vector<uint8_t> t = b.bytes;
      t[i] ^= bit;
      ASSERT_FALSE(ParseFrame(t).ok()) << "byte " << i;
    }
  }
}

// Edits a frame and recomputes its checksum, so the edit reaches the field checks.
std::vector<uint8_t> Edit(std::vector<uint8_t> f, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) f[at + i] = static_cast<uint8_t>(v >> (8 * i));
  const uint32_t c = Crc32c(std::span<const uint8_t>(f).first(f.size() - 4));
  std::memcpy(&f[f.size() - 4], &c, 4);
  return f;
}

std::string Error(const std::vector<uint8_t>& f) {
  absl::StatusOr<FrameView> v = ParseFrame(f);
  return v.ok() ? "ok" : std::string(v.status().message());
}

TEST(FrameTest, FieldErrorsAreNamed) {
  std::mt19937_64 rng(5);
  const Built b = Make(200, 64, rng);  // chunks of 64: 4 magnitudes, no padding; 4 words
  const std::vector<uint8_t>& f = b.bytes;
  ASSERT_EQ(Error(f), "ok");
  EXPECT_THAT(Error({f.begin(), f.begin() + 10}), HasSubstr("shorter than"));
  std::vector<uint8_t> bad_magic = f;
  bad_magic[0] = 'X';
  EXPECT_THAT(Error(bad_magic), HasSubstr("not a GeoMesh relay frame"));
  std::vector<uint8_t> flipped = f;
  flipped[100] ^= 1;
  EXPECT_EQ(ParseFrame(flipped).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Error(flipped), HasSubstr("checksum"));
  EXPECT_THAT(Error(Edit(f, 4, 2, 2)), HasSubstr("version 2"));
  EXPECT_THAT(Error(Edit(f, 6, 9, 1)), HasSubstr("dtype 9 unknown"));
  EXPECT_THAT(Error(Edit(f, 7, 1, 1)), HasSubstr("flags"));
  EXPECT_THAT(Error(Edit(f, 48, 100, 4)), HasSubstr("chunk size 100"));
  EXPECT_THAT(Error(Edit(f, 48, 0, 4)), HasSubstr("chunk size 0"));
  EXPECT_THAT(Error(Edit(f, 48, uint64_t{1} << 31, 4)), HasSubstr("chunk size"));
  EXPECT_THAT(Error(Edit(f, 40, 201, 8)), HasSubstr("outside the tensor"));
  EXPECT_THAT(Error(Edit(f, 40, ~uint64_t{0}, 8)), HasSubstr("more than"));
  EXPECT_THAT(Error(Edit(f, 32, ~uint64_t{0} - 10, 8)), HasSubstr("outside the tensor"));
  EXPECT_THAT(Error(Edit(f, 24, ~uint64_t{0}, 8)), HasSubstr("more than"));
  EXPECT_THAT(Error(Edit(Edit(f, 24, 1000, 8), 32, 32, 8)), HasSubstr("not a multiple"));
  EXPECT_THAT(Error(Edit(f, 24, 1000, 8)), HasSubstr("only the tensor's last frame"));
  EXPECT_THAT(Error(Edit(f, 52, 0, 4)), HasSubstr("inner steps 0"));
  EXPECT_THAT(Error(Edit(f, 56, 0, 8)), HasSubstr("token count 0"));
  EXPECT_THAT(Error(Edit(Edit(f, 40, 128, 8), 24, 128, 8)), HasSubstr("make"));
  EXPECT_THAT(Error(Edit(f, 64, std::bit_cast<uint32_t>(std::nanf("")), 4)),
              HasSubstr("magnitude of chunk 0"));
  EXPECT_THAT(Error(Edit(f, 68, std::bit_cast<uint32_t>(-1.0f), 4)),
              HasSubstr("magnitude of chunk 1"));
  EXPECT_THAT(Error(Edit(f, 72, std::bit_cast<uint32_t>(-0.0f), 4)),
              HasSubstr("magnitude of chunk 2"));
  EXPECT_THAT(Error(Edit(f, 76, 0x7F800000u, 4)), HasSubstr("magnitude of chunk 3"));
  // 200 values: bits 200..255 of the last word are unused.
  EXPECT_THAT(Error(Edit(f, 80 + 24 + 7, 0x80, 1)), HasSubstr("sign bits set past element 200"));
  // Padding: one chunk of 128 values has 4 magnitude bytes and 4 of padding.
  const Built p = Make(128, 128, rng);
  EXPECT_THAT(Error(Edit(p.bytes, 68, 1, 1)), HasSubstr("padding byte 68"));
}

TEST(FrameTest, OneSetBitPastTheEndIsFoundWherePresent) {
  std::mt19937_64 rng(6);
  const Built b = Make(199, 64, rng);
  // Make bit 199 of the stream set: element 199 sits in word 3, bit 7.
  std::vector<uint8_t> f = b.bytes;
  const size_t signs_at = 64 + 16;
  f = Edit(f, signs_at + 24, f[signs_at + 24] | 0x80, 1);
  EXPECT_THAT(Error(f), HasSubstr("past element 199"));
}

TEST(FrameTest, WriteFrameRefusesWhatParseFrameWould) {
  std::mt19937_64 rng(7);
  Built b = Make(100, 64, rng);
  std::vector<uint8_t> out(FrameBytes(100, 64));
  EXPECT_TRUE(WriteFrame(b.h, b.mags, b.signs, out).ok());
  EXPECT_EQ(out, b.bytes);
  std::vector<uint8_t> small(out.size() - 1);
  EXPECT_FALSE(WriteFrame(b.h, b.mags, b.signs, small).ok());
  std::vector<float> nan_mags = b.mags;
  nan_mags[1] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(WriteFrame(b.h, nan_mags, b.signs, out).message(), HasSubstr("chunk 1"));
  std::vector<uint64_t> extra = b.signs;
  extra[1] |= uint64_t{1} << 40;  // element 104
  EXPECT_THAT(WriteFrame(b.h, b.mags, extra, out).message(), HasSubstr("past element 100"));
  EXPECT_FALSE(WriteFrame(b.h, std::span<const float>(b.mags).first(1), b.signs, out).ok());
  FrameHeader h = b.h;
  h.token_count = 0;
  EXPECT_FALSE(WriteFrame(h, b.mags, b.signs, out).ok());
}

TEST(FrameTest, AccumulateAndDecodeHandChecked) {
  // 130 values in chunks of 64: magnitudes 0.5, 2, 8; value j negative when j % 4 == 1.
  FrameHeader h{.tensor_elements = 130, .element_count = 130, .chunk_size = 64, .token_count = 1};
  std::vector<uint64_t> signs(3, 0x2222222222222222ull);
  signs[2] &= 0b11;
  const std::vector<float> mags = {0.5f, 2.0f, 8.0f};
  absl::StatusOr<std::vector<uint8_t>> bytes = BuildFrame(h, mags, signs);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<FrameView> f = ParseFrame(*bytes);
  ASSERT_TRUE(f.ok());
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    const SignKernels* k = KernelsFor(isa);
    if (k == nullptr) continue;
    std::vector<float> acc(130, 1.0f);
    ASSERT_TRUE(AccumulateFrame(*f, 0.25, acc, *k));
    std::vector<float> out(130);
    ASSERT_TRUE(DecodeFrame(*f, out, *k));
    for (size_t j = 0; j < 130; ++j) {
      const float m = mags[j / 64];
      const float s = j % 4 == 1 ? -1.0f : 1.0f;
      ASSERT_EQ(acc[j], 1.0f + 0.25f * m * s) << j;
      ASSERT_EQ(out[j], m * s) << j;
    }
    std::vector<float> short_acc(129, 3.0f);
    EXPECT_FALSE(AccumulateFrame(*f, 1.0, short_acc, *k));
    EXPECT_EQ(short_acc, std::vector<float>(129, 3.0f));
  }
}

TEST(FrameTest, CoefficientIsRoundedOncePerChunk) {
  // c = (float)(weight · (double)m): one rounding. Checked on random weights and magnitudes,
  // enough of which round differently when the product is taken in fp32 instead.
  FrameHeader h{.tensor_elements = 64, .element_count = 64, .chunk_size = 64, .token_count = 1};
  const std::vector<uint64_t> signs = {0};
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int differs = 0;
  for (int t = 0; t < 200; ++t) {
    const std::vector<float> mags = {static_cast<float>(u(rng) * 10)};
    const double w = u(rng);
    absl::StatusOr<std::vector<uint8_t>> bytes = BuildFrame(h, mags, signs);
    ASSERT_TRUE(bytes.ok());
    absl::StatusOr<FrameView> f = ParseFrame(*bytes);
    ASSERT_TRUE(f.ok());
    std::vector<float> acc(64, 0.0f);
    AccumulateFrame(*f, w, acc);
    const float want = static_cast<float>(w * static_cast<double>(mags[0]));
    ASSERT_EQ(acc[0], want);
    ASSERT_EQ(acc[63], want);
    if (want != static_cast<float>(w) * mags[0]) ++differs;
  }
  EXPECT_GT(differs, 10);
}

// The fuzz corpus holds what its names say: valid_* frames parse, broken_* ones do not.
TEST(FrameTest, FuzzCorpusFilesAreWhatTheirNamesSay) {
  int valid = 0, broken = 0;
  for (const std::filesystem::directory_entry& e :
       std::filesystem::directory_iterator(HEDDLE_RELAY_CORPUS)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
    const std::string name = e.path().filename().string();
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_TRUE(ParseFrame(b).ok()) << name << ": " << ParseFrame(b).status();
      ++valid;
    } else if (name.rfind("broken_", 0) == 0) {
      EXPECT_FALSE(ParseFrame(b).ok()) << name;
      ++broken;
    }
  }
  EXPECT_GE(valid, 5);
  EXPECT_GE(broken, 5);
}

}  // namespace
}  // namespace heddle::relay
