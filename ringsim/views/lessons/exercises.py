"""Exercises: numbered questions with folded solutions (``exercises``), and the
implement-and-test ones, where the learner writes a piece (the merge, the zigzag layout, the
backward's delta) and a provided check compares it with the library (``try_it``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ringsim.views.lessons.text import Markdown


def try_it(yours, reference, check) -> None:
    """Run ``check`` on the learner's function ``yours``; while it still raises
    ``NotImplementedError``, run it on the folded ``reference`` solution instead, so the
    lesson executes top to bottom either way. ``check`` raises ``AssertionError`` on a wrong
    answer and returns a one-line summary of what it compared."""
    import textwrap

    name = getattr(yours, "__name__", "your function")
    try:
        summary = check(yours)
    except NotImplementedError:
        summary = check(reference)
        message = f"{name} is not written yet; the reference solution passes: {summary}"
    else:
        message = f"{name} passes: {summary}"
    print(textwrap.fill(message, width=88))  # the book's code column


def _partials(rng, rows: int = 5, d: int = 4, keys: int = 7, spread: float = 6.0):
    """Two partials of the same query rows over disjoint random key sets, with far apart
    maxima (so a merge that forgets a rescale is visibly wrong), and the exact answer."""
    from ringsim.numerics.attention import block_attention, reference_attention

    q = rng.standard_normal((rows, d)) * spread
    k = rng.standard_normal((2 * keys, d))
    v = rng.standard_normal((2 * keys, d))
    k[keys:] += 2.0  # the second key set scores higher: different row maxima
    scale = 1 / np.sqrt(d)
    a = block_attention(q, k[:keys], v[:keys], scale=scale)
    b = block_attention(q, k[keys:], v[keys:], scale=scale)
    return a, b, reference_attention(q, k, v)


def check_merge(merge_fn) -> str:
    """``merge_fn(a, b) -> Partial`` against ``ringsim.merge`` and the exact attention over
    both key sets, on random partials whose maxima differ, in both orders."""
    from ringsim.numerics.attention import merge

    rng = np.random.default_rng(2)
    worst = 0.0
    for _ in range(20):
        a, b, exact = _partials(rng)
        for x, y in ((a, b), (b, a)):
            got, want = merge_fn(x, y), merge(x, y)
            np.testing.assert_allclose(got.row_max, want.row_max, rtol=1e-12)
            np.testing.assert_allclose(got.lse, want.lse, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(got.out, exact, rtol=1e-9, atol=1e-12)
            worst = max(worst, float(np.abs(got.out - exact).max()))
    return f"40 merges equal ringsim.merge; largest error against exact {worst:.1e}"


def check_zigzag(positions_fn) -> str:
    """``positions_fn(hosts, seq_len) -> (hosts, seq_len // hosts)`` global positions per host,
    against ``ringsim.host_positions("zigzag", ...)`` for several ring sizes."""
    from ringsim.layouts import host_positions

    cases = [(2, 8), (4, 16), (4, 64), (8, 32), (3, 12)]
    for hosts, seq_len in cases:
        got = np.asarray(positions_fn(hosts, seq_len))
        want = host_positions("zigzag", hosts, seq_len)
        assert got.shape == want.shape, (
            f"P={hosts}, N={seq_len}: shape {got.shape}, not {want.shape}"
        )
        assert (np.sort(got, axis=1) == want).all(), (
            f"P={hosts}, N={seq_len}: host 0 got {np.sort(got[0]).tolist()}, "
            f"the zigzag layout gives {want[0].tolist()}"
        )
    return f"{len(cases)} rings (P = 2 to 8) deal the same tokens as ringsim.host_positions"


def check_delta(delta_fn) -> str:
    """``delta_fn(out, dout) -> (..., rows)`` used in ``block_attention_backward``: the
    gradients must equal the float64 reference (which builds the whole matrix)."""
    from ringsim.numerics.attention import (
        block_attention,
        block_attention_backward,
        reference_attention_grad,
    )

    rng = np.random.default_rng(3)
    q, k, v, dout = (rng.standard_normal((2, 24, 8)) for _ in range(4))
    scale = 1 / np.sqrt(8)
    part = block_attention(q, k, v, scale=scale)
    delta = np.asarray(delta_fn(part.out, dout))
    assert delta.shape == part.lse.shape, f"delta has shape {delta.shape}, not {part.lse.shape}"
    grads = block_attention_backward(q, k, v, dout, part.lse, delta, scale=scale)
    exact = reference_attention_grad(q, k, v, dout)
    for name, got, want in zip(("dq", "dk", "dv"), grads, exact, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=name)
    return "dq, dk, dv from your delta equal the float64 reference"


@dataclass(frozen=True)
class Exercise:
    """One exercise: the ``question`` and its worked ``solution`` (MyST markdown, ``$...$``
    math allowed). Write numeric answers as f-strings over library calls, never by hand."""

    question: str
    solution: str


def exercises(*items: Exercise, title: str = "Exercises") -> Markdown:
    """Numbered exercises, each solution folded in ``<details>`` (open it after trying)."""
    if not items:
        raise ValueError("exercises needs at least one Exercise, got none")
    parts = [f"## {title}\n"]
    for i, ex in enumerate(items, 1):
        parts.append(f"**{i}.** {ex.question.strip()}\n")
        parts.append(
            f"<details><summary>Solution</summary>\n\n{ex.solution.strip()}\n\n</details>\n"
        )
    return Markdown("\n".join(parts))
