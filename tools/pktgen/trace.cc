// File: tools/pktgen/trace.cc
#include "tools/pktgen/trace.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dataplane/pkt/builder.h"
#include "dataplane/pkt/parse.h"

namespace heddle::pktgen {
namespace {

using pkt::FrameSpec;
using pkt::PcapRecord;
using pkt::RoceSpec;
namespace op = pkt::op;

// SplitMix64: a tiny generator whose output does not depend on the standard library, so a seed
// gives the same trace everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi].
  uint64_t Range(uint64_t lo, uint64_t hi) { return lo + Next() % (hi - lo + 1); }
  bool Chance(int percent) { return static_cast<int>(Next() % 100) < percent; }

 private:
  uint64_t s_;
};

constexpr uint32_t kPsnMask = 0xffffff;
constexpr uint8_t kDscpRoce = 26;  // the usual RoCE traffic class
constexpr uint8_t kDscpCnp = 48;   // the usual CNP traffic class
constexpr uint8_t kEcnEct0 = 2;
constexpr uint8_t kAckSyndrome = 0x1f;  // ACK, unlimited credits
constexpr int kPeers = 4;

enum class Kind { kWrite, kSend, kRead, kAtomic };

struct Message {
  Kind kind = Kind::kWrite;
  bool active = false;
  bool imm = false;
  uint32_t size = 0;
  uint32_t sent = 0;       // payload bytes already sent
  uint32_t first_psn = 0;  // PSN of the first packet
};

struct Qp {
  uint32_t local_qpn = 0;   // the host's QP (destination of uplink -> host frames)
  uint32_t remote_qpn = 0;  // the peer's QP (destination of host -> uplink frames)
  uint32_t next_psn = 0;
  uint32_t msn = 0;  // the peer's message sequence number, echoed in AETH
  uint32_t mtu = 1024;
  uint16_t sport = 0;
  uint16_t reverse_sport = 0;
  int peer = 0;
  bool uc = false;  // small mix: UC QPs get no ACKs
  Message msg;
  uint32_t since_ack = 0;
  uint64_t last_uplink_ns = 0;
};

struct Timed {
  uint64_t ns;
  uint64_t order;  // keeps equal timestamps in generation order
  std::vector<uint8_t> frame;
};

class Generator {
 public:
  explicit Generator(const TraceOptions& o) : o_(o), rng_(o.seed) {
    for (int i = 0; i < o.qps; ++i) {
      Qp q;
      q.local_qpn = 0x000100 + static_cast<uint32_t>(i) * 0x11;
      q.remote_qpn = 0x010000 + static_cast<uint32_t>(rng_.Range(0, 0xfff)) * 0x10 + i;
      q.next_psn = static_cast<uint32_t>(rng_.Next()) & kPsnMask;
      q.mtu = rng_.Chance(50) ? 1024 : 4096;
      q.sport = static_cast<uint16_t>(0xc000 | (rng_.Next() & 0x3fff));
      q.reverse_sport = static_cast<uint16_t>(0xc000 | (rng_.Next() & 0x3fff));
      q.peer = i % kPeers;
      q.uc = o.mix == Mix::kSmall && i % 2 == 1;
      qps_.push_back(q);
    }
    ud_psn_ = static_cast<uint32_t>(rng_.Next()) & kPsnMask;
    host_ns_ = o.start_ns;
  }

  Trace Run() {
    const int good = o_.packets - o_.malformed;
    while (static_cast<int>(host_.size()) < good) {
      switch (o_.mix) {
        case Mix::kDemo:
          DemoStep();
          break;
        case Mix::kSmall:
          SmallStep();
          break;
        case Mix::k1k:
          OneKStep();
          break;
      }
    }
    host_.resize(static_cast<size_t>(good));
    InsertMalformed();
    Trace t;
    for (Timed& f : host_) t.host.push_back(Record(f));
    std::stable_sort(uplink_.begin(), uplink_.end(), [](const Timed& a, const Timed& b) {
      return a.ns != b.ns ? a.ns < b.ns : a.order < b.order;
    });
    for (Timed& f : uplink_) t.uplink.push_back(Record(f));
    return t;
  }

 private:
  static PcapRecord Record(Timed& f) {
    PcapRecord r;
    r.timestamp_ns = f.ns;
    r.orig_len = static_cast<uint32_t>(f.frame.size());
    r.data = std::move(f.frame);
    return r;
  }

  // Addresses: the host is 10.0.0.1 / fd00::1, peer p is 10.0.1.(p+1) / fd00:1::(p+1); frames
  // leave the host towards the gateway MAC and come back from it.
  FrameSpec Frame(const Qp& q, bool to_uplink) const {
    FrameSpec f;
    const pkt::MacAddr host_mac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
    const pkt::MacAddr gw_mac = {0x02, 0x00, 0x00, 0x00, 0x00, 0xfe};
    f.src_mac = to_uplink ? host_mac : gw_mac;
    f.dst_mac = to_uplink ? gw_mac : host_mac;
    if (o_.vlan >= 0) {
      f.vlans.push_back({pkt::kEtherTypeVlan, static_cast<uint16_t>(3 << 13 | (o_.vlan & 0xfff))});
    }
    f.ipv6 = o_.ipv6;
    const std::array<uint8_t, 4> host4 = {10, 0, 0, 1};
    const std::array<uint8_t, 4> peer4 = {10, 0, 1, static_cast<uint8_t>(q.peer + 1)};
    std::array<uint8_t, 16> host6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    std::array<uint8_t, 16> peer6 = {0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    peer6[15] = static_cast<uint8_t>(q.peer + 1);
    f.src_ip4 = to_uplink ? host4 : peer4;
    f.dst_ip4 = to_uplink ? peer4 : host4;
    f.src_ip6 = to_uplink ? host6 : peer6;
    f.dst_ip6 = to_uplink ? peer6 : host6;
    f.dscp = kDscpRoce;
    f.ecn = kEcnEct0;
    f.udp_sport = to_uplink ? q.sport : q.reverse_sport;
    f.ip_id = static_cast<uint16_t>(ip_id_);
    return f;
  }

  void EmitHost(std::vector<uint8_t> frame) {
    host_ns_ += (frame.size() + 24) * 8 / 100 + rng_.Range(0, 200);  // 100 Gb/s + jitter
    host_.push_back({host_ns_, order_++, std::move(frame)});
    ++ip_id_;
  }
  // The peer answers one QP in order: its frames never overtake each other, whatever the RTT.
  void EmitUplink(Qp& q, uint64_t ns, std::vector<uint8_t> frame) {
    ns = std::max(ns, q.last_uplink_ns + 40);
    q.last_uplink_ns = ns;
    uplink_.push_back({ns, order_++, std::move(frame)});
  }
  uint64_t Rtt() { return rng_.Range(3000, 8000); }

  // --- demo ---------------------------------------------------------------------------------

  void DemoStep() {
    const uint64_t roll = rng_.Range(0, 999);
    if (roll < 15) return NonRoce();
    if (roll < 55) return UdSend();
    Qp& q = qps_[rng_.Range(0, qps_.size() - 1)];
    if (!q.msg.active) StartMessage(q);
    Continue(q);
  }

  static uint32_t SizeBetweenLog2(Rng& rng, int lo, int hi) {
    const int k = static_cast<int>(rng.Range(lo, hi));
    return (1u << k) + static_cast<uint32_t>(rng.Range(0, (1u << k) - 1));
  }

  void StartMessage(Qp& q) {
    Message& m = q.msg;
    m = Message();
    m.active = true;
    m.first_psn = q.next_psn;
    const uint64_t roll = rng_.Range(0, 99);
    if (roll < 50) {
      m.kind = Kind::kWrite;
      m.size = SizeBetweenLog2(rng_, 11, 17);  // 2 KiB .. 256 KiB
      m.imm = rng_.Chance(10);
    } else if (roll < 72) {
      m.kind = Kind::kRead;
      m.size = SizeBetweenLog2(rng_, 12, 16);
    } else if (roll < 95) {
      m.kind = Kind::kSend;
      m.size = SizeBetweenLog2(rng_, 6, 14);  // 64 B .. 32 KiB
      m.imm = rng_.Chance(10);
    } else {
      m.kind = Kind::kAtomic;
      m.size = 8;
    }
  }

  void Continue(Qp& q) {
    Message& m = q.msg;
    RoceSpec r;
    r.dest_qp = q.remote_qpn;
    r.psn = q.next_psn;
    r.va = 0x7f0000000000ull | (static_cast<uint64_t>(q.local_qpn) << 24);
    r.rkey = 0x1000 + q.local_qpn;
    r.payload_seed = static_cast<uint8_t>(q.next_psn);
    if (m.kind == Kind::kRead) {
      r.opcode = op::kReadRequest;
      r.dma_length = m.size;
      r.ack_req = true;
      EmitHost(pkt::BuildRoce(Frame(q, true), r));
      const uint32_t n = (m.size + q.mtu - 1) / q.mtu;
      ReadResponses(q, m.first_psn, m.size, host_ns_ + Rtt());
      q.next_psn = (q.next_psn + n) & kPsnMask;
      m.active = false;
      return;
    }
    if (m.kind == Kind::kAtomic) {
      r.opcode = rng_.Chance(50) ? op::kCompareSwap : op::kFetchAdd;
      r.swap_add = rng_.Range(1, 16);
      r.compare = 0;
      r.ack_req = true;
      EmitHost(pkt::BuildRoce(Frame(q, true), r));
      RoceSpec a;
      a.opcode = op::kAtomicAcknowledge;
      a.dest_qp = q.local_qpn;
      a.psn = q.next_psn;
      a.syndrome = kAckSyndrome;
      a.msn = q.msn = (q.msn + 1) & kPsnMask;
      a.orig_data = rng_.Range(0, 1000);
      EmitUplink(q, host_ns_ + Rtt(), pkt::BuildRoce(Frame(q, false), a));
      q.next_psn = (q.next_psn + 1) & kPsnMask;
      m.active = false;
      return;
    }
    const bool first = m.sent == 0;
    const uint32_t len = std::min(q.mtu, m.size - m.sent);
    const bool last = m.sent + len == m.size;
    const bool write = m.kind == Kind::kWrite;
    if (first && last) {
      r.opcode = write ? (m.imm ? op::kWriteOnlyImm : op::kWriteOnly)
                       : (m.imm ? op::kSendOnlyImm : op::kSendOnly);
    } else if (first) {
      r.opcode = write ? op::kWriteFirst : op::kSendFirst;
    } else if (last) {
      r.opcode = write ? (m.imm ? op::kWriteLastImm : op::kWriteLast)
                       : (m.imm ? op::kSendLastImm : op::kSendLast);
    } else {
      r.opcode = write ? op::kWriteMiddle : op::kSendMiddle;
    }
    r.dma_length = m.size;
    r.imm = 0x1000000 + q.msn;
    r.payload_len = len;
    r.ack_req = last;
    r.solicited = last && !write;
    EmitHost(pkt::BuildRoce(Frame(q, true), r));
    m.sent += len;
    q.next_psn = (q.next_psn + 1) & kPsnMask;
    // Now and then the fabric marks a data packet and the peer sends the host a CNP.
    if (write && rng_.Chance(3)) Cnp(q, host_ns_ + rng_.Range(1500, 4000));
    if (last) {
      Ack(q, r.psn, host_ns_ + Rtt(), 1);
      m.active = false;
    }
  }

  // An ACK up to `psn`, `completed` more messages done (coalesced ACKs cover several; an ACK in
  // the middle of a long WRITE covers none).
  void Ack(Qp& q, uint32_t psn, uint64_t ns, uint32_t completed) {
    RoceSpec a;
    a.opcode = op::kAcknowledge;
    a.dest_qp = q.local_qpn;
    a.psn = psn;
    a.syndrome = kAckSyndrome;
    a.msn = q.msn = (q.msn + completed) & kPsnMask;
    EmitUplink(q, ns, pkt::BuildRoce(Frame(q, false), a));
  }

  void Cnp(Qp& q, uint64_t ns) {
    FrameSpec f = Frame(q, false);
    f.dscp = kDscpCnp;
    f.ecn = 0;
    RoceSpec c;
    c.opcode = op::kCnp;
    c.dest_qp = q.local_qpn;
    c.becn = true;
    c.mig_req = false;
    EmitUplink(q, ns, pkt::BuildRoce(f, c));
  }

  void ReadResponses(Qp& q, uint32_t first_psn, uint32_t size, uint64_t ns) {
    const uint32_t n = (size + q.mtu - 1) / q.mtu;
    q.msn = (q.msn + 1) & kPsnMask;
    const FrameSpec f = Frame(q, false);
    for (uint32_t i = 0; i < n; ++i) {
      RoceSpec r;
      r.dest_qp = q.local_qpn;
      r.psn = (first_psn + i) & kPsnMask;
      r.payload_len = i + 1 == n ? size - i * q.mtu : q.mtu;
      r.payload_seed = static_cast<uint8_t>(i);
      r.syndrome = kAckSyndrome;
      r.msn = q.msn;
      if (n == 1) {
        r.opcode = op::kReadResponseOnly;
      } else if (i == 0) {
        r.opcode = op::kReadResponseFirst;
      } else if (i + 1 == n) {
        r.opcode = op::kReadResponseLast;
      } else {
        r.opcode = op::kReadResponseMiddle;
      }
      ns += (q.mtu + 100) * 8 / 100;
      EmitUplink(q, ns, pkt::BuildRoce(f, r));
    }
  }

  void UdSend() {
    Qp ud;
    ud.peer = static_cast<int>(rng_.Range(0, kPeers - 1));
    ud.sport = 0xc000 | 0x1d;
    RoceSpec r;
    r.opcode = rng_.Chance(30) ? op::kUdSendOnlyImm : op::kUdSendOnly;
    r.dest_qp = 0x000200 + static_cast<uint32_t>(ud.peer);
    r.psn = ud_psn_;
    ud_psn_ = (ud_psn_ + 1) & kPsnMask;
    r.qkey = 0x11111111;
    r.src_qp = 0x000050;
    r.imm = 0xfeed;
    r.payload_len = static_cast<uint32_t>(rng_.Range(16, 256));
    EmitHost(pkt::BuildRoce(Frame(ud, true), r));
  }

  void NonRoce() {
    FrameSpec f = Frame(qps_[0], true);
    if (rng_.Chance(50) && !o_.ipv6) {
      f.dst_ip4 = {10, 0, 0, 254};
      EmitHost(pkt::BuildArpRequest(f));
      return;
    }
    f.dscp = 0;
    f.ecn = 0;
    f.udp_sport = 33000;
    f.udp_dport = 47000;  // telemetry-style plain UDP
    std::vector<uint8_t> payload(rng_.Range(20, 200), 0x5a);
    EmitHost(pkt::BuildUdp(f, payload));
  }

  // --- small: zero-length SEND only, 60-byte frames ---------------------------------------

  void SmallStep() {
    Qp& q = qps_[next_qp_++ % qps_.size()];
    RoceSpec r;
    r.opcode = q.uc ? static_cast<uint8_t>(op::kUc | op::kSendOnly) : op::kSendOnly;
    r.dest_qp = q.remote_qpn;
    r.psn = q.next_psn;
    r.ack_req = !q.uc && ++q.since_ack % 8 == 0;
    EmitHost(pkt::BuildRoce(Frame(q, true), r));
    q.next_psn = (q.next_psn + 1) & kPsnMask;
    if (r.ack_req) Ack(q, r.psn, host_ns_ + Rtt(), 8);
  }

  // --- 1k: one long WRITE per QP, 1024-byte frames ---------------------------------------

  void OneKStep() {
    constexpr size_t kFrameLen = 1024;
    Qp& q = qps_[next_qp_++ % qps_.size()];
    FrameSpec f = Frame(q, true);
    // RoCE frames are 2 mod 4 bytes long; the last 2 bytes are Ethernet padding after the IP
    // datagram, which the parser must accept anyway.
    f.min_frame_len = kFrameLen;
    RoceSpec r;
    r.opcode = q.msg.active ? op::kWriteMiddle : op::kWriteFirst;
    r.dest_qp = q.remote_qpn;
    r.psn = q.next_psn;
    r.va = 0x7f0000000000ull;
    r.rkey = 0x1000 + q.local_qpn;
    r.dma_length = 1u << 30;
    r.payload_len = static_cast<uint32_t>((kFrameLen - pkt::RoceFrameLen(f, r.opcode, 0)) & ~3u);
    r.payload_seed = static_cast<uint8_t>(q.next_psn);
    r.ack_req = ++q.since_ack % 16 == 0;
    q.msg.active = true;
    EmitHost(pkt::BuildRoce(f, r));
    q.next_psn = (q.next_psn + 1) & kPsnMask;
    if (r.ack_req) Ack(q, r.psn, host_ns_ + Rtt(), 0);
  }

  // --- malformed frames ----------------------------------------------------------------------

  void InsertMalformed() {
    for (int k = 0; k < o_.malformed; ++k) {
      const Qp& q = qps_[static_cast<size_t>(k) % qps_.size()];
      RoceSpec r;
      r.opcode = op::kWriteFirst;
      r.dest_qp = q.remote_qpn;
      r.psn = q.next_psn;
      r.dma_length = 4096;
      r.payload_len = 64;
      FrameSpec f = Frame(q, true);
      f.min_frame_len = 0;
      std::vector<uint8_t> b = pkt::BuildRoce(f, r);
      pkt::PacketDesc d;
      pkt::Parse(b.data(), b.size(), &d);
      switch (k % 6) {
        case 0:  // ICRC wrong: parses, fails VerifyIcrc
          b[d.icrc_off] ^= 0xff;
          break;
        case 1:  // IP length beyond the frame
          b.resize(b.size() - 10);
          break;
        case 2:  // UDP length 7
          b[d.l4_off + 4] = 0;
          b[d.l4_off + 5] = 7;
          break;
        case 3:  // BTH transport version 1
          b[d.bth_off + 1] |= 0x01;
          break;
        case 4: {  // datagram ends inside RETH, lengths consistent
          const size_t cut = d.bth_off + pkt::kBthLen + 8;
          b.resize(cut);
          const size_t ip_len = cut - d.l3_off - (o_.ipv6 ? pkt::kIpv6HeaderLen : 0);
          const size_t ip_len_off = d.l3_off + (o_.ipv6 ? 4 : 2);
          b[ip_len_off] = static_cast<uint8_t>(ip_len >> 8);
          b[ip_len_off + 1] = static_cast<uint8_t>(ip_len);
          b[d.l4_off + 4] = 0;
          b[d.l4_off + 5] = static_cast<uint8_t>(cut - d.l4_off);
          if (!o_.ipv6) {
            b[d.l3_off + 10] = b[d.l3_off + 11] = 0;
            const uint16_t c = pkt::Ipv4HeaderChecksum(b.data() + d.l3_off, d.l4_off - d.l3_off);
            b[d.l3_off + 10] = static_cast<uint8_t>(c >> 8);
            b[d.l3_off + 11] = static_cast<uint8_t>(c);
          }
          break;
        }
        default: {  // three VLAN tags
          const uint8_t tag[4] = {0x81, 0x00, 0x00, 0x01};
          for (int t = 0; t < 3; ++t) b.insert(b.begin() + 12, tag, tag + 4);
          break;
        }
      }
      const size_t pos = static_cast<size_t>(rng_.Range(0, host_.size()));
      const uint64_t ns = pos < host_.size() ? host_[pos].ns : host_ns_ + 100;
      host_.insert(host_.begin() + static_cast<std::ptrdiff_t>(pos), Timed{ns, order_++, b});
    }
  }

  const TraceOptions& o_;
  Rng rng_;
  std::vector<Qp> qps_;
  std::vector<Timed> host_;
  std::vector<Timed> uplink_;
  uint64_t host_ns_ = 0;
  uint64_t order_ = 0;
  uint32_t ip_id_ = 0;
  uint32_t ud_psn_ = 0;
  size_t next_qp_ = 0;
};

}  // namespace

absl::StatusOr<Mix> ParseMix(const std::string& name) {
  if (name == "demo") return Mix::kDemo;
  if (name == "small") return Mix::kSmall;
  if (name == "1k") return Mix::k1k;
  return absl::InvalidArgumentError(
      absl::StrCat("--mix ", name, ": unknown mix; use demo, small or 1k"));
}

absl::StatusOr<Trace> GenerateTrace(const TraceOptions& o) {
  if (o.packets < 1 || o.packets > 10000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--packets ", o.packets, ": must be between 1 and 10000000"));
  }
  if (o.qps < 1 || o.qps > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--qps ", o.qps, ": must be between 1 and 4096"));
  }
  if (o.vlan > 4094) {
    return absl::InvalidArgumentError(absl::StrCat("--vlan ", o.vlan, ": VID must be 0-4094"));
  }
  if (o.malformed < 0 || o.malformed > o.packets) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--malformed ", o.malformed, ": must be between 0 and --packets (", o.packets, ")"));
  }
  return Generator(o).Run();
}

}  // namespace heddle::pktgen
