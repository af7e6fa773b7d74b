// File: dataplane/lb/pin.cc
#include "dataplane/lb/pin.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"
#include "dataplane/pkt/roce.h"

namespace heddle::lb {
namespace {

using internal::FastRange;
using internal::MessageHashSalted;

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

// The headers Choose() and the hashes read lie within `len`.
bool HeadersFit(const uint8_t* frame, size_t len, const pkt::PacketDesc& d) {
  if (frame == nullptr) return false;
  size_t min_ip;
  if (d.l3 == pkt::L3::kIpv4) {
    min_ip = pkt::kIpv4MinHeaderLen;
  } else if (d.l3 == pkt::L3::kIpv6) {
    min_ip = pkt::kIpv6HeaderLen;
  } else {
    return false;
  }
  return d.l4_off >= d.l3_off + min_ip && d.bth_off == d.l4_off + pkt::kUdpHeaderLen &&
         static_cast<size_t>(d.bth_off) + pkt::kBthLen <= len;
}

}  // namespace

const char* FlowUnitName(FlowUnit u) {
  switch (u) {
    case FlowUnit::kRequest:
      return "request";
    case FlowUnit::kQp:
      return "qp";
  }
  return "invalid";
}

const char* PinPolicyName(PinPolicy p) {
  switch (p) {
    case PinPolicy::kHash:
      return "hash";
    case PinPolicy::kLeastLoaded:
      return "least-loaded";
    case PinPolicy::kBalancer:
      return "balancer";
  }
  return "invalid";
}

const char* CrossingRuleName(CrossingRule r) {
  switch (r) {
    case CrossingRule::kStayPinned:
      return "stay-pinned";
    case CrossingRule::kSprayRest:
      return "spray-rest";
  }
  return "invalid";
}

const char* LbCounterName(LbCounter c) {
  constexpr const char* kNames[] = {
#define HEDDLE_LB_NAME_(e, n, d) n,
      HEDDLE_FOREACH_LB_COUNTER(HEDDLE_LB_NAME_)
#undef HEDDLE_LB_NAME_
  };
  const auto i = static_cast<size_t>(c);
  return i < std::size(kNames) ? kNames[i] : "invalid";
}

const char* LbCounterDescription(LbCounter c) {
  constexpr const char* kDescs[] = {
#define HEDDLE_LB_DESC_(e, n, d) d,
      HEDDLE_FOREACH_LB_COUNTER(HEDDLE_LB_DESC_)
#undef HEDDLE_LB_DESC_
  };
  const auto i = static_cast<size_t>(c);
  return i < std::size(kDescs) ? kDescs[i] : "invalid";
}

uint64_t EffectiveThreshold(const LbConfig& config) {
  return config.threshold_bytes != 0 ? config.threshold_bytes
                                     : BandwidthDelayBytes(config.link_gbps, config.rtt_ns);
}

absl::Status ValidateLbConfig(const LbConfig& c) {
  if (static_cast<int>(c.balancer) >= static_cast<int>(BalancerKind::kCount)) {
    return absl::InvalidArgumentError("lb.balancer: unknown kind");
  }
  if (c.threshold_bytes == 0 && (c.link_gbps == 0 || c.rtt_ns == 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lb.threshold_bytes is 0 (derive it) but link_gbps = %d and rtt_ns = %d; give both "
        "(e.g. 100 and 8000 for a 100 KB threshold) or set threshold_bytes",
        c.link_gbps, c.rtt_ns));
  }
  if (EffectiveThreshold(c) > (uint64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lb.threshold_bytes = %d exceeds the largest RDMA message (2^31 bytes): every flow "
        "would be pinned; set pin: false instead",
        EffectiveThreshold(c)));
  }
  if (c.reps_cache_size < 1 || c.reps_cache_size > static_cast<uint32_t>(kMaxRepsCache)) {
    return absl::InvalidArgumentError(absl::StrFormat("lb.reps_cache_size = %d; it must be 1..%d",
                                                      c.reps_cache_size, kMaxRepsCache));
  }
  if (c.balancer == BalancerKind::kFlowlet && c.flowlet_gap_ns == 0) {
    return absl::InvalidArgumentError(
        "lb.flowlet_gap_ns = 0 makes every packet a flowlet (that is rps); give the idle gap, "
        "e.g. 50000");
  }
  if (c.flow_capacity < 16 || c.flow_capacity > (1u << 26)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("lb.flow_capacity = %d; it must be 16..%d (128 bytes per entry)",
                        c.flow_capacity, 1u << 26));
  }
  if (c.flow_idle_ns == 0) {
    return absl::InvalidArgumentError("lb.flow_idle_ns must be > 0, e.g. 10000000 (10 ms)");
  }
  if (c.max_path_sets == 0 || c.max_path_sets > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("lb.max_path_sets = %d; it must be 1..65535", c.max_path_sets));
  }
  return absl::OkStatus();
}

Feedback DecodeFeedback(const pkt::PacketDesc& desc) {
  Feedback fb;
  if ((desc.flags & pkt::kFlagRoce) == 0) return fb;
  fb.ce = desc.ecn == 3;
  fb.psn = desc.psn & kPsnMask;
  switch (desc.roce_class) {
    case pkt::RoceClass::kCnp:
      fb.kind = FeedbackKind::kCnp;
      return fb;
    case pkt::RoceClass::kReadResponse:
      // Every READ response acknowledges its PSN (the responder answers in order); first, last
      // and only carry an AETH with the ACK syndrome.
      fb.kind = FeedbackKind::kAck;
      return fb;
    case pkt::RoceClass::kAck:
    case pkt::RoceClass::kAtomicAck: {
      if ((desc.flags & pkt::kFlagAeth) == 0) return fb;
      switch ((desc.aeth >> 29) & 0x7) {  // AETH syndrome bits 7..5
        case 0:
          fb.kind = FeedbackKind::kAck;
          break;
        case 1:
          fb.kind = FeedbackKind::kRnrNak;
          break;
        case 3:
          fb.kind = FeedbackKind::kNak;
          break;
        default:  // reserved
          break;
      }
      return fb;
    }
    default:
      return fb;
  }
}

PinSelector::PinSelector(const LbConfig& config, const PathTable* table)
    : config_(config),
      table_(table),
      threshold_(EffectiveThreshold(config)),
      rng_(config.seed),
      loads_(std::max<uint32_t>(config.max_path_sets, 1)),
      balancer_(BalancerParams{.kind = config.balancer,
                               .flowlet_gap_ns = config.flowlet_gap_ns,
                               .reps_cache_size = config.reps_cache_size},
                &rng_, &loads_),
      flows_(FlowTableOptions{.capacity = config.flow_capacity, .idle_ns = config.flow_idle_ns}),
      wants_history_(config.balancer == BalancerKind::kReps ||
                     config.balancer == BalancerKind::kAdaptive ||
                     config.pin_policy == PinPolicy::kLeastLoaded),
      record_history_(wants_history_),
      track_loads_(config.balancer == BalancerKind::kAdaptive ||
                   config.pin_policy == PinPolicy::kLeastLoaded),
      record_or_track_(record_history_ || track_loads_),
      one_packet_pin_(config.pin && config.flow_unit == FlowUnit::kRequest &&
                      config.pin_policy == PinPolicy::kHash),
      recent_(new RecentFlow[size_t{1} << kRecentBits]) {
  SetPathTable(table);
}

void PinSelector::SetFeedbackExpected(bool expected) {
  feedback_expected_ = expected;
  record_history_ = wants_history_ && feedback_expected_;
  record_or_track_ = record_history_ || track_loads_;
}

void PinSelector::Reconfigure(const LbConfig& config) {
  config_.balancer = config.balancer;
  config_.pin = config.pin;
  config_.pin_policy = config.pin_policy;
  config_.crossing = config.crossing;
  config_.threshold_bytes = config.threshold_bytes;
  config_.link_gbps = config.link_gbps;
  config_.rtt_ns = config.rtt_ns;
  config_.flowlet_gap_ns = config.flowlet_gap_ns;
  config_.reps_cache_size = config.reps_cache_size;
  balancer_.Reconfigure(BalancerParams{.kind = config_.balancer,
                                       .flowlet_gap_ns = config_.flowlet_gap_ns,
                                       .reps_cache_size = config_.reps_cache_size});
  // Turning history on again may find PSN slots a flow filled before it was turned off: at most
  // one stale path per slot is reported once (the acknowledged window is 16 PSNs), which is noise
  // to the balancers, not an error. Clearing every entry here would stall the worker.
  wants_history_ = config_.balancer == BalancerKind::kReps ||
                   config_.balancer == BalancerKind::kAdaptive ||
                   config_.pin_policy == PinPolicy::kLeastLoaded;
  record_history_ = wants_history_ && feedback_expected_;
  one_packet_pin_ = config_.pin && config_.flow_unit == FlowUnit::kRequest &&
                    config_.pin_policy == PinPolicy::kHash;
  // Bytes sent while no reader of PathLoads ran are not in it: they would have decayed away within
  // a few epochs (65.5 µs each) of a change anyway.
  track_loads_ =
      config_.balancer == BalancerKind::kAdaptive || config_.pin_policy == PinPolicy::kLeastLoaded;
  record_or_track_ = record_history_ || track_loads_;
  threshold_.store(EffectiveThreshold(config_), std::memory_order_relaxed);
}

void PinSelector::SetPathTable(const PathTable* table) {
  table_ = table;
  // The recent flows' sets are the old table's (RecentFlow).
  std::fill(recent_.get(), recent_.get() + (size_t{1} << kRecentBits), RecentFlow{});
  recent_removals_ = flows_.removals();
  table_generation_ = table != nullptr ? table->generation() : 0;
  // Set ids past 0xfffe are kNoPathSet in the entries: never below num_sets_.
  num_sets_ =
      table != nullptr ? static_cast<uint32_t>(std::min<size_t>(table->num_sets(), 0xffff)) : 0;
  sets_ = table != nullptr ? table->views() : nullptr;
  loads_.Reset();
}

void PinSelector::SetThresholdBytes(uint64_t bytes) {
  if (bytes == 0) bytes = BandwidthDelayBytes(config_.link_gbps, config_.rtt_ns);
  // Relaxed: a plain value read once per flow start; nothing else is published with it.
  threshold_.store(bytes, std::memory_order_relaxed);
}

uint64_t PinSelector::HashReverse(const uint8_t* frame, const pkt::PacketDesc& desc,
                                  uint32_t request_qpn) {
  const uint8_t* ip = frame + desc.l3_off;
  if (desc.l3 == pkt::L3::kIpv4) return internal::HashFlow(ip + 16, ip + 12, false, request_qpn);
  return internal::HashFlow(ip + 24, ip + 8, true, request_qpn);
}

PathChoice PinSelector::Stateless(const pkt::PacketDesc& desc, const uint8_t* frame, uint64_t hash,
                                  Verdict verdict, LbCounter counter) {
  const PathSetView set = table_->Lookup(frame, desc);
  if (set.size == 0) {
    Bump(LbCounter::kNoPathSet);
    return {nullptr, kNoPath, Verdict::kNoPathSet};
  }
  Bump(counter);
  const auto i = static_cast<uint8_t>(FastRange(hash, set.size));
  return {&set[i], i, verdict, set.id};
}

uint8_t PinSelector::PickPinned(FlowEntry& e, PathSetView set, uint64_t hash, uint64_t now_ns,
                                uint64_t gap_ns) {
  // Request mode: each message is placed on its own; QP mode: the QP keeps one place.
  const uint64_t h =
      config_.flow_unit == FlowUnit::kRequest ? MessageHashSalted(hash, e.message_salt) : hash;
  uint8_t i = 0;
  switch (config_.pin_policy) {
    case PinPolicy::kHash:
      i = static_cast<uint8_t>(FastRange(h, set.size));
      break;
    case PinPolicy::kLeastLoaded: {
      // The lowest score; the scan starts at a hashed index so that ties spread.
      const uint32_t start = FastRange(h, set.size);
      uint32_t best = start;
      uint64_t best_score = loads_.Score(set.id, start, now_ns);
      for (uint32_t k = 1; k < set.size; ++k) {
        const uint32_t p = start + k < set.size ? start + k : start + k - set.size;
        const uint64_t s = loads_.Score(set.id, p, now_ns);
        if (s < best_score) {
          best = p;
          best_score = s;
        }
      }
      i = static_cast<uint8_t>(best);
      break;
    }
    case PinPolicy::kBalancer:
      i = balancer_.Pick(PickContext{&e, set, hash, now_ns, gap_ns});
      break;
  }
  SetPinned(e, set, i);
  return i;
}

PathSetView PinSelector::Bind(FlowEntry& e, const uint8_t* frame, const pkt::PacketDesc& desc,
                              bool fresh) {
  const PathSetView set = table_->Lookup(frame, desc);
  e.generation = table_->generation();
  e.path_set = set.size != 0 ? static_cast<uint16_t>(set.id) : kNoPathSet;
  if (set.size != 0 && set.id > 0xfffe) e.path_set = kNoPathSet;  // beyond the 16-bit id
  std::memset(e.hist, kNoPath, sizeof(e.hist));
  e.fb_flags = 0;
  e.reps_count = 0;
  e.reps_head = 0;
  e.current_path = kNoPath;
  if (e.path_set == kNoPathSet) return PathSetView{};
  e.rr_next = static_cast<uint8_t>(FastRange(e.key_hash, set.size));
  if (fresh) {
    e.pinned_path = kNoPath;
    return set;
  }
  // A new table: keep the pinned path if the set still has it.
  if (e.flags & kFlowPinValid) {
    e.flags &= static_cast<uint8_t>(~kFlowPinValid);
    for (uint32_t i = 0; i < set.size; ++i) {
      if (set[i].port == e.pinned_port && set[i].entropy == e.pinned_entropy) {
        e.pinned_path = static_cast<uint8_t>(i);
        e.flags |= kFlowPinValid;
        break;
      }
    }
    if ((e.flags & kFlowPinValid) == 0 && (e.flags & kFlowPinned)) Bump(LbCounter::kRepinned);
  }
  return set;
}

void PinSelector::Record(FlowEntry& e, uint32_t psn, uint8_t path) {
  psn &= kPsnMask;
  if ((e.fb_flags & kFbPsnValid) == 0) {
    std::memset(e.hist, kNoPath, sizeof(e.hist));
    e.fb_flags |= kFbPsnValid;
    e.next_psn = psn;
  }
  const uint32_t ahead = (psn - e.next_psn) & kPsnMask;
  if (ahead < (1u << 23)) {
    // PSNs skipped (a READ's responses use them, or packets we did not see) hold no path.
    for (uint32_t k = 0; k < ahead && k < static_cast<uint32_t>(kPsnHistory); ++k) {
      e.hist[(e.next_psn + k) % kPsnHistory] = kNoPath;
    }
    e.next_psn = (psn + 1) & kPsnMask;
  }
  // A retransmission (psn before next_psn) records its new path for its PSN.
  e.hist[psn % kPsnHistory] = path;
}

[[gnu::flatten]] PathChoice PinSelector::Choose(const pkt::PacketDesc& desc, const uint8_t* frame,
                                                size_t len, uint64_t now_ns) {
  Bump(LbCounter::kPackets);
  if ((desc.flags & pkt::kFlagRoce) == 0) {
    Bump(LbCounter::kNotRoce);
    return {nullptr, kNoPath, Verdict::kNotRoce};
  }
  if (!HeadersFit(frame, len, desc)) {
    Bump(LbCounter::kMalformed);
    return {nullptr, kNoPath, Verdict::kMalformed};
  }
  if (table_ == nullptr) {
    Bump(LbCounter::kNoPathSet);
    return {nullptr, kNoPath, Verdict::kNoPathSet};
  }
  const uint64_t hash = HashRequest(frame, desc);
  if (IsControlClass(desc.roce_class))
    return Stateless(desc, frame, hash, Verdict::kControl, LbCounter::kControl);

  bool inserted = false;
  FlowEntry* e = flows_.FindOrInsert(hash, desc.dest_qp, now_ns, &inserted);
  if (e == nullptr) return Stateless(desc, frame, hash, Verdict::kFallback, LbCounter::kTableFull);
  // An insert that replaced an idle entry: a recent-flow slot may name it.
  if (inserted && flows_.removals() != recent_removals_) [[unlikely]]
    PurgeRecent();
  const uint64_t gap_ns = inserted ? kNever : now_ns - e->last_ns;
  e->last_ns = now_ns;

  PathSetView set;
  if (inserted || e->generation != table_->generation()) {
    set = Bind(*e, frame, desc, inserted);
  } else if (e->path_set != kNoPathSet) {
    set = table_->set(e->path_set);
  }
  if (set.size == 0) {
    Bump(LbCounter::kNoPathSet);
    return {nullptr, kNoPath, Verdict::kNoPathSet};
  }

  constexpr uint16_t kOnly = pkt::kFlagFirst | pkt::kFlagLast;
  if (one_packet_pin_ && (desc.flags & kOnly) == kOnly &&
      desc.payload_len <= threshold_.load(std::memory_order_relaxed)) {
    // A pinned one-packet message: placed as the fast path places it.
    if (e->flags & kFlowInMessage) Bump(LbCounter::kAbandoned);
    const uint8_t i = PlaceOnePacketPinned(*e, set.paths, set.size, hash);
    Bump(LbCounter::kPinnedFlows);
    Bump(LbCounter::kPinnedPackets);
    if (record_or_track_) RecordAndTrack(*e, desc, set, i, now_ns);
    return {&set[i], i, Verdict::kPinned, set.id};
  }
  auto count = [this](LbCounter c, uint64_t n) { Bump(c, n); };
  if ((desc.flags & pkt::kFlagFirst) || (e->flags & kFlowInMessage) == 0) {
    StartMessage(*e, desc, set, hash, now_ns, gap_ns, count);
  } else if ((e->flags & kFlowPinned) &&
             ((e->flags & kFlowPinValid) == 0 || e->pinned_path >= set.size)) {
    // The pinned path vanished with a new table mid-message (counted in Bind()).
    PinPath(*e, set, hash, now_ns, gap_ns);
  }
  Verdict verdict;
  const uint8_t i = Place(*e, set, hash, now_ns, gap_ns, &verdict, count);
  Account(*e, desc, set, i, now_ns, count);
  return {&set[i], i, verdict, set.id};
}

// The flow hash of a recent-flow slot's (tag, key): an IPv6 tag is the hash; an IPv4 tag holds the
// addresses as HashRequest() reads them.
uint64_t PinSelector::RecentHash(uint64_t tag, uint32_t key) {
  const uint32_t k = key - 1;
  if ((k >> 24) & 1) return tag;
  uint8_t addresses[8];
  std::memcpy(addresses, &tag, sizeof addresses);
  return internal::HashFlow(addresses, addresses + 4, false, k & kPsnMask);
}

void PinSelector::PurgeRecent() {
  recent_removals_ = flows_.removals();
  RecentFlow* const recent = recent_.get();
  for (size_t k = 0; k < (size_t{1} << kRecentBits); ++k) {
    RecentFlow& r = recent[k];
    if (r.key == 0) continue;
    const FlowEntry* e = r.entry;
    const uint32_t qpn = (r.key - 1) & kPsnMask;
    if (e->key_hash != RecentHash(r.tag, r.key) || e->qpn != qpn || e->path_set != r.set_id ||
        e->generation != table_generation_) {
      r = RecentFlow{};
    }
  }
}

const PinSelector::RecentFlow* PinSelector::FindRecentMiss(const uint8_t* ip, bool v6, uint32_t qpn,
                                                           uint64_t tag, uint32_t key,
                                                           size_t slot) {
  const uint64_t hash =
      v6 ? tag : internal::HashFlow(ip + 12, ip + 16, false, qpn);  // HashRequest()
  FlowEntry* e = flows_.Find(hash, qpn);
  // Bound to this table (an entry's generation is never 0) and to one of its sets; else Choose()
  // (re)binds it.
  if (e == nullptr || e->generation != table_generation_ || e->path_set >= num_sets_) {
    return nullptr;
  }
  const PathSetView set = sets_[e->path_set];
  RecentFlow& r = recent_[slot];
  r = RecentFlow{tag, e, set.paths, key, e->path_set, static_cast<uint16_t>(set.size)};
  return &r;
}

void PinSelector::Deliver(FlowEntry& e, PathSetView set, uint8_t path, PathSignal signal,
                          uint64_t now_ns) {
  if (path >= set.size) return;
  if (signal == PathSignal::kCongested) {
    loads_.AddPenalty(set.id, path, PathLoads::kCongestedPenalty, now_ns);
  } else if (signal == PathSignal::kLost) {
    loads_.AddPenalty(set.id, path, PathLoads::kLostPenalty, now_ns);
  }
  balancer_.OnPathFeedback(e, set, path, signal);
}

void PinSelector::AckUpTo(FlowEntry& e, PathSetView set, uint32_t psn, bool ce, uint64_t now_ns) {
  if ((e.fb_flags & kFbPsnValid) == 0) return;
  psn &= kPsnMask;
  const uint32_t last = (e.next_psn - 1) & kPsnMask;
  // READ responses acknowledge PSNs up to the READ's last response, beyond the request packets.
  if (PsnAfter(psn, last)) psn = last;
  if ((e.fb_flags & kFbAckValid) && !PsnAfter(psn, e.acked_psn)) {
    Bump(LbCounter::kFeedbackOld);
    return;
  }
  for (int k = kPsnHistory - 1; k >= 0; --k) {
    const uint32_t p = (psn - static_cast<uint32_t>(k)) & kPsnMask;
    if ((e.fb_flags & kFbAckValid) && !PsnAfter(p, e.acked_psn)) continue;
    if (((last - p) & kPsnMask) >= static_cast<uint32_t>(kPsnHistory)) continue;  // overwritten
    uint8_t& slot = e.hist[p % kPsnHistory];
    if (slot == kNoPath) continue;
    const uint8_t path = slot;
    slot = kNoPath;
    const bool tainted = (e.fb_flags & kFbTaintValid) && !PsnAfter(p, e.taint_psn);
    Deliver(e, set, path, ce || tainted ? PathSignal::kCongested : PathSignal::kGood, now_ns);
  }
  e.acked_psn = psn;
  e.fb_flags |= kFbAckValid;
  if ((e.fb_flags & kFbTaintValid) && !PsnAfter(e.taint_psn, psn)) {
    e.fb_flags &= static_cast<uint8_t>(~kFbTaintValid);
  }
}

void PinSelector::OnFeedback(uint64_t flow_hash, uint32_t request_qpn, const Feedback& fb,
                             uint64_t now_ns) {
  if (fb.kind == FeedbackKind::kNone) {
    Bump(LbCounter::kFeedbackIgnored);
    return;
  }
  FlowEntry* e = flows_.Find(flow_hash, request_qpn);
  if (e == nullptr || table_ == nullptr || e->generation != table_->generation() ||
      e->path_set == kNoPathSet) {
    Bump(LbCounter::kFeedbackNoFlow);
    return;
  }
  const PathSetView set = table_->set(e->path_set);
  if (fb.ce) Bump(LbCounter::kFeedbackCe);
  switch (fb.kind) {
    case FeedbackKind::kAck:
      Bump(LbCounter::kFeedbackAck);
      AckUpTo(*e, set, fb.psn, fb.ce, now_ns);
      break;
    case FeedbackKind::kNak:
    case FeedbackKind::kRnrNak: {
      Bump(LbCounter::kFeedbackNak);
      const uint32_t psn = fb.psn & kPsnMask;
      AckUpTo(*e, set, (psn - 1) & kPsnMask, fb.ce, now_ns);
      if (fb.kind == FeedbackKind::kNak && (e->fb_flags & kFbPsnValid) &&
          ((e->next_psn - 1 - psn) & kPsnMask) < static_cast<uint32_t>(kPsnHistory)) {
        uint8_t& slot = e->hist[psn % kPsnHistory];
        if (slot != kNoPath) {
          Deliver(*e, set, slot, PathSignal::kLost, now_ns);
          slot = kNoPath;
        }
      }
      break;
    }
    case FeedbackKind::kCnp:
      Bump(LbCounter::kFeedbackCnp);
      // Everything sent so far may have met the congestion the CNP reports: none of it recycles.
      if (e->fb_flags & kFbPsnValid) {
        e->taint_psn = (e->next_psn - 1) & kPsnMask;
        e->fb_flags |= kFbTaintValid;
      }
      break;
    case FeedbackKind::kNone:
      break;
  }
}

Feedback PinSelector::OnReversePacket(const pkt::PacketDesc& desc, const uint8_t* frame, size_t len,
                                      uint32_t request_qpn, uint64_t now_ns) {
  if ((desc.flags & pkt::kFlagRoce) == 0) {
    Bump(LbCounter::kFeedbackIgnored);
    return {};
  }
  if (!HeadersFit(frame, len, desc)) {
    Bump(LbCounter::kFeedbackMalformed);
    return {};
  }
  const Feedback fb = DecodeFeedback(desc);
  OnFeedback(HashReverse(frame, desc, request_qpn), request_qpn, fb, now_ns);
  return fb;
}

}  // namespace heddle::lb
