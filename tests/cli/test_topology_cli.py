"""``hardware.topology`` as a user meets it: one error line for a fabric that does not fit,
and a planner whose choice follows the pods' oversubscription and says what crosses them."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from pipesim.cli import main
from tests.analysis.test_plan import small_base

SPACE = (
    "--space",
    "pipeline.schedule=1f1b",
    "--space",
    "pipeline.virtual_stages=1",
    "--space",
    "pipeline.microbatch_size=1,2",
    "--space",
    "model.recompute=false",
    "--space",
    "model.partition=even",
    "--space",
    "parallel.zero_stage=1",
    "--space",
    "parallel.dp_overlap=false",
    "--space",
    "parallel.tp_overlap=false",
)


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def scenario(tmp_path, topology: dict | None, name: str = "pods.yaml"):
    """small_base (8 A100s in nodes of 4 by default) with ``topology``."""
    data = small_base()
    if topology is not None:
        data["hardware"]["topology"] = topology
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("topology", "sets", "words"),
    [
        (
            {"order": "tp-pp"},
            ["parallel.data=4"],
            "hardware.topology.order: 'tp-pp' leaves out dp (data-parallel degree 4)",
        ),
        (
            {"order": "tp-xx-dp-pp"},
            [],
            "hardware.topology.order: unknown dimension 'xx' in 'tp-xx-dp-pp'; allowed: tp, "
            "cp, ep, dp, pp",
        ),
        (
            {"oversubscription": 0.5},
            [],
            "hardware.topology.oversubscription: Input should be greater than or equal to 1",
        ),
        (
            {"nodes_per_pod": 3},
            ["parallel.data=8", "model.global_batch=64"],
            "hardware.topology.nodes_per_pod: 4 nodes (16 GPUs, 4 per node) do not split "
            "into pods of 3; allowed: a divisor of 4, or at least 4 (one pod)",
        ),
        (
            {"nodes_per_pod": 2},
            ["hardware.gpus_per_node=null", "hardware.inter_node_link=null"],
            "hardware.topology: needs hardware.gpus_per_node",
        ),
        ({"levels": 3}, [], "hardware.topology.levels: unknown key"),
    ],
)
def test_a_fabric_that_does_not_fit_is_one_error_line(tmp_path, topology, sets, words):
    path = scenario(tmp_path, topology)
    out = tmp_path / "out.json"
    overrides = [arg for s in sets for arg in ("--set", s)]
    result = invoke("run", path, *overrides, "--format", "json", "-o", out)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pipesim: error: {path}: ")
    assert words in lines[0]
    assert not out.exists()


def test_plan_refuses_a_gpu_count_that_does_not_fill_whole_pods(tmp_path):
    path = scenario(tmp_path, {"nodes_per_pod": 3})
    result = invoke("plan", path, "--gpus", 16, *SPACE, "--no-progress")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"pipesim: error: {path}: hardware.topology.nodes_per_pod: 4 nodes (16 GPUs, 4 per "
        "node) do not split into pods of 3; allowed: a divisor of 4, or at least 4 (one "
        "pod) (with --gpus 16)"
    ]


def _winner(path) -> dict:
    result = invoke("plan", path, "--gpus", 8, *SPACE, "--format", "json", "--no-progress")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["results"][0]


def _layout(row: dict) -> tuple[int, int, int]:
    return row["parallel.tensor"], row["pipeline.devices"], row["parallel.data"]


def test_the_plan_changes_when_the_pods_are_oversubscribed(tmp_path):
    # Each node of 4 is its own pod. Non-blocking, plain data parallelism (DP8) wins: its
    # one data-parallel group reduces over both nodes. At 1:16 above the pods that
    # reduction slows 16-fold, and the winner keeps its data-parallel groups inside a node
    # (TP1 x PP2 x DP4: ranks 0-3), sending only activations across the pods.
    flat = _winner(scenario(tmp_path, {"nodes_per_pod": 1}, "flat.yaml"))
    assert _layout(flat) == (1, 1, 8)
    tapered = _winner(scenario(tmp_path, {"nodes_per_pod": 1, "oversubscription": 16}))
    assert _layout(tapered) == (1, 2, 4)
    assert tapered["step_time_ms"] > flat["step_time_ms"]


def test_plan_explain_names_what_crosses_pods_and_the_headroom(tmp_path):
    path = scenario(tmp_path, {"nodes_per_pod": 1, "oversubscription": 16})
    result = invoke("plan", path, "--gpus", 8, *SPACE, "--explain", "--no-progress")
    assert result.exit_code == 0, result.stderr
    winner = next(line for line in result.stdout.splitlines() if line.startswith("#1 "))
    assert "memory: 26.9 of 38.0 GiB usable (40 GiB less 5% headroom)" in winner
    assert "across pods: 1 of 1 pipeline hops cross pods at 1/16 bandwidth: " in winner
    assert "ms of the step exposed (against a non-blocking network)" in winner
    data = json.loads(
        invoke(
            "plan", path, "--gpus", 8, *SPACE, "--explain", "--format", "json", "--no-progress"
        ).stdout
    )
    runner_up = data["explain"]["runner_up"]["network"]
    assert runner_up.startswith("across pods: ")


def test_plan_sets_its_own_split_over_a_megatron_layout_string(tmp_path):
    # A layout string fixes one stage count (here 2: the embedding with 8 layers, 8 layers
    # with the head); every candidate brings its own pipeline depth and model.partition,
    # so the planner drops the string rather than refuse every candidate.
    data = small_base()
    data["model"]["pipeline_layout"] = "Et*8|t*8L"
    path = tmp_path / "layout.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke("plan", path, "--gpus", 8, *SPACE, "--format", "json", "--no-progress")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["results"], report
    depths = {row["pipeline.devices"] for row in report["results"]}
    assert depths - {2}, depths  # depths the string could not have described
