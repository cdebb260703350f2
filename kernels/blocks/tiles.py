"""Tiles of a block: their sizes on each GPU, and which of them can hold a visible pair.

Tile sizes
----------
``TileConfig`` is one launch's tiling (``block_m`` query rows by ``block_n`` keys, plus the
compiled kernel's ``num_warps`` and ``num_stages``). ``gpu_config`` is the default per pass and
input dtype; ``tile_candidates`` the forward tiles ``kernels.gpu.check``'s tile search may pick
on an architecture. Every one of them is compiled for sm_80 and sm_90 by ``kernels.gpu.aot``
(``tests/test_aot_compile.py``), which fails on shared memory over the architecture's limit and
on register spills; the numbers behind each choice are in ``results/aot-triton-3.9.json``.
Under Triton's CPU interpreter (no GPU) tiles are 16 x 16: it runs NumPy per tile.

Live tiles (the skipping rule of the kernels)
---------------------------------------------
A block is cut into tiles of ``block_m`` query rows by ``block_n`` keys along the hosts' local
(sorted) order. A tile is *live* when some pair in it may be visible under the rule of
``ringsim.masks``; the test uses only each tile's smallest and largest position (and document
id), so it never misses a visible pair and, for the sorted positions of every layout, never
keeps an empty tile either: the live tiles are exactly those ``ringsim.masks.count_visible``
charges with ``tile=T``. Both kernels (Triton and the tiled torch path) loop, per query tile,
over the range ``[lo, hi)`` of key tiles between its first and last live one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ringsim.schedule import RING_PASSES, Pass

if TYPE_CHECKING:
    from kernels.blocks.args import BlockArgs

INT32_LIMIT = 2**31  # offsets inside one head, and the grid's program count, stay below this


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes and launch parameters (``num_warps``/``num_stages`` matter only compiled)."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2


INTERPRETER_TILE = TileConfig(16, 16)


def gpu_config(head_dim: int, pass_: str, dtype: torch.dtype, arch: int = 90) -> TileConfig:
    """The default tiles on a GPU of compute capability ``arch`` (x10) for one pass and input
    dtype, chosen with ``kernels.gpu.aot`` so that no mask variant (full, causal, documents,
    GQA) spills registers on either arch (results/notes-kernels.md).

    bf16/fp16 forward: 128 x 64, 8 warps, 3 stages (2 on sm_80 at ``d = 128``). Backward:
    64 x 32 with 8 warps up to ``d = 64``, 32 x 32 with 4 warps at ``d = 128`` (the dk/dv
    kernel keeps two ``block_n x d`` fp32 accumulators beside k and v). fp32 inputs use
    ``tf32x3`` dots (three tf32 tensor-core products, about fp32 accuracy) whose operand splits
    need many registers: 32 x 32 up to ``d = 64``; at ``d = 128`` 16 x 32 forward and 16 x 16
    backward.
    """
    if pass_ not in RING_PASSES:
        raise ValueError(f"pass_ must be 'forward' or 'backward', got {pass_!r}")
    if dtype in (torch.float32, torch.float64):
        if head_dim <= 64:
            return TileConfig(32, 32, 4, 1)
        return TileConfig(16, 32, 4, 1) if pass_ == Pass.FORWARD else TileConfig(16, 16, 4, 1)
    if pass_ == Pass.FORWARD:
        return TileConfig(128, 64, 8, 2 if arch < 90 and head_dim > 64 else 3)
    return TileConfig(64, 32, 8, 2) if head_dim <= 64 else TileConfig(32, 32, 4, 2)


def default_config(
    head_dim: int, device: torch.device, pass_: str = "forward", dtype: torch.dtype = torch.bfloat16
) -> TileConfig:
    """``gpu_config`` for a CUDA device's arch; 16 x 16 tiles in the interpreter."""
    if device.type != "cuda":
        return INTERPRETER_TILE
    major, minor = torch.cuda.get_device_capability(device)
    return gpu_config(head_dim, pass_, dtype, 10 * major + minor)


# Forward tiles (block_m, block_n, warps, stages) for bf16/fp16 that the tile search may pick,
# each without spills in every mask variant (kernels.gpu.aot, results/aot-triton-3.9.json).
# Left out at d = 128: 128 x 128 with 3 stages (224-228 KB of shared memory: over sm_80's 163
# KB, and over sm_90's 227 KB with documents), 128 x 64 with 4 warps (spills; it was in the
# first search), and on sm_80 128 x 64 with 3 stages and 128 x 128 with 2 (spill when causal).
_CANDIDATES = {
    (80, 64): ((128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 3), (64, 64, 4, 3)),
    (80, 128): ((128, 64, 8, 2), (64, 64, 4, 3)),
    (90, 64): ((128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 3), (64, 64, 4, 3)),
    (90, 128): ((128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 2), (64, 64, 4, 3)),
}


def tile_candidates(head_dim: int, arch: int) -> list[TileConfig]:
    """Forward tiles (bf16/fp16) worth timing at ``head_dim`` on compute capability ``arch``
    (x10: 80 = A100, 90 = H100/H200); newer archs take sm_90's, older sm_80's."""
    if head_dim not in (64, 128):
        return [gpu_config(head_dim, "forward", torch.bfloat16)]
    key = (90 if arch >= 90 else 80, head_dim)
    return [TileConfig(*t) for t in _CANDIDATES[key]]


def _tile_min_max(values: torch.Tensor, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Smallest and largest value of each tile of ``tile`` consecutive entries."""
    pad = (-values.numel()) % tile
    padded = torch.cat([values, values[-1:].expand(pad)]).reshape(-1, tile)
    return padded.amin(dim=1), padded.amax(dim=1)


def live_tiles(args: BlockArgs, block_m: int, block_n: int) -> torch.Tensor:
    """Boolean ``(query tiles, key tiles)`` of a block: False only where no pair can be visible."""
    n_q = -(-args.q.shape[2] // block_m)
    n_k = -(-args.k.shape[2] // block_n)
    live = torch.ones(n_q, n_k, dtype=torch.bool, device=args.q.device)
    if args.causal:
        _, q_max = _tile_min_max(args.q_pos, block_m)
        k_min, _ = _tile_min_max(args.k_pos, block_n)
        live &= k_min[None, :] <= q_max[:, None]  # some key not after some query
    if args.q_seg is not None:
        qs_min, qs_max = _tile_min_max(args.q_seg, block_m)
        ks_min, ks_max = _tile_min_max(args.k_seg, block_n)
        live &= (ks_min[None, :] <= qs_max[:, None]) & (qs_min[:, None] <= ks_max[None, :])
    return live


def tile_ranges(live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``live``: ``[lo, hi)`` from its first to its last live column (0, 0 if none)."""
    n = live.shape[1]
    as_int = live.to(torch.int32)
    first = as_int.argmax(dim=1)
    last = n - 1 - as_int.flip(1).argmax(dim=1)
    any_live = live.any(dim=1)
    lo = torch.where(any_live, first, 0).to(torch.int32).contiguous()
    hi = torch.where(any_live, last + 1, 0).to(torch.int32).contiguous()
    return lo, hi


def check_sizes(args: BlockArgs) -> None:
    """``ValueError`` unless one head's ``c x d`` (q, k, v, out and gradients) stays below
    2^31 elements: offsets inside a head are 32-bit (a head's base offset is 64-bit)."""
    head_dim = args.q.shape[3]
    for name, seq in (("q", args.q.shape[2]), ("k", args.k.shape[2])):
        if seq * head_dim >= INT32_LIMIT:
            raise ValueError(
                f"{name} has {seq} tokens x head dim {head_dim} = {seq * head_dim} elements per "
                f"head; the Triton kernels need fewer than 2^31 per head (split the block)"
            )


def grid(tiles: int, batch_heads: int) -> tuple[int]:
    """The launch grid: tiles x (batch, heads) folded into axis 0 (its limit is 2^31 - 1; the
    second axis of a 2-d grid stops at 65,535)."""
    programs = tiles * batch_heads
    if programs >= INT32_LIMIT:
        raise ValueError(
            f"{tiles} tiles x {batch_heads} (batch x heads) = {programs} programs; a launch "
            "takes fewer than 2^31"
        )
    return (programs,)


@dataclass(frozen=True)
class TilePlan:
    """Host-side bookkeeping of a block pair, made once per (block pair, tiles): the tile
    ranges each program loops over and the mask inputs. Reusable across calls on the same
    ``BlockArgs`` (a timed loop makes it outside the timed region)."""

    config: TileConfig
    kv_lo: torch.Tensor  # (query tiles,) int32: key tiles [kv_lo, kv_hi) of each query tile
    kv_hi: torch.Tensor
    q_lo: torch.Tensor  # (key tiles,) int32: query tiles [q_lo, q_hi) of each key tile
    q_hi: torch.Tensor
    q_seg: torch.Tensor  # int64 document ids (the positions when there are none)
    k_seg: torch.Tensor
    has_seg: bool


def plan(args: BlockArgs, pass_: str = "forward", config: TileConfig | None = None) -> TilePlan:
    """Checks sizes, chooses tiles (``default_config`` unless given), finds the live ones."""
    check_sizes(args)
    head_dim = args.q.shape[3]
    cfg = config or default_config(head_dim, args.q.device, pass_, args.q.dtype)
    live = live_tiles(args, cfg.block_m, cfg.block_n)
    kv_lo, kv_hi = tile_ranges(live)
    q_lo, q_hi = tile_ranges(live.T)
    has_seg = args.q_seg is not None
    q_seg = args.q_seg.contiguous() if has_seg else args.q_pos
    k_seg = args.k_seg.contiguous() if has_seg else args.k_pos
    return TilePlan(cfg, kv_lo, kv_hi, q_lo, q_hi, q_seg, k_seg, has_seg)
