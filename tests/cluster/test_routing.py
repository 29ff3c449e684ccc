"""Router loads over experts and expert-parallel ranks: shares, draws, capacity, EPLB."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cluster.routing import (
    Routing,
    balanced_placement,
    capacity,
    capacity_limited,
    contiguous_placement,
    expert_loads,
    expert_shares,
    imbalance,
)


def test_uniform_shares_are_even():
    assert expert_shares(Routing(), 8, 2).tolist() == [0.125] * 8


def test_zipf_shares_follow_the_power_law():
    shares = expert_shares(Routing("zipf", zipf_s=1.0), 4)
    harmonic = 1 + 1 / 2 + 1 / 3 + 1 / 4
    assert shares == pytest.approx(
        [1 / harmonic, 1 / 2 / harmonic, 1 / 3 / harmonic, 0.25 / harmonic]
    )


def test_hot_experts_take_their_fraction():
    shares = expert_shares(Routing("hot", hot_fraction=0.5, hot_experts=2), 10)
    assert shares.tolist() == pytest.approx([0.25, 0.25] + [0.0625] * 8)


def test_a_histogram_is_normalised():
    shares = expert_shares(Routing("histogram", histogram=(3, 1, 0, 4)), 4)
    assert shares.tolist() == [0.375, 0.125, 0.0, 0.5]


def test_no_expert_takes_more_than_one_copy_of_each_token():
    # zipf s=3 on 4 experts gives the first 0.85 of the copies; with top_k 2 each token
    # sends one copy at most to it, so its share is capped at 1/2 and the rest share 1/2
    shares = expert_shares(Routing("zipf", zipf_s=3.0), 4, top_k=2)
    assert shares[0] == pytest.approx(0.5)
    assert shares.sum() == pytest.approx(1.0)
    rest = np.arange(2, 5, dtype=float) ** -3.0
    assert shares[1:] == pytest.approx(0.5 * rest / rest.sum())


def test_draws_are_seeded_and_count_every_copy():
    routing = Routing("zipf", zipf_s=1.2)
    one = expert_loads(routing, 64, 8, 4096, np.random.default_rng(7))
    two = expert_loads(routing, 64, 8, 4096, np.random.default_rng(7))
    assert one.tolist() == two.tolist()
    assert one.sum() == 4096 * 8
    other = expert_loads(routing, 64, 8, 4096, np.random.default_rng(8))
    assert one.tolist() != other.tolist()


def test_capacity_drops_what_passes_the_limit():
    # 16 tokens, top 2, 4 experts: capacity ceil(1.0 * 32 / 4) = 8 copies each
    assert capacity(16, 2, 4, 1.0) == 8
    kept, dropped = capacity_limited(np.array([14, 6, 8, 4]), 16, 2, 1.0)
    assert (kept.tolist(), dropped) == ([8, 6, 8, 4], 6)
    assert capacity(16, 2, 4, 1.25) == 10
    kept, dropped = capacity_limited(np.array([14, 6, 8, 4]), 16, 2, None)
    assert (kept.tolist(), dropped) == ([14, 6, 8, 4], 0)


def test_contiguous_placement_sums_neighbouring_experts():
    placement = contiguous_placement(8, 4)
    assert placement.rank_loads(np.arange(8)).tolist() == [1, 5, 9, 13]
    with pytest.raises(ValueError, match="must divide the 8 experts"):
        contiguous_placement(8, 3)


def test_redundant_copies_split_the_hottest_expert():
    # one expert takes half the copies; a second copy of it halves each copy's load, and
    # packing puts the two copies on different ranks
    shares = np.array([0.5, 0.125, 0.125, 0.125, 0.125, 0.0, 0.0])
    placement = balanced_placement(shares, ranks=4, redundant=1)
    loads = placement.rank_loads(shares)
    assert sorted(placement.expert.tolist()) == [0, 0, 1, 2, 3, 4, 5, 6]
    assert loads.tolist() == pytest.approx([0.25] * 4)
    assert imbalance(contiguous_placement(8, 4).rank_loads(np.append(shares, 0.0))) == 2.5


@settings(max_examples=60, deadline=None)
@given(
    experts_per_rank=st.integers(1, 8),
    ranks=st.integers(1, 8),
    redundant_per_rank=st.integers(0, 2),
    s=st.floats(0.0, 2.0),
)
def test_balanced_placement_never_loses_load_and_beats_contiguous(
    experts_per_rank, ranks, redundant_per_rank, s
):
    experts = experts_per_rank * ranks
    shares = expert_shares(Routing("zipf", zipf_s=s), experts)
    placement = balanced_placement(shares, ranks, redundant_per_rank * ranks)
    balanced = placement.rank_loads(shares)
    assert balanced.sum() == pytest.approx(1.0)
    # every expert runs somewhere, its copies' fractions summing to one
    assert np.bincount(placement.expert, weights=placement.fraction) == pytest.approx(
        np.ones(experts)
    )
    assert np.bincount(placement.rank).tolist() == [experts_per_rank + redundant_per_rank] * ranks
    contiguous = contiguous_placement(experts, ranks).rank_loads(shares)
    assert balanced.max() <= contiguous.max() + 1e-12


def test_imbalance_of_even_and_empty_loads():
    assert imbalance(np.array([3, 3, 3])) == 1.0
    assert imbalance(np.array([0, 0])) == 1.0
    assert imbalance(np.array([6, 2])) == 1.5


@pytest.mark.parametrize(
    "routing, message",
    [
        (dict(kind="pareto"), "routing kind must be one of"),
        (dict(kind="zipf", zipf_s=math.inf), "zipf_s must be"),
        (dict(kind="hot", hot_fraction=1.5), "hot_fraction must be"),
        (dict(kind="histogram"), "needs finite counts"),
        (dict(kind="histogram", histogram=(0, 0)), "at least one count"),
    ],
)
def test_bad_routings_are_refused(routing, message):
    with pytest.raises(ValueError, match=message):
        Routing(**routing)


def test_top_k_above_the_experts_is_refused():
    with pytest.raises(ValueError, match=r"top_k must be within \[1, experts=4\]"):
        expert_shares(Routing(), 4, top_k=5)
