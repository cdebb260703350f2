"""The prepared GPU run's CPU-checkable parts: its plans, the figure, the speed section's
per-row failure handling, medians, and the symmetric timing of the Triton calls (in the
interpreter). The CUDA sections themselves run only on a GPU (``python -m kernels.gpu.check``).
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from kernels.gpu import check as gpu_check
from kernels.gpu import plan as gpu_plan
from kernels.gpu import sections as gpu_sections

pytestmark = pytest.mark.torch


def test_help_and_sections():
    with pytest.raises(SystemExit) as exit_:
        gpu_check.parse_args(["--help"])
    assert exit_.value.code == 0
    args = gpu_check.parse_args(["--sections", "calibration,ring_member"])
    assert args.sections == "calibration,ring_member"
    assert set(gpu_check.ESTIMATES_S) == set(gpu_check.SECTIONS)
    assert sum(gpu_check.ESTIMATES_S.values()) <= args.budget_s <= 8 * 60 - 30


def test_plans_cover_what_the_issue_asks():
    """fp32/bf16/fp16 with a stated tolerance each; d in {64, 128}; blocks 1K-16K."""
    assert set(gpu_plan.CORRECTNESS_TOL) == set(gpu_plan.CORRECTNESS_DTYPES)
    assert set(gpu_plan.CORRECTNESS_DTYPES) == {"float32", "bfloat16", "float16"}
    assert gpu_plan.SPEED_HEAD_DIMS == (64, 128)
    assert min(gpu_plan.SPEED_SIZES) == 1024 and max(gpu_plan.SPEED_SIZES) == 16384
    assert {c for c, *_ in gpu_plan.CORRECTNESS_CASES} >= {300}  # a ragged length


def test_bench_asks_do_bench_for_the_median(monkeypatch):
    import triton.testing

    seen = {}

    def fake(fn, **kwargs):
        seen.update(kwargs)
        return 2.0  # ms

    monkeypatch.setattr(triton.testing, "do_bench", fake)
    assert gpu_sections.bench(lambda: None) == pytest.approx(2e-3)
    assert seen["return_mode"] == "median"


def test_one_failing_speed_row_does_not_lose_the_section(monkeypatch):
    calls = []

    def row(d, c, causal, config):
        calls.append((d, c, causal))
        if (d, c, causal) == (128, 4096, True):
            raise RuntimeError("out of resources")
        return {"d": d, "c": c, "causal": causal, "triton_fwd_tflops": 1.0}

    monkeypatch.setattr(gpu_sections, "speed_row", row)
    monkeypatch.setattr(gpu_sections, "tile_search", lambda d, arch: ({}, None))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    result = gpu_sections.section_speed(False, gpu_check.Budget(1000))
    rows = result["rows"]
    assert len(rows) == len(calls) == 2 * len(gpu_plan.SPEED_SIZES) * 2
    (bad,) = [r for r in rows if "error" in r]
    assert bad["d"] == 128 and bad["c"] == 4096 and "out of resources" in bad["error"]
    assert sum("triton_fwd_tflops" in r for r in rows) == len(rows) - 1


def test_triton_calls_time_the_launches_and_include_delta(monkeypatch):
    """The timed callables make no tile plan (made once, outside) and the backward computes its
    own ``delta``: outputs and gradients equal the one-shot calls'."""
    from kernels.blocks import triton_block as tb
    from kernels.blocks.dispatch import block_attention, block_attention_backward

    rng = np.random.default_rng(0)
    q, k, v, dout = (
        torch.from_numpy(rng.standard_normal((1, 2, 24, 8)).astype(np.float32)) for _ in range(4)
    )
    fwd, bwd = gpu_sections.triton_calls(q, k, v, True, dout=dout)
    plans = []
    real_plan = tb.plan
    monkeypatch.setattr(tb, "plan", lambda *a, **kw: plans.append(a) or real_plan(*a, **kw))
    out, lse = fwd()
    grads = bwd()
    assert plans == []  # none of the host bookkeeping inside the timed calls
    monkeypatch.undo()
    want_out, want_lse = block_attention(q, k, v, causal=True, backend="triton")
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(lse, want_lse)
    want = block_attention_backward(
        q, k, v, dout, want_out, want_lse, causal=True, backend="triton"
    )
    for got, w in zip(grads, want, strict=True):
        torch.testing.assert_close(got, w)


def _fake_report() -> dict:
    speed = [
        {
            "d": d,
            "c": c,
            "causal": causal,
            **{
                f"{impl}_{p}_tflops": 100.0 * (i + 1) * c / 16384
                for i, impl in enumerate(gpu_check.IMPL_STYLE)
                for p in ("fwd", "bwd")
            },
        }
        for d in (64, 128)
        for c in (1024, 4096, 16384)
        for causal in (False, True)
    ]
    cases = [
        {
            "c": 256,
            "d": 64,
            "causal": causal,
            "dtype": dtype,
            "tolerance": tol,
            "triton_max_rel_err": {"out": tol / 5},
            "sdpa_max_rel_err": {"out": tol / 4},
        }
        for causal in (False, True)
        for dtype, tol in gpu_plan.CORRECTNESS_TOL.items()
    ]
    runs = [
        {
            "block_tokens": c,
            "measured_time_s": 1e-3 * c / 1024,
            "predicted_time_s": 1e-3,
            "ratio": c / 1024,
        }
        for c in (1024, 4096)
    ]
    return {
        "device": "NVIDIA H200",
        "torch": "2.11",
        "triton": "3.6.0",
        "date": "2030-01-01",
        "sections": {
            "speed": {"rows": speed},
            "correctness": {"cases": cases},
            "ring_member": {"runs": runs},
        },
    }


def test_figure_from_a_report_and_from_an_empty_one(tmp_path):
    path = gpu_check.plot_report(_fake_report(), tmp_path / "gpu.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    empty = gpu_check.plot_report({"sections": {}}, tmp_path / "empty.png")
    assert empty.stat().st_size > 5_000


def test_without_a_gpu_main_says_why_and_writes_no_figure(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this test is about machines without a GPU")
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["--out", str(out), "--budget-s", "5"]) == 1
    data = json.loads(out.read_text())
    assert "no CUDA device" in data["errors"]["device"]
    assert not out.with_suffix(".png").exists()


def test_the_calibration_profile_is_written_as_a_hardware_file_the_cli_loads(tmp_path, capsys):
    """A profile from the GPU check could not be loaded by any command (issue 30's item 4): the
    calibration section's ``profile`` (a ``Hardware``'s fields, its chip from the device's
    compute capability and SM count) is written beside the report and ``--hardware`` loads it,
    its device and save date said before the output."""
    import dataclasses

    from ringsim import cli
    from ringsim.timer.machine.arch import device_arch
    from ringsim.timer.machine.hardware import get_hardware, load_profile

    measured = dataclasses.replace(
        get_hardware("h100-nvlink"),
        name="cuda-calibrated",
        arch=device_arch((9, 0), 114),  # an H100 PCIe
        device="NVIDIA H100 PCIe",
        p2p_bandwidth=None,
    )
    profile = json.loads(json.dumps(dataclasses.asdict(measured)))  # as the report holds it
    path = gpu_check.save_device_profile(profile, tmp_path / "gpu-h100-2026-12-02.json")
    assert path.name == "gpu-h100-2026-12-02-profile.json"
    assert load_profile(path) == measured and load_profile(path).arch.sms == 114
    argv = ["simulate", "--hosts", "8", "--seq-len", "64K", "--hardware", str(path)]
    assert cli.main([*argv, "--implementation", "fa2", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["hardware"] == "cuda-calibrated"
    assert "on NVIDIA H100 PCIe, saved 20" in err


def test_the_nccl_rings_trace_is_read_and_compared(tmp_path):
    """``nccl_ring`` records its zigzag run with torch.profiler and compares it
    (``compare_trace``). Without a GPU: the files its ranks would write, GPU-shaped from the
    same ring simulated (the project's ring: Triton kernels launched by the driver under
    ``RingAttention``), read back and compared on a calibrated profile."""
    from kernels.distributed.launch import RunConfig
    from ringsim.timer import RingConfig, simulate
    from ringsim.timer.machine.hardware import get_hardware
    from ringsim.views.gpu_trace import write_gpu_traces

    gpus, heads, head_dim = 4, gpu_plan.RING_HEADS, gpu_plan.RING_HEAD_DIM
    run = RunConfig(2048 * gpus, heads=heads, head_dim=head_dim, layout="zigzag", causal=True)
    ring = RingConfig(
        hosts=gpus,
        seq_len=run.seq_len,
        hardware=get_hardware("h100-nvlink"),
        heads=heads,
        head_dim=head_dim,
        implementation="triton",
        layout="zigzag",
        causal=True,
    )
    result = simulate(ring, keep_timeline=True)
    paths = write_gpu_traces(result, tmp_path, family="Triton", container="RingAttention", gz=True)
    root = Path(__file__).resolve().parents[1]
    calibration = json.loads((root / "results" / "cpu-calibration-2026-11-30.json").read_text())
    out = gpu_sections.compare_trace([str(p) for p in paths], run, calibration)
    assert out["family"] == "Triton"
    read = out["read"]
    assert (read["hosts"], read["block_tokens"], read["heads"], read["head_dim"]) == (
        gpus,
        2048,
        heads,
        head_dim,
    )
    assert (read["layout"], read["causal"], read["dtype"]) == ("zigzag", True, "bf16")
    comparison = out["comparison"]
    assert len(comparison["steps"]) == gpus and comparison["measured_s"] > 0
    assert comparison["verdict"] in ("expected", "slower than expected", "faster than expected")
    assert json.loads(json.dumps(comparison)) == comparison  # the report's JSON holds it
    assert (
        "read only" in gpu_sections.compare_trace([str(p) for p in paths], run, None)["comparison"]
    )
