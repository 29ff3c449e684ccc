"""Schedule validity, written once: is every action there once, on the right device, in a
legal order?

One bulk check (``first_fault``) looks at every action at once, as NumPy columns, and
names the first fault it finds, or None. Only when it finds one does the detailed pass
(``explain_invalid``) walk the grid to say exactly where, drawing the step x rank grid
with the bad entries marked (as torch's ``_format_pipeline_order`` does). ``validate``
is the two together; the engine (which enforces the same-device order as it runs, by the
state machine ``CELL_STEPS``) and the fast evaluator (which only needs to know whether
anything is wrong) call the same check.

What an action waits for is ``pipesim.schedules.dependencies``; this module only asks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, columns
from pipesim.schedules.dependencies import MESSAGE_OF, SENDER_KINDS, Dependencies, dependencies
from pipesim.schedules.ir import Action, B, F, I, Kind, Schedule, ScheduleError, W, format_grid
from pipesim.schedules.post_rules import post_problems

"""The codes of ``first_fault``'s ``kind`` column (the trace's row kinds of the same name)."""

# The same-device order as a walk of each (stage, microbatch) cell, one byte a cell:
#     new --F--> forwarded --B--> done
#                          --I--> input-grad --W--> done
NEW, FORWARDED, INPUT_GRAD, DONE = 0, 1, 2, 3
CELL_STEPS = {
    F: (NEW, FORWARDED),
    B: (FORWARDED, DONE),
    I: (FORWARDED, INPUT_GRAD),
    W: (INPUT_GRAD, DONE),
}
"""Per kind, the state its cell must be in before the action, and the state after it."""

_STAGE, _KIND, _MICROBATCH, _SUB_ACTIONS = (itemgetter(k) for k in range(4))


def validate(schedule: Schedule) -> None:
    """Check that the schedule is complete and well ordered; raise ScheduleError with the grid.

    Rules: every stage is placed on a device, each action sits on its stage's device, every
    required action appears exactly once (F; and B, or I and W, when training), a forward
    precedes its backward and I precedes its W on the device, and no member of a group
    waits for another member's output.

    The bulk check accepts a valid schedule quickly; only when it finds a fault does the
    step-by-step pass run, to say exactly where. A schedule with runtime posts (torch's
    lowered form) then keeps the rules of ``pipesim.schedules.post_rules``; its grid shows
    the posts too.
    """
    if schedule_fault(schedule) is not None:
        explain_invalid(schedule)
    validate_posts(schedule)


def validate_posts(schedule: Schedule) -> None:
    """The rules of runtime posts alone (``pipesim.schedules.post_rules``); nothing to
    check in a schedule without posts. Raise ScheduleError with the grid of programs."""
    if not schedule.posts:
        return
    problems, missing = post_problems(schedule)
    if problems or missing:
        programs = [schedule.program(d) for d in range(schedule.devices)]
        raise_with_grid(programs, problems, missing, "missing posts")


def schedule_fault(schedule: Schedule) -> str | None:
    """``first_fault`` over the schedule's own actions (its ``columns``), found once and
    kept with the schedule: building a schedule validates it, and the fast evaluator asks
    again before it lays the graph out."""
    return schedule.derived("fault", _bulk_fault)


def _bulk_fault(schedule: Schedule) -> str | None:
    found = columns(schedule)
    node = None if found.one_each else found.node
    return first_fault(schedule, found.stage, found.kind, found.microbatch, found.device, node)


def first_fault(schedule: Schedule, stage, kind, microbatch, device, node=None) -> str | None:
    """The first rule the actions break, in a few words, or None: checked in bulk.

    Columns, one entry per simple action in program order (device by device): ``stage``,
    ``kind`` (``ATOM_CODE``), ``microbatch``, ``device``; ``node``: the entry of its
    device's list that runs it (a group runs several), None for one entry per action.
    Rules: a stage placed elsewhere or outside every chain, a microbatch out of its
    chain's range, a cell missing or run twice, a backward before its forward, a W before
    its I, training and inference mixed, a group member waiting for another's output.
    """
    stages = schedule.stages
    if not len(stage):
        return "the schedule has no actions"
    if stage.min() < 0 or stage.max() >= stages:
        return "an action names a stage the schedule lacks"
    placement = np.asarray(schedule.placement, dtype=np.int64)
    if placement.min() < 0 or placement.max() >= schedule.devices:
        return "a stage is placed on a device the schedule lacks"
    if not np.array_equal(placement[stage], device):
        return "an action runs on a device its stage is not placed on"
    if sorted(s for c in schedule.chains for s in c.stages) != list(range(stages)):
        return "the chains do not cover every stage once"
    owner = np.asarray(schedule.stage_chain, dtype=np.int64)
    lo = np.array([c.microbatches.start for c in schedule.chains], dtype=np.int64)[owner]
    hi = np.array([c.microbatches.stop for c in schedule.chains], dtype=np.int64)[owner]
    if len(schedule.chains) == 1:  # one range for every stage
        if microbatch.min() < lo[0] or microbatch.max() >= hi[0]:
            return "an action names a microbatch out of range"
    elif ((microbatch < lo[stage]) | (microbatch >= hi[stage])).any():
        return "an action names a microbatch out of range"
    width = int(hi.max())
    cells = stages * width
    flat = kind * stages  # kind * cells + cell, in place: (kind * stages + stage) * width + mb
    flat += stage
    flat *= width
    flat += microbatch
    position = _positions(flat, 4 * cells)
    if position is None:
        return "some actions are missing or run twice"
    valid = np.zeros(cells, dtype=bool)
    for owned in schedule.chains:
        for s in owned.stages:
            valid[s * width + owned.microbatches.start : s * width + owned.microbatches.stop] = True
    every = bool(valid.all())
    f, b, i, w = position if every else position[:, valid]
    if not every and (position[:, ~valid] >= 0).any():
        return "some actions are missing or run twice"
    full, split = (b >= 0) & (i < 0) & (w < 0), (b < 0) & (i >= 0) & (w >= 0)
    forward_only = (b < 0) & (i < 0) & (w < 0)
    if (f < 0).any() or not (forward_only.all() or (full | split).all()):
        return "some actions are missing or run twice"
    if ((b >= 0) & (b < f)).any() or ((i >= 0) & ((i < f) | (w < i))).any():
        return "a backward runs before its forward, or a W before its I"
    if node is not None and _fed_inside_a_group(
        schedule, node, position, stage, kind, flat - kind * cells
    ):
        return "a group member needs another member's output"
    return None


def _positions(flat: np.ndarray, size: int) -> np.ndarray | None:
    """Per (kind, cell), rows of 4: the place of its action in program order, -1 where
    there is none; None where an action appears twice (a later one would overwrite)."""
    dtype = np.int32 if len(flat) < 2**31 else np.int64
    order = np.arange(len(flat), dtype=dtype)
    position = np.full(size, -1, dtype=dtype)
    position[flat] = order
    if not np.array_equal(position[flat], order):
        return None
    return position.reshape(4, -1)


def _fed_inside_a_group(schedule, node, position, stage, kind, cell) -> bool:
    """Whether an action's message comes from an action that the same entry runs."""
    grouped = np.flatnonzero(np.bincount(node)[node] > 1)  # atoms of multi-atom entries
    stage, kind, cell, own = stage[grouped], kind[grouped], cell[grouped], node[grouped]
    deps, (_, cells) = dependencies(schedule), position.shape
    width, flat = cells // schedule.stages, position.reshape(-1)
    microbatch = cell - stage * width
    for message, senders in SENDER_KINDS.items():
        takes = np.zeros(len(kind), dtype=bool)
        for taker in (k for k, taken in MESSAGE_OF.items() if taken == message):
            takes |= kind == ATOM_CODE[taker]
        source = np.asarray(deps.takes_from(message), dtype=np.int64)[stage]
        takes &= source >= 0
        source_cell = (source * width + microbatch)[takes]
        for sender in senders:
            producer = flat[ATOM_CODE[sender] * cells + source_cell]
            found = producer >= 0
            if (node[producer[found]] == own[takes][found]).any():
                return True
    return False


def explain_invalid(schedule: Schedule) -> None:
    """Raise ScheduleError naming every fault, with the grid; return if there is none."""
    devices = schedule.devices
    bad_place = [s for s, d in enumerate(schedule.placement) if not 0 <= d < devices]
    if bad_place:
        raise ScheduleError(
            f"stage {bad_place[0]} is placed on device {schedule.placement[bad_place[0]]}, "
            f"allowed devices are 0..{devices - 1}"
        )
    covered = sorted(s for c in schedule.chains for s in c.stages)
    if covered != list(range(schedule.stages)):
        raise ScheduleError(f"chains must cover stages 0..{schedule.stages - 1} once each")
    deps = dependencies(schedule)
    problems: dict[tuple[int, int], str] = {}
    seen: dict[tuple[int, Kind, int], tuple[int, int]] = {}
    for device, actions in enumerate(schedule.device_actions):
        for step, action in enumerate(actions):
            for atom in action.atoms:
                note = _atom_problem(schedule, device, atom, seen)
                if note is not None:
                    problems[(device, step)] = note
                seen.setdefault((atom.stage, atom.kind, atom.microbatch), (device, step))
                before = deps.local_input(atom)
                if before is not None and before not in seen:
                    problems.setdefault((device, step), f"{atom} comes before {_text(before)}")
            if action.sub_actions is not None and (note := _group_problem(schedule, deps, action)):
                problems[(device, step)] = note
    if schedule.is_training:
        for (stage, kind, mb), where in seen.items():
            if kind == B and (stage, I, mb) in seen:
                problems[where] = f"{stage}B{mb} and {stage}I{mb} both present: use B, or I and W"
    missing = [_text(k) for k in _missing_actions(schedule, seen)]
    if problems or missing:
        raise_with_grid(schedule.device_actions, problems, missing)


def raise_with_grid(
    lists: Sequence[Sequence[object]],
    problems: dict[tuple[int, int], str],
    missing: list[str],
    missing_label: str = "missing actions",
) -> None:
    """ScheduleError: the missing entries and each problem on one line, then the grid."""
    lines = []
    if missing:
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        lines.append(f"{missing_label}: {', '.join(missing[:8])}{more}")
    lines += [f"rank {d} step {t}: {note}" for (d, t), note in sorted(problems.items())]
    raise ScheduleError(
        "invalid schedule: " + "; ".join(lines) + "\n" + format_grid(lists, problems)
    )


def _atom_problem(
    schedule: Schedule, device: int, atom: Action, seen: dict[tuple[int, Kind, int], tuple]
) -> str | None:
    """What is wrong with one simple action where it stands, if anything (last rule wins)."""
    if not 0 <= atom.stage < schedule.stages:
        return f"{atom}: no stage {atom.stage}"
    note = None
    if schedule.placement[atom.stage] != device:
        note = (
            f"{atom}: stage {atom.stage} is placed on device "
            f"{schedule.placement[atom.stage]}, not {device}"
        )
    if atom.microbatch not in schedule.chain_of(atom.stage).microbatches:
        note = f"{atom}: microbatch {atom.microbatch} does not pass stage {atom.stage}"
    key = (atom.stage, atom.kind, atom.microbatch)
    if key in seen:
        note = f"{atom} appears twice (also rank {seen[key][0]} step {seen[key][1]})"
    return note


def _group_problem(schedule: Schedule, deps: Dependencies, action: Action) -> str | None:
    """A group runs as one action: no member may wait for another member's output."""
    members = {(a.stage, a.kind, a.microbatch) for a in action.atoms}
    for atom in action.atoms:
        if not 0 <= atom.stage < schedule.stages:
            continue
        inside = [k for k in deps.message_producers(atom) if k in members]
        if inside:
            return (
                f"{action}: {atom} needs the output of {_text(inside[0])} in the same group; "
                "pipesim runs a group's members as one action, so split the group"
            )
    return None


def _missing_actions(schedule: Schedule, seen) -> list[tuple[int, Kind, int]]:
    training = schedule.is_training
    missing = []
    for chain in schedule.chains:
        for stage in chain.stages:
            for mb in chain.microbatches:
                needed = [(stage, F, mb)]
                if training and (stage, I, mb) in seen:
                    needed += [(stage, W, mb)]
                elif training and (stage, W, mb) in seen:
                    needed += [(stage, I, mb)]
                elif training:
                    needed += [(stage, B, mb)]
                missing += [k for k in needed if k not in seen]
    return missing


def _text(key: tuple[int, Kind, int]) -> str:
    return f"{key[0]}{key[1]}{key[2]}"
