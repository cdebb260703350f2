"""How the tokens of a sequence are dealt to the hosts of the ring.

A layout is a permutation of token positions: host ``h`` holds the ``c = N / P`` positions in
row ``h`` of ``host_positions``, always in increasing order.

* ``contiguous``: host ``h`` holds ``[h c, (h + 1) c)`` (the paper's split).
* ``striped`` (Brandon et al., 2023): round robin, host ``h`` holds ``h, h + P, h + 2P, ...``.
* ``zigzag``: the sequence is cut into ``2P`` chunks; host ``h`` holds chunk ``h`` and its
  mirror ``2P - 1 - h`` (the context-parallel split used to train Llama 3).

Under a causal mask a contiguous split gives the last host ``P`` blocks of work and the first
only one; striped and zigzag give every host (almost) the same work at every step.
"""

from __future__ import annotations

import numpy as np

from ringsim.checks import check_choice, check_memory, check_positive_int

LAYOUTS = ("contiguous", "striped", "zigzag")


def check_layout(layout: object) -> str:
    return check_choice("layout", layout, LAYOUTS)


def check_seq_len(seq_len: object, hosts: int, layout: str) -> int:
    """The sequence must split evenly: ``P`` blocks, or ``2P`` chunks for zigzag."""
    seq_len = check_positive_int("seq_len", seq_len)
    parts = 2 * hosts if layout == "zigzag" else hosts
    if seq_len % parts:
        unit = f"2*hosts = {parts}" if layout == "zigzag" else f"hosts = {hosts}"
        raise ValueError(
            f"seq_len must be divisible by {unit} for the {layout} layout, got seq_len={seq_len}"
        )
    return seq_len


def host_positions(layout: str, hosts: int, seq_len: int) -> np.ndarray:
    """Global token positions held by each host: int64 ``(hosts, seq_len // hosts)``, sorted."""
    layout = check_layout(layout)
    hosts = check_positive_int("hosts", hosts)
    seq_len = check_seq_len(seq_len, hosts, layout)
    check_memory("seq_len", seq_len, 16 * seq_len, "the positions (two int64 per token)")
    tokens = np.arange(seq_len, dtype=np.int64)
    if layout == "contiguous":
        return tokens.reshape(hosts, -1)
    if layout == "striped":
        return np.ascontiguousarray(tokens.reshape(-1, hosts).T)
    chunks = tokens.reshape(2 * hosts, -1)
    return np.concatenate([chunks[:hosts], chunks[::-1][:hosts]], axis=1)


def permutation(layout: str, hosts: int, seq_len: int) -> np.ndarray:
    """``perm[i]`` is the original position of the ``i``-th token in layout (host-major) order."""
    return host_positions(layout, hosts, seq_len).reshape(-1)


def inverse_permutation(layout: str, hosts: int, seq_len: int) -> np.ndarray:
    """``inv[perm] = arange(N)``: takes layout order back to the original token order."""
    return np.argsort(permutation(layout, hosts, seq_len))


def to_layout(x: np.ndarray, layout: str, hosts: int) -> np.ndarray:
    """Reorder ``x`` ``(..., N, d)`` along the sequence axis into layout order."""
    x = _sequence_array(x)
    return np.take(x, permutation(layout, hosts, x.shape[-2]), axis=-2)


def from_layout(x: np.ndarray, layout: str, hosts: int) -> np.ndarray:
    """Undo ``to_layout``: back to the original token order."""
    x = _sequence_array(x)
    return np.take(x, inverse_permutation(layout, hosts, x.shape[-2]), axis=-2)


def _sequence_array(x: object) -> np.ndarray:
    """``x`` as an array ``(..., N, d)`` (any dtype: tokens are only moved)."""
    try:
        arr = np.asarray(x) if isinstance(x, np.ndarray | list | tuple) else None
    except ValueError:  # a ragged list
        arr = None
    if arr is None or arr.ndim < 2 or arr.dtype == object:
        shown = f"shape {arr.shape}" if arr is not None else repr(x)[:80]
        raise ValueError(f"x must be an array of shape (..., N, d), got {shown}")
    return arr


def positions_of_host(layout: str, hosts: int, seq_len: int, host: int) -> np.ndarray:
    """Row ``host`` of ``host_positions`` without building the others (cheap for huge N)."""
    layout = check_layout(layout)
    seq_len = check_seq_len(seq_len, hosts, layout)
    c = seq_len // hosts
    if layout == "contiguous":
        return np.arange(host * c, (host + 1) * c, dtype=np.int64)
    if layout == "striped":
        return np.arange(host, seq_len, hosts, dtype=np.int64)
    half = c // 2
    mirror = 2 * hosts - 1 - host
    return np.concatenate(
        [
            np.arange(host * half, (host + 1) * half, dtype=np.int64),
            np.arange(mirror * half, (mirror + 1) * half, dtype=np.int64),
        ]
    )
