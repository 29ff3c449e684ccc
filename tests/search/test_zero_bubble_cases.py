"""Cases where the Zero Bubble authors' schedulers once beat the search (measured with
``benchmarks/bench_vs_zero_bubble.py``): the makespans the search reaches now, each
computed by pipesim's engine, so a change that loses one of them shows here."""

import pytest

from pipesim.schedules import get_schedule
from pipesim.search import search_schedule
from pipesim.search.auto import evaluate
from pipesim.sim.costs import uniform_costs
from pipesim.sim.links import Link, Topology

GiB = 2**30


def case_costs(stages, chunks, fiw):
    """The benchmark's model: 1 GiB of activation per model stage, a quarter kept until W."""
    forward, input_, weight = (cost / chunks for cost in fiw)
    return uniform_costs(
        stages,
        forward,
        backward_input_ms=input_,
        backward_weight_ms=weight,
        activation_memory_bytes=GiB / chunks,
        weight_grad_memory_bytes=GiB / 4 / chunks,
    )


def one_f_one_b_peak(devices, microbatches, fiw, topology):
    costs = case_costs(devices, 1, fiw)
    schedule = get_schedule("1f1b", devices, microbatches, 1)
    return evaluate(schedule, costs, topology, "1f1b").peak_bytes


# (policy, devices, microbatches, (F, I, W) per model stage, link latency ms, limit in
# 1F1B peaks, makespan now); the comment: their makespan, ours before
CASES = [
    ("zb-auto", 8, 8, (1.0, 1.0, 1.0), 0.1, 1, 32.4),  # 32.4, 33.4
    ("zb-auto", 8, 16, (1.0, 1.5, 0.6), 0.0, 2, 58.1),  # 58.1, 58.3
    ("v-auto", 8, 8, (1.0, 1.5, 0.6), 0.0, 1, 30.8),  # 30.8, 31.65
    ("v-auto", 4, 4, (1.0, 1.5, 0.6), 0.1, 1, 16.2),  # 16.4, 16.55
    ("v-auto", 4, 8, (1.0, 1.5, 0.6), 0.1, 1, 28.4),  # 28.8, 29.1
    ("v-auto", 8, 16, (1.0, 1.5, 0.6), 0.1, 1, 58.35),  # 59.6, 59.9; 58.9 unannealed
    # the wider grid: zbv.py at 1F1B's memory, V-Half at its own (3 of 1F1B's 4 GiB); the
    # building blocks and a climb from the best of them
    ("v-auto", 4, 12, (1.0, 1.2, 0.6), 0.1, 1, 36.8),  # 36.8, 36.9
    ("v-auto", 4, 12, (1.0, 1.2, 0.6), 0.1, 0.75, 39.4),  # 40.5, 41.1; 39.5 unannealed
]


@pytest.mark.slow  # a few seconds of searches: the full run, not the quick loop
@pytest.mark.parametrize(
    ("name", "devices", "microbatches", "fiw", "latency_ms", "times", "expected_ms"), CASES
)
def test_formerly_losing_cases(name, devices, microbatches, fiw, latency_ms, times, expected_ms):
    chunks = 2 if name == "v-auto" else 1
    topology = Topology(devices, Link(latency_us=latency_ms * 1000.0)) if latency_ms else None
    limit = times * one_f_one_b_peak(devices, microbatches, fiw, topology)
    costs = case_costs(devices * chunks, chunks, fiw)
    found = search_schedule(name, devices, microbatches, costs, topology, limit)
    assert found.peak_activation_bytes <= limit * (1 + 1e-9)
    assert found.makespan_ms == pytest.approx(expected_ms, abs=1e-9)
    assert evaluate(found.schedule, costs, topology, "").makespan_ms == found.makespan_ms
