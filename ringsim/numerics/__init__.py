"""The exact executor: P virtual hosts in one NumPy process, equal to dense attention up to
rounding.

What lives here: the float64 reference, the block primitive and the online-softmax merge
(``attention``), the ring forward and backward that execute ``ringsim.schedule`` (``ring``),
rounding to low precision (``rounding``) and the precision lab on top of the ring
(``precision``), sharded decode (``decode``), a whole transformer block on the ring
(``blockwise``), and the strategies beyond one ring on the same hosts: Ulysses x ring (USP)
with its all-to-alls (``hybrid``), the double ring (LoongTrain) and all-gather context
parallelism (``context_parallel``), and Llama 3's all-gather per packed document
(``varlen``). It may import the core (``ringsim.schedule``, ``layouts``, ``masks``, ``grid``,
``_checks``) and NumPy, never the timer, the views or the command line.
"""
