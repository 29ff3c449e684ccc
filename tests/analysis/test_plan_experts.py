"""The planner's expert-parallel axis: its default values, the sizes it prunes and why, and
a MoE plan whose winner is the scenario ``pipesim run`` gives the same step for."""

from __future__ import annotations

from collections import Counter

import pytest

from pipesim.analysis.plan import (
    PlanRow,
    build_space,
    emit_mapping,
    enumerate_space,
    explain_plan,
    plan,
    run_emitted,
)
from pipesim.scenario.build import parse_spec
from tests.analysis.test_plan import SOURCE, small_base

NARROW = (
    "pipeline.schedule=1f1b",
    "pipeline.microbatch_size=1",
    "model.recompute=false",
    "parallel.zero_stage=1",
    "model.partition=even",
    "parallel.dp_overlap=false",
    "parallel.tp_overlap=false",
)


def moe_base(experts: int = 8) -> dict:
    """``small_base`` with MoE layers of ``experts`` experts, 2 a token."""
    base = small_base()
    moe = {"experts": experts, "top_k": 2, "expert_ffn_hidden": 1536}
    base["model"] = {**base["model"], "moe": moe}
    return base


def reasons(base: dict, gpus: int, space: tuple[str, ...]) -> Counter:
    points = enumerate_space(build_space(parse_spec(base, SOURCE), SOURCE, gpus, space))
    return Counter(reason for candidate, reason in points if candidate is None)


def test_the_expert_axis_is_every_power_of_two_dividing_the_experts():
    space = build_space(parse_spec(moe_base(8), SOURCE), SOURCE, 8, ())
    assert space.axes["parallel.expert"] == (1, 2, 4, 8)
    space = build_space(parse_spec(moe_base(64), SOURCE), SOURCE, 8, ())
    assert space.axes["parallel.expert"] == (1, 2, 4, 8)  # up to the GPUs
    dense = build_space(parse_spec(small_base(), SOURCE), SOURCE, 8, ())
    assert dense.axes["parallel.expert"] == (None,)  # no axis


def test_expert_sizes_are_pruned_with_their_reason():
    space = (*NARROW, "parallel.tensor=1", "pipeline.devices=4", "parallel.expert=3,4,16")
    # 8 GPUs: TP 1 x PP 4 x DP 2; 32 experts
    found = reasons(moe_base(32), 8, space)
    assert found["expert size does not divide the experts"] == 1  # EP 3
    assert found["expert size exceeds the GPUs"] == 1  # EP 16 of 8 GPUs
    assert found["expert size does not divide data x context"] == 1  # EP 4 of DP 2
    dense = reasons(small_base(), 8, (*NARROW, "parallel.tensor=1", "parallel.expert=2"))
    assert set(dense) >= {"expert parallelism without model.moe"}
    zero3 = (*NARROW[:3], "parallel.zero_stage=3", *NARROW[4:], "parallel.expert=2")
    assert reasons(moe_base(8), 8, zero3)["ZeRO-3 with expert parallelism (not modelled)"] > 0


@pytest.fixture(scope="module")
def moe_plan():
    space = (*NARROW, "parallel.tensor=1,2", "pipeline.devices=2")
    return plan(moe_base(8), SOURCE, 8, space, top=10, confirm=2)


def test_a_moe_plan_scores_expert_sizes_as_pipesim_run_builds_them(moe_plan):
    assert moe_plan.axes["parallel.expert"] == [1, 2, 4, 8]
    sizes = {row.candidate.expert for row in moe_plan.results}
    assert sizes > {1}
    assert moe_plan.confirmed == 2
    best = moe_plan.results[0]
    mapping = emit_mapping(moe_plan.base, best.candidate)
    assert mapping["parallel"]["expert"] == best.candidate.expert
    report = run_emitted(mapping, SOURCE).report
    assert report.step_time_ms == best.step_time_ms
    row = best.to_dict()
    assert row["parallel.expert"] == best.candidate.expert
    assert PlanRow.from_dict(row) == best


def test_a_dense_plan_has_no_expert_key():
    space = (*NARROW, "parallel.tensor=2", "pipeline.devices=2")
    dense = plan(small_base(), SOURCE, 8, space, top=3, confirm=0)
    assert "parallel.expert" not in dense.axes
    assert "parallel.expert" not in dense.results[0].to_dict()


def test_explain_names_where_the_expert_group_sits(moe_plan):
    ep = [row for row in moe_plan.results if row.candidate.expert > 1]
    explanation = explain_plan(moe_plan.base, SOURCE, [ep[0], *moe_plan.results[:1]])
    words = explanation.winner.experts
    size = ep[0].candidate.expert
    assert words.startswith(f"experts: EP {size} ")
    where = "inside one node" if size * ep[0].candidate.tensor <= 4 else "over 2 nodes"
    assert where in words
    terms = explanation.winner.terms_ms
    assert terms["expert all-to-all"] > 0
    assert sum(terms.values()) == pytest.approx(explanation.winner.step_time_ms, rel=1e-12)


def test_the_combined_1f1b_schedules_join_a_moe_space_only():
    dense = build_space(parse_spec(small_base(), SOURCE), SOURCE, 8, ())
    moe = build_space(parse_spec(moe_base(8), SOURCE), SOURCE, 8, ())
    overlap = ("1f1b-a2a-overlap", "interleaved-1f1b-a2a-overlap")
    assert not set(overlap) & set(dense.axes["pipeline.schedule"])
    assert set(overlap) <= set(moe.axes["pipeline.schedule"])
    space = (*NARROW[1:], "pipeline.schedule=1f1b-a2a-overlap", "parallel.tensor=1")
    found = reasons(moe_base(8), 8, (*space, "parallel.expert=1"))
    assert set(found) >= {"all-to-all overlap without expert parallelism (no all-to-all)"}
    assert set(reasons(small_base(), 8, space)) >= {"all-to-all overlap without model.moe"}


def test_a_moe_plan_scores_combined_1f1b_as_pipesim_run_does():
    """EP 4 on 8 GPUs (TP 1 x PP 2 x DP 4): the combined schedule's units hide part of
    the all-to-alls, and its row is the step ``pipesim run`` gives its scenario."""
    space = (
        *NARROW[1:],
        "pipeline.schedule=1f1b,1f1b-a2a-overlap",
        "parallel.tensor=1",
        "pipeline.devices=2",
        "parallel.expert=4",
    )
    found = plan(moe_base(8), SOURCE, 8, space, top=4, confirm=0)
    rows = {row.candidate.schedule: row for row in found.results}
    assert set(rows) == {"1f1b", "1f1b-a2a-overlap"}
    combined = rows["1f1b-a2a-overlap"]
    assert combined.step_time_ms < rows["1f1b"].step_time_ms
    report = run_emitted(emit_mapping(found.base, combined.candidate), SOURCE).report
    assert report.step_time_ms == combined.step_time_ms
