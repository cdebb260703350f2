"""Checks a command makes before (and after) its work, beyond parsing one flag: every output
path at once, a real ring's shape as ``simulate`` checks it, and run times that stayed inside
float64. Each failure is a ``ValueError`` naming the flags, so ``guarded`` prints one line and
exits 2."""

from __future__ import annotations

import argparse
import sys

# output flags of the in-process subcommands: flag, and the formats it takes (None: any)
OUTPUT_FLAGS = {"trace": ("--trace", None), "plot": ("--plot", "figure")}


def check_outputs(args: argparse.Namespace, flags: dict | None = None) -> None:
    """Every output path the flags name, checked before any work and before any file is
    written (``ringsim.files.check_output_path``): a bad ``--plot`` must not cost the
    ``--trace`` file written before it. Two flags naming one file are refused too."""
    from ringsim.files import check_output_path
    from ringsim.views.plots import FIGURE_FORMATS

    seen: dict = {}
    for attr, (flag, kind) in (OUTPUT_FLAGS if flags is None else flags).items():
        path = getattr(args, attr, None)
        if path is None:
            continue
        suffixes = FIGURE_FORMATS if kind == "figure" else kind
        target = check_output_path(flag, path, suffixes=suffixes).resolve()
        if target in seen:
            raise ValueError(f"{seen[target]} and {flag} name the same file {path!r}")
        seen[target] = flag


def check_ring_shape(**fields) -> None:
    """The checks ``ringsim simulate`` makes on a ring's shape (``RingConfig``: hosts, seq_len
    against the layout, heads and kv_heads, head_dim, ...), for a command that runs a real
    ring (``measure``, ``calibrate``): one path, one set of messages, before any rank starts."""
    from ringsim.timer import RingConfig
    from ringsim.timer.machine.hardware import custom_hardware

    RingConfig(hardware=custom_hardware(1e12, 1e9, dtype="fp32"), dtype="fp32", **fields)


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
    given = [
        f"--{name.replace('_', '-')} {getattr(args, name)!r}"
        for name in EXTREME_FLAGS
        if getattr(args, name, None) not in (None, 0.0, [])
    ]
    key, value = next(iter(bad.items()))
    hint = f"check {', '.join(given)}" if given else "the configuration is too large"
    raise ValueError(
        f"the run's times leave float64's range ({key} = {value:.3g} s; at most "
        f"{MAX_SECONDS:.3g} s, as traces count microseconds): {hint}"
    )


def _out_of_range(value: object) -> bool:
    return isinstance(value, float) and not abs(value) <= MAX_SECONDS  # NaN fails <= too
