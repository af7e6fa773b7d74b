"""One frame of the demo's live summary: per-port and per-RoCE-class packets and rates, drops,
worker load and the metrics URL, read from heddled through `heddlectl -j`. Rates come from the
previous frame, kept in a small state file."""

import argparse
import json
import os
import subprocess
import sys
import time


def ctl(args, *cmd):
    out = subprocess.run([args.heddlectl, "-s", args.socket, "-j"] + list(cmd),
                         capture_output=True, text=True, timeout=10)
    if out.returncode != 0:
        raise SystemExit(out.stderr.strip())
    return json.loads(out.stdout)


def human(n):
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return "%.1f%s" % (n, unit) if unit else "%d" % n
        n /= 1000.0
    return "%.1fP" % n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heddlectl", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--clear", action="store_true")
    ap.add_argument("--state", required=True, help="file keeping the previous frame's counters")
    args = ap.parse_args()

    status = ctl(args, "show", "status")
    stats = ctl(args, "show", "stats")
    drops = ctl(args, "show", "drops")
    now = time.time()
    state_path = args.state
    prev = {}
    try:
        with open(state_path) as f:
            prev = json.load(f)
        if prev.get("pid") != status["pid"]:
            prev = {}
    except (OSError, ValueError):
        pass
    dt = now - prev.get("t", now) or 1.0

    cur = {"t": now, "pid": status["pid"]}
    lines = []
    lines.append("heddled %s  pid %s  up %ss  metrics: %s" % (
        status["version"], status["pid"], status.get("uptimeSeconds", 0),
        status.get("metricsUrl") or "off"))
    lines.append("")
    lines.append("%-10s %-7s %-10s %5s %12s %10s %12s %10s" % (
        "port", "role", "driver", "link", "rx pkts", "rx pps", "tx pkts", "tx pps"))
    ports = {p["name"]: p for p in status["ports"]}
    for p in stats["ports"]:
        name = p["name"]
        rx, tx = int(p["rxPackets"]), int(p["txPackets"])
        cur[name + ".rx"], cur[name + ".tx"] = rx, tx
        rrate = (rx - prev.get(name + ".rx", rx)) / dt
        trate = (tx - prev.get(name + ".tx", tx)) / dt
        info = ports.get(name, {})
        lines.append("%-10s %-7s %-10s %5s %12s %10s %12s %10s" % (
            name, info.get("role", "?"), info.get("driver", "?"),
            "up" if info.get("linkUp") else "down", human(rx), human(rrate), human(tx),
            human(trate)))
    lines.append("")
    lines.append("RoCEv2 packets received, by opcode class:")
    classes = sorted({c["className"] for p in stats["ports"] for c in p.get("roceByClass", [])})
    lines.append("  %-14s" % "class" + "".join("%22s" % p["name"] for p in stats["ports"]))
    for cls in classes:
        row = "  %-14s" % cls
        for p in stats["ports"]:
            n = next((int(c["packets"]) for c in p.get("roceByClass", [])
                      if c["className"] == cls), 0)
            key = "%s.%s" % (p["name"], cls)
            cur[key] = n
            row += "%22s" % ("%s (%s/s)" % (human(n), human((n - prev.get(key, n)) / dt)))
        lines.append(row)
    lines.append("")
    for l in stats.get("lcores", []):
        if l.get("role") == "worker":
            lines.append("worker lcore %s: %.1f%% busy polls" % (l.get("lcoreId", 0),
                                                             l.get("busyPercent", 0.0)))
    nonzero = [d for d in drops.get("drops", []) if int(d.get("packets", 0))]
    lines.append("drops: " + (", ".join("%s=%s" % (d["reason"], d["packets"]) for d in nonzero)
                              if nonzero else "none"))
    lines.append("")
    lines.append("Ctrl-C stops heddled cleanly.  heddlectl -s %s show stats|ports|drops|config"
                 % args.socket)
    with open(state_path, "w") as f:
        json.dump(cur, f)
    if args.clear:
        sys.stdout.write("\033[H\033[2J")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
