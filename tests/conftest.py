"""Test session setup: Triton's CPU interpreter (with its bf16 ``tl.dot`` shim), the Hypothesis
profiles ``ci`` (default, fast) and ``thorough`` (HYPOTHESIS_PROFILE=thorough), and the groups
that parallel runs keep together (``pytest -n 2 --dist loadgroup``, as ``make test`` runs).

Groups (``GROUPS``, by node id: a module, or one test of it): a group's tests run on one
pytest-xdist worker, one after another, while the other workers share the rest.

* ``ranks``: tests that start rank processes (gloo on loopback) or time a real ring. Each also
  holds ``ranks_lock`` (a file lock every worker shares) while it runs, and so does the book's
  build while it executes a lesson that starts ranks (``RING_LESSONS``): two sets of ranks never
  run at once, so none oversubscribes the cores another's timings assume. Every ``ranks`` test
  is ``slow``.
* ``book``: the book and the lessons, which share the executed lessons (``book/_build``).
* ``aot``: the Triton compile check, whose module fixture compiles (or reuses) every kernel once.

``make test-fast`` (``-m "not slow"``) leaves out the slow tests: the ranks, the book and the
lessons, the compile. The groups are kept by a scheduler of this file
(``pytest_xdist_make_scheduler``): pytest-xdist 3.8's own ``xdist_group`` marks rename node ids
through an attribute pytest 9 no longer reads, so its scheduler never sees them.
"""

import contextlib
import fcntl
import functools
import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# There is no GPU here: Triton kernels run in Triton's CPU interpreter. Triton reads this when it
# is first imported (its own library functions are jitted then), so it is set for the whole
# session, before any test module imports triton.
os.environ.setdefault("TRITON_INTERPRET", "1")

# bf16 tl.dot is garbage in the interpreter without this shim (see its docstring); it touches
# only the interpreter of this process, never a kernel's source or a lesson's environment.
import triton_shim

triton_shim.install()

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# lessons that start rank processes as they execute (they hold ranks_lock meanwhile)
RING_LESSONS = ("10_simulated_vs_measured", "16_your_own_trace")

GROUPS = {
    "tests/test_kernels_launch.py": "ranks",
    "tests/test_kernels_ring.py": "ranks",
    "tests/test_kernels_hybrid.py": "ranks",
    "tests/test_calibrate.py::test_real_calibration_and_measurement_on_gloo": "ranks",
    "tests/test_calibrate.py::test_overlap_probe_moves_the_runs_message": "ranks",
    "tests/test_calibration_robust.py::test_a_real_measurement_reports_progress_on_stderr": "ranks",
    "tests/test_calibration_robust.py::test_the_link_probe_sends_k_and_v_as_the_ring_does": "ranks",
    "tests/test_hostile.py::test_real_ring_refuses_a_nan_and_a_failed_local_check_on_every_rank": (
        "ranks"
    ),
    "tests/test_book.py": "book",
    "tests/test_lessons.py": "book",
    "tests/test_explorer.py": "book",
    "tests/test_lesson_numbers.py": "book",
    "tests/test_aot_compile.py": "aot",
    "tests/test_compare_real.py": "ranks",
}


def group_of(nodeid: str) -> str | None:
    """The group of a test (``GROUPS``: its own entry, else its module's), or None."""
    path, _, rest = nodeid.partition("::")
    name = rest.split("[", 1)[0].split("::", 1)[0]
    return GROUPS.get(f"{path}::{name}", GROUPS.get(path))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if group_of(item.nodeid) == "ranks":
            item.add_marker(pytest.mark.slow)


def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadgroup``: pytest-xdist's scope scheduler with ``GROUPS`` as the scopes
    (every other test its own), the largest scopes first (``--loadscope-reorder``)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    return GroupScheduling(config, log)


@pytest.fixture(scope="session")
def ranks_lock(tmp_path_factory):
    """``with ranks_lock():`` holds a lock that every xdist worker of this run shares (a file
    beside the workers' temporary folders; one process's own without xdist). Waiting for it is
    waiting for an event: the holder's ranks have ended."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "ranks.lock"

    @contextlib.contextmanager
    def hold():
        with open(path, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    return hold


@pytest.fixture(autouse=True)
def _one_set_of_ranks_at_a_time(request):
    """Every ``ranks`` test holds ``ranks_lock`` while it runs."""
    if group_of(request.node.nodeid) != "ranks":
        yield
        return
    with request.getfixturevalue("ranks_lock")():
        yield


@functools.cache
def book_build():
    """``book/build.py`` as a module (it is a script, not a package): one copy for every test."""
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("book_build", root / "book" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def ring_lessons_executed(ranks_lock) -> None:
    """The lessons that start ranks (``RING_LESSONS``) executed, or found in the cache, under
    ``ranks_lock``: in the ranks tests' turn, before anything executes the rest."""
    build = book_build()
    with ranks_lock():
        for stem in RING_LESSONS:
            build.execute_lesson(build.LESSONS / f"{stem}.py")


@pytest.fixture(scope="session")
def book_html(ring_lessons_executed) -> Path:
    """The built book's HTML folder, built once per worker for the book's and the explorer's
    tests (both in the ``book`` group; executed lessons are cached in ``book/_build``)."""
    return book_build().build(jobs=2).parent
