// File: dataplane/fwd/artifact_fuzz.cc
//
// libFuzzer target for the artifact loader. Each input is decoded twice: as given (random bytes
// almost never pass the checksums, so this exercises the header checks), and "resealed" — magic,
// total length and both checksums fixed up — so mutations reach the section directory and every
// section's validation. Beyond "no crash, no out-of-bounds read" (ASan), it aborts when:
//   * a decoded spec does not survive Serialize -> Decode unchanged, or re-serializes differently;
//   * a table built from an accepted artifact returns an out-of-range answer (a down port beyond
//     m_tier, an empty or too wide up mask, a host path on a port the host does not have, more
//     paths than asked for), or the bulk lookup disagrees with the single one;
//   * a switch table cannot be built for a node an override names (wildcards name none).
// Built as fwd_artifact_fuzz (clang, HEDDLE_FUZZ=ON) and, with tests/fuzz/replay_main.cc, as the
// fwd_artifact_fuzz_replay regression runner that ctest uses on tests/fuzz/corpus/fwd_artifact.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dataplane/fwd/artifact.h"
#include "dataplane/fwd/crc32c.h"

namespace {

using namespace heddle::fwd;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fwd_artifact_fuzz: invariant violated: %s\n", what);
  std::abort();
}

#define HEDDLE_FUZZ_CHECK(cond) \
  do {                          \
    if (!(cond)) Fail(#cond);   \
  } while (0)

void PutLe(std::vector<uint8_t>& b, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

std::vector<uint8_t> Reseal(const uint8_t* data, size_t len) {
  std::vector<uint8_t> b(data, data + len);
  if (b.size() < 64) return b;
  std::memcpy(b.data(), "HDLNUWA1", 8);
  PutLe(b, 16, b.size(), 8);
  PutLe(b, 24, Crc32c(std::span<const uint8_t>(b).subspan(64)), 4);
  PutLe(b, 28, 0, 4);
  PutLe(b, 28, Crc32c(std::span<const uint8_t>(b.data(), 64)), 4);
  return b;
}

uint64_t Nodes(const ShapeSpec& s, int tier) {
  uint64_t n = 1;
  for (int j = tier + 1; j <= s.tiers; ++j) n *= s.m[j];
  for (int j = 1; j <= tier; ++j) n *= s.w[j];
  return n;
}

// Destinations to look up: the fabric's first and last hosts, addresses just outside, and
// values taken from the input.
std::vector<uint32_t> Destinations(const ArtifactSpec& spec, const uint8_t* data, size_t len) {
  std::vector<uint32_t> d = {spec.addresses.ipv4_base, spec.addresses.ipv4_base | 0xffffu,
                             spec.addresses.ipv4_base - 1, ~spec.addresses.ipv4_base, 0};
  for (size_t i = 0; i + 4 <= len && d.size() < 64; i += 7) {
    uint32_t v;
    std::memcpy(&v, data + i, 4);
    d.push_back(spec.addresses.ipv4_base ^ (v & 0xffffff));
  }
  return d;
}

void CheckSwitch(const ArtifactSpec& spec, uint8_t plane, uint32_t index, const uint8_t* data,
                 size_t len) {
  absl::StatusOr<SwitchTable> t = SwitchTable::Build(spec, plane, index);
  HEDDLE_FUZZ_CHECK(t.ok());
  const std::vector<uint32_t> dst = Destinations(spec, data, len);
  std::vector<NextHops> bulk(dst.size());
  t->LookupBulk4(dst.data(), bulk.data(), dst.size());
  const uint32_t m = spec.shape.m[spec.tier];
  const uint32_t w = spec.tier < spec.shape.tiers ? spec.shape.w[spec.tier + 1] : 0;
  const uint64_t up_bits = w >= 64 ? ~uint64_t{0} : (uint64_t{1} << w) - 1;
  for (size_t i = 0; i < dst.size(); ++i) {
    const NextHops h = t->Lookup4(dst[i]);
    HEDDLE_FUZZ_CHECK(h == bulk[i]);
    switch (h.kind) {
      case HopKind::kDown:
        HEDDLE_FUZZ_CHECK(h.down_port < m && h.up_mask == 0);
        break;
      case HopKind::kUp:
        HEDDLE_FUZZ_CHECK(h.up_mask != 0 && (h.up_mask & ~up_bits) == 0 && h.down_port == 0);
        break;
      case HopKind::kUnreachable:
      case HopKind::kNotInFabric:
        HEDDLE_FUZZ_CHECK(h.up_mask == 0 && h.down_port == 0);
        break;
      default:
        Fail("switch lookup returned kLocal");
    }
    std::array<uint8_t, 16> a6 = spec.addresses.ipv6_base;
    for (int b = 0; b < 4; ++b) a6[12 + b] = static_cast<uint8_t>(dst[i] >> (24 - 8 * b));
    const NextHops h6 = t->Lookup6(a6.data());
    HEDDLE_FUZZ_CHECK(h6.kind != HopKind::kDown || h6.down_port < m);
  }
  HEDDLE_FUZZ_CHECK(t->memory_bytes() > 0);
}

void CheckHost(const ArtifactSpec& spec, uint32_t host, const uint8_t* data, size_t len) {
  absl::StatusOr<HostTable> t = HostTable::Build(spec, host);
  HEDDLE_FUZZ_CHECK(t.ok());
  const uint32_t ports = spec.shape.planes * spec.shape.w[1];
  std::array<HostPath, kMaxHostPaths> out;
  for (uint32_t d : Destinations(spec, data, len)) {
    for (uint32_t cap : {1u, 7u, 64u}) {
      HopKind kind = HopKind::kDown;
      const uint32_t n = t->Paths4(d, out.data(), cap, &kind);
      HEDDLE_FUZZ_CHECK(n <= cap);
      HEDDLE_FUZZ_CHECK((n > 0) == (kind == HopKind::kUp));
      HEDDLE_FUZZ_CHECK(kind != HopKind::kDown);
      for (uint32_t i = 0; i < n; ++i) {
        HEDDLE_FUZZ_CHECK(out[i].port < ports && out[i].entropy <= 0xFFFFF);
        HEDDLE_FUZZ_CHECK(out[i].next_hop_mac[0] == 0x02 && out[i].next_hop_mac[2] == 1);
      }
    }
  }
  // The prefix form has one entry per other-rail group: keep it to small fabrics.
  if (Nodes(spec.shape, 0) / spec.shape.m[1] <= 4096) {
    for (bool v6 : {false, true}) {
      for (const HostTable::PrefixPaths& p : t->PrefixPathSets(v6)) {
        HEDDLE_FUZZ_CHECK(p.prefix_len <= 128 && p.paths.size() <= kMaxHostPaths);
      }
    }
  }
}

void CheckDecoded(const ArtifactSpec& spec, const uint8_t* data, size_t len) {
  const std::vector<uint8_t> again = Serialize(spec);
  absl::StatusOr<ArtifactSpec> back = Decode(again);
  HEDDLE_FUZZ_CHECK(back.ok());
  HEDDLE_FUZZ_CHECK(*back == spec);
  HEDDLE_FUZZ_CHECK(Serialize(*back) == again);
  const uint64_t nodes = Nodes(spec.shape, spec.role == Role::kHost ? 0 : spec.tier);
  const uint32_t last = static_cast<uint32_t>(nodes - 1);
  if (spec.role == Role::kSwitch) {
    CheckSwitch(spec, 0, 0, data, len);
    CheckSwitch(spec, static_cast<uint8_t>(spec.shape.planes - 1), last, data, len);
    for (const OverrideSpec& o : spec.overrides) {
      if (o.node == kAllNodes) continue;  // a wildcard: every node of the plane
      CheckSwitch(spec, o.plane, o.node, data, len);
      break;
    }
    absl::StatusOr<SwitchTable> bad = SwitchTable::Build(spec, 0, static_cast<uint32_t>(nodes));
    HEDDLE_FUZZ_CHECK(!bad.ok());
  } else {
    CheckHost(spec, 0, data, len);
    CheckHost(spec, last, data, len);
    for (const OverrideSpec& o : spec.overrides) {
      CheckHost(spec, o.node, data, len);
      break;
    }
    HEDDLE_FUZZ_CHECK(!HostTable::Build(spec, static_cast<uint32_t>(nodes)).ok());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t len) {
  absl::StatusOr<ArtifactSpec> spec = Decode(std::span<const uint8_t>(data, len));
  if (spec.ok()) CheckDecoded(*spec, data, len);
  const std::vector<uint8_t> resealed = Reseal(data, len);
  absl::StatusOr<ArtifactSpec> spec2 = Decode(resealed);
  if (spec2.ok()) CheckDecoded(*spec2, data, len);
  // A valid original stays valid once resealed (the seal is what it already carried).
  HEDDLE_FUZZ_CHECK(!spec.ok() || (spec2.ok() && *spec2 == *spec));
  return 0;
}
