"""Progress of a long measurement on stderr: which rank started, which probe runs, repeat i of n.

The probes run in rank processes; they ``report(queue, text, advance)`` into a queue that
``Progress`` (in the launching process) drains on a thread. A rank that dies stops reporting
and nothing waits for it: the ranks never block on the queue (``put_nowait``, and
``cancel_join_thread`` so that a rank can exit with messages unsent), and the thread stops
when the measurement returns or raises. On a terminal the progress is a ``rich`` bar; when
stderr is a file or a pipe, one plain line per thing that starts, with the steps done.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import sys
import threading
import time


def report(channel, text: str, advance: int = 0) -> None:
    """From a rank: say what it does now (``advance``: steps done). No-op without a channel;
    never blocks and never raises (progress must not break a measurement)."""
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
