"""Valid orders of the split actions, built without the search: every order of a tiny case
(for its optimum), or random ones; each timed by the independent oracle.

A device's activation bytes change only at its own actions, and it runs them one at a
time, so its peak is a property of its order alone: an F takes its stage's bytes, an I
gives back all but the weight-gradient part, a W the rest. Orders over the limit are left
out as they are built.
"""

import itertools
import math
import random

from hypothesis import strategies as st

from pipesim.schedules import fit_virtual_stages, get_schedule
from pipesim.schedules.ir import Action, F, I, Schedule, ScheduleError, W, single_chain
from pipesim.search import auto
from pipesim.sim.costs import Costs, uniform_costs
from tests.oracle import evaluate

KINDS = (F, I, W)

SMALL = st.integers(1, 3).map(float)  # small whole costs: exact sums and ticks, many ties


def small_costs(draw, stages: int, **extra) -> tuple[Costs, list[float]]:
    """F, I, W per stage in small whole numbers, and bytes kept per stage (returned too)
    with a part of them kept until W; ``extra`` goes to ``uniform_costs``."""
    per_stage = lambda values: [draw(values) for _ in range(stages)]  # noqa: E731
    kept = per_stage(st.integers(1, 3).map(float))
    costs = uniform_costs(
        stages,
        per_stage(SMALL),
        backward_input_ms=per_stage(SMALL),
        backward_weight_ms=per_stage(st.integers(0, 3).map(float)),
        activation_memory_bytes=kept,
        weight_grad_memory_bytes=[k * draw(st.sampled_from([0.0, 0.25, 0.5])) for k in kept],
        **extra,
    )
    return costs, kept


def split_costs(stages, forward=1.0, input_=1.0, weight=1.0, kept=1.0, weight_grad=0.25):
    """Uniform F, I, W costs per stage, a unit of activation memory held from F, and the
    weight-gradient part of it held until W."""
    return uniform_costs(
        stages,
        forward,
        backward_input_ms=input_,
        backward_weight_ms=weight,
        activation_memory_bytes=kept,
        weight_grad_memory_bytes=weight_grad,
    )


def fitting_recipes(name, devices, microbatches, costs, topology, limit):
    """``(recipe, its evaluation)`` for each fixed recipe of the family ``name`` that
    builds at this size and fits the memory limit: the rivals a search must not lose to."""
    for recipe in auto.FAMILIES[name]:
        try:
            schedule = get_schedule(recipe, devices, microbatches, fit_virtual_stages(recipe, 1))
        except ScheduleError:
            continue
        fixed = auto.evaluate(schedule, costs, topology, recipe)
        if fixed.peak_bytes <= limit:
            yield recipe, fixed


def _before(action: Action, placement, stages: int) -> list[Action]:
    """The actions of the same device that must run before ``action`` (directly or through
    other devices: the forward chain, the backward chain, F before I before W)."""
    s, kind, x = action.stage, action.kind, action.microbatch
    device = placement[s]
    if kind == W:
        return [Action(s, I, x)]
    if kind == I:
        later = [t for t in range(s + 1, stages) if placement[t] == device]
        return [Action(s, F, x)] + [Action(t, I, x) for t in later]
    return [Action(t, F, x) for t in range(s) if placement[t] == device]


def _change(action: Action, costs) -> float:
    kept, grad = costs.activation_memory_bytes, costs.weight_grad_memory_bytes
    s = action.stage
    return {F: kept[s], I: -(kept[s] - grad[s]), W: -grad[s]}[action.kind]


def device_orders(placement, device: int, microbatches: int, costs, limit: float):
    """Every order of the device's actions that keeps its own order and fits ``limit``."""
    stages = len(placement)
    mine = [
        Action(s, k, x)
        for s in range(stages)
        if placement[s] == device
        for k in KINDS
        for x in range(microbatches)
    ]
    needs = {a: _before(a, placement, stages) for a in mine}

    def extend(order, done, held):
        if len(order) == len(mine):
            yield tuple(order)
            return
        for action in mine:
            if action in done or any(n not in done for n in needs[action]):
                continue
            after = held + _change(action, costs)
            if action.kind == F and after > limit * (1 + 1e-9) + 1e-9:
                continue
            order.append(action)
            done.add(action)
            yield from extend(order, done, after)
            done.discard(action)
            order.pop()

    yield from extend([], set(), 0.0)


def schedule_of(orders, placement, microbatches: int) -> Schedule:
    return Schedule(tuple(orders), placement, single_chain(len(placement), microbatches), "order")


def makespan(schedule: Schedule, costs, topology) -> float | None:
    """The oracle's makespan, None for an order that deadlocks."""
    try:
        times = evaluate(schedule, costs, topology)
    except RuntimeError:
        return None
    return max(end for _, end in times.values())


def optimum(placement, microbatches: int, costs, topology, limit: float, most=None):
    """The fastest of every combination of per-device orders that fit ``limit`` (None when
    there are more than ``most`` combinations)."""
    devices = max(placement) + 1
    choices = [
        list(device_orders(placement, d, microbatches, costs, limit)) for d in range(devices)
    ]
    if most is not None and math.prod(len(c) for c in choices) > most:
        return None
    best = None
    for orders in itertools.product(*choices):
        found = makespan(schedule_of(orders, placement, microbatches), costs, topology)
        if found is not None and (best is None or found < best):
            best = found
    return best


def random_schedule(placement, microbatches: int, costs, limit: float, rng: random.Random):
    """A random order that fits ``limit``: a random walk through the actions whose inputs
    all came before (so it never deadlocks), split by device; None if the walk got stuck
    with every device's next forward over the limit."""
    stages, devices = len(placement), max(placement) + 1
    done, held = set(), [0.0] * devices
    orders = [[] for _ in range(devices)]
    left = [Action(s, k, x) for s in range(stages) for k in KINDS for x in range(microbatches)]
    while left:
        ready = [a for a in left if all(n in done for n in _inputs(a, stages))]
        fits = [
            a
            for a in ready
            if a.kind != F
            or held[placement[a.stage]] + _change(a, costs) <= limit * (1 + 1e-9) + 1e-9
        ]
        if not fits:
            return None
        action = rng.choice(fits)
        device = placement[action.stage]
        held[device] += _change(action, costs)
        orders[device].append(action)
        done.add(action)
        left.remove(action)
    return schedule_of(orders, placement, microbatches)


def _inputs(action: Action, stages: int) -> list[Action]:
    s, kind, x = action.stage, action.kind, action.microbatch
    if kind == F:
        return [Action(s - 1, F, x)] if s else []
    if kind == I:
        return [Action(s, F, x)] + ([Action(s + 1, I, x)] if s + 1 < stages else [])
    return [Action(s, I, x)]
