"""The insertion climb: its moves keep every order valid, it reaches the proven optimum on
V-Min's memory, and a search with it is never slower nor over the limit."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.schedules import fit_virtual_stages, get_schedule
from pipesim.schedules.ir import Action, F, I, Kind, Schedule, W, single_chain
from pipesim.schedules.validity import validate
from pipesim.search import auto, insertion, minimum_limit_bytes, search_schedule, v_candidates
from pipesim.search.auto import evaluate, run_candidate
from pipesim.search.improve import moved
from pipesim.search.insertion import chased, insertion_climb, insertion_moves, repeated
from pipesim.sim.engine import DeadlockError
from pipesim.sim.links import Link, Topology
from tests.search.orders import small_costs, split_costs


def test_the_moves_of_one_stage_keep_microbatch_and_pass_order():
    """F0 F1 I0 W0 I1 W1: F1 may go after I0 or W0, I0 before F1, W0 after I1, I1 before
    W0; nothing passes its own stage's pass of the same kind or microbatch."""
    f0, f1, i0, w0, i1, w1 = (
        Action(0, k, mb) for k, mb in ((F, 0), (F, 1), (I, 0), (W, 0), (I, 1), (W, 1))
    )
    actions = (f0, f1, i0, w0, i1, w1)
    schedule = Schedule((actions,), (0,), single_chain(1, 2), "one stage")
    assert insertion_moves(schedule, 8) == [(0, 1, 2), (0, 1, 3), (0, 2, 1), (0, 3, 4), (0, 4, 3)]
    assert insertion_moves(schedule, 1) == [(0, 1, 2), (0, 2, 1), (0, 3, 4), (0, 4, 3)]
    assert moved(schedule, (0, 1, 3)).device_actions[0] == (f0, i0, w0, f1, i1, w1)


def test_a_repeated_move_changes_every_later_round_alike():
    """F0 F1 I0 W0 F2 I1 W1 I2 W2 with I0 moved before F1: I1 goes before F2 as well (I2
    has no F3 to go before), giving 1F1B's alternation; a move that would put W0 before
    I0 is refused."""
    one = lambda kind, mb: Action(0, kind, mb)  # noqa: E731
    names = "F0 F1 I0 W0 F2 I1 W1 I2 W2".split()
    actions = tuple(one(Kind(name[0]), int(name[1])) for name in names)
    schedule = Schedule((actions,), (0,), single_chain(1, 3), "one stage")
    after = repeated(schedule, (0, 2, 1))
    assert [f"{a.kind}{a.microbatch}" for a in after.device_actions[0]] == (
        "F0 I0 F1 W0 I1 F2 W1 I2 W2".split()
    )
    assert repeated(schedule, (0, 3, 2)) is None


@pytest.mark.parametrize(("recipe", "devices", "microbatches"), [("zb-h1", 3, 4), ("zbv", 2, 4)])
def test_every_move_leaves_a_valid_order(recipe, devices, microbatches):
    schedule = get_schedule(recipe, devices, microbatches, fit_virtual_stages(recipe, 1))
    moves = insertion_moves(schedule, 8)
    assert moves
    for move in moves:
        after = moved(schedule, move)
        validate(after)
        for actions in after.device_actions:
            for stage in {a.stage for a in actions}:
                for kind in (F, I, W):
                    order = [a.microbatch for a in actions if a.stage == stage and a.kind == kind]
                    assert order == sorted(order), (move, stage, kind)


def test_v_min_memory_reaches_the_proven_optimum(monkeypatch):
    """v-auto on 4 devices, 4 microbatches, per chunk F 0.5, I 0.6, W 0.3 ms, 2 bytes held
    from F (0.5 until W) and a limit of 4 chunks (V-Min's memory): the exact mode proves
    18.0 ms optimal (30 s of CP-SAT); the search's candidates and its first two climbs stop
    at 18.2 ms, and the insertion climb from there reaches 18.0."""
    costs = split_costs(8, 0.5, 0.6, 0.3, kept=2.0, weight_grad=0.5)
    monkeypatch.setattr(auto, "INSERTION_MOST_ACTIONS", 0)  # no insertion climb
    monkeypatch.setattr(insertion, "CHASE_MOST_ACTIONS", 0)  # nor chase
    monkeypatch.setattr(auto, "ANNEAL_MOST_ACTIONS", 0)  # nor annealing
    before = search_schedule("v-auto", 4, 4, costs, None, 8.0)
    assert before.makespan_ms == pytest.approx(18.2, abs=1e-9)

    def run(schedule):
        try:
            found, trace = run_candidate(schedule, costs, None, "")
        except DeadlockError:  # two devices wait for each other
            return None, None
        return (found.makespan_ms if found.peak_bytes <= 8.0 * (1 + 1e-12) else None), trace

    climbed = insertion_climb(before.schedule, 400, run, auto.INSERTION_REACH)
    assert run(climbed)[0] == pytest.approx(18.0, abs=1e-9)
    assert evaluate(climbed, costs, None, "").peak_bytes <= 8.0


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_never_slower_nor_over_the_limit(monkeypatch, data):
    name = data.draw(st.sampled_from(["zb-auto", "v-auto"]))
    devices = data.draw(st.integers(2, 3))
    microbatches = data.draw(st.integers(1, 4))
    costs, _ = small_costs(data.draw, devices * auto.AUTO_POLICIES[name])
    topology = Topology(devices, Link(latency_us=data.draw(st.sampled_from([0.0, 500.0]))))
    floor = minimum_limit_bytes(name, devices, microbatches, costs)
    limit = floor * data.draw(st.sampled_from([1.0, 1.25, 1.5]))
    args = (name, devices, microbatches, costs, topology, limit)
    monkeypatch.setattr(auto, "IMPROVE_ACTIONS", 10_000)
    monkeypatch.setattr(auto, "INSERTION_TIGHT", 1e9)  # every limit counts as tight
    monkeypatch.setattr(auto, "ANNEAL_MOST_ACTIONS", 0)  # the climbs alone
    found = search_schedule(*args)
    monkeypatch.setattr(auto, "INSERTION_MOST_ACTIONS", 0)  # no insertion climb
    monkeypatch.setattr(insertion, "CHASE_MOST_ACTIONS", 0)  # nor chase
    before = search_schedule(*args)
    assert found.makespan_ms <= before.makespan_ms * (1 + 1e-12)
    assert found.peak_activation_bytes <= limit * (1 + 1e-9)
    validate(found.schedule)


def _v_min_case(monkeypatch):
    """4 devices, 13 microbatches (312 actions: above the insertion phase's size), per
    chunk F 0.5, I 0.6, W 0.3 ms, 0.1 ms links, 4 chunks of memory (V-Min's); the other
    phases on small budgets so that the case stays quick, and no paced orders."""
    for name in ("IMPROVE_ACTIONS", "CONSTRUCT_ACTIONS", "BLOCK_ACTIONS"):
        monkeypatch.setattr(auto, name, 20_000)
    monkeypatch.setattr(insertion, "CHASE_ACTIONS", 100_000)  # 320 candidates
    monkeypatch.setattr(auto, "ANNEAL_MOST_ACTIONS", 0)  # the climbs alone
    # without the paced orders (they start the climbs elsewhere: 53.8 ms with them)
    monkeypatch.setattr(v_candidates, "PACED_LEAST_ACTIONS", 10**9)
    costs = split_costs(8, 0.5, 0.6, 0.3, kept=2.0, weight_grad=0.5)
    return ("v-auto", 4, 13, costs, Topology(4, Link(latency_us=100.0)), 8.0)


def test_the_chase_speeds_up_a_larger_v_min_case(monkeypatch):
    """Above the insertion phase's size the tight V case climbs by chased moves: 56.6 ms
    without them, 55.5 ms with (the bound is 45.7)."""
    args = _v_min_case(monkeypatch)
    found = search_schedule(*args)
    assert found.makespan_ms == pytest.approx(55.5, abs=1e-9)
    assert found.source.startswith("chased moves from")
    assert found.peak_activation_bytes <= 8.0 * (1 + 1e-9)
    validate(found.schedule)
    monkeypatch.setattr(insertion, "CHASE_MOST_ACTIONS", 0)  # no chase
    assert search_schedule(*args).makespan_ms == pytest.approx(56.6, abs=1e-9)


def test_a_chased_move_is_the_same_move_for_the_next_microbatches():
    """F0 F1 I0 W0 F2 I1 W1 F3 I2 W2 I3 W3, I0 moved before F1 and taken: the chase moves
    I1 before F2, then I2 before F3, each kept while it lowers the score (here the order's
    position sum of the I passes), and stops where the next has no F to go before."""
    one = lambda kind, mb: Action(0, kind, mb)  # noqa: E731
    names = "F0 F1 I0 W0 F2 I1 W1 F3 I2 W2 I3 W3".split()
    actions = tuple(one(Kind(name[0]), int(name[1])) for name in names)
    schedule = Schedule((actions,), (0,), single_chain(1, 4), "one stage")
    after = moved(schedule, (0, 2, 1))

    def score(makespan_ms, trace):
        return (makespan_ms, trace)

    def run(candidate):
        order = candidate.device_actions[0]
        return 1.0, float(sum(at for at, a in enumerate(order) if a.kind == Kind.I))

    chased_order, best, left = chased(
        schedule, (0, 2, 1), (after, score(*run(after))), 5, run, score
    )
    assert [f"{a.kind}{a.microbatch}" for a in chased_order.device_actions[0]] == (
        "F0 I0 F1 W0 I1 F2 W1 I2 F3 W2 I3 W3".split()
    )
    assert left == 3


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_chase_is_never_slower_nor_over_the_limit(monkeypatch, data):
    """The chase at every size (every limit counted tight) against none."""
    devices = data.draw(st.integers(2, 3))
    microbatches = data.draw(st.integers(2, 4))
    costs, _ = small_costs(data.draw, 2 * devices)
    topology = Topology(devices, Link(latency_us=data.draw(st.sampled_from([0.0, 500.0]))))
    floor = minimum_limit_bytes("v-auto", devices, microbatches, costs)
    limit = floor * data.draw(st.sampled_from([1.0, 1.25, 1.5]))
    args = ("v-auto", devices, microbatches, costs, topology, limit)
    monkeypatch.setattr(auto, "IMPROVE_ACTIONS", 5_000)
    monkeypatch.setattr(auto, "INSERTION_MOST_ACTIONS", 0)  # the chase, at every size
    monkeypatch.setattr(auto, "ANNEAL_MOST_ACTIONS", 0)  # the climbs alone
    monkeypatch.setattr(auto, "INSERTION_TIGHT", 1e9)  # every limit counts as tight
    found = search_schedule(*args)
    monkeypatch.setattr(insertion, "CHASE_MOST_ACTIONS", 0)  # no chase
    before = search_schedule(*args)
    assert found.makespan_ms <= before.makespan_ms * (1 + 1e-12)
    assert found.peak_activation_bytes <= limit * (1 + 1e-9)
    validate(found.schedule)
