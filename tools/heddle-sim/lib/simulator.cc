#include "tools/heddle-sim/lib/simulator.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "control/nuwa/compiler.h"
#include "dataplane/fwd/artifact.h"
#include "dataplane/fwd/hash_model.h"
#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"
#include "dataplane/storm/tracker.h"
#include "tools/heddle-sim/lib/rng.h"

namespace heddle::sim {
namespace {

constexpr uint32_t kNil = 0xffffffffu;
constexpr int kMaxPrio = storm::kMaxLevels;
constexpr size_t kHeaderBuf = 96;  // Ethernet + IPv4 + UDP + BTH + RETH/AETH fit

enum EventType : uint8_t {
  kTxDone,     // a = port: its packet b finished serializing
  kArrive,     // a = port: the head of its wire arrives at the peer port
  kPfc,        // a = port: b = priority | on << 8 (pause on/off for that egress port)
  kFlowStart,  // a = flow
  kQpWake,     // a = QP: its rate limiter allows the next packet
  kRto,        // a = QP: retransmission timer
  kPoisson,    // a = host: next Poisson arrival
};

enum PacketKind : uint8_t { kData, kAck, kNak, kCnp };
enum PacketFlag : uint8_t { kCe = 1, kFirstPkt = 2, kLastPkt = 4, kTrimmed = 8 };

struct Packet {
  uint32_t next = kNil;  // the queue it waits in, or the free list
  uint32_t qp = 0;
  uint32_t psn = 0;     // unwrapped; on the wire & 0xffffff. ACK/NAK: the receiver's next PSN
  uint32_t sack = 0;    // SR ACK: the PSN this ACK acknowledges selectively
  uint32_t hash_x = 0;  // H(0, key) ^ H(0, 0): a switch's hash is its constant ^ this
  uint32_t dst_ip = 0;
  uint32_t dst = 0;      // destination host
  uint32_t in_port = 0;  // the port it entered the current switch through (PFC)
  uint32_t wire = 0;
  uint32_t payload = 0;
  TimePs enq = 0;
  uint8_t kind = kData;
  uint8_t prio = 0;
  uint8_t flags = 0;
};

struct Queue {
  uint32_t head = kNil;
  uint32_t tail = kNil;
  uint64_t bytes = 0;
};

struct Port {
  uint32_t node = 0;  // < hosts: a host; else hosts + switch index
  uint32_t peer = kNil;
  uint32_t ps_per_byte_q8 = 0;  // serialization: bytes * this >> 8 picoseconds
  TimePs latency = 0;
  bool alive = true;
  bool busy = false;
  bool host = false;
  uint8_t paused = 0;      // priorities the peer paused (PFC)
  uint8_t pause_sent = 0;  // priorities this ingress asked the peer to pause
  int8_t top = -1;         // highest non-empty priority, -1: none (a hint, rechecked)
  uint64_t bytes = 0;
  // Packets on the wire towards the peer, oldest first (each one's Packet::enq is its arrival
  // time). A link delivers in order, so only the head has an event: the heap holds one event per
  // busy link instead of one per packet in flight.
  uint32_t wire_head = kNil;
  uint32_t wire_tail = kNil;
  std::array<Queue, kMaxPrio> q;
  std::array<uint64_t, kMaxPrio> ingress{};
  uint64_t tx_bytes = 0;
  uint64_t tx_packets = 0;
  uint64_t wait_ps = 0;
  uint64_t drops = 0;  // packets dropped at this egress (buffer full)
  uint64_t trims = 0;  // data packets cut to their header here (SimConfig::trim)
};

struct Switch {
  uint8_t tier = 0;
  uint8_t plane = 0;
  uint8_t bit_offset = 0;
  uint32_t index = 0;
  uint32_t first_port = 0;
  uint32_t down_ports = 0;
  uint32_t up_ports = 0;
  uint32_t seed_x = 0;  // H(seed, 0-key)
  fwd::SwitchTable table;
};

struct Host {
  uint32_t ip = 0;
  std::unique_ptr<const lb::PathTable> paths;
  std::unique_ptr<lb::PinSelector> pin;
  storm::RequestTracker tracker;
  Rng rng;
};

struct FlowState {
  uint32_t qp = 0;
  uint32_t first_psn = 0;
  uint32_t packets = 0;
  uint32_t barrier = kNil;  // notified when the receiver has all of it (collectives)
};

// Flows that start once `remaining` others were delivered, `delay` later (collectives).
struct Barrier {
  uint32_t remaining = 0;
  TimePs delay = 0;
  std::vector<uint32_t> start;
};

struct Qp {
  uint32_t src = 0, dst = 0, qpn = 0;
  uint32_t hash_base = 0, rev_hash_base = 0;
  uint64_t flow_hash = 0;
  uint16_t hdr_len = 0, rev_hdr_len = 0;
  std::array<uint8_t, kHeaderBuf> frame{};
  std::array<uint8_t, kHeaderBuf> rev_frame{};
  pkt::PacketDesc desc{};
  pkt::PacketDesc rev_desc{};
  // Sender.
  std::vector<uint32_t> msgs;  // flows in PSN order
  size_t msg_head = 0;         // oldest unfinished
  uint32_t psn_alloc = 0, snd_una = 0, snd_nxt = 0, max_sent = 0;
  uint64_t backlog = 0;  // bytes of messages none of whose packets left yet
  bool in_nic = false, wake_pending = false, rto_pending = false;
  TimePs next_send = 0, rto_deadline = 0;
  std::vector<uint8_t> st;  // SR: per PSN (ring) 0 in flight, 1 SACKed, 2 queued for resend
  std::vector<uint32_t> retx;
  size_t retx_head = 0;
  uint32_t high_sack = 0, loss_scan = 0;
  // Receiver.
  size_t rcv_msg_head = 0;  // oldest message not yet wholly received
  uint32_t rcv_next = 0;
  bool nak_sent = false;
  std::vector<uint8_t> rbits;
  TimePs last_cnp = 0;
  bool cnp_sent = false;
  // ECN window (DCTCP-like).
  double cwnd = 0, w_alpha = 0;
  uint32_t round_end = 0, round_acks = 0, round_marked = 0;
  // DCQCN.
  double rc = 0, rt = 0, alpha = 1;
  TimePs dc_last = 0;
  uint32_t dc_stage = 0;
};

// CPU time of the calling thread: what a run costs on its core, whatever else the machine runs.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

uint32_t SelectBit(uint64_t mask, uint32_t k) {
  for (uint32_t i = 0; i < k; ++i) mask &= mask - 1;
  return static_cast<uint32_t>(std::countr_zero(mask));
}

uint32_t Q8(double gbps) {
  // ps per byte = 8000 / gbps, in 1/256 ps.
  return static_cast<uint32_t>(std::llround(8000.0 * 256.0 / gbps));
}

}  // namespace

const char* TransportName(Transport t) { return t == Transport::kGoBackN ? "gbn" : "sr"; }

double JainIndex(const std::vector<uint64_t>& x) {
  double s = 0, s2 = 0;
  for (uint64_t v : x) {
    s += static_cast<double>(v);
    s2 += static_cast<double>(v) * static_cast<double>(v);
  }
  if (s2 == 0) return 1;
  return s * s / (static_cast<double>(x.size()) * s2);
}

struct Simulator::Impl {
  nuwa::Fabric fabric;
  SimConfig cfg;
  uint32_t num_hosts = 0;
  uint32_t host_ports = 0;
  int tiers = 2;
  fwd::HashFunction hash_fn = fwd::HashFunction::kCrc32;
  std::array<uint32_t, nuwa::kMaxTiers + 1> q8{};  // per tier of link
  TimePs latency = 0;
  uint32_t window = 0;
  uint32_t ring = 0;     // SR ring size (power of two)
  uint32_t reorder = 0;  // SR: holes this far behind the highest SACK are lost
  int top_level = 3;
  lb::LbConfig lb;

  std::vector<Port> ports;
  std::vector<Switch> switches;
  std::vector<Host> hosts;
  std::vector<std::vector<uint32_t>> host_digits;  // a_1..a_h per host
  std::vector<Qp> qps;
  std::vector<storm::QpEntry> entries;
  absl::flat_hash_map<uint64_t, uint32_t> qp_index;
  absl::flat_hash_map<uint64_t, uint32_t> pair_count;
  std::vector<FlowRecord> flows;
  std::vector<FlowState> flow_state;
  std::vector<Barrier> barriers;
  std::vector<Packet> pool;
  std::vector<uint32_t> free_list;
  std::vector<uint32_t> sport_a;
  std::vector<uint8_t> sport_a_valid;
  EventQueue q;
  TimePs now = 0;
  Rng mark_rng;
  // Poisson workload.
  std::optional<Cdf> cdf;
  double load = 0;
  SimResult res;
  uint64_t wait_sum_ps = 0;
  uint64_t finished = 0;
  std::function<void(TimePs, TimePs)> progress;

  // ---- Setup ----
  absl::Status Build();
  uint32_t Ser(const Port& p, uint32_t bytes) const {
    return static_cast<uint32_t>((uint64_t{bytes} * p.ps_per_byte_q8) >> 8);
  }
  uint32_t SportA(uint32_t sport) {
    sport &= 0xffff;
    if (!sport_a_valid[sport]) {
      sport_a[sport] = fwd::SportContribution(hash_fn, static_cast<uint16_t>(sport));
      sport_a_valid[sport] = 1;
    }
    return sport_a[sport];
  }
  uint32_t HashBase(uint32_t src_ip, uint32_t dst_ip) const {
    const auto key = fwd::FlowKey4(src_ip, dst_ip, 17, 0, pkt::kRoceV2UdpPort);
    const std::array<uint8_t, fwd::kFlowKey4Bytes> zero{};
    return fwd::SwitchHash(hash_fn, 0, key) ^ fwd::SwitchHash(hash_fn, 0, zero);
  }
  int LcaTier(uint32_t a, uint32_t b) const {
    for (int j = tiers; j >= 1; --j) {
      if (host_digits[a][j] != host_digits[b][j]) return j;
    }
    return 1;
  }
  TimePs Ideal(int lca, uint64_t size) const;
  absl::StatusOr<uint32_t> QpFor(uint32_t src, uint32_t dst);

  // A host's PinSelector, made at its first use: a fabric of thousands of hosts of which a few
  // send pays for those few flow tables.
  lb::PinSelector& Pin(uint32_t h) {
    Host& host = hosts[h];
    if (host.pin == nullptr) [[unlikely]] {
      lb::LbConfig hc = lb;
      hc.seed = StreamSeed(cfg.seed, 1000 + h);
      host.pin = std::make_unique<lb::PinSelector>(hc, host.paths.get());
    }
    return *host.pin;
  }

  // ---- Packets ----
  uint32_t Alloc() {
    if (!free_list.empty()) {
      const uint32_t i = free_list.back();
      free_list.pop_back();
      return i;
    }
    pool.emplace_back();
    return static_cast<uint32_t>(pool.size() - 1);
  }
  void Free(uint32_t i) { free_list.push_back(i); }

  // ---- Ports ----
  void Enqueue(uint32_t gp, uint32_t pi) {
    Port& port = ports[gp];
    Packet& p = pool[pi];
    Queue& qu = port.q[p.prio];
    p.next = kNil;
    p.enq = now;
    if (qu.tail == kNil) {
      qu.head = pi;
    } else {
      pool[qu.tail].next = pi;
    }
    qu.tail = pi;
    qu.bytes += p.wire;
    port.bytes += p.wire;
    if (port.top < p.prio) port.top = static_cast<int8_t>(p.prio);
    if (port.bytes > res.max_queue_bytes && !port.host) res.max_queue_bytes = port.bytes;
    if (!port.busy) StartTx(gp);
  }
  void StartTx(uint32_t gp);
  void TxDone(uint32_t gp, uint32_t pi) {
    Port& port = ports[gp];
    port.busy = false;
    Packet& p = pool[pi];
    p.enq = now + port.latency;
    p.next = kNil;
    if (port.wire_tail == kNil) {
      port.wire_head = pi;
      q.Push(p.enq, kArrive, gp, 0);
    } else {
      pool[port.wire_tail].next = pi;
    }
    port.wire_tail = pi;
    StartTx(gp);
  }
  // The head of port `gp`'s wire arrives at its peer.
  void Arrive(uint32_t gp) {
    Port& port = ports[gp];
    const uint32_t pi = port.wire_head;
    port.wire_head = pool[pi].next;
    if (port.wire_head == kNil) {
      port.wire_tail = kNil;
    } else {
      q.Push(pool[port.wire_head].enq, kArrive, gp, 0);
    }
    const uint32_t to = port.peer;
    if (ports[to].node < num_hosts) {
      HostReceive(ports[to].node, pi);
    } else {
      SwitchReceive(to, pi);
    }
  }
  void SendPfc(uint32_t in_port, int prio, bool on) {
    const Port& in = ports[in_port];
    if (on) ++res.pfc_pauses;
    q.Push(now + in.latency, kPfc, in.peer, static_cast<uint32_t>(prio) | (on ? 256u : 0u));
  }
  void SwitchReceive(uint32_t gp, uint32_t pi);
  void Drop(uint32_t pi, bool buffer) {
    const Packet& p = pool[pi];
    if (buffer) {
      ++res.drops_buffer;
    } else {
      ++res.drops_unreachable;
    }
    if (p.kind == kData) ++res.drops_data;
    Free(pi);
  }

  // ---- Transport ----
  // Onto the host port PIN chose; no path (the destination is unreachable from this host, or
  // the port's link failed): dropped, counted as unreachable.
  void HostSend(uint32_t h, const lb::PathChoice& c, uint32_t pi) {
    const uint32_t gp = c.path != nullptr ? h * host_ports + c.path->port : kNil;
    if (gp == kNil || c.path->port >= host_ports || !ports[gp].alive) {
      const Packet& p = pool[pi];
      if (p.kind == kData) qps[p.qp].in_nic = false;
      Drop(pi, false);
      return;
    }
    Enqueue(gp, pi);
  }
  void StartFlow(uint32_t f);
  void TrySend(uint32_t qi);
  void ArmRto(Qp& qp, uint32_t qi) {
    qp.rto_deadline = now + cfg.rto_ns * 1000;
    if (!qp.rto_pending) {
      qp.rto_pending = true;
      q.Push(qp.rto_deadline, kRto, qi, 0);
    }
  }
  void OnRto(uint32_t qi);
  void HostReceive(uint32_t host, uint32_t pi);
  // By value: sending the answer may grow the pool.
  void ReceiveData(uint32_t host, Packet p);
  void ReceiveAck(Packet p);
  void SendControl(uint32_t from_host, uint32_t qi, uint8_t kind, uint32_t psn, uint32_t sack,
                   bool ce);
  void Acked(Qp& qp, uint32_t qi, uint32_t upto);
  // The receiver's next PSN advanced: messages wholly received are delivered.
  void Delivered(Qp& qp) {
    while (qp.rcv_msg_head < qp.msgs.size()) {
      const uint32_t f = qp.msgs[qp.rcv_msg_head];
      const FlowState& fs = flow_state[f];
      if (fs.first_psn + fs.packets > qp.rcv_next) break;
      flows[f].delivered = now;
      ++qp.rcv_msg_head;
      if (fs.barrier != kNil) {
        Barrier& b = barriers[fs.barrier];
        if (--b.remaining == 0) {
          for (uint32_t g : b.start) {
            flows[g].start = now + b.delay;
            q.Push(now + b.delay, kFlowStart, g, 0);
          }
        }
      }
    }
  }
  size_t MessageOf(const Qp& qp, uint32_t psn) const {
    // The last message whose first PSN is <= psn.
    auto it =
        std::upper_bound(qp.msgs.begin() + static_cast<ptrdiff_t>(qp.msg_head), qp.msgs.end(), psn,
                         [this](uint32_t v, uint32_t f) { return v < flow_state[f].first_psn; });
    return static_cast<size_t>(it - qp.msgs.begin()) - 1;
  }
  void DcqcnUpdate(Qp& qp);
  double LineRate() const { return 256.0 / q8[1]; }  // bytes per ps

  void NextPoisson(uint32_t h, TimePs after) {
    const double mean_ps = cdf->Mean() * (q8[1] / 256.0) / load;
    const TimePs t = after + static_cast<TimePs>(hosts[h].rng.Exponential(mean_ps));
    if (t < cfg.duration_ns * 1000) q.Push(t, kPoisson, h, 0);
  }
  void Poisson(uint32_t h) {
    Host& host = hosts[h];
    // A uniformly random other host the source has a path to (failures may cut some off).
    uint32_t dst = 0;
    bool reachable = false;
    for (int tries = 0; tries < 16 && !reachable; ++tries) {
      dst = host.rng.Below(num_hosts - 1);
      if (dst >= h) ++dst;
      std::array<uint8_t, 16> addr{};
      addr[10] = addr[11] = 0xff;
      for (int i = 0; i < 4; ++i)
        addr[12 + i] = static_cast<uint8_t>(hosts[dst].ip >> (24 - 8 * i));
      reachable = host.paths->LookupAddress(addr.data()).size != 0;
    }
    const uint64_t size = std::min<uint64_t>(cdf->Sample(host.rng), storm::kMaxMessageBytes);
    if (reachable) {  // else the host is cut off (all its links failed): it sends nothing
      NewFlow(h, dst, size, now);
      StartFlow(static_cast<uint32_t>(flows.size() - 1));
    }
    NextPoisson(h, now);
  }
  void NewFlow(uint32_t src, uint32_t dst, uint64_t size, TimePs start) {
    FlowRecord r;
    r.src = src;
    r.dst = dst;
    r.size = size;
    r.start = start;
    r.ideal = Ideal(LcaTier(src, dst), size);
    flows.push_back(r);
    flow_state.emplace_back();
  }
  void Dispatch(const Event& e);
  SimResult Run();
};

// ---- Setup ---------------------------------------------------------------------------------

absl::Status Simulator::Impl::Build() {
  const nuwa::Shape& s = fabric.shape;
  tiers = s.tiers;
  if (cfg.mtu < 1 || cfg.mtu > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mtu = ", cfg.mtu, "; give 1..1048576 payload bytes per packet"));
  }
  if (cfg.levels.levels < 1 || cfg.levels.levels > kMaxPrio) {
    return absl::InvalidArgumentError(
        absl::StrCat("levels = ", cfg.levels.levels, "; give 1..", kMaxPrio));
  }
  if (cfg.storm) HEDDLE_RETURN_IF_ERROR(storm::ValidateLevelConfig(cfg.levels));
  top_level = cfg.levels.levels - 1;
  if (cfg.pfc && cfg.pfc_xon_bytes > cfg.pfc_xoff_bytes) {
    return absl::InvalidArgumentError("pfc: xon must not exceed xoff");
  }
  if (cfg.ecn && cfg.ecn_kmax_bytes < cfg.ecn_kmin_bytes) {
    return absl::InvalidArgumentError("ecn: Kmax must not be below Kmin");
  }
  if (cfg.qps_per_pair < 1 || cfg.qps_per_pair > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("qps_per_pair = ", cfg.qps_per_pair, "; give 1..1024"));
  }
  const uint64_t packet = uint64_t{cfg.mtu} + cfg.header_bytes;
  if (cfg.buffer_bytes < packet) {
    return absl::InvalidArgumentError(absl::StrCat("buffer of ", cfg.buffer_bytes,
                                                   " bytes holds no ", packet,
                                                   "-byte packet; give at least one packet"));
  }
  if (cfg.pfc && (cfg.pfc_xoff_bytes == 0 || cfg.pfc_xoff_bytes >= cfg.buffer_bytes)) {
    return absl::InvalidArgumentError(
        "pfc: xoff must be above 0 and below the buffer (the rest is headroom)");
  }
  if (cfg.window_packets > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("window of ", cfg.window_packets, " packets; give at most 1048576"));
  }
  if (cfg.rto_ns == 0) return absl::InvalidArgumentError("rto must be > 0");
  if (cfg.trim && cfg.pfc) {
    return absl::InvalidArgumentError(
        "trimming and PFC together: a lossless fabric has nothing to trim; turn one off");
  }
  if (!(cfg.link_latency_ns >= 0) || !(cfg.ecn_pmax >= 0 && cfg.ecn_pmax <= 1)) {
    return absl::InvalidArgumentError("link latency must be >= 0 and ECN pmax in [0, 1]");
  }
  if (cfg.duration_ns == 0) return absl::InvalidArgumentError("duration must be > 0");
  for (int t = 1; t <= tiers; ++t) {
    if (!(fabric.link_gbps[t] > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fabric ", fabric.name, ": tier ", t, " has no link speed"));
    }
    q8[t] = Q8(fabric.link_gbps[t]);
  }
  latency = static_cast<TimePs>(std::llround(cfg.link_latency_ns * 1000));
  hash_fn = static_cast<fwd::HashFunction>(fabric.hash.function);
  // An unknown hash model predicts nothing; the simulated switches still need one.
  if (hash_fn == fwd::HashFunction::kUnknown) hash_fn = fwd::HashFunction::kCrc32;
  sport_a.assign(65536, 0);
  sport_a_valid.assign(65536, 0);
  mark_rng.Seed(StreamSeed(cfg.seed, 1));

  // Compile, and read the artifacts back as a loader does.
  HEDDLE_ASSIGN_OR_RETURN(nuwa::Compiled compiled, nuwa::Compile(fabric));
  std::vector<fwd::ArtifactSpec> sw_specs;
  for (const fwd::ArtifactSpec& a : compiled.switches) {
    HEDDLE_ASSIGN_OR_RETURN(fwd::ArtifactSpec d, fwd::Decode(fwd::Serialize(a)));
    sw_specs.push_back(std::move(d));
  }
  HEDDLE_ASSIGN_OR_RETURN(fwd::ArtifactSpec host_spec, fwd::Decode(fwd::Serialize(compiled.host)));

  num_hosts = static_cast<uint32_t>(nuwa::NodeCount(s, 0));
  if (num_hosts < 2) return absl::InvalidArgumentError("the fabric needs at least 2 hosts");
  host_ports = s.planes * s.w[1];
  // Ports: hosts first, then switches by (plane, tier, index).
  ports.resize(size_t{num_hosts} * host_ports);
  for (uint32_t h = 0; h < num_hosts; ++h) {
    for (uint32_t p = 0; p < host_ports; ++p) {
      Port& port = ports[size_t{h} * host_ports + p];
      port.node = h;
      port.host = true;
      port.ps_per_byte_q8 = q8[1];
      port.latency = latency;
    }
  }
  // (plane, tier) -> first switch
  std::vector<uint32_t> sw_base(static_cast<size_t>(s.planes) * (tiers + 1), 0);
  for (uint32_t pl = 0; pl < s.planes; ++pl) {
    for (int t = 1; t <= tiers; ++t) {
      sw_base[pl * (tiers + 1) + t] = static_cast<uint32_t>(switches.size());
      const uint64_t n = nuwa::NodeCount(s, t);
      for (uint32_t i = 0; i < n; ++i) {
        Switch sw;
        sw.tier = static_cast<uint8_t>(t);
        sw.plane = static_cast<uint8_t>(pl);
        sw.index = i;
        sw.down_ports = nuwa::DownPorts(s, t);
        sw.up_ports = nuwa::UpPorts(s, t);
        sw.first_port = static_cast<uint32_t>(ports.size());
        sw.bit_offset = fabric.hash.bit_offset[t];
        const std::array<uint8_t, fwd::kFlowKey4Bytes> zero{};
        sw.seed_x = fwd::SwitchHash(
            hash_fn,
            nuwa::SwitchSeed(fabric.hash.seed_base,
                             {static_cast<uint8_t>(pl), static_cast<uint8_t>(t), i}),
            zero);
        HEDDLE_ASSIGN_OR_RETURN(
            sw.table, fwd::SwitchTable::Build(sw_specs[t - 1], static_cast<uint8_t>(pl), i));
        const uint32_t node = num_hosts + static_cast<uint32_t>(switches.size());
        for (uint32_t p = 0; p < sw.down_ports + sw.up_ports; ++p) {
          Port port;
          port.node = node;
          // Down ports run at the speed of the links below, up ports of those above.
          port.ps_per_byte_q8 = p < sw.down_ports ? q8[t] : q8[t + 1];
          port.latency = latency;
          ports.push_back(port);
        }
        switches.push_back(std::move(sw));
      }
    }
  }
  auto port_of = [&](nuwa::NodeRef n, uint32_t local) -> uint32_t {
    if (n.tier == 0) return n.index * host_ports + local;
    return switches[sw_base[n.plane * (tiers + 1) + n.tier] + n.index].first_port + local;
  };
  // Wire every up link: the lower end's up port to the upper end's down port.
  auto link = [&](nuwa::NodeRef lower, uint32_t up) {
    const nuwa::NodeRef upper = nuwa::Parent(s, lower, up);
    uint32_t down = 0;
    for (; down < nuwa::DownPorts(s, upper.tier); ++down) {
      const nuwa::NodeRef c = nuwa::Child(s, upper, down);
      if (c.tier == lower.tier && c.index == lower.index &&
          (lower.tier == 0 || c.plane == lower.plane)) {
        break;
      }
    }
    const uint32_t a =
        lower.tier == 0 ? port_of(lower, up) : port_of(lower, nuwa::DownPorts(s, lower.tier) + up);
    const uint32_t b = port_of(upper, down);
    ports[a].peer = b;
    ports[b].peer = a;
  };
  for (uint32_t h = 0; h < num_hosts; ++h) {
    for (uint32_t p = 0; p < host_ports; ++p) link({0, 0, h}, p);
  }
  for (const Switch& sw : switches) {
    for (uint32_t u = 0; u < sw.up_ports; ++u) link({sw.plane, sw.tier, sw.index}, u);
  }
  for (const Port& p : ports) {
    if (p.peer == kNil) return absl::InternalError("a port of the fabric has no peer");
  }
  // Failures: dead links and switches carry nothing.
  for (const nuwa::LinkRef& l : fabric.failures.links) {
    const uint32_t a = l.lower.tier == 0
                           ? port_of(l.lower, l.up_port)
                           : port_of(l.lower, nuwa::DownPorts(s, l.lower.tier) + l.up_port);
    ports[a].alive = false;
    ports[ports[a].peer].alive = false;
  }
  for (const nuwa::NodeRef& n : fabric.failures.switches) {
    const Switch& sw = switches[sw_base[n.plane * (tiers + 1) + n.tier] + n.index];
    for (uint32_t p = 0; p < sw.down_ports + sw.up_ports; ++p) {
      ports[sw.first_port + p].alive = false;
      ports[ports[sw.first_port + p].peer].alive = false;
    }
  }

  for (const SimConfig::Degraded& d : cfg.degraded) {
    absl::StatusOr<nuwa::NodeRef> n = nuwa::ParseNodeName(fabric, d.lower);
    if (!n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("degraded link ", d.lower, ": ", n.status().message()));
    }
    const uint32_t ups = n->tier == 0 ? host_ports : nuwa::UpPorts(s, n->tier);
    if (d.up_port >= ups || d.gbps < 0 || d.extra_latency_ns < 0) {
      return absl::InvalidArgumentError(absl::StrCat("degraded link ", d.lower, " up port ",
                                                     d.up_port, ": it has ", ups,
                                                     " up ports; speed and latency must be >= 0"));
    }
    const uint32_t a = n->tier == 0 ? port_of(*n, d.up_port)
                                    : port_of(*n, nuwa::DownPorts(s, n->tier) + d.up_port);
    for (uint32_t end : {a, ports[a].peer}) {
      if (d.gbps > 0) ports[end].ps_per_byte_q8 = Q8(d.gbps);
      ports[end].latency += static_cast<TimePs>(std::llround(d.extra_latency_ns * 1000));
    }
  }

  // Transport parameters.
  const TimePs rtt = [&] {
    TimePs t = 0;
    for (int k = 1; k <= tiers; ++k) {
      t += 2 * ((uint64_t{cfg.mtu + cfg.header_bytes} * q8[k]) >> 8) + 2 * latency;
      t += 2 * ((uint64_t{cfg.header_bytes} * q8[k]) >> 8) + 2 * latency;
    }
    return t;
  }();
  const TimePs t_host = (uint64_t{cfg.mtu + cfg.header_bytes} * q8[1]) >> 8;
  window = cfg.window_packets != 0 ? cfg.window_packets
                                   : static_cast<uint32_t>((rtt + t_host - 1) / t_host) + 1;
  ring = std::bit_ceil(std::max<uint32_t>(2 * window, 64));
  reorder = cfg.sr_reorder_packets != 0 ? cfg.sr_reorder_packets : window;

  // Hosts: addresses, PIN path tables from the host artifact, selectors.
  lb = cfg.lb;
  lb.link_gbps = static_cast<uint32_t>(std::llround(fabric.link_gbps[1]));
  lb.rtt_ns = static_cast<uint32_t>(rtt / 1000);
  lb.max_path_sets = 64;
  // A flow entry per QP the host sends on, at most 75 % full; past 2048 entries (256 KiB a
  // host) the idle ones are reused (SimConfig::lb.flow_idle_ns) and the rest take their QP's
  // hashed path, counted as table-full.
  lb.flow_capacity =
      std::bit_ceil(std::clamp<uint32_t>(2 * std::min<uint32_t>(num_hosts - 1, 1u << 20) *
                                             (cfg.qp_per_message ? 16 : cfg.qps_per_pair),
                                         64, 2048));
  {
    lb::LbConfig check = lb;
    HEDDLE_RETURN_IF_ERROR(lb::ValidateLbConfig(check));
  }
  hosts.resize(num_hosts);
  host_digits.resize(num_hosts);
  for (uint32_t h = 0; h < num_hosts; ++h) {
    Host& host = hosts[h];
    host.ip = nuwa::HostIpv4(s, fabric.addresses, h);
    const nuwa::Label label = nuwa::LabelOf(s, 0, h);
    host_digits[h].assign(label.a.begin(), label.a.end());
    HEDDLE_ASSIGN_OR_RETURN(fwd::HostTable table, fwd::HostTable::Build(host_spec, h));
    lb::PathTableSpec spec;
    std::vector<std::vector<lb::Path>> sets;
    for (const fwd::HostTable::PrefixPaths& pp : table.PrefixPathSets(false)) {
      lb::Prefix prefix;
      prefix.addr = pp.prefix;
      prefix.len = pp.prefix_len;
      if (pp.kind != fwd::HopKind::kUp || pp.paths.empty()) {
        spec.routes.push_back({prefix, lb::kRouteNoSet});
        continue;
      }
      std::vector<lb::Path> paths;
      for (const fwd::HostPath& hp : pp.paths) {
        lb::Path path;
        path.entropy = hp.entropy;
        path.port = hp.port;
        paths.push_back(path);
      }
      uint32_t id = 0;
      while (id < spec.sets.size() && spec.sets[id] != paths) ++id;
      if (id == spec.sets.size()) spec.sets.push_back(paths);
      spec.routes.push_back({prefix, id});
    }
    HEDDLE_ASSIGN_OR_RETURN(host.paths, lb::PathTable::Build(spec));
    host.tracker = storm::RequestTracker({.mtu = cfg.mtu});
    host.rng.Seed(StreamSeed(cfg.seed, 2000000 + h));
  }
  res.level_bytes.assign(kMaxPrio, 0);
  pool.reserve(1u << 16);
  q.Reserve(1u << 16);
  return absl::OkStatus();
}

TimePs Simulator::Impl::Ideal(int lca, uint64_t size) const {
  const int links = 2 * lca;
  std::vector<uint32_t> rate(links + 1);
  for (int k = 1; k <= links; ++k) rate[k] = q8[k <= lca ? k : links + 1 - k];
  const uint64_t n = std::max<uint64_t>(1, (size + cfg.mtu - 1) / cfg.mtu);
  const uint64_t last_payload = size - (n - 1) * cfg.mtu;
  auto ser = [&](int k, uint64_t bytes) -> TimePs { return (bytes * rate[k]) >> 8; };
  // F_k(j) for the uniform packets 0..n-2: S_k + (k-1)·lat + j·M_k (docs/sim.md §3).
  TimePs g = 0;  // the last packet's finish time on link k
  TimePs s_sum = 0, m = 0;
  for (int k = 1; k <= links; ++k) {
    const TimePs t = ser(k, cfg.mtu + cfg.header_bytes);
    s_sum += t;
    m = std::max(m, t);
    const TimePs ready = k == 1 ? 0 : g + latency;
    TimePs start = ready;
    if (n >= 2) {
      const TimePs prev = s_sum + static_cast<TimePs>(k - 1) * latency + (n - 2) * m;
      start = std::max(ready, prev);
    }
    g = start + ser(k, last_payload + cfg.header_bytes);
  }
  TimePs fct = g + latency;
  for (int k = 1; k <= links; ++k) fct += ser(k, cfg.header_bytes) + latency;
  return fct;
}

absl::StatusOr<uint32_t> Simulator::Impl::QpFor(uint32_t src, uint32_t dst) {
  const uint64_t pair = uint64_t{src} << 32 | dst;
  uint64_t key = 0;
  if (!cfg.qp_per_message) {
    const uint32_t k = pair_count[pair]++ % cfg.qps_per_pair;
    key = pair * cfg.qps_per_pair + k;
    if (auto it = qp_index.find(key); it != qp_index.end()) return it->second;
  }
  const uint32_t qi = static_cast<uint32_t>(qps.size());
  if (qi + 1 > storm::kQpnMask) return absl::ResourceExhaustedError("more than 2^24 QPs");
  qps.emplace_back();
  entries.emplace_back();
  Qp& qp = qps.back();
  qp.src = src;
  qp.dst = dst;
  qp.qpn = qi + 1;
  qp.hash_base = HashBase(hosts[src].ip, hosts[dst].ip);
  qp.rev_hash_base = HashBase(hosts[dst].ip, hosts[src].ip);
  auto ip4 = [](uint32_t a) {
    return std::array<uint8_t, 4>{static_cast<uint8_t>(a >> 24), static_cast<uint8_t>(a >> 16),
                                  static_cast<uint8_t>(a >> 8), static_cast<uint8_t>(a)};
  };
  for (int dir = 0; dir < 2; ++dir) {
    pkt::FrameSpec f;
    f.src_ip4 = ip4(dir == 0 ? hosts[src].ip : hosts[dst].ip);
    f.dst_ip4 = ip4(dir == 0 ? hosts[dst].ip : hosts[src].ip);
    pkt::RoceSpec r;
    r.opcode = dir == 0 ? pkt::op::kWriteFirst : pkt::op::kAcknowledge;
    r.dest_qp = qp.qpn;
    r.dma_length = 1u << 20;
    r.payload_len = dir == 0 ? 16 : 0;
    const std::vector<uint8_t> frame = pkt::BuildRoce(f, r);
    pkt::PacketDesc d{};
    if (pkt::Parse(frame.data(), frame.size(), &d) != pkt::ParseError::kOk ||
        !(d.flags & pkt::kFlagRoce)) {
      return absl::InternalError("the QP's header template does not parse as RoCEv2");
    }
    const size_t hdr = std::min(frame.size(), kHeaderBuf);
    std::memcpy(dir == 0 ? qp.frame.data() : qp.rev_frame.data(), frame.data(), hdr);
    (dir == 0 ? qp.desc : qp.rev_desc) = d;
    (dir == 0 ? qp.hdr_len : qp.rev_hdr_len) = static_cast<uint16_t>(hdr);
  }
  qp.flow_hash = lb::PinSelector::HashRequest(qp.frame.data(), qp.desc);
  if (cfg.transport == Transport::kSelectiveRepeat) {
    qp.st.assign(ring, 0);
    qp.rbits.assign(ring, 0);
  }
  qp.rc = qp.rt = LineRate();
  qp.cwnd = window;
  storm::QpEntry& e = entries.back();
  std::memset(&e, 0, sizeof(e));
  e.key_hash = qp.flow_hash | 1;
  e.qpn_dir = qp.qpn;
  e.acked_psn = storm::kNoPsn;
  if (!cfg.qp_per_message) qp_index.emplace(key, qi);
  return qi;
}

// ---- Ports ---------------------------------------------------------------------------------

void Simulator::Impl::StartTx(uint32_t gp) {
  Port& port = ports[gp];
  if (port.busy || port.bytes == 0) return;
  int prio = port.top;
  while (prio >= 0 && (port.q[prio].head == kNil || (port.paused >> prio & 1))) {
    if (port.q[prio].head == kNil && prio == port.top) --port.top;
    --prio;
  }
  if (prio < 0) return;  // all waiting priorities are paused
  Queue& qu = port.q[prio];
  const uint32_t pi = qu.head;
  Packet& p = pool[pi];
  qu.head = p.next;
  if (qu.head == kNil) qu.tail = kNil;
  qu.bytes -= p.wire;
  port.bytes -= p.wire;
  port.busy = true;
  port.tx_bytes += p.wire;
  ++port.tx_packets;
  if (!port.host) {
    wait_sum_ps += now - p.enq;
    port.wait_ps += now - p.enq;
    ++res.queued_packets;
    if (cfg.pfc) {
      Port& in = ports[p.in_port];
      in.ingress[prio] -= p.wire;
      if ((in.pause_sent >> prio & 1) && in.ingress[prio] <= cfg.pfc_xon_bytes) {
        in.pause_sent &= static_cast<uint8_t>(~(1u << prio));
        SendPfc(p.in_port, prio, false);
      }
    }
  }
  q.Push(now + Ser(port, p.wire), kTxDone, gp, pi);
  if (port.host && p.kind == kData) {
    Qp& qp = qps[p.qp];
    qp.in_nic = false;
    TrySend(p.qp);
  }
}

void Simulator::Impl::SwitchReceive(uint32_t gp, uint32_t pi) {
  const Switch& sw = switches[ports[gp].node - num_hosts];
  Packet& p = pool[pi];
  const fwd::NextHops nh = sw.table.Lookup4(p.dst_ip);
  uint32_t out;
  if (nh.kind == fwd::HopKind::kDown) {
    out = nh.down_port;
  } else if (nh.kind == fwd::HopKind::kUp && nh.up_mask != 0) {
    const auto n = static_cast<uint32_t>(std::popcount(nh.up_mask));
    uint32_t member = 0;
    if (n > 1) {
      const uint32_t h = sw.seed_x ^ p.hash_x;
      member = (sw.bit_offset >= 32 ? 0 : h >> sw.bit_offset) % n;
    }
    out = sw.down_ports + SelectBit(nh.up_mask, member);
  } else {
    Drop(pi, false);
    return;
  }
  const uint32_t op = sw.first_port + out;
  Port& port = ports[op];
  if (!port.alive) {
    Drop(pi, false);
    return;
  }
  // Without PFC the egress port's buffer bounds what waits for it. With PFC the buffer is
  // accounted at ingress, per (port, priority): above xoff the upstream is paused, and what
  // arrives before the pause takes effect lands in the headroom up to buffer_bytes.
  if (cfg.pfc ? ports[gp].ingress[p.prio] + p.wire > cfg.buffer_bytes
              : port.bytes + p.wire > cfg.buffer_bytes) {
    // Trimming (NDP-like): a data packet that does not fit loses its payload and goes on as a
    // header at the top priority, so its receiver learns of the loss about one RTT after it.
    // Headers — trimmed ones and ACK, NAK, CNP — get their own allowance beyond the buffer, as
    // in NDP's header queue; past it they are dropped too.
    if (!cfg.trim || port.bytes + cfg.header_bytes > cfg.buffer_bytes + cfg.trim_header_bytes) {
      ++port.drops;
      Drop(pi, true);
      return;
    }
    if (p.kind != kData) {
      Enqueue(op, pi);  // PFC: never with trimming (Create refuses both)
      return;
    }
    if (!(p.flags & kTrimmed)) {
      ++port.trims;
      ++res.trims;
    }
    p.flags |= kTrimmed | kCe;  // a trim is a congestion signal too
    p.wire = cfg.header_bytes;
    p.prio = static_cast<uint8_t>(top_level);
    Enqueue(op, pi);
    return;
  }
  if (cfg.ecn && p.kind == kData && !(p.flags & kCe)) {
    const uint64_t qb = port.q[p.prio].bytes;
    if (qb >= cfg.ecn_kmax_bytes) {
      if (cfg.ecn_pmax >= 1 || mark_rng.Uniform() < cfg.ecn_pmax) p.flags |= kCe;
    } else if (qb > cfg.ecn_kmin_bytes) {
      const double prob = cfg.ecn_pmax * static_cast<double>(qb - cfg.ecn_kmin_bytes) /
                          static_cast<double>(cfg.ecn_kmax_bytes - cfg.ecn_kmin_bytes);
      if (mark_rng.Uniform() < prob) p.flags |= kCe;
    }
    if (p.flags & kCe) ++res.ecn_marks;
  }
  if (cfg.pfc) {
    p.in_port = gp;
    Port& in = ports[gp];
    in.ingress[p.prio] += p.wire;
    if (!(in.pause_sent >> p.prio & 1) && in.ingress[p.prio] > cfg.pfc_xoff_bytes) {
      in.pause_sent |= static_cast<uint8_t>(1u << p.prio);
      SendPfc(gp, p.prio, true);
    }
  }
  Enqueue(op, pi);
}

// ---- Transport -----------------------------------------------------------------------------

void Simulator::Impl::StartFlow(uint32_t f) {
  FlowRecord& r = flows[f];
  absl::StatusOr<uint32_t> qi = QpFor(r.src, r.dst);
  if (!qi.ok()) return;  // counted as unfinished
  Qp& qp = qps[*qi];
  FlowState& fs = flow_state[f];
  fs.qp = *qi;
  fs.first_psn = qp.psn_alloc;
  fs.packets = static_cast<uint32_t>(std::max<uint64_t>(1, (r.size + cfg.mtu - 1) / cfg.mtu));
  qp.psn_alloc += fs.packets;
  qp.msgs.push_back(f);
  qp.backlog += r.size;
  TrySend(*qi);
}

void Simulator::Impl::DcqcnUpdate(Qp& qp) {
  const TimePs period = cfg.dcqcn_period_ns * 1000;
  if (period == 0 || now < qp.dc_last + period) return;
  const double line = LineRate();
  uint64_t k = (now - qp.dc_last) / period;
  qp.dc_last += k * period;
  for (k = std::min<uint64_t>(k, 64); k > 0 && qp.rc < line; --k) {
    qp.alpha *= 1 - cfg.dcqcn_g;
    ++qp.dc_stage;
    if (qp.dc_stage > cfg.dcqcn_fast_recovery) {
      qp.rt = std::min(line, qp.rt + cfg.dcqcn_ai_fraction * line);
    }
    qp.rc = std::min(line, (qp.rt + qp.rc) / 2);
  }
}

void Simulator::Impl::TrySend(uint32_t qi) {
  Qp& qp = qps[qi];
  if (qp.in_nic || qp.wake_pending) return;
  const bool sr = cfg.transport == Transport::kSelectiveRepeat;
  uint32_t psn = kNil;
  if (sr) {
    while (qp.retx_head < qp.retx.size()) {
      const uint32_t c = qp.retx[qp.retx_head];
      if (c >= qp.snd_una && qp.st[c & (ring - 1)] == 2) {
        psn = c;
        break;
      }
      ++qp.retx_head;
    }
    if (qp.retx_head == qp.retx.size()) {
      qp.retx.clear();
      qp.retx_head = 0;
    }
  }
  if (psn == kNil) {
    const uint32_t w =
        cfg.ecn_window ? std::max<uint32_t>(1, static_cast<uint32_t>(qp.cwnd)) : window;
    if (qp.snd_nxt >= qp.psn_alloc || qp.snd_nxt - qp.snd_una >= w) return;
    psn = qp.snd_nxt;
  }
  if (cfg.dcqcn) {
    DcqcnUpdate(qp);
    if (now < qp.next_send) {
      qp.wake_pending = true;
      q.Push(qp.next_send, kQpWake, qi, 0);
      return;
    }
  }
  if (sr && psn != qp.snd_nxt) {
    qp.st[psn & (ring - 1)] = 0;
    ++qp.retx_head;
  } else {
    ++qp.snd_nxt;
  }
  const size_t mi = MessageOf(qp, psn);
  const uint32_t f = qp.msgs[mi];
  const FlowState& fs = flow_state[f];
  const uint64_t size = flows[f].size;
  const uint32_t idx = psn - fs.first_psn;
  const bool first = idx == 0, last = idx + 1 == fs.packets;
  const auto payload =
      static_cast<uint32_t>(last ? size - uint64_t{idx} * cfg.mtu : uint64_t{cfg.mtu});
  const bool retransmission = psn < qp.max_sent;
  if (retransmission) {
    ++res.retransmissions;
  } else {
    qp.max_sent = psn + 1;
    if (first) qp.backlog -= size;
  }

  // The packet as the NIC sends it: an RDMA WRITE first/middle/last/only.
  Host& host = hosts[qp.src];
  pkt::PacketDesc d = qp.desc;
  d.opcode = first && last ? pkt::op::kWriteOnly
             : first       ? pkt::op::kWriteFirst
             : last        ? pkt::op::kWriteLast
                           : pkt::op::kWriteMiddle;
  d.roce_class = pkt::RoceClass::kWrite;
  d.flags = static_cast<uint16_t>((d.flags & ~(pkt::kFlagFirst | pkt::kFlagLast | pkt::kFlagReth)) |
                                  (first ? pkt::kFlagFirst | pkt::kFlagReth : 0) |
                                  (last ? pkt::kFlagLast : 0));
  d.psn = psn & storm::kPsnMask;
  d.dma_length = static_cast<uint32_t>(size);
  d.payload_len = static_cast<uint16_t>(std::min<uint32_t>(payload, 0xffff));
  d.pad_count = 0;
  d.ip_len = static_cast<uint16_t>(std::min<uint32_t>(payload + cfg.header_bytes, 0xffff));
  uint8_t level = 0;
  if (cfg.storm) {
    storm::QpEntry& e = entries[qi];
    e.host_backlog = static_cast<uint32_t>(std::min<uint64_t>(qp.backlog, UINT32_MAX));
    const storm::TrackResult t = host.tracker.OnRequestPacket(e, d);
    level =
        storm::TagPacket(cfg.levels, &e, d, t,
                         storm::BacklogBytes(e, storm::BacklogSource::kHostShim, cfg.mtu), cfg.mtu);
  }
  const lb::PathChoice c = Pin(qp.src).Choose(d, qp.frame.data(), qp.hdr_len, now / 1000);

  const uint32_t pi = Alloc();
  Packet& p = pool[pi];
  p.qp = qi;
  p.psn = psn;
  p.sack = 0;
  p.hash_x = qp.hash_base ^ SportA(c.path != nullptr ? c.path->entropy : 0);
  p.dst_ip = hosts[qp.dst].ip;
  p.dst = qp.dst;
  p.payload = payload;
  p.wire = payload + cfg.header_bytes;
  p.kind = kData;
  p.prio = level;
  p.flags = static_cast<uint8_t>((first ? kFirstPkt : 0) | (last ? kLastPkt : 0));
  ++res.data_packets_sent;
  res.data_bytes_sent += payload;
  res.level_bytes[level] += payload;
  if (cfg.dcqcn) qp.next_send = now + static_cast<TimePs>(p.wire / qp.rc);
  qp.in_nic = true;
  if (!qp.rto_pending) ArmRto(qp, qi);
  HostSend(qp.src, c, pi);
}

void Simulator::Impl::SendControl(uint32_t from, uint32_t qi, uint8_t kind, uint32_t psn,
                                  uint32_t sack, bool ce) {
  Qp& qp = qps[qi];
  pkt::PacketDesc d = qp.rev_desc;
  if (kind == kCnp) {
    d.opcode = pkt::op::kCnp;
    d.roce_class = pkt::RoceClass::kCnp;
  }
  d.psn = psn & storm::kPsnMask;
  const lb::PathChoice c = Pin(from).Choose(d, qp.rev_frame.data(), qp.rev_hdr_len, now / 1000);
  const uint32_t pi = Alloc();
  Packet& p = pool[pi];
  p.qp = qi;
  p.psn = psn;
  p.sack = sack;
  p.hash_x = qp.rev_hash_base ^ SportA(c.path != nullptr ? c.path->entropy : 0);
  p.dst_ip = hosts[qp.src].ip;
  p.dst = qp.src;
  p.payload = 0;
  p.wire = cfg.header_bytes;
  p.kind = kind;
  p.prio = static_cast<uint8_t>(top_level);
  p.flags = ce ? kCe : 0;
  ++res.control_packets_sent;
  HostSend(from, c, pi);
}

void Simulator::Impl::ReceiveData(uint32_t host, Packet p) {
  Qp& qp = qps[p.qp];
  if (p.flags & kTrimmed) {
    // The header of a trimmed packet: NAK it at once. Go-back-N: back to the receiver's next
    // PSN (if the trimmed one is not already in). Selective repeat: the NAK carries the
    // cumulative ACK and the trimmed PSN, which the sender resends alone.
    ++res.trimmed_delivered;
    // Go-back-N NAKs a gap once, as for an out-of-order packet, but always the PSN it waits
    // for (its resend was trimmed again).
    const bool gbn = cfg.transport == Transport::kGoBackN;
    const bool nak = gbn ? p.psn == qp.rcv_next || (p.psn > qp.rcv_next && !qp.nak_sent)
                         : p.psn >= qp.rcv_next && !qp.rbits[p.psn & (ring - 1)];
    if (nak) {
      ++res.naks;
      if (gbn) qp.nak_sent = true;
      SendControl(host, p.qp, kNak, qp.rcv_next, p.psn, true);
    }
    return;
  }
  ++res.data_packets_delivered;
  const bool ce = p.flags & kCe;
  if (ce && cfg.dcqcn && (!qp.cnp_sent || now >= qp.last_cnp + cfg.dcqcn_cnp_interval_ns * 1000)) {
    qp.cnp_sent = true;
    qp.last_cnp = now;
    ++res.cnps;
    SendControl(host, p.qp, kCnp, p.psn, 0, false);
  }
  if (cfg.transport == Transport::kGoBackN) {
    if (p.psn == qp.rcv_next) {
      ++qp.rcv_next;
      qp.nak_sent = false;
      res.unique_bytes_delivered += p.payload;
      Delivered(qp);
      SendControl(host, p.qp, kAck, qp.rcv_next, p.psn, ce);
    } else if (p.psn > qp.rcv_next) {
      ++res.out_of_order;
      if (!qp.nak_sent) {
        qp.nak_sent = true;
        ++res.naks;
        SendControl(host, p.qp, kNak, qp.rcv_next, p.psn, ce);
      }
    } else {
      SendControl(host, p.qp, kAck, qp.rcv_next, p.psn, ce);
    }
    return;
  }
  // Selective repeat: keep what fits the window, acknowledge cumulatively and selectively.
  if (p.psn >= qp.rcv_next && p.psn < qp.rcv_next + ring && !qp.rbits[p.psn & (ring - 1)]) {
    if (p.psn != qp.rcv_next) ++res.out_of_order;
    qp.rbits[p.psn & (ring - 1)] = 1;
    res.unique_bytes_delivered += p.payload;
    while (qp.rbits[qp.rcv_next & (ring - 1)]) {
      qp.rbits[qp.rcv_next & (ring - 1)] = 0;
      ++qp.rcv_next;
    }
    Delivered(qp);
  }
  SendControl(host, p.qp, kAck, qp.rcv_next, p.psn, ce);
}

void Simulator::Impl::Acked(Qp& qp, uint32_t qi, uint32_t upto) {
  if (upto <= qp.snd_una) return;
  if (cfg.transport == Transport::kSelectiveRepeat) {
    for (uint32_t s = qp.snd_una; s < upto; ++s) qp.st[s & (ring - 1)] = 0;
  }
  qp.snd_una = upto;
  if (qp.snd_nxt < upto) qp.snd_nxt = upto;
  qp.rto_deadline = now + cfg.rto_ns * 1000;
  if (cfg.storm) {
    hosts[qp.src].tracker.ApplyAck(entries[qi], (upto - 1) & storm::kPsnMask);
  }
  while (qp.msg_head < qp.msgs.size()) {
    const uint32_t f = qp.msgs[qp.msg_head];
    const FlowState& fs = flow_state[f];
    if (fs.first_psn + fs.packets > qp.snd_una) break;
    flows[f].finish = now;
    ++finished;
    ++qp.msg_head;
  }
}

void Simulator::Impl::ReceiveAck(Packet p) {
  ++res.control_packets_delivered;
  const uint32_t qi = p.qp;
  Qp& qp = qps[qi];
  const uint64_t now_ns = now / 1000;
  if (p.kind == kCnp) {
    if (cfg.dcqcn) {
      DcqcnUpdate(qp);
      qp.rt = qp.rc;
      qp.rc = std::max(qp.rc * (1 - qp.alpha / 2), LineRate() / 1000);
      qp.alpha = (1 - cfg.dcqcn_g) * qp.alpha + cfg.dcqcn_g;
      qp.dc_stage = 0;
      qp.dc_last = now;
    }
    Pin(qp.src).OnFeedback(qp.flow_hash, qp.qpn, {.kind = lb::FeedbackKind::kCnp}, now_ns);
    return;
  }
  const bool ce = p.flags & kCe;
  if (p.psn > 0) {
    Pin(qp.src).OnFeedback(
        qp.flow_hash, qp.qpn,
        {.kind = lb::FeedbackKind::kAck, .psn = (p.psn - 1) & storm::kPsnMask, .ce = ce}, now_ns);
  }
  if (cfg.ecn_window) {
    ++qp.round_acks;
    if (ce) {
      ++qp.round_marked;
    } else {
      qp.cwnd = std::min<double>(window, qp.cwnd + 1 / qp.cwnd);
    }
    if (p.psn >= qp.round_end) {  // a round trip's worth of ACKs
      const double frac = static_cast<double>(qp.round_marked) / qp.round_acks;
      qp.w_alpha = (1 - cfg.ecn_window_g) * qp.w_alpha + cfg.ecn_window_g * frac;
      if (qp.round_marked != 0) qp.cwnd = std::max(1.0, qp.cwnd * (1 - qp.w_alpha / 2));
      qp.round_acks = qp.round_marked = 0;
      qp.round_end = qp.snd_nxt;
    }
  }
  Acked(qp, qi, p.psn);
  if (p.kind == kNak) {
    Pin(qp.src).OnFeedback(qp.flow_hash, qp.qpn,
                           {.kind = lb::FeedbackKind::kNak, .psn = p.psn & storm::kPsnMask},
                           now_ns);
    if (cfg.transport == Transport::kGoBackN) {
      if (p.psn < qp.snd_nxt) qp.snd_nxt = p.psn;  // go back N
    } else if (p.sack >= qp.snd_una && p.sack < qp.snd_nxt) {
      // A trimmed packet's NAK (the only NAK selective repeat sends): resend that PSN.
      uint8_t& st = qp.st[p.sack & (ring - 1)];
      if (st == 0) {
        st = 2;
        qp.retx.push_back(p.sack);
      }
    }
  } else if (cfg.transport == Transport::kSelectiveRepeat && p.sack >= qp.snd_una &&
             p.sack < qp.snd_nxt) {
    qp.st[p.sack & (ring - 1)] = 1;
    qp.high_sack = std::max(qp.high_sack, p.sack + 1);
    uint32_t s = std::max(qp.loss_scan, qp.snd_una);
    for (; s + reorder < qp.high_sack && s < qp.snd_nxt; ++s) {
      uint8_t& st = qp.st[s & (ring - 1)];
      if (st == 0) {
        st = 2;
        qp.retx.push_back(s);
      }
    }
    qp.loss_scan = s;
  }
  TrySend(qi);
}

void Simulator::Impl::OnRto(uint32_t qi) {
  Qp& qp = qps[qi];
  qp.rto_pending = false;
  if (qp.snd_una >= qp.snd_nxt) return;  // nothing outstanding
  if (now < qp.rto_deadline) {
    qp.rto_pending = true;
    q.Push(qp.rto_deadline, kRto, qi, 0);
    return;
  }
  ++res.timeouts;
  if (cfg.ecn_window) qp.cwnd = std::max(1.0, qp.cwnd / 2);
  if (cfg.transport == Transport::kGoBackN) {
    qp.snd_nxt = qp.snd_una;
  } else {
    for (uint32_t s = qp.snd_una; s < qp.snd_nxt; ++s) {
      uint8_t& st = qp.st[s & (ring - 1)];
      if (st == 0) {
        st = 2;
        qp.retx.push_back(s);
      }
    }
    qp.loss_scan = std::max(qp.loss_scan, qp.snd_nxt);
  }
  ArmRto(qp, qi);
  TrySend(qi);
}

void Simulator::Impl::HostReceive(uint32_t host, uint32_t pi) {
  const Packet p = pool[pi];
  if (p.dst != host) {
    Drop(pi, false);  // misrouted: cannot happen with valid artifacts
    return;
  }
  Free(pi);
  if (p.kind == kData) {
    ReceiveData(host, p);
  } else {
    ReceiveAck(p);
  }
}

void Simulator::Impl::Dispatch(const Event& e) {
  switch (e.type()) {
    case kTxDone:
      TxDone(e.a, e.b);
      break;
    case kArrive:
      Arrive(e.a);
      break;
    case kPfc: {
      Port& port = ports[e.a];
      const int prio = static_cast<int>(e.b & 0xff);
      if (e.b & 256) {
        port.paused |= static_cast<uint8_t>(1u << prio);
      } else {
        port.paused &= static_cast<uint8_t>(~(1u << prio));
        StartTx(e.a);
      }
      break;
    }
    case kFlowStart:
      StartFlow(e.a);
      break;
    case kQpWake:
      qps[e.a].wake_pending = false;
      TrySend(e.a);
      break;
    case kRto:
      OnRto(e.a);
      break;
    case kPoisson:
      Poisson(e.a);
      break;
  }
}

SimResult Simulator::Impl::Run() {
  const TimePs end =
      (cfg.max_time_ns != 0 ? cfg.max_time_ns : 20 * cfg.duration_ns + 10'000'000) * 1000;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  uint64_t events = 0;
  while (!q.empty() && q.top_time() <= end) {
    const Event e = q.Pop();
    now = e.time;
    Dispatch(e);
    if ((++events & ((1u << 12) - 1)) == 0) {
      res.max_pending_events = std::max<uint64_t>(res.max_pending_events, q.size());
      if ((events & ((1u << 20) - 1)) == 0 && progress) progress(now, end);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  res.events = events;
  res.wall_seconds = std::chrono::duration<double>(t1 - t0).count();
  res.cpu_seconds = ThreadCpuSeconds() - cpu0;
  res.end_time = now;
  res.flows = flows;
  for (const FlowRecord& f : flows) {
    if (!f.collective) continue;
    ++res.collective_flows;
    res.collective_finished += f.finish != 0;
    res.collective_done = std::max(res.collective_done, f.delivered);
  }
  if (res.collective_finished != res.collective_flows) res.collective_done = 0;
  res.mean_queue_delay_ns =
      res.queued_packets != 0 ? static_cast<double>(wait_sum_ps) / res.queued_packets / 1000 : 0;
  for (const Switch& sw : switches) {
    for (uint32_t p = 0; p < sw.down_ports + sw.up_ports; ++p) {
      const Port& port = ports[sw.first_port + p];
      if (port.tx_packets == 0 && port.drops == 0) continue;
      res.port_waits.push_back(
          {sw.tier,
           sw.plane * static_cast<uint32_t>(nuwa::NodeCount(fabric.shape, sw.tier)) + sw.index, p,
           port.tx_packets,
           port.tx_packets != 0 ? static_cast<double>(port.wait_ps) / port.tx_packets / 1000 : 0,
           p >= sw.down_ports, port.drops, port.trims});
    }
  }
  for (int t = 1; t < tiers; ++t) {
    SimResult::UplinkTier ut;
    ut.tier = t;
    for (const Switch& sw : switches) {
      if (sw.tier != t) continue;
      for (uint32_t u = 0; u < sw.up_ports; ++u) {
        ut.bytes.push_back(ports[sw.first_port + sw.down_ports + u].tx_bytes);
      }
    }
    ut.jain = JainIndex(ut.bytes);
    double weighted = 0, total = 0;
    size_t at = 0;
    for (const Switch& sw : switches) {
      if (sw.tier != t) continue;
      const std::vector<uint64_t> mine(ut.bytes.begin() + static_cast<ptrdiff_t>(at),
                                       ut.bytes.begin() + static_cast<ptrdiff_t>(at + sw.up_ports));
      at += sw.up_ports;
      double sum = 0;
      for (uint64_t v : mine) sum += static_cast<double>(v);
      weighted += sum * JainIndex(mine);
      total += sum;
    }
    ut.jain_per_switch = total > 0 ? weighted / total : 1;
    res.uplinks.push_back(std::move(ut));
  }
  res.lb = lb;
  res.config = cfg;
  res.fabric_name = fabric.name;
  res.hosts = num_hosts;
  return res;
}

// ---- Simulator -----------------------------------------------------------------------------

Simulator::Simulator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Simulator::~Simulator() = default;

absl::StatusOr<std::unique_ptr<Simulator>> Simulator::Create(const nuwa::Fabric& fabric,
                                                             const SimConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->fabric = fabric;
  impl->cfg = config;
  HEDDLE_RETURN_IF_ERROR(impl->Build());
  return std::unique_ptr<Simulator>(new Simulator(std::move(impl)));
}

absl::Status Simulator::AddFlow(uint32_t src, uint32_t dst, uint64_t size, uint64_t start_ns) {
  Impl& m = *impl_;
  if (src >= m.num_hosts || dst >= m.num_hosts || src == dst) {
    return absl::InvalidArgumentError(absl::StrCat("flow ", src, " -> ", dst, ": hosts are 0..",
                                                   m.num_hosts - 1, " and must differ"));
  }
  if (size == 0 || size > storm::kMaxMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("flow size ", size, ": give 1..", storm::kMaxMessageBytes, " bytes"));
  }
  m.NewFlow(src, dst, size, start_ns * 1000);
  m.q.Push(start_ns * 1000, kFlowStart, static_cast<uint32_t>(m.flows.size() - 1), 0);
  return absl::OkStatus();
}

absl::Status Simulator::SetPoissonWorkload(const Cdf& cdf, double load) {
  Impl& m = *impl_;
  if (!(load > 0) || load > 1.5) {
    return absl::InvalidArgumentError(absl::StrCat("load ", load, ": give a value in (0, 1.5]"));
  }
  if (m.cdf.has_value()) return absl::FailedPreconditionError("a Poisson workload is already set");
  m.cdf = cdf;
  m.load = load;
  for (uint32_t h = 0; h < m.num_hosts; ++h) m.NextPoisson(h, 0);
  return absl::OkStatus();
}

absl::Status Simulator::AddIncast(uint32_t receiver, uint32_t senders, uint64_t size,
                                  uint64_t start_ns, uint64_t period_ns) {
  Impl& m = *impl_;
  if (receiver >= m.num_hosts || senders < 1 || senders >= m.num_hosts) {
    return absl::InvalidArgumentError(absl::StrCat("incast: receiver ", receiver, " with ", senders,
                                                   " senders; the fabric has ", m.num_hosts,
                                                   " hosts"));
  }
  const uint32_t stride = std::max<uint32_t>(1, (m.num_hosts - 1) / senders);
  for (uint64_t t = start_ns; t < m.cfg.duration_ns; t += period_ns) {
    for (uint32_t i = 0; i < senders; ++i) {
      const uint32_t src = (receiver + 1 + i * stride) % m.num_hosts;
      HEDDLE_RETURN_IF_ERROR(AddFlow(src, receiver, size, t));
    }
    if (period_ns == 0) break;
  }
  return absl::OkStatus();
}

absl::Status Simulator::AddCollective(Collective kind, const std::vector<uint32_t>& hosts,
                                      uint64_t bytes, uint64_t start_ns, uint32_t iterations,
                                      uint64_t gap_ns) {
  Impl& m = *impl_;
  const auto n = static_cast<uint32_t>(hosts.size());
  if (n < 2 || iterations < 1 || bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("collective over ", n, " hosts, ", iterations,
                                                   " iterations of ", bytes,
                                                   " bytes: give >= 2 hosts, >= 1 iteration, "
                                                   ">= 1 byte"));
  }
  std::vector<uint8_t> seen(m.num_hosts, 0);
  for (uint32_t h : hosts) {
    if (h >= m.num_hosts || seen[h]) {
      return absl::InvalidArgumentError(absl::StrCat("collective host ", h, ": hosts are 0..",
                                                     m.num_hosts - 1, ", each at most once"));
    }
    seen[h] = 1;
  }
  const uint64_t chunk =
      kind == Collective::kRingAllReduce ? (bytes + n - 1) / n : (bytes + n - 2) / (n - 1);
  if (chunk > storm::kMaxMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective chunk of ", chunk, " bytes: at most ", storm::kMaxMessageBytes));
  }
  const TimePs t0 = start_ns * 1000, gap = gap_ns * 1000;
  auto flow = [&](uint32_t src, uint32_t dst) {
    m.NewFlow(src, dst, chunk, t0);
    m.flows.back().collective = true;
    return static_cast<uint32_t>(m.flows.size() - 1);
  };
  auto barrier = [&](uint32_t remaining, TimePs delay) {
    m.barriers.push_back({remaining, delay, {}});
    return static_cast<uint32_t>(m.barriers.size() - 1);
  };
  if (kind == Collective::kRingAllReduce) {
    const uint32_t steps = 2 * (n - 1);
    std::vector<uint32_t> prev(n, kNil);  // the flow host i sent in the previous step
    for (uint32_t k = 0; k < iterations; ++k) {
      for (uint32_t s = 0; s < steps; ++s) {
        std::vector<uint32_t> cur(n);
        for (uint32_t i = 0; i < n; ++i) cur[i] = flow(hosts[i], hosts[(i + 1) % n]);
        for (uint32_t i = 0; i < n; ++i) {
          const uint32_t before = prev[(i + n - 1) % n];  // what host i received last step
          if (before == kNil) {
            m.q.Push(t0, kFlowStart, cur[i], 0);
          } else {
            const uint32_t b = barrier(1, s == 0 ? gap : 0);
            m.barriers[b].start.push_back(cur[i]);
            m.flow_state[before].barrier = b;
          }
        }
        prev = std::move(cur);
      }
    }
  } else {
    std::vector<uint32_t> ready(n, kNil);  // host i received all of the previous iteration
    for (uint32_t k = 0; k < iterations; ++k) {
      std::vector<uint32_t> next(n);
      for (uint32_t j = 0; j < n; ++j) next[j] = barrier(n - 1, gap);
      for (uint32_t i = 0; i < n; ++i) {
        for (uint32_t j = 0; j < n; ++j) {
          if (i == j) continue;
          const uint32_t f = flow(hosts[i], hosts[j]);
          if (ready[i] == kNil) {
            m.q.Push(t0, kFlowStart, f, 0);
          } else {
            m.barriers[ready[i]].start.push_back(f);
          }
          m.flow_state[f].barrier = next[j];
        }
      }
      ready = std::move(next);
    }
  }
  return absl::OkStatus();
}

void Simulator::SetProgress(std::function<void(TimePs, TimePs)> progress) {
  impl_->progress = std::move(progress);
}

SimResult Simulator::Run() { return impl_->Run(); }

TimePs Simulator::IdealFct(uint32_t src, uint32_t dst, uint64_t size) const {
  return impl_->Ideal(impl_->LcaTier(src, dst), size);
}
TimePs Simulator::BaseRtt(int lca_tier) const {
  const Impl& m = *impl_;
  // One MTU packet there and its ACK back: the ideal FCT of one full packet.
  return m.Ideal(lca_tier, m.cfg.mtu);
}
uint32_t Simulator::hosts() const { return impl_->num_hosts; }
uint32_t Simulator::window_packets() const { return impl_->window; }
const lb::LbConfig& Simulator::lb_config() const { return impl_->lb; }

}  // namespace heddle::sim
