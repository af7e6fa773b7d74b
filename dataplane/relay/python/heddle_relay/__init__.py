"""heddle_relay: the GeoMesh relay codec, model spec and worker client for Python.

The compiled half (heddle_relay._core, pybind11) binds the C++ codec and client with zero-copy
buffers and the GIL released in the kernels; this package adds the torch conveniences
(torch_util) and the dict-of-tensors Client. docs/relay-python.md describes the API.

    import heddle_relay as hr
    enc = hr.SignEncoder(n, chunk_size=4096)          # error feedback across rounds
    enc.encode(delta)                                 # numpy or CPU torch tensor, fp32/bf16/fp16
    frame = enc.write_frame(hr.FrameHeader(round_id=1, sender_id=0, token_count=1024))
    agg = hr.Aggregator().aggregate([hr.parse_frame(frame)])   # fp32 numpy array
"""

from ._core import (  # noqa: F401  (re-exported)
    DEFAULT_CHUNK_SIZE,
    DEFAULT_SLICE_ELEMENTS,
    FRAME_HEADER_BYTES,
    HAVE_CLIENT,
    Aggregator,
    DType,
    Frame,
    FrameHeader,
    ModelSpec,
    RelayError,
    SignEncoder,
    SliceRef,
    TensorSpec,
    active_isa,
    check_frame_for_slice,
    compute_weights,
    decode_frame,
    dtype_name,
    frame_bytes,
    model_spec_from_file,
    model_spec_from_string,
    parse_dtype,
    parse_frame,
    slice_header,
)

_TORCH_NAMES = ("Client", "model_spec_from_module", "spec_yaml", "LocalRegion", "torch_util")

__all__ = [
    "DEFAULT_CHUNK_SIZE", "DEFAULT_SLICE_ELEMENTS", "FRAME_HEADER_BYTES", "HAVE_CLIENT",
    "Aggregator", "DType", "Frame", "FrameHeader", "ModelSpec", "RelayError", "SignEncoder",
    "SliceRef", "TensorSpec", "active_isa", "check_frame_for_slice", "compute_weights",
    "decode_frame", "dtype_name", "frame_bytes", "model_spec_from_file",
    "model_spec_from_string", "parse_dtype", "parse_frame", "slice_header", *_TORCH_NAMES,
]

if HAVE_CLIENT:
    from ._core import PullResult, PushStats, RelayClient, RoundStatus, WorkerPlan  # noqa: F401

    __all__ += ["PullResult", "PushStats", "RelayClient", "RoundStatus", "WorkerPlan"]


def __getattr__(name):
    # The torch helpers import torch only when asked for, so the codec works without it.
    if name in _TORCH_NAMES:
        import importlib

        torch_util = importlib.import_module(".torch_util", __name__)
        return torch_util if name == "torch_util" else getattr(torch_util, name)
    raise AttributeError(f"module 'heddle_relay' has no attribute {name!r}")
