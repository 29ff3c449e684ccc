"""A MoE stage's passes cut into sub-layer parts (``pipesim.cluster.moe_parts``): they add
up to the stage's passes, every all-to-all is one dispatch or combine at the load factor,
the experts' parts are the stage's routed-expert GEMMs, and only expert parallelism has
parts to overlap."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim import load_scenario
from pipesim.schedules.ir import Kind

SCENARIOS = Path(__file__).parents[2] / "scenarios"
DEEPSEEK = SCENARIOS / "deepseek-v3-2048xh800.yaml"
MIXTRAL_EP = SCENARIOS / "mixtral-8x7b-ep8-4x8-h100.yaml"


@pytest.mark.parametrize(("path", "again"), [(DEEPSEEK, 2), (MIXTRAL_EP, 1)])
def test_parts_add_up_to_the_passes(path, again):
    """DeepSeek-V3 recomputes (each layer's dispatch and combine run again in I), Mixtral
    does not."""
    scenario = load_scenario(path)
    costs, ep = scenario.costs, scenario.expert_parallel
    one = ep.all_to_all.ms(ep.load.load_factor)
    for k, stage in enumerate(costs.moe_parts):
        n = ep.layers[k]
        assert (stage is None) == (n == 0)
        if stage is None:
            continue
        assert stage.forward.total_ms == pytest.approx(costs.forward_ms[k], rel=1e-12)
        assert stage.backward_input.total_ms == pytest.approx(costs.backward_input_ms[k], rel=1e-12)
        assert stage.backward().total_ms == pytest.approx(costs.backward_ms[k], rel=1e-12)
        assert sum(stage.weight_ms) == pytest.approx(costs.backward_weight_ms[k], rel=1e-12)
        assert stage.forward.comm_ms == (one,) * (2 * n)
        assert stage.backward_input.comm_ms == (one,) * (2 * again * n)
        assert stage.forward.comm_total_ms == pytest.approx(ep.forward_ms[k])
        experts = [ms for ms, name in zip(*_named(stage.forward), strict=True) if name == "experts"]
        assert experts == pytest.approx([ep.experts_ms[k][0] * ep.load.load_factor / n] * n)
        assert set(stage.forward.comm_names) == {"dispatch", "combine"}


def _named(parts):
    return parts.compute_ms, parts.compute_names


def test_an_overlapped_pair_is_shorter_than_its_passes_in_turn():
    costs = load_scenario(MIXTRAL_EP).costs
    for k in range(costs.stages):
        pair = costs.overlapped_ms(k, Kind.B, k)
        assert max(costs.forward_ms[k], costs.backward_ms[k]) < pair
        assert pair < costs.forward_ms[k] + costs.backward_ms[k]


@pytest.mark.parametrize(
    ("path", "overrides"),
    [
        (MIXTRAL_EP, ["parallel.expert=1"]),
        (SCENARIOS / "llama-70b-4x8-h100.yaml", []),
    ],
)
def test_no_all_to_all_no_parts(path, overrides):
    assert load_scenario(path, overrides).costs.moe_parts is None
