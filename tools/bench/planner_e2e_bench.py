#!/usr/bin/python3
"""Straggler idle, the GeoMesh planner against equal batches and steps, end to end through the relay.

One `heddle-relay serve` on loopback (no WAN, a small one-tensor model) and three synthetic
`heddle-relay worker`s that announce the same profile (--tokens-per-s, --max-batch) but sleep for
their plan's tokens at that rate times --time-scale 4, 2 and 1: their true speeds are 1:2:4 and only the
planner's estimator, fed their reports, can learn it. The same run is made twice, once with
`planner.mode: equal` (every worker the same batch and inner steps, docs/planner.md §6) and once
with `planner.mode: balanced` (the plan). Straggler idle is what the relay measures either way —
per round, Σ over workers of (the last worker's compute time − its own), `heddle-relay status -j`
`idle` — summed over the rounds after the warm-up (the estimator needs a few reports and the
replan policy a few rounds of cooldown). The workers run one round more than counted: a worker
that leaves drops its report of a round still pending, so the last round is not a full one.
Printed: both sums, the idle fraction, the round wall
time, and the ratio equal ÷ balanced (GeoMesh reports 8.0× for a 1:2:4 mix).

  /usr/bin/python3 tools/bench/planner_e2e_bench.py --bin build/tools/heddle-relay/heddle-relay
       [--rounds 40] [--warmup 10] [--target-s 0.4] [--elements 65536] [--per-round]
       [--min-ratio R]    # exit 1 unless equal ÷ balanced > R (the ctest smoke test)

Exit status 0 = done (and the ratio above --min-ratio), 1 = failure.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from relay_e2e import Fail, field, finish_workdir, tail, wait_relay_address  # noqa: E402

SCALES = (4.0, 2.0, 1.0)  # --time-scale of the three workers: true speeds 1:2:4
TOKEN = "b3nch"


class Run:
    """One relay and its three workers in `workdir`; stop() kills whatever is still running."""

    def __init__(self, a, mode, workdir):
        self.a, self.mode, self.dir = a, mode, os.path.join(workdir, mode)
        os.makedirs(self.dir)
        self.procs = []
        self.config = os.path.join(self.dir, "relay.yaml")
        self.port_file = os.path.join(self.dir, "port")
        with open(self.config, "w") as f:
            f.write(f"region: {{id: 1, name: bench}}\n"
                    f"listen: 127.0.0.1:0\n"
                    f"token: {TOKEN}\n"
                    f"model: {{tensors: [{{name: model, elements: {a.elements}}}]}}\n"
                    f"round: {{push_timeout_s: 60, min_workers: {len(SCALES)}}}\n"
                    f"planner: {{mode: {mode}, target_round_s: {a.target_s}, seq_len: {a.seq_len},"
                    f" min_inner_steps: 1, max_inner_steps: 1000}}\n")

    def spawn(self, name, argv):
        out = open(os.path.join(self.dir, f"{name}.out"), "w")
        err = open(os.path.join(self.dir, f"{name}.err"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=err)
        out.close()
        err.close()
        self.procs.append((name, p))
        return p

    def address(self, relay):
        return wait_relay_address(self.port_file, "127.0.0.1", relay, self.dir,
                                  f"{self.mode}: relay")

    def status(self, addr):
        r = subprocess.run([self.a.bin, "status", "--relay", addr, "--token", TOKEN, "-j"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise Fail(f"{self.mode}: status: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def run(self):
        a = self.a
        relay = self.spawn("serve", [a.bin, "serve", "--config", self.config, "--port-file",
                                     self.port_file])
        addr = self.address(relay)
        workers = []
        for k, scale in enumerate(SCALES):
            name = f"w{k}-x{scale:g}"
            workers.append((name, self.spawn(name, [
                a.bin, "worker", "--relay", addr, "--token", TOKEN, "--name", name,
                "--rounds", str(a.rounds + 1), "--model-elements", str(a.elements),
                "--tokens-per-s", str(a.tokens_per_s), "--max-batch", str(a.max_batch),
                "--time-scale", str(scale), "--seed", str(k + 1), "--timeout", "60",
                "--pull-timeout", "120"])))
        # status -j keeps the planner's last 16 rounds: poll often enough to see every one.
        idle, members, started = {}, [], time.time()
        deadline = started + a.timeout_s
        while True:
            done = all(p.poll() is not None for _, p in workers)
            st = self.status(addr)
            mode = field(st, "planner_mode", "")
            if mode != self.mode:
                raise Fail(f"{self.mode}: the relay reports planner mode {mode!r}")
            for row in st.get("idle", []):
                idle[int(field(row, "round"))] = row
            # The plans in force while every worker is a member (a leaving worker's plan is gone).
            ms = st.get("members", [])
            if ms and all(int(field(field(m, "plan", {}) or {}, "batch_size")) > 0 for m in ms):
                members = ms
            if done:
                break
            if time.time() > deadline:
                raise Fail(f"{self.mode}: workers still running after {a.timeout_s} s")
            time.sleep(0.5)
        wall = time.time() - started
        for name, p in workers:
            if p.returncode != 0:
                raise Fail(f"{self.mode}: worker {name} exited {p.returncode}: "
                           f"{tail(self.dir, name + '.out')}"
                           f"{tail(self.dir, name + '.err')}")
        return idle, members, wall

    def stop(self):
        for _, p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def summarize(mode, idle, members, wall, a):
    rounds = sorted(idle)
    if not rounds:
        raise Fail(f"{mode}: the relay reported no completed planner rounds")
    first = rounds[0]
    counted = [r for r in rounds if first + a.warmup <= r < first + a.rounds]
    expected = a.rounds - a.warmup
    if len(counted) < expected:
        missing = sorted(set(range(first + a.warmup, first + a.rounds)) - set(counted))
        raise Fail(f"{mode}: {len(counted)} of {expected} rounds after the warm-up have an idle "
                   f"row (missing {missing[:10]})")
    rows = [idle[r] for r in counted]
    idle_s = sum(float(field(x, "idle_s")) for x in rows)
    end_s = sum(float(field(x, "compute_end_s")) for x in rows)
    plans = []
    for m in sorted(members, key=lambda m: field(m, "name", "")):
        p = field(m, "plan", {}) or {}
        plans.append(f"{field(m, 'name', '?')} b={field(p, 'batch_size')} "
                     f"H={field(p, 'inner_steps')}")
    return {"mode": mode, "rounds": len(counted), "idle_s": idle_s, "compute_end_s": end_s,
            "idle_fraction": idle_s / (len(SCALES) * end_s) if end_s > 0 else 0,
            "round_s": statistics.median(float(field(x, "compute_end_s")) for x in rows),
            "wall_s": wall, "plans": plans, "idle": idle}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="heddle-relay")
    ap.add_argument("--rounds", type=int, default=40,
                    help="rounds per mode, warm-up included (the workers run one more)")
    ap.add_argument("--warmup", type=int, default=10,
                    help="first rounds left out of the sums (the estimator learns the speeds)")
    ap.add_argument("--target-s", type=float, default=0.4,
                    help="planner.target_round_s: the profiled compute per round")
    ap.add_argument("--elements", type=int, default=65536, help="model values (one fp32 tensor)")
    ap.add_argument("--tokens-per-s", type=float, default=10000,
                    help="the profile every worker announces")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=16, help="planner.seq_len")
    ap.add_argument("--timeout-s", type=float, default=600, help="per mode")
    ap.add_argument("--min-ratio", type=float, default=0,
                    help="fail unless idle equal / balanced exceeds this")
    ap.add_argument("--per-round", action="store_true",
                    help="print every round's compute end and idle, both modes")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (configs, logs)")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    if a.rounds <= a.warmup:
        ap.error("--rounds must exceed --warmup")
    workdir = tempfile.mkdtemp(prefix="planner_e2e_bench_")
    results = {}
    try:
        for mode in ("equal", "balanced"):
            run = Run(a, mode, workdir)
            try:
                idle, members, wall = run.run()
            finally:
                run.stop()
            results[mode] = summarize(mode, idle, members, wall, a)
    except (Fail, OSError, subprocess.SubprocessError, ValueError) as e:
        print(f"FAIL: {e} (work dir {workdir})")
        return 1
    finish_workdir(workdir, a.keep)

    print(f"3 workers announcing {a.tokens_per_s:g} tokens/s, batch <= {a.max_batch}, running at "
          f"time scale {', '.join(f'{s:g}' for s in SCALES)} (true speeds 1:2:4); target "
          f"{a.target_s:g} s; {a.rounds} rounds per mode, the first {a.warmup} left out")
    print(f"{'mode':<9} {'rounds':>6} {'idle GPU-s':>11} {'idle %':>7} {'round s (median)':>17} "
          f"{'wall s':>7}  final plan")
    for mode in ("equal", "balanced"):
        r = results[mode]
        print(f"{mode:<9} {r['rounds']:>6} {r['idle_s']:>11.3f} {100 * r['idle_fraction']:>6.1f}% "
              f"{r['round_s']:>17.3f} {r['wall_s']:>7.1f}  {'; '.join(r['plans'])}")
    if a.per_round:
        print(f"{'round':>5}  {'equal end s':>11} {'idle s':>7}  {'balanced end s':>14} {'idle s':>7}")
        e, b = results["equal"]["idle"], results["balanced"]["idle"]
        for r in sorted(set(e) | set(b)):
            cols = []
            for d in (e, b):
                x = d.get(r)
                cols.append(f"{float(field(x, 'compute_end_s')):.3f} {float(field(x, 'idle_s')):7.3f}"
                            if x else f"{'-':>5} {'-':>7}")
            print(f"{r:>5}  {cols[0]:>19}  {cols[1]:>22}")
    b = results["balanced"]["idle_s"]
    ratio = results["equal"]["idle_s"] / b if b > 0 else float("inf")
    print(f"straggler idle equal / balanced = {ratio:.2f}x")
    if ratio <= a.min_ratio:
        print(f"FAIL: ratio {ratio:.2f} not above --min-ratio {a.min_ratio:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
