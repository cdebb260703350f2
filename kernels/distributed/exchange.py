"""Plain data from every rank, without pickle: ``all_gather_json``.

``torch.distributed.all_gather_object`` pickles what a rank sends and unpickles what it
receives, and unpickling runs whatever code the bytes name. Between the local ranks of one
``launch`` (this process's own children, on loopback) that is harmless; across nodes it would
make every rank trust every peer with code execution, a decision a measurement has no business
making for its user. So ranks exchange JSON instead, over a byte tensor: numbers, strings,
booleans, ``None``, lists (tuples arrive as lists) and dicts with string keys, and NumPy
arrays of the plain dtypes of ``ARRAY_DTYPES`` as their raw bytes in base64. Anything else is
refused before it is sent (``ValueError``). What arrives is decoded by ``json.loads``, which
builds data and never runs code; an array is rebuilt only from a listed dtype and a shape that
matches its bytes, and a rank's message is at most ``MAX_EXCHANGE_BYTES``.
"""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import torch
import torch.distributed as dist

ARRAY_DTYPES = ("float64", "float32", "float16", "int64", "int32", "int8", "uint8", "bool")
MAX_EXCHANGE_BYTES = 2**30
"""The longest message a rank may send or a peer may announce (1 GiB of JSON)."""
_ARRAY = "__ndarray__"


def encode(value: object) -> bytes:
    """``value`` as UTF-8 JSON (module docstring); ``ValueError`` naming what cannot be sent."""
    try:
        text = json.dumps(value, default=_plain, allow_nan=True, separators=(",", ":"))
    except TypeError as err:  # a dict key that is not a string
        raise ValueError(f"cannot exchange {type(value).__name__} between ranks: {err}") from None
    data = text.encode()
    if len(data) > MAX_EXCHANGE_BYTES:
        raise ValueError(
            f"a rank's message is {len(data):,} bytes, more than {MAX_EXCHANGE_BYTES:,}"
        )
    return data


def decode(data: bytes) -> object:
    """What ``encode`` wrote, arrays rebuilt; ``ValueError`` for anything else."""
    try:
        return json.loads(data.decode(), object_hook=_array)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"a peer sent what is not JSON data: {err}") from None


def _plain(value: object) -> object:
    if isinstance(value, np.ndarray):
        if value.dtype.name not in ARRAY_DTYPES:
            raise ValueError(f"cannot exchange an array of dtype {value.dtype} between ranks")
        raw = np.ascontiguousarray(value).tobytes()
        return {_ARRAY: value.dtype.name, "shape": list(value.shape), "data": _b64(raw)}
    if isinstance(value, np.generic) and value.dtype.name in ARRAY_DTYPES:
        return value.item()
    raise ValueError(f"cannot exchange a {type(value).__name__} between ranks: {value!r:.80}")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _array(obj: dict) -> object:
    if _ARRAY not in obj:
        return obj
    dtype, shape = obj[_ARRAY], obj.get("shape")
    if dtype not in ARRAY_DTYPES or not isinstance(shape, list):
        raise ValueError(f"a peer sent an array of dtype {dtype!r}, which is not exchanged")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise ValueError(f"a peer sent an array of shape {shape!r}")
    raw = base64.b64decode(obj.get("data", ""), validate=True)
    if len(raw) != math.prod(shape) * np.dtype(dtype).itemsize:
        raise ValueError(f"a peer sent {len(raw)} bytes for an array {dtype} {shape}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def all_gather_json(value: object, group=None) -> list:
    """``value`` of every rank of ``group`` (the world by default), in rank order: the
    pickle-free ``all_gather_object`` (module docstring). A collective: every rank calls it."""
    data = encode(value)
    device = _device(group)
    ranks = dist.get_world_size(group)
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(ranks)]
    dist.all_gather(sizes, size, group=group)
    lengths = [int(s.item()) for s in sizes]
    if max(lengths) > MAX_EXCHANGE_BYTES or min(lengths) < 0:
        raise ValueError(f"a peer announced a message of {max(lengths):,} bytes")
    longest = max(lengths)
    mine = torch.zeros(longest, dtype=torch.uint8, device=device)
    mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    received = [torch.empty_like(mine) for _ in range(ranks)]
    dist.all_gather(received, mine, group=group)
    return [decode(r[:n].cpu().numpy().tobytes()) for r, n in zip(received, lengths, strict=True)]


def _device(group) -> torch.device:
    """NCCL moves CUDA tensors only; every other backend (gloo) CPU tensors."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
