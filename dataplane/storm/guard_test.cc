// File: dataplane/storm/guard_test.cc
#include "dataplane/storm/guard.h"

#include <gtest/gtest.h>

#include "dataplane/pkt/roce.h"
#include "dataplane/storm/storm_test_util.h"

namespace heddle::storm {
namespace {

using testing::MakePacket;

constexpr uint32_t kMtu = 1024;

QpEntry Entry() {
  QpEntry e{};
  e.acked_psn = kNoPsn;
  return e;
}

TrackResult Outcome(TrackOutcome o) {
  TrackResult t;
  t.outcome = o;
  return t;
}

// §5: packets held in heddled cap a QP's next packet at the newest one's level.
TEST(InOrderCeilingTest, CapsAtHeldLevelWhilePacketsAreHeldPerMessage) {
  QpEntry e = Entry();
  e.held_level = 1;
  EXPECT_EQ(InOrderCeiling(e, /*per_message=*/true, 3), 3);  // nothing held: the top
  e.egress_queued = 2;
  EXPECT_EQ(InOrderCeiling(e, true, 3), 1);
  EXPECT_EQ(InOrderCeiling(e, /*per_message=*/false, 3), 3);  // reordering tolerant: no cap
}

TEST(InOrderCeilingTest, NeverAboveTheTopLevelInForce) {
  QpEntry e = Entry();
  e.egress_queued = 1;
  e.held_level = 6;  // held under an earlier configuration with more levels
  EXPECT_EQ(InOrderCeiling(e, true, 3), 3);
}

// §6.5: a request starting behind unacknowledged packets is capped at held_level.
TEST(FabricCeilingTest, CapsARequestStartedBehindUnacknowledgedPackets) {
  QpEntry e = Entry();
  e.held_level = 1;
  e.first_psn = 100;
  StoreAckedPsn(e, 90);  // PSNs 91..99 unacknowledged
  uint64_t guarded = 0;
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kStart), guarded), 1);
  EXPECT_EQ(guarded, 1u);
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kOrphan), guarded), 1);
  EXPECT_EQ(guarded, 2u);
}

TEST(FabricCeilingTest, LaterPacketsOfARequestAreNotCappedAgain) {
  QpEntry e = Entry();
  e.held_level = 0;
  e.first_psn = 100;
  StoreAckedPsn(e, 90);
  uint64_t guarded = 0;
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kContinue), guarded), kMaxLevels - 1);
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kDuplicate), guarded), kMaxLevels - 1);
  EXPECT_EQ(guarded, 0u);
}

TEST(FabricCeilingTest, NoCapWithoutJoinOrWhenEverythingIsAcknowledged) {
  QpEntry e = Entry();
  e.held_level = 0;
  e.first_psn = 100;
  uint64_t guarded = 0;
  // Nothing joined for the QP: acked_psn is kNoPsn.
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kStart), guarded), kMaxLevels - 1);
  StoreAckedPsn(e, 99);  // everything before the request acknowledged
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kStart), guarded), kMaxLevels - 1);
  EXPECT_EQ(guarded, 0u);
}

TEST(FabricCeilingTest, AWindowBeyondTheBoundIsTakenForALostJoin) {
  QpEntry e = Entry();
  e.held_level = 0;
  e.first_psn = 1 + kMaxGuardedUnacked;
  StoreAckedPsn(e, 0);  // exactly kMaxGuardedUnacked unacknowledged: still capped
  uint64_t guarded = 0;
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kStart), guarded), 0);
  e.first_psn = 2 + kMaxGuardedUnacked;  // one more: no cap
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kStart), guarded), kMaxLevels - 1);
  // An acknowledgement ahead of the request (READ responses) wraps beyond the bound.
  e.first_psn = 5;
  StoreAckedPsn(e, 10);
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kStart), guarded), kMaxLevels - 1);
  EXPECT_EQ(guarded, 1u);
}

TEST(FabricCeilingTest, UnacknowledgedCountWrapsWithThePsnSpace) {
  QpEntry e = Entry();
  e.held_level = 2;
  e.first_psn = 3;                 // after a wrap
  StoreAckedPsn(e, kPsnMask - 1);  // 0xfffffe: 0xffffff, 0, 1, 2 unacknowledged
  uint64_t guarded = 0;
  EXPECT_EQ(FabricCeiling(e, Outcome(TrackOutcome::kStart), guarded), 2);
}

TEST(RequestsUnacknowledgedTest, TrueOnlyWithinTheGuardedWindow) {
  QpEntry e = Entry();
  e.next_psn = 50;
  StoreAckedPsn(e, 40);
  EXPECT_FALSE(RequestsUnacknowledged(e));  // no request-direction packet seen
  e.flags |= kEntryPsnValid;
  EXPECT_TRUE(RequestsUnacknowledged(e));
  StoreAckedPsn(e, 49);
  EXPECT_FALSE(RequestsUnacknowledged(e));  // all acknowledged
  StoreAckedPsn(e, kNoPsn);
  EXPECT_FALSE(RequestsUnacknowledged(e));  // nothing joined
  e.next_psn = 2 + kMaxGuardedUnacked;
  StoreAckedPsn(e, 0);
  EXPECT_FALSE(RequestsUnacknowledged(e));  // beyond the bound: a lost join
}

TEST(InResponseWindowTest, TaggedStreamsWithinTheWindowWrapping) {
  ReadStreamEntry s{};
  s.tagged_ms = 100;
  EXPECT_FALSE(InResponseWindow(s, 100, 2));  // never tagged
  s.flags |= kStreamTagged;
  EXPECT_TRUE(InResponseWindow(s, 102, 2));
  EXPECT_FALSE(InResponseWindow(s, 103, 2));
  s.tagged_ms = 0xffffffff;  // the millisecond clock wraps
  EXPECT_TRUE(InResponseWindow(s, 1, 2));
}

TEST(ResponseCeilingTest, ClampsToTheLevelsInForce) {
  LevelConfig L;
  L.levels = 4;
  EXPECT_EQ(ResponseCeiling(L, 7), 3);
  EXPECT_EQ(ResponseCeiling(L, 2), 2);
  L.levels = 0;  // clamped to one level
  EXPECT_EQ(ResponseCeiling(L, 5), 0);
}

class ReadResponseLevelTest : public ::testing::Test {
 protected:
  // One READ response packet through the tracker and the guard.
  uint8_t Tag(uint8_t opcode, uint32_t psn, uint32_t payload, uint8_t ceiling, uint32_t now_ms,
              uint32_t window_ms = 2) {
    const StreamResult r = tracker_.OnResponse(s_, MakePacket(opcode, psn, payload).desc);
    return ReadResponseLevel(L_, s_, r, BacklogSource::kNone, 0, ceiling, kMtu, window_ms, now_ms,
                             guarded_);
  }
  LevelConfig L_;
  ReadStreamTracker tracker_;
  ReadStreamEntry s_{};
  uint64_t guarded_ = 0;
};

TEST_F(ReadResponseLevelTest, AnUnjoinedStreamStartsAtTheUnknownSizesLevel) {
  // Per-message mode: a stream of unknown size is levelled as storm.unknown_size, by default
  // above every cutoff (the lowest level) — it cannot be demoted later.
  EXPECT_EQ(Tag(pkt::op::kReadResponseFirst, 10, 1024, 3, 0), 0);
  ReadStreamEntry other{};
  L_.unknown_size = 100 * 1024;  // between the 64 KiB and 1 MiB cutoffs: level 1
  const StreamResult r =
      tracker_.OnResponse(other, MakePacket(pkt::op::kReadResponseFirst, 10, 1024).desc);
  EXPECT_EQ(ReadResponseLevel(L_, other, r, BacklogSource::kNone, 0, 3, kMtu, 2, 0, guarded_), 1);
}

TEST_F(ReadResponseLevelTest, AStreamKeepsItsFirstPacketsLevelPerMessage) {
  // Unknown size: R = storm.unknown_size, here 4096, the top level's cutoff, at the first packet.
  L_.unknown_size = 4096;
  const uint8_t first = Tag(pkt::op::kReadResponseFirst, 10, 1024, 3, 0);
  EXPECT_EQ(first, 3);
  EXPECT_TRUE(s_.flags & kStreamLevelValid);
  EXPECT_TRUE(s_.flags & kStreamTagged);
  EXPECT_EQ(s_.resp_level, first);
  // Later packets reuse it (even as the byte count grows past the cutoff), under the ceiling.
  for (uint32_t psn = 11; psn < 20; ++psn) {
    EXPECT_EQ(Tag(pkt::op::kReadResponseMiddle, psn, 1024, 3, 0), first);
  }
  EXPECT_EQ(Tag(pkt::op::kReadResponseMiddle, 20, 1024, 1, 0), 1);  // the in-order cap
  EXPECT_EQ(s_.resp_level, 1);
}

// A stream of `size` bytes starting (as ReadStreamTracker::OnResponse() reports it).
uint8_t StartStream(const LevelConfig& L, ReadStreamEntry& s, uint32_t size, uint8_t ceiling,
                    uint32_t now_ms, uint32_t window_ms, uint64_t& guarded) {
  s.flags |= kStreamSizeKnown;
  s.size = size;
  StreamResult r;
  r.outcome = StreamOutcome::kStart;
  return ReadResponseLevel(L, s, r, BacklogSource::kNone, 0, ceiling, kMtu, window_ms, now_ms,
                           guarded);
}

TEST_F(ReadResponseLevelTest, ANewStreamStaysAtOrBelowTheLastResponseInTheWindow) {
  // A long stream (100 KiB: level 1 of 4), then a short one (1 KiB: level 3) 2 ms later.
  const uint8_t low = StartStream(L_, s_, 100 * 1024, 3, 0, 2, guarded_);
  EXPECT_EQ(low, 1);
  EXPECT_EQ(StartStream(L_, s_, 1024, 3, /*now_ms=*/2, 2, guarded_), low);
  EXPECT_EQ(guarded_, 1u);
  EXPECT_EQ(s_.tagged_ms, 2u);
  // Past the window it takes its own level.
  EXPECT_EQ(StartStream(L_, s_, 1024, 3, /*now_ms=*/5, 2, guarded_), 3);
  EXPECT_EQ(guarded_, 1u);
  // No window (not per-message with the fabric guard): no cap.
  EXPECT_EQ(StartStream(L_, s_, 100 * 1024, 3, 6, 2, guarded_), low);
  EXPECT_EQ(StartStream(L_, s_, 1024, 3, 6, /*window_ms=*/0, guarded_), 3);
  EXPECT_EQ(guarded_, 1u);
  // A cap the window does not lower (the ceiling is lower still) is not counted.
  EXPECT_EQ(StartStream(L_, s_, 100 * 1024, 3, 7, 2, guarded_), low);
  EXPECT_EQ(StartStream(L_, s_, 1024, 0, 7, 2, guarded_), 0);
  EXPECT_EQ(guarded_, 1u);
}

TEST_F(ReadResponseLevelTest, MalformedResponsesReuseTheStreamLevelOrTakeTheDefault) {
  StreamResult r;
  r.outcome = StreamOutcome::kMalformed;
  EXPECT_EQ(ReadResponseLevel(L_, s_, r, BacklogSource::kNone, 0, 3, kMtu, 2, 0, guarded_),
            DefaultLevel(L_, kMtu));
  const uint8_t low = StartStream(L_, s_, 100 * 1024, 3, 0, 2, guarded_);
  EXPECT_EQ(ReadResponseLevel(L_, s_, r, BacklogSource::kNone, 0, 3, kMtu, 2, 0, guarded_), low);
}

TEST_F(ReadResponseLevelTest, PerPacketModeLevelsEveryPacketWithoutWindow) {
  L_.mode = Mode::kPerPacket;
  L_.unknown_floor = 1024;
  EXPECT_EQ(Tag(pkt::op::kReadResponseFirst, 10, 1024, 3, 0), 3);
  // The byte count grows past the cutoffs: the level falls packet by packet.
  uint8_t level = 3;
  for (uint32_t psn = 11; psn < 80; ++psn)
    level = Tag(pkt::op::kReadResponseMiddle, psn, 1024, 3, 0);
  EXPECT_LT(level, 3);
  EXPECT_EQ(guarded_, 0u);
}

TEST_F(ReadResponseLevelTest, HostBacklogIsTheReadsQueuedBehind) {
  tracker_.AddPending(s_, 10, 100 * 1024);  // this READ
  tracker_.AddPending(s_, 110, 64u << 20);  // a large one behind it
  const StreamResult r =
      tracker_.OnResponse(s_, MakePacket(pkt::op::kReadResponseFirst, 10, 1024).desc);
  ASSERT_EQ(r.outcome, StreamOutcome::kStart);
  const uint64_t behind = PendingReadBytes(s_);
  ASSERT_GT(behind, 0u);
  const uint64_t remaining = ReadStreamRemaining(s_, r.sent_before, L_.unknown_floor);
  // The egress source's backlog (here 0) is ignored for the READs queued behind.
  const uint8_t level =
      ReadResponseLevel(L_, s_, r, BacklogSource::kHostShim, 0, 3, kMtu, 2, 0, guarded_);
  EXPECT_EQ(level, ComputeLevel(L_, remaining, behind, kMtu));
  EXPECT_NE(level, ComputeLevel(L_, remaining, 0, kMtu));
}

TEST(AckLevelTest, ControlLevelUnderTheCeilingAndTheResponseWindow) {
  LevelConfig L;
  L.control_level = 3;
  uint64_t guarded = 0;
  EXPECT_EQ(AckLevel(L, nullptr, 3, 2, 0, guarded), 3);
  EXPECT_EQ(AckLevel(L, nullptr, 2, 2, 0, guarded), 2);  // the in-order cap
  ReadStreamEntry s{};
  s.flags = kStreamTagged;
  s.resp_level = 1;
  s.tagged_ms = 10;
  EXPECT_EQ(AckLevel(L, &s, 3, 2, 11, guarded), 1);  // behind the last READ response
  EXPECT_EQ(guarded, 1u);
  EXPECT_EQ(AckLevel(L, &s, 3, 2, 13, guarded), 3);  // the window has passed
  EXPECT_EQ(AckLevel(L, &s, 3, 0, 11, guarded), 3);  // no window
  L.mode = Mode::kPerPacket;
  EXPECT_EQ(AckLevel(L, &s, 3, 2, 11, guarded), 3);  // per-packet: no window
  EXPECT_EQ(guarded, 1u);
}

TEST(HoldResponseLevelTest, DoesNotRaiseTheHeldLevelOverUnacknowledgedRequests) {
  QpEntry e = Entry();
  e.flags |= kEntryPsnValid;
  e.next_psn = 50;
  StoreAckedPsn(e, 40);
  e.held_level = 1;
  HoldResponseLevel(e, 3, /*guard_requests=*/true);
  EXPECT_EQ(e.held_level, 1);  // the fabric guard's cap on the next request stays
  HoldResponseLevel(e, 0, true);
  EXPECT_EQ(e.held_level, 0);  // lowering is always fine
  HoldResponseLevel(e, 3, /*guard_requests=*/false);
  EXPECT_EQ(e.held_level, 3);  // no join: the newest packet's level
  StoreAckedPsn(e, 49);
  e.held_level = 1;
  HoldResponseLevel(e, 3, true);
  EXPECT_EQ(e.held_level, 3);  // everything acknowledged
}

}  // namespace
}  // namespace heddle::storm
