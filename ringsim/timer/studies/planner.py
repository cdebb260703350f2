"""The planner: which sequence-parallel strategy, degrees, placement and layout for one model,
one sequence length and one cluster, ranked by the timer's predicted step time.

``plan`` enumerates every candidate the ``P`` hosts allow: the ring, Ulysses (``P <= H_kv``),
the hybrid ``U x R`` (USP), the double ring (LoongTrain) and all-gather (Llama 3), each with
every Ulysses degree ``U`` that divides ``P`` and the key/value heads, both placements (the
Ulysses groups inside nodes or across them), and every layout (causal: ``zigzag``,
``striped``, ``contiguous``; Ulysses' compute has no layout). The ring block is ``N / R``
tokens, so the degrees choose the block size. It drops the candidates whose bytes per host do
not fit the device, and times the rest on the cluster (``ringsim.timer.strategies``).

One candidate's time, per transformer layer (every host runs all layers on its ``c = N / P``
tokens): the attention layer's forward and, for training, backward pass (each timed as one
run of the strategy, communication included), plus the layer's local matmuls over the
device's FLOP rate: q/k/v/o projections and the SwiGLU MLP (three ``d x f`` matrices),
forward and backward (2 x). ``step_time_s = layers x (attention + local) + LM head``. Not
modelled: activation recomputation, the data-parallel/FSDP traffic of weights and gradients
(the same for every candidate of one run), pipeline bubbles, attention kernels' efficiency
(``implementation="ideal"``: peak FLOP/s, as in lessons 1-9).

Memory (``bytes_per_host``): ``ringsim.timer.step.memory.bytes_per_host`` for the model states
(FSDP over all ``P`` hosts), the gathered layer, the layer-input checkpoints and the logits of
``c`` tokens, and the strategy's own attention working set (``Strategy.working_set_bytes``: the
ring's block and the one in flight, Ulysses' gathered heads, all-gather's full k, v) in place
of the ring's. For inference prefill: the bf16 weights over ``P`` hosts, the key/value cache
of ``c`` tokens in every layer, and the forward working set.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from ringsim.grid import check_ulysses_degree
from ringsim.layouts import get_layout
from ringsim.timer.cost import DTYPE_BYTES, ffn_flops, projection_flops
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.step.memory import bytes_per_host
from ringsim.timer.step.models import ModelSpec, get_model
from ringsim.timer.strategies import get_strategy, simulate_strategy

MODES = ("train", "prefill")
CAUSAL_LAYOUTS = ("zigzag", "striped", "contiguous")


@dataclass
class Candidate:
    """One way to run the sequence: its strategy and degrees, predicted time and memory."""

    strategy: str
    ulysses_degree: int
    ring_degree: int
    placement: str
    layout: str
    block_tokens: int
    step_time_s: float = 0.0
    attention_s: float = 0.0
    local_s: float = 0.0
    compute_s: float = 0.0
    exposed_comm_s: float = 0.0
    idle_fraction: float = 0.0
    bytes_per_host: float = 0.0
    memory_bytes: float = 0.0
    fits: bool = True

    @property
    def headroom_bytes(self) -> float:
        return self.memory_bytes - self.bytes_per_host

    @property
    def label(self) -> str:
        if self.strategy in ("ring", "ulysses"):
            degrees = f"{self.strategy}"
        else:
            degrees = f"{self.strategy} U{self.ulysses_degree}xR{self.ring_degree}"
            if self.ulysses_degree > 1:
                degrees += f" ({self.placement})"
        return f"{degrees}, {self.layout}"

    def why(self) -> str:
        """Where the time goes, in one line."""
        step = self.step_time_s
        return (
            f"attention compute {self.compute_s / step:.0%}, exposed communication "
            f"{self.exposed_comm_s / step:.0%}, other matmuls {self.local_s / step:.0%}; "
            f"hosts idle {self.idle_fraction:.0%} of the attention; "
            f"{self.headroom_bytes / 1e9:.1f} GB memory headroom"
        )

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["headroom_bytes"] = self.headroom_bytes
        out["label"] = self.label
        out["why"] = self.why() if self.fits and self.step_time_s > 0 else "does not fit"
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

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "seq_len": self.seq_len,
            "hosts": self.hosts,
            "cluster": self.cluster.name,
            "cluster_description": self.cluster.describe(),
            "mode": self.mode,
            "causal": self.causal,
            "candidates": [c.as_dict() for c in self.candidates],
            "dropped": [c.as_dict() for c in self.dropped],
            "evaluated": len(self.candidates) + len(self.dropped),
            "planner_seconds": self.seconds,
        }


def enumerate_candidates(model: ModelSpec, hosts: int, seq_len: int, causal: bool) -> list:
    """Every ``(strategy, U, placement, layout)`` the hosts and heads allow (unordered)."""
    H, H_kv = model.heads, model.n_kv_heads
    layouts = CAUSAL_LAYOUTS if causal else ("contiguous",)
    layouts = tuple(lay for lay in layouts if _splits(seq_len, hosts, lay))
    out = []
    degrees = [u for u in range(1, hosts + 1) if _valid(hosts, H, H_kv, u)]
    for u in degrees:
        r = hosts // u
        placements = ("ulysses-inner", "ring-inner") if 1 < u < hosts else ("ulysses-inner",)
        if r == 1:
            out.append(("ulysses", u, "ulysses-inner", "contiguous"))
            continue
        for placement in placements:
            for layout in layouts:
                if u == 1:
                    out.append(("ring", 1, placement, layout))
                else:
                    out.append(("hybrid", u, placement, layout))
                out.append(("double-ring", u, placement, layout))
                out.append(("allgather", u, placement, layout))
    return out


def _valid(hosts: int, heads: int, kv_heads: int, u: int) -> bool:
    try:
        check_ulysses_degree(hosts, kv_heads, u)
    except ValueError:
        return False
    return True


def _splits(seq_len: int, hosts: int, layout: str) -> bool:
    return seq_len % get_layout(layout).divisor(hosts) == 0


def plan(
    model: str | ModelSpec,
    seq_len: int,
    cluster: Cluster,
    hosts: int | None = None,
    *,
    mode: str = "train",
    causal: bool = True,
    dtype: str = "bf16",
    batch: int = 1,
    implementation: str = "ideal",
) -> Plan:
    """Rank every candidate for ``model`` at ``seq_len`` tokens on ``hosts`` devices of
    ``cluster`` (default: all of its nodes). ``ValueError`` if none fits in memory, saying
    what would."""
    t0 = time.perf_counter()
    m = get_model(model)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if hosts is None:
        if cluster.nodes is None:
            raise ValueError("hosts is needed for a cluster without a node count")
        hosts = cluster.nodes * cluster.gpus_per_node
    cluster = cluster if cluster.nodes is not None else cluster.with_nodes(cluster.nodes_for(hosts))
    cluster.check_hosts(hosts)
    base = _base_config(m, seq_len, hosts, cluster, causal, dtype, batch, implementation)
    fitting, dropped = [], []
    for strategy, u, placement, layout in enumerate_candidates(m, hosts, seq_len, causal):
        cand = Candidate(strategy, u, hosts // u, placement, layout, seq_len // (hosts // u))
        cand.memory_bytes = cluster.hardware.memory_bytes
        cand.bytes_per_host = candidate_bytes(m, base, cand, mode)
        cand.fits = cand.bytes_per_host <= cand.memory_bytes
        (fitting if cand.fits else dropped).append(cand)
    if not fitting:
        raise ValueError(_nothing_fits(m, base, cluster, hosts, mode, dropped))
    for cand in fitting:
        _time(m, base, cluster, cand, mode)
    fitting.sort(key=lambda c: (c.step_time_s, c.bytes_per_host))
    seconds = time.perf_counter() - t0
    return Plan(m.name, seq_len, hosts, cluster, mode, causal, fitting, dropped, seconds)


def _base_config(m, seq_len, hosts, cluster, causal, dtype, batch, implementation) -> RingConfig:
    fields = dict(
        hosts=hosts,
        seq_len=seq_len,
        hardware=cluster.hardware,
        heads=m.heads,
        kv_heads=m.n_kv_heads,
        head_dim=m.head_dim,
        dtype=dtype,
        batch=batch,
        causal=causal,
        d_model=m.d_model,
        ffn=m.ffn_hidden,
        layout="contiguous",
        implementation=implementation,
    )
    return RingConfig(**fields)


def candidate_bytes(m: ModelSpec, base: RingConfig, cand: Candidate, mode: str) -> float:
    """Bytes on one host for ``cand`` (the module docstring's accounting)."""
    pass_ = "backward" if mode == "train" else "forward"
    cfg = base.replace(pass_=pass_, layout=cand.layout)
    attention = get_strategy(cand.strategy).working_set_bytes(cfg, cand.ulysses_degree)
    e, c, P = DTYPE_BYTES[base.dtype], base.block_tokens, base.hosts
    if mode == "prefill":
        weights = e * m.params / P
        cache = 2.0 * m.layers * c * m.n_kv_heads * m.head_dim * e * base.batch
        return float(weights + cache + max(attention, base.batch * c * m.d_model * e))
    parts = bytes_per_host("ring", m, base.seq_len, P, dtype=base.dtype, batch=base.batch)
    parts["layer_working_set"] = max(attention, base.batch * c * m.d_model * e)
    return float(sum(parts.values()))


def local_seconds(m: ModelSpec, base: RingConfig, mode: str) -> tuple[float, float]:
    """``(per layer, LM head)`` seconds of the matmuls around attention on one host's ``c``
    tokens, forward (+ backward for training), at the device's FLOP rate."""
    tokens = base.block_tokens * base.batch
    dims = (m.d_model, m.heads, m.n_kv_heads, m.head_dim)
    swiglu = 1.5 * m.ffn_hidden  # three d x f matrices (ffn_flops counts two)
    passes = ("forward", "backward") if mode == "train" else ("forward",)
    flops = sum(
        sum(projection_flops(tokens, *dims, pass_=p))
        + ffn_flops(tokens, m.d_model, swiglu, pass_=p)
        for p in passes
    )
    head = 2.0 * tokens * m.d_model * m.vocab * (3.0 if mode == "train" else 1.0)
    return flops / base.flops_rate, head / base.flops_rate


def _time(m: ModelSpec, base: RingConfig, cluster: Cluster, cand: Candidate, mode: str) -> None:
    passes = ("forward", "backward") if mode == "train" else ("forward",)
    attention = compute = exposed = idle = 0.0
    for pass_ in passes:
        cfg = base.replace(pass_=pass_, layout=cand.layout)
        u = None if cand.strategy in ("ring", "ulysses") else cand.ulysses_degree
        result = simulate_strategy(
            cfg, cand.strategy, ulysses_degree=u, cluster=cluster, placement=cand.placement
        )
        s = result.summary()
        attention += s["total_time_s"]
        compute += s["compute_time_s"]
        exposed += s["exposed_comm_s"]
        idle += s["idle_fraction"] * s["total_time_s"]
    layer_local, head = local_seconds(m, base, mode)
    cand.attention_s = m.layers * attention
    cand.compute_s = m.layers * compute
    cand.exposed_comm_s = m.layers * exposed
    cand.idle_fraction = idle / attention if attention else 0.0
    cand.local_s = m.layers * layer_local + head
    cand.step_time_s = cand.attention_s + cand.local_s


def _nothing_fits(m, base, cluster, hosts, mode, dropped) -> str:
    """What would fit: the leanest candidate's need, the longest sequence it fits at, and how
    many devices it would need at this sequence length."""
    leanest = min(dropped, key=lambda c: c.bytes_per_host)
    budget = cluster.hardware.memory_bytes

    def fits(seq_len: int, devices: int) -> bool:
        try:
            cfg = base.replace(seq_len=seq_len, hosts=devices, speed=None)
            return candidate_bytes(m, cfg, leanest, mode) <= budget
        except ValueError:  # the layout cannot split this length
            return False

    seq = base.seq_len // 2
    while seq >= 2 * hosts and not fits(seq, hosts):
        seq //= 2
    shorter = f"seq_len <= {seq}" if fits(seq, hosts) else f"no length on {hosts} devices"
    more = 2 * hosts
    while more < 2**20 and not fits(base.seq_len, more):
        more *= 2
    return (
        f"model {m.name} at seq_len={base.seq_len} fits no strategy on {hosts} x "
        f"{cluster.hardware.name} ({budget / 1e9:.0f} GB each): the leanest ({leanest.label}) "
        f"needs {leanest.bytes_per_host / 1e9:.1f} GB per device; it would fit at {shorter}, "
        f"or on {more} devices"
    )
