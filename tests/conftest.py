"""Test session setup: Triton's CPU interpreter (with its bf16 ``tl.dot`` shim), the Hypothesis
profiles ``ci`` (default, fast) and ``thorough`` (HYPOTHESIS_PROFILE=thorough), and the groups
that parallel runs keep together (``pytest -n 2 --dist loadgroup``, as ``make test`` runs).

Groups (pytest-xdist sends a group's tests to one worker, one after another):

* ``ranks``: every test marked ``ranks`` starts rank processes (gloo on loopback) or times a
  real ring; two of them at once would oversubscribe the cores their timings and deadlines
  assume. The book and the lessons join it: lesson 10 measures a real ring as it executes.
* ``aot``: the Triton compile check's module fixture compiles (or reuses) every kernel once.

A ``ranks`` test is also ``slow``: ``make test-fast`` (``-m "not slow"``) leaves the groups out.
"""

import os

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


# modules whose tests share one expensive fixture or start ranks, by group (see the docstring)
GROUPS = {"test_book": "ranks", "test_lessons": "ranks", "test_aot_compile": "aot"}


@pytest.hookimpl(tryfirst=True)  # before xdist names the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = GROUPS.get(item.module.__name__ if item.module else "")
        if item.get_closest_marker("ranks"):
            group = "ranks"
            item.add_marker(pytest.mark.slow)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
