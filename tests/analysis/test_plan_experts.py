"""The planner's expert-parallel axis: its default values, the sizes it prunes and why, and
a MoE plan whose winner is the scenario ``pipesim run`` gives the same step for."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml
from click.testing import CliRunner

from pipesim.analysis.plan import (
    AXIS_ATTRIBUTES,
    PlanRow,
    build_space,
    describe,
    emit_mapping,
    enumerate_space,
    explain_plan,
    plan,
    run_emitted,
)
from pipesim.cli import main
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


DELAY_SPACE = (
    *NARROW[1:],
    "pipeline.schedule=1f1b,1f1b-a2a-overlap",
    "parallel.tensor=1",
    "pipeline.devices=2",
    "parallel.expert=4",
)


def test_the_combined_1f1b_schedules_are_tried_with_and_without_delay_wgrad():
    moe = build_space(parse_spec(moe_base(8), SOURCE), SOURCE, 8, ())
    assert moe.axes["pipeline.delay_wgrad"] == (False, True)
    space = build_space(parse_spec(moe_base(8), SOURCE), SOURCE, 8, DELAY_SPACE)
    tried = Counter((c.schedule, c.delay_wgrad) for c, _ in enumerate_space(space) if c)
    # 8 GPUs as TP 1 x PP 2 x DP 4, EP 4: one candidate a schedule and delay_wgrad value
    assert tried == {
        ("1f1b", None): 1,
        ("1f1b-a2a-overlap", False): 1,
        ("1f1b-a2a-overlap", True): 1,
    }
    # narrowed to true, a schedule without the option (it runs with it off) drops out
    only = build_space(
        parse_spec(moe_base(8), SOURCE), SOURCE, 8, (*DELAY_SPACE, "pipeline.delay_wgrad=true")
    )
    assert {(c.schedule, c.delay_wgrad) for c, _ in enumerate_space(only) if c} == {
        ("1f1b-a2a-overlap", True)
    }


def test_a_moe_plan_scores_delay_wgrad_as_pipesim_run_does():
    """16 GPUs as TP 1 x PP 2 x DP 8, EP 8 over two nodes of a 5 GB/s network: the
    all-to-alls outlast the compute, and the delayed weight gradient covers more of them."""
    base = moe_base(8)
    base["hardware"]["inter_node_link"] = {"latency_us": 5.0, "bandwidth_gbps": 5.0}
    space = (*DELAY_SPACE[:-1], "parallel.expert=8")
    found = plan(base, SOURCE, 16, space, top=4, confirm=0)
    assert found.axes["pipeline.delay_wgrad"] == [False, True]
    rows = {(row.candidate.schedule, row.candidate.delay_wgrad): row for row in found.results}
    assert set(rows) == {("1f1b", None), ("1f1b-a2a-overlap", False), ("1f1b-a2a-overlap", True)}
    delayed = rows[("1f1b-a2a-overlap", True)]
    mapping = emit_mapping(found.base, delayed.candidate)
    assert mapping["pipeline"]["delay_wgrad"] is True
    assert run_emitted(mapping, SOURCE).report.step_time_ms == delayed.step_time_ms
    undelayed = rows[("1f1b-a2a-overlap", False)]
    report = run_emitted(emit_mapping(found.base, undelayed.candidate), SOURCE).report
    assert report.step_time_ms == undelayed.step_time_ms
    assert delayed.step_time_ms < undelayed.step_time_ms < rows[("1f1b", None)].step_time_ms
    assert "delay_wgrad" not in emit_mapping(found.base, rows[("1f1b", None)].candidate)["pipeline"]
    assert delayed.to_dict()["pipeline.delay_wgrad"] is True
    assert "pipeline.delay_wgrad" not in rows[("1f1b", None)].to_dict()
    assert PlanRow.from_dict(delayed.to_dict()) == delayed
    assert "1f1b-a2a-overlap delay-wgrad" in describe(delayed)


def _plan_json(path, *space: str) -> tuple[int, dict]:
    args = ["plan", str(path), "--gpus", "8", "--format", "json"]
    result = CliRunner().invoke(main, [*args, *(a for s in space for a in ("--space", s))])
    if result.exit_code:
        return result.exit_code, {"stderr": result.stderr}
    data = json.loads(result.stdout)
    data.pop("wall_s")
    return 0, data


def test_a_dense_plan_has_no_delay_wgrad_axis_and_refuses_one_switched_on(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small_base()))
    space = (*NARROW[1:], "parallel.tensor=1,2", "pipeline.devices=2")
    code, dense = _plan_json(path, *space)
    assert code == 0
    # the axes a dense plan had before the delay_wgrad axis existed, and nothing more
    assert list(dense["space"]) == [
        key for key in AXIS_ATTRIBUTES if key not in ("parallel.data", "pipeline.microbatches")
    ]
    assert "delay_wgrad" not in json.dumps(dense)
    # off is what every dense schedule runs with: the same plan, to the byte
    assert _plan_json(path, *space, "pipeline.delay_wgrad=false") == (0, dense)
    code, refused = _plan_json(path, *space, "pipeline.delay_wgrad=true")
    assert code == 2
    assert refused["stderr"] == (
        "pipesim: error: --space pipeline.delay_wgrad: only the combined-1F1B schedules "
        "take it, which need model.moe (a mixture-of-experts model); allowed: false\n"
    )
