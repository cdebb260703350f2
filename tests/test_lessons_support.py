"""The lessons' helpers: the size knob, the recorded ring story and its drawings."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

import ringsim
from ringsim.views.lessons_support import (
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
    from ringsim.views.lessons_support import table

    text = table(
        [{"term": "a", "ms": 1.5}, {"term": "b", "ms": None}], {"term": "{}", "ms": "{:.2f}"}
    )
    assert text.splitlines()[-1].split() == ["b", "-"]
    assert text.splitlines()[-2].split() == ["a", "1.50"]
