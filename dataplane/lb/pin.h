// File: dataplane/lb/pin.h
//
// PIN: pin short flows to one path, spray long ones with a fine-grained load balancer
// (docs/pin.md). One PinSelector per worker; the pipeline's "pin-select" stage calls it for every
// packet towards the uplink, and feeds it the acknowledgements and CNPs coming back:
//
//   PinSelector pin(config, table);                        // off the hot path
//   // host -> uplink:
//   PathChoice c = pin.Choose(desc, frame, len, now_ns);
//   if (c.path != nullptr) {
//     Rewrite(frame, len, desc, *c.path, config.entropy_field);   // rewrite.h
//     egress = c.path->port;
//   }                                                      // else: forward untouched
//   // or, per packet of a burst, the inline fast path with its counts summed per burst
//   // (pin-select does this, with the parsed variant; Choose() where it declines):
//   //   const PinSelector::FastParams p = pin.Params(field);     // once per burst
//   //   if (!pin.TryChooseRewriteParsed(p, desc, frame, len, now_ns, icrc, tally, &c, &r))
//   //     c = pin.Choose(desc, frame, len, now_ns), ...;
//   //   ... after the burst: pin.Commit(tally);
//   // uplink -> host, once joined to the request's destination QPN (the verbs shim's QPN pairs):
//   pin.OnReversePacket(desc, frame, len, request_qpn, now_ns);
//   // control thread, any time:
//   pin.SetThresholdBytes(64 * 1024);
//
// What a flow is (LbConfig::flow_unit):
//   * kRequest (default): one RDMA message (SEND/WRITE first..last or only, a READ request, an
//     atomic) of one QP. Its size is the RETH DMA length when the first packet carries one (WRITE);
//     a single-packet message's size is its payload; a multi-packet SEND's size is unknown until
//     its last packet, and so is the size of a message joined mid-way (entry created late).
//   * kQp: the QP's activity period: its messages from the first packet after an idle gap longer
//     than flow_idle_ns. Its size is the bytes sent so far plus the known size of the message
//     starting now.
//
// The rule (docs/pin.md §4):
//   * A flow whose size is known when it starts is pinned if size <= threshold, else sprayed.
//   * A flow of unknown size is short until proven long: it starts pinned.
//   * A pinned message is never moved: every packet of it leaves on its pinned path, even when a
//     message of unknown size passes the threshold mid-way (counted: crossed-threshold and the
//     bytes pinned beyond the threshold). Moving it would reorder it; its next message is a new
//     flow. In QP mode a QP that passed the threshold is long from its next message on: that
//     message and the following ones are sprayed until the QP idles (counted: qp-promoted).
//     Opt-in for reordering-tolerant stacks (LbConfig::crossing = kSprayRest): a message of
//     unknown size is pinned only provisionally, and its packets after the threshold are sprayed
//     (counted: sprayed-rest); known-size pinned messages are unaffected.
//   * The threshold is read when a flow starts: changing it affects flows that start afterwards.
//   * The pinned path is chosen by LbConfig::pin_policy: kHash (of the flow key, and in request
//     mode the message number), kLeastLoaded (the path with the lowest recent bytes + congestion
//     penalty, PathLoads), or kBalancer (the balancer's own pick at flow start, e.g. REPS's best
//     cached path).
//   * Control packets (ACK/NAK, atomic ACK, CNP, other opcodes) take the path their QP's flow key
//     hashes to, without a table entry; so does every packet when the flow table is full (counted).
//
// Feedback: an ACK acknowledging PSN p makes every remembered packet up to p (the last 16 PSNs)
// report its path to the balancer as good, or as congested when the ACK is CE-marked or the packet
// was sent before a CNP; a NAK reports the NAKed PSN's path as lost. Congested and lost paths get
// a decaying penalty in PathLoads (adaptive, least-loaded), and REPS recycles only good paths.
//
// Hot path: no allocation, no locks, no exceptions; everything is bounds-checked against `len`.
// Deterministic under LbConfig::seed. Threading: one worker owns a PinSelector; only
// SetThresholdBytes() and the counters may be used from other threads.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "common/crc32c.h"
#include "dataplane/lb/balancer.h"
#include "dataplane/lb/flow_table.h"
#include "dataplane/lb/internal/hash.h"
#include "dataplane/lb/path.h"
#include "dataplane/lb/rewrite.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::lb {

enum class FlowUnit : uint8_t { kRequest, kQp };
enum class PinPolicy : uint8_t { kHash, kLeastLoaded, kBalancer };
// What happens to a message of unknown size when it passes the threshold while pinned.
enum class CrossingRule : uint8_t {
  kStayPinned,  // it stays on its path to its last packet: no packet of a pinned message moves
  kSprayRest,   // opt-in, for reordering-tolerant stacks: it was pinned only provisionally; the
                // rest of the message is sprayed (its tail may overtake its head)
};
const char* FlowUnitName(FlowUnit u);          // "request", "qp"
const char* PinPolicyName(PinPolicy p);        // "hash", "least-loaded", "balancer"
const char* CrossingRuleName(CrossingRule r);  // "stay-pinned", "spray-rest"

// The bandwidth-delay product of one uplink: link_gbps × rtt_ns / 8 bytes
// (100 Gb/s × 8 µs = 100 000 B).
constexpr uint64_t BandwidthDelayBytes(uint32_t link_gbps, uint32_t rtt_ns) {
  return uint64_t{link_gbps} * rtt_ns / 8;
}

// The control-side configuration of one worker's PIN + balancer.
struct LbConfig {
  BalancerKind balancer = BalancerKind::kReps;  // sprays the long flows (or every flow, pin off)
  bool pin = true;                              // false: no pinning, the balancer alone
  FlowUnit flow_unit = FlowUnit::kRequest;
  PinPolicy pin_policy = PinPolicy::kHash;
  CrossingRule crossing = CrossingRule::kStayPinned;
  uint64_t threshold_bytes = 0;  // 0: one bandwidth-delay product of the uplink (below)
  uint32_t link_gbps = 100;      // uplink speed, for the default threshold
  uint32_t rtt_ns = 8000;        // base fabric RTT, for the default threshold
  uint64_t seed = 1;             // the balancers' generator (mix in the worker index)
  uint64_t flowlet_gap_ns = 50'000;
  uint32_t reps_cache_size = 8;  // 1..16 recycled paths per flow
  EntropyField entropy_field = EntropyField::kUdpSourcePort;
  uint32_t flow_capacity = 1u << 16;   // flow entries per worker (128 B each)
  uint64_t flow_idle_ns = 10'000'000;  // an entry idle this long may be reused; a QP-mode flow ends
  uint32_t max_path_sets = 256;        // path sets with their own PathLoads slots

  friend bool operator==(const LbConfig&, const LbConfig&) = default;
};

// threshold_bytes, or the bandwidth-delay product when it is 0.
uint64_t EffectiveThreshold(const LbConfig& config);
// Checks every field; errors name the field, the value and the fix.
absl::Status ValidateLbConfig(const LbConfig& config);

// X(enumerator, "stable-name", "description"). Counters of one PinSelector.
#define HEDDLE_FOREACH_LB_COUNTER(X)                                                            \
  X(kPackets, "packets", "packets offered to Choose()")                                         \
  X(kNotRoce, "not-roce", "not RoCEv2: left untouched")                                         \
  X(kMalformed, "malformed", "headers do not fit the frame (truncated): left untouched")        \
  X(kNoPathSet, "no-path-set", "destination without a path set: left untouched")                \
  X(kControl, "control", "ACK/NAK/CNP/other: the QP's hashed path, no state")                   \
  X(kTableFull, "table-full", "no flow entry free: the QP's hashed path, no state")             \
  X(kPinnedPackets, "pinned-packets", "packets sent on their flow's pinned path")               \
  X(kSprayedPackets, "sprayed-packets", "packets sent on the balancer's path")                  \
  X(kPinnedFlows, "pinned-flows", "messages started pinned")                                    \
  X(kSprayedFlows, "sprayed-flows", "messages started sprayed")                                 \
  X(kCrossedThreshold, "crossed-threshold",                                                     \
    "pinned messages of unknown size that passed the "                                          \
    "threshold (they stay pinned)")                                                             \
  X(kPinnedBytesOverThreshold, "pinned-bytes-over-threshold",                                   \
    "payload bytes of pinned messages beyond the threshold")                                    \
  X(kQpPromoted, "qp-promoted", "QP mode: QPs proven long; their next messages are sprayed")    \
  X(kSprayedRest, "sprayed-rest", "crossing = spray-rest: messages sprayed past the threshold") \
  X(kAbandoned, "abandoned", "a message started before the previous one's last packet")         \
  X(kRepinned, "repinned", "a pinned flow's path vanished from a new path table: re-pinned")    \
  X(kFeedbackAck, "feedback-ack", "acknowledgements applied")                                   \
  X(kFeedbackNak, "feedback-nak", "NAKs applied")                                               \
  X(kFeedbackCnp, "feedback-cnp", "CNPs applied")                                               \
  X(kFeedbackCe, "feedback-ce", "CE-marked reverse packets applied")                            \
  X(kFeedbackNoFlow, "feedback-no-flow", "feedback for a flow without an entry")                \
  X(kFeedbackOld, "feedback-old", "acknowledgements at or before one already applied")          \
  X(kFeedbackIgnored, "feedback-ignored", "reverse packets that carry no feedback")             \
  X(kFeedbackMalformed, "feedback-malformed", "reverse packets whose headers do not fit")

enum class LbCounter : uint8_t {
#define HEDDLE_LB_ENUM_(e, n, d) e,
  HEDDLE_FOREACH_LB_COUNTER(HEDDLE_LB_ENUM_)
#undef HEDDLE_LB_ENUM_
      kCount
};
inline constexpr int kNumLbCounters = static_cast<int>(LbCounter::kCount);
const char* LbCounterName(LbCounter c);
const char* LbCounterDescription(LbCounter c);

// What Choose() decided.
enum class Verdict : uint8_t {
  kPinned,    // the flow's pinned path
  kSprayed,   // the balancer's path for this packet
  kControl,   // a control packet: the QP's hashed path
  kFallback,  // flow table full: the QP's hashed path
  kNotRoce,   // path == nullptr: forward untouched
  kNoPathSet,
  kMalformed,
};

struct PathChoice {
  const Path* path = nullptr;  // nullptr: leave the packet alone (kNotRoce/kNoPathSet/kMalformed)
  uint8_t index = kNoPath;     // index in the set
  Verdict verdict = Verdict::kNotRoce;
  uint32_t set_id = 0;  // PathSetView::id of the set `index` is in (valid when path != nullptr)
};

// Feedback decoded from one reverse-direction packet.
enum class FeedbackKind : uint8_t {
  kNone,    // carries none (a request, a READ request, another opcode)
  kAck,     // acknowledges up to psn (ACK, atomic ACK, READ response)
  kNak,     // NAK sequence error / invalid request etc.: psn - 1 acknowledged, psn lost
  kRnrNak,  // receiver not ready: psn - 1 acknowledged, no path at fault
  kCnp,     // congestion notification
};
struct Feedback {
  FeedbackKind kind = FeedbackKind::kNone;
  uint32_t psn = 0;
  bool ce = false;  // the reverse packet itself is ECN-CE marked
};
// From a parsed reverse-direction RoCE packet (no state).
Feedback DecodeFeedback(const pkt::PacketDesc& desc);

class PinSelector {
 public:
  // `config` should have passed ValidateLbConfig(); out-of-range values are clamped here. `table`
  // may be null (nothing is balanced until SetPathTable()); it must outlive its use.
  PinSelector(const LbConfig& config, const PathTable* table);

  // Owning worker only, between bursts (after the RCU publish of a new table). Flows keep their
  // pinned path if the new table's set has the same (port, entropy); otherwise they are re-pinned
  // (counted). Per-path loads and REPS caches restart.
  void SetPathTable(const PathTable* table);

  // Owning worker only, between bursts (after the RCU publish of new parameters): the balancer
  // kind, pin on/off, the pin policy, the crossing rule, the threshold (and the link speed and RTT
  // it derives from), the flowlet gap and the REPS cache size of `config` take effect; the other
  // fields (flow unit, entropy field, seed, table sizes, idle time) are fixed at construction and
  // ignored here. Nothing moves: a message in progress keeps its verdict (a pinned message stays
  // on its path to its last packet), flows starting afterwards follow the new rule, sprayed
  // packets take the new balancer's paths. Flow entries and counters are kept.
  void Reconfigure(const LbConfig& config);

  // Owning worker, between bursts: whether feedback can reach this selector at all (in the
  // pipeline the join needs the verbs shim's pair index). While it cannot, packets do not record
  // their path per PSN: nothing would ever read it. Turned on again, recording resumes with the
  // next packet (older PSNs have no path to report, as if their feedback were lost). Default true.
  void SetFeedbackExpected(bool expected);
  bool feedback_expected() const { return feedback_expected_; }

  // Any thread (relaxed atomic): takes effect for flows that start afterwards. 0 = the default.
  void SetThresholdBytes(uint64_t bytes);
  uint64_t threshold_bytes() const { return threshold_.load(std::memory_order_relaxed); }

  // A packet towards the uplink. `desc` from pkt::Parse() of `frame` (len bytes, contiguous at
  // least up to the end of BTH); the ICRC may lie beyond len.
  PathChoice Choose(const pkt::PacketDesc& desc, const uint8_t* frame, size_t len, uint64_t now_ns);

  // ---- The per-burst fast path (docs/pin.md §9.2) ----
  // Counts of the packets the fast path placed during one burst: plain integers of the worker's
  // instead of a counter store per packet. Commit() adds them to the counters. Every packet the
  // fast path places is pinned or sprayed, so kPackets is their sum.
  struct BurstTally {
    uint64_t pinned_packets = 0;
    uint64_t sprayed_packets = 0;
    uint64_t pinned_flows = 0;
    uint64_t sprayed_flows = 0;
    // One-packet messages: a flow and a packet each.
    uint64_t pinned_single = 0;
    uint64_t sprayed_single = 0;
    bool other = false;                        // a count below is non-zero
    std::array<uint64_t, kNumLbCounters> n{};  // the other counters, by LbCounter
    void Add(LbCounter c, uint64_t k = 1) {
      switch (c) {
        case LbCounter::kPackets:
          return;  // pinned + sprayed packets
        case LbCounter::kPinnedPackets:
          pinned_packets += k;
          return;
        case LbCounter::kSprayedPackets:
          sprayed_packets += k;
          return;
        case LbCounter::kPinnedFlows:
          pinned_flows += k;
          return;
        case LbCounter::kSprayedFlows:
          sprayed_flows += k;
          return;
        default:
          n[static_cast<size_t>(c)] += k;
          other = true;
      }
    }
  };
  // Choose() for the common packet, inline: a RoCE request (not a control opcode) of a flow whose
  // entry exists and is bound to the current path table, found through a small direct-mapped
  // cache of recent flows without hashing its addresses again. The same decision, path, flow
  // state, generator draws, balancer counters and counts as Choose() (pin_fast_path_test runs
  // random traffic through both), with the counts added to `tally`. Returns false, having
  // changed nothing but that cache, for every other packet: not RoCE, headers that do not fit, a
  // control opcode, no table, a flow without an entry (Choose() inserts it), an entry bound to an
  // older table or to no set. The caller then calls Choose().
  [[gnu::always_inline]] bool TryChooseFast(const pkt::PacketDesc& desc, const uint8_t* frame,
                                            size_t len, uint64_t now_ns, BurstTally& tally,
                                            PathChoice* out) {
    return Fast<false, false>(Params(EntropyField::kUdpSourcePort), desc,
                              const_cast<uint8_t*>(frame), len, now_ns, tally, out, nullptr,
                              nullptr);
  }
  // TryChooseFast(), and the path written into the frame as Rewrite(frame, len, desc, *out->path,
  // field, &icrc) writes it (*rewrite: its result): the pin-select stage's whole per-packet work
  // with one check of the headers. Also declines a frame whose ICRC lies beyond `len`.
  [[gnu::always_inline]] bool TryChooseRewriteFast(const pkt::PacketDesc& desc, uint8_t* frame,
                                                   size_t len, uint64_t now_ns, EntropyField field,
                                                   IcrcDeltaCache& icrc, BurstTally& tally,
                                                   PathChoice* out, RewriteResult* rewrite) {
    return Fast<true, false>(Params(field), desc, frame, len, now_ns, tally, out, rewrite, &icrc);
  }
  // What the fast path reads of the selector per packet, read once per burst instead: every store
  // into a frame or a flow entry may alias any member (the build has -fno-strict-aliasing), so
  // members would be loaded again for every packet, where a local copy stays in a register.
  // Valid until the selector is reconfigured (Reconfigure(), SetPathTable(),
  // SetFeedbackExpected(), SetThresholdBytes()): take it again at the start of every burst.
  struct FastParams {
    const void* recent;    // the recent-flow cache (RecentFlow[])
    uint32_t threshold32;  // threshold_bytes() saturated, as FlowEntry::flow_threshold holds it
    // A one-packet message (payload_len < 2^16) is pinned at once when its payload is below
    // pin_below (pin on, request mode, the hash policy, payload <= threshold; else 0), and
    // sprayed at once when it is at least spray_from (request mode, and pin off or payload >
    // threshold; else 2^16, never).
    uint32_t pin_below;
    uint32_t spray_from;
    bool record_or_track;  // PSN history or path loads
    bool sport_always;     // the entropy is the UDP source port for IPv6 frames too
  };
  // Also empties the recent-flow slots of entries removed behind the selector's back (through
  // mutable_flows()) since it last looked.
  FastParams Params(EntropyField field) {
    if (flows_.removals() != recent_removals_) [[unlikely]]
      PurgeRecent();
    const uint64_t threshold = threshold_.load(std::memory_order_relaxed);
    const uint32_t over = static_cast<uint32_t>(std::min<uint64_t>(threshold, 0xffff)) + 1;
    const bool request = config_.flow_unit == FlowUnit::kRequest;
    return FastParams{
        .recent = recent_.get(),
        .threshold32 = threshold > 0xffffffffu ? 0xffffffffu : static_cast<uint32_t>(threshold),
        .pin_below = one_packet_pin_ ? over : 0,
        .spray_from = !request      ? 0x10000u
                      : config_.pin ? over
                                    : 0,
        .record_or_track = record_or_track_,
        .sport_always = field == EntropyField::kUdpSourcePort};
  }
  // TryChooseRewriteFast() with the burst's Params(field) for a desc that
  // pkt::Parse(frame, len, frame_len) returned kOk for, as the pipeline's burst carries: Parse()
  // has checked the geometry the fast path needs (IPv4 or IPv6, UDP after the IP header, BTH right
  // after UDP, the ICRC after BTH and within the frame, every header within `len`), so only the
  // opcode class and whether the ICRC lies within `len` (not in a later segment) are checked
  // again. Any other desc: TryChooseRewriteFast().
  [[gnu::always_inline]] bool TryChooseRewriteParsed(const FastParams& params,
                                                     const pkt::PacketDesc& desc, uint8_t* frame,
                                                     size_t len, uint64_t now_ns,
                                                     IcrcDeltaCache& icrc, BurstTally& tally,
                                                     PathChoice* out, RewriteResult* rewrite) {
    return Fast<true, true>(params, desc, frame, len, now_ns, tally, out, rewrite, &icrc);
  }
  // TryChooseRewriteParsed() for a frame that lies whole at `frame` (contiguous), as
  // pkt::Parse(frame, len) or Parse(frame, len, len) saw it (in the pipeline: an mbuf of one
  // segment, whose data_len is its pkt_len): Parse() has checked that the ICRC lies within the
  // frame, so only the opcode class is checked again, and nothing past the ICRC's end is read or
  // written (the frame's length is not needed). kPlain: the caller has seen `params` say
  // !record_or_track and sport_always (the common configuration) and runs this variant for the
  // whole burst: neither is tested per packet.
  template <bool kPlain = false>
  [[gnu::always_inline]] bool TryChooseRewriteWhole(const FastParams& params,
                                                    const pkt::PacketDesc& desc, uint8_t* frame,
                                                    uint64_t now_ns, IcrcDeltaCache& icrc,
                                                    BurstTally& tally, PathChoice* out,
                                                    RewriteResult* rewrite) {
    return Fast<true, true, true, kPlain>(params, desc, frame, 0, now_ns, tally, out, rewrite,
                                          &icrc);
  }
  // Adds a burst's tally to the counters and clears it (once per burst).
  void Commit(BurstTally& t) {
    t.pinned_packets += t.pinned_single;
    t.pinned_flows += t.pinned_single;
    t.sprayed_packets += t.sprayed_single;
    t.sprayed_flows += t.sprayed_single;
    t.pinned_single = t.sprayed_single = 0;
    const uint64_t packets = t.pinned_packets + t.sprayed_packets;
    if (packets != 0) {
      Bump(LbCounter::kPackets, packets);
      if (t.pinned_packets != 0) Bump(LbCounter::kPinnedPackets, t.pinned_packets);
      if (t.sprayed_packets != 0) Bump(LbCounter::kSprayedPackets, t.sprayed_packets);
      if (t.pinned_flows != 0) Bump(LbCounter::kPinnedFlows, t.pinned_flows);
      if (t.sprayed_flows != 0) Bump(LbCounter::kSprayedFlows, t.sprayed_flows);
      t.pinned_packets = t.sprayed_packets = t.pinned_flows = t.sprayed_flows = 0;
    }
    if (t.other) {
      for (size_t i = 0; i < t.n.size(); ++i) {
        if (t.n[i] != 0) Bump(static_cast<LbCounter>(i), t.n[i]);
        t.n[i] = 0;
      }
      t.other = false;
    }
  }

  // A packet towards the host, joined to the destination QPN of the requests it answers (its
  // addresses are swapped to find the flow). Returns the feedback applied (kNone if nothing).
  Feedback OnReversePacket(const pkt::PacketDesc& desc, const uint8_t* frame, size_t len,
                           uint32_t request_qpn, uint64_t now_ns);
  // Feedback for the flow whose request-direction hash is `flow_hash` (HashRequest()).
  void OnFeedback(uint64_t flow_hash, uint32_t request_qpn, const Feedback& fb, uint64_t now_ns);

  // The flow hash of a request-direction packet, and of the flow a reverse packet answers.
  static uint64_t HashRequest(const uint8_t* frame, const pkt::PacketDesc& desc) {
    const uint8_t* ip = frame + desc.l3_off;
    if (desc.l3 == pkt::L3::kIpv4) return internal::HashFlow(ip + 12, ip + 16, false, desc.dest_qp);
    return internal::HashFlow(ip + 8, ip + 24, true, desc.dest_qp);
  }
  static uint64_t HashReverse(const uint8_t* frame, const pkt::PacketDesc& desc,
                              uint32_t request_qpn);
  // HashRequest() of an IPv6 packet from its IP header.
  static uint64_t HashFlowV6(const uint8_t* ip, uint32_t qpn) {
    return internal::HashFlow(ip + 8, ip + 24, true, qpn);
  }

  // Empties flow entries [begin, begin + count) idle past flow_idle_ns; the worker sweeps a slice
  // per poll loop.
  size_t SweepIdle(size_t begin, size_t count, uint64_t now_ns) {
    const size_t n = flows_.SweepIdle(begin, count, now_ns);
    if (n != 0) PurgeRecent();
    return n;
  }

  uint64_t counter(LbCounter c) const {
    return counters_[static_cast<size_t>(c)].load(std::memory_order_relaxed);
  }
  const FlowTable& flows() const { return flows_; }
  FlowTable& mutable_flows() { return flows_; }
  const Balancer& balancer() const { return balancer_; }
  PathLoads& loads() { return loads_; }
  const LbConfig& config() const { return config_; }
  const PathTable* table() const { return table_; }

 private:
  // One writer: a relaxed load + store, no locked instruction (readers load relaxed).
  void Bump(LbCounter c, uint64_t n = 1) {
    auto& v = counters_[static_cast<size_t>(c)];
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  PathChoice Stateless(const pkt::PacketDesc& desc, const uint8_t* frame, uint64_t hash,
                       Verdict verdict, LbCounter counter);
  PathSetView Bind(FlowEntry& e, const uint8_t* frame, const pkt::PacketDesc& desc, bool fresh);
  // The per-packet rule shared by Choose() and TryChooseFast(): `count(LbCounter, n)` is where
  // their counts go (the counters, or a burst's tally).
  // A message (or in QP mode a flow) starts with this packet: its size, pinned or sprayed, and
  // the pinned path.
  template <typename Count>
  void StartMessage(FlowEntry& e, const pkt::PacketDesc& desc, PathSetView set, uint64_t hash,
                    uint64_t now_ns, uint64_t gap_ns, Count count);
  // The packet's path index for entry `e` (after StartMessage() if it started a message).
  template <typename Count>
  uint8_t Place(FlowEntry& e, PathSetView set, uint64_t hash, uint64_t now_ns, uint64_t gap_ns,
                Verdict* verdict, Count count);
  // After the choice: the flow's bytes and the threshold crossing, the PSN history, the loads,
  // the end of the message.
  template <typename Count>
  void Account(FlowEntry& e, const pkt::PacketDesc& desc, PathSetView set, uint8_t i,
               uint64_t now_ns, Count count);
  // A pinned one-packet message in request mode with the hash policy (one_packet_pin_, payload
  // within the threshold), after its entry's last_ns: StartMessage(), PinPath(), Place() and
  // Account() with what such a message already says, without their counts and RecordAndTrack().
  // Its size is its payload, within the threshold; it cannot cross it; nothing of it outlives it.
  // So its flow_bytes and flow_threshold are not written: in request mode nothing reads
  // them before the next message's StartMessage() sets them. Returns the path index.
  [[gnu::always_inline]] static uint8_t PlaceOnePacketPinned(FlowEntry& e, const Path* paths,
                                                             uint32_t set_size, uint64_t hash) {
    const uint64_t salt = e.message_salt + internal::kMessageSaltStep;
    e.message_salt = salt;
    const auto i = static_cast<uint8_t>(
        internal::FastRange(internal::MessageHashSalted(hash, salt), set_size));
    const Path& path = paths[i];
    CopyPinnedPath(e, path);
    e.pinned_path = i;
    e.flags = kFlowSizeKnown | kFlowPinned | kFlowPinValid;
    return i;
  }
  // The pinned path's entropy and port into the entry (pinned_entropy, pinned_port): one 8-byte
  // copy of the Path's first bytes, whose last two land in pinned_rest.
  static void CopyPinnedPath(FlowEntry& e, const Path& path) {
    static_assert(offsetof(Path, entropy) == 0 && offsetof(Path, port) == 4 &&
                  sizeof(Path::entropy) == 4 && sizeof(Path::port) == 2);
    std::memcpy(reinterpret_cast<uint8_t*>(&e) + offsetof(FlowEntry, pinned_entropy), &path, 8);
  }
  // The pinned path of a flow that needs one: inline for the hash policy, else PickPinned().
  uint8_t PinPath(FlowEntry& e, PathSetView set, uint64_t hash, uint64_t now_ns, uint64_t gap_ns) {
    if (config_.pin_policy != PinPolicy::kHash) return PickPinned(e, set, hash, now_ns, gap_ns);
    // Request mode: each message is placed on its own; QP mode: the QP keeps one place.
    const uint64_t h = config_.flow_unit == FlowUnit::kRequest
                           ? internal::MessageHashSalted(hash, e.message_salt)
                           : hash;
    const auto i = static_cast<uint8_t>(internal::FastRange(h, set.size));
    SetPinned(e, set, i);
    return i;
  }
  static void SetPinned(FlowEntry& e, PathSetView set, uint8_t i) {
    e.pinned_path = i;
    CopyPinnedPath(e, set[i]);
    e.flags |= kFlowPinValid;
  }
  uint8_t PickPinned(FlowEntry& e, PathSetView set, uint64_t hash, uint64_t now_ns,
                     uint64_t gap_ns);
  void Record(FlowEntry& e, uint32_t psn, uint8_t path);
  // The packet's PSN history (record_history_) and its bytes in PathLoads (track_loads_).
  void RecordAndTrack(FlowEntry& e, const pkt::PacketDesc& desc, PathSetView set, uint8_t i,
                      uint64_t now_ns) {
    if (record_history_) Record(e, desc.psn, i);
    if (track_loads_)
      loads_.AddBytes(set.id, i, static_cast<uint32_t>(desc.l3_off) + desc.ip_len, now_ns);
  }
  struct RecentFlow;
  // The fast path's flow lookup: the recent-flow cache, then the flow table without inserting.
  // nullptr: the flow has no entry, or its entry is not bound to a set of the current table.
  [[gnu::always_inline]] inline const RecentFlow* FindRecent(const RecentFlow* recent,
                                                             const uint8_t* ip, bool v6,
                                                             uint32_t qpn);
  // The fast path's checks of a desc it cannot trust (not from Parse() of this frame): Choose()'s,
  // and with the rewrite Rewrite()'s.
  template <bool kRewrite>
  [[gnu::always_inline]] static bool FastGeometry(const pkt::PacketDesc& desc, const uint8_t* frame,
                                                  size_t len);
  // kParsed: `desc` is Parse()'s kOk result for `frame` (TryChooseRewriteParsed()); kWhole: and
  // the frame lies whole within `len` (TryChooseRewriteWhole()).
  // kPlain: Params() said no PSN history or path loads and the UDP source port, for the caller's
  // whole burst (TryChooseRewriteWhole<true>()).
  template <bool kRewrite, bool kParsed, bool kWhole = false, bool kPlain = false>
  [[gnu::always_inline]] inline bool Fast(const FastParams& p, const pkt::PacketDesc& desc,
                                          uint8_t* frame, size_t len, uint64_t now_ns,
                                          BurstTally& tally, PathChoice* out,
                                          RewriteResult* rewrite, IcrcDeltaCache* icrc);
  // Empties the recent-flow slots whose entry was removed or now holds another flow or set.
  void PurgeRecent();
  static uint64_t RecentHash(uint64_t tag, uint32_t key);
  const RecentFlow* FindRecentMiss(const uint8_t* ip, bool v6, uint32_t qpn, uint64_t tag,
                                   uint32_t key, size_t slot);
  void Deliver(FlowEntry& e, PathSetView set, uint8_t path, PathSignal signal, uint64_t now_ns);
  void AckUpTo(FlowEntry& e, PathSetView set, uint32_t psn, bool ce, uint64_t now_ns);

  LbConfig config_;
  const PathTable* table_;
  // table_'s generation and sets, for the fast path (0 and none without a table).
  uint32_t table_generation_ = 0;
  uint32_t num_sets_ = 0;
  const PathSetView* sets_ = nullptr;
  std::atomic<uint64_t> threshold_;
  internal::Rng rng_;
  PathLoads loads_;
  Balancer balancer_;
  FlowTable flows_;
  // Whether packets record their path per PSN (the second line of the entry): only the feedback
  // users need it (REPS, adaptive, the least-loaded pin policy), and only while feedback can come.
  bool wants_history_;
  bool feedback_expected_ = true;
  bool record_history_;
  // Whether packets add their bytes to PathLoads: only its readers need it (the adaptive balancer,
  // the least-loaded pin policy). Penalties from feedback are added whatever the balancer.
  bool track_loads_;
  // record_history_ || track_loads_: one test per packet for both.
  bool record_or_track_;
  // The fast path's shortcut for one-packet messages applies: pin on, request mode, the hash pin
  // policy.
  bool one_packet_pin_;
  // The least IP header length by pkt::L3 value; 0xffff: not IP.
  static constexpr std::array<uint16_t, 256> kMinIpHeader = [] {
    std::array<uint16_t, 256> a{};
    a.fill(0xffff);
    a[static_cast<uint8_t>(pkt::L3::kIpv4)] = pkt::kIpv4MinHeaderLen;
    a[static_cast<uint8_t>(pkt::L3::kIpv6)] = pkt::kIpv6HeaderLen;
    return a;
  }();
  // The opcode classes the fast path places (not control, IsControlClass(); not kNone: not RoCE),
  // one bit each.
  static_assert(static_cast<int>(pkt::RoceClass::kCount) <= 64);
  static constexpr uint64_t kFastClassMask = [] {
    uint64_t m = 0;
    for (pkt::RoceClass c :
         {pkt::RoceClass::kSend, pkt::RoceClass::kWrite, pkt::RoceClass::kReadRequest,
          pkt::RoceClass::kReadResponse, pkt::RoceClass::kAtomic}) {
      m |= uint64_t{1} << static_cast<int>(c);
    }
    return m;
  }();
  std::array<std::atomic<uint64_t>, kNumLbCounters> counters_{};
  // The recent-flow cache of TryChooseFast(): direct-mapped by the flow's addresses (IPv4) or hash
  // (IPv6) and QPN. A slot names an entry by pointer (entries never move while they live) and its
  // path set in the current table, and is trusted on its tag and key alone: every filled slot's
  // entry holds the slot's hash, QPN and set id and is bound to the current table. That holds
  // because a slot is filled only for an entry bound to the current table; SetPathTable() empties
  // every slot; an entry bound to the current table keeps its set until it is removed (it is
  // rebound only when its generation differs from the table's, or when it is inserted afresh);
  // and an entry is removed only by the idle sweep or by an insert that replaces it, after which
  // PurgeRecent() empties the slots whose entry no longer passes those checks, before the fast
  // path runs again: SweepIdle() and Choose() at once, Params() (once per burst) for removals
  // through mutable_flows() (FlowTable::removals() tells).
  // 32 bytes: the slot's byte offset is a mask of the hash (RecentOffset()). The flow hash is the
  // entry's key_hash, read from the entry's first line, which the packet loads anyway.
  struct RecentFlow {
    uint64_t tag = 0;  // IPv4: source and destination address as 8 bytes; IPv6: the flow hash
    FlowEntry* entry = nullptr;
    const Path* paths = nullptr;  // the entry's set in the current table
    uint32_t key = 0;             // (IPv6 << 24 | destination QPN) + 1 (RecentKey()); 0: empty
    uint16_t set_id = 0;
    uint16_t set_size = 0;
  };
  static constexpr int kRecentBits = 8;
  // A slot's key: never 0 (the empty slot's), IPv4 and IPv6 apart, one instruction for IPv4.
  static constexpr uint32_t RecentKey(bool v6, uint32_t qpn) {
    return (static_cast<uint32_t>(v6) << 24 | qpn) + 1;
  }
  // The byte offset of (tag, key)'s slot in the cache. With SSE4.2: one CRC-32C step over the
  // tag seeded with the key (the crc32 instruction) and one mask that keeps 8 of its bits, already
  // a multiple of the slot size: two instructions. Else the top bits of one multiply.
  static size_t RecentOffset(uint64_t tag, uint32_t key) {
    static_assert(sizeof(RecentFlow) == 32);
#if defined(__SSE4_2__)
    constexpr uint32_t kMask = ((1u << kRecentBits) - 1) * sizeof(RecentFlow);
    return Crc32cStepU64(key, tag) & kMask;
#else
    return static_cast<size_t>(((tag ^ key) * internal::kPrime1) >> (64 - kRecentBits)) *
           sizeof(RecentFlow);
#endif
  }
  std::unique_ptr<RecentFlow[]> recent_;
  // flows_.removals() when the recent-flow cache was last purged.
  uint64_t recent_removals_ = 0;
};

inline bool IsControlClass(pkt::RoceClass c) {
  return c == pkt::RoceClass::kAck || c == pkt::RoceClass::kAtomicAck ||
         c == pkt::RoceClass::kCnp || c == pkt::RoceClass::kOther;
}

inline uint32_t Saturate32(uint64_t v) {
  return v > 0xffffffffu ? 0xffffffffu : static_cast<uint32_t>(v);
}

template <typename Count>
[[gnu::always_inline]] inline void PinSelector::StartMessage(FlowEntry& e,
                                                             const pkt::PacketDesc& desc,
                                                             PathSetView set, uint64_t hash,
                                                             uint64_t now_ns, uint64_t gap_ns,
                                                             Count count) {
  const bool first = (desc.flags & pkt::kFlagFirst) != 0;
  if (first && (e.flags & kFlowInMessage)) count(LbCounter::kAbandoned, 1);
  const uint64_t threshold = threshold_.load(std::memory_order_relaxed);

  bool size_known = false;
  uint64_t size = 0;
  if (first && (desc.flags & pkt::kFlagLast)) {
    size_known = true;  // a single-packet message (SEND/WRITE only, READ request, atomic)
    size = desc.payload_len;
  } else if (first && (desc.flags & pkt::kFlagReth) && desc.roce_class == pkt::RoceClass::kWrite) {
    size_known = true;
    size = desc.dma_length;
  }
  e.message_salt += internal::kMessageSaltStep;

  // What outlives a message: in QP mode the QP's pinned path, whether it proved long and whether
  // it crossed the threshold, until the QP idles; in request mode nothing.
  constexpr uint8_t kQpBits = kFlowPinValid | kFlowLong | kFlowCrossed;
  uint8_t flags = e.flags & kQpBits;
  if (config_.flow_unit == FlowUnit::kRequest || gap_ns > config_.flow_idle_ns) {
    flags = 0;
    e.flow_bytes = 0;
  }
  bool pinned;
  if (!config_.pin || (flags & kFlowLong)) {
    pinned = false;
  } else if (size_known) {
    pinned = e.flow_bytes + size <= threshold;
    if (!pinned && config_.flow_unit == FlowUnit::kQp) {
      flags |= kFlowLong;
      count(LbCounter::kQpPromoted, 1);
    }
  } else {
    pinned = true;  // short until proven long
  }
  flags |= kFlowInMessage;
  if (size_known) flags |= kFlowSizeKnown;
  if (pinned) flags |= kFlowPinned;
  e.flags = flags;
  e.flow_threshold = Saturate32(threshold);
  if (pinned && ((e.flags & kFlowPinValid) == 0 || e.pinned_path >= set.size)) {
    PinPath(e, set, hash, now_ns, gap_ns);
  }
  count(pinned ? LbCounter::kPinnedFlows : LbCounter::kSprayedFlows, 1);
}

template <typename Count>
[[gnu::always_inline]] inline uint8_t PinSelector::Place(FlowEntry& e, PathSetView set,
                                                         uint64_t hash, uint64_t now_ns,
                                                         uint64_t gap_ns, Verdict* verdict,
                                                         Count count) {
  if (e.flags & kFlowPinned) {
    *verdict = Verdict::kPinned;
    count(LbCounter::kPinnedPackets, 1);
    return e.pinned_path;
  }
  *verdict = Verdict::kSprayed;
  count(LbCounter::kSprayedPackets, 1);
  return balancer_.Pick(PickContext{&e, set, hash, now_ns, gap_ns});
}

template <typename Count>
[[gnu::always_inline]] inline void PinSelector::Account(FlowEntry& e, const pkt::PacketDesc& desc,
                                                        PathSetView set, uint8_t i, uint64_t now_ns,
                                                        Count count) {
  const uint64_t before = e.flow_bytes;
  e.flow_bytes += desc.payload_len;
  if ((e.flags & kFlowPinned) && e.flow_bytes > e.flow_threshold) [[unlikely]] {
    // Passed the threshold while pinned: the message stays where it is (never moved), unless
    // the operator opted into spraying the rest of messages of unknown size.
    if ((e.flags & kFlowCrossed) == 0) {
      e.flags |= kFlowCrossed;
      count(LbCounter::kCrossedThreshold, 1);
      if (config_.flow_unit == FlowUnit::kQp) {
        e.flags |= kFlowLong;
        count(LbCounter::kQpPromoted, 1);
      }
    }
    count(LbCounter::kPinnedBytesOverThreshold,
          e.flow_bytes - (before > e.flow_threshold ? before : e.flow_threshold));
    if (config_.crossing == CrossingRule::kSprayRest && (e.flags & kFlowSizeKnown) == 0) {
      // Opt-in: pinned only provisionally; the packets after this one are sprayed.
      e.flags &= static_cast<uint8_t>(~kFlowPinned);
      count(LbCounter::kSprayedRest, 1);
    }
  }
  if (record_or_track_) [[unlikely]]
    RecordAndTrack(e, desc, set, i, now_ns);
  if (desc.flags & pkt::kFlagLast) e.flags &= static_cast<uint8_t>(~kFlowInMessage);
}

inline const PinSelector::RecentFlow* PinSelector::FindRecent(const RecentFlow* recent,
                                                              const uint8_t* ip, bool v6,
                                                              uint32_t qpn) {
  // IPv4: the addresses themselves (adjacent in the header) are the tag, no hash needed.
  uint64_t tag;
  uint32_t key;
  if (!v6) [[likely]] {
    tag = internal::Load64(ip + 12);
    key = RecentKey(false, qpn);
  } else {
    tag = HashFlowV6(ip, qpn);
    key = RecentKey(true, qpn);
  }
  const size_t offset = RecentOffset(tag, key);
  const RecentFlow& r =
      *reinterpret_cast<const RecentFlow*>(reinterpret_cast<const char*>(recent) + offset);
  // A filled slot's entry still holds its flow and set (PurgeRecent() keeps it so).
  if (r.tag == tag && r.key == key) [[likely]]
    return &r;
  return FindRecentMiss(ip, v6, qpn, tag, key, offset / sizeof(RecentFlow));
}

template <bool kRewrite>
inline bool PinSelector::FastGeometry(const pkt::PacketDesc& desc, const uint8_t* frame,
                                      size_t len) {
  // The IP header's least length by L3; not IP: more than any offset.
  const uint32_t min_ip = kMinIpHeader[static_cast<uint8_t>(desc.l3)];
  // Control opcodes (IsControlClass()) by bit. A class beyond the mask may alias one of them: it
  // then merely takes the general path.
  constexpr uint32_t kControl = 1u << static_cast<int>(pkt::RoceClass::kAck) |
                                1u << static_cast<int>(pkt::RoceClass::kAtomicAck) |
                                1u << static_cast<int>(pkt::RoceClass::kCnp) |
                                1u << static_cast<int>(pkt::RoceClass::kOther);
  if ((desc.flags & pkt::kFlagRoce) == 0 ||
      ((kControl >> (static_cast<uint32_t>(desc.roce_class) & 31)) & 1) || frame == nullptr) {
    return false;
  }
  if (desc.l4_off < desc.l3_off + min_ip || desc.bth_off != desc.l4_off + pkt::kUdpHeaderLen) {
    return false;
  }
  if constexpr (kRewrite) {
    return desc.icrc_off >= desc.bth_off + pkt::kBthLen &&
           size_t{desc.icrc_off} + pkt::kIcrcLen <= len;
  } else {
    return size_t{desc.bth_off} + pkt::kBthLen <= len;
  }
}

template <bool kRewrite, bool kParsed, bool kWhole, bool kPlain>
inline bool PinSelector::Fast(const FastParams& p, const pkt::PacketDesc& desc, uint8_t* frame,
                              size_t len, uint64_t now_ns, BurstTally& tally, PathChoice* out,
                              RewriteResult* rewrite, IcrcDeltaCache* icrc) {
  // Choose()'s checks (and with the rewrite, Rewrite()'s): whatever would not be placed on a
  // flow's state, or not rewritten inline, goes to the general path.
  const auto l3 = static_cast<uint8_t>(desc.l3);
  const uint16_t flags = desc.flags;
  if constexpr (kParsed) {
    // Parse() checked the rest: a class the fast path places implies kFlagRoce and its geometry.
    // Parse()'s classes are below kCount <= 64: one bit test of a 64-bit mask is exact.
    if (((kFastClassMask >> (static_cast<uint32_t>(desc.roce_class) & 63)) & 1) == 0) return false;
    // A whole frame: Parse() has checked that the ICRC lies within it.
    if (!kWhole && size_t{desc.icrc_off} + pkt::kIcrcLen > len) return false;
    // Not given: RewriteFitting() bounds a fallback by the ICRC's end.
    if constexpr (kWhole) len = kWholeFrame;
  } else if (!FastGeometry<kRewrite>(desc, frame, len)) {
    return false;
  }
  const bool v6 = l3 == static_cast<uint8_t>(pkt::L3::kIpv6);
  // What the rest reads of the desc, read once: the stores into the entry and the frame below
  // may alias it (-fno-strict-aliasing), which would load each field again after them.
  const uint16_t payload = desc.payload_len;
  // Parse() stores 24 bits of QPN.
  const uint32_t qpn = kParsed ? desc.dest_qp : desc.dest_qp & kPsnMask;
  const RecentFlow* const r =
      FindRecent(static_cast<const RecentFlow*>(p.recent), frame + desc.l3_off, v6, qpn);
  if (r == nullptr) return false;
  FlowEntry* const e = r->entry;
  // From here on the packet is the fast path's: the steps of Choose().
  const Path* const paths = r->paths;
  const uint32_t set_id = r->set_id;
  uint8_t i;
  Verdict verdict;
  constexpr uint16_t kOnly = pkt::kFlagFirst | pkt::kFlagLast;
  const bool only = (flags & kOnly) == kOnly;
  // __builtin_expect, not [[likely]]: on this compound condition GCC 12 took [[likely]] as a
  // taken jump to the block placed after the loop, and two jumps back (to the rewrite, then to the
  // loop's end): three taken branches per packet where the expectation lays the block inline.
  if (__builtin_expect(only && payload < p.pin_below, 1)) {
    // A pinned one-packet message in request mode with the hash policy (PlaceOnePacketPinned(),
    // as Choose() places it).
    const uint8_t old_flags = e->flags;
    e->last_ns = now_ns;
    i = PlaceOnePacketPinned(*e, paths, r->set_size, e->key_hash);
    if (old_flags & kFlowInMessage) [[unlikely]]
      tally.Add(LbCounter::kAbandoned);
    verdict = Verdict::kPinned;
    ++tally.pinned_single;
    if (!kPlain && p.record_or_track) [[unlikely]]
      RecordAndTrack(*e, desc, PathSetView{paths, r->set_size, set_id}, i, now_ns);
  } else if (only && payload >= p.spray_from) {
    // A sprayed one-packet message in request mode (pin off, or a payload beyond the threshold):
    // likewise, with the balancer's pick; not pinned, it has no threshold to cross.
    const PathSetView set{paths, r->set_size, set_id};
    const uint64_t hash = e->key_hash;  // each branch loads the flow hash where it needs it
    const uint64_t gap_ns = now_ns - e->last_ns;
    e->last_ns = now_ns;
    if (e->flags & kFlowInMessage) [[unlikely]]
      tally.Add(LbCounter::kAbandoned);
    e->message_salt += internal::kMessageSaltStep;
    e->flow_threshold = p.threshold32;
    e->flow_bytes = payload;
    e->flags = kFlowSizeKnown;
    i = balancer_.Pick(PickContext{e, set, hash, now_ns, gap_ns});
    verdict = Verdict::kSprayed;
    ++tally.sprayed_single;
    if (!kPlain && p.record_or_track) [[unlikely]]
      RecordAndTrack(*e, desc, set, i, now_ns);
  } else {
    const PathSetView set{paths, r->set_size, set_id};
    const uint64_t hash = e->key_hash;
    auto count = [&tally](LbCounter c, uint64_t n) { tally.Add(c, n); };
    const uint64_t gap_ns = now_ns - e->last_ns;
    e->last_ns = now_ns;
    if ((flags & pkt::kFlagFirst) || (e->flags & kFlowInMessage) == 0) {
      StartMessage(*e, desc, set, hash, now_ns, gap_ns, count);
    } else if ((e->flags & kFlowPinned) &&
               ((e->flags & kFlowPinValid) == 0 || e->pinned_path >= set.size)) [[unlikely]] {
      PinPath(*e, set, hash, now_ns, gap_ns);
    }
    i = Place(*e, set, hash, now_ns, gap_ns, &verdict, count);
    Account(*e, desc, set, i, now_ns, count);
  }
  *out = {&paths[i], i, verdict, set_id};
  if constexpr (kRewrite) {
    // The field as a constant on the common branch: RewriteFitting() then tests no L3.
    if (kPlain || p.sport_always) [[likely]] {
      *rewrite = RewriteFitting(frame, len, desc, paths[i], EntropyField::kUdpSourcePort, *icrc);
    } else {
      *rewrite = RewriteFitting(frame, len, desc, paths[i], EntropyField::kIpv6FlowLabel, *icrc);
    }
  }
  return true;
}

}  // namespace heddle::lb
