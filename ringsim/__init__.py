"""ringsim: an exact, event-timed simulator of Ring Attention.

``import ringsim`` needs only NumPy. The numerics (``ring_attention``, ``ring_attention_backward``)
run P virtual hosts in one process and equal dense attention up to rounding.

The folders are the layers, bottom up. This folder holds the core every executor reads: the
token layouts (``layouts``), the one mask rule (``masks``), the ring schedule (``schedule``),
how U x R hosts are numbered when Ulysses and a ring share them (``grid``), argument checks
(``_checks``) and atomic, strict output files (``_io``); the core imports nothing above it.
Three rooms build on it: ``numerics/`` (the exact executor), ``timer/`` (the timed executor)
and ``views/`` (plots, traces, lesson helpers), and ``cli/`` (the ``ringsim`` command) sits on
top. The real backend, ``kernels/`` beside this package, runs the same schedule on torch. This
module is the public API: everything a user needs is importable from ``ringsim``.
"""

from ringsim.layouts import (
    LAYOUTS,
    DocumentPadding,
    Layout,
    from_layout,
    get_layout,
    host_position_ids,
    host_positions,
    layout_names,
    llama3_cu_seqlens,
    pad_documents,
    permutation,
    register_layout,
    to_layout,
    unregister_layout,
)
from ringsim.masks import flash_window_size
from ringsim.numerics.attention import (
    Partial,
    block_attention,
    block_attention_backward,
    merge,
    reference_attention,
    reference_attention_grad,
)
from ringsim.numerics.blockwise import (
    TransformerParams,
    dense_block,
    ffn_peak_bytes,
    init_params,
    ring_block,
)
from ringsim.numerics.decode import ring_decode
from ringsim.numerics.hybrid import (
    allgather_attention,
    allgather_attention_backward,
    double_ring_attention,
    double_ring_attention_backward,
    hybrid_attention,
    hybrid_attention_backward,
    ulysses_attention,
    ulysses_attention_backward,
)
from ringsim.numerics.precision import error_growth
from ringsim.numerics.ring import RingRecord, ring_attention, ring_attention_backward
from ringsim.numerics.rounding import round_to
from ringsim.numerics.varlen import llama3_varlen_attention, llama3_varlen_attention_backward
from ringsim.schedule import BlockKind, Schedule, build_schedule
from ringsim.timer import RingConfig, SimResult, simulate
from ringsim.timer.cost import (
    attention_flops,
    attention_working_set_bytes,
    kv_block_bytes,
    overlap_threshold,
)
from ringsim.timer.engine.timeline import Timeline
from ringsim.timer.machine.families import KERNELS, KernelFamily, get_family
from ringsim.timer.machine.hardware import PRESETS, Hardware, custom_hardware, get_hardware
from ringsim.timer.machine.kernel_model import attention_call_seconds
from ringsim.timer.machine.topology import CLUSTERS, Cluster, get_cluster
from ringsim.timer.step.memory import memory_report
from ringsim.timer.step.models import MODELS, ModelSpec, get_model
from ringsim.timer.strategies import STRATEGIES, simulate_strategy
from ringsim.timer.studies.planner import plan
from ringsim.timer.studies.validate import validate
from ringsim.timer.studies.waterfall import waterfall
from ringsim.values import parse_length
from ringsim.views.trace import chrome_trace, write_chrome_trace

__version__ = "0.1.0"

__all__ = [
    "CLUSTERS",
    "KERNELS",
    "LAYOUTS",
    "MODELS",
    "PRESETS",
    "STRATEGIES",
    "BlockKind",
    "Cluster",
    "DocumentPadding",
    "Hardware",
    "KernelFamily",
    "Layout",
    "ModelSpec",
    "Partial",
    "RingConfig",
    "RingRecord",
    "Schedule",
    "SimResult",
    "Timeline",
    "TransformerParams",
    "allgather_attention",
    "allgather_attention_backward",
    "attention_call_seconds",
    "attention_flops",
    "attention_working_set_bytes",
    "block_attention",
    "block_attention_backward",
    "build_schedule",
    "chrome_trace",
    "custom_hardware",
    "dense_block",
    "double_ring_attention",
    "double_ring_attention_backward",
    "error_growth",
    "ffn_peak_bytes",
    "flash_window_size",
    "from_layout",
    "get_cluster",
    "get_family",
    "get_hardware",
    "get_layout",
    "get_model",
    "host_position_ids",
    "host_positions",
    "hybrid_attention",
    "hybrid_attention_backward",
    "init_params",
    "kv_block_bytes",
    "layout_names",
    "llama3_cu_seqlens",
    "llama3_varlen_attention",
    "llama3_varlen_attention_backward",
    "memory_report",
    "merge",
    "overlap_threshold",
    "pad_documents",
    "parse_length",
    "permutation",
    "plan",
    "reference_attention",
    "reference_attention_grad",
    "register_layout",
    "ring_attention",
    "ring_attention_backward",
    "ring_block",
    "ring_decode",
    "round_to",
    "simulate",
    "simulate_strategy",
    "to_layout",
    "ulysses_attention",
    "ulysses_attention_backward",
    "unregister_layout",
    "validate",
    "waterfall",
    "write_chrome_trace",
]
