"""The engine: one ring pass turned into seconds.

``config`` (``RingConfig``: what runs, on what machine, with which kernel), ``clock`` (how long
each host's compute and each transfer take: speed, jitter, overlap), ``ring_steps`` (a real
kernel family's calls and merges per ring step), ``engines`` (the rules of a pass, executed by
the vectorised engine and by the heap oracle), ``run`` (passes chained into a ``Timeline``),
``result`` and ``timeline`` (what a run returns, and its summary).
"""
