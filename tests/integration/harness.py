"""Whole-daemon test harness: runs the real heddled on DPDK virtual devices.

Each Daemon gets its own temporary directory (config, control socket, output pcaps), a metrics
exposer on an ephemeral loopback port and an EAL that keeps nothing in /var/run/dpdk. Binaries
come from the environment (set by ctest): HEDDLED, HEDDLECTL, HEDDLE_PKTGEN.
"""

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import urllib.request

HEDDLED = os.environ.get("HEDDLED", "heddled")
HEDDLECTL = os.environ.get("HEDDLECTL", "heddlectl")
PKTGEN = os.environ.get("HEDDLE_PKTGEN", "heddle-pktgen")


def read_pcap(path):
    """Returns the frames of a classic pcap file as a list of bytes."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        endian = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        endian = ">"
    else:
        raise ValueError("%s: not a pcap file" % path)
    frames, off = [], 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        frames.append(data[off:off + incl])
        off += incl
    return frames


def write_empty_pcap(path):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))


def pktgen(out, *args):
    subprocess.run([PKTGEN, "--out", out] + list(args), check=True, stdout=subprocess.DEVNULL)


class Daemon:
    """A heddled process on the ports given as (name, role, vdev) tuples."""

    def __init__(self, ports, workers=(1,), extra_yaml="", verify_icrc=False, metrics=True,
                 tmp=None, data_room=None):
        self.tmp = tmp or tempfile.mkdtemp(prefix="heddle-it-")
        os.makedirs(self.tmp, exist_ok=True)
        self.socket = os.path.join(self.tmp, "run", "heddled.sock")
        self.config = os.path.join(self.tmp, "heddle.yaml")
        lines = [
            "lcores: { main: 0, workers: [%s] }" % ", ".join(str(w) for w in workers),
            "memory: { no_huge: true, size_mb: 256 }",
            "mempool: { mbufs: 8191%s }" % (", data_room: %d" % data_room if data_room else ""),
            "dataplane: { burst_size: 32, verify_icrc: %s }" % ("true" if verify_icrc else "false"),
            "metrics: { enabled: %s, listen: \"127.0.0.1:0\" }" % ("true" if metrics else "false"),
            "control: { socket: %s }" % self.socket,
            "log: { level: info }",
            "ports:",
        ]
        for port in ports:
            name, role, vdev = port[:3]
            extra = port[3] if len(port) > 3 else {}
            lines += ["  - name: %s" % name, "    role: %s" % role,
                      "    vdev: \"%s\"" % vdev, "    rx_desc: 512", "    tx_desc: 512"]
            lines += ["    %s: %s" % kv for kv in extra.items()]
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n" + extra_yaml)
        self.proc = None
        self.log = os.path.join(self.tmp, "heddled.log")

    def start(self, timeout=30):
        self._logf = open(self.log, "w")
        self.proc = subprocess.Popen([HEDDLED, "-c", self.config], stdout=self._logf,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("heddled exited %d at start-up:\n%s" %
                                   (self.proc.returncode, self.read_log()))
            if os.path.exists(self.socket):
                try:
                    self.ctl("show", "status")
                    return self
                except subprocess.CalledProcessError:
                    pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("heddled did not come up in %ds:\n%s" % (timeout, self.read_log()))

    def read_log(self):
        try:
            with open(self.log) as f:
                return f.read()
        except OSError:
            return ""

    def ctl(self, *args, json_out=False):
        cmd = [HEDDLECTL, "-s", self.socket] + (["-j"] if json_out else []) + list(args)
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=20).stdout
        return json.loads(out) if json_out else out

    def stats(self):
        return self.ctl("show", "stats", json_out=True)

    def port_stats(self):
        """{port name: stats dict} from heddlectl -j show stats."""
        return {p["name"]: p for p in self.stats()["ports"]}

    def drops(self):
        return {d["reason"]: int(d.get("packets", 0))
                for d in self.ctl("show", "drops", "--all", json_out=True)["drops"]}

    def metrics_url(self):
        return self.ctl("show", "status", json_out=True)["metricsUrl"]

    def scrape(self):
        with urllib.request.urlopen(self.metrics_url(), timeout=10) as r:
            return r.read().decode()

    def wait_for(self, pred, timeout=60, what="condition"):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = pred()
            if last:
                return last
            time.sleep(0.2)
        raise AssertionError("timed out waiting for %s; log:\n%s" % (what, self.read_log()))

    def stop(self, sig=signal.SIGTERM, timeout=30):
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            self._logf.close()
        return rc

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def cleanup(self):
        self.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)


def metric_values(text, name):
    """{label string: value} for one metric family in the Prometheus text format; the label
    string has its labels sorted by name: '{class="send",port="host0"}'."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, val = line.rpartition(" ")
            labels = key[len(name):].strip("{}")
            parts = sorted(p for p in re.findall(r'[a-zA-Z_]+="[^"]*"', labels))
            out["{" + ",".join(parts) + "}" if parts else ""] = float(val)
    return out
