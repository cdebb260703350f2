"""Every Triton kernel variant the GPU paths launch compiles for sm_80 and sm_90 without a GPU
(``kernels.gpu.aot``): no compile error, shared memory within each architecture's limit, no
register spills in bf16/fp16 (a few bytes at most in fp32). Compiling all of them takes a few
minutes of CPU, split over two worker processes; the report is kept (``run_all(cache=True)``)
and reused while every input it was compiled from is byte-identical, so a rerun checks the same
compiled set in a second.
"""

import json
from pathlib import Path

import pytest

from kernels.gpu import aot as aot_check

pytestmark = pytest.mark.torch  # one xdist worker runs this module (its group, conftest.py)
SLOW = pytest.mark.slow  # the tests that compile (or reuse the kept report)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report():
    return aot_check.run_all(aot_check.ARCHS, jobs=2, cache=True)


def _variant(r: dict) -> tuple:
    return aot_check._record_key(r)


@SLOW
def test_every_variant_compiles_within_the_limits(report):
    assert report["failures"] == [], "\n" + aot_check.summary_table({"records": report["failures"]})
    assert report["kernels"] == len(report["records"]) > 100


@SLOW
def test_the_compiled_set_covers_what_the_gpu_paths_launch(report):
    import torch

    from kernels.blocks.tiles import gpu_config, tile_candidates

    records = report["records"]
    for arch in aot_check.ARCHS:
        mine = [r for r in records if r["arch"] == arch]
        assert {r["kernel"] for r in mine} == {
            "_attn_fwd",
            "_attn_bwd_dkdv",
            "_attn_bwd_dq",
            "_attn_bwd_delta",
        }
        assert {r["dtype"] for r in mine} == {"bfloat16", "float16", "float32"}
        assert {r["head_dim"] for r in mine} == {64, 128}
        assert {(r["causal"], r["segments"]) for r in mine} == {
            (False, False),
            (True, False),
            (False, True),
            (True, True),
        }
        assert any(r["heads"] != r["kv_heads"] for r in mine)  # GQA
        for d in (64, 128):
            searched = {tuple(r["tile"]) for r in mine if r["tile"] and r["head_dim"] == d}
            # the default tile is compiled (and recorded) first, as "default"
            default = gpu_config(d, "forward", torch.bfloat16, arch)
            searched.add(tuple(vars(default).values()))
            assert searched == {tuple(vars(t).values()) for t in tile_candidates(d, arch)}


@SLOW
def test_the_committed_results_list_the_same_variants(report):
    """results/aot-triton-<version>.json is this run's (rerun ``python -m kernels.gpu.aot
    --out results/aot-triton-3.9.json`` after changing a kernel, a tile or a plan)."""
    committed = json.loads((REPO / "results" / "aot-triton-3.9.json").read_text())
    assert committed["failures"] == []
    assert sorted(map(_variant, committed["records"])) == sorted(map(_variant, report["records"]))


# ---- the pieces, without compiling ---------------------------------------------------------


def test_a_kept_report_is_reused_only_while_its_inputs_are_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGSIM_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "kernel.py"
    source.write_text("v1")
    compiled = []

    def compile_all(archs, jobs):
        compiled.append(list(archs))
        return {"kernels": 0, "records": [], "failures": []}, [str(source)]

    monkeypatch.setattr(aot_check, "_compile_all", compile_all)
    assert aot_check.run_all([80], jobs=1, cache=True)["cached"] is False
    assert aot_check.run_all([80], jobs=1, cache=True)["cached"] is True
    assert compiled == [[80]]
    aot_check.run_all([90], jobs=1, cache=True)  # another set of archs: its own report
    source.write_text("v2")  # a source changed: compiled again
    assert aot_check.run_all([80], jobs=1, cache=True)["cached"] is False
    monkeypatch.setattr(aot_check, "_versions", lambda: {"triton": "other"})
    assert aot_check.run_all([80], jobs=1, cache=True)["cached"] is False
    aot_check.run_all([80], jobs=1)  # without the cache: always compiled
    assert compiled == [[80], [90], [80], [80], [80]]
    (tmp_path / "cache" / "aot" / "aot-80.json").write_text("{not json")
    assert aot_check.run_all([80], jobs=1, cache=True)["cached"] is False  # a broken entry


PTXAS_LOG = """\
ptxas info    : 11 bytes gmem
ptxas info    : Compiling entry function '_attn_fwd' for 'sm_90a'
ptxas info    : Function properties for _attn_fwd
    8 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers
ptxas info    : Compile time = 183.695 ms
"""


def test_ptxas_log_is_parsed():
    assert aot_check.parse_ptxas(PTXAS_LOG) == {
        "_attn_fwd": {"stack": 8, "spill_stores": 4, "spill_loads": 8, "registers": 255}
    }


def test_problems_name_each_limit():
    ok = {
        "dtype": "bfloat16",
        "shared_bytes": 1000,
        "shared_limit": 2000,
        "registers": 200,
        "spill_stores": 0,
        "spill_loads": 0,
    }
    assert aot_check.problems(ok) == []
    assert "shared memory 3000 B > 2000 B" in aot_check.problems({**ok, "shared_bytes": 3000})[0]
    assert "spills 4 B" in aot_check.problems({**ok, "spill_stores": 4})[0]
    fp32 = {**ok, "dtype": "float32", "spill_stores": 4, "spill_loads": 4}
    assert aot_check.problems(fp32) == []
    assert aot_check.problems({**fp32, "spill_stores": 100})
    assert aot_check.problems({**ok, "registers": None})[0].startswith("no ptxas report")
    assert aot_check.problems({"error": "boom"}) == ["compile error: boom"]


def test_stand_in_driver_reports_the_target_and_launches_follow_the_plans():
    driver = aot_check.stand_in_driver(80)
    target = driver.get_current_target()
    assert (target.backend, target.arch, target.warp_size) == ("cuda", 80, 32)
    assert driver.get_current_device() == 80
    launches = aot_check.launches(90)
    used = {launch.used_by for launch in launches}
    assert {"gpu_check.correctness", "gpu_check.speed", "zigzag"} <= used
    assert aot_check._aot_seq(16384) == 64 and aot_check._aot_seq(300) == 300
    with pytest.raises(ValueError, match="arch"):
        aot_check.run_all([75])
    with pytest.raises(ValueError, match="jobs"):
        aot_check.run_all([80], jobs=0)
