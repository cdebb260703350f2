"""Words a lesson states, checked like its numbers (``tests/test_lesson_numbers.py``).

* **comparisons**: "much more", "far slower", "a little less", "less a little", "just above
  zero" claim a ratio or a size. The scale is the one lessons build their words with
  (``ringsim.views.lessons.words``): "a little" is under 1.25x, "much" from 1.5x on, "near
  zero" under 2%. A comparison beside a ratio (``1.20x``, ``9.5 times``, ``+26%``) in its
  sentence must agree with it; one without a number in its sentence must be tied to a
  printed value in the test's ``WORD_CLAIMS``.
* **figure parts**: "the middle panel", "the left panel", "the second panel" must exist in
  the figure they follow (each figure's report carries its panels).
* **math**: a formula must render every character: no unescaped ``%`` (TeX's comment: it
  deletes the rest of the formula) and no ``16,384`` (TeX sets ``16, 384``; write ``16{,}384``).

The prose is what the reader sees: markdown cells and the markdown the cells print (captions,
exercise solutions), with their computed numbers in place.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from dataclasses import dataclass

from ringsim.views.lessons import words

COMPARATIVES = (
    "more less slower faster larger smaller higher lower bigger greater fewer longer shorter "
    "better worse cheaper wider narrower sooner later above below under over"
).split()
_ADVERBS = {a: kind for kind, adverbs in words.DEGREES.items() for a in adverbs}
_ADVERB = "|".join(sorted((re.escape(a) for a in _ADVERBS), key=len, reverse=True))
_COMPARATIVE = "|".join(COMPARATIVES)
COMPARISON = re.compile(
    rf"(?<!how )\b(?P<adverb>{_ADVERB})\s+(?P<word>{_COMPARATIVE})\b"
    rf"|\b(?P<word2>{_COMPARATIVE})\s+(?P<adverb2>a little|slightly|a bit)\b",
    re.IGNORECASE,
)
ZERO = re.compile("|".join(re.escape(w) for w in words.ZERO_WORDS), re.IGNORECASE)
RATIO = re.compile(
    r"(?<![\w.])(?P<num>\d+(?:\.\d+)?)\s?(?:x|×|\\times|times)(?![A-Za-z\d])"
    r"|(?P<sign>[+\-−])(?P<pct>\d+(?:\.\d+)?)\s?(?:\\?%|percent)"
)
SHARE = re.compile(r"(?<![\w.])(?P<num>\d+(?:\.\d+)?)\s?(?P<pct>\\?%)?")
SKIP = [re.compile(p) for p in (r"`[^`]*`", r"\]\([^)]*\)", r"<[^>]+>", r"https?://\S+")]


@dataclass(frozen=True)
class Claim:
    """A comparison word in the prose: ``kind`` ("same", "little", "much", "zero"), the
    ``phrase`` as written, its ``sentence``, and where it stands."""

    kind: str
    phrase: str
    sentence: str
    where: str


def clean(text: str) -> str:
    """``text`` without code spans, link targets, tags and URLs (names, not claims)."""
    for pattern in SKIP:
        text = pattern.sub(" ", text)
    return text


def sentences(text: str) -> list[str]:
    """Sentences of ``text`` (split at ". ", "? ", "! ", ":" before a capital, blank lines)."""
    text = re.sub(r"\s+", " ", clean(text))
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z*(])|\n\s*\n", text)
    return [p.strip() for p in parts if p.strip()]


def claims(prose: list[tuple[str, str]]) -> list[Claim]:
    """Every comparison phrase of the rendered prose."""
    found = []
    for where, text in prose:
        for sentence in sentences(text):
            for m in COMPARISON.finditer(sentence):
                adverb = (m["adverb"] or m["adverb2"]).lower()
                found.append(Claim(_ADVERBS[adverb], m.group(0), sentence, where))
            for m in ZERO.finditer(sentence):
                found.append(Claim("zero", m.group(0), sentence, where))
    return found


def ratios(sentence: str) -> list[float]:
    """The ratios a sentence states: ``1.20x``, ``9.5 times``, ``+26%`` (as 1.26)."""
    out = []
    for m in RATIO.finditer(sentence):
        if m["num"]:
            out.append(float(m["num"]))
        else:
            sign = -1 if m["sign"] in "-−" else 1
            out.append(1 + sign * float(m["pct"]) / 100)
    return [r for r in out if r > 0]


def shares(sentence: str) -> list[float]:
    """Every number of a sentence as a share: ``0.4%`` is 0.004, ``0.031`` is 0.031."""
    out = []
    for m in SHARE.finditer(sentence):
        value = float(m["num"])
        out.append(value / 100 if m["pct"] else value)
    return out


def agrees(claim: Claim, value: float) -> bool:
    """Whether a ratio (or, for "zero" words, a share) agrees with the claim's word."""
    if claim.kind == "zero":
        above = "above" in claim.phrase.lower()
        return (value > 0 if above else value >= 0) and value < words.NEAR_ZERO
    kind = words.degree(value)
    if claim.kind == "little":
        return kind in ("same", "little")
    return kind == claim.kind


def judge(claim: Claim) -> str | None:
    """``None`` if the claim's sentence backs it; else why not. A sentence without a number
    to judge returns ``"no number"`` (the test then wants a ``WORD_CLAIMS`` entry)."""
    values = shares(claim.sentence) if claim.kind == "zero" else ratios(claim.sentence)
    if not values:
        return "no number"
    if any(agrees(claim, v) for v in values):
        return None
    return f"{claim.phrase!r} but the sentence states {values}"


# -- figures -----------------------------------------------------------------------------------

PANEL = re.compile(
    r"\b(?:the\s+)?(?P<where>left|middle|right|top|bottom|upper|lower|first|second|third|"
    r"fourth|fifth|last)\s+panel\b",
    re.IGNORECASE,
)
ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5}


def png_report(data: str) -> dict | None:
    """The ``ringsim`` text chunk of a base64 PNG (the figure's report), or None."""
    raw = base64.b64decode(data)
    pos = 8
    while pos < len(raw):
        length = int.from_bytes(raw[pos : pos + 4], "big")
        kind = raw[pos + 4 : pos + 8]
        body = raw[pos + 8 : pos + 8 + length]
        if kind == b"tEXt" and body.startswith(b"ringsim\0"):
            return json.loads(body.split(b"\0", 1)[1])
        if kind == b"zTXt" and body.startswith(b"ringsim\0"):
            return json.loads(zlib.decompress(body.split(b"\0", 1)[1][1:]))
        pos += 12 + length
    return None


def svg_report(svg: str) -> dict | None:
    """The report an SVG figure carries in its ``<dc:description>``, or None."""
    import html

    m = re.search(r"<dc:description>(.*?)</dc:description>", svg, re.S)
    return json.loads(html.unescape(m.group(1))) if m else None


def output_report(output: dict) -> dict | None:
    data = output.get("data", {})
    if "image/svg+xml" in data:
        return svg_report("".join(data["image/svg+xml"]))
    if "image/png" in data:
        return png_report(data["image/png"])
    return None


def panel_exists(where: str, panels: dict) -> bool:
    """Whether "the ``where`` panel" names a panel of a figure with ``panels``."""
    where = where.lower()
    rows, cols, count = panels["rows"], panels["cols"], panels["count"]
    if where == "middle":
        return count >= 3 and ((cols >= 3 and cols % 2 == 1) or (rows >= 3 and rows % 2 == 1))
    if where in ("left", "right"):
        return cols >= 2
    if where in ("top", "bottom", "upper", "lower"):
        return rows >= 2
    if where == "last":
        return count >= 2
    return count >= ORDINALS[where]


def figure_parts(notebook: dict) -> list[str]:
    """Prose naming a panel the figure before it does not have."""
    problems, report = [], None
    for cell in notebook["cells"]:
        texts = []
        if cell["cell_type"] == "markdown":
            texts.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            found = output_report(out)
            if found is not None:
                report = found
            if "text/markdown" in out.get("data", {}):
                texts.append("".join(out["data"]["text/markdown"]))
        for text in texts:
            for m in PANEL.finditer(clean(text)):
                if report is None or "panels" not in report:
                    problems.append(f"{m.group(0)!r} before any figure that reports its panels")
                elif not panel_exists(m["where"], report["panels"]):
                    problems.append(f"{m.group(0)!r} of a figure with {report['panels']}")
    return problems


# -- math --------------------------------------------------------------------------------------

MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$", re.S)
PERCENT = re.compile(r"(?<!\\)%")
THOUSANDS = re.compile(r"\d,\s?\d{3}(?!\d)")


def math_problems(text: str) -> list[str]:
    """Formulas of ``text`` that would not render every character."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"`[^`]*`", " ", text)
    problems = []
    for m in MATH.finditer(text):
        tex = m.group(1) or m.group(2)
        if PERCENT.search(tex):
            problems.append(f"unescaped % in ${tex}$ (TeX drops the rest: write \\%)")
        if THOUSANDS.search(tex):
            problems.append(f"${tex}$: TeX sets 1,234 as '1, 234' (write 1{{,}}234)")
    return problems
