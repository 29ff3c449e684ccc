"""The plan's space counted by hand, and the memory walk against the engine's accounting."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.analysis.plan import (
    PlanError,
    build_space,
    enumerate_space,
    memory_program,
    peak_activation_bytes,
)
from pipesim.scenario.build import parse_spec
from pipesim.schedules import POLICIES, fit_virtual_stages, get_schedule
from pipesim.schedules.ir import Kind, ScheduleError
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.memory import memory_timelines
from pipesim.sim.trace import Lane
from tests.analysis.test_plan import SOURCE, small_base


def test_space_size_and_invalid_combinations_by_hand():
    # 8 GPUs in nodes of 4; 40 heads, 8 kv heads, FFN 13824: tensor 1, 2 or 4.
    # Layouts (tensor, pipeline): t=1: p in 1,2,4,8; t=2: 1,2,4; t=4: 1,2 -> 9.
    # Policies: 1f1b at v=1, interleaved-1f1b at v=2 and 4 -> 3 per layout.
    # Microbatch sizes 1,2,4,8; recompute 2 x ZeRO 0-3 x partition 2 x dp_overlap 2 x
    # tp_overlap 2 = 64 per combination.
    spec = parse_spec(small_base(), SOURCE)
    space = build_space(spec, SOURCE, 8, ["pipeline.schedule=1f1b,interleaved-1f1b"])
    reasons = Counter(reason for _, reason in enumerate_space(space))
    assert sum(reasons.values()) == 9 * 3 * 4 * 64 == 6912
    # p=8 with 4 chunks is 32 stages for 16 layers: 4 sizes x 64
    assert reasons["more stages than layers"] == 4 * 64
    # one GPU per pipeline stage, data 8: 32 sequences do not split into 8 x 8, 3 policies x 64
    assert reasons["global batch does not split into microbatch_size x data"] == 3 * 64
    # one replica (t x p = 8): (1, 8) with 2 policy-chunks, (2, 4) and (4, 2) with 3, each
    # at 4 sizes = 32 combinations, of whose 64 candidates ZeRO 1-3 are 48
    zero = "ZeRO stage > 0 with one replica (nothing to shard: it is stage 0)"
    assert reasons[zero] == 32 * 48
    # tp_overlap on with t = 1: p=1 (3 sizes split the batch), p=2, p=4 (4 sizes) -> 33
    # combinations x 32, and p=8's 8 combinations x its 16 ZeRO-0 candidates / 2
    tp = "tp_overlap without tensor parallelism (nothing to overlap: it is false)"
    assert reasons[tp] == 33 * 32 + 8 * 8
    assert reasons[None] == 6912 - 4 * 64 - 3 * 64 - 32 * 48 - (33 * 32 + 8 * 8) == 3808


def test_derived_axes_filter():
    spec = parse_spec(small_base(), SOURCE)
    space = build_space(
        spec, SOURCE, 8, ["pipeline.schedule=1f1b", "parallel.data=2", "pipeline.microbatches=4"]
    )
    kept = [c for c, _ in enumerate_space(space) if c is not None]
    assert kept and all(c.data == 2 and c.microbatches == 4 for c in kept)
    assert all(c.microbatch_size * c.microbatches * c.data == 32 for c in kept)
    assert all(c.tensor * c.devices * c.data == 8 for c in kept)


def random_case(name, devices, microbatches, seed):
    """A policy's schedule with random per-stage times and memory (some kept for W), or
    None where the policy refuses the sizes."""
    try:
        schedule = get_schedule(name, devices, microbatches, fit_virtual_stages(name, 2))
    except ScheduleError:
        return None
    rng = np.random.default_rng(seed)
    stages = schedule.model_stages
    kept = rng.uniform(1, 10, stages)
    costs = uniform_costs(
        stages,
        forward_ms=list(rng.uniform(1, 2, stages)),
        backward_ms=list(rng.uniform(2, 4, stages)),
        backward_input_ms=list(rng.uniform(1, 2, stages)),
        backward_weight_ms=list(rng.uniform(1, 2, stages)),
        activation_memory_bytes=list(kept),
        weight_grad_memory_bytes=list(kept * rng.uniform(0, 1, stages)),
    )
    return schedule, costs


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(POLICIES)),
    devices=st.integers(2, 4),
    microbatches=st.integers(1, 10),
    seed=st.integers(0, 2**31),
)
def test_memory_walk_equals_the_engines_peak(name, devices, microbatches, seed):
    """The walk in device order gives each device's peak activation bytes without a
    timeline; it equals what the engine's memory accounting finds."""
    case = random_case(name, devices, microbatches, seed)
    if case is None:
        return
    schedule, costs = case
    trace = simulate(schedule, costs)
    engine = [
        float(max(t.activation_bytes.max(), 0.0)) if len(t.time) else 0.0
        for t in memory_timelines(trace, schedule, costs)
    ]
    walk = peak_activation_bytes(memory_program(schedule), costs)
    np.testing.assert_allclose(walk, engine, rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(["dualpipe", "dualpipev", "1f1b", "zbv"]),
    devices=st.sampled_from([2, 4]),
    microbatches=st.integers(4, 12),
    seed=st.integers(0, 2**31),
)
def test_memory_timelines_equal_a_member_by_member_count(name, devices, microbatches, seed):
    """The engine's accounting (groups collected in one batch) against a plain walk over
    every row, a group member by member, sorted as the accounting says: by time, then
    row, then a row's takes before its give-backs."""
    case = random_case(name, devices, microbatches, seed)
    if case is None:
        return
    schedule, costs = case
    trace = simulate(schedule, costs)
    kept, wg = costs.activation_memory_bytes, costs.weight_grad_memory_bytes
    change = {
        Kind.F: lambda g: (kept[g], 1),
        Kind.B: lambda g: (-kept[g], -1),
        Kind.I: lambda g: (wg[g] - kept[g], -1),
        Kind.W: lambda g: (-wg[g], 0),
    }
    events: list[list[tuple]] = [[] for _ in range(devices)]
    for row in np.flatnonzero(trace.lane == Lane.COMPUTE).tolist():
        for member in trace.actions[row].atoms:
            at_end = member.kind != Kind.F
            time = float(trace.end[row] if at_end else trace.start[row])
            delta, count = change[member.kind](schedule.model_stage(member.stage))
            events[trace.device[row]].append((time, row, at_end, delta, count))
    for d, timeline in enumerate(memory_timelines(trace, schedule, costs)):
        walk = sorted(events[d], key=lambda e: e[:3])  # stable: members in their order
        assert timeline.time.tolist() == [e[0] for e in walk]
        assert np.array_equal(timeline.activation_bytes, np.cumsum([e[3] for e in walk]))
        assert timeline.inflight.tolist() == np.cumsum([e[4] for e in walk]).tolist()


def test_a_value_given_twice_counts_once_and_the_size_guard_prunes():
    spec = parse_spec(small_base(), SOURCE)
    once = build_space(spec, SOURCE, 8, ["pipeline.schedule=1f1b", "parallel.tensor=2"])
    twice = build_space(spec, SOURCE, 8, ["pipeline.schedule=1f1b,1f1b", "parallel.tensor=2,2"])
    assert len(list(enumerate_space(once))) == len(list(enumerate_space(twice))) == 3 * 4 * 64
    guarded = small_base()
    guarded["pipeline"]["max_actions"] = 4 * 16 * 3  # p=4, m=16 (b=1, data 2), F I W
    space = build_space(
        parse_spec(guarded, SOURCE), SOURCE, 8, ["pipeline.schedule=1f1b", "parallel.tensor=1"]
    )
    reasons = Counter(reason for _, reason in enumerate_space(space))
    # over 192 actions: p=8 (data 1) with b=1 (m=32) and b=2 (m=16), 64 candidates each
    assert reasons["over pipeline.max_actions (the size guard)"] == 64 * 2


def test_what_the_planner_cannot_honour_is_refused():
    for section, key, value, message in (
        ("pipeline", "mode", "forward", "pipeline.mode: pipesim plan plans training steps"),
        ("hardware", "placement", [0, 1], "hardware.placement: not used by pipesim plan"),
    ):
        base = small_base()
        base[section][key] = value
        with pytest.raises(PlanError, match=message):
            build_space(parse_spec(base, SOURCE), SOURCE, 8, [])


def test_memory_walk_gives_the_closed_forms_of_gpipe_and_1f1b():
    """GPipe holds every microbatch before its first backward: m activations on every
    device. 1F1B holds at most p - d on device d (its warm-up plus the one in steady
    state), fewer when m is smaller (Narayanan et al. 2021, PipeDream-Flush)."""
    p, activation = 4, 3.0
    costs = uniform_costs(p, forward_ms=1.0, backward_ms=2.0, activation_memory_bytes=activation)
    for m in (2, 4, 9):
        gpipe = peak_activation_bytes(memory_program(get_schedule("gpipe", p, m)), costs)
        one_f_one_b = peak_activation_bytes(memory_program(get_schedule("1f1b", p, m)), costs)
        assert list(gpipe) == [m * activation] * p
        assert list(one_f_one_b) == [min(p - d, m) * activation for d in range(p)]


def test_a_space_too_large_to_enumerate_is_refused_before_enumerating():
    sizes = ",".join(str(b) for b in range(1, 3001))
    with pytest.raises(PlanError, match=r"--space: up to [\d,]+ candidates, over the limit"):
        build_space(
            parse_spec(small_base(), SOURCE), SOURCE, 8, [f"pipeline.microbatch_size={sizes}"]
        )
