"""ringsim's real backend: Triton block kernels and a torch.distributed ring.

``import kernels`` needs torch (Triton only when the Triton backend runs). This package is the
repository's ``kernels/`` folder, not the PyPI package of the same name: ``kernels.__file__``
points into the ringsim checkout.

Its rooms, by role:

* ``blocks/``: one (query block, kv block) pair on torch tensors, forward and backward
  (``dispatch``: Triton on CUDA or under ``TRITON_INTERPRET=1``, torch else; ``args``,
  ``torch_block``, ``triton_block``, ``tiles``), masks from global positions;
* ``distributed/``: ring attention over ``torch.distributed`` driven by ``ringsim.schedule``
  (``ring``; ``hybrid``: Ulysses x ring), rank processes (``launch``, ``admission``,
  ``progress``), timed repeats (``repeats``) and each rank's measured timeline
  (``rank_timeline``);
* ``calibration/``: the probes, their fit into a ``Hardware``, ``ringsim calibrate`` and
  ``ringsim measure`` (the real ring's time against the simulator's prediction);
* ``gpu/``: the prepared one-command GPU check and the ahead-of-time compile check.

The backend may import ``ringsim`` (the core, the timer and the views), never its command line
(``ringsim.values`` and ``ringsim.files`` hold what both command lines share). Nothing in
``ringsim`` imports it; the ``calibrate`` and ``measure`` subcommands are forwarded to it by
name, at run time.
"""

from kernels.blocks.dispatch import BACKENDS, block_attention, block_attention_backward

__all__ = ["BACKENDS", "block_attention", "block_attention_backward"]
