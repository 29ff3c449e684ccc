"""``parallel.context`` as a user writes it: the 128K-token Llama-3-8B scenario runs, its
per-GPU activation memory divides by the context ranks, and bad context settings are one
``pipesim: error:`` line naming the file and the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim import load_scenario
from pipesim.cli import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"
LONG = str(SCENARIOS / "llama3-8b-128k-context.yaml")
HAND_TYPED = str(SCENARIOS / "gpipe-vs-1f1b.yaml")

# Llama-3-8B, one layer on one GPU of TP 4 (sequence parallel) x CP 8: s = 131072 / 8 =
# 16384 tokens, sbh = 16384 x 4096. Activation bytes (Korthikanti, flash attention, GQA,
# SwiGLU) are (10 sbh + 4 sbh + 4 s g d + 6 s f) / t with g d = 1024, f = 14336.
SBH = 16384 * 4096
LAYER = (10 * SBH + 4 * SBH + 4 * 16384 * 1024 + 6 * 16384 * 14336) // 4
FIRST_STAGE = 16 * LAYER + SBH // 4  # 16 layers and the embedding's dropout mask
LAST_STAGE = 16 * LAYER + 4 * SBH // 4 + 4 * 16384 * 128256 // 4  # + final norm, fp32 logits


def run_json(*sets: str) -> dict:
    args = ["run", LONG, "--format", "json"]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_128k_scenario_runs_from_python_m_pipesim():
    done = subprocess.run(
        [sys.executable, "-m", "pipesim", "run", LONG], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "peak memory" in done.stdout and "fits" in done.stdout


def test_per_gpu_activation_memory_divides_by_the_context_ranks():
    # 1F1B on 2 devices: device 0 holds 2 microbatches at its peak, device 1 one.
    at_8 = [d["peak_activation_bytes"] for d in run_json()["per_device"]]
    assert at_8 == [2 * FIRST_STAGE, LAST_STAGE]
    at_4 = [d["peak_activation_bytes"] for d in run_json("parallel.context=4")["per_device"]]
    assert at_4 == [2 * a for a in at_8]
    at_1 = run_json("parallel.context=1")
    assert [d["peak_activation_bytes"] for d in at_1["per_device"]] == [8 * a for a in at_8]
    assert at_1["oom"] is True


def test_all_to_all_exposes_what_the_ring_hides():
    # TP 1 x CP 8 inside one node: the ring's key/value chunks hide behind the attention
    # blocks, the all-to-all's four re-shardings a layer sit on the critical path.
    ring = run_json("parallel.tensor=1")
    all_to_all = run_json("parallel.tensor=1", "parallel.context_mode=all-to-all")
    assert all_to_all["makespan_ms"] > ring["makespan_ms"]
    assert [d["peak_activation_bytes"] for d in all_to_all["per_device"]] == [
        d["peak_activation_bytes"] for d in ring["per_device"]
    ]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ["parallel.context=3"],
            "parallel.context: 3: does not cut model.seq_len (131072) into 2 x 3 equal chunks",
        ),
        (
            ["parallel.context_mode=all-to-all", "parallel.tensor=8"],
            "parallel.context: 8: all-to-all (parallel.context_mode) splits model.heads (32) "
            "over parallel.tensor x parallel.context = 8 x 8 GPUs, which does not divide it",
        ),
        (
            ["parallel.context_mode=all-to-all"],
            "parallel.context: 8: all-to-all (parallel.context_mode) splits model.kv_heads (8) "
            "over parallel.tensor x parallel.context = 4 x 8 GPUs, which does not divide it",
        ),
        (
            ["model.flash_attention=false"],
            "parallel.context: 8: needs model.flash_attention: true",
        ),
        (["parallel.context_mode=ulysses"], "parallel.context_mode: Input should be 'ring' or"),
    ],
)
def test_bad_context_settings_are_one_line_naming_the_field(sets, message):
    args = ["run", LONG]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"pipesim: error: {LONG}: {message}")
    assert result.stderr.count("\n") == 1


def test_context_without_a_model_section_is_refused():
    result = CliRunner().invoke(main, ["run", HAND_TYPED, "--set", "parallel.context=2"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"pipesim: error: {HAND_TYPED}: parallel.context: only used with a model section "
        "(hand-typed costs are already per GPU)\n"
    )


def test_serving_and_decode_keep_one_context_rank():
    serve = str(SCENARIOS / "llama-70b-serve-8xh100.yaml")
    result = CliRunner().invoke(main, ["serve", serve, "--set", "parallel.context=2"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"pipesim: error: {serve}: parallel.context: 2: context parallelism is modelled for "
        "training and forward steps; decode and serving allow 1\n"
    )


@pytest.mark.parametrize("name", ["llama-70b-4x8-h100.yaml", "microbatch-tradeoff.yaml"])
def test_one_context_rank_is_the_scenario_without_it(name):
    path = SCENARIOS / name
    plain, explicit = load_scenario(path), load_scenario(path, ["parallel.context=1"])
    assert explicit.costs == plain.costs
    assert explicit.accounting == plain.accounting
    assert (explicit.tail_ms, explicit.topology) == (plain.tail_ms, plain.topology)
