"""The planner's answers do not move when its search or its speed changes (issue 35): every
case of ``plan_answers.CASES`` is planned again and compared, to the last bit of every float,
with the answers main's planner gave before the change (``tests/data/plans-before.json``,
written by ``tests/plan_answers.py`` from that code). A ranking, a time, a byte count, an
interval or the set of configurations dropped or bounded that moves fails here; a bug fixed on
purpose regenerates the file in the same commit, named in its message."""

import json
from pathlib import Path

import pytest
from plan_answers import CASES, answers, run

BEFORE = json.loads((Path(__file__).parent / "data" / "plans-before.json").read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_planner_answers_as_before(name):
    now, before = answers(run(CASES[name])), BEFORE[name]
    assert now["head"] == before["head"]
    for rank, (ours, theirs) in enumerate(zip(now["ranked"], before["ranked"], strict=False)):
        assert ours == theirs, f"rank {rank + 1} moved"
    assert len(now["ranked"]) == len(before["ranked"])
    assert now["best"] == before["best"]
    assert now["dropped"] == before["dropped"]
    assert now["bounded"] == before["bounded"]
