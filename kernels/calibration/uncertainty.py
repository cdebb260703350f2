"""How sure a measured-vs-predicted comparison is: bootstrap intervals of the measured time,
the prediction and their ratio, and a regime label with a margin.

``kernels.calibration.measure`` draws the repeats (and, with them, the probes that calibrated each
repeat, or a given calibration's samples) and asks ``bootstrap_intervals`` for 95% intervals; a
reader compares ``predicted_ci95`` with ``measured_ci95`` (``overlaps``), and the regime is
named only when the block is outside the threshold's own interval (``regime``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

BOOTSTRAP_DRAWS = 200  # draws of every 95% interval (``bootstrap_intervals``)


def overlaps(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether the intervals ``[lo, hi]`` ``a`` and ``b`` share a point."""
    return bool(a[0] <= b[1] and b[0] <= a[1])


def bootstrap_intervals(
    measured: Sequence[float],
    predict_of,
    *,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = 0,
    ratios: Sequence[float] | None = None,
) -> dict:
    """95% intervals by bootstrap: ``draws`` times, the repeats drawn with replacement (``idx``)
    give a median measured time, and ``predict_of(idx, rng)`` a prediction: a dict with
    ``time`` and, optionally, ``threshold`` (tokens) and ``hardware``. Returns ``measured``,
    ``predicted``, ``ratio`` (median measured over predicted, draw by draw; with ``ratios``,
    one per repeat, the median of the drawn repeats' ratios), ``threshold``
    ``[lo, hi]`` and ``parameters`` (``kernels.calibration.profile.parameter_intervals``; ``{}``
    without hardware). The intervals say how far each could move on another run of as many repeats
    on an equally loaded machine."""
    from kernels.calibration.profile import parameter_intervals

    m = np.asarray(measured, float)
    if ratios is not None and len(ratios) != len(m):
        raise ValueError(f"ratios must have one value per repeat ({len(m)}), got {len(ratios)}")
    rng = np.random.default_rng(seed)
    rows, paired = [], []
    for _ in range(draws):
        idx = np.sort(rng.integers(0, len(m), len(m)))
        rows.append((float(np.median(m[idx])), predict_of(idx, rng)))
        if ratios is not None:
            paired.append(float(np.median(np.asarray(ratios, float)[idx])))
    meas = np.array([r[0] for r in rows])
    pred = np.array([r[1]["time"] for r in rows])
    ci = lambda x: [float(v) for v in np.percentile(x, [2.5, 97.5])]
    thresholds = [r[1]["threshold"] for r in rows if "threshold" in r[1]]
    hardwares = [r[1]["hardware"] for r in rows if "hardware" in r[1]]
    return {
        "measured": ci(meas),
        "predicted": ci(pred),
        "ratio": ci(paired) if ratios is not None else ci(meas / pred),
        "threshold": ci(thresholds) if thresholds else [math.nan, math.nan],
        "parameters": parameter_intervals(hardwares) if hardwares else {},
    }


def regime(block_tokens: int, threshold_ci95: Sequence[float]) -> str:
    """``compute-bound`` above the threshold's whole 95% interval, ``communication-bound``
    below it, ``near the threshold`` inside it: the probes cannot tell which side the block
    is on, and a label that flips from run to run would say more than they know."""
    lo, hi = threshold_ci95
    if block_tokens > hi:
        return "compute-bound"
    if block_tokens < lo:
        return "communication-bound"
    return "near the threshold"
