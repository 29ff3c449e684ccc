"""The discrete-event engine: run a Schedule on a Topology with Costs, on SimPy.

Picture one worker per device with a to-do list: it takes its next action, waits until
the inputs that action needs have arrived, works for the action's duration, then ships
its outputs down the links, never skipping ahead (head-of-line blocking, as real
pipeline runtimes do). The package, front to back:

* this front: ``simulate``, ``check_arguments``, ``DurationScale``, ``DeadlockError``;
* ``run``: the state of one simulation (``Run``) and what the workers ask of it;
* ``steps``: the workers of a plain schedule; ``posts``: the worker of a schedule with
  torch's runtime posts; ``rules``: the per-stage tables the workers index;
* ``channels``: where transfers queue; ``order``: same-device order, checked as it runs,
  and the errors it raises.

Semantics (DESIGN.md, "Engine semantics"):

* What an action waits for is ``pipesim.schedules.dependencies``: ``F(s,i)`` the
  activation of ``F(s-1,i)``; ``B(s,i)``/``I(s,i)`` the gradient of ``B/I(s+1,i)``;
  ``W(s,i)`` only ``I(s,i)``, which precedes it on the same device.
* Same-device order is enforced, not assumed (``order``): a backward before its forward,
  a W before its I, an action twice or left out, or a device waiting for its own later
  action raises the validator's ScheduleError with the grid.
* Links follow LogGP (``pipesim.sim.links``): a transfer starts when its producer ends,
  holds its channel for ``bytes / bandwidth + gap`` and arrives ``latency`` after
  leaving it; nothing is sent on one device or over an ideal link. Channels queue first
  come, first served, with an explicit tie rule where several senders share one
  (``channels``). A channel is fully described by the time it next falls free, so the
  engine keeps that time instead of a ``simpy.Resource``: one SimPy event per action,
  not three per transfer.
* ``comm_overlap=False``: the sender is busy until its transfer has arrived.
* A schedule read from torch's lowered CSV keeps its runtime posts (``Schedule.posts``)
  and runs on ``posts``' worker: each post is made when its device reaches it; a
  transfer between ranks leaves when both its SEND and its RECV are posted (a
  rendezvous, so a late RECV delays the consumer); ``REDUCE_GRAD`` takes the stage's
  data-parallel all-reduce (``Costs.reduce_grad_ms``) and holds the device, replacing
  ``tail_ms``; ``UNSHARD`` gathers on its own stream before the stage's next compute,
  ``RESHARD`` holds the device; posts without a cost take no time.
* Every row records what released it (``pipesim.sim.trace.Cause``). Times are computed
  exactly from those causes (a row starts at its cause's end, to the bit); SimPy's clock
  only orders the events.
* A schedule that can never finish raises DeadlockError naming the blocked actions.

Only SimPy events that something waits on are created: an input whose arrival time is
already known costs a dict lookup, so a run costs little more than one event per action.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from pipesim.schedules.ir import Action, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.engine.order import DeadlockError
from pipesim.sim.engine.posts import Rendezvous
from pipesim.sim.engine.run import Run
from pipesim.sim.engine.steps import common_steps
from pipesim.sim.links import Topology
from pipesim.sim.trace import Trace

DurationScale = Callable[[int, Action], float]


def simulate(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None = None,
    *,
    duration_scale: DurationScale | None = None,
    link_scale: Callable[[int, int], float] | None = None,
    tail_ms: Sequence[float] | None = None,
    tail_after_flush: bool = True,
    optimizer_ms: Sequence[float] | None = None,
) -> Trace:
    """Simulate ``schedule`` and return its Trace; raise ScheduleError if it is invalid.

    ``duration_scale(device, action)`` multiplies an action's duration and
    ``link_scale(src, dst)`` a transfer's channel time and latency (stochastic runs;
    default 1). ``tail_ms[d]`` is end-of-step work on device d, counted in the makespan:
    after the pipeline flush (every device done computing), or, with
    ``tail_after_flush=False``, as soon as the device's own last action ends (overlapped
    with the other devices' cool-down). ``optimizer_ms[d]`` is the part of ``tail_ms[d]``
    that is the device's optimizer step (None: none of it); the rest is its data-parallel
    gradient all-reduce, which runs first. Each part is a row of its own
    (``RowKind.ALLREDUCE``, ``RowKind.OPTIMIZER``); a part of zero leaves none.
    """
    check_arguments(schedule, costs, tail_ms, optimizer_ms)
    topology = topology or Topology(schedule.devices)
    tail = (tail_ms, tail_after_flush, optimizer_ms)
    run = Run(schedule, costs, topology, duration_scale, link_scale, *tail)
    # torch's runtime posts (a lowered schedule) take their own worker
    worker = Rendezvous(run).device if schedule.posts else partial(common_steps, run)
    return run.execute(worker)


def check_arguments(
    schedule: Schedule,
    costs: Costs,
    tail_ms: Sequence[float] | None,
    optimizer_ms: Sequence[float] | None = None,
) -> None:
    """ValueError where ``costs``, ``tail_ms`` or ``optimizer_ms`` do not fit ``schedule``
    (checked by every evaluator before it runs)."""
    if costs.stages < schedule.model_stages:
        raise ValueError(
            f"costs cover {costs.stages} stages, the schedule needs {schedule.model_stages}"
        )
    if tail_ms is not None and len(tail_ms) != schedule.devices:
        raise ValueError(f"tail_ms has {len(tail_ms)} entries, expected {schedule.devices}")
    if optimizer_ms is None:
        return
    if tail_ms is None or len(optimizer_ms) != len(tail_ms):
        raise ValueError("optimizer_ms needs tail_ms, with one entry per device")
    for device, (step, tail) in enumerate(zip(optimizer_ms, tail_ms, strict=True)):
        if not 0 <= step <= max(tail, 0.0):
            raise ValueError(f"optimizer_ms[{device}] = {step} is not within tail_ms, {tail}")


__all__ = ["DeadlockError", "DurationScale", "check_arguments", "simulate"]
