"""Every built-in schedule survives export to torch's CSV and re-import unchanged."""

import json

import pytest
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.schedules import POLICIES, fit_virtual_stages, get_schedule
from pipesim.schedules.ir import from_csv, to_csv
from pipesim.schedules.torch_csv import read_torch_csv, to_torch_csv
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.metrics import build_report


def sizes(name):
    """A size every policy accepts: 4 devices, 8 microbatches, its own virtual stages."""
    return 4, 8, fit_virtual_stages(name, 1)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_csv_round_trip_gives_an_identical_report(name):
    devices, microbatches, virtual = sizes(name)
    schedule = get_schedule(name, devices, microbatches, virtual)
    again = from_csv(to_csv(schedule), name)
    assert again == schedule
    costs = uniform_costs(
        schedule.model_stages,
        forward_ms=1,
        backward_input_ms=1.5,
        backward_weight_ms=0.5,
        activation_memory_bytes=100,
        weight_grad_memory_bytes=30,
    )
    first = build_report(simulate(schedule, costs), schedule, costs)
    second = build_report(simulate(again, costs), again, costs)
    assert first == second


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "dualpipe", "interleaved-1f1b"])
def test_cli_export_then_run_as_csv_schedule(tmp_path, name):
    devices, microbatches, virtual = sizes(name)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "schema_version: 1\nname: rt\n"
        f"pipeline: {{schedule: {name}, devices: {devices}, microbatches: {microbatches}, virtual_stages: {virtual}}}\n"
        "costs: {forward_ms: 1, backward_input_ms: 1, backward_weight_ms: 1, activation_memory_bytes: 10}\n"
        "hardware: {link: {latency_us: 100}}\n"
    )
    runner = CliRunner()
    exported = tmp_path / "sched.csv"
    first = runner.invoke(
        main, ["run", str(scenario), "--format", "json", "--schedule-csv", str(exported)]
    )
    assert first.exit_code == 0, first.output
    second = runner.invoke(
        main,
        [
            "run",
            str(scenario),
            "--format",
            "json",
            "--set",
            "pipeline.schedule=csv",
            "--set",
            "pipeline.schedule_file=sched.csv",
        ],
    )
    assert second.exit_code == 0, second.output
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert b.pop("schedule") == "csv:sched.csv" and a.pop("schedule") == name
    a.pop("analytic"), b.pop("analytic")
    assert a == b


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_torch_form_round_trips_with_torchs_row_ends(name):
    """to_torch_csv is the compute-only CSV with torch's \\r\\n row ends (its byte-for-byte
    agreement with torch's own writer is checked in test_torch_csv.py, with torch)."""
    devices, microbatches, virtual = sizes(name)
    schedule = get_schedule(name, devices, microbatches, virtual)
    text = to_torch_csv(schedule)
    assert text == to_csv(schedule).replace("\n", "\r\n")
    assert read_torch_csv(text, name) == schedule == from_csv(text, name)
