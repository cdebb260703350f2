"""How a training step is spread over GPUs: tensor x context x pipeline x data parallelism,
and the choices that go with them (recompute, sharding, GEMM precision).

``Parallel`` is one configuration; ``gpus = tp x cp x pp x dp`` where the context-parallel
group of ``cp = ulysses x ring`` ranks runs one of the strategies of
``ringsim.timer.strategies`` on each tensor-parallel shard of the heads. Ranks are numbered
``[TP, CP, PP, DP]`` innermost first, the order Llama 3 chose for its network (arXiv
2407.21783, Sec. 3.3.2): a tensor-parallel group is consecutive GPUs of one node, a
context-parallel group spans ``8 / tp`` GPUs per node.

* ``recompute``: ``none`` stores every activation a layer's backward reads; ``selective``
  recomputes the core attention in the backward (Korthikanti et al., 'Reducing Activation
  Recomputation in Large Transformer Models', arXiv 2205.05198, Sec. 5: selective
  recomputation), so its output and lse are not stored; ``full`` stores only each layer's
  input and runs the whole forward of the layer again before its backward.
* ``sharding``: ``zero1`` keeps bf16 weights and gradients on every data-parallel rank and
  shards the fp32 optimizer state (Megatron's distributed optimizer, NeMo's
  ``distributed_fused_adam``): gradients are reduce-scattered and weights all-gathered once
  per step; ``zero3`` (FSDP full sharding) shards weights and gradients too and gathers each
  layer's weights for its forward and again for its backward, every micro-batch.
* ``gemm_dtype``: ``fp8`` runs the linear layers' GEMMs in fp8 (Transformer Engine's recipe;
  attention stays in the model's dtype), ``bf16`` as the model.
* ``virtual_stages`` ``v``: the interleaved 1F1B schedule (Narayanan et al., SC'21), ``v``
  model chunks per pipeline rank; ``v = 1`` is plain 1F1B.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ringsim.checks import check_positive_int
from ringsim.timer.strategies import STRATEGIES, get_strategy

RECOMPUTE = ("none", "selective", "full")
SHARDING = ("zero1", "zero3")
STEP_GEMM_DTYPES = ("bf16", "fp8")


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


@dataclass(frozen=True)
class Parallel:
    """One way to spread a step (module docstring). ``ulysses`` divides ``cp``; ``strategy``,
    ``placement`` and ``layout`` say how the context-parallel group runs attention."""

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    ulysses: int = 1
    strategy: str = "ring"
    placement: str = "ulysses-inner"
    layout: str = "contiguous"
    recompute: str = "none"
    sharding: str = "zero1"
    gemm_dtype: str = "bf16"
    virtual_stages: int = 1
    micro_batch: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "cp", "pp", "dp", "ulysses", "virtual_stages", "micro_batch"):
            check_positive_int(name, getattr(self, name))
        if self.cp % self.ulysses:
            raise ValueError(f"ulysses must divide cp={self.cp}, got ulysses={self.ulysses}")
        _choice("strategy", self.strategy, tuple(STRATEGIES))
        _choice("recompute", self.recompute, RECOMPUTE)
        _choice("sharding", self.sharding, SHARDING)
        _choice("gemm_dtype", self.gemm_dtype, STEP_GEMM_DTYPES)

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def ring(self) -> int:
        """Ring degree of the context-parallel group: ``cp / ulysses``."""
        return self.cp // self.ulysses

    @property
    def shard_group(self) -> int:
        """Ranks that hold the same weights and reduce their gradients together: the data-
        and context-parallel ranks (Megatron reduces gradients over DP x CP)."""
        return self.dp * self.cp

    def with_(self, **changes) -> Parallel:
        return replace(self, **changes)

    def label(self) -> str:
        """``TP4 CP8(hybrid U2xR4 ulysses-inner, zigzag) PP2 DP4, full recompute``."""
        if self.cp == 1:
            cp = "CP1"
        else:
            label = get_strategy(self.strategy).label(self.ulysses, self.ring, self.placement)
            cp = f"CP{self.cp}({label}, {self.layout})"
        pp = f" PP{self.pp}" + (f"v{self.virtual_stages}" if self.virtual_stages > 1 else "")
        recompute = "no" if self.recompute == "none" else self.recompute
        return f"TP{self.tp} {cp}{pp if self.pp > 1 else ''} DP{self.dp}, {recompute} recompute"
