"""The decoder models the memory model, the planner and ``--model`` know by name.

A model here is a LLaMA-shaped decoder: RMSNorm, rotary attention (multi-head or grouped-query),
a gated (SwiGLU) FFN and untied input/output embeddings. Its shape is all the timer needs:
heads, key/value heads and head dim for attention, ``d_model`` and the FFN width for the other
matmuls of a layer, the layer count and vocabulary for the parameter count.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringsim.checks import check_choice, check_instance, check_positive_int


@dataclass(frozen=True)
class ModelSpec:
    """A LLaMA-shaped decoder: RMSNorm, rotary attention, gated (SwiGLU) FFN, untied embeddings."""

    name: str
    layers: int
    d_model: int
    heads: int
    ffn_hidden: int
    vocab: int = 32000
    kv_heads: int | None = None  # None: multi-head attention (kv_heads = heads)

    def __post_init__(self) -> None:
        """Every field checked (``ValueError`` naming it): a zero or fractional width would
        divide by zero or silently plan a model that cannot exist."""
        check_instance("name", self.name, str, "a string")
        for name in ("layers", "d_model", "heads", "ffn_hidden", "vocab"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.kv_heads is not None:
            object.__setattr__(self, "kv_heads", check_positive_int("kv_heads", self.kv_heads))
            if self.heads % self.kv_heads:
                raise ValueError(
                    f"kv_heads must divide heads={self.heads} (grouped-query attention), got "
                    f"kv_heads={self.kv_heads}"
                )
        if self.d_model % self.heads:
            raise ValueError(
                f"heads must divide d_model={self.d_model} (head_dim = d_model / heads), got "
                f"heads={self.heads}"
            )

    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def layer_params(self) -> int:
        """q, o (``h x h``), k, v (``h x h_kv``), gate, up, down (``h x f``), two norms."""
        h, f = self.d_model, self.ffn_hidden
        kv = self.n_kv_heads * self.head_dim
        return 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h

    @property
    def params(self) -> int:
        """Total parameters: layers, input and output embeddings, final norm."""
        return self.layers * self.layer_params + 2 * self.vocab * self.d_model + self.d_model


LLAMA3_SOURCE = (
    "Llama 3 / 3.1 (Dubey et al., 'The Llama 3 Herd of Models', arXiv:2407.21783, Table 3: "
    "layers, model dimension, FFN dimension, attention heads, key/value heads); vocabulary "
    "128,256 from the released config.json (the paper rounds it to 128,000). Llama 3.1 keeps "
    "the shapes of Llama 3 (it changes RoPE scaling and the context length only)."
)

MODELS: dict[str, ModelSpec] = {
    # OpenLLaMA 3B (the paper's 3B), LLaMA 7B/13B/33B ("30B")/65B (Touvron et al., 2023, Table 2)
    "3b": ModelSpec("3b", layers=26, d_model=3200, heads=32, ffn_hidden=8640),
    "7b": ModelSpec("7b", layers=32, d_model=4096, heads=32, ffn_hidden=11008),
    "13b": ModelSpec("13b", layers=40, d_model=5120, heads=40, ffn_hidden=13824),
    "30b": ModelSpec("30b", layers=60, d_model=6656, heads=52, ffn_hidden=17920),
    "65b": ModelSpec("65b", layers=80, d_model=8192, heads=64, ffn_hidden=22016),
    # Llama 3 / 3.1, grouped-query attention with 8 key/value heads (LLAMA3_SOURCE)
    "llama3-8b": ModelSpec(
        "llama3-8b", layers=32, d_model=4096, heads=32, ffn_hidden=14336, vocab=128256, kv_heads=8
    ),
    "llama3-70b": ModelSpec(
        "llama3-70b", layers=80, d_model=8192, heads=64, ffn_hidden=28672, vocab=128256, kv_heads=8
    ),
    "llama3-405b": ModelSpec(
        "llama3-405b",
        layers=126,
        d_model=16384,
        heads=128,
        ffn_hidden=53248,
        vocab=128256,
        kv_heads=8,
    ),
}


def get_model(model: str | ModelSpec) -> ModelSpec:
    """The model called ``model`` (or ``model`` itself); ``ValueError`` naming an unknown one."""
    if isinstance(model, ModelSpec):
        return model
    return MODELS[check_choice("model", model, tuple(MODELS))]


def model_fields(model: str | ModelSpec) -> dict[str, int]:
    """The ``RingConfig`` fields a model sets: heads, kv_heads, head_dim, d_model, ffn.

    ``RingConfig.ffn`` is the width of a two-matrix MLP (``ringsim.timer.cost.ffn_flops``); a
    SwiGLU MLP has three matrices of ``ffn_hidden``, so ``ffn = 3 ffn_hidden / 2`` keeps its
    FLOPs."""
    m = get_model(model)
    return {
        "heads": m.heads,
        "kv_heads": m.n_kv_heads,
        "head_dim": m.head_dim,
        "d_model": m.d_model,
        "ffn": 3 * m.ffn_hidden // 2,
    }
