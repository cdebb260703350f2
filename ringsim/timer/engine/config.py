"""A timed run's configuration: ``RingConfig`` (what runs, on what hardware) and lengths.

``RingConfig`` checks every field on construction (``ValueError`` naming the field) and hands
out the ring ``Schedule`` the timer executes.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from ringsim.checks import check_bool, check_positive_int, check_segment_ids
from ringsim.layouts import check_layout, check_seq_len
from ringsim.schedule import Schedule, build_schedule
from ringsim.timer.machine.hardware import Hardware, check_dtype
from ringsim.timer.machine.kernel_model import KernelFamily, get_family

PASSES = ("forward", "backward", "train-step", "decode")
ENGINES = ("vectorized", "heap")


def _check_real(name: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f"{name} must be a finite {'positive' if positive else 'non-negative'} "
            f"number, got {value!r}"
        )
    return value


@dataclass(frozen=True)
class RingConfig:
    """One simulated run. ``kv_heads=None`` means ``heads`` (no GQA); ``speed`` holds one factor
    per host; ``d_model`` and ``ffn`` (defaults ``heads * head_dim`` and ``4 * d_model``) size the
    projections and MLP of a ``train-step``; ``grad_dtype`` is the dtype of ``dk, dv`` on the
    wire (default ``dtype``); ``segment_ids`` ``(seq_len,)`` make the work data dependent.
    ``hop_bandwidth``/``hop_latency`` (one per host, default the hardware's link) time each
    host's hop to ``h + 1`` (``ringsim.timer.machine.topology`` places a ring on a cluster).

    A real implementation (all neutral by default, so the timer stays the paper's model):
    ``implementation`` a kernel family name or ``KernelFamily``
    (``ringsim.timer.machine.kernel_model``:
    ``"ideal"``, ``"fa2"``, ``"fa3"``, ``"cudnn"``, ``"triton"``, ``"torch"``); ``tile`` and
    ``tile_n`` the kernel's ``M x N`` tile (``tile`` alone: square; with ``tile`` set, both
    also set the schedule's tile granularity, ``M`` queries x ``N`` keys);
    ``overlap_efficiency`` overrides the hardware's (or the NCCL model's) ``f``;
    ``attention_flops``/``linear_flops`` FLOP/s of attention and of the projections + MLP (e.g.
    TF32 attention beside bf16 matmuls); ``recompute`` a ``train-step`` with full activation
    checkpointing (the block's forward runs again before its backward)."""

    hosts: int
    seq_len: int
    hardware: Hardware
    heads: int = 32
    kv_heads: int | None = None
    head_dim: int = 128
    dtype: str = "bf16"
    batch: int = 1
    layout: str = "contiguous"
    causal: bool = False
    overlap: bool = True
    pass_: str = "forward"
    tile: int | None = None
    speed: tuple[float, ...] | None = None
    jitter: float = 0.0
    seed: int = 0
    grad_dtype: str | None = None
    d_model: int | None = None
    ffn: int | None = None
    segment_ids: np.ndarray | None = field(default=None, compare=False, repr=False)
    hop_bandwidth: tuple[float, ...] | None = None
    hop_latency: tuple[float, ...] | None = None
    # A real implementation (``ringsim.timer.machine.kernel_model``); all neutral by default.
    implementation: str | KernelFamily = "ideal"
    tile_n: int | None = None
    overlap_efficiency: float | None = None
    attention_flops: float | None = None
    linear_flops: float | None = None
    recompute: bool = False

    def __post_init__(self) -> None:
        put = lambda name, value: object.__setattr__(self, name, value)
        hosts = check_positive_int("hosts", self.hosts)
        if not isinstance(self.hardware, Hardware):
            raise ValueError(f"hardware must be a Hardware, got {self.hardware!r}")
        if self.pass_ not in PASSES:
            raise ValueError(f"pass must be one of {', '.join(PASSES)}, got {self.pass_!r}")
        put("layout", check_layout(self.layout))
        put("causal", check_bool("causal", self.causal))
        put("overlap", check_bool("overlap", self.overlap))
        if self.pass_ == "decode":
            check_positive_int("seq_len", self.seq_len)
            if self.seq_len % hosts:
                raise ValueError(
                    f"seq_len must be divisible by hosts = {hosts} (each host holds an equal "
                    f"cache shard), got seq_len={self.seq_len}"
                )
        else:
            check_seq_len(self.seq_len, hosts, self.layout, self.segment_ids)
        for name in ("heads", "head_dim", "batch"):
            check_positive_int(name, getattr(self, name))
        kv_heads = self.heads if self.kv_heads is None else self.kv_heads
        check_positive_int("kv_heads", kv_heads)
        if self.heads % kv_heads:
            raise ValueError(
                f"heads must be a multiple of kv_heads, got heads={self.heads}, kv_heads={kv_heads}"
            )
        put("kv_heads", kv_heads)
        check_dtype(self.dtype)
        self.hardware.flops_for(self.dtype)  # refuses a dtype the hardware has no rate for
        if self.grad_dtype is not None:
            check_dtype(self.grad_dtype)
        if self.tile is not None:
            check_positive_int("tile", self.tile)
        if self.speed is not None:
            speed = tuple(_check_real("speed", s, positive=True) for s in self.speed)
            if len(speed) != hosts:
                raise ValueError(f"speed must have one factor per host ({hosts}), got {len(speed)}")
            put("speed", speed)
        put("jitter", _check_real("jitter", self.jitter))
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        d_model = self.heads * self.head_dim if self.d_model is None else self.d_model
        put("d_model", check_positive_int("d_model", d_model))
        put("ffn", check_positive_int("ffn", 4 * d_model if self.ffn is None else self.ffn))
        put("segment_ids", check_segment_ids(self.segment_ids, self.seq_len))
        for name in ("hop_bandwidth", "hop_latency"):  # per host: its hop to h + 1 (a topology)
            hops = getattr(self, name)
            if hops is not None:
                positive = name == "hop_bandwidth"
                hops = tuple(_check_real(name, x, positive=positive) for x in hops)
                if len(hops) != hosts:
                    raise ValueError(
                        f"{name} must have one value per host ({hosts}), got {len(hops)}"
                    )
                put(name, hops)
        self._check_implementation(put)

    def _check_implementation(self, put) -> None:
        family = get_family(self.implementation)
        if self.dtype not in family.dtypes:
            raise ValueError(
                f"dtype {self.dtype!r} is not run by implementation {family.name!r} "
                f"(it runs: {', '.join(family.dtypes)})"
            )
        if not family.ideal and family.curves and "cpu" not in {a for a, _ in family.curves}:
            family.curve(self.hardware, "forward")  # refuses hardware without a curve
        if self.tile_n is not None:
            check_positive_int("tile_n", self.tile_n)
        f = self.overlap_efficiency
        if f is not None:
            if isinstance(f, bool) or not isinstance(f, numbers.Real) or not -1.0 <= f <= 1.0:
                raise ValueError(f"overlap_efficiency must be a real number in [-1, 1], got {f!r}")
            put("overlap_efficiency", float(f))
        for name in ("attention_flops", "linear_flops"):
            if getattr(self, name) is not None:
                put(name, _check_real(name, getattr(self, name), positive=True))
        if not isinstance(self.recompute, (bool, np.bool_)):
            raise ValueError(f"recompute must be True or False, got {self.recompute!r}")
        put("recompute", bool(self.recompute))

    def replace(self, **changes) -> RingConfig:
        """A copy with ``changes`` (the keyword names of ``RingConfig(...)``), checked again."""
        return dataclasses.replace(self, **changes)

    @property
    def block_tokens(self) -> int:
        return self.seq_len // self.hosts

    @property
    def flops_rate(self) -> float:
        return self.hardware.flops_for(self.dtype)

    @property
    def attention_rate(self) -> float:
        """FLOP/s of attention: ``attention_flops`` if set, else the dtype's rate."""
        return self.flops_rate if self.attention_flops is None else self.attention_flops

    @property
    def linear_rate(self) -> float:
        """FLOP/s of the projections and MLP: ``linear_flops`` if set, else the dtype's."""
        return self.flops_rate if self.linear_flops is None else self.linear_flops

    def schedule(self, pass_: str | None = None, layout: str | None = None) -> Schedule:
        """The ring schedule of this run; ``pass_``/``layout`` ask for another pass or layout of
        the same sequence (a ``train-step`` runs a ``"forward"`` and a ``"backward"`` ring)."""
        return build_schedule(
            self.hosts,
            self.layout if layout is None else layout,
            self.causal,
            self.pass_ if pass_ is None else pass_,
            seq_len=self.seq_len,
            tile=self.tile,
            segment_ids=self.segment_ids,
            tile_n=None if self.tile is None else self.tile_n,  # tile_n alone: the kernel's
        )


def check_ring_shape(**fields) -> None:
    """The checks ``ringsim simulate`` makes on a ring's shape (``RingConfig``: hosts, seq_len
    against the layout, heads and kv_heads, head_dim, ...), for a command that runs a real
    ring (``measure``, ``calibrate``): one path, one set of messages, before any rank starts."""
    from ringsim.timer.machine.hardware import custom_hardware

    RingConfig(hardware=custom_hardware(1e12, 1e9, dtype="fp32"), dtype="fp32", **fields)
