"""Costs derived from one job description: the bundled model scenarios (and a few of their
variants) give exactly the costs, tail and accounting they gave before the derivation moved
to ``pipesim.cluster`` (``data/job_costs.json``, written by the code before the move)."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import pytest

from pipesim import load_scenario
from pipesim.cluster import token_steps
from pipesim.cluster.inference import ROOFLINE
from pipesim.scenario.build import build_scenario, parse_spec, read_mapping

ROOT = Path(__file__).parents[2]
GOLDEN = Path(__file__).parent / "data" / "job_costs.json"
LLAMA = "scenarios/llama-70b-4x8-h100.yaml"
GPT = "scenarios/gpt-nvlink-vs-pcie.yaml"
DECODE_MODEL = {  # decode-pipeline-fill with its model (Llama-2-13B) instead of typed costs
    "model": {"layers": 40, "hidden": 5120, "heads": 40, "seq_len": 4096, "vocab": 32000},
    "hardware": {"gpu": "a100-sxm-80gb", "link": "nvlink4"},
}
CASES = {
    "llama": (LLAMA, []),
    "llama-zero3-dp2": (
        LLAMA,
        ["parallel.data=2", "parallel.zero_stage=3", "model.global_batch=64"],
    ),
    "llama-zero1-dp2-overlap": (
        LLAMA,
        [
            "parallel.data=2",
            "parallel.zero_stage=1",
            "parallel.dp_overlap=true",
            "model.global_batch=64",
        ],
    ),
    "llama-forward": (LLAMA, ["pipeline.mode=forward"]),
    "plan-llama": ("scenarios/plan-llama-70b-64xh100.yaml", []),
    "gpt": (GPT, []),
    "gpt-dp2": (GPT, ["parallel.data=2", "model.global_batch=16"]),
    "gpt-fsdp-one-device": (
        GPT,
        [
            "parallel.data=4",
            "parallel.zero_stage=3",
            "pipeline.devices=1",
            "pipeline.schedule=gpipe",
        ],
    ),
    "microbatch-tradeoff": ("scenarios/microbatch-tradeoff.yaml", []),
    "microbatch-tradeoff-tp2": (
        "scenarios/microbatch-tradeoff.yaml",
        ["parallel.tensor=2", "parallel.tp_overlap=true"],
    ),
    "decode-model": ("scenarios/decode-pipeline-fill.yaml", DECODE_MODEL),
}


def load(name: str):
    """The scenario of one case: a file with ``--set`` overrides, or with sections replaced."""
    path, change = CASES[name]
    if isinstance(change, list):
        return load_scenario(ROOT / path, change)
    data = {**read_mapping(ROOT / path), **change}
    del data["costs"]
    return build_scenario(parse_spec(data, path), path)


def digest_of(scenario) -> dict:
    """What derivation produced, as plain JSON (floats round-trip exactly)."""
    accounting = scenario.accounting
    costs = dataclasses.asdict(scenario.costs)
    assert costs.pop("optimizer_ms") is None  # only torch's REDUCE_GRAD posts carry one
    assert costs.pop("moe_parts") is None  # only MoE stages under expert parallelism have parts
    held = None if accounting is None else dataclasses.asdict(accounting)
    if held is not None:  # only expert parallelism holds all-to-all buffers
        assert held.pop("transient_bytes") == ()
    return {
        "costs": costs,
        "tail_ms": scenario.tail_ms,
        "accounting": held,
        "links": [repr(scenario.topology.link(a, b)) for a, b in _hops(scenario.schedule)],
    }


def _hops(schedule) -> list[tuple[int, int]]:
    devices = schedule.devices
    return [(d, (d + 1) % devices) for d in range(devices) if devices > 1]


def _plain(value):
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("name", sorted(CASES))
def test_costs_are_what_they_were_before_the_move(name, monkeypatch):
    if name == "decode-model":
        # the digest predates the serving costs (docs/validation.md, "Serving"): with the
        # bare roofs the derivation gives it exactly; tests/cluster/test_inference.py pins
        # what the serving costs add to each token step
        roofline = functools.partial(token_steps.stage_iteration_ms, serving=ROOFLINE)
        monkeypatch.setattr(token_steps, "stage_iteration_ms", roofline)
    assert _plain(digest_of(load(name))) == json.loads(GOLDEN.read_text())[name]
