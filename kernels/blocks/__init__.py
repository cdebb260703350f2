"""Block kernels: one (query block, key/value block) pair on torch tensors, forward and
backward, returning the log-sum-exp.

``dispatch`` (``block_attention``: Triton on CUDA or under ``TRITON_INTERPRET=1``, torch else),
``args`` (the checked arguments every backend takes), ``torch_block``, ``triton_block`` and
``tiles`` (the tile each architecture and dtype compiles to).
"""
