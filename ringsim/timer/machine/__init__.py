"""The machine the timer runs on: what one device and its links can do.

``hardware`` (device presets with their sources, calibrated CPU profiles), ``topology``
(clusters: nodes x devices, NVSwitch/PCIe inside a node, NICs between nodes), ``families``
(named attention kernels and their published throughput curves), ``kernel_model`` (the one
function that times an attention call of any family, by shape, mask and tile) and
``collectives`` (NCCL-like point-to-point transfers). Nothing here knows about rings.
"""
