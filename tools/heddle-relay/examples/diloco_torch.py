#!/usr/bin/env python3
"""DiLoCo through the GeoMesh relay: a small PyTorch model trained by workers that meet once a
round (docs/relay-python.md).

Each worker holds a copy of the global parameters θ. A round: copy θ into the local model, run
H inner AdamW steps on the worker's own data, form the pseudo-gradient Δ = θ − θ_local, push it
(sign-compressed with error feedback), pull the round's aggregate Δ̄ (bit-identical on every
worker) and apply the outer step θ ← SGD(lr=0.7, momentum=0.9, nesterov=True) with Δ̄ as the
gradient (OpenDiLoCo's defaults). The inner optimizer keeps its state across rounds.

The task: regression onto a fixed random "teacher" MLP (16 → 32 → 1, tanh) with a little noise;
the model is a 16 → 64 → 64 → 1 MLP (5 313 parameters). CPU, well under a second a round.

  # no server: K workers in this process, the relay's math done by heddle_relay.LocalRegion
  PYTHONPATH=build/dataplane/relay/python python3 diloco_torch.py --local --workers 4 --rounds 20

  # the relay's model block for this model
  PYTHONPATH=build/dataplane/relay/python python3 diloco_torch.py --print-spec

  # one process per worker against a relay
  PYTHONPATH=... python3 diloco_torch.py --relay 127.0.0.1:7400 --name w0 --index 0 --rounds 20
  PYTHONPATH=... python3 diloco_torch.py --relay 127.0.0.1:7400 --name w1 --index 1 --rounds 20

Inner steps and batch come from the relay's plan when it has one, else from --inner-steps and
--batch. Each round prints the held-out loss of the global model.
"""

import argparse
import json
import sys
import time

import torch

import heddle_relay as hr

IN_DIM = 16


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(IN_DIM, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 1))


class Task:
    """y = teacher(x) + 0.01·noise, x ~ N(0, I). Every worker samples its own stream."""

    def __init__(self, seed):
        g = torch.Generator().manual_seed(10_000 + seed)
        self.w1 = torch.randn(IN_DIM, 32, generator=g) / IN_DIM ** 0.5
        self.w2 = torch.randn(32, 1, generator=g) / 32 ** 0.5
        ge = torch.Generator().manual_seed(20_000 + seed)
        self.eval_x = torch.randn(1024, IN_DIM, generator=ge)
        self.eval_y = self.teacher(self.eval_x)

    def teacher(self, x):
        return torch.tanh(x @ self.w1) @ self.w2 * 2.0

    def batch(self, gen, size):
        x = torch.randn(size, IN_DIM, generator=gen)
        return x, self.teacher(x) + 0.01 * torch.randn(size, 1, generator=gen)

    @torch.no_grad()
    def loss(self, model):
        return torch.nn.functional.mse_loss(model(self.eval_x), self.eval_y).item()


class Worker:
    """A local model, its inner AdamW (state kept across rounds) and its data stream."""

    def __init__(self, args, index):
        self.model = make_model(args.seed)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.inner_lr,
                                     weight_decay=0.01)
        self.gen = torch.Generator().manual_seed(args.seed * 1000 + index + 1)

    def inner_loop(self, global_model, task, steps, batch):
        """Runs `steps` AdamW steps from the global parameters; returns Δ = θ − θ_local
        ({name: tensor}) and the tokens (samples) processed."""
        self.model.load_state_dict(global_model.state_dict())
        for _ in range(steps):
            x, y = task.batch(self.gen, batch)
            self.opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(self.model(x), y).backward()
            self.opt.step()
        local = dict(self.model.named_parameters())
        with torch.no_grad():
            delta = {n: (p - local[n]).detach() for n, p in global_model.named_parameters()}
        return delta, steps * batch


def outer_optimizer(model, args):
    return torch.optim.SGD(model.parameters(), lr=args.outer_lr, momentum=args.outer_momentum,
                           nesterov=True)


def outer_step(model, opt, aggregate):
    """θ ← SGD step with the pulled aggregate Δ̄ as the gradient."""
    for n, p in model.named_parameters():
        p.grad = aggregate[n].reshape(p.shape).to(p.dtype)
    opt.step()
    opt.zero_grad(set_to_none=True)


def spec_of(model, args):
    return hr.model_spec_from_module(model, chunk_size=args.chunk_size,
                                     slice_elements=args.slice_elements,
                                     dtype=args.push_dtype)


def to_push_dtype(delta, args):
    if args.push_dtype is None:
        return delta
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.push_dtype]
    return {n: t.to(dt) for n, t in delta.items()}


def log(args, round_id, loss, extra=""):
    if not args.quiet:
        print(f"round {round_id:4d}  loss {loss:.5f}{extra}", flush=True)


def run_local(args):
    """K workers in process; heddle_relay.LocalRegion does the relay's part."""
    task = Task(args.seed)
    global_model = make_model(args.seed)
    opt = outer_optimizer(global_model, args)
    workers = [Worker(args, i) for i in range(args.workers)]
    spec = spec_of(global_model, args)
    region = hr.LocalRegion(spec, args.workers, weighting=args.weighting)
    losses = [task.loss(global_model)]
    log(args, 0, losses[0], "  (initial)")
    fp32_bytes = 4 * spec.total_elements
    for r in range(1, args.rounds + 1):
        t0 = time.perf_counter()
        for i, w in enumerate(workers):
            steps = args.inner_steps if not args.uneven else args.inner_steps * (i + 1)
            delta, tokens = w.inner_loop(global_model, task, steps, args.batch)
            region.push(i, r, to_push_dtype(delta, args), tokens, steps)
        pushed = region.bytes_pushed
        aggregate = region.aggregate(r)
        outer_step(global_model, opt, aggregate)
        losses.append(task.loss(global_model))
        per_worker = pushed / args.workers / r
        log(args, r, losses[-1], f"  ({time.perf_counter() - t0:.2f}s, "
            f"{per_worker:.0f} B/worker pushed, {fp32_bytes / per_worker:.1f}x vs fp32)")
    return {"losses": losses, "params": params_of(global_model)}


def run_relay(args):
    """One worker against a relay (`heddle-relay serve`)."""
    task = Task(args.seed)
    global_model = make_model(args.seed)
    opt = outer_optimizer(global_model, args)
    worker = Worker(args, args.index)
    tls = {k: v for k, v in (("ca", args.tls_ca), ("cert", args.tls_cert),
                             ("key", args.tls_key)) if v}
    client = hr.Client(args.relay, args.name, token=args.token, tls=tls or None)
    client.join(global_model, chunk_size=args.chunk_size, slice_elements=args.slice_elements,
                dtype=args.push_dtype, tokens_per_s=args.tokens_per_s, max_batch=args.max_batch)
    losses = [task.loss(global_model)]
    log(args, 0, losses[0], f"  (initial; sender {client.sender_id}, "
        f"first round {client.next_round})")
    digests, plans = [], []
    # The aggregate is pulled straight into these buffers, which serve as the outer gradients.
    grads = {n: torch.zeros_like(p) for n, p in global_model.named_parameters()}
    try:
        for _ in range(args.rounds):
            r = client.next_round
            plan = client.plan
            steps = plan.inner_steps if plan.valid and plan.inner_steps > 0 else args.inner_steps
            batch = plan.batch_size if plan.valid and plan.batch_size > 0 else args.batch
            t0 = time.perf_counter()
            delta, tokens = worker.inner_loop(global_model, task, steps, batch)
            compute_s = time.perf_counter() - t0
            try:
                client.push(r, to_push_dtype(delta, args), tokens, steps)
            except hr.RelayError as e:
                if e.code != "FAILED_PRECONDITION":
                    raise
                # Too late for round r: the client kept the update in its residual; still pull.
                print(f"round {r}: push refused ({e}); pulling", file=sys.stderr)
            agg = client.pull(r, out=grads)
            if agg.applied:
                outer_step(global_model, opt, agg)
            digests.append(agg.result.digest)
            plans.append([steps, batch])
            client.report(r, batch, steps, compute_s)
            losses.append(task.loss(global_model))
            note = "" if agg.included else f"  (not included: {agg.result.reason})"
            if not agg.applied:
                note = f"  (aborted: {agg.result.reason})"
            log(args, r, losses[-1], f"  (H={steps} B={batch}, {compute_s:.2f}s compute, "
                f"{agg.result.bytes} B pulled){note}")
    finally:
        client.leave()
    return {"losses": losses, "params": params_of(global_model), "digests": digests,
            "plans": plans}


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--local", action="store_true", help="no server: workers in process")
    mode.add_argument("--relay", metavar="ADDRESS", help="the region relay, host:port")
    mode.add_argument("--print-spec", action="store_true",
                      help="print the relay's `model:` block for this model and exit")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--workers", type=int, default=2, help="--local: workers in process")
    p.add_argument("--uneven", action="store_true",
                   help="--local: worker i runs (i+1)·H inner steps (FedNova weighting matters)")
    p.add_argument("--weighting", choices=["fednova", "tokens"], default="fednova")
    p.add_argument("--inner-steps", type=int, default=20, help="H when the relay has no plan")
    p.add_argument("--batch", type=int, default=32, help="batch when the relay has no plan")
    p.add_argument("--inner-lr", type=float, default=3e-3)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--chunk-size", type=int, default=256)
    p.add_argument("--slice-elements", type=int, default=4096)
    p.add_argument("--push-dtype", choices=["fp32", "bf16", "fp16"], default=None,
                   help="dtype the pseudo-gradient is pushed in (default: the parameters')")
    p.add_argument("--seed", type=int, default=0, help="model init and task; equal on all workers")
    p.add_argument("--name", default="worker-0")
    p.add_argument("--index", type=int, default=0, help="this worker's data stream")
    p.add_argument("--token", default=None, help="the relay's bearer token")
    p.add_argument("--tls-ca")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--tokens-per-s", type=float, default=20000.0,
                   help="throughput told to the planner")
    p.add_argument("--max-batch", type=int, default=256, help="largest batch, for the planner")
    p.add_argument("--save", metavar="PATH", help="write the final parameters (torch.save)")
    p.add_argument("--json", action="store_true", help="print the losses as JSON at the end")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    if args.print_spec:
        print(spec_of(make_model(args.seed), args).to_yaml(), end="")
        return None
    result = run_local(args) if args.local else run_relay(args)
    if args.save:
        torch.save(result["params"], args.save)
    if args.json:
        print(json.dumps({"losses": result["losses"],
                          "digests": [f"{d:016x}" for d in result.get("digests", [])],
                          "plans": result.get("plans", [])}))
    return result


if __name__ == "__main__":
    main()
