"""Running heddle-sim from the experiment scripts: one run at a time, at the lowest CPU priority
(the experiments share machines with other work), its CSV files read back into one row."""
import csv
import os
import subprocess
import sys
import time

EXPERIMENTS = os.path.dirname(os.path.abspath(__file__))
CALIBRATION_FABRIC = os.path.join(EXPERIMENTS, "calibrate", "leaf-spine-128.yaml")

# The calibrated setup (calibrate/README.md): 4 KiB MTU, 1 us links, 100-packet queues, ECN
# 25..76 packets, the DCTCP-like window; selective repeat with trimming, go-back-N on a lossless
# (PFC) fabric. model() adds the transport's loss handling; the caller picks the QP model.
CALIBRATED = [
    "--mtu", "4096", "--latency-ns", "1000", "--buffer-pkts", "100", "--ecn-kmin-pkts", "25",
    "--ecn-kmax-pkts", "76", "--cc", "ecn-window",
]


def model(transport):
    """The calibrated arguments for `transport` ("sr" or "gbn")."""
    loss = ["--trim", "on"] if transport == "sr" else ["--pfc", "on"]
    return [*CALIBRATED, "--transport", transport, *loss]


def binary(build):
    b = os.path.join(build, "tools", "heddle-sim", "heddle-sim")
    if not os.access(b, os.X_OK):
        sys.exit(f"{b} not found; build it: ninja -C {build} heddle-sim")
    return b


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run(build, args, out, nice=True, reuse=False):
    """Runs heddle-sim with `args` into `out`; returns a row: the short/long/all slowdowns, the
    counters of run.csv and the run's times. With `reuse`, a directory that holds the output of
    the same arguments (args.txt) is read back instead (a run is a pure function of them)."""
    cmd = [binary(build), *args, "--quiet", "--out", out]
    stamp = os.path.join(out, "args.txt")
    t0 = time.time()
    reused = False
    if reuse and os.path.isfile(stamp) and os.path.isfile(os.path.join(out, "run.csv")):
        with open(stamp) as f:
            reused = f.read() == "\n".join(args) + "\n"
    if not reused:
        if nice:
            cmd = ["nice", "-n", "19", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)}\n{done.stderr}")
        with open(stamp, "w") as f:
            f.write("\n".join(args) + "\n")
    buckets = {r["bucket"]: r for r in read_csv(os.path.join(out, "summary.csv"))}
    counters = read_csv(os.path.join(out, "run.csv"))[0]
    row = {}
    for b in ("short", "long", "all"):
        for stat in ("mean", "p99"):
            row[f"{b}_{stat}"] = float(buckets[b][stat]) if int(buckets[b]["flows"]) else 0.0
        row[f"{b}_flows"] = int(buckets[b]["flows"])
    sent = max(1, int(counters["data_sent"]))
    row.update({
        "flows": int(counters["flows"]),
        "finished": int(counters["finished"]),
        "drop_share": int(counters["drops_data"]) / sent,
        "trim_share": int(counters["trims"]) / sent,
        "retx_share": int(counters["retransmissions"]) / sent,
        "timeouts": int(counters["timeouts"]),
        "out_of_order": int(counters["out_of_order"]),
        "naks": int(counters["naks"]),
        "retransmissions": int(counters["retransmissions"]),
        "read_reissues": int(counters.get("read_reissues", 0)),
        "fabric_guarded": int(counters.get("fabric_guarded", 0)),
        "response_guarded": int(counters.get("response_guarded", 0)),
        "end_us": int(counters["end_ps"]) / 1e6,
        "cpu_s": float(counters["cpu_s"]),
        "wall_s": 0.0 if reused else time.time() - t0,
        "events_per_s": float(counters["events_per_s"]),
        "dir": out,
    })
    uplinks = read_csv(os.path.join(out, "uplinks.csv"))
    t1 = [int(r["bytes"]) for r in uplinks if r["tier"] == "1"]
    s, s2 = sum(t1), sum(x * x for x in t1)
    row["jain_tier1"] = 1.0 if s2 == 0 else s * s / (len(t1) * s2)
    return row


def fct_stats(out, collective):
    """Short (<= 1 BDP, as summary.csv's short bucket) and long mean and p99 slowdowns of the
    flows of fct.csv that are (collective=True) or are not part of a collective, and when the
    last collective flow was delivered (us; 0 if one did not finish)."""
    hi = int(next(r for r in read_csv(os.path.join(out, "summary.csv"))
                  if r["bucket"] == "short")["hi_bytes"])
    short, long_, done, unfinished = [], [], 0, 0
    for r in read_csv(os.path.join(out, "fct.csv")):
        if (r["collective"] == "1") != collective:
            continue
        if int(r["finish_ps"]) == 0:
            unfinished += 1
            continue
        (short if int(r["size_bytes"]) <= hi else long_).append(float(r["slowdown"]))
        done = max(done, int(r["delivered_ps"]))

    def mean_p99(xs):
        if not xs:
            return 0.0, 0.0
        xs.sort()
        return sum(xs) / len(xs), xs[min(len(xs) - 1, max(0, -(-99 * len(xs) // 100) - 1))]

    (sm, sp), (lm, lp) = mean_p99(short), mean_p99(long_)
    return {"short_mean": sm, "short_p99": sp, "long_mean": lm, "long_p99": lp,
            "short_flows": len(short), "long_flows": len(long_),
            "done_us": 0.0 if unfinished else done / 1e6}


def write_rows(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return path
