"""Cross-check: run a schedule for real, simulate it, and report how far apart they are.

Three figures, the way Lumos, Proteus and vTrain report theirs (signed fractions,
``simulated / measured - 1``):

* ``prediction_error``: the makespan simulated from a profile (op timings measured in
  isolation, plus the fitted host overhead and hop), against the median measured makespan.
  This is what a user gets before running anything.
* ``replay_error``: the makespan simulated with each action's own measured duration, so
  only the engine's dependency, overhead and communication modelling is under test.
* start-time error: per action, ``|simulated start - measured start|`` (p50 and p90).

Both makespans run from the first compute start to the last compute end; the engine
adds the overhead after each action, so the simulated one drops the last action's.
``post_stall_ms`` (median over the runs) is the time the ranks sat blocked
posting sends and receives (``fit.post_stalls_ms``): milliseconds of it mean the ranks
competed for cores with other processes, and every figure of that check measures the
machine's load as much as the schedule.

They are set next to ``measured_spread``, ``(max - min) / median`` of the measured
makespans over the runs: a prediction inside the run-to-run spread is as good as a
measurement.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from pipesim.calibrate.fit import ActionKey, Timeline, fit_host, post_stalls_ms, timeline
from pipesim.calibrate.realrun import MeasuredRun
from pipesim.scenario.profile import HostOverhead
from pipesim.schedules.ir import Action, Kind, Schedule
from pipesim.sim.costs import Costs, uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.export import to_chrome_trace
from pipesim.sim.links import Link, Topology
from pipesim.sim.trace import trace_from_frame


@dataclass(frozen=True)
class CrossCheck:
    """The comparison of one schedule's real runs with its simulation (times in ms)."""

    schedule: str
    devices: int
    microbatches: int
    runs: int
    measured_makespan_ms: float
    measured_min_ms: float
    measured_max_ms: float
    measured_spread: float
    simulated_makespan_ms: float
    prediction_error: float
    replay_error: float
    replay_errors: tuple[float, ...]
    start_error_p50_ms: float
    start_error_p90_ms: float
    host: HostOverhead
    post_stall_ms: float = 0.0  # median over the runs
    post_stalls_ms: tuple[float, ...] = ()  # one per run

    def to_dict(self) -> dict:
        out = asdict(self)
        out["replay_errors"] = list(self.replay_errors)
        out["post_stalls_ms"] = list(self.post_stalls_ms)
        return out


# ---------------------------------------------------------------------------
# Simulation helpers


def host_topology(devices: int, host: HostOverhead) -> Topology:
    """A uniform topology whose every hop costs the fitted ``hop_ms``."""
    return Topology(devices, Link(host.hop_ms * 1000.0, math.inf, "fitted hop"))


def with_overhead(costs: Costs, overhead_ms: float) -> Costs:
    from dataclasses import replace

    return replace(costs, overhead_ms=overhead_ms)


def simulate_starts(
    schedule: Schedule,
    costs: Costs,
    topology: Topology,
    durations: dict[ActionKey, float] | None = None,
) -> tuple[dict[ActionKey, float], float, object]:
    """Simulate with the engine; returns compute starts per action, the makespan, the trace.

    ``durations`` replaces each action's duration by its own figure (a replay).
    """

    scale = None
    if durations is not None:
        model_stage = schedule.model_stage

        def scale(device, action):
            base = costs.duration_ms(action.kind, model_stage(action.stage))
            return durations[(action.stage, action.kind, action.microbatch)] / base

    trace = simulate(schedule, costs, topology, duration_scale=scale)
    frame = trace.frame
    compute = frame[frame["lane"] == "compute"]
    starts = {
        (int(s), Kind(k), int(m)): float(t)
        for s, k, m, t in zip(
            compute["stage"], compute["kind"], compute["microbatch"], compute["start"], strict=True
        )
    }
    makespan = float(compute["end"].max()) - costs.overhead_ms
    return starts, makespan, trace


def measured_costs(lines: list[Timeline]) -> Costs:
    """Per model stage and kind, the median measured compute duration (ms) over the runs."""
    schedule = lines[0].schedule
    table: dict[tuple[int, Kind], list[float]] = {}
    for line in lines:
        for key in line.start:
            stage, kind, _ = key
            table.setdefault((schedule.model_stage(stage), kind), []).append(line.duration_ms(key))
    stages = schedule.model_stages

    def med(kind: Kind, default: float) -> list[float]:
        return [
            float(np.median(table[(s, kind)])) if (s, kind) in table else default
            for s in range(stages)
        ]

    forward = med(Kind.F, 1.0)
    if any((s, Kind.I) for s in range(stages) if (s, Kind.I) in table):
        inp, wgt = med(Kind.I, 1.0), med(Kind.W, 1.0)
        full = med(Kind.B, 0.0)
        full = [f if f > 0 else i + w for f, i, w in zip(full, inp, wgt, strict=True)]
        return uniform_costs(stages, forward, full, backward_input_ms=inp, backward_weight_ms=wgt)
    return uniform_costs(stages, forward, med(Kind.B, 1.0))


def replay_makespan(line: Timeline, host: HostOverhead) -> float:
    """Simulate one run with every action's own measured duration and the fitted host."""
    costs = with_overhead(measured_costs([line]), host.overhead_ms)
    durations = {k: max(line.duration_ms(k), 1e-9) for k in line.start}
    _, makespan, _ = simulate_starts(
        line.schedule, costs, host_topology(line.schedule.devices, host), durations
    )
    return makespan


# ---------------------------------------------------------------------------
# The comparison


def cross_check(
    runs: list[MeasuredRun],
    costs: Costs,
    host: HostOverhead | None = None,
    calibration: list[MeasuredRun] | None = None,
) -> tuple[CrossCheck, object]:
    """Compare measured runs of one schedule with pipesim.

    ``costs`` are the op timings to predict with (a profile's); the host overhead, hop and
    compute scale come from ``host`` if given, else are fitted on the ``calibration`` runs
    (never on the runs being judged), else none. Replays fit their host model on the run they replay.
    Returns the figures and the simulated Trace of the prediction.
    """
    if not runs:
        raise ValueError("cross_check needs at least one measured run")
    lines = [timeline(run) for run in runs]
    schedule = lines[0].schedule
    if host is None:
        host = fit_host(calibration, costs) if calibration else HostOverhead()
    measured = np.array([line.makespan_ms for line in lines])
    median = float(np.median(measured))
    predicted_costs = with_overhead(costs.scaled(host.compute_scale), host.overhead_ms)
    starts, simulated, trace = simulate_starts(
        schedule, predicted_costs, host_topology(schedule.devices, host)
    )
    replays = tuple(
        replay_makespan(line, fit_host([run])) / line.makespan_ms - 1
        for line, run in zip(lines, runs, strict=True)
    )
    stalls = tuple(post_stalls_ms(run) for run in runs)
    start_errors = [abs(starts[k] - line.start[k]) for line in lines for k in line.start]
    result = CrossCheck(
        schedule=schedule.name,
        devices=schedule.devices,
        microbatches=schedule.microbatches,
        runs=len(runs),
        measured_makespan_ms=median,
        measured_min_ms=float(measured.min()),
        measured_max_ms=float(measured.max()),
        measured_spread=float((measured.max() - measured.min()) / median),
        simulated_makespan_ms=simulated,
        prediction_error=simulated / median - 1,
        replay_error=float(np.median(replays)),
        replay_errors=replays,
        start_error_p50_ms=float(np.percentile(start_errors, 50)),
        start_error_p90_ms=float(np.percentile(start_errors, 90)),
        host=host,
        post_stall_ms=float(np.median(stalls)),
        post_stalls_ms=stalls,
    )
    return result, trace


def median_run(runs: list[MeasuredRun]) -> MeasuredRun:
    """The run whose makespan is the median (the lower middle one for an even count)."""
    spans = [timeline(run).makespan_ms for run in runs]
    order = np.argsort(spans)
    return runs[int(order[(len(runs) - 1) // 2])]


def rankings_agree(results: list[CrossCheck], tolerance: float = 0.0) -> bool:
    """Do measured and simulated makespans order the schedules the same way?

    Pairs whose measured makespans differ by less than ``tolerance`` (a fraction, e.g. the
    measured spread) count as ties and agree with either order.
    """
    for a in results:
        for b in results:
            measured_gap = b.measured_makespan_ms - a.measured_makespan_ms
            if measured_gap <= tolerance * a.measured_makespan_ms:
                continue
            if b.simulated_makespan_ms < a.simulated_makespan_ms:
                return False
    return True


# ---------------------------------------------------------------------------
# Measured timeline as a Trace, side-by-side outputs


def measured_trace(line: Timeline):
    """The measured compute intervals as a pipesim Trace (no transfer rows)."""
    import pandas as pd

    schedule = line.schedule
    keys = sorted(line.start, key=lambda k: (line.device[k], line.start[k]))
    frame = pd.DataFrame(
        {
            "device": [line.device[k] for k in keys],
            "lane": ["compute"] * len(keys),
            "stage": [k[0] for k in keys],
            "chunk": [schedule.chunk(k[0]) for k in keys],
            "microbatch": [k[2] for k in keys],
            "kind": [str(k[1]) for k in keys],
            "start": [line.start[k] for k in keys],
            "end": [line.end[k] for k in keys],
            "peer": [-1] * len(keys),
        }
    )
    return trace_from_frame(frame, schedule.devices, [Action(k[0], k[1], k[2]) for k in keys])


def side_by_side_chrome(measured, simulated) -> dict:
    """One Perfetto file: measured devices first, simulated devices below them."""

    first = to_chrome_trace(measured, label="measured")
    second = to_chrome_trace(simulated, label="simulated", pid_offset=measured.devices)
    return {"traceEvents": first["traceEvents"] + second["traceEvents"], "displayTimeUnit": "ms"}
