"""Output files that nothing breaks and nothing loses: checked before the work, written whole.

Every file ringsim writes (traces, figures, profiles, the JSON of ``measure``/``calibrate``/
``gpu_check``) goes through here:

* ``check_output_path`` refuses, before any work, a path that cannot be written (empty, a
  folder, a device such as ``/dev/full``, a folder that is not writable, or where nothing can
  be created such as ``/proc``, a format nobody can write), with a ``ValueError`` naming the
  flag or argument. A command checks *all* its outputs
  first, so a bad second output never costs the first one.
* ``atomic_open`` writes to a temporary file beside the target and renames it over the target
  (``os.replace``) only once complete: a write that fails half-way (disk full, a crash, an
  exception) leaves the old file as it was.
* ``write_json`` is strict JSON (no ``NaN``/``Infinity``, which strict parsers reject): a
  non-finite number is refused, naming where it sits.

And every JSON file ringsim reads back (profiles, calibrations, benchmark tables) goes through
``read_json_object``: one ``ValueError`` naming the file and the cause, whatever went wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

# what matplotlib's Agg, PDF, PS, SVG and PGF backends write (its get_supported_filetypes())
FIGURE_FORMATS = (
    *("png", "svg", "pdf", "jpg", "jpeg", "eps", "ps", "svgz", "tif", "tiff", "webp"),
    *("gif", "avif", "pgf", "raw", "rgba"),
)
FIGURE_PROGRAMS = {"pgf": "xelatex"}
"""Formats whose matplotlib backend runs an outside program to lay out text: ``pgf`` runs
``rcParams['pgf.texsystem']``, ``xelatex`` by default; a format is offered only where its
program is installed."""
FIGURE_PLUGINS = {"webp": "WEBP", "avif": "AVIF"}
"""Formats Pillow writes only when built with their codec (``PIL.features.check``)."""

MAX_READ_BYTES = 64 * 2**20
"""The most bytes ``read_json_object`` reads: ringsim's largest JSON (a benchmark table) is
about 100 KB, so anything past 64 MiB is not one of its files (``/dev/zero`` never ends)."""


def figure_formats() -> tuple[str, ...]:
    """The figure formats this machine can write (``FIGURE_FORMATS`` less those whose program
    or codec is missing), without importing matplotlib."""
    import shutil

    usable = [
        f
        for f in FIGURE_FORMATS
        if shutil.which(FIGURE_PROGRAMS.get(f, "")) or f not in FIGURE_PROGRAMS
    ]
    try:
        from PIL import features
    except ImportError:
        return tuple(usable)
    return tuple(f for f in usable if f not in FIGURE_PLUGINS or _has_codec(features, f))


def _has_codec(features, fmt: str) -> bool:
    try:
        return bool(features.check(FIGURE_PLUGINS[fmt].lower()))
    except (ValueError, OSError):  # a Pillow that does not know the feature's name
        return False


def check_output_path(name: str, path: object, *, suffixes: Sequence[str] | None = None) -> Path:
    """``path`` as a ``Path`` if a file can be written there, else a ``ValueError`` naming
    ``name`` (``--trace``, ``path``): an empty path, a folder, an existing file that is not a
    regular file (``/dev/full``, a pipe) or is read-only, a suffix not in ``suffixes`` (without
    the dot), or a parent that is not a writable folder (missing folders are created)."""
    if not isinstance(path, str | os.PathLike) or not os.fspath(path).strip():
        raise ValueError(f"{name} must be a file path, got {path!r}")
    text = os.fspath(path)
    target = Path(text)
    _check_name_length(name, text, target)
    if target.is_dir() or text.endswith(("/", os.sep)):
        example = os.path.join(text, "out" + ("." + suffixes[0] if suffixes else ""))
        raise ValueError(f"{name} {text!r} is a folder; give a file path (e.g. {example!r})")
    if suffixes is not None and target.suffix.lower().lstrip(".") not in suffixes:
        suffix = target.suffix.lower().lstrip(".")
        program = FIGURE_PROGRAMS.get(suffix) or FIGURE_PLUGINS.get(suffix)
        why = (
            f"the .{suffix} format needs {program}, which this machine lacks"
            if program
            else f"it has an unsupported format {target.suffix or '(no suffix)'!r}"
        )
        raise ValueError(
            f"{name} {text!r}: {why}; use one of {', '.join('.' + s for s in suffixes)}"
        )
    if target.is_symlink():
        try:
            os.stat(target)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise ValueError(
                    f"{name} {text!r} is a symbolic link that loops (it never reaches a file)"
                ) from None
    if target.exists() and not target.is_file():  # is_file follows a link to its target
        raise ValueError(
            f"{name} {text!r} is not a regular file (a device or a pipe); give a file path"
        )
    if target.is_file() and not os.access(target, os.W_OK):
        raise ValueError(f"{name} {text!r} is a read-only file")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:  # missing folders are created
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{name} {text!r}: {str(parent)!r} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{name} {text!r}: the folder {str(parent)!r} is not writable")
    _probe(name, text, parent, folder=parent != target.parent)
    return target


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) ``folder``'s file system takes (255 where it does not
    say)."""
    while not os.path.isdir(folder) and folder != folder.parent:  # False on any OSError
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def _check_name_length(name: str, text: str, target: Path) -> None:
    """Refuse up front a file name or a missing folder's name longer than the file system
    takes (``ENAMETOOLONG`` would come only after the work, when the file is written)."""
    limit = _name_max(target.parent)
    for part in target.parts:
        if len(os.fsencode(part)) > limit:
            raise ValueError(
                f"{name} {text!r}: the name {part[:40]!r}... is {len(os.fsencode(part))} bytes "
                f"long, more than the {limit} this file system takes"
            )


def _probe(name: str, text: str, parent: Path, *, folder: bool) -> None:
    """Create (and remove) a hidden file, or the missing folder's first level, in ``parent``:
    ``os.access`` says yes to root everywhere, also in ``/proc`` or ``/sys``, where nothing
    can be created. Only an attempt tells."""
    try:
        if folder:
            os.rmdir(tempfile.mkdtemp(prefix=".ringsim-probe-", dir=parent))
        else:
            fd, tmp = tempfile.mkstemp(prefix=".ringsim-probe-", dir=parent)
            os.close(fd)
            os.unlink(tmp)
    except OSError as err:
        raise ValueError(
            f"{name} {text!r}: nothing can be written in {str(parent)!r} ({err.strerror})"
        ) from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing (``mode`` ``"w"`` or ``"wb"``); when
    the ``with`` block ends without an exception, the data is flushed to disk and the file
    renamed over ``path``. On any failure the temporary file is removed and ``path`` is
    untouched; an ``OSError`` names ``path``. Missing parent folders are created."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise OSError(err.errno, f"could not write {str(target)!r}: {err.strerror}") from None
    try:
        keep = target.stat().st_mode & 0o777 if target.is_file() else 0o666 & ~_umask()
        os.chmod(tmp, keep)  # mkstemp makes 0600; the file gets the mode open() would give
        with open(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError) and not isinstance(err, FileNotFoundError | IsADirectoryError):
            raise OSError(err.errno, f"could not write {str(target)!r}: {err.strerror}") from err
        raise


TEMP_EXTRA = len(".") + len(".") + 8 + len(".tmp")
"""Bytes a temporary name adds to the target's: ``.{name}.XXXXXXXX.tmp`` (mkstemp's 8)."""


def _temp_prefix(target: Path) -> str:
    """``.{name}.``, the name cut so the temporary name fits the file system's limit (a valid
    name of up to ``NAME_MAX`` bytes must not fail only because its temporary is longer)."""
    room = _name_max(target.parent) - TEMP_EXTRA
    name = os.fsencode(target.name)
    if len(name) > room:
        name = name[:room].decode(errors="ignore").encode()  # no half of a UTF-8 character
    return f".{os.fsdecode(name)}."


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (``atomic_open``)."""
    with atomic_open(path) as fh:
        fh.write(text)


def first_non_finite(value: object, where: str = "") -> str | None:
    """Where the first NaN or infinity in a JSON-like ``value`` sits (``steps[3].ratio``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "the value"
    if isinstance(value, dict):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for key, item in items:
        found = first_non_finite(item, key)
        if found is not None:
            return found
    return None


def json_text(data: object, *, what: str = "the output", **dump_kw) -> str:
    """Strict JSON of ``data``: a NaN or infinity is a ``ValueError`` saying where it is (a
    result that overflowed must not become ``Infinity``, which strict parsers reject)."""
    try:
        return json.dumps(data, allow_nan=False, **dump_kw)
    except ValueError:
        where = first_non_finite(to_jsonable(data, finite=False)) or "a value"
        raise ValueError(
            f"refusing to write {what}: {where} is not finite (a result overflowed?); strict "
            "JSON has no NaN or Infinity"
        ) from None


def write_json(path: str | os.PathLike, data: object, *, indent: int | None = 2, **dump_kw) -> None:
    """Write ``data`` to ``path`` as strict JSON (``json_text``), atomically (``atomic_open``):
    the file is either the old one or the whole new one, and never holds NaN or Infinity."""
    text = json_text(data, what=repr(os.fspath(path)), indent=indent, **dump_kw)
    write_text_atomic(path, text + ("\n" if indent is not None else ""))


def to_jsonable(value: object, *, finite: bool = True) -> object:
    """Plain JSON types: numpy scalars become numbers, tuples lists, dataclasses dicts; with
    ``finite``, NaN/inf become null (for a report printed to people and scripts)."""
    import dataclasses

    if isinstance(value, dict):
        return {str(k): to_jsonable(v, finite=finite) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v, finite=finite) for v in value]
    if hasattr(value, "tolist"):  # numpy scalar or array
        return to_jsonable(value.tolist(), finite=finite)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value), finite=finite)
    if isinstance(value, float) and finite and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def read_json_object(path: str | os.PathLike, *, what: str = "JSON file") -> dict:
    """The JSON object in the file at ``path``. Every failure is a ``ValueError`` naming
    ``what`` (``profile``, ``--calibration``), the file and the cause: unreadable, empty, not
    strict JSON (truncated, or ``NaN``/``Infinity``, which ``write_json`` never writes) or not
    an object."""
    name = f"{what} {os.fspath(path)!r}"
    text = _read_capped(path, name)
    if not text.strip():
        raise ValueError(f"{name} is empty (not valid JSON)")
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as err:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"{name} is not valid JSON (truncated?): {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{name} must hold a JSON object, got a {type(data).__name__}")
    return data


def _read_capped(path: str | os.PathLike, name: str) -> str:
    """The text of the regular file at ``path``, at most ``MAX_READ_BYTES``: a device
    (``/dev/zero`` never ends), a pipe (its writer may never come) or a folder is refused
    before it is opened, a longer file after ``MAX_READ_BYTES``."""
    try:
        info = os.stat(path)
    except OSError as err:
        raise ValueError(f"{name} could not be read: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{name} is not a regular file (a device, a pipe or a folder)")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_READ_BYTES + 1)
    except OSError as err:
        raise ValueError(f"{name} could not be read: {err.strerror}") from None
    if len(data) > MAX_READ_BYTES:
        raise ValueError(
            f"{name} is longer than {MAX_READ_BYTES // 2**20} MiB: not one of ringsim's JSON files"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{name} could not be read: not UTF-8 text ({err.reason})") from None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not strict JSON")


def cache_dir(name: str) -> Path:
    """Where ringsim keeps results that are slow to make and can be remade (``name``: one
    folder per kind): ``$RINGSIM_CACHE_DIR/name``, else ``$XDG_CACHE_HOME/ringsim/name``, else
    ``~/.cache/ringsim/name``. Nothing in it is needed: deleting it costs only time."""
    root = os.environ.get("RINGSIM_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "ringsim")
    return Path(root) / name


# output flags of the in-process subcommands: flag, and the formats it takes (None: any)
OUTPUT_FLAGS = {"trace": ("--trace", None), "plot": ("--plot", "figure")}


def check_outputs(args: argparse.Namespace, flags: dict | None = None) -> None:
    """Every output path the flags name, checked before any work and before any file is
    written (``check_output_path``): a bad ``--plot`` must not cost the
    ``--trace`` file written before it. Two flags naming one file are refused too."""
    seen: dict = {}
    for attr, (flag, kind) in (OUTPUT_FLAGS if flags is None else flags).items():
        path = getattr(args, attr, None)
        if path is None:
            continue
        suffixes = figure_formats() if kind == "figure" else kind
        target = Path(os.path.realpath(check_output_path(flag, path, suffixes=suffixes)))
        if target in seen:
            raise ValueError(f"{seen[target]} and {flag} name the same file {path!r}")
        seen[target] = flag
