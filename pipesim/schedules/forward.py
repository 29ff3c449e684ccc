"""Inference from a training schedule: its forward passes alone, in the order it runs them.

A serving or decode pipeline runs a schedule's forwards and nothing else; dropping the
backwards (and the posts that belong to them) keeps every forward where the training
order put it.
"""

from __future__ import annotations

from pipesim.schedules.columns import ATOM_CODE, columns, kept_lists
from pipesim.schedules.ir import F, Schedule
from pipesim.schedules.lists import ActionLists
from pipesim.schedules.posts import REDUCE_GRAD, PostKind


def forward_only(schedule: Schedule) -> Schedule:
    """The same schedule with every backward dropped (inference: forward passes only).

    Posts that belong to backwards (``SEND_B``, ``RECV_B``, ``REDUCE_GRAD``) go with them;
    the others keep their place before the next remaining forward. Lists built as columns
    stay columns."""
    if isinstance(schedule.device_actions, ActionLists) and not schedule.posts:
        found = columns(schedule)
        lists = kept_lists(found, schedule.devices, found.kind == ATOM_CODE[F])
        return Schedule(lists, schedule.placement, schedule.chains, schedule.name)
    device_actions, posts = [], []
    for device, actions in enumerate(schedule.device_actions):
        kept, new_index = [], []
        for action in actions:
            new_index.append(len(kept))
            kept.extend(a for a in action.atoms if a.kind == F)
        new_index.append(len(kept))
        device_actions.append(tuple(kept))
        if schedule.posts:
            posts.append(
                tuple(
                    (new_index[at], post)
                    for at, post in schedule.posts[device]
                    if post.kind not in _BACKWARD_POSTS
                )
            )
    return Schedule(
        tuple(device_actions), schedule.placement, schedule.chains, schedule.name, tuple(posts)
    )


_BACKWARD_POSTS = frozenset((PostKind.SEND_B, PostKind.RECV_B, REDUCE_GRAD))


__all__ = ["forward_only"]
