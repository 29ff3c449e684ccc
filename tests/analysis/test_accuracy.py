"""Which published rows a scenario's error band comes from, and what it says without any.

The regime tests run on a small ledger made here (so that they hold however the real one
grows); the scenario tests read the packaged one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim.analysis.accuracy import (
    AccuracyBand,
    band,
    costs_kind,
    given_band,
    ledger,
    parameter_count,
    regime_key,
    scenario_bands,
    serving_bands,
)
from pipesim.analysis.plan.accuracy import ranking_text
from pipesim.scenario.build import load_scenario
from tests.cluster.accuracy_bands import LedgerRow, summary

SCENARIOS = Path(__file__).parents[2] / "scenarios"


def row(
    id_, error, held_out=True, gpu="h100-sxm", gpus=64, params=7e9, quantity="step_time", moe=False
):
    return LedgerRow(id_, quantity, held_out, gpu, gpus, params, "a paper", error, "x.csv", moe)


LEDGER = summary(
    [
        row("h1", 0.02, gpus=48),
        row("h2", -0.04, gpus=512),
        row("h3", 0.10, gpus=768, params=70e9),
        row("h4", 0.01, held_out=False, gpus=96),
        row("big", -0.03, gpus=6144, params=462e9),
        row("a1", 0.20, held_out=False, gpu="a100-sxm-80gb", gpus=1024),
        row("t1", 0.08, gpu="h100-sxm", gpus=4, quantity="ttft"),
        row("m1", -0.30, gpus=256, params=235e9, moe=True),
        row("m2", 0.40, gpus=1024, params=671e9, moe=True),
    ]
)


def test_h100_at_a_thousand_gpus_takes_its_held_out_rows_of_up_to_1024_gpus():
    found = band("step_time", "h100-sxm", 1024, 13e9, data=LEDGER)
    assert found == AccuracyBand(
        "step_time/H100/9-1024",
        "step_time",
        "model-derived",
        4,
        3,
        4.0,
        10.0,
        "model-derived step time: typically within ±4.0% (max 10.0%) on the 3 held-out of 4 "
        "published H100 runs of 48-768 GPUs",
        "held_out",
    )


def test_beyond_a_thousand_gpus_the_larger_regime_and_a_caveat_past_its_rows():
    found = band("step_time", "h100-sxm", 16384, 1e12, data=LEDGER)
    assert found.regime == "step_time/H100/over-1024"
    assert (found.rows, found.held_out, found.max_pct) == (1, 1, 3.0)
    assert found.text == (
        "model-derived step time: within ±3.0% on the 1 held-out of 1 published H100 run of "
        "6,144 GPUs; this model's 1,000.0B parameters lie outside the rows' 462.0B-462.0B, "
        "its 16,384 GPUs far outside their 6,144"
    )


def test_a100_rows_that_are_all_calibration_say_so():
    found = band("step_time", "a100-sxm-40gb", 512, data=LEDGER)
    assert (found.regime, found.basis, found.held_out) == ("step_time/A100/9-1024", "all", 0)
    assert found.median_pct == found.max_pct == 20.0  # one row: its |error|, no "typically"
    assert found.text == (
        "model-derived step time: within ±20.0% on 1 published A100 run of 1,024 GPUs "
        "(calibration rows: none held out)"
    )


def test_l40s_without_rows_says_so_and_quotes_the_nearest_gpu_by_peak():
    found = band("step_time", "l40s", 8, data=LEDGER)
    # L40S's 362 dense TFLOP/s is nearer the A100's 312 than the H100's 989
    assert (found.rows, found.median_pct, found.max_pct) == (0, None, None)
    assert found.nearest == "step_time/A100/9-1024"
    assert found.text.startswith(
        "model-derived step time: no published L40S run in pipesim's ledger; nearest: "
        "within ±20.0% on 1 published A100 run"
    )


def test_a_family_without_rows_at_this_scale_quotes_its_nearest_scale():
    found = band("step_time", "h100-sxm", 8, data=LEDGER)
    assert found.nearest == "step_time/H100/9-1024" and found.rows == 0
    assert found.text.startswith(
        "model-derived step time: no published H100 run of 1-8 GPUs in pipesim's ledger; "
        "nearest: typically within ±4.0%"
    )


def test_a_quantity_without_any_row_invents_no_number():
    found = band("peak_memory", "h100-sxm", 64, data=LEDGER)
    assert (found.nearest, found.max_pct) == (None, None)
    assert (
        found.text == "model-derived peak memory: no published H100 measurement in pipesim's ledger"
    )
    tpot = band("tpot", "h100-sxm", 4, data=LEDGER)
    assert tpot.text.endswith("no published H100 measurement in pipesim's ledger")


def test_regime_keys():
    assert regime_key("step_time", "h100-sxm", 8) == "step_time/H100/1-8"
    assert regime_key("step_time", "h100-sxm", 9) == "step_time/H100/9-1024"
    assert regime_key("step_time", "b200", 1025) == "step_time/B200/over-1024"
    assert regime_key("ttft", "a100-sxm-40gb", 8) == "ttft/A100"
    assert regime_key("step_time", "h100-sxm", 256, moe=True) == "step_time/H100/9-1024/moe"
    assert regime_key("ttft", "h100-sxm", 4, moe=True) == "ttft/H100"  # step time alone


def test_a_mixture_of_experts_step_takes_the_moe_rows_and_a_dense_one_never_does():
    moe = band("step_time", "h100-sxm", 512, 235e9, data=LEDGER, moe=True)
    assert (moe.regime, moe.rows, moe.held_out) == ("step_time/H100/9-1024/moe", 2, 2)
    assert (moe.median_pct, moe.max_pct) == (35.0, 40.0)
    assert moe.text == (
        "model-derived step time: within ±40.0% on the 2 held-out of 2 published H100 MoE "
        "runs of 256-1,024 GPUs"
    )
    dense = band("step_time", "h100-sxm", 512, 235e9, data=LEDGER)
    assert (dense.regime, dense.max_pct) == ("step_time/H100/9-1024", 10.0)  # h1-h4 alone
    # no MoE row on A100: the nearest MoE regime by peak, never the A100's dense rows
    a100 = band("step_time", "a100-sxm-80gb", 64, data=LEDGER, moe=True)
    assert (a100.rows, a100.nearest) == (0, "step_time/H100/9-1024/moe")
    assert a100.text.startswith(
        "model-derived step time: no published A100 MoE run in pipesim's ledger; nearest: "
        "within ±40.0% on the 2 held-out of 2 published H100 MoE runs"
    )


def test_explicit_costs_are_exact_for_the_costs_given():
    bands = scenario_bands(load_scenario(SCENARIOS / "gpipe-vs-1f1b.yaml"))
    assert list(bands) == ["step_time"]
    (given,) = bands.values()
    assert (given.costs, given.regime, given.median_pct) == ("given", "given_costs", None)
    assert given.text == next(r["text"] for r in ledger()["regimes"] if r["key"] == "given_costs")
    assert "exact for the costs given" in given.text


def test_a_model_on_32_h100s_takes_the_packaged_h100_regime():
    bands = scenario_bands(load_scenario(SCENARIOS / "llama-70b-4x8-h100.yaml"))
    assert list(bands) == ["step_time", "peak_memory"]
    step = bands["step_time"]
    assert step.regime == "step_time/H100/9-1024"  # TP 8 x PP 4 x DP 1
    assert step == band("step_time", "h100-sxm", 32, 68_984_668_160)
    assert bands["peak_memory"].regime == "peak_memory/H100"


def test_a_moe_scenario_takes_the_packaged_moe_regime_and_its_memory_band_stays_dense():
    bands = scenario_bands(load_scenario(SCENARIOS / "qwen3-235b-a22b-512xh100.yaml"))
    step = bands["step_time"]
    assert step.regime == "step_time/H100/9-1024/moe"  # PP 16 x TP 4 x DP 8
    packaged = next(r for r in ledger()["regimes"] if r["key"] == step.regime)
    assert (step.rows, step.median_pct) == (packaged["rows"], packaged["held_out_median_pct"])
    assert "published H100 MoE runs" in step.text
    assert bands["peak_memory"].regime == "peak_memory/H100"


def test_the_parameter_count_of_llama_2_70b():
    # per layer: attention 8192 x (8192 + 2 x 1024) + 8192^2 = 150,994,944; gated MLP
    # 3 x 8192 x 28,672 = 704,643,072; biases 18,432 + 65,536; norms 4 x 8192: 855,754,752.
    # 80 layers, plus the embedding and the head, 32,000 x 8192 each.
    spec = load_scenario(SCENARIOS / "llama-70b-4x8-h100.yaml").spec
    assert parameter_count(spec, "x") == 80 * 855_754_752 + 2 * 32_000 * 8192


def test_decode_and_forward_modes_name_their_quantities():
    decode = scenario_bands(load_scenario(SCENARIOS / "llama-70b-serve-8xh100.yaml"))
    assert [b.regime for b in decode.values()] == ["ttft/H100", "tpot/H100"]
    forward = scenario_bands(
        load_scenario(SCENARIOS / "llama-70b-4x8-h100.yaml", ["pipeline.mode=forward"])
    )
    step = forward["step_time"]
    assert step.text.startswith("model-derived forward time: no published forward-only run")
    assert step.median_pct is None


def test_serving_bands_follow_where_the_costs_came_from():
    spec = load_scenario(SCENARIOS / "gpipe-vs-1f1b.yaml").spec
    assert serving_bands(spec, "hand-typed", "x")["latency"].costs == "given"
    assert serving_bands(spec, "profile", "x")["latency"].regime == "profile"


@pytest.mark.parametrize(
    ("typical", "gap", "text"),
    [
        (None, 1.0, "no published row to weigh ranking differences against"),
        (3.0, None, "step-time differences under the typical ±3.0% are not significant"),
        (
            3.0,
            0.5,
            "step-time differences under the typical ±3.0% are not significant: the "
            "runner-up, 0.50% slower, is not told apart from the winner",
        ),
        (
            3.0,
            4.25,
            "step-time differences under the typical ±3.0% are not significant; the "
            "runner-up is 4.25% slower, outside it",
        ),
    ],
)
def test_ranking_text(typical, gap, text):
    assert ranking_text(typical, gap) == text


def test_a_profile_is_measured_costs_and_a_model_derives_them():
    spec = load_scenario(SCENARIOS / "gpipe-vs-1f1b.yaml").spec
    assert costs_kind(spec) == "given_costs"
    measured = spec.model_copy(
        update={"costs": spec.costs.model_copy(update={"profile": Path("p.json")})}
    )
    assert costs_kind(measured) == "profile"
    assert "not in pipesim's ledger" in given_band("profile").text
    assert costs_kind(load_scenario(SCENARIOS / "llama-70b-4x8-h100.yaml").spec) is None
