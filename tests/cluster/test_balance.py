"""Stages of layers that weigh differently: the balanced split is the best one, checked
against trying every split."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cluster.balance import balanced_split
from pipesim.cluster.model import TransformerModel, flops_loads, partition_layers
from pipesim.cluster.moe import MoE


def loads_of(split, per_layer, first_extra, last_extra):
    loads, start = [], 0
    for n in split:
        loads.append(sum(per_layer[start : start + n]))
        start += n
    loads[0] += first_extra
    loads[-1] += last_extra
    return loads


def every_split(layers, stages):
    for cuts in combinations(range(1, layers), stages - 1):
        bounds = (0, *cuts, layers)
        yield tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=9),
    st.integers(1, 9),
    st.integers(0, 80),
    st.integers(0, 80),
)
def test_the_split_is_the_best_bottleneck_and_the_most_even_under_it(
    per_layer, stages, first_extra, last_extra
):
    stages = min(stages, len(per_layer))
    split = balanced_split(per_layer, stages, first_extra, last_extra)
    assert len(split) == stages and min(split) >= 1 and sum(split) == len(per_layer)
    candidates = [
        loads_of(s, per_layer, first_extra, last_extra) for s in every_split(len(per_layer), stages)
    ]
    best = min(max(loads) for loads in candidates)
    mine = loads_of(split, per_layer, first_extra, last_extra)
    assert max(mine) == best
    evenest = min(sum(x * x for x in loads) for loads in candidates if max(loads) == best)
    assert sum(x * x for x in mine) == evenest


def test_a_cheap_first_layer_goes_with_heavier_ones():
    # one dense layer of 1, then MoE layers of 10: the dense layer rides with the first
    assert balanced_split([1, 10, 10, 10, 10, 10, 10], 3) == (3, 2, 2)
    assert balanced_split([1, 10, 10, 10, 10, 10, 10], 3, last_extra=15) == (3, 3, 1)


def test_stages_must_hold_a_layer_each():
    with pytest.raises(ValueError, match="need 1 <= stages <= layers"):
        balanced_split([1, 2], 3)


def test_a_moe_model_after_dense_layers_is_balanced_by_its_layer_loads():
    model = TransformerModel(
        layers=8,
        hidden=256,
        heads=4,
        seq_len=64,
        vocab=64,
        mlp="gated",
        ffn_hidden=64,
        moe=MoE(experts=32, top_k=8, expert_ffn_hidden=80, dense_layers=2),
    )
    per_layer, first_extra, last_extra = flops_loads(model)
    assert per_layer[:2] == (per_layer[0],) * 2 and per_layer[2:] == (per_layer[2],) * 6
    assert per_layer[2] > 2 * per_layer[0]  # a MoE layer: 8 experts per token
    split = partition_layers(model, 3, "balanced")
    assert split == balanced_split(per_layer, 3, first_extra, last_extra)
    best = min(max(loads_of(s, per_layer, first_extra, last_extra)) for s in every_split(8, 3))
    assert max(loads_of(split, per_layer, first_extra, last_extra)) == best
