"""The teaching face (``ringsim.teach``): the words lessons compare numbers with, the
capstone's checker against the planner, printed tables, figure panels and log ticks, and the
real backend's loop as the lessons print it."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

import ringsim
from ringsim import teach
from ringsim.views.lessons import panels, words
from ringsim.views.lessons.capstone import PARTS

# -- words -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "kind"),
    [
        (1.0, "same"),
        (1.04, "same"),
        (1 / 1.04, "same"),
        (1.2, "little"),
        (0.85, "little"),
        (1.3, "plain"),
        (1 / 1.4, "plain"),
        (1.5, "much"),
        (9.5, "much"),
        (0.1, "much"),
    ],
)
def test_degree_is_one_scale_either_way_round(ratio: float, kind: str) -> None:
    assert words.degree(ratio) == kind


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan])
def test_degree_refuses_what_is_no_ratio(bad: float) -> None:
    with pytest.raises(ValueError, match="ratio"):
        words.degree(bad)


def test_compared_names_the_direction_and_prints_the_ratio() -> None:
    assert teach.compared(1.2, 1.0, more="slower", less="faster") == "a little slower (1.20x)"
    assert teach.compared(1.0, 1.02) == "about the same (0.98x)"
    assert teach.compared(2.0, 1.0) == "much more (2.00x)"
    assert teach.compared(0.7, 1.0, more="slower", less="faster") == "faster (0.70x)"
    with pytest.raises(ValueError, match="compare"):
        teach.compared(1.0, 0.0)


def test_near_zero_and_number_words() -> None:
    assert teach.near_zero(0.0) == "zero (0.0%)"
    assert teach.near_zero(0.004) == "just above zero (0.4%)"
    assert teach.near_zero(0.31) == "31.0%"
    assert teach.number_word(6) == "six" and teach.number_word(13) == "13"
    with pytest.raises(ValueError, match="n must"):
        teach.number_word(-1)


def test_the_test_vocabulary_is_the_one_lessons_use() -> None:
    """tests/prose_words.py reads prose with words.DEGREES: every adverb compared() writes is
    in it, with the degree it claims."""
    import prose_words as pw

    for ratio in (1.1, 2.5, 0.2):
        phrase = teach.compared(ratio, 1.0)
        claim = pw.claims([("printed", f"It is {phrase}.")])[0]
        assert pw.judge(claim) is None, (phrase, claim)
    wrong = pw.claims([("printed", "It is much more (1.20x).")])[0]
    assert pw.judge(wrong) is not None


# -- the capstone's checker --------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_plan():
    """A plan small enough for a unit test: Llama 3 8B at 64K tokens on one DGX node."""
    return ringsim.plan("llama3-8b", 64 * 1024, ringsim.get_cluster("dgx-h100").with_nodes(1))


def test_the_planners_best_is_rank_one(small_plan) -> None:
    best = small_plan.candidates[0]
    choice = teach.Choice(
        layout=best.layout,
        ulysses=best.ulysses_degree,
        tp=best.parallel.tp,
        recompute=best.parallel.recompute,
        strategy=best.strategy,
        placement=best.placement,
    )
    verdict = teach.check_choice(small_plan, choice)
    assert verdict.fits and verdict.rank == 1 and verdict.gap == 0
    assert "planner's best" in verdict.summary()


def test_a_slower_choice_is_ranked_and_its_gap_explained(small_plan) -> None:
    """A contiguous ring: it fits, ranks below the best, and the verdict names the parts of
    the step that differ, which add up to its gap."""
    rings = [c for c in small_plan.candidates if (c.strategy, c.layout) == ("ring", "contiguous")]
    mine = rings[0]
    choice = teach.Choice(
        "contiguous", mine.ulysses_degree, mine.parallel.tp, mine.parallel.recompute, "ring"
    )
    verdict = teach.check_choice(small_plan, choice)
    assert verdict.candidate is mine
    assert verdict.rank == small_plan.candidates.index(mine) + 1 > 1
    best = small_plan.candidates[0]
    assert verdict.gap == pytest.approx(mine.step_time_s / best.step_time_s - 1)
    parts = sum(mine.breakdown[k] - best.breakdown[k] for k in PARTS)
    assert parts == pytest.approx(mine.step_time_s - best.step_time_s, rel=1e-6)
    text = verdict.summary()
    assert f"ranks {verdict.rank}" in text and "largest first" in text


def test_a_choice_that_does_not_fit_says_by_how_much(small_plan) -> None:
    dropped = min(small_plan.dropped, key=lambda c: c.bytes_per_host)
    p = dropped.parallel
    choice = teach.Choice(
        dropped.layout,
        dropped.ulysses_degree,
        p.tp,
        p.recompute,
        strategy=p.strategy,
        placement=p.placement,
        pp=p.pp,
    )
    assert not any(choice.matches(c) for c in small_plan.candidates), "a twin fits"
    verdict = teach.check_choice(small_plan, choice)
    assert not verdict.fits and verdict.rank is None and math.isnan(verdict.gap)
    over = (dropped.bytes_per_host - dropped.usable_bytes) / 1e9
    assert f"It is {over:.1f} GB over" in verdict.summary()


@pytest.mark.parametrize(
    ("field", "choice"),
    [
        ("ulysses", teach.Choice("zigzag", ulysses=3)),
        ("layout", teach.Choice("diagonal")),
        ("recompute", teach.Choice("zigzag", recompute="some")),
        ("pp", teach.Choice("zigzag", pp=3)),
    ],
)
def test_a_choice_the_planner_never_tried_is_refused_by_name(small_plan, field, choice) -> None:
    with pytest.raises(ValueError, match=f"choice.{field}="):
        teach.check_choice(small_plan, choice)


def test_the_checker_wants_every_candidate_timed() -> None:
    node = ringsim.get_cluster("dgx-h100").with_nodes(1)
    # at the peak rate the lower bounds are tight: most candidates are bounded, never timed
    kept = ringsim.plan("llama3-8b", 64 * 1024, node, implementation="ideal", keep=1)
    assert kept.bounded
    with pytest.raises(ValueError, match="keep"):
        teach.check_choice(kept, teach.Choice("zigzag"))
    with pytest.raises(ValueError, match="choice must be a Choice"):
        teach.check_choice(kept, "zigzag")


# -- text, figures, machines -------------------------------------------------------------------


def test_a_table_prints_as_text_and_shows_as_html() -> None:
    t = teach.table(
        [{"name": "a<b", "x": 1.5}, {"name": "c", "x": None}], {"name": "{}", "x": "{:.2f}"}
    )
    assert str(t).splitlines() == ["name     x", "----  ----", " a<b  1.50", "   c     -"]
    assert repr(t) == str(t)
    html = t._repr_html_()
    assert html.startswith('<div class="rs-table"><table>')
    assert "a&lt;b" in html and "<th" in html and html.count("<tr>") == 3
    assert '<td class="rs-text">a&lt;b</td>' in html, "a text column aligns left"
    assert '<td class="rs-num">1.50</td>' in html and '<td class="rs-num">-</td>' in html


def test_panels_count_a_figures_grid() -> None:
    fig, axes = plt.subplots(2, 3)
    assert panels(fig) == {"count": 6, "rows": 2, "cols": 3}
    image = axes[0, 0].imshow(np.eye(3))
    fig.colorbar(image, ax=axes[0, 0])
    assert panels(fig)["count"] == 6, "a colour bar is no panel"
    plt.close(fig)


def test_plain_log_ticks_label_with_plain_numbers() -> None:
    fig, ax = plt.subplots()
    ax.loglog([2, 600], [1, 10])
    teach.plain_log_ticks(ax, "x")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels[:4] == ["2", "5", "10", "20"] and "500" in labels
    assert not ax.xaxis.get_minor_ticks() or not any(
        t.label1.get_text() for t in ax.xaxis.get_minor_ticks()
    )
    plt.close(fig)


def test_a_figure_report_counts_svg_pixels_per_point() -> None:
    fig, ax = plt.subplots()
    ax.set_title("t", fontsize=9)
    ax.tick_params(labelsize=9)
    ax.set_xlabel("x", fontsize=9)
    ax.set_ylabel("y", fontsize=9)
    assert teach.figure_report(fig, "svg")["min_text_px"] == pytest.approx(12.0)
    assert teach.figure_report(fig)["min_text_px"] == pytest.approx(9 * fig.dpi / 72)
    plt.close(fig)


def test_the_real_rings_loop_is_its_source() -> None:
    """The loop lesson 15 prints is ring_forward's, from the step loop to the buffer swap."""
    pytest.importorskip("torch")
    loop = teach.real_ring_loop()
    lines = loop.splitlines()
    assert lines[0].startswith("for step in range") and lines[-1].strip() == "kv = incoming"
    assert "merge_out_lse" in loop and "_Transfer" in loop
