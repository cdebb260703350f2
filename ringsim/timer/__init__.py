"""The timed executor: the ring schedule turned into seconds on modelled hardware.

Its rooms, bottom up (each may import the ones before it, never the ones after):

* ``cost``: the counts every room uses: the layer's shape (``AttentionShape``), FLOPs of
  attention, bytes of a block, the overlap threshold ``c >= F / B`` (a device enters only as an
  argument: ``cost`` imports no other room, ``tests/test_architecture.py`` holds the order);
* ``machine/``: what one device and its links can do: hardware presets and calibrated profiles,
  clusters of nodes, kernel families and the one function that times an attention call,
  NCCL-like transfers;
* ``engine/``: one ring pass turned into seconds: the run's configuration (``RingConfig``), the
  clock, a real family's calls and merges per step, the vectorised engine and its heap oracle,
  the driver that chains passes into a ``Timeline``, and the result;
* ``strategies/``: the ring, Ulysses, all-gather, Ulysses x ring and the double ring, each timed
  on the engine and the machine;
* ``step/``: a whole training step around attention: models, memory per device;
* ``studies/``: the planner, the published measurements and their prediction (``validate``),
  the waterfall from the ideal ring to a real one.

The timer may import the core (``ringsim.schedule``, ``layouts``, ``masks``, ``grid``,
``checks``, ``values``) and NumPy, never the numerics, the views or the command line. This
module is the engine's front door: ``RingConfig``, ``simulate`` and its ``SimResult``.
"""

from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import SimResult
from ringsim.timer.engine.run import simulate

__all__ = ["RingConfig", "SimResult", "simulate"]
