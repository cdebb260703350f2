"""Issues 14 and 26, tried as a hostile user would: bad flags to measure/calibrate refused
before any rank starts, corrupt profiles named, output files atomic and strict, extreme inputs
refused, and the small holes (zero heads, string bools, overflow, a NaN on one rank) closed;
strategies that cannot run at a size refused up front, flags that would change nothing refused,
output paths where nothing can be written refused before the work, and the new strategies'
Python API refusing what the ring refuses (``benchmarks/hostile_cases.py`` holds the cases the
hostile sweep runs too)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import ringsim
from ringsim import cli
from ringsim.files import atomic_open, check_output_path, read_json_object, write_json
from ringsim.timer.machine import hardware

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from hostile_cases import (  # noqa: E402  (shared with the sweep)
    CALIBRATE_BAD,
    ISSUE34_BAD,
    MEASURE_BAD,
    OUTPUT_BAD,
    PLAN_BAD,
    STRATEGY_BAD,
    api_cases,
    api_issue34_cases,
)


def one_line_error(capsys, argv: list[str], named: str) -> str:
    """``ringsim argv`` exits 2 with one line on stderr that names ``named``: under
    ``--json`` one JSON object (its ``error`` names it), and nothing on stdout."""
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in err, err
    if "--json" in argv:
        said = json.loads(err)
        assert said["exit_code"] == 2 and said["command"].startswith("ringsim"), said
        assert named in said["error"] and out == "", said
        return said["error"]
    assert err.startswith("ringsim") and named in err, err
    return err


# -- item 2: measure and calibrate check every flag before any rank starts ---------------------
@pytest.fixture
def no_ranks(monkeypatch):
    """Starting a rank fails the test: validation must come first."""
    pytest.importorskip("torch")
    import kernels.distributed.launch

    def refuse(*args, **kwargs):
        raise AssertionError("a rank was started before the flags were checked")

    monkeypatch.setattr(kernels.distributed.launch, "launch", refuse)


@pytest.mark.parametrize(("argv", "named"), MEASURE_BAD, ids=[" ".join(a) for a, _ in MEASURE_BAD])
def test_measure_refuses_bad_flags_before_starting_ranks(capsys, no_ranks, argv, named):
    one_line_error(capsys, ["measure", *argv], named)


@pytest.mark.parametrize(
    ("argv", "named"), CALIBRATE_BAD, ids=[" ".join(a) for a, _ in CALIBRATE_BAD]
)
def test_calibrate_refuses_bad_flags_before_starting_ranks(capsys, no_ranks, argv, named):
    one_line_error(capsys, ["calibrate", *argv], named)


def test_a_good_calibration_file_passes_the_checks(no_ranks):
    from kernels.calibration.measure import build_parser, check_measure_args

    path = ROOT / "results" / "cpu-calibration-2026-11-29.json"
    args = build_parser().parse_args(["--calibration", str(path)])
    shape, calibration = check_measure_args(args)
    assert shape.seq_len == 2048 and calibration.backend == "gloo"


@pytest.mark.parametrize(
    ("command", "backend"), [("measure", "nccl"), ("calibrate", "nccl"), ("calibrate", "cuda")]
)
def test_gpu_backends_without_a_gpu_are_one_line(capsys, no_ranks, monkeypatch, command, backend):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    one_line_error(capsys, [command, "--backend", backend], f"--backend {backend}")


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        ("", "not valid JSON"),
        ('{"backend": "gloo", "dtype": "fp32"', "not valid JSON"),
        ("[1, 2]", "got a list"),
        ('{"flops": {"fp32": 1e10}}', "not calibration data"),
        (None, "backend"),
    ],
    ids=["empty", "truncated", "list", "profile", "other backend"],
)
def test_measure_names_a_bad_calibration_file(capsys, no_ranks, tmp_path, content, cause):
    path = tmp_path / "cal.json"
    if content is None:  # a complete file measured on another backend
        data = json.loads((ROOT / "results" / "cpu-calibration-2026-11-29.json").read_text())
        content = json.dumps({**data, "backend": "nccl"})
    path.write_text(content)
    err = one_line_error(capsys, ["measure", "--calibration", str(path)], "--calibration")
    assert str(path) in err and cause in err


# -- item 5: calibrated profiles -----------------------------------------------------------------
def _profile(rate: float = 2e10) -> hardware.Hardware:
    return replace(
        hardware.custom_hardware(rate, 1e9, 2e-4, dtype="fp32"), source="calibrated 2026-01-02"
    )


CORRUPT = {
    "truncated": lambda text: text[: len(text) // 2],
    "empty": lambda text: "",
    "unknown key": lambda text: json.dumps({**json.loads(text), "colour": "red"}),
    "missing field": lambda text: json.dumps(
        {k: v for k, v in json.loads(text).items() if k != "link_bandwidth"}
    ),
    "negative bandwidth": lambda text: json.dumps({**json.loads(text), "link_bandwidth": -1.0}),
    "a list": lambda text: "[]",
    "true as a rate": lambda text: json.dumps({**json.loads(text), "link_latency": True}),
    "denormal rate": lambda text: json.dumps({**json.loads(text), "flops": {"fp32": 1e-320}}),
}
CAUSES = {
    "truncated": "not valid JSON",
    "empty": "empty",
    "unknown key": "colour",
    "missing field": "link_bandwidth",
    "negative bandwidth": "link_bandwidth",
    "a list": "list",
    "true as a rate": "link_latency",
    "denormal rate": "subnormal",
}


@pytest.mark.parametrize("kind", list(CORRUPT))
def test_a_corrupt_profile_is_an_error_naming_the_file_and_the_cause(tmp_path, kind):
    good = tmp_path / "cpu-profile-2026-01-01.json"
    hardware.save_profile(_profile(), good)
    bad = tmp_path / "cpu-profile-2026-01-02.json"
    bad.write_text(CORRUPT[kind](good.read_text()))
    with pytest.raises(ValueError, match=CAUSES[kind]) as info:
        hardware.load_profile(bad)
    assert str(bad) in str(info.value)
    found, errors = hardware.scan_profiles(tmp_path)
    assert found == {}  # not silently the older one
    assert str(bad) in errors["cpu-calibrated"] and CAUSES[kind] in errors["cpu-calibrated"]


def test_cpu_calibrated_says_why_it_is_missing(monkeypatch, tmp_path):
    (tmp_path / "cpu-profile-x.json").write_text("{")
    monkeypatch.setattr(hardware, "calibrated_profiles", lambda: hardware.scan_profiles(tmp_path))
    with pytest.raises(ValueError, match=r"cpu-profile-x\.json.*not valid JSON"):
        hardware.get_hardware("cpu-calibrated")


def test_newest_profile_by_the_date_inside_not_the_file_name(tmp_path):
    hardware.save_profile(_profile(1e10), tmp_path / "cpu-profile-test.json")  # saved now
    old = replace(_profile(3e10), source="calibrated 2020-05-05 on vm")
    (tmp_path / "cpu-profile-2099-01-01.json").write_text(
        json.dumps(hardware.asdict(old))  # no "saved" key: the date in its source counts
    )
    assert hardware.profile_date(tmp_path / "cpu-profile-2099-01-01.json") == "2020-05-05"
    found = hardware.scan_profiles(tmp_path)[0]["cpu-calibrated"]
    assert found.flops == {"fp32": 1e10}  # the one saved today, whatever the names say


def test_save_profile_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "cpu-profile.json"
    hardware.save_profile(_profile(), path)
    before = path.read_text()

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match=r"cpu-profile\.json"):
        hardware.save_profile(_profile(5e10), path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["cpu-profile.json"]  # no temporary left


# -- item 6: the calibrated profile from the command line ---------------------------------------
def test_simulate_and_demo_on_cpu_calibrated_use_its_dtype(monkeypatch, capsys):
    calibrated = ({"cpu-calibrated": _profile()}, {})
    monkeypatch.setattr(hardware, "calibrated_profiles", lambda: calibrated)
    argv = ["simulate", "--hardware", "cpu-calibrated", "--hosts", "2", "--seq-len", "4K"]
    assert cli.main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dtype"] == "fp32"
    one_line_error(capsys, [*argv, "--dtype", "bf16"], "bf16")
    assert cli.main(["demo", "--hardware", "cpu-calibrated", "--no-plot", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dtype"] == "fp32"
    assert cli.main(["demo", "--dtype", "fp16", "--no-plot", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dtype"] == "fp16"


# -- item 7: output files whole or not at all, strict JSON, extreme inputs refused --------------
SIM = ["simulate", "--hosts", "4", "--seq-len", "4K"]


def test_a_failed_trace_write_keeps_the_old_file(tmp_path):
    keep = tmp_path / "keep.json"
    keep.write_text(json.dumps({"traceEvents": [{"name": "x" * 50_000}]}))
    before = keep.read_text()

    def small_files():  # writes past 20 KB fail (EFBIG), as a full disk would half-way
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    run = subprocess.run(
        [sys.executable, "-m", "ringsim", *SIM, "--hosts", "16", "--trace", str(keep)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=small_files,
        timeout=120,
    )
    assert run.returncode == 1 and "keep.json" in run.stderr, run.stderr
    assert keep.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json"]


def test_all_outputs_are_checked_before_any_is_written(capsys, tmp_path):
    keep = tmp_path / "keep.json"
    keep.write_text("precious")
    one_line_error(
        capsys, [*SIM, "--trace", str(keep), "--plot", str(tmp_path / "t.badext")], ".badext"
    )
    assert keep.read_text() == "precious"
    same = str(tmp_path / "t.png")
    one_line_error(capsys, [*SIM, "--trace", same, "--plot", same], "same file")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--trace", ""], "--trace"),
        (["--trace", "/dev/full"], "--trace '/dev/full'"),
        (["--plot", "."], "folder"),
        (["--plot", "/etc/passwd/t.png"], "not a folder"),
    ],
)
def test_bad_output_paths_are_named(capsys, argv, named):
    one_line_error(capsys, [*SIM, *argv], named)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--flops", "1e-320", "--bandwidth", "1G"], "flops"),
        (["--flops", "1e-300", "--bandwidth", "1G"], "--flops"),
        (["--latency", "1e308"], "--latency"),
        (["--jitter", "1e308"], "--jitter"),
        (["--bandwidth", "1e-300"], "--bandwidth"),
    ],
)
def test_extreme_finite_inputs_are_refused_naming_the_flag(capsys, tmp_path, argv, named):
    trace = tmp_path / "f.json"
    one_line_error(capsys, [*SIM, *argv, "--trace", str(trace)], named)
    assert not trace.exists()


def test_json_files_are_strict_and_atomic(tmp_path):
    path = tmp_path / "r.json"
    write_json(path, {"a": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"a\[1\] is not finite"):
        write_json(path, {"a": [1.0, float("inf")]})
    assert json.loads(path.read_text()) == {"a": [1.0, 2.0]}
    with pytest.raises(RuntimeError), atomic_open(path) as fh:
        fh.write("half")
        raise RuntimeError("the writer died")
    assert json.loads(path.read_text()) == {"a": [1.0, 2.0]}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        (None, "not a regular file"),  # a folder where the file should be
        ("/dev/zero", "not a regular file"),  # a device that never ends: never opened
        (b"\xff\xfe{}", "not UTF-8"),
        ("", "is empty"),
        ("  \n", "is empty"),
        ('{"a": [1, 2', "not valid JSON"),
        ('{"a": NaN}', "not valid JSON"),  # write_json never writes it: not strict JSON
        ("[1, 2]", "got a list"),
        ('"text"', "got a str"),
    ],
    ids=["folder", "device", "binary", "empty", "blank", "truncated", "NaN", "list", "string"],
)
def test_every_json_reader_names_the_file_and_the_cause(tmp_path, content, cause):
    path = tmp_path / "saved.json"
    if content is None:
        path.mkdir()
    elif content == "/dev/zero":
        path.symlink_to(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ValueError, match=cause) as info:
        read_json_object(path, what="profile")
    message = str(info.value)
    assert message.startswith(f"profile {str(path)!r}") and "\n" not in message
    write_json(path.with_name("good.json"), {"a": [1.0, 2.0]})
    assert read_json_object(path.with_name("good.json")) == {"a": [1.0, 2.0]}


def test_check_output_path_names_the_argument(tmp_path):
    for bad, cause in (("", "file path"), (str(tmp_path), "folder"), ("/dev/null", "regular")):
        with pytest.raises(ValueError, match=rf"--out .*{cause}|--out must be a {cause}"):
            check_output_path("--out", bad)
    assert check_output_path("--out", tmp_path / "new" / "x.json") == tmp_path / "new" / "x.json"


# -- item 8: the small ones ----------------------------------------------------------------------
def test_zero_heads_is_a_value_error():
    empty = np.zeros((0, 8, 4))
    with pytest.raises(ValueError, match="empty axis"):
        ringsim.ring_attention(empty, empty, empty, hosts=2)
    with pytest.raises(ValueError, match="k must have no empty axis"):
        ringsim.reference_attention(np.ones((4, 8, 4)), empty, empty)


def test_reference_refuses_float64_overflow_like_the_ring():
    big = np.full((8, 4), 1e200)
    for attention in (ringsim.reference_attention, ringsim.ring_attention):
        kwargs = {"hosts": 2} if attention is ringsim.ring_attention else {}
        with pytest.raises(ValueError, match="overflowed in float64"):
            attention(big, big, big, **kwargs)
    with pytest.raises(ValueError, match="overflowed in float64"):
        ringsim.reference_attention_grad(big, big, big, np.ones((8, 4)))


@pytest.mark.parametrize("causal", ["false", "true", 0, 1, None])
def test_causal_must_be_a_bool_everywhere(causal):
    x = np.random.default_rng(0).random((8, 4))
    with pytest.raises(ValueError, match="causal must be True or False"):
        ringsim.ring_attention(x, x, x, hosts=2, causal=causal)
    with pytest.raises(ValueError, match="causal must be True or False"):
        ringsim.reference_attention(x, x, x, causal=causal)
    with pytest.raises(ValueError, match="causal must be True or False"):
        ringsim.build_schedule(2, causal=causal)
    with pytest.raises(ValueError, match="causal must be True or False"):
        ringsim.RingConfig(
            hosts=2, seq_len=8, hardware=hardware.get_hardware("a100-nvlink"), causal=causal
        )
    assert ringsim.build_schedule(2, causal=np.bool_(True)).causal is True


def test_get_hardware_of_a_non_string_is_a_value_error():
    with pytest.raises(ValueError, match=r"hardware must be a preset name.*\['a'\]"):
        hardware.get_hardware(["a"])


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([*SIM, "--seed", "-1", "--jitter", "0.1"], "--seed"),
        (["simulate", "--hosts", "4", "--seq-len", "99999999999999999999999"], "seq_len"),
    ],
)
def test_messages_name_the_flag(capsys, argv, named):
    one_line_error(capsys, argv, named)


# -- item 8, real backend: a NaN or a failed local check on one rank ----------------------------
def _one_rank_misbehaves(rank: int, hosts: int) -> list[str]:
    import torch

    from kernels.distributed.ring import RingError, ring_attention

    x = torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(rank))
    nan_q = x.clone()
    if rank == 1:
        nan_q[0, 0, 1, 2] = float("nan")
    calls = [
        dict(q=nan_q),  # a NaN on rank 1 only
        dict(layout="zigzag" if rank == 1 else "contiguous"),  # 4 tokens/rank: zigzag ok
        dict(layout="diagonal" if rank == 1 else "contiguous"),  # rank 1's local check fails
        dict(causal="false"),  # on every rank
        dict(),  # and the ring still works afterwards
    ]
    answers = []
    for call in calls:
        q = call.pop("q", x)
        try:
            out = ring_attention(q, x, x, timeout_s=20, **call)
            answers.append(f"ok {bool(torch.isfinite(out).all())}")
        except (ValueError, RingError) as err:
            answers.append(f"{type(err).__name__}: {err}")
    return answers


def test_real_ring_refuses_a_nan_and_a_failed_local_check_on_every_rank():
    pytest.importorskip("torch")
    from kernels.distributed.launch import launch

    per_rank = launch(_one_rank_misbehaves, 2, timeout_s=30)
    for answers in per_rank:
        nan, disagree, bad_layout, causal, fine = answers
        assert nan.startswith("ValueError") and "q contains NaN or inf on rank 1" in nan, nan
        assert disagree.startswith("ValueError") and "disagree" in disagree, disagree
        assert bad_layout.startswith("ValueError") and "diagonal" in bad_layout, bad_layout
        assert "gloo" not in bad_layout.lower() and "connection" not in bad_layout.lower()
        assert causal.startswith("ValueError: ") and "causal must be True or False" in causal
        assert fine == "ok True"


# -- issue 26 cases 1, 2, 5-10: `ringsim plan` refuses what cannot run, in one line ------------
@pytest.mark.parametrize(("argv", "named"), PLAN_BAD, ids=[" ".join(a) for a, _ in PLAN_BAD])
def test_plan_refuses_what_cannot_run_naming_the_flag(capsys, argv, named):
    one_line_error(capsys, ["plan", "--model", "7b", *argv], named)


# -- issue 26: sizes, flags that change nothing, outputs, the new strategies' API ------------------
@pytest.mark.parametrize(
    ("argv", "named"), STRATEGY_BAD, ids=[" ".join(a) for a, _ in STRATEGY_BAD]
)
def test_what_a_strategy_cannot_run_or_a_flag_cannot_change_is_refused_up_front(
    capsys, argv, named
):
    one_line_error(capsys, argv, named)


@pytest.mark.parametrize(("argv", "named"), OUTPUT_BAD, ids=[" ".join(a) for a, _ in OUTPUT_BAD])
def test_an_output_where_nothing_can_be_written_is_refused_before_the_work(
    capsys, monkeypatch, argv, named
):
    from ringsim.timer.studies import validate

    def no_work(*args, **kwargs):
        raise AssertionError("the work started before the output path was checked")

    monkeypatch.setattr(validate, "validate", no_work)
    if named:
        one_line_error(capsys, argv, named)
    else:
        assert cli.main(argv) == 0


@pytest.mark.parametrize("case", api_cases() + api_issue34_cases(), ids=lambda case: case[0])
def test_the_api_refuses_what_cannot_run_naming_the_argument(case):
    """Issue 26: the new strategies refuse what the ring refuses; issue 34: plan's arguments,
    ModelSpec's fields, a 2^40-host ring (before any work), a device read as JSON."""
    _, function, args, kwargs, said = case
    with pytest.raises(ValueError) as info:
        function(*args, **kwargs)
    message = str(info.value)
    assert said in message and "\n" not in message, message


# -- issue 34: round 4 -------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "named"), ISSUE34_BAD, ids=[" ".join(a) for a, _ in ISSUE34_BAD])
def test_round4_is_refused_before_any_work_in_one_line(capsys, argv, named):
    one_line_error(capsys, argv, named)


def test_a_figure_format_whose_program_is_missing_is_refused_naming_the_formats(
    capsys, monkeypatch, tmp_path
):
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if "latex" in name else real(name))
    err = one_line_error(capsys, [*SIM, "--plot", str(tmp_path / "p.pgf")], "needs xelatex")
    assert ".png" in err and ".pgf" not in err.split("use one of")[1]
    assert not (tmp_path / "p.pgf").exists()


def test_a_symlink_loop_is_refused_by_name(capsys, tmp_path):
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop.name)
    one_line_error(capsys, [*SIM, "--trace", str(loop)], "loops")


def test_the_longest_name_the_file_system_takes_is_written(capsys, tmp_path):
    """A 255-byte name (NAME_MAX) is written whole: its temporary name is cut to fit; 256
    bytes are refused before the work. UTF-8 names count bytes, not characters."""
    longest = tmp_path / ("a" * 250 + ".json")
    assert cli.main([*SIM, "--trace", str(longest)]) == 0
    assert json.loads(longest.read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [longest.name]
    wide = tmp_path / ("é" * 125 + ".png")  # 254 bytes
    assert cli.main([*SIM, "--plot", str(wide)]) == 0
    assert wide.stat().st_size > 0 and len(list(tmp_path.iterdir())) == 2
    capsys.readouterr()
    one_line_error(capsys, [*SIM, "--trace", str(tmp_path / ("b" * 251 + ".json"))], "256 bytes")
    one_line_error(capsys, [*SIM, "--trace", str(tmp_path / ("b" * 300) / "t.json")], "300 bytes")


def test_a_long_json_file_is_refused_after_the_cap(tmp_path, monkeypatch):
    from ringsim import files

    monkeypatch.setattr(files, "MAX_READ_BYTES", 64)
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"a": "x" * 100}))
    with pytest.raises(ValueError, match="longer than"):
        read_json_object(path, what="--calibration")
    path.write_text(json.dumps({"a": "x"}))
    assert read_json_object(path) == {"a": "x"}


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "cal.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        read_json_object(fifo, what="--calibration")  # opening it would block forever


def test_numpy_integers_are_integers():
    """A NumPy integer is an integer wherever an int is checked: the same answer, never a
    refusal with a false message."""
    from ringsim.timer import RingConfig
    from ringsim.timer.step.models import ModelSpec
    from ringsim.timer.strategies import simulate_strategy

    hw = ringsim.get_hardware("a100-nvlink")
    config = RingConfig(hosts=8, seq_len=8 * 512, hardware=hw)
    as_int = simulate_strategy(config, "double-ring", window=2).summary()
    as_numpy = simulate_strategy(config, "double-ring", window=np.int64(2)).summary()
    assert as_numpy["total_time_s"] == as_int["total_time_s"] > 0
    x = np.random.default_rng(3).standard_normal((2, 16, 4))
    np.testing.assert_allclose(
        ringsim.double_ring_attention(x, x, x, hosts=4, window=np.int64(2)),
        ringsim.double_ring_attention(x, x, x, hosts=4, window=2),
        rtol=0,
        atol=0,
    )
    assert ModelSpec("m", np.int32(2), 256, np.int64(4), 512).head_dim == 64


def test_the_double_ring_default_window_is_named_as_the_default():
    from ringsim.timer import RingConfig
    from ringsim.timer.machine.topology import Cluster
    from ringsim.timer.strategies import simulate_strategy

    hw = ringsim.get_hardware("h100-nvlink")
    cluster = Cluster.from_links(hw, 3, 25e9)
    config = RingConfig(hosts=8, seq_len=8 * 512, hardware=hw)
    with pytest.raises(ValueError, match="default window is the 3 ring members") as info:
        simulate_strategy(config, "double-ring", cluster=cluster)
    assert "got window" not in str(info.value)
    with pytest.raises(ValueError, match="got window=3"):
        simulate_strategy(config, "double-ring", cluster=cluster, window=3)
