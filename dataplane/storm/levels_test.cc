// File: dataplane/storm/levels_test.cc
#include "dataplane/storm/levels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "dataplane/pkt/roce.h"
#include "dataplane/storm/storm_test_util.h"

namespace heddle::storm {
namespace {

using pkt::op::kCompareSwap;
using pkt::op::kReadRequest;
using pkt::op::kSendFirst;
using pkt::op::kSendMiddle;
using pkt::op::kWriteFirst;
using pkt::op::kWriteLast;
using pkt::op::kWriteMiddle;
using testing::MakeAck;
using testing::MakePacket;

constexpr uint32_t kMtu = 4096;

TEST(ComputeLevelTest, RemainingSizeAgainstDefaultCutoffs) {
  const LevelConfig c;  // 4 KiB / 64 KiB / 1 MiB
  EXPECT_EQ(ComputeLevel(c, 0, 0, kMtu), 3);
  EXPECT_EQ(ComputeLevel(c, 4096, 0, kMtu), 3);  // not above c_1
  EXPECT_EQ(ComputeLevel(c, 4097, 0, kMtu), 2);
  EXPECT_EQ(ComputeLevel(c, 65536, 0, kMtu), 2);
  EXPECT_EQ(ComputeLevel(c, 65537, 0, kMtu), 1);
  EXPECT_EQ(ComputeLevel(c, 1u << 20, 0, kMtu), 1);
  EXPECT_EQ(ComputeLevel(c, (1u << 20) + 1, 0, kMtu), 0);
  EXPECT_EQ(ComputeLevel(c, uint64_t{1} << 40, 0, kMtu), 0);
}

TEST(ComputeLevelTest, BacklogRaisesTheLevelUpToItsCap) {
  LevelConfig c;
  const uint64_t r = 100 * 1024;  // level 1 alone
  EXPECT_EQ(ComputeLevel(c, r, 0, kMtu), 1);
  // B = 1 MiB: R_eff = 100 KiB / (1 + 10.24) = 9.1 KiB -> level 2.
  EXPECT_EQ(ComputeLevel(c, r, 1u << 20, kMtu), 2);
  // B = 16 MiB (B_max): R_eff = 100 KiB / 164.8 = 621 B -> level 3.
  EXPECT_EQ(ComputeLevel(c, r, 16u << 20, kMtu), 3);
  // B_max bounds the boost: a huge request is not pulled to the top by a deep queue.
  const uint64_t huge = uint64_t{1} << 30;
  EXPECT_EQ(ComputeLevel(c, huge, uint64_t{1} << 40, kMtu), ComputeLevel(c, huge, 16u << 20, kMtu));
  EXPECT_EQ(ComputeLevel(c, huge, uint64_t{1} << 40, kMtu), 0);  // 1 GiB / 1.016
  c.backlog_max = 1u << 20;
  EXPECT_EQ(ComputeLevel(c, r, 16u << 20, kMtu), 2);
  // beta = 0 ignores the backlog.
  c.beta = 0;
  EXPECT_EQ(ComputeLevel(c, r, 16u << 20, kMtu), 1);
}

TEST(ComputeLevelTest, BacklogOnTinyRemainderIsScaledByMtu) {
  // max(R, MTU) in the denominator: 100 bytes left with 1 MiB behind is not divided by 10^4.
  LevelConfig c;
  c.cutoffs = {10, 65536, 1u << 20};
  EXPECT_EQ(ComputeLevel(c, 100, 0, kMtu), 2);
  // R_eff = 100 / (1 + 1 MiB / 4 KiB) = 0.39 -> level 3.
  EXPECT_EQ(ComputeLevel(c, 100, 1u << 20, kMtu), 3);
  // 40 KiB of backlog: R_eff = 100 / 11 = 9.09 -> level 3; 4 KiB: 100 / 2 = 50 -> level 2.
  EXPECT_EQ(ComputeLevel(c, 100, 40960, kMtu), 3);
  EXPECT_EQ(ComputeLevel(c, 100, 4096, kMtu), 2);
}

TEST(ComputeLevelTest, OneLevelAndEightLevels) {
  LevelConfig one;
  one.levels = 1;
  one.control_level = 0;
  EXPECT_EQ(ComputeLevel(one, 1u << 30, 0, kMtu), 0);
  LevelConfig eight;
  eight.levels = 8;
  eight.cutoffs = {1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(ComputeLevel(eight, eight.cutoffs[i], 0, kMtu), 7 - i);
    EXPECT_EQ(ComputeLevel(eight, eight.cutoffs[i] + 1, 0, kMtu), 6 - i);
  }
}

class TagTest : public ::testing::Test {
 protected:
  void SetUp() override { entry_ = table_.FindOrInsert(QpKey{}, 0, nullptr); }
  uint8_t Send(const testing::Packet& p, uint64_t backlog = 0) {
    const TrackResult t = tracker_.OnRequestPacket(*entry_, p.desc);
    return TagPacket(config_, entry_, p.desc, t, backlog, kMtu);
  }
  // A WRITE of `packets` full-MTU packets from `psn`; returns each packet's level.
  std::vector<uint8_t> Write(uint32_t psn, uint32_t packets, uint64_t backlog = 0) {
    std::vector<uint8_t> levels;
    for (uint32_t i = 0; i < packets; ++i) {
      const uint8_t op = i == 0 ? kWriteFirst : i + 1 == packets ? kWriteLast : kWriteMiddle;
      levels.push_back(Send(MakePacket(op, psn + i, kMtu, packets * kMtu), backlog));
    }
    return levels;
  }
  LevelConfig config_;
  QpTable table_{{.capacity = 16}};
  RequestTracker tracker_{{.mtu = kMtu}};
  QpEntry* entry_ = nullptr;
};

TEST_F(TagTest, PerMessageNeverChangesLevelMidRequest) {
  // 2 MiB WRITE: level 0 at its first packet; remaining shrinks through every cutoff.
  const std::vector<uint8_t> levels = Write(0, 512);
  for (uint8_t l : levels) ASSERT_EQ(l, 0);
  // The next request gets its own level.
  EXPECT_EQ(Send(MakePacket(pkt::op::kWriteOnly, 512, 1024, 1024)), 3);
}

TEST_F(TagTest, PerMessageRetransmissionsKeepTheRecordedLevel) {
  Write(0, 8);  // 32 KiB: level 2
  EXPECT_EQ(entry_->level, 2);
  // A new small request, then a go-back-N replay of the old one's packets: duplicates carry the
  // recorded level (the one of the request in the entry), never a recomputed one.
  Send(MakePacket(kWriteFirst, 8, kMtu, 300 * kMtu));  // 1.2 MiB: level 0
  EXPECT_EQ(Send(MakePacket(kWriteMiddle, 5, kMtu)), 0);
  EXPECT_EQ(Send(MakePacket(kWriteMiddle, 9, kMtu)), 0);
}

TEST_F(TagTest, PerPacketClimbsAsTheRequestNearsCompletion) {
  config_.mode = Mode::kPerPacket;
  const std::vector<uint8_t> levels = Write(0, 512);  // 2 MiB
  EXPECT_EQ(levels.front(), 0);
  EXPECT_EQ(levels.back(), 3);
  for (size_t i = 1; i < levels.size(); ++i) ASSERT_GE(levels[i], levels[i - 1]) << i;
  // The climbs happen where R crosses each cutoff: R = 2 MiB - i * 4 KiB.
  EXPECT_EQ(levels[255], 0);  // R = 1 MiB + 4 KiB
  EXPECT_EQ(levels[256], 1);  // R = 1 MiB
  EXPECT_EQ(levels[495], 1);  // R = 68 KiB
  EXPECT_EQ(levels[496], 2);  // R = 64 KiB
  EXPECT_EQ(levels[510], 2);  // R = 8 KiB
  EXPECT_EQ(levels[511], 3);  // R = 4 KiB
  EXPECT_EQ(entry_->level, 3);
}

TEST_F(TagTest, PerPacketDuplicateReusesStoredLevel) {
  config_.mode = Mode::kPerPacket;
  Write(0, 20);                                           // last level 3
  EXPECT_EQ(Send(MakePacket(kWriteMiddle, 3, kMtu)), 3);  // a replay: stored level, not R's
}

TEST_F(TagTest, BacklogRaisesTheRequestLevel) {
  EXPECT_EQ(Write(0, 64).front(), 1);               // 256 KiB alone: level 1
  EXPECT_EQ(Write(64, 64, 4u << 20).front(), 2);    // 4 MiB behind it: 256/17 = 15 KiB -> 2
  EXPECT_EQ(Write(128, 64, 16u << 20).front(), 3);  // 16 MiB: 3.9 KiB -> 3
}

TEST_F(TagTest, CeilingCapsAndACappedRequestKeepsItsCappedLevel) {
  // A 3-packet WRITE of 12 KiB is level 2 on its own; capped at 1 at its first packet (packets of
  // an earlier request still held), it stays at 1 to its end even once the cap is gone.
  const TrackResult t0 = tracker_.OnRequestPacket(*entry_, MakePacket(kWriteFirst, 0, kMtu, 3 * kMtu).desc);
  EXPECT_EQ(TagPacket(config_, entry_, MakePacket(kWriteFirst, 0, kMtu, 3 * kMtu).desc, t0, 0, kMtu,
                      /*ceiling=*/1),
            1);
  EXPECT_EQ(Send(MakePacket(kWriteMiddle, 1, kMtu)), 1);
  EXPECT_EQ(Send(MakePacket(kWriteLast, 2, kMtu)), 1);
  // Control traffic is capped too: a READ request must not overtake held WRITE packets.
  const testing::Packet read = MakePacket(kReadRequest, 3, 0, 1u << 20);
  const TrackResult t1 = tracker_.OnRequestPacket(*entry_, read.desc);
  EXPECT_EQ(TagPacket(config_, entry_, read.desc, t1, 0, kMtu, /*ceiling=*/0), 0);
  // No ceiling: the next request gets its own level.
  EXPECT_EQ(Write(4, 3).front(), 2);
}

TEST_F(TagTest, BacklogSourceSelectsTheCounter) {
  entry_->egress_queued = 10;
  entry_->host_backlog = 12345;
  EXPECT_EQ(BacklogBytes(*entry_, BacklogSource::kEgressQueue, 4096), 40960u);
  EXPECT_EQ(BacklogBytes(*entry_, BacklogSource::kHostShim, 4096), 12345u);
  EXPECT_EQ(BacklogBytes(*entry_, BacklogSource::kNone, 4096), 0u);
}

TEST_F(TagTest, ControlTrafficTakesControlLevel) {
  config_.control_level = 1;
  EXPECT_EQ(Send(MakePacket(kReadRequest, 0, 0, 1u << 30)), 1);
  EXPECT_EQ(Send(MakeAck(5)), 1);
  auto cnp = MakePacket(pkt::op::kCnp, 0);
  EXPECT_EQ(Send(cnp), 1);
  EXPECT_EQ(Send(MakeAck(5, 0, pkt::op::kAtomicAcknowledge)), 1);
  // An atomic is a tiny request, not control.
  EXPECT_EQ(Send(MakePacket(kCompareSwap, 1)), 3);
}

TEST_F(TagTest, UnknownSendSizeIsShortUntilProvenLong) {
  config_.mode = Mode::kPerPacket;
  config_.unknown_size = 1u << 20;  // per-message only: per-packet demotes from the floor
  EXPECT_EQ(Send(MakePacket(kSendFirst, 0, kMtu)), 3);   // R = floor = 4 KiB
  EXPECT_EQ(Send(MakePacket(kSendMiddle, 1, kMtu)), 3);  // sent 4 KiB
  EXPECT_EQ(Send(MakePacket(kSendMiddle, 2, kMtu)), 2);  // sent 8 KiB
  uint8_t l = 0;
  for (uint32_t p = 3; p < 40; ++p) l = Send(MakePacket(kSendMiddle, p, kMtu));
  EXPECT_EQ(l, 1);  // sent 148 KiB
}

TEST_F(TagTest, PerMessageUnknownSendSizeTakesTheConfiguredLevelForGood) {
  // Default: above every cutoff. A SEND First of unknown size cannot be demoted later, so it
  // starts at the lowest level and keeps it to its Last, however short it turns out to be.
  EXPECT_EQ(UnknownBytes(config_), kUnknownSizeLowest);
  EXPECT_EQ(Send(MakePacket(kSendFirst, 0, kMtu)), 0);
  EXPECT_EQ(Send(MakePacket(kSendMiddle, 1, kMtu)), 0);
  EXPECT_EQ(Send(MakePacket(pkt::op::kSendLast, 2, 100)), 0);
  EXPECT_EQ(entry_->size, 2 * kMtu + 100);  // known at its Last
  // A SEND Only knows its size: its own level.
  EXPECT_EQ(Send(MakePacket(pkt::op::kSendOnly, 3, 100)), 3);
  // Configured: 100 KiB is level 1 under 4 KiB / 64 KiB / 1 MiB, for every packet of the SEND,
  // though R = max(sent, unknown_size) would cross a cutoff by its end.
  config_.unknown_size = 100 * 1024;
  EXPECT_EQ(UnknownBytes(config_), 100u * 1024);
  EXPECT_EQ(Send(MakePacket(kSendFirst, 4, kMtu)), 1);
  for (uint32_t p = 5; p < 70; ++p) ASSERT_EQ(Send(MakePacket(kSendMiddle, p, kMtu)), 1) << p;
  EXPECT_EQ(Send(MakePacket(pkt::op::kSendLast, 70, kMtu)), 1);
  // 1 KiB: the top level, the old floor's behaviour.
  config_.unknown_size = 1024;
  EXPECT_EQ(Send(MakePacket(kSendFirst, 71, kMtu)), 3);
  EXPECT_EQ(Send(MakePacket(kSendMiddle, 72, kMtu)), 3);
  EXPECT_EQ(Send(MakePacket(kSendMiddle, 73, kMtu)), 3);
  EXPECT_EQ(Send(MakePacket(pkt::op::kSendLast, 74, kMtu)), 3);
  // The backlog boost applies to the configured size as to a known one: 100 KiB with 16 MiB
  // behind it is R_eff = 621 B, level 3 (the out-of-line ComputeLevelCapped() path).
  config_.unknown_size = 100 * 1024;
  EXPECT_EQ(Send(MakePacket(kSendFirst, 75, kMtu), 16u << 20), 3);
  EXPECT_EQ(Send(MakePacket(pkt::op::kSendLast, 76, kMtu)), 3);
  // Picked up mid-way (an orphan: a Middle with no request in progress) it is unknown too.
  config_.unknown_size = kUnknownSizeLowest;
  EXPECT_EQ(Send(MakePacket(kSendMiddle, 77, kMtu)), 0);
  EXPECT_EQ(Send(MakePacket(kSendMiddle, 78, kMtu)), 0);
}

TEST_F(TagTest, BogusRethLengthsGetWellDefinedLevels) {
  // 0xffffffff bytes: huge, lowest level; the packets that follow keep it.
  EXPECT_EQ(Send(MakePacket(kWriteFirst, 0, kMtu, 0xffffffffu)), 0);
  EXPECT_EQ(Send(MakePacket(kWriteMiddle, 1, kMtu)), 0);
  // 0 bytes yet carrying data: R = 0 from the start (and after the overrun), top level.
  EXPECT_EQ(Send(MakePacket(kWriteFirst, 2, kMtu, 0)), 3);
  EXPECT_EQ(Send(MakePacket(kWriteLast, 3, kMtu)), 3);
  config_.mode = Mode::kPerPacket;
  EXPECT_EQ(Send(MakePacket(kWriteFirst, 4, kMtu, 0)), 3);
  EXPECT_EQ(Send(MakePacket(kWriteLast, 5, kMtu)), 3);
  EXPECT_EQ(Send(MakePacket(kWriteFirst, 6, kMtu, 1u << 31)), 0);
  EXPECT_EQ(tracker_.counters().overrun, 2u);
}

TEST_F(TagTest, RefusedQpGetsTheDefaultLevel) {
  QpTable full({.capacity = 4, .idle_ms = 1000});
  for (uint32_t q = 0; q < 4; ++q) full.FindOrInsert(QpKey{.dest_qpn = q}, 0, nullptr);
  QpEntry* none = full.FindOrInsert(QpKey{.dest_qpn = 77}, 1, nullptr);
  ASSERT_EQ(none, nullptr);
  const auto p = MakePacket(kWriteFirst, 0, kMtu, 1u << 30);
  EXPECT_EQ(TagPacket(config_, none, p.desc, TrackResult{.outcome = TrackOutcome::kStart}, 0, kMtu),
            DefaultLevel(config_, kMtu));
  EXPECT_EQ(DefaultLevel(config_, kMtu), 3);
  EXPECT_EQ(full.counters().table_full, 1u);
}

TEST(ValidateLevelConfigTest, DefaultsAreValid) { EXPECT_TRUE(ValidateLevelConfig({}).ok()); }

TEST(ValidateLevelConfigTest, NamesTheKeyAndTheFix) {
  auto expect_error = [](const LevelConfig& c, const std::string& needle) {
    const absl::Status s = ValidateLevelConfig(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  LevelConfig c;
  c.levels = 0;
  expect_error(c, "storm.levels: 0 is out of range; use 1 to 8");
  c.levels = 9;
  expect_error(c, "storm.levels: 9");
  c = {};
  c.cutoffs = {4096, 4096, 1u << 20};
  expect_error(c, "storm.cutoffs: c_2 = 4096 is not greater than c_1 = 4096");
  c.cutoffs = {4096, 65536, 0};
  expect_error(c, "storm.cutoffs: c_3 is 0");
  c = {};
  c.dscp[2] = 64;
  expect_error(c, "storm.dscp[2]: 64");
  c = {};
  c.pcp[1] = 8;
  expect_error(c, "storm.pcp[1]: 8");
  c.pcp[1] = -2;
  expect_error(c, "storm.pcp[1]: -2");
  c = {};
  c.control_level = 4;
  expect_error(c, "storm.control_level: 4 is not below storm.levels = 4");
  c = {};
  c.beta = -1;
  expect_error(c, "storm.beta");
  c.beta = NAN;
  expect_error(c, "storm.beta");
  c = {};
  c.unknown_size = 0;
  expect_error(c, "storm.unknown_size: 0 is not a size");
  // Unused entries beyond K are ignored.
  c = {};
  c.levels = 2;
  c.control_level = 1;
  c.cutoffs = {100, 5, 5, 5, 5, 5, 5};
  c.dscp[5] = 200;
  EXPECT_TRUE(ValidateLevelConfig(c).ok());
}

TEST(SizeHistogramTest, BucketsAreLog2AndByteWeighted) {
  EXPECT_EQ(SizeHistogram::BucketOf(1), 0);
  EXPECT_EQ(SizeHistogram::BucketOf(4095), 11);
  EXPECT_EQ(SizeHistogram::BucketOf(4096), 12);
  EXPECT_EQ(SizeHistogram::BucketOf(uint64_t{1} << 40), 31);
  SizeHistogram h;
  h.Add(4096);
  h.Add(5000);
  h.Add(0);
  h.Add(8);
  EXPECT_EQ(h.bytes(12), 9096u);
  EXPECT_EQ(h.bytes(3), 8u);
  EXPECT_EQ(h.Total(), 9104u);
  const SizeHistogram before = h.Snapshot();
  h.Add(100);
  const SizeHistogram d = HistogramDelta(h.Snapshot(), before);
  EXPECT_EQ(d.Total(), 100u);
  EXPECT_EQ(d.bytes(6), 100u);
}

// Four size bands, each carrying 1/4 of the bytes.
SizeHistogram FourBands(std::mt19937_64& rng, const std::array<uint32_t, 4>& lo, int n_bytes_each) {
  SizeHistogram h;
  for (int band = 0; band < 4; ++band) {
    std::uniform_int_distribution<uint32_t> size(lo[band], 2 * lo[band] - 1);
    uint64_t bytes = 0;
    while (bytes < static_cast<uint64_t>(n_bytes_each)) {
      const uint32_t s = size(rng);
      h.Add(s);
      bytes += s;
    }
  }
  return h;
}

TEST(AutoCutoffsTest, EqualBytesCutoffsSitAtTheBandEdges) {
  // Bands [1K, 2K), [4K, 8K), [16K, 32K), [64K, 128K): one empty log2 bucket between neighbours.
  std::mt19937_64 rng(42);
  const std::array<uint32_t, 4> lo = {1024, 4096, 16384, 65536};
  const SizeHistogram h = FourBands(rng, lo, 64 << 20);
  const auto cut = AutoCutoffs(h, 4);
  ASSERT_TRUE(cut.has_value());
  for (int j = 0; j < 3; ++j) {
    // Separates band j from band j + 1, within one log2 bucket of either band edge.
    EXPECT_GE((*cut)[j], 2 * lo[j] - 1) << j;
    EXPECT_LT((*cut)[j], lo[j + 1]) << j;
    EXPECT_LE(std::fabs(std::log2((*cut)[j] / (2.0 * lo[j]))), 1.0) << j << ": " << (*cut)[j];
    EXPECT_LE(std::fabs(std::log2((*cut)[j] / static_cast<double>(lo[j + 1]))), 1.0) << j;
  }
  EXPECT_EQ((*cut)[3], 0u);
  // Each level then carries a quarter of the bytes: classify every band's sizes.
  LevelConfig c;
  c.cutoffs = *cut;
  for (int band = 0; band < 4; ++band) {
    EXPECT_EQ(ComputeLevel(c, lo[band], 0, 1), 3 - band);
    EXPECT_EQ(ComputeLevel(c, 2 * lo[band] - 1, 0, 1), 3 - band);
  }
}

TEST(AutoCutoffsTest, WideGapsAndBandsInsideABucket) {
  // Bands 16x apart: cutoffs still separate them.
  std::mt19937_64 rng(3);
  const std::array<uint32_t, 4> lo = {1024, 16384, 262144, 4194304};
  const auto cut = AutoCutoffs(FourBands(rng, lo, 1 << 30), 4);
  ASSERT_TRUE(cut.has_value());
  for (int j = 0; j < 3; ++j) {
    EXPECT_GE((*cut)[j], 2 * lo[j] - 1) << j;
    EXPECT_LT((*cut)[j], lo[j + 1]) << j;
  }
  // Uniform bytes across 8 adjacent buckets, K = 4: cutoffs every two buckets (interpolated).
  SizeHistogram flat;
  for (int b = 10; b < 18; ++b) flat.set_bytes(b, 1 << 20);
  const auto fc = AutoCutoffs(flat, 4);
  ASSERT_TRUE(fc.has_value());
  EXPECT_EQ((*fc)[0], 1u << 12);
  EXPECT_EQ((*fc)[1], 1u << 14);
  EXPECT_EQ((*fc)[2], 1u << 16);
}

TEST(AutoCutoffsTest, AgingConvergesOnANewDistribution) {
  std::mt19937_64 rng(7);
  const std::array<uint32_t, 4> old_lo = {64, 256, 1024, 4096};
  const std::array<uint32_t, 4> new_lo = {4096, 16384, 65536, 262144};
  SizeHistogram aged;
  for (int i = 0; i < 10; ++i) AgeHistogram(&aged, FourBands(rng, old_lo, 8 << 20), 0.5);
  auto cut = AutoCutoffs(aged, 4);
  ASSERT_TRUE(cut.has_value());
  EXPECT_LT((*cut)[2], 4096u);
  for (int i = 0; i < 12; ++i) AgeHistogram(&aged, FourBands(rng, new_lo, 8 << 20), 0.5);
  cut = AutoCutoffs(aged, 4);
  ASSERT_TRUE(cut.has_value());
  for (int j = 0; j < 3; ++j) {
    EXPECT_GE((*cut)[j], 2 * new_lo[j] - 1) << j;
    EXPECT_LT((*cut)[j], new_lo[j + 1]) << j;
  }
}

TEST(AutoCutoffsTest, DegenerateHistogramsGiveValidCutoffs) {
  EXPECT_FALSE(AutoCutoffs(SizeHistogram{}, 4).has_value());
  SizeHistogram one_size;
  for (int i = 0; i < 1000; ++i) one_size.Add(4096);
  for (int k = 1; k <= 8; ++k) {
    const auto cut = AutoCutoffs(one_size, k);
    ASSERT_TRUE(cut.has_value());
    LevelConfig c;
    c.levels = k;
    c.control_level = 0;
    c.cutoffs = *cut;
    EXPECT_TRUE(ValidateLevelConfig(c).ok()) << k << ": " << ValidateLevelConfig(c);
  }
  SizeHistogram top;
  top.Add(uint64_t{1} << 40);
  const auto cut = AutoCutoffs(top, 8);
  LevelConfig c;
  c.levels = 8;
  c.control_level = 0;
  c.cutoffs = *cut;
  EXPECT_TRUE(ValidateLevelConfig(c).ok()) << ValidateLevelConfig(c);
}

}  // namespace
}  // namespace heddle::storm
