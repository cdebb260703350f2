"""Predictions over the parameters known only as ranges: a point and an interval.

A run under a real kernel family depends on parameters no datasheet fixes
(``ringsim.timer.machine.ranges``: the achieved send/recv bandwidth, the host's time per
PyTorch call, a lone thread block's speed). ``live_ranges`` names those that matter to a
configuration; ``interval`` evaluates a quantity at every range's point and at every corner of
the ranges (each at its low or its high end) and returns the point with the smallest and
largest value seen. A quantity that only grows as a parameter gets slower (a makespan) needs
only the two corners where all are fast or all slow (``monotone=True``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from ringsim.schedule import RING_PASSES


@dataclass(frozen=True)
class Interval:
    """``point`` (every range at its point) within ``[low, high]`` over ``ranges``."""

    point: float
    low: float
    high: float
    ranges: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"point": self.point, "low": self.low, "high": self.high, "ranges": self.ranges}


def live_ranges(config) -> tuple[str, ...]:
    """The ranges a run of ``config`` depends on (none under ``ideal``)."""
    family, hw = config.family, config.machine.hardware
    if family.ideal:
        return ()
    names = []
    if family.collectives and config.machine.hop_bandwidth is None and hw.p2p_bandwidth is not None:
        names.append("p2p_bandwidth")
    if family.host_call_s is not None and config.run.hosts > 1:
        names.append("host_call_s")
    if family.lone_cta_speed is not None and hw.arch is not None and hw.arch.sms:
        if any(family.launch(hw, p).ctas_per_sm > 1 for p in RING_PASSES):
            names.append("lone_cta_speed")
    return tuple(names)


def corners(names: tuple[str, ...], *, monotone: bool = False) -> list[dict[str, str]]:
    """Every assignment of ``low``/``high`` to ``names`` (``monotone``: only all-fast and
    all-slow)."""
    if not names:
        return []
    if monotone:
        return [dict.fromkeys(names, "fast"), dict.fromkeys(names, "slow")]
    return [
        dict(zip(names, ends, strict=True))
        for ends in itertools.product(*[("low", "high")] * len(names))
    ]


def interval(
    value: Callable[[dict[str, str]], float],
    names: tuple[str, ...],
    *,
    monotone: bool = False,
) -> Interval:
    """``value(assume)`` at the point (``{}``) and at each corner of ``names``."""
    point = value({})
    seen = [point] + [value(c) for c in corners(names, monotone=monotone)]
    return Interval(point, min(seen), max(seen), tuple(names))


def config_interval(value: Callable[[object], float], config, *, monotone: bool = True) -> Interval:
    """``interval`` of ``value(config)`` over ``config``'s live ranges, each corner run as
    ``config.replace(assume=...)``."""
    names = live_ranges(config)
    return interval(
        lambda a: value(config.replace(assume=a) if a else config), names, monotone=monotone
    )
