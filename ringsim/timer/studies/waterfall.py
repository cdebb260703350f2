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

WATERFALL_TERMS = (
    "ideal ring",
    "+ kernel efficiency",
    "+ occupancy and wave tail",
    "+ per-step merge",
    "+ collective contention",
    "+ launch overhead",
    "+ host overhead",
)


def waterfall(config: RingConfig) -> list[tuple[str, float]]:
    """The makespan of ``config`` (a ``RingConfig`` with a real ``implementation``) going from
    the ideal ring to the real one, one term at a time, each by running the timer:
    ``[(term, seconds), ...]`` in ``WATERFALL_TERMS`` order, the last the full model's time.
    Parameters known only as ranges at the run's assumed ends (their points by default).

    * ideal ring: peak rate, free merges, ideal links, perfect overlap;
    * + kernel efficiency: the family's achieved-rate curves (short rows, masks, memory floor);
    * + occupancy and wave tail: CTAs per SM and the last, partly filled wave of each call;
    * + per-step merge: the ``(out, lse)`` merges, ``dq, dk, dv`` accumulation and casts;
    * + collective contention: NCCL-like transfers (protocol, achieved send/recv bandwidth,
      ``dk, dv`` in fp32 on the wire) and the SMs they take from compute;
    * + launch overhead: the fixed cost of each kernel call and elementwise op;
    * + host overhead: the host's time to issue each step's PyTorch calls, when it exceeds
      the GPU's time for the step."""
    check_instance("config", config, RingConfig, "a RingConfig")
    family = config.family
    bare = replace(
        family,
        merge="none",
        gqa_expand_backward=False,
        collectives=False,
        call_overhead_s=0.0,
        elementwise_overhead_s=0.0,
        wave_tail=False,
        host_call_s=None,
        grad_wire_dtype=None,
    )
    waves = replace(bare, wave_tail=family.wave_tail)
    merges = replace(waves, merge=family.merge, gqa_expand_backward=family.gqa_expand_backward)
    stages = [
        "ideal",
        bare,
        waves,
        merges,
        replace(family, call_overhead_s=0.0, elementwise_overhead_s=0.0, host_call_s=None),
        replace(family, host_call_s=None),
        family,
    ]
    return [
        (term, simulate(config.replace(implementation=stage), keep_timeline=False).makespan)
        for term, stage in zip(WATERFALL_TERMS, stages, strict=True)
    ]
