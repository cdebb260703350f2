"""From the ideal ring to a real one, term by term: the waterfall of lesson 11.

``waterfall(config)`` runs the timer five times on the same ``RingConfig``, switching the terms
of its kernel family (``ringsim.timer.machine.kernel_model``) on one at a time, so each bar of the
waterfall is a simulated makespan, never a hand-made estimate.
"""

from __future__ import annotations

from dataclasses import replace

from ringsim.checks import check_instance
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.run import simulate
from ringsim.timer.machine.kernel_model import for_hardware, get_family

WATERFALL_TERMS = (
    "ideal ring",
    "+ kernel efficiency",
    "+ per-step merge",
    "+ collective contention",
    "+ launch overhead",
)


def waterfall(config: RingConfig) -> list[tuple[str, float]]:
    """The makespan of ``config`` (a ``RingConfig`` with a real ``implementation``) going from
    the ideal ring to the real one, one term at a time, each by running the timer:
    ``[(term, seconds), ...]`` in ``WATERFALL_TERMS`` order, the last the full model's time.

    * ideal ring: peak rate, free merges, ideal links, perfect overlap;
    * + kernel efficiency: the family's achieved-rate curves (short rows, masks, memory floor);
    * + per-step merge: the ``(out, lse)`` merges, ``dq, dk, dv`` accumulation and casts;
    * + collective contention: NCCL-like transfers (protocol, achieved bandwidth) and the SMs
      they take from compute;
    * + launch overhead: the fixed cost of each kernel call and elementwise op."""
    check_instance("config", config, RingConfig, "a RingConfig")
    family = for_hardware(get_family(config.implementation), config.hardware)
    bare = replace(
        family,
        merge="none",
        gqa_expand_backward=False,
        collectives=False,
        call_overhead_s=0.0,
        elementwise_overhead_s=0.0,
    )
    stages = [
        "ideal",
        bare,
        replace(bare, merge=family.merge, gqa_expand_backward=family.gqa_expand_backward),
        replace(family, call_overhead_s=0.0, elementwise_overhead_s=0.0),
        family,
    ]
    return [
        (term, simulate(config.replace(implementation=stage), keep_timeline=False).makespan)
        for term, stage in zip(WATERFALL_TERMS, stages, strict=True)
    ]
