"""A Result is typed: the Report, and beside it the Monte Carlo summary, the explanation
and the notes; closed forms come from the policies that declare them."""

import inspect
from pathlib import Path

import pytest

from pipesim.analysis.critical import Explanation
from pipesim.analysis.run import Result, explain_scenario, run_scenario
from pipesim.scenario.build import load_scenario
from pipesim.schedules import POLICIES, closed_form_of, get_schedule
from pipesim.schedules.policies import gpipe, interleaved, one_f_one_b
from pipesim.sim import closed_form as closed_form_module
from pipesim.sim.closed_form import Analytic, closed_form
from pipesim.sim.costs import uniform_costs
from pipesim.sim.links import Link, Topology
from pipesim.sim.metrics import Report

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = SCENARIOS / "gpipe-vs-1f1b.yaml"


def test_the_report_has_typed_fields_only():
    fields = {f for f in Report.__dataclass_fields__}
    assert "extra" not in fields
    result = run_scenario(load_scenario(GPIPE))
    assert result.report.analytic == Analytic(33.0, 3 / 11, 3 / 8)
    assert result.monte_carlo is None and result.explanation is None and result.notes == ()
    data = result.to_dict()
    assert data["analytic"] == {
        "makespan_ms": 33.0,
        "bubble_fraction": 3 / 11,
        "bubble_overhead": 3 / 8,
    }
    assert "critical_path" not in data and "makespan_ms_p50" not in data
    assert "analytic" not in result.scalars() and result.scalars()["peak_inflight_max"] == 8


def test_the_explanation_is_an_attachment():
    result = explain_scenario(load_scenario(GPIPE, ["pipeline.microbatches=2"]))
    assert isinstance(result, Result) and isinstance(result.explanation, Explanation)
    data = result.to_dict()
    assert data["critical_path"] == list(result.explanation.critical_path)
    assert data["idle_by_cause"]["3"] == {"upstream activation": 3.0, "done": 6.0}
    assert run_scenario(result.scenario, critical_path=True).explanation == result.explanation


def test_policies_declare_their_closed_forms():
    assert closed_form_of("gpipe") is gpipe.closed_form
    assert closed_form_of("1f1b") is one_f_one_b.closed_form
    assert closed_form_of("interleaved-1f1b") is interleaved.closed_form
    assert closed_form_of("zbv") is None and closed_form_of("csv:x.csv") is None
    declared = sorted(n for n in POLICIES if closed_form_of(n) is not None)
    assert declared == ["1f1b", "gpipe", "interleaved-1f1b"]
    assert '"gpipe"' not in inspect.getsource(closed_form_module)  # no lookup by name


@pytest.mark.parametrize(
    "name, p, m, v, expected",
    [
        ("gpipe", 4, 8, 1, (33.0, 24.0)),
        ("1f1b", 4, 8, 1, (33.0, 24.0)),
        ("interleaved-1f1b", 4, 8, 2, (57.0, 48.0)),
    ],
)
def test_closed_forms_without_hops(name, p, m, v, expected):
    assert closed_form_of(name)(p, m, v, 1.0, 2.0, 0.0, True) == expected


def test_gpipe_with_latency_longer_than_a_forward():
    # LogGP: latency is a pure delay and never queues, so GPipe keeps its closed form,
    # (m + p - 1)(F + B) + 2(p - 1)c = 11 * 3 + 6 * 1.5 = 42 ms.
    schedule = get_schedule("gpipe", 4, 8)
    costs = uniform_costs(4, forward_ms=1, backward_ms=2)
    topology = Topology(4, default=Link(latency_us=1500))
    assert closed_form(schedule, costs, topology) == Analytic(42.0, 1 - 24 / 42, 42 / 24 - 1)
    one_f_one_b_schedule = get_schedule("1f1b", 4, 8)
    assert closed_form(one_f_one_b_schedule, costs, topology) is None  # latency on every cycle


def test_bandwidth_time_longer_than_a_forward_queues_and_has_no_closed_form():
    schedule = get_schedule("gpipe", 4, 8)
    costs = uniform_costs(4, forward_ms=1, backward_ms=2, activation_bytes=2e6)
    slow = Topology(4, default=Link(bandwidth_gbps=1))  # 2 ms on the link per message
    fast = Topology(4, default=Link(latency_us=100, bandwidth_gbps=4))  # 0.5 ms + 0.1 ms
    assert closed_form(schedule, costs, slow) is None
    assert closed_form(schedule, costs, fast).makespan_ms == pytest.approx(33 + 6 * 0.6)


def test_forward_only_closed_form():
    schedule = get_schedule("1f1b", 4, 8, forward=True)
    costs = uniform_costs(4, forward_ms=1.5, backward_ms=2)
    assert closed_form(schedule, costs, None) == Analytic(16.5, 1 - 12 / 16.5, 16.5 / 12 - 1)
