"""Small builders shared by the tests."""

from pipesim.costs import uniform_costs
from pipesim.engine import simulate
from pipesim.hardware import Link, Topology
from pipesim.metrics import build_report
from pipesim.schedules import get_schedule


def latency_topology(devices: int, latency_ms: float) -> Topology:
    return Topology(devices, default=Link(latency_us=latency_ms * 1000))


def run_policy(
    name, devices, microbatches, virtual_stages=1, topology=None, forward=False, **cost_args
):
    schedule = get_schedule(name, devices, microbatches, virtual_stages, forward=forward)
    costs = uniform_costs(schedule.model_stages, **cost_args)
    trace = simulate(schedule, costs, topology)
    return schedule, trace, build_report(trace, schedule, costs, topology=topology)


def compute_rows(trace):
    """[(device, name, start, end)] of compute actions, sorted by device then start."""
    frame = trace.frame[trace.frame.lane == "compute"]
    rows = zip(frame.device, frame.name, frame.start, frame.end, strict=True)
    return sorted((int(d), n, float(s), float(e)) for d, n, s, e in rows)
