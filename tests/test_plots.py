"""The figures: they draw what the timeline holds, stay readable for big rings, mark thresholds."""

import subprocess
import sys

import matplotlib
import numpy as np
import pytest
from matplotlib.colors import to_hex

from ringsim.timer import RingConfig, simulate
from ringsim.timer.engine.timeline import Timeline
from ringsim.timer.machine.hardware import custom_hardware
from ringsim.views import plots

matplotlib.use("Agg")


def staircase(hosts: int, steps: int | None = None, t_compute: float = 1e-3) -> Timeline:
    """Host h computes for the first h + 1 steps (a causal contiguous ring, compute-bound),
    sends after every step but the last; the receive is the neighbour's send."""
    steps = steps or hosts
    shape = (steps, hosts)
    s = np.arange(steps)[:, None] * t_compute
    active = np.arange(steps)[:, None] <= np.arange(hosts)[None, :]
    compute_start = np.where(active, s, np.nan) + np.zeros(shape)
    compute_end = compute_start + t_compute
    send_start = s + np.zeros(shape)
    send_end = send_start + 0.4 * t_compute
    send_start[-1], send_end[-1] = np.nan, np.nan
    return Timeline(
        compute_start,
        compute_end,
        send_start,
        send_end,
        np.roll(send_start, 1, axis=1),
        np.roll(send_end, 1, axis=1),
        step_labels=[str(i) for i in range(steps)],
    )


def bars_of(ax, colour: str) -> int:
    """Rectangles drawn with ``colour`` (broken_barh collections) on ``ax``."""
    count = 0
    for collection in ax.collections:
        faces = collection.get_facecolor()
        if len(faces) and to_hex(faces[0]) == colour.lower():
            count += len(collection.get_paths())
    return count


def test_timeline_draws_one_bar_per_activity(tmp_path):
    timeline = staircase(4)
    path = tmp_path / "timeline.png"
    fig = plots.plot_timeline(timeline, path, title="causal contiguous")
    ax = fig.axes[0]
    finite = lambda a: int(np.isfinite(a).sum())
    assert bars_of(ax, plots.COLOURS["compute"]) == finite(timeline.compute_start) == 10
    assert bars_of(ax, plots.COLOURS["send"]) == finite(timeline.send_start) == 12
    assert bars_of(ax, plots.COLOURS["recv"]) == finite(timeline.recv_start)
    assert bars_of(ax, plots.COLOURS["idle"]) == 4  # one idle background per host row
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"host {h}" for h in range(4)]
    # Step labels sit inside the compute bars: one per computed block.
    assert sorted(t.get_text() for t in ax.texts) == sorted(
        str(s) for s in range(4) for h in range(4) if s <= h
    )
    assert "idle 37.5%" in ax.get_title(loc="left")  # 1 - 10 / (4 hosts x 4 steps)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 20_000


def simulated(pass_: str, hosts: int = 4) -> Timeline:
    hw = custom_hardware(1e12, 1e9, 1e-6)
    cfg = RingConfig(hosts, hosts * 64, hw, heads=2, head_dim=16, causal=True, pass_=pass_)
    return simulate(cfg).timeline


def legend_labels(fig) -> list[str]:
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_backward_draws_the_kv_and_the_dkdv_messages_on_both_sides(tmp_path):
    timeline = simulated("backward")
    fig = plots.plot_timeline(timeline, tmp_path / "backward.png")
    ax, meta = fig.axes[0], timeline.meta
    finite = lambda a: int(np.isfinite(a).sum())
    assert finite(meta["kv_send_start"]) == 12  # 3 early k,v hops per host
    assert bars_of(ax, plots.COLOURS["send"]) == finite(meta["kv_send_start"])
    assert bars_of(ax, plots.COLOURS["recv"]) == finite(meta["kv_recv_start"]) == 12
    assert bars_of(ax, plots.COLOURS["send_grad"]) == finite(timeline.send_start) == 16
    assert bars_of(ax, plots.COLOURS["recv_grad"]) == finite(timeline.recv_start) == 16
    labels = legend_labels(fig)
    for name in ("send k,v", "send dk,dv", "receive k,v", "receive dk,dv"):
        assert name in labels
    assert "send" not in labels  # every message is named


def test_train_step_colours_forward_blocks_as_blocks(tmp_path):
    timeline = simulated("train-step", hosts=3)
    grads = timeline.meta["grad_rows"]
    assert timeline.step_labels[int(np.argmax(grads))] == "bwd 0" and grads.sum() == 3
    fig = plots.plot_timeline(timeline, tmp_path / "step.png")
    ax = fig.axes[0]
    finite = lambda a: int(np.isfinite(a).sum())
    blocks = finite(timeline.send_start[~grads]) + finite(timeline.meta["kv_send_start"])
    assert finite(timeline.send_start[~grads]) == 6  # the forward ring: 2 hops on 3 hosts
    assert bars_of(ax, plots.COLOURS["send"]) == blocks
    assert bars_of(ax, plots.COLOURS["send_grad"]) == finite(timeline.send_start[grads]) == 9


def test_forward_and_decode_keep_the_plain_legend(tmp_path):
    for pass_ in ("forward", "decode"):
        timeline = simulated(pass_)
        fig = plots.plot_timeline(timeline, tmp_path / f"{pass_}.png")
        assert legend_labels(fig) == ["compute", "send", "receive", "idle"]
        assert bars_of(fig.axes[0], plots.COLOURS["send"]) == np.isfinite(timeline.send_start).sum()
        assert bars_of(fig.axes[0], plots.COLOURS["send_grad"]) == 0


def test_big_ring_shows_first_and_last_hosts_with_a_note(tmp_path):
    timeline = staircase(64)
    fig = plots.plot_timeline(timeline, tmp_path / "big.png", max_hosts=16)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [f"host {h}" for h in [*range(8), *range(56, 64)]]
    assert "showing 16 of 64 hosts" in ax.get_title(loc="left")
    assert len(ax.texts) == 0  # 64 steps: too many for per-bar labels
    assert bars_of(ax, plots.COLOURS["idle"]) == 16


def test_many_steps_merge_touching_bars_but_keep_gaps():
    start = np.array([0.0, 1.0, 2.0, 5.0])
    end = np.array([1.0, 2.0, 3.0, 6.0])
    assert plots._merged(start, end, tolerance=1e-9) == [(0.0, 3.0), (5.0, 1.0)]
    assert len(plots._merged(start, end, tolerance=-np.inf)) == 4
    assert plots._merged(np.array([np.nan]), np.array([np.nan]), 0.0) == []


def test_stacked_panels_share_the_time_axis(tmp_path):
    slow, fast = staircase(4), staircase(4, t_compute=0.5e-3)
    fig = plots.plot_timelines([("slow", slow), ("fast", fast)], tmp_path / "two.svg")
    assert len(fig.axes) == 2
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    assert fig.axes[0].get_xlim()[1] >= slow.makespan * 1e3  # milliseconds
    assert (tmp_path / "two.svg").read_text().startswith("<?xml")


def test_sweep_marks_the_threshold(tmp_path):
    x = [256, 512, 1024, 2048, 4096]
    fig = plots.plot_sweep(
        x,
        {"with overlap": [4, 2, 1, 1, 1], "without": [5, 3, 2, 1.5, 1.25]},
        tmp_path / "sweep.png",
        xlabel="block",
        ylabel="makespan / compute",
        threshold=1024,
        references={"closed form": [4, 2, 1, 1, 1]},
    )
    ax = fig.axes[0]
    assert len(ax.lines) == 4  # two series, one reference, one threshold line
    vertical = [line for line in ax.lines if np.all(np.asarray(line.get_xdata()) == 1024)]
    assert len(vertical) == 1
    assert any("1K tokens" in t.get_text() for t in ax.texts)
    assert ax.get_xscale() == "log"
    assert (tmp_path / "sweep.png").stat().st_size > 10_000


def test_sweep_refuses_mismatched_series():
    with pytest.raises(ValueError, match="has 2 values for 3 x values"):
        plots.plot_sweep([1, 2, 3], {"a": [1, 2]}, xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="at least one"):
        plots.plot_timelines([])


@pytest.mark.parametrize(
    ("seconds", "unit"), [(2.0, "s"), (0.012, "ms"), (3e-5, "µs"), (2e-9, "ns")]
)
def test_time_unit(seconds, unit):
    assert plots.time_unit(seconds)[0] == unit


def test_shown_hosts():
    assert plots.shown_hosts(5, 16) == [0, 1, 2, 3, 4]
    assert plots.shown_hosts(4096, 4) == [0, 1, 4094, 4095]


def test_format_tokens():
    assert [plots.format_tokens(n) for n in (1000, 1536, 65536, 2**24)] == [
        "1000",
        "1.5K",
        "64K",
        "16M",
    ]


def test_import_ringsim_does_not_load_matplotlib():
    code = (
        "import sys, ringsim, ringsim.views.plots, ringsim.cli, ringsim.cli.demo; "
        "print('matplotlib' in sys.modules, 'rich' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]


def test_timelines_fit_a_page_column_when_asked():
    """``width=8`` (the book's column): the figure is 8 inches, the legend of a backward run
    wraps to two rows, the step numbers grow to 8 pt; the default stays 11 inches."""
    backward = simulate(
        RingConfig(hosts=4, seq_len=4 * 1024, hardware=custom_hardware(1e12, 1e9), pass_="backward")
    ).timeline
    narrow = plots.plot_timelines([("backward", backward)], width=8)
    wide = plots.plot_timelines([("backward", backward)])
    assert narrow.get_size_inches()[0] == 8 and wide.get_size_inches()[0] == 11
    assert narrow.legends[0]._ncols == 3 and wide.legends[0]._ncols == 6
    step_sizes = {t.get_fontsize() for t in narrow.axes[0].texts if t.get_text().isdigit()}
    assert step_sizes == {8}
    with pytest.raises(ValueError, match="width must be at least 4 inches, got 2"):
        plots.plot_timelines([("backward", backward)], width=2)


def test_validation_figure_stacks_for_a_page_column():
    from ringsim.views.validation import PANELS, plot_validation

    rows = [
        {"experiment": "ring-t2", "published": 1000.0, "predicted": 1040.0, "in_band": True},
        {"experiment": "zhuzilin", "published": 0.8, "predicted": 0.7, "in_band": False},
    ]
    stacked = plot_validation(rows, columns=1)
    assert stacked.get_size_inches()[0] == 8 and len(stacked.axes) == len(PANELS)
    assert plot_validation(rows).get_size_inches()[0] > 8
    with pytest.raises(ValueError, match="columns must be 1 or 2, got 3"):
        plot_validation(rows, columns=3)
