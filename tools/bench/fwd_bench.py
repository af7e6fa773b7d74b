#!/usr/bin/python3
"""Forwarding-rate benchmark: heddled (parse + stage chain + forward, one worker core) against
dpdk-testpmd --forward-mode=macswap on the same virtual devices, in the same run, with STORM
tagging off and on.

Every configuration replays the same RoCEv2 trace with net_pcap (infinite_rx=1) into net_null
(no-rx=1), one forwarding lcore, the same mbuf size, for the same duration, and reports the median
transmitted packets per second over the steady-state seconds. The configurations run one after the
other, interleaved in rounds (the order rotates every round), so slow drift on a shared machine
hits all of them alike:

  testpmd      dpdk-testpmd --forward-mode=macswap: the reference
  storm-off    heddled, storm: { enabled: false }
  storm-on     heddled, storm: { enabled: true }              (default levels, per-message mode)
  per-packet   heddled, storm: { enabled: true, mode: per-packet }   (with --per-packet)
  lb-on        heddled, lb: PIN + REPS over 8 source ports (storm off)  (with --lb)
  lb-spray     heddled, lb: REPS alone, pin off: every packet sprayed    (with --lb)

Printed per mix: Mpps per configuration, each heddled configuration's ratio to testpmd, and the
STORM cost 1 - storm-on / storm-off, paired within each round, as median [min, max] over the
rounds. Quote the ratios, not the absolute rates: the machine is shared and noisy. With --lb, also
the lb ratio lb-on / storm-off (heddled with lb off, same run; target >= 0.8) and lb-spray's.

After every STORM run the harness reads heddle_storm_level_packets_total from the metrics endpoint
and fails if storm-tag tagged nothing (or far fewer packets than the host port received RoCE
frames), so a configuration that silently skipped the stage cannot pass as "cheap". After every lb
run it reads heddle_lb_packets_total the same way (pin-select must have placed about every RoCE
frame on a path) and prints the pinned / sprayed split.

PSNs: net_pcap replays the trace in a loop, so from the second pass on every QP's PSNs go back to
where they started. STORM's tracker treats a PSN that is not after the last one as a duplicate (no
accounting, stored level reused) -- a cheaper path than live traffic takes. By default the harness
therefore rewrites the trace so each QP's PSNs advance in four quarters 2^22 apart: every pass and
every quarter is a forward PSN jump, never a duplicate, and the ICRC is recomputed. --raw-psns
replays heddle-pktgen's trace unchanged (to see the duplicate path's cost).

  /usr/bin/python3 tools/bench/fwd_bench.py [--build build] [--seconds 8] [--mix small,1k]
                                            [--rounds N] [--mbuf-size auto|BYTES] [--qps Q]
                                            [--packets N] [--per-packet] [--raw-psns]
                                            [--no-storm] [--lb] [--json FILE]
                                            [--write-traces DIR]
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
import urllib.request
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROCE_PORT = 4791
PSN_MASK = 0xFFFFFF
PSN_QUARTERS = 4  # 2^24 / 4 = 2^22 between quarters: a forward jump (< 2^23) each time

# Configurations of heddled: name -> YAML storm section.
HEDDLED_STORM = {
    "storm-off": "{ enabled: false }",
    "storm-on": "{ enabled: true }",
    "per-packet": "{ enabled: true, mode: per-packet }",
    "lb-on": "{ enabled: false }",
    "lb-spray": "{ enabled: false }",
}
# ... and its lb section: PIN (one BDP threshold) over REPS, and REPS alone, 8 source ports on the
# one uplink. No feedback join (no verbs shim), so REPS explores at random: the per-packet path.
HEDDLED_LB = {
    "lb-on": "{ enabled: true, balancer: reps, pin: { enabled: true } }",
    "lb-spray": "{ enabled: true, balancer: reps, pin: { enabled: false } }",
}


# --- testpmd ------------------------------------------------------------------------------------


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


# --- heddled ------------------------------------------------------------------------------------


def run_heddled(build, trace, seconds, lcores, mbuf_size, storm="{ enabled: false }",
                lb="{ enabled: false }"):
    """Returns (per-second tx pps samples, end-of-run counters dict)."""
    tmp = tempfile.mkdtemp(prefix="heddle-bench-")
    sock = os.path.join(tmp, "heddled.sock")
    main_lcore, worker = lcores.split(",")
    cfg = os.path.join(tmp, "bench.yaml")
    # Metrics on (port 0 = any free port) in every heddled configuration alike; they are scraped
    # once, after the measured seconds.
    with open(cfg, "w") as f:
        f.write("""lcores: { main: %s, workers: [%s] }
memory: { no_huge: true, size_mb: 1024 }
mempool: { mbufs: 16383, cache: 256, data_room: %d }
ports:
  - { name: host0, role: host, vdev: "net_pcap0,rx_pcap=%s,infinite_rx=1" }
  - { name: uplink0, role: uplink, vdev: "net_null0,no-rx=1" }
dataplane: { burst_size: 32 }
storm: %s
lb: %s
metrics: { enabled: true, listen: "127.0.0.1:0" }
control: { socket: %s }
log: { level: warning }
""" % (main_lcore, worker, mbuf_size, trace, storm, lb, sock))
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


def heddlectl_json(heddlectl, sock, *what):
    out = subprocess.run([heddlectl, "-s", sock, "-j", "show"] + list(what), capture_output=True,
                         text=True)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout)


def scrape_lb(text):
    """pin-select's packets by verdict from a scrape; None if the family is absent (lb off)."""
    verdicts = {}
    for line in text.splitlines():
        m = re.match(r'heddle_lb_packets_total\{verdict="(\w+)"\}\s+(\S+)', line)
        if m:
            verdicts[m.group(1)] = int(float(m.group(2)))
    return verdicts or None


def scrape_storm(url):
    """Sums of the storm-tag counters at `url` (Prometheus text); None if the family is absent.
    The lb counters of the same scrape ride along under "lb"."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    scrape_storm.lb = scrape_lb(text)
    levels, full = {}, 0.0
    for line in text.splitlines():
        m = re.match(r'heddle_storm_level_packets_total\{level="(\d+)"\}\s+(\S+)', line)
        if m:
            levels[int(m.group(1))] = float(m.group(2))
        m = re.match(r"heddle_storm_qp_table_full_total\s+(\S+)", line)
        if m:
            full = float(m.group(1))
    if not levels:
        return None
    return {"level_packets": [int(levels[k]) for k in sorted(levels)], "table_full": int(full)}


def measure_heddled(p, heddlectl, sock, seconds, log_path):

    def tx():
        s = heddlectl_json(heddlectl, sock, "stats")
        if s is None:
            return None
        ports = {x["name"]: x for x in s["ports"]}
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
    # Counters after the measured seconds: the storm-tag metrics first, then the port counters,
    # so rx >= tagged when every frame is RoCE.
    status = heddlectl_json(heddlectl, sock, "status") or {}
    url = status.get("metricsUrl", "")
    if not url:
        raise SystemExit("heddled reports no metrics URL (show status):\n" + log_text())
    storm = scrape_storm(url)
    stats = heddlectl_json(heddlectl, sock, "stats")
    ports = {x["name"]: x for x in stats["ports"]}
    counters = {"storm": storm, "lb": scrape_storm.lb, "host_rx": int(ports["host0"]["rxPackets"])}
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=30)
    if rc != 0:
        raise SystemExit("heddled exited %d:\n%s" % (rc, log_text()))
    return samples, counters


# --- traces -------------------------------------------------------------------------------------


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    header, records, off = data[:24], [], 24
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        records.append((data[off:off + 16], bytearray(data[off + 16:off + 16 + incl])))
        off += 16 + incl
    return header, records


def auto_mbuf_size(max_frame_len):
    """--mbuf-size auto: DPDK's default 2176-byte data room (128 of headroom) unless the longest
    frame needs more, then 4608."""
    return 2176 if max_frame_len + 128 <= 2176 else 4608


def read_frames(path):
    return [bytes(frame) for _, frame in read_pcap(path)[1]]


def write_pcap(path, header, records):
    with open(path, "wb") as f:
        f.write(header)
        for rec_header, frame in records:
            f.write(rec_header)
            f.write(frame)


def roce_layout(frame):
    """(l3_off, ipv6, bth_off, icrc_off, qp key) of an untagged or VLAN-tagged RoCEv2 frame over
    IPv4 or IPv6, or None. The key is STORM's: (source IP, destination IP, destination QPN)."""
    off = 12
    etype = struct.unpack(">H", frame[off:off + 2])[0]
    while etype in (0x8100, 0x88A8) and off + 6 <= len(frame):
        off += 4
        etype = struct.unpack(">H", frame[off:off + 2])[0]
    l3 = off + 2
    if etype == 0x0800 and len(frame) >= l3 + 20:
        ihl = (frame[l3] & 0x0F) * 4
        if frame[l3 + 9] != 17:
            return None
        l4, end, ipv6 = l3 + ihl, l3 + struct.unpack(">H", frame[l3 + 2:l3 + 4])[0], False
        src, dst = bytes(frame[l3 + 12:l3 + 16]), bytes(frame[l3 + 16:l3 + 20])
    elif etype == 0x86DD and len(frame) >= l3 + 40:
        if frame[l3 + 6] != 17:
            return None
        l4, end, ipv6 = l3 + 40, l3 + 40 + struct.unpack(">H", frame[l3 + 4:l3 + 6])[0], True
        src, dst = bytes(frame[l3 + 8:l3 + 24]), bytes(frame[l3 + 24:l3 + 40])
    else:
        return None
    if end > len(frame) or l4 + 8 + 12 + 4 > end:
        return None
    if struct.unpack(">H", frame[l4 + 2:l4 + 4])[0] != ROCE_PORT:
        return None
    bth = l4 + 8
    qpn = int.from_bytes(frame[bth + 5:bth + 8], "big")
    return l3, ipv6, bth, end - 4, (src, dst, qpn)


def icrc(frame, l3, ipv6, bth, icrc_off):
    """The RoCEv2 ICRC (dataplane/pkt/icrc.cc): CRC-32 over a pseudo-LRH of ones and the frame from
    the IP header on, with the variant fields set to ones."""
    head = bytearray(b"\xff" * 8) + frame[l3:bth + 12]
    ip = 8
    if ipv6:
        head[ip] |= 0x0F
        head[ip + 1:ip + 4] = b"\xff\xff\xff"
        head[ip + 7] = 0xFF
    else:
        head[ip + 1] = 0xFF
        head[ip + 8] = 0xFF
        head[ip + 10:ip + 12] = b"\xff\xff"
    udp = 8 + (bth - 8 - l3)
    head[udp + 6:udp + 8] = b"\xff\xff"
    head[udp + 8 + 4] = 0xFF
    return zlib.crc32(bytes(frame[bth + 12:icrc_off]), zlib.crc32(bytes(head)))


def psn_after(a, b):
    d = (a - b) & PSN_MASK
    return d != 0 and d < (1 << 23)


def replay_duplicates(frames):
    """RoCE frames the STORM tracker would take as duplicates in the second pass of a looped
    replay (its PSN rule per QP key, ignoring opcode classes)."""
    next_psn, dups = {}, 0
    for rnd in range(2):
        for f in frames:
            lay = roce_layout(f)
            if lay is None:
                continue
            key = lay[4]
            psn = int.from_bytes(f[lay[2] + 9:lay[2] + 12], "big")
            if key in next_psn and not psn_after(psn, (next_psn[key] - 1) & PSN_MASK):
                dups += rnd
                continue
            next_psn[key] = (psn + 1) & PSN_MASK
    return dups


def spread_psns(path):
    """Rewrites the trace at `path` in place: the i-th of a QP's n frames gets its PSN advanced by
    floor(i * 4 / n) * 2^22 and a fresh ICRC. Returns the number of QP keys with fewer than four
    frames (left as they are)."""
    header, records = read_pcap(path)
    per_key = {}
    layouts = []
    for _, frame in records:
        lay = roce_layout(frame)
        layouts.append(lay)
        if lay is not None:
            per_key[lay[4]] = per_key.get(lay[4], 0) + 1
    seen, short = {}, sum(1 for n in per_key.values() if n < PSN_QUARTERS)
    for (_, frame), lay in zip(records, layouts):
        if lay is None:
            continue
        l3, ipv6, bth, icrc_off, key = lay
        if struct.unpack("<I", frame[icrc_off:icrc_off + 4])[0] != icrc(frame, l3, ipv6, bth,
                                                                         icrc_off):
            raise SystemExit("%s: a frame's ICRC does not match this harness's ICRC; the PSN "
                             "rewrite would corrupt it (use --raw-psns)" % path)
        n, i = per_key[key], seen.get(key, 0)
        seen[key] = i + 1
        if n < PSN_QUARTERS:
            continue
        psn = int.from_bytes(frame[bth + 9:bth + 12], "big")
        psn = (psn + (i * PSN_QUARTERS // n) * ((PSN_MASK + 1) // PSN_QUARTERS)) & PSN_MASK
        frame[bth + 9:bth + 12] = psn.to_bytes(3, "big")
        frame[icrc_off:icrc_off + 4] = struct.pack("<I", icrc(frame, l3, ipv6, bth, icrc_off))
    write_pcap(path, header, records)
    return short


def describe_trace(frames):
    roce = [f for f in frames if roce_layout(f) is not None]
    keys = {roce_layout(f)[4] for f in roce}
    sizes = sorted(len(f) for f in frames)
    return {"frames": len(frames), "roce_frames": len(roce), "qp_keys": len(keys),
            "min_len": sizes[0], "median_len": sizes[len(sizes) // 2], "max_len": sizes[-1]}


# --- statistics and output ----------------------------------------------------------------------


def steady(samples):
    # Drop the first sample (start-up), take the median of the rest.
    s = samples[1:] if len(samples) > 2 else samples
    return statistics.median(s)


def spread(values):
    return statistics.median(values), min(values), max(values)


def fmt_spread(values, pct=False):
    med, lo, hi = spread(values)
    if pct:
        return "%5.1f %% [%5.1f, %5.1f]" % (100 * med, 100 * lo, 100 * hi)
    return "%5.2f [%4.2f, %4.2f]" % (med, lo, hi)


def check_tagging(name, counters, roce_share):
    """Fails loudly unless storm-tag tagged about as many packets as RoCE frames came in."""
    storm = counters["storm"]
    if storm is None:
        raise SystemExit("%s: heddle_storm_level_packets_total is missing from the metrics: "
                         "storm-tag is not in the pipeline; the STORM comparison is meaningless"
                         % name)
    tagged = sum(storm["level_packets"])
    expected = counters["host_rx"] * roce_share
    if tagged == 0 or tagged < 0.9 * expected:
        raise SystemExit("%s: storm-tag tagged %d packets of %d received on host0 (%.0f RoCE "
                         "expected); the STORM comparison is meaningless" %
                         (name, tagged, counters["host_rx"], expected))
    return tagged / expected if expected else float("nan")


def check_lb(name, counters, roce_share):
    """Fails loudly unless pin-select placed about as many packets as RoCE frames came in; returns
    (share of RoCE rx placed, share of those pinned)."""
    lb = counters["lb"]
    if lb is None:
        raise SystemExit("%s: heddle_lb_packets_total is missing from the metrics: pin-select is "
                         "not in the pipeline; the lb comparison is meaningless" % name)
    placed = sum(lb.values())
    expect = counters["host_rx"] * roce_share
    if placed == 0 or placed < 0.9 * expect:
        raise SystemExit("%s: pin-select placed %d packets of %d received on host0 (%.0f %% RoCE)"
                         % (name, placed, counters["host_rx"], 100 * roce_share))
    return placed / expect, lb.get("pinned", 0) / placed


def busy_neighbours():
    """Other heddled / dpdk-testpmd processes: one polling on the same lcore takes half of it."""
    out = subprocess.run(["ps", "-eo", "pid=,comm="], capture_output=True, text=True).stdout
    me = os.getpid()
    return [line.strip() for line in out.splitlines()
            if line.split()[1:2] in (["heddled"], ["dpdk-testpmd"]) and int(line.split()[0]) != me]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--mix", default="small,1k", help="heddle-pktgen mixes: demo, small, 1k")
    ap.add_argument("--lcores", default="0,1", help="main,worker lcore for every program")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every configuration N times, interleaved, the order rotating")
    ap.add_argument("--mbuf-size", default="auto",
                    help="mbuf data room for every program; auto = DPDK's default 2176 unless the "
                         "trace has frames that need more (then 4608)")
    ap.add_argument("--qps", type=int, default=8,
                    help="RC queue pairs in the trace (heddle-pktgen --qps, 1..4096; the demo mix "
                         "adds UD traffic to 4 more keys)")
    ap.add_argument("--packets", type=int, default=4096,
                    help="frames in the trace; net_pcap holds them all in mbufs of the 16383 pool")
    ap.add_argument("--seed", type=int, default=1, help="heddle-pktgen --seed")
    ap.add_argument("--per-packet", action="store_true",
                    help="also run heddled with storm.mode: per-packet")
    ap.add_argument("--no-storm", action="store_true",
                    help="only testpmd and heddled with storm off (the harness before STORM)")
    ap.add_argument("--lb", action="store_true",
                    help="also run heddled with lb (PIN + REPS, and REPS alone) and report its "
                         "ratio to heddled with lb off")
    ap.add_argument("--raw-psns", action="store_true",
                    help="replay heddle-pktgen's trace unchanged (every pass after the first is a "
                         "PSN duplicate to STORM)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--write-traces", metavar="DIR",
                    help="only write the traces the run would replay to DIR/<mix>.pcap and exit "
                         "(for profiling heddled by hand on the same input)")
    args = ap.parse_args()
    if args.rounds < 1 or args.seconds < 1:
        ap.error("--rounds and --seconds must be at least 1")
    if not args.raw_psns and args.packets < PSN_QUARTERS * args.qps:
        ap.error("--packets %d gives fewer than %d frames per QP for --qps %d: the PSN spread "
                 "needs them; raise --packets or use --raw-psns" %
                 (args.packets, PSN_QUARTERS, args.qps))

    others = busy_neighbours()
    if others:
        print("warning: already running (polling lcores skew every rate measured here): %s" %
              ", ".join(others))
    configs = ["testpmd", "storm-off"]
    if not args.no_storm:
        configs.append("storm-on")
        if args.per_packet:
            configs.append("per-packet")
    if args.lb:
        configs += ["lb-on", "lb-spray"]
    pktgen = os.path.join(args.build, "tools/pktgen/heddle-pktgen")
    tmp = args.write_traces or tempfile.mkdtemp(prefix="heddle-bench-traces-")
    if args.write_traces:
        os.makedirs(tmp, exist_ok=True)
    print("forwarding rate, one worker core: net_pcap(infinite_rx) -> net_null; %ds per run, "
          "%d round(s), order rotating; configs: %s" % (args.seconds, args.rounds,
                                                        ", ".join(configs)))
    results = []
    for mix in args.mix.split(","):
        trace = os.path.join(tmp, "%s.pcap" % mix)
        subprocess.run([pktgen, "--out", trace, "--mix", mix, "--packets", str(args.packets),
                        "--qps", str(args.qps), "--seed", str(args.seed)],
                       check=True, stdout=subprocess.DEVNULL)
        short = 0 if args.raw_psns else spread_psns(trace)
        frames = read_frames(trace)
        info = describe_trace(frames)
        info["replay_duplicates"] = replay_duplicates(frames)
        roce_share = info["roce_frames"] / info["frames"]
        if args.mbuf_size == "auto":
            mbuf = auto_mbuf_size(info["max_len"])
        else:
            mbuf = int(args.mbuf_size)
        print("\nmix %s: %d frames (%d RoCE, %d QP keys), %d-%d B (median %d), mbuf %d; PSNs %s; "
              "%d of %d RoCE frames are duplicates to STORM on each replay" %
              (mix, info["frames"], info["roce_frames"], info["qp_keys"], info["min_len"],
               info["max_len"], info["median_len"], mbuf,
               "as generated" if args.raw_psns else "spread in quarters", info["replay_duplicates"],
               info["roce_frames"]))
        if short:
            print("  note: %d QP keys have fewer than %d frames; their PSNs were left alone" %
                  (short, PSN_QUARTERS))
        sys.stdout.flush()
        if args.write_traces:
            print("  wrote %s" % trace)
            continue

        pps = {c: [] for c in configs}
        tagged_share = {c: [] for c in configs}
        levels = {c: None for c in configs}
        placed = {c: [] for c in configs}
        for r in range(args.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for c in order:
                if c == "testpmd":
                    pps[c].append(steady(run_testpmd(trace, args.seconds, args.lcores, mbuf)))
                    continue
                samples, counters = run_heddled(args.build, trace, args.seconds, args.lcores, mbuf,
                                                HEDDLED_STORM[c],
                                                HEDDLED_LB.get(c, "{ enabled: false }"))
                pps[c].append(steady(samples))
                if c in HEDDLED_LB:
                    placed[c].append(check_lb(c, counters, roce_share))
                    continue
                if counters["lb"] is not None:
                    raise SystemExit("%s: pin-select ran with lb disabled" % c)
                if c == "storm-off":
                    if counters["storm"] is not None and sum(counters["storm"]["level_packets"]):
                        raise SystemExit("storm-off: storm-tag tagged packets with storm disabled")
                    continue
                tagged_share[c].append(check_tagging(c, counters, roce_share))
                levels[c] = counters["storm"]
            print("  round %d: %s" % (r + 1, ", ".join(
                "%s %.2f Mpps" % (c, pps[c][-1] / 1e6) for c in configs)))
            sys.stdout.flush()

        ref = pps["testpmd"]
        res = {"mix": mix, "mbuf": mbuf, "qps": args.qps, "raw_psns": args.raw_psns,
               "trace": info, "rounds": args.rounds, "seconds": args.seconds, "configs": {}}
        print("  %-11s %10s  %-26s" % ("config", "Mpps(med)", "ratio to testpmd med [min, max]"))
        for c in configs:
            ratios = [o / t for o, t in zip(pps[c], ref)]
            print("  %-11s %10.2f  %s" % (c, statistics.median(pps[c]) / 1e6,
                                          fmt_spread(ratios)))
            res["configs"][c] = {"pps": pps[c], "ratio_to_testpmd": ratios}
            if levels[c] is not None:
                res["configs"][c]["storm"] = levels[c]
                res["configs"][c]["tagged_share_of_roce_rx"] = tagged_share[c]
        for c in configs[2:]:
            if c in HEDDLED_LB:
                ratio = [on / off for on, off in zip(pps[c], pps["storm-off"])]
                res["configs"][c]["lb_ratio"] = ratio
                res["configs"][c]["placed_pinned"] = placed[c]
                print("  lb ratio (%s): %s/storm-off = %s  (target >= 0.80); placed %.0f %% of "
                      "RoCE rx, %.0f %% of them pinned" %
                      (c, c, fmt_spread(ratio), 100 * min(x for x, _ in placed[c]),
                       100 * statistics.median(y for _, y in placed[c])))
                continue
            cost = [1 - on / off for on, off in zip(pps[c], pps["storm-off"])]
            res["configs"][c]["storm_cost"] = cost
            lv = levels[c]
            print("  STORM cost (%s): 1 - %s/storm-off = %s  (target <= 15 %%); tagged %.0f %% of "
                  "RoCE rx, by level %s, table-full %d" %
                  (c, c, fmt_spread(cost, pct=True), 100 * min(tagged_share[c]),
                   "/".join(str(x) for x in lv["level_packets"]), lv["table_full"]))
        results.append(res)
        sys.stdout.flush()
    if not args.write_traces:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
