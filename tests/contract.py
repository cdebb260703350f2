"""The JSON keys of ``ringsim simulate --json`` that DESIGN.md promises, written out once here
(not imported from the library, so a key dropped from the code fails the tests)."""

DESIGN_KEYS = frozenset(
    {
        "hosts",
        "seq_len",
        "block_tokens",
        "layout",
        "causal",
        "overlap",
        "total_time_s",
        "compute_time_s",
        "exposed_comm_s",
        "comm_time_s",
        "idle_fraction",
        "min_block_for_overlap",
        "memory_per_host_bytes",
        "flops_total",
    }
)
