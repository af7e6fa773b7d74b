#!/usr/bin/python3
"""Emulated multi-region WAN out of network namespaces, veth pairs, tc and heddle-wan-delay.

This machine's kernel has no netem, so a link is emulated in two parts: tc tbf on each veth end
caps the rate of each direction, and a heddle-wan-delay relay adds the one-way delays (README.md).

Topology: each region is a network namespace `hwan-<run>-<region>`; every pair of regions with a
link in the spec is joined by its own veth pair (a full mesh, so each link, and each direction of
it, has its own rate). Addresses (the same in every run: namespaces keep runs apart):

  10.77.0.<k+1>      region k's own address (on its lo); services bind 0.0.0.0 or this address.
                     Reaching it directly from another region crosses the rate cap, NOT the delay.
  10.78.<l>.1 / .2   the two ends of link l (lower region index on .1), routes to region addresses
  10.79.0.<m+1>:P+O  in region k: a heddle-wan-delay relay that forwards to 10.77.0.<m+1>:P with
                     the link's one-way delays (k->m forward, m->k back); O = port_offset (10000).
                     The same address in every region (m == k: no delay), so one peer list fits all.

Python:

  from wan_emulate import Wan
  with Wan(spec, ports=[7100]) as wan:
      srv = wan.run("b", ["my-server", "--port", "7100"])         # a Popen inside region b
      addr = wan.peer_address(src="a", dst="b", port=7100)       # "10.79.0.2:17100"
      wan.exec("a", ["my-client", "--to", addr], check=True)      # subprocess.run in region a

CLI (root):

  wan_emulate.py up --spec spec.json [--ports 7100,7200] [--run ID]   # prints the run id
  wan_emulate.py exec [--run ID] REGION -- cmd ...
  wan_emulate.py addr [--run ID] SRC DST PORT
  wan_emulate.py partition|heal [--run ID] A B    # silent drops on link A-B both ways / undo
  wan_emulate.py status
  wan_emulate.py down [--run ID | --all | --stale]

Spec (JSON):

  {"regions": ["a", "b", "c"],
   "links": [{"between": ["a", "b"], "rate": "1gbit", "rtt": "40ms"},
             {"between": ["a", "c"], "rate": "1gbit", "rtt": "140ms"},
             {"between": ["b", "c"], "rate": "250mbit", "rtt": "80ms"}],
   "ports": [7100]}

A link's `rate` caps the first -> second direction and `rate_reverse` (default: `rate`) the other;
`rtt` splits evenly into one-way delays, or give `delay` / `delay_reverse` (one-way) instead.
Optional per link: `max_buffer` (bytes a relay holds per direction of a connection; bounds one
connection to max_buffer / delay, like a TCP window; default 2 x rate x one-way delay, at least
8 MiB; the relay allocates it only as it fills).
Everything is torn down on exit, on an exception, on Ctrl-C and on SIGTERM (when the Wan is
created in the main thread); relays die with the process that created the Wan.
"""
import argparse
import contextlib
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time

STATE_DIR = "/run/hwan"
PREFIX = "hwan-"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,11}$")
RUN_RE = re.compile(r"^[a-z0-9]{1,12}$")
_PR_SET_PDEATHSIG = 1


class WanError(Exception):
    pass


# ---- units ------------------------------------------------------------------------------------

def parse_rate(text):
    """tc-style rate ("250mbit", "1gbit", "10Gbit") -> bits per second."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(bit|kbit|mbit|gbit)\s*", str(text).lower())
    if not m:
        raise WanError(f"rate {text!r}: expected a number with bit, kbit, mbit or gbit (1gbit)")
    value = float(m.group(1)) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]
    if value <= 0:
        raise WanError(f"rate {text!r}: must be > 0")
    return value


def parse_duration(text):
    """"40ms", "0.5s", "250us" -> seconds."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(us|ms|s)\s*", str(text).lower())
    if not m:
        raise WanError(f"duration {text!r}: expected a number with us, ms or s (40ms)")
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def parse_size(text):
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+)\s*([kmg]?)(i?b)?\s*", str(text).lower())
    if not m:
        raise WanError(f"size {text!r}: expected bytes such as 4096, 64K or 16MiB")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]


# ---- the spec ---------------------------------------------------------------------------------

class Link:
    """One veth pair between regions a and b (a before b in the spec's region order)."""

    def __init__(self, index, a, b, rate_ab, rate_ba, delay_ab, delay_ba, max_buffer):
        self.index, self.a, self.b = index, a, b
        self.rate = {(a, b): rate_ab, (b, a): rate_ba}  # bits/s
        self.delay = {(a, b): delay_ab, (b, a): delay_ba}  # seconds, one way
        self.max_buffer = max_buffer

    def to_json(self):
        return {"index": self.index, "a": self.a, "b": self.b,
                "rate_ab": self.rate[(self.a, self.b)], "rate_ba": self.rate[(self.b, self.a)],
                "delay_ab": self.delay[(self.a, self.b)], "delay_ba": self.delay[(self.b, self.a)],
                "max_buffer": self.max_buffer}

    @staticmethod
    def from_json(j):
        return Link(j["index"], j["a"], j["b"], j["rate_ab"], j["rate_ba"], j["delay_ab"],
                    j["delay_ba"], j["max_buffer"])


def parse_spec(spec):
    """Validates a spec (dict, or path to a JSON file) -> (regions, links, ports)."""
    if isinstance(spec, str):
        with open(spec) as f:
            spec = json.load(f)
    regions = spec.get("regions")
    if not isinstance(regions, list) or len(regions) < 2:
        raise WanError("spec: 'regions' must list at least two region names")
    for r in regions:
        if not isinstance(r, str) or not NAME_RE.match(r):
            raise WanError(f"spec: region name {r!r}: use 1-12 of [a-z0-9_], starting with a "
                           "letter or digit")
    if len(set(regions)) != len(regions):
        raise WanError("spec: region names must be unique")
    if len(regions) > 200:
        raise WanError("spec: at most 200 regions")
    links = {}
    for i, l in enumerate(spec.get("links", [])):
        between = l.get("between")
        if (not isinstance(between, list) or len(between) != 2 or between[0] == between[1]
                or any(x not in regions for x in between)):
            raise WanError(f"spec: links[{i}].between must name two different regions of "
                           f"{regions}, got {between!r}")
        a, b = between
        if "rate" not in l:
            raise WanError(f"spec: links[{i}] ({a}-{b}) needs a 'rate' such as 1gbit")
        rate_ab = parse_rate(l["rate"])
        rate_ba = parse_rate(l.get("rate_reverse", l["rate"]))
        if "rtt" in l:
            if "delay" in l or "delay_reverse" in l:
                raise WanError(f"spec: links[{i}] ({a}-{b}): give 'rtt' or 'delay', not both")
            delay_ab = delay_ba = parse_duration(l["rtt"]) / 2
        elif "delay" in l:
            delay_ab = parse_duration(l["delay"])
            delay_ba = parse_duration(l.get("delay_reverse", l["delay"]))
        else:
            raise WanError(f"spec: links[{i}] ({a}-{b}) needs 'rtt' (e.g. 40ms) or 'delay'")
        if "max_buffer" in l:
            max_buffer = parse_size(l["max_buffer"])
        else:
            # A direction's relay holds rate x one-way delay bytes in flight; twice that
            # leaves room for the tbf queue and scheduling jitter.
            in_flight = max(rate_ab / 8 * delay_ab, rate_ba / 8 * delay_ba)
            max_buffer = max(8 << 20, int(2 * in_flight))
        key = tuple(sorted((a, b), key=regions.index))
        if key in links:
            raise WanError(f"spec: two links between {key[0]} and {key[1]}")
        if key != (a, b):  # store with the spec's region order; swap the directions
            rate_ab, rate_ba, delay_ab, delay_ba = rate_ba, rate_ab, delay_ba, delay_ab
        links[key] = (rate_ab, rate_ba, delay_ab, delay_ba, max_buffer)
    if len(links) > 250:
        raise WanError("spec: at most 250 links")
    out = [Link(i, a, b, *v) for i, ((a, b), v) in enumerate(sorted(
        links.items(), key=lambda kv: (regions.index(kv[0][0]), regions.index(kv[0][1]))))]
    ports = [int(p) for p in spec.get("ports", [])]
    return regions, out, ports


# ---- helpers ----------------------------------------------------------------------------------

def _run(argv, check=True):
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise WanError(f"`{' '.join(argv)}` failed ({p.returncode}): {p.stderr.strip()}")
    return p


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_pids(pids, grace=2.0):
    pids = [p for p in pids if p and _pid_alive(p)]
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _pid_alive(p) and not _is_zombie(p)]
        time.sleep(0.02)
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def netns_available():
    """True when this process may create network namespaces (root, iproute2 present)."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        return False
    name = f"{PREFIX}probe{secrets.token_hex(3)}"
    if _run(["ip", "netns", "add", name], check=False).returncode != 0:
        return False
    _run(["ip", "netns", "del", name], check=False)
    return True


def find_relay_binary(explicit=None):
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [explicit, os.environ.get("HEDDLE_WAN_DELAY"),
                  os.path.join(here, "..", "..", "build", "tools", "wan", "heddle-wan-delay"),
                  shutil.which("heddle-wan-delay")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise WanError("heddle-wan-delay not found: build it (ninja -C build heddle-wan-delay), or "
                   "pass relay=/--relay or set HEDDLE_WAN_DELAY")


# ---- the WAN ----------------------------------------------------------------------------------

class Wan:
    """An emulated WAN; a context manager. See the module docstring."""

    def __init__(self, spec, *, ports=(), relay=None, run_id=None, port_offset=10000,
                 log_dir=None, die_with_parent=True):
        self.regions, self.links, spec_ports = parse_spec(spec)
        self.ports = sorted(set(spec_ports) | {int(p) for p in ports})
        self.port_offset = int(port_offset)
        for p in self.ports:
            if not 0 < p <= 65535 or not 0 < p + self.port_offset <= 65535:
                raise WanError(f"port {p}: port + port_offset ({self.port_offset}) must be in "
                               "1..65535")
        self.relay = relay
        self._auto_id = run_id is None
        self.run_id = run_id or secrets.token_hex(4)
        if not RUN_RE.match(self.run_id):
            raise WanError(f"run id {self.run_id!r}: use 1-12 of [a-z0-9]")
        self.state_dir = os.path.join(STATE_DIR, self.run_id)
        self._explicit_log_dir = log_dir
        self.log_dir = log_dir or self.state_dir
        self.die_with_parent = die_with_parent
        self.owner_pid = os.getpid() if die_with_parent else 0
        self._procs = []  # Popen objects this Wan started (relays and run())
        self._pids = []  # relay pids (also those of an attached run)
        self._up = False
        self._old_sigterm = None
        self._partitioned = set()
        self._probe_servers = {}  # (region, port) -> Popen of wan_probe.py serve

    # -- names and addresses --

    def namespace(self, region):
        self._check_region(region)
        return f"{PREFIX}{self.run_id}-{region}"

    def address(self, region):
        """Region's own address: services bind here (or 0.0.0.0). Direct = rate cap, no delay."""
        return f"10.77.0.{self._index(region) + 1}"

    def link(self, a, b):
        for l in self.links:
            if {l.a, l.b} == {a, b}:
                return l
        raise WanError(f"no link between {a} and {b} in the spec")

    def rtt(self, a, b):
        l = self.link(a, b)
        return l.delay[(a, b)] + l.delay[(b, a)]

    def rate(self, src, dst):
        """Configured rate src -> dst in bits/s."""
        return self.link(src, dst).rate[(src, dst)]

    def peer_address(self, src, dst, port):
        """'HOST:PORT' where processes in region src connect to reach dst's `port` over the
        emulated link (delay and rate). It depends on dst only, so one list of peer addresses
        serves every region; src == dst is allowed (a zero-delay relay to the region itself)."""
        if src != dst:
            self.link(src, dst)
        if int(port) not in self.ports:
            raise WanError(f"port {port} is not relayed; pass it in ports= / the spec's 'ports' "
                           f"(relayed: {self.ports}) or call add_port({port})")
        return f"{self._relay_ip(dst)}:{int(port) + self.port_offset}"

    def _relay_ip(self, dst):
        return f"10.79.0.{self._index(dst) + 1}"

    def _link_ip(self, link, region):
        return f"10.78.{link.index}.{1 if region == link.a else 2}"

    def _ip(self, region, *args):
        return _run(["ip", "-n", self.namespace(region), *args])

    def _veth(self, peer):
        return f"to-{peer}"

    def _index(self, region):
        self._check_region(region)
        return self.regions.index(region)

    def _check_region(self, region):
        if region not in self.regions:
            raise WanError(f"unknown region {region!r}; regions: {self.regions}")

    # -- lifecycle --

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def up(self):
        if self._up:
            return self
        if os.geteuid() != 0:
            raise WanError("the WAN emulation needs root (network namespaces, tc)")
        self.relay = find_relay_binary(self.relay)
        self._install_sigterm()
        os.makedirs(STATE_DIR, exist_ok=True)
        while True:
            try:
                os.mkdir(self.state_dir)  # claims the run id among concurrent runs
                break
            except FileExistsError:
                if not self._auto_id:
                    raise WanError(f"run id {self.run_id} already in use ({self.state_dir})")\
                        from None
                self.run_id = secrets.token_hex(4)
                self.state_dir = os.path.join(STATE_DIR, self.run_id)
                self.log_dir = self._explicit_log_dir or self.state_dir
        self._up = True
        try:
            self._write_state()
            self._build_network()
            self._start_relays(self.ports)
            self._write_state()
        except BaseException:
            self.down()
            raise
        return self

    def _build_network(self):
        for r in self.regions:
            _run(["ip", "netns", "add", self.namespace(r)])
            self._ip(r, "link", "set", "lo", "up")
            self._ip(r, "addr", "add", f"{self.address(r)}/32", "dev", "lo")
            for other in self.regions:  # other == r: the zero-delay relay to itself
                self._ip(r, "addr", "add", f"{self._relay_ip(other)}/32", "dev", "lo")
        for l in self.links:
            va, vb = self._veth(l.b), self._veth(l.a)
            _run(["ip", "link", "add", va, "netns", self.namespace(l.a), "type", "veth", "peer",
                  "name", vb, "netns", self.namespace(l.b)])
            for region, dev, peer in ((l.a, va, l.b), (l.b, vb, l.a)):
                self._ip(region, "addr", "add", f"{self._link_ip(l, region)}/24", "dev", dev)
                self._ip(region, "link", "set", dev, "up")
                self._ip(region, "route", "add", f"{self.address(peer)}/32", "via",
                         self._link_ip(l, peer), "dev", dev)
                rate = l.rate[(region, peer)]
                bytes_per_s = rate / 8
                # burst: 1 ms of traffic (at least a few GSO packets); queue: 10 ms.
                burst = max(64 << 10, int(bytes_per_s / 1000))
                limit = max(512 << 10, int(bytes_per_s / 100))
                _run(["tc", "-n", self.namespace(region), "qdisc", "add", "dev", dev, "root",
                      "tbf", "rate", f"{int(rate)}bit", "burst", str(burst), "limit",
                      str(limit)])

    def _start_relays(self, ports):
        if not ports:
            return
        pairs = [(l.a, l.b, l.delay[(l.a, l.b)], l.delay[(l.b, l.a)], l.max_buffer)
                 for l in self.links]
        pairs += [(l.b, l.a, l.delay[(l.b, l.a)], l.delay[(l.a, l.b)], l.max_buffer)
                  for l in self.links]
        pairs += [(r, r, 0.0, 0.0, 8 << 20) for r in self.regions]  # a region to itself
        for src, dst, delay, return_delay, max_buffer in pairs:
            argv = [self.relay, "--delay", f"{delay * 1e3:.6f}ms",
                    "--return-delay", f"{return_delay * 1e3:.6f}ms",
                    "--max-buffer", str(max_buffer)]
            for p in ports:
                argv += ["--map", f"{self._relay_ip(dst)}:{p + self.port_offset}="
                                  f"{self.address(dst)}:{p}"]
            log = os.path.join(self.log_dir, f"relay-{src}-{dst}-{ports[0]}.log")
            with open(log, "w") as f:
                proc = self.run(src, argv, stdout=f, stderr=subprocess.STDOUT)
            self._pids.append(proc.pid)
            self._wait_ready(proc, log)

    @staticmethod
    def _wait_ready(proc, log, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(log) as f:
                text = f.read()
            if "ready\n" in text:
                return
            if proc.poll() is not None:
                raise WanError(f"heddle-wan-delay exited ({proc.returncode}): {text.strip()}")
            time.sleep(0.01)
        raise WanError(f"heddle-wan-delay not ready after {timeout} s; see {log}")

    def add_port(self, port):
        """Relays `port` over every link (starts one more relay per ordered region pair)."""
        port = int(port)
        if port in self.ports:
            return
        if not 0 < port + self.port_offset <= 65535:
            raise WanError(f"port {port}: port + port_offset must be in 1..65535")
        self.ports.append(port)
        self.ports.sort()
        self._start_relays([port])
        self._write_state()

    def partition(self, a, b):
        """Cuts the link a-b: packets either way are dropped silently (blackhole routes on both
        sides), as in a real partition; open connections stall and retransmit until heal()."""
        l = self.link(a, b)
        for region, peer in ((l.a, l.b), (l.b, l.a)):
            self._ip(region, "route", "replace", "blackhole", f"{self.address(peer)}/32")
            self._ip(region, "route", "replace", "blackhole", f"{self._link_ip(l, peer)}/32")
        self._partitioned.add((l.a, l.b))

    def heal(self, a, b):
        """Undoes partition(a, b); stalled connections resume with their next retransmission."""
        l = self.link(a, b)
        for region, peer in ((l.a, l.b), (l.b, l.a)):
            self._ip(region, "route", "replace", f"{self.address(peer)}/32", "via",
                     self._link_ip(l, peer), "dev", self._veth(peer))
            _run(["ip", "-n", self.namespace(region), "route", "del", "blackhole",
                  f"{self._link_ip(l, peer)}/32"], check=False)
        self._partitioned.discard((l.a, l.b))

    def partitioned(self, a, b):
        l = self.link(a, b)
        return (l.a, l.b) in self._partitioned

    def run(self, region, argv, *, die_with_parent=None, **popen_kwargs):
        """subprocess.Popen(argv) inside the region's namespace; stopped at down()."""
        ns = self.namespace(region)
        if die_with_parent is None:
            die_with_parent = self.die_with_parent
        if die_with_parent:
            popen_kwargs.setdefault("preexec_fn", _die_with_parent)
        else:
            popen_kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(["ip", "netns", "exec", ns] + [str(a) for a in argv],
                                **popen_kwargs)
        self._procs.append(proc)
        return proc

    def wait_listening(self, region, host_port, timeout=10.0):
        """Returns once a TCP connect from `region` to host_port succeeds (a service started
        with run() is up); raises WanError after `timeout` seconds. Only for direct addresses:
        a relay's listening port accepts before its upstream exists."""
        probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wan_probe.py")
        p = self.exec(region, [sys.executable, probe, "wait", "--to", host_port, "--timeout",
                               str(timeout)], capture_output=True, text=True)
        if p.returncode != 0:
            raise WanError(f"region {region}: {p.stderr.strip()}")

    def measure_link(self, src, dst, *, seconds=2.0, streams=4, via="relay", port=7099,
                     rtt_count=5):
        """Measures what the link src -> dst delivers now: {"bps", "rtt_s", "ratio", "bytes",
        "seconds", "streams"}. bps is measured where the bytes arrive (wan_probe.py) with
        `streams` parallel TCP streams for `seconds`; rtt_s is the smallest 1-byte round trip;
        ratio = bps / configured rate. via="relay" goes through the delay relay (the path
        peer_address() gives), via="direct" to dst's own address (rate cap only). A probe
        server is started in dst on `port` (relayed with add_port) the first time."""
        if via not in ("relay", "direct"):
            raise WanError(f"measure_link: via must be 'relay' or 'direct', not {via!r}")
        probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wan_probe.py")
        key = (dst, port)
        if key not in self._probe_servers:
            self.add_port(port)
            self._probe_servers[key] = self.run(
                dst, [sys.executable, probe, "serve", "--port", str(port)],
                stdout=subprocess.DEVNULL)
            self.wait_listening(dst, f"127.0.0.1:{port}")
        to = (self.peer_address(src, dst, port) if via == "relay"
              else f"{self.address(dst)}:{port}")

        def probe_json(*args):
            p = self.exec(src, [sys.executable, probe, *args], capture_output=True, text=True,
                          timeout=seconds * 10 + 120)
            if p.returncode != 0:
                raise WanError(f"measure_link {src}->{dst}: {p.stderr.strip()}")
            return json.loads(p.stdout)

        rtt = min(probe_json("rtt", "--to", to, "--count", str(rtt_count))["rtt_s"])
        r = probe_json("send", "--to", to, "--seconds", str(seconds), "--streams", str(streams))
        r["rtt_s"] = rtt
        r["ratio"] = r["bps"] / self.rate(src, dst)
        return r

    def exec(self, region, argv, **run_kwargs):
        """subprocess.run(argv) inside the region's namespace."""
        return subprocess.run(["ip", "netns", "exec", self.namespace(region)] +
                              [str(a) for a in argv], **run_kwargs)

    def down(self):
        """Stops every process, deletes the namespaces (and so the veths). Idempotent."""
        if not self._up:
            return
        old_int = None
        if threading.current_thread() is threading.main_thread():
            old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish cleaning up first
        try:
            pids = set(self._pids) | {p.pid for p in self._procs if p.poll() is None}
            for r in self.regions:  # anything else still running inside a region
                out = _run(["ip", "netns", "pids", self.namespace(r)], check=False).stdout
                pids |= {int(x) for x in out.split()}
            _kill_pids(sorted(pids))
            for p in self._procs:
                with contextlib.suppress(Exception):
                    p.wait(timeout=2)
            for r in self.regions:
                _run(["ip", "netns", "del", self.namespace(r)], check=False)
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self._up = False
        finally:
            if old_int is not None:
                signal.signal(signal.SIGINT, old_int)
            self._restore_sigterm()

    # -- SIGTERM becomes an exception, so `with` blocks unwind and clean up --

    def _install_sigterm(self):
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return  # the application handles SIGTERM itself

        def on_term(signum, frame):
            raise SystemExit(128 + signum)

        self._old_sigterm = signal.signal(signal.SIGTERM, on_term)

    def _restore_sigterm(self):
        if self._old_sigterm is not None and \
                threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    # -- state on disk, for the CLI and for cleaning up after a killed owner --

    def _write_state(self):
        state = {"run_id": self.run_id, "owner_pid": self.owner_pid, "regions": self.regions,
                 "links": [l.to_json() for l in self.links], "ports": self.ports,
                 "port_offset": self.port_offset, "relay": self.relay, "pids": self._pids,
                 "log_dir": self.log_dir}
        tmp = os.path.join(self.state_dir, "state.json.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
        os.replace(tmp, os.path.join(self.state_dir, "state.json"))

    @classmethod
    def attach(cls, run_id):
        """A Wan for a run brought up by another process (the CLI's `up`)."""
        path = os.path.join(STATE_DIR, run_id, "state.json")
        try:
            with open(path) as f:
                s = json.load(f)
        except OSError as e:
            raise WanError(f"run {run_id}: no state ({e}); see `wan_emulate.py status`") from None
        self = cls.__new__(cls)
        self.regions = s["regions"]
        self.links = [Link.from_json(j) for j in s["links"]]
        self.ports = s["ports"]
        self.port_offset = s["port_offset"]
        self.relay = s["relay"]
        self.run_id = s["run_id"]
        self.state_dir = os.path.join(STATE_DIR, self.run_id)
        self.log_dir = s.get("log_dir", self.state_dir)
        self.die_with_parent = False
        self._auto_id = False
        self._explicit_log_dir = None
        self.owner_pid = s["owner_pid"]
        self._procs = []
        self._pids = s["pids"]
        self._up = True
        self._old_sigterm = None
        self._partitioned = set()
        self._probe_servers = {}
        return self

    def describe(self):
        rows = []
        for l in self.links:
            for src, dst in ((l.a, l.b), (l.b, l.a)):
                rows.append({"src": src, "dst": dst, "rate_bps": l.rate[(src, dst)],
                             "one_way_delay_s": l.delay[(src, dst)],
                             "rtt_s": l.delay[(src, dst)] + l.delay[(dst, src)],
                             "peer_addresses": {p: self.peer_address(src, dst, p)
                                                for p in self.ports}})
        return {"run_id": self.run_id,
                "regions": {r: {"namespace": self.namespace(r), "address": self.address(r)}
                            for r in self.regions},
                "links": rows}


def list_runs():
    runs = []
    if os.path.isdir(STATE_DIR):
        for name in sorted(os.listdir(STATE_DIR)):
            if os.path.exists(os.path.join(STATE_DIR, name, "state.json")):
                runs.append(name)
    return runs


def cleanup_orphans(stale_only=True):
    """Tears down runs whose owner died (stale_only) or every run, plus hwan-* namespaces that
    no state file claims. Returns the run ids removed."""
    removed = []
    for run_id in list_runs():
        try:
            wan = Wan.attach(run_id)
        except (WanError, ValueError, KeyError):
            continue
        if stale_only and (wan.owner_pid == 0 or _pid_alive(wan.owner_pid)):
            continue
        wan.down()
        removed.append(run_id)
    if not stale_only:
        out = _run(["ip", "netns", "list"], check=False).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(PREFIX):
                pids = _run(["ip", "netns", "pids", name], check=False).stdout.split()
                _kill_pids([int(p) for p in pids])
                _run(["ip", "netns", "del", name], check=False)
        shutil.rmtree(STATE_DIR, ignore_errors=True)
    return removed


# ---- CLI --------------------------------------------------------------------------------------

def _pick_run(run_id):
    if run_id:
        return run_id
    runs = list_runs()
    if len(runs) != 1:
        raise WanError(f"{len(runs)} runs are up ({', '.join(runs) or 'none'}); pass --run ID")
    return runs[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up", help="build the WAN and leave it running")
    p.add_argument("--spec", required=True)
    p.add_argument("--ports", default="", help="comma-separated service ports to relay")
    p.add_argument("--run", help="run id (default: random)")
    p.add_argument("--relay", help="heddle-wan-delay binary")
    p.add_argument("--port-offset", type=int, default=10000)
    p = sub.add_parser("down", help="tear a run down")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--run")
    g.add_argument("--all", action="store_true", help="every run and every hwan-* namespace")
    g.add_argument("--stale", action="store_true", help="runs whose owning process died")
    p = sub.add_parser("exec", help="run a command in a region: exec [--run ID] REGION -- cmd")
    p.add_argument("--run")
    p.add_argument("region")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("addr", help="print where SRC connects to reach DST's PORT")
    p.add_argument("--run")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("port", type=int)
    for name, text in (("partition", "cut the link A-B (silent drops both ways)"),
                       ("heal", "restore the link A-B")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--run")
        p.add_argument("a")
        p.add_argument("b")
    sub.add_parser("status", help="list runs, their regions and links (JSON)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "up":
            ports = [int(x) for x in args.ports.split(",") if x.strip()]
            wan = Wan(args.spec, ports=ports, run_id=args.run, relay=args.relay,
                      port_offset=args.port_offset, die_with_parent=False)
            wan.up()
            print(json.dumps(wan.describe(), indent=1))
            print(wan.run_id)
        elif args.cmd == "down":
            if args.all or args.stale:
                removed = cleanup_orphans(stale_only=args.stale)
                print(" ".join(removed))
            else:
                Wan.attach(_pick_run(args.run)).down()
        elif args.cmd == "exec":
            wan = Wan.attach(_pick_run(args.run))
            cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not cmd:
                raise WanError("exec: no command; usage: exec REGION -- cmd ...")
            os.execvp("ip", ["ip", "netns", "exec", wan.namespace(args.region)] + cmd)
        elif args.cmd == "addr":
            print(Wan.attach(_pick_run(args.run)).peer_address(args.src, args.dst, args.port))
        elif args.cmd == "partition":
            Wan.attach(_pick_run(args.run)).partition(args.a, args.b)
        elif args.cmd == "heal":
            Wan.attach(_pick_run(args.run)).heal(args.a, args.b)
        elif args.cmd == "status":
            print(json.dumps([Wan.attach(r).describe() for r in list_runs()], indent=1))
    except WanError as e:
        print(f"wan_emulate: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
