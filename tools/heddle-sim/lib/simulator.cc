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
#include "dataplane/storm/guard.h"
#include "dataplane/storm/read_streams.h"
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

// kData: a WRITE or SEND packet, or a READ response (kResp). kReadReq: a READ request (a header
// with the READ's remaining length in Packet::sack), counted with the control packets.
enum PacketKind : uint8_t { kData, kAck, kNak, kCnp, kReadReq };
// kFirstPkt / kLastPkt: of the message, or for a READ response of the stream answering one READ
// request. kResp: a READ response, from the QP's responder to its requester. kFromResponder: a
// READ response, ACK or NAK on the responder's STORM entry (counted in its egress_queued while
// it waits in the NIC: the in-order guard).
enum PacketFlag : uint8_t {
  kCe = 1,
  kFirstPkt = 2,
  kLastPkt = 4,
  kTrimmed = 8,
  kResp = 16,
  kFromResponder = 32,
};

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
  storm::ReadStreamTracker read_tracker;  // the READ responses it sends as a responder
  Rng rng;
};

// What a responder sends on a QP, in order: READ response streams and the ACKs and NAKs behind
// them (a NIC answers a QP's requests in the order they came).
struct RespItem {
  uint8_t kind = kData;  // kData: the responses [psn, end) of the READ of `flow`; kAck, kNak
  bool ce = false;       // kAck, kNak: echo CE
  uint32_t start = 0;    // kData: the PSN of the READ request answered (the stream's first)
  uint32_t psn = 0;      // kData: the next response to send; kAck, kNak: the PSN carried
  uint32_t end = 0;      // kData: one past the last response; kAck, kNak: the SACK
  uint32_t flow = 0;
};

struct FlowState {
  uint32_t qp = 0;
  uint32_t first_psn = 0;
  uint32_t packets = 0;
  uint32_t barrier = kNil;  // notified when the receiver has all of it (collectives)
  Op op = Op::kWrite;
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
  uint32_t reads = 0;   // READ messages posted and not finished
  bool rd_gap = false;  // a READ was re-issued since snd_una last advanced
  // Responder: READ responses and the ACK/NAKs queued behind them.
  std::vector<RespItem> resp;
  size_t resp_head = 0;
  bool resp_in_nic = false;
  uint32_t resp_max = 0;  // one past the highest response PSN sent (resends are counted)
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

const char* OpName(Op op) {
  switch (op) {
    case Op::kSend:
      return "send";
    case Op::kRead:
      return "read";
    default:
      return "write";
  }
}

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
  std::vector<storm::QpEntry> entries;           // the requester's STORM entry per QP
  std::vector<storm::QpEntry> rentries;          // the responder's (its READ responses, ACKs, NAKs)
  std::vector<storm::ReadStreamEntry> rstreams;  // the responder's READ streams per QP
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
  bool op_mix = false;  // cfg.ops is not all WRITEs
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
    const Packet& p = pool[pi];
    if (gp == kNil || c.path->port >= host_ports || !ports[gp].alive) {
      if (p.flags & kResp) {
        qps[p.qp].resp_in_nic = false;
      } else if (p.kind == kData || p.kind == kReadReq) {
        qps[p.qp].in_nic = false;
      }
      Drop(pi, false);
      return;
    }
    if (p.flags & kFromResponder) ++rentries[p.qp].egress_queued;
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
  // An ACK, NAK or CNP from the QP's receiver (responder). ACK and NAK wait behind the READ
  // responses it is sending on the QP.
  void SendControl(uint32_t from_host, uint32_t qi, uint8_t kind, uint32_t psn, uint32_t sack,
                   bool ce);
  void EmitControl(uint32_t from_host, uint32_t qi, uint8_t kind, uint32_t psn, uint32_t sack,
                   bool ce);
  // READs (go-back-N). The requester's READ request; the responder's side: the request
  // arriving, the pump that sends its responses and the ACK/NAKs behind them one at a time, and
  // one response; the requester's side: a response arriving, and a gap in them.
  void SendReadRequest(uint32_t qi, uint32_t f, uint32_t psn, bool retransmission);
  void ReceiveReadRequest(const Packet& p);
  void Respond(uint32_t qi);
  void SendResponse(uint32_t qi);
  void ReceiveResponse(const Packet& p);
  void ReadGap(Qp& qp, uint32_t qi);
  // The first PSN of the QP's messages from snd_una up to `upto` whose READ responses have not
  // all arrived (upto if none): an acknowledgement beyond it is an implied NAK.
  uint32_t FirstUnreadPsn(const Qp& qp, uint32_t upto) const;
  // STORM (dataplane/storm) at the two ends of a QP, with the daemon's guards.
  uint8_t TagRequest(uint32_t qi, const pkt::PacketDesc& d);
  uint8_t TagHostResponse(uint32_t qi, const pkt::PacketDesc& d);
  void Acked(Qp& qp, uint32_t qi, uint32_t upto);
  // The receiver's next PSN advanced: messages wholly received are delivered.
  void Delivered(Qp& qp) {
    while (qp.rcv_msg_head < qp.msgs.size()) {
      const uint32_t f = qp.msgs[qp.rcv_msg_head];
      const FlowState& fs = flow_state[f];
      if (fs.first_psn + fs.packets > qp.rcv_next) break;
      ++qp.rcv_msg_head;
      if (fs.op == Op::kRead) continue;  // delivered at the requester, by its responses
      flows[f].delivered = now;
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
  size_t MessageOf(const Qp& qp, uint32_t psn, size_t from) const {
    // The last message whose first PSN is <= psn.
    auto it =
        std::upper_bound(qp.msgs.begin() + static_cast<ptrdiff_t>(from), qp.msgs.end(), psn,
                         [this](uint32_t v, uint32_t f) { return v < flow_state[f].first_psn; });
    return static_cast<size_t>(it - qp.msgs.begin()) - 1;
  }
  size_t MessageOf(const Qp& qp, uint32_t psn) const { return MessageOf(qp, psn, qp.msg_head); }
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
    // The operation: drawn only for a mix, so that an all-WRITE workload draws what it did
    // before the mix existed.
    Op op = Op::kWrite;
    if (op_mix) {
      const double u = host.rng.Uniform() * (cfg.ops.write + cfg.ops.send + cfg.ops.read);
      op = u < cfg.ops.write                  ? Op::kWrite
           : u < cfg.ops.write + cfg.ops.send ? Op::kSend
                                              : Op::kRead;
    }
    if (reachable) {  // else the host is cut off (all its links failed): it sends nothing
      NewFlow(h, dst, size, now, op);
      StartFlow(static_cast<uint32_t>(flows.size() - 1));
    }
    NextPoisson(h, now);
  }
  void NewFlow(uint32_t src, uint32_t dst, uint64_t size, TimePs start, Op op = Op::kWrite) {
    FlowRecord r;
    r.src = src;
    r.dst = dst;
    r.size = size;
    r.start = start;
    r.ideal = Ideal(LcaTier(src, dst), size);
    r.op = op;
    flows.push_back(r);
    flow_state.emplace_back();
    flow_state.back().op = op;
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
  {
    const OpMix& m = cfg.ops;
    if (!(m.write >= 0 && m.send >= 0 && m.read >= 0 && m.write + m.send + m.read > 0) ||
        !std::isfinite(m.write + m.send + m.read)) {
      return absl::InvalidArgumentError(absl::StrCat("ops: write=", m.write, ", send=", m.send,
                                                     ", read=", m.read,
                                                     "; give shares >= 0, not all 0"));
    }
    if (m.read > 0 && cfg.transport != Transport::kGoBackN) {
      return absl::InvalidArgumentError(
          "ops: READs are modelled with go-back-N only (the requester takes READ responses in "
          "order); use --transport gbn or drop read from the mix");
    }
    op_mix = m.send > 0 || m.read > 0;
  }
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
  rentries.emplace_back();
  rstreams.emplace_back();
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
  // The responder's entry: the QP's key from its end. It sends no requests of its own here, so
  // the fabric guard never holds its level (docs/storm.md §5, "held level").
  storm::QpEntry& re = rentries.back();
  std::memset(&re, 0, sizeof(re));
  re.key_hash = lb::PinSelector::HashRequest(qp.rev_frame.data(), qp.rev_desc) | 1;
  re.qpn_dir = qp.qpn;
  re.acked_psn = storm::kNoPsn;
  std::memset(&rstreams.back(), 0, sizeof(storm::ReadStreamEntry));
  rstreams.back().key_hash = re.key_hash;
  rstreams.back().qpn_dir = qp.qpn;
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
  if (port.host) {
    // Copies: sending the QP's next packet may grow the pool.
    const uint32_t qi = p.qp;
    const uint8_t kind = p.kind, flags = p.flags;
    if (flags & kFromResponder) --rentries[qi].egress_queued;
    if (flags & kResp) {
      qps[qi].resp_in_nic = false;
      Respond(qi);
    } else if (kind == kData || kind == kReadReq) {
      qps[qi].in_nic = false;
      TrySend(qi);
    }
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
  if (fs.op == Op::kRead) ++qp.reads;
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
  if (fs.op == Op::kRead) {
    SendReadRequest(qi, f, psn, retransmission);
    return;
  }

  // The packet as the NIC sends it: an RDMA WRITE or SEND first/middle/last/only. A SEND has no
  // RETH: STORM and PIN learn its size at its last packet.
  pkt::PacketDesc d = qp.desc;
  const bool send = fs.op == Op::kSend;
  if (send) {
    d.opcode = first && last ? pkt::op::kSendOnly
               : first       ? pkt::op::kSendFirst
               : last        ? pkt::op::kSendLast
                             : pkt::op::kSendMiddle;
  } else {
    d.opcode = first && last ? pkt::op::kWriteOnly
               : first       ? pkt::op::kWriteFirst
               : last        ? pkt::op::kWriteLast
                             : pkt::op::kWriteMiddle;
  }
  d.roce_class = send ? pkt::RoceClass::kSend : pkt::RoceClass::kWrite;
  d.flags =
      static_cast<uint16_t>((d.flags & ~(pkt::kFlagFirst | pkt::kFlagLast | pkt::kFlagReth)) |
                            (first ? pkt::kFlagFirst : 0) | (first && !send ? pkt::kFlagReth : 0) |
                            (last ? pkt::kFlagLast : 0));
  d.psn = psn & storm::kPsnMask;
  d.dma_length = send ? 0 : static_cast<uint32_t>(size);
  d.payload_len = static_cast<uint16_t>(std::min<uint32_t>(payload, 0xffff));
  d.pad_count = 0;
  d.ip_len = static_cast<uint16_t>(std::min<uint32_t>(payload + cfg.header_bytes, 0xffff));
  const uint8_t level = cfg.storm ? TagRequest(qi, d) : 0;
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

// ---- STORM at the two ends of a QP ----------------------------------------------------------
//
// The level of every packet comes from dataplane/storm: RequestTracker and TagPacket for the
// requester's packets, ReadStreamTracker for the responder's READ responses, and around them the
// daemon's ordering guards (dataplane/storm/guard.h: InOrderCeiling, FabricCeiling,
// ReadResponseLevel, AckLevel, HoldResponseLevel), the very functions the storm-tag stage calls,
// with the simulator's exact join of responses to requests in place of the shim's.

uint8_t Simulator::Impl::TagRequest(uint32_t qi, const pkt::PacketDesc& d) {
  const Qp& qp = qps[qi];
  storm::QpEntry& e = entries[qi];
  e.host_backlog = static_cast<uint32_t>(std::min<uint64_t>(qp.backlog, UINT32_MAX));
  const storm::TrackResult t = hosts[qp.src].tracker.OnRequestPacket(e, d);
  // The in-order guard has nothing to cap: a QP has at most one packet in the NIC, and the next
  // is tagged once it left. The fabric guard (docs/storm.md §6.5): a request starting while the
  // QP's earlier packets are unacknowledged takes no level above the newest one's.
  uint8_t ceiling = storm::kMaxLevels - 1;
  if (cfg.storm_fabric_guard && cfg.levels.mode == storm::Mode::kPerMessage) {
    ceiling = storm::FabricCeiling(e, t, res.fabric_guarded);
  }
  const uint8_t level = storm::TagPacket(
      cfg.levels, &e, d, t, storm::BacklogBytes(e, storm::BacklogSource::kHostShim, cfg.mtu),
      cfg.mtu, ceiling);
  e.held_level = level;
  return level;
}

uint8_t Simulator::Impl::TagHostResponse(uint32_t qi, const pkt::PacketDesc& d) {
  const storm::LevelConfig& L = cfg.levels;
  storm::QpEntry& e = rentries[qi];
  storm::ReadStreamEntry& s = rstreams[qi];
  const bool per_message = L.mode == storm::Mode::kPerMessage;
  // The in-order guard: nothing above the QP's packets still waiting in the NIC.
  const uint8_t ceiling =
      storm::ResponseCeiling(L, storm::InOrderCeiling(e, per_message, top_level));
  // The response window (per-message mode with the fabric guard; 0: off).
  const uint32_t window_ms = cfg.storm_fabric_guard ? cfg.storm_response_window_ms : 0;
  const auto now_ms = static_cast<uint32_t>(now / 1'000'000'000);
  uint8_t level;
  if (d.roce_class == pkt::RoceClass::kReadResponse) {
    const storm::StreamResult r = hosts[qps[qi].dst].read_tracker.OnResponse(s, d);
    // B: the READs queued behind this one at the responder (the host source).
    level = storm::ReadResponseLevel(L, s, r, storm::BacklogSource::kHostShim, 0, ceiling, cfg.mtu,
                                     window_ms, now_ms, res.response_guarded);
  } else {
    level = storm::AckLevel(L, &s, ceiling, window_ms, now_ms, res.response_guarded);
  }
  // The responder's entry has no requests of its own unacknowledged: its level is always held.
  storm::HoldResponseLevel(e, level, cfg.storm_fabric_guard && per_message);
  return level;
}

// ---- READs ---------------------------------------------------------------------------------

void Simulator::Impl::SendReadRequest(uint32_t qi, uint32_t f, uint32_t psn, bool retransmission) {
  Qp& qp = qps[qi];
  const FlowState& fs = flow_state[f];
  const uint64_t size = flows[f].size;
  const uint32_t idx = psn - fs.first_psn;
  // The READ's PSNs are its responses': the next request goes after them (RoCE).
  qp.snd_nxt = fs.first_psn + fs.packets;
  if (!retransmission) qp.max_sent = qp.snd_nxt;
  // From `psn` on (a re-issue asks for the rest of the READ).
  const auto length = static_cast<uint32_t>(size - uint64_t{idx} * cfg.mtu);
  pkt::PacketDesc d = qp.desc;
  d.opcode = pkt::op::kReadRequest;
  d.roce_class = pkt::RoceClass::kReadRequest;
  d.flags = static_cast<uint16_t>((d.flags & ~(pkt::kFlagFirst | pkt::kFlagLast)) |
                                  pkt::kFlagFirst | pkt::kFlagLast | pkt::kFlagReth);
  d.psn = psn & storm::kPsnMask;
  d.dma_length = length;
  d.payload_len = 0;
  d.pad_count = 0;
  d.ip_len = static_cast<uint16_t>(cfg.header_bytes);
  const uint8_t level = cfg.storm ? TagRequest(qi, d) : static_cast<uint8_t>(top_level);
  const lb::PathChoice c = Pin(qp.src).Choose(d, qp.frame.data(), qp.hdr_len, now / 1000);
  const uint32_t pi = Alloc();
  Packet& p = pool[pi];
  p.qp = qi;
  p.psn = psn;
  p.sack = length;
  p.hash_x = qp.hash_base ^ SportA(c.path != nullptr ? c.path->entropy : 0);
  p.dst_ip = hosts[qp.dst].ip;
  p.dst = qp.dst;
  p.payload = 0;
  p.wire = cfg.header_bytes;
  p.kind = kReadReq;
  p.prio = level;
  p.flags = kFirstPkt | kLastPkt;
  ++res.control_packets_sent;
  ++res.read_requests;
  qp.in_nic = true;
  if (!qp.rto_pending) ArmRto(qp, qi);
  HostSend(qp.src, c, pi);
}

void Simulator::Impl::ReceiveReadRequest(const Packet& p) {
  ++res.control_packets_delivered;
  const uint32_t qi = p.qp;
  Qp& qp = qps[qi];
  if (p.psn > qp.rcv_next) {  // out of order: a sequence NAK, once per gap, as for data
    ++res.out_of_order;
    if (!qp.nak_sent) {
      qp.nak_sent = true;
      ++res.naks;
      SendControl(qp.dst, qi, kNak, qp.rcv_next, p.psn, false);
    }
    return;
  }
  const size_t m = MessageOf(qp, p.psn, 0);
  const uint32_t f = qp.msgs[m];
  const FlowState& fs = flow_state[f];
  const uint32_t end = fs.first_psn + fs.packets;
  if (p.psn == qp.rcv_next) {
    qp.rcv_next = end;
    qp.nak_sent = false;
    Delivered(qp);
  } else {
    // A re-issued READ (the requester found a gap in its responses, or timed out): go-back-N
    // re-sends everything after it too, so the responses queued from its PSN on are dropped.
    for (size_t i = qp.resp_head; i < qp.resp.size(); ++i) {
      RespItem& it = qp.resp[i];
      if (it.kind != kData) continue;
      if (it.start >= p.psn) {
        it.psn = it.end;  // nothing left to send
      } else if (it.end > p.psn) {
        it.end = std::max(it.psn, p.psn);
      }
    }
  }
  if (cfg.storm) {
    // The READ join (docs/storm.md §6.6): the responses of the READ at this PSN are sized by it.
    hosts[qp.dst].read_tracker.AddPending(rstreams[qi], p.psn & storm::kPsnMask, p.sack);
  }
  RespItem it;
  it.kind = kData;
  it.start = it.psn = p.psn;
  it.end = end;
  it.flow = f;
  qp.resp.push_back(it);
  Respond(qi);
}

void Simulator::Impl::Respond(uint32_t qi) {
  Qp& qp = qps[qi];
  while (!qp.resp_in_nic && qp.resp_head < qp.resp.size()) {
    const RespItem it = qp.resp[qp.resp_head];
    if (it.kind != kData) {
      ++qp.resp_head;
      EmitControl(qp.dst, qi, it.kind, it.psn, it.end, it.ce);
      continue;
    }
    if (it.psn >= it.end) {
      ++qp.resp_head;
      continue;
    }
    SendResponse(qi);  // sets resp_in_nic
  }
  if (qp.resp_head == qp.resp.size() && !qp.resp.empty()) {
    qp.resp.clear();
    qp.resp_head = 0;
  }
}

void Simulator::Impl::SendResponse(uint32_t qi) {
  Qp& qp = qps[qi];
  RespItem& it = qp.resp[qp.resp_head];
  const uint32_t psn = it.psn++;
  const FlowState& fs = flow_state[it.flow];
  const uint64_t size = flows[it.flow].size;
  const uint32_t idx = psn - fs.first_psn;
  const bool first = psn == it.start, last = psn + 1 == it.end;
  const auto payload = static_cast<uint32_t>(idx + 1 == fs.packets ? size - uint64_t{idx} * cfg.mtu
                                                                   : uint64_t{cfg.mtu});
  if (psn < qp.resp_max) {
    ++res.retransmissions;
  } else {
    qp.resp_max = psn + 1;
  }
  pkt::PacketDesc d = qp.rev_desc;
  d.opcode = first && last ? pkt::op::kReadResponseOnly
             : first       ? pkt::op::kReadResponseFirst
             : last        ? pkt::op::kReadResponseLast
                           : pkt::op::kReadResponseMiddle;
  d.roce_class = pkt::RoceClass::kReadResponse;
  // First, Last and Only carry an AETH, Middle none.
  d.flags = static_cast<uint16_t>(
      (d.flags & ~(pkt::kFlagFirst | pkt::kFlagLast | pkt::kFlagAeth | pkt::kFlagReth)) |
      (first ? pkt::kFlagFirst : 0) | (last ? pkt::kFlagLast : 0) |
      (first || last ? pkt::kFlagAeth : 0));
  d.psn = psn & storm::kPsnMask;
  d.dma_length = 0;
  d.payload_len = static_cast<uint16_t>(std::min<uint32_t>(payload, 0xffff));
  d.pad_count = 0;
  d.ip_len = static_cast<uint16_t>(std::min<uint32_t>(payload + cfg.header_bytes, 0xffff));
  const uint8_t level = cfg.storm ? TagHostResponse(qi, d) : 0;
  const lb::PathChoice c = Pin(qp.dst).Choose(d, qp.rev_frame.data(), qp.rev_hdr_len, now / 1000);
  const uint32_t pi = Alloc();
  Packet& p = pool[pi];
  p.qp = qi;
  p.psn = psn;
  p.sack = 0;
  p.hash_x = qp.rev_hash_base ^ SportA(c.path != nullptr ? c.path->entropy : 0);
  p.dst_ip = hosts[qp.src].ip;
  p.dst = qp.src;
  p.payload = payload;
  p.wire = payload + cfg.header_bytes;
  p.kind = kData;
  p.prio = level;
  p.flags = static_cast<uint8_t>(kResp | kFromResponder | (first ? kFirstPkt : 0) |
                                 (last ? kLastPkt : 0));
  ++res.data_packets_sent;
  res.data_bytes_sent += payload;
  res.level_bytes[level] += payload;
  qp.resp_in_nic = true;
  HostSend(qp.dst, c, pi);
}

uint32_t Simulator::Impl::FirstUnreadPsn(const Qp& qp, uint32_t upto) const {
  if (qp.reads == 0 || upto <= qp.snd_una) return upto;
  for (size_t m = MessageOf(qp, qp.snd_una); m < qp.msgs.size(); ++m) {
    const FlowState& fs = flow_state[qp.msgs[m]];
    if (fs.first_psn >= upto) break;
    if (fs.op == Op::kRead) return std::max(qp.snd_una, fs.first_psn);
  }
  return upto;
}

void Simulator::Impl::ReadGap(Qp& qp, uint32_t qi) {
  if (qp.rd_gap) return;  // once per gap, as a NAK
  qp.rd_gap = true;
  ++res.read_reissues;
  if (qp.snd_una < qp.snd_nxt) qp.snd_nxt = qp.snd_una;  // go back N
  TrySend(qi);
}

void Simulator::Impl::ReceiveResponse(const Packet& p) {
  const uint32_t qi = p.qp;
  Qp& qp = qps[qi];
  if (p.flags & kTrimmed) {
    ++res.trimmed_delivered;
    if (p.psn >= qp.snd_una) ReadGap(qp, qi);
    return;
  }
  ++res.data_packets_delivered;
  // In order: the next PSN the requester waits for, or the first response of a READ with only
  // WRITEs and SENDs before it (a response acknowledges every PSN before its own).
  const bool accept = p.psn == qp.snd_una || (p.psn > qp.snd_una && (p.flags & kFirstPkt) &&
                                              FirstUnreadPsn(qp, p.psn) == p.psn);
  if (accept) {
    res.unique_bytes_delivered += p.payload;
    Pin(qp.src).OnFeedback(qp.flow_hash, qp.qpn,
                           {.kind = lb::FeedbackKind::kAck, .psn = p.psn & storm::kPsnMask},
                           now / 1000);
    Acked(qp, qi, p.psn + 1);
    TrySend(qi);
  } else if (p.psn > qp.snd_una) {
    ++res.out_of_order;
    ReadGap(qp, qi);
  }
  // Else a response the requester already has (a re-issued READ's).
}

void Simulator::Impl::SendControl(uint32_t from, uint32_t qi, uint8_t kind, uint32_t psn,
                                  uint32_t sack, bool ce) {
  Qp& qp = qps[qi];
  if (kind != kCnp && (qp.resp_in_nic || qp.resp_head < qp.resp.size())) {
    RespItem it;
    it.kind = kind;
    it.ce = ce;
    it.psn = psn;
    it.end = sack;
    qp.resp.push_back(it);
    return;
  }
  EmitControl(from, qi, kind, psn, sack, ce);
}

void Simulator::Impl::EmitControl(uint32_t from, uint32_t qi, uint8_t kind, uint32_t psn,
                                  uint32_t sack, bool ce) {
  Qp& qp = qps[qi];
  pkt::PacketDesc d = qp.rev_desc;
  if (kind == kCnp) {
    d.opcode = pkt::op::kCnp;
    d.roce_class = pkt::RoceClass::kCnp;
  }
  d.psn = psn & storm::kPsnMask;
  const uint8_t level =
      cfg.storm && kind != kCnp ? TagHostResponse(qi, d) : static_cast<uint8_t>(top_level);
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
  p.prio = level;
  p.flags = static_cast<uint8_t>((ce ? kCe : 0) | (kind != kCnp ? kFromResponder : 0));
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
  qp.rd_gap = false;
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
    if (fs.op == Op::kRead) {  // its last response arrived
      flows[f].delivered = now;
      --qp.reads;
    }
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
  // An acknowledgement past a READ whose responses have not all arrived: they were lost or
  // overtaken, and the requester re-issues the READ (RoCE's implied NAK).
  const uint32_t upto = FirstUnreadPsn(qp, p.psn);
  Acked(qp, qi, upto);
  if (upto < p.psn) ReadGap(qp, qi);
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
  if (p.flags & kResp) {
    ReceiveResponse(p);
  } else if (p.kind == kData) {
    ReceiveData(host, p);
  } else if (p.kind == kReadReq) {
    ReceiveReadRequest(p);
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

absl::Status Simulator::AddFlow(uint32_t src, uint32_t dst, uint64_t size, uint64_t start_ns,
                                Op op) {
  Impl& m = *impl_;
  if (src >= m.num_hosts || dst >= m.num_hosts || src == dst) {
    return absl::InvalidArgumentError(absl::StrCat("flow ", src, " -> ", dst, ": hosts are 0..",
                                                   m.num_hosts - 1, " and must differ"));
  }
  if (size == 0 || size > storm::kMaxMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("flow size ", size, ": give 1..", storm::kMaxMessageBytes, " bytes"));
  }
  if (op == Op::kRead && m.cfg.transport != Transport::kGoBackN) {
    return absl::InvalidArgumentError(
        "a READ needs go-back-N (the requester takes READ responses in order)");
  }
  m.NewFlow(src, dst, size, start_ns * 1000, op);
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
