"""``pipesim plan`` on the command line: outputs, the emitted scenario, and user mistakes."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest
import yaml
from click.testing import CliRunner

import pipesim.analysis.plan.planner as plan_module
from pipesim.cli import main
from tests.analysis.test_plan import small_base

SPACE = (
    "--space",
    "pipeline.schedule=1f1b,zbv,interleaved-1f1b",
    "--space",
    "model.recompute=false",
    "--space",
    "parallel.dp_overlap=false",
)


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small_base()))
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_json_has_the_keys_and_the_counts_add_up(scenario):
    result = invoke(
        "plan",
        scenario,
        "--gpus",
        8,
        *SPACE,
        "--format",
        "json",
        "--top",
        5,
        "--confirm",
        2,
        "--no-progress",
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= {
        "space_size",
        "pruned",
        "scored",
        "bounded",
        "confirmed",
        "wall_s",
        "results",
        "pareto",
    }
    assert data["space_size"] == sum(data["pruned"].values()) + data["bounded"] + data["scored"]
    assert data["confirmed"] == 2 and len(data["results"]) == 5
    first = data["results"][0]
    for key in (
        "parallel.tensor",
        "pipeline.schedule",
        "pipeline.microbatch_size",
        "step_time_ms",
        "tokens_per_second",
        "mfu",
        "peak_memory_bytes",
        "bubble_fraction",
        "evaluator",
    ):
        assert key in first
    assert first in data["pareto"]  # the fastest is never dominated
    assert data["space"]["pipeline.schedule"] == ["1f1b", "zbv", "interleaved-1f1b"]
    assert data["space"]["parallel.tensor"] == [1, 2, 4]  # divide 40 heads, 8 kv heads, node 4
    assert f"planning over {data['space_size']:,} candidates" in result.stderr


def test_emitted_scenario_runs_to_the_same_step_time(scenario, tmp_path):
    best = tmp_path / "best.yaml"
    planned = invoke(
        "plan",
        scenario,
        "--gpus",
        8,
        *SPACE,
        "--format",
        "json",
        "--emit",
        best,
        "--confirm",
        1,
        "--no-progress",
    )
    assert planned.exit_code == 0, planned.stderr
    ran = invoke("run", best, "--format", "json")
    assert ran.exit_code == 0, ran.stderr
    assert (
        json.loads(ran.stdout)["step_time_ms"]
        == (json.loads(planned.stdout)["results"][0]["step_time_ms"])
    )


def test_table_csv_pareto_and_explain(scenario, tmp_path):
    figure, table = tmp_path / "front.png", tmp_path / "plan.csv"
    result = invoke(
        "plan",
        scenario,
        "--gpus",
        8,
        *SPACE,
        "--pareto",
        figure,
        "--explain",
        "--confirm",
        1,
        "--no-progress",
    )
    assert result.exit_code == 0, result.stderr
    assert "space:" in result.stdout and "why the winner wins:" in result.stdout
    assert "#1 " in result.stdout and "#2 " in result.stdout
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    as_csv = invoke(
        "plan",
        scenario,
        "--gpus",
        8,
        *SPACE,
        "--format",
        "csv",
        "-o",
        table,
        "--top",
        3,
        "--confirm",
        0,
        "--no-progress",
    )
    assert as_csv.exit_code == 0, as_csv.stderr
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert len(rows) == 3 and float(rows[0]["step_time_ms"]) <= float(rows[1]["step_time_ms"])


def test_same_output_with_one_and_two_jobs(scenario):
    outputs = []
    for jobs in (1, 2):
        result = invoke(
            "plan",
            scenario,
            "--gpus",
            8,
            *SPACE,
            "--format",
            "json",
            "--jobs",
            jobs,
            "--confirm",
            0,
            "--no-progress",
        )
        assert result.exit_code == 0, result.stderr
        data = json.loads(result.stdout)
        data.pop("wall_s")
        outputs.append(data)
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpus", "8", "--space", "parallel.nope=1"), "--space parallel.nope: not an axis"),
        (("--gpus", "8", "--space", "pipeline.schedule=bogus"), "'bogus' is not allowed"),
        (("--gpus", "8", "--space", "pipeline.microbatch_size=-1"), "'-1' is not allowed"),
        (("--gpus", "8", "--space", "model.recompute"), "expected key.path=v1,v2"),
        (("--gpus", "0"), "--gpus 0: must be from 1"),
        (("--gpus", "eight"), "--gpus 'eight': expected a whole number"),
        (("--gpus", "8", "--emit", "best.txt"), "--emit"),
        (("--gpus", "8", "--executor", "dask"), "--executor dask needs --scheduler"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(scenario, args, message):
    result = invoke("plan", scenario, *args, "--no-progress")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipesim: error: ")
    assert message in lines[0]


def test_a_scenario_without_a_model_is_refused(tmp_path):
    path = tmp_path / "hand.yaml"
    path.write_text(
        "schema_version: 1\nname: x\npipeline: {schedule: 1f1b, devices: 2, microbatches: 4}\n"
    )
    result = invoke("plan", path, "--gpus", 2)
    assert result.exit_code == 2
    assert "model: pipesim plan needs a model: section" in result.stderr


def test_nothing_fits_means_nothing_emitted(scenario, tmp_path):
    best = tmp_path / "best.yaml"
    result = invoke(
        "plan",
        scenario,
        "--gpus",
        8,
        "--space",
        "parallel.tensor=1",
        "--space",
        "pipeline.devices=1",
        "--space",
        "parallel.zero_stage=0",
        "--emit",
        best,
        "--no-progress",
    )
    assert result.exit_code == 2
    assert "no candidate fits" in result.stderr
    assert not best.exists()


def test_a_disagreement_with_the_engine_is_exit_1_and_writes_nothing(
    scenario, tmp_path, monkeypatch
):
    honest = plan_module.run_emitted

    def off_by_a_bit(mapping, source, evaluator="auto"):
        result = honest(mapping, source, evaluator)
        report = dataclasses.replace(result.report, step_time_ms=result.report.step_time_ms * 1.01)
        return dataclasses.replace(result, report=report)

    monkeypatch.setattr(plan_module, "run_emitted", off_by_a_bit)
    out, best = tmp_path / "plan.json", tmp_path / "best.yaml"
    result = invoke(
        "plan",
        scenario,
        "--gpus",
        8,
        *SPACE,
        "--format",
        "json",
        "-o",
        out,
        "--emit",
        best,
        "--confirm",
        1,
        "--no-progress",
    )
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("pipesim: error: rank 1: step_time_ms ")
    assert "by the SimPy engine" in lines[-1]
    assert not out.exists() and not best.exists()


def test_exhaustive_scores_every_candidate_and_gives_the_same_plan(scenario):
    narrow = (*SPACE, "--space", "pipeline.microbatch_size=1,2", "--space", "parallel.zero_stage=1")
    common = ("--gpus", 8, *narrow, "--top", 2, "--confirm", 0, "--no-progress")

    def run(*extra: str) -> dict:
        result = invoke("plan", scenario, *common, "--format", "json", "--no-timing", *extra)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    bounded, every = run(), run("--exhaustive")
    assert bounded["bounded"] > 0 and every["bounded"] == 0
    assert bounded["scored"] + bounded["bounded"] == every["scored"]
    for key in ("results", "pareto", "pruned", "space_size"):
        assert bounded[key] == every[key]
    table = invoke("plan", scenario, *common)
    summary = table.stdout.splitlines()[0]
    assert f"bounded out {bounded['bounded']:,}; scored {bounded['scored']:,}" in summary
