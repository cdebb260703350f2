"""Bytes per host, and the longest context that fits, for each way of running a long sequence.

Every method is a run of the planner's one memory model (``ringsim.timer.step.footprint.
step_bytes``): the bytes on one of ``P`` hosts of a training step as the Ring Attention paper
ran its comparison (Sec. 5.1: FSDP over all hosts, no tensor parallelism; Sec. 4: full
gradient checkpointing), so ``ringsim memory`` and ``ringsim plan`` say the same of the same
run. A method sets how the sequence is split and the one layer's attention working set:

* ``vanilla``, ``memory_efficient``, ``blockwise``: one whole sequence per host (the paper's
  FSDP baselines: data parallel over sequences); more hosts help only by sharding states;
* ``ring``: one sequence split over all hosts, the ring strategy's working set
  (``ringsim.timer.strategies``, the planner's own);
* ``ulysses``: the sequence split over as many hosts as there are key/value heads at most
  (the largest such degree that divides them: an all-to-all re-shards by heads and cannot
  split a key/value head; extra hosts run data parallel), Ulysses' working set.

The single-device methods' attention working sets are the paper's Table 1 ("bytes per layer,
assuming bfloat16", ``n`` heads, ``s`` sequence, ``c`` block size), in elements times the
element size ``e``:

=========================  ================  ========
method                     self-attention    FFN
=========================  ================  ========
vanilla                    ``2bns^2``        ``8bsh``
memory-efficient attn      ``2bsh + 4bch``   ``8bsh``
+ blockwise FFN (BPT)      ``2bsh``          ``2bsh``
=========================  ================  ========

read as ``b n s^2``, ``b s h + 2 b c h`` and ``b s h`` elements (the table's bytes at two
bytes an element; ``c`` the kernel's query chunk, ``KERNEL_CHUNK``). The FFN column is the
step model's own: the recomputed layer's MLP activations, whole for vanilla and
memory-efficient attention, one chunk for the blockwise methods (``Parallel.blockwise``:
BPT and the paper's ring compute the FFN and the loss in chunks).

The model states are FSDP's (``zero3``): fp32 master weights, gradients and two Adam moments,
16 bytes per parameter sharded over all hosts (``model_states``), and the gathered layers
(``fsdp_layer``); ``checkpoints`` one input per layer and token; ``logits`` the loss's
(none but a chunk's for the blockwise methods); ``layer_working_set`` the attention working
set and the rebuilt layer.

All of that is the **pure tensor bound**. A framework takes its share of the device first
(``ringsim.timer.step.frameworks``: CUDA context, NCCL buffers, BLAS workspaces, an allocator's
pool cap and fragmentation, each from a published measurement or documented default);
``max_context(..., framework=...)`` searches within what it leaves, and ``memory_report``
reports both. The models live in ``ringsim.timer.step.models``, the paper's Table 3 in
``ringsim.timer.studies.published``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ringsim.checks import check_choice, check_instance, check_positive_int
from ringsim.sharing import RING, ULYSSES
from ringsim.timer.cost import DTYPE_BYTES, check_dtype
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.machine.hardware import Hardware, get_hardware
from ringsim.timer.step.footprint import BLOCKWISE_CHUNK, step_bytes
from ringsim.timer.step.frameworks import Framework, default_framework, get_framework
from ringsim.timer.step.models import ModelSpec, get_model
from ringsim.timer.step.parallel import Parallel
from ringsim.timer.strategies import get_strategy

PLACEHOLDER = get_hardware("h100-nvlink")
"""A working set depends on shapes only; a ``RingConfig`` needs some hardware to be built."""

STATE_BYTES_PER_PARAM = 16
"""FSDP model states per parameter: fp32 master weights, fp32 gradients, two fp32 Adam moments
(``footprint``'s ``zero3``)."""

KERNEL_CHUNK = BLOCKWISE_CHUNK
"""Query chunk of the memory-efficient attention kernel: the Ring Attention authors' BPT code
defaults to ``q_chunk_size=1024`` (``footprint.BLOCKWISE_CHUNK``)."""

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


# -- the attention working set of each method -------------------------------------------------
VANILLA_SCORE_BYTES = 4
"""The vanilla block's attention weights are fp32 whatever the run's dtype: the authors' code
calls flax's ``dot_product_attention_weights(..., dtype=jnp.promote_types(self.dtype,
jnp.float32))`` (haoliuhl/ringattention @ beabe2c llamabpt/llama.py l.633-648,
``attention_type='standard'``)."""

VANILLA_SCORE_MATRICES = 3
"""``(b, n, s, s)`` score matrices live at once in the vanilla block's backward (its forward
recomputed under full checkpointing): the softmax output ``p`` (kept for both gradients),
``dp = dout v^T`` and ``ds = p (dp - rowsum(dp p))``, which the softmax's backward writes
while it reads the other two (``jax.nn.softmax``; ``dot_product_attention_weights`` above)."""


def _vanilla(m: ModelSpec, s: int, b: int, e: int, par: Parallel) -> float:
    """The vanilla block's working set as the authors' code runs it: ``VANILLA_SCORE_MATRICES``
    fp32 score matrices over all heads, the fp32 ``(b, 1, s, s)`` bias it builds from the
    boolean mask (``lax.select(attention_mask > 0, 0, finfo.min)``) and the ``(1, 1, s, s)``
    boolean causal mask (``make_causal_mask`` of ``max_sequence_length``, l.470)."""
    scores = VANILLA_SCORE_MATRICES * b * m.heads * s * s * VANILLA_SCORE_BYTES
    return float(scores + b * s * s * VANILLA_SCORE_BYTES + s * s)


def _memory_efficient(m: ModelSpec, s: int, b: int, e: int, par: Parallel) -> float:
    h = m.d_model
    return float((b * s * h + 2 * b * min(KERNEL_CHUNK, s) * h) * e)


def _blockwise(m: ModelSpec, s: int, b: int, e: int, par: Parallel) -> float:
    return float(b * s * m.d_model * e)


def _strategy(m: ModelSpec, s: int, b: int, e: int, par: Parallel) -> float:
    """The context-parallel strategy's working set, as the planner sizes it (backward)."""
    dtype = next(name for name, size in DTYPE_BYTES.items() if size == e)
    config = RingConfig(
        hosts=par.cp,
        seq_len=s,
        hardware=PLACEHOLDER,
        heads=m.heads,
        kv_heads=m.n_kv_heads,
        head_dim=m.head_dim,
        dtype=dtype,
        batch=b,
        pass_="backward",
    )
    return float(get_strategy(par.strategy).working_set_bytes(config, par.ulysses))


def _ulysses_split(m: ModelSpec, hosts: int) -> int:
    """The largest Ulysses degree at most ``hosts`` that divides the key/value heads (extra
    hosts run data parallel)."""
    kv = m.n_kv_heads
    return max(d for d in range(1, min(hosts, kv) + 1) if kv % d == 0)


@dataclass(frozen=True)
class Method:
    """One way to hold a long sequence: its attention working set (``attention``), how many
    of ``hosts`` hosts share one sequence (``split``), the strategy that runs it, and whether
    it computes the FFN and the loss in chunks (``blockwise``)."""

    attention: Callable[[ModelSpec, int, int, int, Parallel], float]
    split: Callable[[ModelSpec, int], int] = lambda m, hosts: 1
    strategy: str = RING.name
    blockwise: bool = False
    by_heads: bool = False  # the split is Ulysses' (over heads), not a ring's


METHODS: dict[str, Method] = {
    "vanilla": Method(_vanilla),
    "memory_efficient": Method(_memory_efficient),
    "blockwise": Method(_blockwise, blockwise=True),
    RING.name: Method(_strategy, lambda m, hosts: hosts, RING.name, blockwise=True),
    ULYSSES.name: Method(_strategy, _ulysses_split, ULYSSES.name, by_heads=True),
}
"""The paper's Table 3 methods and Ulysses; the single-device ones hold one whole sequence, the
strategies' entries are keyed by their records (``ringsim.sharing``)."""


def method_run(
    method: str, model: str | ModelSpec, hosts: int, *, dtype: str = "bf16", batch: int = 1
) -> Parallel:
    """The run a method is (module docstring): FSDP (``zero3``) over all ``hosts``, full
    recomputation, no tensor parallelism, the sequence over ``sequence_hosts`` of them."""
    m = get_model(model)
    how = METHODS[_check_method(method)]
    split = how.split(m, check_positive_int("hosts", hosts))
    return Parallel(
        cp=split,
        dp=hosts // split,  # spare hosts of a Ulysses split idle
        ulysses=split if how.by_heads else 1,
        strategy=how.strategy,
        recompute="full",
        sharding="zero3",
        dtype=check_dtype(dtype),
        micro_batch=check_positive_int("batch", batch),
        blockwise=how.blockwise,
    )


def bytes_per_host(
    method: str,
    model: str | ModelSpec,
    seq_len: int,
    hosts: int,
    *,
    dtype: str = "bf16",
    batch: int = 1,
) -> dict[str, float]:
    """Bytes on one of ``hosts`` hosts for a training step at context ``seq_len``, by component:
    ``model_states``, ``fsdp_layer``, ``checkpoints``, ``logits``, ``layer_working_set``
    (``footprint.step_bytes`` of ``method_run``; module docstring)."""
    m = get_model(model)
    e = _check_dtype(dtype)
    seq_len = check_positive_int("seq_len", seq_len)
    par = method_run(method, m, hosts, dtype=dtype, batch=batch)
    attention = METHODS[method].attention(m, seq_len, par.micro_batch, e, par)
    parts = step_bytes(m, par, seq_len, 1, attention)
    return {
        "model_states": parts["weights"] + parts["gradients"] + parts["optimizer"],
        "fsdp_layer": parts["gathered"],
        "checkpoints": parts["activations"],
        "logits": parts["logits"],
        "layer_working_set": parts["layer_working_set"],
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
    fw = get_framework(default_framework(hw) if framework is None else framework)
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
