"""``pipesim validate``: every check a scenario can pass or fail without being simulated.

Validating builds what ``pipesim run`` builds (schema, schedule constraints, costs, links,
the size guard) and, for a scenario with a ``serving:`` section, what ``pipesim serve``
builds (its replicas, the KV cache the weights leave room for, one node per replica unless
an inter-node link is given, the requests), with the same functions, so it refuses what
they refuse in the same words.

Then it weighs memory as ``pipesim run`` flags it: a device is out of memory where its
static memory (weights, gradients, optimizer states; KV cache in decode mode), the
peak activations it holds and the runtime's share (CUDA context, communication buffers,
allocator fragmentation) pass one GPU's memory less ``hardware.memory_headroom``. The peak comes without a timeline: a
device runs its actions in order, so walking its list and adding what each takes and
gives back gives the peak (``pipesim.analysis.plan.prune``, the walk the planner prunes
with). It equals the simulated peak except where an action ends at the very instant the
next one on its device starts and the timeline lists the start first; there it is lower,
so an OOM flagged here is one ``pipesim run`` flags too.

A serving scenario that ``pipesim run`` cannot build is still valid for ``pipesim serve``:
``run_refusal`` says why run would refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipesim.analysis.plan.prune import memory_program, peak_activation_bytes
from pipesim.analysis.run import memory_capacity_bytes
from pipesim.scenario.build import (
    Scenario,
    apply_overrides,
    build_scenario,
    parse_spec,
    read_mapping,
)
from pipesim.scenario.schema import ScenarioError
from pipesim.scenario.serving import ServingScenario, build_serving
from pipesim.schedules.ir import Kind, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.metrics import Accounting


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """One device's memory at its peak, named as in ``pipesim run``'s report."""

    device: int
    static_memory_bytes: float
    peak_activation_bytes: float
    peak_memory_bytes: float  # static + peak activations + runtime
    oom: bool
    runtime_memory_bytes: float = 0.0  # CUDA context, NCCL buffers, fragmentation
    transient_bytes: float = 0.0  # expert parallelism's all-to-all buffers, during a pass


@dataclass(frozen=True, slots=True)
class Validation:
    """A scenario that passed every check: what run builds (None where only serve can
    use it: ``run_refusal`` says why), what serve builds (None without ``serving:``), and
    each device's memory with the GPU's (``memory_capacity_bytes``, None: unknown)."""

    source: str
    scenario: Scenario | None
    serving: ServingScenario | None = None
    memory: tuple[DeviceMemory, ...] = ()
    memory_capacity_bytes: float | None = None
    run_refusal: str = ""

    @property
    def oom(self) -> bool:
        return any(d.oom for d in self.memory)

    @property
    def memory_headroom(self) -> float:
        """The share of the GPU's memory the OOM check keeps free."""
        accounting = None if self.scenario is None else self.scenario.accounting
        return 0.0 if accounting is None else accounting.memory_headroom

    @property
    def has_static_memory(self) -> bool:
        return any(d.static_memory_bytes for d in self.memory)

    def to_dict(self) -> dict:
        data: dict = {"scenario": self.source, "ok": True}
        if self.scenario is not None:
            s = self.scenario.schedule
            data.update(
                schedule=s.name,
                devices=s.devices,
                stages=s.stages,
                microbatches=s.microbatches,
                actions=s.num_actions,
                oom=self.oom,
                memory_capacity_bytes=self.memory_capacity_bytes,
                memory_headroom=self.memory_headroom,
                per_device=[_device_dict(d) for d in self.memory],
            )
        else:
            data["run_refusal"] = self.run_refusal
        if self.serving is not None:
            data["serving"] = serving_summary(self.serving)
        return data


def _device_dict(memory: DeviceMemory) -> dict:
    return {
        "device": memory.device,
        "static_memory_bytes": memory.static_memory_bytes,
        "peak_activation_bytes": memory.peak_activation_bytes,
        "runtime_memory_bytes": memory.runtime_memory_bytes,
        "peak_memory_bytes": memory.peak_memory_bytes,
        "oom": memory.oom,
    }


def serving_summary(serving: ServingScenario) -> dict:
    """What serve would run: its replicas, their sizes, the KV cache and the requests."""
    config = serving.config
    return {
        "replicas": config.replicas,
        "pipeline": config.replica.stages,
        "tensor": serving.spec.parallel.tensor,
        "kv_blocks": config.replica.kv_blocks,
        "block_size": config.replica.block_size,
        "requests": len(serving.requests),
        "costs": serving.costs_from,
    }


def validate_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Validation:
    """Check the scenario file ``path`` under ``overrides`` as run and serve would, without
    simulating it; ScenarioError (or ScheduleError) on the first problem."""
    source = str(path)
    spec = parse_spec(apply_overrides(read_mapping(path), list(overrides)), source)
    serving = build_serving(spec, source) if spec.serving is not None else None
    try:
        scenario = build_scenario(spec, source)
    except ScenarioError as exc:
        if serving is None:
            raise
        reason = str(exc).splitlines()[0].removeprefix(f"{source}: ")
        return Validation(source, None, serving, run_refusal=reason)
    capacity = memory_capacity_bytes(scenario)
    return Validation(source, scenario, serving, device_memory(scenario), capacity)


def device_memory(scenario: Scenario) -> tuple[DeviceMemory, ...]:
    """Each device's static memory, peak activations (in the order it runs, see above)
    and their sum, flagged OOM past the GPU's memory as ``pipesim run`` flags it."""
    schedule = scenario.schedule
    peaks = ordered_peaks(schedule, scenario.costs)
    accounting = scenario.accounting or Accounting((0.0,) * schedule.devices)
    memory = []
    for d in range(schedule.devices):
        runtime, total = accounting.device_memory(d, float(peaks[d]))
        static = float(accounting.static_memory_bytes[d])
        oom = accounting.over_capacity(total)
        buffers = accounting.transient_bytes[d] if accounting.transient_bytes else 0.0
        memory.append(DeviceMemory(d, static, float(peaks[d]), total, oom, runtime, buffers))
    return tuple(memory)


def ordered_peaks(schedule: Schedule, costs: Costs) -> np.ndarray:
    """The peak activation bytes of each device running its list in order. A step with no
    backward holds an activation only while its F runs: the largest one it runs."""
    if schedule.is_training:
        return peak_activation_bytes(memory_program(schedule), costs)
    kept = costs.activation_memory_bytes
    return np.array(
        [
            max(
                (
                    float(kept[schedule.model_stage(atom.stage)])
                    for action in actions
                    for atom in action.atoms
                    if atom.kind == Kind.F
                ),
                default=0.0,
            )
            for actions in schedule.device_actions
        ]
    )
