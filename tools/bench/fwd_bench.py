#!/usr/bin/python3
"""Forwarding-rate benchmark: heddled (parse + stage chain + forward, one worker core) against
dpdk-testpmd --forward-mode=macswap on the same virtual devices, in the same run.

Both replay the same RoCEv2 trace with net_pcap (infinite_rx=1) into net_null (no-rx=1), one
forwarding lcore each, run one after the other for the same duration, and report the median
transmitted packets per second over the steady-state seconds. Quote the ratio, not the absolute
rates: the machine is shared and noisy.

  /usr/bin/python3 tools/bench/fwd_bench.py [--build build] [--seconds 8] [--mix small,1k]
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_testpmd(trace, seconds, lcores):
    cmd = ["dpdk-testpmd", "-l", lcores, "--no-huge", "-m", "1024", "--no-pci", "--no-shconf",
           "--no-telemetry", "--log-level=error",
           "--vdev", "net_pcap0,rx_pcap=%s,infinite_rx=1" % trace,
           "--vdev", "net_null0,no-rx=1",
           "--", "--forward-mode=macswap", "--no-flush-rx", "--nb-cores=1", "--rxq=1", "--txq=1",
           "--burst=32", "--stats-period=1", "--total-num-mbufs=16384"]
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


def run_heddled(build, trace, seconds, lcores):
    tmp = tempfile.mkdtemp(prefix="heddle-bench-")
    sock = os.path.join(tmp, "heddled.sock")
    main_lcore, worker = lcores.split(",")
    cfg = os.path.join(tmp, "bench.yaml")
    with open(cfg, "w") as f:
        f.write("""lcores: { main: %s, workers: [%s] }
memory: { no_huge: true, size_mb: 1024 }
mempool: { mbufs: 16383, cache: 256 }
ports:
  - { name: host0, role: host, vdev: "net_pcap0,rx_pcap=%s,infinite_rx=1" }
  - { name: uplink0, role: uplink, vdev: "net_null0,no-rx=1" }
dataplane: { burst_size: 32 }
metrics: { enabled: false }
control: { socket: %s }
log: { level: warning }
""" % (main_lcore, worker, trace, sock))
    heddled = os.path.join(build, "tools/heddled/heddled")
    heddlectl = os.path.join(build, "tools/heddlectl/heddlectl")
    p = subprocess.Popen([heddled, "-c", cfg], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)

    def tx():
        out = subprocess.run([heddlectl, "-s", sock, "-j", "show", "stats"], capture_output=True,
                             text=True)
        if out.returncode != 0:
            return None
        ports = {x["name"]: x for x in json.loads(out.stdout)["ports"]}
        return int(ports["uplink0"]["txPackets"]), time.time()

    start = time.time()
    while tx() is None:
        if p.poll() is not None or time.time() - start > 30:
            raise SystemExit("heddled did not start: " + (p.stderr.read() if p.stderr else ""))
        time.sleep(0.1)
    samples = []
    prev = tx()
    for _ in range(seconds):
        time.sleep(1)
        cur = tx()
        samples.append(int((cur[0] - prev[0]) / (cur[1] - prev[1])))
        prev = cur
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=30)
    if rc != 0:
        raise SystemExit("heddled exited %d: %s" % (rc, p.stderr.read()))
    return samples


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
    args = ap.parse_args()
    pktgen = os.path.join(args.build, "tools/pktgen/heddle-pktgen")
    tmp = tempfile.mkdtemp(prefix="heddle-bench-traces-")
    print("forwarding rate, one worker core: net_pcap(infinite_rx) -> net_null; %ds per run" %
          args.seconds)
    print("%-6s %14s %14s %8s" % ("mix", "testpmd pps", "heddled pps", "ratio"))
    for mix in args.mix.split(","):
        trace = os.path.join(tmp, "%s.pcap" % mix)
        subprocess.run([pktgen, "--out", trace, "--mix", mix, "--packets", "4096", "--seed", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        ref, ours = [], []
        for _ in range(args.rounds):
            ref.append(steady(run_testpmd(trace, args.seconds, args.lcores)))
            ours.append(steady(run_heddled(args.build, trace, args.seconds, args.lcores)))
        r, o = statistics.median(ref), statistics.median(ours)
        print("%-6s %14.0f %14.0f %8.2f" % (mix, r, o, o / r if r else float("nan")))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
