"""The block kernels (Triton under TRITON_INTERPRET=1, and plain torch) against ringsim's exact
reference: every layout's positions, causal or not, GQA, segments, fully masked rows.

The interpreter runs each Triton program in NumPy, so shapes are small (blocks of 24 tokens
cut into 16-token tiles, so padding and tile skipping are exercised).
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import kernels
import ringsim
from kernels.blocks.dispatch import block_attention, block_attention_backward
from ringsim.masks import count_visible
from ringsim.numerics.attention import Partial, merge
from ringsim.numerics.attention import block_attention as np_block_attention

pytestmark = pytest.mark.torch


BACKENDS = ["torch", "triton"]
TOL = dict(atol=2e-5, rtol=2e-5)


def _qkv(rng, heads=2, kv_heads=1, seq=48, dim=8, batch=1):
    def draw(h):
        return torch.from_numpy(rng.standard_normal((batch, h, seq, dim)).astype(np.float32))

    return draw(heads), draw(kv_heads), draw(kv_heads), draw(heads)


def test_kernels_is_this_repository():
    repo = Path(__file__).resolve().parents[1]
    assert Path(kernels.__file__).resolve().parent == repo / "kernels"


@pytest.mark.parametrize("layout", ringsim.layout_names())
@pytest.mark.parametrize("causal", [False, True])
def test_triton_blocks_merged_over_a_ring_equal_reference(layout, causal):
    """Two hosts: every (query block, kv block) pair through the kernel, merged with the lse,
    equals dense attention; the backward from the final lse equals the exact gradients."""
    rng = np.random.default_rng(1)
    q, k, v, dout = _qkv(rng)
    pos = ringsim.host_positions(layout, 2, q.shape[-2])
    ref = ringsim.reference_attention(q.numpy(), k.numpy(), v.numpy(), causal=causal)
    ref_grads = ringsim.reference_attention_grad(
        q.numpy(), k.numpy(), v.numpy(), dout.numpy(), causal=causal
    )
    grads = [np.zeros(x.shape) for x in (q, k, v)]
    for i in range(2):
        qi, doi = q[..., pos[i], :], dout[..., pos[i], :]
        state = None
        parts = []
        for j in range(2):
            kw = dict(q_pos=pos[i], k_pos=pos[j], causal=causal, backend="triton")
            out, lse = block_attention(qi, k[..., pos[j], :], v[..., pos[j], :], **kw)
            part = Partial.from_out_lse(out.double().numpy(), lse.double().numpy())
            state = part if state is None else merge(state, part)
            parts.append(kw)
        np.testing.assert_allclose(state.out, ref[..., pos[i], :], **TOL)
        lse_i = torch.from_numpy(state.lse).float()
        out_i = torch.from_numpy(state.out).float()
        for j, kw in enumerate(parts):
            dq, dk, dv = block_attention_backward(
                qi, k[..., pos[j], :], v[..., pos[j], :], doi, out_i, lse_i, **kw
            )
            grads[0][..., pos[i], :] += dq.numpy()
            grads[1][..., pos[j], :] += dk.numpy()
            grads[2][..., pos[j], :] += dv.numpy()
    for got, want in zip(grads, ref_grads, strict=True):
        np.testing.assert_allclose(got, want, atol=5e-5, rtol=5e-5)


def _np_block(q, k, v, q_pos, k_pos, causal, q_seg=None, k_seg=None):
    part = np_block_attention(
        q.double().numpy(),
        k.double().numpy(),
        v.double().numpy(),
        scale=q.shape[-1] ** -0.5,
        q_pos=q_pos,
        k_pos=k_pos,
        causal=causal,
        q_seg=q_seg,
        k_seg=k_seg,
    )
    return part.out, part.lse


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_unsorted_positions_and_segments(backend):
    """Positions in any order and document ids: the mask rule, not the layout, decides."""
    rng = np.random.default_rng(2)
    q, k, v, _ = _qkv(rng, heads=3, kv_heads=3, seq=20, dim=16)
    k, v = k[..., :18, :], v[..., :18, :]  # cq != ck
    q_pos, k_pos = rng.permutation(40)[:20], rng.permutation(40)[:18]
    q_seg, k_seg = rng.integers(0, 3, 20), rng.integers(0, 3, 18)
    for causal in (False, True):
        for seg in ((None, None), (q_seg, k_seg)):
            out, lse = block_attention(
                q,
                k,
                v,
                q_pos=q_pos,
                k_pos=k_pos,
                causal=causal,
                q_seg=seg[0],
                k_seg=seg[1],
                backend=backend,
            )
            want_out, want_lse = _np_block(q, k, v, q_pos, k_pos, causal, *seg)
            np.testing.assert_allclose(out.numpy(), want_out, **TOL)
            np.testing.assert_array_equal(np.isneginf(lse.numpy()), np.isneginf(want_lse))
            live = np.isfinite(want_lse)
            np.testing.assert_allclose(lse.numpy()[live], want_lse[live], **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fully_masked_rows_give_zero_output_and_no_nan(backend):
    """Keys all in the future of some queries: those rows get lse=-inf, out=0, zero grads."""
    rng = np.random.default_rng(3)
    q, k, v, dout = _qkv(rng, heads=2, kv_heads=2, seq=20, dim=8)
    q_pos = np.arange(20)
    k_pos = np.arange(10, 30)  # queries 0..9 see nothing
    out, lse = block_attention(q, k, v, q_pos=q_pos, k_pos=k_pos, causal=True, backend=backend)
    assert torch.isneginf(lse[..., :10]).all() and torch.isfinite(lse[..., 10:]).all()
    assert (out[..., :10, :] == 0).all() and torch.isfinite(out).all()
    grads = block_attention_backward(
        q, k, v, dout, out, lse, q_pos=q_pos, k_pos=k_pos, causal=True, backend=backend
    )
    for g in grads:
        assert torch.isfinite(g).all()
    assert (grads[0][..., :10, :] == 0).all()
    # an entirely empty block (kv wholly in the future): nothing computed, nothing NaN
    out, lse = block_attention(
        q, k, v, q_pos=q_pos, k_pos=q_pos + 100, causal=True, backend=backend
    )
    assert torch.isneginf(lse).all() and (out == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_gqa_two_dim_and_batch_shapes(backend):
    rng = np.random.default_rng(4)
    q, k, v, dout = _qkv(rng, heads=4, kv_heads=2, seq=17, dim=5, batch=2)
    out, lse = block_attention(q, k, v, causal=True, backend=backend)
    assert out.shape == q.shape and lse.shape == q.shape[:-1]
    ref = ringsim.reference_attention(q.numpy(), k.numpy(), v.numpy(), causal=True)
    np.testing.assert_allclose(out.numpy(), ref, **TOL)
    grads = block_attention_backward(q, k, v, dout, out, lse, causal=True, backend=backend)
    want = ringsim.reference_attention_grad(
        q.numpy(), k.numpy(), v.numpy(), dout.numpy(), causal=True
    )
    for got, w in zip(grads, want, strict=True):
        assert got.shape == w.shape
        np.testing.assert_allclose(got.numpy(), w, atol=5e-5, rtol=5e-5)
    out2, lse2 = block_attention(q[0, 0], k[0, 0], v[0, 0], backend=backend)  # (c, d): one head
    ref2 = ringsim.reference_attention(q[0, 0].numpy(), k[0, 0].numpy(), v[0, 0].numpy())
    np.testing.assert_allclose(out2.numpy(), ref2, **TOL)
    assert lse2.shape == (17,)


@pytest.mark.parametrize("layout", ringsim.layout_names())
def test_tile_skipping_matches_the_cost_models_tile_count(layout):
    """The kernel visits, per query tile, the range [lo, hi) of key tiles; for every layout's
    sorted positions that range holds exactly the live tiles, and the live tiles cover exactly
    the pairs ``ringsim.masks.count_visible(tile=T)`` charges."""
    from kernels.blocks.args import check_block_args
    from kernels.blocks.tiles import live_tiles, tile_ranges

    tile, hosts, seq = 4, 4, 128
    pos = ringsim.host_positions(layout, hosts, seq)
    x = torch.zeros(1, 1, seq // hosts, 8)
    for i in range(hosts):
        for j in range(hosts):
            args = check_block_args(x, x, x, q_pos=pos[i], k_pos=pos[j], causal=True)
            live = live_tiles(args, tile, tile)
            lo, hi = tile_ranges(live)
            assert int((hi - lo).sum()) == int(live.sum())  # nothing dead inside a range
            want = count_visible(pos[i], pos[j], causal=True, tile=tile)
            assert int(live.sum()) * tile * tile == want


@given(
    seq=st.integers(1, 12),
    kv_seq=st.integers(1, 12),
    group=st.sampled_from([1, 2]),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_torch_backend_equals_numpy_block(seq, kv_seq, group, causal, seed):
    rng = np.random.default_rng(seed)
    q = torch.from_numpy(rng.standard_normal((group, seq, 4)).astype(np.float32))
    k = torch.from_numpy(rng.standard_normal((1, kv_seq, 4)).astype(np.float32))
    v = torch.from_numpy(rng.standard_normal((1, kv_seq, 4)).astype(np.float32))
    q_pos, k_pos = rng.integers(0, 20, seq), rng.integers(0, 20, kv_seq)
    out, lse = block_attention(q, k, v, q_pos=q_pos, k_pos=k_pos, causal=causal, backend="torch")
    want_out, want_lse = _np_block(q, k, v, q_pos, k_pos, causal)
    np.testing.assert_allclose(out.numpy(), want_out, **TOL)
    np.testing.assert_allclose(lse.numpy(), want_lse, **TOL)


def test_bad_arguments_name_the_argument():
    x = torch.zeros(2, 4, 8)
    with pytest.raises(ValueError, match="backend"):
        block_attention(x, x, x, backend="cuda")
    with pytest.raises(ValueError, match="q_pos"):
        block_attention(x, x, x, q_pos=np.arange(3))
    with pytest.raises(ValueError, match="heads"):
        block_attention(torch.zeros(3, 4, 8), x, x)
    with pytest.raises(ValueError, match="q_seg"):
        block_attention(x, x, x, q_seg=np.zeros(4, int))
    with pytest.raises(ValueError, match="q must be a float"):
        block_attention(x.int(), x, x)
    with pytest.raises(ValueError, match="scale"):
        block_attention(x, x, x, scale=float("nan"))


@pytest.mark.parametrize("layout", ringsim.layout_names())
def test_tiled_torch_path_skips_tiles_and_stays_exact(layout):
    """Small tiles (4 tokens) on every layout's diagonal and off-diagonal blocks, with
    segments: the tiled torch forward/backward equal the untiled one."""
    from kernels.blocks import torch_block
    from kernels.blocks.args import check_block_args

    rng = np.random.default_rng(5)
    q, k, v, dout = _qkv(rng, heads=2, kv_heads=1, seq=24, dim=4)
    pos = ringsim.host_positions(layout, 2, 48)
    seg = np.repeat(np.arange(4), 12)
    for i, j in ((0, 0), (1, 0), (0, 1), (1, 1)):
        for segs in ((None, None), (seg[pos[i]], seg[pos[j]])):
            args = check_block_args(
                q, k, v, q_pos=pos[i], k_pos=pos[j], causal=True, q_seg=segs[0], k_seg=segs[1]
            )
            out, lse = torch_block.forward(args, tile=4)
            want_out, want_lse = torch_block.forward(args, tile=24)
            torch.testing.assert_close(out, want_out)
            torch.testing.assert_close(lse, want_lse)
            delta = (dout * out).sum(-1)
            got = torch_block.backward(args, dout, lse, delta, tile=4)
            want = torch_block.backward(args, dout, lse, delta, tile=24)
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w)


# ------------------------------------------------------------------------------------------
# bf16 / fp16 in the interpreter (with tests/triton_shim.py installed by conftest)
# ------------------------------------------------------------------------------------------

# max |got - want| / max |want| against float64 attention of the *rounded* inputs. Measured at
# the GPU tiles, seq 128, d 64/128: bf16 2.0e-3..5.0e-3, fp16 0.9e-4..3.9e-4 (p and ds are
# rounded to the input dtype before their dots, as on a GPU). Tolerances keep a 4-5x margin.
LOW_PRECISION_TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _max_rel(got: torch.Tensor, want: np.ndarray) -> float:
    return float(np.abs(got.double().numpy() - want).max() / np.abs(want).max())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_low_precision_forward_backward_at_gpu_tiles_against_float64(dtype, head_dim, causal):
    """bf16/fp16 inputs, GQA (4 query heads on 2 kv heads), the tiles a GPU launch would use
    (``kernels.blocks.tiles.gpu_config``): out, lse and the three gradients within the stated
    tolerance of the float64 reference."""
    from kernels.blocks import triton_block
    from kernels.blocks.args import check_block_args
    from kernels.blocks.tiles import gpu_config

    rng = np.random.default_rng(7)
    q, k, v, dout = (
        torch.from_numpy(rng.standard_normal((1, h, 128, head_dim))).to(dtype) for h in (4, 2, 2, 4)
    )
    exact = [x.double().numpy() for x in (q, k, v, dout)]
    args = check_block_args(q, k, v, causal=causal)
    fwd_cfg = gpu_config(head_dim, "forward", dtype)  # an H100/H200's tiles, run interpreted
    bwd_cfg = gpu_config(head_dim, "backward", dtype)
    out, lse = triton_block.forward(args, dtype, fwd_cfg)
    assert out.dtype == dtype and lse.dtype == torch.float32
    delta = (dout.float() * out.float()).sum(-1)
    grads = triton_block.backward(args, dout, lse, delta, torch.float32, bwd_cfg)

    pos = np.arange(128)
    want_out, want_lse = _np_block(q, k, v, pos, pos, causal)
    want_grads = ringsim.reference_attention_grad(*exact, causal=causal)
    tol = LOW_PRECISION_TOL[dtype]
    assert _max_rel(out, want_out) <= tol
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=tol, rtol=0)
    for name, got, want in zip(("dq", "dk", "dv"), grads, want_grads, strict=True):
        assert _max_rel(got, want) <= tol, name


def test_low_precision_is_less_exact_than_fp32_and_bf16_less_than_fp16():
    """The tolerances above are not vacuous: fp32 inputs stay at rounding level, fp16 errors
    sit well below bf16's (3 fewer mantissa bits), and both well above fp32's."""
    rng = np.random.default_rng(8)
    base = [torch.from_numpy(rng.standard_normal((1, 2, 64, 32))) for _ in range(3)]
    errors = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        q, k, v = (x.to(dtype) for x in base)
        out, _ = block_attention(q, k, v, causal=True, backend="triton", out_dtype=torch.float32)
        want, _ = _np_block(q, k, v, np.arange(64), np.arange(64), True)
        errors[dtype] = _max_rel(out, want)
    assert errors[torch.float32] < 1e-5 < errors[torch.float16] < errors[torch.bfloat16] / 4


def test_bf16_dot_shim_is_installed_and_needed():
    """conftest installs tests/triton_shim.py; without it the interpreter's ``create_dot``
    multiplies bf16 bit patterns as integers (so every bf16 test above would fail)."""
    import triton.language as tl
    import triton_shim
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    assert triton_shim.installed()
    a = torch.tensor([[1.5, -2.0], [0.25, 3.0]], dtype=torch.bfloat16)
    b = torch.tensor([[2.0, 0.5], [-1.0, 4.0]], dtype=torch.bfloat16)
    want = (a.float() @ b.float()).numpy()
    handles = [TensorHandle(x.view(torch.uint16).numpy(), tl.bfloat16) for x in (a, b)]
    acc = TensorHandle(np.zeros((2, 2), np.float32), tl.float32)
    builder = InterpreterBuilder()
    shimmed = builder.create_dot(*handles, acc, "tf32", 0).data
    upstream = triton_shim.original_create_dot()(builder, *handles, acc, "tf32", 0).data
    np.testing.assert_array_equal(shimmed, want)  # exact: bf16 -> fp32 loses nothing
    assert np.abs(upstream - want).max() > 1e6  # raw bit patterns: if this fails, drop the shim


# ------------------------------------------------------------------------------------------
# Sizes the GPU would hit: grid, 32-bit offsets, positions beyond int32, reusable plans
# ------------------------------------------------------------------------------------------


def test_grid_folds_batch_and_heads_into_one_axis():
    """A 2-d grid's second axis stops at 65,535 programs; the kernels fold (batch, heads)
    into axis 0, whose limit is 2^31 - 1, and say so beyond it."""
    from kernels.blocks.tiles import grid

    assert grid(4, 70_000) == (280_000,)  # 70,000 (batch x heads) would not fit a grid's y
    with pytest.raises(ValueError, match="2\\^31"):
        grid(2**16, 2**15)


def test_a_head_too_large_for_32_bit_offsets_is_refused_before_any_copy():
    """One head of 2^31 elements or more: a clear ValueError naming the tensor (the tensors
    are expanded views, so nothing of that size is allocated)."""
    big = torch.zeros(1, dtype=torch.bfloat16).expand(1, 1, 2**15, 2**16)  # 2^31 per head
    small = torch.zeros(1, 1, 16, 2**16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q has 32768 tokens x head dim 65536"):
        block_attention(big, small, small, backend="triton")
    with pytest.raises(ValueError, match="k has 32768 tokens"):
        block_attention(small, big, big, backend="triton")


@pytest.mark.parametrize("backend", BACKENDS)
def test_positions_beyond_int32_mask_correctly(backend):
    """Global positions straddling 2^31 (a long packed stream): the kernels load them as int64,
    so the causal mask is the reference's (an int32 cast would wrap half of them negative)."""
    rng = np.random.default_rng(9)
    q, k, v, dout = _qkv(rng, heads=2, kv_heads=1, seq=24, dim=8)
    pos = 2**31 - 12 + np.arange(24)
    out, lse = block_attention(q, k, v, q_pos=pos, k_pos=pos, causal=True, backend=backend)
    want_out, want_lse = _np_block(q, k, v, pos, pos, True)
    np.testing.assert_allclose(out.numpy(), want_out, **TOL)
    np.testing.assert_allclose(lse.numpy(), want_lse, **TOL)
    grads = block_attention_backward(
        q, k, v, dout, out, lse, q_pos=pos, k_pos=pos, causal=True, backend=backend
    )
    want = ringsim.reference_attention_grad(
        *(x.double().numpy() for x in (q, k, v, dout)), causal=True
    )
    for got, w in zip(grads, want, strict=True):
        np.testing.assert_allclose(got.numpy(), w, atol=5e-5, rtol=5e-5)


def test_plan_made_once_gives_the_same_results_and_row_delta_is_rowsum():
    """What a timed loop does (gpu_check): the tile plan made outside the calls, ``delta``
    from ``row_delta``; identical to the one-shot calls."""
    from kernels.blocks import triton_block as tb
    from kernels.blocks.args import check_block_args

    rng = np.random.default_rng(10)
    q, k, v, dout = _qkv(rng, heads=4, kv_heads=2, seq=40, dim=16, batch=2)
    args = check_block_args(q, k, v, causal=True)
    out, lse = tb.forward(args)
    out_p, lse_p = tb.forward(args, tile_plan=tb.plan(args, "forward"))
    torch.testing.assert_close(out_p, out, rtol=0, atol=0)
    torch.testing.assert_close(lse_p, lse, rtol=0, atol=0)
    delta = tb.row_delta(out.to(torch.bfloat16), dout.to(torch.bfloat16))
    want = (out.to(torch.bfloat16).float() * dout.to(torch.bfloat16).float()).sum(-1)
    torch.testing.assert_close(delta, want, rtol=1e-5, atol=1e-5)
    grads = tb.backward(args, dout, lse, delta)
    grads_p = tb.backward(args, dout, lse, delta, tile_plan=tb.plan(args, "backward"))
    for g, gp in zip(grads, grads_p, strict=True):
        torch.testing.assert_close(gp, g, rtol=0, atol=0)
    with pytest.raises(ValueError, match="out and dout"):
        tb.row_delta(out, dout[..., :3, :])


def test_gpu_tiles_and_tile_candidates():
    """Each GPU's default tiles and search candidates (the ones kernels.gpu.aot compiles);
    fp32 gets smaller tiles than bf16 at d = 128; bad pass names are refused."""
    from kernels.blocks.tiles import gpu_config, tile_candidates

    bf16_fwd = gpu_config(128, "forward", torch.bfloat16)
    fp32_fwd = gpu_config(128, "forward", torch.float32)
    assert fp32_fwd.block_m * fp32_fwd.block_n < bf16_fwd.block_m * bf16_fwd.block_n
    assert gpu_config(128, "forward", torch.bfloat16, arch=80).num_stages == 2
    for arch in (80, 90):
        for d in (64, 128):
            tiles = tile_candidates(d, arch)
            assert gpu_config(d, "forward", torch.bfloat16, arch) in tiles
            assert len(set(tiles)) == len(tiles) >= 2
    assert tile_candidates(128, 100) == tile_candidates(128, 90)
    with pytest.raises(ValueError, match="pass_"):
        gpu_config(64, "sideways", torch.bfloat16)
