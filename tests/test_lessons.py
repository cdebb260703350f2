"""Every lesson executes top to bottom, and has the parts a lesson promises.

Execution goes through ``book/build.py``'s cache (keyed by the lesson, the library sources and
``results/``), so when ``tests/test_book.py`` has already built the book, nothing runs twice;
run alone, this file executes each lesson itself. A failing cell fails the test with the
cell's traceback.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
from conftest import book_build

pytestmark = pytest.mark.slow  # executes every lesson (once: the book build shares the cache)
ROOT = Path(__file__).resolve().parent.parent
# Lessons run in seconds, lessons 10 (a real ring: ~40 s alone, 140 s on a machine busy with
# other work) and 11 in a minute or two; this only catches a runaway one, on any machine
MAX_LESSON_SECONDS = 900


build = book_build()
LESSONS = build.lessons()


def test_the_index_claims_no_runtime_it_cannot_keep() -> None:
    """The index once promised "well under a minute each" while lessons 10 and 11 took about
    two minutes; it now says which lessons take longer."""
    index = (ROOT / "lessons" / "index.md").read_text()
    assert "well under a minute" not in index
    assert "lessons 10" in index and "take a minute or two" in index


def test_the_lessons_are_numbered_from_one_without_gaps() -> None:
    numbers = [int(p.name[:2]) for p in LESSONS]
    assert numbers[:10] == list(range(1, 11)), numbers
    assert numbers == list(range(1, len(numbers) + 1)), f"a gap in the lesson numbers: {numbers}"
    assert (ROOT / "lessons" / "index.md").exists()


@pytest.fixture(scope="module", params=LESSONS, ids=lambda p: p.stem)
def executed(request, ranks_lock) -> dict:
    from conftest import RING_LESSONS

    lock = ranks_lock if request.param.stem in RING_LESSONS else contextlib.nullcontext
    with lock():  # a lesson that starts ranks waits for the ranks tests' turn
        path = build.execute_lesson(request.param)
    return json.loads(path.read_text())


def _outputs(nb: dict) -> list[dict]:
    return [out for cell in nb["cells"] if cell["cell_type"] == "code" for out in cell["outputs"]]


def _markdown(nb: dict) -> str:
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def _markdown_outputs(nb: dict) -> str:
    return "\n".join(
        "".join(o["data"]["text/markdown"])
        for o in _outputs(nb)
        if o["output_type"] in ("display_data", "execute_result") and "text/markdown" in o["data"]
    )


def test_every_cell_ran_without_error(executed: dict) -> None:
    code = [c for c in executed["cells"] if c["cell_type"] == "code"]
    assert code, "a lesson without code"
    assert all(c["execution_count"] is not None for c in code)
    errors = [o for o in _outputs(executed) if o["output_type"] == "error"]
    assert not errors, errors
    stderr = [
        "".join(o["text"])
        for o in _outputs(executed)
        if o["output_type"] == "stream" and o["name"] == "stderr"
    ]
    assert not stderr, f"a lesson wrote to stderr (warnings?): {stderr}"


def test_lesson_ran_in_time(executed: dict) -> None:
    seconds = executed["metadata"]["ringsim"]["seconds"]
    assert seconds < MAX_LESSON_SECONDS, f"lesson took {seconds:.0f} s"


def test_lesson_has_a_figure(executed: dict) -> None:
    figures = [
        o
        for o in _outputs(executed)
        if o["output_type"] in ("display_data", "execute_result")
        and ("image/svg+xml" in o["data"] or "image/png" in o["data"])
    ]
    assert figures, "every lesson shows at least one figure"


def test_lesson_has_goals_predictions_and_captions(executed: dict) -> None:
    text = _markdown(executed)
    assert "You will be able to" in text
    assert "Predict first" in text
    assert text.count("<details>") >= 1 and text.count("<details>") == text.count("</details>")
    # a caption is a markdown cell, or printed by a cell (``caption``) from computed values
    captions = text + _markdown_outputs(executed)
    assert "What to notice" in captions, "figures need a caption saying what to notice"


def test_every_predict_first_has_an_answer(executed: dict) -> None:
    """Each "Predict first" question is followed by its folded answer before the next one."""
    text = _markdown(executed)
    parts = text.split("**Predict first.**")[1:]
    unanswered = [p.strip()[:70] for p in parts if "<summary>Answer</summary>" not in p]
    assert not unanswered, f"questions without a folded answer: {unanswered}"


def test_lesson_ends_with_exercises_and_linked_references(executed: dict) -> None:
    printed = _markdown_outputs(executed)
    assert "## Exercises" in printed, "each lesson ends with exercises"
    questions = [line for line in printed.splitlines() if line.startswith("**") and ".**" in line]
    assert len(questions) >= 2, f"at least two exercises, found {len(questions)}"
    assert printed.count("<summary>Solution</summary>") == len(questions)
    assert printed.count("<details>") == printed.count("</details>")
    assert "## References" in printed
    assert printed.count("](https://") >= 2, "references are links"


def test_lesson_scale_knob_is_validated(monkeypatch) -> None:
    from ringsim.views.lessons import lesson_scale

    monkeypatch.setenv("RINGSIM_LESSON_SCALE", "zero")
    with pytest.raises(ValueError, match="RINGSIM_LESSON_SCALE"):
        lesson_scale()


# ---------------------------------------------------------------------------------------------
# One notation, one glossary
# ---------------------------------------------------------------------------------------------

NOTATION_BOX = "Notation and terms used in this lesson"
# capitalised words that are plain English to the lessons' readers, or names (papers, tools)
COMMON_CAPITALS = set(
    "GB MB TB KB PB CPU GPU TPU OS TCP JSON PNG HTML CLI API README LLM RL XLA JAX USP BPT "
    "DGX HGX NDR IEEE ID AI II III NB QK PV FLOPS TF PR".split()
)


def _glossary_names() -> dict[str, str]:
    """Every name a glossary entry defines ("GQA, MHA" defines both) -> its entry."""
    from ringsim.views.lessons import GLOSSARY

    names = {}
    for entry in GLOSSARY:
        for name in entry.split(" (")[0].split(", "):
            names[name] = entry
        if "(" in entry:  # "context parallelism (CP)" also defines CP
            names[entry.split("(")[1].rstrip(")").split(" ")[0]] = entry
    return names


def _prose_words(nb: dict) -> str:
    """The lesson's markdown without code, math and links (where names are not prose)."""
    text = _markdown(nb)
    for pattern in (r"`[^`]*`", r"\$[^$]*\$", r"\]\([^)]*\)", r"<[^>]+>"):
        text = re.sub(pattern, " ", text)
    return text


def test_notation_page_is_current() -> None:
    from ringsim.views.lessons import notation_page

    page = ROOT / "lessons" / "notation.md"
    assert page.read_text() == notation_page(), (
        "lessons/notation.md is not lessons.notation_page(); regenerate it with "
        "python -c 'from ringsim.views.lessons import notation_page; "
        'open("lessons/notation.md", "w").write(notation_page())\''
    )


def test_every_abbreviation_is_in_the_glossary(executed: dict) -> None:
    """An all-capitals word in a lesson's prose (FSDP, HBM, NCCL, SM) is defined on the
    notation page, or is one a reader knows (GB, GPU)."""
    names = _glossary_names()
    # not after a hyphen: Megatron-LM and FlashAttention-2 are names, not abbreviations
    words = set(re.findall(r"(?<![\w-])([A-Z]{2,})s?\b", _prose_words(executed)))
    undefined = sorted(w for w in words if w not in names and w not in COMMON_CAPITALS)
    assert not undefined, f"abbreviations the glossary does not define: {undefined}"


def test_notation_box_lists_the_terms_the_lesson_uses(executed: dict) -> None:
    """Where a lesson opens with its notation box, the box defines every one-word glossary
    term (FSDP, gloo, it/s, bf16, ...) its prose uses."""
    printed = _markdown_outputs(executed)
    if NOTATION_BOX not in printed:
        pytest.skip("this lesson has no notation box")
    box = printed[
        printed.index(NOTATION_BOX) : printed.index("</details>", printed.index(NOTATION_BOX))
    ]
    prose = _prose_words(executed)
    missing = sorted(
        {
            entry
            for name, entry in _glossary_names().items()
            if " " not in name
            and re.search(rf"(?<![\w/-]){re.escape(name)}(?![\w/-])", prose)
            and f"| {entry} |" not in box
        }
    )
    assert not missing, f"terms used but not in the lesson's notation box: {missing}"
