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

Each layout is a ``Layout`` object in the registry ``LAYOUTS`` (a dict keyed by name): its
positions and the divisor ``seq_len`` must meet; the closed-form visible-pair counts of a
causal block and the position formula the schedule counts tiles with; and the kernel call a
real ring makes at each step (``Layout.step_call``). Every other module asks the layout
(``get_layout(name_or_layout)``). A new layout is one subclass that implements ``deal``,
registered with ``register_layout``; everything else has a default derived from its
positions.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import numpy as np

from ringsim.checks import (
    check_bool,
    check_choice,
    check_memory,
    check_positive_int,
    check_segment_ids,
)
from ringsim.masks import BlockKind


class KernelCall(NamedTuple):
    """One attention call of a ring step: ``q_tokens`` queries against ``k_tokens`` keys under
    ``mask`` (a name of ``ringsim.timer.machine.kernel_model.MASKS``); ``visible`` the fraction
    of its pairs computed (``"documents"`` needs it); ``sliced``: the call's output is merged
    into a slice of the host's rows (a sliced merge, which copies them back)."""

    q_tokens: int
    k_tokens: int
    mask: str
    visible: float | None = None
    sliced: bool = False


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
    * ``causal_call``: the kernel call a real ring makes for a causal block.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    chunks_per_host: ClassVar[int] = 1
    needs_documents: ClassVar[bool] = False
    by_relation: ClassVar[bool] = False

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


class Striped(Layout):
    """Round robin: host ``h`` holds ``h, h + P, h + 2P, ...``. Calls: a causal ``c x c`` call
    for its own block or an earlier host's (diagonal included); a later host's the same with
    the diagonal excluded, made as zhuzilin's stripe does it: a causal ``(c - 1) x (c - 1)``
    call of ``q[1:]`` against ``k[:-1]`` (lengths off the kernel's tile multiples), merged
    into rows ``1:`` (sliced)."""

    name = "striped"
    description = "round robin: host h holds tokens h, h + P, h + 2P, ... (Brandon et al. 2023)"
    by_relation = True

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
