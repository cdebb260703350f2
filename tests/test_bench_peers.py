"""benchmarks/bench_peers.py without running a benchmark: its cases and flags, the skip path when
the peers cannot be installed, the per-rank error bookkeeping and the atomic results file."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_peers as bp

# ------------------------------------------------------------------------------------------
# Cases and flags
# ------------------------------------------------------------------------------------------


def test_cases_are_the_issue_cases():
    got = [(c.seq_len, c.causal, c.backward, c.rounds) for c in bp.cases(False, None)]
    assert got == [
        (4096, False, False, 3),
        (4096, False, True, 3),
        (4096, True, False, 3),
        (16384, False, False, 2),
    ]


def test_quick_and_rounds():
    quick = bp.cases(True, None)
    assert [c.seq_len for c in quick] == [1024, 1024, 1024, 4096]
    assert {(c.rounds, c.repeats) for c in quick} == {(1, 1)}
    assert {c.rounds for c in bp.cases(False, 5)} == {5}


def test_parser_defaults_and_flags():
    args = bp.build_parser().parse_args([])
    assert (args.skip_peers, args.quick, args.jax_chunk, args.rap_bucket) == (
        False,
        False,
        512,
        1024,
    )
    args = bp.build_parser().parse_args(["--skip-peers", "--cases", "1,4", "--rounds", "2"])
    assert (args.skip_peers, args.cases, args.rounds) == (True, "1,4", 2)
    with pytest.raises(SystemExit):
        bp.build_parser().parse_args(["--no-such-flag"])


# ------------------------------------------------------------------------------------------
# Installing the peers, or skipping them
# ------------------------------------------------------------------------------------------


class Done:
    def __init__(self, returncode, stderr=""):
        self.returncode, self.stderr, self.stdout = returncode, stderr, ""


def test_failed_install_skips_with_the_reason(tmp_path):
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        return (
            Done(1, "ERROR: No matching distribution found for jax==0.7.2")
            if "pip" in cmd
            else Done(0)
        )

    python, why = bp.ensure_peers(tmp_path / "venv", run=run)
    assert python is None
    assert "pip install" in why and "No matching distribution" in why
    assert calls[-1][1:4] == ["-m", "pip", "install"]


def test_a_venv_that_cannot_be_made_skips(tmp_path):
    def run(cmd, **kw):
        raise FileNotFoundError(2, "No such file or directory", cmd[0])

    python, why = bp.ensure_peers(tmp_path / "venv", run=run)
    assert python is None and "No such file or directory" in why


def test_installed_peers_are_reused_without_pip(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        return Done(0)

    assert bp.ensure_peers(tmp_path / "venv", run=run)[0] == python
    assert len(calls) == 1 and "import ringattention" in calls[0][-1]


def test_a_venv_inside_the_repository_is_refused():
    python, why = bp.ensure_peers(bp.ROOT / ".peers-venv", run=lambda cmd, **kw: Done(1))
    assert python is None and "inside the repository" in why


def test_skip_peers_runs_ringsim_alone_and_says_so(tmp_path, monkeypatch):
    seen = []

    def fake_case(case, impls, python, args, work):
        seen.append((case.name, impls, python))
        return {
            "case": {"name": case.name, "seq_len": case.seq_len},
            "load_average": [(1, 1, 1)],
            "impls": {},
        }

    monkeypatch.setattr(bp, "run_case", fake_case)
    monkeypatch.setattr(bp, "ensure_peers", lambda venv: pytest.fail("must not install"))
    out = tmp_path / "peers.json"
    assert bp.main(["--skip-peers", "--cases", "1", "--out", str(out)]) == 0
    assert seen == [("forward", ["ringsim-gloo", "ringsim-numpy", "floor"], None)]
    data = json.loads(out.read_text())
    assert data["peers"] == "skipped: --skip-peers" and len(data["cases"]) == 1


# ------------------------------------------------------------------------------------------
# Errors per rank, verdicts, the results file
# ------------------------------------------------------------------------------------------


def test_rank_errors_find_the_wrong_rank():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((1, 2, 8, 4))
    got = ref.copy()
    got[0, 1, 6, 2] += 0.5 * np.abs(ref).max()  # one token of rank 1
    per_rank = bp.rank_errors(got, ref, np.arange(8).reshape(2, 4))
    assert per_rank[0] == {"max": 0.0, "tokens_wrong": 0, "tokens": 4}
    assert per_rank[1]["tokens_wrong"] == 1
    assert per_rank[1]["max"] == pytest.approx(0.5)


def test_verdicts_ratios_and_wrong_outputs():
    result = {
        "impls": {
            "ringsim-gloo": {"median_s": 1.0},
            "jax": {"median_s": 2.0},
            "floor": {"median_s": 0.25},
        },
        "errors": {
            "ringsim-gloo": {"out": [{"max": 1e-7, "tokens_wrong": 0, "tokens": 4}] * 2},
            "ring-attention-pytorch": {"dk": [{"max": 0.9, "tokens_wrong": 4, "tokens": 4}] * 2},
        },
    }
    v = bp.verdicts(result)
    assert v["ringsim_over_jax"] == 0.5 and v["floor_fraction"] == 0.25
    assert list(v["wrong"]) == ["ring-attention-pytorch"]
    assert len(v["wrong"]["ring-attention-pytorch"]) == 2  # both ranks named


def test_write_json_is_atomic(tmp_path):
    path = tmp_path / "sub" / "peers.json"
    bp.write_json({"a": 1}, path)
    bp.write_json({"a": 2}, path)
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["peers.json"]
