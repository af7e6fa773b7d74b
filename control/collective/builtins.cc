#include "control/collective/builtins.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace heddle::collective {
namespace {

// Phases shared by several forms. Each is a fragment of DSL text; the texts a builtin returns
// are these glued under a header, so docs/optiflow-dsl.md can show each whole.

constexpr char kRingReduceScatter[] =
    R"(# Ring reduce-scatter: in step s rank r adds what it has of block r-s-1 into rank r+1;
# block b ends, summed over all ranks, on rank b.
for s in 0..N-1 {
  for r in 0..N {
    reduce chunks((r - s - 1) % N) from r into (r + 1) % N
  }
}
)";

constexpr char kRingAllGather[] =
    R"(# Ring all-gather: in step s rank r passes on block r-s (its own at s = 0) to rank r+1.
for s in 0..N-1 {
  for r in 0..N {
    copy chunks((r - s) % N) from r to (r + 1) % N
  }
}
)";

constexpr char kDirectReduceScatter[] =
    R"(# Every rank adds its part of block d straight into rank d.
for r in 0..N {
  for t in 1..N {
    reduce chunks((r + t) % N) from r into (r + t) % N
  }
}
)";

constexpr char kDirectAllGather[] = R"(# Every rank sends its block straight to every other rank.
for r in 0..N {
  for t in 1..N {
    copy chunks(r) from r to (r + t) % N
  }
}
)";

// Binomial trees rooted at rank 0: in round k (distance d = 2^k) rank x < d talks to x + d.
constexpr char kTreeReduceAllToZero[] = R"(# Binomial reduce to rank 0, the farthest subtrees first.
for k in clog2(N)-1..-1 step -1 {
  let d = pow2(k)
  for x in 0..min(d, N - d) {
    reduce all from x + d into x
  }
}
)";

constexpr char kTreeBroadcastFromZero[] =
    R"(# Binomial broadcast from rank 0: in round k rank x < 2^k sends to x + 2^k.
for k in 0..clog2(N) {
  let d = pow2(k)
  for x in 0..min(d, N - d) {
    copy all from x to x + d
  }
}
)";

constexpr char kTreeGatherToZero[] =
    R"(# Binomial gather to rank 0: in the round with distance d, rank x + d holds the
# blocks x + d + m·2d of its subtree and sends them up to x.
for k in clog2(N)-1..-1 step -1 {
  let d = pow2(k)
  for x in 0..min(d, N - d) {
    copy chunks(x + d..N step 2 * d) from x + d to x
  }
}
)";

constexpr char kTreeScatterFromZero[] =
    R"(# Binomial scatter from rank 0: in the round with distance d, rank x sends x + d the
# blocks of x + d's subtree, x + d + m·2d.
for k in 0..clog2(N) {
  let d = pow2(k)
  for x in 0..min(d, N - d) {
    copy chunks(x + d..N step 2 * d) from x to x + d
  }
}
)";

constexpr char kHdPrologue[] =
    R"(# P: the largest power of two ≤ N. The E = N - P ranks beyond it are folded into ranks
# 0..E-1 (rank i stands in for rank P + i); block P + i travels with block i.
let P = pow2(log2(N))
let E = N - P
)";

constexpr char kHdHalving[] =
    R"(# Recursive halving among ranks 0..P-1: in the round with distance d, rank r hands its
# partner p = r ^ d the partial sums of p's half, blocks [p/d·d, p/d·d + d) and their
# folded companions P + those.
for k in log2(P)-1..-1 step -1 {
  let d = pow2(k)
  for r in 0..P {
    let p = r ^ d
    let lo = p / d * d
    reduce chunks(lo..lo + d) from r into p
    reduce chunks(lo + P..min(lo + d + P, N)) from r into p
  }
}
)";

constexpr char kHdDoubling[] =
    R"(# Recursive doubling among ranks 0..P-1: in the round with distance d, rank r sends its
# partner r ^ d the blocks it has gathered so far, [r/d·d, r/d·d + d) and companions.
for k in 0..log2(P) {
  let d = pow2(k)
  for r in 0..P {
    let lo = r / d * d
    copy chunks(lo..lo + d) from r to r ^ d
    copy chunks(lo + P..min(lo + d + P, N)) from r to r ^ d
  }
}
)";

constexpr char kHierPrologue[] = R"(param G = 4
require G >= 1 && N % G == 0 "the group size G must divide the rank count N"
# Rank v is member v % G of group v / G; there are M groups. Member l of every group looks
# after the blocks of class l, b % G == l: chunks(l..N step G).
let M = N / G
)";

constexpr char kHierIntraReduceScatter[] =
    R"(# 1. Within each group, a ring reduce-scatter of the classes.
for g in 0..M {
  for s in 0..G-1 {
    for l in 0..G {
      reduce chunks((l - s - 1) % G..N step G) from g * G + l into g * G + (l + 1) % G
    }
  }
}
)";

constexpr char kHierInterReduceScatter[] =
    R"(# 2. Among the members l of all groups, a ring reduce-scatter of class l (block m·G + l):
# block g·G + l ends summed over all ranks on rank g·G + l.
for l in 0..G {
  for s in 0..M-1 {
    for g in 0..M {
      reduce chunks(((g - s - 1) % M) * G + l) from g * G + l into ((g + 1) % M) * G + l
    }
  }
}
)";

constexpr char kHierInterAllGather[] =
    R"(# Among the members l of all groups, a ring all-gather of class l.
for l in 0..G {
  for s in 0..M-1 {
    for g in 0..M {
      copy chunks(((g - s) % M) * G + l) from g * G + l to ((g + 1) % M) * G + l
    }
  }
}
)";

constexpr char kHierIntraAllGather[] = R"(# Within each group, a ring all-gather of the classes.
for g in 0..M {
  for s in 0..G-1 {
    for l in 0..G {
      copy chunks((l - s) % G..N step G) from g * G + l to g * G + (l + 1) % G
    }
  }
}
)";

std::string Header(std::string_view name, std::string_view kind) {
  return absl::StrCat("intent ", std::string(name), "\ncollective ", std::string(kind), "\n");
}

absl::StatusOr<std::string> Ring(Kind kind) {
  const std::string h = Header("ring", KindName(kind));
  switch (kind) {
    case Kind::kAllGather:
      return absl::StrCat(h, kRingAllGather);
    case Kind::kReduceScatter:
      return absl::StrCat(h, kRingReduceScatter);
    case Kind::kAllReduce:
      return absl::StrCat(h, kRingReduceScatter, kRingAllGather);
    case Kind::kBroadcast:
      return absl::StrCat(h,
                          R"(# A chain from the root: rank root+i passes everything on to root+i+1.
for i in 0..N-1 {
  copy all from (root + i) % N to (root + i + 1) % N
}
)");
    case Kind::kReduce:
      return absl::StrCat(
          h,
          R"(# A chain into the root: rank root+i adds what it has into root+i-1, the farthest first.
for i in N-1..0 step -1 {
  reduce all from (root + i) % N into (root + i - 1) % N
}
)");
    case Kind::kAllToAll:
      break;
  }
  return absl::NotFoundError(absl::StrCat("builtin ring has no form for ", KindName(kind)));
}

absl::StatusOr<std::string> Direct(Kind kind) {
  const std::string h = Header("direct", KindName(kind));
  switch (kind) {
    case Kind::kAllGather:
      return absl::StrCat(h, kDirectAllGather);
    case Kind::kReduceScatter:
      return absl::StrCat(h, kDirectReduceScatter);
    case Kind::kAllReduce:
      return absl::StrCat(h, kDirectReduceScatter, kDirectAllGather);
    case Kind::kBroadcast:
      return absl::StrCat(h, R"(# The root sends everything straight to every other rank.
for t in 1..N {
  copy all from root to (root + t) % N
}
)");
    case Kind::kReduce:
      return absl::StrCat(h, R"(# Every other rank adds its data straight into the root.
for t in 1..N {
  reduce all from (root + t) % N into root
}
)");
    case Kind::kAllToAll:
      return absl::StrCat(h, R"(# Every rank sends each other rank its chunks straight.
for s in 0..N {
  for t in 1..N {
    copy chunks(s, (s + t) % N) from s to (s + t) % N
  }
}
)");
  }
  return absl::NotFoundError(absl::StrCat("builtin direct has no form for ", KindName(kind)));
}

absl::StatusOr<std::string> Tree(Kind kind) {
  const std::string h = Header("tree", KindName(kind));
  switch (kind) {
    case Kind::kAllGather:
      return absl::StrCat(h, kTreeGatherToZero, kTreeBroadcastFromZero);
    case Kind::kReduceScatter:
      return absl::StrCat(h, kTreeReduceAllToZero, kTreeScatterFromZero);
    case Kind::kAllReduce:
      return absl::StrCat(h, kTreeReduceAllToZero, kTreeBroadcastFromZero);
    case Kind::kBroadcast:
      return absl::StrCat(
          h, R"(# Binomial broadcast over ranks relative to the root (x is rank (x + root) % N): in
# round k every x < 2^k sends everything to x + 2^k.
for k in 0..clog2(N) {
  let d = pow2(k)
  for x in 0..min(d, N - d) {
    copy all from (x + root) % N to (x + d + root) % N
  }
}
)");
    case Kind::kReduce:
      return absl::StrCat(
          h, R"(# Binomial reduce over ranks relative to the root, the farthest subtrees first.
for k in clog2(N)-1..-1 step -1 {
  let d = pow2(k)
  for x in 0..min(d, N - d) {
    reduce all from (x + d + root) % N into (x + root) % N
  }
}
)");
    case Kind::kAllToAll:
      break;
  }
  return absl::NotFoundError(absl::StrCat("builtin tree has no form for ", KindName(kind)));
}

absl::StatusOr<std::string> HalvingDoubling(Kind kind) {
  const std::string h = Header("halving-doubling", KindName(kind));
  switch (kind) {
    case Kind::kAllGather:
      return absl::StrCat(h, kHdPrologue, R"(for i in 0..E {
  copy chunks(P + i) from P + i to i
}
)",
                          kHdDoubling, R"(for i in 0..E {
  copy chunks(0..P + i) from i to P + i
  copy chunks(P + i + 1..N) from i to P + i
}
)");
    case Kind::kReduceScatter:
      return absl::StrCat(h, kHdPrologue, R"(for i in 0..E {
  reduce all from P + i into i
}
)",
                          kHdHalving, R"(for i in 0..E {
  copy chunks(P + i) from i to P + i
}
)");
    case Kind::kAllReduce:
      return absl::StrCat(h, kHdPrologue, R"(for i in 0..E {
  reduce all from P + i into i
}
)",
                          kHdHalving, kHdDoubling, R"(for i in 0..E {
  copy all from i to P + i
}
)");
    case Kind::kBroadcast:
    case Kind::kReduce:
    case Kind::kAllToAll:
      break;
  }
  return absl::NotFoundError(
      absl::StrCat("builtin halving-doubling has no form for ", KindName(kind)));
}

absl::StatusOr<std::string> Hierarchical(Kind kind) {
  const std::string h = Header("hierarchical", KindName(kind));
  switch (kind) {
    case Kind::kAllGather:
      return absl::StrCat(h, kHierPrologue, "# 1. ", kHierInterAllGather + 2, "# 2. ",
                          kHierIntraAllGather + 2);
    case Kind::kReduceScatter:
      return absl::StrCat(h, kHierPrologue, kHierIntraReduceScatter, kHierInterReduceScatter);
    case Kind::kAllReduce:
      return absl::StrCat(h, kHierPrologue, kHierIntraReduceScatter, kHierInterReduceScatter,
                          "# 3. ", kHierInterAllGather + 2, "# 4. ", kHierIntraAllGather + 2);
    case Kind::kBroadcast:
      return absl::StrCat(h, kHierPrologue, R"(let rg = root / G
let rl = root % G
# 1. The root sends to its peers, member rl of every other group.
for t in 1..M {
  copy all from root to ((rg + t) % M) * G + rl
}
# 2. Each of them sends to the rest of its group.
for g in 0..M {
  for t in 1..G {
    copy all from g * G + rl to g * G + (rl + t) % G
  }
}
)");
    case Kind::kReduce:
      return absl::StrCat(h, kHierPrologue, R"(let rg = root / G
let rl = root % G
# 1. Within each group, everyone adds into member rl.
for g in 0..M {
  for t in 1..G {
    reduce all from g * G + (rl + t) % G into g * G + rl
  }
}
# 2. Those add into the root.
for t in 1..M {
  reduce all from ((rg + t) % M) * G + rl into root
}
)");
    case Kind::kAllToAll:
      return absl::StrCat(
          h, kHierPrologue,
          R"(# 1. Within each group, rank g·G + l hands member l' everything it has for the ranks of
# class l' (every group's member l').
for g in 0..M {
  for l in 0..G {
    for t in 1..G {
      let lp = (l + t) % G
      copy chunks(g * G + l, lp..N step G) from g * G + l to g * G + lp
    }
  }
}
# 2. Among peers: member l of group g forwards to member l of group m what its whole group
# has for it.
for l in 0..G {
  for g in 0..M {
    for t in 1..M {
      let m = (g + t) % M
      copy chunks(g * G..g * G + G, m * G + l) from g * G + l to m * G + l
    }
  }
}
)");
  }
  return absl::NotFoundError(absl::StrCat("builtin hierarchical has no form for ", KindName(kind)));
}

}  // namespace

std::vector<std::string> BuiltinNames() {
  return {"ring", "direct", "tree", "halving-doubling", "hierarchical"};
}

absl::StatusOr<std::string> BuiltinIntentText(std::string_view name, Kind kind) {
  if (name == "ring") return Ring(kind);
  if (name == "direct") return Direct(kind);
  if (name == "tree") return Tree(kind);
  if (name == "halving-doubling") return HalvingDoubling(kind);
  if (name == "hierarchical") return Hierarchical(kind);
  return absl::NotFoundError(absl::StrCat("no builtin intent '", std::string(name),
                                          "'; there are ring, direct, tree, halving-doubling "
                                          "and hierarchical"));
}

std::vector<Kind> BuiltinKinds(std::string_view name) {
  std::vector<Kind> kinds;
  for (Kind k : {Kind::kAllGather, Kind::kReduceScatter, Kind::kAllReduce, Kind::kBroadcast,
                 Kind::kReduce, Kind::kAllToAll}) {
    if (BuiltinIntentText(name, k).ok()) kinds.push_back(k);
  }
  return kinds;
}

}  // namespace heddle::collective
