"""Every bad expert-parallel or routing input is one line naming its key and what is
allowed, with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"
EP8 = SCENARIOS / "mixtral-8x7b-ep8-4x8-h100.yaml"  # 8 experts, data 8, EP 8, 4 stages
DENSE = SCENARIOS / "llama-70b-4x8-h100.yaml"


@pytest.mark.parametrize(
    "path, overrides, message",
    [
        (
            EP8,
            ["parallel.expert=3"],
            "parallel.expert: 3 does not divide model.moe.experts (8); allowed: 1, 2, 4, 8",
        ),
        (
            EP8,
            ["parallel.data=4"],
            "parallel.expert: 8 does not divide parallel.data x parallel.context (4 x 1 = 4), "
            "whose ranks the expert-parallel groups are carved out of; allowed: 1, 2, 4",
        ),
        (
            EP8,
            ["parallel.data=2", "pipeline.devices=2"],
            "parallel.expert: 8 expert-parallel ranks, but the job has 4 GPUs",
        ),
        (
            EP8,
            ["parallel.expert_tensor=3"],
            "parallel.expert_tensor: 3 does not divide model.moe.expert_ffn_hidden (14336)",
        ),
        (
            EP8,
            ["parallel.expert_tensor=2"],
            "parallel.expert_tensor: expert x expert_tensor = 8 x 2 does not divide tensor x "
            "context x data = 1 x 1 x 8 = 8",
        ),
        (
            EP8,
            ["parallel.tensor=2", "parallel.data=2", "parallel.expert_tensor=1"],
            "parallel.expert_tensor: expert x expert_tensor = 8 x 1 does not divide tensor x "
            "context x data = 2 x 1 x 2 = 4",
        ),
        (
            EP8,
            ["model.moe.redundant_experts=-1"],
            "model.moe.redundant_experts: Input should be greater than or equal to 0 (got -1)",
        ),
        (
            EP8,
            ["model.moe.redundant_experts=3"],
            "model.moe.redundant_experts: experts + redundant_experts = 8 + 3 = 11 is not a "
            "multiple of parallel.expert (8); allowed: a count that makes it one, e.g. 8",
        ),
        (
            EP8,
            ["model.moe.routing.kind=histogram", "model.moe.routing.histogram=[1, 2, 3]"],
            "model.moe.routing.histogram: 3 counts for model.moe.experts (8); allowed: one "
            "count per expert, 8 of them",
        ),
        (
            EP8,
            ["model.moe.routing.kind=histogram"],
            "model.moe.routing.histogram: required with kind: histogram",
        ),
        (
            EP8,
            ["model.moe.routing.kind=zipf", "model.moe.routing.zipf_s=-1.0"],
            "model.moe.routing.zipf_s: Input should be greater than or equal to 0 (got -1.0)",
        ),
        (
            EP8,
            ["model.moe.routing.kind=pareto"],
            "model.moe.routing.kind: Input should be 'uniform', 'zipf', 'hot' or 'histogram'",
        ),
        (
            EP8,
            ["model.moe.max_nodes_per_token=0"],
            "model.moe.max_nodes_per_token: Input should be greater than or equal to 1",
        ),
        (
            EP8,
            ["parallel.zero_stage=3"],
            "parallel.zero_stage: ZeRO-3 (or FSDP) with expert parallelism or expert tensor "
            "parallelism is not modelled; allowed: 0, 1, 2",
        ),
        (
            DENSE,
            ["parallel.expert=2"],
            "parallel.expert: needs model.moe (a mixture-of-experts model); allowed: 1",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_key(path, overrides, message):
    args = ["run", str(path)] + [a for o in overrides for a in ("--set", o)]
    result = CliRunner().invoke(main, args)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"pipesim: error: {path}: {message}")
    assert result.stderr.count("\n") == 1


def test_an_expert_tensor_below_tensor_folds_tensor_ranks_into_the_expert_groups():
    # Megatron-Core's MoE parallel folding: TP 2 with expert_tensor 1 and 4 data-parallel
    # ranks gives 8 ranks a stage, one EP 8 group of them, each expert held once
    sets = ["parallel.tensor=2", "parallel.data=4", "parallel.expert_tensor=1"]
    args = ["run", str(EP8), "--format", "json"] + [a for o in sets for a in ("--set", o)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    moe = json.loads(result.stdout)["moe"]
    assert (moe["expert_parallel"], moe["expert_tensor"]) == (8, 1)
    assert moe["placement"] == "EP 8 inside one node"
    # each GPU dispatches its 4,096 tokens' 2 copies of 4,096 bf16 elements, 7/8 off the GPU
    assert moe["all_to_all_intra_node_bytes"] == 7 / 8 * 4096 * 2 * 4096 * 2
