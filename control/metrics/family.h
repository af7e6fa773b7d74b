// File: control/metrics/family.h
//
// Building Prometheus metric families by hand for a Collectable that snapshots its numbers at
// scrape time (heddled's exporter, heddle-relay's):
//
//   prometheus::MetricFamily f = NewFamily("heddle_x_total", "What it counts", MetricType::Counter);
//   AddSample(f, {{"port", "uplink0"}}, 42);
#pragma once

#include <utility>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace heddle::metrics {

inline prometheus::MetricFamily NewFamily(const char* name, const char* help,
                                          prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

// One sample: a counter's or a gauge's value, by the family's type.
inline void AddSample(prometheus::MetricFamily& f,
                      std::vector<prometheus::ClientMetric::Label> labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

}  // namespace heddle::metrics
