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
from ringsim.layouts import LAYOUTS, from_layout, host_positions, permutation, to_layout
from ringsim.ring import RingRecord, ring_attention, ring_attention_backward
from ringsim.schedule import BlockKind, Schedule, build_schedule

__version__ = "0.1.0"

__all__ = [
    "LAYOUTS",
    "BlockKind",
    "Partial",
    "RingRecord",
    "Schedule",
    "block_attention",
    "block_attention_backward",
    "build_schedule",
    "from_layout",
    "host_positions",
    "merge",
    "permutation",
    "reference_attention",
    "reference_attention_grad",
    "ring_attention",
    "ring_attention_backward",
    "to_layout",
]
