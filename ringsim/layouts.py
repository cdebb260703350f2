"""How the tokens of a sequence are dealt to the hosts of the ring: one object per layout.

A layout is a permutation of token positions: host ``h`` holds the ``c = N / P`` positions in
row ``h`` of ``host_positions``, always in increasing order.

* ``contiguous``: host ``h`` holds ``[h c, (h + 1) c)`` (the paper's split).
* ``striped`` (Brandon et al., 2023): round robin, host ``h`` holds ``h, h + P, h + 2P, ...``.
* ``zigzag``: the sequence is cut into ``2P`` chunks; host ``h`` holds chunk ``h`` and its
  mirror ``2P - 1 - h`` (the context-parallel split used to train Llama 3).
* ``per-document``: packed documents (``segment_ids``), each cut into ``2P`` chunks; host ``h``
  holds chunk ``h`` and chunk ``2P - 1 - h`` *of every document*, as TransformerEngine's
  context parallelism deals a THD batch (``thd_get_partitioned_indices``; Megatron-LM uses it
  for packed sequences).

Under a causal mask a contiguous split gives the last host ``P`` blocks of work and the first
only one; striped and zigzag give every host (almost) the same work at every step, and
per-document does so for each document of a packed batch.

Packed documents under context parallelism also need: the padding that makes every document
divisible by ``2P`` (``pad_documents``), each host's RoPE position ids (``host_position_ids``),
and, for Llama 3's all-gather per document, which queries and gathered keys each host of a
contiguous split reads (``llama3_cu_seqlens``).

Each layout is a ``Layout`` object in the registry ``LAYOUTS`` (a dict keyed by name): its
positions and the divisor ``seq_len`` must meet; the closed-form visible-pair counts of a
causal block and the position formula the schedule counts tiles with; and the kernel call a
real ring makes at each step (``Layout.step_call``). Every other module asks the layout
(``get_layout(name_or_layout)``). A new layout is one subclass that implements ``deal``,
registered with ``register_layout``; everything else has a default derived from its
positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from ringsim.checks import (
    check_bool,
    check_choice,
    check_memory,
    check_non_negative_int,
    check_positive_int,
    check_segment_ids,
)
from ringsim.masks import BlockKind, offset_bounds


class KernelCall(NamedTuple):
    """One attention call of a ring step: ``q_tokens`` queries against ``k_tokens`` keys under
    ``mask`` (a name of ``ringsim.timer.machine.kernel_model.MASKS``); ``visible`` the fraction
    of its pairs computed (``"documents"`` needs it); ``sliced``: the call's output is merged
    into a slice of the host's rows (a sliced merge, which copies them back); ``band``
    ``(lo, hi)`` (``"window"`` needs it): query row ``r`` sees keys ``r + lo`` to ``r + hi``
    of the call (a sliding window's band, ``band_call``)."""

    q_tokens: int
    k_tokens: int
    mask: str
    visible: float | None = None
    sliced: bool = False
    band: tuple[int, int] | None = None


def band_call(n: int, m: int, lo: int, hi: int, *, sliced: bool = False) -> KernelCall | None:
    """The call for ``n`` queries against ``m`` keys where query ``a`` sees keys ``a + lo`` to
    ``a + hi`` (a sliding window between two runs of positions, ``Layout.window_calls``), cut
    to the queries that see a key and the keys some query sees (``None``: none), as a ring
    would slice its inputs. A band that cuts nothing but a causal diagonal is that call
    (``"full"``, ``"causal-diagonal"``, ``"offset-causal"``), as flash-attn drops a window
    wider than the keys (``flash_api.cpp``, Dao-AILab/flash-attention at 0251105a); else a
    ``"window"`` call with its ``band``. ``sliced``: the call's rows are a slice of the
    host's (``KernelCall.sliced``), also whenever the cut leaves fewer than ``n`` rows."""
    a0, a1 = max(0, -hi), min(n - 1, m - 1 - lo)  # queries that see some key
    if a1 < a0:
        return None
    b0, b1 = max(0, a0 + lo), min(m - 1, a1 + hi)
    q, k, shift = a1 - a0 + 1, b1 - b0 + 1, b0 - a0
    lo, hi = lo - shift, hi - shift  # the band of the cut call
    sliced = sliced or q < n
    if q - 1 + lo <= 0:  # every row sees back to the first key
        if hi >= k - 1:
            return KernelCall(q, k, "full", None, sliced)
        if hi == k - q:
            return KernelCall(q, k, "causal-diagonal", None, sliced)
        if hi == k - q - 1:
            return KernelCall(q, k, "offset-causal", None, sliced)
    return KernelCall(q, k, "window", None, sliced, (lo, hi))


def run_window_call(
    q0: int,
    n: int,
    k0: int,
    m: int,
    stride: int,
    sliding_window: int,
    causal: bool,
    *,
    sliced: bool = False,
) -> KernelCall | None:
    """The ``band_call`` of queries at ``q0 + stride a`` (``0 <= a < n``) against keys at
    ``k0 + stride b`` (``0 <= b < m``) under ``sliding_window`` (``ringsim.masks``' rule):
    pair ``(a, b)`` is ``offset + stride (a - b)`` tokens apart, ``offset = q0 - k0``."""
    low, high = offset_bounds(causal, sliding_window)
    offset = q0 - k0
    lo = -((high - offset) // stride)  # b - a >= lo
    hi = m if low is None else (offset - low) // stride  # b - a <= hi
    return band_call(n, m, lo, hi, sliced=sliced)


class Layout:
    """How one kind of split deals ``seq_len`` tokens to ``hosts`` hosts.

    A subclass sets ``name`` and ``description`` and implements ``deal``; ``chunks_per_host``
    makes ``seq_len`` a multiple of ``chunks_per_host * hosts``. The other hooks have defaults
    derived from the positions, which a layout overrides where it knows better:

    * ``deal_host``: one host's positions without building the others;
    * ``causal_pairs``: visible pairs of a causal block in closed form, by relation;
    * ``position`` and ``key_tiles_starting_by``: the formulas the schedule counts tiles with;
    * ``by_relation = True``: the mask of a block depends only on whether the kv block's owner
      comes before, is, or comes after the query host (so the schedule needs 3 counts, not P^2);
    * ``causal_call``: the kernel call a real ring makes for a causal block;
    * under a sliding window: ``by_offset = True`` (a block's mask depends only on the owners'
      distance ``kv host - query host``), ``runs`` (a host's positions as arithmetic runs, which
      ``masks.pairs_within`` counts in closed form) and the closed forms ``window_live_steps``
      and ``window_live_pairs``.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    chunks_per_host: ClassVar[int] = 1
    needs_documents: ClassVar[bool] = False
    by_relation: ClassVar[bool] = False
    by_offset: ClassVar[bool] = False

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # -- the split ---------------------------------------------------------------------------
    def divisor(self, hosts: int) -> int:
        """``seq_len`` must be a multiple of this."""
        return self.chunks_per_host * hosts

    def check_seq_len(
        self, seq_len: object, hosts: int, segment_ids: np.ndarray | None = None
    ) -> int:
        """``seq_len`` if the layout can deal it to ``hosts``; ``ValueError`` naming it if not."""
        seq_len = check_positive_int("seq_len", seq_len)
        if seq_len % self.divisor(hosts):
            raise ValueError(
                f"seq_len must be divisible by {self._unit(hosts)} for the {self.name} layout, "
                f"got seq_len={seq_len}"
            )
        return seq_len

    def _unit(self, hosts: int) -> str:
        k = self.chunks_per_host
        return f"hosts = {hosts}" if k == 1 else f"{k}*hosts = {k * hosts}"

    def positions(
        self, hosts: int, seq_len: int, segment_ids: np.ndarray | None = None
    ) -> np.ndarray:
        """Global token positions held by each host: int64 ``(hosts, seq_len // hosts)``, sorted."""
        hosts = check_positive_int("hosts", hosts)
        seq_len = self.check_seq_len(seq_len, hosts, segment_ids)
        check_memory("seq_len", seq_len, 16 * seq_len, "the positions (two int64 per token)")
        pos = self.deal(hosts, seq_len, check_segment_ids(segment_ids, seq_len))
        shape = (hosts, seq_len // hosts)
        if pos.shape != shape or np.any(pos[:, 1:] <= pos[:, :-1]):
            what = f"shape {pos.shape}" if pos.shape != shape else "a row not increasing"
            raise ValueError(
                f"layout {self.name!r} must deal each host an increasing row of "
                f"{seq_len // hosts} positions, got {what}"
            )
        return pos

    def positions_of_host(
        self, hosts: int, seq_len: int, host: int, segment_ids: np.ndarray | None = None
    ) -> np.ndarray:
        """Row ``host`` of ``positions`` without building the others (cheap for huge N)."""
        hosts = check_positive_int("hosts", hosts)
        seq_len = self.check_seq_len(seq_len, hosts, segment_ids)
        integer = isinstance(host, int | np.integer) and not isinstance(host, bool)
        if not integer or not 0 <= host < hosts:
            raise ValueError(f"host must be an integer in [0, {hosts}), got {host!r}")
        return self.deal_host(hosts, seq_len, int(host), check_segment_ids(segment_ids, seq_len))

    def deal(self, hosts: int, seq_len: int, segment_ids: np.ndarray | None) -> np.ndarray:
        """``(hosts, c)`` sorted positions of every host (arguments already checked)."""
        raise NotImplementedError(f"layout {self.name!r} must implement deal")

    def deal_host(
        self, hosts: int, seq_len: int, host: int, segment_ids: np.ndarray | None
    ) -> np.ndarray:
        """``(c,)`` sorted positions of ``host`` (arguments already checked)."""
        return self.deal(hosts, seq_len, segment_ids)[host]

    # -- counting: closed forms the schedule uses --------------------------------------------
    def causal_pairs(self, c: int, relation: int) -> int | None:
        """Visible pairs of a causal block of ``c`` queries and ``c`` keys, by ``relation``
        (0: the host's own block, -1: an earlier host's, +1: a later host's), or ``None``
        where there is no closed form (the schedule then counts from the positions)."""
        return None

    def position(self, hosts: int, c: int, host: int, local: np.ndarray) -> np.ndarray:
        """Global positions of ``host``'s tokens at ``local`` indices (``c`` tokens per host)."""
        return self.deal_host(hosts, hosts * c, host, None)[local]

    def key_tiles_starting_by(
        self, hosts: int, c: int, host: int, tile: int, n: int, pos: np.ndarray
    ) -> np.ndarray:
        """How many of ``host``'s ``n`` key tiles (``tile`` keys each) start at a position
        ``<= pos`` (each entry): a prefix, as positions are sorted."""
        starts = self.position(hosts, c, host, np.arange(n, dtype=np.int64) * tile)
        return np.searchsorted(starts, pos, side="right")

    # -- a sliding window (``ringsim.masks``): closed forms the schedule uses and tests hold ---
    def runs(self, hosts: int, c: int, host: int) -> tuple[np.ndarray, int, int] | None:
        """``host``'s positions (no documents) as ``(starts, length, stride)``: runs
        ``start + stride * arange(length)``, one per start; ``None``: not a few runs (the
        schedule then counts from the positions)."""
        return None

    def window_live_steps(
        self, hosts: int, c: int, sliding_window: int, causal: bool
    ) -> int | None:
        """How many ring steps hold a block some host computes under ``sliding_window``, in
        closed form (``None``: none known; the schedule enumerates)."""
        return None

    def window_live_pairs(
        self, hosts: int, c: int, sliding_window: int, causal: bool
    ) -> np.ndarray | None:
        """``(P,)`` how many of the ``P`` kv blocks each host computes any pair of, under
        ``sliding_window``, in closed form (``None``: none known)."""
        return None

    def window_calls(
        self, hosts: int, c: int, q_host: int, kv_host: int, sliding_window: int, causal: bool
    ) -> tuple[KernelCall, ...] | None:
        """The calls a ring makes for ``q_host``'s queries against ``kv_host``'s block under
        ``sliding_window`` (no documents): one ``band_call`` per pair of the two hosts' runs
        (``runs``) whose band holds a pair, each cut to the rows and keys it needs (no call at
        all: ``()``). ``None`` where the layout has no runs (the ring then makes a masked call
        over the tiles the window leaves, as for documents). No ring library runs a sliding
        window today (zhuzilin/ring-flash-attention, TransformerEngine's P2P ring refuse
        one); these are the calls one that slices its inputs would make."""
        q_runs, k_runs = self.runs(hosts, c, q_host), self.runs(hosts, c, kv_host)
        if q_runs is None or k_runs is None:
            return None
        (q_starts, n, stride), (k_starts, m, _) = q_runs, k_runs
        sliced = len(q_starts) > 1
        calls = (
            run_window_call(q0, n, k0, m, stride, sliding_window, causal, sliced=sliced)
            for q0 in q_starts.tolist()
            for k0 in k_starts.tolist()
        )
        return tuple(call for call in calls if call is not None)

    def gathered_window_calls(
        self, hosts: int, c: int, host: int, sliding_window: int, causal: bool
    ) -> tuple[KernelCall, ...] | None:
        """``gathered_calls`` under ``sliding_window``: each run of ``host``'s consecutive
        positions against the gathered keys its window reaches, as TransformerEngine's
        all-gather context parallelism slices them (``get_kv_seq_info_after_all_gather``:
        keys from ``max(0, chunk end - chunk length - left)`` to ``chunk end + right``;
        NVIDIA/TransformerEngine ``transformer_engine/pytorch/attention/dot_product_attention/
        context_parallel.py`` at 9c61cd7e). ``None`` where the host's positions are not runs
        of consecutive tokens (striped: the all-gather makes the ring's per-block calls)."""
        runs = self.runs(hosts, c, host)
        if runs is None or runs[2] != 1:
            return None
        starts, n, _ = runs
        low, high = offset_bounds(causal, sliding_window)
        N, calls = hosts * c, []
        for q0 in starts.tolist():
            k0 = max(0, q0 - high)
            k1 = N if low is None else min(N, q0 + n - low)
            call = run_window_call(q0, n, k0, k1 - k0, 1, sliding_window, causal)
            if call is not None:
                calls.append(call)
        return tuple(calls)

    # -- the kernel call of a ring step ------------------------------------------------------
    def step_call(
        self, kind: int, relation: int, work: float, c: int, *, causal: bool, documents: bool
    ) -> KernelCall | None:
        """The call a host makes for a block of ``c`` x ``c`` tokens classified ``kind``
        (``BlockKind``), of ``relation`` (see ``causal_pairs``), ``work`` the fraction of its
        pairs computed; ``None``: skipped. Without a causal mask the call is full; packed
        documents make a call over the tiles the visible fraction needs."""
        if kind == BlockKind.SKIP:
            return None
        if not causal:
            return KernelCall(c, c, "full")
        if documents:
            if kind == BlockKind.FULL:
                return KernelCall(c, c, "full")
            return KernelCall(c, c, "documents", work)
        return self.causal_call(kind, relation, work, c)

    def gathered_calls(self, hosts: int, c: int, host: int) -> tuple[KernelCall, ...] | None:
        """The causal calls an all-gather implementation makes for ``host``'s queries once
        every key is gathered in sequence order: one call per run of consecutive positions,
        against all keys up to the run's end (bottom-right aligned), as TransformerEngine's
        ``AttnFuncWithCPAndKVAllGather`` does for its two chunks per rank. ``None`` (the
        default): the host's positions are not a few runs, and the all-gather makes the
        ring's per-block calls instead."""
        return None

    def causal_call(self, kind: int, relation: int, work: float, c: int) -> KernelCall:
        """The call for a computed causal block without documents. By default the host's own
        block is a causal ``c x c`` call (its positions are sorted: row ``r`` sees keys
        ``<= r``), a fully visible block a full call, and any other a masked call over the
        tiles its visible fraction needs."""
        if relation == 0:
            return KernelCall(c, c, "causal-diagonal")
        if kind == BlockKind.FULL:
            return KernelCall(c, c, "full")
        return KernelCall(c, c, "documents", work)


# -- the built-in layouts --------------------------------------------------------------------
# Kernel calls as zhuzilin/ring-flash-attention makes them (read from its source at commit
# 8996282: ``ring_flash_attn.py``, ``zigzag_ring_flash_attn.py``, ``stripe_flash_attn.py``).


def _count(pos: np.ndarray, base: int, step: int, n: int) -> np.ndarray:
    """How many of ``n`` tiles starting at ``base, base + step, ...`` start at or before each
    ``pos``."""
    return np.clip((pos - base) // step + 1, 0, n)


class Contiguous(Layout):
    """Host ``h`` holds ``[h c, (h + 1) c)``. Calls: its own block a causal ``c x c`` call, an
    earlier host's a full one, a later host's none."""

    name = "contiguous"
    description = "host h holds tokens [h c, (h + 1) c): the paper's split"
    by_relation = True
    by_offset = True

    def deal(self, hosts, seq_len, segment_ids):
        return np.arange(seq_len, dtype=np.int64).reshape(hosts, -1)

    def deal_host(self, hosts, seq_len, host, segment_ids):
        c = seq_len // hosts
        return np.arange(host * c, (host + 1) * c, dtype=np.int64)

    def causal_pairs(self, c, relation):
        return {0: c * (c + 1) // 2, -1: c * c, 1: 0}[relation]

    def position(self, hosts, c, host, local):
        return host * c + local

    def key_tiles_starting_by(self, hosts, c, host, tile, n, pos):
        return _count(pos, host * c, tile, n)

    def gathered_calls(self, hosts, c, host):
        return (KernelCall(c, (host + 1) * c, "causal-diagonal"),)

    def runs(self, hosts, c, host):
        return np.array([host * c]), c, 1

    @staticmethod
    def window_reach(c: int, sliding_window: int) -> int:
        """How many blocks back (or, not causal, forward) a window of ``W`` reaches from a
        block of ``c`` tokens: block ``h - d`` is visible to some query of block ``h`` iff the
        closest pair, ``(d - 1) c + 1`` apart, is inside the window: ``d <= ceil((W-1)/c)``."""
        return -(-(sliding_window - 1) // c)

    def window_live_steps(self, hosts, c, sliding_window, causal):
        reach = min(self.window_reach(c, sliding_window), hosts - 1)
        return reach + 1 if causal else min(hosts, 2 * reach + 1)

    def window_live_pairs(self, hosts, c, sliding_window, causal):
        reach, h = self.window_reach(c, sliding_window), np.arange(hosts)
        later = 0 if causal else np.minimum(hosts - 1 - h, reach)
        return np.minimum(h, reach) + 1 + later


class Striped(Layout):
    """Round robin: host ``h`` holds ``h, h + P, h + 2P, ...``. Calls: a causal ``c x c`` call
    for its own block or an earlier host's (diagonal included); a later host's the same with
    the diagonal excluded, made as zhuzilin's stripe does it: a causal ``(c - 1) x (c - 1)``
    call of ``q[1:]`` against ``k[:-1]`` (lengths off the kernel's tile multiples), merged
    into rows ``1:`` (sliced)."""

    name = "striped"
    description = "round robin: host h holds tokens h, h + P, h + 2P, ... (Brandon et al. 2023)"
    by_relation = True
    by_offset = True

    def deal(self, hosts, seq_len, segment_ids):
        return np.ascontiguousarray(np.arange(seq_len, dtype=np.int64).reshape(-1, hosts).T)

    def deal_host(self, hosts, seq_len, host, segment_ids):
        return np.arange(host, seq_len, hosts, dtype=np.int64)

    def causal_pairs(self, c, relation):
        return c * (c - 1) // 2 if relation > 0 else c * (c + 1) // 2

    def position(self, hosts, c, host, local):
        return host + local * hosts

    def key_tiles_starting_by(self, hosts, c, host, tile, n, pos):
        return _count(pos, host, tile * hosts, n)

    def causal_call(self, kind, relation, work, c):
        if relation > 0:
            return KernelCall(max(c - 1, 1), max(c - 1, 1), "causal-diagonal", None, True)
        return KernelCall(c, c, "causal-diagonal")

    def runs(self, hosts, c, host):
        return np.array([host]), c, hosts

    def window_live_steps(self, hosts, c, sliding_window, causal):
        """At step ``s`` the nearest visible pair of a host and its block is ``s`` apart (or,
        not causal, ``P - s``); the block's later owner needs a second token (``c >= 2``) to
        offer a key ``s`` back. With ``c = 1`` striped is contiguous."""
        if c == 1:
            return get_layout("contiguous").window_live_steps(hosts, c, sliding_window, causal)
        return min(hosts, sliding_window if causal else 2 * sliding_window - 1)

    def window_live_pairs(self, hosts, c, sliding_window, causal):
        if c == 1:
            return get_layout("contiguous").window_live_pairs(hosts, c, sliding_window, causal)
        steps = self.window_live_steps(hosts, c, sliding_window, causal)
        return np.full(hosts, steps)


class Zigzag(Layout):
    """``2P`` chunks; host ``h`` holds chunk ``h`` and its mirror ``2P - 1 - h``. Calls: its
    own block a causal ``c x c`` call; an earlier host's: all ``c`` queries against the early
    half of the keys (``c x c/2``, unmasked); a later host's: the late half of the queries
    against all keys (``c/2 x c``, unmasked), merged into those rows only (sliced)."""

    name = "zigzag"
    description = "2P chunks; host h holds chunk h and its mirror 2P - 1 - h (Llama 3)"
    chunks_per_host = 2
    by_relation = True

    def deal(self, hosts, seq_len, segment_ids):
        chunks = np.arange(seq_len, dtype=np.int64).reshape(2 * hosts, -1)
        return np.concatenate([chunks[:hosts], chunks[::-1][:hosts]], axis=1)

    def deal_host(self, hosts, seq_len, host, segment_ids):
        return self.position(hosts, seq_len // hosts, host, np.arange(seq_len // hosts))

    def causal_pairs(self, c, relation):
        # one of an other host's two chunks precedes both of ours, the other follows both
        return c * (c + 1) // 2 if relation == 0 else c * c // 2

    def position(self, hosts, c, host, local):
        half = c // 2  # chunk ``host``, then its mirror ``2P - 1 - host``
        mirror = 2 * hosts - 1 - host
        return np.where(local < half, host * half + local, mirror * half + local - half)

    def key_tiles_starting_by(self, hosts, c, host, tile, n, pos):
        half = c // 2
        first_half = -(-half // tile)  # tiles starting in the first chunk
        mirror_start = (2 * hosts - 1 - host) * half - half  # position of local 0, if mirrored
        head = _count(pos, host * half, tile, first_half)
        tail = np.clip((pos - mirror_start) // tile - first_half + 1, 0, n - first_half)
        return head + tail

    def gathered_calls(self, hosts, c, host):
        half = c // 2
        return tuple(
            KernelCall(half, (chunk + 1) * half, "causal-diagonal")
            for chunk in (host, 2 * hosts - 1 - host)
        )

    def causal_call(self, kind, relation, work, c):
        if relation == 0:
            return KernelCall(c, c, "causal-diagonal")
        half = max(c // 2, 1)
        if relation < 0:
            return KernelCall(c, half, "zigzag-half")
        return KernelCall(half, c, "zigzag-half", None, True)

    def runs(self, hosts, c, host):
        half = c // 2
        return np.array([host * half, (2 * hosts - 1 - host) * half]), half, 1


class PerDocument(Layout):
    """Every document (a run of equal ``segment_ids``) is cut into ``2P`` chunks; host ``h``
    holds chunk ``h`` and chunk ``2P - 1 - h`` of each, documents in order (so its positions
    stay sorted). Each document's length must be a multiple of ``2P``.

    Calls, as TransformerEngine's ring (``AttnFuncWithCPAndKVP2P`` on THD inputs) makes them,
    one variable-length call per step over the documents: the host's own block causal per
    document; an earlier host's: all queries against the early chunk of each document's keys
    (``c x c/2``); a later host's: the late chunk of each document's queries against all its
    keys (``c/2 x c``), merged into those rows (sliced). A variable-length call visits only
    the tiles inside documents: modelled as a ``"documents"`` call over the fraction of the
    call's pairs inside them (all tiles masked, the kernel model's rule for documents)."""

    name = "per-document"
    description = "every document in 2P chunks; host h holds chunks h and 2P-1-h of each"
    chunks_per_host = 2
    needs_documents = True

    def check_seq_len(self, seq_len, hosts, segment_ids=None):
        seq_len = check_positive_int("seq_len", seq_len)
        if segment_ids is None:
            raise ValueError(
                "the per-document layout needs the documents: pass segment_ids (one document "
                "id per token)"
            )
        starts, lengths = document_runs(check_segment_ids(segment_ids, seq_len))
        parts = self.divisor(hosts)
        for d, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
            if length % parts:
                raise ValueError(
                    f"document {d} (tokens {start} to {start + length - 1}) has length "
                    f"{length}, not divisible by {self._unit(hosts)} for the {self.name} layout"
                )
        return seq_len

    def _owner(self, hosts: int, segment_ids: np.ndarray) -> np.ndarray:
        """``(N,)`` the host of every token."""
        starts, lengths = document_runs(segment_ids)
        start = np.repeat(starts, lengths)
        chunk = (np.arange(segment_ids.size) - start) // np.repeat(lengths // (2 * hosts), lengths)
        return np.minimum(chunk, 2 * hosts - 1 - chunk)

    def deal(self, hosts, seq_len, segment_ids):
        order = np.argsort(self._owner(hosts, segment_ids), kind="stable")
        return order.astype(np.int64).reshape(hosts, -1)

    def deal_host(self, hosts, seq_len, host, segment_ids):
        return np.flatnonzero(self._owner(hosts, segment_ids) == host).astype(np.int64)

    def step_call(self, kind, relation, work, c, *, causal, documents):
        if kind == BlockKind.SKIP:
            return None
        if kind == BlockKind.FULL:
            return KernelCall(c, c, "full")
        if not causal or relation == 0:
            return KernelCall(c, c, "documents", work)
        visible = min(1.0, 2.0 * work)  # the half-block call's pairs inside documents
        mask, visible = ("full", None) if visible == 1.0 else ("documents", visible)
        half = max(c // 2, 1)
        if relation < 0:
            return KernelCall(c, half, mask, visible)
        return KernelCall(half, c, mask, visible, True)


# -- the registry ----------------------------------------------------------------------------
LAYOUTS: dict[str, Layout] = {}


def register_layout(layout: Layout) -> Layout:
    """Add ``layout`` to ``LAYOUTS`` under its name (refused if the name is taken)."""
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout instance, got {layout!r}")
    if not layout.name or not isinstance(layout.name, str):
        raise ValueError(f"layout name must be a non-empty string, got {layout.name!r}")
    if layout.name in LAYOUTS:
        raise ValueError(f"layout {layout.name!r} is already registered")
    LAYOUTS[layout.name] = layout
    return layout


def unregister_layout(name: str) -> None:
    """Remove the layout registered as ``name`` (for tests that register their own)."""
    if name not in LAYOUTS:
        raise ValueError(f"layout {name!r} is not registered")
    del LAYOUTS[name]


for _layout in (Contiguous(), Striped(), Zigzag(), PerDocument()):
    register_layout(_layout)


def get_layout(layout: object) -> Layout:
    """The ``Layout`` named ``layout`` (or ``layout`` itself if it is one)."""
    if isinstance(layout, Layout):
        return layout
    return LAYOUTS[check_choice("layout", layout, tuple(LAYOUTS))]


def check_layout(layout: object) -> str:
    """The name of a registered layout (given its name or the object)."""
    name = get_layout(layout).name
    if name not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    return name


def layout_names(*, documents: bool = False) -> tuple[str, ...]:
    """Names of the registered layouts that can deal a sequence: without ``documents`` (the
    default) those that need none; with them, every layout."""
    documents = check_bool("documents", documents)
    return tuple(name for name, lay in LAYOUTS.items() if documents or not lay.needs_documents)


def document_runs(segment_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` of the documents: maximal runs of equal ids, in order."""
    seg = np.asarray(segment_ids)
    starts = np.flatnonzero(np.concatenate([[True], seg[1:] != seg[:-1]]))
    return starts, np.diff(np.append(starts, seg.size))


def segment_ids_of(lengths: object) -> np.ndarray:
    """Segment ids ``(sum(lengths),)`` of documents of these lengths, packed in order."""
    lengths = [check_positive_int("document length", n) for n in lengths]
    if not lengths:
        raise ValueError("documents must be at least one length, got none")
    return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


# -- packed documents under context parallelism: padding and position ids -----------------------
@dataclass(frozen=True)
class DocumentPadding:
    """Packed documents padded so each length is a multiple of ``multiple`` (``pad_documents``).

    ``segment_ids`` ``(N + added,)``: the padded sequence's documents, each document's padding
    at its end carrying its id (so a layout deals it with its document); ``real`` ``(N,)``: where
    each original token sits in the padded sequence; ``added``: the padding tokens, which every
    host stores, moves and (masked or not) computes with: the padding's cost."""

    segment_ids: np.ndarray
    real: np.ndarray
    added: int
    multiple: int

    def pad(self, x: np.ndarray, fill: float = 0.0) -> np.ndarray:
        """``x`` ``(..., N, d)`` in the padded sequence, ``fill`` at the padding."""
        x = _sequence_array(x)
        if x.shape[-2] != self.real.size:
            raise ValueError(
                f"x must have {self.real.size} tokens (the unpadded sequence), got {x.shape[-2]}"
            )
        out = np.full((*x.shape[:-2], self.segment_ids.size, x.shape[-1]), fill, x.dtype)
        out[..., self.real, :] = x
        return out

    def unpad(self, x: np.ndarray) -> np.ndarray:
        """The original tokens of ``x`` ``(..., N + added, d)``."""
        return np.take(_sequence_array(x), self.real, axis=-2)


def pad_documents(segment_ids: object, hosts: int, multiple: int | None = None) -> DocumentPadding:
    """Pad every document (a run of equal ids) at its end to a multiple of ``2 * hosts`` (or of
    ``multiple``), the rule that lets zigzag and per-document context parallelism cut each
    document into ``2P`` equal chunks. Megatron-style trainers pad each sequence to
    ``tp * cp * 2`` tokens when ``cp > 1`` (verl ``verl/models/mcore/util.py``,
    ``preprocess_packed_seqs``: ``align_size``, ``pad_size``, ``cu_seqlens_padded``), as
    TransformerEngine's THD context parallelism needs every sequence divisible by ``2 cp``.

    Where the padding sits makes it exact under a causal mask: it follows every real token of its
    document, so no real query sees it (with or without a sliding window), and a padded query's
    output is dropped (its ``dout`` is 0, so it adds nothing to any gradient). Without a causal
    mask the real queries would see the padding as keys: TransformerEngine masks it with the
    unpadded ``cu_seqlens``; ringsim's mask rule has no padding mask, so use it causal."""
    if segment_ids is None:
        raise ValueError("segment_ids must be the documents' ids (one per token), got None")
    seg = check_segment_ids(segment_ids, np.asarray(segment_ids).size)
    if seg.size == 0:
        raise ValueError("segment_ids must hold at least one token, got none")
    hosts = check_positive_int("hosts", hosts, at_most=2**40)
    if multiple is None:
        multiple = 2 * hosts
    multiple = check_positive_int("multiple", multiple, at_most=2**41)
    starts, lengths = document_runs(seg)
    total = sum(-(-int(n) // multiple) * multiple for n in lengths)
    name = "hosts" if multiple == 2 * hosts else "multiple"
    check_memory(name, multiple, 24 * total, "the padded sequence's ids and positions")
    padded = -(-lengths // multiple) * multiple
    new_starts = np.concatenate([[0], np.cumsum(padded)[:-1]])
    real = np.repeat(new_starts - starts, lengths) + np.arange(seg.size)
    return DocumentPadding(
        np.repeat(seg[starts], padded),
        real.astype(np.int64),
        int((padded - lengths).sum()),
        multiple,
    )


def document_position_ids(segment_ids: object, seq_len: int | None = None) -> np.ndarray:
    """``(N,)`` each token's position inside its document: RoPE's position ids for packed
    documents (each document counts from 0); without ``segment_ids`` (give ``seq_len``) the
    token's position. A document is an id: its tokens count in sequence order."""
    if segment_ids is None:
        return np.arange(check_positive_int("seq_len", seq_len), dtype=np.int64)
    seg = check_segment_ids(segment_ids, np.asarray(segment_ids).size)
    order = np.argsort(seg, kind="stable")
    ids = seg[order]
    first = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    rank = np.arange(seg.size) - np.repeat(first, np.diff(np.append(first, seg.size)))
    out = np.empty(seg.size, dtype=np.int64)
    out[order] = rank
    return out


def host_position_ids(
    layout: object, hosts: int, seq_len: int, segment_ids: np.ndarray | None = None
) -> np.ndarray:
    """``(P, N / P)`` the position ids (``document_position_ids``) of each host's tokens, in its
    order: what each host feeds its rotary embedding. Gathering them back in layout order
    (``from_layout``) gives the unsharded sequence's ids."""
    pos = host_positions(layout, hosts, seq_len, segment_ids)
    return document_position_ids(segment_ids, seq_len)[pos]


class Llama3Slices(NamedTuple):
    """What one host of Llama 3's all-gather context parallelism reads of packed documents
    (``llama3_cu_seqlens``): its documents' query and key offsets.

    ``cu_seqlens_q`` ``(D + 1,)``: the ``D`` documents' query rows in the host's ``L`` tokens;
    ``cu_seqlens_k`` ``(D + 1,)``: their keys, as offsets into ``k_slice``, the global tokens of
    the gathered keys the host reads; ``max_seqlen_q``/``max_seqlen_k``: the longest of each."""

    cu_seqlens_q: np.ndarray
    cu_seqlens_k: np.ndarray
    max_seqlen_q: int
    max_seqlen_k: int
    k_slice: slice


def cu_seqlens_of(segment_ids: np.ndarray) -> np.ndarray:
    """``(D + 1,)`` the documents' cumulative lengths (``cu_seqlens``): document ``d`` is
    tokens ``cu[d]:cu[d + 1]``."""
    starts, lengths = document_runs(segment_ids)
    return np.append(starts, starts[-1] + lengths[-1]).astype(np.int64)


def _check_cu_seqlens(cu_seqlens: object) -> np.ndarray:
    """``cu_seqlens``: integers from 0, strictly increasing (every document has a token)."""
    try:
        cu = np.asarray(cu_seqlens)
    except (TypeError, ValueError):
        cu = np.asarray(None)
    if cu.dtype.kind not in "iu" or cu.ndim != 1 or cu.size < 2 or cu[0] != 0:
        raise ValueError(
            f"cu_seqlens must be increasing integers from 0 (documents' cumulative lengths), "
            f"got {cu_seqlens!r}"[:200]
        )
    if np.any(np.diff(cu) <= 0):
        raise ValueError(f"cu_seqlens must be strictly increasing, got {cu.tolist()}"[:200])
    return cu.astype(np.int64)


def llama3_cu_seqlens(cu_seqlens: np.ndarray, hosts: int, rank: int, causal: bool) -> Llama3Slices:
    """Host ``rank``'s documents, as ``llama3_flash_attn_prepare_cu_seqlens`` computes them
    (zhuzilin/ring-flash-attention ``ring_flash_attn/llama3_flash_attn_varlen.py`` at 22f0e1db;
    the exact executor is ``ringsim.numerics.varlen``).

    The host's ``L = N / P`` queries start inside document ``left`` (the last one starting at
    or before ``r L``) and end inside document ``right`` (the first one ending at or after
    ``(r + 1) L``). Its queries of each document are that document cut to ``[r L, (r + 1) L)``;
    its keys of each start at the document's start and end with the document, except the last:
    causal, at the host's last query (no later key is visible, and the causal mask aligned
    bottom right is then the global one), not causal, at the document's end."""
    cu = _check_cu_seqlens(cu_seqlens)
    total = int(cu[-1])
    hosts = check_positive_int("hosts", hosts)
    rank = check_non_negative_int("rank", rank)
    if rank >= hosts:
        raise ValueError(f"rank must be in [0, {hosts}), got rank={rank}")
    causal = check_bool("causal", causal)
    if total % hosts:
        raise ValueError(f"the packed length must be divisible by hosts={hosts}, got {total}")
    per = total // hosts
    lo, hi = rank * per, (rank + 1) * per
    left = int(np.searchsorted(cu, lo, side="left"))
    if cu[left] != lo:
        left -= 1
    right = int(np.searchsorted(cu, hi, side="left"))
    cu_q = np.clip(cu[left : right + 1], lo, hi) - lo
    slice_left = int(cu[left])
    slice_right = hi if causal else int(cu[right])
    cu_k = np.minimum(cu[left : right + 1], slice_right) - slice_left
    return Llama3Slices(
        cu_q,
        cu_k,
        int(np.diff(cu_q).max()),
        int(np.diff(cu_k).max()),
        slice(slice_left, slice_right),
    )


# -- the functions of a layout name, for callers that hold one -------------------------------
def check_seq_len(
    seq_len: object, hosts: int, layout: object, segment_ids: np.ndarray | None = None
) -> int:
    """``seq_len`` if ``layout`` can deal it to ``hosts`` (``Layout.check_seq_len``)."""
    return get_layout(layout).check_seq_len(seq_len, hosts, segment_ids)


def host_positions(
    layout: object, hosts: int, seq_len: int, segment_ids: np.ndarray | None = None
) -> np.ndarray:
    """Global token positions held by each host: int64 ``(hosts, seq_len // hosts)``, sorted."""
    return get_layout(layout).positions(hosts, seq_len, segment_ids)


def positions_of_host(
    layout: object, hosts: int, seq_len: int, host: int, segment_ids: np.ndarray | None = None
) -> np.ndarray:
    """Row ``host`` of ``host_positions`` without building the others (cheap for huge N)."""
    return get_layout(layout).positions_of_host(hosts, seq_len, host, segment_ids)


def permutation(
    layout: object, hosts: int, seq_len: int, segment_ids: np.ndarray | None = None
) -> np.ndarray:
    """``perm[i]`` is the original position of the ``i``-th token in layout (host-major) order."""
    return host_positions(layout, hosts, seq_len, segment_ids).reshape(-1)


def inverse_permutation(
    layout: object, hosts: int, seq_len: int, segment_ids: np.ndarray | None = None
) -> np.ndarray:
    """``inv[perm] = arange(N)``: takes layout order back to the original token order."""
    return np.argsort(permutation(layout, hosts, seq_len, segment_ids))


def to_layout(
    x: np.ndarray, layout: object, hosts: int, segment_ids: np.ndarray | None = None
) -> np.ndarray:
    """Reorder ``x`` ``(..., N, d)`` along the sequence axis into layout order."""
    x = _sequence_array(x)
    return np.take(x, permutation(layout, hosts, x.shape[-2], segment_ids), axis=-2)


def from_layout(
    x: np.ndarray, layout: object, hosts: int, segment_ids: np.ndarray | None = None
) -> np.ndarray:
    """Undo ``to_layout``: back to the original token order."""
    x = _sequence_array(x)
    return np.take(x, inverse_permutation(layout, hosts, x.shape[-2], segment_ids), axis=-2)


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
