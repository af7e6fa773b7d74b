"""PyTorch side of heddle_relay: model specs from modules, the dict-of-tensors Client, and
LocalRegion, an in-process stand-in for one region's relay (the same codec math, no server).

    import heddle_relay as hr
    print(hr.spec_yaml(model, chunk_size=1024))       # the relay config's `model:` block
    c = hr.Client("127.0.0.1:7400", "worker-0", token=tok)
    c.join(model)                                     # spec digest checked against the relay
    r = c.next_round
    c.push(r, {n: delta[n] for n, _ in model.named_parameters()}, tokens=B * H, inner_steps=H)
    agg = c.pull(r)                                   # {name: fp32 tensor}, agg.result.applied
"""

import time

import numpy as np
import torch

from . import _core

_TORCH_DTYPES = {
    torch.float32: _core.DType.FP32,
    torch.bfloat16: _core.DType.BF16,
    torch.float16: _core.DType.FP16,
}


def _relay_dtype(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, _core.DType):
        return dtype
    if isinstance(dtype, str):
        return _core.parse_dtype(dtype)
    if dtype in _TORCH_DTYPES:
        return _TORCH_DTYPES[dtype]
    raise ValueError(f"dtype {dtype}: the relay carries fp32, bf16 or fp16")


def model_spec_from_module(module, chunk_size=_core.DEFAULT_CHUNK_SIZE,
                           slice_elements=_core.DEFAULT_SLICE_ELEMENTS, dtype=None):
    """The relay's ModelSpec for a torch module: one tensor per named_parameters() entry, in
    that order (ids 0, 1, ...), with the parameter's dtype unless `dtype` overrides it (the dtype
    the pseudo-gradients are pushed in)."""
    tensors = []
    for i, (name, p) in enumerate(module.named_parameters()):
        d = _relay_dtype(dtype) if dtype is not None else _TORCH_DTYPES.get(p.dtype)
        if d is None:
            raise ValueError(f"parameter {name}: dtype {p.dtype} is not fp32, bf16 or fp16")
        tensors.append(_core.TensorSpec(id=i, name=name, elements=p.numel(), dtype=d))
    if not tensors:
        raise ValueError("module has no parameters")
    return _core.ModelSpec(tensors, chunk_size=chunk_size, slice_elements=slice_elements)


def spec_yaml(module, **kwargs):
    """YAML of model_spec_from_module(module, **kwargs), for the relay's config."""
    return model_spec_from_module(module, **kwargs).to_yaml()


def _flat(t):
    if isinstance(t, torch.Tensor):
        return t.detach().reshape(-1)
    return np.ascontiguousarray(t).reshape(-1)


class PullTensors(dict):
    """{name: fp32 tensor} of a pulled round; `.result` is the PullResult (applied, included,
    reason, digest, ...)."""

    def __init__(self, tensors, result):
        super().__init__(tensors)
        self.result = result

    @property
    def applied(self):
        return self.result.applied

    @property
    def included(self):
        return self.result.included


class Client:
    """A worker of a region's relay (the C++ RelayClient), speaking {name: tensor} dicts.

    tls: None, or a dict with any of ca, cert, key, server_name (file paths / a name).
    """

    def __init__(self, address, name, token=None, tls=None):
        if not _core.HAVE_CLIENT:
            raise RuntimeError("heddle_relay was built without the relay client library")
        self.address = address
        self.name = name
        self.token = token or ""
        tls = dict(tls or {})
        unknown = set(tls) - {"ca", "cert", "key", "server_name"}
        if unknown:
            raise ValueError(f"tls: unknown keys {sorted(unknown)} (ca, cert, key, server_name)")
        self.tls = tls
        self._c = None
        self._shapes = {}

    # -- membership --
    def join(self, model=None, *, spec=None, region="", tokens_per_s=0.0, half_batch=0.0,
             max_batch=0, memory_bytes=0, fixed_bytes=0, bytes_per_sample=0, seq_len=0,
             rpc_timeout_s=30.0, push_timeout_s=600.0, pull_timeout_s=3600.0,
             error_feedback=True, chunk_size=None, slice_elements=None, dtype=None):
        """Connects and joins. With `model` (a torch module) or `spec` (a ModelSpec) the spec
        digest is checked against the relay's, and pulled tensors take the parameters' shapes.
        chunk_size / slice_elements / dtype: how the module maps onto the relay's spec (default:
        the relay's own chunk and slice sizes, the parameters' dtypes)."""
        digest = 0
        if model is not None:
            self._shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
            if spec is None and chunk_size is not None:
                spec = model_spec_from_module(
                    model, chunk_size=chunk_size,
                    slice_elements=slice_elements or _core.DEFAULT_SLICE_ELEMENTS, dtype=dtype)
        if spec is not None:
            digest = spec.digest
        self._c = _core.RelayClient.connect(
            address=self.address, name=self.name, token=self.token,
            tls_ca_file=self.tls.get("ca", ""), tls_cert_file=self.tls.get("cert", ""),
            tls_key_file=self.tls.get("key", ""),
            tls_server_name=self.tls.get("server_name", ""), region=region,
            tokens_per_s=tokens_per_s, half_batch=half_batch, max_batch=max_batch,
            memory_bytes=memory_bytes, fixed_bytes=fixed_bytes,
            bytes_per_sample=bytes_per_sample, seq_len=seq_len, spec_digest=digest,
            rpc_timeout_s=rpc_timeout_s, push_timeout_s=push_timeout_s,
            pull_timeout_s=pull_timeout_s, error_feedback=error_feedback)
        if model is not None:
            names = [t.name for t in self.spec.tensors]
            missing = [n for n in names if n not in self._shapes]
            if missing:
                raise ValueError(f"the relay's model has tensors the module lacks: {missing}")
        return self

    def leave(self):
        if self._c is not None:
            c, self._c = self._c, None
            c.leave()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.leave()

    def _client(self):
        if self._c is None:
            raise RuntimeError("Client: not joined (call join())")
        return self._c

    # -- state --
    @property
    def spec(self):
        return self._client().spec

    @property
    def plan(self):
        return self._client().plan

    @property
    def next_round(self):
        return self._client().next_round

    @property
    def sender_id(self):
        return self._client().sender_id

    @property
    def region_id(self):
        return self._client().region_id

    def status(self):
        return self._client().status()

    # -- rounds --
    def push(self, round_id, tensors, tokens, inner_steps):
        """tensors: {name: tensor} with every tensor of the spec (any shape, spec dtype: fp32,
        or a bf16/fp16 torch tensor when the spec says so). Returns PushStats."""
        c = self._client()
        ordered = []
        for t in c.spec.tensors:
            if t.name not in tensors:
                raise KeyError(f"push: no tensor {t.name!r} (the relay's spec lists it)")
            ordered.append(_flat(tensors[t.name]))
        extra = set(tensors) - {t.name for t in c.spec.tensors}
        if extra:
            raise KeyError(f"push: tensors not in the relay's spec: {sorted(extra)}")
        return c.push(round_id, ordered, int(tokens), int(inner_steps))

    def retry_push(self, round_id):
        """Resends round_id's frames after a push failed in transport (UNAVAILABLE,
        DEADLINE_EXCEEDED): the same bytes, no new encode."""
        return self._client().retry_push(round_id)

    def pull(self, round_id, out=None):
        """The round's global aggregate as {name: fp32 tensor} (shaped like the parameters when
        join() was given the model), written into `out`'s tensors when given. `.result` holds
        the PullResult; when not `.applied` the buffers are untouched. If it raises, the buffers
        may hold part of the round: do not apply them; pull the round again."""
        c = self._client()
        bufs = {}
        flat = []
        for t in c.spec.tensors:
            if out is not None and t.name in out:
                b = out[t.name]
            else:
                b = torch.zeros(self._shapes.get(t.name, (t.elements,)), dtype=torch.float32)
            bufs[t.name] = b
            flat.append(_flat(b))
        result = c.pull(round_id, flat)
        return PullTensors(bufs, result)

    def report(self, round_id, batch_size, inner_steps, compute_s):
        self._client().report(round_id, int(batch_size), int(inner_steps), float(compute_s))


class LocalRegion:
    """One region's relay and a one-region WAN exchange, in process: the math of a round
    without a server (docs/relay.md §4, §5, §7).

    Each worker's pseudo-gradient is sign-encoded per slice with its own error feedback, the
    region aggregates each slice over the workers (FedNova weights by default), the gateway
    re-encodes the region aggregate with its own error feedback, and the published aggregate is
    that frame's decoding (weight 1: a single region).
    """

    def __init__(self, spec, workers, weighting="fednova", error_feedback=True,
                 gateway_error_feedback=True):
        self.spec = spec
        self.workers = workers
        self.weighting = weighting
        self.slices = spec.slices()
        self.names = {t.id: t.name for t in spec.tensors}
        self.dtypes = {t.id: t.dtype for t in spec.tensors}
        self.encoders = [[_core.SignEncoder(s.count, chunk_size=spec.chunk_size,
                                            error_feedback=error_feedback)
                          for s in self.slices] for _ in range(workers)]
        self.gateway = [_core.SignEncoder(s.count, chunk_size=spec.chunk_size,
                                          error_feedback=gateway_error_feedback)
                        for s in self.slices]
        self.aggregator = _core.Aggregator(max(workers, 1))
        self._frames = {}
        self.bytes_pushed = 0
        self.bytes_published = 0
        self.last_seconds = 0.0

    def push(self, worker, round_id, tensors, tokens, inner_steps):
        """Encodes worker `worker`'s {name: tensor} (spec dtype) into frames for round_id."""
        frames = []
        for s in self.slices:
            x = _flat(tensors[self.names[s.tensor_id]])[s.offset:s.offset + s.count]
            enc = self.encoders[worker][s.index]
            if enc.encode(x, dtype=self.dtypes[s.tensor_id]) != 0:
                raise ValueError(f"worker {worker}: NaN or inf in {self.names[s.tensor_id]}")
            h = _core.slice_header(self.spec, s, round_id, worker)
            h.token_count = int(tokens)
            h.inner_steps = int(inner_steps)
            frames.append(enc.write_frame(h))
            self.bytes_pushed += len(frames[-1])
        self._frames[(round_id, worker)] = frames

    def aggregate(self, round_id):
        """The published aggregate of round_id over the workers that pushed it:
        {name: flat fp32 tensor}."""
        t0 = time.perf_counter()
        senders = sorted(w for (r, w) in self._frames if r == round_id)
        if not senders:
            raise ValueError(f"round {round_id}: no worker pushed")
        out = {t.name: torch.zeros(t.elements, dtype=torch.float32) for t in self.spec.tensors}
        for s in self.slices:
            views = [_core.parse_frame(self._frames[(round_id, w)][s.index]) for w in senders]
            region = self.aggregator.aggregate(views, weighting=self.weighting)
            gw = self.gateway[s.index]
            gw.encode(region)
            h = _core.slice_header(self.spec, s, round_id, 0)
            h.token_count = sum(v.header.token_count for v in views)
            frame = gw.write_frame(h)
            self.bytes_published += len(frame)
            dst = out[self.names[s.tensor_id]][s.offset:s.offset + s.count]
            _core.parse_frame(frame).accumulate(dst, 1.0)
        for w in senders:
            del self._frames[(round_id, w)]
        self.last_seconds = time.perf_counter() - t0
        return out
