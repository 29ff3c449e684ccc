"""Read a measured run as a timeline, and fit the host overhead model from real runs.

A real runtime does more than compute. Between two compute calls a rank posts sends and
receives, runs Python bookkeeping and launches kernels; and a message between ranks takes
time to arrive. pipesim models both with two numbers (DESIGN: engine semantics):

* ``overhead_ms``: added to every compute action's duration (the device is busy for it);
* ``hop_ms``: the latency of every cross-device hop, from the producer's end (its
  overhead included) until the consumer can start.

Fitting them from a run: on each rank, the gaps between consecutive compute calls are
either waiting for a message (the time spent inside the runtime's receive waits) or
overhead; ``overhead_ms`` is the non-waiting gap time per gap. A hop is observed where the
consumer actually waited: then its start is the message's arrival, and
``hop = consumer start - (producer end + overhead)``; ``hop_ms`` is the median of those.

Neither number can describe a stalled post. Posting a send or a receive takes tens of
microseconds; but on a machine with more runnable threads than cores, the post that
completes a send/receive pair can sit blocked for a scheduler tick (several ms) while the
transport's thread waits for a core, and its peer's post or wait stalls with it. Those
stalls land on random actions, so no per-action constant reproduces them; ``post_stalls_ms``
measures them, so that a run disturbed by other processes shows as such.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from pipesim.calibrate.realrun import ACTION, COMPUTE, WAIT, MeasuredRun
from pipesim.scenario.profile import HostOverhead, ProfileError
from pipesim.schedules.dependencies import dependencies
from pipesim.schedules.ir import Action, Kind, Schedule, from_csv, parse_action
from pipesim.sim.costs import Costs

# A send or receive post longer than this sat blocked in the transport (module docstring);
# an unhindered post takes 0.02-0.1 ms on CPU.
STALLED_POST_MS = 1.0
_POSTS = ("SEND_", "RECV_")

# A wait shorter than this found its message already there: it is overhead, not waiting.
WAITED_MS = 0.05

# The factor between measured and profiled compute that a profile can hold.
SCALE_RANGE = (1e-6, 1e6)

ActionKey = tuple[int, Kind, int]  # (stage, kind, microbatch)


@dataclass(frozen=True)
class Timeline:
    """A measured run as compute intervals (ms from the first compute start) and waits."""

    schedule: Schedule
    start: dict[ActionKey, float]
    end: dict[ActionKey, float]
    device: dict[ActionKey, int]
    waited_before: dict[ActionKey, float]  # time spent in receive waits just before it

    @property
    def makespan_ms(self) -> float:
        return max(self.end.values())

    def duration_ms(self, key: ActionKey) -> float:
        return self.end[key] - self.start[key]


def schedule_of(run: MeasuredRun) -> Schedule:
    return from_csv(run.meta["csv"], run.schedule_name)


def timeline(run: MeasuredRun, schedule: Schedule | None = None) -> Timeline:
    """The compute intervals of a run, keyed by action, with the waits before each."""
    schedule = schedule or schedule_of(run)
    starts, ends, devices, waited = {}, {}, {}, {}
    for device, spans in enumerate(run.ranks):
        pending_wait = 0.0
        for span in sorted(spans, key=lambda s: (s.start_ms, s.end_ms)):
            if span.category == WAIT:
                pending_wait += span.end_ms - span.start_ms
            elif span.category == COMPUTE:
                action = parse_action(span.name)
                key = (action.stage, action.kind, action.microbatch)
                starts[key], ends[key], devices[key] = span.start_ms, span.end_ms, device
                waited[key] = pending_wait
                pending_wait = 0.0
    if not starts:
        raise ValueError(f"run of {run.schedule_name} holds no compute spans")
    origin = min(starts.values())
    starts = {k: v - origin for k, v in starts.items()}
    ends = {k: v - origin for k, v in ends.items()}
    return Timeline(schedule, starts, ends, devices, waited)


def overhead_gaps(line: Timeline) -> list[float]:
    """Per rank, each gap between consecutive compute calls minus the waiting inside it."""
    gaps = []
    by_device: dict[int, list[ActionKey]] = {}
    for key, device in line.device.items():
        by_device.setdefault(device, []).append(key)
    for keys in by_device.values():
        keys.sort(key=lambda k: line.start[k])
        for before, after in zip(keys, keys[1:], strict=False):
            gap = line.start[after] - line.end[before] - line.waited_before[after]
            gaps.append(max(gap, 0.0))
    return gaps


def hop_samples(line: Timeline, overhead_ms: float) -> list[float]:
    """Observed hop times: consumer start - (producer end + overhead), where it waited."""
    schedule, samples, deps = line.schedule, [], dependencies(line.schedule)
    for key, start in line.start.items():
        candidates = deps.message_producers(Action(*key))
        if not candidates or schedule.placement[candidates[0][0]] == schedule.placement[key[0]]:
            continue
        producer = next((c for c in candidates if c in line.end), None)
        if producer is not None and line.waited_before[key] > WAITED_MS:
            samples.append(start - (line.end[producer] + overhead_ms))
    return samples


def fit_host(runs: Iterable[MeasuredRun], profiled: Costs | None = None) -> HostOverhead:
    """Fit ``overhead_ms`` and ``hop_ms`` over one or more measured runs (module docstring);
    with the ``profiled`` op costs, also ``compute_scale``: the median ratio of each
    action's measured duration to its profiled one."""
    runs = list(runs)
    gaps, lines = [], []
    for run in runs:
        line = timeline(run)
        lines.append(line)
        gaps += overhead_gaps(line)
    scale = compute_scale(lines, profiled) if profiled is not None else 1.0
    low, high = SCALE_RANGE
    if not low <= scale <= high:  # NaN included: a profile must load what fit writes
        raise ProfileError(
            f"{', '.join(run.source or run.schedule_name for run in runs)[:200]}: the measured "
            f"compute takes {scale:g} times the profile's; expected a factor from {low:g} to "
            f"{high:g} (are the runs and the profile of one model?)"
        )
    if not gaps:
        return HostOverhead(0.0, 0.0, 0, scale)
    overhead = _time_ms(float(np.mean(gaps)))
    hops = [h for line in lines for h in hop_samples(line, overhead)]
    hop = _time_ms(float(np.median(hops))) if hops else 0.0
    return HostOverhead(overhead, hop, len(gaps) + len(hops), scale)


def _time_ms(value: float) -> float:
    """A fitted time as a profile holds it: at least 0 and, where not 0, at least 1e-9 ms
    (a smaller figure is the rounding of a subtraction, not a time)."""
    return value if value >= 1e-9 else 0.0


def compute_scale(lines: list[Timeline], profiled: Costs) -> float:
    """Median of measured / profiled duration over every compute action of the runs.

    Ops timed alone run faster than the same ops beside other ranks that share the cores,
    caches and memory bandwidth; this factor, fitted on a calibration run, carries that
    into the prediction.
    """
    ratios = []
    for line in lines:
        for key in line.start:
            stage, kind, _ = key
            base = profiled.duration_ms(kind, line.schedule.model_stage(stage))
            if base > 0:
                ratios.append(line.duration_ms(key) / base)
    return float(np.median(ratios)) if ratios else 1.0


def post_stalls_ms(run: MeasuredRun) -> float:
    """Time (ms, summed over ranks) that posts of sends and receives sat blocked in one run.

    Only posts longer than ``STALLED_POST_MS`` count. Near zero on an uncontended machine;
    several ms per stall where the ranks' threads compete for cores (module docstring).
    """
    total = 0.0
    for spans in run.ranks:
        for span in spans:
            if span.category == ACTION and any(p in span.name for p in _POSTS):
                duration = span.end_ms - span.start_ms
                if duration > STALLED_POST_MS:
                    total += duration
    return total
