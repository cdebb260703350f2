"""The sections of ``kernels.gpu.check`` that need a CUDA GPU (imported only there).

Each section returns a JSON-able dict; one bad row or case is recorded in its row (``error``)
and the others still run. Sizes and cases come from the plans in ``kernels.gpu.check``, which
``kernels.gpu.aot`` compiles ahead of time for sm_80 and sm_90.

Timing is symmetric: a Triton call is timed as the kernels a caller launches, with the host's
tile bookkeeping (``triton_block.plan``) made once outside the timed region, and the backward
including its ``delta = rowsum(dout * out)`` (SDPA's backward computes it too); an SDPA call
is timed as ``scaled_dot_product_attention`` or its autograd backward. ``do_bench`` returns the
median of its repeats (``return_mode="median"``: the default is the mean in Triton 3.6 and 3.9).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from kernels.gpu import plan as plans


def _sdpa(q, k, v, *, causal, backend=None):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = q.shape[1] != k.shape[1]
    if backend is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    with sdpa_kernel([getattr(SDPBackend, backend)]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (the tolerances' measure, as in the CPU tests)."""
    want = want.double()
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def correctness_case(c: int, d: int, hq: int, hkv: int, causal: bool, dtype: str) -> dict:
    """Triton forward/backward and SDPA (default backend, same dtype) against float64 SDPA
    (math backend) on the same rounded inputs."""
    from kernels.blocks.dispatch import block_attention, block_attention_backward

    torch.manual_seed(0)
    tdtype = getattr(torch, dtype)
    q = torch.randn(2, hq, c, d, device="cuda", dtype=tdtype)
    k = torch.randn(2, hkv, c, d, device="cuda", dtype=tdtype)
    v = torch.randn(2, hkv, c, d, device="cuda", dtype=tdtype)
    dout = torch.randn_like(q)
    exact = [x.double().requires_grad_() for x in (q, k, v)]
    ref = _sdpa(*exact, causal=causal, backend="MATH")
    ref.backward(dout.double())
    peer = [x.detach().requires_grad_() for x in (q, k, v)]
    sdpa_out = _sdpa(*peer, causal=causal)
    sdpa_out.backward(dout)
    out, lse = block_attention(q, k, v, causal=causal, backend="triton")
    grads = block_attention_backward(q, k, v, dout, out, lse, causal=causal, backend="triton")
    names = ("out", "dq", "dk", "dv")
    want = (ref, *(x.grad for x in exact))
    triton_err = {n: _rel(g, w) for n, g, w in zip(names, (out, *grads), want, strict=True)}
    sdpa_got = (sdpa_out, *(x.grad for x in peer))
    sdpa_err = {n: _rel(g, w) for n, g, w in zip(names, sdpa_got, want, strict=True)}
    tol = plans.CORRECTNESS_TOL[dtype]
    return {
        "c": c,
        "d": d,
        "heads": hq,
        "kv_heads": hkv,
        "causal": causal,
        "dtype": dtype,
        "tolerance": tol,
        "triton_max_rel_err": triton_err,
        "sdpa_max_rel_err": sdpa_err,
        "ok": all(e <= tol for e in triton_err.values()),
    }


def zigzag_case() -> list[dict]:
    """Block pairs of a zigzag ring (positions out of order): Triton against the torch path."""
    import ringsim
    from kernels.blocks.dispatch import block_attention

    c, d, heads = plans.ZIGZAG_CASE
    pos = ringsim.host_positions("zigzag", 4, 4 * c)
    q = torch.randn(1, heads, c, d, device="cuda")
    k, v = torch.randn_like(q), torch.randn_like(q)
    rows = []
    for i, j in ((1, 1), (2, 1), (1, 3)):
        kw = dict(q_pos=pos[i], k_pos=pos[j], causal=True)
        out_t, lse_t = block_attention(q, k, v, backend="triton", **kw)
        out_r, lse_r = block_attention(q, k, v, backend="torch", **kw)
        finite = torch.isfinite(lse_r)
        lse_err = (lse_t[finite] - lse_r[finite]).abs().max().item() if finite.any() else 0.0
        out_err = (out_t - out_r).abs().max().item()
        same_empty = bool(torch.equal(torch.isneginf(lse_t), torch.isneginf(lse_r)))
        rows.append(
            {
                "zigzag_pair": [i, j],
                "max_abs_err": {"out": out_err, "lse": lse_err},
                "ok": same_empty and out_err < 1e-3,
            }
        )
    return rows


def section_correctness(quick: bool) -> dict:
    rows = []
    cases = plans.CORRECTNESS_CASES[:2] if quick else plans.CORRECTNESS_CASES
    for c, d, hq, hkv in cases:
        for causal in (False, True):
            for dtype in plans.CORRECTNESS_DTYPES:
                try:
                    rows.append(correctness_case(c, d, hq, hkv, causal, dtype))
                except Exception as err:  # one broken case must not lose the others
                    rows.append(
                        {
                            "c": c,
                            "d": d,
                            "causal": causal,
                            "dtype": dtype,
                            "ok": False,
                            "error": f"{type(err).__name__}: {err}"[:500],
                        }
                    )
    try:
        rows += zigzag_case()
    except Exception as err:
        rows.append({"zigzag_pair": None, "ok": False, "error": f"{type(err).__name__}: {err}"})
    return {"cases": rows, "all_ok": all(r["ok"] for r in rows)}


# ---- speed --------------------------------------------------------------------------------


def bench(fn) -> float:
    """Seconds per call: the median of ``triton.testing.do_bench``'s repeats."""
    import triton

    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") / 1e3


def triton_calls(q, k, v, causal: bool, config=None, dout=None):
    """(forward, backward) callables: the launches only, bookkeeping made here once; the
    backward (from ``dout``, random by default) includes its ``delta``."""
    import kernels.blocks.triton_block as tb
    from kernels.blocks.args import check_block_args

    args = check_block_args(q, k, v, causal=causal)
    fwd_plan = tb.plan(args, "forward", config)
    bwd_plan = tb.plan(args, "backward")
    out, lse = tb.forward(args, q.dtype, tile_plan=fwd_plan)
    dout = torch.randn_like(q) if dout is None else dout

    def backward():
        delta = tb.row_delta(out, dout)
        return tb.backward(args, dout, lse, delta, q.dtype, tile_plan=bwd_plan)

    return (lambda: tb.forward(args, q.dtype, tile_plan=fwd_plan)), backward


def sdpa_calls(q, k, v, causal: bool, backend: str):
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
    out = _sdpa(qg, kg, vg, causal=causal, backend=backend)
    dout = torch.randn_like(out)
    return (
        lambda: _sdpa(q, k, v, causal=causal, backend=backend),
        lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True),
    )


def tile_search(head_dim: int, arch: int) -> tuple[dict, object]:
    """Time every forward tile ``kernels.blocks.tiles.tile_candidates`` offers on this arch (bf16,
    full mask, ``c = 8K``); returns TFLOP/s (or the error) per tile and the fastest tile."""
    from kernels.blocks.tiles import tile_candidates

    c = plans.TILE_SEARCH_C
    heads = plans.MODEL_WIDTH // head_dim
    q = torch.randn(
        plans.SPEED_TOKENS // c, heads, c, head_dim, device="cuda", dtype=torch.bfloat16
    )
    k, v = torch.randn_like(q), torch.randn_like(q)
    tiles, best = {}, None
    for cfg in tile_candidates(head_dim, arch):
        name = f"{cfg.block_m}x{cfg.block_n} w{cfg.num_warps} s{cfg.num_stages}"
        try:
            t = bench(triton_calls(q, k, v, False, cfg)[0])
            tiles[name] = plans.attention_tflops(q.shape[0], heads, c, head_dim, t, causal=False)
            if best is None or t < best[0]:
                best = (t, cfg)
        except Exception as err:  # recorded: e.g. out of resources on this device
            tiles[name] = f"{type(err).__name__}: {err}"[:300]
    return tiles, None if best is None else best[1]


def speed_row(d: int, c: int, causal: bool, config) -> dict:
    batch, heads = max(1, plans.SPEED_TOKENS // c), plans.MODEL_WIDTH // d
    row = {"d": d, "c": c, "causal": causal, "batch": batch, "heads": heads}
    q = torch.randn(batch, heads, c, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    impls = {}
    for name, make in (
        ("triton", lambda: triton_calls(q, k, v, causal, config)),
        ("sdpa_flash", lambda: sdpa_calls(q, k, v, causal, "FLASH_ATTENTION")),
        ("sdpa_cudnn", lambda: sdpa_calls(q, k, v, causal, "CUDNN_ATTENTION")),
    ):
        try:
            impls[name] = make()
        except Exception as err:
            row[f"{name}_error"] = f"{type(err).__name__}: {err}"[:300]
    for name, (fwd, bwd) in impls.items():
        for pass_, fn in (("fwd", fwd), ("bwd", bwd)):
            try:
                row[f"{name}_{pass_}_tflops"] = plans.attention_tflops(
                    batch, heads, c, d, bench(fn), causal=causal, backward=pass_ == "bwd"
                )
            except Exception as err:
                row[f"{name}_{pass_}_error"] = f"{type(err).__name__}: {err}"[:300]
    for pass_ in ("fwd", "bwd"):
        for peer in ("sdpa_flash", "sdpa_cudnn"):
            mine, theirs = row.get(f"triton_{pass_}_tflops"), row.get(f"{peer}_{pass_}_tflops")
            if mine and theirs:
                row[f"triton_vs_{peer[5:]}_{pass_}"] = mine / theirs
    return row


def section_speed(quick: bool, budget) -> dict:
    arch = 10 * torch.cuda.get_device_capability(0)[0] + torch.cuda.get_device_capability(0)[1]
    searches, best = {}, {}
    for d in plans.SPEED_HEAD_DIMS:
        try:
            searches[d], best[d] = tile_search(d, arch)
        except Exception as err:
            searches[d], best[d] = f"{type(err).__name__}: {err}"[:300], None
    rows = []
    sizes = plans.SPEED_SIZES_QUICK if quick else plans.SPEED_SIZES
    for d in plans.SPEED_HEAD_DIMS:
        for c in sizes:
            for causal in (False, True):
                if not budget.allows(20):
                    rows.append({"d": d, "c": c, "causal": causal, "skipped": "budget"})
                    continue
                try:
                    rows.append(speed_row(d, c, causal, best[d]))
                except Exception as err:  # one failing row must not lose the section
                    rows.append(
                        {
                            "d": d,
                            "c": c,
                            "causal": causal,
                            "error": f"{type(err).__name__}: {err}"[:500],
                        }
                    )
                torch.cuda.empty_cache()
    targets = [
        r.get("triton_vs_flash_fwd")
        for r in rows
        if r.get("d") == 128 and r.get("c", 0) >= 4096 and not r.get("causal")
    ]
    return {
        "arch": arch,
        "tile_search_tflops": {str(d): v for d, v in searches.items()},
        "best_forward_tile": {str(d): None if b is None else vars(b) for d, b in best.items()},
        "rows": rows,
        "target": "Triton forward >= 0.9x SDPA flash at d=128, bf16, blocks >= 4K",
        "triton_vs_flash_fwd_d128_ge4k": targets,
    }


# ---- the device profile and one ring member ----------------------------------------------


def section_calibration(quick: bool) -> dict:
    """The kernel curve (bf16 block forward vs block size) and the host link (pinned H2D)."""
    from kernels.calibration.calibrate import calibrate_data

    sizes = (512, 1024, 4096, 16384) if quick else (512, 1024, 2048, 4096, 8192, 16384, 32768)
    cal = calibrate_data(
        "cuda",
        heads=plans.RING_HEADS,
        head_dim=plans.RING_HEAD_DIM,
        dtype="bf16",
        sizes=sizes,
        link_bytes=[2**p for p in range(16, 29, 2)],
        repeats=5,
    )
    return {"calibration": cal.to_json(), "profile": dataclasses.asdict(cal.hardware())}


def emulate_ring_member(
    block_tokens: int, hosts: int, heads: int, head_dim: int, repeats: int = 3
) -> dict:
    """One member of a ``hosts``-ring on one GPU: compute on one stream, the next kv block
    arriving on another as a host-to-device copy from pinned memory. Returns per-step compute
    and copy intervals (ms, CUDA events) and the median total."""
    from kernels.blocks.dispatch import block_attention
    from kernels.distributed.ring import merge_out_lse

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
        torch.cuda.synchronize()  # q and buffers[0] were written on the default stream
        start.record(compute_stream)
        copy_stream.wait_event(start)
        with torch.cuda.stream(compute_stream):  # out, lse: made on the stream that uses them
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


def section_ring_member(quick: bool, calibration: dict | None) -> dict:
    """One ring member emulated on this GPU against the simulator on the calibrated profile,
    below and above the overlap threshold."""
    from kernels.calibration.profile import Calibration
    from ringsim.timer import RingConfig, simulate
    from ringsim.timer.cost import overlap_threshold

    if calibration is None:
        raise RuntimeError("the calibration section did not run: no profile to predict with")
    cal = Calibration.from_json(calibration)
    heads, head_dim, hosts = plans.RING_HEADS, plans.RING_HEAD_DIM, plans.RING_HOSTS
    runs = []
    for c in plans.RING_BLOCKS_QUICK if quick else plans.RING_BLOCKS:
        try:
            hw = cal.hardware(block_tokens=c)
            measured = emulate_ring_member(c, hosts, heads, head_dim)
            sim = simulate(
                RingConfig(
                    hosts=hosts,
                    seq_len=hosts * c,
                    hardware=hw,
                    heads=heads,
                    head_dim=head_dim,
                    dtype="bf16",
                )
            )
            predicted = sim.summary()["total_time_s"]
            threshold = overlap_threshold(
                hw, heads=heads, kv_heads=heads, head_dim=head_dim, dtype="bf16"
            )
            runs.append(
                {
                    "block_tokens": c,
                    "hosts": hosts,
                    "measured_time_s": measured["measured_time_s"],
                    "predicted_time_s": predicted,
                    "ratio": measured["measured_time_s"] / predicted,
                    "overlap_threshold_tokens": threshold,
                    "regime": "compute-bound" if c >= threshold else "communication-bound",
                    "profile": hw.source,
                    "detail": measured,
                }
            )
        except Exception as err:
            runs.append({"block_tokens": c, "error": f"{type(err).__name__}: {err}"[:500]})
    ratios = [r["ratio"] for r in runs if "ratio" in r]
    return {"runs": runs, "target": "measured/predicted within 0.9-1.1", "ratios": ratios}


def section_nccl_ring(quick: bool, calibration: dict | None = None, traces=None) -> dict:
    """The full ring over NCCL (two or more GPUs); with ``traces`` (a folder) its zigzag run
    is also recorded by ``torch.profiler`` and compared by ``ringsim compare``'s reader and
    study (``nccl_trace``)."""
    from kernels.distributed.launch import RunConfig, launch, run_configs, summarize_run

    gpus = torch.cuda.device_count()
    if gpus < 2:
        return {"gpus": gpus, "note": "one GPU visible: no NCCL ring (ring_member emulates one)"}
    configs = [
        RunConfig(
            2048 * gpus,
            heads=plans.RING_HEADS,
            head_dim=plans.RING_HEAD_DIM,
            layout=layout,
            causal=True,
            dtype="bfloat16",
            repeats=3,
            warmup=1,
            timeout_s=120,
        )
        for layout in ("contiguous", "zigzag")
    ]
    per_rank = launch(run_configs, gpus, args=(configs,), backend="nccl", timeout_s=120)
    result = {
        "gpus": gpus,
        "runs": [summarize_run([r[i] for r in per_rank], cfg) for i, cfg in enumerate(configs)],
    }
    if traces is not None:
        try:
            result["nccl_trace"] = nccl_trace(configs[1], gpus, traces, calibration)
        except Exception as err:  # the runs above stand; say why there is no comparison
            result["nccl_trace_error"] = f"{type(err).__name__}: {err}"[:500]
    return result


def nccl_trace(config, gpus: int, folder, calibration: dict | None) -> dict:
    """``config`` on ``gpus`` NCCL ranks under ``torch.profiler`` (``rank<r>.json.gz`` in
    ``folder``), then ``compare_trace`` of the files."""
    from kernels.distributed.profiled import record_ring

    paths, _ = record_ring(config, gpus, folder, backend="nccl", gz=True)
    return compare_trace([str(p) for p in paths], config, calibration)


def compare_trace(paths: list[str], config, calibration: dict | None) -> dict:
    """The traces of a ``RunConfig``'s ring read back as a ring (``ringsim.traces.read_ring``;
    its mask and layout from ``config``: the Triton calls record neither) and, with a
    calibrated profile, compared with the same ring simulated as ``measure`` predicts it (the
    study behind ``ringsim compare``). Returns what was read and the comparison's JSON."""
    from kernels.calibration.measure import predict
    from kernels.calibration.profile import Calibration
    from kernels.calibration.report import RingShape
    from ringsim.timer.studies.compare import compare_ring
    from ringsim.traces import read_ring

    recorded = read_ring(paths, {"causal": config.causal, "layout": config.layout})
    values = recorded.shape.values
    out = {
        "files": list(paths),
        "read": {k.rstrip("_"): v for k, v in values.items()},
        "family": None if recorded.shape.family is None else recorded.shape.family.name,
        "passes_s": recorded.pass_times,
        "notes": recorded.notes,
    }
    if calibration is None:
        out["comparison"] = "no profile (the calibration section did not run): read only"
        return out
    shape = RingShape(
        hosts=recorded.hosts,
        seq_len=recorded.hosts * values["block_tokens"],
        heads=values["heads"],
        kv_heads=values["kv_heads"],
        head_dim=values["head_dim"],
        layout=values["layout"],
        causal=values["causal"],
    )
    simulated, _ = predict(Calibration.from_json(calibration), shape)  # as `measure` predicts
    out["comparison"] = compare_ring(recorded, simulated.config).to_json()
    return out
