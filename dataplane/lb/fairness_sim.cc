// File: dataplane/lb/fairness_sim.cc
#include "dataplane/lb/fairness_sim.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <random>

#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/pkt/roce.h"

namespace heddle::lb {
namespace {

// Flow-size CDFs as bytes -> cumulative probability (HPCC's traffic_gen, docs/pin.md §6). The
// first interval starts at a small size of our choosing (the files start with a point mass).
constexpr std::pair<double, double> kWebSearch[] = {
    {1000, 0},       {10000, 0.15},   {20000, 0.20},    {30000, 0.30},
    {50000, 0.40},   {80000, 0.53},   {200000, 0.60},   {1000000, 0.70},
    {2000000, 0.80}, {5000000, 0.90}, {10000000, 0.97}, {30000000, 1.0}};
constexpr std::pair<double, double> kAliStorage[] = {
    {64, 0},         {4000, 0.2293},   {8000, 0.6921},   {16000, 0.8061}, {32000, 0.9047},
    {64000, 0.9353}, {128000, 0.9677}, {256000, 0.9753}, {2000000, 1.0}};

double Sample(std::span<const std::pair<double, double>> cdf, double u) {
  for (size_t i = 1; i < cdf.size(); ++i) {
    if (u < cdf[i].second || i + 1 == cdf.size()) {
      const double dc = cdf[i].second - cdf[i - 1].second;
      const double f = dc > 0 ? (u - cdf[i - 1].second) / dc : 0;
      return cdf[i - 1].first + std::clamp(f, 0.0, 1.0) * (cdf[i].first - cdf[i - 1].first);
    }
  }
  return cdf.back().first;
}

struct Template {
  std::vector<uint8_t> bytes;
  pkt::PacketDesc desc;
};

struct Qp {
  // [send?][only, first, middle, last]
  Template tmpl[2][4];
  uint64_t hash = 0;
  uint32_t qpn = 0;
  uint64_t size = 0;
  uint64_t sent = 0;
  bool send = false;
  uint32_t psn = 0;
  double window_pinned = 0;  // bytes of the current pinned message in the current window
};

struct PendingAck {
  uint64_t time;
  uint32_t qp;
  uint32_t psn;
  bool ce;
  bool operator>(const PendingAck& o) const { return time > o.time; }
};

}  // namespace

const char* WorkloadName(Workload w) {
  return w == Workload::kWebSearch ? "websearch" : "alistorage";
}

std::span<const std::pair<double, double>> WorkloadCdf(Workload w) {
  if (w == Workload::kWebSearch) return kWebSearch;
  return kAliStorage;
}

double CdfMean(Workload w) {
  const auto cdf = WorkloadCdf(w);
  double m = 0;
  for (size_t i = 1; i < cdf.size(); ++i) {
    m += (cdf[i].second - cdf[i - 1].second) * (cdf[i].first + cdf[i - 1].first) / 2;
  }
  return m;
}

double CdfByteShareAtOrBelow(Workload w, double t) {
  const auto cdf = WorkloadCdf(w);
  double below = 0;
  for (size_t i = 1; i < cdf.size(); ++i) {
    const double lo = cdf[i - 1].first, hi = cdf[i].first, dc = cdf[i].second - cdf[i - 1].second;
    if (t <= lo) break;
    const double top = std::min(hi, t);
    below += dc * (top - lo) / (hi - lo) * (lo + top) / 2;
  }
  return below / CdfMean(w);
}

double JainIndex(std::span<const double> x) {
  double s = 0, s2 = 0;
  for (double v : x) {
    s += v;
    s2 += v * v;
  }
  return s2 == 0 ? 1.0 : s * s / (static_cast<double>(x.size()) * s2);
}

FairnessResult SimulateFairness(const FairnessParams& p) {
  FairnessResult r;
  const uint32_t n = std::clamp<uint32_t>(p.paths, 1, kMaxPaths);
  PathConfig pc;
  pc.default_paths.entropies = n;
  auto table = PathTable::Build(*PathTableSpecFromConfig(pc, EntropyField::kUdpSourcePort));
  LbConfig lc;
  lc.balancer = p.balancer;
  lc.pin = p.pin;
  lc.pin_policy = p.pin_policy;
  lc.crossing = p.crossing;
  lc.threshold_bytes = p.threshold_bytes;
  lc.seed = p.seed;
  lc.flow_capacity = 1 << 12;
  PinSelector sel(lc, table->get());

  std::mt19937_64 rng(p.seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const auto cdf = WorkloadCdf(p.workload);

  std::vector<Qp> qps(std::max<uint32_t>(p.qps, 1));
  static constexpr uint8_t kOps[2][4] = {
      {pkt::op::kWriteOnly, pkt::op::kWriteFirst, pkt::op::kWriteMiddle, pkt::op::kWriteLast},
      {pkt::op::kSendOnly, pkt::op::kSendFirst, pkt::op::kSendMiddle, pkt::op::kSendLast}};
  for (uint32_t q = 0; q < qps.size(); ++q) {
    pkt::FrameSpec f;
    f.dst_ip4 = {10, 1, static_cast<uint8_t>(q >> 8), static_cast<uint8_t>(q)};
    qps[q].qpn = 0x100 + q;
    for (int s = 0; s < 2; ++s) {
      for (int k = 0; k < 4; ++k) {
        pkt::RoceSpec rs;
        rs.opcode = kOps[s][k];
        rs.dest_qp = qps[q].qpn;
        Template& t = qps[q].tmpl[s][k];
        t.bytes = pkt::BuildRoce(f, rs);
        pkt::Parse(t.bytes.data(), t.bytes.size(), &t.desc);
      }
    }
    qps[q].hash = PinSelector::HashRequest(qps[q].tmpl[0][0].bytes.data(), qps[q].tmpl[0][0].desc);
  }

  std::vector<double> total(n), window(n), queue(n);
  std::vector<uint64_t> queue_t(n);
  const double drain_per_ns = p.host_gbps / (n * p.fabric_load) / 8;  // bytes per ns per path
  const double ns_per_byte = 8 / p.host_gbps;
  std::priority_queue<PendingAck, std::vector<PendingAck>, std::greater<>> acks;
  uint64_t now = 0, window_end = p.window_ns, windows = 0;
  double jain_sum = 0, jain_min = 1, predicted_sum = 0, sum_u2 = 0;
  double bytes_all = 0, bytes_pinned = 0;
  uint64_t marked = 0;

  auto close_window = [&] {
    for (Qp& s : qps) {
      sum_u2 += s.window_pinned * s.window_pinned;
      s.window_pinned = 0;
    }
    double b = 0;
    for (double v : window) b += v;
    if (b > 0) {
      const double j = JainIndex(window);
      jain_sum += j;
      jain_min = std::min(jain_min, j);
      predicted_sum += 1 / (1 + (n - 1) * sum_u2 / (b * b));
      ++windows;
    }
    std::fill(window.begin(), window.end(), 0.0);
    sum_u2 = 0;
  };

  while (now < p.duration_ns) {
    while (!acks.empty() && acks.top().time <= now) {
      const PendingAck a = acks.top();
      acks.pop();
      sel.OnFeedback(qps[a.qp].hash, qps[a.qp].qpn,
                     Feedback{.kind = FeedbackKind::kAck, .psn = a.psn, .ce = a.ce}, now);
    }
    const auto qi = static_cast<uint32_t>(rng() % qps.size());
    Qp& s = qps[qi];
    if (s.sent >= s.size) {
      s.size = std::max<uint64_t>(1, static_cast<uint64_t>(Sample(cdf, uni(rng))));
      s.sent = 0;
      s.send = uni(rng) < p.send_share;
      sum_u2 += s.window_pinned * s.window_pinned;
      s.window_pinned = 0;
      ++r.messages;
    }
    const uint64_t payload = std::min<uint64_t>(p.mtu, s.size - s.sent);
    const bool first = s.sent == 0, last = s.sent + payload >= s.size;
    const int k = first && last ? 0 : first ? 1 : last ? 3 : 2;
    const Template& t = s.tmpl[s.send ? 1 : 0][k];
    pkt::PacketDesc d = t.desc;
    d.psn = s.psn;
    d.payload_len = static_cast<uint16_t>(payload);
    d.dma_length = static_cast<uint32_t>(std::min<uint64_t>(s.size, 0xffffffffu));
    d.ip_len = static_cast<uint16_t>(t.desc.ip_len + payload);
    const PathChoice c = sel.Choose(d, t.bytes.data(), t.bytes.size(), now);
    const double wire = static_cast<double>(d.l3_off) + d.ip_len;
    const uint32_t path = c.path != nullptr ? c.index : 0;

    queue[path] = std::max(0.0, queue[path] - (now - queue_t[path]) * drain_per_ns);
    queue_t[path] = now;
    queue[path] += wire;
    const bool ce = queue[path] > static_cast<double>(p.ecn_threshold_bytes);
    marked += ce;
    acks.push({now + p.rtt_ns + static_cast<uint64_t>(queue[path] / drain_per_ns), qi, s.psn, ce});

    total[path] += wire;
    window[path] += wire;
    bytes_all += wire;
    if (c.verdict == Verdict::kPinned) {
      bytes_pinned += wire;
      s.window_pinned += wire;
    } else {
      sum_u2 += wire * wire;
    }
    s.psn = (s.psn + 1) & kPsnMask;
    s.sent += payload;
    ++r.packets;
    now += static_cast<uint64_t>(std::ceil(wire * ns_per_byte));
    while (now >= window_end) {
      close_window();
      window_end += p.window_ns;
    }
  }

  r.path_bytes.assign(total.begin(), total.end());
  r.jain_overall = JainIndex(total);
  r.jain_window_mean = windows ? jain_sum / windows : 1;
  r.jain_window_min = windows ? jain_min : 1;
  r.jain_window_predicted = windows ? predicted_sum / windows : 1;
  r.pinned_byte_share = bytes_all > 0 ? bytes_pinned / bytes_all : 0;
  r.marked_share = r.packets ? static_cast<double>(marked) / r.packets : 0;
  return r;
}

}  // namespace heddle::lb
