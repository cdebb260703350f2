"""Every lesson executes top to bottom, and has the parts a lesson promises.

Execution goes through ``book/build.py``'s cache (keyed by the lesson, the library sources and
``results/``), so when ``tests/test_book.py`` has already built the book, nothing runs twice;
run alone, this file executes each lesson itself. A failing cell fails the test with the
cell's traceback.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # executes every lesson (once: the book build shares the cache)
ROOT = Path(__file__).resolve().parent.parent
# Lessons aim at well under a minute (lesson 10 measures a real ring: ~40 s alone, 140 s on a
# machine busy with other work); this only catches a runaway one, on any machine
MAX_LESSON_SECONDS = 900


def _load_build():
    spec = importlib.util.spec_from_file_location("book_build", ROOT / "book" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load_build()
LESSONS = build.lessons()


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
        if o["output_type"] in ("display_data", "execute_result") and "image/png" in o["data"]
    ]
    assert figures, "every lesson shows at least one figure"


def test_lesson_has_goals_predictions_and_captions(executed: dict) -> None:
    text = _markdown(executed)
    assert "You will be able to" in text
    assert "Predict first" in text
    assert text.count("<details>") >= 1 and text.count("<details>") == text.count("</details>")
    assert "What to notice" in text, "figures need a caption saying what to notice"


def _markdown_outputs(nb: dict) -> str:
    return "\n".join(
        "".join(o["data"]["text/markdown"])
        for o in _outputs(nb)
        if o["output_type"] in ("display_data", "execute_result") and "text/markdown" in o["data"]
    )


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
    from ringsim.views.lessons_support import lesson_scale

    monkeypatch.setenv("RINGSIM_LESSON_SCALE", "zero")
    with pytest.raises(ValueError, match="RINGSIM_LESSON_SCALE"):
        lesson_scale()
