"""Reading trace files: each told apart by its content (an SQLite export's header, gzip's
magic bytes, JSON), never by its name, into one ``Recording``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ringsim.traces.events import Recording, TraceError
from ringsim.traces.kineto import load_json, read_kineto
from ringsim.traces.nsys import SQLITE_MAGIC, read_nsys


def read_trace(path: str | Path) -> Recording:
    """One file: Kineto JSON (plain or gzipped) or an Nsight Systems SQLite export."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except IsADirectoryError:
        raise TraceError(f"{path}: a folder, not a trace file") from None
    except OSError as err:
        raise TraceError(f"{path}: cannot read: {err.strerror or err}") from None
    if data.startswith(SQLITE_MAGIC):
        ranks, notes = read_nsys(path)
        return Recording(ranks, "nsys", notes)
    ranks, notes = read_kineto(path, load_json(path, data))
    return Recording(ranks, "kineto", notes)


def read_traces(paths: Sequence[str | Path]) -> Recording:
    """Every file's ranks in one ``Recording`` (all of one format)."""
    if isinstance(paths, str | Path):
        paths = [paths]
    if not paths:
        raise TraceError("no trace given")
    parts = [read_trace(p) for p in paths]
    formats = {p.format for p in parts}
    if len(formats) > 1:
        raise TraceError(f"traces of different formats ({', '.join(sorted(formats))}): give one")
    ranks = [r for p in parts for r in p.ranks]
    return Recording(ranks, formats.pop(), [n for p in parts for n in p.notes])
