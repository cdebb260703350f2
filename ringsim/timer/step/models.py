"""The decoder models the memory model, the planner and ``--model`` know by name.

A model here is a LLaMA-shaped decoder: RMSNorm, rotary attention (multi-head or grouped-query),
a gated (SwiGLU) FFN and untied input/output embeddings. Its shape is all the timer needs:
heads, key/value heads and head dim for attention, ``d_model`` and the FFN width for the other
matmuls of a layer, the layer count and vocabulary for the parameter count.

Some models interleave sliding-window layers with full ones (Mistral 7B: every layer; Gemma 2:
every other; Gemma 3: five of every six): ``sliding_window`` is their window and
``global_every`` says which layers keep full attention (``layer_windows``). Their head dim may
differ from ``d_model / heads`` (``attention_head_dim``) and their embeddings may be tied.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringsim.checks import check_bool, check_choice, check_instance, check_positive_int
from ringsim.masks import check_sliding_window


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
    attention_head_dim: int | None = None  # None: d_model / heads
    tied_embeddings: bool = False
    sliding_window: int | None = None  # the window of the windowed layers (None: none)
    global_every: int | None = None  # with a window: layer i is full iff (i + 1) % it == 0
    source: str = ""

    def __post_init__(self) -> None:
        """Every field checked (``ValueError`` naming it): a zero or fractional width would
        divide by zero or silently plan a model that cannot exist."""
        check_instance("name", self.name, str, "a string")
        for name in ("layers", "d_model", "heads", "ffn_hidden", "vocab"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        for name in ("attention_head_dim", "global_every"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        object.__setattr__(self, "sliding_window", check_sliding_window(self.sliding_window))
        if self.global_every is not None and self.sliding_window is None:
            raise ValueError(
                f"global_every says which layers keep full attention beside windowed ones: it "
                f"needs sliding_window, got global_every={self.global_every}"
            )
        check_bool("tied_embeddings", self.tied_embeddings)
        if self.kv_heads is not None:
            object.__setattr__(self, "kv_heads", check_positive_int("kv_heads", self.kv_heads))
            if self.heads % self.kv_heads:
                raise ValueError(
                    f"kv_heads must divide heads={self.heads} (grouped-query attention), got "
                    f"kv_heads={self.kv_heads}"
                )
        if self.attention_head_dim is None and self.d_model % self.heads:
            raise ValueError(
                f"heads must divide d_model={self.d_model} (head_dim = d_model / heads), got "
                f"heads={self.heads}"
            )

    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_dim(self) -> int:
        if self.attention_head_dim is not None:
            return self.attention_head_dim
        return self.d_model // self.heads

    @property
    def layer_params(self) -> int:
        """q, o (``h x H d``), k, v (``h x H_kv d``), gate, up, down (``h x f``), two norms."""
        h, f = self.d_model, self.ffn_hidden
        q, kv = self.heads * self.head_dim, self.n_kv_heads * self.head_dim
        return 2 * h * q + 2 * h * kv + 3 * h * f + 2 * h

    @property
    def embeddings(self) -> int:
        """Embedding matrices: the input's and the output's, one when they are tied."""
        return 1 if self.tied_embeddings else 2

    @property
    def params(self) -> int:
        """Total parameters: layers, input and output embeddings, final norm."""
        embed = self.embeddings * self.vocab * self.d_model
        return self.layers * self.layer_params + embed + self.d_model

    def layer_windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window (``None``: full attention): every layer windowed, or
        all but every ``global_every``-th (layer ``i`` full when ``(i + 1) % global_every ==
        0``: Gemma 2's odd layers, Gemma 3's every sixth)."""
        w, k = self.sliding_window, self.global_every
        return tuple(
            None if w is None or (k is not None and (i + 1) % k == 0) else w
            for i in range(self.layers)
        )


LLAMA3_SOURCE = (
    "Llama 3 / 3.1 (Dubey et al., 'The Llama 3 Herd of Models', arXiv:2407.21783, Table 3: "
    "layers, model dimension, FFN dimension, attention heads, key/value heads); vocabulary "
    "128,256 from the released config.json (the paper rounds it to 128,000). Llama 3.1 keeps "
    "the shapes of Llama 3 (it changes RoPE scaling and the context length only)."
)

MISTRAL_SOURCE = (
    "mistralai/Mistral-7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 key/value "
    "heads, intermediate 14336, vocab 32000, sliding_window 4096 on every layer (Jiang et al., "
    "'Mistral 7B', arXiv:2310.06825, Table 1: window 4096)"
)
GEMMA2_SOURCE = (
    "google/gemma-2-9b config.json: 42 layers, hidden 3584, 16 heads of 256, 8 key/value heads, "
    "intermediate 14336, vocab 256000, sliding_window 4096, tied embeddings; local and global "
    "layers alternate, the even ones local (transformers' Gemma2DecoderLayer: is_sliding = not "
    "layer_idx % 2; Gemma 2 report, arXiv:2408.00118, Sec. 2)"
)
GEMMA3_SOURCE = (
    "google/gemma-3-27b-pt config.json (text_config): 62 layers, hidden 5376, 32 heads of 128, "
    "16 key/value heads, intermediate 21504, vocab 262208, sliding_window 1024, "
    "sliding_window_pattern 6: five local layers to one global (layer i global when (i + 1) % 6 "
    "== 0; Gemma 3 report, arXiv:2503.19786, Sec. 2.2), tied embeddings"
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
    # models that interleave sliding-window layers, as their released config.json sets them
    "mistral-7b": ModelSpec(
        "mistral-7b",
        layers=32,
        d_model=4096,
        heads=32,
        ffn_hidden=14336,
        vocab=32000,
        kv_heads=8,
        sliding_window=4096,
        source=MISTRAL_SOURCE,
    ),
    "gemma2-9b": ModelSpec(
        "gemma2-9b",
        layers=42,
        d_model=3584,
        heads=16,
        ffn_hidden=14336,
        vocab=256000,
        kv_heads=8,
        attention_head_dim=256,
        tied_embeddings=True,
        sliding_window=4096,
        global_every=2,
        source=GEMMA2_SOURCE,
    ),
    "gemma3-27b": ModelSpec(
        "gemma3-27b",
        layers=62,
        d_model=5376,
        heads=32,
        ffn_hidden=21504,
        vocab=262208,
        kv_heads=16,
        attention_head_dim=128,
        tied_embeddings=True,
        sliding_window=1024,
        global_every=6,
        source=GEMMA3_SOURCE,
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
