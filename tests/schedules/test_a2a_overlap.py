"""Combined 1F1B (Megatron-Core's ``--overlap-moe-expert-parallel-comm``, with
``--delay-wgrad-compute``): 1f1b-a2a-overlap and interleaved-1f1b-a2a-overlap."""

import pytest

from pipesim.schedules import get_schedule
from pipesim.schedules.policies.one_f_one_b_a2a import unit_kinds
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.metrics import build_report
from tests.helpers import assert_matches_oracle_and_round_trips


def lists(schedule) -> list[str]:
    return [" ".join(str(a) for a in actions) for actions in schedule.device_actions]


def test_1f1b_a2a_overlap_by_hand():
    """p = 3, m = 5: warm-up min(2 (p - r - 1) + 1, m) = 5, 3, 1 forwards; then each
    forward merged with the oldest backward owed; the rest of the backwards alone."""
    assert lists(get_schedule("1f1b-a2a-overlap", 3, 5)) == [
        "0F0 0F1 0F2 0F3 0F4 0B0 0B1 0B2 0B3 0B4",
        "1F0 1F1 1F2 (1F3;1B0)OVERLAP_F_B (1F4;1B1)OVERLAP_F_B 1B2 1B3 1B4",
        "2F0 (2F1;2B0)OVERLAP_F_B (2F2;2B1)OVERLAP_F_B (2F3;2B2)OVERLAP_F_B "
        "(2F4;2B3)OVERLAP_F_B 2B4",
    ]


def test_delay_wgrad_splits_each_unit_backward():
    schedule = get_schedule("1f1b-a2a-overlap", 2, 3, delay_wgrad=True)
    assert lists(schedule) == [
        "0F0 0F1 0F2 0B0 0B1 0B2",
        "1F0 (1F1;1I0;1W0)OVERLAP_F_B (1F2;1I1;1W1)OVERLAP_F_B 1B2",
    ]
    assert unit_kinds(schedule.device_actions[1]) == [("F", "I", "W")] * 2


def test_interleaved_a2a_overlap_warms_up_one_step_more():
    """p = 2, m = 4, v = 2: torch's warm-up (v - 1) n + 2 (p - r - 1) is 4 and 2 steps;
    one more each, then forward steps merged with backward steps."""
    assert lists(get_schedule("interleaved-1f1b-a2a-overlap", 2, 4, 2)) == [
        "0F0 0F1 2F0 2F1 0F2 (0F3;2B0)OVERLAP_F_B (2F2;2B1)OVERLAP_F_B (2F3;0B0)OVERLAP_F_B "
        "0B1 2B2 2B3 0B2 0B3",
        "1F0 1F1 3F0 (3F1;3B0)OVERLAP_F_B (1F2;3B1)OVERLAP_F_B (1F3;1B0)OVERLAP_F_B "
        "(3F2;1B1)OVERLAP_F_B (3F3;3B2)OVERLAP_F_B 3B3 1B2 1B3",
    ]


@pytest.mark.parametrize(("devices", "microbatches"), [(2, 2), (3, 7), (4, 8), (8, 16)])
def test_units_of_f_plus_b_keep_1f1b_closed_form(devices, microbatches):
    """Without sub-layer parts a unit takes F + B, and every rank runs one unit a round:
    the makespan is 1F1B's (m + p - 1)(F + B); rank r holds up to 2 (p - r) microbatches
    (its warm-up and a unit's forward, at most m), one more than eager 1F1B."""
    schedule = get_schedule("1f1b-a2a-overlap", devices, microbatches)
    costs = uniform_costs(devices, 1, 2)
    report = build_report(simulate(schedule, costs), schedule, costs)
    assert report.makespan_ms == (microbatches + devices - 1) * 3
    held = [min(2 * (devices - r), microbatches) for r in range(devices)]
    assert [d.peak_inflight for d in report.per_device] == held


@pytest.mark.parametrize(("devices", "microbatches", "chunks"), [(2, 4, 2), (4, 8, 2), (3, 9, 3)])
def test_interleaved_units_keep_the_interleaved_closed_form(devices, microbatches, chunks):
    schedule = get_schedule("interleaved-1f1b-a2a-overlap", devices, microbatches, chunks)
    costs = uniform_costs(devices * chunks, 1, 2)
    assert simulate(schedule, costs).makespan_ms == (microbatches * chunks + devices - 1) * 3


@pytest.mark.parametrize("delay_wgrad", [False, True])
def test_combined_schedules_match_the_oracle(delay_wgrad):
    for name, chunks in (("1f1b-a2a-overlap", 1), ("interleaved-1f1b-a2a-overlap", 2)):
        schedule = get_schedule(name, 4, 8, chunks, delay_wgrad=delay_wgrad)
        costs = uniform_costs(4 * chunks, 1.25, backward_input_ms=1.5, backward_weight_ms=0.75)
        topology = Topology(4, default=Link(latency_us=250))
        assert_matches_oracle_and_round_trips(schedule, costs, topology)
