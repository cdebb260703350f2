"""Activation recomputation (checkpointing) flavours: what a layer stores for its backward, and
what it runs again before it.

A layer's backward reads five pieces of activations per token (``ringsim.timer.step.footprint.
activation_pieces``): its ``input``; the rest of the two norms' inputs and outputs
(``norms``); q, k, v after RoPE (``qkv``); the attention output and its lse
(``attention_out``); the MLP's gate and up outputs and their SwiGLU product (``mlp``). A flavour
keeps a share of each (``stored``) and runs a share of each forward part again (``reruns``: the
GEMMs, the elementwise kernels, the tensor-parallel collectives, the attention); what it rebuilds
for one layer's backward is live beside the stored pieces (``rebuilt``).

Each flavour names the framework code it is read from. Megatron's ``selective`` is not
TorchTitan's: Megatron recomputes the core attention only; TorchTitan's ``selective`` is either
full recomputation of every second block or a per-op policy that keeps matmul outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ringsim.checks import check_choice

PIECES = ("input", "norms", "qkv", "attention_out", "mlp")
PARTS = ("gemm", "elementwise", "tp_comm", "attention")


@dataclass(frozen=True)
class Recompute:
    """One flavour: ``stored`` share of each activation piece kept for the backward (1 if not
    named), ``reruns`` share of each forward part run again before the backward (0 if not
    named), ``rebuilt`` share of each piece one layer rebuilds while its backward runs (by
    default what it does not store)."""

    name: str
    description: str
    source: str
    stored: Mapping[str, float] = field(default_factory=dict)
    reruns: Mapping[str, float] = field(default_factory=dict)
    rebuilt: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        for table, names in ((self.stored, PIECES), (self.reruns, PARTS)):
            for key, share in table.items():
                check_choice("recompute piece", key, names)
                if not 0.0 <= share <= 1.0:
                    raise ValueError(f"recompute share of {key} must be in [0, 1], got {share!r}")

    def stored_share(self, piece: str) -> float:
        return float(self.stored.get(piece, 1.0))

    def rerun_share(self, part: str) -> float:
        return float(self.reruns.get(part, 0.0))

    def rebuilt_share(self, piece: str) -> float:
        if self.rebuilt is not None:
            return float(self.rebuilt.get(piece, 0.0))
        return 1.0 - self.stored_share(piece)


_ALL = dict.fromkeys(PARTS, 1.0)
_MEGATRON_ARGS = (
    "Megatron-LM megatron/training/arguments.py @ core_v0.6.0 l.915-922 (--recompute-granularity "
    "full|selective: 'selective: core attention part of the transformer layer is recomputed'; "
    "core_v0.12.0 l.1568-1579: --recompute-modules, default core_attn)"
)
_TORCHTITAN = "pytorch/torchtitan @ 9dec370 (the Dec 2024 benchmark's commit)"

RECOMPUTES: dict[str, Recompute] = {
    r.name: r
    for r in (
        Recompute("none", "every activation stored", "no checkpointing"),
        Recompute(
            "selective",
            "Megatron's selective recomputation: the core attention runs again, its output and "
            "lse are not stored",
            f"{_MEGATRON_ARGS}; Korthikanti et al., arXiv 2205.05198, Sec. 5",
            stored={"attention_out": 0.0},
            reruns={"attention": 1.0},
        ),
        Recompute(
            "full",
            "each layer stores its input only and runs its whole forward again",
            f"{_MEGATRON_ARGS} (full); torchtitan --activation_checkpoint.mode full",
            stored={p: 0.0 for p in PIECES if p != "input"},
            reruns=_ALL,
        ),
        Recompute(
            "every-other-layer",
            "TorchTitan's default 'selective' (selective_ac_option '2'): full recomputation of "
            "every second block, none of the others",
            f"{_TORCHTITAN} torchtitan/config_manager.py l.516-529 (mode default 'selective', "
            "selective_ac_option default '2'), torchtitan/parallelisms/parallelize_llama.py "
            "l.213-285 (every n-th block wrapped in checkpoint_wrapper)",
            stored={p: 0.5 for p in PIECES if p != "input"},
            reruns=dict.fromkeys(PARTS, 0.5),
            rebuilt={p: 1.0 for p in PIECES if p != "input"},
        ),
        Recompute(
            "per-op",
            "TorchTitan's per-op selective checkpointing (selective_ac_option 'op'): the outputs "
            "of every other matmul and of the attention kernel are kept, everything else "
            "(norms, RoPE, SwiGLU, the other matmuls) runs again",
            f"{_TORCHTITAN} torchtitan/parallelisms/parallelize_llama.py l.213-285 (_save_list: "
            "aten.mm except every second, _scaled_dot_product_flash/efficient_attention, "
            "reduce_scatter_tensor, abs, max); the shares are that policy's: half of the "
            "matmul outputs, the MLP's elementwise product not kept",
            stored={"norms": 1.0 / 6.0, "qkv": 0.5, "mlp": 1.0 / 3.0},
            reruns={"gemm": 0.5, "elementwise": 1.0, "tp_comm": 0.5},
        ),
    )
}
"""Every flavour a framework profile may name (``ringsim.timer.step.frameworks``)."""

RECOMPUTE = ("none", "selective", "full")
"""The flavours the planner tries when no framework says otherwise (Megatron-LM's)."""


def get_recompute(name: str | Recompute) -> Recompute:
    """The flavour called ``name`` (a ``Recompute`` is returned as is)."""
    if isinstance(name, Recompute):
        return name
    return RECOMPUTES[check_choice("recompute", name, tuple(RECOMPUTES))]
