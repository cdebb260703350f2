"""Measuring this machine, and the real ring against the simulator.

``probes`` (compute, masked blocks, links, a ring pass), ``paired`` (probes and ring timed
side by side), ``profile`` (their fit into a ``Hardware``), ``uncertainty`` (intervals over
repeats), ``calibrate`` (``ringsim calibrate``), ``measure`` (``ringsim measure``) and
``report`` (its typed result).
"""
