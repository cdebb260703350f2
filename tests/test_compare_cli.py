"""``ringsim compare``: the JSON contract on a trace and on a time alone, the figure and the
combined trace, and hostile traces (``benchmarks/hostile_traces.py``): one line naming what is
wrong or missing, or a partial answer saying what it lacks; never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ringsim import cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from hostile_traces import CASES, HARDWARE, MEASURED_BAD, docs, write  # noqa: E402

STEP_KEYS = {"duration_s", "attention_s", "merge_s", "exposed_transfer_s", "idle_s", "host"}


def compare(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["compare", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_trace_answers_with_the_contract_keys(tmp_path, capsys):
    paths = write(tmp_path, docs(causal=True, layout="zigzag"))
    code, out, err = compare(capsys, *paths, *HARDWARE, "--json")
    assert code == 0, err
    data = json.loads(out)
    for key in ("hosts", "steps", "measured_s", "predicted_s", "predicted_interval_s", "verdict"):
        assert key in data
    assert data["hosts"] == 4 and len(data["steps"]) == 4
    assert (data["layout"], data["causal"], data["implementation"]) == ("zigzag", True, "fa2")
    for step in data["steps"]:
        assert set(step["measured"]) == STEP_KEYS and set(step["predicted"]) == STEP_KEYS
        assert step["ratio"] == pytest.approx(
            step["measured"]["duration_s"] / step["predicted"]["duration_s"]
        )
    low, high = data["predicted_interval_s"]
    assert low <= data["predicted_s"] <= high and data["ranges"]  # fa2 has ranges
    assert data["verdict"] in ("expected", "slower than expected", "faster than expected")
    assert data["differs_most"]["term"] in data["terms"]
    assert data["trace"]["inferred"]["block_tokens"] == {
        "value": 2048,
        "from": "trace: the attention calls' input shapes",
    }


def test_the_flags_win_over_the_trace(tmp_path, capsys):
    paths = write(tmp_path, docs())
    code, out, err = compare(capsys, *paths, *HARDWARE, "--implementation", "cudnn", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["implementation"] == "cudnn"
    code, out, err = compare(capsys, *paths, *HARDWARE, "--heads", "16", "--json")
    assert code == 0, err
    assert json.loads(out)["trace"]["inferred"]["heads"] == {"value": 16, "from": "flag"}


def test_a_time_alone_is_set_against_the_prediction(capsys):
    base = ["--hosts", "8", "--seq-len", "64K", "--causal", "--layout", "zigzag", *HARDWARE]
    code, out, err = compare(capsys, "--measured", "1ms", *base, "--json")
    assert code == 0, err
    fast = json.loads(out)
    assert fast["verdict"] == "faster than expected" and fast["measured_s"] == pytest.approx(1e-3)
    assert len(fast["steps"]) == 8 and all(s["measured"] is None for s in fast["steps"])
    slow = fast["predicted_s"] * 3
    code, out, _ = compare(capsys, "--measured", f"{slow * 1e3}ms", *base, "--json")
    assert json.loads(out)["verdict"] == "slower than expected"
    code, out, _ = compare(capsys, "--measured", f"{fast['predicted_s']}", *base, "--json")
    assert json.loads(out)["verdict"] == "expected"


def test_the_figure_and_one_perfetto_trace_of_both_runs(tmp_path, capsys):
    paths = write(tmp_path, docs(causal=True))
    figure, both = tmp_path / "c.png", tmp_path / "both.json"
    code, out, err = compare(capsys, *paths, *HARDWARE, "--plot", str(figure), "--trace", str(both))
    assert code == 0, err
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    trace = json.loads(both.read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names == {f"{run} host {h}" for run in ("measured", "predicted") for h in range(4)}
    assert {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"} == {
        0,
        1,
        2,
        3,
        1000,
        1001,
        1002,
        1003,
    }
    assert "verdict" in trace["otherData"]
    assert "per step" in out and "differs most" in out  # the table for people


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_traces_get_one_line_or_a_partial_answer(tmp_path, capsys, case):
    argv = case.build(tmp_path)
    code, out, err = compare(capsys, *argv)
    assert "Traceback" not in out + err
    assert code == case.exit, err
    if case.exit == 2:
        assert err.count("\n") == 1 and err.startswith("ringsim compare: error:"), err
        assert case.says in err, err
    else:
        assert case.says in out, out


@pytest.mark.parametrize(("argv", "named"), MEASURED_BAD)
def test_bad_times_are_one_line_naming_the_flag(capsys, argv, named):
    code, _, err = compare(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and named in err, err


def test_a_profile_file_loads_through_hardware_as_a_preset_does(tmp_path, capsys):
    """Issue 30 item 4: a profile the GPU check writes (``save_device_profile``: a
    ``Hardware``'s fields, its chip from the device's capability) loads in ``compare`` as in
    ``simulate`` and ``plan``, its device and save date said first; the same device as a file
    predicts what the preset does, on a trace and on a time alone; a bad file is one line."""
    import dataclasses

    from kernels.gpu.check import save_device_profile
    from ringsim.timer.machine.arch import device_arch
    from ringsim.timer.machine.hardware import get_hardware

    h100 = get_hardware("h100-nvlink")
    measured = dataclasses.replace(
        h100, name="cuda-calibrated", arch=device_arch((9, 0), 132), device="NVIDIA H100 SXM"
    )
    profile = json.loads(json.dumps(dataclasses.asdict(measured)))  # as the report holds it
    path = str(save_device_profile(profile, tmp_path / "gpu-h100.json"))
    paths = write(tmp_path, docs(causal=True, layout="zigzag"))
    base = ["--hosts", "8", "--seq-len", "64K", "--causal", "--layout", "zigzag"]
    for argv in (paths, ["--measured", "12ms", *base, "--implementation", "fa2"]):
        code, out, err = compare(capsys, *argv, "--hardware", path, "--json")
        assert code == 0, err
        from_file = json.loads(out)
        assert from_file["hardware"] == "cuda-calibrated"
        assert "a profile measured on NVIDIA H100 SXM, saved 20" in err
        code, out, err = compare(capsys, *argv, *HARDWARE, "--json")
        preset = json.loads(out)
        assert from_file["predicted_s"] == pytest.approx(preset["predicted_s"], rel=1e-12)
        assert from_file["predicted_interval_s"] == pytest.approx(preset["predicted_interval_s"])
    for command in (["simulate", *base], ["plan", "--model", "7b", "--hosts", "8", "--top", "1"]):
        seq = [] if command[0] == "simulate" else ["--seq-len", "64K"]
        assert cli.main([*command, *seq, "--hardware", path, "--json"]) == 0
        assert "saved 20" in capsys.readouterr().err
    bad = tmp_path / "bad-profile.json"
    bad.write_text(json.dumps({**profile, "link": "carrier-pigeon"}))
    code, out, err = compare(capsys, *paths, "--hardware", str(bad), "--json")
    assert code == 2 and "link" in json.loads(err)["error"]  # one JSON object under --json
    assert "bad-profile.json" in json.loads(err)["error"]
