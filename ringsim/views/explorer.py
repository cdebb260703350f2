"""Data for the book's ring explorer, a timing lab: every ring it can show, as one script.

The explorer (``book/explorer.md`` + ``book/_static/explorer.js``) is a static page: HTML and
a script, no server, no kernel. Everything it draws is computed here, by the library, at book
build time; the page only picks the entry for its controls, draws it and interpolates between
the times stored here. Two parts:

* ``rings``: for ``P`` in ``2..16``, each layout, causal or full, forward or backward, the
  schedule (``Schedule.kv_owner``, ``kind_at``, ``payload``, ``positions``) and the numerics of
  a small random problem run by the NumPy ring with a ``RingRecord``: each host's running
  ``row_max`` and ``row_sum`` after each step (forward) and the relative error of each of its
  rows (the running output, or ``dq`` in a backward pass) against the float64 reference.
* ``timing``: the event timer's timeline (``simulate``, ideal kernels, perfect overlap) of the
  same ring on A100s for each block size ``c`` (``BLOCK_TOKENS``) and link bandwidth ``B``
  (``BANDWIDTHS``), and the block sizes at which a step's compute hides its transfer
  (``overlap_threshold``: ``F/B`` for a full block, twice it for a balanced causal ring;
  ``threshold_kind`` says which one a ring needs). Each timeline also says what each host
  holds when (``holds``): the block it computes, and after that, while the block is still
  being sent on; never a block before it has arrived, never one block on two hosts at once.
* ``strategies``: the same attention timed as a ring, an all-gather, Ulysses and a two-node
  hybrid (``simulate_strategy``), one lane each for the host that finishes last, for
  ``STRATEGY_HOSTS`` and every slider stop.
* ``windows``: each ring under a sliding window of ``WINDOW_TOKENS`` (a quarter of a block to
  two blocks): the block kinds the window leaves, the steps the windowed ring runs
  (``Schedule.ring_steps``) and how far each block jumps after each (``hops_after``): the
  steps it skips and the hosts it jumps over.

Timelines are stored as integers, ``TIME_UNITS`` to the run's makespan, a row that is the same
on every host as one number, and each distinct timeline once (a full mask times every layout
alike). The whole document is gzipped and base64-encoded into ``explorer-data.js``
(``window.RING_DATA_GZ``); the page inflates it with the browser's ``DecompressionStream``.
``load_explorer_data`` reads it back in Python.

    python -m ringsim.views.explorer book/_build/generated/explorer-data.js
"""

from __future__ import annotations

import base64
import gzip
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
from ringsim.schedule import RING_PASSES, Pass, build_schedule
from ringsim.timer import RingConfig, simulate
from ringsim.timer.cost import overlap_threshold
from ringsim.timer.engine.result import kv_messages
from ringsim.timer.machine.hardware import Hardware, custom_hardware, get_hardware
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.strategies import simulate_strategy

HOSTS = tuple(range(2, 17))
TOKENS_PER_HOST = 4  # even, so zigzag's two chunks per host split it
WINDOW_TOKENS = (1, 2, 4, 8)  # a quarter of a block, half, one, two blocks
HEAD_DIM = 8
ERROR_FLOOR = 1e-17  # an error of exactly 0 is stored as this (log scale)
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"

# The timing lab: A100s (the paper's Table 2 machine) with a link of bandwidth B, running a
# layer of RingConfig's default shape (32 heads of 128, bf16) with c tokens per host.
LAB_HARDWARE = "a100-ib"  # F and the link latency come from this preset; B from the slider
LAB_DTYPE = "bf16"
LAB_HEADS = 32
LAB_HEAD_DIM = 128
BLOCK_TOKENS = tuple(512 * 2**k for k in range(9))  # 512 .. 128K tokens per host
BANDWIDTHS = (6.25e9, 12.5e9, 25e9, 50e9, 100e9, 200e9, 300e9)  # bytes/s, one way
BANDWIDTH_NAMES = {
    12.5e9: "InfiniBand 100 Gb/s",
    50e9: "InfiniBand 400 Gb/s",
    300e9: "A100 NVLink",
}
TIME_UNITS = 2000  # a timeline's times are integers in makespan / TIME_UNITS
HALF_BLOCK = 0.51  # a causal ring whose later steps all compute at most this much of a block
# is balanced: it needs 2 F/B (at 64 tokens per host striped computes 65/128 of a block)
STRATEGY_HOSTS = (4, 8, 16)  # the rings the strategies panel times (the hybrid: two nodes)
NODE_LINK = "a100-nvlink"  # the two-node hybrid's link inside a node; B is its NIC


def _log_tenths(errors: np.ndarray) -> list:
    """``1e-16 -> -160``: errors on a log scale, a tenth of a decade apart (nested lists)."""
    tenths = np.round(10 * np.log10(np.maximum(np.asarray(errors, float), ERROR_FLOOR)))
    return tenths.astype(int).tolist()


def _sig(x: np.ndarray, digits: int = 4) -> list:
    """Numbers to ``digits`` significant digits (nested lists; ``-inf`` -> ``None``)."""
    flat = [None if not np.isfinite(v) else float(f"{v:.{digits}g}") for v in np.ravel(x)]
    return np.array(flat, dtype=object).reshape(np.shape(x)).tolist()


def _problem(hosts: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    n = hosts * TOKENS_PER_HOST
    return tuple(rng.standard_normal((n, HEAD_DIM)) for _ in range(4))


def running_rows(hosts: int, layout: str, causal: bool, pass_: str, seed: int = 0) -> dict:
    """What each host's rows hold after each step of a small random ring (``RingRecord``).

    ``error``: ``(steps, hosts, rows)`` relative error of each running row against the exact
    one: the output ``acc / row_sum`` (forward) or ``dq`` (backward). Forward only:
    ``row_max``, ``row_sum`` ``(steps, hosts, rows)``, the online softmax's running statistics.
    """
    q, k, v, dout = _problem(hosts, seed)
    record = RingRecord()
    if pass_ == Pass.FORWARD:
        ring_attention(q, k, v, hosts=hosts, layout=layout, causal=causal, record=record)
        exact = reference_attention(q, k, v, causal=causal)
    else:
        ring_attention_backward(
            q, k, v, dout, hosts=hosts, layout=layout, causal=causal, record=record
        )
        exact = reference_attention_grad(q, k, v, dout, causal=causal)[0]
    positions = build_schedule(hosts, layout, causal, pass_, seq_len=len(q)).positions
    error = np.array(
        [
            [relative_error(out, exact[positions[h]]) for h, out in enumerate(outputs)]
            for outputs in record.outputs
        ]
    )
    rows = {"error": error}
    if record.states:
        rows["row_max"] = np.array([[st.row_max for st in step] for step in record.states])
        rows["row_sum"] = np.array([[st.row_sum for st in step] for step in record.states])
    return rows


def running_errors(hosts: int, layout: str, causal: bool, pass_: str, seed: int = 0) -> np.ndarray:
    """``(steps, hosts)`` worst relative error of each host's running result after each step."""
    return running_rows(hosts, layout, causal, pass_, seed)["error"].max(axis=-1)


def ring_entry(hosts: int, layout: str, causal: bool, pass_: str) -> dict:
    """One ring: owners, kinds, payloads, token positions and the running rows."""
    sched = build_schedule(hosts, layout, causal, pass_, seq_len=hosts * TOKENS_PER_HOST)
    rows = running_rows(hosts, layout, causal, pass_)
    entry = {
        "owners": ["".join(DIGITS[o] for o in sched.kv_owner(s)) for s in range(sched.steps)],
        "kinds": ["".join(str(int(k)) for k in sched.kind_at(s)) for s in range(sched.steps)],
        "sends": [",".join(sched.payload(s)) for s in range(sched.steps)],
        "positions": sched.positions.tolist(),
        "errors": _log_tenths(rows["error"].max(axis=-1)),
        "row_errors": _log_tenths(rows["error"]),
    }
    if "row_max" in rows:
        entry["row_max"] = _sig(rows["row_max"])
        entry["row_sum"] = _sig(rows["row_sum"])
    return entry


def window_entry(hosts: int, layout: str, causal: bool, pass_: str, window: int) -> dict:
    """One ring under a sliding window of ``window`` tokens: every step's block kinds, the
    steps the ring runs and each one's jump (``hops_after``: 0 when nothing moves after it;
    backward, the last one's is the way home)."""
    sched = build_schedule(
        hosts, layout, causal, pass_, seq_len=hosts * TOKENS_PER_HOST, sliding_window=window
    )
    steps = sched.ring_steps
    return {
        "kinds": ["".join(str(int(k)) for k in sched.kind_at(s)) for s in range(sched.steps)],
        "steps": list(steps),
        "hops": [sched.hops_after(s) for s in steps],
        "sends": [",".join(sched.payload(s)) for s in steps],
    }


# ---------------------------------------------------------------------------------------------
# the timing lab
# ---------------------------------------------------------------------------------------------


def lab_hardware(bandwidth: float) -> Hardware:
    """``LAB_HARDWARE``'s FLOP rate and latency with a link of ``bandwidth`` bytes/s."""
    base = get_hardware(LAB_HARDWARE)
    return custom_hardware(
        base.flops_for(LAB_DTYPE), bandwidth, base.link_latency, base.memory_bytes, LAB_DTYPE
    )


def lab_threshold(bandwidth: float, pass_: str) -> float:
    """``overlap_threshold`` (tokens) on the lab's hardware, a full block, latency left out:
    ``F/B`` forward, ``0.8 F/B`` backward. A balanced causal ring needs about twice it."""
    return overlap_threshold(
        lab_hardware(bandwidth),
        heads=LAB_HEADS,
        kv_heads=LAB_HEADS,
        head_dim=LAB_HEAD_DIM,
        dtype=LAB_DTYPE,
        pass_=pass_,
        include_latency=False,
    )


def _bandwidth_for(block_tokens: float, pass_: str) -> float:
    """The bandwidth at which ``block_tokens`` is ``lab_threshold`` (it falls as B grows):
    bisection on a log scale, to a relative 1e-12."""
    lo, hi = 1e3, 1e16
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if lab_threshold(mid, pass_) > block_tokens else (lo, mid)
        if hi / lo < 1 + 1e-12:
            break
    return math.sqrt(lo * hi)


def _slider_position(value: float, grid: tuple[float, ...]) -> float | None:
    """Where ``value`` sits on a slider whose stops are ``grid`` (log scale between stops):
    a fractional stop index, ``None`` off the scale."""
    logs = np.log(np.asarray(grid, float))
    if not logs[0] <= math.log(value) <= logs[-1]:
        return None
    return float(np.interp(math.log(value), logs, np.arange(len(grid))))


def thresholds(pass_: str) -> dict:
    """The marks of the two sliders for ``pass_``: per bandwidth, the block size that hides
    the transfer (``full``) and twice it (``causal``), with their places on the block-size
    slider; per block size, the bandwidths at which it is those thresholds, with their places
    on the bandwidth slider. ``names``: what the marks are, in units of the forward's F/B."""
    ratio = lab_threshold(BANDWIDTHS[0], pass_) / lab_threshold(BANDWIDTHS[0], "forward")
    factor = "" if math.isclose(ratio, 1.0) else f"{ratio:g} "
    by_bandwidth, by_block = [], []
    for b in BANDWIDTHS:
        full = lab_threshold(b, pass_)
        tokens = {"full": full, "causal": 2 * full}
        by_bandwidth.append({k: [v, _slider_position(v, BLOCK_TOKENS)] for k, v in tokens.items()})
    for c in BLOCK_TOKENS:
        speeds = {"full": _bandwidth_for(c, pass_), "causal": _bandwidth_for(c / 2, pass_)}
        by_block.append({k: [v, _slider_position(v, BANDWIDTHS)] for k, v in speeds.items()})
    return {
        "names": {"full": f"{factor}F/B", "causal": f"{2 * ratio:g} F/B"},
        "by_bandwidth": by_bandwidth,
        "by_block": by_block,
    }


def _units(start: np.ndarray, end: np.ndarray, span: float) -> tuple[np.ndarray, ...]:
    """``(steps, hosts)`` intervals in integer ``span / TIME_UNITS``: ``(start, duration,
    end)`` with ``end = start + duration`` exactly (what the page adds up) and never past
    ``TIME_UNITS``, the end of the run; NaN -> 0."""
    units = lambda t: np.round(np.where(np.isnan(t), 0, t) / span * TIME_UNITS).astype(int)
    start_u = units(start)
    duration_u = np.minimum(units(end - start), TIME_UNITS - start_u)
    return start_u, duration_u, start_u + duration_u


def _rows(start: np.ndarray, end: np.ndarray, span: float) -> list:
    """``(steps, hosts)`` intervals as ``[starts, durations]`` (``_units``); a row equal on
    every host is one number, a row with no interval ``None``."""
    none = np.isnan(start).all(axis=1)

    def rows(values: np.ndarray) -> list:
        same = (values == values[:, :1]).all(axis=1)
        return [
            None if skip else int(r[0]) if one else r.tolist()
            for r, one, skip in zip(values, same, none, strict=True)
        ]

    start_u, duration_u, _ = _units(start, end, span)
    return [rows(start_u), rows(duration_u)]


def lab_config(
    hosts: int, layout: str, causal: bool, pass_: str, block_tokens: int, bandwidth: float
) -> RingConfig:
    """The ring the timing lab times: ``hosts`` A100s, ``block_tokens`` tokens each."""
    return RingConfig(
        hosts=hosts,
        seq_len=hosts * block_tokens,
        hardware=lab_hardware(bandwidth),
        heads=LAB_HEADS,
        head_dim=LAB_HEAD_DIM,
        dtype=LAB_DTYPE,
        layout=layout,
        causal=causal,
        pass_=pass_,
    )


def holds(tl, kv: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(start, end)``, ``(steps, hosts)`` seconds: when host ``h`` holds its step-``s`` block
    (``kv_owner(s)[h]``) to work with: from the start of its compute of step ``s`` until it has
    computed it and sent it on (``k, v`` and, backward, ``dk, dv``), cut short where the host
    takes up its next block or the next host takes up this one, so a block is never drawn on
    two hosts at once. A block is never held before it has arrived (a compute starts only
    once its block is there). A skipped block is never held (NaN): the host only forwards it,
    and it is drawn as the message it is."""
    computed = tl.compute_end > tl.compute_start
    start = np.where(computed, tl.compute_start, np.nan)
    end = np.fmax(np.fmax(tl.compute_end, tl.send_end), kv[1])
    end = np.where(computed, end, np.nan)
    # the host's own next block, and the next host's use of this block (one step later)
    end[:-1] = np.fmin(end[:-1], start[1:])
    end[:-1] = np.fmin(end[:-1], np.roll(start[1:], -1, axis=1))
    return start, end


def threshold_kind(hosts: int, layout: str, causal: bool, pass_: str) -> str:
    """``"causal"`` when a ring computes at most about half a block at every step after the
    first (balanced causal layouts: the block must be ``2 F/B`` to hide its transfer),
    ``"full"`` otherwise (``F/B``; a contiguous causal ring's busiest host computes whole
    blocks)."""
    if not causal:
        return "full"
    sched = build_schedule(hosts, layout, causal, pass_, seq_len=hosts * 64)
    later = max((float(np.max(sched.exact_work_at(s))) for s in range(1, sched.steps)), default=1)
    return "causal" if later <= HALF_BLOCK else "full"


def timeline_entry(config: RingConfig) -> dict:
    """One timed run: its summary (seconds, fractions) and its intervals (``_rows``).

    ``kv``: each host's ``k, v`` message of each step; ``grad`` (backward): its ``dk, dv``
    message; ``holds``: when each host holds its step's block (``holds``); ``step_ends``:
    when every host has computed and sent step ``s``."""
    result = simulate(config, keep_timeline=True)
    tl, summary = result.timeline, result.summary()
    span = result.makespan
    kv = kv_messages(tl).get("send") or (tl.send_start, tl.send_end)
    intervals = {"compute": (tl.compute_start, tl.compute_end), "kv": kv}
    if config.pass_ == Pass.BACKWARD:
        intervals["grad"] = (tl.send_start, tl.send_end)
    # in the page's own units, so that at a step's end every host has done it, to the unit
    ends = [_units(*pair, span)[2] for pair in intervals.values()]
    step_ends = np.max(np.stack(ends), axis=(0, 2))
    intervals["holds"] = holds(tl, kv if config.pass_ == Pass.BACKWARD else (kv[0], kv[0]))
    figures = {
        "span": span,
        "compute_s": summary["compute_time_s"],
        "exposed": summary["exposed_comm_s"] / span,
        "idle": summary["idle_fraction"],
        "step_compute_s": np.nanmax(tl.compute_end - tl.compute_start),
        "step_kv_s": np.nanmax(kv[1] - kv[0]),
    }
    if config.pass_ == Pass.BACKWARD:
        figures["step_grad_s"] = np.nanmax(tl.send_end - tl.send_start)
    entry = {
        **{name: _sig(value, 6) for name, value in figures.items()},
        "step_ends": step_ends.tolist(),
        **{name: _rows(*pair, span) for name, pair in intervals.items()},
    }
    return entry


# ---------------------------------------------------------------------------------------------
# the strategies side by side
# ---------------------------------------------------------------------------------------------


def two_nodes(hosts: int, bandwidth: float) -> Cluster:
    """Two nodes of ``hosts / 2`` lab GPUs: ``NODE_LINK``'s link inside a node, the slider's
    ``bandwidth`` between nodes (one NIC per GPU)."""
    inside = get_hardware(NODE_LINK)
    lab = lab_hardware(bandwidth)
    return Cluster(
        name=f"2 x {hosts // 2} lab A100s",
        hardware=lab,
        gpus_per_node=hosts // 2,
        intra_bandwidth=inside.link_bandwidth,
        intra_latency=inside.link_latency,
        inter_bandwidth=bandwidth,
        inter_latency=lab.link_latency,
        nodes=2,
    )


def strategy_runs(config: RingConfig) -> dict:
    """``{label: StrategyResult}``: ``config`` as a ring, an all-gather and Ulysses on one
    switch at the lab's link, and Ulysses inside two nodes times a ring of two across them."""
    hosts = config.hosts
    cluster = two_nodes(hosts, config.hardware.link_bandwidth)
    return {
        "ring": simulate_strategy(config, "ring"),
        "all-gather": simulate_strategy(config, "allgather"),
        "Ulysses": simulate_strategy(config, "ulysses"),
        f"hybrid U{hosts // 2} x R2, two nodes": simulate_strategy(
            config, "hybrid", ulysses_degree=hosts // 2, cluster=cluster
        ),
    }


def strategy_entry(config: RingConfig) -> dict:
    """The strategies of ``config`` on one time axis (``TIME_UNITS`` to the slowest one's
    makespan): per strategy its makespan (seconds), idle share and the lane of the host that
    finishes last: its compute and its communication intervals, phase by phase."""
    runs = strategy_runs(config)
    span = max(run.makespan for run in runs.values())
    lanes = []
    for label, run in runs.items():
        tl = run.timeline
        ends = np.fmax(np.nan_to_num(tl.compute_end, nan=0), np.nan_to_num(tl.send_end, nan=0))
        host = int(np.argmax(ends.max(axis=0)))
        lane = {"label": label, "makespan": _sig(run.makespan, 6), "host": host}
        lane["idle"] = _sig(run.summary()["idle_fraction"], 4)
        for name, (start, end) in (
            ("compute", (tl.compute_start, tl.compute_end)),
            ("comm", (tl.send_start, tl.send_end)),
        ):
            s_u, _, e_u = _units(start[:, host : host + 1], end[:, host : host + 1], span)
            ok = ~np.isnan(start[:, host]) & (end[:, host] > start[:, host])
            pairs = zip(s_u[:, 0], e_u[:, 0], ok, strict=True)
            lane[name] = [[int(a), int(b)] for a, b, k in pairs if k]
        lane["phases"] = list(tl.step_labels)
        lanes.append(lane)
    return {"span": _sig(span, 6), "lanes": lanes}


def slider_grid(entry_of, config: tuple, entries: list[dict], seen: dict[str, int]) -> list:
    """``[[index per bandwidth] per block size]``: ``entry_of(lab_config(*config, c, b))`` at
    every slider stop, each distinct entry stored once in ``entries`` (``seen``: its JSON ->
    its index)."""
    grid = []
    for c in BLOCK_TOKENS:
        row = []
        for b in BANDWIDTHS:
            entry = entry_of(lab_config(*config, c, b))
            text = json.dumps(entry, separators=(",", ":"))
            if text not in seen:
                seen[text] = len(entries)
                entries.append(entry)
            row.append(seen[text])
        grid.append(row)
    return grid


def strategies_data(hosts: tuple[int, ...] = STRATEGY_HOSTS) -> tuple[dict, list]:
    """``{"P/mask/pass": slider_grid}`` and the distinct entries (``strategy_entry``), for the
    zigzag layout (the ring's balanced one)."""
    index: dict[str, list] = {}
    entries: list[dict] = []
    seen: dict[str, int] = {}
    for p in hosts:
        for causal in (True, False):
            for pass_ in RING_PASSES:
                grid = slider_grid(strategy_entry, (p, "zigzag", causal, pass_), entries, seen)
                index[f"{p}/{'causal' if causal else 'full'}/{pass_}"] = grid
    return index, entries


def key(hosts: int, layout: str, causal: bool, pass_: str) -> str:
    """``"8/zigzag/causal/forward"``: how the page looks an entry up."""
    return f"{hosts}/{layout}/{'causal' if causal else 'full'}/{pass_}"


def explorer_data(hosts: tuple[int, ...] = HOSTS) -> dict:
    """Every ring the explorer offers, its timelines on the slider grid, and the labels."""
    configs = [
        (p, layout, causal, pass_)
        for p in hosts
        for layout in layout_names()
        for causal in (True, False)
        for pass_ in RING_PASSES
    ]
    timelines: list[dict] = []
    seen: dict[str, int] = {}
    timing = {key(*cfg): slider_grid(timeline_entry, cfg, timelines, seen) for cfg in configs}
    base = get_hardware(LAB_HARDWARE)
    strategy_index, strategy_entries = strategies_data(
        tuple(p for p in STRATEGY_HOSTS if p in hosts)
    )
    return {
        "hosts": list(hosts),
        "layouts": list(layout_names()),
        "passes": list(RING_PASSES),
        "tokens_per_host": TOKENS_PER_HOST,
        "error_floor_log10": math.log10(ERROR_FLOOR),
        "kinds": {"0": "skip", "1": "partial", "2": "full"},
        "rings": {key(*cfg): ring_entry(*cfg) for cfg in configs},
        "threshold_kind": {key(*cfg): threshold_kind(*cfg) for cfg in configs},
        "lab": {
            "hardware": base.source,
            "flops": base.flops_for(LAB_DTYPE),
            "latency_s": base.link_latency,
            "dtype": LAB_DTYPE,
            "heads": LAB_HEADS,
            "head_dim": LAB_HEAD_DIM,
            "block_tokens": list(BLOCK_TOKENS),
            "bandwidths": list(BANDWIDTHS),
            "bandwidth_names": {str(b): name for b, name in BANDWIDTH_NAMES.items()},
            "time_units": TIME_UNITS,
            "thresholds": {p: thresholds(p) for p in RING_PASSES},
        },
        "timing": timing,
        "timelines": timelines,
        "strategies": {"index": strategy_index, "entries": strategy_entries},
        "windows": {
            "tokens": list(WINDOW_TOKENS),
            "rings": {key(*cfg): [window_entry(*cfg, w) for w in WINDOW_TOKENS] for cfg in configs},
        },
    }


def write_explorer_data(path: str | os.PathLike, hosts: tuple[int, ...] = HOSTS) -> Path:
    """Write ``explorer_data`` to ``path`` with a ``.js`` suffix as ``window.RING_DATA_GZ =
    "<base64 of gzipped JSON>";`` (a page opened from ``file://`` may not ``fetch`` JSON, but
    it may load a script beside it). Returns the path written."""
    script = Path(path).with_suffix(".js")
    script.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(explorer_data(hosts), separators=(",", ":"))
    packed = base64.b64encode(gzip.compress(text.encode(), compresslevel=9, mtime=0)).decode()
    script.write_text(f'window.RING_DATA_GZ = "{packed}";\n')
    return script


def load_explorer_data(path: str | os.PathLike) -> dict:
    """Read back what ``write_explorer_data`` wrote (for tests and notebooks)."""
    text = Path(path).read_text()
    packed = text[text.index('"') + 1 : text.rindex('"')]
    return json.loads(gzip.decompress(base64.b64decode(packed)))


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "explorer-data.js"
    print(write_explorer_data(target))
