"""Progress of a long measurement on stderr: which rank started, which probe runs, repeat i of n.

The probes run in rank processes; they ``report(queue, text, advance)`` into a queue that
``Progress`` (in the launching process) drains on a thread. A rank that dies stops reporting
and nothing waits for it: the ranks never block on the queue (``put_nowait``, and
``cancel_join_thread`` so that a rank can exit with messages unsent), and the thread stops
when the measurement returns or raises. On a terminal the progress is a ``rich`` bar; when
stderr is a file or a pipe, one plain line per thing that starts, with the steps done.

Apart from the text, every rank of ``kernels.distributed.launch.launch`` calls ``alive()`` as it
works: a
time stamp in memory shared with the launcher (``Pulses``), so that a long run whose ranks keep
progressing is not taken for a hung one, while a rank that stops (hung in a transfer, spinning
outside the work) falls silent and is given up in bounded time.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import sys
import threading
import time
from dataclasses import dataclass

from ringsim.timer.cost import attention_flops


class Pulses:
    """The last sign of life of each of ``n`` ranks: ``time.monotonic()`` stamps (one clock for
    every process of the machine) in shared memory, written by the ranks (``attach`` once, then
    ``alive()``) and read by the launcher (``last``). Starts at its creation time."""

    def __init__(self, ctx, n: int):
        self.stamps = ctx.Array("d", [time.monotonic()] * n, lock=False)

    def attach(self, index: int) -> None:
        """In a rank process: make ``alive()`` stamp slot ``index``."""
        global _PULSE
        _PULSE = (self.stamps, index)

    def last(self, index: int) -> float:
        return self.stamps[index]


_PULSE = None  # (stamps, index) in a launched rank; None elsewhere


def alive() -> None:
    """From a launched rank: it is working (no-op outside one). Call it between units of work
    shorter than the launcher's ``stall_s``; never from a thread that outlives a hung main one."""
    if _PULSE is not None:
        stamps, index = _PULSE
        stamps[index] = time.monotonic()


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


@dataclass
class Limits:
    """When ``kernels.distributed.launch.launch`` gives up on a rank: at ``deadline``, or later
    while the
    rank's last sign of life (``pulses``) is under ``stall_s`` old; at most ``after_failure``
    seconds after another rank failed."""

    deadline: float
    stall_s: float | None
    after_failure: float
    pulses: Pulses
    failed_at: float | None = None

    def give_up_at(self, slot: int) -> float:
        at = self.deadline
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
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=Console(file=self.stream), transient=True,
            )  # fmt: skip
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
                self._bar.update(self._task, completed=self._done,
                                 description=f"{self.title}: {text}")  # fmt: skip
            elif steps == 0:  # plain lines: what starts (the next start says it is done)
                elapsed = time.monotonic() - self._start
                print(f"[{self.title} {self._done}/{self.total} {elapsed:5.1f} s] {text}",
                      file=self.stream, flush=True)  # fmt: skip

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
        self._thread.join(timeout=2.0)
        self.channel.close()
        self.channel.cancel_join_thread()
        if self._bar is not None:
            self._bar.stop()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
