"""The lessons' helpers: the size knob, the recorded ring story and its drawings."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

import ringsim
from ringsim.views.lessons import (
    animation_html,
    draw_ring_step,
    lesson_scale,
    ring_animation,
    ring_story,
    scaled,
    static_book,
)


@pytest.fixture
def qkv():
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((24, 8)) for _ in range(3))


def test_scale_defaults_to_one_and_reads_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("RINGSIM_LESSON_SCALE", raising=False)
    assert lesson_scale() == 1.0
    assert scaled(4096, multiple=64) == 4096
    monkeypatch.setenv("RINGSIM_LESSON_SCALE", "2.5")
    assert lesson_scale() == 2.5
    assert scaled(100, multiple=64) == 256  # 250 rounded to a multiple of 64
    monkeypatch.setenv("RINGSIM_LESSON_SCALE", "0.001")
    assert scaled(100, multiple=64) == 64  # never below one multiple


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "big"])
def test_bad_scale_is_refused_naming_the_variable(monkeypatch, text: str) -> None:
    monkeypatch.setenv("RINGSIM_LESSON_SCALE", text)
    with pytest.raises(ValueError, match=f"RINGSIM_LESSON_SCALE.*{text}"):
        lesson_scale()


def test_static_book_flag(monkeypatch) -> None:
    monkeypatch.delenv("RINGSIM_STATIC_BOOK", raising=False)
    assert not static_book()
    monkeypatch.setenv("RINGSIM_STATIC_BOOK", "1")
    assert static_book()


@pytest.mark.parametrize("layout", ringsim.layout_names())
@pytest.mark.parametrize("causal", [False, True])
def test_story_ends_exact_and_matches_the_ring(qkv, layout: str, causal: bool) -> None:
    q, k, v = qkv
    story = ring_story(q, k, v, hosts=3 if layout != "zigzag" else 2, layout=layout, causal=causal)
    assert story.errors.shape == (story.steps, story.hosts)
    assert len(story.record.outputs) == story.steps
    assert story.errors[-1].max() < 1e-12
    # the last recorded running outputs are the ring's answer, host by host
    out = ringsim.ring_attention(q, k, v, hosts=story.hosts, layout=layout, causal=causal)
    for h, host_out in enumerate(story.record.outputs[-1]):
        np.testing.assert_allclose(host_out, out[story.schedule.positions[h]], atol=1e-12)


def test_causal_contiguous_host_h_is_exact_from_step_h(qkv) -> None:
    q, k, v = qkv
    story = ring_story(q, k, v, hosts=4, causal=True)
    for h in range(4):
        assert story.errors[h:, h].max() < 1e-12, f"host {h} not exact from step {h}"
        if h > 0:
            assert story.errors[h - 1, h] > 1e-3, f"host {h} exact before its last block"


def test_full_ring_is_wrong_until_the_last_step(qkv) -> None:
    q, k, v = qkv
    story = ring_story(q, k, v, hosts=4)
    assert story.errors[:-1].min() > 1e-3
    assert story.errors[-1].max() < 1e-12


def test_drawing_a_step(qkv) -> None:
    q, k, v = qkv
    story = ring_story(q, k, v, hosts=4, causal=True)
    fig = draw_ring_step(story, 1)
    assert len(fig.axes) == 3
    assert "step 1" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="step must be in"):
        draw_ring_step(story, 4)


def test_animation_has_a_frame_per_step_and_no_cdn_link(qkv) -> None:
    q, k, v = qkv
    story = ring_story(q, k, v, hosts=2)
    anim = ring_animation(story, interval_ms=100)
    html = animation_html(anim)
    assert html.count("data:image/png;base64") == story.steps
    assert "https://" not in html and "http://" not in html


def test_table_prints_a_dash_for_a_missing_value() -> None:
    from ringsim.views.lessons import table

    text = table(
        [{"term": "a", "ms": 1.5}, {"term": "b", "ms": None}], {"term": "{}", "ms": "{:.2f}"}
    )
    assert text.splitlines()[-1].split() == ["b", "-"]
    assert text.splitlines()[-2].split() == ["a", "1.50"]


# ---------------------------------------------------------------------------------------------
# Figures the book can check: smallest text and legends over data
# ---------------------------------------------------------------------------------------------


def test_figure_report_measures_the_smallest_text_in_png_pixels() -> None:
    import matplotlib.pyplot as plt

    from ringsim.views.lessons import figure_report

    fig, ax = plt.subplots(dpi=110)
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("x", fontsize=12)
    ax.tick_params(labelsize=7)
    report = figure_report(fig)
    assert report["min_text_px"] == pytest.approx(7 * 110 / 72, rel=1e-3)
    assert report["legends_over_data"] == []
    plt.close(fig)


@pytest.mark.parametrize(("loc", "covers"), [("upper left", True), ("lower right", False)])
def test_a_legend_over_a_line_is_reported(loc: str, covers: bool) -> None:
    import matplotlib.pyplot as plt

    from ringsim.views.lessons import legends_over_data

    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 50)
    ax.plot(x, np.ones_like(x), label="flat at the top")
    ax.plot(x, x, label="diagonal")
    ax.set_ylim(0, 1.05)
    ax.legend(loc=loc)
    assert bool(legends_over_data(fig)) is covers
    plt.close(fig)


def test_a_legend_over_bars_or_points_is_reported() -> None:
    import matplotlib.pyplot as plt

    from ringsim.views.lessons import legends_over_data

    fig, (bars, points) = plt.subplots(1, 2)
    bars.bar(["a", "b"], [2, 2], label="tall bars")
    bars.legend(loc="upper left")
    points.scatter([0.1, 0.9], [0.95, 0.1], label="a point under the legend")
    points.set_xlim(0, 1)
    points.set_ylim(0, 1)
    points.legend(loc="upper left")
    assert legends_over_data(fig) == ["tall bars", "a point under the legend"]
    plt.close(fig)


def test_a_legend_over_an_error_bars_whisker_is_reported() -> None:
    """A whisker whose two ends lie outside the legend's box still runs through it (Figure
    10.2's legend once sat on one unreported: only the ends were tested)."""
    import matplotlib.pyplot as plt

    from ringsim.views.lessons import legends_over_data

    fig, ax = plt.subplots()
    ax.bar([0, 1, 2], [0.2, 0.2, 0.2], color="white")
    ax.errorbar([2], [0.5], yerr=[[0.45], [0.45]], fmt="none", ecolor="black")
    ax.set_xlim(-0.5, 2.5)
    ax.set_ylim(0, 1)
    ax.axhspan(0.45, 0.55, alpha=0.15, label="a band")
    ax.legend(loc="center right")
    assert legends_over_data(fig) == ["a band"]
    ax.legend(loc="upper left")
    assert legends_over_data(fig) == []
    plt.close(fig)


def test_animation_carries_its_figure_report(qkv) -> None:
    import json
    import re

    q, k, v = qkv
    html = animation_html(ring_animation(ring_story(q, k, v, hosts=2), interval_ms=100))
    found = re.search(r'<img data-ringsim="([^"]+)"', html)
    assert found, "the player's <img> carries no report"
    report = json.loads(found.group(1).replace("&quot;", '"'))
    assert report["min_text_px"] > 9 and report["legends_over_data"] == []


# ---------------------------------------------------------------------------------------------
# One notation, captions, references
# ---------------------------------------------------------------------------------------------


def test_notation_box_defines_what_it_is_given_and_refuses_unknown_names() -> None:
    from ringsim.views.lessons import GLOSSARY, NOTATION, notation

    text = notation("P", "c", terms=("FSDP",)).text
    assert f"| $P$ | {NOTATION['P']} |" in text
    assert f"| FSDP | {GLOSSARY['FSDP']} |" in text
    assert text.count("<details>") == text.count("</details>") == 1
    with pytest.raises(ValueError, match=r"unknown symbols or terms.*'Q'"):
        notation("Q")
    with pytest.raises(ValueError, match="'FDSP'"):
        notation(terms=("FDSP",))


def test_notation_page_lists_every_symbol_and_term() -> None:
    from ringsim.views.lessons import GLOSSARY, NOTATION, notation_page

    page = notation_page()
    assert all(f"| ${symbol}$ |" in page for symbol in NOTATION)
    assert all(f"| {term} |" in page for term in GLOSSARY)


def test_one_meaning_per_symbol() -> None:
    """The issue this notation fixed: h meant heads, hidden size and host index at once."""
    from ringsim.views.lessons import NOTATION

    assert "h" not in NOTATION
    assert {"H", "d_{model}", "r"} <= set(NOTATION)


def test_caption_and_references_format() -> None:
    from ringsim.views.lessons import caption, references

    assert caption("Figure 1.1", " the line. ").text == "*Figure 1.1. What to notice:* the line."
    text = references("scaling_book").text
    assert "Austin et al.." not in text and "Austin et al. [" in text


# ---------------------------------------------------------------------------------------------
# Implement-and-test exercises: the checks catch wrong answers, try_it falls back
# ---------------------------------------------------------------------------------------------


def test_try_it_checks_yours_or_falls_back_to_the_reference(capsys) -> None:
    from ringsim.views.lessons import check_zigzag, try_it

    def yours(hosts, seq_len):
        raise NotImplementedError

    def reference(hosts, seq_len):
        return ringsim.host_positions("zigzag", hosts, seq_len)

    try_it(yours, reference, check_zigzag)
    assert "yours is not written yet; the reference solution passes" in capsys.readouterr().out
    try_it(reference, yours, check_zigzag)
    assert capsys.readouterr().out.startswith("reference passes:")


def test_the_merge_check_catches_the_forgotten_rescale() -> None:
    from ringsim.numerics.attention import Partial
    from ringsim.views.lessons import check_merge

    def buggy(a, b):
        row_max = np.maximum(a.row_max, b.row_max)
        alpha, beta = np.exp(a.row_max - row_max), np.exp(b.row_max - row_max)
        acc = a.acc * alpha[..., None] + b.acc * beta[..., None]
        return Partial(acc, row_max, a.row_sum + b.row_sum)  # row sums not rescaled

    assert "ringsim.merge" in check_merge(ringsim.merge)
    with pytest.raises(AssertionError):
        check_merge(buggy)


def test_the_zigzag_check_catches_another_layout() -> None:
    from ringsim.views.lessons import check_zigzag

    with pytest.raises(AssertionError, match="the zigzag layout gives"):
        check_zigzag(lambda hosts, n: ringsim.host_positions("striped", hosts, n))


def test_the_delta_check_catches_a_wrong_delta() -> None:
    from ringsim.views.lessons import check_delta

    assert "float64 reference" in check_delta(lambda out, dout: (out * dout).sum(axis=-1))
    with pytest.raises(AssertionError):
        check_delta(lambda out, dout: (dout * dout).sum(axis=-1))
    with pytest.raises(AssertionError, match="shape"):
        check_delta(lambda out, dout: out * dout)
