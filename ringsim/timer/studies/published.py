"""Published measurements of real rings: the test set of the timer and the memory model.

Each ``Published`` row names its source (paper and table, or repository and commit), the exact
configuration it ran, the metric, the published value and a target band for our prediction.
``ringsim.timer.studies.validate`` predicts every row in one run; nothing in the timer is fitted to
these numbers (the kernel curves come from single-kernel benchmarks, the hardware from
datasheets, the framework overheads from their own sources).

Experiments:

* ``zhuzilin``: ring-flash-attention's README benchmark, share of ideal of each ring variant.
* ``zhuzilin-its``: the same table's absolute iterations per second: the single-GPU
  ``flash_attn`` baseline on the 8K local sequence and each ring variant.
* ``zhuzilin-mha`` / ``zhuzilin-mha-its``: the README's older table of the same benchmark with
  5 heads (MHA), shares and iterations per second.
* ``zhuzilin-issue55`` / ``zhuzilin-issue55-its``: a user's run of that 5-head benchmark on
  another 8xH800 NVLink machine (the repository's issue #55): the same single-GPU call, rings
  29-40% slower than the README's; how far two published runs of one benchmark agree.
* ``striped-t3`` / ``striped-t4`` / ``striped-t5``: Striped Attention's measured end-to-end
  training speedups of striped over contiguous ring attention.
* ``ring-t2``: the Ring Attention paper's minimal block and sequence per device (Table 2).
* ``ring-t3``: the same paper's maximum context per method on its GPU rows (Table 3).

Whole training steps (``ringsim.timer.step``, the planner):

* ``nemo-long``: NVIDIA NeMo's long-sequence table, Llama 2 7B in FP8 on DGX-H100, model
  TFLOPS per GPU at 4K..1M tokens with the published TP x PP x DP x CP of each row.
* ``llama3-t4``: the Llama 3 paper's Table 4, the 405B model's TFLOPS per GPU at 8K and 128K
  tokens on 8K and 16K H100s.
* ``llama3-choice``: the 405B 128K configuration's step time against the planner's best
  feasible configuration on the same cluster (1.00 = the planner's best).
* ``yunchang``: YunChang's (USP) best Ulysses degree per configuration (no target band: the
  published margins between degrees are often under 1%).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ZHUZILIN_COMMIT = "899628238f2f5bb8c028579c89b7cd56ea451d2a"
ZHUZILIN_SOURCE = (
    "github.com/zhuzilin/ring-flash-attention README 'Performance Summary', batch API table "
    f"(@ {ZHUZILIN_COMMIT[:7]}; table of commit 556ddaa, 2024-10-30), script "
    "benchmark/benchmark_kvpacked_func.py"
)
ZHUZILIN_MHA_COMMIT = "55ed8fe0be0daa339fb557cf7a2b8eeb5d7f25ec"
ZHUZILIN_MHA_SOURCE = (
    "github.com/zhuzilin/ring-flash-attention README 'Performance Summary' "
    f"(@ {ZHUZILIN_MHA_COMMIT[:7]}; the table of commits ed08732.., Feb-Oct 2024, replaced in "
    "556ddaa), script "
    "benchmark/benchmark_qkvpacked_func.py (5 heads x 128, qkv packed)"
)
STRIPED_SOURCE = "Brandon et al., 'Striped Attention' (arXiv:2311.09431)"
RING_SOURCE = "Liu, Zaharia, Abbeel, 'Ring Attention' (ICLR 2024, arXiv:2310.01889)"


@dataclass(frozen=True)
class Published:
    """One published number. ``band`` is the interval our prediction must land in; ``below``
    (if set) a value the prediction must stay strictly under (a measured slowdown must be
    predicted as one); ``settings`` (whole-step rows): each setting of the run with its
    citation (``Setting``); ``printed``: the values a rounded printed number stands for."""

    key: str
    experiment: str
    source: str
    config: dict
    metric: str
    value: float
    band: tuple[float, float]
    below: float | None = None
    note: str = field(default="", compare=False)
    settings: dict = field(default_factory=dict, compare=False)
    printed: tuple[float, float] | None = field(default=None, compare=False)

    @property
    def stands_for(self) -> tuple[float, float]:
        """The values the printed number stands for (its rounding, or a power of two found by
        doubling: ``[x, 2x)``); the value itself where the source prints it exactly."""
        return self.printed if self.printed is not None else (self.value, self.value)

    def holds(self, low: float, high: float) -> bool:
        """Whether a predicted interval ``[low, high]`` holds the published value (meets what
        the printed number stands for)."""
        lo, hi = self.stands_for
        return bool(low <= hi and high >= lo)

    def in_band(self, predicted: float) -> bool:
        low, high = self.band
        under = self.below is None or predicted < self.below
        return bool(low <= predicted <= high and under)

    def overlaps(self, low: float, high: float) -> bool:
        """Whether a predicted interval ``[low, high]`` meets the band (and, with ``below``,
        reaches under it)."""
        band_low, band_high = self.band
        under = self.below is None or low < self.below
        return bool(low <= band_high and high >= band_low and under)


@dataclass(frozen=True)
class Setting:
    """One setting of a published run, as its source ran it: ``value`` the one the source
    gives (where none does, the sourced default the point prediction uses), ``options`` every
    value the sources leave open (the row's interval spans them; empty: the value is
    published or launched as cited), ``source`` where the value, or the doubt, comes from.
    A setting is never chosen because it fits the published number."""

    value: object
    source: str
    options: tuple = ()

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(f"setting {self.value!r} needs a source")
        if self.options and self.value not in self.options:
            raise ValueError(f"setting value {self.value!r} must be one of {self.options!r}")

    @property
    def known(self) -> bool:
        return not self.options

    @property
    def values(self) -> tuple:
        """Every value the row's interval spans (the value alone when it is known)."""
        return self.options or (self.value,)

    def as_dict(self) -> dict:
        return {"value": self.value, "options": list(self.values), "source": self.source}


def settled(**settings: Setting) -> tuple[dict, dict[str, Setting]]:
    """``(config, settings)``: each setting's value by name, and the settings themselves."""
    return {name: s.value for name, s in settings.items()}, dict(settings)


# -- zhuzilin/ring-flash-attention -----------------------------------------------------------
ZHUZILIN_CONFIG = {
    "hosts": 8,
    "seq_len": 8 * 8192,  # 8192 tokens per GPU
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "dtype": "bf16",
    "batch": 1,
    "causal": True,
    "kernel": "fa2",  # flash_attn 2.x (_flash_attn_forward/_backward), fp32 out/lse merge
}
# The README's older table: the same benchmark with 5 heads (MHA, qkv packed) instead of
# Llama 3 8B's 32 query / 8 kv heads; few heads make short kernel calls (few thread blocks)
ZHUZILIN_MHA_CONFIG = {**ZHUZILIN_CONFIG, "heads": 5, "kv_heads": 5}
ZHUZILIN_HARDWARE = {"8xH800": "h800-nvlink", "8xA100": "a100-nvlink"}
ZHUZILIN_LAYOUTS = {"ring_attn": "contiguous", "zigzag_ring": "zigzag", "stripe_attn": "striped"}
_ZHUZILIN = {  # (gpu, pass): (theoretic it/s, ring_attn %, zigzag_ring %, stripe_attn %)
    ("8xH800", "forward"): (73.9, 52.1, 85.2, 74.4),
    ("8xH800", "forward+backward"): (19.3, 53.9, 90.2, 82.9),
    ("8xA100", "forward"): (46.7, 51.4, 81.7, 69.6),
    ("8xA100", "forward+backward"): (11.8, 52.5, 89.8, 82.6),
}


_ZHUZILIN_MHA = {  # the older table, as _ZHUZILIN
    ("8xH800", "forward"): (302.3, 68.8, 93.6, 85.9),
    ("8xH800", "forward+backward"): (88.2, 61.5, 85.9, 87.2),
    ("8xA100", "forward"): (193.2, 64.3, 92.7, 84.8),
    ("8xA100", "forward+backward"): (58.8, 56.6, 84.1, 78.1),
}

# The README's absolute numbers, iterations per second as rank 0 printed them: the single-GPU
# flash_attn call on the 8K local sequence (printed as "591.5 / 8" etc.) and each ring variant
_ZHUZILIN_ITS = {  # (gpu, pass): (flash_attn, ring_attn, zigzag_ring, stripe_attn)
    ("8xH800", "forward"): (591.5, 38.5, 63.0, 55.0),
    ("8xH800", "forward+backward"): (154.7, 10.4, 17.4, 16.0),
    ("8xA100", "forward"): (373.4, 24.0, 38.2, 32.5),
    ("8xA100", "forward+backward"): (94.7, 6.2, 10.6, 9.75),
}
_ZHUZILIN_MHA_ITS = {  # the older table, as _ZHUZILIN_ITS
    ("8xH800", "forward"): (2418.4, 208.0, 283.0, 259.6),
    ("8xH800", "forward+backward"): (705.2, 54.3, 75.7, 76.9),
    ("8xA100", "forward"): (1545.9, 124.4, 179.0, 163.9),
    ("8xA100", "forward+backward"): (470.6, 33.3, 49.5, 45.9),
}
# The same 5-head benchmark run by a user on "8-card nvlink H800", flash-attn 2.6.3, forward
# only, as printed (iterations per second); the share of ideal is computed from them as the
# README does (the issue quotes zigzag's as "only 55%")
ISSUE55_SOURCE = (
    "github.com/zhuzilin/ring-flash-attention issue #55 'Perf on 8*H800' (XG-zheng, "
    "2024-10-21): benchmark_qkvpacked_func, batch 1, 8K tokens per GPU, 5 heads x 128, causal, "
    "forward only, flash-attn 2.6.3"
)
_ISSUE55_ITS = {("8xH800", "forward"): (2470.340, 143.775, 170.645, 185.604)}
_ISSUE55 = {
    key: (round(single / 8, 1), *(round(800 * ring / single, 1) for ring in rings))
    for key, (single, *rings) in _ISSUE55_ITS.items()
}
# experiment: (share table, iterations table, configuration, source)
ZHUZILIN_TABLES = {
    "zhuzilin": (_ZHUZILIN, _ZHUZILIN_ITS, ZHUZILIN_CONFIG, ZHUZILIN_SOURCE),
    "zhuzilin-mha": (_ZHUZILIN_MHA, _ZHUZILIN_MHA_ITS, ZHUZILIN_MHA_CONFIG, ZHUZILIN_MHA_SOURCE),
    "zhuzilin-issue55": (_ISSUE55, _ISSUE55_ITS, ZHUZILIN_MHA_CONFIG, ISSUE55_SOURCE),
}
#: The experiments whose metric is a share of ideal (errors in points)
SHARE_EXPERIMENTS = tuple(ZHUZILIN_TABLES)


def _zhuzilin_its_rows(table: str) -> list[Published]:
    _, its, base, source = ZHUZILIN_TABLES[table]
    experiment = f"{table}-its"
    rows = []
    for (gpu, pass_), (single, *rings) in its.items():
        variants = {"flash_attn": (None, single)}
        for (variant, layout), value in zip(ZHUZILIN_LAYOUTS.items(), rings, strict=True):
            variants[variant] = (layout, value)
        for variant, (layout, value) in variants.items():
            config = {
                **base,
                "hardware": ZHUZILIN_HARDWARE[gpu],
                "pass": pass_,
                "layout": layout,
                "variant": variant,
            }
            what = "one GPU, the 8K local sequence" if layout is None else "the 8-GPU ring"
            rows.append(
                Published(
                    key=f"{experiment}/{gpu}/{pass_}/{variant}",
                    experiment=experiment,
                    source=source,
                    config=config,
                    metric=f"iterations per second ({what})",
                    value=value,
                    band=(0.9 * value, 1.1 * value),
                )
            )
    return rows


def _zhuzilin_rows(table: str) -> list[Published]:
    shares_table, _, base, source = ZHUZILIN_TABLES[table]
    rows = []
    for (gpu, pass_), (theoretic, *shares) in shares_table.items():
        for (variant, layout), share in zip(ZHUZILIN_LAYOUTS.items(), shares, strict=True):
            value = share / 100
            config = {
                **base,
                "hardware": ZHUZILIN_HARDWARE[gpu],
                "layout": layout,
                "pass": pass_,
                "theoretic_it_s": theoretic,  # single-GPU flash_attn it/s / 8, as printed
            }
            rows.append(
                Published(
                    key=f"{table}/{gpu}/{pass_}/{variant}",
                    experiment=table,
                    source=source,
                    config=config,
                    metric="share of ideal: ring it/s over (single-GPU flash_attn it/s on the "
                    "8K local sequence) / 8",
                    value=value,
                    band=(value - 0.05, value + 0.05),
                    note=f"{variant}, theoretic {theoretic} it/s",
                )
            )
    return rows


# -- Striped Attention -----------------------------------------------------------------------
STRIPED_MODELS = {  # Table 1 (the Ring Attention codebase's configs), vocab 32000
    "1B": {"d_model": 2048, "ffn": 5504, "layers": 22, "heads": 16},
    "3B": {"d_model": 3200, "ffn": 8640, "layers": 26, "heads": 32},
    "7B": {"d_model": 4096, "ffn": 11008, "layers": 32, "heads": 32},
}
STRIPED_A100 = {  # Sec. 3.1: TF32 attention matmuls, bf16 elsewhere, tile 2048 x 4096
    "hardware": "a100-nvlink",
    "tile": (2048, 4096),
    "attention_dtype": "tf32",
    "dtype": "bf16",
}
STRIPED_TPU = {  # all matmuls bf16, tile 2048 x 2048
    "hardware": "tpu-v4",
    "tile": (2048, 2048),
    "attention_dtype": "bf16",
    "dtype": "bf16",
}
_STRIPED_T3 = {  # n_seq: (1B, 3B, 7B) speedup, 8x A100, mesh TP=2 x SP=4
    16384: (0.95, 0.94, 0.94),
    32768: (1.07, 1.09, 1.07),
    65536: (1.22, 1.23, 1.23),
    98304: (1.30, 1.32, 1.30),
    131072: (1.35, 1.36, 1.36),
    196608: (1.40, 1.43, 1.39),
    262144: (1.41, 1.45, 1.43),
}
_STRIPED_T4 = {  # n_seq: (1B, 3B, 7B), 16x TPUv4, mesh TP=2 x SP=8; 7B not run at 786432
    32768: (1.06, 1.09, 1.07),
    131072: (1.26, 1.36, 1.30),
    262144: (1.37, 1.50, 1.44),
    393216: (1.43, 1.57, 1.51),
    524288: (1.47, 1.60, 1.56),
    655360: (1.49, 1.63, 1.59),
    786432: (1.51, 1.65, None),
}
_STRIPED_T5 = {  # SP degree: speedups at per-device blocks 4096, 8192, 16384, 24576 (1B, TP=1)
    2: (0.94, 1.02, 1.10, 1.14),
    4: (0.92, 1.07, 1.23, 1.31),
    8: (0.93, 1.11, 1.29, 1.37),
}


def _striped_row(table: str, model: str, tp: int, sp: int, seq_len: int, value: float, machine):
    config = {
        "model": model,
        **STRIPED_MODELS[model],
        "tp": tp,
        "hosts": sp,
        "seq_len": seq_len,
        "block": seq_len // sp,
        **machine,
        "causal": True,
        "pass": "train-step",
        "recompute": True,  # full gradient checkpointing
        "skip": "tile",  # a tile runs iff it has one unmasked element
    }
    where = "8x A100 80GB NVLink" if machine is STRIPED_A100 else "16x TPU v4"
    return Published(
        key=f"striped-{table}/{model}/tp{tp}xsp{sp}/{seq_len}",
        experiment=f"striped-{table}",
        source=f"{STRIPED_SOURCE}, Table {table[1]} ({where})",
        config=config,
        metric="end-to-end training step speedup, striped over contiguous ring",
        value=value,
        band=(0.9 * value, 1.1 * value),
    )


def _striped_rows() -> list[Published]:
    rows = []
    for seq, values in _STRIPED_T3.items():
        for model, v in zip(STRIPED_MODELS, values, strict=True):
            rows.append(_striped_row("t3", model, 2, 4, seq, v, STRIPED_A100))
    for seq, values in _STRIPED_T4.items():
        for model, v in zip(STRIPED_MODELS, values, strict=True):
            if v is not None:
                rows.append(_striped_row("t4", model, 2, 8, seq, v, STRIPED_TPU))
    for sp, values in _STRIPED_T5.items():
        for block, v in zip((4096, 8192, 16384, 24576), values, strict=True):
            rows.append(_striped_row("t5", "1B", 1, sp, block * sp, v, STRIPED_A100))
    return rows


# -- Ring Attention, Table 2: minimal block and sequence per device ---------------------------
_RING_T2 = {  # printed row: (preset, min block x1e3, min sequence x1e3)
    "A100 NVLink": ("a100-nvlink", 1.0, 6.2),
    "A100 InfiniBand": ("a100-ib", 24.5, 149.5),
    "TPU v3": ("tpu-v3", 1.1, 6.6),
    "TPU v4": ("tpu-v4", 1.0, 6.2),
    "TPU v5e": ("tpu-v5e", 1.1, 6.3),
}


def _ring_t2_rows() -> list[Published]:
    rows = []
    for name, (preset, block_k, seq_k) in _RING_T2.items():
        for metric, value in (("min_block", block_k * 1e3), ("min_seq", seq_k * 1e3)):
            rows.append(
                Published(
                    key=f"ring-t2/{preset}/{metric}",
                    experiment="ring-t2",
                    source=f"{RING_SOURCE}, Table 2 ({name})",
                    config={"hardware": preset, "implementation": "ideal", "dtype": "bf16"},
                    metric="minimal block c = F/B (tokens)"
                    if metric == "min_block"
                    else "minimal sequence per device 6c (tokens)",
                    value=value,
                    band=(0.95 * value, 1.05 * value),
                    printed=(value - 50.0, value + 50.0),  # printed to 0.1 x 1e3
                )
            )
    return rows


# -- Ring Attention, Table 3: maximum context per method --------------------------------------
PAPER_TABLE_SOURCE = (
    "Liu, Zaharia, Abbeel, 'Ring Attention with Blockwise Transformers for Near-Infinite "
    "Context' (ICLR 2024, arXiv:2310.01889), Table 3: maximum context (x1e3 tokens) in "
    "end-to-end FSDP training; GPUs ran everything in fp32, TPUs bf16 matmuls with fp32 weights."
)

_METHODS4 = ("vanilla", "memory_efficient", "blockwise", "ring")
PAPER_TABLE: tuple[dict, ...] = tuple(
    {
        "hardware": hw,
        "hosts": hosts,
        "model": model,
        "max_context_k": dict(zip(_METHODS4, values, strict=True)),
    }
    for hw, hosts, model, values in [
        ("8x A100 NVLink", 8, "3b", (4, 32, 64, 512)),
        ("8x A100 NVLink", 8, "7b", (2, 16, 32, 256)),
        ("8x A100 NVLink", 8, "13b", (2, 4, 16, 128)),
        ("32x A100 InfiniBand", 32, "7b", (4, 64, 128, 4096)),
        ("32x A100 InfiniBand", 32, "13b", (4, 32, 64, 2048)),
        ("TPUv3-512", 512, "7b", (1, 4, 8, 2048)),
        ("TPUv3-512", 512, "13b", (1, 2, 8, 1024)),
        ("TPUv4-1024", 1024, "3b", (8, 16, 32, 16384)),
        ("TPUv4-1024", 1024, "7b", (4, 8, 16, 8192)),
        ("TPUv4-1024", 1024, "13b", (4, 8, 16, 4096)),
        ("TPUv4-1024", 1024, "30b", (2, 4, 8, 2048)),
        ("TPUv5e-256", 256, "3b", (4, 8, 32, 4096)),
        ("TPUv5e-256", 256, "7b", (2, 8, 16, 2048)),
    ]
)
"""Table 3 of the paper, as printed. ``hosts`` is the number in the hardware name (TPU slice
names count TensorCores, not chips); ``max_context_k`` keys are our method names.

Reading it beside ``ringsim.timer.step.memory.paper_comparison()``: every entry is a power of two
(found by doubling), so the true limit lies in ``[x, 2x)``. The paper's ring is exactly
``hosts x`` its blockwise baseline; ours is 0.88-0.92 of that (six ring blocks against BPT's
one output tensor). The pure tensor bound (``framework="none"``) counts the tensors and nothing
of a framework's context, buffers or fragmentation, and over-predicts the 8-GPU rows (fp32:
blockwise 53-152K against 16-64K; vanilla 15-22K against 2-4K), while the 32-GPU ring rows
land near the paper (3.2M against 4.1M, 2.1M against 2.0M). The paper's own per-GPU context
grows 4x from 8 to 32 A100s at 7B (BPT 32K to 128K), which sharding the model states 4x
thinner cannot explain in this accounting (+16%). ``ringsim validate`` sets the paper's
framework (JAX, ``ringsim.timer.step.frameworks``) beside it."""

PAPER_PRESETS = {"8x A100 NVLink": "a100-nvlink", "32x A100 InfiniBand": "a100-ib"}
"""Rows whose hardware has a preset here; TPU rows are left out (slice naming, per-core HBM)."""


def _ring_t3_rows() -> list[Published]:
    rows = []
    for row in PAPER_TABLE:
        preset = PAPER_PRESETS.get(row["hardware"])
        if preset is None:
            continue
        for method, k in row["max_context_k"].items():
            value = k * 1e3
            rows.append(
                Published(
                    key=f"ring-t3/{preset}x{row['hosts']}/{row['model']}/{method}",
                    experiment="ring-t3",
                    source=f"{RING_SOURCE}, Table 3 ({row['hardware']})",
                    config={
                        "hardware": preset,
                        "hosts": row["hosts"],
                        "model": row["model"],
                        "method": method,
                        "dtype": "fp32",
                        "framework": "jax",
                    },
                    metric="maximum context (tokens; printed as a power of two x1e3)",
                    value=value,
                    band=(0.5 * value, 2.0 * value),
                    printed=(value, 2.0 * value),  # found by doubling: the limit is in [x, 2x)
                )
            )
    return rows


# -- NVIDIA NeMo: Llama 2 7B, FP8, long sequences on DGX-H100 ------------------------------------
NEMO_LONG_SOURCE = (
    "NVIDIA NeMo docs, 'Long Sequence Performance', LLAMA2-7B (FP8), NeMo 24.03.01 container, "
    "DGX-H100 (github.com/NVIDIA/NeMo docs/source/performance/performance_long_sequence.md @ "
    "0aa2671; the 'Batch Size' column from commit 9ee5c56f43, tag v2.4.0; docs.nvidia.com/"
    "nemo-framework/user-guide/24.12/nemotoolkit/performance/performance_long_sequence.html)"
)
_NEMO_TABLE = "the table (NEMO_LONG_SOURCE)"
_NEMO_RECIPE = (
    "NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/llama/llama2_7b.yaml @ 24.03.01"
)
_NEMO_FP8 = "NeMo-Framework-Launcher examples/training/llama/h100/llama2_7b_fp8.sh @ 24.03.01"
NEMO_LONG_SETTINGS = {
    "model": Setting(
        "7b", "Llama 2 7B has LLaMA 7B's shape (32 layers x 4096, 32 heads, SwiGLU 11008)"
    ),
    "cluster": Setting("dgx-h100", f"{_NEMO_TABLE}: 'System: DGX-H100'"),
    "framework": Setting(
        "nemo-24.03",
        f"{_NEMO_TABLE}: 'Container: NeMo24.03.01.framework'; NVIDIA's launcher runs it "
        "(launcher 24.05's config.yaml names that container; ringsim.timer.step.frameworks)",
    ),
    "implementation": Setting(
        "fa2",
        "the launcher 24.01-24.07 sets NVTE_FUSED_ATTN=0, so Transformer Engine 1.4 runs "
        "flash-attn 2 per ring step (frameworks 'nemo-24.03'); the page names only the "
        "container, and outside the launcher TE picks cuDNN on Hopper: both are in the range",
        options=("fa2", "cudnn"),
    ),
    "gemm_dtype": Setting(
        "fp8",
        f"{_NEMO_TABLE}: 'LLAMA2-7B (FP8)'; {_NEMO_FP8}: training.model.fp8=True, fp8_hybrid; "
        "attention bf16 (TE has no fp8 attention before v1.6)",
    ),
    "recompute": Setting(
        "none",
        f"{_NEMO_RECIPE} l.121: activations_checkpoint_granularity: null; NVIDIA's long-context "
        "recipes of launcher 24.05 (gpt3/5b_16k..175b_32k.yaml) run without recompute too",
    ),
    "sequence_parallel": Setting(
        False,
        f"{_NEMO_RECIPE} l.126: sequence_parallel: false (NVIDIA's long-context recipes: false at "
        "TP4 and TP8 without PP, true with PP); not published for these rows",
        options=(False, True),
    ),
    "micro_batch": Setting(1, f"{_NEMO_RECIPE} l.57: micro_batch_size: 1"),
    "strategy": Setting(
        "ring",
        "Transformer Engine 1.4's context parallelism is its p2p ring (AttnFuncWithCP); "
        "cp_comm_type arrives in TE 1.10",
    ),
    "layout": Setting(
        "zigzag", "TE 1.4 AttnFuncWithCP: 2 x CP chunks, rank i holds chunks i and 2CP - 1 - i"
    ),
    "sharding": Setting(
        "zero1", f"{_NEMO_RECIPE} l.143: optim distributed_fused_adam (sharded optimizer state)"
    ),
    "grad_dtype": Setting("bf16", f"{_NEMO_FP8}: +training.model.optim.grad_sync_dtype=bf16"),
    "flops_convention": Setting(
        "megatron",
        "the page does not say; every NVIDIA count of its time counts attention unmasked: "
        "launcher 24.03.01 auto_configurator/autoconfig/scripts/compare_throughput.py "
        "l.230-265, Megatron-LM num_floating_point_operations @ core_v0.5.0-0.11",
    ),
    "tokens_per_step": Setting(
        4 * 2**20,
        "the table's 'Batch Size' column (NeMo commit 9ee5c56f43, v2.4.0): 1,024 x 4K ... 4 x "
        "1M, 4,194,304 tokens per step on every row",
    ),
}
NEMO_LONG_RUN, _ = settled(**NEMO_LONG_SETTINGS)
_NEMO_LONG = {  # seq (K): (GPUs, TP, PP, DP, CP, TFLOPS/GPU with CP, without CP)
    4: (4, 1, 1, 4, 1, 768, 768),
    8: (8, 1, 2, 4, 1, 730, 730),
    16: (16, 2, 1, 8, 1, 660, 660),
    32: (32, 2, 1, 8, 2, 610, 595),
    64: (64, 4, 1, 8, 2, 574, 534),
    128: (128, 4, 1, 8, 4, 555, 424),
    256: (256, 4, 1, 8, 8, 549, 392),
    512: (512, 8, 1, 4, 16, 549, 104),
    1024: (1024, 8, 1, 4, 32, 536, 26.5),
}


def _table_settings(source: str, **values) -> dict[str, Setting]:
    return {name: Setting(value, source) for name, value in values.items()}


def _nemo_rows() -> list[Published]:
    rows = []
    for seq_k, (gpus, tp, pp, dp, cp, value, without) in _NEMO_LONG.items():
        seq = seq_k * 1024
        settings = {
            **NEMO_LONG_SETTINGS,
            **_table_settings(_NEMO_TABLE, seq_len=seq, gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp),
            "global_batch": Setting(
                NEMO_LONG_RUN["tokens_per_step"] // seq, "the table's 'Batch Size' column"
            ),
            "virtual_stages": Setting(1, f"{_NEMO_RECIPE} l.62: virtual_pipeline_model_parallel"),
        }
        if tp == 1:
            settings["sequence_parallel"] = Setting(False, "tensor parallelism 1: nothing to split")
        if pp > 1:
            settings["virtual_stages"] = Setting(
                1,
                f"{_NEMO_RECIPE} l.62: virtual_pipeline_model_parallel_size: null (plain 1F1B); "
                "not published for this row, which overrides the recipe's PP; any divisor of "
                "its 16 layers per stage is possible",
                options=(1, 2, 4, 8, 16),
            )
        config, settings = settled(**settings)
        rows.append(
            Published(
                key=f"nemo-long/7b-fp8/{seq_k}K/tp{tp}pp{pp}dp{dp}cp{cp}",
                experiment="nemo-long",
                source=NEMO_LONG_SOURCE,
                config=config,
                metric="model TFLOPS per GPU (Megatron convention), with context parallelism",
                value=float(value),
                band=(0.85 * value, 1.15 * value),
                note=f"without CP the table reports {without} TFLOPS/GPU",
                settings=settings,
            )
        )
    return rows


# -- Llama 3 405B: Table 4 of the Llama 3 paper ------------------------------------------------
LLAMA3_SOURCE = (
    "Llama Team, 'The Llama 3 Herd of Models' (arXiv:2407.21783), Table 4 (scaling "
    "configurations and MFU of Llama 3 405B pre-training) and Sec. 3.3.2"
)
_LLAMA3_TEXT = "Llama 3 paper Sec. 3.3.2"
_LLAMA3_TABLE = "Llama 3 paper Table 4"
LLAMA3_SETTINGS = {
    "model": Setting("llama3-405b", "Llama 3 paper Table 3 (126 layers, 16384 wide, 128 heads)"),
    "cluster": Setting(
        "dgx-h100",
        "Llama 3 paper Sec. 3.3.1: H100 80GB HBM3 at 700 W, 8 per server on NVLink, 400 Gb/s "
        "RoCE per GPU",
    ),
    "framework": Setting("llama3", "Meta's stack as Sec. 3.3.2 describes it (frameworks 'llama3')"),
    "implementation": Setting(
        "fa2",
        "not stated; FlashAttention-3 was released after the pre-training (arXiv 2407.08608, "
        "July 2024), so the 2024 kernels PyTorch and TE offered: FlashAttention-2 or cuDNN",
        options=("fa2", "cudnn"),
    ),
    "gemm_dtype": Setting("bf16", "Table 4: 'BF16 MFU'"),
    "strategy": Setting(
        "allgather", f"{_LLAMA3_TEXT}: 'we first all-gather the key (K) and value (V) tensors'"
    ),
    "layout": Setting(
        "zigzag", f"{_LLAMA3_TEXT}: 2 x CP chunks, rank i holds i and 2 x CP - 1 - i"
    ),
    "sharding": Setting(
        "zero1",
        f"{_LLAMA3_TEXT}: FSDP 'shards optimizer states and gradients, but for model shards we "
        "do not reshard after forward computation'",
    ),
    "grad_dtype": Setting(
        "fp32",
        f"{_LLAMA3_TEXT}: 'FP32 gradient accumulation' and 'reduce-scatter gradients in FP32'",
    ),
    "virtual_stages": Setting(
        8,
        f"derived from the text, not the table: {_LLAMA3_TEXT} removes 'one Transformer layer "
        "each from the first and the last stages' so that 'the first model chunk on the first "
        "stage has only the embedding': a chunk held one layer, 126 + 2 = 128 = PP x V slots, "
        "V = 8. Cross-check with the two 8K rows (T = m t + X from their TFLOPS alone): X = "
        "2.6 t, at least the bubble (PP - 1) / V t = 1.9 t",
    ),
    "micro_batch": Setting(
        1,
        "not printed; one sequence per micro-batch is the only size the two 8K rows allow with "
        "V = 8 (two sequences would make the bubble 1.9 t' exceed their fixed part 1.3 t')",
    ),
    "sequence_parallel": Setting(
        True,
        "not stated; tensor parallelism inside a node with the activations split or replicated",
        options=(True, False),
    ),
    "flops_convention": Setting(
        "megatron",
        "the paper does not define its FLOP count; unmasked attention is the common convention "
        "(Megatron-LM, TorchTitan), causal the other",
        options=("megatron", "causal"),
    ),
}
LLAMA3_RUN, _ = settled(**LLAMA3_SETTINGS)
_LLAMA3_T4 = [  # GPUs, TP, CP, PP, DP, seq, batch per DP rank, TFLOPs/GPU, BF16 MFU
    (8192, 8, 1, 16, 64, 8192, 32, 430, 0.43),
    (16384, 8, 1, 16, 128, 8192, 16, 400, 0.41),
    (16384, 8, 16, 16, 8, 131072, 16, 380, 0.38),
]
LLAMA3_PEAK_TFLOPS = 989.0
"""The dense bf16 peak the paper's MFU divides by (H100 SXM)."""


def llama3_printed(tflops: float, mfu: float) -> tuple[float, float]:
    """What a Table 4 row's rounded TFLOPs stand for: within 5 of the printed value and
    consistent with its MFU printed to the percent (400 / 989 is 40.4%, printed 41%)."""
    low = max(tflops - 5.0, (mfu - 0.005) * LLAMA3_PEAK_TFLOPS)
    high = min(tflops + 5.0, (mfu + 0.005) * LLAMA3_PEAK_TFLOPS)
    return low, high


def _llama3_settings(gpus, tp, cp, pp, dp, seq, per_dp) -> dict[str, Setting]:
    settings = {
        **LLAMA3_SETTINGS,
        **_table_settings(_LLAMA3_TABLE, seq_len=seq, gpus=gpus, tp=tp, cp=cp, pp=pp),
        "dp": Setting(dp, _LLAMA3_TABLE),
        "global_batch": Setting(dp * per_dp, f"{_LLAMA3_TABLE}: DP x 'Batch size/DP'"),
        "recompute": Setting(
            "none",
            f"{_LLAMA3_TEXT}: 'we could pre-train Llama 3 on sequences of 8K tokens without "
            "activation checkpointing'",
        ),
    }
    if cp > 1:
        settings["dp"] = Setting(
            dp,
            f"{_LLAMA3_TABLE} prints DP = 4; 8 is what its 16,384 GPUs and 16M tokens per batch "
            "imply",
        )
        settings["recompute"] = Setting(
            "none",
            f"{_LLAMA3_TEXT} is silent at 128K; each GPU holds the same 8,192 tokens as at 8K, "
            "where it ran without checkpointing",
            options=("none", "selective", "full"),
        )
    return settings


def _llama3_rows() -> list[Published]:
    rows = []
    for gpus, tp, cp, pp, dp, seq, per_dp, value, mfu in _LLAMA3_T4:
        config, settings = settled(**_llama3_settings(gpus, tp, cp, pp, dp, seq, per_dp))
        config["mfu"] = mfu
        rows.append(
            Published(
                key=f"llama3-t4/405b/{gpus}gpus/{seq // 1024}K/tp{tp}cp{cp}pp{pp}dp{dp}",
                experiment="llama3-t4",
                source=LLAMA3_SOURCE,
                config=config,
                metric="TFLOPs per GPU (bf16)",
                value=float(value),
                band=(0.9 * value, 1.1 * value),
                note=f"BF16 MFU {mfu:.0%}",
                settings=settings,
                printed=llama3_printed(value, mfu),
            )
        )
    config, settings = settled(**_llama3_settings(*_LLAMA3_T4[2][:7]))
    rows.append(
        Published(
            key="llama3-choice/405b/128K",
            experiment="llama3-choice",
            source=LLAMA3_SOURCE,
            config=config,
            metric="step time of the published configuration over the planner's best one inside "
            "its own stack (frameworks 'llama3') on the same cluster (1 = the planner's best)",
            value=1.0,
            band=(1.0, 1.05),
            settings=settings,
        )
    )
    return rows


# -- YunChang (USP): the best Ulysses degree ---------------------------------------------------
YUNCHANG_SOURCE = (
    "github.com/feifeibear/long-context-attention README 'Benchmark' (@ 56118e0; images "
    "media/benchmark_results.png from b93c30e and media/pcie_machine.jpg from 4514bcf), "
    "scripts/run_qkvpack_compare.sh: benchmark/benchmark_longctx_qkvpacked.py and "
    "benchmark_longctx.py, causal, bf16, forward only (--fwd_only), Ulysses groups on "
    "consecutive ranks; each degree's best over the printed columns (basic, zigzag, stripe "
    "rings, qkv packed or not): under 'zigzag only' the A100 32K and 4xA100 16K rows' best "
    "degree changes"
)
# (machine, cluster preset, batch, seq_len, heads, kv_heads, head_dim, {U: published it/s})
YUNCHANG = [
    ("8xA100 NVLink", "dgx-a100", 2, 8192, 32, 32, 32, {8: 237.9, 4: 581.3, 2: 417.3, 1: 245.8}),
    ("8xA100 NVLink", "dgx-a100", 2, 32768, 32, 32, 32, {8: 91.4, 4: 89.3, 2: 78.7, 1: 59.8}),
    ("8xA100 NVLink", "dgx-a100", 2, 131072, 32, 32, 32, {8: 15.9, 4: 16.0, 2: 15.3, 1: 13.2}),
    ("8xA100 NVLink", "dgx-a100", 2, 131072, 8, 8, 32, {8: 58.6, 4: 59.5, 2: 58.3, 1: 51.8}),
    ("8xA100 NVLink", "dgx-a100", 2, 131072, 8, 8, 128, {8: 21.0, 4: 21.9, 2: 21.4, 1: 18.2}),
    ("8xL20 PCIe", "pcie-8x-l20", 2, 131072, 32, 32, 32, {8: 3.95, 4: 6.67, 2: 8.47, 1: 7.41}),
    ("8xL20 PCIe", "pcie-8x-l20", 1, 8192, 32, 8, 128, {8: 57.1, 4: 152.19, 2: 454.93, 1: 361.97}),
    ("8xL20 PCIe", "pcie-8x-l20", 1, 32768, 32, 8, 128, {8: 14.26, 4: 32.82, 2: 62.75, 1: 58.38}),
    ("8xL20 PCIe", "pcie-8x-l20", 1, 131072, 32, 8, 128, {8: 2.59, 4: 4.24, 2: 5.48, 1: 5.19}),
    ("4xA100 PCIe", "pcie-4x-a100", 2, 4096, 32, 32, 32, {4: 262.5, 2: 243.5, 1: 189.2}),
    ("4xA100 PCIe", "pcie-4x-a100", 2, 16384, 32, 32, 32, {4: 41.44, 2: 53.55, 1: 56.75}),
    ("4xA100 PCIe", "pcie-4x-a100", 2, 65536, 32, 32, 32, {4: 8.56, 2: 8.29, 1: 9.74}),
]


def _yunchang_rows() -> list[Published]:
    rows = []
    for machine, preset, b, n, h, kv, d, its in YUNCHANG:
        best = max(its, key=its.get)
        ranked = sorted(its.values(), reverse=True)
        margin = ranked[0] / ranked[1] - 1
        config = {
            "machine": machine,
            "cluster": preset,
            "batch": b,
            "seq_len": n,
            "heads": h,
            "kv_heads": kv,
            "head_dim": d,
            "its": dict(its),
            "implementation": "fa2",
            "framework": "usp-0.6",
        }
        rows.append(
            Published(
                key=f"yunchang/{machine.replace(' ', '-')}/b{b}/{n // 1024}K/h{h}kv{kv}d{d}",
                experiment="yunchang",
                source=YUNCHANG_SOURCE,
                config=config,
                metric="best Ulysses degree U (attention forward, causal)",
                value=float(best),
                band=(float(best), float(best)),
                note=f"published margin of the best over the second: {margin:.1%}",
            )
        )
    return rows


DATASET: tuple[Published, ...] = tuple(
    [row for t in ZHUZILIN_TABLES for row in _zhuzilin_rows(t) + _zhuzilin_its_rows(t)]
    + _striped_rows()
    + _ring_t2_rows()
    + _ring_t3_rows()
    + _nemo_rows()
    + _llama3_rows()
    + _yunchang_rows()
)
STEP_EXPERIMENTS = ("nemo-long", "llama3-t4", "llama3-choice", "yunchang")
"""The experiments whose rows time a whole training step (or, for yunchang, rank degrees)."""
EXPERIMENTS = (
    *(name for t in ZHUZILIN_TABLES for name in (t, f"{t}-its")),
    "striped-t3",
    "striped-t4",
    "striped-t5",
    "ring-t2",
    "ring-t3",
    *STEP_EXPERIMENTS,
)
