"""How a training step is spread over GPUs: tensor x context x pipeline x data parallelism,
and the choices that go with them (recompute, sharding, GEMM precision).

``Parallel`` is one configuration; ``gpus = tp x cp x pp x dp`` where the context-parallel
group of ``cp = ulysses x ring`` ranks runs one of the strategies of
``ringsim.timer.strategies`` on each tensor-parallel shard of the heads. Ranks are numbered
``[TP, CP, PP, DP]`` innermost first, the order Llama 3 chose for its network (arXiv
2407.21783, Sec. 3.3.2): a tensor-parallel group is consecutive GPUs of one node, a
context-parallel group spans ``8 / tp`` GPUs per node.

* ``recompute``: a flavour of ``ringsim.timer.step.recompute`` (``none`` stores every
  activation a layer's backward reads; Megatron's ``selective`` recomputes the core attention
  (Korthikanti et al., 'Reducing Activation Recomputation in Large Transformer Models', arXiv
  2205.05198, Sec. 5); ``full`` stores only each layer's input and runs the whole forward of
  the layer again before its backward; TorchTitan's ``every-other-layer`` and ``per-op``).
* ``sequence_parallel``: with ``tp > 1``, the ``d``-wide activations (norms, residual adds)
  are split over the tensor-parallel ranks and the collectives are all-gathers and
  reduce-scatters (Korthikanti et al., Sec. 4.2.2); without it they are replicated and the
  collectives are all-reduces of the same bytes (Megatron's ``--sequence-parallel``, off
  unless given).
* ``sharding``: ``zero1`` keeps bf16 weights and the gradients on every data-parallel rank and
  shards the fp32 optimizer state (Megatron's distributed optimizer, NeMo's
  ``distributed_fused_adam``): gradients are reduce-scattered and weights all-gathered once
  per step; ``zero3`` (FSDP full sharding) shards weights and gradients too and gathers each
  layer's weights for its forward and again for its backward, every micro-batch.
* ``grad_dtype``: the gradients' element type as accumulated and reduced (``None``: bf16
  under ``zero1``, as NeMo's ``grad_sync_dtype=bf16``; fp32 under ``zero3``, as PyTorch
  FSDP2's ``reduce_dtype=float32`` that TorchTitan sets).
* ``master_bytes``: bytes of the optimizer's master copy of a weight: 4 (fp32), or 2 where
  the optimizer keeps only the 16 bits a bf16 weight lacks (Apex ``DistributedFusedAdam``'s
  ``store_param_remainders``, which NeMo sets for a bf16 model with an fp32 optimizer).
* ``blockwise``: the FFN and the loss run in chunks of the sequence (Liu and Abbeel's
  Blockwise Parallel Transformer, which the Ring Attention paper's ring and its BPT baseline
  run), so only a chunk's MLP intermediate and logits are live at once.
* ``dtype``: the element type of activations, weights as the GEMMs read them and the
  tensors the collectives move (bf16; fp32 for a run in full precision).
* ``gemm_dtype``: ``fp8`` runs the linear layers' GEMMs in fp8 (Transformer Engine's recipe;
  attention stays in the model's dtype), ``bf16`` as the model.
* ``balanced_stages``: the first and the last pipeline stage each hold one layer fewer, the
  embedding and the LM head with the loss counting as a layer each (Llama 3, arXiv 2407.21783
  Sec. 3.3.2: 'we reduce one Transformer layer each from the first and the last stages';
  Megatron-LM's ``account_for_embedding_in_pipeline_split`` and
  ``account_for_loss_in_pipeline_split``); without it the layers split evenly and the LM head
  and the loss add to the last stage (Megatron-LM's default).
* ``virtual_stages`` ``v``: the interleaved 1F1B schedule (Narayanan et al., SC'21), ``v``
  model chunks per pipeline rank; ``v = 1`` is plain 1F1B. It runs only where Megatron-LM
  runs it (``pipeline_splits``, ``check_interleaving``, ``interleaving_runs``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ringsim.checks import check_bool, check_positive_int
from ringsim.timer.cost import DTYPE_BYTES
from ringsim.timer.step.recompute import RECOMPUTE, RECOMPUTES
from ringsim.timer.strategies import STRATEGIES, get_strategy

__all__ = ["GRAD_DTYPES", "RECOMPUTE", "SHARDING", "STEP_GEMM_DTYPES", "Parallel"]

SHARDING = ("zero1", "zero3")
STEP_GEMM_DTYPES = ("bf16", "fp8")
GRAD_DTYPES = {"bf16": 2, "fp32": 4}


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
    sequence_parallel: bool = True
    grad_dtype: str | None = None
    dtype: str = "bf16"
    master_bytes: int = 4
    blockwise: bool = False
    balanced_stages: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "cp", "pp", "dp", "ulysses", "virtual_stages", "micro_batch"):
            check_positive_int(name, getattr(self, name))
        if self.cp % self.ulysses:
            raise ValueError(f"ulysses must divide cp={self.cp}, got ulysses={self.ulysses}")
        _choice("strategy", self.strategy, tuple(STRATEGIES))
        _choice("recompute", self.recompute, tuple(RECOMPUTES))
        _choice("sharding", self.sharding, SHARDING)
        _choice("gemm_dtype", self.gemm_dtype, STEP_GEMM_DTYPES)
        check_bool("sequence_parallel", self.sequence_parallel)
        if self.grad_dtype is not None:
            _choice("grad_dtype", self.grad_dtype, tuple(GRAD_DTYPES))
        _choice("dtype", self.dtype, tuple(DTYPE_BYTES))
        check_bool("blockwise", self.blockwise)
        check_bool("balanced_stages", self.balanced_stages)
        if self.master_bytes not in (2, 4):
            raise ValueError(f"master_bytes must be 2 or 4, got {self.master_bytes!r}")

    @property
    def element_bytes(self) -> int:
        """Bytes of one activation or weight element in the model's ``dtype``."""
        return DTYPE_BYTES[self.dtype]

    @property
    def grad_bytes(self) -> int:
        """Bytes of one gradient element as accumulated and reduced (module docstring)."""
        default = "fp32" if self.sharding == "zero3" else "bf16"
        return GRAD_DTYPES[self.grad_dtype or default]

    @property
    def sp_split(self) -> int:
        """How many ways the ``d``-wide activations are split: ``tp`` with sequence
        parallelism, else 1."""
        return self.tp if self.sequence_parallel else 1

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
        sp = "" if self.tp == 1 or self.sequence_parallel else " (no SP)"
        return f"TP{self.tp}{sp} {cp}{pp if self.pp > 1 else ''} DP{self.dp}, {recompute} recompute"


# -- where the interleaved schedule runs (Megatron-LM's own checks) ------------------------------
MEGATRON_INTERLEAVING = (
    "Megatron-LM (github.com/NVIDIA/Megatron-LM, commit d98e8a64): "
    "megatron/core/transformer/transformer_block.py get_num_layers_to_build (the layers, "
    "with the embedding and the loss optionally counted as one each, "
    "account_for_embedding/loss_in_pipeline_split, divisible by the pipeline size, and each "
    "rank's layers by vp_size); megatron/core/pipeline_parallel/schedules.py (interleaved: "
    "micro-batch groups of microbatch_group_size_per_vp_stage, default pp "
    "(model_parallel_config.py), between pp and the micro-batch count, remainder 0: so a "
    "multiple of pp); core_v0.9.0 said it outright: 'number of microbatches is not divisible "
    "by pipeline-parallel size when using interleaved schedule'"
)


def pipeline_splits(layers: int, pp: int, virtual_stages: int = 1) -> bool:
    """Whether Megatron-LM cuts ``layers`` over ``pp`` stages of ``virtual_stages`` chunks each
    (``MEGATRON_INTERLEAVING``): plain 1F1B (``virtual_stages = 1``) takes any ``pp`` up to the
    layers (uneven stages are Megatron's first/last-stage option); the interleaved schedule needs
    ``pp > 1`` and the layers (alone, or with the embedding and/or the loss counted as one each,
    as Llama 3 balances its first and last stage) in ``pp x virtual_stages`` equal chunks."""
    if pp > layers:
        return False
    if virtual_stages == 1:
        return True
    return pp > 1 and any(
        n % pp == 0 and (n // pp) % virtual_stages == 0 for n in range(layers, layers + 3)
    )


def virtual_stage_counts(layers: int, pp: int) -> list[int]:
    """Every ``virtual_stages`` that ``pipeline_splits`` allows on ``pp`` stages, ascending
    (``[1]`` for one stage; none past one layer a chunk)."""
    if pp > layers:
        return []
    chunks = {n // pp for n in range(layers, layers + 3) if n % pp == 0} if pp > 1 else set()
    counts = {v for c in chunks for v in range(1, c + 1) if c % v == 0}
    return sorted(counts | {1})


def check_interleaving(layers: int, pp: int, virtual_stages: int) -> None:
    """Refuse (``ValueError`` naming ``virtual_stages``) an interleaved schedule that cannot
    cut ``layers`` into ``pp x virtual_stages`` equal chunks (``pipeline_splits``);
    ``virtual_stages > 1`` needs ``pp > 1`` (with one stage there is nothing to interleave)."""
    if virtual_stages == 1:
        return
    if pp == 1:
        raise ValueError(
            f"virtual_stages={virtual_stages} needs pipeline parallelism (pp > 1): with one "
            f"stage there is nothing to interleave"
        )
    if not pipeline_splits(layers, pp, virtual_stages):
        raise ValueError(
            f"virtual_stages={virtual_stages} does not split the model's {layers} layers over "
            f"pp={pp} stages: the interleaved schedule (Megatron-LM) needs every stage's layers "
            f"(the embedding and the loss may count as one each) divisible by virtual_stages"
        )


def interleaving_runs(micro_batches: int, pp: int, virtual_stages: int) -> bool:
    """Whether the interleaved schedule runs ``micro_batches`` per step on ``pp`` stages:
    Megatron-LM's interleaved schedule needs a multiple of ``pp`` (``MEGATRON_INTERLEAVING``);
    plain 1F1B (``virtual_stages = 1``) runs any number."""
    return virtual_stages == 1 or micro_batches % pp == 0
