"""One typed job, built once per scenario, is all the cost derivation reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim import load_scenario
from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.hardware import gpu_profile, link_profile
from pipesim.cluster.job import (
    BatchSizes,
    Hardware,
    Job,
    JobError,
    ParallelLayout,
    communicating_pairs,
    topology,
)
from pipesim.cluster.job_costs import model_costs, split_layers
from pipesim.cluster.transformer import TransformerModel
from pipesim.scenario import derive
from pipesim.scenario.build import ScenarioError, build_scenario, parse_spec, read_mapping
from pipesim.schedules import get_schedule

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPT = SCENARIOS / "gpt-nvlink-vs-pcie.yaml"


def counting(monkeypatch, name: str) -> list[int]:
    """Count the calls of ``pipesim.scenario.derive.<name>``."""
    calls, original = [], getattr(derive, name)

    def wrapper(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(derive, name, wrapper)
    return calls


@pytest.mark.parametrize(
    "scenario",
    ["gpt-nvlink-vs-pcie", "llama-70b-4x8-h100", "gpipe-vs-1f1b", "decode-pipeline-fill"],
)
def test_the_job_is_built_once_per_scenario(monkeypatch, scenario):
    jobs, hardware = counting(monkeypatch, "build_job"), counting(monkeypatch, "hardware_of")
    load_scenario(SCENARIOS / f"{scenario}.yaml")
    assert (len(jobs), len(hardware)) == (1, 1)


def gpt_job() -> Job:
    """gpt-nvlink-vs-pcie.yaml written as a Job by hand: no scenario file, no spec."""
    model = TransformerModel(layers=24, hidden=4096, heads=32, seq_len=2048, vocab=128256)
    return Job(
        hardware=Hardware(gpu=gpu_profile("h100-sxm"), link=link_profile("nvlink4")),
        model=model,
        partition="balanced",
        parallel=ParallelLayout(),
        efficiency=Efficiency(),
        batch=BatchSizes(microbatches=8, microbatch_size=1),
    )


def test_the_derivation_reads_the_job_alone():
    built = load_scenario(GPT)
    job = gpt_job()
    derived = model_costs(job, built.schedule)
    assert derived.costs == built.costs
    assert derived.accounting == built.accounting
    assert derived.tail_ms == built.tail_ms
    assert topology(job, built.schedule) == built.topology


def test_the_scenario_builds_the_job_a_user_would_write():
    spec = parse_spec(read_mapping(GPT), str(GPT))
    assert derive.build_job(spec, str(GPT), BatchSizes(8, 1)) == gpt_job()


def test_balanced_splits_by_flops_or_by_time():
    job = gpt_job()
    assert sum(split_layers(job, 4)) == 24
    assert sum(split_layers(job, 4, by_time=True)) == 24
    assert split_layers(job, 4) != split_layers(job, 1)


def test_job_errors_name_the_field_and_the_edge_adds_the_file():
    job = gpt_job()
    with pytest.raises(JobError) as caught:
        split_layers(job, 25)
    assert caught.value.field == "model"
    assert str(caught.value) == "model: need 1 <= stages <= layers, got stages=25, layers=24"
    with pytest.raises(ScenarioError) as named:
        derive.split_layers(job, 25, "f.yaml")
    assert str(named.value) == f"f.yaml: {caught.value}"
    no_gpu = Job(hardware=Hardware(), model=job.model, batch=job.batch)
    with pytest.raises(JobError, match="^hardware.gpu: required with a model section$"):
        model_costs(no_gpu, get_schedule("gpipe", 4, 8))


def test_an_inter_node_link_needs_nodes():
    job = Job(hardware=Hardware(inter_node_link=link_profile("ib-ndr")))
    with pytest.raises(JobError, match="^hardware.inter_node_link: needs hardware.gpus_per_node"):
        topology(job, get_schedule("gpipe", 2, 2))


def test_neighbouring_stages_talk_both_ways():
    assert communicating_pairs(get_schedule("gpipe", 3, 2)) == {(0, 1), (1, 0), (1, 2), (2, 1)}


def test_a_planner_candidate_derives_from_its_own_job():
    """The Job is plain data: a changed layout is a new Job, derived the same way."""
    data = read_mapping(GPT)
    data["parallel"] = {"data": 2}
    data["model"]["global_batch"] = 16
    built = build_scenario(parse_spec(data, "gpt.yaml"), "gpt.yaml")
    spec = parse_spec(data, "gpt.yaml")
    job = derive.build_job(spec, "gpt.yaml", derive.batch_sizes(spec, "gpt.yaml"))
    assert job.parallel.data == 2
    derived = derive.model_costs(job, built.schedule, "gpt.yaml")
    assert (derived.costs, derived.tail_ms) == (built.costs, built.tail_ms)
