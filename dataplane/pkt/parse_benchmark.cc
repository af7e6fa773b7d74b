// Parser and ICRC cost per frame on the demo traffic mix, each beside a reference that touches the
// same bytes in the same run: copying the header bytes the parser reads (memcpy), and zlib's
// crc32 over the same bytes the ICRC covers. Quote the ratios, not the times.
//   build/dataplane/pkt/pkt_parse_benchmark
#include <benchmark/benchmark.h>
#include <zlib.h>

#include <cstring>
#include <vector>

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::pkt {
namespace {

std::vector<std::vector<uint8_t>> Frames() {
  std::vector<std::vector<uint8_t>> out;
  const uint8_t ops[] = {op::kWriteFirst,        op::kWriteMiddle, op::kWriteLast,
                         op::kReadRequest,       op::kSendOnly,    op::kAcknowledge,
                         op::kReadResponseMiddle};
  for (int i = 0; i < 256; ++i) {
    FrameSpec f;
    RoceSpec r;
    r.opcode = ops[i % (sizeof(ops))];
    r.dest_qp = 0x100 + i % 8;
    r.psn = i;
    r.dma_length = 65536;
    r.payload_len = (i % 3 == 0) ? 0 : 1024;
    out.push_back(BuildRoce(f, r));
  }
  return out;
}

void BM_Parse(benchmark::State& state) {
  auto frames = Frames();
  PacketDesc d;
  size_t i = 0;
  for (auto _ : state) {
    const auto& f = frames[i++ & 255];
    benchmark::DoNotOptimize(Parse(f.data(), f.size(), &d));
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Parse);

// Reference: copy the 72 header bytes (Ethernet..RETH) the parser looks at into a descriptor.
void BM_CopyHeadersReference(benchmark::State& state) {
  auto frames = Frames();
  uint8_t hdr[72];
  size_t i = 0;
  for (auto _ : state) {
    const auto& f = frames[i++ & 255];
    std::memcpy(hdr, f.data(), std::min(sizeof(hdr), f.size()));
    benchmark::DoNotOptimize(hdr);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CopyHeadersReference);

void BM_ComputeIcrc(benchmark::State& state) {
  auto frames = Frames();
  std::vector<PacketDesc> descs(frames.size());
  for (size_t k = 0; k < frames.size(); ++k) Parse(frames[k].data(), frames[k].size(), &descs[k]);
  size_t i = 0, bytes = 0;
  for (auto _ : state) {
    const size_t k = i++ & 255;
    benchmark::DoNotOptimize(ComputeIcrc(frames[k].data(), descs[k]));
    bytes += descs[k].icrc_off - descs[k].l3_off;
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_ComputeIcrc);

// Reference: zlib crc32 over the same span, unmasked and in one call.
void BM_Crc32Reference(benchmark::State& state) {
  auto frames = Frames();
  std::vector<PacketDesc> descs(frames.size());
  for (size_t k = 0; k < frames.size(); ++k) Parse(frames[k].data(), frames[k].size(), &descs[k]);
  size_t i = 0, bytes = 0;
  for (auto _ : state) {
    const size_t k = i++ & 255;
    const size_t n = descs[k].icrc_off - descs[k].l3_off;
    benchmark::DoNotOptimize(crc32(0, frames[k].data() + descs[k].l3_off, n));
    bytes += n;
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_Crc32Reference);

}  // namespace
}  // namespace heddle::pkt

BENCHMARK_MAIN();
