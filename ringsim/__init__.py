"""ringsim: an exact, event-timed simulator of Ring Attention.

``import ringsim`` needs only NumPy. The numerics (``ring_attention``, ``ring_attention_backward``)
run P virtual hosts in one process and equal dense attention up to rounding.
"""

from ringsim.attention import (
    Partial,
    block_attention,
    block_attention_backward,
    merge,
    reference_attention,
    reference_attention_grad,
)
from ringsim.blockwise import (
    TransformerParams,
    dense_block,
    ffn_peak_bytes,
    init_params,
    ring_block,
)
from ringsim.cost import attention_flops, kv_block_bytes, overlap_threshold
from ringsim.decode import ring_decode
from ringsim.hardware import PRESETS, Hardware, custom_hardware, get_hardware
from ringsim.layouts import LAYOUTS, from_layout, host_positions, permutation, to_layout
from ringsim.memory import MODELS, ModelSpec, attention_working_set_bytes, memory_report
from ringsim.precision import error_growth, round_to
from ringsim.ring import RingRecord, ring_attention, ring_attention_backward
from ringsim.schedule import BlockKind, Schedule, build_schedule
from ringsim.strategies import STRATEGIES, simulate_strategy
from ringsim.timeline import Timeline
from ringsim.timing import RingConfig, SimResult, parse_length, simulate
from ringsim.trace import chrome_trace, write_chrome_trace

__version__ = "0.1.0"

__all__ = [
    "LAYOUTS",
    "MODELS",
    "PRESETS",
    "STRATEGIES",
    "BlockKind",
    "Hardware",
    "ModelSpec",
    "Partial",
    "RingConfig",
    "RingRecord",
    "Schedule",
    "SimResult",
    "Timeline",
    "TransformerParams",
    "attention_flops",
    "attention_working_set_bytes",
    "block_attention",
    "block_attention_backward",
    "build_schedule",
    "chrome_trace",
    "custom_hardware",
    "dense_block",
    "error_growth",
    "ffn_peak_bytes",
    "from_layout",
    "get_hardware",
    "host_positions",
    "init_params",
    "kv_block_bytes",
    "memory_report",
    "merge",
    "overlap_threshold",
    "parse_length",
    "permutation",
    "reference_attention",
    "reference_attention_grad",
    "ring_attention",
    "ring_attention_backward",
    "ring_block",
    "ring_decode",
    "round_to",
    "simulate",
    "simulate_strategy",
    "to_layout",
    "write_chrome_trace",
]
