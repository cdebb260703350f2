"""What makes the planner fast changes no answer (issue 35): the CTA schedule's fast loops
give the very floats of the plain event loop, the rate bound is never beaten by a call, and
the planner's lower bound never exceeds a timed step."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringsim.timer.cost import attention_flops
from ringsim.timer.machine.families import get_family
from ringsim.timer.machine.hardware import PRESETS
from ringsim.timer.machine.kernel_model import (
    MASKS,
    attention_call_seconds,
    call_rate_bound,
    cta_makespan,
)
from ringsim.timer.machine.topology import get_cluster

H100, A100 = PRESETS["h100-nvlink"], PRESETS["a100-nvlink"]


def reference_makespan(lengths, sms: int, per_sm: int, lone_speed: float) -> float:
    """``cta_makespan``'s schedule (its docstring) written as a scan: at every moment each
    busy SM's next end is ``since + (least work left) / rate``; the earliest, and every end
    within ``1e-12`` of it, is that moment; those SMs advance (a CTA whose work left is under
    ``1e-9 (1 + done)`` ends), then take the next CTAs one per SM in turn, ordered by their
    end and index, while they have room."""
    pending = [float(x) for x in lengths if x > 0]
    rate = [1.0] * (per_sm + 1)
    for n in range(1, per_sm + 1):
        if per_sm > 1:
            rate[n] = per_sm * (lone_speed + (1.0 - lone_speed) * (n - 1) / (per_sm - 1)) / n
    residents = [[] for _ in range(sms)]
    since = [0.0] * sms

    def take(order: list[int]) -> None:
        while pending and any(len(residents[sm]) < per_sm for sm in order):
            for sm in order:
                if pending and len(residents[sm]) < per_sm:
                    residents[sm].append(pending.pop(0))

    take(list(range(sms)))
    now = 0.0
    while any(residents):
        ends = sorted(
            (since[sm] + min(r) / rate[len(r)], sm) for sm, r in enumerate(residents) if r
        )
        now = ends[0][0]
        moment = [sm for end, sm in ends if end <= now * (1.0 + 1e-12)]
        for sm in moment:
            done = rate[len(residents[sm])] * (now - since[sm])
            residents[sm] = [x - done for x in residents[sm] if x - done > 1e-9 * (1.0 + done)]
            since[sm] = now
        take(moment)
    return now


lengths = st.lists(
    st.one_of(
        st.sampled_from([0.0, 1.0, 2.5, 3.0, 17.25]),  # repeats: ends at one moment
        st.floats(0.0, 200.0, allow_nan=False),
    ),
    min_size=0,
    max_size=300,
)


@given(lengths, st.integers(1, 24), st.integers(1, 4), st.floats(0.05, 1.0))
def test_the_schedule_is_the_plain_event_loop_to_the_last_bit(lengths, sms, per_sm, lone):
    assert cta_makespan(np.array(lengths), sms, per_sm, lone) == reference_makespan(
        lengths, sms, per_sm, lone
    )


@pytest.mark.parametrize("per_sm", [1, 2])
def test_a_repeated_head_pattern_schedules_as_before(per_sm):
    """The planner's grids: one head's CTAs (a causal triangle plus a fixed cost) repeated
    over heads, hundreds of them on 132 SMs (the scan reads every SM at every moment: a
    smaller grid than the planner's keeps it quick)."""
    one = np.arange(1, 65) + 0.37
    grid = np.tile(one, 12)
    for lone in (0.5, 0.8, 1.0):
        assert cta_makespan(grid, 132, per_sm, lone) == reference_makespan(grid, 132, per_sm, lone)


@given(
    st.sampled_from(["fa2", "fa3", "cudnn", "triton", "ideal"]),
    st.sampled_from([H100, A100]),
    st.integers(1, 40_000),
    st.integers(1, 40_000),
    st.sampled_from([1, 2, 4, 8, 16, 40]),
    st.sampled_from([64, 96, 128, 256]),
    st.sampled_from(["forward", "backward"]),
    st.sampled_from([m for m in MASKS if m != "documents"]),
    st.sampled_from(["low", "point", "high"]),
    st.tuples(st.integers(-40_000, 40_000), st.integers(0, 40_000)),
)
def test_no_call_runs_faster_than_the_rate_bound(
    family, hardware, q, k, heads, head_dim, pass_, mask, end, lo_width
):
    """``visible FLOPs / call_rate_bound`` is a lower bound of every call, whatever its shape,
    mask (a window's band too) or head count: the planner's lower bound rests on it."""
    band = (lo_width[0], lo_width[0] + lo_width[1]) if mask == "window" else None
    if not get_family(family).runs_on(hardware):
        return  # FA3 and cuDNN run on Hopper only
    if mask in ("causal-diagonal", "offset-causal") and k < q:
        k = q  # a causal block sees at least its own keys
    kv = max(1, heads // 4)
    seconds = attention_call_seconds(
        family,
        hardware,
        q_tokens=q,
        k_tokens=k,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        dtype="bf16",
        pass_=pass_,
        mask=mask,
        lone_cta_speed=end,
        band=band,
    )
    visible = _visible_pairs(q, k, mask, band) / (q * k)
    flops = attention_flops(q, k, heads, head_dim, work=visible, pass_=pass_)
    bound = call_rate_bound(
        family, hardware, head_dim=head_dim, dtype="bf16", pass_=pass_, lone_cta_speed=end
    )
    assert flops / bound <= seconds * (1 + 1e-12)


def _visible_pairs(q: int, k: int, mask: str, band: tuple[int, int] | None) -> int:
    """Pairs a mask leaves of a ``q x k`` call (row ``r`` sees keys ``<= r + k - q``, or
    ``<`` for offset-causal; under a window's ``band``, keys ``r + lo`` to ``r + hi``)."""
    if mask in ("full", "zigzag-half"):
        return q * k
    rows = np.arange(q)
    if mask == "window":
        first, last = np.maximum(rows + band[0], 0), np.minimum(rows + band[1], k - 1)
        return int(np.maximum(last - first + 1, 0).sum())
    shift = k - q - (1 if mask == "offset-causal" else 0)
    return int(np.clip(rows + shift + 1, 0, k).sum())


# -- the busiest GPU's share of the pairs: the planner's lower bound -------------------------
def _parallel(cp: int, ulysses: int, layout: str):
    from ringsim.timer.step.parallel import Parallel

    return Parallel(tp=1, cp=cp, pp=1, dp=1, ulysses=ulysses, layout=layout, strategy="hybrid")


def test_the_busiest_share_of_a_contiguous_causal_ring_is_its_last_host():
    """Host ``R - 1`` of a contiguous causal ring sees ``R - 1`` whole blocks and its own
    triangle: ``((R - 1) c^2 + c (c + 1) / 2) / N^2`` of the pairs, over ``U`` head groups."""
    from ringsim.timer.step.models import MODELS
    from ringsim.timer.studies.planner import AttentionTimer

    n, R, U = 4096, 8, 2
    timer = AttentionTimer(
        MODELS["llama3-8b"],
        n,
        get_cluster("dgx-h100"),
        causal=True,
        dtype="bf16",
        implementation="ideal",
    )
    c = n // R
    expected = ((R - 1) * c * c + c * (c + 1) / 2) / (n * n) / U
    assert timer.busiest_work(_parallel(R * U, U, "contiguous")) == pytest.approx(expected)
    balanced = (n * (n + 1) / 2) / (n * n) / (R * U)  # zigzag: every host the same
    assert timer.busiest_work(_parallel(R * U, U, "zigzag")) == pytest.approx(balanced)


@pytest.mark.parametrize(
    "case",
    [
        dict(model="llama3-8b", seq_len=2**15, implementation="ideal"),
        dict(model="llama3-8b", seq_len=2**15, implementation="fa2", causal=False),
        dict(model="llama3-8b", seq_len=2**15, implementation="fa2", mode="prefill"),
        dict(model="mistral-7b", seq_len=2**15, implementation="fa2"),
        dict(
            model="llama3-8b",
            seq_len=2**14,
            implementation="fa2",
            documents=[1000, 7192, 4096, 2048, 2048],
        ),
    ],
    ids=["ideal", "full-mask", "prefill", "windows", "documents"],
)
def test_no_configuration_steps_faster_than_its_lower_bound(case):
    """Every configuration timed (``keep`` past them all times every one, each after its
    bound) takes at least its lower bound: the layout's busiest GPU, the kernel family's best
    rate, no communication. Packed documents and sliding windows leave fewer pairs than the
    causal mask, and the bound counts exactly those."""
    from ringsim.timer.studies.planner import plan

    kw = dict(case)
    result = plan(
        kw.pop("model"),
        kw.pop("seq_len"),
        get_cluster("dgx-h100"),
        16,
        global_batch=16,
        pp=1,
        virtual_stages=1,
        keep=10**6,
        **kw,
    )
    assert len(result.candidates) > 20
    for cand in result.candidates:
        assert 0 < cand.lower_bound_s <= cand.step_time_s, cand.label
