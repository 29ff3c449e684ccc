"""Same-device order, checked while the engine runs, and the errors it raises.

``simulate`` never runs an invalid schedule, yet validating a million actions up front
would cost as much as simulating them. So the engine enforces the rules as it goes: every
(stage, microbatch) cell walks a small state machine, one byte per cell,

    new --F--> forwarded --B--> done
                         --I--> input-grad --W--> done

and an action that finds its cell in the wrong state (a backward before its forward, a W
before its I, anything twice) stops the run. So does a cell left unfinished at the end,
and a device that waits for an input only its own later action produces. The validator
(``pipesim.schedules.validation``) then says exactly what is wrong, with the grid.

A cycle of waits between devices is not a schedule error but a deadlock: DeadlockError
names the blocked actions and draws the grid.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.ir import Action, B, F, I, Schedule, ScheduleError, W, format_grid
from pipesim.schedules.validation import validate

NEW, FORWARDED, INPUT_GRAD, DONE = 0, 1, 2, 3


class DeadlockError(RuntimeError):
    """The schedule has a cycle of waits: no device can make progress."""


class OrderCheck:
    """The cells of one run. ``cells[device][stage]`` is the first cell of a stage placed
    on ``device`` (cell = that + microbatch); None for stages placed elsewhere."""

    steps = {
        F: (NEW, FORWARDED),
        B: (FORWARDED, DONE),
        I: (FORWARDED, INPUT_GRAD),
        W: (INPUT_GRAD, DONE),
    }

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
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

    def check_finished(self) -> None:
        """After the run: no device stuck, every cell finished, nothing outside the chains.

        The engine's common step does not check microbatch ranges as it goes (a cell out
        of range may alias another); ``check_ranges`` does, on the trace, in bulk.
        """
        stuck = [d for d, done in enumerate(self.finished) if not done]
        if stuck:
            self.invalid()
            self._self_waits(stuck)
            raise DeadlockError(self._deadlock_message(stuck))
        state = np.frombuffer(self.progress, np.uint8).reshape(-1, self.width)
        valid = np.zeros(state.shape, dtype=bool)
        for chain in self.schedule.chains:
            valid[chain.first_stage : chain.last_stage + 1, chain.microbatches] = True
        final = state[valid]
        if (state[~valid] != NEW).any() or not (
            (final == DONE).all() or (final == FORWARDED).all()
        ):
            self.invalid()
            raise ScheduleError("invalid schedule: some actions are missing")

    def check_ranges(self, stage: np.ndarray, microbatch: np.ndarray, simple: np.ndarray) -> None:
        """Every simple compute row names a stage and a microbatch of that stage's chain."""
        chains = self.schedule.chains
        lo = np.array([chains[c].microbatches.start for c in self.schedule._stage_chain])
        hi = np.array([chains[c].microbatches.stop for c in self.schedule._stage_chain])
        stage, microbatch = stage[simple], microbatch[simple]
        if (stage < 0).any() or (stage >= len(lo)).any():
            self.invalid()
            raise ScheduleError("invalid schedule: an action names a stage the schedule lacks")
        if ((microbatch < lo[stage]) | (microbatch >= hi[stage])).any():
            self.invalid()
            raise ScheduleError("invalid schedule: an action names a microbatch out of range")

    # -- what the blocked devices wait for -------------------------------------------

    def _source(self, key: int) -> tuple[int, str]:
        """The stage whose output ``key`` is, and its action text for microbatch."""
        direction, cell = key % 2, key // 2
        stage, microbatch = divmod(cell, self.width)
        if direction == 0:
            source = self.schedule.prev_stage(stage)
            return source, f"{source}F{microbatch}"
        source = self.schedule.next_stage(stage)
        return source, f"{source}B{microbatch}"

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
            what = "activation" if key % 2 == 0 else "gradient"
            wanted = f"the {what} of {text} (device {self.schedule.placement[source]})"
            marks[(device, step)] = f"{action} waits for {wanted}"
            notes.append(f"rank {device} step {step}: {action} waits for {wanted}")
        return (
            "deadlock: no device can make progress; "
            + "; ".join(notes)
            + "\n"
            + format_grid(self.schedule, marks)
        )


__all__ = ["DeadlockError", "OrderCheck"]
