#!/usr/bin/python3
"""What one emulated WAN link delivers on this machine, as a ratio of its configured rate.

Brings up a two-region WAN (tools/wan/wan_emulate.py) per (rate, RTT) case and measures, at the
receiver, the throughput of N parallel TCP streams (tools/wan/wan_probe.py) sent for --seconds:
  - "relay": through heddle-wan-delay (the emulated link: tbf rate cap + one-way delays), the path
    the relay's WAN tests use;
  - "tc only": to the region's own address (tbf rate cap, no delay relay), once per rate, as the
    reference that shows what the user-space delay costs.
A benchmark that uses the emulator must compute its bandwidth x latency bound from the "relay" Gb/s
measured in the same run, not from the configured rate.

  sudo /usr/bin/python3 tools/bench/wan_link_bench.py [--relay PATH] [--rates 1gbit,10gbit]
      [--rtts 40ms,140ms] [--streams 1,4,8] [--seconds 3] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WAN_DIR = os.path.join(HERE, "..", "wan")
sys.path.insert(0, WAN_DIR)
import wan_emulate  # noqa: E402

PROBE = os.path.join(WAN_DIR, "wan_probe.py")
PORT = 7100


def send(wan, to, streams, seconds):
    p = wan.exec("a", [sys.executable, PROBE, "send", "--to", to, "--seconds", str(seconds),
                       "--streams", str(streams)], capture_output=True, text=True,
                 timeout=seconds * 10 + 120)
    if p.returncode != 0:
        raise RuntimeError(f"send to {to}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def rtt(wan, to):
    p = wan.exec("a", [sys.executable, PROBE, "rtt", "--to", to, "--count", "5"],
                 capture_output=True, text=True, timeout=60)
    return min(json.loads(p.stdout)["rtt_s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--relay", help="heddle-wan-delay binary")
    ap.add_argument("--rates", default="1gbit,10gbit")
    ap.add_argument("--rtts", default="40ms,140ms")
    ap.add_argument("--streams", default="1,4,8")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    if os.geteuid() != 0 or not wan_emulate.netns_available():
        sys.exit("wan_link_bench: needs root and network namespaces")
    rates = args.rates.split(",")
    rtts = args.rtts.split(",")
    streams = [int(s) for s in args.streams.split(",")]
    rows = []
    print(f"{'path':8} {'rate':>7} {'rtt':>6} {'rtt got':>8} {'streams':>7} {'Gb/s':>7} "
          f"{'ratio':>6}   ({args.seconds:g} s per row, measured at the receiver, "
          f"{os.cpu_count()} cores)")
    for rate in rates:
        for i, rtt_text in enumerate(rtts):
            spec = {"regions": ["a", "b"],
                    "links": [{"between": ["a", "b"], "rate": rate, "rtt": rtt_text}]}
            with wan_emulate.Wan(spec, ports=[PORT], relay=args.relay) as wan:
                server = wan.run("b", [sys.executable, PROBE, "serve", "--port", str(PORT)],
                                 stdout=subprocess.PIPE, text=True)
                if server.stdout.readline().strip() != "ready":
                    raise RuntimeError("probe server did not start")
                cap = wan.rate("a", "b")
                paths = [("relay", wan.peer_address("a", "b", PORT))]
                if i == 0:
                    paths.insert(0, ("tc only", f"{wan.address('b')}:{PORT}"))
                for path, to in paths:
                    got_rtt = rtt(wan, to)
                    for n in streams:
                        r = send(wan, to, n, args.seconds)
                        row = {"path": path, "rate_bps": cap, "rtt_s": wan.rtt("a", "b"),
                               "rtt_measured_s": got_rtt, "streams": n, "bps": r["bps"],
                               "ratio": r["bps"] / cap}
                        rows.append(row)
                        shown_rtt = "-" if path == "tc only" else rtt_text
                        print(f"{path:8} {rate:>7} {shown_rtt:>6} {got_rtt * 1e3:6.1f}ms "
                              f"{n:7d} {r['bps'] / 1e9:7.3f} {row['ratio']:6.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
