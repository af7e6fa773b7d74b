#!/usr/bin/python3
"""Instructions per packet of heddled's worker loop, with STORM or PIN off and on, under callgrind.

Instruction counts do not depend on the load of the machine, so this is the repeatable companion
of fwd_bench.py's rates: the same traces (net_pcap with infinite_rx=1 into net_null with no-rx=1,
one worker), each configuration run for --seconds under valgrind --tool=callgrind, then

  per packet = inclusive Ir of Worker::Run() / calls of pkt::Parse()

(every received frame is parsed once), and the same for each top function of the worker, so the
cost of STORM shows up function by function. The predicted throughput cost is
1 - off / on (the worker is instruction-bound on these virtual ports). With --lb, PIN + REPS
(lb-on) and REPS alone (lb-spray) as fwd_bench.py --lb runs them, with their predicted ratio
off / on to heddled with storm and lb off (the target of docs/pin.md §9.2 is >= 0.8).

  /usr/bin/python3 tools/bench/instr_per_packet.py [--build build] [--mix small,1k]
                                                   [--seconds 30] [--top 12] [--per-packet]
                                                   [--lb] [--no-storm] [--mbuf-size auto|BYTES]

Needs valgrind. A run takes --seconds of valgrind time per configuration and mix (heddled runs
~50x slower under callgrind; 30 s gives some millions of packets).
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import fwd_bench  # noqa: E402  (read_frames, auto_mbuf_size: --mbuf-size auto as fwd_bench.py)

# name -> (storm section, lb section); the lb ones as fwd_bench.py's HEDDLED_LB.
CONFIGS = {
    "storm-off": ("{ enabled: false }", "{ enabled: false }"),
    "storm-on": ("{ enabled: true }", "{ enabled: false }"),
    "per-packet": ("{ enabled: true, mode: per-packet }", "{ enabled: false }"),
    "lb-on": ("{ enabled: false }", "{ enabled: true, balancer: reps, pin: { enabled: true } }"),
    "lb-spray": ("{ enabled: false }",
                 "{ enabled: true, balancer: reps, pin: { enabled: false } }"),
}

IR_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$")


def yaml_for(trace, sock, storm, lb, mbuf):
    return f"""lcores: {{ main: 0, workers: [1] }}
memory: {{ no_huge: true, size_mb: 1024 }}
mempool: {{ mbufs: 16383, cache: 256, data_room: {mbuf} }}
ports:
  - {{ name: host0, role: host, vdev: "net_pcap0,rx_pcap={trace},infinite_rx=1" }}
  - {{ name: uplink0, role: uplink, vdev: "net_null0,no-rx=1" }}
storm: {storm}
lb: {lb}
metrics: {{ enabled: false }}
control: {{ socket: {sock} }}
"""


def annotate(args):
    return subprocess.run(["callgrind_annotate"] + args, capture_output=True, text=True,
                          check=True).stdout


def measure(build, trace, sections, seconds, tmp, name, mbuf):
    cfg = os.path.join(tmp, f"{name}.yaml")
    out = os.path.join(tmp, f"{name}.cg")
    with open(cfg, "w") as f:
        f.write(yaml_for(trace, os.path.join(tmp, f"{name}.sock"), *sections, mbuf))
    heddled = os.path.join(build, "tools/heddled/heddled")
    log = open(os.path.join(tmp, f"{name}.log"), "w")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                          heddled, "-c", cfg], stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(seconds)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if not os.path.exists(out):
        sys.exit(f"{name}: callgrind wrote nothing; see {log.name}")
    calling = annotate(["--tree=calling", "--inclusive=yes", out])
    m = re.search(r"=> .*heddle::pkt::Parse\(.*\) \(([\d,]+)x\)", calling)
    if not m:
        sys.exit(f"{name}: no pkt::Parse calls recorded; see {log.name}")
    packets = int(m.group(1).replace(",", ""))
    run_ir = None
    for line in annotate(["--inclusive=yes", out]).splitlines():
        lm = IR_LINE.match(line)
        if lm and "heddle::pipeline::Worker::Run()" in lm.group(2):
            run_ir = int(lm.group(1).replace(",", ""))
            break
    if run_ir is None:
        sys.exit(f"{name}: Worker::Run() not found in the profile")
    # Self cost per function, folded over the source files callgrind splits inlined code into.
    per_fn = {}
    for line in annotate(["--auto=no", "--threshold=100", out]).splitlines():
        lm = IR_LINE.match(line)
        if not lm or "PROGRAM TOTALS" in lm.group(2):
            continue
        name, _, obj = lm.group(2).partition(" [")
        fn = re.sub(r"\(.*", "", re.sub(r"^.*?:", "", name, count=1))
        if fn.startswith("0x"):  # no symbol: name the library
            fn = f"{os.path.basename(obj.rstrip(']'))} {fn}"
        per_fn[fn] = per_fn.get(fn, 0) + int(lm.group(1).replace(",", ""))
    return packets, run_ir / packets, {k: v / packets for k, v in per_fn.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--mix", default="small,1k")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--top", type=int, default=12, help="functions listed per configuration")
    ap.add_argument("--per-packet", action="store_true", help="also storm.mode: per-packet")
    ap.add_argument("--lb", action="store_true", help="also PIN + REPS and REPS alone")
    ap.add_argument("--no-storm", action="store_true", help="skip the STORM configurations")
    ap.add_argument("--mbuf-size", default="auto",
                    help="mbuf data room: auto = 2176 unless the mix has frames that need more "
                         "(demo: 4608), as fwd_bench.py picks it")
    args = ap.parse_args()
    if subprocess.run(["which", "valgrind"], capture_output=True).returncode != 0:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    tmp = tempfile.mkdtemp(prefix="heddle-instr-")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools/bench/fwd_bench.py"), "--build",
                    args.build, "--mix", args.mix, "--write-traces", tmp], check=True,
                   stdout=subprocess.DEVNULL)
    names = ["storm-off"]
    if not args.no_storm:
        names += ["storm-on"] + (["per-packet"] if args.per_packet else [])
    if args.lb:
        names += ["lb-on", "lb-spray"]
    for mix in args.mix.split(","):
        trace = os.path.join(tmp, f"{mix}.pcap")
        if args.mbuf_size == "auto":
            mbuf = fwd_bench.auto_mbuf_size(max(len(f) for f in fwd_bench.read_frames(trace)))
        else:
            mbuf = int(args.mbuf_size)
        print(f"mix {mix}: {args.seconds:g} s under callgrind per configuration, mbuf {mbuf}")
        results = {n: measure(args.build, trace, CONFIGS[n], args.seconds, tmp, f"{mix}-{n}", mbuf)
                   for n in names}
        off = results["storm-off"][1]
        for n in names:
            packets, per_packet, per_fn = results[n]
            cost = ""
            if n.startswith("lb-"):
                cost = f", predicted lb ratio {off / per_packet:.2f}"
            elif n != "storm-off":
                cost = f", predicted STORM cost {1 - off / per_packet:.0%}"
            print(f"  {n:<11} {per_packet:7.0f} instructions/packet over {packets:,} packets{cost}")
            for fn, v in sorted(per_fn.items(), key=lambda kv: -kv[1])[:args.top]:
                print(f"      {v:7.1f}  {fn[:100]}")
    print(f"callgrind files in {tmp}")


if __name__ == "__main__":
    main()
