"""Stochastic variation: exact equivalences, reproducibility and percentile order."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.analysis.monte_carlo import MonteCarloSummary, Percentiles, monte_carlo
from pipesim.analysis.run import run_scenario, study
from pipesim.cli import main
from pipesim.scenario.build import ScenarioError, load_scenario
from pipesim.schedules import get_schedule
from pipesim.schedules.ir import Kind
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.metrics import build_report
from pipesim.sim.variability import (
    Noise,
    Straggler,
    Variability,
    cv_from_spread,
    draw_hooks,
    lognormal_factors,
    truncated_normal_factors,
)
from tests.helpers import latency_topology

BASE = """\
schema_version: 1
name: noisy
pipeline: {schedule: 1f1b, devices: 4, microbatches: 8}
costs: {forward_ms: 1, backward_ms: 2}
hardware: {link: {latency_us: 250}}
"""
NOISY = (
    BASE
    + """\
variability:
  forward: {distribution: lognormal, cv: 0.05}
  backward: {distribution: normal, cv: 0.08}
  stragglers: [{device: 2, factor: 1.5, probability: 0.3}]
  link_jitter: {cv: 0.2}
  microbatch_scale: {cv: 0.1}
"""
)


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_lognormal_and_normal_factors_have_mean_one_and_the_given_cv():
    rng = np.random.default_rng(0)
    for draw in (lognormal_factors, truncated_normal_factors):
        values = draw(rng, 0.1, 200_000)
        assert abs(values.mean() - 1) < 0.002 and abs(values.std() / values.mean() - 0.1) < 0.002
        assert values.min() > 0


def test_cv_from_a_profile_spread_recovers_the_lognormal():
    # p10 and p90 of a median-1 lognormal with sigma 0.1 sit at exp(-/+1.2816 * 0.1).
    z = 1.2815515655446004
    cv = cv_from_spread(1.0, math.exp(-z * 0.1), math.exp(z * 0.1))
    assert math.isclose(cv, math.sqrt(math.expm1(0.01)), rel_tol=1e-12)
    assert cv_from_spread(1.0, 1.0, 1.0) == 0.0


def test_zero_variability_passes_no_hooks_and_gives_the_deterministic_step(tmp_path):
    quiet = Variability(
        noise=((Kind.F, Noise(cv=0.0)),),
        stragglers=(Straggler(1, 2.0, probability=0.0), Straggler(2, 1.0)),
        link_jitter=Noise(cv=0.0),
        microbatch_scale=(1.0, 1.0),
    )
    schedule = get_schedule("1f1b", 4, 8)
    assert quiet.is_zero and draw_hooks(quiet, schedule, np.random.default_rng(1)) == (None, None)
    scenario = load_scenario(write(tmp_path, BASE))
    result = study(scenario, runs=5, seed=9)
    deterministic = run_scenario(scenario).report
    assert result.makespan_ms == (deterministic.makespan_ms,) * 5 == (37.0,) * 5
    summary = result.summary()
    assert summary == MonteCarloSummary(
        runs=5,
        seed=9,
        makespan_ms=Percentiles(37.0, 37.0, 37.0),
        bubble_fraction=Percentiles(*(deterministic.bubble_fraction,) * 3),
    )
    assert summary.to_dict() == {
        "monte_carlo_runs": 5,
        "monte_carlo_seed": 9,
        **{f"makespan_ms_p{p}": 37.0 for p in (50, 90, 99)},
        **{f"bubble_fraction_p{p}": deterministic.bubble_fraction for p in (50, 90, 99)},
    }


def test_run_scenario_attaches_the_study_and_counts_progress(tmp_path):
    scenario = load_scenario(write(tmp_path, NOISY))
    ticks = []
    result = run_scenario(scenario, runs=7, seed=3, progress=ticks.append)
    assert ticks == [1] * 7
    assert result.monte_carlo == study(scenario, runs=7, seed=3).summary()
    assert result.explanation is None and result.notes == ()
    assert result.report.makespan_ms == 37.0  # the deterministic step stays the headline
    flat = result.to_dict()
    assert flat["makespan_ms_p50"] == result.monte_carlo.makespan_ms.p50
    assert flat["monte_carlo_runs"] == 7 and "extra" not in flat


def test_a_certain_straggler_equals_slower_stage_costs():
    # Device 2 slowed 2x for the whole step is exactly stage 2 with doubled costs.
    schedule = get_schedule("1f1b", 4, 8)
    topology = latency_topology(4, 0.25)
    costs = uniform_costs(4, forward_ms=1, backward_ms=2)
    slow = Variability(stragglers=(Straggler(2, 2.0),))
    duration_scale, link_scale = draw_hooks(slow, schedule, np.random.default_rng(0))
    assert link_scale is None
    noisy = simulate(schedule, costs, topology, duration_scale=duration_scale)
    doubled = uniform_costs(4, forward_ms=[1, 1, 2, 1], backward_ms=[2, 2, 4, 2])
    plain = simulate(schedule, doubled, topology)
    assert noisy.frame.equals(plain.frame)


def test_microbatch_scale_stretches_every_action_of_that_microbatch():
    # One device, two microbatches, F 1 ms, B 2 ms; microbatch 1 is 1.5x longer:
    # 3 + 4.5 = 7.5 ms instead of 6 (GPipe runs the backwards last microbatch first).
    schedule = get_schedule("gpipe", 1, 2)
    costs = uniform_costs(1, forward_ms=1, backward_ms=2)
    longer = Variability(microbatch_scale=(1.0, 1.5))
    duration_scale, _ = draw_hooks(longer, schedule, np.random.default_rng(0))
    trace = simulate(schedule, costs, duration_scale=duration_scale)
    rows = list(zip(trace.frame.name, trace.frame.start, trace.frame.end, strict=True))
    assert rows == [("0F0", 0.0, 1.0), ("0F1", 1.0, 2.5), ("0B1", 2.5, 5.5), ("0B0", 5.5, 7.5)]


def test_link_jitter_changes_transfers_only():
    schedule = get_schedule("gpipe", 2, 2)
    costs = uniform_costs(2, forward_ms=1, backward_ms=2)
    topology = latency_topology(2, 0.5)
    jitter = Variability(link_jitter=Noise(cv=0.3))
    duration_scale, link_scale = draw_hooks(jitter, schedule, np.random.default_rng(4))
    assert duration_scale is None
    trace = simulate(schedule, costs, topology, link_scale=link_scale)
    frame = trace.frame
    compute = frame[frame.lane == "compute"]
    comm = frame[frame.lane == "comm"]
    assert np.allclose(
        compute.end - compute.start, compute.kind.map({"F": 1.0, "B": 2.0}), rtol=0, atol=1e-12
    )
    assert not np.allclose(comm.end - comm.start, 0.5)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 40))
def test_percentiles_are_ordered_and_the_seed_reproduces_them(seed, runs):
    schedule = get_schedule("zb-h1", 3, 6)
    costs = uniform_costs(3, forward_ms=1, backward_input_ms=1, backward_weight_ms=1)
    topology = latency_topology(3, 0.1)
    variability = Variability(
        noise=((Kind.F, Noise(cv=0.2)),),
        stragglers=(Straggler(0, 1.3, 0.5),),
        link_jitter=Noise("normal", cv=0.3),
    )

    def run_step(duration_scale, link_scale):
        trace = simulate(
            schedule, costs, topology, duration_scale=duration_scale, link_scale=link_scale
        )
        report = build_report(trace, schedule, costs)
        return report.makespan_ms, report.bubble_fraction

    first = monte_carlo(variability, schedule, run_step, runs, seed)
    again = monte_carlo(variability, schedule, run_step, runs, seed)
    assert first == again
    summary = first.summary()
    for figure in (summary.makespan_ms, summary.bubble_fraction):
        assert figure.p50 <= figure.p90 <= figure.p99


def test_scenario_section_is_read_and_checked(tmp_path):
    scenario = load_scenario(write(tmp_path, NOISY))
    variability = scenario.variability
    kinds = dict(variability.noise)
    assert kinds["F"] == Noise("lognormal", 0.05)
    assert kinds["B"] == kinds["I"] == kinds["W"] == Noise("normal", 0.08)
    assert variability.stragglers == (Straggler(2, 1.5, 0.3),)
    assert variability.microbatch_scale == Noise("lognormal", 0.1)
    bad = NOISY.replace("device: 2", "device: 7")
    with pytest.raises(
        ScenarioError,
        match=r"variability\.stragglers\[0\]\.device: 7 is not a device; allowed: 0 to 3",
    ):
        load_scenario(write(tmp_path, bad))
    with pytest.raises(
        ScenarioError, match=r"variability\.forward: .*empirical distribution needs"
    ):
        load_scenario(write(tmp_path, BASE + "variability: {forward: {distribution: empirical}}\n"))


def test_profile_spread_gives_per_stage_cvs(tmp_path):
    z = 1.2815515655446004
    stage = lambda s, sigma: {  # noqa: E731
        "stage": s,
        "F": {
            "median_ms": 1.0,
            "p10_ms": math.exp(-z * sigma),
            "p90_ms": math.exp(z * sigma),
            "samples": 20,
        },
        "B": {"median_ms": 2.0, "p10_ms": 1.0, "p90_ms": 1.0 + 1e-12, "samples": 20},
    }
    profile = {
        "format": "pipesim-profile",
        "version": 1,
        "provenance": {},
        "stages": [stage(s, 0.1 * (s + 1)) for s in range(4)],
        "links": [],
    }
    (tmp_path / "p.json").write_text(json.dumps(profile))
    scenario = load_scenario(write(tmp_path, BASE + "variability: {forward: {profile: p.json}}\n"))
    noise = dict(scenario.variability.noise)["F"]
    expected = tuple(math.sqrt(math.expm1((0.1 * (s + 1)) ** 2)) for s in range(4))
    assert np.allclose(noise.cv_by_stage, expected, rtol=1e-9)


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_cli_runs_are_byte_identical_for_a_seed(tmp_path):
    path = write(tmp_path, NOISY)
    first = invoke("run", path, "--runs", "20", "--seed", "7", "--format", "json")
    second = invoke("run", path, "--runs", "20", "--seed", "7", "--format", "json")
    other = invoke("run", path, "--runs", "20", "--seed", "8", "--format", "json")
    assert first.exit_code == 0 and first.stderr == ""
    assert first.stdout == second.stdout != other.stdout
    data = json.loads(first.stdout)
    assert data["makespan_ms"] == 37.0  # the deterministic step stays the headline
    assert data["monte_carlo_runs"] == 20 and data["monte_carlo_seed"] == 7
    for name in ("makespan_ms", "bubble_fraction"):
        assert data[f"{name}_p50"] <= data[f"{name}_p90"] <= data[f"{name}_p99"]
    table = invoke("run", path, "--runs", "20", "--seed", "7").stdout
    assert "Monte Carlo (20 runs, seed 7)" in table
    assert f"{data['makespan_ms_p50']:10.3f}" in table


def test_cli_zero_variability_percentiles_equal_the_makespan(tmp_path):
    data = json.loads(
        invoke("run", write(tmp_path, BASE), "--runs", "3", "--format", "json").stdout
    )
    assert (
        data["makespan_ms_p50"]
        == data["makespan_ms_p90"]
        == data["makespan_ms_p99"]
        == data["makespan_ms"]
    )


def test_cli_compare_ranks_schedules_by_p50_then_p99(tmp_path):
    path = write(tmp_path, NOISY)
    result = invoke(
        "compare",
        path,
        "--schedules",
        "gpipe,1f1b,zb-h1,dualpipe",
        "--runs",
        "10",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    ranked = [r for r in rows if not r["error"]]
    assert [r["rank"] for r in ranked] == list(range(1, len(ranked) + 1))
    keys = [(r["makespan_ms_p50"], r["makespan_ms_p99"]) for r in ranked]
    assert keys == sorted(keys)
    order = [r["schedule"] for r in ranked]
    assert order.index("zb-h1") < order.index("1f1b")
    table = invoke("compare", path, "--schedules", "gpipe,1f1b,zb-h1", "--runs", "10").stdout
    assert table.splitlines()[0].startswith("rank  schedule") and "p99 ms" in table
    csv_text = invoke(
        "compare", path, "--schedules", "gpipe,1f1b", "--runs", "4", "--format", "csv"
    ).stdout
    assert csv_text.splitlines()[0].startswith("schedule,rank,makespan_ms_p50")


def test_a_study_too_large_is_refused_at_once_with_its_override(tmp_path):
    path = write(tmp_path, BASE)
    steps = sum(len(a) for a in load_scenario(path).schedule.device_actions)
    result = invoke("run", path, "--runs", "1000000000")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"pipesim: error: --runs 1,000,000,000 x {steps} actions a step = "
        f"{1_000_000_000 * steps:,} actions, over the limit of 10,000,000; raise "
        f"pipeline.max_actions (e.g. --set pipeline.max_actions={1_000_000_000 * steps}) to run it\n"
    )
    # Raising the limit lets the same study run.
    allowed = invoke("run", path, "--runs", "3", "--set", f"pipeline.max_actions={3 * steps}")
    assert allowed.exit_code == 0
    assert (
        invoke("run", path, "--runs", "4", "--set", f"pipeline.max_actions={3 * steps}").exit_code
        == 2
    )
