"""Progress of a long measurement on stderr: which rank started, which probe runs, repeat i of n.

The probes run in rank processes; they ``report(queue, text, advance)`` into a queue that
``Progress`` (in the launching process) drains on a thread. A rank that dies stops reporting
and nothing waits for it: the ranks never block on the queue (``put_nowait``, and
``cancel_join_thread`` so that a rank can exit with messages unsent), and the thread stops
when the measurement returns or raises. On a terminal the progress is a ``rich`` bar; when
stderr is a file or a pipe, one plain line per thing that starts, with the steps done.

Apart from the text, every rank of ``kernels.distributed.launch.launch`` calls ``alive()`` as it
works: a time stamp in memory shared with the launcher (``Pulses``), so that a long run whose
ranks keep progressing is not taken for a hung one, while a rank that stops (hung in a
transfer, spinning outside the work) falls silent and is given up in bounded time. A rank's
clock starts when it has joined the process group (``joined()``), not when the launcher
created it: starting a rank (a fresh interpreter importing torch) takes seconds, more on a
busy machine, and must not count as silence.
"""

from __future__ import annotations

import math
import multiprocessing
import queue as queue_module
import sys
import threading
import time
from dataclasses import dataclass

from ringsim.timer.cost import attention_flops


class Pulses:
    """When each of ``n`` ranks joined its process group and its last sign of life:
    ``time.monotonic()`` stamps (one clock for every process of the machine) in shared memory,
    written by the ranks (``attach`` once, then ``joined()`` and ``alive()``) and read by the
    launcher (``joined_at``, ``last``). NaN until the rank has joined; ``created``: when the
    launcher made the slots (a rank that never joins is measured from there)."""

    def __init__(self, ctx, n: int):
        self.joined = ctx.Array("d", [math.nan] * n, lock=False)
        self.stamps = ctx.Array("d", [math.nan] * n, lock=False)
        self.created = time.monotonic()

    def attach(self, index: int) -> None:
        """In a rank process: make ``joined()`` and ``alive()`` stamp slot ``index``."""
        global _PULSE
        _PULSE = (self, index)

    def joined_at(self, index: int) -> float:
        """When rank ``index`` joined (NaN: not yet)."""
        return self.joined[index]

    def last(self, index: int) -> float:
        """Rank ``index``'s last sign of life (NaN: it has not joined yet)."""
        return self.stamps[index]


_PULSE = None  # (pulses, index) in a launched rank; None elsewhere


def joined() -> None:
    """From a launched rank: it has joined its process group; its deadline and its silence
    count from now (no-op outside one)."""
    if _PULSE is not None:
        pulses, index = _PULSE
        pulses.stamps[index] = pulses.joined[index] = time.monotonic()


def alive() -> float:
    """From a launched rank: it is working (no-op outside one). Call it between units of work
    shorter than the launcher's ``stall_s``; never from a thread that outlives a hung main one.
    Returns the stamp it wrote (``time.monotonic()``)."""
    now = time.monotonic()
    if _PULSE is not None:
        pulses, index = _PULSE
        pulses.stamps[index] = now
    return now


def pulsing(fn):
    """``fn`` that says ``alive()`` before each call (a probe re-run by ``reprobe``)."""

    def call(*args, **kwargs):
        alive()
        return fn(*args, **kwargs)

    return call


# A rate no local rank falls below while it works: 10x under one core's fused SDPA here (76.6
# GFLOP/s fp32 at c = 2048, results/peers-2026-11-30.json's floor 75-81), where a loaded
# machine measured 2.3x under it (a 16K ring at load 4: 8.0 s against a 3.5 s floor)
SLOWEST_FLOPS = 7.5e9


def stall_window(
    timeout_s: float, *, block_tokens: int, heads: int, head_dim: int, blocks: float
) -> float:
    """Seconds a rank may go without a sign of life (``launch``'s ``stall_s``) while it works
    through ``blocks`` full ``block_tokens`` blocks (forward, fp32) between two of them: their
    FLOPs at ``SLOWEST_FLOPS``, plus the launcher's usual ``2 * timeout_s + 30`` for the
    transfers and collectives in between."""
    flops = attention_flops(block_tokens, block_tokens, heads, head_dim)
    return 2 * timeout_s + 30 + blocks * flops / SLOWEST_FLOPS


# Seconds a launched rank may take to start (a fresh interpreter importing torch, pinned to
# its cores) before it joins the process group, besides the rendezvous' own ``timeout_s``:
# start-up took 2.4-2.8 s on this 2-core machine, 3.8-4.4 s beside two CPU-bound processes
# (issue 26); 120 s holds on a machine 25x slower than that, and a rank that fails to start
# (dies) is noticed at once anyway.
STARTUP_S = 120.0


@dataclass
class Limits:
    """When ``kernels.distributed.launch.launch`` gives up on a rank: ``deadline_s`` after it
    joined, or later while its last sign of life (``pulses``) is under ``stall_s`` old; one that
    has not joined, ``startup_s`` after the slots were made; at most ``after_failure`` seconds
    after another rank failed."""

    deadline_s: float
    stall_s: float | None
    after_failure: float
    pulses: Pulses
    startup_s: float = STARTUP_S
    failed_at: float | None = None

    def give_up_at(self, slot: int) -> float:
        joined = self.pulses.joined_at(slot)
        if math.isnan(joined):
            at = self.pulses.created + self.startup_s
        else:
            at = joined + self.deadline_s
            if self.stall_s is not None:
                at = max(at, self.pulses.last(slot) + self.stall_s)
        return at if self.failed_at is None else min(at, self.failed_at + self.after_failure)


def report(channel, text: str, advance: int = 0) -> None:
    """From a rank: say what it does now (``advance``: steps done). No-op without a channel;
    never blocks and never raises (progress must not break a measurement). A report is also
    a sign of life (``alive``)."""
    alive()
    if channel is None:
        return
    try:
        channel.cancel_join_thread()
        channel.put_nowait((text, advance))
    except Exception:  # a full or closed queue: drop the message
        pass


class Progress:
    """``with Progress(total, title) as progress:`` a bar of ``total`` steps on ``stream``
    (default stderr), advanced by ``progress.advance(text)`` here and by ``report(channel,
    ...)`` in the ranks (``progress.channel``: pass it to them). ``enabled=False``: silent,
    and ``channel`` is ``None``."""

    def __init__(self, total: int, title: str, *, enabled: bool = True, stream=None):
        self.total, self.title, self.enabled = total, title, enabled
        self.stream = stream or sys.stderr
        self.channel = None
        self._done = 0
        self._bar = self._task = self._thread = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._start = time.monotonic()

    def __enter__(self) -> Progress:
        if not self.enabled:
            return self
        if _is_terminal(self.stream):
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import (
                Progress as Bar,
            )

            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.title, total=self.total)
        self.channel = multiprocessing.get_context("spawn").Queue()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()
        return self

    def advance(self, text: str, steps: int = 1) -> None:
        """One event: ``text`` says what runs now, ``steps`` the steps it completes."""
        if not self.enabled:
            return
        with self._lock:
            self._done = min(self._done + steps, self.total)
            if self._bar is not None:
                self._bar.update(
                    self._task, completed=self._done, description=f"{self.title}: {text}"
                )
            elif steps == 0:  # plain lines: what starts (the next start says it is done)
                elapsed = time.monotonic() - self._start
                print(
                    f"[{self.title} {self._done}/{self.total} {elapsed:5.1f} s] {text}",
                    file=self.stream,
                    flush=True,
                )

    def _drain(self) -> None:
        while True:
            try:
                text, steps = self.channel.get(timeout=0.1)
            except (queue_module.Empty, OSError, EOFError, ValueError):
                if self._stop.is_set():
                    return
                continue
            self.advance(text, steps)

    def __exit__(self, *exc) -> None:
        if not self.enabled:
            return
        self._stop.set()
        # the thread ends once the queue is empty (its ``get`` waits 0.1 s at a time): what the
        # ranks said before they ended is all shown, however slowly a busy machine runs it;
        # the limit only bounds a failure
        self._thread.join(timeout=60.0)
        self.channel.close()
        self.channel.cancel_join_thread()
        if self._bar is not None:
            self._bar.stop()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
