// File: dataplane/storm/tracker_test.cc
#include "dataplane/storm/tracker.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "dataplane/pkt/roce.h"
#include "dataplane/storm/storm_test_util.h"

namespace heddle::storm {
namespace {

using pkt::op::kAcknowledge;
using pkt::op::kCompareSwap;
using pkt::op::kReadRequest;
using pkt::op::kReadResponseMiddle;
using pkt::op::kSendFirst;
using pkt::op::kSendLast;
using pkt::op::kSendMiddle;
using pkt::op::kSendOnly;
using pkt::op::kWriteFirst;
using pkt::op::kWriteLast;
using pkt::op::kWriteMiddle;
using pkt::op::kWriteOnly;
using testing::MakeAck;
using testing::MakePacket;

class TrackerTest : public ::testing::Test {
 protected:
  QpEntry Fresh() {
    QpTable t({.capacity = 4});
    return *t.FindOrInsert(QpKey{}, 0, nullptr);
  }
  TrackResult Feed(uint8_t opcode, uint32_t psn, uint32_t payload = 0, uint32_t dma = 0) {
    return tracker_.OnRequestPacket(e_, MakePacket(opcode, psn, payload, dma).desc);
  }
  RequestTracker tracker_{{.mtu = 1024}};
  QpEntry e_ = Fresh();
};

TEST_F(TrackerTest, WriteSizeFromRethAndSentByPayload) {
  TrackResult r = Feed(kWriteFirst, 100, 1024, 3000);
  EXPECT_EQ(r.outcome, TrackOutcome::kStart);
  EXPECT_EQ(r.sent_before, 0u);
  EXPECT_EQ(r.size_sample, 3000u);
  EXPECT_EQ(static_cast<RequestKind>(e_.kind), RequestKind::kWrite);
  EXPECT_EQ(e_.size, 3000u);
  EXPECT_TRUE(e_.flags & kEntrySizeKnown);
  EXPECT_TRUE(e_.flags & kEntryInProgress);
  EXPECT_EQ(e_.first_psn, 100u);
  EXPECT_EQ(e_.end_psn, 102u);  // ceil(3000 / 1024) = 3 packets
  EXPECT_TRUE(e_.flags & kEntryEndPsnValid);
  EXPECT_EQ(e_.sent, 1024u);
  EXPECT_EQ(e_.next_psn, 101u);

  r = Feed(kWriteMiddle, 101, 1024);
  EXPECT_EQ(r.outcome, TrackOutcome::kContinue);
  EXPECT_EQ(r.sent_before, 1024u);
  EXPECT_EQ(r.size_sample, 0u);
  EXPECT_EQ(e_.sent, 2048u);
  EXPECT_FALSE(r.completed);

  r = Feed(kWriteLast, 102, 952);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(e_.sent, 3000u);
  EXPECT_EQ(e_.completed, 1u);
  EXPECT_FALSE(e_.flags & kEntryInProgress);
  EXPECT_EQ(tracker_.counters().requests_completed, 1u);
  EXPECT_EQ(tracker_.counters().overrun, 0u);
}

TEST_F(TrackerTest, PadBytesAreNotData) {
  Feed(kWriteOnly, 0, 1001, 1001);  // payload padded to 1004 on the wire
  EXPECT_EQ(e_.sent, 1001u);
}

TEST_F(TrackerTest, SendSizeUnknownUntilLast) {
  TrackResult r = Feed(kSendFirst, 7, 1024);
  EXPECT_EQ(r.size_sample, 0u);
  EXPECT_FALSE(e_.flags & kEntrySizeKnown);
  EXPECT_FALSE(e_.flags & kEntryEndPsnValid);
  Feed(kSendMiddle, 8, 1024);
  EXPECT_FALSE(e_.flags & kEntrySizeKnown);
  r = Feed(kSendLast, 9, 100);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.size_sample, 2148u);
  EXPECT_TRUE(e_.flags & kEntrySizeKnown);
  EXPECT_EQ(e_.size, 2148u);
  EXPECT_EQ(e_.end_psn, 9u);

  r = Feed(kSendOnly, 10, 64);
  EXPECT_EQ(r.outcome, TrackOutcome::kStart);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.size_sample, 64u);
  EXPECT_EQ(e_.completed, 2u);
}

TEST_F(TrackerTest, ReadRequestAndAtomicSizes) {
  TrackResult r = Feed(kReadRequest, 50, 0, 65536);
  EXPECT_EQ(static_cast<RequestKind>(e_.kind), RequestKind::kRead);
  EXPECT_EQ(e_.size, 65536u);
  EXPECT_EQ(e_.sent, 0u);  // the bytes come back as READ responses
  EXPECT_EQ(r.size_sample, 65536u);
  EXPECT_TRUE(r.completed);

  // The READ consumed PSNs 50..113 (64 responses); the next request's PSN is a forward jump.
  r = Feed(kCompareSwap, 114);
  EXPECT_EQ(r.outcome, TrackOutcome::kStart);
  EXPECT_EQ(static_cast<RequestKind>(e_.kind), RequestKind::kAtomic);
  EXPECT_EQ(e_.size, 8u);
  EXPECT_EQ(r.size_sample, 8u);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(e_.completed, 2u);
  EXPECT_EQ(e_.next_psn, 115u);
}

TEST_F(TrackerTest, DuplicatesNeverDoubleCount) {
  Feed(kWriteFirst, 0, 1024, 8192);
  for (uint32_t p = 1; p < 4; ++p) Feed(kWriteMiddle, p, 1024);
  EXPECT_EQ(e_.sent, 4096u);
  // Replays of every packet so far, including the first.
  TrackResult r = Feed(kWriteFirst, 0, 1024, 8192);
  EXPECT_EQ(r.outcome, TrackOutcome::kDuplicate);
  for (uint32_t p = 1; p < 4; ++p) {
    r = Feed(kWriteMiddle, p, 1024);
    EXPECT_EQ(r.outcome, TrackOutcome::kDuplicate);
    EXPECT_EQ(r.sent_before, 4096u);
  }
  EXPECT_EQ(e_.sent, 4096u);
  EXPECT_EQ(e_.first_psn, 0u);
  EXPECT_EQ(e_.size, 8192u);
  EXPECT_EQ(tracker_.counters().duplicates, 4u);
  EXPECT_EQ(tracker_.counters().requests_started, 1u);
}

TEST_F(TrackerTest, GoBackNRetransmissionCountsEachPsnOnce) {
  // 8-packet WRITE; the receiver NAKs at PSN 3 after 0..5 passed; the sender resends 3..7.
  Feed(kWriteFirst, 0, 1024, 8192);
  for (uint32_t p = 1; p <= 5; ++p) Feed(kWriteMiddle, p, 1024);
  for (uint32_t p = 3; p <= 6; ++p) Feed(kWriteMiddle, p, 1024);
  TrackResult r = Feed(kWriteLast, 7, 1024);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(e_.sent, 8192u);
  EXPECT_EQ(e_.completed, 1u);
  EXPECT_EQ(tracker_.counters().duplicates, 3u);  // 3, 4, 5
  EXPECT_EQ(tracker_.counters().overrun, 0u);
}

TEST_F(TrackerTest, PsnWrapsAroundModulo2To24) {
  TrackResult r = Feed(kWriteFirst, 0xfffffe, 1024, 4096);
  EXPECT_EQ(e_.end_psn, 0x000001u);
  r = Feed(kWriteMiddle, 0xffffff, 1024);
  EXPECT_EQ(r.outcome, TrackOutcome::kContinue);
  r = Feed(kWriteMiddle, 0x000000, 1024);
  EXPECT_EQ(r.outcome, TrackOutcome::kContinue);
  EXPECT_EQ(e_.next_psn, 1u);
  // A duplicate from before the wrap is still a duplicate.
  r = Feed(kWriteMiddle, 0xffffff, 1024);
  EXPECT_EQ(r.outcome, TrackOutcome::kDuplicate);
  r = Feed(kWriteLast, 0x000001, 1024);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(e_.sent, 4096u);
  EXPECT_EQ(tracker_.counters().psn_jumps, 0u);

  EXPECT_TRUE(PsnAfter(0, 0xffffff));
  EXPECT_FALSE(PsnAfter(0xffffff, 0));
  EXPECT_TRUE(PsnAfter(0x7fffff, 0));
  EXPECT_FALSE(PsnAfter(0x800000, 0));  // half the space away: treated as behind
  EXPECT_FALSE(PsnAfter(5, 5));
}

TEST_F(TrackerTest, ForwardJumpAdvancesAndCountsOnlySeenBytes) {
  Feed(kWriteFirst, 10, 1024, 4096);
  TrackResult r = Feed(kWriteMiddle, 12, 1024);  // 11 lost upstream
  EXPECT_EQ(r.outcome, TrackOutcome::kContinue);
  EXPECT_EQ(e_.next_psn, 13u);
  EXPECT_EQ(e_.sent, 2048u);
  EXPECT_EQ(tracker_.counters().psn_jumps, 1u);
  // The lost packet arriving late is behind next_psn: not counted (PSNs only move forward).
  r = Feed(kWriteMiddle, 11, 1024);
  EXPECT_EQ(r.outcome, TrackOutcome::kDuplicate);
  EXPECT_EQ(e_.sent, 2048u);
}

TEST_F(TrackerTest, BogusRethLengthsAreSurvived) {
  // Zero-length WRITE: legal, one packet, no payload.
  TrackResult r = Feed(kWriteOnly, 0, 0, 0);
  EXPECT_TRUE(r.completed);
  EXPECT_TRUE(e_.flags & kEntrySizeKnown);
  EXPECT_EQ(e_.size, 0u);
  EXPECT_EQ(e_.end_psn, 0u);
  // Zero length on a first packet that then carries data: overrun, counted, not a crash.
  Feed(kWriteFirst, 1, 1024, 0);
  Feed(kWriteLast, 2, 1024);
  EXPECT_EQ(e_.sent, 2048u);
  EXPECT_EQ(tracker_.counters().overrun, 1u);
  EXPECT_EQ(e_.completed, 2u);
  // 2^31 with a tiny MTU: 2^23 packets cannot be told apart modulo 2^24, so no end_psn.
  RequestTracker small({.mtu = 256});
  QpEntry e = Fresh();
  small.OnRequestPacket(e, MakePacket(kWriteFirst, 3, 256, 1u << 31).desc);
  EXPECT_EQ(e.size, 1u << 31);
  EXPECT_FALSE(e.flags & kEntryEndPsnValid);
  EXPECT_EQ(small.counters().bogus_length, 0u);  // 2^31 itself is the IBTA maximum
  // Beyond the maximum: counted, tracked as huge.
  small.OnRequestPacket(e, MakePacket(kWriteFirst, 4, 256, 0xffffffffu).desc);
  EXPECT_EQ(e.size, 0xffffffffu);
  EXPECT_EQ(small.counters().bogus_length, 1u);
  EXPECT_EQ(small.counters().abandoned, 1u);
  EXPECT_EQ(e.sent, 256u);
}

TEST_F(TrackerTest, MidMessagePickupIsAnOrphanOfUnknownSize) {
  TrackResult r = Feed(kWriteMiddle, 500, 1024);
  EXPECT_EQ(r.outcome, TrackOutcome::kOrphan);
  EXPECT_FALSE(e_.flags & kEntrySizeKnown);
  EXPECT_EQ(r.size_sample, 0u);
  r = Feed(kWriteMiddle, 501, 1024);
  EXPECT_EQ(r.outcome, TrackOutcome::kContinue);
  r = Feed(kWriteLast, 502, 1024);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.size_sample, 0u);  // a partial view is not a size sample
  EXPECT_EQ(e_.sent, 3072u);
  EXPECT_EQ(tracker_.counters().orphans, 1u);
}

TEST_F(TrackerTest, NonRequestClassesAreNotTracked) {
  const auto ack = MakeAck(3);
  TrackResult r = tracker_.OnRequestPacket(e_, ack.desc);
  EXPECT_EQ(r.outcome, TrackOutcome::kNotTracked);
  EXPECT_FALSE(e_.flags & kEntryPsnValid);
}

TEST_F(TrackerTest, AcksAdvanceAckedPsnMonotonically) {
  EXPECT_EQ(LoadAckedPsn(e_), kNoPsn);
  EXPECT_TRUE(tracker_.OnResponsePacket(e_, MakeAck(100).desc));
  EXPECT_EQ(LoadAckedPsn(e_), 100u);
  EXPECT_FALSE(tracker_.OnResponsePacket(e_, MakeAck(90).desc));  // stale
  EXPECT_EQ(LoadAckedPsn(e_), 100u);
  // NAK (sequence error, syndrome 011xxxxx) at 120: 119 and before are acknowledged.
  EXPECT_TRUE(tracker_.OnResponsePacket(e_, MakeAck(120, 0x60).desc));
  EXPECT_EQ(LoadAckedPsn(e_), 119u);
  // READ response middles acknowledge implicitly.
  EXPECT_TRUE(tracker_.OnResponsePacket(e_, MakeAck(130, 0, kReadResponseMiddle).desc));
  EXPECT_EQ(LoadAckedPsn(e_), 130u);
  // Across the wrap.
  EXPECT_TRUE(tracker_.OnResponsePacket(e_, MakeAck(0x700000).desc));
  EXPECT_TRUE(tracker_.OnResponsePacket(e_, MakeAck(0xe00000).desc));
  EXPECT_TRUE(tracker_.OnResponsePacket(e_, MakeAck(0xfffff0).desc));
  EXPECT_TRUE(tracker_.OnResponsePacket(e_, MakeAck(0x000005).desc));
  EXPECT_EQ(LoadAckedPsn(e_), 5u);
  EXPECT_FALSE(tracker_.OnResponsePacket(e_, MakeAck(0xfffff8).desc));
  // Request-direction classes are ignored here.
  EXPECT_FALSE(tracker_.OnResponsePacket(e_, MakePacket(kWriteOnly, 9, 8, 8).desc));
  EXPECT_EQ(tracker_.counters().acks, 7u);
  (void)kAcknowledge;
}

TEST_F(TrackerTest, DecodeAckNamesTheLastAcknowledgedPsn) {
  uint32_t psn = 0;
  EXPECT_EQ(DecodeAck(MakeAck(100).desc, &psn), AckKind::kAck);
  EXPECT_EQ(psn, 100u);
  // NAK (sequence error 0x60) and RNR NAK (0x20 | timer): the packets before the refused one.
  EXPECT_EQ(DecodeAck(MakeAck(120, 0x60).desc, &psn), AckKind::kAck);
  EXPECT_EQ(psn, 119u);
  EXPECT_EQ(DecodeAck(MakeAck(130, 0x2e).desc, &psn), AckKind::kAck);
  EXPECT_EQ(psn, 129u);
  EXPECT_EQ(DecodeAck(MakeAck(0, 0x60).desc, &psn), AckKind::kAck);  // across the wrap
  EXPECT_EQ(psn, 0xffffffu);
  // Every READ response acknowledges its PSN, AETH or not; an atomic ACK like an ACK.
  EXPECT_EQ(DecodeAck(MakeAck(140, 0, kReadResponseMiddle).desc, &psn), AckKind::kAck);
  EXPECT_EQ(psn, 140u);
  EXPECT_EQ(DecodeAck(MakeAck(150, 0, pkt::op::kAtomicAcknowledge).desc, &psn), AckKind::kAck);
  EXPECT_EQ(psn, 150u);
  // Reserved syndrome (010) and an ACK whose AETH is missing: malformed, psn untouched.
  psn = 7;
  EXPECT_EQ(DecodeAck(MakeAck(160, 0x40).desc, &psn), AckKind::kMalformed);
  pkt::PacketDesc no_aeth = MakeAck(170).desc;
  no_aeth.flags &= static_cast<uint16_t>(~pkt::kFlagAeth);
  EXPECT_EQ(DecodeAck(no_aeth, &psn), AckKind::kMalformed);
  EXPECT_EQ(psn, 7u);
  // Not acknowledgements.
  EXPECT_EQ(DecodeAck(MakePacket(kWriteOnly, 9, 8, 8).desc, &psn), AckKind::kNone);
  EXPECT_EQ(DecodeAck(MakePacket(kReadRequest, 9, 0, 8).desc, &psn), AckKind::kNone);
  EXPECT_EQ(psn, 7u);
}

TEST_F(TrackerTest, ApplyAckMovesForwardWithinWhatTheQpSent) {
  // Before any request: monotonic only.
  EXPECT_EQ(tracker_.ApplyAck(e_, 50), AckOutcome::kAdvanced);
  EXPECT_EQ(tracker_.ApplyAck(e_, 40), AckOutcome::kOld);
  EXPECT_EQ(LoadAckedPsn(e_), 50u);
  // A 3-packet WRITE at PSNs 100..102, then a SEND at 103.
  Feed(kWriteFirst, 100, 1024, 3000);
  Feed(kWriteMiddle, 101, 1024);
  Feed(kWriteLast, 102, 952);
  Feed(kSendOnly, 103, 64);
  EXPECT_EQ(tracker_.ApplyAck(e_, 101), AckOutcome::kAdvanced);
  EXPECT_EQ(LoadAckedPsn(e_), 101u);
  EXPECT_EQ(tracker_.ApplyAck(e_, 101), AckOutcome::kOld);  // duplicate
  EXPECT_EQ(tracker_.ApplyAck(e_, 100), AckOutcome::kOld);  // older, reordered
  EXPECT_EQ(LoadAckedPsn(e_), 101u);
  EXPECT_EQ(tracker_.ApplyAck(e_, 104), AckOutcome::kAhead);  // never sent
  EXPECT_EQ(tracker_.ApplyAck(e_, 0x800000), AckOutcome::kAhead);
  EXPECT_EQ(LoadAckedPsn(e_), 101u);
  // A NAK at 103 (the SEND refused): 102 and before are acknowledged.
  uint32_t psn = 0;
  ASSERT_EQ(DecodeAck(MakeAck(103, 0x60).desc, &psn), AckKind::kAck);
  EXPECT_EQ(tracker_.ApplyAck(e_, psn), AckOutcome::kAdvanced);
  EXPECT_EQ(LoadAckedPsn(e_), 102u);
  EXPECT_EQ(tracker_.ApplyAck(e_, 103), AckOutcome::kAdvanced);
  EXPECT_EQ(tracker_.counters().acks, 4u);      // 50, 101, 102, 103
  EXPECT_EQ(tracker_.counters().acks_old, 3u);  // 40, 101, 100
  EXPECT_EQ(tracker_.counters().acks_ahead, 2u);
}

TEST_F(TrackerTest, ApplyAckAcrossThePsnWrap) {
  Feed(kSendOnly, 0xfffffe, 64);
  Feed(kSendOnly, 0xffffff, 64);
  Feed(kSendOnly, 0, 64);
  Feed(kSendOnly, 1, 64);
  EXPECT_EQ(tracker_.ApplyAck(e_, 0xffffff), AckOutcome::kAdvanced);
  EXPECT_EQ(tracker_.ApplyAck(e_, 0xfffffe), AckOutcome::kOld);
  EXPECT_EQ(tracker_.ApplyAck(e_, 1), AckOutcome::kAdvanced);
  EXPECT_EQ(tracker_.ApplyAck(e_, 0), AckOutcome::kOld);
  EXPECT_EQ(tracker_.ApplyAck(e_, 2), AckOutcome::kAhead);
  EXPECT_EQ(LoadAckedPsn(e_), 1u);
}

TEST_F(TrackerTest, ReadResponsesMayRunPastTheReadRequestsPsn) {
  // A READ request of 8 KiB at PSN 200 is one packet here; its responses take PSNs 200.. (two at
  // a 4 KiB MTU, up to 32 at the smallest MTU). The request side cannot tell which.
  Feed(kSendOnly, 199, 64);
  Feed(kReadRequest, 200, 0, 8192);
  EXPECT_EQ(e_.next_psn, 201u);
  EXPECT_EQ(LastAnswerablePsn(e_), 231u);
  EXPECT_EQ(LastAnswerablePsn(e_, 4096), 201u);        // two responses at a 4 KiB MTU
  EXPECT_EQ(UnacknowledgedPackets(e_, 4096), kNoPsn);  // nothing acknowledged yet
  EXPECT_EQ(tracker_.ApplyAck(e_, 200), AckOutcome::kAdvanced);
  EXPECT_EQ(UnacknowledgedPackets(e_, 4096), 1u);  // the second response
  EXPECT_EQ(UnacknowledgedPackets(e_, 1024), 7u);
  EXPECT_EQ(tracker_.ApplyAck(e_, 201), AckOutcome::kAdvanced);
  EXPECT_EQ(UnacknowledgedPackets(e_, 4096), 0u);
  EXPECT_EQ(tracker_.ApplyAck(e_, 231), AckOutcome::kAdvanced);
  EXPECT_EQ(tracker_.ApplyAck(e_, 232), AckOutcome::kAhead);
  EXPECT_EQ(UnacknowledgedPackets(e_, 4096), 0u);  // acknowledged beyond it
  // The next request follows the responses: a counted PSN jump, after which the window is its own.
  Feed(kSendOnly, 232, 64);
  EXPECT_EQ(LastAnswerablePsn(e_), 232u);
  EXPECT_EQ(UnacknowledgedPackets(e_, 4096), 1u);
}

TEST_F(TrackerTest, AnAckedPsnBeyondWhatTheQpSentIsReplaced) {
  // acked_psn left ahead of every PSN the entry sent (an earlier incarnation of the QP): the first
  // answerable acknowledgement replaces it, though it is not "after" it.
  Feed(kSendOnly, 1000, 64);
  Feed(kSendOnly, 1001, 64);
  StoreAckedPsn(e_, 5000);
  EXPECT_EQ(tracker_.ApplyAck(e_, 1000), AckOutcome::kAdvanced);
  EXPECT_EQ(LoadAckedPsn(e_), 1000u);
  EXPECT_EQ(tracker_.ApplyAck(e_, 999), AckOutcome::kOld);
}

// The tracker as first written, one general path for every packet: the reference the inline fast
// paths (in-order middle packets, whole requests in one packet) must match field for field.
class ReferenceTracker {
 public:
  explicit ReferenceTracker(uint32_t mtu) : mtu_(mtu) {}
  TrackerCounters counters;

  TrackResult OnRequestPacket(QpEntry& e, const pkt::PacketDesc& desc) {
    TrackResult r;
    RequestKind kind = RequestKind::kNone;
    switch (desc.roce_class) {
      case pkt::RoceClass::kWrite: kind = RequestKind::kWrite; break;
      case pkt::RoceClass::kReadRequest: kind = RequestKind::kRead; break;
      case pkt::RoceClass::kSend: kind = RequestKind::kSend; break;
      case pkt::RoceClass::kAtomic: kind = RequestKind::kAtomic; break;
      default: return r;
    }
    const uint32_t psn = desc.psn & kPsnMask;
    if ((e.flags & kEntryPsnValid) && !PsnAfter(psn, (e.next_psn - 1) & kPsnMask)) {
      ++counters.duplicates;
      r.outcome = TrackOutcome::kDuplicate;
      r.sent_before = e.sent;
      return r;
    }
    if ((e.flags & kEntryPsnValid) && psn != e.next_psn) ++counters.psn_jumps;
    const bool first = desc.flags & pkt::kFlagFirst;
    const bool in_progress = e.flags & kEntryInProgress;
    if (first) {
      if (in_progress) ++counters.abandoned;
      Start(e, desc, kind, &r);
      ++counters.requests_started;
      r.outcome = TrackOutcome::kStart;
    } else if (!in_progress || static_cast<RequestKind>(e.kind) != kind) {
      if (in_progress) ++counters.abandoned;
      Start(e, desc, kind, &r);
      e.flags &= static_cast<uint8_t>(~(kEntrySizeKnown | kEntryEndPsnValid));
      e.size = 0;
      r.size_sample = 0;
      ++counters.orphans;
      r.outcome = TrackOutcome::kOrphan;
    } else {
      r.outcome = TrackOutcome::kContinue;
    }
    r.sent_before = e.sent;
    if (kind != RequestKind::kRead) {
      const uint32_t sum = e.sent + DataBytes(desc);
      e.sent = sum < e.sent ? UINT32_MAX : sum;
    }
    if ((e.flags & kEntrySizeKnown) && kind != RequestKind::kAtomic && e.sent > e.size &&
        r.sent_before <= e.size) {
      ++counters.overrun;
    }
    e.next_psn = PsnAdd(psn, 1);
    e.flags |= kEntryPsnValid;
    const bool last =
        kind == RequestKind::kRead || kind == RequestKind::kAtomic || (desc.flags & pkt::kFlagLast);
    if (last) {
      if (kind == RequestKind::kSend && !(e.flags & kEntrySizeKnown)) {
        e.size = e.sent;
        e.flags |= kEntrySizeKnown;
        if (r.outcome != TrackOutcome::kOrphan) r.size_sample = e.sent;
      }
      e.end_psn = psn;
      e.flags |= kEntryEndPsnValid;
      e.flags &= static_cast<uint8_t>(~kEntryInProgress);
      ++e.completed;
      ++counters.requests_completed;
      r.completed = true;
    }
    return r;
  }

 private:
  void Start(QpEntry& e, const pkt::PacketDesc& desc, RequestKind kind, TrackResult* r) {
    const uint32_t psn = desc.psn & kPsnMask;
    e.kind = static_cast<uint8_t>(kind);
    e.flags = static_cast<uint8_t>((e.flags & kEntryPsnValid) | kEntryInProgress);
    e.size = 0;
    e.sent = 0;
    e.first_psn = psn;
    e.end_psn = psn;
    if ((kind == RequestKind::kWrite || kind == RequestKind::kRead) &&
        (desc.flags & pkt::kFlagReth)) {
      e.size = desc.dma_length;
      e.flags |= kEntrySizeKnown;
      if (desc.dma_length > kMaxMessageBytes) ++counters.bogus_length;
      r->size_sample = desc.dma_length;
    } else if (kind == RequestKind::kAtomic) {
      e.size = 8;
      e.flags |= kEntrySizeKnown;
      r->size_sample = 8;
    }
    if (kind == RequestKind::kWrite && (e.flags & kEntrySizeKnown)) {
      const uint64_t packets = std::max<uint64_t>(1, (uint64_t{e.size} + mtu_ - 1) / mtu_);
      if (packets < (1u << 23)) {
        e.end_psn = PsnAdd(psn, static_cast<uint32_t>(packets - 1));
        e.flags |= kEntryEndPsnValid;
      }
    } else if (kind == RequestKind::kAtomic || kind == RequestKind::kRead ||
               (desc.flags & pkt::kFlagLast)) {
      e.flags |= kEntryEndPsnValid;
    }
  }
  uint32_t mtu_;
};

TEST(TrackerEquivalenceTest, FastPathsMatchTheGeneralPathFieldForField) {
  // Random request streams — mostly in order, with duplicates, jumps, lost firsts/lasts, kind
  // changes, PSN wrap, bogus and missing RETHs, padding — through the tracker and the reference.
  std::mt19937 rng(20261202);
  constexpr pkt::RoceClass kClasses[] = {pkt::RoceClass::kWrite, pkt::RoceClass::kSend,
                                         pkt::RoceClass::kReadRequest, pkt::RoceClass::kAtomic,
                                         pkt::RoceClass::kAck};
  size_t fast_like = 0;
  for (int stream = 0; stream < 2000; ++stream) {
    RequestTracker tracker({.mtu = 1024});
    ReferenceTracker ref(1024);
    QpEntry a{}, b{};
    a.acked_psn = b.acked_psn = kNoPsn;
    uint32_t psn = rng() % 16 == 0 ? kPsnMask - 20 : rng() & kPsnMask;
    for (int i = 0; i < 60; ++i) {
      pkt::PacketDesc d{};
      d.flags = pkt::kFlagRoce;
      const uint32_t shape = rng() % 16;
      d.roce_class = shape < 12 ? (shape < 6 ? pkt::RoceClass::kWrite : pkt::RoceClass::kSend)
                                : kClasses[rng() % 5];
      const uint32_t pos = rng() % 4;  // only, first, middle, last
      if (pos == 0 || pos == 1) d.flags |= pkt::kFlagFirst;
      if (pos == 0 || pos == 3) d.flags |= pkt::kFlagLast;
      if ((d.flags & pkt::kFlagFirst) && rng() % 8 != 0) {
        d.flags |= pkt::kFlagReth;
        d.dma_length = rng() % 32 == 0 ? 0xfffffff0u : rng() % 20000;
      }
      d.payload_len = static_cast<uint16_t>(rng() % 1100);
      d.pad_count = rng() % 4;
      const uint32_t step = rng() % 20;
      psn = step < 15 ? psn : step < 18 ? psn - rng() % 4 : psn + 1 + rng() % 5;
      d.psn = psn & kPsnMask;
      psn = (psn + 1) & kPsnMask;
      fast_like += (a.flags & kEntryPsnValid) && d.psn == a.next_psn;
      const TrackResult ra = tracker.OnRequestPacket(a, d);
      const TrackResult rb = ref.OnRequestPacket(b, d);
      ASSERT_EQ(ra.outcome, rb.outcome) << stream << "/" << i;
      ASSERT_EQ(ra.completed, rb.completed) << stream << "/" << i;
      ASSERT_EQ(ra.sent_before, rb.sent_before) << stream << "/" << i;
      ASSERT_EQ(ra.size_sample, rb.size_sample) << stream << "/" << i;
      ASSERT_EQ(std::memcmp(&a, &b, sizeof(QpEntry)), 0) << stream << "/" << i;
    }
    const TrackerCounters& ca = tracker.counters();
    const TrackerCounters& cb = ref.counters;
    ASSERT_EQ(ca.requests_started, cb.requests_started);
    ASSERT_EQ(ca.requests_completed, cb.requests_completed);
    ASSERT_EQ(ca.orphans, cb.orphans);
    ASSERT_EQ(ca.abandoned, cb.abandoned);
    ASSERT_EQ(ca.duplicates, cb.duplicates);
    ASSERT_EQ(ca.psn_jumps, cb.psn_jumps);
    ASSERT_EQ(ca.bogus_length, cb.bogus_length);
    ASSERT_EQ(ca.overrun, cb.overrun);
  }
  EXPECT_GT(fast_like, 30000u);  // most packets were in order: the fast paths ran
}

TEST(TrackerConcurrencyTest, RequestAndResponseWorkersWriteDisjointFields) {
  // docs/storm.md §2: with RSS the requests and the responses of a QP may reach different workers;
  // each has its own tracker, and they share only the entry. Run both at once (clean under TSan:
  // the response side only ever touches acked_psn, atomically).
  QpTable table({.capacity = 4});
  QpEntry* e = table.FindOrInsert(QpKey{}, 0, nullptr);
  constexpr uint32_t kMessages = 2000;
  std::vector<testing::Packet> requests, acks;
  for (uint32_t m = 0; m < kMessages; ++m) {
    requests.push_back(MakePacket(kWriteFirst, 2 * m, 1024, 2048));
    requests.push_back(MakePacket(kWriteLast, 2 * m + 1, 1024));
    acks.push_back(MakeAck(2 * m + 1));
  }
  RequestTracker request_side({.mtu = 1024});
  RequestTracker response_side({.mtu = 1024});
  std::thread responder([&] {
    for (const auto& a : acks) response_side.OnResponsePacket(*e, a.desc);
  });
  uint32_t last_seen_ack = kNoPsn;  // the request worker may read acked_psn meanwhile
  for (const auto& r : requests) {
    request_side.OnRequestPacket(*e, r.desc);
    const uint32_t acked = LoadAckedPsn(*e);
    if (acked != kNoPsn) {
      if (last_seen_ack != kNoPsn) {
        EXPECT_FALSE(PsnAfter(last_seen_ack, acked));  // monotonic
      }
      last_seen_ack = acked;
    }
  }
  responder.join();
  EXPECT_EQ(e->completed, kMessages);
  EXPECT_EQ(e->sent, 2048u);
  EXPECT_EQ(e->next_psn, 2 * kMessages);
  EXPECT_EQ(LoadAckedPsn(*e), 2 * kMessages - 1);
  EXPECT_EQ(response_side.counters().acks, kMessages);
}

}  // namespace
}  // namespace heddle::storm
