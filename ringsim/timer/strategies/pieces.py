"""Pieces of a timeline, stitched: how the two-level strategies (Ulysses x ring, the double
ring) build one ``Timeline`` out of the timelines of their parts.

A ``Piece`` holds rows (steps or phases) x hosts of the six ``Timeline`` arrays (and the early
``k, v`` messages of a backward pass); ``Piece.stack`` puts pieces one after the other in time,
``place`` puts the pieces of several groups side by side in their hosts' columns.
"""

from __future__ import annotations

import numpy as np

from ringsim.timer.engine.timeline import Timeline

KEYS = ("cs", "ce", "ss", "se", "rs", "re")
KV_KEYS = ("ks", "ke", "krs", "kre")


class Piece:
    """Rows x hosts of timeline arrays (``a[key]``, NaN where nothing happens)."""

    def __init__(self, labels: list[str], hosts: int, kv: bool = False, *, arrays=None):
        self.labels = labels
        shape = (len(labels), hosts)
        keys = KEYS + (KV_KEYS if kv else ())
        self.a = arrays if arrays is not None else {k: np.full(shape, np.nan) for k in keys}
        self.grad_rows = np.zeros(len(labels), bool)

    @classmethod
    def of(cls, tl: Timeline) -> Piece:
        part = cls(list(tl.step_labels), tl.hosts, kv="kv_send_start" in tl.meta)
        arrays = (tl.compute_start, tl.compute_end, tl.send_start, tl.send_end)
        arrays += (tl.recv_start, tl.recv_end)
        for key, arr in zip(KEYS, arrays, strict=True):
            part.a[key][...] = arr
        if "kv_send_start" in tl.meta:
            names = ("kv_send_start", "kv_send_end", "kv_recv_start", "kv_recv_end")
            for key, name in zip(KV_KEYS, names, strict=True):
                part.a[key][...] = tl.meta[name]
            part.grad_rows[:] = np.asarray(tl.meta.get("grad_rows", True), bool)
        return part

    @staticmethod
    def stack(parts: list[Piece]) -> Piece:
        keys = KEYS + (KV_KEYS if any("ks" in p.a for p in parts) else ())
        hosts = parts[0].a["cs"].shape[1]
        gap = lambda p: np.full((len(p.labels), hosts), np.nan)  # a part without kv messages
        arrays = {k: np.concatenate([p.a[k] if k in p.a else gap(p) for p in parts]) for k in keys}
        out = Piece([x for p in parts for x in p.labels], hosts, arrays=arrays)
        out.grad_rows[:] = np.concatenate([p.grad_rows for p in parts])
        return out

    def end(self) -> float:
        ends = [np.fmax.reduce(self.a[k], axis=None) for k in ("ce", "se", "ke") if k in self.a]
        return float(np.nanmax([0.0, *ends]))


def place(parts: list[Piece], groups: list[list[int]], hosts: int, offset: float) -> Piece:
    """The ring groups' parts (same rows) side by side in their ranks' columns, shifted by
    ``offset`` seconds."""
    kv = any("ks" in p.a for p in parts)
    keys = KEYS + (KV_KEYS if kv else ())
    if not all(p.a.keys() == set(keys) for p in parts):  # some part lacks the kv messages
        out = Piece(parts[0].labels, hosts, kv)
        for part, group in zip(parts, groups, strict=True):
            for key, arr in part.a.items():
                out.a[key][:, group] = arr + offset if offset else arr
    else:  # every column at once (groups disjoint); gathered when they cover every column
        columns = np.concatenate([np.asarray(g, dtype=np.int64) for g in groups])
        covers = columns.size == hosts and np.array_equal(np.sort(columns), np.arange(hosts))
        in_order = covers and np.array_equal(columns, np.arange(hosts))
        order = np.argsort(columns) if covers and not in_order else None
        out = Piece(parts[0].labels, hosts, kv, arrays={} if covers else None)
        for key in keys:
            arr = np.concatenate([p.a[key] for p in parts], axis=1)
            arr = arr + offset if offset else arr
            if covers:
                out.a[key] = arr if order is None else arr[:, order]
            else:
                out.a[key][:, columns] = arr
    for part in parts:
        out.grad_rows |= part.grad_rows
    return out
