"""The distributed ring: the schedule of ``ringsim.schedule`` run over ``torch.distributed``.

``ring`` (ring attention, gloo on CPU, NCCL on GPUs), ``hybrid`` (Ulysses x ring over process
groups), ``launch`` (P local rank processes that die with their launcher, or torchrun),
``admission`` (the checks before any rank starts), ``progress`` (signs of life, so a slow rank
is told from a hung one), ``repeats`` (every measured pass timed the same way),
``rank_timeline`` (each rank's measured per-step timeline) and ``exchange`` (what ranks tell
each other, as JSON data: never a pickle a peer could make run code).
"""
