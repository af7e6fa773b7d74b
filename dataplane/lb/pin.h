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

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "dataplane/lb/balancer.h"
#include "dataplane/lb/flow_table.h"
#include "dataplane/lb/internal/hash.h"
#include "dataplane/lb/path.h"
#include "dataplane/pkt/parse.h"

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

  // Empties flow entries [begin, begin + count) idle past flow_idle_ns; the worker sweeps a slice
  // per poll loop.
  size_t SweepIdle(size_t begin, size_t count, uint64_t now_ns) {
    return flows_.SweepIdle(begin, count, now_ns);
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
  void StartMessage(FlowEntry& e, const pkt::PacketDesc& desc, PathSetView set, uint64_t hash,
                    uint64_t now_ns, uint64_t gap_ns);
  uint8_t PickPinned(FlowEntry& e, PathSetView set, uint64_t hash, uint64_t now_ns,
                     uint64_t gap_ns);
  void Record(FlowEntry& e, uint32_t psn, uint8_t path);
  void Deliver(FlowEntry& e, PathSetView set, uint8_t path, PathSignal signal, uint64_t now_ns);
  void AckUpTo(FlowEntry& e, PathSetView set, uint32_t psn, bool ce, uint64_t now_ns);

  LbConfig config_;
  const PathTable* table_;
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
  std::array<std::atomic<uint64_t>, kNumLbCounters> counters_{};
};

}  // namespace heddle::lb
