"""The words a lesson compares numbers with, chosen from the numbers.

A sentence such as "much more", "a little less" or "just above zero" is a claim about a
ratio or a size, as much as a printed "1.20x" is. Lessons build such words with ``compared``
(and ``near_zero``) from the values they print, and ``tests/test_lesson_numbers.py`` holds
every hand-typed one to the same scale (``DEGREES``, ``ZERO_WORDS``): a comparison word beside
a number must agree with it.

The scale, for ``ratio = larger / smaller``:

* under ``SAME`` (5%): "about the same";
* under ``LITTLE`` (1.25x): "a little" (also "slightly", "a bit");
* under ``MUCH`` (1.5x): the plain word ("more", "slower");
* from ``MUCH`` on: "much" (also "far", "many times").
"""

from __future__ import annotations

import math

SAME = 1.05
LITTLE = 1.25
MUCH = 1.5
NEAR_ZERO = 0.02  # a share (of a run, of a device) this small is "near zero"

# the adverbs the test reads in prose, by the degree they claim
DEGREES = {
    "same": ("about the same", "roughly the same", "nearly the same"),
    "little": ("a little", "slightly", "a bit", "marginally"),
    "much": ("much", "far", "many times", "vastly"),
}
ZERO_WORDS = ("just above zero", "near zero", "close to zero", "almost zero", "nearly zero")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
NUMBER_WORDS += ("ten", "eleven", "twelve")


def degree(ratio: float) -> str:
    """``"same"``, ``"little"``, ``"plain"`` or ``"much"`` for a ratio (either way round)."""
    if not math.isfinite(ratio) or ratio <= 0:
        raise ValueError(f"ratio must be a positive finite number, got {ratio!r}")
    r = max(ratio, 1 / ratio)
    if r < SAME:
        return "same"
    if r < LITTLE:
        return "little"
    if r < MUCH:
        return "plain"
    return "much"


def times(ratio: float, digits: int = 2) -> str:
    """``1.2 -> "1.20x"``: a ratio as the lessons print it."""
    return f"{ratio:.{digits}f}x"


def compared(
    value: float,
    reference: float,
    *,
    more: str = "more",
    less: str = "less",
    digits: int = 2,
) -> str:
    """How ``value`` compares with ``reference`` in words and its ratio, e.g. ``"a little
    slower (1.20x)"``, ``"much less (0.25x)"``, ``"about the same (1.02x)"``: the adverb from
    ``degree``, the direction from the sign (``more``/``less`` name it: "slower",
    "faster")."""
    if reference == 0 or not (math.isfinite(value) and math.isfinite(reference)):
        raise ValueError(f"cannot compare {value!r} with {reference!r}")
    ratio = value / reference
    kind = degree(ratio)
    if kind == "same":
        return f"about the same ({times(ratio, digits)})"
    word = more if ratio > 1 else less
    adverb = {"little": "a little ", "plain": "", "much": "much "}[kind]
    return f"{adverb}{word} ({times(ratio, digits)})"


def near_zero(share: float, *, digits: int = 1) -> str:
    """A share (0..1) in words and as a percentage: ``"zero (0.0%)"``, ``"just above zero
    (0.4%)"`` or just ``"3.1%"``."""
    shown = round(100 * share, digits)
    if shown == 0:
        return f"zero ({shown:.{digits}f}%)"
    if share < NEAR_ZERO:
        return f"just above zero ({shown:.{digits}f}%)"
    return f"{shown:.{digits}f}%"


def number_word(n: int) -> str:
    """``4 -> "four"`` (up to twelve, digits after): counts of things a sentence names."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)
