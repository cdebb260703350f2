"""Checks a command makes after its work: run times that stayed inside float64. A failure is a
``ValueError`` naming the flags, so ``guarded`` prints one line and exits 2. (Output paths are
checked before any work by ``ringsim.files.check_outputs``.)"""

from __future__ import annotations

import argparse
import sys

# flags whose extreme (finite) values can push a run's times past float64's range
EXTREME_FLAGS = (
    *("flops", "bandwidth", "latency", "jitter", "straggler", "inter_bandwidth"),
    "inter_latency",
)


# the longest time a run may report: a Chrome trace counts microseconds, in float64
MAX_SECONDS = sys.float_info.max / 1e6


def check_finite_times(summary: dict, args: argparse.Namespace | None = None) -> None:
    """Refuse a summary with a NaN, infinite or unrepresentable time (``..._s`` beyond
    ``MAX_SECONDS``): inputs that are finite but so extreme (``--latency 1e308``,
    ``--flops 1e-300``, ``--jitter 1e308``) that float64 overflowed, or would in microseconds.
    The message names the flags given among ``EXTREME_FLAGS``, so the user knows what to
    change."""
    bad = {k: v for k, v in summary.items() if k.endswith("_s") and _out_of_range(v)}
    if not bad:
        return
    key, value = next(iter(bad.items()))
    detail = f"{key} = {value:.3g} s; at most {MAX_SECONDS:.3g} s, as traces count microseconds"
    raise times_out_of_range(detail, args)


def times_out_of_range(detail: str, args: argparse.Namespace | None) -> ValueError:
    """The error for a run whose times left float64's range (``detail``: which and how), naming
    the flags given among ``EXTREME_FLAGS``, so the user knows what to change."""
    given = [
        f"--{name.replace('_', '-')} {getattr(args, name)!r}"
        for name in EXTREME_FLAGS
        if getattr(args, name, None) not in (None, 0.0, [])
    ]
    hint = f"check {', '.join(given)}" if given else "the configuration is too large"
    return ValueError(f"the run's times leave float64's range ({detail}): {hint}")


def _out_of_range(value: object) -> bool:
    return isinstance(value, float) and not abs(value) <= MAX_SECONDS  # NaN fails <= too
