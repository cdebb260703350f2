"""Argument values, parsed from text: lengths (``64K``), quantities with SI suffixes (``50G``),
tiles (``128x64``), rates, fractions, stragglers. Each parser returns the value or raises
``ValueError`` naming the argument and what it got; ``arg_type`` turns one into an argparse
``type`` that keeps that message, and ``Parser`` ends every error in one line with exit code 2.

Shared by the ``ringsim`` command line and the real backend's own command lines
(``kernels.calibration``), so every flag is read and refused the same way. Core: NumPy-free,
imports nothing of ringsim.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable

_LENGTH = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)\s*$")
_SUFFIX = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_length(text: str) -> int:
    """``"64K"`` -> 65536, ``"16M"`` -> 16777216, ``"1000"`` -> 1000 (suffixes are powers of 2)."""
    match = _LENGTH.match(str(text))
    if not match:
        raise ValueError(
            f"length must be a positive integer with an optional K, M or G suffix, got {text!r}"
        )
    value = int(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value <= 0:
        raise ValueError(f"length must be positive, got {text!r}")
    return value


SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


# -- parsing values: each returns the value or raises ValueError naming it ------------------
def parse_positive_int(name: str, text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {text!r}")
    return value


def parse_positive_ints(name: str, text: str) -> tuple[int, ...]:
    """``"16"`` -> ``(16,)``, ``"1,2,4"`` -> ``(1, 2, 4)``: positive integers, comma-separated."""
    parts = str(text).split(",")
    try:
        return tuple(parse_positive_int(name, part.strip()) for part in parts)
    except ValueError:
        raise ValueError(
            f"{name} must be a positive integer or a comma-separated list of them, got {text!r}"
        ) from None


def parse_quantity(name: str, text: str, *, allow_zero: bool = False) -> float:
    """A finite positive number, optionally with an SI suffix: ``312e12``, ``312T``, ``50G``."""
    body = text.strip()
    suffix = body[-1:] if body[-1:] in SI else ""
    try:
        value = float(body[: len(body) - len(suffix)]) * SI[suffix]
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be a finite {kind} number (e.g. 50e9 or 50G), got {text!r}")
    if 0 < value < sys.float_info.min:  # subnormal: every time computed from it overflows
        raise ValueError(
            f"{name} must be zero or at least {sys.float_info.min:.3g} (a normal float), got "
            f"{text!r}"
        )
    return value


def parse_non_negative_int(name: str, text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(f"{name} must be a non-negative integer, got {text!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {text!r}")
    return value


def parse_seq_len(text: str) -> int:
    try:
        return parse_length(text)
    except ValueError as err:
        raise ValueError(f"seq_len: {err}") from None


def parse_straggler(text: str) -> tuple[int, float]:
    """``HOST:SLOWDOWN``: ``3:2`` makes host 3 take twice as long for the same work."""
    host, sep, factor = text.partition(":")
    if not sep:
        raise ValueError(f"straggler must look like HOST:SLOWDOWN (e.g. 3:2), got {text!r}")
    try:
        index = int(host)
    except ValueError:
        raise ValueError(f"straggler host must be an integer, got {text!r}") from None
    if index < 0:
        raise ValueError(f"straggler host must be >= 0, got {text!r}")
    try:
        return index, parse_quantity("straggler slowdown", factor)
    except ValueError:
        raise ValueError(f"straggler slowdown must be a positive number, got {text!r}") from None


def arg_type(parse: Callable, *names) -> Callable[[str], object]:
    """An argparse ``type`` that keeps our message (argparse would print a generic one)."""

    def convert(text: str):
        try:
            return parse(*names, text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = parse.__name__
    return convert


def error_line(prog: str, message: object, *, as_json: bool = False, code: int = 2) -> str:
    """The one line a command ends with on stderr: ``ringsim plan: error: ...``, or under
    ``--json`` one JSON object (``{"error": ..., "command": ..., "exit_code": ...}``), so a
    script that asked for JSON parses the failure too."""
    text = str(message).replace("\n", " ")
    if as_json:
        import json

        body = {"error": text, "command": prog, "exit_code": code}
        return json.dumps(body, ensure_ascii=False) + "\n"
    return f"{prog}: error: {text}\n"


def wants_json(argv: object) -> bool:
    """Whether a command line asks for JSON output (its errors are JSON too)."""
    return isinstance(argv, list | tuple) and "--json" in argv


class Parser(argparse.ArgumentParser):
    """Errors in one line: ``ringsim simulate: error: ...`` (usage only with --help); JSON
    (``error_line``) when the command line has ``--json``."""

    def parse_known_args(self, args=None, namespace=None):
        self.json_errors = wants_json(list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        line = f"{message} (see {self.prog} --help)"
        self.exit(2, error_line(self.prog, line, as_json=getattr(self, "json_errors", False)))


def parse_tile(name: str, text: str) -> tuple[int, int | None]:
    """``"128x64"`` -> (128, 64); ``"128"`` -> (128, None) (square)."""
    parts = str(text).lower().split("x")
    if len(parts) > 2:
        raise ValueError(f"{name} must be M or MxN (positive integers), got {text!r}")
    try:
        sizes = [parse_positive_int(name, part) for part in parts]
    except ValueError:
        raise ValueError(f"{name} must be M or MxN (positive integers), got {text!r}") from None
    return sizes[0], sizes[1] if len(sizes) == 2 else None


def parse_rate(name: str, text: str) -> str | float:
    """A per-kind rate: FLOP/s with a suffix (e.g. 156T) or a precision name (tf32, fp8, bf16,
    fp16, fp32: relative to the hardware, see ``ringsim.timer.machine.kernel_model.kind_rate``)."""
    if text in ("tf32", "fp8", "bf16", "fp16", "fp32"):
        return text
    try:
        return parse_quantity(name, text)
    except ValueError:
        raise ValueError(
            f"{name} must be FLOP/s (e.g. 156T) or one of tf32, fp8, bf16, fp16, fp32, got {text!r}"
        ) from None


def parse_fraction(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not -1.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [-1, 1], got {text!r}")
    return value
