#!/usr/bin/python3
"""Plots of heddle-sim runs (docs/sim.md §3): PNGs from the CSV files a run writes with --out.

As a module (the experiment scripts import it):

    import plot
    runs = {"ECMP": "/tmp/x/ecmp", "RPS": "/tmp/x/rps"}      # label -> heddle-sim --out dir
    plot.slowdown_buckets(runs, "/tmp/x/slowdown.png", "WebSearch 50 %")
    plot.uplink_load(runs, "/tmp/x/uplinks.png")
    plot.level_shares(runs, "/tmp/x/levels.png")
    plot.queue_occupancy(runs, "/tmp/x/queues.png")

As a command, the four figures for any runs:

    tools/heddle-sim/experiments/plot.py --out /tmp/figs ecmp=/tmp/x/ecmp rps=/tmp/x/rps

Uses matplotlib (Debian's python3-matplotlib) with the Agg backend: no display needed.
"""
import argparse
import csv
import os
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# summary.csv's buckets; the per-operation ones are there only for a mix of operations.
BUCKETS = ["short", "long", "<=10K", "10K-100K", "100K-1M", "1M-10M", ">10M", "all",
           "write-short", "write-long", "send-short", "send-long", "read-short", "read-long"]
DPI = 80  # small PNGs: they are committed


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def summary(run_dir):
    """summary.csv as {bucket: row} (mean, p50, p99, p999 as floats, flows as int)."""
    out = {}
    for r in read_csv(os.path.join(run_dir, "summary.csv")):
        out[r["bucket"]] = {
            "flows": int(r["flows"]),
            **{k: float(r[k]) for k in ("mean", "p50", "p99", "p999")},
        }
    return out


def run_counters(run_dir):
    return read_csv(os.path.join(run_dir, "run.csv"))[0]


def jain(xs):
    s, s2 = sum(xs), sum(x * x for x in xs)
    return 1.0 if s2 == 0 else s * s / (len(xs) * s2)


def _save(fig, png):
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(png, dpi=DPI)
    plt.close(fig)
    return png


def slowdown_buckets(runs, png, title=""):
    """FCT slowdown by size bucket, mean and p99, one bar per run (log scale)."""
    sums = {label: summary(d) for label, d in runs.items()}
    buckets = [b for b in BUCKETS if any(s.get(b, {}).get("flows", 0) > 0 for s in sums.values())]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=False)
    width = 0.8 / max(1, len(sums))
    for ax, stat in zip(axes, ("mean", "p99")):
        for i, (label, s) in enumerate(sums.items()):
            xs = [j + (i - (len(sums) - 1) / 2) * width for j in range(len(buckets))]
            ys = [s.get(b, {}).get(stat, 0) if s.get(b, {}).get("flows", 0) else 0
                  for b in buckets]
            ax.bar(xs, ys, width, label=label)
        ax.set_xticks(range(len(buckets)))
        ax.set_xticklabels(buckets, rotation=30, fontsize=8)
        ax.set_yscale("log")
        ax.axhline(1, color="grey", lw=0.6)
        ax.set_ylabel(f"FCT slowdown, {stat}")
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, png)


def uplink_load(runs, png, title=""):
    """Bytes per tier-1 (and tier-2) uplink as a share of the tier's mean, and Jain's index."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    data, labels = [], []
    for label, d in runs.items():
        rows = read_csv(os.path.join(d, "uplinks.csv"))
        for tier in sorted({int(r["tier"]) for r in rows}):
            xs = [int(r["bytes"]) for r in rows if int(r["tier"]) == tier]
            mean = sum(xs) / len(xs) if xs else 0
            data.append([x / mean for x in xs] if mean else [0])
            labels.append(f"{label}\ntier {tier}\nJ={jain(xs):.3f}")
    ax.boxplot(data, whis=(0, 100), widths=0.6)
    ax.set_xticks(range(1, len(labels) + 1))
    ax.set_xticklabels(labels, fontsize=7)
    ax.axhline(1, color="grey", lw=0.6)
    ax.set_ylabel("uplink bytes / tier mean")
    ax.set_title(title or "per-uplink load (min-max whiskers) and Jain's index", fontsize=9)
    return _save(fig, png)


def level_shares(runs, png, title=""):
    """Share of data payload bytes sent at each priority level (STORM's levels)."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    labels = list(runs)
    shares = []
    levels = 0
    for d in runs.values():
        rows = read_csv(os.path.join(d, "levels.csv"))
        total = sum(int(r["payload_bytes"]) for r in rows) or 1
        shares.append([int(r["payload_bytes"]) / total for r in rows])
        levels = max(levels, len(rows))
    bottom = [0.0] * len(labels)
    for lv in range(levels):
        ys = [s[lv] if lv < len(s) else 0 for s in shares]
        ax.bar(range(len(labels)), ys, 0.6, bottom=bottom, label=f"level {lv}")
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7, rotation=20)
    ax.set_ylabel("share of payload bytes")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title(title or "priority-level shares (level 3 is the top)", fontsize=9)
    return _save(fig, png)


def port_occupancy(run_dir):
    """Time-averaged queue per switch egress port in packets (Little's law: packets x mean wait
    / simulated time), as {(tier, "up" or "down"): [per port]}."""
    end_ps = float(run_counters(run_dir).get("end_ps", 0) or 0)
    out = {}
    for r in read_csv(os.path.join(run_dir, "queues.csv")):
        q = int(r["packets"]) * float(r["mean_wait_ns"]) * 1e3 / end_ps if end_ps else 0
        out.setdefault((int(r["tier"]), "up" if r["up"] == "1" else "down"), []).append(q)
    return out


def queue_occupancy(runs, png, title=""):
    """CDF over switch egress ports of the time-averaged queue (packets), one panel per tier and
    direction (tier-1 down ports lead to the hosts)."""
    occ = {label: port_occupancy(d) for label, d in runs.items()}
    groups = sorted({g for o in occ.values() for g in o})
    fig, axes = plt.subplots(1, len(groups), figsize=(3.6 * len(groups), 3.4), sharey=True,
                             squeeze=False)
    for ax, g in zip(axes[0], groups):
        for label, o in occ.items():
            xs = sorted(max(x, 1e-3) for x in o.get(g, []))
            if xs:
                ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=label)
        ax.set_xscale("log")
        ax.set_xlabel("time-averaged queue, packets")
        ax.set_title(f"tier-{g[0]} {g[1]} ports", fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("share of ports")
    axes[0][0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, png)


def mean_spread(values):
    """Mean and half the min-max spread of `values` (several seeds)."""
    m = statistics.fmean(values)
    return m, (max(values) - min(values)) / 2 if len(values) > 1 else 0.0


def lines(rows, x, y, series, png, title="", ylabel="", panels=None, logy=True):
    """Line plot of `y` against `x`, one line per value of `series`, one panel per value of
    `panels`; several rows with the same (panel, series, x) (seeds) become mean and min-max
    error bars."""
    panel_keys = sorted({r[panels] for r in rows}) if panels else [None]
    fig, axes = plt.subplots(1, len(panel_keys), figsize=(4.2 * len(panel_keys), 3.6),
                             squeeze=False)
    for ax, pk in zip(axes[0], panel_keys):
        sub = [r for r in rows if pk is None or r[panels] == pk]
        for s in dict.fromkeys(r[series] for r in sub):
            pts = {}
            for r in sub:
                if r[series] == s:
                    pts.setdefault(float(r[x]), []).append(float(r[y]))
            xs = sorted(pts)
            ms = [mean_spread(pts[v]) for v in xs]
            ax.errorbar(xs, [m for m, _ in ms], yerr=[e for _, e in ms], marker="o", ms=3,
                        capsize=2, label=s)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel or y)
        ax.grid(alpha=0.3, which="both")
        if pk is not None:
            ax.set_title(str(pk), fontsize=9)
    axes[0][0].legend(fontsize=6)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, png)


def _bars(ax, rows, group, series, y, err, logy):
    groups = list(dict.fromkeys(r[group] for r in rows))
    ser = list(dict.fromkeys(r[series] for r in rows))
    colours = {s: f"C{i % 10}" for i, s in enumerate(ser)}
    most = max(len({r[series] for r in rows if r[group] == g}) for g in groups)
    width = 0.8 / max(1, most)
    labelled = set()
    for j, g in enumerate(groups):
        here = [r for r in rows if r[group] == g]
        for i, r in enumerate(here):
            s = r[series]
            ax.bar(j + (i - (len(here) - 1) / 2) * width, float(r[y]), width,
                   yerr=float(r[err]) if err else None, capsize=2, color=colours[s],
                   label=None if s in labelled else s)
            labelled.add(s)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=7, rotation=20)
    if logy:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3, which="both")
    return len(groups) * most


def grouped_bars(rows, group, series, y, png, title="", ylabel="", logy=True, err=None):
    """Bars of `y` per `group` (x), one bar per `series` present in that group (a series keeps
    its colour across groups); `err` an optional column of half spreads."""
    return bar_panels(rows, group, series, [y], png, title, [ylabel or y], logy,
                      [err] if err else None)


def bar_panels(rows, group, series, ys, png, title="", ylabels=None, logy=True, errs=None):
    """grouped_bars() for several columns `ys`, one panel each, stacked."""
    fig, axes = plt.subplots(len(ys), 1, figsize=(10, 2.2 + 2.0 * len(ys)), squeeze=False)
    for k, (ax, y) in enumerate(zip(axes[:, 0], ys)):
        _bars(ax, rows, group, series, y, errs[k] if errs else None, logy)
        ax.set_ylabel((ylabels or ys)[k], fontsize=8)
        if k + 1 < len(ys):
            ax.set_xticklabels([])
    axes[0][0].legend(fontsize=7, ncol=3)
    if title:
        axes[0][0].set_title(title, fontsize=9)
    return _save(fig, png)


def all_figures(runs, out_dir, title=""):
    """The four figures of a set of runs into out_dir; returns their paths."""
    return [
        slowdown_buckets(runs, os.path.join(out_dir, "slowdown.png"), title),
        uplink_load(runs, os.path.join(out_dir, "uplinks.png")),
        level_shares(runs, os.path.join(out_dir, "levels.png")),
        queue_occupancy(runs, os.path.join(out_dir, "queues.png"), title),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the PNGs")
    ap.add_argument("--title", default="")
    ap.add_argument("runs", nargs="+", help="LABEL=DIR, a heddle-sim --out directory each")
    args = ap.parse_args()
    runs = {}
    for spec in args.runs:
        label, _, d = spec.partition("=")
        if not d:
            label, d = os.path.basename(os.path.normpath(spec)), spec
        if not os.path.isfile(os.path.join(d, "summary.csv")):
            ap.error(f"{d}: no summary.csv; give heddle-sim --out directories")
        runs[label] = d
    for p in all_figures(runs, args.out, args.title):
        print(p)


if __name__ == "__main__":
    main()
