"""Bytes per host, and the longest context that fits, for each way of running a long sequence.

A training step of a LLaMA-shaped model on ``P`` hosts needs, on every host (bytes, element
size ``e`` = 2 for bf16/fp16, 4 for fp32; ``b`` batch, ``h`` = d_model, ``L`` layers):

* **model states** under FSDP (ZeRO-3), sharded over all ``P`` hosts: ``16 N / P`` for ``N``
  parameters. Mixed-precision Adam holds 2 (bf16 weights) + 2 (bf16 grads) + 4 (fp32 master
  weights) + 4 + 4 (Adam moments) = 16 bytes per parameter; pure fp32 (what the paper ran on
  GPUs) holds 4 + 4 + 4 + 4 = 16 as well.
* **FSDP working copy**: one layer's weights gathered in full, and its unsharded gradient
  before the reduce-scatter: ``2 e N_layer``.
* **checkpoints**: full gradient checkpointing (the paper's ``nothing_saveable`` policy) keeps
  one ``h``-vector per token per layer, ``L b t h e`` for the ``t`` tokens a host owns.
* **logits**: the loss needs the ``t x vocab`` logits of the host's tokens, in fp32.
* **layer working set**: the largest activation of the one layer being (re)computed, per the
  paper's Table 1 (below).

Table 1 of Liu, Zaharia & Abbeel (2023), "bytes per layer, assuming bfloat16", with ``n``
heads, ``s`` sequence, ``c`` block size:

=========================  ================  ========  ==========
method                     self-attention    FFN       total
=========================  ================  ========  ==========
vanilla                    ``2bns^2``        ``8bsh``  ``2bhs^2``
memory-efficient attn      ``2bsh + 4bch``   ``8bsh``  ``8bsh``
+ blockwise FFN (BPT)      ``2bsh``          ``2bsh``  ``2bsh``
Ring Attention             ``6bch``          ``2bch``  ``6bch``
=========================  ================  ========  ==========

The total is the larger of the two phases (attention and FFN are never live together); the
vanilla total ``2bhs^2`` reads as a slip for ``2bns^2``. We keep the table's structure and make
three things explicit, in elements times ``e``:

* ``8bsh`` is the ``4h``-wide hidden of a ReLU FFN; LLaMA's gated FFN keeps gate and up
  outputs, ``2 f`` wide (``f`` = ffn hidden), so the FFN term is ``b s 2f e``.
* The ring holds **six blocks** (query, current key and value, incoming key and value, output).
  Six blocks of ``b c h`` elements are ``6 b c h e`` = ``12bch`` bytes in bf16; the paper's
  ``6bch`` counts elements, not bytes (a factor 2 against its own bf16 convention). With GQA
  the four key/value blocks are ``h_kv = kv_heads * head_dim`` wide.
* ``c`` of memory-efficient attention is its kernel chunk (``KERNEL_CHUNK`` tokens); ``c`` of
  the ring is the host's block, ``s / P``.

Per method, on ``P`` hosts (``t`` = tokens a host owns):

* ``vanilla``, ``memory_efficient``, ``blockwise``: one whole sequence per host (the paper's FSDP
  baselines: data parallel over sequences), ``t = s``. More hosts help only by sharding states.
* ``ring``: one sequence split over all hosts, ``t = c = s / P``; every term but the states is
  proportional to ``s / P``, so the longest context grows in proportion to ``P``.
* ``ulysses``: the sequence is split over ``d = min(P, kv_heads)`` hosts (an all-to-all re-shards
  by heads, which cannot split a key/value head; extra hosts run data parallel), ``t = s / d``.
  At the all-to-all a host holds its own q/k/v shard and the head-sharded full-length copy:
  ``b (s/d) (2h + 4h_kv)`` elements, the same six blocks as the ring while ``P <= kv_heads``;
  past that the context stops growing.

All of that is the **pure tensor bound**. A framework takes its share of the device first
(``ringsim.timer.step.frameworks``: CUDA context, NCCL buffers, BLAS workspaces, an allocator's pool
cap and fragmentation, each from a published measurement or documented default);
``max_context(..., framework=...)`` searches within what it leaves, and ``memory_report``
reports both. The models live in ``ringsim.timer.step.models``, the paper's Table 3 in
``ringsim.timer.studies.published``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ringsim.checks import check_choice, check_instance, check_positive_int
from ringsim.timer.cost import DTYPE_BYTES
from ringsim.timer.machine.hardware import Hardware, check_dtype, get_hardware
from ringsim.timer.step.frameworks import Framework, default_framework, get_framework
from ringsim.timer.step.models import ModelSpec, get_model

STATE_BYTES_PER_PARAM = 16
"""FSDP model states per parameter: bf16 weights + grads, fp32 master and two Adam moments."""

LOGIT_BYTES = 4
"""The loss is taken over fp32 logits."""

KERNEL_CHUNK = 512
"""Query/key chunk of a memory-efficient attention kernel (the paper's code uses 512)."""

TOKEN_UNIT = 256
"""Contexts are reported as multiples of 256 tokens per host sharing the sequence."""


def _check_dtype(dtype: object) -> int:
    """Bytes per element of ``dtype``."""
    return int(DTYPE_BYTES[check_dtype(dtype)])


def _check_method(method: object) -> str:
    return check_choice("method", method, METHODS)


def ulysses_degree(model: str | ModelSpec, hosts: int) -> int:
    """Hosts one sequence is split over by Ulysses: at most one per key/value head."""
    return sequence_hosts("ulysses", model, hosts)


def sequence_hosts(method: str, model: str | ModelSpec, hosts: int) -> int:
    """How many hosts share one sequence: 1 for the single-device methods."""
    method = _check_method(method)
    return METHODS[method].split(get_model(model), check_positive_int("hosts", hosts))


# -- the layer working set (Table 1) ---------------------------------------------------------
# Each method: (attention, ffn) peak elements of one layer of ``m`` at batch ``b`` and sequence
# ``s``, ``split`` hosts sharing the sequence (``c = s / split`` tokens each).
def _vanilla(m: ModelSpec, s: int, split: int, b: int) -> tuple[float, float]:
    return b * m.heads * s * s, b * s * 2 * m.ffn_hidden


def _memory_efficient(m: ModelSpec, s: int, split: int, b: int) -> tuple[float, float]:
    h = m.d_model
    return b * s * h + 2 * b * min(KERNEL_CHUNK, s) * h, b * s * 2 * m.ffn_hidden


def _blockwise(m: ModelSpec, s: int, split: int, b: int) -> tuple[float, float]:
    return b * s * m.d_model, b * s * m.d_model


def _ring(m: ModelSpec, s: int, split: int, b: int) -> tuple[float, float]:
    c, h, h_kv = s / split, m.d_model, m.n_kv_heads * m.head_dim
    return b * c * (2 * h + 4 * h_kv), b * c * h


def _ulysses(m: ModelSpec, s: int, split: int, b: int) -> tuple[float, float]:
    """Own q/k/v shard plus the head-sharded full-length copy, during the all-to-all."""
    c, h, h_kv = s / split, m.d_model, m.n_kv_heads * m.head_dim
    heads_here = math.ceil(m.heads / split) * m.head_dim
    kv_here = math.ceil(m.n_kv_heads / split) * m.head_dim
    return b * c * (h + 2 * h_kv) + b * s * (heads_here + 2 * kv_here), b * c * h


@dataclass(frozen=True)
class Method:
    """One way to hold a long sequence: its layer working set (``elements``) and how many of
    ``hosts`` hosts share one sequence (``split``)."""

    elements: Callable[[ModelSpec, int, int, int], tuple[float, float]]
    split: Callable[[ModelSpec, int], int] = lambda m, hosts: 1


METHODS: dict[str, Method] = {
    "vanilla": Method(_vanilla),
    "memory_efficient": Method(_memory_efficient),
    "blockwise": Method(_blockwise),
    "ring": Method(_ring, lambda m, hosts: hosts),
    "ulysses": Method(_ulysses, lambda m, hosts: min(hosts, m.n_kv_heads)),
}
"""The paper's Table 3 methods and Ulysses; the single-device ones hold one whole sequence."""


def bytes_per_host(
    method: str,
    model: str | ModelSpec,
    seq_len: int,
    hosts: int,
    *,
    dtype: str = "bf16",
    batch: int = 1,
) -> dict[str, float]:
    """Bytes on one of ``hosts`` hosts for a training step at context ``seq_len``, by component.

    Components: ``model_states``, ``fsdp_layer``, ``checkpoints``, ``logits``,
    ``layer_working_set`` (see the module docstring for each formula).
    """
    method = _check_method(method)
    m = get_model(model)
    e = _check_dtype(dtype)
    hosts = check_positive_int("hosts", hosts)
    seq_len = check_positive_int("seq_len", seq_len)
    batch = check_positive_int("batch", batch)
    split = sequence_hosts(method, m, hosts)
    tokens = batch * seq_len / split
    attention, ffn = METHODS[method].elements(m, seq_len, split, batch)
    return {
        "model_states": STATE_BYTES_PER_PARAM * m.params / hosts,
        "fsdp_layer": 2.0 * e * m.layer_params,
        "checkpoints": float(m.layers * tokens * m.d_model * e),
        "logits": float(tokens * m.vocab * LOGIT_BYTES),
        "layer_working_set": float(max(attention, ffn) * e),
    }


def _largest_fitting(bytes_at: Callable[[int], float], budget: float, unit: int) -> int:
    """Largest multiple ``n * unit`` with ``bytes_at(n * unit) <= budget`` (0 if none)."""
    if bytes_at(unit) > budget:
        return 0
    low, high = 1, 2  # invariant: low fits; search high until it does not
    while bytes_at(high * unit) <= budget:
        low, high = high, 2 * high
        if high * unit > 2**50:  # a petatoken: the budget is effectively unbounded
            return low * unit
    while high - low > 1:
        mid = (low + high) // 2
        if bytes_at(mid * unit) <= budget:
            low = mid
        else:
            high = mid
    return low * unit


def max_context(
    method: str,
    model: str | ModelSpec,
    hardware: Hardware | str,
    hosts: int,
    *,
    dtype: str = "bf16",
    batch: int = 1,
    framework: str | Framework = "none",
) -> int:
    """Longest context (tokens) whose bytes per host fit in what ``framework`` leaves of
    ``hardware.memory_bytes`` (``ringsim.timer.step.frameworks``; ``none``: the whole device, the
    pure tensor bound).

    A multiple of ``TOKEN_UNIT`` times the hosts that share the sequence, so each host's block
    is a whole number of 256-token tiles; 0 if not even one unit fits.
    """
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware
    unit = TOKEN_UNIT * sequence_hosts(method, model, hosts)
    budget = get_framework(framework).usable_bytes(hw.memory_bytes)

    def total(seq_len: int) -> float:
        parts = bytes_per_host(method, model, seq_len, hosts, dtype=dtype, batch=batch)
        return sum(parts.values())

    return _largest_fitting(total, budget, unit)


def memory_report(
    model: str | ModelSpec,
    hardware: Hardware | str,
    hosts: int,
    *,
    dtype: str = "bf16",
    batch: int = 1,
    framework: str | Framework | None = None,
) -> dict:
    """Longest context per method, and the ring's bytes per host at its longest context.

    ``framework`` (default: ``pytorch`` on a GPU, ``none`` on a TPU or CPU) takes its fixed
    bytes, pool cap and fragmentation off the device first; the pure tensor bound (the whole
    device for tensors) is reported beside it.

    Keys: ``max_context`` {method: tokens}, ``max_context_tensors`` {method: tokens, the pure
    tensor bound}, ``framework``, ``framework_source``, ``usable_bytes`` (what the framework
    leaves), ``bytes_per_host`` {component: bytes} (ring), ``total_bytes_per_host``,
    ``device_bytes`` (the device), ``block_tokens`` (ring), ``ulysses_degree``,
    ``bytes_per_param``, ``hosts``, ``model``, ``hardware``, ``dtype``, ``batch``.
    """
    m = get_model(model)
    check_instance("hardware", hardware, Hardware | str, "a Hardware or a preset name")
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware
    hosts = check_positive_int("hosts", hosts)
    _check_dtype(dtype)
    fw = get_framework(default_framework(hw.name) if framework is None else framework)
    kw = dict(dtype=dtype, batch=batch)
    contexts = {method: max_context(method, m, hw, hosts, **kw, framework=fw) for method in METHODS}
    tensors = {method: max_context(method, m, hw, hosts, **kw) for method in METHODS}
    ring_len = contexts["ring"]
    parts = bytes_per_host("ring", m, ring_len, hosts, dtype=dtype, batch=batch) if ring_len else {}
    return {
        "model": m.name,
        "hardware": hw.name,
        "hosts": hosts,
        "dtype": dtype,
        "batch": batch,
        "params": m.params,
        "bytes_per_param": STATE_BYTES_PER_PARAM,
        "device_bytes": hw.memory_bytes,
        "framework": fw.name,
        "framework_source": fw.source,
        "usable_bytes": fw.usable_bytes(hw.memory_bytes),
        "max_context": contexts,
        "max_context_tensors": tensors,
        "block_tokens": ring_len // hosts,
        "ulysses_degree": ulysses_degree(m, hosts),
        "bytes_per_host": parts,
        "total_bytes_per_host": sum(parts.values()),
    }
