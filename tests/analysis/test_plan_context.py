"""The planner keeps ``parallel.context`` at the scenario's value: every candidate lays
out tensor x context x pipeline x data GPUs, and a context the scenario cannot run is a
PlanError naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim.analysis.plan.space import PlanError, build_space, enumerate_space
from pipesim.scenario.build import parse_spec, read_mapping

LONG = Path(__file__).parents[2] / "scenarios" / "llama3-8b-128k-context.yaml"


def spec_of(**parallel):
    data = read_mapping(LONG)
    data["parallel"].update(parallel)
    return parse_spec(data, str(LONG))


def test_candidates_use_the_scenarios_context_ranks():
    space = build_space(spec_of(), str(LONG), 64, ["pipeline.schedule=1f1b"])
    assert space.context == 8
    layouts = {(c.tensor, c.devices, c.data) for c, _ in enumerate_space(space) if c is not None}
    # 64 GPUs / 8 context ranks: tensor x pipeline x data = 8, tensor within a node
    assert layouts == {
        (t, p, 8 // (t * p)) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8) if t * p <= 8
    }


def test_all_to_all_prunes_tensor_sizes_the_heads_do_not_split_into():
    space = build_space(
        spec_of(context_mode="all-to-all"), str(LONG), 64, ["pipeline.schedule=1f1b"]
    )
    tensors = {c.tensor for c, _ in enumerate_space(space) if c is not None}
    assert tensors == {1}  # 8 kv heads over tensor x 8 context ranks


def test_a_context_the_scenario_cannot_run_is_a_plan_error():
    with pytest.raises(PlanError, match=r"parallel\.context: 3: does not cut model\.seq_len"):
        build_space(spec_of(context=3), str(LONG), 48, [])
