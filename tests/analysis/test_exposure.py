"""Exposed all-to-all: on the critical path, per device, in the trace's sub-layer rows and
the Chrome trace, and the run's numbers for a MoE scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim import load_scenario, run_scenario
from pipesim.analysis.critical import explain
from pipesim.cli import main
from pipesim.schedules import get_schedule
from pipesim.schedules.ir import parse_action
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.export import chrome_trace_json
from pipesim.sim.links import Link, Topology
from pipesim.sim.sublayer_rows import exposed_all_to_all, sublayer_rows
from pipesim.sim.sublayers import Stream
from tests.sim.test_sublayers import moe_costs

ROOT = Path(__file__).parents[2]
LLAMA = ROOT / "scenarios" / "llama-70b-4x8-h100.yaml"
MIXTRAL_EP = ROOT / "scenarios" / "mixtral-8x7b-ep8-4x8-h100.yaml"


@pytest.mark.parametrize(("devices", "microbatches", "latency_us"), [(2, 3, 0), (4, 8, 500)])
def test_without_overlap_the_path_pays_every_all_to_all_on_it(devices, microbatches, latency_us):
    """1F1B runs every pass alone: the exposed all-to-all on the critical path is the sum
    of the all-to-alls of the actions on it (F: 1 + 1, B: 1 + 1), and every device pays
    all of its own (m forwards and m backwards, 2 ms each)."""
    schedule = get_schedule("1f1b", devices, microbatches)
    costs = moe_costs(devices)
    topology = Topology(devices, default=Link(latency_us=latency_us))
    trace = simulate(schedule, costs, topology)
    explanation = explain(trace, schedule, topology, costs)
    on_path = 0.0
    for element in explanation.critical_path:
        if "->" in element["name"] or element["name"].endswith(("reduce", "step")):
            assert element["all_to_all_ms"] == 0
            continue
        action = parse_action(element["name"])
        parts = costs.pass_parts(action.kind, schedule.model_stage(action.stage))
        assert element["all_to_all_ms"] == parts.comm_total_ms == 2
        on_path += parts.comm_total_ms
    assert explanation.all_to_all.critical_path_ms == on_path > 0
    assert explanation.all_to_all.per_device_ms == (microbatches * 4.0,) * devices


def test_overlapped_units_expose_only_what_compute_leaves():
    """Combined 1F1B on two stages (tests/sim/test_sublayers.py): rank 1's units hide every
    all-to-all; its lone 1F0 and 1B2 expose 2 each; rank 0 runs six lone passes."""
    schedule = get_schedule("1f1b-a2a-overlap", 2, 3)
    costs = moe_costs(2)
    trace = simulate(schedule, costs)
    exposed = exposed_all_to_all(trace, schedule, costs)
    per_row = {trace.name(r): float(exposed[r]) for r in range(len(exposed))}
    assert per_row["(1F1;1B0)OVERLAP_F_B"] == per_row["(1F2;1B1)OVERLAP_F_B"] == 0
    assert per_row["1F0"] == per_row["1B2"] == 2
    assert explain(trace, schedule, None, costs).all_to_all.per_device_ms == (12.0, 4.0)


def test_sublayer_rows_place_the_pair_parts_inside_their_unit():
    """The unit (1F1;1B0) runs [14, 29]: its parts are the pair's timeline shifted by 14."""
    schedule = get_schedule("1f1b-a2a-overlap", 2, 3)
    costs = moe_costs(2)
    trace = simulate(schedule, costs)
    rows = sublayer_rows(trace, schedule, costs)
    unit = [
        (rows.names[k], int(rows.stream[k]), float(rows.start[k]), float(rows.end[k]))
        for k in range(len(rows))
        if trace.name(int(rows.row[k])) == "(1F1;1B0)OVERLAP_F_B"
    ]
    compute, comm = int(Stream.COMPUTE), int(Stream.COMM)
    assert sorted(unit, key=lambda r: (r[2], r[1])) == [
        ("1F1 attention", compute, 14, 16),
        ("1B0 combine", comm, 14, 15),
        ("1B0 experts", compute, 16, 22),
        ("1F1 dispatch", comm, 16, 17),
        ("1F1 experts", compute, 22, 25),
        ("1B0 dispatch", comm, 22, 23),
        ("1B0 attention", compute, 25, 29),
        ("1F1 combine", comm, 25, 26),
    ]
    text = chrome_trace_json(trace, sublayers=rows)
    events = json.loads(text)["traceEvents"]
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert (1, "all-to-all stream") in threads
    dispatch = [e for e in events if e["name"] == "1F1 dispatch"]
    assert dispatch == [
        {"name": "1F1 dispatch", "cat": "dispatch", "ph": "X", "ts": 16000.0, "dur": 1000.0}
        | {"pid": 1, "tid": 2}
    ]


def test_dense_costs_have_no_parts_and_an_unchanged_explanation():
    schedule = get_schedule("1f1b", 2, 3)
    costs = uniform_costs(2, 1, 2)
    trace = simulate(schedule, costs)
    assert sublayer_rows(trace, schedule, costs) is None
    assert exposed_all_to_all(trace, schedule, costs) is None
    with_costs = explain(trace, schedule, None, costs)
    assert with_costs == explain(trace, schedule)
    assert "all_to_all" not in with_costs.to_dict()
    assert chrome_trace_json(trace) == chrome_trace_json(trace, sublayers=None)


def test_a_moe_run_reports_its_exposed_all_to_all():
    """Mixtral 8x7B, EP 8, interleaved 1F1B: nothing overlaps, so all of it is exposed;
    the combined-1F1B variant hides some of it."""
    plain = run_scenario(load_scenario(MIXTRAL_EP), critical_path=True)
    moe = plain.to_dict()["moe"]
    assert moe["exposed_all_to_all_ms_per_step"] == pytest.approx(moe["all_to_all_ms_per_step"])
    assert plain.explanation.all_to_all.critical_path_ms > 0
    combined = ["pipeline.schedule=interleaved-1f1b-a2a-overlap"]
    overlapped = run_scenario(load_scenario(MIXTRAL_EP, combined)).to_dict()["moe"]
    assert overlapped["all_to_all_ms_per_step"] == moe["all_to_all_ms_per_step"]
    assert overlapped["exposed_all_to_all_ms_per_step"] < moe["exposed_all_to_all_ms_per_step"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["pipeline.schedule=interleaved-1f1b-a2a-overlap"],
            "pipeline.schedule: interleaved-1f1b-a2a-overlap overlaps MoE all-to-alls, and "
            "the model has no MoE layers (model.moe); use interleaved-1f1b",
        ),
        (
            ["pipeline.delay_wgrad=true"],
            "pipeline.delay_wgrad: schedule interleaved-1f1b has no delayed weight gradient; "
            "allowed with 1f1b-a2a-overlap, interleaved-1f1b-a2a-overlap",
        ),
    ],
)
def test_bad_overlap_input_is_one_line(overrides, message):
    args = ["run", str(LLAMA), *(a for o in overrides for a in ("--set", o))]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"pipesim: error: {LLAMA}: {message}\n"
