#!/usr/bin/python3
"""PIN over ECMP, RPS, REPS and flowlet switching (docs/pin.md), one command:

    tools/heddle-sim/experiments/pin/run.py --build build --out /tmp/heddle-sim-pin

On the 128-host leaf-spine of the calibration (16 ToRs x 8 hosts, 8 spines) and a k=8 fat tree
(128 hosts, fat-tree-k8.yaml), both at 400 Gb/s, WebSearch at 30, 50 and 80 % load, with the
calibrated model (calibrate/README.md: a QP per message, the DCTCP-like window, 4 KiB MTU,
100-packet queues, ECN 25..76 packets). Each balancer with PIN off and on, over go-back-N on a
lossless fabric (PFC; in order: reordering costs a go-back) and selective repeat with trimming
(reordering is free). Several seeds; the figures show the mean over seeds and the min-max
spread.

Durations are scaled so the whole script runs in a few minutes on one core: --duration of
arrivals per run (default 0.5 ms: about 950 flows at 50 % load), every run to completion.
Writes a directory per run, results.csv and PNGs; one simulation at a time, at nice 19.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import plot  # noqa: E402
import simrun  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FABRICS = {
    "leaf-spine 128": simrun.CALIBRATION_FABRIC,
    "fat-tree k=8": os.path.join(HERE, "fat-tree-k8.yaml"),
}
BALANCERS = ["ecmp", "rps", "reps", "flowlet"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="the CMake build directory")
    ap.add_argument("--reuse", action="store_true",
                    help="read back runs whose directory holds the same arguments' output")
    ap.add_argument("--out", default="/tmp/heddle-sim-pin", help="output directory")
    ap.add_argument("--duration", default="500us", help="arrivals per run")
    ap.add_argument("--loads", default="0.3,0.5,0.8")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--transports", default="gbn,sr")
    ap.add_argument("--fabrics", default=",".join(FABRICS), help="comma-separated names")
    args = ap.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    seeds = args.seeds.split(",")
    rows = []
    t_start = time.time()
    for transport in args.transports.split(","):
        for fabric in args.fabrics.split(","):
            if fabric not in FABRICS:
                sys.exit(f"--fabrics: unknown {fabric!r}; give some of {', '.join(FABRICS)}")
            for load in loads:
                for seed in seeds:
                    for lb in BALANCERS:
                        for pin in ("off", "on"):
                            scheme = f"{lb.upper()}{'+PIN' if pin == 'on' else ''}"
                            tag = f"{transport}_{fabric.split()[0]}_{load}_{seed}_{lb}_{pin}"
                            row = simrun.run(args.build, [
                                "--fabric", FABRICS[fabric], "--workload", "websearch",
                                "--load", str(load), "--duration", args.duration,
                                "--seed", seed, "--lb", lb, "--pin", pin,
                                *simrun.model(transport), "--qp-per-message", "on",
                            ], os.path.join(args.out, tag), reuse=args.reuse)
                            row = {"transport": transport, "fabric": fabric, "load": load,
                                   "seed": seed, "scheme": scheme, **row}
                            rows.append(row)
                            print(f"{transport:3} {fabric:15} load {load:.1f} seed {seed} "
                                  f"{scheme:12} short mean {row['short_mean']:6.2f} p99 "
                                  f"{row['short_p99']:7.2f}  long mean {row['long_mean']:6.2f} "
                                  f"p99 {row['long_p99']:7.2f}  ooo {row['out_of_order']:7} "
                                  f"retx {100 * row['retx_share']:5.2f} %  Jain "
                                  f"{row['jain_tier1']:.4f}  {row['cpu_s']:.1f} s CPU",
                                  flush=True)
    simrun.write_rows(os.path.join(args.out, "results.csv"), rows)
    print(f"{len(rows)} runs in {time.time() - t_start:.0f} s")

    for transport in dict.fromkeys(r["transport"] for r in rows):
        sub = [r for r in rows if r["transport"] == transport]
        name = {"gbn": "go-back-N", "sr": "selective repeat"}[transport]
        for stat in ("short_mean", "short_p99", "long_mean", "long_p99"):
            plot.lines(sub, "load", stat, "scheme",
                       os.path.join(args.out, f"pin_{transport}_{stat}.png"),
                       title=f"PIN, {name}: {stat.replace('_', ' ')} FCT slowdown (WebSearch)",
                       ylabel="FCT slowdown", panels="fabric")
        plot.lines(sub, "load", "jain_tier1", "scheme",
                   os.path.join(args.out, f"pin_{transport}_jain.png"),
                   title=f"PIN, {name}: Jain's index over the ToR uplinks", ylabel="Jain",
                   panels="fabric", logy=False)
        # The size buckets and queues of one setting: the first fabric at the middle load.
        mid = loads[len(loads) // 2]
        one = {r["scheme"]: r["dir"] for r in sub
               if r["load"] == mid and r["seed"] == seeds[0] and r["fabric"] == sub[0]["fabric"]}
        plot.slowdown_buckets(one, os.path.join(args.out, f"pin_{transport}_buckets.png"),
                              f"{sub[0]['fabric']}, WebSearch {int(mid * 100)} %, {name}")
        plot.queue_occupancy(one, os.path.join(args.out, f"pin_{transport}_queues.png"),
                             f"{sub[0]['fabric']}, WebSearch {int(mid * 100)} %, {name}")
    print(f"results: {os.path.join(args.out, 'results.csv')} and PNGs in {args.out}")


if __name__ == "__main__":
    main()
