"""The teaching face: everything the lessons use besides ``ringsim`` itself, in one module.

The lessons (``lessons/NN_*.py``) import two things from this repository, ``ringsim`` (the
public API) and this module, nothing else (``tests/test_architecture.py`` holds them to it).
So a room of the library can move without rewriting the teaching: the move changes the one
import below. What is here:

* the lesson helpers (``ringsim.views.lessons``): notation, captions, exercises, references,
  text and tables, the ring step-through, the words a lesson compares numbers with
  (``compared``, ``times``), the capstone's checker (``check_choice``), figures' style;
* the parts of the library a lesson opens up that a user of ``ringsim`` does not need every
  day: the cost model's constants (``BACKWARD_FACTOR``, ``DTYPE_BYTES``), the memory model
  (``bytes_per_host``, ``max_context``), the strategies' comparison (``compare_strategies``,
  ``crossover_bandwidth``), the published measurements and their validation, the planner's
  pictures, recorded traces set against the same ring simulated (``read_traces``,
  ``read_ring``, ``compare_ring``, ``plot_comparison``, ``write_gpu_traces``), the real backend
  (``measure_real_ring``, ``record_real_ring``, ``real_ring_loop``: ``kernels`` is loaded when
  they run, never by ``import ringsim.teach``).

``import ringsim.teach`` needs NumPy; matplotlib loads when a figure is drawn.
"""

from __future__ import annotations

from ringsim.files import read_json_object
from ringsim.numerics.attention import empty_partial
from ringsim.numerics.rounding import relative_error
from ringsim.timer.cost import BACKWARD_FACTOR, DTYPE_BYTES, grad_block_bytes
from ringsim.timer.machine.hardware import load_profile
from ringsim.timer.step.flops import model_tflops_per_gpu
from ringsim.timer.step.memory import METHODS, bytes_per_host, max_context
from ringsim.timer.strategies import FLAT_STRATEGIES, compare_strategies, with_bandwidth
from ringsim.timer.strategies.ulysses import crossover_bandwidth
from ringsim.timer.studies.compare import compare_ring
from ringsim.timer.studies.published import DATASET, PAPER_TABLE_SOURCE, ZHUZILIN_SOURCE
from ringsim.timer.studies.validate import (
    describe,
    paper_comparison,
    published_configuration,
    summarize,
)
from ringsim.traces import read_ring, read_traces
from ringsim.views import lessons as _helpers
from ringsim.views.compare import plot_comparison
from ringsim.views.gpu_trace import write_gpu_traces
from ringsim.views.lessons import *  # noqa: F403 - the face re-exports every lesson helper
from ringsim.views.planning import plot_breakdown
from ringsim.views.plots import pair_owners, plot_layout_masks, plot_sweep, plot_timelines
from ringsim.views.validation import plot_validation

__all__ = [
    *_helpers.__all__,
    "BACKWARD_FACTOR",
    "DATASET",
    "DTYPE_BYTES",
    "FLAT_STRATEGIES",
    "METHODS",
    "PAPER_TABLE_SOURCE",
    "ZHUZILIN_SOURCE",
    "bytes_per_host",
    "compare_ring",
    "compare_strategies",
    "crossover_bandwidth",
    "describe",
    "empty_partial",
    "grad_block_bytes",
    "load_profile",
    "max_context",
    "model_tflops_per_gpu",
    "pair_owners",
    "paper_comparison",
    "plot_breakdown",
    "plot_comparison",
    "plot_layout_masks",
    "plot_sweep",
    "plot_timelines",
    "plot_validation",
    "published_configuration",
    "read_json_object",
    "read_ring",
    "read_traces",
    "relative_error",
    "summarize",
    "with_bandwidth",
    "write_gpu_traces",
]
