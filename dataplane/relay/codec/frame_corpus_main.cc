// Writes the relay frame fuzz target's seed corpus (tests/fuzz/corpus/relay_frame): valid frames
// of each dtype, chunking and slice kind, and broken ones, one file each.
//
//   build/dataplane/relay/codec/relay_frame_corpus tests/fuzz/corpus/relay_frame
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "dataplane/relay/codec/encoder.h"
#include "dataplane/relay/codec/frame.h"

namespace {

using namespace heddle::relay;

bool Write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& b) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(out);
}

std::vector<uint8_t> Encoded(uint64_t n, uint32_t chunk, DType d, FrameHeader h, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> x(n * DTypeBytes(d));
  for (uint8_t& v : x) v = static_cast<uint8_t>(rng());
  // Finite values only: clear the top exponent bit of every value.
  for (size_t i = 0; i < n; ++i) x[(i + 1) * DTypeBytes(d) - 1] &= 0xBF;
  SignEncoder enc = *SignEncoder::Create(n, {.chunk_size = chunk});
  enc.Encode(d, x.data());
  std::vector<uint8_t> out(enc.FrameBytes());
  if (!enc.WriteFrame(h, out).ok()) std::abort();
  return out;
}

std::vector<uint8_t> Reseal(std::vector<uint8_t> b) {
  const uint32_t c = heddle::Crc32c(std::span<const uint8_t>(b).first(b.size() - 4));
  std::memcpy(&b[b.size() - 4], &c, 4);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const FrameHeader h{
      .round_id = 42, .sender_id = 7, .tensor_id = 3, .inner_steps = 20, .token_count = 81920};
  std::vector<std::pair<std::string, std::vector<uint8_t>>> files;
  files.push_back({"valid_f32_200_c64", Encoded(200, 64, DType::kFloat32, h, 1)});
  files.push_back({"valid_bf16_4097_c4096", Encoded(4097, 4096, DType::kBFloat16, h, 2)});
  files.push_back({"valid_f16_130_c128", Encoded(130, 128, DType::kFloat16, h, 3)});
  files.push_back({"valid_f32_64_c64", Encoded(64, 64, DType::kFloat32, h, 4)});
  FrameHeader slice = h;
  slice.tensor_elements = 1000;
  slice.element_offset = 768;
  files.push_back({"valid_slice_last", Encoded(232, 256, DType::kFloat32, slice, 5)});
  slice.element_offset = 256;
  files.push_back({"valid_slice_mid", Encoded(512, 256, DType::kBFloat16, slice, 6)});
  files.push_back({"valid_empty", Encoded(0, 64, DType::kFloat32, h, 7)});
  std::vector<uint8_t> v = files[0].second;
  files.push_back({"broken_truncated", {v.begin(), v.begin() + 70}});
  std::vector<uint8_t> flipped = v;
  flipped[90] ^= 4;
  files.push_back({"broken_checksum", flipped});
  std::vector<uint8_t> version = v;
  version[4] = 2;
  files.push_back({"broken_version", Reseal(version)});
  std::vector<uint8_t> chunk = v;
  chunk[48] = 100;
  files.push_back({"broken_chunk_size", Reseal(chunk)});
  std::vector<uint8_t> count = v;
  count[40] = 201;
  files.push_back({"broken_count", Reseal(count)});
  std::vector<uint8_t> mag = v;
  const float nan = std::nanf("");
  std::memcpy(&mag[64], &nan, 4);
  files.push_back({"broken_magnitude_nan", Reseal(mag)});
  std::vector<uint8_t> past = v;
  past[64 + 16 + 31] |= 0x80;  // bit 255 of 200
  files.push_back({"broken_bits_past_end", Reseal(past)});
  files.push_back({"broken_header_only", {v.begin(), v.begin() + 68}});
  for (const auto& [name, bytes] : files) {
    if (!Write(dir, name, bytes)) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
      return 1;
    }
  }
  std::printf("wrote %zu files to %s\n", files.size(), dir.c_str());
  return 0;
}
