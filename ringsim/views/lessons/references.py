"""One place for the papers the lessons cite, and the "References" section each ends with."""

from __future__ import annotations

from ringsim.views.lessons.text import Markdown

# One place for the papers the lessons cite: key -> (authors, title, venue/year, link).
REFERENCES = {
    "ring": (
        "Liu, Zaharia, Abbeel",
        "Ring Attention with Blockwise Transformers for Near-Infinite Context",
        "2023",
        "https://arxiv.org/abs/2310.01889",
    ),
    "bpt": (
        "Liu, Abbeel",
        "Blockwise Parallel Transformer for Large Context Models",
        "2023",
        "https://arxiv.org/abs/2305.19370",
    ),
    "flash": (
        "Dao, Fu, Ermon, Rudra, Ré",
        "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
        "2022",
        "https://arxiv.org/abs/2205.14135",
    ),
    "flash2": (
        "Dao",
        "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
        "2023",
        "https://arxiv.org/abs/2307.08691",
    ),
    "flash3": (
        "Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao",
        "FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision",
        "2024",
        "https://arxiv.org/abs/2407.08608",
    ),
    "online_softmax": (
        "Milakov, Gimelshein",
        "Online normalizer calculation for softmax",
        "2018",
        "https://arxiv.org/abs/1805.02867",
    ),
    "striped": (
        "Brandon, Nrusimha, Qian, Ankner, Jin, Song, Ragan-Kelley",
        "Striped Attention: Faster Ring Attention for Causal Transformers",
        "2023",
        "https://arxiv.org/abs/2311.09431",
    ),
    "ulysses": (
        "Jacobs, Tanaka, Zhang, Zhang, Song, Rajbhandari, He",
        "DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme Long "
        "Sequence Transformer Models",
        "2023",
        "https://arxiv.org/abs/2309.14509",
    ),
    "llama3": (
        "Llama Team, AI @ Meta",
        "The Llama 3 Herd of Models",
        "2024",
        "https://arxiv.org/abs/2407.21783",
    ),
    "memory_efficient": (
        "Rabe, Staats",
        "Self-attention Does Not Need O(n²) Memory",
        "2021",
        "https://arxiv.org/abs/2112.05682",
    ),
    "playbook": (
        "Tazi, Mom, Zhao, Nguyen, Mekkouri, Werra, Wolf",
        "The Ultra-Scale Playbook: Training LLMs on GPU Clusters (context parallelism)",
        "Hugging Face, 2025",
        "https://huggingface.co/spaces/nanotron/ultrascale-playbook",
    ),
    "ring_flash_attention": (
        "Zhu",
        "ring-flash-attention: ring attention on top of flash-attention (RingComm, zigzag "
        "and llama3 varlen variants)",
        "GitHub, 2024",
        "https://github.com/zhuzilin/ring-flash-attention",
    ),
    "torch_cp": (
        "PyTorch",
        "Introduction to Context Parallel (torch.distributed.tensor.experimental)",
        "tutorial, 2025",
        "https://docs.pytorch.org/tutorials/prototype/context_parallel.html",
    ),
    "megatron_cp": (
        "NVIDIA",
        "Megatron Core: context parallelism (with TransformerEngine's attention)",
        "developer guide",
        "https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/context_parallel.html",
    ),
    "usp": (
        "Fang, Zhao",
        "USP: A Unified Sequence Parallelism Approach for Long Context Generative AI",
        "2024",
        "https://arxiv.org/abs/2405.07719",
    ),
    "loongtrain": (
        "Gu et al.",
        "LoongTrain: Efficient Training of Long-Sequence LLMs with Head-Context Parallelism",
        "2024",
        "https://arxiv.org/abs/2406.18485",
    ),
    "ml_engineering": (
        "Bekman",
        "Machine Learning Engineering: network (NVLink, PCIe and InfiniBand rates)",
        "GitHub",
        "https://github.com/stas00/ml-engineering/tree/master/network",
    ),
    "fire_flyer": (
        "DeepSeek-AI",
        "Fire-Flyer AI-HPC: A Cost-Effective Software-Hardware Co-Design for Deep Learning",
        "2024",
        "https://arxiv.org/abs/2408.14158",
    ),
    "nemo_long": (
        "NVIDIA",
        "NeMo Framework: Long Sequence Performance (Llama 2 7B in FP8, 16K to 1M tokens)",
        "documentation, NeMo 24.03.01",
        "https://docs.nvidia.com/nemo-framework/user-guide/24.12/nemotoolkit/performance/"
        "performance_long_sequence.html",
    ),
    "transformer_engine": (
        "NVIDIA",
        "TransformerEngine: attention with context parallelism (context_parallel.py)",
        "GitHub",
        "https://github.com/NVIDIA/TransformerEngine",
    ),
    "scaling_book": (
        "Austin et al.",
        "How to Scale Your Model (the jax-ml scaling book)",
        "2025",
        "https://jax-ml.github.io/scaling-book/",
    ),
}


def references(*keys: str, notes: dict[str, str] | None = None) -> Markdown:
    """A "References" section: linked titles from ``REFERENCES``, each with an optional note
    on what the lesson took from it. Links only: nothing is fetched, the book reads offline."""
    unknown = [k for k in keys if k not in REFERENCES]
    if unknown or not keys:
        raise ValueError(f"references: unknown keys {unknown}; known: {', '.join(REFERENCES)}")
    lines = ["## References\n"]
    for key in keys:
        authors, title, year, url = REFERENCES[key]
        note = (notes or {}).get(key)
        # "Austin et al." already ends its sentence: no second full stop
        lines.append(
            f"- {authors.rstrip('.')}. [{title}]({url}). {year}." + (f" {note}" if note else "")
        )
    return Markdown("\n".join(lines) + "\n")
