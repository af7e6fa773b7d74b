#include "control/collective/compiler.h"

#include <cstdio>
#include <random>
#include <string>

#include "control/collective/builtins.h"
#include "control/collective/dsl.h"
#include "control/collective/testing/intents.h"
#include "control/collective/topology_io.h"
#include "control/collective/verifier.h"
#include "control/nuwa/dsl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::collective {
namespace {

using testing::CheckSchedule;
using testing::Copy;
using ::testing::HasSubstr;
using testing::Mesh;
using testing::Reduce;

constexpr double kGbit = 1e9 / 8;
constexpr uint64_t kMiB = 1 << 20;

// Ranks 0..n-1 in a line: only i <-> i+1 links.
Topology Line(uint32_t n, double bw, double lat) {
  Topology t;
  t.ranks = n;
  for (uint32_t i = 0; i < n; ++i) t.nodes.push_back(absl::StrCat("r", i));
  for (uint32_t i = 0; i + 1 < n; ++i) {
    t.links.push_back(Link{i, i + 1, bw, lat});
    t.links.push_back(Link{i + 1, i, bw, lat});
  }
  return t;
}

CompileOptions Pieces(uint32_t p, uint64_t slot_bytes = kMiB) {
  CompileOptions o;
  o.pieces = p;
  o.slot_bytes = slot_bytes;
  return o;
}

TEST(Compiler, LoneTransferCostsAlphaLatencyAndBytesOverBandwidth) {
  Topology t = Mesh(2, 10 * kGbit, 0.030);
  Intent in{"one", {Kind::kAllGather, 2, 1}, {Copy(0, 0, 1)}};
  CompileOptions o = Pieces(1);
  o.per_op_overhead_s = 1e-4;
  absl::StatusOr<Schedule> s = Compile(in, t, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->predicted_s, 1e-4 + 0.030 + double{kMiB} / (10 * kGbit));
  ASSERT_EQ(s->per_rank[0].ops.size(), 1u);
  ASSERT_EQ(s->per_rank[1].ops.size(), 1u);
  const Op& send = s->per_rank[0].ops[0];
  const Op& recv = s->per_rank[1].ops[0];
  EXPECT_EQ(send.kind, OpKind::kSend);
  EXPECT_EQ(send.peer, 1u);
  EXPECT_EQ(send.chunk, 0u);
  EXPECT_EQ(send.src, (BufRef{BufRef::Buffer::kData, 0}));
  EXPECT_EQ(recv.kind, OpKind::kRecv);
  EXPECT_EQ(recv.dst, (BufRef{BufRef::Buffer::kData, 0}));
  EXPECT_DOUBLE_EQ(recv.end_s, s->predicted_s);
  EXPECT_EQ(s->ranks, (std::vector<std::string>{"r0", "r1"}));
  EXPECT_EQ(s->topology_digest, TopologyDigest(t));
  EXPECT_EQ(s->slot_bytes, kMiB);
  EXPECT_EQ(s->intent, "one");
  // Re-priced on the same topology: the same number, bit for bit.
  EXPECT_EQ(*PredictTime(*s, t, kMiB, 1e-4), s->predicted_s);
}

TEST(Compiler, PipelinedChainApproachesTheBandwidthBound) {
  // One chunk from rank 0 to rank 3 over a line: no direct link, three store-and-forward hops.
  const double bw = 1 * kGbit, lat = 0.001;
  Topology t = Line(4, bw, lat);
  Intent in{"far", {Kind::kBroadcast, 4, 1, 0}, {Copy(0, 0, 3)}};
  const double bytes = 64.0 * kMiB;
  for (uint32_t p : {1u, 4u, 16u}) {
    absl::StatusOr<Schedule> s = Compile(in, t, Pieces(p, 64 * kMiB));
    ASSERT_TRUE(s.ok()) << s.status();
    // (hops + pieces - 1) piece transfers back to back, plus the latency of every hop.
    EXPECT_NEAR(s->predicted_s, (3.0 + p - 1) * bytes / p / bw + 3 * lat, 1e-9) << p;
    EXPECT_EQ(s->per_rank[1].scratch_slots, 1u);  // relayed through scratch, reused per piece
  }
  absl::StatusOr<Schedule> best = Compile(in, t, Pieces(0, 64 * kMiB));
  ASSERT_TRUE(best.ok());
  EXPECT_LT(best->predicted_s, 1.1 * (bytes / bw + 3 * lat));
  EXPECT_GT(best->pieces, 16u);
}

TEST(Compiler, IntentChainPipelinesAcrossMoves) {
  // Copies 0→1→2→3 of one slot, in program order: piece p of a hop waits only for piece p of
  // the hop before.
  const double bw = 1 * kGbit;
  Topology t = Mesh(4, bw, 0);
  Intent in{"chain", {Kind::kBroadcast, 4, 1, 0}, {Copy(0, 0, 1), Copy(0, 1, 2), Copy(0, 2, 3)}};
  CompileOptions o = Pieces(8);
  o.multi_hop = false;
  absl::StatusOr<Schedule> s = Compile(in, t, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NEAR(s->predicted_s, (3.0 + 8 - 1) * kMiB / 8 / bw, 1e-12);
  EXPECT_TRUE(CheckSchedule(*s).ok()) << CheckSchedule(*s);
  // Every send of rank 1 depends on the receive of the same piece.
  for (const Op& op : s->per_rank[1].ops) {
    if (op.kind != OpKind::kSend) continue;
    ASSERT_EQ(op.deps.size(), 1u);
    const Op& dep = s->per_rank[1].ops[op.deps[0]];
    EXPECT_EQ(dep.kind, OpKind::kRecv);
    EXPECT_EQ(dep.piece, op.piece);
  }
}

TEST(Compiler, RelayBeatsAFourTimesSlowerDirectLink) {
  const double bw = 1 * kGbit;
  Topology t = Mesh(3, bw, 0.0001);
  testing::SetLink(t, 0, 2, bw / 4);
  Intent in{"slow", {Kind::kBroadcast, 3, 1, 0}, {Copy(0, 0, 2)}};
  CompileOptions direct = Pieces(16, 16 * kMiB);
  direct.multi_hop = false;
  absl::StatusOr<Schedule> d = Compile(in, t, direct);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NEAR(d->predicted_s, 4 * 16.0 * kMiB / bw + 0.0001, 1e-9);
  absl::StatusOr<Schedule> m = Compile(in, t, Pieces(16, 16 * kMiB));
  ASSERT_TRUE(m.ok()) << m.status();
  // Most pieces go over rank 1 (two fast hops), some over the slow link at the same time.
  EXPECT_LT(m->predicted_s, 0.9 * 16.0 * kMiB / bw + 0.001);
  EXPECT_GT(m->per_rank[1].ops.size(), 0u);
  EXPECT_GT(m->per_rank[1].scratch_slots, 0u);
  // (Rank 1 is promised the chunk too, so the full check does not apply to this lone move.)
  EXPECT_EQ(*PredictTime(*m, t, 0), m->predicted_s);
  for (const Op& op : m->per_rank[1].ops) {
    EXPECT_EQ(op.chunk, 0u);
    EXPECT_NE(op.kind == OpKind::kRecv ? op.dst.buffer : op.src.buffer, BufRef::Buffer::kData);
  }
}

TEST(Compiler, SourceSubstitutionSendsFromAHolder) {
  // All-gather over a triangle whose 0-2 link is 4x slower: rank 2 gets rank 0's chunk from
  // rank 1, which already holds it, rather than relaying it through rank 1's scratch.
  const double bw = 1 * kGbit;
  Topology t = Mesh(3, bw, 0);
  testing::SetLink(t, 0, 2, bw / 4);
  absl::StatusOr<Schedule> s = Compile(testing::DirectAllGather(3), t, Pieces(8, 8 * kMiB));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(CheckSchedule(*s).ok()) << CheckSchedule(*s);
  bool from_data = false;
  for (const Op& op : s->per_rank[1].ops) {
    if (op.kind == OpKind::kSend && op.peer == 2 && op.chunk == 0 &&
        op.src.buffer == BufRef::Buffer::kData) {
      from_data = true;
    }
  }
  EXPECT_TRUE(from_data);
  CompileOptions plain = Pieces(8, 8 * kMiB);
  plain.multi_hop = false;
  EXPECT_LT(s->predicted_s, 0.6 * Compile(testing::DirectAllGather(3), t, plain)->predicted_s);
}

TEST(Compiler, DepsEncodeReadAfterWriteAndWriteAfterRead) {
  // Rank 1 reduces slot 0 into rank 2 after receiving it from rank 0; then rank 2 overwrites
  // rank 1's slot 0: that receive must wait for rank 1's send.
  Topology t = Mesh(3, kGbit, 0);
  Intent in{"war",
            {Kind::kAllReduce, 3, 1},
            {Reduce(0, 0, 1), Reduce(0, 1, 2), Copy(0, 2, 1), Copy(0, 2, 0)}};
  CompileOptions o = Pieces(2);
  o.multi_hop = false;
  absl::StatusOr<Schedule> s = Compile(in, t, o);
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& ops = s->per_rank[1].ops;
  for (uint32_t p = 0; p < 2; ++p) {
    int recv_reduce = -1, send = -1, recv = -1;
    for (uint32_t i = 0; i < ops.size(); ++i) {
      if (ops[i].piece != p) continue;
      if (ops[i].kind == OpKind::kRecvReduce) recv_reduce = i;
      if (ops[i].kind == OpKind::kSend) send = i;
      if (ops[i].kind == OpKind::kRecv) recv = i;
    }
    ASSERT_GE(recv_reduce, 0);
    ASSERT_GE(send, 0);
    ASSERT_GE(recv, 0);
    EXPECT_THAT(ops[send].deps, ::testing::Contains(recv_reduce));              // RAW
    EXPECT_THAT(ops[recv].deps, ::testing::IsSupersetOf({recv_reduce, send}));  // WAW, WAR
  }
}

TEST(Compiler, ClassicAlgorithmsAreConsistentOnManySizes) {
  for (uint32_t n : {2u, 3u, 4u, 5u, 8u, 13u, 16u}) {
    Topology t = Mesh(n, kGbit, 0.001);
    if (n > 2) testing::SetLink(t, 0, n - 1, kGbit / 4);
    std::vector<Intent> intents = {testing::RingAllGather(n), testing::DirectAllGather(n),
                                   testing::RingAllReduce(n), testing::DirectAllReduce(n)};
    if ((n & (n - 1)) == 0) intents.push_back(testing::HalvingDoublingAllReduce(n));
    for (const Intent& in : intents) {
      for (bool multi_hop : {false, true}) {
        for (uint32_t pieces : {1u, 3u, 0u}) {
          CompileOptions o = Pieces(pieces);
          o.multi_hop = multi_hop;
          o.max_pieces = 8;
          absl::StatusOr<Schedule> s = Compile(in, t, o);
          ASSERT_TRUE(s.ok()) << s.status();
          const std::string what =
              absl::StrCat(in.name, " ", KindName(in.collective.kind), " n=", n,
                           " multi_hop=", multi_hop, " pieces=", pieces);
          EXPECT_TRUE(CheckSchedule(*s).ok()) << what << ": " << CheckSchedule(*s);
          EXPECT_TRUE(VerifySchedule(*s).ok()) << what << ": " << VerifySchedule(*s);
          EXPECT_EQ(*PredictTime(*s, t, kMiB), s->predicted_s) << what;
          EXPECT_GT(s->predicted_s, 0) << what;
        }
      }
    }
  }
}

TEST(Compiler, Deterministic) {
  Topology t = Mesh(8, kGbit, 0.01);
  testing::SetLink(t, 1, 6, kGbit / 4);
  testing::SetLink(t, 2, 3, kGbit / 2);
  for (const Intent& in : {testing::RingAllReduce(8), testing::DirectAllGather(8)}) {
    absl::StatusOr<Schedule> a = Compile(in, t, CompileOptions{});
    absl::StatusOr<Schedule> b = Compile(in, t, CompileOptions{});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(*a == *b);
  }
}

TEST(Compiler, RepricesOnSlowerLinks) {
  Topology t = Mesh(4, kGbit, 0.01);
  absl::StatusOr<Schedule> s = Compile(testing::RingAllReduce(4), t, Pieces(4));
  ASSERT_TRUE(s.ok());
  Topology slow = t;
  testing::SetLink(slow, 0, 1, kGbit / 10);
  absl::StatusOr<double> p = PredictTime(*s, slow, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_GT(*p, s->predicted_s);
  // Twice the bytes: more time.
  EXPECT_GT(*PredictTime(*s, t, 2 * kMiB), s->predicted_s);
  Schedule retimed = *s;
  ASSERT_TRUE(RetimeSchedule(&retimed, slow, 0).ok());
  EXPECT_EQ(retimed.predicted_s, *p);
  EXPECT_FALSE(PredictTime(*s, Mesh(5, kGbit, 0), 0).ok());
}

TEST(Compiler, PredictTimeRejectsBrokenSchedules) {
  Topology t = Mesh(2, kGbit, 0);
  Schedule s = *Compile(Intent{"one", {Kind::kAllGather, 2, 1}, {Copy(0, 0, 1)}}, t, Pieces(1));
  Schedule unmatched = s;
  unmatched.per_rank[1].ops.clear();
  EXPECT_THAT(PredictTime(unmatched, t, 0).status().message(), HasSubstr("which receives 0"));
  Schedule forward = s;
  forward.per_rank[0].ops[0].deps = {0};
  EXPECT_THAT(PredictTime(forward, t, 0).status().message(), HasSubstr("not earlier"));
  // Rank 1 waits for a receive that waits for rank 1's own send: a cycle across ranks.
  Schedule cycle;
  cycle.collective = {Kind::kAllGather, 2, 1};
  cycle.slot_bytes = kMiB;
  cycle.per_rank.resize(2);
  Op r0{OpKind::kRecv, 1};
  Op s0{OpKind::kSend, 1};
  s0.deps = {0};
  cycle.per_rank[0].ops = {r0, s0};
  Op r1{OpKind::kRecv, 0};
  Op s1{OpKind::kSend, 0};
  s1.deps = {0};
  cycle.per_rank[1].ops = {r1, s1};
  EXPECT_THAT(PredictTime(cycle, t, 0).status().message(), HasSubstr("can never start"));
}

TEST(Compiler, RejectsBadInput) {
  Topology t = Mesh(3, kGbit, 0);
  auto err = [&](const Intent& in, const CompileOptions& o) {
    absl::StatusOr<Schedule> s = Compile(in, t, o);
    EXPECT_FALSE(s.ok());
    return std::string(s.status().message());
  };
  EXPECT_THAT(err(Intent{"x", {Kind::kAllGather, 3, 1}, {Copy(0, 1, 1)}}, {}),
              HasSubstr("to itself"));
  EXPECT_THAT(err(Intent{"x", {Kind::kAllGather, 3, 1}, {Copy(7, 0, 1)}}, {}),
              HasSubstr("outside the collective"));
  EXPECT_THAT(err(Intent{"x", {Kind::kAllGather, 3, 1}, {Copy(0, 0, 5)}}, {}),
              HasSubstr("outside the collective"));
  EXPECT_THAT(err(testing::RingAllGather(4), {}), HasSubstr("topology has 3"));
  EXPECT_THAT(err(testing::RingAllGather(3), Pieces(5000)), HasSubstr("pieces"));
  Intent big{"big", {Kind::kAllGather, 3, 1}, {}};
  big.moves.assign(4097, Copy(0, 0, 1));
  EXPECT_THAT(err(big, Pieces(1024)), HasSubstr("4097 moves × 1024 pieces"));
  CompileOptions zero;
  zero.slot_bytes = 0;
  EXPECT_THAT(err(testing::RingAllGather(3), zero), HasSubstr("slot_bytes"));
  CompileOptions nan;
  nan.per_op_overhead_s = std::nan("");
  EXPECT_THAT(err(testing::RingAllGather(3), nan), HasSubstr("per_op_overhead_s"));
  // No path without relaying: a line, and multi_hop off.
  CompileOptions no_relay;
  no_relay.multi_hop = false;
  absl::StatusOr<Schedule> s = Compile(Intent{"x", {Kind::kBroadcast, 3, 1, 0}, {Copy(0, 0, 2)}},
                                       Line(3, kGbit, 0), no_relay);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("no path from 'r0' to 'r2'"));
  // The threaded piece search reports the same error.
  no_relay.threads = 2;
  absl::StatusOr<Schedule> threaded = Compile(
      Intent{"x", {Kind::kBroadcast, 3, 1, 0}, {Copy(0, 0, 2)}}, Line(3, kGbit, 0), no_relay);
  EXPECT_EQ(threaded.status(), s.status());
  CompileOptions threads;
  threads.threads = kMaxCompileThreads + 1;
  EXPECT_THAT(err(testing::RingAllGather(3), threads), HasSubstr("threads 257 is more than 256"));
}

TEST(Compiler, EmptyIntentIsAnEmptySchedule) {
  absl::StatusOr<Schedule> s = Compile(Intent{"none", {Kind::kAllGather, 1, 1}, {}},
                                       Topology{{"solo"}, 1, {}}, CompileOptions{});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->predicted_s, 0);
  EXPECT_TRUE(s->per_rank[0].ops.empty());
}

TEST(Compiler, FabricTopologyRoutesThroughSwitches) {
  absl::StatusOr<nuwa::Fabric> f =
      nuwa::LoadFabricFile(std::string(HEDDLE_FABRICS_DIR) + "/fat-tree-k4.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<Topology> t = TopologyFromFabric(*f, 1e9, 1e-6);
  ASSERT_TRUE(t.ok()) << t.status();
  for (const Intent& in : {testing::RingAllReduce(16), testing::DirectAllGather(16)}) {
    for (bool multi_hop : {false, true}) {
      CompileOptions o = Pieces(2);
      o.multi_hop = multi_hop;
      absl::StatusOr<Schedule> s = Compile(in, *t, o);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_TRUE(CheckSchedule(*s).ok()) << CheckSchedule(*s);
      EXPECT_TRUE(VerifySchedule(*s).ok()) << VerifySchedule(*s);
      EXPECT_EQ(*PredictTime(*s, *t, 0), s->predicted_s);
      // A host's uplink carries one piece at a time: a ring step takes at least a piece time.
      EXPECT_GE(s->predicted_s, kMiB / 2 / (100e9 / 8));
    }
  }
}

TEST(Compiler, PiecesSearchKeepsTheBest) {
  Topology t = Mesh(4, kGbit, 0.0005);
  CompileOptions o;
  o.per_op_overhead_s = 1e-4;
  absl::StatusOr<Schedule> best = Compile(testing::RingAllReduce(4), t, o);
  ASSERT_TRUE(best.ok());
  for (uint32_t p = 1; p <= 64; p *= 2) {
    absl::StatusOr<Schedule> s = Compile(testing::RingAllReduce(4), t, Pieces(p));
    CompileOptions op = Pieces(p);
    op.per_op_overhead_s = 1e-4;
    EXPECT_LE(best->predicted_s, Compile(testing::RingAllReduce(4), t, op)->predicted_s) << p;
  }
  EXPECT_GT(best->pieces, 1u);
  EXPECT_LT(best->pieces, 64u);
}

// The piece search rules candidates out by lower bounds and abandons them early; scheduling every
// candidate to completion must choose the same: on random topologies (uneven bandwidths and
// latencies, missing links, a switch), builtins and random move lists, both give equal schedules.
TEST(Compiler, PrunedPieceSearchEqualsTheExhaustiveOne) {
  std::mt19937_64 rng(20261203);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto below = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  const std::vector<std::string> names = BuiltinNames();
  int compiled = 0;
  int pruned_away = 0;  // candidates the pruned search ruled out or abandoned
  for (int trial = 0; trial < 120; ++trial) {
    const uint32_t n = 2 + static_cast<uint32_t>(below(11));
    Topology t;
    t.ranks = n;
    for (uint32_t i = 0; i < n; ++i) t.nodes.push_back(absl::StrCat("r", i));
    if (trial % 5 == 4) {
      // Every rank behind one switch, each uplink its own speed.
      t.nodes.push_back("sw");
      for (uint32_t i = 0; i < n; ++i) {
        const double bw = kGbit * uniform(0.25, 4);
        t.links.push_back(Link{i, n, bw, uniform(0, 0.002)});
        t.links.push_back(Link{n, i, bw, uniform(0, 0.002)});
      }
    } else {
      // A mesh with uneven links; some pairs (never a ring link) have none.
      for (uint32_t a = 0; a < n; ++a) {
        for (uint32_t b = 0; b < n; ++b) {
          if (a == b) continue;
          const bool ring = b == (a + 1) % n || a == (b + 1) % n;
          if (!ring && below(4) == 0) continue;
          t.links.push_back(Link{a, b, kGbit * uniform(0.25, 4), uniform(0, 0.005)});
        }
      }
    }
    CompileOptions o;
    o.per_op_overhead_s = std::vector<double>{0, 1e-6, 1e-4}[below(3)];
    o.slot_bytes = std::vector<uint64_t>{kMiB, 64 * kMiB, 1000}[below(3)];
    o.max_pieces = std::vector<uint32_t>{64, 16, 1024}[below(3)];
    o.multi_hop = below(4) != 0;
    Intent in;
    if (trial % 3 == 2) {
      // Random moves: copies and reduces between random ranks, K = 1 or 2.
      const uint32_t k = 1 + static_cast<uint32_t>(below(2));
      in = Intent{"random", {Kind::kAllGather, n, k}, {}};
      const uint64_t moves = 1 + below(6 * n);
      for (uint64_t i = 0; i < moves; ++i) {
        const uint32_t src = static_cast<uint32_t>(below(n));
        const uint32_t dst = static_cast<uint32_t>((src + 1 + below(n - 1)) % n);
        const uint64_t slot = below(SlotCount(in.collective));
        in.moves.push_back(below(3) == 0 ? Reduce(slot, src, dst) : Copy(slot, src, dst));
      }
    } else {
      const std::string& name = names[below(names.size())];
      const std::vector<Kind> kinds = BuiltinKinds(name);
      const Kind kind = kinds[below(kinds.size())];
      ExpandOptions e{.ranks = n};
      e.chunks_per_rank = 1 + static_cast<uint32_t>(below(2));
      if (kind == Kind::kBroadcast || kind == Kind::kReduce) {
        e.params["root"] = static_cast<int64_t>(below(n));
      }
      if (name == "hierarchical") {
        std::vector<int64_t> divisors;
        for (uint32_t g = 1; g <= n; ++g) {
          if (n % g == 0) divisors.push_back(g);
        }
        e.params["G"] = divisors[below(divisors.size())];
      }
      absl::StatusOr<Intent> parsed = ParseIntent(*BuiltinIntentText(name, kind), e);
      ASSERT_TRUE(parsed.ok()) << name << " " << KindName(kind) << ": " << parsed.status();
      in = *std::move(parsed);
    }
    const std::string what =
        absl::StrCat("trial ", trial, ": ", in.name, " ", KindName(in.collective.kind), " n=", n);
    CompileDebug debug;
    o.debug = &debug;
    o.threads = 1;
    absl::StatusOr<Schedule> pruned = Compile(in, t, o);
    for (const PieceCandidate& c : debug.candidates) {
      pruned_away += c.outcome != PieceCandidate::Outcome::kScheduled;
    }
    CompileDebug all;
    o.debug = &all;
    o.exhaustive_piece_search = true;
    absl::StatusOr<Schedule> exhaustive = Compile(in, t, o);
    ASSERT_EQ(pruned.status(), exhaustive.status()) << what;
    if (!pruned.ok()) continue;  // e.g. no path without relaying
    ++compiled;
    EXPECT_EQ(pruned->pieces, exhaustive->pieces) << what;
    EXPECT_EQ(pruned->predicted_s, exhaustive->predicted_s) << what;
    EXPECT_TRUE(*pruned == *exhaustive) << what;
    ASSERT_EQ(all.candidates.size(), debug.candidates.size()) << what;
    // The same search on 2 and 3 threads (pruned, and exhaustive): the same schedule, and the
    // same candidates, each with the time to beat the serial search gave it; one scheduled to
    // completion has the exhaustive makespan, one given up could not have been kept.
    for (const uint32_t threads : {2u, 3u}) {
      for (const bool exhaustive_search : {false, true}) {
        const std::string how = absl::StrCat(what, ", threads ", threads,
                                             exhaustive_search ? ", exhaustive" : ", pruned");
        CompileDebug td;
        o.debug = &td;
        o.threads = threads;
        o.exhaustive_piece_search = exhaustive_search;
        absl::StatusOr<Schedule> threaded = Compile(in, t, o);
        ASSERT_TRUE(threaded.ok()) << how << ": " << threaded.status();
        EXPECT_TRUE(*threaded == *exhaustive) << how;
        ASSERT_EQ(td.candidates.size(), debug.candidates.size()) << how;
        for (size_t i = 0; i < td.candidates.size(); ++i) {
          const PieceCandidate& c = td.candidates[i];
          EXPECT_EQ(c.pieces, debug.candidates[i].pieces) << how;
          EXPECT_EQ(c.must_beat, debug.candidates[i].must_beat) << how << " P=" << c.pieces;
          EXPECT_EQ(c.lower_bound, debug.candidates[i].lower_bound) << how << " P=" << c.pieces;
          if (c.outcome == PieceCandidate::Outcome::kScheduled) {
            EXPECT_EQ(c.makespan, all.candidates[i].makespan) << how << " P=" << c.pieces;
          } else {
            EXPECT_FALSE(exhaustive_search) << how << " P=" << c.pieces;
            EXPECT_GE(all.candidates[i].makespan, c.must_beat) << how << " P=" << c.pieces;
          }
        }
      }
    }
    o.debug = nullptr;
    o.threads = 1;
    o.exhaustive_piece_search = false;
    // Compile() computes every op's times as it emits them, without replaying the schedule:
    // they must be the replay's, so retiming on the same topology changes nothing.
    Schedule retimed = *pruned;
    ASSERT_TRUE(RetimeSchedule(&retimed, t, 0, o.per_op_overhead_s).ok()) << what;
    EXPECT_TRUE(retimed == *pruned) << what;
  }
  EXPECT_GT(compiled, 100);
  EXPECT_GT(pruned_away, 20);
}

// Ranks 0..3, switches s1 and s2. Rank 0 reaches only rank 1, so 0 → 2 has neither a switch path
// nor a relay over one rank and takes the shortest path over any nodes (0 → 1 → s? → 2). Rank 1
// reaches 2 over s1 or s2 at the same cost in real numbers (0.2 + 0.7 s and 0.7 + 0.2 s of
// latency); the shortest-path search from 1 and the one from 0 (0.3 s further out) round the
// two sums differently and break the tie to different switches. Rank 3 reaches 2 only over s1,
// so which switch 1 → 2 takes changes what waits on s1 → 2.
Topology TwoEqualSwitchPaths() {
  Topology t;
  t.ranks = 4;
  t.nodes = {"r0", "r1", "r2", "r3", "s1", "s2"};
  auto both = [&](uint32_t a, uint32_t b, double lat) {
    t.links.push_back(Link{a, b, kGbit, lat});
    t.links.push_back(Link{b, a, kGbit, lat});
  };
  both(0, 1, 0.3);
  both(1, 4, 0.2);
  both(4, 2, 0.7);
  both(1, 5, 0.7);
  both(5, 2, 0.2);
  both(3, 4, 0.01);
  return t;
}

// The routes of a pair are the same whichever pair's routes are built first: the piece search
// with lower bounds (routes built by LowerBound() first), the exhaustive one, and a run that
// builds every route last move first all give the same schedule, and the one the replay prices.
TEST(Compiler, RoutesDoNotDependOnTheOrderTheyAreBuiltIn) {
  const Topology t = TwoEqualSwitchPaths();
  const Intent in{"equal-paths",
                  {Kind::kAllGather, 4, 1},
                  {Copy(1, 1, 2), Copy(0, 0, 2), Copy(3, 3, 2), Copy(0, 0, 1), Copy(1, 1, 0)}};
  for (const uint32_t pieces : {0u, 1u, 2u, 4u, 8u}) {
    CompileOptions o = Pieces(pieces);
    absl::StatusOr<Schedule> pruned = Compile(in, t, o);
    ASSERT_TRUE(pruned.ok()) << pruned.status();
    o.exhaustive_piece_search = true;
    absl::StatusOr<Schedule> exhaustive = Compile(in, t, o);
    ASSERT_TRUE(exhaustive.ok()) << exhaustive.status();
    CompileDebug debug{.reverse_route_order = true};
    o.debug = &debug;
    absl::StatusOr<Schedule> reversed = Compile(in, t, o);
    ASSERT_TRUE(reversed.ok()) << reversed.status();
    o.exhaustive_piece_search = false;
    absl::StatusOr<Schedule> reversed_pruned = Compile(in, t, o);
    ASSERT_TRUE(reversed_pruned.ok()) << reversed_pruned.status();
    EXPECT_TRUE(*pruned == *exhaustive) << pieces;
    EXPECT_TRUE(*pruned == *reversed) << pieces;
    EXPECT_TRUE(*pruned == *reversed_pruned) << pieces;
    EXPECT_EQ(pruned->predicted_s, reversed->predicted_s) << pieces;
    // 0's slot reaches 2 through 1.
    bool relayed = false;
    for (const Op& op : pruned->per_rank[1].ops) {
      relayed |= op.kind == OpKind::kSend && op.peer == 2 && op.chunk == 0;
    }
    EXPECT_TRUE(relayed) << pieces;
    absl::StatusOr<double> replay = PredictTime(*pruned, t, 0);
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_EQ(*replay, pruned->predicted_s) << pieces;
  }
}

// The lower bound of every piece count is a bound: in an exhaustive search (every candidate
// scheduled to completion) no candidate's makespan is below it. And the pruned search does rule
// some candidates out or abandon them (otherwise the equivalence test above proves nothing).
TEST(Compiler, PieceSearchLowerBoundsHoldAndPrune) {
  std::mt19937_64 rng(20261204);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto below = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  const std::vector<std::string> names = BuiltinNames();
  int scheduled = 0, ruled_out = 0, abandoned = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const uint32_t n = 2 + static_cast<uint32_t>(below(11));
    Topology t;
    t.ranks = n;
    for (uint32_t i = 0; i < n; ++i) t.nodes.push_back(absl::StrCat("r", i));
    for (uint32_t a = 0; a < n; ++a) {
      for (uint32_t b = 0; b < n; ++b) {
        if (a == b) continue;
        const bool ring = b == (a + 1) % n || a == (b + 1) % n;
        if (!ring && below(4) == 0) continue;
        t.links.push_back(Link{a, b, kGbit * uniform(0.25, 4), uniform(0, 0.005)});
      }
    }
    const std::string& name = names[below(names.size())];
    const std::vector<Kind> kinds = BuiltinKinds(name);
    const Kind kind = kinds[below(kinds.size())];
    ExpandOptions e{.ranks = n};
    if (kind == Kind::kBroadcast || kind == Kind::kReduce) {
      e.params["root"] = static_cast<int64_t>(below(n));
    }
    if (name == "hierarchical") e.params["G"] = int64_t{1};
    absl::StatusOr<Intent> in = ParseIntent(*BuiltinIntentText(name, kind), e);
    ASSERT_TRUE(in.ok()) << name << ": " << in.status();
    const std::string what = absl::StrCat("trial ", trial, ": ", name, " n=", n);
    CompileOptions o;
    o.per_op_overhead_s = std::vector<double>{0, 1e-6, 1e-4}[below(3)];
    o.slot_bytes = std::vector<uint64_t>{kMiB, 64 * kMiB}[below(2)];
    o.threads = 1;  // the serial search (the counts below are its own)
    CompileDebug debug;
    o.debug = &debug;
    o.exhaustive_piece_search = true;
    absl::StatusOr<Schedule> exhaustive = Compile(*in, t, o);
    ASSERT_TRUE(exhaustive.ok()) << what << ": " << exhaustive.status();
    ASSERT_FALSE(debug.candidates.empty()) << what;
    for (const PieceCandidate& c : debug.candidates) {
      ASSERT_EQ(c.outcome, PieceCandidate::Outcome::kScheduled) << what << " P=" << c.pieces;
      EXPECT_GT(c.lower_bound, 0) << what << " P=" << c.pieces;
      EXPECT_LE(c.lower_bound, c.makespan * (1 + 1e-9)) << what << " P=" << c.pieces;
    }
    const std::vector<PieceCandidate> all = debug.candidates;
    o.exhaustive_piece_search = false;
    absl::StatusOr<Schedule> pruned = Compile(*in, t, o);
    ASSERT_TRUE(pruned.ok()) << what << ": " << pruned.status();
    EXPECT_TRUE(*pruned == *exhaustive) << what;
    // The same piece counts are tried, with the same bounds; one scheduled to completion ends
    // at the exhaustive run's makespan.
    ASSERT_EQ(debug.candidates.size(), all.size()) << what;
    for (size_t i = 0; i < all.size(); ++i) {
      const PieceCandidate& c = debug.candidates[i];
      EXPECT_EQ(c.pieces, all[i].pieces) << what;
      EXPECT_EQ(c.lower_bound, all[i].lower_bound) << what << " P=" << c.pieces;
      switch (c.outcome) {
        case PieceCandidate::Outcome::kScheduled:
          ++scheduled;
          EXPECT_EQ(c.makespan, all[i].makespan) << what << " P=" << c.pieces;
          break;
        case PieceCandidate::Outcome::kRuledOut:
          ++ruled_out;
          EXPECT_GE(c.lower_bound, c.must_beat) << what << " P=" << c.pieces;
          EXPECT_GE(all[i].makespan, c.must_beat) << what << " P=" << c.pieces;
          break;
        case PieceCandidate::Outcome::kAbandoned:
          ++abandoned;
          EXPECT_GE(all[i].makespan, c.must_beat) << what << " P=" << c.pieces;
          break;
      }
    }
  }
  std::printf("%d candidates scheduled, %d ruled out by their bound, %d abandoned\n", scheduled,
              ruled_out, abandoned);
  EXPECT_GT(scheduled, 0);
  EXPECT_GT(ruled_out, 0);
  EXPECT_GT(abandoned, 0);
}

// The losing piece counts of hierarchical all-reduce on a 64-rank mesh end within 2 % of the
// time they must beat; a committed piece's finish plus its move's tail reaches that time only
// after about 80 % of their pieces, while the links every option of a move crosses (their free
// time plus the pieces still to cross them) show it early. The search stops them before
// half-way.
TEST(Compiler, LinkCheckAbandonsLosingPieceCountsEarly) {
  ExpandOptions e{.ranks = 64};
  e.params["G"] = int64_t{8};
  absl::StatusOr<Intent> in = ParseIntent(*BuiltinIntentText("hierarchical", Kind::kAllReduce), e);
  ASSERT_TRUE(in.ok()) << in.status();
  const Topology t = Mesh(64, kGbit, 0.001);
  CompileOptions o;
  o.threads = 1;  // the serial search: how far each loser gets does not depend on timing
  CompileDebug debug;
  o.debug = &debug;
  absl::StatusOr<Schedule> s = Compile(*in, t, o);
  ASSERT_TRUE(s.ok()) << s.status();
  int abandoned = 0;
  for (const PieceCandidate& c : debug.candidates) {
    const uint64_t total = uint64_t{c.pieces} * in->moves.size();
    if (c.outcome == PieceCandidate::Outcome::kScheduled) {
      EXPECT_EQ(c.committed, total) << "P=" << c.pieces;
    }
    if (c.outcome != PieceCandidate::Outcome::kAbandoned) continue;
    ++abandoned;
    EXPECT_LT(c.committed, total / 2) << "P=" << c.pieces;
  }
  EXPECT_GE(abandoned, 2);
  // And what it abandons could not have won: the same schedule as the exhaustive search's.
  CompileOptions x;
  x.exhaustive_piece_search = true;
  absl::StatusOr<Schedule> exhaustive = Compile(*in, t, x);
  ASSERT_TRUE(exhaustive.ok()) << exhaustive.status();
  EXPECT_TRUE(*s == *exhaustive);
}

// Every builtin, for every kind it has a form for, on 2..16 and 64 ranks: the compiled schedule
// passes the verifier (flow-verify) and the replay reproduces its prediction.
TEST(Compiler, EveryBuiltinCompilesToAVerifiedSchedule) {
  std::vector<uint32_t> sizes;
  for (uint32_t n = 2; n <= 16; ++n) sizes.push_back(n);
  sizes.push_back(64);
  for (uint32_t n : sizes) {
    Topology t = Mesh(n, kGbit, 0.001);
    testing::SetLink(t, 0, n - 1, kGbit / 4);
    for (const std::string& name : BuiltinNames()) {
      for (Kind kind : BuiltinKinds(name)) {
        absl::StatusOr<std::string> text = BuiltinIntentText(name, kind);
        ASSERT_TRUE(text.ok()) << text.status();
        ExpandOptions e{.ranks = n};
        // Two chunks per rank on a few sizes.
        if (n == 4 || n == 6 || n == 9) e.chunks_per_rank = 2;
        if (kind == Kind::kBroadcast || kind == Kind::kReduce) e.params["root"] = n / 2;
        if (name == "hierarchical") e.params["G"] = n % 4 == 0 ? 4 : (n % 2 == 0 ? 2 : 1);
        absl::StatusOr<Intent> in = ParseIntent(*text, e);
        ASSERT_TRUE(in.ok()) << name << " " << KindName(kind) << " n=" << n << ": " << in.status();
        CompileOptions o = Pieces(n <= 16 ? 2 : 1);
        absl::StatusOr<Schedule> s = Compile(*in, t, o);
        const std::string what =
            absl::StrCat(name, " ", KindName(kind), " n=", n, " k=", e.chunks_per_rank);
        ASSERT_TRUE(s.ok()) << what << ": " << s.status();
        VerifyReport report;
        EXPECT_TRUE(VerifySchedule(*s, &report).ok())
            << what << ": " << VerifySchedule(*s) << " (" << report.problems.size() << " problems)";
        EXPECT_EQ(*PredictTime(*s, t, 0), s->predicted_s) << what;
      }
    }
  }
}

}  // namespace
}  // namespace heddle::collective
