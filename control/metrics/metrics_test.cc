// File: control/metrics/metrics_test.cc
//
// Scrapes a real MetricsServer over HTTP and checks the text exposition against counters bumped on
// several lcores; also checks start-up failures come back as Status, never as exceptions.
#include "control/metrics/metrics.h"

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "control/metrics/testing/http_get.h"
#include "dataplane/pipeline/stats.h"
#include "dataplane/pkt/parse.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace heddle::metrics {
namespace {

using pipeline::DropReason;
using pkt::RoceClass;
using ::testing::HasSubstr;

using ::heddle::metrics::test_util::HttpGet;

// The text exposition, parsed: samples keyed by name and sorted labels.
struct Exposition {
  using Labels = std::map<std::string, std::string>;
  std::map<std::string, std::map<Labels, double>> samples;  // name -> labels -> value
  std::map<std::string, std::string> help, type;

  double Get(const std::string& name, const Labels& labels) const {
    auto f = samples.find(name);
    if (f == samples.end()) {
      ADD_FAILURE() << "no samples named " << name;
      return -1;
    }
    auto s = f->second.find(labels);
    if (s == f->second.end()) {
      std::string l;
      for (const auto& [k, v] : labels) absl::StrAppend(&l, k, "=", v, " ");
      ADD_FAILURE() << "no sample " << name << "{" << l << "}";
      return -1;
    }
    return s->second;
  }
};

Exposition Parse(const std::string& text) {
  Exposition e;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "# HELP ")) {
      size_t sp = line.find(' ');
      e.help[std::string(line.substr(0, sp))] = std::string(line.substr(sp + 1));
      continue;
    }
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      size_t sp = line.find(' ');
      e.type[std::string(line.substr(0, sp))] = std::string(line.substr(sp + 1));
      continue;
    }
    if (line.front() == '#') continue;
    size_t brace = line.find('{');
    size_t value_at;
    Exposition::Labels labels;
    std::string name;
    if (brace != absl::string_view::npos) {
      name = std::string(line.substr(0, brace));
      size_t end = line.find('}', brace);
      EXPECT_NE(end, absl::string_view::npos) << line;
      // Our label values never contain '"' or ','; split on the separators directly.
      for (absl::string_view kv :
           absl::StrSplit(line.substr(brace + 1, end - brace - 1), ',', absl::SkipEmpty())) {
        size_t eq = kv.find('=');
        std::string v(kv.substr(eq + 1));
        EXPECT_TRUE(v.size() >= 2 && v.front() == '"' && v.back() == '"') << line;
        labels[std::string(kv.substr(0, eq))] = v.substr(1, v.size() - 2);
      }
      value_at = end + 2;
    } else {
      size_t sp = line.find(' ');
      name = std::string(line.substr(0, sp));
      value_at = sp + 1;
    }
    absl::string_view value = line.substr(value_at);
    value = value.substr(0, value.find(' '));  // drop a timestamp if any
    double v = 0;
    EXPECT_TRUE(absl::SimpleAtod(value, &v)) << line;
    EXPECT_TRUE(e.samples[name].emplace(labels, v).second) << "duplicate sample: " << line;
  }
  return e;
}

std::string Serialize(const prometheus::Collectable& c) {
  std::ostringstream os;
  prometheus::TextSerializer().Serialize(os, c.Collect());
  return os.str();
}

// Two ports, two worker lcores (ids 3 and 7), counters bumped on both lcores.
class MetricsTest : public ::testing::Test {
 protected:
  MetricsTest() : stats_(2, {3, 7}) {
    pipeline::LcoreStats* a = stats_.lcore(0);
    pipeline::LcoreStats* b = stats_.lcore(1);
    a->port[0].rx_packets.Add(10);
    b->port[0].rx_packets.Add(32);
    a->port[0].rx_bytes.Add(1000);
    b->port[0].rx_bytes.Add(4000);
    a->port[1].tx_packets.Add(7);
    b->port[1].tx_packets.Add(8);
    a->port[1].tx_bytes.Add(700);
    b->port[1].tx_bytes.Add(800);
    a->port[1].rx_packets.Add(3);
    a->port[0].roce_rx_packets[static_cast<int>(RoceClass::kWrite)].Add(6);
    b->port[0].roce_rx_packets[static_cast<int>(RoceClass::kWrite)].Add(4);
    b->port[1].roce_rx_packets[static_cast<int>(RoceClass::kAck)].Add(9);
    a->port[0].roce_rx_packets[static_cast<int>(RoceClass::kNone)].Add(100);
    a->drops[static_cast<int>(DropReason::kTxFull)].Add(2);
    b->drops[static_cast<int>(DropReason::kTxFull)].Add(5);
    b->drops[static_cast<int>(DropReason::kIcrcBad)].Add(1);
    a->busy_loops.Add(11);
    a->idle_loops.Add(1000);
    b->busy_loops.Add(22);
    b->idle_loops.Add(2000);
    a->storm_level_packets[1].Add(3);
    b->storm_level_packets[1].Add(4);
    b->storm_level_bytes[3].Add(5000);
    a->storm_table_full.Add(2);
    a->egress_level_tx[2].Add(10);
    b->egress_level_tx[2].Add(5);
    b->egress_level_tx[5].Add(99);  // beyond storm_levels: not exported
    b->egress_level_drops[0].Add(3);
    a->egress_level_depth[3].store(4, std::memory_order_relaxed);
    b->egress_level_depth[3].store(6, std::memory_order_relaxed);
  }

  MetricsSources Sources() {
    MetricsSources s;
    s.snapshot = [this] {
      snapshots_.fetch_add(1, std::memory_order_relaxed);
      return stats_.Snapshot();
    };
    s.hw_stats = [] { return std::vector<HwPortStats>{{1, 2, 3, 4}, {10, 20, 30, 40}}; };
    s.ports = {{"host0", "host"}, {"uplink0", "uplink"}};
    s.version = "1.2.3-test";
    s.storm_levels = 4;
    s.storm_join = [] {
      StormJoinCounters j;
      j.joined_local = 10;
      j.joined_remote = 20;
      j.no_pair = 3;
      j.no_entry = 4;
      j.ring_full = 5;
      j.malformed = 6;
      j.acks_advanced = 25;
      j.acks_old = 4;
      j.acks_ahead = 1;
      j.fabric_guarded = 7;
      return j;
    };
    s.lb = [] {
      LbMetrics l;
      l.balancers = {"ecmp", "rps", "reps"};
      l.balancer = "reps";
      l.threshold_bytes = 100000;
      l.pinned_flows = 90;
      l.sprayed_flows = 10;
      l.pinned_packets = 400;
      l.sprayed_packets = 6000;
      l.stateless_packets = 50;
      l.pinned_bytes = 420000;
      l.sprayed_bytes = 6300000;
      l.stateless_bytes = 3000;
      l.flows_live = 12;
      l.flow_capacity = 65536;
      l.sets = {{0, {{2000, 2}, {1000, 1}}, 0.9}, {1, {{0, 0}}, 0}};
      l.events = {{"malformed", 3}, {"join-no-index", 7}};
      return l;
    };
    s.storm_reads = [] {
      StormReadCounters r;
      r.sized = 30;
      r.unknown = 8;
      r.orphans = 2;
      r.late = 1;
      r.duplicates = 9;
      r.psn_jumps = 3;
      r.abandoned = 4;
      r.overrun = 5;
      r.malformed = 6;
      r.table_full = 11;
      r.window_guarded = 12;
      r.join = true;
      r.local = 21;
      r.remote = 22;
      r.no_pair = 23;
      r.no_entry = 24;
      r.ring_full = 25;
      r.join_malformed = 26;
      r.pending_full = 27;
      r.stale = 28;
      r.too_late = 29;
      return r;
    };
    return s;
  }

  pipeline::DataplaneStats stats_;
  std::atomic<int> snapshots_{0};
};

TEST_F(MetricsTest, HttpScrapeSumsCountersAcrossLcores) {
  auto server = MetricsServer::Start("127.0.0.1:0", Sources());
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE((*server)->port(), 0);
  EXPECT_EQ((*server)->url(), absl::StrCat("http://127.0.0.1:", (*server)->port(), "/metrics"));

  auto body = HttpGet((*server)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  Exposition e = Parse(*body);

  const Exposition::Labels host = {{"port", "host0"}, {"role", "host"}};
  const Exposition::Labels uplink = {{"port", "uplink0"}, {"role", "uplink"}};
  EXPECT_EQ(e.Get("heddle_port_rx_packets_total", host), 42);
  EXPECT_EQ(e.Get("heddle_port_rx_packets_total", uplink), 3);
  EXPECT_EQ(e.Get("heddle_port_rx_bytes_total", host), 5000);
  EXPECT_EQ(e.Get("heddle_port_rx_bytes_total", uplink), 0);
  EXPECT_EQ(e.Get("heddle_port_tx_packets_total", host), 0);
  EXPECT_EQ(e.Get("heddle_port_tx_packets_total", uplink), 15);
  EXPECT_EQ(e.Get("heddle_port_tx_bytes_total", uplink), 1500);

  EXPECT_EQ(e.Get("heddle_port_hw_rx_missed_total", host), 1);
  EXPECT_EQ(e.Get("heddle_port_hw_rx_errors_total", host), 2);
  EXPECT_EQ(e.Get("heddle_port_hw_tx_errors_total", host), 3);
  EXPECT_EQ(e.Get("heddle_port_hw_rx_nombuf_total", host), 4);
  EXPECT_EQ(e.Get("heddle_port_hw_rx_missed_total", uplink), 10);
  EXPECT_EQ(e.Get("heddle_port_hw_rx_nombuf_total", uplink), 40);

  EXPECT_EQ(e.Get("heddle_dataplane_drops_total", {{"reason", "tx-full"}}), 7);
  EXPECT_EQ(e.Get("heddle_dataplane_drops_total", {{"reason", "icrc-bad"}}), 1);
  EXPECT_EQ(e.Get("heddle_dataplane_drops_total", {{"reason", "eth-truncated"}}), 0);

  EXPECT_EQ(e.Get("heddle_roce_rx_packets_total", {{"port", "host0"}, {"class", "write"}}), 10);
  EXPECT_EQ(e.Get("heddle_roce_rx_packets_total", {{"port", "uplink0"}, {"class", "ack"}}), 9);
  EXPECT_EQ(e.Get("heddle_roce_rx_packets_total", {{"port", "uplink0"}, {"class", "cnp"}}), 0);

  EXPECT_EQ(e.Get("heddle_lcore_poll_loops_total", {{"lcore", "3"}, {"state", "busy"}}), 11);
  EXPECT_EQ(e.Get("heddle_lcore_poll_loops_total", {{"lcore", "3"}, {"state", "idle"}}), 1000);
  EXPECT_EQ(e.Get("heddle_lcore_poll_loops_total", {{"lcore", "7"}, {"state", "busy"}}), 22);
  EXPECT_EQ(e.Get("heddle_lcore_poll_loops_total", {{"lcore", "7"}, {"state", "idle"}}), 2000);
  EXPECT_EQ(e.samples["heddle_lcore_poll_loops_total"].size(), 4u);

  EXPECT_EQ(e.Get("heddle_build_info", {{"version", "1.2.3-test"}}), 1);
  EXPECT_GE(e.Get("heddle_uptime_seconds", {}), 0);
  // Exactly one snapshot serves the whole scrape.
  EXPECT_EQ(snapshots_.load(), 1);

  // A second scrape sees new counts.
  stats_.lcore(1)->port[0].rx_packets.Add(8);
  body = HttpGet((*server)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(Parse(*body).Get("heddle_port_rx_packets_total", host), 50);
  EXPECT_EQ(snapshots_.load(), 2);
}

TEST_F(MetricsTest, EveryDropReasonAndRoceClassIsExported) {
  DataplaneCollectable c(Sources());
  Exposition e = Parse(Serialize(c));
  const auto& drops = e.samples["heddle_dataplane_drops_total"];
  EXPECT_EQ(drops.size(), static_cast<size_t>(pipeline::kNumDropReasons));
  pipeline::StatsSnapshot snap = stats_.Snapshot();
  for (int r = 0; r < pipeline::kNumDropReasons; ++r) {
    const char* name = pipeline::DropReasonName(static_cast<DropReason>(r));
    EXPECT_EQ(e.Get("heddle_dataplane_drops_total", {{"reason", name}}),
              static_cast<double>(snap.drops[r]))
        << name;
  }

  const auto& roce = e.samples["heddle_roce_rx_packets_total"];
  EXPECT_EQ(roce.size(), 2u * (pipeline::kNumRoceClasses - 1));
  for (const auto& [labels, value] : roce) {
    EXPECT_NE(labels.at("class"), "none");
    EXPECT_EQ(labels.size(), 2u);
  }
  for (const char* port : {"host0", "uplink0"}) {
    for (int c = 1; c < pipeline::kNumRoceClasses; ++c) {
      e.Get("heddle_roce_rx_packets_total",
            {{"port", port}, {"class", pkt::RoceClassName(static_cast<RoceClass>(c))}});
    }
  }
}

TEST_F(MetricsTest, FamiliesHaveTypesHelpAndConventionalNames) {
  DataplaneCollectable c(Sources());
  std::vector<prometheus::MetricFamily> families = c.Collect();
  std::set<std::string> names;
  for (const auto& f : families) {
    EXPECT_TRUE(names.insert(f.name).second) << "duplicate family " << f.name;
    EXPECT_EQ(f.name.rfind("heddle_", 0), 0u) << f.name;
    EXPECT_GT(f.help.size(), 20u) << f.name;
    if (f.type == prometheus::MetricType::Counter) {
      EXPECT_TRUE(absl::EndsWith(f.name, "_total")) << f.name;
    } else {
      EXPECT_EQ(f.type, prometheus::MetricType::Gauge) << f.name;
      EXPECT_FALSE(absl::EndsWith(f.name, "_total")) << f.name;
    }
    for (const auto& m : f.metric) {
      for (const auto& l : m.label) {
        EXPECT_TRUE(l.name == "port" || l.name == "role" || l.name == "reason" ||
                    l.name == "class" || l.name == "lcore" || l.name == "state" ||
                    l.name == "version" || l.name == "level" || l.name == "result" ||
                    l.name == "balancer" || l.name == "verdict" || l.name == "set" ||
                    l.name == "path" || l.name == "event")
            << f.name << " has an unexpected label " << l.name;
      }
    }
  }
  std::set<std::string> want = {
      "heddle_port_rx_packets_total",   "heddle_port_rx_bytes_total",
      "heddle_port_tx_packets_total",   "heddle_port_tx_bytes_total",
      "heddle_port_hw_rx_missed_total", "heddle_port_hw_rx_errors_total",
      "heddle_port_hw_tx_errors_total", "heddle_port_hw_rx_nombuf_total",
      "heddle_dataplane_drops_total",   "heddle_roce_rx_packets_total",
      "heddle_lcore_poll_loops_total",  "heddle_build_info",
      "heddle_uptime_seconds",          "heddle_storm_level_packets_total",
      "heddle_storm_level_bytes_total", "heddle_storm_qp_table_full_total"};
  want.insert({"heddle_storm_egress_tx_packets_total", "heddle_storm_egress_drops_total",
               "heddle_storm_egress_queue_depth", "heddle_storm_join_total",
               "heddle_storm_acks_total", "heddle_storm_fabric_guarded_total",
               "heddle_storm_read_streams_total", "heddle_storm_read_responses_total",
               "heddle_storm_response_window_guarded_total", "heddle_storm_read_joins_total"});
  want.insert({"heddle_lb_balancer", "heddle_lb_pin_threshold_bytes", "heddle_lb_flows_total",
               "heddle_lb_packets_total", "heddle_lb_bytes_total", "heddle_lb_path_bytes_total",
               "heddle_lb_path_packets_total", "heddle_lb_path_jain_index",
               "heddle_lb_flow_entries", "heddle_lb_events_total"});
  EXPECT_EQ(names, want);

  Exposition e = Parse(Serialize(c));
  EXPECT_EQ(e.type["heddle_port_rx_packets_total"], "counter");
  EXPECT_EQ(e.type["heddle_dataplane_drops_total"], "counter");
  EXPECT_EQ(e.type["heddle_build_info"], "gauge");
  EXPECT_EQ(e.type["heddle_uptime_seconds"], "gauge");
  EXPECT_EQ(e.type["heddle_storm_egress_tx_packets_total"], "counter");
  EXPECT_EQ(e.type["heddle_storm_egress_drops_total"], "counter");
  EXPECT_EQ(e.type["heddle_storm_egress_queue_depth"], "gauge");
  EXPECT_FALSE(e.help["heddle_lcore_poll_loops_total"].empty());
}

TEST_F(MetricsTest, UptimeFollowsTheInjectedClockAndHwFamiliesAreOptional) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point t = Clock::time_point(std::chrono::seconds(1000));
  MetricsSources s = Sources();
  s.hw_stats = nullptr;
  s.ports.resize(1);  // the second port has no configured label
  DataplaneCollectable c(std::move(s), [&t] { return t; });
  t += std::chrono::milliseconds(42500);

  Exposition e = Parse(Serialize(c));
  EXPECT_DOUBLE_EQ(e.Get("heddle_uptime_seconds", {}), 42.5);
  EXPECT_EQ(e.samples.count("heddle_port_hw_rx_missed_total"), 0u);
  EXPECT_EQ(e.Get("heddle_storm_level_packets_total", {{"level", "1"}}), 7);
  EXPECT_EQ(e.Get("heddle_storm_level_bytes_total", {{"level", "3"}}), 5000);
  EXPECT_EQ(e.Get("heddle_storm_level_packets_total", {{"level", "0"}}), 0);
  EXPECT_EQ(e.samples["heddle_storm_level_packets_total"].size(), 4u);
  EXPECT_EQ(e.Get("heddle_storm_qp_table_full_total", {}), 2);
  EXPECT_EQ(e.Get("heddle_port_tx_packets_total", {{"port", "port1"}, {"role", "unknown"}}), 15);
}

TEST_F(MetricsTest, StormEgressFamiliesSumLcoresPerConfiguredLevel) {
  DataplaneCollectable c(Sources());
  Exposition e = Parse(Serialize(c));
  EXPECT_EQ(e.Get("heddle_storm_egress_tx_packets_total", {{"level", "2"}}), 15);
  EXPECT_EQ(e.Get("heddle_storm_egress_tx_packets_total", {{"level", "0"}}), 0);
  EXPECT_EQ(e.Get("heddle_storm_egress_drops_total", {{"level", "0"}}), 3);
  EXPECT_EQ(e.Get("heddle_storm_egress_drops_total", {{"level", "2"}}), 0);
  EXPECT_EQ(e.Get("heddle_storm_egress_queue_depth", {{"level", "3"}}), 10);
  EXPECT_EQ(e.Get("heddle_storm_egress_queue_depth", {{"level", "1"}}), 0);
  // Exactly the configured levels 0..3: level 5's count is not exported.
  for (const char* name : {"heddle_storm_egress_tx_packets_total",
                           "heddle_storm_egress_drops_total", "heddle_storm_egress_queue_depth"}) {
    ASSERT_EQ(e.samples[name].size(), 4u) << name;
    int level = 0;
    for (const auto& [labels, value] : e.samples[name]) {
      EXPECT_EQ(labels, (Exposition::Labels{{"level", absl::StrCat(level++)}})) << name;
    }
  }

  // The gauge follows the workers' stores down as well as up; without storm, no family at all.
  stats_.lcore(0)->egress_level_depth[3].store(0, std::memory_order_relaxed);
  EXPECT_EQ(Parse(Serialize(c)).Get("heddle_storm_egress_queue_depth", {{"level", "3"}}), 6);
  MetricsSources off = Sources();
  off.storm_levels = 0;
  DataplaneCollectable c_off(std::move(off));
  Exposition e_off = Parse(Serialize(c_off));
  EXPECT_EQ(e_off.samples.count("heddle_storm_egress_tx_packets_total"), 0u);
  EXPECT_EQ(e_off.samples.count("heddle_storm_egress_queue_depth"), 0u);
}

TEST_F(MetricsTest, StormJoinFamiliesByResult) {
  DataplaneCollectable c(Sources());
  Exposition e = Parse(Serialize(c));
  EXPECT_EQ(e.Get("heddle_storm_join_total", {{"result", "joined_local"}}), 10);
  EXPECT_EQ(e.Get("heddle_storm_join_total", {{"result", "joined_remote"}}), 20);
  EXPECT_EQ(e.Get("heddle_storm_join_total", {{"result", "no_pair"}}), 3);
  EXPECT_EQ(e.Get("heddle_storm_join_total", {{"result", "no_entry"}}), 4);
  EXPECT_EQ(e.Get("heddle_storm_join_total", {{"result", "ring_full"}}), 5);
  EXPECT_EQ(e.Get("heddle_storm_join_total", {{"result", "malformed"}}), 6);
  EXPECT_EQ(e.samples["heddle_storm_join_total"].size(), 6u);
  EXPECT_EQ(e.Get("heddle_storm_acks_total", {{"result", "advanced"}}), 25);
  EXPECT_EQ(e.Get("heddle_storm_acks_total", {{"result", "old"}}), 4);
  EXPECT_EQ(e.Get("heddle_storm_acks_total", {{"result", "ahead"}}), 1);
  EXPECT_EQ(e.Get("heddle_storm_fabric_guarded_total", {}), 7);
  EXPECT_EQ(e.type["heddle_storm_join_total"], "counter");
  // Optional: without the source (or without storm) the families are not exported.
  MetricsSources none = Sources();
  none.storm_join = nullptr;
  DataplaneCollectable c_none(std::move(none));
  Exposition e_none = Parse(Serialize(c_none));
  EXPECT_EQ(e_none.samples.count("heddle_storm_join_total"), 0u);
  EXPECT_EQ(e_none.samples.count("heddle_storm_fabric_guarded_total"), 0u);
  MetricsSources off = Sources();
  off.storm_levels = 0;
  DataplaneCollectable c_off(std::move(off));
  EXPECT_EQ(Parse(Serialize(c_off)).samples.count("heddle_storm_acks_total"), 0u);
}

TEST_F(MetricsTest, StormReadFamiliesByResultAndReason) {
  DataplaneCollectable c(Sources());
  Exposition e = Parse(Serialize(c));
  EXPECT_EQ(e.Get("heddle_storm_read_streams_total", {{"result", "sized"}}), 30);
  EXPECT_EQ(e.Get("heddle_storm_read_streams_total", {{"result", "unknown"}}), 8);
  EXPECT_EQ(e.Get("heddle_storm_read_streams_total", {{"result", "orphan"}}), 2);
  EXPECT_EQ(e.Get("heddle_storm_read_streams_total", {{"result", "late"}}), 1);
  EXPECT_EQ(e.samples["heddle_storm_read_streams_total"].size(), 4u);
  EXPECT_EQ(e.Get("heddle_storm_read_responses_total", {{"reason", "duplicate"}}), 9);
  EXPECT_EQ(e.Get("heddle_storm_read_responses_total", {{"reason", "psn_jump"}}), 3);
  EXPECT_EQ(e.Get("heddle_storm_read_responses_total", {{"reason", "abandoned"}}), 4);
  EXPECT_EQ(e.Get("heddle_storm_read_responses_total", {{"reason", "overrun"}}), 5);
  EXPECT_EQ(e.Get("heddle_storm_read_responses_total", {{"reason", "malformed"}}), 6);
  EXPECT_EQ(e.Get("heddle_storm_read_responses_total", {{"reason", "table_full"}}), 11);
  EXPECT_EQ(e.Get("heddle_storm_response_window_guarded_total", {}), 12);
  EXPECT_EQ(e.Get("heddle_storm_read_joins_total", {{"result", "local"}}), 21);
  EXPECT_EQ(e.Get("heddle_storm_read_joins_total", {{"result", "remote"}}), 22);
  EXPECT_EQ(e.Get("heddle_storm_read_joins_total", {{"result", "no_pair"}}), 23);
  EXPECT_EQ(e.Get("heddle_storm_read_joins_total", {{"result", "no_entry"}}), 24);
  EXPECT_EQ(e.Get("heddle_storm_read_joins_total", {{"result", "ring_full"}}), 25);
  EXPECT_EQ(e.Get("heddle_storm_read_joins_total", {{"result", "malformed"}}), 26);
  EXPECT_EQ(e.Get("heddle_storm_read_joins_total", {{"result", "pending_full"}}), 27);
  EXPECT_EQ(e.Get("heddle_storm_read_joins_total", {{"result", "stale"}}), 28);
  EXPECT_EQ(e.Get("heddle_storm_read_joins_total", {{"result", "too_late"}}), 29);
  EXPECT_EQ(e.type["heddle_storm_read_joins_total"], "counter");
  // Without the join (egress backlog source) the streams are still exported, the joins not.
  MetricsSources no_join = Sources();
  no_join.storm_reads = [] {
    StormReadCounters r;
    r.unknown = 5;
    return r;
  };
  DataplaneCollectable c_no_join(std::move(no_join));
  Exposition e_no_join = Parse(Serialize(c_no_join));
  EXPECT_EQ(e_no_join.Get("heddle_storm_read_streams_total", {{"result", "unknown"}}), 5);
  EXPECT_EQ(e_no_join.samples.count("heddle_storm_read_joins_total"), 0u);
  MetricsSources off = Sources();
  off.storm_levels = 0;
  DataplaneCollectable c_off(std::move(off));
  EXPECT_EQ(Parse(Serialize(c_off)).samples.count("heddle_storm_read_streams_total"), 0u);
}

TEST_F(MetricsTest, LbFamiliesPerBalancerVerdictAndPath) {
  DataplaneCollectable c(Sources());
  Exposition e = Parse(Serialize(c));
  EXPECT_EQ(e.Get("heddle_lb_balancer", {{"balancer", "reps"}}), 1);
  EXPECT_EQ(e.Get("heddle_lb_balancer", {{"balancer", "rps"}}), 0);
  EXPECT_EQ(e.samples["heddle_lb_balancer"].size(), 3u);
  EXPECT_EQ(e.Get("heddle_lb_pin_threshold_bytes", {}), 100000);
  EXPECT_EQ(e.Get("heddle_lb_flows_total", {{"verdict", "pinned"}}), 90);
  EXPECT_EQ(e.Get("heddle_lb_flows_total", {{"verdict", "sprayed"}}), 10);
  EXPECT_EQ(e.Get("heddle_lb_packets_total", {{"verdict", "stateless"}}), 50);
  EXPECT_EQ(e.Get("heddle_lb_bytes_total", {{"verdict", "sprayed"}}), 6300000);
  EXPECT_EQ(e.Get("heddle_lb_path_bytes_total", {{"path", "0"}, {"set", "0"}}), 2000);
  EXPECT_EQ(e.Get("heddle_lb_path_packets_total", {{"path", "1"}, {"set", "0"}}), 1);
  EXPECT_EQ(e.samples["heddle_lb_path_bytes_total"].size(), 3u);  // one per configured path
  EXPECT_DOUBLE_EQ(e.Get("heddle_lb_path_jain_index", {{"set", "0"}}), 0.9);
  EXPECT_EQ(e.Get("heddle_lb_flow_entries", {{"state", "live"}}), 12);
  EXPECT_EQ(e.Get("heddle_lb_events_total", {{"event", "join-no-index"}}), 7);
  EXPECT_EQ(e.type["heddle_lb_path_bytes_total"], "counter");
  EXPECT_EQ(e.type["heddle_lb_path_jain_index"], "gauge");
  // Optional: without lb the families are not exported.
  MetricsSources none = Sources();
  none.lb = nullptr;
  DataplaneCollectable c_none(std::move(none));
  EXPECT_EQ(Parse(Serialize(c_none)).samples.count("heddle_lb_flows_total"), 0u);
}

TEST_F(MetricsTest, FwdArtifactFamiliesByResult) {
  MetricsSources src = Sources();
  src.fwd = [] {
    return FwdMetrics{
        .installs = 5, .rejected = 2, .rollbacks = 1, .generation = 6, .installed = true};
  };
  DataplaneCollectable c(std::move(src));
  Exposition e = Parse(Serialize(c));
  EXPECT_EQ(e.Get("heddle_fwd_artifact_installs_total", {{"result", "installed"}}), 5);
  EXPECT_EQ(e.Get("heddle_fwd_artifact_installs_total", {{"result", "rejected"}}), 2);
  EXPECT_EQ(e.Get("heddle_fwd_artifact_installs_total", {{"result", "rolled_back"}}), 1);
  EXPECT_EQ(e.Get("heddle_fwd_artifact_generation", {}), 6);
  EXPECT_EQ(e.Get("heddle_fwd_artifact_installed", {}), 1);
  EXPECT_EQ(e.type["heddle_fwd_artifact_installs_total"], "counter");
  EXPECT_EQ(e.type["heddle_fwd_artifact_generation"], "gauge");
  // Optional: without fwd the families are not exported.
  DataplaneCollectable c_none(Sources());
  EXPECT_EQ(Parse(Serialize(c_none)).samples.count("heddle_fwd_artifact_generation"), 0u);
}

TEST_F(MetricsTest, SecondServerOnTheSamePortIsAStatusNotAnException) {
  auto first = MetricsServer::Start("127.0.0.1:0", Sources());
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string listen = absl::StrCat("127.0.0.1:", (*first)->port());
  absl::StatusOr<std::unique_ptr<MetricsServer>> second;
  ASSERT_NO_THROW(second = MetricsServer::Start(listen, Sources()));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("metrics.listen " + listen));
  EXPECT_THAT(second.status().message(), HasSubstr("address already in use"));
  EXPECT_THAT(second.status().message(), HasSubstr("metrics.enabled: false"));
  // The first server still serves.
  EXPECT_TRUE(HttpGet((*first)->port(), "/metrics").ok());
}

TEST_F(MetricsTest, MalformedListenAddressesAreRejected) {
  for (const char* listen :
       {"garbage", "", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:-1",
        "127.0.0.1:94x4", "300.1.2.3:9464", "localhost:9464", ":9464", "[::1", "[::1]9464",
        "[nonsense]:9464", "127.0.0.1:9464,127.0.0.1:9465"}) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> s;
    ASSERT_NO_THROW(s = MetricsServer::Start(listen, Sources())) << listen;
    ASSERT_FALSE(s.ok()) << listen;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << listen;
    EXPECT_THAT(s.status().message(), HasSubstr("metrics.listen")) << listen;
  }
}

TEST_F(MetricsTest, AddressNotOnThisHostIsExplained) {
  // TEST-NET-1 (RFC 5737) is never assigned to a local interface.
  auto s = MetricsServer::Start("192.0.2.1:0", Sources());
  if (s.ok()) GTEST_SKIP() << "this host allows binding non-local addresses (ip_nonlocal_bind)";
  EXPECT_THAT(s.status().message(), HasSubstr("address not available"));
}

TEST_F(MetricsTest, MissingSnapshotSourceIsRejected) {
  MetricsSources s = Sources();
  s.snapshot = nullptr;
  auto server = MetricsServer::Start("127.0.0.1:0", std::move(s));
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace heddle::metrics
