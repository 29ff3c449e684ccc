"""Comparisons and the one recipe they share with sweeps: a scenario under a schedule,
at the chunk count that schedule needs."""

from pathlib import Path

import pytest

from pipesim.analysis.compare import (
    CompareError,
    CompareRow,
    compare_schedules,
    default_schedules,
    scenario_for_schedule,
)
from pipesim.scenario.build import ScenarioError, apply_overrides, read_mapping
from pipesim.schedules import POLICIES

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")  # F 1 ms, B 2 ms, 100 MiB kept per microbatch
GPT = str(SCENARIOS / "gpt-nvlink-vs-pcie.yaml")  # costs derived from a model section
# p=4, m=12, F 1 ms, I 1.2 ms, W 0.8 ms, 2 GiB kept (0.5 GiB until W), 20 us hops, zb-auto
# under an 8 GiB limit (what 1F1B holds)
LIMITED = str(SCENARIOS / "zb-auto-under-memory.yaml")
GiB = 2**30


def test_hand_typed_costs_are_scaled_per_chunk_and_the_note_says_so():
    base = read_mapping(GPIPE)
    scenario, note = scenario_for_schedule(base, GPIPE, "interleaved-1f1b")
    assert note == "virtual_stages=2, hand-typed per-chunk costs x1/2"
    assert scenario.schedule.stages == 8
    assert scenario.costs.forward_ms == (0.5,) * 8 and scenario.costs.backward_ms == (1.0,) * 8
    assert scenario.costs.activation_memory_bytes == (50 * 2**20,) * 8
    assert base["pipeline"]["schedule"] == "gpipe" and "virtual_stages" not in base["pipeline"]
    same, note = scenario_for_schedule(base, GPIPE, "1f1b")
    assert note == "" and same.costs.forward_ms == (1.0,) * 4
    as_written, note = scenario_for_schedule(base, GPIPE)
    assert note == "" and as_written.schedule.name == "gpipe"


def test_a_model_section_is_cut_finer_without_hand_typed_costs():
    gpipe, _ = scenario_for_schedule(read_mapping(GPT), GPT, "gpipe")
    zbv, note = scenario_for_schedule(read_mapping(GPT), GPT, "zbv")
    assert note == "virtual_stages=2, costs derived from the model"
    assert zbv.schedule.stages == 8 and zbv.costs.stages == 8
    assert sum(zbv.costs.forward_ms) == pytest.approx(sum(gpipe.costs.forward_ms), rel=1e-9)


def test_a_profile_cannot_be_recut_and_lists_cannot_either(tmp_path):
    base = apply_overrides(read_mapping(GPIPE), ["costs={profile: p.json}"])
    with pytest.raises(ScenarioError, match=r"costs\.profile: times virtual_stages=1; zbv needs 2"):
        scenario_for_schedule(base, GPIPE, "zbv")
    lists = apply_overrides(read_mapping(GPIPE), ["costs.forward_ms=[1,1,1,1]"])
    with pytest.raises(ScenarioError, match="per-stage list fits virtual_stages=1"):
        scenario_for_schedule(lists, GPIPE, "zbv")


def test_compare_gives_typed_rows_in_order_with_reasons():
    base = apply_overrides(read_mapping(GPIPE), ["pipeline.microbatches=9"])
    comparison = compare_schedules(base, GPIPE, ["gpipe", "interleaved-1f1b", "1f1b", "gpipe"])
    assert [row.schedule for row in comparison.rows] == ["gpipe", "interleaved-1f1b", "1f1b"]
    gpipe, interleaved, one_f_one_b = comparison.rows
    assert gpipe.result.report.makespan_ms == one_f_one_b.result.report.makespan_ms == 36.0
    assert interleaved == CompareRow(
        "interleaved-1f1b",
        error="pipeline: interleaved-1f1b runs microbatches in rounds = max(1, microbatches // "
        "devices) = 2 of equal size: microbatches=9 with devices=4 leaves 1 over; use 8 or 10",
    )
    assert comparison.results == (gpipe.result, one_f_one_b.result)
    assert not comparison.ranked and comparison.rescaled == ()
    assert interleaved.to_dict() == {"schedule": "interleaved-1f1b", "error": interleaved.error}


def test_compare_with_runs_ranks_by_p50_and_counts_progress():
    ticks = []
    comparison = compare_schedules(
        read_mapping(GPIPE), GPIPE, ["gpipe", "zbv", "1f1b"], runs=3, seed=1, progress=ticks.append
    )
    assert sum(ticks) == 9
    assert comparison.ranked
    assert [(row.schedule, row.rank) for row in comparison.rows] == [
        ("zbv", 1),
        ("gpipe", 2),
        ("1f1b", 3),
    ]
    assert [row.schedule for row in comparison.rescaled] == ["zbv"]
    first = comparison.rows[0].to_dict()
    assert first["rank"] == 1 and first["makespan_ms_p50"] == first["makespan_ms"] == 25.5
    assert first["note"] == "virtual_stages=2, hand-typed per-chunk costs x1/2"


@pytest.mark.parametrize(
    "names, message",
    [
        ([], "no schedule to compare"),
        (["gpipe", "nope"], "unknown schedule 'nope'; allowed: gpipe"),
    ],
)
def test_compare_refuses_an_empty_or_unknown_list(names, message):
    with pytest.raises(CompareError, match=message):
        compare_schedules(read_mapping(GPIPE), GPIPE, names)


def test_the_default_list_adds_the_searched_policies_to_a_training_step():
    assert default_schedules(read_mapping(GPIPE)) == [*POLICIES, "zb-auto", "v-auto"]
    forward = apply_overrides(read_mapping(GPIPE), ["pipeline.mode=forward"])
    assert default_schedules(forward) == list(POLICIES)


def test_by_default_zb_auto_stands_beside_zb_h1_and_is_no_slower():
    comparison = compare_schedules(read_mapping(GPIPE), GPIPE)
    rows = {row.schedule: row for row in comparison.rows}
    assert list(rows) == [*POLICIES, "zb-auto", "v-auto"]
    zb_h1, zb_auto, v_auto = rows["zb-h1"].result, rows["zb-auto"].result, rows["v-auto"].result
    limit = zb_auto.search.limit_bytes
    assert limit == 4 * 100 * 2**20  # what 1F1B holds on device 0
    assert max(d.peak_activation_bytes for d in zb_h1.report.per_device) <= limit  # both fit
    assert zb_auto.report.makespan_ms <= zb_h1.report.makespan_ms
    assert v_auto.report.makespan_ms <= rows["zbv"].result.report.makespan_ms
    assert rows["v-auto"].note == "virtual_stages=2, hand-typed per-chunk costs x1/2"
    assert rows["zb-h1"].result.search is None


def test_searched_rows_carry_their_limit_and_peak():
    comparison = compare_schedules(
        read_mapping(LIMITED), LIMITED, ["1f1b", "zb-h1", "zb-auto", "v-auto"]
    )
    one_f_one_b, zb_h1, zb_auto, v_auto = (row.result for row in comparison.rows)
    assert zb_auto.report.makespan_ms <= zb_h1.report.makespan_ms < one_f_one_b.report.makespan_ms
    for row in comparison.rows[2:]:
        data = row.to_dict()
        assert data["memory_limit_bytes"] == 8 * GiB
        assert max(data["peak_activation_bytes"]) <= 8 * GiB
        assert max(data["peak_activation_bytes"]) == row.result.search.peak_activation_bytes
        assert data["search_candidates"] >= 1 and data["search_seconds"] >= 0
    assert "memory_limit_bytes" not in comparison.rows[1].to_dict()
    assert v_auto.scenario.schedule.stages == 8


def test_fixed_policies_run_without_the_limit_the_searched_ones_search_under():
    zb_h1, _ = scenario_for_schedule(read_mapping(LIMITED), LIMITED, "zb-h1")
    assert zb_h1.spec.pipeline.memory_limit_bytes is None and zb_h1.search is None
    tight = apply_overrides(read_mapping(LIMITED), [f"pipeline.memory_limit_bytes={6 * GiB}"])
    zb_auto, note = scenario_for_schedule(tight, LIMITED, "zb-auto")
    assert note == "" and zb_auto.search.limit_bytes == 6 * GiB
    assert zb_auto.search.peak_activation_bytes <= 6 * GiB


def test_a_limit_below_the_minimum_is_a_row_naming_the_minimum():
    low = apply_overrides(read_mapping(LIMITED), [f"pipeline.memory_limit_bytes={GiB}"])
    zb_h1, zb_auto = compare_schedules(low, LIMITED, ["zb-h1", "zb-auto"]).rows
    assert zb_h1.result is not None
    assert zb_auto.result is None
    assert zb_auto.error == (
        "pipeline.memory_limit_bytes: memory limit 1073741824 bytes is below the minimum "
        "2147483648 bytes any zb-auto order can reach (4 devices)"
    )
