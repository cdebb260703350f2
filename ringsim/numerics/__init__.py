"""The exact executor: P virtual hosts in one NumPy process, equal to dense attention up to
rounding.

What lives here: the float64 reference, the block primitive and the online-softmax merge
(``attention``), the ring forward and backward that execute ``ringsim.schedule`` (``ring``),
rounding to low precision (``rounding``) and the precision lab on top of the ring
(``precision``), sharded decode (``decode``), and a whole transformer block on the ring
(``blockwise``). It may import the core (``ringsim.schedule``, ``layouts``, ``masks``,
``_checks``) and NumPy, never the timer, the views or the command line.
"""
