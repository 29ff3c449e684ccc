"""GPipe, 1F1B, interleaved 1F1B and looped BFS: orders, goldens and constraints."""

from pathlib import Path

import pytest

from pipesim.schedules import ConstraintError, get_schedule, list_schedules
from pipesim.schedules.ir import B, F, from_csv, to_csv

GOLDEN = Path(__file__).parent.parent / "golden"


@pytest.mark.parametrize(
    "name, p, m, v",
    [("gpipe", 4, 4, 1), ("1f1b", 4, 8, 1), ("interleaved-1f1b", 4, 8, 2), ("looped-bfs", 2, 4, 2)],
)
def test_golden_csv(name, p, m, v):
    golden = (GOLDEN / f"{name}_p{p}_m{m}_v{v}.csv").read_text()
    schedule = get_schedule(name, p, m, v)
    assert to_csv(schedule) == golden
    assert from_csv(golden, name) == schedule


@pytest.mark.parametrize("p, m", [(4, 8), (4, 2), (8, 3), (1, 5)])
def test_1f1b_warmup_is_min_p_minus_r_minus_1_and_m(p, m):
    schedule = get_schedule("1f1b", p, m)
    for rank, actions in enumerate(schedule.device_actions):
        first_backward = next(k for k, a in enumerate(actions) if a.kind == B)
        # warm-up forwards, then the steady state's first forward, then the first backward
        warmup = min(p - rank - 1, m)
        assert first_backward == warmup + (1 if warmup < m else 0)
        assert [a.microbatch for a in actions if a.kind == F] == list(range(m))
        assert [a.microbatch for a in actions if a.kind == B] == list(range(m))


def test_gpipe_runs_backwards_in_reverse():
    actions = get_schedule("gpipe", 2, 3).device_actions[0]
    assert [str(a) for a in actions] == ["0F0", "0F1", "0F2", "0B2", "0B1", "0B0"]


def test_interleaved_uses_loop_placement_and_microbatch_groups():
    schedule = get_schedule("interleaved-1f1b", 4, 8, 2)
    assert schedule.placement == (0, 1, 2, 3, 0, 1, 2, 3)
    first = [str(a) for a in schedule.device_actions[0][:8]]
    assert first == ["0F0", "0F1", "0F2", "0F3", "4F0", "4F1", "4F2", "4F3"]
    # Rank 0 warms up with (p-1)*2 + (v-1)*p = 10 forwards.
    assert [a.kind for a in schedule.device_actions[0][:11]] == [F] * 11


def test_interleaved_rejects_unequal_rounds_only():
    # torch's rule: max(1, m // p) rounds of equal size; m = 6 is one round of 6, m = 9
    # would be two rounds of 4.5.
    assert get_schedule("interleaved-1f1b", 4, 6, 2).microbatches == 6
    with pytest.raises(ConstraintError, match=r"= 2 of equal size: microbatches=9 with devices=4"):
        get_schedule("interleaved-1f1b", 4, 9, 2)
    with pytest.raises(ConstraintError, match="virtual_stages >= 2"):
        get_schedule("interleaved-1f1b", 4, 8, 1)


def test_forward_mode_keeps_only_forwards():
    schedule = get_schedule("1f1b", 4, 8, forward=True)
    assert all(a.kind == F for actions in schedule.device_actions for a in actions)
    assert schedule.num_actions == 32


def test_unknown_schedule_lists_the_allowed_ones():
    with pytest.raises(ConstraintError, match="unknown schedule 'pipedream'; allowed: gpipe, 1f1b"):
        get_schedule("pipedream", 4, 8)


def test_every_policy_is_listed_with_constraints():
    names = [name for name, _, _ in list_schedules()]
    assert names[:4] == ["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs"]
    assert all(summary and constraints for _, summary, constraints in list_schedules())
