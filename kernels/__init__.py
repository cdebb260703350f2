"""ringsim's real backend: Triton block kernels and a torch.distributed ring.

``import kernels`` needs torch (Triton only when the Triton backend runs). This package is the
repository's ``kernels/`` folder, not the PyPI package of the same name: ``kernels.__file__``
points into the ringsim checkout.

* ``block_attention`` / ``block_attention_backward``: one (query block, kv block) pair on torch
  tensors, masks from global positions, Triton on CUDA (or ``TRITON_INTERPRET=1``), torch else.
* ``kernels.ring``: ring attention over ``torch.distributed`` (gloo on CPU, NCCL on GPUs),
  driven by ``ringsim.schedule``, with measured per-step timelines.
* ``kernels.calibrate`` / ``kernels.measure``: a hardware profile of this machine, and the
  real ring's time against the simulator's prediction.
"""

from kernels.block import BACKENDS, block_attention, block_attention_backward

__all__ = ["BACKENDS", "block_attention", "block_attention_backward"]
