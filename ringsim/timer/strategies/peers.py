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

On a cluster (``ringsim.timer.machine.topology``; ``cluster=`` of ``simulate_strategy``) every hop
and collective below gets the bandwidth of its bottleneck edge (NVLink port, PCIe uplink, NIC);
``hybrid`` and ``double-ring`` (``ringsim.timer.strategies.hybrid``) split the hosts into Ulysses
groups and rings. Without a cluster, one node with an ideal switch, the model is this one.

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

from dataclasses import replace

from ringsim.checks import check_choice
from ringsim.timer import RingConfig, SimResult
from ringsim.timer.cost import DTYPE_BYTES, attention_flops, hiding_block, kv_block_bytes
from ringsim.timer.strategies.hybrid import simulate_hybrid
from ringsim.timer.strategies.sizes import check_strategy_fits

STRATEGIES = ("ring", "ulysses", "allgather")
"""The three flat strategies (every host in one group)."""
ALL_STRATEGIES = (*STRATEGIES, "hybrid", "double-ring")
"""With the two-level ones of ``ringsim.timer.strategies.hybrid`` (Ulysses x ring, the double
ring)."""
PEER_PASSES = ("forward", "backward")


def check_strategy(strategy: object) -> str:
    return check_choice("strategy", strategy, ALL_STRATEGIES)


def check_ulysses_hosts(hosts: int, heads: int, kv_heads: int) -> None:
    """Ulysses gives every host at least one whole key/value head."""
    if hosts > kv_heads:
        raise ValueError(
            f"ulysses splits attention by heads: hosts={hosts} exceeds kv_heads={kv_heads} "
            f"(heads={heads}); use at most {kv_heads} hosts, or the ring"
        )


def simulate_strategy(
    config: RingConfig,
    strategy: str,
    *,
    ulysses_degree: int | None = None,
    cluster=None,
    placement: str = "ulysses-inner",
    window: int | None = None,
    engine: str = "vectorized",
) -> SimResult:
    """Time ``config`` under ``strategy`` (one of ``ALL_STRATEGIES``) on ``cluster`` (a
    ``ringsim.timer.machine.topology.Cluster``; default one node with an ideal switch at the
    hardware's link, where the flat strategies are timed as they always were).

    ``ulysses_degree`` ``U`` (hybrid, double-ring, allgather; default 1) makes ``U``-host
    Ulysses groups and runs the strategy on ``hosts / U`` ranks per head group (see
    ``ringsim.timer.strategies.hybrid``); ``ring`` takes none, ``ulysses`` is ``U = hosts``. The
    peers support ``pass_`` forward and backward; per-host ``speed`` and ``jitter`` act as in the
    ring's timer (compute divided by speed; every duration times ``1 + jitter * u``).
    """
    strategy = check_strategy(strategy)
    if not isinstance(config, RingConfig):
        raise ValueError(f"config must be a RingConfig, got {config!r}")
    kw = dict(cluster=cluster, placement=placement, engine=engine)
    sizes = dict(ulysses_degree=ulysses_degree, window=window, cluster=cluster, placement=placement)
    check_strategy_fits(config, strategy, **sizes)
    if strategy == "ring":
        if ulysses_degree not in (None, 1):
            raise ValueError(
                f"ulysses_degree must be 1 for the ring (use strategy hybrid), got {ulysses_degree}"
            )
        return simulate_hybrid(config, 1, **kw)
    if strategy == "ulysses":
        if ulysses_degree not in (None, config.hosts):
            raise ValueError(
                f"ulysses_degree must be hosts={config.hosts} for ulysses (use strategy hybrid), "
                f"got {ulysses_degree}"
            )
        check_ulysses_hosts(config.hosts, config.heads, config.kv_heads)
        if config.pass_ not in PEER_PASSES:
            raise ValueError(
                f"pass must be one of {', '.join(PEER_PASSES)} for strategy ulysses, "
                f"got {config.pass_!r}"
            )
        return simulate_hybrid(config, config.hosts, **kw)
    u = 1 if ulysses_degree is None else ulysses_degree
    method = {"hybrid": "ring", "double-ring": "double-ring", "allgather": "allgather"}[strategy]
    if config.pass_ not in PEER_PASSES:
        raise ValueError(
            f"pass must be one of {', '.join(PEER_PASSES)} for strategy {strategy}, "
            f"got {config.pass_!r}"
        )
    result = simulate_hybrid(config, u, method=method, window=window, **kw)
    result.strategy = strategy
    if strategy == "allgather" and u == 1 and config.overlap:
        result.overlap_block = allgather_overlap_block(config)
    return result


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
    return config.replace(hardware=replace(config.hardware, link_bandwidth=bandwidth))
