// File: dataplane/storm/levels.h
//
// STORM priority levels (docs/storm.md §3): the level formula, per-message / per-packet tagging,
// the byte-weighted request-size histogram and the equal-bytes ("auto") cutoffs computed from it.
//
//   heddle::storm::LevelConfig cfg;                       // K = 4, 4 KiB / 64 KiB / 1 MiB
//   HEDDLE_RETURN_IF_ERROR(heddle::storm::ValidateLevelConfig(cfg));   // at start-up
//   ...per packet, after RequestTracker::OnRequestPacket():
//   uint8_t level = heddle::storm::TagPacket(cfg, entry, desc, track, backlog_bytes, mtu);
//   SetDscp(frame, desc, cfg.dscp[level]);                 // rewrite.h
//
// Level K-1 is served first. For a request of size S with `sent` bytes before this packet and a
// QP backlog of B bytes:
//   R     = S - sent                     (S unknown: R = max(sent, UnknownBytes(config)))
//   R_eff = R / (1 + beta * min(B, backlog_max) / max(R, MTU))
//   level = K - 1 - |{ i : R_eff > c_i }|
//
// Auto cutoffs: each worker adds request sizes to its SizeHistogram (single writer; relaxed
// atomic stores so the control thread may Snapshot() it concurrently). The control thread sums
// the per-worker deltas, ages them with AgeHistogram() and calls AutoCutoffs(); publishing the
// resulting LevelConfig (RCU pointer swap) is the caller's business.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/storm/qp_table.h"
#include "dataplane/storm/tracker.h"

namespace heddle::storm {

inline constexpr int kMaxLevels = 8;
// storm.unknown_size's default: above every cutoff (auto cutoffs stay below it), so a request of
// unknown size takes level 0 in per-message mode.
inline constexpr uint32_t kUnknownSizeLowest = UINT32_MAX;

enum class Mode : uint8_t {
  kPerMessage,  // level fixed at a request's first packet (in-order RoCEv2, go-back-N)
  kPerPacket,   // level recomputed per packet (reordering-tolerant transports)
};

struct LevelConfig {
  int levels = 4;  // K, 1..8
  // c_1 < ... < c_{K-1} in bytes; entries from K-1 on are ignored.
  std::array<uint32_t, kMaxLevels - 1> cutoffs = {4096, 65536, 1u << 20, 0, 0, 0, 0};
  double beta = 1.0;                 // weight of the backlog boost
  uint32_t backlog_max = 16u << 20;  // B_max, bytes
  // R for a request of unknown size (a SEND without the host shim's WQE length, a READ response
  // stream without a join) before it sent that many bytes: per-packet mode uses unknown_floor,
  // which is safe there as the level falls as the bytes are sent (PIAS); per-message mode, which
  // fixes the level at the first packet, uses unknown_size (storm.unknown_size; default above
  // every cutoff, the lowest data level: a request that cannot be demoted must not start high).
  uint32_t unknown_floor = 4096;
  uint32_t unknown_size = kUnknownSizeLowest;
  uint8_t control_level = 3;         // ACK/NAK, CNP, READ request, atomic ACK
  std::array<uint8_t, kMaxLevels> dscp = {0, 10, 18, 26, 34, 36, 38, 46};  // per level, 0..63
  std::array<int8_t, kMaxLevels> pcp = {-1, -1, -1, -1, -1, -1, -1, -1};   // -1: keep PCP
  Mode mode = Mode::kPerMessage;

  friend bool operator==(const LevelConfig&, const LevelConfig&) = default;
};

// OK, or the first problem with the key, the value and what to use instead.
absl::Status ValidateLevelConfig(const LevelConfig& config);

// The level formula. `remaining` is R, `backlog` is B (bytes), `mtu` the path MTU (>= 1).
uint8_t ComputeLevel(const LevelConfig& config, uint64_t remaining, uint64_t backlog, uint32_t mtu);

// R of a request of unknown size with nothing sent yet: unknown_size in per-message mode, where
// the level computed at the first packet is kept for the whole request, unknown_floor in
// per-packet mode, where it is recomputed from max(sent, floor) as the bytes go by.
constexpr uint32_t UnknownBytes(const LevelConfig& config) {
  return config.mode == Mode::kPerMessage ? config.unknown_size : config.unknown_floor;
}

// Level for traffic that has no tracked request: unknown size (R = unknown_floor), no backlog.
// Used when the QP table refused the QP, so all its packets share one level (no reordering).
inline uint8_t DefaultLevel(const LevelConfig& config, uint32_t mtu) {
  return ComputeLevel(config, config.unknown_floor, 0, mtu);
}

// R for the request in `entry`, given the bytes sent before the current packet; `unknown` is
// UnknownBytes() of the configuration.
inline uint64_t RemainingBytes(const QpEntry& entry, uint32_t sent_before, uint32_t unknown) {
  if (entry.flags & kEntrySizeKnown) {
    return entry.size > sent_before ? uint64_t{entry.size} - sent_before : 0;
  }
  return sent_before > unknown ? sent_before : unknown;
}

// Where B comes from (storm.backlog_source).
enum class BacklogSource : uint8_t { kNone, kEgressQueue, kHostShim };
inline uint64_t BacklogBytes(const QpEntry& entry, BacklogSource source, uint32_t mtu) {
  switch (source) {
    case BacklogSource::kEgressQueue:
      return uint64_t{entry.egress_queued} * mtu;
    case BacklogSource::kHostShim:
      return entry.host_backlog;
    default:
      return 0;
  }
}

// True for the classes that always take control_level: ACK/NAK, CNP, READ request, atomic ACK.
constexpr bool IsControlClass(pkt::RoceClass c) {
  static_assert(static_cast<unsigned>(pkt::RoceClass::kCount) <= 32);
  constexpr uint32_t kControl = 1u << static_cast<unsigned>(pkt::RoceClass::kAck) |
                                1u << static_cast<unsigned>(pkt::RoceClass::kCnp) |
                                1u << static_cast<unsigned>(pkt::RoceClass::kReadRequest) |
                                1u << static_cast<unsigned>(pkt::RoceClass::kAtomicAck);
  return static_cast<unsigned>(c) < 32 && (kControl >> static_cast<unsigned>(c) & 1);
}

// The level of one request-direction packet, after RequestTracker::OnRequestPacket() gave
// `track` for it on `entry` (nullptr when the table refused the QP). Per-message mode computes
// the level at a request's first packet (or at pick-up of an orphan) and stores it in
// entry->level; later packets and duplicates reuse it. Per-packet mode recomputes and stores it
// for every new packet; duplicates reuse the stored level. Hot path: no allocation.
//
// `ceiling` caps the result (kMaxLevels - 1: no cap). The in-order guard passes the level of the
// QP's packets still held in heddled's egress queues, so that a later packet of the QP never
// overtakes them (docs/storm.md §5); a level computed under the cap is stored capped, so a
// per-message request keeps one level.
//
// Inline: a continuing packet of a per-message request, a duplicate or a control class is
// answered here; computing a level is ComputeLevelCapped(), out of line.
inline uint8_t TagPacket(const LevelConfig& config, QpEntry* entry, const pkt::PacketDesc& desc,
                         const TrackResult& track, uint64_t backlog, uint32_t mtu,
                         uint8_t ceiling = kMaxLevels - 1);

// TagPacket()'s computing part: the level of `entry`'s request, capped, stored in the entry.
uint8_t ComputeLevelCapped(const LevelConfig& config, QpEntry* entry, const TrackResult& track,
                           uint64_t backlog, uint32_t mtu, uint8_t ceiling);

// Byte-weighted request sizes in log2 buckets: bucket b holds the bytes of requests of size in
// [2^b, 2^(b+1)) (bucket 31 also everything larger). One writer (the worker); Snapshot() may run
// on another thread.
class SizeHistogram {
 public:
  static constexpr int kBuckets = 32;

  static int BucketOf(uint64_t size);

  void Add(uint64_t size) {
    if (size == 0) return;
    uint64_t& b = bytes_[BucketOf(size)];
    // Single writer: a relaxed load+store (a plain add on x86), readable by Snapshot().
    std::atomic_ref<uint64_t>(b).store(b + size, std::memory_order_relaxed);
  }
  // A consistent-per-bucket copy for another thread (relaxed loads).
  SizeHistogram Snapshot() const;

  uint64_t bytes(int bucket) const { return bytes_[bucket]; }
  void set_bytes(int bucket, uint64_t v) { bytes_[bucket] = v; }
  uint64_t Total() const;

 private:
  std::array<uint64_t, kBuckets> bytes_{};
};

// now - before, bucket by bucket (the bytes added in one interval by one worker).
SizeHistogram HistogramDelta(const SizeHistogram& now, const SizeHistogram& before);
// aged = aged * keep + fresh, bucket by bucket; keep in [0, 1] (e.g. 0.5 halves old totals each
// interval).
void AgeHistogram(SizeHistogram* aged, const SizeHistogram& fresh, double keep);

// Cutoffs c_1 < ... < c_{K-1} such that each of the K levels carries about 1/K of the bytes in
// `aged_sum`, interpolating geometrically inside a log2 bucket. Entries from K-1 on are 0.
// nullopt if the histogram is empty (keep the current cutoffs).
std::optional<std::array<uint32_t, kMaxLevels - 1>> AutoCutoffs(const SizeHistogram& aged_sum,
                                                                int levels);

// The highest level in force, K - 1 (K clamped to 1..kMaxLevels).
constexpr int TopLevel(const LevelConfig& c) {
  return (c.levels < 1 ? 1 : c.levels > kMaxLevels ? kMaxLevels : c.levels) - 1;
}

// The level of R = `remaining` bytes without a backlog boost (B = 0 or beta = 0), as
// ComputeLevel() gives it, from the configuration's cutoffs and TopLevel() computed by the caller.
inline uint8_t UnboostedLevel(const std::array<uint32_t, kMaxLevels - 1>& cutoffs, int top,
                              uint64_t remaining) {
  int above = 0;
  while (above < top && remaining > cutoffs[above]) ++above;
  return static_cast<uint8_t>(top - above);
}

// TagPacket() with TopLevel(c) computed by the caller (once per burst).
inline uint8_t TagPacketTop(const LevelConfig& c, int top, QpEntry* entry,
                            const pkt::PacketDesc& desc, const TrackResult& track,
                            uint64_t backlog, uint32_t mtu, uint8_t ceiling);

inline uint8_t TagPacket(const LevelConfig& c, QpEntry* entry, const pkt::PacketDesc& desc,
                         const TrackResult& track, uint64_t backlog, uint32_t mtu,
                         uint8_t ceiling) {
  return TagPacketTop(c, TopLevel(c), entry, desc, track, backlog, mtu, ceiling);
}

inline uint8_t TagPacketTop(const LevelConfig& c, int top, QpEntry* entry,
                            const pkt::PacketDesc& desc, const TrackResult& track,
                            uint64_t backlog, uint32_t mtu, uint8_t ceiling) {
  // A level stored or held under an earlier configuration may be >= K after `set storm levels`
  // lowered K: never hand out a level that is not in force.
  if (ceiling > top) ceiling = static_cast<uint8_t>(top);
  if (IsControlClass(desc.roce_class)) return std::min(c.control_level, ceiling);
  if (entry == nullptr || track.outcome == TrackOutcome::kNotTracked) [[unlikely]] {
    return std::min(DefaultLevel(c, mtu), ceiling);
  }
  const bool reuse = track.outcome == TrackOutcome::kDuplicate ||
                     (track.outcome == TrackOutcome::kContinue && c.mode == Mode::kPerMessage);
  if (reuse && (entry->flags & kEntryLevelValid)) return std::min(entry->level, ceiling);
  if (backlog == 0 || c.beta == 0) {
    // No backlog boost: R against the cutoffs, as ComputeLevel() does it, inline.
    const uint8_t level = std::min(
        UnboostedLevel(c.cutoffs, top, RemainingBytes(*entry, track.sent_before, UnknownBytes(c))),
        ceiling);
    entry->level = level;
    entry->flags |= kEntryLevelValid;
    return level;
  }
  return ComputeLevelCapped(c, entry, track, backlog, mtu, ceiling);
}

}  // namespace heddle::storm
