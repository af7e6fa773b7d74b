"""Nüwa artifact install through heddled on virtual ports (docs/nuwa-install.md).

heddled runs as host[5] of a small 2-tier fabric (compiled by heddle-nuwa: 4 leaves of 4 hosts,
two host ports, 10.0.0.0/8) with one host port and two uplinks on net_pcap, fwd configured and lb
not: the installed artifact alone turns pin-select on (ecmp, pin off). Traffic enters through a
FIFO the test writes pcap records into while the daemon runs, so that phases of traffic can be
told apart in the uplinks' output pcaps.

Every output frame towards a fabric destination must carry one path of that destination's path
set as the artifact gives it — read independently by `heddle-nuwa query --json` from the same
artifact: the uplink (fwd.ports order), the next-hop MAC as destination MAC and the entropy as UDP
source port, with a valid ICRC. Frames to this host itself and to addresses outside the fabric
are left untouched and follow port-fwd.

ArtifactInstall: start with artifact A, install B (frames follow B), a corrupt file, a switch
artifact and another fabric's artifact are refused (frames keep following B), diff, rollback to A.
ArtifactSwaps: 1000 installs alternating A and B while traffic flows; every packet received is
sent (no drop), and every sent frame matches A's or B's path set for its destination.
Run by ctest with HEDDLED, HEDDLECTL, HEDDLE_NUWA and HEDDLE_TEST_ARTIFACT (the swap loop) set.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "data"))
import harness  # noqa: E402
from harness import Daemon, metric_values, read_pcap  # noqa: E402

TOOL = os.environ.get("HEDDLE_TEST_ARTIFACT", "heddle-test-artifact")
NUWA = os.environ.get("HEDDLE_NUWA", "heddle-nuwa")
HOST = 5  # this daemon's node: host[5] = 10.0.0.5
SRC = bytes([10, 0, 0, 5])
UPLINKS = ("uplink0", "uplink1")  # artifact host ports 0, 1
# Destinations: fabric hosts under other ToRs and under this host's ToR, this host itself, and an
# address outside the fabric.
FABRIC_DSTS = ["10.0.0.%d" % i for i in (1, 2, 3, 4, 6, 7, 8, 9, 12, 13, 14, 15)]
LOCAL_DST = "10.0.0.5"
OUTSIDE_DST = "192.168.7.7"
SRC_MAC = b"\x02\x00\x00\x00\x00\x05"
ORIG_DST_MAC = b"\x02\xee\xee\xee\xee\xee"
ORIG_SPORT = 0xD000


def tool(*args):
    return subprocess.run([TOOL] + list(args), check=True, capture_output=True,
                          text=True, timeout=60).stdout


# The fabric: 2 tiers, 4 leaves of 4 hosts, every host on two leaves (host_uplinks: 2: two host
# ports), 4 spines, hosts in 10.0.0.0/8. A and B differ in the switches' hash function, so the
# entropies the compiler picks for distinct spine paths differ too.
FABRIC_YAML = """fabric:
  name: {name}
  kind: clos2
  hosts_per_leaf: 4
  leaves: 4
  spines: 4
  host_uplinks: 2
  link_gbps: 100
addressing:
  ipv4: 10.0.0.0/8
hash:
  function: {hash}
  seed: 7
"""


def compile_fabric(tmp, label, name="pod-a", hash_function="crc32"):
    """heddle-nuwa compile of the fabric; returns the artifact directory."""
    src = os.path.join(tmp, "%s.yaml" % label)
    with open(src, "w") as f:
        f.write(FABRIC_YAML.format(name=name, hash=hash_function))
    out = os.path.join(tmp, label)
    subprocess.run([NUWA, "compile", src, "-o", out], check=True, capture_output=True,
                   text=True, timeout=60)
    return out


def path_set(artifacts, dst):
    """{(uplink name, dst MAC bytes, entropy)} for dst, or a kind string ("local", ...), as
    heddle-nuwa query reads it from the compiled host artifact."""
    out = subprocess.run([NUWA, "query", "--artifacts", artifacts, "--node", "host[%d]" % HOST,
                          "--dst", dst, "--json"], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    q = json.loads(out)
    if not q["paths"]:
        return q["kind"]
    return {(UPLINKS[p["port"]], bytes.fromhex(p["next_hop_mac"].replace(":", "")),
             p["entropy"] & 0xFFFF) for p in q["paths"]}


def roce_frame(dst, qpn, psn, payload=16):
    """A RoCEv2 SEND-only from 10.0.0.5 to `dst` with a valid ICRC (struct + scapy_roce_util)."""
    import scapy_roce_util
    bth = struct.pack("!BBHII", 0x04, 0x40, 0xFFFF, qpn & 0xFFFFFF, psn & 0xFFFFFF)
    body = bth + bytes((i * 7 + psn) & 0xFF for i in range(payload)) + bytes(4)
    udp = struct.pack("!HHHH", ORIG_SPORT + (qpn & 0xFF), 4791, 8 + len(body), 0)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0x02, 20 + len(udp) + len(body),
                               psn & 0xFFFF, 0x4000, 64, 17, 0, SRC,
                               bytes(int(x) for x in dst.split("."))))
    total = sum(struct.unpack("!10H", bytes(ip)))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    ip[10:12] = struct.pack("!H", ~total & 0xFFFF)
    f = bytearray(ORIG_DST_MAC + SRC_MAC + b"\x08\x00" + bytes(ip) + udp + body)
    f[-4:] = struct.pack("<I", scapy_roce_util.icrc_manual(bytes(f), 14, False))
    return bytes(f)


BURST = 32  # dataplane.burst_size in harness.Daemon


def padded(frames):
    """`frames` and frames to OUTSIDE_DST (left untouched) up to a multiple of BURST.

    net_pcap reads a FIFO with blocking reads, BURST records per rx burst: a burst returns only
    when it is full (or at EOF), so a phase that is not a whole number of bursts would leave its
    last frames waiting for the next phase."""
    n = (-len(frames)) % BURST
    return frames + [roce_frame(OUTSIDE_DST, 0x12, 1000 + i) for i in range(n)]


def pcap_records(frames):
    return b"".join(struct.pack("<IIII", 1700000000, i, len(f), len(f)) + f
                    for i, f in enumerate(frames))


class PcapFifo:
    """A FIFO heddled's net_pcap reads as its rx_pcap; frames written to it while it runs."""

    def __init__(self, path):
        self.path = path
        os.mkfifo(path)
        self.f = None
        self.sent = 0
        self._opener = threading.Thread(target=self._open, daemon=True)
        self._opener.start()

    def _open(self):
        self.f = open(self.path, "wb", buffering=0)  # blocks until heddled opens it
        self.f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))

    def wait_open(self, timeout=30):
        self._opener.join(timeout)
        if self.f is None:
            raise AssertionError("heddled did not open the rx FIFO")

    def send(self, records, count):
        self.f.write(records)
        self.sent += count

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None


def frame_fields(frame):
    """(dst MAC, dst IP string, UDP source port) of an IPv4 frame."""
    dst_ip = ".".join(str(b) for b in frame[30:34])
    return frame[0:6], dst_ip, struct.unpack("!H", frame[34:36])[0]


class Setup:
    """The daemon, its FIFO and output pcaps, and artifacts A and B with their path sets."""

    def __init__(self, test):
        self.tmp = tempfile.mkdtemp(prefix="heddle-nuwa-")
        test.addCleanup(shutil.rmtree, self.tmp, True)
        self.dir_a = compile_fabric(self.tmp, "a", hash_function="crc32")
        self.dir_b = compile_fabric(self.tmp, "b", hash_function="crc16")
        self.a = os.path.join(self.dir_a, "host.nuwa")
        self.b = os.path.join(self.dir_b, "host.nuwa")
        self.sets = {name: {d: path_set(art, d) for d in FABRIC_DSTS + [LOCAL_DST, OUTSIDE_DST]}
                     for name, art in (("A", self.dir_a), ("B", self.dir_b))}
        for name in "AB":
            for d in FABRIC_DSTS:
                test.assertIsInstance(self.sets[name][d], set, "%s %s" % (name, d))
            test.assertEqual(self.sets[name][LOCAL_DST], "local")
            test.assertEqual(self.sets[name][OUTSIDE_DST], "not-in-fabric")
        # Where A and B differ the test can tell them apart.
        self.differ = [d for d in FABRIC_DSTS if self.sets["A"][d] != self.sets["B"][d]]
        test.assertTrue(self.differ, "artifacts A and B give the same path sets everywhere")
        self.fifo = PcapFifo(os.path.join(self.tmp, "host_in.pcap"))
        empty = os.path.join(self.tmp, "empty.pcap")
        harness.write_empty_pcap(empty)
        self.outs = {u: os.path.join(self.tmp, "%s_out.pcap" % u) for u in UPLINKS}
        self.daemon = Daemon([
            ("host0", "host", "net_pcap0,rx_pcap=%s" % self.fifo.path, {"peer": "uplink0"}),
            ("uplink0", "uplink", "net_pcap1,rx_pcap=%s,tx_pcap=%s" % (empty, self.outs["uplink0"]),
             {"peer": "host0"}),
            ("uplink1", "uplink", "net_pcap2,rx_pcap=%s,tx_pcap=%s" % (empty, self.outs["uplink1"]),
             {"peer": "host0"}),
        ], tmp=os.path.join(self.tmp, "d"),
            extra_yaml="fwd:\n  artifact: %s\n  node: \"host[%d]\"\n  fabric: pod-a\n"
            "  ports: [uplink0, uplink1]\n" % (self.a, HOST))
        test.addCleanup(self.daemon.kill)
        test.addCleanup(self.fifo.close)
        self.seen = {u: 0 for u in UPLINKS}

    def start(self):
        starter = threading.Thread(target=self._start, daemon=True)
        starter.start()
        self.fifo.wait_open()
        starter.join(60)
        if self.error:
            raise self.error

    error = None

    def _start(self):
        try:
            self.daemon.start()
        except Exception as e:  # noqa: BLE001 - reported by start()
            self.error = e

    def sent(self):
        stats = self.daemon.port_stats()
        return sum(int(stats[u].get("txPackets", 0)) for u in UPLINKS)

    def received(self):
        return int(self.daemon.port_stats()["host0"].get("rxPackets", 0))

    def drops(self):
        return sum(self.daemon.drops().values())

    def wait_through(self, timeout=30):
        """Until every frame written so far was received and sent (or dropped)."""
        self.daemon.wait_for(lambda: self.received() == self.fifo.sent and
                             self.sent() + self.drops() == self.fifo.sent,
                             timeout=timeout, what="every frame through heddled")

    def new_frames(self):
        """[(uplink, frame)] written to the output pcaps since the last call."""
        out = []
        for u in UPLINKS:
            frames = read_pcap(self.outs[u])
            out += [(u, f) for f in frames[self.seen[u]:]]
            self.seen[u] = len(frames)
        return out


def traffic(qps=16, rounds=1, psn0=0):
    """Frames to every destination: `qps` QPs (flows) per fabric destination."""
    frames = []
    for r in range(rounds):
        for i, d in enumerate(FABRIC_DSTS):
            for q in range(qps):
                frames.append(roce_frame(d, 0x100 + i * 64 + q, psn0 + r))
        frames.append(roce_frame(LOCAL_DST, 0x10, psn0 + r))
        frames.append(roce_frame(OUTSIDE_DST, 0x11, psn0 + r))
    return frames


class ArtifactInstall(unittest.TestCase):

    def check_phase(self, s, frames_out, expect, label):
        """Every frame follows path set `expect` ("A"/"B") of its destination."""
        import scapy_roce_util
        by_dst = {}
        for uplink, f in frames_out:
            mac, dst, sport = frame_fields(f)
            stored = struct.unpack("<I", f[-4:])[0]
            self.assertEqual(stored, scapy_roce_util.icrc_manual(f, 14, False),
                             "%s: bad ICRC towards %s" % (label, dst))
            if dst in (LOCAL_DST, OUTSIDE_DST):
                # Not balanced: port-fwd's peer, headers untouched.
                self.assertEqual((uplink, mac, sport & 0xFF00), ("uplink0", ORIG_DST_MAC, ORIG_SPORT))
                continue
            want = s.sets[expect][dst]
            self.assertIn((uplink, mac, sport), want, "%s: %s" % (label, dst))
            by_dst.setdefault(dst, set()).add((uplink, mac, sport))
        self.assertEqual(set(by_dst), set(FABRIC_DSTS), label)
        # 16 flows per destination spread over its set: more than one path where it has several.
        for d, used in by_dst.items():
            if len(s.sets[expect][d]) > 1:
                self.assertGreater(len(used), 1, "%s: %s all on one path" % (label, d))

    def phase(self, s, label, expect):
        # The worker sits blocked in the FIFO's read between phases, so a table published meanwhile
        # is applied at its first poll after the next burst: one burst of untouched frames first.
        wake = [roce_frame(OUTSIDE_DST, 0x13, i) for i in range(BURST)]
        frames = wake + padded(traffic())
        s.fifo.send(pcap_records(frames), len(frames))
        s.wait_through()
        out = s.new_frames()
        self.assertEqual(len(out), len(frames), label)
        self.check_phase(s, out, expect, label)

    def test_install_refuse_diff_rollback(self):
        s = Setup(self)
        s.start()
        d = s.daemon
        st = d.ctl("artifact", "show", json_out=True)
        self.assertEqual(int(st["installed"]["id"]), 1)
        self.assertEqual(st["installed"]["source"], s.a)
        self.assertEqual(st["installed"]["node"], "host[5] (10.0.0.5)")
        self.phase(s, "A at start-up", "A")

        out = d.ctl("artifact", "diff", s.b)
        self.assertIn("prefix(es) differ", out)
        self.assertIn("hash", out)
        dry = d.ctl("artifact", "install", s.b, "--dry-run", json_out=True)
        self.assertTrue(dry["dryRun"])
        self.phase(s, "after a dry run", "A")

        r = d.ctl("artifact", "install", s.b, json_out=True)
        self.assertEqual(int(r["artifact"]["id"]), 2)
        self.phase(s, "B installed", "B")

        # Refused: corrupt, a switch's artifact, another fabric's. B stays in force.
        corrupt = os.path.join(s.tmp, "corrupt.nuwa")
        data = bytearray(open(s.b, "rb").read())
        data[len(data) // 2] ^= 0x5A
        open(corrupt, "wb").write(bytes(data))
        tor = os.path.join(s.dir_b, "leaf.nuwa")
        other = os.path.join(compile_fabric(s.tmp, "other", name="pod-b"), "host.nuwa")
        for path, why in ((corrupt, "artifact " + corrupt), (tor, "installs the fabric's host"),
                          (other, "fwd.fabric")):
            p = subprocess.run([harness.HEDDLECTL, "-s", d.socket, "artifact", "install", path],
                               capture_output=True, text=True, timeout=20)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn(why, p.stderr)
        self.phase(s, "B after refusals", "B")

        r = d.ctl("artifact", "rollback", json_out=True)
        self.assertEqual(int(r["artifact"]["id"]), 1)
        self.phase(s, "rolled back to A", "A")

        st = d.ctl("artifact", "show", json_out=True)
        self.assertEqual(int(st["installs"]), 2)
        self.assertEqual(int(st["rejected"]), 3)
        self.assertEqual(int(st["rollbacks"]), 1)
        self.assertEqual(st.get("history", []), [])
        m = metric_values(d.scrape(), "heddle_fwd_artifact_installs_total")
        self.assertEqual(m, {'{result="installed"}': 2, '{result="rejected"}': 3,
                             '{result="rolled_back"}': 1})
        self.assertEqual(metric_values(d.scrape(), "heddle_fwd_artifact_generation")[""], 2)
        self.assertEqual(s.drops(), 0)
        s.fifo.close()
        self.assertEqual(d.stop(), 0, d.read_log())


class ArtifactSwaps(unittest.TestCase):
    SWAPS = 1000

    def test_thousand_swaps_under_traffic(self):
        s = Setup(self)
        s.start()
        # One chunk: 8 flows to every fabric destination; written again and again while the
        # installs run, then the FIFO is closed.
        frames = traffic(qps=8)
        fabric_frames = [f for f in frames if frame_fields(f)[1] in FABRIC_DSTS]
        self.assertEqual(len(fabric_frames) % BURST, 0)  # whole bursts: see padded()
        records = pcap_records(fabric_frames)
        done = threading.Event()
        result = {}

        def swap():
            try:
                result["out"] = tool("swap", "--socket", s.daemon.socket, "--a", s.a, "--b", s.b,
                                     "--count", str(self.SWAPS))
            except subprocess.CalledProcessError as e:
                result["error"] = e.stderr
            done.set()

        swapper = threading.Thread(target=swap, daemon=True)
        swapper.start()
        while not done.is_set():
            s.fifo.send(records, len(fabric_frames))
            time.sleep(0.002)
        s.fifo.send(records, len(fabric_frames))  # and some after the last install
        swapper.join()
        s.fifo.close()  # EOF: the last burst returns
        self.assertNotIn("error", result, result.get("error"))
        s.wait_through(timeout=60)

        # Every packet accounted for: all received, all sent, none dropped.
        self.assertEqual(s.received(), s.fifo.sent)
        self.assertEqual(s.sent(), s.fifo.sent)
        self.assertEqual(s.drops(), 0)
        st = s.daemon.ctl("artifact", "show", json_out=True)
        self.assertEqual(int(st["installs"]), self.SWAPS + 1)
        self.assertEqual(int(st["generation"]), self.SWAPS)
        self.assertEqual(int(st["rejected"]), 0)

        # Every frame on one path of A or of B; both artifacts were in force while traffic ran.
        allowed = {d: s.sets["A"][d] | s.sets["B"][d] for d in FABRIC_DSTS}
        only_a = {d: s.sets["A"][d] - s.sets["B"][d] for d in FABRIC_DSTS}
        only_b = {d: s.sets["B"][d] - s.sets["A"][d] for d in FABRIC_DSTS}
        seen_a = seen_b = total = 0
        for u in UPLINKS:
            for f in read_pcap(s.outs[u]):
                mac, dst, sport = frame_fields(f)
                key = (u, mac, sport)
                self.assertIn(key, allowed[dst], dst)
                seen_a += key in only_a[dst]
                seen_b += key in only_b[dst]
                total += 1
        self.assertEqual(total, s.fifo.sent)
        self.assertGreater(seen_a, 0)
        self.assertGreater(seen_b, 0)
        print("%s; %d frames, %d on A-only paths, %d on B-only paths" %
              (result["out"].strip(), total, seen_a, seen_b))
        self.assertEqual(s.daemon.stop(), 0, s.daemon.read_log())


if __name__ == "__main__":
    unittest.main()
