"""What a device's chip is: the facts a kernel model asks of it, never read from a name.

An ``Arch`` says which published curves apply (``name``: the families' and GEMM tables are
keyed by it), how many streaming multiprocessors a grid of thread blocks fills (``sms``), its
CUDA compute capability, and whether it has fp8 tensor cores. A ``Hardware`` carries its
``arch``; a new GPU of a known architecture needs only its ``Hardware`` entry (or file), one of
a new architecture an ``Arch`` too (in the file, as an object of these fields). ``ARCHS`` holds
the architectures of the presets, by name, for files that name one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ringsim.checks import check_entry, check_non_negative_int


@dataclass(frozen=True)
class Arch:
    """A chip: ``name`` the architecture published curves are keyed by (``"hopper"``), ``sms``
    streaming multiprocessors (0: not a CUDA GPU), ``compute_capability`` ``(major, minor)``
    (``None``: not a CUDA GPU), ``fp8`` whether its tensor cores run fp8, ``source`` where the
    numbers come from; ``attention_kernels`` the kernel families (names of
    ``ringsim.timer.machine.families``) the frameworks call on it, the one a run gets when
    nothing names one first (``ATTENTION_KERNELS_SOURCE``; empty: none sourced, the ideal
    model)."""

    name: str
    sms: int = 0
    compute_capability: tuple[int, int] | None = None
    fp8: bool = False
    source: str = ""
    attention_kernels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"arch name must be a non-empty string, got {self.name!r}")
        check_non_negative_int("sms", self.sms)
        cc = self.compute_capability
        if cc is not None:
            if isinstance(cc, list):  # as JSON writes a pair
                cc = tuple(cc)
            ok = isinstance(cc, tuple) and len(cc) == 2
            if not ok or not all(isinstance(x, int) and not isinstance(x, bool) for x in cc):
                raise ValueError(f"compute_capability must be (major, minor), got {cc!r}")
            object.__setattr__(self, "compute_capability", cc)
        if not isinstance(self.fp8, bool):
            raise ValueError(f"fp8 must be True or False, got {self.fp8!r}")
        kernels = self.attention_kernels
        if isinstance(kernels, list):  # as JSON writes a tuple
            kernels = tuple(kernels)
        if not isinstance(kernels, tuple) or not all(isinstance(k, str) for k in kernels):
            raise ValueError(f"attention_kernels must be kernel family names, got {kernels!r}")
        object.__setattr__(self, "attention_kernels", kernels)

    @property
    def cuda(self) -> bool:
        """A CUDA GPU (it has a compute capability): PyTorch's CUDA runtime runs on it."""
        return self.compute_capability is not None


ATTENTION_KERNELS_SOURCE = (
    "PyTorch's scaled_dot_product_attention runs FlashAttention-2 by default (PyTorch 2.2 "
    "release notes; SDPBackend order flash, efficient, math); Transformer Engine picks cuDNN on "
    "Hopper (TE v1.4 attention.py l.2834-2838)"
)
"""Where ``Arch.attention_kernels`` come from (``ringsim plan`` shows it): SDPA's flash backend
is FlashAttention-2 ('FlashAttention-2 in SDPA', torch/nn/attention: FLASH_ATTENTION before
EFFICIENT_ATTENTION and MATH)."""

AMPERE = Arch(
    "ampere",
    108,
    (8, 0),
    False,
    "A100 SXM: 108 SMs, compute capability 8.0, no fp8 tensor cores (NVIDIA A100 Tensor Core "
    "GPU architecture whitepaper)",
    attention_kernels=("fa2",),
)
HOPPER = Arch(
    "hopper",
    132,
    (9, 0),
    True,
    "H100/H800/H200 SXM: 132 SMs, compute capability 9.0, fp8 tensor cores (NVIDIA H100 Tensor "
    "Core GPU architecture whitepaper; the H200 and H800 use the same GH100 die)",
    attention_kernels=("fa2", "cudnn"),
)
ADA = Arch(
    "ada",
    92,
    (8, 9),
    True,
    "L20 (AD102): 11,776 CUDA cores = 92 SMs of 128 (vendor spec pages, technical.city, "
    "topcpu.net), compute capability 8.9, fp8 tensor cores (NVIDIA Ada GPU architecture "
    "whitepaper)",
    attention_kernels=("fa2",),
)
BLACKWELL = Arch(
    "blackwell",
    148,
    (10, 0),
    True,
    "B200: 148 SMs (two dies; tile-ai/TileFoundry PR #76's B200 SXM target, "
    "0xSero/blackwell-gpu-wiki issue #2), compute capability 10.0 (CUDA C++ Programming Guide, "
    "compute capabilities), fp8 and fp4 tensor cores (NVIDIA DGX B200 datasheet)",
)
TPU = Arch(
    "tpu",
    source="Google TPU (v3, v4, v5e): matrix units, no CUDA SMs, no fp8 on these generations "
    "(Google Cloud TPU system architecture docs)",
)
CPU = Arch("cpu", source="a CPU: no SMs, no tensor cores (the calibrated torch block runs here)")

ARCHS: dict[str, Arch] = {a.name: a for a in (AMPERE, HOPPER, ADA, BLACKWELL, TPU, CPU)}
"""The architectures of the presets, by name (a hardware file may name one of these)."""


def get_arch(arch: str | Arch | dict | None) -> Arch | None:
    """``arch`` as an ``Arch``: one as is, a name of ``ARCHS``, or a dict of its fields (a
    hardware file's own architecture; one that names an architecture of ``ARCHS`` takes the
    fields it leaves out from it, as ``device_arch`` does: ``{"name": "hopper", "sms": 114}``
    is a Hopper chip with 114 SMs); ``None`` stays ``None`` (an unknown chip)."""
    if isinstance(arch, dict) and isinstance(arch.get("name"), str) and arch["name"] in ARCHS:
        known = ARCHS[arch["name"]]
        same = lambda k, v: (tuple(v) if isinstance(v, list) else v) == getattr(known, k, v)
        differs = {k: v for k, v in arch.items() if k != "source" and not same(k, v)}
        given = ", ".join(f"{k}={v!r}" for k, v in differs.items())
        source = f"{known.source}; the file gives {given}" if differs else known.source
        arch = {
            **{f: getattr(known, f) for f in Arch.__dataclass_fields__},
            "source": source,
            **arch,
        }
    return None if arch is None else check_entry("arch", arch, Arch, ARCHS)


FP8_CAPABILITY = (8, 9)
"""fp8 tensor-core MMA (``.e4m3``/``.e5m2``) needs compute capability 8.9 or later (PTX ISA,
``mma`` and ``wgmma`` element types; Ada is 8.9, Hopper 9.0)."""


def device_arch(compute_capability: tuple[int, int], sms: int, source: str = "") -> Arch:
    """The chip of a CUDA device as its runtime reports it (``torch.cuda.get_device_properties``
    : ``major``, ``minor``, ``multi_processor_count``): the known architecture of that compute
    capability with the device's own SM count (an H100 PCIe has 114, the SXM 132), else a new
    ``Arch`` named ``sm_XY`` (no published curve is keyed by it: the ideal model only)."""
    cc = tuple(compute_capability)
    for arch in ARCHS.values():
        if arch.compute_capability == cc:
            if arch.sms == sms:
                return arch
            return replace(arch, sms=sms, source=source or f"{arch.source}; {sms} SMs here")
    return Arch(f"sm_{cc[0]}{cc[1]}", sms, cc, cc >= FP8_CAPABILITY, source)
