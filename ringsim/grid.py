"""How ``U x R`` hosts are numbered when Ulysses and a ring share them (USP's hybrid).

Ulysses group ``j`` (``U`` hosts) holds ring slot ``j``'s tokens, split by heads; ring group ``u``
(``R`` hosts, in ring order) holds head group ``u``. ``placement`` says which groups sit on
consecutive ranks: ``"ulysses-inner"`` puts each Ulysses group on neighbours (inside a node),
``"ring-inner"`` each ring group. The numerics, the timer and the real backend all number hosts
with this one ``Grid``, check the Ulysses degree with ``check_ulysses_degree`` (which also
states when a degree above the key/value heads replicates them: ``kv_replicas``) and split the
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


def check_ulysses_degree(
    hosts: int, kv_heads: int, ulysses_degree: object, *, heads: int | None = None
) -> int:
    """``ulysses_degree`` ``U`` if it divides ``hosts`` and deals the key/value heads; a
    ``ValueError`` naming it otherwise.

    * ``U <= kv_heads``: each host gets whole kv heads; beside a ring (``1 < U < hosts``) ``U``
      must divide ``kv_heads`` so every ring group runs whole, equal heads.
    * ``U > kv_heads`` (KV replication): each kv head is replicated ``U / kv_heads`` times
      across the all-to-all, so ``U`` must be a multiple of ``kv_heads`` and divide the query
      ``heads`` (each host gets ``heads / U`` query heads and one replica of their kv head).
      This is verl's rule (volcengine/verl ``verl/models/transformers/monkey_patch.py`` at
      094fc0bf: ``apply_monkey_patch`` asserts ``num_attention_heads % sp == 0`` and
      ``num_key_value_heads % sp == 0 or sp % num_key_value_heads == 0``, and
      ``_ulysses_flash_attention_forward`` repeats the kv heads ``sp // nheads_k`` times
      before the all-to-all). It needs ``heads``; without it ``U > kv_heads`` is refused.
    """
    if isinstance(ulysses_degree, bool) or not isinstance(ulysses_degree, int | np.integer):
        raise ValueError(f"ulysses_degree must be a positive integer, got {ulysses_degree!r}")
    u = int(ulysses_degree)
    if u <= 0 or hosts % u:
        raise ValueError(f"ulysses_degree must divide hosts={hosts}, got ulysses_degree={u}")
    if u > kv_heads:
        if heads is None or u % kv_heads or heads % u:
            got = "" if heads is None else f" (heads={heads})"
            raise ValueError(
                f"ulysses_degree={u} exceeds kv_heads={kv_heads}{got}: Ulysses gives each host "
                f"whole key/value heads (use ulysses_degree <= {kv_heads}), or replicates them, "
                f"which needs ulysses_degree a multiple of kv_heads that divides the query heads"
            )
        return u
    if 1 < u < hosts and kv_heads % u:
        raise ValueError(
            f"ulysses_degree={u} must divide kv_heads={kv_heads} when a ring runs beside it"
        )
    return u


def kv_replicas(kv_heads: int, ulysses_degree: int) -> int:
    """How many hosts of a Ulysses group hold a copy of each key/value head: ``U / kv_heads``
    when ``U > kv_heads`` (KV replication, ``check_ulysses_degree``), else 1."""
    return max(1, ulysses_degree // kv_heads)


def head_groups(heads: int, kv_heads: int, ulysses: int) -> list[tuple[slice, slice]]:
    """``(query heads, kv heads)`` of each head group: the kv heads dealt in ``U`` runs (the
    first ``kv_heads % U`` one longer), each with the query heads that share them (GQA). With
    ``U > kv_heads`` (a multiple of it, dividing ``heads``: KV replication) group ``u`` gets
    ``heads / U`` query heads and kv head ``u // (U / kv_heads)``, the one they share: each kv
    head goes to ``U / kv_heads`` groups, as verl repeats it (``repeat_kv``) before the
    all-to-all. The exact executor, the real backend and the timer split heads by this one
    rule."""
    replicas = kv_replicas(kv_heads, ulysses)
    if replicas > 1:
        per = heads // ulysses
        return [
            (slice(u * per, (u + 1) * per), slice(u // replicas, u // replicas + 1))
            for u in range(ulysses)
        ]
    sizes = kv_heads // ulysses + (np.arange(ulysses) < kv_heads % ulysses)
    group = heads // kv_heads
    ends = np.cumsum(sizes)
    return [
        (slice(int(a) * group, int(b) * group), slice(int(a), int(b)))
        for a, b in zip(ends - sizes, ends, strict=True)
    ]
