"""One prepared GPU check (under 8 minutes): correctness, speed, and simulated vs measured.

    python -m kernels.gpu_check [--out FILE] [--budget-s 420] [--quick]

Writes one JSON file (``--out``, else ``$OUT/gpu-<device>-<date>.json``, else ``results/``),
rewritten after every section so a timeout still leaves what was done. Sections, each guarded
(an exception is recorded in the JSON and the next section runs) and skipped when the time
budget left is below its estimate:

1. ``correctness``: the Triton forward/backward (bf16 and fp32) against torch SDPA (math
   backend in fp32) and the torch block path, causal or not, GQA, zigzag positions.
2. ``speed``: TFLOP/s of the Triton forward (and backward) against SDPA's flash and cuDNN
   backends at bf16, ``d`` in {64, 128}, ``c`` in {1K, 4K, 8K, 16K}, causal and not; a few
   tile configurations are tried first at ``d=128, c=8K`` and the best one is used.
3. ``ring_member``: one ring member emulated on one GPU. Block ``s`` is computed on one stream
   while block ``s + 1`` arrives on a second stream as a host-to-device copy from pinned
   memory (a real, bandwidth-limited link); the measured time is set against
   ``ringsim.timer.simulate`` on a profile calibrated on this GPU (``kernels.calibrate``,
   backend ``cuda``), for block sizes below and above the overlap threshold.
4. ``nccl_ring``: the full ring over NCCL if several GPUs are visible.

Nothing here has run in the session that wrote it (no GPU was lent); it is written to work the
first time and to record, rather than hide, whatever does not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path

SECTIONS = ("correctness", "speed", "ring_member", "nccl_ring")
ESTIMATES_S = {"correctness": 40, "speed": 150, "ring_member": 60, "nccl_ring": 60}


# ------------------------------------------------------------------------------------------
# Pure-Python scaffolding (tested on CPU)
# ------------------------------------------------------------------------------------------


class Budget:
    """Wall-clock budget: ``allows(estimate)`` is False once less than ``estimate`` is left."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.monotonic):
        if not (total_s > 0 and math.isfinite(total_s)):
            raise ValueError(f"budget must be a positive number of seconds, got {total_s!r}")
        self.total_s, self.clock = float(total_s), clock
        self.start = clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def allows(self, estimate_s: float) -> bool:
        return self.left() >= estimate_s


class Report:
    """The JSON document, written atomically to ``path`` after every change."""

    def __init__(self, path: Path, header: dict):
        self.path = Path(path)
        self.data = {**header, "sections": {}, "errors": {}, "skipped": {}}
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=_jsonable) + "\n")
        os.replace(tmp, self.path)

    def run(self, name: str, fn: Callable[[], dict], budget: Budget, estimate_s: float) -> None:
        """Run one section: its result, or its error, or why it was skipped."""
        if not budget.allows(estimate_s):
            self.data["skipped"][name] = (
                f"{budget.left():.0f} s left, section needs about {estimate_s:.0f} s"
            )
            self.write()
            return
        start = time.monotonic()
        try:
            result = fn()
            result["section_s"] = time.monotonic() - start
            self.data["sections"][name] = result
        except Exception as err:  # record and go on: one broken section must not lose the rest
            self.data["errors"][name] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
        self.data["elapsed_s"] = budget.elapsed()
        self.write()


def _jsonable(x):
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


def device_slug(name: str) -> str:
    """``"NVIDIA H200"`` -> ``"h200"``: short, lower case, safe in a file name."""
    name = re.sub(r"^(nvidia|amd)\s+", "", name.strip(), flags=re.IGNORECASE)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug.split("-")[0] if slug else "gpu"


def default_out(device: str, today: str | None = None) -> Path:
    today = today or date.today().isoformat()
    base = os.environ.get("OUT")
    folder = Path(base) if base else Path(__file__).resolve().parent.parent / "results"
    return folder / f"gpu-{device_slug(device)}-{today}.json"


def attention_tflops(batch, heads, c, d, seconds, *, causal: bool, backward: bool = False):
    """Achieved TFLOP/s with the usual convention: ``4 b h c^2 d`` for the forward, halved
    under a causal mask, 2.5x for the backward (``ringsim.timer.cost``)."""
    flops = 4.0 * batch * heads * c * c * d * (0.5 if causal else 1.0)
    return flops * (2.5 if backward else 1.0) / seconds / 1e12


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m kernels.gpu_check", description=__doc__)
    parser.add_argument("--out", default=None, help="JSON path (default $OUT/gpu-<dev>-<date>)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting sections")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if not (args.budget_s > 0):
        parser.error(f"--budget-s must be positive, got {args.budget_s}")
    return args


# ------------------------------------------------------------------------------------------
# Sections (need CUDA)
# ------------------------------------------------------------------------------------------


def _sdpa(q, k, v, *, causal, backend=None, mask=None):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = q.shape[1] != k.shape[1]
    if backend is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None, enable_gqa=gqa
        )
    with sdpa_kernel([getattr(SDPBackend, backend)]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def section_correctness(quick: bool) -> dict:
    """Triton vs SDPA math (fp32) and vs the torch block path; forward and backward."""
    import torch

    import ringsim
    from kernels.block import block_attention, block_attention_backward

    rows = []
    torch.manual_seed(0)
    cases = [(256, 64, 4, 4), (512, 128, 8, 2), (300, 128, 4, 1)]
    for c, d, hq, hkv in cases[:2] if quick else cases:
        for causal in (False, True):
            for dtype in (torch.bfloat16, torch.float32):
                q = torch.randn(2, hq, c, d, device="cuda", dtype=dtype)
                k = torch.randn(2, hkv, c, d, device="cuda", dtype=dtype)
                v = torch.randn(2, hkv, c, d, device="cuda", dtype=dtype)
                dout = torch.randn_like(q)
                ref_in = [x.float().detach().requires_grad_() for x in (q, k, v)]
                ref = _sdpa(*ref_in, causal=causal, backend="MATH")
                ref.backward(dout.float())
                out, lse = block_attention(q, k, v, causal=causal, backend="triton")
                grads = block_attention_backward(
                    q, k, v, dout, out, lse, causal=causal, backend="triton"
                )

                def rel(got, want):
                    return (
                        (got.float() - want).abs().max() / want.abs().max().clamp_min(1e-6)
                    ).item()

                errs = {"out": rel(out, ref)}
                for name, g, r in zip(("dq", "dk", "dv"), grads, ref_in, strict=True):
                    errs[name] = rel(g, r.grad)
                tol = 2e-2 if dtype == torch.bfloat16 else 2e-3
                rows.append(
                    {
                        "c": c, "d": d, "heads": hq, "kv_heads": hkv, "causal": causal,
                        "dtype": str(dtype), "max_rel_err": errs,
                        "ok": all(e <= tol for e in errs.values()),
                    }
                )  # fmt: skip
    # positions of a zigzag block pair (the ring's case) against the torch block path
    pos = ringsim.host_positions("zigzag", 4, 4 * 256)
    q = torch.randn(1, 4, 256, 64, device="cuda")
    k, v = torch.randn_like(q), torch.randn_like(q)
    for i, j in ((1, 1), (2, 1), (1, 3)):
        kw = dict(q_pos=pos[i], k_pos=pos[j], causal=True)
        out_t, lse_t = block_attention(q, k, v, backend="triton", **kw)
        out_r, lse_r = block_attention(q, k, v, backend="torch", **kw)
        finite = torch.isfinite(lse_r)
        lse_err = (lse_t[finite] - lse_r[finite]).abs().max().item() if finite.any() else 0.0
        rows.append(
            {
                "zigzag_pair": [i, j],
                "max_abs_err": {"out": (out_t - out_r).abs().max().item(), "lse": lse_err},
                "ok": bool(torch.equal(torch.isneginf(lse_t), torch.isneginf(lse_r)))
                and (out_t - out_r).abs().max().item() < 1e-3,
            }
        )  # fmt: skip
    return {"cases": rows, "all_ok": all(r["ok"] for r in rows)}


def _bench(fn) -> float:
    """Seconds per call (``triton.testing.do_bench``, median)."""
    import triton

    return triton.testing.do_bench(fn, warmup=10, rep=40) / 1e3


def _triton_fwd(q, k, v, causal, config=None):
    import torch

    import kernels.triton_block as triton_block
    from kernels.block_args import check_block_args

    args = check_block_args(
        q, k, v, q_pos=None, k_pos=None, causal=causal, scale=None, q_seg=None, k_seg=None
    )
    return lambda: triton_block.forward(args, torch.bfloat16, config)


def _triton_bwd(q, k, v, causal):
    import torch

    import kernels.triton_block as triton_block
    from kernels.block_args import check_block_args

    args = check_block_args(
        q, k, v, q_pos=None, k_pos=None, causal=causal, scale=None, q_seg=None, k_seg=None
    )
    out, lse = triton_block.forward(args, torch.bfloat16)
    dout = torch.randn_like(q)
    delta = (dout.float() * out.float()).sum(-1)
    return lambda: triton_block.backward(args, dout, lse, delta, torch.bfloat16)


def _sdpa_fwd_bwd(q, k, v, causal, backend):
    import torch

    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
    out = _sdpa(qg, kg, vg, causal=causal, backend=backend)
    dout = torch.randn_like(out)
    fwd = lambda: _sdpa(q, k, v, causal=causal, backend=backend)
    bwd = lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True)
    return fwd, bwd


def section_speed(quick: bool, budget: Budget) -> dict:
    import torch

    from kernels.triton_block import TileConfig

    total_tokens = 16384
    tiles = {}
    best = None
    # a small manual autotune of the forward at d=128, c=8K
    q = torch.randn(2, 16, 8192, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    for bm, bn, warps, stages in (
        (128, 64, 8, 3),
        (128, 128, 8, 3),
        (64, 64, 4, 3),
        (128, 64, 4, 4),
    ):
        cfg = TileConfig(bm, bn, warps, stages)
        try:
            t = _bench(_triton_fwd(q, k, v, False, cfg))
            tiles[f"{bm}x{bn} w{warps} s{stages}"] = attention_tflops(
                2, 16, 8192, 128, t, causal=False
            )
            if best is None or t < best[0]:
                best = (t, cfg)
        except Exception as err:  # e.g. out of shared memory for this tile
            tiles[f"{bm}x{bn} w{warps} s{stages}"] = f"{type(err).__name__}: {err}"[:300]
    best_cfg = best[1] if best else None
    rows = []
    sizes = (1024, 8192) if quick else (1024, 4096, 8192, 16384)
    for d in (64, 128):
        heads = 2048 // d  # 32 heads of 64 or 16 of 128: the same model width
        for c in sizes:
            batch = max(1, total_tokens // c)
            for causal in (False, True):
                if not budget.allows(30):
                    rows.append({"d": d, "c": c, "causal": causal, "skipped": "budget"})
                    continue
                q = torch.randn(batch, heads, c, d, device="cuda", dtype=torch.bfloat16)
                k, v = torch.randn_like(q), torch.randn_like(q)
                row = {"d": d, "c": c, "causal": causal, "batch": batch, "heads": heads}
                impls = {
                    "triton": (_triton_fwd(q, k, v, causal, best_cfg if d == 128 else None),
                               _triton_bwd(q, k, v, causal)),
                }  # fmt: skip
                for name, backend in (
                    ("sdpa_flash", "FLASH_ATTENTION"),
                    ("sdpa_cudnn", "CUDNN_ATTENTION"),
                ):
                    try:
                        impls[name] = _sdpa_fwd_bwd(q, k, v, causal, backend)
                    except Exception as err:
                        row[f"{name}_error"] = f"{type(err).__name__}: {err}"[:300]
                for name, (fwd, bwd) in impls.items():
                    for pass_, fn in (("fwd", fwd), ("bwd", bwd)):
                        try:
                            t = _bench(fn)
                            row[f"{name}_{pass_}_tflops"] = attention_tflops(
                                batch, heads, c, d, t, causal=causal, backward=pass_ == "bwd"
                            )
                        except Exception as err:
                            row[f"{name}_{pass_}_error"] = f"{type(err).__name__}: {err}"[:300]
                if "sdpa_flash_fwd_tflops" in row and "triton_fwd_tflops" in row:
                    row["triton_vs_flash_fwd"] = (
                        row["triton_fwd_tflops"] / row["sdpa_flash_fwd_tflops"]
                    )
                rows.append(row)
                del q, k, v, impls
                torch.cuda.empty_cache()
    target = [r for r in rows if r.get("d") == 128 and r.get("c") == 8192 and not r["causal"]]
    return {
        "tile_configs_tflops": tiles,
        "best_forward_tile": None if best_cfg is None else vars(best_cfg),
        "rows": rows,
        "target_fwd_vs_flash_d128_c8k": target[0].get("triton_vs_flash_fwd") if target else None,
    }


def emulate_ring_member(
    block_tokens: int, hosts: int, heads: int, head_dim: int, repeats: int = 3
) -> dict:
    """One member of a ``hosts``-ring on one GPU: compute on one stream, the next kv block
    arriving on another as a host-to-device copy from pinned memory. Returns per-step compute
    and copy intervals (ms, CUDA events) and the median total."""
    import torch

    from kernels.block import block_attention
    from kernels.ring import merge_out_lse

    dev = "cuda"
    shape = (2, 1, heads, block_tokens, head_dim)  # (k|v, batch, heads, c, d)
    q = torch.randn(1, heads, block_tokens, head_dim, device=dev, dtype=torch.bfloat16)
    incoming = [torch.randn(shape, dtype=torch.bfloat16).pin_memory() for _ in range(hosts - 1)]
    buffers = [torch.empty(shape, device=dev, dtype=torch.bfloat16) for _ in range(2)]
    buffers[0].copy_(torch.randn(shape, dtype=torch.bfloat16))
    compute_stream, copy_stream = torch.cuda.Stream(), torch.cuda.Stream()
    totals, last = [], None
    for _ in range(repeats + 1):  # the first run warms up (Triton compilation)
        ev = lambda: torch.cuda.Event(enable_timing=True)
        start = ev()
        copied = [None] + [ev() for _ in range(hosts - 1)]
        copy_start = [None] + [ev() for _ in range(hosts - 1)]
        computed = [ev() for _ in range(hosts)]
        compute_start = [ev() for _ in range(hosts)]
        torch.cuda.synchronize()
        start.record(compute_stream)
        out = torch.zeros(q.shape, device=dev, dtype=torch.float32)
        lse = torch.full(q.shape[:-1], -math.inf, device=dev)
        for s in range(hosts):
            if s + 1 < hosts:  # block s + 1 arrives while block s computes
                with torch.cuda.stream(copy_stream):
                    if s >= 1:  # its buffer held block s - 1: wait until that compute is done
                        copy_stream.wait_event(computed[s - 1])
                    copy_start[s + 1].record(copy_stream)
                    buffers[(s + 1) % 2].copy_(incoming[s], non_blocking=True)
                    copied[s + 1].record(copy_stream)
            with torch.cuda.stream(compute_stream):
                if s >= 1:
                    compute_stream.wait_event(copied[s])
                compute_start[s].record(compute_stream)
                kv = buffers[s % 2]
                part = block_attention(q, kv[0], kv[1], out_dtype=torch.float32)
                out, lse = merge_out_lse(out, lse, *part)
                computed[s].record(compute_stream)
        torch.cuda.synchronize()
        totals.append(start.elapsed_time(computed[-1]) / 1e3)
        span = lambda a, b, t0=start: (t0.elapsed_time(a), t0.elapsed_time(b))
        last = {
            "compute_ms": [span(a, b) for a, b in zip(compute_start, computed, strict=True)],
            "copy_ms": [None]
            + [span(a, b) for a, b in zip(copy_start[1:], copied[1:], strict=True)],
        }
    totals = totals[1:]
    return {"measured_time_s": sorted(totals)[len(totals) // 2], "all_s": totals, **last}


def section_ring_member(quick: bool) -> dict:
    """Calibrate this GPU (kernel rate, pinned H2D link), then emulate one ring member and
    compare with the simulator, below and above the overlap threshold."""
    from kernels.calibrate import calibrate_data
    from ringsim.timer import RingConfig, simulate
    from ringsim.timer.cost import overlap_threshold

    heads, head_dim, hosts = 8, 128, 4
    blocks = (1024, 16384) if quick else (1024, 4096, 16384, 32768)
    cal = calibrate_data(
        "cuda", heads=heads, head_dim=head_dim, dtype="bf16", sizes=sorted({512, *blocks}),
        link_bytes=[2**p for p in range(16, 29, 2)], repeats=5,
    )  # fmt: skip
    runs = []
    for c in blocks:
        hw = cal.hardware(block_tokens=c)
        measured = emulate_ring_member(c, hosts, heads, head_dim)
        sim = simulate(
            RingConfig(hosts=hosts, seq_len=hosts * c, hardware=hw, heads=heads,
                       head_dim=head_dim, dtype="bf16")
        )  # fmt: skip
        predicted = sim.summary()["total_time_s"]
        threshold = overlap_threshold(
            hw, heads=heads, kv_heads=heads, head_dim=head_dim, dtype="bf16"
        )
        runs.append(
            {
                "block_tokens": c, "hosts": hosts, "measured_time_s": measured["measured_time_s"],
                "predicted_time_s": predicted, "ratio": measured["measured_time_s"] / predicted,
                "overlap_threshold_tokens": threshold,
                "regime": "compute-bound" if c >= threshold else "communication-bound",
                "profile": hw.source, "detail": measured,
            }
        )  # fmt: skip
    return {"calibration": cal.to_json(), "runs": runs}


def section_nccl_ring(quick: bool) -> dict:
    import torch

    from kernels.launch import RunConfig, launch, run_configs, summarize_run

    gpus = torch.cuda.device_count()
    if gpus < 2:
        return {"gpus": gpus, "note": "one GPU visible: no NCCL ring (ring_member emulates one)"}
    configs = [
        RunConfig(2048 * gpus, heads=8, head_dim=128, layout=layout, causal=True,
                  dtype="bfloat16", repeats=3, warmup=1, timeout_s=120)
        for layout in ("contiguous", "zigzag")
    ]  # fmt: skip
    per_rank = launch(run_configs, gpus, args=(configs,), backend="nccl", timeout_s=120)
    return {
        "gpus": gpus,
        "runs": [summarize_run([r[i] for r in per_rank], cfg) for i, cfg in enumerate(configs)],
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    budget = Budget(args.budget_s)
    header = {"script": "kernels.gpu_check", "date": date.today().isoformat(),
              "host": platform.node(), "budget_s": args.budget_s, "quick": args.quick}  # fmt: skip
    device = "none"
    try:
        import torch
        import triton

        header.update(torch=torch.__version__, triton=triton.__version__)
        if torch.cuda.is_available():
            device = torch.cuda.get_device_name(0)
            header.update(device=device, gpus=torch.cuda.device_count(),
                          capability=list(torch.cuda.get_device_capability(0)))  # fmt: skip
    except Exception as err:
        header["import_error"] = f"{type(err).__name__}: {err}"
    report = Report(Path(args.out) if args.out else default_out(device), header)
    if device == "none":
        report.data["errors"]["device"] = "no CUDA device visible: nothing measured"
        report.write()
        print(json.dumps(report.data, indent=2, default=_jsonable))
        return 1
    chosen = args.sections.split(",")
    sections = {
        "correctness": lambda: section_correctness(args.quick),
        "speed": lambda: section_speed(args.quick, budget),
        "ring_member": lambda: section_ring_member(args.quick),
        "nccl_ring": lambda: section_nccl_ring(args.quick),
    }
    for name in SECTIONS:
        if name in chosen:
            print(f"[{budget.elapsed():6.1f} s] {name}", flush=True)
            report.run(name, sections[name], budget, ESTIMATES_S[name])
    print(f"wrote {report.path} after {budget.elapsed():.0f} s", flush=True)
    return 0 if not report.data["errors"] else 2


if __name__ == "__main__":
    raise SystemExit(main())
