"""The policy registry: one typed entry per policy, checks written once for all of them."""

from collections.abc import Iterator

import pytest

from pipesim.schedules import (
    POLICIES,
    ChunkRule,
    ConstraintError,
    Policy,
    Registry,
    closed_form_of,
    fit_virtual_stages,
    get_schedule,
    list_schedules,
)
from pipesim.schedules.ir import Action, F, Schedule, single_chain
from pipesim.schedules.policies import gpipe, interleaved, one_f_one_b

DOCUMENTED_ORDER = [
    "gpipe",
    "1f1b",
    "interleaved-1f1b",
    "looped-bfs",
    "zb-h1",
    "zb-h2",
    "eager-1f1b",
    "interleaved-zero-bubble",
    "dualpipe",
    "dualpipev",
    "zbv",
    "v-half",
    "v-min",
    "chimera",
    "1f1b-a2a-overlap",
    "interleaved-1f1b-a2a-overlap",
]


def test_the_registry_lists_every_policy_once_in_the_documented_order():
    assert list(POLICIES) == DOCUMENTED_ORDER
    assert [name for name, _, _ in list_schedules()] == DOCUMENTED_ORDER
    assert all(isinstance(POLICIES[name], Policy) for name in POLICIES)
    assert all(POLICIES[name].name == name for name in POLICIES)


def test_entries_carry_the_chunk_rule_and_the_closed_form():
    assert POLICIES["1f1b"].chunks == ChunkRule.exactly(1)
    assert POLICIES["zbv"].chunks == ChunkRule.exactly(2)
    assert POLICIES["interleaved-1f1b"].chunks.count == 2
    assert POLICIES["looped-bfs"].chunks == ChunkRule.any()
    fits = {name: [fit_virtual_stages(name, v) for v in (1, 2, 3)] for name in POLICIES}
    assert fits["gpipe"] == [1, 1, 1] and fits["v-min"] == [2, 2, 2]
    assert fits["interleaved-zero-bubble"] == [2, 2, 3] and fits["looped-bfs"] == [1, 2, 3]
    assert closed_form_of("gpipe") is gpipe.closed_form is POLICIES["gpipe"].closed_form
    assert closed_form_of("1f1b") is one_f_one_b.closed_form
    assert closed_form_of("interleaved-1f1b") is interleaved.closed_form
    assert closed_form_of("zb-h1") is None and closed_form_of("no-such-policy") is None


@pytest.mark.parametrize("name", DOCUMENTED_ORDER)
def test_the_constraints_line_states_the_chunk_rule(name):
    rule, constraints = POLICIES[name].chunks, POLICIES[name].constraints
    if rule.exact:
        assert f"virtual_stages = {rule.count}" in constraints
    else:
        assert f"virtual_stages >= {rule.count}" in constraints


@pytest.mark.parametrize("name", DOCUMENTED_ORDER)
def test_an_option_the_policy_does_not_take_is_refused_by_name(name):
    takes = ("delay_wgrad",) if name.endswith("-a2a-overlap") else ()
    assert POLICIES[name].options == takes
    virtual = fit_virtual_stages(name, 1)
    message = f"{name} takes no option 'warmup'; allowed: {', '.join(takes) or 'none'}"
    with pytest.raises(ConstraintError) as refused:
        get_schedule(name, 4, 8, virtual, warmup=3)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "name, virtual, message",
    [
        ("gpipe", 2, "gpipe takes virtual_stages = 1, got virtual_stages=2"),
        ("1f1b", 3, "1f1b takes virtual_stages = 1, got virtual_stages=3"),
        ("zb-h1", 2, "zb-h1 takes virtual_stages = 1, got virtual_stages=2"),
        ("dualpipe", 2, "dualpipe takes virtual_stages = 1, got virtual_stages=2"),
        ("chimera", 2, "chimera takes virtual_stages = 1, got virtual_stages=2"),
        ("zbv", 1, "zbv takes virtual_stages = 2, got virtual_stages=1"),
        ("v-half", 3, "v-half takes virtual_stages = 2, got virtual_stages=3"),
        ("dualpipev", 1, "dualpipev takes virtual_stages = 2, got virtual_stages=1"),
        (
            "interleaved-1f1b",
            1,
            "interleaved-1f1b needs virtual_stages >= 2 (1 is plain 1f1b), got virtual_stages=1",
        ),
        (
            "interleaved-zero-bubble",
            1,
            "interleaved-zero-bubble needs virtual_stages >= 2, got virtual_stages=1",
        ),
    ],
)
def test_a_chunk_count_the_rule_forbids_is_refused_with_the_old_message(name, virtual, message):
    with pytest.raises(ConstraintError) as refused:
        get_schedule(name, 4, 8, virtual)
    assert str(refused.value) == message


def test_the_chunk_count_is_checked_before_the_policy_s_own_limits():
    # DualPipe also needs an even device count; the chunk rule is named first, as before
    with pytest.raises(ConstraintError, match="dualpipe takes virtual_stages = 1"):
        get_schedule("dualpipe", 3, 8, 2)
    with pytest.raises(ConstraintError, match="must be >= 1"):
        get_schedule("zbv", 0, 8, 1)


def _toy(devices: int, microbatches: int, virtual_stages: int, *, reverse: bool = False):
    """Every forward, microbatches in order (or reversed); forward-only, one stage per device."""
    order = range(microbatches)[::-1] if reverse else range(microbatches)
    actions = tuple(tuple(Action(d, F, i) for i in order) for d in range(devices))
    return Schedule(actions, tuple(range(devices)), single_chain(devices, microbatches), "toy")


@pytest.fixture
def toy() -> Iterator[Policy]:
    policy = POLICIES.register(Policy("toy", "forwards only", "any", ChunkRule.any(), _toy))
    yield policy
    POLICIES.unregister("toy")


def test_a_new_policy_is_one_registry_line(toy):
    assert toy.options == ("reverse",)
    assert list(POLICIES)[-1] == "toy" and list_schedules()[-1] == ("toy", "forwards only", "any")
    schedule = get_schedule("toy", 2, 3)
    assert [str(a) for a in schedule.device_actions[1]] == ["1F0", "1F1", "1F2"]
    reversed_ = get_schedule("toy", 2, 3, reverse=True)
    assert [str(a) for a in reversed_.device_actions[0]] == ["0F2", "0F1", "0F0"]
    with pytest.raises(ConstraintError) as refused:
        get_schedule("toy", 2, 3, reverse=True, skew=1, warmup=2)
    assert str(refused.value) == "toy takes no option 'skew', 'warmup'; allowed: reverse"
    assert fit_virtual_stages("toy", 3) == 3 and closed_form_of("toy") is None


def test_registering_a_name_twice_or_a_builder_that_swallows_options_is_refused(toy):
    with pytest.raises(ValueError, match="'toy' is registered already"):
        POLICIES.register(toy)

    def swallows(devices: int, microbatches: int, virtual_stages: int, **_: object):
        raise AssertionError("never built")

    with pytest.raises(TypeError, match=r"options are keyword-only and named, never \*\*"):
        Policy("loose", "", "", ChunkRule.any(), swallows)
    with pytest.raises(TypeError, match=r"got build\(devices, microbatches\)"):
        Policy("short", "", "", ChunkRule.any(), lambda devices, microbatches: None)


def test_an_unknown_name_lists_the_registered_ones():
    registry = Registry([POLICIES["gpipe"], POLICIES["zbv"]])
    assert list(registry) == ["gpipe", "zbv"] and len(registry) == 2 and "zbv" in registry
    with pytest.raises(ConstraintError) as refused:
        registry.policy("pipedream")
    assert str(refused.value) == "unknown schedule 'pipedream'; allowed: gpipe, zbv"
