"""The IR's text form, CSV format and validator."""

import re

import pytest

from pipesim.schedules.forward import forward_only
from pipesim.schedules.ir import (
    Action,
    B,
    Chain,
    F,
    I,
    Schedule,
    ScheduleError,
    W,
    from_csv,
    group,
    overlapped,
    parse_action,
    schedule_from_lists,
    to_csv,
    v_placement,
)
from pipesim.schedules.posts import RECV_F, SEND_F, Post
from pipesim.schedules.torch_csv import read_torch_csv
from pipesim.schedules.validity import validate


@pytest.mark.parametrize(
    "text, action",
    [
        ("2F0", Action(2, F, 0)),
        ("0B13", Action(0, B, 13)),
        ("11I3", Action(11, I, 3)),
        ("1W7", Action(1, W, 7)),
        ("(0F7;7B3)OVERLAP_F_B", overlapped(Action(0, F, 7), Action(7, B, 3))),
        # torch's parser takes any group of actions, and so does pipesim
        ("(0F1)OVERLAP_F_B", group(Action(0, F, 1))),
        ("(0B1;1F0)OVERLAP_F_B", group(Action(0, B, 1), Action(1, F, 0))),
        ("(2F0;5I1;6W0)OVERLAP_F_B", group(Action(2, F, 0), Action(5, I, 1), Action(6, W, 0))),
    ],
)
def test_text_form_round_trips(text, action):
    assert parse_action(text) == action
    assert str(action) == text


def test_torch_long_kind_names_parse():
    assert parse_action("3FULL_BACKWARD1") == Action(3, B, 1)
    assert parse_action("3BACKWARD_INPUT1") == Action(3, I, 1)


@pytest.mark.parametrize(
    "bad",
    [
        "F0",
        "2X0",
        "2F",
        "()OVERLAP_F_B",
        "(0F1;)OVERLAP_F_B",
        "((0F1;1B0)OVERLAP_F_B)OVERLAP_F_B",
        "(0F1;1SEND_F1)OVERLAP_F_B",
        "(0F1;1B0)F",
    ],
)
def test_bad_text_is_rejected(bad):
    with pytest.raises(ScheduleError):
        parse_action(bad)


def test_policies_build_only_forward_then_backward_pairs():
    with pytest.raises(ScheduleError, match="a forward then a backward"):
        overlapped(Action(0, B, 1), Action(1, F, 0))


def test_csv_skips_empty_cells_and_infers_placement():
    text = "0F0,,0B0\n,1F0,1B0\n"
    schedule = from_csv(text)
    assert schedule.placement == (0, 1)
    assert schedule.device_actions[0] == (Action(0, F, 0), Action(0, B, 0))
    assert to_csv(schedule) == "0F0,0B0\n1F0,1B0\n"


def test_csv_infers_two_chains_for_a_bidirectional_schedule():
    # Chain 0: stages 0,1 on devices 0,1 for microbatch 0; chain 1: stages 2,3 on devices
    # 1,0 for microbatch 1.
    text = "0F0,3F1,3B1,0B0\n2F1,1F0,1B0,2B1\n"
    schedule = from_csv(text)
    assert schedule.chains == (Chain(0, 1, range(0, 1)), Chain(2, 3, range(1, 2)))
    assert schedule.placement == (0, 1, 1, 0)
    assert schedule.model_stage(3) == 1 and schedule.prev_stage(2) is None
    validate(schedule)


def test_csv_rejects_a_stage_on_two_ranks():
    with pytest.raises(ScheduleError, match="stage 0 appears on rank 0 and rank 1"):
        from_csv("0F0\n0B0\n")


def test_csv_rejects_overlapping_partial_chains():
    # Microbatch 0 runs stages 0..1 but microbatch 1 only stage 0.
    with pytest.raises(ScheduleError, match="every microbatch must run all stages"):
        from_csv("0F0,0F1,0B0,0B1\n1F0,1B0\n")


def test_validator_marks_a_duplicate_in_the_grid():
    lists = [
        [Action(0, F, 0), Action(0, F, 0), Action(0, B, 0)],
        [Action(1, F, 0), Action(1, B, 0)],
    ]
    schedule = schedule_from_lists(lists)
    with pytest.raises(ScheduleError) as info:
        validate(schedule)
    message = str(info.value)
    assert message.splitlines()[0].startswith("invalid schedule: rank 0 step 1: 0F0 appears twice")
    assert "Step 01 >>0F0<<" in message and "<-- ERROR HERE" in message


def test_validator_finds_missing_wrong_device_and_bad_order():
    placement = (0, 1)
    chains = (Chain(0, 1, range(2)),)
    missing = Schedule(
        ((Action(0, F, 0), Action(0, B, 0)), (Action(1, F, 0), Action(1, B, 0))), placement, chains
    )
    with pytest.raises(ScheduleError, match="missing actions: 0F1, 0B1, 1F1, 1B1"):
        validate(missing)
    order = Schedule(
        ((Action(0, B, 0), Action(0, F, 0)), (Action(1, F, 0), Action(1, B, 0))),
        placement,
        (Chain(0, 1, range(1)),),
    )
    with pytest.raises(ScheduleError, match="0B0 comes before 0F0"):
        validate(order)
    wrong = Schedule(
        ((Action(1, F, 0), Action(0, F, 0), Action(0, B, 0)), (Action(1, B, 0),)),
        placement,
        (Chain(0, 1, range(1)),),
    )
    with pytest.raises(ScheduleError, match="stage 1 is placed on device 1, not 0"):
        validate(wrong)


def test_split_backward_needs_both_halves():
    lists = [[Action(0, F, 0), Action(0, I, 0)]]
    with pytest.raises(ScheduleError, match="missing actions: 0W0"):
        validate(schedule_from_lists(lists))


def test_to_csv_can_end_rows_as_torch_does():
    schedule = from_csv("0F0,0B0\n1F0,1B0\n")
    assert to_csv(schedule, lineterminator="\r\n") == "0F0,0B0\r\n1F0,1B0\r\n"


def test_a_group_whose_members_feed_each_other_is_refused():
    # 1F0 needs 0F0's activation; both on rank 0 in one group: pipesim runs the group as one
    # action, so it would wait for its own output.
    lists = [
        [group(Action(0, F, 0), Action(1, F, 0)), Action(1, B, 0), Action(0, B, 0)],
    ]
    with pytest.raises(ScheduleError, match="1F0 needs the output of 0F0 in the same group"):
        validate(schedule_from_lists(lists))
    # The loss stage may run its forward and backward as one group.
    loss_group = group(Action(1, F, 0), Action(1, B, 0))
    validate(schedule_from_lists([[Action(0, F, 0), loss_group, Action(0, B, 0)]]))


def test_forward_only_drops_backwards_and_their_posts():
    text = "0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD\n1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD\n"
    schedule = forward_only(read_torch_csv(text))
    assert [schedule.program(d) for d in range(2)] == [
        [Action(0, F, 0), Post(0, SEND_F, 0)],
        [Post(1, RECV_F, 0), Action(1, F, 0)],
    ]
    validate(schedule)


def test_v_placement():
    assert v_placement(4) == (0, 1, 2, 3, 3, 2, 1, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "99999999999F0,99999999999B0\n",
            "stage 0 has no actions (stages 0..99999999999 expected)",
        ),
        ("0F99999999999,0B99999999999\n", "microbatch 99999999999: a schedule of 2 actions"),
        ("0F" + "9" * 30 + ",0B0\n", "microbatch " + "9" * 30 + ": a schedule of 2 actions"),
    ],
)
def test_huge_indices_are_refused_at_once_not_allocated(text, message):
    # Stage and microbatch indices size arrays further down; an index no schedule of this
    # many actions can hold is an error before anything is built.
    with pytest.raises(ScheduleError, match=re.escape(message)):
        from_csv(text)
