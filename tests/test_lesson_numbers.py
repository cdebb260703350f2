"""Every number a lesson states is one its code computes, prints or chose, and every word
that compares numbers agrees with them.

Checks over the executed lessons (``book/build.py``'s cache, shared with
``tests/test_lessons.py``):

* every number in the prose, the captions, the folded answers and the hand-typed parts of
  generated text (exercise solutions) must be printed by the lesson, be a literal of its code,
  or be listed in ``GIVEN`` below with its source (``tests/prose_numbers.py`` says what counts
  as a number and how "about 1.6 times" is compared with what the cells print);
* ``CLAIMS``: sentences whose number must stay tied to one particular printed value;
* words tested like numbers (``tests/prose_words.py``): a comparison ("much more", "a little
  less", "just above zero") agrees with the ratio in its sentence, or with the printed value
  ``WORD_CLAIMS`` ties it to; a figure part the prose names ("the middle panel") exists; a
  count the prose names ("the six terms") is what the output prints (``COUNT_CLAIMS``); every
  formula renders every character; the notation box lists only symbols the lesson uses; the
  takeaways close the lesson; the references come from one registry.

A change in the library that moves a number fails here instead of leaving the text
contradicting the output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import prose_numbers as pn
import prose_words as pw
import pytest
from conftest import book_build

ROOT = Path(__file__).resolve().parent.parent


build = book_build()

pytestmark = pytest.mark.slow  # executes the lessons (once: the book build shares the cache)
STEMS = [p.stem for p in build.lessons()]

# Numbers a lesson may state without printing them: inputs from datasheets and papers, quotes
# it examines, arithmetic it shows. (lesson -> number as written -> where it comes from)
HARNESS = "measured while the CPU harness was built (lesson 10's appendix tells the story)"
GIVEN: dict[str, dict[str, str]] = {
    "10_simulated_vs_measured": {
        "20": "the pause after the barrier, kernels.distributed.launch.SETTLE_S (its docstring)",
        "50": "kernels.distributed.launch.start_line docstring: 50-78% slow passes before",
        "0.1": HARNESS,
        "1.5": HARNESS,
        "10": HARNESS,
        "0.4": HARNESS,
        "128": HARNESS,
    },
    "11_real_rings": {
        "308": "FlashAttention-2 paper, H100 forward at head dim 128: 308-335 TFLOP/s",
        "989": "H100/H800 SXM dense bf16 peak, NVIDIA datasheet (the h800-nvlink preset)",
    },
}


@pytest.fixture(scope="module", autouse=True)
def _ranks_lessons_first(ring_lessons_executed) -> None:
    """The lessons that start ranks execute in the ranks tests' turn, before the others."""


@pytest.fixture(scope="module", params=STEMS)
def lesson(request) -> pn.Lesson:
    path = build.execute_lesson(build.LESSONS / f"{request.param}.py")
    return pn.read_lesson(request.param, json.loads(path.read_text()))


def test_every_stated_number_is_computed_printed_or_given(lesson: pn.Lesson) -> None:
    printed = pn.printed_values(lesson.printed)
    given = GIVEN.get(lesson.stem, {})
    loose = []
    for where, text in lesson.prose:
        for stated in pn.stated_numbers(text):
            if stated.text in given or pn.accounted(stated, printed, lesson.code_values):
                continue
            loose.append(f"  {stated.text!r} ({where}): ...{stated.context}...")
    assert not loose, (
        f"{lesson.stem}: numbers in the text that no cell prints or computes (print them, "
        "build the sentence from the values, or add them to GIVEN with their source):\n"
        + "\n".join(loose)
    )


# Sentences tied to one printed value: (lesson, the words in the prose, what the output prints).
CLAIMS = [
    ("01_memory_wall", "passes a whole device at about ", "about 141K tokens for a single head"),
    ("01_memory_wall", "one head is\n4.4 TB", "one head, fp32, N = 2**20:     4.4 TB"),
    ("05_overlap", "24,960 tokens (24.4K", "24,960"),
    ("05_overlap", "$c^* = F/B = 1040$ tokens", "F/B = 1,040 tokens"),
    ("06_causal_catch", "four tokens per host", "contiguous: [[0, 1, 2, 3], [4, 5, 6, 7]"),
    ("06_causal_catch", "at $P = 8$, 47%", "8       0.467"),
    ("08_backward", "$2/2.5 = 0.8$ of the", "(0.80x)"),
    ("08_backward", "raises it to $1.2\\times$", "(1.20x)"),
    ("09_strategies_decode", "8 for the model below", "8.0 FLOP per byte"),
    # the cases of issue 25, each tied to the value that settles it
    ("01_memory_wall", "328 GB at $10^6$ tokens (344 GB at $2^{20}$)", "327.7 GB     343.6 GB"),
    ("02_online_softmax", "at most $2^{-8} \\approx 0.39\\%$", "largest 0.389%"),
    ("05_overlap", "$s = 6c$: per device, not for six hosts", "149.5K is 6 x 24.92K"),
    (
        "06_causal_catch",
        "a third of every such step waits",
        "causal zigzag: exposed communication 31%",
    ),
    ("06_causal_catch", "the exposed share of both runs", "full: exposed communication 0%"),
    ("07_memory_context", "the checkpoints are already bf16", "checkpoints (34.4 GB"),
    ("07_memory_context", "counts fp32, twice the", "bf16 1,323,008, fp32 665,600 tokens"),
    ("03_blockwise", "is the whole host and", "a chunk of 64 is the whole host"),
    ("09_strategies_decode", "2^20-token cache", "2^20-token cache: 344 GB"),
    ("10_simulated_vs_measured", "gives the same totals", "differ by 0.000 ms at most"),
    ("12_many_nodes", "The lines under the figure print by", "1.20x its all-NVLink"),
    ("12_many_nodes", "costs memory for the all-to-all's", "438 MB for every $U > 1$"),
    ("12_many_nodes", "leave its PCIe switch", "6 of each GPU's 7 shares leave"),
    # the causal threshold 2F/B with GQA on a DGX H100 NIC, the same in lessons 13 and 14
    ("13_planning", "needs to hide its transfer across the NIC", "2F/B with GQA: 9,890 tokens"),
    ("14_capstone", "so about 10K", "4,945        9,890"),
]

# Sentences that contradicted what the cells print (issue 25) and must not come back.
RETRACTED = [
    ("01_memory_wall", "need 328 GB at 1M tokens", "1M is 2^20 here: 328 GB is at 10^6"),
    ("02_online_softmax", "2^{-9}", "one bf16 rounding is at most 2^-8 = 0.39%"),
    ("05_overlap", "149.5K for 6 hosts", "Table 2's 6c is per device, not six hosts"),
    ("07_memory_context", "e.g. checkpoints in bf16", "the checkpoints are already bf16"),
    ("07_memory_context", "from 1.2M tokens on 8 A100s", "bf16; the paper table is fp32"),
    ("09_strategies_decode", "spread over all its links at once", "a host has one port"),
    ("09_strategies_decode", "cannot split a key/value head, so it stops", "a model choice"),
    ("10_simulated_vs_measured", "a few GFLOP/s", "the committed profile: 76.6 GFLOP/s"),
    ("10_simulated_vs_measured", "Back to [the start]", "lessons 11 to 14 follow"),
    ("12_many_nodes", "about\n1.6 times", "the simulator gives 1.20x"),
    ("12_many_nodes", "three quarters", "6 of 7 shares leave the switch"),
    ("12_many_nodes", "larger $U$ costs memory", "438 MB for every U > 1"),
]


def _texts(stem: str) -> tuple[str, str]:
    """(the lesson's source and markdown, everything its cells printed)."""
    nb = json.loads(build.execute_lesson(build.LESSONS / f"{stem}.py").read_text())
    lesson = pn.read_lesson(stem, nb)
    source = (ROOT / "lessons" / f"{stem}.py").read_text()
    return source + "\n".join(text for _, text in lesson.prose), lesson.printed


@pytest.mark.parametrize(("stem", "prose", "printed"), CLAIMS)
def test_text_states_what_the_cells_compute(stem, prose, printed) -> None:
    text, output = _texts(stem)
    assert prose in text, f"{stem}: the prose no longer says {prose!r}"
    assert printed in output, f"{stem}: the text says {prose!r} but the output lacks {printed!r}"


@pytest.mark.parametrize(("stem", "words", "why"), RETRACTED)
def test_retracted_sentences_stay_out(stem, words, why) -> None:
    text, _ = _texts(stem)
    assert words not in text, f"{stem} says {words!r} again, but {why}"


# ---------------------------------------------------------------------------------------------
# Words tested like numbers
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=STEMS)
def notebook(request) -> tuple[str, dict]:
    return request.param, json.loads(
        build.execute_lesson(build.LESSONS / f"{request.param}.py").read_text()
    )


def _rendered(nb: dict) -> list[tuple[str, str]]:
    """What the reader reads: markdown cells and the markdown cells print, in order."""
    prose = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            prose.append(("markdown", "".join(cell["source"])))
        for out in cell.get("outputs", []):
            if "text/markdown" in out.get("data", {}):
                prose.append(("printed", "".join(out["data"]["text/markdown"])))
    return prose


def _printed(nb: dict) -> str:
    return pn.read_lesson("", nb).printed


# Comparisons whose number is printed elsewhere than their sentence: (lesson, the phrase as
# the prose writes it, a pattern whose first group the output prints). The word must agree
# with that value on the scale of ringsim.views.lessons.words.
WORD_CLAIMS: list[tuple[str, str, str]] = []


def _claimed(stem: str, claim: pw.Claim, printed: str) -> str | None:
    """``None`` if a ``WORD_CLAIMS`` entry ties ``claim`` to a printed value it agrees with."""
    for entry_stem, phrase, pattern in WORD_CLAIMS:
        if entry_stem != stem or phrase.lower() not in claim.sentence.lower():
            continue
        m = re.search(pattern, printed)
        if m is None:
            return f"{phrase!r}: the output no longer prints {pattern!r}"
        value = float(m.group(1))
        return None if pw.agrees(claim, value) else f"{phrase!r} but the output prints {value}"
    return "no number in its sentence and no WORD_CLAIMS entry (say by how much)"


def test_comparison_words_agree_with_their_numbers(notebook) -> None:
    stem, nb = notebook
    printed = _printed(nb)
    wrong = []
    for claim in pw.claims(_rendered(nb)):
        if claim.sentence.rstrip("*_ ").endswith("?"):
            continue  # a question claims nothing
        verdict = pw.judge(claim)
        if verdict == "no number":
            verdict = _claimed(stem, claim, printed)
        if verdict:
            wrong.append(f"  {verdict}: ...{claim.sentence[:140]}...")
    assert not wrong, f"{stem}: comparison words that disagree with the numbers:\n" + "\n".join(
        wrong
    )


@pytest.mark.parametrize(
    ("stem", "words", "why"),
    [
        ("07_memory_context", "less a little", "the 64-host context is more than 8x the 8-host"),
        ("06_causal_catch", "heavy rows with the short", "the busiest zigzag hosts hold no short"),
        ("12_many_nodes", "Much more", "the flat ring on two nodes is 1.20x, a little more"),
        ("13_planning", "far slower", "the best without context parallelism is 1.26x"),
        ("10_simulated_vs_measured", "should be predicted more closely", "a live sample"),
        ("14_capstone", "idles {", "a bar chart of compute and waiting cannot show idle shares"),
        ("09_strategies_decode", "cache of $L$ keys", "L is the layers; the cache holds N keys"),
        ("03_blockwise", "4 d_{model}$ or wider", "the models here have d_ff = 2.7 to 3.5 d_model"),
        ("08_backward", 'h100 = get_hardware("h200-ib")', "an H200 preset named h100"),
        ("07_memory_context", "K tokens (x1e3", "one unit for token counts: 1K = 1,024"),
    ],
)
def test_retracted_comparisons_stay_out(stem, words, why) -> None:
    text, _ = _texts(stem)
    assert words not in text, f"{stem} says {words!r} again, but {why}"


def test_figure_parts_named_in_the_prose_exist(notebook) -> None:
    stem, nb = notebook
    problems = pw.figure_parts(nb)
    assert not problems, f"{stem}: the prose names panels its figures do not have: {problems}"


# Counts the prose names, each against what the output prints: (lesson, the count noun, a
# pattern the printed output matches once per counted thing).
COUNT_CLAIMS = [("11_real_rings", "terms", r"(?m)^\s*\+ [a-z]")]
COUNT_WORDS = {w: i for i, w in enumerate(("zero", "one", "two", "three", "four", "five"))}
COUNT_WORDS |= {"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


@pytest.mark.parametrize(("stem", "noun", "pattern"), COUNT_CLAIMS)
def test_counts_named_in_the_prose_are_printed(stem, noun, pattern) -> None:
    nb = json.loads(build.execute_lesson(build.LESSONS / f"{stem}.py").read_text())
    counted = len(re.findall(pattern, _printed(nb)))
    assert counted > 0, f"{stem}: the output no longer prints {pattern!r}"
    text = " ".join(t for _, t in _rendered(nb))
    stated = re.findall(rf"\b(\w+) {noun}\b", text)
    numbers = [COUNT_WORDS.get(w.lower(), int(w) if w.isdigit() else None) for w in stated]
    numbers = [n for n in numbers if n is not None]
    assert numbers, f"{stem}: the prose never counts its {noun}"
    assert set(numbers) == {counted}, (
        f"{stem}: the prose counts {numbers} {noun}, {counted} printed"
    )


def test_every_formula_renders_every_character(notebook) -> None:
    stem, nb = notebook
    problems = [p for _, text in _rendered(nb) for p in pw.math_problems(text)]
    assert not problems, f"{stem}: formulas that lose characters: {problems}"


# symbols a lesson must not use in a formula: one meaning per symbol (lessons/notation.md)
NOT_SYMBOLS = {"h": "heads are $H$, the hidden size $d_{model}$"}


def test_formulas_use_the_books_symbols(notebook) -> None:
    stem, nb = notebook
    wrong = []
    for _, text in _rendered(nb):
        for m in pw.MATH.finditer(re.sub(r"`[^`]*`", " ", text)):
            tex = re.sub(r"\\[A-Za-z]+|\{[^{}]*\}|_\w", " ", m.group(1) or m.group(2))
            for symbol, why in NOT_SYMBOLS.items():
                if re.search(rf"(?<![A-Za-z]){symbol}(?![A-Za-z])", tex):
                    wrong.append(f"${m.group(0)}$: {why}")
    assert not wrong, f"{stem}: {wrong}"


def _notation_symbols(nb: dict) -> list[str]:
    """The symbols of the lesson's notation box (the first cell printing it)."""
    for _, text in _rendered(nb):
        if "Notation and terms used in this lesson" in text:
            return re.findall(r"^\| \$(.+?)\$ \|", text, re.M)
    return []


def _uses(symbol: str, math: str) -> bool:
    """Whether ``math`` (the lesson's formulas) writes ``symbol`` (a key of ``NOTATION``).
    Letters written side by side are a product ($4c^2dH$ writes c, d and H); a symbol with a
    subscript ($H_{kv}$) is not the bare letter."""
    if len(symbol) > 1:
        return symbol in math
    from ringsim.views.lessons import NOTATION

    for longer in sorted((s for s in NOTATION if len(s) > 1), key=len, reverse=True):
        math = math.replace(longer, " ")
    math = re.sub(r"\\[A-Za-z]+(\{[^{}]*\})?", " ", math)  # \mathrm{lse}, \log, \cdot
    math = re.sub(r"[_^]\{[^{}]*\}|[_^]\w", " ", math)  # sub- and superscripts
    return symbol in math


def test_the_notation_box_lists_only_symbols_the_lesson_uses(notebook) -> None:
    stem, nb = notebook
    prose = "\n".join(
        t for w, t in _rendered(nb) if "Notation and terms used in this lesson" not in t
    )
    math = " ".join(m.group(0) for m in pw.MATH.finditer(prose))
    unused = [
        symbol
        for symbol in _notation_symbols(nb)
        if not any(_uses(part.strip(), math) for part in symbol.split(","))
    ]
    assert not unused, f"{stem}: the notation box defines symbols the lesson never writes: {unused}"


def _box_terms(nb: dict) -> list[str]:
    """The terms of the lesson's notation box (the rows of its second table)."""
    from ringsim.views.lessons import GLOSSARY

    for _, text in _rendered(nb):
        if "Notation and terms used in this lesson" in text:
            rows = re.findall(r"^\| (.+?) \| ", text, re.M)
            return [row for row in rows if row in GLOSSARY]
    return []


# the ways a lesson writes a term besides its names (a pattern each)
TERM_FORMS = {
    "1M, 1K (tokens)": r"\d+(?:\.\d+)?\s?[KM]\b",
    "FA2, FA3 (FA)": r"FlashAttention",
    "FFN": r"feed-forward",
    "checkpointing": r"checkpoint",
    "KV cache (KV)": r"KV cache|key/value cache",
    "it/s": r"iterations per second",
    "DP, TP, PP": r"\b[TDP]P\d",
    "TransformerEngine (TE)": r"Transformer ?Engine",
}


def test_the_notation_box_lists_only_terms_the_lesson_uses(notebook) -> None:
    """Every term of the box ("GQA, MHA", "context parallelism (CP)") is written somewhere in
    the lesson (its prose or what it prints), by one of its names (or a ``TERM_FORMS``)."""
    stem, nb = notebook
    prose = "\n".join(
        t for _, t in _rendered(nb) if "Notation and terms used in this lesson" not in t
    )
    printed = _printed(nb)
    box = "Notation and terms used in this lesson"
    if box in printed:  # the box itself does not count
        start = printed.index(box)
        printed = printed[:start] + printed[printed.index("</details>", start) :]
    prose += "\n" + printed
    unused = []
    for term in _box_terms(nb):
        names = term.replace("(", ",").replace(")", "").split(",")
        patterns = [rf"(?<![\w-]){re.escape(n.strip())}(?![\w-])" for n in names if n.strip()]
        patterns += [TERM_FORMS[term]] if term in TERM_FORMS else []
        if not any(re.search(p, prose) for p in patterns):
            unused.append(term)
    assert not unused, f"{stem}: the notation box defines terms the lesson never uses: {unused}"


def test_takeaways_close_the_lesson(notebook) -> None:
    """After "## Takeaways" (with its "Next:") only the exercises, the references and an
    appendix follow: no further section of the lesson."""
    stem, nb = notebook
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    at = [i for i, text in enumerate(cells) if "## Takeaways" in text]
    assert len(at) == 1, f"{stem}: {len(at)} takeaways sections"
    assert "Next:" in cells[at[0]] or "Back to" in cells[at[0]], f"{stem}: takeaways say what next"
    later = [
        line
        for text in cells[at[0] + 1 :]
        for line in text.splitlines()
        if line.startswith("## ") and not line.startswith("## Appendix")
    ]
    assert not later, f"{stem}: sections after the takeaways: {later}"


REFERENCE_LINE = re.compile(r"^- [^\[\]]+\. \[[^\]]+\]\(https?://[^)]+\)\. [^\n]*$")


def test_references_come_from_the_registry(notebook) -> None:
    """Every "## References" section is ``references()``'s: one per lesson, each line
    "- Authors. [Title](link). Year." (the registry ``REFERENCES``)."""
    stem, nb = notebook
    sections = [t for _, t in _rendered(nb) if t.lstrip().startswith("## References")]
    assert len(sections) == 1, f"{stem}: {len(sections)} references sections"
    lines = [line for line in sections[0].splitlines()[1:] if line.strip()]
    odd = [line for line in lines if not REFERENCE_LINE.match(line)]
    assert lines and not odd, f"{stem}: references not in the registry's form: {odd}"


def test_printed_values_are_whole(notebook) -> None:
    """No printed line cuts a value short (an unclosed "{'cpus': 2, 'load_av")."""
    stem, nb = notebook
    cut = [line for line in _printed(nb).splitlines() if line.count("{") > line.count("}")]
    assert not cut, f"{stem}: printed lines cut short: {cut[:3]}"
