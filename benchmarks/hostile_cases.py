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
]

# `ringsim plan` (issue 26 cases 1, 2, 5-10, and the planner's own flags): refused before any
# work or at the first non-finite time, one line naming the flag. Each argv follows
# `plan --model 7b`.
PLAN_BAD = [
    (["--seq-len", "1G", "--hosts", "1073741824"], "hosts=1073741824"),
    (["--seq-len", "128K", "--cluster", "dgx-h100", "--nodes", "4096"], "4,096"),
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
]
