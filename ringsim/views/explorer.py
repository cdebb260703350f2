"""Data for the book's ring explorer: every schedule it can show, as one small JSON document.

The explorer (``book/explorer/``) is a static page: HTML and a short script, no server, no
kernel. What it draws comes from here, so it shows the library's schedule and nothing else:

* for ``P`` in ``2..16``, each layout, causal or full, forward or backward: the kv block each
  host holds at each step (``Schedule.kv_owner``), what it does with it (``Schedule.kind_at``)
  and what it sends after the step (``Schedule.payload``);
* each host's running error after each step, measured on a small random problem run by the
  NumPy ring (``ring_attention`` / ``ring_attention_backward`` with a ``RingRecord``) against
  the float64 reference: the running output (forward) or the running ``dq`` (backward).

Matrices are stored as strings, one character per host (``kinds``: ``0`` skip, ``1``
partial, ``2`` full; ``owners``: base 36) and errors as tenths of a decade (``-160`` is
``1e-16``), which keeps the whole file near 100 kB.

    python -m ringsim.views.explorer book/_static/explorer/schedules.json
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np

from ringsim.layouts import layout_names
from ringsim.numerics.attention import reference_attention, reference_attention_grad
from ringsim.numerics.ring import RingRecord, ring_attention, ring_attention_backward
from ringsim.numerics.rounding import relative_error
from ringsim.schedule import PASSES, build_schedule

HOSTS = tuple(range(2, 17))
TOKENS_PER_HOST = 4  # even, so zigzag's two chunks per host split it
HEAD_DIM = 8
ERROR_FLOOR = 1e-17  # an error of exactly 0 is stored as this (log scale)
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _log_tenths(errors: np.ndarray) -> list[int]:
    """``1e-16 -> -160``: errors on a log scale, a tenth of a decade apart."""
    return [round(10 * math.log10(max(float(e), ERROR_FLOOR))) for e in errors]


def running_errors(hosts: int, layout: str, causal: bool, pass_: str, seed: int = 0) -> np.ndarray:
    """``(steps, hosts)`` worst relative error of each host's running result after each step.

    Forward: the running output ``acc / row_sum`` against exact attention of the host's rows.
    Backward: the running ``dq`` against the exact gradient of the host's rows.
    """
    rng = np.random.default_rng(seed)
    n = hosts * TOKENS_PER_HOST
    q, k, v, dout = (rng.standard_normal((n, HEAD_DIM)) for _ in range(4))
    record = RingRecord()
    if pass_ == "forward":
        ring_attention(q, k, v, hosts=hosts, layout=layout, causal=causal, record=record)
        exact = reference_attention(q, k, v, causal=causal)
    else:
        ring_attention_backward(
            q, k, v, dout, hosts=hosts, layout=layout, causal=causal, record=record
        )
        exact = reference_attention_grad(q, k, v, dout, causal=causal)[0]
    positions = build_schedule(hosts, layout, causal, pass_, seq_len=n).positions
    errors = np.empty((len(record.outputs), hosts))
    for s, outputs in enumerate(record.outputs):
        for h, out in enumerate(outputs):
            errors[s, h] = relative_error(out, exact[positions[h]]).max()
    return errors


def schedule_entry(hosts: int, layout: str, causal: bool, pass_: str) -> dict:
    """One configuration of the explorer: owners, kinds, payloads and running errors."""
    sched = build_schedule(hosts, layout, causal, pass_, seq_len=hosts * TOKENS_PER_HOST)
    errors = running_errors(hosts, layout, causal, pass_)
    return {
        "owners": ["".join(DIGITS[o] for o in sched.kv_owner(s)) for s in range(sched.steps)],
        "kinds": ["".join(str(int(k)) for k in sched.kind_at(s)) for s in range(sched.steps)],
        "sends": [",".join(sched.payload(s)) for s in range(sched.steps)],
        "errors": [_log_tenths(row) for row in errors],
    }


def key(hosts: int, layout: str, causal: bool, pass_: str) -> str:
    """``"8/zigzag/causal/forward"``: how the page looks an entry up."""
    return f"{hosts}/{layout}/{'causal' if causal else 'full'}/{pass_}"


def explorer_data(hosts: tuple[int, ...] = HOSTS) -> dict:
    """Every configuration the explorer offers, with what it needs to label them."""
    entries = {
        key(p, layout, causal, pass_): schedule_entry(p, layout, causal, pass_)
        for p in hosts
        for layout in layout_names()
        for causal in (True, False)
        for pass_ in PASSES
    }
    return {
        "hosts": list(hosts),
        "layouts": list(layout_names()),
        "passes": list(PASSES),
        "tokens_per_host": TOKENS_PER_HOST,
        "error_floor_log10": math.log10(ERROR_FLOOR),
        "kinds": {"0": "skip", "1": "partial", "2": "full"},
        "entries": entries,
    }


def write_explorer_data(path: str | os.PathLike, hosts: tuple[int, ...] = HOSTS) -> Path:
    """Write ``explorer_data`` as compact JSON to ``path`` and as ``window.RING_DATA = ...;`` to
    ``path`` with a ``.js`` suffix (a page opened from ``file://`` may not ``fetch`` JSON, but
    it may load a script beside it). Returns the ``.js`` path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(explorer_data(hosts), separators=(",", ":"))
    path.write_text(text)
    script = path.with_suffix(".js")
    script.write_text(f"window.RING_DATA = {text};\n")
    return script


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "schedules.json"
    print(write_explorer_data(target))
