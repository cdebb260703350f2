"""The house rules of the layers, checked on the source (DESIGN.md): nothing imports upward in
a cycle, the real backend never imports the command line, no private name crosses a package,
and a kind (layout, strategy) is asked, not compared by name, outside its own modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ringsim", "kernels")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """``(module, names)`` of every import in ``path``, lazy ones (inside functions) too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            found.extend((a.name, ()) for a in node.names)
    return [(m, names) for m, names in found if m.split(".")[0] in PACKAGES]


def _package(module: str) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to itself)."""
    path = MODULES[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def test_no_import_cycles_lazy_imports_included():
    graph = {}
    for name, path in MODULES.items():
        deps = set()
        for module, names in _imports(path):
            deps |= {m for m in (module, *(f"{module}.{n}" for n in names)) if m in MODULES}
        graph[name] = deps - {name}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_real_backend_never_imports_the_command_line():
    offenders = [
        (name, module)
        for name, path in MODULES.items()
        if name.startswith("kernels")
        for module, _ in _imports(path)
        if module == "ringsim.cli" or module.startswith("ringsim.cli.")
    ]
    assert offenders == []


def test_no_private_name_crosses_a_package():
    offenders = []
    for name, path in MODULES.items():
        here = _package(name)
        for module, names in _imports(path):
            if module not in MODULES:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and _package(module) != here:
                offenders.append((name, module, private))
            if module.rpartition(".")[2].startswith("_") and _package(module) != here:
                offenders.append((name, module, "private module"))
    assert offenders == []


TIMER_ROOMS = ("cost", "machine", "engine", "strategies", "step", "studies")
"""The timer's rooms, bottom up (``ringsim/timer/__init__.py``): each may import the ones
before it, never the ones after."""


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["ringsim", "timer"] or len(parts) < 3:
        return None
    return parts[2]


def test_the_timer_rooms_import_only_downward():
    """``cost`` at the bottom (it imports no other room: a device enters it as an argument),
    then ``machine``, ``engine``, ``strategies``, ``step``, ``studies``; lazy imports count."""
    offenders = []
    for name, path in MODULES.items():
        here = _room(name)
        if here is None:
            continue
        for module, names in _imports(path):
            for target in (module, *(f"{module}.{n}" for n in names)):
                there = _room(target) if target in MODULES else None
                if there in TIMER_ROOMS and here in TIMER_ROOMS:
                    if TIMER_ROOMS.index(there) > TIMER_ROOMS.index(here):
                        offenders.append(f"{name} imports {target}")
    assert offenders == []


LAYOUT_NAMES = ("contiguous", "striped", "zigzag", "per-document")
STRATEGY_NAMES = ("ring", "ulysses", "allgather", "hybrid", "double-ring")
COMPARISON = re.compile(
    r"""(==|!=|\bin)\s*\(?\s*["']({})["']""".format("|".join(LAYOUT_NAMES + STRATEGY_NAMES))
)
#: Where a kind is defined.
HOMES = ("ringsim/layouts.py", "ringsim/sharing.py", "ringsim/timer/strategies/")


HARDWARE_NAMES = (
    *("a100-nvlink", "a100-ib", "h100-nvlink", "h200-nvlink", "h200-ib", "h800-nvlink"),
    *("b200-nvlink", "tpu-v3", "tpu-v4", "tpu-v5e", "cpu-calibrated", "custom"),
    *("ampere", "hopper", "ada", "blackwell", "tpu", "cpu", "nvlink", "infiniband", "pcie", "ici"),
)
FAMILY_NAMES = ("ideal", "fa2", "fa3", "cudnn", "triton", "torch")
DEVICE_COMPARISON = re.compile(
    r"""(==|!=|\bin)\s*\(?\s*["']({})["']""".format("|".join(map(re.escape, HARDWARE_NAMES)))
)
FAMILY_COMPARISON = re.compile(
    r"""(implementation|family|kernel)[\w.]*\s*(==|!=|\bin)\s*\(?\s*["']({})["']""".format(
        "|".join(FAMILY_NAMES)
    )
)
NAME_PARSE = re.compile(
    r"""\.name\s*(==|!=|\.startswith|\.endswith|\.split)|(hardware|hw)\w*\.startswith"""
)
#: Where devices and kernel families are defined (their own registries may name them).
DEVICE_HOMES = ("ringsim/timer/machine/",)
#: The trace readers: a recorded event is known only by its name, matched against the trace
#: vocabulary (``ringsim.traces.kinds``), so they may parse ``event.name`` (never a device's or
#: a family's: the comparisons above still hold there).
TRACE_READERS = ("ringsim/traces/",)


def test_devices_and_families_are_asked_not_parsed_by_name():
    """What a device is (chip, link kind, achieved rates) and where a kernel family runs are
    fields and methods (``Hardware.arch``, ``KernelFamily.runs_on``), never a name compared
    or parsed (``== "torch"``, ``.name.endswith("-ib")``, ``ARCH_OF_PREFIX``) outside
    ``ringsim/timer/machine/``."""
    offenders = []
    for path in MODULES.values():
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("ringsim/") or rel.startswith(DEVICE_HOMES):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            patterns = [DEVICE_COMPARISON, FAMILY_COMPARISON]
            if not rel.startswith(TRACE_READERS):
                patterns.append(NAME_PARSE)
            if any(p.search(code) for p in patterns):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == []


PASS_COMPARISON = re.compile(
    r"""(==|!=|\bin)\s*\(?\s*["'](forward|backward|train-step|decode)["']"""
)


def test_passes_are_members_not_strings():
    """A pass is a ``ringsim.schedule.Pass`` member (``pass_ == Pass.BACKWARD``,
    ``pass_.has_backward``), declared once; no code spells its name to compare it."""
    offenders = []
    for path in MODULES.values():
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if PASS_COMPARISON.search(code) and "phase.kind" not in code:
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == []


CONFIG_NAMES = re.compile(r"(^|\.)(config|cfg|sub|outer|base)$")


def test_the_timer_reads_a_config_by_its_parts():
    """Inside the timer a ``RingConfig`` is read by part (``config.shape.heads``), which a type
    checker and an editor follow; the flat names (``config.heads``, through ``__getattr__``)
    are for the API's edge: the command line, the lessons, a user."""
    from dataclasses import fields

    from ringsim.timer.engine.config import PARTS

    flat = {f.name for part in PARTS.values() for f in fields(part)}
    offenders = []
    for name, path in MODULES.items():
        if not name.startswith("ringsim.timer.") or name == "ringsim.timer.engine.config":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in flat:
                base = ast.unparse(node.value)
                if CONFIG_NAMES.search(base):
                    offenders.append(f"{name}:{node.lineno}: {base}.{node.attr}")
    assert offenders == []


def test_kinds_are_asked_not_compared_by_name():
    """No ``== "zigzag"`` or ``in ("ring", ...)`` outside the layout and strategy modules."""
    offenders = []
    for path in MODULES.values():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(HOMES):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if COMPARISON.search(code) and not code.lstrip().startswith("for "):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == []


# The lessons' faces: ``ringsim`` (the public API) and ``ringsim.teach`` (the teaching face,
# its docstring says why). A lesson that imports an internal module breaks when a room moves.
LESSON_FACES = ("ringsim", "ringsim.teach")


def _lesson_imports(path: Path) -> list[str]:
    """Every first-party module (``ringsim``, ``kernels``) a lesson imports, by name:
    ``from ringsim import teach`` is ``ringsim.teach``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.append(submodule if submodule in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in PACKAGES]
    return found


def test_lessons_import_only_ringsim_and_its_teaching_face():
    lessons = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.py"))
    assert lessons, "no lessons found"
    offenders = {
        path.name: bad
        for path in lessons
        if (bad := [m for m in _lesson_imports(path) if m not in LESSON_FACES])
    }
    assert offenders == {}, f"lessons import internal modules (use ringsim.teach): {offenders}"


def test_the_teaching_face_needs_neither_matplotlib_nor_the_real_backend():
    import subprocess
    import sys

    code = (
        "import sys, ringsim.teach; "
        "print(sorted(m for m in ('matplotlib', 'torch', 'kernels') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
