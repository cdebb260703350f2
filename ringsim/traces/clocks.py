"""Putting the ranks' clocks on one time line, from the messages they exchanged.

Each rank's trace counts time on its own clock: ranks on one machine share it, ranks on
different machines can be seconds apart. A message cannot arrive before it was posted: if
on the clocks as recorded every receive completes after its send was posted, the clocks are
taken as one (nothing is shifted: ranks of one machine, or machines whose clocks agree to
better than a message's flight). Otherwise they are aligned: a ring's message is sent by
member ``i`` and received by member ``i + 1``, and both halves complete together (NCCL runs
them in one kernel on each side; gloo's send completes when its bytes are on the wire, the
receive when they landed), so ``send_done(i) + offset(i) = recv_done(i + 1) + offset(i + 1)``
up to the wire's latency. The median over the messages estimates each hop's difference;
around a whole ring the differences must sum to zero, and what they sum to (``residual``) is
spread evenly over the hops and reported: the alignment's own error.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# (send_post, send_done, recv_done): one message, the first two on the sender's clock
Message = tuple[float, float, float]


@dataclass(frozen=True)
class Alignment:
    """``offsets[i]``: seconds added to member ``i``'s times to put them on member 0's clock;
    ``shifted``: whether the clocks needed it; ``residual``: the loop's misclosure before it
    was spread (0 when not shifted, or not a whole ring)."""

    offsets: tuple[float, ...]
    shifted: bool = False
    residual: float = 0.0


def consistent(hops: Sequence[Sequence[Message]]) -> bool:
    """Whether, on the clocks as recorded, every message completes after it was posted."""
    return all(recv_done >= post for hop in hops for post, _, recv_done in hop)


def align(hops: Sequence[Sequence[Message]], closed: bool) -> Alignment:
    """``hops[i]``: the messages from member ``i`` to member ``i + 1`` (an empty list: none
    matched, difference 0). ``closed``: the members are the whole ring, ``hops`` has one per
    member (the last to the first) and the differences close around the loop; else one
    fewer than the members."""
    members = len(hops) if closed else len(hops) + 1
    if consistent(hops):
        return Alignment((0.0,) * members)
    diffs = [statistics.median(s - r for _, s, r in hop) if hop else 0.0 for hop in hops]
    residual = 0.0
    if closed and diffs:
        residual = sum(diffs)
        diffs = [d - residual / len(diffs) for d in diffs[:-1]]
    offsets = [0.0]
    for d in diffs:
        offsets.append(offsets[-1] + d)
    return Alignment(tuple(offsets), True, residual)
