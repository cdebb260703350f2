"""Every public function checks its arguments alike (``ringsim.checks``).

Each function of ``ringsim.__all__`` has a valid call below; every argument of it, in turn,
gets each hostile value (a string where a flag goes, 0 or 1 for a bool, NaN, infinities, a huge
integer, an array, an empty list, an object). The property: the call either works, or raises a
``ValueError``/``TypeError`` with a one-line message naming the argument (or showing the bad
value); never another exception from deep inside (an ``IndexError``, an ``AttributeError``),
and never silently: a bool argument refuses everything but a bool, an integer argument
refuses bools, fractions and strings, a number refuses NaN and strings. The sweep is
exhaustive (a few thousand calls, each refused or done on tiny inputs); a Hypothesis search
then draws further values for the flags, as deep as the profile asks.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ringsim
from ringsim.timer.studies.published import DATASET

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 8, 4))  # (heads, seq, dim)
TOKEN = RNG.standard_normal((2, 1, 4))
HW = ringsim.get_hardware("a100-nvlink")
CONFIG = ringsim.RingConfig(hosts=2, seq_len=64, hardware=HW)
PARAMS = ringsim.init_params(8, 2, 2, 16)
XB = RNG.standard_normal((8, 8))  # (seq, d_model)
PART = ringsim.block_attention(X, X, X, scale=0.5)
DELTA = (X * X).sum(-1)
TIMELINE = ringsim.simulate(CONFIG, keep_timeline=True).timeline
# validate's rows: the paper's Table 2 only (a hostile experiments=None then times these ten,
# not all 171)
RING_T2 = tuple(r for r in DATASET if r.experiment == "ring-t2")

# a valid call of every public function: (args, kwargs); ``{trace}`` is a temporary file
VALID = {
    "allgather_attention": ((X, X, X), {"hosts": 2}),
    "allgather_attention_backward": ((X, X, X, X), {"hosts": 2}),
    "attention_call_seconds": (
        ("fa2", HW),
        dict(
            q_tokens=64,
            k_tokens=64,
            heads=2,
            kv_heads=2,
            head_dim=64,
            dtype="bf16",
            pass_="forward",
            mask="full",
        ),
    ),
    "attention_flops": ((64, 64, 2, 64), {}),
    "attention_working_set_bytes": ((64, 2, 2, 64, "bf16"), {}),
    "block_attention": ((X, X, X), {"scale": 0.5}),
    "block_attention_backward": ((X, X, X, X, PART.lse, DELTA), {"scale": 0.5}),
    "build_schedule": ((2,), {}),
    "chrome_trace": ((TIMELINE,), {}),
    "custom_hardware": ((1e12, 1e9), {}),
    "dense_block": ((XB, PARAMS), {}),
    "double_ring_attention": ((X, X, X), {"hosts": 2, "window": 1}),
    "double_ring_attention_backward": ((X, X, X, X), {"hosts": 2, "window": 1}),
    "error_growth": (([2],), {"seq_per_host": 4, "head_dim": 4}),
    "ffn_peak_bytes": ((64, 32), {}),
    "flash_window_size": ((4, True), {}),
    "from_layout": ((X, "zigzag", 2), {}),
    "get_cluster": (("dgx-h100",), {}),
    "get_family": (("fa2",), {}),
    "get_hardware": (("a100-nvlink",), {}),
    "get_layout": (("zigzag",), {}),
    "get_model": (("7b",), {}),
    "host_position_ids": (("zigzag", 2, 8), {}),
    "host_positions": (("zigzag", 2, 8), {}),
    "hybrid_attention": ((X, X, X), {"hosts": 2, "ulysses_degree": 2}),
    "hybrid_attention_backward": ((X, X, X, X), {"hosts": 2, "ulysses_degree": 2}),
    "init_params": ((8, 2, 2, 16), {}),
    "kv_block_bytes": ((64, 2, 64, "bf16"), {}),
    "layout_names": ((), {"documents": True}),
    "llama3_cu_seqlens": ((np.array([0, 3, 8]), 2, 1, True), {}),
    "llama3_varlen_attention": ((X, X, X), {"hosts": 2}),
    "llama3_varlen_attention_backward": ((X, X, X, X), {"hosts": 2}),
    "memory_report": (("7b", "a100-nvlink", 8), {}),
    "merge": ((PART, PART), {}),
    "overlap_threshold": ((HW,), {"heads": 2, "kv_heads": 2, "head_dim": 64, "dtype": "bf16"}),
    "pad_documents": ((np.array([0, 0, 1]), 2), {}),
    "parse_length": (("4K",), {}),
    "permutation": (("zigzag", 2, 8), {}),
    "reference_attention": ((X, X, X), {}),
    "reference_attention_grad": ((X, X, X, X), {}),
    "ring_attention": ((X, X, X), {"hosts": 2}),
    "ring_attention_backward": ((X, X, X, X), {"hosts": 2}),
    "ring_block": ((XB, PARAMS), {"hosts": 2}),
    "ring_decode": ((TOKEN, X, X), {"hosts": 2}),
    "round_to": ((X, "bf16"), {}),
    "simulate": ((CONFIG,), {}),
    "simulate_strategy": ((CONFIG, "allgather"), {}),
    "to_layout": ((X, "zigzag", 2), {}),
    "ulysses_attention": ((X, X, X), {"hosts": 2}),
    "ulysses_attention_backward": ((X, X, X, X), {"hosts": 2}),
    "validate": ((), {"rows": RING_T2, "experiments": ["ring-t2"]}),
    "waterfall": ((CONFIG,), {}),
    "write_chrome_trace": ((TIMELINE, "{trace}"), {}),
}
# ``plan`` times every candidate (seconds a call, too slow for thousands): its arguments are
# refused before work in tests/test_planner.py and the hostile PLAN_BAD cases; the layout
# registry's two functions change what every other call sees: test_the_layout_registry_refuses
NOT_HERE = {"plan", "register_layout", "unregister_layout"}
# keywords that ``**options`` passes on to ``hybrid_attention``, with their annotations
OPTIONS = {"causal": "bool", "layout": "str", "scale": "float | None", "placement": "str"}
FORWARD_OPTIONS = {**OPTIONS, "return_lse": "bool"}
# what a message may call an argument besides its own name
ALIASES = {"pass_": ("pass",), "hw": ("hardware",), "family": ("implementation",)}

HOSTILE = {
    "'false'": "false",
    "'no'": "no",
    "0": 0,
    "1": 1,
    "None": None,
    "-1": -1,
    "1.5": 1.5,
    "nan": float("nan"),
    "inf": float("inf"),
    "True": True,
    "''": "",
    "[]": [],
    "{}": {},
    "object()": object(),
    "array": np.array([1, 2]),
    "1e308": 1e308,
    "2**70": 2**70,
}


def public_functions() -> list[str]:
    return sorted(n for n in ringsim.__all__ if inspect.isfunction(getattr(ringsim, n)))


def test_every_public_function_has_a_valid_call_here():
    assert set(public_functions()) - NOT_HERE == set(VALID)


def _arguments(name: str) -> dict[str, str]:
    """``{argument: annotation}`` of a public function, with the ``**options`` it passes on."""
    fn = getattr(ringsim, name)
    found, options = {}, False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            options = True
        elif p.kind is not p.VAR_POSITIONAL:
            found[p.name] = str(p.annotation)
    if options and "attention" in name:
        found.update(FORWARD_OPTIONS if "backward" not in name else OPTIONS)
    return found


def _call(name: str, tmp_path, **replace):
    fn = getattr(ringsim, name)
    args, kwargs = VALID[name]
    args = [str(tmp_path / "t.json") if isinstance(a, str) and a == "{trace}" else a for a in args]
    bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    arguments = dict(bound.arguments)
    if "options" in arguments:  # **options: flatten them back into keywords
        arguments.update(arguments.pop("options"))
    arguments.update(replace)
    head = []  # positional arguments up to the first one left to its default
    for p in inspect.signature(fn).parameters.values():
        if p.kind is not p.POSITIONAL_OR_KEYWORD or p.name not in arguments:
            break
        head.append(arguments.pop(p.name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*head, **arguments)


def _must_refuse(annotation: str, value: object) -> bool:
    """What an argument of this annotation may never accept."""
    if value is None:
        return "None" not in annotation and annotation in ("bool", "int", "float")
    if annotation.startswith("bool"):
        return not isinstance(value, bool)
    if annotation.startswith("int"):
        return isinstance(value, bool | str | float | list | dict | np.ndarray)
    if annotation.startswith("float"):
        if isinstance(value, float):
            return not np.isfinite(value)
        return isinstance(value, bool | str | list | dict | np.ndarray)
    return False


def _check(name: str, argument: str, annotation: str, label: str, value, tmp_path) -> str | None:
    """None if the call held the property, else what went wrong."""
    try:
        _call(name, tmp_path, **{argument: value})
    except (ValueError, TypeError) as err:
        message = str(err).strip()
        said = (argument, argument.rstrip("_"), *ALIASES.get(argument, ()), repr(value))
        if "\n" in message or not any(s in message for s in said):
            return f"{name}({argument}={label}): {type(err).__name__} {message[:120]!r}"
        return None
    except Exception as err:
        return f"{name}({argument}={label}): {type(err).__name__}: {str(err)[:120]}"
    if _must_refuse(annotation, value):
        return f"{name}({argument}={label}): accepted"
    return None


@pytest.mark.parametrize("name", sorted(VALID))
def test_every_argument_refuses_each_hostile_value_by_name_or_works(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a path argument given a string writes here
    _call(name, tmp_path)  # the valid call works
    problems = [
        problem
        for argument, annotation in _arguments(name).items()
        for label, value in HOSTILE.items()
        if (problem := _check(name, argument, annotation, label, value, tmp_path))
    ]
    assert not problems, "\n".join(problems)


FLAGS = sorted(
    (name, argument)
    for name in VALID
    for argument, annotation in _arguments(name).items()
    if annotation == "bool"
)
NOT_BOOLS = st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=8), st.lists(st.booleans(), max_size=2)
)


@given(flag=st.sampled_from(FLAGS), value=NOT_BOOLS)
def test_a_flag_takes_only_a_bool(flag, value, tmp_path_factory):
    """(Each value is refused before any file is written, so the trace path stays unused.)"""
    name, argument = flag
    with pytest.raises(ValueError, match=rf"{argument} must be True or False"):
        _call(name, tmp_path_factory.mktemp("flag"), **{argument: value})


def test_the_new_strategies_refuse_what_the_ring_refuses():
    """Cases 11-16 of issue 26, each by name."""
    for call in (
        ringsim.hybrid_attention,
        ringsim.ulysses_attention,
        ringsim.allgather_attention,
        ringsim.double_ring_attention,
    ):
        kw = {
            "hosts": 2,
            **({"ulysses_degree": 2} if call is ringsim.hybrid_attention else {}),
            **({"window": 1} if call is ringsim.double_ring_attention else {}),
        }
        with pytest.raises(ValueError, match="causal must be True or False, got 'false'"):
            call(X, X, X, causal="false", **kw)
        with pytest.raises(ValueError, match="return_lse must be True or False, got 'no'"):
            call(X, X, X, return_lse="no", **kw)
    with pytest.raises(ValueError, match="causal must be True or False, got 0"):
        ringsim.hybrid_attention_backward(X, X, X, X, hosts=2, ulysses_degree=2, causal=0)
    with pytest.raises(ValueError, match="return_lse must be True or False, got 'no'"):
        ringsim.ring_attention(X, X, X, hosts=2, return_lse="no")
    out, lse = ringsim.ring_attention(X, X, X, hosts=2, return_lse=True)
    with pytest.raises(ValueError, match=r"out must have the shape of q \(2, 8, 4\)"):
        ringsim.ring_attention_backward(X, X, X, X, hosts=2, out=out[:, :4], lse=lse)
    with pytest.raises(ValueError, match=r"lse must be a float array of shape \(2, 8\)"):
        ringsim.ring_attention_backward(X, X, X, X, hosts=2, out=out, lse=lse[:, :3])
    with pytest.raises(ValueError, match="out needs lse too"):
        ringsim.ring_attention_backward(X, X, X, X, hosts=2, out=out)


OVERFLOWING = {
    "ring": lambda q, d: ringsim.ring_attention_backward(q, q, d, d, hosts=2, causal=True),
    "hybrid": lambda q, d: ringsim.hybrid_attention_backward(
        q, q, d, d, hosts=2, ulysses_degree=2, causal=True
    ),
    "ulysses": lambda q, d: ringsim.ulysses_attention_backward(q, q, d, d, hosts=2, causal=True),
    "allgather": lambda q, d: ringsim.allgather_attention_backward(
        q, q, d, d, hosts=2, causal=True
    ),
    "double ring": lambda q, d: ringsim.double_ring_attention_backward(
        q, q, d, d, hosts=2, window=1, causal=True
    ),
}


@pytest.mark.parametrize("strategy", sorted(OVERFLOWING))
def test_a_float16_gradient_past_its_range_is_refused_alike(strategy):
    """Zero scores, causal: key 0 is seen by every query, so its ``dv`` sums ``dout`` over
    ``N (1 + 1/2 + ... + 1/N)`` ~ 4.7 N / N of them: 2.8e5 > 65504, float16's largest."""
    q = np.zeros((2, 64, 4), np.float16)
    d = np.full((2, 64, 4), 6e4, np.float16)
    with pytest.raises(ValueError, match=r"dv overflowed in float16: \|dv\| reaches"):
        OVERFLOWING[strategy](q, d)
    ok = OVERFLOWING[strategy](q, d / np.float16(16))  # in range: every gradient finite
    assert all(g.dtype == np.float16 and np.all(np.isfinite(g)) for g in ok)


def test_decode_and_every_forward_refuse_float32_overflow_alike():
    big = np.full((2, 8, 4), 1e30, np.float32)
    calls = {
        "ring": lambda: ringsim.ring_attention(big, big, big, hosts=2),
        "hybrid": lambda: ringsim.hybrid_attention(big, big, big, hosts=2, ulysses_degree=2),
        "ulysses": lambda: ringsim.ulysses_attention(big, big, big, hosts=2),
        "allgather": lambda: ringsim.allgather_attention(big, big, big, hosts=2),
        "double ring": lambda: ringsim.double_ring_attention(big, big, big, hosts=2, window=1),
        "decode": lambda: ringsim.ring_decode(big[:, :1], big, big, hosts=2),
    }
    for call in calls.values():
        with np.errstate(all="ignore"), pytest.raises(ValueError, match="overflowed in float32"):
            call()


def test_the_layout_registry_refuses_what_it_cannot_hold():
    from ringsim.layouts import Contiguous

    with pytest.raises(TypeError, match="layout must be a Layout instance, got 'zigzag'"):
        ringsim.register_layout("zigzag")
    with pytest.raises(ValueError, match="'contiguous'"):
        ringsim.register_layout(Contiguous())  # the name is taken
    with pytest.raises(ValueError, match="layout 'no-such' is not registered"):
        ringsim.unregister_layout("no-such")
    assert "contiguous" in ringsim.LAYOUTS
