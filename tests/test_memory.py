"""Memory per host and the longest context per method (ringsim.timer.step.memory)."""

import itertools
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringsim.timer.cost import DTYPE_BYTES, attention_working_set_bytes
from ringsim.timer.machine.hardware import get_hardware
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step.footprint import step_bytes
from ringsim.timer.step.memory import (
    KERNEL_CHUNK,
    METHODS,
    STATE_BYTES_PER_PARAM,
    TOKEN_UNIT,
    bytes_per_host,
    max_context,
    memory_report,
    method_run,
    sequence_hosts,
)
from ringsim.timer.step.models import MODELS
from ringsim.timer.studies.published import PAPER_TABLE
from ringsim.timer.studies.validate import paper_comparison

A100 = get_hardware("a100-nvlink")


def big(memory_bytes: float):
    """An A100 with a different memory capacity."""
    return replace(A100, memory_bytes=memory_bytes)


# -- the models -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, params",
    [("3b", 3.43e9), ("7b", 6.74e9), ("13b", 13.0e9), ("30b", 32.5e9), ("65b", 65.2e9)],
)
def test_parameter_counts_match_llama(name, params):
    assert MODELS[name].params == pytest.approx(params, rel=0.01)


def test_head_dim_is_128_for_llama():
    for name in ("7b", "13b", "30b", "65b"):
        assert MODELS[name].head_dim == 128


# -- the components ---------------------------------------------------------------------------
def test_model_states_are_16_bytes_per_param_sharded_over_hosts():
    m = MODELS["7b"]
    for hosts in (1, 8, 64):
        parts = bytes_per_host("ring", "7b", 1024 * hosts, hosts)
        assert parts["model_states"] == pytest.approx(STATE_BYTES_PER_PARAM * m.params / hosts)


@given(
    model=st.sampled_from(["3b", "7b", "llama3-8b"]),
    hosts=st.sampled_from([2, 4, 8, 16]),
    method=st.sampled_from(["ring", "ulysses"]),
    dtype=st.sampled_from(["bf16", "fp32"]),
)
def test_memory_and_the_planner_agree_on_whether_the_same_run_fits(model, hosts, method, dtype):
    """`ringsim memory`'s longest context for a method is where the planner's sizing of that
    run (its Parallel, its strategy's working set, the framework's usable bytes) flips from
    fitting to not."""
    from ringsim.timer.step.frameworks import get_framework
    from ringsim.timer.step.models import get_model
    from ringsim.timer.studies.planner import AttentionTimer, _sized

    hw, fw = A100, get_framework("pytorch")
    n = max_context(method, model, hw, hosts, dtype=dtype, framework=fw)
    unit = TOKEN_UNIT * sequence_hosts(method, model, hosts)
    par = method_run(method, model, hosts, dtype=dtype)
    usable = fw.usable_bytes(hw.memory_bytes)
    cluster = get_cluster("dgx-a100").with_nodes(max(1, hosts // 8))
    for seq, fits in ((n, True), (n + unit, False)) if n else ((unit, False),):
        timer = AttentionTimer(
            get_model(model), seq, cluster, causal=True, dtype=dtype, implementation="ideal"
        )
        cand = _sized(get_model(model), par, seq, par.dp, "train", timer, usable, cluster)
        assert cand.fits is fits, (seq, cand.bytes_per_host, usable)


def test_ring_layer_working_set_is_the_planner_s_count_of_the_same_run():
    """One memory model: memory's ring is the planner's footprint of the same run (FSDP over
    all hosts, full recompute, the ring's working set, blockwise FFN and loss)."""
    m = MODELS["7b"]
    for dtype in DTYPE_BYTES:
        for hosts in (4, 16):
            seq = 8192 * hosts
            par = method_run("ring", "7b", hosts, dtype=dtype, batch=2)
            assert (par.cp, par.dp, par.sharding, par.recompute) == (hosts, 1, "zero3", "full")
            attention = METHODS["ring"].attention(m, seq, 2, DTYPE_BYTES[dtype], par)
            planner = step_bytes(m, par, seq, 1, attention)
            parts = bytes_per_host("ring", "7b", seq, hosts, dtype=dtype, batch=2)
            assert sum(parts.values()) == pytest.approx(sum(planner.values()), rel=1e-12)
            assert parts["layer_working_set"] == planner["layer_working_set"]


def test_baseline_working_sets_follow_table_1():
    m, s, e = MODELS["7b"], 65536, 2
    par = method_run("blockwise", "7b", 8)
    assert METHODS["blockwise"].attention(m, s, 1, e, par) == s * m.d_model * e  # 2bsh bytes
    # vanilla as the authors' code runs it: three fp32 score matrices (the paper's Table 1
    # counts one, 2bns^2 bytes in bf16), the fp32 bias and the boolean causal mask
    scores = 3 * m.heads * s * s * 4
    assert METHODS["vanilla"].attention(m, s, 1, e, par) == scores + s * s * 4 + s * s
    me = METHODS["memory_efficient"].attention(m, s, 1, e, par)
    assert me == (s * m.d_model + 2 * KERNEL_CHUNK * m.d_model) * e
    # the FFN part: the whole MLP intermediate rebuilt without blockwise, one chunk with it
    whole = bytes_per_host("memory_efficient", "7b", s, 8)["layer_working_set"] - me
    chunked = bytes_per_host("blockwise", "7b", s, 8)["layer_working_set"] - s * m.d_model * e
    mlp = 3 * e * m.ffn_hidden
    assert whole - chunked == pytest.approx(mlp * (s - KERNEL_CHUNK), rel=1e-12)


@pytest.mark.parametrize("method", ["ring", "ulysses"])
def test_sequence_split_halves_activations_when_hosts_double(method):
    s = 2**20
    one = bytes_per_host(method, "7b", s, 8)
    two = bytes_per_host(method, "7b", s, 16)  # 32 kv heads: Ulysses splits 16 ways too
    assert two["checkpoints"] == pytest.approx(one["checkpoints"] / 2)
    assert two["layer_working_set"] < 0.55 * one["layer_working_set"]


@pytest.mark.parametrize("method", ["vanilla", "memory_efficient", "blockwise"])
def test_single_device_methods_gain_only_from_sharded_states(method):
    one = bytes_per_host(method, "7b", 8192, 8)
    two = bytes_per_host(method, "7b", 8192, 16)
    assert two["model_states"] == pytest.approx(one["model_states"] / 2)
    for part in ("fsdp_layer", "checkpoints", "logits", "layer_working_set"):
        assert two[part] == one[part]


# -- the longest context ----------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_max_context_is_the_largest_that_fits(method):
    hosts = 16
    n = max_context(method, "7b", A100, hosts)
    unit = TOKEN_UNIT * sequence_hosts(method, "7b", hosts)
    assert n > 0 and n % unit == 0
    assert sum(bytes_per_host(method, "7b", n, hosts).values()) <= A100.memory_bytes
    assert sum(bytes_per_host(method, "7b", n + unit, hosts).values()) > A100.memory_bytes


def test_ring_context_grows_in_proportion_to_hosts():
    hw = big(1e12)  # model states small beside the budget
    contexts = [max_context("ring", "3b", hw, p) for p in (8, 16, 32, 64)]
    for small, large in itertools.pairwise(contexts):
        assert 2.0 <= large / small <= 2.02


def test_ring_is_hosts_times_its_own_block():
    report = memory_report("7b", A100, 32)
    assert report["max_context"]["ring"] == 32 * report["block_tokens"]
    assert report["block_tokens"] % TOKEN_UNIT == 0


def test_ulysses_stops_growing_at_the_head_count():
    heads = MODELS["7b"].n_kv_heads
    ring = {p: max_context("ring", "7b", A100, p) for p in (8, heads, 4 * heads)}
    ulysses = {p: max_context("ulysses", "7b", A100, p) for p in (8, heads, 4 * heads)}
    assert ulysses[heads] / ulysses[8] > 3.0  # split over more hosts while heads allow
    assert ring[4 * heads] / ring[heads] > 3.0
    assert ulysses[4 * heads] / ulysses[heads] < 1.05  # only the sharded states still shrink


def test_single_device_methods_do_not_scale_with_hosts():
    for method in ("vanilla", "memory_efficient", "blockwise"):
        few = max_context(method, "7b", A100, 8)
        many = max_context(method, "7b", A100, 256)
        assert few < many < 1.25 * few


def test_methods_rank_as_in_the_paper():
    c = memory_report("13b", A100, 8)["max_context"]
    assert c["vanilla"] < c["memory_efficient"] < c["blockwise"] < c["ring"]
    assert c["ring"] > 6 * c["blockwise"]


def test_nothing_fits_when_the_states_do_not():
    # 7B with Adam is 108 GB of states: not on one 80 GB device, for any method
    assert memory_report("7b", A100, 1)["max_context"] == dict.fromkeys(METHODS, 0)
    assert memory_report("7b", A100, 1)["bytes_per_host"] == {}


@given(
    model=st.sampled_from(sorted(MODELS)),
    hosts=st.integers(1, 300),
    method=st.sampled_from(list(METHODS)),
)
def test_more_hosts_never_shorten_the_context(model, hosts, method):
    hw = get_hardware("a100-ib")
    assert max_context(method, model, hw, hosts + 1) >= max_context(method, model, hw, hosts)


def test_fp32_halves_the_ring_context_roughly():
    hw = big(1e12)
    bf16 = max_context("ring", "7b", hw, 8, dtype="bf16")
    fp32 = max_context("ring", "7b", hw, 8, dtype="fp32")
    assert 0.45 < fp32 / bf16 < 0.7  # fp32 logits are the same size in both


def test_report_keys_and_totals():
    r = memory_report("13b", "a100-nvlink", 8)
    assert set(r["max_context"]) == set(METHODS)
    assert set(r["bytes_per_host"]) == {
        "model_states",
        "fsdp_layer",
        "checkpoints",
        "logits",
        "layer_working_set",
    }
    assert r["total_bytes_per_host"] == pytest.approx(sum(r["bytes_per_host"].values()))
    assert r["total_bytes_per_host"] <= r["device_bytes"]
    assert (r["hosts"], r["model"], r["hardware"]) == (8, "13b", "a100-nvlink")


# -- the paper's table ------------------------------------------------------------------------
def test_paper_table_ring_is_hosts_times_blockwise():
    for row in PAPER_TABLE:
        k = row["max_context_k"]
        assert k["vanilla"] <= k["memory_efficient"] <= k["blockwise"] < k["ring"]
    a100 = [r for r in PAPER_TABLE if "A100" in r["hardware"]]
    assert all(
        r["max_context_k"]["ring"] == r["hosts"] * r["max_context_k"]["blockwise"] for r in a100
    )


def test_our_ring_to_blockwise_ratio_tracks_the_papers():
    rows = paper_comparison()
    assert {(r["hosts"], r["model"]) for r in rows} == {
        (8, "3b"),
        (8, "7b"),
        (8, "13b"),
        (32, "7b"),
        (32, "13b"),
    }
    for r in rows:
        ours = r["ours_k"]["ring"] / r["ours_k"]["blockwise"]
        assert 0.7 * r["hosts"] < ours <= r["hosts"]


# -- the attention layer's working set --------------------------------------------------------
@pytest.mark.parametrize("pass_", ["forward", "backward", "train-step", "decode"])
def test_working_set_halves_when_hosts_double(pass_):
    seq = 2**20
    sizes = [
        attention_working_set_bytes(seq // p, 32, 8, 128, "bf16", pass_=pass_) for p in (8, 16)
    ]
    assert sizes[1] == pytest.approx(sizes[0] / 2, rel=1e-3)


def test_working_set_forward_counts_blocks():
    c, h, d = 4096, 32, 128
    got = attention_working_set_bytes(c, h, h, d, "bf16", batch=3)
    q = c * h * d * 2
    # q, out, current + incoming (k, v), fp32 accumulator (4cHd), row_max and row_sum (4cH each)
    expected = 3 * (2 * q + 4 * q + 4 * c * h * d + 2 * 4 * c * h)
    assert got == expected


def test_working_set_grows_with_the_pass_and_shrinks_with_gqa():
    args = (8192, 32, 32, 128, "bf16")
    fwd = attention_working_set_bytes(*args)
    bwd = attention_working_set_bytes(*args, pass_="backward")
    assert bwd > fwd
    assert attention_working_set_bytes(8192, 32, 8, 128, "bf16") < fwd
    assert attention_working_set_bytes(*args, pass_="decode") < fwd


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: memory_report("8b", A100, 8), "8b"),
        (lambda: memory_report("7b", A100, 0), "hosts"),
        (lambda: memory_report("7b", A100, 8, dtype="int8"), "int8"),
        (lambda: bytes_per_host("sparse", "7b", 1024, 8), "sparse"),
        (lambda: bytes_per_host("ring", "7b", -5, 8), "seq_len"),
        (lambda: attention_working_set_bytes(0, 32, 32, 128, "bf16"), "block_tokens"),
        (lambda: attention_working_set_bytes(64, 32, 32, 128, "bf16", pass_="sideways"), "side"),
    ],
)
def test_bad_input_names_the_value(call, word):
    with pytest.raises(ValueError, match=word):
        call()


# -- Llama 3 (GQA) and the models module ------------------------------------------------------
@pytest.mark.parametrize(
    "name, params", [("llama3-8b", 8.03e9), ("llama3-70b", 70.6e9), ("llama3-405b", 405.9e9)]
)
def test_llama3_parameter_counts_match_the_release(name, params):
    assert MODELS[name].params == pytest.approx(params, rel=0.01)


def test_llama3_models_set_the_ring_config_fields():
    from ringsim.timer.step.models import model_fields

    assert model_fields("llama3-70b") == {
        "heads": 64,
        "kv_heads": 8,
        "head_dim": 128,
        "d_model": 8192,
        "ffn": 28672 * 3 // 2,  # SwiGLU's three matrices as a two-matrix MLP's FLOPs
    }


def test_gqa_ring_fits_more_than_the_same_width_with_full_heads():
    mha = replace(MODELS["llama3-8b"], name="mha", kv_heads=None)
    gqa = max_context("ring", "llama3-8b", "h100-nvlink", 8)
    assert gqa > max_context("ring", mha, "h100-nvlink", 8)


# -- the framework overhead -------------------------------------------------------------------
def test_framework_none_is_the_pure_tensor_bound():
    for method in METHODS:
        assert max_context(method, "7b", A100, 8) == max_context(
            method, "7b", A100, 8, framework="none"
        )


def test_framework_leaves_less_memory_and_shorter_contexts():
    from ringsim.timer.step.frameworks import FRAMEWORKS

    for name in ("pytorch", "jax"):
        usable = FRAMEWORKS[name].usable_bytes(80e9)
        assert 0.7 * 80e9 < usable < 0.9 * 80e9  # 15% fragmentation and some GB fixed
        for method in METHODS:
            ours = max_context(method, "7b", A100, 8, framework=name)
            assert ours < max_context(method, "7b", A100, 8)


def test_framework_usable_bytes_formula():
    from ringsim.timer.step.frameworks import Framework

    fw = Framework("t", pool_fraction=0.5, fixed_bytes=10.0, fragmentation=0.2)
    assert fw.usable_bytes(100.0) == pytest.approx(0.5 * 100 * 0.8)  # the pool cap binds
    assert fw.usable_bytes(15.0) == pytest.approx(5 * 0.8)  # the fixed bytes bind
    assert fw.usable_bytes(5.0) == 0.0


def test_report_has_both_bounds_and_the_framework():
    r = memory_report("llama3-8b", "h800-nvlink", 8)
    assert r["framework"] == "pytorch"
    assert r["usable_bytes"] < r["device_bytes"]
    for method in METHODS:
        assert r["max_context"][method] <= r["max_context_tensors"][method]
    assert r["total_bytes_per_host"] <= r["usable_bytes"]
    assert memory_report("7b", "tpu-v4", 8)["framework"] == "none"


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"pool_fraction": 0.0}, "pool_fraction"),
        ({"pool_fraction": 1.5}, "pool_fraction"),
        ({"fragmentation": 1.0}, "fragmentation"),
        ({"fixed_bytes": -1.0}, "fixed_bytes"),
    ],
)
def test_bad_framework_names_the_field(kwargs, word):
    from ringsim.timer.step.frameworks import Framework

    with pytest.raises(ValueError, match=word):
        Framework("bad", **kwargs)
    with pytest.raises(ValueError, match="framework"):
        max_context("ring", "7b", A100, 8, framework="tensorflow")
