"""One notation and one glossary for every lesson: ``notation(...)`` opens a lesson with
the symbols and terms it uses; ``notation_page()`` is ``lessons/notation.md``."""

from __future__ import annotations

import re

from ringsim.views.lessons.text import Markdown

# symbol (TeX, as the lessons write it between $...$) -> what it means, in every lesson
NOTATION = {
    "P": "hosts (devices) the sequence is split over",
    "N": "sequence length in tokens",
    "c": "tokens per host, the block a host owns: $c = N/P$",
    "r": "a host's index (its rank), $0 \\ldots P-1$",
    "s": "a ring step, $0 \\ldots P-1$ (the backward adds one more hop)",
    "H": "query (attention) heads",
    "H_{kv}": "key/value heads; $H_{kv} < H$ is grouped-query attention",
    "d": "head dimension (128 in most models here)",
    "d_{model}": "hidden size, $H d$",
    "d_{ff}": "the feed-forward network's hidden width, wider than $d_{model}$ (2.7 to 3.5 "
    "times in the models here)",
    "L": "layers",
    "b": "batch: sequences processed together",
    "e": "bytes per element: 2 in bf16, 4 in fp32",
    "F": "FLOP/s one device sustains",
    "B": "link bandwidth, bytes/s in one direction",
    "\\alpha": "latency of one message (seconds)",
    "c^*": "overlap threshold: the smallest block whose compute hides its transfer, "
    "$F/B$ for full blocks, about $2F/B$ for balanced causal layouts",
    "T": "kernel tile (tokens), e.g. 128",
    "U, R": "Ulysses degree and ring degree of a hybrid, $P = U R$",
    "q, k, v": "one token's query, key and value vectors (rows of $Q, K, V$)",
    "m, \\ell, a": "a partial's running max, running sum and unnormalised output",
    "\\mathrm{lse}": "log-sum-exp of a row's scores, $m + \\log \\ell$",
    "o, O": "attention output (normalised), one row and the whole block",
    "dO": "gradient of the loss with respect to the output",
    "\\delta": "the backward's per-row constant $\\mathrm{rowsum}(dO \\circ O)$",
}

# term -> its definition (plain words; a term is written as the lessons write it)
GLOSSARY = {
    "1M, 1K (tokens)": "token counts use powers of two, as the `ringsim` command line does: "
    "1K = 1,024 and 1M = $2^{20}$ = 1,048,576 tokens. A lesson that means $10^6$ says so "
    "(lesson 1 checks quotes that use $10^6$). Bytes use decimal units: 1 GB = $10^9$ bytes, "
    "1 GiB = $2^{30}$.",
    "all-gather": "a collective in which every host ends with every host's block; all-gather "
    "context parallelism (Llama 3) gathers all keys and values before attention.",
    "all-to-all": "a collective in which every host sends a different share to every other "
    "host; Ulysses uses two to turn a split by tokens into a split by heads and back.",
    "bf16": "bfloat16: 16-bit floats with fp32's exponent range and 8 significant bits, so "
    "one rounding changes a number by at most $2^{-8}$ = 0.39%.",
    "fp32, fp16": "32-bit floats (24 significant bits) and 16-bit IEEE floats.",
    "causal mask": "a query sees only the keys at or before its own position (decoders).",
    "checkpointing": "gradient checkpointing: the forward keeps only each layer's input per "
    "token, and the backward recomputes the rest.",
    "context parallelism (CP)": "splitting one sequence over devices; the ring, Ulysses and "
    "all-gather are three ways to do it.",
    "DP, TP, PP": "data parallelism (whole sequences per device), tensor parallelism (a "
    "layer's matrices split over devices), pipeline parallelism (layers split).",
    "FA2, FA3 (FA)": "the FlashAttention-2 and FlashAttention-3 kernels (FA: FlashAttention).",
    "FFN": "the feed-forward network of a transformer layer, position-wise.",
    "GEMM": "general matrix multiply: the matmuls of a layer's projections and "
    "feed-forward network and of the output head; its rate depends on its shape.",
    "FLOP, GFLOP, TFLOP": "floating-point operations; GFLOP = $10^9$ and TFLOP = $10^{12}$ "
    "of them, and per second (GFLOP/s, TFLOP/s) the rate a device sustains.",
    "FSDP": "Fully Sharded Data Parallel: weights, gradients and optimizer state are "
    "sharded over all devices; each layer's weights are gathered just before they are used.",
    "gloo": "PyTorch's collective backend for CPUs (over TCP); the lessons' real ring uses it "
    "when there is no GPU.",
    "GQA, MHA": "grouped-query attention ($H$ query heads share $H_{kv} < H$ key/value heads) "
    "and multi-head attention ($H_{kv} = H$).",
    "HBM": "high-bandwidth memory: a GPU's device memory (80 GB on an A100 or H100), read at "
    "2-5 TB/s.",
    "it/s": "iterations per second, a benchmark's throughput.",
    "KV cache (KV)": "the keys and values (KV) of every past token, kept by a decoder for "
    "each layer.",
    "NCCL": "NVIDIA's collective communication library: all-reduce, all-to-all, send and "
    "receive between GPUs.",
    "NIC, InfiniBand": "the network card of a GPU (one per GPU on DGX nodes) and the network "
    "between nodes, 12.5-50 GB/s each way.",
    "NVLink, NVSwitch": "the links between the GPUs of one node (200-450 GB/s each way per "
    "GPU) and the switch that connects them all.",
    "PCIe": "the bus between a GPU and its host CPU; GPUs without NVLink exchange data over "
    "it (31.5 GB/s for a Gen 4 x16 link).",
    "prefill, decode": "serving reads the whole prompt at once (prefill, compute-bound), then "
    "generates one token at a time (decode, bound by reading the KV cache).",
    "SM": "streaming multiprocessor, one of a GPU's ~100 compute units; NCCL's kernels "
    "occupy some of them while attention runs.",
    "striped, zigzag, contiguous": "how tokens are dealt to hosts: contiguous chunks; round "
    "robin; or $2P$ chunks with host $r$ taking chunks $r$ and $2P-1-r$ (lesson 6).",
    "SDPA": "PyTorch's `scaled_dot_product_attention`, which dispatches to a fused (flash or "
    "memory-efficient) attention kernel.",
    "TransformerEngine (TE)": "NVIDIA's library of fused transformer layers, whose attention "
    "implements the context parallelism Megatron-LM uses.",
    "Ulysses": "DeepSpeed-Ulysses: an all-to-all re-shards from tokens to heads, each host "
    "computes whole heads, a second all-to-all shards back.",
    "hybrid, double ring": "Ulysses over $U$ hosts times a ring over $R$ (USP), and a ring "
    "of rings, one inside each node and one across (LoongTrain).",
}


def _anchor(term: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", term.lower()).strip("-")


def notation(*symbols: str, terms: tuple[str, ...] = ()) -> Markdown:
    """A folded box with the symbols (keys of ``NOTATION``) and terms (keys of ``GLOSSARY``)
    a lesson uses, each defined as on the book's notation page, which it links."""
    unknown = [x for x in symbols if x not in NOTATION] + [t for t in terms if t not in GLOSSARY]
    if unknown:
        raise ValueError(f"notation: unknown symbols or terms {unknown}; see NOTATION, GLOSSARY")
    lines = ["<details><summary>Notation and terms used in this lesson</summary>\n"]
    if symbols:
        lines += ["| symbol | meaning |", "| --- | --- |"]
        lines += [f"| ${x}$ | {NOTATION[x]} |" for x in symbols]
        lines.append("")
    if terms:
        lines += ["| term | meaning |", "| --- | --- |"]
        lines += [f"| {t} | {GLOSSARY[t]} |" for t in terms]
        lines.append("")
    lines.append("Every lesson uses the same symbols: [the notation page](notation.md).\n")
    lines.append("</details>\n")
    return Markdown("\n".join(lines))


def notation_page() -> str:
    """The book's notation page (``lessons/notation.md``): every symbol and term."""
    lines = [
        "# Notation and glossary",
        "",
        "One meaning per symbol, in every lesson. Each lesson opens with a folded box of the "
        "symbols and terms it uses, taken from this table (`ringsim.views.lessons`"
        ".`NOTATION` and `GLOSSARY`).",
        "",
        "## Symbols",
        "",
        "| symbol | meaning |",
        "| --- | --- |",
        *(f"| ${x}$ | {meaning} |" for x, meaning in NOTATION.items()),
        "",
        "## Terms",
        "",
        "| term | meaning |",
        "| --- | --- |",
        *(f"| {t} | {meaning} |" for t, meaning in GLOSSARY.items()),
        "",
    ]
    return "\n".join(lines)
