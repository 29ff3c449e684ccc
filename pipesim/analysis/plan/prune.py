"""Memory first: which candidates cannot fit, found without simulating them.

A device's memory at any instant is its static memory (weights, gradients, optimizer
states: ``pipesim.cluster.transformer.static_memory``) plus the activations it holds. A
device runs its actions one after another, so the activations it holds change only at its
own actions: an F takes its layer group's activation when it starts, a B gives it all back
when it ends, a split backward gives back all but the weight-gradient part when I ends and
the rest when W ends (``pipesim.sim.memory``). Walking a device's list in order and summing
those changes gives its peak without knowing a single time. Timing matters only where one
action ends at the very instant the next starts: the walk gives back first, so its count is
never above the simulated peak (and equal to it wherever the timeline has no such tie the
other way round). That makes it safe for pruning: a candidate whose count exceeds the GPU's
memory does not fit, whatever its timeline. The planner then takes every reported peak
from the candidate's own simulated Report.

The walk is precomputed once per schedule (``MemoryProgram``) as arrays; each candidate's
costs then give its peak per device with one cumulative sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, columns
from pipesim.schedules.ir import Action, Kind, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.metrics import Accounting

# (coefficient of the activation, coefficient of its weight-gradient part) per change
_TAKE = (1.0, 0.0)
_CHANGE = {
    Kind.F: _TAKE,
    Kind.B: (-1.0, 0.0),
    Kind.I: (-1.0, 1.0),
    Kind.W: (0.0, -1.0),
}
# the same per ``ATOM_CODE`` (F, B, I, W)
_KEPT = np.asarray([_CHANGE[kind][0] for kind in ATOM_CODE], dtype=np.float64)
_GRAD = np.asarray([_CHANGE[kind][1] for kind in ATOM_CODE], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class MemoryProgram:
    """Every activation change of a schedule in execution order, device after device:
    change ``k`` adds ``kept[k] * activation[group[k]] + grad[k] * weight_grad[group[k]]``
    bytes; device ``d``'s changes are ``starts[d]:starts[d + 1]``."""

    group: np.ndarray
    kept: np.ndarray
    grad: np.ndarray
    starts: np.ndarray


def memory_program(schedule: Schedule) -> MemoryProgram:
    """The schedule's activation changes, in the order each device makes them (an
    overlapped group takes its forwards' activations before giving back its backwards')."""
    if not schedule.is_training:
        raise ValueError("the memory walk is for training schedules (forward-only keeps none)")
    table = columns(schedule)
    if not table.one_each:
        return _walked_program(schedule)
    # one action a node, every kind a change: the columns are the walk
    group_of = np.asarray([schedule.model_stage(s) for s in range(schedule.stages)])
    counts = np.bincount(table.device, minlength=schedule.devices)
    return MemoryProgram(
        group_of[table.stage].astype(np.int64),
        _KEPT[table.kind],
        _GRAD[table.kind],
        np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )


def _walked_program(schedule: Schedule) -> MemoryProgram:
    """``memory_program`` action by action, for schedules with groups."""
    group_of = [schedule.model_stage(s) for s in range(schedule.stages)]
    group, kept, grad, starts = [], [], [], [0]
    for actions in schedule.device_actions:
        for action in actions:
            atoms = action.atoms if action.sub_actions is None else _forwards_first(action)
            for atom in atoms:
                change = _CHANGE.get(atom.kind)
                if change is not None:
                    group.append(group_of[atom.stage])
                    kept.append(change[0])
                    grad.append(change[1])
        starts.append(len(group))
    return MemoryProgram(
        np.asarray(group, dtype=np.int64),
        np.asarray(kept, dtype=np.float64),
        np.asarray(grad, dtype=np.float64),
        np.asarray(starts, dtype=np.int64),
    )


def _forwards_first(group: Action) -> list[Action]:
    """A group's atoms, its forwards (which take memory) before the rest (which give it
    back), each part in its own order."""
    return sorted(group.sub_actions, key=lambda atom: atom.kind != Kind.F)


def peak_activation_bytes(program: MemoryProgram, costs: Costs) -> np.ndarray:
    """The peak activation bytes each device holds when it runs in order (see above)."""
    kept = np.asarray(costs.activation_memory_bytes, dtype=np.float64)
    weight_grad = np.asarray(costs.weight_grad_memory_bytes, dtype=np.float64)
    change = program.kept * kept[program.group] + program.grad * weight_grad[program.group]
    starts = program.starts
    lengths = np.diff(starts)
    if not len(lengths) or not lengths.max(initial=0):
        return np.zeros(len(lengths))
    # each device's changes in a row of its own, zeros after its last: a cumulative sum
    # along the rows adds each device's changes in its own order, as a walk would
    rows = np.zeros((len(lengths), int(lengths.max())))
    position = np.arange(len(change)) - np.repeat(starts[:-1], lengths)
    rows[np.repeat(np.arange(len(lengths)), lengths), position] = change
    peaks = np.cumsum(rows, axis=1).max(axis=1)
    return np.where(lengths > 0, np.maximum(peaks, 0.0), 0.0)


class MemoryWalks:
    """A planner's memory walks: each schedule's program, and its peaks under each pair of
    memory terms (activation and weight-gradient bytes per stage), made once; candidates
    that differ in what leaves those alone share them."""

    def __init__(self) -> None:
        self._programs: dict[tuple, MemoryProgram] = {}
        self._peaks: dict[tuple, np.ndarray] = {}

    def add(self, key: tuple, schedule: Schedule) -> None:
        self._programs[key] = memory_program(schedule)

    def peaks(self, key: tuple, costs: Costs) -> np.ndarray:
        """The peak activation bytes each device of schedule ``key`` holds under ``costs``."""
        memory = (key, costs.activation_memory_bytes, costs.weight_grad_memory_bytes)
        if memory not in self._peaks:
            self._peaks[memory] = peak_activation_bytes(self._programs[key], costs)
        return self._peaks[memory]


def exceeds(peak_bytes: np.ndarray, accounting: Accounting) -> bool:
    """Whether static plus peak activation memory, with the runtime's share, passes the
    usable memory (capacity less headroom) on some device (unknown capacity: never)."""
    return any(
        accounting.over_capacity(accounting.device_memory(d, float(peak))[1])
        for d, peak in enumerate(peak_bytes)
    )


def capacity_reason(accounting: Accounting) -> str:
    """The pruning reason for memory, as the user reads it."""
    return f"exceed {usable_text(accounting)} on some device"


def usable_text(accounting: Accounting) -> str:
    """The usable memory in words: "76.0 GiB usable (80 GiB less 5% headroom)"."""
    capacity = accounting.memory_capacity_bytes / 2**30
    if not accounting.memory_headroom:
        return f"{capacity:.0f} GiB"
    return (
        f"{accounting.usable_bytes / 2**30:.1f} GiB usable ({capacity:.0f} GiB less "
        f"{accounting.memory_headroom * 100:.3g}% headroom)"
    )
