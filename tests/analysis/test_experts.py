"""Expert parallelism from a scenario: EP 1 is the step pipesim gave before expert
parallelism existed, the run's moe section, and Monte Carlo steps whose routing is drawn
per microbatch, reproducibly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim import load_scenario, run_scenario
from pipesim.analysis.experts import device_all_to_all_ms
from pipesim.cli import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"
DEEPSEEK = SCENARIOS / "deepseek-v3-2048xh800.yaml"
MIXTRAL = SCENARIOS / "mixtral-8x7b-4x8-h100.yaml"
MIXTRAL_EP = SCENARIOS / "mixtral-8x7b-ep8-4x8-h100.yaml"
QWEN3 = SCENARIOS / "qwen3-235b-a22b-512xh100.yaml"
# DeepSeek-V3 as the bundled scenario ran it before expert parallelism: TP 8, DP 16, 1F1B
WITHOUT_EP = [
    "parallel.tensor=8",
    "parallel.data=16",
    "parallel.expert=1",
    "parallel.sequence_parallel=true",
    "pipeline.schedule=1f1b",
    "model.fp8=null",
    "model.recompute=false",
    "model.moe.max_nodes_per_token=null",
]

# (step_time_ms, the fullest device's peak bytes, MFU) that pipesim gave for each at the
# commit before expert parallelism (f2d9c49), repr for repr
BEFORE = {
    "deepseek": (33154.2586633182, 44106833837.52, 0.2733163584727505),
    "mixtral": (1947.2482453016091, 31080947843.84, 0.35263806307828827),
    "qwen3": (4092.1037037932733, 44997227448.0, 0.33841613921255403),
}


@pytest.mark.parametrize(
    "name, path, overrides",
    [("deepseek", DEEPSEEK, WITHOUT_EP), ("mixtral", MIXTRAL, []), ("qwen3", QWEN3, [])],
)
def test_ep_1_gives_the_numbers_of_before(name, path, overrides):
    report = run_scenario(load_scenario(path, overrides)).report
    peak = max(d.peak_memory_bytes for d in report.per_device)
    assert (report.step_time_ms, peak, report.mfu) == BEFORE[name]


def run_json(path: Path, *overrides: str, runs: int | None = None, seed: int = 0) -> dict:
    args = ["run", str(path), "--format", "json", "--no-progress"]
    args += [a for o in overrides for a in ("--set", o)]
    if runs is not None:
        args += ["--runs", str(runs), "--seed", str(seed)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_the_run_reports_the_experts_layout_load_and_all_to_alls():
    moe = run_json(DEEPSEEK)["moe"]
    assert moe["expert_parallel"] == 64 and moe["expert_tensor"] == 1
    assert moe["placement"] == "EP 64 over 8 nodes (8 per node)"
    assert (moe["imbalance"], moe["dropped_fraction"], moe["load_factor"]) == (1.0, 0.0, 1.0)
    # node-limited routing: 4 nodes of 8, each 7/8 of the time another node, of 8 copies
    assert moe["all_to_all_inter_node_bytes"] == pytest.approx(
        4096 * 8 * 7168 * 2 * (4 * 7 / 8) / 8, rel=1e-12
    )
    assert 0 < moe["all_to_all_share"] < 1
    scenario = load_scenario(DEEPSEEK)
    step = run_scenario(scenario).report.step_time_ms
    assert moe["all_to_all_ms_per_step"] == pytest.approx(max(device_all_to_all_ms(scenario)))
    assert moe["all_to_all_share"] == pytest.approx(moe["all_to_all_ms_per_step"] / step)


def test_dropped_copies_and_imbalance_are_reported():
    hot = ["model.moe.routing.kind=hot", "model.moe.routing.hot_fraction=0.5"]
    moe = run_json(MIXTRAL_EP, *hot, "model.moe.capacity_factor=1.0")["moe"]
    # expert 0 is sent half the copies and keeps a quarter (capacity 2 x 4096 / 8 from each
    # rank of 8 x 4096 / 8 / 2); the other 7 keep theirs
    assert moe["dropped_fraction"] == pytest.approx(0.5 - 1 / 8, rel=1e-9)
    assert moe["imbalance"] == pytest.approx((1 / 8) / (1 - 0.375) * 8, rel=1e-9)
    assert moe["load_factor"] == pytest.approx(1.0, rel=1e-9)


def test_imbalance_slows_the_step_and_eplb_wins_part_of_it_back():
    hot = ["model.moe.routing.kind=hot", "model.moe.routing.hot_fraction=0.2"]
    even = run_json(MIXTRAL_EP)["step_time_ms"]
    skewed = run_json(MIXTRAL_EP, *hot)
    balanced = run_json(MIXTRAL_EP, *hot, "model.moe.redundant_experts=8")
    assert skewed["moe"]["imbalance"] == pytest.approx(1.6, rel=1e-12)
    assert balanced["moe"]["imbalance"] < skewed["moe"]["imbalance"]
    assert even < balanced["step_time_ms"] < skewed["step_time_ms"]


def test_monte_carlo_draws_the_routing_reproducibly():
    zipf = ("model.moe.routing.kind=zipf", "model.moe.routing.zipf_s=0.5")
    one = run_json(MIXTRAL_EP, *zipf, runs=4, seed=7)
    two = run_json(MIXTRAL_EP, *zipf, runs=4, seed=7)
    assert one == two
    assert one["makespan_ms_p99"] > one["makespan_ms_p50"]
    other = run_json(MIXTRAL_EP, *zipf, runs=4, seed=8)
    assert other["makespan_ms_p50"] != one["makespan_ms_p50"]
    # without expert parallelism or a capacity, routing changes nothing: every run alike
    plain = run_json(MIXTRAL, *zipf, runs=3)
    assert plain["makespan_ms_p50"] == plain["makespan_ms_p99"]
    assert plain["makespan_ms_p50"] == pytest.approx(plain["makespan_ms"], rel=1e-9)
