"""Every number a lesson states is one its code computes, prints or chose.

Two checks over the executed lessons (``book/build.py``'s cache, shared with
``tests/test_lessons.py``):

* every number in the prose, the captions, the folded answers and the hand-typed parts of
  generated text (exercise solutions) must be printed by the lesson, be a literal of its code,
  or be listed in ``GIVEN`` below with its source (``tests/prose_numbers.py`` says what counts
  as a number and how "about 1.6 times" is compared with what the cells print);
* ``CLAIMS``: sentences whose number must stay tied to one particular printed value.

A change in the library that moves a number fails here instead of leaving the text
contradicting the output.
"""

from __future__ import annotations

import json
from pathlib import Path

import prose_numbers as pn
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
    ("06_causal_catch", "busiest host does 1.7 times", "busiest/mean 1.71"),
    ("06_causal_catch", "balanced (1.08)", "busiest/mean 1.08"),
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
    ("07_memory_context", "counts fp32, twice the", "bf16 1,323K, fp32 666K"),
    ("09_strategies_decode", "2^20-token cache", "2^20-token cache: 344 GB"),
    ("10_simulated_vs_measured", "A threshold of 0 is no\nbug", "block 128 tokens: "),
    ("10_simulated_vs_measured", "about\n77 GFLOP/s in fp32", "76.6 GFLOP/s per rank (fp32)"),
    ("12_many_nodes", "The lines under the figure print by how much", "1.20x its all-NVLink"),
    ("12_many_nodes", "costs memory for the all-to-all's", "438 MB for every $U > 1$"),
    ("12_many_nodes", "leave its PCIe switch", "6 of each GPU's 7 shares leave"),
    # the causal threshold 2F/B with GQA on a DGX H100 NIC, the same in lessons 13 and 14
    ("13_planning", "needs to hide its transfer across the NIC", "2F/B with GQA: 9,890 tokens"),
    ("14_capstone", "a causal block needs to hide its transfer across", "4,945        9,890"),
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
