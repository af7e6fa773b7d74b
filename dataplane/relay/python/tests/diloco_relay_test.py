"""The DiLoCo example against a real `heddle-relay serve` on loopback: two worker processes, three
rounds; both must end with bit-identical parameters, and the same ones --local mode computes.

Run: PYTHONPATH=build/dataplane/relay/python HEDDLE_BINARY_DIR=build \
       /usr/bin/python3 dataplane/relay/python/tests/diloco_relay_test.py
Exit code 77 (skipped under ctest) when torch or the heddle-relay binary is missing.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e}")
    sys.exit(77)

import heddle_relay as hr

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("HEDDLE_SOURCE_DIR", os.path.join(HERE, "..", "..", "..", ".."))
BINARY_DIR = os.environ.get("HEDDLE_BINARY_DIR", os.path.join(SOURCE, "build"))
RELAY = os.path.join(BINARY_DIR, "tools", "heddle-relay", "heddle-relay")
EXAMPLE = os.path.join(SOURCE, "tools", "heddle-relay", "examples", "diloco_torch.py")
sys.path.insert(0, os.path.dirname(EXAMPLE))
import diloco_torch  # noqa: E402

TOKEN = "diloco-test-token"
TLS = os.path.join(SOURCE, "tests", "data", "relay_tls")  # test-only certificates
CLIENT_TLS = {"ca": f"{TLS}/ca.pem", "cert": f"{TLS}/client.pem", "key": f"{TLS}/client.key"}


class Relay:
    """`heddle-relay serve` on 127.0.0.1, port 0, in a temp dir; stopped by stop()."""

    def __init__(self, tmp, model_yaml, min_workers, tls=False, extra=""):
        self.tmp = tmp
        with open(os.path.join(tmp, "token"), "w") as f:
            f.write(TOKEN + "\n")
        cfg = os.path.join(tmp, "relay.yaml")
        with open(cfg, "w") as f:
            f.write("region: {id: 1, name: test}\n"
                    "listen: 127.0.0.1:0\n"
                    f"token_file: {os.path.join(tmp, 'token')}\n" +
                    (f"tls: {{cert: {TLS}/server.pem, key: {TLS}/server.key, "
                     f"client_ca: {TLS}/ca.pem}}\n" if tls else "") +
                    "model:\n" + "".join("  " + line + "\n" for line in model_yaml.splitlines()) +
                    "round:\n"
                    "  push_timeout_s: 120\n"
                    "  missing: abort\n"
                    f"  min_workers: {min_workers}\n" + extra)
        port_file = os.path.join(tmp, "port")
        self.log = open(os.path.join(tmp, "serve.log"), "w")
        self.proc = subprocess.Popen([RELAY, "serve", "--config", cfg, "--port-file", port_file],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        # The port file appears (renamed into place) once the server listens.
        for _ in range(600):
            if os.path.exists(port_file) or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if not os.path.exists(port_file):
            self.stop()
            raise RuntimeError(f"heddle-relay serve did not start: {self.output()}")
        with open(port_file) as f:
            self.address = f"127.0.0.1:{int(f.read())}"

    def output(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def spec_yaml(*args):
    a = diloco_torch.parse_args(["--print-spec", *args])
    return diloco_torch.spec_of(diloco_torch.make_model(a.seed), a).to_yaml()


def run_workers(relay, tmp, n, rounds, *extra):
    procs = []
    for i in range(n):
        cmd = [sys.executable, EXAMPLE, "--relay", relay.address, "--token", TOKEN,
               "--name", f"w{i}", "--index", str(i), "--rounds", str(rounds), "--quiet",
               "--json", "--save", os.path.join(tmp, f"w{i}.pt"), *extra]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = []
    for i, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"worker {i} did not finish; relay log:\n{relay.output()}")
        if p.returncode != 0:
            raise AssertionError(f"worker {i} exited {p.returncode}:\n{err}\n"
                                 f"relay log:\n{relay.output()}")
        results.append((json.loads(out.strip().splitlines()[-1]),
                        torch.load(os.path.join(tmp, f"w{i}.pt"))))
    return results


def skip_without_relay():
    if not os.access(RELAY, os.X_OK):
        raise unittest.SkipTest(f"no heddle-relay binary at {RELAY}")


class TwoWorkersTest(unittest.TestCase):
    def test_two_workers_end_bit_identical(self):
        skip_without_relay()
        with tempfile.TemporaryDirectory() as tmp:
            relay = Relay(tmp, spec_yaml(), min_workers=2)
            try:
                results = run_workers(relay, tmp, 2, 3)
            finally:
                relay.stop()
        (log0, p0), (log1, p1) = results
        self.assertEqual(len(log0["digests"]), 3)
        self.assertEqual(log0["digests"], log1["digests"])  # the same aggregate every round
        self.assertEqual(log0["losses"], log1["losses"])
        self.assertEqual(sorted(p0), sorted(p1))
        for n in p0:
            self.assertTrue(torch.equal(p0[n], p1[n]), n)
        self.assertLess(log0["losses"][-1], log0["losses"][0])
        # The relay computed what LocalRegion computes: per-worker error feedback, FedNova
        # weights 1/2 each (two senders: the sum does not depend on their order), the gateway's
        # re-encoding, weight 1 for a single region.
        local = diloco_torch.main(["--local", "--quiet", "--workers", "2", "--rounds", "3"])
        self.assertEqual(local["losses"], log0["losses"])
        for n in p0:
            self.assertTrue(torch.equal(local["params"][n], p0[n]), n)


class PlannedWorkersTest(unittest.TestCase):
    PLANNER = ("planner:\n"
               "  target_round_s: 0.2\n"
               "  seq_len: 1\n"
               "  min_inner_steps: 4\n"
               "  max_inner_steps: 12\n")

    def test_inner_steps_and_batch_from_the_plan(self):
        skip_without_relay()
        with tempfile.TemporaryDirectory() as tmp:
            relay = Relay(tmp, spec_yaml(), min_workers=2, extra=self.PLANNER)
            try:
                results = run_workers(relay, tmp, 2, 2, "--max-batch", "64")
            finally:
                relay.stop()
        (log0, p0), (log1, p1) = results
        for log in (log0, log1):
            self.assertEqual(len(log["plans"]), 2)
            for steps, batch in log["plans"]:
                # The relay's plan, not the example's defaults (H = 20, B = 32).
                self.assertTrue(4 <= steps <= 12, log["plans"])
                self.assertTrue(1 <= batch <= 64, log["plans"])
        self.assertEqual(log0["digests"], log1["digests"])
        for n in p0:
            self.assertTrue(torch.equal(p0[n], p1[n]), n)
        self.assertLess(log0["losses"][-1], log0["losses"][0])


class SingleWorkerTest(unittest.TestCase):
    def test_bf16_push_mutual_tls_auth_and_spec_check(self):
        skip_without_relay()
        tls_args = ["--tls-ca", CLIENT_TLS["ca"], "--tls-cert", CLIENT_TLS["cert"],
                    "--tls-key", CLIENT_TLS["key"]]
        with tempfile.TemporaryDirectory() as tmp:
            relay = Relay(tmp, spec_yaml("--push-dtype", "bf16"), min_workers=1, tls=True)
            try:
                model = diloco_torch.make_model(0)
                # No token, or a wrong one: refused with the relay's status code and message.
                with self.assertRaises(hr.RelayError) as cm:
                    hr.Client(relay.address, "intruder", tls=CLIENT_TLS).join(
                        model, rpc_timeout_s=10)
                self.assertEqual(cm.exception.code, "UNAUTHENTICATED", str(cm.exception))
                with self.assertRaises(hr.RelayError) as cm:
                    hr.Client(relay.address, "intruder", token="wrong", tls=CLIENT_TLS).join(
                        model, rpc_timeout_s=10)
                self.assertEqual(cm.exception.code, "PERMISSION_DENIED", str(cm.exception))
                # Without a client certificate the TLS handshake fails (the join keeps trying
                # until its deadline, as it does while a relay starts).
                with self.assertRaises(hr.RelayError) as cm:
                    hr.Client(relay.address, "nocert", token=TOKEN,
                              tls={"ca": CLIENT_TLS["ca"]}).join(model, rpc_timeout_s=2)
                self.assertIn(cm.exception.code, ("UNAVAILABLE", "DEADLINE_EXCEEDED"),
                              str(cm.exception))
                # A model that does not match the relay's spec is refused at join.
                with self.assertRaises(hr.RelayError) as cm:
                    hr.Client(relay.address, "other", token=TOKEN, tls=CLIENT_TLS).join(
                        model, chunk_size=256, slice_elements=4096, rpc_timeout_s=10)
                self.assertIn("digest", str(cm.exception).lower())
                (log, params), = run_workers(relay, tmp, 1, 2, "--push-dtype", "bf16", *tls_args)
            finally:
                relay.stop()
        local = diloco_torch.main(["--local", "--quiet", "--workers", "1", "--rounds", "2",
                                   "--push-dtype", "bf16"])
        self.assertEqual(local["losses"], log["losses"])
        for n in params:
            self.assertTrue(torch.equal(local["params"][n], params[n]), n)


class ClientThreadsTest(unittest.TestCase):
    """Two clients in one process: one thread waits in pull while the other pushes, which only
    works if pull releases the GIL while it waits. Both get the aggregate LocalRegion computes."""

    def test_pull_waits_without_the_gil(self):
        skip_without_relay()
        n = 1000
        spec = hr.model_spec_from_string(
            "chunk_size: 64\nslice_elements: 512\ntensors: [{name: w, elements: 1000}]")
        rng = np.random.default_rng(3)
        deltas = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
        with tempfile.TemporaryDirectory() as tmp:
            relay = Relay(tmp, spec.to_yaml(), min_workers=2)
            try:
                # A bounded pull: without the GIL release the test fails instead of hanging.
                c = [hr.Client(relay.address, f"t{i}", token=TOKEN).join(spec=spec,
                                                                         pull_timeout_s=20)
                     for i in range(2)]
                r = c[0].next_round
                self.assertEqual(c[1].next_round, r)
                outs = [np.full(n, np.nan, np.float32) for _ in range(2)]
                results, errors = [None, None], []
                pushed = threading.Event()

                def first():
                    try:
                        c[0].push(r, {"w": deltas[0]}, tokens=100, inner_steps=4)
                        pushed.set()
                        results[0] = c[0].pull(r, out={"w": outs[0]})
                    except Exception as e:  # reported below
                        errors.append(e)
                        pushed.set()

                t = threading.Thread(target=first)
                t.start()
                pushed.wait()
                # The first thread is now in pull (or about to be): its GIL must be free.
                stats = c[1].push(r, {"w": deltas[1]}, tokens=100, inner_steps=4)
                results[1] = c[1].pull(r, out={"w": outs[1]})
                t.join(timeout=120)
                self.assertFalse(t.is_alive())
                self.assertEqual(errors, [])
                for cl in c:
                    cl.leave()
            finally:
                relay.stop()
        self.assertEqual(stats.frame_bytes, hr.frame_bytes(512, 64) + hr.frame_bytes(488, 64))
        for res, out in zip(results, outs):
            self.assertTrue(res.applied and res.included)
            self.assertEqual(res.result.tokens, 200)
            self.assertIs(res["w"], out)
        self.assertEqual(results[0].result.digest, results[1].result.digest)
        self.assertEqual(outs[0].tobytes(), outs[1].tobytes())
        local = hr.LocalRegion(spec, 2)
        for i in range(2):
            local.push(i, r, {"w": torch.from_numpy(deltas[i])}, 100, 4)
        self.assertEqual(local.aggregate(r)["w"].numpy().tobytes(), outs[0].tobytes())


if __name__ == "__main__":
    if not os.access(RELAY, os.X_OK):
        print(f"skipped: no heddle-relay binary at {RELAY}")
        sys.exit(77)
    unittest.main()
