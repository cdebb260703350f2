"""Hostile traces for ``ringsim compare``: one table for the in-process tests
(``tests/test_compare_cli.py``) and the subprocess sweep (``benchmarks/hostile_sweep.py``).

Each case writes its files into a folder (``build(folder) -> argv``, the command's arguments
after ``compare``) from a small GPU-shaped ring (``ringsim.views.gpu_trace``, no GPU needed)
and says what ``ringsim compare`` must do: exit 2 with one line containing ``says``, or
answer (exit 0) with a note containing ``says`` (a partial answer says what it lacks).
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HARDWARE = ["--hardware", "h100-nvlink"]


def ring(causal: bool = False, layout: str = "contiguous", hosts: int = 4):
    """A small simulated forward ring under FA2 on H100 (the traces' source)."""
    from ringsim.timer import RingConfig, simulate
    from ringsim.timer.machine.hardware import get_hardware

    config = RingConfig(
        hosts=hosts,
        seq_len=hosts * 2048,
        hardware=get_hardware("h100-nvlink"),
        heads=8,
        kv_heads=8,
        head_dim=64,
        implementation="fa2",
        causal=causal,
        layout=layout,
    )
    return simulate(config, keep_timeline=True)


def docs(**kw) -> list[dict]:
    from ringsim.views.gpu_trace import gpu_traces

    return gpu_traces(ring(**kw), family="flash-attn 2")


def write(folder: Path, documents: list[dict], stem: str = "rank") -> list[str]:
    paths = []
    for r, doc in enumerate(documents):
        path = folder / f"{stem}{r}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def edited(edit: Callable[[dict, int], None], **kw) -> list[dict]:
    """The ring's documents, each passed through ``edit(event, rank)``."""
    out = docs(**kw)
    for r, doc in enumerate(out):
        for e in doc["traceEvents"]:
            edit(e, r)
    return out


# -- the builders --------------------------------------------------------------------------------
def empty(folder: Path) -> list[str]:
    (folder / "r.json").write_text("")
    return [str(folder / "r.json")]


def truncated(folder: Path) -> list[str]:
    text = json.dumps(docs()[0])
    (folder / "r.json").write_text(text[: len(text) // 2])
    return [str(folder / "r.json")]


def not_gzip(folder: Path) -> list[str]:
    (folder / "r.json.gz").write_text(json.dumps(docs()[0]))
    return [str(folder / "r.json.gz")]


def truncated_gzip(folder: Path) -> list[str]:
    data = gzip.compress(json.dumps(docs()[0]).encode())
    (folder / "r.json.gz").write_bytes(data[: len(data) // 2])
    return [str(folder / "r.json.gz")]


def binary(folder: Path) -> list[str]:
    (folder / "r.bin").write_bytes(bytes(range(256)) * 4)
    return [str(folder / "r.bin")]


def no_events(folder: Path) -> list[str]:
    (folder / "r.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": "none"}))
    return [str(folder / "r.json")]


def no_times(folder: Path) -> list[str]:
    def drop(e: dict, r: int) -> None:
        e.pop("ts", None)
        e["dur"] = "long"

    return write(folder, edited(drop))


def absurd_times(folder: Path) -> list[str]:
    def huge(e: dict, r: int) -> None:
        if e.get("ph") == "X":
            e["ts"], e["dur"] = 1e308, 1e308

    return write(folder, edited(huge))


def no_shapes(folder: Path) -> list[str]:
    def strip(e: dict, r: int) -> None:
        for key in ("Input Dims", "Input type", "Concrete Inputs"):
            e.get("args", {}).pop(key, None)

    return write(folder, edited(strip))


def no_shapes_with_flags(folder: Path) -> list[str]:
    flags = ["--seq-len", "8K", "--hosts", "4", "--heads", "8", "--head-dim", "64"]
    return [*no_shapes(folder), *flags, "--dtype", "bf16", *HARDWARE]


def unknown_kernels(folder: Path) -> list[str]:
    def rename(e: dict, r: int) -> None:
        if "flash" in e.get("name", ""):
            e["name"] = "my_attention_kernel" if e.get("cat") == "kernel" else "mylib::attend"

    flags = ["--seq-len", "8K", "--hosts", "4", "--heads", "8", "--head-dim", "64"]
    return [*write(folder, edited(rename)), *flags, "--dtype", "bf16", *HARDWARE]


def two_rings(folder: Path) -> list[str]:
    """Two 2-host rings' processes merged in one file: four processes, no ring of four."""
    first, second = docs(hosts=2), docs(hosts=2)
    for doc in second:
        for e in doc["traceEvents"]:
            e["pid"] = e["pid"] + 100 if isinstance(e["pid"], int) else e["pid"]
    merged = [e for doc in first + second for e in doc["traceEvents"]]
    (folder / "merged.json").write_text(json.dumps({"traceEvents": merged}))
    return [str(folder / "merged.json"), *HARDWARE]


def two_groups(folder: Path) -> list[str]:
    """Rank 0 sends to rank 1 in one step and to rank 2 in another: two groups' sends."""
    count = {"n": 0}

    def retarget(e: dict, r: int) -> None:
        if r == 0 and e.get("name") == "c10d::send":
            count["n"] += 1
            if count["n"] > 2:
                e["args"]["Concrete Inputs"][2] = "2"

    return [*write(folder, edited(retarget)), *HARDWARE]


def clocks_apart(folder: Path) -> list[str]:
    from ringsim.views.gpu_trace import gpu_traces

    shifted = gpu_traces(ring(), family="flash-attn 2", clock_offsets_s=[0.0, 4.0, -3.0, 9.5])
    return [*write(folder, shifted), *HARDWARE]


def not_a_ring(folder: Path) -> list[str]:
    def no_sends(doc: dict) -> dict:
        keep = [e for e in doc["traceEvents"] if "c10d" not in e.get("name", "")]
        keep = [e for e in keep if "nccl" not in e.get("name", "")]
        return {**doc, "traceEvents": keep}

    return [*write(folder, [no_sends(d) for d in docs()]), *HARDWARE]


def all_gather(folder: Path) -> list[str]:
    def rename(e: dict, r: int) -> None:
        if e.get("name") in ("c10d::send", "c10d::recv_"):
            e["name"] = "c10d::_allgather_base_"
        elif e.get("name", "").startswith("ncclDevKernel_SendRecv"):
            e["name"] = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

    return [*write(folder, edited(rename)), *HARDWARE]


def backward_only(folder: Path) -> list[str]:
    """The same loop with flash-attention's backward kernels: a backward pass."""

    def backward(e: dict, r: int) -> None:
        if e.get("cat") == "kernel" and "flash_fwd_kernel" in e.get("name", ""):
            e["name"] = (
                "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>()"
            )

    return [*write(folder, edited(backward)), *HARDWARE]


def all_to_all(folder: Path) -> list[str]:
    """Ulysses' all-to-all: NCCL runs it as grouped send/recv (the same SendRecv kernel),
    under c10d::alltoall_ rather than a ring's c10d::send and c10d::recv_."""

    def rename(e: dict, r: int) -> None:
        if e.get("name") in ("c10d::send", "c10d::recv_"):
            e["name"] = "c10d::alltoall_"

    return [*write(folder, edited(rename)), *HARDWARE]


def a_folder(folder: Path) -> list[str]:
    return [str(folder)]


def missing_file(folder: Path) -> list[str]:
    return [str(folder / "nope.json")]


def gpu_without_hardware(folder: Path) -> list[str]:
    return write(folder, docs())


def other_sqlite(folder: Path) -> list[str]:
    db = sqlite3.connect(folder / "other.sqlite")
    db.execute("CREATE TABLE people (name TEXT)")
    db.commit()
    db.close()
    return [str(folder / "other.sqlite")]


def truncated_sqlite(folder: Path) -> list[str]:
    from ringsim.views.gpu_trace import write_nsys_export

    path = write_nsys_export(docs(), folder / "run.sqlite")
    data = path.read_bytes()
    path.write_bytes(data[:200])
    return [str(path), *HARDWARE]


def uneven_passes(folder: Path) -> list[str]:
    """Rank 1's file holds two passes, the others one."""
    documents = docs()
    second = json.loads(json.dumps(documents[1]))
    for e in second["traceEvents"]:
        if "ts" in e:
            e["ts"] += 5e4  # 50 ms later
    documents[1]["traceEvents"] += second["traceEvents"]
    return [*write(folder, documents), *HARDWARE]


@dataclass(frozen=True)
class Case:
    """``ringsim compare`` on ``build(folder)``: ``exit`` 2 with one line containing ``says``,
    or 0 with a note (or the verdict line) containing ``says``."""

    name: str
    build: Callable[[Path], list[str]]
    says: str
    exit: int = 2


CASES = [
    Case("empty file", empty, "empty trace"),
    Case("truncated JSON", truncated, "truncated?"),
    Case(".gz that is not gzip", not_gzip, "not gzip"),
    Case("truncated .gz", truncated_gzip, "truncated gzip"),
    Case("binary file", binary, "neither JSON nor"),
    Case("traceEvents not a list", no_events, "no traceEvents list"),
    Case("events without ts or dur", no_times, "no timed events"),
    Case("absurd ts and dur", absurd_times, "no timed events"),
    Case("no shapes recorded", no_shapes, "--heads"),
    Case("no shapes, flags supply them", no_shapes_with_flags, "per step", exit=0),
    Case("unknown kernels", unknown_kernels, "no attention call of a known family", exit=0),
    Case("two rings in one file", two_rings, "not a ring of 4"),
    Case("two process groups", two_groups, "more than one ring"),
    Case("clocks seconds apart", clocks_apart, "clocks", exit=0),
    Case("not a ring", not_a_ring, "no send or receive"),
    Case("all-gather, not a ring", all_gather, "not a ring's send and receive"),
    Case("all-to-all, not a ring", all_to_all, "c10d::alltoall_"),
    Case("a backward pass", backward_only, "compared in total", exit=0),
    Case("a folder", a_folder, "a folder, not a trace file"),
    Case("a missing file", missing_file, "cannot read"),
    Case("a GPU trace without --hardware", gpu_without_hardware, "--hardware"),
    Case("an SQLite file that is not nsys", other_sqlite, "CUPTI_ACTIVITY_KIND_KERNEL"),
    Case("a truncated SQLite export", truncated_sqlite, "Nsight"),
    Case("ranks with different passes", uneven_passes, "different numbers of ring passes"),
]

MEASURED_BAD = [  # the short form's bad values, each with what its one line names
    (["--measured", "abc", "--hosts", "4", "--seq-len", "8K"], "--measured"),
    (["--measured", "-1ms", "--hosts", "4", "--seq-len", "8K"], "--measured"),
    (["--measured", "0", "--hosts", "4", "--seq-len", "8K"], "--measured"),
    (["--measured", "1e400", "--hosts", "4", "--seq-len", "8K"], "--measured"),
    (["--measured", "12ms"], "--hosts"),
    ([], "TRACE"),
]


def sweep() -> str:
    """Every case as ``python -m ringsim compare ...`` in a fresh process: ``"OK ..."`` when
    all held, else ``"FAIL ..."`` naming those that did not (``benchmarks/hostile_sweep.py``)."""
    import subprocess
    import sys
    import tempfile

    root = Path(__file__).resolve().parents[1]
    failed = []
    runs = [(c.name, c.build, c.exit, c.says) for c in CASES]
    runs += [(" ".join(a) or "no arguments", lambda _, a=a: a, 2, n) for a, n in MEASURED_BAD]
    for name, build, exit_, says in runs:
        with tempfile.TemporaryDirectory(prefix="hostile-trace-") as tmp:
            argv = build(Path(tmp))
            run = subprocess.run(
                [sys.executable, "-m", "ringsim", "compare", *argv],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=120,
            )
        said = run.stderr if exit_ else run.stdout
        lines_ok = exit_ == 0 or run.stderr.count("\n") == 1
        if run.returncode != exit_ or says not in said or "Traceback" in run.stderr or not lines_ok:
            failed.append(f"{name} (exit {run.returncode}: {run.stderr.strip()[-120:]})")
    total = len(runs)
    if failed:
        return f"FAIL {len(failed)} of {total}: " + "; ".join(failed)
    return f"OK {total} of {total} traces and times: one line or a partial answer each"
