"""The suite's own scaffolding: every test ``conftest.GROUPS`` keeps together still exists (a
renamed test would silently leave its group and run beside the others), and the lessons that
start ranks are all in ``RING_LESSONS``."""

import re
from pathlib import Path

from conftest import GROUPS, RING_LESSONS, group_of

ROOT = Path(__file__).resolve().parents[1]


def test_every_grouped_module_and_test_exists():
    for key in GROUPS:
        path, _, name = key.partition("::")
        assert (ROOT / path).is_file(), key
        if name:
            assert f"\ndef {name}(" in (ROOT / path).read_text(), key


def test_a_test_takes_its_own_group_else_its_modules():
    assert group_of("tests/test_kernels_ring.py::test_shard_unshard_roundtrip[zigzag]") == "ranks"
    assert group_of("tests/test_calibrate.py::test_real_calibration_and_measurement_on_gloo")
    assert group_of("tests/test_calibrate.py::test_bad_arguments") is None
    assert group_of("tests/test_aot_compile.py::test_ptxas_log_is_parsed") == "aot"


def test_the_lessons_that_start_ranks_are_the_ones_listed():
    # lessons reach the real backend through the teaching face: measure_real_ring and
    # record_real_ring start ranks
    starts_ranks = re.compile(r"\b(measure|record)_real_ring\(")
    found = {
        p.stem
        for p in (ROOT / "lessons").glob("[0-9][0-9]_*.py")
        if starts_ranks.search(p.read_text())
    }
    assert found == set(RING_LESSONS)
