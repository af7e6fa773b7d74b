"""Whole-daemon tests: heddled on net_pcap/net_null virtual ports, driven through heddlectl,
the metrics endpoint and signals. Run by ctest with HEDDLED/HEDDLECTL/HEDDLE_PKTGEN set."""

import glob
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402
from harness import Daemon, metric_values, pktgen, read_pcap  # noqa: E402

# BTH opcode -> class, from the IBTA opcode table (independent of dataplane/pkt).
def roce_class(opcode):
    if opcode == 0x81:
        return "cnp"
    base, op = opcode & 0xE0, opcode & 0x1F
    if base not in (0x00, 0x20, 0x60):
        return "other"
    if base == 0x60:
        return "send" if op in (0x04, 0x05) else "other"
    if op <= 0x05 or op in (0x16, 0x17):
        return "send"
    if 0x06 <= op <= 0x0B:
        return "write"
    if op == 0x0C:
        return "read-request"
    if 0x0D <= op <= 0x10:
        return "read-response"
    if op == 0x11:
        return "ack"
    if op == 0x12:
        return "atomic-ack"
    if op in (0x13, 0x14):
        return "atomic"
    return "other"


def expected_classes(frames):
    """Counts RoCEv2 frames per class with scapy's decoding (UDP dport 4791, BTH opcode)."""
    from scapy.layers.l2 import Ether
    from scapy.layers.inet import UDP
    counts = {}
    for f in frames:
        p = Ether(f)
        if UDP in p and p[UDP].dport == 4791:
            payload = bytes(p[UDP].payload)
            if len(payload) >= 12 + 4:
                c = roce_class(payload[0])
                counts[c] = counts.get(c, 0) + 1
    return counts


def class_counts(port_stats):
    return {c["className"]: int(c.get("packets", 0)) for c in port_stats.get("roceByClass", [])
            if int(c.get("packets", 0)) > 0}


class ForwardPcap(unittest.TestCase):
    """A trace in each direction comes out the other port byte for byte; counters add up."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="heddle-fwd-")
        self.host_in = os.path.join(self.tmp, "host_in.pcap")
        self.up_in = os.path.join(self.tmp, "uplink_in.pcap")
        pktgen(self.host_in, "--mix", "demo", "--packets", "600", "--reverse", self.up_in,
               "--seed", "7")
        self.host_out = os.path.join(self.tmp, "host_out.pcap")
        self.up_out = os.path.join(self.tmp, "uplink_out.pcap")
        self.d = Daemon([
            ("host0", "host", "net_pcap0,rx_pcap=%s,tx_pcap=%s" % (self.host_in, self.host_out)),
            ("uplink0", "uplink", "net_pcap1,rx_pcap=%s,tx_pcap=%s" % (self.up_in, self.up_out)),
        ], tmp=os.path.join(self.tmp, "d"))

    def tearDown(self):
        self.d.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_byte_identical_and_counters(self):
        host_frames = read_pcap(self.host_in)
        up_frames = read_pcap(self.up_in)
        self.assertGreater(len(host_frames), 100)
        self.assertGreater(len(up_frames), 50)
        self.d.start()

        def done():
            s = self.d.port_stats()
            return (int(s["host0"].get("rxPackets", 0)) == len(host_frames) and
                    int(s["uplink0"].get("rxPackets", 0)) == len(up_frames) and
                    int(s["uplink0"].get("txPackets", 0)) == len(host_frames) and
                    int(s["host0"].get("txPackets", 0)) == len(up_frames) and
                    int(s["uplink0"].get("txBytes", 0)) == sum(len(f) for f in host_frames) and
                    int(s["host0"].get("txBytes", 0)) == sum(len(f) for f in up_frames)) and s
        stats = self.d.wait_for(done, what="both traces forwarded")

        # Counters: bytes, RoCE classes (checked against scapy's decoding), no drops.
        self.assertEqual(int(stats["host0"]["rxBytes"]), sum(len(f) for f in host_frames))
        self.assertEqual(int(stats["uplink0"]["txBytes"]), sum(len(f) for f in host_frames))
        self.assertEqual(int(stats["uplink0"]["rxBytes"]), sum(len(f) for f in up_frames))
        self.assertEqual(class_counts(stats["host0"]), expected_classes(host_frames))
        self.assertEqual(class_counts(stats["uplink0"]), expected_classes(up_frames))
        self.assertEqual(sum(self.d.drops().values()), 0)

        # The metrics endpoint agrees with the control API.
        text = self.d.scrape()
        rx = metric_values(text, "heddle_port_rx_packets_total")
        self.assertEqual(rx['{port="host0",role="host"}'], len(host_frames))
        self.assertEqual(rx['{port="uplink0",role="uplink"}'], len(up_frames))
        roce = metric_values(text, "heddle_roce_rx_packets_total")
        for cls, n in expected_classes(host_frames).items():
            self.assertEqual(roce['{class="%s",port="host0"}' % cls], n, cls)

        self.assertEqual(self.d.stop(), 0)
        # net_pcap writes its tx_pcap on close: nothing was rewritten, order kept.
        self.assertEqual(read_pcap(self.up_out), host_frames)
        self.assertEqual(read_pcap(self.host_out), up_frames)
        self.assertFalse(os.path.exists(self.d.socket))

        # An independent decoder reads the output as RoCEv2 with intact ICRCs.
        self.check_tshark(self.up_out, host_frames)
        self.check_tshark(self.host_out, up_frames)

    def check_tshark(self, pcap, frames):
        if not shutil.which("tshark"):
            self.skipTest("tshark not installed")
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "data"))
        import scapy_roce_util
        out = subprocess.run(
            ["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=/t",
             "-e", "frame.number", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
             "-e", "infiniband.invariant.crc", "-e", "_ws.malformed"],
            capture_output=True, text=True, check=True).stdout
        rows = [r.split("\t") for r in out.splitlines()]
        self.assertEqual(len(rows), len(frames))
        roce = expected_classes(frames)
        decoded = checked = 0
        for row, frame in zip(rows, frames):
            row += [""] * (5 - len(row))
            if not row[1]:
                continue
            decoded += 1
            # the ICRC is right for the bytes (recomputed here, independently of dataplane/pkt) ...
            ip_len = struct.unpack("!H", frame[16:18])[0]
            stored = struct.unpack("<I", frame[14 + ip_len - 4:14 + ip_len])[0]
            self.assertEqual(scapy_roce_util.icrc_manual(frame, 14, False), stored,
                             "frame %s" % row[0])
            # ... and tshark reads the same ICRC (Wireshark 4.0 shows it but does not verify it;
            # it shows none for CNPs, which it cannot decode).
            if row[3]:
                self.assertEqual(int(row[3], 0), struct.unpack(">I", struct.pack("<I", stored))[0])
                checked += 1
        self.assertEqual(decoded, sum(roce.values()))
        self.assertGreaterEqual(checked, decoded - roce.get("cnp", 0))


class MultiQueue(unittest.TestCase):
    """A port with two RX queues: the worker polls both, every frame is forwarded, and each
    queue's frames keep their order."""

    def test_two_rx_queues(self):
        tmp = tempfile.mkdtemp(prefix="heddle-mq-")
        a, b = os.path.join(tmp, "a.pcap"), os.path.join(tmp, "b.pcap")
        empty, out = os.path.join(tmp, "empty.pcap"), os.path.join(tmp, "out.pcap")
        pktgen(a, "--mix", "demo", "--packets", "200", "--seed", "11")
        pktgen(b, "--mix", "demo", "--packets", "150", "--seed", "12", "--ipv6")
        harness.write_empty_pcap(empty)
        fa, fb = read_pcap(a), read_pcap(b)
        d = Daemon([
            ("host0", "host", "net_pcap0,rx_pcap=%s,rx_pcap=%s" % (a, b), {"rx_queues": 2}),
            ("uplink0", "uplink", "net_pcap1,rx_pcap=%s,tx_pcap=%s" % (empty, out)),
        ], tmp=os.path.join(tmp, "d"))
        try:
            d.start()
            d.wait_for(lambda: int(d.port_stats()["uplink0"]["txPackets"]) == len(fa) + len(fb),
                       what="both queues forwarded")
            ports = {p["name"]: p for p in d.ctl("show", "ports", json_out=True)["ports"]}
            self.assertEqual(ports["host0"]["rxQueues"], 2)
            self.assertEqual(d.stop(), 0)
            got = read_pcap(out)
            self.assertEqual(sorted(got), sorted(fa + fb))
            self.assertEqual([f for f in got if f in set(fa)], fa)
            self.assertEqual([f for f in got if f in set(fb)], fb)
        finally:
            d.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)


class MalformedAndIcrc(unittest.TestCase):
    """Malformed frames are dropped under their reasons and never crash the daemon; every other
    frame still leaves, in order, unchanged."""

    def test_malformed_counted(self):
        tmp = tempfile.mkdtemp(prefix="heddle-bad-")
        host_in = os.path.join(tmp, "in.pcap")
        empty = os.path.join(tmp, "empty.pcap")
        pktgen(host_in, "--mix", "demo", "--packets", "300", "--malformed", "60", "--seed", "3")
        harness.write_empty_pcap(empty)
        frames = read_pcap(host_in)
        up_out = os.path.join(tmp, "out.pcap")
        d = Daemon([
            ("host0", "host", "net_pcap0,rx_pcap=%s,tx_pcap=%s" % (empty, os.path.join(tmp, "h.pcap"))),
            ("uplink0", "uplink", "net_pcap1,rx_pcap=%s,tx_pcap=%s" % (empty, up_out)),
        ], verify_icrc=True, tmp=os.path.join(tmp, "d"))
        with open(d.config) as f:
            text = f.read().replace("rx_pcap=%s,tx_pcap=%s" % (empty, os.path.join(tmp, "h.pcap")),
                                    "rx_pcap=%s,tx_pcap=%s" % (host_in, os.path.join(tmp, "h.pcap")))
        with open(d.config, "w") as f:
            f.write(text)
        try:
            d.start()
            # every frame either leaves on the uplink or is dropped under a reason
            d.wait_for(lambda: int(d.port_stats()["uplink0"]["txPackets"]) +
                       sum(d.drops().values()) == len(frames), what="every frame accounted for")
            s = d.port_stats()
            drops = {k: v for k, v in d.drops().items() if v}
            tx = int(s["uplink0"]["txPackets"])
            self.assertEqual(int(s["host0"]["rxPackets"]), len(frames))
            self.assertEqual(tx + sum(drops.values()), len(frames), drops)
            # pktgen's malformed frames cover a bad ICRC and header errors of several kinds
            self.assertGreater(drops.get("icrc-bad", 0), 0, drops)
            self.assertGreaterEqual(len(drops), 3, drops)
            self.assertEqual(d.stop(), 0)
            out = read_pcap(up_out)
            self.assertEqual(len(out), tx)
            # what left is the input minus the dropped frames, in order and unchanged
            it = iter(frames)
            self.assertTrue(all(any(o == f for f in it) for o in out))
        finally:
            d.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)


class Signals(unittest.TestCase):
    def test_sigterm_mid_traffic(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            tmp = tempfile.mkdtemp(prefix="heddle-sig-")
            trace = os.path.join(tmp, "t.pcap")
            pktgen(trace, "--mix", "demo", "--packets", "200", "--seed", "1")
            before = set(glob.glob("/var/run/dpdk/*")) | set(glob.glob("/dev/hugepages/*"))
            d = Daemon([
                ("host0", "host", "net_pcap0,rx_pcap=%s,infinite_rx=1" % trace),
                ("uplink0", "uplink", "net_null0,no-rx=1"),
            ], tmp=os.path.join(tmp, "d"), data_room=4608)  # infinite_rx needs one segment
            try:
                d.start()
                d.wait_for(lambda: int(d.port_stats()["uplink0"].get("txPackets", 0)) > 10000,
                           what="traffic flowing")
                self.assertEqual(d.stop(sig), 0, d.read_log())
                self.assertIn("stopped cleanly", d.read_log())
                self.assertFalse(os.path.exists(d.socket))
                after = set(glob.glob("/var/run/dpdk/*")) | set(glob.glob("/dev/hugepages/*"))
                # Other tests' EALs may share the empty default runtime dir "rte" meanwhile;
                # nothing may be left inside it and nothing else may appear.
                self.assertEqual(after - before - {"/var/run/dpdk/rte"}, set())
                self.assertEqual(glob.glob("/var/run/dpdk/rte/*"), [])
                left = [p for p in os.listdir(d.tmp) if p not in ("heddle.yaml", "heddled.log", "run")]
                self.assertEqual(left, [])
            finally:
                d.cleanup()
                shutil.rmtree(tmp, ignore_errors=True)


class ControlApi(unittest.TestCase):
    def test_heddlectl_objects(self):
        tmp = tempfile.mkdtemp(prefix="heddle-ctl-")
        trace = os.path.join(tmp, "t.pcap")
        pktgen(trace, "--mix", "demo", "--packets", "100", "--seed", "5")
        d = Daemon([
            ("host0", "host", "net_pcap0,rx_pcap=%s" % trace),
            ("uplink0", "uplink", "net_null0"),
        ], tmp=os.path.join(tmp, "d"))
        try:
            d.start()
            st = d.ctl("show", "status", json_out=True)
            self.assertEqual(st["pid"], d.proc.pid)
            self.assertEqual([p["name"] for p in st["ports"]], ["host0", "uplink0"])
            self.assertEqual({p["driver"] for p in st["ports"]}, {"net_pcap", "net_null"})
            self.assertTrue(st["metricsUrl"].startswith("http://127.0.0.1:"))
            ports = d.ctl("show", "ports", json_out=True)["ports"]
            self.assertEqual(ports[0]["peer"], "uplink0")
            self.assertEqual(ports[1]["peer"], "host0")
            table = d.ctl("show", "ports")
            self.assertIn("host0", table)
            self.assertIn("net_pcap", table)
            self.assertIn("uplink0", d.ctl("show", "stats"))
            cfg = d.ctl("show", "config")
            self.assertIn("host0", cfg)
            self.assertIn(d.socket, cfg)
            rdma = d.ctl("show", "rdma", json_out=True)
            self.assertTrue(rdma.get("devices") or "no RDMA device" in rdma.get("note", ""))
            self.assertEqual(d.stop(), 0)
        finally:
            d.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)


class StartupErrors(unittest.TestCase):
    def run_heddled(self, d, timeout=60):
        p = subprocess.run([harness.HEDDLED, "-c", d.config], capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout + p.stderr

    def test_metrics_port_busy(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        d = Daemon([("host0", "host", "net_null0"), ("uplink0", "uplink", "net_null1")])
        with open(d.config) as f:
            text = f.read().replace('listen: "127.0.0.1:0"', 'listen: "127.0.0.1:%d"' % port)
        with open(d.config, "w") as f:
            f.write(text)
        try:
            rc, out = self.run_heddled(d)
            self.assertEqual(rc, 1, out)
            self.assertIn("127.0.0.1:%d" % port, out)
            self.assertIn("choose another port", out)  # the message says how to fix it
            # the failure comes after ports and workers started: they were torn down again
            self.assertNotIn("heddled 0.1.0 running", out)
            self.assertEqual(glob.glob("/var/run/dpdk/rte/*"), [])
        finally:
            s.close()
            d.cleanup()

    def test_vdev_not_probed(self):
        d = Daemon([("host0", "host", "net_pcap0,rx_pcap=/nonexistent/x.pcap"),
                    ("uplink0", "uplink", "net_null1")])
        try:
            rc, out = self.run_heddled(d)
            self.assertEqual(rc, 1, out)
            self.assertIn("host0", out)
            self.assertIn("net_pcap0", out)
        finally:
            d.cleanup()

    def test_check_config(self):
        d = Daemon([("host0", "host", "net_null0"), ("uplink0", "uplink", "net_null1")])
        try:
            p = subprocess.run([harness.HEDDLED, "--check-config", "-c", d.config],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(d.config) as f:
                text = f.read().replace("role: uplink", "role: uplinkk")
            with open(d.config, "w") as f:
                f.write(text)
            p = subprocess.run([harness.HEDDLED, "--check-config", "-c", d.config],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 1)
            self.assertIn("ports[1].role", p.stderr)
            self.assertIn("uplinkk", p.stderr)
            p = subprocess.run([harness.HEDDLED, "--check-config", "-c", "/nonexistent.yaml"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 1)
            self.assertIn("/nonexistent.yaml", p.stderr)
        finally:
            d.cleanup()


class StormTagging(unittest.TestCase):
    """storm-tag rewrites only the DSCP (and the IPv4 checksum) of RoCEv2 requests from the host
    port: one DSCP per message in per-message mode, the control level's for READ requests."""

    DSCP = [8, 16, 24, 46]  # per level; control_level defaults to K-1 = 3

    def test_dscp_per_message(self):
        tmp = tempfile.mkdtemp(prefix="heddle-storm-")
        host_in = os.path.join(tmp, "host_in.pcap")
        empty = os.path.join(tmp, "empty.pcap")
        up_out = os.path.join(tmp, "uplink_out.pcap")
        pktgen(host_in, "--mix", "demo", "--packets", "800", "--seed", "21")
        harness.write_empty_pcap(empty)
        frames = read_pcap(host_in)
        d = Daemon([
            ("host0", "host", "net_pcap0,rx_pcap=%s" % host_in),
            ("uplink0", "uplink", "net_pcap1,rx_pcap=%s,tx_pcap=%s" % (empty, up_out)),
        ], tmp=os.path.join(tmp, "d"),
            extra_yaml="storm: { enabled: true, qp_capacity: 4096, mtu: 1024, dscp: [%s] }\n" %
            ", ".join(str(x) for x in self.DSCP))
        try:
            d.start()
            d.wait_for(lambda: int(d.port_stats()["uplink0"].get("txPackets", 0)) == len(frames),
                       what="the trace forwarded")
            text = d.scrape()
            self.assertEqual(d.stop(), 0, d.read_log())
            out = read_pcap(up_out)
            self.check_frames(frames, out, metric_values(text, "heddle_storm_level_packets_total"),
                              metric_values(text, "heddle_storm_qp_table_full_total"))
            self.check_tshark(up_out, out)
        finally:
            d.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)

    # READ responses the host sends as responder (docs/storm.md section 6.6), without the verbs
    # shim: each stream is levelled like a SEND of unknown size, R = max(bytes so far, floor),
    # recomputed per packet in per-packet mode; its Last knows the size (R = its own bytes); a
    # retransmitted response keeps the level recorded for its stream.
    CUTOFFS = [4096, 65536, 1 << 20]
    FLOOR = 4096

    @classmethod
    def level_of(cls, remaining):
        return 3 - sum(1 for c in cls.CUTOFFS if remaining > c)

    @staticmethod
    def read_response(opcode, qpn, psn, payload, sport, msn):
        """A READ response from the host (10.0.0.1) to the peer (10.0.0.2), built with struct
        (independent of the C++ frame builder); ICRC from scapy_roce_util."""
        import scapy_roce_util
        bth = struct.pack("!BBHII", opcode, 0x40, 0xFFFF, qpn & 0xFFFFFF, psn & 0xFFFFFF)
        aeth = struct.pack("!I", msn & 0xFFFFFF) if opcode in (0x0D, 0x0F, 0x10) else b""
        body = bth + aeth + bytes((i * 7) & 0xFF for i in range(payload)) + bytes(4)
        udp = struct.pack("!HHHH", sport, 4791, 8 + len(body), 0)
        ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, (26 << 2) | 2, 20 + len(udp) + len(body),
                                   0, 0x4000, 64, 17, 0, bytes([10, 0, 0, 1]),
                                   bytes([10, 0, 0, 2])))
        total = sum(struct.unpack("!10H", bytes(ip)))
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        ip[10:12] = struct.pack("!H", ~total & 0xFFFF)
        frame = bytearray(b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" +
                          b"\x08\x00" + bytes(ip) + udp + body)
        frame[-4:] = struct.pack("<I", scapy_roce_util.icrc_manual(bytes(frame), 14, False))
        return bytes(frame)

    def test_read_responses_per_packet(self):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "data"))
        # Three QPs answer READs of 70 KiB, 64 B and 8 KiB (1 KiB responses), interleaved; one
        # response of the 8 KiB stream is sent twice.
        streams = {0x0101: 70 * 1024, 0x0202: 64, 0x0303: 8 * 1024}
        pending = []
        for qpn, size in streams.items():
            n = max(1, (size + 1023) // 1024)
            ops = [0x10] if n == 1 else [0x0D] + [0x0E] * (n - 2) + [0x0F]
            pending.append([(qpn, op, 1000 + i, min(1024, size - 1024 * i)) for i, op in
                            enumerate(ops)])
        order = []
        while any(pending):
            for p in pending:
                if p:
                    order.append(p.pop(0))
        order.insert(order.index((0x0303, 0x0E, 1006, 1024)) + 1, (0x0303, 0x0E, 1003, 1024))
        frames, expect = [], []
        sent, last_level = {}, {}
        for qpn, op, psn, payload in order:
            frames.append(self.read_response(op, qpn, psn, payload, 0xC000 | qpn, psn))
            if psn < 1000 + sent.get(qpn, 0) // 1024:  # a retransmission: the recorded level
                expect.append(last_level[qpn])
                continue
            before = sent.get(qpn, 0)
            sent[qpn] = before + payload
            last = op in (0x0F, 0x10)
            remaining = sent[qpn] - before if last else max(before, self.FLOOR)
            last_level[qpn] = self.level_of(remaining)
            expect.append(last_level[qpn])
        tmp = tempfile.mkdtemp(prefix="heddle-storm-read-")
        host_in = os.path.join(tmp, "host_in.pcap")
        empty = os.path.join(tmp, "empty.pcap")
        up_out = os.path.join(tmp, "uplink_out.pcap")
        with open(host_in, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
            for i, fr in enumerate(frames):
                f.write(struct.pack("<IIII", 1700000000, i, len(fr), len(fr)) + fr)
        harness.write_empty_pcap(empty)
        d = Daemon([
            ("host0", "host", "net_pcap0,rx_pcap=%s" % host_in),
            ("uplink0", "uplink", "net_pcap1,rx_pcap=%s,tx_pcap=%s" % (empty, up_out)),
        ], tmp=os.path.join(tmp, "d"),
            extra_yaml="storm: { enabled: true, mode: per-packet, backlog_source: none, mtu: 1024, "
            "dscp: [%s] }\n" % ", ".join(str(x) for x in self.DSCP))
        try:
            d.start()
            d.wait_for(lambda: int(d.port_stats()["uplink0"].get("txPackets", 0)) == len(frames),
                       what="the READ responses forwarded")
            d.wait_for(lambda: metric_values(d.scrape(), "heddle_storm_read_streams_total").get(
                '{result="unknown"}', 0) == 3, what="the stream counters published")
            text = d.scrape()
            self.assertEqual(d.stop(), 0, d.read_log())
            out = read_pcap(up_out)
            self.assertEqual(len(out), len(frames))
            import scapy_roce_util
            for i, (f, o) in enumerate(zip(frames, out)):
                self.assertEqual(o[15] >> 2, self.DSCP[expect[i]], "frame %d %s" % (i, order[i]))
                self.assertEqual(o[15] & 3, 2, "frame %d: ECN changed" % i)
                self.assertTrue(self.ipv4_checksum_ok(o[14:34]), "frame %d" % i)
                self.assertEqual(struct.unpack("<I", o[-4:])[0],
                                 scapy_roce_util.icrc_manual(o, 14, False), "frame %d: ICRC" % i)
                self.assertEqual(o[34:], f[34:], "frame %d: beyond the IP header" % i)
            self.assertEqual(set(expect), {1, 2, 3})  # demoted twice, and back up at the Last
            self.assertEqual(metric_values(text, "heddle_storm_read_responses_total").get(
                '{reason="duplicate"}'), 1)
            self.check_tshark(up_out, out)
            # tshark's InfiniBand dissector reads them as READ responses of their QPs and PSNs.
            rows = subprocess.run(["tshark", "-n", "-r", up_out, "-T", "fields", "-e",
                                   "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e",
                                   "infiniband.bth.psn"],
                                  capture_output=True, text=True, check=True).stdout.splitlines()
            self.assertEqual([tuple(int(x, 0) for x in r.split("\t")) for r in rows],
                             [(op, qpn, psn) for qpn, op, psn, _ in order])
        finally:
            d.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def ip_offset(frame):
        off, ethertype = 14, struct.unpack("!H", frame[12:14])[0]
        while ethertype in (0x8100, 0x88A8):
            ethertype = struct.unpack("!H", frame[off + 2:off + 4])[0]
            off += 4
        return off if ethertype == 0x0800 else None

    @staticmethod
    def ipv4_checksum_ok(hdr):
        total = sum(struct.unpack("!%dH" % (len(hdr) // 2), hdr))
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        return total == 0xFFFF

    def check_frames(self, frames, out, level_packets, table_full):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "data"))
        import scapy_roce_util
        self.assertEqual(len(out), len(frames))
        roce = 0
        per_dscp = {}
        message = {}  # (src ip, dst ip, qpn) -> DSCP of the message in progress
        last_dscp = {}  # (src ip, dst ip, qpn) -> DSCP of the QP's previous packet
        messages = reads = capped_reads = 0
        for i, (f, o) in enumerate(zip(frames, out)):
            l3 = self.ip_offset(f)
            is_roce = (l3 is not None and len(f) >= l3 + 28 + 12 and f[l3 + 9] == 17 and
                       struct.unpack("!H", f[l3 + 22:l3 + 24])[0] == 4791)
            if not is_roce:
                self.assertEqual(o, f, "frame %d: not RoCE, must be untouched" % i)
                continue
            roce += 1
            ihl = (f[l3] & 0x0F) * 4
            # Only the TOS byte's DSCP bits and the header checksum differ.
            skip = {l3 + 1, l3 + 10, l3 + 11}
            self.assertEqual(len(o), len(f))
            self.assertEqual([b for j, b in enumerate(o) if j not in skip],
                             [b for j, b in enumerate(f) if j not in skip], "frame %d" % i)
            self.assertEqual(o[l3 + 1] & 3, f[l3 + 1] & 3, "frame %d: ECN changed" % i)
            self.assertTrue(self.ipv4_checksum_ok(o[l3:l3 + ihl]), "frame %d: IPv4 checksum" % i)
            ip_len = struct.unpack("!H", o[l3 + 2:l3 + 4])[0]
            stored = struct.unpack("<I", o[l3 + ip_len - 4:l3 + ip_len])[0]
            self.assertEqual(scapy_roce_util.icrc_manual(o, l3, False), stored,
                             "frame %d: ICRC" % i)
            dscp = o[l3 + 1] >> 2
            self.assertIn(dscp, self.DSCP, "frame %d" % i)
            per_dscp[dscp] = per_dscp.get(dscp, 0) + 1
            bth = l3 + ihl + 8
            opcode = o[bth]
            key = (o[l3 + 12:l3 + 16], o[l3 + 16:l3 + 20], o[bth + 5:bth + 8])
            prev = last_dscp.get(key)
            last_dscp[key] = dscp
            if opcode == 0x0C:  # READ request: the control level...
                # ...unless packets of its QP were still held in heddled: then the in-order guard
                # caps it at their level (docs/storm.md section 5), the QP's previous packet's.
                self.assertIn(dscp, {self.DSCP[3], prev}, "frame %d: READ request" % i)
                reads += 1
                capped_reads += dscp != self.DSCP[3]
                continue
            if opcode & 0xE0 != 0x00:
                continue  # UD, CNP, ...: one packet each
            low = opcode & 0x1F
            first = low in (0x00, 0x04, 0x05, 0x06, 0x0A, 0x0B)
            middle_or_last = low in (0x01, 0x02, 0x03, 0x07, 0x08, 0x09)
            last = low in (0x02, 0x03, 0x08, 0x09)
            if first:
                message[key] = dscp
                if low in (0x00, 0x06):  # a multi-packet message starts
                    continue
                del message[key]
                messages += 1
            elif middle_or_last and key in message:
                self.assertEqual(dscp, message[key],
                                 "frame %d: a WRITE/SEND changed DSCP mid-message" % i)
                if last:
                    del message[key]
                    messages += 1
        self.assertGreater(messages, 10)
        self.assertGreater(reads, 0)
        self.assertLess(capped_reads, reads)
        # The per-level counters agree with the DSCPs on the wire.
        self.assertEqual(sum(level_packets.values()), roce)
        for k, v in enumerate(self.DSCP):
            self.assertEqual(level_packets.get('{level="%d"}' % k, 0), per_dscp.get(v, 0), k)
        self.assertEqual(table_full.get("", -1), 0)

    def check_tshark(self, pcap, frames):
        if not shutil.which("tshark"):
            self.skipTest("tshark not installed")
        rows = subprocess.run(["tshark", "-n", "-r", pcap, "-T", "fields",
                               "-e", "ip.dsfield.dscp", "-e", "ip.dsfield.ecn"],
                              capture_output=True, text=True, check=True).stdout.splitlines()
        self.assertEqual(len(rows), len(frames))
        for i, (row, f) in enumerate(zip(rows, frames)):
            l3 = self.ip_offset(f)
            if l3 is None:
                continue
            dscp, ecn = (row.split("\t") + [""])[:2]
            self.assertEqual(int(dscp, 0), f[l3 + 1] >> 2, "frame %d" % (i + 1))
            self.assertEqual(int(ecn, 0), f[l3 + 1] & 3, "frame %d" % (i + 1))


class LbPinning(unittest.TestCase):
    """pin-select on two pcap uplinks with PIN + REPS: every packet of a message at most the
    threshold leaves on one path (one uplink, one UDP source port); longer messages are sprayed over
    the configured ports and both uplinks; only the source port and the ICRC change, and both the
    ICRC (recomputed here) and the IPv4 checksum (tshark) stay valid. Malformed frames are dropped
    under their reasons, not-RoCE frames go to the host port's peer untouched."""

    THRESHOLD = 16384
    PORTS = {0xC000, 0xC001, 0xC002, 0xC003}
    MTU = 1024

    @staticmethod
    def frame(dst, sport, opcode, qpn, psn, payload, dma_length=None):
        """A RoCEv2 frame from 10.0.0.1 to 10.0.1.<dst>, built with struct (independent of the C++
        frame builder); ICRC from scapy_roce_util."""
        import scapy_roce_util
        bth = struct.pack("!BBHII", opcode, 0x40, 0xFFFF, qpn & 0xFFFFFF, psn & 0xFFFFFF)
        reth = struct.pack("!QII", 0x1000, 0x77, dma_length) if dma_length is not None else b""
        body = bth + reth + bytes((i * 13 + psn) & 0xFF for i in range(payload)) + bytes(4)
        udp = struct.pack("!HHHH", sport, 4791, 8 + len(body), 0)
        ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0x02, 20 + len(udp) + len(body),
                                   psn & 0xFFFF, 0x4000, 64, 17, 0, bytes([10, 0, 0, 1]),
                                   bytes([10, 0, 1, dst])))
        total = sum(struct.unpack("!10H", bytes(ip)))
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        ip[10:12] = struct.pack("!H", ~total & 0xFFFF)
        f = bytearray(b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" +
                      bytes(ip) + udp + body)
        f[-4:] = struct.pack("<I", scapy_roce_util.icrc_manual(bytes(f), 14, False))
        return bytes(f)

    def message(self, dst, qpn, psn, size, write):
        """The packets of one WRITE (RETH on the first) or SEND of `size` bytes at MTU 1024."""
        n = max(1, (size + self.MTU - 1) // self.MTU)
        base = 0x06 if write else 0x00  # first; +1 middle, +2 last, +4 only (WRITE: 0x0A)
        out = []
        for i in range(n):
            if n == 1:
                op = 0x0A if write else 0x04
            else:
                op = base if i == 0 else base + 2 if i == n - 1 else base + 1
            reth = size if write and i == 0 else None
            out.append(self.frame(dst, 0xD000 + qpn, op, qpn, psn + i,
                                  min(self.MTU, size - i * self.MTU), reth))
        return out

    def test_short_pinned_long_sprayed(self):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "data"))
        # Six QPs, each: a 4 KiB WRITE, a 64 KiB WRITE, a 256 B SEND, an 8 KiB SEND (unknown size,
        # short until proven long) and a 40 KiB SEND (unknown size: it starts pinned and stays so,
        # stay-pinned). The NIC interleaves its QPs packet by packet.
        plan = [(4096, True), (65536, True), (256, False), (8192, False), (40960, False)]
        messages = []  # (dst, qpn, first psn, packets, size, known size)
        per_qp = []
        for q in range(6):
            dst, qpn, psn, frames = q + 1, 0x100 + q, 100 * q, []
            for size, write in plan:
                pkts = self.message(dst, qpn, psn, size, write)
                messages.append((dst, qpn, psn, len(pkts), size, write or len(pkts) == 1))
                frames += pkts
                psn += len(pkts)
            per_qp.append(frames)
        trace = []
        while any(per_qp):
            for frames in per_qp:
                if frames:
                    trace.append(frames.pop(0))
        roce_trace = list(trace)
        # Not RoCE (UDP to port 5000): forwarded to uplink0, untouched.
        udp = bytearray(trace[0][:14 + 20 + 8]) + bytes(32)
        udp[14 + 2:14 + 4] = struct.pack("!H", 20 + 8 + 32)
        udp[14 + 10:14 + 12] = b"\x00\x00"
        total = sum(struct.unpack("!10H", bytes(udp[14:34])))
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        udp[14 + 10:14 + 12] = struct.pack("!H", ~total & 0xFFFF)
        udp[14 + 20 + 2:14 + 20 + 4] = struct.pack("!H", 5000)
        udp[14 + 20 + 4:14 + 20 + 6] = struct.pack("!H", 8 + 32)
        trace.insert(7, bytes(udp))
        # Malformed: a RoCE frame cut short of its IP length, one with IP version 5, one whose UDP
        # length runs past the frame.
        cut = trace[20][:60]
        bad_version = bytearray(trace[21])
        bad_version[14] = 0x55
        bad_udp = bytearray(trace[22])
        bad_udp[14 + 20 + 4:14 + 20 + 6] = struct.pack("!H", 4000)
        malformed = [cut, bytes(bad_version), bytes(bad_udp)]
        for i, m in enumerate(malformed):
            trace.insert(30 + 40 * i, m)
        roce_frames = sum(m[3] for m in messages)

        tmp = tempfile.mkdtemp(prefix="heddle-lb-")
        host_in = os.path.join(tmp, "host_in.pcap")
        empty = os.path.join(tmp, "empty.pcap")
        outs = {u: os.path.join(tmp, "%s_out.pcap" % u) for u in ("uplink0", "uplink1")}
        with open(host_in, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
            for i, fr in enumerate(trace):
                f.write(struct.pack("<IIII", 1700000000, i, len(fr), len(fr)) + fr)
        harness.write_empty_pcap(empty)
        d = Daemon([
            ("host0", "host", "net_pcap0,rx_pcap=%s" % host_in, {"peer": "uplink0"}),
            ("uplink0", "uplink", "net_pcap1,rx_pcap=%s,tx_pcap=%s" % (empty, outs["uplink0"]),
             {"peer": "host0"}),
            ("uplink1", "uplink", "net_pcap2,rx_pcap=%s,tx_pcap=%s" % (empty, outs["uplink1"]),
             {"peer": "host0"}),
        ], tmp=os.path.join(tmp, "d"), data_room=4608,
            extra_yaml="lb:\n  enabled: true\n  balancer: reps\n"
            "  pin: { threshold_bytes: %d, policy: hash }\n"
            "  paths: { default: { ports: [uplink0, uplink1], entropies: 4 } }\n" % self.THRESHOLD)
        try:
            d.start()
            sent = lambda: sum(int(d.port_stats()[u].get("txPackets", 0)) for u in outs)
            d.wait_for(lambda: sent() + sum(d.drops().values()) == len(trace),
                       what="every frame sent or dropped")
            drops = {k: v for k, v in d.drops().items() if v}
            self.assertEqual(sum(drops.values()), len(malformed), drops)
            self.assertEqual(sent(), roce_frames + 1)
            # show lb and the metrics agree with the trace: 24 messages pinned (6 QPs x 4), 6
            # sprayed; every RoCE packet counted on one path.
            lb = d.wait_for(lambda: (lambda v: v if int(v["lb"].get("sprayedFlows", 0)) == 6
                                     else None)(d.ctl("show", "lb", json_out=True)),
                            what="the lb counters published")["lb"]
            self.assertEqual(int(lb["pinnedFlows"]), 24)
            self.assertEqual(lb["balancer"], "reps")
            self.assertEqual(int(lb["thresholdBytes"]), self.THRESHOLD)
            self.assertEqual(sum(int(p["packets"]) for p in lb["sets"][0]["paths"]), roce_frames)
            self.assertGreater(lb["sets"][0]["jainIndex"], 0.5)
            text = d.scrape()
            self.assertEqual(metric_values(text, "heddle_lb_flows_total"),
                             {'{verdict="pinned"}': 24, '{verdict="sprayed"}': 6})
            self.assertEqual(sum(metric_values(text, "heddle_lb_path_packets_total").values()),
                             roce_frames)
            self.assertEqual(metric_values(text, "heddle_lb_balancer")['{balancer="reps"}'], 1)
            # set lb while running: published, and show config prints it.
            out = d.ctl("set", "lb", "balancer", "round-robin", json_out=True)
            self.assertEqual(out["lb"]["balancer"], "round-robin")
            self.assertEqual(int(out["lb"]["generation"]), int(lb["generation"]) + 1)
            self.assertIn("balancer: round-robin", d.ctl("show", "config"))
            self.assertEqual(d.stop(), 0, d.read_log())
            self.check_output(roce_trace, bytes(udp), messages, outs)
        finally:
            d.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)

    def check_output(self, trace, udp, messages, outs):
        import scapy_roce_util
        if not shutil.which("tshark"):
            self.skipTest("tshark not installed")
        by_key = {}  # (dst, qpn, psn) -> input frame
        for f in trace:
            by_key[(f[33], struct.unpack("!I", f[46:50])[0] & 0xFFFFFF,
                        struct.unpack("!I", f[50:54])[0] & 0xFFFFFF)] = f
        seen = {}  # (dst, qpn, psn) -> (uplink, source port)
        not_roce = 0
        for uplink, pcap in outs.items():
            frames = read_pcap(pcap)
            rows = subprocess.run(
                ["tshark", "-n", "-r", pcap, "-o", "ip.check_checksum:TRUE", "-T", "fields",
                 "-E", "separator=/t", "-e", "ip.dst", "-e", "udp.srcport", "-e",
                 "infiniband.bth.destqp", "-e", "infiniband.bth.psn", "-e", "ip.checksum.status",
                 "-e", "_ws.malformed"],
                capture_output=True, text=True, check=True).stdout.splitlines()
            self.assertEqual(len(rows), len(frames))
            for row, o in zip(rows, frames):
                dst, sport, qpn, psn, ip_ok, bad = (row.split("\t") + [""] * 6)[:6]
                self.assertEqual(ip_ok, "1", "%s: IPv4 checksum (tshark) %s" % (uplink, row))
                self.assertEqual(bad, "", row)
                if not qpn:
                    not_roce += 1
                    self.assertEqual(uplink, "uplink0", "not RoCE: the host port's peer")
                    self.assertEqual(o, udp, "not RoCE: untouched")
                    continue
                key = (int(dst.split(".")[3]), int(qpn, 0), int(psn, 0))
                self.assertNotIn(key, seen, "sent twice")
                seen[key] = (uplink, int(sport, 0))
                self.assertIn(int(sport, 0), self.PORTS, row)
                f = by_key[key]
                # Only the UDP source port and the ICRC changed; the ICRC is valid for the bytes.
                self.assertEqual(len(o), len(f))
                self.assertEqual(o[:34] + o[36:-4], f[:34] + f[36:-4], row)
                self.assertEqual(struct.unpack("<I", o[-4:])[0],
                                 scapy_roce_util.icrc_manual(o, 14, False), "ICRC %s" % row)
        self.assertEqual(not_roce, 1)
        self.assertEqual(len(seen), len(by_key))
        pinned = sprayed = 0
        for dst, qpn, psn, n, size, known in messages:
            paths = {seen[(dst, qpn, p)] for p in range(psn, psn + n)}
            if size <= self.THRESHOLD or not known:
                # Short, or of unknown size (a SEND: short until proven long, and never moved).
                self.assertEqual(len(paths), 1, "message %s: %s" % ((dst, qpn, psn, size), paths))
                pinned += 1
            else:
                ports = {p for _, p in paths}
                uplinks = {u for u, _ in paths}
                self.assertGreaterEqual(len(ports), 3, (dst, qpn, psn, size, paths))
                self.assertEqual(uplinks, {"uplink0", "uplink1"}, (dst, qpn, psn, size))
                sprayed += 1
        self.assertEqual((pinned, sprayed), (24, 6))


class StormEgress(unittest.TestCase):
    """storm.egress on virtual ports, which have no DCB: `dcb` refuses to start, naming the port
    and why; `auto` falls back to the software queues on that port, says so in `show storm`, and
    forwards the trace."""

    def run_heddled(self, d, timeout=60):
        p = subprocess.run([harness.HEDDLED, "-c", d.config], capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout + p.stderr

    def test_dcb_refused_on_a_port_without_dcb(self):
        d = Daemon([("host0", "host", "net_null0"), ("uplink0", "uplink", "net_null1")],
                   extra_yaml="storm: { enabled: true, egress: dcb }\n")
        try:
            p = subprocess.run([harness.HEDDLED, "--check-config", "-c", d.config],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)  # valid: the device decides at start-up
            rc, out = self.run_heddled(d)
            self.assertEqual(rc, 1, out)
            self.assertIn("storm.egress dcb: port uplink0: driver net_null has no DCB", out)
            self.assertIn("storm.egress: software", out)
            self.assertNotIn("running", out)
        finally:
            d.cleanup()

    def test_bad_egress_values_fail_the_config_check(self):
        d = Daemon([("host0", "host", "net_null0"), ("uplink0", "uplink", "net_null1")],
                   extra_yaml="storm: { enabled: true, egress: dcb, pcp: [-1, 2, 3, 4] }\n")
        try:
            p = subprocess.run([harness.HEDDLED, "--check-config", "-c", d.config],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 1)
            self.assertIn("storm.pcp: level 1 has PCP 2 but level 0 has none", p.stderr)
        finally:
            d.cleanup()

    def test_auto_falls_back_and_forwards(self):
        tmp = tempfile.mkdtemp(prefix="heddle-egress-")
        host_in = os.path.join(tmp, "host_in.pcap")
        empty = os.path.join(tmp, "empty.pcap")
        up_out = os.path.join(tmp, "uplink_out.pcap")
        pktgen(host_in, "--mix", "demo", "--packets", "300", "--seed", "5")
        harness.write_empty_pcap(empty)
        frames = read_pcap(host_in)
        d = Daemon([
            ("host0", "host", "net_pcap0,rx_pcap=%s" % host_in),
            ("uplink0", "uplink", "net_pcap1,rx_pcap=%s,tx_pcap=%s" % (empty, up_out)),
        ], tmp=os.path.join(tmp, "d"), extra_yaml="storm: { enabled: true, egress: auto }\n")
        try:
            d.start()
            d.wait_for(lambda: int(d.port_stats()["uplink0"].get("txPackets", 0)) == len(frames),
                       what="the trace forwarded")
            storm = d.ctl("show", "storm", json_out=True)["storm"]
            ports = {p["port"]: p for p in storm["egressPorts"]}
            self.assertEqual(ports["uplink0"]["configured"], "auto")
            self.assertEqual(ports["uplink0"]["mode"], "software")
            self.assertIn("driver net_pcap has no DCB", ports["uplink0"]["fallback"])
            self.assertEqual(ports["host0"]["configured"], "software")
            self.assertEqual(ports["host0"]["mode"], "software")
            self.assertEqual(ports["host0"].get("fallback", ""), "")
            table = d.ctl("show", "storm")
            self.assertRegex(table, r"uplink0\s+software\s+auto\s+-\s+fell back: port uplink0: "
                                    r"driver net_pcap has no DCB")
            # Per-level counters of the software egress add up to what left the uplink.
            sent = sum(int(l.get("egressTxPackets", 0)) for l in storm["perLevel"])
            self.assertEqual(d.stop(), 0, d.read_log())
            self.assertIn("storm.egress auto: port uplink0: driver net_pcap has no DCB",
                          d.read_log())
            self.assertEqual(len(read_pcap(up_out)), len(frames))
            self.assertEqual(sent, len(frames))
        finally:
            d.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
