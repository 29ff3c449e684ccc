"""Memory without a timeline: each device's peak activations from the order it runs its
actions, as ``pipesim validate`` reports them, against the simulated peak of the same step."""

from pathlib import Path

import pytest

from pipesim.analysis.compare import scenario_for_schedule
from pipesim.analysis.run import run_scenario
from pipesim.analysis.validation import device_memory, validate_scenario
from pipesim.scenario.build import read_mapping
from pipesim.scenario.vary import vary
from pipesim.schedules import POLICIES

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")  # F 1 ms, B 2 ms, 100 MiB kept per microbatch
LIMITED = str(SCENARIOS / "zb-auto-under-memory.yaml")  # 2 GiB kept, 0.5 GiB until W
LLAMA = str(SCENARIOS / "llama-70b-4x8-h100.yaml")


def simulated(scenario) -> list[tuple[float, float, bool]]:
    report = run_scenario(scenario).report
    return [(d.peak_activation_bytes, d.peak_memory_bytes, d.oom) for d in report.per_device]


def walked(scenario) -> list[tuple[float, float, bool]]:
    return [(d.peak_activation_bytes, d.peak_memory_bytes, d.oom) for d in device_memory(scenario)]


@pytest.mark.parametrize("name", [n for n in POLICIES if n != "csv"])
@pytest.mark.parametrize("source", [GPIPE, LIMITED])
def test_the_walk_gives_the_simulated_peak_for_every_policy(source, name):
    data = read_mapping(source)
    if "memory_limit_bytes" in data["pipeline"]:
        data = vary(data, {}, drop=("pipeline.memory_limit_bytes",), source=source)
    scenario, _ = scenario_for_schedule(data, source, name)
    assert walked(scenario) == simulated(scenario)


def test_a_forward_only_step_holds_one_activation_at_a_time():
    scenario, _ = scenario_for_schedule(
        vary(read_mapping(GPIPE), {"pipeline.mode": "forward"}, source=GPIPE), GPIPE, "gpipe"
    )
    assert walked(scenario) == simulated(scenario) == [(100 * 2**20, 100 * 2**20, False)] * 4


def test_a_model_adds_static_memory_and_the_oom_flag_as_run_does():
    overrides = ["pipeline.schedule=gpipe", "pipeline.virtual_stages=1"]
    validation = validate_scenario(LLAMA, overrides)
    assert validation.oom and validation.memory_capacity_bytes == 80 * 2**30
    assert walked(validation.scenario) == simulated(validation.scenario)
    assert [d.oom for d in validation.memory] == [True] * 4
