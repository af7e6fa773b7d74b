"""The DiLoCo example (tools/heddle-relay/examples/diloco_torch.py) in --local mode: workers in
process, the relay's math (per-worker error-feedback sign frames, FedNova aggregate, gateway
re-encoding) done by heddle_relay.LocalRegion. The held-out loss must go down.

Run: PYTHONPATH=build/dataplane/relay/python /usr/bin/python3 dataplane/relay/python/tests/diloco_local_test.py
Exit code 77 (skipped under ctest) when torch is missing.
"""

import os
import sys
import unittest

try:
    import torch
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e}")
    sys.exit(77)

import heddle_relay as hr

SOURCE = os.environ.get("HEDDLE_SOURCE_DIR",
                        os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "tools", "heddle-relay", "examples"))
import diloco_torch  # noqa: E402


def run(*extra):
    return diloco_torch.main(["--local", "--quiet", "--rounds", "20", *extra])


class DilocoLocalTest(unittest.TestCase):
    def test_loss_goes_down(self):
        losses = run("--workers", "2")["losses"]
        self.assertEqual(len(losses), 21)
        # The initial model is far off (loss ≈ 2.2); twenty rounds bring it to about a twentieth
        # of that (≈ 0.11), and the last rounds sit well below the first ones.
        self.assertLess(losses[-1], 0.15 * losses[0])
        self.assertLess(sum(losses[-3:]) / 3, 0.5 * sum(losses[1:4]) / 3)

    def test_uneven_steps_bf16_push_four_workers(self):
        losses = run("--workers", "4", "--uneven", "--push-dtype", "bf16")["losses"]
        self.assertLess(losses[-1], 0.1 * losses[0])

    def test_deterministic(self):
        a, b = run("--workers", "3")["params"], run("--workers", "3")["params"]
        for n in a:
            self.assertTrue(torch.equal(a[n], b[n]), n)

    def test_outer_step_uses_the_aggregate(self):
        # One worker, error feedback everywhere: the published aggregate is the gateway's
        # re-encoding of the worker's own decoded frame; the outer step must move θ by
        # exactly SGD-Nesterov's first step, lr · (1 + momentum) · Δ̄.
        torch.manual_seed(0)
        model = diloco_torch.make_model(0)
        spec = hr.model_spec_from_module(model, chunk_size=64, slice_elements=4096)
        region = hr.LocalRegion(spec, 1)
        delta = {n: torch.randn_like(p) for n, p in model.named_parameters()}
        region.push(0, 1, delta, 100, 5)
        agg = region.aggregate(1)
        for n, p in model.named_parameters():
            enc = hr.SignEncoder(p.numel(), chunk_size=64)
            enc.encode(delta[n])
            once = hr.decode_frame(enc.write_frame(hr.FrameHeader(round_id=1, token_count=1)))
            gw = hr.SignEncoder(p.numel(), chunk_size=64)
            gw.encode(once)
            twice = hr.decode_frame(gw.write_frame(hr.FrameHeader(round_id=1, token_count=1)))
            self.assertTrue(torch.equal(agg[n], torch.from_numpy(twice)), n)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        args = diloco_torch.parse_args(["--local"])
        opt = diloco_torch.outer_optimizer(model, args)
        diloco_torch.outer_step(model, opt, agg)
        for n, p in model.named_parameters():
            want = before[n] - 0.7 * (agg[n].reshape(p.shape) * 1.9)
            torch.testing.assert_close(p.detach(), want, rtol=0, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
