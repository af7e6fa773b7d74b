// File: dataplane/pkt/parse_fuzz.cc
//
// libFuzzer target for Parse() and the ICRC. Beyond "no crash, no out-of-bounds read" (ASan), it
// aborts when a successful parse breaks an invariant the stages rely on: every offset and length
// lies within the frame, the RoCE layout adds up, the class matches the opcode, and the result is
// deterministic. Built as pkt_parse_fuzz (clang, HEDDLE_FUZZ=ON) and, with
// tests/fuzz/replay_main.cc, as the pkt_parse_fuzz_replay regression runner that ctest uses on the
// checked-in corpus.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace {

[[noreturn]] void Fail(const char* what, size_t len) {
  std::fprintf(stderr, "pkt_parse_fuzz: invariant violated: %s (frame length %zu)\n", what, len);
  std::abort();
}

#define HEDDLE_FUZZ_CHECK(cond)    \
  do {                             \
    if (!(cond)) Fail(#cond, len); \
  } while (0)

}  // namespace

namespace {

// The segmented form: only a prefix is contiguous (copied alone, so ASan sees any read past it);
// whenever it parses, it must agree with the contiguous parse of the whole frame.
void CheckSegmented(const uint8_t* data, size_t len) {
  using namespace heddle::pkt;
  if (len < 2) return;
  const size_t head_len = 1 + data[0] % (len - 1);
  std::vector<uint8_t> head(data, data + head_len);
  PacketDesc split, whole;
  const ParseError es = Parse(head.data(), head.size(), len, &split);
  const ParseError ew = Parse(data, len, &whole);
  if (es == ParseError::kOk) {
    HEDDLE_FUZZ_CHECK(ew == ParseError::kOk);
    HEDDLE_FUZZ_CHECK(std::memcmp(&split, &whole, sizeof(split)) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t len) {
  using namespace heddle::pkt;
  CheckSegmented(data, len);
  PacketDesc d;
  const ParseError e = Parse(data, len, &d);
  HEDDLE_FUZZ_CHECK(static_cast<int>(e) < static_cast<int>(ParseError::kCount));

  PacketDesc again;
  HEDDLE_FUZZ_CHECK(Parse(data, len, &again) == e);
  HEDDLE_FUZZ_CHECK(std::memcmp(&d, &again, sizeof(d)) == 0);
  if (e != ParseError::kOk) return 0;

  const size_t n = len > 0xffff ? 0xffff : len;
  HEDDLE_FUZZ_CHECK(d.num_vlans <= kMaxVlanTags);
  HEDDLE_FUZZ_CHECK(d.l3_off == kEthHeaderLen + kVlanTagLen * d.num_vlans);
  HEDDLE_FUZZ_CHECK(d.l3_off <= n);
  if (d.l3 == L3::kNone) {
    HEDDLE_FUZZ_CHECK(d.flags == 0 && d.roce_class == RoceClass::kNone);
    return 0;
  }
  HEDDLE_FUZZ_CHECK(d.l3 == L3::kIpv4 || d.l3 == L3::kIpv6);
  HEDDLE_FUZZ_CHECK(static_cast<size_t>(d.l3_off) + d.ip_len <= n);
  HEDDLE_FUZZ_CHECK(d.l4_off > d.l3_off && d.l4_off <= d.l3_off + d.ip_len);
  HEDDLE_FUZZ_CHECK(d.l3 == L3::kIpv6
                        ? d.l4_off - d.l3_off == kIpv6HeaderLen
                        : d.l4_off - d.l3_off >= kIpv4MinHeaderLen && d.l4_off - d.l3_off <= 60);
  if (!(d.flags & kFlagRoce)) {
    HEDDLE_FUZZ_CHECK(d.roce_class == RoceClass::kNone);
    HEDDLE_FUZZ_CHECK(ComputeIcrc(data, d) == 0 && StoredIcrc(data, d) == 0);
    return 0;
  }
  HEDDLE_FUZZ_CHECK(!(d.flags & kFlagIpFragment));
  HEDDLE_FUZZ_CHECK(d.ip_proto == kIpProtoUdp);
  HEDDLE_FUZZ_CHECK(d.bth_off == d.l4_off + kUdpHeaderLen);
  HEDDLE_FUZZ_CHECK(d.bth_off + kBthLen <= d.payload_off);
  HEDDLE_FUZZ_CHECK(d.payload_off + d.payload_len == d.icrc_off);
  HEDDLE_FUZZ_CHECK(static_cast<size_t>(d.icrc_off) + kIcrcLen <= d.l3_off + d.ip_len);
  HEDDLE_FUZZ_CHECK(d.opcode == data[d.bth_off]);
  const OpcodeInfo info = DescribeOpcode(d.opcode);
  HEDDLE_FUZZ_CHECK(d.roce_class == info.roce_class);
  HEDDLE_FUZZ_CHECK(d.payload_off == d.bth_off + kBthLen + info.ext_len);
  HEDDLE_FUZZ_CHECK((d.flags & info.flags) == info.flags);
  HEDDLE_FUZZ_CHECK(d.dest_qp <= 0xffffff && d.psn <= 0xffffff);
  // The ICRC reads [l3_off, icrc_off + 4): ASan checks the bounds, this checks it is a function
  // of the bytes alone.
  const uint32_t icrc = ComputeIcrc(data, d);
  HEDDLE_FUZZ_CHECK(ComputeIcrc(data, d) == icrc);
  HEDDLE_FUZZ_CHECK(VerifyIcrc(data, d) == (icrc == StoredIcrc(data, d)));
  return 0;
}
