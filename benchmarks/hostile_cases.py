"""Bad flags of ``ringsim measure`` and ``ringsim calibrate``, each with a text its one-line
refusal must contain: one table for the in-process regression tests (``tests/test_hostile.py``)
and the subprocess sweep (``benchmarks/hostile_sweep.py``). Every case is refused before any
rank starts, on any machine (the GPU-only ``--backend`` cases live in the sweep, which runs on
CPU machines)."""

MEASURE_BAD = [
    (["--hosts", "0"], "--hosts"),
    (["--hosts", "-1"], "--hosts"),
    (["--hosts", "1"], "--hosts"),
    (["--hosts", "3"], "hosts = 3"),
    (["--layout", "zigzag", "--seq-len", "6"], "seq_len=6"),
    (["--heads", "0"], "--heads"),
    (["--head-dim", "0"], "--head-dim"),
    (["--kv-heads", "3"], "kv_heads=3"),
    (["--repeats", "0"], "--repeats"),
    (["--threads", "0"], "--threads"),
    (["--seq-len", "12Q"], "12Q"),
    (["--hosts", "64", "--seq-len", "64K"], "--hosts 64"),  # more ranks than cores allow
    (["--seq-len", "1G"], "GB"),  # more memory than the machine has
    (["--trace", "/etc/passwd/x"], "--trace"),
    (["--trace", ""], "--trace"),
    # issue 34: a device that never ends is not read; more threads than cores never start
    (["--seq-len", "256", "--calibration", "/dev/zero"], "not a regular file"),
    (["--seq-len", "256", "--threads", "100000"], "--threads 100000"),
    (["--seq-len", "256", "--hosts", "0", "--json"], "--hosts"),  # the error is JSON
]

CALIBRATE_BAD = [
    (["--hosts", "0"], "--hosts"),
    (["--hosts", "1"], "--hosts"),
    (["--heads", "0"], "--heads"),
    (["--repeats", "0"], "--repeats"),
    (["--threads", "0"], "--threads"),
    (["--hosts", "100"], "--hosts 100"),
    (["--out", "/etc/passwd/x.json"], "--out"),
    (["--out", ""], "--out"),
    (["--out", "."], "folder"),
    (["--out", "/tmp"], "folder"),
    (["--out", "profile.txt"], ".txt"),
    (["--threads", "100000"], "--threads 100000"),  # issue 34
    (["--no-save", "--out", "p.json"], "--no-save"),  # issue 34: an --out never written
]

EIGHT = ["--seq-len", "64K", "--hosts", "8"]
TWO_NODES = ["--seq-len", "64K", "--cluster", "dgx-h100", "--nodes", "2"]

# `ringsim plan` (issue 26 cases 1, 2, 5-10, and the planner's own flags): refused before any
# work or at the first non-finite time, one line naming the flag. Each argv follows
# `plan --model 7b`.
PLAN_BAD = [
    (["--seq-len", "1G", "--hosts", "1073741824"], "hosts=1073741824"),
    (
        [
            "--seq-len",
            "128K",
            "--cluster",
            "dgx-h100",
            "--nodes",
            "4096",
            "--global-batch",
            "1",
            "--pp",
            "1",
        ],
        "4,096",
    ),
    (
        ["--seq-len", "64K", "--hosts", "8", "--hardware", "h100-nvlink", "--flops", "1e-300"],
        "--flops",
    ),
    (
        [
            "--seq-len",
            "64K",
            "--hosts",
            "8",
            "--hardware",
            "h100-nvlink",
            "--flops",
            "1e-300",
            "--json",
        ],
        "--flops",
    ),
    (
        ["--seq-len", "64K", "--hosts", "8", "--hardware", "h100-nvlink", "--bandwidth", "1e-300"],
        "--bandwidth",
    ),
    (
        [
            "--seq-len",
            "64K",
            "--hosts",
            "8",
            "--hardware",
            "h100-nvlink",
            "--bandwidth",
            "1e-300",
            "--json",
        ],
        "--bandwidth",
    ),
    (["--seq-len", "64K", "--hosts", "8", "--latency", "1e308"], "--latency"),
    (["--seq-len", "64K", "--hosts", "8", "--latency", "1e308", "--json"], "--latency"),
    (
        ["--seq-len", "64K", "--cluster", "dgx-h100", "--nodes", "2", "--inter-latency", "1e308"],
        "--inter-latency",
    ),
    (
        [
            "--seq-len",
            "64K",
            "--cluster",
            "dgx-h100",
            "--nodes",
            "2",
            "--inter-latency",
            "1e308",
            "--json",
        ],
        "--inter-latency",
    ),
    (["--seq-len", "64K", "--hosts", "8", "--global-batch", "0"], "global_batch"),
    (["--seq-len", "64K", "--hosts", "8", "--tokens-per-step", "96K"], "--tokens-per-step"),
    (["--seq-len", "64K", "--hosts", "8", "--tp", "16"], "tp=16"),
    (["--seq-len", "64K", "--hosts", "8", "--pp", "64"], "pp=64"),
    (["--seq-len", "64K", "--hosts", "8", "--pp", "-1"], "--pp"),
    (["--seq-len", "64K", "--hosts", "8", "--virtual-stages", "0"], "--virtual-stages"),
    (["--seq-len", "64K", "--hosts", "8", "--recompute", "half"], "--recompute"),
    (["--seq-len", "64K", "--hosts", "8", "--sharding", "zero2"], "--sharding"),
    (["--seq-len", "64K", "--hosts", "8", "--gemm-dtype", "fp4"], "--gemm-dtype"),
    (
        ["--seq-len", "64K", "--hosts", "8", "--hardware", "a100-nvlink", "--gemm-dtype", "fp8"],
        "fp8",
    ),
    (["--seq-len", "64K", "--hosts", "8", "--flops-convention", "kaplan"], "--flops-convention"),
    (["--seq-len", "64K", "--hosts", "8", "--keep", "0"], "--keep"),
    (["--seq-len", "64K", "--hosts", "8", "--top", "0"], "--top"),
    (["--seq-len", "64K", "--hosts", "8", "--plot", "/etc/passwd/x.png"], "--plot"),
    (["--seq-len", "64K", "--hosts", "8", "--plot", "plan.txt"], "--plot"),
    # issue 34: schedules Megatron-LM cannot run, and flags that would change nothing
    *(
        ([*EIGHT, *a], named)
        for a, named in (
            (["--pp", "2", "--virtual-stages", "1000", "--global-batch", "8"], "=1000"),
            (["--pp", "4", "--virtual-stages", "3"], "virtual_stages=3"),
            (["--pp", "4", "--virtual-stages", "3", "--json"], "virtual_stages=3"),
            (["--pp", "4", "--virtual-stages", "2", "--global-batch", "1"], "multiple of pp=4"),
            (["--pp", "1", "--virtual-stages", "2"], "--virtual-stages 2"),
            (["--prefill", "--recompute", "full"], "--recompute"),
        )
    ),
    ([*TWO_NODES, "--latency", "1e-3"], "--latency"),
    ([*TWO_NODES, "--bandwidth", "1G", "--json"], "links replace"),
]


# Issue 26: what the strategies cannot run (refused up front, naming the size), flags that would
# change nothing, and output paths where nothing can be written; each ``ringsim argv``, exit 2
# with one line naming the text given (``simulate`` at 1M hosts answered in seconds).
SIM = ["simulate", "--hosts", "8", "--seq-len", "64K"]
HUGE = ["simulate", "--hosts", "1048576", "--seq-len", "1G"]
HYBRID = [*SIM, "--strategy", "hybrid"]
STRATEGY_BAD = [
    ([*HUGE, "--strategy", "double-ring", "--window", "1024"], "hosts=1048576"),  # case 3
    ([*HUGE, "--strategy", "allgather"], "hosts=1048576"),  # case 4
    ([*HUGE, "--strategy", "ulysses", "--heads", "1048576"], "hosts=1048576"),
    ([*HUGE, "--strategy", "hybrid", "--ulysses-degree", "8", "--kv-heads", "8"], "hosts=1048576"),
    (["simulate", "--hosts", "16384", "--seq-len", "1M", "--strategy", "double-ring"], "memory"),
    ([*SIM, "--window", "4"], "--window"),
    ([*SIM, "--strategy", "allgather", "--window", "4"], "--window"),
    ([*SIM, "--recompute"], "--recompute"),
    ([*SIM, "--pass", "backward", "--recompute"], "--recompute"),
    ([*SIM, "--placement", "ring-inner"], "--placement"),
    ([*HYBRID, "--ulysses-degree", "8", "--placement", "ring-inner"], "--placement"),
    ([*SIM, "--implementation", "torch"], "--implementation torch"),
    ([*SIM, "--implementation", "torch", "--hardware", "h100-nvlink"], "--implementation torch"),
]
OUTPUT_BAD = [
    (["validate", "--plot", "/proc/v.png"], "--plot"),
    (["validate", "--plot", "/sys/v.png"], "--plot"),
    (["validate", "--plot", "/proc/new/v.png"], "--plot"),
    ([*SIM, "--trace", "/proc/t.json"], "--trace"),
    ([*SIM, "--plot", "/sys/t.png"], "--plot"),
    (["sweep", "--vary", "block", "--plot", "/proc/s.png"], "--plot"),
    (["memory", "--model", "7b", "--hosts", "8", "--json"], ""),  # writes nothing: exit 0
    (["demo", "--plot", "/proc/d.png", "--json"], "/proc/d.png"),
]


# Issue 34: sizes refused before any work (a label per ring step was built before the size
# check: gigabytes, then a MemoryError), flags that would change nothing, errors as JSON under
# --json; each ``ringsim argv``, exit 2 and one line naming the text.
ISSUE34_BAD = [
    (["simulate", "--hosts", "268435456", "--seq-len", "256M"], "hosts=268435456"),
    (["sweep", "--vary", "hosts", "--values", "1099511627776"], "hosts=1099511627776"),
    ([*SIM, "--interval"], "--interval"),
    ([*SIM, "--cluster", "dgx-h100", "--latency", "1e-3"], "--latency"),
    ([*SIM, "--hardware", "h100-nvlink", "--cluster", "dgx-h100", "--bandwidth", "10G"], "replace"),
    (["demo", "--no-plot", "--out", "d.png"], "--no-plot"),
    (
        [*SIM, "--strategy", "double-ring", "--gpus-per-node", "3", "--inter-bandwidth", "25G"],
        "the default window is the 3 ring members",
    ),
    (["simulate", "--hosts", "3", "--seq-len", "4K", "--json"], "hosts = 3"),
    ([*SIM, "--trace", "/dev/full", "--json"], "/dev/full"),
]


def api_cases() -> list[tuple[str, object, tuple, dict, str]]:
    """Issue 26's cases 11-16, ``(label, function, args, kwargs, what the ValueError says)``:
    the Python API of the new strategies refusing what the ring refuses (NumPy and ringsim are
    imported here, so the tables above stay free of them)."""
    import numpy as np

    import ringsim

    x = np.random.default_rng(0).standard_normal((2, 8, 4))
    qkv, grads = (x, x, x), (x, x, x, x)
    out, lse = ringsim.ring_attention(*qkv, hosts=2, return_lse=True)
    grid = {"hosts": 2, "ulysses_degree": 2}
    zeros, big = np.zeros((64, 4), np.float16), np.full((64, 4), 6e4, np.float16)
    return [
        (
            "hybrid causal='false'",
            ringsim.hybrid_attention,
            qkv,
            {**grid, "causal": "false"},
            "causal must be True or False",
        ),
        (
            "ulysses causal='false'",
            ringsim.ulysses_attention,
            qkv,
            {"hosts": 2, "causal": "false"},
            "causal must be True or False",
        ),
        (
            "allgather causal='false'",
            ringsim.allgather_attention,
            qkv,
            {"hosts": 2, "causal": "false"},
            "causal must be True or False",
        ),
        (
            "double ring causal='false'",
            ringsim.double_ring_attention,
            qkv,
            {"hosts": 2, "window": 1, "causal": "false"},
            "causal must be True or False",
        ),
        (
            "hybrid backward causal=0",
            ringsim.hybrid_attention_backward,
            grads,
            {**grid, "causal": 0},
            "causal must be True or False",
        ),
        (
            "ring backward, out cut short",
            ringsim.ring_attention_backward,
            grads,
            {"hosts": 2, "out": out[:, :4], "lse": lse},
            "out must have the shape of q",
        ),
        (
            "ring backward, lse cut short",
            ringsim.ring_attention_backward,
            grads,
            {"hosts": 2, "out": out, "lse": lse[:, :3]},
            "lse must be a float array of shape",
        ),
        (
            "ring return_lse='no'",
            ringsim.ring_attention,
            qkv,
            {"hosts": 2, "return_lse": "no"},
            "return_lse must be True or False",
        ),
        (
            "hybrid return_lse='no'",
            ringsim.hybrid_attention,
            qkv,
            {**grid, "return_lse": "no"},
            "return_lse must be True or False",
        ),
        (
            "float16 dv past 65504",
            ringsim.allgather_attention_backward,
            (zeros, zeros, big, big),
            {"hosts": 2, "causal": True},
            "dv overflowed in float16",
        ),
    ]


def api_issue34_cases() -> list[tuple[str, object, tuple, dict, str]]:
    """Issue 34's Python API cases, as ``api_cases``: each a one-line ``ValueError`` naming the
    argument and the limit, before any work."""
    import ringsim
    from ringsim.files import read_json_object
    from ringsim.timer import RingConfig, simulate
    from ringsim.timer.step.models import ModelSpec
    from ringsim.timer.studies.planner import plan

    dgx = ringsim.get_cluster("dgx-h100")
    hw = ringsim.get_hardware("a100-nvlink")
    plan_args = ("7b", 65536, dgx, 8)
    return [
        ("plan keep=0", plan, plan_args, {"keep": 0}, "keep must be a positive integer"),
        ("plan tp=2.0", plan, plan_args, {"tp": 2.0}, "tp must be a positive integer"),
        ("plan cluster=42", plan, ("7b", 65536, 42, 8), {}, "cluster must be a Cluster"),
        ("plan keep=True", plan, plan_args, {"keep": True}, "keep must be a positive integer"),
        ("ModelSpec heads=0", ModelSpec, ("m", 2, 256, 0, 512), {}, "heads must be a positive"),
        ("ModelSpec ffn_hidden=-1", ModelSpec, ("m", 2, 256, 4, -1), {}, "ffn_hidden must be"),
        ("ModelSpec vocab=0", ModelSpec, ("m", 2, 256, 4, 512), {"vocab": 0}, "vocab must be"),
        ("ModelSpec layers=2.5", ModelSpec, ("m", 2.5, 256, 4, 512), {}, "layers must be"),
        ("ModelSpec kv_heads=3", ModelSpec, ("m", 2, 256, 4, 512), {"kv_heads": 3}, "kv_heads"),
        (
            "simulate 2^40 hosts",
            lambda: simulate(RingConfig(hosts=2**40, seq_len=2**40, hardware=hw)),
            (),
            {},
            "hosts=1099511627776 is too many",
        ),
        ("read /dev/zero", read_json_object, ("/dev/zero",), {}, "not a regular file"),
    ]


OBJECT_COLLECTIVE = r"\b(all_gather|gather|broadcast|scatter|send|recv)_object(_list)?\("
"""torch.distributed's collectives that pickle what a rank sends and unpickle what it gets."""


def object_collective_calls(root) -> list[str]:
    """``file:line`` of every call of an ``OBJECT_COLLECTIVE`` under ``root``/kernels."""
    import re

    pattern = re.compile(OBJECT_COLLECTIVE)
    return [
        f"{path.relative_to(root)}:{n}"
        for path in sorted((root / "kernels").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
