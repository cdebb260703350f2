"""DeepSpeed-Ulysses (Jacobs et al., 2023): all-to-alls re-shard by heads; every host attends
the whole sequence on its heads.

An **all-to-all** re-shards q, k, v from "all heads of ``c`` tokens" to "all ``N`` tokens of
``H / P`` heads"; each host computes full-length attention for its heads (one kernel call per
host: ``ringsim.timer.engine.attention.FullSequence``); a second all-to-all returns the
output to the sequence split. Both all-to-alls are prerequisites of the next step: nothing
overlaps them. Every host gets whole key/value heads; past them (``P > kv_heads``, ``P`` a
multiple of the key/value heads dividing the query heads: ``ringsim.grid.check_ulysses_degree``)
each key/value head is replicated ``P / kv_heads`` times before the all-to-all, as verl
does (``repeat_kv``): the all-to-alls carry ``P`` key/value heads instead of ``kv_heads``, and
backward the replicas' ``dk, dv`` come back and are summed onto each head
(``ringsim.timer.strategies.frame``). Memory per host ``~ N / P``.

Communication, as for every collective here: a host injects ``M`` bytes in ``m`` messages
into the network at ``B`` bytes/s per direction, ``m alpha + M / B`` (a switch that lets a
host drive its full ``B`` to any peer: the generous case for Ulysses). Per pass (``e`` bytes
per element): forward sends q, k, v in (``c (H + 2H_kv) d e (P-1)/P``) and the output back
(``c H d e (P-1)/P``); backward sends q, k, v, dout in and dq, dk, dv back.

The crossover with the ring (``crossover_bandwidth``). Forward, no mask, no latency;
``T_c = 4 c^2 H d / F`` is one ring block's compute, ``y = c d e / B``. The ring takes
``P T_c`` while its link keeps up and ``T_c + (P - 1) 2 H_kv y`` once it does not; Ulysses
always takes ``P T_c + 2 (P - 1)(H + H_kv) y / P``. Setting them equal on the link-bound
branch:

    y* = T_c / (2 (H_kv - (H + H_kv) / P)),   B* = c d e / y*

Above ``B*`` the ring wins (its transfers hide, Ulysses' all-to-alls never do); below it
Ulysses wins, because the ring pushes ``P - 1`` blocks through one link while an all-to-all
moves each token once. With ``P <= 1 + H / H_kv`` the bracket is not positive and the ring
wins at every bandwidth: with grouped-query attention the ring moves only the small k, v,
Ulysses also q and the output. For multi-head attention ``B*`` sits just below the ring's own
overlap bandwidth, ``(P - 2) / P`` of it. (The ideal model's rates: a closed form to read,
not a timing.)
"""

from __future__ import annotations

from ringsim.sharing import ULYSSES
from ringsim.timer.cost import DTYPE_BYTES
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import StrategyResult
from ringsim.timer.strategies.base import Strategy
from ringsim.timer.strategies.frame import run_two_level, two_level_memory
from ringsim.timer.strategies.sizes import PIECE_BYTES, check_cells


class Ulysses(Strategy):
    record = ULYSSES
    flat = True
    uses_layout = False

    def runs(self, ulysses: int, ring: int) -> bool:
        return ring == 1 and ulysses > 1

    def degree(self, config: RingConfig, ulysses_degree: int | None) -> int:
        if ulysses_degree not in (None, config.run.hosts):
            raise ValueError(
                f"ulysses_degree must be hosts={config.run.hosts} for ulysses (use strategy "
                f"hybrid), got {ulysses_degree}"
            )
        return super().degree(config, config.run.hosts)

    def can_run(self, config: RingConfig) -> bool:
        P, shape = config.run.hosts, config.shape
        return P <= shape.kv_heads or (P % shape.kv_heads == 0 and shape.heads % P == 0)

    def check_fits(self, config, grid, cluster, window) -> None:
        P = config.run.hosts
        check_cells(grid, "Ulysses", cells=P * P, nbytes=PIECE_BYTES * 3 * P)

    def run(self, config, grid, cluster, window, engine) -> StrategyResult:
        memory = self.working_set_bytes(config, grid.ulysses)
        return run_two_level(
            config, grid, cluster, None, strategy=self.name, memory_bytes=memory, engine=engine
        )

    def working_set_bytes(self, config: RingConfig, ulysses_degree: int | None = None) -> float:
        return two_level_memory(config, config.run.hosts, lambda: 0.0)

    def label(self, ulysses_degree: int, ring_degree: int, placement: str) -> str:
        return self.name


def crossover_bandwidth(config: RingConfig) -> float | None:
    """Link bandwidth ``B*`` below which Ulysses beats the ring (forward, no mask, no latency;
    derivation in the module docstring); ``None`` if the ring wins at every bandwidth."""
    P, H, H_kv = config.run.hosts, config.shape.heads, config.shape.kv_heads
    bracket = H_kv - (H + H_kv) / P
    if bracket <= 0:
        return None
    c, d, e = config.block_tokens, config.shape.head_dim, DTYPE_BYTES[config.shape.dtype]
    t_block = config.shape.flops(c, c) / config.flops_rate
    y = t_block / (2.0 * bracket)
    return c * d * e * config.shape.batch / y
