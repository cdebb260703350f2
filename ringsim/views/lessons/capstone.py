"""The capstone's checker: a learner's choice of layout, Ulysses degree, tensor parallelism and
recompute for a training step, set beside the planner's best, with the gap explained.

``check_choice(plan, Choice(...))`` finds the learner's configuration among everything the
planner (``ringsim.plan``) sized: the fastest one of that choice that fits (any strategy and
placement unless the choice names them), or, when none fits, the leanest that does not. The
``Verdict`` says whether it fits, its rank, its step time against the best, and where the
difference comes from: the parts of the step (``StepBreakdown``'s exposed terms) that differ
most, and for a choice that does not fit, the memory it needs against what the device leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ringsim.views.lessons.words import compared

# the exposed parts of a step, as the learner reads them (StepBreakdown.EXPOSED)
PARTS = {
    "attention_s": "attention (its exposed context-parallel communication included)",
    "recompute_s": "recomputed forward passes",
    "gemm_s": "GEMMs (projections and feed-forward)",
    "lm_head_s": "the output head and the loss",
    "elementwise_s": "elementwise kernels",
    "tp_comm_s": "tensor-parallel collectives",
    "dp_comm_exposed_s": "data-parallel gradient traffic left exposed",
    "pp_bubble_s": "the pipeline bubble",
    "optimizer_s": "the optimizer",
}
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "logits")
SHOWN_PARTS = 3  # the largest differences a verdict explains


@dataclass(frozen=True)
class Choice:
    """A learner's configuration: ``layout`` of the tokens, Ulysses degree ``ulysses`` (``U``;
    the ring degree is what is left of the context-parallel group), tensor parallelism ``tp``
    and ``recompute`` (``"none"``, ``"selective"`` or ``"full"``). ``strategy``,
    ``placement`` and the pipeline degree ``pp`` narrow it further (default: any; the
    planner searches the pipeline unless told, so the best of the degrees matching)."""

    layout: str
    ulysses: int = 1
    tp: int = 1
    recompute: str = "full"
    strategy: str | None = None
    placement: str | None = None
    pp: int | None = None

    def matches(self, candidate) -> bool:
        p = candidate.parallel
        wanted = (self.layout, self.ulysses, self.tp, self.recompute)
        if (p.layout, p.ulysses, p.tp, p.recompute) != wanted:
            return False
        if self.strategy is not None and p.strategy != self.strategy:
            return False
        if self.pp is not None and p.pp != self.pp:
            return False
        return self.placement is None or p.placement == self.placement


@dataclass
class Verdict:
    """What ``check_choice`` found: the learner's ``candidate`` (``None`` if the planner has no
    such configuration), the planner's ``best``, the ``rank`` (1 = best; ``None`` if it does not
    fit), and ``reasons``: sentences on the gap, largest part first."""

    choice: Choice
    candidate: object
    best: object
    rank: int | None
    fits: bool
    reasons: list[str] = field(default_factory=list)

    @property
    def gap(self) -> float:
        """Step time over the best's, minus one (0 for the best; NaN if it does not fit)."""
        if not self.fits:
            return float("nan")
        return self.candidate.step_time_s / self.best.step_time_s - 1

    def summary(self) -> str:
        c, best = self.candidate, self.best
        if not self.fits:
            head = (
                f"`{c.label}` does not fit: it needs {c.bytes_per_host / 1e9:.1f} GB per GPU "
                f"of the {c.usable_bytes / 1e9:.1f} GB usable."
            )
        elif self.rank == 1:
            head = (
                f"`{c.label}` is the planner's best: {c.step_time_s:.2f} s per step, "
                f"{c.bytes_per_host / 1e9:.1f} GB per GPU."
            )
        else:
            head = (
                f"`{c.label}` fits ({c.bytes_per_host / 1e9:.1f} GB per GPU) and ranks "
                f"{self.rank}: {c.step_time_s:.2f} s per step against the best's "
                f"{best.step_time_s:.2f} s (`{best.label}`), "
                f"{compared(c.step_time_s, best.step_time_s, more='slower', less='faster')}."
            )
        return " ".join([head, *self.reasons])

    def _repr_markdown_(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return self.summary()


def check_choice(plan, choice: Choice) -> Verdict:
    """Set ``choice`` beside ``plan`` (a ``ringsim.plan`` result, every candidate timed: no
    ``keep``). ``ValueError`` names the field when the planner sized no such configuration."""
    if not isinstance(choice, Choice):
        raise ValueError(f"choice must be a Choice, got {type(choice).__name__}")
    if plan.bounded:
        raise ValueError("plan was made with keep=...: plan again without it, so all are timed")
    everything = plan.candidates + plan.dropped
    matching = [c for c in everything if choice.matches(c)]
    if not matching:
        raise ValueError(_no_such(plan, choice, everything))
    best = plan.candidates[0]
    fitting = [c for c in plan.candidates if choice.matches(c)]
    if fitting:
        mine = fitting[0]  # candidates are sorted, best first
        rank = plan.candidates.index(mine) + 1
        reasons = [] if rank == 1 else _time_reasons(mine, best)
        return Verdict(choice, mine, best, rank, True, reasons)
    leanest = min(matching, key=lambda c: c.bytes_per_host)
    return Verdict(choice, leanest, best, None, False, _memory_reasons(leanest, best))


def _no_such(plan, choice: Choice, everything: list) -> str:
    """Which field of ``choice`` the planner never tried, and the values it did."""
    fields_ = {
        "layout": {c.parallel.layout for c in everything},
        "ulysses": {c.parallel.ulysses for c in everything},
        "tp": {c.parallel.tp for c in everything},
        "recompute": {c.parallel.recompute for c in everything},
        "pp": {c.parallel.pp for c in everything} | {None},
    }
    for name, seen in fields_.items():
        if getattr(choice, name) not in seen:
            tried = sorted(v for v in seen if v is not None)  # None: any pipeline degree
            return f"choice.{name}={getattr(choice, name)!r}: the planner tried {tried}"
    return (
        f"the planner sized no configuration with {choice} together (each value occurs, "
        "not in this combination)"
    )


def _time_reasons(mine, best) -> list[str]:
    """The parts of the step that differ most, largest first, each with its seconds."""
    diffs = [(mine.breakdown.get(key, 0.0) - best.breakdown.get(key, 0.0), key) for key in PARTS]
    diffs = sorted((d for d in diffs if abs(d[0]) > 0.005 * best.step_time_s), reverse=True)
    if not diffs:
        return ["The parts of the two steps are the same within half a percent."]
    words = [f"{PARTS[key]} {delta:+.2f} s" for delta, key in diffs[:SHOWN_PARTS]]
    reasons = ["Where the difference is, largest first: " + "; ".join(words) + "."]
    if mine.block_tokens != best.block_tokens:
        reasons.append(
            f"Your attention works on key/value blocks of {mine.block_tokens:,} tokens, the "
            f"best's on {best.block_tokens:,}: longer attention calls run closer to the "
            "kernel's peak, and a block hides its transfer once it passes the causal "
            "threshold 2F/B."
        )
    return reasons


def _memory_reasons(mine, best) -> list[str]:
    """The memory parts that grow most over the best's, and what frees them."""
    over = mine.bytes_per_host - mine.usable_bytes
    parts = sorted(
        ((mine.memory.get(k, 0.0) - best.memory.get(k, 0.0), k) for k in mine.memory),
        reverse=True,
    )
    words = [f"{k.replace('_', ' ')} {d / 1e9:+.1f} GB" for d, k in parts[:SHOWN_PARTS] if d > 0]
    reasons = [f"It is {over / 1e9:.1f} GB over."]
    if words:
        reasons.append(
            f"Against the best (`{best.label}`, {best.bytes_per_host / 1e9:.1f} GB): "
            + "; ".join(words)
            + "."
        )
    if mine.parallel.recompute != "full":
        reasons.append("Recomputing every layer keeps only each layer's input per token.")
    return reasons
