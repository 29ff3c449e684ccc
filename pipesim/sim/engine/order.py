"""Same-device order, checked while the engine runs, and the errors it raises.

``simulate`` never runs an invalid schedule, yet validating a million actions up front
would cost as much as simulating them. So the engine enforces the rules as it goes: every
(stage, microbatch) cell walks a small state machine, one byte per cell,

    new --F--> forwarded --B--> done
                         --I--> input-grad --W--> done

(``pipesim.schedules.validity.CELL_STEPS``), and an action that finds its cell in the
wrong state (a backward before its forward, a W before its I, anything twice) stops the
run. So does a device that waits for an input only its own later action produces. At
the end, the validator's bulk check runs over the trace's rows (a cell left unfinished, a
microbatch out of range). The validator (``pipesim.schedules.validity``) then says
exactly what is wrong, with the grid.

A cycle of waits between devices is not a schedule error but a deadlock: DeadlockError
names the blocked actions and draws the grid.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.dependencies import Message, dependencies
from pipesim.schedules.ir import Action, Schedule, ScheduleError, format_grid
from pipesim.schedules.validity import first_fault, validate
from pipesim.sim.engine.rules import key_parts
from pipesim.sim.trace import Lane, RowKind, Trace


class DeadlockError(RuntimeError):
    """The schedule has a cycle of waits: no device can make progress."""


class OrderCheck:
    """The cells of one run. ``cells[device][stage]`` is the first cell of a stage placed
    on ``device`` (cell = that + microbatch); None for stages placed elsewhere."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule, self.deps = schedule, dependencies(schedule)
        stops = [c.microbatches.stop for c in schedule.chains if len(c.microbatches)]
        self.width = max(stops, default=1)
        self.progress = bytearray(schedule.stages * self.width)
        self.cells: list[list[int | None]] = [
            [None] * schedule.stages for _ in range(schedule.devices)
        ]
        for stage, device in enumerate(schedule.placement):
            if 0 <= device < schedule.devices:
                self.cells[device][stage] = stage * self.width
        self.blocked: dict[int, tuple[int, int]] = {}  # device -> (step, input key) it waits at
        # device -> (step, what it waits for) where that is not an input (a blocking send)
        self.waits: dict[int, tuple[int, str]] = {}
        self.finished = [False] * schedule.devices  # ran its last action (tail aside)

    def invalid(self) -> None:
        """Raise the validator's ScheduleError; if the validator finds nothing, return."""
        validate(self.schedule)

    def out_of_order(self, device: int, step: int, atom: Action) -> None:
        self.invalid()
        raise ScheduleError(f"invalid schedule: rank {device} step {step}: {atom} is out of order")

    def check_stuck(self) -> None:
        """After the run: a device that never ran its last action waits for itself (a
        ScheduleError) or for another device (DeadlockError)."""
        stuck = [d for d, done in enumerate(self.finished) if not done]
        if stuck:
            self.invalid()
            self._self_waits(stuck)
            raise DeadlockError(self._deadlock_message(stuck))

    def check_complete(self, trace: Trace) -> None:
        """After the run: the validator's bulk check over the compute rows (every cell
        finished; the common step does not check microbatch ranges as it goes, and a cell
        out of range may alias another)."""
        fault = first_fault(self.schedule, *_atom_columns(trace))
        if fault is not None:
            self.invalid()
            raise ScheduleError(f"invalid schedule: {fault}")

    # -- what the blocked devices wait for -------------------------------------------

    def _source(self, key: int) -> tuple[int, str]:
        """The stage whose output ``key`` is, and its action text for microbatch."""
        message, stage, microbatch = key_parts(key, self.width)
        source = self.deps.sender(message, stage)
        return source, f"{source}{'F' if message == Message.ACTIVATION else 'B'}{microbatch}"

    def _self_waits(self, stuck: list[int]) -> None:
        marks, notes = {}, []
        for device in stuck:
            if device in self.waits:
                continue
            step, key = self.blocked[device]
            source, text = self._source(key)
            if self.schedule.placement[source] == device:
                action = self.schedule.device_actions[device][step]
                marks[(device, step)] = f"{action} needs {text}, which runs later on rank {device}"
                notes.append(f"rank {device} step {step}: {marks[(device, step)]}")
        if marks:
            raise ScheduleError(
                "invalid schedule: " + "; ".join(notes) + "\n" + format_grid(self.schedule, marks)
            )

    def _deadlock_message(self, stuck: list[int]) -> str:
        marks, notes = {}, []
        for device in stuck:
            if device in self.waits:
                step, wanted = self.waits[device]
                marks[(device, step)] = wanted
                notes.append(f"rank {device} step {step}: {wanted}")
                continue
            step, key = self.blocked[device]
            action = self.schedule.device_actions[device][step]
            source, text = self._source(key)
            what = key_parts(key, self.width)[0].word
            wanted = f"the {what} of {text} (device {self.schedule.placement[source]})"
            marks[(device, step)] = f"{action} waits for {wanted}"
            notes.append(f"rank {device} step {step}: {action} waits for {wanted}")
        return (
            "deadlock: no device can make progress; "
            + "; ".join(notes)
            + "\n"
            + format_grid(self.schedule, marks)
        )


def _atom_columns(trace: Trace) -> tuple:
    """Stage, kind, microbatch, device and row of every atom of the compute rows, in row
    order (each device's rows are in its program order); a group's row holds several."""
    rows = np.flatnonzero(trace.lane == Lane.COMPUTE)
    kind = trace.kind[rows]
    if not (kind == RowKind.OVERLAP_F_B).any():
        return trace.stage[rows], kind, trace.microbatch[rows], trace.device[rows], None
    atoms = [(atom, row) for row in rows.tolist() for atom in trace.actions[row].atoms]
    node = np.array([row for _, row in atoms], dtype=np.int64)
    stage = np.array([a.stage for a, _ in atoms], dtype=np.int64)
    codes = np.array([RowKind[a.kind.name] for a, _ in atoms], dtype=np.int64)
    microbatch = np.array([a.microbatch for a, _ in atoms], dtype=np.int64)
    return stage, codes, microbatch, trace.device[node], node


__all__ = ["DeadlockError", "OrderCheck"]
