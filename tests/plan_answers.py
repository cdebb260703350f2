"""The planner's answers for a few representative plans, as data to compare across a change of
its search or speed (issue 35): the README's two plan examples, the benchmark's speed case, the
405B 128K case at the pipeline it fixed (PP16 v2) with and without ``keep``, and a prefill.

Each case fixes ``pp`` and ``virtual_stages`` so that it asks the same question of a planner
that searches them. ``answers(plan)`` keeps what a user reads: every ranked candidate (label,
step time, bytes, in order), the best ten whole (with their intervals and breakdowns), and the
configurations dropped or bounded (as sorted sets: their order is the enumeration's, not an
answer). Floats are kept as ``repr`` strings, so a comparison is exact to the last bit.

    .venv/bin/python tests/plan_answers.py tests/data/plans-before.json   # regenerate
"""

from __future__ import annotations

import hashlib
import json
import sys

from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.studies.planner import plan

DGX = "dgx-h100"

CASES = {
    # README: ringsim plan --model llama3-8b --seq-len 1M --cluster dgx-h100 --nodes 8
    "readme-8b-1m": dict(model="llama3-8b", seq_len=2**20, nodes=8, global_batch=4, intervals=10),
    # README: ringsim plan --model 7b --seq-len 128K --cluster dgx-h100 --nodes 4 --tp 8
    #   --gemm-dtype fp8 --framework nemo-24.03
    "readme-7b-nemo": dict(
        model="7b",
        seq_len=2**17,
        nodes=4,
        global_batch=32,
        tp=8,
        gemm_dtype="fp8",
        framework="nemo-24.03",
        intervals=10,
    ),
    # benchmarks/bench_planner.py's speed case
    "bench-8b-128k": dict(
        model="llama3-8b", seq_len=2**17, nodes=8, global_batch=64, implementation="ideal"
    ),
    # issue 35's 405B case as it was filed (PP16 v2 fixed), every fitting one timed
    "405b-128k-pp16v2": dict(
        model="llama3-405b",
        seq_len=2**17,
        nodes=2048,
        global_batch=128,
        pp=16,
        virtual_stages=2,
        implementation="fa2",
        intervals=10,
    ),
    # the same with keep=10: the best ten exact, the rest bounded
    "405b-128k-pp16v2-keep10": dict(
        model="llama3-405b",
        seq_len=2**17,
        nodes=2048,
        global_batch=128,
        pp=16,
        virtual_stages=2,
        implementation="fa2",
        keep=10,
    ),
    # a prefill on PCIe L20s
    "prefill-7b-l20": dict(
        model="7b", seq_len=2**17, cluster="pcie-8x-l20", hosts=8, mode="prefill", intervals=3
    ),
}


def run(case: dict):
    """The plan a case asks for (``pp = virtual_stages = 1`` unless it says)."""
    kw = dict(case)
    model, seq_len = kw.pop("model"), kw.pop("seq_len")
    cluster = get_cluster(kw.pop("cluster", DGX))
    nodes = kw.pop("nodes", None)
    if nodes is not None:
        cluster = cluster.with_nodes(nodes)
    kw.setdefault("pp", 1)
    kw.setdefault("virtual_stages", 1)
    return plan(model, seq_len, cluster, kw.pop("hosts", None), **kw)


def _exact(value):
    """Floats as ``repr`` (exact), containers walked."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    return value


def _digest(rows: list) -> str:
    return hashlib.sha256(json.dumps(_exact(rows)).encode()).hexdigest()


def answers(result) -> dict:
    """What the plan answers (module docstring); nothing of how long it took."""
    out = result.as_dict()
    for timing in ("planner_seconds", "timed_attention"):
        out.pop(timing)
    ranked = [[c.label, c.step_time_s, c.bytes_per_host] for c in result.candidates]
    dropped = sorted([c.label, c.bytes_per_host] for c in result.dropped)
    bounded = sorted([c.label, c.lower_bound_s] for c in result.bounded)
    return _exact(
        {
            "head": {k: v for k, v in out.items() if k not in ("candidates", "dropped", "bounded")},
            "best": out["candidates"][:10],
            "ranked": ranked,
            "dropped": {"count": len(dropped), "sha256": _digest(dropped)},
            "bounded": {"count": len(bounded), "sha256": _digest(bounded)},
        }
    )


def main(path: str) -> None:
    data = {name: answers(run(case)) for name, case in CASES.items()}
    with open(path, "w") as f:
        json.dump(data, f, indent=0, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
