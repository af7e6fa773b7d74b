// File: tools/heddle-sim/lib/report.h
//
// What a run prints and writes: FCT slowdown (FCT ÷ the same flow's FCT alone in an empty
// network) by size bucket — mean, p50, p99, p99.9 —, per-uplink load with Jain's index, drops and
// the other counters, and the run's speed (events/s, delivered packets/s).
//
//   SimResult r = sim->Run();
//   std::cout << FormatReport(r);
//   HEDDLE_RETURN_IF_ERROR(WriteCsv(r, "out/"));   // fct.csv summary.csv ... run.csv
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/heddle-sim/lib/simulator.h"

namespace heddle::sim {

struct BucketStats {
  std::string name;  // "short", "10K-100K", ...
  uint64_t lo = 0;   // sizes in (lo, hi]
  uint64_t hi = 0;
  uint64_t flows = 0;                           // finished flows in the bucket
  double mean = 0, p50 = 0, p99 = 0, p999 = 0;  // slowdown
};

// Nearest-rank percentile of sorted values; q in [0, 1]; 0 for none.
double Percentile(const std::vector<double>& sorted, double q);

// "short" (<= bdp_bytes) and "long", then decades: <= 10 KB, 10K-100K, 100K-1M, 1M-10M, > 10M;
// and "all".
std::vector<BucketStats> SlowdownBuckets(const SimResult& r, uint64_t bdp_bytes);

// The end-of-run report: configuration line, buckets, uplinks, counters, speed.
std::string FormatReport(const SimResult& r);

// fct.csv (one row per flow), summary.csv (buckets), uplinks.csv (bytes per uplink), queues.csv
// (per switch egress port: packets, mean wait, drops, trims), levels.csv (payload bytes per
// priority level), run.csv (counters and speed, one row). Byte-for-byte the same for the same
// run except run.csv (its CPU and wall times).
absl::Status WriteCsv(const SimResult& r, const std::string& dir);

// The run's speed, the two figures every run prints: per second of the run's CPU time on its
// core (a shared machine stretches the wall-clock time, not this).
inline double EventsPerSecond(const SimResult& r) {
  return r.cpu_seconds > 0 ? static_cast<double>(r.events) / r.cpu_seconds : 0;
}
inline double DeliveredPacketsPerSecond(const SimResult& r) {
  return r.cpu_seconds > 0
             ? static_cast<double>(r.data_packets_delivered + r.control_packets_delivered) /
                   r.cpu_seconds
             : 0;
}

}  // namespace heddle::sim
