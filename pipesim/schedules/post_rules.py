"""The rules a lowered schedule's posts keep, so torch's runtime could run it.

A lowered schedule (``Schedule.posts``, read from torch's ``compute_comms`` CSV) says
where each rank posts its sends, receives, FSDP gathers and gradient reductions. The
runtime trusts that list; a wrong one hangs (a send nobody receives) or fails (a forward
whose input was never received). ``post_problems`` finds each broken rule and says
where, as ``(device, program step) -> note``; ``validate`` draws the grid.

Rules:

* a post names a stage of the device whose row holds it (and, for SEND/RECV, a
  microbatch that passes the stage);
* ``SEND_F``/``SEND_B`` come after the action whose output they send, ``RECV_F``/
  ``RECV_B`` before the action that needs what they receive; a transfer between two
  stages on one rank has neither (the runtime hands it over locally);
* once a schedule has SEND/RECV posts at all, every transfer between ranks has its SEND
  and its RECV, each exactly once;
* ``REDUCE_GRAD`` comes after the stage's last backward; once one stage has it, every
  stage has it exactly once;
* ``UNSHARD`` and ``RESHARD`` of a stage alternate, ``UNSHARD`` first, and a stage that
  has them computes only while unsharded (the checks torch's runtime makes under FSDP).
"""

from __future__ import annotations

from pipesim.schedules.dependencies import Message, dependencies
from pipesim.schedules.ir import Action, B, F, I, Kind, Schedule, W
from pipesim.schedules.posts import (
    P2P_KINDS,
    RECV_B,
    RECV_F,
    REDUCE_GRAD,
    RESHARD,
    SEND_B,
    SEND_F,
    UNSHARD,
    Post,
)

Problems = dict[tuple[int, int], str]
_PRODUCES = {SEND_F: (F,), SEND_B: (B, I), RECV_F: (F,), RECV_B: (B, I)}


def post_problems(schedule: Schedule) -> tuple[Problems, list[str]]:
    """Each broken rule as ``(device, program step) -> note``, and the posts missing."""
    index = {
        (atom.stage, atom.kind, atom.microbatch): step
        for actions in schedule.device_actions
        for step, action in enumerate(actions)
        for atom in action.atoms
    }
    problems: Problems = {}
    seen: dict[Post, tuple[int, int]] = {}
    for device in range(schedule.devices):
        computed = 0
        for step, item in enumerate(schedule.program(device)):
            if isinstance(item, Action):
                computed += 1
                continue
            note = _place_problem(schedule, device, item) or _order_problem(
                schedule, index, computed, item
            )
            if item in seen and item.kind not in (UNSHARD, RESHARD):
                note = f"appears twice (also rank {seen[item][0]} step {seen[item][1]})"
            seen.setdefault(item, (device, step))
            if note is not None:
                problems[(device, step)] = f"{item}: {note}"
    for where, note in _fsdp_problems(schedule).items():
        problems.setdefault(where, note)
    return problems, _missing_posts(schedule, set(seen))


def _peer(schedule: Schedule, post: Post) -> int | None:
    """The stage at the other end of a SEND or RECV."""
    message = Message.ACTIVATION if post.kind in (SEND_F, RECV_F) else Message.GRADIENT
    deps = dependencies(schedule)
    if post.kind in (SEND_F, SEND_B):
        return deps.receiver(message, post.stage)
    return deps.sender(message, post.stage)


def _place_problem(schedule: Schedule, device: int, post: Post) -> str | None:
    stage = post.stage
    if not 0 <= stage < schedule.stages:
        return f"no stage {stage} (stages 0..{schedule.stages - 1})"
    if schedule.placement[stage] != device:
        return f"stage {stage} is placed on device {schedule.placement[stage]}, not {device}"
    if post.kind in (SEND_B, RECV_B, REDUCE_GRAD) and not schedule.is_training:
        return "a forward-only schedule has no gradients"
    if post.kind not in P2P_KINDS:
        return None
    if post.microbatch not in schedule.chain_of(stage).microbatches:
        return f"microbatch {post.microbatch} does not pass stage {stage}"
    peer = _peer(schedule, post)
    if peer is None:
        end = "ends" if post.kind in (SEND_F, RECV_B) else "starts"
        return f"stage {stage} {end} its pipeline: there is nothing to {post.kind[:4].lower()}"
    if schedule.placement[peer] == device:
        return (
            f"stages {stage} and {peer} share rank {device}: the runtime hands the tensor "
            "over locally, without SEND/RECV"
        )
    return None


def _order_problem(schedule: Schedule, index: dict, at: int, post: Post) -> str | None:
    """Is the post on the right side of the compute action it belongs to?"""
    if post.kind == REDUCE_GRAD:
        last = max(
            ((index[k], k) for k in _backwards(schedule, post.stage) if k in index), default=None
        )
        if last is not None and at <= last[0]:
            return f"posted before {_text(last[1])}, the stage's last backward"
        return None
    if post.kind not in P2P_KINDS:
        return None
    keys = [(post.stage, kind, post.microbatch) for kind in _PRODUCES[post.kind]]
    step = next((index[k] for k in keys if k in index), None)
    if step is None:
        return None  # the missing action is reported by the compute-action rules
    action = _text(next(k for k in keys if k in index))
    if post.kind in (SEND_F, SEND_B) and at <= step:
        return f"posted before {action}, whose output it sends"
    if post.kind in (RECV_F, RECV_B) and at > step:
        return f"posted after {action}, which needs what it receives"
    return None


def _backwards(schedule: Schedule, stage: int) -> list[tuple[int, Kind, int]]:
    microbatches = schedule.chain_of(stage).microbatches
    return [(stage, kind, mb) for mb in microbatches for kind in (B, W)]


def _missing_posts(schedule: Schedule, seen: set[Post]) -> list[str]:
    needed: list[Post] = []
    if schedule.has_p2p_posts:
        for chain in schedule.chains:
            for stage in chain.stages[:-1]:
                if schedule.placement[stage] == schedule.placement[stage + 1]:
                    continue
                for mb in chain.microbatches:
                    needed += [Post(stage, SEND_F, mb), Post(stage + 1, RECV_F, mb)]
                    if schedule.is_training:
                        needed += [Post(stage + 1, SEND_B, mb), Post(stage, RECV_B, mb)]
    if schedule.is_training and any(p.kind == REDUCE_GRAD for p in seen):
        needed += [Post(stage, REDUCE_GRAD) for stage in range(schedule.stages)]
    return [f"{p} (rank {schedule.placement[p.stage]})" for p in needed if p not in seen]


def _fsdp_problems(schedule: Schedule) -> Problems:
    """UNSHARD and RESHARD alternate per stage; an FSDP stage computes only while unsharded."""
    fsdp = {p.stage for placed in schedule.posts for _, p in placed if p.kind in (UNSHARD, RESHARD)}
    problems: Problems = {}
    for device in range(schedule.devices):
        unsharded: set[int] = set()
        for step, item in enumerate(schedule.program(device)):
            note = None
            if isinstance(item, Action):
                idle = [a for a in item.atoms if a.stage in fsdp and a.stage not in unsharded]
                if idle:
                    note = (
                        f"{idle[0]} runs while stage {idle[0].stage} is sharded (UNSHARD it first)"
                    )
            elif item.kind == UNSHARD:
                note = None if item.stage not in unsharded else f"{item}: unsharded twice"
                unsharded.add(item.stage)
            elif item.kind == RESHARD:
                note = None if item.stage in unsharded else f"{item}: the stage is not unsharded"
                unsharded.discard(item.stage)
            if note is not None:
                problems[(device, step)] = note
    return problems


def _text(key: tuple[int, Kind, int]) -> str:
    return f"{key[0]}{key[1]}{key[2]}"
