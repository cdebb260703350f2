"""A timed run's configuration: ``RingConfig``, made of small frozen parts.

* ``Run``: what runs: ``hosts`` hosts share ``seq_len`` tokens split by a layout; causal or
  not; overlapped or not; which pass; recompute; packed documents (``segment_ids``);
* ``AttentionShape``: the layer's shape: heads, key/value heads, head dim, dtype, batch, the
  dtype of ``dk, dv`` on the wire, and the layer's widths (``d_model``, ``ffn``);
* ``Machine``: the hardware, and per-host hop links when a ring is placed on a cluster;
* ``Kernel``: the attention kernel family (resolved once, for this hardware), its tile, the
  overlap efficiency and per-kind FLOP rates;
* ``Noise``: per-host speed factors, jitter and its seed.

Each part checks its own fields on construction (``ValueError`` naming the field);
``RingConfig`` checks what spans two parts (one speed per host, a family that runs the dtype
on this hardware) and hands out the ring ``Schedule`` the timer executes. ``RingConfig(...)``
takes the flat keywords (``hosts=``, ``heads=``, ``implementation=``, ...) and builds the
parts; every flat name reads back as an attribute (``config.heads``) for the API's edge (the
command line, the lessons, a user), while the timer reads by part (``config.shape.heads``,
``tests/test_architecture.py``); ``replace`` copies with changes.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields

import numpy as np

from ringsim.checks import check_bool, check_choice, check_positive_int, check_segment_ids
from ringsim.layouts import check_layout, check_seq_len
from ringsim.masks import check_sliding_window
from ringsim.schedule import PASSES, Pass, Schedule, build_schedule
from ringsim.timer.cost import AttentionShape
from ringsim.timer.machine.families import KernelFamily, for_hardware, get_family
from ringsim.timer.machine.hardware import Hardware
from ringsim.timer.machine.ranges import check_assume, end_of

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


def _per_value(name: str, values: object, *, positive: bool) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise ValueError(f"{name} must be a sequence of one number per host, got {values!r}")
    return tuple(_check_real(name, x, positive=positive) for x in values)


def _put(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class Run:
    """What runs: ``hosts`` hosts share ``seq_len`` tokens split by ``layout``; ``pass_`` is
    ``forward``, ``backward``, ``train-step`` (a transformer block's step; ``recompute``: with
    full activation checkpointing) or ``decode``; ``overlap`` double-buffers the transfers;
    ``segment_ids`` ``(seq_len,)`` pack documents (the mask stays inside each);
    ``sliding_window`` ``W`` tokens (``ringsim.masks``; ``None``: no window): the ring runs its
    live steps only (``Schedule.ring_steps``). A window of at least ``seq_len`` tokens masks
    nothing and is kept as ``None``, as flash-attn drops a ``window_size_left >= seqlen_k``
    (Dao-AILab/flash-attention ``csrc/flash_attn/flash_api.cpp`` at 0251105a). Decode has no
    window here (its cache shards are whole)."""

    hosts: int
    seq_len: int
    layout: str = "contiguous"
    causal: bool = False
    overlap: bool = True
    pass_: str = "forward"
    recompute: bool = False
    segment_ids: np.ndarray | None = field(default=None, compare=False, repr=False)
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        hosts = check_positive_int("hosts", self.hosts)
        _put(self, "pass_", Pass(check_choice("pass", self.pass_, PASSES)))
        _put(self, "layout", check_layout(self.layout))
        _put(self, "causal", check_bool("causal", self.causal))
        _put(self, "overlap", check_bool("overlap", self.overlap))
        check_positive_int("seq_len", self.seq_len)
        _put(self, "segment_ids", check_segment_ids(self.segment_ids, self.seq_len))
        if self.pass_ == Pass.DECODE:
            if self.seq_len % hosts:
                raise ValueError(
                    f"seq_len must be divisible by hosts = {hosts} (each host holds an equal "
                    f"cache shard), got seq_len={self.seq_len}"
                )
        else:
            check_seq_len(self.seq_len, hosts, self.layout, self.segment_ids)
        if not isinstance(self.recompute, (bool, np.bool_)):
            raise ValueError(f"recompute must be True or False, got {self.recompute!r}")
        _put(self, "recompute", bool(self.recompute))
        window = check_sliding_window(self.sliding_window)
        if window is not None and self.pass_ == Pass.DECODE:
            raise ValueError(
                f"sliding_window does not apply to decode (one token against whole cache "
                f"shards), got sliding_window={window}"
            )
        _put(self, "sliding_window", None if window is None or window >= self.seq_len else window)

    def _fields(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.compare)

    def __eq__(self, other: object) -> bool:  # the packed documents count too
        if not isinstance(other, Run):
            return NotImplemented
        mine, theirs = self.segment_ids, other.segment_ids
        if mine is None or theirs is None:
            return self._fields() == other._fields() and mine is theirs
        return self._fields() == other._fields() and np.array_equal(mine, theirs)

    def __hash__(self) -> int:  # equal runs have equal fields (the documents stay out)
        return hash(self._fields())

    @property
    def block_tokens(self) -> int:
        return self.seq_len // self.hosts


@dataclass(frozen=True)
class Machine:
    """The ``hardware`` every host is, and each host's hop to ``h + 1`` when a ring is placed
    on a cluster (``hop_bandwidth``/``hop_latency``, one per host; default the hardware's
    link: ``ringsim.timer.machine.topology`` computes them)."""

    hardware: Hardware
    hop_bandwidth: tuple[float, ...] | None = None
    hop_latency: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.hardware, Hardware):
            raise ValueError(f"hardware must be a Hardware, got {self.hardware!r}")
        for name in ("hop_bandwidth", "hop_latency"):
            hops = getattr(self, name)
            if hops is not None:
                _put(self, name, _per_value(name, hops, positive=name == "hop_bandwidth"))

    def slowest_hop(self) -> Hardware:
        """The hardware with the ring's slowest hop as its link (the least bandwidth, the most
        latency): what a ring step waits for, so what a block must hide."""
        hw = self.hardware
        if self.hop_bandwidth is None and self.hop_latency is None:
            return hw
        bandwidth = min(self.hop_bandwidth or (hw.link_bandwidth,))
        latency = max(self.hop_latency or (hw.link_latency,))
        return hw.with_link(bandwidth, latency)


@dataclass(frozen=True)
class Kernel:
    """The attention kernel: ``implementation`` a family name or ``KernelFamily``
    (``ringsim.timer.machine.families``: ``ideal``, ``fa2``, ``fa3``, ``cudnn``, ``triton``,
    ``torch``); ``tile`` and ``tile_n`` its ``M x N`` tile (``tile`` alone: square; with
    ``tile`` set, both also set the schedule's tile granularity); ``overlap_efficiency``
    overrides the hardware's (or the NCCL model's) ``f``; ``attention_flops``/``linear_flops``
    the FLOP/s of attention and of the projections + MLP (e.g. TF32 attention beside bf16
    matmuls); ``assume`` which end of each parameter known only as a range the run takes
    (``{"p2p_bandwidth": "low"}``; ``ringsim.timer.machine.ranges``; default: every range's
    point). All neutral by default: the paper's model."""

    implementation: str | KernelFamily = "ideal"
    tile: int | None = None
    tile_n: int | None = None
    overlap_efficiency: float | None = None
    attention_flops: float | None = None
    linear_flops: float | None = None
    assume: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        get_family(self.implementation)  # refuses an unknown name
        if self.tile is not None:
            check_positive_int("tile", self.tile)
        if self.tile_n is not None:
            check_positive_int("tile_n", self.tile_n)
        f = self.overlap_efficiency
        if f is not None:
            if isinstance(f, bool) or not isinstance(f, numbers.Real) or not -1.0 <= f <= 1.0:
                raise ValueError(f"overlap_efficiency must be a real number in [-1, 1], got {f!r}")
            _put(self, "overlap_efficiency", float(f))
        for name in ("attention_flops", "linear_flops"):
            if getattr(self, name) is not None:
                _put(self, name, _check_real(name, getattr(self, name), positive=True))
        _put(self, "assume", check_assume(self.assume))

    def end(self, name: str) -> str:
        """The end of range ``name`` this run assumes (``ringsim.timer.machine.ranges``)."""
        return end_of(self.assume, name)


@dataclass(frozen=True)
class Noise:
    """Per-host ``speed`` factors (compute time divided by them; default 1) and ``jitter``:
    every duration times its own ``1 + jitter * u``, ``u ~ U[0, 1)`` from ``seed``."""

    speed: tuple[float, ...] | None = None
    jitter: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.speed is not None:
            _put(self, "speed", _per_value("speed", self.speed, positive=True))
        _put(self, "jitter", _check_real("jitter", self.jitter))
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.seed < 0:  # NumPy's generator takes none below 0
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")


PARTS: dict[str, type] = {
    "run": Run,
    "shape": AttentionShape,
    "machine": Machine,
    "kernel": Kernel,
    "noise": Noise,
}
"""RingConfig's parts, by attribute name; each flat keyword belongs to exactly one."""
FLAT = {f.name: part for part, cls in PARTS.items() for f in fields(cls)}
"""Flat keyword -> the part it belongs to (``"heads"`` -> ``"shape"``)."""


class RingConfig:
    """One simulated run: ``run``, ``shape``, ``machine``, ``kernel`` and ``noise`` (see the
    module docstring), and ``family``, the kernel family resolved for this hardware.

    Build it from flat keywords, ``RingConfig(hosts=8, seq_len=65536, hardware=hw,
    heads=32, layout="zigzag", causal=True, implementation="fa2")``, or from parts,
    ``RingConfig(run=Run(8, 65536), machine=Machine(hw))`` (parts not given take their
    defaults); read ``config.run.hosts`` (the timer's way) or ``config.hosts`` alike. Immutable
    and hashable;
    ``replace(**changes)`` takes flat keywords or whole parts."""

    __slots__ = ("family", *PARTS)

    run: Run
    shape: AttentionShape
    machine: Machine
    kernel: Kernel
    noise: Noise
    family: KernelFamily

    def __init__(
        self,
        hosts: int | None = None,
        seq_len: int | None = None,
        hardware: Hardware | None = None,
        **keywords: object,
    ) -> None:
        flat = {"hosts": hosts, "seq_len": seq_len, "hardware": hardware}
        flat = {k: v for k, v in flat.items() if v is not None}
        given = {part: keywords.pop(part) for part in PARTS if part in keywords}
        unknown = set(keywords) - set(FLAT)
        if unknown:
            raise TypeError(f"RingConfig got unexpected keyword arguments {sorted(unknown)}")
        flat.update(keywords)
        for part, cls in PARTS.items():
            own = {k: v for k, v in flat.items() if FLAT[k] == part}
            if part in given:
                if own:
                    raise TypeError(f"RingConfig got {part}= and its fields {sorted(own)}")
                if not isinstance(given[part], cls):
                    raise ValueError(f"{part} must be a {cls.__name__}, got {given[part]!r}")
                value = given[part]
            else:
                try:
                    value = cls(**own)
                except TypeError as err:  # a required field (hosts, seq_len, hardware) missing
                    raise TypeError(f"RingConfig: {err}") from None
            object.__setattr__(self, part, value)
        self._check_across_parts()

    def _check_across_parts(self) -> None:
        hosts, hardware, dtype = self.run.hosts, self.machine.hardware, self.shape.dtype
        hardware.flops_for(dtype)  # refuses a dtype the hardware has no rate for
        for name, unit, values in (
            ("hop_bandwidth", "value", self.machine.hop_bandwidth),
            ("hop_latency", "value", self.machine.hop_latency),
            ("speed", "factor", self.noise.speed),
        ):
            if values is not None and len(values) != hosts:
                raise ValueError(
                    f"{name} must have one {unit} per host ({hosts}), got {len(values)}"
                )
        family = get_family(self.kernel.implementation)
        if dtype not in family.dtypes:
            raise ValueError(
                f"dtype {dtype!r} is not run by implementation {family.name!r} "
                f"(it runs: {', '.join(family.dtypes)})"
            )
        family.check_runs_on(hardware)  # torch's CPU block on a GPU, a GPU family on a TPU, ...
        object.__setattr__(self, "family", for_hardware(family, hardware))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"RingConfig is immutable: use replace({name}=...)")

    def __getattr__(self, name: str) -> object:
        part = FLAT.get(name)  # a flat name (config.heads) reads its part's field
        if part is None:
            raise AttributeError(f"RingConfig has no attribute {name!r}")
        return getattr(object.__getattribute__(self, part), name)

    def _key(self) -> tuple:
        return tuple(getattr(self, part) for part in PARTS)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RingConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"RingConfig({', '.join(f'{p}={getattr(self, p)!r}' for p in PARTS)})"

    def __reduce__(self):
        return (_from_parts, self._key())

    def replace(self, **changes: object) -> RingConfig:
        """A copy with ``changes``: flat keywords (``heads=8``) or whole parts (``run=...``),
        checked again. Defaults already filled in stay (``kv_heads``, ``d_model``, ``ffn``):
        pass ``None`` to derive them afresh."""
        parts = {part: getattr(self, part) for part in PARTS}
        for part in PARTS:
            if part in changes:
                parts[part] = changes.pop(part)
        unknown = set(changes) - set(FLAT)
        if unknown:
            raise TypeError(f"replace got unexpected keyword arguments {sorted(unknown)}")
        for part in {FLAT[k] for k in changes}:
            own = {k: v for k, v in changes.items() if FLAT[k] == part}
            current = {f.name: getattr(parts[part], f.name) for f in fields(PARTS[part])}
            parts[part] = PARTS[part](**(current | own))
        return RingConfig(**parts)

    @property
    def block_tokens(self) -> int:
        return self.run.block_tokens

    @property
    def flops_rate(self) -> float:
        return self.machine.hardware.flops_for(self.shape.dtype)

    @property
    def attention_rate(self) -> float:
        """FLOP/s of attention: ``attention_flops`` if set, else the dtype's rate."""
        rate = self.kernel.attention_flops
        return self.flops_rate if rate is None else rate

    @property
    def linear_rate(self) -> float:
        """FLOP/s of the projections and MLP: ``linear_flops`` if set, else the dtype's."""
        rate = self.kernel.linear_flops
        return self.flops_rate if rate is None else rate

    def schedule(self, pass_: str | None = None, layout: str | None = None) -> Schedule:
        """The ring schedule of this run; ``pass_``/``layout`` ask for another pass or layout of
        the same sequence (a ``train-step`` runs a ``"forward"`` and a ``"backward"`` ring)."""
        run, kernel = self.run, self.kernel
        return build_schedule(
            run.hosts,
            run.layout if layout is None else layout,
            run.causal,
            run.pass_ if pass_ is None else pass_,
            seq_len=run.seq_len,
            tile=kernel.tile,
            segment_ids=run.segment_ids,
            tile_n=None if kernel.tile is None else kernel.tile_n,  # tile_n alone: the kernel's
            sliding_window=run.sliding_window,
        )


def _from_parts(*parts: object) -> RingConfig:
    return RingConfig(**dict(zip(PARTS, parts, strict=True)))


def check_ring_shape(**shape: object) -> None:
    """The checks ``ringsim simulate`` makes on a ring's shape, for a command that runs a real
    ring (``measure``, ``calibrate``): ``Run`` and ``AttentionShape`` fields (hosts, seq_len
    against the layout, heads and kv_heads, head_dim, ...), one set of messages, before any
    rank starts. No hardware is involved."""
    unknown = {k for k in shape if FLAT.get(k) not in ("run", "shape")}
    if unknown:
        raise TypeError(f"check_ring_shape takes run and shape fields, got {sorted(unknown)}")
    Run(**{k: v for k, v in shape.items() if FLAT[k] == "run"})
    AttentionShape(**{k: v for k, v in shape.items() if FLAT[k] == "shape"})
