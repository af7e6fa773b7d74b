// File: tools/heddle-sim/lib/simulator.h
//
// heddle-sim's engine (docs/sim.md): a packet-level discrete-event simulation of an RDMA fabric
// whose forwarding, priority tagging and path choice are the daemon's own code.
//
//   * The fabric is a Nüwa description (control/nuwa DSL). It is compiled into the forwarding
//     artifacts (control/nuwa/compiler.h), serialized and decoded again as a loader would, and
//     every switch forwards by its fwd::SwitchTable: the next-hop set of the artifact, one member
//     picked by the fabric's hash model (CRC of the 5-tuple, the switch's seed, its tier's bit
//     offset) over the packet's UDP source port. Each host gets its fwd::HostTable's path sets as
//     a PIN path table.
//   * Host NIC egress runs dataplane/storm (RequestTracker + TagPacket, the backlog from the
//     QP's queued requests as the host shim reports it) to pick each packet's priority level,
//     and dataplane/lb's PinSelector (any balancer, PIN on or off) to pick its path (uplink port
//     and entropy). Acknowledgements feed the selector (REPS, adaptive) and the STORM tracker.
//     Those modules read the packet's headers, so every QP keeps real RoCEv2 headers built with
//     dataplane/pkt once, and a PacketDesc is filled per packet.
//   * Links have a rate and a latency; ports have one FIFO per priority served in strict
//     priority, a finite buffer (drops counted), RED-like ECN marking (Kmin..Kmax) and optional
//     PFC (pause and resume per priority at ingress thresholds).
//   * Hosts run an RDMA-like transport: QPs with any number of queued messages, MTU packets,
//     per-packet ACKs, go-back-N or selective repeat (IRN-like), a window, an RTO and optional
//     DCQCN-like rate control.
//
// Everything is deterministic under SimConfig::seed: one event queue ordered by (time,
// insertion), one random stream per purpose. Packets live in a pool; no event allocates.
//
//   HEDDLE_ASSIGN_OR_RETURN(auto sim, Simulator::Create(fabric, config));
//   sim->SetPoissonWorkload(cdf, /*load=*/0.5);           // and/or AddFlow(), AddIncast()
//   SimResult r = sim->Run();
//   WriteCsv(r, out_dir);                                  // report.h
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control/nuwa/fabric.h"
#include "dataplane/lb/pin.h"
#include "dataplane/storm/levels.h"
#include "tools/heddle-sim/lib/event_queue.h"
#include "tools/heddle-sim/lib/workload.h"

namespace heddle::sim {

enum class Transport : uint8_t {
  kGoBackN,         // in-order: the receiver drops out-of-order packets and NAKs the gap
  kSelectiveRepeat  // IRN-like: out-of-order packets are kept; losses are inferred from SACKs
};
const char* TransportName(Transport t);  // "gbn", "sr"

// The RDMA operation of a message (docs/sim.md §2.3). Its packets carry the real RoCEv2 opcodes,
// so STORM's tracker and PIN see what they would see in the daemon.
enum class Op : uint8_t {
  kWrite,  // WRITE first/middle/last/only; the size is in the RETH of the first packet
  kSend,   // SEND first/middle/last/only; the size is known at the last packet only
  kRead,   // one READ request (RETH: the size) to the responder, which streams READ responses
           // back; the FCT ends when the last response arrived. Go-back-N only.
};
const char* OpName(Op op);  // "write", "send", "read"

struct SimConfig {
  // ---- Fabric ----
  double link_latency_ns = 1000;  // every link, one way
  uint32_t mtu = 4096;            // payload bytes per data packet
  // Bytes a packet carries besides its payload: Ethernet, IPv4, UDP, BTH, ICRC and FCS (62),
  // rounded. ACK, NAK and CNP packets are this size.
  uint32_t header_bytes = 64;

  // ---- Switch ports ----
  // Per egress port, all priorities; with PFC per ingress port and priority (xoff + headroom).
  uint64_t buffer_bytes = 100 * (4096 + 64);
  bool ecn = true;
  uint64_t ecn_kmin_bytes = 25 * (4096 + 64);  // per priority queue
  uint64_t ecn_kmax_bytes = 76 * (4096 + 64);
  double ecn_pmax = 1.0;  // marking probability reached at Kmax (RED's max_p)
  bool pfc = false;
  uint64_t pfc_xoff_bytes = 40 * (4096 + 64);  // per ingress port and priority
  uint64_t pfc_xon_bytes = 30 * (4096 + 64);

  // ---- Transport ----
  Transport transport = Transport::kGoBackN;
  uint32_t window_packets = 0;  // 0: one base RTT of the longest path at the host rate, + 1
  uint64_t rto_ns = 100'000;
  // SR: a hole is taken for lost once packets this many PSNs after it were SACKed; 0: the
  // window (reordering within a window costs nothing, losses are found about an RTT late).
  uint32_t sr_reorder_packets = 0;
  uint32_t qps_per_pair = 1;  // QPs between each (source, destination) pair
  // Every message on a QP of its own (qps_per_pair is then ignored): no message waits behind
  // another between the same hosts, as when each flow is its own connection (the flow-level
  // simulators' model). Off: RDMA's, where a QP's messages go out one after the other.
  bool qp_per_message = false;
  bool dcqcn = false;
  double dcqcn_g = 1.0 / 256;
  uint64_t dcqcn_period_ns = 55'000;  // alpha decay and rate increase timer
  uint64_t dcqcn_cnp_interval_ns = 50'000;
  double dcqcn_ai_fraction = 0.01;  // additive increase, a fraction of the line rate
  uint32_t dcqcn_fast_recovery = 5;
  // A window that ECN shrinks (DCTCP-like): per round trip α ← (1−g)α + g·F (F the share of
  // ACKs echoing CE), the window × (1 − α/2) if any; + 1/window per unmarked ACK, up to
  // window_packets; halved on a timeout. Starts at window_packets.
  bool ecn_window = false;
  double ecn_window_g = 1.0 / 16;
  // Packet trimming (NDP-like) instead of tail drop: a data packet that does not fit a switch
  // port's buffer is cut to its header, marked CE and sent on at the top priority; its receiver
  // NAKs it at once (go-back-N: back to its next PSN; selective repeat: that PSN alone). The
  // headers may use trim_header_bytes beyond buffer_bytes; past that they are dropped too.
  bool trim = false;
  uint64_t trim_header_bytes = 100 * 64;

  // ---- STORM (dataplane/storm) ----
  bool storm = false;
  storm::LevelConfig levels;  // levels.levels priority queues everywhere; control at the top
  // The daemon's ordering guards in per-message mode (docs/storm.md §5, §6.5; storm.fabric_guard
  // and storm.response_window_ms): a request that starts while the QP has packets unacknowledged
  // takes no level above the newest one's; a READ response stream and the ACKs a responder sends
  // take none above its last READ response's for the window after it. The simulator knows the
  // join of responses to their requests exactly (the daemon needs the verbs shim for it).
  bool storm_fabric_guard = true;
  uint32_t storm_response_window_ms = 2;

  // ---- PIN and balancers (dataplane/lb) ----
  // seed, flow_capacity, link_gbps and rtt_ns are filled in per host; a flow entry idle this
  // long may be reused (the daemon's default is 10 ms; a simulated host with thousands of peers
  // needs its entries back sooner).
  lb::LbConfig lb = [] {
    lb::LbConfig c;
    c.flow_idle_ns = 200'000;
    return c;
  }();

  // Degraded links (slower, or longer): the link above `lower` (a node name of the fabric, e.g.
  // "leaf[0]" or "host[3]") on its up port `up_port`, both directions. The ideal FCTs ignore it.
  struct Degraded {
    std::string lower;
    uint32_t up_port = 0;
    double gbps = 0;              // 0: keep the fabric's speed
    double extra_latency_ns = 0;  // added to the link's latency
  };
  std::vector<Degraded> degraded;

  // The operations of the Poisson workload's messages (incasts and collectives are WRITEs).
  OpMix ops;

  uint64_t seed = 1;
  // Arrivals stop at `duration_ns`; the run ends when every flow finished, or at
  // `max_time_ns` (0: 20 × duration_ns + 10 ms).
  uint64_t duration_ns = 1'000'000;
  uint64_t max_time_ns = 0;
};

// One message (flow) and what became of it.
struct FlowRecord {
  uint32_t src = 0, dst = 0;
  uint64_t size = 0;
  TimePs start = 0;      // when it was posted (a collective's flow: when its inputs were there)
  TimePs delivered = 0;  // when the receiver had all of it; 0: not yet
  TimePs finish = 0;     // when the sender had the last ACK: FCT = finish - start; 0: not yet
  TimePs ideal = 0;      // its FCT alone in an empty network (IdealFct)
  bool collective = false;
  Op op = Op::kWrite;
};

struct PortStats {
  uint64_t tx_bytes = 0;
  uint64_t tx_packets = 0;
};

// What every run reports (report.h turns it into text and CSV).
struct SimResult {
  std::vector<FlowRecord> flows;
  uint64_t events = 0;
  uint64_t max_pending_events = 0;  // the event queue's depth, sampled every 4096 events
  double wall_seconds = 0;
  double cpu_seconds = 0;  // the run's thread CPU time: the speed on one core
  TimePs end_time = 0;
  uint64_t data_packets_sent = 0;       // by hosts, retransmissions included
  uint64_t data_packets_delivered = 0;  // arrived at their destination host
  uint64_t data_bytes_sent = 0;         // payload, retransmissions included
  uint64_t unique_bytes_delivered = 0;  // payload accepted by receivers (each byte once)
  uint64_t control_packets_sent = 0;    // ACK, NAK, CNP
  uint64_t control_packets_delivered = 0;
  uint64_t drops_buffer = 0;       // data and control packets dropped at a full port
  uint64_t drops_unreachable = 0;  // no route in the artifact / a dead link
  uint64_t drops_data = 0;         // of the above, data packets
  uint64_t ecn_marks = 0;
  uint64_t pfc_pauses = 0;
  uint64_t retransmissions = 0;
  uint64_t timeouts = 0;
  uint64_t naks = 0;
  uint64_t cnps = 0;
  uint64_t out_of_order = 0;  // data packets that arrived ahead of the receiver's next PSN
  // READs: requests sent (re-issues included; counted as control packets), and re-issues after a
  // gap in a READ's responses or an ACK past them (RoCE's implied NAK: the responses were lost
  // or overtaken).
  uint64_t read_requests = 0;
  uint64_t read_reissues = 0;
  // STORM's guards (SimConfig::storm_fabric_guard): requests started behind unacknowledged
  // packets of their QP (capped at the newest one's level), and READ response streams and ACKs
  // whose level the response window lowered.
  uint64_t fabric_guarded = 0;
  uint64_t response_guarded = 0;
  // SimConfig::trim: data packets cut to their header, and those headers that reached their
  // receiver (the others were dropped: counted in drops_buffer and drops_data).
  uint64_t trims = 0;
  uint64_t trimmed_delivered = 0;
  // Collectives (AddCollective): their flows, how many finished, and when the last one was
  // delivered (the job's completion time; 0 if it did not complete).
  uint64_t collective_flows = 0;
  uint64_t collective_finished = 0;
  TimePs collective_done = 0;
  std::vector<uint64_t> level_bytes;  // data payload bytes sent per priority level
  // Per "path": the up links of every switch tier, tier by tier (tier-1 uplinks first).
  struct UplinkTier {
    int tier = 1;
    std::vector<uint64_t> bytes;  // per up link of the tier, in (plane, switch, up port) order
    double jain = 1;  // over all of them (sources that send more load their uplinks more)
    // Each switch's Jain's index over its own up links, averaged weighted by its bytes: how
    // evenly the balancing spreads what a switch has to send.
    double jain_per_switch = 1;
  };
  std::vector<UplinkTier> uplinks;
  // Mean queueing delay (enqueue to start of transmission) over all switch ports, and the sum
  // of waits and packet count behind it.
  double mean_queue_delay_ns = 0;
  uint64_t queued_packets = 0;
  struct PortWait {
    int tier = 0;        // the switch's tier
    uint32_t index = 0;  // the switch's index in its tier (plane 0 first)
    uint32_t port = 0;   // its port: down ports first, then up ports
    uint64_t packets = 0;
    double mean_wait_ns = 0;
    bool up = false;     // an up port (towards the next tier)
    uint64_t drops = 0;  // packets dropped here (buffer full)
    uint64_t trims = 0;  // data packets trimmed here (SimConfig::trim)
  };
  std::vector<PortWait> port_waits;  // switch egress ports that sent or dropped anything
  uint64_t max_queue_bytes = 0;      // the deepest egress queue seen
  lb::LbConfig lb;
  SimConfig config;
  std::string fabric_name;
  uint32_t hosts = 0;
};

// Jain's fairness index of `x`: 1 when all are equal, 1/n when one takes all; 1 for all zeros.
double JainIndex(const std::vector<uint64_t>& x);

class Simulator {
 public:
  // Compiles `fabric` (validated), builds switches, hosts and their PIN selectors. Errors name
  // the setting and the fix.
  static absl::StatusOr<std::unique_ptr<Simulator>> Create(const nuwa::Fabric& fabric,
                                                           const SimConfig& config);
  ~Simulator();

  // Work. All of it must be added before Run().
  // One message of `size` bytes from host `src` to host `dst` at `start_ns`: `src` WRITEs or
  // SENDs it to `dst`, or READs it from `dst` (the bytes then flow from `dst` to `src`).
  absl::Status AddFlow(uint32_t src, uint32_t dst, uint64_t size, uint64_t start_ns,
                       Op op = Op::kWrite);
  // Every host sends messages with sizes from `cdf` to uniformly random other hosts it has a
  // path to, Poisson arrivals at `load` × its link rate, from 0 to duration_ns.
  absl::Status SetPoissonWorkload(const Cdf& cdf, double load);
  // `senders` hosts (the first ones other than `receiver`, spread over the fabric) send `size`
  // bytes each to `receiver` at `start_ns`, and again every `period_ns` (0: once) until
  // duration_ns.
  absl::Status AddIncast(uint32_t receiver, uint32_t senders, uint64_t size, uint64_t start_ns,
                         uint64_t period_ns);

  // Training traffic (the LLM pattern): `iterations` rounds of one collective over `hosts`.
  //   kRingAllReduce: 2 (N − 1) steps; in each, every host sends ⌈bytes / N⌉ to the next one in
  //     the ring, once it has received the previous step's chunk from the one before it.
  //   kAllToAll: every host sends ⌈bytes / (N − 1)⌉ to every other host.
  // A host starts iteration k + 1 `gap_ns` (its compute) after it received all it needed of
  // iteration k: its last ring step, or every other host's all-to-all flow to it. Each transfer
  // is one message (flow) on the pair's QP; its FCT counts from when its inputs were there.
  enum class Collective : uint8_t { kRingAllReduce, kAllToAll };
  absl::Status AddCollective(Collective kind, const std::vector<uint32_t>& hosts, uint64_t bytes,
                             uint64_t start_ns, uint32_t iterations, uint64_t gap_ns);

  // Called about every 2^20 events with (simulated time, the time the run ends at the latest).
  void SetProgress(std::function<void(TimePs now, TimePs end)> progress);

  SimResult Run();

  // The analytic FCT of a message alone in an empty network (docs/sim.md §3): its packets
  // back to back at the first link's rate, store-and-forward at every hop, the last packet's
  // ACK back. Exact for this model when link rates do not decrease towards the hosts. A READ's
  // is the same: its request (a header, like an ACK) out, then the responses back to back.
  TimePs IdealFct(uint32_t src, uint32_t dst, uint64_t size) const;
  // Base round trip of one MTU packet and its ACK between hosts whose lowest common ancestor is
  // at tier `lca_tier`.
  TimePs BaseRtt(int lca_tier) const;
  uint32_t hosts() const;
  uint32_t window_packets() const;
  const lb::LbConfig& lb_config() const;

 private:
  struct Impl;
  explicit Simulator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heddle::sim
