#!/usr/bin/python3
"""STORM vs FIFO vs a single level (docs/storm.md), one command:

    tools/heddle-sim/experiments/storm/run.py --build build --out /tmp/heddle-sim-storm

On the 128-host leaf-spine of the calibration (400 Gb/s, 4 KiB MTU, 100-packet queues, ECN
25..76 packets, the DCTCP-like window), ECMP, RDMA's QP model (messages between two hosts share
their QP and go out in order: a QP's backlog is what STORM's backlog boost reads), over
go-back-N on a lossless fabric (PFC) and selective repeat with trimming. Three schemes:

  FIFO          STORM off: every data packet at level 0, ACK/NAK/CNP at the top level.
  single level  --levels 1: one queue per port for everything, control packets included.
  STORM         dataplane/storm's four levels (4 KiB / 64 KiB / 1 MiB cutoffs, backlog boost),
                per message for go-back-N, per packet for selective repeat; on go-back-N with
                the daemon's ordering guards (the fabric guard, the READ response window).
  STORM, no guards  (go-back-N only) the same levels without those guards: what strict
                priority costs an in-order transport when nothing holds a QP's later packets
                back.

Workloads: WebSearch and AliStorage2019 at 60 % load (mixed RDMA traffic), WebSearch at 60 % as
mixes of RDMA operations (70 % WRITE, 30 % READ; and 60 % WRITE, 30 % READ, 10 % SEND; go-back-N
only: READs are modelled on it alone), and the LLM pattern —
a ring all-reduce and an all-to-all over 32 hosts (4 MB per host per round), under WebSearch
at 30 % — where the figure of merit is the collective's completion time. Several seeds; the
figures show the mean and the min-max spread. One simulation at a time, at nice 19.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import plot  # noqa: E402
import simrun  # noqa: E402

SCHEMES = {
    "FIFO": ["--storm", "off"],
    "single level": ["--storm", "off", "--levels", "1"],
    "STORM": ["--storm", "on"],
    "STORM, no guards": ["--storm", "on", "--storm-guard", "off"],
}
# Schemes and workloads run on go-back-N only.
GBN_ONLY = {"STORM, no guards", "R/W mix 60%", "R/W/S mix 60%"}
COLLECTIVE = ["--collective-hosts", "32", "--collective-bytes", "4000000"]
WORKLOADS = {
    "WebSearch 60%": ["--workload", "websearch", "--load", "0.6"],
    "AliStorage 60%": ["--workload", "alistorage", "--load", "0.6"],
    "R/W mix 60%": ["--workload", "websearch", "--load", "0.6", "--ops", "write=0.7,read=0.3"],
    "R/W/S mix 60%": ["--workload", "websearch", "--load", "0.6",
                      "--ops", "write=0.6,read=0.3,send=0.1"],
    "ring all-reduce + WebSearch 30%": ["--workload", "websearch", "--load", "0.3",
                                        "--collective", "ring", "--iterations", "1",
                                        *COLLECTIVE],
    "all-to-all + WebSearch 30%": ["--workload", "websearch", "--load", "0.3",
                                   "--collective", "alltoall", "--iterations", "2",
                                   "--compute-gap", "10us", *COLLECTIVE],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="the CMake build directory")
    ap.add_argument("--reuse", action="store_true",
                    help="read back runs whose directory holds the same arguments' output")
    ap.add_argument("--out", default="/tmp/heddle-sim-storm", help="output directory")
    ap.add_argument("--duration", default="500us", help="Poisson arrivals per run")
    ap.add_argument("--seeds", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--transports", default="gbn,sr")
    ap.add_argument("--workload", action="append",
                    help="a workload to run, by name, e.g. \"R/W/S mix 60%%\"; repeat for more "
                         "(default: all)")
    ap.add_argument("--scheme", action="append",
                    help="a scheme to run, by name, e.g. \"STORM, no guards\"; repeat for more "
                         "(default: all)")
    ap.add_argument("--extra", default="",
                    help="more heddle-sim arguments for every run, space-separated "
                         "(e.g. \"--storm-unknown-size 4096\")")
    args = ap.parse_args()
    workloads = args.workload or list(WORKLOADS)
    schemes = args.scheme or list(SCHEMES)
    for name in workloads:
        if name not in WORKLOADS:
            ap.error(f"--workload: {name!r} is not one of {'; '.join(WORKLOADS)}")
    for name in schemes:
        if name not in SCHEMES:
            ap.error(f"--scheme: {name!r} is not one of {'; '.join(SCHEMES)}")
    seeds = args.seeds.split(",")
    rows = []
    t_start = time.time()
    for transport in args.transports.split(","):
        for wl, wargs in WORKLOADS.items():
            if wl not in workloads:
                continue
            if transport != "gbn" and wl in GBN_ONLY:
                continue
            for seed in seeds:
                for scheme, sargs in SCHEMES.items():
                    if scheme not in schemes:
                        continue
                    if transport != "gbn" and scheme in GBN_ONLY:
                        continue
                    tag = (f"{transport}_{wl.split()[0].replace('/', '')}_"
                           f"{wl.split()[-1].rstrip('%')}_{seed}_"
                           f"{scheme.replace(',', '').replace(' ', '_')}")
                    out = os.path.join(args.out, tag)
                    row = simrun.run(args.build, [
                        "--fabric", simrun.CALIBRATION_FABRIC, "--duration", args.duration,
                        "--seed", seed, "--lb", "ecmp", *simrun.model(transport), *wargs,
                        *sargs, *args.extra.split(),
                    ], out, reuse=args.reuse)
                    # The background traffic alone, and the collective's completion time.
                    bg = simrun.fct_stats(out, collective=False)
                    coll = simrun.fct_stats(out, collective=True) if "--collective" in wargs \
                        else {"done_us": 0.0}
                    row = {"transport": transport, "workload": wl, "seed": seed,
                           "scheme": scheme, **row,
                           **{f"bg_{k}": v for k, v in bg.items() if k != "done_us"},
                           "collective_done_us": coll["done_us"]}
                    rows.append(row)
                    row["reordered"] = row["out_of_order"] + row["read_reissues"]
                    print(f"{transport:3} {wl:32} seed {seed} {scheme:16} short mean "
                          f"{row['bg_short_mean']:6.2f} p99 {row['bg_short_p99']:7.2f}  long "
                          f"mean {row['bg_long_mean']:6.2f} p99 {row['bg_long_p99']:7.2f}  "
                          f"collective {row['collective_done_us']:8.1f} us  resent "
                          f"{row['retx_share']:.4f} reordered {row['reordered']:6d} RTO "
                          f"{row['timeouts']:4d}  "
                          f"{row['cpu_s']:.1f} s CPU", flush=True)
    simrun.write_rows(os.path.join(args.out, "results.csv"), rows)
    print(f"{len(rows)} runs in {time.time() - t_start:.0f} s")

    # Mean and spread over seeds, per (transport, workload, scheme).
    agg = []
    for key in dict.fromkeys((r["transport"], r["workload"], r["scheme"]) for r in rows):
        sub = [r for r in rows if (r["transport"], r["workload"], r["scheme"]) == key]
        a = {"transport": key[0], "workload": key[1], "scheme": key[2], "seeds": len(sub)}
        for stat in ("bg_short_mean", "bg_short_p99", "bg_long_mean", "bg_long_p99",
                     "collective_done_us", "retx_share", "reordered", "timeouts"):
            m, e = plot.mean_spread([r[stat] for r in sub])
            a[stat], a[f"{stat}_spread"] = m, e
        # The collective's completion time over FIFO's with the same seed (the same background
        # and placement): the seeds' backgrounds differ more than the schemes do.
        fifo = {r["seed"]: r["collective_done_us"] for r in rows
                if (r["transport"], r["workload"], r["scheme"]) == (key[0], key[1], "FIFO")}
        ratios = [r["collective_done_us"] / fifo[r["seed"]] for r in sub
                  if fifo.get(r["seed"], 0) > 0 and r["collective_done_us"] > 0]
        m, e = plot.mean_spread(ratios) if ratios else (0.0, 0.0)
        a["collective_vs_fifo"], a["collective_vs_fifo_spread"] = m, e
        agg.append(a)
    simrun.write_rows(os.path.join(args.out, "summary.csv"), agg)
    for transport in dict.fromkeys(a["transport"] for a in agg):
        sub = [a for a in agg if a["transport"] == transport]
        name = {"gbn": "go-back-N (PFC)", "sr": "selective repeat (trimming)"}[transport]
        stats = ["bg_short_mean", "bg_short_p99", "bg_long_mean", "bg_long_p99"]
        plot.bar_panels(sub, "workload", "scheme", stats,
                        os.path.join(args.out, f"storm_{transport}.png"),
                        title=f"STORM, {name}: FCT slowdown of the non-collective flows "
                              "(mean over seeds, min-max)",
                        ylabels=[s[3:].replace("_", " ") for s in stats],
                        errs=[f"{s}_spread" for s in stats])
        coll = [a for a in sub if a["collective_done_us"] > 0]
        if coll:
            plot.grouped_bars(coll, "workload", "scheme", "collective_vs_fifo",
                              os.path.join(args.out, f"storm_{transport}_collective.png"),
                              title=f"STORM, {name}: collective completion time / FIFO's "
                                    "(same seed)",
                              ylabel="ratio to FIFO", logy=False,
                              err="collective_vs_fifo_spread")
        if transport == "gbn":
            plot.bar_panels(sub, "workload", "scheme", ["retx_share", "reordered", "timeouts"],
                            os.path.join(args.out, "storm_gbn_order.png"),
                            title="STORM, go-back-N (PFC): what reordering and timeouts cost "
                                  "(mean over seeds, min-max)",
                            ylabels=["packets resent / sent", "out of order + READs re-issued",
                                     "timeouts"],
                            logy=False,
                            errs=["retx_share_spread", "reordered_spread", "timeouts_spread"])
            for wl, png, what in (("R/W mix 60%", "storm_gbn_rw_buckets.png", "WRITE/READ 70/30"),
                                  ("R/W/S mix 60%", "storm_gbn_mix_buckets.png",
                                   "WRITE/READ/SEND 60/30/10")):
                mix = {r["scheme"]: r["dir"] for r in rows if r["transport"] == transport
                       and r["workload"] == wl and r["seed"] == seeds[0]}
                if mix:
                    plot.slowdown_buckets(mix, os.path.join(args.out, png),
                                          f"WebSearch 60 % as {what}, go-back-N")
        one = {r["scheme"]: r["dir"] for r in rows if r["transport"] == transport
               and r["workload"] == "WebSearch 60%" and r["seed"] == seeds[0]}
        if one:
            plot.level_shares(one, os.path.join(args.out, f"storm_{transport}_levels.png"),
                              f"WebSearch 60 %, {name}: payload per level")
            plot.slowdown_buckets(one, os.path.join(args.out, f"storm_{transport}_buckets.png"),
                                  f"WebSearch 60 %, {name}")
            plot.queue_occupancy(one, os.path.join(args.out, f"storm_{transport}_queues.png"),
                                 f"WebSearch 60 %, {name}")
    print(f"results: {os.path.join(args.out, 'results.csv')}, summary.csv and PNGs in "
          f"{args.out}")


if __name__ == "__main__":
    main()
