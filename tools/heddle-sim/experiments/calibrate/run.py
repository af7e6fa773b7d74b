#!/usr/bin/python3
"""Calibration of heddle-sim against a published setup (README.md here), one command:

    tools/heddle-sim/experiments/calibrate/run.py --build build --out /tmp/heddle-sim-calibrate

128 hosts on a 2-tier leaf-spine (16 ToRs x 8 hosts, 8 spines), 400 Gb/s links with 1 us latency,
4 KiB MTU, 100-packet queues with ECN marking ramping from 25 to 76 packets, a window-based
transport with out-of-order arrival free (selective repeat, the DCTCP-like window), WebSearch at
50 % load for 5 ms. First the steps from heddle-sim's RDMA defaults to that setup (a connection
per flow, trimming), then short-flow (<= 1 BDP) and long-flow mean and p99 slowdown for ECMP,
random spraying and spraying with PIN, in the published setting and where PIN's gain should
show: go-back-N, a degraded spine link, background bursts.

Writes one directory per run (heddle-sim's CSV files), results.csv and PNGs; prints the table.
Runs one simulation at a time, at nice 19.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import plot  # noqa: E402
import simrun  # noqa: E402

BASE = [
    "--fabric", simrun.CALIBRATION_FABRIC, "--workload", "websearch", "--load", "0.5",
    "--mtu", "4096", "--latency-ns", "1000", "--buffer-pkts", "100", "--ecn-kmin-pkts", "25",
    "--ecn-kmax-pkts", "76", "--cc", "ecn-window",
]
# The modelling choices that make the published transport (README.md): every flow its own
# connection, and switches that trim instead of dropping.
MODEL = ["--qp-per-message", "on", "--trim", "on"]
# Every 200 us, 16 hosts on other leaves send 250 KB each to host 0 at once: 160 Gb/s on average
# on top of host 0's Poisson share, in bursts that fill the paths into leaf 0 for about 10 us.
BURSTS = ["--incast-senders", "16", "--incast-receiver", "0", "--incast-size", "250000",
          "--incast-period", "200us"]
DEGRADED = ["--degraded-link", "leaf[0]:0:100"]
SCHEMES = {
    "ECMP": ["--lb", "ecmp", "--pin", "off"],
    "RPS": ["--lb", "rps", "--pin", "off"],
    "RPS+PIN": ["--lb", "rps", "--pin", "on"],
}

# (scenario, scheme, extra arguments). "steps": RPS from heddle-sim's RDMA defaults (flows
# between two hosts share their QP, full buffers drop) with one of the two changes at a time;
# both together are published/RPS.
RUNS = [
    ("steps", "RDMA defaults", ["--transport", "sr", *SCHEMES["RPS"]]),
    ("steps", "QP per message alone", ["--transport", "sr", "--qp-per-message", "on",
                                       *SCHEMES["RPS"]]),
    ("steps", "trimming alone", ["--transport", "sr", "--trim", "on", *SCHEMES["RPS"]]),
]
# The in-order transport is RoCE's go-back-N as it is deployed, on a lossless fabric (PFC, no
# trimming): every trim or drop would cost it a window (README.md).
GBN = ["--qp-per-message", "on", "--transport", "gbn", "--pfc", "on"]
for scenario, extra in [("published", [*MODEL, "--transport", "sr"]),
                        ("go-back-N", GBN),
                        ("degraded", [*MODEL, "--transport", "sr", *DEGRADED]),
                        ("degraded go-back-N", [*GBN, *DEGRADED]),
                        ("bursts", [*MODEL, "--transport", "sr", *BURSTS]),
                        ("bursts go-back-N", [*GBN, *BURSTS])]:
    for scheme, args in SCHEMES.items():
        RUNS.append((scenario, scheme, [*extra, *args]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="the CMake build directory")
    ap.add_argument("--reuse", action="store_true",
                    help="read back runs whose directory holds the same arguments' output")
    ap.add_argument("--out", default="/tmp/heddle-sim-calibrate", help="output directory")
    ap.add_argument("--duration", default="5ms")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--only", default="", help="comma-separated scenarios (default: all)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    rows = []
    for scenario, scheme, extra in RUNS:
        if only and scenario not in only:
            continue
        name = f"{scenario}/{scheme}"
        out = os.path.join(args.out, name.replace(" ", "_").replace("/", "__").replace("+", "p"))
        t0 = time.time()
        row = simrun.run(args.build, [*BASE, "--duration", args.duration, "--seed", args.seed,
                                      *extra], out, reuse=args.reuse)
        row = {"scenario": scenario, "scheme": scheme, **row}
        rows.append(row)
        print(f"{name:32} short mean {row['short_mean']:7.3f} p99 {row['short_p99']:8.3f}  "
              f"long mean {row['long_mean']:7.3f} p99 {row['long_p99']:8.3f}  "
              f"drops {100 * row['drop_share']:5.2f} % trims {100 * row['trim_share']:5.2f} % "
              f"retx {100 * row['retx_share']:5.2f} % RTOs {row['timeouts']:6}  "
              f"{row['finished']}/{row['flows']}  {row['cpu_s']:.1f} s CPU "
              f"({time.time() - t0:.0f} s wall)", flush=True)
    simrun.write_rows(os.path.join(args.out, "results.csv"), rows)

    # Figures: the four numbers per scenario and scheme, the size buckets of the published
    # setting, and the load, queues of the degraded and burst settings.
    stats = ["short_mean", "short_p99", "long_mean", "long_p99"]
    plot.bar_panels(rows, "scenario", "scheme", stats,
                    os.path.join(args.out, "calibrate.png"),
                    title="128 hosts, WebSearch 50 %, 5 ms: FCT slowdown (short <= 1 BDP)",
                    ylabels=[s.replace("_", " ") for s in stats])

    def dirs(scenario):
        return {r["scheme"]: r["dir"] for r in rows if r["scenario"] == scenario}

    for scenario in ("steps", "published", "go-back-N", "degraded", "bursts"):
        if dirs(scenario):
            tag = scenario.replace(" ", "_").replace("-", "")
            plot.slowdown_buckets(dirs(scenario), os.path.join(args.out, f"buckets_{tag}.png"),
                                  f"WebSearch 50 %, 128 hosts: {scenario}")
    if dirs("degraded"):
        plot.uplink_load(dirs("degraded"), os.path.join(args.out, "uplinks_degraded.png"),
                         "one leaf-spine link at 100 Gb/s: load per uplink")
        plot.queue_occupancy(dirs("degraded"), os.path.join(args.out, "queues_degraded.png"),
                             "one leaf-spine link at 100 Gb/s")
    print(f"results: {os.path.join(args.out, 'results.csv')} and PNGs in {args.out}")


if __name__ == "__main__":
    main()
