"""``per_stage``: a number or one per stage, the one rule every costs section follows."""

from __future__ import annotations

import pytest

from pipesim.sim.costs import StageCountError, per_stage, uniform_costs


def test_a_number_applies_to_every_stage():
    assert per_stage(2, 3) == (2.0, 2.0, 2.0)
    assert all(isinstance(v, float) for v in per_stage(2, 3))


def test_a_list_of_the_right_length_is_taken_as_given():
    assert per_stage([1, 2.5, 3], 3) == (1.0, 2.5, 3.0)
    assert per_stage((4, 5), 2) == (4.0, 5.0)


def test_a_list_of_another_length_is_refused_naming_the_key():
    with pytest.raises(StageCountError) as caught:
        per_stage([1.0, 2.0], 3, "forward_ms")
    assert str(caught.value) == "forward_ms has 2 entries, expected 3 (one per stage)"
    assert (caught.value.key, caught.value.entries, caught.value.stages) == ("forward_ms", 2, 3)
    assert isinstance(caught.value, ValueError)


def test_uniform_costs_reads_every_field_through_it():
    costs = uniform_costs(2, forward_ms=[1, 2], activation_bytes=8)
    assert costs.forward_ms == (1.0, 2.0)
    assert costs.activation_bytes == (8.0, 8.0)
    with pytest.raises(
        ValueError, match=r"^backward_ms has 1 entries, expected 2 \(one per stage\)$"
    ):
        uniform_costs(2, backward_ms=[1])
