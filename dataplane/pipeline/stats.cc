#include "dataplane/pipeline/stats.h"

#include <cassert>
#include <cstddef>

namespace heddle::pipeline {
namespace {

constexpr const char* kDropNames[] = {
#define HEDDLE_PIPELINE_NAME_(e, n, d) n,
    HEDDLE_FOREACH_DROP_REASON(HEDDLE_PIPELINE_NAME_)
#undef HEDDLE_PIPELINE_NAME_
};
constexpr const char* kDropDescs[] = {
#define HEDDLE_PIPELINE_DESC_(e, n, d) d,
    HEDDLE_FOREACH_DROP_REASON(HEDDLE_PIPELINE_DESC_)
#undef HEDDLE_PIPELINE_DESC_
};
static_assert(sizeof(kDropNames) / sizeof(kDropNames[0]) == kNumDropReasons);

// Parse errors 1..N are the first drop reasons, in the same order (the drop list starts with the
// parser's failure list); DropReasonFromParse() relies on it.
constexpr int kNumParseErrors = static_cast<int>(pkt::ParseError::kCount) - 1;  // minus kOk
static_assert(static_cast<int>(DropReason::kRoceNoIcrc) == kNumParseErrors - 1);
static_assert(static_cast<int>(pkt::ParseError::kRoceNoIcrc) == kNumParseErrors);

}  // namespace

const char* DropReasonName(DropReason r) {
  auto i = static_cast<size_t>(r);
  return i < static_cast<size_t>(kNumDropReasons) ? kDropNames[i] : "invalid";
}

const char* DropReasonDescription(DropReason r) {
  auto i = static_cast<size_t>(r);
  return i < static_cast<size_t>(kNumDropReasons) ? kDropDescs[i] : "invalid";
}

DropReason DropReasonFromParse(pkt::ParseError e) {
  assert(e != pkt::ParseError::kOk && e < pkt::ParseError::kCount);
  return static_cast<DropReason>(static_cast<int>(e) - 1);
}

DataplaneStats::DataplaneStats(int num_ports, std::vector<unsigned> worker_lcore_ids)
    : num_ports_(num_ports),
      lcore_ids_(std::move(worker_lcore_ids)),
      per_lcore_(new LcoreStats[lcore_ids_.empty() ? 1 : lcore_ids_.size()]) {
  assert(num_ports_ >= 0 && num_ports_ <= kMaxPorts);
}

StatsSnapshot DataplaneStats::Snapshot() const {
  StatsSnapshot s;
  s.ports.resize(num_ports_);
  for (size_t l = 0; l < lcore_ids_.size(); ++l) {
    const LcoreStats& ls = per_lcore_[l];
    for (int p = 0; p < num_ports_; ++p) {
      const PortCounters& pc = ls.port[p];
      PortSnapshot& ps = s.ports[p];
      ps.rx_packets += pc.rx_packets.Get();
      ps.rx_bytes += pc.rx_bytes.Get();
      ps.tx_packets += pc.tx_packets.Get();
      ps.tx_bytes += pc.tx_bytes.Get();
      for (int c = 0; c < kNumRoceClasses; ++c)
        ps.roce_rx_packets[c] += pc.roce_rx_packets[c].Get();
    }
    for (int r = 0; r < kNumDropReasons; ++r) s.drops[r] += ls.drops[r].Get();
    for (int k = 0; k < kMaxStormLevels; ++k) {
      s.storm_level_packets[k] += ls.storm_level_packets[k].Get();
      s.storm_level_bytes[k] += ls.storm_level_bytes[k].Get();
      s.egress_level_tx[k] += ls.egress_level_tx[k].Get();
      s.egress_level_drops[k] += ls.egress_level_drops[k].Get();
      s.egress_level_depth[k] += ls.egress_level_depth[k].load(std::memory_order_relaxed);
    }
    s.storm_table_full += ls.storm_table_full.Get();
    s.lcores.push_back(
        LcoreSnapshot{lcore_ids_[l], ls.busy_loops.Get(), ls.idle_loops.Get(), ls.bursts.Get()});
  }
  return s;
}

}  // namespace heddle::pipeline
