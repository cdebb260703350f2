"""How a lesson runs: its size knob and whether the static book is being built.

* ``lesson_scale()`` reads ``RINGSIM_LESSON_SCALE`` (default 1): lessons multiply their sizes
  by it, so ``RINGSIM_LESSON_SCALE=8`` gives bigger, slower and smoother runs.
* ``static_book()`` is true while the book is built: cells still create their widgets, but a
  static page has no kernel to drive them, so they show an animation instead.
"""

from __future__ import annotations

import os

import numpy as np

SCALE_ENV = "RINGSIM_LESSON_SCALE"
STATIC_ENV = "RINGSIM_STATIC_BOOK"


def lesson_scale() -> float:
    """The size multiplier from ``RINGSIM_LESSON_SCALE`` (a positive number, default 1)."""
    text = os.environ.get(SCALE_ENV, "1")
    try:
        scale = float(text)
    except ValueError:
        scale = float("nan")
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"{SCALE_ENV} must be a positive number, got {text!r}")
    return scale


def scaled(n: int, *, multiple: int = 1) -> int:
    """``n`` times ``lesson_scale()``, rounded to a multiple of ``multiple`` (at least one)."""
    if n <= 0 or multiple <= 0:
        raise ValueError(f"n and multiple must be positive, got n={n}, multiple={multiple}")
    return max(multiple, round(n * lesson_scale() / multiple) * multiple)


def static_book() -> bool:
    """True while ``book/build.py`` executes the lessons for the static website."""
    return os.environ.get(STATIC_ENV, "") == "1"
