"""The machine the timer runs on: what one device and its links are and can do.

``arch`` (a device's chip: SM count, compute capability, fp8), ``links`` (the kinds of link and
how NCCL uses each), ``hardware`` (a device: its chip, link kind, rates and achieved
point-to-point range as fields; presets with their sources, hardware files, calibrated
profiles), ``topology`` (clusters: nodes x devices, NVSwitch/PCIe inside a node, NICs between
nodes), ``families`` (named attention kernels, their published throughput curves and where
they run), ``kernel_model`` (the one function that times an attention call of any family, by
shape, mask and tile) and ``collectives`` (NCCL-like point-to-point transfers). What a device
is, is asked of its fields, never read from its name. Nothing here knows about rings.
"""
