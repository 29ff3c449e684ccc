"""Runtime posts: the non-compute actions of torch's lowered schedules.

torch.distributed.pipelining runs a schedule in two forms. The compute-only form lists
what each rank computes (``2F0``, ``3I1``). Before running it, torch *lowers* it: it adds
the points where the runtime posts its point-to-point operations and its FSDP and
data-parallel work, and that lowered form is what ``_dump_csv(format="compute_comms")``
writes. A ``Post`` is one such point:

* ``1SEND_F0`` / ``2RECV_F0``  post the send of 1F0's activation / the receive of it on
  stage 2's rank (``SEND_B`` / ``RECV_B``: the gradient, towards the previous stage);
* ``1UNSHARD`` / ``1RESHARD``  gather stage 1's FSDP-sharded parameters / free them again;
* ``1REDUCE_GRAD``  reduce stage 1's gradients across data-parallel replicas, once its
  last backward has run (torch's GPipe and 1F1B write it in their compute-only form too).

A post does no computation; what it means for time (a transfer leaves only when both its
ends are posted, a reduction takes the data-parallel all-reduce time) is the engine's
business. Schedules keep posts beside their compute actions (``Schedule.posts``).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple


class PostKind(StrEnum):
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    UNSHARD = "UNSHARD"
    RESHARD = "RESHARD"
    REDUCE_GRAD = "REDUCE_GRAD"


SEND_F, RECV_F, SEND_B, RECV_B = PostKind.SEND_F, PostKind.RECV_F, PostKind.SEND_B, PostKind.RECV_B
UNSHARD, RESHARD, REDUCE_GRAD = PostKind.UNSHARD, PostKind.RESHARD, PostKind.REDUCE_GRAD
P2P_KINDS = frozenset((SEND_F, RECV_F, SEND_B, RECV_B))  # name one microbatch
STAGE_KINDS = frozenset((UNSHARD, RESHARD, REDUCE_GRAD))  # name a stage only


class Post(NamedTuple):
    """One runtime post. ``microbatch`` is None for the per-stage kinds (FSDP, REDUCE_GRAD)."""

    stage: int
    kind: PostKind
    microbatch: int | None = None

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{'' if self.microbatch is None else self.microbatch}"

    def __repr__(self) -> str:
        return str(self)


Placed = tuple[int, Post]  # (index of the device's compute action it precedes, the post)

_POST = re.compile(
    r"^\s*(\d+)\s*(SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD)\s*(\d*)\s*$"
)


def parse_post(text: str) -> Post | None:
    """``2RECV_F0`` or ``1REDUCE_GRAD`` as a Post; None when ``text`` is not a post at all.

    Raises ValueError for a post with a missing or a superfluous microbatch.
    """
    match = _POST.match(text)
    if match is None:
        return None
    stage, kind, microbatch = int(match.group(1)), PostKind(match.group(2)), match.group(3)
    if kind in P2P_KINDS and not microbatch:
        raise ValueError(f"{text.strip()!r}: {kind} names a microbatch, e.g. {stage}{kind}0")
    if kind in STAGE_KINDS and microbatch:
        raise ValueError(f"{text.strip()!r}: {kind} names a stage only, e.g. {stage}{kind}")
    return Post(stage, kind, int(microbatch) if microbatch else None)
