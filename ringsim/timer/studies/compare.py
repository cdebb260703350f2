"""A recorded run against the same ring simulated: is it what the schedule allows?

``compare_ring`` takes a ring read from a trace (``ringsim.traces.read_ring``) and the
``RingConfig`` of the same run (its hosts, block, heads, dtype, mask and layout from the
trace, the hardware and kernel family from the user), simulates it keeping the timeline,
and sets the two side by side, step by step and in total:

* each step's time is its slowest host's, from the end of that host's previous step to the
  end of this one (its compute done and the next block arrived), as ``ringsim measure``
  counts it (``kernels.distributed.rank_timeline.step_durations``); each host counts from the
  start of its own pass, so step 0 holds the pass's setup;
* that host's step splits into ``attention`` (its attention calls), ``merge`` (its other
  compute: the merges and casts between calls; ``None`` for a prediction whose kernel model
  folds them into the call, ``ideal`` and the calibrated CPU one), ``exposed_transfer`` (it
  waited for a block already on its way) and ``idle`` (the rest: waiting for a neighbour that
  posted late, the host's own gaps);
* the totals: the measured pass (the slowest rank's, of the pass whose time is the median)
  against the predicted makespan and its interval over the parameters known only as ranges
  (``ringsim.timer.engine.interval``), and a verdict;
* which term differs most: the kernel rate (attention), the merges, the transfer, the host
  gaps (idle), the stragglers (each step's slowest host beyond its median one), or what lies
  outside the steps.

``compare_time`` answers the same question for a user who has only a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.interval import Interval, config_interval
from ringsim.timer.engine.result import SimResult
from ringsim.timer.engine.run import simulate
from ringsim.timer.engine.timeline import Timeline

TOLERANCE = 0.15
"""How far outside the prediction's interval a measurement may fall and still be expected:
the spread of this project's own gloo ring against its paired prediction on a shared 2-core
machine (README, ``benchmarks/bench_calibration.py``: 10 of 10 repeats within +-15% at 512
tokens). A measurement beyond it is slower or faster than the schedule and the model allow."""

PARTS = ("attention", "merge", "exposed_transfer", "idle")
TERMS = {
    "attention": "kernel rate (the attention calls)",
    "merge": "merges (compute between the calls)",
    "compute": "compute (attention and merges; the model does not split them)",
    "exposed_transfer": "transfer (waiting for a block on its way)",
    "idle": "host gaps (idle: late neighbours, the host's own gaps)",
    "stragglers": "stragglers (each step's slowest host beyond the median one)",
    "outside": "outside the steps (after the last step)",
}


@dataclass(frozen=True)
class StepSplit:
    """One step of one run: its ``duration`` (the slowest host's), that ``host``, and its
    parts (seconds; ``merge`` ``None`` when the run does not tell merges from calls)."""

    duration: float
    host: int
    attention: float
    merge: float | None
    exposed_transfer: float
    idle: float
    spread: float

    def as_dict(self) -> dict:
        return {
            "duration_s": self.duration,
            "host": self.host,
            "attention_s": self.attention,
            "merge_s": self.merge,
            "exposed_transfer_s": self.exposed_transfer,
            "idle_s": self.idle,
        }


def host_steps(timeline: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` ``(steps, hosts)``: each host's step ``s`` runs from the end of its
    step ``s - 1`` (0 for the first) to when its compute is done and the next block arrived
    (``kernels.distributed.rank_timeline.step_durations``, per host)."""
    ends = np.fmax(
        np.nan_to_num(timeline.compute_end, nan=-np.inf),
        np.nan_to_num(timeline.recv_end, nan=-np.inf),
    )
    ends = np.maximum.accumulate(np.where(np.isfinite(ends), ends, 0.0), axis=0)
    starts = np.vstack([np.zeros((1, ends.shape[1])), ends[:-1]])
    return starts, ends


def split_steps(
    timeline: Timeline, attention: np.ndarray, busy: np.ndarray, *, merges: bool = True
) -> list[StepSplit]:
    """Every step of ``timeline`` split on its slowest host. ``attention``/``busy``:
    ``(steps, hosts)`` seconds of attention calls and of all compute; ``merges``: whether
    ``busy - attention`` means anything (else ``merge`` is ``None``)."""
    starts, ends = host_steps(timeline)
    durations = ends - starts
    out = []
    for s in range(timeline.steps):
        h = _slowest(durations[s], busy[s])
        begin, end = starts[s, h], ends[s, h]
        computed = timeline.compute_end[s, h]
        compute_end = begin if not np.isfinite(computed) else max(begin, computed)
        exposed = 0.0
        if np.isfinite(timeline.recv_end[s, h]):
            waited_from = max(compute_end, timeline.recv_start[s, h], begin)
            exposed = max(0.0, timeline.recv_end[s, h] - waited_from)
        att, compute = float(attention[s, h]), float(busy[s, h])
        idle = max(0.0, float(end - begin) - compute - exposed)
        out.append(
            StepSplit(
                duration=float(durations[s, h]),
                host=h,
                attention=att,
                merge=max(0.0, compute - att) if merges else None,
                exposed_transfer=exposed,
                idle=idle,
                spread=float(durations[s, h] - np.median(durations[s])),
            )
        )
    return out


def _slowest(durations: np.ndarray, busy: np.ndarray) -> int:
    """The step's slowest host; among hosts within a nanosecond of it, the busiest (hosts
    that wait for the same transfer finish together), then the first."""
    tied = np.flatnonzero(durations >= durations.max() - 1e-9)
    return int(tied[np.argmax(busy[tied])])


def predicted_parts(result: SimResult) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(attention, busy, merges)`` ``(steps, hosts)`` of a simulated run, as
    ``split_steps`` takes them: under a kernel family with its own step model
    (``StepModel``) the calls' seconds and the device's compute (the simulated compute less
    the share of it that is the host issuing the step's calls, which a device shows as idle);
    otherwise (``ideal``, the calibrated CPU profile) the compute is the call and merges are
    not apart."""
    from ringsim.timer.engine.ring_steps import StepModel

    config, tl = result.config, result.timeline
    busy = np.nan_to_num(tl.compute_end - tl.compute_start)
    family = config.family
    if family.ideal or family.merge == "none":  # no merge model: the call is the compute
        return busy, busy, False
    model, device = StepModel(config, family), StepModel(config, family)
    device.host_call_s = 0.0  # the device's seconds alone
    schedule = config.schedule(config.run.pass_)
    speed = config.noise.speed
    speed = np.ones(config.run.hosts) if speed is None else np.asarray(speed)
    rows = range(tl.steps)
    attention = np.array([model.attention_seconds(schedule, s) for s in rows]) / speed
    full = np.array([model.seconds(schedule, s) for s in rows])
    gpu = np.array([device.seconds(schedule, s) for s in rows])
    share = np.divide(gpu, full, out=np.zeros_like(gpu), where=full > 0)
    on_device = busy * share  # the step as simulated (overlap included), less the host's part
    return np.minimum(attention, on_device), on_device, True


@dataclass
class Comparison:
    """Measured against predicted: see the module doc. ``to_json`` is ``ringsim compare
    --json``'s document."""

    config: RingConfig
    measured_s: float
    predicted: Interval
    measured_passes_s: list[float] = field(default_factory=list)
    measured_steps: list[StepSplit] | None = None
    predicted_steps: list[StepSplit] = field(default_factory=list)
    members: list[int] | None = None
    result: SimResult | None = None
    recorded: object = None
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.measured_s / self.predicted.point if self.predicted.point > 0 else math.inf

    @property
    def verdict(self) -> str:
        low, high = self.predicted.low * (1 - TOLERANCE), self.predicted.high * (1 + TOLERANCE)
        if self.measured_s > high:
            return "slower than expected"
        if self.measured_s < low:
            return "faster than expected"
        return "expected"

    def verdict_reason(self) -> str:
        p = self.predicted
        where = f"[{_ms(p.low)}, {_ms(p.high)}]" if p.high > p.low else _ms(p.point)
        return (
            f"measured {_ms(self.measured_s)} against {_ms(p.point)} predicted ({where}, "
            f"±{TOLERANCE:.0%} allowed): {self.verdict}"
        )

    def terms(self) -> dict[str, dict]:
        """Each term's measured and predicted seconds summed over the steps, and their
        difference; ``{}`` without measured steps."""
        if self.measured_steps is None:
            return {}
        m, p = self.measured_steps, self.predicted_steps
        split = all(s.merge is not None for s in m + p)
        names = ["attention", "merge"] if split else ["compute"]
        names += ["exposed_transfer", "idle", "stragglers", "outside"]
        out = {}
        for name in names:
            mine, theirs = _term(name, m, self.measured_s), _term(name, p, self.predicted.point)
            out[name] = {
                "what": TERMS[name],
                "measured_s": mine,
                "predicted_s": theirs,
                "difference_s": mine - theirs,
            }
        return out

    def differs_most(self) -> dict | None:
        terms = self.terms()
        if not terms:
            return None
        name = max(terms, key=lambda k: abs(terms[k]["difference_s"]))
        gap = self.measured_s - self.predicted.point
        share = terms[name]["difference_s"] / gap if gap else None
        return {"term": name, **terms[name], "share_of_the_gap": share}

    def to_json(self) -> dict:
        cfg = self.config
        steps = []
        for s, pred in enumerate(self.predicted_steps):
            meas = self.measured_steps[s] if self.measured_steps is not None else None
            steps.append(
                {
                    "step": s,
                    "measured": None if meas is None else meas.as_dict(),
                    "predicted": pred.as_dict(),
                    "ratio": None
                    if meas is None or pred.duration <= 0
                    else meas.duration / pred.duration,
                }
            )
        data = {
            "hosts": cfg.run.hosts,
            "members": self.members,
            "seq_len": cfg.run.seq_len,
            "block_tokens": cfg.block_tokens,
            "heads": cfg.shape.heads,
            "kv_heads": cfg.shape.kv_heads,
            "head_dim": cfg.shape.head_dim,
            "batch": cfg.shape.batch,
            "dtype": cfg.shape.dtype,
            "pass": cfg.run.pass_,
            "layout": cfg.run.layout,
            "causal": cfg.run.causal,
            "hardware": cfg.machine.hardware.name,
            "implementation": cfg.kernel.implementation,
            "measured_s": self.measured_s,
            "measured_passes_s": self.measured_passes_s,
            "predicted_s": self.predicted.point,
            "predicted_interval_s": [self.predicted.low, self.predicted.high],
            "ranges": list(self.predicted.ranges),
            "ratio": self.ratio,
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason(),
            "tolerance": TOLERANCE,
            "steps": steps,
            "terms": self.terms(),
            "differs_most": self.differs_most(),
            "notes": self.notes,
        }
        recorded = self.recorded
        if recorded is not None:
            data["trace"] = {
                "format": recorded.format,
                "files": recorded.sources,
                "device": recorded.device_name,
                "family": None if recorded.shape.family is None else recorded.shape.family.name,
                "inferred": {
                    k.rstrip("_"): {"value": v, "from": recorded.shape.sources[k]}
                    for k, v in recorded.shape.values.items()
                },
                "clock_offsets_s": list(recorded.alignment.offsets),
                "clocks_shifted": recorded.alignment.shifted,
                "clock_residual_s": recorded.alignment.residual,
            }
        return data


def _ratio(measured: StepSplit | None, predicted: StepSplit) -> float | None:
    if measured is None or predicted.duration <= 0:
        return None
    return measured.duration / predicted.duration


def _term(name: str, steps: list[StepSplit], total: float) -> float:
    if name == "stragglers":
        return sum(s.spread for s in steps)
    if name == "outside":
        return total - sum(s.duration for s in steps)
    if name == "compute":
        return sum(s.attention + (s.merge or 0.0) for s in steps)
    return sum(getattr(s, name) or 0.0 for s in steps)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def predict(config: RingConfig) -> tuple[SimResult, Interval]:
    """The simulated run (timeline kept) and its makespan's interval over the ranges."""
    result = simulate(config, keep_timeline=True)
    span = config_interval(lambda c: simulate(c).makespan, config)
    return result, span


def compare_ring(recorded, config: RingConfig) -> Comparison:
    """``recorded`` (a ``ringsim.traces.RecordedRing``) against ``config`` simulated."""
    result, span = predict(config)
    attention, busy, merges = predicted_parts(result)
    predicted_steps = split_steps(result.timeline, attention, busy, merges=merges)
    comparison = Comparison(
        config,
        recorded.measured_s,
        span,
        measured_passes_s=list(recorded.pass_times),
        predicted_steps=predicted_steps,
        members=list(recorded.members),
        result=result,
        recorded=recorded,
        notes=list(recorded.notes),
    )
    if recorded.timeline is not None:
        members = recorded.members
        tl = result.timeline
        if len(members) < config.run.hosts:  # the simulated ring's columns of the traced ranks
            tl = _columns(tl, members)
            attention, busy = attention[:, members], busy[:, members]
            comparison.predicted_steps = split_steps(tl, attention, busy, merges=merges)
        known = recorded.shape.family is not None  # else no call is told from a merge
        comparison.measured_steps = split_steps(
            recorded.timeline, recorded.attention, recorded.busy, merges=known
        )
    return comparison


def compare_time(measured_s: float, config: RingConfig) -> Comparison:
    """A measured time alone against ``config`` simulated (no steps measured)."""
    result, span = predict(config)
    attention, busy, merges = predicted_parts(result)
    return Comparison(
        config,
        measured_s,
        span,
        measured_passes_s=[measured_s],
        predicted_steps=split_steps(result.timeline, attention, busy, merges=merges),
        result=result,
        notes=["a time alone: compared in total (a trace compares each step)"],
    )


def _columns(timeline: Timeline, hosts: list[int]) -> Timeline:
    pick = lambda a: a[:, hosts]
    return Timeline(
        pick(timeline.compute_start),
        pick(timeline.compute_end),
        pick(timeline.send_start),
        pick(timeline.send_end),
        pick(timeline.recv_start),
        pick(timeline.recv_end),
        list(timeline.step_labels),
        dict(timeline.meta),
    )
