"""Packed documents as Llama 3 trains them under context parallelism: all-gather, then each host
attends its contiguous slice of each document (zhuzilin/ring-flash-attention's
``llama3_flash_attn_varlen_func``; the exact executor is ``ringsim.numerics.varlen``).

The packed sequence of ``N`` tokens is cut into ``P`` contiguous slices (no padding: ``N``
need only divide by ``P``, where the zigzag and per-document rings need every document
divisible by ``2P``, ``ringsim.layouts.pad_documents``). Each host all-gathers ``k, v`` of
all ``N`` tokens (``P - 1`` blocks over the group's links, as ``allgather``), then makes one
variable-length call over its documents (``ringsim.layouts.llama3_cu_seqlens``): each
document's queries on the host against that document's keys up to the host's last query
(causal, bottom-right aligned), a sliding window cutting them further. A varlen call runs
every document's thread blocks in one grid: one fixed cost, each document's tiles timed as
its own call (``DocumentCalls``). Backward gathers again, computes, and reduce-scatters
``dk, dv`` of all ``N`` tokens. The gather is exposed (Llama 3, arXiv 2407.21783 Sec. 3.3.2):
one head chunk (``heads_k_stride`` = the kv heads). Memory per host ``~ N``: all keys and
values (``allgather_working_set_bytes``).
"""

from __future__ import annotations

import numpy as np

from ringsim.layouts import KernelCall, cu_seqlens_of, llama3_cu_seqlens, run_window_call
from ringsim.schedule import Pass
from ringsim.sharing import LLAMA3
from ringsim.timer.engine.attention import DocumentCalls
from ringsim.timer.engine.clock import HostClock
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import StrategyResult
from ringsim.timer.strategies.allgather import allgather_working_set_bytes, on_gather_links
from ringsim.timer.strategies.base import Strategy
from ringsim.timer.strategies.frame import collective, run_two_level
from ringsim.timer.strategies.pieces import Piece
from ringsim.timer.strategies.sizes import PIECE_BYTES, check_cells


def document_calls(config: RingConfig) -> list[tuple[KernelCall, ...]]:
    """Each host's calls, one per document it holds queries of (``llama3_cu_seqlens``): its
    queries of the document against the document's keys it reads, causal (bottom-right
    aligned) or full, or the band a sliding window leaves."""
    run = config.run
    P, N = run.hosts, run.seq_len
    seg = np.zeros(N, np.int64) if run.segment_ids is None else run.segment_ids
    cu, c = cu_seqlens_of(seg), N // P
    out = []
    for rank in range(P):
        sl = llama3_cu_seqlens(cu, P, rank, run.causal)
        calls = []
        for d in range(len(sl.cu_seqlens_q) - 1):
            q0 = rank * c + int(sl.cu_seqlens_q[d])
            n = int(sl.cu_seqlens_q[d + 1] - sl.cu_seqlens_q[d])
            k0 = sl.k_slice.start + int(sl.cu_seqlens_k[d])
            m = int(sl.cu_seqlens_k[d + 1] - sl.cu_seqlens_k[d])
            if run.sliding_window is not None:
                call = run_window_call(q0, n, k0, m, 1, run.sliding_window, run.causal)
            else:
                call = KernelCall(n, m, "causal-diagonal" if run.causal else "full")
            if call is not None:
                calls.append(call)
        out.append(tuple(calls))
    return out


def llama3_group(config: RingConfig, links: tuple) -> tuple[Piece, float]:
    """One group's pass (module docstring): the all-gather, the document calls, backward the
    reduce-scatter of ``dk, dv``; returns ``(Piece, FLOPs)``."""
    P, c = config.run.hosts, config.block_tokens
    clock = HostClock(config)
    labels = ["all-gather k, v", "attention to each document's gathered k, v"]
    backward = config.run.pass_ == Pass.BACKWARD
    if backward:
        labels.append("reduce-scatter dk, dv")
    part = Piece(labels, P)
    gathered = collective(
        part, 0, np.zeros(P), clock.transfer((P - 1) * config.shape.kv_bytes(c), P - 1, links)
    )
    plan = DocumentCalls(tuple(document_calls(config)), config.run.pass_)
    a = part.a
    a["cs"][1] = np.full(P, gathered)
    a["ce"][1] = a["cs"][1] + clock.attention(plan)
    if backward:
        grads = config.shape.grad_bytes(c, config.shape.grad_dtype)
        ready = np.full(P, a["ce"][1].max())
        collective(part, 2, ready, clock.transfer((P - 1) * grads, P - 1, links))
    return part, float(plan.flops(config).sum())


class Llama3Varlen(Strategy):
    record = LLAMA3
    uses_layout = False  # always the contiguous slices
    documents_only = True  # without documents it is the all-gather of a contiguous split

    def degree(self, config: RingConfig, ulysses_degree: int | None) -> int:
        if ulysses_degree not in (None, 1):
            raise ValueError(
                f"ulysses_degree must be 1 for llama3 (all-gather per document over all "
                f"hosts), got {ulysses_degree}"
            )
        return 1

    def runs(self, ulysses: int, ring: int) -> bool:
        return ulysses == 1 and ring > 1

    def check_fits(self, config, grid, cluster, window) -> None:
        P = config.run.hosts
        check_cells(grid, "llama3", cells=P * P, nbytes=PIECE_BYTES * 3 * P)

    def run(self, config, grid, cluster, window, engine) -> StrategyResult:
        groups = on_gather_links(config, llama3_group)
        memory = self.working_set_bytes(config)
        return run_two_level(
            config, grid, cluster, groups, strategy=self.name, memory_bytes=memory, engine=engine
        )

    def working_set_bytes(self, config: RingConfig, ulysses_degree: int = 1) -> float:
        run = config.run
        return allgather_working_set_bytes(config.shape, run.seq_len, run.hosts, pass_=run.pass_)

    def label(self, ulysses_degree: int, ring_degree: int, placement: str) -> str:
        return self.name
