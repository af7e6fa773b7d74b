#!/usr/bin/python3
"""GeoMesh sign codec throughput against memcpy of the same bytes, measured in one run.

Runs relay_codec_benchmark (dataplane/relay/codec/codec_benchmark.cc) with repetitions in random
interleaving, so load drift on the shared machine falls on the kernels and on memcpy alike, and
prints per kernel the median GB/s and its ratio to the median memcpy of the same input bytes
(fp32 pack: 4n bytes; bf16/fp16 pack: 2n; accumulate and decode: the 4n-byte fp32 buffer).
Target: pack and accumulate >= 0.5x memcpy.

  /usr/bin/python3 tools/bench/relay_codec_bench.py [--binary PATH] [--repetitions 5]
      [--min-time 0.2] [--filter REGEX] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_bin = os.path.join(here, "..", "..", "build", "dataplane", "relay", "codec",
                               "relay_codec_benchmark")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=default_bin)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--filter", default="",
                    help="benchmark regex (memcpy is always kept for the references)")
    ap.add_argument("--json", help="write the raw benchmark JSON here")
    args = ap.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary}: not built; ninja -C build relay_codec_benchmark")
    flt = f"memcpy|{args.filter}" if args.filter else "."
    cmd = [args.binary, f"--benchmark_filter={flt}",
           f"--benchmark_repetitions={args.repetitions}",
           f"--benchmark_min_time={args.min_time}",
           "--benchmark_enable_random_interleaving=true", "--benchmark_format=json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    data = json.loads(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    rates = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        rates.setdefault(b["run_name"], []).append(b["bytes_per_second"] / 1e9)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"{'kernel':34} {'GB/s':>7} {'memcpy GB/s':>12} {'ratio':>6}  (median of "
          f"{args.repetitions}, random interleaving)")
    def key(name):
        parts = name.split("/")
        return (int(parts[-1]), parts[0], parts[1:-1])

    for name in sorted(rates, key=key):
        parts = name.split("/")
        if parts[0] == "memcpy":
            continue
        n = int(parts[-1])
        per_value = DTYPE_BYTES[parts[2]] if parts[0] in ("pack", "encode_ef") else 4
        ref = med.get(f"memcpy/{n * per_value}")
        if ref is None:
            continue
        ratio = med[name] / ref
        rmin = min(rates[name]) / max(rates[f"memcpy/{n * per_value}"])
        rmax = max(rates[name]) / min(rates[f"memcpy/{n * per_value}"])
        print(f"{name:34} {med[name]:7.2f} {ref:12.2f} {ratio:6.2f}  [{rmin:.2f}, {rmax:.2f}]")


if __name__ == "__main__":
    main()
