#!/usr/bin/env python3
"""Calibration of heddle-sim against a published setup (docs/sim.md §7), one command:

    tools/heddle-sim/experiments/calibrate/run.py --build build --out /tmp/calibrate

128 hosts on a 2-tier leaf-spine (16 ToRs x 8 hosts, 8 spines), 400 Gb/s links with 1 us latency,
4 KiB MTU, 100-packet queues with ECN marking ramping from 25 to 76 packets, a window-based
transport with out-of-order arrival free (selective repeat, a window that ECN shrinks), WebSearch
at 50 % load for 5 ms. Reports short-flow (<= 1 BDP) and long-flow mean and p99 slowdown for ECMP
and random packet spraying; then the settings where PIN's gain should show: an in-order transport
(go-back-N), and a degraded spine link.

Writes one directory per run (heddle-sim's CSV files) and results.csv; prints the table.
"""
import argparse
import csv
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FABRIC = os.path.join(HERE, "leaf-spine-128.yaml")

BASE = [
    "--fabric", FABRIC, "--workload", "websearch", "--load", "0.5", "--mtu", "4096",
    "--latency-ns", "1000", "--buffer-pkts", "100", "--ecn-kmin-pkts", "25",
    "--ecn-kmax-pkts", "76", "--cc", "ecn-window",
]

BURSTS = ["--incast-senders", "16", "--incast-receiver", "0", "--incast-size", "1000000",
          "--incast-period", "200us"]

# (name, extra arguments)
RUNS = [
    ("published/ecmp", ["--transport", "sr", "--lb", "ecmp", "--pin", "off"]),
    ("published/rps", ["--transport", "sr", "--lb", "rps", "--pin", "off"]),
    ("published/rps+pin", ["--transport", "sr", "--lb", "rps", "--pin", "on"]),
    ("gbn/ecmp", ["--transport", "gbn", "--lb", "ecmp", "--pin", "off"]),
    ("gbn/rps", ["--transport", "gbn", "--lb", "rps", "--pin", "off"]),
    ("gbn/rps+pin", ["--transport", "gbn", "--lb", "rps", "--pin", "on"]),
    # One leaf's link to spine 0 at a quarter of its speed, both directions.
    ("degraded/ecmp", ["--transport", "sr", "--lb", "ecmp", "--pin", "off",
                       "--degraded-link", "leaf[0]:0:100"]),
    ("degraded/rps", ["--transport", "sr", "--lb", "rps", "--pin", "off",
                      "--degraded-link", "leaf[0]:0:100"]),
    ("degraded/rps+pin", ["--transport", "sr", "--lb", "rps", "--pin", "on",
                          "--degraded-link", "leaf[0]:0:100"]),
    # Background bursts: every 200 us, 16 hosts send 1 MB each to host 0 (incast), so the paths
    # into leaf 0 differ from one moment to the next.
    ("bursts/ecmp", ["--transport", "sr", "--lb", "ecmp", "--pin", "off", *BURSTS]),
    ("bursts/rps", ["--transport", "sr", "--lb", "rps", "--pin", "off", *BURSTS]),
    ("bursts/rps+pin", ["--transport", "sr", "--lb", "rps", "--pin", "on", *BURSTS]),
]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="the CMake build directory")
    ap.add_argument("--out", default="/tmp/heddle-sim-calibrate", help="output directory")
    ap.add_argument("--duration", default="5ms")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--only", default="", help="comma-separated run names (default: all)")
    args = ap.parse_args()
    binary = os.path.join(args.build, "tools", "heddle-sim", "heddle-sim")
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary} not found; build it: ninja -C {args.build} heddle-sim")
    only = set(filter(None, args.only.split(",")))
    rows = []
    for name, extra in RUNS:
        if only and name not in only:
            continue
        out = os.path.join(args.out, name.replace("/", "_"))
        cmd = [binary, *BASE, "--duration", args.duration, "--seed", args.seed, "--quiet",
               "--out", out, *extra]
        t0 = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{name}: {' '.join(cmd)}\n{done.stderr}")
        buckets = {r["bucket"]: r for r in read_csv(os.path.join(out, "summary.csv"))}
        run = read_csv(os.path.join(out, "run.csv"))[0]
        row = {
            "run": name,
            "short_flows": buckets["short"]["flows"],
            "short_mean": float(buckets["short"]["mean"]),
            "short_p99": float(buckets["short"]["p99"]),
            "long_flows": buckets["long"]["flows"],
            "long_mean": float(buckets["long"]["mean"]),
            "long_p99": float(buckets["long"]["p99"]),
            "drop_share": int(run["drops_buffer"]) / max(1, int(run["data_sent"])),
            "retransmissions": int(run["retransmissions"]),
            "out_of_order": int(run["out_of_order"]),
            "finished": f'{run["finished"]}/{run["flows"]}',
            "cpu_s": float(run["cpu_s"]),
            "events_per_s": float(run["events_per_s"]),
        }
        rows.append(row)
        print(f"{name:18} short mean {row['short_mean']:7.3f} p99 {row['short_p99']:8.3f}  "
              f"long mean {row['long_mean']:7.3f} p99 {row['long_p99']:8.3f}  "
              f"drops {100 * row['drop_share']:5.2f} %  retx {row['retransmissions']:8}  "
              f"ooo {row['out_of_order']:8}  {row['finished']}  "
              f"{row['cpu_s']:.1f} s CPU, {row['events_per_s'] / 1e6:.1f} M ev/s "
              f"({time.time() - t0:.0f} s wall)", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"results: {os.path.join(args.out, 'results.csv')}")


if __name__ == "__main__":
    main()
