"""Numbers a lesson states in words, and the numbers its code computes or prints.

``tests/test_lesson_numbers.py`` holds every lesson to one rule: a number written in the prose
(markdown cells, figure captions, the folded "Predict first" answers) or typed by hand inside
generated text (the literal parts of ``Exercise``, ``Markdown`` and ``caption`` calls) must be
*accounted for*: printed by one of the lesson's cells, written as a literal in its code (an
input such as ``hosts=8`` or ``8 * 4096``), or listed in the test as a given (a datasheet rate,
a paper's quote) with the reason. A number the code does not back up fails the test, so prose
cannot drift from the output it describes.

What counts as a number: digits (``1,040``, ``24.4K``, ``0.8``, ``31%``, ``1.6x``), powers
(``2^{-8}``, ``10^{-4}``), and the quantity words a claim hides in ("three quarters", "a few
GFLOP/s"). Small integers without a unit or multiplier are structure (step 3, two matmuls), and
names (A100, FlashAttention-2, Llama 3, fp32, Figure 6.1, lesson 7, Table 2) are not numbers.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass

# -- finding the prose -------------------------------------------------------------------------

PROSE_CALLS = {"Exercise", "Markdown", "caption"}


def literal_prose(source: str) -> list[str]:
    """The hand-typed text of a code cell: the literal parts of ``Exercise(...)``,
    ``Markdown(...)`` and ``caption(...)`` arguments (f-string fields are computed, skipped)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    texts: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in PROSE_CALLS:
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                texts.extend(_literal_parts(arg))
    return texts


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _literal_parts(node: ast.expr) -> list[str]:
    parts: list[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            parts.append(sub.value)
        elif isinstance(sub, ast.FormattedValue):
            # the format spec of a field ('.2f') is no prose; ast.walk would visit it
            if sub.format_spec is not None:
                for spec in ast.walk(sub.format_spec):
                    if isinstance(spec, ast.Constant):
                        spec.value = ""
    return [p for p in parts if p]


# literals that style a figure, not inputs a lesson chooses: skipped by code_numbers
STYLE_KEYWORDS = set(
    "lw linewidth ms markersize alpha fontsize figsize width height zorder pad "
    "rotation capsize labelspacing ncol interval_ms xytext bbox_to_anchor ylim xlim "
    "dpi height_ratios width_ratios linespacing mutation_scale shrinkA shrinkB size s "
    "wrap hspace wspace radius".split()
)
PLOT_CALLS = set(
    "plot loglog semilogx semilogy bar barh text annotate axhline axvline axhspan "
    "axvspan legend subplots figure add_gridspec imshow errorbar scatter step "
    "Rectangle Circle FancyArrowPatch colorbar fill fill_between add_patch "
    "tight_layout suptitle get_cmap colours fill_betweenx set_position "
    "subplots_adjust wrap Patch".split()
)


def code_numbers(source: str) -> set[float]:
    """Numeric literals of a code cell and the values of constant expressions (``8 * 4096``,
    ``2**20``): the inputs a lesson chooses, which its prose may name. Literals that only
    style a figure (``lw=0.8``, ``figsize=(8, 3)``, anything inside ``ax.text(...)``) are left
    out: a caption's number must not be backed by a line width."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in PLOT_CALLS or name.startswith("set_"):
                skip |= {id(sub) for sub in ast.walk(node)}
            for keyword in node.keywords:
                if keyword.arg in STYLE_KEYWORDS:
                    skip |= {id(sub) for sub in ast.walk(keyword.value)}
    values: set[float] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            if not isinstance(node.value, bool):
                values.add(float(node.value))
        elif isinstance(node, ast.BinOp | ast.UnaryOp):
            try:
                value = eval(compile(ast.Expression(node), "<const>", "eval"), {"__builtins__": {}})
            except Exception:  # not a constant expression
                continue
            if isinstance(value, int | float) and not isinstance(value, bool):
                values.add(float(value))
    return values


@dataclass
class Lesson:
    """One executed lesson: its prose (what a reader is told) and its evidence."""

    stem: str
    prose: list[tuple[str, str]]  # (where, text): "markdown", "exercise/markdown literal"
    printed: str  # everything its cells printed (streams and generated markdown)
    code_values: set[float]


def read_lesson(stem: str, notebook: dict) -> Lesson:
    prose, printed, values = [], [], set()
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            prose.append(("markdown", source))
            continue
        if cell["cell_type"] != "code":
            continue
        prose += [("literal", text) for text in literal_prose(source)]
        values |= code_numbers(source)
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                printed.append("".join(out["text"]))
            elif "text/markdown" in out.get("data", {}):
                printed.append("".join(out["data"]["text/markdown"]))
            elif "text/plain" in out.get("data", {}) and "image/png" not in out["data"]:
                printed.append("".join(out["data"]["text/plain"]))
    return Lesson(stem, prose, "\n".join(printed), values)


def load(path) -> dict:
    return json.loads(path.read_text())


# -- finding the numbers -----------------------------------------------------------------------

SCALES = {"K": (1e3, 2**10), "M": (1e6, 2**20), "G": (1e9, 2**30), "T": (1e12, 2**40)}
WORDS = {"two": 2, "three": 3, "four": 4, "five": 5}
FRACTIONS = {"halves": 2, "thirds": 3, "quarters": 4, "fifths": 5}
APPROX = re.compile(r"(about|around|roughly|nearly|almost|close to|≈|~|\\approx|some)\s*\$?\s*$")
ABOVE = re.compile(r"(over|above|more than|at least|beyond|exceeds?)\s*\$?\s*$")
BELOW = re.compile(r"(under|below|less than|at most|within|up to)\s*\$?\s*$")

NUMBER = re.compile(
    r"(?<![\w.\-/#])"  # not part of a name (A100, FA-2, x16, #55, v4) or a path
    r"(?P<num>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?"
    r"(?:\s?(?P<suffix>[KMGT])(?![A-Za-z]))?"
    r"(?P<unit>\s?(?:%|\\%|x(?![A-Za-z\d])|×|\\times(?!\s*\d)|times\b|-fold))?"
)
POWER = re.compile(r"(?P<base>10|2)\s*\^\s*\{?\s*(?P<exp>-?\d+)\s*\}?")
QUANTITY_WORDS = re.compile(
    r"\b(?P<count>two|three|four|five)[\s-](?P<part>halves|thirds|quarters|fifths)\b"
    r"|\b(?P<vague>a few|several|many)\s+(?P<unit>[KMGT]?FLOP/s|[KMGT]B/s|[KMGT]?B|ms|µs|"
    r"tokens|percent)\b",
    re.IGNORECASE,
)
# words after which a number names something rather than measures it (Figure 6.1, lesson 7)
NAMES = re.compile(
    r"(Figure|Fig\.|Figures|Table|Tables|Animation|lesson|lessons|Lesson|Section|Sec\.|"
    r"Exercise|exercise|issue|Algorithm|Appendix|Llama|Llama-\d|version|arXiv:|Eq\.|"
    r"Figures \d+\.\d+ and)[\s~*]*$"
)
# ... and after which a plain integer is an index or a count of things, not a measurement
INDEX = re.compile(
    r"(step|steps|host|hosts|rank|ranks|block|blocks|chunk|chunks|row|rows|column|GPU|GPUs|"
    r"node|nodes|group|TPU|head|heads|query|PCIe|Gen|NDR|x|\u00d7)[\s~]*$"
)
SKIP_SPANS = [
    re.compile(r"`[^`]*`"),  # inline code: identifiers, file names, commands
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"<[^>]+>"),  # HTML tags
    re.compile(r"https?://\S+"),
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),  # dates
    re.compile(r"\b\d+(?:\.\d+)?[BbM]\b(?= (?:model|LLaMA|GQA|parameter|dense|Llama))"),
    re.compile(r"\b(?:19|20)\d{2}\b(?![,.]?\d)(?!\s?[KMGT%x])"),  # years
    re.compile(r"\b\d+(?:\.\d+)?[bB]\b"),  # model sizes: 7B, 70b, 1.3B
    re.compile(r"\b\d+\s?-?bit\b"),
    re.compile(r"\b\d+(?:\.\d+)?\s?(?:Gb/s|Gbps)\b"),  # NIC names: NDR 400 Gb/s
]


@dataclass(frozen=True)
class Stated:
    """A number as the prose states it: ``text`` as written, ``values`` the readings it may
    have (``1M`` is 10^6 or 2^20), ``digits`` the resolution it was written with, ``approx``
    whether it says "about"."""

    text: str
    values: tuple[float, ...]
    resolution: float
    approx: bool
    context: str
    kind: str = "plain"  # plain, percent, multiple, scaled, power, fraction, vague
    bound: str = ""  # "above": the prose says "over X"; "below": "under X"


def stated_numbers(text: str) -> list[Stated]:
    """Every number in ``text`` that states a quantity (see the module docstring)."""
    clean = "\n".join(
        "" if line.lstrip().startswith("#") else line for line in text.splitlines()
    )  # headings name lessons and sections
    clean = clean.replace("{,}", ",")  # TeX's thousands separator: 65{,}536
    for span in SKIP_SPANS:
        clean = span.sub(lambda m: " " * len(m.group(0)), clean)
    found: list[Stated] = []
    taken: list[tuple[int, int]] = []
    for m in POWER.finditer(clean):
        base, exp = int(m["base"]), int(m["exp"])
        if base == 2 and exp >= 0 and exp < 10:  # small powers of two are structure
            continue
        value = float(base) ** exp
        found.append(Stated(m.group(0), (value,), 0.0, True, _context(clean, m), "power"))
        taken.append(m.span())
    for m in QUANTITY_WORDS.finditer(clean):
        if m["count"]:
            value = WORDS[m["count"].lower()] / FRACTIONS[m["part"].lower()]
            found.append(Stated(m.group(0), (value,), 0.0, True, _context(clean, m), "fraction"))
        else:  # "a few GFLOP/s": a number the reader cannot check
            found.append(Stated(m.group(0), (math.nan,), 0.0, True, _context(clean, m), "vague"))
        taken.append(m.span())
    for m in NUMBER.finditer(clean):
        if any(a <= m.start() < b for a, b in taken):
            continue
        before = clean[max(0, m.start() - 24) : m.start()]
        after = clean[m.end() : m.end() + 2]
        digits = m["num"].replace(",", "")
        frac = m["frac"] or ""
        suffix, unit = m["suffix"], (m["unit"] or "").strip()
        mantissa = float(digits + frac)
        if after[:1].isalpha() and not suffix and not unit:
            continue  # 2D, 4th, 8xH800
        if NAMES.search(before):
            continue
        if not frac and not suffix and not unit:
            if mantissa < 10 or INDEX.search(before):
                continue
            if re.search(r"[\^_]\s*\{?\s*$", before):  # an exponent or a subscript
                continue
        if frac:
            resolution = 10.0 ** -len(frac[1:])
        else:  # "140K", "250 GB": the trailing zeros are not significant
            resolution = 10.0 ** (len(digits) - len(digits.rstrip("0"))) if mantissa else 1.0
        if suffix:
            values = tuple(mantissa * s for s in SCALES[suffix])
            resolution *= SCALES[suffix][0]
        else:
            values = (mantissa,)
        approx = bool(APPROX.search(before))
        if "%" in unit:
            kind = "percent"
        elif unit:
            kind = "multiple"
        elif suffix:
            kind = "scaled"
        else:
            kind = "plain"
        context = _context(clean, m)
        bound = "above" if ABOVE.search(before) else "below" if BELOW.search(before) else ""
        found.append(Stated(m.group(0).strip(), values, resolution, approx, context, kind, bound))
    return found


def _context(text: str, m: re.Match) -> str:
    a, b = max(0, m.start() - 40), min(len(text), m.end() + 30)
    return " ".join(text[a:b].split())


PRINTED = re.compile(
    r"(?<![\w.])(?P<sign>[-+])?(?P<num>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?"
    r"(?:[eE](?P<exp>[-+]?\d+))?(?:\s?(?P<suffix>[KMGT])(?![A-Za-z]))?"
)


def printed_values(text: str) -> set[float]:
    """Every number the cells printed, with its K/M/G reading if it has one."""
    values: set[float] = set()
    for m in PRINTED.finditer(text):
        value = float(m["num"].replace(",", "") + (m["frac"] or ""))
        if m["exp"]:
            value *= 10.0 ** int(m["exp"])
        if m["sign"] == "-":
            value = -value
        values.add(value)
        if m["suffix"]:
            values.update(value * s for s in SCALES[m["suffix"]])
    return values


def candidates(stated: Stated, printed: set[float], code: set[float]) -> set[float]:
    """The values a stated number may be compared with. Code literals are compared as they
    are; a printed value also as a percentage (``0.467`` is 46.7%), a count in a thousands or
    millions column (``690`` in "model (K)" is 690K) or a share of a percentage, as the kind of
    the stated number allows."""
    out = set(code) | set(printed)
    if stated.kind == "percent":
        out |= {v * 100 for v in printed}
    elif stated.kind == "scaled":
        out |= {v * s for v in printed for s in (1e3, 1e6, 1e9)}
    elif stated.kind in ("power", "fraction"):
        out |= {v / 100 for v in printed}
    return out


def accounted(stated: Stated, printed: set[float], code: set[float]) -> bool:
    """Whether a printed or coded value rounds to the stated number: at the resolution it is
    written with (significant digits: "140K" is 135K-145K), within 5% after "about", between
    X and 2X after "over X" (X/2 and X after "under X"), to the same power of ten after
    "about 10^k"."""
    evidence = candidates(stated, printed, code)
    for target in stated.values:
        if not math.isfinite(target):
            return False
        for v in evidence:
            if v == 0 or (v < 0) != (target < 0):
                continue
            if stated.bound == "above" and target <= v <= 2 * target:
                return True
            if stated.bound == "below" and target / 2 <= v <= target:
                return True
            if stated.kind == "power" and stated.text.startswith("10"):
                if stated.approx and 1 / 3 <= abs(v / target) <= 3:
                    return True
                if abs(v - target) <= 0.05 * abs(target):
                    return True
                continue
            tolerance = stated.resolution / 2 * (1 + 1e-9)
            if stated.resolution == 0.0 or stated.approx:
                tolerance = max(tolerance, 0.05 * abs(target))
            if abs(v - target) <= tolerance:
                return True
    return False
