"""Schedule validation: is every action there once, on the right device, in a legal order?

A fast NumPy pass accepts a valid schedule; only when it finds a fault does the detailed
pass walk the grid to say exactly where, drawing the step x rank grid with the bad
entries marked (as torch's ``_format_pipeline_order`` does).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.schedules.ir import Action, B, F, I, Kind, Schedule, ScheduleError, W, format_grid
from pipesim.schedules.post_rules import post_problems


def validate(schedule: Schedule) -> None:
    """Check that the schedule is complete and well ordered; raise ScheduleError with the grid.

    Rules: every stage is placed on a device, each action sits on its stage's device, every
    required action appears exactly once (F; and B, or I and W, when training), a forward
    precedes its backward and I precedes its W on the device.

    A vectorised pass accepts a valid schedule quickly; only when it finds a fault does the
    step-by-step pass run, to say exactly where. A schedule with runtime posts (torch's
    lowered form) then keeps the rules of ``pipesim.schedules.post_rules``; its grid shows
    the posts too.
    """
    if not _looks_valid(schedule):
        _explain_invalid(schedule)
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


def _looks_valid(schedule: Schedule) -> bool:
    """True when every rule holds (NumPy over all actions); False means "look closer"."""
    import numpy as np

    if any(a.sub_actions is not None for actions in schedule.device_actions for a in actions):
        return False  # overlapped pairs: leave them to the detailed pass
    placement = np.asarray(schedule.placement)
    if placement.size == 0 or placement.min() < 0 or placement.max() >= schedule.devices:
        return False
    width = 1 + max((c.microbatches.stop for c in schedule.chains), default=0)
    codes = {F: 0, B: 1, I: 2, W: 3}
    columns = []
    for device, actions in enumerate(schedule.device_actions):
        if not actions:
            continue
        stages, kinds, microbatches, _ = zip(*actions, strict=True)
        n = len(actions)
        columns.append(
            (
                np.array(stages),
                np.fromiter((codes[k] for k in kinds), np.int64, n),
                np.array(microbatches),
                np.full(n, device),
                np.arange(n),
            )
        )
    if not columns:
        return False
    stage, kind, mb, device, step = (np.concatenate(c) for c in zip(*columns, strict=True))
    if stage.min() < 0 or stage.max() >= schedule.stages or (placement[stage] != device).any():
        return False
    chain = np.asarray(schedule._stage_chain)[stage]
    lo = np.array([c.microbatches.start for c in schedule.chains])[chain]
    hi = np.array([c.microbatches.stop for c in schedule.chains])[chain]
    if (mb < lo).any() or (mb >= hi).any():
        return False
    cell = stage * width + mb
    by_kind = {}
    for name, code in codes.items():
        chosen = kind == code
        order = np.argsort(cell[chosen], kind="stable")
        by_kind[name] = (cell[chosen][order], step[chosen][order])
    expected = sum(len(c.stages) * len(c.microbatches) for c in schedule.chains)
    f_cells, f_steps = by_kind[F]
    if len(f_cells) != expected or (len(f_cells) > 1 and (np.diff(f_cells) == 0).any()):
        return False
    if not schedule.is_training:
        return True
    back_cells = np.concatenate([by_kind[B][0], by_kind[I][0]])
    back_steps = np.concatenate([by_kind[B][1], by_kind[I][1]])
    order = np.argsort(back_cells, kind="stable")
    if not np.array_equal(back_cells[order], f_cells) or (back_steps[order] < f_steps).any():
        return False  # every F has exactly one B or I, after it on the same device
    i_cells, i_steps = by_kind[I]
    w_cells, w_steps = by_kind[W]
    return np.array_equal(i_cells, w_cells) and not (w_steps < i_steps).any()


def _explain_invalid(schedule: Schedule) -> None:
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
    problems: dict[tuple[int, int], str] = {}
    seen: dict[tuple[int, Kind, int], tuple[int, int]] = {}
    for device, actions in enumerate(schedule.device_actions):
        for step, action in enumerate(actions):
            for atom in action.atoms:
                note = _atom_problem(schedule, device, atom, seen)
                if note is not None:
                    problems[(device, step)] = note
                seen.setdefault((atom.stage, atom.kind, atom.microbatch), (device, step))
                before = _required_before(atom)
                if before is not None and before not in seen:
                    problems.setdefault((device, step), f"{atom} comes before {_text(before)}")
            if action.sub_actions is not None and (note := _group_problem(schedule, action)):
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


def _group_problem(schedule: Schedule, action: Action) -> str | None:
    """A group runs as one action: no member may wait for another member's output."""
    members = {(a.stage, a.kind, a.microbatch) for a in action.atoms}
    for atom in action.atoms:
        if not 0 <= atom.stage < schedule.stages:
            continue
        if atom.kind == F:
            source = schedule.prev_stage(atom.stage)
            fed_by = [(source, F, atom.microbatch)]
        elif atom.kind in (B, I):
            source = schedule.next_stage(atom.stage)
            fed_by = [(source, B, atom.microbatch), (source, I, atom.microbatch)]
        else:
            continue
        inside = [k for k in fed_by if source is not None and k in members]
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


def _required_before(atom: Action) -> tuple[int, Kind, int] | None:
    if atom.kind in (B, I):
        return (atom.stage, F, atom.microbatch)
    if atom.kind == W:
        return (atom.stage, I, atom.microbatch)
    return None


def _text(key: tuple[int, Kind, int]) -> str:
    return f"{key[0]}{key[1]}{key[2]}"
