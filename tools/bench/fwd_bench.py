#!/usr/bin/python3
"""Forwarding-rate benchmark: heddled (parse + stage chain + forward, one worker core) against
dpdk-testpmd --forward-mode=macswap on the same virtual devices, in the same run.

Both replay the same RoCEv2 trace with net_pcap (infinite_rx=1) into net_null (no-rx=1), one
forwarding lcore each, run one after the other for the same duration, and report the median
transmitted packets per second over the steady-state seconds. Quote the ratio, not the absolute
rates: the machine is shared and noisy.

  /usr/bin/python3 tools/bench/fwd_bench.py [--build build] [--seconds 8] [--mix small,1k]
                                            [--rounds N] [--mbuf-size auto|BYTES]
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_testpmd(trace, seconds, lcores, mbuf_size):
    cmd = ["dpdk-testpmd", "-l", lcores, "--no-huge", "-m", "1024", "--no-pci", "--no-shconf",
           "--no-telemetry", "--log-level=error",
           "--vdev", "net_pcap0,rx_pcap=%s,infinite_rx=1" % trace,
           "--vdev", "net_null0,no-rx=1",
           "--", "--forward-mode=macswap", "--no-flush-rx", "--nb-cores=1", "--rxq=1", "--txq=1",
           "--burst=32", "--stats-period=1", "--total-num-mbufs=16384", "--mbuf-size=%d" % mbuf_size]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         stdin=subprocess.DEVNULL)
    samples = []
    deadline = time.time() + seconds + 3
    port = None
    buf = ""
    os.set_blocking(p.stdout.fileno(), False)
    while time.time() < deadline and p.poll() is None:
        time.sleep(0.2)
        try:
            chunk = p.stdout.read()
        except TypeError:
            chunk = None
        if chunk:
            buf += chunk
    p.send_signal(signal.SIGINT)
    try:
        rest, _ = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        rest, _ = p.communicate()
    buf += rest or ""
    # Stats blocks: "NIC statistics for port N" ... "Tx-pps: X". Port 1 is net_null (tx side).
    for block in re.split(r"#+ NIC statistics for port ", buf)[1:]:
        port = int(block.split()[0])
        m = re.search(r"Tx-pps:\s+(\d+)", block)
        if port == 1 and m:
            samples.append(int(m.group(1)))
    if not samples:
        raise SystemExit("testpmd produced no statistics:\n" + buf[-3000:])
    return samples


def run_heddled(build, trace, seconds, lcores, mbuf_size):
    tmp = tempfile.mkdtemp(prefix="heddle-bench-")
    sock = os.path.join(tmp, "heddled.sock")
    main_lcore, worker = lcores.split(",")
    cfg = os.path.join(tmp, "bench.yaml")
    with open(cfg, "w") as f:
        f.write("""lcores: { main: %s, workers: [%s] }
memory: { no_huge: true, size_mb: 1024 }
mempool: { mbufs: 16383, cache: 256, data_room: %d }
ports:
  - { name: host0, role: host, vdev: "net_pcap0,rx_pcap=%s,infinite_rx=1" }
  - { name: uplink0, role: uplink, vdev: "net_null0,no-rx=1" }
dataplane: { burst_size: 32 }
metrics: { enabled: false }
control: { socket: %s }
log: { level: warning }
""" % (main_lcore, worker, mbuf_size, trace, sock))
    heddled = os.path.join(build, "tools/heddled/heddled")
    heddlectl = os.path.join(build, "tools/heddlectl/heddlectl")
    log_path = os.path.join(tmp, "heddled.log")
    log = open(log_path, "w")
    p = subprocess.Popen([heddled, "-c", cfg], stdout=log, stderr=subprocess.STDOUT)
    try:
        return measure_heddled(p, heddlectl, sock, seconds, log_path)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def measure_heddled(p, heddlectl, sock, seconds, log_path):

    def tx():
        out = subprocess.run([heddlectl, "-s", sock, "-j", "show", "stats"], capture_output=True,
                             text=True)
        if out.returncode != 0:
            return None
        ports = {x["name"]: x for x in json.loads(out.stdout)["ports"]}
        return int(ports["uplink0"]["txPackets"]), time.time()

    def log_text():
        with open(log_path) as f:
            return f.read()

    start = time.time()
    while tx() is None:
        if p.poll() is not None or time.time() - start > 30:
            raise SystemExit("heddled did not start:\n" + log_text())
        time.sleep(0.1)
    samples = []
    prev = tx()
    for _ in range(seconds):
        time.sleep(1)
        cur = tx()
        if cur is None:
            raise SystemExit("heddled stopped answering:\n" + log_text())
        samples.append(int((cur[0] - prev[0]) / (cur[1] - prev[1])))
        prev = cur
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=30)
    if rc != 0:
        raise SystemExit("heddled exited %d:\n%s" % (rc, log_text()))
    return samples


def read_frames(path):
    with open(path, "rb") as f:
        data = f.read()
    frames, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return frames


def steady(samples):
    # Drop the first sample (start-up), take the median of the rest.
    s = samples[1:] if len(samples) > 2 else samples
    return statistics.median(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--mix", default="small,1k")
    ap.add_argument("--lcores", default="0,1", help="main,worker lcore for both programs")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the two programs N times")
    ap.add_argument("--mbuf-size", default="auto",
                    help="mbuf data room for both programs; auto = DPDK's default 2176 unless the "
                         "trace has frames that need more (then 4608)")
    args = ap.parse_args()
    pktgen = os.path.join(args.build, "tools/pktgen/heddle-pktgen")
    tmp = tempfile.mkdtemp(prefix="heddle-bench-traces-")
    print("forwarding rate, one worker core: net_pcap(infinite_rx) -> net_null; %ds per run" %
          args.seconds)
    print("%-6s %6s %14s %14s %8s" % ("mix", "mbuf", "testpmd pps", "heddled pps", "ratio"))
    for mix in args.mix.split(","):
        trace = os.path.join(tmp, "%s.pcap" % mix)
        subprocess.run([pktgen, "--out", trace, "--mix", mix, "--packets", "4096", "--seed", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        if args.mbuf_size == "auto":
            biggest = max(len(f) for f in read_frames(trace))
            mbuf = 2176 if biggest + 128 <= 2176 else 4608
        else:
            mbuf = int(args.mbuf_size)
        ref, ours = [], []
        for _ in range(args.rounds):
            ref.append(steady(run_testpmd(trace, args.seconds, args.lcores, mbuf)))
            ours.append(steady(run_heddled(args.build, trace, args.seconds, args.lcores, mbuf)))
        r, o = statistics.median(ref), statistics.median(ours)
        print("%-6s %6d %14.0f %14.0f %8.2f" % (mix, mbuf, r, o, o / r if r else float("nan")))
        sys.stdout.flush()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
