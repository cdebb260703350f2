"""ringsim's real backend: Triton block kernels and a torch.distributed ring.

``import kernels`` needs torch (Triton only when the Triton backend runs). This package is the
repository's ``kernels/`` folder, not the PyPI package of the same name: ``kernels.__file__``
points into the ringsim checkout.

* ``block`` (the dispatcher), ``block_args`` (the checked arguments every backend takes),
  ``torch_block``, ``triton_block`` and ``tiles``: one (query block, kv block) pair on torch
  tensors, masks from global positions, Triton on CUDA (or ``TRITON_INTERPRET=1``), torch else.
* ``ring``: ring attention over ``torch.distributed`` (gloo on CPU, NCCL on GPUs), driven by
  ``ringsim.schedule``; ``rank_timeline``: each rank's measured per-step timeline; ``launch``:
  P local rank processes (or torchrun) and complete runs on random inputs.
* ``probes`` (the measurements), ``profile`` (their fit into a ``Hardware``), ``calibrate``
  (runs them and saves a profile) and ``measure`` (the real ring's time against the
  simulator's prediction); ``gpu_check``: the prepared one-command GPU run.

The backend may import ``ringsim`` (the core, the timer and the views, never the command line);
nothing in ``ringsim`` imports it, except the forwarded ``calibrate``/``measure`` subcommands.
"""

from kernels.blocks.dispatch import BACKENDS, block_attention, block_attention_backward

__all__ = ["BACKENDS", "block_attention", "block_attention_backward"]
