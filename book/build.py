"""Build the ringsim book: execute the lessons, then render them with Sphinx + MyST-NB.

    python book/build.py            # -> book/_build/html/index.html
    python book/build.py --jobs 1   # execute the lessons one at a time

Steps, each reusable on its own (the tests call them):

1. ``vendor()``: ``npm ci`` the pinned browser scripts of ``book/package.json`` (MathJax 3,
   require.js, the Jupyter widgets HTML manager) and copy them to ``book/_static/vendor``, so
   the pages never reach for a CDN and read offline.
2. ``execute_lesson()``: convert a jupytext lesson (``lessons/NN_*.py``) to a notebook and run
   it with nbclient; a failing cell raises. The executed notebook is cached under
   ``book/_build/executed`` keyed by a digest of the lesson, the library sources (``ringsim/``,
   ``kernels/``), ``results/*.json`` and ``RINGSIM_LESSON_SCALE``, so CI runs every lesson
   once even though both ``tests/test_lessons.py`` and ``tests/test_book.py`` need it.
3. ``explorer_data()``: export the ring explorer's schedules and running errors
   (``ringsim.views.explorer``) to ``book/_build/generated/explorer-data.js``, a script the
   explorer page (``book/explorer.md`` + ``book/_static/explorer.js``) loads beside it.
4. ``stage()`` + ``sphinx()``: put the executed notebooks, ``lessons/index.md`` and the
   explorer page in ``book/_build/src`` and build HTML with ``-W`` (any warning fails, stderr
   from a cell is a warning) into ``book/_build/html``.

Lessons run with ``RINGSIM_STATIC_BOOK=1``: they still build their widgets (so the code is
exercised) but show the animation instead, since a static page has no kernel to drive them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
LESSONS = ROOT / "lessons"
BUILD = BOOK / "_build"
EXECUTED = BUILD / "executed"
SOURCE = BUILD / "src"
HTML = BUILD / "html"
VENDOR = BOOK / "_static" / "vendor"
GENERATED = BUILD / "generated"  # a second static folder (conf.py): files build.py writes
EXTRA_PAGES = ("explorer",)  # book/<name>.md pages listed after the lessons
LESSON_PAGES = ("notation",)  # lessons/<name>.md pages (JupyterLab opens them too), listed last

CELL_TIMEOUT_S = 300
# files under these folders change what a lesson prints, so they are part of its cache key
LIBRARY_GLOBS = ("ringsim/**/*.py", "kernels/**/*.py", "results/*.json")
# MathJax pieces a page may load lazily; speech (sre), SVG and MathML-input bundles are not used
MATHJAX_SKIP = ("sre", "*-full*", "*svg*", "mml-*", "node-main.js", "latest.js")


def lessons() -> list[Path]:
    """The lesson sources in reading order: ``lessons/NN_name.py``."""
    return sorted(LESSONS.glob("[0-9][0-9]_*.py"))


# ---------------------------------------------------------------------------------------------
# 1. vendored browser scripts
# ---------------------------------------------------------------------------------------------


def vendor(force: bool = False) -> Path:
    """Install the pinned npm packages and copy what the pages load into ``_static/vendor``."""
    stamp = VENDOR / ".package-lock.sha256"
    lock = BOOK / "package-lock.json"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    if not force and stamp.exists() and stamp.read_text() == digest:
        return VENDOR
    subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
        cwd=BOOK,
        check=True,
    )
    modules = BOOK / "node_modules"
    if VENDOR.exists():
        shutil.rmtree(VENDOR)
    VENDOR.mkdir(parents=True)
    shutil.copytree(
        modules / "mathjax" / "es5",
        VENDOR / "mathjax",
        ignore=shutil.ignore_patterns(*MATHJAX_SKIP),
    )
    shutil.copy(modules / "requirejs" / "require.js", VENDOR / "require.js")
    widgets = modules / "@jupyter-widgets" / "html-manager" / "dist"
    shutil.copy(widgets / "embed-amd.js", VENDOR / "embed-amd.js")
    for font in widgets.iterdir():  # the widget manager's icon fonts sit beside its script
        if font.suffix in (".woff", ".woff2", ".ttf", ".eot", ".svg"):
            shutil.copy(font, VENDOR / font.name)
    stamp.write_text(digest)
    return VENDOR


# ---------------------------------------------------------------------------------------------
# 2. executing the lessons (cached)
# ---------------------------------------------------------------------------------------------


def lesson_digest(lesson: Path) -> str:
    """What the executed notebook depends on: the lesson, the library, the results, the scale."""
    h = hashlib.sha256()
    h.update(lesson.read_bytes())
    for pattern in LIBRARY_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            if "__pycache__" in path.parts:
                continue
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
    h.update(os.environ.get("RINGSIM_LESSON_SCALE", "1").encode())
    return h.hexdigest()


def _cached(lesson: Path, digest: str) -> Path | None:
    path = EXECUTED / f"{lesson.stem}.ipynb"
    if not path.exists():
        return None
    meta = json.loads(path.read_text()).get("metadata", {}).get("ringsim", {})
    return path if meta.get("digest") == digest else None


def execute_lesson(lesson: Path, *, use_cache: bool = True) -> Path:
    """Run one lesson top to bottom; returns the executed ``.ipynb``. A failing cell raises
    ``nbclient.exceptions.CellExecutionError`` naming the cell and the traceback."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    lesson = Path(lesson).resolve()
    digest = lesson_digest(lesson)
    if use_cache and (hit := _cached(lesson, digest)):
        return hit
    os.environ["RINGSIM_STATIC_BOOK"] = "1"
    nb = jupytext.read(lesson)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(LESSONS)}},
    )
    start = time.perf_counter()
    # The lessons run the torch path on the CPU; a Triton interpreter switch left in the caller's
    # environment (the test session sets one) is not theirs to inherit.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    client.execute(env=env)
    seconds = round(time.perf_counter() - start, 2)
    nb.metadata["ringsim"] = {
        "digest": digest,
        "source": f"lessons/{lesson.name}",
        "seconds": seconds,
    }
    EXECUTED.mkdir(parents=True, exist_ok=True)
    out = EXECUTED / f"{lesson.stem}.ipynb"
    tmp = out.with_suffix(".tmp")
    nbformat.write(nb, tmp)
    tmp.replace(out)
    return out


def execute_all(jobs: int = 2, *, use_cache: bool = True) -> list[Path]:
    """Execute every lesson (``jobs`` kernels at a time); raises on the first failing lesson."""
    todo = lessons()
    if jobs <= 1:
        return [execute_lesson(p, use_cache=use_cache) for p in todo]
    # One Python process per lesson: two nbclient clients driven from threads of one process
    # share jupyter's event-loop machinery, and we saw a cell stall for minutes that way.
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_execute_in_subprocess, p, use_cache) for p in todo]
        return [f.result() for f in futures]


def _execute_in_subprocess(lesson: Path, use_cache: bool) -> Path:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--execute", str(lesson)]
    done = subprocess.run(
        cmd + ([] if use_cache else ["--no-cache"]), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"lesson {lesson.name} failed:\n{done.stdout}\n{done.stderr}")
    return EXECUTED / f"{lesson.stem}.ipynb"


# ---------------------------------------------------------------------------------------------
# 3. the ring explorer's data
# ---------------------------------------------------------------------------------------------


def explorer_data() -> Path:
    """Write the explorer's schedules (``window.RING_DATA``) where the pages' static files are."""
    sys.path.insert(0, str(ROOT))
    from ringsim.views.explorer import write_explorer_data

    return write_explorer_data(GENERATED / "explorer-data.json")


# ---------------------------------------------------------------------------------------------
# 4. staging and Sphinx
# ---------------------------------------------------------------------------------------------


def stage(executed: list[Path]) -> Path:
    """Lay out the Sphinx source folder: the index page, then the executed notebooks."""
    if SOURCE.exists():
        shutil.rmtree(SOURCE)
    SOURCE.mkdir(parents=True)
    index = _link_notebooks((LESSONS / "index.md").read_text())
    for page in EXTRA_PAGES:
        text = _link_notebooks((BOOK / f"{page}.md").read_text())
        (SOURCE / f"{page}.md").write_text(text)
    for page in LESSON_PAGES:
        (SOURCE / f"{page}.md").write_text(_link_notebooks((LESSONS / f"{page}.md").read_text()))
    toc = "\n".join([*(p.stem for p in executed), *EXTRA_PAGES, *LESSON_PAGES])
    index += f"\n\n```{{toctree}}\n:hidden:\n:maxdepth: 1\n\n{toc}\n```\n"
    (SOURCE / "index.md").write_text(index)
    for path in executed:
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                cell["source"] = _link_notebooks("".join(cell["source"]))
        (SOURCE / path.name).write_text(json.dumps(nb))
    return SOURCE


def _link_notebooks(markdown: str) -> str:
    """Lessons link each other's jupytext sources (they open in JupyterLab); the book renders
    notebooks, so ``](02_online_softmax.py)`` becomes ``](02_online_softmax.ipynb)``."""
    return re.sub(r"\]\((\d\d_[A-Za-z0-9_]+)\.py\)", r"](\1.ipynb)", markdown)


def sphinx() -> Path:
    """Render ``book/_build/src`` to ``book/_build/html``; any warning fails the build."""
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    cmd += ["-c", str(BOOK), "-d", str(BUILD / "doctrees"), str(SOURCE), str(HTML)]
    subprocess.run(cmd, check=True)
    return HTML / "index.html"


def build(jobs: int = 2, *, use_cache: bool = True) -> Path:
    """Everything: vendor, execute, stage, render. Returns the path of the front page."""
    vendor()
    explorer_data()
    executed = execute_all(jobs, use_cache=use_cache)
    stage(executed)
    return sphinx()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--no-cache", action="store_true", help="re-execute every lesson")
    parser.add_argument("--execute", metavar="LESSON", help="only execute this one lesson")
    args = parser.parse_args(argv)
    if args.execute:
        print(execute_lesson(Path(args.execute), use_cache=not args.no_cache))
        return 0
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    index = build(args.jobs, use_cache=not args.no_cache)
    print(f"book built: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
