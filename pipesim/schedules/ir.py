"""The schedule IR: what each device runs, in which order.

A pipeline schedule is a to-do list per device. Each entry is an ``Action``:
run one kind of computation (forward, backward, or half of a split backward)
of one stage on one microbatch. The text form is torch.distributed.pipelining's,
so schedules move between pipesim and torch/torchtitan unchanged:

* ``2F0``  stage 2, forward, microbatch 0
* ``2B0``  full backward (input and weight gradients)
* ``2I0``  backward for the input gradient only
* ``2W0``  backward for the weight gradient only
* ``(0F7;7B3)OVERLAP_F_B``  a forward and a backward run as one overlapped unit (torch
  accepts any group of compute actions there, and so does pipesim)

A ``Schedule`` is the per-device lists plus the placement (which device holds
each stage) and the chains: the stage ranges a microbatch walks through. An
ordinary pipeline is one chain over all stages; bidirectional schedules
(DualPipe, Chimera) run two model copies as two chains. A schedule read from torch's
lowered form also keeps its runtime posts (``pipesim.schedules.posts``).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from pipesim.schedules.grid import format_grid
from pipesim.schedules.lists import ActionLists
from pipesim.schedules.posts import P2P_KINDS, REDUCE_GRAD, Placed, Post


class ScheduleError(ValueError):
    """A schedule that breaks the rules (missing/duplicate action, wrong device, bad order)."""


class ConstraintError(ScheduleError):
    """A schedule policy cannot be built for these sizes (e.g. DualPipe needs an even D)."""


def require(condition: bool, message: str) -> None:
    """Raise ConstraintError(message) unless ``condition``; policies state their limits this way."""
    if not condition:
        raise ConstraintError(message)


class Kind(StrEnum):
    F = "F"
    B = "B"
    I = "I"  # noqa: E741 - torch's name for the input-gradient backward
    W = "W"
    OVERLAP_F_B = "OVERLAP_F_B"


F, B, I, W = Kind.F, Kind.B, Kind.I, Kind.W  # noqa: E741
OVERLAP_F_B = Kind.OVERLAP_F_B


class Action(NamedTuple):
    """One unit of work. ``sub_actions`` is set only for a group (``OVERLAP_F_B``), whose
    ``stage`` and ``microbatch`` are then -1."""

    stage: int
    kind: Kind
    microbatch: int
    sub_actions: tuple[Action, ...] | None = None

    def __str__(self) -> str:
        if self.sub_actions is not None:
            return f"({';'.join(str(a) for a in self.sub_actions)}){self.kind}"
        return f"{self.stage}{self.kind}{self.microbatch}"

    def __repr__(self) -> str:
        return str(self)

    @property
    def atoms(self) -> tuple[Action, ...]:
        """The simple actions this action performs (itself, or its sub-actions)."""
        return self.sub_actions if self.sub_actions is not None else (self,)


def overlapped(forward: Action, backward: Action) -> Action:
    """A forward and a backward of different stages run as one overlapped unit."""
    if forward.kind != F or backward.kind not in (B, I):
        raise ScheduleError(
            f"an overlapped pair is a forward then a backward, got {forward}, {backward}"
        )
    return Action(-1, OVERLAP_F_B, -1, (forward, backward))


def group(*atoms: Action) -> Action:
    """Compute actions run as one unit, in torch's ``(a;b;...)OVERLAP_F_B`` form.

    torch's runtime runs the members one after the other without returning to its list in
    between; pipesim runs the group as one action that waits for all its members' inputs
    and ships all their outputs at its end. The policies build only forward-then-backward
    pairs (``overlapped``); torch's CSV may hold any group.
    """
    if not atoms or any(a.sub_actions is not None for a in atoms):
        raise ScheduleError(f"a group holds one or more simple actions, got {atoms}")
    return Action(-1, OVERLAP_F_B, -1, tuple(atoms))


_SIMPLE = re.compile(  # ASCII digits (\d takes '٣'), 1000 at most (int() refuses 5000)
    r"^\s*([0-9]{1,1000})\s*(F|B|I|W|BW|FULL_BACKWARD|BACKWARD_INPUT|BACKWARD_WEIGHT)\s*([0-9]{1,1000})\s*$"
)
_COMPOUND = re.compile(r"^\s*\((.*)\)\s*OVERLAP_F_B\s*$")
_ALIASES = {"FULL_BACKWARD": B, "BW": B, "BACKWARD_INPUT": I, "BACKWARD_WEIGHT": W}


def parse_action(text: str) -> Action:
    """Parse torch's text form (``2F0``, ``(0F7;7B3)OVERLAP_F_B``) into an Action."""
    compound = _COMPOUND.match(text)
    if compound:
        inner = compound.group(1)
        if "(" in inner or ")" in inner or not inner.strip():
            raise ScheduleError(
                f"cannot parse {text!r}: a group holds simple actions, e.g. (0F7;7B3)OVERLAP_F_B"
            )
        return group(*(parse_action(p) for p in inner.split(";")))
    simple = _SIMPLE.match(text)
    if not simple:
        raise ScheduleError(
            f"cannot parse action {text[:60]!r}: expected <stage><F|B|I|W><microbatch> such as 2F0, "
            "or (aFb;cBd)OVERLAP_F_B"
        )
    kind_text = simple.group(2)
    kind = _ALIASES.get(kind_text) or Kind(kind_text)
    return Action(int(simple.group(1)), kind, int(simple.group(3)))


@dataclass(frozen=True, slots=True)
class Chain:
    """A range of stages ``[first_stage, last_stage]`` that ``microbatches`` walk through.

    Stage ``first_stage + k`` of the chain runs layer group ``k`` of the model; costs are
    looked up by that model-stage index, so two chains can be two copies of one model.
    """

    first_stage: int
    last_stage: int
    microbatches: range

    @property
    def stages(self) -> range:
        return range(self.first_stage, self.last_stage + 1)


@dataclass(frozen=True, slots=True)
class Schedule:
    """Per-device ordered action lists plus placement (``placement[stage] = device``).

    ``device_actions`` is a tuple of tuples, or, for a policy that builds in bulk, an
    ``ActionLists`` that makes them on first read (``pipesim.schedules.lists``)."""

    device_actions: Sequence[tuple[Action, ...]]
    placement: tuple[int, ...]
    chains: tuple[Chain, ...]
    name: str = "custom"
    posts: tuple[tuple[Placed, ...], ...] = ()  # per device; () for a compute-only schedule
    _stage_chain: tuple[int, ...] = field(default=(), repr=False, compare=False)
    _chunks: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)
    # what is derived from the lists once and read by several passes (``columns``, the
    # validator's verdict); a replaced schedule starts with none
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self._chunks:  # each stage's index among its device's stages, in one pass
            chunks: list[int] = []
            seen: dict[int, int] = {}
            for device in self.placement:
                chunks.append(seen.get(device, 0))
                seen[device] = chunks[-1] + 1
            object.__setattr__(self, "_chunks", tuple(chunks))
        if not self._stage_chain:
            owner = [-1] * len(self.placement)
            for index, chain in enumerate(self.chains):
                for stage in chain.stages:
                    if 0 <= stage < len(owner):
                        owner[stage] = index
            object.__setattr__(self, "_stage_chain", tuple(owner))

    @property
    def devices(self) -> int:
        return len(self.device_actions)

    @property
    def stages(self) -> int:
        return len(self.placement)

    @property
    def microbatches(self) -> int:
        return sum(len(c.microbatches) for c in self.chains)

    @property
    def model_stages(self) -> int:
        """Distinct layer groups of the model (stages of the longest chain)."""
        return max(len(c.stages) for c in self.chains)

    @property
    def num_actions(self) -> int:
        if isinstance(self.device_actions, ActionLists):
            return self.device_actions.atoms
        return sum(len(a.atoms) for actions in self.device_actions for a in actions)

    @property
    def stage_chain(self) -> tuple[int, ...]:
        """Per stage, the index in ``chains`` of the chain that runs it (-1: none)."""
        return self._stage_chain

    def chain_of(self, stage: int) -> Chain:
        return self.chains[self._stage_chain[stage]]

    def model_stage(self, stage: int) -> int:
        """Index of the model's layer group that ``stage`` runs (costs are per model stage)."""
        return stage - self.chains[self._stage_chain[stage]].first_stage

    def prev_stage(self, stage: int) -> int | None:
        """The stage whose forward output feeds ``stage`` (None at a chain's start)."""
        chain = self.chains[self._stage_chain[stage]]
        return None if stage == chain.first_stage else stage - 1

    def next_stage(self, stage: int) -> int | None:
        """The stage whose backward sends its gradient to ``stage`` (None at a chain's end)."""
        chain = self.chains[self._stage_chain[stage]]
        return None if stage == chain.last_stage else stage + 1

    def chunk(self, stage: int) -> int:
        """Index of ``stage`` among the stages its device holds (the virtual-stage index)."""
        return self._chunks[stage]

    def derived(self, key: str, build: Callable[[Schedule], object]) -> object:
        """``build(self)``, built once and kept with the schedule under ``key``."""
        if key not in self._memo:
            self._memo[key] = build(self)
        return self._memo[key]

    def program(self, device: int) -> list[Action | Post]:
        """The device's compute actions and posts in the order its runtime meets them."""
        actions, items, cursor = self.device_actions[device], [], 0
        for at, post in self.posts[device] if self.posts else ():
            items += actions[cursor:at]
            cursor = max(cursor, at)
            items.append(post)
        return items + list(actions[cursor:])

    @property
    def has_p2p_posts(self) -> bool:
        """True for torch's lowered form: transfers leave only where SEND and RECV are posted."""
        return any(p.kind in P2P_KINDS for placed in self.posts for _, p in placed)

    @property
    def has_reduce_grad_posts(self) -> bool:
        """True when REDUCE_GRAD posts place each stage's data-parallel gradient reduction."""
        return any(p.kind == REDUCE_GRAD for placed in self.posts for _, p in placed)

    @property
    def is_training(self) -> bool:
        if isinstance(self.device_actions, ActionLists):
            return self.device_actions.training
        return any(a.kind != F for actions in self.device_actions for a in actions)

    def __str__(self) -> str:
        return format_grid(self)


def single_chain(stages: int, microbatches: int) -> tuple[Chain, ...]:
    return (Chain(0, stages - 1, range(microbatches)),)


def loop_placement(devices: int, virtual_stages: int) -> tuple[int, ...]:
    """Interleaved (Megatron) placement: stage s on device s mod D."""
    return tuple(s % devices for s in range(devices * virtual_stages))


def v_placement(devices: int) -> tuple[int, ...]:
    """V placement (ZB-V, DualPipeV): stage s on device s for s < D, else 2D-1-s."""
    return tuple(s if s < devices else 2 * devices - 1 - s for s in range(2 * devices))


# ---------------------------------------------------------------------------
# torch's compute-only CSV: one row per rank, one cell per action


def to_csv(schedule: Schedule, lineterminator: str = "\n") -> str:
    """Torch's compute-only CSV: row r lists rank r's actions in order.

    torch's ``_dump_csv`` ends its rows with ``\r\n`` (``csv.writer``'s default): pass that
    for a byte-identical file (``pipesim.schedules.torch_csv.to_torch_csv`` does)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=lineterminator)
    for actions in schedule.device_actions:
        writer.writerow([str(a) for a in actions])
    return buffer.getvalue()


def from_csv(text: str, name: str = "csv") -> Schedule:
    """Read torch's compute-only CSV; placement and chains are inferred from the actions.

    Empty cells (torch writes them for idle steps) are skipped. Each stage must appear on one
    rank only; each microbatch's stages must form a contiguous range, and the distinct
    ranges must split the stages without overlap (one range: an ordinary pipeline; two: a
    bidirectional schedule such as DualPipe or Chimera).
    """
    rows = list(csv.reader(io.StringIO(text)))
    device_actions: list[tuple[Action, ...]] = []
    for rank, row in enumerate(rows):
        actions = []
        for column, cell in enumerate(row):
            if cell.strip() in ("", "None"):
                continue
            try:
                actions.append(parse_action(cell))
            except ScheduleError as exc:
                raise ScheduleError(f"row {rank + 1}, column {column + 1}: {exc}") from None
        device_actions.append(tuple(actions))
    return schedule_from_lists(device_actions, name=name)


def schedule_from_lists(
    device_actions: Sequence[Iterable[Action]], name: str = "custom"
) -> Schedule:
    """Build a Schedule from per-device lists alone, inferring placement and chains."""
    lists = tuple(tuple(a) for a in device_actions)
    if not lists or not any(lists):
        raise ScheduleError("the schedule has no actions")
    where: dict[int, int] = {}
    atoms = [atom for actions in lists for action in actions for atom in action.atoms]
    biggest = max(atom.microbatch for atom in atoms)
    if biggest >= len(atoms):  # indices run 0..m-1, and each microbatch needs an action
        raise ScheduleError(
            f"microbatch {biggest}: a schedule of {len(atoms)} actions holds microbatches "
            f"0..{len(atoms) - 1} at most"
        )
    for device, actions in enumerate(lists):
        for action in actions:
            for atom in action.atoms:
                other = where.setdefault(atom.stage, device)
                if other != device:
                    raise ScheduleError(
                        f"stage {atom.stage} appears on rank {other} and rank {device} ({atom})"
                    )
    stages = max(where) + 1
    if len(where) != stages:  # found without walking 0..stages: an index may be huge
        unplaced = next(s for s, placed in enumerate(sorted(where)) if s != placed)
        raise ScheduleError(f"stage {unplaced} has no actions (stages 0..{stages - 1} expected)")
    placement = tuple(where[s] for s in range(stages))
    return Schedule(lists, placement, _infer_chains(lists, stages), name)


def _infer_chains(lists: tuple[tuple[Action, ...], ...], stages: int) -> tuple[Chain, ...]:
    seen_stages: dict[int, set[int]] = {}
    for actions in lists:
        for action in actions:
            for atom in action.atoms:
                seen_stages.setdefault(atom.microbatch, set()).add(atom.stage)
    ranges: dict[tuple[int, int], list[int]] = {}
    for mb, ss in sorted(seen_stages.items()):
        lo, hi = min(ss), max(ss)
        if len(ss) != hi - lo + 1:
            gap = min(set(range(lo, hi + 1)) - ss)
            raise ScheduleError(
                f"microbatch {mb} skips stage {gap} (it runs on stages {sorted(ss)})"
            )
        ranges.setdefault((lo, hi), []).append(mb)
    spans = sorted(ranges)
    for (lo1, hi1), (lo2, hi2) in zip(spans, spans[1:], strict=False):
        if lo2 <= hi1:
            raise ScheduleError(
                f"microbatches {ranges[(lo1, hi1)][:3]} run stages {lo1}..{hi1} but microbatches "
                f"{ranges[(lo2, hi2)][:3]} run stages {lo2}..{hi2}; every microbatch must run "
                "all stages of its pipeline"
            )
    chains = []
    for lo, hi in spans:
        mbs = sorted(ranges[(lo, hi)])
        if mbs != list(range(mbs[0], mbs[0] + len(mbs))):
            raise ScheduleError(
                f"microbatches of stages {lo}..{hi} must be consecutive, got {mbs[:8]}"
            )
        chains.append(Chain(lo, hi, range(mbs[0], mbs[0] + len(mbs))))
    if sum(len(c.stages) for c in chains) != stages:
        raise ScheduleError(f"some of stages 0..{stages - 1} are run by no microbatch")
    return tuple(chains)
