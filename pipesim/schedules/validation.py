"""Schedule validation: is every action there once, on the right device, in a legal order?

A fast NumPy pass accepts a valid schedule; only when it finds a fault does the detailed
pass walk the grid to say exactly where, drawing the step x rank grid with the bad
entries marked (as torch's ``_format_pipeline_order`` does).
"""

from __future__ import annotations

from pipesim.schedules.ir import Action, B, F, I, Kind, Schedule, ScheduleError, W, format_grid


def validate(schedule: Schedule) -> None:
    """Check that the schedule is complete and well ordered; raise ScheduleError with the grid.

    Rules: every stage is placed on a device, each action sits on its stage's device, every
    required action appears exactly once (F; and B, or I and W, when training), a forward
    precedes its backward and I precedes its W on the device.

    A vectorised pass accepts a valid schedule quickly; only when it finds a fault does the
    step-by-step pass run, to say exactly where.
    """
    if _looks_valid(schedule):
        return
    _explain_invalid(schedule)


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
    problems: dict[tuple[int, int], str] = {}
    bad_place = [s for s, d in enumerate(schedule.placement) if not 0 <= d < devices]
    if bad_place:
        raise ScheduleError(
            f"stage {bad_place[0]} is placed on device {schedule.placement[bad_place[0]]}, "
            f"allowed devices are 0..{devices - 1}"
        )
    covered = sorted(s for c in schedule.chains for s in c.stages)
    if covered != list(range(schedule.stages)):
        raise ScheduleError(f"chains must cover stages 0..{schedule.stages - 1} once each")

    seen: dict[tuple[int, Kind, int], tuple[int, int]] = {}
    for device, actions in enumerate(schedule.device_actions):
        for step, action in enumerate(actions):
            for atom in action.atoms:
                key = (atom.stage, atom.kind, atom.microbatch)
                if not 0 <= atom.stage < schedule.stages:
                    problems[(device, step)] = f"{atom}: no stage {atom.stage}"
                    continue
                if schedule.placement[atom.stage] != device:
                    problems[(device, step)] = (
                        f"{atom}: stage {atom.stage} is placed on device "
                        f"{schedule.placement[atom.stage]}, not {device}"
                    )
                if atom.microbatch not in schedule.chain_of(atom.stage).microbatches:
                    problems[(device, step)] = (
                        f"{atom}: microbatch {atom.microbatch} does not pass stage {atom.stage}"
                    )
                if key in seen:
                    problems[(device, step)] = (
                        f"{atom} appears twice (also rank {seen[key][0]} step {seen[key][1]})"
                    )
                seen.setdefault(key, (device, step))
                before = _required_before(atom)
                if before is not None and before not in seen:
                    problems.setdefault((device, step), f"{atom} comes before {_text(before)}")
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
    if training:
        for (stage, kind, mb), where in seen.items():
            if kind == B and (stage, I, mb) in seen:
                problems[where] = f"{stage}B{mb} and {stage}I{mb} both present: use B, or I and W"
    if problems or missing:
        lines = []
        if missing:
            shown = ", ".join(_text(k) for k in missing[:8])
            more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
            lines.append(f"missing actions: {shown}{more}")
        lines += [f"rank {d} step {t}: {note}" for (d, t), note in sorted(problems.items())]
        raise ScheduleError(
            "invalid schedule: " + "; ".join(lines) + "\n" + format_grid(schedule, problems)
        )


def _required_before(atom: Action) -> tuple[int, Kind, int] | None:
    if atom.kind in (B, I):
        return (atom.stage, F, atom.microbatch)
    if atom.kind == W:
        return (atom.stage, I, atom.microbatch)
    return None


def _text(key: tuple[int, Kind, int]) -> str:
    return f"{key[0]}{key[1]}{key[2]}"
