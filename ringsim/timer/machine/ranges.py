"""Model parameters known only as a range, and which end of each range a run assumes.

A real ring depends on a few quantities that no datasheet fixes: the bandwidth NCCL's
send/recv actually reaches between two GPUs, the host's time per PyTorch call of a Python ring
loop, how fast a thread block runs alone on an SM. Each is a ``Range`` (``low``, ``point``,
``high``, with its source) in the module that uses it; a run assumes one end of each
(``RingConfig(assume={"p2p_bandwidth": "low"})``; by default the ``point`` of every range).
``ringsim.timer.studies.interval`` runs a configuration at the ends and reports the prediction
as an interval over them.

Names (``RANGES``):

* ``p2p_bandwidth``: achieved NCCL send/recv bytes/s on a ring hop, a machine property
  (``Hardware.p2p_bandwidth``, ``ringsim.timer.machine.hardware``);
* ``host_call_s``: host seconds per PyTorch call of the ring loop, a property of the ring code
  (``KernelFamily.host_call_s``);
* ``lone_cta_speed``: the rate of a thread block alone on its SM relative to the SM's rate
  with all its resident blocks busy, a property of the kernel (``KernelFamily.lone_cta_speed``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

RANGES = ("p2p_bandwidth", "host_call_s", "lone_cta_speed")
ENDS = ("low", "point", "high")


@dataclass(frozen=True)
class Range:
    """A parameter between ``low`` and ``high``; ``point`` is the value a single prediction
    uses (the geometric middle unless a source gives a best value); ``slow`` the end that makes
    a run slower (``"low"`` for a bandwidth or a speed, ``"high"`` for a cost)."""

    low: float
    point: float
    high: float
    slow: str
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("low", "point", "high"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"range {name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"range {name} must be finite and >= 0, got {value!r}")
        if not self.low <= self.point <= self.high:
            raise ValueError(
                f"range must have low <= point <= high, got {self.low}, {self.point}, {self.high}"
            )
        if self.slow not in ("low", "high"):
            raise ValueError(f"range slow end must be 'low' or 'high', got {self.slow!r}")

    def at(self, end: str) -> float:
        """The value at ``end``: ``"low"``, ``"point"``, ``"high"``, or ``"slow"``/``"fast"``
        (the end that makes a run slower or faster)."""
        if end == "slow":
            end = self.slow
        elif end == "fast":
            end = "high" if self.slow == "low" else "low"
        if end not in ENDS:
            raise ValueError(f"range end must be one of {', '.join(ENDS)}, slow, fast; got {end!r}")
        return float(getattr(self, end))

    @property
    def width(self) -> float:
        """``high / low`` (how uncertain the parameter is)."""
        return self.high / self.low if self.low > 0 else math.inf


def middle(low: float, high: float) -> float:
    """The geometric middle of ``[low, high]`` (a range's point when no source gives one)."""
    return math.sqrt(low * high)


def check_assume(assume: object) -> tuple[tuple[str, str], ...]:
    """``assume`` (a mapping or pairs: range name -> end) as a sorted tuple of pairs, each
    name one of ``RANGES`` and each end one of ``low``, ``point``, ``high``, ``slow``,
    ``fast``; ``ValueError`` naming the bad one."""
    if assume is None:
        return ()
    items = assume.items() if isinstance(assume, Mapping) else assume
    try:
        pairs = [(name, end) for name, end in items]
    except (TypeError, ValueError):
        raise ValueError(f"assume must map range names to ends, got {assume!r}") from None
    for name, end in pairs:
        if name not in RANGES:
            raise ValueError(f"assume: range name must be one of {', '.join(RANGES)}, got {name!r}")
        if end not in (*ENDS, "slow", "fast"):
            raise ValueError(
                f"assume: the end of {name} must be one of low, point, high, slow, fast; "
                f"got {end!r}"
            )
    return tuple(sorted(dict(pairs).items()))


def end_of(assume: tuple[tuple[str, str], ...], name: str) -> str:
    """The end a run assumes for range ``name`` (``"point"`` unless ``assume`` says)."""
    return dict(assume).get(name, "point")
