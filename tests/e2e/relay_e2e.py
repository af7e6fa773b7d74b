#!/usr/bin/python3
"""End-to-end GeoMesh rounds: one `heddle-relay serve` per region, `heddle-relay worker` processes
next to each, the gateways peering over gRPC (docs/relay.md §7, docs/relay-wan.md).

  relay_e2e.py --bin build/tools/heddle-relay/heddle-relay loopback   # 3 regions x 2 workers, 127.0.0.1
  relay_e2e.py --bin ... faults       # a worker killed mid-round; a wrong worker token; a wrong WAN token
  relay_e2e.py --bin ... wan          # root: regions in network namespaces, rate-capped and delayed links
  relay_e2e.py --bin ... wan-faults   # root: a gateway cut off for a while rejoins
  relay_e2e.py --bin ... schedule     # root: 4 regions, one slow link, a synthesized schedule

What every scenario checks:
  * every worker of every region prints, for each round, the same aggregate digest AND the same
    CRC-32C of its fp32 result (bit-identical everywhere);
  * the WAN bytes each gateway sent to each peer per round are at most fp32 / 31 of the model
    (the sign codec's ~32x, protocol overhead included);
  * `heddle-relay status -j` agrees (rounds published, peers up);
  * loopback, wan-faults: the Prometheus WAN series count each round and refusal once
    (`heddle_relay_wan_rounds_total{outcome}` sums to the rounds resolved; rounds published
    without a region, lost, prepared or replayed and duplicate frames are series of their own).
Exit status 0 = pass, 1 = fail, 77 = skipped (not root / no namespaces, for the wan scenarios).
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "wan"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from harness import metric_values  # noqa: E402  (the Prometheus text parser of the integration tests)

ROUND_RE = re.compile(
    r"round (\d+): (included|excluded|aborted) digest ([0-9a-f]{16}) sum ([0-9a-f]{8}) regions (\d+)")
SKIP = 77


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def field(d, name, default=0):
    """A status -j field (proto JSON: snake_case names, 64-bit integers as strings)."""
    camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)
    v = d.get(name, d.get(camel, default))
    return v


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_block(elements, tensors=2, chunk=4096, slice_elements=1 << 20):
    return (f"model: {{chunk_size: {chunk}, slice_elements: {slice_elements}, "
            f"synthetic: {{tensors: {tensors}, elements: {elements}}}}}\n")


def fp32_bytes(elements, tensors=2):
    return 4 * elements * tensors


class Region:
    def __init__(self, rid, name, workdir, *, listen_host, wan_listen, peers, worker_token,
                 wan_token, model, workers=2, wan_timeout_s=20, push_timeout_s=30, extra="",
                 coordinator=0, wan_extra="", metrics_listen=None):
        self.rid, self.name, self.dir = rid, name, os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.port_file = os.path.join(self.dir, "port")
        self.config = os.path.join(self.dir, "relay.yaml")
        peer_lines = ", ".join(f"{{region: {r}, address: '{a}'}}" for r, a in peers)
        with open(self.config, "w") as f:
            f.write(f"region: {{id: {rid}, name: {name}}}\n"
                    f"listen: {listen_host}:0\n"
                    f"token: {worker_token}\n"
                    + model +
                    f"round: {{push_timeout_s: {push_timeout_s}, missing: renormalize, "
                    f"min_token_fraction: 0.3, min_workers: {workers}}}\n"
                    f"wan: {{region: {rid}, listen: '{wan_listen}', peers: [{peer_lines}], "
                    f"token: {wan_token}, wan_timeout: {wan_timeout_s}s, streams_per_peer: 4, "
                    f"keep_rounds: 8, coordinator: {coordinator}{wan_extra}}}\n" + extra)
            if metrics_listen:
                f.write(f"metrics: {{listen: '{metrics_listen}'}}\n")
        self.metrics_listen = metrics_listen
        self.listen_host = listen_host
        self.proc = None
        self.workers = []

    def relay_address(self):
        return wait_relay_address(self.port_file, self.listen_host, self.proc, self.dir,
                                  f"relay {self.name}")


def wait_relay_address(port_file, host, proc, log_dir, what, timeout=30):
    """host:port once `heddle-relay serve --port-file` has written its port; Fail (with the tail
    of log_dir/serve.err) if the relay exits first or does not start within `timeout` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(port_file) as f:
                port = f.read().strip()
            if port:
                return f"{host}:{port}"
        except FileNotFoundError:
            pass
        if proc and proc.poll() is not None:
            raise Fail(f"{what} exited: {tail(log_dir, 'serve.err')}")
        time.sleep(0.05)
    raise Fail(f"{what} did not start: {tail(log_dir, 'serve.err')}")


def finish_workdir(workdir, keep):
    """Keeps a benchmark's work directory (and says so) or removes it."""
    if keep:
        print(f"work dir kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def tail(d, name, n=2000):
    try:
        with open(os.path.join(d, name), errors="replace") as f:
            return f.read()[-n:]
    except FileNotFoundError:
        return ""


class Cluster:
    """Regions, their relays and workers; `launch` runs argv (in a namespace for the WAN cases)."""

    def __init__(self, binary, workdir, launch=None):
        self.bin, self.workdir = binary, workdir
        self.launch = launch or (lambda region, argv, **kw: subprocess.Popen(argv, **kw))
        self.regions = []

    def start_relay(self, reg):
        out = open(os.path.join(reg.dir, "serve.out"), "w")
        err = open(os.path.join(reg.dir, "serve.err"), "w")
        reg.proc = self.launch(reg.name, [self.bin, "serve", "--config", reg.config, "--port-file",
                                          reg.port_file], stdout=out, stderr=err)

    def start_worker(self, reg, name, *, rounds, token, compute_s=0.3, seed=1):
        out = open(os.path.join(reg.dir, f"{name}.out"), "w")
        err = open(os.path.join(reg.dir, f"{name}.err"), "w")
        argv = [self.bin, "worker", "--relay", reg.relay_address(), "--token", token, "--name",
                name, "--region", reg.name, "--rounds", str(rounds), "--compute-s", str(compute_s),
                "--tokens-per-s", "1000", "--seed", str(seed), "--timeout", "60",
                "--pull-timeout", "180"]
        p = self.launch(reg.name, argv, stdout=out, stderr=err)
        reg.workers.append((name, p))
        return p

    def status(self, reg, token):
        argv = [self.bin, "status", "--relay", reg.relay_address(), "--token", token, "-j"]
        if self.launch is not None and getattr(self, "exec", None):
            r = self.exec(reg.name, argv)
        else:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"status of {reg.name}: {r.stderr}")
        return json.loads(r.stdout)

    def metrics(self, reg):
        """The region's Prometheus text (its `metrics.listen`), scraped where the relay runs."""
        url = f"http://{reg.metrics_listen}/metrics"
        if getattr(self, "exec", None):
            r = self.exec(reg.name, [sys.executable, "-c",
                                     "import sys, urllib.request; sys.stdout.write(urllib.request."
                                     "urlopen(sys.argv[1], timeout=30).read().decode())", url])
            check(r.returncode == 0, f"metrics of {reg.name}: {r.stderr}")
            return r.stdout
        with urllib.request.urlopen(url, timeout=30) as f:
            return f.read().decode()

    def stop(self):
        for reg in self.regions:
            for _, p in reg.workers:
                if p.poll() is None:
                    p.kill()
            if reg.proc and reg.proc.poll() is None:
                reg.proc.send_signal(signal.SIGTERM)
        for reg in self.regions:
            for _, p in reg.workers:
                p.wait(timeout=30)
            if reg.proc:
                try:
                    reg.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    reg.proc.kill()
                    reg.proc.wait()


def rounds_of(path):
    out = {}
    with open(path, errors="replace") as f:
        for m in ROUND_RE.finditer(f.read()):
            out[int(m.group(1))] = (m.group(2), m.group(3), m.group(4), int(m.group(5)))
    return out


def wait_workers(cluster, timeout):
    deadline = time.time() + timeout
    for reg in cluster.regions:
        for name, p in reg.workers:
            left = max(1, deadline - time.time())
            try:
                rc = p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                raise Fail(f"worker {name} did not finish in {timeout} s:\n"
                           f"{tail(reg.dir, name + '.out')}\n{tail(reg.dir, 'serve.err')}")
            yield reg, name, rc


def check_identical(cluster, rounds, *, expect_regions=None, allow_excluded=()):
    """Every worker's line of every round: same digest and sum everywhere. Returns {round: line}."""
    seen = {}
    for reg in cluster.regions:
        for name, p in reg.workers:
            got = rounds_of(os.path.join(reg.dir, name + ".out"))
            for r in rounds:
                check(r in got, f"{reg.name}/{name}: no line for round {r}:\n"
                      f"{tail(reg.dir, name + '.out')}")
                kind, digest, crc, nregions = got[r]
                if (reg.name, r) not in allow_excluded:
                    check(kind == "included", f"{reg.name}/{name} round {r}: {kind}")
                if expect_regions is not None and (reg.name, r) not in allow_excluded:
                    check(nregions == expect_regions,
                          f"{reg.name}/{name} round {r}: {nregions} regions, expected "
                          f"{expect_regions}")
                if r in seen:
                    check(seen[r][1:3] == (digest, crc),
                          f"round {r}: {reg.name}/{name} has digest {digest} sum {crc}, "
                          f"another worker {seen[r][1]} {seen[r][2]}")
                else:
                    seen[r] = got[r]
    return seen


def check_wan_bytes(cluster, statuses, rounds, model_fp32, *, label):
    """Per gateway and peer: bytes sent per round <= fp32 / 31."""
    bound = model_fp32 / 31.0
    worst = 0.0
    for reg in cluster.regions:
        st = statuses[reg.name]
        peers = st.get("wan", {}).get("peers", [])
        check(len(peers) == len(cluster.regions) - 1, f"{reg.name}: peers {peers}")
        for p in peers:
            sent = int(field(p, "bytes_sent"))
            per_round = sent / rounds
            worst = max(worst, per_round / model_fp32)
            check(per_round <= bound,
                  f"{label}: {reg.name} -> region {field(p, 'region_id')}: "
                  f"{per_round:.0f} B per round > fp32/31 = {bound:.0f} B")
    print(f"{label}: WAN bytes per gateway, peer and round = {worst * 100:.3f} % of fp32 "
          f"(1/{1 / worst:.1f}); bound 1/31")


def check_wan_metrics(cluster, statuses, *, label, resolved, without=None):
    """Per gateway: heddle_relay_wan_rounds_total{outcome} holds exclusive outcomes that sum to
    the rounds it resolved (`resolved`) and agree with `status -j`; the parts of an outcome
    (`without[region]` rounds published without it, if given) and the acknowledged duplicate
    frames are series of their own, never a label of rounds_total or refused_total."""
    for reg in cluster.regions:
        text = cluster.metrics(reg)
        w = statuses[reg.name].get("wan", {})
        rounds = metric_values(text, "heddle_relay_wan_rounds_total")
        check(set(rounds) == {'{outcome="published"}', '{outcome="aborted"}'},
              f"{label}: {reg.name}: rounds_total outcomes {sorted(rounds)}")
        check(sum(rounds.values()) == resolved,
              f"{label}: {reg.name}: rounds_total sums to {sum(rounds.values()):g}, "
              f"{resolved} rounds resolved: {rounds}")
        check(rounds['{outcome="published"}'] == int(field(w, "rounds_published")) and
              rounds['{outcome="aborted"}'] == int(field(w, "rounds_aborted")),
              f"{label}: {reg.name}: rounds_total {rounds} vs status {w}")
        refused = metric_values(text, "heddle_relay_wan_refused_total")
        check('{reason="duplicate"}' not in refused,
              f"{label}: {reg.name}: duplicates counted as refusals: {refused}")
        dup = metric_values(text, "heddle_relay_wan_duplicate_frames_total")
        check(dup == {"": float(field(w, "duplicate_frames"))},
              f"{label}: {reg.name}: duplicate_frames_total {dup} vs status {w}")
        wo = metric_values(text, "heddle_relay_wan_rounds_without_this_region_total")
        if without is not None:
            check(wo == {"": float(without.get(reg.name, 0))},
                  f"{label}: {reg.name}: rounds_without_this_region_total {wo}, expected "
                  f"{without.get(reg.name, 0)}")
        # Each part lies within the outcome it is a part of.
        for part, outcome in (("rounds_without_this_region", "published"),
                              ("rounds_prepared", "published"), ("rounds_lost", "aborted")):
            v = metric_values(text, f"heddle_relay_wan_{part}_total").get("")
            check(v is not None and v <= rounds[f'{{outcome="{outcome}"}}'],
                  f"{label}: {reg.name}: heddle_relay_wan_{part}_total {v} beyond the "
                  f"{outcome} rounds {rounds}")
    print(f"{label}: WAN round outcomes sum to the {resolved} rounds resolved on every gateway; "
          "duplicates and the parts of an outcome in series of their own")


def build_regions(cluster, names, *, listen_host_of, wan_listen_of, peer_addr, worker_token,
                  wan_token, model, metrics_listen_of=None, **kw):
    for i, name in enumerate(names):
        rid = i + 1
        peers = [(j + 1, peer_addr(name, other)) for j, other in enumerate(names) if other != name]
        cluster.regions.append(Region(rid, name, cluster.workdir, listen_host=listen_host_of(name),
                                      wan_listen=wan_listen_of(name), peers=peers,
                                      worker_token=worker_token, wan_token=wan_token, model=model,
                                      metrics_listen=metrics_listen_of(name)
                                      if metrics_listen_of else None, **kw))


def statuses_of(cluster, token):
    return {reg.name: cluster.status(reg, token) for reg in cluster.regions}


# ---- scenarios ---------------------------------------------------------------------------------

def scenario_loopback(binary, workdir, rounds=3, elements=2_000_000):
    names = ["eu", "us", "asia"]
    ports = {n: free_port() for n in names}
    metrics_ports = {n: free_port() for n in names}
    c = Cluster(binary, workdir)
    model = model_block(elements)
    build_regions(c, names, listen_host_of=lambda n: "127.0.0.1",
                  wan_listen_of=lambda n: f"127.0.0.1:{ports[n]}",
                  peer_addr=lambda src, dst: f"127.0.0.1:{ports[dst]}", worker_token="wt0ken",
                  wan_token="g4teway", model=model, coordinator=2,  # not the lowest region id
                  metrics_listen_of=lambda n: f"127.0.0.1:{metrics_ports[n]}")
    try:
        for reg in c.regions:
            c.start_relay(reg)
        for k, reg in enumerate(c.regions):
            for w in range(2):
                c.start_worker(reg, f"{reg.name}-gpu{w}", rounds=rounds, token="wt0ken",
                               seed=10 * k + w)
        for reg, name, rc in wait_workers(c, 240):
            check(rc == 0, f"{reg.name}/{name} exited {rc}: {tail(reg.dir, name + '.err')}")
        seen = check_identical(c, range(1, rounds + 1), expect_regions=3)
        st = statuses_of(c, "wt0ken")
        for reg in c.regions:
            check(int(field(st[reg.name], "rounds_published")) == rounds,
                  f"{reg.name}: status {field(st[reg.name], 'rounds_published')} published")
        check(bool(st["us"]["wan"].get("coordinator")) and
              not st["eu"]["wan"].get("coordinator"),
              "region 2 (us) was configured as the coordinator")
        check_wan_bytes(c, st, rounds, fp32_bytes(elements), label="loopback")
        check_wan_metrics(c, st, label="loopback", resolved=rounds, without={})
        print(f"loopback: 3 regions x 2 workers, {rounds} rounds, bit-identical: " +
              ", ".join(f"r{r} {seen[r][1]}/{seen[r][2]}" for r in sorted(seen)))
    finally:
        c.stop()


def scenario_faults(binary, workdir, elements=500_000):
    names = ["eu", "us", "asia"]
    ports = {n: free_port() for n in names}
    c = Cluster(binary, workdir)
    build_regions(c, names, listen_host_of=lambda n: "127.0.0.1",
                  wan_listen_of=lambda n: f"127.0.0.1:{ports[n]}",
                  peer_addr=lambda src, dst: f"127.0.0.1:{ports[dst]}", worker_token="wt0ken",
                  wan_token="g4teway", model=model_block(elements), push_timeout_s=4)
    try:
        for reg in c.regions:
            c.start_relay(reg)
        # A worker with the wrong token is refused, clearly.
        eu = c.regions[0]
        bad = subprocess.run([binary, "worker", "--relay", eu.relay_address(), "--token", "nope",
                              "--name", "intruder", "--rounds", "1", "--timeout", "20"],
                             capture_output=True, text=True, timeout=60)
        check(bad.returncode != 0 and "wrong bearer token" in bad.stderr,
              f"wrong worker token: rc {bad.returncode}: {bad.stderr}")
        # Two workers per region; us-gpu1 is killed during round 2's compute (a 1 s sleep), so
        # us closes round 2 at its push deadline with half its tokens (>= min_token_fraction).
        procs = {}
        for k, reg in enumerate(c.regions):
            for w in range(2):
                name = f"{reg.name}-gpu{w}"
                procs[name] = c.start_worker(reg, name, rounds=3, token="wt0ken", compute_s=1.0,
                                             seed=10 * k + w)
        victim = procs["us-gpu1"]
        us = c.regions[1]
        deadline = time.time() + 60
        while time.time() < deadline:
            if 1 in rounds_of(os.path.join(us.dir, "us-gpu1.out")):
                break
            time.sleep(0.05)
        check(1 in rounds_of(os.path.join(us.dir, "us-gpu1.out")), "us-gpu1 never finished round 1")
        victim.kill()
        us.workers = [(n, p) for n, p in us.workers if n != "us-gpu1"]
        for reg, name, rc in wait_workers(c, 240):
            check(rc == 0, f"{reg.name}/{name} exited {rc}: {tail(reg.dir, name + '.err')}")
        check_identical(c, range(1, 4), expect_regions=3)
        st = statuses_of(c, "wt0ken")
        rows = {int(field(r, "round_id")): r for r in st["us"].get("rounds", [])}
        check(2 in rows and int(field(rows[2], "included")) == 1,
              f"us round 2 should include 1 of 2 workers: {rows.get(2)}")
        print(f"faults: worker killed mid-round: us round 2 closed '{field(rows[2], 'close_reason')}' "
              f"with {field(rows[2], 'included')}/{field(rows[2], 'expected')} workers; every worker "
              "still bit-identical")
        # A gateway with the wrong WAN token is refused by its peers, and counted.
        rogue_port = free_port()
        rogue = Region(9, "rogue", workdir, listen_host="127.0.0.1",
                       wan_listen=f"127.0.0.1:{rogue_port}",
                       peers=[(1, f"127.0.0.1:{ports['eu']}")], worker_token="x",
                       wan_token="wrong", model=model_block(elements))
        c.start_relay(rogue)
        rogue.relay_address()
        time.sleep(3)
        st_eu = c.status(eu, "wt0ken")
        refused = int(field(st_eu.get("wan", {}), "auth_failures")) + int(
            field(st_eu.get("wan", {}), "handshake_failures"))
        rogue.proc.send_signal(signal.SIGTERM)
        rogue.proc.wait(timeout=30)
        check(refused > 0, f"eu counted no refused WAN peer: {st_eu.get('wan')}")
        print(f"faults: a gateway with a wrong WAN token refused ({refused} refusals counted)")
    finally:
        c.stop()


def wan_spec():
    return {"regions": ["eu", "us", "asia"],
            "links": [{"between": ["eu", "us"], "rate": "1gbit", "rtt": "40ms"},
                      {"between": ["eu", "asia"], "rate": "1gbit", "rtt": "140ms"},
                      {"between": ["us", "asia"], "rate": "250mbit", "rtt": "80ms"}]}


def with_wan(binary, workdir, body, spec=None):
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print("skipped: needs root, ip and tc")
        return SKIP
    from wan_emulate import Wan  # noqa: E402
    wan_port = 7443
    try:
        w = Wan(spec or wan_spec(), ports=[wan_port])
    except Exception as e:  # no namespaces in this container
        print(f"skipped: cannot build the emulated WAN: {e}")
        return SKIP
    with w as wan:
        c = Cluster(binary, workdir, launch=lambda region, argv, **kw: wan.run(region, argv, **kw))
        c.exec = lambda region, argv: wan.exec(region, argv, capture_output=True, text=True,
                                               timeout=60)
        try:
            body(wan, c, wan_port)
        finally:
            c.stop()
    return 0


def scenario_wan(binary, workdir, rounds=3, elements=4_000_000):
    def body(wan, c, wan_port):
        names = wan_spec()["regions"]
        build_regions(c, names, listen_host_of=lambda n: wan.address(n),
                      wan_listen_of=lambda n: f"0.0.0.0:{wan_port}",
                      peer_addr=lambda src, dst: wan.peer_address(src, dst, wan_port),
                      worker_token="wt0ken", wan_token="g4teway", model=model_block(elements))
        for reg in c.regions:
            c.start_relay(reg)
        for k, reg in enumerate(c.regions):
            for w in range(2):
                c.start_worker(reg, f"{reg.name}-gpu{w}", rounds=rounds, token="wt0ken",
                               seed=10 * k + w)
        for reg, name, rc in wait_workers(c, 300):
            check(rc == 0, f"{reg.name}/{name} exited {rc}: {tail(reg.dir, name + '.err')}")
        seen = check_identical(c, range(1, rounds + 1), expect_regions=3)
        st = statuses_of(c, "wt0ken")
        check_wan_bytes(c, st, rounds, fp32_bytes(elements), label="wan")
        wan_s = [float(field(st[r.name].get("wan", {}), "mean_publish_s")) for r in c.regions]
        print(f"wan: 3 regions x 2 workers over 40-140 ms RTT, 0.25-1 Gbit/s: {rounds} rounds "
              f"bit-identical ({', '.join(seen[r][2] for r in sorted(seen))}); mean WAN time "
              f"per gateway {', '.join(f'{s:.2f}' for s in wan_s)} s")
    return with_wan(binary, workdir, body)


def scenario_wan_faults(binary, workdir, rounds=8, elements=1_000_000):
    def body(wan, c, wan_port):
        names = wan_spec()["regions"]
        build_regions(c, names, listen_host_of=lambda n: wan.address(n),
                      wan_listen_of=lambda n: f"0.0.0.0:{wan_port}",
                      peer_addr=lambda src, dst: wan.peer_address(src, dst, wan_port),
                      worker_token="wt0ken", wan_token="g4teway", model=model_block(elements),
                      wan_timeout_s=4, metrics_listen_of=lambda n: f"{wan.address(n)}:9464")
        for reg in c.regions:
            c.start_relay(reg)
        for k, reg in enumerate(c.regions):
            for w in range(2):
                c.start_worker(reg, f"{reg.name}-gpu{w}", rounds=rounds, token="wt0ken",
                               compute_s=1.0, seed=10 * k + w)
        asia = c.regions[2]
        # Cut asia off once round 1 is done everywhere, for long enough to miss round 2.
        deadline = time.time() + 120
        while time.time() < deadline:
            if all(1 in rounds_of(os.path.join(asia.dir, f"asia-gpu{w}.out")) for w in range(2)):
                break
            time.sleep(0.05)
        wan.partition("asia", "eu")
        wan.partition("asia", "us")
        time.sleep(8)
        wan.heal("asia", "eu")
        wan.heal("asia", "us")
        for reg, name, rc in wait_workers(c, 300):
            check(rc == 0, f"{reg.name}/{name} exited {rc}: {tail(reg.dir, name + '.err')}")
        # Every round is the same everywhere; asia is left out of some round(s) while cut off and
        # its workers are told so, then it takes part again.
        lines = {w: rounds_of(os.path.join(asia.dir, f"asia-{w}.out")) for w in ("gpu0", "gpu1")}
        missed = sorted(r for r, v in lines["gpu0"].items() if v[0] != "included")
        check(missed, f"asia was never left out: {lines['gpu0']}")
        check(missed[-1] < rounds and all(lines["gpu0"][r][0] == "included"
                                          for r in range(missed[-1] + 1, rounds + 1)),
              f"asia did not rejoin by round {rounds}: {lines['gpu0']}")
        allow = {("asia", r) for r in missed}
        seen = check_identical(c, range(1, rounds + 1), allow_excluded=allow)
        for r in missed:
            check(seen[r][3] == 2, f"round {r} published with {seen[r][3]} regions, expected 2")
        # Asia's rounds published without it are part of its published rounds, not more rounds.
        check_wan_metrics(c, statuses_of(c, "wt0ken"), label="wan-faults", resolved=rounds,
                          without={"asia": len(missed)})
        print(f"wan-faults: asia cut off: rounds {missed} published without it (2 regions), "
              f"asia's workers applied them; asia rejoined; all rounds bit-identical")
    return with_wan(binary, workdir, body)


def schedule_wan_spec(slow=("eu", "asia"), names=("eu", "us", "asia", "sa"), rate="200mbit",
                      slow_rate="50mbit", rtt="40ms"):
    """A full mesh of equal links but one, `slow` (4x slower by default)."""
    links = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            r = slow_rate if {a, b} == set(slow) else rate
            links.append({"between": [a, b], "rate": r, "rtt": rtt})
    return {"regions": list(names), "links": links}


def wan_topology_yaml(spec):
    """The same WAN as the gateways' `wan.topology` (flow YAML, ranks named by region id)."""
    names = spec["regions"]
    rid = {n: str(i + 1) for i, n in enumerate(names)}

    from wan_emulate import parse_duration, parse_rate  # noqa: E402

    def bw(rate):
        return f"{round(parse_rate(rate))}bit"

    def lat(rtt):  # one way
        return f"{parse_duration(rtt) * 1e3 / 2:g}ms"
    links = ", ".join(f"{{between: ['{rid[l['between'][0]]}', '{rid[l['between'][1]]}'], "
                      f"bandwidth: {bw(l['rate'])}, latency: {lat(l['rtt'])}}}"
                      for l in spec["links"])
    ranks = ", ".join(f"'{rid[n]}'" for n in names)
    return f"{{ranks: [{ranks}], links: [{links}]}}"


def scenario_schedule(binary, workdir, rounds=3, elements=4_000_000, schedule="auto"):
    """Four regions, eu-asia 4x slower than the other links, the gateways running the schedule
    synthesized for that WAN: bit-identical rounds everywhere, one schedule digest on every
    gateway, and the slow pair's frames relayed by the others."""
    spec = schedule_wan_spec()

    def body(wan, c, wan_port):
        names = spec["regions"]
        build_regions(c, names, listen_host_of=lambda n: wan.address(n),
                      wan_listen_of=lambda n: f"0.0.0.0:{wan_port}",
                      peer_addr=lambda src, dst: wan.peer_address(src, dst, wan_port),
                      worker_token="wt0ken", wan_token="g4teway", model=model_block(elements),
                      wan_extra=f", schedule: {schedule}, topology: {wan_topology_yaml(spec)}")
        for reg in c.regions:
            c.start_relay(reg)
        for k, reg in enumerate(c.regions):
            for w in range(2):
                c.start_worker(reg, f"{reg.name}-gpu{w}", rounds=rounds, token="wt0ken",
                               seed=10 * k + w)
        for reg, name, rc in wait_workers(c, 300):
            check(rc == 0, f"{reg.name}/{name} exited {rc}: {tail(reg.dir, name + '.err')}")
        seen = check_identical(c, range(1, rounds + 1), expect_regions=len(names))
        st = statuses_of(c, "wt0ken")
        w = {n: st[n].get("wan", {}) for n in names}
        digests = {str(field(w[n], "schedule_digest")) for n in names}
        check(len(digests) == 1 and digests != {"0"}, f"schedule digests differ: {digests}")
        sched = field(w["eu"], "schedule_name", "")
        forwarded = sum(int(field(p, "frames_forwarded")) for n in names
                        for p in w[n].get("peers", []))
        slow = {"eu": "3", "asia": "1"}
        slow_frames = sum(int(field(p, "frames_sent")) for n in ("eu", "asia")
                          for p in w[n].get("peers", []) if str(field(p, "region_id")) == slow[n])
        if schedule == "auto":
            check(forwarded > 0, f"schedule {sched}: no frame was relayed: {w}")
        print(f"schedule: {len(names)} regions, eu-asia 4x slower, schedule '{sched}' "
              f"(predicted {float(field(w['eu'], 'schedule_predicted_s')):.3f} s); {rounds} "
              f"rounds bit-identical ({', '.join(seen[r][2] for r in sorted(seen))}); "
              f"{forwarded} frames relayed, {slow_frames} sent over the slow link")
    return with_wan(binary, workdir, body, spec=spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the heddle-relay binary")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("scenario", choices=["loopback", "faults", "wan", "wan-faults", "schedule"])
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    workdir = tempfile.mkdtemp(prefix=f"relay_e2e_{a.scenario}_")
    os.chmod(workdir, 0o755)
    rc = 1
    try:
        fn = {"loopback": scenario_loopback, "faults": scenario_faults, "wan": scenario_wan,
              "wan-faults": scenario_wan_faults, "schedule": scenario_schedule}[a.scenario]
        rc = fn(binary, workdir) or 0
        if rc == 0:
            print(f"{a.scenario}: PASS")
    except Fail as e:
        print(f"{a.scenario}: FAIL: {e}\n(work dir {workdir})")
        a.keep = True
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
