"""Decoding with a sharded KV cache: one new token against a cache spread over ``P`` hosts.

At decode time there is one query token and a long key/value cache. Nothing needs to travel
around a ring: each host keeps its contiguous shard of the cache, scores the (broadcast) query
against it and returns a ``Partial`` (``acc``, ``row_max``, ``row_sum``: a few numbers per head,
not its shard). The partials are then merged, which gives exact attention because ``merge`` is
the online-softmax rescale and is associative and commutative.

The merge here is a **tree**: round ``r`` merges pairs of neighbouring partials, so ``P``
partials need ``ceil(log2 P)`` rounds (an all-reduce would do the same), instead of ``P - 1``
sequential merges. No mask is needed: the new token is the newest position and sees the whole
cache.
"""

from __future__ import annotations

import numpy as np

from ringsim.checks import check_bool, check_positive_int, check_qkv, check_scale, checked_result
from ringsim.numerics.attention import Partial, _block_attention, _merge


def cache_shards(cache_len: int, hosts: int) -> list[tuple[int, int]]:
    """Contiguous near-equal shards ``[(start, stop), ...]`` of a cache of ``cache_len`` tokens.

    The first ``cache_len % hosts`` hosts hold one token more; every host holds at least one.
    """
    cache_len = check_positive_int("cache_len", cache_len)
    hosts = check_positive_int("hosts", hosts)
    if hosts > cache_len:
        raise ValueError(
            f"hosts must not exceed the cache length (every host needs at least one token), "
            f"got hosts={hosts} and cache length={cache_len}"
        )
    base, extra = divmod(cache_len, hosts)
    sizes = [base + (h < extra) for h in range(hosts)]
    stops = np.cumsum(sizes)
    return [(int(stop - size), int(stop)) for size, stop in zip(sizes, stops, strict=True)]


def tree_merge(partials: list[Partial]) -> tuple[Partial, int]:
    """Merge partials pairwise, level by level; returns ``(merged, depth)``.

    ``depth`` is the number of merge rounds, ``ceil(log2(len(partials)))``.
    """
    if not partials:
        raise ValueError("partials must hold at least one Partial, got an empty list")
    level, depth = list(partials), 0
    while len(level) > 1:
        pairs = [_merge(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = pairs + level[len(pairs) * 2 :]
        depth += 1
    return level[0], depth


def ring_decode(
    q_token: np.ndarray,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    *,
    hosts: int,
    scale: float | None = None,
    return_partials: bool = False,
) -> np.ndarray | tuple[np.ndarray, list[Partial]]:
    """Attention of one new token against a KV cache sharded over ``hosts`` hosts.

    ``q_token``: ``(..., Hq, 1, d)``; ``k_cache``, ``v_cache``: ``(..., Hkv, L, d)`` with ``Hq``
    a multiple of ``Hkv`` (GQA). Host ``h`` holds the contiguous shard ``cache_shards(L,
    hosts)[h]``. Returns the output ``(..., Hq, 1, d)`` in the dtype of ``q_token``; with
    ``return_partials`` also the list of per-host ``Partial`` (working dtype: float64 for
    float64 inputs, float32 otherwise), in host order.
    """
    q_token, k_cache, v_cache = check_qkv(
        q_token, k_cache, v_cache, names=("q_token", "k_cache", "v_cache")
    )
    return_partials = check_bool("return_partials", return_partials)
    if q_token.shape[-2] != 1:
        raise ValueError(
            f"q_token must hold one token, shape (..., Hq, 1, d), got shape {q_token.shape}"
        )
    hosts = check_positive_int("hosts", hosts)
    scale = check_scale(scale, q_token.shape[-1])
    # an overflow shows up as a non-finite output, refused below with a clear message
    with np.errstate(over="ignore", invalid="ignore"):
        partials = [
            _block_attention(
                q_token, k_cache[..., start:stop, :], v_cache[..., start:stop, :], scale=scale
            )
            for start, stop in cache_shards(k_cache.shape[-2], hosts)
        ]
        merged, _ = tree_merge(partials)
    out = checked_result("attention", merged.out, q_token.dtype, lse=merged.lse)
    return (out, partials) if return_partials else out
