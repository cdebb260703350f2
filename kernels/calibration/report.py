"""What ``ringsim measure`` reports, as types: the run (``RingShape``, ``MeasureOptions``) and
its ``MeasureReport``, made of the measured time, the prediction, their ratio with its interval,
the overlap threshold, the per-step table and the profile used.

``MeasureReport.to_json`` is what ``--json`` prints (its keys are the command's contract) and
``MeasureReport.lines`` the text; both read the same fields, so they cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernels.calibration.uncertainty import BOOTSTRAP_DRAWS

if TYPE_CHECKING:
    from ringsim.timer.machine.hardware import Hardware

Interval = tuple[float, float]  # a 95% interval, (lo, hi)


@dataclass(frozen=True)
class RingShape:
    """The measured ring: ``hosts`` ranks, ``seq_len`` tokens, ``heads`` query heads of
    ``head_dim`` (``kv_heads``: fewer for GQA), the layout and the causal mask."""

    hosts: int = 2
    seq_len: int = 2048
    heads: int = 4
    kv_heads: int | None = None
    head_dim: int = 64
    layout: str = "contiguous"
    causal: bool = False

    @property
    def block_tokens(self) -> int:
        return self.seq_len // self.hosts


@dataclass(frozen=True)
class MeasureOptions:
    """How a measurement runs: ``repeats`` timed repeats on ``backend`` with ``threads`` torch
    threads per rank, each collective given ``timeout_s``; ``trace``: a prefix for the measured
    and predicted Chrome traces; ``progress``: say on stderr what runs; ``draws``: bootstrap
    draws of every interval."""

    repeats: int = 5
    backend: str = "gloo"
    threads: int = 1
    timeout_s: float = 120.0
    trace: str | Path | None = None
    progress: bool = False
    draws: int = BOOTSTRAP_DRAWS


def ratio_of(measured: float, predicted: float) -> float:
    """``measured / predicted``; infinite when nothing was predicted."""
    return measured / predicted if predicted > 0 else math.inf


@dataclass(frozen=True)
class Measured:
    """The real ring: ``time_s`` the median over repeats of the slowest rank's pass, with its
    interval (the repeats redrawn); ``times_s`` each repeat's; the typical pass's makespan and
    its longest wait on a transfer; the output's error against the float64 reference (None
    when not computed)."""

    time_s: float
    ci95: Interval
    times_s: list[float]
    makespan_s: float
    wait_s: float
    max_abs_error: float | None


@dataclass(frozen=True)
class Predicted:
    """The event timer on the calibrated profile: ``time_s`` with its interval (the probes
    redrawn), ``times_s`` each repeat's own prediction (paired; else the one), its compute and
    exposed communication, whether it simulated overlap, and how it was calibrated."""

    time_s: float
    ci95: Interval
    times_s: list[float]
    compute_s: float
    exposed_comm_s: float
    simulated_overlap: bool
    calibration: str


@dataclass(frozen=True)
class Ratio:
    """Measured over predicted: ``value`` (paired: the median of the repeats' own ratios
    ``per_repeat``; else ``of_medians``) with its interval, and whether the measured and the
    predicted intervals share a point."""

    value: float
    ci95: Interval
    of_medians: float
    per_repeat: list[float]
    intervals_overlap: bool


@dataclass(frozen=True)
class Threshold:
    """The calibrated overlap threshold (tokens per host) with its interval, the regime it
    gives this run's block, and the calibrated overlap (as a fraction and the timer's term)."""

    tokens: float
    ci95: Interval
    regime: str
    overlap_fraction: float
    overlap_efficiency: float


@dataclass(frozen=True)
class StepRow:
    measured_s: float
    predicted_s: float

    @property
    def ratio(self) -> float:
        return ratio_of(self.measured_s, self.predicted_s)

    def to_json(self) -> dict:
        """The row for ``--json``: a ratio over nothing predicted (a calibration without a
        pass overhead predicts no time outside the steps) is ``null``, not ``Infinity``."""
        ratio = self.ratio if math.isfinite(self.ratio) else None
        return {"measured_s": self.measured_s, "predicted_s": self.predicted_s, "ratio": ratio}


@dataclass(frozen=True)
class StepTable:
    """One pass step by step: the timed pass nearest the median against the simulated pass
    (each step the slowest rank); ``outside``: what each took beyond its steps (measured: the
    call's setup, start skew and final sync; simulated: the pass overhead); ``whole``: the
    pass, so the rows add up."""

    steps: list[StepRow]
    outside: StepRow
    whole: StepRow


@dataclass(frozen=True)
class ProfileUsed:
    """The ``Hardware`` the prediction ran on, each probe's quality (spread, tries, samples)
    and each profile parameter's interval."""

    hardware: Hardware
    probe_quality: dict
    parameter_ci95: dict


@dataclass(frozen=True)
class MeasureReport:
    """A measured run against its prediction (``kernels.calibration.measure.measure``)."""

    shape: RingShape
    backend: str
    dtype: str
    repeats: int
    threads: int
    measured: Measured
    predicted: Predicted
    ratio: Ratio
    threshold: Threshold
    table: StepTable
    profile: ProfileUsed
    traces: list[str] | None = None

    def to_json(self) -> dict:
        """The report as ``ringsim measure --json`` prints it (these keys are its contract)."""
        shape, measured, predicted = self.shape, self.measured, self.predicted
        ratio, threshold, table = self.ratio, self.threshold, self.table
        data = {
            "hosts": shape.hosts,
            "backend": self.backend,
            "seq_len": shape.seq_len,
            "block_tokens": shape.block_tokens,
            "layout": shape.layout,
            "causal": shape.causal,
            "heads": shape.heads,
            "kv_heads": shape.kv_heads or shape.heads,
            "head_dim": shape.head_dim,
            "dtype": self.dtype,
            "repeats": self.repeats,
            "threads_per_rank": self.threads,
            "measured_time_s": measured.time_s,
            "measured_ci95": list(measured.ci95),
            "measured_times_s": measured.times_s,
            "predicted_times_s": predicted.times_s,
            "calibration": predicted.calibration,
            "measured_makespan_s": measured.makespan_s,
            "measured_wait_s": measured.wait_s,
            "predicted_time_s": predicted.time_s,
            "predicted_ci95": list(predicted.ci95),
            "intervals_overlap": ratio.intervals_overlap,
            "ratio": ratio.value,
            "ratio_ci95": list(ratio.ci95),
            "ratio_of_medians": ratio.of_medians,
            "ratios": ratio.per_repeat,
            "max_abs_error": measured.max_abs_error,
            "overlap_threshold_tokens": threshold.tokens,
            "overlap_threshold_ci95": list(threshold.ci95),
            "regime": threshold.regime,
            "overlap_fraction": threshold.overlap_fraction,
            "overlap_efficiency": threshold.overlap_efficiency,
            "simulated_overlap": predicted.simulated_overlap,
            "predicted_compute_s": predicted.compute_s,
            "predicted_exposed_comm_s": predicted.exposed_comm_s,
            "probe_quality": self.profile.probe_quality,
            "parameter_ci95": self.profile.parameter_ci95,
            "steps": [{"step": s, **row.to_json()} for s, row in enumerate(table.steps)],
            "outside_steps": table.outside.to_json(),
            "pass": table.whole.to_json(),
            "profile": asdict(self.profile.hardware),
        }
        if self.traces is not None:
            data["traces"] = list(self.traces)
        return data

    def lines(self) -> list[str]:
        """The report as ``ringsim measure`` prints it: the run and its regime, the step table,
        the intervals and the probes' quality."""
        shape, threshold = self.shape, self.threshold
        t_lo, t_hi = threshold.ci95
        lines = [
            f"{shape.hosts} hosts, {shape.seq_len} tokens ({shape.block_tokens}/host), "
            f"{shape.layout}, {'causal' if shape.causal else 'full'}, {self.backend}: "
            f"{threshold.regime} (overlap threshold {threshold.tokens:.0f} tokens, "
            f"95% {t_lo:.0f} to {t_hi:.0f})",
            f"{'step':>6} {'measured ms':>12} {'predicted ms':>13} {'ratio':>6}",
        ]
        rows = [*enumerate(self.table.steps), ("other", self.table.outside)]
        for name, row in [*rows, ("pass", self.table.whole)]:
            lines.append(
                f"{name:>6} {row.measured_s * 1e3:>12.3f} {row.predicted_s * 1e3:>13.3f} "
                f"{row.ratio:>6.2f}"
            )
        lines.append(
            "the timed pass nearest the median (other: its time outside the steps: setup, the "
            f"ranks' start skew, the final sync); below, the median of {self.repeats} repeats"
        )
        lines += self.interval_lines()
        if self.measured.max_abs_error is not None:
            lines.append(f"max |error| vs float64 reference: {self.measured.max_abs_error:.2e}")
        return lines

    def interval_lines(self) -> list[str]:
        """The intervals, the probes' spread and the parameters' intervals."""
        ms = lambda pair: f"{pair[0] * 1e3:.3f} to {pair[1] * 1e3:.3f} ms"
        measured, predicted, ratio = self.measured, self.predicted, self.ratio
        verdict = "overlap" if ratio.intervals_overlap else "do NOT overlap"
        lo, hi = ratio.ci95
        lines = [
            f"measured  {measured.time_s * 1e3:.3f} ms, 95% {ms(measured.ci95)}",
            f"predicted {predicted.time_s * 1e3:.3f} ms, 95% {ms(predicted.ci95)}"
            f" (the probes' spread): the intervals {verdict}",
            f"ratio {ratio.value:.2f}, 95% {lo:.2f} to {hi:.2f} (bootstrap over the repeats)",
        ]
        if len(ratio.per_repeat) > 1:
            lines[-1] += (
                f"\n  (the median of the {len(ratio.per_repeat)} repeats' measured over their "
                f"own prediction; measured over predicted above: {ratio.of_medians:.2f})"
            )
        quality = self.profile.probe_quality
        if quality:
            spreads = (f"{name} {q['spread']:.0%} ({q['attempts']})" for name, q in quality.items())
            lines.append("probe spread (relative IQR, tries): " + ", ".join(spreads))
        p = self.profile.parameter_ci95
        if p:
            lines.append(
                f"parameters, 95%: link latency {p['link_latency_s'][0] * 1e6:.0f}-"
                f"{p['link_latency_s'][1] * 1e6:.0f} us, bandwidth "
                f"{p['link_bandwidth'][0] / 1e9:.2f}-{p['link_bandwidth'][1] / 1e9:.2f} GB/s, "
                f"block overhead {p['block_overhead_s'][0] * 1e6:.0f}-"
                f"{p['block_overhead_s'][1] * 1e6:.0f} us, FLOP rate "
                f"{p['flop_rate'][0] / 1e9:.1f}-{p['flop_rate'][1] / 1e9:.1f} GFLOP/s, "
                f"overlap efficiency {p['overlap_efficiency'][0]:+.2f} to "
                f"{p['overlap_efficiency'][1]:+.2f}"
            )
        return lines
