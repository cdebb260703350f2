"""How the subcommands print: one JSON document for scripts (``--json``), a table for people
(rich on a terminal, plain text otherwise), side remarks on stderr."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence

from ringsim.files import to_jsonable
from ringsim.schedule import Pass
from ringsim.values import error_line
from ringsim.views.plots import format_tokens as format_length
from ringsim.views.plots import percent


def print_json(data: object) -> None:
    print(json.dumps(to_jsonable(data), indent=2))


def human(key: str, value: object) -> str:
    """A readable value, chosen by the JSON key's unit suffix."""
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "-"}[value]
    if isinstance(value, str) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if key.endswith("_s"):
        return format_seconds(value)
    if "bytes" in key:
        return format_bytes(value)
    if "fraction" in key:
        return percent(value)
    if key.startswith("flops"):
        return f"{value:.3e} FLOP"
    if "tokens" in key or key in ("seq_len", "min_block_for_overlap") or "context" in key:
        return f"{format_length(value)} tokens"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_seconds(seconds: float) -> str:
    if seconds == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e3), ("µs", 1e6)):
        if abs(seconds) * scale >= 1:
            return f"{seconds * scale:.4g} {unit}"
    return f"{seconds * 1e9:.4g} ns"


def format_bytes(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"


def print_table(title: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A terminal table: rich when stdout is a terminal and rich is installed, else plain."""
    rows = [[str(c) for c in row] for row in rows]
    if sys.stdout.isatty():
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            pass
        else:
            table = Table(title=title, title_justify="left", header_style="bold")
            for i, name in enumerate(header):
                table.add_column(name, justify="left" if i == 0 else "right")
            for row in rows:
                table.add_row(*row)
            Console().print(table)
            return
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(title)
    line = _plain_row(header, widths)
    print(line)
    print("-" * len(line))
    for row in rows:
        print(_plain_row(row, widths))


def _plain_row(cells: Sequence[str], widths: Sequence[int]) -> str:
    """First column left-aligned (names), the others right-aligned (numbers)."""
    pairs = zip(cells, widths, strict=True)
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(pairs))


class Ticker:
    """Progress of work that lasts more than a few seconds, on stderr only (stdout stays one
    table or one JSON document, and tests' captured stdout stays clean): nothing for
    ``after_s`` seconds, then ``[ringsim plan 12 s] timing configurations: 40 of 120``,
    rewritten in place on a terminal and erased when the work ends (``with``), a new line every
    ``every_s`` seconds elsewhere (a log). The one mechanism for every slow command: call it
    as the library's ``progress`` callback (``ticker(done, total, what)``: ``plan``,
    ``validate``) or iterate through it (``ticker.over(items, what)``)."""

    def __init__(self, prog: str, *, after_s: float = 5.0, every_s: float = 10.0, stream=None):
        self.prog, self.after_s, self.every_s = prog, after_s, every_s
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.last = -math.inf
        self.width = 0  # of the line shown in place on a terminal
        try:
            self.terminal = self.stream.isatty()
        except (AttributeError, ValueError):
            self.terminal = False

    def __call__(self, done: int, total: int, what: str = "") -> None:
        now = time.monotonic()
        gap = 0.2 if self.terminal else self.every_s
        if now - self.start < self.after_s or now - self.last < gap:
            return
        self.last = now
        line = f"[{self.prog} {now - self.start:.0f} s] {what}: {done:,} of {total:,}"
        if self.terminal:
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def over(self, items: Sequence, what: str) -> Iterable:
        """``items``, one at a time, the line saying how many are done (erased at the end)."""
        try:
            for i, item in enumerate(items):
                self(i, len(items), what)
                yield item
        finally:
            self.__exit__()

    def __enter__(self) -> Ticker:
        return self

    def __exit__(self, *exc) -> None:
        if self.width:  # erase the line shown in place: what follows starts clean
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def note(text: str) -> None:
    """Side remarks (files written) go to stderr so ``--json`` output stays one document."""
    print(text, file=sys.stderr)


def describe(config, strategy: str = "ring") -> str:
    """One line naming the run: ``ring forward, 64K tokens on 8 hosts (8K each), zigzag, ...``
    (decode leaves out layout, mask and overlap: one token attends to the whole cache)."""
    split = f"{format_length(config.seq_len)} tokens on {config.hosts} hosts"
    split += f" ({format_length(config.block_tokens)} each)"
    if config.pass_ != Pass.DECODE:
        mask = "causal" if config.causal else "full"
        if config.sliding_window is not None:
            mask += f", window {format_length(config.sliding_window)}"
        overlap = "overlap" if config.overlap else "no overlap"
        split += f", {config.layout}, {mask}, {overlap}"
    heads = f"{config.heads} heads" + (
        f" ({config.kv_heads} kv)" if config.kv_heads != config.heads else ""
    )
    batch = f", batch {config.batch}" if config.batch > 1 else ""
    family = getattr(config, "family", None)
    kernel = "" if family is None or family.ideal else f", {family.name} kernels"
    return (
        f"{strategy} {config.pass_}, {split}, {config.hardware.name}, {config.dtype}, "
        f"{heads} x {config.head_dim}{batch}{kernel}"
    )


def np_errstate():
    """NumPy's overflow/invalid warnings off (a context manager); ``check_finite_times`` turns
    an overflowed run into one line naming the flags instead of warnings and ``inf``."""
    import numpy as np

    return np.errstate(over="ignore", invalid="ignore")


def guarded(prog: str, run: Callable[[], int | None], *, as_json: bool = False) -> int:
    """Run a command; bad values (ValueError) end in one line on stderr and exit code 2 (a
    JSON object under ``--json``: ``ringsim.values.error_line``)."""
    try:
        with np_errstate():  # overflow is not warned about: results are checked for finiteness
            return int(run() or 0)
    except (ValueError, OverflowError) as err:
        sys.stderr.write(error_line(prog, err, as_json=as_json))
        return 2
    except BrokenPipeError:  # `ringsim ... | head`: the reader left; say nothing more
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except OSError as err:  # a plot or trace path that cannot be written
        sys.stderr.write(error_line(prog, err, as_json=as_json, code=1))
        return 1
    except KeyboardInterrupt:
        return 130
