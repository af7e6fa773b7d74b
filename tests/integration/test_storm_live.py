"""STORM on live traffic: heddled on net_af_packet ports between veth pairs in a private network
namespace (netns.py); frames go into h0p while it runs and are captured on u0p, so a test can
put traffic before and after a run-time change (`heddlectl set storm ...`).

Run by ctest (daemon_StormLive) with HEDDLED/HEDDLECTL/HEDDLE_PKTGEN set; needs root.

Levels are predicted independently of dataplane/storm from docs/storm.md §3 with beta 0 (the
egress backlog, which depends on scheduling, then never moves a level):
    level = K - 1 - |{ i : R > c_i }|,  R = S - sent
per message at its first packet (per-message) or per packet (per-packet). In per-message mode the
in-order guard (§5) may also cap a message at the level of its QP's packets still held in heddled,
which depends on how frames fall into bursts; assert_message_levels accepts exactly that.
"""

import os
import random
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "data"))
import harness  # noqa: E402
import netns  # noqa: E402
import scapy_roce_util  # noqa: E402

DSCP = [8, 16, 24, 46]        # per level; the control level is K-1 = 3
CUTOFFS = [4096, 65536, 1 << 20]
STORM_MTU = 1024              # RoCE path MTU of the frames below and of storm.mtu
STORM_YAML = ("storm: { enabled: true, levels: 4, cutoffs: [4096, 65536, 1048576], "
              "mode: per-message, mtu: %d, dscp: [%s], beta: 0, qp_capacity: 4096 }\n" %
              (STORM_MTU, ", ".join(str(x) for x in DSCP)))

L3 = 14  # the frames below are untagged IPv4


def level_of(remaining, cutoffs):
    return len(cutoffs) - sum(1 for c in cutoffs if remaining > c)


# ---- RoCEv2 frames, built with struct (independent of dataplane/pkt's builder) ----

def ipv4_checksum(hdr):
    total = sum(struct.unpack("!%dH" % (len(hdr) // 2), hdr))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def roce_frame(opcode, qpn, psn, payload=b"", dma=None, src="10.1.0.1", dst="10.2.0.1",
               sport=49152, tos=0x02, icrc_ok=True, tver=0):
    """An untagged Ethernet/IPv4/UDP/RoCEv2 frame with valid IPv4 checksum and ICRC. tos 0x02
    sets ECT(0), so a test sees that ECN survives the DSCP rewrite."""
    ext = scapy_roce_util.ext_bytes(opcode, dma=dma if dma is not None else len(payload))
    bth = struct.pack("!BBHII", opcode, tver & 0x0F, 0xFFFF, qpn & 0xFFFFFF, psn & 0xFFFFFF)
    udp_len = 8 + len(bth) + len(ext) + len(payload) + 4
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + udp_len, psn & 0xFFFF, 0x4000,
                               64, 17, 0, bytes(map(int, src.split("."))),
                               bytes(map(int, dst.split(".")))))
    ip[10:12] = struct.pack("!H", ipv4_checksum(bytes(ip)))
    eth = bytes.fromhex("020000000002" "020000000001" "0800")
    frame = bytearray(eth + bytes(ip) + struct.pack("!HHHH", sport, 4791, udp_len, 0) + bth +
                      ext + payload + bytes(4))
    icrc = scapy_roce_util.icrc_manual(bytes(frame), L3, False)
    if not icrc_ok:
        icrc ^= 0x5A5A5A5A
    frame[-4:] = struct.pack("<I", icrc)
    return bytes(frame)


class Qp:
    """The requester side of one RC QP: WRITE messages with consecutive PSNs across batches."""

    def __init__(self, qpn, src="10.1.0.1", dst="10.2.0.1"):
        self.qpn, self.src, self.dst = qpn, src, dst
        self.psn = (qpn * 7919) & 0xFFFFFF
        self.sport = 49152 + (qpn & 0x3FFF)

    def frame(self, opcode, payload=b"", dma=None, **kw):
        f = roce_frame(opcode, self.qpn, self.psn, payload, dma, self.src, self.dst, self.sport,
                       **kw)
        self.psn = (self.psn + 1) & 0xFFFFFF
        return f

    def write(self, size):
        """One RDMA WRITE of `size` bytes (a multiple of 4) at STORM_MTU: ONLY, or FIRST,
        MIDDLE..., LAST; the RETH carries `size`."""
        data = bytes((self.qpn + i) & 0xFF for i in range(size))
        chunks = [data[i:i + STORM_MTU] for i in range(0, max(size, 1), STORM_MTU)] or [b""]
        if len(chunks) == 1:
            return [self.frame(0x0A, chunks[0], dma=size)]
        out = [self.frame(0x06, chunks[0], dma=size)]
        out += [self.frame(0x07, c) for c in chunks[1:-1]]
        out.append(self.frame(0x08, chunks[-1]))
        return out


def flow(frame):
    """(source IP, destination IP, destination QPN) of a RoCEv2-over-IPv4 frame, else None."""
    if len(frame) < L3 + 20 + 8 + 12 or frame[12:14] != b"\x08\x00" or frame[L3 + 9] != 17:
        return None
    ihl = (frame[L3] & 0x0F) * 4
    if struct.unpack("!H", frame[L3 + ihl + 2:L3 + ihl + 4])[0] != 4791:
        return None
    bth = L3 + ihl + 8
    return (frame[L3 + 12:L3 + 16], frame[L3 + 16:L3 + 20], frame[bth + 5:bth + 8])


def masked(frame):
    """The frame with the DSCP bits and the IPv4 checksum blanked: all storm-tag may change."""
    if flow(frame) is None:
        return frame
    b = bytearray(frame)
    b[L3 + 1] &= 0x03
    b[L3 + 10] = b[L3 + 11] = 0
    return bytes(b)


def dscp_of(frame):
    return frame[L3 + 1] >> 2


def json_int(v):
    return int(v, 0) if isinstance(v, str) else int(v)


def heddlectl_has_set_storm():
    """True when the heddlectl under test has `set storm` (added in parallel to this test)."""
    p = subprocess.run([harness.HEDDLECTL, "set", "storm", "--help"], capture_output=True,
                       text=True, timeout=20)
    return p.returncode == 0 and "set storm" in p.stdout


class StormLive(unittest.TestCase):
    """heddled with storm-tag on live traffic: DSCPs per level, ICRC and checksums intact,
    settings changed at run time without restart or loss, hostile frames counted."""

    def setUp(self):
        self.ns = netns.Netns.for_test(self)
        self.tmp = tempfile.mkdtemp(prefix="heddle-live-")
        self.d = netns.NetnsDaemon(self.ns, [
            ("host0", "host", netns.af_packet_vdev(0, "h0")),
            ("uplink0", "uplink", netns.af_packet_vdev(1, "u0")),
        ], verify_icrc=True, data_room=netns.DATA_ROOM, tmp=self.tmp, extra_yaml=STORM_YAML)
        self.addCleanup(self.d.cleanup)
        self.d.start()
        self.pid = self.d.proc.pid

    # ---- helpers ----

    def roundtrip(self, frames, expect=None, udp_port=4791):
        """Sends frames into h0p and returns what comes out of u0p (waits for `expect` frames,
        default all of them; surplus frames are captured too)."""
        cap = self.ns.capture("u0p", count=len(frames) if expect is None else expect,
                              timeout=15, udp_port=udp_port)
        self.ns.send("h0p", frames)
        return cap.wait()

    def pair(self, sent, got):
        """Matches every captured frame to the sent frame it was forwarded from. Frames of one QP
        must come out in the order sent (STORM must not reorder a message); different QPs may
        interleave differently when the egress queues hold packets back. Returns [(in, out)] in
        capture order and asserts nothing was lost, added or changed beyond DSCP/checksum."""
        queues = {}
        for f in sent:
            queues.setdefault(flow(f), []).append(f)
        for q in queues.values():
            q.reverse()
        pairs = []
        for i, o in enumerate(got):
            q = queues.get(flow(o))
            self.assertTrue(q, "captured frame %d was never sent (or came twice): %s" %
                            (i, o[:64].hex()))
            f = q.pop()
            self.assertEqual(masked(o), masked(f),
                             "captured frame %d is not the next frame of its QP, or was changed "
                             "beyond DSCP and IPv4 checksum" % i)
            pairs.append((f, o))
        self.assertEqual(len(got), len(sent), "frames lost: %d sent, %d captured" %
                         (len(sent), len(got)))
        return pairs

    def check_rewrite(self, pairs):
        """Every forwarded RoCEv2 frame: ECN kept, IPv4 header checksum right, ICRC still valid."""
        for i, (f, o) in enumerate(pairs):
            if flow(o) is None:
                self.assertEqual(o, f, "frame %d: not RoCEv2, must be untouched" % i)
                continue
            ihl = (o[L3] & 0x0F) * 4
            self.assertEqual(o[L3 + 1] & 3, f[L3 + 1] & 3, "frame %d: ECN changed" % i)
            self.assertEqual(ipv4_checksum(o[L3:L3 + ihl]), 0, "frame %d: IPv4 checksum" % i)
            ip_len = struct.unpack("!H", o[L3 + 2:L3 + 4])[0]
            stored = struct.unpack("<I", o[L3 + ip_len - 4:L3 + ip_len])[0]
            self.assertEqual(scapy_roce_util.icrc_manual(o, L3, False), stored,
                             "frame %d: ICRC no longer valid" % i)

    def assert_message_levels(self, pairs, expected_level, dscp, what):
        """Per-message mode with heddled's in-order guard (docs/storm.md §5): a message's first
        packet takes its level P = expected_level(sent frame), or, while earlier packets of its
        QP are still held in heddled, at most the level of the newest of them -- the QP's
        previous packet, so min(P, that packet's level); every later packet of the message keeps
        the message's level. Which one happens depends on how frames fall into heddled's bursts,
        so both are accepted; anything else is wrong."""
        wrong, prev, msg, capped = [], {}, {}, 0
        for i, (f, o) in enumerate(pairs):
            key = flow(o)
            if key is None:
                continue
            got = dscp.index(dscp_of(o)) if dscp_of(o) in dscp else None
            op = o[L3 + 28]
            low = op & 0x1F if op & 0xE0 in (0x00, 0x20) else None
            if low in (0x01, 0x02, 0x03, 0x07, 0x08, 0x09, 0x16) and key in msg:
                allowed = {msg[key]}  # a later packet of the message in progress
            else:
                want = expected_level(f)
                allowed = {want}
                if key in prev and prev[key] is not None and prev[key] < want:
                    allowed.add(prev[key])
                if got is not None and got != want and got in allowed:
                    capped += 1
                msg[key] = got
            if got not in allowed:
                wrong.append("frame %d (opcode 0x%02x): DSCP %d, want one of %s" %
                             (i, op, dscp_of(o), sorted(dscp[x] for x in allowed)))
            prev[key] = got
        self.assertEqual(wrong, [], "%s: %d of %d frames mistagged; first: %s" %
                         (what, len(wrong), len(pairs), wrong[:5]))
        return capped

    @staticmethod
    def per_message_levels(frames, cutoffs, k=4):
        """{sent frame: level} in per-message mode: a WRITE takes the level of its RETH size at
        its first packet, a multi-packet SEND (size unknown there) the level of
        storm.unknown_size, by default the lowest (0); every later packet of the message keeps
        it."""
        out, current = {}, {}
        for f in frames:
            op = f[L3 + 28]
            low = op & 0x1F if op & 0xE0 in (0x00, 0x20) else None  # RC or UC
            if low in (0x06, 0x0A, 0x0B):  # WRITE FIRST / ONLY / ONLY with immediate: RETH
                current[flow(f)] = level_of(struct.unpack("!I", f[L3 + 52:L3 + 56])[0], cutoffs)
                out[f] = current[flow(f)]
            elif low in (0x07, 0x08, 0x09):  # WRITE MIDDLE / LAST
                out[f] = current.get(flow(f), k - 1)
            elif low == 0x00:  # SEND FIRST: unknown size
                current[flow(f)] = 0
                out[f] = 0
            elif low in (0x01, 0x02, 0x03):  # SEND MIDDLE / LAST (an orphan is unknown too)
                out[f] = current.get(flow(f), 0)
            else:
                out[f] = k - 1
        return out

    def storm(self):
        return self.d.ctl("show", "storm", json_out=True)["storm"]

    def qps(self):
        rows = self.d.ctl("show", "qp", "--top", "1000", json_out=True).get("qps", [])
        return {(json_int(r.get("qpn", 0)), r.get("direction", "request")): r for r in rows}

    def set_storm(self, *args):
        p = self.d.ctl_run("set", "storm", *args)
        self.assertEqual(p.returncode, 0, "set storm %s: %s%s" % (" ".join(args), p.stdout,
                                                                     p.stderr))
        return p

    def assert_alive_no_drops(self):
        self.assertIsNone(self.d.proc.poll(), "heddled exited:\n" + self.d.read_log())
        self.assertEqual(json_int(self.d.ctl("show", "status", json_out=True)["pid"]), self.pid,
                         "heddled was restarted")
        drops = {k: v for k, v in self.d.drops().items() if v}
        self.assertEqual(drops, {}, "heddled dropped frames")

    def require_set_storm(self):
        if not heddlectl_has_set_storm():
            self.skipTest("heddlectl at %s has no `set storm` command yet (being added to "
                          "tools/heddlectl); run-time STORM changes cannot be tested" %
                          harness.HEDDLECTL)

    def stop_cleanly(self):
        self.assertEqual(self.d.stop(), 0, self.d.read_log())

    # ---- (a) tagging of live traffic ----

    def test_demo_mix_tagged(self):
        """pktgen's demo mix (WRITE/READ/SEND/UD/atomic over 8 QPs, 1 KiB and 4 KiB MTU, plus
        ARP and plain UDP): every frame arrives; RoCEv2 frames carry their level's DSCP, one per
        message, with valid ICRC and IPv4 checksum; the per-level counters agree."""
        pcap = os.path.join(self.tmp, "demo.pcap")
        harness.pktgen(pcap, "--mix", "demo", "--packets", "800", "--seed", "21")
        frames = harness.read_pcap(pcap)
        self.assertGreater(max(len(f) for f in frames), 4096 + 60, "no 4 KiB-payload frame")
        pairs = self.pair(frames, self.roundtrip(frames, udp_port=None))
        self.check_rewrite(pairs)
        # WRITEs take the level of their RETH size, multi-packet SENDs (unknown size) the lowest
        # level (storm.unknown_size's default). Everything else here lands on level 3: READ
        # requests and CNPs are control traffic, an atomic is 8 bytes, a SEND Only is one
        # packet of at most 4 KiB.
        levels = self.per_message_levels([f for f in frames if flow(f)], CUTOFFS)
        roce = [(f, o) for f, o in pairs if flow(o)]
        self.assert_message_levels(roce, lambda f: levels[f], DSCP, "demo mix")
        per_dscp = {}
        for _, o in roce:
            per_dscp[dscp_of(o)] = per_dscp.get(dscp_of(o), 0) + 1
        self.assertGreaterEqual(len(per_dscp), 3, per_dscp)
        # one DSCP per message, checked on the wire alone
        msg = {}
        for i, (_, o) in enumerate(roce):
            op = o[L3 + 28]
            if op in (0x00, 0x06):
                msg[flow(o)] = dscp_of(o)
            elif op in (0x01, 0x02, 0x03, 0x07, 0x08, 0x09) and flow(o) in msg:
                self.assertEqual(dscp_of(o), msg[flow(o)], "frame %d changed DSCP mid-message" % i)
        text = self.d.scrape()
        tagged = harness.metric_values(text, "heddle_storm_level_packets_total")
        for k, v in enumerate(DSCP):
            self.assertEqual(tagged.get('{level="%d"}' % k, 0), per_dscp.get(v, 0), "level %d" % k)
        self.assert_alive_no_drops()
        self.stop_cleanly()

    def test_multi_packet_writes_per_message(self):
        """Crafted WRITEs of sizes on every side of the cutoffs: each message's packets all carry
        the DSCP of the message's RETH size."""
        sizes = [4, 1024, 4096, 4100, 8192, 65536, 65540, 100000]
        qps = [Qp(0x100 + i) for i in range(len(sizes))]
        frames = []
        for _ in range(2):
            for qp, size in zip(qps, sizes):
                frames += qp.write(size)
        pairs = self.pair(frames, self.roundtrip(frames))
        self.check_rewrite(pairs)
        levels = self.per_message_levels(frames, CUTOFFS)
        self.assert_message_levels(pairs, lambda f: levels[f], DSCP, "per-message WRITEs")
        self.assertEqual({levels[f] for f in frames}, {1, 2, 3})
        self.assert_alive_no_drops()

    # ---- (b) run-time changes ----

    BATCH_SIZES = [512, 8192, 100000]  # levels 3, 2, 1 under the start-up cutoffs

    def batch(self, qps, sizes, repeat):
        frames = []
        for _ in range(repeat):
            for qp, size in zip(qps, sizes):
                frames += qp.write(size)
        return frames

    def test_set_dscp_live(self):
        """`set storm dscp` between two batches: batch 2 carries the new DSCPs, nothing is lost
        or dropped, heddled keeps its pid, the generation goes up by one and the QP table keeps
        the requests batch 1 completed."""
        self.require_set_storm()
        qps = [Qp(0x200 + i) for i in range(len(self.BATCH_SIZES))]
        gen0 = json_int(self.storm()["generation"])

        b1 = self.batch(qps, self.BATCH_SIZES, 3)
        p1 = self.pair(b1, self.roundtrip(b1))
        self.check_rewrite(p1)
        lv1 = self.per_message_levels(b1, CUTOFFS)
        self.assert_message_levels(p1, lambda f: lv1[f], DSCP, "batch 1")

        new_dscp = [1, 2, 3, 40]
        self.set_storm("dscp", ",".join(str(x) for x in new_dscp))
        s = self.storm()
        self.assertEqual(json_int(s["generation"]), gen0 + 1, s)
        self.assertEqual([json_int(l["dscp"]) for l in s["perLevel"]], new_dscp, s)

        b2 = self.batch(qps, self.BATCH_SIZES, 3)
        p2 = self.pair(b2, self.roundtrip(b2))
        self.check_rewrite(p2)
        lv2 = self.per_message_levels(b2, CUTOFFS)
        self.assert_message_levels(p2, lambda f: lv2[f], new_dscp, "batch 2, after set storm dscp")

        self.assert_alive_no_drops()
        rows = self.qps()
        for qp in qps:
            row = rows.get((qp.qpn, "request"))
            self.assertIsNotNone(row, "show qp lost QP 0x%x: %s" % (qp.qpn, sorted(rows)))
            self.assertEqual(json_int(row.get("completed", 0)), 6,
                             "QP 0x%x: 3 WRITEs in each batch; %s" % (qp.qpn, row))
        s = self.storm()
        self.assertEqual(json_int(s["generation"]), gen0 + 1, s)
        tagged = sum(json_int(l.get("taggedPackets", 0)) for l in s["perLevel"])
        self.assertEqual(tagged, len(b1) + len(b2), s["perLevel"])
        self.stop_cleanly()

    def test_set_cutoffs_live(self):
        """`set storm cutoffs` (sizes with units) moves known request sizes to other levels for
        the next batch, on the same QPs, without loss."""
        self.require_set_storm()
        qps = [Qp(0x300 + i) for i in range(len(self.BATCH_SIZES))]
        gen0 = json_int(self.storm()["generation"])
        b1 = self.batch(qps, self.BATCH_SIZES, 2)
        p1 = self.pair(b1, self.roundtrip(b1))
        lv1 = self.per_message_levels(b1, CUTOFFS)
        self.assert_message_levels(p1, lambda f: lv1[f], DSCP, "before the cutoff change")

        new_cutoffs = [1024, 4096, 8192]
        self.set_storm("cutoffs", "1K,4KiB,8192")
        s = self.storm()
        self.assertEqual([json_int(c) for c in s["cutoffs"]], new_cutoffs, s)
        self.assertEqual(json_int(s["generation"]), gen0 + 1, s)

        b3 = self.batch(qps, self.BATCH_SIZES, 2)
        p3 = self.pair(b3, self.roundtrip(b3))
        self.check_rewrite(p3)
        lv3 = self.per_message_levels(b3, new_cutoffs)
        # 512 B stays on level 3; 8 KiB moves from 2 to 1; 100 000 B from 1 to 0.
        self.assertEqual([level_of(x, new_cutoffs) for x in self.BATCH_SIZES], [3, 1, 0])
        self.assert_message_levels(p3, lambda f: lv3[f], DSCP, "after set storm cutoffs")
        self.assert_alive_no_drops()

    def test_set_mode_per_packet_live(self):
        """`set storm mode per-packet`: a multi-packet WRITE that kept one level per message
        before now climbs a level each time its remaining size drops below a cutoff."""
        self.require_set_storm()
        qp = Qp(0x400)
        size = 70000  # 69 packets: R from 70000 down to 368 bytes crosses 64 KiB and 4 KiB
        before = qp.write(size)
        p = self.pair(before, self.roundtrip(before))
        self.assertEqual({dscp_of(o) for _, o in p}, {DSCP[level_of(size, CUTOFFS)]})

        gen0 = json_int(self.storm()["generation"])
        self.set_storm("mode", "per-packet")
        s = self.storm()
        self.assertEqual((s["mode"], json_int(s["generation"])), ("per-packet", gen0 + 1), s)
        after = qp.write(size)
        p = self.pair(after, self.roundtrip(after))
        self.check_rewrite(p)
        got = [DSCP.index(dscp_of(o)) if dscp_of(o) in DSCP else -1 for _, o in p]
        want = [level_of(size - STORM_MTU * i, CUTOFFS) for i in range(len(after))]
        self.assertEqual(got, want)
        self.assertEqual(sorted(set(want)), [1, 2, 3])
        self.assert_alive_no_drops()

    def test_set_bad_value_changes_nothing(self):
        """A `set storm` the daemon refuses fails with a non-zero exit and a message naming the
        key; the generation and the DSCPs on the wire stay as they were."""
        self.require_set_storm()
        gen0 = json_int(self.storm()["generation"])
        p = self.d.ctl_run("set", "storm", "dscp", "1,2")
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn("storm.dscp", p.stdout + p.stderr)
        p = self.d.ctl_run("set", "storm", "cutoffs", "64K,4K,1M")
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn("storm.cutoffs", p.stdout + p.stderr)
        s = self.storm()
        self.assertEqual(json_int(s["generation"]), gen0, s)
        self.assertEqual([json_int(l["dscp"]) for l in s["perLevel"]], DSCP, s)
        self.assertEqual([json_int(c) for c in s["cutoffs"]], CUTOFFS, s)
        qps = [Qp(0x500 + i) for i in range(len(self.BATCH_SIZES))]
        b = self.batch(qps, self.BATCH_SIZES, 1)
        pairs = self.pair(b, self.roundtrip(b))
        lv = self.per_message_levels(b, CUTOFFS)
        self.assert_message_levels(pairs, lambda f: lv[f], DSCP, "after refused changes")
        self.assert_alive_no_drops()

    # ---- (c) hostile input at run time ----

    @staticmethod
    def malformed_frames():
        """(frames, {drop reason: count}): malformed frames of every kind a veth can carry (it
        cannot carry a frame shorter than an Ethernet header, so no eth-truncated), in a
        shuffled order."""
        good = Qp(0x600).write(64)[0]
        eth, ip_good, roce = good[:L3], good[L3:L3 + 20], good[L3 + 28:]
        out, want = [], {}

        def add(reason, frames):
            out.extend(frames)
            want[reason] = want.get(reason, 0) + len(frames)

        def ipv4(payload, ver_ihl=0x45, total=None):
            hdr = bytearray(struct.pack("!BBHHHBBH4s4s", ver_ihl, 0, total or 20 + len(payload),
                                        0, 0x4000, 64, 17, 0, bytes([10, 1, 0, 1]),
                                        bytes([10, 2, 0, 1])))
            hdr[10:12] = struct.pack("!H", ipv4_checksum(bytes(hdr)))
            return bytes(hdr) + payload

        def udp(payload, length=None):
            return struct.pack("!HHHH", 49152, 4791, length or 8 + len(payload), 0) + payload

        def pad(f):  # to the Ethernet minimum, as a NIC would
            return f + bytes(max(0, 60 - len(f)))

        add("ipv4-truncated", [eth + ip_good[:n] for n in (1, 8, 19)])
        add("ipv4-bad-version", [eth + bytes([0x65]) + ip_good[1:] + udp(roce)] * 3)
        add("ipv4-bad-ihl", [eth + ipv4(udp(roce), ver_ihl=0x44)] * 3)
        add("ipv4-bad-length", [eth + ipv4(udp(roce), total=1500)] * 3)
        add("udp-truncated", [eth + ipv4(b"\x12\x34\x12")] * 3)
        add("udp-bad-length", [pad(eth + ipv4(udp(roce, length=4))),
                               eth + ipv4(udp(roce, length=900))])
        add("bth-truncated", [eth + ipv4(udp(roce[:10]))] * 3)
        add("bth-bad-version", [roce_frame(0x0A, 0x601, i, bytes(64), tver=1) for i in range(3)])
        # a WRITE ONLY with 8 of its 16 RETH bytes, then an ICRC
        add("roce-ext-truncated", [eth + ipv4(udp(roce[:12 + 8] + bytes(4)))] * 3)
        add("icrc-bad", [roce_frame(0x0A, 0x602, i, bytes(256), icrc_ok=False)
                         for i in range(5)])
        random.Random(7).shuffle(out)
        return out, want

    @staticmethod
    def garbage_frames(n):
        """n IPv4/UDP datagrams to port 4791 whose RoCE part is random bytes (seeded)."""
        rng = random.Random(11)
        good = Qp(0x600).write(64)[0]
        out = []
        for _ in range(n):
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(12, 300)))
            ip = bytearray(good[L3:L3 + 20])
            ip[2:4] = struct.pack("!H", 28 + len(body))
            ip[10:12] = bytes(2)
            ip[10:12] = struct.pack("!H", ipv4_checksum(bytes(ip)))
            out.append(good[:L3] + bytes(ip) + struct.pack("!HHHH", 49152, 4791, 8 + len(body), 0)
                       + body)
        return out

    def test_hostile_burst(self):
        """Malformed frames, random garbage and lying RETH lengths sent at full speed between
        good traffic: the malformed frames are dropped, each under its reason; frames that lie
        about their size are forwarded and tagged by the size they claim; heddled forwards the
        good frames after the burst with the right DSCPs."""
        qps = [Qp(0x700 + i) for i in range(len(self.BATCH_SIZES))]
        liar = Qp(0x7F0)

        # Round 1: one of each malformed kind, and WRITEs whose RETH claims more than 2^31
        # bytes, or 0 bytes for a 4 KiB payload: valid frames that lie.
        before = self.batch(qps, self.BATCH_SIZES, 1)
        bad, want = self.malformed_frames()
        bogus = [liar.frame(0x0A, bytes(64), dma=0xFFFFFFFF),
                 liar.frame(0x0A, bytes(64), dma=1 << 31),
                 liar.frame(0x06, bytes(STORM_MTU), dma=0xFFFFFF00),  # never continued
                 liar.frame(0x0A, bytes(4096), dma=0)]
        after = self.batch(qps, self.BATCH_SIZES, 1) + liar.write(8192)
        good = before + bogus + after
        got = self.roundtrip(before + bad + bogus + after, expect=len(good), udp_port=None)
        drops = {k: v for k, v in self.d.drops().items() if v}
        self.assertEqual(drops, want)
        stats = self.d.port_stats()
        self.assertEqual(json_int(stats["host0"]["rxPackets"]), len(good) + len(bad), stats)
        self.assertEqual(json_int(stats["uplink0"]["txPackets"]), len(good), stats)
        pairs = self.pair(good, got)
        self.check_rewrite(pairs)
        lv = self.per_message_levels(good, CUTOFFS)
        self.assertEqual([lv[f] for f in bogus], [0, 0, 0, 3])
        self.assert_message_levels(pairs, lambda f: lv[f], DSCP, "around the malformed frames")

        # Round 2: a burst of random garbage, then good traffic on the same QPs.
        garbage = self.garbage_frames(300)
        after = self.batch(qps, self.BATCH_SIZES, 2)
        got = self.roundtrip(garbage + after, expect=len(after), udp_port=None)
        drops2 = {k: v for k, v in self.d.drops().items() if v}
        self.assertEqual(sum(drops2.values()) - sum(drops.values()), len(garbage), drops2)
        pairs = self.pair(after, got)
        self.check_rewrite(pairs)
        lv = self.per_message_levels(after, CUTOFFS)
        self.assert_message_levels(pairs, lambda f: lv[f], DSCP, "after the garbage burst")

        if heddlectl_has_show_storm(self.d):
            tracker = self.storm()["tracker"]
            self.assertGreaterEqual(json_int(tracker.get("bogusLength", 0)), 2, tracker)
        self.assertIsNone(self.d.proc.poll(), self.d.read_log())
        self.assertEqual(json_int(self.d.ctl("show", "status", json_out=True)["pid"]), self.pid)
        self.stop_cleanly()


def heddlectl_has_show_storm(d):
    return d.ctl_run("show", "storm").returncode == 0


if __name__ == "__main__":
    unittest.main()
