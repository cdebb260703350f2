"""The planner: how to spread a training step of one model over one cluster, ranked by the
predicted time of the whole step.

``plan`` enumerates every configuration the devices allow: tensor parallelism ``tp`` (inside a
node, dividing the heads), context parallelism ``cp = U x R`` with each strategy that can run it
(the ring, Ulysses, the hybrid ``U x R`` (USP), the double ring (LoongTrain), all-gather
(Llama 3)), both placements and every layout, pipeline parallelism ``pp`` where asked (with
``v`` interleaved chunks, only where Megatron-LM runs them: ``check_interleaving``,
``interleaving_runs``), data parallelism with the rest of the devices (its degree must divide
the global batch), and each activation recompute choice (``none``, ``selective``, ``full``).
It sizes every configuration on one GPU (``ringsim.timer.step.footprint``), drops the ones that
do not fit in what the framework leaves of the device (reported, never ranked), times the rest
(``ringsim.timer.step.training``: GEMMs, attention, elementwise kernels, each collective, the
pipeline bubble, the optimizer) and ranks them by step time.

Attention is timed once per distinct configuration (strategy, degrees, placement, layout,
heads per GPU): the recompute choice and the data-parallel degree do not change it, so most
candidates reuse a timed one. ``mode="prefill"`` ranks one forward pass instead (inference).

Model TFLOPS per GPU and MFU are reported in the Megatron convention (attention counted
without the causal mask) unless ``flops_convention="causal"`` (``ringsim.timer.step.flops``).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import numbers
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ringsim.checks import check_callback, check_choice, check_instance, check_positive_int
from ringsim.grid import PLACEMENTS, check_ulysses_degree
from ringsim.layouts import get_layout, layout_names, segment_ids_of
from ringsim.schedule import RING_PASSES, build_schedule
from ringsim.timer.cost import attention_flops
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import TimesOutOfRange
from ringsim.timer.machine.arch import ATTENTION_KERNELS_SOURCE
from ringsim.timer.machine.families import KernelFamily, get_family
from ringsim.timer.machine.kernel_model import call_rate_bound
from ringsim.timer.machine.ranges import RANGES, end_of
from ringsim.timer.machine.topology import Cluster, get_cluster
from ringsim.timer.step.flops import check_convention, model_tflops_per_gpu
from ringsim.timer.step.footprint import prefill_bytes, step_bytes, usable_bytes
from ringsim.timer.step.frameworks import (
    FRAMEWORKS,
    Framework,
    default_framework,
    get_framework,
    kernel_alternatives,
)
from ringsim.timer.step.gemm import check_gemm_dtype, peak_flops
from ringsim.timer.step.models import ModelSpec, get_model
from ringsim.timer.step.parallel import (
    RECOMPUTE,
    SHARDING,
    Parallel,
    check_interleaving,
    interleaving_runs,
    pipeline_splits,
    virtual_stage_counts,
)
from ringsim.timer.step.recompute import RECOMPUTES
from ringsim.timer.step.training import (
    AttentionTime,
    heads_per_gpu,
    micro_batches,
    prefill_time,
    step_time,
)
from ringsim.timer.step.uncertainty import (
    STEP_RANGES,
    StepScale,
    at_least_the_misses,
    step_scale,
)
from ringsim.timer.strategies import STRATEGIES, get_strategy, simulate_strategy

MODES = ("train", "prefill")
MAX_PLAN_HOSTS = 65536
"""The most devices a plan takes: the event timer's ring limit (2^33 block events)."""
MAX_CP = 1024
"""The largest context-parallel group the planner times (a double ring of R ranks builds
R x R tables; all-gather and Ulysses do O(R^2) work)."""
MAX_DOUBLE_RING_ROUNDS = 8
"""The most rounds (ring degree over window) of a double ring the planner times: its timer's
cost grows with the rounds times the ring degree (a 16-round double ring of 32 ranks takes
about 2 s, one of 64 rounds 25 s), and LoongTrain's own runs use a few rounds."""
MAX_SECONDS = 1.7976931348623157e308 / 1e6
"""The longest time a plan may report (as ``ringsim.cli.checks``: traces count microseconds)."""


Progress = Callable[[int, int, str], None]
"""``progress(done, total, what)``: how far a long computation has come (``plan``)."""


def _silent(done: int, total: int, what: str) -> None:
    """The default ``Progress``: the library itself prints nothing."""


@dataclass
class Candidate:
    """One configuration: how it is spread (``parallel``), its predicted step and memory."""

    parallel: Parallel
    block_tokens: int
    micro_batches: int = 1
    step_time_s: float = 0.0
    breakdown: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    bytes_per_host: float = 0.0
    usable_bytes: float = 0.0  # the budget: what the framework leaves of the device
    device_bytes: float = 0.0  # the device's memory
    fits: bool = True
    idle_fraction: float = 0.0
    model_tflops_per_gpu: float = 0.0
    mfu: float = 0.0
    lower_bound_s: float = 0.0  # the step with attention at the peak rate (never more)
    timed: bool = False
    interval: tuple[float, float] | None = None  # seconds, over what is unknown
    attention_layer: tuple[float, float] = (0.0, 0.0)  # one layer, one micro-batch: fwd, bwd

    # -- the fields every earlier plan had -------------------------------------------------
    @property
    def strategy(self) -> str:
        return self.parallel.strategy

    @property
    def ulysses_degree(self) -> int:
        return self.parallel.ulysses

    @property
    def ring_degree(self) -> int:
        return self.parallel.ring

    @property
    def placement(self) -> str:
        return self.parallel.placement

    @property
    def layout(self) -> str:
        return self.parallel.layout

    @property
    def attention_s(self) -> float:
        return self.breakdown.get("attention_s", 0.0)

    @property
    def exposed_comm_s(self) -> float:
        """Every exposed communication: context-parallel (inside attention), tensor-parallel,
        data-parallel."""
        b = self.breakdown
        return (
            b.get("cp_exposed_comm_s", 0.0)
            + b.get("tp_comm_s", 0.0)
            + b.get("dp_comm_exposed_s", 0.0)
        )

    @property
    def memory_bytes(self) -> float:
        """The old name of ``usable_bytes`` (the budget, not what the candidate uses: that is
        ``bytes_per_host``)."""
        return self.usable_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.usable_bytes - self.bytes_per_host

    @property
    def label(self) -> str:
        return self.parallel.label()

    def why(self) -> str:
        """Where the time goes, in one line."""
        b, step = self.breakdown, self.step_time_s
        parts = [
            ("attention", b.get("attention_s", 0.0)),
            ("GEMMs", b.get("gemm_s", 0.0) + b.get("lm_head_s", 0.0)),
            ("elementwise", b.get("elementwise_s", 0.0)),
            ("recompute", b.get("recompute_s", 0.0)),
            ("TP comm", b.get("tp_comm_s", 0.0)),
            ("DP comm", b.get("dp_comm_exposed_s", 0.0)),
            ("bubble", b.get("pp_bubble_s", 0.0)),
        ]
        shares = ", ".join(f"{name} {s / step:.0%}" for name, s in parts if s > 0.005 * step)
        cp = b.get("cp_exposed_comm_s", 0.0)
        return (
            f"{shares}; exposed communication {self.exposed_comm_s / step:.0%} (CP "
            f"{cp / step:.0%}); {self.headroom_bytes / 1e9:.1f} GB memory headroom"
        )

    def as_dict(self) -> dict:
        p = self.parallel
        out = {
            "label": self.label,
            "strategy": p.strategy,
            "ulysses_degree": p.ulysses,
            "ring_degree": p.ring,
            "placement": p.placement,
            "layout": p.layout,
            "block_tokens": self.block_tokens,
            "step_time_s": self.step_time_s,
            "bytes_per_host": self.bytes_per_host,
            "usable_bytes": self.usable_bytes,
            "device_bytes": self.device_bytes,
            "headroom_bytes": self.headroom_bytes,
            "fits": self.fits,
            **{k: getattr(p, k) for k in ("tp", "cp", "pp", "dp", "virtual_stages")},
            **{k: getattr(p, k) for k in ("recompute", "sharding", "gemm_dtype")},
            "micro_batches": self.micro_batches,
            "memory": dict(self.memory),
        }
        out["lower_bound_s"] = self.lower_bound_s
        if self.interval is not None:
            out["interval_s"] = list(self.interval)
        if self.fits and self.timed:
            out.update(
                attention_layer_s=dict(
                    zip(("forward", "backward"), self.attention_layer, strict=True)
                ),
                attention_s=self.attention_s,
                exposed_comm_s=self.exposed_comm_s,
                idle_fraction=self.idle_fraction,
                breakdown=dict(self.breakdown),
                model_tflops_per_gpu=self.model_tflops_per_gpu,
                mfu=self.mfu,
                why=self.why(),
            )
        else:
            out["why"] = "not timed: slower than the kept ones" if self.fits else "does not fit"
        return out


@dataclass
class Plan:
    model: str
    seq_len: int
    hosts: int
    cluster: Cluster
    mode: str
    causal: bool
    candidates: list[Candidate]  # fitting ones, best first
    dropped: list[Candidate]  # the ones that do not fit in memory
    seconds: float  # wall time the planner took
    global_batch: int = 1
    implementation: str = "ideal"
    flops_convention: str = "megatron"
    timed_attention: int = 0  # distinct attention configurations timed
    bounded: list[Candidate] = field(default_factory=list)  # fit, provably slower, not timed
    framework: str = "pytorch"
    implementation_source: str = ""
    interval_families: tuple[str, ...] = ()
    ideal: bool = True  # the attention kernel is the peak-rate model (no interval)
    layer_windows: tuple[int | None, ...] = ()  # each layer's sliding window (None: full)
    documents: tuple[int, ...] = ()  # the packed documents' lengths (none given: ())

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "seq_len": self.seq_len,
            "hosts": self.hosts,
            "global_batch": self.global_batch,
            "tokens_per_step": self.tokens_per_step,
            "cluster": self.cluster.name,
            "cluster_description": self.cluster.describe(),
            "mode": self.mode,
            "causal": self.causal,
            "implementation": self.implementation,
            "implementation_source": self.implementation_source,
            "framework": self.framework,
            "interval_families": list(self.interval_families),
            "flops_convention": self.flops_convention,
            "candidates": [c.as_dict() for c in self.candidates],
            "dropped": [c.as_dict() for c in self.dropped],
            "bounded": [c.as_dict() for c in self.bounded],
            "evaluated": len(self.candidates) + len(self.dropped) + len(self.bounded),
            "timed_attention": self.timed_attention,
            "planner_seconds": self.seconds,
            **self._windows(),
            **({"documents": list(self.documents)} if self.documents else {}),
        }

    def _windows(self) -> dict:
        """``sliding_window`` and ``window_layers`` of a model that has windowed layers (none
        otherwise: the JSON of a model without them is unchanged)."""
        windowed = [w for w in self.layer_windows if w is not None]
        if not windowed:
            return {}
        return {"sliding_window": max(windowed), "window_layers": len(windowed)}

    def groups(self, top: int | None = None) -> list[tuple[Candidate, list[str]]]:
        """The best candidates with their layout twins folded in: ``(candidate, layouts)``
        where every other candidate that differs only in its layout and takes the same time
        and memory to ``TWIN_TOLERANCE`` (layouts that balance the causal work alike) is
        listed by its layout instead of ranked again; ``top`` groups at most."""
        out: list[tuple[Candidate, list[str]]] = []
        for cand in self.candidates:
            twin = next((g for g in out if _twins(g[0], cand)), None)
            if twin is not None:
                twin[1].append(cand.layout)
                continue
            if top is not None and len(out) >= top:
                continue
            out.append((cand, [cand.layout]))
        return out


TWIN_TOLERANCE = 1e-3
"""Layouts whose steps differ by less than this share are twins: far below what a step
prediction resolves (its interval spans tens of percent, ``STEP_MISS``)."""


def _twins(a: Candidate, b: Candidate) -> bool:
    """Same configuration but the layout, the same step time and bytes (``TWIN_TOLERANCE``)."""
    if a.parallel.with_(layout=b.layout) != b.parallel:
        return False
    return math.isclose(a.step_time_s, b.step_time_s, rel_tol=TWIN_TOLERANCE) and math.isclose(
        a.bytes_per_host, b.bytes_per_host, rel_tol=TWIN_TOLERANCE
    )


# -- enumeration -------------------------------------------------------------------------------
def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def tp_degrees(model: ModelSpec, hosts: int, gpus_per_node: int) -> list[int]:
    """Tensor-parallel degrees: inside one node, dividing the query heads, and dividing the
    key/value heads or a multiple of them (replicated)."""
    out = []
    for t in divisors(min(hosts, gpus_per_node)):
        try:
            heads_per_gpu(model, t)
        except ValueError:
            continue
        if hosts % t == 0:
            out.append(t)
    return out


def cp_variants(
    cp: int,
    kv_heads: int,
    seq_len: int,
    causal: bool,
    per_node: int | None = None,
    *,
    heads: int | None = None,
    segment_ids=None,
) -> list[dict]:
    """Every ``(strategy, ulysses, placement, layout)`` a context-parallel group of ``cp`` ranks
    with ``kv_heads`` key/value heads per GPU can run (given the query ``heads``, Ulysses
    degrees past the key/value heads too: KV replication, ``check_ulysses_degree``). The
    double ring runs inner rings of one node's ring members (``window``, ``per_node`` of the
    group's ranks per node): it is left out where that is the flat ring or has no inner ring
    (``Strategy.distinct``), and past ``MAX_DOUBLE_RING_ROUNDS`` rounds (``Strategy.rounds``),
    whose timing costs seconds. Each strategy says which ``U x R`` groups it runs
    (``Strategy.runs``); one that differs from another only on packed documents
    (``Strategy.documents_only``: Llama 3's) is offered where documents are given
    (``segment_ids``), and there no Ulysses degree above 1 (the all-to-alls take no documents)
    and the layouts that deal them (per-document where each divides by ``2 cp``)."""
    documents = segment_ids is not None
    # a causal mask makes the layout matter; without one every layout does the same work
    names = layout_names(documents=documents)
    names = names if causal and cp > 1 else names[:1]
    layouts = [name for name in names if _deals(name, seq_len, cp, segment_ids)]
    out = []
    for u in divisors(cp):
        try:
            check_ulysses_degree(cp, kv_heads, u, heads=heads)
        except ValueError:
            continue
        r = cp // u
        for placement in PLACEMENTS if 1 < u < cp else PLACEMENTS[:1]:
            ring_per_node = _ring_members_per_node(u, r, placement, per_node)
            for name, strategy in STRATEGIES.items():
                if not strategy.runs(u, r) or not strategy.distinct(r, ring_per_node):
                    continue
                offered = documents or not strategy.documents_only
                if not offered or (documents and u > 1):
                    continue
                if strategy.rounds(r, ring_per_node) > MAX_DOUBLE_RING_ROUNDS:
                    continue
                for layout in layouts if strategy.uses_layout else layouts[:1]:
                    out.append(dict(strategy=name, ulysses=u, placement=placement, layout=layout))
    return out


def _deals(layout: str, seq_len: int, cp: int, segment_ids) -> bool:
    """Whether ``layout`` deals ``seq_len`` tokens (and their documents) to ``cp`` ranks."""
    try:
        get_layout(layout).check_seq_len(seq_len, cp, segment_ids)
    except ValueError:
        return False
    return True


def _ring_members_per_node(u: int, r: int, placement: str, per_node: int | None) -> int:
    """Members of one ring group inside one node of ``per_node`` ranks (``None``: all)."""
    if per_node is None:
        return r
    if placement == "ring-inner":
        return min(r, per_node)
    return max(1, min(r, per_node // u))


def enumerate_parallel(
    model: ModelSpec,
    hosts: int,
    seq_len: int,
    *,
    causal: bool = True,
    global_batch: int = 1,
    gpus_per_node: int = 8,
    tp: int | None = None,
    pp: int | Sequence[int] | None = 1,
    virtual_stages: int | Sequence[int] | None = 1,
    recompute: tuple[str, ...] = RECOMPUTE,
    sharding: str = "zero1",
    gemm_dtype: str = "bf16",
    max_cp: int = MAX_CP,
    framework: Framework | None = None,
    sequence_parallel: bool = True,
    segment_ids=None,
) -> list[Parallel]:
    """Every ``Parallel`` the ``hosts`` devices allow (module docstring), unordered; with a
    ``framework``, only the strategies, layouts, tensor-parallel degrees and schedules it runs;
    with the packed documents of every sequence (``segment_ids``), the strategies and layouts
    that take them. ``pp`` and ``virtual_stages``: a value or the values to search (``None``:
    every one the model's layers allow, ``pipeline_stages``)."""
    fw = framework or FRAMEWORKS["none"]
    out = []
    tps = [tp] if tp is not None else tp_degrees(model, hosts, gpus_per_node)
    stages = pipeline_stages(model.layers, pp, virtual_stages, fw)
    for t in tps:
        if not fw.allows("max_tp", t):
            continue
        heads, kv = heads_per_gpu(model, t)
        per_node = max(1, gpus_per_node // t)
        for p, vs in stages:
            if hosts % (t * p):
                continue
            for cp in divisors(hosts // (t * p)):
                dp = hosts // (t * p * cp)
                if cp > max_cp or global_batch % dp or seq_len % cp:
                    continue
                runs = [v for v in vs if interleaving_runs(global_batch // dp, p, v)]
                if not runs:
                    continue
                variants = cp_variants(
                    cp, kv, seq_len, causal, per_node, heads=heads, segment_ids=segment_ids
                )
                for variant in variants:
                    if cp > 1 and not fw.allows("cp_variant", variant):
                        continue
                    if variant["ulysses"] > kv and not fw.allows("kv_replication", True):
                        continue
                    for v in runs:
                        for r in recompute:
                            out.append(
                                Parallel(
                                    tp=t,
                                    cp=cp,
                                    pp=p,
                                    dp=dp,
                                    recompute=r,
                                    sharding=sharding,
                                    gemm_dtype=gemm_dtype,
                                    virtual_stages=v,
                                    sequence_parallel=sequence_parallel,
                                    grad_dtype=fw.grad_dtype,
                                    master_bytes=fw.master_bytes,
                                    balanced_stages=fw.balanced_stages,
                                    **variant,
                                )
                            )
    return out


def pipeline_stages(
    layers: int,
    pp: int | Sequence[int] | None,
    virtual_stages: int | Sequence[int] | None,
    framework: Framework | None = None,
) -> list[tuple[int, tuple[int, ...]]]:
    """``(pp, virtual stage counts)`` to search, ``pp`` ascending: the pipeline degrees named
    (``None``: every one up to the layers), each with the virtual stage counts named (``None``:
    every one) that Megatron-LM cuts the layers into (``pipeline_splits``) and the framework
    runs; degrees left with none are left out."""
    fw = framework or FRAMEWORKS["none"]
    pps = range(1, layers + 1) if pp is None else _values(pp)
    out = []
    for p in sorted(set(pps)):
        named = (
            virtual_stage_counts(layers, p) if virtual_stages is None else _values(virtual_stages)
        )
        vs = tuple(
            v
            for v in sorted(set(named))
            if pipeline_splits(layers, p, v) and fw.allows("interleaved", v)
        )
        if vs:
            out.append((p, vs))
    return out


def _values(value: int | Sequence[int]) -> tuple[int, ...]:
    return (value,) if isinstance(value, int) else tuple(value)


# -- attention, timed once per distinct configuration ------------------------------------------
def cp_cluster(cluster: Cluster, tp: int, cp: int) -> Cluster:
    """The cluster one tensor-parallel shard's context-parallel group sees: ``g / tp`` of its
    ranks per node (ranks ``[TP, CP, ...]``), each GPU with its own links and NIC share."""
    g = cluster.gpus_per_node
    per_node = max(1, g // tp)
    nics = max(1, cluster.nics_per_node * per_node // g)
    group = cluster.switch_group // tp if cluster.switch_group and tp < cluster.switch_group else 0
    changes = dict(gpus_per_node=per_node, nics_per_node=nics, nodes=math.ceil(cp / per_node))
    if group and per_node % group == 0:
        changes["switch_group"] = group
    else:
        changes.update(switch_group=0, switch_uplink=0.0)
    return dataclasses.replace(cluster, **changes)


SHARED_CACHE: dict = {}
"""Attention timings and working sets of every plan in this process, by the full
configuration (a second plan on the same cluster reuses them). At most ``SHARED_CACHE_SIZE``
entries: the oldest go first."""
SHARED_CACHE_SIZE = 20_000
BUSIEST_HOSTS = 256
"""The largest ring group whose busiest host ``AttentionTimer.busiest_work`` finds from its
schedule (``R x R`` blocks); past it the balanced share, a looser bound, stands in."""


class AttentionTimer:
    """Times a context-parallel group's attention (forward and backward) and sizes its working
    set, once per distinct configuration (the cache key), sharing the results with every
    plan of the process (``SHARED_CACHE``)."""

    def __init__(
        self,
        model,
        seq_len,
        cluster,
        *,
        causal,
        dtype,
        implementation,
        micro_batch=1,
        assume: dict | None = None,
        segment_ids=None,
    ):
        self.model, self.seq_len, self.cluster = model, seq_len, cluster
        self.segment_ids = segment_ids
        self.causal, self.dtype, self.implementation = causal, dtype, implementation
        self.micro_batch = micro_batch
        self.assume = tuple(sorted((assume or {}).items()))
        self.cache: dict = {}
        self._bounding: AttentionTimer | None = None
        family = get_family(implementation)
        self.context = (
            repr(cluster),
            model,
            seq_len,
            causal,
            dtype,
            repr(family),
            micro_batch,
            self.assume,
            *(() if segment_ids is None else (segment_ids.tobytes(),)),
        )

    def with_family(self, family) -> AttentionTimer:
        """The same timer running another kernel family."""
        return self._replaced(implementation=family)

    def at(self, assume: dict | None) -> AttentionTimer:
        """The same timer at the ends of the attention's ranges ``assume`` names
        (``ringsim.timer.machine.ranges``; ``{}``: their points)."""
        return self._replaced(assume=assume)

    def _replaced(self, **changes) -> AttentionTimer:
        kw = dict(
            causal=self.causal,
            dtype=self.dtype,
            implementation=self.implementation,
            micro_batch=self.micro_batch,
            assume=dict(self.assume),
            segment_ids=self.segment_ids,
        )
        return AttentionTimer(self.model, self.seq_len, self.cluster, **{**kw, **changes})

    def _cached(self, key: tuple, compute):
        if key not in self.cache:
            shared = (*self.context, *key)
            if shared not in SHARED_CACHE:
                if len(SHARED_CACHE) >= SHARED_CACHE_SIZE:
                    del SHARED_CACHE[next(iter(SHARED_CACHE))]
                SHARED_CACHE[shared] = compute()
            self.cache[key] = SHARED_CACHE[shared]
        return self.cache[key]

    def config(self, par: Parallel, pass_: str, sliding_window: int | None = None) -> RingConfig:
        return self._cached(
            ("config", pass_, sliding_window, *self.key(par)),
            lambda: self._config(par, pass_, sliding_window),
        )

    def _config(self, par: Parallel, pass_: str, sliding_window: int | None) -> RingConfig:
        heads, kv = heads_per_gpu(self.model, par.tp)
        return RingConfig(
            hosts=par.cp,
            seq_len=self.seq_len,
            hardware=self.cluster.hardware,
            heads=heads,
            kv_heads=kv,
            head_dim=self.model.head_dim,
            dtype=self.dtype,
            batch=self.micro_batch,
            causal=self.causal,
            layout=par.layout,
            pass_=pass_,
            implementation=self.implementation,
            assume=self.assume,
            sliding_window=sliding_window,
            segment_ids=self.segment_ids,
        )

    def key(self, par: Parallel) -> tuple:
        return (par.tp, par.cp, par.ulysses, par.strategy, par.placement, par.layout)

    def bytes(self, par: Parallel, pass_: str = "backward") -> float:
        strategy = get_strategy(par.strategy)
        return self._cached(
            ("bytes", pass_, *self.key(par)),
            lambda: strategy.working_set_bytes(self.config(par, pass_), par.ulysses),
        )

    def time(self, par: Parallel, passes=("forward", "backward")) -> tuple[AttentionTime, float]:
        """``(AttentionTime, idle fraction)`` of one layer's attention for one micro-batch."""
        return self._cached(("time", passes, *self.key(par)), lambda: self._time(par, passes))

    def _time(self, par, passes):
        """One layer's attention, the mean over the model's layers: a model that interleaves
        sliding-window layers (``ModelSpec.layer_windows``) times each kind of layer with its
        own attention, weighted by how many layers have it."""
        cluster = cp_cluster(self.cluster, par.tp, par.cp)
        layers = Counter(self.model.layer_windows())
        totals, exposed, compute, idle = dict.fromkeys(passes, 0.0), 0.0, 0.0, 0.0
        for window, count in layers.items():
            share = count / self.model.layers
            for pass_ in passes:
                run = simulate_strategy(
                    self.config(par, pass_, window),
                    par.strategy,
                    ulysses_degree=par.ulysses,
                    cluster=cluster,
                    placement=par.placement,
                )
                # its summary's figures (SimResult.summary), without the rest of the summary
                total, busiest = run.makespan, float(run.compute_busy().max())
                totals[pass_] += share * total
                exposed += share * (total - busiest)
                compute += share * busiest
                idle += share * run.idle_fraction * total
        total = sum(totals.values())
        timed = AttentionTime(
            totals.get("forward", 0.0), totals.get("backward", 0.0), exposed, compute
        )
        return timed, (idle / total if total else 0.0)

    @property
    def timed(self) -> int:
        return sum(1 for k in self.cache if k[0] == "time")

    def has_time(self, par: Parallel, passes=("forward", "backward")) -> bool:
        """Whether ``time(par, passes)`` is known already (no timing to do)."""
        key = ("time", tuple(passes), *self.key(par))
        return key in self.cache or (*self.context, *key) in SHARED_CACHE

    def bounding(self) -> AttentionTimer:
        """The same timer with every kernel call at the wave tail's bound
        (``KernelFamily.wave_tail_bound``): its times are lower bounds of this timer's."""
        if self._bounding is None:
            family = get_family(self.implementation)
            bound = dataclasses.replace(
                family, name=f"{family.name} (wave-tail bound)", wave_tail_bound=True
            )
            self._bounding = self.with_family(bound)
        return self._bounding

    def busiest_work(self, par: Parallel) -> float:
        """The fraction of a layer's ``N x N`` pairs that the busiest GPU of ``par``'s
        context-parallel group computes, the mean over the model's layers: a ring group of
        ``R = cp / U`` GPUs splits each head's visible pairs as its layout places the queries
        (the schedule's exact work, packed documents and windows included), each GPU holding
        ``H / U`` of the heads. At least the balanced share, and what ``lower_bound`` charges."""
        key = ("busiest", par.cp, par.ulysses, par.layout)
        return self._cached(key, lambda: self._busiest_work(par))

    def _busiest_work(self, par: Parallel) -> float:
        n, U = self.seq_len, par.ulysses
        R = par.cp // U
        layers = Counter(self.model.layer_windows())
        shares = 0.0
        for window, count in layers.items():
            hosts = R if R <= BUSIEST_HOSTS else 1  # one host: the whole count, balanced below
            schedule = build_schedule(
                hosts,
                par.layout if hosts > 1 else "contiguous",
                self.causal,
                seq_len=n,
                segment_ids=self.segment_ids,
                sliding_window=window,
            )
            pairs = sum(schedule.exact_work_at(s) for s in range(schedule.steps))
            c = n // hosts
            share = float(pairs.max()) * c * c / (n * n) / (U if hosts > 1 else par.cp)
            shares += count * share
        return shares / self.model.layers

    def rate_bound(self, pass_: str) -> float:
        """FLOP/s no attention call of this timer's family exceeds in ``pass_``
        (``ringsim.timer.machine.kernel_model.call_rate_bound``; the peak for ``ideal``)."""
        return self._cached(
            ("rate bound", pass_),
            lambda: call_rate_bound(
                self.implementation,
                self.cluster.hardware,
                head_dim=self.model.head_dim,
                dtype=self.dtype,
                pass_=pass_,
                lone_cta_speed=end_of(self.assume, "lone_cta_speed"),
            ),
        )


# -- the plan ----------------------------------------------------------------------------------
def check_plan_size(
    hosts: int,
    seq_len: int,
    model: ModelSpec,
    cluster: Cluster,
    *,
    global_batch: int,
    pp: int | Sequence[int] | None,
    tp: int | None,
) -> None:
    """Refuse, before any work, a plan no candidate of which the timer can run: more devices
    than the event timer takes, or context-parallel groups larger than ``MAX_CP`` everywhere
    (``pp``: the pipeline degrees searched, ``None`` every one up to the layers)."""
    if hosts > MAX_PLAN_HOSTS:
        raise ValueError(
            f"hosts={hosts} is too many to plan: the event timer times rings of at most "
            f"{MAX_PLAN_HOSTS:,} devices (2^33 block events)"
        )
    tps = [tp] if tp is not None else tp_degrees(model, hosts, cluster.gpus_per_node) or [1]
    pps = range(1, model.layers + 1) if pp is None else _values(pp)
    smallest = min(
        (
            hosts // (t * p * dp)
            for t in tps
            for p in pps
            if hosts % (t * p) == 0
            for dp in divisors(hosts // (t * p))
            if global_batch % dp == 0
        ),
        default=None,
    )
    named = "any pp" if pp is None else "pp=" + ",".join(map(str, pps))
    if smallest is None:
        raise ValueError(
            f"hosts={hosts} splits into no tp x pp x dp x cp with {named} and global_batch="
            f"{global_batch} (dp must divide the global batch)"
        )
    if smallest > MAX_CP:
        raise ValueError(
            f"hosts={hosts}: every configuration needs a context-parallel group of at least "
            f"{smallest:,} ranks (global_batch={global_batch} sequences leave data parallelism "
            f"at most {global_batch}, {named}); the planner times groups of at most "
            f"{MAX_CP:,}: give a larger global batch (--global-batch), more pipeline stages "
            f"or fewer hosts"
        )
    if seq_len < smallest:
        raise ValueError(f"seq_len={seq_len} is shorter than the {smallest} context-parallel ranks")


DEFAULT_TOKENS_PER_STEP = 4 * 2**20
"""Tokens per step when none are given (``ringsim plan``): NVIDIA's long-sequence runs of Llama 2
7B on DGX-H100 take 4,194,304 tokens per step at every length from 4K to 1M (NeMo docs,
performance_long_sequence.md, 'Batch Size' column, commit 9ee5c56f43, v2.4.0). Llama 3 405B
took 16M (arXiv:2407.21783, Table 4)."""

DEFAULT_TOKENS_SOURCE = (
    "4M tokens per step, as NVIDIA's long-sequence Llama 2 7B runs at every length (NeMo docs, "
    "performance_long_sequence.md 'Batch Size', v2.4.0); --global-batch or --tokens-per-step "
    "to change it"
)


def default_global_batch(seq_len: int) -> int:
    """Sequences per step at ``DEFAULT_TOKENS_PER_STEP`` tokens (at least one)."""
    return max(1, DEFAULT_TOKENS_PER_STEP // seq_len)


def plan(
    model: str | ModelSpec,
    seq_len: int,
    cluster: Cluster,
    hosts: int | None = None,
    *,
    mode: str = "train",
    causal: bool = True,
    dtype: str = "bf16",
    global_batch: int = 1,
    implementation: str | KernelFamily | None = None,
    framework: str | Framework | None = None,
    tp: int | None = None,
    pp: int | Sequence[int] | None = None,
    virtual_stages: int | Sequence[int] | None = None,
    recompute: tuple[str, ...] | str | None = None,
    sharding: str | None = None,
    gemm_dtype: str = "bf16",
    flops_convention: str | None = None,
    keep: int | None = None,
    batch: int | None = None,
    progress: Progress | None = None,
    intervals: int = 0,
    memory_limit: bool = True,
    beat: float | None = None,
    documents=None,
) -> Plan:
    """Rank every configuration for ``model`` at ``seq_len`` tokens, ``global_batch`` sequences
    per step, on ``hosts`` devices of ``cluster`` (default: all of its nodes); ``ValueError`` if
    none fits in memory, saying what the leanest needs. ``keep``: time only as many as it takes
    to know the best ``keep`` exactly (the rest are ``Plan.bounded``: fit, provably slower;
    ``evaluate``); default: time every one that fits. ``batch`` is the old name of
    ``global_batch``. ``progress(done, total, what)`` is called as the work goes (a command
    line shows it; the planner prints nothing).

    ``pp`` and ``virtual_stages`` narrow the pipeline search to a value or a list of them
    (default: every pipeline degree up to the model's layers and every virtual stage count
    Megatron-LM cuts the layers into, ``pipeline_stages``; the micro-batches they imply must
    run, ``interleaving_runs``).

    ``implementation``: the attention kernel family (default: the framework's, else the
    hardware's, ``ringsim.timer.step.frameworks.default_kernel``; ``"ideal"`` only when
    named). ``framework``: a profile (``ringsim.timer.step.frameworks``) that restricts the
    search to what it runs and takes its memory overheads (default: the hardware's default
    framework, every choice open). ``intervals``: how many of the best candidates get an
    interval (``candidate_interval``). ``memory_limit=False`` ranks by time alone (a what-if:
    every configuration fits). ``beat`` (with ``keep=1``): rank only what is faster than a
    step time already known (``ValueError`` if nothing is). ``documents``: the lengths of the
    documents packed in every sequence (summing to ``seq_len``): the attention masks them,
    and the strategies and layouts that take documents run (Llama 3's all-gather per
    document among them)."""
    t0 = time.perf_counter()
    m = get_model(model)
    cluster = get_cluster(cluster) if isinstance(cluster, str) else cluster
    check_instance("cluster", cluster, Cluster, "a Cluster or a cluster preset's name")
    check_choice("mode", mode, MODES)
    if batch is not None:
        global_batch = batch
    seq_len, global_batch = (
        check_positive_int(name, value)
        for name, value in (("seq_len", seq_len), ("global_batch", global_batch))
    )
    pp, virtual_stages = _named("pp", pp), _named("virtual_stages", virtual_stages)
    tp = None if tp is None else check_positive_int("tp", tp)
    keep = None if keep is None else check_positive_int("keep", keep)
    check_callback("progress", progress)
    hw = cluster.hardware
    fw = get_framework(default_framework(hw) if framework is None else framework)
    recompute = _recompute_choices(recompute, mode, fw)
    sharding = _allowed(fw, "shardings", sharding, SHARDING)
    if sharding not in SHARDING:
        raise ValueError(f"sharding must be one of {', '.join(SHARDING)}, got {sharding!r}")
    check_gemm_dtype(gemm_dtype, hw)
    _allowed(fw, "gemm_dtypes", gemm_dtype, ())
    for v in virtual_stages or ():
        _allowed(fw, "interleaved", v, ())
    flops_convention = check_convention(flops_convention or fw.flops_convention or "megatron")
    family = fw.kernel_family(hw, implementation)
    family.check_runs_on(hw)
    if hosts is None:
        if cluster.nodes is None:
            raise ValueError("hosts is needed for a cluster without a node count")
        hosts = cluster.nodes * cluster.gpus_per_node
    cluster.check_hosts(hosts)
    _check_stages(m.layers, pp, virtual_stages)
    if tp is not None and tp not in tp_degrees(m, hosts, cluster.gpus_per_node):
        raise ValueError(
            f"tp={tp} is not a tensor-parallel degree of {m.name} on {cluster.gpus_per_node}-GPU "
            f"nodes (it must divide the heads and fit in a node): use one of "
            f"{tp_degrees(m, hosts, cluster.gpus_per_node)}"
        )
    if tp is not None:
        _allowed(fw, "max_tp", tp, ())
    check_plan_size(hosts, seq_len, m, cluster, global_batch=global_batch, pp=pp, tp=tp)
    segment_ids = _documents(documents, seq_len)
    cluster = cluster if cluster.nodes is not None else cluster.with_nodes(cluster.nodes_for(hosts))
    parallels = enumerate_parallel(
        m,
        hosts,
        seq_len,
        causal=causal,
        global_batch=global_batch,
        gpus_per_node=cluster.gpus_per_node,
        tp=tp,
        pp=pp,
        virtual_stages=virtual_stages,
        recompute=recompute,
        sharding=sharding,
        gemm_dtype=gemm_dtype,
        framework=fw,
        sequence_parallel=_sequence_parallel(fw),
        segment_ids=segment_ids,
    )
    if not parallels and virtual_stages and min(virtual_stages) > 1:
        v, p = _shown(virtual_stages), _shown(pp) if pp else "pp"
        raise ValueError(
            f"virtual_stages={v}: the interleaved schedule needs the micro-batches "
            f"per step (global_batch / dp) to be a multiple of pp={p} (Megatron-LM), and no "
            f"data-parallel degree leaves that with global_batch={global_batch}: give a global "
            f"batch that is a multiple of {p}, or virtual_stages=1"
        )
    if not parallels:
        raise ValueError(
            f"no configuration of {hosts} devices runs seq_len={seq_len} with "
            f"global_batch={global_batch}, tp={tp}, pp={_shown(pp) if pp else 'any'} under "
            f"framework {fw.name}"
        )
    timer = AttentionTimer(
        m,
        seq_len,
        cluster,
        causal=causal,
        dtype=dtype,
        implementation=family,
        segment_ids=segment_ids,
    )
    usable = fw.usable_bytes(hw.memory_bytes) if memory_limit else math.inf
    fitting, dropped, bounded = evaluate(
        m,
        parallels,
        seq_len,
        global_batch,
        cluster,
        timer,
        mode=mode,
        flops_convention=flops_convention,
        keep=keep,
        progress=progress,
        usable=usable,
        beat=beat,
    )
    if not fitting and beat is not None:
        raise ValueError(f"no configuration is faster than {beat:.6g} s")
    if not fitting:
        raise ValueError(_nothing_fits(m, seq_len, cluster, hosts, usable, dropped))
    families = _interval_families(fw, hw, implementation, family)
    for cand in fitting[:intervals]:
        cand.interval = candidate_interval(
            m, cand, seq_len, global_batch, cluster, timer, families, mode, flops_convention
        )
    seconds = time.perf_counter() - t0
    result = Plan(
        m.name,
        seq_len,
        hosts,
        cluster,
        mode,
        causal,
        fitting,
        dropped,
        seconds,
        global_batch,
        family.name,
        flops_convention,
        timer.timed,
        bounded,
    )
    result.framework = fw.name
    result.ideal = family.ideal
    result.implementation_source = _implementation_source(fw, hw, implementation, family)
    result.interval_families = tuple(f.name for f in families)
    result.layer_windows = m.layer_windows()
    if segment_ids is not None:
        result.documents = tuple(int(n) for n in np.bincount(segment_ids))
    return result


def _named(name: str, value) -> tuple[int, ...] | None:
    """A pipeline flag's values: ``None`` (search every one), else each a positive integer,
    given once (a list of none refused)."""
    if value is None:
        return None
    values = (value,) if isinstance(value, numbers.Integral) else value
    if not isinstance(values, list | tuple | range) or not values:
        raise ValueError(f"{name} must be a positive integer or a list of them, got {value!r}")
    return tuple(dict.fromkeys(check_positive_int(name, v) for v in values))


def _shown(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def _check_stages(layers: int, pp: tuple[int, ...] | None, virtual_stages) -> None:
    """Refuse a named pipeline degree past the layers, and a named virtual stage count that no
    pipeline degree searched cuts the layers into (``check_interleaving``'s reason, for the
    first degree named)."""
    for p in pp or ():
        if p > layers:
            raise ValueError(f"pp must be at most the model's {layers} layers, got pp={p}")
    for v in virtual_stages or ():
        if pp is not None and not any(pipeline_splits(layers, p, v) for p in pp):
            check_interleaving(layers, pp[0], v)
        if pp is None and not any(pipeline_splits(layers, p, v) for p in range(2, layers + 1)):
            raise ValueError(
                f"virtual_stages={v} splits the model's {layers} layers over no pipeline "
                f"degree: the interleaved schedule (Megatron-LM) needs every stage's layers "
                f"(the embedding and the loss may count as one each) divisible by virtual_stages"
            )


def _documents(documents, seq_len: int):
    """The segment ids of ``documents`` (their lengths, summing to ``seq_len``), or None."""
    if documents is None:
        return None
    ids = segment_ids_of(documents)
    if ids.size != seq_len:
        raise ValueError(
            f"documents must sum to seq_len={seq_len}, got {ids.size} ({list(documents)})"[:200]
        )
    return ids


def _allowed(fw: Framework, field_name: str, value, default_options: tuple):
    """``value`` if ``fw`` runs it (``None``: the framework's first option, else
    ``default_options``' first); ``ValueError`` naming the framework otherwise."""
    if value is None:
        options = getattr(fw, field_name) or default_options
        return options[0]
    if not fw.allows(field_name, value):
        what = field_name.rstrip("s").replace("_", " ")
        runs = getattr(fw, field_name)
        raise ValueError(
            f"framework {fw.name} does not run {what} {value!r}"
            + (f" (it runs: {', '.join(map(str, runs))})" if isinstance(runs, tuple) else "")
        )
    return value


def _sequence_parallel(fw: Framework) -> bool:
    """Sequence parallelism where the framework offers it: it moves the same bytes as its
    absence, runs the norms on ``1 / tp`` of the rows and stores ``1 / tp`` of their
    activations, so it is never slower and never larger (``ringsim.timer.step.parallel``)."""
    return fw.sequence_parallel is None or True in fw.sequence_parallel


def _interval_families(fw, hw, implementation, family) -> list[KernelFamily]:
    """The kernel families a candidate's interval spans: the one named, else the framework's
    own, else the families frameworks run on this hardware (the backend is unknown)."""
    if implementation is not None or fw.attention is not None or family.ideal:
        return [family]
    return [fw.kernel_family(hw, name) for name in kernel_alternatives(hw)]


def _implementation_source(fw, hw, implementation, family) -> str:
    if implementation is not None:
        return "named"
    if fw.attention is not None:
        return f"framework {fw.name}: {fw.sources.get('attention', '')}"
    if family.ideal:
        return f"no kernel family has published curves for {hw.name}: peak rates (ideal)"
    return f"the default on {hw.name}: {ATTENTION_KERNELS_SOURCE}"


def candidate_interval(
    model, cand, seq_len, global_batch, cluster, timer, families, mode, convention
) -> tuple[float, float]:
    """``(low, high)`` seconds of a timed candidate's step over what the prediction does not
    know: each kernel family of ``families`` (the backend, where unknown), with the step's
    ranges (``ringsim.timer.step.uncertainty``) and the attention's
    (``ringsim.timer.machine.ranges``) all at their fast or all at their slow ends; then
    widened to at least what ``ringsim validate``'s whole-step misses show
    (``STEP_MISS``). ``ideal`` has no interval."""
    if get_family(timer.implementation).ideal:
        return cand.step_time_s, cand.step_time_s
    seen = [cand.step_time_s]
    for family in families:
        base = timer if family is timer.implementation else timer.with_family(family)
        for end in ("fast", "slow"):
            other = dataclasses.replace(cand)
            scale = step_scale(cluster.hardware, dict.fromkeys(STEP_RANGES, end))
            at = base.at(dict.fromkeys(RANGES, end))
            _time(other, model, seq_len, global_batch, mode, at, cluster, False, convention, scale)
            seen.append(other.step_time_s)
    return at_least_the_misses(cand.step_time_s, min(seen), max(seen))


def evaluate(
    model: ModelSpec,
    parallels: list[Parallel],
    seq_len: int,
    global_batch: int,
    cluster: Cluster,
    timer: AttentionTimer,
    *,
    mode: str = "train",
    flops_convention: str = "megatron",
    keep: int | None = None,
    progress: Progress | None = None,
    scale: StepScale | None = None,
    usable: float | None = None,
    time_all: bool = False,
    beat: float | None = None,
) -> tuple[list[Candidate], list[Candidate], list[Candidate]]:
    """Size every configuration of ``parallels`` and time the ones that fit: ``(timed, best
    first; not fitting; bounded)``. With ``keep``, the fitting ones are taken best bound first
    (``lower_bound``; under a real family, before one is timed exactly its attention is
    timed at the wave tail's bound, ``AttentionTimer.bounding``, which tightens its bound
    without the CTA schedules) until the next bound exceeds the ``keep``-th best time found
    (and ``TWIN_TOLERANCE`` more, so the layout twins of the best fold into their groups):
    the first ``keep`` are then exactly the best, and the rest (``bounded``, by bound) are
    provably slower than them, never timed. ``TimesOutOfRange`` if a time leaves float64's
    range. ``scale``: the ends of the step's ranges (``ringsim.timer.step.uncertainty``;
    default: their points);
    ``usable``: the bytes a device leaves for tensors (default: its default framework's);
    ``time_all``: time the ones that do not fit too (a published run as it was launched);
    ``beat`` (with ``keep=1``): a step time already known, so only candidates whose lower
    bound is under it are timed (none may be returned)."""
    if usable is None:
        usable = usable_bytes(cluster.hardware)
    family = get_family(timer.implementation)
    ideal = family.ideal
    progress = progress or _silent
    fitting, dropped = [], []
    for i, par in enumerate(parallels):
        progress(i, len(parallels), "configurations sized")
        cand = _sized(model, par, seq_len, global_batch, mode, timer, usable, cluster)
        (fitting if cand.fits else dropped).append(cand)
    timing = (model, seq_len, global_batch, mode, timer, cluster, ideal, flops_convention, scale)
    order = {id(c): i for i, c in enumerate(fitting)}  # ties ranked as enumerated
    # a calibrated block's masked tiles may beat its peak rate: no bound from the peak then
    if keep is None or family.calibrated:
        for i, cand in enumerate(fitting):
            progress(i, len(fitting), "configurations that fit, timed")
            _time(cand, *timing)
        timed, bounded = fitting, []
    else:
        timed, bounded = _best_first(fitting, keep, beat, timing, progress)
    if time_all:
        for cand in dropped:
            _time(cand, *timing)
    timed.sort(key=lambda c: (c.step_time_s, c.bytes_per_host, order[id(c)]))
    return timed, dropped, bounded


def _best_first(fitting, keep, beat, timing, progress) -> tuple[list, list]:
    """``evaluate``'s search with ``keep``: ``(timed, bounded)``. A queue by each candidate's
    lowest known bound: the peak-rate bound (``lower_bound``) first; a candidate whose
    attention is not timed yet gets the wave-tail bound before it is timed exactly (unless the
    family is ``ideal``, whose bound is its compute); the search ends when the next bound
    exceeds the ``keep``-th best time (with ``TWIN_TOLERANCE``)."""
    model, seq_len, global_batch, mode, timer, cluster, ideal, *_ = timing
    for cand in fitting:
        cand.lower_bound_s = lower_bound(
            model, cand, seq_len, global_batch, mode, timer, cluster, ideal
        )
        _check_seconds(cand, "lower bound of its step", cand.lower_bound_s)
    queue = sorted((c.lower_bound_s, i, ideal) for i, c in enumerate(fitting))  # a heap
    timed, bounded, best = [], [], [beat] if beat is not None and keep == 1 else []
    passes = ("forward",) if mode == "prefill" else ("forward", "backward")  # as _time asks
    tightened = 0
    while queue:  # what it has done so far: it stops once the rest are provably slower
        done = len(timed) + tightened
        progress(done, len(fitting), "configurations that fit, timed or their bound tightened")
        bound, i, refined = heapq.heappop(queue)
        cand = fitting[i]
        if len(best) >= keep and bound > best[keep - 1] * (1.0 + TWIN_TOLERANCE):
            bounded = [cand, *(fitting[j] for _, j, _ in sorted(queue))]
            break
        if not refined and not timer.has_time(cand.parallel, passes):
            other = dataclasses.replace(cand)
            _time(other, model, seq_len, global_batch, mode, timer.bounding(), *timing[5:])
            cand.lower_bound_s = max(bound, other.step_time_s)
            heapq.heappush(queue, (cand.lower_bound_s, i, True))
            tightened += 1
            continue
        _time(cand, *timing)
        timed.append(cand)
        best = sorted([*best, cand.step_time_s])[:keep]
    return timed, bounded


def lower_bound(model, cand, seq_len, global_batch, mode, timer, cluster, ideal) -> float:
    """The candidate's step with its attention as the busiest GPU's share of exactly the pairs
    the mask leaves (``AttentionTimer.busiest_work``: its layout's imbalance counts, a
    balanced split is the least it can be), at the fastest rate any call of the kernel family
    runs (``AttentionTimer.rate_bound``: the peak for ``ideal``), no communication: no call
    runs faster, no GPU finishes before its own pairs, and the step only grows with the
    attention's time (``ringsim.timer.step.training``), so no timed step is shorter."""
    par = cand.parallel
    heads, _ = heads_per_gpu(model, par.tp)
    work = timer.busiest_work(par)
    seconds = {
        pass_: attention_flops(
            seq_len, seq_len, heads, model.head_dim, work=work, pass_=pass_, batch=timer.micro_batch
        )
        / timer.rate_bound(pass_)
        for pass_ in RING_PASSES
    }
    attention = AttentionTime(seconds["forward"], seconds["backward"])
    if mode == "prefill":
        return prefill_time(model, par, seq_len, cluster, attention, ideal=ideal)
    return step_time(model, par, seq_len, global_batch, cluster, attention, ideal=ideal).step_time_s


def _recompute_choices(recompute, mode: str, fw: Framework | None = None) -> tuple[str, ...]:
    """The recompute flavours to rank: those asked for (each one the framework runs, each named
    once), else the framework's own, else Megatron's three; a prefill (one forward, nothing
    kept for a backward) recomputes nothing, so a choice given there is refused rather than
    ignored."""
    if mode == "prefill":
        if recompute is not None:
            raise ValueError(
                f"recompute={recompute!r} changes nothing in prefill mode (a forward pass keeps "
                "no activations for a backward); leave it out"
            )
        return ("none",)
    if recompute is None:
        return tuple(fw.recomputes) if fw is not None and fw.recomputes else RECOMPUTE
    if not isinstance(recompute, str | list | tuple):
        raise ValueError(f"recompute must be a choice or a tuple of them, got {recompute!r}")
    chosen = (recompute,) if isinstance(recompute, str) else tuple(recompute)
    for r in chosen:
        check_choice("recompute", r, RECOMPUTES)
        if fw is not None:
            _allowed(fw, "recomputes", r, ())
    return tuple(dict.fromkeys(chosen))  # a choice named twice is one choice (ranked once)


def _sized(m, par, seq_len, global_batch, mode, timer, usable, cluster) -> Candidate:
    cand = Candidate(par, seq_len // par.ring, micro_batches(global_batch, par))
    if mode == "prefill":
        cand.memory = prefill_bytes(m, par, seq_len, timer.bytes(par, "forward"))
    else:
        cand.memory = step_bytes(m, par, seq_len, cand.micro_batches, timer.bytes(par))
    cand.bytes_per_host = sum(cand.memory.values())
    cand.usable_bytes = usable
    cand.device_bytes = cluster.hardware.memory_bytes
    cand.fits = cand.bytes_per_host <= usable
    return cand


def _time(cand, m, seq_len, global_batch, mode, timer, cluster, ideal, convention, scale=None):
    par = cand.parallel
    if mode == "prefill":
        attention, idle = timer.time(par, ("forward",))
        cand.attention_layer = (attention.forward_s, 0.0)
        total = prefill_time(m, par, seq_len, cluster, attention, ideal=ideal, scale=scale)
        cand.breakdown = {
            "attention_s": m.layers * attention.forward_s,
            "cp_exposed_comm_s": m.layers * attention.exposed_comm_s,
        }
        cand.step_time_s = total
    else:
        attention, idle = timer.time(par)
        cand.attention_layer = (attention.forward_s, attention.backward_s)
        b = step_time(m, par, seq_len, global_batch, cluster, attention, ideal=ideal, scale=scale)
        cand.breakdown = b.as_dict()
        cand.step_time_s = b.step_time_s
    cand.idle_fraction = idle
    cand.timed = True
    times = {"step time": cand.step_time_s}
    times.update((k, v) for k, v in cand.breakdown.items() if k.endswith("_s"))  # hidden too
    for what, seconds in times.items():
        _check_seconds(cand, what, seconds)
    if mode == "train":
        gpus = par.gpus
        cand.model_tflops_per_gpu = model_tflops_per_gpu(
            m, seq_len, global_batch, gpus, cand.step_time_s, convention
        )
        cand.mfu = cand.model_tflops_per_gpu * 1e12 / peak_flops(cluster.hardware, "bf16")


def _check_seconds(cand: Candidate, what: str, seconds: float) -> None:
    """``TimesOutOfRange`` unless ``seconds`` (a time of ``cand``) is in float64's range."""
    if not 0.0 <= seconds <= MAX_SECONDS:  # NaN fails too
        raise TimesOutOfRange(
            f"{cand.label}: the {what.removesuffix('_s').replace('_', ' ')} leaves float64's "
            f"range ({seconds:.3g} s; at most {MAX_SECONDS:.3g} s): the hardware's rates or "
            f"latencies are too extreme"
        )


def _nothing_fits(m, seq_len, cluster, hosts, usable, dropped) -> str:
    leanest = min(dropped, key=lambda c: c.bytes_per_host)
    parts = sorted(leanest.memory.items(), key=lambda kv: -kv[1])[:3]
    biggest = ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in parts)
    return (
        f"model {m.name} at seq_len={seq_len} fits no strategy on {hosts} x "
        f"{cluster.hardware.name} ({usable / 1e9:.1f} GB usable of "
        f"{cluster.hardware.memory_bytes / 1e9:.0f} GB each): the leanest ({leanest.label}) "
        f"needs {leanest.bytes_per_host / 1e9:.1f} GB per device ({biggest})"
    )
