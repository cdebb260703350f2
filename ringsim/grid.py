"""How ``U x R`` hosts are numbered when Ulysses and a ring share them (USP's hybrid).

Ulysses group ``j`` (``U`` hosts) holds ring slot ``j``'s tokens, split by heads; ring group ``u``
(``R`` hosts, in ring order) holds head group ``u``. ``placement`` says which groups sit on
consecutive ranks: ``"ulysses-inner"`` puts each Ulysses group on neighbours (inside a node),
``"ring-inner"`` each ring group. The numerics, the timer and the real backend all number hosts
with this one ``Grid``, check the Ulysses degree with ``check_ulysses_degree`` and split the
heads with ``head_groups``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ringsim.layouts import Layout, host_positions

PLACEMENTS = ("ulysses-inner", "ring-inner")


@dataclass(frozen=True)
class Grid:
    """``U x R`` hosts: ``rank(u, j)`` is the host of head group ``u`` and ring slot ``j``."""

    ulysses: int
    ring: int
    placement: str = "ulysses-inner"

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}"
            )

    def rank(self, u: int, j: int) -> int:
        return j * self.ulysses + u if self.placement == "ulysses-inner" else u * self.ring + j

    def ulysses_group(self, j: int) -> list[int]:
        """The ``U`` hosts that share ring slot ``j``'s tokens (one all-to-all group)."""
        return [self.rank(u, j) for u in range(self.ulysses)]

    def ring_group(self, u: int) -> list[int]:
        """The ``R`` hosts of head group ``u``, in ring order."""
        return [self.rank(u, j) for j in range(self.ring)]

    @property
    def ulysses_groups(self) -> list[list[int]]:
        return [self.ulysses_group(j) for j in range(self.ring)]

    @property
    def ring_groups(self) -> list[list[int]]:
        return [self.ring_group(u) for u in range(self.ulysses)]

    def positions(
        self, layout: str | Layout, seq_len: int, segment_ids: np.ndarray | None = None
    ) -> np.ndarray:
        """``(P, N / P)`` token positions each host starts with (sorted): piece ``u`` of slot
        ``j``'s tokens for host ``(u, j)`` (``segment_ids``: the documents, for a layout that
        deals by them)."""
        slots = host_positions(layout, self.ring, seq_len, segment_ids)
        pieces = slots.reshape(self.ring, self.ulysses, -1)
        out = np.empty((self.ring * self.ulysses, pieces.shape[-1]), np.int64)
        for j in range(self.ring):
            for u in range(self.ulysses):
                out[self.rank(u, j)] = pieces[j, u]
        return out


def check_ulysses_degree(hosts: int, kv_heads: int, ulysses_degree: object) -> int:
    """``ulysses_degree`` if it divides ``hosts`` and gives each host whole key/value heads
    (``U <= kv_heads``); beside a ring (``1 < U < hosts``) it must divide ``kv_heads`` so every
    ring group runs whole, equal heads. ``ValueError`` naming it otherwise."""
    if isinstance(ulysses_degree, bool) or not isinstance(ulysses_degree, int | np.integer):
        raise ValueError(f"ulysses_degree must be a positive integer, got {ulysses_degree!r}")
    u = int(ulysses_degree)
    if u <= 0 or hosts % u:
        raise ValueError(f"ulysses_degree must divide hosts={hosts}, got ulysses_degree={u}")
    if u > kv_heads:
        raise ValueError(
            f"ulysses_degree={u} exceeds kv_heads={kv_heads}: Ulysses gives each host whole "
            f"key/value heads; use ulysses_degree <= {kv_heads}"
        )
    if 1 < u < hosts and kv_heads % u:
        raise ValueError(
            f"ulysses_degree={u} must divide kv_heads={kv_heads} when a ring runs beside it"
        )
    return u


def head_groups(heads: int, kv_heads: int, ulysses: int) -> list[tuple[slice, slice]]:
    """``(query heads, kv heads)`` of each head group: the kv heads dealt in ``U`` runs (the
    first ``kv_heads % U`` one longer), each with the query heads that share them (GQA). The
    exact executor, the real backend and the timer split heads by this one rule."""
    sizes = kv_heads // ulysses + (np.arange(ulysses) < kv_heads % ulysses)
    group = heads // kv_heads
    ends = np.cumsum(sizes)
    return [
        (slice(int(a) * group, int(b) * group), slice(int(a), int(b)))
        for a, b in zip(ends - sizes, ends, strict=True)
    ]
