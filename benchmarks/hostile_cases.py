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
