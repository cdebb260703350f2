"""The ``ringsim`` command: the JSON contract, the measured claims, bad input, speed, figures."""

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from contract import DESIGN_KEYS

from ringsim import cli

RINGSIM = [sys.executable, "-m", "ringsim.cli"]


def run_json(capsys, *argv: str):
    assert cli.main([*argv, "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


# -- ringsim simulate -----------------------------------------------------------------------
def test_simulate_json_has_the_design_keys(capsys):
    s = run_json(
        capsys, "simulate", "--hosts", "8", "--seq-len", "64K", "--causal", "--layout", "zigzag"
    )
    assert DESIGN_KEYS <= set(s)
    assert (s["hosts"], s["seq_len"], s["block_tokens"]) == (8, 65536, 8192)
    assert (s["layout"], s["causal"], s["overlap"]) == ("zigzag", True, True)
    for key in DESIGN_KEYS - {"layout", "causal", "overlap"}:
        assert isinstance(s[key], int | float) and not isinstance(s[key], bool), key
    assert s["exposed_comm_s"] == pytest.approx(s["total_time_s"] - s["compute_time_s"], abs=1e-12)
    assert s["idle_fraction"] < 0.02  # zigzag balances the causal work
    assert s["min_block_for_overlap"] < s["block_tokens"]  # 8K blocks hide the transfer


@pytest.mark.parametrize("hosts", [4, 8, 16])
def test_causal_contiguous_idles_as_the_closed_form(capsys, hosts):
    args = ("simulate", "--hosts", str(hosts), "--seq-len", f"{8 * hosts}K", "--causal")
    s = run_json(capsys, *args)
    assert s["idle_fraction"] == pytest.approx((hosts - 1) / (2 * hosts - 1), abs=0.01)
    zigzag = run_json(capsys, *args, "--layout", "zigzag")
    assert zigzag["total_time_s"] < 0.6 * s["total_time_s"]  # speedup near 2 for big P


def test_no_overlap_is_slower_and_straggler_slows_the_ring(capsys):
    base = ("simulate", "--hosts", "8", "--seq-len", "16K", "--hardware", "a100-ib")
    fast = run_json(capsys, *base)
    serial = run_json(capsys, *base, "--no-overlap")
    slow = run_json(capsys, *base, "--straggler", "3:2")
    assert serial["total_time_s"] > fast["total_time_s"] * 1.01
    assert serial["overlap"] is False
    assert slow["total_time_s"] > fast["total_time_s"] * 1.01


def test_custom_hardware_flags_move_the_threshold(capsys):
    base = ("simulate", "--hosts", "4", "--seq-len", "16K")
    slow_link = run_json(capsys, *base, "--flops", "300T", "--bandwidth", "10G", "--latency", "0")
    fast_link = run_json(capsys, *base, "--flops", "300T", "--bandwidth", "20G", "--latency", "0")
    ratio = slow_link["min_block_for_overlap"] / fast_link["min_block_for_overlap"]
    assert ratio == pytest.approx(2.0, rel=0.02)  # c* scales with 1/B


def test_simulate_prints_a_table(capsys):
    assert cli.main(["simulate", "--hosts", "4", "--seq-len", "8K", "--causal"]) == 0
    out = capsys.readouterr().out
    assert "makespan" in out and "total_time_s" in out and "idle fraction" in out
    assert "8K tokens on 4 hosts (2K each)" in out


def test_simulate_writes_trace_and_plot(tmp_path, capsys):
    trace, plot = tmp_path / "ring.json", tmp_path / "ring.png"
    argv = ["simulate", "--hosts", "4", "--seq-len", "8K", "--causal", "--json"]
    assert cli.main([*argv, "--trace", str(trace), "--plot", str(plot)]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # the notes went to stderr, stdout is one JSON document
    assert "wrote" in captured.err
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert sum(e.get("ph") == "X" for e in events) >= 4 * 4  # at least the 16 computes
    assert plot.read_bytes()[:4] == b"\x89PNG" and plot.stat().st_size > 20_000


def test_json_turns_numpy_and_nan_into_plain_json():
    import numpy as np

    data = cli.to_jsonable({"a": np.float64(1.5), "b": np.int64(3), "c": float("nan"), "d": (1,)})
    assert json.dumps(data) == '{"a": 1.5, "b": 3, "c": null, "d": [1]}'


# -- bad input: one line, exit code 2, naming the value --------------------------------------
BAD = [
    (["simulate", "--hosts", "0", "--seq-len", "4K"], "'0'"),
    (["simulate", "--hosts", "-3", "--seq-len", "4K"], "-3"),
    (["simulate", "--hosts", "2.5", "--seq-len", "4K"], "2.5"),
    (["simulate", "--hosts", "4", "--seq-len", "12Q"], "12Q"),
    (["simulate", "--hosts", "4", "--seq-len=-5K"], "-5K"),
    (["simulate", "--hosts", "4", "--seq-len", "1.5K"], "1.5K"),
    (["simulate", "--hosts", "4", "--seq-len", "0"], "0"),
    (["simulate", "--hosts", "3", "--seq-len", "1000"], "1000"),
    (["simulate", "--hosts", "8", "--seq-len", "8200", "--layout", "zigzag"], "8200"),
    (["simulate", "--hosts", "4", "--seq-len", "4K", "--hardware", "b200"], "b200"),
    (["simulate", "--hosts", "4", "--seq-len", "4K", "--layout", "diagonal"], "diagonal"),
    (["simulate", "--hosts", "4", "--seq-len", "4K", "--bandwidth", "nan"], "nan"),
    (["simulate", "--hosts", "4", "--seq-len", "4K", "--flops", "-1"], "-1"),
    (["simulate", "--hosts", "4", "--seq-len", "4K", "--flops", "1e15"], "--bandwidth"),
    (["simulate", "--hosts", "4", "--seq-len", "4K", "--latency", "inf"], "inf"),
    (["simulate", "--hosts", "4", "--seq-len", "4K", "--straggler", "9:2"], "9"),
    (["simulate", "--hosts", "4", "--seq-len", "4K", "--straggler", "1:0"], "1:0"),
    (["memory", "--model", "8b", "--hosts", "8"], "8b"),
    (["memory", "--model", "7b", "--hosts", "0"], "'0'"),
    (["sweep", "--vary", "block", "--values", "1K,0"], "1K,0"),
    (["sweep", "--vary", "hosts", "--layouts", "zigzag,diag"], "diag"),
    (
        ["simulate", "--hosts", "4", "--seq-len", "4K", "--model", "llama3-8b", "--heads", "16"],
        "--heads",
    ),
    (
        ["sweep", "--vary", "block", "--values", "1K", "--model", "7b", "--kv-heads", "32"],
        "--kv-heads",
    ),
]


def test_model_sets_the_shape_and_explicit_flags_without_it(capsys):
    """--model alone sets heads, kv heads and head dim; --heads/--kv-heads/--head-dim alone are
    taken as given (the two together exit 2, in BAD: nothing is silently overridden)."""
    base = ["simulate", "--hosts", "4", "--seq-len", "16K"]
    model = run_json(capsys, *base, "--model", "llama3-8b")
    flags = run_json(capsys, *base, "--heads", "16", "--kv-heads", "4", "--head-dim", "64")
    assert (model["heads"], model["kv_heads"], model["head_dim"]) == (32, 8, 128)
    assert (flags["heads"], flags["kv_heads"], flags["head_dim"]) == (16, 4, 64)


@pytest.mark.parametrize(("argv", "named"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_code_2(capsys, argv, named):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ringsim"), err
    assert named in err
    assert "Traceback" not in err


def test_bad_input_as_a_process_has_no_traceback():
    out = subprocess.run(
        [*RINGSIM, "simulate", "--hosts", "4", "--seq-len", "12Q"], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert out.stdout == "" and out.stderr.count("\n") == 1 and "12Q" in out.stderr


def test_ulysses_refuses_more_hosts_than_heads(capsys):
    argv = ["simulate", "--hosts", "16", "--seq-len", "16K", "--strategy", "ulysses"]
    assert cli.main([*argv, "--heads", "8"]) == 2
    assert "16" in capsys.readouterr().err


def test_every_subcommand_help_has_examples(capsys):
    for command in ("simulate", "presets", "sweep", "memory"):
        with pytest.raises(SystemExit) as exit_:
            cli.build_parser().parse_args([command, "--help"])
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        assert "examples:" in out and f"ringsim {command} " in out


# -- presets, memory, sweep -----------------------------------------------------------------
def test_presets_json_lists_the_presets_with_sources(capsys):
    presets = {p["name"]: p for p in run_json(capsys, "presets")}
    for name in ("a100-nvlink", "a100-ib", "h100-nvlink", "h200-nvlink", "h200-ib", "tpu-v4"):
        assert presets[name]["source"] and presets[name]["link_bandwidth"] > 0
    # The paper's Table 2: A100 NVLink ~1K tokens, A100 InfiniBand ~24.5K.
    assert presets["a100-ib"]["overlap_threshold_tokens"] == pytest.approx(24.5e3, rel=0.05)
    assert presets["a100-nvlink"]["overlap_threshold_tokens"] == pytest.approx(1.0e3, rel=0.15)


def test_memory_json_grows_the_ring_with_hosts(capsys):
    small = run_json(capsys, "memory", "--model", "7b", "--hosts", "8", "--hardware", "a100-nvlink")
    big = run_json(capsys, "memory", "--model", "7b", "--hosts", "16", "--hardware", "a100-nvlink")
    methods = {"vanilla", "memory_efficient", "blockwise", "ring", "ulysses"}
    assert set(small["max_context"]) == methods
    assert small["bytes_per_host"] and all(v > 0 for v in small["bytes_per_host"].values())
    assert small["max_context"]["ring"] > 4 * small["max_context"]["vanilla"]
    assert big["max_context"]["ring"] > 1.5 * small["max_context"]["ring"]


def test_memory_table(capsys):
    assert cli.main(["memory", "--model", "3b", "--hosts", "8"]) == 0
    out = capsys.readouterr().out
    assert "ring" in out and "ulysses" in out and "model_states" in out


def test_sweep_block_hides_communication_past_the_threshold(capsys, tmp_path):
    plot = tmp_path / "block.png"
    data = run_json(
        capsys,
        "sweep",
        "--vary",
        "block",
        "--hardware",
        "a100-ib",
        "--values",
        "1K,4K,8K,16K,32K,64K",
        "--plot",
        str(plot),
    )
    threshold = data["overlap_threshold_tokens"]
    assert [r["block_tokens"] for r in data["rows"]] == [2**k for k in (10, 12, 13, 14, 15, 16)]
    for r in data["rows"]:
        if r["block_tokens"] >= 2 * threshold:
            assert r["exposed_comm_s"] <= 1e-6 * r["total_time_s"]
        if r["block_tokens"] <= threshold / 2:
            assert r["slowdown"] > 1.5  # the link sets the pace
        assert r["no_overlap_total_time_s"] >= r["total_time_s"]
    assert threshold / 2 <= data["first_hidden_block_tokens"] <= 2 * threshold
    assert plot.stat().st_size > 20_000


def test_sweep_hosts_follows_the_closed_form(capsys, tmp_path):
    plot = tmp_path / "idle.png"
    data = run_json(capsys, "sweep", "--vary", "hosts", "--values", "2,8,32", "--plot", str(plot))
    assert data["causal"] is True
    for r in data["rows"]:
        p = r["hosts"]
        if r["layout"] == "contiguous":
            assert r["idle_fraction"] == pytest.approx((p - 1) / (2 * p - 1), abs=0.01)
        else:
            assert r["idle_fraction"] < 0.05
    assert plot.stat().st_size > 20_000


def test_sweep_table(capsys):
    assert cli.main(["sweep", "--vary", "hosts", "--values", "2,4", "--layouts", "zigzag"]) == 0
    out = capsys.readouterr().out
    assert "zigzag" in out and "(P-1)/(2P-1)" in out


# -- issue 34: every summary line is read off the same numbers as the table above it ---------
def test_sweep_says_hidden_from_where_every_larger_block_hides(capsys):
    """Under a real kernel family small blocks hide too (a call's fixed cost outlasts their
    transfer) with exposed blocks between: "hidden from" starts above the last exposed one."""
    argv = ["sweep", "--vary", "block", "--hardware", "h100-nvlink", "--implementation", "fa2"]
    data = run_json(capsys, *argv, "--values", "128,256,1K,2K,4K,8K")
    rows = {r["block_tokens"]: r["exposed_comm_s"] > 1e-6 * r["total_time_s"] for r in data["rows"]}
    start = data["hidden_from_block_tokens"]
    assert not any(exposed for block, exposed in rows.items() if block >= start)
    assert rows[max(b for b in rows if b < start)]  # the block below it is exposed
    assert data["first_hidden_block_tokens"] == 128 < start  # the old "hidden from 128 on"
    assert cli.main([*argv, "--values", "128,256,1K,2K,4K,8K"]) == 0
    out = capsys.readouterr().out
    assert f"fully hidden from block {start // 1024}K on; also at 128" in out


@pytest.mark.parametrize("implementation", ["ideal", "fa2"])
def test_the_overlap_threshold_on_a_cluster_is_the_slowest_hop(capsys, implementation):
    """On two DGX nodes the ring's slowest hop is the NIC: the threshold printed is that hop's,
    so a block below it shows exposed communication and one above it none."""
    # 12 heads: a shape no other test times (engine/clock.py caches the family's threshold
    # under a key that leaves the hops out: issue 34's "stale cache", another change)
    base = ["simulate", "--hosts", "16", "--heads", "12", "--cluster", "dgx-h100"]
    base += ["--implementation"]
    small = run_json(capsys, *base, implementation, "--seq-len", "64K")  # 4K a host
    threshold = small["min_block_for_overlap"]
    assert small["exposed_comm_s"] > 0.1 * small["total_time_s"]
    assert threshold > small["block_tokens"]
    big = run_json(capsys, *base, implementation, "--seq-len", f"{16 * 2 * int(threshold)}")
    assert big["min_block_for_overlap"] == pytest.approx(threshold)
    assert big["exposed_comm_s"] <= 1e-6 * big["total_time_s"]


def test_a_threshold_every_block_meets_is_said_so(capsys):
    argv = ["simulate", "--hosts", "8", "--seq-len", "64K", "--hardware", "h100-nvlink"]
    argv += ["--implementation", "fa2", "--model", "llama3-8b"]
    assert run_json(capsys, *argv)["min_block_for_overlap"] == 1.0  # the fp32 merge hides it
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "none: every block hides its transfer" in out and "1 tokens" not in out


def test_progress_goes_to_stderr_after_a_few_seconds_and_is_erased_on_a_terminal(monkeypatch):
    import io

    from ringsim.cli import output

    clock = iter([0.0, 1.0, 6.0, 6.1, 17.0, 18.0])
    monkeypatch.setattr(output.time, "monotonic", lambda: next(clock))
    log = io.StringIO()
    ticker = output.Ticker("ringsim plan", stream=log)  # starts at 0 s
    for done in range(4):  # at 1 s (quiet), 6 s, 6.1 s (too soon), 17 s
        ticker(done, 4, "configurations timed")
    assert log.getvalue().splitlines() == [
        "[ringsim plan 6 s] configurations timed: 1 of 4",
        "[ringsim plan 17 s] configurations timed: 3 of 4",
    ]

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    clock = iter([0.0, 6.0, 7.0])
    screen = Terminal()
    with output.Ticker("ringsim validate", stream=screen) as ticker:
        ticker(1, 9, "rows")
        ticker(2, 9, "rows")
    shown = screen.getvalue()
    assert "\n" not in shown and shown.endswith("\r") and "rows: 2 of 9" in shown
    assert shown.rsplit("\r", 2)[1].strip() == ""  # erased: what follows starts clean


# -- demo, forwarded commands ---------------------------------------------------------------
def test_demo_prints_tables_and_writes_the_figure(capsys, tmp_path):
    out = tmp_path / "demo.png"
    assert cli.main(["demo", "--out", str(out), "--hosts", "4", "--seq-len", "16K"]) == 0
    text = capsys.readouterr().out
    assert "contiguous" in text and "zigzag" in text and "threshold" in text
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 30_000


def test_demo_json(capsys):
    data = run_json(capsys, "demo", "--no-plot")
    rows = {r["layout"]: r for r in data["layouts"]}
    assert rows["zigzag"]["speedup"] > 1.6 and rows["striped"]["speedup"] > 1.6
    hidden = [r["hidden"] for r in data["overlap"]]
    assert hidden == [False, True]  # below c*: exposed; the demo's 8K block: hidden


def test_calibrate_and_measure_forward_their_arguments(monkeypatch):
    seen = {}
    fake = types.ModuleType("kernels.calibration.measure")
    fake.measure_main = lambda argv: seen.setdefault("argv", argv) and 0
    monkeypatch.setitem(sys.modules, "kernels.calibration.measure", fake)
    assert cli.main(["measure", "--hosts", "2", "--json"]) == 0
    assert seen["argv"] == ["--hosts", "2", "--json"]


def test_missing_backend_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(
        sys.modules,
        "kernels.calibration.calibrate",
        types.ModuleType("kernels.calibration.calibrate"),
    )
    assert cli.main(["calibrate"]) == 2
    err = capsys.readouterr().err
    assert "calibrate_main is not available" in err and "torch" in err


# -- speed and import weight ----------------------------------------------------------------
def test_simulate_does_not_load_torch_matplotlib_or_rich():
    code = (
        "import sys; from ringsim.cli import main; "
        "main(['simulate','--hosts','8','--seq-len','64K','--causal','--layout','zigzag','--json']);"
        "print(*(m in sys.modules for m in ('torch', 'matplotlib', 'rich')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-3:] == ["False", "False", "False"]


def test_4096_hosts_16m_tokens_as_a_whole_process_keeps_no_timeline():
    """A summary needs O(hosts) memory: the process stays far below the 537 MB its 4096 x 4097
    timeline would take (its speed, ~1 s here, is ``benchmarks/bench_timer.py``'s to report;
    a wall-clock limit would fail on a busy machine)."""
    exe = Path(sys.executable).with_name("ringsim")
    argv = [str(exe)] if exe.exists() else RINGSIM
    flags = ["--hosts", "4096", "--seq-len", "16M", "--layout", "zigzag", "--causal", "--json"]
    peak_of = (  # a fresh parent, so that the peak is this child's alone
        "import resource, subprocess, sys; sys.stdout.write(subprocess.run(sys.argv[1:], "
        "capture_output=True, text=True, check=True).stdout); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run(
        [sys.executable, "-c", peak_of, *argv, "simulate", *flags],
        capture_output=True,
        text=True,
        check=True,
    )
    summary, peak_kb = out.stdout.rsplit("\n", 2)[:2]
    assert json.loads(summary)["hosts"] == 4096
    assert int(peak_kb) < 250_000, f"peak {int(peak_kb) / 1e3:.0f} MB"
