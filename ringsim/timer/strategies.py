"""The ring's peers, in the same timer: DeepSpeed-Ulysses and all-gather context parallelism.

All three split a sequence of ``N`` tokens over ``P`` hosts, ``c = N / P`` tokens each, and
compute the same exact attention. They differ in what moves, and when.

* ``ring`` (``ringsim.timer.simulate``): ``P - 1`` hops of one key/value block each,
  overlapped with the compute of the previous block; memory per host ``~ c``.
* ``ulysses`` (Jacobs et al., 2023): an **all-to-all** re-shards q, k, v from "all heads of
  ``c`` tokens" to "all ``N`` tokens of ``H / P`` heads"; each host computes full-length
  attention for its heads; a second all-to-all returns the output to the sequence split. Both
  all-to-alls are prerequisites of the next step: nothing overlaps them. A key/value head cannot
  be split, so ``P <= kv_heads`` (with grouped-query attention the cap is the *kv* head count;
  replicating kv heads to go further is not modelled). Memory per host ``~ N / P``.
* ``allgather`` (the context parallelism used to train Llama 3): an **all-gather** gives every
  host the keys and values of all ``N`` tokens, then each host attends its own ``c`` queries
  (layout ``zigzag`` balances the causal work) to everything it gathered. Only the host's own
  block can be computed while the gather runs; memory per host ``~ N`` (all keys and values).

Communication (one model for every collective, the same link as the ring's): a host injects
into the network at ``B`` bytes/s (``link_bandwidth``, per direction) and pays the latency
``alpha`` once per message, so a collective in which a host sends ``m`` messages totalling
``M`` bytes takes ``m alpha + M / B``.

* all-to-all: ``P - 1`` messages (one to every other host), ``M = (P - 1) / P`` of the host's
  shard. This is the generous case for Ulysses (a switch, e.g. NVSwitch, that lets a host
  drive its full ``B`` to any peer); on a physical ring an all-to-all shares links and is slower.
* all-gather and reduce-scatter: a ring, ``P - 1`` hops of one ``c``-token block each.

Ulysses per pass (``H_kv`` key/value heads, head dim ``d``, ``e`` bytes per element): forward
sends q, k, v in (``c (H + 2H_kv) d e (P-1)/P``) and the output back (``c H d e (P-1)/P``);
backward sends q, k, v, dout in (the forward's output and lse stay head-sharded) and dq, dk,
dv back. All-gather backward gathers k, v again, computes, and reduce-scatters dk, dv
(``grad_block_bytes`` per hop, the same gradient dtype as the ring's).

The crossover (``crossover_bandwidth``). Forward, no mask, no latency; ``T_c = 4 c^2 H d / F``
is one ring block's compute, ``y = c d e / B``. The ring takes ``P T_c`` while its link keeps up
and ``T_c + (P - 1) 2 H_kv y`` once it does not; Ulysses always takes
``P T_c + 2 (P - 1)(H + H_kv) y / P``. Setting them equal on the link-bound branch:

    y* = T_c / (2 (H_kv - (H + H_kv) / P)),   B* = c d e / y*

Above ``B*`` the ring wins (its transfers hide, Ulysses' all-to-alls never do); below it Ulysses
wins, because the ring pushes ``P - 1`` blocks through one link while an all-to-all moves each
token once. With ``P <= 1 + H / H_kv`` the bracket is not positive and the ring wins at every
bandwidth: with grouped-query attention the ring moves only the small k, v, Ulysses also q and
the output. For multi-head attention ``B*`` sits just below the ring's own overlap bandwidth,
``(P - 2) / P`` of it.

The timelines use the ``Timeline`` type of the ring, one row per phase instead of per ring step
(a collective is one interval per host), so plots, traces and ``summary()`` work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ringsim.timer import HostClock, RingConfig, SimResult, simulate
from ringsim.timer.cost import (
    DTYPE_BYTES,
    attention_flops,
    grad_block_bytes,
    hiding_block,
    kv_block_bytes,
)
from ringsim.timer.memory import allgather_working_set_bytes, ulysses_working_set_bytes
from ringsim.timer.timeline import Timeline

STRATEGIES = ("ring", "ulysses", "allgather")
PEER_PASSES = ("forward", "backward")


@dataclass
class StrategyResult(SimResult):
    """A ``SimResult`` that knows its strategy; ``summary()`` has the ring's keys plus
    ``strategy`` and, for the peers, their own memory per host and overlap block."""

    strategy: str = "ring"
    memory_bytes: float | None = None  # None: the ring's attention working set
    overlap_block: float | None = None
    peer: bool = False

    def summary(self) -> dict:
        result = super().summary()
        result["strategy"] = self.strategy
        if self.peer:
            result["memory_per_host_bytes"] = self.memory_bytes
            result["min_block_for_overlap"] = self.overlap_block
        return result


def check_strategy(strategy: object) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return str(strategy)


def check_ulysses_hosts(hosts: int, heads: int, kv_heads: int) -> None:
    """Ulysses gives every host at least one whole key/value head."""
    if hosts > kv_heads:
        raise ValueError(
            f"ulysses splits attention by heads: hosts={hosts} exceeds kv_heads={kv_heads} "
            f"(heads={heads}); use at most {kv_heads} hosts, or the ring"
        )


def simulate_strategy(config: RingConfig, strategy: str) -> SimResult:
    """Time ``config`` under ``strategy`` (``"ring"``, ``"ulysses"`` or ``"allgather"``).

    The peers support ``pass_`` forward and backward; per-host ``speed`` and ``jitter`` act as
    in the ring's timer (compute divided by speed; every duration times ``1 + jitter * u``).
    """
    strategy = check_strategy(strategy)
    if not isinstance(config, RingConfig):
        raise ValueError(f"config must be a RingConfig, got {config!r}")
    if strategy == "ring":
        ring = simulate(config)
        return StrategyResult(**vars(ring), strategy="ring")
    if config.pass_ not in PEER_PASSES:
        raise ValueError(
            f"pass must be one of {', '.join(PEER_PASSES)} for strategy {strategy}, "
            f"got {config.pass_!r}"
        )
    if strategy == "ulysses":
        check_ulysses_hosts(config.hosts, config.heads, config.kv_heads)
        return _ulysses(config)
    return _allgather(config)


# -- shared pieces ---------------------------------------------------------------------------
class _Rows:
    """A ``Timeline`` under construction: one row per phase, NaN where nothing happens."""

    def __init__(self, labels: list[str], hosts: int):
        self.labels = labels
        shape = (len(labels), hosts)
        self.arrays = {k: np.full(shape, np.nan) for k in ("cs", "ce", "ss", "se", "rs", "re")}

    def compute(self, row: int, start: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        self.arrays["cs"][row], self.arrays["ce"][row] = start, start + seconds
        return start + seconds

    def transfer(self, row: int, start: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """Every host sends for ``seconds`` from ``start``; a collective ends for all together
        (each host needs every other host's data), at the latest host's end."""
        end = start + seconds
        self.arrays["ss"][row], self.arrays["se"][row] = start, end
        done = np.full_like(end, end.max())
        self.arrays["rs"][row], self.arrays["re"][row] = start, done
        return done

    def timeline(self, meta: dict) -> Timeline:
        a = self.arrays
        return Timeline(a["cs"], a["ce"], a["ss"], a["se"], a["rs"], a["re"], self.labels, meta)


def _result(config, rows, schedule, flops_total, strategy, memory, overlap_block):
    meta = {"pass": config.pass_, "engine": strategy, "hardware": config.hardware.name}
    return StrategyResult(
        config,
        rows.timeline(meta),
        schedule,
        flops_total,
        engine=strategy,
        strategy=strategy,
        memory_bytes=memory,
        overlap_block=overlap_block,
        peer=True,
    )


# -- Ulysses ---------------------------------------------------------------------------------
def heads_per_host(heads: int, hosts: int) -> np.ndarray:
    """``(P,)`` query heads on each Ulysses host: the first ``heads % P`` hosts get one more."""
    base, extra = divmod(heads, hosts)
    return base + (np.arange(hosts) < extra)


def _ulysses(config: RingConfig) -> StrategyResult:
    P, N, c = config.hosts, config.seq_len, config.block_tokens
    H, H_kv, d = config.heads, config.kv_heads, config.head_dim
    e, backward = DTYPE_BYTES[config.dtype], config.pass_ == "backward"
    # the fraction of the N x N pairs a kernel computes: the ring's blocks of a contiguous split
    # tile the full matrix in its natural order, so their mean work is the whole matrix's
    schedule = config.schedule(layout="contiguous")
    work = float(sum(schedule.work_at(s).sum() for s in range(P))) / P**2
    heads = heads_per_host(H, P)
    flops = np.array(
        [
            attention_flops(N, N, int(h), d, work=work, pass_=config.pass_, batch=config.batch)
            for h in heads
        ]
    )
    share = (P - 1) / P * c * d * e * config.batch  # one head-width of the host's shard, sent
    width_in = 2 * H + 2 * H_kv if backward else H + 2 * H_kv  # (q, k, v[, dout]) in
    width_out = H + 2 * H_kv if backward else H  # (dq, dk, dv) or out, back
    clock = HostClock(config)
    name_in = "q, k, v, dout" if backward else "q, k, v"
    name_out = "dq, dk, dv" if backward else "out"
    rows = _Rows(
        [f"all-to-all {name_in}", f"attention, {H}/{P} heads", f"all-to-all {name_out}"], P
    )
    ready = rows.transfer(0, np.zeros(P), clock.transfer(share * width_in, P - 1))
    done = rows.compute(1, ready, clock.compute(flops))
    rows.transfer(2, np.full(P, done.max()), clock.transfer(share * width_out, P - 1))
    memory = ulysses_working_set_bytes(
        N, P, H, H_kv, d, config.dtype, pass_=config.pass_, batch=config.batch
    )
    return _result(config, rows, None, float(flops.sum()), "ulysses", memory, None)


# -- all-gather (Llama 3 context parallelism) ------------------------------------------------
def _allgather(config: RingConfig) -> StrategyResult:
    P, c = config.hosts, config.block_tokens
    H, H_kv, d = config.heads, config.kv_heads, config.head_dim
    schedule = config.schedule()
    block = attention_flops(c, c, H, d, pass_=config.pass_, batch=config.batch)
    own = block * schedule.work_at(0)  # step 0 of the ring: the host's own kv block
    rest = block * sum((schedule.work_at(s) for s in range(1, P)), np.zeros(P))
    kv = kv_block_bytes(c, H_kv, d, config.dtype, batch=config.batch)
    clock = HostClock(config)
    labels = ["all-gather k, v + own block", "attention to the gathered k, v"]
    if config.pass_ == "backward":
        labels.append("reduce-scatter dk, dv")
    rows = _Rows(labels, P)
    gathered = rows.transfer(0, np.zeros(P), clock.transfer((P - 1) * kv, P - 1))
    own_start = np.zeros(P) if config.overlap else gathered
    own_end = rows.compute(0, own_start, clock.compute(own))
    done = rows.compute(1, np.maximum(own_end, gathered), clock.compute(rest))
    if config.pass_ == "backward":
        grads = grad_block_bytes(
            c, H_kv, d, config.dtype, batch=config.batch, grad_dtype=config.grad_dtype
        )
        rows.transfer(2, np.full(P, done.max()), clock.transfer((P - 1) * grads, P - 1))
    memory = allgather_working_set_bytes(
        config.seq_len, P, H, H_kv, d, config.dtype, pass_=config.pass_, batch=config.batch
    )
    overlap_block = allgather_overlap_block(config) if config.overlap else None
    return _result(
        config, rows, schedule, float(own.sum() + rest.sum()), "allgather", memory, overlap_block
    )


def allgather_overlap_block(config: RingConfig) -> float:
    """Smallest ``c`` for which the host's own block (no mask) hides the whole all-gather.

    ``4 c^2 H d / F >= (P - 1) (alpha + 2 c H_kv d e / B)`` (forward; a backward block computes
    2.5 x that against the same gather): the ring's condition with ``P - 1`` blocks to hide
    instead of one, so about ``(P - 1)`` times the ring's threshold.
    """
    if config.hosts == 1:
        return 0.0
    hw, hops = config.hardware, config.hosts - 1
    a = attention_flops(1, 1, config.heads, config.head_dim, pass_=config.pass_) / config.flops_rate
    beta = hops * kv_block_bytes(1, config.kv_heads, config.head_dim, config.dtype)
    beta /= hw.link_bandwidth
    latency = hops * hw.link_latency / config.batch
    return hiding_block(a, beta, latency)


# -- the ring against Ulysses ---------------------------------------------------------------
def crossover_bandwidth(config: RingConfig) -> float | None:
    """Link bandwidth ``B*`` below which Ulysses beats the ring (forward, no mask, no latency;
    derivation in the module docstring); ``None`` if the ring wins at every bandwidth."""
    P, H, H_kv = config.hosts, config.heads, config.kv_heads
    bracket = H_kv - (H + H_kv) / P
    if bracket <= 0:
        return None
    c, d, e = config.block_tokens, config.head_dim, DTYPE_BYTES[config.dtype]
    t_block = attention_flops(c, c, H, d, batch=config.batch) / config.flops_rate
    y = t_block / (2.0 * bracket)
    return c * d * e * config.batch / y


def compare_strategies(config: RingConfig, strategies=STRATEGIES) -> dict[str, dict]:
    """``{strategy: summary}`` for the strategies that can run ``config`` (Ulysses is skipped
    past its head cap rather than raising)."""
    out = {}
    for strategy in strategies:
        if strategy == "ulysses" and config.hosts > config.kv_heads:
            continue
        out[strategy] = simulate_strategy(config, strategy).summary()
    return out


def with_bandwidth(config: RingConfig, bandwidth: float) -> RingConfig:
    """``config`` on the same hardware with another link bandwidth (for sweeps)."""
    return replace(config, hardware=replace(config.hardware, link_bandwidth=bandwidth))
