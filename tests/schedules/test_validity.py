"""The validator's bulk check and its detailed pass agree on valid and broken schedules."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules import POLICIES, ConstraintError, get_schedule
from pipesim.schedules.ir import Schedule, ScheduleError, parse_action, schedule_from_lists
from pipesim.schedules.post_rules import post_problems
from pipesim.schedules.posts import parse_post
from pipesim.schedules.torch_csv import read_torch_csv
from pipesim.schedules.validity import explain_invalid, schedule_fault, validate

SIMPLE = sorted(n for n in POLICIES if n not in ("dualpipe", "dualpipev"))  # no overlapped pairs


@st.composite
def built(draw, names=SIMPLE):
    name = draw(st.sampled_from(names))
    try:
        return get_schedule(
            name, draw(st.integers(1, 5)), draw(st.integers(1, 10)), draw(st.integers(1, 3))
        )
    except ConstraintError:
        return get_schedule("1f1b", 3, 4)


def mutate(schedule: Schedule, choice: int, where: int) -> Schedule:
    lists = [list(a) for a in schedule.device_actions]
    device = max(range(len(lists)), key=lambda d: len(lists[d]))
    actions = lists[device]
    k = where % len(actions)
    match choice:
        case 0:  # drop one action
            del actions[k]
        case 1:  # run one action twice
            actions.insert(k, actions[k])
        case 2:  # move one action to the wrong device
            other = (device + 1) % len(lists)
            if other == device:
                del actions[k]
            else:
                lists[other].append(actions.pop(k))
        case 3:  # a backward before its forward
            actions.reverse()
    return Schedule(
        tuple(tuple(a) for a in lists), schedule.placement, schedule.chains, schedule.name
    )


@settings(max_examples=60, deadline=None)
@given(built())
def test_valid_schedules_pass_the_fast_path(schedule):
    assert schedule_fault(schedule) is None
    explain_invalid(schedule)  # and the detailed pass finds nothing either


@settings(max_examples=80, deadline=None)
@given(built(), st.integers(0, 3), st.integers(0, 10**6))
def test_broken_schedules_are_caught_with_a_grid(schedule, choice, where):
    broken = mutate(schedule, choice, where)
    if choice == 3 and not schedule.is_training:
        return
    if choice == 3 and len(max(schedule.device_actions, key=len)) < 2:
        return
    if schedule.is_training and not broken.is_training:
        return  # dropping the only backward leaves a valid forward-only schedule
    assert schedule_fault(broken) is not None
    with pytest.raises(ScheduleError) as info:
        validate(broken)
    assert "ERROR HERE" in str(info.value) or "missing actions" in str(info.value)


def test_dualpipe_passes_the_bulk_check_and_the_detailed_pass():
    schedule = get_schedule("dualpipe", 4, 8)
    assert schedule_fault(schedule) is None  # overlapped pairs are checked in bulk too
    explain_invalid(schedule)
    validate(schedule)


def test_a_group_fed_by_its_own_member_is_caught_in_bulk():
    lists = [[parse_action("(0F0;1F0)OVERLAP_F_B"), parse_action("1B0"), parse_action("0B0")]]
    schedule = schedule_from_lists(lists)
    assert schedule_fault(schedule) == "a group member needs another member's output"
    with pytest.raises(ScheduleError, match="1F0 needs the output of 0F0 in the same group"):
        validate(schedule)


# -- the posts of torch's lowered schedules -----------------------------------------------

GOLDEN = Path(__file__).parent / "golden"
LOWERED = sorted(GOLDEN.glob("torch-*.lowered.csv"))


def program_rows(path: Path) -> list[list[str]]:
    return [row.split(",") for row in path.read_text().splitlines()]


def consumer_step(row: list[str], recv) -> int:
    """Where in ``row`` the compute action that needs the RECV post ``recv`` sits."""
    kinds = ("F",) if recv.kind == "RECV_F" else ("B", "I")
    for step, cell in enumerate(row):
        if parse_post(cell) is None:
            atoms = parse_action(cell).atoms
            if any(
                (a.stage, a.microbatch) == (recv.stage, recv.microbatch) and a.kind in kinds
                for a in atoms
            ):
                return step
    raise AssertionError(f"no consumer of {recv}")


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(LOWERED), st.integers(0, 10**6), st.sampled_from(["drop", "late", "twice"]))
def test_a_misplaced_post_in_a_torch_schedule_is_caught_with_a_grid(path, where, how):
    """Drop a SEND/RECV/REDUCE_GRAD, move a RECV after its consumer, or post one twice:
    the validator names it and draws the grid."""
    rows = program_rows(path)
    cells = [
        (r, c)
        for r, row in enumerate(rows)
        for c, cell in enumerate(row)
        if parse_post(cell) and "SHARD" not in cell and (how != "late" or "RECV" in cell)
    ]
    r, c = cells[where % len(cells)]
    cell = rows[r].pop(c)
    if how == "late":  # right after the compute action that needs it
        rows[r].insert(consumer_step(rows[r], parse_post(cell)) + 1, cell)
    elif how == "twice":
        rows[r][c:c] = [cell, cell]
    with pytest.raises(ScheduleError) as info:
        validate(read_torch_csv("\r\n".join(",".join(row) for row in rows) + "\r\n"))
    message = str(info.value)
    assert cell in message.splitlines()[0]
    assert "ERROR HERE" in message or "missing posts" in message


@pytest.mark.parametrize("path", LOWERED, ids=lambda p: p.name)
def test_torch_lowered_schedules_pass_the_fast_and_the_post_rules(path):
    schedule = read_torch_csv(path.read_text())
    validate(schedule)
    assert post_problems(schedule) == ({}, [])
