"""The building-block family v-auto searches: it holds the published blocks (V-Half,
V-Min), every block is a valid V schedule, and the memory its lifespans suggest orders
the blocks around the limit."""

import pytest

from pipesim.schedules.ir import v_placement
from pipesim.schedules.policies import v_half, v_min
from pipesim.schedules.policies.building_blocks import INTERVAL, build_v_schedule
from pipesim.schedules.validity import validate
from pipesim.search.blocks import block_family, held_estimate_bytes, nearest_the_limit
from pipesim.search.greedy import make_problem
from pipesim.sim.costs import uniform_costs


@pytest.mark.parametrize("devices", [2, 3, 4, 6, 8])
def test_the_family_holds_v_half_and_v_min(devices):
    family = set(block_family(devices))
    assert tuple(map(tuple, v_half.blocks(devices))) in family
    assert tuple(map(tuple, v_min.blocks(devices))) in family


def test_every_block_is_distinct_modulo_the_interval_and_builds():
    family = block_family(3)
    assert len(family) == len(set(family)) == 212
    for block in family:
        for offsets in block:
            assert len({o % INTERVAL for o in offsets}) == 4
    for block in family[:: len(family) // 7]:
        validate(build_v_schedule(3, 4, block, "block"))


def test_blocks_nearest_the_limit_come_first():
    """V-Min's block on 4 devices is (0, 7, 8, 15) on device 0: chunk 0 lives from unit 0
    to its I0 at 15 (16 units, 3 intervals), chunk 1 from 7 to 8 (1 interval); 4 copies of
    a 1-byte activation. At a limit of 4 bytes the blocks that fit come first, those
    holding the most first."""
    costs = uniform_costs(8, activation_memory_bytes=1.0, weight_grad_memory_bytes=0.25)
    problem = make_problem(v_placement(4), 8, costs, None, 4.0)
    assert held_estimate_bytes(tuple(map(tuple, v_min.blocks(4))), problem) == 4.0
    estimates = [held_estimate_bytes(b, problem) for b in nearest_the_limit(problem)]
    fitting = [e for e in estimates if e <= 4.0]
    assert fitting and estimates[: len(fitting)] == sorted(fitting, reverse=True)
    assert estimates[len(fitting) :] == sorted(estimates[len(fitting) :])
