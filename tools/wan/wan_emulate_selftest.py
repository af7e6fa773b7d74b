#!/usr/bin/python3
"""wan_emulate_selftest: brings up three emulated regions, measures each direction of each link
through the delay relay, tears down, and checks nothing is left behind.

  wan_emulate_selftest.py [--relay build/tools/wan/heddle-wan-delay] [--seconds 0.8]

Asserts, per direction: the ping-pong round trip through the relay is at least the configured
RTT (a lower bound; the measured value is reported), and the bulk throughput measured at the
receiver is > 0 and at most 1.1 x the configured rate (the cap holds). Then partitions a-b (no
new connection completes; an open one stalls and resumes after heal). Exits 77 (ctest: skipped)
when not root or network namespaces are unavailable.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wan_emulate  # noqa: E402

PROBE = os.path.join(HERE, "wan_probe.py")
PORT = 7100
SPEC = {
    "regions": ["a", "b", "c"],
    "links": [
        {"between": ["a", "b"], "rate": "1gbit", "rtt": "40ms"},
        {"between": ["a", "c"], "rate": "1gbit", "rtt": "140ms"},
        {"between": ["b", "c"], "rate": "250mbit", "rtt": "80ms"},
    ],
}


def probe(wan, region, *args):
    p = wan.exec(region, [sys.executable, PROBE, *args], capture_output=True, text=True,
                 timeout=60)
    if p.returncode != 0:
        raise AssertionError(f"probe {args} in {region} failed: {p.stderr}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--relay", help="heddle-wan-delay binary")
    ap.add_argument("--seconds", type=float, default=0.8,
                    help="bulk transfer length per direction, at the configured rate")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (network namespaces, tc)")
        return 77
    if not wan_emulate.netns_available():
        print("SKIP: cannot create network namespaces here")
        return 77

    failures = []
    leftovers = {}
    with wan_emulate.Wan(SPEC, ports=[PORT], relay=args.relay) as wan:
        run_id = wan.run_id
        namespaces = [wan.namespace(r) for r in wan.regions]
        servers = {}
        for r in wan.regions:
            servers[r] = wan.run(r, [sys.executable, PROBE, "serve", "--port", str(PORT)],
                                 stdout=subprocess.PIPE, text=True)
        for r, s in servers.items():
            line = s.stdout.readline().strip()
            assert line == "ready", f"probe server in {r}: {line!r}"
        relay_pids = list(wan._pids)
        print(f"run {run_id}: regions {wan.regions}")
        print(f"{'link':6} {'rtt cfg':>8} {'rtt min':>8} {'rtt med':>8} {'rate cfg':>10} "
              f"{'got':>10} {'ratio':>6}")
        for l in wan.links:
            for src, dst in ((l.a, l.b), (l.b, l.a)):
                to = wan.peer_address(src, dst, PORT)
                cfg_rtt = wan.rtt(src, dst)
                r = probe(wan, src, "rtt", "--to", to, "--count", "5")
                samples = sorted(r["rtt_s"])
                rate = wan.rate(src, dst)
                nbytes = int(rate / 8 * args.seconds)
                t = probe(wan, src, "send", "--to", to, "--bytes", str(nbytes), "--streams", "2")
                print(f"{src}->{dst:3} {cfg_rtt * 1e3:7.1f}ms {samples[0] * 1e3:7.1f}ms "
                      f"{samples[2] * 1e3:7.1f}ms {rate / 1e6:7.0f}Mb/s {t['bps'] / 1e6:7.0f}Mb/s "
                      f"{t['bps'] / rate:6.3f}")
                if samples[0] < cfg_rtt:
                    failures.append(f"{src}->{dst}: round trip {samples[0]:.4f} s < configured "
                                    f"RTT {cfg_rtt:.4f} s")
                if t["bytes"] != nbytes:
                    failures.append(f"{src}->{dst}: {t['bytes']} of {nbytes} bytes arrived")
                if not 0 < t["bps"] <= 1.1 * rate:
                    failures.append(f"{src}->{dst}: throughput {t['bps'] / 1e6:.1f} Mb/s outside "
                                    f"(0, 1.1 x {rate / 1e6:.0f} Mb/s]")
        # A partition drops a-b traffic silently: a new connection cannot complete, and an open
        # one stalls, then carries on after heal() (TCP retransmits what was lost).
        pp = wan.run("a", [sys.executable, PROBE, "pingpong", "--to",
                           wan.peer_address("a", "b", PORT)],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert pp.stdout.readline().strip() == "connected"
        pp.stdin.write("\n")
        pp.stdin.flush()
        float(pp.stdout.readline())
        wan.partition("a", "b")
        cut = wan.exec("a", [sys.executable, PROBE, "rtt", "--to", f"{wan.address('b')}:{PORT}",
                             "--count", "1", "--timeout", "1"], capture_output=True, timeout=30)
        if cut.returncode == 0:
            failures.append("partition(a, b): a connection from a to b still completed")
        pp.stdin.write("\n")
        pp.stdin.flush()
        time.sleep(0.5)
        wan.heal("a", "b")
        stalled = float(pp.stdout.readline())  # blocks until the echo came back
        print(f"partition a-b: new connection refused: {cut.returncode != 0}; a round trip "
              f"sent during the partition completed after heal in {stalled:.2f} s")
        if stalled < 0.5:
            failures.append(f"a round trip crossed the partition ({stalled:.3f} s)")
        pp.stdin.close()
        pp.wait(timeout=30)
        after = probe(wan, "a", "rtt", "--to", wan.peer_address("a", "b", PORT), "--count", "1")
        if after["rtt_s"][0] < wan.rtt("a", "b"):
            failures.append("round trip after heal shorter than the RTT")

        # A port relayed after up(): a second server in c, reached from b with the b-c delays.
        wan.add_port(PORT + 1)
        wan.run("c", [sys.executable, PROBE, "serve", "--port", str(PORT + 1)],
                stdout=subprocess.DEVNULL)
        wan.wait_listening("b", f"{wan.address('c')}:{PORT + 1}")
        late = probe(wan, "b", "rtt", "--to", wan.peer_address("b", "c", PORT + 1), "--count", "2")
        print(f"add_port({PORT + 1}): b->c round trip {min(late['rtt_s']) * 1e3:.1f} ms")
        if min(late["rtt_s"]) < wan.rtt("b", "c"):
            failures.append("add_port: round trip shorter than the b-c RTT")
        # A region reaches itself at the same peer address as everyone else (no delay; the echo
        # is checked by the probe, the time only reported).
        own = probe(wan, "a", "rtt", "--to", wan.peer_address("a", "a", PORT), "--count", "1")
        print(f"a->a through its own relay: {own['rtt_s'][0] * 1e3:.2f} ms")

        m = wan.measure_link("c", "b", seconds=0.5, streams=2)
        print(f"measure_link(c, b): {m['bps'] / 1e6:.0f} Mb/s, ratio {m['ratio']:.3f}, "
              f"rtt {m['rtt_s'] * 1e3:.1f} ms")
        if not 0 < m["ratio"] <= 1.1 or m["rtt_s"] < wan.rtt("c", "b"):
            failures.append(f"measure_link(c, b) out of bounds: {m}")
        relay_pids = list(wan._pids) + [p.pid for p in wan._probe_servers.values()]

        # A port that is not relayed is refused with a clear error.
        try:
            wan.peer_address("a", "b", PORT + 2)
            failures.append("peer_address accepted a port that is not relayed")
        except wan_emulate.WanError:
            pass

    # Nothing may survive the teardown.
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    leftovers["namespaces"] = [n for n in namespaces if n in listed]
    leftovers["processes"] = [p for p in relay_pids + [s.pid for s in servers.values()]
                              if wan_emulate._pid_alive(p) and not wan_emulate._is_zombie(p)]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    # Our veths only ever live inside the namespaces; a root-namespace end would name them.
    leftovers["veths"] = [x for x in links.splitlines() if run_id in x]
    leftovers["state"] = os.path.exists(os.path.join(wan_emulate.STATE_DIR, run_id))
    for what, left in leftovers.items():
        if left:
            failures.append(f"left behind after teardown: {what}: {left}")
    for f in failures:
        print("FAIL:", f)
    print("PASS" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
