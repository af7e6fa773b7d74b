// File: dataplane/storm/read_streams_test.cc
#include "dataplane/storm/read_streams.h"

#include <gtest/gtest.h>

#include "dataplane/pkt/roce.h"
#include "dataplane/storm/storm_test_util.h"

namespace heddle::storm {
namespace {

using pkt::op::kReadResponseFirst;
using pkt::op::kReadResponseLast;
using pkt::op::kReadResponseMiddle;
using pkt::op::kReadResponseOnly;
using testing::MakePacket;

constexpr uint32_t kFloor = 4096;

class ReadStreamTest : public ::testing::Test {
 protected:
  StreamResult Feed(uint8_t opcode, uint32_t psn, uint32_t payload = 1024) {
    return tracker_.OnResponse(s_, MakePacket(opcode, psn, payload).desc);
  }
  uint64_t Remaining(const StreamResult& r) const {
    return ReadStreamRemaining(s_, r.sent_before, kFloor);
  }
  ReadStreamTracker tracker_;
  ReadStreamEntry s_{};
};

TEST_F(ReadStreamTest, AStreamOfUnknownSizeIsTrackedLikeASend) {
  StreamResult r = Feed(kReadResponseFirst, 100);
  EXPECT_EQ(r.outcome, StreamOutcome::kStart);
  EXPECT_FALSE(r.joined);
  EXPECT_EQ(r.sent_before, 0u);
  EXPECT_EQ(r.size_sample, 0u);
  EXPECT_EQ(Remaining(r), kFloor);  // R = max(sent, unknown_floor)
  EXPECT_TRUE(s_.flags & kStreamInProgress);
  EXPECT_FALSE(s_.flags & kStreamSizeKnown);
  EXPECT_EQ(s_.first_psn, 100u);
  EXPECT_EQ(s_.next_psn, 101u);
  for (uint32_t p = 101; p < 106; ++p) {
    r = Feed(kReadResponseMiddle, p);
    EXPECT_EQ(r.outcome, StreamOutcome::kContinue);
  }
  EXPECT_EQ(r.sent_before, 5u * 1024);
  EXPECT_EQ(Remaining(r), 5u * 1024);  // beyond the floor: bytes so far
  r = Feed(kReadResponseLast, 106, 512);
  EXPECT_EQ(r.outcome, StreamOutcome::kContinue);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.size_sample, 6u * 1024 + 512);  // its byte count, as for a SEND
  EXPECT_FALSE(s_.flags & kStreamInProgress);
  EXPECT_EQ(s_.completed, 1u);
  EXPECT_EQ(tracker_.counters().started_unknown, 1u);
  EXPECT_EQ(tracker_.counters().completed, 1u);
}

TEST_F(ReadStreamTest, AnOnlyResponseIsAWholeStream) {
  const StreamResult r = Feed(kReadResponseOnly, 7, 64);
  EXPECT_EQ(r.outcome, StreamOutcome::kStart);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.size_sample, 64u);
  EXPECT_FALSE(s_.flags & kStreamInProgress);
  EXPECT_EQ(Feed(kReadResponseOnly, 8, 0).outcome, StreamOutcome::kStart);
  EXPECT_EQ(tracker_.counters().completed, 2u);
  EXPECT_EQ(tracker_.counters().psn_jumps, 0u);
}

TEST_F(ReadStreamTest, APendingReadSizesTheStreamAtItsPsn) {
  EXPECT_EQ(tracker_.AddPending(s_, 100, 3000), PendingOutcome::kQueued);
  EXPECT_EQ(s_.n_pending, 1);
  EXPECT_EQ(PendingReadBytes(s_), 3000u);
  StreamResult r = Feed(kReadResponseFirst, 100);
  EXPECT_TRUE(r.joined);
  EXPECT_EQ(r.size_sample, 3000u);
  EXPECT_EQ(s_.n_pending, 0);
  EXPECT_EQ(Remaining(r), 3000u);  // R = S - sent
  r = Feed(kReadResponseMiddle, 101);
  EXPECT_EQ(Remaining(r), 3000u - 1024);
  r = Feed(kReadResponseLast, 102, 952);
  EXPECT_EQ(Remaining(r), 3000u - 2048);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.size_sample, 0u);  // sampled at the start already
  EXPECT_EQ(tracker_.counters().started_sized, 1u);
  EXPECT_EQ(tracker_.counters().overrun, 0u);
}

TEST_F(ReadStreamTest, SeveralOutstandingReadsAreAnsweredInPsnOrder) {
  // READs at 10 (2 KiB: responses 10, 11), 12 (1 KiB: 12), 13 (4 KiB: 13..16).
  EXPECT_EQ(tracker_.AddPending(s_, 10, 2048), PendingOutcome::kQueued);
  EXPECT_EQ(tracker_.AddPending(s_, 12, 1024), PendingOutcome::kQueued);
  EXPECT_EQ(tracker_.AddPending(s_, 13, 4096), PendingOutcome::kQueued);
  EXPECT_EQ(PendingReadBytes(s_), 7168u);
  EXPECT_EQ(Feed(kReadResponseFirst, 10).joined, true);
  EXPECT_EQ(s_.size, 2048u);
  EXPECT_EQ(PendingReadBytes(s_), 5120u);  // queued behind the stream: its backlog
  Feed(kReadResponseLast, 11);
  EXPECT_EQ(Feed(kReadResponseOnly, 12).joined, true);
  EXPECT_EQ(s_.size, 1024u);
  const StreamResult r = Feed(kReadResponseFirst, 13);
  EXPECT_TRUE(r.joined);
  EXPECT_EQ(s_.size, 4096u);
  EXPECT_EQ(s_.n_pending, 0);
  EXPECT_EQ(tracker_.counters().started_sized, 3u);
  EXPECT_EQ(tracker_.counters().stale, 0u);
}

TEST_F(ReadStreamTest, DuplicatesAndReissuedReadsChangeNothing) {
  tracker_.AddPending(s_, 10, 4096);
  Feed(kReadResponseFirst, 10);
  Feed(kReadResponseMiddle, 11);
  const ReadStreamEntry before = s_;
  // A response again, and the whole READ answered again from its start (the requester re-issued
  // it): old PSNs, no accounting.
  EXPECT_EQ(Feed(kReadResponseMiddle, 11).outcome, StreamOutcome::kDuplicate);
  const StreamResult r = Feed(kReadResponseFirst, 10);
  EXPECT_EQ(r.outcome, StreamOutcome::kDuplicate);
  EXPECT_EQ(r.sent_before, 2048u);
  EXPECT_EQ(s_.sent, before.sent);
  EXPECT_EQ(s_.next_psn, before.next_psn);
  EXPECT_EQ(s_.flags, before.flags);
  // The re-issued READ request itself is stale: its PSN is before the next response's.
  EXPECT_EQ(tracker_.AddPending(s_, 10, 4096), PendingOutcome::kStale);
  EXPECT_EQ(s_.n_pending, 0);
  EXPECT_EQ(tracker_.counters().duplicates, 2u);
  // The stream goes on.
  EXPECT_EQ(Feed(kReadResponseMiddle, 12).outcome, StreamOutcome::kContinue);
  EXPECT_TRUE(Feed(kReadResponseLast, 13).completed);
}

TEST_F(ReadStreamTest, PsnsWrapAround) {
  tracker_.AddPending(s_, 0xfffffe, 4096);
  tracker_.AddPending(s_, 2, 1024);
  EXPECT_TRUE(Feed(kReadResponseFirst, 0xfffffe).joined);
  EXPECT_EQ(Feed(kReadResponseMiddle, 0xffffff).outcome, StreamOutcome::kContinue);
  EXPECT_EQ(Feed(kReadResponseMiddle, 0).outcome, StreamOutcome::kContinue);
  EXPECT_EQ(Feed(kReadResponseMiddle, 0xffffff).outcome, StreamOutcome::kDuplicate);
  const StreamResult last = Feed(kReadResponseLast, 1);
  EXPECT_TRUE(last.completed);
  EXPECT_EQ(ReadStreamRemaining(s_, last.sent_before, kFloor), 1024u);
  EXPECT_EQ(tracker_.AddPending(s_, 0xffffff, 64), PendingOutcome::kStale);  // before, across 0
  const StreamResult next = Feed(kReadResponseOnly, 2);
  EXPECT_TRUE(next.joined);
  EXPECT_EQ(s_.size, 1024u);
  EXPECT_EQ(tracker_.counters().psn_jumps, 0u);
  EXPECT_EQ(tracker_.counters().duplicates, 1u);
}

TEST_F(ReadStreamTest, AReadJoinedAfterItsStreamStartedSizesTheRest) {
  Feed(kReadResponseFirst, 50);
  EXPECT_FALSE(s_.flags & kStreamSizeKnown);
  EXPECT_EQ(tracker_.AddPending(s_, 50, 8192), PendingOutcome::kLateJoin);
  const StreamResult r = Feed(kReadResponseMiddle, 51);
  EXPECT_EQ(ReadStreamRemaining(s_, r.sent_before, kFloor), 8192u - 1024);
  // Another READ: queued. The same READ once its stream ended: too late.
  EXPECT_EQ(tracker_.AddPending(s_, 58, 64), PendingOutcome::kQueued);
  Feed(kReadResponseLast, 57);  // a jump: 52..56 lost upstream of heddled
  EXPECT_EQ(tracker_.AddPending(s_, 50, 8192), PendingOutcome::kTooLate);
  const ReadStreamCounters& c = tracker_.counters();
  EXPECT_EQ(c.late_joins, 1u);
  EXPECT_EQ(c.too_late, 1u);
  EXPECT_EQ(c.psn_jumps, 1u);
  EXPECT_TRUE(Feed(kReadResponseOnly, 58).joined);
}

TEST_F(ReadStreamTest, OrphansAndAbandonedStreamsHaveUnknownSizes) {
  tracker_.AddPending(s_, 60, 1u << 20);
  // The READ's first responses were not seen: picked up at a Middle, which drops the pending READ
  // before it (it will never start a stream).
  StreamResult r = Feed(kReadResponseMiddle, 65);
  EXPECT_EQ(r.outcome, StreamOutcome::kOrphan);
  EXPECT_EQ(s_.n_pending, 0);
  EXPECT_EQ(Remaining(r), kFloor);
  r = Feed(kReadResponseLast, 66);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.size_sample, 0u);  // a partial byte count is not a READ's size
  // A First while a stream is in progress: its Last was lost.
  Feed(kReadResponseFirst, 67);
  Feed(kReadResponseFirst, 69);
  const ReadStreamCounters& c = tracker_.counters();
  EXPECT_EQ(c.orphans, 1u);
  EXPECT_EQ(c.stale, 1u);
  EXPECT_EQ(c.abandoned, 1u);
  EXPECT_EQ(c.started_unknown, 2u);
}

TEST_F(ReadStreamTest, AFullFifoDropsItsOldestAndStaleEntriesGo) {
  for (uint32_t i = 0; i < kMaxPendingReads; ++i) {
    EXPECT_EQ(tracker_.AddPending(s_, 100 + i, 1024), PendingOutcome::kQueued);
  }
  EXPECT_EQ(tracker_.AddPending(s_, 200, 64), PendingOutcome::kQueuedFull);
  EXPECT_EQ(s_.n_pending, kMaxPendingReads);
  EXPECT_EQ(s_.pending[0].psn, 101u);  // 100 dropped
  // The same READ again (re-sent before it was answered) replaces its entry.
  EXPECT_EQ(tracker_.AddPending(s_, 200, 128), PendingOutcome::kQueued);
  EXPECT_EQ(s_.n_pending, kMaxPendingReads);
  // A stream at 105 takes its READ and drops 101..104.
  EXPECT_TRUE(Feed(kReadResponseOnly, 105).joined);
  EXPECT_EQ(s_.n_pending, 3);  // 106, 107, 200: none before 105
  EXPECT_EQ(s_.pending[0].psn, 106u);
  EXPECT_EQ(s_.pending[2].psn, 200u);
  EXPECT_EQ(s_.pending[2].size, 128u);
  EXPECT_EQ(tracker_.counters().pending_full, 1u);
  EXPECT_EQ(tracker_.counters().stale, 4u);
}

TEST_F(ReadStreamTest, MalformedAndOverrunResponsesAreCounted) {
  // First/Last/Only without AETH: not a frame the parser accepts; a descriptor claiming one is
  // counted and changes nothing.
  for (uint8_t op : {kReadResponseFirst, kReadResponseLast, kReadResponseOnly}) {
    testing::Packet p = MakePacket(op, 5, 64);
    p.desc.flags &= static_cast<uint16_t>(~pkt::kFlagAeth);
    EXPECT_EQ(tracker_.OnResponse(s_, p.desc).outcome, StreamOutcome::kMalformed);
  }
  EXPECT_EQ(s_.flags, 0);
  EXPECT_EQ(tracker_.counters().malformed, 3u);
  // A truncated READ response is refused by the parser before it gets here.
  testing::Packet cut = MakePacket(kReadResponseFirst, 5, 64);
  pkt::PacketDesc d{};
  EXPECT_NE(pkt::Parse(cut.frame.data(), 14 + 20 + 8 + 12 + 2, &d), pkt::ParseError::kOk);
  // More bytes than the joined READ: counted once.
  tracker_.AddPending(s_, 5, 1000);
  Feed(kReadResponseFirst, 5);
  Feed(kReadResponseLast, 6);
  EXPECT_EQ(tracker_.counters().overrun, 1u);
  EXPECT_EQ(ReadStreamRemaining(s_, 2048, kFloor), 0u);
}

// ---- The side table ----

uint64_t HashIn(uint64_t bucket, uint16_t tag) { return (uint64_t{tag} << 48) | (bucket << 8); }

TEST(ReadStreamTableTest, FindsInsertsEvictsIdleAndRefuses) {
  ReadStreamTable t({.capacity = 5, .idle_ms = 100});
  EXPECT_EQ(t.capacity(), ReadStreamTable::kBucketEntries);  // rounded up: one bucket
  EXPECT_EQ(sizeof(ReadStreamEntry), 128u);
  InsertResult r;
  for (uint16_t i = 1; i <= ReadStreamTable::kBucketEntries; ++i) {
    ReadStreamEntry* e = t.FindOrInsert(HashIn(0, i), 7, 1000 + i, &r);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(r, InsertResult::kInserted);
  }
  EXPECT_EQ(t.size(), ReadStreamTable::kBucketEntries);
  // Same tag, another QPN: a different QP.
  EXPECT_EQ(t.Find(HashIn(0, 1), 8), nullptr);
  ASSERT_NE(t.Find(HashIn(0, 3), 7), nullptr);
  // Full, nothing idle: refused.
  EXPECT_EQ(t.FindOrInsert(HashIn(0, 99), 7, 1050, &r), nullptr);
  EXPECT_EQ(r, InsertResult::kTableFull);
  EXPECT_EQ(t.counters().table_full, 1u);
  // Entry 1 is seen again; later the least recently seen idle one (2) makes room.
  t.FindOrInsert(HashIn(0, 1), 7, 1100, nullptr)->n_pending = 3;
  ReadStreamEntry* e = t.FindOrInsert(HashIn(0, 99), 7, 1110, &r);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(r, InsertResult::kEvictedIdle);
  EXPECT_EQ(e->n_pending, 0);  // a fresh entry
  EXPECT_EQ(t.Find(HashIn(0, 2), 7), nullptr);
  EXPECT_NE(t.Find(HashIn(0, 1), 7), nullptr);
  EXPECT_EQ(t.counters().evicted_on_insert, 1u);
  // The sweep empties what is idle at its time.
  EXPECT_EQ(t.SweepIdleRange(0, t.capacity(), 1150), 6u);  // all but 1 (seen at 1100) and 99
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.SweepIdleRange(0, t.capacity(), 5000), 2u);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.counters().evicted_idle, 8u);
}

TEST(ReadStreamTableTest, TwoChoicesFillTheTableEvenly) {
  ReadStreamTable t({.capacity = 1024, .idle_ms = 100});
  for (uint64_t i = 0; i < 800; ++i) {
    const uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
    ASSERT_NE(t.FindOrInsert(h, static_cast<uint32_t>(i), 0, nullptr), nullptr) << i;
  }
  for (uint64_t i = 0; i < 800; ++i) {
    const uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
    const ReadStreamEntry* e = t.Find(h, static_cast<uint32_t>(i));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->key_hash, h);
  }
  EXPECT_EQ(t.size(), 800u);  // 78 % of the capacity, none refused
  EXPECT_EQ(t.counters().table_full, 0u);
}

}  // namespace
}  // namespace heddle::storm
