// File: dataplane/relay/codec/frame_fuzz.cc
//
// libFuzzer target for the relay frame parser. Each input is parsed twice: as given (random bytes
// rarely pass the checksum, so this exercises the length, magic and version checks), and
// "resealed" — magic, version and checksum fixed up — so mutations reach every field check.
// Beyond "no crash, no out-of-bounds read" (ASan), it aborts when an accepted frame:
//   * does not re-serialize (WriteFrame from its parsed parts) to the very same bytes;
//   * decodes or accumulates differently with the scalar and the vector kernels, or to values
//     that are not ±m of their chunk;
//   * cannot be aggregated alone, or aggregates to something other than its own decoding.
// Built as relay_frame_fuzz (clang, HEDDLE_FUZZ=ON) and, with tests/fuzz/replay_main.cc, as the
// relay_frame_fuzz_replay regression runner that ctest uses on tests/fuzz/corpus/relay_frame.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/crc32c.h"
#include "dataplane/relay/codec/aggregate.h"
#include "dataplane/relay/codec/frame.h"

namespace {

using namespace heddle::relay;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "relay_frame_fuzz: invariant violated: %s\n", what);
  std::abort();
}

#define HEDDLE_FUZZ_CHECK(cond) \
  do {                          \
    if (!(cond)) Fail(#cond);   \
  } while (0)

std::vector<uint8_t> Reseal(const uint8_t* data, size_t len) {
  std::vector<uint8_t> b(data, data + len);
  if (b.size() < kFrameHeaderBytes + kFrameTrailerBytes) return b;
  std::memcpy(b.data(), kFrameMagic, 4);
  b[4] = kFrameVersion;
  b[5] = 0;
  const uint32_t c = heddle::Crc32c(std::span<const uint8_t>(b).first(b.size() - 4));
  for (int i = 0; i < 4; ++i) b[b.size() - 4 + i] = static_cast<uint8_t>(c >> (8 * i));
  return b;
}

void CheckAccepted(const FrameView& f) {
  const FrameHeader& h = f.header();
  // Keep the dense checks to frames of a reasonable size; the parse itself ran on all.
  if (h.element_count > (1u << 20)) return;
  std::vector<float> mags(f.chunks());
  for (uint64_t k = 0; k < f.chunks(); ++k) mags[k] = f.magnitude(k);
  std::vector<uint64_t> words(FrameWords(h.element_count));
  for (uint64_t i = 0; i < words.size(); ++i) words[i] = f.sign_word(i);
  std::vector<uint8_t> again(FrameBytes(h.element_count, h.chunk_size));
  HEDDLE_FUZZ_CHECK(WriteFrame(h, mags, words, again).ok());
  HEDDLE_FUZZ_CHECK(again.size() == f.bytes().size() &&
                    std::memcmp(again.data(), f.bytes().data(), again.size()) == 0);

  const size_t n = h.element_count;
  std::vector<float> ref(n), acc_ref(n, 1.0f);
  HEDDLE_FUZZ_CHECK(DecodeFrame(f, ref, *KernelsFor(Isa::kScalar)));
  HEDDLE_FUZZ_CHECK(AccumulateFrame(f, 0.375, acc_ref, *KernelsFor(Isa::kScalar)));
  for (size_t j = 0; j < n; ++j) {
    HEDDLE_FUZZ_CHECK(std::fabs(ref[j]) == mags[j / h.chunk_size]);
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    const SignKernels* k = KernelsFor(isa);
    if (k == nullptr) continue;
    std::vector<float> out(n), acc(n, 1.0f);
    HEDDLE_FUZZ_CHECK(DecodeFrame(f, out, *k));
    HEDDLE_FUZZ_CHECK(AccumulateFrame(f, 0.375, acc, *k));
    HEDDLE_FUZZ_CHECK(std::memcmp(out.data(), ref.data(), 4 * n) == 0);
    HEDDLE_FUZZ_CHECK(std::memcmp(acc.data(), acc_ref.data(), 4 * n) == 0);
  }
  // Alone, a sender weighs 1 under either weighting: the aggregate is its decoding (0 + ±m).
  Aggregator agg(1);
  for (Weighting w : {Weighting::kTokens, Weighting::kFedNova}) {
    std::vector<float> out(n);
    HEDDLE_FUZZ_CHECK(agg.Aggregate(std::span<const FrameView>(&f, 1), {.weighting = w}, out,
                                    *KernelsFor(Isa::kScalar))
                          .ok());
    for (size_t j = 0; j < n; ++j) HEDDLE_FUZZ_CHECK(out[j] == ref[j]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t len) {
  absl::StatusOr<FrameView> f = ParseFrame(std::span<const uint8_t>(data, len));
  if (f.ok()) CheckAccepted(*f);
  const std::vector<uint8_t> resealed = Reseal(data, len);
  absl::StatusOr<FrameView> g = ParseFrame(resealed);
  if (g.ok()) CheckAccepted(*g);
  // A valid original stays valid once resealed (the seal is what it already carried).
  HEDDLE_FUZZ_CHECK(!f.ok() || g.ok());
  return 0;
}
