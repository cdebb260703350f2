"""The precision lab: exact bf16/fp16 rounding, and ring error growth with the host count."""

import ml_dtypes
import numpy as np
import pytest

from ringsim.numerics.precision import error_growth
from ringsim.numerics.rounding import relative_error, round_to


def round_by_definition(x: np.ndarray, mantissa_bits: int, min_exp: int, max_finite: float):
    """Round float64 ``x`` to a binary format from its definition: nearest, ties to even.

    ``x = m * 2**e`` with the ulp ``2**(max(e, min_exp) - mantissa_bits)``; the quotient by a
    power of two is exact in float64 and ``np.round`` rounds halves to even. Results above the
    largest finite value (after rounding) become inf.
    """
    x = np.asarray(x, dtype=np.float64)
    _, e = np.frexp(x)  # x = f * 2**e with 0.5 <= |f| < 1, so the leading bit is 2**(e-1)
    ulp = np.ldexp(1.0, np.maximum(e - 1, min_exp) - mantissa_bits)
    r = np.round(x / ulp) * ulp
    r = np.where(np.abs(r) > max_finite, np.copysign(np.inf, x), r)
    return np.where(np.isfinite(x), r, x)


BF16 = {"mantissa_bits": 7, "min_exp": -126, "max_finite": float(ml_dtypes.finfo("bfloat16").max)}
FP16 = {"mantissa_bits": 10, "min_exp": -14, "max_finite": 65504.0}

EDGES_F32 = np.array(
    [
        0.0,
        -0.0,
        1.0,
        1 + 2**-8,  # exact tie between 1 and 1 + 2**-7: to even (1)
        1 + 3 * 2**-8,  # exact tie: to even (1 + 2**-6)
        -(1 + 2**-8),
        1 + 2**-8 + 2**-20,  # just above the tie: up
        np.inf,
        -np.inf,
        np.finfo(np.float32).max,  # rounds past the largest bf16: inf
        float(ml_dtypes.finfo("bfloat16").max),
        np.finfo(np.float32).tiny,
        np.finfo(np.float32).smallest_subnormal,
        2.0**-133,  # the smallest bf16 subnormal
        3 * 2.0**-135,
        65504.0,
        65519.0,
        65520.0,  # fp16 tie at the top: to even, which is inf
        6e-8,
        -1e-7,
    ],
    dtype=np.float32,
)


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (so -0.0 differs from 0.0), except that any NaN matches any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype
    nan = np.isnan(a)
    unsigned = f"u{a.itemsize}"
    return bool(
        np.array_equal(nan, np.isnan(b))
        and np.array_equal(a[~nan].view(unsigned), b[~nan].view(unsigned))
    )


def random_float32_bits(n: int, seed: int) -> np.ndarray:
    """Every float32 bit pattern is equally likely: NaNs, infs, subnormals, ties included."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def random_ties(n: int, seed: int, drop_bits: int) -> np.ndarray:
    """float32 values exactly halfway between two representable values of the narrow type."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0x00800000, 0x7F000000, size=n, dtype=np.uint64).astype(np.uint32)
    half = np.uint32(1 << (drop_bits - 1))
    bits = (bits & ~np.uint32((1 << drop_bits) - 1)) | half
    return bits.view(np.float32)


# --------------------------------------------------------------------------------------------
# bf16: bit-exact against ml_dtypes and against the definition
# --------------------------------------------------------------------------------------------


def test_bf16_matches_ml_dtypes_on_every_kind_of_float32():
    x = np.concatenate([random_float32_bits(200_000, 0), random_ties(20_000, 1, 16), EDGES_F32])
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert bits_equal(round_to(x, "bf16"), expected)


def test_bf16_matches_ml_dtypes_on_float64_inputs():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(50_000) * 10.0 ** rng.integers(-45, 45, 50_000)
    x = np.concatenate([x, EDGES_F32.astype(np.float64), [1e39, -1e39, 1e-50]])
    with np.errstate(over="ignore"):
        expected = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    got = round_to(x, "bf16")
    assert got.dtype == np.float64
    assert bits_equal(got, expected)


def test_bf16_matches_the_definition():
    x = np.concatenate([random_float32_bits(100_000, 3), random_ties(10_000, 4, 16), EDGES_F32])
    x = x[~np.isnan(x)]
    expected = round_by_definition(x, **BF16).astype(np.float32)
    assert bits_equal(round_to(x, "bf16"), expected)


def test_bf16_edge_values():
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, np.inf, -np.inf, 3.4e38, 2.0**-133, 2.0**-135])
    x = x.astype(np.float32)
    got = round_to(x, "bf16")
    want = [1.0, 1 + 2**-6, np.inf, -np.inf, np.inf, 2.0**-133, 0.0]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.float32))
    assert np.isnan(round_to(np.array([np.nan], np.float32), "bf16")).all()
    signalling_nan = np.array([0x7F800001], np.uint32).view(np.float32)
    assert np.isnan(round_to(signalling_nan, "bf16")).all()


# --------------------------------------------------------------------------------------------
# fp16 and the other precisions
# --------------------------------------------------------------------------------------------


def test_fp16_matches_the_definition():
    rng = np.random.default_rng(5)
    wide = (rng.standard_normal(100_000) * 2.0 ** rng.integers(-30, 20, 100_000)).astype(np.float32)
    x = np.concatenate([wide, random_ties(10_000, 6, 13) * np.float32(2.0**-100), EDGES_F32])
    got = round_to(x, "fp16")
    expected = round_by_definition(x, **FP16).astype(np.float32)
    assert bits_equal(got, expected)


def test_fp16_edges_and_dtype_preserved():
    x = np.array([65504.0, 65519.0, 65520.0, -7e4, 2.0**-24, 2.0**-26, 1 + 2**-11])
    got = round_to(x, "fp16")
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, [65504.0, 65504.0, np.inf, -np.inf, 2.0**-24, 0.0, 1.0])


def test_fp32_and_exact_precisions():
    x = np.array([1 + 2**-30, np.pi, -np.inf])
    assert round_to(x, None) is x
    assert round_to(x, "fp64") is x
    np.testing.assert_array_equal(round_to(x, "fp32"), x.astype(np.float32).astype(np.float64))


def test_relative_error_is_row_wise():
    ref = np.array([[3.0, 4.0], [0.0, 0.0]])
    out = np.array([[3.0, 4.5], [0.0, 0.25]])
    np.testing.assert_allclose(relative_error(out, ref), [0.1, 0.25])


# --------------------------------------------------------------------------------------------
# Error growth on the ring
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("causal", "min_ratio"), [(False, 2.0), (True, 1.8)])
def test_bf16_accumulator_error_grows_with_hosts(causal, min_ratio):
    # the running output kept in bf16 is rounded once per ring step: 16x more steps should give
    # ~sqrt(16) = 4x the error (a random walk); measured 2.3-3.6x over seeds 0-7, so >= 1.8-2
    small, large = error_growth(
        [2, 32], seq_per_host=16, head_dim=32, accum_dtype="bf16", seed=0, causal=causal
    )
    assert (small["seq_len"], large["seq_len"]) == (32, 512)
    assert large["mean_rel_error"] > min_ratio * small["mean_rel_error"]
    assert large["max_rel_error"] > min_ratio * small["max_rel_error"]
    assert small["mean_rel_error"] > 2**-12  # the rounding really happened


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("causal", [False, True])
def test_fp32_accumulation_stays_accurate_at_64_hosts(dtype, causal):
    (row,) = error_growth(
        [64], seq_per_host=16, head_dim=32, accum_dtype="fp32", dtype=dtype, causal=causal
    )
    assert row["hosts"] == 64
    assert row["max_rel_error"] <= 1e-5


def test_fp32_is_far_more_accurate_than_bf16_partials():
    (bf16,) = error_growth([8], seq_per_host=16, head_dim=16, partial_dtype="bf16", seed=1)
    (fp32,) = error_growth([8], seq_per_host=16, head_dim=16, seed=1)
    assert 2**-12 < bf16["mean_rel_error"] < 2**-4
    assert fp32["max_rel_error"] < 1e-3 * bf16["mean_rel_error"]


def test_error_growth_is_deterministic():
    kwargs = {"seq_per_host": 8, "head_dim": 8, "accum_dtype": "bf16", "seed": 3}
    assert error_growth([1, 4], **kwargs) == error_growth([1, 4], **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hosts_list": [0]}, "hosts"),
        ({"hosts_list": []}, "hosts_list"),
        ({"hosts_list": [2], "seq_per_host": 0}, "seq_per_host"),
        ({"hosts_list": [2], "accum_dtype": "bf8"}, "accum_dtype"),
        ({"hosts_list": [2], "dtype": "int8"}, "dtype"),
        ({"hosts_list": [2], "layout": "spiral"}, "layout"),
    ],
)
def test_error_growth_rejects_bad_arguments(kwargs, match):
    hosts_list = kwargs.pop("hosts_list")
    with pytest.raises(ValueError, match=match):
        error_growth(hosts_list, **kwargs)
