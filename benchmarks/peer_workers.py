"""The peers' side of ``bench_peers.py``: runs under the peers' own python (their virtualenv),
so it needs numpy and the standard library only; each peer is imported inside its worker.

    PEERS_PYTHON benchmarks/peer_workers.py jax|ring-attention-pytorch SPEC_JSON

prints one JSON line: the timed runs' seconds and each process's peak memory (``VmHWM``).
``SPEC_JSON`` names the inputs folder (``q, k, v, g`` ``.npy``, ``(B, H, N, d)`` fp32), the
outputs folder, the mask, forward or forward + backward, repeats and the peers' tile sizes.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HEADS, HEAD_DIM, HOSTS = 8, 64, 2


def maxrss_bytes() -> int:
    """This process's peak resident memory: ``VmHWM`` of its own address space. (``ru_maxrss``
    is not: Linux carries it across ``exec``, so a child started by a large parent reports at
    least the parent's size.)"""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _load(spec: dict, name: str, rank: int | None = None) -> np.ndarray:
    """Input ``name`` as the peers hold it, ``(B, N, H, d)`` (``rank``: its contiguous block)."""
    x = np.load(Path(spec["inputs"]) / f"{name}.npy", mmap_mode="r")  # (B, H, N, d)
    if rank is not None:
        c = x.shape[2] // HOSTS
        x = x[:, :, rank * c : (rank + 1) * c]
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))


def _save(spec: dict, impl: str, arrays: dict) -> None:
    """Outputs back in ``(B, H, N, d)`` order for the comparison."""
    if spec["save"]:
        for key, x in arrays.items():
            x = np.asarray(x).transpose(0, 2, 1, 3)
            np.save(Path(spec["outputs"]) / f"{impl}-{key}.npy", x)


def jax_worker(spec: dict) -> dict:
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={HOSTS}"
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    from ringattention import ringattention

    rss0 = maxrss_bytes()
    mesh = Mesh(np.array(jax.devices()[:HOSTS]), ("sp",))
    spec_ = P(None, "sp", None, None)
    chunk = spec["jax_chunk"]
    kwargs = dict(
        causal_block_size=1 if spec["causal"] else None,
        query_chunk_size=chunk,
        key_chunk_size=chunk,
        deterministic=True,
        dropout_rng=None,
        attn_pdrop=0.0,
        dtype=jnp.float32,
        policy=jax.checkpoint_policies.nothing_saveable,
        precision=None,
        prevent_cse=True,
    )
    attend = jax.shard_map(
        lambda q, k, v: ringattention(q, k, v, None, None, None, "sp", True, kwargs),
        mesh=mesh,
        in_specs=(spec_,) * 3,
        out_specs=spec_,
        check_vma=False,
    )

    def step(q, k, v, dout):
        if not spec["backward"]:
            return (attend(q, k, v),)
        out, vjp = jax.vjp(attend, q, k, v)
        return (out, *vjp(dout))

    args = [jax.device_put(_load(spec, x), NamedSharding(mesh, spec_)) for x in "qkvg"]
    fn = jax.jit(step).lower(*args).compile()
    times = []
    for i in range(1 + spec["repeats"]):
        t0 = time.perf_counter()
        res = jax.block_until_ready(fn(*args))
        if i:
            times.append(time.perf_counter() - t0)
    _save(spec, "jax", dict(zip(("out", "dq", "dk", "dv"), res, strict=False)))
    return {"times": times, "rss": [maxrss_bytes()], "rss_start": [rss0]}


def _rap_rank(rank: int, spec: dict, init_file: str, answers) -> None:
    import torch
    import torch.distributed as dist

    try:
        if len(os.sched_getaffinity(0)) >= HOSTS:
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})
        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=rank, world_size=HOSTS
        )
        from ring_attention_pytorch import ring_flash_attn

        rss0 = maxrss_bytes()
        q, k, v, dout = (torch.from_numpy(_load(spec, x, rank)) for x in "qkvg")
        times = []
        for i in range(1 + spec["repeats"]):
            qr, kr, vr = (x.clone().requires_grad_(spec["backward"]) for x in (q, k, v))
            dist.barrier()
            time.sleep(
                0.02
            )  # as kernels.distributed.repeats.start_line: let the barrier's threads settle
            t0 = time.perf_counter()
            out = ring_flash_attn(
                qr,
                kr,
                vr,
                causal=spec["causal"],
                bucket_size=spec["rap_bucket"],
                ring_reduce_col=True,
            )
            if spec["backward"]:
                out.backward(dout)
            if i:
                times.append(time.perf_counter() - t0)
        arrays = {"out": out.detach()}
        if spec["backward"]:
            arrays.update(dq=qr.grad, dk=kr.grad, dv=vr.grad)
        _save(spec, f"ring-attention-pytorch-rank{rank}", {k: x.numpy() for k, x in arrays.items()})
        dist.destroy_process_group()
        answers.put((rank, {"times": times, "rss": maxrss_bytes(), "rss_start": rss0}))
    except BaseException as err:
        answers.put((rank, {"error": f"{type(err).__name__}: {err}"}))


def rap_worker(spec: dict) -> dict:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    answers = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(target=_rap_rank, args=(r, spec, f"{tmp}/init", answers))
            for r in range(HOSTS)
        ]
        for p in procs:
            p.start()
        got = dict(answers.get(timeout=1800) for _ in procs)
        for p in procs:
            p.join(timeout=30)
    errors = [f"rank {r}: {a['error']}" for r, a in got.items() if "error" in a]
    if errors:
        raise RuntimeError("; ".join(errors))
    if spec["save"]:  # per-rank blocks -> the whole sequence
        out = Path(spec["outputs"])
        for key in ("out", "dq", "dk", "dv")[: 4 if spec["backward"] else 1]:
            parts = [f"ring-attention-pytorch-rank{r}-{key}.npy" for r in range(HOSTS)]
            whole = np.concatenate([np.load(out / p) for p in parts], axis=2)
            np.save(out / f"ring-attention-pytorch-{key}.npy", whole)
    ranks = [got[r] for r in range(HOSTS)]
    return {
        "times": [max(t) for t in zip(*(a["times"] for a in ranks), strict=True)],
        "rss": [a["rss"] for a in ranks],
        "rss_start": [a["rss_start"] for a in ranks],
    }


WORKERS = {"jax": jax_worker, "ring-attention-pytorch": rap_worker}

if __name__ == "__main__":
    print(json.dumps(WORKERS[sys.argv[1]](json.loads(sys.argv[2]))))
