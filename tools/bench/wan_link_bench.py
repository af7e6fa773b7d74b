#!/usr/bin/python3
"""What one emulated WAN link delivers on this machine, as a ratio of its configured rate.

Brings up a two-region WAN (tools/wan/wan_emulate.py) per (rate, RTT) case and measures, at the
receiver, the throughput of N parallel TCP streams (tools/wan/wan_probe.py) sent for --seconds:
  - "relay": through heddle-wan-delay (the emulated link: tbf rate cap + one-way delays), the path
    the relay's WAN tests use;
  - "direct": to the region's own address (tbf rate cap, no delay relay), once per rate, as the
    reference that shows what the user-space delay costs.
A benchmark that uses the emulator must compute its bandwidth x latency bound from the "relay" Gb/s
measured in the same run (Wan.measure_link does that), not from the configured rate.

  sudo /usr/bin/python3 tools/bench/wan_link_bench.py [--relay PATH] [--rates 1gbit,10gbit]
      [--rtts 40ms,140ms] [--streams 1,4,8] [--seconds 3] [--json FILE]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WAN_DIR = os.path.join(HERE, "..", "wan")
sys.path.insert(0, WAN_DIR)
import wan_emulate  # noqa: E402



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
            with wan_emulate.Wan(spec, relay=args.relay) as wan:
                cap = wan.rate("a", "b")
                paths = ["direct", "relay"] if i == 0 else ["relay"]
                for via in paths:
                    for n in streams:
                        r = wan.measure_link("a", "b", seconds=args.seconds, streams=n, via=via)
                        row = {"path": via, "rate_bps": cap, "rtt_s": wan.rtt("a", "b"),
                               "rtt_measured_s": r["rtt_s"], "streams": n, "bps": r["bps"],
                               "ratio": r["ratio"]}
                        rows.append(row)
                        shown_rtt = "-" if via == "direct" else rtt_text
                        print(f"{via:8} {rate:>7} {shown_rtt:>6} {r['rtt_s'] * 1e3:6.1f}ms "
                              f"{n:7d} {r['bps'] / 1e9:7.3f} {r['ratio']:6.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
