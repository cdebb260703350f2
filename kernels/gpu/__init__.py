"""The GPU check: one prepared command for a lent GPU (``check``, its plan and sections), and
``aot``, which compiles every Triton kernel for sm_80/sm_90 without a GPU."""
