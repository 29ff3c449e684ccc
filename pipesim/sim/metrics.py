"""The Report: where the time of one step went, and what memory it took.

"Bubble" means three different numbers in the literature; pipesim keeps each under its
own name (DESIGN.md, "Metrics"):

* ``bubble_fraction = 1 - sum(busy) / (D * makespan)``: the share of all device-time
  spent idle (GPipe, Chimera). GPipe or 1F1B with uniform costs: (p-1)/(m+p-1).
* ``bubble_overhead = makespan / max(busy) - 1``: idle time relative to the useful work
  of the busiest device (Megatron-LM's "bubble time fraction"): (p-1)/m.
* ``span_bubble_rate = 1 - busy / span`` on the device with the longest span, the span
  running from its first start to its last end (the Zero Bubble paper's "bubble rate";
  it does not count a device's late start or early finish).

End-of-step work (the gradient all-reduce where data parallelism reduces gradients, and
the optimizer step: each device's ``allreduce_ms`` and ``optimizer_ms``, and the longest
``tail_ms``) is not a compute action of the schedule: it is counted in the makespan and as
idle time, so ``bubble_fraction`` and ``bubble_overhead`` include it, as does each
device's ``bubble_fraction``, while ``span_bubble_rate`` leaves it out (a device's span
ends with its last compute action).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from itertools import pairwise

import numpy as np

from pipesim.schedules.ir import Schedule
from pipesim.sim.closed_form import Analytic, closed_form
from pipesim.sim.costs import Costs
from pipesim.sim.fast.choose import Evaluator
from pipesim.sim.links import Topology
from pipesim.sim.memory import MemoryTimeline, memory_timelines
from pipesim.sim.trace import END_OF_STEP, ComputeRows, RowKind, Trace


@dataclass(frozen=True, slots=True)
class DeviceReport:
    device: int
    busy_ms: float
    idle_ms: float
    span_ms: float
    bubble_fraction: float
    peak_inflight: int
    peak_activation_bytes: float
    peak_activation_time_ms: float
    static_memory_bytes: float = 0.0
    peak_memory_bytes: float = 0.0  # static + peak activations + runtime
    oom: bool = False
    allreduce_ms: float = 0.0  # end-of-step work, inside idle_ms: the gradient all-reduce
    optimizer_ms: float = 0.0  # and the optimizer step
    runtime_memory_bytes: float = 0.0  # CUDA context, NCCL buffers, fragmentation at the peak

    @property
    def tail_ms(self) -> float:
        return self.allreduce_ms + self.optimizer_ms


@dataclass(frozen=True, slots=True)
class Accounting:
    """What a model and cluster add to a report: static memory, capacity, replicas, FLOPs.

    ``static_memory_bytes[d]``: weights, gradients and optimizer states on device d;
    ``memory_capacity_bytes``: one GPU's memory (0: unknown, no OOM check);
    ``runtime_memory_bytes``: what each device's process holds besides its tensors (CUDA
    context, communication buffers); ``fragmentation``: the share of the allocated bytes
    (static plus activations) the caching allocator holds on top; ``memory_headroom``: the
    share of the capacity the OOM check keeps free (``device_memory``, ``over_capacity``);
    ``replicas``: data-parallel copies of the pipeline (samples/s counts all of them);
    ``flops_per_step`` and ``peak_flops`` (all GPUs of the job, FLOP/s) give MFU;
    ``transient_bytes[d]`` (empty: none): buffers device d holds only while a pass runs
    (expert parallelism's all-to-all buffers), counted in its peak.
    """

    static_memory_bytes: tuple[float, ...]
    memory_capacity_bytes: float = 0.0
    replicas: int = 1
    flops_per_step: float = 0.0
    peak_flops: float = 0.0
    runtime_memory_bytes: float = 0.0
    fragmentation: float = 0.0
    memory_headroom: float = 0.0
    transient_bytes: tuple[float, ...] = ()

    @property
    def usable_bytes(self) -> float:
        """What the OOM check allows a device: the capacity less the headroom."""
        return self.memory_capacity_bytes * (1.0 - self.memory_headroom)

    def device_memory(self, device: int, activation_bytes: float) -> tuple[float, float]:
        """``(runtime bytes, peak bytes)`` of ``device`` holding ``activation_bytes`` at its
        peak: runtime = the fixed runtime + fragmentation x (static + activations), peak =
        static + activations (and transient buffers) + runtime."""
        allocated = float(self.static_memory_bytes[device]) + activation_bytes
        if self.transient_bytes:
            allocated += self.transient_bytes[device]
        runtime = self.runtime_memory_bytes + self.fragmentation * allocated
        return runtime, allocated + runtime

    def over_capacity(self, peak_bytes: float) -> bool:
        """Whether a device's peak passes the usable memory (unknown capacity: never)."""
        return bool(self.memory_capacity_bytes) and peak_bytes > self.usable_bytes


@dataclass(frozen=True, slots=True)
class Report:
    """The metrics of one simulated step (DESIGN.md, "Metrics"), every field typed.

    Analyses on top (Monte Carlo percentiles, the critical path) travel beside the Report,
    on ``pipesim.analysis.run.Result``, not inside it.
    """

    scenario: str
    schedule: str
    devices: int
    stages: int
    microbatches: int
    microbatch_size: int
    makespan_ms: float
    bubble_fraction: float
    bubble_overhead: float
    span_bubble_rate: float
    samples_per_second: float
    tokens_per_second: float | None
    per_device: tuple[DeviceReport, ...]
    analytic: Analytic | None = None
    step_time_ms: float = 0.0  # the makespan, end-of-step collectives included
    mfu: float | None = None
    oom: bool = False
    evaluator: Evaluator = Evaluator.SIMPY  # which computed the timeline: SIMPY or FAST
    tail_ms: float = 0.0  # the longest end-of-step work of a device, idle in the bubbles

    def to_dict(self) -> dict:
        data = asdict(self)
        data["per_device"] = [asdict(d) for d in self.per_device]
        return data

    def scalars(self) -> dict[str, float | int | str | None]:
        """The flat fields (no per-device list, no closed form), e.g. one row of a sweep."""
        data = {k: v for k, v in self.to_dict().items() if not isinstance(v, list | dict)}
        data.pop("analytic", None)  # None where no closed form applies
        data["peak_activation_bytes_max"] = max(d.peak_activation_bytes for d in self.per_device)
        data["peak_inflight_max"] = max(d.peak_inflight for d in self.per_device)
        data["peak_memory_bytes_max"] = max(d.peak_memory_bytes for d in self.per_device)
        return data


def build_report(
    trace: Trace,
    schedule: Schedule,
    costs: Costs | None = None,
    microbatch_size: int = 1,
    *,
    scenario: str = "",
    seq_len: int | None = None,
    topology: Topology | None = None,
    accounting: Accounting | None = None,
    memory: Sequence[MemoryTimeline] | None = None,
) -> Report:
    """Compute every metric of ``trace`` (a pure function of its arrays).

    With ``costs`` (and ``topology``, default ideal links) the closed form for the schedule,
    where one applies, goes into ``analytic``. ``accounting`` adds static memory, the OOM
    check, data-parallel replicas and MFU. ``memory`` (the activation timelines of
    ``pipesim.sim.memory``) is derived from the trace when not given (costs needed).
    """
    if memory is None:
        memory = memory_timelines(trace, schedule, costs) if costs is not None else ()
    accounting = accounting or Accounting((0.0,) * trace.devices)
    makespan = trace.makespan_ms
    busy = busy_ms_per_device(trace)
    per_device = _device_reports(trace, busy, memory, accounting)
    longest = max(per_device, key=lambda r: r.span_ms)
    samples = schedule.microbatches * microbatch_size * accounting.replicas
    seconds = makespan / 1000.0  # 0 for a step shorter than the smallest float's thousandth
    per_second = samples / seconds if seconds > 0 else 0.0
    return Report(
        scenario=scenario,
        schedule=schedule.name,
        devices=trace.devices,
        stages=schedule.stages,
        microbatches=schedule.microbatches,
        microbatch_size=microbatch_size,
        makespan_ms=makespan,
        bubble_fraction=_ratio_left(float(busy.sum()), trace.devices * makespan),
        bubble_overhead=makespan / float(busy.max()) - 1.0 if busy.max() > 0 else 0.0,
        span_bubble_rate=_ratio_left(longest.busy_ms, longest.span_ms),
        samples_per_second=per_second,
        tokens_per_second=per_second * seq_len if seq_len else None,
        per_device=per_device,
        analytic=closed_form(schedule, costs, topology) if costs is not None else None,
        step_time_ms=makespan,
        mfu=_mfu(accounting, makespan),
        oom=any(d.oom for d in per_device),
        tail_ms=max(d.tail_ms for d in per_device),
    )


def _device_reports(
    trace: Trace, busy: np.ndarray, memory: Sequence[MemoryTimeline], accounting: Accounting
) -> tuple[DeviceReport, ...]:
    """Each device's line of the report (``busy``: its compute ms)."""
    allreduce, optimizer = (kind_ms_per_device(trace, k) for k in END_OF_STEP)
    spans = _spans_ms(trace.compute_rows, trace.devices)
    return tuple(
        replace(
            device_report(
                trace,
                d,
                float(busy[d]),
                memory[d] if memory else None,
                accounting,
                span_ms=None if spans is None else spans[d],
            ),
            allreduce_ms=float(allreduce[d]),
            optimizer_ms=float(optimizer[d]),
        )
        for d in range(trace.devices)
    )


def busy_ms_per_device(trace: Trace) -> np.ndarray:
    """Sum of compute durations on each device."""
    rows = trace.compute_rows
    return np.bincount(rows.device, weights=rows.end - rows.start, minlength=trace.devices)


def kind_ms_per_device(trace: Trace, kind: RowKind) -> np.ndarray:
    """Sum of the durations of ``kind``'s rows on each device."""
    if kind in END_OF_STEP:  # known before a deferred Trace lays out its rows
        return trace.end_of_step_ms[kind]
    rows = trace.kind == kind
    durations = trace.end[rows] - trace.start[rows]
    return np.bincount(trace.device[rows], weights=durations, minlength=trace.devices)


def device_report(
    trace: Trace,
    device: int,
    busy_ms: float,
    timeline: MemoryTimeline | None,
    accounting: Accounting,
    span_ms: float | None = None,
) -> DeviceReport:
    """One device's line of the report: time, span, peak activations, static memory
    (``span_ms``: from its first start to its last end, found from the trace if None)."""
    makespan = trace.makespan_ms
    span = span_ms
    if span is None:
        compute = trace.compute_rows
        rows = compute.device == device
        span = float(compute.end[rows].max() - compute.start[rows].min()) if rows.any() else 0.0
    peak_bytes, peak_time, peak_inflight = _memory_peaks(timeline)
    runtime, peak = accounting.device_memory(device, peak_bytes)
    return DeviceReport(
        device=device,
        busy_ms=busy_ms,
        idle_ms=makespan - busy_ms,
        span_ms=span,
        bubble_fraction=_ratio_left(busy_ms, makespan),
        peak_inflight=peak_inflight,
        peak_activation_bytes=peak_bytes,
        peak_activation_time_ms=peak_time,
        static_memory_bytes=float(accounting.static_memory_bytes[device]),
        peak_memory_bytes=peak,
        oom=accounting.over_capacity(peak),
        runtime_memory_bytes=runtime,
    )


def _spans_ms(compute: ComputeRows, devices: int) -> list[float] | None:
    """Each device's span (its last end less its first start, 0 without rows), read
    slice by slice where the rows come device by device (a fast Trace's); None otherwise."""
    device = compute.device
    if len(device) > 1 and not (device[:-1] <= device[1:]).all():
        return None
    bounds = np.searchsorted(device, np.arange(devices + 1)).tolist()
    return [
        float(compute.end[lo:hi].max() - compute.start[lo:hi].min()) if hi > lo else 0.0
        for lo, hi in pairwise(bounds)
    ]


def _memory_peaks(timeline: MemoryTimeline | None) -> tuple[float, float, int]:
    """``(peak activation bytes, when first reached in ms, peak in-flight count)``."""
    if timeline is None or not len(timeline.time):
        return 0.0, 0.0, 0
    peak_index = int(np.argmax(timeline.activation_bytes))
    peak_bytes = float(max(timeline.activation_bytes[peak_index], 0.0))
    peak_time = float(timeline.time[peak_index]) if peak_bytes > 0 else 0.0
    return peak_bytes, peak_time, int(max(timeline.inflight.max(), 0))


def _ratio_left(part: float, whole: float) -> float:
    """``1 - part / whole``, 0 for an empty whole."""
    return 1.0 - part / whole if whole > 0 else 0.0


def _mfu(accounting: Accounting, makespan_ms: float) -> float | None:
    seconds = makespan_ms / 1000.0
    if not accounting.peak_flops or seconds <= 0:
        return None
    return accounting.flops_per_step / seconds / accounting.peak_flops
